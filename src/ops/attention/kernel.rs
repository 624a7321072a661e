//! The fused attention kernels' params and launches: tiles through workgroup memory on GPUs
//! (shaders/attention.wgsl), one invocation
//! per row on CPU adapters (shaders/attention_rows.wgsl); all share
//! shaders/lib/attention_common.wgsl. Which of them runs, and how shaped: plan.rs.

use bytemuck::{Pod, Zeroable};

use super::plan::{forward_plan, plan, Plan, DECODE_TILE, GROUP_TILE, ROWS_WG};
use super::Problem;
use crate::autograd::sum_to;
use crate::ops::activation::ACTIVATION;
use crate::ops::random::PHILOX;
use crate::runtime::pipeline::{ShaderLib, ShaderVariant};
use crate::runtime::{Access, Bind, Caps, Kernel};
use crate::{DType, Error, Result, Tensor};
use Access::{Read as R, ReadWrite as RW};

const SRC: &str = include_str!("../../../shaders/attention.wgsl");
const ROWS_SRC: &str = include_str!("../../../shaders/attention_rows.wgsl");
static COMMON: ShaderLib =
    ShaderLib::new(include_str!("../../../shaders/lib/attention_common.wgsl"));
const LIBS: &[&ShaderLib] = &[&PHILOX, &ACTIVATION, &COMMON];

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

impl Plan {
    /// The forward, dQ and dK/dV kernels.
    fn kernels(self) -> [&'static Kernel; 3] {
        match self {
            Plan::Rows => [&FWD_ROWS, &DQ_ROWS, &DKV_ROWS],
            Plan::Tiles(_) => [&FWD, &DQ, &DKV],
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
            Plan::Tiles(_) => units,
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
        drop_scale: prob.drop_scale,
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

/// The dropout stream of the device's (seed, counter) as the kernels take it: their counter
/// word holds 31 bits (its top bit tags attention's streams, lib/attention_common.wgsl), so
/// the counter's higher bits go into the key; two calls share a pattern only at the same full
/// counter, never at counters 2^31 apart.
fn stream_key(seed: u64, ctr: u64) -> (u64, u32) {
    (seed ^ (ctr >> 31), (ctr & 0x7FFF_FFFF) as u32)
}

/// The untracked forward: the output `[.., L, Ev]` and what the backward needs.
pub(crate) fn forward(prob: &Problem) -> Result<(Tensor, Saved)> {
    let dev = prob.q.device();
    let (seed, ctr) = if prob.dropout_p > 0.0 {
        dev.take_random_counters(1)
    } else {
        (0, 0)
    };
    let (seed, ctr) = stream_key(seed, ctr);
    let shape = prob.out_shape();
    if prob.n == 0 || prob.l == 0 || prob.ev == 0 {
        // Nothing to compute or to save (with ev = 0, n L may be past any buffer).
        let stats = Tensor::empty(dev, prob.op, &[0], DType::F32)?;
        let saved = Saved { stats, seed, ctr };
        return Ok((Tensor::empty(dev, prob.op, &shape, prob.q.dtype)?, saved));
    }
    // Checked: n L is bounded by u32 only, which a 32-bit usize (wasm32) does not double.
    let rows2 = prob
        .n
        .checked_mul(prob.l)
        .and_then(|r| r.checked_mul(2))
        .ok_or_else(|| {
            Error::size(
                prob.op,
                format!(
                    "{} x {} query rows overflow the row statistics",
                    prob.n, prob.l
                ),
            )
        })?;
    let stats = Tensor::empty(dev, prob.op, &[rows2], DType::F32)?;
    let saved = Saved { stats, seed, ctr };
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
    let dout = dout.contiguous_at_zero()?;
    // Every element is written when there is work; zeros when there is none (no keys, or no
    // queries or value columns to take gradient from).
    let live = [prob.n, prob.l, prob.s, prob.ev].iter().all(|&d| d > 0);
    let alloc = |t: &Tensor| {
        if live {
            Tensor::empty(dev, op, t.shape(), t.dtype)
        } else {
            Tensor::zeros(dev, t.shape(), t.dtype)
        }
    };
    let (dq, dk, dv) = (alloc(&prob.q)?, alloc(&prob.k)?, alloc(&prob.v)?);
    if live {
        let plan = plan(dev.caps());
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
            let p = params(prob, plan, key, prob.s, nk, prob.e.max(prob.ev));
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
            launch(prob, plan, 2, &p, &binds)?;
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
    shaders: &["attention.wgsl", "attention_rows.wgsl"],
    params: || vec![params_layout()],
    variants: attention_variants,
};

/// Every (kernel, dtypes, override constants) combination of this family's kernels, for
/// tests/shaders.rs to translate and validate each.
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
    use super::super::plan::{ACC, ACCR};
    use super::*;

    /// Distinct device counters give distinct streams, across the 31-bit word too; counters
    /// below 2^31 keep the seed as the key.
    #[test]
    fn stream_keys_never_repeat_across_the_counter_word() {
        let seed = 0x1234_5678_9abc_def0;
        let ctrs = [
            0u64,
            1,
            (1 << 31) - 1,
            1 << 31,
            (1 << 31) + 1,
            1 << 32,
            3 << 31,
            u64::MAX,
        ];
        let keys: Vec<_> = ctrs.iter().map(|&c| stream_key(seed, c)).collect();
        for (i, a) in keys.iter().enumerate() {
            assert!(a.1 < 1 << 31, "{a:?}");
            for b in &keys[i + 1..] {
                assert_ne!(a, b, "counters {ctrs:?}");
            }
        }
        assert_eq!(stream_key(seed, 5), (seed, 5));
    }

    #[test]
    fn shader_acc_matches() {
        assert!(SRC.contains(&format!("const ACC: u32 = {ACC}u;")));
        assert!(ROWS_SRC.contains(&format!("const ACCR: u32 = {ACCR}u;")));
    }
}
