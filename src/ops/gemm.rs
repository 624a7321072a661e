//! Batched GEMM (shaders/gemm.wgsl, shaders/gemm_sg8.wgsl, shaders/lib/gemm_common.wgsl).
//!
//! `out[b] = act(alpha * A[b] B[b] + beta * C[b] + bias)` with numpy batch broadcasting; every
//! operand is read through its strides, so transposes and broadcast batches cost no copy.
//! Large-K problems use a deterministic split-k: S partial GEMMs write an f32 workspace
//! `[S, batch, M, N]` and a reduction sums the slices in a fixed order.

use bytemuck::{Pod, Zeroable};

use crate::layout::{broadcast_shapes, Layout};
use crate::ops::activation::{ACTIVATION, ACTIVATION_DEFS};
use crate::ops::gemm_grad;
use crate::runtime::pipeline::{ShaderLib, ShaderVariant};
use crate::runtime::{Access, Bind, Kernel, Storage};
use crate::{Caps, DType, Device, Error, Result, Tensor};

/// The epilogue activation, defined in [`ops::activation`](crate::ops::activation) and
/// re-exported here where it has always been reachable.
pub use crate::ops::activation::Activation;

static GEMM_COMMON: ShaderLib = ShaderLib::new(include_str!("../../shaders/lib/gemm_common.wgsl"));
const LIBS: &[&ShaderLib] = &[&ACTIVATION, &GEMM_COMMON];
const TILED_SRC: &str = include_str!("../../shaders/gemm.wgsl");
const SG8_SRC: &str = include_str!("../../shaders/gemm_sg8.wgsl");

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

const REDUCE_WG: u32 = 256;
/// Longest inner dimension accepted. Past it the f32 accumulation has lost most of its digits
/// (adding 1.0 stops changing a sum at 2^24) and one output tile loops for minutes on a CPU
/// adapter; such K only arise from broadcast views. Callers can sum GEMMs over K chunks.
const MAX_K: usize = 1 << 24;
/// Batch dims left after merging must fit the kernel's vec4 batch decode.
const MAX_BATCH_DIMS: usize = 4;

/// A bias added in the epilogue: one value per output column (`[N]`) or per row (`[M]`).
/// The same bias is added to every batch entry; its dtype and device must match the operands.
#[derive(Debug, Clone, Copy)]
pub enum Bias<'a> {
    /// `[N]`, added to every row: `nn.Linear`'s bias.
    PerColumn(&'a Tensor),
    /// `[M]`, added to every column.
    PerRow(&'a Tensor),
}

/// Options of [`gemm`]. `Default` is a plain product: alpha 1, beta 1 (used only with `c`),
/// no bias, no activation, split-k chosen automatically.
#[derive(Debug, Clone, Copy)]
pub struct GemmOptions<'a> {
    /// Scale of the product `a @ b` (PyTorch's `addmm` `alpha`).
    pub alpha: f64,
    /// Scale of `c` (PyTorch's `addmm` `beta`). With 0, `c` is not read at all, so NaN or inf
    /// in it do not propagate (as in PyTorch).
    pub beta: f64,
    /// Added as `beta * C`; broadcastable to the output shape.
    pub c: Option<&'a Tensor>,
    /// A vector added after `alpha * a @ b + beta * c`, before the activation.
    pub bias: Option<Bias<'a>>,
    /// Applied last, to the whole sum.
    pub activation: Activation,
    /// Force the number of K slices (1 disables split-k). `None`: chosen from the problem.
    pub split_k: Option<u32>,
}

impl Default for GemmOptions<'_> {
    fn default() -> Self {
        GemmOptions {
            alpha: 1.0,
            beta: 1.0,
            c: None,
            bias: None,
            activation: Activation::None,
            split_k: None,
        }
    }
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

#[doc(hidden)]
/// Which kernel runs and how K is split: a plain function of the problem and the adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmPlan {
    /// The 8-lane subgroup kernel (CPU adapters) instead of the portable register tile.
    pub sg8: bool,
    /// sg8 only: subgroups per workgroup (1 on every adapter so far); a workgroup covers
    /// 32 * sgs rows.
    pub sgs: u32,
    /// K slices (split-k): 1 is one launch; above 1, each slice writes a partial product to
    /// an f32 workspace and a fixed-order reduction sums them, so results do not vary between
    /// runs.
    pub splits: u32,
    /// Steps of K each slice covers (K itself when unsplit).
    pub k_chunk: u32,
}

