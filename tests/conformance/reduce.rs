//! Reduction conformance: sum, mean, max, min over every axis (negative dims too), with and
//! without keepdim, on contiguous tensors and strided views, for every kernel variant (one
//! invocation per output; one workgroup per output for few, long reductions; on GPUs, outputs
//! split into segments whose partials a second pass folds, forced here with `gpu_plans`).
//!
//! Tolerances, with R the reduction length and sum|x| the sum of magnitudes of the reduced
//! inputs (f32 accumulation in any fixed order or tree errs by at most (R-1) * 2^-24 * sum|x|;
//! we allow R * EPS32 * sum|x|):
//! - sum: R * EPS32 * sum|x|; exact when all inputs are small integers (every partial sum is an
//!   integer below 2^24, so any f32 accumulation order is exact).
//! - mean: sum / R in f32: the sum's bound divided by R, plus the division's 2.5 ulp (WGSL).
//! - max, min: exact (they return an input value).
//! - f16: inputs are f16 values, accumulation is f32 as above, then one final rounding to f16
//!   (`check::out_round`: one f16 ulp, none when the exact result is representable).

use proptest::prelude::*;
use wgtensor::ops::reduce::{reduce_plan, ReducePlan};
use wgtensor::ops::ReduceOp;
use wgtensor::{DType, Device};

use crate::check::{compare, fetch_async, ok, out_round, EPS32};
use crate::common::{device, reference, require_f16};
#[cfg(not(target_arch = "wasm32"))]
use crate::strategies::run_async;
use crate::strategies::{
    dim, general_dist, operand_of_shape, shape, view_kind, Dist, Operand, ViewKind,
};

const CASES_F32: u32 = 40;
const CASES_F16: u32 = 20;
const CASES_LONG_F32: u32 = 10;
const CASES_LONG_F16: u32 = 5;
const CASES_MANY_F32: u32 = 8;
const CASES_MANY_F16: u32 = 4;

const REDUCE_OPS: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min];

#[derive(Clone, Debug)]
pub(crate) struct ReduceProblem {
    op: ReduceOp,
    dim: isize,
    keepdim: bool,
    x: Operand,
}

/// Values for long reductions: |x| <= 4, so even 9000 same-sign f16 inputs sum to at most
/// 36000 < 65504 (no f16 overflow).
fn long_dists() -> impl Strategy<Value = Dist> + Clone {
    prop_oneof![
        Just(Dist::SmallInt(-4, 4)),
        Just(Dist::Uniform(-4.0, 4.0)),
        Just(Dist::SignedLog(-3.0, 0.6)),
    ]
}

/// A reduction of an operand of `shape` along `dim` (written negative when `negative`).
fn problem_for(
    dtype: DType,
    shape: Vec<usize>,
    dim: usize,
    negative: bool,
    dists: impl Strategy<Value = Dist>,
) -> impl Strategy<Value = ReduceProblem> {
    let rank = shape.len() as isize;
    let dim = if negative {
        dim as isize - rank
    } else {
        dim as isize
    };
    (
        prop::sample::select(&REDUCE_OPS[..]),
        any::<bool>(),
        operand_of_shape(dtype, shape, view_kind(), dists),
    )
        .prop_map(move |(op, keepdim, x)| ReduceProblem {
            op,
            dim,
            keepdim,
            x,
        })
}

/// Rank 1..=5 shapes with small dims, any axis: many outputs, short reductions.
pub(crate) fn small_problem(dtype: DType) -> impl Strategy<Value = ReduceProblem> {
    shape(1..=5)
        .prop_flat_map(|s| {
            let r = s.len();
            (Just(s), 0..r, any::<bool>())
        })
        .prop_flat_map(move |(s, d, neg)| problem_for(dtype, s, d, neg, general_dist()))
}

/// Few outputs, long reductions (65..=9000): the workgroup-per-output variant, along the
/// last axis, the only axis, or a strided leading/middle axis.
pub(crate) fn long_problem(dtype: DType) -> impl Strategy<Value = ReduceProblem> {
    let shapes = prop_oneof![
        (1usize..=8, 65usize..=9000).prop_map(|(o, r)| (vec![o, r], 1)),
        (65usize..=9000).prop_map(|r| (vec![r], 0)),
        (65usize..=9000, 1usize..=8).prop_map(|(r, i)| (vec![r, i], 0)),
        (1usize..=4, 65usize..=3000, dim()).prop_map(|(a, r, b)| (vec![a, r, b], 1)),
    ];
    (shapes, any::<bool>())
        .prop_flat_map(move |((s, d), neg)| problem_for(dtype, s, d, neg, long_dists()))
}

