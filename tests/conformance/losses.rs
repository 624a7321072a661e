//! Losses against f64 transcriptions of PyTorch's formulas: every reduction, weights,
//! pos_weight, label smoothing, class indices with ignore_index (and gradients against central
//! differences), extreme logits and errors. Shared with the browser suite
//! (tests/browser/conformance.rs), hence the awaited readbacks.

use wgtensor::ops::{
    binary_cross_entropy, binary_cross_entropy_with_logits, cross_entropy_probs, huber_loss,
    kl_div, l1_loss, mse_loss, smooth_l1_loss, BceWithLogitsOptions, CrossEntropyOptions,
    KlDivReduction, Reduction,
};
use wgtensor::Tensor;

fn t(v: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_slice(crate::common::device(), v, shape).unwrap()
}

async fn vals(t: &Tensor) -> Vec<f64> {
    t.to_vec_async::<f32>()
        .await
        .unwrap()
        .into_iter()
        .map(f64::from)
        .collect()
}

fn close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
            "{what}: {got:?} vs {want:?}"
        );
    }
}

fn reduce(v: Vec<f64>, r: Reduction) -> Vec<f64> {
    match r {
        Reduction::None => v,
        Reduction::Sum => vec![v.iter().sum()],
        Reduction::Mean => vec![v.iter().sum::<f64>() / v.len() as f64],
    }
}

const REDUCTIONS: [Reduction; 3] = [Reduction::None, Reduction::Mean, Reduction::Sum];

pub(crate) async fn mse() {
    let x = [0.5f32, -1.0, 2.0, 3.5, 0.0, -2.5];
    let y = [1.0f32, -1.0, 0.0, 3.0, 1.0, 0.5];
    let per: Vec<f64> = x
        .iter()
        .zip(&y)
        .map(|(a, b)| ((a - b) as f64).powi(2))
        .collect();
    for r in REDUCTIONS {
        let got = mse_loss(&t(&x, &[2, 3]), &t(&y, &[2, 3]), r).unwrap();
        close(
            &vals(&got).await,
            &reduce(per.clone(), r),
            &format!("{r:?}"),
        );
    }
    let e = mse_loss(&t(&x, &[6]), &t(&y, &[2, 3]), Reduction::Mean).unwrap_err();
    assert!(e.to_string().starts_with("mse_loss:"), "{e}");
    // Shapes that broadcast are computed on the broadcast, as PyTorch's (which warns): a
    // [3] target against [2, 3], and a [2, 1] input against a [3] target ([2, 3] losses).
    let per_b: Vec<f64> = (0..6).map(|i| ((x[i] - y[i % 3]) as f64).powi(2)).collect();
    let got = mse_loss(&t(&x, &[2, 3]), &t(&y[..3], &[3]), Reduction::None).unwrap();
    assert_eq!(got.shape(), &[2, 3]);
    close(&vals(&got).await, &per_b, "broadcast target");
    let per_c: Vec<f64> = (0..6)
        .map(|i| ((x[i / 3] - y[i % 3]) as f64).powi(2))
        .collect();
    let got = mse_loss(&t(&x[..2], &[2, 1]), &t(&y[..3], &[3]), Reduction::Mean).unwrap();
    close(
        &vals(&got).await,
        &reduce(per_c, Reduction::Mean),
        "broadcast both",
    );
    let empty = Tensor::zeros(crate::common::device(), &[0], wgtensor::DType::F32).unwrap();
    assert!(vals(&mse_loss(&empty, &empty, Reduction::Mean).unwrap()).await[0].is_nan());
    assert_eq!(
        vals(&mse_loss(&empty, &empty, Reduction::Sum).unwrap()).await,
        vec![0.0]
    );
}

pub(crate) async fn bce_with_logits() {
    // Extreme logits must not overflow.
    let x = [0.3f32, -2.0, 100.0, -100.0, 5.0, 0.0];
    let y = [1.0f32, 0.0, 1.0, 1.0, 0.25, 0.5];
    let pw = [2.0f32, 0.5, 3.0];
    let w = [1.0f32, 2.0, 0.5, 1.0, 1.0, 3.0];
    let r = |x: f64, y: f64, pw: f64, w: f64| {
        // PyTorch: (1 - y) x + l * (log1p(exp(-|x|)) + max(-x, 0)), l = 1 + (pw - 1) y.
        let l = 1.0 + (pw - 1.0) * y;
        w * ((1.0 - y) * x + l * ((-x.abs()).exp().ln_1p() + (-x).max(0.0)))
    };
    for red in REDUCTIONS {
        let per: Vec<f64> = (0..6)
            .map(|i| r(x[i] as f64, y[i] as f64, pw[i % 3] as f64, w[i] as f64))
            .collect();
        let (pwt, wt) = (t(&pw, &[3]), t(&w, &[2, 3]));
        let o = BceWithLogitsOptions {
            weight: Some(&wt),
            pos_weight: Some(&pwt),
            reduction: red,
        };
        let got = binary_cross_entropy_with_logits(&t(&x, &[2, 3]), &t(&y, &[2, 3]), &o).unwrap();
        close(&vals(&got).await, &reduce(per, red), &format!("{red:?}"));
    }
    let per: Vec<f64> = (0..6)
        .map(|i| r(x[i] as f64, y[i] as f64, 1.0, 1.0))
        .collect();
    let o = BceWithLogitsOptions {
        reduction: Reduction::None,
        ..Default::default()
    };
    let got = binary_cross_entropy_with_logits(&t(&x, &[6]), &t(&y, &[6]), &o).unwrap();
    close(&vals(&got).await, &per, "plain");
    // A weight or pos_weight must broadcast to the input without growing it: a [3] one on
    // [3, 1] logits is PyTorch's error, not a [3, 3] loss.
    let w3 = t(&pw, &[3]);
    for o in [
        BceWithLogitsOptions {
            weight: Some(&w3),
            ..Default::default()
        },
        BceWithLogitsOptions {
            pos_weight: Some(&w3),
            ..Default::default()
        },
    ] {
        let e = binary_cross_entropy_with_logits(&t(&x[..3], &[3, 1]), &t(&y[..3], &[3, 1]), &o)
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("binary_cross_entropy_with_logits:")
                && e.to_string().contains("[3, 1]"),
            "{e}"
        );
    }
}

