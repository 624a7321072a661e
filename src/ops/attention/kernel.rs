//! The fused attention kernels' params, plan and launches: tiles through workgroup memory on
//! GPUs (shaders/attention.wgsl), one invocation per row on CPU adapters
//! (shaders/attention_rows.wgsl); both share shaders/lib/attention_common.wgsl.

use bytemuck::{Pod, Zeroable};

use super::Problem;
use crate::autograd::sum_to;
use crate::ops::activation::ACTIVATION;
use crate::ops::random::PHILOX;
use crate::runtime::pipeline::{ShaderLib, ShaderVariant};
use crate::runtime::{Access, Bind, Caps, Kernel};
use crate::{DType, Result, Tensor};
use Access::{Read as R, ReadWrite as RW};

const SRC: &str = include_str!("../../../shaders/attention.wgsl");
const ROWS_SRC: &str = include_str!("../../../shaders/attention_rows.wgsl");
const REG_SRC: &str = include_str!("../../../shaders/attention_reg.wgsl");
static COMMON: ShaderLib =
    ShaderLib::new(include_str!("../../../shaders/lib/attention_common.wgsl"));
const LIBS: &[&ShaderLib] = &[&PHILOX, &ACTIVATION, &COMMON];

/// Output columns per invocation and column block: the shaders' `const ACC` (tiles) and
/// `const ACCR` (rows); a private array's length must be a constant, a unit test checks that
/// the two sides agree.
pub(crate) const ACC: u32 = 16;
pub(crate) const ACCR: u32 = 64;
/// Output columns per invocation of the register-tiled forward (its `const CPL`): a column
/// block of 16 CPL columns.
pub(crate) const CPL: u32 = 8;
/// Query rows per workgroup of the register-tiled forward (its `const BR`).
const REG_ROWS: u32 = 64;
// Its workgroup memory (stg, sp, rm, rl; a unit test checks the shader's array sizes) within
// WebGPU's default 16 KiB.
const _: () = assert!((1632 + 2112 + 2 * REG_ROWS) * 4 <= 16384);
/// Invocations per workgroup of the row kernels.
const ROWS_WG: u32 = 64;

/// Forward: q, k, v, mask read; out, stats written; dout's slot holds q, never read (the
/// shaders' `load` names every operand, so every entry point binds them all).
const FWD_BINDS: &[Access] = &[R, R, R, R, R, RW, RW];
const FWD_SLOTS: &[u32] = &[1, 2, 3, 4, 8, 5, 6];
/// dQ: q, k, v, mask, o, dout read; stats (lse read, D written), dq written.
const DQ_BINDS: &[Access] = &[R, R, R, R, R, R, RW, RW];
const DQ_SLOTS: &[u32] = &[1, 2, 3, 4, 7, 8, 6, 9];
/// dK/dV: q, k, v, mask, dout, stats read; dk, dv written.
const DKV_BINDS: &[Access] = &[R, R, R, R, R, R, RW, RW];
const DKV_SLOTS: &[u32] = &[1, 2, 3, 4, 8, 10, 11, 12];

static FWD: Kernel = Kernel::new("attention", SRC, "attn_fwd", FWD_BINDS)
    .slots(FWD_SLOTS)
    .libs(LIBS);
static DQ: Kernel = Kernel::new("attention", SRC, "attn_dq", DQ_BINDS)
    .slots(DQ_SLOTS)
    .libs(LIBS);
static DKV: Kernel = Kernel::new("attention", SRC, "attn_dkv", DKV_BINDS)
    .slots(DKV_SLOTS)
    .libs(LIBS);
/// Merges the forward's key splits: scratch (as stats_r) read; out, stats written.
static COMBINE: Kernel = Kernel::new("attention", SRC, "attn_combine", &[R, RW, RW])
    .slots(&[10, 5, 6])
    .libs(LIBS);
static FWD_REG: Kernel = Kernel::new("attention", REG_SRC, "attn_fwd_reg", FWD_BINDS)
    .slots(FWD_SLOTS)
    .libs(LIBS);
static DQ_REG: Kernel = Kernel::new("attention", REG_SRC, "attn_dq_reg", DQ_BINDS)
    .slots(DQ_SLOTS)
    .libs(LIBS);
