//! Backward of the one-axis reductions (forward in src/ops/reduce.rs). sum and mean spread
//! the gradient over the reduced axis; max and min route it to the first index holding the
//! extremum, the index PyTorch's `max(dim)` returns.

use crate::autograd::{record, records, BackwardOp};
use crate::layout::Layout;
use crate::ops::argext::{max_min_grad, max_min_indices, ARG_MAX, ARG_MIN};
use crate::ops::ReduceOp;
use crate::{DType, Error, Result, Tensor};

struct ReduceBackward {
    op: ReduceOp,
    /// Normalized.
    dim: usize,
    x_shape: Vec<usize>,
    x_dtype: DType,
    /// max / min only: the argmax / argmin indices (keepdim shape) the gradient goes to.
    /// PyTorch's `max(dim)` saves these, not the input, so writing the input in place after
    /// the forward leaves the backward valid.
    idx: Option<Tensor>,
    /// max / min of a view past one binding (the argmax kernels bind the view's elements,
    /// the reduction runs in windows): the input, its indices taken by the backward, which
    /// refuses it there, so the forward still computes.
    x: Option<Tensor>,
}

/// The argext code of max / min.
fn code(op: ReduceOp) -> u32 {
    if op == ReduceOp::Max {
        ARG_MAX
    } else {
        ARG_MIN
    }
}

/// `t` with a size-1 axis inserted at `dim` (undoes `keepdim = false`).
fn unsqueeze(t: &Tensor, dim: usize) -> Result<Tensor> {
    if dim > t.rank() {
        return Err(Error::arg(
            "unsqueeze",
            format!("dim {dim} is out of range for shape {:?}", t.shape()),
        ));
    }
    let mut shape = t.shape().to_vec();
    shape.insert(dim, 1);
    t.reshape(&shape)
}

impl BackwardOp for ReduceBackward {
    fn saved(&self) -> Vec<&Tensor> {
        self.idx.iter().chain(&self.x).collect()
    }

    fn name(&self) -> &'static str {
        self.op.name()
    }

    fn backward(&self, grads: &[Option<Tensor>], _needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = grads.first().and_then(Option::as_ref) else {
            return Ok(vec![None]);
        };
        let g = if g.rank() < self.x_shape.len() {
            unsqueeze(g, self.dim)?
        } else {
            g.clone()
        };
        let gx = match self.op {
            ReduceOp::Sum => g.broadcast_to(&self.x_shape)?,
            // PyTorch divides the expanded gradient by the count (not a multiply by 1/n).
            ReduceOp::Mean => g
                .broadcast_to(&self.x_shape)?
                .div_scalar(self.x_shape[self.dim] as f64)?,
            ReduceOp::Max | ReduceOp::Min => {
                let missing = || Error::arg(self.op.name(), "backward is missing a saved tensor");
                let taken;
                let idx = match (&self.idx, &self.x) {
                    (Some(idx), _) => idx,
                    (None, Some(x)) => {
                        taken = max_min_indices(x, self.dim, code(self.op))?;
                        &taken
                    }
                    (None, None) => return Err(missing()),
                };
                max_min_grad(
                    idx,
                    &g,
                    &self.x_shape,
                    self.x_dtype,
                    self.dim,
                    code(self.op),
                )?
            }
        };
        Ok(vec![Some(gx)])
    }
}

impl Tensor {
    /// Reduces along `dim` (negative counts from the end); `keepdim` keeps it as size 1
    /// (PyTorch's `keepdim=True`), else the dim is removed. Returns a new contiguous tensor of
    /// the input's dtype. A rank-0 input counts as one element along dim 0 or -1, as in
    /// PyTorch (the result is rank 0 with or without `keepdim`). Errors:
    /// [`Error::InvalidArgument`] for a dim out of range, [`Error::Size`] for max / min over an
    /// empty dim.
    pub fn reduce(&self, dim: isize, op: ReduceOp, keepdim: bool) -> Result<Tensor> {
        if op == ReduceOp::Mean {
            self.require_mean_dtype()?;
        }
        if self.rank() == 0 {
            Layout::normalize_dim(op.name(), dim, 1)?;
            return self.reshape(&[1])?.reduce(0, op, false);
        }
        let out = self.reduce_forward(dim, op, keepdim)?;
        // The forward accepted `dim`, so it normalizes.
        let d = Layout::normalize_dim(op.name(), dim, self.rank()).unwrap_or(0);
        let extremum = matches!(op, ReduceOp::Max | ReduceOp::Min);
        let (mut idx, mut x) = (None, None);
        if extremum && records([self]) {
            // The indices need the view's elements in one binding (argext binds no more).
            // An empty view's span is 0, below its offset.
            let elems = self.layout.span().saturating_sub(self.layout.offset());
            let span = elems as u64 * self.dtype.size() as u64;
            if span + self.device().storage_align() <= self.device().max_binding_bytes() {
                idx = Some(max_min_indices(self, d, code(op))?);
            } else {
                x = Some(self.detach());
            }
        }
        Ok(record(out, &[self], |_| {
            Box::new(ReduceBackward {
                op,
                dim: d,
                x_shape: self.shape().to_vec(),
                x_dtype: self.dtype,
                idx,
                x,
            })
        }))
    }
}
