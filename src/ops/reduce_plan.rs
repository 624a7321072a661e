//! The reduction planner ([`reduce_plan`]): which kernel of src/ops/reduce.rs reduces a
//! problem, a pure function of the problem and the adapter, unit-tested without a GPU; and
//! the long-row split the row kernels share ([`split_long_rows`]: softmax, the norms).

use crate::Caps;

/// The reduction kernels' workgroup size (shaders/reduce.wgsl's `WG`), in which the plans
/// count their segments.
pub(crate) const WG: u32 = 256;

#[doc(hidden)]
/// How a reduction runs (see [`reduce_plan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReducePlan {
    /// One invocation per output (`reduce_rows`).
    Rows,
    /// One workgroup per output (`reduce_wg`).
    Workgroup,
    /// `segs` workgroups per output, each folding `seg_len` values (a multiple of the
    /// workgroup size) into an f32 workspace, then one workgroup per output folding those.
    Split {
        /// Segments per output (2..=[`MAX_SEGS`]).
        segs: u32,
        /// Values per segment (the last one may hold fewer).
        seg_len: u32,
    },
    /// `segs` invocations per output, each folding `seg_len` values into an f32 workspace,
    /// then one invocation per output folding those (many outputs, long reductions).
    RowsSplit {
        /// Segments per output (2..=[`MAX_ROW_SEGS`]).
        segs: u32,
        /// Values per segment (the last one may hold fewer).
        seg_len: u32,
    },
}

impl ReducePlan {
    /// The plan without its segments: a split's per-output kernel (`Split` -> `Workgroup`,
    /// `RowsSplit` -> `Rows`).
    pub(crate) fn unsplit(self) -> ReducePlan {
        match self {
            ReducePlan::Split { .. } => ReducePlan::Workgroup,
            ReducePlan::RowsSplit { .. } => ReducePlan::Rows,
            p => p,
        }
    }
}

/// The most segments a rows split cuts an output into (the partial pass folds them in turn,
/// in groups of 16).
const MAX_ROW_SEGS: usize = 256;
/// The fewest values a rows-split segment holds.
const MIN_ROW_SEG: usize = 64;

/// The most segments a split reduction cuts an output into (the partial pass folds them with
/// one workgroup, 4 per lane).
const MAX_SEGS: usize = 4 * WG as usize;
/// The fewest values a segment holds (16 per lane): shorter ones would cost more in the
/// partial pass than they save.
const MIN_SEG: usize = 16 * WG as usize;

/// The fewest values a segment of a split long row holds ([`split_long_rows`]): 16 per lane
/// of a 64-lane workgroup.
pub(crate) const ROW_SEG_MIN: usize = 1024;
/// The most segments [`split_long_rows`] cuts a row into (the second pass merges them
/// serially).
pub(crate) const ROW_SEGS_MAX: usize = 64;

/// Segments and values per segment for the row kernels that give each row a 64-lane workgroup
/// (softmax; layer, group and RMS norm): on GPUs, when the rows give fewer than two such
/// workgroups per estimated slot of 256 lanes (softmax over one 1M-long row; group norm of one
/// image, 32 rows of 64k values) and are long, each row is cut into segments of at least
/// [`ROW_SEG_MIN`] values, at most [`ROW_SEGS_MAX`]; the last may hold fewer. `None`: one
/// workgroup per row (always on CPU adapters).
pub(crate) fn split_long_rows(caps: &Caps, rows: usize, len: usize) -> Option<(u32, u32)> {
    if caps.cpu {
        return None;
    }
    let want = caps.slots() * 2 * 256 / 64;
    let segs = want
        .div_ceil(rows.max(1))
        .min(len / ROW_SEG_MIN)
        .min(ROW_SEGS_MAX);
    if rows >= want || segs < 2 {
        return None;
    }
    let seg_len = len.div_ceil(segs);
    Some((len.div_ceil(seg_len) as u32, seg_len as u32))
}

