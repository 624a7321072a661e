//! pow (scalar and tensor exponents, PyTorch's special cases), clamp, the scalar-op methods,
//! ones / arange / linspace / *_like, multi-dim reductions and the std::ops operators.
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

use wgtensor::{DType, Device, Tensor};

fn dev() -> &'static Device {
    static DEV: std::sync::OnceLock<Device> = std::sync::OnceLock::new();
    DEV.get_or_init(|| Device::new().expect("device"))
}

fn t(v: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_slice(dev(), v, shape).unwrap()
}

fn vals(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

fn close(got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        let ok = (g.is_nan() && w.is_nan())
            || (*g as f64 == *w)
            || ((*g as f64 - w).abs() <= 1e-5 * w.abs().max(1.0));
        assert!(ok, "{got:?} vs {want:?}");
    }
}

#[test]
fn pow_follows_pytorch() {
    let x = t(&[2.0, -2.0, 0.0, -0.0, 9.0, f32::NAN, -8.0, 1.5], &[8]);
    close(
        &vals(&x.pow_scalar(2.0).unwrap()),
        &[4.0, 4.0, 0.0, 0.0, 81.0, f64::NAN, 64.0, 2.25],
    );
    close(
        &vals(&x.pow_scalar(3.0).unwrap()),
        &[8.0, -8.0, 0.0, 0.0, 729.0, f64::NAN, -512.0, 3.375],
    );
    close(
        &vals(&x.pow_scalar(0.5).unwrap()),
        &[
            2f64.sqrt(),
            f64::NAN,
            0.0,
            0.0,
            3.0,
            f64::NAN,
            f64::NAN,
            1.5f64.sqrt(),
        ],
    );
    // x^0 = 1 even for NaN; 0^-1 = inf, (-0)^-1 = -inf.
    close(&vals(&x.pow_scalar(0.0).unwrap()), &[1.0; 8]);
    let r = vals(&x.pow_scalar(-1.0).unwrap());
    assert_eq!((r[2], r[3]), (f32::INFINITY, f32::NEG_INFINITY));
    // Tensor exponents broadcast.
    let e = t(&[2.0, 3.0], &[2, 1]);
    let b = t(&[2.0, -3.0, 0.5], &[1, 3]);
    close(
        &vals(&b.pow(&e).unwrap()),
        &[4.0, 9.0, 0.25, 8.0, -27.0, 0.125],
    );
    // C99's special values (Rust's powf follows them, as PyTorch's pow does): 1^e = 1 for
    // every e, (-1)^(+-inf) = 1, (-inf)^e by e's sign and parity, |x| against +-inf.
    let (inf, nan) = (f32::INFINITY, f32::NAN);
    let bases = [1.0f32, -1.0, -inf, inf, 0.5, -0.5, 2.0, -2.0, 0.0, -0.0];
    let exps = [nan, inf, -inf, 0.5, -0.5, 3.0, -3.0, 2.0, -2.0, 1e30];
    let bt = t(&bases, &[bases.len(), 1]);
    let et = t(&exps, &[1, exps.len()]);
    let got = vals(&bt.pow(&et).unwrap());
    for (i, &x) in bases.iter().enumerate() {
        for (j, &e) in exps.iter().enumerate() {
            let (g, w) = (got[i * exps.len() + j], x.powf(e));
            let same = (g.is_nan() && w.is_nan())
                || (g == w && g.is_sign_negative() == w.is_sign_negative())
                || (g - w).abs() <= 1e-6 * w.abs();
            assert!(same, "{x}^{e}: {g}, C99 {w}");
        }
    }
    // d(x^0)/dx is zeros, even where the incoming gradient is not finite (PyTorch's
    // zeros_like, not g * 0).
    let xl = t(&[2.0, 0.0], &[2]).requires_grad().unwrap();
    let y = xl
        .pow_scalar(0.0)
        .unwrap()
        .mul_scalar(f64::INFINITY)
        .unwrap();
    let g = y.sum_all().unwrap().backward().unwrap();
    assert_eq!(vals(g.get(&xl).unwrap()), vec![0.0, 0.0]);
    // d(a^b)/db = a^b ln(a) is 0 at a zero base only where b >= 0; a negative exponent keeps
    // the infinite term (PyTorch's pow_backward_exponent): +0^-1 = inf times ln(0) = -inf.
    let a = t(&[0.0, 0.0, 0.0, 2.0], &[4]);
    let b = t(&[-1.0, 0.0, 2.0, 3.0], &[4]).requires_grad().unwrap();
    let g = a.pow(&b).unwrap().sum_all().unwrap().backward().unwrap();
    let gb = vals(g.get(&b).unwrap());
    assert_eq!(gb[..3], [f32::NEG_INFINITY, 0.0, 0.0], "{gb:?}");
    assert!((gb[3] - 8.0 * 2f32.ln()).abs() < 1e-5, "{gb:?}");
    let scalar = vals(&bt.pow_scalar(f64::NAN).unwrap());
    assert_eq!(scalar[0], 1.0);
    assert!(scalar[1..].iter().all(|v| v.is_nan()));
}

