//! Batch-norm conformance: `batch_norm_inference` (every fused activation),
//! `batch_norm_train` (output, saved statistics, in-place running statistics for every momentum
//! mode including PyTorch's cumulative average) and `batch_norm_backward`, for inputs
//! `[N, C]`, `[N, C, L]` and `[N, C, H, W]` (contiguous, offset and strided views), f32 and
//! f16, against the f64 reference (two-pass statistics); plus data with a mean of 1e4 and a
//! spread of 1e-2, one value per channel where that is legal, finite differences of the GPU
//! forward against the GPU backward, and bitwise reproducibility.
//!
//! Error model (u = 2^-24 = EPS32 / 2). The kernels' reductions are chains of f32 roundings:
//! a lane's Welford update or running sum over its `l = chunk / wg` groups, the merge of a
//! group's components, on GPUs the workgroup's tree merge of its lanes (log2 wg steps), then the
//! finalize pass's sequential merge of `chunks * parts` partials (see `ops::batchnorm::plan`):
//! `n = l + chunks * parts + log2(wg) [GPUs] + 3` steps along any path. The kernel shifts
//! every value by a pivot value of its channel, so with `R = max |x - mean|` per channel the
//! shifted values, their running means and the differences Welford forms stay below 4R:
//! - mean: a Welford step `m += (v - m) / k` adds at most 14 u R of new error and damps the old
//!   by (1 - 1/k), so a lane's mean errs by at most 7 (l + 1) u R; Chan's merges average their
//!   inputs' errors and add 3 u R each; hence `e_mean = 4 n EPS32 R` (8 n u R), plus the final
//!   rounding of pivot + relative mean (half an ulp of the mean);
//! - variance: M2 sums products below 16 R^2 along the same chains and inherits the means'
//!   errors to first order (4R times 7 l u R per value), so `e_var = 24 n EPS32 R^2`. Neither
//!   bound grows with the mean's magnitude: data with mean 1e4 and spread 1e-2 gets ~1e-9 where
//!   E[x^2] - E[x]^2 in f32 would be off by ~6;
//! - invstd = inverseSqrt(var + eps): relative `0.5 e_var / (var + eps)` plus 3 ulp (WGSL
//!   inverseSqrt 2 ulp, the add);
//! - y = (x - pivot) * scale + shift': `|g| invstd e_mean + |g (x - mean)| invstd rel_invstd`
//!   plus four roundings of values below `|g| invstd (|x - mean| + 2R) + |b|`;
//! - running statistics `(1 - f) r + f s`: `f` times the statistic's bound plus three roundings;
//! - inference `(x - rm) * g inverseSqrt(rv + eps) + b`: scale 3 ulp relative, 4 roundings,
//!   then the activation (Lipschitz constant times the input error plus the activation's own
//!   f32 bound, `elementwise::unary_err32`, as in the GEMM epilogue tests);
//! - backward: the sums S1 = sum dy and S2 = sum dy (x - mean) err by `n EPS32 sum|dy|` and
//!   `(n + 2) EPS32 sum|dy (x - mean)|` (two more roundings per term); dgamma = invstd S2 one
//!   more rounding; dx = a dy + b (x - mean) + c propagates the sums' errors through b and c and
//!   adds at most seven roundings (coefficients, subtraction, products, adds) of
//!   `|a dy| + |b (x - mean)| + |c|`, bounded by 6 EPS32 (12 u) of it. Small-integer dy, x and mean with a
//!   power-of-two invstd make S1 and S2 (integers below 2^24) and so dbeta and dgamma exact:
//!   tolerance 0, which checks that every value is summed exactly once.
//!
//! f16: inputs and parameters are f16 values (the reference uses exactly those), arithmetic is
//! f32 as above, and f16 outputs add one f16 ulp (`check::out_round`); saved statistics are f32.

use proptest::prelude::*;
use wgtensor::ops::batchnorm::plan;
use wgtensor::ops::{
    batch_norm_backward, batch_norm_inference, batch_norm_train, Activation, BatchNormGrads,
    BatchNormOptions, BatchNormSaved, BatchNormState, UnaryOp,
};
use wgtensor::{DType, Device, Tensor};

use crate::check::{compare, compare_bits, fetch_async, ok, out_round, ulp, EPS32};
use crate::common::reference::{self, BnStats};
use crate::common::{self, device, require_f16};
use crate::elementwise::unary_err32;
#[cfg(not(target_arch = "wasm32"))]
use crate::strategies::run_async;
use crate::strategies::{dim, operand_of_shape, Dist, Operand, ViewKind};

// Case counts: each case is a few dispatches and readbacks; f16 shares the code paths.
const CASES_F32: u32 = 40;
const CASES_F16: u32 = 16;
const CASES_LARGE_F32: u32 = 6;
const CASES_LARGE_F16: u32 = 3;

const ACTIVATIONS: [Activation; 5] = [
    Activation::None,
    Activation::Relu,
    Activation::Gelu,
    Activation::Sigmoid,
    Activation::Tanh,
];
const EPSILONS: [f32; 4] = [1e-5, 1e-3, 0.1, 1.0];
const MOMENTA: [Option<f32>; 5] = [Some(0.1), Some(0.0), Some(1.0), Some(0.37), None];

// ---------------------------------------------------------------------------------------------
// Shapes, values, operands
// ---------------------------------------------------------------------------------------------

/// `[N, C]`, `[N, C, L]`, `[N, C, H, W]` with small dims (size 1 often, so one value per channel
/// occurs), N up to 6 and C up to 5.
pub(crate) fn small_shape() -> impl Strategy<Value = Vec<usize>> + Clone {
    (1usize..=6, 1usize..=5, prop::collection::vec(dim(), 0..=2)).prop_map(|(n, c, rest)| {
        let mut s = vec![n, c];
        s.extend(rest);
        s
    })
}

/// Shapes whose channels span several chunks: vec4 groups (S % 4 == 0, more than 16k values
/// per channel) and single values (odd S or [N, C], more than 4k values per channel), with
/// partial last chunks and partial last rows of lanes.
pub(crate) fn large_shape() -> BoxedStrategy<Vec<usize>> {
    prop_oneof![
        (2usize..=4, 1usize..=3, 60usize..=75, 17usize..=21).prop_map(|(n, c, h, w)| vec![
            n,
            c,
            h,
            4 * w
        ]),
        (3usize..=5, 1usize..=3, 900usize..=1400).prop_map(|(n, c, l)| vec![n, c, 2 * l + 1]),
        (4100usize..=9000, 1usize..=4).prop_map(|(n, c)| vec![n, c]),
    ]
    .boxed()
}

