//! The device handle: its limits, features and options, and the shared execution state (pool,
//! pending batch, in-flight queue, pipeline cache) behind one cheap-to-clone handle; opening
//! one is runtime/open.rs.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The per-batch param arena (uniform, written by the queue).
pub(crate) const PARAMS_USAGE: wgpu::BufferUsages =
    wgpu::BufferUsages::UNIFORM.union(wgpu::BufferUsages::COPY_DST);
/// Readback staging buffers.
pub(crate) const READBACK_USAGE: wgpu::BufferUsages =
    wgpu::BufferUsages::MAP_READ.union(wgpu::BufferUsages::COPY_DST);
/// Tensor storage: bound to kernels, copied in and out.
pub(crate) const STORAGE_USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);
use super::batch::Batch;
use super::bind_cache::BindGroupCache;
pub use super::options::DeviceOptions;
#[cfg(target_arch = "wasm32")]
use super::options::MAX_PARKED;
use super::pipeline::PipelineCache;
use super::pipeline_store::PipelineCacheStatus;
use super::pool::BufferPool;
use super::stats::DeviceStats;
use super::submitter::Submitter;
use crate::{DType, Error, Result};

pub(crate) struct State {
    pub(crate) pool: BufferPool,
    pub(crate) bind_groups: BindGroupCache,
    pub(crate) batch: Batch,
    pub(crate) submitter: Submitter,
    pub(crate) dispatches: u64,
    /// Elementwise outputs written into their donated input's buffer (src/ops/donate.rs).
    pub(crate) donations: u64,
    /// The failure of a submitted batch, for the next `sync` (once).
    pub(crate) batch_error: Option<Error>,
    /// Device-side index checks (src/ops/index_check.rs): the error buffer (created on first
    /// use), the ops it can name (its op codes index this list), and whether a check ran since
    /// the buffer was last read.
    pub(crate) index_err: Option<wgpu::Buffer>,
    pub(crate) index_ops: Vec<&'static str>,
    pub(crate) index_check_pending: bool,
    /// Readbacks that timed out holding the error buffer's bytes (src/runtime/late_check.rs).
    pub(crate) late_checks: Vec<super::late_check::LateCheck>,
}

impl State {
    /// The error of a failed batch that wrote `buf`, if any (the pool holds the marks).
    pub(crate) fn poisoned_by(&self, buf: &wgpu::Buffer) -> Option<Error> {
        self.pool.poisoned_by(buf)
    }
}

pub(crate) struct Inner {
    pub(crate) id: u64,
    pub(crate) adapter: wgpu::Adapter,
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) info: wgpu::AdapterInfo,
    pub(crate) limits: wgpu::Limits,
    pub(crate) features: wgpu::Features,
    pub(crate) opts: DeviceOptions,
    pub(crate) param_slot: u64,
    pub(crate) memory_limit: u64,
    /// Most bytes one storage binding covers (see `DeviceOptions::max_binding_bytes`).
    pub(crate) binding_limit: u64,
    pub(crate) caps: super::caps::Caps,
    /// `caps.coop16` was set by `gpu_plans` + `cooperative_matrix` on a CPU adapter, not by
    /// the adapter: f16 GEMMs run the cooperative-matrix tile over emulated fragments.
    pub(crate) coop_emulated: bool,
    /// Why the device runs without the cooperative-matrix tile although it was asked for and
    /// offered: the refused device request, or its self-test's error (`ops::gemm::probe`).
    pub(crate) coop_refused: Option<crate::Error>,
    /// The random generator: (seed, next Philox counter). See `ops::random`.
    pub(super) rng: Mutex<(u64, u64)>,
    pub(super) state: Mutex<State>,
    pub(super) pipelines: Mutex<PipelineCache>,
    /// What opening the persisted pipeline cache did (`DeviceStats::pipeline_cache`).
    pub(super) pipeline_cache: PipelineCacheStatus,
    pub(super) lost: Arc<Mutex<Option<String>>>,
    pub(super) uncaptured: Arc<Mutex<Option<Error>>>,
    /// Set when `lost` or `uncaptured` may hold something.
    pub(super) flagged: Arc<AtomicBool>,
}

