//! `DeviceOptions`: the execution model's knobs, with their defaults and the bounds checked
//! when a device opens.

use std::path::PathBuf;

use crate::{Error, Result};

/// Which of wgpu's injected runtime checks the crate's own shaders are compiled with
/// ([`DeviceOptions::shader_checks`]). wgpu guards every shader it is given against bugs in
/// it: clamps on array indices, guarded integer division (WGSL defines `x / 0` as `x`), and
/// (naga's `force_loop_bounding`) a counter in every loop that ends it after 2^64 iterations,
/// so that a driver cannot treat an infinite loop as unreachable. The counter hides each
/// loop's trip count from the driver's compiler, which then cannot unroll the constant-trip
/// inner loops of the GEMM and convolution tiles; the index clamps, on top, keep their
/// accumulator arrays out of registers. Measured on an NVIDIA H200 (docs/BENCHMARKS.md): a
/// 4096^3 f32 GEMM took 63 ms with every check, 69 ms without the loop counters and 4.8 ms
/// without the clamps too; a convolution 15.7 ms, 1.6 ms and 1.5 ms.
///
/// Storage buffers keep their bounds either way where the driver enforces them (Vulkan's
/// robust buffer access, which wgpu enables where offered); the crate's kernels also test
/// every buffer index against the tensor's extent themselves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShaderChecks {
    /// Every check wgpu injects.
    Full,
    /// Every check but the loop counters: every loop in the crate's shaders terminates (the
    /// SAFETY note in runtime/pipeline.rs says why), so the counter never fires.
    NoLoopBounding,
    /// The default: [`DivisionOnly`](Self::DivisionOnly) on Vulkan GPUs, whose robust buffer
    /// access still bounds storage accesses; [`NoLoopBounding`](Self::NoLoopBounding) on
    /// Metal and DX12 GPUs (nothing would bound them there, and no figure says the clamps
    /// cost as much there) and on CPU adapters (on lavapipe the kernels without index clamps
    /// run no faster, but LLVM takes far longer to compile some: the cold first call of a
    /// convolution took 4.98 s against 0.46 s with the clamps).
    #[default]
    Auto,
    /// Only the integer-division guards: no loop counters, no index clamps. The crate's
    /// kernels index their workgroup and function arrays with lane ids and loop counters
    /// within their lengths; a division by a zero extent keeps WGSL's defined result.
    DivisionOnly,
    /// No injected checks at all, the division guards off too (for measuring what they cost:
    /// a division by zero is then undefined, and on a CPU adapter may trap).
    None,
}

impl ShaderChecks {
    /// The setting [`Auto`](Self::Auto) stands for on an adapter of `device_type` behind
    /// `backend`; the others stand for themselves.
    pub(crate) fn resolve(
        self,
        device_type: wgpu::DeviceType,
        backend: wgpu::Backend,
    ) -> ShaderChecks {
        match self {
            ShaderChecks::Auto
                if device_type != wgpu::DeviceType::Cpu && backend == wgpu::Backend::Vulkan =>
            {
                ShaderChecks::DivisionOnly
            }
            ShaderChecks::Auto => ShaderChecks::NoLoopBounding,
            other => other,
        }
    }

    /// wgpu's checks for this setting, as the device compiles its kernels with them (for a
    /// shader of the caller's own that should run as the crate's do, e.g. a benchmark's).
    /// [`Auto`](Self::Auto) keeps every check here: take the device's resolved setting from
    /// [`Device::shader_checks`](crate::Device::shader_checks).
    pub fn runtime_checks(self) -> wgpu::ShaderRuntimeChecks {
        let mut c = wgpu::ShaderRuntimeChecks::checked();
        match self {
            ShaderChecks::Full | ShaderChecks::Auto => {}
            ShaderChecks::NoLoopBounding => c.force_loop_bounding = false,
            ShaderChecks::DivisionOnly => {
                c.force_loop_bounding = false;
                c.bounds_checks = false;
            }
            ShaderChecks::None => c = wgpu::ShaderRuntimeChecks::unchecked(),
        }
        c
    }
}

/// Where [`DeviceOptions::pipeline_cache`] keeps compiled pipelines between runs (wgpu's
/// `PIPELINE_CACHE`, Vulkan only; see [`PipelineCacheStatus`](crate::PipelineCacheStatus) for
/// what the device did with it). Ignored on wasm32, where browsers keep their own cache.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum PipelineCacheSetting {
    /// The user's cache directory: `$WGTENSOR_CACHE_DIR` if set (used as is), else
    /// `wgtensor/` under `$XDG_CACHE_HOME`, or under the platform's cache directory
    /// (`~/.cache` on Linux, `~/Library/Caches` on macOS, `%LOCALAPPDATA%` on Windows). When
    /// none of these can be found the cache is off.
    #[default]
    Default,
    /// This directory (created on the first save).
    Dir(PathBuf),
    /// No persisted cache: nothing is read or written.
    Off,
}

