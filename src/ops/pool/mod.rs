//! Pooling (shaders/pool.wgsl) with PyTorch's semantics and names: `max_pool1d/2d` (kernel,
//! stride, padding, dilation, ceil_mode), `avg_pool1d/2d` (count_include_pad, ceil_mode,
//! divisor_override), `adaptive_avg_pool1d/2d`, `adaptive_max_pool2d`, and their backward
//! passes. Inputs are `[N, C, H, W]` or unbatched `[C, H, W]` (1-D: `[N, C, L]` or `[C, L]`).
//! The backward gathers per input element (max: the gradient goes to each window's first
//! maximum, as PyTorch routes it), so it is deterministic and needs no atomics.

mod launch;
mod options;

pub(crate) use launch::FAMILY;
use launch::{
    adaptive_shape_check, adaptive_window, avg_window, float_only, indices_untracked, max_window,
    run, POOL_AVG, POOL_MAX,
};
#[doc(hidden)]
pub use launch::{params_layout, pool_variants};
pub use options::{AvgPool1dOptions, AvgPool2dOptions, MaxPool1dOptions, MaxPool2dOptions};

use crate::autograd::{record, records, BackwardOp};
use crate::{Error, Result, Tensor};

/// Lifts a 1-D input ([N, C, L] or [C, L]) to 2-D with H = 1. max_pool1d (`own_words`) checks
/// the caller's shape in its own words; the others, PyTorch's 2-D pools over `[.., 1, L]`,
/// check the rank as checkDimRange and leave empty dims to the 2-D check (which shows the
/// lifted shape, as PyTorch's does).
fn lift_1d(op: &'static str, x: &Tensor, own_words: bool) -> Result<Tensor> {
    match x.rank() {
        2 | 3 if own_words && x.shape()[x.rank() - 2..].contains(&0) => Err(Error::shape(
            op,
            format!(
                "Expected 2D or 3D (batch mode) tensor with optional 0 dim batch size for \
                 input, but got:{:?} (non-empty channel and length dims: only the batch may \
                 be empty)",
                x.shape()
            ),
        )),
        2 | 3 => x.unsqueeze(-2),
        r if own_words => Err(Error::shape(
            op,
            format!(
                "Expected 2D or 3D (batch mode) tensor with optional 0 dim batch size for \
                 input, but got:{:?} (expected a 2-D [C, L] or 3-D [N, C, L] input, got {r}-D)",
                x.shape()
            ),
        )),
        r => Err(Error::shape(
            op,
            format!(
                "Expected 2 to 3 dimensions, but got {r}-dimensional tensor for argument #1 \
                 'self' (while checking arguments for {op})"
            ),
        )),
    }
}

/// PyTorch's check_max_pool1d (max_pool1d without indices; with indices it runs the 2-D
/// checks, as PyTorch's does), in its order and words, on the caller's (rank-checked) input:
/// kernel, stride, padding at most half the kernel, dilation, then the signed output size.
fn check_max_pool1d(op: &'static str, x: &Tensor, o: &MaxPool1dOptions) -> Result<()> {
    let (k, p, d) = (o.kernel_size, o.padding, o.dilation);
    let s = o.stride.unwrap_or(k);
    let why = if k == 0 {
        format!("kernel_size must be greater than zero, but got {k}")
    } else if s == 0 {
        format!("stride must be greater than zero, but got {s}")
    } else if p > k / 2 {
        format!("padding should be at most half of kernel size, but got padding={p} and kernel_size={k}")
    } else if d == 0 {
        format!("dilation must be greater than zero, but got {d}")
    } else {
        let len = x.shape()[x.rank() - 1];
        let out = launch::pooling_output_shape(len, k, p, s, d, o.ceil_mode);
        if out > 0 {
            return Ok(());
        }
        format!("Invalid computed output size: {out}")
    };
    Err(Error::arg(op, format!("max_pool1d() {why}")))
}

