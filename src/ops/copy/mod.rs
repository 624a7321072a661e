//! Shape ops that move data (shaders/copy.wgsl): `cat`, `stack`, `copy_from` and `deep_clone`
//! here, `pad` (constant, reflect, replicate, circular) in pad.rs, with PyTorch's names and
//! semantics (the view-only `split` and `chunk` are in view_grad.rs).
//! Inputs are read through their strides; outputs are contiguous.

use bytemuck::{Pod, Zeroable};

use crate::layout::{pack_dims, Layout, MAX_RANK};
use crate::runtime::pipeline::ShaderVariant;
use crate::runtime::{Access, Kernel};
use crate::{DType, Error, Result, Tensor};

mod pad;
pub use pad::{pad, PadMode};

const WG: u32 = 256;
const SRC: &str = include_str!("../../../shaders/copy.wgsl");
const PAD_CONSTANT: u32 = 0;
const PAD_REFLECT: u32 = 1;
const PAD_REPLICATE: u32 = 2;
const PAD_CIRCULAR: u32 = 3;
const COPY_DEFS: &[(&str, u32)] = &[
    ("PAD_CONSTANT", PAD_CONSTANT),
    ("PAD_REFLECT", PAD_REFLECT),
    ("PAD_REPLICATE", PAD_REPLICATE),
    ("PAD_CIRCULAR", PAD_CIRCULAR),
];

static COPY_INTO: Kernel =
    Kernel::new("copy", SRC, "copy_into", &[Access::Read, Access::ReadWrite])
        .defs(COPY_DEFS)
        .ints();
static PAD: Kernel = Kernel::new("copy", SRC, "pad", &[Access::Read, Access::ReadWrite])
    .defs(COPY_DEFS)
    .ints();

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct CopyParams {
    numel: u32,
    rank: u32,
    src_off: u32,
    dst_off: u32,
    value: f32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
    shape: [u32; MAX_RANK],
    src_strides: [u32; MAX_RANK],
    aux: [u32; MAX_RANK],
    before: [u32; MAX_RANK],
}

/// Copies `src` into the region `dst` (a view of a contiguous output with the same shape).
fn copy_into(op: &'static str, src: &Tensor, dst: &Tensor) -> Result<()> {
    let n = src.numel();
    if n == 0 {
        return Ok(());
    }
    let dev = src.device();
    // On a CPU adapter, packed and 4-byte aligned pieces (`cat` along dim 0, `copy_from` a
    // packed source) go by a buffer copy: a memcpy there, several times the kernel's rate. Not
    // on GPUs: an H200's `copy_buffer_to_buffer` moved 797 GB/s where a shader copy moves
    // several TB/s (docs/BENCHMARKS.md).
    let es = src.dtype.size() as u64;
    let (from, to, bytes) = (
        src.layout.offset() as u64 * es,
        dst.layout.offset() as u64 * es,
        n as u64 * es,
    );
    if dev.caps().cpu
        && src.is_contiguous()
        && dst.is_contiguous()
        && src.dtype == dst.dtype
        && !src.shares_storage(dst)
        && (from | to | bytes).is_multiple_of(4)
    {
        return dev.copy_buffer(op, src.buffer(), from, dst.buffer(), to, bytes);
    }
    // Only the elements the views span are bound: a row of a base past one binding (a KV
    // cache's slot, `logits[:, -1]`) fits where the whole buffer does not.
    let (xs, ys) = (src.view_span(), dst.view_span());
    let params = CopyParams {
        numel: n as u32,
        rank: src.rank() as u32,
        src_off: xs.rel as u32,
        dst_off: ys.rel as u32,
        value: 0.0,
        _pad0: 0,
        _pad1: 0,
        _pad2: 0,
        shape: pack_dims(src.shape()),
        src_strides: pack_dims(src.strides()),
        aux: pack_dims(dst.strides()),
        before: [0; MAX_RANK],
    };
    dev.launch_binds(
        op,
        &COPY_INTO,
        &[src.dtype],
        &[("MODE", 0.0), ("WG", WG as f64)],
        bytemuck::bytes_of(&params),
        &[xs.bind(src.buffer()), ys.bind(dst.buffer())],
        dev.grid_1d(op, (n as u64).div_ceil(WG as u64))?,
    )
}