/// Knobs of the execution model. The defaults suit both lavapipe and discrete GPUs.
#[derive(Debug, Clone)]
pub struct DeviceOptions {
    /// The pending batch is submitted once it holds this many dispatches.
    pub max_dispatches_per_submit: usize,
    /// ... or once the buffers allocated for it reach this many bytes.
    pub max_bytes_per_submit: u64,
    /// At most this many submissions are outstanding; the next submit waits for the oldest
    /// (wasm: a batch finished at the cap is parked until the next async point).
    pub max_in_flight: usize,
    /// Freed buffers beyond this many cached bytes are destroyed instead of kept. `None` (the
    /// default): no cap besides [`memory_limit`](Self::memory_limit), as PyTorch's caching
    /// allocator: an allocation that would pass the budget, or that the driver refuses for
    /// lack of memory, first drops the cache and tries again. A fixed cap below a program's
    /// working set destroys and re-creates (and wgpu zeroes) a buffer on every op once the
    /// live set churns past it. In the browser (wasm32), where WebGPU reports out-of-memory
    /// only asynchronously so that retry cannot run, `None` caps the cache at 1 GiB.
    pub pool_cap_bytes: Option<u64>,
    /// Do not request SHADER_F16 even when the adapter has it (to exercise f32-only paths).
    pub disable_f16: bool,
    /// Do not request SUBGROUP (kernels then use their portable variants).
    pub disable_subgroups: bool,
    /// Most bytes of GPU buffers (live tensors, workspaces and the pool's cache) the device may
    /// hold; an allocation past it first drops cached buffers, then fails with
    /// [`Error::OutOfMemory`] before wgpu is asked (MLX's `set_memory_limit`). A readback's
    /// short-lived staging buffer may pass it, so contiguous tensors that filled it can still
    /// be read (a view is packed first, which needs room). `None`: on CPU
    /// adapters, where device memory is host memory and running out crashes the driver, what
    /// the process may use (3/4 of physical or cgroup memory, half the address-space limit),
    /// one budget for every such device of the process together; on GPUs no limit beyond the
    /// driver's own out-of-memory errors.
    pub memory_limit: Option<u64>,
    /// Most bytes one storage binding may cover: `None` is the adapter's
    /// `max_storage_buffer_binding_size` (128 MiB on many adapters, lavapipe included). A
    /// tensor larger than this still works in the ops that split their work into windows
    /// that each fit one binding (elementwise, reductions, softmax, GEMM,
    /// convolutions, batch norm); others refuse it with [`Error::TooLarge`]. Lower it to
    /// exercise those windowed paths on small tensors. Rounded down to the adapter's storage
    /// offset alignment; at least 4 KiB.
    pub max_binding_bytes: Option<u64>,
    /// Where compiled pipelines are persisted between runs, so the driver need not compile
    /// them again (native Vulkan adapters that offer `PIPELINE_CACHE`; mostly a gain on mobile
    /// and Android drivers, desktop drivers keep their own caches). The file is loaded when
    /// the device opens and written by [`Device::save_pipeline_cache`](crate::Device::save_pipeline_cache)
    /// and when the device is dropped. Default: [`PipelineCacheSetting::Default`].
    pub pipeline_cache: PipelineCacheSetting,
    /// Longest a blocking wait for the GPU (a sync, a readback, room under the in-flight cap)
    /// may take before it fails with [`Error::Readback`] ("timed out waiting for the GPU")
    /// instead of blocking forever: a stalled driver becomes an error naming the op. Syncs and
    /// readbacks poll the device without holding its locks, so other threads keep recording
    /// and submitting meanwhile (native; on wasm the browser resolves the awaits); the wait
    /// for room under the in-flight cap is part of a submit and holds the device's state,
    /// so other threads' ops (and drops of its tensors) wait for it, about one submission's
    /// run. An out-of-range index a timed-out readback would have reported
    /// ([`check_indices`](Self::check_indices)) comes out at the next readback or sync (a
    /// readback whose map wait timed out still ran; one whose batch waited for room and timed
    /// out was dropped unsubmitted, and its outputs report the timeout). Default: 5 minutes,
    /// far beyond any single batch.
    pub gpu_timeout: std::time::Duration,
    /// Check indices on the device (gather, index_select, embedding, scatter_add, one_hot,
    /// nll_loss and cross_entropy targets): an index out of range makes the next sync or
    /// readback return an error naming the op, the index and the size, as PyTorch raises,
    /// without stalling the queue at the op. `false` skips the check (one small dispatch per
    /// op): out-of-range indices then read NaN (0 for i32 data), add nothing, or give an
    /// all-zero one-hot row. The same option covers the values `binary_cross_entropy` checks
    /// (input and target in [0, 1], as PyTorch's). Default: `true`.
    pub check_indices: bool,
    /// Plan kernels as on a GPU even on a CPU adapter ([`Caps::cpu`](crate::runtime::Caps)
    /// false): the GPU tile shapes and variants then run on lavapipe, which is how the test
    /// suite covers them without a GPU. Slower there; results agree within rounding. With
    /// [`cooperative_matrix`](Self::cooperative_matrix) (the default), f16 GEMMs of more than
    /// 64 rows and columns on a CPU adapter run the cooperative-matrix tile over plain-WGSL
    /// stand-ins for the matrices (its tests); with it `false`, the GPU's FMA kernels.
    pub gpu_plans: bool,
    /// Run f16 GEMMs on cooperative matrices (tensor cores) where the adapter offers wgpu's
    /// `EXPERIMENTAL_COOPERATIVE_MATRIX` with a 16x16x16 f16 x f16 + f32 configuration and
    /// 32-lane subgroups (NVIDIA through `VK_KHR_cooperative_matrix`): requests the feature and
    /// plans `gemm_coop` for f16 products of more than 64 rows and columns (f32 accumulation,
    /// the same zero-filled edges and split-k as the other kernels; smaller products keep the
    /// FMA kernels). On by default (on an NVIDIA H200 it ran f16 GEMMs at 81 TFLOPS, 3.5x the
    /// FMA kernels); `false` keeps f16 on the FMA kernels and leaves wgpu's experimental
    /// feature unrequested. Ignored with [`disable_f16`](Self::disable_f16) or
    /// [`disable_subgroups`](Self::disable_subgroups), and where the adapter could not run the
    /// tile (no 16x16x16 f16 configuration, subgroups not exactly 32 lanes, too little
    /// workgroup memory) unless it is a CPU adapter with [`gpu_plans`](Self::gpu_plans) (see
    /// there). Natively, the device tests the
    /// tile on a small f16 product when it opens (its dispatches and compiled pipelines show in
    /// [`Device::stats`](crate::Device::stats) from the start) and keeps the FMA kernels where
    /// the driver fails it
    /// ([`Device::cooperative_matrix_refused`](crate::Device::cooperative_matrix_refused)).
    pub cooperative_matrix: bool,
    /// Which of wgpu's runtime checks the crate's shaders are compiled with (see
    /// [`ShaderChecks`]). Default: [`ShaderChecks::Auto`] (no index clamps on Vulkan GPUs;
    /// elsewhere only the loop bounding dropped).
    pub shader_checks: ShaderChecks,
    /// Workgroups of 256 invocations the adapter runs at once, in place of the estimate
    /// ([`Caps::parallelism`](crate::runtime::Caps)): wgpu reports no compute-unit count, so
    /// the device guesses from the vendor and type (a discrete NVIDIA or AMD GPU: 256). The
    /// planners split work (split-k, the recurrent step's K split, attention's key splits)
    /// until it fills this many slots. Set it to about twice the GPU's SM / CU count for a GPU
    /// the guess misjudges, or, with [`gpu_plans`](Self::gpu_plans), to run a discrete GPU's
    /// plans on a CPU adapter. `None` (the default): the estimate. Must be at least 1.
    pub parallelism: Option<usize>,
}