/// A GPU device. Clone is an `Arc` bump; every clone drives the same queue and batch.
///
/// The counterpart of PyTorch's `torch.device("cuda:0")` plus its caching allocator and
/// stream: it owns the wgpu device and queue, the buffer pool, the batch of recorded
/// dispatches and the bounded queue of submissions. Tensors keep their device alive. Open
/// one per adapter and share it; tensors of two `Device`s (even on the same adapter) cannot
/// be combined.
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("adapter", &self.inner.info.name)
            .field("backend", &self.inner.info.backend)
            .finish()
    }
}

/// The devices sharing the host-memory budget (`memory::HOST_HELD`): a device whose
/// allocation would pass it drops the others' reusable cached buffers too (`try_lock` only:
/// a device busy elsewhere keeps its cache, and no two state locks are ever waited on
/// together). Native only: on wasm32 a device is neither Send nor Sync, and the budget is
/// the browser's.
#[cfg(not(target_arch = "wasm32"))]
pub(super) static HOST_DEVICES: Mutex<Vec<std::sync::Weak<Inner>>> = Mutex::new(Vec::new());

thread_local! {
    /// The random stream of a warm-up call running on this thread (seed, next counter), apart
    /// from its device's: the warm-up's dropout masks do not move the caller's seeded stream.
    static PRIVATE_RNG: Cell<Option<(u64, u64)>> = const { Cell::new(None) };
}

/// The seed and first of `blocks` counters from this thread's warm-up stream, if it runs one.
fn private_counters(blocks: u64) -> Option<(u64, u64)> {
    PRIVATE_RNG.with(|r| {
        let (seed, start) = r.get()?;
        r.set(Some((seed, start.wrapping_add(blocks))));
        Some((seed, start))
    })
}

