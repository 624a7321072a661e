//! Backward of the binary ops (forward in src/ops/binary.rs). Each input's gradient is
//! computed at the broadcast shape and summed back to the input's shape (`sum_to`).

use crate::autograd::{record, sum_to, BackwardOp};
use crate::ops::grad_kernel::{grad_binary, GradCode};
use crate::ops::{BinaryOp, UnaryOp};
use crate::{Error, Result, Tensor};

struct BinaryBackward {
    op: BinaryOp,
    a_shape: Vec<usize>,
    b_shape: Vec<usize>,
    /// Saved only when some gradient needs them (mul keeps b for a's gradient and a for b's).
    a: Option<Tensor>,
    b: Option<Tensor>,
    /// The output, kept by pow for the exponent's gradient (PyTorch's pow saves its result).
    y: Option<Tensor>,
}

impl BinaryBackward {
    fn saved<'t>(&self, t: &'t Option<Tensor>) -> Result<&'t Tensor> {
        t.as_ref().ok_or_else(|| {
            Error::arg(
                self.op.name(),
                "backward is missing a saved tensor".to_string(),
            )
        })
    }
}

impl BackwardOp for BinaryBackward {
    fn saved(&self) -> Vec<&Tensor> {
        [&self.a, &self.b, &self.y].into_iter().flatten().collect()
    }

    fn name(&self) -> &'static str {
        self.op.name()
    }

    fn backward(&self, grads: &[Option<Tensor>], needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = grads.first().and_then(Option::as_ref) else {
            return Ok(vec![None, None]);
        };
        let (need_a, need_b) = (needs.first() == Some(&true), needs.get(1) == Some(&true));
        // Gradients at the broadcast shape.
        let (ga, gb) = match self.op {
            BinaryOp::Add => (need_a.then(|| g.clone()), need_b.then(|| g.clone())),
            BinaryOp::Sub => (
                need_a.then(|| g.clone()),
                if need_b { Some(g.neg()?) } else { None },
            ),
            BinaryOp::Mul => (
                if need_a {
                    Some(g.mul(self.saved(&self.b)?)?)
                } else {
                    None
                },
                if need_b {
                    Some(g.mul(self.saved(&self.a)?)?)
                } else {
                    None
                },
            ),
            BinaryOp::Div => {
                // d(a / b)/db = -a / b^2, as PyTorch's div_tensor_other_backward rounds it:
                // -g ((a / b) / b), from a and b (it saves the operands, not the output, so
                // the output may be written in place before the backward).
                let gb = if need_b {
                    let b = self.saved(&self.b)?;
                    let q = self.saved(&self.a)?.div(b)?.div(b)?;
                    Some(g.mul(&q)?.into_unary(UnaryOp::Neg)?)
                } else {
                    None
                };
                let ga = match need_a {
                    true => Some(g.div(self.saved(&self.b)?)?),
                    false => None,
                };
                (ga, gb)
            }
            BinaryOp::Pow => {
                let (a, b) = (self.saved(&self.a)?, self.saved(&self.b)?);
                // PyTorch: da = g b a^(b - 1), 0 where b == 0; db = g a^b ln(a), 0 where a == 0
                // and b >= 0 (a negative exponent keeps the infinite term, as PyTorch's
                // pow_backward_exponent).
                let ga = if need_a {
                    // g (b a^(b - 1)), the factor first as PyTorch's: g b rounded to f16
                    // overflows where the whole gradient does not.
                    let t = g.mul(&b.mul(&a.pow(&b.sub_scalar(1.0)?)?)?)?;
                    Some(grad_binary(&t, b, GradCode::ZeroWhereZero, 0.0)?)
                } else {
                    None
                };
                let gb = if need_b {
                    // The masked factor first, then g: an infinite g times the exact 0 is NaN,
                    // as PyTorch's grad * where(mask, 0, y ln a).
                    let t = self.saved(&self.y)?.mul(&a.log()?)?;
                    // The mask operand: a where b >= 0, else 1 (never zero, so kept).
                    let one = Tensor::full(a.device(), &[], 1.0, a.dtype())?;
                    let masked_a = b.ge_scalar(0.0)?.where_cond(a, &one)?;
                    Some(g.mul(&grad_binary(&t, &masked_a, GradCode::ZeroWhereZero, 0.0)?)?)
                } else {
                    None
                };
                (ga, gb)
            }
            BinaryOp::Max | BinaryOp::Min => {
                let code = if self.op == BinaryOp::Max {
                    GradCode::MaxWeight
                } else {
                    GradCode::MinWeight
                };
                // Each operand's weight against the other: 1, 1/2 on ties, 0, and 1 for both
                // where either is NaN (so b's is not 1 - a's).
                // The losing side gets an exact 0, as PyTorch's masked_fill, not g * 0 (NaN
                // for an infinite g: sqrt(max(x, 0)) at a clamped x).
                let (a, b) = (self.saved(&self.a)?, self.saved(&self.b)?);
                let weighted = |x: &Tensor, y: &Tensor| -> Result<Tensor> {
                    let w = grad_binary(x, y, code, 0.0)?;
                    grad_binary(&g.mul(&w)?, &w, GradCode::ZeroWhereZero, 0.0)
                };
                let ga = if need_a { Some(weighted(a, b)?) } else { None };
                let gb = if need_b { Some(weighted(b, a)?) } else { None };
                (ga, gb)
            }
        };
        let ga = match ga {
            Some(t) => Some(sum_to(&t, &self.a_shape)?),
            None => None,
        };
        let gb = match gb {
            Some(t) => Some(sum_to(&t, &self.b_shape)?),
            None => None,
        };
        Ok(vec![ga, gb])
    }
}

