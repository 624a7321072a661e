//! Row scatter-add through buckets (shaders/segment.wgsl): the backward of `index_select` and
//! `embedding`. A gather-form scatter (every output row scanning the whole index) costs
//! O(V * L * width), as much as the one-hot matmul it replaces; bucketing the index first
//! (count, scan, fill, sort) makes it O(L + V) plus one read of the gradient per output, with
//! the same fixed summation order (ascending position), so results stay bitwise reproducible.

use bytemuck::{Pod, Zeroable};

use crate::ops::map::WG;
use crate::runtime::pipeline::ShaderVariant;
use crate::runtime::{Access, Kernel};
use crate::{DType, Result, Tensor};

const SRC: &str = include_str!("../../shaders/segment.wgsl");

use Access::{Read as R, ReadWrite as RW};
static COUNT: Kernel = Kernel::new("segment", SRC, "seg_count", &[R, RW]).slots(&[1, 2]);
static SCAN: Kernel = Kernel::new("segment", SRC, "seg_scan", &[RW, RW]).slots(&[2, 3]);
static FILL: Kernel = Kernel::new("segment", SRC, "seg_fill", &[R, RW, RW]).slots(&[1, 2, 4]);
static SORT: Kernel = Kernel::new("segment", SRC, "seg_sort", &[RW, RW]).slots(&[3, 4]);
static SUM: Kernel = Kernel::new("segment", SRC, "seg_sum", &[RW, RW, R, RW]).slots(&[3, 4, 5, 6]);

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct SegmentParams {
    len: u32,
    rows: u32,
    idx_off: u32,
    idx_stride: u32,
    numel: u32,
    inner: u32,
    skip: i32,
    _pad: u32,
}

/// `out[o, v, i] = sum of g[o, j, i] over j with index[j] == v` for a 1-D `index` of length
/// L, `g` viewed as `[outer, L, inner]` and an output of `[outer, rows, inner]` elements
/// (returned with `shape`); the `skip` row (-1: none) and out-of-range indices get nothing.
pub(crate) fn index_add_rows(
    op: &'static str,
    g: &Tensor,
    index: &Tensor,
    rows: usize,
    inner: usize,
    shape: &[usize],
    skip: i32,
) -> Result<Tensor> {
    let dev = g.device();
    let out = Tensor::empty(dev, op, shape, g.dtype)?;
    let numel = out.numel();
    if numel == 0 {
        return Ok(out);
    }
    let len = index.numel();
    let g = g.contiguous()?;
    let p = SegmentParams {
        len: len as u32,
        rows: rows as u32,
        idx_off: index.layout.offset() as u32,
        idx_stride: index.strides().first().copied().unwrap_or(0) as u32,
        numel: numel as u32,
        inner: inner as u32,
        skip,
        _pad: 0,
    };
    let counts = Tensor::zeros(dev, &[rows + 1], DType::I32)?;
    let starts = Tensor::empty(dev, op, &[rows + 1], DType::I32)?;
    let list = Tensor::empty(dev, op, &[len.max(1)], DType::I32)?;
    let groups = |n: usize| dev.grid_1d(op, (n as u64).div_ceil(WG as u64));
    let params = bytemuck::bytes_of(&p);
    let c = [("WG", WG as f64)];
    let dt = [g.dtype];
    if len > 0 {
        dev.launch(
            op,
            &COUNT,
            &dt,
            &c,
            params,
            &[index.buffer(), counts.buffer()],
            groups(len)?,
        )?;
    }
    dev.launch(
        op,
        &SCAN,
        &dt,
        &c,
        params,
        &[counts.buffer(), starts.buffer()],
        [1, 1, 1],
    )?;
    if len > 0 {
        let bufs = [index.buffer(), counts.buffer(), list.buffer()];
        dev.launch(op, &FILL, &dt, &c, params, &bufs, groups(len)?)?;
        let bufs = [starts.buffer(), list.buffer()];
        dev.launch(op, &SORT, &dt, &c, params, &bufs, groups(rows)?)?;
    }
    let bufs = [starts.buffer(), list.buffer(), g.buffer(), out.buffer()];
    dev.launch(op, &SUM, &dt, &c, params, &bufs, groups(numel)?)?;
    Ok(out)
}

/// The segment family's entry in the kernel-family registry (`ops::families()`).
pub(crate) const FAMILY: crate::runtime::pipeline::Family = crate::runtime::pipeline::Family {
    name: "segment",
    shaders: &["segment.wgsl"],
    params: || vec![params_layout()],
    variants: segment_variants,
};

#[doc(hidden)]
pub fn segment_variants() -> Vec<ShaderVariant> {
    let mut v = Vec::new();
    for dt in [DType::F32, DType::F16] {
        for k in [&COUNT, &SCAN, &FILL, &SORT, &SUM] {
            v.push(ShaderVariant::new(k, &[dt], &[("WG", WG as f64)]));
        }
    }
    v
}

/// The params struct's layout, checked against the shader's `struct Params` in tests/shaders.rs.
#[doc(hidden)]
pub fn params_layout() -> crate::runtime::pipeline::ParamsLayout {
    crate::runtime::pipeline::params_layout!(
        SUM,
        &[DType::F32],
        SegmentParams {
            len,
            rows,
            idx_off,
            idx_stride,
            numel,
            inner,
            skip,
            _pad
        }
    )
}