#[test]
fn clamp_and_scalar_methods() {
    let x = t(&[-3.0, -0.5, 0.0, 0.5, 3.0, f32::NAN], &[6]);
    close(
        &vals(&x.clamp(Some(-1.0), Some(1.0)).unwrap()),
        &[-1.0, -0.5, 0.0, 0.5, 1.0, f64::NAN],
    );
    close(
        &vals(&x.clamp(Some(0.0), None).unwrap()),
        &[0.0, 0.0, 0.0, 0.5, 3.0, f64::NAN],
    );
    close(
        &vals(&x.clamp(None, Some(0.0)).unwrap()),
        &[-3.0, -0.5, 0.0, 0.0, 0.0, f64::NAN],
    );
    // min > max: everything becomes max, as in PyTorch.
    close(
        &vals(&x.clamp(Some(2.0), Some(1.0)).unwrap()),
        &[1.0, 1.0, 1.0, 1.0, 1.0, f64::NAN],
    );
    assert!(x.clamp(None, None).is_err());
    // A NaN bound makes every element NaN, alone or with another (PyTorch's clamp_out fills
    // NaN; torch.clamp(x, min=nan) is all NaN), with a zero gradient (its backward is
    // where(x > min, g, 0)).
    for (lo, hi) in [(Some(0.0), Some(f64::NAN)), (Some(f64::NAN), Some(1.0))] {
        assert!(vals(&x.clamp(lo, hi).unwrap()).iter().all(|v| v.is_nan()));
    }
    let xv = vals(&x);
    for (lo, hi) in [(Some(f64::NAN), None), (None, Some(f64::NAN))] {
        let got = vals(&x.clamp(lo, hi).unwrap());
        assert!(
            got.len() == xv.len() && got.iter().all(|v| v.is_nan()),
            "{got:?}"
        );
        let xr = x.clone().requires_grad().unwrap();
        let g = xr
            .clamp(lo, hi)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        assert_eq!(vals(g.get(&xr).unwrap()), vec![0.0; xv.len()]);
    }
    let y = t(&[1.0, 2.0, 4.0], &[3]);
    close(&vals(&y.rsub_scalar(10.0).unwrap()), &[9.0, 8.0, 6.0]);
    close(&vals(&y.rdiv_scalar(8.0).unwrap()), &[8.0, 4.0, 2.0]);
    close(&vals(&y.max_scalar(2.0).unwrap()), &[2.0, 2.0, 4.0]);
    close(&vals(&y.min_scalar(2.0).unwrap()), &[1.0, 2.0, 2.0]);
}

