//! PyTorch's clipping activations with their own gradients: `hardtanh` (and `relu6`, its
//! `[0, 6]` case), `hardsigmoid` and `hardswish`. Their values are [`Tensor::clamp`]'s (times
//! x for hardswish), but clamp's gradient is 0 at NaN (hardtanh's passes) and tests the rounded
//! `x + 3`, where these test x itself, so they record one node of their own.

use crate::autograd::{record, BackwardOp, NoGradGuard};
use crate::ops::grad_kernel::{grad_binary, GradCode};
use crate::{DType, Error, Result, Tensor};

/// The backward of both: `g` where `lo < x < hi`, 0 elsewhere, with hardtanh's NaN rule
/// (passes) or hardsigmoid's (0, and the slope 1/6 inside).
struct ClipBackward {
    x: Tensor,
    lo: f32,
    hi: f32,
    hardsigmoid: bool,
}

impl BackwardOp for ClipBackward {
    fn name(&self) -> &'static str {
        if self.hardsigmoid {
            "hardsigmoid"
        } else {
            "hardtanh"
        }
    }

    fn backward(&self, grads: &[Option<Tensor>], _needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = grads.first().and_then(Option::as_ref) else {
            return Ok(vec![None]);
        };
        let (above, below) = if self.hardsigmoid {
            (GradCode::PassAbove, GradCode::PassBelow)
        } else {
            (GradCode::PassAboveOrNan, GradCode::PassBelowOrNan)
        };
        let g = grad_binary(g, &self.x, above, self.lo)?;
        let g = grad_binary(&g, &self.x, below, self.hi)?;
        Ok(vec![Some(if self.hardsigmoid {
            g.mul_scalar(1.0 / 6.0)?
        } else {
            g
        })])
    }

    fn saved(&self) -> Vec<&Tensor> {
        vec![&self.x]
    }
}

/// PyTorch's hardswish_backward: 0 up to -3, `g * (x / 3 + 0.5)` below 3, `g` from 3 on; NaN
/// at NaN, as its vectorized CPU kernel (its scalar and CUDA kernels pass `g` there).
struct HardswishBackward {
    x: Tensor,
}

impl BackwardOp for HardswishBackward {
    fn name(&self) -> &'static str {
        "hardswish"
    }

    fn backward(&self, grads: &[Option<Tensor>], _needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = grads.first().and_then(Option::as_ref) else {
            return Ok(vec![None]);
        };
        let gx = grad_binary(g, &self.x, GradCode::HardswishFromX, 0.0)?;
        Ok(vec![Some(gx)])
    }

    fn saved(&self) -> Vec<&Tensor> {
        vec![&self.x]
    }
}

/// PyTorch's `F.hardswish`: `x * relu6(x + 3) / 6`, its gradient hardswish_backward's: 0 up to
/// -3, `x / 3 + 1/2` between -3 and 3 (both excluded), 1 from 3 on, NaN at NaN (the kernels
/// since pytorch/pytorch#148049; before, -0.5 at -3 and 1.5 at 3). The masks test x
/// itself: just below 3, `x + 3` rounds to 6, where a clamp's gradient would give 1, not
/// `x / 3 + 1/2`. The
/// value is PyTorch's `x * min(max(x + 3, 0), 6) / 6` in that order, in f32 for f16 too (one
/// rounding, as its kernels).
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::ops::hardswish;
/// use wgtensor::{Device, Tensor};
/// let dev = Device::new()?;
/// let x = Tensor::from_slice(&dev, &[-4.0f32, 0.0, 3.0, 4.0], &[4])?.requires_grad()?;
/// let y = hardswish(&x)?;
/// assert_eq!(y.to_vec::<f32>()?, vec![-0.0, 0.0, 3.0, 4.0]);
/// let g = y.sum_all()?.backward()?;
/// assert_eq!(g.get(&x).unwrap().to_vec::<f32>()?, vec![0.0, 0.5, 1.0, 1.0]);
/// # Ok(()) }
/// ```
pub fn hardswish(x: &Tensor) -> Result<Tensor> {
    x.require_float("hardswish")?;
    let y = {
        let _guard = NoGradGuard::new();
        let xf = x.to_dtype(DType::F32)?;
        let relu6 = xf.add_scalar(3.0)?.clamp(Some(0.0), Some(6.0))?;
        xf.mul(&relu6)?.div_scalar(6.0)?.to_dtype(x.dtype())?
    };
    Ok(record(y, &[x], |_| {
        Box::new(HardswishBackward { x: x.detach() })
    }))
}

