//! PyTorch's `F.softplus(x, beta, threshold)` over the map kernel's [`UnaryOp::Softplus`]
//! (`log(1 + e^x)` without overflow, shaders/lib/activation.wgsl).

use crate::ops::UnaryOp;
use crate::{Error, Result, Tensor};

/// PyTorch's `F.softplus(x, beta, threshold)`: `log(1 + e^(beta x)) / beta`, and `x` itself
/// where `beta x > threshold` (PyTorch's defaults: `beta` 1, `threshold` 20). Its gradient is
/// `sigmoid(beta x)` below the threshold and 1 above, as softplus_backward's. NaN propagates.
/// Errors for a NaN `beta` or `threshold`.
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
    if beta.is_nan() || threshold.is_nan() {
        return Err(Error::arg(
            "softplus",
            format!("beta and threshold must be numbers, got beta {beta}, threshold {threshold}"),
        ));
    }
    // f16 with a beta scales in f32 and rounds once, as PyTorch's kernel computes beta x in
    // float (an f16 product would round before the threshold test and the formula).
    if beta != 1.0 && x.dtype() != crate::DType::F32 {
        return softplus(&x.to_dtype(crate::DType::F32)?, beta, threshold)?.to_dtype(x.dtype());
    }
    let (z, y) = if beta == 1.0 {
        (x.clone(), x.unary(UnaryOp::Softplus)?)
    } else {
        let z = x.mul_scalar(beta)?;
        let y = z.unary(UnaryOp::Softplus)?.div_scalar(beta)?;
        (z, y)
    };
    // Above the threshold PyTorch returns x, not the formula (NaN fails the test and keeps
    // the formula's NaN).
    z.gt_scalar(threshold)?.where_cond(x, &y)
}
