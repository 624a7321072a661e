//! NaN propagates as in PyTorch: through relu (standalone and fused), maximum/minimum, the
//! scalar max/min, the max/min reductions, and batch-norm statistics.

use wgtensor::ops::{
    batch_norm_inference, batch_norm_train, conv2d, gemm, Activation, BatchNormOptions,
    Conv2dOptions, GemmOptions, ScalarOp,
};
use wgtensor::{DType, Tensor};

use super::{dev, vals};

fn t(v: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_slice(dev(), v, shape).unwrap()
}

const NAN: f32 = f32::NAN;

#[test]
fn elementwise_keeps_nan() {
    let x = t(&[NAN, -1.0, 2.0], &[3]);
    let r = vals(&x.relu().unwrap());
    assert!(r[0].is_nan() && r[1] == 0.0 && r[2] == 2.0, "{r:?}");
    let one = t(&[1.0, 1.0, 1.0], &[3]);
    for y in [
        x.maximum(&one).unwrap(),
        one.maximum(&x).unwrap(),
        x.minimum(&one).unwrap(),
        one.minimum(&x).unwrap(),
        x.scalar_op(ScalarOp::Max, 0.0).unwrap(),
        x.scalar_op(ScalarOp::Min, 0.0).unwrap(),
    ] {
        let v = vals(&y);
        assert!(v[0].is_nan(), "{v:?}");
        assert!(!v[1].is_nan() && !v[2].is_nan(), "{v:?}");
    }
    // A NaN scalar too.
    let v = vals(&one.scalar_op(ScalarOp::Max, f64::NAN).unwrap());
    assert!(v.iter().all(|x| x.is_nan()), "{v:?}");
    // f16 as well.
    if dev().supports_f16() {
        let h = x.to_dtype(DType::F16).unwrap().relu().unwrap();
        let v = vals(&h.to_dtype(DType::F32).unwrap());
        assert!(v[0].is_nan(), "{v:?}");
    }
}

#[test]
fn max_min_reductions_keep_nan() {
    // Short rows (one invocation per output) and long rows of few outputs (a workgroup each).
    for len in [5usize, 1000] {
        let mut v: Vec<f32> = (0..2 * len).map(|i| i as f32).collect();
        v[len / 2] = NAN; // row 0 only
        let x = t(&v, &[2, len]);
        for y in [x.max(1, false).unwrap(), x.min(1, false).unwrap()] {
            let r = vals(&y);
            assert!(r[0].is_nan() && !r[1].is_nan(), "len {len}: {r:?}");
        }
    }
    // Infinities reduce to themselves.
    let x = t(&[f32::NEG_INFINITY; 4], &[4]);
    assert_eq!(vals(&x.max(0, false).unwrap()), vec![f32::NEG_INFINITY]);
    let x = t(&[f32::INFINITY; 4], &[4]);
    assert_eq!(vals(&x.min(0, false).unwrap()), vec![f32::INFINITY]);
}

#[test]
fn fused_relu_epilogues_keep_nan() {
    let a = t(&[NAN, 1.0, 1.0, 1.0], &[2, 2]);
    let b = t(&[1.0, -1.0, 1.0, -1.0], &[2, 2]);
    let y = vals(
        &gemm(
            &a,
            &b,
            &GemmOptions {
                activation: Activation::Relu,
                ..Default::default()
            },
        )
        .unwrap(),
    );
    assert!(y[0].is_nan() && y[1].is_nan(), "row 0 holds the NaN: {y:?}");
    assert_eq!(&y[2..], &[2.0, 0.0]);

    let mut xv = vec![1.0f32; 16];
    xv[5] = NAN;
    let x = t(&xv, &[1, 1, 4, 4]);
    let w = t(&[-1.0; 4], &[1, 1, 2, 2]);
    let o = Conv2dOptions {
        activation: Activation::Relu,
        ..Default::default()
    };
    let y = vals(&conv2d(&x, &w, None, &o).unwrap());
    // Windows covering x[1][1] are NaN, the rest relu(-4) = 0.
    assert_eq!(y.iter().filter(|v| v.is_nan()).count(), 4, "{y:?}");
    assert!(y.iter().all(|&v| v.is_nan() || v == 0.0), "{y:?}");

    let x = t(&[NAN, -1.0, 1.0, -1.0], &[2, 2]);
    let rm = Tensor::zeros(dev(), &[2], DType::F32).unwrap();
    let rv = Tensor::full(dev(), &[2], 1.0, DType::F32).unwrap();
    let y = vals(
        &batch_norm_inference(
            &x,
            &rm,
            &rv,
            &BatchNormOptions {
                eps: 0.0,
                activation: Activation::Relu,
                ..Default::default()
            },
        )
        .unwrap(),
    );
    assert!(y[0].is_nan() && y[1] == 0.0, "{y:?}");
}

#[test]
fn batch_norm_statistics_keep_nan() {
    // Channel 0 holds a NaN, channel 1 does not.
    let x = t(&[NAN, 1.0, 2.0, 3.0, 4.0, 5.0], &[3, 2]);
    let out = batch_norm_train(&x, None, &BatchNormOptions::default()).unwrap();
    let (y, mean, invstd) = (out.y, out.saved.mean().clone(), out.saved.invstd().clone());
    let (m, s, y) = (vals(&mean), vals(&invstd), vals(&y));
    assert!(m[0].is_nan() && s[0].is_nan(), "mean {m:?} invstd {s:?}");
    assert!(!m[1].is_nan() && !s[1].is_nan(), "mean {m:?} invstd {s:?}");
    assert!(y.iter().step_by(2).all(|v| v.is_nan()), "{y:?}");
    assert!(y.iter().skip(1).step_by(2).all(|v| v.is_finite()), "{y:?}");
}
