//! Backward of batch normalization for autograd (forward in launch.rs).
//!
//! Training: the fused `batch_norm_backward` kernel from the saved batch statistics gives dx,
//! dgamma and dbeta in three passes. Only `y` carries a gradient: the saved mean and inverse
//! std are returned untracked (PyTorch's `native_batch_norm` outputs them for backward, not to
//! differentiate through). Inference: the statistics are constants, so
//! `dx = dZ * gamma * invstd`, `dgamma = sum dZ * xhat`, `dbeta = sum dZ` per channel, with
//! `dZ = dY * act'(y)` (GELU runs unfused and records a separate `gelu`).

use super::launch::{backward_untracked, inference_untracked, train_untracked};
use super::types::{
    BatchNormGrads, BatchNormOptions, BatchNormOutput, BatchNormSaved, BatchNormState,
};
use crate::autograd::{record, records, sum_to, BackwardOp, NoGradGuard};
use crate::ops::activation::Activation;
use crate::ops::grad_kernel::activation_grad;
use crate::{DType, Error, Result, Tensor};

fn missing(op: &'static str) -> Error {
    Error::arg(op, "backward is missing a saved tensor")
}

struct TrainBackward {
    x: Tensor,
    saved: BatchNormSaved,
    gamma: Option<Tensor>,
    has_beta: bool,
}

impl BackwardOp for TrainBackward {
    fn saved(&self) -> Vec<&Tensor> {
        // act_input is the returned output itself (a fused activation's backward reads it),
        // so writing into that output after the forward must fail the version check too;
        // the mean and inverse std are returned as well (`BatchNormOutput::saved`), and
        // PyTorch's saved outputs are checked the same way.
        [&self.x, &self.saved.mean, &self.saved.invstd]
            .into_iter()
            .chain(&self.gamma)
            .chain(&self.saved.act_input)
            .collect()
    }

    fn name(&self) -> &'static str {
        "batch_norm_train"
    }

    fn backward(&self, grads: &[Option<Tensor>], needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = grads.first().and_then(Option::as_ref) else {
            return Ok(vec![None; needs.len()]);
        };
        let gr = batch_norm_backward(g, &self.x, self.gamma.as_ref(), &self.saved)?;
        let mut out = vec![Some(gr.dx)];
        if self.gamma.is_some() {
            out.push(Some(gr.dweight));
        }
        if self.has_beta {
            out.push(Some(gr.dbias));
        }
        Ok(out)
    }
}

/// `dy * act'`: the gradient before the forward's fused activation (`act_input` is its output,
/// or for GELU its input).
pub(crate) fn undo_activation(
    op: &'static str,
    dy: &Tensor,
    saved: &BatchNormSaved,
) -> Result<Tensor> {
    if saved.activation == Activation::None {
        return Ok(dy.clone());
    }
    let at = saved.act_input.as_ref().ok_or_else(|| missing(op))?;
    check_like(op, dy, at)?;
    activation_grad(op, dy, Some(at), saved.activation)
}

/// dy against the forward's output, before they meet in an elementwise kernel.
fn check_like(op: &'static str, dy: &Tensor, y: &Tensor) -> Result<()> {
    dy.same_device(op, y)?;
    dy.same_dtype(op, y)?;
    if dy.shape() != y.shape() {
        return Err(Error::shape(
            op,
            format!(
                "grad_output has shape {:?} but the forward's output has shape {:?}",
                dy.shape(),
                y.shape()
            ),
        ));
    }
    Ok(())
}

/// [`crate::ops::batch_norm_train`], recorded.
pub(crate) fn train(
    x: &Tensor,
    state: Option<&mut BatchNormState>,
    o: &BatchNormOptions,
) -> Result<BatchNormOutput> {
    let (gamma, beta) = (o.weight, o.bias);
    // The statistics are written in place: tracked ones are refused whatever the input, as
    // native_batch_norm's autograd layer checks them first (while grad mode is on).
    if let Some(st) = &state {
        use crate::ops::loss_options::no_requires_grad;
        let op = "batch_norm_train";
        no_requires_grad(
            op,
            "native_batch_norm",
            "running_mean",
            Some(&st.running_mean),
        )?;
        no_requires_grad(
            op,
            "native_batch_norm",
            "running_var",
            Some(&st.running_var),
        )?;
    }
    if !records([Some(x), gamma, beta].into_iter().flatten()) {
        return train_untracked(x, state, o);
    }
    let mut inputs = vec![x];
    inputs.extend(gamma);
    inputs.extend(beta);
    let out = {
        let _guard = NoGradGuard::new();
        train_untracked(x, state, o)?
    };
    let saved = out.saved;
    let y = record(out.y, &inputs, |_| {
        Box::new(TrainBackward {
            x: x.detach(),
            saved: saved.clone(),
            gamma: gamma.map(Tensor::detach),
            has_beta: beta.is_some(),
        })
    });
    Ok(BatchNormOutput { y, saved })
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
    /// The caller's input and weight, for the version check only (PyTorch's node saves them;
    /// the running statistics are left out: its training forward writes them without a
    /// version bump, ours with one).
    callers: Vec<Tensor>,
}

