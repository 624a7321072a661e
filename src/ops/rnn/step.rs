//! The per-step kernels of the LSTM / GRU forward (shaders/rnn.wgsl, shaders/rnn_sg8.wgsl,
//! shaders/rnn_wg.wgsl, shaders/lib/rnn_common.wgsl): their params, the choice between the GPU,
//! sg8 and portable variants, and the state copies between a sequence buffer and `[L*D, B, H]`
//! states.

use bytemuck::{Pod, Zeroable};

use super::weights::RnnKind;
use crate::ops::activation::ACTIVATION;
use crate::ops::gemm::has_sg8;
use crate::ops::gemm::launch::WG_TILE;
use crate::runtime::pipeline::ShaderLib;
use crate::runtime::{Access, Caps, Kernel};
use crate::{DType, Device, Error, Result, Tensor};

pub(crate) static COMMON: ShaderLib =
    ShaderLib::new(include_str!("../../../shaders/lib/rnn_common.wgsl"));
const LIBS: &[&ShaderLib] = &[&ACTIVATION, &COMMON];
/// The sequence kernels' cells (shaders/lib/rnn_seq_cells.wgsl), shared by the forward's and
/// the backward's.
pub(crate) static SEQ_CELLS: ShaderLib =
    ShaderLib::new(include_str!("../../../shaders/lib/rnn_seq_cells.wgsl"));
const SEQ_LIBS: &[&ShaderLib] = &[&ACTIVATION, &COMMON, &SEQ_CELLS];
const WG_LIBS: &[&ShaderLib] = &[&ACTIVATION, &COMMON, &WG_TILE];
const PORTABLE_SRC: &str = include_str!("../../../shaders/rnn.wgsl");
const SG8_SRC: &str = include_str!("../../../shaders/rnn_sg8.wgsl");
const WG_SRC: &str = include_str!("../../../shaders/rnn_wg.wgsl");
const KS_SRC: &str = include_str!("../../../shaders/rnn_ks.wgsl");
const SEQ_SRC: &str = include_str!("../../../shaders/rnn_seq.wgsl");
/// Rows per invocation of the GPU step (`TM`): 64 batch rows per tile.
pub(crate) const STEP_TM: u32 = 4;
pub(crate) const WG: u32 = 64;

use Access::{Read as R, ReadWrite as RW};

/// A step kernel: the LSTM one binds a cell state (slot 5) the GRU one lacks.
const fn step_kernel(kind: RnnKind, source: &'static str, entry: &'static str) -> Kernel {
    step_kernel_with(kind, source, entry, LIBS)
}

const fn step_kernel_with(
    kind: RnnKind,
    source: &'static str,
    entry: &'static str,
    libs: &'static [&'static ShaderLib],
) -> Kernel {
    match kind {
        RnnKind::Lstm => {
            Kernel::new(entry, source, entry, &[R, R, R, RW, RW, RW]).slots(&[1, 2, 3, 4, 5, 6])
        }
        RnnKind::Gru => {
            Kernel::new(entry, source, entry, &[R, R, R, RW, RW]).slots(&[1, 2, 3, 4, 6])
        }
    }
    .libs(libs)
}
pub(crate) static LSTM_STEP: Kernel = step_kernel(RnnKind::Lstm, PORTABLE_SRC, "lstm_step");
pub(crate) static GRU_STEP: Kernel = step_kernel(RnnKind::Gru, PORTABLE_SRC, "gru_step");
pub(crate) static LSTM_STEP_SG8: Kernel = step_kernel(RnnKind::Lstm, SG8_SRC, "lstm_step_sg8");
pub(crate) static GRU_STEP_SG8: Kernel = step_kernel(RnnKind::Gru, SG8_SRC, "gru_step_sg8");
pub(crate) static LSTM_STEP_WG: Kernel =
    step_kernel_with(RnnKind::Lstm, WG_SRC, "lstm_step_wg", WG_LIBS);
pub(crate) static GRU_STEP_WG: Kernel =
    step_kernel_with(RnnKind::Gru, WG_SRC, "gru_step_wg", WG_LIBS);
