//! The public ways to open a [`Device`]: runtime/open.rs picks the adapter, requests the wgpu
//! device and assembles the runtime's state; this layer above it and the kernels adds the
//! self-test of a kernel each driver compiles its own way (the cooperative-matrix GEMM tile,
//! ops/gemm/probe.rs) before the device trusts it.

use crate::runtime::MIN_BINDING_BYTES;
#[cfg(doc)]
use crate::Error;
use crate::{Device, DeviceOptions, Result};

impl Device {
    /// Opens the default device, blocking (native only). Honours WGPU_BACKEND,
    /// WGPU_ADAPTER_NAME and WGPU_POWER_PREF.
    ///
    /// Uses [`DeviceOptions::default`] and requests the adapter's SUBGROUP and SHADER_F16
    /// features when present (faster kernels, f16 tensors), and on Vulkan PIPELINE_CACHE, to
    /// load the pipelines compiled by earlier runs from the user's cache directory
    /// ([`DeviceOptions::pipeline_cache`]). Where the adapter offers cooperative matrices
    /// (NVIDIA through Vulkan), opening also compiles the f16 tensor-core GEMM and tests it on
    /// a small product ([`DeviceOptions::cooperative_matrix`]); a failure there opens the
    /// device without them ([`Device::cooperative_matrix_refused`] says why). Errors with
    /// [`Error::NoAdapter`], whose message says what to install, when no adapter is found, the
    /// device cannot be created, or the adapter cannot run wgtensor's compute shaders (no
    /// compute workgroups, or storage bindings or buffers under 4 KiB).
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// let dev = wgtensor::Device::new()?;
    /// let info = dev.adapter_info();
    /// println!("{} ({:?}), f16: {}", info.name, info.backend, dev.supports_f16());
    /// # Ok(()) }
    /// ```
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new() -> Result<Device> {
        Self::with_options(DeviceOptions::default())
    }

    /// Like [`Device::new`] with explicit execution options.
    ///
    /// Errors as [`Device::new`], and with [`Error::InvalidArgument`] for option values the
    /// runtime cannot honour (a cap of 0, a memory limit of 0, a `max_dispatches_per_submit`
    /// whose parameter buffer (256 bytes a dispatch) exceeds the device's `max_buffer_size`, or
    /// a memory limit without room for that buffer and one tensor).
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{Device, DeviceOptions};
    /// // At most 2 batches queued on the GPU, and a 2 GiB memory budget.
    /// let dev = Device::with_options(DeviceOptions {
    ///     max_in_flight: 2,
    ///     memory_limit: Some(2 << 30),
    ///     ..Default::default()
    /// })?;
    /// assert_eq!(dev.stats().memory_limit, 2 << 30);
    /// # Ok(()) }
    /// ```
    #[cfg(not(target_arch = "wasm32"))]
    pub fn with_options(opts: DeviceOptions) -> Result<Device> {
        pollster::block_on(Self::new_async_with(opts))
    }

    /// Opens the default device without blocking (the entry point on wasm).
    pub async fn new_async() -> Result<Device> {
        Self::new_async_with(DeviceOptions::default()).await
    }

    /// [`Device::with_options`] without blocking (the entry point on wasm, where the
    /// browser's adapter and device requests are asynchronous). Errors as `with_options`.
    /// Natively, a device that opens with cooperative matrices
    /// ([`DeviceOptions::cooperative_matrix`]) waits for the GPU to finish their self-test
    /// ([`Device::cooperative_matrix_refused`]) before it returns.
    pub async fn new_async_with(opts: DeviceOptions) -> Result<Device> {
        opts.validate()?;
        let (adapter, device, queue, limits, refused) = Self::request(&opts).await?;
        // An adapter without compute (a GL one of a build whose wgpu has `gles`) is refused
        // here, not by a division by its zero grid limit at the first op.
        if let Some(why) = compute_shortfall(&limits) {
            let info = adapter.get_info();
            return Err(crate::Error::NoAdapter(format!(
                "the adapter {} ({:?}) cannot run wgtensor's compute shaders: its {why}; \
                 wgtensor needs Vulkan, Metal, DX12 or WebGPU",
                info.name, info.backend
            )));
        }
        if let Some(why) = refused {
            // Opened without the feature, which the adapter refused.
            return Self::assemble(adapter, device, queue, limits, opts, Some(why));
        }
        match Self::assemble_checked(adapter, device, queue, limits, opts.clone())? {
            Checked::Ready(dev) => Ok(dev),
            Checked::Broken(e) => Self::open_without_coop(opts, e).await,
        }
    }

