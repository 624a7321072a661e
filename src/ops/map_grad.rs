//! Backward of the map family (forward in src/ops/map.rs): unary math, scalar ops, to_dtype.
//! Derivatives that PyTorch takes from the output (exp, sqrt, relu, sigmoid, tanh) save the
//! output; the others (abs, log, gelu, silu, log1p, softplus) save the input.

use crate::autograd::{record, BackwardOp};
use crate::ops::grad_kernel::{grad_binary, GradCode};
use crate::ops::{ScalarOp, UnaryOp};
use crate::{DType, Error, Result, Tensor};

struct UnaryBackward {
    op: UnaryOp,
    /// The input or the output, whichever the derivative needs (`None` for neg).
    saved: Option<Tensor>,
}

fn first(grads: &[Option<Tensor>]) -> Option<&Tensor> {
    grads.first().and_then(Option::as_ref)
}

impl BackwardOp for UnaryBackward {
    fn saved(&self) -> Vec<&Tensor> {
        self.saved.iter().collect()
    }

    fn name(&self) -> &'static str {
        match self.op {
            UnaryOp::Neg => "neg",
            UnaryOp::Abs => "abs",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Relu => "relu",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Gelu => "gelu",
            UnaryOp::Silu => "silu",
            UnaryOp::Log1p => "log1p",
            UnaryOp::Softplus => "softplus",
            UnaryOp::GeluTanh => "gelu_tanh",
        }
    }

    fn backward(&self, grads: &[Option<Tensor>], _needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = first(grads) else {
            return Ok(vec![None]);
        };
        if self.op == UnaryOp::Neg {
            return Ok(vec![Some(g.neg()?)]);
        }
        let s = self
            .saved
            .as_ref()
            .ok_or_else(|| Error::arg(self.name(), "backward is missing a saved tensor"))?;
        let gx = match self.op {
            UnaryOp::Neg => g.neg()?,
            UnaryOp::Abs => grad_binary(g, s, GradCode::AbsFromX, 0.0)?,
            UnaryOp::Exp => g.mul(s)?,
            UnaryOp::Log => g.div(s)?,
            UnaryOp::Sqrt => grad_binary(g, s, GradCode::SqrtFromY, 0.0)?,
            UnaryOp::Relu => grad_binary(g, s, GradCode::ReluFromY, 0.0)?,
            UnaryOp::Sigmoid => grad_binary(g, s, GradCode::SigmoidFromY, 0.0)?,
            UnaryOp::Tanh => grad_binary(g, s, GradCode::TanhFromY, 0.0)?,
            UnaryOp::Gelu => grad_binary(g, s, GradCode::GeluFromX, 0.0)?,
            UnaryOp::Silu => grad_binary(g, s, GradCode::SiluFromX, 0.0)?,
            // PyTorch's log1p_backward: g / (x + 1).
            UnaryOp::Log1p => g.div(&s.add_scalar(1.0)?)?,
            UnaryOp::Softplus => grad_binary(g, s, GradCode::SoftplusFromX, 0.0)?,
            UnaryOp::GeluTanh => grad_binary(g, s, GradCode::GeluTanhFromX, 0.0)?,
        };
        Ok(vec![Some(gx)])
    }
}

/// Records `out = x.unary(op)`.
pub(crate) fn record_unary(x: &Tensor, op: UnaryOp, out: Tensor) -> Tensor {
    record(out, &[x], |y| {
        let saved = match op {
            UnaryOp::Neg => None,
            UnaryOp::Abs
            | UnaryOp::Log
            | UnaryOp::Gelu
            | UnaryOp::Silu
            | UnaryOp::Log1p
            | UnaryOp::Softplus
            | UnaryOp::GeluTanh => Some(x.detach()),
            UnaryOp::Exp | UnaryOp::Sqrt | UnaryOp::Relu | UnaryOp::Sigmoid | UnaryOp::Tanh => {
                Some(y.clone())
            }
        };
        Box::new(UnaryBackward { op, saved })
    })
}

struct ScalarBackward {
    op: ScalarOp,
    s: f32,
    /// The input, kept only by max, min and pow; rdiv's output (a reciprocal, see
    /// [`record_scalar`]).
    x: Option<Tensor>,
    /// The scalar stands for a tensor PyTorch wraps and saves ([`Tensor::scalar_op_as`]).
    wrapped: bool,
}

impl BackwardOp for ScalarBackward {
    fn saved(&self) -> Vec<&Tensor> {
        self.x.iter().collect()
    }

