//! Losses against f64 transcriptions of PyTorch's formulas, every reduction, weights,
//! pos_weight, label smoothing, extreme logits and errors.
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

use wgtensor::ops::{
    binary_cross_entropy_with_logits, cross_entropy_probs, mse_loss, BceWithLogitsOptions,
    CrossEntropyOptions, Reduction,
};
use wgtensor::{Device, Tensor};

fn dev() -> &'static Device {
    static DEV: std::sync::OnceLock<Device> = std::sync::OnceLock::new();
    DEV.get_or_init(|| Device::new().expect("device"))
}

fn t(v: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_slice(dev(), v, shape).unwrap()
}

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f32>()
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

#[test]
fn mse() {
    let x = [0.5f32, -1.0, 2.0, 3.5, 0.0, -2.5];
    let y = [1.0f32, -1.0, 0.0, 3.0, 1.0, 0.5];
    let per: Vec<f64> = x
        .iter()
        .zip(&y)
        .map(|(a, b)| ((a - b) as f64).powi(2))
        .collect();
    for r in REDUCTIONS {
        let got = mse_loss(&t(&x, &[2, 3]), &t(&y, &[2, 3]), r).unwrap();
        close(&vals(&got), &reduce(per.clone(), r), &format!("{r:?}"));
    }
    let e = mse_loss(&t(&x, &[6]), &t(&y, &[2, 3]), Reduction::Mean).unwrap_err();
    assert!(e.to_string().starts_with("mse_loss:"), "{e}");
    let empty = Tensor::zeros(dev(), &[0], wgtensor::DType::F32).unwrap();
    assert!(vals(&mse_loss(&empty, &empty, Reduction::Mean).unwrap())[0].is_nan());
    assert_eq!(
        vals(&mse_loss(&empty, &empty, Reduction::Sum).unwrap()),
        vec![0.0]
    );
}

#[test]
fn bce_with_logits() {
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
        close(&vals(&got), &reduce(per, red), &format!("{red:?}"));
    }
    let per: Vec<f64> = (0..6)
        .map(|i| r(x[i] as f64, y[i] as f64, 1.0, 1.0))
        .collect();
    let o = BceWithLogitsOptions {
        reduction: Reduction::None,
        ..Default::default()
    };
    let got = binary_cross_entropy_with_logits(&t(&x, &[6]), &t(&y, &[6]), &o).unwrap();
    close(&vals(&got), &per, "plain");
}

#[test]
fn cross_entropy_with_probability_targets() {
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
                    reduction: red,
                };
                let got = cross_entropy_probs(&t(&x, &[2, 3, 2]), &t(&y, &[2, 3, 2]), &o).unwrap();
                close(
                    &vals(&got),
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
    close(&vals(&got), &[2f64.ln()], "unbatched");
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
}
