//! Execution machinery shared by every op: device, buffer pool, batched encoder, bounded
//! submission, param arena, pipeline cache and the single launch path.

mod alloc;
mod batch;
mod bind_cache;
mod caps;
pub(crate) mod device;
mod index_errors;
mod late_check;
mod launch;
mod memory;
mod open;
mod options;
pub(crate) mod pipeline;
mod pipeline_store;
pub(crate) mod pool;
mod readback;
mod stats;
mod storage;
mod submit;
mod submitter;
mod warm_up;
pub(crate) mod window;

pub(crate) use bind_cache::Bind;
pub use caps::Caps;
#[doc(hidden)]
pub use caps::COOP_WG_BYTES;
pub use device::{Device, DeviceOptions};
pub(crate) use options::MIN_BINDING_BYTES;
pub use options::{PipelineCacheSetting, ShaderChecks};
pub(crate) use pipeline::{Access, Kernel};
#[doc(hidden)]
pub use pipeline::{Family, ParamsLayout, ShaderVariant};
pub use pipeline_store::PipelineCacheStatus;
pub use pool::PoolStats;
pub use stats::DeviceStats;
pub(crate) use storage::Storage;
#[cfg(not(target_arch = "wasm32"))]
pub(crate) use submitter::with_wait_cap;
pub use warm_up::WarmUp;

/// Splits a 1-D workgroup count over x and y so no dimension exceeds the adapter limit.
/// Shaders recover the flat index as `wid.x + wid.y * nwg.x` and bounds-check it.
pub(crate) fn grid_1d(op: &'static str, groups: u64, max_per_dim: u32) -> crate::Result<[u32; 3]> {
    let max = max_per_dim as u64;
    if max == 0 {
        // A device without compute (its adapter checks refuse it; never a division by 0).
        return Err(crate::Error::arg(
            op,
            "the device allows no compute workgroups",
        ));
    }
    if groups <= max {
        return Ok([groups as u32, 1, 1]);
    }
    let y = groups.div_ceil(max);
    if y > max {
        return Err(crate::Error::size(
            op,
            format!("{groups} workgroups exceed the adapter's 2-D grid limit of {max}x{max}"),
        ));
    }
    Ok([max as u32, y as u32, 1])
}
