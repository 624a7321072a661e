//! Comparisons and selection (shaders/compare.wgsl): `eq ne lt le gt ge` with numpy
//! broadcasting, producing a mask, and `where_cond(cond, a, b)`.
//!
//! Masks are **f32** tensors holding 1.0 where the relation holds and 0.0 elsewhere (PyTorch
//! returns `torch.bool`; an f32 mask multiplies, sums and averages directly, e.g.
//! `pred.eq(&labels)?.mean_all()` is the accuracy). Any tensor works as a condition: non-zero
//! (or NaN, as PyTorch's `bool(nan)`) is true. Comparisons run in the inputs' own dtype, so
//! i32 compares exactly (against any `f64` scalar too); a NaN operand makes every relation
//! false except `ne`.

use bytemuck::{Pod, Zeroable};

use crate::autograd::{record, sum_to, BackwardOp};
use crate::dtype::result_type;
use crate::layout::{broadcast_shapes, pack_dims, MAX_RANK};
use crate::ops::activation::ACTIVATION;
use crate::ops::map::WG;
use crate::runtime::pipeline::ShaderVariant;
use crate::runtime::window::Span;
use crate::runtime::{Access, Bind, Kernel};
use crate::{DType, Result, Tensor};

const SRC: &str = include_str!("../../shaders/compare.wgsl");

use Access::{Read as R, ReadWrite as RW};

static COMPARE: Kernel = Kernel::new("compare", SRC, "compare", &[R, R, RW])
    .slots(&[1, 2, 5])
    .libs(&[&ACTIVATION])
    .defs(CMP_DEFS)
    .ints();

static SELECT: Kernel = Kernel::new("compare", SRC, "select_where", &[R, R, R, RW])
    .slots(&[1, 2, 3, 4])
    .libs(&[&ACTIVATION])
    .defs(CMP_DEFS)
    .ints();

/// A relation between two tensors' elements ([`Tensor::compare`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    /// `a == b` (`torch.eq`).
    Eq,
    /// `a != b` (`torch.ne`); true when either is NaN.
    Ne,
    /// `a < b` (`torch.lt`).
    Lt,
    /// `a <= b` (`torch.le`).
    Le,
    /// `a > b` (`torch.gt`).
    Gt,
    /// `a >= b` (`torch.ge`).
    Ge,
}

/// The compare kernel's op codes (the `CmpOp` discriminants), emitted as WGSL constants.
const CMP_DEFS: &[(&str, u32)] = &[
    ("CMP_EQ", CmpOp::Eq as u32),
    ("CMP_NE", CmpOp::Ne as u32),
    ("CMP_LT", CmpOp::Lt as u32),
    ("CMP_LE", CmpOp::Le as u32),
    ("CMP_GT", CmpOp::Gt as u32),
    ("CMP_GE", CmpOp::Ge as u32),
];

impl CmpOp {
    fn name(self) -> &'static str {
        ["eq", "ne", "lt", "le", "gt", "ge"][self as usize]
    }
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct CompareParams {
    numel: u32,
    rank: u32,
    off_a: u32,
    off_b: u32,
    off_c: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
    shape: [u32; MAX_RANK],
    sa: [u32; MAX_RANK],
    sb: [u32; MAX_RANK],
    sc: [u32; MAX_RANK],
}

/// Params for output `shape` reading each tensor of `inputs` broadcast to it.
/// The params over `shape` and the binding of each input: only the elements its view spans,
/// so a row of a base past one binding (a slice of a precomputed causal mask) fits.
fn params(shape: &[usize], inputs: &[&Tensor]) -> Result<(CompareParams, Vec<Span>)> {
    let mut spans = Vec::with_capacity(inputs.len());
    let mut p = CompareParams::zeroed();
    p.numel = shape.iter().product::<usize>() as u32;
    p.rank = shape.len() as u32;
    p.shape = pack_dims(shape);
    let slots: [(&mut u32, &mut [u32; MAX_RANK]); 3] = [
        (&mut p.off_a, &mut p.sa),
        (&mut p.off_b, &mut p.sb),
        (&mut p.off_c, &mut p.sc),
    ];
    for ((off, strides), t) in slots.into_iter().zip(inputs) {
        let l = t.layout.broadcast_to(shape)?;
        let span = t.view_span();
        *off = span.rel as u32;
        *strides = pack_dims(l.strides());
        spans.push(span);
    }
    Ok((p, spans))
}

