//! The fused update kernel (shaders/optim.wgsl): one dispatch per parameter, in place.

use bytemuck::{Pod, Zeroable};

use crate::runtime::pipeline::ShaderVariant;
use crate::runtime::{Access, Kernel};
use crate::{DType, Device, Error, Result, Tensor};

const WG: u32 = 256;

pub(crate) const OPT_SGD: u32 = 0;
pub(crate) const OPT_ADAM: u32 = 1;
pub(crate) const FLAG_MAXIMIZE: u32 = 1;
pub(crate) const FLAG_MOMENTUM: u32 = 2;
pub(crate) const FLAG_FIRST: u32 = 4;
pub(crate) const FLAG_NESTEROV: u32 = 8;
pub(crate) const FLAG_DECOUPLED: u32 = 16;
pub(crate) const FLAG_AMSGRAD: u32 = 32;
/// The kinds and flags, emitted to the shader as WGSL constants.
const OPTIM_DEFS: &[(&str, u32)] = &[
    ("OPT_SGD", OPT_SGD),
    ("OPT_ADAM", OPT_ADAM),
    ("FLAG_MAXIMIZE", FLAG_MAXIMIZE),
    ("FLAG_MOMENTUM", FLAG_MOMENTUM),
    ("FLAG_FIRST", FLAG_FIRST),
    ("FLAG_NESTEROV", FLAG_NESTEROV),
    ("FLAG_DECOUPLED", FLAG_DECOUPLED),
    ("FLAG_AMSGRAD", FLAG_AMSGRAD),
];

static OPTIM: Kernel = Kernel::new(
    "optim",
    include_str!("../../shaders/optim.wgsl"),
    "main",
    &[
        Access::ReadWrite,
        Access::Read,
        Access::ReadWrite,
        Access::ReadWrite,
        Access::ReadWrite,
    ],
)
.defs(OPTIM_DEFS)
// max_nan: AMSGrad's running maximum keeps a NaN, as torch.maximum does.
.libs(&[&crate::ops::activation::ACTIVATION]);

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable, Default)]
pub(crate) struct OptimParams {
    pub(crate) numel: u32,
    pub(crate) flags: u32,
    pub(crate) lr: f32,
    pub(crate) weight_decay: f32,
    pub(crate) c0: f32,
    pub(crate) c1: f32,
    pub(crate) eps: f32,
    pub(crate) step_size: f32,
    pub(crate) bc2_sqrt: f32,
    /// `1 - c0`, `1 - c1` and AdamW's `1 - lr * weight_decay`, rounded once from f64.
    pub(crate) one_minus_c0: f32,
    pub(crate) one_minus_c1: f32,
    pub(crate) decay: f32,
}

