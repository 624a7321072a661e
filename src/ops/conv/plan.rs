//! The convolution planner: kernel variant, tile and split factor as a plain function of the
//! GEMM view ([`ConvParams`]) and the adapter.

use super::geom::Geom;
use super::params::{ConvParams, Direction};
use crate::{Caps, Device, Result};

/// Columns per invocation (one output line) and invocations per workgroup of `conv_direct`.
pub(crate) const DIRECT_COLS: usize = 8;
pub(crate) const DIRECT_WG: usize = 64;

#[doc(hidden)]
/// The kernel family a launch uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvVariant {
    /// 8-lane subgroup implicit GEMM (CPU adapters such as lavapipe).
    Sg8,
    /// Portable 32x32 register tile (CPU adapters without 8-lane subgroups; GPUs for groups
    /// of 8 to 31 rows).
    Tiled,
    /// The GPUs' large-tile core (shaders/conv_wg.wgsl on lib/wg_tile.wgsl, shared with
    /// GEMM): a 16 TM x 16 TN tile staged through workgroup memory, TM x TN per invocation;
    /// groups of at least 32 rows on GPUs.
    WgTiled,
    /// DR rows x 8 columns of one output line per invocation: groups with fewer than 8 rows.
    Direct,
    /// Direct on 4 lines at once for single-row groups whose kernel rows and columns step one
    /// line and one column (depthwise with stride == dilation): each kernel row loads one new
    /// line, each tap one value per line.
    DirectLines,
}

#[doc(hidden)]
/// Kernel variant, tile and split factor: a plain function of the GEMM view and the adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvPlan {
    /// The kernel family the launch uses.
    pub variant: ConvVariant,
    /// Sg8: row blocks of 8 per subgroup (1, 2 or 4); Direct: rows per invocation (1 to 8);
    /// WgTiled: rows per invocation (`TM`: 4 or 8).
    pub rt: u32,
    /// WgTiled: columns per invocation (`TN`: 4; the kernel takes 8, no plan does); 0 for the
    /// other variants.
    pub ct: u32,
    /// Sg8: subgroups per workgroup, each on its own 32 columns.
    pub sgs: u32,
    /// K slices (split-k): above 1, partial results in an f32 workspace are summed in a fixed
    /// order, so results do not vary between runs.
    pub splits: u32,
    /// Steps of K each slice covers (K itself when unsplit).
    pub k_chunk: u32,
}

impl ConvPlan {
    /// Rows x columns one workgroup covers.
    pub(crate) fn tile(&self) -> (usize, usize) {
        match self.variant {
            ConvVariant::Sg8 => (8 * self.rt as usize, 32 * self.sgs as usize),
            ConvVariant::Tiled => (32, 32),
            ConvVariant::WgTiled => (16 * self.rt as usize, 16 * self.ct as usize),
            // Lines are padded to whole 8-column blocks; used for the split decision only.
            ConvVariant::Direct | ConvVariant::DirectLines => {
                (self.rt as usize, DIRECT_COLS * DIRECT_WG)
            }
        }
    }
}

#[doc(hidden)]
/// Picks the kernel from the rows per group `m` (a group with fewer than 8 rows leaves most of
/// a GEMM tile idle: the direct kernel), then splits K when the output tiles are too few to
/// keep the device busy and K is long (the weight gradient, K = N * OH * OW); slices keep at
/// least 256 steps of K.
/// Errors for a group count of 0, which every convolution rejects.
pub fn plan(dev: &Device, m: usize, ncols: usize, k: usize, groups: usize) -> Result<ConvPlan> {
    if groups == 0 {
        return Err(crate::Error::arg(
            "conv plan",
            "groups must be at least 1, got 0",
        ));
    }
    // The output lines are unknown here: taken as long as the columns.
    Ok(plan_with(dev.caps(), true, m, ncols, k, groups, ncols))
}

