//! Index ops (shaders/index.wgsl): `gather`, `index_select`,
//! `scatter_add` and `embedding` (`one_hot` is in one_hot.rs), with PyTorch's names, shapes and rules. Indices are
//! [`DType::I32`] tensors.
//!
//! Index values live on the device, so they are checked there (src/ops/index_check.rs), not
//! on the host (that would need a readback per op): an index outside `[0, n)` makes the next
//! sync or readback on the device return an `Err` naming the op, the index and the size, as
//! PyTorch raises. The kernels themselves never access out of bounds: such an index reads NaN
//! in float results (0 in i32 results) and contributes nothing to `scatter_add` and to
//! gradients, which is what a device opened with `DeviceOptions::check_indices = false` gets.
//!
//! The backward of `gather` is a `scatter_add`. A short index (under 64 along the dim) runs it
//! as a gather over the index (each output element sums its matches in index order) rather
//! than with float atomics; a longer one, and the backward of `index_select` and `embedding`,
//! bucket the index first (ops/segment.rs), so the cost does not grow with the number of
//! outputs times the index length. Either way the sums run in index order (on GPUs an output
//! of more than 256 terms sums them in 256 lanes folded in a fixed tree): the same inputs give
//! the same bits on every run, and on every backend up to 256 terms per output.

use super::index_check::check_indices;
use super::index_kernels::{gather_forward, overrides, IndexParams, SCATTER_ADD};
#[doc(hidden)]
pub use super::index_kernels::{index_variants, params_layout};
use bytemuck::Zeroable;

use crate::autograd::{record, BackwardOp};
use crate::layout::{pack_dims, Layout};
use crate::ops::map::WG;
use crate::{DType, Error, Result, Tensor};

fn grid(op: &'static str, t: &Tensor, n: usize) -> Result<[u32; 3]> {
    t.device().grid_1d(op, (n as u64).div_ceil(WG as u64))
}

pub(super) fn require_index(op: &'static str, what: &str, index: &Tensor) -> Result<()> {
    if index.dtype != DType::I32 {
        // PyTorch's sentence for the op (scatter_gather_dtype_check names every scatter
        // variant "scatter"), then ours: int64 indices do not exist here.
        let torch = match op {
            "gather" => "gather(): Expected dtype int32/int64 for index".to_string(),
            "scatter_add" => "scatter(): Expected dtype int32/int64 for index".to_string(),
            "index_select" => "index_select(): Expected dtype int32 or int64 for index".to_string(),
            "one_hot" => "one_hot is only applicable to index tensor.".to_string(),
            // checkScalarTypes' sentence, the legacy type name (torch.FloatTensor) included.
            _ => format!(
                "Expected tensor for argument #1 'indices' to have one of the following scalar \
                 types: Long, Int; but got torch.{}Tensor instead (while checking arguments \
                 for {op})",
                index.dtype.scalar_name()
            ),
        };
        return Err(Error::arg(
            op,
            format!(
                "{torch} ({what} must be an i32 tensor, got {:?})",
                index.dtype
            ),
        ));
    }
    Ok(())
}

