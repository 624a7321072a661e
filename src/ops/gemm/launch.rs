//! The GEMM kernels, their params and the launch: validating a product into a [`Problem`] and
//! recording it ([`dispatch`]); the shader variants and the params layout for the tests.

use bytemuck::{Pod, Zeroable};

use super::options::{Bias, GemmOptions};
use super::plan::{GemmKernel, GemmPlan, SG8_SGS};
use super::shape::product_shape;
use crate::layout::Layout;
use crate::ops::activation::{Activation, ACTIVATION, ACTIVATION_DEFS};
use crate::runtime::pipeline::{ShaderLib, ShaderVariant};
use crate::runtime::{Access, Bind, Kernel, Storage};
use crate::{DType, Error, Result, Tensor};

static GEMM_COMMON: ShaderLib =
    ShaderLib::new(include_str!("../../../shaders/lib/gemm_common.wgsl"));
/// The large-tile core of the GPU kernels (`gemm_wg`, `conv_wg`, the recurrent `*_step_wg`).
pub(crate) static WG_TILE: ShaderLib =
    ShaderLib::new(include_str!("../../../shaders/lib/wg_tile.wgsl"));
const LIBS: &[&ShaderLib] = &[&ACTIVATION, &GEMM_COMMON];
const WG_LIBS: &[&ShaderLib] = &[&ACTIVATION, &GEMM_COMMON, &WG_TILE];
const TILED_SRC: &str = include_str!("../../../shaders/gemm.wgsl");
const SG8_SRC: &str = include_str!("../../../shaders/gemm_sg8.wgsl");
const WG_SRC: &str = include_str!("../../../shaders/gemm_wg.wgsl");
const COOP_SRC: &str = include_str!("../../../shaders/gemm_coop.wgsl");
const COOP_PARTIAL_SRC: &str = include_str!("../../../shaders/gemm_coop_partial.wgsl");
/// The cooperative-matrix tile both coop kernels run (each defines its own store).
static COOP_TILE: ShaderLib = ShaderLib::new(include_str!("../../../shaders/lib/coop_tile.wgsl"));
/// The tile's fragments on cooperative matrices.
static COOP_FRAG: ShaderLib = ShaderLib::new(include_str!("../../../shaders/lib/coop_frag.wgsl"));
/// The tile's fragments in plain WGSL, so the tile runs on adapters without cooperative
/// matrices (CPU adapters opened with `gpu_plans` and `cooperative_matrix`: its tests).
static COOP_FRAG_EMU: ShaderLib =
    ShaderLib::new(include_str!("../../../shaders/lib/coop_frag_emu.wgsl"));
const COOP_LIBS: &[&ShaderLib] = &[&ACTIVATION, &GEMM_COMMON, &COOP_FRAG, &COOP_TILE];
const COOP_EMU_LIBS: &[&ShaderLib] = &[&ACTIVATION, &GEMM_COMMON, &COOP_FRAG_EMU, &COOP_TILE];
const COOP_ENABLES: &[&str] = &["wgpu_cooperative_matrix"];

use Access::{Read as R, ReadWrite as RW};

static TILED: Kernel = Kernel::new("gemm", TILED_SRC, "gemm_tiled", &[R, R, R, R, RW])
    .slots(&[1, 2, 3, 4, 5])
    .libs(LIBS);
static TILED_PARTIAL: Kernel = Kernel::new("gemm", TILED_SRC, "gemm_tiled_partial", &[R, R, RW])
    .slots(&[1, 2, 6])
    .libs(LIBS);
static SPLITK_REDUCE: Kernel = Kernel::new("gemm", TILED_SRC, "splitk_reduce", &[R, R, RW, RW])
    .slots(&[3, 4, 5, 6])
    .libs(LIBS);
static SG8: Kernel = Kernel::new("gemm_sg8", SG8_SRC, "gemm_sg8", &[R, R, R, R, RW])
    .slots(&[1, 2, 3, 4, 5])
    .libs(LIBS);
static SG8_PARTIAL: Kernel = Kernel::new("gemm_sg8", SG8_SRC, "gemm_sg8_partial", &[R, R, RW])
    .slots(&[1, 2, 6])
    .libs(LIBS);
