//! The batch-norm types: options, running state and typed results (shared by the entry points
//! in api.rs, the launches in launch.rs and autograd's records in grad.rs).

use std::sync::{Arc, Weak};

use crate::ops::activation::Activation;
use crate::runtime::Storage;
use crate::{DType, Device, Error, Layout, Result, Tensor};

/// Options shared by [`batch_norm_inference`](super::batch_norm_inference) and
/// [`batch_norm_train`](super::batch_norm_train) (PyTorch's `F.batch_norm` keyword arguments, plus
/// a fused activation).
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
    /// Added to the variance before the square root (PyTorch's default 1e-5): positive in
    /// training, >= 0 with running statistics (F.batch_norm's rule; NaN and inf pass, as there).
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

/// Running statistics of a batch-norm layer (PyTorch's `running_mean`, `running_var`, `momentum`
/// and `num_batches_tracked`), updated in place on the GPU by
/// [`batch_norm_train`](super::batch_norm_train).
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
    pub(super) fn is(&self, t: &Tensor) -> bool {
        std::ptr::eq(self.storage.as_ptr(), Arc::as_ptr(&t.storage)) && self.layout == t.layout
    }
}

/// The statistics [`batch_norm_train`](super::batch_norm_train) saves for
/// [`batch_norm_backward`](super::batch_norm_backward) (PyTorch's `save_mean` and `save_invstd`),
/// with what the backward needs to undo a fused activation.
///
/// Built by [`batch_norm_train`](super::batch_norm_train), or by [`BatchNormSaved::new`] from
/// statistics computed elsewhere. The mean and inverse std cannot be passed in the wrong order, and
/// the backward refuses an `x` / `dy` pair that is the forward's input passed as `dy`, or its
/// output passed as `x`.
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
    /// The forward ran PyTorch's mixed type (an f16 x computed in f32): the backward does too.
    pub(crate) mixed: bool,
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
            mixed: false,
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

/// What [`batch_norm_train`](super::batch_norm_train) returns: the output and the statistics for
/// the backward.
#[derive(Debug, Clone)]
pub struct BatchNormOutput {
    /// The normalized (and activated) input: x's shape and dtype.
    pub y: Tensor,
    /// The batch statistics, for [`batch_norm_backward`](super::batch_norm_backward).
    pub saved: BatchNormSaved,
}

/// What [`batch_norm_backward`](super::batch_norm_backward) returns (PyTorch's `grad_input`,
/// `grad_weight`, `grad_bias`).
#[derive(Debug, Clone)]
pub struct BatchNormGrads {
    /// The gradient of x: x's shape and dtype.
    pub dx: Tensor,
    /// `[C]`, x's dtype (f32 after a mixed-type forward, an f16 weight's in f16): `sum dz *
    /// xhat` per channel (also when the forward had no weight, which is the gradient of a
    /// weight of ones).
    pub dweight: Tensor,
    /// `[C]`, x's dtype (f32 after a mixed-type forward, an f16 weight's dtype with one):
    /// `sum dz` per channel.
    pub dbias: Tensor,
}
