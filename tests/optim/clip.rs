//! Gradient clipping: clip_grad_norm (f32 and f16 gradients) and clip_grad_value.

use super::*;

#[test]
fn clip_grad_norm_scales_on_the_device() {
    let g1 = Tensor::from_slice(dev(), &[3.0f32, 0.0], &[2]).unwrap();
    let g2 = Tensor::from_slice(dev(), &[0.0f32, 4.0, 0.0], &[3]).unwrap();
    let (clipped, norm) = clip_grad_norm(&[&g1, &g2], 1.0).unwrap();
    assert!((vals(&norm)[0] - 5.0).abs() < 1e-6);
    close(&vals(&clipped[0]), &[0.6, 0.0], "clipped");
    close(&vals(&clipped[1]), &[0.0, 0.8, 0.0], "clipped");
    // Below the threshold the gradients are unchanged.
    let (same, _) = clip_grad_norm(&[&g1, &g2], 10.0).unwrap();
    close(&vals(&same[1]), &[0.0, 4.0, 0.0], "unclipped");
    assert!(clip_grad_norm(&[], 1.0).is_err());
    // An infinite max_norm measures the norm and leaves the gradients as they are.
    let (same, norm) = clip_grad_norm(&[&g1, &g2], f64::INFINITY).unwrap();
    assert!((vals(&norm)[0] - 5.0).abs() < 1e-6);
    assert_eq!(vals(&same[0]), vec![3.0, 0.0]);
    // max_norm is not checked (PyTorch's): a negative one flips the sign, NaN spreads.
    let (neg, _) = clip_grad_norm(&[&g1], -1.0).unwrap();
    close(&vals(&neg[0]), &[-1.0, 0.0], "negative max_norm");
    let (nan, _) = clip_grad_norm(&[&g1], f64::NAN).unwrap();
    assert!(vals(&nan[0]).iter().all(|v| v.is_nan()));
    // One element's norm is its magnitude (PyTorch's vector_norm), where the square of 3e19
    // overflows f32 and that of 1e-25 underflows; a single gradient's total is its norm.
    let big = Tensor::from_slice(dev(), &[-3e19f32], &[1]).unwrap();
    let (c, n) = clip_grad_norm(&[&big], 1.0).unwrap();
    assert_eq!(vals(&n), vec![f64::from(3e19f32)]);
    assert_eq!(vals(&c[0]), vec![-1.0]);
    let tiny = Tensor::from_slice(dev(), &[1e-25f32], &[]).unwrap();
    let (c, n) = clip_grad_norm(&[&tiny], 1.0).unwrap();
    assert_eq!(vals(&n), vec![f64::from(1e-25f32)]);
    assert_eq!(vals(&c[0]), vec![f64::from(1e-25f32)]);
}

