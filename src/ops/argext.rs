//! argmax / argmin along a dim (shaders/argext.wgsl) and the max / min gradient routed through
//! them: PyTorch's `argmax(dim, keepdim)`, `argmin`, their flat forms, and the backward of
//! `max(dim)` / `min(dim)`, which sends each row's gradient to the index argmax (argmin)
//! returns.
//!
//! The kernels follow the reduction plans ([`reduce_plan`]) on GPUs: one invocation per output
//! where outputs are many and strided, a workgroup per output for long contiguous rows (one
//! invocation per row would leave a warp reading 32 separate rows, and a 150k vocabulary
//! serial per thread), and rows split into segments when even that leaves the device idle
//! (`argmax_all` of a large tensor). Candidates merge by value, then by the smaller index, so
//! every plan returns the index a serial scan finds. CPU adapters keep one invocation per
//! output: their workgroups run one per host thread.

use bytemuck::{Pod, Zeroable};

use crate::layout::{pack_dims, Layout, MAX_RANK};
use crate::ops::activation::ACTIVATION;
use crate::ops::reduce_plan::{reduce_plan, ReducePlan};
use crate::ops::wg::WG;
use crate::runtime::pipeline::ShaderVariant;
use crate::runtime::{Access, Bind, Caps, Kernel};
use crate::{DType, Error, Result, Tensor};

const SRC: &str = include_str!("../../shaders/argext.wgsl");

use Access::{Read as R, ReadWrite as RW};

/// The op codes (`OP`), emitted as WGSL constants.
const ARGEXT_DEFS: &[(&str, u32)] = &[("ARG_MAX", ARG_MAX), ("ARG_MIN", ARG_MIN)];
/// argmax (and max's gradient).
pub(crate) const ARG_MAX: u32 = 0;
/// argmin (and min's gradient).
pub(crate) const ARG_MIN: u32 = 1;

static ROWS: Kernel = Kernel::new("argext", SRC, "argext_rows", &[R, RW])
    .slots(&[1, 4])
    .libs(&[&ACTIVATION])
    .defs(ARGEXT_DEFS)
    .ints();
static WORKGROUP: Kernel = Kernel::new("argext", SRC, "argext_wg", &[R, RW])
    .slots(&[1, 4])
    .libs(&[&ACTIVATION])
    .defs(ARGEXT_DEFS)
    .ints();
static PARTS: Kernel = Kernel::new("argext", SRC, "argext_parts", &[R, R, RW])
    .slots(&[1, 2, 4])
    .libs(&[&ACTIVATION])
    .defs(ARGEXT_DEFS)
    .ints();
static ROUTE: Kernel = Kernel::new("argext", SRC, "argext_route", &[R, R, RW])
    .slots(&[2, 3, 5])
    .libs(&[&ACTIVATION])
    .defs(ARGEXT_DEFS)
    .ints();

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct ArgextParams {
    n_out: u32,
    rank: u32,
    dim: u32,
    len: u32,
    off_x: u32,
    segs: u32,
    seg_len: u32,
    off_g: u32,
    numel: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
    shape: [u32; MAX_RANK],
    sx: [u32; MAX_RANK],
    sg: [u32; MAX_RANK],
}

