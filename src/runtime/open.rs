//! Opening a device: choosing the adapter, the features and limits to request, and building
//! the shared state (`Inner`) behind the `Device` handle. The public constructors
//! (src/device_open.rs) call these and add the kernels' self-tests, which this layer cannot
//! name.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::batch::Batch;
use super::bind_cache::BindGroupCache;
use super::device::{lock, map_wgpu_error, Device, DeviceOptions, Inner, State};
use super::pipeline::{PipelineCache, PARAM_SLOT};
use super::pool::BufferPool;
use super::submitter::Submitter;
use crate::{Error, Result};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The generator's seed until [`Device::manual_seed`] sets one (PyTorch's default generator
/// starts from a fixed seed too, so runs are reproducible by default).
const DEFAULT_SEED: u64 = 67_280_421_310_721;

async fn pick_adapter(instance: &wgpu::Instance) -> Result<wgpu::Adapter> {
    #[cfg(not(target_arch = "wasm32"))]
    if let Ok(name) = std::env::var("WGPU_ADAPTER_NAME") {
        let want = name.to_lowercase();
        let adapters = instance.enumerate_adapters(wgpu::Backends::all()).await;
        let names: Vec<String> = adapters.iter().map(|a| a.get_info().name).collect();
        return adapters
            .into_iter()
            .find(|a| a.get_info().name.to_lowercase().contains(&want))
            .ok_or_else(|| {
                Error::NoAdapter(format!(
                    "WGPU_ADAPTER_NAME={name:?} matches none of the adapters {names:?}. \
                     {NO_ADAPTER_HINT}"
                ))
            });
    }
    instance
        .request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::from_env().unwrap_or_default(),
            ..Default::default()
        })
        .await
        .map_err(|e| Error::NoAdapter(format!("no adapter available: {e}. {NO_ADAPTER_HINT}")))
}

/// What to do when no adapter is found (the message users see first on a machine without a
/// GPU driver).
const NO_ADAPTER_HINT: &str = "Install a GPU driver with Vulkan, Metal or DX12 support; without \
a GPU, Mesa's lavapipe runs Vulkan on the CPU (Debian/Ubuntu: `apt-get install \
mesa-vulkan-drivers libvulkan1`, or run scripts/install-lavapipe.sh). WGPU_BACKEND \
(vulkan, metal, dx12), WGPU_ADAPTER_NAME and WGPU_POWER_PREF pick among several adapters; in \
a browser, WebGPU must be enabled (chrome://gpu tells)";