pub(crate) async fn cross_entropy_with_probability_targets() {
    // [N = 2, C = 3, L = 2]: the class dim is 1.
    let x = [
        1.0f32, -1.0, 0.5, 2.0, -0.5, 0.0, 3.0, 1.0, 0.0, 0.25, -2.0, 4.0,
    ];
    let y = [
        0.2f32, 1.0, 0.3, 0.0, 0.5, 0.0, 1.0, 0.5, 0.0, 0.25, 0.0, 0.25,
    ];
    let w = [1.0f32, 2.0, 0.5];
    let (n, c, l) = (2, 3, 2);
    let at = |ni: usize, ci: usize, li: usize| (ni * c + ci) * l + li;
    for smoothing in [0.0, 0.1] {
        for weighted in [false, true] {
            let mut per = Vec::new();
            for ni in 0..n {
                for li in 0..l {
                    let m = (0..c)
                        .map(|ci| x[at(ni, ci, li)] as f64)
                        .fold(f64::MIN, f64::max);
                    let lse = m
                        + (0..c)
                            .map(|ci| (x[at(ni, ci, li)] as f64 - m).exp())
                            .sum::<f64>()
                            .ln();
                    let mut s = 0.0;
                    for ci in 0..c {
                        let yv =
                            y[at(ni, ci, li)] as f64 * (1.0 - smoothing) + smoothing / c as f64;
                        let wv = if weighted { w[ci] as f64 } else { 1.0 };
                        s -= wv * yv * (x[at(ni, ci, li)] as f64 - lse);
                    }
                    per.push(s);
                }
            }
            let wt = t(&w, &[3]);
            for red in REDUCTIONS {
                let o = CrossEntropyOptions {
                    weight: weighted.then_some(&wt),
                    label_smoothing: smoothing,
                    ignore_index: -100,
                    reduction: red,
                };
                let got = cross_entropy_probs(&t(&x, &[2, 3, 2]), &t(&y, &[2, 3, 2]), &o).unwrap();
                close(
                    &vals(&got).await,
                    &reduce(per.clone(), red),
                    &format!("{red:?} {smoothing} {weighted}"),
                );
            }
        }
    }
    // An unbatched [C] input; errors name the op.
    let got = cross_entropy_probs(
        &t(&[0.0, 0.0], &[2]),
        &t(&[1.0, 0.0], &[2]),
        &Default::default(),
    )
    .unwrap();
    close(&vals(&got).await, &[2f64.ln()], "unbatched");
    let bad_w = t(&[1.0, 2.0], &[2]);
    let o = CrossEntropyOptions {
        weight: Some(&bad_w),
        ..Default::default()
    };
    let e = cross_entropy_probs(&t(&x, &[2, 3, 2]), &t(&y, &[2, 3, 2]), &o).unwrap_err();
    assert!(e.to_string().starts_with("cross_entropy:"), "{e}");
    let o = CrossEntropyOptions {
        label_smoothing: 2.0,
        ..Default::default()
    };
    assert!(cross_entropy_probs(&t(&x, &[12]), &t(&y, &[12]), &o).is_err());
    // A negative or NaN smoothing is none, as PyTorch tests `> 0` before its bound.
    let plain = cross_entropy_probs(&t(&x, &[12]), &t(&y, &[12]), &Default::default()).unwrap();
    for e in [-0.1, f64::NAN] {
        let o = CrossEntropyOptions {
            label_smoothing: e,
            ..Default::default()
        };
        let got = cross_entropy_probs(&t(&x, &[12]), &t(&y, &[12]), &o).unwrap();
        assert_eq!(vals(&got).await, vals(&plain).await, "label_smoothing {e}");
    }
    // ignore_index is refused with probability targets (PyTorch: "ignore_index is not
    // supported for floating point target"), but not the default -100.
    let o = CrossEntropyOptions {
        ignore_index: 0,
        ..Default::default()
    };
    let e = cross_entropy_probs(&t(&x, &[2, 3, 2]), &t(&y, &[2, 3, 2]), &o).unwrap_err();
    assert!(e.to_string().contains("ignore_index"), "{e}");
    // No classes: Mean is NaN, as PyTorch's mean over an empty input; Sum is 0.
    let empty = Tensor::zeros(crate::common::device(), &[2, 0], wgtensor::DType::F32).unwrap();
    let mean = cross_entropy_probs(&empty, &empty, &Default::default()).unwrap();
    assert!(vals(&mean).await[0].is_nan());
    let o = CrossEntropyOptions {
        reduction: Reduction::Sum,
        ..Default::default()
    };
    assert_eq!(
        vals(&cross_entropy_probs(&empty, &empty, &o).unwrap()).await,
        vec![0.0]
    );
}

