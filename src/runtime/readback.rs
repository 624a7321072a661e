//! Reading buffers back to the host: a copy into a pooled staging buffer, submitted with the
//! pending batch, then mapped (blocking natively, awaited on wasm).

use super::device::{Device, READBACK_USAGE};
use super::index_errors::INDEX_ERR_BYTES;
use super::late_check::{request_map, LateCheck, MapReceiver};
#[cfg(not(target_arch = "wasm32"))]
use super::submitter::poll_error;
use crate::{Error, Result};

impl Device {
    /// Copies `bytes` bytes at `offset` of `src` to the host. Native: blocks.
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn read_bytes(
        &self,
        op: &'static str,
        src: &wgpu::Buffer,
        offset: u64,
        bytes: u64,
    ) -> Result<Vec<u8>> {
        let (staging, rb, mut rx) = self.start_readback(op, src, offset, bytes)?;
        // The copy was submitted before map_async, so the map callback fires once that
        // submission is done and some poll (this thread's or another's) collects it. Wait for
        // the callback itself, not for the newest submission of the device: other threads'
        // later work is none of this readback's business.
        let mut status = None;
        let spin = self.lock_state().submitter.spin;
        let timeout = self.gpu_wait();
        let waited = super::submitter::wait_until(&self.inner.device, timeout, spin, || {
            match rx.try_recv() {
                Ok(Some(s)) => {
                    status = Some(s);
                    true
                }
                // The callback was dropped without running: it never will.
                Err(_) => true,
                Ok(None) => false,
            }
        });
        if let Err(e) = waited {
            // Its map request may still be pending: never hand the buffer out again. When it
            // carries the error buffer's bytes (cleared on the device by the same batch), it is
            // kept until a later readback or sync reads them.
            match rb.index_errors_at {
                Some(at) => self
                    .lock_state()
                    .late_checks
                    .push(LateCheck::new(staging, at, rb.total, rx)),
                None => {
                    self.lock_state().pool.forget(&staging);
                    staging.destroy();
                }
            }
            return Err(poll_error(op, e));
        }
        self.lock_state().submitter.prune(&self.inner.device);
        // Earlier timed-out readbacks were submitted before this one: their maps are done,
        // and an index error they hold comes from an op recorded before this readback.
        let late = self.take_late_index_errors(op);
        let out = self.finish_readback(op, staging, rb, bytes, status);
        late.and(out)
    }

    /// Async readback (the wasm path; also works natively).
    pub(crate) async fn read_bytes_async(
        &self,
        op: &'static str,
        src: &wgpu::Buffer,
        offset: u64,
        bytes: u64,
    ) -> Result<Vec<u8>> {
        #[cfg(not(target_arch = "wasm32"))]
        {
            self.read_bytes(op, src, offset, bytes)
        }
        #[cfg(target_arch = "wasm32")]
        {
            let (staging, rb) = self.record_readback(op, src, offset, bytes)?;
            let mut guard = Unfinished {
                dev: self,
                staging,
                rb,
                rx: None,
                done: false,
            };
            // The copy must be submitted before its staging buffer is mapped.
            if let Err(e) = self.submit_parked(op).await {
                self.release_buffer(guard.finish());
                return Err(e);
            }
            guard.rx = Some(map_staging(&guard.staging, rb.total));
            let status = match guard.rx.as_mut() {
                Some(rx) => rx.await.ok(),
                None => None,
            };
            let staging = guard.finish();
            self.lock_state().submitter.prune(&self.inner.device);
            // As natively: earlier readbacks' error bytes come from ops recorded before these.
            let late = self.take_late_index_errors(op);
            let out = self.finish_readback(op, staging, rb, bytes, status);
            late.and(out)
        }
    }

    #[cfg(not(target_arch = "wasm32"))]
    #[allow(clippy::type_complexity)]
    fn start_readback(
        &self,
        op: &'static str,
        src: &wgpu::Buffer,
        offset: u64,
        bytes: u64,
    ) -> Result<(wgpu::Buffer, Staged, MapReceiver)> {
        let (staging, rb) = self.record_readback(op, src, offset, bytes)?;
        let rx = map_staging(&staging, rb.total);
        Ok((staging, rb, rx))
    }

    /// Copies the bytes to a fresh staging buffer and submits the batch (returns the staging
    /// buffer and what it holds). When an index check ran since the last readback, the error
    /// buffer is copied behind the data and cleared in the same batch.
    fn record_readback(
        &self,
        op: &'static str,
        src: &wgpu::Buffer,
        offset: u64,
        bytes: u64,
    ) -> Result<(wgpu::Buffer, Staged)> {
        if let Some(e) = self.lock_state().poisoned_by(src) {
            return Err(e);
        }
        let padded = bytes.div_ceil(4) * 4;
        // Room for the error buffer's bytes when a check is pending now; whether they are
        // copied is decided below, under the lock that records the copies.
        let tail = if self.pending_index_buffer().is_some() {
            INDEX_ERR_BYTES
        } else {
            0
        };
        let staging = self.alloc_buffer(op, padded + tail, READBACK_USAGE)?;
        // One lock for the poison test, the flag and the copies: a batch failing on another
        // thread in between would otherwise poison `src` after the test (and the copy, in a
        // fresh batch, would return its garbage as data), and another thread's index check
        // recorded between the copy and the clear of the error buffer would be wiped unread.
        // Now a check lands either before the copy (reported here) or after the clear, its
        // flag set for the next readback.
        let check = {
            let mut st = self.lock_state();
            if let Some(e) = st.poisoned_by(src) {
                drop(st);
                self.release_buffer(staging);
                return Err(e);
            }
            let check = if tail > 0 && st.index_check_pending {
                st.index_check_pending = false;
                st.index_err.clone()
            } else {
                None
            };
            self.record_copy_locked(&mut st, src, offset, &staging, 0, padded);
            if let Some(err) = &check {
                self.record_copy_locked(&mut st, err, 0, &staging, padded, tail);
                self.record_clear_locked(&mut st, err, tail);
            }
            check
        };
        // A batch dropped before this flush (another thread's failed flush after the copies
        // were recorded) took the copies with it and poisoned the staging buffer: its bytes
        // are stale, never the data.
        let flushed = self
            .flush(op)
            .and_then(|()| match self.lock_state().poisoned_by(&staging) {
                Some(e) => Err(e),
                None => Ok(()),
            });
        if let Err(e) = flushed {
            if check.is_some() {
                // The copy of the error buffer went with it: the next readback reads it.
                self.note_index_check();
            }
            self.release_buffer(staging);
            return Err(e);
        }
        let rb = Staged {
            total: padded + tail,
            index_errors_at: check.map(|_| padded),
        };
        Ok((staging, rb))
    }

