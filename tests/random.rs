//! On-device random numbers: bit-exact against a CPU Philox4x32-10, reproducible per seed,
//! non-overlapping across calls, the distributions' moments, dropout's inverted scaling, the
//! initializers' bounds, and errors naming the op.
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

use wgtensor::ops::{
    bernoulli, dropout, kaiming_uniform, normal, rand, randn, uniform, xavier_uniform,
};
use wgtensor::{DType, Device, Tensor};

fn dev() -> &'static Device {
    static DEV: std::sync::OnceLock<Device> = std::sync::OnceLock::new();
    DEV.get_or_init(|| Device::new().expect("device"))
}

/// A fresh device per test that seeds: the generator is per device.
fn seeded(seed: u64) -> Device {
    let d = Device::new().unwrap();
    d.manual_seed(seed);
    d
}

#[path = "conformance/random.rs"]
mod philox_ref;
use philox_ref::{philox, stream, unit};

fn vals(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

/// Random123's published known-answer vector for Philox4x32-10 (counter and key all ones).
#[test]
fn cpu_reference_matches_the_known_answer() {
    assert_eq!(
        philox([u32::MAX; 4], [u32::MAX; 2]),
        [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]
    );
}

#[test]
fn rand_is_bit_exact_and_streams_do_not_overlap() {
    let seed = 0x1234_5678_9abc_def0;
    let d = seeded(seed);
    pollster::block_on(philox_ref::check_rand_bit_exact(&d, seed)).unwrap();
    let a = vals(&rand(&d, &[10], DType::F32).unwrap());
    assert!(a.iter().all(|&v| (0.0..1.0).contains(&v)));
    // The same seed again gives the same numbers; another seed others.
    let want_a: Vec<f32> = stream(seed, 0, 10).into_iter().map(unit).collect();
    d.manual_seed(seed);
    assert_eq!(vals(&rand(&d, &[10], DType::F32).unwrap()), want_a);
    d.manual_seed(seed + 1);
    assert_ne!(vals(&rand(&d, &[10], DType::F32).unwrap()), want_a);
}

#[test]
fn normal_matches_box_muller_and_its_moments() {
    let d = seeded(42);
    let n = 200_000;
    pollster::block_on(philox_ref::check_randn(&d, 42, 1000)).unwrap();
    d.manual_seed(42);
    let z = vals(&randn(&d, &[n], DType::F32).unwrap());
    let mean = z.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
    let var = z.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n as f64;
    assert!(
        mean.abs() < 0.01 && (var - 1.0).abs() < 0.02,
        "mean {mean} var {var}"
    );
    let y = vals(&normal(&d, &[n], 3.0, 0.5, DType::F32).unwrap());
    let mean = y.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
    assert!((mean - 3.0).abs() < 0.01, "{mean}");
    let u = vals(&uniform(&d, &[n], -2.0, 6.0, DType::F32).unwrap());
    assert!(u.iter().all(|&v| (-2.0..6.0).contains(&v)));
    let mean = u.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
    assert!((mean - 2.0).abs() < 0.03, "{mean}");
    // [from, to) holds after rounding to the dtype too, as PyTorch's uniform_: f16 draws just
    // below 1 round up to 1 (about one in 4096), and f32 ones in a range narrow against its
    // magnitude round up to `to` (1e6 + 1 here, f32 steps of 1/16); both become `from`.
    let w = vals(&uniform(&d, &[n], 1e6, 1e6 + 1.0, DType::F32).unwrap());
    assert!(w.iter().all(|&v| (1e6..1e6 + 1.0).contains(&v)));
    assert!(
        w.iter().filter(|&&v| v == 1e6).count() > n / 32,
        "the rounded-up draws"
    );
    if d.supports_f16() {
        let h = rand(&d, &[100_000], DType::F16)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap();
        assert!(vals(&h).iter().all(|&v| (0.0..1.0).contains(&v)));
    }
}

#[test]
fn bernoulli_and_dropout() {
    let d = dev();
    let n = 100_000;
    let b = vals(&bernoulli(d, &[n], 0.3, DType::F32).unwrap());
    assert!(b.iter().all(|&v| v == 0.0 || v == 1.0));
    let frac = b.iter().sum::<f32>() / n as f32;
    assert!((frac - 0.3).abs() < 0.01, "{frac}");
    assert!(vals(&bernoulli(d, &[100], 0.0, DType::F32).unwrap())
        .iter()
        .all(|&v| v == 0.0));
    assert!(vals(&bernoulli(d, &[100], 1.0, DType::F32).unwrap())
        .iter()
        .all(|&v| v == 1.0));

    let x = Tensor::full(d, &[n], 3.0, DType::F32).unwrap();
    let y = vals(&dropout(&x, 0.25, true).unwrap());
    assert!(
        y.iter().all(|&v| v == 0.0 || v == 4.0),
        "kept values are scaled by 1 / (1 - p)"
    );
    let kept = y.iter().filter(|&&v| v != 0.0).count() as f64 / n as f64;
    assert!((kept - 0.75).abs() < 0.01, "{kept}");
    // A strided view is read through its strides.
    let m = Tensor::from_slice(d, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    let t = dropout(&m.transpose(0, 1).unwrap(), 0.5, true).unwrap();
    let want = [1.0f32, 4.0, 2.0, 5.0, 3.0, 6.0];
    for (g, w) in vals(&t).iter().zip(want) {
        assert!(*g == 0.0 || *g == 2.0 * w, "{g} vs {w}");
    }
    // Evaluation and p = 0 return x; p = 1 zeros; a bad p is an error naming the op.
    assert_eq!(vals(&dropout(&x, 0.25, false).unwrap()), vec![3.0; n]);
    assert_eq!(vals(&dropout(&x, 0.0, true).unwrap()), vec![3.0; n]);
    assert_eq!(vals(&dropout(&x, 1.0, true).unwrap()), vec![0.0; n]);
    let e = dropout(&x, 1.5, true).unwrap_err();
    assert!(e.to_string().starts_with("dropout:"), "{e}");
    // Random values are floats: an I32 uniform fill is refused even when empty (uniform_
    // dispatches on the dtype first); normal_ returns an empty tensor before its dispatch
    // (ranges_past_the_dtype_are_refused has those cases).
    assert!(rand(d, &[0], DType::I32).is_err());
    assert!(randn(d, &[2], DType::I32).is_err());
    // bernoulli_ fills integer tensors with 0 and 1.
    let b = bernoulli(d, &[64], 0.5, DType::I32).unwrap();
    assert_eq!(b.dtype(), DType::I32);
    let v = b.to_vec::<i32>().unwrap();
    assert!(v.iter().all(|&x| x == 0 || x == 1) && v.contains(&0) && v.contains(&1));
    assert_eq!(bernoulli(d, &[0], 0.5, DType::I32).unwrap().shape(), &[0]);
    assert_eq!(
        bernoulli(d, &[3], 1.0, DType::I32)
            .unwrap()
            .to_vec::<i32>()
            .unwrap(),
        [1; 3]
    );
}

/// Tracked and untracked f16 dropout agree bitwise (the output rounded once from
/// f32(x) / (1 - p), as PyTorch's CUDA kernel), and so do their gradients; past
/// p = 0.99998 the scale does not overflow f16.
#[test]
fn f16_dropout_rounds_once_tracked_or_not() {
    // A device of its own: the other tests draw from the shared one's stream in parallel,
    // between a seed and its draw.
    let own = Device::new().unwrap();
    let d = &own;
    if !d.supports_f16() {
        return;
    }
    let n = 1 << 20; // about 10 kept at p = 0.99999
                     // In (0, 0.5]: nonzero (a kept value is nonzero) and finite after a 1e5 scale.
    let xv: Vec<f32> = (0..n).map(|i| ((i % 640) + 1) as f32 / 1280.0).collect();
    let x = Tensor::from_slice(d, &xv, &[n])
        .unwrap()
        .to_dtype(DType::F16)
        .unwrap();
    let f = |t: &Tensor| vals(&t.to_dtype(DType::F32).unwrap());
    for p in [0.3, 0.999_99] {
        d.manual_seed(7);
        let plain = f(&dropout(&x, p, true).unwrap());
        d.manual_seed(7);
        let xl = x.detach().requires_grad().unwrap();
        let y = dropout(&xl, p, true).unwrap();
        let tracked = f(&y);
        let diff: Vec<_> = (0..n)
            .filter(|&i| tracked[i].to_bits() != plain[i].to_bits())
            .take(5)
            .map(|i| (i, xv[i], tracked[i], plain[i]))
            .collect();
        assert!(diff.is_empty(), "p {p}: (i, x, tracked, plain) {diff:?}");
        // d/dx: the scale where kept (an f16 of it, rounded once), 0 where dropped.
        let g = f(y
            .sum_dims(&[], false)
            .unwrap()
            .backward()
            .unwrap()
            .get(&xl)
            .unwrap());
        let s = half::f16::from_f64(1.0 / (1.0 - p)).to_f32();
        for (i, (&gv, &yv)) in g.iter().zip(&plain).enumerate() {
            assert_eq!(gv, if yv != 0.0 { s } else { 0.0 }, "p {p} at {i}: y {yv}");
        }
        assert!(plain.iter().all(|v| v.is_finite()), "p {p}");
        assert!(plain.iter().any(|&v| v != 0.0), "p {p}: something kept");
    }
}

#[test]
fn initializers_follow_pytorch_bounds() {
    let d = dev();
    // Linear(200, 100): kaiming_uniform_(a = sqrt(5)) gives U(-1/sqrt(200), 1/sqrt(200)).
    let w = vals(&kaiming_uniform(d, &[100, 200], 5f64.sqrt(), DType::F32).unwrap());
    let bound = 1.0 / 200f32.sqrt();
    assert!(w.iter().all(|&v| v.abs() <= bound));
    assert!(w.iter().any(|&v| v.abs() > 0.95 * bound));
    // Conv2d(16, 32, 3): fan_in 16 * 9.
    let w = vals(&kaiming_uniform(d, &[32, 16, 3, 3], 5f64.sqrt(), DType::F32).unwrap());
    assert!(w.iter().all(|&v| v.abs() <= 1.0 / 144f32.sqrt()));
    let w = vals(&xavier_uniform(d, &[30, 20], 1.0, DType::F32).unwrap());
    let b = (6.0f32 / 50.0).sqrt();
    assert!(w.iter().all(|&v| v.abs() <= b) && w.iter().any(|&v| v.abs() > 0.95 * b));
    assert!(kaiming_uniform(d, &[5], 0.0, DType::F32).is_err());
    // A zero-element shape is a no-op before the fan, as PyTorch's.
    assert_eq!(
        kaiming_uniform(d, &[0], 0.0, DType::F32).unwrap().shape(),
        &[0]
    );
    // PyTorch's own wording, the sign named before the range.
    if d.supports_f16() {
        let e = normal(d, &[4], 0.0, -1e5, DType::F16)
            .unwrap_err()
            .to_string();
        assert!(e.contains("normal expects std >= 0.0"), "{e}");
    }
    // A NaN mean propagates, as PyTorch's normal_ (it checks only std).
    let n = vals(&normal(d, &[4], f64::NAN, 1.0, DType::F32).unwrap());
    assert!(n.iter().all(|v| v.is_nan()), "{n:?}");
}

#[test]
fn errors_name_the_op() {
    let d = dev();
    for (r, op) in [
        (uniform(d, &[3], 2.0, 1.0, DType::F32), "uniform"),
        (uniform(d, &[3], f64::NAN, 1.0, DType::F32), "uniform"),
        (normal(d, &[3], 0.0, -1.0, DType::F32), "normal"),
        (bernoulli(d, &[3], 1.5, DType::F32), "bernoulli"),
        (rand(d, &[65536, 65536], DType::F32), "rand"),
    ] {
        let e = r.unwrap_err();
        assert!(e.to_string().starts_with(&format!("{op}:")), "{e}");
    }
    assert_eq!(rand(d, &[0, 4], DType::F32).unwrap().shape(), &[0, 4]);
}

/// A tracked input is dropped out through a recorded multiply: gradients flow (the kept
/// elements get 1 / (1 - p)), and the values equal an untracked call with the same seed.
#[test]
fn dropout_is_differentiable() {
    let d = seeded(7);
    let x = Tensor::full(&d, &[1000], 2.0, DType::F32).unwrap();
    let plain = vals(&dropout(&x, 0.3, true).unwrap());
    d.manual_seed(7);
    let xt = x.clone().requires_grad().unwrap();
    let y = dropout(&xt, 0.3, true).unwrap();
    assert_eq!(vals(&y), plain);
    let g = y.sum_all().unwrap().backward().unwrap();
    let gx = vals(g.get(&xt).unwrap());
    for (gi, yi) in gx.iter().zip(&plain) {
        let want = if *yi == 0.0 { 0.0 } else { 1.0 / 0.7f32 };
        assert!((gi - want).abs() < 1e-6, "{gi} vs {want}");
    }
    // The scale is PyTorch's `noise.div_(1 - p)`: 1 - p rounded to f32, the quotient in f32
    // (p = 0.999: 999.99994, where 1 / (1 - p) rounded once is 1000).
    for (p, want) in [(0.999, 999.99994f32), (0.47, 1.8867925f32)] {
        let ones = Tensor::ones(&d, &[65536], DType::F32).unwrap();
        let kept: Vec<f32> = dropout(&ones, p, true)
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
            .into_iter()
            .filter(|&v| v != 0.0)
            .collect();
        assert!(
            !kept.is_empty() && kept.iter().all(|&v| v == want),
            "p {p}: {kept:?}"
        );
    }
    // p = 1 is `x * 0` as in PyTorch: zero gradients (not none), NaN and inf become NaN.
    let xs = Tensor::from_slice(&d, &[1.0f32, f32::NAN, f32::INFINITY, -2.0], &[4]).unwrap();
    let xs = xs.requires_grad().unwrap();
    let y = dropout(&xs, 1.0, true).unwrap();
    let yv = vals(&y);
    assert_eq!(yv[0], 0.0);
    assert!(yv[1].is_nan() && yv[2].is_nan(), "{yv:?}");
    assert_eq!(yv[3], 0.0);
    let g = y.sum_all().unwrap().backward().unwrap();
    assert_eq!(vals(g.get(&xs).unwrap()), vec![0.0; 4]);
}

/// Ranges whose samples their dtype cannot hold are refused, as PyTorch refuses them (they
/// gave all inf, all NaN, or f16 infs): bounds outside the dtype, `to - from` past its largest
/// value, and normals whose reach `|mean| + 5.77 std` passes it. Ranges at the limits still
/// sample finite values.
#[test]
fn ranges_past_the_dtype_are_refused() {
    let d = dev();
    let err = |r: wgtensor::Result<Tensor>, op: &str, needle: &str| {
        let e = r.unwrap_err();
        assert!(
            matches!(e, wgtensor::Error::InvalidArgument { .. }),
            "{e:?}"
        );
        let m = e.to_string();
        assert!(
            m.starts_with(&format!("{op}:")) && m.contains(needle),
            "{m}"
        );
    };
    let f32 = DType::F32;
    err(
        uniform(d, &[4096], -3e38, 3e38, f32),
        "uniform",
        "uniform_ expects to-from <= std::numeric_limits<Float>::max(), but found to=3e+38 and from=-3e+38",
    );
    err(
        uniform(d, &[4096], -1e39, 1e39, f32),
        "uniform",
        "from is out of bounds for float",
    );
    err(
        uniform(d, &[4], 0.0, 1e39, f32),
        "uniform",
        "to is out of bounds for float",
    );
    err(
        uniform(d, &[4], 0.0, f64::INFINITY, f32),
        "uniform",
        "to is out of bounds for float",
    );
    err(
        uniform(d, &[4], f64::NAN, 1.0, f32),
        "uniform",
        "from is out of bounds for float",
    );
    err(
        uniform(d, &[4], 3.0, -1.0, f32),
        "uniform",
        "uniform_ expects to return a [from, to) range, but found from=3 > to=-1",
    );
    err(
        uniform(d, &[4], 0.0, 1.0, DType::I32),
        "uniform",
        "\"check_uniform_bounds\" not implemented for 'Int'",
    );
    err(
        randn(d, &[4], DType::I32),
        "randn",
        "\"normal_kernel_cpu\" not implemented for 'Int'",
    );
    // The span is PyTorch's in f64 too: both bounds round to +-32752 in f32 (a span of
    // exactly f16's largest), but 65504.0002 is past it.
    err(
        uniform(d, &[4], -32752.0001, 32752.0001, DType::F16),
        "uniform",
        "uniform_ expects to-from <= std::numeric_limits<Half>::max()",
    );
    err(
        normal(d, &[4], 0.0, 1e38, f32),
        "normal",
        "exceeds the largest F32",
    );
    err(
        normal(d, &[4], 3e38, 1e37, f32),
        "normal",
        "exceeds the largest F32",
    );
    err(
        normal(d, &[4], 1e39, 0.0, f32),
        "normal",
        "mean is out of bounds for float",
    );
    err(
        normal(d, &[4], 0.0, f64::NAN, f32),
        "normal",
        "normal expects std >= 0.0, but found std nan",
    );
    err(
        normal(d, &[4], 0.0, -1.0, f32),
        "normal",
        "normal expects std >= 0.0, but found std -1",
    );
    // normal_ checks std before its dtype dispatch, and an empty int fill returns before it
    // (torch.randn(0, dtype=torch.int32) is an empty int tensor); C++'s double printing.
    err(
        normal(d, &[3], 0.0, -1.0, DType::I32),
        "normal",
        "normal expects std >= 0.0, but found std -1",
    );
    err(
        normal(d, &[3], 0.0, -1e-7, f32),
        "normal",
        "normal expects std >= 0.0, but found std -1e-07",
    );
    for t in [
        randn(d, &[0], DType::I32).unwrap(),
        normal(d, &[2, 0], 1.0, 2.0, DType::I32).unwrap(),
    ] {
        assert_eq!(t.dtype(), DType::I32);
        assert_eq!(t.numel(), 0);
    }
    // ... and before this crate's range checks (a mean past f32 fills nothing).
    let t = normal(d, &[0, 3], 1e39, 2.0, f32).unwrap();
    assert_eq!((t.shape(), t.dtype()), (&[0usize, 3][..], f32));
    err(
        randn(d, &[2], DType::I32),
        "randn",
        "not implemented for 'Int'",
    );
    err(
        uniform(d, &[0], 0.0, 1.0, DType::I32),
        "uniform",
        "not implemented for 'Int'",
    );
    err(
        bernoulli(d, &[3], f64::NAN, f32),
        "bernoulli",
        "bernoulli_ expects p to be in [0, 1], but got p=nan",
    );
    err(
        kaiming_uniform(d, &[4, 4], f64::NAN, f32),
        "kaiming_uniform",
        "from is out of bounds for float",
    );
    err(
        xavier_uniform(d, &[4, 4], 1e39, f32),
        "xavier_uniform",
        "out of bounds",
    );
    // At the limits: finite samples in range.
    let m = f32::MAX as f64;
    let u = vals(&uniform(d, &[4096], -m / 2.0, m / 2.0, f32).unwrap());
    assert!(u.iter().all(|v| v.is_finite() && v.abs() <= f32::MAX / 2.0));
    assert!(u.iter().any(|&v| v > 0.0) && u.iter().any(|&v| v < 0.0));
    let u = vals(&uniform(d, &[4096], 0.0, m, f32).unwrap());
    assert!(u.iter().all(|v| v.is_finite() && *v >= 0.0));
    let u = vals(&uniform(d, &[16], 5.0, 5.0, f32).unwrap());
    assert_eq!(u, vec![5.0; 16]);
    let z = vals(&normal(d, &[1 << 16], 0.0, m / 5.77, f32).unwrap());
    assert!(z.iter().all(|v| v.is_finite()));
    if d.supports_f16() {
        let f16 = DType::F16;
        err(
            uniform(d, &[4096], -1e5, 1e5, f16),
            "uniform",
            "from is out of bounds for c10::Half",
        );
        err(
            uniform(d, &[4], -4e4, 4e4, f16),
            "uniform",
            "std::numeric_limits<Half>::max()",
        );
        err(
            normal(d, &[4], 0.0, 2e4, f16),
            "normal",
            "exceeds the largest F16",
        );
        err(
            normal(d, &[4], 65000.0, 100.0, f16),
            "normal",
            "exceeds the largest F16",
        );
        let h = |t: Tensor| vals(&t.to_dtype(f32).unwrap());
        let u = h(uniform(d, &[4096], -32752.0, 32752.0, f16).unwrap());
        assert!(u.iter().all(|v| v.is_finite() && v.abs() <= 32752.0));
        let u = h(uniform(d, &[4096], 0.0, 65504.0, f16).unwrap());
        assert!(u.iter().all(|v| v.is_finite()));
        let z = h(normal(d, &[1 << 16], 0.0, 65504.0 / 5.77, f16).unwrap());
        assert!(z.iter().all(|v| v.is_finite()));
        let z = h(randn(d, &[1 << 16], f16).unwrap());
        assert!(z.iter().all(|v| v.is_finite()));
    }
}

/// An empty range draws its computed `a + 0 * u`: `uniform(-0.0, 0.0)` is +0.0 everywhere,
/// as PyTorch's `x * (to - from) + from` (so a `Linear` with no inputs gets +0.0 biases, where
/// the remap of a draw at `b` back to `a` gave -0.0).
#[test]
fn uniform_of_an_empty_range_keeps_positive_zero() {
    for dt in [DType::F32, DType::F16] {
        if dt == DType::F16 && !dev().supports_f16() {
            continue;
        }
        let u = wgtensor::ops::uniform(dev(), &[64], -0.0, 0.0, dt).unwrap();
        let v = u.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
        assert!(v.iter().all(|x| x.to_bits() == 0), "{dt:?}: {v:?}");
    }
    let l = wgtensor::nn::Linear::new(dev(), 0, 3, true).unwrap();
    let b = l.bias.as_ref().unwrap().to_vec::<f32>().unwrap();
    assert!(b.iter().all(|x| x.to_bits() == 0), "{b:?}");
}

/// dropout returns an empty input as it is (any dtype), and p = 1 of an i32 tensor gives i32
/// zeros, as `_dropout_impl`.
#[test]
fn dropout_of_empty_and_integer_inputs() {
    let e = Tensor::zeros(dev(), &[0, 3], DType::I32).unwrap();
    let y = wgtensor::ops::dropout(&e, 0.5, true).unwrap();
    assert_eq!((y.shape(), y.dtype()), (&[0usize, 3][..], DType::I32));
    let i = Tensor::from_slice(dev(), &[1i32, 2], &[2]).unwrap();
    let z = wgtensor::ops::dropout(&i, 1.0, true).unwrap();
    assert_eq!(z.to_vec::<i32>().unwrap(), [0, 0]);
    assert!(wgtensor::ops::dropout(&i, 1.5, true).is_err());
}
