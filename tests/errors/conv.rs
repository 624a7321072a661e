//! Convolution argument errors: each names the op and the offending values.

use super::*;
use wgtensor::ops::{
    conv1d, conv1d_backward_input, conv1d_backward_weight, conv2d, conv2d_backward_input,
    conv2d_backward_weight, conv_backward_bias, conv_transpose1d, conv_transpose2d, Activation,
    Conv1dOptions, Conv2dOptions, ConvTranspose1dOptions, ConvTranspose2dOptions, Padding,
};

const FWD: &str = "conv2d";
const DGRAD: &str = "conv2d_backward_input";
const WGRAD: &str = "conv2d_backward_weight";
const TRANSPOSE: &str = "conv_transpose2d";

fn groups(g: usize) -> Conv2dOptions {
    Conv2dOptions {
        groups: g,
        ..Default::default()
    }
}

/// `e` is `Shape` or `InvalidArgument` (per `shape`) of `op` and its message names `parts`.
fn check(e: &Error, op: &str, shape: bool, parts: &[&str]) {
    let variant_ok = if shape {
        matches!(e, Error::Shape { op: o, .. } if *o == op)
    } else {
        matches!(e, Error::InvalidArgument { op: o, .. } if *o == op)
    };
    let kind = if shape { "Shape" } else { "InvalidArgument" };
    assert!(variant_ok, "expected {kind} from {op}, got {e:?}");
    for p in parts {
        assert!(msg(e).contains(p), "`{e}` should mention `{p}`");
    }
}

fn err<T: std::fmt::Debug>(r: wgtensor::Result<T>) -> Error {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e,
    }
}

#[test]
fn groups_must_divide_the_channels() {
    // C = 64 is not a multiple of 3 (the weight's dim 1 is irrelevant once that fails).
    let e = err(conv2d(
        &t(&[2, 64, 5, 5]),
        &t(&[6, 21, 3, 3]),
        None,
        &groups(3),
    ));
    check(
        &e,
        FWD,
        true,
        &[
            "expected input[2, 64, 5, 5] to have 63 channels, but got 64 channels instead",
            "groups 3 does not divide in_channels 64",
        ],
    );
    // O = 8 is not a multiple of 3.
    let e = err(conv2d(
        &t(&[2, 6, 5, 5]),
        &t(&[8, 2, 3, 3]),
        None,
        &groups(3),
    ));
    check(&e, FWD, false, &["groups 3 does not divide out_channels 8"]);
    let e = err(conv2d(
        &t(&[2, 6, 5, 5]),
        &t(&[6, 6, 3, 3]),
        None,
        &groups(0),
    ));
    check(&e, FWD, false, &["groups must be at least 1, got 0"]);
    // The gradients and 1-D entry points check the same.
    let e = err(conv2d_backward_input(
        &t(&[2, 8, 3, 3]),
        &t(&[8, 2, 3, 3]),
        [5, 5],
        &groups(3),
    ));
    check(
        &e,
        DGRAD,
        false,
        &["groups 3 does not divide out_channels 8"],
    );
    let e = err(conv2d_backward_weight(
        &t(&[2, 6, 3, 3]),
        &t(&[2, 64, 5, 5]),
        [3, 3],
        &groups(3),
    ));
    check(
        &e,
        WGRAD,
        false,
        &["groups 3 does not divide in_channels 64"],
    );
    let e = err(conv2d_backward_weight(
        &t(&[2, 8, 3, 3]),
        &t(&[2, 6, 5, 5]),
        [3, 3],
        &groups(3),
    ));
    check(
        &e,
        WGRAD,
        false,
        &["groups 3 does not divide out_channels 8"],
    );
    let o1 = Conv1dOptions {
        groups: 4,
        ..Default::default()
    };
    let e = err(conv1d(&t(&[2, 6, 9]), &t(&[8, 1, 3]), None, &o1));
    check(
        &e,
        "conv1d",
        true,
        &[
            "Given groups=4, weight of size [8, 1, 3], expected input[2, 6, 9] to have 4 channels",
            "groups 4 does not divide in_channels 6",
        ],
    );
    // conv_transpose2d: w [C_in, C_out / groups, ...]; C_in must be a multiple of groups.
    let ot = ConvTranspose2dOptions {
        groups: 4,
        ..Default::default()
    };
    let e = err(conv_transpose2d(
        &t(&[1, 6, 3, 3]),
        &t(&[6, 2, 3, 3]),
        None,
        &ot,
    ));
    check(
        &e,
        TRANSPOSE,
        false,
        &[
            "Given groups=4, expected weight to be divisible by 4 at dimension 0, but got weight \
             of size [6, 2, 3, 3] instead",
            "groups 4 does not divide in_channels 6",
        ],
    );
    // PyTorch's check_shape_forward applies to a transposed weight's dim 0 (its input
    // channels) too: fewer than groups, none at all, or not the input's channel count.
    let e = err(conv_transpose2d(
        &t(&[1, 2, 3, 3]),
        &t(&[2, 1, 3, 3]),
        None,
        &ot,
    ));
    check(
        &e,
        TRANSPOSE,
        false,
        &[
            "Given groups=4, expected weight to be at least 4 at dimension 0, but got weight of \
           size [2, 1, 3, 3] instead",
        ],
    );
    let e = err(conv_transpose2d(
        &t(&[1, 0, 3, 3]),
        &t(&[0, 2, 3, 3]),
        None,
        &ConvTranspose2dOptions::default(),
    ));
    check(&e, TRANSPOSE, false, &["expected weight to be at least 1"]);
    let e = err(conv_transpose1d(
        &t(&[2, 3, 5]),
        &t(&[4, 2, 3]),
        None,
        &ConvTranspose1dOptions::default(),
    ));
    check(
        &e,
        "conv_transpose1d",
        true,
        &[
            "Given transposed=1, weight of size [4, 2, 3], expected input[2, 3, 5] to have 4 \
           channels, but got 3 channels instead",
        ],
    );
}