impl Device {
    /// Picks the adapter and requests a wgpu device with the features and limits `opts` call
    /// for (`Device::new_async_with`, src/device_open.rs, assembles the device on it). Where
    /// the request with cooperative matrices fails, the same adapter is asked again without
    /// them, and the first error comes back beside the device (the reason the tile is off).
    #[allow(clippy::type_complexity)]
    pub(crate) async fn request(
        opts: &DeviceOptions,
    ) -> Result<(
        wgpu::Adapter,
        wgpu::Device,
        wgpu::Queue,
        wgpu::Limits,
        Option<Error>,
    )> {
        let instance =
            wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let adapter = pick_adapter(&instance).await?;
        let mut wanted = wgpu::Features::empty();
        if !opts.disable_subgroups {
            wanted |= wgpu::Features::SUBGROUP;
        }
        if !opts.disable_f16 {
            wanted |= wgpu::Features::SHADER_F16;
        }
        if super::pipeline_store::wants_feature(&opts.pipeline_cache, &adapter.get_info()) {
            wanted |= wgpu::Features::PIPELINE_CACHE;
        }
        // Cooperative matrices where the options want them (the default) and the adapter can
        // run gemm_coop (not merely list its configuration: an adapter whose subgroups may be
        // 64 lanes wide never would, so it is not handed the experimental feature).
        let coop = opts.wants_coop()
            && adapter.features().contains(wgpu::Features::SHADER_F16)
            && super::caps::runs_coop_tile(
                &adapter.get_info(),
                &adapter.limits(),
                &adapter.cooperative_matrix_properties(),
            );
        if coop {
            wanted |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
        }
        let features = adapter.features() & wanted;
        let limits = adapter.limits();
        match Self::request_device(&adapter, features, &limits).await {
            Ok((device, queue)) => Ok((adapter, device, queue, limits, None)),
            // An adapter may list the configuration and still refuse wgpu's experimental
            // feature: ask again without it, keeping why.
            Err(e) if features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) => {
                let plain = features - wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
                let (device, queue) = Self::request_device(&adapter, plain, &limits).await?;
                Ok((adapter, device, queue, limits, Some(e)))
            }
            Err(e) => Err(e),
        }
    }

    /// The wgpu device of `adapter` with `features` and `limits`.
    async fn request_device(
        adapter: &wgpu::Adapter,
        features: wgpu::Features,
        limits: &wgpu::Limits,
    ) -> Result<(wgpu::Device, wgpu::Queue)> {
        let experimental_features =
            if features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
                // SAFETY: wgpu marks the feature experimental (its implementation may have bugs,
                // not undefined behaviour in safe use); it is requested only where
                // `DeviceOptions::cooperative_matrix` allows (the default; `false` opts out), only
                // gemm_coop uses it, and the device trusts it only after its self-test
                // (ops/gemm/probe.rs).
                unsafe { wgpu::ExperimentalFeatures::enabled() }
            } else {
                wgpu::ExperimentalFeatures::disabled()
            };
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("wgtensor"),
                required_features: features,
                required_limits: limits.clone(),
                experimental_features,
                ..Default::default()
            })
            .await
            .map_err(|e| Error::NoAdapter(format!("request_device failed: {e}")))?;
        Ok((device, queue))
    }

    /// The device's state around an opened wgpu device; with `coop_refused` (why the
    /// cooperative-matrix tile is off: its request or its self-test failed) `Caps::coop16`
    /// stays off.
    pub(crate) fn assemble(
        adapter: wgpu::Adapter,
        device: wgpu::Device,
        queue: wgpu::Queue,
        limits: wgpu::Limits,
        opts: DeviceOptions,
        coop_refused: Option<Error>,
    ) -> Result<Device> {
        // Each batch's parameter arena holds one slot per dispatch: a device whose buffers
        // cannot hold it would fail every batch.
        let param_slot = PARAM_SLOT.max(limits.min_uniform_buffer_offset_alignment as u64);
        let arena = (opts.max_dispatches_per_submit as u64).saturating_mul(param_slot);
        if arena > limits.max_buffer_size {
            return Err(Error::arg(
                "Device",
                format!(
                    "max_dispatches_per_submit = {} needs a parameter buffer of {arena} bytes, \
                     above the device's max_buffer_size of {} (lower \
                     DeviceOptions::max_dispatches_per_submit)",
                    opts.max_dispatches_per_submit, limits.max_buffer_size
                ),
            ));
        }
        // The arena (its size class) counts toward the budget, beside at least one smallest
        // tensor buffer: below that every first dispatch would be out of memory.
        let least = super::pool::size_class(arena).saturating_add(super::pool::size_class(1));
        if let Some(limit) = opts.memory_limit.filter(|&m| m < least) {
            return Err(Error::arg(
                "Device",
                format!(
                    "memory_limit = {limit} is below one batch's parameter buffer of {arena} \
                     bytes (max_dispatches_per_submit = {}) and one tensor: at least {least} \
                     bytes",
                    opts.max_dispatches_per_submit
                ),
            ));
        }
        // Both callbacks raise `flagged` after filling their slot, so `check` takes no lock
        // while nothing has gone wrong (it runs on every op).
        let flagged = Arc::new(AtomicBool::new(false));
        let lost = Arc::new(Mutex::new(None));
        let (lost_cb, flag_cb) = (lost.clone(), flagged.clone());
        device.set_device_lost_callback(move |reason, msg| {
            *lock(&lost_cb) = Some(format!("{reason:?}: {msg}"));
            flag_cb.store(true, Ordering::Release);
        });
        let uncaptured = Arc::new(Mutex::new(None));
        let (unc_cb, flag_cb) = (uncaptured.clone(), flagged.clone());
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            let mut slot = lock(&unc_cb);
            if slot.is_none() {
                *slot = Some(map_wgpu_error("device", e));
            }
            flag_cb.store(true, Ordering::Release);
        }));

        let info = adapter.get_info();
        let features = device.features();
        let coop = adapter.cooperative_matrix_properties();
        let mut caps = super::caps::Caps::read(&info, features, &limits, &coop);
        // A CPU adapter planning as a GPU with cooperative matrices asked for runs the
        // cooperative-matrix tile over emulated fragments (`Device::coop_emulated`): how the
        // suite tests that tile without tensor cores.
        // The options hold for an application's device too (`Device::from_wgpu`), whatever
        // features it was created with.
        let asked = opts.wants_coop();
        let coop_emulated = coop_refused.is_none()
            && caps.cpu
            && !caps.coop16
            && opts.gpu_plans
            && asked
            && caps.f16
            && super::caps::holds_coop_tile(&limits);
        caps.coop16 = (caps.coop16 && asked || coop_emulated) && coop_refused.is_none();
        caps.cpu &= !opts.gpu_plans;
        if let Some(slots) = opts.parallelism {
            caps.parallelism = slots;
        }
        let align = u64::from(limits.min_storage_buffer_offset_alignment.max(4));
        let binding_limit = (limits.max_storage_buffer_binding_size)
            .min(opts.max_binding_bytes.unwrap_or(u64::MAX))
            .min(u32::MAX as u64)
            / align
            * align;
        let memory_limit = opts
            .memory_limit
            .unwrap_or_else(|| super::memory::default_limit(info.device_type));
        let mut pipelines = PipelineCache::default();
        pipelines.checks = opts.shader_checks.resolve(info.device_type, info.backend);
        let pipeline_cache =
            super::pipeline_store::open(&opts.pipeline_cache, &info, &device, &mut pipelines);
        let shares_host = opts.memory_limit.is_none() && info.device_type == wgpu::DeviceType::Cpu;
        let dev = Device {
            inner: Arc::new(Inner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                state: Mutex::new(State {
                    pool: BufferPool::new(
                        opts.pool_cap_bytes
                            .unwrap_or_else(|| super::memory::default_pool_cap(memory_limit)),
                        binding_limit,
                        limits.max_buffer_size.min(u32::MAX as u64) / 4 * 4,
                        // The default budget of a CPU adapter is the process's host memory,
                        // shared by every such device.
                        shares_host.then_some(&super::memory::HOST_HELD),
                    ),
                    bind_groups: BindGroupCache::default(),
                    batch: Batch::default(),
                    submitter: Submitter::new(
                        opts.max_in_flight,
                        super::submitter::spin_for(info.device_type),
                    ),
                    dispatches: 0,
                    donations: 0,
                    batch_error: None,
                    index_err: None,
                    index_ops: Vec::new(),
                    index_check_pending: false,
                    late_checks: Vec::new(),
                }),
                pipelines: Mutex::new(pipelines),
                pipeline_cache,
                adapter,
                device,
                queue,
                info,
                limits,
                features,
                opts,
                param_slot,
                memory_limit,
                binding_limit,
                caps,
                coop_emulated,
                coop_refused,
                rng: Mutex::new((DEFAULT_SEED, 0)),
                lost,
                uncaptured,
                flagged,
            }),
        };
        #[cfg(not(target_arch = "wasm32"))]
        if shares_host {
            // Listed so that a device over the shared budget can drop the others' caches.
            let mut list = lock(&super::device::HOST_DEVICES);
            list.retain(|w| w.strong_count() > 0);
            list.push(Arc::downgrade(&dev.inner));
        }
        Ok(dev)
    }
}