/// PyTorch's `torch.cat`: joins tensors of the same rank along `dim`, their other dims equal.
/// Mixed dtypes are promoted as PyTorch's (`i32` < `f16` < `f32`). A `[0]` tensor is skipped,
/// as PyTorch allows for legacy reasons.
pub fn cat(tensors: &[&Tensor], dim: isize) -> Result<Tensor> {
    let promoted = tensors
        .iter()
        .map(|t| t.dtype())
        .reduce(crate::dtype::promote);
    if let Some(dt) = promoted.filter(|&dt| tensors.iter().any(|t| t.dtype() != dt)) {
        // Converted (differentiably) first, each part then joined as one dtype.
        let converted = tensors
            .iter()
            .map(|t| t.to_dtype(dt))
            .collect::<Result<Vec<_>>>()?;
        return cat(&converted.iter().collect::<Vec<_>>(), dim);
    }
    let out = cat_untracked(tensors, dim)?;
    let joined = tensors.iter().any(|t| !is_legacy_empty(t));
    if !joined {
        // Every input is a legacy empty [0]: a new empty tensor, a node of its own whose
        // backward gives each input its empty gradient, as PyTorch's.
        let empty = Tensor::zeros(out.device(), &[0], out.dtype())?;
        return Ok(crate::autograd::record(empty, tensors, |_| {
            Box::new(CatBackward {
                dim: 0,
                ranges: vec![None; tensors.len()],
            })
        }));
    }
    let d = Layout::normalize_dim("cat", dim, out.rank())?;
    Ok(crate::autograd::record(out, tensors, |_| {
        Box::new(CatBackward {
            dim: d,
            // (start, len) of each input along dim; None for the skipped [0] tensors.
            ranges: tensors
                .iter()
                .scan(0usize, |start, t| {
                    Some(if is_legacy_empty(t) {
                        None
                    } else {
                        let len = t.shape()[d];
                        *start += len;
                        Some((*start - len, len))
                    })
                })
                .collect(),
        })
    }))
}

/// A `[0]` tensor, which cat skips.
fn is_legacy_empty(t: &Tensor) -> bool {
    t.rank() == 1 && t.numel() == 0
}

/// cat's backward: each input's slice of the gradient.
struct CatBackward {
    dim: usize,
    ranges: Vec<Option<(usize, usize)>>,
}

impl crate::autograd::BackwardOp for CatBackward {
    fn saved(&self) -> Vec<&Tensor> {
        Vec::new()
    }

    fn name(&self) -> &'static str {
        "cat"
    }

    fn backward(&self, grads: &[Option<Tensor>], needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = grads.first().and_then(Option::as_ref) else {
            return Ok(vec![None; needs.len()]);
        };
        self.ranges
            .iter()
            .zip(needs)
            .map(|(r, &need)| match r {
                Some((start, len)) if need => {
                    Ok(Some(g.narrow(self.dim as isize, *start, *len)?))
                }
                // A skipped `[0]` input still gets its (empty) gradient, as in PyTorch.
                None if need => Ok(Some(Tensor::zeros(g.device(), &[0], g.dtype())?)),
                _ => Ok(None),
            })
            .collect()
    }
}