pub(crate) fn x_dists() -> impl Strategy<Value = Dist> + Clone {
    prop_oneof![
        Just(Dist::SmallInt(-8, 8)),
        Just(Dist::Uniform(-10.0, 10.0)),
        Just(Dist::SignedLog(-3.0, 2.0)),
        // Large mean, tiny spread: 1e4 + 1e-2 * U(-1, 1).
        Just(Dist::Uniform(1e4 - 1e-2, 1e4 + 1e-2)),
    ]
}

/// A large mean and a small spread an f16 can hold: 1500 +- 4 (f16 spacing there is 1).
const F16_LARGE_MEAN: Dist = Dist::Uniform(1496.0, 1504.0);

pub(crate) fn x_dists_f16() -> impl Strategy<Value = Dist> + Clone {
    prop_oneof![
        Just(Dist::SmallInt(-8, 8)),
        Just(Dist::Uniform(-10.0, 10.0)),
        Just(Dist::SignedLog(-3.0, 1.5)),
        Just(F16_LARGE_MEAN),
    ]
}

/// Per-channel vectors are read through offsets (sliced views) and stride 0 (broadcast).
fn param_kind() -> impl Strategy<Value = ViewKind> + Clone {
    prop_oneof![
        3 => Just(ViewKind::Contiguous),
        1 => Just(ViewKind::Sliced),
        1 => Just(ViewKind::Broadcast),
    ]
}

/// Running statistics are written in place: packed or offset views only.
fn running_kind() -> impl Strategy<Value = ViewKind> + Clone {
    prop_oneof![3 => Just(ViewKind::Contiguous), 1 => Just(ViewKind::Sliced)]
}

/// Inputs: any view kind (strided ones are packed first; offsets are read in place).
fn x_kind() -> impl Strategy<Value = ViewKind> + Clone {
    prop_oneof![
        4 => Just(ViewKind::Contiguous),
        1 => Just(ViewKind::Permuted),
        2 => Just(ViewKind::Sliced),
        1 => Just(ViewKind::Broadcast),
    ]
}

fn opt_param(dtype: DType, c: usize, dist: Dist) -> impl Strategy<Value = Option<Operand>> {
    prop::option::weighted(
        0.8,
        operand_of_shape(dtype, vec![c], param_kind(), Just(dist)),
    )
}

fn values(o: &Option<Operand>) -> Option<Vec<f64>> {
    o.as_ref().map(Operand::values)
}

/// Longest chain of roundings of the kernels' reductions (module doc).
fn chain(dev: &Device, shape: &[usize], inputs: &[&Tensor]) -> f64 {
    // Strided inputs are packed (offset 0); contiguous ones are read at their offset.
    let offsets: Vec<usize> = inputs
        .iter()
        .map(|t| {
            if t.is_contiguous() {
                t.layout().offset()
            } else {
                0
            }
        })
        .collect();
    let pl = plan(dev, shape, &offsets).unwrap();
    // Lanes merged in workgroup memory (GPUs) add log2(wg) steps to every chain.
    let tree = if pl.parts() == 1 { pl.wg.ilog2() } else { 0 };
    (pl.chunk / pl.wg + pl.chunks * pl.parts() + tree + 3) as f64
}

fn channel_of(i: usize, shape: &[usize]) -> usize {
    let (_, c, s) = reference::bn_dims(shape);
    (i / s) % c
}

// ---------------------------------------------------------------------------------------------
// Inference
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub(crate) struct InferProblem {
    x: Operand,
    running_mean: Operand,
    running_var: Operand,
    gamma: Option<Operand>,
    beta: Option<Operand>,
    eps: f32,
    act: Activation,
}

pub(crate) fn infer_problem(
    dtype: DType,
    shapes: BoxedStrategy<Vec<usize>>,
    dists: BoxedStrategy<Dist>,
) -> impl Strategy<Value = InferProblem> {
    (shapes, dists).prop_flat_map(move |(shape, dist)| {
        let c = shape[1];
        // Running statistics near the data: the large-mean inputs get a mean near theirs and a
        // variance near their spread's, so the output stays O(1) and its precision shows.
        let (rm, rv) = if dist == Dist::Uniform(1e4 - 1e-2, 1e4 + 1e-2) {
            (
                Dist::Uniform(1e4 - 1e-2, 1e4 + 1e-2),
                Dist::PosLog(-5.0, -4.0),
            )
        } else if dist == F16_LARGE_MEAN {
            (Dist::Uniform(1498.0, 1502.0), Dist::PosLog(0.0, 1.0))
        } else {
            (Dist::Uniform(-5.0, 5.0), Dist::PosLog(-2.0, 1.5))
        };
        (
            operand_of_shape(dtype, shape.clone(), x_kind(), Just(dist)),
            operand_of_shape(dtype, vec![c], param_kind(), Just(rm)),
            operand_of_shape(dtype, vec![c], param_kind(), Just(rv)),
            opt_param(dtype, c, Dist::Uniform(-2.0, 2.0)),
            opt_param(dtype, c, Dist::Uniform(-5.0, 5.0)),
            prop::sample::select(&EPSILONS[..]),
            prop::sample::select(&ACTIVATIONS[..]),
        )
            .prop_map(|(x, running_mean, running_var, gamma, beta, eps, act)| {
                InferProblem {
                    x,
                    running_mean,
                    running_var,
                    gamma,
                    beta,
                    eps,
                    act,
                }
            })
    })
}

/// The f32 error bound of the activation of a value `x` known to within `e`.
fn act_err32(act: Activation, x: f64, want: f64, e: f64) -> f64 {
    let (lipschitz, op) = match act {
        Activation::None => return e,
        Activation::Relu => (1.0, UnaryOp::Relu),
        Activation::Gelu => (1.13, UnaryOp::Gelu),
        Activation::Sigmoid => (0.25, UnaryOp::Sigmoid),
        Activation::Tanh => (1.0, UnaryOp::Tanh),
    };
    lipschitz * e + unary_err32(op, x.abs() + e, want.abs() + lipschitz * e)
}

pub(crate) async fn check_inference(p: &InferProblem) -> Result<(), TestCaseError> {
    check_inference_on(device(), p).await
}

