//! Gradient clipping by the joint L2 norm or by value, composed from existing ops.

use crate::ops::map::ScalarOp;
use crate::{Error, Result, Tensor};

/// Scales `grads` so that their joint L2 norm is at most `max_norm` (PyTorch's
/// `clip_grad_norm_`: coefficient `max_norm / (total_norm + 1e-6)` clamped to 1), entirely on
/// the device. Returns the new gradients and the total norm before clipping (a `[]` tensor of
/// the gradients' promoted dtype, as PyTorch's: f16 for f16 gradients). Each gradient's norm is
/// summed in f32 and rounded to its dtype, as PyTorch's per-tensor norms are: an f16 gradient
/// whose norm passes 65504 makes the total inf and the coefficient 0, zeroing the gradients as
/// PyTorch does without `error_if_nonfinite`. The coefficient is formed as PyTorch's
/// `max_norm / t` is, `reciprocal(t) * max_norm` (two roundings: in f16 the reciprocal of a
/// norm below about 1.5e-5 is inf). `max_norm` is not checked, as in PyTorch: `f64::INFINITY`
/// measures the norm alone, a negative one flips the gradients' sign and NaN makes them NaN.
/// The list must not be empty (the norm tensor needs a device).
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// use wgtensor::optim::clip_grad_norm;
/// let g = Tensor::from_slice(&dev, &[3.0f32, 4.0], &[2])?; // norm 5
/// let (clipped, norm) = clip_grad_norm(&[&g], 1.0)?;
/// assert_eq!(norm.to_vec::<f32>()?, vec![5.0]);
/// let c = clipped[0].to_vec::<f32>()?;
/// assert!((c[0] - 0.6).abs() < 1e-5 && (c[1] - 0.8).abs() < 1e-5);
/// # Ok(()) }
/// ```
pub fn clip_grad_norm(grads: &[&Tensor], max_norm: f64) -> Result<(Vec<Tensor>, Tensor)> {
    let op = "clip_grad_norm";
    let Some(first) = grads.first() else {
        return Err(Error::arg(op, "no gradients given"));
    };
    let f32_ = crate::DType::F32;
    let mut norms = Vec::with_capacity(grads.len());
    let mut dtype = first.dtype();
    for g in grads {
        first.same_device(op, g)?;
        if !g.dtype().is_float() {
            // The per-tensor norms come first, in vector_norm's words.
            return Err(Error::arg(
                op,
                "linalg.vector_norm: Expected a floating point or complex tensor as input. \
                 Got Int",
            ));
        }
        dtype = crate::dtype::promote(dtype, g.dtype());
        // Squares summed in f32 (no f16 overflow on the way), the norm rounded to the
        // gradient's dtype as PyTorch's per-tensor norms.
        // One element's norm is its magnitude, as PyTorch's vector_norm takes it (its sqrt of
        // a square would overflow from 1.8e19 and underflow below 1e-23).
        let flat = g.reshape(&[g.numel()])?.to_dtype(f32_)?;
        let mut n = if g.numel() == 1 {
            flat.abs()?.sum(0, false)?
        } else {
            flat.mul(&flat)?.sum(0, false)?.sqrt()?
        };
        if g.dtype() != f32_ {
            n = n.to_dtype(g.dtype())?.to_dtype(f32_)?;
        }
        norms.push(n);
    }
    // The norm of the per-tensor norms: one of them is that norm itself.
    let mut norm = match norms.as_slice() {
        [] => return Err(Error::arg(op, "no gradients given")),
        [n] => n.clone(),
        [n0, rest @ ..] => {
            let mut total = n0.mul(n0)?;
            for n in rest {
                total = total.add(&n.mul(n)?)?;
            }
            total.sqrt()?
        }
    };
    if dtype != f32_ {
        norm = norm.to_dtype(dtype)?;
    }
    // Tensor.__rtruediv__ is `reciprocal() * other`.
    let coef = norm
        .add_scalar(1e-6)?
        .scalar_op(ScalarOp::RDiv, 1.0)?
        .scalar_op(ScalarOp::Mul, max_norm)?
        .scalar_op(ScalarOp::Min, 1.0)?;
    let clipped = grads
        .iter()
        // The 0-d coefficient multiplies each gradient unrounded (an f32 one beside f16
        // gradients: `g.mul_(clip_coef_clamped)`), the product rounded once to g's dtype (a
        // 0-d f16 gradient times a 0-d f32 coefficient promotes: cast back, as mul_ writes).
        .map(|g| g.mul(&coef)?.to_dtype(g.dtype()))
        .collect::<Result<Vec<_>>>()?;
    Ok((clipped, norm))
}

/// Clamps every gradient element into `[-clip_value, clip_value]` (PyTorch's
/// `clip_grad_value_`), returning the new gradients; NaN stays NaN, and any `clip_value`
/// clamps as PyTorch's `clamp(-v, v)` would (a negative one gives `v` everywhere). A finite
/// `clip_value` past f32's range is PyTorch's overflow error (when there is a gradient).
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::{Device, Tensor};
/// use wgtensor::optim::clip_grad_value;
/// let dev = Device::new()?;
/// let g = Tensor::from_slice(&dev, &[3.0f32, -0.5, -4.0], &[3])?;
/// let c = clip_grad_value(&[&g], 1.0)?;
/// assert_eq!(c[0].to_vec::<f32>()?, vec![1.0, -0.5, -1.0]);
/// # Ok(()) }
/// ```
pub fn clip_grad_value(grads: &[&Tensor], clip_value: f64) -> Result<Vec<Tensor>> {
    // The bounds as max / min scalars: a clip value past an f16 gradient's range clamps
    // nothing (as PyTorch's CUDA foreach clamp in float), where `clamp` would refuse the
    // bound as an overflow; past f32's range it is that overflow error (`to<float>`).
    if !grads.is_empty() {
        crate::tensor::check_fill("clip_grad_value", -clip_value, crate::DType::F32)?;
    }
    grads
        .iter()
        .map(|g| g.max_scalar_raw(-clip_value)?.min_scalar_raw(clip_value))
        .collect()
}