#[test]
fn weight_inconsistent_with_groups() {
    // C / groups = 6 / 3 = 2, but the weight has 3 input channels per group.
    let e = err(conv2d(
        &t(&[2, 6, 5, 5]),
        &t(&[6, 3, 3, 3]),
        None,
        &groups(3),
    ));
    check(
        &e,
        FWD,
        true,
        &["[6, 3, 3, 3]", "in_channels / groups = 6 / 3 = 2", "got 3"],
    );
    // Depthwise (groups = C) needs dim 1 = 1.
    let e = err(conv2d(
        &t(&[1, 4, 5, 5]),
        &t(&[8, 4, 3, 3]),
        None,
        &groups(4),
    ));
    check(&e, FWD, true, &["4 / 4 = 1", "got 4"]);
    // Data gradient: the weight's output channels must match dy's channels.
    let e = err(conv2d_backward_input(
        &t(&[2, 5, 3, 3]),
        &t(&[6, 2, 3, 3]),
        [5, 5],
        &groups(3),
    ));
    check(
        &e,
        DGRAD,
        true,
        &["dy has 5 channels", "[6, 2, 3, 3]", "6 output"],
    );
}

#[test]
fn output_size_must_be_positive() {
    // A 5x5 kernel on a 4x4 input without padding.
    let e = err(conv2d(
        &t(&[1, 1, 4, 4]),
        &t(&[1, 1, 5, 5]),
        None,
        &Conv2dOptions::default(),
    ));
    check(&e, FWD, true, &["output size would be <= 0", "4x4", "5x5"]);
    // A dilated 3x3 kernel spans 5 rows; asymmetric padding of 1 on top is not enough...
    let o = Conv2dOptions {
        dilation: [2, 1],
        padding: Padding {
            top: 1,
            ..Default::default()
        },
        ..Default::default()
    };
    let e = err(conv2d(&t(&[1, 1, 3, 4]), &t(&[1, 1, 3, 3]), None, &o));
    check(
        &e,
        FWD,
        true,
        &["output size would be <= 0", "3x4", "3x3", "[2, 1]"],
    );
    // ...and one more row of padding at the bottom makes it fit (one output row).
    let o = Conv2dOptions {
        padding: Padding {
            top: 1,
            bottom: 1,
            ..Default::default()
        },
        ..o
    };
    let y = conv2d(&t(&[1, 1, 3, 4]), &t(&[1, 1, 3, 3]), None, &o).unwrap();
    assert_eq!(y.shape(), &[1, 1, 1, 2]);
    // 1-D, the gradients and the transposed convolution.
    let e = err(conv1d(
        &t(&[1, 2, 3]),
        &t(&[2, 2, 4]),
        None,
        &Conv1dOptions::default(),
    ));
    check(
        &e,
        "conv1d",
        true,
        &["output size would be <= 0", "kernel 1x4"],
    );
    let e = err(conv2d_backward_input(
        &t(&[1, 1, 1, 1]),
        &t(&[1, 1, 5, 5]),
        [4, 4],
        &Conv2dOptions::default(),
    ));
    check(
        &e,
        DGRAD,
        true,
        &["output size would be <= 0", "4x4", "5x5"],
    );
    let e = err(conv2d_backward_weight(
        &t(&[1, 1, 1, 1]),
        &t(&[1, 1, 4, 4]),
        [5, 5],
        &Conv2dOptions::default(),
    ));
    check(
        &e,
        WGRAD,
        true,
        &["output size would be <= 0", "4x4", "5x5"],
    );
    // (1 - 1) * 1 + 1 * (1 - 1) + 1 = 1 output row before padding; padding 1 + 1 removes it.
    let ot = ConvTranspose2dOptions {
        padding: Padding::uniform(1),
        ..Default::default()
    };
    let e = err(conv_transpose2d(
        &t(&[1, 2, 1, 1]),
        &t(&[2, 1, 1, 1]),
        None,
        &ot,
    ));
    check(
        &e,
        TRANSPOSE,
        true,
        &[
            "Given input size per channel: (1 x 1). Calculated output size per channel: (-1 x \
           -1). Output size is too small",
        ],
    );
    let e = err(conv_transpose1d(
        &t(&[1, 2, 1]),
        &t(&[2, 1, 1]),
        None,
        &ConvTranspose1dOptions {
            padding: wgtensor::ops::Padding1d::uniform(1),
            ..Default::default()
        },
    ));
    assert!(
        msg(&e).contains("(1 x 1). Calculated output size per channel: (1 x -1)"),
        "{e}"
    );
}

#[test]
fn caller_sizes_near_usize_max_are_refused() {
    // A weight gradient's kernel size and a data gradient's input size come from the caller,
    // not from a tensor: the dilated kernel span and the padded input must not overflow.
    let o1 = Conv1dOptions {
        dilation: 2,
        ..Default::default()
    };
    let e = err(conv1d_backward_weight(
        &t(&[3, 1, 1]),
        &t(&[3, 1, 4]),
        usize::MAX,
        &o1,
    ));
    check(
        &e,
        "conv1d_backward_weight",
        true,
        &["output size would be <= 0"],
    );
    let o = Conv2dOptions {
        padding: Padding {
            top: 1,
            bottom: 1,
            left: 1,
            right: 1,
        },
        ..Default::default()
    };
    let e = err(conv2d_backward_input(
        &t(&[0, 1, 2, 2]),
        &t(&[1, 1, 3, 3]),
        [usize::MAX, 2],
        &o,
    ));
    assert!(
        matches!(
            e,
            Error::Size { op: DGRAD, .. } | Error::Shape { op: DGRAD, .. }
        ),
        "{e:?}"
    );
}