/// Runs `f` with this thread drawing random numbers from a private stream (restored after it,
/// also when it unwinds: on wasm32 it runs on the caller's thread).
pub(super) fn with_private_rng<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(Option<(u64, u64)>);
    impl Drop for Restore {
        fn drop(&mut self) {
            PRIVATE_RNG.with(|r| r.set(self.0));
        }
    }
    let _restore = Restore(PRIVATE_RNG.with(|r| r.replace(Some((0x5741_524d_5550, 0)))));
    f()
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave our counters half-updated in a way that
    // matters more than refusing all further work, so recover the guard.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Device {
    /// The adapter's name, vendor, device type (GPU or CPU) and backend.
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.inner.info
    }
    /// The limits the device was created with (the adapter's own): they bound the largest
    /// tensor ([`Error::TooLarge`]) and the grid sizes.
    pub fn limits(&self) -> &wgpu::Limits {
        &self.inner.limits
    }
    /// The dispatch grid for `groups` workgroups, split over x and y within the adapter's
    /// per-dimension limit (see [`grid_1d`](super::grid_1d)).
    pub(crate) fn grid_1d(&self, op: &'static str, groups: u64) -> Result<[u32; 3]> {
        super::grid_1d(
            op,
            groups,
            self.inner.limits.max_compute_workgroups_per_dimension,
        )
    }
    /// Most bytes one storage binding covers: the adapter's `max_storage_buffer_binding_size`
    /// or [`DeviceOptions::max_binding_bytes`], whichever is lower. Tensors may be larger (up
    /// to `max_buffer_size`): elementwise ops, reductions, softmax, GEMM,
    /// convolutions and batch norm split their work into windows that each fit a binding;
    /// other ops refuse them with [`Error::TooLarge`].
    pub fn max_binding_bytes(&self) -> u64 {
        self.inner.binding_limit
    }
    /// The byte alignment of a binding's offset (`min_storage_buffer_offset_alignment`).
    pub(crate) fn storage_align(&self) -> u64 {
        u64::from(self.inner.limits.min_storage_buffer_offset_alignment.max(4))
    }
    /// The wgpu features enabled on the device (SUBGROUP, SHADER_F16 and, natively on Vulkan,
    /// PIPELINE_CACHE when requested and available).
    pub fn features(&self) -> wgpu::Features {
        self.inner.features
    }
    /// The execution options the device was opened with.
    pub fn options(&self) -> &DeviceOptions {
        &self.inner.opts
    }
    /// The adapter facts the kernel planners use, read once when the device opened.
    pub fn caps(&self) -> &super::caps::Caps {
        &self.inner.caps
    }
    /// True where f16 GEMMs plan the cooperative-matrix tile ([`Caps::coop16`](super::Caps))
    /// without the feature: a CPU adapter opened with [`DeviceOptions::gpu_plans`] and
    /// [`DeviceOptions::cooperative_matrix`] (the default), which runs the tile over plain-WGSL fragments
    /// (shaders/lib/coop_frag_emu.wgsl) so that its conformance tests run without tensor cores.
    #[doc(hidden)]
    pub fn coop_emulated(&self) -> bool {
        self.inner.coop_emulated
    }
    /// Why f16 GEMMs run without cooperative matrices although
    /// [`DeviceOptions::cooperative_matrix`] (the default) asked for them and the adapter
    /// offers them: the adapter refused the device request with wgpu's experimental feature
    /// (the device was requested again without it), or the tile failed its self-test (a
    /// device with [`Caps::coop16`](super::Caps) multiplies a small f16 product on the tile
    /// when it opens and compares it with the exact sums; where compiling it fails or a value
    /// differs, the device runs f16 GEMMs on the FMA kernels; where the test loses the device
    /// or does not finish within 20 s, a fresh device is opened without the feature). `None`
    /// where the tile passed, or was never asked for or offered.
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{Device, DeviceOptions};
    /// let dev = Device::with_options(DeviceOptions::default())?;
    /// if let Some(e) = dev.cooperative_matrix_refused() {
    ///     eprintln!("f16 GEMMs on the FMA kernels: {e}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn cooperative_matrix_refused(&self) -> Option<&crate::Error> {
        self.inner.coop_refused.as_ref()
    }
    /// The shader runtime checks this device compiles its kernels with:
    /// [`DeviceOptions::shader_checks`] with [`ShaderChecks::Auto`](super::ShaderChecks::Auto)
    /// resolved for the adapter.
    pub fn shader_checks(&self) -> super::ShaderChecks {
        let cache = self.inner.pipelines.lock();
        cache.unwrap_or_else(|e| e.into_inner()).checks
    }
    /// True when [`DType::F16`] tensors can be created here (the SHADER_F16 feature is
    /// enabled); without it f16 ops return [`Error::MissingFeature`].
    pub fn supports_f16(&self) -> bool {
        self.inner.features.contains(wgpu::Features::SHADER_F16)
    }
    /// The underlying wgpu device, for interop: create pipelines, buffers and command
    /// encoders on it, and submit them with [`Device::submit`], which keeps them in order with
    /// wgtensor's pending work and under the in-flight cap (the queue itself is not exposed,
    /// since submitting on it directly would bypass both).
    ///
    /// wgpu runs callbacks (`map_async`, `on_submitted_work_done`) inside whichever thread's
    /// poll finds them ready, and wgtensor polls while it submits, possibly holding this
    /// device's lock: a callback must not call into this `Device` (its tensors included), or it
    /// waits on a lock its own thread holds. Set a flag or send on a channel instead, and act
    /// on it after the call that polled.
    pub fn wgpu_device(&self) -> &wgpu::Device {
        &self.inner.device
    }
    /// The wgpu adapter the device was opened on, for interop (e.g. to query its surface
    /// support).
    pub fn wgpu_adapter(&self) -> &wgpu::Adapter {
        &self.inner.adapter
    }

    /// Seeds the device's random generator and restarts its stream (PyTorch's
    /// `torch.manual_seed`): the same seed gives the same numbers from the same sequence of
    /// calls, on every backend.
    pub fn manual_seed(&self, seed: u64) {
        *lock(&self.inner.rng) = (seed, 0);
    }

    /// The seed and the first of `blocks` counters reserved for one random op; the next call
    /// starts after them, so streams never overlap. A warm-up call draws from a stream of its
    /// own (`private_counters`), so the caller's seeded sequence is the same
    /// with or without one.
    pub(crate) fn take_random_counters(&self, blocks: u64) -> (u64, u64) {
        if let Some(c) = private_counters(blocks) {
            return c;
        }
        let mut g = lock(&self.inner.rng);
        let start = g.1;
        g.1 = g.1.wrapping_add(blocks);
        (g.0, start)
    }

    /// True when both handles drive the same device.
    pub fn same(&self, other: &Device) -> bool {
        self.inner.id == other.inner.id
    }

    /// A snapshot of the device's counters: pipelines, dispatches, submissions, the in-flight
    /// queue and the pool's memory (PyTorch's `torch.cuda.memory_stats` and the like). Cheap
    /// enough to call every step; it does not wait for the GPU (only, like every op, for a
    /// submit in progress on another thread, which may wait for room under the in-flight
    /// cap: [`DeviceOptions::gpu_timeout`]). Counted from the device's
    /// open, which on an adapter with cooperative matrices includes the tile's self-test
    /// ([`DeviceOptions::cooperative_matrix`]): compare differences, not absolute counts.
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{DType, Device, Tensor};
    /// let dev = Device::new()?;
    /// for _ in 0..10 {
    ///     let x = Tensor::full(&dev, &[1024, 1024], 1.0, DType::F32)?;
    ///     x.relu()?; // freed at once: the next iteration reuses its buffer
    /// }
    /// dev.sync()?;
    /// let s = dev.stats();
    /// println!(
    ///     "{} dispatches in {} submissions, peak {} in flight; pool: {} hits, {} misses, peak {} MiB",
    ///     s.dispatches, s.submissions, s.peak_in_flight, s.pool.hits, s.pool.misses,
    ///     s.pool.peak_bytes >> 20,
    /// );
    /// # Ok(()) }
    /// ```
    pub fn stats(&self) -> DeviceStats {
        let compiled = lock(&self.inner.pipelines).compiled;
        let mut st = lock(&self.inner.state);
        // Forget finished submissions without polling: a poll runs wgpu callbacks, here under
        // the state lock, and the snapshot need not wait for any.
        st.submitter.forget_finished();
        DeviceStats {
            pipelines_compiled: compiled,
            dispatches: st.dispatches,
            donations: st.donations,
            submissions: st.submitter.submissions,
            in_flight: st.submitter.in_flight(),
            peak_in_flight: st.submitter.peak,
            parked: st.submitter.parked(),
            pool: st.pool.stats,
            memory_limit: self.inner.memory_limit,
            pipeline_cache: self.inner.pipeline_cache,
        }
    }

    /// Counts an output written into its donated input's buffer (src/ops/donate.rs).
    pub(crate) fn note_donation(&self) {
        lock(&self.inner.state).donations += 1;
    }

    /// Bytes of pooled buffers (live and cached) that every device of this process sharing
    /// the host-memory budget holds: the CPU adapters opened without
    /// [`DeviceOptions::memory_limit`], whose default budget is the process's (an allocation
    /// that would take all of them past it is [`Error::OutOfMemory`](crate::Error)).
    #[doc(hidden)]
    pub fn host_budget_held() -> u64 {
        super::memory::HOST_HELD.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Destroys cached pool buffers that are free now (live tensors are untouched).
    pub fn clear_pool(&self) {
        let mut st = lock(&self.inner.state);
        st.pool.clear();
        // Cached bind groups hold the destroyed buffers: let them go too.
        st.bind_groups.clear();
    }

    /// Why the device was lost, if it was.
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn lost_reason(&self) -> Option<String> {
        lock(&self.inner.lost).clone()
    }

    /// Errors out if the device was lost or wgpu reported an error outside an error scope, or
    /// (wasm) if too many finished batches are parked to record more work.
    pub(crate) fn check(&self, op: &'static str) -> Result<()> {
        self.check_errors(op)?;
        self.check_parked(op)
    }

    /// [`Device::check`] without the parking bound: for the async points that drain the
    /// parked batches (`sync_async`, readbacks), which must still run at the bound.
    pub(crate) fn check_errors(&self, op: &'static str) -> Result<()> {
        if self.inner.flagged.load(Ordering::Acquire) {
            if let Some(msg) = lock(&self.inner.lost).clone() {
                return Err(Error::DeviceLost { op, msg });
            }
            let taken = lock(&self.inner.uncaptured).take();
            // Cleared, then raised again if either slot was filled meanwhile (a callback
            // that ran between our reads and the clear).
            self.inner.flagged.store(false, Ordering::Release);
            if lock(&self.inner.lost).is_some() || lock(&self.inner.uncaptured).is_some() {
                self.inner.flagged.store(true, Ordering::Release);
            }
            if let Some(e) = taken {
                return Err(e);
            }
        }
        Ok(())
    }

    fn check_parked(&self, op: &'static str) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        let _ = (self, op);
        // wasm cannot block for room under the in-flight cap, so finished batches park until
        // the next async point; a loop that never awaits one would park (and hold the memory
        // of) batches without end. Past a bound, new work is refused before anything is
        // recorded, so nothing computed so far is lost.
        #[cfg(target_arch = "wasm32")]
        {
            let parked = self.lock_state().submitter.parked();
            if parked >= MAX_PARKED {
                return Err(Error::arg(
                    op,
                    format!(
                        "{parked} finished batches are waiting for room under the in-flight cap \
                         of {}: await Device::sync_async() (or a to_vec_async) in long loops",
                        self.inner.opts.max_in_flight
                    ),
                ));
            }
        }
        Ok(())
    }

    pub(crate) fn require_dtype(&self, op: &'static str, dtype: DType) -> Result<()> {
        if dtype == DType::F16 && !self.supports_f16() {
            return Err(Error::MissingFeature {
                op,
                feature: "SHADER_F16",
            });
        }
        Ok(())
    }

    pub(crate) fn lock_state(&self) -> MutexGuard<'_, State> {
        lock(&self.inner.state)
    }

    /// Runs `f` inside validation and out-of-memory error scopes (native), turning what wgpu
    /// reports into our errors. On wasm the scopes cannot be awaited synchronously, so errors
    /// arrive through the uncaptured-error handler and surface at the next sync/readback.
    pub(crate) fn scoped<R>(&self, op: &'static str, f: impl FnOnce() -> R) -> Result<R> {
        let (r, e) = self.scoped_keep(op, f);
        match e {
            Some(e) => Err(e),
            None => Ok(r),
        }
    }

    /// [`Device::scoped`] that keeps `f`'s result beside the error wgpu reported, if any.
    pub(crate) fn scoped_keep<R>(
        &self,
        op: &'static str,
        f: impl FnOnce() -> R,
    ) -> (R, Option<Error>) {
        #[cfg(not(target_arch = "wasm32"))]
        {
            // Internal errors too (a driver's shader compile failure): uncaught, they would
            // be reported later against whatever op polls next.
            let internal = self
                .inner
                .device
                .push_error_scope(wgpu::ErrorFilter::Internal);
            let oom = self
                .inner
                .device
                .push_error_scope(wgpu::ErrorFilter::OutOfMemory);
            let val = self
                .inner
                .device
                .push_error_scope(wgpu::ErrorFilter::Validation);
            let r = f();
            let val = pollster::block_on(val.pop());
            let oom = pollster::block_on(oom.pop());
            let internal = pollster::block_on(internal.pop());
            (r, oom.or(val).or(internal).map(|e| map_wgpu_error(op, e)))
        }
        #[cfg(target_arch = "wasm32")]
        {
            let _ = op;
            (f(), None)
        }
    }
}

