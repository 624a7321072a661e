//! Buffer allocation on a device: the binding-size checks, the memory budget, the pool, and
//! uploads. Freed buffers go back to the pool, reusable once no pending command can read them.

use super::device::{Device, State};
use crate::{Error, Result};

impl Device {
    /// Byte limit checks shared by every allocation. A tensor may be larger than one storage
    /// binding (ops that support it split their work into windows that each fit one; the
    /// others refuse it at launch, naming the binding limit), but not than one buffer.
    pub(crate) fn check_bytes(&self, op: &'static str, bytes: u64) -> Result<()> {
        let l = &self.inner.limits;
        // Kernels index with u32 and params carry u32 offsets: no tensor may exceed 4 GiB - 1
        // whatever the adapter reports.
        let (name, limit) = if l.max_buffer_size < u32::MAX as u64 {
            ("max_buffer_size", l.max_buffer_size)
        } else {
            ("u32 indexing (4 GiB - 1)", u32::MAX as u64)
        };
        // The request itself (buffers are whole 4-byte words): its size class is capped at
        // the limit (`pool::buffer_size`).
        if bytes.div_ceil(4) * 4 > limit {
            return Err(Error::TooLarge {
                op,
                bytes,
                limit_name: name,
                limit,
            });
        }
        Ok(())
    }

    /// A buffer of at least `bytes` bytes from the pool (or new).
    pub(crate) fn alloc_buffer(
        &self,
        op: &'static str,
        bytes: u64,
        usage: wgpu::BufferUsages,
    ) -> Result<wgpu::Buffer> {
        self.alloc_buffer_from(op, bytes, usage, false)
    }

