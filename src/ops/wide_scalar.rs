//! f16 data times, or over, an f32 or i32 0-d tensor, as PyTorch's mul and div: the result is
//! f16 (a 0-d operand does not widen a tensor of its kind), the 0-d value read as the f32
//! opmath scalar where PyTorch's kernels read it so (a second factor or a divisor; its CPU
//! kernels narrow a first factor to f16 first), and the gradients as MulBackward0 and
//! DivBackward0 compute them: the tensor's from the gradient times (over) the unrounded
//! scalar, the scalar's from f16 products summed to an f16 value, then cast to its dtype.

use crate::autograd::{record, BackwardOp, NoGradGuard};
use crate::ops::BinaryOp;
use crate::{DType, Result, Tensor};

/// Whether `a op b` is such a call: f16 data beside an f32 or i32 0-d tensor, a factor on
/// either side or a divisor.
pub(crate) fn applies(a: &Tensor, b: &Tensor, op: BinaryOp) -> bool {
    let wide = |t: &Tensor| t.rank() == 0 && t.dtype() != DType::F16;
    let data = |t: &Tensor| t.rank() > 0 && t.dtype() == DType::F16;
    match op {
        BinaryOp::Mul => (data(a) && wide(b)) || (wide(a) && data(b)),
        BinaryOp::Div => data(a) && wide(b),
        _ => false,
    }
}

/// `a op b` for a call [`applies`] accepts, recorded as one node.
pub(crate) fn f16_with_wide_scalar(a: &Tensor, b: &Tensor, op: BinaryOp) -> Result<Tensor> {
    let s_first = a.rank() == 0;
    let (x, s) = if s_first { (b, a) } else { (a, b) };
    let value = {
        let _untracked = NoGradGuard::new();
        if s_first {
            s.to_dtype(DType::F16)?.binary(x, op)?
        } else {
            let wide = x
                .to_dtype(DType::F32)?
                .binary(&s.to_dtype(DType::F32)?, op)?;
            wide.to_dtype(DType::F16)?
        }
    };
    // What PyTorch's node saves, in the caller's order.
    let (keep_a, keep_b) = op.saved_operands(a.is_tracked(), b.is_tracked());
    let (keep_x, keep_s) = if s_first {
        (keep_b, keep_a)
    } else {
        (keep_a, keep_b)
    };
    Ok(record(value, &[a, b], |_| {
        Box::new(WideScalarBackward {
            op,
            s_first,
            s_dtype: s.dtype(),
            x: keep_x.then(|| x.detach()),
            s: keep_s.then(|| s.detach()),
        })
    }))
}

struct WideScalarBackward {
    op: BinaryOp,
    s_first: bool,
    s_dtype: DType,
    x: Option<Tensor>,
    s: Option<Tensor>,
}

impl WideScalarBackward {
    fn kept<'a>(t: &'a Option<Tensor>, what: &str) -> Result<&'a Tensor> {
        t.as_ref().ok_or_else(|| {
            crate::Error::arg(
                "backward",
                format!("the f16 mul/div node kept no {what} for a gradient it was asked for"),
            )
        })
    }
}

impl BackwardOp for WideScalarBackward {
    fn name(&self) -> &'static str {
        self.op.name()
    }

    fn saved(&self) -> Vec<&Tensor> {
        self.x.iter().chain(&self.s).collect()
    }

    fn backward(&self, grads: &[Option<Tensor>], needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = grads.first().and_then(Option::as_ref) else {
            return Ok(vec![None, None]);
        };
        let at = |i: usize| needs.get(i).copied().unwrap_or(false);
        let (need_x, need_s) = if self.s_first {
            (at(1), at(0))
        } else {
            (at(0), at(1))
        };
        let gx = if need_x {
            // The gradient times (over) the unrounded scalar: this call's own rule again.
            Some(g.binary(Self::kept(&self.s, "scalar")?, self.op)?)
        } else {
            None
        };
        let gs = if need_s {
            let x = Self::kept(&self.x, "tensor")?;
            let t = match self.op {
                BinaryOp::Div => {
                    let s = Self::kept(&self.s, "scalar")?;
                    g.neg()?
                        .mul(&x.binary(s, BinaryOp::Div)?.binary(s, BinaryOp::Div)?)?
                }
                _ => g.mul(x)?,
            };
            Some(t.sum_all()?.to_dtype(self.s_dtype)?)
        } else {
            None
        };
        Ok(if self.s_first {
            vec![gs, gx]
        } else {
            vec![gx, gs]
        })
    }
}
