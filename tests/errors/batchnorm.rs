//! Batch-norm argument errors.

use super::*;
use wgtensor::ops::{
    batch_norm_backward, batch_norm_inference, batch_norm_train, Activation, BatchNormOptions,
    BatchNormSaved, BatchNormState,
};

const TRAIN: &str = "batch_norm_train";
const INFER: &str = "batch_norm_inference";
const BACKWARD: &str = "batch_norm_backward";

fn shape_err(e: &Error, op: &str, parts: &[&str]) {
    assert!(matches!(e, Error::Shape { op: o, .. } if *o == op), "{e:?}");
    for p in parts {
        assert!(msg(e).contains(p), "{e} should mention {p}");
    }
}

#[test]
fn channel_size_mismatch_names_the_values() {
    let x = t(&[2, 3, 4]);
    let (c3, c4) = (t(&[3]), t(&[4]));
    let e = batch_norm_train(
        &x,
        None,
        &BatchNormOptions {
            weight: Some(&c4),
            ..Default::default()
        },
    )
    .unwrap_err();
    shape_err(&e, TRAIN, &["weight (gamma)", "[4]", "[3]", "[2, 3, 4]"]);
    // PyTorch's check_dims_match_num_input_features words first.
    assert!(
        msg(&e).contains("weight should contain 3 elements not 4"),
        "{e}"
    );
    let e = batch_norm_train(
        &x,
        None,
        &BatchNormOptions {
            weight: Some(&c3),
            bias: Some(&c4),
            ..Default::default()
        },
    )
    .unwrap_err();
    shape_err(&e, TRAIN, &["bias (beta)", "[4]", "[3]"]);
    let mut st = BatchNormState::from_tensors(t(&[4]), t(&[3]), Some(0.1));
    let e = batch_norm_train(&x, Some(&mut st), &BatchNormOptions::default()).unwrap_err();
    shape_err(&e, TRAIN, &["running_mean", "[4]", "[3]"]);
    assert!(
        msg(&e).contains("running_mean should contain 3 elements not 4"),
        "{e}"
    );
    // _batch_norm_impl_index's order: every count (the running statistics before the
    // weight), then the dtypes.
    let mut st = BatchNormState::from_tensors(
        Tensor::zeros(dev(), &[3], DType::I32).unwrap(),
        t(&[3]),
        Some(0.1),
    );
    let e = batch_norm_train(
        &x,
        Some(&mut st),
        &BatchNormOptions {
            weight: Some(&c4),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(
        msg(&e).contains("weight should contain 3 elements not 4"),
        "{e}"
    );
    // The running statistics before the weight.
    let mut st = BatchNormState::from_tensors(t(&[4]), t(&[3]), Some(0.1));
    let e = batch_norm_train(
        &x,
        Some(&mut st),
        &BatchNormOptions {
            weight: Some(&c4),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(
        msg(&e).contains("running_mean should contain 3 elements not 4"),
        "{e}"
    );
    let mut st = BatchNormState::from_tensors(t(&[3]), t(&[3, 1]), Some(0.1));
    let e = batch_norm_train(&x, Some(&mut st), &BatchNormOptions::default()).unwrap_err();
    shape_err(&e, TRAIN, &["running_var", "[3, 1]", "[3]"]);
    assert_eq!(st.num_batches_tracked, 0);

    let e = batch_norm_inference(&x, &c4, &c3, &BatchNormOptions::default()).unwrap_err();
    shape_err(&e, INFER, &["running_mean", "[4]", "[3]"]);
    let e = batch_norm_inference(
        &x,
        &c3,
        &c3,
        &BatchNormOptions {
            bias: Some(&c4),
            activation: Activation::Relu,
            ..Default::default()
        },
    )
    .unwrap_err();
    shape_err(&e, INFER, &["bias (beta)", "[4]"]);

    let e = BatchNormSaved::new(c4.clone(), c3.clone()).unwrap_err();
    shape_err(&e, "BatchNormSaved::new", &["[4]", "[3]"]);
    let e = batch_norm_backward(
        &x,
        &x,
        None,
        &BatchNormSaved::new(c4.clone(), c4.clone()).unwrap(),
    )
    .unwrap_err();
    shape_err(&e, BACKWARD, &["saved_mean", "[4]", "[3]"]);
    let e = batch_norm_backward(
        &x,
        &x,
        Some(&c4),
        &BatchNormSaved::new(c3.clone(), c3.clone()).unwrap(),
    )
    .unwrap_err();
    shape_err(&e, BACKWARD, &["weight (gamma)", "[4]"]);
    let e = batch_norm_backward(
        &t(&[2, 3, 5]),
        &x,
        None,
        &BatchNormSaved::new(c3.clone(), c3.clone()).unwrap(),
    )
    .unwrap_err();
    shape_err(&e, BACKWARD, &["grad_output", "[2, 3, 5]", "[2, 3, 4]"]);
}

#[test]
fn training_needs_more_than_one_value_per_channel() {
    for shape in [&[1usize, 3][..], &[1, 3, 1], &[1, 3, 1, 1]] {
        let e = batch_norm_train(&t(shape), None, &BatchNormOptions::default()).unwrap_err();
        shape_err(
            &e,
            TRAIN,
            &[
                "Expected more than 1 value per channel when training",
                &format!("got input size torch.Size({shape:?})"),
            ],
        );
    }
    // _verify_batch_size runs before the rank check: a 1-D input of one value fails there.
    let e = batch_norm_train(&t(&[1]), None, &BatchNormOptions::default()).unwrap_err();
    shape_err(&e, TRAIN, &["got input size torch.Size([1])"]);
    // Inference and backward are defined for one value per channel.
    let x = t(&[1, 3, 1, 1]);
    let c = t(&[3]);
    batch_norm_inference(&x, &c, &c, &BatchNormOptions::default()).unwrap();
    batch_norm_backward(
        &x,
        &x,
        Some(&c),
        &BatchNormSaved::new(c.clone(), c.clone()).unwrap(),
    )
    .unwrap();
}

#[test]
fn rank_below_two() {
    let c = t(&[3]);
    let e = batch_norm_train(&t(&[3]), None, &BatchNormOptions::default()).unwrap_err();
    shape_err(&e, TRAIN, &["rank >= 2", "[3]"]);
    let e = batch_norm_inference(&t(&[]), &c, &c, &BatchNormOptions::default()).unwrap_err();
    shape_err(&e, INFER, &["rank >= 2", "[]"]);
    let e = batch_norm_backward(
        &t(&[3]),
        &t(&[3]),
        None,
        &BatchNormSaved::new(c.clone(), c.clone()).unwrap(),
    )
    .unwrap_err();
    shape_err(&e, BACKWARD, &["rank >= 2"]);
}

#[test]
fn dtype_mismatch() {
    let x = t(&[2, 3]);
    let c = t(&[3]);
    if dev().supports_f16() {
        let h = Tensor::from_slice(dev(), &[f16::ONE; 3], &[3]).unwrap();
        let want = |op| Error::DType {
            op,
            expected: DType::F32,
            got: DType::F16,
        };
        let e = batch_norm_train(
            &x,
            None,
            &BatchNormOptions {
                weight: Some(&h),
                ..Default::default()
            },
        )
        .unwrap_err();
        assert_eq!(e, want(TRAIN));
        let mut st = BatchNormState::from_tensors(c.clone(), h.clone(), None);
        let e = batch_norm_train(&x, Some(&mut st), &BatchNormOptions::default()).unwrap_err();
        assert_eq!(e, want(TRAIN));
        let e = batch_norm_inference(&x, &h, &c, &BatchNormOptions::default()).unwrap_err();
        assert_eq!(e, want(INFER));
        // Saved statistics are always f32, also for f16 inputs.
        let e = BatchNormSaved::new(h.clone(), c.clone()).unwrap_err();
        assert_eq!(
            e,
            Error::DType {
                op: "BatchNormSaved::new",
                expected: DType::F32,
                got: DType::F16
            }
        );
        let hx = Tensor::from_slice(dev(), &[f16::ONE; 6], &[2, 3]).unwrap();
        let e = batch_norm_backward(
            &hx,
            &x,
            None,
            &BatchNormSaved::new(c.clone(), c.clone()).unwrap(),
        )
        .unwrap_err();
        assert_eq!(e, want(BACKWARD));
        // An f16 input with an f32 weight is PyTorch's mixed type: computed, f16 out.
        let out = batch_norm_train(
            &hx,
            None,
            &BatchNormOptions {
                weight: Some(&c),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(out.y.dtype(), DType::F16);
    } else {
        eprintln!("skipping batch-norm dtype mismatches: adapter lacks SHADER_F16");
    }
}

#[test]
fn invalid_arguments() {
    let x = t(&[2, 3]);
    let c = t(&[3]);
    // F.batch_norm's rule and words: positive in training, non-negative in evaluation.
    let o = |eps| BatchNormOptions {
        eps,
        ..Default::default()
    };
    for eps in [-1e-5, 0.0] {
        let e = batch_norm_train(&x, None, &o(eps)).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { op: TRAIN, .. }),
            "{e:?}"
        );
        let want = if eps == 0.0 { "0.0" } else { "-1e-05" };
        let words = format!("batch_norm eps must be positive during training, but got {want}");
        assert!(msg(&e).contains(&words), "{e}");
    }
    let e = batch_norm_inference(&x, &c, &c, &o(-1.0)).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: INFER, .. }),
        "{e:?}"
    );
    assert!(
        msg(&e).contains("batch_norm eps must be non-negative, but got -1.0"),
        "{e}"
    );
    // F.batch_norm checks eps before the kernel checks the input's rank (a 1-D input).
    let x1 = t(&[3]);
    let e = batch_norm_inference(&x1, &c, &c, &o(-1.0)).unwrap_err();
    assert!(msg(&e).contains("eps must be non-negative"), "{e}");
    let e = batch_norm_train(&x1, None, &o(-1.0)).unwrap_err();
    assert!(
        msg(&e).contains("eps must be positive during training"),
        "{e}"
    );
    // eps 0 in evaluation: a zero running variance gives inf (1 / sqrt(0), as PyTorch), a
    // NaN eps NaN, an infinite one a zero invstd (the bias alone).
    let xs = Tensor::from_slice(dev(), &[1.0f32, -1.0], &[2, 1]).unwrap();
    let (z, one) = (
        t(&[1]).mul_scalar(0.0).unwrap(),
        t(&[1]).mul_scalar(0.0).unwrap().add_scalar(1.0).unwrap(),
    );
    let y = batch_norm_inference(&xs, &z, &z, &o(0.0)).unwrap();
    assert_eq!(
        y.to_vec::<f32>().unwrap(),
        vec![f32::INFINITY, f32::NEG_INFINITY]
    );
    let y = batch_norm_inference(&xs, &z, &one, &o(f64::NAN)).unwrap();
    assert!(y.to_vec::<f32>().unwrap().iter().all(|v| v.is_nan()));
    let y = batch_norm_inference(&xs, &z, &one, &o(1e300)).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![0.0, 0.0]);
    let y = batch_norm_train(&xs, None, &o(f64::INFINITY)).unwrap().y;
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![0.0, 0.0]);
    // A subnormal eps over a zero variance: 1 / sqrt(1e-40) = 1e20 (rsqrt_f reads the
    // subnormal from its bits, where inverseSqrt may flush it). An adapter whose additions
    // flush subnormals (WGSL allows it) has 0 + eps = 0 before that, and inf is right there.
    let flushes = t(&[1])
        .mul_scalar(0.0)
        .unwrap()
        .add_scalar(1e-40)
        .unwrap()
        .to_vec::<f32>()
        .unwrap()[0]
        == 0.0;
    let y = batch_norm_inference(&xs, &z, &z, &o(1e-40)).unwrap();
    let want = 1.0 / ((1e-40f32) as f64).sqrt();
    for (g, w) in y.to_vec::<f32>().unwrap().into_iter().zip([want, -want]) {
        let inf = flushes && g.is_infinite() && (g > 0.0) == (w > 0.0);
        assert!(inf || (g as f64 - w).abs() <= 1e-5 * want, "{g} vs {w}");
    }
    let mut st = BatchNormState::from_tensors(t(&[3]), t(&[3]), Some(f64::NAN));
    let e = batch_norm_train(&x, Some(&mut st), &BatchNormOptions::default()).unwrap_err();
    assert!(msg(&e).contains("momentum"), "{e}");
    // Running statistics are written in place: no repeated elements, no overlap with the
    // input, the parameters or each other.
    let mut st = BatchNormState::from_tensors(t(&[1]).broadcast_to(&[3]).unwrap(), t(&[3]), None);
    let e = batch_norm_train(&x, Some(&mut st), &BatchNormOptions::default()).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: TRAIN, .. }),
        "{e:?}"
    );
    assert!(msg(&e).contains("running_mean"), "{e}");
    let flat = t(&[9]);
    let rm = flat.narrow(0, 0, 3).unwrap();
    let rv = flat.narrow(0, 2, 3).unwrap();
    let mut st = BatchNormState::from_tensors(rm.clone(), rv, None);
    let e = batch_norm_train(&x, Some(&mut st), &BatchNormOptions::default()).unwrap_err();
    assert!(msg(&e).contains("must not overlap running_var"), "{e}");
    let g = flat.narrow(0, 3, 3).unwrap();
    let mut st = BatchNormState::from_tensors(flat.narrow(0, 6, 3).unwrap(), g.clone(), None);
    let e = batch_norm_train(
        &x,
        Some(&mut st),
        &BatchNormOptions {
            weight: Some(&g),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(msg(&e).contains("must not overlap weight (gamma)"), "{e}");
    let big = t(&[12]);
    let xv = big.narrow(0, 0, 6).unwrap().reshape(&[2, 3]).unwrap();
    let mut st = BatchNormState::from_tensors(big.narrow(0, 3, 3).unwrap(), t(&[3]), None);
    let e = batch_norm_train(&xv, Some(&mut st), &BatchNormOptions::default()).unwrap_err();
    assert!(msg(&e).contains("must not overlap the input"), "{e}");
    // Disjoint views of one flat parameter buffer are fine.
    let mut st = BatchNormState::from_tensors(rm, flat.narrow(0, 3, 3).unwrap(), None);
    let g = flat.narrow(0, 6, 3).unwrap();
    batch_norm_train(
        &x,
        Some(&mut st),
        &BatchNormOptions {
            weight: Some(&g),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(st.num_batches_tracked, 1);
}

#[test]
fn device_mismatch() {
    let other = Device::new().unwrap();
    let x = t(&[2, 3]);
    let c = Tensor::from_slice(&other, &[1.0f32; 3], &[3]).unwrap();
    let e = batch_norm_train(
        &x,
        None,
        &BatchNormOptions {
            weight: Some(&c),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert_eq!(e, Error::DeviceMismatch { op: TRAIN });
    let e = batch_norm_inference(&x, &c, &c, &BatchNormOptions::default()).unwrap_err();
    assert_eq!(e, Error::DeviceMismatch { op: INFER });
}

/// Random shapes for every argument: Ok or Err, never a panic.
#[derive(Debug, Clone)]
struct BnCall {
    x: Vec<usize>,
    params: [Option<Vec<usize>>; 4],
    eps: f64,
    which: u8,
}

fn bn_call() -> impl Strategy<Value = BnCall> {
    let shape = || prop::collection::vec(0usize..5, 0..5);
    (
        shape(),
        [
            prop::option::of(shape()),
            prop::option::of(shape()),
            prop::option::of(shape()),
            prop::option::of(shape()),
        ],
        prop_oneof![Just(1e-5f64), Just(-1.0), Just(f64::NAN), Just(0.0)],
        0u8..3,
    )
        .prop_map(|(x, params, eps, which)| BnCall {
            x,
            params,
            eps,
            which,
        })
}

fn bn_run(c: &BnCall) -> wgtensor::Result<()> {
    let mk = |s: &[usize]| -> wgtensor::Result<Tensor> { Tensor::zeros(dev(), s, DType::F32) };
    let x = mk(&c.x)?;
    let p: Vec<Option<Tensor>> = c
        .params
        .iter()
        .map(|s| s.as_ref().and_then(|s| mk(s).ok()))
        .collect();
    let or_x = |i: usize| p[i].clone().unwrap_or_else(|| x.clone());
    match c.which {
        0 => {
            let mut st = match (&p[2], &p[3]) {
                (Some(m), Some(v)) => {
                    Some(BatchNormState::from_tensors(m.clone(), v.clone(), None))
                }
                _ => None,
            };
            batch_norm_train(
                &x,
                st.as_mut(),
                &BatchNormOptions {
                    weight: p[0].as_ref(),
                    bias: p[1].as_ref(),
                    eps: c.eps,
                    ..Default::default()
                },
            )?;
        }
        1 => {
            batch_norm_inference(
                &x,
                &or_x(2),
                &or_x(3),
                &BatchNormOptions {
                    weight: p[0].as_ref(),
                    bias: p[1].as_ref(),
                    eps: c.eps,
                    activation: Activation::Tanh,
                },
            )?;
        }
        _ => {
            batch_norm_backward(
                &x,
                &x,
                p[0].as_ref(),
                &BatchNormSaved::new(or_x(2).clone(), or_x(3).clone())?,
            )?;
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn random_batchnorm_arguments_never_panic(c in bn_call()) {
        let _ = bn_run(&c);
    }
}

/// The typed saved statistics cannot be passed in the wrong order, and swapped tensors are
/// caught: the forward's input given as `dy`, or its output given as `x`.
#[test]
fn swapped_backward_arguments_are_refused() {
    let x = Tensor::from_slice(dev(), &[1.0f32, 4.0, 2.0, 0.0, 3.0, 5.0], &[3, 2]).unwrap();
    let out = batch_norm_train(&x, None, &BatchNormOptions::default()).unwrap();
    let dy = Tensor::from_slice(dev(), &[0.5f32, -1.0, 2.0, 0.25, 1.0, -0.5], &[3, 2]).unwrap();
    let good = batch_norm_backward(&dy, &x, None, &out.saved).unwrap();
    let e = batch_norm_backward(&x, &dy, None, &out.saved).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: BACKWARD, .. }) && msg(&e).contains("swapped"),
        "{e:?}"
    );
    let e = batch_norm_backward(&dy, &out.y, None, &out.saved).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: BACKWARD, .. }) && msg(&e).contains("output"),
        "{e:?}"
    );
    // A handle sharing the input's view is the input; dy equal to x is not a swap.
    let again = batch_norm_backward(&dy, &x.clone(), None, &out.saved).unwrap();
    assert_eq!(
        again.dx.to_vec::<f32>().unwrap(),
        good.dx.to_vec::<f32>().unwrap()
    );
    batch_norm_backward(&x, &x, None, &out.saved).unwrap();
    // Statistics from elsewhere: f32 [C] pairs only.
    let m = Tensor::zeros(dev(), &[2], DType::F32).unwrap();
    let h = Tensor::zeros(dev(), &[2], DType::F16);
    if let Ok(h) = h {
        let e = BatchNormSaved::new(m.clone(), h).unwrap_err();
        assert!(matches!(e, Error::DType { .. }), "{e:?}");
    }
    let e = BatchNormSaved::new(m.clone(), Tensor::zeros(dev(), &[3], DType::F32).unwrap())
        .unwrap_err();
    shape_err(&e, "BatchNormSaved::new", &["[2]", "[3]"]);
    let saved =
        BatchNormSaved::new(m, Tensor::full(dev(), &[2], 1.0, DType::F32).unwrap()).unwrap();
    let g = batch_norm_backward(&dy, &x, None, &saved).unwrap();
    assert_eq!(g.dbias.to_vec::<f32>().unwrap(), vec![3.5, -1.25]);
}

/// The explicit backward of a mixed forward (f16 x, something f32) runs mixed too, whatever
/// made it so: an f16 weight beside f32 statistics with a fused ReLU, or an f32 bias alone.
/// Its gradients come back in each parameter's dtype.
#[test]
fn mixed_forward_mixed_backward_f16() {
    if !dev().supports_f16() {
        eprintln!("skipping: adapter lacks SHADER_F16");
        return;
    }
    let h = |s: &[usize]| t(s).to_dtype(DType::F16).unwrap();
    let x = h(&[4, 3]);
    let (w16, b32) = (h(&[3]), t(&[3]));
    let mut st = BatchNormState::from_tensors(t(&[3]).mul_scalar(0.0).unwrap(), t(&[3]), Some(0.1));
    let o = BatchNormOptions {
        weight: Some(&w16),
        bias: Some(&w16),
        activation: Activation::Relu,
        ..Default::default()
    };
    let out = batch_norm_train(&x, Some(&mut st), &o).unwrap();
    let g = batch_norm_backward(&x, &x, Some(&w16), &out.saved).unwrap();
    assert_eq!(
        (g.dx.dtype(), g.dweight.dtype(), g.dbias.dtype()),
        (DType::F16, DType::F16, DType::F16)
    );
    // Its arguments' dtypes are still checked: an i32 dy is refused, not cast.
    let dy_i = Tensor::zeros(dev(), &[4, 3], DType::I32).unwrap();
    assert!(batch_norm_backward(&dy_i, &x, Some(&w16), &out.saved).is_err());
    let o = BatchNormOptions {
        bias: Some(&b32),
        ..Default::default()
    };
    let out = batch_norm_train(&x, None, &o).unwrap();
    let g = batch_norm_backward(&x, &x, None, &out.saved).unwrap();
    assert_eq!((g.dx.dtype(), g.dbias.dtype()), (DType::F16, DType::F32));
    // A weight and a bias of different dtypes are refused (both of PyTorch's kernels do).
    let o = BatchNormOptions {
        weight: Some(&w16),
        bias: Some(&b32),
        ..Default::default()
    };
    assert!(batch_norm_train(&x, None, &o).is_err());
}
