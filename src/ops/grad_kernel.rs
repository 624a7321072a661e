//! Kernels only the backward passes need (shaders/grad.wgsl): activation derivatives from a
//! saved input or output, tie weights of maximum/minimum, clamp masks, the zero-padded
//! gradient of a narrow (max/min over a dim route theirs in ops/argext.rs). Untracked: they run
//! inside backward, where nothing records.

use bytemuck::{Pod, Zeroable};

use crate::layout::{broadcast_shapes, pack_dims, Layout, MAX_RANK};
use crate::ops::activation::{Activation, ACTIVATION};
use crate::ops::wg::WG;
use crate::runtime::pipeline::ShaderLib;
use crate::runtime::window::{for_windows, Operand};
use crate::runtime::{Access, Kernel};
use crate::{DType, Error, Result, Tensor};

const SRC: &str = include_str!("../../shaders/grad.wgsl");
const LIBS: &[&ShaderLib] = &[&ACTIVATION];

use Access::{Read as R, ReadWrite as RW};

static GRAD_BINARY: Kernel = Kernel::new("grad", SRC, "grad_binary", &[R, R, RW])
    .slots(&[1, 2, 4])
    .libs(LIBS)
    .defs(GRAD_DEFS);
static NARROW_GRAD: Kernel = Kernel::new("grad", SRC, "narrow_grad", &[R, RW])
    .slots(&[1, 4])
    .libs(LIBS)
    .defs(GRAD_DEFS);
/// The `OP` codes of `grad_binary` (shaders/grad.wgsl `combine`): `f(a, b)` per element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GradCode {
    /// `a * relu'` with `b` the relu output.
    ReluFromY = 0,
    /// `a * y (1 - y)`, `b = sigmoid(x)`.
    SigmoidFromY = 1,
    /// `a * (1 - y^2)`, `b = tanh(x)`.
    TanhFromY = 2,
    /// `a * gelu'(x)`, `b = x`.
    GeluFromX = 3,
    /// `a * sign(x)`, `b = x`.
    AbsFromX = 4,
    /// `a / (2 y)`, `b = sqrt(x)`.
    SqrtFromY = 5,
    /// Weight of `a` in `maximum(a, b)`: 1, 0.5 on ties, 0 where `a < b`; 1 where either is NaN.
    MaxWeight = 6,
    /// Weight of `a` in `minimum(a, b)` (0 where `a > b`).
    MinWeight = 7,
    /// `a`, but 0 where `b == 0`.
    ZeroWhereZero = 8,
    /// `a * silu'(x)` = `a * s (1 + x (1 - s))` with `s = sigmoid(x)`, `b = x`.
    SiluFromX = 9,
    /// `a` unless `b <= scalar` (strictly above the bound, or NaN): hardtanh's lower bound.
    PassAboveOrNan = 10,
    /// `a` unless `b >= scalar`: hardtanh's upper bound.
    PassBelowOrNan = 11,
    /// `a` where `b > scalar` (NaN fails): hardsigmoid's and clamp's lower bound.
    PassAbove = 12,
    /// `a` where `b < scalar`: hardsigmoid's and clamp's upper bound.
    PassBelow = 13,
    /// `a * hardswish'(x)`, `b = x`: 0 up to -3, `x / 3 + 1/2` below 3, 1 from 3 on.
    HardswishFromX = 14,
    /// `a * sigmoid(x)` (softplus'), `b = x`.
    SoftplusFromX = 15,
    /// `a` where `b > 0`, else `a * scalar` (NaN b included): leaky_relu_backward.
    LeakyFromX = 16,
    /// `a * gelu_tanh'(x)`, `b = x`.
    GeluTanhFromX = 17,
}