#[test]
fn creation_helpers() {
    let d = dev();
    assert_eq!(
        vals(&Tensor::ones(d, &[2, 2], DType::F32).unwrap()),
        vec![1.0; 4]
    );
    assert_eq!(
        vals(&Tensor::arange(d, 0.0, 5.0, 1.0, DType::F32).unwrap()),
        vec![0.0, 1.0, 2.0, 3.0, 4.0]
    );
    assert_eq!(
        vals(&Tensor::arange(d, 1.0, 2.0, 0.25, DType::F32).unwrap()),
        vec![1.0, 1.25, 1.5, 1.75]
    );
    assert_eq!(
        vals(&Tensor::arange(d, 3.0, 0.0, -1.0, DType::F32).unwrap()),
        vec![3.0, 2.0, 1.0]
    );
    assert_eq!(
        Tensor::arange(d, 0.0, 0.0, 1.0, DType::F32)
            .unwrap()
            .shape(),
        &[0]
    );
    // PyTorch's error texts (its error_inputs_arange matches them).
    let msg = |r: wgtensor::Result<Tensor>| r.unwrap_err().to_string();
    let e = msg(Tensor::arange(d, 0.0, 5.0, -1.0, DType::F32));
    assert!(
        e.contains("upper bound and lower bound inconsistent with step sign"),
        "{e}"
    );
    for step in [0.0, f64::NAN] {
        let e = msg(Tensor::arange(d, 0.0, 5.0, step, DType::F32));
        assert!(e.contains("step must be nonzero"), "{e}");
    }
    // A step that is not finite, before the bounds (torch 2.15: "step must be finite but got
    // inf"); an i32 start or step past int64.
    for (start, step) in [
        (0.0, f64::INFINITY),
        (f64::NAN, -f64::INFINITY),
        (0.0, f64::NAN),
    ] {
        let e = msg(Tensor::arange(d, start, 5.0, step, DType::F32));
        assert!(e.contains("step must be finite but got"), "{e}");
    }
    for (start, end, step) in [(0.0, 1.0, 1e19), (1e30, 1e30, 1.0), (-1e19, 0.0, 1e18)] {
        let e = msg(Tensor::arange(d, start, end, step, DType::I32));
        assert!(
            e.contains("value cannot be converted to type int64_t without overflow"),
            "{e}"
        );
    }
    let z = Tensor::arange(d, 0.0, 1.0, 9.2e18, DType::I32).unwrap();
    assert_eq!(z.to_vec::<i32>().unwrap(), vec![0]);
    // Values past f16 round to infinity, as PyTorch's cast.
    if d.supports_f16() {
        let h = Tensor::arange(d, 65000.0, 66000.0, 256.0, DType::F16)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap();
        assert_eq!(vals(&h), vec![64992.0, 65248.0, 65504.0, f32::INFINITY]);
    }
    for (a, b) in [
        (0.0, f64::INFINITY),
        (f64::NEG_INFINITY, 1.0),
        (-5.0, f64::NAN),
    ] {
        let e = msg(Tensor::arange(d, a, b, 2.0, DType::F32));
        assert!(e.contains("unsupported range"), "{e}");
    }
    // The bounds printed as C++ streams a double (PyTorch's message).
    let e = msg(Tensor::arange(d, f64::NAN, 1e20, 2.0, DType::F32));
    assert!(e.contains("unsupported range: nan -> 1e+20"), "{e}");
    let e = msg(Tensor::arange(
        d,
        1.175494351e-38,
        3.402823466e+38,
        1.0,
        DType::F32,
    ));
    assert!(e.contains("overflow"), "{e}");
    // An i32 range past i32 is refused, not saturated.
    let e = msg(Tensor::arange(
        d,
        2147483646.0,
        2147483650.0,
        1.0,
        DType::I32,
    ));
    assert!(e.contains("without overflow"), "{e}");
    let top = Tensor::arange(d, 2147483645.0, 2147483648.0, 1.0, DType::I32).unwrap();
    assert_eq!(
        top.to_vec::<i32>().unwrap(),
        vec![2147483645, 2147483646, 2147483647]
    );
    // item() of many elements, in PyTorch's words.
    let e = msg(Tensor::zeros(d, &[2], DType::F32).and_then(|t| t.item().map(|_| t)));
    assert!(
        e.contains("a Tensor with 2 elements cannot be converted to Scalar"),
        "{e}"
    );
    // Non-finite linspace ends compute, as PyTorch's: NaN everywhere, a fill of start for one
    // step, nothing for none; an integer dtype refuses them.
    let v = vals(&Tensor::linspace(d, f64::NAN, 1.0, 5, DType::F32).unwrap());
    assert!(v.iter().all(|x| x.is_nan()), "{v:?}");
    let one = Tensor::linspace(d, 0.0, f64::INFINITY, 1, DType::F32).unwrap();
    assert_eq!(vals(&one), vec![0.0]);
    let ninf = Tensor::linspace(d, f64::NEG_INFINITY, 0.0, 1, DType::F32).unwrap();
    assert_eq!(vals(&ninf), vec![f32::NEG_INFINITY]);
    let none = Tensor::linspace(d, 0.0, f64::NAN, 0, DType::F32).unwrap();
    assert_eq!(none.shape(), &[0]);
    assert!(Tensor::linspace(d, f64::NAN, 1.0, 3, DType::I32).is_err());
    assert_eq!(
        vals(&Tensor::linspace(d, 0.0, 1.0, 5, DType::F32).unwrap()),
        vec![0.0, 0.25, 0.5, 0.75, 1.0]
    );
    assert_eq!(
        vals(&Tensor::linspace(d, 2.0, 2.0, 1, DType::F32).unwrap()),
        vec![2.0]
    );
    assert_eq!(
        Tensor::linspace(d, 0.0, 1.0, 0, DType::F32)
            .unwrap()
            .shape(),
        &[0]
    );
    // Ends the dtype cannot hold are PyTorch's overflow error, not clamped or inf values.
    for (a, b, dt) in [
        (0.0, 3e9, DType::I32),
        (3e9, 0.0, DType::I32),
        (0.0, 1e39, DType::F32),
        (0.0, 1e5, DType::F16),
    ] {
        let e = Tensor::linspace(d, a, b, 4, dt).unwrap_err();
        assert!(e.to_string().contains("without overflow"), "{e}");
        // One step is a fill of `start` alone.
        assert_eq!(
            Tensor::linspace(d, a, b, 1, dt).is_ok(),
            a == 0.0,
            "{a} {b}"
        );
    }
    // Dim errors give the range the op accepts, as PyTorch's.
    let e = t(&[1.0, 2.0], &[1, 2])
        .unsqueeze(4)
        .unwrap_err()
        .to_string();
    assert!(e.contains("[-3, 2]") && e.contains("got 4"), "{e}");
    let x = t(&[1.0, 2.0, 3.0], &[3]);
    assert_eq!(vals(&x.zeros_like().unwrap()), vec![0.0; 3]);
    assert_eq!(vals(&x.ones_like().unwrap()), vec![1.0; 3]);
    assert_eq!(vals(&x.full_like(7.0).unwrap()), vec![7.0; 3]);
    assert_eq!(x.rand_like().unwrap().shape(), &[3]);
    assert_eq!(x.randn_like().unwrap().shape(), &[3]);
}