/// PyTorch's cross_entropy with class-index targets, in f64: input `[N, C, D]` flattened,
/// targets `[N, D]`.
#[allow(clippy::too_many_arguments)]
fn ce_index_ref(
    x: &[f64],
    n: usize,
    c: usize,
    d: usize,
    target: &[i32],
    weight: Option<&[f64]>,
    ignore: i32,
    eps: f64,
    red: Reduction,
) -> Vec<f64> {
    let w = |k: usize| weight.map_or(1.0, |w| w[k]);
    let mut nll = vec![0.0; n * d];
    let mut smooth = vec![0.0; n * d];
    let mut denom = 0.0;
    for s in 0..n {
        for j in 0..d {
            let at = |k: usize| x[(s * c + k) * d + j];
            let m = (0..c).map(at).fold(f64::NEG_INFINITY, f64::max);
            let lse = m + (0..c).map(|k| (at(k) - m).exp()).sum::<f64>().ln();
            let t = target[s * d + j];
            if t == ignore {
                continue;
            }
            let t = t as usize;
            nll[s * d + j] = -w(t) * (at(t) - lse);
            smooth[s * d + j] = -(0..c).map(|k| w(k) * (at(k) - lse)).sum::<f64>();
            denom += w(t);
        }
    }
    let red_of = |v: Vec<f64>| match red {
        Reduction::None => v,
        Reduction::Sum => vec![v.iter().sum()],
        Reduction::Mean => vec![v.iter().sum::<f64>() / denom],
    };
    red_of(nll)
        .into_iter()
        .zip(red_of(smooth))
        .map(|(a, b)| (1.0 - eps) * a + eps / c as f64 * b)
        .collect()
}

pub(crate) async fn cross_entropy_class_indices_match_pytorch_with_gradients() {
    use wgtensor::ops::cross_entropy;
    // [N=2, C=3, D=2] with one ignored target, and [N=3, C=4].
    let cases: [(usize, usize, usize, Vec<i32>); 2] =
        [(2, 3, 2, vec![0, 2, -100, 1]), (3, 4, 1, vec![3, 0, 3])];
    for (n, c, d, target) in cases {
        let x: Vec<f64> = (0..n * c * d)
            .map(|k| ((k as f64) * 1.37).sin() * 3.0)
            .collect();
        let shape: Vec<usize> = if d == 1 { vec![n, c] } else { vec![n, c, d] };
        let tshape: Vec<usize> = if d == 1 { vec![n] } else { vec![n, d] };
        let w: Vec<f64> = (0..c).map(|k| 0.5 + k as f64 * 0.25).collect();
        let xf: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        let xr: Vec<f64> = xf.iter().map(|&v| v as f64).collect();
        let wf: Vec<f32> = w.iter().map(|&v| v as f32).collect();
        let tw = t(&wf, &[c]);
        let tt = Tensor::from_slice(crate::common::device(), &target, &tshape).unwrap();
        for weighted in [false, true] {
            for eps in [0.0, 0.2] {
                for red in REDUCTIONS {
                    let o = CrossEntropyOptions {
                        weight: weighted.then_some(&tw),
                        label_smoothing: eps,
                        reduction: red,
                        ..Default::default()
                    };
                    let tx = t(&xf, &shape).requires_grad().unwrap();
                    let got = cross_entropy(&tx, &tt, &o).unwrap();
                    let wref = weighted.then_some(&w[..]);
                    let want = ce_index_ref(&xr, n, c, d, &target, wref, -100, eps, red);
                    let what = format!("n{n} c{c} d{d} w{weighted} e{eps} {red:?}");
                    close(&vals(&got).await, &want, &what);
                    if red == Reduction::None {
                        continue;
                    }
                    // Gradient against central differences of the f64 reference.
                    let g = got.backward().unwrap();
                    let gx = vals(g.get(&tx).unwrap()).await;
                    for k in 0..xr.len() {
                        let h = 1e-5;
                        let mut p = xr.clone();
                        p[k] += h;
                        let up = ce_index_ref(&p, n, c, d, &target, wref, -100, eps, red)[0];
                        p[k] -= 2.0 * h;
                        let dn = ce_index_ref(&p, n, c, d, &target, wref, -100, eps, red)[0];
                        let fd = (up - dn) / (2.0 * h);
                        assert!(
                            (gx[k] - fd).abs() < 1e-4,
                            "{what} grad {k}: {} vs {fd}",
                            gx[k]
                        );
                    }
                }
            }
        }
    }
}