/// An empty kernel: ATen's check_shape_forward words, with conv1d's height 1.
#[test]
fn zero_kernel_size_names_the_kernel() {
    let x = t(&[1, 3, 4, 4]);
    let e = err(conv2d(
        &x,
        &t(&[8, 3, 0, 0]),
        None,
        &Conv2dOptions::default(),
    ));
    check(
        &e,
        FWD,
        true,
        &["kernel size should be greater than zero, but got kernel_height: 0 kernel_width: 0"],
    );
    let e = err(conv2d(
        &x,
        &t(&[8, 3, 0, 3]),
        None,
        &Conv2dOptions::default(),
    ));
    check(&e, FWD, true, &["kernel_height: 0 kernel_width: 3"]);
    let e = err(conv1d(
        &t(&[1, 3, 4]),
        &t(&[8, 3, 0]),
        None,
        &Conv1dOptions::default(),
    ));
    assert!(msg(&e).contains("kernel_height: 1 kernel_width: 0"), "{e}");
    // After the padded-size check, whose dilated extent of an empty kernel is 1 - d.
    let e = err(conv2d(
        &t(&[1, 3, 1, 1]),
        &t(&[2, 3, 0, 3]),
        None,
        &Conv2dOptions::default(),
    ));
    check(
        &e,
        FWD,
        true,
        &["Calculated padded input size per channel: (1 x 1). Kernel size: (0 x 3)."],
    );
    let o = Conv2dOptions {
        dilation: [2, 1],
        ..Default::default()
    };
    let e = err(conv2d(&t(&[1, 3, 1, 1]), &t(&[2, 3, 0, 5]), None, &o));
    check(&e, FWD, true, &["Kernel size: (-1 x 5)."]);
    // An input without channels convolves an empty kernel into an empty result of
    // PyTorch's extent: (4 + 0 - (1 - d)) / s + 1.
    let y = conv2d(&t(&[1, 0, 4, 4]), &t(&[2, 0, 0, 0]), None, &o).unwrap();
    assert_eq!(y.shape(), &[1, 0, 6, 5]);
    let y = conv1d(
        &t(&[2, 0, 4]),
        &t(&[2, 0, 0]),
        None,
        &Conv1dOptions::default(),
    )
    .unwrap();
    assert_eq!(y.shape(), &[2, 0, 5]);
    // The transposed convolutions: before the output padding's check.
    let ot = ConvTranspose2dOptions {
        output_padding: [1, 1],
        ..Default::default()
    };
    let e = err(conv_transpose2d(&x, &t(&[3, 8, 0, 0]), None, &ot));
    check(
        &e,
        TRANSPOSE,
        true,
        &["kernel size should be greater than zero, but got kernel_height: 0 kernel_width: 0"],
    );
    let e = err(conv_transpose1d(
        &t(&[1, 3, 4]),
        &t(&[3, 8, 0]),
        None,
        &ConvTranspose1dOptions::default(),
    ));
    assert!(msg(&e).contains("kernel_height: 1 kernel_width: 0"), "{e}");
}

#[test]
fn zero_stride_or_dilation() {
    let (x, w) = (t(&[1, 2, 5, 5]), t(&[2, 2, 3, 3]));
    for (stride, dilation) in [([0, 1], [1, 1]), ([1, 1], [1, 0]), ([0, 0], [0, 0])] {
        let o = Conv2dOptions {
            stride,
            dilation,
            ..Default::default()
        };
        let names = [
            format!("stride {stride:?}"),
            format!("dilation {dilation:?}"),
            "at least 1".to_string(),
        ];
        let names: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
        // The forward's dilation is its backend's check, in its words.
        let fwd = match stride.contains(&0) {
            true => names.clone(),
            false => vec!["dilation should be greater than zero, but got [1, 0]"],
        };
        check(&err(conv2d(&x, &w, None, &o)), FWD, false, &fwd);
        let dy = t(&[1, 2, 3, 3]);
        let e = err(conv2d_backward_input(&dy, &w, [5, 5], &o));
        check(&e, DGRAD, false, &names);
        let e = err(conv2d_backward_weight(&dy, &x, [3, 3], &o));
        check(&e, WGRAD, false, &names);
    }
    let o1 = Conv1dOptions {
        stride: 0,
        ..Default::default()
    };
    let e = err(conv1d(&t(&[1, 2, 5]), &t(&[2, 2, 3]), None, &o1));
    // The caller's 1-D options, not the 2-D ones it runs as.
    check(
        &e,
        "conv1d",
        false,
        &["non-positive stride is not supported: stride [0] and dilation [1]"],
    );
    // The transposed convolution with stride 0 (output_padding 0) or dilation 0, the latter
    // in slow_conv_transpose2d_shape_check's words.
    for (stride, dilation, want) in [
        ([0, 1], [1, 1], "non-positive stride is not supported"),
        (
            [1, 1],
            [1, 0],
            "dilation should be greater than zero, but got dilation_height: 1, dilation_width: 0",
        ),
    ] {
        let ot = ConvTranspose2dOptions {
            stride,
            dilation,
            ..Default::default()
        };
        let e = err(conv_transpose2d(&x, &w, None, &ot));
        check(&e, TRANSPOSE, false, &[want]);
    }
    // A dilation of 0 comes after the channels and the bias, and empty results take it (an
    // effective kernel of 1), as PyTorch's backends check it.
    let d0 = Conv2dOptions {
        dilation: [0, 0],
        ..Default::default()
    };
    let e = err(conv2d(&t(&[1, 3, 5, 5]), &w, None, &d0));
    check(
        &e,
        FWD,
        true,
        &["expected input[1, 3, 5, 5] to have 2 channels"],
    );
    let e = err(conv2d(&x, &w, Some(&t(&[5])), &d0));
    check(
        &e,
        FWD,
        true,
        &["expected bias to be 1-dimensional with 2 elements"],
    );
    let y = conv2d(&t(&[0, 2, 5, 5]), &w, None, &d0).unwrap();
    assert_eq!(y.shape(), &[0, 2, 5, 5]);
    let y = conv2d(&t(&[1, 0, 5, 5]), &t(&[4, 0, 3, 3]), None, &d0).unwrap();
    assert_eq!(y.shape(), &[1, 0, 5, 5]);
    let td0 = ConvTranspose2dOptions {
        dilation: [0, 0],
        ..Default::default()
    };
    let wt = t(&[2, 3, 3, 3]);
    let e = err(conv_transpose2d(&t(&[1, 4, 5, 5]), &wt, None, &td0));
    check(
        &e,
        TRANSPOSE,
        true,
        &["to have 2 channels, but got 4 channels"],
    );
    let y = conv_transpose2d(&t(&[0, 2, 5, 5]), &wt, None, &td0).unwrap();
    assert_eq!(y.shape(), &[0, 3, 5, 5]);
}

