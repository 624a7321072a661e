//! The fused attention kernels' params, tile plan and launches (shaders/attention.wgsl).

use bytemuck::{Pod, Zeroable};

use super::Problem;
use crate::autograd::sum_to;
use crate::ops::activation::ACTIVATION;
use crate::ops::random::PHILOX;
use crate::runtime::pipeline::ShaderVariant;
use crate::runtime::{Access, Bind, Caps, Kernel};
use crate::{DType, Result, Tensor};
use Access::{Read as R, ReadWrite as RW};

const SRC: &str = include_str!("../../../shaders/attention.wgsl");

/// Output columns per invocation and column block: the shader's `const ACC` (a private array's
/// length must be a constant; a unit test checks the two agree).
pub(crate) const ACC: u32 = 16;

static FWD: Kernel = Kernel::new("attention", SRC, "attn_fwd", &[R, R, R, R, RW, RW])
    .slots(&[1, 2, 3, 4, 5, 6])
    .libs(&[&PHILOX, &ACTIVATION]);
static DQ: Kernel = Kernel::new("attention", SRC, "attn_dq", &[R, R, R, R, R, R, RW, RW])
    .slots(&[1, 2, 3, 4, 7, 8, 6, 9])
    .libs(&[&PHILOX, &ACTIVATION]);
static DKV: Kernel = Kernel::new("attention", SRC, "attn_dkv", &[R, R, R, R, R, R, RW, RW])
    .slots(&[1, 2, 3, 4, 8, 10, 11, 12])
    .libs(&[&PHILOX, &ACTIVATION]);

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
    _pad0: u32,
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

/// The tile for an adapter: 8 x 8 invocations on CPU adapters (a barrier there switches every
/// fibre of the workgroup, so fewer lanes per barrier), 16 x 16 on GPUs (256 lanes, 10.5 KB of
/// workgroup memory: within WebGPU's default 16 KB with room for occupancy).
pub fn plan(caps: &Caps) -> Tile {
    if caps.cpu {
        Tile {
            br: 8,
            bc: 8,
            dk: 32,
        }
    } else {
        Tile {
            br: 16,
            bc: 16,
            dk: 64,
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
    tile: Tile,
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
        row_blocks: rows.div_ceil(tile.br as usize) as u32,
        col_blocks: cols.div_ceil((ACC * tile.bc) as usize).max(1) as u32,
        batches: batches as u32,
        m_off: m.map_or(0, |m| m.off as u32),
        m_n0: m.map_or(0, |m| m.n0_stride as u32),
        m_n1: m.map_or(0, |m| m.n1_stride as u32),
        m_l: m.map_or(0, |m| m.l_stride as u32),
        m_s: m.map_or(0, |m| m.s_stride as u32),
        _pad0: 0,
    }
}

fn consts(tile: Tile) -> [(&'static str, f64); 3] {
    [
        ("BR", f64::from(tile.br)),
        ("BC", f64::from(tile.bc)),
        ("DK", f64::from(tile.dk)),
    ]
}

/// The mask's buffer, or a one-value stand-in (never read: the flags say there is no mask).
fn mask_tensor(prob: &Problem) -> Result<Tensor> {
    match &prob.mask {
        Some(m) => Ok(m.t.clone()),
        None => Tensor::zeros(prob.q.device(), &[1], DType::F32),
    }
}

fn launch(
    prob: &Problem,
    kernel: &Kernel,
    tile: Tile,
    p: &AttnParams,
    binds: &[Bind],
) -> Result<()> {
    let dev = prob.q.device();
    let groups = u64::from(p.row_blocks) * u64::from(p.batches) * u64::from(p.col_blocks);
    let grid = dev.grid_1d(prob.op, groups)?;
    dev.launch_binds(
        prob.op,
        kernel,
        &[prob.q.dtype],
        &consts(tile),
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
    let tile = plan(dev.caps());
    let p = params(prob, tile, (seed, saved.ctr), prob.l, prob.n, prob.ev);
    let mask = mask_tensor(prob)?;
    let binds = [
        Bind::whole(prob.q.buffer()),
        Bind::whole(prob.k.buffer()),
        Bind::whole(prob.v.buffer()),
        Bind::whole(mask.buffer()),
        Bind::whole(out.buffer()),
        Bind::whole(saved.stats.buffer()),
    ];
    launch(prob, &FWD, tile, &p, &binds)?;
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
        let tile = plan(dev.caps());
        let key = (saved.seed, saved.ctr);
        let mask = mask_tensor(prob)?;
        // dQ (and D, which the dK/dV pass reads): always, D is needed by both.
        let p = params(prob, tile, key, prob.l, prob.n, prob.e);
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
        launch(prob, &DQ, tile, &p, &binds)?;
        if need_kv {
            let nk: usize = prob.kv_lead.iter().product();
            let p = params(prob, tile, key, prob.s, nk, prob.e.max(prob.ev));
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
            launch(prob, &DKV, tile, &p, &binds)?;
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
    shaders: &["attention.wgsl"],
    params: || vec![params_layout()],
    variants: attention_variants,
};

#[doc(hidden)]
pub fn attention_variants() -> Vec<ShaderVariant> {
    let mut v = Vec::new();
    for k in [&FWD, &DQ, &DKV] {
        for dt in [DType::F32, DType::F16] {
            for caps in [Caps::test_lavapipe(2), Caps::test_gpu()] {
                v.push(ShaderVariant::new(k, &[dt], &consts(plan(&caps))));
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
            _pad0
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shader_acc_matches() {
        assert!(SRC.contains(&format!("const ACC: u32 = {ACC}u;")));
    }

    #[test]
    fn tiles_fit_webgpu_defaults() {
        for caps in [Caps::test_lavapipe(2), Caps::test_gpu()] {
            let t = plan(&caps);
            assert_eq!(t.dk % t.bc, 0, "{t:?}");
            assert_eq!((ACC * t.bc) % t.dk, 0, "{t:?}");
            assert!(t.br * t.bc <= 256, "{t:?}");
            let pk = t.dk + 1;
            let floats = t.br * pk + t.bc * pk + 2 * t.br * t.bc + 3 * t.br;
            assert!(floats * 4 <= 16384, "{t:?}: {} bytes", floats * 4);
        }
    }
}
