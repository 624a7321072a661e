//! Bounded in-flight submissions. Native: submitting past the cap first blocks on the oldest
//! SubmissionIndex. wasm: nothing may block, so `submit` only records the submission and the
//! cap is enforced at the async points (`Device::sync_async`, `Tensor::to_vec_async`), which
//! wait until the queue has drained to the cap before they return.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

struct InFlight {
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    index: wgpu::SubmissionIndex,
    done: Arc<AtomicBool>,
}

pub(crate) struct Submitter {
    queue: VecDeque<InFlight>,
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    pub(crate) max_in_flight: usize,
    pub(crate) peak: usize,
    pub(crate) submissions: u64,
}

impl Submitter {
    pub(crate) fn new(max_in_flight: usize) -> Self {
        Submitter {
            queue: VecDeque::new(),
            max_in_flight: max_in_flight.max(1),
            peak: 0,
            submissions: 0,
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

    /// Submits one command buffer, first making room under the cap (native).
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
        queue.on_submitted_work_done(move || flag.store(true, Ordering::Release));
        self.queue.push_back(InFlight {
            index: index.clone(),
            done,
        });
        self.submissions += 1;
        self.peak = self.peak.max(self.queue.len());
        Ok(index)
    }
}