fn constants(kind: u32) -> [(&'static str, f64); 2] {
    [("KIND", kind as f64), ("WG", WG as f64)]
}

/// Compiles (or finds) the update pipeline of `kind` for `dtype` ahead of a step's launches,
/// so that no launch fails on a compile after earlier parameters were updated.
pub(crate) fn warm(op: &'static str, dev: &Device, kind: u32, dtype: DType) -> Result<()> {
    dev.pipeline(op, &OPTIM, &[dtype], &constants(kind))
        .map(drop)
}

/// Per device, three small buffers bound in place of the state a kernel does not use (it never
/// touches them); kept by the optimizer so that each step binds the same buffers.
#[derive(Debug, Default)]
pub(crate) struct Spares(Vec<[Tensor; 3]>);

impl Spares {
    /// Creates the placeholders of `dev` unless they exist.
    pub(crate) fn ensure(&mut self, op: &'static str, dev: &Device) -> Result<()> {
        if self.get(dev).is_none() {
            let ph = || Tensor::empty(dev, op, &[4], DType::F32);
            self.0.push([ph()?, ph()?, ph()?]);
        }
        Ok(())
    }

    fn get(&self, dev: &Device) -> Option<&[Tensor; 3]> {
        self.0.iter().find(|s| s[0].device().same(dev))
    }
}

/// Records one update of `param` (in place) from `grad` (packed from the start of its
/// storage, see [`packed`]) with state buffers `states` (absent ones bound to the device's
/// [`Spares`]). The caller has checked shapes, dtypes, devices and aliasing, created the
/// spares and warmed the pipeline: what is left to fail is the device itself.
pub(crate) fn launch(
    op: &'static str,
    kind: u32,
    param: &Tensor,
    grad: &Tensor,
    states: [Option<&Tensor>; 3],
    spares: &Spares,
    mut p: OptimParams,
) -> Result<()> {
    let dev = param.device();
    let n = param.numel();
    if n == 0 {
        // PyTorch's in-place update bumps the version at any size.
        param.bump_version();
        for t in states.iter().flatten() {
            t.bump_version();
        }
        return Ok(());
    }
    let Some(spare) = spares.get(dev) else {
        return Err(Error::arg(
            op,
            "internal: no state placeholders for the device",
        ));
    };
    p.numel = n as u32;
    let mut bufs = vec![param.buffer(), grad.buffer()];
    for (s, ph) in states.iter().zip(spare) {
        bufs.push(s.unwrap_or(ph).buffer());
    }
    dev.launch(
        op,
        &OPTIM,
        &[param.dtype],
        &constants(kind),
        bytemuck::bytes_of(&p),
        &bufs,
        dev.grid_1d(op, (n as u64).div_ceil(WG as u64))?,
    )?;
    // The parameter and its state were written in place: a graph that saved them is stale.
    param.bump_version();
    for t in states.iter().flatten() {
        t.bump_version();
    }
    Ok(())
}

/// `grad` as the kernel binds it: element i at index i of its buffer (a packed copy of a
/// strided or offset view), recording nothing in the graph.
pub(crate) fn packed(grad: &Tensor) -> Result<Tensor> {
    let g = grad.detach();
    if g.is_contiguous() && g.layout().offset() == 0 {
        return Ok(g);
    }
    let out = Tensor::empty(g.device(), "optim", g.shape(), g.dtype())?;
    out.copy_from(&g)?;
    Ok(out)
}

/// The grid of an update of `numel` elements; checked before a step's first launch.
pub(crate) fn check_grid(op: &'static str, param: &Tensor) -> Result<()> {
    param
        .device()
        .grid_1d(op, (param.numel() as u64).div_ceil(WG as u64))
        .map(drop)
}

/// A private copy of `t` (new storage) in `dtype`, for state loaded from the caller's tensors
/// (PyTorch's `load_state_dict` casts floating-point state to its parameter's dtype).
pub(crate) fn private_copy(op: &'static str, t: &Tensor, dtype: DType) -> Result<Tensor> {
    let out = Tensor::empty(t.device(), op, t.shape(), dtype)?;
    out.copy_from(&t.detach().to_dtype(dtype)?)?;
    Ok(out)
}

/// The optim family's entry in the kernel-family registry (`ops::families()`).
pub(crate) const FAMILY: crate::runtime::pipeline::Family = crate::runtime::pipeline::Family {
    name: "optim",
    shaders: &["optim.wgsl"],
    params: || vec![params_layout()],
    variants: optim_variants,
};

/// Every (kernel, dtypes, override constants) combination of this family's kernels, for
/// tests/shaders.rs to translate and validate each.
#[doc(hidden)]
pub fn optim_variants() -> Vec<ShaderVariant> {
    let mut v = Vec::new();
    for dt in [DType::F32, DType::F16] {
        for kind in [OPT_SGD, OPT_ADAM] {
            v.push(ShaderVariant::new(&OPTIM, &[dt], &constants(kind)));
        }
    }
    v
}

/// The params struct's layout, checked against the shader's `struct Params` in tests/shaders.rs.
#[doc(hidden)]
pub fn params_layout() -> crate::runtime::pipeline::ParamsLayout {
    crate::runtime::pipeline::params_layout!(
        OPTIM,
        &[DType::F32],
        OptimParams {
            numel,
            flags,
            lr,
            weight_decay,
            c0,
            c1,
            eps,
            step_size,
            bc2_sqrt,
            one_minus_c0,
            one_minus_c1,
            decay
        }
    )
}
