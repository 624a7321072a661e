//! softmax / log_softmax conformance: every axis (negative dims too), contiguous tensors and
//! strided views, both kernel variants (one invocation per row; one workgroup per long row).
//!
//! Tolerances, with L the row length, d = |x - max| and l = |log sum exp(x - max)|: exp of d
//! errs by a few ulp plus d ulp (its argument's rounding), the f32 sum by L ulp, the log by a
//! few ulp of l. softmax: (8 + 2d + L) * EPS32 * y; log_softmax: (8 + d + l + L) * EPS32 *
//! max(1, |y|). f16 adds the final rounding (`check::out_round`).

use proptest::prelude::*;
use wgtensor::{DType, Device};

use crate::check::{compare, fetch_async, ok, out_round, EPS32};
#[cfg(not(target_arch = "wasm32"))]
use crate::common::require_f16;
use crate::common::{device, reference};
#[cfg(not(target_arch = "wasm32"))]
use crate::strategies::run_async;
use crate::strategies::{general_dist, operand_of_shape, shape, view_kind, Operand};

const CASES_F32: u32 = 40;
const CASES_F16: u32 = 20;
const CASES_LONG: u32 = 8;

#[derive(Clone, Debug)]
pub(crate) struct SoftmaxProblem {
    log: bool,
    dim: isize,
    x: Operand,
}

fn problem(
    dtype: DType,
    shapes: BoxedStrategy<(Vec<usize>, usize)>,
) -> impl Strategy<Value = SoftmaxProblem> {
    (shapes, any::<bool>(), any::<bool>()).prop_flat_map(move |((s, d), neg, log)| {
        let dim = if neg {
            d as isize - s.len() as isize
        } else {
            d as isize
        };
        operand_of_shape(dtype, s, view_kind(), general_dist()).prop_map(move |x| SoftmaxProblem {
            log,
            dim,
            x,
        })
    })
}

pub(crate) fn small_problem(dtype: DType) -> impl Strategy<Value = SoftmaxProblem> {
    let shapes = shape(1..=5)
        .prop_flat_map(|s| {
            let r = s.len();
            (Just(s), 0..r)
        })
        .boxed();
    problem(dtype, shapes)
}

/// Few rows of 257..=5000 elements: the workgroup-per-row variant, last or leading axis.
fn long_problem(dtype: DType) -> impl Strategy<Value = SoftmaxProblem> {
    let shapes = prop_oneof![
        (1usize..=6, 257usize..=5000).prop_map(|(o, r)| (vec![o, r], 1)),
        (257usize..=3000, 1usize..=4).prop_map(|(r, i)| (vec![r, i], 0)),
    ]
    .boxed();
    problem(dtype, shapes)
}

pub(crate) async fn check_softmax(p: &SoftmaxProblem) -> Result<(), TestCaseError> {
    check_softmax_on(device(), p).await
}

/// [`check_softmax`] on `dev`.
pub(crate) async fn check_softmax_on(
    dev: &Device,
    p: &SoftmaxProblem,
) -> Result<(), TestCaseError> {
    let what = format!(
        "{}(dim {})",
        if p.log { "log_softmax" } else { "softmax" },
        p.dim
    );
    let x = p.x.tensor(dev);
    let y = if p.log {
        x.log_softmax(p.dim)
    } else {
        x.softmax(p.dim)
    };
    let y = ok(&what, y)?;
    prop_assert_eq!(y.dtype(), p.x.dtype);
    let rank = p.x.shape.len() as isize;
    let d = if p.dim < 0 { p.dim + rank } else { p.dim } as usize;
    let (want, scale) = reference::softmax(&p.x.values(), &p.x.shape, d, p.log);
    let len = p.x.shape[d] as f64;
    let got = fetch_async(&what, &y, &p.x.shape).await?;
    compare(&what, &p.x.shape, &got, &want, |i| {
        let err32 = if p.log {
            (8.0 + scale[i] + len) * EPS32 * want[i].abs().max(1.0)
        } else {
            (8.0 + 2.0 * scale[i] + len) * EPS32 * want[i]
        };
        out_round(p.x.dtype, want[i], err32)
    })
}

#[test]
fn softmax_f32() {
    run_async(CASES_F32, small_problem(DType::F32), check_softmax);
}

#[test]
fn softmax_f16() {
    require_f16(device());
    run_async(CASES_F16, small_problem(DType::F16), check_softmax);
}

#[test]
fn softmax_long_f32() {
    run_async(CASES_LONG, long_problem(DType::F32), check_softmax);
}

/// Many long contiguous rows (1024-1100 rows of 257-700): on GPUs a workgroup per row, forced
/// here with `gpu_plans` (CPU adapters give each row an invocation).
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn softmax_many_long_rows_gpu_plans_f32() {
    let dev = crate::common::gpu_plans_device();
    let shapes = (1024usize..=1100, 257usize..=700)
        .prop_map(|(o, r)| (vec![o, r], 1))
        .boxed();
    run_async(3, problem(DType::F32, shapes), async |p| {
        check_softmax_on(dev, p).await
    });
}

