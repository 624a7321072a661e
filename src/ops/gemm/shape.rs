//! The shape rules of a product: the broadcast batch, the output shape, and the errors in
//! the words of the PyTorch op matmul runs for the operands' ranks.

use crate::layout::broadcast_shapes;
use crate::{DType, Error, Result};

/// The broadcast batch dims of a product of `a` and `b` (caller shapes, rank >= 1: a 1-D
/// operand has none), or PyTorch's infer_size error naming the dim.
pub(super) fn batch_shape(op: &'static str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let (ba, bb) = (
        &a[..a.len().saturating_sub(2)],
        &b[..b.len().saturating_sub(2)],
    );
    broadcast_shapes(op, ba, bb).map_err(|e| {
        let why = match e {
            Error::Shape { msg, .. } => msg,
            e => e.to_string(),
        };
        Error::shape(
            op,
            format!("batch dims of a {a:?} and b {b:?} do not broadcast: {why}"),
        )
    })
}

/// The error for contracted sizes that differ, for operands of the caller's shapes (rank 1
/// or more), in the words of the PyTorch op matmul runs for those ranks (dot, mv, mm on the
/// folded rows, bmm), then the sizes in ours.
pub(super) fn k_mismatch(op: &'static str, a: &[usize], b: &[usize]) -> Error {
    let (ra, rb) = (a.len(), b.len());
    let ka = a[ra - 1];
    let kb = b[rb.saturating_sub(2)];
    let rows = a[..ra - 1].iter().product::<usize>();
    let torch = match (ra, rb) {
        (1, 1) => format!(
            "inconsistent tensor size, expected tensor [{ka}] and src [{kb}] to have the same \
             number of elements, but got {ka} and {kb} elements respectively"
        ),
        (_, 1) => format!("size mismatch, got input ({rows}), mat ({rows}x{ka}), vec ({kb})"),
        (_, 2) => format!(
            "mat1 and mat2 shapes cannot be multiplied ({rows}x{ka} and {kb}x{})",
            b[1]
        ),
        _ => {
            let batch = batch_shape(op, a, b).map_or(0, |s| s.iter().product::<usize>());
            format!(
                "Expected size for first two dimensions of batch2 tensor to be: [{batch}, {ka}] \
                 but got: [{batch}, {kb}]."
            )
        }
    };
    Error::shape(
        op,
        format!("{torch} (inner dimensions differ: a {a:?} has K={ka}, b {b:?} has K={kb})"),
    )
}

/// Output shape of a batched product of `a [..., M, K]` and `b [..., K, N]` (both rank >= 2).
pub(super) fn product_shape(
    op: &'static str,
    a: &[usize],
    b: &[usize],
) -> Result<(Vec<usize>, usize, usize, usize)> {
    let (ra, rb) = (a.len(), b.len());
    if ra < 2 || rb < 2 {
        return Err(Error::shape(
            op,
            format!("operands need rank >= 2, got {a:?} and {b:?}"),
        ));
    }
    let (m, ka, kb, n) = (a[ra - 2], a[ra - 1], b[rb - 2], b[rb - 1]);
    // The batch first, as PyTorch's matmul (infer_size before bmm's check), in its words.
    let batch = batch_shape(op, a, b)?;
    if ka != kb {
        return Err(k_mismatch(op, a, b));
    }
    let mut out = batch;
    out.extend([m, n]);
    Ok((out, m, n, ka))
}

/// The dtype refusal of the product PyTorch routes a pair of `a` and `b`'s dtypes to, in its
/// words: `dot` (two vectors; checked before the sizes), `mv` (addmv's, naming the vector's
/// dtype as the input's) or `bmm`; mm's are `Tensor::same_dtype_factors`'.
pub(super) fn dtype_mismatch(op: &'static str, route: Route, a: DType, b: DType) -> Error {
    let (an, bn) = (a.scalar_name(), b.scalar_name());
    Error::arg(
        op,
        match route {
            Route::Dot => {
                format!("dot : expected both vectors to have same dtype, but found {an} and {bn}")
            }
            Route::Mv => {
                format!(
                    "addmv input tensors must have the same dtype, but got {bn}, {an}, and {bn}"
                )
            }
            Route::Bmm => format!("expected scalar type {an} but found {bn}"),
        },
    )
}

/// The fixed-rank product whose dtype words [`dtype_mismatch`] gives.
#[derive(Clone, Copy)]
pub(super) enum Route {
    /// Two vectors.
    Dot,
    /// A vector on the right.
    Mv,
    /// A batched right operand.
    Bmm,
}