impl GemmPlan {
    pub(crate) fn tile(&self) -> (usize, usize) {
        if self.sg8 {
            (32 * self.sgs as usize, 32)
        } else {
            (32, 32)
        }
    }
}

/// True when the adapter runs subgroups of exactly 8 lanes (lavapipe on AVX2 and the like).
pub(crate) fn has_sg8(dev: &Device) -> bool {
    dev.caps().sg8
}

/// Subgroups per workgroup of the sg8 kernels, for every shape. On lavapipe 1, 2 and 4 ran
/// alike (gemm_1024, bgemm and [64 x 8192] x [8192 x 64], paired against the FMA ceiling), and
/// a single value keeps one pipeline per epilogue (a cold compile of this kernel takes about
/// 2 s) and leaves no idle rows when M is small. (8 or more subgroups returned wrong tiles.)
const SG8_SGS: u32 = 1;

#[doc(hidden)]
/// Picks the kernel and split factor. Split-k pays when the output tiles are too few to keep
/// the device busy and each tile has a long K loop (weight-gradient shapes such as
/// [64 x 8192] x [8192 x 64] on a GPU); slices keep at least 256 steps of K.
///
/// Total over its inputs: empty problems (a zero M, N, K or batch) plan one unsplit launch;
/// a forced `split_k` of 0 is refused as [`gemm`] refuses it.
pub fn plan(
    dev: &Device,
    m: usize,
    n: usize,
    k: usize,
    batch: usize,
    split_k: Option<u32>,
) -> Result<GemmPlan> {
    plan_for(dev.caps(), m, n, k, batch, split_k)
}