#[test]
fn multi_dim_reductions() {
    let x = t(&(0..24).map(|i| i as f32).collect::<Vec<_>>(), &[2, 3, 4]);
    let s = x.sum_dims(&[0, -1], false).unwrap();
    assert_eq!(s.shape(), &[3]);
    // Rows j of every batch: sum over b and k of b*12 + j*4 + k.
    let want: Vec<f32> = (0..3)
        .map(|j| {
            (0..2)
                .flat_map(|b| (0..4).map(move |k| (b * 12 + j * 4 + k) as f32))
                .sum()
        })
        .collect();
    assert_eq!(vals(&s), want);
    assert_eq!(x.sum_dims(&[2, 0], true).unwrap().shape(), &[1, 3, 1]);
    let m = x.mean_dims(&[0, 2], false).unwrap();
    assert_eq!(vals(&m), want.iter().map(|v| v / 8.0).collect::<Vec<_>>());
    assert_eq!(vals(&x.sum_all().unwrap()), vec![276.0]);
    assert_eq!(vals(&x.mean_all().unwrap()), vec![11.5]);
    assert!(x.sum_dims(&[1, 1], false).is_err());
    assert!(x.sum_dims(&[3], false).is_err());
    let e = Tensor::zeros(dev(), &[2, 0], DType::F32).unwrap();
    assert!(vals(&e.mean_dims(&[1], false).unwrap())
        .iter()
        .all(|v| v.is_nan()));
    assert!(vals(&e.mean_all().unwrap())[0].is_nan());
    // Adjacent dims reduce as one (a view), non-viewable ones dim by dim: the same sums.
    let per_b: Vec<f32> = (0..2)
        .map(|b| (0..12).map(|j| (b * 12 + j) as f32).sum())
        .collect();
    assert_eq!(vals(&x.sum_dims(&[1, 2], false).unwrap()), per_b);
    assert_eq!(x.sum_dims(&[-1, 1], true).unwrap().shape(), &[2, 1, 1]);
    let m = x.mean_dims(&[1, 2], true).unwrap();
    assert_eq!(m.shape(), &[2, 1, 1]);
    assert_eq!(vals(&m), per_b.iter().map(|v| v / 12.0).collect::<Vec<_>>());
    let xt = x.transpose(0, 2).unwrap(); // [4, 3, 2], dims 0 and 1 not viewable as one
    let per_b_t = vals(&xt.sum_dims(&[0, 1], false).unwrap());
    assert_eq!(per_b_t, per_b);
    let xl = x.clone().requires_grad().unwrap();
    let g = xl
        .mean_dims(&[1, 2], false)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(vals(g.get(&xl).unwrap()), vec![1.0 / 12.0; 24]);
    // No dims reduces every dim, as PyTorch's `sum(dim=[])`.
    let all = x.sum_dims(&[], false).unwrap();
    assert_eq!((all.shape(), vals(&all)), (&[][..], vec![276.0]));
    assert_eq!(x.sum_dims(&[], true).unwrap().shape(), &[1, 1, 1]);
    assert_eq!(vals(&x.mean_dims(&[], false).unwrap()), vec![11.5]);
    // f16 sums and means over several dims accumulate in f32 and round once: a partial sum
    // stored as f16 (90000 here) would overflow to inf.
    if dev().supports_f16() {
        let h = Tensor::full(dev(), &[300, 300], 1.0, DType::F16).unwrap();
        for r in [
            h.mean_dims(&[0, 1], false),
            h.mean_dims(&[], false),
            h.reshape(&[90_000]).unwrap().mean_dims(&[0], false),
        ] {
            let r = r.unwrap();
            assert_eq!(r.dtype(), DType::F16);
            assert_eq!(vals(&r.to_dtype(DType::F32).unwrap()), vec![1.0]);
        }
        let q = Tensor::full(dev(), &[3, 2048, 16], 1.0, DType::F16).unwrap();
        let s = q.sum_dims(&[1, 2], false).unwrap();
        assert_eq!(vals(&s.to_dtype(DType::F32).unwrap()), vec![32768.0; 3]);
    }
}

