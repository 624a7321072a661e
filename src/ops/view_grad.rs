//! Backward of the view ops (forward in src/tensor.rs): reshape, permute, transpose, narrow,
//! broadcast_to, and `contiguous` (src/ops/map.rs), whose gradient passes through unchanged.

use crate::autograd::{record, sum_to, BackwardOp};
use crate::ops::grad_kernel::narrow_grad;
use crate::{Result, Tensor};

/// Which view produced a tensor; enough to map its gradient back to the source's shape.
#[derive(Debug, Clone)]
pub(crate) enum ViewKind {
    Reshape,
    /// The inverse permutation.
    Permute(Vec<usize>),
    Transpose(isize, isize),
    /// Normalized dim and start.
    Narrow(usize, usize),
    Broadcast,
    /// A copy with the same shape (`contiguous`).
    Identity,
}

impl ViewKind {
    /// The backward of `permute(perm)` (a valid permutation: the forward checked it).
    pub(crate) fn permute(perm: &[usize]) -> ViewKind {
        let mut inv = vec![0; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            if let Some(slot) = inv.get_mut(p) {
                *slot = i;
            }
        }
        ViewKind::Permute(inv)
    }

    /// The backward of `x.narrow(dim, start, _)` (dim already validated by the forward).
    pub(crate) fn narrow(x: &Tensor, dim: isize, start: usize) -> ViewKind {
        let d = if dim < 0 {
            (dim + x.rank() as isize) as usize
        } else {
            dim as usize
        };
        ViewKind::Narrow(d, start)
    }
}

struct ViewBackward {
    kind: ViewKind,
    x_shape: Vec<usize>,
}

impl BackwardOp for ViewBackward {
    fn saved(&self) -> Vec<&Tensor> {
        Vec::new()
    }

    fn name(&self) -> &'static str {
        match self.kind {
            ViewKind::Reshape => "reshape",
            ViewKind::Permute(_) => "permute",
            ViewKind::Transpose(..) => "transpose",
            ViewKind::Narrow(..) => "narrow",
            ViewKind::Broadcast => "broadcast_to",
            ViewKind::Identity => "contiguous",
        }
    }

    fn backward(&self, grads: &[Option<Tensor>], _needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = grads.first().and_then(Option::as_ref) else {
            return Ok(vec![None]);
        };
        let gx = match &self.kind {
            ViewKind::Reshape => g.reshape(&self.x_shape)?,
            ViewKind::Permute(inv) => g.permute(inv)?,
            ViewKind::Transpose(a, b) => g.transpose(*a, *b)?,
            ViewKind::Narrow(d, start) => narrow_grad(g, &self.x_shape, *d, *start)?,
            ViewKind::Broadcast => sum_to(g, &self.x_shape)?,
            ViewKind::Identity => g.clone(),
        };
        Ok(vec![Some(gx)])
    }
}

/// Records `out`, a view (or same-shape copy) of `x`.
pub(crate) fn record_view(x: &Tensor, out: Tensor, kind: impl FnOnce() -> ViewKind) -> Tensor {
    record(out, &[x], |_| {
        Box::new(ViewBackward {
            kind: kind(),
            x_shape: x.shape().to_vec(),
        })
    })
}

impl Tensor {
    /// The same elements in row-major order with a new `shape` (PyTorch's `reshape`): a view
    /// sharing storage when the tensor is contiguous, else a packed copy first. Errors with
    /// [`Error::Shape`] when the element counts differ.
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{Device, Tensor};
    /// let dev = Device::new()?;
    /// let x = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
    /// let y = x.reshape(&[3, 2])?;
    /// assert!(y.shares_storage(&x)); // contiguous: a view
    /// assert_eq!(y.shape(), &[3, 2]);
    /// let yt = x.transpose(0, 1)?.reshape(&[6])?; // strided: packed into new storage
    /// assert_eq!(yt.to_vec::<f32>()?, vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    /// assert!(x.reshape(&[4]).is_err());
    /// # Ok(()) }
    /// ```
    ///
    /// [`Error::Shape`]: crate::Error::Shape
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        if !self.is_tracked() {
            return self.reshape_untracked(shape);
        }
        // The copy a non-contiguous source needs is part of this one recorded op.
        let out = self.detach().reshape_untracked(shape)?;
        Ok(record_view(self, out, || ViewKind::Reshape))
    }
}