    /// `scratch`: the buffer will only be written by commands recorded from now on (see
    /// [`BufferPool::take_scratch`]), so one freed earlier in this batch may be reused.
    pub(crate) fn alloc_buffer_from(
        &self,
        op: &'static str,
        bytes: u64,
        usage: wgpu::BufferUsages,
        scratch: bool,
    ) -> Result<wgpu::Buffer> {
        self.check(op)?;
        self.check_bytes(op, bytes)?;
        let mut st = self.lock_state();
        let cached = if scratch {
            st.pool.take_scratch(bytes, usage)
        } else {
            st.pool.take(bytes, usage)
        };
        if let Some(buf) = cached {
            return Ok(buf);
        }
        let size = st.pool.class(bytes);
        // A readback's staging buffer lives only until its copy is read: past a caller's
        // memory_limit it is still made (after the cache was dropped to make room), so
        // tensors that filled the budget can be read back, as PyTorch copies a tensor to the
        // host without a device allocation. The default CPU-adapter budget still holds
        // (lavapipe crashes past the host's memory instead of reporting it).
        match self.make_room_locked(&mut st, op, size) {
            Err(Error::OutOfMemory { .. })
                if usage == super::device::READBACK_USAGE
                    && self.inner.opts.memory_limit.is_some() => {}
            r => r?,
        }
        // Create under the lock so pool accounting and creation stay one step.
        let create = || {
            self.scoped(op, || {
                self.inner.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(op),
                    size,
                    usage,
                    mapped_at_creation: false,
                })
            })
        };
        let buf = match create() {
            // Out of device memory with buffers cached: drop the cache (and what the pending
            // batch freed, once submitted) and try once more, as PyTorch's caching allocator
            // does. This is what bounds an uncapped cache on GPUs.
            Err(Error::OutOfMemory { .. })
                if st.pool.stats.cached_bytes > 0 || st.pool.pending_bytes() > 0 =>
            {
                st.pool.clear();
                st.bind_groups.clear();
                if st.pool.pending_bytes() > 0 {
                    self.flush_locked(&mut st, op)?;
                    st.pool.clear();
                }
                create()?
            }
            other => other?,
        };
        st.pool.note_created(size);
        st.batch.bytes += size;
        if st.batch.bytes >= self.inner.opts.max_bytes_per_submit {
            if let Err(e) = self.flush_locked(&mut st, op) {
                // Unused, so reusable at once (dropped, it would stay counted as live).
                st.pool.release_now(buf);
                return Err(e);
            }
        }
        Ok(buf)
    }

    /// Keeps the pool within the memory budget for a new buffer of `size` bytes: drops cached
    /// buffers, then (when freed buffers wait for the pending batch) submits it and drops
    /// those too; errors when live buffers alone leave no room.
    pub(super) fn make_room_locked(
        &self,
        st: &mut State,
        op: &'static str,
        size: u64,
    ) -> Result<()> {
        let limit = self.inner.memory_limit;
        let over = |st: &State| {
            super::memory::over_budget(st.pool.held(), st.pool.shared_held(), size, limit)
        };
        if !over(st) {
            return Ok(());
        }
        st.pool.clear();
        if over(st) && st.pool.pending_bytes() > 0 {
            self.flush_locked(st, op)?;
            st.pool.clear();
        }
        if over(st) && st.pool.shared_held() > st.pool.held() {
            self.clear_other_host_caches();
        }
        if over(st) {
            return Err(Error::OutOfMemory {
                op,
                msg: format!(
                    "a buffer of {size} bytes would exceed the device memory limit of {limit} \
                     bytes ({} bytes live, {} cached awaiting submission{}; \
                     DeviceOptions::memory_limit sets the limit)",
                    st.pool.stats.live_bytes,
                    st.pool.stats.cached_bytes,
                    match st.pool.shared_held().saturating_sub(st.pool.held()) {
                        0 => String::new(),
                        b => format!(
                            "; other CPU-adapter devices of this process hold {b} bytes \
                             of the same host budget, live or cached while busy \
                             (Device::clear_pool frees a device's cache)"
                        ),
                    }
                ),
            });
        }
        Ok(())
    }

    /// No devices share a host budget on wasm32 (the budget is the browser's).
    #[cfg(target_arch = "wasm32")]
    fn clear_other_host_caches(&self) {}

    /// Drops the reusable cached buffers of the other devices sharing the host budget, those
    /// whose state is free now (see `HOST_DEVICES`).
    #[cfg(not(target_arch = "wasm32"))]
    fn clear_other_host_caches(&self) {
        let others: Vec<_> = {
            let list = super::device::lock(&super::device::HOST_DEVICES);
            list.iter().filter_map(std::sync::Weak::upgrade).collect()
        };
        for inner in &others {
            if std::sync::Arc::ptr_eq(inner, &self.inner) {
                continue;
            }
            if let Ok(mut other) = inner.state.try_lock() {
                other.pool.clear();
            }
        }
        // A handle upgraded here can become another device's last (its owner dropping it
        // meanwhile), and a device's drop saves its pipeline cache and waits for its GPU:
        // not under this device's state lock, which the caller holds. Such a last one drops
        // on a thread of its own (here only if none can be started); the others, this
        // device's own among them, are released here.
        for inner in others {
            if let Some(last) = std::sync::Arc::into_inner(inner) {
                let _ = std::thread::Builder::new()
                    .name("wgtensor-release".into())
                    .spawn(move || drop(last));
            }
        }
    }

    pub(crate) fn release_buffer(&self, buf: wgpu::Buffer) {
        let mut st = self.lock_state();
        // With no batch recorded (nor parked) since the last submit, no pending command can
        // read this buffer, so it is reusable at once: a loop of uploads and drops that records
        // no op must not grow the cache.
        if st.batch.encoder.is_none() && st.submitter.parked() == 0 {
            st.pool.release_now(buf);
        } else {
            st.pool.release(buf);
        }
    }

    /// Uploads `data` into `buf` at `offset` through the queue (lands before the next
    /// submission's commands). Counts toward the batch's byte budget and its upload count
    /// ([`super::batch::MAX_UPLOADS_PER_SUBMIT`]), so a long run of uploads, large or small,
    /// submits now and then and wgpu's staging copies are released.
    pub(crate) fn write_buffer(
        &self,
        op: &'static str,
        buf: &wgpu::Buffer,
        offset: u64,
        data: &[u8],
    ) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let mut st = self.lock_state();
        st.batch.note_written(buf);
        // write_buffer needs a multiple of 4 bytes (odd-length f16 data).
        if data.len().is_multiple_of(4) {
            self.inner.queue.write_buffer(buf, offset, data);
        } else {
            let mut padded = data.to_vec();
            padded.resize(data.len().div_ceil(4) * 4, 0);
            self.inner.queue.write_buffer(buf, offset, &padded);
        }
        st.batch.bytes += data.len() as u64;
        st.batch.uploads += 1;
        if st.batch.bytes >= self.inner.opts.max_bytes_per_submit
            || st.batch.uploads >= super::batch::MAX_UPLOADS_PER_SUBMIT
        {
            if st.batch.encoder.is_none() {
                // An empty submission still flushes wgpu's staged writes.
                st.batch.open_without_arena(&self.inner.device);
            }
            self.flush_locked(&mut st, op)?;
        }
        Ok(())
    }
}