pub(crate) async fn nll_loss_ignore_index_weights_and_errors() {
    use wgtensor::ops::{cross_entropy, nll_loss, NllLossOptions};
    let logp = t(&[-0.5, -1.0, -2.0, -0.25, -3.0, -0.1], &[3, 2]);
    let target = Tensor::from_slice(crate::common::device(), &[1i32, 7, 0], &[3]).unwrap();
    let w = t(&[2.0, 3.0], &[2]);
    let o = NllLossOptions {
        weight: Some(&w),
        ignore_index: 7,
        ..Default::default()
    };
    // (3 * 1.0 + 2 * 3.0) / (3 + 2)
    close(
        &vals(&nll_loss(&logp, &target, &o).unwrap()).await,
        &[9.0 / 5.0],
        "mean",
    );
    let o_none = NllLossOptions {
        reduction: Reduction::None,
        ..o
    };
    close(
        &vals(&nll_loss(&logp, &target, &o_none).unwrap()).await,
        &[3.0, 0.0, 6.0],
        "none",
    );
    // A 1-D input takes a 0-d target (a 0-d loss); a [1] target too, as PyTorch's forward,
    // whose backward refuses it in these words (and label smoothing at the forward).
    let x1 = t(&[-0.5, -1.0, -2.0], &[3]);
    let t0 = Tensor::from_slice(crate::common::device(), &[2i32], &[]).unwrap();
    let none = NllLossOptions {
        reduction: Reduction::None,
        ..Default::default()
    };
    let l = nll_loss(&x1, &t0, &none).unwrap();
    assert_eq!(l.shape(), &[] as &[usize]);
    close(&vals(&l).await, &[2.0], "1-D input");
    let t1 = Tensor::from_slice(crate::common::device(), &[2i32], &[1]).unwrap();
    let l = nll_loss(&x1, &t1, &none).unwrap();
    assert_eq!(l.shape(), &[] as &[usize]);
    close(&vals(&l).await, &[2.0], "1-D input, [1] target");
    let ce = cross_entropy(&x1, &t1, &Default::default()).unwrap();
    let want = (-0.5f64).exp() + (-1.0f64).exp() + (-2.0f64).exp();
    close(
        &vals(&ce).await,
        &[want.ln() + 2.0],
        "cross_entropy, [1] target",
    );
    let xr = x1.clone().requires_grad().unwrap();
    for l in [
        nll_loss(&xr, &t1, &none).unwrap(),
        cross_entropy(&xr, &t1, &Default::default()).unwrap(),
    ] {
        let e = l.backward().unwrap_err().to_string();
        assert!(
            e.contains("size mismatch (got input: [3], target: [1])"),
            "{e}"
        );
    }
    let smooth = CrossEntropyOptions {
        label_smoothing: 0.1,
        ..Default::default()
    };
    let e = cross_entropy(&x1, &t1, &smooth).unwrap_err().to_string();
    assert!(
        e.contains("output with shape [] doesn't match the broadcast shape [1]"),
        "{e}"
    );
    // nll_loss's own checks come first there (a weight of another size).
    let w2 = t(&[1.0, 1.0], &[2]);
    let smooth_w = CrossEntropyOptions {
        weight: Some(&w2),
        ..smooth
    };
    let e = cross_entropy(&x1, &t1, &smooth_w).unwrap_err().to_string();
    assert!(
        e.contains("weight tensor should be defined either for all 3 classes"),
        "{e}"
    );
    // Every target ignored: the mean is 0 / 0 = NaN, as PyTorch.
    let all = Tensor::from_slice(crate::common::device(), &[7i32, 7, 7], &[3]).unwrap();
    assert!(vals(&nll_loss(&logp, &all, &o).unwrap()).await[0].is_nan());
    // Out-of-range targets: tests/robustness/indices.rs (on a private device, since the
    // error is reported to the next readback on the device).
    // An unbatched [C] input with a 0-d target.
    let one = Tensor::from_slice(crate::common::device(), &[1i32], &[]).unwrap();
    close(
        &vals(&nll_loss(&t(&[-0.5, -1.5], &[2]), &one, &NllLossOptions::default()).unwrap()).await,
        &[1.5],
        "unbatched",
    );
    // Errors: float target shape, wrong target shape, weight shape, empty batch is fine.
    assert!(nll_loss(
        &logp,
        &Tensor::from_slice(crate::common::device(), &[0i32; 2], &[2]).unwrap(),
        &Default::default()
    )
    .is_err());
    let bad_w = t(&[1.0; 3], &[3]);
    let e = nll_loss(
        &logp,
        &target,
        &NllLossOptions {
            weight: Some(&bad_w),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(e.to_string().starts_with("nll_loss:"), "{e}");
    // A class weight that requires grad is refused while recording (PyTorch has no
    // derivative for it), with or without label smoothing; under no_grad it is a plain weight.
    let tracked_w = t(&[1.0, 2.0], &[2]).requires_grad().unwrap();
    let wo = NllLossOptions {
        weight: Some(&tracked_w),
        ignore_index: 7,
        ..Default::default()
    };
    let e = nll_loss(&logp, &target, &wo).unwrap_err().to_string();
    assert!(
        e.starts_with("nll_loss:")
            && e.contains(
                "The function 'nll_loss_forward' is not differentiable with respect to argument \
                 'weight'. This input cannot have requires_grad True."
            ),
        "{e}"
    );
    for ls in [0.0, 0.1] {
        let co = CrossEntropyOptions {
            weight: Some(&tracked_w),
            label_smoothing: ls,
            ignore_index: 7,
            ..Default::default()
        };
        let e = cross_entropy(&logp, &target, &co).unwrap_err().to_string();
        assert!(
            e.starts_with("cross_entropy:")
                && e.contains("is not differentiable with respect to argument 'weight'"),
            "{e}"
        );
    }
    // Before the kernel's target checks (after nll_loss_nd's batch check), and in
    // nll_loss2d_forward's name for spatial inputs.
    let flat_target = Tensor::from_slice(crate::common::device(), &[0i32; 6], &[3, 2]).unwrap();
    let e = nll_loss(&logp, &flat_target, &wo).unwrap_err().to_string();
    assert!(
        e.contains("'nll_loss_forward' is not differentiable"),
        "{e}"
    );
    let spatial = t(&[0.0; 6], &[3, 2, 1, 1]);
    let e = nll_loss(&spatial, &target, &wo).unwrap_err().to_string();
    assert!(
        e.contains("'nll_loss2d_forward' is not differentiable"),
        "{e}"
    );
    let untracked = wgtensor::autograd::no_grad(|| nll_loss(&logp, &target, &wo)).unwrap();
    let plain_w = t(&[1.0, 2.0], &[2]);
    let plain = nll_loss(
        &logp,
        &target,
        &NllLossOptions {
            weight: Some(&plain_w),
            ignore_index: 7,
            ..Default::default()
        },
    )
    .unwrap();
    close(
        &vals(&untracked).await,
        &vals(&plain).await,
        "no_grad weight",
    );
    // label_smoothing above 1 is refused for class indices too, as PyTorch; a negative or
    // NaN one is no smoothing (PyTorch tests `> 0` before its bound).
    let labels = Tensor::from_slice(crate::common::device(), &[1i32, 0, 0], &[3]).unwrap();
    let o = CrossEntropyOptions {
        label_smoothing: 1.5,
        ..Default::default()
    };
    let e = cross_entropy(&logp, &labels, &o).unwrap_err().to_string();
    assert!(
        e.starts_with("cross_entropy") && e.contains("label_smoothing"),
        "{e}"
    );
    let none = cross_entropy(&logp, &labels, &Default::default()).unwrap();
    for ls in [-0.1, f64::NAN] {
        let o = CrossEntropyOptions {
            label_smoothing: ls,
            ..Default::default()
        };
        let got = cross_entropy(&logp, &labels, &o).unwrap();
        assert_eq!(vals(&got).await, vals(&none).await, "label_smoothing {ls}");
    }
    let empty = cross_entropy(
        &t(&[], &[0, 4]),
        &Tensor::from_slice(crate::common::device(), &[0i32; 0], &[0]).unwrap(),
        &CrossEntropyOptions {
            reduction: Reduction::Sum,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(vals(&empty).await, vec![0.0]);
}

/// l1, smooth L1 (beta 0.5, 1 and 0), Huber (delta 0.5, 2), binary cross-entropy on
/// probabilities (with weight, 0 and 1 inputs: logs clamped at -100) and KL divergence (every
/// reduction, log targets, zero targets) against PyTorch's formulas in f64; argument errors.
pub(crate) async fn pointwise_losses() {
    let x = [0.5f32, -1.0, 2.0, 3.5, 0.0, -2.5];
    let y = [1.0f32, -1.0, 0.0, 3.0, 1.0, 0.5];
    let (xt, yt) = (t(&x, &[2, 3]), t(&y, &[2, 3]));
    let diffs: Vec<f64> = x.iter().zip(&y).map(|(a, b)| (a - b) as f64).collect();
    let per = |f: &dyn Fn(f64) -> f64| diffs.iter().map(|&d| f(d)).collect::<Vec<_>>();
    for r in REDUCTIONS {
        let got = l1_loss(&xt, &yt, r).unwrap();
        close(&vals(&got).await, &reduce(per(&|d| d.abs()), r), "l1");
        for beta in [0.5, 1.0, 0.0] {
            let want = per(&|d: f64| {
                if d.abs() < beta {
                    0.5 * d * d / beta
                } else {
                    d.abs() - 0.5 * beta
                }
            });
            let got = smooth_l1_loss(&xt, &yt, r, beta).unwrap();
            close(
                &vals(&got).await,
                &reduce(want, r),
                &format!("smooth_l1 {beta}"),
            );
        }
        for delta in [0.5, 2.0] {
            let want = per(&|d: f64| {
                if d.abs() < delta {
                    0.5 * d * d
                } else {
                    delta * (d.abs() - 0.5 * delta)
                }
            });
            let got = huber_loss(&xt, &yt, r, delta).unwrap();
            close(
                &vals(&got).await,
                &reduce(want, r),
                &format!("huber {delta}"),
            );
        }
    }
    // Probabilities, two of them exactly 0 and 1, and soft targets.
    let p = [0.2f32, 0.9, 0.0, 1.0, 0.5, 0.7];
    let q = [0.0f32, 1.0, 1.0, 0.0, 0.5, 0.25];
    let w = [1.0f32, 2.0, 0.5];
    let log100 = |v: f64| v.ln().max(-100.0);
    let bce: Vec<f64> = p
        .iter()
        .zip(&q)
        .enumerate()
        .map(|(i, (&a, &b))| {
            let (a, b) = (a as f64, b as f64);
            -(b * log100(a) + (1.0 - b) * log100(1.0 - a)) * w[i % 3] as f64
        })
        .collect();
    let (pt, qt, wt) = (t(&p, &[2, 3]), t(&q, &[2, 3]), t(&w, &[3]));
    for r in REDUCTIONS {
        let got = binary_cross_entropy(&pt, &qt, Some(&wt), r).unwrap();
        close(&vals(&got).await, &reduce(bce.clone(), r), "bce");
    }
    // KL divergence: log-probability inputs, targets with a zero.
    let lp = [-1.2f32, -0.4, -2.0, -0.1, -3.0, -0.7];
    let tg = [0.3f32, 0.0, 0.7, 0.5, 0.25, 0.25];
    let kl: Vec<f64> = lp
        .iter()
        .zip(&tg)
        .map(|(&a, &b)| {
            let (a, b) = (a as f64, b as f64);
            if b == 0.0 {
                0.0
            } else {
                b * (b.ln() - a)
            }
        })
        .collect();
    let (lpt, tgt) = (t(&lp, &[2, 3]), t(&tg, &[2, 3]));
    let sum: f64 = kl.iter().sum();
    for (r, want) in [
        (KlDivReduction::None, kl.clone()),
        (KlDivReduction::Sum, vec![sum]),
        (KlDivReduction::Mean, vec![sum / 6.0]),
        (KlDivReduction::BatchMean, vec![sum / 2.0]),
    ] {
        close(
            &vals(&kl_div(&lpt, &tgt, r, false).unwrap()).await,
            &want,
            "kl_div",
        );
    }
    // log_target: the target as log-probabilities.
    let log_tg: Vec<f32> = lp.iter().map(|v| v * 0.5).collect();
    let want: Vec<f64> = lp
        .iter()
        .zip(&log_tg)
        .map(|(&a, &b)| (b as f64).exp() * (b as f64 - a as f64))
        .collect();
    let got = kl_div(&lpt, &t(&log_tg, &[2, 3]), KlDivReduction::None, true).unwrap();
    close(&vals(&got).await, &want, "kl_div log_target");
    // Errors name the op and the value.
    let e = smooth_l1_loss(&xt, &yt, Reduction::Mean, -1.0)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("smooth_l1_loss") && e.contains("-1"), "{e}");
    let e = huber_loss(&xt, &yt, Reduction::Mean, 0.0)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("huber_loss"), "{e}");
    assert!(l1_loss(&xt, &t(&y, &[6]), Reduction::Mean).is_err());
    let w2 = t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 1, 3]);
    let e = binary_cross_entropy(&pt, &qt, Some(&w2), Reduction::Mean);
    assert!(e
        .unwrap_err()
        .to_string()
        .starts_with("binary_cross_entropy"));
}

