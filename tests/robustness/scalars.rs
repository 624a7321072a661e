//! Scalar arguments at the edges of f32 (kernels take f32; the API takes f64), and a few
//! entry points that must return errors, not hang or panic: PyTorch's answers where it
//! computes, its errors where it refuses.

use super::{dev, vals};
use wgtensor::nn::{Forward, LeakyReLU};
use wgtensor::ops::{gemm, huber_loss, smooth_l1_loss, GemmOptions, Reduction};
use wgtensor::optim::{Adam, AdamOptions, Sgd, SgdOptions};
use wgtensor::{DType, Tensor};

fn t(v: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_slice(dev(), v, shape).unwrap()
}

/// Loss parameters that round to 0 or inf in f32 behave as PyTorch's kernels, which cast
/// them: smooth_l1 with beta 1e-50 is l1, huber with delta 1e39 is half the squared error.
#[test]
fn loss_parameters_past_f32() {
    let (x, y) = (t(&[1.0, -3.0], &[2]), t(&[0.0, 0.0], &[2]));
    let l = smooth_l1_loss(&x, &y, Reduction::None, 1e-50).unwrap();
    assert_eq!(vals(&l), vec![1.0, 3.0]);
    let l = huber_loss(&x, &y, Reduction::None, 1e39).unwrap();
    assert_eq!(vals(&l), vec![0.5, 4.5]);
    // A subnormal beta (a GPU may flush it to 0) is l1 as well.
    let l = smooth_l1_loss(&x, &y, Reduction::None, 1e-40).unwrap();
    assert_eq!(vals(&l), vec![1.0, 3.0]);
    // Their gradient is smooth_l1's, sign(d) (l1's too) but NaN at a NaN difference, where
    // abs's gives 0 (PyTorch's smooth_l1_backward); beta 0 is l1's.
    let xs = [0.0, 0.5, -0.5, 2.0, f32::NAN, f32::INFINITY];
    for beta in [1e-40, 1e-50, 0.0] {
        let x = t(&xs, &[6]).requires_grad().unwrap();
        let l = smooth_l1_loss(&x, &t(&[0.0; 6], &[6]), Reduction::Sum, beta).unwrap();
        let g = vals(l.backward().unwrap().get(&x).unwrap());
        assert_eq!(g[..4], [0.0, 1.0, -1.0, 1.0], "beta {beta}: {g:?}");
        assert_eq!(g[4].is_nan(), beta != 0.0, "beta {beta}: {g:?}");
        assert_eq!(g[5], 1.0, "beta {beta}: {g:?}");
    }
    if dev().supports_f16() {
        // Never linear in f16: halved before squaring (300^2 overflows f16, 45000 does not).
        let h = |v: &[f32]| t(v, &[1]).to_dtype(DType::F16).unwrap();
        let l = huber_loss(&h(&[300.0]), &h(&[0.0]), Reduction::None, f64::INFINITY).unwrap();
        assert_eq!(vals(&l.to_dtype(DType::F32).unwrap()), vec![44992.0]); // f16(45000)
                                                                           // A clip value past f16's range clamps nothing (no overflow error).
        let g = h(&[3.0]);
        let c = wgtensor::optim::clip_grad_value(&[&g], 1e5).unwrap();
        assert_eq!(vals(&c[0].to_dtype(DType::F32).unwrap()), vec![3.0]);
    }
}

