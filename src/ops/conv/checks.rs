//! The tensor checks the convolutions share: device and dtype pairs, and the bias's dtype and
//! shape in ATen's words.

use super::geom;
use crate::{Error, Result, Tensor};

/// `a` and `b` on one device, in one dtype, which the device supports.
pub(super) fn check_pair(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    a.same_device(op, b)?;
    a.same_dtype(op, b)?;
    a.device().require_dtype(op, a.dtype())
}

/// conv{1,2}d_symint's first check, before any shape: the bias in the input's dtype, in its
/// words (error_inputs_conv2d matches "should be the same"). The transposed convolutions have
/// no such check; theirs comes with the bias's shape (`check_bias`).
pub(super) fn check_bias_dtype(op: &'static str, x: &Tensor, bias: Option<&Tensor>) -> Result<()> {
    match bias {
        Some(b) if b.dtype() != x.dtype() => Err(Error::arg(
            op,
            format!(
                "Input type ({}) and bias type ({}) should be the same",
                x.dtype().c10_name(),
                b.dtype().c10_name()
            ),
        )),
        _ => Ok(()),
    }
}

/// The bias against `channels` output channels of weight `w`, in check_shape_forward's words
/// ("Given weight of size [4, 3, 3, 3], expected bias to be 1-dimensional with 4 elements,
/// but got bias of size [5] instead"; "Given transposed=1, ..." for the transposed ones).
pub(super) fn check_bias(
    op: &'static str,
    x: &Tensor,
    bias: Option<&Tensor>,
    channels: usize,
    w: &Tensor,
) -> Result<()> {
    if let Some(b) = bias {
        check_pair(op, x, b)?;
        if b.shape() != [channels] {
            let given = if op.starts_with("conv_transpose") {
                "Given transposed=1, weight"
            } else {
                "Given weight"
            };
            return Err(Error::shape(
                op,
                format!(
                    "{given} of size {:?}, expected bias to be 1-dimensional with {channels} \
                     elements, but got bias of size {:?} instead (bias must have shape \
                     [{channels}], got {:?})",
                    geom::caller_shape(op, w.shape()),
                    b.shape(),
                    b.shape()
                ),
            ));
        }
    }
    Ok(())
}
