//! Division where users expect exactness. WGSL allows 2.5 ulp for f32 division and GPUs use
//! it (an NVIDIA H200 gave 0.99999994 for the mean of ones); the kernels refine the quotient,
//! so every adapter is within 1 ulp of the correctly rounded result, and exact wherever the
//! true quotient is a float: x / x, a mean of a constant whose sum is exact, an average pool of
//! a constant.

use super::{dev, vals};
use wgtensor::ops::{avg_pool2d, AvgPool2dOptions, BinaryOp};
use wgtensor::Tensor;

/// Deterministic values spread over many binades, both signs.
fn spread(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let x = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed);
            let m = 1.0 + (x >> 9) as f32 / (1u32 << 23) as f32; // [1, 2)
            let e = ((x >> 3) % 40) as i32 - 20;
            let s = if x & 1 == 0 { 1.0 } else { -1.0 };
            s * m * 2f32.powi(e)
        })
        .collect()
}

/// Distance in ulps between two finite floats of the same sign.
fn ulps(a: f32, b: f32) -> u32 {
    (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs() as u32
}

#[test]
fn mean_of_a_constant_is_that_constant() {
    for c in [1.0f32, 0.5, 3.0, 0.25, 1024.0] {
        for n in [1usize, 3, 7, 10, 100, 1000, 4097] {
            let x = Tensor::full(dev(), &[2, n], c as f64, wgtensor::DType::F32).unwrap();
            assert_eq!(vals(&x.mean(1, false).unwrap()), vec![c, c], "c {c} n {n}");
            assert_eq!(vals(&x.mean(0, false).unwrap()), vec![c; n], "c {c} n {n}");
        }
    }
}

#[test]
fn division_is_within_one_ulp_and_exact_when_the_quotient_is() {
    let n = 4096;
    let a = spread(n, 7);
    let b = spread(n, 99);
    let ta = Tensor::from_slice(dev(), &a, &[n]).unwrap();
    let tb = Tensor::from_slice(dev(), &b, &[n]).unwrap();
    let q = vals(&ta.binary(&tb, BinaryOp::Div).unwrap());
    for i in 0..n {
        let want = a[i] / b[i];
        assert!(
            ulps(q[i], want) <= 1,
            "{} / {} = {}, expected {want}",
            a[i],
            b[i],
            q[i]
        );
    }
    // x / x is exactly 1, a multiple of 3 over 3 exactly the integer.
    let ones = vals(&ta.binary(&ta, BinaryOp::Div).unwrap());
    assert!(ones.iter().all(|&v| v == 1.0), "x / x: {ones:?}");
    let m: Vec<f32> = (0..n).map(|i| 3.0 * i as f32).collect();
    let tm = Tensor::from_slice(dev(), &m, &[n]).unwrap();
    let k = vals(&tm.div_scalar(3.0).unwrap());
    assert!(k.iter().enumerate().all(|(i, &v)| v == i as f32), "3k / 3");
    // s / x (rdiv) refines the same way.
    let r = vals(&ta.rdiv_scalar(1.0).unwrap());
    for i in 0..n {
        assert!(ulps(r[i], 1.0 / a[i]) <= 1, "1 / {} = {}", a[i], r[i]);
    }
    // Zero and infinite divisors keep IEEE results.
    let z = Tensor::from_slice(dev(), &[1.0f32, -1.0, 0.0, 2.0], &[4]).unwrap();
    let d = Tensor::from_slice(dev(), &[0.0f32, 0.0, 0.0, f32::INFINITY], &[4]).unwrap();
    let v = vals(&z.binary(&d, BinaryOp::Div).unwrap());
    assert_eq!(v[0], f32::INFINITY);
    assert_eq!(v[1], f32::NEG_INFINITY);
    assert!(v[2].is_nan());
    assert_eq!(v[3], 0.0);
}

#[test]
fn average_pool_of_a_constant_is_that_constant() {
    let x = Tensor::full(dev(), &[1, 2, 9, 9], 3.0, wgtensor::DType::F32).unwrap();
    for k in [2usize, 3] {
        let y = vals(&avg_pool2d(&x, &AvgPool2dOptions::new(k)).unwrap());
        assert!(y.iter().all(|&v| v == 3.0), "k {k}: {y:?}");
    }
}