/// log and sqrt outside their domains as PyTorch gives them on every backend (WGSL leaves
/// them undefined; SwiftShader's log(0) was -88, which broke binary_cross_entropy's clamp):
/// log(+-0) = -inf, log(x < 0) = NaN, log(inf) = inf; sqrt(x < 0) = NaN, sqrt(-0) = -0.
pub(crate) async fn log_and_sqrt_outside_their_domains() {
    let x = t(
        &[0.0, -0.0, -1.0, f32::INFINITY, f32::NEG_INFINITY, 1.0],
        &[6],
    );
    let l = vals(&x.log().unwrap()).await;
    assert_eq!(&l[..2], &[f64::NEG_INFINITY; 2], "{l:?}");
    assert!(l[2].is_nan() && l[4].is_nan(), "{l:?}");
    assert_eq!((l[3], l[5]), (f64::INFINITY, 0.0), "{l:?}");
    let r = vals(&x.sqrt().unwrap()).await;
    assert_eq!((r[0], r[3], r[5]), (0.0, f64::INFINITY, 1.0), "{r:?}");
    assert!(r[1] == 0.0 && r[1].is_sign_negative(), "{r:?}");
    assert!(r[2].is_nan() && r[4].is_nan(), "{r:?}");
}

#[cfg(not(target_arch = "wasm32"))]
mod native {
    #[test]
    fn log_and_sqrt_outside_their_domains() {
        pollster::block_on(super::log_and_sqrt_outside_their_domains());
    }

