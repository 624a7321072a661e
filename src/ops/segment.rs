//! Scatter-add through buckets (shaders/segment.wgsl): the backward of `index_select` and
//! `embedding` (rows of a 1-D index), and `scatter_add` / gather's backward with a long index. A gather-form scatter (every output row scanning the whole index) costs
//! O(V * L * width), as much as the one-hot matmul it replaces; bucketing the index first
//! (count, scan, fill, sort) makes it O(L + V) plus one read of the gradient per output, with
//! the same fixed summation order (ascending position), so results stay bitwise reproducible.

use bytemuck::{Pod, Zeroable};

use crate::layout::{contiguous_strides, pack_dims, Layout, MAX_RANK};
use crate::ops::map::WG;
use crate::runtime::pipeline::ShaderVariant;
use crate::runtime::{Access, Kernel};
use crate::{DType, Result, Tensor};

const SRC: &str = include_str!("../../shaders/segment.wgsl");

use Access::{Read as R, ReadWrite as RW};
static COUNT: Kernel = Kernel::new("segment", SRC, "seg_count", &[R, RW]).slots(&[1, 2]);
static SCAN: Kernel = Kernel::new("segment", SRC, "seg_scan", &[RW, RW]).slots(&[2, 3]);
static SCAN_SUMS: Kernel = Kernel::new("segment", SRC, "seg_scan_sums", &[RW, RW]).slots(&[2, 3]);
static SCAN_TOP: Kernel = Kernel::new("segment", SRC, "seg_scan_top", &[RW, RW]).slots(&[2, 3]);
static SCAN_APPLY: Kernel = Kernel::new("segment", SRC, "seg_scan_apply", &[RW, RW]).slots(&[2, 3]);
/// Counts per block of the multi-pass scan (the shader's `SCAN_BLOCK`).
const SCAN_BLOCK: usize = 4096;
/// Rows from which the counts scan in blocks: one workgroup of 256 lanes would walk more than
/// 64 counts a lane, serially.
const BLOCK_SCAN_ROWS: usize = 64 * 256;
static FILL: Kernel = Kernel::new("segment", SRC, "seg_fill", &[R, RW, RW]).slots(&[1, 2, 4]);
static SORT: Kernel = Kernel::new("segment", SRC, "seg_sort", &[RW, RW, RW]).slots(&[2, 3, 4]);
static SORT_LONG: Kernel =
    Kernel::new("segment", SRC, "seg_sort_long", &[RW, RW, RW, RW]).slots(&[2, 3, 4, 8]);
/// Buckets up to this length are sorted by one invocation (the shader's `MID_BUCKET`); longer
/// ones by a workgroup of `seg_sort_long` each.
const MID_BUCKET: usize = 256;
/// The most workgroups `seg_sort_long` runs (each takes every n-th long bucket).
const MAX_LONG_GROUPS: usize = 1024;
/// The most workgroups `seg_sum_long` / `seg_scatter_long` run (each takes every n-th output
/// of the long buckets).
const MAX_LONG_SUM_GROUPS: usize = 8192;
static SUM: Kernel = Kernel::new("segment", SRC, "seg_sum", &[RW, RW, R, RW]).slots(&[3, 4, 5, 6]);
static SUM_LONG: Kernel =
    Kernel::new("segment", SRC, "seg_sum_long", &[RW, RW, RW, R, RW]).slots(&[2, 3, 4, 5, 6]);
static KEYS: Kernel = Kernel::new("segment", SRC, "seg_keys", &[R, RW]).slots(&[1, 4]);
static SCATTER: Kernel = Kernel::new("segment", SRC, "seg_scatter", &[RW, RW, R, RW, R])
    .slots(&[3, 4, 5, 6, 7])
    .ints();
static SCATTER_LONG: Kernel =
    Kernel::new("segment", SRC, "seg_scatter_long", &[RW, RW, RW, R, RW, R])
        .slots(&[2, 3, 4, 5, 6, 7])
        .ints();

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
    rank: u32,
    dim: u32,
    src_off: u32,
    base_off: u32,
    flags: u32,
    ishape: [u32; MAX_RANK],
    si: [u32; MAX_RANK],
    ss: [u32; MAX_RANK],
    oshape: [u32; MAX_RANK],
    so: [u32; MAX_RANK],
    sb: [u32; MAX_RANK],
}