impl Tensor {
    /// PyTorch's `torch.gather(self, dim, index)`: `out[i][j][k] = self[index[i][j][k]][j][k]`
    /// for `dim = 0` (and so on). `index` is an i32 tensor of the same rank whose size along
    /// every other dim is at most `self`'s; the result has `index`'s shape and `self`'s dtype.
    /// Out-of-range indices are an error at the next sync or readback (see the
    /// [module docs](crate::ops::index)). Differentiable
    /// in `self` (the gradient scatter-adds back, deterministically).
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{Device, Tensor};
    /// let dev = Device::new()?;
    /// let logp = Tensor::from_slice(&dev, &[-0.1f32, -2.3, -1.2, -0.4], &[2, 2])?;
    /// let target = Tensor::from_slice(&dev, &[1i32, 0], &[2, 1])?;
    /// assert_eq!(logp.gather(1, &target)?.to_vec::<f32>()?, vec![-2.3, -1.2]);
    /// # Ok(()) }
    /// ```
    pub fn gather(&self, dim: isize, index: &Tensor) -> Result<Tensor> {
        let op = "gather";
        self.same_device(op, index)?;
        // The dim first (gather's meta function wraps it before anything else).
        let d = Layout::normalize_dim(op, dim, self.rank().max(1))?;
        // PyTorch checks the index's dtype only when it has elements.
        if index.numel() != 0 {
            require_index(op, "index", index)?;
        }
        if self.rank().max(index.rank()) == 1 && self.rank() != index.rank() {
            // PyTorch counts a scalar as one dim of size 1 here.
            return self
                .reshape(&[self.numel()])?
                .gather(dim, &index.reshape(&[index.numel()])?)?
                .reshape(index.shape());
        }
        if index.numel() == 0 {
            // PyTorch returns a new empty tensor of the index's shape before its shape
            // checks; its GatherBackward0 node (saving self and the index) gives zeros.
            let out = Tensor::empty(self.device(), op, index.shape(), self.dtype)?;
            return Ok(record(out, &[self], |_| {
                Box::new(EmptyGatherBackward {
                    shape: self.shape().to_vec(),
                    kept: [self.detach(), index.detach()],
                })
            }));
        }
        if index.rank() != self.rank() {
            return Err(Error::shape(
                op,
                format!(
                    "Index tensor must have the same number of dimensions as input tensor \
                     (index shape {:?}, input shape {:?})",
                    index.shape(),
                    self.shape()
                ),
            ));
        }
        for k in 0..self.rank() {
            if k != d && index.shape()[k] > self.shape()[k] {
                return Err(Error::shape(
                    op,
                    format!(
                        "Size does not match at dimension {k} expected index {:?} to be no \
                         larger than self {:?} apart from dimension {d}",
                        index.shape(),
                        self.shape()
                    ),
                ));
            }
        }
        check_indices(
            op,
            index,
            self.shape().get(d).copied().unwrap_or(1),
            d,
            None,
        )?;
        let out = gather_forward(op, self, d, &index.layout, index)?;
        // The backward's scatter binds the index whole: a packed copy of a view.
        let saved = match crate::autograd::records([self]) {
            true => Some(index.contiguous_at_zero()?),
            false => None,
        };
        Ok(record(out, &[self], |_| {
            let saved = saved.unwrap_or_else(|| index.clone());
            Box::new(GatherBackward {
                op,
                shape: self.shape().to_vec(),
                dim: d,
                index_layout: saved.layout.clone(),
                index: saved,
                skip: -1,
                rows: false,
                // gather_backward(grad, self, dim, index): PyTorch's node saves self and
                // the caller's index.
                watched: vec![self.detach(), index.detach()],
            })
        }))
    }

    /// PyTorch's `torch.index_select(self, dim, index)`: the entries of `self` along `dim` at
    /// the positions `index` (a 1-D i32 tensor) lists, in its order, repeats allowed. The
    /// result has `self`'s shape with `dim` resized to `index`'s length. Out-of-range indices are
    /// an error at the next sync or readback, as in PyTorch (an index into an empty `dim` of a
    /// self of rank 2 or more is refused at once: "self indexing axis dim should be
    /// positive"); unchecked, they
    /// read NaN (see the [module docs](crate::ops::index)). Differentiable in `self`. A scalar
    /// `self` takes a one-value index and gives a scalar, as in PyTorch.
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{Device, Tensor};
    /// let dev = Device::new()?;
    /// let x = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2])?;
    /// let rows = Tensor::from_slice(&dev, &[2i32, 0, 2], &[3])?;
    /// let y = x.index_select(0, &rows)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![5.0, 6.0, 1.0, 2.0, 5.0, 6.0]);
    /// # Ok(()) }
    /// ```
    pub fn index_select(&self, dim: isize, index: &Tensor) -> Result<Tensor> {
        let op = "index_select";
        // PyTorch's order: the dim, the index's rank, a scalar's one value, then its dtype.
        Layout::normalize_dim(op, dim, self.rank().max(1))?;
        vector_index(op, index)?;
        if self.rank() == 0 {
            // PyTorch: a scalar's dim 0 / -1 holds one value, picked by a one-value index;
            // the result is a scalar.
            Layout::normalize_dim(op, dim, 1)?;
            if index.numel() != 1 {
                return Err(Error::arg(
                    op,
                    format!(
                        "index_select(): Index to scalar can have only 1 value, got {} value(s)",
                        index.numel()
                    ),
                ));
            }
            return index_select_impl(&self.unsqueeze(0)?, op, 0, index, index, -1)?.reshape(&[]);
        }
        index_select_impl(self, op, dim, index, index, -1)
    }

