//! layer_norm / group_norm / rms_norm argument errors, and a sweep of random shapes for every
//! argument (Ok or Err, never a panic).

use super::*;
use wgtensor::ops::{group_norm, layer_norm, rms_norm};

fn shape_err(e: &Error, op: &str, parts: &[&str]) {
    assert!(matches!(e, Error::Shape { op: o, .. } if *o == op), "{e:?}");
    for p in parts {
        assert!(msg(e).contains(p), "{e} should mention {p}");
    }
}

#[test]
fn shapes_name_the_values() {
    let x = t(&[2, 3, 4]);
    let e = layer_norm(&x, &[3], None, None, 1e-5).unwrap_err();
    shape_err(&e, "layer_norm", &["[3]", "[2, 3, 4]"]);
    let e = layer_norm(&x, &[], None, None, 1e-5).unwrap_err();
    shape_err(&e, "layer_norm", &["normalized_shape"]);
    let e = layer_norm(&x, &[4], Some(&t(&[3])), None, 1e-5).unwrap_err();
    shape_err(&e, "layer_norm", &["weight", "[4]", "[3]"]);
    let e = layer_norm(&x, &[3, 4], None, Some(&t(&[4])), 1e-5).unwrap_err();
    shape_err(&e, "layer_norm", &["bias", "[3, 4]", "[4]"]);
    let e = rms_norm(&x, &[2, 4], None, None).unwrap_err();
    shape_err(&e, "rms_norm", &["[2, 4]", "[2, 3, 4]"]);
    let e = group_norm(&t(&[6]), 2, None, None, 1e-5).unwrap_err();
    shape_err(&e, "group_norm", &["[6]"]);
    let e = group_norm(&x, 3, Some(&t(&[4])), None, 1e-5).unwrap_err();
    shape_err(&e, "group_norm", &["weight", "[3]", "[4]"]);
}

#[test]
fn arguments_name_the_values() {
    let x = t(&[2, 6, 4]);
    for g in [0, 4] {
        let e = group_norm(&x, g, None, None, 1e-5).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    op: "group_norm",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(
            msg(&e).contains(&format!("num_groups {g}")) && msg(&e).contains('6'),
            "{e}"
        );
    }
    for eps in [-1.0, f64::NAN] {
        let e = layer_norm(&x, &[4], None, None, eps).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    op: "layer_norm",
                    ..
                }
            ),
            "{e:?}"
        );
        let e = rms_norm(&x, &[4], None, Some(eps)).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { op: "rms_norm", .. }),
            "{e:?}"
        );
    }
    let i = Tensor::from_slice(dev(), &[1i32; 4], &[4]).unwrap();
    assert!(layer_norm(&i, &[4], None, None, 1e-5).is_err());
}

#[test]
fn dtype_and_device_mismatch() {
    let x = t(&[2, 3]);
    if dev().supports_f16() {
        let h = Tensor::from_slice(dev(), &[f16::ONE; 3], &[3]).unwrap();
        let e = layer_norm(&x, &[3], Some(&h), None, 1e-5).unwrap_err();
        assert_eq!(
            e,
            Error::DType {
                op: "layer_norm",
                expected: DType::F32,
                got: DType::F16
            }
        );
    }
    let other = Device::new().unwrap();
    let c = Tensor::from_slice(&other, &[1.0f32; 3], &[3]).unwrap();
    let e = group_norm(&x, 1, Some(&c), None, 1e-5).unwrap_err();
    assert_eq!(e, Error::DeviceMismatch { op: "group_norm" });
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Random shapes for x, the normalized shape, weight and bias and a random group count:
    /// Ok or Err, never a panic.
    #[test]
    fn random_arguments_never_panic(
        xs in prop::collection::vec(0usize..4, 0..4),
        ns in prop::collection::vec(0usize..4, 0..3),
        ws in prop::option::of(prop::collection::vec(0usize..4, 0..3)),
        groups in 0usize..4,
    ) {
        let x = t(&xs);
        let w = ws.as_ref().map(|s| t(s));
        let _ = layer_norm(&x, &ns, w.as_ref(), w.as_ref(), 1e-5);
        let _ = rms_norm(&x, &ns, w.as_ref(), None);
        let _ = group_norm(&x, groups, w.as_ref(), w.as_ref(), 1e-5);
    }
}

/// A tensor past one storage binding is refused with `TooLarge` naming the op (the norms run
/// no windows), never a panic or a partial result.
#[test]
fn past_one_binding_is_refused() {
    let small = Device::with_options(DeviceOptions {
        max_binding_bytes: Some(4096),
        ..Default::default()
    })
    .unwrap();
    let x = Tensor::from_slice(&small, &vec![1.0f32; 2048], &[2, 1024]).unwrap();
    let e = layer_norm(&x, &[1024], None, None, 1e-5).unwrap_err();
    assert!(
        matches!(
            e,
            Error::TooLarge {
                op: "layer_norm",
                ..
            }
        ),
        "{e:?}"
    );
    let e = group_norm(&x.reshape(&[2, 4, 256]).unwrap(), 2, None, None, 1e-5).unwrap_err();
    assert!(
        matches!(
            e,
            Error::TooLarge {
                op: "group_norm",
                ..
            }
        ),
        "{e:?}"
    );
}