fn consts(code: u32) -> [(&'static str, f64); 2] {
    [("OP", code as f64), ("WG", WG as f64)]
}

#[doc(hidden)]
/// The plan of an argmax / argmin over `len` values `stride` apart for each of `n_out`
/// outputs: a pure function of the problem and the adapter (unit-tested without a GPU). GPUs
/// follow [`reduce_plan`] (the same memory-bound scan); CPU adapters keep one invocation per
/// output ([`ReducePlan::Rows`]), which uses their threads as well as any other plan.
pub fn argext_plan(caps: &Caps, n_out: usize, len: usize, stride: usize) -> ReducePlan {
    if caps.cpu {
        return ReducePlan::Rows;
    }
    reduce_plan(caps, n_out, len, stride)
}

/// The index of each row's first NaN or first extremum along `dim` (`code`: [`ARG_MAX`] or
/// [`ARG_MIN`]), as a contiguous i32 tensor of `x`'s shape with `dim` of size 1 (`x` of rank 0:
/// shape []). `dim` is normalized and within `x`'s rank (0 for rank 0).
fn index_along(x: &Tensor, op: &'static str, code: u32, dim: usize) -> Result<Tensor> {
    let len = x.shape().get(dim).copied().unwrap_or(1);
    if len == 0 {
        // The error kind of max/min over an empty dim (PyTorch raises one IndexError for all).
        return Err(Error::size(
            op,
            format!(
                "Expected reduction dim {dim} to have non-zero size (shape {:?})",
                x.shape()
            ),
        ));
    }
    let mut kept = x.shape().to_vec();
    if let Some(k) = kept.get_mut(dim) {
        *k = 1;
    }
    let dev = x.device();
    let out = Tensor::empty(dev, op, &kept, DType::I32)?;
    let n_out = out.numel();
    if n_out == 0 {
        return Ok(out);
    }
    let stride = x.strides().get(dim).copied().unwrap_or(1);
    let mut p = ArgextParams::zeroed();
    p.n_out = n_out as u32;
    p.rank = x.rank() as u32;
    p.dim = dim as u32;
    p.len = len as u32;
    p.segs = 1;
    p.seg_len = len as u32;
    p.shape = pack_dims(x.shape());
    p.sx = pack_dims(x.strides());
    let dts = [x.dtype];
    let consts = consts(code);
    let plan = argext_plan(dev.caps(), n_out, len, stride);
    let (segs, seg_len) = match plan {
        ReducePlan::Split { segs, seg_len } | ReducePlan::RowsSplit { segs, seg_len } => {
            (segs, seg_len)
        }
        _ => (1, len as u32),
    };
    let (kernel, groups) = match plan {
        ReducePlan::Workgroup | ReducePlan::Split { .. } => {
            (&WORKGROUP, n_out as u64 * u64::from(segs))
        }
        _ => (&ROWS, (n_out as u64 * u64::from(segs)).div_ceil(WG as u64)),
    };
    let grid = dev.grid_1d(op, groups)?;
    // Split rows leave each segment's candidate index, then one pass merges them in segment
    // order. The plans keep n_out * segs within a few workgroups per estimated slot: far
    // below one binding.
    let parts = if segs > 1 {
        Some(Tensor::empty(
            dev,
            op,
            &[n_out * segs as usize],
            DType::I32,
        )?)
    } else {
        None
    };
    p.segs = segs;
    p.seg_len = seg_len;
    // Only the view's elements are bound: a row of a large base (`logits[:, -1]`) fits one
    // binding where the base does not.
    let xs = x.view_span();
    p.off_x = xs.rel as u32;
    let bytes = bytemuck::bytes_of(&p);
    let first = parts.as_ref().unwrap_or(&out);
    let binds = [xs.bind(x.buffer()), Bind::whole(first.buffer())];
    dev.launch_binds(op, kernel, &dts, &consts, bytes, &binds, grid)?;
    if let Some(parts) = &parts {
        let grid = dev.grid_1d(op, (n_out as u64).div_ceil(WG as u64))?;
        let binds = [
            xs.bind(x.buffer()),
            Bind::whole(parts.buffer()),
            Bind::whole(out.buffer()),
        ];
        dev.launch_binds(op, &PARTS, &dts, &consts, bytes, &binds, grid)?;
    }
    Ok(out)
}

fn argext(x: &Tensor, op: &'static str, code: u32, dim: isize, keepdim: bool) -> Result<Tensor> {
    let d = Layout::normalize_dim(op, dim, x.rank().max(1))?;
    let d = if x.rank() == 0 { 0 } else { d };
    let idx = index_along(x, op, code, d)?;
    if keepdim || x.rank() == 0 {
        return Ok(idx);
    }
    let mut shape = x.shape().to_vec();
    shape.remove(d);
    idx.reshape_untracked(&shape)
}

/// The indices `max` (`code` [`ARG_MAX`]) or `min` ([`ARG_MIN`]) of `x` over `dim` (normalized)
/// routes its gradient to: each row's first NaN or first extremum, the index PyTorch's
/// `max(dim)` returns, in keepdim shape. The forward takes them when it records, so the
/// backward holds these indices, not `x` (PyTorch's `max(dim)` saves its indices: `x` may be
/// written in place afterwards). They come from the argmax plans, so long rows are scanned in
/// parallel.
pub(crate) fn max_min_indices(x: &Tensor, dim: usize, code: u32) -> Result<Tensor> {
    let op = if code == ARG_MAX { "max" } else { "min" };
    index_along(x, op, code, dim)
}

/// The gradient of `max` (`code` [`ARG_MAX`]) or `min` ([`ARG_MIN`]) over `dim` of an input of
/// `shape` and `dtype`: `g` (keepdim shape, or broadcast to it) at the indices of
/// [`max_min_indices`] and zero elsewhere, written one element per invocation.
pub(crate) fn max_min_grad(
    idx: &Tensor,
    g: &Tensor,
    shape: &[usize],
    dtype: DType,
    dim: usize,
    code: u32,
) -> Result<Tensor> {
    let op = if code == ARG_MAX {
        "max backward"
    } else {
        "min backward"
    };
    let shape = shape.to_vec();
    let lg = g.layout.broadcast_to(&shape)?;
    if dim >= shape.len() || (lg.strides()[dim] != 0 && shape[dim] != 1) {
        return Err(Error::shape(
            op,
            format!(
                "gradient {:?} must have size 1 at dim {dim} of {shape:?}",
                g.shape()
            ),
        ));
    }
    let out = Tensor::empty(idx.device(), op, &shape, dtype)?;
    if out.numel() == 0 {
        return Ok(out);
    }
    let mut p = ArgextParams::zeroed();
    p.numel = out.numel() as u32;
    p.rank = shape.len() as u32;
    p.dim = dim as u32;
    p.off_g = lg.offset() as u32;
    p.shape = pack_dims(&shape);
    p.sg = pack_dims(lg.strides());
    let dev = idx.device();
    let grid = dev.grid_1d(op, (out.numel() as u64).div_ceil(WG as u64))?;
    let bufs = [idx.buffer(), g.buffer(), out.buffer()];
    let bytes = bytemuck::bytes_of(&p);
    dev.launch(op, &ROUTE, &[dtype], &consts(code), bytes, &bufs, grid)?;
    Ok(out)
}

impl Tensor {
    /// The index of the largest element along `dim` (PyTorch's `argmax(dim, keepdim)`), as
    /// an i32 tensor: the first one among equal maxima, and the first NaN if there is one (NaN
    /// counts as the maximum, as in PyTorch). Works on f32, f16 and i32 tensors. Errors when
    /// `dim` is out of range or has size 0.
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{Device, Tensor};
    /// let dev = Device::new()?;
    /// let logits = Tensor::from_slice(&dev, &[0.1f32, 2.0, 2.0, 5.0, -1.0, 0.0], &[2, 3])?;
    /// assert_eq!(logits.argmax(1, false)?.to_vec::<i32>()?, vec![1, 0]);
    /// # Ok(()) }
    /// ```
    pub fn argmax(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        argext(self, "argmax", ARG_MAX, dim, keepdim)
    }

    /// The index of the smallest element along `dim` (PyTorch's `argmin(dim, keepdim)`); ties
    /// and NaN as [`Tensor::argmax`].
    pub fn argmin(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        argext(self, "argmin", ARG_MIN, dim, keepdim)
    }

    /// The flat (row-major) index of the largest element, a 0-d i32 tensor (PyTorch's
    /// `argmax()` with no dim). Errors for an empty tensor.
    pub fn argmax_all(&self) -> Result<Tensor> {
        no_dim_on_empty(self, "argmax")?;
        let flat = self.reshape_untracked(&[self.numel()])?;
        argext(&flat, "argmax", ARG_MAX, 0, false)
    }

    /// The flat index of the smallest element, a 0-d i32 tensor (PyTorch's `argmin()`).
    pub fn argmin_all(&self) -> Result<Tensor> {
        no_dim_on_empty(self, "argmin")?;
        let flat = self.reshape_untracked(&[self.numel()])?;
        argext(&flat, "argmin", ARG_MIN, 0, false)
    }
}

/// PyTorch's refusal of the dim-less form on an empty tensor (no index to return).
fn no_dim_on_empty(x: &Tensor, op: &'static str) -> Result<()> {
    if x.numel() == 0 {
        return Err(Error::size(
            op,
            format!(
                "{op}(): Expected reduction dim to be specified for input.numel() == 0. (shape \
                 {:?})",
                x.shape()
            ),
        ));
    }
    Ok(())
}

/// The argext family's entry in the kernel-family registry (`ops::families()`).
pub(crate) const FAMILY: crate::runtime::pipeline::Family = crate::runtime::pipeline::Family {
    name: "argext",
    shaders: &["argext.wgsl"],
    params: || vec![params_layout()],
    variants: argext_variants,
};

/// Every (kernel, dtypes, override constants) combination of this family's kernels, for
/// tests/shaders.rs to translate and validate each.
#[doc(hidden)]
pub fn argext_variants() -> Vec<ShaderVariant> {
    let mut v = Vec::new();
    for dt in [DType::F32, DType::F16, DType::I32] {
        for &(_, code) in ARGEXT_DEFS {
            // The route only launches for floats (gradients); the i32 module lists it too so
            // every entry point of every module built is translated by the shader tests.
            for k in [&ROWS, &WORKGROUP, &PARTS, &ROUTE] {
                v.push(ShaderVariant::new(k, &[dt], &consts(code)));
            }
        }
    }
    v
}

/// The params struct's layout, checked against the shader's `struct Params` in tests/shaders.rs.
#[doc(hidden)]
pub fn params_layout() -> crate::runtime::pipeline::ParamsLayout {
    crate::runtime::pipeline::params_layout!(
        ROWS,
        &[DType::F32],
        ArgextParams {
            n_out,
            rank,
            dim,
            len,
            off_x,
            segs,
            seg_len,
            off_g,
            numel,
            pad0,
            pad1,
            pad2,
            shape,
            sx,
            sg
        }
    )
}

#[cfg(test)]
mod plan_tests {
    use super::*;

    #[test]
    fn gpus_scan_long_rows_in_parallel_and_cpus_keep_one_invocation_per_output() {
        let (gpu, lvp) = (Caps::test_gpu(), Caps::test_lavapipe(2));
        // Greedy decoding over a 150k vocabulary, [8192, 151936] over the last dim: a
        // workgroup per row; 64 rows would leave most of the device idle, so they split.
        assert_eq!(argext_plan(&gpu, 8192, 151_936, 1), ReducePlan::Workgroup);
        assert!(matches!(
            argext_plan(&gpu, 64, 151_936, 1),
            ReducePlan::Split { segs, .. } if segs > 1
        ));
        assert_eq!(argext_plan(&lvp, 64, 151_936, 1), ReducePlan::Rows);
        // argmax_all of 2^24 values: segments of one output.
        assert!(matches!(
            argext_plan(&gpu, 1, 1 << 24, 1),
            ReducePlan::Split { segs, .. } if segs > 1
        ));
        // Many strided outputs (argmax over dim 0 of [10, 100000]): one invocation each.
        assert_eq!(argext_plan(&gpu, 100_000, 10, 100_000), ReducePlan::Rows);
        // Few strided outputs over long columns: rows split into segments.
        assert!(matches!(
            argext_plan(&gpu, 1024, 100_000, 1024),
            ReducePlan::RowsSplit { segs, .. } if segs > 1
        ));
    }
}