static DKV_REG: Kernel = Kernel::new("attention", REG_SRC, "attn_dkv_reg", DKV_BINDS)
    .slots(DKV_SLOTS)
    .libs(LIBS);
static FWD_ROWS: Kernel = Kernel::new("attention", ROWS_SRC, "attn_fwd_rows", FWD_BINDS)
    .slots(FWD_SLOTS)
    .libs(LIBS);
static DQ_ROWS: Kernel = Kernel::new("attention", ROWS_SRC, "attn_dq_rows", DQ_BINDS)
    .slots(DQ_SLOTS)
    .libs(LIBS);
static DKV_ROWS: Kernel = Kernel::new("attention", ROWS_SRC, "attn_dkv_rows", DKV_BINDS)
    .slots(DKV_SLOTS)
    .libs(LIBS);

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct AttnParams {
    n: u32,
    l: u32,
    s: u32,
    e: u32,
    ev: u32,
    heads: u32,
    kv_heads: u32,
    group: u32,
    scale: f32,
    flags: u32,
    drop_p: f32,
    drop_scale: f32,
    seed_lo: u32,
    seed_hi: u32,
    ctr: u32,
    row_blocks: u32,
    col_blocks: u32,
    batches: u32,
    m_off: u32,
    m_n0: u32,
    m_n1: u32,
    m_l: u32,
    m_s: u32,
    /// Forward: key ranges the rows are split into (1: none; see [`forward_plan`]).
    splits: u32,
}

/// A workgroup's tile: `br` rows by `bc` columns of invocations, operands staged in chunks of
/// `dk` values (a multiple of `bc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tile {
    /// Rows (queries, or keys in the dK/dV pass) per workgroup.
    pub br: u32,
    /// Keys (or queries) per tile of the walk, and lanes per row.
    pub bc: u32,
    /// Values per staged chunk of a head dimension.
    pub dk: u32,
}

/// Which kernels run and how they are shaped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// One invocation per row and block of `ACCR` (64) columns, no barriers (CPU adapters: a
    /// barrier switches every fibre of a workgroup there, and the tiled kernels compile slowly).
    Rows,
    /// Workgroup tiles through workgroup memory (GPUs).
    Tiles(Tile),
    /// Register tiles (GPUs, 32 rows or more: queries for the forward and dQ, keys for dK/dV):
    /// 64 rows x 32 keys (or queries) per workgroup of 256, each invocation holding 4 x 2
    /// scores and 4 x `CPL` (8) outputs (shaders/attention_reg.wgsl).
    RegTiles,
}

/// The plan for an adapter: rows on CPU adapters; on GPUs tiles of 16 x 16 invocations (256
/// lanes, 10.5 KB of workgroup memory: within WebGPU's default 16 KB with room for occupancy).
pub fn plan(caps: &Caps) -> Plan {
    if caps.cpu {
        Plan::Rows
    } else {
        Plan::Tiles(Tile {
            br: 16,
            bc: 16,
            dk: 64,
        })
    }
}

/// The forward's tile where queries are few (decoding one token, L <= [`DECODE_ROWS`]): one row
/// per workgroup and 32 keys per tile (one warp), so every lane scores a key and accumulates
/// value columns (the 16-row tile would leave 15 of its 16 rows idle). 64 keys would stage
/// 64 x 65 floats, past WebGPU's default 16 KB of workgroup memory.
const DECODE_TILE: Tile = Tile {
    br: 1,
    bc: 32,
    dk: 64,
};
/// Query rows up to which the forward takes [`DECODE_TILE`].
const DECODE_ROWS: usize = 4;
/// Query rows from which the forward takes [`Plan::RegTiles`] (at least half of its 64-row
/// blocks busy); fewer take the 16-row tile.
const REG_MIN_ROWS: usize = 32;
/// The fewest keys a split walks: shorter splits would cost more in the merge than they save.
const MIN_SPLIT_KEYS: usize = 128;
/// The most key splits of a row.
const MAX_SPLITS: usize = 64;

/// The forward's tile for grouped-query decoding: the query rows of every head sharing one
/// key/value head (group x L rows, L <= [`DECODE_ROWS`]) in one workgroup of 8 rows x 32 keys,
/// so each K/V tile is staged once for the whole group instead of once per query head.
const GROUP_TILE: Tile = Tile {
    br: 8,
    bc: 32,
    dk: 64,
};