/// PyTorch reduces a rank-0 tensor along dim 0 or -1 as one element; the result stays rank 0
/// with or without keepdim, and the gradient flows back to the scalar.
#[test]
fn rank0_reductions() {
    let s = t(&[-2.5], &[]).requires_grad().unwrap();
    for dim in [0, -1] {
        for keep in [false, true] {
            for r in [
                s.sum(dim, keep),
                s.mean(dim, keep),
                s.max(dim, keep),
                s.min(dim, keep),
                s.sum_dims(&[dim], keep),
                s.mean_dims(&[dim], keep),
            ] {
                let r = r.unwrap();
                assert_eq!((r.shape(), vals(&r)), (&[][..], vec![-2.5]));
            }
        }
    }
    assert_eq!(vals(&s.sum_dims(&[], false).unwrap()), vec![-2.5]);
    assert!(s.sum(1, false).unwrap_err().to_string().starts_with("sum:"));
    assert!(s.max(-2, false).is_err());
    assert!(s.sum_dims(&[0, -1], false).is_err());
    assert!(s.mean_dims(&[1], false).is_err());
    let g = s.max(0, false).unwrap().mul_scalar(3.0).unwrap();
    let grads = g.backward().unwrap();
    assert_eq!(vals(grads.get(&s).unwrap()), vec![3.0]);
    let grads = s.mean_dims(&[-1], true).unwrap().backward().unwrap();
    assert_eq!(vals(grads.get(&s).unwrap()), vec![1.0]);
}