/// smooth_l1 and huber take PyTorch's explicit gradients: NaN where the difference is NaN
/// (not the 0 of abs's gradient), and exact under a large delta (a composed gradient
/// cancelled delta + (m - delta) to 0 at 1e7, and to NaN in f16 past its range).
#[test]
fn kinked_loss_gradients() {
    let y = t(&[0.0, 0.0, 0.0, 0.0], &[4]);
    let x = t(&[f32::NAN, 0.5, -3.0, f32::INFINITY], &[4])
        .requires_grad()
        .unwrap();
    for (l, want) in [
        (
            smooth_l1_loss(&x, &y, Reduction::Sum, 1.0).unwrap(),
            [0.5, -1.0, 1.0],
        ),
        (
            huber_loss(&x, &y, Reduction::Sum, 2.0).unwrap(),
            [0.5, -2.0, 2.0],
        ),
    ] {
        let g = vals(l.backward().unwrap().get(&x).unwrap());
        assert!(g[0].is_nan(), "{g:?}");
        assert_eq!(&g[1..], &want);
    }
    let x = t(&[0.3], &[1]).requires_grad().unwrap();
    let z = t(&[0.0], &[1]);
    let l = huber_loss(&x, &z, Reduction::Sum, 1e7).unwrap();
    assert_eq!(vals(l.backward().unwrap().get(&x).unwrap()), vec![0.3f32]);
    // The target's gradient is the negation, summed back over a broadcast.
    let yb = t(&[0.0], &[1]).requires_grad().unwrap();
    let xb = t(&[0.5, -0.25], &[2]);
    let l = smooth_l1_loss(&xb, &yb, Reduction::Sum, 1.0).unwrap();
    assert_eq!(
        vals(l.backward().unwrap().get(&yb).unwrap()),
        vec![-0.25f32]
    );
    if dev().supports_f16() {
        let h = |v: &[f32]| t(v, &[1]).to_dtype(DType::F16).unwrap();
        let xh = h(&[0.5]).requires_grad().unwrap();
        let l = huber_loss(&xh, &h(&[0.0]), Reduction::Sum, 1e5).unwrap();
        let g = l
            .backward()
            .unwrap()
            .get(&xh)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap();
        assert_eq!(vals(&g), vec![0.5]);
    }
}

/// f16 inputs with f32 targets promote as PyTorch's losses do (their formulas are binary
/// ops): an f32 loss, the input's gradient back in f16.
#[test]
fn losses_promote_mixed_float_dtypes() {
    if !dev().supports_f16() {
        return;
    }
    use wgtensor::ops::{
        binary_cross_entropy_with_logits, kl_div, l1_loss, mse_loss, BceWithLogitsOptions,
        KlDivReduction,
    };
    let x = t(&[1.0, 2.0], &[2])
        .to_dtype(DType::F16)
        .unwrap()
        .requires_grad()
        .unwrap();
    let y = t(&[0.0, 0.5], &[2]);
    let cases = [
        (mse_loss(&x, &y, Reduction::Mean).unwrap(), 1.625),
        (l1_loss(&x, &y, Reduction::Sum).unwrap(), 2.5),
        (smooth_l1_loss(&x, &y, Reduction::Sum, 1.0).unwrap(), 1.5),
        (
            kl_div(&x, &y, KlDivReduction::Sum, true).unwrap(),
            0.5f64.exp() * -1.5 - 1.0,
        ),
    ];
    for (i, (l, want)) in cases.into_iter().enumerate() {
        assert_eq!(l.dtype(), DType::F32, "case {i}");
        assert!(
            (f64::from(vals(&l)[0]) - want).abs() < 1e-6,
            "case {i}: {:?}",
            vals(&l)
        );
        let g = l.backward().unwrap();
        assert_eq!(g.get(&x).unwrap().dtype(), DType::F16, "case {i}");
    }
    let l = binary_cross_entropy_with_logits(&x, &y, &BceWithLogitsOptions::default()).unwrap();
    assert_eq!(l.dtype(), DType::F32);
    // huber_loss computes in the promoted dtype and writes the input's (PyTorch's kernel
    // fills `empty_like(input)`): f16 here, f32 the other way round.
    let l = wgtensor::ops::huber_loss(&x, &y, Reduction::Sum, 1.0).unwrap();
    assert_eq!(l.dtype(), DType::F16);
    assert_eq!(vals(&l.to_dtype(DType::F32).unwrap()), vec![1.5]);
    assert_eq!(l.backward().unwrap().get(&x).unwrap().dtype(), DType::F16);
    let l = wgtensor::ops::huber_loss(&y, &x, Reduction::Sum, 1.0).unwrap();
    assert_eq!((l.dtype(), vals(&l)), (DType::F32, vec![1.5]));
    // Each element's loss is stored in f16 before the mean: 66503.5 is inf there.
    let big = t(&[65504.0, 0.0], &[2]).to_dtype(DType::F16).unwrap();
    let far = t(&[-1000.0, 0.0], &[2]);
    let l = wgtensor::ops::huber_loss(&big, &far, Reduction::Mean, 1.0).unwrap();
    assert_eq!(vals(&l.to_dtype(DType::F32).unwrap()), vec![f32::INFINITY]);
}

