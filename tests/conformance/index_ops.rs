//! Index-op conformance: argmax/argmin, comparisons, gather and index_select (forward and the
//! scatter-add backward) and class-index cross_entropy (forward and input gradient) on
//! generated shapes and strided views, against f64 references written from PyTorch's
//! definitions. Shared with the browser suite (tests/browser/conformance.rs).
//!
//! Tolerances: argmax, comparisons and gathers are exact (they move or compare stored
//! values). The scatter-add gradient sums at most R products of exact operands in f32:
//! R * EPS32 * sum|terms|. cross_entropy: a log_softmax (softmax.rs's bound) then sums over N
//! samples: (16 + C + N) * EPS32 * (1 + |value|), plus the f16 store.

use proptest::prelude::*;
use wgtensor::ops::{cross_entropy, CmpOp, CrossEntropyOptions, Reduction};
use wgtensor::{DType, Device, Tensor};

use crate::check::{compare, fetch_async, ok, out_round, EPS32};
use crate::common::{device, download_async};
use crate::strategies::{general_dist, operand_of_shape, shape, view_kind, Dist, Operand, Rng};

pub(crate) const CASES: u32 = 24;

fn upload_i32(v: &[i32], shape: &[usize]) -> Tensor {
    Tensor::from_slice(device(), v, shape).expect("upload i32")
}

/// A float operand over a non-empty shape of rank 1..=4 and one of its dims.
fn operand_and_dim(dtype: DType) -> impl Strategy<Value = (Operand, usize)> {
    shape(1..=4)
        .prop_filter("non-empty", |s| s.iter().all(|&d| d > 0))
        .prop_flat_map(move |s| {
            let r = s.len();
            (
                operand_of_shape(dtype, s, view_kind(), general_dist()),
                0..r,
            )
        })
}

#[derive(Clone, Debug)]
pub(crate) struct ArgProblem {
    pub(crate) x: Operand,
    pub(crate) dim: usize,
    pub(crate) keepdim: bool,
    pub(crate) min: bool,
    /// Elements overwritten with NaN (by flat index modulo numel), float only.
    pub(crate) nans: Vec<usize>,
}

pub(crate) fn arg_problem(dtype: DType) -> impl Strategy<Value = ArgProblem> {
    (
        operand_and_dim(dtype),
        any::<bool>(),
        any::<bool>(),
        prop_oneof![3 => Just(vec![]), 1 => proptest::collection::vec(0usize..1000, 1..3)],
    )
        .prop_map(|((x, dim), keepdim, min, nans)| ArgProblem {
            x,
            dim,
            keepdim,
            min,
            nans,
        })
}

pub(crate) async fn check_arg(p: &ArgProblem) -> Result<(), TestCaseError> {
    check_arg_on(device(), p).await
}

/// [`check_arg`] on `dev` (the `gpu_plans` device runs the parallel plans).
pub(crate) async fn check_arg_on(dev: &Device, p: &ArgProblem) -> Result<(), TestCaseError> {
    let what = format!(
        "{}(dim {}, keepdim {})",
        if p.min { "argmin" } else { "argmax" },
        p.dim,
        p.keepdim
    );
    let mut vals = p.x.values();
    let n = vals.len();
    // NaNs go in through a where_cond on the device, so the operand's view stays as planned.
    let x = p.x.tensor(dev);
    let x = if p.nans.is_empty() {
        x
    } else {
        let mut mask = vec![0.0f32; n];
        for &k in &p.nans {
            mask[k % n] = 1.0;
            vals[k % n] = f64::NAN;
        }
        let m = ok(&what, Tensor::from_slice(dev, &mask, &p.x.shape))?;
        let nan = ok(&what, Tensor::full(dev, &[], f64::NAN, p.x.dtype))?;
        ok(&what, m.where_cond(&nan, &x))?
    };
    let y = if p.min {
        x.argmin(p.dim as isize, p.keepdim)
    } else {
        x.argmax(p.dim as isize, p.keepdim)
    };
    let y = ok(&what, y)?;
    prop_assert_eq!(y.dtype(), DType::I32);
    let s = &p.x.shape;
    let mut kept = s.clone();
    kept[p.dim] = 1;
    let want: Vec<f64> = (0..reference_numel(&kept))
        .map(|o| {
            let mut c = crate::common::reference::unravel(o, &kept);
            let mut best: Option<(usize, f64)> = None;
            for k in 0..s[p.dim] {
                c[p.dim] = k;
                let v = vals[crate::common::reference::ravel(&c, s)];
                best = match best {
                    Some((_, b)) if b.is_nan() => best,
                    _ if v.is_nan() => Some((k, v)),
                    Some((_, b)) if (p.min && v >= b) || (!p.min && v <= b) => best,
                    _ => Some((k, v)),
                };
            }
            best.map_or(0, |(k, _)| k) as f64
        })
        .collect();
    let got = ok(&what, download_async(&y).await)?;
    let out_shape: Vec<usize> = if p.keepdim {
        kept.clone()
    } else {
        s.iter()
            .enumerate()
            .filter(|&(d, _)| d != p.dim)
            .map(|(_, &v)| v)
            .collect()
    };
    prop_assert_eq!(y.shape(), out_shape.as_slice());
    compare(&what, &kept, &got, &want, |_| 0.0)
}

