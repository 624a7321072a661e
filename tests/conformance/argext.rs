//! argmax / argmin through the GPU plans (forced on lavapipe with `gpu_plans`): a workgroup per
//! long contiguous row, rows split into segments with a merging pass (few outputs), and
//! strided rows split per invocation. Ties must resolve to the first index and NaN to the
//! first NaN wherever the row was cut, in f32, f16 and i32; and the max / min gradient, routed
//! through the same index, must follow on every device.

use proptest::prelude::*;
use wgtensor::ops::argext::argext_plan;
use wgtensor::ops::reduce::ReducePlan;
use wgtensor::ops::ReduceOp;
use wgtensor::{f16, DType, Device, Tensor};

use crate::common::{device, download, gpu_plans_device, rows_split_outputs};
use crate::index_ops::{check_arg_on, ArgProblem};
use crate::strategies::{operand_of_shape, run_async, view_kind, Dist, ViewKind};

fn plan(dev: &Device, x: &Tensor, dim: usize) -> ReducePlan {
    let len = x.shape()[dim];
    argext_plan(dev.caps(), x.numel() / len, len, x.strides()[dim])
}

/// Values with many ties (small integers) or spread out; NaNs anywhere in the tensor.
fn problems(
    shapes: impl Strategy<Value = (Vec<usize>, usize)>,
    kinds: impl Strategy<Value = ViewKind> + Clone + 'static,
) -> impl Strategy<Value = ArgProblem> {
    let dists = prop_oneof![
        2 => Just(Dist::SmallInt(-3, 3)),
        1 => Just(Dist::Uniform(-50.0, 50.0)),
    ];
    (shapes, any::<bool>(), any::<bool>()).prop_flat_map(move |((s, dim), keepdim, min)| {
        (
            operand_of_shape(DType::F32, s, kinds.clone(), dists.clone()),
            prop_oneof![2 => Just(vec![]), 1 => proptest::collection::vec(0usize..10_000_000, 1..3)],
        )
            .prop_map(move |(x, nans)| ArgProblem {
                x,
                dim,
                keepdim,
                min,
                nans,
            })
    })
}

/// Runs `problems` on the gpu_plans device, asserting each contiguous case takes a plan `want`
/// accepts.
fn run_plan_cases(
    cases: u32,
    what: &'static str,
    shapes: impl Strategy<Value = (Vec<usize>, usize)>,
    want: fn(&ReducePlan) -> bool,
) {
    let dev = gpu_plans_device();
    run_async(
        cases,
        problems(shapes, Just(ViewKind::Contiguous)),
        async |p| {
            let x = p.x.tensor(dev);
            let got = plan(dev, &x, p.dim);
            prop_assert!(
                want(&got),
                "{:?} over dim {} should take the {what} plan, took {got:?}",
                p.x.shape,
                p.dim
            );
            check_arg_on(dev, p).await
        },
    );
}

#[test]
fn argext_gpu_plans_workgroup_per_row_f32() {
    run_plan_cases(
        8,
        "workgroup",
        (300usize..=600, 257usize..=2000).prop_map(|(o, r)| (vec![o, r], 1)),
        |p| *p == ReducePlan::Workgroup,
    );
}

#[test]
fn argext_gpu_plans_split_rows_f32() {
    run_plan_cases(
        8,
        "split",
        prop_oneof![
            (1usize..=3, 8192usize..=70_000).prop_map(|(o, r)| (vec![o, r], 1)),
            (8192usize..=70_000).prop_map(|r| (vec![r], 0)),
        ],
        |p| matches!(p, ReducePlan::Split { segs, .. } if *segs > 1),
    );
}

#[test]
fn argext_gpu_plans_strided_rows_split_f32() {
    run_plan_cases(
        8,
        "rows split",
        (200usize..=3000, rows_split_outputs(gpu_plans_device()))
            .prop_map(|(r, c)| (vec![r, c], 0)),
        |p| matches!(p, ReducePlan::RowsSplit { segs, .. } if *segs > 1),
    );
}

/// Any view of the same shapes: whichever plan the strides give, the index is the serial one.
#[test]
fn argext_gpu_plans_views_f32() {
    let shapes = prop_oneof![
        (2usize..=40, 300usize..=3000).prop_map(|(o, r)| (vec![o, r], 1)),
        (300usize..=3000, 2usize..=40).prop_map(|(r, c)| (vec![r, c], 0)),
    ];
    let dev = gpu_plans_device();
    run_async(8, problems(shapes, view_kind()), async |p| {
        check_arg_on(dev, p).await
    });
}

/// xorshift values in 0..m: many ties in long rows.
fn tied(n: usize, m: u64, mut s: u64) -> Vec<i32> {
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % m) as i32
        })
        .collect()
}