    /// PyTorch's out-of-place `self.scatter_add(dim, index, src)`: a copy of `self` to which
    /// each `src[i][j][k]` is added at `[index[i][j][k]][j][k]` (for `dim = 0`). `index` (i32)
    /// and `src` have `self`'s rank; `index` is no larger than `src` on every dim and no larger
    /// than `self` on every dim but `dim`; `self` and `src` have one dtype. Sums start from
    /// `self`'s element and run in index order (PyTorch's CPU order; on GPUs an output of more
    /// than 256 values sums them in lanes folded in a fixed tree), in f32 for floats and in
    /// i32 for i32 data (wrapping on overflow, as PyTorch's
    /// int32 adds): deterministic (no atomics); below 64 index entries along `dim` every output
    /// element scans them, above the index is bucketed (the [module docs](crate::ops::index)
    /// say how). Out-of-range indices are an error at the next sync or readback (unchecked,
    /// they add nothing). Differentiable in `self` and `src` (src's gradient is the output's
    /// gathered at `index`, zero past `index`'s extent where `src` is larger: PyTorch's
    /// engine refuses that case, whose gradient has `index`'s shape, not `src`'s).
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{DType, Device, Tensor};
    /// let dev = Device::new()?;
    /// let counts = Tensor::zeros(&dev, &[3], DType::F32)?;
    /// let labels = Tensor::from_slice(&dev, &[2i32, 0, 2, 2], &[4])?;
    /// let ones = Tensor::ones(&dev, &[4], DType::F32)?;
    /// let hist = counts.scatter_add(0, &labels, &ones)?;
    /// assert_eq!(hist.to_vec::<f32>()?, vec![1.0, 0.0, 3.0]);
    /// # Ok(()) }
    /// ```
    pub fn scatter_add(&self, dim: isize, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        let op = "scatter_add";
        self.same_device(op, index)?;
        self.same_device(op, src)?;
        // scatter_meta_impl's order: the dim, then scatter_gather_dtype_check's: the index's
        // dtype (only when it has elements), then self's against src's.
        Layout::normalize_dim(op, dim, self.rank().max(1))?;
        if index.numel() != 0 {
            require_index(op, "index", index)?;
        }
        if self.dtype != src.dtype {
            return Err(Error::arg(
                op,
                format!(
                    "scatter(): Expected self.dtype to be equal to src.dtype (self {:?}, src {:?})",
                    self.dtype, src.dtype
                ),
            ));
        }
        let ranks = [self.rank(), index.rank(), src.rank()];
        if ranks.iter().max() == Some(&1) && ranks.contains(&0) {
            // PyTorch counts a scalar as one dim of size 1 here.
            let flat = |t: &Tensor| t.reshape(&[t.numel()]);
            return flat(self)?
                .scatter_add(dim, &flat(index)?, &flat(src)?)?
                .reshape(self.shape());
        }
        let d = Layout::normalize_dim(op, dim, self.rank().max(1))?;
        if index.numel() == 0 {
            // PyTorch copies self and returns before its shape checks (an i32 self too).
            return self.deep_clone();
        }
        // PyTorch's scatter_shape_check words (where src's rank is short it fails earlier,
        // on a dim out of range, and the message here is ours).
        // A 0-d tensor counts as 1-d there (ensure_nonempty_dim).
        for (other, what) in [(self, "self"), (src, "src")] {
            if index.rank().max(1) != other.rank().max(1) {
                return Err(Error::shape(
                    op,
                    format!(
                        "Index tensor must have the same number of dimensions as {what} tensor \
                         (self {:?}, index {:?}, src {:?})",
                        self.shape(),
                        index.shape(),
                        src.shape()
                    ),
                ));
            }
        }
        for k in 0..self.rank() {
            let (i, s, x) = (index.shape()[k], src.shape()[k], self.shape()[k]);
            if i > s || (k != d && i > x) {
                return Err(Error::shape(
                    op,
                    format!(
                        "Expected index {:?} to be no larger than self {:?} apart from \
                         dimension {d} and to be no larger size than src {:?}",
                        index.shape(),
                        self.shape(),
                        src.shape()
                    ),
                ));
            }
        }
        check_indices(
            op,
            index,
            self.shape().get(d).copied().unwrap_or(1),
            d,
            None,
        )?;
        let out = scatter_add_forward(
            op,
            Some(self),
            self.shape(),
            d,
            index,
            &index.layout,
            src,
            -1,
        )?;
        Ok(record(out, &[self, src], |_| {
            Box::new(ScatterAddBackward {
                dim: d,
                // Only src's gradient reads it (PyTorch saves it only then): with src
                // untracked the node saves nothing and serves any number of passes.
                index: src.is_tracked().then(|| index.clone()),
                src_shape: src.shape().to_vec(),
            })
        }))
    }
}