static WG: Kernel = Kernel::new("gemm_wg", WG_SRC, "gemm_wg", &[R, R, R, R, RW])
    .slots(&[1, 2, 3, 4, 5])
    .libs(WG_LIBS);
static WG_PARTIAL: Kernel = Kernel::new("gemm_wg", WG_SRC, "gemm_wg_partial", &[R, R, RW])
    .slots(&[1, 2, 6])
    .libs(WG_LIBS);

static COOP: Kernel = Kernel::new("gemm_coop", COOP_SRC, "gemm_coop", &[R, R, R, R, RW])
    .slots(&[1, 2, 3, 4, 5])
    .libs(COOP_LIBS)
    .enables(COOP_ENABLES);
static COOP_PARTIAL: Kernel = Kernel::new(
    "gemm_coop",
    COOP_PARTIAL_SRC,
    "gemm_coop_partial",
    &[R, R, RW],
)
.slots(&[1, 2, 6])
.libs(COOP_LIBS)
.enables(COOP_ENABLES);
// The same entry points over the emulated fragments (own names: distinct modules and pipelines).
static COOP_EMU: Kernel = Kernel::new("gemm_coop_emu", COOP_SRC, "gemm_coop", &[R, R, R, R, RW])
    .slots(&[1, 2, 3, 4, 5])
    .libs(COOP_EMU_LIBS);
static COOP_EMU_PARTIAL: Kernel = Kernel::new(
    "gemm_coop_emu",
    COOP_PARTIAL_SRC,
    "gemm_coop_partial",
    &[R, R, RW],
)
.slots(&[1, 2, 6])
.libs(COOP_EMU_LIBS);

const REDUCE_WG: u32 = 256;
/// Longest inner dimension accepted. Past it the f32 accumulation has lost most of its digits
/// (adding 1.0 stops changing a sum at 2^24) and one output tile loops for minutes on a CPU
/// adapter. Callers sum GEMMs over K chunks past it, as the weight gradient of a product over
/// more rows does (`grad::over_k_chunks`).
pub(crate) const MAX_K: usize = 1 << 24;
/// Batch dims left after merging must fit the kernel's vec4 batch decode.
const MAX_BATCH_DIMS: usize = 4;
/// The words of that error [`packed_batch`] recognizes.
const TOO_STRIDED: &str = "strided dims";

/// A and B (and a separate C) packed in their broadcast shapes, when `e` says the batch dims
/// would not merge into the kernel's four (alternating broadcasts at rank 7 or 8): contiguous
/// copies merge into one batch dim, which PyTorch's matmul gets the same way (expand, then
/// reshape). `None` for any other error.
pub(super) fn packed_batch(
    e: &Error,
    a: &Tensor,
    b: &Tensor,
    c: Option<&Tensor>,
) -> Result<Option<[Option<Tensor>; 3]>> {
    match e {
        Error::InvalidArgument { msg, .. } if msg.contains(TOO_STRIDED) => {}
        _ => return Ok(None),
    }
    let (out_shape, m, n, k) = product_shape("gemm", a.shape(), b.shape())?;
    let batch = &out_shape[..out_shape.len() - 2];
    // A row-major copy of `t` broadcast to `shape`; an empty one is a fresh tensor, since
    // `contiguous()` keeps an empty view's (broadcast) strides.
    let full = |t: &Tensor, shape: &[usize]| -> Result<Tensor> {
        if shape.contains(&0) {
            return Tensor::empty(t.device(), "gemm", shape, t.dtype());
        }
        t.broadcast_to(shape)?.contiguous_at_zero()
    };
    Ok(Some([
        Some(full(a, &[batch, &[m, k]].concat())?),
        Some(full(b, &[batch, &[k, n]].concat())?),
        c.map(|c| full(c, &out_shape)).transpose()?,
    ]))
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable, Default)]
pub(crate) struct GemmParams {
    pub(crate) m: u32,
    pub(crate) n: u32,
    pub(crate) k: u32,
    pub(crate) batch: u32,
    pub(crate) a_off: u32,
    pub(crate) a_rs: u32,
    pub(crate) a_cs: u32,
    pub(crate) splits: u32,
    pub(crate) b_off: u32,
    pub(crate) b_rs: u32,
    pub(crate) b_cs: u32,
    pub(crate) k_chunk: u32,
    pub(crate) c_off: u32,
    pub(crate) c_rs: u32,
    pub(crate) c_cs: u32,
    pub(crate) bias_off: u32,
    pub(crate) alpha: f32,
    pub(crate) beta: f32,
    pub(crate) batch_rank: u32,
    pub(crate) bias_stride: u32,
    pub(crate) bshape: [u32; 4],
    pub(crate) a_bs: [u32; 4],
    pub(crate) b_bs: [u32; 4],
    pub(crate) c_bs: [u32; 4],
    pub(crate) c_mode: u32,
    pub(crate) bias_mode: u32,
    pub(crate) o_rs: u32,
    pub(crate) o_off: u32,
}