/// What the forward runs: the plan, the key splits (1: none) and whether a workgroup takes the
/// rows of every query head of one key/value head (`GROUP_TILE`).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForwardPlan {
    /// The kernels and their tile.
    pub plan: Plan,
    /// Key ranges each row is split into.
    pub splits: u32,
    /// Rows of the grid's batch are the query rows of a whole key/value group.
    pub grouped: bool,
}

/// The forward's plan for `n` query batches of `l` queries over `s` keys with `ev` value
/// columns, `group` query heads per key/value head: a pure function of the problem and the
/// adapter. On GPUs 32 queries or more take the register tiles ([`Plan::RegTiles`]), fewer
/// the 16-row tile, and a few queries (decoding) a one-row tile, or with grouped-query heads a
/// tile holding the whole group's rows (K/V read once per group); when the workgroups (row
/// blocks x batches x column blocks) are too few to fill the device (decoding: L = 1 over 32
/// heads gives 32 workgroups on a GPU of 132 SMs, each walking every key), the keys are cut
/// into ranges walked by separate workgroups, whose partial rows (running max, sum and
/// unnormalized output) `attn_combine` merges in a fixed order (FlashDecoding: Dao et al.,
/// "Flash-Decoding for long-context inference", 2023). CPU adapters keep one pass.
#[doc(hidden)]
pub fn forward_plan(
    caps: &Caps,
    n: usize,
    l: usize,
    s: usize,
    ev: usize,
    group: usize,
) -> ForwardPlan {
    let base = plan(caps);
    let Plan::Tiles(general) = base else {
        return ForwardPlan {
            plan: base,
            splits: 1,
            grouped: false,
        };
    };
    let group = group.max(1);
    let grouped = l <= DECODE_ROWS && group > 1 && n.is_multiple_of(group);
    let (fplan, rows, batches) = if grouped {
        (Plan::Tiles(GROUP_TILE), group.saturating_mul(l), n / group)
    } else if l <= DECODE_ROWS {
        (Plan::Tiles(DECODE_TILE), l, n)
    } else if l >= REG_MIN_ROWS {
        (Plan::RegTiles, l, n)
    } else {
        (Plan::Tiles(general), l, n)
    };
    let lanes = fplan.lanes() as usize;
    let (br, cols) = fplan.rows_cols();
    let col_blocks = ev.div_ceil(cols as usize).max(1);
    let groups = rows
        .div_ceil(br as usize)
        .saturating_mul(batches)
        .saturating_mul(col_blocks);
    // Two workgroups per estimated slot of 256 lanes.
    let want = (caps.slots() * 2 * 256).div_ceil(lanes);
    let splits = want
        .div_ceil(groups.max(1))
        .min(s / MIN_SPLIT_KEYS)
        .min(MAX_SPLITS);
    let splits = if groups >= want || splits < 2 {
        1
    } else {
        splits as u32
    };
    ForwardPlan {
        plan: fplan,
        splits,
        grouped,
    }
}

/// The backward's plans, dQ's and dK/dV's: on GPUs the register tiles where their rows
/// (queries for dQ, keys for dK/dV) number `REG_MIN_ROWS` (32) or more, else [`plan`]'s.
#[doc(hidden)]
pub fn backward_plans(caps: &Caps, l: usize, s: usize) -> (Plan, Plan) {
    let base = plan(caps);
    let pick = |rows: usize| match base {
        Plan::Tiles(_) if rows >= REG_MIN_ROWS => Plan::RegTiles,
        other => other,
    };
    (pick(l), pick(s))
}

impl Plan {
    /// The forward, dQ and dK/dV kernels.
    fn kernels(self) -> [&'static Kernel; 3] {
        match self {
            Plan::Rows => [&FWD_ROWS, &DQ_ROWS, &DKV_ROWS],
            Plan::Tiles(_) => [&FWD, &DQ, &DKV],
            Plan::RegTiles => [&FWD_REG, &DQ_REG, &DKV_REG],
        }
    }

    fn consts(self) -> Vec<(&'static str, f64)> {
        match self {
            Plan::Rows => vec![("WG", f64::from(ROWS_WG))],
            Plan::Tiles(t) => vec![
                ("BR", f64::from(t.br)),
                ("BC", f64::from(t.bc)),
                ("DK", f64::from(t.dk)),
            ],
            Plan::RegTiles => vec![],
        }
    }

