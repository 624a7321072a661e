//! Kernel descriptions and the pipeline cache. A pipeline is keyed by (kernel, entry, dtypes,
//! override constants) and never by a tensor shape, so changing shapes compiles nothing new.
//!
//! Overrides the dispatch grid depends on (workgroup sizes `WG`, subgroups per workgroup `SGS`,
//! row blocks `RT` / `DR`, `VEC`) have no default in the shaders: a launch that forgets one
//! fails pipeline creation instead of silently running the default tile against a grid
//! planned for another (GEMM once launched SGS = 4 workgroups on a grid planned for 2).

use std::collections::HashMap;
use std::sync::Arc;

use crate::DType;

/// How a kernel uses one storage binding. Binding 0 is always the per-dispatch Params uniform;
/// storage bindings follow from 1 in the order listed, unless the kernel names its slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    ReadWrite,
}

/// Static description of one kernel entry point: everything the generic launch path needs.
#[derive(Debug)]
pub(crate) struct Kernel {
    pub name: &'static str,
    pub source: &'static str,
    pub entry: &'static str,
    pub bindings: &'static [Access],
    /// Binding numbers of `bindings` when they are not simply 1, 2, 3, ... (several entry
    /// points of one module using different subsets of its globals).
    pub slots: &'static [u32],
    /// Shared WGSL pieces (shaders/lib) placed between the dtype prelude and the source.
    pub libs: &'static [&'static ShaderLib],
    /// Named `u32` codes the shader switches on (op codes): emitted as WGSL `const`
    /// declarations, so each value is written once, on the Rust side.
    pub defs: &'static [(&'static str, u32)],
    /// WGSL extensions the source needs beyond the dtype's (`enable` directives must precede
    /// every declaration, so they are emitted first).
    pub enables: &'static [&'static str],
    /// Whether the kernel handles `i32` storage (`T = i32`) correctly: copies, casts,
    /// comparisons and index ops. Float kernels leave it false and the launch path refuses i32
    /// tensors for them with an error naming the op, rather than computing in a type they were
    /// not written for.
    pub ints: bool,
}

impl Kernel {
    /// A kernel of `source`'s entry point `entry` whose storage bindings are `bindings`, bound
    /// at 1, 2, 3, ..., with no libs or defs, refusing i32 tensors: the builder methods below
    /// change those defaults. `name` labels its pipelines and errors; entry points of one
    /// module usually share it.
    pub(crate) const fn new(
        name: &'static str,
        source: &'static str,
        entry: &'static str,
        bindings: &'static [Access],
    ) -> Self {
        Kernel {
            name,
            source,
            entry,
            bindings,
            slots: &[],
            libs: &[],
            defs: &[],
            enables: &[],
            ints: false,
        }
    }

    /// Emits `enable` directives for these extensions before everything else.
    pub(crate) const fn enables(mut self, enables: &'static [&'static str]) -> Self {
        self.enables = enables;
        self
    }

    /// Binds `bindings` at these binding numbers instead of 1, 2, 3, ...
    pub(crate) const fn slots(mut self, slots: &'static [u32]) -> Self {
        self.slots = slots;
        self
    }

    /// Places these shared WGSL pieces (and their defs) before the source.
    pub(crate) const fn libs(mut self, libs: &'static [&'static ShaderLib]) -> Self {
        self.libs = libs;
        self
    }

    /// Emits these named codes as WGSL `const` declarations.
    pub(crate) const fn defs(mut self, defs: &'static [(&'static str, u32)]) -> Self {
        self.defs = defs;
        self
    }

    /// Marks the kernel correct for `i32` storage (see [`Kernel::ints`](Self#structfield.ints)).
    pub(crate) const fn ints(mut self) -> Self {
        self.ints = true;
        self
    }

    pub(crate) fn slot(&self, i: usize) -> u32 {
        self.slots.get(i).copied().unwrap_or(i as u32 + 1)
    }

    /// The complete WGSL text for `dtypes`: the kernel's `enable` directives, the dtype
    /// prelude, the kernel's defs then its libs' defs as `const` declarations, the libs' text,
    /// the source.
    pub(crate) fn full_source(&self, dtypes: &[DType]) -> String {
        let mut s = String::new();
        for e in self.enables {
            s.push_str(&format!("enable {e};\n"));
        }
        s.push_str(&dtype_prelude(dtypes));
        let lib_defs = self.libs.iter().flat_map(|lib| lib.defs);
        for (name, value) in self.defs.iter().chain(lib_defs) {
            s.push_str(&format!("const {name}: u32 = {value}u;\n"));
        }
        for lib in self.libs {
            s.push_str(lib.text);
            s.push('\n');
        }
        s.push_str(self.source);
        s
    }
}

