//! Adapter facts the planners depend on, read once when the device opens. Planners are pure
//! functions of (problem, [`Caps`]), so their choices are unit-tested without a GPU.

/// What the kernel planners need to know about the adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// A CPU adapter (lavapipe, SwiftShader): one workgroup runs per host thread, barriers and
    /// workgroup memory are expensive, so planners aim for about one workgroup per core.
    pub cpu: bool,
    /// Chromium's CPU WebGPU adapter (SwiftShader), which fails to compile some variants.
    pub swiftshader: bool,
    /// Subgroups of exactly 8 lanes are available (the `sg8` kernels' precondition).
    pub sg8: bool,
    /// SHADER_F16 is enabled (f16 tensors can be created).
    pub f16: bool,
    /// f16 GEMMs may run on cooperative matrices: the device enabled wgpu's
    /// `EXPERIMENTAL_COOPERATIVE_MATRIX` (asked for by `DeviceOptions::cooperative_matrix`),
    /// the adapter offers the 16x16x16 f16 x f16 + f32 configuration (NVIDIA's tensor cores
    /// through `VK_KHR_cooperative_matrix`), its subgroups are exactly 32 lanes and its
    /// workgroups hold 256 invocations and the tile's 29 KiB of workgroup memory. Also set on
    /// CPU adapters with f16 and that much workgroup memory opened with both `gpu_plans` and
    /// `cooperative_matrix`, which run the tile over emulated fragments (its tests).
    pub coop16: bool,
    /// `max_compute_workgroups_per_dimension`.
    pub max_workgroups_per_dim: u32,
    /// Host threads (at least 2; 4 where the platform cannot tell, e.g. wasm32).
    pub host_threads: usize,
    /// Workgroups of 256 invocations the adapter runs at once: an *estimate* (wgpu reports no
    /// compute-unit count) from the adapter's vendor, type and name: the planners' measure of
    /// "enough work to fill the device once" (split-k splits below it; on GPUs into four
    /// workgroups per slot). CPU adapters: the host threads.
    pub parallelism: usize,
}

/// The most workgroup slots a planner takes from [`Caps::parallelism`] (a hand-built `Caps`
/// may hold anything): far above any GPU's, and small enough that slot counts times lanes fit
/// a 32-bit `usize` (wasm32).
const MAX_PARALLELISM: usize = 1 << 16;

/// Vendor ids of `wgpu::AdapterInfo::vendor` (PCI ids; Apple's is its Metal registry id).
const NVIDIA: u32 = 0x10de;
const AMD: u32 = 0x1002;
const INTEL: u32 = 0x8086;
const APPLE: u32 = 0x106b;

/// Concurrent 256-invocation workgroups of an adapter, estimated conservatively from its
/// vendor, type and name (wgpu exposes no SM / CU count): a discrete NVIDIA or AMD GPU is
/// taken as 128 SMs / CUs x 2 workgroups (an H200 has 132 SMs, an RTX 4090 128, an MI300X
/// 304 CUs; smaller cards get split-k slices they do not need, which costs one reduction),
/// a discrete Intel GPU 32 Xe cores x 2, Apple silicon by its name (M-series base 10 GPU
/// cores, Pro 16, Max 40, Ultra 80, x 2), other integrated GPUs 16, unknown devices 64, CPU
/// adapters one workgroup per host thread.
pub(crate) fn estimate_parallelism(
    vendor: u32,
    device_type: wgpu::DeviceType,
    name: &str,
    host_threads: usize,
) -> usize {
    use wgpu::DeviceType as D;
    if device_type == D::Cpu {
        return host_threads.max(1);
    }
    if vendor == APPLE || name.starts_with("Apple") {
        let cores = if name.contains("Ultra") {
            80
        } else if name.contains("Max") {
            40
        } else if name.contains("Pro") {
            16
        } else {
            10
        };
        return cores * 2;
    }
    match (device_type, vendor) {
        (D::DiscreteGpu, NVIDIA | AMD) => 128 * 2,
        (D::DiscreteGpu, INTEL) => 32 * 2,
        (D::IntegratedGpu, _) => 16,
        _ => 64,
    }
}

/// Workgroup memory of the cooperative-matrix GEMM tile (shaders/lib/coop_tile.wgsl: two
/// staged buffers of 128 x 24 A and 16 x 136 B halves, 8 x 256 f32 of epilogue scratch);
/// [`Caps::coop16`] requires the device's `max_compute_workgroup_storage_size` to hold it.
/// tests/shaders.rs checks it against the shader.
#[doc(hidden)]
pub const COOP_WG_BYTES: u32 = 2 * (128 * 24 + 16 * 136) * 2 + 8 * 256 * 4;

/// True when a workgroup of the cooperative-matrix tile fits `limits`: 256 invocations along x
/// and [`COOP_WG_BYTES`] of workgroup memory.
pub(crate) fn holds_coop_tile(limits: &wgpu::Limits) -> bool {
    limits.max_compute_workgroup_storage_size >= COOP_WG_BYTES
        && limits.max_compute_invocations_per_workgroup >= 256
        && limits.max_compute_workgroup_size_x >= 256
}

