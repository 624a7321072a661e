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
            // One value per group in all is refused (F.group_norm's check): two samples then.
            if s[0] * (s[1] / g) * s[2..].iter().product::<usize>() == 1 {
                s[0] = 2;
            }
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

/// Norms at PyTorch's edges: group_norm with one value per group in all is refused
/// (F.group_norm's batch-size check); nn::GroupNorm without affine takes any channel count
/// its groups divide; rms_norm with an f32 weight on f16 activations computes in f32
/// (PyTorch's fallback); f16 batch-norm inference's backward takes its constants in f32
/// (a variance plus eps in f16's subnormal range lost most of its digits).
#[test]
fn norm_edges_follow_pytorch() {
    use wgtensor::nn::{Forward, GroupNorm, GroupNormConfig, RMSNorm};
    use wgtensor::ops::{batch_norm_inference, BatchNormOptions};
    use wgtensor::DType;
    let dev = crate::common::device();
    let x = Tensor::from_slice(dev, &[1.0f32, 2.0, 3.0, 4.0], &[1, 4]).unwrap();
    assert!(group_norm(&x, 4, None, None, 1e-5).is_err());
    assert!(group_norm(&x, 2, None, None, 1e-5).is_ok());
    let cfg = GroupNormConfig {
        affine: false,
        ..Default::default()
    };
    let gn = GroupNorm::with_config(dev, 2, 4, cfg).unwrap();
    let x6 = wgtensor::ops::randn(dev, &[2, 6, 3], DType::F32).unwrap();
    assert_eq!(gn.forward(&x6).unwrap().shape(), &[2, 6, 3]);
    if !dev.supports_f16() {
        return;
    }
    let norm = RMSNorm::new(dev, &[4]).unwrap();
    let x = wgtensor::ops::randn(dev, &[3, 4], DType::F32).unwrap();
    let want = norm.forward(&x).unwrap().to_vec::<f32>().unwrap();
    let got = norm.forward(&x.to_dtype(DType::F16).unwrap()).unwrap();
    assert_eq!(got.dtype(), DType::F16);
    for (g, w) in got
        .to_dtype(DType::F32)
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .zip(&want)
    {
        assert!((g - w).abs() <= 2e-3 * (1.0 + w.abs()), "{g} vs {w}");
    }
    // Inference batch norm in f16, running_var 0 and eps 1e-7: dx = gamma / sqrt(1e-7).
    let h = |v: &[f32], s: &[usize]| {
        Tensor::from_slice(dev, v, s)
            .unwrap()
            .to_dtype(DType::F16)
            .unwrap()
    };
    let x = h(&[0.5, -0.25], &[2, 1]).requires_grad().unwrap();
    let gamma = h(&[0.5], &[1]).requires_grad().unwrap();
    let (rm, rv) = (h(&[0.0], &[1]), h(&[0.0], &[1]));
    let o = BatchNormOptions {
        weight: Some(&gamma),
        eps: 1e-7,
        ..Default::default()
    };
    let y = batch_norm_inference(&x, &rm, &rv, &o).unwrap();
    let g = y.sum_all().unwrap().backward().unwrap();
    let f32s = |t: &Tensor| t.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
    let dx = f32s(g.get(&x).unwrap());
    let want = 0.5 / 1e-7f64.sqrt();
    for v in dx {
        assert!((f64::from(v) - want).abs() <= 2e-3 * want, "{v} vs {want}");
    }
    let dg = f32s(g.get(&gamma).unwrap());
    let want = 0.25 / 1e-7f64.sqrt();
    assert!(
        (f64::from(dg[0]) - want).abs() <= 2e-3 * want,
        "{dg:?} vs {want}"
    );
}
