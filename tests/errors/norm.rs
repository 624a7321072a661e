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
    shape_err(&e, "group_norm", &["received 1"]);
    let e = group_norm(&x, 3, Some(&t(&[4])), None, 1e-5).unwrap_err();
    shape_err(&e, "group_norm", &["weight", "[4]", "[2, 3, 4]"]);
}

/// PyTorch's error_inputs for native_layer_norm, rms_norm and group_norm, whose regexes
/// these are, in its check order (the parameters before the input for layer norm, the
/// one-value check before divisibility and the parameters for group norm).
#[test]
fn pytorch_error_inputs_words() {
    let has = |r: Result<Tensor, Error>, want: &str| {
        let e = r.unwrap_err();
        assert!(msg(&e).contains(want), "{e}\nwants: {want}");
    };
    let x = t(&[1, 2, 3]);
    has(
        layer_norm(&x, &[], None, None, 1e-5),
        "Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one \
         element, but got normalized_shape = []",
    );
    has(
        layer_norm(&x, &[1, 2, 3], Some(&t(&[1, 2])), None, 1e-5),
        "Expected weight to be of same shape as normalized_shape, but got weight of shape \
         [1, 2] and normalized_shape = [1, 2, 3]",
    );
    has(
        layer_norm(&x, &[1, 2, 3], None, Some(&t(&[1, 2])), 1e-5),
        "Expected bias to be of same shape as normalized_shape",
    );
    let x = t(&[2, 2, 3]);
    has(
        layer_norm(&x, &[2, 2], None, None, 1e-5),
        "Given normalized_shape=[2, 2], expected input with shape [*, 2, 2], but got input of \
         size[2, 2, 3]",
    );
    has(
        layer_norm(&x, &[2, 2], Some(&t(&[2])), None, 1e-5),
        "Expected weight to be of same shape as normalized_shape",
    );
    // rms_norm's own check: the dims joined as PyTorch's, the rank before them.
    has(
        rms_norm(&x, &[2, 2], None, None),
        "Given normalized_shape=[2, 2], expected input with shape [*2, 2], but got input of \
         size[2, 2, 3]",
    );
    has(
        rms_norm(&t(&[3]), &[2, 3], None, None),
        "Input tensor must have at least 2 dimensions, but got 1",
    );
    has(
        group_norm(&t(&[1]), 2, None, None, 1e-5),
        "Expected at least 2 dimensions for input tensor but received 1",
    );
    has(
        group_norm(&t(&[2, 7, 4]), 2, None, None, 1e-5),
        "Expected number of channels in input to be divisible by num_groups, but got input of \
         shape [2, 7, 4] and num_groups=2",
    );
    has(
        group_norm(&t(&[1, 4, 1]), 4, Some(&t(&[3])), None, 1e-5),
        "Expected more than 1 value per channel when training, got input size [1, 4, 1]",
    );
    has(
        group_norm(&t(&[2, 4, 3]), 2, None, Some(&t(&[3])), 1e-5),
        "Expected bias to be a vector of size equal to the number of channels in input, but \
         got bias of shape [3] and input of shape [2, 4, 3]",
    );
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
        let want = if g == 0 {
            "Expected num groups to be greater than 0, got 0".to_string()
        } else {
            format!("[2, 6, 4] and num_groups={g}")
        };
        assert!(msg(&e).contains(&want), "{e}");
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

/// Shapes are checked before dtypes (the kernels check those), as PyTorch: an i32 input, an
/// f16 bias beside an f32 input get the shape sentence when a shape is also wrong.
#[test]
fn shapes_come_before_dtypes() {
    let xi = Tensor::zeros(dev(), &[2, 5], DType::I32).unwrap();
    has(
        layer_norm(&xi, &[], None, None, 1e-5),
        "Expected normalized_shape to be at least 1-dimensional",
    );
    let b16 = Tensor::zeros(dev(), &[3], DType::F16).unwrap();
    has(
        layer_norm(&t(&[2, 5]), &[3], Some(&t(&[3])), Some(&b16), 1e-5),
        "Given normalized_shape=[3], expected input with shape [*, 3], but got input of size[2, 5]",
    );
    let xi1 = Tensor::zeros(dev(), &[3], DType::I32).unwrap();
    has(
        group_norm(&xi1, 1, None, None, 1e-5),
        "Expected at least 2 dimensions for input tensor but received 1",
    );
    // With the shapes right, the dtype errors still come.
    assert!(layer_norm(&xi, &[5], None, None, 1e-5).is_err());
    assert!(layer_norm(&t(&[2, 3]), &[3], Some(&t(&[3])), Some(&b16), 1e-5).is_err());
}