/// PyTorch's `F.embedding(input, weight, padding_idx)`: the rows of `weight` (`[V, E]`) at
/// the i32 indices `input` (any shape), giving `input.shape + [E]`. The row `padding_idx`
/// (negative counts from the end) gets no gradient, as in PyTorch; its forward value is the
/// row as it is. Out-of-range indices are an error at the next sync or readback (see the
/// [module docs](crate::ops::index)); any index into a table of 0 rows is refused at once.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::{ops, Device, Tensor};
/// let dev = Device::new()?;
/// let table = Tensor::from_slice(&dev, &[0.0f32, 0.0, 1.0, 2.0, 3.0, 4.0], &[3, 2])?;
/// let ids = Tensor::from_slice(&dev, &[2i32, 1, 0, 2], &[2, 2])?;
/// let e = ops::embedding(&ids, &table, Some(0))?;
/// assert_eq!(e.shape(), &[2, 2, 2]);
/// assert_eq!(e.to_vec::<f32>()?, vec![3.0, 4.0, 1.0, 2.0, 0.0, 0.0, 3.0, 4.0]);
/// # Ok(()) }
/// ```
pub fn embedding(input: &Tensor, weight: &Tensor, padding_idx: Option<i64>) -> Result<Tensor> {
    let op = "embedding";
    input.same_device(op, weight)?;
    // F.embedding's order: padding_idx against weight.size(0) (0 always passes), then ATen's
    // weight rank, then the indices' dtype.
    let v = weight.shape().first().map_or(0, |&v| v as i64);
    let skip = match padding_idx {
        None => -1,
        Some(p) if p == 0 || (-v..v).contains(&p) => (if p < 0 { p + v } else { p }) as i32,
        Some(p) => {
            return Err(Error::arg(
                op,
                format!(
                    "Padding_idx must be within num_embeddings (padding_idx {p}, num_embeddings \
                     {v})"
                ),
            ))
        }
    };
    if weight.rank() != 2 {
        return Err(Error::shape(
            op,
            format!(
                "'weight' must be 2-D ([num_embeddings, embedding_dim]), got {:?}",
                weight.shape()
            ),
        ));
    }
    require_index(op, "input", input)?;
    let flat = input.reshape_untracked(&[input.numel()])?;
    let rows = index_select_impl(weight, op, 0, &flat, input, skip)?;
    let mut shape = input.shape().to_vec();
    shape.push(weight.shape()[1]);
    rows.reshape(&shape)
}