#[test]
fn conv_dtype_mismatch_f16() {
    assert!(
        dev().supports_f16(),
        "adapter lacks SHADER_F16: run the suite with `--skip f16`"
    );
    let h = |shape: &[usize]| t(shape).to_dtype(DType::F16).unwrap();
    let want = |op, expected, got| Error::DType { op, expected, got };
    let (f, hf) = (DType::F32, DType::F16);
    let (x, w, b) = (t(&[1, 2, 5, 5]), t(&[4, 2, 3, 3]), t(&[4]));
    let o = Conv2dOptions::default();
    assert_eq!(
        err(conv2d(&x, &h(&[4, 2, 3, 3]), None, &o)),
        want(FWD, f, hf)
    );
    assert_eq!(
        err(conv2d(&h(&[1, 2, 5, 5]), &w, None, &o)),
        want(FWD, hf, f)
    );
    // The bias's dtype first, in conv2d_symint's words (error_inputs_conv2d: int input and
    // weight with a float bias match "should be the same").
    let words = |e: Error| e.to_string();
    assert_eq!(
        words(err(conv2d(&x, &w, Some(&h(&[4])), &o))),
        "conv2d: Input type (float) and bias type (c10::Half) should be the same"
    );
    let hx = h(&[1, 2, 5, 5]);
    assert_eq!(
        words(err(conv2d(&hx, &h(&[4, 2, 3, 3]), Some(&b), &o))),
        "conv2d: Input type (c10::Half) and bias type (float) should be the same"
    );
    let i = |s: &[usize]| Tensor::zeros(dev(), s, DType::I32).unwrap();
    let e = words(err(conv2d(
        &i(&[2, 4, 4]),
        &i(&[3, 2, 3, 3]),
        Some(&t(&[3])),
        &o,
    )));
    assert!(
        e.contains("Input type (int) and bias type (float) should be the same"),
        "{e}"
    );
    let dy = t(&[1, 4, 3, 3]);
    assert_eq!(
        err(conv2d_backward_input(&dy, &h(&[4, 2, 3, 3]), [5, 5], &o)),
        want(DGRAD, f, hf)
    );
    assert_eq!(
        err(conv2d_backward_weight(&dy, &hx, [3, 3], &o)),
        want(WGRAD, f, hf)
    );
    let wt = t(&[2, 4, 3, 3]);
    assert_eq!(
        err(conv_transpose2d(
            &h(&[1, 2, 3, 3]),
            &wt,
            None,
            &Default::default()
        )),
        want(TRANSPOSE, hf, f)
    );
    assert_eq!(
        err(conv1d(
            &t(&[1, 2, 5]),
            &h(&[4, 2, 3]),
            None,
            &Default::default()
        )),
        want("conv1d", f, hf)
    );
}

#[test]
fn conv_device_mismatch() {
    let other = Device::new().unwrap();
    let on_other = |shape: &[usize]| {
        let n = shape.iter().product();
        Tensor::from_slice(&other, &vec![1.0f32; n], shape).unwrap()
    };
    let (x, w) = (t(&[1, 2, 5, 5]), t(&[4, 2, 3, 3]));
    let o = Conv2dOptions::default();
    let mismatch = |op| Error::DeviceMismatch { op };
    assert_eq!(
        err(conv2d(&x, &on_other(&[4, 2, 3, 3]), None, &o)),
        mismatch(FWD)
    );
    assert_eq!(
        err(conv2d(&x, &w, Some(&on_other(&[4])), &o)),
        mismatch(FWD)
    );
    let dy = t(&[1, 4, 3, 3]);
    assert_eq!(
        err(conv2d_backward_input(
            &on_other(&[1, 4, 3, 3]),
            &w,
            [5, 5],
            &o
        )),
        mismatch(DGRAD)
    );
    assert_eq!(
        err(conv2d_backward_weight(
            &dy,
            &on_other(&[1, 2, 5, 5]),
            [3, 3],
            &o
        )),
        mismatch(WGRAD)
    );
    assert_eq!(
        err(conv_transpose2d(
            &on_other(&[1, 4, 3, 3]),
            &w,
            None,
            &Default::default()
        )),
        mismatch(TRANSPOSE)
    );
}