/// The shader's names of the [`GradCode`]s, one row per code in order.
pub(crate) const GRAD_DEFS: &[(&str, u32)] = &[
    ("GRAD_RELU_FROM_Y", GradCode::ReluFromY as u32),
    ("GRAD_SIGMOID_FROM_Y", GradCode::SigmoidFromY as u32),
    ("GRAD_TANH_FROM_Y", GradCode::TanhFromY as u32),
    ("GRAD_GELU_FROM_X", GradCode::GeluFromX as u32),
    ("GRAD_ABS_FROM_X", GradCode::AbsFromX as u32),
    ("GRAD_SQRT_FROM_Y", GradCode::SqrtFromY as u32),
    ("GRAD_MAX_WEIGHT", GradCode::MaxWeight as u32),
    ("GRAD_MIN_WEIGHT", GradCode::MinWeight as u32),
    ("GRAD_ZERO_WHERE_ZERO", GradCode::ZeroWhereZero as u32),
    ("GRAD_SILU_FROM_X", GradCode::SiluFromX as u32),
    ("GRAD_PASS_ABOVE_OR_NAN", GradCode::PassAboveOrNan as u32),
    ("GRAD_PASS_BELOW_OR_NAN", GradCode::PassBelowOrNan as u32),
    ("GRAD_PASS_ABOVE", GradCode::PassAbove as u32),
    ("GRAD_PASS_BELOW", GradCode::PassBelow as u32),
    ("GRAD_HARDSWISH_FROM_X", GradCode::HardswishFromX as u32),
    ("GRAD_SOFTPLUS_FROM_X", GradCode::SoftplusFromX as u32),
    ("GRAD_LEAKY_FROM_X", GradCode::LeakyFromX as u32),
    ("GRAD_GELU_TANH_FROM_X", GradCode::GeluTanhFromX as u32),
];

/// `g * act'`, the gradient before a fused activation, for every epilogue's backward (GEMM,
/// conv, batch norm): `saved` is the activation's output for relu, sigmoid and tanh and its
/// input for GELU (see [`Activation::grad_from_output`]); the identity returns `g`.
pub(crate) fn activation_grad(
    op: &'static str,
    g: &Tensor,
    saved: Option<&Tensor>,
    act: Activation,
) -> Result<Tensor> {
    let code = match act {
        Activation::None => return Ok(g.clone()),
        Activation::Relu => GradCode::ReluFromY,
        Activation::Sigmoid => GradCode::SigmoidFromY,
        Activation::Tanh => GradCode::TanhFromY,
        Activation::Gelu => GradCode::GeluFromX,
    };
    let saved = saved.ok_or_else(|| Error::arg(op, "backward is missing a saved tensor"))?;
    grad_binary(g, saved, code, 0.0)
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable, Default)]
struct GradParams {
    numel: u32,
    rank: u32,
    dim: u32,
    start: u32,
    off_a: u32,
    off_b: u32,
    off_c: u32,
    scalar: f32,
    len: u32,
    base: u32,
    pad1: u32,
    pad2: u32,
    shape: [u32; MAX_RANK],
    sa: [u32; MAX_RANK],
    sb: [u32; MAX_RANK],
    sc: [u32; MAX_RANK],
}

fn launch(
    op: &'static str,
    kernel: &Kernel,
    code: u32,
    p: &GradParams,
    inputs: &[&Tensor],
    out: &Tensor,
) -> Result<()> {
    let dev = out.device();
    let mut bufs: Vec<&wgpu::Buffer> = inputs.iter().map(|t| t.buffer()).collect();
    bufs.push(out.buffer());
    let mut consts = vec![("WG", WG as f64)];
    if std::ptr::eq(kernel, &GRAD_BINARY) {
        consts.push(("OP", code as f64));
    }
    dev.launch(
        op,
        kernel,
        &[out.dtype],
        &consts,
        bytemuck::bytes_of(p),
        &bufs,
        dev.grid_1d(op, (p.numel as u64).div_ceil(WG as u64))?,
    )
}

/// `f(a, b)` elementwise with numpy broadcasting; `scalar` is read by the clamp masks only.
pub(crate) fn grad_binary(a: &Tensor, b: &Tensor, code: GradCode, scalar: f32) -> Result<Tensor> {
    let op = "backward";
    a.same_device(op, b)?;
    a.same_dtype(op, b)?;
    let shape = broadcast_shapes(op, a.shape(), b.shape())?;
    let la = a.layout.broadcast_to(&shape)?;
    let lb = b.layout.broadcast_to(&shape)?;
    let out = Tensor::empty(a.device(), op, &shape, a.dtype)?;
    if out.numel() == 0 {
        return Ok(out);
    }
    let mut p = GradParams {
        numel: out.numel() as u32,
        rank: shape.len() as u32,
        off_a: la.offset() as u32,
        off_b: lb.offset() as u32,
        scalar,
        shape: pack_dims(&shape),
        sa: pack_dims(la.strides()),
        sb: pack_dims(lb.strides()),
        ..Default::default()
    };
    // Windows when a buffer is past one binding (src/runtime/window.rs): an operand packed
    // like the output binds its window, decoded from base + i with its offset moved back by
    // base (mod 2^32); a broadcast one binds its whole span.
    fn operand<'t>(t: &'t Tensor, l: &Layout) -> Operand<'t> {
        Operand {
            buffer: t.buffer(),
            es: t.dtype.size() as u64,
            offset: l.offset() as u64,
            follows_output: l.is_contiguous(),
            end: l.span() as u64,
        }
    }
    let ops = [operand(a, &la), operand(b, &lb), operand(&out, &out.layout)];
    let (ca, cb) = (la.is_contiguous(), lb.is_contiguous());
    let dev = out.device();
    let consts = [("WG", WG as f64), ("OP", code as u32 as f64)];
    let n = out.numel() as u64;
    for_windows(dev, op, n, &ops, WG as u64, |s, len, sp| {
        let shift =
            |rel: u64, follows: bool| (rel as u32).wrapping_sub(if follows { s as u32 } else { 0 });
        p.numel = len as u32;
        p.base = s as u32;
        p.off_a = shift(sp[0].rel, ca);
        p.off_b = shift(sp[1].rel, cb);
        let binds = [
            sp[0].bind(a.buffer()),
            sp[1].bind(b.buffer()),
            sp[2].bind(out.buffer()),
        ];
        let grid = dev.grid_1d(op, len.div_ceil(WG as u64))?;
        dev.launch_binds(
            op,
            &GRAD_BINARY,
            &[out.dtype],
            &consts,
            bytemuck::bytes_of(&p),
            &binds,
            grid,
        )
    })?;
    Ok(out)
}

