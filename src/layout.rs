//! Shape, element strides and offset: the view part of a tensor. All view ops (permute,
//! narrow, broadcast, reshape where strides describe the result) are pure layout math and
//! never copy.

use crate::{Error, Result};

/// Highest rank a kernel accepts; shapes and strides travel to the GPU in `[u32; MAX_RANK]`.
pub const MAX_RANK: usize = 8;

/// How a tensor's elements sit in its storage: the shape, the stride of each dim and the
/// offset of the first element, all counted in elements (not bytes), as PyTorch's `size()`,
/// `stride()` and `storage_offset()`. Element `[i0, i1, ...]` lives at
/// `offset + i0 * strides[0] + i1 * strides[1] + ...`; a stride of 0 repeats one value along
/// a broadcast dim.
///
/// The methods are pure arithmetic on the description and never touch data; [`Tensor`]'s
/// view ops of the same names apply them to a tensor ([`Tensor::layout`] reads one).
///
/// [`Tensor`]: crate::Tensor
/// [`Tensor::layout`]: crate::Tensor::layout
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    shape: Vec<usize>,
    strides: Vec<usize>,
    offset: usize,
}

/// Row-major strides, PyTorch's: a size-0 dim counts as 1 (c10's "strides can't be 0 even if
/// sizes are 0"), so an empty `[2, 0, 3]` has strides `[3, 3, 1]`.
pub(crate) fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; shape.len()];
    let mut acc = 1usize;
    for (s, &d) in strides.iter_mut().zip(shape).rev() {
        *s = acc;
        acc = acc.saturating_mul(d.max(1));
    }
    strides
}

/// Element count of `shape`, or an error naming `op` when it overflows or exceeds u32 indexing.
pub(crate) fn checked_numel(op: &'static str, shape: &[usize]) -> Result<usize> {
    if shape.len() > MAX_RANK {
        return Err(Error::size(
            op,
            format!("rank {} exceeds the maximum rank {MAX_RANK}", shape.len()),
        ));
    }
    // The product of the non-zero dims is bounded too: an empty shape such as [0, 2^40, 2^40]
    // would otherwise pass and overflow the stride and view arithmetic later.
    let extent = shape
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| Error::size(op, format!("shape {shape:?} overflows usize")))?;
    if extent > u32::MAX as usize {
        return Err(Error::size(
            op,
            format!("shape {shape:?} has {extent} elements, more than u32 indexing allows"),
        ));
    }
    Ok(if shape.contains(&0) { 0 } else { extent })
}

/// numpy broadcasting of two shapes.
pub(crate) fn broadcast_shapes(op: &'static str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    // From the last dim, as PyTorch's infer_size, so an error names the same dim.
    for i in (0..rank).rev() {
        let da = if i < rank - a.len() {
            1
        } else {
            a[i - (rank - a.len())]
        };
        let db = if i < rank - b.len() {
            1
        } else {
            b[i - (rank - b.len())]
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(Error::shape(
                    op,
                    format!(
                        "The size of tensor a ({da}) must match the size of tensor b ({db}) at \
                         non-singleton dimension {i}: shapes {a:?} and {b:?} do not broadcast"
                    ),
                ))
            }
        };
    }
    Ok(out)
}

impl Layout {
    /// The packed row-major layout of `shape` at offset 0 (the last dim has stride 1).
    pub fn contiguous(shape: &[usize]) -> Self {
        Layout {
            shape: shape.to_vec(),
            strides: contiguous_strides(shape),
            offset: 0,
        }
    }