    /// Invocations per workgroup.
    fn lanes(self) -> u32 {
        match self {
            Plan::Rows => ROWS_WG,
            Plan::Tiles(t) => t.br * t.bc,
            Plan::RegTiles => 256,
        }
    }

    /// Rows per workgroup (1: the row kernels count invocations) and columns per block.
    fn rows_cols(self) -> (u32, u32) {
        match self {
            Plan::Rows => (1, ACCR),
            Plan::Tiles(t) => (t.br, ACC * t.bc),
            Plan::RegTiles => (REG_ROWS, 16 * CPL),
        }
    }

    /// Workgroups for `p`'s grid.
    fn groups(self, p: &AttnParams) -> u64 {
        let units = u64::from(p.row_blocks)
            * u64::from(p.batches)
            * u64::from(p.col_blocks)
            * u64::from(p.splits.max(1));
        match self {
            Plan::Rows => units.div_ceil(u64::from(ROWS_WG)),
            Plan::Tiles(_) | Plan::RegTiles => units,
        }
    }
}

/// What the forward keeps for the backward: per query row the log-sum-exp, then room for the
/// backward's `D = rowsum(dO * O)` (f32 `[2 N L]`), and the dropout stream's key.
pub(crate) struct Saved {
    stats: Tensor,
    seed: u64,
    ctr: u32,
}

fn params(
    prob: &Problem,
    plan: Plan,
    saved: (u64, u32),
    rows: usize,
    batches: usize,
    cols: usize,
) -> AttnParams {
    let m = prob.mask.as_ref();
    let p = prob.dropout_p;
    let dropout = p > 0.0;
    let flags = u32::from(m.is_some()) | (u32::from(prob.causal) << 1) | (u32::from(dropout) << 2);
    AttnParams {
        n: prob.n as u32,
        l: prob.l as u32,
        s: prob.s as u32,
        e: prob.e as u32,
        ev: prob.ev as u32,
        heads: prob.heads.max(1) as u32,
        kv_heads: prob.kv_heads.max(1) as u32,
        group: prob.group().max(1) as u32,
        // No head dim: every score is 0 (PyTorch's uniform weights), not 0 * inf.
        scale: if prob.e == 0 { 0.0 } else { prob.scale },
        flags,
        drop_p: p,
        drop_scale: if p < 1.0 { 1.0 / (1.0 - p) } else { 0.0 },
        seed_lo: saved.0 as u32,
        seed_hi: (saved.0 >> 32) as u32,
        ctr: saved.1,
        row_blocks: rows.div_ceil(plan.rows_cols().0 as usize) as u32,
        col_blocks: cols.div_ceil(plan.rows_cols().1 as usize).max(1) as u32,
        batches: batches as u32,
        m_off: m.map_or(0, |m| m.off as u32),
        m_n0: m.map_or(0, |m| m.n0_stride as u32),
        m_n1: m.map_or(0, |m| m.n1_stride as u32),
        m_l: m.map_or(0, |m| m.l_stride as u32),
        m_s: m.map_or(0, |m| m.s_stride as u32),
        splits: 1,
    }
}

/// The mask's buffer, or a one-value stand-in (never read: the flags say there is no mask).
fn mask_tensor(prob: &Problem) -> Result<Tensor> {
    match &prob.mask {
        Some(m) => Ok(m.t.clone()),
        None => Tensor::zeros(prob.q.device(), &[1], DType::F32),
    }
}

/// Launches kernel `which` (0 forward, 1 dQ, 2 dK/dV) of the plan.
fn launch(prob: &Problem, plan: Plan, which: usize, p: &AttnParams, binds: &[Bind]) -> Result<()> {
    let dev = prob.q.device();
    let grid = dev.grid_1d(prob.op, plan.groups(p))?;
    dev.launch_binds(
        prob.op,
        plan.kernels()[which],
        &[prob.q.dtype],
        &plan.consts(),
        bytemuck::bytes_of(p),
        binds,
        grid,
    )
}