/// `out[c] = base[c] + sum_j src[c with dim = j] * (index[c with dim = j] == c[dim])` over
/// `shape`, reading the index through `il` (whose shape bounds the contributing region) and
/// skipping the row `skip` (-1: none).
#[allow(clippy::too_many_arguments)]
fn scatter_add_forward(
    op: &'static str,
    base: Option<&Tensor>,
    shape: &[usize],
    dim: usize,
    index: &Tensor,
    il: &Layout,
    src: &Tensor,
    skip: i32,
) -> Result<Tensor> {
    if il == &index.layout {
        if let Some(out) = scatter_rows(op, base, shape, dim, index, src, skip)? {
            return Ok(out);
        }
    }
    let dev = src.device();
    let len = il.shape().get(dim).copied().unwrap_or(1);
    let numel: usize = shape.iter().product();
    let rows = shape.get(dim).copied().unwrap_or(1);
    if len >= SCATTER_ROWS_MIN_LEN
        && numel > 0
        && crate::ops::segment::scatter_fits(dev, numel, il.numel(), rows)
    {
        let out = crate::ops::segment::scatter_add(op, base, shape, dim, index, il, src, skip)?;
        return Ok(out);
    }
    let out = Tensor::empty(dev, op, shape, src.dtype)?;
    if numel == 0 {
        return Ok(out);
    }
    let mut p = IndexParams::zeroed();
    p.numel = numel as u32;
    p.rank = shape.len() as u32;
    p.dim = dim as u32;
    p.len = len as u32;
    p.off_x = src.layout.offset() as u32;
    p.off_i = il.offset() as u32;
    p.skip = skip;
    p.shape = pack_dims(shape);
    p.sx = pack_dims(src.strides());
    p.si = pack_dims(il.strides());
    p.ishape = pack_dims(il.shape());
    if let Some(b) = base {
        p.off_s = b.layout.offset() as u32;
        p.ss = pack_dims(b.strides());
    }
    // Without a base the src buffer fills the unused binding (read-only twice is allowed).
    let base_buf = base.map_or(src.buffer(), |b| b.buffer());
    dev.launch(
        op,
        &SCATTER_ADD,
        &[src.dtype],
        &overrides(src.dtype, base.is_some()),
        bytemuck::bytes_of(&p),
        &[src.buffer(), index.buffer(), base_buf, out.buffer()],
        grid(op, src, numel)?,
    )?;
    Ok(out)
}

/// index_select through a broadcast view of the 1-D index, so gather does the work; `skip` is
/// the row that gets no gradient (embedding's padding_idx).
/// Index extents along `dim` from which [`scatter_rows`] and the general bucketed scatter take
/// over: below them the gather form (each output scanning the index along `dim`) is cheap.
const SCATTER_ROWS_MIN_LEN: usize = 64;

