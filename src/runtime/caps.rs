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
    /// `max_compute_workgroups_per_dimension`.
    pub max_workgroups_per_dim: u32,
    /// Host threads (at least 2; 4 where the platform cannot tell, e.g. wasm32).
    pub host_threads: usize,
}

impl Caps {
    /// Reads the facts from an opened device's adapter info, enabled features and limits.
    pub(crate) fn read(
        info: &wgpu::AdapterInfo,
        features: wgpu::Features,
        limits: &wgpu::Limits,
    ) -> Caps {
        let cpu = info.device_type == wgpu::DeviceType::Cpu;
        Caps {
            cpu,
            swiftshader: cpu && info.backend == wgpu::Backend::BrowserWebGpu,
            sg8: features.contains(wgpu::Features::SUBGROUP)
                && info.subgroup_min_size == 8
                && info.subgroup_max_size == 8,
            f16: features.contains(wgpu::Features::SHADER_F16),
            max_workgroups_per_dim: limits.max_compute_workgroups_per_dimension,
            host_threads: std::thread::available_parallelism().map_or(4, |n| n.get().max(2)),
        }
    }

    /// A discrete GPU without 8-lane subgroups, for planner tests.
    #[doc(hidden)]
    pub fn test_gpu() -> Caps {
        Caps {
            cpu: false,
            swiftshader: false,
            sg8: false,
            f16: true,
            max_workgroups_per_dim: 65535,
            host_threads: 8,
        }
    }

    /// lavapipe on an AVX2 host with `threads` cores, for planner tests.
    #[doc(hidden)]
    pub fn test_lavapipe(threads: usize) -> Caps {
        Caps {
            cpu: true,
            sg8: true,
            host_threads: threads.max(2),
            ..Caps::test_gpu()
        }
    }
}