/// `out[o, v, i] = sum of g[o, j, i] over j with index[j] == v` for a 1-D `index` of length
/// L, `g` viewed as `[outer, L, inner]` and an output of `[outer, rows, inner]` elements
/// (returned with `shape`); the `skip` row (-1: none) and out-of-range indices get nothing.
/// With a `base` (of `shape` and g's dtype) each sum starts from its element, as PyTorch's
/// scatter_add starts from a copy of self.
#[allow(clippy::too_many_arguments)]
pub(crate) fn index_add_rows(
    op: &'static str,
    g: &Tensor,
    index: &Tensor,
    rows: usize,
    inner: usize,
    shape: &[usize],
    skip: i32,
    base: Option<&Tensor>,
) -> Result<Tensor> {
    let dev = g.device();
    let out = match base {
        // A packed copy in a fresh buffer: the sums read their start from it.
        Some(b) => b.detach().deep_clone()?,
        None => Tensor::empty(dev, op, shape, g.dtype)?,
    };
    let numel = out.numel();
    if numel == 0 {
        return Ok(out);
    }
    let len = index.numel();
    let g = g.contiguous_at_zero()?;
    let mut p = SegmentParams::zeroed();
    p.len = len as u32;
    p.rows = rows as u32;
    p.idx_off = index.layout.offset() as u32;
    p.idx_stride = index.strides().first().copied().unwrap_or(0) as u32;
    p.numel = numel as u32;
    p.inner = inner as u32;
    p.skip = skip;
    p.flags = u32::from(base.is_some());
    let b = buckets(op, dev, index, &p)?;
    let bufs = [b.starts.buffer(), b.list.buffer(), g.buffer(), out.buffer()];
    let params = bytemuck::bytes_of(&p);
    let (dt, sc) = ([g.dtype], sort_consts(b.longs.is_some()));
    dev.launch(op, &SUM, &dt, &sc, params, &bufs, groups(dev, p.numel)?)?;
    if let Some(longs) = &b.longs {
        // Each long bucket has numel / rows outputs (outer x inner).
        let most = (len / (MID_BUCKET + 1)).saturating_mul(numel / rows.max(1));
        let grid = dev.grid_1d(op, most.clamp(1, MAX_LONG_SUM_GROUPS) as u64)?;
        let bufs = [
            longs.buffer(),
            b.starts.buffer(),
            b.list.buffer(),
            g.buffer(),
            out.buffer(),
        ];
        dev.launch(op, &SUM_LONG, &dt, &sc, params, &bufs, grid)?;
    }
    Ok(out)
}

