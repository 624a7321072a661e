//! Batch normalization: training (through the fused backward kernel) and inference (with a
//! fused activation), autograd gradients against f64 references.
//!
//! Training is checked against the f64 backward evaluated at the statistics the forward saved
//! (what the kernel differentiates), with the bounds of tests/conformance/batchnorm.rs.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use wgtensor::ops::{batch_norm_inference, batch_norm_train, BatchNormOptions, BatchNormState};
use wgtensor::Tensor;

use crate::common::reference::{self as r, bn_dims};
use crate::common::{device, download};
use crate::grad_ref::{act_deriv, u, Want, U};
use crate::ops::{check, f16, leaf, loss, run, Rng, ACTS};

const CASES: u32 = 24;

fn shape(rng: &mut Rng) -> Vec<usize> {
    let mut s = vec![1 + rng.below(3), 1 + rng.below(4)];
    for _ in 0..rng.below(3) {
        s.push(1 + rng.below(4));
    }
    if s[0] * s[2..].iter().product::<usize>() < 2 {
        s[0] = 2;
    }
    s
}

fn train_case(seed: u64) -> Result<(), TestCaseError> {
    let mut rng = Rng::new(seed);
    let shape = shape(&mut rng);
    let (_, c, _) = bn_dims(&shape);
    let n = shape.iter().product::<usize>();
    let m = (n / c) as f64;
    let x = rng.values(n, |r| r.uniform(-2.0, 2.0));
    let gamma = rng.values(c, |r| r.uniform(0.5, 1.5));
    let beta = rng.values(c, |r| r.uniform(-1.0, 1.0));
    let dy = rng.values(n, |r| r.uniform(-1.0, 1.0));
    let (with_gamma, with_beta) = (rng.coin(0.7), rng.coin(0.7));
    let xt = leaf(&x, &shape);
    let gt = leaf(&gamma, &[c]);
    let bt = leaf(&beta, &[c]);
    // The running statistics in the input's dtype (f16 cases too).
    let mut state = BatchNormState::new(device(), c, crate::ops::dtype()).unwrap();
    let out = batch_norm_train(
        &xt,
        rng.coin(0.5).then_some(&mut state),
        &BatchNormOptions {
            weight: with_gamma.then_some(&gt),
            bias: with_beta.then_some(&bt),
            ..Default::default()
        },
    )
    .unwrap();
    let (y, mean, invstd) = (out.y, out.saved.mean().clone(), out.saved.invstd().clone());
    prop_assert!(!mean.is_tracked() && !invstd.is_tracked());
    let grads = loss(&y, &dy).backward().unwrap();
    let (mean, inv) = (download(&mean).unwrap(), download(&invstd).unwrap());
    let g = with_gamma.then_some(&gamma[..]);
    let rf = r::batch_norm_backward(&dy, &x, &shape, &mean, &inv, g);
    // The bounds of the conformance suite's backward check (its module doc), EPS32 = 2U.
    let eps = 2.0 * U;
    let e1: Vec<f64> = (0..c).map(|ch| m * eps * rf.abs_dy[ch]).collect();
    let e_dg: Vec<f64> = (0..c)
        .map(|ch| inv[ch] * (m + 2.0) * eps * rf.abs_dyx[ch] + eps * rf.dgamma[ch].abs())
        .collect();
    let s: usize = shape[2..].iter().product();
    let e_dx: Vec<f64> = (0..n)
        .map(|i| {
            let ch = (i / s) % c;
            let a = g.map_or(1.0, |g| g[ch]).abs() * inv[ch];
            let d = (x[i] - mean[ch]).abs();
            let terms = a * dy[i].abs()
                + a * inv[ch] * rf.dgamma[ch].abs() * d / m
                + a * rf.dbeta[ch].abs() / m;
            a * inv[ch] * d * e_dg[ch] / m + a * e1[ch] / m + 6.0 * eps * terms
        })
        .collect();
    let what = format!("batch_norm_train {shape:?} gamma {with_gamma} beta {with_beta}");
    check(
        &format!("{what}: dx"),
        grads.get(&xt),
        &Want {
            grad: rf.dx,
            tol: e_dx,
        },
    )?;
    if with_gamma {
        check(
            &format!("{what}: dgamma"),
            grads.get(&gt),
            &Want {
                grad: rf.dgamma,
                tol: e_dg,
            },
        )?;
    }
    if with_beta {
        check(
            &format!("{what}: dbeta"),
            grads.get(&bt),
            &Want {
                grad: rf.dbeta,
                tol: e1,
            },
        )?;
    }
    Ok(())
}

