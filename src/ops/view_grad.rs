//! Backward of the view ops (forward in src/tensor.rs): reshape, permute, transpose, narrow,
//! broadcast_to, and `contiguous` (src/ops/map.rs), whose gradient passes through unchanged;
//! and the view-only forwards built on them (squeeze, `reshape_infer`, `split`, `chunk`; the
//! pieces of `split` and `chunk` share one node whose backward is a `cat`).

use crate::autograd::{record, sum_to, BackwardOp};
use crate::ops::grad_kernel::narrow_grad;
use crate::{Error, Layout, Result, Tensor};

/// The most pieces `split` and `chunk` return of an empty tensor (each a handle in memory).
const MAX_EMPTY_PIECES: usize = 1 << 24;

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

/// Records the pieces of `split(x)` along `d` (untracked views of `x`) as one node, as
/// PyTorch's SplitBackward0: its backward joins the pieces' gradients (zeros where none
/// arrived) with one `cat`, where a node per piece would write a zero-padded gradient of
/// `x`'s size for each (quadratic in the pieces for a loop over a sequence's steps). Each
/// piece carries the view meta and its output index (an in-place write into one is refused
/// in PyTorch's multi-output words).
fn record_split(x: &Tensor, d: usize, pieces: Vec<Tensor>) -> Vec<Tensor> {
    let shapes: Vec<Vec<usize>> = pieces.iter().map(|p| p.shape().to_vec()).collect();
    let pieces = crate::autograd::record_multi(pieces, &[x], |_| {
        Box::new(SplitBackward {
            dim: d,
            shapes,
            dtype: x.dtype(),
        })
    });
    pieces
        .into_iter()
        .enumerate()
        .map(|(i, mut p)| {
            Tensor::inherit_view_meta(&mut p, x);
            p.mark_multi_output(i, "Split");
            p
        })
        .collect()
}

struct SplitBackward {
    dim: usize,
    shapes: Vec<Vec<usize>>,
    dtype: crate::DType,
}

impl BackwardOp for SplitBackward {
    fn saved(&self) -> Vec<&Tensor> {
        Vec::new()
    }

    fn name(&self) -> &'static str {
        "split"
    }

    fn backward(&self, grads: &[Option<Tensor>], _needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let Some(dev) = grads.iter().flatten().next().map(Tensor::device) else {
            return Ok(vec![None]);
        };
        let parts = grads
            .iter()
            .zip(&self.shapes)
            .map(|(g, s)| match g {
                Some(g) => Ok(g.clone()),
                None => Tensor::zeros(dev, s, self.dtype),
            })
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<&Tensor> = parts.iter().collect();
        Ok(vec![Some(crate::ops::cat(&refs, self.dim as isize)?)])
    }
}

/// Records `out`, a view (or same-shape copy) of `x`. A view sharing `x`'s storage carries
/// what in-place writes must know (PyTorch's view creation meta): the root of its chain of
/// views, and whether it was made under no_grad from a tracked tensor.
pub(crate) fn record_view(x: &Tensor, out: Tensor, kind: impl FnOnce() -> ViewKind) -> Tensor {
    let shares = out.shares_storage(x);
    let mut out = record(out, &[x], |_| {
        Box::new(ViewBackward {
            kind: kind(),
            x_shape: x.shape().to_vec(),
        })
    });
    if shares {
        Tensor::inherit_view_meta(&mut out, x);
    }
    out
}

impl Tensor {
    /// The same elements in row-major order with a new `shape` (PyTorch's `reshape`): a view
    /// sharing storage wherever strides describe the result (always for contiguous data; for
    /// strided data as PyTorch's `computeStride` finds them), else a packed copy first. Errors with
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
    /// [`Tensor::reshape_infer`] takes PyTorch's `-1` for one inferred size.
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

    /// [`Tensor::reshape`] with PyTorch's signed sizes: one entry may be `-1`, inferred from
    /// the element count (`x.reshape(-1, 4)` in PyTorch is `x.reshape_infer(&[-1, 4])`).
    /// Errors with [`Error::Shape`](crate::Error::Shape) for two `-1`s, another negative size,
    /// or sizes that cannot hold the elements.
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{DType, Device, Tensor};
    /// let dev = Device::new()?;
    /// let x = Tensor::zeros(&dev, &[2, 3, 4], DType::F32)?;
    /// assert_eq!(x.reshape_infer(&[-1, 4])?.shape(), &[6, 4]);
    /// # Ok(()) }
    /// ```
    pub fn reshape_infer(&self, shape: &[i64]) -> Result<Tensor> {
        let dims: Vec<i128> = shape.iter().map(|&d| d as i128).collect();
        let shape = resolve_shape("reshape", &dims, self.numel())?;
        self.reshape(&shape)
    }

