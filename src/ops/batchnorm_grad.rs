//! Backward of batch normalization (forward in src/ops/batchnorm.rs).
//!
//! Training: the fused `batch_norm_backward` kernel from the saved batch statistics gives dx,
//! dgamma and dbeta in three passes. Only `y` carries a gradient: the saved mean and inverse
//! std are returned untracked (PyTorch's `native_batch_norm` outputs them for backward, not to
//! differentiate through). Inference: the statistics are constants, so
//! `dx = dZ * gamma * invstd`, `dgamma = sum dZ * xhat`, `dbeta = sum dZ` per channel, with
//! `dZ = dY * act'(y)` (GELU runs unfused and records a separate `gelu`).

use crate::autograd::{is_grad_enabled, record, sum_to, BackwardOp, NoGradGuard};
use crate::ops::batchnorm::{
    batch_norm_backward, batch_norm_inference_untracked, batch_norm_train_untracked, BatchNormState,
};
use crate::ops::conv::activation_grad;
use crate::ops::gemm::Activation;
use crate::{DType, Error, Result, Tensor};

fn missing(op: &'static str) -> Error {
    Error::arg(op, "backward is missing a saved tensor")
}

struct TrainBackward {
    x: Tensor,
    mean: Tensor,
    invstd: Tensor,
    gamma: Option<Tensor>,
    has_beta: bool,
}

impl BackwardOp for TrainBackward {
    fn name(&self) -> &'static str {
        "batch_norm_train"
    }

    fn backward(&self, grads: &[Option<Tensor>], needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = grads.first().and_then(Option::as_ref) else {
            return Ok(vec![None; needs.len()]);
        };
        let (dx, dgamma, dbeta) =
            batch_norm_backward(g, &self.x, &self.mean, &self.invstd, self.gamma.as_ref())?;
        let mut out = vec![Some(dx)];
        if self.gamma.is_some() {
            out.push(Some(dgamma));
        }
        if self.has_beta {
            out.push(Some(dbeta));
        }
        Ok(out)
    }
}

/// [`crate::ops::batch_norm_train`], recorded.
pub(crate) fn train(
    x: &Tensor,
    gamma: Option<&Tensor>,
    beta: Option<&Tensor>,
    state: Option<&mut BatchNormState>,
    eps: f32,
) -> Result<(Tensor, Tensor, Tensor)> {
    let tracked = [Some(x), gamma, beta]
        .iter()
        .flatten()
        .any(|t| t.is_tracked());
    if !tracked || !is_grad_enabled() {
        return batch_norm_train_untracked(x, gamma, beta, state, eps);
    }
    let mut inputs = vec![x];
    inputs.extend(gamma);
    inputs.extend(beta);
    if let Some(st) = &state {
        if st.running_mean.is_tracked() || st.running_var.is_tracked() {
            return Err(Error::arg(
                "batch_norm_train",
                "the running statistics are updated in place and cannot be tracked by autograd",
            ));
        }
    }
    let (y, mean, invstd) = {
        let _guard = NoGradGuard::new();
        batch_norm_train_untracked(x, gamma, beta, state, eps)?
    };
    let y = record(y, &inputs, |_| {
        Box::new(TrainBackward {
            x: x.detach(),
            mean: mean.clone(),
            invstd: invstd.clone(),
            gamma: gamma.map(Tensor::detach),
            has_beta: beta.is_some(),
        })
    });
    Ok((y, mean, invstd))
}

struct InferenceBackward {
    /// `(x - running_mean) * invstd`, kept when gamma needs a gradient.
    xhat: Option<Tensor>,
    /// `gamma * invstd` (or `invstd`), `[1, C, 1, ...]`, kept when x needs a gradient.
    scale: Option<Tensor>,
    act: Activation,
    y: Option<Tensor>,
    x_shape: Vec<usize>,
    has_gamma: bool,
    has_beta: bool,
}