fn inference_case(seed: u64) -> Result<(), TestCaseError> {
    let mut rng = Rng::new(seed);
    let shape = shape(&mut rng);
    let (_, c, s) = bn_dims(&shape);
    let n = shape.iter().product::<usize>();
    let x = rng.values(n, |r| r.uniform(-2.0, 2.0));
    let rm = rng.values(c, |r| r.uniform(-0.5, 0.5));
    let rv = rng.values(c, |r| r.uniform(0.5, 2.0));
    let gamma = rng.values(c, |r| r.uniform(0.5, 1.5));
    let beta = rng.values(c, |r| r.uniform(-1.0, 1.0));
    let up = rng.values(n, |r| r.uniform(-1.0, 1.0));
    let act = ACTS[rng.below(ACTS.len())];
    let eps = 1e-5f64;
    let xt = leaf(&x, &shape);
    let gt = leaf(&gamma, &[c]);
    let bt = leaf(&beta, &[c]);
    let (rmt, rvt) = (crate::ops::upload(&rm, &[c]), crate::ops::upload(&rv, &[c]));
    let y = batch_norm_inference(
        &xt,
        &rmt,
        &rvt,
        &BatchNormOptions {
            weight: Some(&gt),
            bias: Some(&bt),
            eps,
            activation: act,
        },
    )
    .unwrap();
    let grads = loss(&y, &up).backward().unwrap();
    let inv: Vec<f64> = rv.iter().map(|v| 1.0 / (v + eps).sqrt()).collect();
    let (mut dx, mut ex) = (vec![0.0; n], vec![0.0; n]);
    let (mut dg, mut mg, mut eg) = (vec![0.0; c], vec![0.0; c], vec![0.0; c]);
    let (mut db, mut mb, mut eb) = (vec![0.0; c], vec![0.0; c], vec![0.0; c]);
    for i in 0..n {
        let ch = (i / s) % c;
        let xhat = (x[i] - rm[ch]) * inv[ch];
        let z = xhat * gamma[ch] + beta[ch];
        // The forward's error in z: a few roundings of each term.
        let dz = 16.0 * u() * ((x[i].abs() + rm[ch].abs()) * inv[ch] * gamma[ch] + beta[ch].abs());
        let (d, e) = act_deriv(act, z, dz);
        let gz = up[i] * d;
        let ez = up[i].abs() * e + 2.0 * u() * gz.abs();
        let a = gamma[ch] * inv[ch];
        dx[i] = gz * a;
        ex[i] = ez * a + 12.0 * u() * (gz * a).abs();
        dg[ch] += gz * xhat;
        mg[ch] += (gz * xhat).abs();
        eg[ch] += ez * xhat.abs() + 12.0 * u() * (gz * xhat).abs();
        db[ch] += gz;
        mb[ch] += gz.abs();
        eb[ch] += ez;
    }
    let cnt = (n / c) as f64;
    let tol = |mg: &[f64], eg: &[f64]| -> Vec<f64> {
        (0..c)
            .map(|k| (cnt + 4.0) * 2.0 * u() * mg[k] + eg[k])
            .collect()
    };
    let what = format!("batch_norm_inference {shape:?} {act:?}");
    check(
        &format!("{what}: dx"),
        grads.get(&xt),
        &Want { grad: dx, tol: ex },
    )?;
    check(
        &format!("{what}: dgamma"),
        grads.get(&gt),
        &Want {
            grad: dg,
            tol: tol(&mg, &eg),
        },
    )?;
    check(
        &format!("{what}: dbeta"),
        grads.get(&bt),
        &Want {
            grad: db,
            tol: tol(&mb, &eb),
        },
    )
}