/// Rows per invocation of the direct kernels (`DR`).
pub(crate) const DIRECT_ROWS: [u32; 4] = [1, 2, 4, 8];
/// Row blocks of 8 rows of the GEMM kernels (`RT`).
pub(crate) const GEMM_ROW_BLOCKS: [u32; 3] = [1, 2, 4];
/// Rows and columns per invocation of the GPU large-tile kernel (`TM`, `TN`): 64x64 and
/// 128x64 tiles. (Its 128x128 tile, TN = 8, ran an H200's convolution forward in 1.37 ms where
/// 128x64 took 1.19, and the weight gradient alike, so no plan takes it.)
pub(crate) const WG_SHAPES: [(u32, u32); 2] = [(4, 4), (8, 4)];
/// Rows per group from which GPUs take the large-tile kernel (below it most of a 64-row
/// tile would idle).
const WG_MIN_ROWS: usize = 32;
/// Subgroups per workgroup of the sg8 kernel (`SGS`): 2 for more than 32 output columns.
pub(crate) const SG8_SUBGROUPS: [u32; 2] = [1, 2];

/// [`plan`], with the direct kernel only when `direct` allows it; `line` is the length of the
/// output lines the direct kernel walks in blocks of 8 columns.
///
/// The direct kernel serves groups of fewer than 8 rows everywhere (a GEMM tile would idle).
/// On GPUs it also serves 8 to 31 rows when the lines fill its 8-column blocks: there the GEMM
/// kernel would be the portable 32x32 tile with a quarter to all but one of its rows idle (the
/// large-tile core starts at 32 rows), while the direct kernel keeps up to 8 x 8 outputs per
/// invocation in registers and reads the weights as values shared by the whole warp. A weight
/// gradient's lines are kernel rows (3 of 8 columns for 3x3), so it keeps the GEMM kernels.
fn plan_with(
    caps: &Caps,
    direct: bool,
    m: usize,
    ncols: usize,
    k: usize,
    groups: usize,
    line: usize,
) -> ConvPlan {
    let gpu_direct = !caps.cpu && m < WG_MIN_ROWS && line >= DIRECT_COLS;
    let variant = if direct && (m < 8 || gpu_direct) {
        ConvVariant::Direct
    } else if !caps.cpu && m >= WG_MIN_ROWS {
        ConvVariant::WgTiled
    } else if caps.sg8 {
        ConvVariant::Sg8
    } else {
        ConvVariant::Tiled
    };
    let groups = groups.max(1);
    let (rt, ct) = match variant {
        ConvVariant::Direct => (pick(&DIRECT_ROWS, m), 0),
        // As GEMM: 128x64 tiles where they fill the device, alone or split over K, else
        // 64x64.
        ConvVariant::WgTiled => {
            use crate::ops::gemm::plan::tall_tiles;
            WG_SHAPES[usize::from(tall_tiles(caps, m, ncols, k, groups, None))]
        }
        _ => (pick(&GEMM_ROW_BLOCKS, m.div_ceil(8)), 0),
    };
    let sgs = SG8_SUBGROUPS[usize::from(ncols > 32)];
    let mut pl = ConvPlan {
        variant,
        rt,
        ct,
        sgs,
        splits: 1,
        k_chunk: k as u32,
    };
    let (tm, tn) = pl.tile();
    let tiles = if !caps.cpu && variant == ConvVariant::Direct {
        // The direct kernel packs its invocations (row block, line, 8-column block of every
        // group) densely into workgroups: count them in workgroups of 256 lanes, the unit of
        // the target. A depthwise weight gradient (3 lines of 3 columns per channel) is 768
        // invocations over 256 channels, 3 such workgroups, which its tile count took for 256.
        let lines = ncols.checked_div(line).unwrap_or(1);
        m.div_ceil(tm)
            .saturating_mul(lines)
            .saturating_mul(line.div_ceil(DIRECT_COLS))
            .saturating_mul(groups)
            .div_ceil(256)
            .max(1)
    } else {
        m.div_ceil(tm)
            .saturating_mul(ncols.div_ceil(tn))
            .saturating_mul(groups)
            .max(1)
    };
    // CPU adapters: 64 tiles (measured on lavapipe); GPUs: as GEMM (below `split_floor`
    // tiles, into `split_target` workgroups).
    let (floor, target) = if caps.cpu {
        (64, 64)
    } else {
        use crate::ops::gemm::plan::{split_floor, split_target};
        (split_floor(caps), split_target(caps))
    };
    let max_z = caps.max_workgroups_per_dim as usize;
    if k >= 1024 && tiles < floor {
        let wanted = target
            .div_ceil(tiles)
            .min(k / 256)
            .min(max_z / groups)
            .max(1);
        let chunk = k.div_ceil(wanted);
        pl.splits = k.div_ceil(chunk) as u32;
        pl.k_chunk = chunk as u32;
    }
    pl
}

