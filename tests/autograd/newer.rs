//! Ops added after the autograd core (softmax, pooling, cat/stack/pad, losses): gradients
//! against f64 closed forms, or against the family's own gradient kernel for pooling.

use wgtensor::ops::{
    avg_pool1d, cat, log_softmax, max_pool2d, max_pool2d_backward, pad, softmax, stack,
    AvgPool1dOptions, MaxPool2dOptions, PadMode,
};
use wgtensor::Tensor;

use crate::common::download;
use crate::ops::{leaf, loss, upload};

fn close(what: &str, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
            "{what}[{i}]: {g} vs {w}"
        );
    }
}

fn grad(l: &Tensor, x: &Tensor) -> Vec<f64> {
    download(l.backward().unwrap().get(x).unwrap()).unwrap()
}

#[test]
fn softmax_and_log_softmax() {
    let xv = [0.5, -1.0, 2.0, 0.25, 1.5, -0.5];
    let r = [0.3, -0.7, 1.1, 0.2, -0.4, 0.9];
    for log in [false, true] {
        let x = leaf(&xv, &[2, 3]);
        let y = if log {
            log_softmax(&x, 1)
        } else {
            softmax(&x, 1)
        }
        .unwrap();
        let got = grad(&loss(&y, &r), &x);
        let mut want = vec![0.0; 6];
        for row in 0..2 {
            let e: Vec<f64> = (0..3).map(|j| f64::exp(xv[row * 3 + j])).collect();
            let s: f64 = e.iter().sum();
            let p: Vec<f64> = e.iter().map(|v| v / s).collect();
            let rr = &r[row * 3..row * 3 + 3];
            for j in 0..3 {
                want[row * 3 + j] = if log {
                    rr[j] - p[j] * rr.iter().sum::<f64>()
                } else {
                    p[j] * (rr[j] - (0..3).map(|k| rr[k] * p[k]).sum::<f64>())
                };
            }
        }
        close(if log { "log_softmax" } else { "softmax" }, &got, &want);
    }
}

/// A 0-d input is one element along dim 0: its gradient is the formula's, 0 for finite x
/// and g, NaN where either is not (PyTorch's).
#[test]
fn softmax_of_a_scalar_propagates_nan_in_its_gradient() {
    for log in [false, true] {
        let f = |x: &Tensor| {
            if log {
                log_softmax(x, 0)
            } else {
                softmax(x, 0)
            }
        };
        for (x, seed, nan) in [
            (0.5f32, 2.0f32, false),
            (f32::NAN, 1.0, true),
            (f32::INFINITY, 1.0, true),
            (0.5, f32::NAN, true),
        ] {
            let xl = Tensor::from_slice(crate::common::device(), &[x], &[])
                .unwrap()
                .requires_grad()
                .unwrap();
            let s = Tensor::from_slice(crate::common::device(), &[seed], &[]).unwrap();
            let g = f(&xl).unwrap().backward_with_grad(&s).unwrap();
            let v = download(g.get(&xl).unwrap()).unwrap()[0];
            assert!(
                if nan { v.is_nan() } else { v == 0.0 },
                "log {log} x {x} g {seed}: {v}"
            );
        }
    }
}

