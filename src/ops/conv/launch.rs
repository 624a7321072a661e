//! The implicit-GEMM launch shared by forward, data gradient and weight gradient
//! (shaders/conv.wgsl, shaders/conv_sg8.wgsl, shaders/lib/conv_common.wgsl). Each direction is
//! only a different [`ConvParams`]: which tensor is A, which is gathered as B, and how rows,
//! columns and K map onto them. All groups run in one dispatch (grid z = split * groups + g).

use super::geom::Geom;
use super::params::{ConvParams, Direction};
use super::plan::{
    launch_plan, ConvPlan, ConvVariant, DIRECT_COLS, DIRECT_ROWS, DIRECT_WG, GEMM_ROW_BLOCKS,
    SG8_SUBGROUPS, WG_SHAPES,
};
use crate::ops::activation::{Activation, ACTIVATION, ACTIVATION_DEFS};
use crate::ops::gemm::launch::WG_TILE;
use crate::runtime::pipeline::{ShaderLib, ShaderVariant};
use crate::runtime::window::{too_wide, Span};
use crate::runtime::{Access, Bind, Kernel, Storage};
use crate::{DType, Device, Error, Result, Tensor};

static CONV_COMMON: ShaderLib =
    ShaderLib::new(include_str!("../../../shaders/lib/conv_common.wgsl"));
const LIBS: &[&ShaderLib] = &[&ACTIVATION, &CONV_COMMON];
const TILED_SRC: &str = include_str!("../../../shaders/conv.wgsl");
const SG8_SRC: &str = include_str!("../../../shaders/conv_sg8.wgsl");
const WG_SRC: &str = include_str!("../../../shaders/conv_wg.wgsl");
const WG_LIBS: &[&ShaderLib] = &[&ACTIVATION, &CONV_COMMON, &WG_TILE];

use Access::{Read as R, ReadWrite as RW};

static TILED: Kernel = Kernel::new("conv", TILED_SRC, "conv_tiled", &[R, R, R, RW])
    .slots(&[1, 2, 3, 4])
    .libs(LIBS);
static TILED_PARTIAL: Kernel = Kernel::new("conv", TILED_SRC, "conv_tiled_partial", &[R, R, RW])
    .slots(&[1, 2, 5])
    .libs(LIBS);
static SPLITK_REDUCE: Kernel = Kernel::new("conv", TILED_SRC, "conv_splitk_reduce", &[R, RW, RW])
    .slots(&[3, 4, 5])
    .libs(LIBS);
static SG8: Kernel = Kernel::new("conv_sg8", SG8_SRC, "conv_sg8", &[R, R, R, RW])
    .slots(&[1, 2, 3, 4])
    .libs(LIBS);
static SG8_PARTIAL: Kernel = Kernel::new("conv_sg8", SG8_SRC, "conv_sg8_partial", &[R, R, RW])
    .slots(&[1, 2, 5])
    .libs(LIBS);

static WG: Kernel = Kernel::new("conv_wg", WG_SRC, "conv_wg", &[R, R, R, RW])
    .slots(&[1, 2, 3, 4])
    .libs(WG_LIBS);
static WG_PARTIAL: Kernel = Kernel::new("conv_wg", WG_SRC, "conv_wg_partial", &[R, R, RW])
    .slots(&[1, 2, 5])
    .libs(WG_LIBS);

const DIRECT_SRC: &str = include_str!("../../../shaders/conv_direct.wgsl");

static DIRECT: Kernel = Kernel::new("conv_direct", DIRECT_SRC, "conv_direct", &[R, R, R, RW])
    .slots(&[1, 2, 3, 4])
    .libs(LIBS);
static DIRECT_L4: Kernel = Kernel::new("conv_direct", DIRECT_SRC, "conv_direct_l4", &[R, R, R, RW])
    .slots(&[1, 2, 3, 4])
    .libs(LIBS);