/// [`check_inference`] on `dev`.
pub(crate) async fn check_inference_on(
    dev: &Device,
    p: &InferProblem,
) -> Result<(), TestCaseError> {
    let what = format!("batch_norm_inference({:?}, eps {})", p.act, p.eps);
    let gamma = p.gamma.as_ref().map(|o| o.tensor(dev));
    let beta = p.beta.as_ref().map(|o| o.tensor(dev));
    let y = ok(
        &what,
        batch_norm_inference(
            &p.x.tensor(dev),
            &p.running_mean.tensor(dev),
            &p.running_var.tensor(dev),
            &BatchNormOptions {
                weight: gamma.as_ref(),
                bias: beta.as_ref(),
                eps: p.eps.into(),
                activation: p.act,
            },
        ),
    )?;
    prop_assert_eq!(y.dtype(), p.x.dtype);
    let xs = p.x.values();
    let (rm, rv) = (p.running_mean.values(), p.running_var.values());
    let (g, b) = (values(&p.gamma), values(&p.beta));
    let shape = &p.x.shape;
    let (want, pre) = reference::batch_norm_inference(
        &xs,
        shape,
        &rm,
        &rv,
        g.as_deref(),
        b.as_deref(),
        p.eps as f64,
        p.act,
    );
    let got = fetch_async(&what, &y, shape).await?;
    compare(&what, shape, &got, &want, |i| {
        let c = channel_of(i, shape);
        let gc = g.as_ref().map_or(1.0, |g| g[c]);
        let bc = b.as_ref().map_or(0.0, |b| b[c]);
        let scale = (gc / (rv[c] + p.eps as f64).sqrt()).abs();
        let d = (xs[i] - rm[c]).abs();
        let e = 4.0 * EPS32 * d * scale + 2.0 * EPS32 * (pre[i].abs() + bc.abs());
        out_round(p.x.dtype, want[i], act_err32(p.act, pre[i], want[i], e))
    })
}

#[test]
fn batchnorm_inference_f32() {
    let dists = x_dists().boxed();
    run_async(
        CASES_F32,
        infer_problem(DType::F32, small_shape().boxed(), dists),
        check_inference,
    );
}

#[test]
fn batchnorm_inference_f16() {
    require_f16(device());
    run_async(
        CASES_F16,
        infer_problem(DType::F16, small_shape().boxed(), x_dists_f16().boxed()),
        check_inference,
    );
}

#[test]
fn batchnorm_inference_large_f32() {
    run_async(
        CASES_LARGE_F32,
        infer_problem(DType::F32, large_shape(), x_dists().boxed()),
        check_inference,
    );
}

#[test]
fn batchnorm_inference_large_f16() {
    require_f16(device());
    run_async(
        CASES_LARGE_F16,
        infer_problem(DType::F16, large_shape(), x_dists_f16().boxed()),
        check_inference,
    );
}

// ---------------------------------------------------------------------------------------------
// Training forward and running statistics
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub(crate) struct TrainProblem {
    x: Operand,
    gamma: Option<Operand>,
    beta: Option<Operand>,
    /// Running mean and variance (absent: no state, nothing tracked).
    running: Option<(Operand, Operand)>,
    momentum: Option<f32>,
    /// `num_batches_tracked` before the call (the cumulative factor is 1 / (this + 1)).
    tracked: u64,
    eps: f32,
}

pub(crate) fn train_problem(
    dtype: DType,
    shapes: BoxedStrategy<Vec<usize>>,
    dists: BoxedStrategy<Dist>,
) -> impl Strategy<Value = TrainProblem> {
    let shapes = shapes.prop_filter("training needs more than one value per channel", |s| {
        s[0] * s[2..].iter().product::<usize>() > 1
    });
    (shapes, dists).prop_flat_map(move |(shape, dist)| {
        let c = shape[1];
        let running = (
            operand_of_shape(
                dtype,
                vec![c],
                running_kind(),
                Just(Dist::Uniform(-5.0, 5.0)),
            ),
            operand_of_shape(
                dtype,
                vec![c],
                running_kind(),
                Just(Dist::PosLog(-2.0, 1.5)),
            ),
        );
        (
            operand_of_shape(dtype, shape.clone(), x_kind(), Just(dist)),
            opt_param(dtype, c, Dist::Uniform(-2.0, 2.0)),
            opt_param(dtype, c, Dist::Uniform(-5.0, 5.0)),
            prop::option::weighted(0.8, running),
            prop::sample::select(&MOMENTA[..]),
            0u64..5,
            prop::sample::select(&EPSILONS[..]),
        )
            .prop_map(
                |(x, gamma, beta, running, momentum, tracked, eps)| TrainProblem {
                    x,
                    gamma,
                    beta,
                    running,
                    momentum,
                    tracked,
                    eps,
                },
            )
    })
}

/// Bounds of the statistics of one channel (module doc).
struct StatBounds {
    mean: f64,
    var: f64,
    /// Relative bound of invstd.
    invstd_rel: f64,
}

fn stat_bounds(st: &BnStats, c: usize, n: f64, eps: f64) -> StatBounds {
    let r = st.spread[c];
    let mean = 4.0 * n * EPS32 * r;
    let var = 24.0 * n * EPS32 * r * r;
    StatBounds {
        mean,
        var,
        invstd_rel: 0.5 * var / (st.var[c] + eps) + 3.0 * EPS32,
    }
}

/// Runs one training step on the device; returns (y, saved_mean, saved_invstd, state).
fn run_train(
    dev: &Device,
    p: &TrainProblem,
) -> wgtensor::Result<(Tensor, Tensor, Tensor, Option<BatchNormState>)> {
    let gamma = p.gamma.as_ref().map(|o| o.tensor(dev));
    let beta = p.beta.as_ref().map(|o| o.tensor(dev));
    let mut state = p.running.as_ref().map(|(m, v)| {
        let mut st =
            BatchNormState::from_tensors(m.tensor(dev), v.tensor(dev), p.momentum.map(f64::from));
        st.num_batches_tracked = p.tracked;
        st
    });
    let out = batch_norm_train(
        &p.x.tensor(dev),
        state.as_mut(),
        &BatchNormOptions {
            weight: gamma.as_ref(),
            bias: beta.as_ref(),
            eps: p.eps.into(),
            ..Default::default()
        },
    )?;
    let (y, mean, invstd) = (out.y, out.saved.mean().clone(), out.saved.invstd().clone());
    Ok((y, mean, invstd, state))
}

/// Bound of every output of the training forward (module doc), from the reference.
fn train_y_bounds(
    xs: &[f64],
    shape: &[usize],
    r: &reference::BnTrainRef,
    g: Option<&[f64]>,
    b: Option<&[f64]>,
    bounds: &[StatBounds],
) -> Vec<f64> {
    (0..xs.len())
        .map(|i| {
            let ch = channel_of(i, shape);
            let bd = &bounds[ch];
            let gi = g.map_or(1.0, |g| g[ch]).abs() * r.invstd[ch];
            let d = (xs[i] - r.stats.mean[ch]).abs();
            let bc = b.map_or(0.0, |b| b[ch]).abs();
            gi * bd.mean
                + gi * d * bd.invstd_rel
                + 4.0 * EPS32 * (gi * (d + 2.0 * r.stats.spread[ch]) + bc)
        })
        .collect()
}