#[test]
fn cat_stack_pad() {
    let a = leaf(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let b = leaf(&[5.0, 6.0], &[2, 1]);
    let y = cat(&[&a, &b], 1).unwrap();
    let r = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    let g = loss(&y, &r).backward().unwrap();
    close(
        "cat a",
        &download(g.get(&a).unwrap()).unwrap(),
        &[1.0, 2.0, 4.0, 5.0],
    );
    close("cat b", &download(g.get(&b).unwrap()).unwrap(), &[3.0, 6.0]);

    let c = leaf(&[1.0, 2.0], &[2]);
    let d = leaf(&[3.0, 4.0], &[2]);
    let y = stack(&[&c, &d], 1).unwrap(); // [[1, 3], [2, 4]]
    let g = loss(&y, &[1.0, 2.0, 3.0, 4.0]).backward().unwrap();
    close(
        "stack c",
        &download(g.get(&c).unwrap()).unwrap(),
        &[1.0, 3.0],
    );
    close(
        "stack d",
        &download(g.get(&d).unwrap()).unwrap(),
        &[2.0, 4.0],
    );

    let x = leaf(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let y = pad(&x, &[1, 0, 0, 1], PadMode::Constant, 7.0).unwrap(); // [3, 3]
    let r: Vec<f64> = (0..9).map(f64::from).collect();
    // y[i][j] = x[i][j - 1] for i < 2, j >= 1.
    close("pad", &grad(&loss(&y, &r), &x), &[1.0, 2.0, 4.0, 5.0]);
    // Reflect padding is differentiable too: x = [[1, 2], [3, 4]] padded by 1 on both sides
    // of the last dim reads [x1, x0, x1, x0]; r per output [[0, 1, 2, 3], [4, 5, 6, 7]].
    let y = pad(&x, &[1, 1], PadMode::Reflect, 0.0).unwrap();
    let r: Vec<f64> = (0..8).map(f64::from).collect();
    close(
        "reflect pad",
        &grad(&loss(&y, &r), &x),
        &[1.0 + 3.0, 0.0 + 2.0, 5.0 + 7.0, 4.0 + 6.0],
    );
    assert!(wgtensor::no_grad(|| pad(&x, &[1, 1], PadMode::Reflect, 0.0)).is_ok());
}

#[test]
fn pooling() {
    let xv: Vec<f64> = (0..32).map(|i| ((i * 37) % 11) as f64 - 5.0).collect();
    let x = leaf(&xv, &[2, 1, 4, 4]);
    let o = MaxPool2dOptions::new(2);
    let y = max_pool2d(&x, &o).unwrap();
    let r: Vec<f64> = (0..y.numel()).map(|i| i as f64 * 0.5 - 1.0).collect();
    let got = grad(&loss(&y, &r), &x);
    let want =
        download(&max_pool2d_backward(&upload(&r, y.shape()), &x.detach(), &o).unwrap()).unwrap();
    close("max_pool2d", &got, &want);

    let x1 = leaf(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[1, 1, 6]);
    let y = avg_pool1d(&x1, &AvgPool1dOptions::new(2)).unwrap(); // [1, 1, 3]
    close(
        "avg_pool1d",
        &grad(&loss(&y, &[2.0, 4.0, 6.0]), &x1),
        &[1.0, 1.0, 2.0, 2.0, 3.0, 3.0],
    );
}

#[test]
fn losses_are_differentiable() {
    use wgtensor::ops::loss::{mse_loss, Reduction};
    let x = leaf(&[1.0, 2.0, 3.0], &[3]);
    let t = upload(&[0.0, 2.0, 5.0], &[3]);
    let l = mse_loss(&x, &t, Reduction::Mean).unwrap();
    // d/dx mean((x - t)^2) = 2 (x - t) / n.
    close("mse", &grad(&l, &x), &[2.0 / 3.0, 0.0, -4.0 / 3.0]);
}

/// f16 softmax / log_softmax backward in f32, rounded once, as PyTorch's kernels accumulate
/// in float: each intermediate rounded to f16 lost the small difference `g - sum` (a
/// cross-entropy gradient at a confident target was 0, a softmax gradient lost its sign) or
/// overflowed the sum of a long row.
#[test]
fn f16_softmax_backward_rounds_once() {
    use wgtensor::ops::{cross_entropy, CrossEntropyOptions};
    use wgtensor::DType;
    let dev = crate::common::device();
    crate::common::require_f16(dev);
    let up = |v: &[f64], shape: &[usize]| crate::common::upload(dev, v, shape, DType::F16);
    let f16_of = |v: f64| half::f16::from_f64(v).to_f64();
    let check = |what: &str, got: &[f64], want: &[f64], tol: f64| {
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() <= tol, "{what}[{i}]: {g} vs {w}");
        }
    };
    // Cross entropy at logits [10, 0], target 0: [p0 - 1, p1] = [-4.54e-5, 4.54e-5].
    let x = up(&[10.0, 0.0], &[1, 2]).requires_grad().unwrap();
    let t = Tensor::from_slice(dev, &[0i32], &[1]).unwrap();
    let l = cross_entropy(&x, &t, &CrossEntropyOptions::default()).unwrap();
    let p1 = 1.0 / (1.0 + 10f64.exp());
    check(
        "cross_entropy",
        &grad(&l, &x),
        &[f16_of(-p1), f16_of(p1)],
        1e-7,
    );
    // softmax([0, 0]) against g = [1, 1 + 2^-10]: 0.5 (g - mean g) = -+2^-12.
    let x = up(&[0.0, 0.0], &[2]).requires_grad().unwrap();
    let g = up(&[1.0, 1.0 + 2f64.powi(-10)], &[2]);
    let dx = softmax(&x, 0).unwrap().backward_with_grad(&g).unwrap();
    let e = 2f64.powi(-12);
    check(
        "softmax",
        &download(dx.get(&x).unwrap()).unwrap(),
        &[-e, e],
        1e-7,
    );
    // log_softmax over 70000 equal values, gradient 1 each: 1 - 70000 / 70000 = 0, where an
    // f16 row sum of 70000 is inf.
    let n = 70000;
    let x = up(&vec![0.0; n], &[n]).requires_grad().unwrap();
    let g = up(&vec![1.0; n], &[n]);
    let dx = log_softmax(&x, 0).unwrap().backward_with_grad(&g).unwrap();
    let got = download(dx.get(&x).unwrap()).unwrap();
    check("log_softmax", &got, &vec![0.0; n], 2e-3);
}

