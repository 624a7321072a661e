//! GPU-scale cases (issues 25 and 26), family `gpu/`: shapes that fill a discrete GPU and would
//! take minutes on a CPU adapter, so the harness skips them on CPU adapters (device_type Cpu)
//! unless a case is named in full on the command line. A GPU session runs them all with
//! `kernels --bench gpu/`.
//!
//! Their own baselines come first: `gpu/fma_peak` (the FMA kernel of `fma_peak` with 32 times its
//! work, on the same grid sized from `Caps::parallelism`), the `of_peak=` of every compute case
//! here, and `gpu/copy_bw` (a 256 MiB buffer copy), the `of_copy=` of every
//! bandwidth case here.

use wgtensor::ops::gemm::GemmKernel;
use wgtensor::ops::RnnKind;
use wgtensor::{DType, Device, Tensor};

use super::batchnorm::bn_train_run;
use super::conv::{conv2d_flops_of, conv2d_run, wgrad_run};
use super::copy::copy_run;
use super::gemm::{fma_flops, fma_sized, gemm_case, gemm_kernel_case};
use super::inputs::tensor;
use super::rnn::{lstm_train_run, rnn_flops_of, rnn_forward_run};
use super::{Case, Run};

/// Invocations x iterations of gpu/fma_peak (32x fma_peak's: a large GPU runs it in ms).
const FMA_WORK: u64 = 1 << 32;
/// gpu/copy_bw's buffers: 2^26 f32.
const COPY_BYTES: u64 = 4 << 26;
/// The conv2d problem of issue 25 and its grouped / depthwise variants' input.
const CONV_X: [usize; 4] = [32, 128, 56, 56];
const CONV_XG: [usize; 4] = [32, 256, 56, 56];
/// The churn / steady op's shape (205 MB of f32) and the churn working set (6 of them, 1.2 GB).
const CHURN: [usize; 4] = [64, 256, 56, 56];
const CHURN_TENSORS: usize = 6;
const BN: [usize; 4] = [64, 256, 56, 56];
/// (T, batch, input, hidden) of the recurrent cases; T varies.
const fn rnn(t: usize) -> (usize, usize, usize, usize) {
    (t, 64, 512, 512)
}

fn numel(shape: &[usize]) -> f64 {
    shape.iter().product::<usize>() as f64
}

/// `x * 1.5` on `n` f32 elements.
fn map_run(dev: &Device, n: usize) -> wgtensor::Result<Run> {
    let x = tensor(dev, &[n], DType::F32, 1)?;
    dev.sync()?;
    Ok(Box::new(move || x.mul_scalar(1.5).map(drop)))
}

/// The sum of `n` f32 elements (one output: the GPU plan splits it into segments).
fn sum_run(dev: &Device, n: usize) -> wgtensor::Result<Run> {
    let x = tensor(dev, &[n], DType::F32, 1)?;
    dev.sync()?;
    Ok(Box::new(move || x.sum_all().map(drop)))
}

/// `x + y` on `n` f32 elements.
fn add_run(dev: &Device, n: usize) -> wgtensor::Result<Run> {
    let x = tensor(dev, &[n], DType::F32, 1)?;
    let y = tensor(dev, &[n], DType::F32, 2)?;
    dev.sync()?;
    Ok(Box::new(move || x.add(&y).map(drop)))
}

fn transpose_run(dev: &Device) -> wgtensor::Result<Run> {
    let x = tensor(dev, &[4096, 4096], DType::F32, 1)?;
    dev.sync()?;
    Ok(Box::new(move || x.transpose(0, 1)?.contiguous().map(drop)))
}

/// `x * 1.0` on CHURN; with `churn`, set-up first allocates, syncs and frees a working set of
/// CHURN_TENSORS tensors of the same size (past 1 GiB), as a training step's activations do.
fn churn_run(dev: &Device, churn: bool) -> wgtensor::Result<Run> {
    let x = tensor(dev, &CHURN, DType::F32, 1)?;
    if churn {
        let set = (0..CHURN_TENSORS)
            .map(|_| Tensor::zeros(dev, &CHURN, DType::F32))
            .collect::<wgtensor::Result<Vec<_>>>()?;
        dev.sync()?;
        drop(set);
    }
    dev.sync()?;
    Ok(Box::new(move || x.mul_scalar(1.0).map(drop)))
}

/// [n x n] x [n x n] f16 on a second device opened without `DeviceOptions::cooperative_matrix`:
/// the FMA kernels (`gemm_wg`) where the default device runs f16 on tensor cores, so one run
/// times both; the run syncs that device itself.
fn fma_f16_gemm_run(_: &Device, n: usize) -> wgtensor::Result<Run> {
    let dev = crate::open_device(wgtensor::DeviceOptions {
        cooperative_matrix: false,
        ..crate::device_options()
    })?;
    let mut run = gemm_case(&dev, &[n, n], &[n, n], DType::F16, None)?;
    Ok(Box::new(move || {
        run()?;
        dev.sync()
    }))
}