    use wgtensor::ops::{binary_cross_entropy, huber_loss, l1_loss, smooth_l1_loss, Reduction};

    #[test]
    fn pointwise_losses() {
        pollster::block_on(super::pointwise_losses());
    }

    /// Gradients as PyTorch's: l1's is sign(d) (0 where d = 0), smooth L1's d / beta inside
    /// and sign(d) outside, and binary cross-entropy's stays finite at probabilities 0 and 1
    /// (the clamped logs' gradients are 0 there, never 0 / 0).
    #[test]
    fn pointwise_loss_gradients() {
        let x = super::t(&[1.0, 2.0, 3.0, 0.25], &[4])
            .requires_grad()
            .unwrap();
        let y = super::t(&[1.0, 3.0, 1.0, 0.0], &[4]);
        let g = l1_loss(&x, &y, Reduction::Sum).unwrap().backward().unwrap();
        assert_eq!(
            g.get(&x).unwrap().to_vec::<f32>().unwrap(),
            vec![0.0, -1.0, 1.0, 1.0]
        );
        let g = smooth_l1_loss(&x, &y, Reduction::Sum, 0.5)
            .unwrap()
            .backward()
            .unwrap();
        assert_eq!(
            g.get(&x).unwrap().to_vec::<f32>().unwrap(),
            vec![0.0, -1.0, 1.0, 0.5]
        );
        let p = super::t(&[0.0, 1.0, 0.5, 0.25], &[4])
            .requires_grad()
            .unwrap();
        let q = super::t(&[0.0, 1.0, 1.0, 0.0], &[4]);
        let g = binary_cross_entropy(&p, &q, None, Reduction::Sum)
            .unwrap()
            .backward()
            .unwrap();
        let gv = g.get(&p).unwrap().to_vec::<f32>().unwrap();
        assert!(gv.iter().all(|v| v.is_finite()), "{gv:?}");
        // d/dp of -(q log p + (1 - q) log(1 - p)) = (p - q) / (p (1 - p)).
        assert!(
            (gv[2] - (-2.0)).abs() < 1e-5 && (gv[3] - 1.0 / 0.75).abs() < 1e-5,
            "{gv:?}"
        );
        // PyTorch's formula at the ends: (p - q) / max(p (1 - p), 1e-12), and the target's
        // gradient -logit(p), unclamped (infinite at 0 and 1) as PyTorch's.
        let p = super::t(&[0.0, 1.0, 0.25], &[3]).requires_grad().unwrap();
        let q = super::t(&[1.0, 0.0, 0.5], &[3]).requires_grad().unwrap();
        let g = binary_cross_entropy(&p, &q, None, Reduction::Sum)
            .unwrap()
            .backward()
            .unwrap();
        let gp = g.get(&p).unwrap().to_vec::<f32>().unwrap();
        assert!(
            (gp[0] / -1e12 - 1.0).abs() < 1e-4 && (gp[1] / 1e12 - 1.0).abs() < 1e-4,
            "{gp:?}"
        );
        let gq = g.get(&q).unwrap().to_vec::<f32>().unwrap();
        assert_eq!((gq[0], gq[1]), (f32::INFINITY, f32::NEG_INFINITY), "{gq:?}");
        assert!(
            (gq[2] - ((0.75f32).ln() - (0.25f32).ln())).abs() < 1e-5,
            "{gq:?}"
        );
        // A weight that requires grad is refused, as PyTorch's missing derivative.
        let w = super::t(&[1.0, 2.0, 3.0], &[3]).requires_grad().unwrap();
        let e = binary_cross_entropy(&p, &q, Some(&w), Reduction::Sum).unwrap_err();
        assert!(
            e.to_string().starts_with("binary_cross_entropy")
                && e.to_string().contains(
                    "The function 'binary_cross_entropy' is not differentiable with respect to \
                     argument 'weight'."
                ),
            "{e}"
        );
        // Outside [0, 1]: an error at the next readback (tests/robustness/indices.rs, on a
        // device of its own, since the report goes to the device's next readback).
        // An infinite difference: smooth L1's gradient is sign(d), Huber's delta sign(d)
        // (PyTorch's), not NaN; Huber with delta = inf is half the squared error.
        let inf = f32::INFINITY;
        let x = super::t(&[inf, -inf, 0.5], &[3]).requires_grad().unwrap();
        let y = super::t(&[0.0, 0.0, 0.0], &[3]);
        let g = smooth_l1_loss(&x, &y, Reduction::Sum, 1.0)
            .unwrap()
            .backward()
            .unwrap();
        assert_eq!(
            g.get(&x).unwrap().to_vec::<f32>().unwrap(),
            vec![1.0, -1.0, 0.5]
        );
        let g = huber_loss(&x, &y, Reduction::Sum, 2.0)
            .unwrap()
            .backward()
            .unwrap();
        assert_eq!(
            g.get(&x).unwrap().to_vec::<f32>().unwrap(),
            vec![2.0, -2.0, 0.5]
        );
        let h = huber_loss(&x.detach(), &y, Reduction::None, f64::INFINITY).unwrap();
        assert_eq!(h.to_vec::<f32>().unwrap(), vec![inf, inf, 0.125]);
    }