#[test]
fn bias_must_match_the_output_channels() {
    let (x, w) = (t(&[1, 4, 5, 5]), t(&[6, 2, 3, 3]));
    let o = groups(2);
    for b in [t(&[5]), t(&[4]), t(&[1, 6]), t(&[])] {
        let e = err(conv2d(&x, &w, Some(&b), &o));
        check(
            &e,
            FWD,
            true,
            &["bias must have shape [6]", &format!("got {:?}", b.shape())],
        );
    }
    // A stride-0 broadcast view is accepted like any view (packed first) and gives what the
    // contiguous bias gives.
    let strided = t(&[1]).broadcast_to(&[6]).unwrap();
    let packed = strided.contiguous().unwrap();
    let a = conv2d(&x, &w, Some(&strided), &o)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let b = conv2d(&x, &w, Some(&packed), &o)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(a, b);
    // conv_transpose2d's bias has C_out = w.shape[1] * groups entries.
    let ot = ConvTranspose2dOptions {
        groups: 2,
        ..Default::default()
    };
    let e = err(conv_transpose2d(&t(&[1, 6, 3, 3]), &w, Some(&t(&[6])), &ot));
    check(
        &e,
        TRANSPOSE,
        true,
        &[
            "Given transposed=1, weight of size [6, 2, 3, 3], expected bias to be \
             1-dimensional with 4 elements, but got bias of size [6] instead",
            "bias must have shape [4]",
            "got [6]",
        ],
    );
    // check_shape_forward's words, the weight as the caller gave it (3-D for conv1d).
    let e = err(conv2d(&x, &w, Some(&t(&[5])), &o));
    check(
        &e,
        FWD,
        true,
        &[
            "Given weight of size [6, 2, 3, 3], expected bias to be 1-dimensional with 6 \
           elements, but got bias of size [5] instead",
        ],
    );
    let e = err(wgtensor::ops::conv1d(
        &t(&[1, 4, 5]),
        &t(&[6, 4, 3]),
        Some(&t(&[5])),
        &Default::default(),
    ));
    assert!(
        e.to_string().contains("Given weight of size [6, 4, 3]"),
        "{e}"
    );
    // The bias before the kernel size, as check_shape_forward (a 2x2 image, a 3x3 kernel).
    let e = err(conv2d(&t(&[1, 4, 2, 2]), &w, Some(&t(&[5])), &o));
    assert!(
        e.to_string()
            .contains("expected bias to be 1-dimensional with 6 elements"),
        "{e}"
    );
    let e = err(conv2d(&t(&[1, 4, 2, 2]), &w, Some(&t(&[6])), &o));
    assert!(
        e.to_string()
            .contains("Kernel size can't be greater than actual input size"),
        "{e}"
    );
}

#[test]
fn wrong_rank() {
    let o = Conv2dOptions::default();
    // 3-D is PyTorch's unbatched input; 2-D is neither.
    let e = err(conv2d(&t(&[3, 8]), &t(&[4, 3, 3, 3]), None, &o));
    check(
        &e,
        FWD,
        true,
        &["input must be 4-D [N, C, H, W] or 3-D [C, H, W]", "[3, 8]"],
    );
    let e = err(conv2d(&t(&[2, 3, 8, 8]), &t(&[4, 3, 3]), None, &o));
    check(&e, FWD, true, &["weight must be 4-D", "[4, 3, 3]"]);
    let e = err(conv1d(
        &t(&[2, 3, 8, 8]),
        &t(&[4, 3, 3]),
        None,
        &Default::default(),
    ));
    check(&e, "conv1d", true, &["input must be 3-D", "[2, 3, 8, 8]"]);
    let e = err(conv1d(
        &t(&[2, 3, 8]),
        &t(&[4, 3, 3, 1]),
        None,
        &Default::default(),
    ));
    check(&e, "conv1d", true, &["weight must be 3-D", "[4, 3, 3, 1]"]);
    // PyTorch's words (error_inputs_conv2d / error_inputs_conv1d), for the batched input.
    let e = err(conv2d(&t(&[1, 1, 4, 3]), &t(&[1, 2, 2]), None, &o));
    check(
        &e,
        FWD,
        true,
        &["Expected 3-dimensional input for 3-dimensional weight [1, 2, 2], but got 4-dimensional input of size [1, 1, 4, 3] instead"],
    );
    // Groups and stride are checked before the ranks are compared (_convolution's order; a
    // stride of one value, as PyTorch's `stride=0`); a dilation of 0 passes PyTorch's
    // is_dilation_neg, so the ranks come first.
    let bad = [
        (
            Conv2dOptions { groups: 0, ..o },
            "non-positive groups is not supported",
        ),
        (
            Conv2dOptions {
                stride: [0, 0],
                ..o
            },
            "non-positive stride is not supported",
        ),
    ];
    for (bo, want) in bad {
        let e = err(conv2d(&t(&[1, 1, 4, 3]), &t(&[1, 2, 2]), None, &bo));
        check(&e, FWD, false, &[want]);
    }
    let zero_dilation = Conv2dOptions {
        dilation: [0, 0],
        ..o
    };
    let e = err(conv2d(
        &t(&[1, 1, 4, 3]),
        &t(&[1, 2, 2]),
        None,
        &zero_dilation,
    ));
    check(
        &e,
        FWD,
        true,
        &["Expected 3-dimensional input for 3-dimensional weight"],
    );
    let e = err(conv2d(&t(&[1, 1, 4, 3]), &t(&[1, 2]), None, &o));
    check(
        &e,
        FWD,
        true,
        &["weight should have at least three dimensions"],
    );
    let e = err(conv2d(&t(&[1, 4, 3]), &t(&[1, 1, 2, 2, 2]), None, &o));
    check(
        &e,
        FWD,
        true,
        &["Expected 5-dimensional input for 5-dimensional weight [1, 1, 2, 2, 2], but got 4-dimensional input of size [1, 1, 4, 3] instead"],
    );
    let e = err(conv1d(
        &t(&[1, 1, 4]),
        &t(&[1, 2]),
        None,
        &Default::default(),
    ));
    check(
        &e,
        "conv1d",
        true,
        &["weight should have at least three dimensions"],
    );
    let e = err(conv2d_backward_input(
        &t(&[4, 6, 6]),
        &t(&[4, 3, 3, 3]),
        [8, 8],
        &o,
    ));
    check(&e, DGRAD, true, &["dy must be 4-D", "[4, 6, 6]"]);
    let e = err(conv2d_backward_weight(
        &t(&[2, 4, 6, 6]),
        &t(&[3, 8, 8]),
        [3, 3],
        &o,
    ));
    check(&e, WGRAD, true, &["input must be 4-D", "[3, 8, 8]"]);
    let e = err(conv_transpose1d(
        &t(&[2, 3, 8, 1]),
        &t(&[3, 4, 3]),
        None,
        &Default::default(),
    ));
    check(
        &e,
        "conv_transpose1d",
        true,
        &["must be 3-D", "[2, 3, 8, 1]"],
    );
    for s in [&[4usize, 6][..], &[6]] {
        let e = err(conv_backward_bias(&t(s)));
        check(
            &e,
            "conv_backward_bias",
            true,
            &["at least one spatial dim", &format!("{s:?}")],
        );
    }
}