/// The plan a launch uses for the GEMM view `p`: [`plan`], except on SwiftShader's strided data
/// gradient, then the `DirectLines` upgrade for an unsplit `Direct` launch with one row per
/// group whose kernel rows and columns step one source line and column (forward and weight
/// gradient with stride == dilation) over at least 4 lines.
pub(crate) fn plan_params(
    caps: &Caps,
    p: &ConvParams,
    transposed: bool,
    groups: usize,
) -> ConvPlan {
    let (m, ncols, k) = (p.m as usize, p.ncols as usize, p.k as usize);
    // Chromium's CPU WebGPU adapter (SwiftShader) does not finish compiling conv_direct with
    // TRANSPOSED (the strided data gradient): after minutes its GPU process is killed and the
    // device is lost. The tiled kernel, which compiles there in under a second, serves that
    // case in the browser.
    let direct = !(transposed && caps.swiftshader);
    let mut pl = plan_with(caps, direct, m, ncols, k, groups, p.c_e2 as usize);
    if pl.variant == ConvVariant::Direct
        && pl.splits == 1
        && m == 1
        && !transposed
        && p.b_k1 == p.b_c1
        && p.b_k2 == p.b_c2
        && p.c_e1 >= 4
    {
        pl.variant = ConvVariant::DirectLines;
    }
    pl
}

/// The smallest table entry covering the rows, else the largest: the variant list enumerates
/// the same tables, so every plan has a precompiled variant.
fn pick(table: &[u32], rows: usize) -> u32 {
    let last = table[table.len() - 1];
    table
        .iter()
        .copied()
        .find(|&r| r as usize >= rows)
        .unwrap_or(last)
}

/// The direct kernel's plan for `p`, whatever its rows per group, unsplit: the launch takes it
/// when one sample's output columns alone need more workgroups on one grid axis than the
/// adapter allows under the planned GEMM kernel (their grids put the columns on one axis; the
/// direct kernel lays its invocations out flat). `None` where the direct kernel cannot serve
/// (the transposed data gradient on SwiftShader, see [`plan_params`]).
fn direct_plan(caps: &Caps, p: &ConvParams, transposed: bool) -> Option<ConvPlan> {
    if transposed && caps.swiftshader {
        return None;
    }
    Some(ConvPlan {
        variant: ConvVariant::Direct,
        rt: pick(&DIRECT_ROWS, p.m as usize),
        ct: 0,
        sgs: SG8_SUBGROUPS[usize::from(p.ncols > 32)],
        splits: 1,
        k_chunk: p.k,
    })
}

