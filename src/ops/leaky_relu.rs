//! PyTorch's `F.leaky_relu(x, negative_slope)` with its own backward (leaky_relu_backward),
//! so that an infinite slope, which PyTorch computes with, leaves the gradient of `x > 0`
//! finite (a select's backward would multiply the untaken branch's 0 by the slope).

use crate::autograd::{record, BackwardOp, NoGradGuard};
use crate::ops::grad_kernel::{grad_binary, GradCode};
use crate::{DType, Result, Tensor};

/// PyTorch's `F.leaky_relu(x, negative_slope)`: `x` where `x > 0`, else `x * negative_slope`
/// (so NaN stays NaN, and `0 * inf` is NaN, as PyTorch's kernel), the gradient `g` where
/// `x > 0`, else `g * negative_slope` (leaky_relu_backward). f16 computes in f32 and rounds
/// once. Errors for an integer tensor and for a finite slope past f32's range (PyTorch's
/// checked conversion: infinities and NaN pass).
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::ops::leaky_relu;
/// use wgtensor::{Device, Tensor};
/// let dev = Device::new()?;
/// let x = Tensor::from_slice(&dev, &[2.0f32, -1.0, 0.0], &[3])?.requires_grad()?;
/// let y = leaky_relu(&x, 0.01)?;
/// assert_eq!(y.to_vec::<f32>()?, vec![2.0, -0.01, 0.0]);
/// let g = y.sum_all()?.backward()?;
/// assert_eq!(g.get(&x).unwrap().to_vec::<f32>()?, vec![1.0, 0.01, 0.01]);
/// # Ok(()) }
/// ```
pub fn leaky_relu(x: &Tensor, negative_slope: f64) -> Result<Tensor> {
    leaky_relu_as("leaky_relu", x, negative_slope)
}

/// [`leaky_relu`] with its errors under `op` (`nn::LeakyReLU` names the layer).
pub(crate) fn leaky_relu_as(op: &'static str, x: &Tensor, negative_slope: f64) -> Result<Tensor> {
    x.require_float(op)?;
    crate::tensor::check_fill(op, negative_slope, DType::F32)?;
    let y = {
        let _guard = NoGradGuard::new();
        // A select, not relu(x) + slope * (x - relu(x)), which is NaN at +inf; a NaN input
        // fails `x > 0` and comes out as slope * NaN = NaN, as in PyTorch.
        x.gt_scalar(0.0)?
            .where_cond(x, &x.mul_scalar(negative_slope)?)?
    };
    Ok(record(y, &[x], |_| {
        Box::new(LeakyReluBackward {
            x: x.detach(),
            slope: negative_slope as f32,
        })
    }))
}

/// leaky_relu_backward: `g` where `x > 0`, else `g * slope` (NaN x included).
struct LeakyReluBackward {
    x: Tensor,
    slope: f32,
}

impl BackwardOp for LeakyReluBackward {
    fn name(&self) -> &'static str {
        "leaky_relu"
    }

    fn saved(&self) -> Vec<&Tensor> {
        vec![&self.x]
    }

    fn backward(&self, grads: &[Option<Tensor>], _needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = grads.first().and_then(Option::as_ref) else {
            return Ok(vec![None]);
        };
        let gx = grad_binary(g, &self.x, GradCode::LeakyFromX, self.slope)?;
        Ok(vec![Some(gx)])
    }
}