fn grid(op: &'static str, t: &Tensor, n: usize) -> Result<[u32; 3]> {
    t.device().grid_1d(op, (n as u64).div_ceil(WG as u64))
}

impl Tensor {
    /// The mask of `self (op) other` with broadcasting: an f32 tensor of 1.0 / 0.0 (see the
    /// module docs of [`compare`](crate::ops::compare)). Tensors of different dtypes compare
    /// after PyTorch's promotion (i32 < f16 < f32; a 0-d operand takes the other's dtype
    /// when both are floats or both i32, as PyTorch's `result_type`). Never tracked by autograd (a mask has no
    /// gradient).
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{Device, Tensor};
    /// let dev = Device::new()?;
    /// let pred = Tensor::from_slice(&dev, &[1i32, 2, 3, 0], &[4])?;
    /// let labels = Tensor::from_slice(&dev, &[1i32, 0, 3, 0], &[4])?;
    /// let hit = pred.eq(&labels)?; // [1.0, 0.0, 1.0, 1.0]
    /// assert_eq!(hit.mean_all()?.to_vec::<f32>()?, vec![0.75]); // accuracy
    /// # Ok(()) }
    /// ```
    pub fn compare(&self, other: &Tensor, op: CmpOp) -> Result<Tensor> {
        let name = op.name();
        // TensorIterator computes the shape before the device check.
        broadcast_shapes(name, self.shape(), other.shape())?;
        self.same_device(name, other)?;
        if self.dtype != other.dtype {
            let dt = result_type(self, other);
            return self.to_dtype(dt)?.compare(&other.to_dtype(dt)?, op);
        }
        let shape = broadcast_shapes(name, self.shape(), other.shape())?;
        let dev = self.device();
        let out = Tensor::empty(dev, name, &shape, DType::F32)?;
        let n = out.numel();
        if n == 0 {
            return Ok(out);
        }
        let (p, s) = params(&shape, &[self, other])?;
        dev.launch_binds(
            name,
            &COMPARE,
            &[self.dtype, DType::I32],
            &[("OP", op as u32 as f64), ("WG", WG as f64)],
            bytemuck::bytes_of(&p),
            &[
                s[0].bind(self.buffer()),
                s[1].bind(other.buffer()),
                Bind::whole(out.buffer()),
            ],
            grid(name, self, n)?,
        )?;
        Ok(out)
    }

    /// [`Tensor::compare`] against a scalar (PyTorch's `x > 0.5`): the same f32 mask, shaped
    /// like this tensor. An i32 tensor compares exactly against any `f64`: as PyTorch does
    /// against an integer scalar (`labels == 3`); PyTorch compares a fractional scalar in f32,
    /// which differs from the exact answer only for values past 2^24 or a scalar within f32
    /// rounding of an integer. A NaN scalar makes every relation false except `ne`; `eq` /
    /// `ne` with a scalar that has a fraction or lies outside the i32 range are all false /
    /// all true; `lt` and `ge` compare with `ceil(s)`, `le` and `gt` with `floor(s)`, and a
    /// bound past the i32 range (±inf included) gives a constant mask. Float tensors compare
    /// against `s` rounded to their dtype.
    pub fn compare_scalar(&self, s: f64, op: CmpOp) -> Result<Tensor> {
        if self.dtype == DType::I32 {
            return match int_scalar_bound(s, op) {
                IntBound::Const(v) => self.const_mask(v),
                IntBound::Int(k) => {
                    let t = Tensor::from_slice(self.device(), &[k], &[])?;
                    self.compare(&t, op)
                }
            };
        }
        let t = Tensor::scalar_of(self.device(), s, self.dtype)?;
        self.compare(&t, op)
    }