    /// The size of each dim.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// The step between neighbours of each dim, in elements.
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }
    /// The position of the first element in the storage, in elements.
    pub fn offset(&self) -> usize {
        self.offset
    }
    /// The number of dims.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    /// The number of elements (the product of the shape; 1 for rank 0). Saturates at
    /// `usize::MAX`: a layout built from an arbitrary shape (no tensor behind it) never panics.
    pub fn numel(&self) -> usize {
        self.shape.iter().fold(1usize, |a, &d| a.saturating_mul(d))
    }

    /// True when a dim of more than one element has stride 0 (a broadcast view): writing
    /// through it would write one element several times, which in-place writes refuse. An
    /// empty view writes nothing (PyTorch counts it contiguous, so free of overlap).
    pub(crate) fn repeats_elements(&self) -> bool {
        self.shape
            .iter()
            .zip(&self.strides)
            .any(|(&d, &s)| d > 1 && s == 0)
            && !self.shape.contains(&0)
    }

    /// True when elements are packed in row-major order starting at `offset`.
    pub fn is_contiguous(&self) -> bool {
        if self.shape.contains(&0) {
            return true;
        }
        let mut acc = 1;
        for (&d, &s) in self.shape.iter().zip(&self.strides).rev() {
            if d != 1 && s != acc {
                return false;
            }
            acc = acc.saturating_mul(d);
        }
        true
    }

    /// One past the furthest element this view touches (0 for an empty view); saturates at
    /// `usize::MAX` like [`Layout::numel`].
    pub fn span(&self) -> usize {
        if self.shape.contains(&0) {
            return 0;
        }
        self.shape
            .iter()
            .zip(&self.strides)
            .fold(self.offset.saturating_add(1), |a, (&d, &s)| {
                a.saturating_add((d - 1).saturating_mul(s))
            })
    }

    pub(crate) fn normalize_dim(op: &'static str, dim: isize, rank: usize) -> Result<usize> {
        let r = rank as isize;
        let d = if dim < 0 { dim + r } else { dim };
        if d < 0 || d >= r.max(0) {
            // PyTorch's wording, with the range this op accepts (`rank` is the op's: one more
            // than the tensor's for unsqueeze and stack, 1 for a 0-d tensor).
            let msg = if r == 0 {
                format!("dim {dim} is out of range: the tensor has no dims")
            } else {
                format!(
                    "Dimension out of range (expected to be in range of [{}, {}], but got {dim})",
                    -r,
                    r - 1
                )
            };
            return Err(Error::arg(op, msg));
        }
        Ok(d as usize)
    }

    /// Dims reordered so that dim `i` of the result is dim `perm[i]` of `self`. Errors with
    /// [`Error::InvalidArgument`] when `perm` is not a permutation of `0..rank`.
    pub fn permute(&self, perm: &[usize]) -> Result<Layout> {
        let op = "permute";
        // PyTorch's checks and words (its _permute_size_stride_estimation).
        if perm.len() != self.rank() {
            return Err(Error::arg(
                op,
                format!(
                    "permute(sparse_coo): number of dimensions in the tensor input does not \
                     match the length of the desired ordering of dimensions i.e. input.dim() = \
                     {} is not equal to len(dims) = {} (dims {perm:?})",
                    self.rank(),
                    perm.len()
                ),
            ));
        }
        let mut seen = vec![false; perm.len()];
        for &p in perm {
            let d = Self::normalize_dim(op, p.min(isize::MAX as usize) as isize, perm.len())?;
            if seen[d] {
                return Err(Error::arg(
                    op,
                    format!("permute(): duplicate dims are not allowed. (dims {perm:?})"),
                ));
            }
            seen[d] = true;
        }
        Ok(Layout {
            shape: perm.iter().map(|&p| self.shape[p]).collect(),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
            offset: self.offset,
        })
    }

    /// Dims `a` and `b` swapped (negative dims count from the end; a rank-0 layout takes 0 or
    /// -1 and stays itself, as in PyTorch). Errors with [`Error::InvalidArgument`] for a dim
    /// out of range.
    pub fn transpose(&self, a: isize, b: isize) -> Result<Layout> {
        let rank = self.rank().max(1);
        let a = Self::normalize_dim("transpose", a, rank)?;
        let b = Self::normalize_dim("transpose", b, rank)?;
        if self.rank() == 0 {
            return Ok(self.clone());
        }
        let mut perm: Vec<usize> = (0..self.rank()).collect();
        perm.swap(a, b);
        self.permute(&perm)
    }

    /// The `len` elements from `start` along `dim` (negative dims count from the end). Errors
    /// with [`Error::InvalidArgument`] for a dim or range out of bounds.
    pub fn narrow(&self, dim: isize, start: usize, len: usize) -> Result<Layout> {
        let op = "narrow";
        let d = Self::normalize_dim(op, dim, self.rank())?;
        match start.checked_add(len) {
            Some(end) if end <= self.shape[d] => {}
            _ => {
                return Err(Error::arg(
                    op,
                    format!(
                        "start ({start}) + length ({len}) exceeds dimension size ({}).",
                        self.shape[d]
                    ),
                ))
            }
        }
        let mut l = self.clone();
        l.shape[d] = len;
        // An empty view reads nothing; a non-empty one's offset is bounded by its storage.
        if !l.shape.contains(&0) {
            l.offset = start
                .checked_mul(self.strides[d])
                .and_then(|o| o.checked_add(l.offset))
                .ok_or_else(|| {
                    Error::size(
                        "narrow",
                        format!(
                            "start {start} along dim {d} of {:?} is beyond usize offsets",
                            self.shape
                        ),
                    )
                })?;
        }
        Ok(l)
    }

    /// Expanded to `shape` by numpy broadcasting: stride 0 on stretched dims; a new leading dim
    /// of size 1 takes the stride `unsqueeze` would give it (PyTorch's `inferExpandGeometry`),
    /// a stretched new one 0; a 0-d tensor expands with every stride 0.
    /// Errors with [`Error::Shape`] when the shapes do not broadcast.
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Layout> {
        let op = "broadcast_to";
        if shape.len() < self.rank() {
            return Err(Error::shape(
                op,
                format!(
                    "cannot broadcast {:?} to lower rank {shape:?}: the number of sizes provided \
                     ({}) must be greater or equal to the number of dimensions in the tensor ({})",
                    self.shape,
                    shape.len(),
                    self.rank()
                ),
            ));
        }
        let lead = shape.len() - self.rank();
        let mut strides = vec![0; shape.len()];
        // From the last dim, as inferExpandGeometry: the last mismatch is the one named.
        for i in (0..self.rank()).rev() {
            let (d, s) = (self.shape[i], self.strides[i]);
            strides[lead + i] = if d == shape[lead + i] {
                s
            } else if d == 1 {
                0
            } else {
                return Err(Error::shape(
                    op,
                    format!(
                        "The expanded size of the tensor ({}) must match the existing size ({d}) \
                         at non-singleton dimension {}.  Target sizes: {shape:?}.  Tensor \
                         sizes: {:?}",
                        shape[lead + i],
                        lead + i,
                        self.shape
                    ),
                ));
            };
        }
        // A 0-d tensor expands with every stride 0 (inferExpandGeometry's early return).
        for i in (0..lead).rev().filter(|_| self.rank() > 0) {
            if shape[i] == 1 {
                strides[i] = match shape.get(i + 1) {
                    Some(&next) => next.saturating_mul(strides[i + 1]),
                    None => 1,
                };
            }
        }
        Ok(Layout {
            shape: shape.to_vec(),
            strides,
            offset: self.offset,
        })
    }

    /// A reshaped view, or `None` when no strides describe the result over this data (the
    /// caller copies first): contiguous data always reshapes, strided data when every run of
    /// dims the new shape splits or merges is itself contiguous (PyTorch's `computeStride`, so
    /// `reshape` and `flatten` return views exactly where PyTorch's do). The element count of
    /// `shape` is not checked here: it must equal [`Layout::numel`], as
    /// [`Tensor::reshape`](crate::Tensor::reshape) checks before it calls this.
    pub fn reshape(&self, shape: &[usize]) -> Option<Layout> {
        let strides = match self.is_contiguous() {
            true => contiguous_strides(shape),
            false => view_strides(&self.shape, &self.strides, shape)?,
        };
        Some(Layout {
            shape: shape.to_vec(),
            strides,
            offset: self.offset,
        })
    }

    /// Inserts a dimension of size 1 at `dim` (`0..=rank`; negative counts from `rank + 1`).
    /// Pure view: the new dim's stride never matters.
    pub fn unsqueeze(&self, dim: isize) -> Result<Layout> {
        let op = "unsqueeze";
        let d = Self::normalize_dim(op, dim, self.rank() + 1)?;
        if self.rank() + 1 > MAX_RANK {
            return Err(Error::size(
                op,
                format!(
                    "rank {} exceeds the maximum rank {MAX_RANK}",
                    self.rank() + 1
                ),
            ));
        }
        let mut l = self.clone();
        let stride = l
            .strides
            .get(d)
            .map_or(1, |&s| s.saturating_mul(l.shape[d]));
        l.shape.insert(d, 1);
        l.strides.insert(d, stride);
        Ok(l)
    }

    /// Drops dimension `d` (used by reductions to describe the output coordinates).
    pub(crate) fn without_dim(&self, d: usize) -> Layout {
        let mut l = self.clone();
        l.shape.remove(d);
        l.strides.remove(d);
        l
    }
}

