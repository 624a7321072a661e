//! The fused update kernel (shaders/optim.wgsl): one dispatch per parameter, in place.

use bytemuck::{Pod, Zeroable};

use crate::runtime::pipeline::ShaderVariant;
use crate::runtime::{Access, Kernel, Storage};
use crate::{DType, Error, Result, Tensor};

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

static OPTIM: Kernel = Kernel {
    name: "optim",
    source: include_str!("../../shaders/optim.wgsl"),
    entry: "main",
    bindings: &[
        Access::ReadWrite,
        Access::Read,
        Access::ReadWrite,
        Access::ReadWrite,
        Access::ReadWrite,
    ],
    slots: &[],
    libs: &[],
    defs: OPTIM_DEFS,
    ints: false,
};

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
    pub(crate) _pad0: u32,
    pub(crate) _pad1: u32,
    pub(crate) _pad2: u32,
}

/// Checks that `t` can be updated in place as parameter `i`: contiguous from its start.
pub(crate) fn check_param(op: &'static str, i: usize, t: &Tensor) -> Result<()> {
    if !t.is_contiguous() {
        return Err(Error::arg(
            op,
            format!(
                "parameter {i} (shape {:?}, strides {:?}) must be contiguous to be updated in place",
                t.shape(),
                t.strides()
            ),
        ));
    }
    if t.dtype == DType::F16 {
        t.device().require_dtype(op, DType::F16)?;
    }
    Ok(())
}

/// Records one update of `param` (in place) from `grad` with state buffers `states` (absent ones
/// get placeholders the kernel never touches).
pub(crate) fn launch(
    op: &'static str,
    kind: u32,
    param: &Tensor,
    grad: &Tensor,
    states: [Option<&Tensor>; 3],
    mut p: OptimParams,
) -> Result<()> {
    let dev = param.device();
    param.same_device(op, grad)?;
    param.same_dtype(op, grad)?;
    if grad.shape() != param.shape() {
        return Err(Error::shape(
            op,
            format!(
                "the gradient has shape {:?}, its parameter {:?}",
                grad.shape(),
                param.shape()
            ),
        ));
    }
    let n = param.numel();
    if n == 0 {
        return Ok(());
    }
    // Element i of every binding is element i of the tensor: bind from each one's offset by
    // packing views (the parameter is contiguous; a view at an offset is refused by the kernel
    // indexing, so copy it).
    if param.layout.offset() != 0 {
        return Err(Error::arg(
            op,
            "a parameter that is a view into a larger buffer cannot be updated in place",
        ));
    }
    let g = grad.contiguous()?;
    p.numel = n as u32;
    let placeholders: Vec<Storage> = states
        .iter()
        .filter(|s| s.is_none())
        .map(|_| Storage::scratch(dev, op, 16))
        .collect::<Result<_>>()?;
    let mut spare = placeholders.iter();
    let mut bufs = vec![param.buffer(), g.buffer()];
    for s in states {
        match s {
            Some(t) => bufs.push(t.buffer()),
            None => match spare.next() {
                Some(ph) => bufs.push(ph.buffer()),
                None => return Err(Error::arg(op, "internal: a state placeholder is missing")),
            },
        }
    }
    dev.launch(
        op,
        &OPTIM,
        &[param.dtype],
        &[("KIND", kind as f64), ("WG", WG as f64)],
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

#[doc(hidden)]
pub fn optim_variants() -> Vec<ShaderVariant> {
    let mut v = Vec::new();
    for dt in [DType::F32, DType::F16] {
        for kind in [OPT_SGD, OPT_ADAM] {
            v.push(ShaderVariant::new(
                &OPTIM,
                &[dt],
                &[("KIND", kind as f64), ("WG", WG as f64)],
            ));
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
            _pad0,
            _pad1,
            _pad2
        }
    )
}
