//! Submission: finishing the pending batch and submitting it under the in-flight cap (native:
//! waiting for the oldest submission; wasm: parking until the next async point), outside
//! command buffers through the same queue, and `sync`.

use super::device::{Device, State};
use super::submitter::poll_error;
use crate::Result;

impl Device {
    /// How long one wait for this device's GPU may take: `gpu_timeout`, under this thread's
    /// wait cap if any (`submitter::with_wait_cap`).
    pub(crate) fn gpu_wait(&self) -> std::time::Duration {
        super::submitter::capped(self.inner.opts.gpu_timeout)
    }

    /// Submits command buffers the caller recorded on [`Device::wgpu_device`] (interop), after
    /// the work wgtensor has recorded so far and through the same bounded in-flight queue, so
    /// outside work can neither overtake pending ops nor run past `max_in_flight`. In the
    /// browser, past the cap they wait (parked, as wgtensor's own batches) for the next async
    /// point ([`Device::sync_async`], a readback): await one before mapping what they write.
    ///
    /// Errors with the error the GPU reported for earlier work, if any, with wgpu's
    /// validation error for a command buffer it refuses (natively: one using a destroyed or
    /// mapped buffer; the buffers after it are not submitted; in the browser such an error
    /// comes from the next op), or
    /// [`Error::DeviceLost`](crate::Error::DeviceLost).
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{DType, Device, Tensor};
    /// let dev = Device::new()?;
    /// let src = Tensor::full(&dev, &[256], 3.0, DType::F32)?; // recorded, maybe not run yet
    /// let dst = Tensor::zeros(&dev, &[256], DType::F32)?;
    /// let (src_buf, src_off, bytes) = src.wgpu_buffer()?;
    /// let (dst_buf, dst_off, _) = dst.wgpu_buffer()?;
    /// let mut enc = dev.wgpu_device().create_command_encoder(&Default::default());
    /// enc.copy_buffer_to_buffer(src_buf, src_off, dst_buf, dst_off, bytes);
    /// dev.submit([enc.finish()])?; // runs after the ops that fill `src`
    /// assert_eq!(dst.to_vec::<f32>()?, vec![3.0; 256]);
    /// # Ok(()) }
    /// ```
    pub fn submit(&self, commands: impl IntoIterator<Item = wgpu::CommandBuffer>) -> Result<()> {
        let op = "submit";
        self.check(op)?;
        // Drawn before the lock: the caller's iterator may create or drop tensors (which lock
        // the device), and the device's mutex cannot be taken twice.
        let commands: Vec<wgpu::CommandBuffer> = commands.into_iter().collect();
        let mut st = self.lock_state();
        self.flush_locked(&mut st, op)?;
        for cmd in commands {
            let freed = st.pool.take_pending();
            #[cfg(target_arch = "wasm32")]
            if st.submitter.must_park(&self.inner.device) {
                st.submitter
                    .parked
                    .push_back(super::submitter::Parked { cmd, freed });
                continue;
            }
            // A buffer wgpu refuses here (another device's, or one using a destroyed or
            // mapped buffer) is this call's error, not the next op's.
            let (r, refused) = self.scoped_keep(op, || self.submit_locked(&mut st, cmd, op));
            st.pool.reuse(freed);
            r?;
            if let Some(e) = refused {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Submits the pending batch (if any) and returns the index of the last submission.
    pub(crate) fn flush(&self, op: &'static str) -> Result<()> {
        let mut st = self.lock_state();
        self.flush_locked(&mut st, op)
    }

    /// Finishes the pending batch and submits it. wasm: when the in-flight cap is reached the
    /// batch is parked instead, and the next async point submits it ([`Device::submit_parked`]).
    ///
    /// A batch wgpu refuses (at `finish` or `submit`), or one whose wait for room under the
    /// in-flight cap fails, is dropped whole, so the buffers it would have written hold
    /// garbage: they are poisoned with the error (`BufferPool::poison`), and ops or readbacks that
    /// touch them return it, never stale data.
    pub(crate) fn flush_locked(&self, st: &mut State, op: &'static str) -> Result<()> {
        let written = std::mem::take(&mut st.batch.written);
        let ((r, freed), err) = self.scoped_keep(op, || self.finish_and_submit(st, op));
        // What the batch freed becomes reusable only after the failure's marks are set: the
        // pool drops a buffer's mark when it destroys the buffer (a trim in `reuse`), so a
        // mark set after that would outlive its buffer.
        let reuse = |st: &mut State| {
            if let Some(f) = freed {
                st.pool.reuse(f);
            }
        };
        // Either way the batch is gone: wgpu refused it, or the wait for room under the
        // in-flight cap failed (a timeout) and dropped it unsubmitted. Ops recorded in it
        // already returned Ok, so their outputs must carry the error.
        let e = match (r, err) {
            (_, Some(e)) | (Err(e), None) => e,
            (Ok(()), None) => {
                reuse(st);
                return Ok(());
            }
        };
        // A lost device invalidates every buffer: report the loss, not its symptom (a poll
        // runs the device-lost callback if the loss is what made the batch invalid).
        #[cfg(not(target_arch = "wasm32"))]
        let _ = self.inner.device.poll(wgpu::PollType::Poll);
        // check_errors, not check: the state lock is held here (check's wasm parking bound
        // would take it again).
        let e = self.check_errors(op).err().unwrap_or(e);
        for buf in written {
            // Not the index-error buffer: it outlives every batch (checks and readbacks
            // of later ones write it), and a dropped batch's checks and clears never ran, so
            // it holds what the batches before wrote.
            if st.index_err.as_ref() != Some(&buf) {
                st.pool.poison(buf, e.clone());
            }
        }
        reuse(st);
        st.batch_error = Some(e.clone());
        Err(e)
    }

    /// Finishes and submits the batch; returns what it freed (reusable now that the batch
    /// was submitted or dropped), for the caller to hand back to the pool.
    fn finish_and_submit(
        &self,
        st: &mut State,
        op: &'static str,
    ) -> (Result<()>, Option<super::pool::Freed>) {
        let Some((cmd, arena)) = st.batch.finish(&self.inner.queue) else {
            return (Ok(()), None);
        };
        if let Some(a) = arena {
            st.pool.release(a);
        }
        // What was freed while this batch was recorded (its arena too) is reusable once the
        // batch is submitted.
        let freed = st.pool.take_pending();
        #[cfg(target_arch = "wasm32")]
        if st.submitter.must_park(&self.inner.device) {
            st.submitter
                .parked
                .push_back(super::submitter::Parked { cmd, freed });
            return (Ok(()), None);
        }
        (self.submit_locked(st, cmd, op), Some(freed))
    }

    fn submit_locked(
        &self,
        st: &mut State,
        cmd: wgpu::CommandBuffer,
        op: &'static str,
    ) -> Result<()> {
        let r = st
            .submitter
            .submit(&self.inner.device, &self.inner.queue, cmd, self.gpu_wait());
        r.map(|_| ()).map_err(|e| poll_error(op, e))
    }

    /// wasm: submits the parked batches in order, awaiting the oldest outstanding submission
    /// whenever the in-flight cap is reached. This is where the cap is enforced on wasm.
    #[cfg(target_arch = "wasm32")]
    pub(crate) async fn submit_parked(&self, op: &'static str) -> Result<()> {
        loop {
            let finished = {
                let mut st = self.lock_state();
                let st = &mut *st;
                st.submitter.prune(&self.inner.device);
                if st.submitter.parked.is_empty() {
                    // Every copy is submitted: dropped readbacks' buffers may be mapped now.
                    st.late_checks.iter_mut().for_each(|c| c.request());
                    return Ok(());
                }
                if st.submitter.in_flight() < st.submitter.max_in_flight {
                    let p = st.submitter.parked.pop_front().expect("not empty");
                    let r = self.submit_locked(st, p.cmd, op);
                    st.pool.reuse(p.freed);
                    r?;
                    continue;
                }
                st.submitter.oldest_finished()
            };
            match finished {
                Some(rx) => {
                    let _ = rx.await;
                }
                // Another task awaits the oldest one: wait for everything submitted so far.
                None => self.submitted_work_done().await,
            }
            self.check_errors(op)?;
        }
    }

    /// wasm: resolves once every submission made so far has finished.
    #[cfg(target_arch = "wasm32")]
    async fn submitted_work_done(&self) {
        let (tx, rx) = futures::channel::oneshot::channel();
        self.inner.queue.on_submitted_work_done(move || {
            let _ = tx.send(());
        });
        let _ = rx.await;
    }

    /// Submits pending work and waits until the GPU has finished all of it (native). The wait
    /// holds no lock: other threads keep recording and submitting meanwhile. Errors with
    /// [`Error::Readback`](crate::Error::Readback) past [`DeviceOptions::gpu_timeout`](crate::DeviceOptions::gpu_timeout).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn sync(&self) -> Result<()> {
        let op = "sync";
        self.check(op)?;
        let (newest, spin) = {
            let mut st = self.lock_state();
            if let Err(e) = self.flush_locked(&mut st, op) {
                // Reported here, so not again at the next sync.
                st.batch_error = None;
                return Err(e);
            }
            if let Some(e) = st.batch_error.take() {
                return Err(e);
            }
            (st.submitter.newest(), st.submitter.spin)
        };
        // Submissions finish in order: the newest one done means all of ours are.
        if let Some(done) = newest {
            let timeout = self.gpu_wait();
            super::submitter::wait_until(&self.inner.device, timeout, spin, || {
                done.load(std::sync::atomic::Ordering::Acquire)
            })
            .map_err(|e| poll_error(op, e))?;
        }
        self.lock_state().submitter.prune(&self.inner.device);
        self.check(op)?;
        // Everything submitted is done: the error bytes of timed-out readbacks are in.
        self.take_late_index_errors(op)?;
        // An index check ran since the last readback: read its error buffer (4 bytes plus
        // the buffer itself, appended by the readback path).
        if let Some(err) = self.pending_index_buffer() {
            self.read_bytes(op, &err, 0, 4)?;
        }
        Ok(())
    }

    /// Submits pending work and resolves once the GPU has finished it. On wasm this is one of
    /// the async points where batches parked by the in-flight cap are submitted (at most
    /// `max_in_flight` at a time); after it resolves, nothing is outstanding. Long loops on
    /// wasm should await it now and then: parked batches keep their buffers.
    pub async fn sync_async(&self) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        {
            self.sync()
        }
        #[cfg(target_arch = "wasm32")]
        {
            let op = "sync";
            // Not the parking bound: this is what drains the parked batches.
            self.check_errors(op)?;
            self.flush(op)?;
            self.submit_parked(op).await?;
            self.submitted_work_done().await;
            self.lock_state().submitter.prune(&self.inner.device);
            self.check_errors(op)?;
            // Readbacks dropped before their end (theirs is the only kind on wasm, where
            // readbacks do not time out): their maps are requested, so this waits for them.
            self.settle_late_checks().await;
            self.take_late_index_errors(op)?;
            if let Some(err) = self.pending_index_buffer() {
                self.read_bytes_async(op, &err, 0, 4).await?;
            }
            Ok(())
        }
    }
}