pub(crate) static LSTM_STEP_KS: Kernel = step_kernel(RnnKind::Lstm, KS_SRC, "lstm_step_ks");
pub(crate) static GRU_STEP_KS: Kernel = step_kernel(RnnKind::Gru, KS_SRC, "gru_step_ks");
pub(crate) static LSTM_SEQ: Kernel = step_kernel_with(RnnKind::Lstm, SEQ_SRC, "lstm_seq", SEQ_LIBS);
pub(crate) static GRU_SEQ: Kernel = step_kernel_with(RnnKind::Gru, SEQ_SRC, "gru_seq", SEQ_LIBS);
pub(crate) static LOAD_STATE: Kernel = Kernel::new("rnn", PORTABLE_SRC, "load_state", &[R, RW])
    .slots(&[7, 4])
    .libs(LIBS);

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable, Default)]
pub(crate) struct RnnParams {
    pub(crate) batch: u32,
    pub(crate) hidden: u32,
    pub(crate) seq_rs: u32,
    pub(crate) prev_off: u32,
    pub(crate) next_off: u32,
    pub(crate) x_off: u32,
    pub(crate) x_rs: u32,
    pub(crate) g_off: u32,
    pub(crate) src_off: u32,
    pub(crate) src_rs: u32,
    pub(crate) dst_off: u32,
    pub(crate) dst_rs: u32,
    pub(crate) steps: u32,
    pub(crate) reverse: u32,
    pub(crate) g_step: u32,
    pub(crate) pad0: u32,
}