fn cat_untracked(tensors: &[&Tensor], dim: isize) -> Result<Tensor> {
    let op = "cat";
    let parts: Vec<&Tensor> = tensors
        .iter()
        .copied()
        .filter(|t| !(t.rank() == 1 && t.numel() == 0))
        .collect();
    let Some(first) = parts.first().copied().or(tensors.first().copied()) else {
        return Err(Error::arg(
            op,
            "torch.cat(): expected a non-empty list of Tensors",
        ));
    };
    // Every input checked for rank 0 first, as PyTorch's cat_check_no_zero_dim.
    if let Some(i) = tensors.iter().position(|t| t.rank() == 0) {
        return Err(Error::shape(
            op,
            format!("zero-dimensional tensor (at position {i}) cannot be concatenated"),
        ));
    }
    if parts.is_empty() {
        return Ok(first.clone());
    }
    let rank = first.rank();
    let d = Layout::normalize_dim(op, dim, rank)?;
    // Positions in the caller's list (the legacy empty [0] inputs were left out of `parts`).
    let position = |t: &Tensor| {
        tensors
            .iter()
            .position(|u| std::ptr::eq(*u, t))
            .unwrap_or(0)
    };
    let mut total = 0usize;
    for t in &parts {
        first.same_device(op, t)?;
        first.same_dtype(op, t)?;
        if t.rank() != rank {
            return Err(Error::shape(
                op,
                format!(
                    "Tensors must have same number of dimensions: got {rank} and {} (tensor {} \
                     has shape {:?}, tensor {} has shape {:?})",
                    t.rank(),
                    position(first),
                    first.shape(),
                    position(t),
                    t.shape()
                ),
            ));
        }
        let same = (0..rank).all(|k| k == d || t.shape()[k] == first.shape()[k]);
        if !same {
            let k = (0..rank)
                .find(|&k| k != d && t.shape()[k] != first.shape()[k])
                .unwrap_or(0);
            return Err(Error::shape(
                op,
                format!(
                    "Sizes of tensors must match except in dimension {d}. Expected size {} but \
                     got size {} for tensor number {} in the list (tensor {} has shape {:?}, \
                     tensor {} has shape {:?})",
                    first.shape()[k],
                    t.shape()[k],
                    position(t),
                    position(first),
                    first.shape(),
                    position(t),
                    t.shape()
                ),
            ));
        }
        total = total
            .checked_add(t.shape()[d])
            .ok_or_else(|| Error::size(op, "the joined size overflows"))?;
    }
    let mut shape = first.shape().to_vec();
    shape[d] = total;
    let out = Tensor::empty(first.device(), op, &shape, first.dtype)?;
    let mut start = 0;
    for t in &parts {
        let len = t.shape()[d];
        copy_into(op, t, &out.narrow(d as isize, start, len)?)?;
        start += len;
    }
    Ok(out)
}

/// PyTorch's `torch.stack`: tensors of one shape joined along a new dim `dim`
/// (`0..=rank`; negative counts from `rank + 1`).
pub fn stack(tensors: &[&Tensor], dim: isize) -> Result<Tensor> {
    let op = "stack";
    let Some(first) = tensors.first() else {
        return Err(Error::arg(op, "stack expects a non-empty TensorList"));
    };
    // The dim first, as ATen's stack wraps it before comparing the sizes.
    let d = Layout::normalize_dim(op, dim, first.rank() + 1)? as isize;
    for (i, t) in tensors.iter().enumerate() {
        if t.shape() != first.shape() {
            return Err(Error::shape(
                op,
                format!(
                    "stack expects each tensor to be equal size, but got {:?} at entry 0 and \
                     {:?} at entry {i}",
                    first.shape(),
                    t.shape()
                ),
            ));
        }
    }
    let views = tensors
        .iter()
        .map(|t| t.unsqueeze(d))
        .collect::<Result<Vec<_>>>()?;
    let refs: Vec<&Tensor> = views.iter().collect();
    // Every view has size 1 at d, so no [0] tensor is skipped by cat.
    cat(&refs, d)
}

/// The element range `[begin, end)` a view covers when it is dense and does not overlap
/// itself (its strides, size-1 dims aside, a permutation of a packed layout's), as PyTorch's
/// is_non_overlapping_and_dense; `None` otherwise, or when it is empty.
fn dense_span(l: &Layout) -> Option<(usize, usize)> {
    let numel = l.numel();
    if numel == 0 {
        return None;
    }
    let mut dims: Vec<(usize, usize)> = l
        .shape()
        .iter()
        .zip(l.strides())
        .filter(|(&d, _)| d != 1)
        .map(|(&d, &s)| (s, d))
        .collect();
    dims.sort_unstable();
    let mut expected = 1usize;
    for (s, d) in dims {
        if s != expected {
            return None;
        }
        expected = expected.checked_mul(d)?;
    }
    Some((l.offset(), l.offset() + numel))
}

