//! The device: adapter selection, limits and features, and the shared execution state
//! (pool, pending batch, in-flight queue, pipeline cache) behind one cheap-to-clone handle.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::batch::Batch;
use super::bind_cache::{BindGroupCache, Bindings};
use super::pipeline::{CachedPipeline, Kernel, PipelineCache, PARAM_SLOT};
use super::pool::{size_class, BufferPool, PoolStats};
use super::submitter::Submitter;
use crate::{DType, Error, Result};

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
    /// Freed buffers beyond this many cached bytes are destroyed instead of kept.
    pub pool_cap_bytes: u64,
    /// Do not request SHADER_F16 even when the adapter has it (to exercise f32-only paths).
    pub disable_f16: bool,
    /// Do not request SUBGROUP (kernels then use their portable variants).
    pub disable_subgroups: bool,
    /// Most bytes of GPU buffers (live tensors, workspaces and the pool's cache) the device may
    /// hold; an allocation past it first drops cached buffers, then fails with
    /// [`Error::OutOfMemory`] before wgpu is asked (MLX's `set_memory_limit`). `None`: on CPU
    /// adapters, where device memory is host memory and running out crashes the driver, what
    /// the process may use (3/4 of physical or cgroup memory, half the address-space limit);
    /// on GPUs no limit beyond the driver's own out-of-memory errors.
    pub memory_limit: Option<u64>,
}

/// Upper bounds on [`DeviceOptions`] values: past them the param arena's size or the queue's
/// bookkeeping would overflow or make no sense.
const MAX_DISPATCHES_PER_SUBMIT: usize = 1 << 16;
const MAX_IN_FLIGHT: usize = 1 << 10;
/// wasm: most finished batches parked under the in-flight cap before new work is refused
/// (64 dispatches each by default: 65k queued dispatches between two async points).
#[cfg(target_arch = "wasm32")]
const MAX_PARKED: usize = 1024;

impl DeviceOptions {
    /// Rejects values the runtime cannot honour (a cap of 0, an arena whose size overflows).
    fn validate(&self) -> Result<()> {
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
            pool_cap_bytes: 1 << 30,
            disable_f16: false,
            disable_subgroups: false,
            memory_limit: None,
        }
    }
}

/// Counters reported by [`Device::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceStats {
    pub pipelines_compiled: u64,
    pub dispatches: u64,
    pub submissions: u64,
    pub in_flight: usize,
    pub peak_in_flight: usize,
    /// Finished batches held back by the in-flight cap until the next async point (wasm only;
    /// always 0 on native, where submitting waits instead).
    pub parked: usize,
    pub pool: PoolStats,
    /// The memory budget in force ([`DeviceOptions::memory_limit`] or its derived default).
    pub memory_limit: u64,
}

pub(crate) struct State {
    pub(crate) pool: BufferPool,
    pub(crate) bind_groups: BindGroupCache,
    pub(crate) batch: Batch,
    pub(crate) submitter: Submitter,
    pub(crate) dispatches: u64,
}

pub(crate) struct Inner {
    pub(crate) id: u64,
    pub(crate) adapter: wgpu::Adapter,
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) info: wgpu::AdapterInfo,
    pub(crate) limits: wgpu::Limits,
    pub(crate) features: wgpu::Features,
    pub(crate) opts: DeviceOptions,
    pub(crate) param_slot: u64,
    pub(crate) memory_limit: u64,
    pub(crate) caps: super::caps::Caps,
    state: Mutex<State>,
    pipelines: Mutex<PipelineCache>,
    lost: Arc<Mutex<Option<String>>>,
    uncaptured: Arc<Mutex<Option<Error>>>,
    /// Set when `lost` or `uncaptured` may hold something.
    flagged: Arc<AtomicBool>,
}