/// Tracked running statistics would be overwritten in place: refused while grad mode is on,
/// whether or not the input is tracked (native_batch_norm's autograd check), in PyTorch's
/// words; under no_grad they are updated.
#[test]
fn tracked_running_stats_are_refused() {
    let plain = Tensor::from_slice(device(), &[1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    for x in [leaf(&[1.0, 2.0, 3.0, 4.0], &[2, 2]), plain] {
        for var in [false, true] {
            let mut st = BatchNormState::new(device(), 2, wgtensor::DType::F32).unwrap();
            match var {
                false => st.running_mean = st.running_mean.clone().requires_grad().unwrap(),
                true => st.running_var = st.running_var.clone().requires_grad().unwrap(),
            }
            let e = batch_norm_train(&x, Some(&mut st), &BatchNormOptions::default())
                .unwrap_err()
                .to_string();
            let arg = if var { "running_var" } else { "running_mean" };
            assert!(
                e.contains(&format!(
                    "The function 'native_batch_norm' is not differentiable with respect to \
                     argument '{arg}'"
                )),
                "{e}"
            );
            let before = st.running_mean.to_vec::<f32>().unwrap();
            wgtensor::no_grad(|| batch_norm_train(&x, Some(&mut st), &Default::default())).unwrap();
            assert_ne!(st.running_mean.to_vec::<f32>().unwrap(), before);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn batch_norm_train_grads(seed in any::<u64>()) { run(train_case, seed)?; }

    #[test]
    fn batch_norm_inference_grads(seed in any::<u64>()) { run(inference_case, seed)?; }

    #[test]
    fn batch_norm_inference_grads_f16(seed in any::<u64>()) { f16(inference_case, seed)?; }

    /// f16 inputs: the kernel computes in f32 from f16 values (the reference uses the same
    /// rounded values and the saved f32 statistics), so the f32 bounds hold up to each
    /// gradient's final f16 store.
    #[test]
    fn batch_norm_train_grads_f16(seed in any::<u64>()) { f16(train_case, seed)?; }
}

/// Max of `|a - b| / (1 + |b|)` over two downloads.
fn rel_diff(a: &wgtensor::Tensor, b: &wgtensor::Tensor) -> f64 {
    let (a, b) = (download(a).unwrap(), download(b).unwrap());
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs() / (1.0 + y.abs()))
        .fold(0.0, f64::max)
}

/// Training with a fused activation equals the batch norm followed by the activation op: the
/// output, autograd's gradients of x, weight and bias, and the direct `batch_norm_backward`
/// from the saved statistics (which applies the activation's derivative itself).
#[test]
fn train_with_fused_activation_matches_the_composition() {
    use wgtensor::ops::{batch_norm_backward, Activation};
    let mut rng = Rng::new(7);
    let shape = [3, 4, 5];
    let n = 60;
    let x = rng.values(n, |r| r.uniform(-2.0, 2.0));
    let gamma = rng.values(4, |r| r.uniform(0.5, 1.5));
    let beta = rng.values(4, |r| r.uniform(-1.0, 1.0));
    let dy = rng.values(n, |r| r.uniform(-1.0, 1.0));
    for act in ACTS {
        let run_one = |fused: bool| {
            let (xt, gt, bt) = (leaf(&x, &shape), leaf(&gamma, &[4]), leaf(&beta, &[4]));
            let o = BatchNormOptions {
                weight: Some(&gt),
                bias: Some(&bt),
                activation: if fused { act } else { Activation::None },
                ..Default::default()
            };
            let out = batch_norm_train(&xt, None, &o).unwrap();
            let y = if fused {
                out.y.clone()
            } else {
                match act {
                    Activation::None => out.y.clone(),
                    Activation::Relu => out.y.relu().unwrap(),
                    Activation::Gelu => out.y.gelu().unwrap(),
                    Activation::Sigmoid => out.y.sigmoid().unwrap(),
                    Activation::Tanh => out.y.tanh().unwrap(),
                }
            };
            let g = loss(&y, &dy).backward().unwrap();
            let grads = [&xt, &gt, &bt].map(|t| g.get(t).unwrap().clone());
            (xt, gt, y, out.saved, grads)
        };
        let (xt, gt, y, saved, fused) = run_one(true);
        let (_, _, y_ref, _, composed) = run_one(false);
        assert_eq!(saved.activation(), act);
        assert!(rel_diff(&y, &y_ref) < 1e-5, "{act:?}: y");
        for (name, (a, b)) in ["dx", "dweight", "dbias"]
            .iter()
            .zip(fused.iter().zip(&composed))
        {
            assert!(rel_diff(a, b) < 1e-4, "{act:?}: autograd {name}");
        }
        let dyt = crate::ops::upload(&dy, &shape);
        let direct = batch_norm_backward(&dyt, &xt.detach(), Some(&gt.detach()), &saved).unwrap();
        for (name, (a, b)) in ["dx", "dweight", "dbias"].iter().zip(
            [&direct.dx, &direct.dweight, &direct.dbias]
                .into_iter()
                .zip(&composed),
        ) {
            assert!(rel_diff(a, b) < 1e-4, "{act:?}: batch_norm_backward {name}");
        }
    }
}