/// A beta that rounds to 0 in f32 does not read C (BLAS's beta 0): NaN in C stays out, as
/// in gemm_into. A slope or clamp bound past f32's range is PyTorch's overflow error.
#[test]
fn gemm_beta_slopes_and_bounds_past_f32() {
    let a = t(&[1.0, 2.0], &[1, 2]);
    let b = t(&[3.0, 4.0], &[2, 1]);
    let c = t(&[f32::NAN], &[1, 1]);
    let o = GemmOptions {
        c: Some(&c),
        beta: 1e-50,
        ..Default::default()
    };
    assert_eq!(vals(&gemm(&a, &b, &o).unwrap()), vec![11.0]);
    // C's gradient is PyTorch's grad * beta at beta 0 too: zeros, NaN where the gradient is
    // not finite.
    let cl = t(&[1.0], &[1, 1]).requires_grad().unwrap();
    let o = GemmOptions {
        c: Some(&cl),
        beta: 0.0,
        ..Default::default()
    };
    let y = gemm(&a, &b, &o).unwrap();
    let g = y.backward_with_grad(&t(&[2.0], &[1, 1])).unwrap();
    assert_eq!(vals(g.get(&cl).unwrap()), vec![0.0]);
    let y = gemm(&a, &b, &o).unwrap();
    let g = y.backward_with_grad(&t(&[f32::INFINITY], &[1, 1])).unwrap();
    assert!(vals(g.get(&cl).unwrap())[0].is_nan());
    let x = t(&[2.0, -1.0], &[2]);
    let e = LeakyReLU {
        negative_slope: 1e39,
    }
    .forward(&x)
    .unwrap_err();
    assert!(e
        .to_string()
        .contains("value cannot be converted to type float without overflow"));
    // An infinite or NaN slope computes as PyTorch's kernel (checked conversion lets both
    // through): x * slope below 0 (0 * inf = NaN at 0), and leaky_relu_backward keeps g
    // where x > 0.
    for (slope, want_y, want_g) in [
        (
            f64::INFINITY,
            [2.0, f32::NEG_INFINITY, f32::NAN],
            [1.0, f32::INFINITY, f32::INFINITY],
        ),
        (
            f64::NAN,
            [2.0, f32::NAN, f32::NAN],
            [1.0, f32::NAN, f32::NAN],
        ),
    ] {
        let x = t(&[2.0, -1.0, 0.0], &[3]).requires_grad().unwrap();
        let y = LeakyReLU {
            negative_slope: slope,
        }
        .forward(&x)
        .unwrap();
        let same = |got: Vec<f32>, want: [f32; 3]| {
            got.iter()
                .zip(want)
                .all(|(g, w)| (g.is_nan() && w.is_nan()) || *g == w)
        };
        assert!(same(vals(&y), want_y), "{slope}: {:?}", vals(&y));
        let g = y.sum_all().unwrap().backward().unwrap();
        let gx = vals(g.get(&x).unwrap());
        assert!(same(gx.clone(), want_g), "{slope}: {gx:?}");
    }
    assert!(x.clamp(Some(1e39), None).is_err());
    assert!(x.clamp(None, Some(-1e39)).is_err());
    assert_eq!(
        vals(
            &x.clamp(Some(f64::NEG_INFINITY), Some(f64::INFINITY))
                .unwrap()
        ),
        vec![2.0, -1.0]
    );
}