/// Merges adjacent batch dims that are laid out as one (in every operand) and drops size-1
/// dims, so arbitrary batch ranks reduce to the kernel's four.
fn merge_batch(shape: &[usize], strides: [&[usize]; 3]) -> (Vec<usize>, [Vec<usize>; 3]) {
    let mut dims: Vec<(usize, [usize; 3])> = Vec::new();
    for (i, &d) in shape.iter().enumerate() {
        if d == 1 {
            continue;
        }
        let st = [strides[0][i], strides[1][i], strides[2][i]];
        if let Some(last) = dims.last_mut() {
            if (0..3).all(|t| last.1[t] == st[t] * d) {
                last.0 *= d;
                last.1 = st;
                continue;
            }
        }
        dims.push((d, st));
    }
    let shape = dims.iter().map(|x| x.0).collect();
    let s = |t: usize| dims.iter().map(|x| x.1[t]).collect();
    (shape, [s(0), s(1), s(2)])
}

fn pack4(v: &[usize]) -> [u32; 4] {
    let mut out = [0u32; 4];
    for (o, &x) in out.iter_mut().zip(v) {
        *o = x as u32;
    }
    out
}

/// Checks and loads a bias vector of `len` elements.
fn bias_view(op: &'static str, t: &Tensor, len: usize, what: &str) -> Result<(u32, u32)> {
    if t.shape() != [len] {
        return Err(Error::shape(
            op,
            format!("{what} bias must have shape [{len}], got {:?}", t.shape()),
        ));
    }
    Ok((t.layout.offset() as u32, t.strides()[0] as u32))
}

/// A validated product: sizes, the operands' broadcast layouts and the epilogue's inputs.
pub(crate) struct Problem<'a> {
    pub(crate) out_shape: Vec<usize>,
    pub(crate) m: usize,
    pub(crate) n: usize,
    pub(crate) k: usize,
    pub(crate) al: Layout,
    pub(crate) bl: Layout,
    /// 0: no C; 1: C read through `cl`; 2: the output itself is C (in place).
    pub(crate) c_mode: u32,
    pub(crate) cl: Layout,
    /// 0: none; 1: per column; 2: per row.
    pub(crate) bias_code: u32,
    pub(crate) bias: Option<&'a Tensor>,
    pub(crate) bias_off: u32,
    pub(crate) bias_stride: u32,
    /// Merged batch dims and the operands' strides along them.
    pub(crate) bm: Vec<usize>,
    pub(crate) batch_strides: [Vec<usize>; 3],
}