fn drop_h(t: Tensor) -> Result<Tensor> {
    let mut s = t.shape().to_vec();
    s.remove(s.len() - 2);
    t.reshape(&s)
}

/// PyTorch's `max_pool2d`: the maximum of each window (padding is `-inf`; a NaN in a window is
/// its result).
pub fn max_pool2d(x: &Tensor, o: &MaxPool2dOptions) -> Result<Tensor> {
    let op = "max_pool2d";
    let (win, out) = max_window(op, x, o)?;
    run(op, x, win, out, None)
}

/// Gradient of [`max_pool2d`] with respect to its input: each window's gradient goes to the
/// window's first maximum (PyTorch's index order), summed where windows overlap.
pub fn max_pool2d_backward(dy: &Tensor, x: &Tensor, o: &MaxPool2dOptions) -> Result<Tensor> {
    let op = "max_pool2d_backward";
    let (win, out) = max_window(op, x, o)?;
    run(op, x, win, out, Some(dy))
}

/// PyTorch's `avg_pool2d`.
pub fn avg_pool2d(x: &Tensor, o: &AvgPool2dOptions) -> Result<Tensor> {
    let op = "avg_pool2d";
    let (win, out) = avg_window(op, x, o)?;
    float_only(op, "avg_pool2d", x)?;
    run(op, x, win, out, None)
}

/// Gradient of [`avg_pool2d`] with respect to its input (`x` gives the input's shape).
pub fn avg_pool2d_backward(dy: &Tensor, x: &Tensor, o: &AvgPool2dOptions) -> Result<Tensor> {
    let op = "avg_pool2d_backward";
    let (win, out) = avg_window(op, x, o)?;
    run(op, x, win, out, Some(dy))
}

/// PyTorch's `adaptive_avg_pool2d`: output `[.., oh, ow]`, window o covering
/// `[floor(o * in / out), ceil((o + 1) * in / out))` on each axis.
pub fn adaptive_avg_pool2d(x: &Tensor, output_size: [usize; 2]) -> Result<Tensor> {
    let op = "adaptive_avg_pool2d";
    if output_size == [1, 1] && (!matches!(x.rank(), 3 | 4) || !x.dtype().is_float()) {
        // adaptive_avg_pool2d_symint takes (1, 1) as `input.mean({-1, -2}, true)` before any
        // rank or dtype check: a 2-D or a 5-D (video) input pools its last two dims, and an
        // integer or 1-D input gets mean's error.
        return x.mean_dims(&[-2, -1], true);
    }
    check_two_sizes(op, x)?;
    if !x.dtype().is_float() && matches!(x.rank(), 3 | 4) {
        // adaptive_avg_pool2d_out_cpu_template returns an empty output after its shape check
        // and before the dtype dispatch: an empty integer result is PyTorch's too.
        adaptive_shape_check(op, "adaptive_avg_pool2d", x.shape(), false)?;
        let mut shape = x.shape()[..x.rank() - 2].to_vec();
        shape.extend(output_size);
        if shape.contains(&0) {
            return Tensor::zeros(x.device(), &shape, x.dtype());
        }
    }
    let rank_ok = matches!(x.rank(), 3 | 4) && x.dtype().is_float();
    let plane_empty = rank_ok && x.shape()[x.rank() - 2..].contains(&0);
    if rank_ok
        && ((output_size.contains(&0) && !plane_empty)
            || (x.numel() == 0 && (output_size == [1, 1] || !plane_empty)))
    {
        // PyTorch: an output size of 0 gives an empty result, (1, 1) is the plane's mean (NaN
        // over an empty plane), and no channels (or no batch) give an empty result of any
        // output size (PyTorch checks only the plane for being non-empty). Derived from that
        // mean, so the graph is kept.
        let m = x.mean_dims(&[-2, -1], true)?;
        let m = m.narrow(-2, 0usize, output_size[0].min(1))?;
        let m = m.narrow(-1, 0usize, output_size[1].min(1))?;
        let mut shape = x.shape()[..x.rank() - 2].to_vec();
        shape.extend(output_size);
        let y = m.broadcast_to(&shape)?.contiguous_at_zero()?;
        // (1, 1) is PyTorch's mean, whose backward takes empty gradients.
        return match output_size {
            [1, 1] => Ok(y),
            _ => refuse_empty_backward("adaptive_avg_pool2d_backward", x, y),
        };
    }
    let (win, out) = adaptive_window(op, x, output_size, POOL_AVG)?;
    let s = x.shape();
    let r = s.len();
    let plane = s[r - 2] * s[r - 1];
    // Global average pooling as PyTorch's (`input.mean({-1, -2})` for an output of 1 x 1): the
    // pool kernel runs an invocation per plane, adding every value in turn (2048 planes of
    // 112 x 112 are 2048 invocations of 12544 steps: slow on a GPU, and on any adapter a
    // drift of 1e-4 on constant planes), where the mean over the flattened plane runs the
    // reduction's plans (on GPUs a workgroup per plane, split when the planes are few; on CPU
    // adapters runs of at most about 64). The same values, summed in another fixed order.
    let global = if x.device().caps().cpu { 64 } else { 256 };
    if output_size == [1, 1] && plane > global && x.numel() > 0 {
        // Refused under this op's name, as the pool kernel would.
        x.require_float(op)?;
        let mut flat = s[..r - 2].to_vec();
        flat.push(plane);
        let mut pooled = s[..r - 2].to_vec();
        pooled.extend([1, 1]);
        return x.reshape(&flat)?.mean(-1, false)?.reshape(&pooled);
    }
    run(op, x, win, out, None)
}