impl Tensor {
    /// `self (op) other` with numpy broadcasting; strided inputs are read without copies.
    /// Returns a new contiguous tensor of the broadcast shape. Mixed dtypes promote as
    /// PyTorch's (i32 < f16 < f32; a 0-d operand does not widen a tensor of its kind, so f16
    /// `x * torch.tensor(0.5)` stays f16, a 0-d second factor or divisor used unrounded, as
    /// PyTorch's kernels), each gradient in its operand's dtype. Errors:
    /// [`Error::Shape`] when the shapes do not broadcast, [`Error::DeviceMismatch`] when the
    /// devices differ, an error for two i32 operands (no integer arithmetic).
    ///
    /// [`Error::Shape`]: crate::Error::Shape
    /// [`Error::DType`]: crate::Error::DType
    /// [`Error::DeviceMismatch`]: crate::Error::DeviceMismatch
    pub fn binary(&self, other: &Tensor, op: BinaryOp) -> Result<Tensor> {
        if self.dtype != other.dtype {
            // PyTorch's type promotion (f16 activations plus an f32 bias give f32; an i32
            // operand takes the float's dtype; a 0-d operand of the same kind does not
            // widen), through recorded casts, so each gradient comes back in its
            // operand's dtype.
            crate::layout::broadcast_shapes(op.name(), self.shape(), other.shape())?;
            self.same_device(op.name(), other)?;
            // f16 data times or over an f32 or i32 0-d tensor: f16, the scalar's value and
            // the gradients as PyTorch's mul and div kernels and nodes take them
            // (`x * tensor(1e5)` is 49984 where a narrowed scalar gives inf).
            if super::wide_scalar::applies(self, other, op) {
                return super::wide_scalar::f16_with_wide_scalar(self, other, op);
            }
            let dt = crate::dtype::result_type(self, other);
            let out = self.to_dtype(dt)?.binary(&other.to_dtype(dt)?, op)?;
            // PyTorch's one node saves the operands as passed (promotion is inside its
            // kernel), as derivatives.yaml's formulas need them; the node above saved the
            // cast copies, so the caller's are kept for the version check.
            let (a, b) = op.saved_operands(self.is_tracked(), other.is_tracked());
            let watch: Vec<&Tensor> = [(a, self), (b, other)]
                .into_iter()
                .filter_map(|(keep, t)| keep.then_some(t))
                .collect();
            if watch.is_empty() {
                return Ok(out);
            }
            return Ok(super::saved_inputs::saving_inputs(op.name(), out, &watch));
        }
        let out = self.binary_forward(other, op)?;
        Ok(record(out, &[self, other], |y| {
            // Pow also keeps its result, for the exponent's gradient.
            let tb = other.is_tracked();
            let (keep_a, keep_b) = op.saved_operands(self.is_tracked(), tb);
            let keep_y = op == BinaryOp::Pow && tb;
            Box::new(BinaryBackward {
                op,
                a_shape: self.shape().to_vec(),
                b_shape: other.shape().to_vec(),
                a: keep_a.then(|| self.detach()),
                b: keep_b.then(|| other.detach()),
                y: keep_y.then(|| y.clone()),
            })
        }))
    }
}