#[doc(hidden)]
/// [`plan`] as a pure function of the adapter facts (unit-tested without a GPU).
pub fn plan_for(
    caps: &Caps,
    m: usize,
    n: usize,
    k: usize,
    batch: usize,
    split_k: Option<u32>,
) -> Result<GemmPlan> {
    if split_k == Some(0) {
        return Err(Error::arg(
            "gemm",
            "split_k must be at least 1 (None picks it automatically)",
        ));
    }
    let sg8 = caps.sg8;
    let sgs = SG8_SGS;
    let tm = if sg8 { 32 * sgs as usize } else { 32 };
    let tiles = m
        .div_ceil(tm)
        .saturating_mul(n.div_ceil(32))
        .saturating_mul(batch)
        .max(1);
    let max_z = caps.max_workgroups_per_dim as usize;
    // Workgroups that keep the device busy. A CPU adapter (lavapipe) runs one workgroup per
    // thread and has a thread per core, so split-k only pays while the tiles are fewer than the
    // cores: measured on 2 cores, [64 x 8192] x [8192 x 64] (2 tiles) split 2, 4, 8 or 32 ways
    // took 1.06, 1.08, 1.09 and 1.18x the unsplit time. At least 2, so that a single tile with
    // a long K still splits on a one-core host.
    let target = if caps.cpu { caps.host_threads } else { 512 };
    let wanted = match split_k {
        Some(s) => s as usize,
        None if k >= 1024 && tiles < target => target.div_ceil(tiles).min(k / 256),
        None => 1,
    };
    if k == 0 {
        // Nothing to sum: one launch writes the epilogue (beta * C + bias) alone.
        return Ok(GemmPlan {
            sg8,
            sgs,
            splits: 1,
            k_chunk: 0,
        });
    }
    let splits = wanted.clamp(1, k).min((max_z / batch.max(1)).max(1));
    let k_chunk = k.div_ceil(splits);
    Ok(GemmPlan {
        sg8,
        sgs,
        splits: k.div_ceil(k_chunk) as u32,
        k_chunk: k_chunk as u32,
    })
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

/// Output shape of a batched product of `a [..., M, K]` and `b [..., K, N]` (both rank >= 2).
fn product_shape(
    op: &'static str,
    a: &[usize],
    b: &[usize],
) -> Result<(Vec<usize>, usize, usize, usize)> {
    let (ra, rb) = (a.len(), b.len());
    if ra < 2 || rb < 2 {
        return Err(Error::shape(
            op,
            format!("operands need rank >= 2, got {a:?} and {b:?}"),
        ));
    }
    let (m, ka, kb, n) = (a[ra - 2], a[ra - 1], b[rb - 2], b[rb - 1]);
    if ka != kb {
        return Err(Error::shape(
            op,
            format!("inner dimensions differ: a {a:?} has K={ka}, b {b:?} has K={kb}"),
        ));
    }
    let batch = broadcast_shapes(op, &a[..ra - 2], &b[..rb - 2]).map_err(|_| {
        Error::shape(
            op,
            format!("batch dims of a {a:?} and b {b:?} do not broadcast"),
        )
    })?;
    let mut out = batch;
    out.extend([m, n]);
    Ok((out, m, n, ka))
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
    fn new(
        op: &'static str,
        a: &Tensor,
        b: &Tensor,
        o: &GemmOptions<'a>,
        into: Option<&Tensor>,
    ) -> Result<Problem<'a>> {
        a.same_device(op, b)?;
        a.same_dtype(op, b)?;
        a.device().require_dtype(op, a.dtype)?;
        let (out_shape, m, n, k) = product_shape(op, a.shape(), b.shape())?;
        if k > MAX_K {
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
                    "batch dims {batch_shape:?} need {} strided dims, at most {MAX_BATCH_DIMS} \
                     are supported",
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
            alpha: o.alpha as f32,
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

    /// The workgroup grid of the product pass, or an error past the adapter's limit.
    fn grid(&self, op: &'static str, pl: &GemmPlan, max: u32) -> Result<[u32; 3]> {
        let (tm, tn) = pl.tile();
        let (m, n, k, batch) = (self.m, self.n, self.k, self.batch());
        let (gx, gy, gz) = (n.div_ceil(tn), m.div_ceil(tm), batch * pl.splits as usize);
        if gx > max as usize || gy > max as usize || gz > max as usize {
            return Err(Error::size(
                op,
                format!(
                    "[{m} x {k}] x [{k} x {n}] (batch {batch}) needs a grid of {gx}x{gy}x{gz} \
                     workgroups, over the adapter's {max}"
                ),
            ));
        }
        // The sg8 kernel walks rows along x (B-panel reuse between consecutive workgroups).
        Ok(if pl.sg8 {
            [gy as u32, gx as u32, gz as u32]
        } else {
            [gx as u32, gy as u32, gz as u32]
        })
    }
}

/// How C enters the epilogue: not at all (0), read through a broadcast layout (1), or as the
/// in-place output of [`gemm_into`] (2).
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
            if t.shape() != out_shape {
                return Err(Error::shape(
                    op,
                    format!(
                        "in-place C must have the output's shape {out_shape:?}, got {:?}",
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
            a.same_device(op, t)?;
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
        (None, Some(c)) if o.beta != 0.0 => {
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
            Ok((1, l))
        }
        _ => Ok((0, Layout::contiguous(out_shape))),
    }
}

/// The shared core of every public entry: validate, plan, then record the product pass (and,
/// with split-k, the fixed-order reduction of the slices). `into` is `None` for a fresh
/// output, or the in-place target (c_mode 2) for [`gemm_into`].
fn run(
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    o: &GemmOptions,
    into: Option<&Tensor>,
) -> Result<Tensor> {
    let pb = Problem::new(op, a, b, o, into)?;
    let dev = a.device();
    let (m, n, batch) = (pb.m, pb.n, pb.batch());
    let pl = plan(dev, m, n, pb.k, batch, o.split_k)?;
    let out = match into {
        Some(t) => t.clone(),
        None => Tensor::empty(dev, op, &pb.out_shape, a.dtype)?,
    };
    if m == 0 || n == 0 || batch == 0 {
        return Ok(out);
    }
    let limit = dev.max_binding_bytes();
    let c_t = if pb.c_mode == 1 { o.c } else { None };
    let bufs = [Some(a), Some(b), c_t, pb.bias, Some(&out)];
    if bufs.iter().flatten().any(|t| t.buffer().size() > limit) {
        // An operand or the output is larger than one binding: windows of rows and columns.
        super::gemm_window::run_windowed(op, &pb, &pl, o, a, b, c_t, &out)?;
        return Ok(out);
    }
    let grid = pb.grid(op, &pl, dev.limits().max_compute_workgroups_per_dimension)?;
    let params = pb.params(&pl, o);
    let c_buf = c_t.map_or(a.buffer(), |c| c.buffer());
    let bias_buf = pb.bias.map_or(a.buffer(), |t| t.buffer());
    let binds = GemmBinds {
        a: Bind::whole(a.buffer()),
        b: Bind::whole(b.buffer()),
        c: Bind::whole(c_buf),
        bias: Bind::whole(bias_buf),
        out: Bind::whole(out.buffer()),
    };
    dispatch(
        op,
        a,
        &pl,
        &params,
        o.activation,
        &binds,
        grid,
        (batch * m * n) as u64,
    )?;
    Ok(out)
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
    let shape_consts: &[(&str, f64)] = if pl.sg8 { &sgs } else { &[] };
    if pl.splits == 1 {
        let kernel = if pl.sg8 { &SG8 } else { &TILED };
        let bufs = [binds.a, binds.b, binds.c, binds.bias, binds.out];
        let consts = [&epi[..], shape_consts].concat();
        return dev.launch_binds(op, kernel, &dts, &consts, bytes, &bufs, grid);
    }
    let ws = Storage::scratch(dev, op, pl.splits as u64 * total * 4)?;
    let partial = if pl.sg8 { &SG8_PARTIAL } else { &TILED_PARTIAL };
    let ws_bind = Bind::whole(ws.buffer());
    let bufs = [binds.a, binds.b, ws_bind];
    dev.launch_binds(op, partial, &dts, shape_consts, bytes, &bufs, grid)?;
    let consts = [&epi[..], &[("WG", REDUCE_WG as f64)]].concat();
    let bufs = [binds.c, binds.bias, binds.out, ws_bind];
    let grid = dev.grid_1d(op, total.div_ceil(REDUCE_WG as u64))?;
    dev.launch_binds(op, &SPLITK_REDUCE, &dts, &consts, bytes, &bufs, grid)
}

/// `act(alpha * a @ b + beta * c + bias)` for `a [..., M, K]`, `b [..., K, N]` with broadcast
/// batch dims (`[4,1,m,k] x [1,3,k,n] -> [4,3,m,n]`).
///
/// PyTorch's `torch.addmm` / `torch.baddbmm` generalised, with a fused bias and activation:
/// `act(x @ w.T + b)` is one call, the `nn.Linear` forward. Operands are read through their
/// strides (transposed or broadcast views cost no copy); the output is a new contiguous tensor
/// of the operands' dtype, accumulated in f32. Long K is split into slices summed in a fixed
/// order ([`GemmOptions::split_k`]), so repeated runs give bitwise identical results.
///
/// Errors: [`Error::Shape`] for ranks below 2, inner dims that differ, batch dims or `c` that
/// do not broadcast, a bias of the wrong length; [`Error::DType`] / [`Error::DeviceMismatch`]
/// when operands differ; [`Error::InvalidArgument`] for `split_k: Some(0)`; [`Error::Size`]
/// for K beyond the supported length.
///
/// ```no_run,ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::ops::{gemm, Activation, Bias, GemmOptions};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let x = Tensor::full(&dev, &[32, 128], 0.5, DType::F32)?; // [batch, in]
/// let w = Tensor::full(&dev, &[64, 128], 0.01, DType::F32)?; // [out, in] (nn.Linear.weight)
/// let b = Tensor::zeros(&dev, &[64], DType::F32)?;
/// // relu(x @ w.T + b), one dispatch
/// let opts = GemmOptions {
///     bias: Some(Bias::PerColumn(&b)),
///     activation: Activation::Relu,
///     ..Default::default()
/// };
/// let y = gemm(&x, &w.transpose(0, 1)?, &opts)?;
/// assert_eq!(y.shape(), &[32, 64]);
/// # Ok(()) }
/// ```
pub fn gemm(a: &Tensor, b: &Tensor, options: &GemmOptions) -> Result<Tensor> {
    gemm_grad::recorded(a, b, options, |o| run("gemm", a, b, o, None))
}

/// In place: `c = alpha * a @ b + beta * c` (c contiguous with the output shape, not sharing
/// storage with a or b).
///
/// PyTorch's `c.addmm_(a, b, beta=beta, alpha=alpha)`: for accumulating into an existing
/// buffer (gradient accumulation, sums over K chunks) without allocating. Every handle and
/// view sharing `c`'s storage sees the result. Errors as [`gemm`], plus [`Error::Shape`] when
/// `c` is not a contiguous tensor of the output shape and [`Error::InvalidArgument`] when it
/// shares storage with `a` or `b`.
pub fn gemm_into(c: &Tensor, a: &Tensor, b: &Tensor, alpha: f64, beta: f64) -> Result<()> {
    let o = GemmOptions {
        alpha,
        beta,
        ..Default::default()
    };
    gemm_grad::check_in_place("gemm_into", &[c, a, b])?;
    run("gemm_into", a, b, &o, Some(c))?;
    c.bump_version();
    Ok(())
}

/// numpy / PyTorch `matmul`: 1-D operands are promoted (and the added dim removed again),
/// batch dims broadcast.
///
/// [`gemm`] with default options behind PyTorch's `@`: `[K] @ [K]` is a 0-d dot product,
/// `[M, K] @ [K]` a matrix-vector product `[M]`, `[B, M, K] @ [K, N]` a batched product
/// `[B, M, N]`. Errors as [`gemm`], and [`Error::Shape`] for a 0-d operand.
///
/// ```no_run,ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::ops::matmul;
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let a = Tensor::full(&dev, &[8, 16, 32], 1.0, DType::F32)?;
/// let b = Tensor::full(&dev, &[32, 4], 2.0, DType::F32)?;
/// assert_eq!(matmul(&a, &b)?.shape(), &[8, 16, 4]); // b broadcasts over the batch
/// let v = Tensor::full(&dev, &[32], 1.0, DType::F32)?;
/// assert_eq!(a.matmul(&v)?.shape(), &[8, 16]); // matrix-vector
/// # Ok(()) }
/// ```
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let op = "matmul";
    if a.rank() == 0 || b.rank() == 0 {
        return Err(Error::shape(
            op,
            format!(
                "matmul needs rank >= 1, got {:?} and {:?}",
                a.shape(),
                b.shape()
            ),
        ));
    }
    // Views, not reshapes: a strided or broadcast 1-D operand must not be copied.
    let a2 = if a.rank() == 1 {
        a.unsqueeze(0)?
    } else {
        a.clone()
    };
    let b2 = if b.rank() == 1 {
        b.unsqueeze(1)?
    } else {
        b.clone()
    };
    let out = gemm_grad::recorded(&a2, &b2, &GemmOptions::default(), |o| {
        run(op, &a2, &b2, o, None)
    })?;
    let mut shape = out.shape().to_vec();
    let r = shape.len();
    match (a.rank() == 1, b.rank() == 1) {
        (true, true) => shape.truncate(r - 2),
        (true, false) => {
            shape.remove(r - 2);
        }
        (false, true) => {
            shape.pop();
        }
        (false, false) => return Ok(out),
    }
    out.reshape(&shape)
}

impl Tensor {
    /// `self @ other`, PyTorch's `Tensor.matmul`: see [`matmul`].
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        matmul(self, other)
    }
}

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
    }
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

#[cfg(test)]
mod plan_tests {
    use super::*;

    #[test]
    fn lavapipe_splits_only_while_tiles_are_fewer_than_cores() {
        let caps = Caps::test_lavapipe(2);
        // One 32x32 tile with a long K: split over the 2 cores.
        let p = plan_for(&caps, 32, 32, 8192, 1, None).unwrap();
        assert!(p.sg8);
        assert_eq!((p.splits, p.k_chunk), (2, 4096));
        // Two tiles already cover 2 cores.
        assert_eq!(plan_for(&caps, 64, 32, 8192, 1, None).unwrap().splits, 1);
        // Short K never splits.
        assert_eq!(plan_for(&caps, 32, 32, 1000, 1, None).unwrap().splits, 1);
    }

    #[test]
    fn gpus_split_long_k_over_few_tiles_with_slices_of_at_least_256() {
        let caps = Caps::test_gpu();
        let p = plan_for(&caps, 64, 64, 8192, 1, None).unwrap();
        assert!(!p.sg8);
        assert_eq!(p.splits, 32, "{p:?}");
        assert!(p.k_chunk >= 256);
        let p = plan_for(&caps, 64, 64, 1 << 20, 1, Some(7)).unwrap();
        assert_eq!(p.splits, 7);
        assert!(p.splits as u64 * p.k_chunk as u64 >= 1 << 20);
    }

    #[test]
    fn empty_and_degenerate_problems() {
        let caps = Caps::test_gpu();
        let p = plan_for(&caps, 3, 3, 0, 1, Some(4)).unwrap();
        assert_eq!((p.splits, p.k_chunk), (1, 0));
        assert!(plan_for(&caps, 0, 0, 4096, 0, None).unwrap().splits >= 1);
        assert!(plan_for(&caps, 3, 3, 3, 1, Some(0)).is_err());
        // Forced splits beyond K give one-step slices, never empty ones.
        let p = plan_for(&caps, 3, 3, 5, 1, Some(64)).unwrap();
        assert_eq!((p.splits, p.k_chunk), (5, 1));
    }
}