/// Gradient of [`adaptive_avg_pool2d`].
pub fn adaptive_avg_pool2d_backward(dy: &Tensor, x: &Tensor) -> Result<Tensor> {
    adaptive_backward("adaptive_avg_pool2d_backward", dy, x, POOL_AVG)
}

/// PyTorch's `adaptive_max_pool2d` (values; the windows as [`adaptive_avg_pool2d`]'s).
pub fn adaptive_max_pool2d(x: &Tensor, output_size: [usize; 2]) -> Result<Tensor> {
    let op = "adaptive_max_pool2d";
    check_two_sizes(op, x)?;
    if let Some(empty) = max_output_empty(x, output_size) {
        return empty;
    }
    let (win, out) = adaptive_window(op, x, output_size, POOL_MAX)?;
    run(op, x, win, out, None)
}

/// F.adaptive_{avg,max}_pool2d's `_list_with_default`: two output sizes need an input of at
/// least three dims, checked in Python before the kernel's own rank check.
fn check_two_sizes(op: &'static str, x: &Tensor) -> Result<()> {
    if x.rank() < 3 {
        return Err(Error::shape(
            op,
            format!(
                "Input dimension should be at least 3 (got an input of shape {:?})",
                x.shape()
            ),
        ));
    }
    Ok(())
}

/// PyTorch checks only dims 1.. of the input for adaptive max pooling (for an unbatched
/// `[C, H, W]`, H and W): an output size of 0, or an input with no values (no channels
/// unbatched, no batch), gives an empty result (a view of the input, so the graph is kept).
/// `None` when the output is not empty, or the input is one the kernel path refuses.
fn max_output_empty(x: &Tensor, output_size: [usize; 2]) -> Option<Result<Tensor>> {
    let r = x.rank();
    if !(matches!(r, 3 | 4)
        && x.dtype().is_float()
        && (output_size.contains(&0) || x.numel() == 0)
        && !x.shape()[1..].contains(&0))
    {
        return None;
    }
    let mut shape = x.shape()[..r - 2].to_vec();
    shape.extend(output_size);
    let y = x.narrow(-1, 0usize, 0usize).and_then(|e| e.reshape(&shape));
    Some(y.and_then(|y| refuse_empty_backward("adaptive_max_pool2d_backward", x, y)))
}