/// Many outputs (>= 4096) with long reductions (one invocation per output loops over 65+
/// elements), contiguous or strided along the reduced axis, and many outputs with short
/// reductions over a middle axis.
pub(crate) fn many_outputs_problem(dtype: DType) -> impl Strategy<Value = ReduceProblem> {
    let shapes = prop_oneof![
        (4096usize..=4400, 65usize..=72).prop_map(|(n, r)| (vec![n, r], 1)),
        (65usize..=72, 4096usize..=4400).prop_map(|(r, n)| (vec![r, n], 0)),
        (40usize..=70, 3usize..=9, 100usize..=200).prop_map(|(a, r, b)| (vec![a, r, b], 1)),
    ];
    (shapes, any::<bool>())
        .prop_flat_map(move |((s, d), neg)| problem_for(dtype, s, d, neg, long_dists()))
}

pub(crate) async fn check_reduce(p: &ReduceProblem) -> Result<(), TestCaseError> {
    check_reduce_on(device(), p).await
}

/// [`check_reduce`] on `dev`.
pub(crate) async fn check_reduce_on(dev: &Device, p: &ReduceProblem) -> Result<(), TestCaseError> {
    let what = format!("{:?}(dim {}, keepdim {})", p.op, p.dim, p.keepdim);
    let y = ok(&what, p.x.tensor(dev).reduce(p.dim, p.op, p.keepdim))?;
    prop_assert_eq!(y.dtype(), p.x.dtype);
    let xs = p.x.values();
    let rank = p.x.shape.len();
    let d = if p.dim < 0 {
        (p.dim + rank as isize) as usize
    } else {
        p.dim as usize
    };
    let (want, shape) = reference::reduce(&xs, &p.x.shape, d, p.op, p.keepdim);
    let abs_sum = reference::abs_sum(&xs, &p.x.shape, d);
    let r = p.x.shape[d] as f64;
    let got = fetch_async(&what, &y, &shape).await?;
    compare(&what, &shape, &got, &want, |i| {
        // Small-integer inputs whose magnitudes sum below 2^24: the f32 sum is exact.
        let exact_sum = p.x.dist.is_int() && abs_sum[i] < 16_777_216.0;
        let sum_err = if exact_sum {
            0.0
        } else {
            r * EPS32 * abs_sum[i]
        };
        let err32 = match p.op {
            ReduceOp::Sum => sum_err,
            ReduceOp::Mean => sum_err / r + 2.5 * EPS32 * want[i].abs(),
            ReduceOp::Max | ReduceOp::Min => 0.0,
        };
        out_round(p.x.dtype, want[i], err32)
    })
}

#[test]
fn reduce_f32() {
    run_async(CASES_F32, small_problem(DType::F32), check_reduce);
}

#[test]
fn reduce_f16() {
    require_f16(device());
    run_async(CASES_F16, small_problem(DType::F16), check_reduce);
}

#[test]
fn reduce_long_f32() {
    run_async(CASES_LONG_F32, long_problem(DType::F32), check_reduce);
}

#[test]
fn reduce_long_f16() {
    require_f16(device());
    run_async(CASES_LONG_F16, long_problem(DType::F16), check_reduce);
}

#[test]
fn reduce_many_outputs_f32() {
    run_async(
        CASES_MANY_F32,
        many_outputs_problem(DType::F32),
        check_reduce,
    );
}

#[test]
fn reduce_many_outputs_f16() {
    require_f16(device());
    run_async(
        CASES_MANY_F16,
        many_outputs_problem(DType::F16),
        check_reduce,
    );
}

/// The workgroup-variant shapes named in the design review, every op, both keepdims, on the
/// contiguous tensor and on a transposed view: [3, 5000] over dim 1 and [7000] over dim 0,
/// with small-integer (exact sums) and real-valued data.
pub(crate) async fn fixed_long_cases(dtype: DType) {
    let cases: [(&[usize], isize, ViewKind); 4] = [
        (&[3, 5000], 1, ViewKind::Contiguous),
        (&[3, 5000], -1, ViewKind::Permuted),
        (&[7000], 0, ViewKind::Contiguous),
        (&[7000], -1, ViewKind::Sliced),
    ];
    for (shape, dim, kind) in cases {
        for dist in [Dist::SmallInt(-4, 4), Dist::Uniform(-4.0, 4.0)] {
            for op in REDUCE_OPS {
                for keepdim in [false, true] {
                    let p = ReduceProblem {
                        op,
                        dim,
                        keepdim,
                        x: Operand::new(dtype, shape, kind, dist, 7),
                    };
                    if let Err(e) = check_reduce(&p).await {
                        panic!("{e}\nproblem: {p:#?}");
                    }
                }
            }
        }
    }
}