pub(crate) async fn check_train(p: &TrainProblem) -> Result<(), TestCaseError> {
    check_train_on(device(), p).await
}

/// [`check_train`] on `dev`.
pub(crate) async fn check_train_on(dev: &Device, p: &TrainProblem) -> Result<(), TestCaseError> {
    let what = format!("batch_norm_train(eps {}, momentum {:?})", p.eps, p.momentum);
    let (y, smean, sinv, state) = ok(&what, run_train(dev, p))?;
    prop_assert_eq!(y.dtype(), p.x.dtype);
    prop_assert_eq!(smean.dtype(), DType::F32);
    prop_assert_eq!(sinv.dtype(), DType::F32);
    let shape = &p.x.shape;
    let c = shape[1];
    let xs = p.x.values();
    let (g, b) = (values(&p.gamma), values(&p.beta));
    let eps = p.eps as f64;
    let r = reference::batch_norm_train(&xs, shape, g.as_deref(), b.as_deref(), eps);
    let n = chain(dev, shape, &[&p.x.tensor(dev)]);
    let bounds: Vec<StatBounds> = (0..c).map(|ch| stat_bounds(&r.stats, ch, n, eps)).collect();

    let got = fetch_async("saved_mean", &smean, &[c]).await?;
    compare("saved_mean", &[c], &got, &r.stats.mean, |ch| {
        bounds[ch].mean + 0.5 * ulp(DType::F32, r.stats.mean[ch])
    })?;
    let got = fetch_async("saved_invstd", &sinv, &[c]).await?;
    compare("saved_invstd", &[c], &got, &r.invstd, |ch| {
        bounds[ch].invstd_rel * r.invstd[ch]
    })?;
    let e = train_y_bounds(&xs, shape, &r, g.as_deref(), b.as_deref(), &bounds);
    let got = fetch_async(&what, &y, shape).await?;
    compare(&what, shape, &got, &r.y, |i| {
        out_round(p.x.dtype, r.y[i], e[i])
    })?;

    let (Some((rm0, rv0)), Some(st)) = (&p.running, state) else {
        return Ok(());
    };
    prop_assert_eq!(st.num_batches_tracked, p.tracked + 1);
    let f = p
        .momentum
        .map_or(1.0 / (p.tracked + 1) as f64, |m| m as f64);
    let (rm0, rv0) = (rm0.values(), rv0.values());
    let (want_m, want_v) = reference::bn_running_update(&rm0, &rv0, &r.stats, f);
    let count = r.stats.count as f64;
    let got = fetch_async("running_mean", &st.running_mean, &[c]).await?;
    compare("running_mean", &[c], &got, &want_m, |ch| {
        let e = f * (bounds[ch].mean + 0.5 * ulp(DType::F32, r.stats.mean[ch]))
            + 3.0 * EPS32 * ((1.0 - f).abs() * rm0[ch].abs() + f * r.stats.mean[ch].abs());
        out_round(p.x.dtype, want_m[ch], e)
    })?;
    let got = fetch_async("running_var", &st.running_var, &[c]).await?;
    compare("running_var", &[c], &got, &want_v, |ch| {
        let vu = r.stats.var_unbiased[ch];
        let e = f * (bounds[ch].var * count / (count - 1.0) + 2.0 * EPS32 * vu)
            + 3.0 * EPS32 * ((1.0 - f).abs() * rv0[ch].abs() + f * vu);
        out_round(p.x.dtype, want_v[ch], e)
    })
}

#[test]
fn batchnorm_train_f32() {
    run_async(
        CASES_F32,
        train_problem(DType::F32, small_shape().boxed(), x_dists().boxed()),
        check_train,
    );
}

#[test]
fn batchnorm_train_f16() {
    require_f16(device());
    run_async(
        CASES_F16,
        train_problem(DType::F16, small_shape().boxed(), x_dists_f16().boxed()),
        check_train,
    );
}

#[test]
fn batchnorm_train_large_f32() {
    run_async(
        CASES_LARGE_F32,
        train_problem(DType::F32, large_shape(), x_dists().boxed()),
        check_train,
    );
}

#[test]
fn batchnorm_train_large_f16() {
    require_f16(device());
    run_async(
        CASES_LARGE_F16,
        train_problem(DType::F16, large_shape(), x_dists_f16().boxed()),
        check_train,
    );
}

/// Mean 1e4, spread 1e-2 (f32) and 1500 +- 4 (f16) on every rank, one chunk and several, the
/// vec4 and the single-value path: the two-pass f64 reference and the tight bounds of the module
/// doc (which do not grow with the mean) must hold.
pub(crate) async fn large_mean_cases(dtype: DType) {
    let dist = match dtype {
        DType::F32 | DType::I32 => Dist::Uniform(1e4 - 1e-2, 1e4 + 1e-2),
        DType::F16 => F16_LARGE_MEAN,
    };
    let shapes: [&[usize]; 7] = [
        &[64, 3],
        &[5000, 2],
        &[4, 3, 9],
        &[3, 2, 2001],
        &[4, 3, 5, 8],
        &[2, 2, 64, 160],
        &[3, 2, 33, 33],
    ];
    for (k, shape) in shapes.into_iter().enumerate() {
        let c = shape[1];
        let param =
            |d: Dist, seed: u64| Some(Operand::new(dtype, &[c], ViewKind::Contiguous, d, seed));
        let p = TrainProblem {
            x: Operand::new(dtype, shape, ViewKind::Contiguous, dist, 11 + k as u64),
            gamma: param(Dist::Uniform(0.5, 2.0), 1),
            beta: param(Dist::Uniform(-1.0, 1.0), 2),
            running: Some((
                Operand::new(
                    dtype,
                    &[c],
                    ViewKind::Contiguous,
                    Dist::Uniform(-1.0, 1.0),
                    3,
                ),
                Operand::new(
                    dtype,
                    &[c],
                    ViewKind::Contiguous,
                    Dist::PosLog(-1.0, 0.0),
                    4,
                ),
            )),
            momentum: Some(0.1),
            tracked: 0,
            eps: 1e-5,
        };
        if let Err(e) = check_train(&p).await {
            panic!("{e}\nproblem: {p:#?}");
        }
    }
}

#[test]
fn batchnorm_large_mean_f32() {
    pollster::block_on(large_mean_cases(DType::F32));
}

#[test]
fn batchnorm_large_mean_f16() {
    require_f16(device());
    pollster::block_on(large_mean_cases(DType::F16));
}