/// Whether an adapter of `info`, `limits` and cooperative-matrix `props` can run `gemm_coop`
/// once its device has EXPERIMENTAL_COOPERATIVE_MATRIX and SHADER_F16: subgroups of exactly 32
/// lanes (the tile maps invocations to subgroups by index), room for the tile and the
/// 16x16x16 f16 configuration. The device asks for the feature only where this holds, and
/// `Caps::coop16` requires it too.
pub(crate) fn runs_coop_tile(
    info: &wgpu::AdapterInfo,
    limits: &wgpu::Limits,
    props: &[wgpu::CooperativeMatrixProperties],
) -> bool {
    info.subgroup_min_size == 32
        && info.subgroup_max_size == 32
        && holds_coop_tile(limits)
        && offers_coop16(props)
}

/// True when `props` has the 16x16x16 configuration `gemm_coop` uses: f16 A and B, f32
/// accumulator and result.
pub(crate) fn offers_coop16(props: &[wgpu::CooperativeMatrixProperties]) -> bool {
    use wgpu::CooperativeScalarType as S;
    props.iter().any(|p| {
        (p.m_size, p.n_size, p.k_size) == (16, 16, 16) && p.ab_type == S::F16 && p.cr_type == S::F32
    })
}

impl Caps {
    /// Reads the facts from an opened device's adapter info, enabled features and limits.
    pub(crate) fn read(
        info: &wgpu::AdapterInfo,
        features: wgpu::Features,
        limits: &wgpu::Limits,
        coop: &[wgpu::CooperativeMatrixProperties],
    ) -> Caps {
        let cpu = info.device_type == wgpu::DeviceType::Cpu;
        let host_threads = std::thread::available_parallelism().map_or(4, |n| n.get().max(2));
        Caps {
            cpu,
            swiftshader: cpu && info.backend == wgpu::Backend::BrowserWebGpu,
            sg8: features.contains(wgpu::Features::SUBGROUP)
                && info.subgroup_min_size == 8
                && info.subgroup_max_size == 8,
            f16: features.contains(wgpu::Features::SHADER_F16),
            coop16: features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX)
                && features.contains(wgpu::Features::SHADER_F16)
                && runs_coop_tile(info, limits, coop),
            max_workgroups_per_dim: limits.max_compute_workgroups_per_dimension,
            host_threads,
            parallelism: estimate_parallelism(
                info.vendor,
                info.device_type,
                &info.name,
                host_threads,
            ),
        }
    }

    /// [`Caps::parallelism`] as the planners multiply it: at least 1 and at most
    /// `MAX_PARALLELISM`, so slots times lanes cannot overflow whatever a hand-built `Caps` holds.
    pub(crate) fn slots(&self) -> usize {
        self.parallelism.clamp(1, MAX_PARALLELISM)
    }

    /// A discrete GPU without 8-lane subgroups (parallelism 256), for planner tests.
    #[doc(hidden)]
    pub fn test_gpu() -> Caps {
        Caps {
            cpu: false,
            swiftshader: false,
            sg8: false,
            f16: true,
            coop16: false,
            max_workgroups_per_dim: 65535,
            host_threads: 8,
            parallelism: 256,
        }
    }

    /// lavapipe on an AVX2 host with `threads` cores, for planner tests.
    #[doc(hidden)]
    pub fn test_lavapipe(threads: usize) -> Caps {
        Caps {
            cpu: true,
            sg8: true,
            host_threads: threads.max(2),
            parallelism: threads.max(2),
            ..Caps::test_gpu()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wgpu::DeviceType as D;

    #[test]
    fn coop16_needs_the_16x16x16_f16_f32_configuration() {
        use wgpu::CooperativeScalarType as S;
        let cfg = |m, ab, cr| wgpu::CooperativeMatrixProperties {
            m_size: m,
            n_size: m,
            k_size: m,
            ab_type: ab,
            cr_type: cr,
            saturating_accumulation: false,
        };
        assert!(offers_coop16(&[
            cfg(8, S::F32, S::F32),
            cfg(16, S::F16, S::F32)
        ]));
        assert!(!offers_coop16(&[cfg(8, S::F32, S::F32)]));
        assert!(!offers_coop16(&[cfg(16, S::F16, S::F16)]));
        assert!(!offers_coop16(&[]));
    }

    #[test]
    fn parallelism_estimates() {
        assert_eq!(
            estimate_parallelism(NVIDIA, D::DiscreteGpu, "NVIDIA H200", 16),
            256
        );
        assert_eq!(
            estimate_parallelism(AMD, D::DiscreteGpu, "AMD Radeon", 16),
            256
        );
        assert_eq!(
            estimate_parallelism(INTEL, D::IntegratedGpu, "Intel UHD", 8),
            16
        );
        assert_eq!(
            estimate_parallelism(APPLE, D::IntegratedGpu, "Apple M2 Max", 8),
            80
        );
        assert_eq!(
            estimate_parallelism(APPLE, D::IntegratedGpu, "Apple M1", 8),
            20
        );
        assert_eq!(estimate_parallelism(0x10005, D::Cpu, "llvmpipe", 6), 6);
        assert_eq!(estimate_parallelism(0, D::Other, "", 6), 64);
    }
}