/// A product's backward sums over a forward dimension the forward does not bound: A's
/// gradient over the output's width, a batched B's over A's rows. Past the GEMM's K bound
/// (2^24) the backward failed after its forward had run; it now adds chunks of K, as
/// PyTorch's computes any size.
#[test]
fn matmul_backward_past_the_k_bound() {
    use wgtensor::DType;
    let dev = crate::common::device();
    let n = (1 << 24) + 3;
    // dA = dY @ B^T with K = n: sums of B's rows.
    let a = Tensor::from_slice(dev, &[2.0f32, -1.0], &[2, 1])
        .unwrap()
        .requires_grad()
        .unwrap();
    let b = Tensor::full(dev, &[1, n], 0.25, DType::F32).unwrap();
    let y = a.matmul(&b).unwrap();
    assert_eq!(y.shape(), &[2, n]);
    let want = 0.25 * n as f64;
    close("dA", &grad(&y.sum_all().unwrap(), &a), &[want, want]);
    // dB = A^T @ dY with a batched B and K = n (A's rows).
    let a = Tensor::full(dev, &[1, n, 2], 0.5, DType::F32).unwrap();
    let b = Tensor::from_slice(dev, &[1.0f32, 2.0, 3.0, 4.0], &[1, 2, 2])
        .unwrap()
        .requires_grad()
        .unwrap();
    let y = a.matmul(&b).unwrap();
    let half = 0.5 * n as f64;
    close("dB", &grad(&y.sum_all().unwrap(), &b), &[half; 4]);
}