#[test]
fn data_gradient_input_size_must_match_dy() {
    // A 3x3 kernel on 8x7 gives 6x5, not dy's 6x6.
    let (dy, w) = (t(&[2, 6, 6, 6]), t(&[6, 2, 3, 3]));
    let e = err(conv2d_backward_input(&dy, &w, [8, 7], &groups(3)));
    check(&e, DGRAD, true, &["dy is 6x6", "input of 8x7", "6x5"]);
    // With stride 2, inputs 13 and 14 both give 6 rows; 15 gives 7.
    let o = Conv2dOptions {
        stride: [2, 2],
        groups: 3,
        ..Default::default()
    };
    for size in [13, 14] {
        let dx = conv2d_backward_input(&dy, &w, [size, 13], &o).unwrap();
        assert_eq!(dx.shape(), &[2, 6, size, 13]);
    }
    let e = err(conv2d_backward_input(&dy, &w, [15, 13], &o));
    check(&e, DGRAD, true, &["dy is 6x6", "input of 15x13", "7x6"]);
    let e = err(conv1d_backward_input(
        &t(&[2, 6, 6]),
        &t(&[6, 2, 3]),
        9,
        &Conv1dOptions {
            groups: 3,
            ..Default::default()
        },
    ));
    check(
        &e,
        "conv1d_backward_input",
        true,
        &["dy is 1x6", "1x9", "1x7"],
    );
}

#[test]
fn weight_gradient_shapes_must_agree() {
    let (x, dy) = (t(&[2, 4, 8, 8]), t(&[3, 6, 6, 6]));
    let e = err(conv2d_backward_weight(&dy, &x, [3, 3], &groups(2)));
    check(
        &e,
        WGRAD,
        true,
        &["[3, 6, 6, 6]", "[2, 4, 8, 8]", "differ in batch size"],
    );
    // dy 6x6 is what a 3x3 kernel gives; a 5x5 kernel gives 4x4.
    let dy = t(&[2, 6, 6, 6]);
    let e = err(conv2d_backward_weight(&dy, &x, [5, 5], &groups(2)));
    check(
        &e,
        WGRAD,
        true,
        &["dy is 6x6", "[2, 4, 8, 8]", "[5, 5]", "4x4"],
    );
    let e = err(conv1d_backward_weight(
        &t(&[2, 6, 6]),
        &t(&[2, 4, 8]),
        2,
        &Conv1dOptions {
            groups: 2,
            ..Default::default()
        },
    ));
    check(&e, "conv1d_backward_weight", true, &["dy is 1x6", "1x7"]);
    conv2d_backward_weight(&dy, &x, [3, 3], &groups(2)).unwrap();
}

#[test]
fn transposed_output_padding_below_stride_or_dilation() {
    let (x, w) = (t(&[1, 2, 4, 4]), t(&[2, 3, 3, 3]));
    for (output_padding, stride, dilation) in [
        ([1, 0], [1, 1], [1, 1]),
        ([0, 2], [2, 2], [1, 1]),
        ([2, 0], [2, 1], [2, 1]),
        ([0, 3], [1, 3], [2, 1]),
    ] {
        let ot = ConvTranspose2dOptions {
            stride,
            dilation,
            output_padding,
            ..Default::default()
        };
        let e = err(conv_transpose2d(&x, &w, None, &ot));
        check(
            &e,
            TRANSPOSE,
            false,
            &[
                "output padding must be smaller than either stride or dilation, but got",
                &format!(
                    "output_padding_height: {} output_padding_width: {}",
                    output_padding[0], output_padding[1]
                ),
                &format!("stride_height: {} stride_width: {}", stride[0], stride[1]),
                &format!(
                    "dilation_height: {} dilation_width: {}",
                    dilation[0], dilation[1]
                ),
            ],
        );
    }
    // The channels are checked first, as PyTorch's shape check runs before this one.
    let ot = ConvTranspose2dOptions {
        padding: Padding::uniform(1),
        output_padding: [1, 1],
        ..Default::default()
    };
    let e = err(conv_transpose2d(&t(&[1, 3, 6, 6]), &w, None, &ot));
    assert!(
        e.to_string().contains("Given transposed=1") && !e.to_string().contains("output padding"),
        "{e}"
    );
    // Below the dilation is fine even with stride 1 (PyTorch allows it too).
    let ot = ConvTranspose2dOptions {
        dilation: [2, 1],
        output_padding: [1, 0],
        ..Default::default()
    };
    let y = conv_transpose2d(&x, &w, None, &ot).unwrap();
    assert_eq!(y.shape(), &[1, 3, 4 + 4 + 1, 6]);
    let o1 = ConvTranspose1dOptions {
        stride: 2,
        output_padding: 2,
        ..Default::default()
    };
    let e = err(conv_transpose1d(&t(&[1, 2, 4]), &t(&[2, 3, 3]), None, &o1));
    check(
        &e,
        "conv_transpose1d",
        false,
        &["output_padding_height: 0 output_padding_width: 2"],
    );
}

