//! The argument checks of layer, RMS and group norm (src/ops/norm.rs), in PyTorch's order
//! and words: shapes first, then dtypes and devices, as the kernels check those last.

use crate::{Error, Result, Tensor};

/// PyTorch's `_check_layer_norm_inputs` (layer_norm.h, rms_norm's too) in its order and
/// words: `normalized_shape`, the weight's and the bias's shapes, then the input's trailing
/// dims. Returns (rows, len).
pub(super) fn check_trailing(
    op: &'static str,
    x: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
) -> Result<(usize, usize)> {
    let k = normalized_shape.len();
    if k == 0 {
        return Err(Error::shape(
            op,
            "Expected normalized_shape to be at least 1-dimensional, i.e., containing at least \
             one element, but got normalized_shape = []",
        ));
    }
    for (what, t) in [("weight", weight), ("bias", bias)] {
        let Some(t) = t else { continue };
        if t.shape() != normalized_shape {
            return Err(Error::shape(
                op,
                format!(
                    "Expected {what} to be of same shape as normalized_shape, but got {what} of \
                     shape {:?} and normalized_shape = {normalized_shape:?}",
                    t.shape()
                ),
            ));
        }
    }
    let s = x.shape();
    // rms_norm has checks of its own in PyTorch (_check_rms_norm_inputs): the rank first, and
    // the dims joined without layer_norm's leading ", ".
    let rms = op == "rms_norm";
    if rms && s.len() < k {
        return Err(Error::arg(
            op,
            format!(
                "Input tensor must have at least {k} dimensions, but got {}",
                s.len()
            ),
        ));
    }
    if s.len() < k || s[s.len() - k..] != *normalized_shape {
        let dims: Vec<String> = normalized_shape.iter().map(|d| d.to_string()).collect();
        let dims = match rms {
            true => dims.join(", "),
            false => dims.iter().map(|d| format!(", {d}")).collect(),
        };
        return Err(Error::shape(
            op,
            format!(
                "Given normalized_shape={normalized_shape:?}, expected input with shape \
                 [*{dims}], but got input of size{s:?}"
            ),
        ));
    }
    // Dtypes and devices after every shape, as the kernels check them.
    check_float_params(op, x, [weight, bias])?;
    let len: usize = normalized_shape.iter().product();
    let rows: usize = s[..s.len() - k].iter().product();
    Ok((rows, len))
}

/// F.group_norm's checks, then ATen's check_group_norm_inputs, in their order and words;
/// dtypes and devices after them, as the kernels check those. Returns (C, the spatial size).
pub(super) fn check_group(
    op: &'static str,
    x: &Tensor,
    num_groups: usize,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
) -> Result<(usize, usize)> {
    let s = x.shape();
    if s.len() < 2 {
        return Err(Error::shape(
            op,
            format!(
                "Expected at least 2 dimensions for input tensor but received {}",
                s.len()
            ),
        ));
    }
    let c = s[1];
    if num_groups == 0 {
        return Err(Error::arg(
            op,
            "Expected num groups to be greater than 0, got 0",
        ));
    }
    let inner: usize = s[2..].iter().product();
    // _verify_batch_size([N * C // G, G, *spatial]): one value per group and sample in all.
    let verify: Vec<usize> = [s[0].saturating_mul(c) / num_groups, num_groups]
        .into_iter()
        .chain(s[2..].iter().copied())
        .collect();
    if verify[0].saturating_mul(inner) == 1 {
        return Err(Error::arg(
            op,
            format!(
                "Expected more than 1 value per channel when training, got input size {verify:?}"
            ),
        ));
    }
    if !c.is_multiple_of(num_groups) {
        return Err(Error::arg(
            op,
            format!(
                "Expected number of channels in input to be divisible by num_groups, but got \
                 input of shape {s:?} and num_groups={num_groups}"
            ),
        ));
    }
    for (what, t) in [("weight", weight), ("bias", bias)] {
        let Some(t) = t else { continue };
        if t.shape() != [c] {
            return Err(Error::shape(
                op,
                format!(
                    "Expected {what} to be a vector of size equal to the number of channels in \
                     input, but got {what} of shape {:?} and input of shape {s:?}",
                    t.shape()
                ),
            ));
        }
    }
    check_float_params(op, x, [weight, bias])?;
    Ok((c, inner))
}

/// A float input, and parameters on its device in its dtype.
fn check_float_params(op: &'static str, x: &Tensor, params: [Option<&Tensor>; 2]) -> Result<()> {
    x.require_float(op)?;
    for t in params.into_iter().flatten() {
        x.same_device(op, t)?;
        x.same_dtype(op, t)?;
    }
    Ok(())
}