/// An adaptive pool's empty result `y` of `x`, recorded (when `x` is tracked and `y` has an
/// empty non-batch dim) by a node whose backward refuses, as PyTorch's adaptive pooling
/// backward kernels do (`adaptive_pool_empty_output_check`); otherwise `y` as it is.
fn refuse_empty_backward(op: &'static str, x: &Tensor, y: Tensor) -> Result<Tensor> {
    let shape = y.shape().to_vec();
    match (1..shape.len()).find(|&i| shape[i] == 0) {
        Some(dim) if records([x]) => Ok(record(y.detach(), &[x], |_| {
            Box::new(EmptyOutputBackward { op, shape, dim })
        })),
        _ => Ok(y),
    }
}

/// See [`refuse_empty_backward`].
struct EmptyOutputBackward {
    op: &'static str,
    shape: Vec<usize>,
    dim: usize,
}

impl BackwardOp for EmptyOutputBackward {
    fn name(&self) -> &'static str {
        self.op
    }
    fn backward(&self, grads: &[Option<Tensor>], needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        if grads.iter().all(Option::is_none) {
            return Ok(vec![None; needs.len()]);
        }
        Err(Error::shape(
            self.op,
            format!(
                "Expected grad_output to have non-zero size for non-batch dimensions, but \
                 grad_output has sizes {:?} with dimension {} being empty",
                self.shape, self.dim
            ),
        ))
    }
    fn saved(&self) -> Vec<&Tensor> {
        Vec::new()
    }
}

/// Gradient of [`adaptive_max_pool2d`].
pub fn adaptive_max_pool2d_backward(dy: &Tensor, x: &Tensor) -> Result<Tensor> {
    adaptive_backward("adaptive_max_pool2d_backward", dy, x, POOL_MAX)
}

/// The adaptive pools' backward: the output size is the gradient's trailing two dims.
fn adaptive_backward(op: &'static str, dy: &Tensor, x: &Tensor, mode: u32) -> Result<Tensor> {
    let s = dy.shape();
    let out = if s.len() >= 2 {
        [s[s.len() - 2], s[s.len() - 1]]
    } else {
        [0, 0]
    };
    let (win, out) = adaptive_window(op, x, out, mode)?;
    run(op, x, win, out, Some(dy))
}

/// PyTorch's `max_pool2d(..., return_indices=True)`: the pooled values (tracked as
/// [`max_pool2d`]'s) and, as an i32 tensor of the same shape, the flat index within each
/// input plane (`h * W + w`) of every window's maximum (its first maximum, or its NaN). The
/// indices scatter gradients or values back with [`Tensor::scatter_add`] over the
/// `[N, C, H * W]` view (PyTorch's `max_unpool2d`).
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::ops::{max_pool2d_with_indices, MaxPool2dOptions};
/// use wgtensor::{Device, Tensor};
/// let dev = Device::new()?;
/// let x = Tensor::from_slice(&dev, &[1.0f32, 5.0, 2.0, 0.0, 3.0, 4.0, 9.0, 8.0], &[1, 1, 2, 4])?;
/// let (y, idx) = max_pool2d_with_indices(&x, &MaxPool2dOptions::new(2))?;
/// assert_eq!(y.to_vec::<f32>()?, vec![5.0, 9.0]);
/// assert_eq!(idx.to_vec::<i32>()?, vec![1, 6]);
/// # Ok(()) }
/// ```
pub fn max_pool2d_with_indices(x: &Tensor, o: &MaxPool2dOptions) -> Result<(Tensor, Tensor)> {
    let op = "max_pool2d";
    let (win, out) = max_window(op, x, o)?;
    with_indices(
        op,
        run(op, x, win, out, None)?,
        indices_untracked(op, x, win, out)?,
    )
}

/// The values and indices of the max pool `op`, the values' node keeping the indices for the
/// version check (PyTorch's saves `result1`: writing the returned indices before the backward
/// is its in-place error).
fn with_indices(op: &'static str, values: Tensor, indices: Tensor) -> Result<(Tensor, Tensor)> {
    let values = crate::ops::saved_inputs::saving_inputs(op, values, &[&indices]);
    Ok((values, indices))
}