/// PyTorch's words for a written-to tensor that repeats elements (assert_no_internal_overlap).
pub(crate) const INTERNAL_OVERLAP: &str = "unsupported operation: more than one element of the \
     written-to tensor refers to a single memory location. Please clone() the tensor before \
     performing the operation.";

/// PyTorch's words for a source that shares some of the written-to tensor's elements
/// (assert_no_partial_overlap).
pub(crate) const PARTIAL_OVERLAP: &str = "unsupported operation: some elements of the input \
     tensor and the written-to tensor refer to a single memory location. Please clone() the \
     tensor before performing the operation.";

/// PyTorch's partial-overlap error (TensorIterator's assert_no_partial_overlap, through
/// get_overlap_status) when `dst` and `src` share storage, both dense, and cover some of the
/// same elements without being the same view; `None` otherwise (a view that is not dense is
/// too hard to tell, as there, and copied through a clone).
pub(crate) fn partial_overlap(dst: &Tensor, src: &Tensor) -> Option<String> {
    if !src.shares_storage(dst) {
        return None;
    }
    let (a, b) = (dense_span(&dst.layout)?, dense_span(&src.layout)?);
    let full = a == b && dst.strides() == src.strides();
    (!full && a.0 < b.1 && b.0 < a.1).then(|| {
        format!(
            "{PARTIAL_OVERLAP} (destination elements {}..{}, source elements {}..{} of one \
             storage)",
            a.0, a.1, b.0, b.1
        )
    })
}

impl Tensor {
    /// Copies `src` into this tensor's elements in place (PyTorch's `copy_`): every view
    /// sharing the storage sees the new values. As PyTorch's, `src` may have any layout, any
    /// shape that broadcasts to this one (a row copied into every row) and another dtype
    /// (converted as [`Tensor::to_dtype`]). A source sharing this tensor's storage is read whole
    /// before the write, except where PyTorch refuses it: both views dense and their elements
    /// partly the same (a shifted window, a transpose of the destination, one of its rows), an
    /// error in PyTorch's words; the very same view is left as it is. `self` must not repeat
    /// elements (a broadcast view). While
    /// autograd records, neither may be tracked (the copy is not differentiable): run it under
    /// [`no_grad`](crate::autograd::no_grad) or copy a detached source.
    pub fn copy_from(&self, src: &Tensor) -> Result<()> {
        let op = "copy_from";
        // Overwriting a tracked tensor would change values its graph saved (PyTorch refuses
        // in-place ops on leaves that require grad outside no_grad); a tracked source would
        // lose its gradient, since nothing records the copy (PyTorch's copy_ would carry it).
        super::gemm::grad::check_in_place(op, &[self, src])?;
        self.same_device(op, src)?;
        // copy_impl's early exit for the same data.
        if src.shares_storage(self) && src.layout == self.layout && src.dtype == self.dtype {
            self.bump_version();
            return Ok(());
        }
        // TensorIterator checks the output's own overlap, then the operands', before it
        // computes the broadcast shape.
        if self.layout.repeats_elements() {
            return Err(Error::arg(
                op,
                format!(
                    "{INTERNAL_OVERLAP} (the destination, shape {:?}, strides {:?}, repeats \
                     elements)",
                    self.shape(),
                    self.strides()
                ),
            ));
        }
        if let Some(words) = partial_overlap(self, src) {
            return Err(Error::arg(op, words));
        }
        if src.layout.broadcast_to(self.shape()).is_err() {
            // copy_'s TensorIterator words: infer_size over (self, src), or, where they
            // broadcast to more than self, the output's resize refusal.
            let words = match crate::layout::broadcast_shapes(op, self.shape(), src.shape()) {
                Err(e) => e.to_string(),
                Ok(b) => format!(
                    "output with shape {:?} doesn't match the broadcast shape {b:?}",
                    self.shape()
                ),
            };
            return Err(Error::shape(
                op,
                format!(
                    "{}: source shape {:?} does not broadcast to the destination's {:?}",
                    words.strip_prefix(&format!("{op}: ")).unwrap_or(&words),
                    src.shape(),
                    self.shape()
                ),
            ));
        }
        let converted;
        let src = if src.dtype != self.dtype {
            self.device().require_dtype(op, self.dtype)?;
            converted = src.to_dtype(self.dtype)?;
            &converted
        } else {
            src
        };
        let broadcast;
        let src = if src.shape() != self.shape() {
            broadcast = src.broadcast_to(self.shape())?;
            &broadcast
        } else {
            src
        };
        // A read binding may not alias the written one: copy an aliasing source first.
        let src = if src.shares_storage(self) {
            src.map_clone()?
        } else {
            src.clone()
        };
        copy_into(op, &src, self)?;
        self.bump_version();
        Ok(())
    }