#[test]
fn operators_return_results() {
    let a = t(&[1.0, 2.0, 3.0], &[3]);
    let b = t(&[10.0, 20.0, 30.0], &[3]);
    assert_eq!(vals(&(&a + &b).unwrap()), vec![11.0, 22.0, 33.0]);
    assert_eq!(vals(&(&b - &a).unwrap()), vec![9.0, 18.0, 27.0]);
    assert_eq!(vals(&(&a * 2.0).unwrap()), vec![2.0, 4.0, 6.0]);
    assert_eq!(vals(&(&b / &a).unwrap()), vec![10.0, 10.0, 10.0]);
    assert_eq!(vals(&(-&a).unwrap()), vec![-1.0, -2.0, -3.0]);
    assert_eq!(
        vals(&(a.clone() + b.clone()).unwrap()),
        vec![11.0, 22.0, 33.0]
    );
    // Mismatched shapes are an Err, not a panic.
    let c = t(&[1.0, 2.0], &[2]);
    let e = (&a + &c).unwrap_err();
    assert!(e.to_string().starts_with("add:"), "{e}");
}

/// Small integer exponents are exact (PyTorch's pow kernels multiply for 2 and 3, divide for
/// -1 and -2, copy for 1), by a scalar or a tensor exponent, with C99's values at +-0 and
/// +-inf; and the gradient of x^2 is exactly 2x.
#[test]
fn pow_small_integer_exponents_are_exact() {
    let xs = [
        3.0f32,
        1.5,
        1000.0,
        -7.0,
        0.1,
        12345.678,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ];
    let x = t(&xs, &[xs.len()]);
    for e in [1.0f32, 2.0, 3.0, -1.0, -2.0] {
        let want: Vec<f32> = xs
            .iter()
            .map(|&v| match e as i32 {
                1 => v,
                2 => v * v,
                3 => v * v * v,
                -1 => 1.0 / v,
                _ => 1.0 / (v * v),
            })
            .collect();
        // Products are exact; quotients within the crate's division bound (1 ulp).
        let ulps = if e > 0.0 { 0 } else { 1 };
        let same = |got: &[f32]| {
            got.iter().zip(&want).all(|(g, w)| {
                g.to_bits() == w.to_bits()
                    || (g.to_bits() as i64 - w.to_bits() as i64).abs() <= ulps
            })
        };
        let got = vals(&x.pow_scalar(e as f64).unwrap());
        assert!(same(&got), "x^{e}: {got:?} vs {want:?}");
        let got = vals(&x.pow(&t(&[e], &[1])).unwrap());
        assert!(same(&got), "tensor x^{e}: {got:?} vs {want:?}");
    }
    let xl = t(&xs[..6], &[6]).requires_grad().unwrap();
    let g = xl
        .pow_scalar(2.0)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let want: Vec<f32> = xs[..6].iter().map(|v| 2.0 * v).collect();
    assert_eq!(vals(g.get(&xl).unwrap()), want);
}

/// clamp's bound is compared in the tensor's dtype, strictly, as torch 2.15's backward (`x >
/// min`, `x < max`): f16 values equal to f16(0.09996) and f16(0.30005) sit at the bounds, so
/// their gradients are 0 (in f32 both lie inside; PyTorch's values). abs passes 0 at NaN
/// (PyTorch's sign(NaN) = 0).
#[test]
fn clamp_bounds_in_the_dtype_and_abs_gradient_at_nan() {
    if dev().supports_f16() {
        let x = t(&[0.1, 0.3, 0.05, 0.2], &[4])
            .to_dtype(DType::F16)
            .unwrap()
            .requires_grad()
            .unwrap();
        let g = x
            .clamp(Some(0.09996), Some(0.30005))
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let g = vals(&g.get(&x).unwrap().to_dtype(DType::F32).unwrap());
        assert_eq!(g, vec![0.0, 0.0, 0.0, 1.0]);
    }
    let x = t(&[f32::NAN, -2.0, 0.0, 3.0], &[4])
        .requires_grad()
        .unwrap();
    let g = x.abs().unwrap().sum_all().unwrap().backward().unwrap();
    assert_eq!(vals(g.get(&x).unwrap()), vec![0.0, -1.0, 0.0, 1.0]);
    // F.hardtanh with equal bounds: the bound everywhere, no gradient (only min > max errs).
    let xl = x.detach().requires_grad().unwrap();
    let y = wgtensor::ops::hardtanh(&xl, 1.0, 1.0).unwrap();
    assert_eq!(vals(&y)[1..], [1.0, 1.0, 1.0]);
    let g = y.sum_all().unwrap().backward().unwrap();
    assert_eq!(vals(g.get(&xl).unwrap())[1..], [0.0, 0.0, 0.0]);
    assert!(wgtensor::ops::hardtanh(&x, 1.0, 0.5).is_err());
}

