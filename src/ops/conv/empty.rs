//! Convolutions of empty inputs, as PyTorch's Empty backend gives them (its
//! `_select_conv_backend` sends an input with no batch or no channels there): results of the
//! output's shape without computing, the shape checks run as for any input.

use super::checks::check_bias;
use super::geom::{self, dims4, Geom};
use super::{Conv2dOptions, ConvTranspose2dOptions};
use crate::{Error, Result, Tensor};

/// PyTorch's convolution of an input without channels (its `ConvBackend::Empty`): `x`
/// `[N, 0, H, W]` with a weight `[O, 0, KH, KW]` gives an empty `[N, 0, OH, OW]` (PyTorch
/// zeroes the output channels too), the geometry checked as for one channel per group, and
/// zero gradients for the input, the weight and the bias (composed from views of each, so
/// autograd gives them). `None` for any other input.
pub(super) fn empty_channels(
    op: &'static str,
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    o: &Conv2dOptions,
) -> Result<Option<Tensor>> {
    if x.rank() != 4 || w.rank() != 4 || x.shape()[1] != 0 || w.shape()[1] != 0 {
        return Ok(None);
    }
    // The Empty backend checks no dtype (its `input * weight` promotes).
    x.same_device(op, w)?;
    let [n, _, h, wd] = dims4(op, x, "input")?;
    let [oc, _, kh, kw] = dims4(op, w, "weight")?;
    // The geometry checked for one image and one output channel per group, without input
    // channels: the result is empty, so the extents the kernels' limits guard do not matter,
    // and an empty kernel gives PyTorch's extent (`d (k - 1) + 1`, 1 - d).
    // The options first (a groups of 0 named as such), as PyTorch's check_shape_forward.
    // The weight's dim 0 and the bias come right after the channels, before the kernel size.
    let groups = o.groups.max(1);
    let shown = geom::caller_shape(op, w.shape());
    let g = Geom::shape_checked(op, [n.min(1), 0, h, wd], [groups, 0, kh, kw], o, |_| {
        geom::check_weight_dim0(op, groups, oc, &shown, "out_channels")?;
        check_bias(op, x, bias, oc, w)
    })?;
    let shape = [n, 0, g.oh, g.ow];
    let empty = |t: &Tensor| t.reshape(&[1, 0, 1, 1])?.broadcast_to(&shape);
    let mut y = empty(x)?.add(&empty(w)?)?;
    if let Some(b) = bias {
        y = y.add(&empty(&b.narrow(0, 0, 0)?)?)?;
    }
    Ok(Some(y))
}

/// A transposed convolution of an empty batch or of images with empty spatial dims, after the
/// channel and bias checks as `_select_conv_backend`: an empty batch goes to PyTorch's Empty
/// backend (an empty result of the output's size, which may be 0 but not negative), any other
/// batch is refused in its words.
pub(super) fn empty_transposed(
    op: &'static str,
    x: &Tensor,
    ws: [usize; 4],
    o: &ConvTranspose2dOptions,
) -> Result<Tensor> {
    let [n, _, h, wd] = dims4(op, x, "input")?;
    let p = o.padding;
    let pads = [p.top + p.bottom, p.left + p.right];
    // (len - 1) s - pad + d (k - 1) + output_padding + 1, in i128 (operands are bounded).
    let len = |ax: usize, l: usize| -> i128 {
        let i = |v: usize| v as i128;
        (i(l) - 1) * i(o.stride[ax]) - i(pads[ax])
            + i(o.dilation[ax]) * (i(ws[2 + ax].max(1)) - 1)
            + i(o.output_padding[ax])
            + 1
    };
    let (oh, ow) = (len(0, h), len(1, wd));
    // An empty batch goes to the Empty backend before any backend check: its view of the
    // output takes any output padding and an extent of 0, not a negative one.
    if n == 0 && oh >= 0 && ow >= 0 {
        let shape = [0, ws[1] * o.groups, oh as usize, ow as usize];
        return Tensor::empty(x.device(), op, &shape, x.dtype());
    }
    let detail = format!(
        "zero-size spatial dimension: input {:?} (only the batch and the channels may be \
         empty, and an empty batch's output must not have a negative size)",
        x.shape()
    );
    match n {
        0 => Err(Error::shape(op, detail)),
        _ => Err(only_empty_batch(op, x, &format!(": {detail}"))),
    }
}

/// `_select_conv_backend`'s refusal of an empty input with a batch and channels, in its words,
/// then `detail`.
pub(super) fn only_empty_batch(op: &'static str, x: &Tensor, detail: &str) -> Error {
    Error::shape(
        op,
        format!(
            "Only zero batch or zero channel inputs are supported, but got input shape: \
             {:?}{detail}",
            geom::caller_shape(op, x.shape())
        ),
    )
}