impl Inner {
    /// [`Device::save_pipeline_cache`]; also run when the last handle drops.
    pub(crate) fn save_pipeline_cache(&self) -> Result<bool> {
        super::pipeline_store::save(&self.pipelines)
    }
}

impl Device {
    /// Writes the persisted pipeline cache ([`DeviceOptions::pipeline_cache`]) if pipelines
    /// were compiled since it was loaded or last saved and the driver's blob changed. The file
    /// is replaced atomically (a temporary file in the same directory, then a rename), so
    /// devices opening concurrently in other processes read the old or the new file, never a
    /// partial one. The device also saves when its last handle drops, ignoring errors there;
    /// call this to learn about them, or to save early in a long-running process.
    ///
    /// Returns `Ok(true)` when the file was written, `Ok(false)` when there was nothing to
    /// write (the cache is off or unsupported, see [`DeviceStats::pipeline_cache`], nothing new
    /// was compiled, or the blob is unchanged); always `Ok(false)` on wasm32. Errors with
    /// [`Error::Io`](crate::Error::Io) (op `"pipeline_cache"`, naming the path) when the
    /// directory or file cannot be written.
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{Device, DeviceOptions, PipelineCacheSetting, Tensor};
    /// let dir = std::env::temp_dir().join("wgtensor-doc-pipeline-cache");
    /// let dev = Device::with_options(DeviceOptions {
    ///     pipeline_cache: PipelineCacheSetting::Dir(dir.clone()),
    ///     ..Default::default()
    /// })?;
    /// // Empty the first time, Loaded { .. } afterwards (Unsupported off Vulkan).
    /// println!("pipeline cache: {:?}", dev.stats().pipeline_cache);
    /// let x = Tensor::from_slice(&dev, &[1.0f32, -1.0], &[2])?;
    /// assert_eq!(x.relu()?.to_vec::<f32>()?, vec![1.0, 0.0]);
    /// dev.save_pipeline_cache()?; // also attempted when the last handle drops
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok(()) }
    /// ```
    ///
    /// [`DeviceOptions::pipeline_cache`]: crate::DeviceOptions::pipeline_cache
    /// [`DeviceStats::pipeline_cache`]: crate::DeviceStats::pipeline_cache
    pub fn save_pipeline_cache(&self) -> crate::Result<bool> {
        self.inner.save_pipeline_cache()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last handle is gone: persist what was compiled. Best effort, since a drop cannot
        // report errors; `Device::save_pipeline_cache` does.
        let _ = self.save_pipeline_cache();
    }
}