/// The untracked forward: the output `[.., L, Ev]` and what the backward needs.
pub(crate) fn forward(prob: &Problem) -> Result<(Tensor, Saved)> {
    let dev = prob.q.device();
    let (seed, ctr) = if prob.dropout_p > 0.0 {
        dev.take_random_counters(1)
    } else {
        (0, 0)
    };
    let stats = Tensor::empty(dev, prob.op, &[2 * prob.n * prob.l], DType::F32)?;
    let saved = Saved {
        stats,
        seed,
        ctr: ctr as u32,
    };
    let shape = prob.out_shape();
    if prob.n * prob.l * prob.ev == 0 {
        return Ok((Tensor::empty(dev, prob.op, &shape, prob.q.dtype)?, saved));
    }
    if prob.s == 0 {
        return Ok((Tensor::zeros(dev, &shape, prob.q.dtype)?, saved));
    }
    let out = Tensor::empty(dev, prob.op, &shape, prob.q.dtype)?;
    let fp = forward_plan(dev.caps(), prob.n, prob.l, prob.s, prob.ev, prob.group());
    let (plan, splits) = (fp.plan, fp.splits);
    let mut p = if fp.grouped {
        let group = prob.group();
        let mut p = params(
            prob,
            plan,
            (seed, saved.ctr),
            group * prob.l,
            prob.n / group,
            prob.ev,
        );
        p.flags |= 8;
        p
    } else {
        params(prob, plan, (seed, saved.ctr), prob.l, prob.n, prob.ev)
    };
    let mask = mask_tensor(prob)?;
    // Split rows leave, per split and row, Ev unnormalized outputs, then (max, sum) pairs.
    let rows = (prob.n * prob.l) as u64;
    let scratch_bytes = u64::from(splits) * rows * (prob.ev as u64 + 2) * 4;
    let scratch = if splits > 1 && scratch_bytes <= dev.max_binding_bytes() {
        p.splits = splits;
        Some(crate::runtime::Storage::scratch(
            dev,
            prob.op,
            scratch_bytes,
        )?)
    } else {
        None
    };
    let stats_out = scratch
        .as_ref()
        .map_or(saved.stats.buffer(), |s| s.buffer());
    let binds = [
        Bind::whole(prob.q.buffer()),
        Bind::whole(prob.k.buffer()),
        Bind::whole(prob.v.buffer()),
        Bind::whole(mask.buffer()),
        Bind::whole(prob.q.buffer()),
        Bind::whole(out.buffer()),
        Bind::whole(stats_out),
    ];
    launch(prob, plan, 0, &p, &binds)?;
    if let Some(scratch) = &scratch {
        // attn_combine runs on the tiles' shader: the register tiles' splits merge on the
        // general tile's workgroup size.
        let plan = match plan {
            Plan::RegTiles => self::plan(dev.caps()),
            other => other,
        };
        let lanes = u64::from(plan.lanes());
        let grid = dev.grid_1d(prob.op, (rows * prob.ev as u64).div_ceil(lanes))?;
        let binds = [
            Bind::whole(scratch.buffer()),
            Bind::whole(out.buffer()),
            Bind::whole(saved.stats.buffer()),
        ];
        dev.launch_binds(
            prob.op,
            &COMBINE,
            &[prob.q.dtype],
            &plan.consts(),
            bytemuck::bytes_of(&p),
            &binds,
            grid,
        )?;
    }
    Ok((out, saved))
}