static DIRECT_PARTIAL: Kernel = Kernel::new(
    "conv_direct",
    DIRECT_SRC,
    "conv_direct_partial",
    &[R, R, RW],
)
.slots(&[1, 2, 5])
.libs(LIBS);
const REDUCE_WG: u32 = 256;

/// Records `dir` on geometry `g`: `a` and `b` are the GEMM operands in the roles of
/// [`ConvParams::new`], `out` the contiguous result. `bias` ([o] or [c] per output channel)
/// and `act` are fused into the store.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    op: &'static str,
    g: &Geom,
    dir: Direction,
    a: &Tensor,
    b: &Tensor,
    bias: Option<&Tensor>,
    act: Activation,
    out: &Tensor,
) -> Result<()> {
    let dev = a.device();
    let (mut p, transposed) = ConvParams::new(g, dir);
    let a = a.contiguous_at_zero()?;
    let b = b.contiguous_at_zero()?;
    p.a_off = a.layout().offset() as u32;
    p.b_off = b.layout().offset() as u32;
    // The kernels read the bias with unit stride: a strided view is packed first.
    let bias = bias.map(|t| t.contiguous_at_zero()).transpose()?;
    let bias = bias.as_ref();
    if let Some(t) = bias {
        p.bias_off = t.layout().offset() as u32;
    }
    let pl = launch_plan(dev, g, dir);
    p.splits = pl.splits;
    p.k_chunk = pl.k_chunk;
    let limit = dev.max_binding_bytes();
    let bias_buf = bias.map_or(a.buffer(), |t| t.buffer());
    let tensors = [a.buffer(), b.buffer(), bias_buf, out.buffer()];
    // Samples per launch whose grid fits the adapter's limits: all of them unless the output
    // columns (the samples' pixels, forward and data gradient) pass it on one axis.
    let fit = |n: usize| {
        let (pw, _) = ConvParams::new(&Geom { n, ..*g }, dir);
        grid(op, dev, &pw, &pl, g.groups, pl.splits).is_ok()
    };
    let whole = grid(op, dev, &p, &pl, g.groups, pl.splits);
    let grid_n = if dir == Direction::Weight || g.n == 0 || whole.is_ok() {
        g.n
    } else if !fit(1) {
        // One sample alone passes it: the error names the whole grid.
        return whole.map(drop);
    } else {
        // The largest fitting count (fit is monotone in n), by bisection.
        let (mut lo, mut hi) = (1, g.n);
        while lo + 1 < hi {
            let mid = lo + (hi - lo) / 2;
            if fit(mid) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    };
    if grid_n == g.n && tensors.iter().all(|t| t.size() <= limit) {
        let binds = tensors.map(Bind::whole);
        let dt = a.dtype();
        return dispatch(
            op,
            dev,
            &p,
            &pl,
            g.groups,
            transposed,
            bias.is_some(),
            act,
            dt,
            binds,
        );
    }
    // A tensor past one binding, or a grid past the adapter's limit: windows of whole
    // samples (forward and data gradient, whose output columns are (n, ...)), each run with
    // the full problem's plan, so every element is summed in the same order as unsplit. The
    // weight gradient sums over the samples.
    let (es, align) = (a.dtype().size() as u64, dev.storage_align());
    let cap = limit.saturating_sub(align + 4) / es;
    let per_sample = |t: &Tensor| (t.numel() / g.n.max(1)) as u64;
    let (sb, so) = (per_sample(&b), per_sample(out));
    if dir == Direction::Weight {
        return weight_grad_windows(op, g, &p, &pl, &a, &b, out, transposed);
    }
    let windowed = a.buffer().size() <= limit && bias_buf.size() <= limit && sb.max(so) <= cap;
    if !windowed {
        let big = tensors.iter().map(|t| t.size()).max().unwrap_or(0);
        return Err(too_wide(op, big, limit));
    }
    let nw = ((cap / sb.max(so).max(1)) as usize).min(grid_n).max(1);
    let (boff, ooff) = (b.layout().offset() as u64, out.layout().offset() as u64);
    for n0 in (0..g.n).step_by(nw) {
        let gw = Geom {
            n: nw.min(g.n - n0),
            ..*g
        };
        let (mut pw, _) = ConvParams::new(&gw, dir);
        let n = gw.n as u64;
        let b0 = boff + n0 as u64 * sb;
        let spb = Span::of(b0, b0 + n * sb, es, align, b.buffer().size());
        let o0 = ooff + n0 as u64 * so;
        let spo = Span::of(o0, o0 + n * so, es, align, out.buffer().size());
        pw.a_off = p.a_off;
        pw.b_off = spb.rel as u32;
        pw.o_off = spo.rel as u32;
        pw.bias_off = p.bias_off;
        pw.splits = pl.splits;
        pw.k_chunk = pl.k_chunk;
        let binds = [
            Bind::whole(a.buffer()),
            spb.bind(b.buffer()),
            Bind::whole(bias_buf),
            spo.bind(out.buffer()),
        ];
        let dt = a.dtype();
        dispatch(
            op,
            dev,
            &pw,
            &pl,
            g.groups,
            transposed,
            bias.is_some(),
            act,
            dt,
            binds,
        )?;
    }
    Ok(())
}

/// The grid of the product pass over `zs` split slices of every group.
fn grid(
    op: &'static str,
    dev: &Device,
    p: &ConvParams,
    pl: &ConvPlan,
    groups: usize,
    zs: u32,
) -> Result<[u32; 3]> {
    let (m, ncols, k) = (p.m as usize, p.ncols as usize, p.k as usize);
    let (tm, tn) = pl.tile();
    let (rows, cols) = (m.div_ceil(tm), ncols.div_ceil(tn));
    let gz = groups * zs as usize;
    let max = dev.limits().max_compute_workgroups_per_dimension as usize;
    // The direct kernels lay groups, rows, lines and columns out flat (grid_1d checks that
    // count); only their split slices take an axis of their own.
    let direct = matches!(pl.variant, ConvVariant::Direct | ConvVariant::DirectLines);
    if direct && zs as usize > max {
        return Err(Error::size(
            op,
            format!("{zs} split slices exceed the adapter's {max} workgroups on grid z"),
        ));
    }
    if !direct && (rows > max || cols > max || gz > max) {
        return Err(Error::size(
            op,
            format!("{m} x {ncols} outputs per group over K = {k} need a grid of {rows}x{cols}x{gz} workgroups, over the adapter's {max}"),
        ));
    }
    Ok(match pl.variant {
        ConvVariant::Sg8 => [rows as u32, cols as u32, gz as u32],
        ConvVariant::Tiled | ConvVariant::WgTiled => [cols as u32, rows as u32, gz as u32],
        ConvVariant::Direct => {
            // One invocation per (group, row block, line, 8-column block), flat over x and y.
            let lines = ncols / p.c_e2 as usize;
            let inv = groups
                * m.div_ceil(pl.rt as usize)
                * lines
                * (p.c_e2 as usize).div_ceil(DIRECT_COLS);
            let [x, y, _] = dev.grid_1d(op, inv.div_ceil(DIRECT_WG) as u64)?;
            [x, y, zs]
        }
        ConvVariant::DirectLines => {
            let lines = ncols / (p.c_e1 * p.c_e2) as usize * (p.c_e1 as usize).div_ceil(4);
            let inv = groups * lines * (p.c_e2 as usize).div_ceil(DIRECT_COLS);
            let [x, y, _] = dev.grid_1d(op, inv.div_ceil(DIRECT_WG) as u64)?;
            [x, y, 1]
        }
    })
}

/// The split-k partial kernel of `pl` and its constants.
fn partial_kernel(pl: &ConvPlan, transposed: bool) -> (&'static Kernel, Vec<(&'static str, f64)>) {
    let mut c = vec![("TRANSPOSED", transposed as u32 as f64)];
    let k = match pl.variant {
        ConvVariant::Sg8 => {
            c.extend([("RT", pl.rt as f64), ("SGS", pl.sgs as f64)]);
            &SG8_PARTIAL
        }
        ConvVariant::Tiled => &TILED_PARTIAL,
        ConvVariant::WgTiled => {
            c.extend([("TM", pl.rt as f64), ("TN", pl.ct as f64)]);
            &WG_PARTIAL
        }
        ConvVariant::Direct | ConvVariant::DirectLines => {
            c.extend([("WG", DIRECT_WG as f64), ("DR", pl.rt as f64)]);
            &DIRECT_PARTIAL
        }
    };
    (k, c)
}

