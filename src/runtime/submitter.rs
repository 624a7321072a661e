//! Bounded in-flight submissions. Native: submitting past the cap first waits (polling, see
//! [`wait_until`]) for the oldest submission to finish. wasm: nothing may block, so a batch finished while the cap is reached is
//! not submitted but parked (in order, with the buffers freed while it was recorded); the
//! async points (`Device::sync_async`, `Tensor::to_vec_async`) submit the parked batches,
//! awaiting the oldest submission whenever the cap is reached. Either way at most
//! `max_in_flight` submissions are ever outstanding.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::Error;

thread_local! {
    /// A bound this thread puts on every GPU wait besides the device's `gpu_timeout`
    /// ([`with_wait_cap`]).
    static WAIT_CAP: std::cell::Cell<Option<Duration>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` with every GPU wait of this thread bounded by `cap` as well as by the device's
/// `gpu_timeout`: the cooperative-matrix self-test at device open, so a driver that hangs on
/// the tile cannot hold `Device::new` for the whole timeout (300 s by default).
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn with_wait_cap<T>(cap: Duration, f: impl FnOnce() -> T) -> T {
    /// Puts the thread's previous cap back however `f` ends (a caught panic included).
    struct Restore(Option<Duration>);
    impl Drop for Restore {
        fn drop(&mut self) {
            WAIT_CAP.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(WAIT_CAP.with(|c| c.replace(Some(cap))));
    f()
}

/// `timeout` under this thread's [`with_wait_cap`] bound, if any (`Device::gpu_wait`).
pub(crate) fn capped(timeout: Duration) -> Duration {
    WAIT_CAP
        .with(|c| c.get())
        .map_or(timeout, |c| c.min(timeout))
}

struct InFlight {
    done: Arc<AtomicBool>,
    /// Resolves when the submission has finished (wasm: awaited to make room under the cap).
    #[cfg(target_arch = "wasm32")]
    finished: Option<futures::channel::oneshot::Receiver<()>>,
}

/// wasm: a finished batch waiting for room under the in-flight cap.
#[cfg(target_arch = "wasm32")]
pub(crate) struct Parked {
    pub(crate) cmd: wgpu::CommandBuffer,
    /// Buffers freed while the batch was recorded: reusable once it is submitted.
    pub(crate) freed: super::pool::Freed,
}

pub(crate) struct Submitter {
    queue: VecDeque<InFlight>,
    pub(crate) max_in_flight: usize,
    /// How long a native wait keeps polling before it starts sleeping ([`spin_for`]).
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    pub(crate) spin: Duration,
    pub(crate) peak: usize,
    pub(crate) submissions: u64,
    /// wasm: finished batches not yet submitted because the cap was reached, oldest first.
    #[cfg(target_arch = "wasm32")]
    pub(crate) parked: VecDeque<Parked>,
}

impl Submitter {
    pub(crate) fn new(max_in_flight: usize, spin: Duration) -> Self {
        Submitter {
            queue: VecDeque::new(),
            max_in_flight: max_in_flight.max(1),
            spin,
            peak: 0,
            submissions: 0,
            #[cfg(target_arch = "wasm32")]
            parked: VecDeque::new(),
        }
    }

    /// Forgets submissions whose completion callback has fired, polling the device only when
    /// some have not (after a sync's wait all have: a poll would cost the synced op's round
    /// trip a second pass through wgpu's maintenance for nothing).
    pub(crate) fn prune(&mut self, device: &wgpu::Device) {
        self.forget_finished();
        if self.queue.is_empty() {
            return;
        }
        #[cfg(not(target_arch = "wasm32"))]
        let _ = device.poll(wgpu::PollType::Poll);
        #[cfg(target_arch = "wasm32")]
        let _ = device;
        self.forget_finished();
    }

    /// Forgets the submissions whose completion callback has fired, without polling.
    pub(crate) fn forget_finished(&mut self) {
        self.queue.retain(|s| !s.done.load(Ordering::Acquire));
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.queue.len()
    }

    /// Batches parked under the cap (always 0 on native, where submit waits instead).
    pub(crate) fn parked(&self) -> usize {
        #[cfg(target_arch = "wasm32")]
        return self.parked.len();
        #[cfg(not(target_arch = "wasm32"))]
        0
    }

    /// wasm: true when a batch finished now must be parked instead of submitted (the cap is
    /// reached, or older batches are parked and submissions must stay in order).
    #[cfg(target_arch = "wasm32")]
    pub(crate) fn must_park(&mut self, device: &wgpu::Device) -> bool {
        self.prune(device);
        !self.parked.is_empty() || self.queue.len() >= self.max_in_flight
    }

    /// wasm: the completion of the oldest outstanding submission, to await outside the lock.
    /// `None` when nothing is in flight or another task already awaits it.
    #[cfg(target_arch = "wasm32")]
    pub(crate) fn oldest_finished(&mut self) -> Option<futures::channel::oneshot::Receiver<()>> {
        self.queue.front_mut().and_then(|s| s.finished.take())
    }

    /// Native: blocks until at most `limit` submissions are outstanding, for at most
    /// `timeout` (see [`wait_until`]).
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn wait_until_at_most(
        &mut self,
        device: &wgpu::Device,
        limit: usize,
        timeout: Duration,
    ) -> Result<(), wgpu::PollError> {
        self.prune(device);
        while self.queue.len() > limit {
            let oldest = self.queue.front().expect("len > limit >= 0").done.clone();
            wait_until(device, timeout, self.spin, || {
                oldest.load(Ordering::Acquire)
            })?;
            self.queue.retain(|s| !s.done.load(Ordering::Acquire));
        }
        Ok(())
    }

    /// The completion flag of the newest submission, if any is outstanding.
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn newest(&self) -> Option<Arc<AtomicBool>> {
        self.queue.back().map(|s| s.done.clone())
    }

    /// Submits one command buffer, first making room under the cap (native; on wasm the
    /// caller has checked [`Submitter::must_park`]).
    pub(crate) fn submit(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        cmd: wgpu::CommandBuffer,
        #[cfg_attr(target_arch = "wasm32", allow(unused_variables))] timeout: Duration,
    ) -> Result<wgpu::SubmissionIndex, wgpu::PollError> {
        #[cfg(not(target_arch = "wasm32"))]
        self.wait_until_at_most(device, self.max_in_flight - 1, timeout)?;
        #[cfg(target_arch = "wasm32")]
        self.prune(device);
        let index = queue.submit([cmd]);
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        #[cfg(target_arch = "wasm32")]
        let (tx, finished) = futures::channel::oneshot::channel();
        queue.on_submitted_work_done(move || {
            flag.store(true, Ordering::Release);
            #[cfg(target_arch = "wasm32")]
            let _ = tx.send(());
        });
        self.queue.push_back(InFlight {
            done,
            #[cfg(target_arch = "wasm32")]
            finished: Some(finished),
        });
        self.submissions += 1;
        self.peak = self.peak.max(self.queue.len());
        Ok(index)
    }
}

/// How long a wait polls without sleeping on an adapter of `device_type` (the real one: a
/// `gpu_plans` device on lavapipe still hands its cores back): on a GPU 2 ms, which covers a
/// synced small op's whole round trip (tens of microseconds), because a sleep costs far more
/// than its request (Linux's default timer slack alone is 50 us, so `sleep(20 us)` returns
/// after about 70 us, four times CUDA's synced small op); on a CPU adapter none beyond the
/// first 64 polls, so the wait hands the cores back to the adapter's own threads.
pub(crate) fn spin_for(device_type: wgpu::DeviceType) -> Duration {
    if device_type == wgpu::DeviceType::Cpu {
        Duration::ZERO
    } else {
        Duration::from_millis(2)
    }
}

/// Native: polls `device` until `ready()` holds, for at most `timeout` (then
/// `PollError::Timeout`). Every wait of the runtime goes through here, never through a
/// blocking `PollType::Wait`: wgpu holds the device's resource lock for the whole of such a
/// wait, so while one thread waited, a buffer destroyed on another queued for that lock and
/// every further submit, write and map on the device queued behind it (the lock is fair to
/// writers), and nothing bounded the wait if the driver stalled. `Poll` only reads the fence
/// and runs the callbacks of finished work (ours set the flags `ready` reads), whichever
/// thread's work it was. Between polls the thread yields (for at least 64 polls and at least
/// `spin`, see [`spin_for`]), then sleeps with a growing pause, so a CPU adapter keeps its
/// cores and a GPU's short waits stay short.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn wait_until(
    device: &wgpu::Device,
    timeout: Duration,
    spin: Duration,
    mut ready: impl FnMut() -> bool,
) -> Result<(), wgpu::PollError> {
    let start = std::time::Instant::now();
    let mut pause = Duration::from_micros(20);
    let mut spins = 0u32;
    loop {
        device.poll(wgpu::PollType::Poll)?;
        if ready() {
            return Ok(());
        }
        if start.elapsed() >= timeout {
            return Err(wgpu::PollError::Timeout);
        }
        if spins < 64 || start.elapsed() < spin {
            spins += 1;
            std::thread::yield_now();
        } else {
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
        }
    }
}

/// The error a failed or timed-out wait becomes, naming the op.
pub(crate) fn poll_error(op: &'static str, e: wgpu::PollError) -> Error {
    match e {
        wgpu::PollError::Timeout => Error::Readback {
            op,
            msg: "timed out waiting for the GPU".into(),
        },
        other => Error::DeviceLost {
            op,
            msg: other.to_string(),
        },
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    /// A wait whose condition never holds ends with a timeout instead of blocking forever; one
    /// that holds returns at once.
    #[test]
    fn waits_are_bounded() {
        let dev = crate::Device::new().unwrap();
        let device = dev.wgpu_device();
        let start = std::time::Instant::now();
        let r = wait_until(device, Duration::from_millis(30), Duration::ZERO, || false);
        assert!(matches!(r, Err(wgpu::PollError::Timeout)), "{r:?}");
        assert!(start.elapsed() < Duration::from_secs(5));
        let ready = wait_until(device, Duration::from_millis(30), Duration::ZERO, || true);
        assert!(ready.is_ok());
        // A spin budget past the timeout still ends at the timeout.
        let start = std::time::Instant::now();
        let r = wait_until(
            device,
            Duration::from_millis(5),
            Duration::from_secs(60),
            || false,
        );
        assert!(matches!(r, Err(wgpu::PollError::Timeout)), "{r:?}");
        assert!(start.elapsed() < Duration::from_secs(5));
        // GPUs spin, CPU adapters do not.
        assert_eq!(spin_for(wgpu::DeviceType::Cpu), Duration::ZERO);
        assert!(spin_for(wgpu::DeviceType::DiscreteGpu) >= Duration::from_millis(1));
        // The error users see names the op.
        let e = poll_error("sync", wgpu::PollError::Timeout);
        assert!(e.to_string().contains("sync"), "{e}");
        assert!(crate::Device::with_options(crate::DeviceOptions {
            gpu_timeout: Duration::ZERO,
            ..Default::default()
        })
        .is_err());
    }
}
