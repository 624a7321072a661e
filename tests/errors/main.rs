//! Every error case returns the right variant with a message naming the op and the values,
//! and a sweep of random invalid arguments never panics.
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

use proptest::prelude::*;
use wgtensor::ops::{gemm, gemm_into, matmul, Bias, BinaryOp, GemmOptions, ReduceOp};
use wgtensor::{f16, DType, Device, DeviceOptions, Error, Tensor};

fn dev() -> &'static Device {
    static DEV: std::sync::OnceLock<Device> = std::sync::OnceLock::new();
    DEV.get_or_init(|| Device::new().expect("device"))
}

fn t(shape: &[usize]) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_slice(dev(), &vec![1.0f32; n], shape).unwrap()
}

fn msg(e: &Error) -> String {
    e.to_string()
}

/// Asserts that `r` is an error whose message contains `want` (PyTorch's words).
fn has<T: std::fmt::Debug>(r: wgtensor::Result<T>, want: &str) {
    let e = msg(&r.unwrap_err());
    assert!(e.contains(want), "{e}\nwants: {want}");
}

#[test]
fn shape_errors() {
    let e = Tensor::from_slice(dev(), &[1.0f32; 5], &[2, 3]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Shape {
                op: "from_slice",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(msg(&e).contains("[2, 3]") && msg(&e).contains('5'), "{e}");

    let e = t(&[2, 3]).add(&t(&[4])).unwrap_err();
    assert!(matches!(e, Error::Shape { op: "add", .. }), "{e:?}");
    assert!(msg(&e).contains("[2, 3]") && msg(&e).contains("[4]"), "{e}");

    let e = t(&[2, 3]).reshape(&[4, 2]).unwrap_err();
    assert!(matches!(e, Error::Shape { op: "reshape", .. }), "{e:?}");

    let e = t(&[2, 3]).broadcast_to(&[2, 4]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Shape {
                op: "broadcast_to",
                ..
            }
        ),
        "{e:?}"
    );
    let e = t(&[2, 3]).broadcast_to(&[3]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Shape {
                op: "broadcast_to",
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn argument_errors() {
    let x = t(&[2, 3, 4]);
    let e = x.permute(&[0, 0, 1]).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "permute", .. }),
        "{e:?}"
    );
    let e = x.permute(&[0, 1]).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "permute", .. }),
        "{e:?}"
    );
    let e = x.transpose(0, 3).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                op: "transpose",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        msg(&e).contains("got 3") && msg(&e).contains("[-3, 2]"),
        "{e}"
    );
    let e = x.narrow(1, 2, 2).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "narrow", .. }),
        "{e:?}"
    );
    let e = x.narrow(1, usize::MAX, 2).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "narrow", .. }),
        "{e:?}"
    );
    let e = x.sum(-4, false).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "sum", .. }),
        "{e:?}"
    );
    // A scalar reduces along dim 0 or -1 (PyTorch), not along 1.
    assert_eq!(
        t(&[]).reduce(0, ReduceOp::Max, true).unwrap().shape(),
        &[] as &[usize]
    );
    let e = t(&[]).reduce(1, ReduceOp::Max, true).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "max", .. }),
        "{e:?}"
    );
    let e = Device::with_options(DeviceOptions {
        max_in_flight: 0,
        ..Default::default()
    })
    .unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "device", .. }),
        "{e:?}"
    );
}

#[test]
fn dtype_errors() {
    if !dev().supports_f16() {
        // The mixed-dtype case needs an f16 tensor; the to_vec case below still runs.
        eprintln!("skipping the f16 half of dtype_errors: adapter lacks SHADER_F16");
    } else {
        // Mixed dtypes promote as PyTorch's: f32 * f16 is f32; a 0-d f32 does not widen an
        // f16 tensor; an i32 takes the float's dtype; gradients come back in each dtype.
        let h = Tensor::from_slice(dev(), &[f16::ONE; 6], &[2, 3])
            .unwrap()
            .requires_grad()
            .unwrap();
        let a = t(&[2, 3]).requires_grad().unwrap();
        let y = a.binary(&h, BinaryOp::Mul).unwrap();
        assert_eq!(y.dtype(), DType::F32);
        assert_eq!(y.to_vec::<f32>().unwrap(), a.to_vec::<f32>().unwrap());
        let g = y.sum_all().unwrap().backward().unwrap();
        assert_eq!(g.get(&h).unwrap().dtype(), DType::F16);
        assert_eq!(g.get(&a).unwrap().dtype(), DType::F32);
        let half = Tensor::from_slice(dev(), &[0.5f32], &[]).unwrap();
        let z = h.mul(&half).unwrap();
        assert_eq!(z.dtype(), DType::F16);
        assert_eq!(
            z.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap(),
            vec![0.5; 6]
        );
        let i = Tensor::from_slice(dev(), &[2i32; 6], &[2, 3]).unwrap();
        assert_eq!(i.add(&h).unwrap().dtype(), DType::F16);
    }
    // No integer arithmetic: two i32 operands are refused, naming the op.
    let i = Tensor::from_slice(dev(), &[2i32; 3], &[3]).unwrap();
    let e = i.add(&i).unwrap_err();
    assert!(e.to_string().starts_with("add:"), "{e}");
    let e = t(&[3]).to_vec::<f16>().unwrap_err();
    assert_eq!(
        e,
        Error::DType {
            op: "to_vec",
            expected: DType::F32,
            got: DType::F16
        }
    );
}

#[test]
fn device_mismatch() {
    let other = Device::new().unwrap();
    let a = t(&[4]);
    let b = Tensor::from_slice(&other, &[1.0f32; 4], &[4]).unwrap();
    let e = a.add(&b).unwrap_err();
    assert_eq!(e, Error::DeviceMismatch { op: "add" });
    // Shapes are checked before devices (TensorIterator's compute_shape, then its types).
    let b3 = Tensor::from_slice(&other, &[1.0f32; 3], &[3]).unwrap();
    let half = b3.to_dtype(DType::F16);
    let words = "The size of tensor a (4) must match the size of tensor b (3)";
    has(a.add(&b3), words);
    has(a.maximum(&b3), words);
    has(a.eq(&b3), words);
    has(
        a.masked_fill(&b3, 0.0),
        "The size of tensor a (3) must match the size of tensor b (4)",
    );
    has(
        b3.where_cond(&a, &a),
        words
            .replace("a (4)", "a (3)")
            .replace("b (3)", "b (4)")
            .as_str(),
    );
    if let Ok(h) = half {
        has(a.add(&h), words);
    }
}

#[test]
fn size_errors() {
    // 2^32 elements: not indexable with u32.
    let e = Tensor::zeros(dev(), &[65536, 65536], DType::F32).unwrap_err();
    assert!(matches!(e, Error::Size { op: "zeros", .. }), "{e:?}");
    assert!(msg(&e).contains("u32"), "{e}");
    let e = Tensor::zeros(dev(), &[usize::MAX, 3], DType::F32).unwrap_err();
    assert!(matches!(e, Error::Size { op: "zeros", .. }), "{e:?}");
    let e = Tensor::zeros(dev(), &[1; 9], DType::F32).unwrap_err();
    assert!(matches!(e, Error::Size { op: "zeros", .. }), "{e:?}");
    let e = t(&[3]).narrow(0, 2, 2).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "narrow", .. }),
        "{e:?}"
    );
    let e = t(&[1]).broadcast_to(&[65536, 65536]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Size {
                op: "broadcast_to",
                ..
            }
        ),
        "{e:?}"
    );
}