/// More channels than one workgroup of the per-channel passes holds (64): C = 130 on the vec4
/// and the single-value path, for all three ops.
#[test]
fn batchnorm_many_channels() {
    let dt = DType::F32;
    for (k, shape) in [[3usize, 130, 4], [5, 130, 3]].into_iter().enumerate() {
        let c = shape[1];
        let seed = 500 + 10 * k as u64;
        let op =
            |shape: &[usize], d: Dist, s: u64| Operand::new(dt, shape, ViewKind::Contiguous, d, s);
        let g = Some(op(&[c], Dist::Uniform(-2.0, 2.0), seed + 1));
        let b = Some(op(&[c], Dist::Uniform(-1.0, 1.0), seed + 2));
        let x = op(&shape, Dist::Uniform(-3.0, 3.0), seed);
        let train = TrainProblem {
            x: x.clone(),
            gamma: g.clone(),
            beta: b.clone(),
            running: Some((
                op(&[c], Dist::Uniform(-1.0, 1.0), seed + 3),
                op(&[c], Dist::PosLog(-1.0, 0.5), seed + 4),
            )),
            momentum: Some(0.25),
            tracked: 2,
            eps: 1e-3,
        };
        let infer = InferProblem {
            x: x.clone(),
            running_mean: op(&[c], Dist::Uniform(-1.0, 1.0), seed + 3),
            running_var: op(&[c], Dist::PosLog(-1.0, 0.5), seed + 4),
            gamma: g.clone(),
            beta: b,
            eps: 1e-3,
            act: Activation::Sigmoid,
        };
        let backward = BackwardProblem {
            dy: op(&shape, Dist::SmallInt(-8, 8), seed + 5),
            x: op(&shape, Dist::SmallInt(-8, 8), seed + 6),
            mean: Operand::new(
                DType::F32,
                &[c],
                ViewKind::Contiguous,
                Dist::SmallInt(-3, 3),
                seed + 7,
            ),
            invstd: (0..c).map(|i| [0.25, 0.5, 1.0][i % 3]).collect(),
            gamma: g,
        };
        let result = pollster::block_on(async {
            check_train(&train).await?;
            check_inference(&infer).await?;
            check_backward(&backward).await
        });
        if let Err(e) = result {
            panic!("{e}\nshape {shape:?}");
        }
    }
}

/// momentum None: PyTorch's cumulative moving average over several batches. With the initial
/// state (mean 0, var 1) the factors 1, 1/2, 1/3 make the running statistics the plain average
/// of the batches' mean and unbiased variance; num_batches_tracked counts the calls.
pub(crate) async fn cumulative_average(dtype: DType) {
    let dev = device();
    let shape = [6usize, 3, 5];
    let mut st = BatchNormState::new(dev, 3, dtype).unwrap();
    st.momentum = None;
    let mut means = [0.0; 3];
    let mut vars = [0.0; 3];
    let batches = 3;
    for k in 0..batches {
        let x = Operand::new(
            dtype,
            &shape,
            ViewKind::Contiguous,
            Dist::Uniform(-3.0, 5.0),
            40 + k,
        );
        batch_norm_train(&x.tensor(dev), Some(&mut st), &BatchNormOptions::default()).unwrap();
        let s = reference::bn_stats(&x.values(), &shape);
        for c in 0..3 {
            means[c] += s.mean[c] / batches as f64;
            vars[c] += s.var_unbiased[c] / batches as f64;
        }
    }
    assert_eq!(st.num_batches_tracked, batches);
    assert_eq!(st.momentum, None);
    // Values below 8 and variances below 10: a few f32 roundings per update (module doc) over
    // three updates stay below 64 ulp of 16; f16 adds one f16 ulp per stored update.
    let tol = |want: f64| match dtype {
        DType::F32 | DType::I32 => 64.0 * EPS32 * 16.0,
        DType::F16 => 3.0 * ulp(DType::F16, want.abs() + 1.0) + 64.0 * EPS32 * 16.0,
    };
    let got = common::download_async(&st.running_mean).await.unwrap();
    for c in 0..3 {
        assert!(
            (got[c] - means[c]).abs() <= tol(means[c]),
            "running_mean[{c}] = {}, want {}",
            got[c],
            means[c]
        );
    }
    let got = common::download_async(&st.running_var).await.unwrap();
    for c in 0..3 {
        assert!(
            (got[c] - vars[c]).abs() <= tol(vars[c]),
            "running_var[{c}] = {}, want {}",
            got[c],
            vars[c]
        );
    }
}

#[test]
fn batchnorm_cumulative_average_f32() {
    pollster::block_on(cumulative_average(DType::F32));
}

#[test]
fn batchnorm_cumulative_average_f16() {
    require_f16(device());
    pollster::block_on(cumulative_average(DType::F16));
}