/// Optimizer errors read as PyTorch's ("invalid lr"), with the range and no 309-digit
/// bounds; a beta just below 1 is accepted (PyTorch: 0 <= beta < 1).
#[test]
fn optimizer_arguments() {
    let p = Tensor::zeros(dev(), &[2], DType::F32)
        .unwrap()
        .requires_grad()
        .unwrap();
    let e = Sgd::new(
        vec![p.clone()],
        SgdOptions {
            lr: -0.1,
            ..Default::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("Invalid learning rate: -0.1") && e.len() < 120,
        "{e}"
    );
    // PyTorch's wording and Python's float repr: 1.0, -1e-08, -0.5.
    let adam_err = |o: AdamOptions| Adam::new(vec![p.clone()], o).unwrap_err().to_string();
    let e = adam_err(AdamOptions {
        betas: (1.0, 0.999),
        ..Default::default()
    });
    assert!(e.contains("Invalid beta parameter at index 0: 1.0"), "{e}");
    let e = adam_err(AdamOptions {
        eps: -1e-8,
        ..Default::default()
    });
    assert!(e.contains("Invalid epsilon value: -1e-08"), "{e}");
    let e = adam_err(AdamOptions {
        weight_decay: -1.0,
        ..Default::default()
    });
    assert!(e.contains("Invalid weight_decay value: -1.0"), "{e}");
    let e = Sgd::new(
        vec![p.clone()],
        SgdOptions {
            momentum: -0.5,
            ..Default::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("Invalid momentum value: -0.5"), "{e}");
    let o = AdamOptions {
        betas: (0.9, 1.0 - f64::EPSILON / 2.0),
        ..Default::default()
    };
    Adam::new(vec![p.clone()], o).unwrap();
    let o = AdamOptions {
        betas: (0.9, 1.0),
        ..Default::default()
    };
    let e = Adam::new(vec![p], o).unwrap_err().to_string();
    assert!(e.contains("[0, 1)"), "{e}");
}

/// arange compares the signs of its bounds and step (their product underflows to -0).
#[test]
fn arange_step_sign_with_tiny_values() {
    assert!(Tensor::arange(dev(), 0.0, 1e-170, -1e-170, DType::F32).is_err());
    assert_eq!(
        Tensor::arange(dev(), 0.0, 3e-170, 1e-170, DType::F32)
            .unwrap()
            .shape(),
        &[3]
    );
    // f16 converts its start and step to f32, checked (PyTorch's accumulate type), and
    // computes in f32; its end stays a double; f32 takes them as doubles.
    if dev().supports_f16() {
        for (s, e, st) in [(0.0, 1.0, 1e39), (-1e39, 0.0, 1e38)] {
            let err = Tensor::arange(dev(), s, e, st, DType::F16).unwrap_err();
            assert!(err.to_string().contains("without overflow"), "{err}");
        }
        let y = Tensor::arange(dev(), 0.0, 1e39, 1e38, DType::F16).unwrap();
        let v = y.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(v.len(), 10);
        assert!(
            v[0] == 0.0 && v[1..].iter().all(|x| *x == f32::INFINITY),
            "{v:?}"
        );
        // start + step * i rounds in f32 first: i = 3 is a tie that f16 rounds to even (3.0),
        // where the f64 value rounds up.
        let y = Tensor::arange(dev(), 0.0, 3.5, 1.0003255754709244, DType::F16).unwrap();
        let v = y.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(v[3], 3.0, "{v:?}");
    }
    assert_eq!(
        Tensor::arange(dev(), 0.0, 1.0, 1e39, DType::F32)
            .unwrap()
            .shape(),
        &[1]
    );
}

/// An owned operator on i32 tensors is refused as the borrowed one, empty or not.
#[test]
fn owned_operators_refuse_i32_as_borrowed_ones() {
    let a = Tensor::zeros(dev(), &[0], DType::I32).unwrap();
    let b = Tensor::zeros(dev(), &[0], DType::I32).unwrap();
    assert!(a.add(&b).is_err());
    assert!((a + &b).is_err());
}

/// Device::submit draws the caller's command iterator before taking the device's lock: an
/// iterator that drops or makes tensors must not deadlock.
#[test]
fn submit_with_an_iterator_that_touches_the_device() {
    let t0 = Tensor::full(dev(), &[256], 1.0, DType::F32).unwrap();
    let enc = dev()
        .wgpu_device()
        .create_command_encoder(&Default::default());
    dev()
        .submit(std::iter::once(enc.finish()).inspect(|_| {
            let _dropped = t0.clone();
            let _x = Tensor::zeros(dev(), &[4], DType::F32).unwrap();
        }))
        .unwrap();
    drop(t0);
    dev().sync().unwrap();
}

/// nn layers: LSTM states checked whole on the layer-by-layer (training, dropout) path as
/// on the one-call path; BatchNorm's public state borrowed elsewhere is an error, not a
/// panic; Embedding's padding row past 2^24 is exactly that row.
#[test]
fn layer_state_checks() {
    use wgtensor::nn::{BatchNorm1d, Embedding, Lstm, Module, RnnConfig};
    let cfg = RnnConfig {
        num_layers: 2,
        dropout: 0.5,
        ..Default::default()
    };
    let mut lstm = Lstm::new(dev(), 3, 4, cfg).unwrap();
    let x = Tensor::zeros(dev(), &[5, 2, 3], DType::F32).unwrap();
    let bad = Tensor::zeros(dev(), &[3, 2, 4], DType::F32).unwrap();
    for training in [true, false] {
        lstm.set_training(training);
        let e = lstm
            .forward_with_state(&x, Some(&bad), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("[2, 2, 4]"), "training {training}: {e}");
    }
    let bn = BatchNorm1d::new(dev(), 2).unwrap();
    let x = Tensor::zeros(dev(), &[3, 2], DType::F32).unwrap();
    let held = bn.0.state.borrow();
    assert!(bn.forward(&x).is_err());
    drop(held);
    bn.forward(&x).unwrap();
    let v = (1 << 24) + 3;
    let p = (1 << 24) + 1;
    let emb = Embedding::new(dev(), v, 1, Some(p as i64)).unwrap();
    let w = vals(&emb.weight.narrow(0, p - 1, 3).unwrap());
    assert!(w[0] != 0.0 && w[1] == 0.0 && w[2] != 0.0, "{w:?}");
}

/// The binary cross entropies keep a tiny loss's digits, as PyTorch's log1p forms: log(1 - x)
/// and log(1 + e^-x) rounded the small term away (0 where PyTorch gives 1e-8 and 2.06e-9),
/// and in f16 the sum's steps of 1e-3 made the loss at logit 4 1.3% high.
#[test]
fn binary_cross_entropies_keep_tiny_losses() {
    use wgtensor::ops::{
        binary_cross_entropy, binary_cross_entropy_with_logits, BceWithLogitsOptions,
    };
    let none = BceWithLogitsOptions {
        reduction: Reduction::None,
        ..Default::default()
    };
    let rel = |got: f32, want: f64, tol: f64| {
        assert!(
            ((got as f64) - want).abs() <= tol * want.abs(),
            "{got} vs {want}"
        );
    };
    let x = t(&[1e-8], &[1]);
    let y = t(&[0.0], &[1]);
    let l = binary_cross_entropy(&x, &y, None, Reduction::None).unwrap();
    rel(vals(&l)[0], -(-1e-8f32 as f64).ln_1p(), 1e-6);
    let x = t(&[20.0, 0.0], &[2]);
    let y = t(&[1.0, 1.0], &[2]);
    let l = vals(&binary_cross_entropy_with_logits(&x, &y, &none).unwrap());
    let sp = |z: f64| z.max(0.0) + (-z.abs()).exp().ln_1p();
    // WGSL's exp is within 3 + 2|x| ulp.
    rel(l[0], sp(-20.0), 45.0 * 6e-8);
    rel(l[1], sp(0.0), 1e-6);
    if dev().supports_f16() {
        let x = t(&[4.0, 8.0], &[2]).to_dtype(DType::F16).unwrap();
        let y = t(&[1.0, 1.0], &[2]).to_dtype(DType::F16).unwrap();
        let l = binary_cross_entropy_with_logits(&x, &y, &none).unwrap();
        let l = vals(&l.to_dtype(DType::F32).unwrap());
        // One f16 rounding of the exact loss (2^-11 relative).
        rel(l[0], sp(-4.0), 1e-3);
        rel(l[1], sp(-8.0), 1e-3);
    }
}

/// F.softplus: log(1 + e^(beta x)) / beta, x itself past the threshold, its gradient
/// sigmoid(beta x) below and 1 above; NaN propagates; nn::Softplus has PyTorch's defaults.
#[test]
fn softplus_beta_and_threshold() {
    use wgtensor::nn::Softplus;
    use wgtensor::ops::softplus;
    let xs = [-30.0f32, -1.0, 0.0, 0.5, 4.0, 9.0, 11.0, 30.0, f32::NAN];
    for (beta, threshold) in [(1.0, 20.0), (2.0, 20.0), (0.5, 3.0), (1.0, 1.0)] {
        let x = t(&xs, &[xs.len()]).requires_grad().unwrap();
        let y = softplus(&x, beta, threshold).unwrap();
        let g = y.sum_all().unwrap().backward().unwrap();
        let (y, g) = (vals(&y), vals(g.get(&x).unwrap()));
        for (i, &xv) in xs.iter().enumerate() {
            let z = beta * xv as f64;
            let (want, dwant) = if z > threshold {
                (xv as f64, 1.0)
            } else {
                let sp = z.max(0.0) + (-z.abs()).exp().ln_1p();
                (sp / beta, 1.0 / (1.0 + (-z).exp()))
            };
            if xv.is_nan() {
                assert!(
                    y[i].is_nan() && g[i].is_nan(),
                    "beta {beta}: {} {}",
                    y[i],
                    g[i]
                );
                continue;
            }
            // WGSL's exp is within 3 + 2|x| ulp (the small term below 0, sigmoid's tail).
            let tol = (8.0 + 2.0 * z.abs()) * 6e-8;
            let close = |got: f32, want: f64| (got as f64 - want).abs() <= tol * want.abs();
            assert!(
                close(y[i], want),
                "beta {beta} threshold {threshold} x {xv}: {} vs {want}",
                y[i]
            );
            assert!(
                close(g[i], dwant),
                "beta {beta} threshold {threshold} x {xv}: grad {} vs {dwant}",
                g[i]
            );
        }
    }
    // log1p's domain edges, as torch.log1p: NaN, -inf at -1, NaN below, inf at inf, -0 kept.
    let e = vals(
        &t(&[f32::NAN, -1.0, -2.0, f32::INFINITY, -0.0], &[5])
            .log1p()
            .unwrap(),
    );
    assert!(e[0].is_nan() && e[2].is_nan(), "{e:?}");
    assert_eq!((e[1], e[3]), (f32::NEG_INFINITY, f32::INFINITY));
    assert!(e[4] == 0.0 && e[4].is_sign_negative());
    let d = Softplus::default();
    assert_eq!((d.beta, d.threshold), (1.0, 20.0));
    let y = vals(&d.forward(&t(&[0.0], &[1])).unwrap());
    assert!((y[0] as f64 - 2f64.ln()).abs() < 1e-7);
    // NaN parameters compute as PyTorch's kernel: NaN for beta, the formula for threshold.
    let nan_beta = vals(&softplus(&t(&[0.0, 30.0], &[2]), f64::NAN, 20.0).unwrap());
    assert!(nan_beta.iter().all(|v| v.is_nan()), "{nan_beta:?}");
    let nan_threshold = vals(&softplus(&t(&[0.0, 30.0], &[2]), 1.0, f64::NAN).unwrap());
    assert!((nan_threshold[0] as f64 - 2f64.ln()).abs() < 1e-7);
    assert!((nan_threshold[1] - 30.0).abs() < 1e-5, "{nan_threshold:?}");
    let h = vals(&wgtensor::ops::hardtanh(&t(&[0.0, 2.0], &[2]), f64::NAN, 1.0).unwrap());
    assert!(h.iter().all(|v| v.is_nan()), "{h:?}");
    // hardtanh_backward with a NaN bound: `x <= NaN` is false, so g passes below max_val.
    for (lo, hi, want) in [(f64::NAN, 1.0, [1.0, 0.0]), (-1.0, f64::NAN, [1.0, 1.0])] {
        let x = t(&[0.5, 2.0], &[2]).requires_grad().unwrap();
        let y = wgtensor::ops::hardtanh(&x, lo, hi).unwrap();
        let g = y.sum_all().unwrap().backward().unwrap();
        assert_eq!(vals(g.get(&x).unwrap()), want, "hardtanh({lo}, {hi})");
    }
    let i = Tensor::from_slice(dev(), &[-1i32, 2], &[2]).unwrap();
    let e = LeakyReLU::default().forward(&i).unwrap_err().to_string();
    assert!(e.starts_with("LeakyReLU"), "{e}");
    let e = wgtensor::nn::Embedding::new(dev(), 10, 4, Some(25))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("Padding_idx must be within num_embeddings"),
        "{e}"
    );
    // beta 0 and a tiny beta: PyTorch's backward gives g / 2 (sigmoid(0)) and g sigmoid(beta
    // x), never g / beta times beta (NaN, inf).
    for beta in [0.0, 1e-40] {
        let x = t(&[3.0, -2.0], &[2]).requires_grad().unwrap();
        let y = softplus(&x, beta, 20.0).unwrap();
        let g = y.sum_all().unwrap().backward().unwrap();
        let gv = vals(g.get(&x).unwrap());
        assert!(
            gv.iter().all(|v| (v - 0.5).abs() <= 1e-7),
            "beta {beta}: {gv:?}"
        );
    }
    // Integer tensors are refused (PyTorch: not implemented for 'Int'), whatever beta.
    let ints = Tensor::from_slice(dev(), &[0i32, 1, -3], &[3]).unwrap();
    assert!(softplus(&ints, 2.0, 20.0).is_err() && softplus(&ints, 1.0, 20.0).is_err());
    // The clamp family names itself when it refuses an integer tensor.
    use wgtensor::ops::{hardsigmoid, hardswish, hardtanh, relu6};
    let named = |r: wgtensor::Result<Tensor>, op: &str| {
        let e = r.unwrap_err().to_string();
        assert!(e.starts_with(&format!("{op}:")), "{e}");
    };
    named(ints.clamp(Some(0.0), None), "clamp");
    named(hardtanh(&ints, -1.0, 1.0), "hardtanh");
    named(relu6(&ints), "relu6");
    named(hardsigmoid(&ints), "hardsigmoid");
    named(hardswish(&ints), "hardswish");
    if dev().supports_f16() {
        use half::f16;
        // f16 tests the threshold in f32, as PyTorch: f16(0.3) is above 0.3, so x comes back.
        let x = Tensor::from_slice(dev(), &[f16::from_f64(0.3)], &[1])
            .unwrap()
            .requires_grad()
            .unwrap();
        let y = softplus(&x, 1.0, 0.3).unwrap();
        let g = y.sum_all().unwrap().backward().unwrap();
        let as32 = |t: &Tensor| vals(&t.to_dtype(DType::F32).unwrap());
        assert_eq!(as32(&y), vec![f16::from_f64(0.3).to_f32()]);
        assert_eq!(as32(g.get(&x).unwrap()), vec![1.0]);
        // pow's exponent is rounded to f16 first, as PyTorch converts it: 10^f16(2.7).
        let ten = Tensor::from_slice(dev(), &[f16::from_f32(10.0)], &[1]).unwrap();
        assert_eq!(as32(&ten.pow_scalar(2.7).unwrap()), vec![500.25]);
        // The same when the buffer is donated (an owned tensor of one handle).
        let owned = Tensor::from_slice(dev(), &[f16::from_f32(10.0)], &[1]).unwrap();
        let p = owned
            .into_scalar_op(wgtensor::ops::ScalarOp::Pow, 2.7)
            .unwrap();
        assert_eq!(as32(&p), vec![500.25]);
        // c10's checked_convert: past f16's max (65519 too, which would round to 65504).
        for big in [1e5, 65519.0] {
            let e = ten.pow_scalar(big).unwrap_err().to_string();
            assert!(
                e.contains("value cannot be converted to type c10::Half without overflow"),
                "{e}"
            );
        }
        // Its gradient takes the exponent as given (PyTorch's pow_backward: 2.7 x^(2.7 - 1),
        // the power in f16 as its kernel): 6789 at x = 100, not 2.699 x^1.699 = 6752.
        let x = Tensor::from_slice(dev(), &[f16::from_f32(100.0)], &[1])
            .unwrap()
            .requires_grad()
            .unwrap();
        let g = x
            .pow_scalar(2.7)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let gv = as32(g.get(&x).unwrap())[0];
        assert!((gv / 6789.0 - 1.0).abs() < 1e-3, "{gv}");
    }
}

/// softplus converts beta and threshold to f32 checked, as PyTorch ("value cannot be
/// converted to type float without overflow"); infinities pass.
#[test]
fn softplus_parameters_past_f32() {
    use wgtensor::ops::softplus;
    let x = t(&[0.0, 1.0], &[2]);
    for (beta, threshold) in [(1e39, 20.0), (1.0, -1e39)] {
        let e = softplus(&x, beta, threshold).unwrap_err().to_string();
        assert!(
            e.contains("value cannot be converted to type float without overflow"),
            "{e}"
        );
    }
    assert!(softplus(&x, 1.0, f64::INFINITY).is_ok());
}

/// f16 hardswish and hardsigmoid compute in f32 and round once, as PyTorch's kernels
/// (`x * min(max(x + 3, 0), 6) / 6` in that order): every f16 value in [-4, 4] against the
/// host's f32 formula, rounded once (a chain of f16 kernels rounds two or three times and
/// differs on about a third of them).
#[test]
fn f16_hard_activations_round_once() {
    use wgtensor::f16;
    if !dev().supports_f16() {
        return;
    }
    let xs: Vec<f16> = (0..=u16::MAX)
        .map(f16::from_bits)
        .filter(|v| v.is_finite() && v.to_f32().abs() <= 4.0)
        .collect();
    let x = Tensor::from_slice(dev(), &xs, &[xs.len()]).unwrap();
    let relu6 = |v: f32| (v + 3.0).clamp(0.0, 6.0);
    type Formula<'a> = &'a dyn Fn(f32) -> f32;
    let cases: [(&str, Tensor, Formula); 2] = [
        ("hardswish", wgtensor::ops::hardswish(&x).unwrap(), &|v| {
            v * relu6(v) / 6.0
        }),
        (
            "hardsigmoid",
            wgtensor::ops::hardsigmoid(&x).unwrap(),
            &|v| relu6(v) / 6.0,
        ),
    ];
    for (name, y, f) in cases {
        let got = y.to_vec::<f16>().unwrap();
        let mut off = 0;
        for (v, g) in xs.iter().zip(&got) {
            let want = f16::from_f32(f(v.to_f32()));
            if g.to_bits() != want.to_bits() {
                off += 1;
                // A device division within its ulps may land on the other side of a tie.
                let ulps = (i32::from(g.to_bits() as i16) - i32::from(want.to_bits() as i16)).abs();
                assert!(
                    ulps <= 1 || (g.to_f32() == 0.0 && want.to_f32() == 0.0),
                    "{name}({v}): {g} against {want}"
                );
            }
        }
        assert!(
            off * 100 <= xs.len(),
            "{name}: {off} of {} values differ",
            xs.len()
        );
    }
}
