//! Binary elementwise ops with numpy broadcasting (shaders/binary.wgsl).

use crate::layout::{broadcast_shapes, pack_dims, Layout};
use crate::ops::activation::ACTIVATION;
pub(crate) use crate::ops::elementwise_params::Donated;
use crate::ops::elementwise_params::{BinaryParams, BINARY_DEFS};
use crate::ops::elementwise_vec4 as vec4;
use crate::ops::map::WG;
use crate::runtime::window::{for_windows, Operand};
use crate::runtime::{Access, Kernel};
use crate::{DType, Result, Tensor};

const SRC: &str = include_str!("../../shaders/binary.wgsl");

use Access::{Read as R, ReadWrite as RW};

static BINARY: Kernel = Kernel::new("binary", SRC, "main", &[R, R, RW])
    .libs(&[&ACTIVATION])
    .defs(BINARY_DEFS);

/// The donated operand's side overwrites it (src/ops/donate.rs): bindings b and io, or a
/// and io.
static BINARY_INPLACE_A: Kernel = Kernel::new("binary", SRC, "main_inplace_a", &[R, RW])
    .slots(&[2, 4])
    .libs(&[&ACTIVATION])
    .defs(BINARY_DEFS);
static BINARY_INPLACE_B: Kernel = Kernel::new("binary", SRC, "main_inplace_b", &[R, RW])
    .slots(&[1, 4])
    .libs(&[&ACTIVATION])
    .defs(BINARY_DEFS);

/// Elementwise functions of two tensors, computed in f32 by [`Tensor::binary`] (and its
/// shorthands such as [`Tensor::add`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    /// `a + b` (`torch.add`).
    Add,
    /// `a - b` (`torch.sub`).
    Sub,
    /// `a * b` (`torch.mul`).
    Mul,
    /// `a / b` (`torch.div`, true division).
    Div,
    /// The larger of `a` and `b` (`torch.maximum`).
    Max,
    /// The smaller of `a` and `b` (`torch.minimum`).
    Min,
    /// `a ^ b` (`torch.pow` with a tensor exponent).
    Pow,
}

impl BinaryOp {
    pub(crate) fn name(self) -> &'static str {
        ["add", "sub", "mul", "div", "maximum", "minimum", "pow"][self as usize]
    }

    /// Which operands PyTorch's node for `a op b` saves (derivatives.yaml), given which are
    /// tracked: mul keeps each for the other's gradient, div its divisor whenever it records
    /// and its dividend for the divisor's, maximum, minimum and pow both, add and sub none.
    pub(crate) fn saved_operands(self, a_tracked: bool, b_tracked: bool) -> (bool, bool) {
        match self {
            BinaryOp::Add | BinaryOp::Sub => (false, false),
            BinaryOp::Mul => (b_tracked, a_tracked),
            BinaryOp::Div => (b_tracked, a_tracked || b_tracked),
            BinaryOp::Max | BinaryOp::Min | BinaryOp::Pow => (true, true),
        }
    }
}

impl Tensor {
    /// The untracked forward of [`Tensor::binary`] (src/ops/binary_grad.rs records it).
    pub(crate) fn binary_forward(&self, other: &Tensor, op: BinaryOp) -> Result<Tensor> {
        let name = op.name();
        // TensorIterator computes the shape before the device check.
        broadcast_shapes(name, self.shape(), other.shape())?;
        self.same_device(name, other)?;
        self.same_dtype(name, other)?;
        // Before the empty early return, so an empty i32 operand is refused as a full one.
        self.require_float(name)?;
        let shape = broadcast_shapes(name, self.shape(), other.shape())?;
        let out = Tensor::empty(self.device(), name, &shape, self.dtype)?;
        if out.numel() == 0 {
            return Ok(out);
        }
        launch_binary(name, &BINARY, op, self, other, Some(&out), &shape, None)?;
        Ok(out)
    }

