//! layer_norm, group_norm, rms_norm and silu: autograd gradients (through the fused backward
//! kernels) against f64 central finite differences of the host forward of
//! tests/common/norm_ref.rs, for x, the weight and the bias. The loss is `sum(y * r)`.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use wgtensor::ops::{group_norm, layer_norm, rms_norm};
use wgtensor::Tensor;

use crate::common::norm_ref::{group_geom, norm_forward, trailing_geom, NormGeom};
use crate::grad_ref::Want;
use crate::ops::{check, leaf, loss, run, Rng};

const CASES: u32 = 16;

#[derive(Clone, Copy, Debug)]
enum Kind {
    Layer(usize),
    Rms(usize),
    Group(usize),
}

fn geom(kind: Kind, shape: &[usize]) -> NormGeom {
    match kind {
        Kind::Layer(k) => trailing_geom(shape, k, false),
        Kind::Rms(k) => trailing_geom(shape, k, true),
        Kind::Group(g) => group_geom(shape, g),
    }
}

/// Central differences of `f` at `v`, each coordinate stepped by `h`.
fn central(v: &[f64], f: impl Fn(&[f64]) -> f64) -> Vec<f64> {
    let h = 1e-5;
    (0..v.len())
        .map(|i| {
            let mut p = v.to_vec();
            p[i] += h;
            let lp = f(&p);
            p[i] -= 2.0 * h;
            (lp - f(&p)) / (2.0 * h)
        })
        .collect()
}

fn want(grad: Vec<f64>) -> Want {
    let scale = grad.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let tol = vec![1e-4 * (1.0 + scale); grad.len()];
    Want { grad, tol }
}

fn norm_case(seed: u64) -> Result<(), TestCaseError> {
    let mut rng = Rng::new(seed);
    let (shape, kind) = match rng.below(3) {
        0 | 1 => {
            let s = rng.shape(1, 3, 5);
            let k = 1 + rng.below(s.len());
            let kind = if rng.coin(0.5) {
                Kind::Layer(k)
            } else {
                Kind::Rms(k)
            };
            (s, kind)
        }
        _ => {
            let g = 1 + rng.below(3);
            let mut s = vec![1 + rng.below(2), g * (1 + rng.below(3))];
            s.extend(rng.shape(0, 2, 3));
            (s, Kind::Group(g))
        }
    };
    let g = geom(kind, &shape);
    let n: usize = shape.iter().product();
    let c = g.channels;
    let x = rng.values(n, |r| r.uniform(-2.0, 2.0));
    let w = rng.values(c, |r| r.uniform(0.5, 1.5));
    let b = rng.values(c, |r| r.uniform(-1.0, 1.0));
    let up = rng.values(n, |r| r.uniform(-1.0, 1.0));
    let with_w = rng.coin(0.7);
    let with_b = !matches!(kind, Kind::Rms(_)) && rng.coin(0.7);
    let eps = 1e-3;
    let ps: Vec<usize> = match kind {
        Kind::Layer(k) | Kind::Rms(k) => shape[shape.len() - k..].to_vec(),
        Kind::Group(_) => vec![c],
    };
    let (xt, wt, bt) = (leaf(&x, &shape), leaf(&w, &ps), leaf(&b, &ps));
    let (wo, bo) = (with_w.then_some(&wt), with_b.then_some(&bt));
    let y: Tensor = match kind {
        Kind::Layer(k) => layer_norm(&xt, &shape[shape.len() - k..], wo, bo, eps),
        Kind::Rms(k) => rms_norm(&xt, &shape[shape.len() - k..], wo, Some(eps)),
        Kind::Group(gr) => group_norm(&xt, gr, wo, bo, eps),
    }
    .unwrap();
    let grads = loss(&y, &up).backward().unwrap();
    let host = |x: &[f64], w: &[f64], b: &[f64]| -> f64 {
        let f = norm_forward(&g, x, with_w.then_some(w), with_b.then_some(b), eps);
        f.y.iter().zip(&up).map(|(a, r)| a * r).sum()
    };
    let what = format!("{kind:?} {shape:?} weight {with_w} bias {with_b}");
    check(
        &format!("{what}: dx"),
        grads.get(&xt),
        &want(central(&x, |v| host(v, &w, &b))),
    )?;
    if with_w {
        check(
            &format!("{what}: dweight"),
            grads.get(&wt),
            &want(central(&w, |v| host(&x, v, &b))),
        )?;
    }
    if with_b {
        check(
            &format!("{what}: dbias"),
            grads.get(&bt),
            &want(central(&b, |v| host(&x, &w, v))),
        )?;
    }
    Ok(())
}

/// silu's gradient against finite differences of x * sigmoid(x) (the analytic check is in
/// ops.rs's unary cases).
fn silu_case(seed: u64) -> Result<(), TestCaseError> {
    let mut rng = Rng::new(seed);
    let shape = rng.shape(0, 3, 5);
    let n: usize = shape.iter().product();
    let x = rng.values(n, |r| r.uniform(-8.0, 8.0));
    let up = rng.values(n, |r| r.uniform(-1.0, 1.0));
    let xt = leaf(&x, &shape);
    let grads = loss(&xt.silu().unwrap(), &up).backward().unwrap();
    let silu = |v: f64| v / (1.0 + (-v).exp());
    let grad: Vec<f64> = (0..n)
        .map(|i| up[i] * (silu(x[i] + 1e-6) - silu(x[i] - 1e-6)) / 2e-6)
        .collect();
    check(&format!("silu {shape:?}"), grads.get(&xt), &want(grad))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn norm_grads_match_finite_differences(seed in any::<u64>()) { run(norm_case, seed)?; }

    #[test]
    fn silu_grads_match_finite_differences(seed in any::<u64>()) { run(silu_case, seed)?; }
}