/// On CPU adapters, the most values one lane adds in turn before a tree or a partial pass
/// takes over. PyTorch's CPU sums cascade (a few ulp over any length); a lane adding thousands
/// of f32 values one by one loses a little with every add, all the same way on constant data:
/// the sum of 10^7 values of 0.1 came out 3.7e-4 high with 39000 per lane, 1.2e-6 at 64.
const CPU_RUN: usize = 64;

#[doc(hidden)]
/// Which kernel reduces `red_len` elements (`red_stride` apart) for each of `n_out` outputs: a
/// pure function of the problem and the adapter (unit-tested without a GPU).
///
/// A workgroup per output pays a barrier tree, so it only wins when outputs are too few to
/// fill the device and each reduction is long. On GPUs it also serves long contiguous rows
/// (stride 1: one invocation per row would read a separate row per lane, so a warp's loads
/// would touch as many cache lines as it has lanes), and when even a workgroup per output
/// leaves the device idle (a sum of every element runs on one of 132 SMs) the reductions are
/// split into segments until about two workgroups per estimated slot
/// ([`Caps::parallelism`](crate::Caps::parallelism)) run. CPU adapters keep their plan, no
/// split for speed (on lavapipe, 2 threads, a sum of 2^26 values split into 4 segments
/// measured no faster than one workgroup, about 0.4 s either way), but for accuracy: no lane
/// adds more than about [`CPU_RUN`] values in turn where segments can prevent it.
pub fn reduce_plan(caps: &Caps, n_out: usize, red_len: usize, red_stride: usize) -> ReducePlan {
    let few_long = red_len > 64 && n_out < 4096;
    if caps.cpu {
        if few_long {
            if red_len.div_ceil(WG as usize) <= CPU_RUN {
                return ReducePlan::Workgroup;
            }
            return wg_split(
                red_len,
                red_len.div_ceil(CPU_RUN * WG as usize).min(MAX_SEGS),
            );
        }
        if red_len <= 2 * CPU_RUN {
            return ReducePlan::Rows;
        }
        // Segments of about CPU_RUN values, their partials folded in turn (at most
        // MAX_ROW_SEGS).
        return rows_split(red_len, red_len.div_ceil(CPU_RUN).min(MAX_ROW_SEGS));
    }
    if red_len <= 64 {
        return ReducePlan::Rows;
    }
    // Strided reductions over enough outputs run one invocation per output (neighbouring
    // invocations read neighbouring outputs), as do contiguous rows of at most 256 values
    // when the outputs are many; the rest a workgroup per output (or per segment).
    let want_inv = caps.slots() * 2 * WG as usize;
    let rows_based = if red_stride == 1 {
        !few_long && red_len <= 256
    } else {
        n_out.saturating_mul(MAX_ROW_SEGS) >= want_inv
    };
    if rows_based {
        // When the outputs give fewer invocations than two workgroups per estimated slot and
        // the reductions are long (a bias gradient summing 16k rows over 4096 columns: 16
        // workgroups), split the rows too.
        let segs = want_inv
            .div_ceil(n_out.max(1))
            .min(red_len / MIN_ROW_SEG)
            .min(MAX_ROW_SEGS);
        if n_out >= want_inv || segs < 2 {
            return ReducePlan::Rows;
        }
        return rows_split(red_len, segs);
    }
    let want = caps.slots() * 2;
    let segs = want
        .div_ceil(n_out.max(1))
        .min(red_len / MIN_SEG)
        .min(MAX_SEGS);
    if n_out >= want || segs < 2 {
        return ReducePlan::Workgroup;
    }
    wg_split(red_len, segs)
}

/// About `segs` workgroup segments over `red_len` values, each a whole number of `WG` values
/// (the last may hold fewer, never none).
fn wg_split(red_len: usize, segs: usize) -> ReducePlan {
    let seg_len = red_len.div_ceil(segs).div_ceil(WG as usize) * WG as usize;
    ReducePlan::Split {
        segs: red_len.div_ceil(seg_len) as u32,
        seg_len: seg_len as u32,
    }
}