fn reference_numel(s: &[usize]) -> usize {
    s.iter().product()
}

#[derive(Clone, Debug)]
pub(crate) struct CompareProblem {
    a: Operand,
    /// b's values along the last dim (broadcast over the rest).
    b: Vec<f64>,
    op: usize,
}

const CMP: [CmpOp; 6] = [
    CmpOp::Eq,
    CmpOp::Ne,
    CmpOp::Lt,
    CmpOp::Le,
    CmpOp::Gt,
    CmpOp::Ge,
];

/// Small integers so that equality happens often.
pub(crate) fn compare_problem(dtype: DType) -> impl Strategy<Value = CompareProblem> {
    shape(1..=4)
        .prop_filter("non-empty", |s| s.iter().all(|&d| d > 0))
        .prop_flat_map(move |s| {
            let last = *s.last().unwrap_or(&1);
            (
                operand_of_shape(dtype, s, view_kind(), Just(Dist::SmallInt(-2, 2))),
                proptest::collection::vec((-2i32..=2).prop_map(f64::from), last),
                0usize..6,
            )
        })
        .prop_map(|(a, b, op)| CompareProblem { a, b, op })
}

pub(crate) async fn check_compare(p: &CompareProblem) -> Result<(), TestCaseError> {
    let op = CMP[p.op];
    let what = format!("{op:?}");
    let a = p.a.tensor(device());
    let b = crate::common::upload(device(), &p.b, &[p.b.len()], p.a.dtype);
    let y = ok(&what, a.compare(&b, op))?;
    prop_assert_eq!(y.dtype(), DType::F32);
    let av = p.a.values();
    let last = p.b.len();
    let want: Vec<f64> = av
        .iter()
        .enumerate()
        .map(|(k, &x)| {
            let y = p.b[k % last];
            let r = match op {
                CmpOp::Eq => x == y,
                CmpOp::Ne => x != y,
                CmpOp::Lt => x < y,
                CmpOp::Le => x <= y,
                CmpOp::Gt => x > y,
                CmpOp::Ge => x >= y,
            };
            r as u8 as f64
        })
        .collect();
    let got = fetch_async(&what, &y, &p.a.shape).await?;
    compare(&what, &p.a.shape, &got, &want, |_| 0.0)
}

#[derive(Clone, Debug)]
pub(crate) struct GatherProblem {
    x: Operand,
    dim: usize,
    /// gather: index of shape `ishape`; index_select: 1-D.
    select: bool,
    ishape: Vec<usize>,
    index: Vec<i32>,
    seed: u64,
}

pub(crate) fn gather_problem(dtype: DType) -> impl Strategy<Value = GatherProblem> {
    (operand_and_dim(dtype), any::<bool>(), any::<u64>()).prop_map(|((x, dim), select, seed)| {
        let mut rng = Rng::new(seed);
        let s = &x.shape;
        let ishape: Vec<usize> = if select {
            vec![rng.below(5)]
        } else {
            s.iter()
                .enumerate()
                .map(|(d, &n)| {
                    if d == dim {
                        1 + rng.below(4)
                    } else {
                        1 + rng.below(n)
                    }
                })
                .collect()
        };
        let len = s[dim];
        let index = (0..ishape.iter().product::<usize>())
            .map(|_| rng.below(len) as i32)
            .collect();
        GatherProblem {
            x,
            dim,
            select,
            ishape,
            index,
            seed,
        }
    })
}