/// f16 gradients get an f16 norm, each gradient's norm rounded to f16 as PyTorch's per-tensor
/// norms: past 65504 it is inf, the coefficient 0 and the gradients zeroed (PyTorch without
/// error_if_nonfinite). Mixed dtypes give the promoted one.
#[test]
fn clip_grad_norm_f16_gradients() {
    if !dev().supports_f16() {
        return;
    }
    let h = |v: &[f32], shape: &[usize]| {
        Tensor::from_slice(dev(), v, shape)
            .unwrap()
            .to_dtype(DType::F16)
            .unwrap()
    };
    let back = |t: &Tensor| vals(&t.to_dtype(DType::F32).unwrap());
    let g = h(&[3.0, 4.0], &[2]);
    let (clipped, norm) = clip_grad_norm(&[&g], 1.0).unwrap();
    assert_eq!(norm.dtype(), DType::F16);
    assert_eq!(back(&norm), vec![5.0]);
    for (got, want) in back(&clipped[0]).into_iter().zip([0.6, 0.8]) {
        assert!((got - want).abs() <= 1e-3, "f16 clipped: {got} vs {want}");
    }
    // 300 values of 4000: a norm of 69282, inf in f16.
    let big = h(&[4000.0; 300], &[300]);
    let (clipped, norm) = clip_grad_norm(&[&big], 1.0).unwrap();
    assert_eq!(back(&norm), vec![f64::INFINITY]);
    assert!(back(&clipped[0]).iter().all(|&v| v == 0.0));
    // PyTorch's max_norm / t is reciprocal(t) * max_norm: the f16 reciprocal of a zero norm
    // (plus 1e-6) is inf, and inf * 0 makes the gradients NaN.
    let (clipped, _) = clip_grad_norm(&[&h(&[0.0, 0.0], &[2])], 0.0).unwrap();
    assert!(back(&clipped[0]).iter().all(|v| v.is_nan()));
    let g32 = Tensor::from_slice(dev(), &[0.0f32, 12.0], &[2]).unwrap();
    let (_, norm) = clip_grad_norm(&[&g, &g32], 1.0).unwrap();
    assert_eq!((norm.dtype(), vals(&norm)), (DType::F32, vec![13.0]));
    // The f32 coefficient scales an f16 gradient unrounded (torch 2.15's clipped values; the
    // coefficient rounded to f16 first gave 0.52783 for 3).
    let g16 = h(&[3.0, 0.1, -2.5], &[3]);
    let g32 = Tensor::from_slice(dev(), &[4.0f32, 1.0], &[2]).unwrap();
    let (clipped, norm) = clip_grad_norm(&[&g16, &g32], 1.0).unwrap();
    assert!((vals(&norm)[0] - 5.6797).abs() < 1e-3, "{:?}", vals(&norm));
    assert_eq!(clipped[0].dtype(), DType::F16);
    assert_eq!(
        back(&clipped[0]),
        vec![0.5283203125, 0.017608642578125, -0.440185546875]
    );
    let c32 = vals(&clipped[1]);
    assert!((c32[0] - 0.7042646408081055).abs() < 1e-6, "{c32:?}");
    // A 0-d f16 gradient beside an f32 one stays f16 (mul_ writes in place).
    let g0 = h(&[3.0], &[]);
    let (clipped, _) = clip_grad_norm(&[&g0, &g32], 1.0).unwrap();
    assert_eq!(
        (clipped[0].dtype(), clipped[0].shape()),
        (DType::F16, &[][..])
    );
}

/// PyTorch's clip_grad_value_: every element clamped into [-v, v], NaN kept, f16 too.
#[test]
fn clip_grad_value_clamps_each_element() {
    use wgtensor::optim::clip_grad_value;
    let a = Tensor::from_slice(dev(), &[3.0f32, -0.5, -4.0, f32::NAN], &[4]).unwrap();
    let b = Tensor::from_slice(dev(), &[0.25f32, 9.0], &[2]).unwrap();
    let c = clip_grad_value(&[&a, &b], 1.0).unwrap();
    let ca = vals(&c[0]);
    assert_eq!(&ca[..3], &[1.0, -0.5, -1.0]);
    assert!(ca[3].is_nan());
    assert_eq!(vals(&c[1]), vec![0.25, 1.0]);
    if dev().supports_f16() {
        let h = b.to_dtype(DType::F16).unwrap();
        let c = clip_grad_value(&[&h], 0.5).unwrap();
        assert_eq!(c[0].dtype(), DType::F16);
        assert_eq!(vals(&c[0].to_dtype(DType::F32).unwrap()), vec![0.25, 0.5]);
    }
    // A clip value float cannot hold is PyTorch's overflow error (its clamp converts it to
    // float), unless there is no gradient to clamp.
    let e = clip_grad_value(&[&a], 1e39).unwrap_err().to_string();
    assert!(
        e.contains("value cannot be converted to type float without overflow"),
        "{e}"
    );
    assert!(clip_grad_value(&[], f64::MAX).unwrap().is_empty());
}

/// Integer gradients are refused before any norm is computed, in vector_norm's words.
#[test]
fn clip_grad_norm_refuses_integer_gradients() {
    let g = Tensor::from_slice(dev(), &[3.0f32, 4.0], &[2]).unwrap();
    let gi = Tensor::from_slice(dev(), &[3i32, 4], &[2]).unwrap();
    let e = clip_grad_norm(&[&g, &gi], 1.0).unwrap_err();
    assert!(
        e.to_string().contains(
            "linalg.vector_norm: Expected a floating point or complex tensor as input. Got Int"
        ),
        "{e}"
    );
}
