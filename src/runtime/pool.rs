//! Buffer pool with size classes. A freed buffer becomes reusable only once the batch that
//! may still read it has been submitted: until then it sits in `pending`. That ordering is what
//! makes `queue.write_buffer` into a recycled buffer safe (write_buffer runs before every
//! command of the *next* submit, so it must never target a buffer a pending dispatch reads).

use crate::Error;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Buffers are bucketed by (size class, usage).
type Key = (u64, u32);

/// Memory counters of a device's buffer pool, in bytes (part of [`DeviceStats`]). Freed
/// tensors' buffers are cached and reused for later tensors of a similar size (size classes
/// of at most 25% waste), as PyTorch's CUDA caching allocator does; these counters show how
/// much memory that holds and how well reuse works.
///
/// [`DeviceStats`]: crate::DeviceStats
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// Bytes in buffers currently owned by tensors or batches.
    pub live_bytes: u64,
    /// Bytes in freed buffers kept for reuse (including those waiting for their batch).
    pub cached_bytes: u64,
    /// Highest `live_bytes + cached_bytes` seen.
    pub peak_bytes: u64,
    /// Allocations served from the cache.
    pub hits: u64,
    /// Allocations that created a new buffer.
    pub misses: u64,
}

/// The buffers freed while one batch was recorded (see [`BufferPool::take_pending`]).
pub(crate) struct Freed(Vec<(Key, wgpu::Buffer)>);

pub(crate) struct BufferPool {
    free: HashMap<Key, Vec<wgpu::Buffer>>,
    /// Freed while the current batch was open: reusable after it is submitted.
    pending: Vec<(Key, wgpu::Buffer)>,
    cap_bytes: u64,
    pub(crate) stats: PoolStats,
    /// Moves on whenever buffers are destroyed, so caches of objects that hold buffers (bind
    /// groups) know to start over.
    pub(crate) generation: u64,
    /// The device's binding limit: a request that fits one binding never gets a buffer past
    /// it (the class is capped), so whole-buffer bindings of such tensors stay valid.
    bind_cap: u64,
    /// The largest buffer the device takes (a multiple of 4): a request past one binding gets
    /// its class capped here, so a tensor the limit admits is never refused for its class.
    buf_cap: u64,
    /// The process-wide count this pool's bytes also go to when its device shares the host
    /// budget (`memory::HOST_HELD`).
    host: Option<&'static AtomicU64>,
    /// Buffers written by a batch whose submission failed, with that failure: their contents
    /// are garbage, so launching an op on one or reading one back returns the error instead
    /// of data. A buffer leaves the map when the pool hands it out again or destroys it (the
    /// pool owns the map so that no destroyed buffer's mark outlives it).
    poisoned: HashMap<wgpu::Buffer, Error>,
}

/// How many classes above a request's own a cached buffer may be and still serve it (with 4
/// classes per power of two, 2 classes up is at most 1.5x the request's class).
pub(crate) const LARGER_CLASSES: usize = 2;

/// Rounds a request up to its size class: 4 classes per power of two (<= 25% waste),
/// at least 256 bytes so small tensors share buckets.
pub(crate) fn size_class(bytes: u64) -> u64 {
    let b = bytes.max(256);
    let pow = 63 - b.leading_zeros() as u64; // floor(log2)
    let step = 1u64 << pow.saturating_sub(2);
    b.div_ceil(step) * step
}

/// The buffer size for a request of `bytes` on a device whose bindings cover `bind_cap` bytes
/// and whose buffers `buf_cap` bytes: the size class, capped at `bind_cap` when the request
/// fits one binding, else at `buf_cap` (never below the request rounded up to 4 bytes).
pub(crate) fn buffer_size(bytes: u64, bind_cap: u64, buf_cap: u64) -> u64 {
    let c = size_class(bytes);
    let cap = if bytes <= bind_cap {
        bind_cap.min(buf_cap)
    } else {
        buf_cap
    };
    c.min(cap.max(bytes.div_ceil(4) * 4))
}

impl BufferPool {
    pub(crate) fn new(
        cap_bytes: u64,
        bind_cap: u64,
        buf_cap: u64,
        host: Option<&'static AtomicU64>,
    ) -> Self {
        BufferPool {
            free: HashMap::new(),
            pending: Vec::new(),
            cap_bytes,
            stats: PoolStats::default(),
            generation: 0,
            bind_cap,
            buf_cap,
            host,
            poisoned: HashMap::new(),
        }
    }

    /// Marks a buffer a failed batch wrote.
    pub(crate) fn poison(&mut self, buf: wgpu::Buffer, e: Error) {
        self.poisoned.insert(buf, e);
    }

