//! Backward of the convolutions (forward in mod.rs), through the fused gradient kernels: for
//! `y = act(conv(x, w) + b)`, `dZ = dY * act'(y)`, then `dx` is the data gradient
//! (`conv2d_backward_input`), `dw` the grouped weight gradient with its deterministic split-k
//! (`conv2d_backward_weight`) and `db` the bias sum. A transposed convolution is the data
//! gradient of a convolution, so its `dx` is a forward convolution of `dZ` and its `dw` a weight
//! gradient with the roles of input and gradient swapped. The 1-D ops reshape to these 2-D ones
//! (recorded views), so they need nothing of their own. GELU's derivative needs the
//! pre-activation: a tracked GELU convolution runs unfused, then a recorded `gelu`
//! (`Activation::split_unfused`).

use crate::autograd::{record, records, BackwardOp, NoGradGuard};
use crate::ops::activation::Activation;
use crate::ops::grad_kernel::{activation_grad, narrow_grad};
use crate::{Error, Result, Tensor};

use super::{
    conv2d_backward_input, conv2d_backward_weight, conv_backward_bias, forward_untracked,
    transpose_untracked, Conv2dOptions, ConvTranspose2dOptions,
};

struct ConvBackward {
    /// The forward input (for dw) and weight (for dx), both kept (as PyTorch saves them).
    x: Option<Tensor>,
    w: Option<Tensor>,
    x_hw: [usize; 2],
    k_hw: [usize; 2],
    /// The geometry, without the activation.
    o: Conv2dOptions,
    act: Activation,
    /// The output, for the relu / sigmoid / tanh derivatives.
    y: Option<Tensor>,
    transposed: bool,
    has_bias: bool,
}

fn missing(op: &'static str) -> Error {
    Error::arg(op, "backward is missing a saved tensor")
}

/// Zero-pads the spatial dims of `t` `[N, C, H, W]` at the end to `hw`.
fn pad_to(t: &Tensor, hw: [usize; 2]) -> Result<Tensor> {
    let mut t = t.clone();
    for (ax, &len) in hw.iter().enumerate() {
        let d = 2 + ax;
        if t.shape()[d] != len {
            let mut shape = t.shape().to_vec();
            shape[d] = len;
            t = narrow_grad(&t, &shape, d, 0)?;
        }
    }
    Ok(t)
}

impl BackwardOp for ConvBackward {
    fn saved(&self) -> Vec<&Tensor> {
        [&self.x, &self.w, &self.y].into_iter().flatten().collect()
    }

    fn name(&self) -> &'static str {
        if self.transposed {
            "conv_transpose2d"
        } else {
            "conv2d"
        }
    }

    fn backward(&self, grads: &[Option<Tensor>], needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let op = self.name();
        let Some(g) = grads.first().and_then(Option::as_ref) else {
            return Ok(vec![None; needs.len()]);
        };
        let gz = activation_grad(op, g, self.y.as_ref(), self.act)?;
        let need = |i: usize| needs.get(i) == Some(&true);
        let mut out = vec![None, None];
        if gz.shape()[0] == 0 {
            // An empty batch (the Empty backend's result): zero gradients, whose shapes the
            // saved tensors give (the gradient geometry of an empty image may not exist).
            let zeros = |t: &Option<Tensor>| -> Result<Tensor> {
                t.as_ref().ok_or_else(|| missing(op))?.zeros_like()
            };
            out[0] = need(0).then(|| zeros(&self.x)).transpose()?;
            out[1] = need(1).then(|| zeros(&self.w)).transpose()?;
        } else if !self.transposed {
            if need(0) {
                let w = self.w.as_ref().ok_or_else(|| missing(op))?;
                out[0] = Some(conv2d_backward_input(&gz, w, self.x_hw, &self.o)?);
            }
            if need(1) {
                let x = self.x.as_ref().ok_or_else(|| missing(op))?;
                out[1] = Some(conv2d_backward_weight(&gz, x, self.k_hw, &self.o)?);
            }
        } else if need(0) || need(1) {
            let w = self.w.as_ref().ok_or_else(|| missing(op))?;
            // dx: the forward convolution of dZ; with output_padding >= stride it has one more
            // row (column) than x, whose gradient the narrow drops.
            let dx_full = forward_untracked(op, &gz, w, None, &self.o)?;
            let full_hw = [dx_full.shape()[2], dx_full.shape()[3]];
            if need(0) {
                let mut dx = dx_full.clone();
                for (ax, &len) in self.x_hw.iter().enumerate() {
                    if dx.shape()[2 + ax] != len {
                        dx = dx.narrow(2 + ax as isize, 0, len)?.contiguous_at_zero()?;
                    }
                }
                out[0] = Some(dx);
            }
            if need(1) {
                // dw[ci, co] = sum x[ci] * dZ[co] shifted: the weight gradient of the
                // convolution of dZ whose output gradient is x (zero-padded to that output).
                let x = self.x.as_ref().ok_or_else(|| missing(op))?;
                let xp = pad_to(x, full_hw)?;
                out[1] = Some(conv2d_backward_weight(&xp, &gz, self.k_hw, &self.o)?);
            }
        }
        if self.has_bias {
            out.push(if need(2) {
                Some(conv_backward_bias(&gz)?)
            } else {
                None
            });
        }
        Ok(out)
    }
}

