//! The attention kernels' plans, pure functions of the problem's sizes and the adapter
//! (unit-tested without a GPU): which kernel set runs (rows on CPU adapters, tiles on GPUs),
//! its tile, and the forward's key splits. kernel.rs launches them.

use crate::runtime::Caps;

/// Output columns per invocation and column block: the shaders' `const ACC` (tiles) and
/// `const ACCR` (rows); a private array's length must be a constant, a unit test checks that
/// the two sides agree.
pub(crate) const ACC: u32 = 16;
pub(crate) const ACCR: u32 = 64;
/// Invocations per workgroup of the row kernels.
pub(crate) const ROWS_WG: u32 = 64;

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
    /// Workgroup tiles through workgroup memory (GPUs). (Register tiles of 64 rows, 4 x 8
    /// outputs per invocation, ran 1.5-1.8x slower than these on an NVIDIA H200, forward and
    /// backward, and were removed: git history holds their shader, attention_reg.wgsl.)
    Tiles(Tile),
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
pub(crate) const DECODE_TILE: Tile = Tile {
    br: 1,
    bc: 32,
    dk: 64,
};
/// Query rows up to which the forward takes [`DECODE_TILE`].
const DECODE_ROWS: usize = 4;
/// The fewest keys a split walks: shorter splits would cost more in the merge than they save.
const MIN_SPLIT_KEYS: usize = 128;
/// The most key splits of a row.
const MAX_SPLITS: usize = 64;

/// The forward's tile for grouped-query decoding: the query rows of every head sharing one
/// key/value head (group x L rows, L <= [`DECODE_ROWS`]) in one workgroup of 8 rows x 32 keys,
/// so each K/V tile is staged once for the whole group instead of once per query head.
pub(crate) const GROUP_TILE: Tile = Tile {
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
/// adapter. On GPUs the 16-row tile, and a few queries (decoding) a one-row tile, or with grouped-query heads a
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

impl Plan {
    /// Invocations per workgroup.
    pub(crate) fn lanes(self) -> u32 {
        match self {
            Plan::Rows => ROWS_WG,
            Plan::Tiles(t) => t.br * t.bc,
        }
    }

    /// Rows per workgroup (1: the row kernels count invocations) and columns per block.
    pub(crate) fn rows_cols(self) -> (u32, u32) {
        match self {
            Plan::Rows => (1, ACCR),
            Plan::Tiles(t) => (t.br, ACC * t.bc),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // Prefill over many batches fills the device: no split, the 16-row tile.
        let p = fp(&gpu, 64, 2048, 2048, 64, 1);
        assert_eq!((p.plan, p.splits, p.grouped), (plan(&gpu), 1, false));
        assert_eq!(fp(&gpu, 64, 5, 2048, 64, 1).plan, plan(&gpu));
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