    /// A new view of the whole tensor (its own node, as every PyTorch view op returns one):
    /// not the same handle, whose leaf status and `requires_grad` flag are the input's.
    pub(crate) fn alias(&self) -> Tensor {
        record_view(self, self.view(self.layout.clone()), || ViewKind::Reshape)
    }

    /// Removes `dim` when its size is 1 (PyTorch's `squeeze(dim)`; a dim of another size is
    /// left as it is; negative dims count from the end). Always a view.
    pub fn squeeze(&self, dim: isize) -> Result<Tensor> {
        if self.rank() == 0 {
            Layout::normalize_dim("squeeze", dim, 1)?;
            return Ok(self.alias());
        }
        let d = Layout::normalize_dim("squeeze", dim, self.rank())?;
        if self.shape()[d] != 1 {
            return Ok(self.alias());
        }
        let out = self.view(self.layout.without_dim(d));
        Ok(record_view(self, out, || ViewKind::Reshape))
    }

    /// PyTorch's `select(dim, index)` (`x[:, i]` is `x.select(1, i)`): the slice at `index`
    /// along `dim`, without that dim; a view, never a copy. Negative dims and indices count
    /// from the end; `index` may be any integer type. Errors with
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a 0-d tensor, a dim out
    /// of range or an index outside `-size..size`.
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{Device, Tensor};
    /// let dev = Device::new()?;
    /// let x = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
    /// assert_eq!(x.select(1, -1)?.to_vec::<f32>()?, vec![3.0, 6.0]); // x[:, -1]
    /// assert_eq!(x.select(0, 1)?.shape(), &[3]);
    /// assert!(x.select(0, 2).is_err());
    /// # Ok(()) }
    /// ```
    pub fn select(&self, dim: isize, index: impl crate::SignedIndex) -> Result<Tensor> {
        let op = "select";
        if self.rank() == 0 {
            return Err(Error::arg(
                op,
                "select() cannot be applied to a 0-dim tensor.",
            ));
        }
        let d = Layout::normalize_dim(op, dim, self.rank())?;
        let size = self.shape()[d] as i128;
        let i = index.to_i128();
        if i < -size || i >= size {
            return Err(Error::arg(
                op,
                format!(
                    "select(): index {i} out of range for tensor of size {:?} at dimension {d}",
                    self.shape()
                ),
            ));
        }
        // narrow counts a negative start from the end too.
        self.narrow(d as isize, index, 1)?.squeeze(d as isize)
    }

    /// PyTorch's `split(split_size, dim)`: views of `split_size` along `dim`, the last one
    /// smaller when the size does not divide (no copy).
    pub fn split(&self, split_size: usize, dim: isize) -> Result<Vec<Tensor>> {
        let op = "split";
        if self.rank() == 0 {
            return Err(Error::arg(
                op,
                "split expects at least a 1-dimensional tensor",
            ));
        }
        let d = Layout::normalize_dim(op, dim, self.rank())?;
        let len = self.shape()[d];
        if split_size == 0 {
            if len == 0 {
                let mut piece = self.alias();
                piece.mark_multi_output(0, "Split");
                return Ok(vec![piece]);
            }
            return Err(Error::arg(
                op,
                format!(
                    "split_size can only be 0 if dimension size is 0, but got dimension size of {len}"
                ),
            ));
        }
        // An empty tensor may have a long dim (its other dims hold nothing): bounded, so a
        // huge count of pieces is an error, not memory exhausted.
        let pieces = len.div_ceil(split_size);
        if self.numel() == 0 && pieces > MAX_EMPTY_PIECES {
            return Err(Error::size(
                op,
                format!(
                    "{pieces} pieces of an empty tensor {:?}: at most {MAX_EMPTY_PIECES} are \
                     returned",
                    self.shape()
                ),
            ));
        }
        let mut out = Vec::new();
        let mut start = 0;
        let recorded = crate::autograd::records([self]);
        // Untracked views either way: when recording, one node below records them all.
        let base = if recorded {
            self.detach()
        } else {
            self.clone()
        };
        while start < len {
            let n = split_size.min(len - start);
            out.push(base.narrow(d as isize, start, n)?);
            start += n;
        }
        if recorded && !out.is_empty() {
            return Ok(record_split(self, d, out));
        }
        if out.is_empty() {
            let mut piece = self.alias();
            piece.mark_multi_output(0, "Split");
            out.push(piece);
        }
        Ok(out)
    }