    /// The mask a comparison gives when it holds everywhere (`v`) or nowhere: f32, shaped like
    /// this tensor, as [`Tensor::compare`] returns.
    fn const_mask(&self, v: bool) -> Result<Tensor> {
        if v {
            Tensor::full(self.device(), self.shape(), 1.0, DType::F32)
        } else {
            Tensor::zeros(self.device(), self.shape(), DType::F32)
        }
    }

    /// `self == other` elementwise, as an f32 mask ([`Tensor::compare`]).
    pub fn eq(&self, other: &Tensor) -> Result<Tensor> {
        self.compare(other, CmpOp::Eq)
    }
    /// `self != other` elementwise, as an f32 mask ([`Tensor::compare`]).
    pub fn ne(&self, other: &Tensor) -> Result<Tensor> {
        self.compare(other, CmpOp::Ne)
    }
    /// `self < other` elementwise, as an f32 mask ([`Tensor::compare`]).
    pub fn lt(&self, other: &Tensor) -> Result<Tensor> {
        self.compare(other, CmpOp::Lt)
    }
    /// `self <= other` elementwise, as an f32 mask ([`Tensor::compare`]).
    pub fn le(&self, other: &Tensor) -> Result<Tensor> {
        self.compare(other, CmpOp::Le)
    }
    /// `self > other` elementwise, as an f32 mask ([`Tensor::compare`]).
    pub fn gt(&self, other: &Tensor) -> Result<Tensor> {
        self.compare(other, CmpOp::Gt)
    }
    /// `self >= other` elementwise, as an f32 mask ([`Tensor::compare`]).
    pub fn ge(&self, other: &Tensor) -> Result<Tensor> {
        self.compare(other, CmpOp::Ge)
    }
    /// `self == s`, as an f32 mask ([`Tensor::compare_scalar`]).
    pub fn eq_scalar(&self, s: f64) -> Result<Tensor> {
        self.compare_scalar(s, CmpOp::Eq)
    }
    /// `self != s`, as an f32 mask ([`Tensor::compare_scalar`]).
    pub fn ne_scalar(&self, s: f64) -> Result<Tensor> {
        self.compare_scalar(s, CmpOp::Ne)
    }
    /// `self < s`, as an f32 mask ([`Tensor::compare_scalar`]).
    pub fn lt_scalar(&self, s: f64) -> Result<Tensor> {
        self.compare_scalar(s, CmpOp::Lt)
    }
    /// `self <= s`, as an f32 mask ([`Tensor::compare_scalar`]).
    pub fn le_scalar(&self, s: f64) -> Result<Tensor> {
        self.compare_scalar(s, CmpOp::Le)
    }
    /// `self > s`, as an f32 mask ([`Tensor::compare_scalar`]).
    pub fn gt_scalar(&self, s: f64) -> Result<Tensor> {
        self.compare_scalar(s, CmpOp::Gt)
    }
    /// `self >= s`, as an f32 mask ([`Tensor::compare_scalar`]).
    pub fn ge_scalar(&self, s: f64) -> Result<Tensor> {
        self.compare_scalar(s, CmpOp::Ge)
    }