/// The fixed-order sum of the split-k slices in `ws`, with bias and activation, into `out`.
#[allow(clippy::too_many_arguments)]
fn reduce(
    op: &'static str,
    dev: &Device,
    p: &ConvParams,
    groups: usize,
    has_bias: bool,
    act: Activation,
    dtype: DType,
    binds: [Bind; 3],
) -> Result<()> {
    let total = (groups * p.m as usize * p.ncols as usize) as u64;
    let consts = [
        ("BIAS", has_bias as u32 as f64),
        ("ACT", act as u32 as f64),
        ("WG", REDUCE_WG as f64),
    ];
    let grid = dev.grid_1d(op, total.div_ceil(REDUCE_WG as u64))?;
    let bytes = bytemuck::bytes_of(p);
    dev.launch_binds(op, &SPLITK_REDUCE, &[dtype], &consts, bytes, &binds, grid)
}

/// Records one convolution over `p` (planned as `pl`) with the bindings a, b, bias, out.
#[allow(clippy::too_many_arguments)]
fn dispatch(
    op: &'static str,
    dev: &Device,
    p: &ConvParams,
    pl: &ConvPlan,
    groups: usize,
    transposed: bool,
    has_bias: bool,
    act: Activation,
    dtype: DType,
    binds: [Bind; 4],
) -> Result<()> {
    let [a_bind, b_bind, bias_bind, out_bind] = binds;
    let grid = grid(op, dev, p, pl, groups, pl.splits)?;
    let bytes = bytemuck::bytes_of(p);
    let dts = [dtype];
    if pl.splits == 1 {
        let mut consts = vec![
            ("BIAS", has_bias as u32 as f64),
            ("ACT", act as u32 as f64),
            ("TRANSPOSED", transposed as u32 as f64),
        ];
        let kernel = match pl.variant {
            ConvVariant::Sg8 => {
                consts.extend([("RT", pl.rt as f64), ("SGS", pl.sgs as f64)]);
                &SG8
            }
            ConvVariant::Tiled => &TILED,
            ConvVariant::WgTiled => {
                consts.extend([("TM", pl.rt as f64), ("TN", pl.ct as f64)]);
                &WG
            }
            ConvVariant::Direct => {
                consts.extend([("WG", DIRECT_WG as f64), ("DR", pl.rt as f64)]);
                &DIRECT
            }
            ConvVariant::DirectLines => {
                consts.push(("WG", DIRECT_WG as f64));
                &DIRECT_L4
            }
        };
        let binds = [a_bind, b_bind, bias_bind, out_bind];
        return dev.launch_binds(op, kernel, &dts, &consts, bytes, &binds, grid);
    }
    let ws_bytes = pl.splits as u64 * (groups * p.m as usize * p.ncols as usize) as u64 * 4;
    let ws = Storage::scratch(dev, op, ws_bytes)?;
    let (partial, pconsts) = partial_kernel(pl, transposed);
    let ws_bind = Bind::whole(ws.buffer());
    let binds = [a_bind, b_bind, ws_bind];
    dev.launch_binds(op, partial, &dts, &pconsts, bytes, &binds, grid)?;
    let binds = [bias_bind, out_bind, ws_bind];
    reduce(op, dev, p, groups, has_bias, act, dtype, binds)
}