/// `[1, C, 1, ...]` of rank `rank`.
fn channel_shape(c: usize, rank: usize) -> Vec<usize> {
    let mut s = vec![1; rank];
    s[1] = c;
    s
}

impl BackwardOp for InferenceBackward {
    fn saved(&self) -> Vec<&Tensor> {
        [&self.xhat, &self.scale, &self.y]
            .into_iter()
            .flatten()
            .chain(&self.callers)
            .collect()
    }

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
        // Channel sums accumulate in f32 (as conv_backward_bias does for f16 inputs); the
        // constants are f32, so each f16 gradient is rounded once, as the forward's output.
        let dt = gz.dtype();
        let gz32 = gz.to_dtype(DType::F32)?;
        let channel_sum =
            |t: &Tensor| -> Result<Tensor> { sum_to(t, &cs)?.reshape(&[c])?.to_dtype(dt) };
        let mut out = vec![if need(0) {
            let scale = self.scale.as_ref().ok_or_else(|| missing(op))?;
            Some(gz32.mul(scale)?.to_dtype(dt)?)
        } else {
            None
        }];
        let mut i = 1;
        if self.has_gamma {
            out.push(if need(i) {
                let xhat = self.xhat.as_ref().ok_or_else(|| missing(op))?;
                Some(channel_sum(&gz32.mul(xhat)?)?)
            } else {
                None
            });
            i += 1;
        }
        if self.has_beta {
            out.push(if need(i) {
                Some(channel_sum(&gz32)?)
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
    o: &BatchNormOptions,
) -> Result<Tensor> {
    let (gamma, beta, eps, activation) = (o.weight, o.bias, o.eps, o.activation);
    if !records([Some(x), gamma, beta].into_iter().flatten()) {
        return inference_untracked(x, running_mean, running_var, o);
    }
    let mut inputs = vec![x];
    inputs.extend(gamma);
    inputs.extend(beta);
    let (fused, after) = activation.split_unfused();
    let _guard = NoGradGuard::new();
    let unfused = BatchNormOptions {
        activation: fused,
        ..*o
    };
    let y = inference_untracked(x, running_mean, running_var, &unfused)?;
    if x.numel() == 0 {
        // ATen's batch_norm for an empty input: `input.clone()`, times `weight[0]`, plus
        // `bias[0]`, so the (empty) result is tracked as those are, through their nodes.
        drop(_guard);
        let mut out = x.deep_clone()?;
        if let Some(g) = gamma {
            out = out.mul(&g.select(0, 0)?)?;
        }
        if let Some(b) = beta {
            out = out.add(&b.select(0, 0)?)?;
        }
        return out.to_dtype(y.dtype());
    }
    // The per-channel constants of the backward, computed once here (small [C] ops), in f32
    // as the forward kernel computes them (in f16, each step would round, and a variance
    // plus eps below f16's normal range would lose digits).
    let c = x.shape()[1];
    let cs = channel_shape(c, x.rank());
    let f32_of = |t: &Tensor| t.to_dtype(DType::F32);
    let invstd = f32_of(running_var)?
        .add_scalar(eps)?
        .sqrt()?
        .scalar_op(crate::ops::ScalarOp::RDiv, 1.0)?
        .reshape(&cs)?;
    let scale = match gamma {
        Some(gm) => f32_of(gm)?.reshape(&cs)?.mul(&invstd)?,
        None => invstd.clone(),
    };
    let xhat = match gamma {
        Some(gm) if gm.is_tracked() => Some(
            f32_of(x)?
                .sub(&f32_of(running_mean)?.reshape(&cs)?)?
                .mul(&invstd)?
                .detach(),
        ),
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
            callers: [Some(x), gamma]
                .into_iter()
                .flatten()
                .map(Tensor::detach)
                .collect(),
        })
    });
    after.apply(&y)
}