    /// PyTorch's `torch.where(self, on_true, on_false)`: `on_true` where this condition is
    /// true (non-zero or NaN), else `on_false`, all three broadcast together. The condition may
    /// have any dtype; the result has the promoted dtype of `on_true` and `on_false` (i32 <
    /// f16 < f32, a 0-d side taking the other's dtype within one kind, as PyTorch promotes). Gradients flow to `on_true` where the condition holds and to `on_false` elsewhere.
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{Device, Tensor};
    /// let dev = Device::new()?;
    /// let x = Tensor::from_slice(&dev, &[-1.0f32, 2.0, -3.0], &[3])?;
    /// let zero = Tensor::zeros(&dev, &[], x.dtype())?;
    /// let y = x.gt_scalar(0.0)?.where_cond(&x, &zero)?; // relu
    /// assert_eq!(y.to_vec::<f32>()?, vec![0.0, 2.0, 0.0]);
    /// # Ok(()) }
    /// ```
    pub fn where_cond(&self, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor> {
        if on_true.dtype != on_false.dtype {
            // Promote through the tracked cast, so each side's gradient comes back in its
            // own dtype.
            let dt = result_type(on_true, on_false);
            return self.where_cond(&on_true.to_dtype(dt)?, &on_false.to_dtype(dt)?);
        }
        let out = where_forward(self, on_true, on_false)?;
        Ok(record(out, &[on_true, on_false], |_| {
            Box::new(WhereBackward {
                cond: self.detach(),
                a_shape: on_true.shape().to_vec(),
                b_shape: on_false.shape().to_vec(),
            })
        }))
    }
}

impl Tensor {
    /// PyTorch's `masked_fill(mask, value)`: `value` where `mask` is true (non-zero or NaN),
    /// this tensor elsewhere, over the broadcast of both shapes (PyTorch's out-of-place form
    /// may grow the result; the gradient is summed back to this tensor's shape where the mask
    /// is false). A `value` this dtype cannot hold is an error, as [`Tensor::full`]'s (`-1e9`
    /// into f16: use `f64::NEG_INFINITY` or the dtype's lowest).
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{Device, Tensor};
    /// let dev = Device::new()?;
    /// let scores = Tensor::from_slice(&dev, &[0.5f32, 2.0, -1.0], &[3])?;
    /// let pad = Tensor::from_slice(&dev, &[0i32, 1, 0], &[3])?;
    /// let masked = scores.masked_fill(&pad, f64::NEG_INFINITY)?;
    /// assert_eq!(masked.to_vec::<f32>()?, vec![0.5, f32::NEG_INFINITY, -1.0]);
    /// # Ok(()) }
    /// ```
    pub fn masked_fill(&self, mask: &Tensor, value: f64) -> Result<Tensor> {
        let op = "masked_fill";
        // Checked under this op's name (where_cond would name itself), the mask first as
        // PyTorch's expand_outplace(mask, self), so an error names the same sizes; the value
        // after, as masked_fill_ converts it on the expanded tensor.
        crate::layout::broadcast_shapes(op, mask.shape(), self.shape())?;
        self.same_device(op, mask)?;
        crate::tensor::check_fill(op, value, self.dtype)?;
        let v = Tensor::full(self.device(), &[], value, self.dtype)?;
        mask.where_cond(&v, self)
    }
}

/// PyTorch's `torch.where(cond, on_true, on_false)` ([`Tensor::where_cond`]).
pub fn where_cond(cond: &Tensor, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor> {
    cond.where_cond(on_true, on_false)
}

fn where_forward(cond: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let name = "where";
    // TensorIterator computes the shape before the device check.
    let ca = broadcast_shapes(name, cond.shape(), a.shape())?;
    broadcast_shapes(name, &ca, b.shape())?;
    a.same_device(name, b)?;
    a.same_device(name, cond)?;
    if a.dtype != b.dtype {
        let dt = result_type(a, b);
        return where_forward(cond, &a.to_dtype(dt)?, &b.to_dtype(dt)?);
    }
    // In TensorIterator's operand order (condition, then each side), so a shape error
    // names the sizes PyTorch's names.
    let ca = broadcast_shapes(name, cond.shape(), a.shape())?;
    let shape = broadcast_shapes(name, &ca, b.shape())?;
    let dev = a.device();
    let out = Tensor::empty(dev, name, &shape, a.dtype)?;
    let n = out.numel();
    if n == 0 {
        return Ok(out);
    }
    let (p, s) = params(&shape, &[a, b, cond])?;
    dev.launch_binds(
        name,
        &SELECT,
        &[a.dtype, cond.dtype],
        &[("OP", 0.0), ("WG", WG as f64)],
        bytemuck::bytes_of(&p),
        &[
            s[0].bind(a.buffer()),
            s[1].bind(b.buffer()),
            s[2].bind(cond.buffer()),
            Bind::whole(out.buffer()),
        ],
        grid(name, a, n)?,
    )?;
    Ok(out)
}

struct WhereBackward {
    cond: Tensor,
    a_shape: Vec<usize>,
    b_shape: Vec<usize>,
}

impl BackwardOp for WhereBackward {
    fn saved(&self) -> Vec<&Tensor> {
        vec![&self.cond]
    }

    fn name(&self) -> &'static str {
        "where"
    }

    fn backward(&self, grads: &[Option<Tensor>], needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = grads.first().and_then(Option::as_ref) else {
            return Ok(vec![None, None]);
        };
        let zero = Tensor::zeros(g.device(), &[], g.dtype)?;
        let ga = if needs.first() == Some(&true) {
            Some(sum_to(
                &where_forward(&self.cond, g, &zero)?,
                &self.a_shape,
            )?)
        } else {
            None
        };
        let gb = if needs.get(1) == Some(&true) {
            Some(sum_to(
                &where_forward(&self.cond, &zero, g)?,
                &self.b_shape,
            )?)
        } else {
            None
        };
        Ok(vec![ga, gb])
    }
}

/// How an i32 tensor compares with an `f64` scalar: against an integer, or a constant result.
#[derive(Debug, PartialEq, Eq)]
enum IntBound {
    Int(i32),
    Const(bool),
}

/// The exact integer form of `x (op) s` for every i32 `x` (see [`Tensor::compare_scalar`]).
fn int_scalar_bound(s: f64, op: CmpOp) -> IntBound {
    if s.is_nan() {
        return IntBound::Const(op == CmpOp::Ne);
    }
    let in_range = |k: f64| k >= i32::MIN as f64 && k <= i32::MAX as f64;
    match op {
        CmpOp::Eq | CmpOp::Ne => {
            if s.fract() == 0.0 && in_range(s) {
                IntBound::Int(s as i32)
            } else {
                IntBound::Const(op == CmpOp::Ne)
            }
        }
        // x < s  <=>  x < ceil(s);  x >= s  <=>  x >= ceil(s).
        // x <= s <=>  x <= floor(s); x > s  <=>  x > floor(s).
        CmpOp::Lt | CmpOp::Ge | CmpOp::Le | CmpOp::Gt => {
            let k = if matches!(op, CmpOp::Lt | CmpOp::Ge) {
                s.ceil()
            } else {
                s.floor()
            };
            if in_range(k) {
                IntBound::Int(k as i32)
            } else {
                // k above every i32: `x < k` and `x <= k` hold everywhere; below every i32:
                // `x > k` and `x >= k` do.
                let above = k > 0.0;
                IntBound::Const(above == matches!(op, CmpOp::Lt | CmpOp::Le))
            }
        }
    }
}

/// The compare family's entry in the kernel-family registry (`ops::families()`).
pub(crate) const FAMILY: crate::runtime::pipeline::Family = crate::runtime::pipeline::Family {
    name: "compare",
    shaders: &["compare.wgsl"],
    params: || vec![params_layout()],
    variants: compare_variants,
};

/// Every (kernel, dtypes, override constants) combination of this family's kernels, for
/// tests/shaders.rs to translate and validate each.
#[doc(hidden)]
pub fn compare_variants() -> Vec<ShaderVariant> {
    let mut v = Vec::new();
    for dt in [DType::F32, DType::F16, DType::I32] {
        // `compare` launches with U = i32; the other U sources list it too, so every entry
        // point of every module built is covered.
        for cond in [DType::F32, DType::F16, DType::I32] {
            for &(_, code) in CMP_DEFS {
                v.push(ShaderVariant::new(
                    &COMPARE,
                    &[dt, cond],
                    &[("OP", code as f64), ("WG", WG as f64)],
                ));
            }
            v.push(ShaderVariant::new(
                &SELECT,
                &[dt, cond],
                &[("OP", 0.0), ("WG", WG as f64)],
            ));
        }
    }
    v
}

/// The params struct's layout, checked against the shader's `struct Params` in tests/shaders.rs.
#[doc(hidden)]
pub fn params_layout() -> crate::runtime::pipeline::ParamsLayout {
    crate::runtime::pipeline::params_layout!(
        COMPARE,
        &[DType::F32, DType::I32],
        CompareParams {
            numel,
            rank,
            off_a,
            off_b,
            off_c,
            _pad0,
            _pad1,
            _pad2,
            shape,
            sa,
            sb,
            sc
        }
    )
}