/// Pads shape/strides into the fixed-size arrays a kernel's Params carry.
pub(crate) fn pack_dims(v: &[usize]) -> [u32; MAX_RANK] {
    let mut out = [0u32; MAX_RANK];
    for (o, &x) in out.iter_mut().zip(v) {
        *o = x as u32;
    }
    out
}

/// PyTorch's `computeStride`: strides viewing data of `old_shape` / `old_strides` as
/// `new_shape` (same element count), or `None` when a run of old dims the new shape splits or
/// merges is not contiguous within itself. Walks the old dims from the last in chunks of
/// mutually contiguous dims and lays the new dims over each chunk.
fn view_strides(
    old_shape: &[usize],
    old_strides: &[usize],
    new_shape: &[usize],
) -> Option<Vec<usize>> {
    if old_shape.is_empty() {
        return Some(vec![1; new_shape.len()]);
    }
    // Layouts may be built from any shape (no tensor behind them): products that overflow
    // describe no data to view.
    let numel = old_shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))?;
    if numel == 0 && old_shape == new_shape {
        return Some(old_strides.to_vec());
    }
    let mut strides = vec![0usize; new_shape.len()];
    if numel == 0 {
        // Any strides view no data: the contiguous ones (sizes of 0 counted as 1).
        let mut s = 1usize;
        for d in (0..new_shape.len()).rev() {
            strides[d] = s;
            s = s.saturating_mul(new_shape[d].max(1));
        }
        return Some(strides);
    }
    let mut view_d = new_shape.len() as isize - 1;
    let mut base = *old_strides.last()?;
    let (mut tensor_numel, mut view_numel) = (1usize, 1usize);
    for tensor_d in (0..old_shape.len()).rev() {
        tensor_numel = tensor_numel.checked_mul(old_shape[tensor_d])?;
        let chunk_ends = tensor_d == 0
            || (old_shape[tensor_d - 1] != 1
                && old_strides[tensor_d - 1] != tensor_numel.saturating_mul(base));
        if chunk_ends {
            while view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d as usize] == 1) {
                strides[view_d as usize] = view_numel.saturating_mul(base);
                view_numel = view_numel.checked_mul(new_shape[view_d as usize])?;
                view_d -= 1;
            }
            if view_numel != tensor_numel {
                return None;
            }
            if tensor_d > 0 {
                base = old_strides[tensor_d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    (view_d == -1).then_some(strides)
}
