//! The BPTT step kernels of the fused LSTM/GRU (shaders/rnn_backward.wgsl,
//! rnn_backward_sg8.wgsl, rnn_backward_wg.wgsl, rnn_backward_seq.wgsl,
//! shaders/lib/rnn_backward_common.wgsl): their bindings, params, K-slice planning and shader
//! variants. The backward's orchestration (ops/rnn/backward.rs) launches them.

use bytemuck::{Pod, Zeroable};

use super::step::{StepKernels, SEQ_CELLS, SEQ_ROW_CHOICES, WG};
use super::weights::RnnKind;
use crate::ops::activation::ACTIVATION;
use crate::runtime::pipeline::{ShaderLib, ShaderVariant};
use crate::runtime::{Access, Kernel};
use crate::DType;

use Access::{Read as R, ReadWrite as RW};

static BACKWARD_COMMON: ShaderLib = ShaderLib::new(include_str!(
    "../../../shaders/lib/rnn_backward_common.wgsl"
));
const BACKWARD_LIBS: &[&ShaderLib] = &[&ACTIVATION, &BACKWARD_COMMON];
const BACKWARD_SRC: &str = include_str!("../../../shaders/rnn_backward.wgsl");
const BACKWARD_SG8_SRC: &str = include_str!("../../../shaders/rnn_backward_sg8.wgsl");
const BACKWARD_WG_SRC: &str = include_str!("../../../shaders/rnn_backward_wg.wgsl");
const BACKWARD_SEQ_SRC: &str = include_str!("../../../shaders/rnn_backward_seq.wgsl");
const BACKWARD_WG_LIBS: &[&ShaderLib] = &[
    &ACTIVATION,
    &BACKWARD_COMMON,
    &crate::ops::gemm::launch::WG_TILE,
];

/// A backward step kernel: the LSTM one reads the cell states (slot 5), the GRU one the hidden
/// states (slot 4) and also writes `dax` (slot 8).
const fn backward_kernel(kind: RnnKind, source: &'static str, entry: &'static str) -> Kernel {
    backward_kernel_with(kind, source, entry, BACKWARD_LIBS)
}

const fn backward_kernel_with(
    kind: RnnKind,
    source: &'static str,
    entry: &'static str,
    libs: &'static [&'static ShaderLib],
) -> Kernel {
    match kind {
        RnnKind::Lstm => {
            Kernel::new(entry, source, entry, &[R, R, R, R, RW, RW]).slots(&[1, 2, 3, 5, 6, 7])
        }
        RnnKind::Gru => Kernel::new(entry, source, entry, &[R, R, R, R, RW, RW, RW])
            .slots(&[1, 2, 3, 4, 6, 7, 8]),
    }
    .libs(libs)
}
static LSTM_BACKWARD: Kernel = backward_kernel(RnnKind::Lstm, BACKWARD_SRC, "lstm_backward_step");
static GRU_BACKWARD: Kernel = backward_kernel(RnnKind::Gru, BACKWARD_SRC, "gru_backward_step");
static LSTM_BACKWARD_SG8: Kernel =
    backward_kernel(RnnKind::Lstm, BACKWARD_SG8_SRC, "lstm_backward_step_sg8");
static GRU_BACKWARD_SG8: Kernel =
    backward_kernel(RnnKind::Gru, BACKWARD_SG8_SRC, "gru_backward_step_sg8");
/// GPUs with H <= 64: every step of a direction in one dispatch (shaders/rnn_backward_seq.wgsl).
const BACKWARD_SEQ_LIBS: &[&ShaderLib] = &[&ACTIVATION, &BACKWARD_COMMON, &SEQ_CELLS];
pub(super) static LSTM_BACKWARD_SEQ: Kernel = backward_kernel_with(
    RnnKind::Lstm,
    BACKWARD_SEQ_SRC,
    "lstm_backward_seq",
    BACKWARD_SEQ_LIBS,
);
pub(super) static GRU_BACKWARD_SEQ: Kernel = backward_kernel_with(
    RnnKind::Gru,
    BACKWARD_SEQ_SRC,
    "gru_backward_seq",
    BACKWARD_SEQ_LIBS,
);
/// GPUs: the recurrent product's K slices into an f32 workspace (slot 9), then the gate
/// derivatives summing them (the step kernels' bindings plus the workspace).
pub(super) static REC_WG: Kernel =
    Kernel::new("rnn_rec_wg", BACKWARD_WG_SRC, "rnn_rec_wg", &[R, RW, RW])
        .slots(&[1, 7, 9])
        .libs(BACKWARD_WG_LIBS);
pub(super) static LSTM_BACKWARD_WS: Kernel = Kernel::new(
    "lstm_backward_ws",
    BACKWARD_WG_SRC,
    "lstm_backward_ws",
    &[R, R, R, RW, RW, RW],
)
.slots(&[2, 3, 5, 6, 7, 9])
.libs(BACKWARD_WG_LIBS);
pub(super) static GRU_BACKWARD_WS: Kernel = Kernel::new(
    "gru_backward_ws",
    BACKWARD_WG_SRC,
    "gru_backward_ws",
    &[R, R, R, RW, RW, RW, RW],
)
.slots(&[2, 3, 4, 6, 7, 8, 9])
.libs(BACKWARD_WG_LIBS);
/// Rows per invocation of `rnn_rec_wg` (`TM`): 64-row tiles.
pub(super) const REC_TM: u32 = 4;