#[test]
fn reduce_workgroup_fixed_f32() {
    pollster::block_on(fixed_long_cases(DType::F32));
}

#[test]
fn reduce_workgroup_fixed_f16() {
    require_f16(device());
    pollster::block_on(fixed_long_cases(DType::F16));
}

/// The reduced dim, its stride in the operand's view and the plan `dev` gives the problem.
#[cfg(not(target_arch = "wasm32"))]
fn plan_of(dev: &Device, p: &ReduceProblem) -> (usize, usize, ReducePlan) {
    let d = p.dim.rem_euclid(p.x.shape.len() as isize) as usize;
    let n_out = p.x.shape.iter().product::<usize>() / p.x.shape[d];
    let stride = p.x.tensor(dev).strides()[d];
    (
        d,
        stride,
        reduce_plan(dev.caps(), n_out, p.x.shape[d], stride),
    )
}

/// Few outputs with reductions long enough that the GPU plan splits them into segments (the
/// `gpu_plans` device's parallelism is the host's threads, so 1-3 outputs of 8k-70k values
/// split into 2-4 segments, the last one ragged), along the last axis, the only axis, or a
/// strided leading axis; plus NaN, which must survive both passes of max, min and sum.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn reduce_gpu_plans_split_f32() {
    let dev = crate::common::gpu_plans_device();
    let shapes = prop_oneof![
        (1usize..=3, 8192usize..=70_000).prop_map(|(o, r)| (vec![o, r], 1)),
        (8192usize..=70_000).prop_map(|r| (vec![r], 0)),
        (8192usize..=40_000, 1usize..=2).prop_map(|(r, i)| (vec![r, i], 0)),
    ];
    let problems = (shapes, any::<bool>())
        .prop_flat_map(|((s, d), neg)| problem_for(DType::F32, s, d, neg, long_dists()));
    run_async(12, problems, async |p| {
        let (d, _, plan) = plan_of(dev, p);
        prop_assert!(
            matches!(plan, ReducePlan::Split { .. }),
            "{:?} over dim {d} is not split: {plan:?}",
            p.x.shape
        );
        check_reduce_on(dev, p).await
    });
    // A NaN in the last segment of one output.
    let mut v = vec![1.0f32; 3 * 20_000];
    v[2 * 20_000 - 5] = f32::NAN;
    let x = wgtensor::Tensor::from_slice(dev, &v, &[3, 20_000]).unwrap();
    for op in REDUCE_OPS {
        let y = crate::common::download(&x.reduce(1, op, false).unwrap()).unwrap();
        assert!(
            y[1].is_nan() && !y[0].is_nan() && !y[2].is_nan(),
            "{op:?}: {y:?}"
        );
    }
}

/// Many strided outputs with long reductions (a bias gradient's column sums): the GPU plan
/// splits each output's rows into segments, one invocation per output and segment, then folds
/// them in order (forced with `gpu_plans`; the columns scale with the device's slots,
/// `rows_split_outputs`: on lavapipe with 2 threads 4-40 columns over 200-3000 rows split
/// into 2-46 segments).
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn reduce_gpu_plans_rows_split_f32() {
    let dev = crate::common::gpu_plans_device();
    let cols = crate::common::rows_split_outputs(dev);
    // Two or three outer rows: the columns per outer row stay within the range.
    let inner = cols.start() / 2..=cols.end() / 3;
    let shapes = prop_oneof![
        (200usize..=3000, cols).prop_map(|(r, c)| (vec![r, c], 0)),
        (2usize..=3, 200usize..=1500, inner).prop_map(|(a, r, c)| (vec![a, r, c], 1)),
    ];
    let problems = (shapes, any::<bool>())
        .prop_flat_map(|((s, d), neg)| problem_for(DType::F32, s, d, neg, long_dists()));
    run_async(12, problems, async |p| {
        let (d, stride, plan) = plan_of(dev, p);
        // Views may make the reduced axis contiguous: those take the other plans.
        if stride != 1 {
            prop_assert!(
                matches!(plan, ReducePlan::RowsSplit { .. }),
                "{:?} over dim {d} (stride {stride}) is not split: {plan:?}",
                p.x.shape
            );
        }
        check_reduce_on(dev, p).await
    });
}