/// A shared piece of WGSL (a file of shaders/lib) that kernels list in [`Kernel::libs`], with
/// the named codes its functions switch on. The module that owns the lib defines it (the
/// activation lib and its `ACT_*` codes live in src/ops/activation.rs), so the runtime places
/// libs without knowing any of them.
#[derive(Debug)]
pub(crate) struct ShaderLib {
    /// The WGSL functions (and bindings) placed before the kernel's source.
    pub text: &'static str,
    /// Emitted as WGSL `const` declarations, after the kernel's own defs.
    pub defs: &'static [(&'static str, u32)],
}

impl ShaderLib {
    /// A lib of `text` with no defs.
    pub(crate) const fn new(text: &'static str) -> Self {
        ShaderLib { text, defs: &[] }
    }

    /// The lib with these named codes emitted before its text.
    pub(crate) const fn defs(mut self, defs: &'static [(&'static str, u32)]) -> Self {
        self.defs = defs;
        self
    }
}

/// Bytes reserved per dispatch in the batch's param arena. Params structs must fit.
pub(crate) const PARAM_SLOT: u64 = 256;

/// The only text step applied to shader sources: aliases `T` (and `U`) for the storage dtypes.
pub(crate) fn dtype_prelude(dtypes: &[DType]) -> String {
    let mut s = String::new();
    if dtypes.contains(&DType::F16) {
        s.push_str("enable f16;\n");
    }
    for (alias, dt) in ["T", "U", "V"].iter().zip(dtypes) {
        s.push_str(&format!("alias {alias} = {};\n", dt.wgsl()));
    }
    s
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct PipelineKey {
    source: usize,
    libs: Vec<usize>,
    kernel: &'static str,
    entry: &'static str,
    dtypes: Vec<DType>,
    constants: Vec<(&'static str, u64)>,
}

pub(crate) struct CachedPipeline {
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
}

#[derive(Default)]
pub(crate) struct PipelineCache {
    /// Keyed by the addresses of the source text and of its libs' texts ([`lib_ids`]): several
    /// kernels (entry points) share one module, and one source over other libs is another.
    modules: HashMap<(usize, Vec<usize>, Vec<DType>), wgpu::ShaderModule>,
    /// Buckets by a hash of the key computed without allocating (the lookup runs on every
    /// dispatch); each entry keeps its full key to compare.
    pipelines: HashMap<u64, Vec<(PipelineKey, Arc<CachedPipeline>)>>,
    pub(crate) compiled: u64,
    /// The persisted wgpu cache every pipeline is created with (native Vulkan, unless
    /// [`DeviceOptions::pipeline_cache`](crate::DeviceOptions::pipeline_cache) is off).
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) persisted: Option<Persisted>,
    /// The runtime checks every module is created with (`DeviceOptions::shader_checks`).
    pub(crate) checks: crate::runtime::options::ShaderChecks,
}

/// The persisted cache of an open device (written by runtime/pipeline_store.rs): the wgpu cache every pipeline is created with, the
/// file it is saved to, and what is already on disk.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) struct Persisted {
    pub(crate) cache: wgpu::PipelineCache,
    pub(crate) path: std::path::PathBuf,
    /// FNV-1a of the blob on disk (loaded or last saved): an unchanged cache is not rewritten.
    pub(crate) saved_hash: Option<u64>,
    /// `PipelineCache::compiled` when the file was loaded or last saved.
    pub(crate) saved_at: u64,
}

/// What identifies a kernel's libs: the addresses of their texts (each lib is one `static`),
/// not of the slice listing them, which the compiler may or may not share between kernels.
fn lib_ids(kernel: &Kernel) -> impl Iterator<Item = usize> + '_ {
    kernel.libs.iter().map(|l| l.text.as_ptr() as usize)
}