#[test]
fn gradients_reject_an_activation() {
    let (x, w, dy) = (t(&[1, 2, 5, 5]), t(&[4, 2, 3, 3]), t(&[1, 4, 3, 3]));
    for act in [
        Activation::Relu,
        Activation::Gelu,
        Activation::Sigmoid,
        Activation::Tanh,
    ] {
        let o = Conv2dOptions {
            activation: act,
            ..Default::default()
        };
        let name = format!("got {act:?}");
        let e = err(conv2d_backward_input(&dy, &w, [5, 5], &o));
        check(&e, DGRAD, false, &["no fused activation", &name]);
        let e = err(conv2d_backward_weight(&dy, &x, [3, 3], &o));
        check(&e, WGRAD, false, &["no fused activation", &name]);
        let o1 = Conv1dOptions {
            activation: act,
            ..Default::default()
        };
        let e = err(conv1d_backward_input(
            &t(&[1, 4, 3]),
            &t(&[4, 2, 3]),
            5,
            &o1,
        ));
        check(&e, "conv1d_backward_input", false, &[&name]);
        let e = err(conv1d_backward_weight(
            &t(&[1, 4, 3]),
            &t(&[1, 2, 5]),
            3,
            &o1,
        ));
        check(&e, "conv1d_backward_weight", false, &[&name]);
        // The forward and the transposed convolution fuse it.
        conv2d(&x, &w, None, &o).unwrap();
        let ot = ConvTranspose2dOptions {
            activation: act,
            ..Default::default()
        };
        conv_transpose2d(&dy, &w, None, &ot).unwrap();
    }
}