/// The weight gradient over dy or x past one binding: its K (samples x output positions) is
/// already cut into split-k slices, so windows of whole slices each bind the samples their
/// slices read and write those slices' partials (grid z offset by `z0`); one reduction then
/// sums every slice in the usual order: bitwise the unsplit result.
#[allow(clippy::too_many_arguments)]
fn weight_grad_windows(
    op: &'static str,
    g: &Geom,
    p: &ConvParams,
    pl: &ConvPlan,
    dy: &Tensor,
    x: &Tensor,
    out: &Tensor,
    transposed: bool,
) -> Result<()> {
    let dev = dy.device();
    let (limit, align) = (dev.max_binding_bytes(), dev.storage_align());
    let es = dy.dtype().size() as u64;
    let (sa, sb) = (p.a_s0 as u64, p.b_k0 as u64); // elements per sample of dy and x
    let ohw = (g.oh * g.ow) as u64;
    let (kc, k) = (pl.k_chunk as u64, p.k as u64);
    let ws_bytes = pl.splits as u64 * (g.groups as u64) * p.m as u64 * p.ncols as u64 * 4;
    let samples = |s0: u64, s1: u64| {
        let (a, b) = (s0 * kc, (s1 * kc).min(k));
        (a / ohw, b.div_ceil(ohw))
    };
    let fits = |s0, s1| {
        let (na, nb) = samples(s0, s1);
        (nb - na) * sa.max(sb) * es + align + 4 <= limit
    };
    let big = dy.buffer().size().max(x.buffer().size());
    if pl.splits < 2 || ws_bytes > limit || out.buffer().size() > limit {
        return Err(too_wide(op, big, limit));
    }
    let ws = Storage::scratch(dev, op, ws_bytes)?;
    let ws_bind = Bind::whole(ws.buffer());
    let (partial, pconsts) = partial_kernel(pl, transposed);
    let dts = [dy.dtype()];
    let mut s0 = 0u64;
    while s0 < pl.splits as u64 {
        if !fits(s0, s0 + 1) {
            return Err(too_wide(op, big, limit));
        }
        let mut s1 = s0 + 1;
        while s1 < pl.splits as u64 && fits(s0, s1 + 1) {
            s1 += 1;
        }
        let (na, nb) = samples(s0, s1);
        let span = |t: &Tensor, per: u64| {
            let first = t.layout().offset() as u64 + na * per;
            Span::of(first, first + (nb - na) * per, es, align, t.buffer().size())
        };
        let (spa, spb) = (span(dy, sa), span(x, sb));
        let mut pw = *p;
        pw.a_off = (spa.rel as u32).wrapping_sub((na * sa) as u32);
        pw.b_off = (spb.rel as u32).wrapping_sub((na * sb) as u32);
        pw.z0 = match pl.variant {
            ConvVariant::Direct | ConvVariant::DirectLines => s0 as u32,
            _ => (s0 as usize * g.groups) as u32,
        };
        let grid = grid(op, dev, &pw, pl, g.groups, (s1 - s0) as u32)?;
        let binds = [spa.bind(dy.buffer()), spb.bind(x.buffer()), ws_bind];
        dev.launch_binds(
            op,
            partial,
            &dts,
            &pconsts,
            bytemuck::bytes_of(&pw),
            &binds,
            grid,
        )?;
        s0 = s1;
    }
    // No bias: a placeholder of its own (a buffer may not be bound read-only and writable in
    // one dispatch).
    let no_bias = Storage::scratch(dev, op, 16)?;
    let binds = [
        Bind::whole(no_bias.buffer()),
        Bind::whole(out.buffer()),
        ws_bind,
    ];
    reduce(
        op,
        dev,
        p,
        g.groups,
        false,
        Activation::None,
        dy.dtype(),
        binds,
    )
}