/// Few long rows, which the GPU plan splits into segments (forced with `gpu_plans`: its
/// parallelism is the host's threads, so 1-3 rows of 4k-70k values take 2 or more segments),
/// along the last axis or a strided leading one.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn softmax_split_rows_gpu_plans_f32() {
    let dev = crate::common::gpu_plans_device();
    let shapes = prop_oneof![
        (1usize..=3, 4096usize..=70_000).prop_map(|(o, r)| (vec![o, r], 1)),
        (4096usize..=30_000, 1usize..=2).prop_map(|(r, i)| (vec![r, i], 0)),
    ]
    .boxed();
    run_async(6, problem(DType::F32, shapes), async |p| {
        check_softmax_on(dev, p).await
    });
}

/// The split rows in f16 (stored in f16, computed in f32).
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn softmax_split_rows_gpu_plans_f16() {
    let dev = crate::common::gpu_plans_device();
    require_f16(dev);
    let shapes = (1usize..=2, 4096usize..=20_000)
        .prop_map(|(o, r)| (vec![o, r], 1))
        .boxed();
    run_async(3, problem(DType::F16, shapes), async |p| {
        check_softmax_on(dev, p).await
    });
}

/// The split plan against the reference on rows that punish a wrong merge: values climbing
/// from -60 to 60 (each segment's max differs, so every partial sum must be rescaled to the row
/// max), a row whose first 3/4 is -inf (masked segments add nothing), a row with one NaN (the
/// whole row NaN) and a row of -inf (NaN, as PyTorch), for softmax and log_softmax.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn softmax_split_rows_merge_exactly() {
    let dev = crate::common::gpu_plans_device();
    let len = 20_000usize;
    let mut v = Vec::with_capacity(4 * len);
    v.extend((0..len).map(|i| -60.0 + 120.0 * i as f32 / len as f32));
    v.extend((0..len).map(|i| {
        if i < 3 * len / 4 {
            f32::NEG_INFINITY
        } else {
            (i % 7) as f32
        }
    }));
    v.extend((0..len).map(|i| if i == len - 3 { f32::NAN } else { 1.0 }));
    v.extend((0..len).map(|_| f32::NEG_INFINITY));
    let x = wgtensor::Tensor::from_slice(dev, &v, &[4, len]).unwrap();
    for log in [false, true] {
        let y = if log { x.log_softmax(1) } else { x.softmax(1) };
        let got = crate::common::download(&y.unwrap()).unwrap();
        for r in 0..4 {
            let row: Vec<f64> = v[r * len..(r + 1) * len]
                .iter()
                .map(|&a| f64::from(a))
                .collect();
            let (want, _) = reference::softmax(&row, &[len], 0, log);
            for i in 0..len {
                let (g, w) = (got[r * len + i], want[i]);
                let ok = if w.is_nan() {
                    g.is_nan()
                } else if w.is_infinite() {
                    g == w
                } else {
                    (g - w).abs() <= 1e-4 * w.abs().max(if log { 1.0 } else { 1e-30 })
                };
                assert!(ok, "log {log} row {r} [{i}]: got {g}, want {w}");
            }
        }
    }
}

/// Large logits do not overflow, a NaN makes its row NaN, and rank 0 and empty tensors work as
/// in PyTorch.
#[test]
fn softmax_edge_cases() {
    let dev = device();
    let x =
        wgtensor::Tensor::from_slice(dev, &[1000.0f32, 1001.0, f32::NAN, 0.0], &[2, 2]).unwrap();
    let y = x.softmax(1).unwrap().to_vec::<f32>().unwrap();
    let e = 1.0 / (1.0 + (-1.0f64).exp());
    assert!(
        (y[1] as f64 - e).abs() < 1e-6 && (y[0] as f64 - (1.0 - e)).abs() < 1e-6,
        "{y:?}"
    );
    assert!(y[2].is_nan() && y[3].is_nan(), "{y:?}");
    let l = x.log_softmax(1).unwrap().to_vec::<f32>().unwrap();
    assert!(
        (l[1] as f64 + (1.0 + (-1.0f64).exp()).ln()).abs() < 1e-5,
        "{l:?}"
    );
    let s = wgtensor::Tensor::from_slice(dev, &[3.0f32], &[]).unwrap();
    assert_eq!(s.softmax(0).unwrap().to_vec::<f32>().unwrap(), vec![1.0]);
    assert_eq!(
        s.log_softmax(-1).unwrap().to_vec::<f32>().unwrap(),
        vec![0.0]
    );
    assert!(s.softmax(1).is_err());
    let e = wgtensor::Tensor::zeros(dev, &[0, 3], DType::F32).unwrap();
    assert_eq!(e.softmax(1).unwrap().shape(), &[0, 3]);
    let err = x.softmax(2).unwrap_err();
    assert!(err.to_string().starts_with("softmax:"), "{err}");
}

/// A long row keeps its sum's precision: softmax over 100000 logits cycling through seven
/// values, whose exps every add in turn rounds the same way (the row kernels add blocks of 64,
/// then the blocks).
#[test]
fn long_row_softmax_keeps_its_precision() {
    let dev = device();
    let n = 100_000usize;
    let xv: Vec<f32> = (0..n).map(|i| (i % 7) as f32 * 0.1).collect();
    let x = wgtensor::Tensor::from_slice(dev, &xv, &[1, n]).unwrap();
    let y = x.softmax(1).unwrap().to_vec::<f32>().unwrap();
    let s: f64 = xv.iter().map(|&v| (v as f64).exp()).sum();
    for i in 0..7 {
        let want = (xv[i] as f64).exp() / s;
        let e = (y[i] as f64 - want).abs() / want;
        assert!(e <= 2e-6, "p[{i}] {} vs {want} ({e:.1e})", y[i]);
    }
}