    /// PyTorch's `chunk(chunks, dim)`: at most `chunks` views of `ceil(len / chunks)` each (so
    /// possibly fewer chunks; an empty dim gives `chunks` empty views), no copy.
    pub fn chunk(&self, chunks: usize, dim: isize) -> Result<Vec<Tensor>> {
        let op = "chunk";
        if self.rank() == 0 {
            return Err(Error::arg(
                op,
                "chunk expects at least a 1-dimensional tensor",
            ));
        }
        if chunks == 0 {
            return Err(Error::arg(
                op,
                "chunk expects `chunks` to be greater than 0, got: 0",
            ));
        }
        let d = Layout::normalize_dim(op, dim, self.rank())?;
        let len = self.shape()[d];
        if len == 0 {
            // PyTorch: `chunks` empty pieces (its split_with_sizes branch for an empty dim),
            // each a handle here: bounded, so a huge count is an error, not memory exhausted.
            if chunks > MAX_EMPTY_PIECES {
                return Err(Error::size(
                    op,
                    format!(
                        "{chunks} empty chunks of an empty dim: at most {MAX_EMPTY_PIECES} are returned"
                    ),
                ));
            }
            return (0..chunks)
                .map(|i| {
                    // PyTorch's chunk of an empty dim is split_with_sizes.
                    let mut piece = self.narrow(dim, 0usize, 0)?;
                    piece.mark_multi_output(i, "SplitWithSizes");
                    Ok(piece)
                })
                .collect();
        }
        self.split(len.div_ceil(chunks), dim)
    }

    /// Removes every dim of size 1 (PyTorch's `squeeze()`). Always a view.
    pub fn squeeze_all(&self) -> Result<Tensor> {
        let mut out = self.alias();
        for d in (0..self.rank()).rev() {
            if self.shape()[d] == 1 {
                out = out.squeeze(d as isize)?;
            }
        }
        Ok(out)
    }

    /// Collapses dims `start..=end` into one (PyTorch's `flatten(start_dim, end_dim)`; negative
    /// dims count from the end). A view wherever [`Tensor::reshape`] gives one; with
    /// `start == end` the tensor itself (a leaf stays a leaf), as PyTorch's.
    pub fn flatten(&self, start: isize, end: isize) -> Result<Tensor> {
        let op = "flatten";
        if self.rank() == 0 {
            // PyTorch: a scalar takes dims 0 and -1 only, and flattens to [1].
            Layout::normalize_dim(op, start, 1)?;
            Layout::normalize_dim(op, end, 1)?;
            return self.reshape(&[1usize]);
        }
        let s = Layout::normalize_dim(op, start, self.rank())?;
        let e = Layout::normalize_dim(op, end, self.rank())?;
        if s > e {
            return Err(Error::arg(
                op,
                format!(
                    "flatten() has invalid args: start_dim cannot come after end_dim (start_dim \
                     {start}, end_dim {end}, rank {})",
                    self.rank()
                ),
            ));
        }
        if s == e {
            // PyTorch returns the tensor itself (test_flatten_nonview: `t.flatten(1, 1) is
            // t`): a leaf stays a leaf.
            return Ok(self.clone());
        }
        let mut shape = self.shape()[..s].to_vec();
        shape.push(self.shape()[s..=e].iter().product());
        shape.extend_from_slice(&self.shape()[e + 1..]);
        self.reshape(&shape)
    }
}

/// Resolves a `-1` in `dims` against `numel` elements (PyTorch's rules: at most one `-1`, no
/// other negative size, and the sizes must multiply to `numel`).
pub(crate) fn resolve_shape(op: &'static str, dims: &[i128], numel: usize) -> Result<Vec<usize>> {
    let bad = |msg: String| Error::shape(op, msg);
    let mut infer = None;
    let mut known: i128 = 1;
    for (i, &d) in dims.iter().enumerate() {
        if d == -1 {
            if infer.replace(i).is_some() {
                return Err(bad(format!(
                    "only one dimension can be inferred, got {dims:?}"
                )));
            }
        } else if d < 0 {
            return Err(bad(format!(
                "invalid shape dimension {d} at index {i} of shape {dims:?}"
            )));
        } else {
            known = known.saturating_mul(d);
        }
    }
    let mut out: Vec<usize> = Vec::with_capacity(dims.len());
    for &d in dims {
        out.push(usize::try_from(d.max(0)).map_err(|_| bad(format!("size {d} is too large")))?);
    }
    if let Some(i) = infer {
        let n = numel as i128;
        if known == 0 {
            // infer_size_impl: ambiguous only when the sizes could fit (an empty input).
            return Err(bad(if numel == 0 {
                format!(
                    "cannot reshape tensor of 0 elements into shape {dims:?} because the \
                     unspecified dimension size -1 can be any value and is ambiguous"
                )
            } else {
                format!("shape '{dims:?}' is invalid for input of size {numel}")
            }));
        }
        if n % known != 0 {
            return Err(bad(format!(
                "shape '{dims:?}' is invalid for input of size {numel}"
            )));
        }
        out[i] = usize::try_from(n / known).map_err(|_| bad(format!("{dims:?} overflows")))?;
    }
    Ok(out)
}