/// Greedy decoding's argmax over a 150k vocabulary for 64 rows (one workgroup per row would
/// leave most of a GPU idle: the plan splits each row into segments).
const VOCAB: [usize; 2] = [64, 151_936];
/// softmax over one row of 2^24 values (split into segments on a GPU).
const SOFTMAX_ROW: usize = 1 << 24;
/// Group norm of one image as a diffusion UNet runs it: 512 channels of 64 x 64 in 32 groups
/// (32 rows of 64k values: split into segments on a GPU).
const GROUP_NORM: [usize; 4] = [1, 512, 64, 64];
/// A scatter_add with a per-column index: 2^20 x 64 messages into 2^16 x 64 nodes along dim 0.
const SCATTER_SRC: [usize; 2] = [1 << 20, 64];
const SCATTER_NODES: usize = 1 << 16;

fn argmax_run(dev: &Device) -> wgtensor::Result<Run> {
    let x = tensor(dev, &VOCAB, DType::F32, 1)?;
    dev.sync()?;
    Ok(Box::new(move || x.argmax(-1, false).map(drop)))
}

fn softmax_row_run(dev: &Device) -> wgtensor::Result<Run> {
    let x = tensor(dev, &[1, SOFTMAX_ROW], DType::F32, 1)?;
    dev.sync()?;
    Ok(Box::new(move || x.softmax(-1).map(drop)))
}

fn group_norm_run(dev: &Device) -> wgtensor::Result<Run> {
    let x = tensor(dev, &GROUP_NORM, DType::F32, 1)?;
    let w = tensor(dev, &[GROUP_NORM[1]], DType::F32, 2)?;
    let b = tensor(dev, &[GROUP_NORM[1]], DType::F32, 3)?;
    dev.sync()?;
    Ok(Box::new(move || {
        wgtensor::ops::group_norm(&x, 32, Some(&w), Some(&b), 1e-5).map(drop)
    }))
}

/// The depthwise weight gradient of `gpu/conv2d_depthwise` (K = N OH OW = 100352 per weight).
fn depthwise_wgrad_run(dev: &Device) -> wgtensor::Result<Run> {
    use wgtensor::ops::{conv2d_backward_weight, Conv2dOptions, Padding};
    let dy = tensor(dev, &CONV_XG, DType::F32, 4)?;
    let x = tensor(dev, &CONV_XG, DType::F32, 1)?;
    let o = Conv2dOptions {
        padding: Padding::uniform(1),
        groups: CONV_XG[1],
        ..Default::default()
    };
    dev.sync()?;
    Ok(Box::new(move || {
        conv2d_backward_weight(&dy, &x, [3, 3], &o).map(drop)
    }))
}

fn scatter_run(dev: &Device) -> wgtensor::Result<Run> {
    let n: usize = SCATTER_SRC.iter().product();
    // The high 16 bits of a multiplicative hash: every column hits all 2^16 nodes, at most 20
    // times each. (The low bits, taken before, hit 1024 nodes per column 1024 times each, so
    // the case timed the serial sort of 1024-long buckets rather than a GNN's scatter.)
    let ids: Vec<i32> = (0..n)
        .map(|i| ((((i as u64 * 2_654_435_761) % (1 << 32)) >> 16) % SCATTER_NODES as u64) as i32)
        .collect();
    let idx = Tensor::from_slice(dev, &ids, &SCATTER_SRC)?;
    let src = tensor(dev, &SCATTER_SRC, DType::F32, 2)?;
    let base = Tensor::zeros(dev, &[SCATTER_NODES, SCATTER_SRC[1]], DType::F32)?;
    dev.sync()?;
    Ok(Box::new(move || base.scatter_add(0, &idx, &src).map(drop)))
}

/// One small op and a sync: the round trip a synced single op costs.
fn sync_op_run(dev: &Device) -> wgtensor::Result<Run> {
    let x = tensor(dev, &[1 << 20], DType::F32, 1)?;
    let d = dev.clone();
    dev.sync()?;
    Ok(Box::new(move || {
        x.mul_scalar(1.5)?;
        d.sync()
    }))
}