/// Backward of [`batch_norm_train`](super::batch_norm_train): from `dy` (the gradient of y), the
/// forward's input `x`, its `weight` and its saved statistics, returns dx, dweight and dbias.
/// With `dz = dy * act'` (the forward's fused activation, none by default) and
/// `xhat = (x - mean) * invstd`: `dweight = sum dz * xhat`, `dbias = sum dz` per channel and
/// `dx = weight * invstd * (dz - mean(dz) - xhat * mean(dz * xhat))`. One reduction pass over
/// (dz, x), a per-channel pass, and one elementwise pass.
///
/// PyTorch's `native_batch_norm_backward(grad_out, input, weight, ..., save_mean, save_invstd,
/// train=True, ...)`. Errors: [`Error::Shape`] when `dy` and `x` differ in shape or the
/// statistics are not `[C]`; [`Error::DType`] / [`Error::DeviceMismatch`] as for the forward;
/// [`Error::InvalidArgument`] when `dy` is the forward's input (x and dy swapped) or `x` is its
/// output.
///
/// ```no_run,ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::ops::{batch_norm_backward, batch_norm_train, BatchNormOptions};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let x = Tensor::full(&dev, &[8, 16, 32], 0.5, DType::F32)?; // [N, C, L]
/// let gamma = Tensor::full(&dev, &[16], 1.0, DType::F32)?;
/// let o = BatchNormOptions { weight: Some(&gamma), ..Default::default() };
/// let out = batch_norm_train(&x, None, &o)?;
/// let dy = Tensor::full(&dev, out.y.shape(), 1.0, DType::F32)?; // upstream gradient
/// let g = batch_norm_backward(&dy, &x, Some(&gamma), &out.saved)?;
/// assert_eq!((g.dx.shape(), g.dweight.shape(), g.dbias.shape()), (x.shape(), &[16][..], &[16][..]));
/// // Swapped arguments are caught.
/// assert!(batch_norm_backward(&x, &dy, Some(&gamma), &out.saved).is_err());
/// # Ok(()) }
/// ```
pub fn batch_norm_backward(
    dy: &Tensor,
    x: &Tensor,
    weight: Option<&Tensor>,
    saved: &BatchNormSaved,
) -> Result<BatchNormGrads> {
    let op = "batch_norm_backward";
    if let Some(input) = &saved.input {
        if input.is(dy) && !input.is(x) {
            return Err(Error::arg(
                op,
                "dy is the forward's input: x and dy look swapped (the order is dy, x, weight, saved)",
            ));
        }
    }
    if let Some(output) = &saved.output {
        if output.is(x) {
            return Err(Error::arg(
                op,
                "x is the forward's output y: pass the forward's input (the order is dy, x, weight, saved)",
            ));
        }
    }
    // As the forward ran (its flag), or for statistics from elsewhere an f16 x with an f32
    // weight.
    let mixed =
        x.dtype() == DType::F16 && (saved.mixed || weight.is_some_and(|w| w.dtype() == DType::F32));
    if mixed {
        // The arguments' dtypes first, as the plain path checks them: dy as x, a float weight.
        x.check_grad_output(op, dy)?;
        if let Some(w) = weight.filter(|w| !w.dtype().is_float()) {
            return Err(Error::DType {
                op,
                expected: DType::F32,
                got: w.dtype(),
            });
        }
        // PyTorch's mixed type, as the forward ran it: in f32, dx back in x's dtype, the
        // parameters' gradients in f32 (the forward's parameters were f32 or cast up; an f16
        // weight's, and its bias's, come back in f16, as empty_like(weight)).
        let (dy32, x32) = (dy.to_dtype(DType::F32)?, x.to_dtype(DType::F32)?);
        let w32 = weight.map(|w| w.to_dtype(DType::F32)).transpose()?;
        let dz = undo_activation(op, &dy32, saved)?;
        let (dx, dweight, dbias) =
            backward_untracked(&dz, &x32, &saved.mean, &saved.invstd, w32.as_ref())?;
        let (dweight, dbias) = match weight {
            Some(w) if w.dtype() != DType::F32 => {
                (dweight.to_dtype(w.dtype())?, dbias.to_dtype(w.dtype())?)
            }
            _ => (dweight, dbias),
        };
        return Ok(BatchNormGrads {
            dx: dx.to_dtype(x.dtype())?,
            dweight,
            dbias,
        });
    }
    let dz = undo_activation(op, dy, saved)?;
    let (dx, dweight, dbias) = backward_untracked(&dz, x, &saved.mean, &saved.invstd, weight)?;
    Ok(BatchNormGrads { dx, dweight, dbias })
}