/// binary_cross_entropy_with_logits' gradients are PyTorch's explicit formulas: with
/// `t = pos_weight y`, `dx = w ((t + 1 - y) sigmoid(x) - t)` and
/// `dy = w (pos_weight softplus(-x) - softplus(x))`.
#[test]
fn bce_with_logits_gradients_are_pytorch_formulas() {
    use wgtensor::ops::{binary_cross_entropy_with_logits, BceWithLogitsOptions, Reduction};
    let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
    let sp = |x: f64| x.max(0.0) + (-x.abs()).exp().ln_1p();
    let xv = [-3.0, -0.5, 0.0, 1.5, 4.0, 2.0];
    let yv = [0.0, 1.0, 0.25, 0.5, 1.0, 0.0];
    let (wv, pwv) = ([0.5, 2.0, 1.0], [3.0, 0.5, 1.5]);
    let x = leaf(&xv, &[2, 3]);
    let y = leaf(&yv, &[2, 3]);
    let (w, pw) = (upload(&wv, &[3]), upload(&pwv, &[3]));
    let o = BceWithLogitsOptions {
        weight: Some(&w),
        pos_weight: Some(&pw),
        reduction: Reduction::Sum,
    };
    let l = binary_cross_entropy_with_logits(&x, &y, &o).unwrap();
    let g = l.backward().unwrap();
    let (mut dx, mut dy) = (vec![0.0; 6], vec![0.0; 6]);
    for i in 0..6 {
        let (xi, yi, wi, pi) = (xv[i], yv[i], wv[i % 3], pwv[i % 3]);
        let t = pi * yi;
        dx[i] = wi * ((t + 1.0 - yi) * sig(xi) - t);
        dy[i] = wi * (pi * sp(-xi) - sp(xi));
    }
    close("dx", &download(g.get(&x).unwrap()).unwrap(), &dx);
    close("dy", &download(g.get(&y).unwrap()).unwrap(), &dy);
    // Without options: dx = sigmoid(x) - y, dy = -x.
    let l = binary_cross_entropy_with_logits(&x, &y, &BceWithLogitsOptions::default()).unwrap();
    let g = l.backward().unwrap();
    let n = 6.0;
    let want: Vec<f64> = (0..6).map(|i| (sig(xv[i]) - yv[i]) / n).collect();
    close("dx (mean)", &download(g.get(&x).unwrap()).unwrap(), &want);
    let want: Vec<f64> = xv.iter().map(|x| -x / n).collect();
    close("dy (mean)", &download(g.get(&y).unwrap()).unwrap(), &want);
}

/// In f16 the input gradient at a confident negative (`sigmoid(-10)`, 4.5e-5) survives, where
/// the composed chain rule `(1 - y) - sigmoid(-x)` cancelled to exactly 0.
#[test]
fn f16_bce_with_logits_gradient_does_not_cancel() {
    use wgtensor::ops::{binary_cross_entropy_with_logits, BceWithLogitsOptions, Reduction};
    use wgtensor::DType;
    let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
    let dev = crate::common::device();
    crate::common::require_f16(dev);
    let up = |v: &[f64]| crate::common::upload(dev, v, &[v.len()], DType::F16);
    let xv = [-10.0, -9.0, 10.0, 12.0];
    let x = up(&xv).requires_grad().unwrap();
    let y = up(&[0.0, 0.0, 1.0, 1.0]);
    let o = BceWithLogitsOptions {
        reduction: Reduction::Sum,
        ..Default::default()
    };
    let l = binary_cross_entropy_with_logits(&x, &y, &o).unwrap();
    let got = download(l.backward().unwrap().get(&x).unwrap()).unwrap();
    let f16_of = |v: f64| half::f16::from_f64(v).to_f64();
    let want = [sig(-10.0), sig(-9.0), -sig(-10.0), -sig(-12.0)];
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        // One f16 rounding of sigmoid, one of the difference with y (at y = 1, 1 - 4.5e-5
        // rounds to a step of 2^-11 or 2^-12, as PyTorch's f16 `sigmoid(x) - y` does).
        let tol = if i < 2 { 1e-7 } else { 5e-4 };
        assert!((g - f16_of(w)).abs() <= tol, "f16 dx[{i}]: {g} vs {w}");
        if i < 2 {
            assert!(*g > 0.0, "f16 dx[{i}] must not cancel to 0: {g}");
        }
    }
}

