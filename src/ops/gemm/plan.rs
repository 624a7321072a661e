//! The GEMM planner: which kernel runs and how K is split, a pure function of the problem and
//! the adapter facts.

use crate::{Caps, DType, Device, Error, Result};

/// The GEMM kernels (shaders/gemm_sg8.wgsl, gemm.wgsl, gemm_wg.wgsl).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemmKernel {
    /// `gemm_sg8`: 8-lane subgroups, a 32 x 32 tile per subgroup (CPU adapters with 8-lane
    /// subgroups: lavapipe on AVX2).
    Sg8,
    /// `gemm_tiled`: 8 x 8 invocations, a 32 x 32 tile, no workgroup memory (other CPU
    /// adapters).
    Tiled,
    /// `gemm_wg` with TM = 4: 16 x 16 invocations, a 64 x 64 tile (4 x 4 per invocation)
    /// staged through workgroup memory 8 steps of K at a time, double buffered (GPUs, problems
    /// whose 128-row tiles would be too few to fill the device).
    WgTiled,
    /// `gemm_wg` with TM = 8: a 128 x 64 tile, 8 x 4 per invocation (GPUs, problems with
    /// enough 128-row tiles to fill the device, or split-k shapes: see `tall_tiles`).
    WgTiled128,
    /// `gemm_wg` with TM = 8 and TN = 8: a 128 x 128 tile, 8 x 8 per invocation. No plan
    /// takes it (forced only, `gemm_with_kernel`): on an NVIDIA H200 it ran the 4096^3 product
    /// at 23 TFLOPS where the 128 x 64 tile ran 28, 8192^3 at 26 against 32, and split-k
    /// [256 x 65536] x [65536 x 256] within the run-to-run spread of the 128 x 64 tile.
    WgTiled128x128,
    /// `gemm_coop`: f16 on cooperative matrices (16x16x16, f32 accumulation), 8 subgroups of
    /// 32 lanes per 128 x 128 tile; only where [`Caps::coop16`] holds (the adapter offers it
    /// and `DeviceOptions::cooperative_matrix` asked for it, or a CPU adapter emulates it
    /// under `gpu_plans`).
    Coop16,
}

impl GemmKernel {
    /// Rows per invocation of `gemm_wg` (its `TM` override); 0 for the CPU kernels.
    pub(crate) fn wg_rows(self) -> u32 {
        match self {
            GemmKernel::WgTiled => 4,
            GemmKernel::WgTiled128 | GemmKernel::WgTiled128x128 => 8,
            GemmKernel::Sg8 | GemmKernel::Tiled | GemmKernel::Coop16 => 0,
        }
    }

    /// Columns per invocation of `gemm_wg` (its `TN` override); 0 for the other kernels.
    pub(crate) fn wg_cols(self) -> u32 {
        match self {
            GemmKernel::WgTiled | GemmKernel::WgTiled128 => 4,
            GemmKernel::WgTiled128x128 => 8,
            GemmKernel::Sg8 | GemmKernel::Tiled | GemmKernel::Coop16 => 0,
        }
    }
}

#[doc(hidden)]
/// Which kernel runs and how K is split: a plain function of the problem and the adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmPlan {
    /// The kernel: [`GemmKernel::WgTiled`] or [`GemmKernel::WgTiled128`] on GPUs
    /// ([`GemmKernel::Coop16`] for f16 where cooperative matrices serve), [`GemmKernel::Sg8`]
    /// or [`GemmKernel::Tiled`] on CPU adapters.
    pub kernel: GemmKernel,
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
    /// True for the 8-lane subgroup kernel.
    pub fn sg8(&self) -> bool {
        self.kernel == GemmKernel::Sg8
    }

    /// Output rows and columns per workgroup.
    pub(crate) fn tile(&self) -> (usize, usize) {
        tile_of(self.kernel, self.sgs)
    }

    /// The product pass's grid from its tile counts along N (`gx`) and M (`gy`): the sg8 kernel
    /// walks rows along x (B-panel reuse between consecutive workgroups).
    pub(crate) fn grid_xy<T>(&self, gx: T, gy: T) -> [T; 2] {
        if self.sg8() {
            [gy, gx]
        } else {
            [gx, gy]
        }
    }
}