/// `y`, computed from `x` untracked, recorded with [`ClipBackward`]'s masks over `(lo, hi)`.
fn record_clip(x: &Tensor, y: Tensor, lo: f64, hi: f64, hardsigmoid: bool) -> Tensor {
    record(y, &[x], |_| {
        Box::new(ClipBackward {
            x: x.detach(),
            lo: lo as f32,
            hi: hi as f32,
            hardsigmoid,
        })
    })
}

/// `x` clamped to `[lo, hi]`, recorded with the gradient masks of hardtanh's rule.
fn clip(x: &Tensor, lo: f64, hi: f64) -> Result<Tensor> {
    let y = {
        let _guard = NoGradGuard::new();
        x.clamp(Some(lo), Some(hi))?
    };
    Ok(record_clip(x, y, lo, hi, false))
}

/// PyTorch's `F.hardtanh(x, min_val, max_val)`: `x` clamped to `[min_val, max_val]`, the
/// gradient passing strictly inside (and at NaN), 0 at and past the bounds. Errors when
/// `min_val` is above `max_val` (equal bounds give `min_val` everywhere); a NaN bound gives
/// NaN everywhere, as PyTorch's clamp.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::ops::hardtanh;
/// use wgtensor::{Device, Tensor};
/// let dev = Device::new()?;
/// let x = Tensor::from_slice(&dev, &[-2.0f32, -1.0, 0.5, 3.0], &[4])?.requires_grad()?;
/// let y = hardtanh(&x, -1.0, 1.0)?;
/// assert_eq!(y.to_vec::<f32>()?, vec![-1.0, -1.0, 0.5, 1.0]);
/// let g = y.sum_all()?.backward()?;
/// assert_eq!(g.get(&x).unwrap().to_vec::<f32>()?, vec![0.0, 0.0, 1.0, 0.0]);
/// # Ok(()) }
/// ```
pub fn hardtanh(x: &Tensor, min_val: f64, max_val: f64) -> Result<Tensor> {
    // F.hardtanh refuses only min_val > max_val (equal bounds give min_val everywhere, a 0
    // gradient); nn::Hardtanh's constructor asserts max_val > min_val.
    if min_val.is_nan() || max_val.is_nan() {
        // Not refused by F.hardtanh's check: its clamp makes every element NaN, and
        // hardtanh_backward's `x <= min || x >= max` (its CUDA and scalar CPU kernels; the
        // vectorized CPU one gives 0) still passes g where the other bound allows, every
        // comparison with NaN being false. The masks take the NaN bound as an infinite one
        // (the shader then compares no NaN, which compilers may assume away), which differs
        // only at x = that infinity.
        x.require_float("hardtanh")?;
        let y = {
            let _guard = NoGradGuard::new();
            x.clamp(Some(min_val), Some(max_val))?
        };
        let or = |b: f64, inf: f64| if b.is_nan() { inf } else { b };
        let (lo, hi) = (or(min_val, f64::NEG_INFINITY), or(max_val, f64::INFINITY));
        return Ok(record_clip(x, y, lo, hi, false));
    }
    if min_val > max_val {
        return Err(Error::arg(
            "hardtanh",
            format!(
                "min_val cannot be greater than max_val (min_val {min_val}, max_val {max_val})"
            ),
        ));
    }
    x.require_float("hardtanh")?;
    // The bounds' conversion, named for this op (clamp would name itself).
    for b in [min_val, max_val] {
        crate::error::check_fill("hardtanh", b, x.dtype())?;
    }
    clip(x, min_val, max_val)
}

/// PyTorch's `F.relu6`: [`hardtanh`] over `[0, 6]`.
pub fn relu6(x: &Tensor) -> Result<Tensor> {
    x.require_float("relu6")?;
    clip(x, 0.0, 6.0)
}

/// PyTorch's `F.hardsigmoid`: `relu6(x + 3) / 6` (in f32 for f16 too, one rounding, as its
/// kernels), the gradient `1/6` where `-3 < x < 3` and 0 elsewhere (NaN included), as
/// PyTorch's hardsigmoid_backward.
pub fn hardsigmoid(x: &Tensor) -> Result<Tensor> {
    x.require_float("hardsigmoid")?;
    let y = {
        let _guard = NoGradGuard::new();
        x.to_dtype(DType::F32)?
            .add_scalar(3.0)?
            .clamp(Some(0.0), Some(6.0))?
            .div_scalar(6.0)?
            .to_dtype(x.dtype())?
    };
    // The masks test x itself against -3 and 3 (x + 3 rounds to 6 just below x = 3).
    Ok(record_clip(x, y, -3.0, 3.0, true))
}