/// About `segs` invocation segments over `red_len` values (the last may hold fewer, never
/// none).
fn rows_split(red_len: usize, segs: usize) -> ReducePlan {
    let seg_len = red_len.div_ceil(segs);
    ReducePlan::RowsSplit {
        segs: red_len.div_ceil(seg_len) as u32,
        seg_len: seg_len as u32,
    }
}

#[cfg(test)]
mod plan_tests {
    use super::*;

    #[test]
    fn cpu_adapters_split_only_for_accuracy() {
        let lvp = Caps::test_lavapipe(2);
        assert_eq!(reduce_plan(&lvp, 3, 5000, 1), ReducePlan::Workgroup);
        assert_eq!(reduce_plan(&lvp, 3, 64, 1), ReducePlan::Rows);
        assert_eq!(reduce_plan(&lvp, 4096, 100, 1), ReducePlan::Rows);
        // Long runs per lane are cut for accuracy: at most about CPU_RUN values a lane adds
        // in turn (segments of 64 per lane; 1024 at most, whose fold takes 4 per lane).
        assert_eq!(
            reduce_plan(&lvp, 1, 1 << 26, 1),
            ReducePlan::Split {
                segs: 1024,
                seg_len: 1 << 16
            }
        );
        assert_eq!(
            reduce_plan(&lvp, 1, 10_000_000, 1),
            ReducePlan::Split {
                segs: 611,
                seg_len: 16384
            }
        );
        assert_eq!(
            reduce_plan(&lvp, 4096, 5000, 1),
            ReducePlan::RowsSplit {
                segs: 79,
                seg_len: 64
            }
        );
        for (n_out, len) in [(1, 16385), (5, 1 << 20), (4096, 129), (10_000, 1 << 16)] {
            let (segs, seg_len) = match reduce_plan(&lvp, n_out, len, 1) {
                ReducePlan::Split { segs, seg_len } | ReducePlan::RowsSplit { segs, seg_len } => {
                    (segs as usize, seg_len as usize)
                }
                p => panic!("{n_out} x {len}: {p:?}"),
            };
            assert!(seg_len * (segs - 1) < len && seg_len * segs >= len);
            let cap = if n_out < 4096 { MAX_SEGS } else { MAX_ROW_SEGS };
            assert!((2..=cap).contains(&segs), "{n_out} x {len}: {segs}");
        }
    }

    #[test]
    fn gpus_split_few_long_reductions() {
        let gpu = Caps::test_gpu(); // parallelism 256: 512 workgroups wanted
                                    // A sum of 2^26 values: 512 segments of 2^17.
        let p = reduce_plan(&gpu, 1, 1 << 26, 1);
        assert_eq!(
            p,
            ReducePlan::Split {
                segs: 512,
                seg_len: 1 << 17
            }
        );
        // Segments cover the reduction once, each a multiple of WG, the last one non-empty.
        for (n_out, len) in [(1, 100_000), (3, 1 << 20), (7, 70_001), (100, 1 << 22)] {
            let ReducePlan::Split { segs, seg_len } = reduce_plan(&gpu, n_out, len, 1) else {
                panic!("{n_out} x {len} is not split");
            };
            let (segs, seg_len) = (segs as usize, seg_len as usize);
            assert!((2..=MAX_SEGS).contains(&segs), "{n_out} x {len}: {segs}");
            assert_eq!(seg_len % WG as usize, 0);
            assert!(seg_len * (segs - 1) < len && seg_len * segs >= len);
            assert!(n_out * segs < 4 * gpu.parallelism);
        }
        // Short reductions are not split; enough outputs fill the device without it.
        assert_eq!(reduce_plan(&gpu, 1, 5000, 1), ReducePlan::Workgroup);
        assert_eq!(
            reduce_plan(&gpu, 100, 1 << 20, 1),
            ReducePlan::Split {
                segs: 6,
                seg_len: 174_848
            }
        );
        // Few strided outputs: a workgroup per output or segment; enough of them: rows.
        assert_eq!(reduce_plan(&gpu, 300, 5000, 300), ReducePlan::Workgroup);
        assert!(matches!(
            reduce_plan(&gpu, 600, 1 << 20, 600),
            ReducePlan::RowsSplit { .. }
        ));
        // Long contiguous rows take a workgroup each even when they are many.
        assert_eq!(reduce_plan(&gpu, 10_000, 1000, 1), ReducePlan::Workgroup);
        assert_eq!(reduce_plan(&gpu, 10_000, 100, 1), ReducePlan::Rows);
    }

