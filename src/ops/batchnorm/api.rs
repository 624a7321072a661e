//! The public batch-norm API: options, running state, typed results and the three entry points
//! (the kernels' launches are in launch.rs, autograd's records in grad.rs).

use std::sync::{Arc, Weak};

use super::{grad, launch};
use crate::ops::activation::Activation;
use crate::runtime::Storage;
use crate::{DType, Device, Error, Layout, Result, Tensor};

/// Options shared by [`batch_norm_inference`] and [`batch_norm_train`] (PyTorch's
/// `F.batch_norm` keyword arguments, plus a fused activation).
///
/// ```
/// use wgtensor::ops::{Activation, BatchNormOptions};
/// let o = BatchNormOptions { activation: Activation::Relu, ..Default::default() };
/// assert_eq!(o.eps, 1e-5);
/// assert!(o.weight.is_none() && o.bias.is_none());
/// ```
#[derive(Debug, Clone, Copy)]
pub struct BatchNormOptions<'a> {
    /// `[C]` scale (gamma), PyTorch's `weight`; `None` scales by 1. The input's dtype.
    pub weight: Option<&'a Tensor>,
    /// `[C]` shift (beta), PyTorch's `bias`; `None` adds 0. The input's dtype.
    pub bias: Option<&'a Tensor>,
    /// Added to the variance before the square root (PyTorch's default 1e-5); finite and >= 0.
    /// The kernels compute in f32, so it is rounded to f32.
    pub eps: f64,
    /// Applied to the normalized result in the same pass (no extra read and write of y).
    pub activation: Activation,
}

impl Default for BatchNormOptions<'_> {
    fn default() -> Self {
        BatchNormOptions {
            weight: None,
            bias: None,
            eps: 1e-5,
            activation: Activation::None,
        }
    }
}

/// Running statistics of a batch-norm layer (PyTorch's `running_mean`, `running_var`,
/// `momentum` and `num_batches_tracked`), updated in place on the GPU by [`batch_norm_train`].
///
/// The tensors are shared handles: a clone of a tensor held elsewhere sees the updates.
///
/// ```no_run,ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::ops::BatchNormState;
/// use wgtensor::{DType, Device};
/// let dev = Device::new()?;
/// let state = BatchNormState::new(&dev, 16, DType::F32)?;
/// assert_eq!((state.momentum, state.num_batches_tracked), (Some(0.1), 0));
/// assert_eq!(state.running_var.to_vec::<f32>()?, vec![1.0; 16]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct BatchNormState {
    /// `[C]`, the input's dtype.
    pub running_mean: Tensor,
    /// `[C]`, the input's dtype.
    pub running_var: Tensor,
    /// Weight of the batch statistic in the exponential moving average; `None` is PyTorch's
    /// `momentum=None`: a cumulative moving average with factor `1 / num_batches_tracked`.
    pub momentum: Option<f64>,
    /// Training batches folded into the running statistics so far.
    pub num_batches_tracked: u64,
}

impl BatchNormState {
    /// PyTorch's initial state: mean 0, variance 1, momentum 0.1, no batches tracked.
    pub fn new(device: &Device, channels: usize, dtype: DType) -> Result<BatchNormState> {
        Ok(BatchNormState {
            running_mean: Tensor::zeros(device, &[channels], dtype)?,
            running_var: Tensor::full(device, &[channels], 1.0, dtype)?,
            momentum: Some(0.1),
            num_batches_tracked: 0,
        })
    }

    /// Wraps existing running statistics (no batches tracked yet).
    pub fn from_tensors(
        running_mean: Tensor,
        running_var: Tensor,
        momentum: Option<f64>,
    ) -> BatchNormState {
        BatchNormState {
            running_mean,
            running_var,
            momentum,
            num_batches_tracked: 0,
        }
    }
}

/// Which tensor (storage and view) an argument was, without keeping it alive: the backward
/// compares its arguments against the forward's to catch swapped ones.
#[derive(Debug, Clone)]
pub(crate) struct ViewId {
    storage: Weak<Storage>,
    layout: Layout,
}

impl ViewId {
    pub(crate) fn of(t: &Tensor) -> ViewId {
        ViewId {
            storage: Arc::downgrade(&t.storage),
            layout: t.layout.clone(),
        }
    }