/// A GPU device. Clone is an `Arc` bump; every clone drives the same queue and batch.
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("adapter", &self.inner.info.name)
            .field("backend", &self.inner.info.backend)
            .finish()
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave our counters half-updated in a way that
    // matters more than refusing all further work, so recover the guard.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

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
    /// Opens the default device, blocking (native only). Honours WGPU_BACKEND,
    /// WGPU_ADAPTER_NAME and WGPU_POWER_PREF.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new() -> Result<Device> {
        Self::with_options(DeviceOptions::default())
    }

    /// Like [`Device::new`] with explicit execution options.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn with_options(opts: DeviceOptions) -> Result<Device> {
        pollster::block_on(Self::new_async_with(opts))
    }

    /// Opens the default device without blocking (the entry point on wasm).
    pub async fn new_async() -> Result<Device> {
        Self::new_async_with(DeviceOptions::default()).await
    }

    pub async fn new_async_with(opts: DeviceOptions) -> Result<Device> {
        opts.validate()?;
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
        let features = adapter.features() & wanted;
        let limits = adapter.limits();
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("wgtensor"),
                required_features: features,
                required_limits: limits.clone(),
                ..Default::default()
            })
            .await
            .map_err(|e| Error::NoAdapter(format!("request_device failed: {e}")))?;

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

        let param_slot = PARAM_SLOT.max(limits.min_uniform_buffer_offset_alignment as u64);
        let info = adapter.get_info();
        let features = device.features();
        let caps = super::caps::Caps::read(&info, features, &limits);
        let memory_limit = opts
            .memory_limit
            .unwrap_or_else(|| super::memory::default_limit(info.device_type));
        Ok(Device {
            inner: Arc::new(Inner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                state: Mutex::new(State {
                    pool: BufferPool::new(opts.pool_cap_bytes),
                    bind_groups: BindGroupCache::default(),
                    batch: Batch::default(),
                    submitter: Submitter::new(opts.max_in_flight),
                    dispatches: 0,
                }),
                pipelines: Mutex::new(PipelineCache::default()),
                adapter,
                device,
                queue,
                info,
                limits,
                features,
                opts,
                param_slot,
                memory_limit,
                caps,
                lost,
                uncaptured,
                flagged,
            }),
        })
    }

    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.inner.info
    }
    pub fn limits(&self) -> &wgpu::Limits {
        &self.inner.limits
    }
    pub fn features(&self) -> wgpu::Features {
        self.inner.features
    }
    pub fn options(&self) -> &DeviceOptions {
        &self.inner.opts
    }
    /// The adapter facts the kernel planners use, read once when the device opened.
    pub fn caps(&self) -> &super::caps::Caps {
        &self.inner.caps
    }
    pub fn supports_f16(&self) -> bool {
        self.inner.features.contains(wgpu::Features::SHADER_F16)
    }
    /// The underlying wgpu device, for interop: create pipelines, buffers and command
    /// encoders on it, and submit them with [`Device::submit`], which keeps them in order with
    /// wgtensor's pending work and under the in-flight cap (the queue itself is not exposed,
    /// since submitting on it directly would bypass both).
    pub fn wgpu_device(&self) -> &wgpu::Device {
        &self.inner.device
    }
    pub fn wgpu_adapter(&self) -> &wgpu::Adapter {
        &self.inner.adapter
    }

    /// True when both handles drive the same device.
    pub fn same(&self, other: &Device) -> bool {
        self.inner.id == other.inner.id
    }

    pub fn stats(&self) -> DeviceStats {
        let compiled = lock(&self.inner.pipelines).compiled;
        let mut st = lock(&self.inner.state);
        st.submitter.prune(&self.inner.device);
        DeviceStats {
            pipelines_compiled: compiled,
            dispatches: st.dispatches,
            submissions: st.submitter.submissions,
            in_flight: st.submitter.in_flight(),
            peak_in_flight: st.submitter.peak,
            parked: st.submitter.parked(),
            pool: st.pool.stats,
            memory_limit: self.inner.memory_limit,
        }
    }

    /// Destroys cached pool buffers that are free now (live tensors are untouched).
    pub fn clear_pool(&self) {
        let mut st = lock(&self.inner.state);
        st.pool.clear();
        // Cached bind groups hold the destroyed buffers: let them go too.
        st.bind_groups.clear();
    }

    /// Errors out if the device was lost or wgpu reported an error outside an error scope.
    pub(crate) fn check(&self, op: &'static str) -> Result<()> {
        if self.inner.flagged.load(Ordering::Acquire) {
            if let Some(msg) = lock(&self.inner.lost).clone() {
                return Err(Error::DeviceLost { op, msg });
            }
            let taken = lock(&self.inner.uncaptured).take();
            // Cleared, then raised again if either slot was filled meanwhile (a callback
            // that ran between our reads and the clear).
            self.inner.flagged.store(false, Ordering::Release);
            if lock(&self.inner.lost).is_some() || lock(&self.inner.uncaptured).is_some() {
                self.inner.flagged.store(true, Ordering::Release);
            }
            if let Some(e) = taken {
                return Err(e);
            }
        }
        // wasm cannot block for room under the in-flight cap, so finished batches park until
        // the next async point; a loop that never awaits one would park (and hold the memory
        // of) batches without end. Past a bound, new work is refused before anything is
        // recorded, so nothing computed so far is lost.
        #[cfg(target_arch = "wasm32")]
        {
            let parked = self.lock_state().submitter.parked();
            if parked >= MAX_PARKED {
                return Err(Error::arg(
                    op,
                    format!(
                        "{parked} finished batches are waiting for room under the in-flight cap \
                         of {}: await Device::sync_async() (or a to_vec_async) in long loops",
                        self.inner.opts.max_in_flight
                    ),
                ));
            }
        }
        Ok(())
    }

    pub(crate) fn require_dtype(&self, op: &'static str, dtype: DType) -> Result<()> {
        if dtype == DType::F16 && !self.supports_f16() {
            return Err(Error::MissingFeature {
                op,
                feature: "SHADER_F16",
            });
        }
        Ok(())
    }

    pub(crate) fn lock_state(&self) -> MutexGuard<'_, State> {
        lock(&self.inner.state)
    }

    /// Runs `f` inside validation and out-of-memory error scopes (native), turning what wgpu
    /// reports into our errors. On wasm the scopes cannot be awaited synchronously, so errors
    /// arrive through the uncaptured-error handler and surface at the next sync/readback.
    pub(crate) fn scoped<R>(&self, op: &'static str, f: impl FnOnce() -> R) -> Result<R> {
        #[cfg(not(target_arch = "wasm32"))]
        {
            let oom = self
                .inner
                .device
                .push_error_scope(wgpu::ErrorFilter::OutOfMemory);
            let val = self
                .inner
                .device
                .push_error_scope(wgpu::ErrorFilter::Validation);
            let r = f();
            let val = pollster::block_on(val.pop());
            let oom = pollster::block_on(oom.pop());
            if let Some(e) = oom.or(val) {
                return Err(map_wgpu_error(op, e));
            }
            Ok(r)
        }
        #[cfg(target_arch = "wasm32")]
        {
            let _ = op;
            Ok(f())
        }
    }

    /// Byte limit checks shared by every allocation.
    pub(crate) fn check_bytes(&self, op: &'static str, bytes: u64) -> Result<()> {
        let l = &self.inner.limits;
        // Kernels index with u32, and Metal hands naga's bounds checks u32 byte sizes (reads past
        // 4 GiB would return 0): no binding may exceed 4 GiB - 1 whatever the adapter reports.
        let (name, limit) = [
            ("max_buffer_size", l.max_buffer_size),
            ("u32 indexing (4 GiB - 1)", u32::MAX as u64),
        ]
        .into_iter()
        .fold(
            (
                "max_storage_buffer_binding_size",
                l.max_storage_buffer_binding_size,
            ),
            |best, cand| if cand.1 < best.1 { cand } else { best },
        );
        if size_class(bytes) > limit {
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
        let size = size_class(bytes);
        self.make_room_locked(&mut st, op, size)?;
        // Create under the lock so pool accounting and creation stay one step.
        let buf = self.scoped(op, || {
            self.inner.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(op),
                size,
                usage,
                mapped_at_creation: false,
            })
        })?;
        st.pool.note_created(size);
        st.batch.bytes += size;
        if st.batch.bytes >= self.inner.opts.max_bytes_per_submit {
            self.flush_locked(&mut st, op)?;
        }
        Ok(buf)
    }

    /// Keeps the pool within the memory budget for a new buffer of `size` bytes: drops cached
    /// buffers, then (when freed buffers wait for the pending batch) submits it and drops
    /// those too; errors when live buffers alone leave no room.
    fn make_room_locked(&self, st: &mut State, op: &'static str, size: u64) -> Result<()> {
        let limit = self.inner.memory_limit;
        let over =
            |st: &State| st.pool.stats.live_bytes + st.pool.stats.cached_bytes + size > limit;
        if !over(st) {
            return Ok(());
        }
        st.pool.clear();
        if over(st) && st.pool.pending_bytes() > 0 {
            self.flush_locked(st, op)?;
            st.pool.clear();
        }
        if over(st) {
            return Err(Error::OutOfMemory {
                op,
                msg: format!(
                    "a buffer of {size} bytes would exceed the device memory limit of {limit} \
                     bytes ({} bytes live, {} cached awaiting submission; \
                     DeviceOptions::memory_limit sets the limit)",
                    st.pool.stats.live_bytes, st.pool.stats.cached_bytes
                ),
            });
        }
        Ok(())
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
    /// submission's commands). Counts toward the batch's byte budget, so a long run of uploads
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
        // write_buffer needs a multiple of 4 bytes (odd-length f16 data).
        if data.len().is_multiple_of(4) {
            self.inner.queue.write_buffer(buf, offset, data);
        } else {
            let mut padded = data.to_vec();
            padded.resize(data.len().div_ceil(4) * 4, 0);
            self.inner.queue.write_buffer(buf, offset, &padded);
        }
        st.batch.bytes += data.len() as u64;
        if st.batch.bytes >= self.inner.opts.max_bytes_per_submit {
            if st.batch.encoder.is_none() {
                // An empty submission still flushes wgpu's staged writes.
                st.batch.open_without_arena(&self.inner.device);
            }
            self.flush_locked(&mut st, op)?;
        }
        Ok(())
    }

    /// Submits command buffers the caller recorded on [`Device::wgpu_device`] (interop), after
    /// the work wgtensor has recorded so far and through the same bounded in-flight queue, so
    /// outside work can neither overtake pending ops nor run past `max_in_flight`.
    pub fn submit(&self, commands: impl IntoIterator<Item = wgpu::CommandBuffer>) -> Result<()> {
        let op = "submit";
        self.check(op)?;
        let mut st = self.lock_state();
        self.flush_locked(&mut st, op)?;
        for cmd in commands {
            let freed = st.pool.take_pending();
            #[cfg(target_arch = "wasm32")]
            if st.submitter.must_park(&self.inner.device) {
                st.submitter
                    .parked
                    .push_back(super::submitter::Parked { cmd, freed });
                continue;
            }
            self.submit_locked(&mut st, cmd, freed, op)?;
        }
        Ok(())
    }

    /// Looks up or compiles a pipeline.
    pub(crate) fn pipeline(
        &self,
        op: &'static str,
        kernel: &Kernel,
        dtypes: &[DType],
        constants: &[(&'static str, f64)],
    ) -> Result<Arc<CachedPipeline>> {
        let mut cache = lock(&self.inner.pipelines);
        if let Some(p) = cache.get(kernel, dtypes, constants) {
            return Ok(p);
        }
        self.scoped(op, || {
            cache.compile(&self.inner.device, kernel, dtypes, constants)
        })
    }

    /// The one launch path: bind Params (binding 0, a slice of the batch's param arena) and the
    /// storage buffers (bindings 1..), record the dispatch, submit when the batch is full.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch(
        &self,
        op: &'static str,
        kernel: &Kernel,
        dtypes: &[DType],
        constants: &[(&'static str, f64)],
        params: &[u8],
        buffers: &[&wgpu::Buffer],
        grid: [u32; 3],
    ) -> Result<()> {
        debug_assert_eq!(buffers.len(), kernel.bindings.len(), "{}", kernel.name);
        if params.len() as u64 > self.inner.param_slot {
            return Err(Error::arg(
                op,
                format!(
                    "params of {} bytes exceed the {} byte slot",
                    params.len(),
                    self.inner.param_slot
                ),
            ));
        }
        let max = self.inner.limits.max_compute_workgroups_per_dimension;
        if grid.iter().any(|&g| g > max) {
            return Err(Error::size(
                op,
                format!("grid {grid:?} exceeds max_compute_workgroups_per_dimension {max}"),
            ));
        }
        self.check(op)?;
        let pipeline = self.pipeline(op, kernel, dtypes, constants)?;
        if grid.contains(&0) {
            return Ok(());
        }
        let mut st = self.lock_state();
        let st = &mut *st;
        if st.batch.arena.is_none() {
            let slots = self.inner.opts.max_dispatches_per_submit as u64;
            let arena = match st.pool.take(slots * self.inner.param_slot, PARAMS_USAGE) {
                Some(b) => b,
                None => {
                    let size = size_class(slots * self.inner.param_slot);
                    // The arena counts toward the memory budget like any buffer.
                    self.make_room_locked(st, op, size)?;
                    st.pool.note_created(size);
                    self.inner.device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("param arena"),
                        size,
                        usage: PARAMS_USAGE,
                        mapped_at_creation: false,
                    })
                }
            };
            st.batch.open(&self.inner.device, arena);
        }
        let offset = st.batch.push_params(params, self.inner.param_slot);
        let Some(arena) = st.batch.arena.as_ref() else {
            return Err(Error::arg(op, "internal: no param arena for the dispatch"));
        };
        let slot_of = |i: usize| kernel.slot(i);
        let bind_group = st.bind_groups.get(
            &self.inner.device,
            &Bindings {
                layout: &pipeline.layout,
                label: kernel.name,
                arena,
                slot_size: self.inner.param_slot,
                buffers,
                slot_of: &slot_of,
            },
            st.pool.generation,
        );
        let Some(pass) = st.batch.pass() else {
            return Err(Error::arg(
                op,
                "internal: no command encoder open for the dispatch",
            ));
        };
        pass.set_pipeline(&pipeline.pipeline);
        pass.set_bind_group(0, &bind_group, &[offset as u32]);
        pass.dispatch_workgroups(grid[0], grid[1], grid[2]);
        st.dispatches += 1;
        if st.batch.dispatches + st.batch.commands >= self.inner.opts.max_dispatches_per_submit {
            self.flush_locked(st, op)?;
        }
        Ok(())
    }

    /// Records a buffer-to-buffer copy into the pending batch.
    pub(crate) fn record_copy(
        &self,
        src: &wgpu::Buffer,
        src_offset: u64,
        dst: &wgpu::Buffer,
        bytes: u64,
    ) {
        let mut st = self.lock_state();
        if st.batch.encoder.is_none() {
            st.batch.open_without_arena(&self.inner.device);
        }
        if let Some(enc) = st.batch.encoder_outside_pass() {
            enc.copy_buffer_to_buffer(src, src_offset, dst, 0, bytes);
        }
        st.batch.commands += 1;
    }

    /// Records a clear (zero fill) into the pending batch.
    pub(crate) fn record_clear(&self, buf: &wgpu::Buffer, bytes: u64) {
        let mut st = self.lock_state();
        if st.batch.encoder.is_none() {
            st.batch.open_without_arena(&self.inner.device);
        }
        if let Some(enc) = st.batch.encoder_outside_pass() {
            enc.clear_buffer(buf, 0, Some(bytes));
        }
        st.batch.commands += 1;
        // Clears and copies count toward the batch size like dispatches, so a loop of them
        // submits now and then and the buffers freed meanwhile become reusable.
        if st.batch.dispatches + st.batch.commands >= self.inner.opts.max_dispatches_per_submit {
            let _ = self.flush_locked(&mut st, "record_clear");
        }
    }

    /// Submits the pending batch (if any) and returns the index of the last submission.
    pub(crate) fn flush(&self, op: &'static str) -> Result<()> {
        let mut st = self.lock_state();
        self.flush_locked(&mut st, op)
    }

    /// Finishes the pending batch and submits it. wasm: when the in-flight cap is reached the
    /// batch is parked instead, and the next async point submits it ([`Device::submit_parked`]).
    pub(crate) fn flush_locked(&self, st: &mut State, op: &'static str) -> Result<()> {
        let Some((cmd, arena)) = st.batch.finish(&self.inner.queue) else {
            return Ok(());
        };
        if let Some(a) = arena {
            st.pool.release(a);
        }
        // What was freed while this batch was recorded (its arena too) is reusable once the
        // batch is submitted.
        let freed = st.pool.take_pending();
        #[cfg(target_arch = "wasm32")]
        if st.submitter.must_park(&self.inner.device) {
            st.submitter
                .parked
                .push_back(super::submitter::Parked { cmd, freed });
            return Ok(());
        }
        self.submit_locked(st, cmd, freed, op)
    }

    fn submit_locked(
        &self,
        st: &mut State,
        cmd: wgpu::CommandBuffer,
        freed: super::pool::Freed,
        op: &'static str,
    ) -> Result<()> {
        let r = st
            .submitter
            .submit(&self.inner.device, &self.inner.queue, cmd);
        st.pool.reuse(freed);
        r.map(|_| ()).map_err(|e| poll_error(op, e))
    }

    /// wasm: submits the parked batches in order, awaiting the oldest outstanding submission
    /// whenever the in-flight cap is reached. This is where the cap is enforced on wasm.
    #[cfg(target_arch = "wasm32")]
    pub(super) async fn submit_parked(&self, op: &'static str) -> Result<()> {
        loop {
            let finished = {
                let mut st = self.lock_state();
                let st = &mut *st;
                st.submitter.prune(&self.inner.device);
                if st.submitter.parked.is_empty() {
                    return Ok(());
                }
                if st.submitter.in_flight() < st.submitter.max_in_flight {
                    let p = st.submitter.parked.pop_front().expect("not empty");
                    self.submit_locked(st, p.cmd, p.freed, op)?;
                    continue;
                }
                st.submitter.oldest_finished()
            };
            match finished {
                Some(rx) => {
                    let _ = rx.await;
                }
                // Another task awaits the oldest one: wait for everything submitted so far.
                None => self.submitted_work_done().await,
            }
            self.check(op)?;
        }
    }

    /// wasm: resolves once every submission made so far has finished.
    #[cfg(target_arch = "wasm32")]
    async fn submitted_work_done(&self) {
        let (tx, rx) = futures::channel::oneshot::channel();
        self.inner.queue.on_submitted_work_done(move || {
            let _ = tx.send(());
        });
        let _ = rx.await;
    }

    /// Submits pending work and waits until the GPU has finished all of it (native).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn sync(&self) -> Result<()> {
        let op = "sync";
        self.check(op)?;
        let mut st = self.lock_state();
        self.flush_locked(&mut st, op)?;
        st.submitter
            .wait_until_at_most(&self.inner.device, 0)
            .map_err(|e| poll_error(op, e))?;
        drop(st);
        self.check(op)
    }

    /// Submits pending work and resolves once the GPU has finished it. On wasm this is one of
    /// the async points where batches parked by the in-flight cap are submitted (at most
    /// `max_in_flight` at a time); after it resolves, nothing is outstanding. Long loops on
    /// wasm should await it now and then: parked batches keep their buffers.
    pub async fn sync_async(&self) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        {
            self.sync()
        }
        #[cfg(target_arch = "wasm32")]
        {
            let op = "sync";
            self.check(op)?;
            self.flush(op)?;
            self.submit_parked(op).await?;
            self.submitted_work_done().await;
            self.lock_state().submitter.prune(&self.inner.device);
            self.check(op)
        }
    }
}