    /// A packed copy in new storage, even when `self` is already packed.
    fn map_clone(&self) -> Result<Tensor> {
        self.packed_copy("copy_from")
    }

    fn packed_copy(&self, op: &'static str) -> Result<Tensor> {
        let out = Tensor::empty(self.device(), op, self.shape(), self.dtype)?;
        copy_into(op, self, &out)?;
        Ok(out)
    }

    /// A copy of the values in new, packed storage (PyTorch's `x.clone()`): later writes
    /// into either (`copy_from`, optimizer steps, `gemm_into`) leave the other as it was.
    /// Rust's [`Clone`] of a `Tensor` is a second handle to the same storage, as a second
    /// Python name for one tensor. Any dtype; differentiable, the gradient passing through
    /// unchanged, as PyTorch's `clone`.
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{DType, Device, Tensor};
    /// let dev = Device::new()?;
    /// let w = Tensor::zeros(&dev, &[2], DType::F32)?;
    /// let snapshot = w.deep_clone()?;
    /// w.copy_from(&Tensor::ones(&dev, &[2], DType::F32)?)?;
    /// assert_eq!(snapshot.to_vec::<f32>()?, vec![0.0, 0.0]);
    /// # Ok(()) }
    /// ```
    pub fn deep_clone(&self) -> Result<Tensor> {
        let out = self.packed_copy("deep_clone")?;
        Ok(super::view_grad::record_view(self, out, || {
            super::view_grad::ViewKind::Identity
        }))
    }
}

/// The copy family's entry in the kernel-family registry (`ops::families()`).
pub(crate) const FAMILY: crate::runtime::pipeline::Family = crate::runtime::pipeline::Family {
    name: "copy",
    shaders: &["copy.wgsl"],
    params: || vec![params_layout()],
    variants: copy_variants,
};

/// Every (kernel, dtypes, override constants) combination of this family's kernels, for
/// tests/shaders.rs to translate and validate each.
#[doc(hidden)]
pub fn copy_variants() -> Vec<ShaderVariant> {
    let mut v = Vec::new();
    for dt in [DType::F32, DType::F16, DType::I32] {
        v.push(ShaderVariant::new(
            &COPY_INTO,
            &[dt],
            &[("MODE", 0.0), ("WG", WG as f64)],
        ));
        for &(_, mode) in COPY_DEFS {
            v.push(ShaderVariant::new(
                &PAD,
                &[dt],
                &[("MODE", mode as f64), ("WG", WG as f64)],
            ));
        }
    }
    v
}

/// The params struct's layout, checked against the shader's `struct Params` in tests/shaders.rs.
#[doc(hidden)]
pub fn params_layout() -> crate::runtime::pipeline::ParamsLayout {
    crate::runtime::pipeline::params_layout!(
        COPY_INTO,
        &[DType::F32],
        CopyParams {
            numel,
            rank,
            src_off,
            dst_off,
            value,
            _pad0,
            _pad1,
            _pad2,
            shape,
            src_strides,
            aux,
            before
        }
    )
}
