//! The counters [`Device::stats`](crate::Device::stats) reports (a plain struct: the device
//! fills it, nothing here reads the device).

use super::pipeline_store::PipelineCacheStatus;
use super::pool::PoolStats;

/// Counters reported by [`Device::stats`](crate::Device::stats).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Compute pipelines compiled so far (each kernel variant compiles once per device, on
    /// first use; a jump here during a steady loop means new shapes keep picking new
    /// variants).
    pub pipelines_compiled: u64,
    /// Compute dispatches recorded so far.
    pub dispatches: u64,
    /// Command buffers submitted to the queue so far (batches of dispatches, and interop
    /// submissions through [`Device::submit`](crate::Device::submit)).
    pub submissions: u64,
    /// Submissions the GPU has not finished yet, at most [`DeviceOptions::max_in_flight`](crate::DeviceOptions::max_in_flight).
    pub in_flight: usize,
    /// The highest `in_flight` seen.
    pub peak_in_flight: usize,
    /// Finished batches held back by the in-flight cap until the next async point (wasm only;
    /// always 0 on native, where submitting waits instead).
    pub parked: usize,
    /// Elementwise ops that wrote their result into their input's buffer instead of a new
    /// one: the owned calls ([`Tensor::into_unary`](crate::Tensor::into_unary),
    /// `tensor + &other`, ...) on a uniquely held input, and the crate's own gradient
    /// accumulation.
    pub donations: u64,
    /// The buffer pool's memory counters.
    pub pool: PoolStats,
    /// The memory budget in force ([`DeviceOptions::memory_limit`](crate::DeviceOptions::memory_limit) or its derived default).
    pub memory_limit: u64,
    /// Whether a persisted pipeline cache was loaded when the device opened (off, unsupported
    /// by the adapter, empty, loaded or rejected; see [`DeviceOptions::pipeline_cache`](crate::DeviceOptions::pipeline_cache)).
    pub pipeline_cache: PipelineCacheStatus,
}