    #[test]
    fn mse() {
        pollster::block_on(super::mse());
    }

    #[test]
    fn bce_with_logits() {
        pollster::block_on(super::bce_with_logits());
    }

    #[test]
    fn cross_entropy_with_probability_targets() {
        pollster::block_on(super::cross_entropy_with_probability_targets());
    }

    #[test]
    fn cross_entropy_class_indices_match_pytorch_with_gradients() {
        pollster::block_on(super::cross_entropy_class_indices_match_pytorch_with_gradients());
    }

    #[test]
    fn nll_loss_ignore_index_weights_and_errors() {
        pollster::block_on(super::nll_loss_ignore_index_weights_and_errors());
    }
}

/// f16 class-index losses with `Mean` sum the losses and the counted weights in f32 and round
/// once (PyTorch's half kernels): 8000 losses of 10 (80000 > 65504, f16's largest) and 70000
/// counted targets stay finite.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn nll_mean_f16_sums_in_f32() {
    use wgtensor::ops::{cross_entropy, nll_loss};
    use wgtensor::DType;
    let dev = crate::common::device();
    crate::common::require_f16(dev);
    let run = |n: usize, row: [f32; 2], ce: bool| {
        let v: Vec<f32> = (0..n).flat_map(|_| row).collect();
        let x = Tensor::from_slice(dev, &v, &[n, 2])
            .unwrap()
            .to_dtype(DType::F16)
            .unwrap();
        let target = Tensor::zeros(dev, &[n], DType::I32).unwrap();
        let l = if ce {
            cross_entropy(&x, &target, &Default::default())
        } else {
            nll_loss(&x, &target, &Default::default())
        };
        let l = l.unwrap();
        assert_eq!(l.dtype(), DType::F16);
        l.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap()[0]
    };
    assert_eq!(run(8000, [-10.0, -1.0], false), 10.0);
    assert_eq!(run(70_000, [-0.5, -1.0], false), 0.5);
    // log_softmax([-20, 0])[0] = -20 - ln(1 + e^-20): 20 in f16.
    assert_eq!(run(8000, [-20.0, 0.0], true), 20.0);
}

/// An integer target of the regression losses PyTorch builds as binary ops is promoted to the
/// input's dtype (test_smoothl1loss_intergral_target): the losses and the input's gradient
/// equal those of the float target. kl_div refuses integers as PyTorch's ("Integral inputs
/// not supported").
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn regression_losses_take_integer_targets() {
    use wgtensor::DType;
    let dev = crate::common::device();
    let xv = [0.25f32, -1.5, 2.0, 0.75];
    let tv = [1i32, -3, 0, 8];
    let tf: Vec<f32> = tv.iter().map(|&v| v as f32).collect();
    type Loss = fn(&Tensor, &Tensor, Reduction) -> wgtensor::Result<Tensor>;
    let losses: [(&str, Loss); 4] = [
        ("mse", mse_loss),
        ("l1", l1_loss),
        ("smooth_l1", |x, t, r| smooth_l1_loss(x, t, r, 0.5)),
        ("huber", |x, t, r| huber_loss(x, t, r, 1.0)),
    ];
    for (name, loss) in losses {
        for r in [Reduction::None, Reduction::Mean, Reduction::Sum] {
            let run = |target: Tensor| {
                let x = t(&xv, &[2, 2]).requires_grad().unwrap();
                let l = loss(&x, &target, r).unwrap();
                assert_eq!(l.dtype(), DType::F32, "{name}");
                let v = l.to_vec::<f32>().unwrap();
                let g = l.sum_all().unwrap().backward().unwrap();
                (v, g.get(&x).unwrap().to_vec::<f32>().unwrap())
            };
            let int = run(Tensor::from_slice(dev, &tv, &[2, 2]).unwrap());
            let float = run(t(&tf, &[2, 2]));
            assert_eq!(int, float, "{name} {r:?}");
        }
    }
    let target = Tensor::from_slice(dev, &tv, &[2, 2]).unwrap();
    assert!(kl_div(&t(&xv, &[2, 2]), &target, KlDivReduction::Sum, false).is_err());
}

/// binary_cross_entropy of f16 probabilities with an f32 weight multiplies each f16 loss by
/// the f32 weight and rounds once, as PyTorch's `loss.mul_(weight)`: -ln(0.5) in f16 is
/// 0.69335938, times 1.0004 (1.0 in f16) is 0.69363672, which rounds up to 0.69384766.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn bce_f16_multiplies_by_an_f32_weight_in_f32() {
    use wgtensor::ops::binary_cross_entropy;
    use wgtensor::DType;
    let dev = crate::common::device();
    crate::common::require_f16(dev);
    let x = t(&[0.5, 0.5], &[2]).to_dtype(DType::F16).unwrap();
    let y = t(&[1.0, 0.0], &[2]).to_dtype(DType::F16).unwrap();
    let w = t(&[1.0004, 1.0], &[2]);
    let l = binary_cross_entropy(&x, &y, Some(&w), Reduction::None).unwrap();
    assert_eq!(l.dtype(), DType::F16);
    let v = l.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(v, vec![0.69384766, 0.6933594]);
    // The gradient too: (0.2 - 1) / (0.2 (1 - 0.2)) is -5 in f16, times 1.0004 in f32 rounds
    // to -5.0039062 (times 1.0, the weight in f16, it would stay -5).
    let x = t(&[0.2], &[1])
        .to_dtype(DType::F16)
        .unwrap()
        .requires_grad()
        .unwrap();
    let y = t(&[1.0], &[1]).to_dtype(DType::F16).unwrap();
    let w = t(&[1.0004], &[1]);
    let l = binary_cross_entropy(&x, &y, Some(&w), Reduction::Sum).unwrap();
    let g = l.backward().unwrap();
    let dx = g.get(&x).unwrap().to_dtype(DType::F32).unwrap();
    assert_eq!(dx.to_vec::<f32>().unwrap(), vec![-5.0039062]);
}