/// Upper bounds on [`DeviceOptions`] values: past them the param arena's size or the queue's
/// bookkeeping would overflow or make no sense.
const MAX_DISPATCHES_PER_SUBMIT: usize = 1 << 16;
const MAX_IN_FLIGHT: usize = 1 << 10;
/// wasm: most finished batches parked under the in-flight cap before new work is refused
/// (64 dispatches each by default: 65k queued dispatches between two async points).
#[cfg(target_arch = "wasm32")]
pub(crate) const MAX_PARKED: usize = 1024;
/// The smallest binding window [`DeviceOptions::max_binding_bytes`] takes, and the smallest
/// storage binding and buffer limits `Device::from_wgpu` accepts.
pub(crate) const MIN_BINDING_BYTES: u64 = 4096;

impl DeviceOptions {
    /// Whether these options let f16 GEMMs run on cooperative matrices: asked for
    /// ([`cooperative_matrix`](Self::cooperative_matrix)), and neither f16 disabled (the tile
    /// is f16) nor subgroups (a policy: that option asks for the portable kernels, and the
    /// tile relies on 32-lane hardware subgroups). The adapter decides the rest.
    pub(crate) fn wants_coop(&self) -> bool {
        self.cooperative_matrix && !self.disable_f16 && !self.disable_subgroups
    }