    /// Whether `t` is this very view. The weak handle keeps the allocation's address from
    /// being reused while it lives, so an equal address is the same storage.
    fn is(&self, t: &Tensor) -> bool {
        std::ptr::eq(self.storage.as_ptr(), Arc::as_ptr(&t.storage)) && self.layout == t.layout
    }
}

/// The statistics [`batch_norm_train`] saves for [`batch_norm_backward`] (PyTorch's
/// `save_mean` and `save_invstd`), with what the backward needs to undo a fused activation.
///
/// Built by [`batch_norm_train`], or by [`BatchNormSaved::new`] from statistics computed
/// elsewhere. The mean and inverse std cannot be passed in the wrong order, and the backward
/// refuses an `x` / `dy` pair that is the forward's input passed as `dy`, or its output passed
/// as `x`.
#[derive(Debug, Clone)]
pub struct BatchNormSaved {
    pub(crate) mean: Tensor,
    pub(crate) invstd: Tensor,
    pub(crate) activation: Activation,
    /// What the activation's derivative is taken from: y for ReLU, sigmoid and tanh, the
    /// pre-activation for GELU.
    pub(crate) act_input: Option<Tensor>,
    pub(crate) input: Option<ViewId>,
    pub(crate) output: Option<ViewId>,
}

impl BatchNormSaved {
    /// Saved statistics from elsewhere (no activation): `mean` and `invstd = 1 / sqrt(var +
    /// eps)`, both `[C]` f32. Errors: [`Error::DType`] for another dtype, [`Error::Shape`] when
    /// they are not 1-D of equal length, [`Error::DeviceMismatch`] across devices.
    pub fn new(mean: Tensor, invstd: Tensor) -> Result<BatchNormSaved> {
        let op = "BatchNormSaved::new";
        mean.same_device(op, &invstd)?;
        for t in [&mean, &invstd] {
            if t.dtype() != DType::F32 {
                return Err(Error::DType {
                    op,
                    expected: DType::F32,
                    got: t.dtype(),
                });
            }
        }
        if mean.rank() != 1 || mean.shape() != invstd.shape() {
            return Err(Error::shape(
                op,
                format!(
                    "mean and invstd must both be [C], got {:?} and {:?}",
                    mean.shape(),
                    invstd.shape()
                ),
            ));
        }
        Ok(BatchNormSaved {
            mean,
            invstd,
            activation: Activation::None,
            act_input: None,
            input: None,
            output: None,
        })
    }

    /// `[C]` f32: the batch mean of each channel.
    pub fn mean(&self) -> &Tensor {
        &self.mean
    }

    /// `[C]` f32: `1 / sqrt(biased batch variance + eps)` of each channel.
    pub fn invstd(&self) -> &Tensor {
        &self.invstd
    }

    /// The activation the forward fused (the backward applies its derivative first).
    pub fn activation(&self) -> Activation {
        self.activation
    }
}

/// What [`batch_norm_train`] returns: the output and the statistics for the backward.
#[derive(Debug, Clone)]
pub struct BatchNormOutput {
    /// The normalized (and activated) input: x's shape and dtype.
    pub y: Tensor,
    /// The batch statistics, for [`batch_norm_backward`].
    pub saved: BatchNormSaved,
}

/// What [`batch_norm_backward`] returns (PyTorch's `grad_input`, `grad_weight`, `grad_bias`).
#[derive(Debug, Clone)]
pub struct BatchNormGrads {
    /// The gradient of x: x's shape and dtype.
    pub dx: Tensor,
    /// `[C]`, x's dtype: `sum dz * xhat` per channel (also when the forward had no weight,
    /// which is the gradient of a weight of ones).
    pub dweight: Tensor,
    /// `[C]`, x's dtype: `sum dz` per channel.
    pub dbias: Tensor,
}