/// `[1, C, 1, ...]` of rank `rank`.
fn channel_shape(c: usize, rank: usize) -> Vec<usize> {
    let mut s = vec![1; rank];
    s[1] = c;
    s
}

impl BackwardOp for InferenceBackward {
    fn name(&self) -> &'static str {
        "batch_norm_inference"
    }

    fn backward(&self, grads: &[Option<Tensor>], needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let op = self.name();
        let Some(g) = grads.first().and_then(Option::as_ref) else {
            return Ok(vec![None; needs.len()]);
        };
        let gz = activation_grad(op, g, self.y.as_ref(), self.act)?;
        let c = self.x_shape[1];
        let cs = channel_shape(c, self.x_shape.len());
        let need = |i: usize| needs.get(i) == Some(&true);
        // Channel sums accumulate in f32 (as conv_backward_bias does for f16 inputs).
        let channel_sum = |t: &Tensor| -> Result<Tensor> {
            sum_to(&t.to_dtype(DType::F32)?, &cs)?
                .reshape(&[c])?
                .to_dtype(t.dtype())
        };
        let mut out = vec![if need(0) {
            Some(gz.mul(self.scale.as_ref().ok_or_else(|| missing(op))?)?)
        } else {
            None
        }];
        let mut i = 1;
        if self.has_gamma {
            out.push(if need(i) {
                let xhat = self.xhat.as_ref().ok_or_else(|| missing(op))?;
                Some(channel_sum(&gz.mul(xhat)?)?)
            } else {
                None
            });
            i += 1;
        }
        if self.has_beta {
            out.push(if need(i) {
                Some(channel_sum(&gz)?)
            } else {
                None
            });
        }
        Ok(out)
    }
}

/// [`crate::ops::batch_norm_inference`], recorded. The running statistics are constants: a
/// tracked one gets no gradient (as buffers in PyTorch).
pub(crate) fn inference(
    x: &Tensor,
    running_mean: &Tensor,
    running_var: &Tensor,
    gamma: Option<&Tensor>,
    beta: Option<&Tensor>,
    eps: f32,
    activation: Activation,
) -> Result<Tensor> {
    let tracked = [Some(x), gamma, beta]
        .iter()
        .flatten()
        .any(|t| t.is_tracked());
    if !tracked || !is_grad_enabled() {
        return batch_norm_inference_untracked(
            x,
            running_mean,
            running_var,
            gamma,
            beta,
            eps,
            activation,
        );
    }
    let mut inputs = vec![x];
    inputs.extend(gamma);
    inputs.extend(beta);
    let fused = if activation == Activation::Gelu {
        Activation::None
    } else {
        activation
    };
    let _guard = NoGradGuard::new();
    let y = batch_norm_inference_untracked(x, running_mean, running_var, gamma, beta, eps, fused)?;
    // The per-channel constants of the backward, computed once here (small [C] ops).
    let c = x.shape()[1];
    let cs = channel_shape(c, x.rank());
    let invstd = running_var
        .add_scalar(f64::from(eps))?
        .sqrt()?
        .scalar_op(crate::ops::ScalarOp::RDiv, 1.0)?
        .reshape(&cs)?;
    let scale = match gamma {
        Some(gm) => gm.reshape(&cs)?.mul(&invstd)?,
        None => invstd.clone(),
    };
    let xhat = match gamma {
        Some(gm) if gm.is_tracked() => {
            Some(x.sub(&running_mean.reshape(&cs)?)?.mul(&invstd)?.detach())
        }
        _ => None,
    };
    drop(_guard);
    let y = record(y, &inputs, |y| {
        Box::new(InferenceBackward {
            xhat,
            scale: x.is_tracked().then(|| scale.detach()),
            act: fused,
            y: (fused != Activation::None).then(|| y.clone()),
            x_shape: x.shape().to_vec(),
            has_gamma: gamma.is_some(),
            has_beta: beta.is_some(),
        })
    });
    if activation == Activation::Gelu {
        y.gelu()
    } else {
        Ok(y)
    }
}