/// The plan a launch of direction `dir` on `g` uses.
pub(crate) fn launch_plan(dev: &Device, g: &Geom, dir: Direction) -> ConvPlan {
    let (p, transposed) = ConvParams::new(g, dir);
    let caps = dev.caps();
    let pl = plan_params(caps, &p, transposed, g.groups);
    let direct = matches!(pl.variant, ConvVariant::Direct | ConvVariant::DirectLines);
    if dir == Direction::Weight || g.n == 0 || direct {
        return pl;
    }
    // The launch runs samples in windows when the whole grid passes an axis (launch.rs), but
    // one sample's grid must fit: the GEMM kernels put its columns on one axis (launch.rs's
    // `grid`), so a 2048 x 2048 image under 64-column tiles needs 65536 workgroups there.
    let (p1, _) = ConvParams::new(&Geom { n: 1, ..*g }, dir);
    let (tm, tn) = pl.tile();
    let max = caps.max_workgroups_per_dim as usize;
    let fits = (p1.m as usize).div_ceil(tm) <= max
        && (p1.ncols as usize).div_ceil(tn) <= max
        && g.groups.saturating_mul(pl.splits as usize) <= max;
    if fits {
        pl
    } else {
        direct_plan(caps, &p, transposed).unwrap_or(pl)
    }
}

#[cfg(test)]
mod plan_tests {
    use super::*;

    #[test]
    fn variants_follow_rows_per_group_and_adapter() {
        let (gpu, lvp) = (Caps::test_gpu(), Caps::test_lavapipe(2));
        assert_eq!(
            plan_with(&gpu, true, 1, 100, 100, 32, 100).variant,
            ConvVariant::Direct
        );
        assert_eq!(
            plan_with(&gpu, true, 7, 100, 100, 1, 100).variant,
            ConvVariant::Direct
        );
        // 8 to 31 rows on GPUs: direct over lines of 8 columns or more, else the 32x32 tile
        // (a 3x3 weight gradient's lines are 3 long).
        for m in [8, 16, 31] {
            let p = plan_with(&gpu, true, m, 100, 100, 1, 8);
            assert_eq!((p.variant, p.rt), (ConvVariant::Direct, 8), "{m}");
            let p = plan_with(&gpu, true, m, 100, 100, 1, 3);
            assert_eq!(p.variant, ConvVariant::Tiled, "{m}");
            // CPU adapters keep the GEMM kernels from 8 rows.
            let p = plan_with(&lvp, true, m, 100, 100, 1, 8);
            assert_eq!(p.variant, ConvVariant::Sg8, "{m}");
        }
        // 32 rows or more: the large-tile core, 128x64 tiles where those tiles fill the
        // device (never 128x128: slower on the H200).
        let p = plan_with(&gpu, true, 32, 100, 100, 1, 100);
        assert_eq!(
            (p.variant, p.rt, p.ct, p.tile()),
            (ConvVariant::WgTiled, 4, 4, (64, 64))
        );
        // x [32, 128, 56, 56], 3x3: 128 rows x 100352 columns, 1568 tiles of 128 x 64.
        let p = plan_with(&gpu, true, 128, 100352, 1152, 1, 100);
        assert_eq!(
            (p.variant, p.rt, p.ct, p.tile()),
            (ConvVariant::WgTiled, 8, 4, (128, 64))
        );
        // 128 rows x 16384 columns: 256 tiles of 128 x 64 fill the 256 slots; 16320 columns
        // (255 tiles) fall short: 64 x 64.
        let p = plan_with(&gpu, true, 128, 16384, 1152, 1, 100);
        assert_eq!(p.tile(), (128, 64));
        let p = plan_with(&gpu, true, 128, 16320, 1152, 1, 100);
        assert_eq!(p.tile(), (64, 64));
        // Its weight gradient: 36 tiles of 64 x 64 would split K, so 18 tiles of 128 x 64
        // split it into four workgroups per slot (1024 / 18 = 57 slices).
        let p = plan_with(&gpu, true, 128, 1152, 100352, 1, 100);
        assert_eq!((p.variant, p.rt, p.ct), (ConvVariant::WgTiled, 8, 4));
        assert_eq!(p.splits, 57, "{p:?}");
        // 64 columns (a weight gradient of 7 input channels, 3x3): 128 x 64 tiles, split.
        let p = plan_with(&gpu, true, 128, 63, 100352, 1, 100);
        assert_eq!((p.variant, p.rt, p.ct), (ConvVariant::WgTiled, 8, 4));
        assert!(p.splits > 1, "{p:?}");
        assert!(p.k_chunk >= 256 && p.splits * p.k_chunk >= 100352);
        assert_eq!(
            plan_with(&lvp, true, 128, 100352, 1152, 1, 100).variant,
            ConvVariant::Sg8
        );
        assert_eq!(
            plan_with(&lvp, true, 8, 100, 100, 1, 100).variant,
            ConvVariant::Sg8
        );
        // Direct not allowed (SwiftShader's strided data gradient): the GEMM kernels.
        assert_eq!(
            plan_with(&gpu, false, 1, 100, 100, 1, 100).variant,
            ConvVariant::Tiled
        );
        // Row blocks: direct rows up to 8, GEMM blocks up to 4.
        assert_eq!(plan_with(&gpu, true, 3, 100, 100, 1, 100).rt, 4);
        assert_eq!(plan_with(&lvp, true, 64, 100, 100, 1, 100).rt, 4);
        // Every plan's row block and subgroup count is in the tables the variant list
        // enumerates.
        for m in 0..80 {
            for ncols in [1, 32, 33, 500] {
                for caps in [gpu, lvp] {
                    let p = plan_with(&caps, true, m, ncols, 100, 1, 100);
                    let table: &[u32] = match p.variant {
                        ConvVariant::Direct | ConvVariant::DirectLines => &DIRECT_ROWS,
                        ConvVariant::WgTiled => {
                            assert!(WG_SHAPES.contains(&(p.rt, p.ct)), "{p:?}");
                            continue;
                        }
                        _ => &GEMM_ROW_BLOCKS,
                    };
                    assert!(table.contains(&p.rt), "{p:?}");
                    assert!(SG8_SUBGROUPS.contains(&p.sgs), "{p:?}");
                }
            }
        }
    }