impl<'a> Problem<'a> {
    pub(super) fn new(
        op: &'static str,
        a: &Tensor,
        b: &Tensor,
        o: &GemmOptions<'a>,
        into: Option<&Tensor>,
    ) -> Result<Problem<'a>> {
        a.same_device(op, b)?;
        a.same_dtype_factors(op, b)?;
        // Before any shape rule: an empty i32 product is refused as a full one is (float-only
        // ops refuse i32 whatever the size; a kernel launch would refuse it only after the
        // output was made, and an empty product launches none).
        a.require_float(op)?;
        a.device().require_dtype(op, a.dtype)?;
        let (out_shape, m, n, k) = product_shape(op, a.shape(), b.shape())?;
        // An empty output sums nothing, whatever K is.
        if k > MAX_K && out_shape.iter().all(|&d| d > 0) {
            return Err(Error::size(
                op,
                format!(
                    "K = {k} ({:?} x {:?}) is above the supported {MAX_K} (split the product \
                     into GEMMs over K chunks and add them)",
                    a.shape(),
                    b.shape()
                ),
            ));
        }
        let batch_shape = &out_shape[..out_shape.len() - 2];
        let al = a.layout.broadcast_to(&[batch_shape, &[m, k]].concat())?;
        let bl = b.layout.broadcast_to(&[batch_shape, &[k, n]].concat())?;
        let (c_mode, cl) = c_operand(op, a, b, o, into, &out_shape)?;
        let (bias_code, bias, bias_off, bias_stride) = match o.bias {
            None => (0u32, None, 0, 0),
            Some(Bias::PerColumn(t)) => {
                let (off, st) = bias_view(op, t, n, "per-column")?;
                (1, Some(t), off, st)
            }
            Some(Bias::PerRow(t)) => {
                let (off, st) = bias_view(op, t, m, "per-row")?;
                (2, Some(t), off, st)
            }
        };
        if let Some(t) = bias {
            a.same_device(op, t)?;
            a.same_dtype(op, t)?;
        }
        // addmm converts alpha (and beta, with a C) to its f32 compute type checked, after
        // the operands' checks; an empty output, or alpha over K = 0, is never scaled.
        if out_shape.iter().all(|&d| d > 0) {
            if k > 0 {
                crate::tensor::check_fill(op, o.alpha, crate::DType::F32)?;
            }
            if o.c.is_some() || into.is_some() {
                crate::tensor::check_fill(op, o.beta, crate::DType::F32)?;
            }
        }
        let bdims = batch_shape.len();
        let (bm, [a_bs, b_bs, c_bs]) = merge_batch(
            batch_shape,
            [
                &al.strides()[..bdims],
                &bl.strides()[..bdims],
                &cl.strides()[..bdims],
            ],
        );
        if bm.len() > MAX_BATCH_DIMS {
            return Err(Error::arg(
                op,
                format!(
                    "batch dims {batch_shape:?} need {} {TOO_STRIDED}, at most \
                     {MAX_BATCH_DIMS} are supported",
                    bm.len()
                ),
            ));
        }
        Ok(Problem {
            out_shape,
            m,
            n,
            k,
            al,
            bl,
            c_mode,
            cl,
            bias_code,
            bias,
            bias_off,
            bias_stride,
            bm,
            batch_strides: [a_bs, b_bs, c_bs],
        })
    }

    pub(crate) fn batch(&self) -> usize {
        self.bm.iter().product()
    }

    pub(crate) fn params(&self, pl: &GemmPlan, o: &GemmOptions) -> GemmParams {
        let (al, bl, cl) = (&self.al, &self.bl, &self.cl);
        let r = self.out_shape.len();
        let [a_bs, b_bs, c_bs] = &self.batch_strides;
        GemmParams {
            m: self.m as u32,
            n: self.n as u32,
            k: self.k as u32,
            batch: self.batch() as u32,
            a_off: al.offset() as u32,
            a_rs: al.strides()[r - 2] as u32,
            a_cs: al.strides()[r - 1] as u32,
            splits: pl.splits,
            b_off: bl.offset() as u32,
            b_rs: bl.strides()[r - 2] as u32,
            b_cs: bl.strides()[r - 1] as u32,
            k_chunk: pl.k_chunk,
            c_off: cl.offset() as u32,
            c_rs: cl.strides()[r - 2] as u32,
            c_cs: cl.strides()[r - 1] as u32,
            bias_off: self.bias_off,
            // K = 0: PyTorch never applies alpha to the empty product (an inf alpha times the
            // zero sum would be NaN).
            alpha: if self.k == 0 { 0.0 } else { o.alpha as f32 },
            beta: o.beta as f32,
            batch_rank: self.bm.len() as u32,
            bias_stride: self.bias_stride,
            bshape: pack4(&self.bm),
            a_bs: pack4(a_bs),
            b_bs: pack4(b_bs),
            c_bs: pack4(c_bs),
            c_mode: self.c_mode,
            bias_mode: self.bias_code,
            o_rs: self.n as u32,
            o_off: 0,
        }
    }

    /// The product pass's launches: each its params, grid and output count. The grid's z is
    /// the batch times the split-k slices; past the adapter's limit on it, the batch runs in
    /// chunks: along the outermost batch dim whose inner dims fit the limit, one launch per
    /// chunk and per index of the dims outside it, each with its offsets moved to its first
    /// entry. A batch of many small matrices then runs as PyTorch's does instead of failing.
    /// Errors past the limit on x or y (run.rs sends such products to the windows of
    /// window.rs first), or where split-k slices alone pass it on z.
    pub(super) fn launches(
        &self,
        op: &'static str,
        pl: &GemmPlan,
        params: GemmParams,
        max: u32,
    ) -> Result<Vec<(GemmParams, [u32; 3], u64)>> {
        let (tm, tn) = pl.tile();
        let (m, n, k, batch) = (self.m, self.n, self.k, self.batch());
        let splits = pl.splits as usize;
        let max = max as usize;
        let (gx, gy) = (n.div_ceil(tn), m.div_ceil(tm));
        let bm = &self.bm;
        let inner_of = |j: usize| bm[j + 1..].iter().product::<usize>();
        // The dim to chunk along: the outermost whose inner dims fit with the slices.
        let j = (0..bm.len()).find(|&j| inner_of(j) * splits <= max);
        if gx > max || gy > max || (batch * splits > max && j.is_none()) {
            return Err(Error::size(
                op,
                format!(
                    "[{m} x {k}] x [{k} x {n}] (batch {batch}) needs a grid of {gx}x{gy}x{} \
                     workgroups, over the adapter's {max}",
                    batch * splits
                ),
            ));
        }
        let [x, y] = pl.grid_xy(gx as u32, gy as u32);
        let (Some(j), true) = (j, batch * splits > max) else {
            let z = (batch * splits) as u32;
            return Ok(vec![(params, [x, y, z], (batch * m * n) as u64)]);
        };
        let inner = inner_of(j);
        let per = max / (splits * inner);
        let [a_bs, b_bs, c_bs] = &self.batch_strides;
        let outer: usize = bm[..j].iter().product();
        let mut out = Vec::new();
        for o in 0..outer {
            // The index of o over the dims outside j (row-major), as offsets.
            let (mut rem, mut offs) = (o, [0usize; 3]);
            for d in (0..j).rev() {
                let i = rem % bm[d];
                rem /= bm[d];
                for (off, bs) in offs.iter_mut().zip([a_bs, b_bs, c_bs]) {
                    *off += i * bs[d];
                }
            }
            for c0 in (0..bm[j]).step_by(per) {
                let len = per.min(bm[j] - c0);
                let mut p = params;
                let mut dims = vec![len];
                dims.extend_from_slice(&bm[j + 1..]);
                p.batch = (len * inner) as u32;
                p.batch_rank = dims.len() as u32;
                p.bshape = pack4(&dims);
                p.a_bs = pack4(&a_bs[j..]);
                p.b_bs = pack4(&b_bs[j..]);
                p.c_bs = pack4(&c_bs[j..]);
                p.a_off += (offs[0] + c0 * a_bs[j]) as u32;
                p.b_off += (offs[1] + c0 * b_bs[j]) as u32;
                p.c_off += (offs[2] + c0 * c_bs[j]) as u32;
                p.o_off += ((o * bm[j] + c0) * inner * m * n) as u32;
                let z = (len * inner * splits) as u32;
                out.push((p, [x, y, z], (len * inner * m * n) as u64));
            }
        }
        Ok(out)
    }
}

