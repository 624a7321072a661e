//! The device memory budget: how many bytes of pooled buffers (live plus cached) a device may
//! hold. On a CPU adapter (lavapipe, SwiftShader) device memory is host memory, and running it
//! out does not return wgpu's out-of-memory error: the driver crashes the process (lavapipe
//! segfaults once the address space is exhausted). So the pool refuses an allocation that would
//! pass the budget before wgpu is asked, and returns `Error::OutOfMemory` instead. The default
//! CPU budget is the process's: every such device counts against it together.

/// Bytes of pooled buffers (live plus cached) held by every device of this process that
/// draws on host memory under the default budget (CPU adapters without
/// `DeviceOptions::memory_limit`): the budget is the process's, so two such devices together
/// stay within it (each alone once took 3/4 of the host's memory, and two filled it).
pub(crate) static HOST_HELD: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Whether an allocation of `size` bytes passes `limit` when this device holds `own` bytes and
/// the devices sharing its budget hold `shared` bytes in all (this device's included; 0 for a
/// device with a budget of its own).
pub(crate) fn over_budget(own: u64, shared: u64, size: u64, limit: u64) -> bool {
    own.max(shared).saturating_add(size) > limit
}

/// The default budget for an adapter of `device_type`: on CPU adapters, what the process may
/// use (3/4 of physical memory or of its cgroup limit, half of its address-space limit, since
/// the driver maps each buffer and keeps staging copies); on GPUs `u64::MAX`, leaving the
/// limit to the driver, whose out-of-memory errors wgpu reports and we map to
/// `Error::OutOfMemory`.
pub(crate) fn default_limit(device_type: wgpu::DeviceType) -> u64 {
    if device_type != wgpu::DeviceType::Cpu {
        return u64::MAX;
    }
    host_limit().unwrap_or(u64::MAX)
}

/// The pool's default cache cap under a memory limit of `limit` bytes: the limit itself, that
/// is no cap of its own. Cached plus live bytes never pass what the program once held live
/// unless sizes keep changing, and then the budget bounds them (`make_room_locked` drops the
/// cache before passing it) or, without one on GPUs, the driver's out-of-memory error, on
/// which the allocator drops the cache and retries, as PyTorch's caching allocator does. A
/// fixed cap below the working set made every op past it re-create (and wgpu zero) a buffer.
///
/// In the browser the retry cannot run: WebGPU reports out-of-memory asynchronously (its
/// `createBuffer` returns an invalid buffer) and tells no memory size, so the cache there
/// keeps at most [`WASM_POOL_CAP`] (shape churn would otherwise grow it until the page's
/// GPU process runs out).
pub(crate) fn default_pool_cap(limit: u64) -> u64 {
    if cfg!(target_arch = "wasm32") {
        limit.min(WASM_POOL_CAP)
    } else {
        limit
    }
}

/// The pool's default cache cap in the browser (wasm32): 1 GiB.
pub(crate) const WASM_POOL_CAP: u64 = 1 << 30;

/// What the host lets this process use, when the platform tells (Linux).
#[cfg(not(target_arch = "wasm32"))]
fn host_limit() -> Option<u64> {
    let mut limit: Option<u64> = None;
    let mut take = |v: u64| limit = Some(limit.map_or(v, |l| l.min(v)));
    if let Some(total) = meminfo_total() {
        take(total / 4 * 3);
    }
    if let Some(cg) = cgroup_limit() {
        take(cg / 4 * 3);
    }
    if let Some(addr) = address_space_limit() {
        take(addr / 2);
    }
    limit
}

#[cfg(target_arch = "wasm32")]
fn host_limit() -> Option<u64> {
    None
}

#[cfg(not(target_arch = "wasm32"))]
fn meminfo_total() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// cgroup v2 `memory.max` (or v1 `memory.limit_in_bytes`) of this process's group.
#[cfg(not(target_arch = "wasm32"))]
fn cgroup_limit() -> Option<u64> {
    for path in [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ] {
        if let Ok(s) = std::fs::read_to_string(path) {
            // "max" (v2) or a huge page-rounded number (v1) mean no limit.
            if let Ok(v) = s.trim().parse::<u64>() {
                if v < (1u64 << 60) {
                    return Some(v);
                }
            }
        }
    }
    None
}

/// The soft `RLIMIT_AS` (ulimit -v), read from /proc/self/limits so no libc binding is needed.
#[cfg(not(target_arch = "wasm32"))]
fn address_space_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    parse_address_space(&text)
}

#[cfg(not(target_arch = "wasm32"))]
fn parse_address_space(limits: &str) -> Option<u64> {
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max address space"))?;
    let soft = line
        .trim_start_matches("Max address space")
        .split_whitespace()
        .next()?;
    soft.parse().ok()
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    #[test]
    fn address_space_line_is_parsed() {
        let text = "Limit                     Soft Limit           Hard Limit           Units\n\
                    Max cpu time              unlimited            unlimited            seconds\n\
                    Max address space         6442450944           unlimited            bytes\n";
        assert_eq!(parse_address_space(text), Some(6442450944));
        let unlimited =
            "Max address space         unlimited            unlimited            bytes\n";
        assert_eq!(parse_address_space(unlimited), None);
    }

    #[test]
    fn a_shared_budget_counts_every_device() {
        // Alone (or with a budget of its own): its own bytes.
        assert!(!over_budget(60, 0, 40, 100));
        assert!(over_budget(60, 0, 41, 100));
        // Sharing: what all the devices hold, this one's included.
        assert!(over_budget(10, 70, 31, 100));
        assert!(!over_budget(10, 70, 30, 100));
        // No overflow: an unlimited budget (GPUs) refuses nothing.
        assert!(!over_budget(5, 0, u64::MAX, u64::MAX));
    }

    #[test]
    fn cpu_default_is_bounded_by_physical_memory() {
        let total = meminfo_total().expect("Linux has /proc/meminfo");
        let l = default_limit(wgpu::DeviceType::Cpu);
        assert!(l <= total / 4 * 3, "{l} vs {total}");
        assert!(l > 0);
        assert_eq!(default_limit(wgpu::DeviceType::DiscreteGpu), u64::MAX);
    }
}

#[cfg(test)]
mod pool_cap_tests {
    use super::{default_pool_cap, WASM_POOL_CAP};

    /// Native: no cap below the budget; the browser: at most 1 GiB cached.
    #[test]
    fn the_default_cache_cap_is_the_budget_natively() {
        let want = |limit: u64| {
            if cfg!(target_arch = "wasm32") {
                limit.min(1 << 30)
            } else {
                limit
            }
        };
        for limit in [0, 1 << 20, 3 << 30, u64::MAX] {
            assert_eq!(default_pool_cap(limit), want(limit));
        }
        assert_eq!(WASM_POOL_CAP, 1 << 30);
    }
}