fn tile_of(kernel: GemmKernel, sgs: u32) -> (usize, usize) {
    match kernel {
        GemmKernel::Sg8 => (32 * sgs as usize, 32),
        GemmKernel::Tiled => (32, 32),
        GemmKernel::WgTiled => (64, 64),
        GemmKernel::WgTiled128 => (128, 64),
        GemmKernel::WgTiled128x128 => (128, 128),
        GemmKernel::Coop16 => (128, 128),
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
/// [64 x 8192] x [8192 x 64] on a GPU); slices keep at least 256 steps of K. K past 4096
/// is also split into slices of at most 4096 for accuracy while the partials stay within
/// 16 MiB (`K_RUN`).
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
    plan_kernel(
        caps,
        pick_kernel(caps, m, n, k, batch, split_k),
        m,
        n,
        k,
        batch,
        split_k,
    )
}

#[doc(hidden)]
/// [`plan_for`] for operands of `dtype`: f16 products of more than 64 rows and columns take the
/// cooperative-matrix kernel where [`Caps::coop16`] holds (smaller ones would leave most of
/// its 128 x 128 tile idle), every other product the plan of [`plan_for`].
pub fn plan_for_dtype(
    caps: &Caps,
    dtype: DType,
    m: usize,
    n: usize,
    k: usize,
    batch: usize,
    split_k: Option<u32>,
) -> Result<GemmPlan> {
    if dtype == DType::F16 && caps.coop16 && m > 64 && n > 64 {
        return plan_kernel(caps, GemmKernel::Coop16, m, n, k, batch, split_k);
    }
    plan_for(caps, m, n, k, batch, split_k)
}

/// The plan of [`plan_for`] with `kernel` instead of the planner's choice (the split still
/// follows the problem and `split_k`), for benchmarks that time one kernel against another on
/// the same adapter. Errors where the adapter cannot run `kernel`: `Sg8` without 8-lane
/// subgroups, `Coop16` without [`Caps::coop16`] or for operands other than f16.
#[allow(clippy::too_many_arguments)]
pub(crate) fn plan_forced(
    caps: &Caps,
    dtype: DType,
    kernel: GemmKernel,
    m: usize,
    n: usize,
    k: usize,
    batch: usize,
    split_k: Option<u32>,
) -> Result<GemmPlan> {
    let why = match kernel {
        GemmKernel::Sg8 if !caps.sg8 => Some("needs subgroups of exactly 8 lanes"),
        GemmKernel::Coop16 if !caps.coop16 => Some(
            "needs 16x16x16 f16 cooperative matrices (DeviceOptions::cooperative_matrix on an \
             adapter that offers them, or with gpu_plans on a CPU adapter)",
        ),
        GemmKernel::Coop16 if dtype != DType::F16 => Some("takes f16 operands only"),
        _ => None,
    };
    if let Some(why) = why {
        return Err(Error::arg(
            "gemm",
            format!("the forced kernel {kernel:?} {why}"),
        ));
    }
    plan_kernel(caps, kernel, m, n, k, batch, split_k)
}

/// The kernel of [`plan_for`]: a function of the adapter and the problem's size.
fn pick_kernel(
    caps: &Caps,
    m: usize,
    n: usize,
    k: usize,
    batch: usize,
    split_k: Option<u32>,
) -> GemmKernel {
    // GPUs stage tiles through workgroup memory; CPU adapters, where barriers and workgroup
    // memory are costly, keep their register-only kernels. On GPUs the 128 x 64 tile where
    // [`tall_tiles`] says, else 64 x 64.
    if !caps.cpu {
        if tall_tiles(caps, m, n, k, batch, split_k.map(|s| s as usize)) {
            GemmKernel::WgTiled128
        } else {
            GemmKernel::WgTiled
        }
    } else if caps.sg8 {
        GemmKernel::Sg8
    } else {
        GemmKernel::Tiled
    }
}

/// Whether a GPU product of `m` rows, `ncols` columns and depth `k` (`batch` of them) takes
/// the 128 x 64 tile of the large-tile core (8 x 4 per invocation: TM / 4 + 1 workgroup loads
/// per 4 TM FMAs, half the 64 x 64 tile's ratio; on the H200 the 4096^3 GEMM ran at 28 TFLOPS
/// on it, [1024]^3 at 14-16 on 64 x 64 tiles): where those tiles alone fill the device's
/// slots, or where the 64 x 64 tiles would split K anyway (fewer than [`split_floor`]) and
/// these tiles, split, still reach the slots: split-k's workgroups then come from K, and the
/// bigger tile does more work per load (the [256 x 65536] x [65536 x 256] product ran at 18
/// TFLOPS on split 64 x 64 tiles). A caller's `split` (GEMM's explicit `split_k`) counts as
/// given: then the split tiles must reach the slots. Never for 64 rows or fewer, nor on CPU
/// adapters. Shared by GEMM and convolution.
pub(crate) fn tall_tiles(
    caps: &Caps,
    m: usize,
    ncols: usize,
    k: usize,
    batch: usize,
    split: Option<usize>,
) -> bool {
    if caps.cpu || m <= 64 {
        return false;
    }
    let tiles = |rows: usize, cols: usize| {
        m.div_ceil(rows)
            .saturating_mul(ncols.div_ceil(cols))
            .saturating_mul(batch)
            .max(1)
    };
    let big = tiles(128, 64);
    if let Some(s) = split {
        return big.saturating_mul(s) >= caps.slots();
    }
    if big >= caps.slots() {
        return true;
    }
    let floor = split_floor(caps);
    let slices = split_target(caps).div_ceil(big).min(k / 256);
    k >= 1024 && tiles(64, 64) < floor && big.saturating_mul(slices) >= floor
}

/// Workgroups per estimated slot that split-k aims at on GPUs once it splits. On an NVIDIA
/// H200 (estimate 256 slots) a [256 x 65536] x [65536 x 256] product over 16, 64 and 256
/// slices took 0.56, 0.50 and 0.49 ms, and [128 x 100352] x [100352 x 1152] (a convolution's
/// weight gradient) over 7, 28 and 112 slices 1.81, 1.52 and 1.45 ms: a slot runs several of
/// these workgroups at once and the extra slices' reduction costs little. Whether to split
/// at all still follows the slots ([`split_floor`]): [1024 x 1024] x [1024 x 1024], 256 tiles,
/// took 0.149 ms unsplit and 0.157-0.162 ms over 2 or 4 slices.
pub(crate) const GPU_SPLIT_WAVES: usize = 4;

/// Output tiles below which split-k pays: the estimated slots (CPU adapters: host threads,
/// at least 2).
pub(crate) fn split_floor(caps: &Caps) -> usize {
    if caps.cpu {
        caps.parallelism.max(2)
    } else {
        caps.slots()
    }
}

/// The workgroups a split aims at: [`split_floor`]'s slots, [`GPU_SPLIT_WAVES`] workgroups
/// each on GPUs, one on CPU adapters.
pub(crate) fn split_target(caps: &Caps) -> usize {
    let per_slot = if caps.cpu { 1 } else { GPU_SPLIT_WAVES };
    split_floor(caps) * per_slot
}

/// The longest stretch of K one output of an unsplit tile accumulates: longer K is split into
/// slices of at most this for accuracy (PyTorch's CPU BLAS blocks K in a few hundred, each
/// block a fresh sum). Every fma in turn rounds, all the same way on positive data:
/// [1 x 2^20] x [2^20 x 1] of U(0, 1) values came out 5e-5 low over 2 slices of 2^19.
/// Within a slice the CPU kernels add K in blocks of 64, then the blocks (lib/gemm_common.wgsl
/// `KBLOCK`), so a slice of 4096 is 64 + 64 adds in turn; the GPU tiles keep one running sum
/// per slice, as cuBLAS's (ones against 0.1 over K 8192 on a 64x64 output drifted 8e-5
/// unsplit; blocked sums cost the split kernels 12-31% on an H200, ARCHITECTURE.md). On GPUs it applies to outputs small enough
/// that the partials cost little against the product (a [1024 x 8192] x [8192 x 1024] weight
/// gradient writes 16 MiB for 17 GFLOP on GPUs: 4 slices, `accuracy_slices`); the large
/// products keep their unsplit tiles.
const K_RUN: usize = 4096;
/// The most f32 partials a split for accuracy may write (16 MiB): past it the product keeps
/// the speed plan's split.
const ACCURACY_PARTIALS: usize = 1 << 22;

/// The slices of K a product of `outputs` values takes for accuracy: 1 up to [`K_RUN`], or
/// where even slices of `K_RUN` would write more than [`ACCURACY_PARTIALS`]. CPU adapters
/// cut K into slices of at most `K_RUN` (their kernels add blocks of 64 within one); the GPU
/// tiles keep one running sum per slice, so GPUs cut it into as many slices of at least 256
/// as the partials' cap holds (ones against 0.1 over K 8192 drifted 2.1e-6 in slices of 256,
/// 3.9e-5 in slices of 4096).
fn accuracy_slices(caps: &Caps, outputs: usize, k: usize) -> usize {
    let base = k.div_ceil(K_RUN);
    if base <= 1 || outputs.saturating_mul(base) > ACCURACY_PARTIALS {
        return 1;
    }
    if caps.cpu {
        return base;
    }
    (ACCURACY_PARTIALS / outputs.max(1)).min(k / 256).max(base)
}

/// The split of K for `kernel`'s tiles.
fn plan_kernel(
    caps: &Caps,
    kernel: GemmKernel,
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
    let sgs = SG8_SGS;
    let (tm, tn) = tile_of(kernel, sgs);
    let tiles = m
        .div_ceil(tm)
        .saturating_mul(n.div_ceil(tn))
        .saturating_mul(batch)
        .max(1);
    let max_z = caps.max_workgroups_per_dim as usize;
    // Workgroups that keep the device busy: `Caps::parallelism`, an estimate of the
    // workgroups the adapter runs at once (GPUs: by vendor and type); fewer tiles than that
    // split, into `split_target`'s workgroups (GPUs: four per slot). A CPU adapter (lavapipe)
    // runs one workgroup per thread and has a thread per core, so split-k only pays while the
    // tiles are fewer than the cores: measured on 2 cores, [64 x 8192] x [8192 x 64] (2 tiles)
    // split 2, 4, 8 or 32 ways took 1.06, 1.08, 1.09 and 1.18x the unsplit time. At least 2,
    // so that a single tile with a long K still splits on a one-core host.
    let wanted = match split_k {
        Some(s) => s as usize,
        None => {
            let speed = if k >= 1024 && tiles < split_floor(caps) {
                split_target(caps).div_ceil(tiles).min(k / 256)
            } else {
                1
            };
            let outputs = m.saturating_mul(n).saturating_mul(batch);
            speed.max(accuracy_slices(caps, outputs, k))
        }
    };
    if k == 0 {
        // Nothing to sum: one launch writes the epilogue (beta * C + bias) alone.
        return Ok(GemmPlan {
            kernel,
            sgs,
            splits: 1,
            k_chunk: 0,
        });
    }
    let splits = wanted.clamp(1, k).min((max_z / batch.max(1)).max(1));
    let k_chunk = k.div_ceil(splits);
    Ok(GemmPlan {
        kernel,
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
        assert_eq!(p.kernel, GemmKernel::Sg8);
        assert_eq!((p.splits, p.k_chunk), (2, 4096));
        // Two tiles already cover 2 cores: K 4096 is not split, 8192 is, for accuracy.
        assert_eq!(plan_for(&caps, 64, 32, 4096, 1, None).unwrap().splits, 1);
        assert_eq!(plan_for(&caps, 64, 32, 8192, 1, None).unwrap().splits, 2);
        // Short K never splits.
        assert_eq!(plan_for(&caps, 32, 32, 1000, 1, None).unwrap().splits, 1);
        // Long K splits into slices of at most 4096 for accuracy, while the partials stay
        // within 16 MiB.
        let p = plan_for(&caps, 1, 1, 1 << 20, 1, None).unwrap();
        assert_eq!((p.splits, p.k_chunk), (256, 4096));
        let p = plan_for(&caps, 64, 64, 100_000, 1, None).unwrap();
        assert_eq!((p.splits, p.k_chunk), (25, 4000));
        assert_eq!(
            plan_for(&caps, 1024, 1024, 100_000, 1, None)
                .unwrap()
                .splits,
            1
        );
    }

    #[test]
    fn gpus_split_long_k_over_few_tiles_with_slices_of_at_least_256() {
        let caps = Caps::test_gpu();
        let p = plan_for(&caps, 64, 64, 8192, 1, None).unwrap();
        assert_eq!(p.kernel, GemmKernel::WgTiled);
        assert_eq!(p.splits, 32, "{p:?}");
        assert!(p.k_chunk >= 256);
        let p = plan_for(&caps, 64, 64, 1 << 20, 1, Some(7)).unwrap();
        assert_eq!(p.splits, 7);
        assert!(p.splits as u64 * p.k_chunk as u64 >= 1 << 20);
    }

    #[test]
    fn gpus_split_long_k_of_small_outputs_for_accuracy() {
        let caps = Caps::test_gpu();
        // Enough tiles to fill the device, K 8192: as many slices as 16 MiB of partials hold
        // (the tiles keep one running sum per slice).
        let p = plan_for(&caps, 1024, 1024, 8192, 1, None).unwrap();
        assert_eq!((p.splits, p.k_chunk), (4, 2048), "{p:?}");
        // Smaller outputs take slices of 256.
        let p = plan_for(&caps, 128, 128, 8192, 1, None).unwrap();
        assert_eq!((p.splits, p.k_chunk), (32, 256), "{p:?}");
        // K 4096 stays one run; the large products keep their unsplit tiles.
        assert_eq!(
            plan_for(&caps, 1024, 1024, 4096, 1, None).unwrap().splits,
            1
        );
        assert_eq!(
            plan_for(&caps, 4096, 4096, 4096, 1, None).unwrap().splits,
            1
        );
        assert_eq!(
            plan_for(&caps, 8192, 8192, 8192, 1, None).unwrap().splits,
            1
        );
    }

    #[test]
    fn kernel_follows_the_adapter() {
        // GPUs take the workgroup-memory kernel, even where 8-lane subgroups exist.
        let gpu_sg8 = Caps {
            sg8: true,
            ..Caps::test_gpu()
        };
        for caps in [Caps::test_gpu(), gpu_sg8] {
            let p = plan_for(&caps, 100, 100, 100, 1, None).unwrap();
            assert_eq!(p.kernel, GemmKernel::WgTiled);
            assert_eq!(p.tile(), (64, 64));
            assert_eq!(p.grid_xy(1, 2), [1, 2]);
        }
        // CPU adapters keep theirs: sg8 with 8-lane subgroups, else the register tile.
        let lvp = Caps::test_lavapipe(4);
        let p = plan_for(&lvp, 100, 100, 100, 1, None).unwrap();
        assert_eq!(
            (p.kernel, p.tile(), p.grid_xy(1, 2)),
            (GemmKernel::Sg8, (32, 32), [2, 1])
        );
        let portable = Caps { sg8: false, ..lvp };
        let p = plan_for(&portable, 100, 100, 100, 1, None).unwrap();
        assert_eq!((p.kernel, p.tile()), (GemmKernel::Tiled, (32, 32)));
    }

    #[test]
    fn gpus_take_128_row_tiles_where_they_fill_the_device() {
        let caps = Caps::test_gpu();
        let k = |m, n, batch| plan_for(&caps, m, n, 512, batch, None).unwrap().kernel;
        // 4096^2: 32 x 64 = 2048 tiles of 128 x 64 (never 128 x 128: slower on the H200).
        assert_eq!(k(4096, 4096, 1), GemmKernel::WgTiled128);
        let p = plan_for(&caps, 4096, 4096, 4096, 1, None).unwrap();
        assert_eq!((p.tile(), p.splits), ((128, 64), 1));
        // Batched [64, 512, 512]: 4 x 8 x 64 = 2048.
        assert_eq!(k(512, 512, 64), GemmKernel::WgTiled128);
        // 1024 x 2048: 8 x 32 = 256 tiles, exactly the estimate; 1024 x 1985 too (the ragged
        // last column of tiles counts); 1024 x 1984: 248 fall short, so 64 x 64.
        assert_eq!(k(1024, 2048, 1), GemmKernel::WgTiled128);
        assert_eq!(k(1024, 1985, 1), GemmKernel::WgTiled128);
        assert_eq!(k(1024, 1984, 1), GemmKernel::WgTiled);
        // 1024^2: 8 x 16 = 128 tiles of 128 rows, under the 256 estimate: 64 x 64.
        assert_eq!(k(1024, 1024, 1), GemmKernel::WgTiled);
        // 64 rows or fewer never take a half-empty 128-row tile.
        assert_eq!(k(64, 1 << 16, 8), GemmKernel::WgTiled);
        for (kernel, rows, cols) in [
            (GemmKernel::WgTiled, 4, 4),
            (GemmKernel::WgTiled128, 8, 4),
            (GemmKernel::WgTiled128x128, 8, 8),
        ] {
            assert_eq!((kernel.wg_rows(), kernel.wg_cols()), (rows, cols));
            assert_eq!(tile_of(kernel, 1), (16 * rows as usize, 16 * cols as usize));
        }
        // A caller's split counts: 8 x 16 tiles of 128 x 64, split 2 ways, fill 256 slots.
        let p = plan_for(&caps, 1024, 1024, 4096, 1, Some(2)).unwrap();
        assert_eq!((p.kernel, p.splits), (GemmKernel::WgTiled128, 2));
        let p = plan_for(&caps, 1024, 1024, 4096, 1, Some(1)).unwrap();
        assert_eq!(p.kernel, GemmKernel::WgTiled);
        // CPU adapters never take it.
        let lvp = Caps::test_lavapipe(2);
        assert!(!tall_tiles(&lvp, 4096, 4096, 4096, 1, None));
    }

    #[test]
    fn gpu_splits_below_the_slots_into_four_workgroups_per_slot() {
        let caps = Caps::test_gpu();
        assert_eq!(caps.parallelism, 256);
        // 4 x 4 tiles of 64 x 64 would split: 2 x 4 tiles of 128 x 64 split instead, into
        // 1024 / 8 = 128 slices, which K / 256 = 64 caps (512 workgroups).
        let p = plan_for(&caps, 256, 256, 16384, 1, None).unwrap();
        assert_eq!(
            (p.kernel, p.splits, p.k_chunk),
            (GemmKernel::WgTiled128, 64, 256)
        );
        // The bench's [256 x 65536] x [65536 x 256]: 128 slices of 512.
        let p = plan_for(&caps, 256, 256, 65536, 1, None).unwrap();
        assert_eq!(
            (p.kernel, p.splits, p.k_chunk),
            (GemmKernel::WgTiled128, 128, 512)
        );
        // 64 columns: 2 x 1 tiles of 128 x 64 split 512 ways (K / 256 caps at 256).
        let p = plan_for(&caps, 256, 64, 65536, 1, None).unwrap();
        assert_eq!(
            (p.kernel, p.splits, p.k_chunk),
            (GemmKernel::WgTiled128, 256, 256)
        );
        // K = 2048 allows 8 slices: 64 workgroups of 128 rows fall short of the slots, so
        // the 64 x 64 tiles split (16 x 8 = 128 workgroups).
        let p = plan_for(&caps, 256, 256, 2048, 1, None).unwrap();
        assert_eq!((p.kernel, p.splits), (GemmKernel::WgTiled, 8));
        // 16 x 16 tiles (256) already fill the slots: no split for speed, but K in slices of
        // 4096 for accuracy (16 MiB of partials).
        let p = plan_for(&caps, 1024, 1024, 16384, 1, None).unwrap();
        assert_eq!((p.kernel, p.splits), (GemmKernel::WgTiled, 4));
        // 15 x 16 = 240 tiles of 64 rows (the ragged last row of tiles counts) would split:
        // 8 x 16 = 128 of 128 x 64 split 1024 / 128 = 8 ways instead.
        let p = plan_for(&caps, 14 * 64 + 1, 16 * 64, 16384, 1, None).unwrap();
        assert_eq!((p.kernel, p.splits), (GemmKernel::WgTiled128, 8));
        // A caller's split counts as given: unsplit, 8 tiles of 128 rows would leave the
        // device idle, so 16 of 64; split 32 ways, 8 x 32 fill it.
        let p = plan_for(&caps, 256, 256, 16384, 1, Some(1)).unwrap();
        assert_eq!((p.kernel, p.splits), (GemmKernel::WgTiled, 1));
        let p = plan_for(&caps, 256, 256, 16384, 1, Some(32)).unwrap();
        assert_eq!((p.kernel, p.splits), (GemmKernel::WgTiled128, 32));
        // 64 rows keep the 64 x 64 tile: 240 tiles split 5 ways.
        let p = plan_for(&caps, 64, 15 * 16 * 64, 16384, 1, None).unwrap();
        assert_eq!((p.kernel, p.splits), (GemmKernel::WgTiled, 5));
        // A smaller device splits less.
        let small = Caps {
            parallelism: 4,
            ..caps
        };
        // 4 x 4 tiles of 128 x 64 fill its 4 slots: only the accuracy split (as many slices
        // of at least 256 as 16 MiB of partials hold: 32 of 512).
        assert_eq!(
            plan_for(&small, 512, 256, 16384, 1, None).unwrap().splits,
            32
        );
        // One tile: the speed split's 16 slices, the accuracy split's 64 of 256.
        assert_eq!(plan_for(&small, 64, 64, 16384, 1, None).unwrap().splits, 64);
    }

    #[test]
    fn f16_takes_cooperative_matrices_only_where_offered() {
        let coop = Caps {
            coop16: true,
            ..Caps::test_gpu()
        };
        let p = plan_for_dtype(&coop, DType::F16, 4096, 4096, 4096, 1, None).unwrap();
        assert_eq!(
            (p.kernel, p.tile(), p.splits),
            (GemmKernel::Coop16, (128, 128), 1)
        );
        // 64 rows or columns or fewer keep the FMA kernels (most of the tile would idle).
        let p = plan_for_dtype(&coop, DType::F16, 64, 4096, 8192, 1, None).unwrap();
        assert_eq!(p, plan_for(&coop, 64, 4096, 8192, 1, None).unwrap());
        let p = plan_for_dtype(&coop, DType::F16, 4096, 64, 8192, 1, None).unwrap();
        assert_eq!(p, plan_for(&coop, 4096, 64, 8192, 1, None).unwrap());
        // Split-k over its 128 x 128 tiles as for the other kernels, slices of at least 256
        // steps of K: one tile, K / 256 slices; four tiles, 4 x 256 slots' worth of slices.
        let p = plan_for_dtype(&coop, DType::F16, 65, 65, 8192, 1, None).unwrap();
        assert_eq!((p.kernel, p.splits), (GemmKernel::Coop16, 32));
        let p = plan_for_dtype(&coop, DType::F16, 256, 256, 65536, 1, None).unwrap();
        assert_eq!(
            (p.kernel, p.splits, p.k_chunk),
            (GemmKernel::Coop16, 256, 256)
        );
        // f32 keeps the FMA kernels; without the capability f16 does too.
        let f32_plan = plan_for_dtype(&coop, DType::F32, 4096, 4096, 4096, 1, None).unwrap();
        assert_eq!(f32_plan.kernel, GemmKernel::WgTiled128);
        let plain = plan_for_dtype(&Caps::test_gpu(), DType::F16, 64, 64, 64, 1, None).unwrap();
        assert_eq!(plain.kernel, GemmKernel::WgTiled);
        assert!(plan_for_dtype(&coop, DType::F16, 1, 1, 1, 1, Some(0)).is_err());
    }

    #[test]
    fn forced_kernels_run_only_where_the_adapter_can() {
        let gpu = Caps::test_gpu();
        let p = plan_forced(
            &gpu,
            DType::F32,
            GemmKernel::WgTiled128,
            4096,
            4096,
            4096,
            1,
            None,
        )
        .unwrap();
        assert_eq!(
            (p.kernel, p.tile(), p.splits),
            (GemmKernel::WgTiled128, (128, 64), 1)
        );
        // The split follows the forced kernel's tiles: 16 tiles of 64 x 64 split, 1 of
        // 128 x 128 splits more.
        let p = plan_forced(
            &gpu,
            DType::F32,
            GemmKernel::WgTiled,
            256,
            256,
            65536,
            1,
            None,
        );
        assert_eq!(p.unwrap().splits, 64);
        let p = plan_forced(
            &gpu,
            DType::F32,
            GemmKernel::WgTiled128x128,
            128,
            128,
            65536,
            1,
            None,
        );
        assert_eq!(p.unwrap().splits, 256);
        // A CPU adapter runs the GPU kernels (gpu_plans does), not the ones it lacks.
        let lvp = Caps::test_lavapipe(2);
        let p = plan_forced(
            &lvp,
            DType::F32,
            GemmKernel::WgTiled128x128,
            300,
            300,
            8,
            1,
            None,
        );
        assert_eq!(p.unwrap().tile(), (128, 128));
        let no_sg8 = Caps { sg8: false, ..lvp };
        let e = plan_forced(&no_sg8, DType::F32, GemmKernel::Sg8, 8, 8, 8, 1, None);
        assert!(e.unwrap_err().to_string().contains("Sg8"));
        for dt in [DType::F32, DType::F16] {
            assert!(plan_forced(&gpu, dt, GemmKernel::Coop16, 8, 8, 8, 1, None).is_err());
        }
        let coop = Caps {
            coop16: true,
            ..gpu
        };
        assert!(plan_forced(&coop, DType::F32, GemmKernel::Coop16, 8, 8, 8, 1, None).is_err());
        assert!(plan_forced(&coop, DType::F16, GemmKernel::Coop16, 8, 8, 8, 1, None).is_ok());
        assert!(plan_forced(&gpu, DType::F32, GemmKernel::WgTiled, 8, 8, 8, 1, Some(0)).is_err());
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