/// Tensors may exceed one binding (windowed ops split them), not one buffer.
#[test]
fn too_large_for_a_buffer() {
    let limit = dev().limits().max_buffer_size.min(u32::MAX as u64);
    let n = (limit / 4 + 1024) as usize;
    let e = Tensor::zeros(dev(), &[n], DType::F32).unwrap_err();
    match e {
        Error::TooLarge {
            op: "zeros",
            bytes,
            limit: l,
            ..
        } => {
            assert_eq!(bytes, n as u64 * 4);
            assert!(l <= limit);
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    // A broadcast view of a huge shape is fine, materializing it is not.
    let big = t(&[1]).broadcast_to(&[n]).unwrap();
    let e = big.contiguous().unwrap_err();
    assert!(
        matches!(
            e,
            Error::TooLarge {
                op: "contiguous",
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn missing_f16_feature() {
    let d = Device::with_options(DeviceOptions {
        disable_f16: true,
        ..Default::default()
    })
    .unwrap();
    assert!(!d.supports_f16());
    let e = Tensor::from_slice(&d, &[f16::ONE; 2], &[2]).unwrap_err();
    assert_eq!(
        e,
        Error::MissingFeature {
            op: "from_slice",
            feature: "SHADER_F16"
        }
    );
    let x = Tensor::from_slice(&d, &[1.0f32; 2], &[2]).unwrap();
    let e = x.to_dtype(DType::F16).unwrap_err();
    assert!(
        matches!(e, Error::MissingFeature { op: "to_dtype", .. }),
        "{e:?}"
    );
    let e = Tensor::zeros(&d, &[2], DType::F16).unwrap_err();
    assert!(
        matches!(e, Error::MissingFeature { op: "zeros", .. }),
        "{e:?}"
    );
}

#[test]
fn device_loss_is_reported() {
    let d = Device::new().unwrap();
    let x = Tensor::from_slice(&d, &[1.0f32; 4], &[4]).unwrap();
    d.wgpu_device().destroy();
    let r = x.add_scalar(1.0).and_then(|y| y.to_vec::<f32>());
    let e = r.unwrap_err();
    assert!(matches!(e, Error::DeviceLost { .. }), "{e:?}");
    // Once lost, every op keeps failing cleanly.
    let e = Tensor::zeros(&d, &[4], DType::F32).unwrap_err();
    assert!(matches!(e, Error::DeviceLost { op: "zeros", .. }), "{e:?}");
}

/// Random argument soup: every call returns Ok or Err, none panics.
#[derive(Debug, Clone)]
enum Call {
    Create(Vec<usize>, usize),
    Reshape(Vec<usize>),
    Permute(Vec<usize>),
    Transpose(isize, isize),
    Narrow(isize, usize, usize),
    Broadcast(Vec<usize>),
    Reduce(isize, u8, bool),
    Binary(Vec<usize>, u8),
    Matmul(Vec<usize>, u8),
}

fn dim() -> impl Strategy<Value = usize> + Clone {
    prop_oneof![
        4 => 0usize..6,
        1 => Just(65536usize),
        1 => Just(1usize << 31),
        1 => Just(usize::MAX),
    ]
}

fn call() -> impl Strategy<Value = Call> {
    let shape = || prop::collection::vec(dim(), 0..10);
    prop_oneof![
        (shape(), 0usize..40).prop_map(|(s, n)| Call::Create(s, n)),
        shape().prop_map(Call::Reshape),
        prop::collection::vec(0usize..6, 0..6).prop_map(Call::Permute),
        (-6isize..6, -6isize..6).prop_map(|(a, b)| Call::Transpose(a, b)),
        (
            -6isize..6,
            prop_oneof![0usize..5, Just(usize::MAX)],
            prop_oneof![0usize..5, Just(usize::MAX)]
        )
            .prop_map(|(d, s, l)| Call::Narrow(d, s, l)),
        shape().prop_map(Call::Broadcast),
        (-6isize..6, 0u8..4, any::<bool>()).prop_map(|(d, o, k)| Call::Reduce(d, o, k)),
        (shape(), 0u8..6).prop_map(|(s, o)| Call::Binary(s, o)),
        (shape(), 0u8..4).prop_map(|(s, o)| Call::Matmul(s, o)),
    ]
}

fn run(c: &Call, x: &Tensor) -> wgtensor::Result<()> {
    const BIN: [BinaryOp; 6] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Min,
    ];
    const RED: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min];
    let small = |s: &[usize]| {
        s.iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .is_some_and(|n| n <= 4096)
    };
    match c {
        Call::Create(s, n) => {
            Tensor::from_slice(dev(), &vec![0.5f32; *n], s)?;
            if small(s) {
                Tensor::zeros(dev(), s, DType::F32)?;
            }
        }
        Call::Reshape(s) => drop(x.reshape(s)?),
        Call::Permute(p) => drop(x.permute(p)?.contiguous()?),
        Call::Transpose(a, b) => drop(x.transpose(*a, *b)?.contiguous()?),
        Call::Narrow(d, s, l) => drop(x.narrow(*d, *s, *l)?.contiguous()?),
        Call::Broadcast(s) => {
            let b = x.broadcast_to(s)?;
            if small(s) {
                b.contiguous()?;
            }
        }
        Call::Reduce(d, o, k) => drop(x.reduce(*d, RED[*o as usize], *k)?),
        Call::Binary(s, o) => {
            if small(s) {
                let y = Tensor::zeros(dev(), s, DType::F32)?;
                x.binary(&y, BIN[*o as usize])?;
            }
        }
        Call::Matmul(s, o) => {
            if small(s) {
                let y = Tensor::zeros(dev(), s, DType::F32)?;
                match o {
                    0 => drop(x.matmul(&y)?),
                    1 => drop(y.matmul(x)?),
                    2 => drop(gemm(x, &y, &GemmOptions::default())?),
                    _ => drop(gemm_into(&y, x, x, 1.0, 1.0)?),
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn random_invalid_arguments_never_panic(calls in prop::collection::vec(call(), 1..6)) {
        let x = t(&[2, 3, 4]);
        for c in &calls {
            let _ = run(c, &x);
        }
    }
}

mod batchnorm;
mod caller_sizes;
mod conv;
mod norm;

// ---------------------------------------------------------------------------------------------
// GEMM
// ---------------------------------------------------------------------------------------------

fn gemm_err(a: &Tensor, b: &Tensor, o: &GemmOptions) -> Error {
    match gemm(a, b, o) {
        Ok(y) => panic!(
            "gemm {:?} x {:?} succeeded with shape {:?}",
            a.shape(),
            b.shape(),
            y.shape()
        ),
        Err(e) => e,
    }
}

#[test]
fn gemm_inner_dimension_mismatch() {
    let e = gemm_err(&t(&[2, 3]), &t(&[4, 5]), &GemmOptions::default());
    assert!(matches!(e, Error::Shape { op: "gemm", .. }), "{e:?}");
    assert!(
        msg(&e).contains("[2, 3]") && msg(&e).contains("[4, 5]"),
        "{e}"
    );
    assert!(msg(&e).contains("K=3") && msg(&e).contains("K=4"), "{e}");
    // Transposed views are checked by their logical shapes.
    let bt = t(&[5, 4]).transpose(0, 1).unwrap();
    let e = gemm_err(&t(&[2, 3]), &bt, &GemmOptions::default());
    assert!(msg(&e).contains("[4, 5]"), "{e}");
    // matmul, including 1-D operands.
    let e = t(&[3]).matmul(&t(&[4])).unwrap_err();
    assert!(matches!(e, Error::Shape { op: "matmul", .. }), "{e:?}");
    assert!(msg(&e).contains("K=3") && msg(&e).contains("K=4"), "{e}");
    // The shapes named are the caller's, not the promoted [1, 3] and [4, 1].
    assert!(
        msg(&e).contains("a [3]") && !msg(&e).contains("[1, 3]"),
        "{e}"
    );
    let e = matmul(&t(&[2, 3]), &t(&[2])).unwrap_err();
    assert!(matches!(e, Error::Shape { op: "matmul", .. }), "{e:?}");
    assert!(msg(&e).contains("K=3") && msg(&e).contains("K=2"), "{e}");
    let e = matmul(&t(&[]), &t(&[2])).unwrap_err();
    assert!(matches!(e, Error::Shape { op: "matmul", .. }), "{e:?}");
    // gemm needs matrices.
    let e = gemm_err(&t(&[3]), &t(&[3, 2]), &GemmOptions::default());
    assert!(matches!(e, Error::Shape { op: "gemm", .. }), "{e:?}");
    assert!(msg(&e).contains("[3]"), "{e}");
}

/// The words of the PyTorch op matmul runs for the operands' ranks (test_linalg's
/// test_addmm_sizes matches "{n}x{k+1}.*{k}x{m}"), the batch checked before K.
#[test]
fn matmul_mismatch_in_pytorch_words() {
    let cases: [(&[usize], &[usize], &str); 8] = [
        (&[2, 3], &[4, 5], "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"),
        (&[3], &[4, 5], "mat1 and mat2 shapes cannot be multiplied (1x3 and 4x5)"),
        (&[2, 2, 3], &[4, 5], "mat1 and mat2 shapes cannot be multiplied (4x3 and 4x5)"),
        (&[3], &[4], "inconsistent tensor size, expected tensor [3] and src [4] to have the same number of elements, but got 3 and 4 elements respectively"),
        (&[2, 3], &[2], "size mismatch, got input (2), mat (2x3), vec (2)"),
        (&[2, 2, 3], &[2, 4, 5], "Expected size for first two dimensions of batch2 tensor to be: [2, 3] but got: [2, 4]."),
        (&[2, 2, 3], &[3, 4, 5], "The size of tensor a (2) must match the size of tensor b (3) at non-singleton dimension 0"),
        (&[], &[3], "both arguments to matmul need to be at least 1D, but they are 0D and 1D"),
    ];
    for (sa, sb, want) in cases {
        let e = matmul(&t(sa), &t(sb)).unwrap_err();
        assert!(matches!(e, Error::Shape { op: "matmul", .. }), "{e:?}");
        assert!(msg(&e).contains(want), "{sa:?} x {sb:?}: {e}");
    }
    let e = gemm_err(&t(&[2, 2, 3]), &t(&[3, 4, 5]), &GemmOptions::default());
    assert!(msg(&e).contains("at non-singleton dimension 0"), "{e}");
    // i32 products are refused whatever their size (an empty one made no kernel launch);
    // mm's shapes come first.
    let i = |s: &[usize]| Tensor::zeros(dev(), s, DType::I32).unwrap();
    for (sa, sb) in [
        ([0usize, 3], [3usize, 2]),
        ([2, 0], [0, 3]),
        ([2, 3], [3, 2]),
    ] {
        let e = matmul(&i(&sa), &i(&sb)).unwrap_err();
        assert!(msg(&e).contains("I32"), "{sa:?} x {sb:?}: {e}");
    }
    let e = matmul(&i(&[2, 3]), &i(&[4, 2])).unwrap_err();
    assert!(
        msg(&e).contains("shapes cannot be multiplied (2x3 and 4x2)"),
        "{e}"
    );
    // Mixed dtypes in ATen's words (test_mm_empty_inputs_mixed_dtype_errors matches
    // "expected .* and .* to have the same dtype, but got:"); a 0-D operand is named first,
    // as _matmul_impl checks it before any dtype.
    let e = matmul(&i(&[1, 10]), &t(&[10, 20])).unwrap_err();
    assert!(
        msg(&e).contains("expected m1 and m2 to have the same dtype, but got: int != float"),
        "{e}"
    );
    let e = matmul(&i(&[]), &t(&[2, 3])).unwrap_err();
    assert!(
        msg(&e).contains("need to be at least 1D, but they are 0D and 2D"),
        "{e}"
    );
    // nn::Linear: F.linear's words.
    use wgtensor::nn::Forward;
    let lin = wgtensor::nn::Linear::new(dev(), 4, 5, true).unwrap();
    let e = lin.forward(&t(&[])).unwrap_err();
    assert!(
        msg(&e).contains("both arguments to linear need to be at least 1D, but they are 0D and 2D"),
        "{e}"
    );
    let e = lin.forward(&t(&[2, 3, 3])).unwrap_err();
    assert!(msg(&e).contains("(6x3 and 4x5)"), "{e}");
}

#[test]
fn gemm_incompatible_batch_dims() {
    let e = gemm_err(&t(&[2, 3, 4]), &t(&[3, 4, 5]), &GemmOptions::default());
    assert!(matches!(e, Error::Shape { op: "gemm", .. }), "{e:?}");
    assert!(
        msg(&e).contains("[2, 3, 4]") && msg(&e).contains("[3, 4, 5]"),
        "{e}"
    );
    let e = t(&[4, 3, 2, 3]).matmul(&t(&[2, 3, 5])).unwrap_err();
    assert!(matches!(e, Error::Shape { op: "matmul", .. }), "{e:?}");
    assert!(
        msg(&e).contains("[4, 3, 2, 3]") && msg(&e).contains("[2, 3, 5]"),
        "{e}"
    );
}

#[test]
fn gemm_dtype_mix_f16() {
    assert!(
        dev().supports_f16(),
        "adapter lacks SHADER_F16: run the suite with `--skip f16`"
    );
    let h = |shape: &[usize]| t(shape).to_dtype(DType::F16).unwrap();
    let mismatch = |op| Error::DType {
        op,
        expected: DType::F32,
        got: DType::F16,
    };
    let o = GemmOptions::default();
    // The factors in ATen's words; C and the bias against them as dtype mismatches.
    let words = |e: Error| e.to_string();
    assert_eq!(
        words(gemm_err(&t(&[2, 3]), &h(&[3, 4]), &o)),
        "gemm: expected m1 and m2 to have the same dtype, but got: float != c10::Half"
    );
    assert_eq!(
        words(gemm_err(&h(&[2, 3]), &t(&[3, 4]), &o)),
        "gemm: expected m1 and m2 to have the same dtype, but got: c10::Half != float"
    );
    let c = h(&[2, 4]);
    let with_c = GemmOptions {
        c: Some(&c),
        ..Default::default()
    };
    assert_eq!(
        gemm_err(&t(&[2, 3]), &t(&[3, 4]), &with_c),
        mismatch("gemm")
    );
    let bias = h(&[4]);
    let with_bias = GemmOptions {
        bias: Some(Bias::PerColumn(&bias)),
        ..Default::default()
    };
    assert_eq!(
        gemm_err(&t(&[2, 3]), &t(&[3, 4]), &with_bias),
        mismatch("gemm")
    );
    // C's dtype is checked before the product's shapes, as addmm_'s meta.
    let e = gemm_into(&h(&[5, 4]), &t(&[2, 3]), &t(&[3, 4]), 1.0, 0.0).unwrap_err();
    assert_eq!(
        e,
        Error::DType {
            op: "gemm_into",
            expected: DType::F32,
            got: DType::F16
        }
    );
    // A matrix times a vector is mv's, in its words.
    assert!(words(t(&[2, 3]).matmul(&h(&[3])).unwrap_err())
        .contains("addmv input tensors must have the same dtype, but got Half, Float, and Half"));
}

/// Without SHADER_F16 no f16 tensor can exist, so GEMM never sees one: creating or casting to
/// f16 fails naming the feature, and f32 GEMM still works on that device.
#[test]
fn gemm_half_without_feature() {
    let d = Device::with_options(DeviceOptions {
        disable_f16: true,
        ..Default::default()
    })
    .unwrap();
    assert!(!d.supports_f16());
    let a = Tensor::from_slice(&d, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    let b = Tensor::from_slice(&d, &[1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2]).unwrap();
    let e = a
        .to_dtype(DType::F16)
        .and_then(|h| gemm(&h, &b, &GemmOptions::default()))
        .unwrap_err();
    assert_eq!(
        e,
        Error::MissingFeature {
            op: "to_dtype",
            feature: "SHADER_F16"
        }
    );
    assert!(msg(&e).contains("SHADER_F16"), "{e}");
    let e = Tensor::from_slice(&d, &[f16::ONE; 6], &[3, 2])
        .and_then(|h| a.matmul(&h))
        .unwrap_err();
    assert_eq!(
        e,
        Error::MissingFeature {
            op: "from_slice",
            feature: "SHADER_F16"
        }
    );
    let y = a.matmul(&b).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(y, vec![4.0, 5.0, 10.0, 11.0]);
}

#[test]
fn gemm_bias_of_wrong_length() {
    let (a, b) = (t(&[2, 3]), t(&[3, 4]));
    for (bias, what, want) in [
        (Bias::PerColumn(&t(&[5])), "per-column", "[4]"),
        (Bias::PerColumn(&t(&[2])), "per-column", "[4]"),
        (Bias::PerRow(&t(&[4])), "per-row", "[2]"),
        (Bias::PerRow(&t(&[1, 2])), "per-row", "[2]"),
    ] {
        let got = match bias {
            Bias::PerColumn(x) | Bias::PerRow(x) => format!("{:?}", x.shape()),
        };
        let o = GemmOptions {
            bias: Some(bias),
            ..Default::default()
        };
        let e = gemm_err(&a, &b, &o);
        assert!(matches!(e, Error::Shape { op: "gemm", .. }), "{e:?}");
        assert!(
            msg(&e).contains(what) && msg(&e).contains(want) && msg(&e).contains(&got),
            "{e}"
        );
    }
}

#[test]
fn gemm_c_that_does_not_broadcast() {
    let (a, b) = (t(&[2, 3, 4]), t(&[4, 5]));
    for c in [t(&[4, 5]), t(&[2, 5, 1, 5]), t(&[4]), t(&[3, 1, 1])] {
        let o = GemmOptions {
            c: Some(&c),
            ..Default::default()
        };
        let e = gemm_err(&a, &b, &o);
        assert!(matches!(e, Error::Shape { op: "gemm", .. }), "{e:?}");
        assert!(
            msg(&e).contains(&format!("{:?}", c.shape())) && msg(&e).contains("[2, 3, 5]"),
            "{e}"
        );
    }
}

#[test]
fn gemm_into_target_errors() {
    let (a, b) = (t(&[4, 4]), t(&[4, 4]));
    // A target sharing storage with A or B (the whole tensor, or a view of it).
    for c in [
        a.clone(),
        b.clone(),
        a.transpose(0, 1).unwrap().contiguous().unwrap(),
    ] {
        let shares = c.shares_storage(&a) || c.shares_storage(&b);
        let r = gemm_into(&c, &a, &b, 1.0, 1.0);
        if shares {
            let e = r.unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::InvalidArgument {
                        op: "gemm_into",
                        ..
                    }
                ),
                "{e:?}"
            );
            assert!(msg(&e).contains("share storage"), "{e}");
        } else {
            r.unwrap();
        }
    }
    let parent = t(&[8, 4]);
    let a_rows = parent.narrow(0, 0, 4).unwrap();
    let c_rows = parent.narrow(0, 4, 4).unwrap();
    let e = gemm_into(&c_rows, &a_rows, &b, 1.0, 1.0).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                op: "gemm_into",
                ..
            }
        ),
        "{e:?}"
    );
    // Wrong shape and non-contiguous targets.
    let e = gemm_into(&t(&[4, 5]), &a, &b, 1.0, 1.0).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Shape {
                op: "gemm_into",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        msg(&e).contains("[4, 4]") && msg(&e).contains("[4, 5]"),
        "{e}"
    );
    // Right shape, wrong strides: the message says it is the strides.
    let e = gemm_into(&t(&[4, 4]).transpose(0, 1).unwrap(), &a, &b, 1.0, 1.0).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                op: "gemm_into",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        msg(&e).contains("contiguous") && msg(&e).contains("strides [1, 4]"),
        "{e}"
    );
}

/// The mistakes a new user makes porting a PyTorch model give errors that say what to fix: a
/// channels-last image into a convolution, float class labels, a `torch.save` checkpoint.
#[test]
fn porting_mistakes_name_the_fix() {
    let d = Device::new().unwrap();
    let w = Tensor::zeros(&d, &[16, 3, 3, 3], DType::F32).unwrap();
    let nhwc = Tensor::zeros(&d, &[2, 32, 32, 3], DType::F32).unwrap();
    let e = wgtensor::ops::conv2d(&nhwc, &w, None, &Default::default()).unwrap_err();
    let m = e.to_string();
    assert!(
        m.contains("input [2, 32, 32, 3]") && m.contains(".permute(&[0, 3, 1, 2])"),
        "{m}"
    );

    let logits = Tensor::zeros(&d, &[4, 10], DType::F32).unwrap();
    let labels = Tensor::zeros(&d, &[4], DType::F32).unwrap();
    let e = wgtensor::ops::cross_entropy(&logits, &labels, &Default::default()).unwrap_err();
    assert!(e.to_string().contains("must be an I32 tensor"), "{e}");

    // A wrong image size reaches the classifier: the error names the layer and its input.
    use wgtensor::nn::{self, Forward};
    let model = nn::Sequential::new()
        .push(nn::Conv2d::new(&d, 3, 4, 3, Default::default()).unwrap())
        .push(nn::Flatten)
        .push(
            nn::Sequential::new()
                .push(nn::ReLU)
                .push(nn::Linear::new(&d, 4 * 6 * 6, 10, true).unwrap()),
        );
    let x = Tensor::zeros(&d, &[2, 3, 10, 10], DType::F32).unwrap();
    let e = model.forward(&x).unwrap_err();
    let m = e.to_string();
    assert!(m.starts_with("2.1 (Linear): "), "{m}");
    assert!(
        m.contains("256 features") && m.contains("expected 144"),
        "{m}"
    );
    assert!(
        matches!(e.root(), Error::Shape { op: "linear", .. }),
        "{e:?}"
    );
    assert_eq!(
        model
            .forward(&Tensor::zeros(&d, &[2, 3, 8, 8], DType::F32).unwrap())
            .unwrap()
            .shape(),
        &[2, 10]
    );

    for bytes in [&b"PK\x03\x04archive"[..], &b"\x80\x02}q\x00"[..]] {
        let e = wgtensor::io::load_safetensors(&d, bytes).unwrap_err();
        assert!(e.to_string().contains("not a safetensors file"), "{e}");
    }
}

/// gemm checks C whatever beta is (PyTorch's addmm expands C even when beta = 0, which only
/// skips reading it); an empty output is computed whatever K is.
#[test]
fn gemm_checks_c_at_beta_zero_and_empty_outputs_ignore_k() {
    let (a, b) = (t(&[2, 3]), t(&[3, 4]));
    let bad = t(&[7, 9]);
    let e = gemm(
        &a,
        &b,
        &GemmOptions {
            c: Some(&bad),
            beta: 0.0,
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(msg(&e).contains("does not broadcast"), "{e}");
    // beta = 0 still ignores NaN in a C of the right shape.
    let nan = Tensor::full(dev(), &[2, 4], f64::NAN, DType::F32).unwrap();
    let y = gemm(
        &a,
        &b,
        &GemmOptions {
            c: Some(&nan),
            beta: 0.0,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![3.0; 8]);
    let k = (1usize << 24) + 1;
    let e0 = Tensor::zeros(dev(), &[0, k], DType::F32).unwrap();
    let k0 = Tensor::zeros(dev(), &[k, 0], DType::F32).unwrap();
    assert_eq!(matmul(&e0, &k0).unwrap().shape(), &[0, 0]);
    // A transposed convolution of an empty image is refused, as the forward refuses it.
    let x = Tensor::zeros(dev(), &[1, 2, 0, 3], DType::F32).unwrap();
    let w = Tensor::zeros(dev(), &[2, 4, 3, 3], DType::F32).unwrap();
    let e = wgtensor::ops::conv_transpose2d(&x, &w, None, &Default::default()).unwrap_err();
    assert!(msg(&e).contains("zero-size spatial"), "{e}");
}

/// Pools follow PyTorch's shape check: only the batch may be empty (an empty batch gives an
/// empty result; no channels or an empty image is an error), and 1-D pools name the caller's
/// shape, not the lifted 2-D one.
#[test]
fn pools_refuse_empty_channels_and_name_the_callers_shape() {
    use wgtensor::ops::{
        adaptive_avg_pool2d, avg_pool2d, max_pool1d, max_pool2d, AvgPool2dOptions,
        MaxPool1dOptions, MaxPool2dOptions,
    };
    let zeros = |s: &[usize]| Tensor::zeros(dev(), s, DType::F32).unwrap();
    let mp = MaxPool2dOptions::new(2);
    assert_eq!(
        max_pool2d(&zeros(&[0, 3, 4, 4]), &mp).unwrap().shape(),
        &[0, 3, 2, 2]
    );
    for s in [&[2usize, 0, 4, 4][..], &[0, 4, 4], &[2, 3, 0, 4]] {
        let e = msg(&max_pool2d(&zeros(s), &mp).unwrap_err());
        assert!(e.contains("only the batch may be empty"), "{e}");
        assert!(avg_pool2d(&zeros(s), &AvgPool2dOptions::new(2)).is_err());
        // (1, 1) is the plane's mean, as PyTorch's: NaN over an empty plane, empty for no
        // channels.
        let y = adaptive_avg_pool2d(&zeros(s), [1, 1]).unwrap();
        let mut want = s[..s.len() - 2].to_vec();
        want.extend([1, 1]);
        assert_eq!(y.shape(), want.as_slice());
        assert!(y.to_vec::<f32>().unwrap().iter().all(|v| v.is_nan()));
    }
    let e = msg(&max_pool1d(&zeros(&[2, 3, 0]), &MaxPool1dOptions::new(2)).unwrap_err());
    assert!(
        e.contains("[2, 3, 0]") && !e.contains("[2, 3, 1, 0]"),
        "{e}"
    );
}

/// Errors PyTorch's own tests match by their words: test_embedding_scalar_weight_error and
/// nn.init's fan computation.
#[test]
fn embedding_and_init_errors_in_pytorch_words() {
    let ids = Tensor::from_slice(dev(), &[0i32, 1], &[2]).unwrap();
    for shape in [&[][..], &[1, 1, 1][..]] {
        let w = Tensor::ones(dev(), shape, DType::F32).unwrap();
        let e = msg(&wgtensor::ops::embedding(&ids, &w, None).unwrap_err());
        assert!(e.contains("'weight' must be 2-D"), "{e}");
    }
    // F.embedding's order: padding_idx, the weight's rank, then the ids' dtype; padding_idx 0
    // passes even for an empty table.
    let fids = Tensor::from_slice(dev(), &[0.0f32], &[1]).unwrap();
    let w3 = Tensor::ones(dev(), &[2, 2, 2], DType::F32).unwrap();
    let e = msg(&wgtensor::ops::embedding(&fids, &w3, Some(5)).unwrap_err());
    assert!(
        e.contains("Padding_idx must be within num_embeddings"),
        "{e}"
    );
    let e = msg(&wgtensor::ops::embedding(&fids, &w3, None).unwrap_err());
    assert!(e.contains("'weight' must be 2-D"), "{e}");
    // nn.Embedding(0, e, padding_idx=0): the range check passes 0, then zeroing row 0 of no
    // rows is the index error; -1 is the range check's.
    let e = msg(&wgtensor::nn::Embedding::new(dev(), 0, 3, Some(0)).unwrap_err());
    assert!(
        e.contains("index 0 is out of bounds for dimension 0 with size 0"),
        "{e}"
    );
    let e = msg(&wgtensor::nn::Embedding::new(dev(), 0, 3, Some(-1)).unwrap_err());
    assert!(
        e.contains("Padding_idx must be within num_embeddings"),
        "{e}"
    );
    let none = Tensor::zeros(dev(), &[0], DType::I32).unwrap();
    let empty = Tensor::zeros(dev(), &[0, 4], DType::F32).unwrap();
    let rows = wgtensor::ops::embedding(&none, &empty, Some(0)).unwrap();
    assert_eq!(rows.shape(), &[0, 4]);
    // gather wraps its dim before the index's dtype; masked_fill broadcasts before it
    // converts the value.
    let x = Tensor::ones(dev(), &[2, 2], DType::F32).unwrap();
    let e = msg(&x.gather(5, &fids.reshape(&[1, 1]).unwrap()).unwrap_err());
    assert!(
        e.contains("Dimension out of range (expected to be in range of [-2, 1], but got 5)"),
        "{e}"
    );
    let mask = Tensor::ones(dev(), &[3], DType::I32).unwrap();
    let e = msg(&x.masked_fill(&mask, 1e39).unwrap_err());
    assert!(e.contains("must match the size of tensor"), "{e}");
    // init.py's 2 / (fan_in + fan_out) with both 0: Python's ZeroDivisionError.
    let e = wgtensor::ops::xavier_uniform(dev(), &[0, 0], 1.0, DType::F32).unwrap_err();
    assert!(msg(&e).contains("float division by zero"), "{e}");
    let e = wgtensor::ops::xavier_uniform(dev(), &[5], 1.0, DType::F32).unwrap_err();
    assert!(
        msg(&e).contains(
            "Fan in and fan out can not be computed for tensor with fewer than 2 dimensions"
        ),
        "{e}"
    );
}

/// Loss errors PyTorch's own tests match by their words (test_nll_loss_mismatched_batch,
/// _invalid_target_dim, _invalid_weights, test_bce_loss_size_mismatch,
/// test_cross_entropy_label_smoothing_errors: smoothing is checked before the shapes).
#[test]
fn loss_errors_in_pytorch_words() {
    use wgtensor::ops::{
        binary_cross_entropy, binary_cross_entropy_with_logits, cross_entropy, nll_loss,
        CrossEntropyOptions, NllLossOptions, Reduction,
    };
    let ids = |shape: &[usize]| Tensor::zeros(dev(), shape, DType::I32).unwrap();
    let nll = NllLossOptions::default();
    // Integer operands: the kernels' dispatch words (BCE's before its value check, which
    // leaves no pending error behind), kl_div's own check.
    let two = Tensor::from_slice(dev(), &[0i32, 2], &[2]).unwrap();
    has(
        binary_cross_entropy(&two, &ids(&[2]), None, Reduction::Mean),
        "\"binary_cross_entropy\" not implemented for 'Int'",
    );
    t(&[1]).to_vec::<f32>().unwrap();
    // F.binary_cross_entropy expands the weight before the kernel's dispatch.
    has(
        binary_cross_entropy(&two, &ids(&[2]), Some(&t(&[3])), Reduction::Mean),
        "does not broadcast",
    );
    // A subnormal beta still reaches smooth_l1's kernel (beta 0 alone is l1_loss).
    has(
        wgtensor::ops::smooth_l1_loss(&two, &ids(&[2]), Reduction::Mean, 1e-40),
        "\"smooth_l1_cpu\" not implemented for 'Int'",
    );
    has(
        wgtensor::ops::mse_loss(&two, &ids(&[2]), Reduction::Mean),
        "\"mse_cpu\" not implemented for 'Int'",
    );
    has(
        wgtensor::ops::kl_div(
            &t(&[2]),
            &ids(&[2]),
            wgtensor::ops::KlDivReduction::Sum,
            false,
        ),
        "kl_div: Integral inputs not supported.",
    );
    has(
        nll_loss(&t(&[10, 3]), &ids(&[3]), &nll),
        "Expected input batch_size (10) to match target batch_size (3).",
    );
    // A 0-d target against a batch reads as batch 0; a 1-D input takes one target element.
    has(
        nll_loss(&t(&[10, 3]), &ids(&[]), &nll),
        "Expected input batch_size (10) to match target batch_size (0).",
    );
    has(
        nll_loss(&t(&[0, 3]), &ids(&[]), &nll),
        "Dimension specified as 0 but tensor has no dimensions",
    );
    has(
        nll_loss(&t(&[3]), &ids(&[2]), &nll),
        "For 1D input, 1D target must have size 1, but got target size: 2",
    );
    has(
        nll_loss(&t(&[2, 3, 4, 4]), &t(&[2, 4, 5]), &nll),
        "class-index targets must be an i32 tensor",
    );
    has(
        nll_loss(&t(&[3]), &t(&[2]), &nll),
        "class-index targets must be an i32 tensor",
    );
    // A float target: the batch check first, the target's dtype after its shape.
    has(
        nll_loss(&t(&[10, 3]), &t(&[3]), &nll),
        "Expected input batch_size (10) to match target batch_size (3).",
    );
    has(
        nll_loss(&t(&[10, 3]), &t(&[10]), &nll),
        "class-index targets must be an i32 tensor, got F32",
    );
    has(
        nll_loss(&t(&[10, 3]), &ids(&[10, 2]), &nll),
        "0D or 1D target tensor expected, multi-target not supported",
    );
    has(
        nll_loss(&t(&[2, 3, 4]), &ids(&[2, 5]), &nll),
        "Expected target size [2, 4], got [2, 5]",
    );
    has(
        nll_loss(&t(&[2, 5, 3, 4]), &ids(&[2, 3, 3]), &nll),
        "size mismatch (got input: [2, 5, 3, 4] , target: [2, 3, 3]",
    );
    has(
        nll_loss(&t(&[2, 5, 3, 4]), &ids(&[2, 12]), &nll),
        "only batches of spatial targets supported (3D tensors) but got targets of dimension: 2",
    );
    for w in [&[4][..], &[1, 3][..]] {
        let w = t(w);
        let o = NllLossOptions {
            weight: Some(&w),
            ..Default::default()
        };
        has(
            nll_loss(&t(&[2, 3]), &ids(&[2]), &o),
            "weight tensor should be defined either for all 3 classes or no classes",
        );
    }
    let o = CrossEntropyOptions {
        label_smoothing: 1.2,
        ..Default::default()
    };
    has(
        cross_entropy(&t(&[3, 4]), &ids(&[4]), &o),
        "label_smoothing must be between 0.0 and 1.0. Got: 1.2",
    );
    // Probability targets: ignore_index first, then the weight's shape, then the smoothing
    // (a negative one is no smoothing), as cross_entropy_loss_symint.
    let (x, y) = (t(&[2, 3]), t(&[2, 3]));
    let w4 = t(&[4]);
    let o = CrossEntropyOptions {
        ignore_index: 1,
        label_smoothing: 1.5,
        weight: Some(&w4),
        ..Default::default()
    };
    has(
        cross_entropy(&x, &y, &o),
        "ignore_index is not supported for floating point target",
    );
    let o = CrossEntropyOptions {
        ignore_index: -100,
        ..o
    };
    has(
        cross_entropy(&x, &y, &o),
        "cross_entropy: weight tensor should be defined either for all 3 classes",
    );
    for (e, got) in [(1.5, "1.5"), (2.0, "2"), (1e20, "1e+20")] {
        let o = CrossEntropyOptions {
            label_smoothing: e,
            ..Default::default()
        };
        has(
            cross_entropy(&x, &y, &o),
            &format!("label_smoothing must be between 0.0 and 1.0. Got: {got}"),
        );
    }
    // Inputs of rank 3 and more take any weight of C elements (nll_loss2d's rule), and say
    // its words before the size mismatch (rank 4) or after the target-size check (rank 3).
    let w3 = Tensor::from_slice(dev(), &[0.5f32, 2.0, 3.0], &[3]).unwrap();
    let w13 = w3.reshape(&[1, 3]).unwrap();
    let x4 = wgtensor::ops::randn(dev(), &[2, 3, 4, 5], DType::F32).unwrap();
    let t4 = Tensor::from_slice(dev(), &[0i32, 1, 2, 1, 0].repeat(8), &[2, 4, 5]).unwrap();
    let loss = |w: &Tensor| {
        let o = NllLossOptions {
            weight: Some(w),
            ..Default::default()
        };
        nll_loss(&x4, &t4, &o).unwrap().to_vec::<f32>().unwrap()
    };
    assert_eq!(loss(&w13), loss(&w3));
    // With label smoothing cross_entropy views the weight by its first dim and gathers from
    // it (Mean): a [1, C] weight fails the view, a [C, 1] one the gather; Sum takes [C, 1].
    let smooth = |w: &Tensor, reduction| {
        let o = CrossEntropyOptions {
            weight: Some(w),
            label_smoothing: 0.1,
            reduction,
            ..Default::default()
        };
        cross_entropy(&x4, &t4, &o)
    };
    has(
        smooth(&w13, Reduction::Sum),
        "shape '[1, 1, 1, 1]' is invalid for input of size 3",
    );
    let w31 = w3.reshape(&[3, 1]).unwrap();
    has(
        smooth(&w31, Reduction::Mean),
        "Index tensor must have the same number of dimensions as input tensor",
    );
    let v = |r: wgtensor::Result<Tensor>| r.unwrap().to_vec::<f32>().unwrap();
    assert_eq!(
        v(smooth(&w31, Reduction::Sum)),
        v(smooth(&w3, Reduction::Sum))
    );
    let o = NllLossOptions {
        weight: Some(&w4),
        ..Default::default()
    };
    has(
        nll_loss(&t(&[2, 3, 4, 5]), &ids(&[2, 4, 6]), &o),
        "weight tensor should be defined either for all or no classes",
    );
    has(
        nll_loss(&t(&[2, 3, 4]), &ids(&[2, 5]), &o),
        "Expected target size [2, 4], got [2, 5]",
    );
    has(
        nll_loss(&t(&[2, 3, 4]), &ids(&[2, 4]), &o),
        "weight tensor should be defined either for all or no classes",
    );
    has(
        binary_cross_entropy(&t(&[25]), &t(&[25, 1]), None, Reduction::Mean),
        "Using a target size (torch.Size([25, 1])) that is different to the input size \
         (torch.Size([25])) is deprecated",
    );
    has(
        binary_cross_entropy_with_logits(&t(&[25]), &t(&[25, 1]), &Default::default()),
        "Target size (torch.Size([25, 1])) must be the same as input size (torch.Size([25]))",
    );
    // A target of the input's shape holds probabilities, whatever its dtype.
    has(
        cross_entropy(&t(&[2, 3]), &ids(&[2, 3]), &Default::default()),
        "Expected floating point type for target with class probabilities, got Int",
    );
    // LossNLL.cpp's IndexError words, at the readback: on a device of its own, since the
    // device reports it at its next readback, which another test's could take.
    let own = Device::new().unwrap();
    let target = Tensor::from_slice(&own, &[0i32, 5], &[2]).unwrap();
    let input = Tensor::from_slice(&own, &[1.0f32; 10], &[2, 5]).unwrap();
    let l = nll_loss(&input, &target, &nll).unwrap();
    has(l.to_vec::<f32>(), "Target 5 is out of bounds.");
    // derivatives.yaml has no formula for bce_with_logits' weight or pos_weight.
    use wgtensor::ops::BceWithLogitsOptions;
    let w = t(&[25]).requires_grad().unwrap();
    for o in [
        BceWithLogitsOptions {
            weight: Some(&w),
            ..Default::default()
        },
        BceWithLogitsOptions {
            pos_weight: Some(&w),
            ..Default::default()
        },
    ] {
        let name = if o.weight.is_some() {
            "weight"
        } else {
            "pos_weight"
        };
        has(
            binary_cross_entropy_with_logits(&t(&[25]), &t(&[25]), &o),
            &format!(
                "The function 'binary_cross_entropy_with_logits' is not differentiable with \
                 respect to argument '{name}'. This input cannot have requires_grad True."
            ),
        );
    }
    // Both tracked: PyTorch's checks run in the arguments' order, so 'weight' is named.
    let both = BceWithLogitsOptions {
        weight: Some(&w),
        pos_weight: Some(&w),
        ..Default::default()
    };
    has(
        binary_cross_entropy_with_logits(&t(&[25]), &t(&[25]), &both),
        "with respect to argument 'weight'.",
    );
    // binary_cross_entropy casts a weight of another float dtype, as `loss.mul_(weight)`.
    let p = Tensor::from_slice(dev(), &[0.25f32, 0.5], &[2]).unwrap();
    let y = Tensor::from_slice(dev(), &[1.0f32, 0.0], &[2]).unwrap();
    let w = Tensor::from_slice(dev(), &[2.0f32, 3.0], &[2]).unwrap();
    if let Ok(w16) = w.to_dtype(DType::F16) {
        let l = binary_cross_entropy(&p, &y, Some(&w16), Reduction::Sum).unwrap();
        let want = 2.0 * -(0.25f64.ln()) + 3.0 * -(0.5f64.ln());
        let got = l.to_vec::<f32>().unwrap()[0] as f64;
        assert!((got - want).abs() < 1e-5, "{got} vs {want}");
    }
}

/// Convolution and pooling errors PyTorch's own tests match by their words
/// (test_invalid_conv1d/2d, test_mismatch_shape_conv2d, test_conv_empty_channel,
/// test_pooling_zero_stride, test_AvgPool2d_empty, error_inputs_max_pool2d).
#[test]
fn conv_and_pool_errors_in_pytorch_words() {
    use wgtensor::ops::{
        adaptive_avg_pool2d, adaptive_max_pool2d, avg_pool2d, conv1d, conv2d, max_pool1d,
        max_pool2d, AvgPool2dOptions, Conv1dOptions, Conv2dOptions, MaxPool1dOptions,
        MaxPool2dOptions,
    };
    let c1 = Conv1dOptions::default();
    has(
        conv1d(&t(&[1, 3, 4]), &t(&[33, 3, 10]), None, &c1),
        "Calculated padded input size per channel: (4). Kernel size: (10). Kernel size can't be \
         greater than actual input size",
    );
    has(
        conv2d(
            &t(&[1, 1, 4, 4]),
            &t(&[1, 1, 5, 3]),
            None,
            &Default::default(),
        ),
        "Calculated padded input size per channel: (4 x 4). Kernel size: (5 x 3).",
    );
    has(
        conv2d(
            &t(&[1, 10, 1, 28, 28]),
            &t(&[2, 10, 3, 3]),
            None,
            &Default::default(),
        ),
        "Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: \
         [1, 10, 1, 28, 28]",
    );
    has(
        conv1d(&t(&[2, 1, 15]), &t(&[8, 3, 2]), None, &c1),
        "Given groups=1, weight of size [8, 3, 2], expected input[2, 1, 15] to have 3 \
         channels, but got 1 channels instead",
    );
    // The operands' dtypes are checked after every shape (the backend's check); the Empty
    // backend checks none, and an empty-channel input checks the bias before the kernel.
    if dev().supports_f16() {
        let wh = t(&[4, 3, 3, 3]).to_dtype(DType::F16).unwrap();
        has(
            conv2d(&t(&[1, 2, 5, 5]), &wh, None, &Conv2dOptions::default()),
            "expected input[1, 2, 5, 5] to have 3 channels, but got 2 channels instead",
        );
        let y = conv2d(&t(&[0, 3, 5, 5]), &wh, None, &Conv2dOptions::default()).unwrap();
        assert_eq!((y.shape(), y.dtype()), (&[0, 4, 3, 3][..], DType::F32));
        // Tracked: the Empty backend's zero gradients, each in its operand's dtype.
        let (x0, w0) = (
            t(&[0, 3, 5, 5]).requires_grad().unwrap(),
            wh.requires_grad().unwrap(),
        );
        let y = conv2d(&x0, &w0, None, &Conv2dOptions::default()).unwrap();
        let g = y.sum_all().unwrap().backward().unwrap();
        assert_eq!(g.get(&x0).unwrap().shape(), &[0, 3, 5, 5]);
        let gw = g.get(&w0).unwrap();
        assert_eq!((gw.shape(), gw.dtype()), (&[4, 3, 3, 3][..], DType::F16));
    }
    has(
        conv2d(
            &t(&[1, 0, 2, 2]),
            &t(&[4, 0, 3, 3]),
            Some(&t(&[5])),
            &Conv2dOptions::default(),
        ),
        "expected bias to be 1-dimensional with 4 elements, but got bias of size [5] instead",
    );
    let strided = Conv2dOptions {
        stride: [0, 1],
        ..Default::default()
    };
    has(
        conv2d(&t(&[1, 1, 4, 4]), &t(&[1, 1, 3, 3]), None, &strided),
        "non-positive stride is not supported",
    );
    let x = t(&[1, 2, 8, 8]);
    has(
        max_pool2d(
            &x,
            &MaxPool2dOptions {
                stride: Some([0, 0]),
                ..MaxPool2dOptions::new(2)
            },
        ),
        "stride should not be zero",
    );
    has(
        max_pool1d(
            &t(&[1, 2, 8]),
            &MaxPool1dOptions {
                stride: Some(0),
                ..MaxPool1dOptions::new(2)
            },
        ),
        // test_pooling_zero_stride takes either sentence; check_max_pool1d says this one.
        "stride must be greater than zero, but got 0",
    );
    has(
        max_pool2d(
            &x,
            &MaxPool2dOptions {
                padding: [4, 4],
                ..MaxPool2dOptions::new(2)
            },
        ),
        "pad should be at most half of effective kernel size",
    );
    has(
        avg_pool2d(&t(&[16, 0, 20, 32]), &AvgPool2dOptions::new(2)),
        "Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input",
    );
    // pooling_output_shape's pad check (effective kernel (k - 1) d + 1) comes before
    // pool2d_shape_check's kernel and dilation, whose pad <= k / 2 follows the input's planes.
    let k0 = MaxPool2dOptions {
        kernel_size: [0, 0],
        stride: Some([1, 1]),
        padding: [1, 1],
        ..MaxPool2dOptions::new(2)
    };
    let d0 = MaxPool2dOptions {
        dilation: [0, 0],
        ..MaxPool2dOptions {
            stride: Some([1, 1]),
            padding: [1, 1],
            ..MaxPool2dOptions::new(3)
        }
    };
    let a0 = AvgPool2dOptions {
        stride: Some([1, 1]),
        padding: [1, 1],
        ..AvgPool2dOptions::new(0)
    };
    for r in [
        max_pool2d(&t(&[1, 1, 4, 4]), &k0),
        max_pool2d(&t(&[1, 1, 4, 4]), &d0),
        avg_pool2d(&t(&[1, 1, 4, 4]), &a0),
    ] {
        has(r, "pad should be at most half of effective kernel size");
    }
    has(
        max_pool2d(
            &t(&[1, 0, 8, 8]),
            &MaxPool2dOptions {
                stride: Some([1, 1]),
                padding: [2, 2],
                dilation: [2, 2],
                ..MaxPool2dOptions::new(3)
            },
        ),
        "Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input",
    );
    // max_pool2d checks the rank before its options (max_pool2d_with_indices' meta).
    let zero_stride = MaxPool2dOptions {
        stride: Some([0, 0]),
        ..MaxPool2dOptions::new(2)
    };
    for shape in [&[3, 4][..], &[1, 2, 3, 4, 5]] {
        has(
            max_pool2d(&t(shape), &zero_stride),
            "non-empty 3D or 4D (batch mode) tensor expected for input",
        );
    }
    // The adaptive pools' own sentences: the rank first, then max's dims 1 and up, avg's -2
    // and -1.
    has(
        adaptive_max_pool2d(&t(&[1, 1, 1, 4, 4]), [2, 2]),
        "adaptive_max_pool2d(): Expected 3D or 4D tensor, but got: [1, 1, 1, 4, 4]",
    );
    has(
        adaptive_max_pool2d(&t(&[2, 0, 4, 4]), [2, 2]),
        "adaptive_max_pool2d(): Expected input to have non-zero size for non-batch \
         dimensions, but input has sizes [2, 0, 4, 4] with dimension 1 being empty",
    );
    has(
        adaptive_avg_pool2d(&t(&[1, 1, 1, 4, 4]), [2, 2]),
        "adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got [1, 1, 1, 4, 4]",
    );
    has(
        adaptive_avg_pool2d(&t(&[1, 1, 1, 0, 4]), [2, 2]),
        "adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got [1, 1, 1, 0, 4]",
    );
    has(
        adaptive_avg_pool2d(&t(&[2, 4, 0]), [2, 2]),
        "with dimension 2 being empty",
    );
}

/// View, reduction, recurrent and attention errors PyTorch's own tests match by their words
/// (test_flatten, test_narrow, test_view, test_tensor_compare_ops_empty, test_repeated_dim,
/// test_broadcast_to, test_rnn_args_check, test_multihead_attn_invalid_shape).
#[test]
fn view_reduction_rnn_and_attention_errors_in_pytorch_words() {
    use wgtensor::nn::{self, MhaMask, MhaOptions};
    let x = t(&[2, 3, 4]);
    has(
        x.flatten(2, 0),
        "flatten() has invalid args: start_dim cannot come after end_dim",
    );
    has(
        t(&[3]).narrow(0, 2i64, 2),
        "start (2) + length (2) exceeds dimension size (3).",
    );
    has(
        t(&[3]).narrow(0, 4i64, 0),
        "start out of range (expected to be in range of [-3, 3], but got 4)",
    );
    has(
        t(&[15]).reshape(&[15, 2]),
        "shape '[15, 2]' is invalid for input of size 15",
    );
    has(
        t(&[0]).reshape_infer(&[-1, 0]),
        "cannot reshape tensor of 0 elements into shape [-1, 0] because the unspecified \
         dimension size -1 can be any value and is ambiguous",
    );
    // infer_size_impl: with elements, no size fits a 0 beside -1.
    has(
        t(&[6]).reshape_infer(&[0, -1]),
        "shape '[0, -1]' is invalid for input of size 6",
    );
    let e0 = t(&[2, 0, 4]);
    has(
        e0.max(1, false),
        "Expected reduction dim 1 to have non-zero size",
    );
    has(
        e0.argmax(1, false),
        "Expected reduction dim 1 to have non-zero size",
    );
    // One error kind for every empty reduction (PyTorch raises one IndexError for them).
    for r in [e0.max(1, false), e0.argmax(1, false), e0.argmax_all()] {
        assert!(matches!(r, Err(Error::Size { .. })), "{r:?}");
    }
    // A mean of integers, in error_inputs_mean's words, whichever form (before the dims).
    let xi = Tensor::zeros(dev(), &[2, 3, 4], DType::I32).unwrap();
    for r in [
        xi.mean(0, false),
        xi.mean_dims(&[0, 2], false),
        xi.mean_all(),
        xi.mean(7, false),
    ] {
        has(
            r,
            "mean(): could not infer output dtype. Input dtype must be either a floating point \
             or complex dtype. Got: Int",
        );
    }
    has(
        x.sum_dims(&[0, -3], false),
        "dim 0 appears multiple times in the list of dims",
    );
    // Every dim's range before any repeat, as PyTorch's reductions.
    let x3 = Tensor::zeros(dev(), &[2, 3, 4], DType::F32).unwrap();
    has(
        x3.sum_dims(&[0, 1, 0, 1], false),
        "dim 0 appears multiple times in the list of dims",
    );
    has(
        x3.mean_dims(&[0, 0, 5], false),
        "Dimension out of range (expected to be in range of [-3, 2], but got 5)",
    );
    has(
        x3.sum_dims(&[0, 5, 0], false),
        "Dimension out of range (expected to be in range of [-3, 2], but got 5)",
    );
    let s0 = Tensor::zeros(dev(), &[], DType::F32).unwrap();
    has(
        s0.sum_dims(&[0, -1, 2], false),
        "Dimension out of range (expected to be in range of [-1, 0], but got 2)",
    );
    has(
        s0.sum_dims(&[0, -1], false),
        "dim 0 appears multiple times in the list of dims",
    );
    has(
        t(&[3]).broadcast_to(&[2, 4]),
        "The expanded size of the tensor (4) must match the existing size (3) at \
         non-singleton dimension 1.  Target sizes: [2, 4].  Tensor sizes: [3]",
    );
    // RNNBase's constructor checks input_size, then hidden_size.
    has(
        nn::Lstm::new(dev(), 0, 0, Default::default()),
        "input_size must be greater than zero, got 0",
    );
    has(
        nn::Gru::new(dev(), 3, 0, Default::default()),
        "hidden_size must be greater than zero, got 0",
    );
    let lstm = nn::Lstm::new(dev(), 10, 20, Default::default()).unwrap();
    has(
        lstm.forward_with_state(&t(&[5, 3, 11]), None, None),
        "input.size(-1) must be equal to input_size. Expected 10, got 11",
    );
    let (good, bad) = (t(&[1, 3, 20]), t(&[1, 4, 20]));
    has(
        lstm.forward_with_state(&t(&[5, 3, 10]), Some(&bad), Some(&good)),
        "Expected hidden[0] size (1, 3, 20), got [1, 4, 20]",
    );
    has(
        lstm.forward_with_state(&t(&[5, 3, 10]), Some(&good), Some(&bad)),
        "Expected hidden[1] size (1, 3, 20), got [1, 4, 20]",
    );
    let gru = nn::Gru::new(dev(), 10, 20, Default::default()).unwrap();
    has(
        gru.forward_with_state(&t(&[5, 3, 10]), Some(&bad), None),
        "Expected hidden size (1, 3, 20), got [1, 4, 20]",
    );
    // RNNBase.check_input's order: the rank, then input.size(-1), before the states and the
    // sequence length (an empty sequence of the wrong width is a width error).
    has(
        lstm.forward_with_state(&t(&[5, 3, 1, 10]), Some(&bad), None),
        "LSTM: Expected input to be 2D or 3D, got 4D instead",
    );
    has(
        gru.forward_with_state(&t(&[0, 3, 7]), None, None),
        "input.size(-1) must be equal to input_size. Expected 10, got 7",
    );
    has(
        lstm.forward_with_state(&t(&[5, 3, 10]), Some(&t(&[3, 20])), Some(&t(&[3, 20]))),
        "For batched 3-D input, hx and cx should also be 3-D but got (2-D, 2-D) tensors",
    );
    has(
        gru.forward_with_state(&t(&[5, 10]), Some(&good), None),
        "For unbatched 2-D input, hx should also be 2-D but got 3-D tensor",
    );
    // The cells: common_modules' module_error_inputs_torch_nn_RNN_GRU_Cell / _LSTMCell.
    let gru_cell = nn::GruCell::new(dev(), 10, 20, true).unwrap();
    let h = t(&[3, 20]);
    has(
        gru_cell.forward_cell(&t(&[3, 11]), Some(&h)),
        "input has inconsistent input_size: got 11 expected 10",
    );
    has(
        gru_cell.forward_cell(&t(&[3, 10]), Some(&t(&[3, 21]))),
        "hidden0 has inconsistent hidden_size: got 21, expected 20",
    );
    has(
        gru_cell.forward_cell(&t(&[3, 10]), Some(&t(&[5, 20]))),
        "Input batch size 3 doesn't match hidden0 batch size 5",
    );
    has(
        gru_cell.forward_cell(&t(&[3, 10]), Some(&t(&[3, 1, 1, 20]))),
        "GRUCell: Expected hidden to be 1D or 2D, got 4D instead",
    );
    has(
        gru_cell.forward_cell(&t(&[3, 1, 10]), Some(&h)),
        "GRUCell: Expected input to be 1D or 2D, got 3D instead",
    );
    let lstm_cell = nn::LstmCell::new(dev(), 10, 20, true).unwrap();
    has(
        lstm_cell.forward_cell(&t(&[3, 11]), Some((&h, &h))),
        "input has inconsistent input_size: got 11 expected 10",
    );
    has(
        lstm_cell.forward_cell(&t(&[3, 10]), Some((&t(&[3, 1, 1, 20]), &h))),
        "LSTMCell: Expected hx[0] to be 1D or 2D, got 4D instead",
    );
    has(
        lstm_cell.forward_cell(&t(&[3, 10]), Some((&h, &t(&[3, 21])))),
        "hidden1 has inconsistent hidden_size: got 21, expected 20",
    );
    // A 1-D c beside a 2-D x and h: ATen's rank check names it (torch 2.15).
    has(
        lstm_cell.forward_cell(&t(&[3, 10]), Some((&h, &t(&[20])))),
        "Expected 2D hidden1 (batch x hidden_size), but got 1D tensor",
    );
    // The input alone decides batching: a batched x with a 1-D state, an unbatched x with 2-D
    // states (lifted to 3-D), in ATen's words; a [H, 1] state beside an unbatched x is not
    // reshaped into place.
    has(
        gru_cell.forward_cell(&t(&[3, 10]), Some(&t(&[20]))),
        "Expected 2D hidden0 (batch x hidden_size), but got 1D tensor",
    );
    has(
        gru_cell.forward_cell(&t(&[10]), Some(&t(&[1, 20]))),
        "Expected 2D hidden0 (batch x hidden_size), but got 3D tensor",
    );
    has(
        gru_cell.forward_cell(&t(&[10]), Some(&t(&[20, 1]))),
        "Expected 2D hidden0 (batch x hidden_size), but got 3D tensor",
    );
    has(
        lstm_cell.forward_cell(&t(&[10]), Some((&t(&[20]), &t(&[20, 1])))),
        "Expected 2D hidden1 (batch x hidden_size), but got 3D tensor",
    );
    has(
        gru_cell.forward_cell(&t(&[20, 10]), Some(&t(&[20]))),
        "Expected 2D hidden0 (batch x hidden_size), but got 1D tensor",
    );
    // The states' rank is checked before the input's width, as PyTorch's forward does.
    has(
        lstm.forward_with_state(&t(&[5, 3, 7]), Some(&t(&[1, 20])), Some(&t(&[1, 20]))),
        "For batched 3-D input, hx and cx should also be 3-D but got (2-D, 2-D) tensors",
    );
    let mha = nn::MultiheadAttention::new(dev(), 4, 4, Default::default()).unwrap();
    let q = t(&[4, 4, 4]);
    has(
        mha.forward_attn(&q, &t(&[4, 4]), &q, &MhaOptions::default()),
        "For batched (3-D) `query`, expected `key` and `value` to be 3-D but found 2-D and 3-D \
         tensors respectively",
    );
    let pad = t(&[4]);
    let o = MhaOptions {
        key_padding_mask: Some(MhaMask::Bool(&pad)),
        ..Default::default()
    };
    has(
        mha.forward_attn(&q, &q, &q, &o),
        "expected `key_padding_mask` to be `None` or 2-D but found 1-D tensor instead",
    );
    let o = MhaOptions {
        attn_mask: Some(MhaMask::Bool(&pad)),
        ..Default::default()
    };
    has(
        mha.forward_attn(&q, &q, &q, &o),
        "expected `attn_mask` to be `None`, 2-D or 3-D but found 1-D tensor instead",
    );
    let q2 = t(&[4, 4]);
    let m3 = t(&[3, 4, 4]);
    let o = MhaOptions {
        attn_mask: Some(MhaMask::Bool(&m3)),
        ..Default::default()
    };
    has(
        mha.forward_attn(&q2, &q2, &q2, &o),
        "Expected `attn_mask` shape to be (4, 4, 4)",
    );
}

/// Elementwise, cat/stack, fill and copy errors PyTorch's tests match by their words
/// (test_clamp_raises_arg_errors, error_inputs_cat, error_inputs_masked_fill,
/// test_copy_mem_overlap, infer_size's broadcast error).
#[test]
fn elementwise_cat_and_copy_errors_in_pytorch_words() {
    use wgtensor::ops::{cat, stack};
    has(
        t(&[3]).clamp(None, None),
        "At least one of 'min' or 'max' must not be None",
    );
    has(
        wgtensor::ops::hardtanh(&t(&[3]), 2.0, 1.0),
        "min_val cannot be greater than max_val",
    );
    // A bound past the dtype: hardtanh's own error, the value as Python prints it.
    let e = wgtensor::ops::hardtanh(&t(&[3]), -1e39, 1.0)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("hardtanh:")
            && e.contains("value cannot be converted to type float without overflow: -1e+39"),
        "{e}"
    );
    let (a, b) = (t(&[5, 5, 10, 10]), t(&[5, 0, 9, 10]));
    has(
        cat(&[&a, &b], 1),
        "Sizes of tensors must match except in dimension 1. Expected size 10 but got size 9 for \
         tensor number 1 in the list",
    );
    has(cat(&[], 1), "non-empty list of Tensors");
    has(
        cat(&[&t(&[2]), &t(&[])], 0),
        "zero-dimensional tensor (at position 1) cannot be concatenated",
    );
    has(stack(&[], 0), "stack expects a non-empty TensorList");
    // The dim before the sizes, as ATen's stack.
    has(
        stack(&[&t(&[2]), &t(&[3])], 5),
        "Dimension out of range (expected to be in range of [-2, 1], but got 5)",
    );
    has(
        Tensor::full(dev(), &[2], 1e39, DType::F32),
        "value cannot be converted to type",
    );
    has(
        t(&[2]).add(&t(&[3])),
        "The size of tensor a (2) must match the size of tensor b (3) at non-singleton dimension 0",
    );
    has(
        t(&[2, 3]).add(&t(&[3, 4])),
        "The size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 1",
    );
    has(
        Tensor::full(dev(), &[2], 2147483648.0, DType::I32),
        "value cannot be converted to type int without overflow",
    );
    // Conv: the weight's checks before the input's, as PyTorch's check_shape_forward.
    let o3 = wgtensor::ops::Conv2dOptions {
        groups: 3,
        ..Default::default()
    };
    has(
        wgtensor::ops::conv2d(&t(&[2, 2, 4, 3]), &t(&[2, 2, 1, 3]), None, &o3),
        "Given groups=3, expected weight to be at least 3 at dimension 0",
    );
    has(
        wgtensor::ops::conv2d(&t(&[2, 64, 5, 5]), &t(&[6, 21, 3, 3]), None, &o3),
        "Given groups=3, weight of size [6, 21, 3, 3], expected input[2, 64, 5, 5] to have 63 \
         channels, but got 64 channels instead",
    );
    // where broadcasts condition, then each side; masked_fill the mask, then the tensor
    // (TensorIterator's operand order and expand_outplace(mask, self)).
    has(
        t(&[3]).where_cond(&t(&[4]), &t(&[4])),
        "The size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 0",
    );
    has(
        t(&[1]).where_cond(&t(&[2]), &t(&[5])),
        "The size of tensor a (2) must match the size of tensor b (5) at non-singleton dimension 0",
    );
    has(
        t(&[2, 3]).masked_fill(&t(&[4, 1]), 0.0),
        "The size of tensor a (4) must match the size of tensor b (2) at non-singleton dimension 0",
    );
    let dst = t(&[1]).broadcast_to(&[3, 3]).unwrap();
    has(
        wgtensor::no_grad(|| dst.copy_from(&t(&[3, 3]))),
        "more than one element of the written-to tensor refers to a single memory location",
    );
    // copy_'s broadcast refusals (test_copy_broadcast's cases).
    has(
        t(&[5, 6]).copy_from(&t(&[30])),
        "The size of tensor a (6) must match the size of tensor b (30) at non-singleton \
         dimension 1",
    );
    has(
        t(&[3]).copy_from(&t(&[1, 3])),
        "output with shape [3] doesn't match the broadcast shape [1, 3]",
    );
}

/// Index and view errors PyTorch's tests match by their words (error_inputs_gather,
/// error_inputs_scatter_and_scatter_add, test_dim_function_empty, permute's and one_hot's
/// checks); an empty index of any dtype is accepted, as there.
#[test]
fn index_and_view_errors_in_pytorch_words() {
    let i = |v: &[i32], s: &[usize]| Tensor::from_slice(dev(), v, s).unwrap();
    has(
        t(&[1, 1]).gather(1, &i(&[0, 0, 1, 0], &[2, 2])),
        "Size does not match at dimension 0 expected index [2, 2] to be no larger than self \
         [1, 1] apart from dimension 1",
    );
    has(
        t(&[2, 2]).gather(0, &i(&[0, 0], &[2])),
        "Index tensor must have the same number of dimensions as input tensor",
    );
    has(
        t(&[3, 5, 3]).scatter_add(0, &i(&[0, 1], &[2]), &t(&[2, 5, 3])),
        "Index tensor must have the same number of dimensions as self tensor",
    );
    has(
        t(&[3, 5]).scatter_add(0, &i(&[0, 1], &[1, 2]), &t(&[2])),
        "Index tensor must have the same number of dimensions as src tensor",
    );
    // A 0-d self counts as 1-d (test_scatter_add_non_unique_index's neighbours).
    has(
        t(&[]).scatter_add(0, &i(&[0], &[1]), &t(&[1, 1])),
        "Index tensor must have the same number of dimensions as src tensor",
    );
    has(
        t(&[3, 5]).scatter_add(0, &i(&[0; 6], &[2, 3]), &t(&[2, 2])),
        "Expected index [2, 3] to be no larger than self [3, 5] apart from dimension 0 and to \
         be no larger size than src [2, 2]",
    );
    // An empty index skips the dtype check (PyTorch's empty uint8 index).
    let empty_f = Tensor::zeros(dev(), &[0], DType::F32).unwrap();
    assert_eq!(t(&[3]).gather(0, &empty_f).unwrap().shape(), &[0]);
    let kept = t(&[3]).scatter_add(0, &empty_f, &t(&[2])).unwrap();
    assert_eq!(kept.to_vec::<f32>().unwrap(), vec![1.0; 3]);
    assert!(t(&[3]).gather(0, &t(&[1])).is_err());
    assert!(t(&[3]).index_select(0, &empty_f).is_err());
    let scalar = Tensor::full(dev(), &[], 1.0, DType::F32).unwrap();
    has(
        scalar.index_select(0, &i(&[0, 0], &[2])),
        "index_select(): Index to scalar can have only 1 value, got 2 value(s)",
    );
    // An empty self of rank > 1 with an empty indexed dim: refused at once
    // (test_dim_function_empty); an empty index, or another dim, is fine.
    has(
        t(&[0, 3]).index_select(0, &i(&[0, 1], &[2])),
        "index_select(): self indexing axis dim should be positive",
    );
    assert_eq!(
        t(&[0, 3]).index_select(0, &i(&[], &[0])).unwrap().shape(),
        &[0, 3]
    );
    assert_eq!(
        t(&[0, 3])
            .index_select(1, &i(&[0, 2], &[2]))
            .unwrap()
            .shape(),
        &[0, 2]
    );
    // Permutations.
    let x = t(&[2, 3, 4]);
    has(
        x.permute(&[0, 1]),
        "number of dimensions in the tensor input does not match the length of the desired \
         ordering of dimensions i.e. input.dim() = 3 is not equal to len(dims) = 2",
    );
    has(
        x.permute(&[0, 0, 1]),
        "permute(): duplicate dims are not allowed.",
    );
    has(
        x.permute(&[0, 1, 3]),
        "Dimension out of range (expected to be in range of [-3, 2], but got 3)",
    );
    // 0-d tensors and dim-less reductions over nothing.
    has(
        scalar.narrow(0, 0, 1),
        "narrow() cannot be applied to a 0-dim tensor.",
    );
    has(
        scalar.split(1, 0),
        "split expects at least a 1-dimensional tensor",
    );
    has(
        scalar.chunk(1, 0),
        "chunk expects at least a 1-dimensional tensor",
    );
    let none = Tensor::zeros(dev(), &[0, 3], DType::F32).unwrap();
    has(
        none.argmax_all(),
        "argmax(): Expected reduction dim to be specified for input.numel() == 0.",
    );
    has(
        none.argmin_all(),
        "argmin(): Expected reduction dim to be specified for input.numel() == 0.",
    );
    has(
        Tensor::zeros(dev(), &[0], DType::I32).unwrap().one_hot(0),
        "Can not infer total number of classes from empty tensor.",
    );
    // Found on the device (a private one: the error surfaces at its next readback).
    let own = Device::new().unwrap();
    let oi = |v: &[i32]| Tensor::from_slice(&own, v, &[v.len()]).unwrap();
    let neg = oi(&[1, -1]).one_hot(3).unwrap();
    has(neg.to_vec::<i32>(), "Class values must be non-negative.");
    let big = oi(&[1, 3]).one_hot(3).unwrap();
    has(
        big.to_vec::<i32>(),
        "Class values must be smaller than num_classes.",
    );
    let rows = Tensor::from_slice(&own, &[1.0f32, 2.0], &[2]).unwrap();
    has(
        rows.index_select(0, &oi(&[5])).unwrap().to_vec::<f32>(),
        "index out of range in self",
    );
}

/// Index ops' dtype and rank errors in PyTorch's words (error_inputs_gather,
/// error_inputs_scatter_and_scatter_add, error_inputs_index_select match them).
#[test]
fn index_errors_in_pytorch_words() {
    let x = t(&[3, 2]);
    let f_idx = t(&[1, 2]);
    has(
        x.gather(0, &f_idx),
        "gather(): Expected dtype int32/int64 for index",
    );
    has(
        x.scatter_add(0, &f_idx, &t(&[1, 2])),
        "scatter(): Expected dtype int32/int64 for index",
    );
    has(
        x.index_select(0, &t(&[2])),
        "index_select(): Expected dtype int32 or int64 for index",
    );
    let i2 = Tensor::zeros(dev(), &[1, 2], DType::I32).unwrap();
    has(
        x.index_select(0, &i2),
        "index_select(): Index is supposed to be a vector",
    );
    // The rank before the dtype (index_select_out's order), for a scalar self too.
    has(
        x.index_select(0, &t(&[1, 2])),
        "index_select(): Index is supposed to be a vector",
    );
    has(
        t(&[]).index_select(0, &t(&[1, 1])),
        "index_select(): Index is supposed to be a vector",
    );
    // The dim is wrapped before any of these checks.
    for r in [
        x.index_select(5, &t(&[1, 2])),
        x.scatter_add(5, &f_idx, &t(&[1, 2])),
    ] {
        has(r, "Dimension out of range");
    }
    // scatter_gather_dtype_check: the index's dtype, then self's against src's.
    let xi = x.to_dtype(DType::I32).unwrap();
    has(
        xi.scatter_add(0, &i2, &t(&[1, 2])),
        "scatter(): Expected self.dtype to be equal to src.dtype",
    );
    has(
        xi.scatter_add(0, &f_idx, &t(&[1, 2])),
        "scatter(): Expected dtype int32/int64 for index",
    );
    has(
        t(&[2]).one_hot(3),
        "one_hot is only applicable to index tensor.",
    );
}

/// max_pool1d's errors as error_inputs_max_pool1d matches them (check_max_pool1d's order
/// and words; with indices the 2-D checks' words, as PyTorch's 2-D path).
#[test]
fn max_pool1d_errors_in_pytorch_words() {
    use wgtensor::ops::{max_pool1d, max_pool1d_with_indices, MaxPool1dOptions};
    let o = |k: usize, s: Option<usize>, p: usize, d: usize| MaxPool1dOptions {
        stride: s,
        padding: p,
        dilation: d,
        ..MaxPool1dOptions::new(k)
    };
    let rank = "Expected 2D or 3D (batch mode) tensor with optional 0 dim batch size for input";
    for shape in [&[][..], &[0], &[0, 10], &[1, 10, 0]] {
        has(max_pool1d(&t(shape), &o(1, None, 0, 1)), rank);
    }
    has(
        max_pool1d(&t(&[2, 0, 4]), &o(2, None, 0, 1)),
        "Expected 2D or 3D (batch mode) tensor with optional 0 dim batch size for input, but \
         got:[2, 0, 4]",
    );
    // The pools PyTorch runs as 2-D ones over [.., 1, L]: checkDimRange's words for the rank,
    // the 2-D check (the lifted shape) for an empty dim.
    use wgtensor::ops::{avg_pool1d, AvgPool1dOptions};
    has(
        avg_pool1d(&t(&[1, 2, 3, 4]), &AvgPool1dOptions::new(2)),
        "Expected 2 to 3 dimensions, but got 4-dimensional tensor for argument #1 'self' (while \
         checking arguments for avg_pool1d)",
    );
    has(
        max_pool1d_with_indices(&t(&[4]), &o(2, None, 0, 1)),
        "Expected 2 to 3 dimensions, but got 1-dimensional tensor for argument #1 'self' (while \
         checking arguments for max_pool1d)",
    );
    has(
        avg_pool1d(&t(&[2, 3, 0]), &AvgPool1dOptions::new(2)),
        "Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input, but \
         got:[2, 3, 1, 0]",
    );
    let x = t(&[0, 1, 49]);
    let cases: [(&[usize], MaxPool1dOptions, &str); 5] = [
        (
            &[3, 3, 3],
            o(1, Some(0), 0, 1),
            "stride must be greater than zero, but got 0",
        ),
        (
            &[3, 3, 3],
            o(1, Some(1), 0, 0),
            "dilation must be greater than zero, but got 0",
        ),
        (
            &[2, 2, 2],
            o(5, Some(1), 0, 1),
            "Invalid computed output size: -2",
        ),
        (
            &[0, 1, 49],
            o(0, None, 0, 1),
            "kernel_size must be greater than zero",
        ),
        (
            &[0, 1, 49],
            o(2, Some(0), 0, 1),
            "stride must be greater than zero",
        ),
    ];
    for (shape, opts, want) in cases {
        has(max_pool1d(&t(shape), &opts), want);
    }
    // A window past any size (dilation (kernel - 1) beyond i128): an error, not an overflow.
    has(
        max_pool1d(&t(&[1, 1, 4]), &o(usize::MAX, Some(1), 0, usize::MAX)),
        "max_pool1d() Invalid computed output size: -",
    );
    has(
        max_pool1d(&x, &o(2, Some(50), 4, 1)),
        "max_pool1d() padding should be at most half of kernel size, but got padding=4 and kernel_size=2",
    );
    has(
        max_pool1d_with_indices(&x, &o(2, Some(50), 4, 1)),
        "pad should be at most half of effective kernel size",
    );
    has(
        max_pool1d_with_indices(&x, &o(3, Some(1), 3, 2)),
        "pad should be at most half of effective kernel size",
    );
    // Valid options still pool (ceil_mode's last window rule included).
    let y = max_pool1d(
        &Tensor::from_slice(dev(), &[1.0f32, 5.0, 2.0, 4.0, 3.0], &[1, 1, 5]).unwrap(),
        &MaxPool1dOptions {
            ceil_mode: true,
            ..MaxPool1dOptions::new(2)
        },
    )
    .unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![5.0, 4.0, 3.0]);
}

/// Products in PyTorch's words and order: addmm's checked alpha / beta (never applied over
/// K = 0), dot's dtype sentence for two vectors, mm's shapes before its dtypes, Linear's addmm
/// dtype checks before its shapes, and embedding's checkScalarTypes sentence.
#[test]
fn product_arguments_follow_pytorch() {
    let (a, b) = (t(&[2, 3]), t(&[3, 4]));
    fn o(alpha: f64, beta: f64, c: Option<&Tensor>) -> GemmOptions<'_> {
        GemmOptions {
            alpha,
            beta,
            c,
            ..Default::default()
        }
    }
    has(
        gemm(&a, &b, &o(1e39, 1.0, None)),
        "value cannot be converted to type float without overflow",
    );
    let c = t(&[2, 4]);
    has(
        gemm(&a, &b, &o(1.0, -1e39, Some(&c))),
        "value cannot be converted to type float without overflow",
    );
    // Without a C, beta is never used; over K = 0 alpha neither (inf * 0 would be NaN).
    assert!(gemm(&a, &b, &o(1.0, 1e39, None)).is_ok());
    let k0 = gemm(&t(&[2, 0]), &t(&[0, 3]), &o(f64::INFINITY, 1.0, None)).unwrap();
    assert_eq!(k0.to_vec::<f32>().unwrap(), vec![0.0; 6]);

    // The dtype words need a second float dtype (f16).
    if dev().supports_f16() {
        let h = |s: &[usize]| t(s).to_dtype(DType::F16).unwrap();
        has(
            matmul(&t(&[3]), &h(&[3])),
            "dot : expected both vectors to have same dtype, but found Float and Half",
        );
        has(
            matmul(&t(&[2, 3]), &h(&[4, 5])),
            "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)",
        );
        has(
            matmul(&t(&[2, 3]), &h(&[3, 5])),
            "expected m1 and m2 to have the same dtype",
        );
        // The words of the op PyTorch routes the pair to: mv, bmm, mm (a folded batch).
        has(
            matmul(&t(&[4, 2, 3]), &h(&[3])),
            "addmv input tensors must have the same dtype, but got Half, Float, and Half",
        );
        has(
            matmul(&t(&[2, 3]), &h(&[4, 3, 5])),
            "expected scalar type Float but found Half",
        );
        has(
            matmul(&t(&[4, 2, 3]), &h(&[3, 5])),
            "expected m1 and m2 to have the same dtype, but got: float != c10::Half",
        );

        let lin = wgtensor::nn::Linear::new(dev(), 4, 5, true).unwrap();
        use wgtensor::nn::Forward;
        // A batched product's shapes come first too: K (bmm's meta), and the batch dims even
        // where K agrees (matmul's infer_size).
        assert!(!msg(&matmul(&t(&[2, 2, 3]), &h(&[2, 4, 5])).unwrap_err()).contains("dtype"));
        has(
            matmul(&t(&[2, 2, 3]), &h(&[3, 3, 5])),
            "must match the size of tensor b (3) at non-singleton dimension 0",
        );
        // A contiguous input of any rank is flattened to addmm, so dtypes first there too.
        for x in [h(&[2, 4]), h(&[2, 3]), h(&[2, 2, 3]), h(&[3])] {
            has(
                lin.forward(&x),
                "mat1 and mat2 must have the same dtype, but got Half and Float",
            );
        }
    }

    let w = t(&[4, 2]);
    has(
        wgtensor::ops::embedding(&t(&[3]), &w, None),
        "Expected tensor for argument #1 'indices' to have one of the following scalar types: \
         Long, Int; but got torch.FloatTensor instead (while checking arguments for embedding)",
    );
}

/// from_slice names a count mismatch in reshape's words; wgpu_buffer refuses a byte range
/// wgpu cannot copy or bind (an odd number of f16 values); an empty batch of a transposed
/// convolution still refuses a weight on another device.
#[test]
fn api_edges_in_pytorch_words() {
    has(
        Tensor::from_slice(dev(), &[1.0f32; 3], &[2, 2]),
        "shape '[2, 2]' is invalid for input of size 3",
    );
    // The dtype before the count (the tensor is made before its reshape).
    let no_f16 = Device::with_options(DeviceOptions {
        disable_f16: true,
        ..DeviceOptions::default()
    })
    .unwrap();
    let e = Tensor::from_slice(&no_f16, &[f16::ONE; 3], &[2, 2]).unwrap_err();
    assert!(matches!(e, Error::MissingFeature { .. }), "{e:?}");
    if dev().supports_f16() {
        let h = Tensor::from_slice(dev(), &[f16::ONE; 3], &[3]).unwrap();
        has(h.wgpu_buffer(), "not a multiple of 4");
        let h2 = Tensor::from_slice(dev(), &[f16::ONE; 4], &[4]).unwrap();
        assert_eq!(h2.wgpu_buffer().unwrap().2, 8);
    }
    let other = Device::new().unwrap();
    let w = Tensor::zeros(&other, &[2, 4, 3, 3], DType::F32).unwrap();
    let x = t(&[0, 2, 3, 3]);
    let e = wgtensor::ops::conv_transpose2d(&x, &w, None, &Default::default()).unwrap_err();
    assert!(matches!(e, Error::DeviceMismatch { .. }), "{e:?}");
}

/// Losses in PyTorch's order: BCE's size sentence before its dtype check, cross_entropy's
/// label_smoothing before a float target mistaken for class indices, nll's words for a 0-d
/// input and, for inputs of rank 3, the target size before a tracked weight; an integer
/// input of the regression losses computes in the float target's dtype; nll keeps its input
/// for the version check, as NllLossBackward saves it.
#[test]
fn losses_in_pytorch_order() {
    use wgtensor::ops::{
        binary_cross_entropy, cross_entropy, l1_loss, mse_loss, nll_loss, CrossEntropyOptions,
        NllLossOptions, Reduction,
    };
    fn o15() -> CrossEntropyOptions<'static> {
        CrossEntropyOptions {
            label_smoothing: 1.5,
            ..Default::default()
        }
    }
    // An i32 target of another size: the size sentence first (F.binary_cross_entropy's).
    let yi = Tensor::zeros(dev(), &[25, 1], DType::I32).unwrap();
    has(
        binary_cross_entropy(&t(&[25]), &yi, None, Reduction::Mean),
        "Using a target size (torch.Size([25, 1])) that is different to the input size",
    );
    // Any target of another shape takes PyTorch's class-index branch (smoothing first), and
    // a 0-d input its log_softmax over dim 1.
    for y in [t(&[2, 4]), t(&[3])] {
        has(
            cross_entropy(&t(&[2, 3]), &y, &o15()),
            "label_smoothing must be between 0.0 and 1.0. Got: 1.5",
        );
    }
    has(
        cross_entropy(
            &t(&[]),
            &Tensor::zeros(dev(), &[2], DType::I32).unwrap(),
            &o15(),
        ),
        "Dimension out of range (expected to be in range of [-1, 0], but got 1)",
    );
    has(
        cross_entropy(&t(&[2, 3]), &t(&[2]), &o15()),
        "label_smoothing must be between 0.0 and 1.0. Got: 1.5",
    );
    let ids = |shape: &[usize]| Tensor::zeros(dev(), shape, DType::I32).unwrap();
    has(
        nll_loss(&t(&[]), &ids(&[]), &NllLossOptions::default()),
        "Expected 1 or more dimensions (got 0)",
    );
    let w = t(&[3]).requires_grad().unwrap();
    let o = NllLossOptions {
        weight: Some(&w),
        ..Default::default()
    };
    has(
        nll_loss(&t(&[2, 3, 4]), &ids(&[2, 5]), &o),
        "Expected target size [2, 4], got [2, 5]",
    );
    // F.smooth_l1_loss and F.huber_loss broadcast input and target before their kernels
    // check beta and delta.
    use wgtensor::ops::{huber_loss, smooth_l1_loss};
    for r in [
        smooth_l1_loss(&t(&[3]), &t(&[2]), Reduction::Mean, -1.0),
        huber_loss(&t(&[3]), &t(&[2]), Reduction::Mean, -1.0),
    ] {
        has(
            r,
            "target shape [2] does not broadcast with input shape [3]",
        );
    }
    has(
        huber_loss(&t(&[3]), &t(&[3]), Reduction::Mean, -1.0),
        "huber_loss does not support non-positive values for delta",
    );
    // binary_cross_entropy expands its weight with the target, then the autograd layer
    // refuses a tracked one, then the kernel one that grows the input.
    let (p, w31) = (t(&[3]).sigmoid().unwrap(), t(&[3, 1]));
    has(
        binary_cross_entropy(
            &p,
            &p,
            Some(&t(&[3, 1]).requires_grad().unwrap()),
            Reduction::Mean,
        ),
        "is not differentiable with respect to argument 'weight'",
    );
    has(
        binary_cross_entropy(&p, &p, Some(&w31), Reduction::Mean),
        "weight of shape [3, 1] does not broadcast to the input's shape [3]",
    );
    // binary_cross_entropy_with_logits dispatches log_sigmoid on the input's dtype first.
    use wgtensor::ops::{binary_cross_entropy_with_logits, BceWithLogitsOptions};
    let w2 = t(&[2]);
    let bo = BceWithLogitsOptions {
        weight: Some(&w2),
        ..Default::default()
    };
    has(
        binary_cross_entropy_with_logits(&ids(&[3]), &t(&[3]), &bo),
        "\"log_sigmoid_cpu\" not implemented for 'Int'",
    );
    let e = l1_loss(&ids(&[3]), &ids(&[3]), Reduction::Sum).unwrap_err();
    assert!(e.to_string().starts_with("l1_loss:"), "{e}");

    let xi = Tensor::from_slice(dev(), &[1i32, 2], &[2]).unwrap();
    let y = Tensor::from_slice(dev(), &[1.5f32, 2.5], &[2]).unwrap();
    assert_eq!(
        mse_loss(&xi, &y, Reduction::Mean).unwrap().item().unwrap(),
        0.25
    );
    assert_eq!(
        l1_loss(&xi, &y, Reduction::Sum).unwrap().item().unwrap(),
        1.0
    );

    let logp = t(&[2, 3]).requires_grad().unwrap();
    let l = nll_loss(&logp, &ids(&[2]), &NllLossOptions::default()).unwrap();
    wgtensor::no_grad(|| logp.copy_from(&t(&[2, 3]))).unwrap();
    has(l.backward(), "modified by an inplace operation");
}

/// SDPA with enable_gqa reads each operand's size(-3) (q's first) before any size check, as
/// PyTorch's math path (the only one below 4-D).
#[test]
fn sdpa_gqa_needs_three_dims() {
    use wgtensor::ops::{scaled_dot_product_attention, SdpaOptions};
    let o = SdpaOptions {
        enable_gqa: true,
        ..Default::default()
    };
    has(
        scaled_dot_product_attention(&t(&[4, 8]), &t(&[5, 6]), &t(&[5, 6]), &o),
        "Dimension out of range (expected to be in range of [-2, 1], but got -3)",
    );
    assert!(
        scaled_dot_product_attention(&t(&[2, 4, 8]), &t(&[2, 5, 8]), &t(&[2, 5, 8]), &o).is_ok()
    );
    // The operands' dtypes come before the heads' check (validate_sdpa_input first).
    if dev().supports_f16() {
        let k = t(&[3, 5, 8]).to_dtype(DType::F16).unwrap();
        let e = scaled_dot_product_attention(&t(&[4, 4, 8]), &k, &t(&[2, 5, 8]), &o).unwrap_err();
        assert!(matches!(e, Error::DType { .. }), "{e}");
    }
}

/// SDPA adds the mask to the scores of q and k in place: a mask that fits only through v's
/// extra batch dims is refused (PyTorch's "doesn't match the broadcast shape").
#[test]
fn sdpa_mask_fits_the_scores_of_q_and_k() {
    use wgtensor::ops::{scaled_dot_product_attention, AttnMask, SdpaOptions};
    let (q, k, v) = (t(&[1, 3, 8]), t(&[1, 5, 8]), t(&[2, 5, 8]));
    let wide = t(&[2, 3, 5]);
    let o = SdpaOptions {
        attn_mask: Some(AttnMask::Additive(&wide)),
        ..Default::default()
    };
    has(
        scaled_dot_product_attention(&q, &k, &v, &o),
        "does not broadcast to the scores' shape [1, 3, 5]",
    );
    let fits = t(&[1, 3, 5]);
    let o = SdpaOptions {
        attn_mask: Some(AttnMask::Additive(&fits)),
        ..Default::default()
    };
    let y = scaled_dot_product_attention(&q, &k, &v, &o).unwrap();
    assert_eq!(y.shape(), &[2, 3, 8]);
}
