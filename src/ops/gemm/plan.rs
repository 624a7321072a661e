//! The GEMM planner: which kernel runs and how K is split, a pure function of the problem and
//! the adapter facts.

use crate::{Caps, Device, Error, Result};

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
pub(crate) const SG8_SGS: u32 = 1;

#[doc(hidden)]
/// Picks the kernel and split factor. Split-k pays when the output tiles are too few to keep
/// the device busy and each tile has a long K loop (weight-gradient shapes such as
/// [64 x 8192] x [8192 x 64] on a GPU); slices keep at least 256 steps of K.
///
/// Total over its inputs: empty problems (a zero M, N, K or batch) plan one unsplit launch;
/// a forced `split_k` of 0 is refused as `gemm` refuses it.
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
