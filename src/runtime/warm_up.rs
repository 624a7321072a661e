//! Ahead-of-time compilation: run a representative call once, off the caller's critical path.
//!
//! Pipelines are keyed by (kernel, dtype, override constants), never by shape, so on CPU
//! adapters one call of a model on a tiny input compiles exactly the pipelines its real calls
//! will use. On GPUs the planners also pick among a few kernel variants by problem size (64- or
//! 128-row tiles, a workgroup per row or split rows), so the warm-up call should have the real
//! calls' sizes there. Running that call on a background thread lets the app do other start-up
//! work (load weights, open a window) while the driver compiles. A real call that needs a pipeline the warm-up is compiling waits
//! for it (the pipeline cache is locked during a compile) instead of compiling it a second time.

use super::device::{with_private_rng, Device};
use crate::Result;

/// A warm-up started by [`Device::warm_up`]; [`WarmUp::wait`] blocks until its call returned
/// (its pipelines compiled, its work submitted).
///
/// Dropping it without waiting lets the warm-up run to completion in the background.
#[derive(Debug)]
#[must_use = "wait() reports whether the warm-up call failed"]
pub struct WarmUp {
    #[cfg(not(target_arch = "wasm32"))]
    handle: std::thread::JoinHandle<Result<()>>,
    #[cfg(target_arch = "wasm32")]
    result: Result<()>,
}

impl WarmUp {
    /// Waits for the warm-up call and returns its result (its first error, if any).
    pub fn wait(self) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        {
            self.handle.join().unwrap_or_else(|_| {
                Err(crate::Error::arg(
                    "warm_up",
                    "the warm-up closure panicked on its background thread",
                ))
            })
        }
        #[cfg(target_arch = "wasm32")]
        {
            self.result
        }
    }

    /// Whether the warm-up has finished (always true on wasm32, where it runs inline).
    pub fn is_finished(&self) -> bool {
        #[cfg(not(target_arch = "wasm32"))]
        {
            self.handle.is_finished()
        }
        #[cfg(target_arch = "wasm32")]
        {
            true
        }
    }
}

impl Device {
    /// Compiles ahead of time the pipelines that `run` needs, by running it once: pass the
    /// model's call on a tiny input (pipelines never depend on shapes; dtypes, options and
    /// activations do). On GPU adapters pass an input of the real sizes instead: the planners
    /// there choose tile and split variants by problem size, and a tiny input can leave the
    /// variants of the real calls (a few pipelines) to their first call. Natively `run`
    /// executes on a background thread and this returns at once; on wasm32, which has no threads, it runs before returning
    /// (WebGPU compiles asynchronously in the browser anyway). The results of `run` are
    /// discarded; its dispatches execute like any other work of the device (natively submitted
    /// when it returns successfully; [`WarmUp::wait`] then means compiled and submitted, not
    /// run). It draws random numbers (dropout in training mode) from a fixed stream of its
    /// own, so a seeded sequence ([`Device::manual_seed`]) is the same with or without a
    /// warm-up, and it does not sync the device: errors the device reports later (an index out
    /// of range) come from the caller's next sync or readback, as any op's (unless `run` itself
    /// reads a tensor back: a readback takes the device's pending errors, whoever's).
    ///
    /// ```
    /// use wgtensor::{Device, Tensor};
    /// # fn main() -> wgtensor::Result<()> {
    /// let dev = Device::new()?;
    /// // The model's call at its real sizes (on a CPU adapter a [1, 4] input would do).
    /// let warm = dev.warm_up(|d| {
    ///     let x = Tensor::from_slice(d, &vec![-1.5f32; 300 * 70], &[300, 70])?;
    ///     x.relu()?.mul(&x)?;
    ///     Ok(())
    /// });
    /// // ... other start-up work ...
    /// warm.wait()?;
    /// let before = dev.stats().pipelines_compiled;
    /// let x = Tensor::from_slice(&dev, &vec![0.5f32; 300 * 70], &[300, 70])?;
    /// x.relu()?.mul(&x)?.to_vec::<f32>()?;
    /// assert_eq!(dev.stats().pipelines_compiled, before);
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(not(target_arch = "wasm32"))]
    pub fn warm_up<F>(&self, run: F) -> WarmUp
    where
        F: FnOnce(&Device) -> Result<()> + Send + 'static,
    {
        let dev = self.clone();
        let handle = std::thread::spawn(move || {
            with_private_rng(|| run(&dev))?;
            // Submitted, not synced: a sync here would take (and report to `wait`) the
            // device-wide errors of the caller's own work (a pending index check, a failed
            // batch).
            dev.flush("warm_up")
        });
        WarmUp { handle }
    }

    /// Compiles ahead of time the pipelines that `run` needs, by running it once (see the
    /// native version: there it runs on a background thread; wasm32 has none, so it runs
    /// before returning and WebGPU compiles asynchronously in the browser).
    #[cfg(target_arch = "wasm32")]
    pub fn warm_up<F>(&self, run: F) -> WarmUp
    where
        F: FnOnce(&Device) -> Result<()>,
    {
        WarmUp {
            result: with_private_rng(|| run(self)),
        }
    }
}
