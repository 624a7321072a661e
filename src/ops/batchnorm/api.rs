//! The public batch-norm forward entry points (the kernels' launches are in launch.rs,
//! autograd's records and the explicit backward in grad.rs, the types in types.rs).

use super::grad;
use super::types::{BatchNormOptions, BatchNormOutput, BatchNormState, ViewId};
use crate::{DType, Result, Tensor};

/// Inference: `act((x - running_mean) / sqrt(running_var + eps) * weight + bias)` per channel,
/// in one pass (the per-channel scale and shift are folded in each workgroup).
///
/// PyTorch's `BatchNorm{1,2,3}d` in `eval()` mode (`F.batch_norm(x, running_mean, running_var,
/// weight, bias, training=False, eps=eps)`), with a fused activation. Returns a new contiguous
/// tensor of x's shape and dtype. Differentiable (autograd) in x, weight and bias. Errors:
/// [`Error::Shape`](crate::Error::Shape) for an input of rank below 2 (but an empty 1-D input,
/// which PyTorch returns as is: a batch of no channels here too) or per-channel vectors that
/// are not `[C]`; [`Error::DType`](crate::Error::DType) /
/// [`Error::DeviceMismatch`](crate::Error::DeviceMismatch) when they differ from x (except
/// PyTorch's mixed type: an f16 x with f32 statistics, weight or bias is computed in f32 and
/// gives an f16 output, as under AMP);
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an `eps` F.batch_norm
/// refuses (negative here; zero or negative in training).
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
    let params = [
        Some(running_mean),
        Some(running_var),
        options.weight,
        options.bias,
    ];
    if mixed(x, &params) {
        let (w, b) = (to_f32(options.weight)?, to_f32(options.bias)?);
        let (rm, rv) = (
            running_mean.to_dtype(DType::F32)?,
            running_var.to_dtype(DType::F32)?,
        );
        let o = BatchNormOptions {
            weight: w.as_ref(),
            bias: b.as_ref(),
            ..*options
        };
        let y = grad::inference(&x.to_dtype(DType::F32)?, &rm, &rv, &o)?;
        if x.numel() == 0 {
            // ATen's empty path (clone, weight[0], bias[0]) comes before any batch norm node.
            return y.to_dtype(x.dtype());
        }
        // One mixed-dtype node in PyTorch, which saves the caller's input and weight.
        let callers: Vec<&Tensor> = [Some(x), options.weight].into_iter().flatten().collect();
        return Ok(crate::ops::saved_inputs::saving_inputs(
            "NativeBatchNormBackward0",
            y.to_dtype(x.dtype())?,
            &callers,
        ));
    }
    grad::inference(x, running_mean, running_var, options)
}

/// PyTorch's mixed type: an f16 input with f32 per-channel tensors (AMP keeps batch norm's
/// parameters and running statistics in f32). Computed in f32 on an f32 copy of x, the output
/// rounded back to f16 (the kernels accumulate in f32 either way); x's gradient comes back in
/// f16 and the parameters' in f32 through the casts. Any f32 per-channel tensor makes it so,
/// the rest f16 or f32 (an f16 weight beside f32 running statistics runs as on CUDA, whose
/// mixed-type rule looks at the weight and bias alone; PyTorch's CPU kernel refuses it), but
/// a weight and a bias of different dtypes are left to the dtype check, as both of PyTorch's
/// kernels refuse them. `params` is `[running_mean, running_var, weight, bias]`.
fn mixed(x: &Tensor, params: &[Option<&Tensor>; 4]) -> bool {
    let affine_differ =
        matches!((params[2], params[3]), (Some(w), Some(b)) if w.dtype() != b.dtype());
    x.dtype() == DType::F16
        && !affine_differ
        && params.iter().flatten().any(|t| t.dtype() == DType::F32)
        && params
            .iter()
            .flatten()
            .all(|t| matches!(t.dtype(), DType::F16 | DType::F32))
}

/// `t` in f32 (a clone, the same graph node, when it already is).
fn to_f32(t: Option<&Tensor>) -> Result<Option<Tensor>> {
    t.map(|t| t.to_dtype(DType::F32)).transpose()
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
/// Differentiable (autograd) in x, weight and bias. Results are bitwise identical from run to run
/// (fixed-order merges of the partial statistics). Errors as [`batch_norm_inference`], plus
/// [`Error::Shape`](crate::Error::Shape) for a single value per channel (no variance to estimate;
/// PyTorch refuses it too), and [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a
/// non-finite momentum or running statistics that overlap each other or an input (they are written
/// in place).
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
    let stats = state.as_ref().map(|s| [&s.running_mean, &s.running_var]);
    let params = [
        stats.map(|s| s[0]),
        stats.map(|s| s[1]),
        options.weight,
        options.bias,
    ];
    if mixed(x, &params) {
        // The state must already be f32 to be updated in place; f16 statistics with an f32
        // weight are left to the dtype check below.
        if state.as_ref().is_none_or(|s| {
            s.running_mean.dtype() == DType::F32 && s.running_var.dtype() == DType::F32
        }) {
            let (w, b) = (to_f32(options.weight)?, to_f32(options.bias)?);
            let o = BatchNormOptions {
                weight: w.as_ref(),
                bias: b.as_ref(),
                ..*options
            };
            let out = grad::train(&x.to_dtype(DType::F32)?, state, &o)?;
            // One mixed-dtype node in PyTorch, which saves the caller's input.
            let y = crate::ops::saved_inputs::saving_inputs(
                "NativeBatchNormBackward0",
                out.y.to_dtype(x.dtype())?,
                &[x],
            );
            // The swapped-argument checks of batch_norm_backward look at the caller's tensors.
            let mut saved = out.saved;
            saved.input = Some(ViewId::of(x));
            saved.output = Some(ViewId::of(&y));
            saved.mixed = true;
            return Ok(BatchNormOutput { y, saved });
        }
    }
    grad::train(x, state, options)
}