/// pow's gradients multiply the upstream gradient by the whole factor `s x^(s - 1)`, as
/// PyTorch's pow_backward: in f16, `g x^(s - 1)` for sqrt's exponent or `g b` for a tensor
/// exponent overflowed to inf where the gradient itself is finite.
#[test]
fn f16_pow_gradients_take_the_factor_first() {
    use wgtensor::DType;
    let dev = crate::common::device();
    crate::common::require_f16(dev);
    let up = |v: f64| crate::common::upload(dev, &[v], &[1], DType::F16);
    let f16_of = |v: f64| half::f16::from_f64(v).to_f64();
    let rel = |what: &str, got: f64, want: f64| {
        assert!(
            got.is_finite() && (got - want).abs() <= 2e-3 * want.abs(),
            "{what}: {got} vs {want}"
        );
    };
    // sqrt: g 0.5 x^-0.5 = 8000 * 0.5 * 10 = 40000 (g x^-0.5 = 80000 is past f16's max).
    let x = up(0.01).requires_grad().unwrap();
    let xs = f16_of(0.01);
    let g = x
        .pow_scalar(0.5)
        .unwrap()
        .backward_with_grad(&up(8000.0))
        .unwrap();
    let got = download(g.get(&x).unwrap()).unwrap()[0];
    rel("pow_scalar(0.5)", got, 8000.0 * 0.5 * xs.powf(-0.5));
    // rsqrt: 100 * -0.5 x^-1.5 = -50000 (g x^-1.5 = 1e5 overflows).
    let x = up(0.01).requires_grad().unwrap();
    let g = x
        .pow_scalar(-0.5)
        .unwrap()
        .backward_with_grad(&up(100.0))
        .unwrap();
    let got = download(g.get(&x).unwrap()).unwrap()[0];
    rel("pow_scalar(-0.5)", got, 100.0 * -0.5 * xs.powf(-1.5));
    // A tensor exponent: 1e4 (10 * 0.5^9) = 195.3 (g b = 1e5 overflows).
    let a = up(0.5).requires_grad().unwrap();
    let b = up(10.0);
    let g = a.pow(&b).unwrap().backward_with_grad(&up(1e4)).unwrap();
    let got = download(g.get(&a).unwrap()).unwrap()[0];
    rel("pow(a, b)", got, f16_of(1e4) * 10.0 * 0.5f64.powi(9));
}

/// A per-row bias's gradient sums the output gradient over the batch and the columns in one
/// reduction, accumulated in f32: each batch's row sum stored in f16 first overflowed (+inf
/// and -inf, then NaN) where the whole sum, 2048, is finite.
#[test]
fn f16_per_row_bias_gradient_sums_once() {
    use wgtensor::ops::{gemm, Bias, GemmOptions};
    use wgtensor::DType;
    let dev = crate::common::device();
    crate::common::require_f16(dev);
    let n = 2048;
    let a = crate::common::upload(dev, &[0.0, 0.0], &[2, 1, 1], DType::F16);
    let b = crate::common::upload(dev, &vec![0.0; 2 * n], &[2, 1, n], DType::F16);
    let bias = crate::common::upload(dev, &[0.0], &[1], DType::F16)
        .requires_grad()
        .unwrap();
    let o = GemmOptions {
        bias: Some(Bias::PerRow(&bias)),
        ..Default::default()
    };
    let y = gemm(&a, &b, &o).unwrap();
    let mut g = vec![40.0; n];
    g.extend(vec![-39.0; n]);
    let g = crate::common::upload(dev, &g, &[2, 1, n], DType::F16);
    let got = download(y.backward_with_grad(&g).unwrap().get(&bias).unwrap()).unwrap();
    assert_eq!(got, vec![n as f64]);
}