fn consts() -> [(&'static str, f64); 1] {
    [("WG", WG as f64)]
}

fn sort_consts(long_sort: bool) -> [(&'static str, f64); 2] {
    [
        ("WG", WG as f64),
        ("LONG_SORT", f64::from(u8::from(long_sort))),
    ]
}

fn scatter_consts(long_sort: bool, dt: DType) -> [(&'static str, f64); 3] {
    let [wg, long] = sort_consts(long_sort);
    [wg, long, ("FLOAT", f64::from(u8::from(dt.is_float())))]
}

fn groups(dev: &crate::Device, n: u32) -> Result<[u32; 3]> {
    dev.grid_1d("segment", u64::from(n).div_ceil(WG as u64))
}

/// The buckets of an index: `starts` `[rows + 1]`, the positions of each bucket in ascending
/// order (`list`), and on GPUs where a bucket may pass `MID_BUCKET` the long buckets' list
/// (`longs`: a count, then the rows), whose sums the `_long` kernels take.
struct Buckets {
    starts: Tensor,
    list: Tensor,
    longs: Option<Tensor>,
}

/// Buckets the `p.len` keys read from `keys` (at `p.idx_off`, `p.idx_stride` apart) by value
/// in `[0, p.rows)`. The passes read no data of the scattered dtype: they run in the f32
/// module whatever it is (one set of pipelines for f32, f16 and i32 data).
fn buckets(
    op: &'static str,
    dev: &crate::Device,
    keys: &Tensor,
    p: &SegmentParams,
) -> Result<Buckets> {
    let (rows, len) = (p.rows as usize, p.len as usize);
    let counts = Tensor::zeros(dev, &[rows + 1], DType::I32)?;
    let blocks = if rows > BLOCK_SCAN_ROWS {
        rows.div_ceil(SCAN_BLOCK)
    } else {
        0
    };
    // The block scan keeps its block totals after the starts.
    let starts = Tensor::empty(dev, op, &[rows + 1 + blocks], DType::I32)?;
    let list = Tensor::empty(dev, op, &[len.max(1)], DType::I32)?;
    let params = bytemuck::bytes_of(p);
    let (c, dt) = (consts(), [DType::F32]);
    if len > 0 {
        let bufs = [keys.buffer(), counts.buffer()];
        dev.launch(op, &COUNT, &dt, &c, params, &bufs, groups(dev, p.len)?)?;
    }
    let bufs = [counts.buffer(), starts.buffer()];
    if blocks > 0 {
        let grid = dev.grid_1d(op, blocks as u64)?;
        dev.launch(op, &SCAN_SUMS, &dt, &c, params, &bufs, grid)?;
        dev.launch(op, &SCAN_TOP, &dt, &c, params, &bufs, [1, 1, 1])?;
        dev.launch(op, &SCAN_APPLY, &dt, &c, params, &bufs, grid)?;
    } else {
        dev.launch(op, &SCAN, &dt, &c, params, &bufs, [1, 1, 1])?;
    }
    let mut long_list = None;
    if len > 0 {
        let bufs = [keys.buffer(), counts.buffer(), list.buffer()];
        dev.launch(op, &FILL, &dt, &c, params, &bufs, groups(dev, p.len)?)?;
        // At most len / (MID_BUCKET + 1) buckets are long: on GPUs their list (a count, then
        // the rows) is sized for that many, and seg_sort_long gets one workgroup for each, up
        // to MAX_LONG_GROUPS (the rest loop), or none when no bucket can be long. CPU
        // adapters heap-sort them in seg_sort (the counts, bound in the list's slot, unused).
        let most = len / (MID_BUCKET + 1);
        let long_sort = !dev.caps().cpu && most > 0;
        let longs = if long_sort {
            Tensor::zeros(dev, &[most + 1], DType::I32)?
        } else {
            counts.clone()
        };
        let bufs = [longs.buffer(), starts.buffer(), list.buffer()];
        let sc = sort_consts(long_sort);
        dev.launch(op, &SORT, &dt, &sc, params, &bufs, groups(dev, p.rows)?)?;
        if long_sort {
            let tmp = Tensor::empty(dev, op, &[len], DType::I32)?;
            let bufs = [longs.buffer(), starts.buffer(), list.buffer(), tmp.buffer()];
            let grid = dev.grid_1d(op, most.min(MAX_LONG_GROUPS) as u64)?;
            dev.launch(op, &SORT_LONG, &dt, &c, params, &bufs, grid)?;
            long_list = Some(longs);
        }
    }
    Ok(Buckets {
        starts,
        list,
        longs: long_list,
    })
}

/// The fewest gather-form steps worth the buckets' seven dispatches (below it the gather form
/// finishes in about the time those dispatches take to launch).
const MIN_SCATTER_SCANS: u64 = 1 << 20;

/// Whether [`scatter_add`] should bucket an output of `numel` elements from an index of
/// `index_numel` elements and `rows` rows along the scattered dim (the output's extent there),
/// and can. The gather form costs each output inside the index's region a scan of the index
/// along the dim: `rows * index_numel` steps in all, plus one per output; the buckets cost a
/// few passes over the index and the output. Bucketing wins when the scans outweigh those
/// passes several times over (a sparse scatter into a large output keeps the gather form,
/// whose outputs outside the index's region cost one copy). Its buffers must fit one binding
/// each: the counts and starts (4 bytes per output) and the keys and lists (4 per index
/// element).
pub(crate) fn scatter_fits(
    dev: &crate::Device,
    numel: usize,
    index_numel: usize,
    rows: usize,
) -> bool {
    let limit = dev.max_binding_bytes();
    let (n, l) = (numel as u64, index_numel as u64);
    let fits = (n + 2 + n.div_ceil(SCAN_BLOCK as u64)) * 4 <= limit && l.max(1) * 4 <= limit;
    let scans = (rows as u64).saturating_mul(l);
    let worth = scans >= 8 * (n + l) && scans >= MIN_SCATTER_SCANS;
    fits && worth
}

/// `out[c] = base[c] + sum of src[e] over index elements e (read through `il`, row-major over
/// its shape) whose position with `dim` replaced by `index[e]` is c`, over the contiguous
/// output `shape`, from the base, in ascending e (for one output, ascending position along
/// `dim`), rounded once (on GPUs a bucket past 256 values sums in lanes folded in a fixed tree):
/// the gather form's result in O(index + output) instead of every output
/// scanning the index along `dim`. Indices outside `[0, shape[dim])` and the `skip` row add
/// nothing. The caller checks [`scatter_fits`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn scatter_add(
    op: &'static str,
    base: Option<&Tensor>,
    shape: &[usize],
    dim: usize,
    index: &Tensor,
    il: &Layout,
    src: &Tensor,
    skip: i32,
) -> Result<Tensor> {
    let dev = src.device();
    let out = Tensor::empty(dev, op, shape, src.dtype)?;
    let numel = out.numel();
    let len = il.numel();
    if numel == 0 {
        return Ok(out);
    }
    let mut p = SegmentParams::zeroed();
    p.len = len as u32;
    p.numel = numel as u32;
    p.skip = skip;
    p.rank = shape.len() as u32;
    p.dim = dim as u32;
    p.idx_off = il.offset() as u32;
    p.src_off = src.layout.offset() as u32;
    p.ishape = pack_dims(il.shape());
    p.si = pack_dims(il.strides());
    p.ss = pack_dims(src.strides());
    p.oshape = pack_dims(shape);
    p.so = pack_dims(&contiguous_strides(shape));
    if let Some(b) = base {
        p.flags = 1;
        p.base_off = b.layout.offset() as u32;
        p.sb = pack_dims(b.strides());
    }
    // The key pass reads no src data: it runs in the f32 module, as the bucket passes.
    let (c, dt) = (consts(), [DType::F32]);
    let keys = Tensor::empty(dev, op, &[len.max(1)], DType::I32)?;
    if len > 0 {
        let bufs = [index.buffer(), keys.buffer()];
        let params = bytemuck::bytes_of(&p);
        dev.launch(op, &KEYS, &dt, &c, params, &bufs, groups(dev, p.len)?)?;
    }
    // The bucket passes read the keys densely; the skip row is already out.
    let mut bp = p;
    bp.rows = numel as u32;
    bp.idx_off = 0;
    bp.idx_stride = 1;
    bp.skip = -1;
    let b = buckets(op, dev, &keys, &bp)?;
    let base_buf = base.map_or(src.buffer(), |b| b.buffer());
    let bufs = [
        b.starts.buffer(),
        b.list.buffer(),
        src.buffer(),
        out.buffer(),
        base_buf,
    ];
    let params = bytemuck::bytes_of(&p);
    let (dt, sc) = ([src.dtype], scatter_consts(b.longs.is_some(), src.dtype));
    dev.launch(op, &SCATTER, &dt, &sc, params, &bufs, groups(dev, p.numel)?)?;
    if let Some(longs) = &b.longs {
        let most = len / (MID_BUCKET + 1);
        let grid = dev.grid_1d(op, most.clamp(1, MAX_LONG_SUM_GROUPS) as u64)?;
        let bufs = [
            longs.buffer(),
            b.starts.buffer(),
            b.list.buffer(),
            src.buffer(),
            out.buffer(),
            base_buf,
        ];
        dev.launch(op, &SCATTER_LONG, &dt, &sc, params, &bufs, grid)?;
    }
    Ok(out)
}

/// The segment family's entry in the kernel-family registry (`ops::families()`).
pub(crate) const FAMILY: crate::runtime::pipeline::Family = crate::runtime::pipeline::Family {
    name: "segment",
    shaders: &["segment.wgsl"],
    params: || vec![params_layout()],
    variants: segment_variants,
};

/// Every (kernel, dtypes, override constants) combination of this family's kernels, for
/// tests/shaders.rs to translate and validate each.
#[doc(hidden)]
pub fn segment_variants() -> Vec<ShaderVariant> {
    let mut v = Vec::new();
    // The key and bucket passes launch in the f32 module only (they read no data); the sums
    // and scatters in each dtype's. Every module lists every entry point, so the shader tests
    // translate all of each module built.
    for dt in [DType::F32, DType::F16, DType::I32] {
        for k in [
            &COUNT,
            &SCAN,
            &SCAN_SUMS,
            &SCAN_TOP,
            &SCAN_APPLY,
            &FILL,
            &SORT_LONG,
            &KEYS,
        ] {
            v.push(ShaderVariant::new(k, &[dt], &[("WG", WG as f64)]));
        }
        for long_sort in [false, true] {
            for k in [&SORT, &SUM] {
                v.push(ShaderVariant::new(k, &[dt], &sort_consts(long_sort)));
            }
        }
        v.push(ShaderVariant::new(&SUM_LONG, &[dt], &sort_consts(true)));
        for long_sort in [false, true] {
            v.push(ShaderVariant::new(
                &SCATTER,
                &[dt],
                &scatter_consts(long_sort, dt),
            ));
        }
        v.push(ShaderVariant::new(
            &SCATTER_LONG,
            &[dt],
            &scatter_consts(true, dt),
        ));
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
            rank,
            dim,
            src_off,
            base_off,
            flags,
            ishape,
            si,
            ss,
            oshape,
            so,
            sb
        }
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn mid_bucket_matches_the_shader() {
        let line = format!("const MID_BUCKET: u32 = {}u;", super::MID_BUCKET);
        assert!(super::SRC.contains(&line), "{line}");
    }
}