/// [`scatter_add_forward`] through the bucketed row scatter of src/ops/segment.rs when the
/// index is one 1-D index broadcast over every other dim (stride 0 there, `idx.unsqueeze(1)
/// .expand(..)` as graph aggregations write it) and covers the output on those dims: the
/// gather form costs every output a scan of the whole index along `dim` (quadratic: a
/// million-edge aggregation would be 10^12 steps), the buckets O(L + outputs). Same sums in
/// the same order (from the base, then ascending position), so the result is bitwise the gather
/// form's up to 256 values per output (past that, on GPUs, lanes folded in a fixed tree).
/// `None` where the form does not apply.
fn scatter_rows(
    op: &'static str,
    base: Option<&Tensor>,
    shape: &[usize],
    dim: usize,
    index: &Tensor,
    src: &Tensor,
    skip: i32,
) -> Result<Option<Tensor>> {
    let (is, ist) = (index.shape(), index.strides());
    let len = is.get(dim).copied().unwrap_or(0);
    let broadcast_1d = (0..is.len()).all(|k| k == dim || (ist[k] == 0 && is[k] == shape[k]));
    // Its row sums are float kernels (i32 data takes the general bucketed scatter); they start
    // from the base, so f16 rounds once, as the gather form.
    if len < SCATTER_ROWS_MIN_LEN || !broadcast_1d || !src.dtype.is_float() || index.numel() == 0 {
        return Ok(None);
    }
    // Untracked views: the caller records the op as a whole.
    let (index, mut g) = (index.detach(), src.detach());
    let mut idx = index.clone();
    for (k, &extent) in is.iter().enumerate() {
        g = g.narrow(k as isize, 0usize, extent)?;
        if k != dim {
            idx = idx.narrow(k as isize, 0usize, 1)?;
        }
    }
    let idx = idx.reshape(&[len])?;
    let inner: usize = shape[dim + 1..].iter().product();
    let out =
        crate::ops::segment::index_add_rows(op, &g, &idx, shape[dim], inner, shape, skip, base)?;
    Ok(Some(out))
}

/// index_select's index is at most 1-D (PyTorch's first check, before the dtype's).
fn vector_index(op: &'static str, index: &Tensor) -> Result<()> {
    if index.rank() > 1 {
        return Err(Error::shape(
            op,
            format!(
                "index_select(): Index is supposed to be a vector (index must be 1-D, got shape \
                 {:?})",
                index.shape()
            ),
        ));
    }
    Ok(())
}

/// `caller_index` is the index as the caller gave it (embedding's input before it was
/// flattened), which the node keeps for the version check, as PyTorch's saves it.
fn index_select_impl(
    x: &Tensor,
    op: &'static str,
    dim: isize,
    index: &Tensor,
    caller_index: &Tensor,
    skip: i32,
) -> Result<Tensor> {
    x.same_device(op, index)?;
    vector_index(op, index)?;
    require_index(op, "index", index)?;
    if x.rank() == 0 {
        return Err(Error::shape(
            op,
            "input must have at least one dim, got a scalar",
        ));
    }
    let d = Layout::normalize_dim(op, dim, x.rank())?;
    // PyTorch's CPU kernel refuses any index into an empty dim of an empty self of rank > 1
    // at once (test_dim_function_empty), before its bound checks.
    if x.rank() > 1 && x.shape()[d] == 0 && index.numel() > 0 {
        return Err(Error::arg(
            op,
            "index_select(): self indexing axis dim should be positive",
        ));
    }
    // The index is lifted to x's rank by a reshape of its layout, which a strided view (a
    // column, a broadcast) has not: pack it first. The backward's row scatter binds it
    // whole, so a window of a long token tensor is packed too (it is small).
    let packed = index.contiguous_at_zero()?;
    let index = &packed;
    check_indices(op, index, x.shape()[d], d, None)?;
    let l = index.numel();
    let mut out_shape = x.shape().to_vec();
    out_shape[d] = l;
    let mut lifted = vec![1; x.rank()];
    lifted[d] = l;
    let il = index
        .layout
        .reshape(&lifted)
        .ok_or_else(|| Error::shape(op, "internal: a 1-D index must reshape"))?
        .broadcast_to(&out_shape)?;
    let out = gather_forward(op, x, d, &il, index)?;
    Ok(record(out, &[x], |_| {
        Box::new(GatherBackward {
            op,
            shape: x.shape().to_vec(),
            dim: d,
            index: index.clone(),
            index_layout: il,
            skip,
            rows: true,
            watched: vec![caller_index.detach()],
        })
    }))
}

/// gather over an empty index: a zero gradient of the input's shape.
struct EmptyGatherBackward {
    shape: Vec<usize>,
    /// Self and the index, which PyTorch's node saves (for the version check only).
    kept: [Tensor; 2],
}