    fn finish_readback(
        &self,
        op: &'static str,
        staging: wgpu::Buffer,
        rb: Staged,
        bytes: u64,
        status: Option<std::result::Result<(), wgpu::BufferAsyncError>>,
    ) -> Result<Vec<u8>> {
        // A lost device or an uncaptured error: the staging buffer is still given back (the
        // pool and the host budget count it until then), or forgotten where its map request
        // may be pending, as below. One that holds the error buffer's bytes (cleared on the
        // device since) waits, mapped, for the next readback or sync to read them. Errors only:
        // the data is here, and the parking bound (wasm) refuses new work, not a readback.
        if let Err(e) = self.check_errors(op) {
            match (status, rb.index_errors_at) {
                (Some(Ok(())), Some(at)) => {
                    let (tx, rx) = futures::channel::oneshot::channel();
                    let _ = tx.send(Ok(()));
                    self.lock_state()
                        .late_checks
                        .push(LateCheck::new(staging, at, rb.total, rx));
                }
                (Some(s), _) => {
                    if s.is_ok() {
                        staging.unmap();
                    }
                    self.release_buffer(staging);
                }
                (None, _) => {
                    self.lock_state().pool.forget(&staging);
                    staging.destroy();
                }
            }
            return Err(e);
        }
        let result = match status {
            Some(Ok(())) => {
                let out = match staging.get_mapped_range(0..rb.total) {
                    Ok(view) => {
                        let found = rb.index_errors_at.and_then(|at| {
                            self.index_error(&view[at as usize..(at + INDEX_ERR_BYTES) as usize])
                        });
                        match found {
                            Some(e) => Err(e),
                            None => Ok(view[..bytes as usize].to_vec()),
                        }
                    }
                    Err(e) => Err(Error::Readback {
                        op,
                        msg: e.to_string(),
                    }),
                };
                staging.unmap();
                out
            }
            Some(Err(e)) => Err(Error::Readback {
                op,
                msg: e.to_string(),
            }),
            None => {
                // Its map request may still be pending: never hand it out again.
                self.lock_state().pool.forget(&staging);
                staging.destroy();
                return Err(Error::Readback {
                    op,
                    msg: "the map callback never ran".into(),
                });
            }
        };
        self.release_buffer(staging);
        result
    }
}

/// wasm: a readback between its record and its map's outcome. Its future may be dropped there
/// (a `select!` against a timeout): the staging buffer then goes back to the pool, or is
/// forgotten by it when a map request may be pending, and error bytes it carries are kept as a
/// late check for the next readback or sync (src/runtime/late_check.rs).
#[cfg(target_arch = "wasm32")]
struct Unfinished<'a> {
    dev: &'a Device,
    staging: wgpu::Buffer,
    rb: Staged,
    /// Set once the map is requested.
    rx: Option<MapReceiver>,
    done: bool,
}

#[cfg(target_arch = "wasm32")]
impl Unfinished<'_> {
    /// The readback reached its end: the staging buffer is the caller's again.
    fn finish(&mut self) -> wgpu::Buffer {
        self.done = true;
        self.staging.clone()
    }
}

#[cfg(target_arch = "wasm32")]
impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let (staging, total) = (self.staging.clone(), self.rb.total);
        let Some(at) = self.rb.index_errors_at else {
            match self.rx.take() {
                // Its map request may be pending: never hand it out again.
                Some(_) => {
                    self.dev.lock_state().pool.forget(&staging);
                    staging.destroy();
                }
                None => self.dev.release_buffer(staging),
            }
            return;
        };
        let mut st = self.dev.lock_state();
        let check = match self.rx.take() {
            Some(rx) => LateCheck::new(staging, at, total, rx),
            None => {
                // The batch holding the copy may still be parked: mapping the buffer now would
                // fail that batch's submission.
                let mut c = LateCheck::parked(staging, at, total);
                if st.submitter.parked() == 0 {
                    c.request();
                }
                c
            }
        };
        st.late_checks.push(check);
    }
}

/// What a staging buffer holds: the data, then (when an index check was pending) the index
/// error buffer at `index_errors_at`; `total` bytes are mapped.
#[derive(Clone, Copy)]
pub(crate) struct Staged {
    total: u64,
    index_errors_at: Option<u64>,
}

/// Requests the map of a staging buffer whose copy has been submitted.
fn map_staging(staging: &wgpu::Buffer, total: u64) -> MapReceiver {
    let (tx, rx) = futures::channel::oneshot::channel();
    request_map(staging, total, tx);
    rx
}