    /// The error of a failed batch that wrote `buf`, if any.
    pub(crate) fn poisoned_by(&self, buf: &wgpu::Buffer) -> Option<Error> {
        if self.poisoned.is_empty() {
            return None;
        }
        self.poisoned.get(buf).cloned()
    }

    /// How many buffers are marked.
    #[cfg(all(test, not(target_arch = "wasm32")))]
    pub(crate) fn poisoned_count(&self) -> usize {
        self.poisoned.len()
    }

    /// Bytes this pool holds (live and cached).
    pub(crate) fn held(&self) -> u64 {
        self.stats.live_bytes + self.stats.cached_bytes
    }

    /// Bytes held by every pool sharing this one's budget, this one's included (0 for a pool
    /// with a budget of its own).
    pub(crate) fn shared_held(&self) -> u64 {
        self.host.map_or(0, |h| h.load(Ordering::Relaxed))
    }

    /// The buffer size for a request of `bytes`: its size class, capped at the binding limit
    /// when the request fits one binding.
    pub(crate) fn class(&self, bytes: u64) -> u64 {
        buffer_size(bytes, self.bind_cap, self.buf_cap)
    }

    /// A cached buffer of the class for `bytes` and `usage`, or `None` (the caller creates one
    /// of `class(bytes)` bytes and reports it with [`BufferPool::note_created`]).
    ///
    /// A free buffer of a larger class serves too, up to [`LARGER_CLASSES`] classes up (at
    /// most about 1.5x the request): a program whose sizes drift between calls (a last batch
    /// shorter than the others, sequences of varying length) then reuses what it freed
    /// instead of creating buffers while the cache holds slightly larger ones. A request that
    /// fits one binding never gets a buffer past the binding limit.
    pub(crate) fn take(&mut self, bytes: u64, usage: wgpu::BufferUsages) -> Option<wgpu::Buffer> {
        let mut class = self.class(bytes);
        for step in 0..=LARGER_CLASSES {
            if step > 0 {
                class = size_class(class + 1);
                if bytes <= self.bind_cap && class > self.bind_cap {
                    return None;
                }
            }
            let key = (class, usage.bits());
            if let Some(buf) = self.free.get_mut(&key).and_then(|v| v.pop()) {
                self.stats.cached_bytes -= key.0;
                self.stats.live_bytes += key.0;
                self.stats.hits += 1;
                unpoison(&mut self.poisoned, &buf);
                return Some(buf);
            }
        }
        None
    }

    /// Like [`BufferPool::take`], but may also hand out a buffer freed in the current batch.
    /// Only for buffers that GPU commands alone fill (workspaces): commands recorded later in
    /// the same encoder run after the pending readers, so no write_buffer hazard exists.
    pub(crate) fn take_scratch(
        &mut self,
        bytes: u64,
        usage: wgpu::BufferUsages,
    ) -> Option<wgpu::Buffer> {
        let key = (self.class(bytes), usage.bits());
        if let Some(i) = self.pending.iter().rposition(|(k, _)| *k == key) {
            let (_, buf) = self.pending.swap_remove(i);
            self.stats.cached_bytes -= key.0;
            self.stats.live_bytes += key.0;
            self.stats.hits += 1;
            unpoison(&mut self.poisoned, &buf);
            return Some(buf);
        }
        self.take(bytes, usage)
    }

    pub(crate) fn note_created(&mut self, size: u64) {
        self.stats.misses += 1;
        self.stats.live_bytes += size;
        host_add(self.host, size);
        self.bump_peak();
    }

    /// Returns a buffer; it is reusable after the current batch is submitted.
    pub(crate) fn release(&mut self, buf: wgpu::Buffer) {
        let key = (buf.size(), buf.usage().bits());
        self.stats.live_bytes -= key.0;
        self.stats.cached_bytes += key.0;
        self.pending.push((key, buf));
    }

    /// Returns a buffer no pending command can read: reusable at once.
    pub(crate) fn release_now(&mut self, buf: wgpu::Buffer) {
        let key = (buf.size(), buf.usage().bits());
        self.stats.live_bytes -= key.0;
        self.stats.cached_bytes += key.0;
        self.free.entry(key).or_default().push(buf);
        self.trim();
    }

    /// Bytes freed while the current batch was open (reusable once it is submitted).
    pub(crate) fn pending_bytes(&self) -> u64 {
        self.pending.iter().map(|(k, _)| k.0).sum()
    }

    /// Stops accounting for a live buffer the caller destroys instead of releasing.
    pub(crate) fn forget(&mut self, buf: &wgpu::Buffer) {
        self.stats.live_bytes -= buf.size();
        host_sub(self.host, buf.size());
        unpoison(&mut self.poisoned, buf);
    }