/// The gradient of `x.narrow(dim, start, g.shape()[dim])`: `g` placed in zeros of `x_shape`.
pub(crate) fn narrow_grad(
    g: &Tensor,
    x_shape: &[usize],
    dim: usize,
    start: usize,
) -> Result<Tensor> {
    let op = "narrow backward";
    let len = g.shape().get(dim).copied().unwrap_or(0);
    let fits = g.rank() == x_shape.len()
        && dim < x_shape.len()
        && start + len <= x_shape[dim]
        && (0..x_shape.len()).all(|d| d == dim || g.shape()[d] == x_shape[d]);
    if !fits {
        return Err(Error::shape(
            op,
            format!(
                "gradient {:?} does not fit {x_shape:?} at dim {dim} from {start}",
                g.shape()
            ),
        ));
    }
    let out = Tensor::empty(g.device(), op, x_shape, g.dtype)?;
    if out.numel() == 0 {
        return Ok(out);
    }
    let p = GradParams {
        numel: out.numel() as u32,
        rank: x_shape.len() as u32,
        dim: dim as u32,
        start: start as u32,
        len: len as u32,
        off_a: g.layout.offset() as u32,
        shape: pack_dims(x_shape),
        sa: pack_dims(g.strides()),
        ..Default::default()
    };
    launch(op, &NARROW_GRAD, 0, &p, &[g], &out)?;
    Ok(out)
}

/// The grad family's entry in the kernel-family registry (`ops::families()`).
pub(crate) const FAMILY: crate::runtime::pipeline::Family = crate::runtime::pipeline::Family {
    name: "grad",
    shaders: &["grad.wgsl"],
    params: || vec![params_layout()],
    variants: grad_variants,
};

/// Every (kernel, dtypes, override constants) combination of this family's kernels, for
/// tests/shaders.rs to translate and validate each.
#[doc(hidden)]
pub fn grad_variants() -> Vec<crate::runtime::pipeline::ShaderVariant> {
    use crate::runtime::pipeline::ShaderVariant;
    let mut v = Vec::new();
    for dt in [DType::F32, DType::F16] {
        for &(_, code) in GRAD_DEFS {
            v.push(ShaderVariant::new(
                &GRAD_BINARY,
                &[dt],
                &[("WG", WG as f64), ("OP", code as f64)],
            ));
        }
        v.push(ShaderVariant::new(
            &NARROW_GRAD,
            &[dt],
            &[("WG", WG as f64)],
        ));
    }
    v
}

/// The params struct's layout, checked against the shader's `struct Params` in tests/shaders.rs.
#[doc(hidden)]
pub fn params_layout() -> crate::runtime::pipeline::ParamsLayout {
    crate::runtime::pipeline::params_layout!(
        GRAD_BINARY,
        &[DType::F32],
        GradParams {
            numel,
            rank,
            dim,
            start,
            off_a,
            off_b,
            off_c,
            scalar,
            len,
            base,
            pad1,
            pad2,
            shape,
            sa,
            sb,
            sc
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The code table has one row per code, in order (the shader switches on these names).
    #[test]
    fn grad_codes_are_the_rows() {
        for (i, (name, code)) in GRAD_DEFS.iter().enumerate() {
            assert_eq!(*code as usize, i, "{name}");
        }
        assert_eq!(GRAD_DEFS.len(), GradCode::GeluTanhFromX as usize + 1);
    }
}