pub(crate) const PARAMS_USAGE: wgpu::BufferUsages =
    wgpu::BufferUsages::UNIFORM.union(wgpu::BufferUsages::COPY_DST);
pub(crate) const READBACK_USAGE: wgpu::BufferUsages =
    wgpu::BufferUsages::MAP_READ.union(wgpu::BufferUsages::COPY_DST);
pub(crate) const STORAGE_USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

pub(crate) fn map_wgpu_error(op: &'static str, e: wgpu::Error) -> Error {
    match e {
        wgpu::Error::OutOfMemory { source } => Error::OutOfMemory {
            op,
            msg: source.to_string(),
        },
        wgpu::Error::Validation { description, .. } => Error::Validation {
            op,
            msg: description,
        },
        other => Error::Validation {
            op,
            msg: other.to_string(),
        },
    }
}

pub(super) fn poll_error(op: &'static str, e: wgpu::PollError) -> Error {
    match e {
        wgpu::PollError::Timeout => Error::Readback {
            op,
            msg: "timed out waiting for the GPU".into(),
        },
        other => Error::DeviceLost {
            op,
            msg: other.to_string(),
        },
    }
}

// Native only: they open devices with the blocking `Device::new`.
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use crate::runtime::{Access, Kernel};

    static BROKEN: Kernel = Kernel {
        name: "broken",
        source: "@group(0) @binding(1) var<storage, read_write> y: array<T>;\n\
                 @compute @workgroup_size(64) fn main() { y[0] = undefined_symbol; }",
        entry: "main",
        bindings: &[Access::ReadWrite],
        slots: &[],
        libs: &[],
        defs: &[],
    };

    #[test]
    fn invalid_shader_is_a_validation_error_not_a_panic() {
        let dev = Device::new().unwrap();
        let e = dev
            .pipeline("broken_op", &BROKEN, &[DType::F32], &[])
            .err()
            .expect("compiling an invalid shader must fail");
        assert!(
            matches!(
                e,
                Error::Validation {
                    op: "broken_op",
                    ..
                }
            ),
            "{e:?}"
        );
        // The device stays usable afterwards.
        let t = crate::Tensor::from_slice(&dev, &[1.0f32, 2.0], &[2]).unwrap();
        assert_eq!(
            t.add_scalar(1.0).unwrap().to_vec::<f32>().unwrap(),
            vec![2.0, 3.0]
        );
    }

    #[test]
    fn wgpu_out_of_memory_maps_to_our_variant() {
        let e = map_wgpu_error(
            "zeros",
            wgpu::Error::OutOfMemory {
                source: Box::new(std::io::Error::other("vkAllocateMemory failed")),
            },
        );
        assert!(matches!(e, Error::OutOfMemory { op: "zeros", .. }), "{e:?}");
        assert!(e.to_string().contains("vkAllocateMemory"));
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod override_tests {
    use super::*;
    use crate::runtime::{Access, Kernel};

    // Each invocation of one workgroup bumps a counter: the count is the real workgroup size.
    static COUNT: Kernel = Kernel {
        name: "count_invocations",
        source: "override WG: u32 = 64u;\n\
                 override SGS: u32 = 4u;\n\
                 @group(0) @binding(1) var<storage, read_write> out: array<atomic<u32>>;\n\
                 @compute @workgroup_size(WG) fn plain() { atomicAdd(&out[0], 1u); }\n\
                 @compute @workgroup_size(SGS * 8u) fn expr() { atomicAdd(&out[0], 1u); }",
        entry: "plain",
        bindings: &[Access::ReadWrite],
        slots: &[],
        libs: &[],
        defs: &[],
    };
    static COUNT_EXPR: Kernel = Kernel {
        entry: "expr",
        ..COUNT
    };

    fn invocations(dev: &Device, k: &Kernel, consts: &[(&'static str, f64)]) -> u32 {
        let t = crate::Tensor::zeros(dev, &[4], DType::F32).unwrap();
        dev.launch(
            "count",
            k,
            &[DType::F32],
            consts,
            &[0u8; 16],
            &[t.buffer()],
            [1, 1, 1],
        )
        .unwrap();
        let raw = dev.read_bytes("count", t.buffer(), 0, 4).unwrap();
        u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]])
    }

    /// Kernels size their grids from the override values, so the pipeline must really run
    /// workgroups of that size (not the default).
    #[test]
    fn override_workgroup_sizes_take_effect() {
        let dev = Device::new().unwrap();
        assert_eq!(invocations(&dev, &COUNT, &[("WG", 8.0)]), 8);
        assert_eq!(invocations(&dev, &COUNT, &[("WG", 128.0)]), 128);
        assert_eq!(invocations(&dev, &COUNT_EXPR, &[("SGS", 1.0)]), 8);
        assert_eq!(invocations(&dev, &COUNT_EXPR, &[("SGS", 8.0)]), 64);
    }
}