/// How C enters the epilogue: not at all (0), read through a broadcast layout (1), or as the
/// in-place output of `gemm_into` (2).
fn c_operand(
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    o: &GemmOptions,
    into: Option<&Tensor>,
    out_shape: &[usize],
) -> Result<(u32, Layout)> {
    match (into, o.c) {
        (Some(t), _) => {
            // check_inplace's order: dtype (gemm_into checked it), device, then size.
            a.same_device(op, t)?;
            if t.shape() != out_shape {
                return Err(Error::shape(
                    op,
                    format!(
                        "Bad in-place call: input tensor size {:?} and output tensor size \
                         {out_shape:?} should match (the in-place C must have the product's \
                         shape)",
                        t.shape()
                    ),
                ));
            }
            if !t.is_contiguous() {
                return Err(Error::arg(
                    op,
                    format!(
                        "in-place C (shape {:?}) must be contiguous, got strides {:?}",
                        t.shape(),
                        t.strides()
                    ),
                ));
            }
            a.same_dtype(op, t)?;
            if t.shares_storage(a) || t.shares_storage(b) {
                return Err(Error::arg(
                    op,
                    "the in-place C must not share storage with A or B",
                ));
            }
            // The target may be a contiguous view that starts at a non-zero offset (e.g. rows
            // of a larger tensor): its layout carries that offset to the kernel as `c_off`.
            Ok((2, t.layout.clone()))
        }
        (None, Some(c)) => {
            // Checked whatever beta is (PyTorch's addmm expands C even when beta = 0); only
            // read when beta != 0, so beta = 0 ignores NaN in C.
            a.same_device(op, c)?;
            a.same_dtype(op, c)?;
            let l = c.layout.broadcast_to(out_shape).map_err(|_| {
                Error::shape(
                    op,
                    format!(
                        "C {:?} does not broadcast to the output {out_shape:?}",
                        c.shape()
                    ),
                )
            })?;
            if !o.reads_c() {
                return Ok((0, Layout::contiguous(out_shape)));
            }
            Ok((1, l))
        }
        _ => Ok((0, Layout::contiguous(out_shape))),
    }
}