/// The first NaN, else the first extremum, of `row` (the serial definition).
fn first_extremum(row: &[f64], min: bool) -> i32 {
    let mut best = 0;
    for (k, &v) in row.iter().enumerate() {
        if v.is_nan() {
            return k as i32;
        }
        if (min && v < row[best]) || (!min && v > row[best]) {
            best = k;
        }
    }
    best as i32
}

/// `x` (row-major `shape`) reduced along `dim`: the reference index per output.
fn reference(x: &[f64], shape: &[usize], dim: usize, min: bool) -> Vec<i32> {
    let inner: usize = shape[dim + 1..].iter().product();
    let len = shape[dim];
    let outer = x.len() / (len * inner);
    let mut out = Vec::with_capacity(outer * inner);
    for a in 0..outer {
        for b in 0..inner {
            let row: Vec<f64> = (0..len).map(|k| x[(a * len + k) * inner + b]).collect();
            out.push(first_extremum(&row, min));
        }
    }
    out
}

const SHAPES: [(&[usize], usize); 4] = [
    (&[3, 50_000], 1),
    (&[400, 700], 1),
    (&[2000, 8], 0),
    (&[70_001], 0),
];

#[test]
fn argext_gpu_plans_i32_and_f16_ties_and_nan() {
    let dev = gpu_plans_device();
    for (si, &(shape, dim)) in SHAPES.iter().enumerate() {
        let n: usize = shape.iter().product();
        let v = tied(n, 5, 0x9e37_79b9 + si as u64);
        let xi = Tensor::from_slice(dev, &v, shape).unwrap();
        let vf: Vec<f64> = v.iter().map(|&k| f64::from(k)).collect();
        for min in [false, true] {
            let want = reference(&vf, shape, dim, min);
            let got = if min {
                xi.argmin(dim as isize, false)
            } else {
                xi.argmax(dim as isize, false)
            };
            let got = got.unwrap().to_vec::<i32>().unwrap();
            assert_eq!(got, want, "i32 {shape:?} dim {dim} min {min}");
        }
        if dev.supports_f16() {
            // A NaN late in one row (past the first segment of a split row).
            let mut vf = vf.clone();
            vf[n - 1 - n / 7] = f64::NAN;
            let h: Vec<f16> = vf.iter().map(|&k| f16::from_f64(k)).collect();
            let xh = Tensor::from_slice(dev, &h, shape).unwrap();
            for min in [false, true] {
                let want = reference(&vf, shape, dim, min);
                let got = if min {
                    xh.argmin(dim as isize, true)
                } else {
                    xh.argmax(dim as isize, true)
                };
                let got = got.unwrap().to_vec::<i32>().unwrap();
                assert_eq!(got, want, "f16 {shape:?} dim {dim} min {min}");
            }
        }
    }
}

/// The gradient of max(dim) / min(dim) goes to the index argmax / argmin return: the first of
/// tied extrema, the first NaN of a row holding NaN (PyTorch's max(dim) returns that NaN and its
/// index), zero elsewhere; on the default device and through the GPU plans.
#[test]
fn max_min_backward_routes_to_the_first_extremum_or_nan() {
    for dev in [device(), gpu_plans_device()] {
        for (si, &(shape, dim)) in SHAPES.iter().enumerate() {
            let n: usize = shape.iter().product();
            let mut v: Vec<f32> = tied(n, 4, 0x51ed + si as u64)
                .iter()
                .map(|&k| k as f32)
                .collect();
            v[n / 3 + 17] = f32::NAN;
            let vf: Vec<f64> = v.iter().map(|&k| f64::from(k)).collect();
            let len = shape[dim];
            let n_out = n / len;
            let g: Vec<f32> = (0..n_out).map(|o| 1.0 + o as f32).collect();
            for op in [ReduceOp::Max, ReduceOp::Min] {
                let x = Tensor::from_slice(dev, &v, shape)
                    .unwrap()
                    .requires_grad()
                    .unwrap();
                let y = x.reduce(dim as isize, op, false).unwrap();
                let gt = Tensor::from_slice(dev, &g, y.shape()).unwrap();
                let l = y.mul(&gt).unwrap();
                let l = l.reshape(&[l.numel()]).unwrap().sum(0, false).unwrap();
                let grads = l.backward().unwrap();
                let got = download(grads.get(&x).unwrap()).unwrap();
                let idx = reference(&vf, shape, dim, op == ReduceOp::Min);
                let inner: usize = shape[dim + 1..].iter().product();
                let mut want = vec![0.0f64; n];
                for (o, &k) in idx.iter().enumerate() {
                    let (a, b) = (o / inner, o % inner);
                    want[(a * len + k as usize) * inner + b] = f64::from(g[o]);
                }
                assert!(
                    got == want,
                    "{op:?} {shape:?} dim {dim} on {}: gradient differs",
                    dev.adapter_info().name
                );
            }
        }
    }
}