    /// Rejects values the runtime cannot honour (a cap of 0, an arena whose size overflows).
    pub(crate) fn validate(&self) -> Result<()> {
        let op = "device";
        if self.max_dispatches_per_submit == 0
            || self.max_dispatches_per_submit > MAX_DISPATCHES_PER_SUBMIT
        {
            return Err(Error::arg(
                op,
                format!(
                    "max_dispatches_per_submit must be in 1..={MAX_DISPATCHES_PER_SUBMIT}, got {}",
                    self.max_dispatches_per_submit
                ),
            ));
        }
        if self.max_in_flight == 0 || self.max_in_flight > MAX_IN_FLIGHT {
            return Err(Error::arg(
                op,
                format!(
                    "max_in_flight must be in 1..={MAX_IN_FLIGHT}, got {}",
                    self.max_in_flight
                ),
            ));
        }
        if self.max_bytes_per_submit == 0 {
            return Err(Error::arg(op, "max_bytes_per_submit must be at least 1"));
        }
        if let Some(b) = self.max_binding_bytes {
            if b < MIN_BINDING_BYTES {
                return Err(Error::arg(
                    op,
                    format!("max_binding_bytes must be at least {MIN_BINDING_BYTES}, got {b}"),
                ));
            }
        }
        if self.gpu_timeout.is_zero() {
            return Err(Error::arg(op, "gpu_timeout must be longer than 0"));
        }
        if self.parallelism == Some(0) {
            return Err(Error::arg(
                op,
                "parallelism must be at least 1 (None keeps the adapter's estimate)",
            ));
        }
        if self.memory_limit == Some(0) {
            return Err(Error::arg(
                op,
                "memory_limit must be at least 1 byte (None picks the default)",
            ));
        }
        Ok(())
    }
}

impl Default for DeviceOptions {
    fn default() -> Self {
        DeviceOptions {
            max_dispatches_per_submit: 64,
            max_bytes_per_submit: 256 << 20,
            max_in_flight: 3,
            pool_cap_bytes: None,
            disable_f16: false,
            disable_subgroups: false,
            memory_limit: None,
            max_binding_bytes: None,
            pipeline_cache: PipelineCacheSetting::Default,
            gpu_timeout: std::time::Duration::from_secs(300),
            check_indices: true,
            gpu_plans: false,
            cooperative_matrix: true,
            shader_checks: ShaderChecks::default(),
            parallelism: None,
        }
    }
}

#[cfg(test)]
mod shader_checks_tests {
    use super::ShaderChecks;
    use wgpu::{Backend, DeviceType};

    #[test]
    fn auto_drops_index_clamps_on_vulkan_gpus_only() {
        let auto = ShaderChecks::default();
        assert_eq!(auto, ShaderChecks::Auto);
        let vk = Backend::Vulkan;
        for t in [DeviceType::DiscreteGpu, DeviceType::IntegratedGpu] {
            assert_eq!(auto.resolve(t, vk), ShaderChecks::DivisionOnly);
        }
        assert_eq!(
            auto.resolve(DeviceType::Cpu, vk),
            ShaderChecks::NoLoopBounding
        );
        // Metal and DX12 have no robust buffer access to bound unclamped storage accesses.
        for b in [Backend::Metal, Backend::Dx12] {
            let got = auto.resolve(DeviceType::DiscreteGpu, b);
            assert_eq!(got, ShaderChecks::NoLoopBounding);
        }
        // Explicit settings stand for themselves on every adapter.
        let full = ShaderChecks::Full.resolve(DeviceType::DiscreteGpu, vk);
        assert_eq!(full, ShaderChecks::Full);
        let div = ShaderChecks::DivisionOnly.resolve(DeviceType::Cpu, vk);
        assert_eq!(div, ShaderChecks::DivisionOnly);
        let div = ShaderChecks::DivisionOnly.runtime_checks();
        assert!(!div.force_loop_bounding && !div.bounds_checks && div.int_div_checks);
        let loops = ShaderChecks::NoLoopBounding.runtime_checks();
        assert!(!loops.force_loop_bounding && loops.bounds_checks && loops.int_div_checks);
        let none = ShaderChecks::None.runtime_checks();
        assert!(!none.bounds_checks && !none.int_div_checks);
        assert!(ShaderChecks::Full.runtime_checks().force_loop_bounding);
    }
}