    #[test]
    fn gpus_split_the_rows_of_many_long_strided_reductions() {
        let gpu = Caps::test_gpu(); // 131072 invocations wanted
                                    // A bias gradient [16384, 4096].sum(0): 32 segments of 512 rows per column.
        assert_eq!(
            reduce_plan(&gpu, 4096, 16384, 4096),
            ReducePlan::RowsSplit {
                segs: 32,
                seg_len: 512
            }
        );
        for (n_out, len) in [(10_000, 1000), (5000, 129), (4096, 100_000)] {
            let ReducePlan::RowsSplit { segs, seg_len } = reduce_plan(&gpu, n_out, len, n_out)
            else {
                panic!("{n_out} x {len} is not split");
            };
            let (segs, seg_len) = (segs as usize, seg_len as usize);
            assert!((2..=MAX_ROW_SEGS).contains(&segs) && seg_len >= MIN_ROW_SEG);
            assert!(seg_len * (segs - 1) < len && seg_len * segs >= len);
        }
        // Short reductions and outputs enough to fill the device stay one invocation each.
        assert_eq!(reduce_plan(&gpu, 10_000, 100, 10_000), ReducePlan::Rows);
        assert_eq!(reduce_plan(&gpu, 1 << 18, 1000, 1 << 18), ReducePlan::Rows);
        // CPU adapters split only to keep runs short (segments of 64 for accuracy).
        let lvp = Caps::test_lavapipe(2);
        assert_eq!(
            reduce_plan(&lvp, 4096, 16384, 4096),
            ReducePlan::RowsSplit {
                segs: 256,
                seg_len: 64
            }
        );
    }

    #[test]
    fn long_rows_split_only_when_few_on_gpus() {
        let (gpu, lvp) = (Caps::test_gpu(), Caps::test_lavapipe(2));
        // softmax over one row of 2^20 values: up to ROW_SEGS_MAX segments of at least
        // ROW_SEG_MIN.
        let (segs, seg_len) = split_long_rows(&gpu, 1, 1 << 20).expect("split");
        assert_eq!(segs as usize, ROW_SEGS_MAX);
        assert!(seg_len as usize >= ROW_SEG_MIN && segs * seg_len >= 1 << 20);
        assert_eq!(split_long_rows(&lvp, 1, 1 << 20), None);
        // Group norm of one 64 x 64 image, 256 channels in 32 groups: 32 rows of 32k values.
        let len = 8 * 4096;
        let (segs, seg_len) = split_long_rows(&gpu, 32, len).expect("split on GPUs");
        assert!(segs >= 2 && segs as usize <= ROW_SEGS_MAX, "{segs}");
        assert!(seg_len as usize >= ROW_SEG_MIN);
        assert!((segs as usize - 1) * (seg_len as usize) < len);
        assert!(segs as usize * seg_len as usize >= len);
        assert_eq!(split_long_rows(&lvp, 32, len), None);
        // Many rows, or rows too short to cut: one workgroup per row.
        assert_eq!(split_long_rows(&gpu, 8192, 50257), None);
        assert_eq!(split_long_rows(&gpu, 8192, 768), None);
        assert_eq!(split_long_rows(&gpu, 1, 1500), None);
        assert_eq!(split_long_rows(&gpu, 4, 1500), None);
        assert_eq!(split_long_rows(&gpu, 4, 20), None);
        // Ragged: the segments cover the row exactly once.
        let (segs, seg_len) = split_long_rows(&gpu, 3, 70_001).expect("split");
        assert!((segs - 1) * seg_len < 70_001 && segs * seg_len >= 70_001);
    }
}