    /// Opens a fresh device without cooperative matrices after `why` (their self-test lost or
    /// stalled the first device), which [`Device::cooperative_matrix_refused`] then reports:
    /// the tile costs speed, never the device.
    async fn open_without_coop(opts: DeviceOptions, why: crate::Error) -> Result<Device> {
        let plain = DeviceOptions {
            cooperative_matrix: false,
            ..opts.clone()
        };
        let (adapter, device, queue, limits, _) = Self::request(&plain).await?;
        Self::assemble(adapter, device, queue, limits, opts, Some(why))
    }

    /// Runs wgtensor on a wgpu device the application already has (a game engine, an
    /// egui/winit app), so tensors and the app's own passes share buffers. wgtensor uses the
    /// features and limits the device was created with (SUBGROUP and SHADER_F16 enable the
    /// kernels that need them; [`DeviceOptions::disable_f16`] and
    /// [`DeviceOptions::disable_subgroups`] choose the features of the devices wgtensor
    /// requests, so create the device without those features to keep f16 tensors and the
    /// subgroup kernels off; they still turn off the cooperative-matrix tile). A
    /// [`DeviceOptions::max_dispatches_per_submit`] whose parameter buffer (one 256-byte slot
    /// per dispatch) exceeds the device's `max_buffer_size` is refused too.
    ///
    /// It installs the device's uncaptured-error handler and device-lost callback (wgpu keeps
    /// one of each), through which it reports errors as `Err`. Submit the app's own command
    /// buffers with [`Device::submit`] so that they run after wgtensor's pending work and under
    /// the in-flight cap; see [`Tensor::wgpu_buffer`](crate::Tensor::wgpu_buffer) for reading
    /// and writing tensors from those passes.
    ///
    /// The persisted pipeline cache ([`DeviceOptions::pipeline_cache`]) is used only if the
    /// device was created with `wgpu::Features::PIPELINE_CACHE`; otherwise
    /// [`DeviceStats::pipeline_cache`](crate::DeviceStats::pipeline_cache) reports it unsupported.
    /// A device created with wgpu's `EXPERIMENTAL_COOPERATIVE_MATRIX` and opened with
    /// [`DeviceOptions::cooperative_matrix`] tests the tile first, as
    /// [`Device::with_options`] does ([`Device::cooperative_matrix_refused`]). A device whose
    /// limits allow no compute workgroups, or storage bindings or buffers below 4 KiB (the
    /// floor of [`DeviceOptions::max_binding_bytes`]; wgpu's WebGL2 defaults have 0 of each),
    /// is refused with [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    pub fn from_wgpu(
        adapter: wgpu::Adapter,
        device: wgpu::Device,
        queue: wgpu::Queue,
        opts: DeviceOptions,
    ) -> Result<Device> {
        opts.validate()?;
        let limits = device.limits();
        if let Some(why) = compute_shortfall(&limits) {
            return Err(crate::Error::arg(
                "from_wgpu",
                format!(
                    "the device's {why} (request wgpu::Limits::default() or the adapter's \
                     limits)"
                ),
            ));
        }
        match Self::assemble_checked(adapter, device, queue, limits, opts)? {
            Checked::Ready(dev) => Ok(dev),
            // The application's device is lost or stuck: nothing to fall back on.
            Checked::Broken(e) => Err(e),
        }
    }

    /// [`Device::assemble`] (runtime/open.rs), trusting the cooperative-matrix tile only once it
    /// has passed its self-test on this driver (ops/gemm/probe.rs): where it fails to compile
    /// or gives a wrong value, the device is assembled again on the same wgpu device with
    /// `Caps::coop16` off, keeping the error; where it loses the device or the GPU does not
    /// finish it in time, that wgpu device is `Broken`.
    fn assemble_checked(
        adapter: wgpu::Adapter,
        device: wgpu::Device,
        queue: wgpu::Queue,
        limits: wgpu::Limits,
        opts: DeviceOptions,
    ) -> Result<Checked> {
        #[cfg(not(target_arch = "wasm32"))]
        {
            let (a, d, q, l, o) = (&adapter, &device, &queue, &limits, &opts);
            let dev = Self::assemble(a.clone(), d.clone(), q.clone(), l.clone(), o.clone(), None)?;
            if !dev.caps().coop16 {
                return Ok(Checked::Ready(dev));
            }
            let Err(e) = crate::ops::gemm::probe::check(&dev) else {
                return Ok(Checked::Ready(dev));
            };
            let broken = match dev.lost_reason() {
                Some(msg) => Some(crate::Error::DeviceLost { op: "device", msg }),
                None => matches!(
                    e,
                    crate::Error::DeviceLost { .. } | crate::Error::Readback { .. }
                )
                .then(|| e.clone()),
            };
            if let Some(why) = broken {
                // Dropping the last handles of a queue waits for it to go idle, which a GPU
                // stuck on the tile never does: a detached thread holds them instead of this
                // one, which goes on to open a fresh device.
                std::thread::spawn(move || drop((dev, adapter, device, queue)));
                return Ok(Checked::Broken(why));
            }
            drop(dev);
            Self::assemble(adapter, device, queue, limits, opts, Some(e)).map(Checked::Ready)
        }
        #[cfg(target_arch = "wasm32")]
        Self::assemble(adapter, device, queue, limits, opts, None).map(Checked::Ready)
    }
}