/// K slices of the GPU step's recurrent product ([B, K] x [K, H], K = G*H): enough slices for
/// the output tiles (64 x 64) to reach `Caps::parallelism`, each at least 128 steps of K (16
/// staged steps), at most 64.
pub(crate) fn rec_splits(parallelism: usize, b: usize, h: usize, k: usize) -> u32 {
    let tiles = b.div_ceil(64).max(1) * h.div_ceil(64).max(1);
    parallelism.div_ceil(tiles).min(k / 128).clamp(1, 64) as u32
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable, Default)]
pub(super) struct BackwardParams {
    pub(super) batch: u32,
    pub(super) hidden: u32,
    pub(super) gh: u32,
    pub(super) has_rec: u32,
    pub(super) dy_off: u32,
    pub(super) dy_rs: u32,
    pub(super) a_off: u32,
    pub(super) a_prev: u32,
    pub(super) g_off: u32,
    pub(super) seq_rs: u32,
    pub(super) prev_off: u32,
    pub(super) cur_off: u32,
    pub(super) carry_in: u32,
    pub(super) carry_out: u32,
    pub(super) zero: f32,
    pub(super) splits: u32,
    pub(super) steps: u32,
    pub(super) down: u32,
    pub(super) pad0: u32,
    pub(super) pad1: u32,
}

/// The BPTT step kernels, chosen like the forward's.
pub(super) const BACKWARD_STEPS: StepKernels = StepKernels {
    wg: None,
    ks: None,
    sg8: [&LSTM_BACKWARD_SG8, &GRU_BACKWARD_SG8],
    portable: [&LSTM_BACKWARD, &GRU_BACKWARD],
};

pub(super) fn backward_variants() -> Vec<ShaderVariant> {
    let mut v = Vec::new();
    for dt in [DType::F32, DType::F16] {
        for k in [&LSTM_BACKWARD, &GRU_BACKWARD] {
            v.push(ShaderVariant::new(k, &[dt], &[("WG", WG as f64)]));
        }
        for k in [&LSTM_BACKWARD_SG8, &GRU_BACKWARD_SG8] {
            for sgs in [1.0, 2.0, 4.0] {
                v.push(ShaderVariant::new(k, &[dt], &[("SGS", sgs)]));
            }
        }
        v.push(ShaderVariant::new(&REC_WG, &[dt], &[("TM", REC_TM as f64)]));
        // One unit per lane (`seq_shape`: H <= 64, `UPI` at its default).
        for k in [&LSTM_BACKWARD_SEQ, &GRU_BACKWARD_SEQ] {
            for rp in SEQ_ROW_CHOICES {
                v.push(ShaderVariant::new(k, &[dt], &[("RP", rp as f64)]));
            }
        }
        for k in [&LSTM_BACKWARD_WS, &GRU_BACKWARD_WS] {
            v.push(ShaderVariant::new(k, &[dt], &[("WG", WG as f64)]));
        }
    }
    v
}

/// The params struct's layout, checked against the shader's `struct Params` in tests/shaders.rs.
#[doc(hidden)]
pub fn params_layout() -> crate::runtime::pipeline::ParamsLayout {
    crate::runtime::pipeline::params_layout!(
        LSTM_BACKWARD,
        &[DType::F32],
        BackwardParams {
            batch,
            hidden,
            gh,
            has_rec,
            dy_off,
            dy_rs,
            a_off,
            a_prev,
            g_off,
            seq_rs,
            prev_off,
            cur_off,
            carry_in,
            carry_out,
            zero,
            splits,
            steps,
            down,
            pad0,
            pad1
        }
    )
}

#[cfg(test)]
mod tests {
    use super::rec_splits;

    #[test]
    fn sequence_buffer_matches_the_shader() {
        let src = super::BACKWARD_SEQ_SRC;
        assert!(src.contains("const DA_ROWS: u32 = 2048u;"));
        assert!(super::SEQ_CELLS.text.contains("const RG: u32 = 4u;"));
        // seq_shape's budget: 4 RP rows of G*H values within DA_ROWS.
        let caps = crate::Caps::test_gpu();
        assert_eq!(
            crate::ops::rnn::step::seq_shape(&caps, 1 << 14, 64, 4 * 64),
            Some(2)
        );
        assert_eq!(
            crate::ops::rnn::step::seq_shape(&caps, 1 << 14, 32, 4 * 32),
            Some(4)
        );
        assert_eq!(
            crate::ops::rnn::step::seq_shape(&caps, 1 << 14, 48, 4 * 48),
            Some(2)
        );
    }

    #[test]
    fn recurrent_product_splits_fill_the_device() {
        // H 512, B 64, LSTM (K = 2048): 8 tiles of 64 x 64, 256 / 8 = 32 wanted, K / 128 = 16.
        assert_eq!(rec_splits(256, 64, 512, 2048), 16);
        // One tile, two host threads (lavapipe under gpu_plans), an LSTM of 64 units: 2.
        assert_eq!(rec_splits(2, 10, 64, 256), 2);
        // Enough tiles already: one slice.
        assert_eq!(rec_splits(256, 1024, 1024, 4096), 1);
        // Short K never splits; tiny problems and a CPU-sized estimate neither.
        assert_eq!(rec_splits(256, 64, 16, 64), 1);
        assert_eq!(rec_splits(2, 1, 1, 4), 1);
        // At most 64 slices.
        assert_eq!(rec_splits(100_000, 1, 64, 1 << 20), 64);
    }
}