    /// `self op other` written into the donated operand's buffer (`side`), which is packed
    /// from offset 0 with the broadcast output's shape (checked by the caller).
    pub(crate) fn binary_in_place(
        &self,
        other: &Tensor,
        op: BinaryOp,
        side: Donated,
    ) -> Result<()> {
        let name = op.name();
        let shape = broadcast_shapes(name, self.shape(), other.shape())?;
        if shape.contains(&0) {
            return Ok(());
        }
        let kernel = match side {
            Donated::A => &BINARY_INPLACE_A,
            Donated::B => &BINARY_INPLACE_B,
        };
        launch_binary(name, kernel, op, self, other, None, &shape, Some(side))
    }

    /// `self + other` with broadcasting ([`BinaryOp::Add`]).
    pub fn add(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(other, BinaryOp::Add)
    }
    /// `self - other` with broadcasting ([`BinaryOp::Sub`]).
    pub fn sub(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(other, BinaryOp::Sub)
    }
    /// `self * other` elementwise with broadcasting ([`BinaryOp::Mul`]).
    pub fn mul(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(other, BinaryOp::Mul)
    }
    /// `self / other` elementwise with broadcasting ([`BinaryOp::Div`]).
    pub fn div(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(other, BinaryOp::Div)
    }
    /// The elementwise maximum with broadcasting ([`BinaryOp::Max`], `torch.maximum`).
    pub fn maximum(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(other, BinaryOp::Max)
    }
    /// The elementwise minimum with broadcasting ([`BinaryOp::Min`], `torch.minimum`).
    pub fn minimum(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(other, BinaryOp::Min)
    }
    /// `self ^ exponent` elementwise with broadcasting (PyTorch's `torch.pow(a, b)`).
    pub fn pow(&self, exponent: &Tensor) -> Result<Tensor> {
        self.binary(exponent, BinaryOp::Pow)
    }
}

/// Records `kernel` over the broadcast `shape`, in windows when a buffer is larger than one
/// binding: `out` for the allocating kernel, `None` for the in-place ones (which bind the
/// donated operand `side` once, read_write, and the other one read-only). On a GPU, operands
/// packed with the output's shape go through the vec4 kernel first (src/ops/elementwise_vec4.rs)
/// and this kernel does the elements after its body.
#[allow(clippy::too_many_arguments)]
fn launch_binary(
    name: &'static str,
    kernel: &'static Kernel,
    op: BinaryOp,
    x: &Tensor,
    y: &Tensor,
    out: Option<&Tensor>,
    shape: &[usize],
    side: Option<Donated>,
) -> Result<()> {
    let a = x.layout.broadcast_to(shape)?;
    let b = y.layout.broadcast_to(shape)?;
    let (ca, cb) = (a.is_contiguous(), b.is_contiguous());
    let contig = ca && cb;
    let total: usize = shape.iter().product();
    let mut params = BinaryParams {
        numel: total as u32,
        rank: shape.len() as u32,
        off_a: a.offset() as u32,
        off_b: b.offset() as u32,
        shape: pack_dims(shape),
        sa: pack_dims(a.strides()),
        sb: pack_dims(b.strides()),
        base: 0,
        _pad0: 0,
        _pad1: 0,
        _pad2: 0,
    };
    let skip = if contig {
        let offs = [a.offset() as u64, b.offset() as u64];
        let code = op as u32;
        vec4::binary_body(name, code, x, y, total as u64, offs, out, side, &mut params)?
    } else {
        match out {
            Some(o) if vec4::binary_bcast(name, op as u32, x, y, &a, &b, o, &mut params)? => {
                return Ok(());
            }
            _ => 0,
        }
    };
    let n = total as u64 - skip;
    if n == 0 {
        return Ok(());
    }
    // Packed operands start `skip` elements on (0 on the strided path).
    fn operand<'t>(t: &'t Tensor, l: &Layout, follows: bool, skip: u64) -> Operand<'t> {
        Operand {
            buffer: t.buffer(),
            es: t.dtype.size() as u64,
            offset: l.offset() as u64 + skip,
            follows_output: follows,
            end: l.span() as u64,
        }
    }
    let mut operands = vec![operand(x, &a, ca, skip), operand(y, &b, cb, skip)];
    if let Some(o) = out {
        operands.push(operand(o, &o.layout, true, skip));
    }
    let consts = [
        ("OP", op as u32 as f64),
        ("WG", WG as f64),
        ("CONTIG", contig as u32 as f64),
    ];
    let dev = x.device();
    for_windows(dev, name, n, &operands, WG as u64, |s, len, sp| {
        params.numel = len as u32;
        params.base = s as u32;
        // An operand packed like the output is decoded from base + i on the strided path:
        // its offset is shifted back by base (mod 2^32, as the shader's u32 sums wrap).
        let off = |rel: u64, follows: bool| {
            if follows && !contig {
                (rel as u32).wrapping_sub(s as u32)
            } else {
                rel as u32
            }
        };
        params.off_a = off(sp[0].rel, ca);
        params.off_b = off(sp[1].rel, cb);
        let (ba, bb) = (sp[0].bind(x.buffer()), sp[1].bind(y.buffer()));
        let binds = match (out, kernel.entry) {
            (Some(o), _) => vec![ba, bb, sp[2].bind(o.buffer())],
            (None, "main_inplace_a") => vec![bb, ba],
            (None, _) => vec![ba, bb],
        };
        dev.launch_binds(
            name,
            kernel,
            &[x.dtype],
            &consts,
            bytemuck::bytes_of(&params),
            &binds,
            dev.grid_1d(name, len.div_ceil(WG as u64))?,
        )
    })
}