    #[test]
    fn gpu_depthwise_weight_gradients_split_by_invocations() {
        let (gpu, lvp) = (Caps::test_gpu(), Caps::test_lavapipe(2));
        // Depthwise 3x3 over 256 channels, N * OH * OW = 32 * 56 * 56: one row per group,
        // lines of 3 columns; 768 invocations each walking K unsplit before.
        let p = plan_with(&gpu, true, 1, 9, 100_352, 256, 3);
        assert_eq!(p.variant, ConvVariant::Direct);
        assert!(p.splits >= 64, "{p:?}");
        assert!(p.k_chunk >= 256 && p.splits * p.k_chunk >= 100_352, "{p:?}");
        // CPU adapters keep their tile count (256 tiles, no split).
        assert_eq!(plan_with(&lvp, true, 1, 9, 100_352, 256, 3).splits, 1);
        // A depthwise forward (K = 9) never splits.
        assert_eq!(plan_with(&gpu, true, 1, 3136, 9, 256, 56).splits, 1);
    }

    #[test]
    fn weight_gradients_split_long_k() {
        let lvp = Caps::test_lavapipe(2);
        // K = N * OH * OW = 8 * 56 * 56 over few tiles: split, slices of at least 256.
        let p = plan_with(&lvp, true, 64, 576, 25088, 1, 100);
        assert!(p.splits > 1, "{p:?}");
        assert!(p.k_chunk >= 256 && p.splits * p.k_chunk >= 25088, "{p:?}");
        // Short K never splits.
        assert_eq!(plan_with(&lvp, true, 64, 576, 576, 1, 100).splits, 1);
        // Zero groups is refused by the public plan, empty sizes plan without panicking.
        assert_eq!(plan_with(&lvp, true, 0, 0, 0, 1, 100).splits, 1);
    }
}