    /// Closes the current batch's list of freed buffers (when the batch is finished). They
    /// become reusable through [`BufferPool::reuse`] once that batch has been submitted; on
    /// wasm a finished batch may wait for room under the in-flight cap, holding its list.
    pub(crate) fn take_pending(&mut self) -> Freed {
        Freed(std::mem::take(&mut self.pending))
    }

    /// Called right after the batch that owned `freed` was submitted: its buffers become
    /// reusable.
    pub(crate) fn reuse(&mut self, freed: Freed) {
        for (key, buf) in freed.0 {
            self.free.entry(key).or_default().push(buf);
        }
        self.trim();
    }

    /// Destroys cached buffers (largest classes first) until the cache is within its cap.
    fn trim(&mut self) {
        if self.stats.cached_bytes <= self.cap_bytes {
            return;
        }
        self.generation += 1;
        let host = self.host;
        let mut keys: Vec<Key> = self.free.keys().copied().collect();
        keys.sort_unstable_by(|a, b| b.cmp(a));
        for key in keys {
            let list = self.free.get_mut(&key).expect("key listed above");
            while self.stats.cached_bytes > self.cap_bytes {
                match list.pop() {
                    Some(buf) => {
                        self.stats.cached_bytes -= key.0;
                        host_sub(host, key.0);
                        unpoison(&mut self.poisoned, &buf);
                        buf.destroy();
                    }
                    None => break,
                }
            }
        }
        self.free.retain(|_, v| !v.is_empty());
    }

    fn bump_peak(&mut self) {
        let total = self.stats.live_bytes + self.stats.cached_bytes;
        self.stats.peak_bytes = self.stats.peak_bytes.max(total);
    }

    /// Drops every cached buffer that is already reusable.
    pub(crate) fn clear(&mut self) {
        self.generation += 1;
        let host = self.host;
        for (key, list) in self.free.drain() {
            for buf in list {
                self.stats.cached_bytes -= key.0;
                host_sub(host, key.0);
                unpoison(&mut self.poisoned, &buf);
                buf.destroy();
            }
        }
    }
}

/// Drops `buf`'s poison mark: a new owner (whatever a failed batch left in it no longer
/// matters), or its end. A free function over the map, so the trim and clear loops can call it
/// while they hold the free lists.
// wgpu::Buffer hashes and compares by its id, which never changes: as the struct field's map.
#[allow(clippy::mutable_key_type)]
fn unpoison(poisoned: &mut HashMap<wgpu::Buffer, Error>, buf: &wgpu::Buffer) {
    if !poisoned.is_empty() {
        poisoned.remove(buf);
    }
}

impl Drop for BufferPool {
    /// The device is gone, and its buffers with it: they leave the shared count.
    fn drop(&mut self) {
        host_sub(self.host, self.held());
    }
}

fn host_add(host: Option<&AtomicU64>, bytes: u64) {
    if let Some(h) = host {
        h.fetch_add(bytes, Ordering::Relaxed);
    }
}

fn host_sub(host: Option<&AtomicU64>, bytes: u64) {
    if let Some(h) = host {
        // Saturating: the count never goes below zero, whatever the order of updates.
        let _ = h.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
            Some(v.saturating_sub(bytes))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::{buffer_size, size_class};

    /// A request the buffer limit admits gets a buffer within it: classes round up by as
    /// much as a quarter, which past 7/8 of a power-of-two limit overshot it (a 3.84 GB
    /// tensor under NVIDIA's 4 GiB - 1 was refused for its 4 GiB class).
    #[test]
    fn classes_are_capped_at_the_buffer_limit() {
        let (bind, buf) = ((1u64 << 31) - 256, u64::from(u32::MAX) / 4 * 4);
        for bytes in [3_840_000_000u64, buf, buf - 3, (1 << 31) + 1, 4_000_000_001] {
            let size = buffer_size(bytes, bind, buf);
            assert!(
                size >= bytes && size <= buf && size.is_multiple_of(4),
                "{bytes} -> {size}"
            );
        }
        // Within one binding the binding cap holds, and small requests keep their class.
        assert_eq!(buffer_size(bind - 10, bind, buf), bind);
        assert_eq!(buffer_size(1000, bind, buf), size_class(1000));
    }

    #[test]
    fn size_classes_bound_waste_and_are_monotonic() {
        let mut prev = 0;
        for b in 1..200_000u64 {
            let c = size_class(b);
            assert!(c >= b && c >= prev);
            assert!(c <= 256.max(b + b / 4 + 1), "class {c} for {b}");
            prev = c;
        }
    }
}