/// What a GEMM dispatch binds (placeholders for an absent C or bias).
pub(crate) struct GemmBinds<'a> {
    pub a: Bind<'a>,
    pub b: Bind<'a>,
    pub c: Bind<'a>,
    pub bias: Bind<'a>,
    pub out: Bind<'a>,
}

/// Records one product over `params`: the fused kernel, or with split-k the slices into a
/// workspace and the fixed-order reduction of `total` outputs.
#[allow(clippy::too_many_arguments)]
pub(crate) fn dispatch(
    op: &'static str,
    a: &Tensor,
    pl: &GemmPlan,
    params: &GemmParams,
    act: Activation,
    binds: &GemmBinds,
    grid: [u32; 3],
    total: u64,
) -> Result<()> {
    let dev = a.device();
    let bytes = bytemuck::bytes_of(params);
    let epi = [("ACT", act as u32 as f64)];
    let dts = [a.dtype];
    // The subgroup kernel's row tile (SGS subgroups of 32 rows) must match the grid's.
    let sgs = [("SGS", pl.sgs as f64)];
    let wg = wg_shape(pl.kernel);
    let (kernel, partial, shape_consts): (_, _, &[(&str, f64)]) = match pl.kernel {
        GemmKernel::Sg8 => (&SG8, &SG8_PARTIAL, &sgs),
        GemmKernel::Tiled => (&TILED, &TILED_PARTIAL, &[]),
        GemmKernel::WgTiled | GemmKernel::WgTiled128 | GemmKernel::WgTiled128x128 => {
            (&WG, &WG_PARTIAL, &wg)
        }
        GemmKernel::Coop16 if dev.coop_emulated() => (&COOP_EMU, &COOP_EMU_PARTIAL, &[]),
        GemmKernel::Coop16 => (&COOP, &COOP_PARTIAL, &[]),
    };
    if pl.splits == 1 {
        let bufs = [binds.a, binds.b, binds.c, binds.bias, binds.out];
        let consts = [&epi[..], shape_consts].concat();
        return dev.launch_binds(op, kernel, &dts, &consts, bytes, &bufs, grid);
    }
    let ws = Storage::scratch(dev, op, pl.splits as u64 * total * 4)?;
    let ws_bind = Bind::whole(ws.buffer());
    let bufs = [binds.a, binds.b, ws_bind];
    dev.launch_binds(op, partial, &dts, shape_consts, bytes, &bufs, grid)?;
    let consts = [&epi[..], &[("WG", REDUCE_WG as f64)]].concat();
    let bufs = [binds.c, binds.bias, binds.out, ws_bind];
    let grid = dev.grid_1d(op, total.div_ceil(REDUCE_WG as u64))?;
    dev.launch_binds(op, &SPLITK_REDUCE, &dts, &consts, bytes, &bufs, grid)
}