pub(crate) async fn check_gather(p: &GatherProblem) -> Result<(), TestCaseError> {
    let what = format!(
        "{}(dim {}, index {:?})",
        if p.select { "index_select" } else { "gather" },
        p.dim,
        p.ishape
    );
    let dtype = p.x.dtype;
    let x = ok(&what, p.x.tensor(device()).requires_grad())?;
    let idx = upload_i32(&p.index, &p.ishape);
    let y = if p.select {
        x.index_select(p.dim as isize, &idx)
    } else {
        x.gather(p.dim as isize, &idx)
    };
    let y = ok(&what, y)?;
    let s = &p.x.shape;
    let out_shape: Vec<usize> = if p.select {
        let mut o = s.clone();
        o[p.dim] = p.ishape[0];
        o
    } else {
        p.ishape.clone()
    };
    prop_assert_eq!(y.shape(), out_shape.as_slice());
    let xv = p.x.values();
    // Where each output reads from, in x's row-major order.
    let src: Vec<usize> = (0..reference_numel(&out_shape))
        .map(|o| {
            let mut c = crate::common::reference::unravel(o, &out_shape);
            let j = if p.select {
                p.index[c[p.dim]]
            } else {
                p.index[o]
            };
            c[p.dim] = j as usize;
            crate::common::reference::ravel(&c, s)
        })
        .collect();
    let want: Vec<f64> = src.iter().map(|&k| xv[k]).collect();
    let got = fetch_async(&what, &y, &out_shape).await?;
    compare(&what, &out_shape, &got, &want, |_| 0.0)?;
    // Backward: d sum(y * w) / dx scatters w into the sources, in order.
    let mut rng = Rng::new(p.seed ^ 0x5eed);
    let w: Vec<f64> = (0..src.len())
        .map(|_| crate::common::round_to_dtype(dtype, (rng.below(9) as f64 - 4.0) * 0.5))
        .collect();
    let tw = crate::common::upload(device(), &w, &out_shape, dtype);
    let loss = ok(&what, y.mul(&tw).and_then(|t| t.sum_all()))?;
    let grads = ok(&what, loss.backward())?;
    let gx = grads
        .get(&x)
        .ok_or_else(|| TestCaseError::fail(format!("{what}: no gradient for the input")))?;
    let mut want = vec![0.0; xv.len()];
    let mut mag = vec![0.0; xv.len()];
    let mut count = vec![0usize; xv.len()];
    for (o, &k) in src.iter().enumerate() {
        want[k] += w[o];
        mag[k] += w[o].abs();
        count[k] += 1;
    }
    let got = fetch_async(&what, gx, s).await?;
    compare(&format!("{what} backward"), s, &got, &want, |i| {
        out_round(dtype, want[i], count[i] as f64 * EPS32 * mag[i])
    })
}

#[derive(Clone, Debug)]
pub(crate) struct CeProblem {
    dtype: DType,
    n: usize,
    c: usize,
    d: usize,
    logits: Vec<f64>,
    target: Vec<i32>,
    weight: Option<Vec<f64>>,
    smoothing: f64,
    reduction: usize,
}

pub(crate) fn ce_problem(dtype: DType) -> impl Strategy<Value = CeProblem> {
    (
        1usize..5,
        1usize..6,
        prop_oneof![Just(1usize), 2usize..4],
        any::<u64>(),
        any::<bool>(),
        prop_oneof![Just(0.0), Just(0.1)],
        0usize..3,
    )
        .prop_map(move |(n, c, d, seed, weighted, smoothing, reduction)| {
            let mut rng = Rng::new(seed);
            let logits = (0..n * c * d)
                .map(|_| crate::common::round_to_dtype(dtype, (rng.unit() - 0.5) * 8.0))
                .collect();
            // About one in five targets ignored (-100).
            let target = (0..n * d)
                .map(|_| {
                    if rng.coin(0.2) {
                        -100
                    } else {
                        rng.below(c) as i32
                    }
                })
                .collect();
            let weight = weighted.then(|| {
                (0..c)
                    .map(|_| {
                        crate::common::round_to_dtype(dtype, 0.25 + rng.below(8) as f64 * 0.25)
                    })
                    .collect()
            });
            CeProblem {
                dtype,
                n,
                c,
                d,
                logits,
                target,
                weight,
                smoothing,
                reduction,
            }
        })
}

/// PyTorch's class-index cross_entropy in f64 (see torch.nn.functional.cross_entropy).
fn ce_reference(p: &CeProblem, x: &[f64]) -> Vec<f64> {
    let (n, c, d) = (p.n, p.c, p.d);
    let w = |k: usize| p.weight.as_ref().map_or(1.0, |w| w[k]);
    let (mut nll, mut smooth, mut denom) = (vec![0.0; n * d], vec![0.0; n * d], 0.0);
    for s in 0..n {
        for j in 0..d {
            let at = |k: usize| x[(s * c + k) * d + j];
            let m = (0..c).map(at).fold(f64::NEG_INFINITY, f64::max);
            let lse = m + (0..c).map(|k| (at(k) - m).exp()).sum::<f64>().ln();
            let t = p.target[s * d + j];
            if t == -100 {
                continue;
            }
            nll[s * d + j] = -w(t as usize) * (at(t as usize) - lse);
            smooth[s * d + j] = -(0..c).map(|k| w(k) * (at(k) - lse)).sum::<f64>();
            denom += w(t as usize);
        }
    }
    let red = |v: Vec<f64>| match p.reduction {
        0 => v,
        1 => vec![v.iter().sum()],
        _ => vec![v.iter().sum::<f64>() / denom],
    };
    let e = p.smoothing;
    red(nll)
        .into_iter()
        .zip(red(smooth))
        .map(|(a, b)| (1.0 - e) * a + e / c as f64 * b)
        .collect()
}