/// Long sums keep PyTorch's precision: its cascade sums stay within a few ulp, where one lane
/// adding tens of thousands of f32 values in turn drifted 3.7e-4 on a sum of 10^7 values of
/// 0.1 (every add rounding the same way). Broadcast views make the inputs without memory.
#[test]
fn long_sums_keep_their_precision() {
    use wgtensor::Tensor;
    let dev = device();
    let full = |v: f64, shape: &[usize]| {
        let one = vec![1; shape.len()];
        Tensor::full(dev, &one, v, DType::F32)
            .unwrap()
            .broadcast_to(shape)
            .unwrap()
    };
    // CPU adapters split for accuracy (runs of at most about 64 values); GPU plans split for
    // occupancy, leaving a lane about 1500 of 10^8 values, which it adds in trees of 8 and
    // blocks of 64 (in turn: 3.7e-5 off).
    let tol = 2e-6;
    let rel = |what: &str, got: f64, want: f64| {
        let e = (got - want).abs() / want.abs();
        assert!(e <= tol, "{what}: {got} vs {want} (relative {e:.2e})");
    };
    let v01 = 0.1f32 as f64;
    for n in [1_000_000usize, 10_000_000, 100_000_000] {
        let x = full(0.1, &[n]);
        rel(
            &format!("sum of {n}"),
            x.sum_all().unwrap().item().unwrap(),
            v01 * n as f64,
        );
        let m = x.mean(0, false).unwrap().item().unwrap();
        rel(&format!("mean of {n}"), m, v01);
    }
    // The GPU plans of a 64-slot adapter on this one: 10^8 values in 128 segments, about
    // 3000 a lane.
    let gpu = wgtensor::Device::with_options(wgtensor::DeviceOptions {
        gpu_plans: true,
        parallelism: Some(64),
        ..Default::default()
    })
    .unwrap();
    let n = 100_000_000;
    let plan = reduce_plan(gpu.caps(), 1, n, 1);
    assert!(
        matches!(plan, ReducePlan::Split { seg_len, .. } if seg_len > 3000 * 256),
        "{plan:?}"
    );
    let x = Tensor::full(&gpu, &[1], 0.1, DType::F32)
        .unwrap()
        .broadcast_to(&[n])
        .unwrap();
    rel(
        "GPU plan, sum of 10^8",
        x.sum_all().unwrap().item().unwrap(),
        v01 * n as f64,
    );
    let cols = Tensor::full(&gpu, &[1, 1], 0.1, DType::F32)
        .unwrap()
        .broadcast_to(&[100_000, 256])
        .unwrap()
        .sum(0, false)
        .unwrap();
    // A broadcast view's reduced stride is 0: one invocation folds each of 128 segments.
    let plan = reduce_plan(gpu.caps(), 256, 100_000, 0);
    assert!(
        matches!(plan, ReducePlan::RowsSplit { seg_len, .. } if seg_len > 700),
        "{plan:?}"
    );
    for v in cols.to_vec::<f32>().unwrap().iter().step_by(17) {
        rel("GPU plan, column of 10^5", *v as f64, v01 * 1e5);
    }
    // Many long rows (one invocation per output) and a few long columns.
    let rows = full(0.1, &[4096, 20_000]).sum(1, false).unwrap();
    for (i, &v) in rows
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .enumerate()
        .step_by(1023)
    {
        rel(&format!("row {i}"), v as f64, v01 * 20_000.0);
    }
    let cols = full(0.1, &[1_000_000, 3]).sum(0, false).unwrap();
    for (i, &v) in cols.to_vec::<f32>().unwrap().iter().enumerate() {
        rel(&format!("column {i}"), v as f64, v01 * 1e6);
    }
    // Partials past one binding (a broadcast input binds 4 bytes, its 64 x 64 partials 16
    // KiB against 4 KiB): the reduction runs unsplit instead of failing.
    let small = wgtensor::Device::with_options(wgtensor::DeviceOptions {
        max_binding_bytes: Some(4096),
        ..Default::default()
    })
    .unwrap();
    let x = Tensor::full(&small, &[1, 1], 0.5, DType::F32)
        .unwrap()
        .broadcast_to(&[64, 1 << 20])
        .unwrap();
    let s = x.sum(1, false).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(s, vec![(1u32 << 19) as f32; 64]);
}