/// The gemm family's entry in the kernel-family registry (`ops::families()`).
pub(crate) const FAMILY: crate::runtime::pipeline::Family = crate::runtime::pipeline::Family {
    name: "gemm",
    shaders: &[
        "gemm.wgsl",
        "gemm_sg8.wgsl",
        "gemm_wg.wgsl",
        "gemm_coop.wgsl",
        "gemm_coop_partial.wgsl",
    ],
    params: || vec![params_layout()],
    variants: gemm_variants,
};

/// The tiles of `gemm_wg`.
const WG_KERNELS: [GemmKernel; 3] = [
    GemmKernel::WgTiled,
    GemmKernel::WgTiled128,
    GemmKernel::WgTiled128x128,
];

/// `gemm_wg`'s tile overrides for `kernel`: rows (`TM`) and columns (`TN`) per invocation.
fn wg_shape(kernel: GemmKernel) -> [(&'static str, f64); 2] {
    [
        ("TM", kernel.wg_rows() as f64),
        ("TN", kernel.wg_cols() as f64),
    ]
}

/// Every (kernel, dtypes, override constants) combination of this family's kernels, for
/// tests/shaders.rs to translate and validate each.
#[doc(hidden)]
pub fn gemm_variants() -> Vec<ShaderVariant> {
    let mut v = Vec::new();
    for dt in [DType::F32, DType::F16] {
        for &(_, act) in ACTIVATION_DEFS {
            let epi = [("ACT", act as f64)];
            v.push(ShaderVariant::new(&TILED, &[dt], &epi));
            let mut e = epi.to_vec();
            e.push(("SGS", SG8_SGS as f64));
            v.push(ShaderVariant::new(&SG8, &[dt], &e));
            for kernel in WG_KERNELS {
                let mut w = epi.to_vec();
                w.extend(wg_shape(kernel));
                v.push(ShaderVariant::new(&WG, &[dt], &w));
            }
            let mut r = epi.to_vec();
            r.push(("WG", REDUCE_WG as f64));
            v.push(ShaderVariant::new(&SPLITK_REDUCE, &[dt], &r));
        }
        v.push(ShaderVariant::new(&TILED_PARTIAL, &[dt], &[]));
        v.push(ShaderVariant::new(
            &SG8_PARTIAL,
            &[dt],
            &[("SGS", SG8_SGS as f64)],
        ));
        for kernel in WG_KERNELS {
            v.push(ShaderVariant::new(&WG_PARTIAL, &[dt], &wg_shape(kernel)));
        }
    }
    // Cooperative matrices: f16 operands only.
    for &(_, act) in ACTIVATION_DEFS {
        v.push(ShaderVariant::new(
            &COOP,
            &[DType::F16],
            &[("ACT", act as f64)],
        ));
    }
    v.push(ShaderVariant::new(&COOP_PARTIAL, &[DType::F16], &[]));
    for &(_, act) in ACTIVATION_DEFS {
        v.push(ShaderVariant::new(
            &COOP_EMU,
            &[DType::F16],
            &[("ACT", act as f64)],
        ));
    }
    v.push(ShaderVariant::new(&COOP_EMU_PARTIAL, &[DType::F16], &[]));
    v
}

/// The params struct's layout, checked against the shader's `struct Params` in tests/shaders.rs.
#[doc(hidden)]
pub fn params_layout() -> crate::runtime::pipeline::ParamsLayout {
    crate::runtime::pipeline::params_layout!(
        TILED,
        &[DType::F32],
        GemmParams {
            m,
            n,
            k,
            batch,
            a_off,
            a_rs,
            a_cs,
            splits,
            b_off,
            b_rs,
            b_cs,
            k_chunk,
            c_off,
            c_rs,
            c_cs,
            bias_off,
            alpha,
            beta,
            batch_rank,
            bias_stride,
            bshape,
            a_bs,
            b_bs,
            c_bs,
            c_mode,
            bias_mode,
            o_rs,
            o_off
        }
    )
}