/// A failing call leaves the state as it was: no update recorded, no batch counted.
#[test]
fn batchnorm_train_error_leaves_state_untouched() {
    let dev = device();
    let mut st = BatchNormState::new(dev, 3, DType::F32).unwrap();
    st.num_batches_tracked = 7;
    let x = Tensor::from_slice(dev, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    let bad_gamma = Tensor::from_slice(dev, &[1.0f32; 4], &[4]).unwrap();
    assert!(batch_norm_train(
        &x,
        Some(&mut st),
        &BatchNormOptions {
            weight: Some(&bad_gamma),
            ..Default::default()
        }
    )
    .is_err());
    let one = Tensor::from_slice(dev, &[1.0f32, 2.0, 3.0], &[1, 3]).unwrap();
    assert!(batch_norm_train(&one, Some(&mut st), &BatchNormOptions::default()).is_err());
    assert_eq!(st.num_batches_tracked, 7);
    assert_eq!(st.running_mean.to_vec::<f32>().unwrap(), vec![0.0; 3]);
    assert_eq!(st.running_var.to_vec::<f32>().unwrap(), vec![1.0; 3]);
}

// ---------------------------------------------------------------------------------------------
// Backward
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub(crate) struct BackwardProblem {
    dy: Operand,
    x: Operand,
    /// Saved mean (f32): near the data, or small integers.
    mean: Operand,
    /// Saved invstd per channel (f32 values, powers of two in the exact cases).
    invstd: Vec<f64>,
    gamma: Option<Operand>,
}

impl BackwardProblem {
    /// dy, x and mean small integers and invstd powers of two: dbeta and dgamma are exact.
    fn exact_sums(&self) -> bool {
        let pow2 = |v: f64| v > 0.0 && v.log2().fract() == 0.0;
        self.dy.dist.is_int()
            && self.x.dist.is_int()
            && self.mean.dist.is_int()
            && self.invstd.iter().all(|&v| pow2(v))
    }
}

pub(crate) fn backward_problem(
    dtype: DType,
    shapes: BoxedStrategy<Vec<usize>>,
    dists: BoxedStrategy<Dist>,
) -> impl Strategy<Value = BackwardProblem> {
    (shapes, dists, any::<bool>()).prop_flat_map(move |(shape, dist, exact)| {
        let c = shape[1];
        // Exact cases: integer data and mean, invstd a power of two; otherwise statistics near
        // the data's (large-mean data gets a mean in its range and invstd 1 / its spread).
        // f16 results must stay below 65504 even for 25k values per channel: smaller dy and
        // invstd keep dbeta, dgamma and dx (|xhat| <= 22) far from it.
        let exact = exact || dist.is_int();
        let f16 = dtype == DType::F16;
        let (int_dy, float_dy) = if f16 { (2, 1.0) } else { (8, 2.0) };
        let (exact_inv, float_inv) = if f16 {
            (vec![0.25, 0.5], vec![0.1, 0.37])
        } else {
            (vec![0.25, 0.5, 1.0, 2.0], vec![0.1, 0.37, 1.0, 3.0])
        };
        let (xd, dyd, meand, inv) = match dist {
            _ if exact => (
                Dist::SmallInt(-8, 8),
                Dist::SmallInt(-int_dy, int_dy),
                Dist::SmallInt(-3, 3),
                prop::sample::select(exact_inv).boxed(),
            ),
            Dist::Uniform(lo, hi) if hi - lo < 10.0 => (
                dist,
                Dist::Uniform(-float_dy, float_dy),
                dist,
                Just(1.0 / (hi - lo)).boxed(),
            ),
            _ => (
                dist,
                Dist::Uniform(-float_dy, float_dy),
                Dist::Uniform(-1.0, 1.0),
                prop::sample::select(float_inv).boxed(),
            ),
        };
        (
            operand_of_shape(dtype, shape.clone(), x_kind(), Just(dyd)),
            operand_of_shape(dtype, shape.clone(), x_kind(), Just(xd)),
            operand_of_shape(DType::F32, vec![c], param_kind(), Just(meand)),
            inv,
            // Per channel: the chosen invstd times 1/2, 1 or 2 (exact scalings).
            prop::collection::vec(-1i32..=1, c),
            opt_param(dtype, c, Dist::Uniform(-2.0, 2.0)),
        )
            .prop_map(|(dy, x, mean, inv, k, gamma)| BackwardProblem {
                dy,
                x,
                mean,
                invstd: k
                    .iter()
                    .map(|&k| common::round_to_dtype(DType::F32, inv * 2f64.powi(k)))
                    .collect(),
                gamma,
            })
    })
}

/// Bounds of the backward's outputs (module doc): (dbeta, dgamma, dx).
#[allow(clippy::type_complexity)]
fn backward_bounds(
    p: &BackwardProblem,
    r: &reference::BnBackwardRef,
    n: f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let shape = &p.x.shape;
    let (nn, c, s) = reference::bn_dims(shape);
    let m = (nn * s) as f64;
    let (dys, xs, mean, inv) = (p.dy.values(), p.x.values(), p.mean.values(), &p.invstd);
    let g = values(&p.gamma);
    let exact = p.exact_sums();
    let e1: Vec<f64> = (0..c)
        .map(|ch| if exact { 0.0 } else { n * EPS32 * r.abs_dy[ch] })
        .collect();
    let e_dg: Vec<f64> = (0..c)
        .map(|ch| {
            if exact {
                0.0
            } else {
                inv[ch] * (n + 2.0) * EPS32 * r.abs_dyx[ch] + EPS32 * r.dgamma[ch].abs()
            }
        })
        .collect();
    let e_dx = (0..xs.len())
        .map(|i| {
            let ch = channel_of(i, shape);
            let a = g.as_ref().map_or(1.0, |g| g[ch]).abs() * inv[ch];
            let d = (xs[i] - mean[ch]).abs();
            let terms = a * dys[i].abs()
                + a * inv[ch] * r.dgamma[ch].abs() * d / m
                + a * r.dbeta[ch].abs() / m;
            a * inv[ch] * d * e_dg[ch] / m + a * e1[ch] / m + 6.0 * EPS32 * terms
        })
        .collect();
    (e1, e_dg, e_dx)
}

pub(crate) async fn check_backward(p: &BackwardProblem) -> Result<(), TestCaseError> {
    check_backward_on(device(), p).await
}

/// [`check_backward`] on `dev`.
pub(crate) async fn check_backward_on(
    dev: &Device,
    p: &BackwardProblem,
) -> Result<(), TestCaseError> {
    let what = "batch_norm_backward";
    let (dyt, xt) = (p.dy.tensor(dev), p.x.tensor(dev));
    let c = p.x.shape[1];
    let gamma = p.gamma.as_ref().map(|o| o.tensor(dev));
    let inv_t = common::upload(dev, &p.invstd, &[c], DType::F32);
    let saved = ok(what, BatchNormSaved::new(p.mean.tensor(dev), inv_t))?;
    let BatchNormGrads {
        dx,
        dweight: dgamma,
        dbias: dbeta,
    } = ok(what, batch_norm_backward(&dyt, &xt, gamma.as_ref(), &saved))?;
    let dt = p.x.dtype;
    prop_assert_eq!(dx.dtype(), dt);
    prop_assert_eq!(dgamma.dtype(), dt);
    prop_assert_eq!(dbeta.dtype(), dt);
    let shape = &p.x.shape;
    let g = values(&p.gamma);
    let (dys, xs, mean) = (p.dy.values(), p.x.values(), p.mean.values());
    let r = reference::batch_norm_backward(&dys, &xs, shape, &mean, &p.invstd, g.as_deref());
    // The magnitudes above keep random-sign sums far below f16's 65504, but a broadcast dy (one
    // value everywhere) with x off the given mean sums coherently, and the exact result can leave
    // f16's range: the kernel's inf is then right and no comparison applies.
    let beyond_f16 = |v: &[f64]| v.iter().any(|x| x.abs() > 65504.0);
    if dt == DType::F16 && (beyond_f16(&r.dbeta) || beyond_f16(&r.dgamma) || beyond_f16(&r.dx)) {
        return Err(TestCaseError::reject(
            "the exact result is outside f16's range",
        ));
    }
    let (e1, e_dg, e_dx) = backward_bounds(p, &r, chain(dev, shape, &[&xt, &dyt]));
    let got = fetch_async("dbeta", &dbeta, &[c]).await?;
    compare("dbeta", &[c], &got, &r.dbeta, |ch| {
        out_round(dt, r.dbeta[ch], e1[ch])
    })?;
    let got = fetch_async("dgamma", &dgamma, &[c]).await?;
    compare("dgamma", &[c], &got, &r.dgamma, |ch| {
        out_round(dt, r.dgamma[ch], e_dg[ch])
    })?;
    let got = fetch_async("dx", &dx, shape).await?;
    compare("dx", shape, &got, &r.dx, |i| {
        out_round(dt, r.dx[i], e_dx[i])
    })
}

pub(crate) fn backward_dists() -> BoxedStrategy<Dist> {
    x_dists().boxed()
}

#[test]
fn batchnorm_backward_f32() {
    run_async(
        CASES_F32,
        backward_problem(DType::F32, small_shape().boxed(), backward_dists()),
        check_backward,
    );
}

#[test]
fn batchnorm_backward_f16() {
    require_f16(device());
    run_async(
        CASES_F16,
        backward_problem(DType::F16, small_shape().boxed(), x_dists_f16().boxed()),
        check_backward,
    );
}

#[test]
fn batchnorm_backward_large_f32() {
    run_async(
        CASES_LARGE_F32,
        backward_problem(DType::F32, large_shape(), backward_dists()),
        check_backward,
    );
}

#[test]
fn batchnorm_backward_large_f16() {
    require_f16(device());
    run_async(
        CASES_LARGE_F16,
        backward_problem(DType::F16, large_shape(), x_dists_f16().boxed()),
        check_backward,
    );
}

// ---------------------------------------------------------------------------------------------
// Finite differences
// ---------------------------------------------------------------------------------------------

/// `L = sum w * y(x, gamma, beta)` of the training forward on the device, in f64.
#[cfg(not(target_arch = "wasm32"))]
fn loss_gpu(x: &[f64], shape: &[usize], g: &[f64], b: &[f64], w: &[f64]) -> f64 {
    let dev = device();
    let c = shape[1];
    let xt = common::upload(dev, x, shape, DType::F32);
    let gt = common::upload(dev, g, &[c], DType::F32);
    let bt = common::upload(dev, b, &[c], DType::F32);
    let y = batch_norm_train(
        &xt,
        None,
        &BatchNormOptions {
            weight: Some(&gt),
            bias: Some(&bt),
            eps: FD_EPS,
            ..Default::default()
        },
    )
    .unwrap()
    .y;
    let y = common::download(&y).unwrap();
    y.iter().zip(w).map(|(a, b)| a * b).sum()
}

const FD_EPS: f64 = 1e-5;

/// The device backward against central differences of the device forward, and the reference
/// backward against central differences of the reference forward, for dx, dgamma and dbeta
/// of `L = sum w y` on tiny problems of every rank.
///
/// Reference: h = 1e-5 in f64 (truncation ~h^2, rounding ~1e-16 / h): within 1e-7 relative.
/// Device: h = 1/16 (inputs stay f32 values). The quotient's truncation error is measured
/// exactly by the same quotient of the f64 reference forward; its rounding noise is at most
/// `2 sum |w_i| E_i / h` with E_i the forward bound of `y_i` (module doc; doubled as a margin
/// for the perturbed inputs); `1e-4 (1 + |dx|)` covers the device backward's own rounding and
/// its use of the device's f32 saved statistics (both below 1e-5 relative by the bounds above).
/// Any slip in the backward formula (a sign, M - 1 for M, a missing term) moves the derivative
/// by several percent on these problems.
/// The GPU plan (64-lane workgroups whose lanes merge their partials in workgroup memory)
/// forced on this adapter: training, inference and backward, small and multi-chunk shapes.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn batchnorm_gpu_plans_f32() {
    let dev = common::gpu_plans_device();
    let small = || small_shape().boxed();
    let x = || x_dists().boxed();
    run_async(16, train_problem(DType::F32, small(), x()), async |p| {
        check_train_on(dev, p).await
    });
    run_async(
        3,
        train_problem(DType::F32, large_shape(), x()),
        async |p| check_train_on(dev, p).await,
    );
    run_async(16, backward_problem(DType::F32, small(), x()), async |p| {
        check_backward_on(dev, p).await
    });
    run_async(
        3,
        backward_problem(DType::F32, large_shape(), x()),
        async |p| check_backward_on(dev, p).await,
    );
    run_async(8, infer_problem(DType::F32, small(), x()), async |p| {
        check_inference_on(dev, p).await
    });
}