pub(crate) async fn check_ce(p: &CeProblem) -> Result<(), TestCaseError> {
    let what = format!("cross_entropy(reduction {})", p.reduction);
    let dev = device();
    let shape: Vec<usize> = if p.d == 1 {
        vec![p.n, p.c]
    } else {
        vec![p.n, p.c, p.d]
    };
    let tshape: Vec<usize> = if p.d == 1 { vec![p.n] } else { vec![p.n, p.d] };
    let x = ok(
        &what,
        crate::common::upload(dev, &p.logits, &shape, p.dtype).requires_grad(),
    )?;
    let t = upload_i32(&p.target, &tshape);
    let tw = p
        .weight
        .as_ref()
        .map(|w| crate::common::upload(dev, w, &[p.c], p.dtype));
    let o = CrossEntropyOptions {
        weight: tw.as_ref(),
        label_smoothing: p.smoothing,
        reduction: [Reduction::None, Reduction::Sum, Reduction::Mean][p.reduction],
        ..Default::default()
    };
    let y = ok(&what, cross_entropy(&x, &t, &o))?;
    let want = ce_reference(p, &p.logits);
    let got = ok(&what, download_async(&y).await)?;
    let scale = (16 + p.c + p.n * p.d) as f64;
    // f16 logits run the log_softmax in f32 but store it in f16 before the nll: one f16 ulp
    // of |logp| per term.
    let store = if p.dtype == DType::F16 { 1e-3 } else { 0.0 };
    let wmax = p
        .weight
        .as_ref()
        .map_or(1.0, |w| w.iter().cloned().fold(0.0, f64::max));
    let terms = if p.reduction == 0 {
        1.0
    } else {
        (p.n * p.d) as f64
    };
    compare(&what, &[want.len()], &got, &want, |i| {
        let err = scale * EPS32 * (1.0 + want[i].abs()) + store * wmax * terms * 8.0;
        out_round(p.dtype, want[i], err)
    })?;
    if p.reduction == 0 || want[0].is_nan() {
        return Ok(());
    }
    // The input gradient against central differences of the f64 reference.
    let grads = ok(&what, y.backward())?;
    let gx = grads
        .get(&x)
        .ok_or_else(|| TestCaseError::fail(format!("{what}: no gradient for the input")))?;
    let got = ok(&what, download_async(gx).await)?;
    let h = 1e-6;
    let want: Vec<f64> = (0..p.logits.len())
        .map(|k| {
            let mut v = p.logits.clone();
            v[k] += h;
            let up = ce_reference(p, &v)[0];
            v[k] -= 2.0 * h;
            let dn = ce_reference(p, &v)[0];
            (up - dn) / (2.0 * h)
        })
        .collect();
    let gtol = if p.dtype == DType::F16 { 2e-2 } else { 1e-4 };
    compare(&format!("{what} grad"), &shape, &got, &want, |i| {
        gtol * wmax * (1.0 + want[i].abs())
    })
}

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use super::*;
    use crate::common::require_f16;
    use crate::strategies::run_async;

    #[test]
    fn argmax_argmin_f32() {
        run_async(CASES, arg_problem(DType::F32), check_arg);
    }

    #[test]
    fn argmax_argmin_f16() {
        require_f16(device());
        run_async(CASES / 2, arg_problem(DType::F16), check_arg);
    }

    #[test]
    fn compare_f32() {
        run_async(CASES, compare_problem(DType::F32), check_compare);
    }

    #[test]
    fn compare_i32() {
        run_async(CASES, compare_problem(DType::I32), check_compare);
    }

    #[test]
    fn compare_f16() {
        require_f16(device());
        run_async(CASES / 2, compare_problem(DType::F16), check_compare);
    }

    #[test]
    fn gather_index_select_f32() {
        run_async(CASES, gather_problem(DType::F32), check_gather);
    }

    #[test]
    fn gather_index_select_f16() {
        require_f16(device());
        run_async(CASES / 2, gather_problem(DType::F16), check_gather);
    }

    #[test]
    fn cross_entropy_indices_f32() {
        run_async(CASES, ce_problem(DType::F32), check_ce);
    }

    #[test]
    fn cross_entropy_indices_f16() {
        require_f16(device());
        run_async(CASES / 2, ce_problem(DType::F16), check_ce);
    }
}