/// cross_entropy with probability targets promotes its weight as PyTorch's `input * target *
/// weight`: an f16 or i32 weight joins an f32 loss, and an f32 weight makes an f16 loss f32
/// (PyTorch's values; the f16 products round before the weight, as there).
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn cross_entropy_probs_promotes_its_weight() {
    use wgtensor::DType;
    let dev = crate::common::device();
    crate::common::require_f16(dev);
    let x = t(&[0.5, -1.0, 2.0, 1.5, 0.25, -0.75], &[2, 3]);
    let p = t(&[0.2, 0.3, 0.5, 0.6, 0.1, 0.3], &[2, 3]);
    let w = t(&[1.0004, 2.0, 0.5], &[3]);
    let half = |v: &Tensor| v.to_dtype(DType::F16).unwrap();
    let wi = Tensor::from_slice(dev, &[1i32, 2, 3], &[3]).unwrap();
    type Case = (&'static str, Tensor, Tensor, Tensor, [f64; 2], f64);
    let cases: [Case; 3] = [
        (
            "f16 weight",
            x.clone(),
            p.clone(),
            half(&w),
            [2.3533769, 0.9016390],
            1e-5,
        ),
        (
            "i32 weight",
            x.clone(),
            p.clone(),
            wi,
            [2.6550162, 2.8371434],
            1e-5,
        ),
        (
            "f16 loss",
            half(&x),
            half(&p),
            w.clone(),
            [2.3528614, 0.9013245],
            2e-3,
        ),
    ];
    for (what, x, p, w, want, tol) in cases {
        let o = CrossEntropyOptions {
            weight: Some(&w),
            reduction: Reduction::None,
            ..Default::default()
        };
        let l = cross_entropy_probs(&x, &p, &o).unwrap();
        assert_eq!(l.dtype(), DType::F32, "{what}");
        let got: Vec<f64> = l
            .to_vec::<f32>()
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect();
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g - w).abs() <= tol * w.abs(),
                "{what}: {got:?} vs {want:?}"
            );
        }
    }
    // The f16 input keeps an f16 gradient.
    let xr = half(&x).requires_grad().unwrap();
    let o = CrossEntropyOptions {
        weight: Some(&w),
        ..Default::default()
    };
    let g = cross_entropy_probs(&xr, &half(&p), &o)
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(g.get(&xr).unwrap().dtype(), DType::F16);
}

/// binary_cross_entropy_with_logits of f32 logits and an f16 target is f16, as PyTorch's kernel
/// builds the loss in place in `1 - target`, rounding after each step (PyTorch's values, with
/// a weight and a pos_weight too, whose double roundings differ from one rounding of the f32
/// loss); the logits' gradient stays f32 and the target's f16.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn bce_with_logits_f16_target_gives_an_f16_loss() {
    use wgtensor::DType;
    let dev = crate::common::device();
    crate::common::require_f16(dev);
    let x = t(&[0.3, -2.5, 4.0, 0.0, 7.25, -0.6], &[6]);
    let y = t(&[0.0, 1.0, 0.3, 1.0, 0.7, 0.5], &[6])
        .to_dtype(DType::F16)
        .unwrap();
    let w = t(&[1.0004, 2.0, 0.5, 1.0, 3.1, 0.2], &[6]);
    let plain = BceWithLogitsOptions {
        reduction: Reduction::None,
        ..Default::default()
    };
    let cases = [
        (
            plain,
            [
                0.8544921875,
                2.578125,
                2.818359375,
                0.693359375,
                2.173828125,
                0.7373046875,
            ],
            1.642578125,
        ),
        (
            BceWithLogitsOptions {
                weight: Some(&w),
                ..plain
            },
            [
                0.85498046875,
                5.15625,
                1.4091796875,
                0.693359375,
                6.73828125,
                0.1474609375,
            ],
            2.5,
        ),
        (
            BceWithLogitsOptions {
                pos_weight: Some(&w),
                ..plain
            },
            [
                0.8544921875,
                5.15625,
                2.81640625,
                0.693359375,
                2.17578125,
                0.322509765625,
            ],
            2.00390625,
        ),
    ];
    let f32s = |l: Tensor| {
        assert_eq!(l.dtype(), DType::F16);
        let v = l.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
        v.into_iter().map(f64::from).collect::<Vec<f64>>()
    };
    for (o, none, mean) in cases {
        let l = binary_cross_entropy_with_logits(&x, &y, &o).unwrap();
        assert_eq!(f32s(l), none);
        let o = BceWithLogitsOptions {
            reduction: Reduction::Mean,
            ..o
        };
        assert_eq!(
            f32s(binary_cross_entropy_with_logits(&x, &y, &o).unwrap()),
            [mean]
        );
    }
    let (xr, yr) = (x.requires_grad().unwrap(), y.requires_grad().unwrap());
    let g = binary_cross_entropy_with_logits(&xr, &yr, &Default::default())
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(g.get(&xr).unwrap().dtype(), DType::F32);
    assert_eq!(g.get(&yr).unwrap().dtype(), DType::F16);
}