pub(crate) fn map_wgpu_error(op: &'static str, e: wgpu::Error) -> Error {
    match e {
        wgpu::Error::OutOfMemory { source } => Error::OutOfMemory {
            op,
            msg: source.to_string(),
        },
        wgpu::Error::Validation { description, .. } => Error::Validation {
            op,
            msg: description,
        },
        other => Error::Validation {
            op,
            msg: other.to_string(),
        },
    }
}

// Native only: they open devices with the blocking `Device::new`.
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use crate::runtime::{Access, Kernel};

    static BROKEN: Kernel = Kernel::new(
        "broken",
        "@group(0) @binding(1) var<storage, read_write> y: array<T>;\n\
                 @compute @workgroup_size(64) fn main() { y[0] = undefined_symbol; }",
        "main",
        &[Access::ReadWrite],
    );

    #[test]
    fn invalid_shader_is_a_validation_error_not_a_panic() {
        let dev = Device::new().unwrap();
        let e = dev
            .pipeline("broken_op", &BROKEN, &[DType::F32], &[])
            .err()
            .expect("compiling an invalid shader must fail");
        assert!(
            matches!(
                e,
                Error::Validation {
                    op: "broken_op",
                    ..
                }
            ),
            "{e:?}"
        );
        // The device stays usable afterwards.
        let t = crate::Tensor::from_slice(&dev, &[1.0f32, 2.0], &[2]).unwrap();
        assert_eq!(
            t.add_scalar(1.0).unwrap().to_vec::<f32>().unwrap(),
            vec![2.0, 3.0]
        );
    }

    #[test]
    fn wgpu_out_of_memory_maps_to_our_variant() {
        let e = map_wgpu_error(
            "zeros",
            wgpu::Error::OutOfMemory {
                source: Box::new(std::io::Error::other("vkAllocateMemory failed")),
            },
        );
        assert!(matches!(e, Error::OutOfMemory { op: "zeros", .. }), "{e:?}");
        assert!(e.to_string().contains("vkAllocateMemory"));
    }
}
