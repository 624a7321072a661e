//! PyTorch's `F.softplus(x, beta, threshold)` over the map kernel's [`UnaryOp::Softplus`]
//! (`log(1 + e^x)` without overflow, shaders/lib/activation.wgsl), with its own backward.

use crate::autograd::{record, BackwardOp, NoGradGuard};
use crate::ops::UnaryOp;
use crate::{DType, Result, Tensor};

/// PyTorch's `F.softplus(x, beta, threshold)`: `log(1 + e^(beta x)) / beta`, and `x` itself
/// where `beta x > threshold` (PyTorch's defaults: `beta` 1, `threshold` 20). Its gradient is
/// `sigmoid(beta x)` below the threshold and 1 above, as softplus_backward's (so `beta` 0
/// gives half the gradient, not NaN). f16 computes in f32 and rounds once, the threshold test
/// included, as PyTorch's kernel. NaN propagates (a NaN `beta` gives NaN everywhere, a NaN
/// `threshold` the formula everywhere, as PyTorch's kernel). A threshold above about 88.7 lets
/// PyTorch's `exp(beta x)` overflow, giving inf (and a NaN gradient) for `beta x` between 88.7
/// and the threshold; here the formula stays finite there (`beta x` plus a vanishing term).
/// Errors for an integer tensor and for a finite `beta` or `threshold` past f32's range
/// (PyTorch's checked conversion).
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::ops::softplus;
/// use wgtensor::{Device, Tensor};
/// let dev = Device::new()?;
/// let x = Tensor::from_slice(&dev, &[-30.0f32, 0.0, 30.0], &[3])?;
/// let y = softplus(&x, 1.0, 20.0)?.to_vec::<f32>()?;
/// assert!((y[0] - (-30f32).exp()).abs() < 1e-18); // no log(1 + tiny) rounding to 0
/// assert!((y[1] - 2f32.ln()).abs() < 1e-7);
/// assert_eq!(y[2], 30.0);
/// # Ok(()) }
/// ```
pub fn softplus(x: &Tensor, beta: f64, threshold: f64) -> Result<Tensor> {
    let op = "softplus";
    x.require_float(op)?;
    // PyTorch converts both to the f32 computation type, checked ("value cannot be converted
    // to type float without overflow").
    crate::tensor::check_fill(op, beta, DType::F32)?;
    crate::tensor::check_fill(op, threshold, DType::F32)?;
    // A NaN beta or threshold computes as PyTorch's kernel: NaN everywhere for beta (so its
    // gradient), never above a NaN threshold (the comparison fails).
    // f16 in f32, rounded once: PyTorch's kernel computes `beta x`, the threshold test and the
    // formula in float (in f16 the product would round first, and the threshold would be
    // compared as f16(threshold), which passes an x equal to f16(0.3) as below 0.3).
    // The node saves the caller's tensor (PyTorch's saves `self`), so an in-place write to an
    // f16 input before the backward is caught too.
    let y = {
        let _guard = NoGradGuard::new();
        let xf = x.to_dtype(DType::F32)?;
        let z = if beta == 1.0 {
            xf.clone()
        } else {
            xf.mul_scalar(beta)?
        };
        let s = z.unary(UnaryOp::Softplus)?;
        let y = if beta == 1.0 { s } else { s.div_scalar(beta)? };
        // Above the threshold PyTorch returns x, not the formula (NaN fails the test and keeps
        // the formula's NaN).
        z.gt_scalar(threshold)?
            .where_cond(&xf, &y)?
            .to_dtype(x.dtype())?
    };
    Ok(record(y, &[x], |_| {
        Box::new(SoftplusBackward {
            x: x.detach(),
            beta,
            threshold,
        })
    }))
}

/// PyTorch's softplus_backward: `g` where `beta x > threshold`, else `g sigmoid(beta x)`
/// (its `g z / (z + 1)` with `z = e^(beta x)`, without the overflow to inf / inf): no division
/// by `beta`, which a composed `softplus(beta x) / beta` backward takes (NaN at `beta` 0).
struct SoftplusBackward {
    x: Tensor,
    beta: f64,
    threshold: f64,
}

impl BackwardOp for SoftplusBackward {
    fn name(&self) -> &'static str {
        "softplus"
    }

    fn saved(&self) -> Vec<&Tensor> {
        vec![&self.x]
    }

    fn backward(&self, grads: &[Option<Tensor>], _needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = grads.first().and_then(Option::as_ref) else {
            return Ok(vec![None]);
        };
        // f16 in f32, rounded once (PyTorch's half kernel computes in float).
        let (x, gf) = (self.x.to_dtype(DType::F32)?, g.to_dtype(DType::F32)?);
        let z = if self.beta == 1.0 {
            x
        } else {
            x.mul_scalar(self.beta)?
        };
        let below = gf.mul(&z.sigmoid()?)?;
        let dx = z.gt_scalar(self.threshold)?.where_cond(&gf, &below)?;
        Ok(vec![Some(dx.to_dtype(g.dtype())?)])
    }
}