/// The hash of (kernel, dtypes, constants) as [`PipelineKey`] would hash, without building it.
fn key_hash(kernel: &Kernel, dtypes: &[DType], constants: &[(&'static str, f64)]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (kernel.source.as_ptr() as usize).hash(&mut h);
    for id in lib_ids(kernel) {
        id.hash(&mut h);
    }
    kernel.name.hash(&mut h);
    kernel.entry.hash(&mut h);
    dtypes.hash(&mut h);
    for (n, v) in constants {
        n.hash(&mut h);
        v.to_bits().hash(&mut h);
    }
    h.finish()
}

impl PipelineKey {
    fn matches(
        &self,
        kernel: &Kernel,
        dtypes: &[DType],
        constants: &[(&'static str, f64)],
    ) -> bool {
        self.source == kernel.source.as_ptr() as usize
            && self.libs.iter().copied().eq(lib_ids(kernel))
            && self.kernel == kernel.name
            && self.entry == kernel.entry
            && self.dtypes == dtypes
            && self.constants.len() == constants.len()
            && self
                .constants
                .iter()
                .zip(constants)
                .all(|(a, b)| a.0 == b.0 && a.1 == b.1.to_bits())
    }
}

fn bind_group_layout(device: &wgpu::Device, kernel: &Kernel) -> wgpu::BindGroupLayout {
    let mut entries = vec![wgpu::BindGroupLayoutEntry {
        binding: 0,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Uniform,
            has_dynamic_offset: true,
            min_binding_size: None,
        },
        count: None,
    }];
    for (i, access) in kernel.bindings.iter().enumerate() {
        entries.push(wgpu::BindGroupLayoutEntry {
            binding: kernel.slot(i),
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage {
                    read_only: *access == Access::Read,
                },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        });
    }
    device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some(kernel.name),
        entries: &entries,
    })
}

impl PipelineCache {
    pub(crate) fn get(
        &self,
        kernel: &Kernel,
        dtypes: &[DType],
        constants: &[(&'static str, f64)],
    ) -> Option<Arc<CachedPipeline>> {
        self.pipelines
            .get(&key_hash(kernel, dtypes, constants))?
            .iter()
            .find(|(k, _)| k.matches(kernel, dtypes, constants))
            .map(|(_, p)| p.clone())
    }

    fn key(kernel: &Kernel, dtypes: &[DType], constants: &[(&'static str, f64)]) -> PipelineKey {
        PipelineKey {
            source: kernel.source.as_ptr() as usize,
            libs: lib_ids(kernel).collect(),
            kernel: kernel.name,
            entry: kernel.entry,
            dtypes: dtypes.to_vec(),
            constants: constants.iter().map(|&(n, v)| (n, v.to_bits())).collect(),
        }
    }

    /// Drops what [`PipelineCache::compile`] kept of (kernel, dtypes, constants) after it
    /// failed: the pipeline and its shader module.
    pub(crate) fn forget(
        &mut self,
        kernel: &Kernel,
        dtypes: &[DType],
        constants: &[(&'static str, f64)],
    ) {
        if let Some(v) = self.pipelines.get_mut(&key_hash(kernel, dtypes, constants)) {
            v.retain(|(k, _)| !k.matches(kernel, dtypes, constants));
        }
        self.modules.remove(&(
            kernel.source.as_ptr() as usize,
            lib_ids(kernel).collect(),
            dtypes.to_vec(),
        ));
    }

    /// Compiles (kernel, dtypes, constants). Errors surface through the caller's error scope.
    pub(crate) fn compile(
        &mut self,
        device: &wgpu::Device,
        kernel: &Kernel,
        dtypes: &[DType],
        constants: &[(&'static str, f64)],
    ) -> Arc<CachedPipeline> {
        let module = self
            .modules
            .entry((
                kernel.source.as_ptr() as usize,
                lib_ids(kernel).collect(),
                dtypes.to_vec(),
            ))
            .or_insert_with(|| {
                let source = kernel.full_source(dtypes);
                let desc = wgpu::ShaderModuleDescriptor {
                    label: Some(kernel.name),
                    source: wgpu::ShaderSource::Wgsl(source.into()),
                };
                // SAFETY: the modules are the crate's own shaders, never user text, and uphold
                // what each relaxed check guards: every loop terminates (counters rise to
                // bounds from uniforms, constants or bucket starts a previous pass wrote;
                // strided loops stop before `k + step` could wrap), so no loop counter is
                // needed; workgroup and function arrays are indexed by lane ids and loop
                // counters within their lengths, Params arrays by host-checked dims, and
                // buffer indices are tested against the tensor's extent, so no clamps are
                // needed. The gpu_plans conformance device runs them with DivisionOnly;
                // ShaderChecks' docs say what each setting gives up.
                unsafe { device.create_shader_module_trusted(desc, self.checks.runtime_checks()) }
            })
            .clone();
        let layout = bind_group_layout(device, kernel);
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(kernel.name),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(kernel.entry),
            layout: Some(&pipeline_layout),
            module: &module,
            entry_point: Some(kernel.entry),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants,
                // Kernels initialize their own workgroup memory; skipping the zero-fill saves a
                // barrier-guarded pass per workgroup on CPU adapters.
                zero_initialize_workgroup_memory: false,
            },
            #[cfg(not(target_arch = "wasm32"))]
            cache: self.persisted.as_ref().map(|p| &p.cache),
            #[cfg(target_arch = "wasm32")]
            cache: None,
        });
        let cached = Arc::new(CachedPipeline { pipeline, layout });
        self.pipelines
            .entry(key_hash(kernel, dtypes, constants))
            .or_default()
            .push((Self::key(kernel, dtypes, constants), cached.clone()));
        self.compiled += 1;
        cached
    }
}

/// A fully specified shader as the runtime would compile it, for the portability tests
/// (naga translation to SPIR-V, MSL and HLSL of every variant the crate uses).
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct ShaderVariant {
    /// The kernel's name (its pipelines' label).
    pub kernel: &'static str,
    /// The entry point.
    pub entry: &'static str,
    /// Source with the dtype prelude applied.
    pub source: String,
    /// The dtypes bound to `T`, `U`, ... in the prelude.
    pub dtypes: Vec<DType>,
    /// The override constants the pipeline is created with.
    pub constants: Vec<(&'static str, f64)>,
    /// The pipeline layout's bindings: (binding, read-only) for the Params uniform (0, true)
    /// and every storage binding, so a test can check that the entry point reaches no other.
    pub layout: Vec<(u32, bool)>,
}

impl ShaderVariant {
    pub(crate) fn new(
        kernel: &Kernel,
        dtypes: &[DType],
        constants: &[(&'static str, f64)],
    ) -> Self {
        let storage = kernel.bindings.iter().enumerate();
        ShaderVariant {
            layout: std::iter::once((0, true))
                .chain(storage.map(|(i, a)| (kernel.slot(i), *a == Access::Read)))
                .collect(),
            kernel: kernel.name,
            entry: kernel.entry,
            source: kernel.full_source(dtypes),
            dtypes: dtypes.to_vec(),
            constants: constants.to_vec(),
        }
    }
}

/// One kernel family as the registry (`ops::families()`) lists it: the shader files it owns,
/// its params structs' layouts and every variant its planners can launch. Each family's module
/// defines one `FAMILY` next to its kernels; `ops::params_layouts()` and
/// `ops::shader_variants()` are folds over the registry, and tests/shaders.rs checks that
/// every file of `shaders/` (not `shaders/lib/`) is named by exactly one family.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct Family {
    /// The family's name (unique in the registry).
    pub name: &'static str,
    /// File names, relative to `shaders/`, of the kernel sources the family owns.
    pub shaders: &'static [&'static str],
    /// The layouts of the family's `#[repr(C)]` params structs (one per struct).
    pub params: fn() -> Vec<ParamsLayout>,
    /// Every (kernel, dtypes, constants) combination the family's planners can launch.
    pub variants: fn() -> Vec<ShaderVariant>,
}

/// The field layout of a `#[repr(C)]` params struct, for the test that compares it with the
/// shader's `struct Params` (read through naga): names, byte offsets and sizes must agree, so a
/// field added on one side only fails the build's tests.
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct ParamsLayout {
    /// The Rust struct's name.
    pub rust_struct: &'static str,
    /// The kernel's complete WGSL source (f32 prelude), which declares `struct Params`.
    pub source: String,
    /// `size_of` the Rust struct.
    pub size: usize,
    /// (name, byte offset, byte size) of every field, in declaration order.
    pub fields: Vec<(&'static str, usize, usize)>,
}

/// Byte size of the field a projection closure points at.
pub(crate) fn field_size<T, F>(_: fn(&T) -> &F) -> usize {
    std::mem::size_of::<F>()
}

/// `params_layout!(KERNEL, [dtypes], Struct { field, ... })`: the [`ParamsLayout`] of `Struct`,
/// whose every field must be listed (the test checks the fields tile the struct).
macro_rules! params_layout {
    ($kernel:expr, $dtypes:expr, $ty:ident { $($f:ident),* $(,)? }) => {
        $crate::runtime::pipeline::ParamsLayout {
            rust_struct: stringify!($ty),
            source: $kernel.full_source($dtypes),
            size: std::mem::size_of::<$ty>(),
            fields: vec![$((
                stringify!($f),
                std::mem::offset_of!($ty, $f),
                $crate::runtime::pipeline::field_size(|s: &$ty| &s.$f),
            )),*],
        }
    };
}
pub(crate) use params_layout;