/// The binary family's entry in the kernel-family registry (`ops::families()`).
pub(crate) const FAMILY: crate::runtime::pipeline::Family = crate::runtime::pipeline::Family {
    name: "binary",
    shaders: &["binary.wgsl"],
    params: || vec![params_layout()],
    variants: binary_variants,
};

/// Every (kernel, dtypes, override constants) combination of this family's kernels, for
/// tests/shaders.rs to translate and validate each.
#[doc(hidden)]
pub fn binary_variants() -> Vec<crate::runtime::pipeline::ShaderVariant> {
    let mut v = Vec::new();
    for dt in [DType::F32, DType::F16] {
        for &(_, code) in BINARY_DEFS {
            for contig in [0.0, 1.0] {
                for k in [&BINARY, &BINARY_INPLACE_A, &BINARY_INPLACE_B] {
                    v.push(crate::runtime::pipeline::ShaderVariant::new(
                        k,
                        &[dt],
                        &[("OP", code as f64), ("WG", WG as f64), ("CONTIG", contig)],
                    ));
                }
            }
        }
    }
    v.extend(vec4::binary_vec4_variants());
    v
}

/// The params struct's layout, checked against the shader's `struct Params` in tests/shaders.rs.
#[doc(hidden)]
pub fn params_layout() -> crate::runtime::pipeline::ParamsLayout {
    crate::runtime::pipeline::params_layout!(
        BINARY,
        &[DType::F32],
        BinaryParams {
            numel,
            rank,
            off_a,
            off_b,
            shape,
            sa,
            sb,
            base,
            _pad0,
            _pad1,
            _pad2
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shader's op codes are the `BinaryOp` discriminants, in order.
    #[test]
    fn binary_codes_are_the_discriminants() {
        let ops = [
            BinaryOp::Add,
            BinaryOp::Sub,
            BinaryOp::Mul,
            BinaryOp::Div,
            BinaryOp::Max,
            BinaryOp::Min,
            BinaryOp::Pow,
        ];
        assert_eq!(ops.len(), BINARY_DEFS.len());
        for (op, (name, code)) in ops.iter().zip(BINARY_DEFS) {
            assert_eq!(*op as u32, *code, "{name}");
            assert_eq!(format!("OP_{}", op.name()).to_uppercase()[..6], name[..6]);
        }
    }
}