/// The untracked backward: dq when `need_q`, dk and dv when `need_kv`, each shaped as the
/// caller's operand (summed over broadcast dims).
pub(crate) fn backward(
    prob: &Problem,
    out: &Tensor,
    saved: &Saved,
    dout: &Tensor,
    need_q: bool,
    need_kv: bool,
) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
    let dev = prob.q.device();
    let op = prob.op;
    out.check_grad_output(op, dout)?;
    let dout = dout.contiguous()?;
    // Every element is written when there is work; zeros when there is none (no keys, or no
    // queries or value columns to take gradient from).
    let live = prob.n * prob.l * prob.s * prob.ev > 0;
    let alloc = |t: &Tensor| {
        if live {
            Tensor::empty(dev, op, t.shape(), t.dtype)
        } else {
            Tensor::zeros(dev, t.shape(), t.dtype)
        }
    };
    let (dq, dk, dv) = (alloc(&prob.q)?, alloc(&prob.k)?, alloc(&prob.v)?);
    if live {
        let (plan, kv_plan) = backward_plans(dev.caps(), prob.l, prob.s);
        let key = (saved.seed, saved.ctr);
        let mask = mask_tensor(prob)?;
        // dQ (and D, which the dK/dV pass reads): always, D is needed by both.
        let p = params(prob, plan, key, prob.l, prob.n, prob.e);
        let binds = [
            Bind::whole(prob.q.buffer()),
            Bind::whole(prob.k.buffer()),
            Bind::whole(prob.v.buffer()),
            Bind::whole(mask.buffer()),
            Bind::whole(out.buffer()),
            Bind::whole(dout.buffer()),
            Bind::whole(saved.stats.buffer()),
            Bind::whole(dq.buffer()),
        ];
        launch(prob, plan, 1, &p, &binds)?;
        if need_kv {
            let nk: usize = prob.kv_lead.iter().product();
            let p = params(prob, kv_plan, key, prob.s, nk, prob.e.max(prob.ev));
            let binds = [
                Bind::whole(prob.q.buffer()),
                Bind::whole(prob.k.buffer()),
                Bind::whole(prob.v.buffer()),
                Bind::whole(mask.buffer()),
                Bind::whole(dout.buffer()),
                Bind::whole(saved.stats.buffer()),
                Bind::whole(dk.buffer()),
                Bind::whole(dv.buffer()),
            ];
            launch(prob, kv_plan, 2, &p, &binds)?;
        }
    }
    let [qs, ks, vs] = &prob.shapes;
    let dq = if need_q { Some(sum_to(&dq, qs)?) } else { None };
    let (dk, dv) = if need_kv {
        (Some(sum_to(&dk, ks)?), Some(sum_to(&dv, vs)?))
    } else {
        (None, None)
    };
    Ok((dq, dk, dv))
}

/// The attention family's entry in the kernel-family registry (`ops::families()`).
pub(crate) const FAMILY: crate::runtime::pipeline::Family = crate::runtime::pipeline::Family {
    name: "attention",
    shaders: &[
        "attention.wgsl",
        "attention_rows.wgsl",
        "attention_reg.wgsl",
    ],
    params: || vec![params_layout()],
    variants: attention_variants,
};

#[doc(hidden)]
pub fn attention_variants() -> Vec<ShaderVariant> {
    let mut v = Vec::new();
    for caps in [Caps::test_lavapipe(2), Caps::test_gpu()] {
        let plan = plan(&caps);
        for k in plan.kernels() {
            for dt in [DType::F32, DType::F16] {
                v.push(ShaderVariant::new(k, &[dt], &plan.consts()));
            }
        }
        if let Plan::Tiles(_) = plan {
            for dt in [DType::F32, DType::F16] {
                v.push(ShaderVariant::new(&COMBINE, &[dt], &plan.consts()));
            }
        }
    }
    for k in [&FWD_REG, &DQ_REG, &DKV_REG] {
        for dt in [DType::F32, DType::F16] {
            v.push(ShaderVariant::new(k, &[dt], &[]));
        }
    }
    for tile in [DECODE_TILE, GROUP_TILE] {
        for k in [&FWD, &COMBINE] {
            for dt in [DType::F32, DType::F16] {
                v.push(ShaderVariant::new(k, &[dt], &Plan::Tiles(tile).consts()));
            }
        }
    }
    v
}