/// Division by a subnormal divisor is IEEE's where the adapter keeps subnormals (PyTorch on
/// CPUs and on CUDA without fast math): the correcting step must not multiply by 1/b = inf.
#[test]
fn division_by_a_subnormal_divisor() {
    let b = t(&[1e-39, 1e-39, 3e-39], &[3]);
    if vals(&b.mul_scalar(1.0).unwrap())[0] == 0.0 {
        eprintln!("the adapter flushes subnormals: nothing to hold division to");
        return;
    }
    let a = t(&[2e-39, 1e-10, 6e-39], &[3]);
    let got = vals(&a.div(&b).unwrap());
    let want: Vec<f32> = [2e-39f32, 1e-10, 6e-39]
        .iter()
        .zip([1e-39f32, 1e-39, 3e-39])
        .map(|(a, b)| a / b)
        .collect();
    assert_eq!(got, want);
}

/// A double becomes f16 as c10's `Half(float(v))` does, through f32, on every platform: just
/// above a tie in f64 but exactly on it in f32, the tie rounds to even (1.0), where one
/// rounding from f64 gives 1 + 2^-10.
#[test]
fn f16_fills_round_through_f32_as_pytorch() {
    if !dev().supports_f16() {
        return;
    }
    let v = 1.0 + 2f64.powi(-11) + 2f64.powi(-30);
    let back = |t: Tensor| vals(&t.to_dtype(DType::F32).unwrap());
    assert_eq!(
        back(Tensor::full(dev(), &[1], v, DType::F16).unwrap()),
        [1.0]
    );
    assert_eq!(
        back(Tensor::full(dev(), &[], v, DType::F16).unwrap()),
        [1.0]
    );
    let ends = Tensor::linspace(dev(), v, v, 2, DType::F16).unwrap();
    assert_eq!(back(ends), [1.0, 1.0]);
}

/// clamp_min / clamp_max convert their bound checked on every path (`scalar_op`, the owned
/// `into_scalar_op`), as `max_scalar` does; `clamp` with a NaN bound fills NaN before either
/// bound is converted, so an overflowing other bound is no error there.
#[test]
fn clamp_bounds_are_checked_on_every_path_but_beside_nan() {
    use wgtensor::ops::{hardtanh, ScalarOp};
    let x = Tensor::from_slice(dev(), &[1.0f32, -2.0], &[2])
        .unwrap()
        .to_dtype(DType::F16)
        .unwrap();
    for e in [
        x.max_scalar(1e5).unwrap_err(),
        x.scalar_op(ScalarOp::Max, 1e5).unwrap_err(),
        x.scalar_op(ScalarOp::Min, -1e39).unwrap_err(),
        x.deep_clone()
            .unwrap()
            .into_scalar_op(ScalarOp::Min, -1e39)
            .unwrap_err(),
    ] {
        assert!(e.to_string().contains("without overflow"), "{e}");
    }
    // Other scalar ops take the double as it is (x * 1e5 overflows to inf in f16).
    let y = x.scalar_op(ScalarOp::Mul, 1e5).unwrap();
    assert_eq!(
        y.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap(),
        [f32::INFINITY, f32::NEG_INFINITY]
    );
    for y in [
        x.clamp(Some(f64::NAN), Some(1e5)).unwrap(),
        x.clamp(Some(-1e39), Some(f64::NAN)).unwrap(),
        hardtanh(&x, f64::NAN, 1e5).unwrap(),
    ] {
        let v = y.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
        assert!(v.iter().all(|v| v.is_nan()), "{v:?}");
    }
    assert!(x.clamp(Some(0.0), Some(1e5)).is_err());
}