#[test]
fn batchnorm_backward_finite_differences() {
    let dev = device();
    let shapes: [&[usize]; 3] = [&[4, 2], &[2, 3, 3], &[2, 2, 2, 3]];
    for (k, shape) in shapes.into_iter().enumerate() {
        let c = shape[1];
        let seed = 100 + k as u64;
        let d = |lo, hi| Dist::Uniform(lo, hi);
        let x = Operand::new(DType::F32, shape, ViewKind::Contiguous, d(-2.0, 2.0), seed).values();
        let w = Operand::new(
            DType::F32,
            shape,
            ViewKind::Contiguous,
            d(-1.0, 1.0),
            seed + 7,
        )
        .values();
        let g: Vec<f64> = (0..c).map(|i| 0.75 + 0.25 * i as f64).collect();
        let b: Vec<f64> = (0..c).map(|i| 0.5 - 0.25 * i as f64).collect();
        let eps = FD_EPS;

        // Device backward from the device forward's saved statistics.
        let xt = common::upload(dev, &x, shape, DType::F32);
        let gt = common::upload(dev, &g, &[c], DType::F32);
        let bt = common::upload(dev, &b, &[c], DType::F32);
        let out = batch_norm_train(
            &xt,
            None,
            &BatchNormOptions {
                weight: Some(&gt),
                bias: Some(&bt),
                eps: FD_EPS,
                ..Default::default()
            },
        )
        .unwrap();
        let wt = common::upload(dev, &w, shape, DType::F32);
        let BatchNormGrads {
            dx,
            dweight: dg,
            dbias: db,
        } = batch_norm_backward(&wt, &xt, Some(&gt), &out.saved).unwrap();
        let got = [
            common::download(&dx).unwrap(),
            common::download(&dg).unwrap(),
            common::download(&db).unwrap(),
        ];

        let r = reference::batch_norm_train(&x, shape, Some(&g), Some(&b), eps);
        let rb = reference::batch_norm_backward(&w, &x, shape, &r.stats.mean, &r.invstd, Some(&g));
        let n = chain(dev, shape, &[&xt]);
        let bounds: Vec<StatBounds> = (0..c).map(|ch| stat_bounds(&r.stats, ch, n, eps)).collect();
        let e = train_y_bounds(&x, shape, &r, Some(&g), Some(&b), &bounds);
        let loss_err: f64 = w.iter().zip(&e).map(|(w, e)| w.abs() * e).sum();

        let loss_ref = |x: &[f64], g: &[f64], b: &[f64]| -> f64 {
            let r = reference::batch_norm_train(x, shape, Some(g), Some(b), eps);
            r.y.iter().zip(&w).map(|(a, b)| a * b).sum()
        };
        // Central difference in entry `i` of x (0), gamma (1) or beta (2).
        let quotient = |which: usize, i: usize, h: f64, gpu: bool| -> f64 {
            let mut v = [x.clone(), g.clone(), b.clone()];
            let base = v[which][i];
            let mut at = |delta: f64| {
                v[which][i] = base + delta;
                if gpu {
                    loss_gpu(&v[0], shape, &v[1], &v[2], &w)
                } else {
                    loss_ref(&v[0], &v[1], &v[2])
                }
            };
            (at(h) - at(-h)) / (2.0 * h)
        };
        let want = [&rb.dx, &rb.dgamma, &rb.dbeta];
        for which in 0..3 {
            for i in 0..want[which].len() {
                let a = want[which][i];
                let q = quotient(which, i, 1e-5, false);
                assert!(
                    (q - a).abs() <= 1e-7 * (1.0 + a.abs()),
                    "reference d{which}[{i}] of {shape:?}: analytic {a} vs quotient {q}"
                );
                let h = 1.0 / 16.0;
                let trunc = (quotient(which, i, h, false) - a).abs();
                let qg = quotient(which, i, h, true);
                let tol = trunc + 2.0 * loss_err / h + 1e-4 * (1.0 + a.abs());
                let gi = got[which][i];
                assert!(
                    (qg - gi).abs() <= tol,
                    "device d{which}[{i}] of {shape:?}: backward {gi} vs quotient {qg} (tol {tol})"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reproducibility
// ---------------------------------------------------------------------------------------------

#[cfg(not(target_arch = "wasm32"))]
fn bits_equal(what: &str, a: &Tensor, b: &Tensor) {
    let (x, y) = (common::download(a).unwrap(), common::download(b).unwrap());
    if let Err(e) = compare_bits(what, a.shape(), a.dtype(), &x, &y) {
        panic!("{e}");
    }
}

/// Every output of all three ops is bitwise identical across runs, on inputs whose channels
/// span several chunks (vec4 and single-value paths) and whose reductions round.
#[test]
fn batchnorm_bitwise_reproducible() {
    // The CPU adapter's plan and the GPU plan (lanes merged in workgroup memory).
    for (k, (shape, dev)) in [[4usize, 3, 70, 72], [6, 2, 61, 61]]
        .into_iter()
        .flat_map(|s| [(s, device()), (s, common::gpu_plans_device())])
        .enumerate()
    {
        let c = shape[1];
        let d = Dist::Uniform(-3.0, 7.0);
        let x =
            Operand::new(DType::F32, &shape, ViewKind::Contiguous, d, 200 + k as u64).tensor(dev);
        let dy =
            Operand::new(DType::F32, &shape, ViewKind::Contiguous, d, 300 + k as u64).tensor(dev);
        let g = Operand::new(DType::F32, &[c], ViewKind::Contiguous, d, 400).tensor(dev);
        let b = Operand::new(DType::F32, &[c], ViewKind::Contiguous, d, 401).tensor(dev);
        let step = || {
            let mut st = BatchNormState::new(dev, c, DType::F32).unwrap();
            let out = batch_norm_train(
                &x,
                Some(&mut st),
                &BatchNormOptions {
                    weight: Some(&g),
                    bias: Some(&b),
                    ..Default::default()
                },
            )
            .unwrap();
            let (y, m, v) = (out.y, out.saved.mean().clone(), out.saved.invstd().clone());
            let BatchNormGrads {
                dx,
                dweight: dg,
                dbias: db,
            } = batch_norm_backward(&dy, &x, Some(&g), &out.saved).unwrap();
            let yi = batch_norm_inference(
                &x,
                &st.running_mean,
                &st.running_var,
                &BatchNormOptions {
                    weight: Some(&g),
                    bias: Some(&b),
                    activation: Activation::Gelu,
                    ..Default::default()
                },
            )
            .unwrap();
            [y, m, v, st.running_mean, st.running_var, dx, dg, db, yi]
        };
        let first = step();
        for _ in 0..2 {
            let again = step();
            for (i, (a, b)) in first.iter().zip(&again).enumerate() {
                bits_equal(&format!("output {i} of {shape:?}"), a, b);
            }
        }
    }
}

/// The gradient sums over a channel of 4M values keep PyTorch's f32 precision: dbias of a
/// constant dy is `count * dy`, and with `x = ±1` (mean 0) and `dy = 0.1 x` every
/// `dy * (x - mean)` is 0.1, so dweight is `count * 0.1 * invstd`. The CPU adapters' lanes add
/// 512 values each and the finalize thousands of partials: added in turn, both drift past
/// 2e-6 on such constant terms.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn backward_sums_of_long_channels_keep_f32_precision() {
    let (n, c, s) = (16, 2, 512 * 512);
    let count = (n * s) as f64;
    let sign: Vec<f32> = (0..n * c * s)
        .map(|i| if i % 2 == 0 { 1.0 } else { -1.0 })
        .collect();
    for dev in [device(), common::gpu_plans_device()] {
        let x = Tensor::from_slice(dev, &sign, &[n, c, s]).unwrap();
        let out = batch_norm_train(&x, None, &BatchNormOptions::default()).unwrap();
        let invstd = common::download(out.saved.invstd()).unwrap();
        let rel = |what: &str, got: f64, want: f64| {
            let e = (got - want).abs() / want.abs();
            let cpu = dev.caps().cpu;
            assert!(
                e <= 2e-6,
                "{what} (cpu plans {cpu}): {got} vs {want} ({e:.2e})"
            );
        };
        let dy = Tensor::full(dev, &[n, c, s], 0.1, DType::F32).unwrap();
        let g = batch_norm_backward(&dy, &x, None, &out.saved).unwrap();
        for v in common::download(&g.dbias).unwrap() {
            rel("dbias of a constant dy", v, 0.1f32 as f64 * count);
        }
        let dy = x.mul_scalar(0.1).unwrap();
        let g = batch_norm_backward(&dy, &x, None, &out.saved).unwrap();
        let dw = common::download(&g.dweight).unwrap();
        for (ch, v) in dw.into_iter().enumerate() {
            rel("dweight", v, 0.1f32 as f64 * count * invstd[ch]);
        }
    }
}