/// What [`Device::assemble_checked`] made of a wgpu device.
enum Checked {
    /// The device, with the cooperative-matrix tile or without it.
    Ready(Device),
    /// The tile's self-test lost the wgpu device or the GPU did not finish it: nothing more
    /// can be trusted to run on that device.
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    Broken(crate::Error),
}

/// The limits checked when a device is opened or an application's device adopted (a GL
/// adapter without compute, in a build whose wgpu has `gles`): compute workgroups (wgpu's
/// WebGL2 defaults have none, where the first op would divide by a zero limit), and storage
/// bindings and buffers of at least the 4 KiB floor `DeviceOptions::max_binding_bytes` has.
/// (Limits below what one kernel needs, fewer storage bindings per stage for example, fail
/// that kernel's pipeline, an error on each call.)
/// Returns the first limit that falls short, in words ("{limit} is {got}, below the {min}
/// wgtensor requires"), each caller saying whose it is.
fn compute_shortfall(l: &wgpu::Limits) -> Option<String> {
    // (limit, value, floor): the grid one workgroup; bindings and buffers the floor of
    // DeviceOptions::max_binding_bytes.
    let need: [(&str, u64, u64); 3] = [
        (
            "max_compute_workgroups_per_dimension",
            l.max_compute_workgroups_per_dimension.into(),
            1,
        ),
        (
            "max_storage_buffer_binding_size",
            l.max_storage_buffer_binding_size,
            MIN_BINDING_BYTES,
        ),
        ("max_buffer_size", l.max_buffer_size, MIN_BINDING_BYTES),
    ];
    need.into_iter()
        .find(|&(_, got, min)| got < min)
        .map(|(name, got, min)| format!("{name} is {got}, below the {min} wgtensor requires"))
}