impl BackwardOp for EmptyGatherBackward {
    fn saved(&self) -> Vec<&Tensor> {
        self.kept.iter().collect()
    }

    fn name(&self) -> &'static str {
        "gather"
    }

    fn backward(&self, grads: &[Option<Tensor>], _needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = grads.first().and_then(Option::as_ref) else {
            return Ok(vec![None]);
        };
        Ok(vec![Some(Tensor::zeros(
            g.device(),
            &self.shape,
            g.dtype(),
        )?)])
    }
}

/// gather / index_select / embedding: the gradient scatter-adds back into the input's shape.
struct GatherBackward {
    op: &'static str,
    shape: Vec<usize>,
    dim: usize,
    index: Tensor,
    index_layout: Layout,
    skip: i32,
    /// index_select and embedding: `index` is 1-D and every slice along `dim` is a whole row,
    /// so the bucketed row scatter (ops/segment.rs) applies.
    rows: bool,
    /// A tensor PyTorch's node saves beside the index (kept for the version check only):
    /// gather's self, index_select's and embedding's index as the caller gave it.
    watched: Vec<Tensor>,
}

impl BackwardOp for GatherBackward {
    fn saved(&self) -> Vec<&Tensor> {
        std::iter::once(&self.index).chain(&self.watched).collect()
    }

    fn name(&self) -> &'static str {
        self.op
    }

    fn backward(&self, grads: &[Option<Tensor>], _needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = grads.first().and_then(Option::as_ref) else {
            return Ok(vec![None]);
        };
        if self.rows {
            let rows = self.shape[self.dim];
            let inner: usize = self.shape[self.dim + 1..].iter().product();
            let gx = crate::ops::segment::index_add_rows(
                self.op,
                g,
                &self.index,
                rows,
                inner,
                &self.shape,
                self.skip,
                None,
            )?;
            return Ok(vec![Some(gx)]);
        }
        let gx = scatter_add_forward(
            self.op,
            None,
            &self.shape,
            self.dim,
            &self.index,
            &self.index_layout,
            g,
            self.skip,
        )?;
        Ok(vec![Some(gx)])
    }
}

struct ScatterAddBackward {
    dim: usize,
    index: Option<Tensor>,
    src_shape: Vec<usize>,
}

impl BackwardOp for ScatterAddBackward {
    fn saved(&self) -> Vec<&Tensor> {
        self.index.iter().collect()
    }

    fn name(&self) -> &'static str {
        "scatter_add"
    }

    fn backward(&self, grads: &[Option<Tensor>], needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = grads.first().and_then(Option::as_ref) else {
            return Ok(vec![None, None]);
        };
        let g_self = (needs.first() == Some(&true)).then(|| g.clone());
        let g_src = if let (Some(index), true) = (&self.index, needs.get(1) == Some(&true)) {
            // src entries outside the index's extent receive nothing: pad with zeros.
            let mut picked = gather_forward("scatter_add", g, self.dim, &index.layout, index)?;
            if !g.device().options().check_indices {
                // Unchecked, an out-of-range index added nothing, so its source gets no
                // gradient (the gather reads NaN there).
                let len = g.shape().get(self.dim).copied().unwrap_or(1) as f64;
                let out = index.lt_scalar(0.0)?.add(&index.ge_scalar(len)?)?;
                picked = picked.masked_fill(&out, 0.0)?;
            }
            let pads: Vec<usize> = index
                .shape()
                .iter()
                .zip(&self.src_shape)
                .rev()
                .flat_map(|(&i, &s)| [0, s - i])
                .collect();
            if pads.iter().all(|&p| p == 0) {
                Some(picked)
            } else {
                Some(crate::ops::pad(
                    &picked,
                    &pads,
                    crate::ops::PadMode::Constant,
                    0.0,
                )?)
            }
        } else {
            None
        };
        Ok(vec![g_self, g_src])
    }
}