/// Records a convolution (`transposed`: a transposed one) computed by `run` from the options
/// with activation `act`; GELU runs unfused and records a separate `gelu`.
fn recorded(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    geometry: Conv2dOptions,
    transposed: bool,
    run: impl Fn(Activation) -> Result<Tensor>,
) -> Result<Tensor> {
    let act = geometry.activation;
    if !records([Some(x), Some(w), bias].into_iter().flatten()) {
        return run(act);
    }
    let mut inputs = vec![x, w];
    inputs.extend(bias);
    let (fused, after) = act.split_unfused();
    // Ops inside the forward (reshapes, empty-problem epilogues) must not record on their own.
    let y = {
        let _guard = NoGradGuard::new();
        run(fused)?
    };
    let ws = w.shape();
    let y = record(y, &inputs, |y| {
        Box::new(ConvBackward {
            // Both, whichever gradients are needed, as ConvolutionBackward0 saves them: an
            // optimizer step on a first layer's weight before the backward is the version
            // error, and a node whose only tracked input is the bias serves one backward.
            x: Some(x.detach()),
            w: Some(w.detach()),
            x_hw: [x.shape()[2], x.shape()[3]],
            k_hw: [ws[2], ws[3]],
            o: Conv2dOptions {
                activation: Activation::None,
                ..geometry
            },
            act: fused,
            y: (fused != Activation::None).then(|| y.clone()),
            transposed,
            has_bias: bias.is_some(),
        })
    });
    after.apply(&y)
}

/// [`super::conv2d`]'s recorded forward.
pub(super) fn forward(
    op: &'static str,
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    o: &Conv2dOptions,
) -> Result<Tensor> {
    if let Some(y) = super::empty::empty_channels(op, x, w, bias, o)? {
        return Ok(y);
    }
    recorded(x, w, bias, *o, false, |act| {
        forward_untracked(
            op,
            x,
            w,
            bias,
            &Conv2dOptions {
                activation: act,
                ..*o
            },
        )
    })
}

/// [`super::conv_transpose2d`]'s recorded forward.
pub(super) fn transpose_impl(
    op: &'static str,
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    o: &ConvTranspose2dOptions,
) -> Result<Tensor> {
    let geometry = Conv2dOptions {
        stride: o.stride,
        padding: o.padding,
        dilation: o.dilation,
        groups: o.groups,
        activation: o.activation,
    };
    recorded(x, w, bias, geometry, true, |act| {
        transpose_untracked(
            op,
            x,
            w,
            bias,
            &ConvTranspose2dOptions {
                activation: act,
                ..*o
            },
        )
    })
}