    fn name(&self) -> &'static str {
        match self.op {
            ScalarOp::Add => "add_scalar",
            ScalarOp::Sub => "sub_scalar",
            ScalarOp::RSub => "rsub_scalar",
            ScalarOp::Mul => "mul_scalar",
            ScalarOp::Div => "div_scalar",
            ScalarOp::RDiv => "rdiv_scalar",
            ScalarOp::Max => "max_scalar",
            ScalarOp::Min => "min_scalar",
            ScalarOp::Pow => "pow_scalar",
        }
    }

    fn backward(&self, grads: &[Option<Tensor>], _needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = first(grads) else {
            return Ok(vec![None]);
        };
        let saved = |t: &Option<Tensor>| {
            t.clone().ok_or_else(|| {
                Error::arg(
                    self.name(),
                    "backward is missing a saved tensor".to_string(),
                )
            })
        };
        let gx = match self.op {
            ScalarOp::Add | ScalarOp::Sub => g.clone(),
            ScalarOp::RSub => g.neg()?,
            ScalarOp::Mul => g.mul_scalar(f64::from(self.s))?,
            ScalarOp::Div => g.div_scalar(f64::from(self.s))?,
            // ReciprocalBackward0: -g (r r) with r its saved result.
            ScalarOp::RDiv => {
                let r = saved(&self.x)?;
                g.mul(&r.mul(&r)?)?.into_unary(UnaryOp::Neg)?
            }
            // clamp_min / clamp_max pass the gradient strictly inside the bound (torch 2.14's
            // minimum-norm subgradient, as relu's and hardtanh's; 1 at the bound before).
            ScalarOp::Max => grad_binary(g, &saved(&self.x)?, GradCode::PassAbove, self.s)?,
            ScalarOp::Min => grad_binary(g, &saved(&self.x)?, GradCode::PassBelow, self.s)?,
            // PyTorch: grad * (s * x^(s - 1)), and zeros for s == 0 (x^-1 would be inf at
            // x = 0; zeros, not g * 0, which is NaN where g is not finite). The factor first,
            // as PyTorch's: g x^(s - 1) rounded to f16 overflows for |s| < 1 where the product
            // with s does not (sqrt's gradient under loss scaling).
            ScalarOp::Pow if self.s == 0.0 => g.zeros_like()?,
            ScalarOp::Pow => g.mul(
                &saved(&self.x)?
                    .pow_scalar(f64::from(self.s) - 1.0)?
                    .mul_scalar(f64::from(self.s))?,
            )?,
        };
        Ok(vec![Some(gx)])
    }

    /// PyTorch's `x * s` and `x / s` are `mul.Tensor` / `div.Tensor` with `s` wrapped as a
    /// tensor, which their backward saves (derivatives.yaml); add and sub save nothing.
    fn single_use(&self) -> bool {
        self.wrapped && matches!(self.op, ScalarOp::Mul | ScalarOp::Div)
    }
}

/// Records `out = x (op) s`. An rdiv is recorded only with `s` 1 (a reciprocal: see
/// [`Tensor::scalar_op_as`]), and its node keeps `out`, as ReciprocalBackward0 saves its
/// result: the input may be written in place afterwards.
pub(crate) fn record_scalar(
    x: &Tensor,
    op: ScalarOp,
    s: f32,
    wrapped: bool,
    out: Tensor,
) -> Tensor {
    record(out, &[x], |out| {
        let keep_x = matches!(op, ScalarOp::Max | ScalarOp::Min | ScalarOp::Pow);
        let kept = match op {
            ScalarOp::RDiv => Some(out.detach()),
            _ => keep_x.then(|| x.detach()),
        };
        Box::new(ScalarBackward {
            op,
            s,
            x: kept,
            wrapped,
        })
    })
}

struct ToDtypeBackward {
    from: DType,
}

impl BackwardOp for ToDtypeBackward {
    fn saved(&self) -> Vec<&Tensor> {
        Vec::new()
    }

    fn name(&self) -> &'static str {
        "to_dtype"
    }

    fn backward(&self, grads: &[Option<Tensor>], _needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        Ok(vec![match first(grads) {
            Some(g) => Some(g.to_dtype(self.from)?),
            None => None,
        }])
    }
}

/// Records `out = x.to_dtype(_)`: the gradient converts back.
pub(crate) fn record_to_dtype(x: &Tensor, out: Tensor) -> Tensor {
    record(out, &[x], |_| Box::new(ToDtypeBackward { from: x.dtype }))
}