/// Inference: `act((x - running_mean) / sqrt(running_var + eps) * weight + bias)` per channel,
/// in one pass (the per-channel scale and shift are folded in each workgroup).
///
/// PyTorch's `BatchNorm{1,2,3}d` in `eval()` mode (`F.batch_norm(x, running_mean,
/// running_var, weight, bias, training=False, eps=eps)`), with a fused activation. Returns a
/// new contiguous tensor of x's shape and dtype. Differentiable (autograd) in x, weight and
/// bias. Errors: [`Error::Shape`] for an input of rank below 2 or per-channel vectors that are
/// not `[C]`; [`Error::DType`] / [`Error::DeviceMismatch`] when they differ from x;
/// [`Error::InvalidArgument`] for a negative or non-finite `eps`.
///
/// ```no_run,ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::ops::{batch_norm_inference, Activation, BatchNormOptions, BatchNormState};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let state = BatchNormState::new(&dev, 16, DType::F32)?; // or trained statistics
/// let x = Tensor::full(&dev, &[4, 16, 8, 8], 2.0, DType::F32)?;
/// // bn followed by relu, one pass
/// let o = BatchNormOptions { activation: Activation::Relu, ..Default::default() };
/// let y = batch_norm_inference(&x, &state.running_mean, &state.running_var, &o)?;
/// assert_eq!(y.shape(), x.shape());
/// # Ok(()) }
/// ```
pub fn batch_norm_inference(
    x: &Tensor,
    running_mean: &Tensor,
    running_var: &Tensor,
    options: &BatchNormOptions,
) -> Result<Tensor> {
    grad::inference(x, running_mean, running_var, options)
}

/// Training forward: normalizes with the batch statistics of each channel (mean and biased
/// variance over N and the trailing dims), applies weight, bias and the activation, and returns
/// the output with the saved statistics (PyTorch's `native_batch_norm`; the saved mean and
/// `invstd = 1 / sqrt(var + eps)` are `[C]` f32).
///
/// With a `state`, its running statistics are updated in place on the GPU exactly as PyTorch's
/// `BatchNorm` module does: `num_batches_tracked += 1`, factor = `momentum` or, for
/// `momentum: None`, `1 / num_batches_tracked`, and
/// `running = (1 - factor) * running + factor * batch_stat` with the unbiased variance
/// `var * n / (n - 1)`. The state is left untouched when the call returns an error.
///
/// Differentiable (autograd) in x, weight and bias. Results are bitwise identical from run to
/// run (fixed-order merges of the partial statistics). Errors as [`batch_norm_inference`], plus
/// [`Error::Shape`] for a single value per channel (no variance to estimate; PyTorch refuses it
/// too), and [`Error::InvalidArgument`] for a non-finite momentum or running statistics that
/// overlap each other or an input (they are written in place).
///
/// ```no_run,ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::ops::{batch_norm_train, Activation, BatchNormOptions, BatchNormState};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let gamma = Tensor::full(&dev, &[16], 1.0, DType::F32)?;
/// let beta = Tensor::zeros(&dev, &[16], DType::F32)?;
/// let o = BatchNormOptions {
///     weight: Some(&gamma),
///     bias: Some(&beta),
///     activation: Activation::Relu,
///     ..Default::default()
/// };
/// let mut state = BatchNormState::new(&dev, 16, DType::F32)?;
/// for _ in 0..3 {
///     let x = Tensor::full(&dev, &[8, 16, 32, 32], 0.5, DType::F32)?;
///     let out = batch_norm_train(&x, Some(&mut state), &o)?;
///     assert_eq!((out.y.shape(), out.saved.mean().shape()), (x.shape(), &[16][..]));
/// }
/// assert_eq!(state.num_batches_tracked, 3);
/// # Ok(()) }
/// ```
pub fn batch_norm_train(
    x: &Tensor,
    state: Option<&mut BatchNormState>,
    options: &BatchNormOptions,
) -> Result<BatchNormOutput> {
    grad::train(x, state, options)
}

/// Backward of [`batch_norm_train`]: from `dy` (the gradient of y), the forward's input `x`,
/// its `weight` and its saved statistics, returns dx, dweight and dbias. With
/// `dz = dy * act'` (the forward's fused activation, none by default) and
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
    let dz = grad::undo_activation(op, dy, saved)?;
    let (dx, dweight, dbias) =
        launch::backward_untracked(&dz, x, &saved.mean, &saved.invstd, weight)?;
    Ok(BatchNormGrads { dx, dweight, dbias })
}