/// Huge options: the output-size and extent arithmetic must not overflow (a panic with
/// overflow checks, a wrong size without); each call fails with an error instead.
#[test]
fn huge_options_do_not_overflow() {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    let (x, w, dy) = (t(&[1, 2, 5, 5]), t(&[2, 2, 3, 3]), t(&[1, 2, 3, 3]));
    let big = usize::MAX;
    // (stride, padding, dilation, groups). A huge stride is legal for the forward (one
    // output row), so those calls may succeed; every other case must be an error.
    let cases = [
        ([1, 1], Padding::default(), [big, 1], 1),
        ([1, 1], Padding::default(), [1 << 62, 1], 1),
        ([big, 1], Padding::default(), [1, 1], 1),
        ([1, 1], Padding::uniform(big), [1, 1], 1),
        ([1, 1], Padding::symmetric(big / 2, 0), [1, 1], 1),
        ([1, 1], Padding::uniform(1 << 31), [1, 1], 1),
        ([1, 1], Padding::default(), [1, 1], big),
    ];
    let mut failures = Vec::new();
    for (stride, padding, dilation, groups) in cases {
        let may_succeed = stride[0] == big;
        let o = Conv2dOptions {
            stride,
            padding,
            dilation,
            groups,
            ..Default::default()
        };
        let ot = ConvTranspose2dOptions {
            stride,
            padding,
            dilation,
            groups,
            ..Default::default()
        };
        let calls: [(&str, &dyn Fn() -> wgtensor::Result<Tensor>); 4] = [
            (FWD, &|| conv2d(&x, &w, None, &o)),
            (DGRAD, &|| conv2d_backward_input(&dy, &w, [5, 5], &o)),
            (WGRAD, &|| conv2d_backward_weight(&dy, &x, [3, 3], &o)),
            (TRANSPOSE, &|| conv_transpose2d(&dy, &w, None, &ot)),
        ];
        for (op, call) in calls {
            let what = format!(
                "{op}: stride {stride:?} padding {padding:?} dilation {dilation:?} groups {groups}"
            );
            match catch_unwind(AssertUnwindSafe(call)) {
                Err(_) => failures.push(format!("{what}: panicked")),
                Ok(Ok(y)) if !may_succeed => {
                    failures.push(format!("{what}: succeeded with {:?}", y.shape()))
                }
                Ok(_) => {}
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Random shapes and options (zeros, huge values) for every entry point: Ok or Err, never
/// a panic (no overflow in the output-size or extent arithmetic).
#[derive(Debug, Clone)]
struct ConvCall {
    a: Vec<usize>,
    b: Vec<usize>,
    bias: Option<Vec<usize>>,
    stride: [usize; 2],
    pad: [usize; 4],
    dil: [usize; 2],
    groups: usize,
    out_pad: [usize; 2],
    size: [usize; 2],
    which: u8,
}

fn opt_value() -> impl Strategy<Value = usize> + Clone {
    prop_oneof![
        6 => 0usize..4,
        1 => Just(65536usize),
        1 => Just(1usize << 31),
        1 => Just(usize::MAX / 2),
        1 => Just(usize::MAX),
    ]
}

fn conv_call() -> impl Strategy<Value = ConvCall> {
    // Mostly rank 3 and 4 with non-zero dims, so that calls get past the tensor checks.
    let dim = || prop_oneof![1 => Just(0usize), 8 => 1usize..6];
    let shape = move || {
        prop_oneof![
            1 => prop::collection::vec(dim(), 2..6),
            4 => prop::collection::vec(dim(), 3..=4),
        ]
    };
    let pair = || [opt_value(), opt_value()];
    (
        (
            shape(),
            shape(),
            prop::option::of(prop::collection::vec(0usize..8, 0..3)),
        ),
        (
            pair(),
            [opt_value(), opt_value(), opt_value(), opt_value()],
            pair(),
        ),
        (opt_value(), pair(), pair(), 0u8..10),
    )
        .prop_map(
            |((a, b, bias), (stride, pad, dil), (groups, out_pad, size, which))| ConvCall {
                a,
                b,
                bias,
                stride,
                pad,
                dil,
                groups,
                out_pad,
                size,
                which,
            },
        )
}

fn conv_run(c: &ConvCall) -> wgtensor::Result<()> {
    let mk = |s: &[usize]| Tensor::zeros(dev(), s, DType::F32);
    let (a, b) = (mk(&c.a)?, mk(&c.b)?);
    let bias = match &c.bias {
        Some(s) => Some(mk(s)?),
        None => None,
    };
    let padding = Padding {
        top: c.pad[0],
        bottom: c.pad[1],
        left: c.pad[2],
        right: c.pad[3],
    };
    let o = Conv2dOptions {
        stride: c.stride,
        padding,
        dilation: c.dil,
        groups: c.groups,
        activation: Activation::None,
    };
    let o1 = Conv1dOptions {
        stride: c.stride[1],
        padding: wgtensor::ops::Padding1d {
            left: c.pad[2],
            right: c.pad[3],
        },
        dilation: c.dil[1],
        groups: c.groups,
        activation: Activation::None,
    };
    let ot = ConvTranspose2dOptions {
        stride: c.stride,
        padding,
        output_padding: c.out_pad,
        dilation: c.dil,
        groups: c.groups,
        activation: Activation::Relu,
    };
    let ot1 = ConvTranspose1dOptions {
        stride: c.stride[1],
        padding: wgtensor::ops::Padding1d {
            left: c.pad[2],
            right: c.pad[3],
        },
        output_padding: c.out_pad[1],
        dilation: c.dil[1],
        groups: c.groups,
        activation: Activation::None,
    };
    match c.which {
        0 => drop(conv2d(&a, &b, bias.as_ref(), &o)?),
        1 => drop(conv1d(&a, &b, bias.as_ref(), &o1)?),
        2 => drop(conv2d_backward_input(&a, &b, c.size, &o)?),
        3 => drop(conv1d_backward_input(&a, &b, c.size[1], &o1)?),
        4 => drop(conv2d_backward_weight(&a, &b, c.size, &o)?),
        5 => drop(conv1d_backward_weight(&a, &b, c.size[1], &o1)?),
        6 => drop(conv_transpose2d(&a, &b, bias.as_ref(), &ot)?),
        7 => drop(conv_transpose1d(&a, &b, bias.as_ref(), &ot1)?),
        _ => drop(conv_backward_bias(&a)?),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn random_conv_arguments_never_panic(c in conv_call()) {
        let _ = conv_run(&c);
    }
}

/// A transposed convolution whose output would pass 2^31 says so (not "<= 0"); a weight of
/// the wrong rank is described with a weight's layout.
#[test]
fn conv_size_and_weight_rank_messages() {
    let x = Tensor::zeros(dev(), &[1, 1, 1, 2100], DType::F32).unwrap();
    let w = Tensor::zeros(dev(), &[1, 1, 1, 1], DType::F32).unwrap();
    let o = ConvTranspose2dOptions {
        stride: [1, 1 << 20],
        ..Default::default()
    };
    let e = conv_transpose2d(&x, &w, None, &o).unwrap_err();
    assert!(
        matches!(e, Error::Size { .. }) && e.to_string().contains("2^31"),
        "{e}"
    );
    let w3 = Tensor::zeros(dev(), &[1, 1, 3], DType::F32).unwrap();
    let e = conv2d(&x, &w3, None, &Default::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("out_channels"), "{e}");
}

/// The convolution layers' groups errors in `_ConvNd.__init__`'s order and words
/// (test_conv_invalid_groups matches the first).
#[test]
fn conv_layer_groups_in_pytorch_words() {
    use wgtensor::nn::{Conv1d, Conv2d, Conv2dConfig, ConvTranspose2d, ConvTranspose2dConfig};
    let cfg = |groups| Conv2dConfig {
        groups,
        ..Default::default()
    };
    for (g, inp, out, want) in [
        (0, 2, 2, "groups must be a positive integer"),
        (2, 3, 4, "in_channels must be divisible by groups"),
        (2, 4, 3, "out_channels must be divisible by groups"),
    ] {
        let e = Conv1d::new(dev(), inp, out, 3, cfg(g))
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{e}");
        let e = Conv2d::new(dev(), inp, out, 3, cfg(g))
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{e}");
        let tc = ConvTranspose2dConfig {
            groups: g,
            ..Default::default()
        };
        let e = ConvTranspose2d::new(dev(), inp, out, 3, tc)
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{e}");
    }
}