pub fn cases() -> Vec<Case> {
    let g = |m: usize, n: usize, k: usize, b: usize| 2.0 * (m * n * k * b) as f64;
    let gemm =
        |a: [usize; 2], b: [usize; 2], dtype| move |d: &Device| gemm_case(d, &a, &b, dtype, None);
    // A product forced on one tile (`gemm_with_kernel`), for A/B against the plan.
    let tile = |a: &'static [usize], b: &'static [usize], kernel| {
        move |d: &Device| gemm_kernel_case(d, a, b, kernel)
    };
    use GemmKernel::{WgTiled, WgTiled128, WgTiled128x128};
    const SQ4096: [usize; 2] = [4096, 4096];
    const SQ8192: [usize; 2] = [8192, 8192];
    const B512: [usize; 3] = [64, 512, 512];
    const SK_A: [usize; 2] = [256, 65536];
    const SK_B: [usize; 2] = [65536, 256];
    let f32b = |n: f64| 4.0 * n;
    let (n20, n26) = (1usize << 20, 1usize << 26);
    vec![
        Case::new("gpu/fma_peak", |d| fma_sized(d, FMA_WORK)).flops(fma_flops(FMA_WORK)),
        Case::new("gpu/copy_bw", |d| copy_run(d, COPY_BYTES)).bytes(2.0 * COPY_BYTES as f64),
        // Issue 25: GEMM and convolution.
        Case::new(
            "gpu/gemm_4096",
            gemm([4096, 4096], [4096, 4096], DType::F32),
        )
        .flops(g(4096, 4096, 4096, 1)),
        Case::new(
            "gpu/gemm_8192",
            gemm([8192, 8192], [8192, 8192], DType::F32),
        )
        .flops(g(8192, 8192, 8192, 1)),
        Case::new(
            "gpu/gemm_4096_f16",
            gemm([4096, 4096], [4096, 4096], DType::F16),
        )
        .flops(g(4096, 4096, 4096, 1))
        .f16_only(),
        Case::new(
            "gpu/gemm_8192_f16",
            gemm([8192, 8192], [8192, 8192], DType::F16),
        )
        .flops(g(8192, 8192, 8192, 1))
        .f16_only(),
        Case::new("gpu/gemm_4096_f16_fma", |d| fma_f16_gemm_run(d, 4096))
            .flops(g(4096, 4096, 4096, 1))
            .f16_only(),
        Case::new("gpu/gemm_8192_f16_fma", |d| fma_f16_gemm_run(d, 8192))
            .flops(g(8192, 8192, 8192, 1))
            .f16_only(),
        Case::new("gpu/bgemm_64x512", |d| {
            gemm_case(d, &[64, 512, 512], &[64, 512, 512], DType::F32, None)
        })
        .flops(g(512, 512, 512, 64)),
        // The products forced on one tile (the planner's 128 x 64, split 64 x 64 and 128 x 64,
        // and the 128 x 128 tile no plan takes), for A/B against the plan in one run.
        Case::new(
            "gpu/gemm_4096_tile128x64",
            tile(&SQ4096, &SQ4096, WgTiled128),
        )
        .flops(g(4096, 4096, 4096, 1)),
        Case::new(
            "gpu/bgemm_64x512_tile128x64",
            tile(&B512, &B512, WgTiled128),
        )
        .flops(g(512, 512, 512, 64)),
        Case::new(
            "gpu/gemm_4096_tile128x128",
            tile(&SQ4096, &SQ4096, WgTiled128x128),
        )
        .flops(g(4096, 4096, 4096, 1)),
        Case::new(
            "gpu/gemm_8192_tile128x128",
            tile(&SQ8192, &SQ8192, WgTiled128x128),
        )
        .flops(g(8192, 8192, 8192, 1)),
        Case::new(
            "gpu/bgemm_64x512_tile128x128",
            tile(&B512, &B512, WgTiled128x128),
        )
        .flops(g(512, 512, 512, 64)),
        Case::new(
            "gpu/gemm_splitk_256x65536_tile128x128",
            tile(&SK_A, &SK_B, WgTiled128x128),
        )
        .flops(g(256, 256, 65536, 1)),
        Case::new(
            "gpu/gemm_splitk_256x65536_tile128x64",
            tile(&SK_A, &SK_B, WgTiled128),
        )
        .flops(g(256, 256, 65536, 1)),
        Case::new(
            "gpu/gemm_splitk_256x65536_tile64x64",
            tile(&SK_A, &SK_B, WgTiled),
        )
        .flops(g(256, 256, 65536, 1)),
        Case::new(
            "gpu/gemm_splitk_256x65536",
            gemm([256, 65536], [65536, 256], DType::F32),
        )
        .flops(g(256, 256, 65536, 1)),
        Case::new("gpu/conv2d", |d| conv2d_run(d, CONV_X, 1)).flops(conv2d_flops_of(CONV_X, 1)),
        Case::new("gpu/conv2d_wgrad", |d| wgrad_run(d, CONV_X)).flops(conv2d_flops_of(CONV_X, 1)),
        Case::new("gpu/conv2d_grouped", |d| conv2d_run(d, CONV_XG, 32))
            .flops(conv2d_flops_of(CONV_XG, 32)),
        Case::new("gpu/conv2d_depthwise", |d| conv2d_run(d, CONV_XG, 256))
            .flops(conv2d_flops_of(CONV_XG, 256)),
        // Issue 26: bandwidth, allocation, recurrent and latency cases.
        Case::new("gpu/map_2e20", move |d| map_run(d, n20)).bytes(f32b(2.0 * n20 as f64)),
        Case::new("gpu/map_2e26", move |d| map_run(d, n26)).bytes(f32b(2.0 * n26 as f64)),
        Case::new("gpu/add_2e20", move |d| add_run(d, n20)).bytes(f32b(3.0 * n20 as f64)),
        Case::new("gpu/add_2e26", move |d| add_run(d, n26)).bytes(f32b(3.0 * n26 as f64)),
        Case::new("gpu/sum_2e26", move |d| sum_run(d, n26)).bytes(f32b(n26 as f64)),
        Case::new("gpu/transpose_contig_4096", transpose_run).bytes(f32b(2.0 * 4096.0 * 4096.0)),
        Case::new("gpu/churn", |d| churn_run(d, true)).bytes(f32b(2.0 * numel(&CHURN))),
        Case::new("gpu/churn_steady", |d| churn_run(d, false)).bytes(f32b(2.0 * numel(&CHURN))),
        Case::new("gpu/batchnorm_train", |d| bn_train_run(d, BN)).bytes(f32b(2.0 * numel(&BN))),
        Case::new("gpu/lstm_h512_t100", |d| {
            rnn_forward_run(d, RnnKind::Lstm, rnn(100))
        })
        .flops(rnn_flops_of(rnn(100), 4)),
        Case::new("gpu/gru_h512_t100", |d| {
            rnn_forward_run(d, RnnKind::Gru, rnn(100))
        })
        .flops(rnn_flops_of(rnn(100), 3)),
        Case::new("gpu/lstm_h512_t100_train", |d| lstm_train_run(d, rnn(100)))
            .flops(3.0 * rnn_flops_of(rnn(100), 4)),
        Case::new("gpu/lstm_h512_t1", |d| {
            rnn_forward_run(d, RnnKind::Lstm, rnn(1))
        })
        .flops(rnn_flops_of(rnn(1), 4)),
        Case::new("gpu/lstm_h512_t10", |d| {
            rnn_forward_run(d, RnnKind::Lstm, rnn(10))
        })
        .flops(rnn_flops_of(rnn(10), 4)),
        // Hidden sizes around the sequence kernel's limit (`seq_shape`): T 32, B 16 is
        // lstm_train_step's layer; one layer forward, and that layer's training pass.
        Case::new("gpu/lstm_h64_b16_t32", |d| {
            rnn_forward_run(d, RnnKind::Lstm, (32, 16, 64, 64))
        })
        .flops(rnn_flops_of((32, 16, 64, 64), 4)),
        Case::new("gpu/lstm_h96_b64_t32", |d| {
            rnn_forward_run(d, RnnKind::Lstm, (32, 64, 96, 96))
        })
        .flops(rnn_flops_of((32, 64, 96, 96), 4)),
        Case::new("gpu/lstm_h128_b16_t32", |d| {
            rnn_forward_run(d, RnnKind::Lstm, (32, 16, 128, 128))
        })
        .flops(rnn_flops_of((32, 16, 128, 128), 4)),
        Case::new("gpu/lstm_h128_b256_t32", |d| {
            rnn_forward_run(d, RnnKind::Lstm, (32, 256, 128, 128))
        })
        .flops(rnn_flops_of((32, 256, 128, 128), 4)),
        Case::new("gpu/lstm_h128_b16_t32_train", |d| {
            lstm_train_run(d, (32, 16, 128, 128))
        })
        .flops(3.0 * rnn_flops_of((32, 16, 128, 128), 4)),
        Case::new("gpu/sync_op", sync_op_run),
        // The split plans for rows too few to fill a GPU, and the bucketed scatter.
        Case::new("gpu/argmax_vocab", argmax_run).bytes(f32b(numel(&VOCAB))),
        Case::new("gpu/softmax_row_2e24", softmax_row_run).bytes(f32b(2.0 * SOFTMAX_ROW as f64)),
        Case::new("gpu/group_norm_1img", group_norm_run).bytes(f32b(2.0 * numel(&GROUP_NORM))),
        Case::new("gpu/conv2d_depthwise_wgrad", depthwise_wgrad_run)
            .flops(conv2d_flops_of(CONV_XG, 256)),
        Case::new("gpu/scatter_add_general", scatter_run).bytes(f32b(
            2.0 * numel(&SCATTER_SRC) + numel(&[SCATTER_NODES, SCATTER_SRC[1]]),
        )),
    ]
}