/// Comparisons order floats as IEEE does and PyTorch says, subnormals included (compared on
/// their bits: a GPU that flushes subnormals would find 1e-40 equal to 0), -0.0 equal to 0.0,
/// NaN unordered; against every other value of the list, each relation as f64 gives it.
#[test]
fn comparisons_order_subnormals_zeros_and_infinities() {
    let xs = [
        f32::NEG_INFINITY,
        -3.5,
        -1e-40,
        -1.4e-45,
        -0.0,
        0.0,
        1.4e-45,
        1e-40,
        1.2e-38,
        2.0,
        f32::MAX,
        f32::INFINITY,
        f32::NAN,
    ];
    let n = xs.len();
    let a: Vec<f32> = xs.iter().flat_map(|&x| std::iter::repeat_n(x, n)).collect();
    let b: Vec<f32> = (0..n).flat_map(|_| xs).collect();
    let (ta, tb) = (t(&a, &[n * n]), t(&b, &[n * n]));
    type Rel = fn(f64, f64) -> bool;
    let rels: [(&str, wgtensor::ops::CmpOp, Rel); 6] = [
        ("eq", wgtensor::ops::CmpOp::Eq, |x, y| x == y),
        ("ne", wgtensor::ops::CmpOp::Ne, |x, y| x != y),
        ("lt", wgtensor::ops::CmpOp::Lt, |x, y| x < y),
        ("le", wgtensor::ops::CmpOp::Le, |x, y| x <= y),
        ("gt", wgtensor::ops::CmpOp::Gt, |x, y| x > y),
        ("ge", wgtensor::ops::CmpOp::Ge, |x, y| x >= y),
    ];
    for (name, op, rel) in rels {
        let got = vals(&ta.compare(&tb, op).unwrap());
        for (i, g) in got.iter().enumerate() {
            let want = rel(f64::from(a[i]), f64::from(b[i]));
            assert_eq!(*g == 1.0, want, "{name}({:e}, {:e})", a[i], b[i]);
        }
    }
}

/// GELU's tanh approximation and its gradient against PyTorch's (F.gelu(x,
/// approximate='tanh') on torch 2.15, f32), the far ends and infinities included, and its f16
/// values within f16's rounding.
#[test]
fn gelu_tanh_matches_pytorch() {
    let xs = [
        f32::NEG_INFINITY,
        -1e13,
        -10.0,
        -3.0,
        -1.0,
        -0.0,
        0.0,
        0.5,
        1.0,
        3.0,
        10.0,
        1e13,
        f32::INFINITY,
        f32::NAN,
    ];
    let nan = f32::NAN;
    let want_y = [
        nan,
        -0.0,
        -0.0,
        -0.003_637_433,
        -0.158_808,
        -0.0,
        0.0,
        0.345_714,
        0.841_192,
        2.996_362_7,
        10.0,
        1e13,
        f32::INFINITY,
        nan,
    ];
    let want_g = [
        nan,
        0.0,
        0.0,
        -0.011_584_297,
        -0.082_964_09,
        0.5,
        0.5,
        0.867_369_9,
        1.082_964,
        1.011_584_3,
        1.0,
        1.0,
        nan,
        nan,
    ];
    let x = t(&xs, &[xs.len()]).requires_grad().unwrap();
    let y = x.gelu_tanh().unwrap();
    let g = y.sum_all().unwrap().backward().unwrap();
    let (yv, gv) = (vals(&y), vals(g.get(&x).unwrap()));
    let close = |got: &[f32], want: &[f32], what: &str| {
        for (i, (a, b)) in got.iter().zip(want).enumerate() {
            let ok = if b.is_nan() {
                a.is_nan()
            } else if a == b {
                a.is_sign_negative() == b.is_sign_negative()
            } else {
                (a - b).abs() <= 2e-6 * b.abs().max(1.0)
                    && a.is_sign_negative() == b.is_sign_negative()
            };
            assert!(ok, "{what} at {}: {a} vs {b}", xs[i]);
        }
    };
    close(&yv, &want_y, "gelu_tanh");
    close(&gv[..], &want_g, "gelu_tanh'");
    if dev().supports_f16() {
        let h = t(&[-3.0, -1.0, 0.5, 1.0, 3.0], &[5])
            .to_dtype(DType::F16)
            .unwrap();
        let y = vals(&h.gelu_tanh().unwrap().to_dtype(DType::F32).unwrap());
        let want = [-3.6373e-03f32, -1.5881e-01, 3.4570e-01, 8.4131e-01, 2.9961];
        for (a, b) in y.iter().zip(want) {
            assert!((a - b).abs() <= 1e-3 * b.abs().max(1e-2), "{y:?}");
        }
    }
}