/// PyTorch's `max_pool1d(..., return_indices=True)`: values and i32 indices within each
/// input row of length L (see [`max_pool2d_with_indices`]).
pub fn max_pool1d_with_indices(x: &Tensor, o: &MaxPool1dOptions) -> Result<(Tensor, Tensor)> {
    let op = "max_pool1d";
    let x2 = lift_1d(op, x, false)?;
    let (win, out) = max_window(op, &x2, &o.to_2d())?;
    with_indices(
        op,
        drop_h(run(op, &x2, win, out, None)?)?,
        drop_h(indices_untracked(op, &x2, win, out)?)?,
    )
}

/// PyTorch's `adaptive_max_pool2d(..., return_indices=True)` (see
/// [`max_pool2d_with_indices`]).
pub fn adaptive_max_pool2d_with_indices(
    x: &Tensor,
    output_size: [usize; 2],
) -> Result<(Tensor, Tensor)> {
    let op = "adaptive_max_pool2d";
    check_two_sizes(op, x)?;
    if let Some(empty) = max_output_empty(x, output_size) {
        let empty = empty?;
        let idx = Tensor::zeros(x.device(), empty.shape(), crate::DType::I32)?;
        return Ok((empty, idx));
    }
    let (win, out) = adaptive_window(op, x, output_size, POOL_MAX)?;
    with_indices(
        op,
        run(op, x, win, out, None)?,
        indices_untracked(op, x, win, out)?,
    )
}

/// PyTorch's `max_pool1d` over `[N, C, L]` or `[C, L]`.
pub fn max_pool1d(x: &Tensor, o: &MaxPool1dOptions) -> Result<Tensor> {
    let op = "max_pool1d";
    let x2 = lift_1d(op, x, true)?;
    check_max_pool1d(op, x, o)?;
    let (win, out) = max_window(op, &x2, &o.to_2d())?;
    float_only(op, "max_pool1d_impl", x)?;
    drop_h(run(op, &x2, win, out, None)?)
}

/// PyTorch's `avg_pool1d` over `[N, C, L]` or `[C, L]`.
pub fn avg_pool1d(x: &Tensor, o: &AvgPool1dOptions) -> Result<Tensor> {
    let op = "avg_pool1d";
    let x2 = lift_1d(op, x, false)?;
    let (win, out) = avg_window(op, &x2, &o.to_2d())?;
    float_only(op, "avg_pool2d", x)?;
    drop_h(run(op, &x2, win, out, None)?)
}

/// PyTorch's `adaptive_avg_pool1d` over `[N, C, L]` or `[C, L]`.
pub fn adaptive_avg_pool1d(x: &Tensor, output_size: usize) -> Result<Tensor> {
    let op = "adaptive_avg_pool1d";
    let length = x.shape().last().copied().unwrap_or(0);
    if matches!(x.rank(), 2 | 3)
        && ((output_size == 0 && length > 0)
            || (x.numel() == 0 && (length > 0 || output_size == 1)))
    {
        // PyTorch's adaptive_avg_pool1d is adaptive_avg_pool2d over [.., 1, L]: an output size
        // of 0 or an empty input take its rules (empty, or NaN means over empty rows).
        return drop_h(adaptive_avg_pool2d(&x.unsqueeze(-2)?, [1, output_size])?);
    }
    if output_size == 1 && matches!(x.rank(), 2 | 3) && x.numel() > 0 {
        x.require_float(op)?;
        // A mean over each row, as PyTorch's (adaptive_avg_pool2d over [.., 1, L], whose 1 x 1
        // output is a mean): the reduction's plans, not one invocation adding L values.
        return drop_h(adaptive_avg_pool2d(&x.unsqueeze(-2)?, [1, 1])?);
    }
    let x2 = lift_1d(op, x, false)?;
    let (win, out) = adaptive_window(op, &x2, [1, output_size], POOL_AVG)?;
    drop_h(run(op, &x2, win, out, None)?)
}
