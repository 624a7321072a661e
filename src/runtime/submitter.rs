//! Bounded in-flight submissions. Native: submitting past the cap first blocks on the oldest
//! SubmissionIndex. wasm: nothing may block, so a batch finished while the cap is reached is
//! not submitted but parked (in order, with the buffers freed while it was recorded); the
//! async points (`Device::sync_async`, `Tensor::to_vec_async`) submit the parked batches,
//! awaiting the oldest submission whenever the cap is reached. Either way at most
//! `max_in_flight` submissions are ever outstanding.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

struct InFlight {
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    index: wgpu::SubmissionIndex,
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
    pub(crate) peak: usize,
    pub(crate) submissions: u64,
    /// wasm: finished batches not yet submitted because the cap was reached, oldest first.
    #[cfg(target_arch = "wasm32")]
    pub(crate) parked: VecDeque<Parked>,
}

impl Submitter {
    pub(crate) fn new(max_in_flight: usize) -> Self {
        Submitter {
            queue: VecDeque::new(),
            max_in_flight: max_in_flight.max(1),
            peak: 0,
            submissions: 0,
            #[cfg(target_arch = "wasm32")]
            parked: VecDeque::new(),
        }
    }

    /// Forgets submissions whose completion callback has fired.
    pub(crate) fn prune(&mut self, device: &wgpu::Device) {
        if self.queue.is_empty() {
            return;
        }
        #[cfg(not(target_arch = "wasm32"))]
        let _ = device.poll(wgpu::PollType::Poll);
        #[cfg(target_arch = "wasm32")]
        let _ = device;
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

    /// Native: blocks until at most `limit` submissions are outstanding.
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn wait_until_at_most(
        &mut self,
        device: &wgpu::Device,
        limit: usize,
    ) -> Result<(), wgpu::PollError> {
        self.prune(device);
        while self.queue.len() > limit {
            let oldest = self.queue.pop_front().expect("len > limit >= 0");
            device.poll(wgpu::PollType::Wait {
                submission_index: Some(oldest.index),
                timeout: None,
            })?;
            self.queue.retain(|s| !s.done.load(Ordering::Acquire));
        }
        Ok(())
    }

    /// Submits one command buffer, first making room under the cap (native; on wasm the
    /// caller has checked [`Submitter::must_park`]).
    pub(crate) fn submit(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        cmd: wgpu::CommandBuffer,
    ) -> Result<wgpu::SubmissionIndex, wgpu::PollError> {
        #[cfg(not(target_arch = "wasm32"))]
        self.wait_until_at_most(device, self.max_in_flight - 1)?;
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
            index: index.clone(),
            done,
            #[cfg(target_arch = "wasm32")]
            finished: Some(finished),
        });
        self.submissions += 1;
        self.peak = self.peak.max(self.queue.len());
        Ok(index)
    }
}