/// The conv family's entry in the kernel-family registry (`ops::families()`).
pub(crate) const FAMILY: crate::runtime::pipeline::Family = crate::runtime::pipeline::Family {
    name: "conv",
    shaders: &[
        "conv.wgsl",
        "conv_sg8.wgsl",
        "conv_direct.wgsl",
        "conv_wg.wgsl",
    ],
    params: || vec![params_layout()],
    variants: conv_variants,
};

/// Every (kernel, dtypes, override constants) combination of this family's kernels, for
/// tests/shaders.rs to translate and validate each.
#[doc(hidden)]
pub fn conv_variants() -> Vec<ShaderVariant> {
    // Every table the planner picks from, so the list cannot drift from the plans.
    let mut v = Vec::new();
    for dt in [DType::F32, DType::F16] {
        for tr in [0.0, 1.0] {
            let gather = [("TRANSPOSED", tr)];
            for bias in [0.0, 1.0] {
                for &(_, act) in ACTIVATION_DEFS {
                    let mut c = vec![("BIAS", bias), ("ACT", act as f64)];
                    c.extend(gather);
                    v.push(ShaderVariant::new(&TILED, &[dt], &c));
                    for (tm, tn) in WG_SHAPES {
                        let mut w = c.clone();
                        w.extend([("TM", tm as f64), ("TN", tn as f64)]);
                        v.push(ShaderVariant::new(&WG, &[dt], &w));
                    }
                    let mut l4 = c.clone();
                    l4.push(("WG", DIRECT_WG as f64));
                    v.push(ShaderVariant::new(&DIRECT_L4, &[dt], &l4));
                    for dr in DIRECT_ROWS {
                        let mut d = c.clone();
                        d.extend([("WG", DIRECT_WG as f64), ("DR", dr as f64)]);
                        v.push(ShaderVariant::new(&DIRECT, &[dt], &d));
                    }
                    for rt in GEMM_ROW_BLOCKS {
                        for sgs in SG8_SUBGROUPS {
                            let mut e = c.clone();
                            e.extend([("RT", rt as f64), ("SGS", sgs as f64)]);
                            v.push(ShaderVariant::new(&SG8, &[dt], &e));
                        }
                    }
                    if tr == 0.0 {
                        let r = [
                            ("BIAS", bias),
                            ("ACT", act as f64),
                            ("WG", REDUCE_WG as f64),
                        ];
                        v.push(ShaderVariant::new(&SPLITK_REDUCE, &[dt], &r));
                    }
                }
            }
            v.push(ShaderVariant::new(&TILED_PARTIAL, &[dt], &gather));
            for (tm, tn) in WG_SHAPES {
                let w = [gather[0], ("TM", tm as f64), ("TN", tn as f64)];
                v.push(ShaderVariant::new(&WG_PARTIAL, &[dt], &w));
            }
            for dr in DIRECT_ROWS {
                let d = [gather[0], ("WG", DIRECT_WG as f64), ("DR", dr as f64)];
                v.push(ShaderVariant::new(&DIRECT_PARTIAL, &[dt], &d));
            }
            for rt in GEMM_ROW_BLOCKS {
                for sgs in SG8_SUBGROUPS {
                    let mut e = gather.to_vec();
                    e.extend([("RT", rt as f64), ("SGS", sgs as f64)]);
                    v.push(ShaderVariant::new(&SG8_PARTIAL, &[dt], &e));
                }
            }
        }
    }
    v
}

/// The params struct's layout, checked against the shader's `struct Params` in tests/shaders.rs.
#[doc(hidden)]
pub fn params_layout() -> crate::runtime::pipeline::ParamsLayout {
    crate::runtime::pipeline::params_layout!(
        TILED,
        &[DType::F32],
        ConvParams {
            m,
            ncols,
            k,
            groups,
            k_e1,
            k_e2,
            c_e1,
            c_e2,
            a_off,
            a_gs,
            a_rs,
            a_s0,
            a_s1,
            a_s2,
            b_off,
            b_gs,
            b_k0,
            b_c0,
            b_k1,
            b_k2,
            b_c1,
            b_c2,
            b_h0,
            b_w0,
            src_h,
            src_w,
            div_h,
            div_w,
            o_gs,
            o_rs,
            o_s0,
            o_s1,
            o_s2,
            splits,
            k_chunk,
            bias_off,
            scale,
            o_off,
            z0,
            _pad1
        }
    )
}