/// The step kernel, its override constants and its grid.
pub(crate) struct StepPlan {
    pub(crate) kernel: &'static Kernel,
    pub(crate) consts: Vec<(&'static str, f64)>,
    pub(crate) grid: [u32; 3],
}

/// The kernels of one per-step family: `[LSTM, GRU]` for the GPU (when the family has one: the
/// large-tile step and the K-split step for grids too small to fill the device), the sg8 and
/// the portable variant.
pub(crate) struct StepKernels {
    pub(crate) wg: Option<[&'static Kernel; 2]>,
    pub(crate) ks: Option<[&'static Kernel; 2]>,
    pub(crate) sg8: [&'static Kernel; 2],
    pub(crate) portable: [&'static Kernel; 2],
}

pub(crate) const FORWARD_STEPS: StepKernels = StepKernels {
    wg: Some([&LSTM_STEP_WG, &GRU_STEP_WG]),
    ks: Some([&LSTM_STEP_KS, &GRU_STEP_KS]),
    sg8: [&LSTM_STEP_SG8, &GRU_STEP_SG8],
    portable: [&LSTM_STEP, &GRU_STEP],
};

/// Batch rows and hidden units per workgroup of the K-split step (shaders/rnn_ks.wgsl:
/// `RG * RT` and `UB`).
const KS_TILE: (usize, usize) = (16, 8);

/// Whether the GPU forward step splits K (shaders/rnn_ks.wgsl) instead of running the
/// large-tile step: when the large tiles (64 batch rows x 16 units) are fewer than the
/// device's workgroup slots ([`Caps::parallelism`]), each of them would walk all of K while
/// most of the device idles, and the step costs the walk's latency. B 64, H 512 makes 32
/// tiles; a discrete GPU holds 256.
pub(crate) fn splits_k(caps: &Caps, b: usize, h: usize) -> bool {
    let tiles = h
        .div_ceil(16)
        .saturating_mul(b.div_ceil(16 * STEP_TM as usize));
    tiles < caps.slots()
}

/// On GPUs the large-tile step where the family has one (64 batch rows x 16 hidden units per
/// workgroup, the recurrent product staged through workgroup memory), or the K-split step
/// ([`splits_k`]); else the sg8 variant on 8-lane-subgroup adapters (32 batch rows x 8
/// hidden units per subgroup), the portable one (one invocation per unit) elsewhere.
pub(crate) fn step_plan(
    dev: &Device,
    kind: RnnKind,
    b: usize,
    h: usize,
    family: &StepKernels,
) -> Result<StepPlan> {
    let max = dev.limits().max_compute_workgroups_per_dimension as usize;
    let which = usize::from(kind == RnnKind::Gru);
    let caps = dev.caps();
    let sgs = b.div_ceil(32).next_power_of_two().min(4);
    let tiled = [
        family
            .ks
            .filter(|_| !caps.cpu && splits_k(caps, b, h))
            .map(|ks| {
                let (rows, units) = KS_TILE;
                (ks[which], vec![], [h.div_ceil(units), b.div_ceil(rows), 1])
            }),
        family.wg.filter(|_| !caps.cpu).map(|wg| {
            let rows = 16 * STEP_TM as usize;
            let grid = [h.div_ceil(16), b.div_ceil(rows), 1];
            (wg[which], vec![("TM", STEP_TM as f64)], grid)
        }),
        has_sg8(dev).then(|| {
            let grid = [b.div_ceil(32 * sgs), h.div_ceil(8), 1];
            (family.sg8[which], vec![("SGS", sgs as f64)], grid)
        }),
    ];
    // The first variant the adapter runs whose grid fits the per-dimension limit (a tiled one
    // past it, with millions of batch rows, gives way to the next), else the portable step.
    let fitting = tiled
        .into_iter()
        .flatten()
        .find(|(_, _, grid)| grid.iter().all(|&g| g <= max));
    let (kernel, consts, grid) = match fitting {
        Some(plan) => plan,
        None => {
            // One invocation per (row, unit), over y past the per-dimension limit (the
            // shaders' flat_index).
            let groups = (b as u64 * h as u64).div_ceil(WG as u64);
            let grid = dev.grid_1d(kind.name(), groups)?.map(|g| g as usize);
            (family.portable[which], vec![("WG", WG as f64)], grid)
        }
    };
    if grid.iter().any(|&g| g > max) {
        return Err(Error::size(
            kind.name(),
            format!("batch {b} x hidden {h} needs grid {grid:?}, over the adapter's {max}"),
        ));
    }
    Ok(StepPlan {
        kernel,
        consts,
        grid: grid.map(|g| g as u32),
    })
}

/// The widest hidden size the sequence kernel's buffers hold (shaders/rnn_seq.wgsl: `HMAX`, 64
/// units per row group times `UPI` <= 2).
pub(crate) const SEQ_MAX_HIDDEN: usize = 128;
/// The widest hidden size the planner runs on the sequence kernels (one unit per lane,
/// `UPI` = 1). Wider ones ran slower there than a dispatch per step on an NVIDIA H200 (one
/// call, ms): LSTM forward over T 32 at H 96, B 64: 0.50 against 0.41; H 128, B 16: 1.05 against
/// 0.43; H 128, B 256: 1.20 against 0.59; H 128, B 16 forward and backward: 1.98 against 1.03
/// (a step walks 4 x UPI x H dependent weight loads per lane, however few the rows). At H 64 the
/// bench's B 256 forward took 0.31 ms on it against 0.80 a step at a time.
pub(crate) const SEQ_PLAN_MAX_HIDDEN: usize = 64;
/// Row groups per workgroup of the sequence kernel (shaders/rnn_seq.wgsl: `RG`); a workgroup
/// holds `RG * RP` batch rows.
const SEQ_GROUPS: usize = 4;
/// Batch rows per invocation the sequence kernel may take (`RP`), most first.
pub(crate) const SEQ_ROW_CHOICES: [u32; 3] = [4, 2, 1];

/// Values of one workgroup-memory buffer of the sequence kernels (shaders/rnn_seq.wgsl:
/// `RMAX * HMAX`, shaders/rnn_backward_seq.wgsl: `DA_ROWS`): a workgroup's `4 RP` rows of
/// `row_len` values each must fit.
const SEQ_BUFFER: usize = 2048;

/// The sequence kernels' shape for `b` rows of hidden size `h` on `caps`, with `row_len`
/// values of each row in workgroup memory: `RP`, or `None` where the per-step kernels
/// run instead: CPU adapters (on lavapipe the bench's B 256, H 64 forward took 2.2x as long
/// in one dispatch, its 16 workgroups' barriers against 50 dispatches, and compiled 0.8 s
/// slower) and H above [`SEQ_PLAN_MAX_HIDDEN`]. On GPUs a per-step dispatch costs a round of launch
/// latency (an H200 spent about 16 us a forward step on that sequence, 8 MFLOP each), while
/// the rows of a recurrence never meet: one workgroup per `4 RP` batch rows walks every step
/// with one barrier per step. `RP` is the most rows per invocation (4, 2, 1) whose rows fit
/// and whose workgroups still fill the device's slots, else the fewest that fit. Each
/// invocation takes one unit per row (the shaders' `UPI` at its default 1: H <= 64).
pub(crate) fn seq_shape(caps: &Caps, b: usize, h: usize, row_len: usize) -> Option<u32> {
    if caps.cpu || h == 0 || h > SEQ_PLAN_MAX_HIDDEN {
        return None;
    }
    let groups = |rp: u32| b.div_ceil(SEQ_GROUPS * rp as usize);
    // The rows fit in workgroup memory and the workgroups in the grid (past its limit, over a
    // million rows, the step kernels still run).
    let ok = |rp: u32| {
        SEQ_GROUPS * rp as usize * row_len <= SEQ_BUFFER
            && groups(rp) <= caps.max_workgroups_per_dim as usize
    };
    SEQ_ROW_CHOICES
        .into_iter()
        .find(|&rp| ok(rp) && groups(rp) >= caps.slots())
        .or_else(|| SEQ_ROW_CHOICES.into_iter().rev().find(|&rp| ok(rp)))
}

/// The grid of a sequence kernel of `RP` rows per invocation over `b` rows (within the
/// adapter's limit: [`seq_shape`] checked it).
pub(crate) fn seq_grid(b: usize, rp: u32) -> [u32; 3] {
    [b.div_ceil(SEQ_GROUPS * rp as usize) as u32, 1, 1]
}

/// The most steps one sequence dispatch walks; longer sequences take one dispatch per chunk
/// (each starts from the state its predecessor stored), so no single dispatch runs long enough
/// to meet an OS's GPU watchdog (Windows resets a device after about 2 s): a step walks
/// 4 x H dependent weight loads per lane however many rows, and a million rows take many
/// waves of workgroups, so a chunk stays well under that at H <= 64.
pub(crate) const SEQ_CHUNK: usize = 64;

/// The sequence kernel (shaders/rnn_seq.wgsl), its constants and grid, where [`seq_shape`]
/// takes it: every step of one direction in one dispatch (per [`SEQ_CHUNK`] steps).
pub(crate) fn seq_plan(caps: &Caps, kind: RnnKind, b: usize, h: usize) -> Option<StepPlan> {
    let rp = seq_shape(caps, b, h, SEQ_MAX_HIDDEN)?;
    let kernel = match kind {
        RnnKind::Lstm => &LSTM_SEQ,
        RnnKind::Gru => &GRU_SEQ,
    };
    Some(StepPlan {
        kernel,
        consts: vec![("RP", rp as f64)],
        grid: seq_grid(b, rp),
    })
}

/// Copies a `[1, B, H]` state into slot `slot`, direction `dir` of a sequence buffer.
pub(crate) fn copy_state(
    dev: &Device,
    src: &Tensor,
    seq: &Tensor,
    slot: usize,
    dir: usize,
    h: usize,
) -> Result<()> {
    let (b, dh) = (seq.shape()[1], seq.shape()[2]);
    // src's last dim must be unit-stride for the copy's addressing; the offsets below must
    // describe the tensor actually bound (the packed copy when one is made).
    let src = if src.strides()[2] == 1 || h <= 1 {
        src.clone()
    } else {
        src.contiguous_at_zero()?
    };
    let p = RnnParams {
        batch: b as u32,
        hidden: h as u32,
        src_off: src.layout().offset() as u32,
        src_rs: src.strides()[1] as u32,
        dst_off: (slot * b * dh + dir * h) as u32,
        dst_rs: dh as u32,
        ..Default::default()
    };
    dev.launch(
        "rnn_state",
        &LOAD_STATE,
        &[seq.dtype()],
        &[("WG", WG as f64)],
        bytemuck::bytes_of(&p),
        &[src.buffer(), seq.buffer()],
        dev.grid_1d("rnn_state", (b as u64 * h as u64).div_ceil(WG as u64))?,
    )
}

/// `[L*D, B, H]` from per-(layer, direction) `[1, B, H]` views. A single state is returned as
/// a view (no dispatch); several are copied into one tensor.
pub(crate) fn stack_states(dev: &Device, parts: &[Tensor], b: usize, h: usize) -> Result<Tensor> {
    if parts.len() == 1 {
        return Ok(parts[0].clone());
    }
    let out = Tensor::empty(dev, "rnn_state", &[parts.len(), b, h], parts[0].dtype())?;
    for (i, part) in parts.iter().enumerate() {
        let p = RnnParams {
            batch: b as u32,
            hidden: h as u32,
            src_off: part.layout().offset() as u32,
            src_rs: part.strides()[1] as u32,
            dst_off: (i * b * h) as u32,
            dst_rs: h as u32,
            ..Default::default()
        };
        dev.launch(
            "rnn_state",
            &LOAD_STATE,
            &[out.dtype()],
            &[("WG", WG as f64)],
            bytemuck::bytes_of(&p),
            &[part.buffer(), out.buffer()],
            dev.grid_1d("rnn_state", (b as u64 * h as u64).div_ceil(WG as u64))?,
        )?;
    }
    Ok(out)
}

/// The params struct's layout, checked against the shader's `struct Params` in tests/shaders.rs.
#[doc(hidden)]
pub fn params_layout() -> crate::runtime::pipeline::ParamsLayout {
    crate::runtime::pipeline::params_layout!(
        LSTM_STEP,
        &[DType::F32],
        RnnParams {
            batch,
            hidden,
            seq_rs,
            prev_off,
            next_off,
            x_off,
            x_rs,
            g_off,
            src_off,
            src_rs,
            dst_off,
            dst_rs,
            steps,
            reverse,
            g_step,
            pad0
        }
    )
}

#[cfg(test)]
mod tests {
    use super::splits_k;
    use crate::runtime::Caps;

    #[test]
    fn sequence_tile_matches_the_shader() {
        let src = super::SEQ_SRC;
        let cells = super::SEQ_CELLS.text;
        assert!(cells.contains("const RG: u32 = 4u;") && super::SEQ_GROUPS == 4);
        assert!(src.contains("const RMAX: u32 = 16u;"));
        assert!(src.contains("const HMAX: u32 = 128u;") && super::SEQ_MAX_HIDDEN == 128);
        assert_eq!(16 * 128, super::SEQ_BUFFER);
    }

    #[test]
    fn sequence_kernel_on_gpus_for_small_hidden_sizes() {
        use super::seq_shape;
        let gpu = Caps::test_gpu();
        let fwd = |b, h| seq_shape(&gpu, b, h, 128);
        // The bench's B 256, H 64: 16 rows per workgroup would make 16 workgroups for 256
        // slots, so one row per invocation (64 workgroups).
        assert_eq!(fwd(256, 64), Some(1));
        // B 8192: 4 rows each still make 512 workgroups; B 2048: 2 rows (256).
        assert_eq!(fwd(8192, 64), Some(4));
        assert_eq!(fwd(2048, 64), Some(2));
        assert_eq!(fwd(1, 64), Some(1));
        // H above 64 (slower there on the H200), or a CPU adapter: the per-step kernels.
        assert_eq!(fwd(256, 65), None);
        assert_eq!(fwd(16, 128), None);
        assert_eq!(fwd(256, 0), None);
        assert_eq!(seq_shape(&Caps::test_lavapipe(2), 256, 64, 128), None);
        // The backward keeps G*H values a row: an LSTM of 64 units fits two rows per
        // invocation, of 32 four; a GRU of 64 (192 values) two. (One row of at most 4 x 64
        // values always fits: within H <= 64 the budget only picks RP.)
        assert_eq!(seq_shape(&gpu, 1 << 16, 64, 256), Some(2));
        assert_eq!(seq_shape(&gpu, 1 << 16, 32, 128), Some(4));
        assert_eq!(seq_shape(&gpu, 1 << 16, 64, 192), Some(2));
        // Past the grid's limit: the step kernels.
        let small_grid = Caps {
            max_workgroups_per_dim: 100,
            ..gpu
        };
        assert_eq!(seq_shape(&small_grid, 1600, 64, 128), Some(4));
        assert_eq!(seq_shape(&small_grid, 1601, 64, 128), None);
    }

    #[test]
    fn k_split_tile_matches_the_shader() {
        let src = super::KS_SRC;
        assert!(src.contains("const UB: u32 = 8u;") && super::KS_TILE.1 == 8);
        assert!(src.contains("const RT: u32 = 4u;") && src.contains("const RG: u32 = 4u;"));
        assert_eq!(super::KS_TILE.0, 16);
    }

    #[test]
    fn k_split_step_where_the_large_tiles_cannot_fill_the_device() {
        let gpu = Caps::test_gpu();
        // B 64, H 512: 32 large tiles for 256 slots; the bench's lstm_seq (B 256, H 64): 16.
        assert!(splits_k(&gpu, 64, 512));
        assert!(splits_k(&gpu, 256, 64));
        // B 512, H 1024: 512 tiles fill it.
        assert!(!splits_k(&gpu, 512, 1024));
        let small = Caps {
            parallelism: 2,
            ..gpu
        };
        assert!(splits_k(&small, 64, 16));
        assert!(!splits_k(&small, 65, 16));
        assert!(!splits_k(&small, 1, 17));
    }
}