/// The params struct's layout, checked against the shader's `struct Params` in tests/shaders.rs.
#[doc(hidden)]
pub fn params_layout() -> crate::runtime::pipeline::ParamsLayout {
    crate::runtime::pipeline::params_layout!(
        FWD,
        &[DType::F32],
        AttnParams {
            n,
            l,
            s,
            e,
            ev,
            heads,
            kv_heads,
            group,
            scale,
            flags,
            drop_p,
            drop_scale,
            seed_lo,
            seed_hi,
            ctr,
            row_blocks,
            col_blocks,
            batches,
            m_off,
            m_n0,
            m_n1,
            m_l,
            m_s,
            splits
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shader_acc_matches() {
        assert!(SRC.contains(&format!("const ACC: u32 = {ACC}u;")));
        assert!(ROWS_SRC.contains(&format!("const ACCR: u32 = {ACCR}u;")));
        assert!(REG_SRC.contains(&format!("const CPL: u32 = {CPL}u;")));
        assert!(REG_SRC.contains(&format!("const BR: u32 = {REG_ROWS}u;")));
        // Its workgroup memory (stg, sp, rm, rl) within WebGPU's default 16 KiB.
        assert!(
            REG_SRC.contains("stg: array<f32, 1632>") && REG_SRC.contains("sp: array<f32, 2112>")
        );
    }

    #[test]
    fn forward_splits_keys_only_when_workgroups_are_too_few() {
        let (gpu, lvp) = (Caps::test_gpu(), Caps::test_lavapipe(2));
        let fp = |caps: &Caps, n, l, s, ev, g| forward_plan(caps, n, l, s, ev, g);
        // Decoding one token over 32 heads and 8k keys: the decode tile, 64 key ranges of 128.
        assert_eq!(
            fp(&gpu, 32, 1, 8192, 128, 1),
            ForwardPlan {
                plan: Plan::Tiles(DECODE_TILE),
                splits: 64,
                grouped: false
            }
        );
        // CPU adapters keep one pass of rows.
        assert_eq!(
            fp(&lvp, 32, 1, 8192, 128, 4),
            ForwardPlan {
                plan: Plan::Rows,
                splits: 1,
                grouped: false
            }
        );
        // Prefill over many batches fills the device: no split, the register tiles.
        let p = fp(&gpu, 64, 2048, 2048, 64, 1);
        assert_eq!((p.plan, p.splits, p.grouped), (Plan::RegTiles, 1, false));
        // Fewer than 32 queries: the 16-row tile.
        assert_eq!(fp(&gpu, 64, 31, 2048, 64, 1).plan, plan(&gpu));
        assert_eq!(fp(&gpu, 64, 32, 2048, 64, 1).plan, Plan::RegTiles);
        // Few batches of a long prefill: split.
        assert!(fp(&gpu, 8, 256, 4096, 64, 1).splits > 1);
        // Too few keys to split.
        assert_eq!(fp(&gpu, 1, 1, 200, 64, 1).splits, 1);
        // Never more than MAX_SPLITS, never below MIN_SPLIT_KEYS keys a split.
        assert_eq!(fp(&gpu, 1, 1, 1 << 20, 64, 1).splits as usize, MAX_SPLITS);
        let s = fp(&gpu, 1, 1, 1000, 64, 1).splits;
        assert!(s as usize <= 1000 / MIN_SPLIT_KEYS, "{s}");
        // Grouped-query decoding (32 query heads over 8 K/V heads): the group tile, one K/V
        // read per group, still split over the keys.
        let p = fp(&gpu, 32, 1, 8192, 128, 4);
        assert_eq!((p.plan, p.grouped), (Plan::Tiles(GROUP_TILE), true));
        assert!(p.splits > 1);
        // Prefill with groups keeps the general tile.
        assert!(!fp(&gpu, 32, 512, 512, 64, 4).grouped);
    }

    #[test]
    fn backward_takes_register_tiles_from_32_rows() {
        let (gpu, lvp) = (Caps::test_gpu(), Caps::test_lavapipe(2));
        assert_eq!(backward_plans(&gpu, 32, 31), (Plan::RegTiles, plan(&gpu)));
        assert_eq!(backward_plans(&gpu, 5, 1024), (plan(&gpu), Plan::RegTiles));
        assert_eq!(backward_plans(&lvp, 1024, 1024), (Plan::Rows, Plan::Rows));
    }

    #[test]
    fn plans_by_adapter() {
        assert_eq!(plan(&Caps::test_lavapipe(2)), Plan::Rows);
        let Plan::Tiles(t) = plan(&Caps::test_gpu()) else {
            panic!("GPUs take tiles");
        };
        for t in [t, DECODE_TILE, GROUP_TILE] {
            assert_eq!(t.dk % t.bc, 0, "{t:?}");
            assert_eq!((ACC * t.bc) % t.dk, 0, "{t:?}");
            assert!(t.br * t.bc <= 256, "{t:?}");
            let pk = t.dk + 1;
            let floats = t.br * pk + t.bc * pk + 2 * t.br * t.bc + 3 * t.br;
            assert!(floats * 4 <= 16384, "{t:?}: {} bytes", floats * 4);
        }
    }
}
