//! Zero-size dimensions behave as in PyTorch: empty results where nothing is computed, zeros for
//! sums over nothing, NaN for the mean of nothing, and errors where PyTorch raises.

use wgtensor::ops::{
    batch_norm_backward, batch_norm_inference, batch_norm_train, conv2d, conv2d_backward_input,
    conv2d_backward_weight, conv_backward_bias, gemm, gemm_into, matmul, Activation,
    BatchNormGrads, BatchNormOptions, BatchNormSaved, BatchNormState, Bias, Conv1dOptions,
    Conv2dOptions, GemmOptions, Padding, Padding1d,
};
use wgtensor::{DType, Error, Tensor};

use super::{dev, names_op, ramp, still_works, vals};

fn empty(shape: &[usize]) -> Tensor {
    Tensor::from_slice::<f32>(dev(), &[], shape).unwrap()
}

#[test]
fn creation_views_and_readback() {
    for shape in [&[0][..], &[2, 0, 3], &[0, 0]] {
        let t = Tensor::zeros(dev(), shape, DType::F32).unwrap();
        assert_eq!(t.shape(), shape);
        assert_eq!(t.numel(), 0);
        assert!(vals(&t).is_empty());
        assert!(vals(&Tensor::full(dev(), shape, 3.0, DType::F32).unwrap()).is_empty());
    }
    let e = empty(&[2, 0, 3]);
    assert_eq!(e.reshape(&[0, 6]).unwrap().shape(), &[0, 6]);
    assert_eq!(e.reshape(&[3, 0]).unwrap().shape(), &[3, 0]);
    assert!(e.reshape(&[1]).is_err());
    assert_eq!(e.permute(&[2, 0, 1]).unwrap().shape(), &[3, 2, 0]);
    assert_eq!(e.contiguous().unwrap().shape(), &[2, 0, 3]);
    let t = ramp(&[3, 4]);
    let n = t.narrow(1, 4, 0).unwrap();
    assert_eq!(n.shape(), &[3, 0]);
    assert!(vals(&n).is_empty());
    assert!(t.narrow(1, 5, 0).is_err(), "start past the end");
    let b = ramp(&[1, 3]).broadcast_to(&[0, 3]).unwrap();
    assert_eq!(b.shape(), &[0, 3]);
    assert!(vals(&b.contiguous().unwrap()).is_empty());
    // An empty f16 readback checks the dtype like any other.
    assert!(e.to_vec::<wgtensor::f16>().is_err());
}

#[test]
fn elementwise_on_empty() {
    let e = empty(&[0, 3]);
    assert_eq!(e.exp().unwrap().shape(), &[0, 3]);
    assert_eq!(e.add_scalar(1.0).unwrap().shape(), &[0, 3]);
    assert_eq!(e.to_dtype(DType::F32).unwrap().shape(), &[0, 3]);
    // numpy broadcasting with a 0 extent: [0, 3] + [3] and [0, 1] + [1, 4].
    assert_eq!(e.add(&ramp(&[3])).unwrap().shape(), &[0, 3]);
    assert_eq!(empty(&[0, 1]).mul(&ramp(&[1, 4])).unwrap().shape(), &[0, 4]);
    // 0 does not broadcast against 2.
    let err = e.add(&ramp(&[2, 3])).unwrap_err();
    names_op(&err, "add");
}

#[test]
fn reductions_over_empty_axes() {
    let e = empty(&[2, 0]);
    assert_eq!(vals(&e.sum(1, false).unwrap()), vec![0.0, 0.0]);
    assert_eq!(e.sum(1, true).unwrap().shape(), &[2, 1]);
    let m = vals(&e.mean(1, false).unwrap());
    assert!(m.len() == 2 && m.iter().all(|v| v.is_nan()), "{m:?}");
    for op in ["max", "min"] {
        let err = if op == "max" {
            e.max(1, false)
        } else {
            e.min(1, false)
        }
        .unwrap_err();
        assert!(matches!(err, Error::Size { .. }), "{err:?}");
        names_op(&err, op);
        assert!(err.to_string().contains("non-zero size"), "{err}");
    }
    // Reducing a non-empty axis of an empty tensor gives an empty result.
    assert_eq!(e.sum(0, false).unwrap().shape(), &[0]);
    assert_eq!(e.max(0, false).unwrap().shape(), &[0]);
    // A tracked empty view at an offset (x[1:2, 0:0].max(0)): empty values, no error.
    let x = Tensor::from_slice(dev(), &[1.0f32; 6], &[2, 3])
        .unwrap()
        .requires_grad()
        .unwrap();
    let v = x.narrow(0, 1, 1).unwrap().narrow(1, 0, 0).unwrap();
    assert_eq!(v.max(0, false).unwrap().shape(), &[0]);
    // gather with an empty index (of any rank): a new empty tensor, PyTorch's gather node
    // (zero gradient; it saves self and the index, so it serves one backward).
    for shape in [&[0, 3][..], &[0]] {
        let idx = Tensor::zeros(dev(), shape, wgtensor::DType::I32).unwrap();
        let y = x.gather(1, &idx).unwrap();
        assert!(y.shape() == shape && !y.shares_storage(&x));
        let l = y.sum_all().unwrap();
        assert_eq!(vals(l.backward().unwrap().get(&x).unwrap()), vec![0.0; 6]);
        assert!(l.backward().is_err());
    }
    still_works(dev());
}

#[test]
fn gemm_with_empty_dims() {
    // K = 0: the product is zeros, so the result is act(beta * C + bias), as in PyTorch's addmm.
    let a = empty(&[2, 0]);
    let b = empty(&[0, 3]);
    assert_eq!(vals(&matmul(&a, &b).unwrap()), vec![0.0; 6]);
    let c = ramp(&[2, 3]).sub_scalar(3.0).unwrap(); // -2.5 .. 2.5
    let bias = Tensor::from_slice(dev(), &[1.0f32, 0.0, -1.0], &[3]).unwrap();
    let y = gemm(
        &a,
        &b,
        &GemmOptions {
            beta: 2.0,
            c: Some(&c),
            bias: Some(Bias::PerColumn(&bias)),
            activation: Activation::Relu,
            ..Default::default()
        },
    )
    .unwrap();
    let cv = vals(&c);
    let want: Vec<f32> = (0..6)
        .map(|i| (2.0 * cv[i] + [1.0, 0.0, -1.0][i % 3]).max(0.0))
        .collect();
    assert_eq!(vals(&y), want);
    // Forced split-k on K = 0 is harmless.
    let y = gemm(
        &a,
        &b,
        &GemmOptions {
            split_k: Some(4),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(vals(&y), vec![0.0; 6]);
    // In place with K = 0: c = beta * c.
    let t = ramp(&[2, 3]);
    gemm_into(&t, &a, &b, 1.0, 0.5).unwrap();
    assert_eq!(
        vals(&t),
        (0..6).map(|i| (i as f32 + 0.5) * 0.5).collect::<Vec<_>>()
    );
    // Empty M, N or batch: empty results.
    assert_eq!(
        matmul(&empty(&[0, 4]), &ramp(&[4, 3])).unwrap().shape(),
        &[0, 3]
    );
    assert_eq!(
        matmul(&ramp(&[2, 4]), &empty(&[4, 0])).unwrap().shape(),
        &[2, 0]
    );
    assert_eq!(
        matmul(&empty(&[0, 2, 4]), &ramp(&[4, 3])).unwrap().shape(),
        &[0, 2, 3]
    );
    // 1-D operands of length 0: a dot product of nothing is 0.
    let d = matmul(&empty(&[0]), &empty(&[0])).unwrap();
    assert_eq!(d.shape(), &[] as &[usize]);
    assert_eq!(vals(&d), vec![0.0]);
    // Gradients through a batched A and a 2-D B (the batch folds into K) with N, the batch or
    // M empty: zeros of B's shape, as PyTorch's.
    for (a_shape, b_shape) in [
        (&[2, 3, 4][..], &[4, 0][..]),
        (&[0, 3, 4], &[4, 2]),
        (&[2, 0, 4], &[4, 2]),
    ] {
        let a = ramp(a_shape).requires_grad().unwrap();
        let b = ramp(b_shape).requires_grad().unwrap();
        let g = matmul(&a, &b)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let gb = g.get(&b).unwrap();
        assert_eq!(gb.shape(), b_shape);
        assert!(vals(gb).iter().all(|&v| v == 0.0));
        assert_eq!(g.get(&a).unwrap().shape(), a_shape);
    }
    still_works(dev());
}

#[test]
fn convolution_with_empty_batch_or_channels() {
    let o = Conv2dOptions::default();
    let x = empty(&[0, 3, 5, 5]);
    let w = ramp(&[4, 3, 3, 3]);
    let y = conv2d(&x, &w, None, &o).unwrap();
    assert_eq!(y.shape(), &[0, 4, 3, 3]);
    // No output channels: PyTorch's check_shape_forward refuses them.
    let e = conv2d(&ramp(&[2, 3, 5, 5]), &empty(&[0, 3, 3, 3]), None, &o).unwrap_err();
    assert!(
        e.to_string()
            .contains("Given groups=1, expected weight to be at least 1 at dimension 0"),
        "{e}"
    );
    // Gradients of an empty batch: an empty dx, a zero weight gradient, a zero bias gradient.
    let dy = empty(&[0, 4, 3, 3]);
    assert_eq!(
        conv2d_backward_input(&dy, &w, [5, 5], &o).unwrap().shape(),
        &[0, 3, 5, 5]
    );
    let dw = conv2d_backward_weight(&dy, &x, [3, 3], &o).unwrap();
    assert_eq!(dw.shape(), &[4, 3, 3, 3]);
    assert!(vals(&dw).iter().all(|&v| v == 0.0));
    assert_eq!(vals(&conv_backward_bias(&dy).unwrap()), vec![0.0; 4]);
    // Data gradient through zero output channels: zeros.
    let dx =
        conv2d_backward_input(&empty(&[2, 0, 3, 3]), &empty(&[0, 3, 3, 3]), [5, 5], &o).unwrap();
    assert_eq!(dx.shape(), &[2, 3, 5, 5]);
    assert!(vals(&dx).iter().all(|&v| v == 0.0));
    // Empty input channels: PyTorch's empty backend, an empty result without channels;
    // empty spatial dims have no meaning: an error naming the op.
    let y = conv2d(&empty(&[1, 0, 5, 5]), &empty(&[4, 0, 3, 3]), None, &o).unwrap();
    assert_eq!(y.shape(), &[1, 0, 3, 3]);
    let e = conv2d(&empty(&[1, 3, 0, 5]), &ramp(&[4, 3, 3, 3]), None, &o).unwrap_err();
    names_op(&e, "conv2d");
    assert!(
        e.to_string()
            .contains("Calculated padded input size per channel: (0 x 5). Kernel size: (3 x 3)"),
        "{e}"
    );
    // Padding that makes the kernel fit: PyTorch's backend choice refuses an empty image
    // unless the batch is empty too, which gives an empty result of the output's shape.
    let padded = Conv2dOptions {
        padding: Padding::uniform(2),
        ..o
    };
    let e = conv2d(&empty(&[1, 3, 0, 5]), &ramp(&[4, 3, 3, 3]), None, &padded).unwrap_err();
    assert!(
        e.to_string().contains(
            "Only zero batch or zero channel inputs are supported, but got input shape: \
             [1, 3, 0, 5]"
        ),
        "{e}"
    );
    let y = conv2d(&empty(&[0, 3, 0, 5]), &ramp(&[4, 3, 3, 3]), None, &padded).unwrap();
    assert_eq!(y.shape(), &[0, 4, 2, 7]);
    // Tracked: the backward gives the Empty backend's zero gradients.
    let x = empty(&[0, 3, 0, 5]).requires_grad().unwrap();
    let w = ramp(&[4, 3, 3, 3]).requires_grad().unwrap();
    let b = ramp(&[4]).requires_grad().unwrap();
    let y = conv2d(&x, &w, Some(&b), &padded).unwrap();
    let g = y.sum_all().unwrap().backward().unwrap();
    assert_eq!(g.get(&x).unwrap().shape(), &[0, 3, 0, 5]);
    assert_eq!(vals(g.get(&w).unwrap()), vec![0.0; 108]);
    assert_eq!(vals(g.get(&b).unwrap()), vec![0.0; 4]);
    // The transposed convolution: an empty batch gives the output's size; another batch is
    // refused after the channel check, in _select_conv_backend's words.
    use wgtensor::ops::{conv_transpose2d, ConvTranspose2dOptions};
    let wt = ramp(&[4, 2, 3, 3]);
    let to = ConvTranspose2dOptions::default();
    let y = conv_transpose2d(&empty(&[0, 4, 0, 5]), &wt, None, &to).unwrap();
    assert_eq!(y.shape(), &[0, 2, 2, 7]);
    // Tracked: zero gradients; a bias of the wrong size is named first, as check_shape_forward.
    let x = empty(&[0, 4, 0, 5]).requires_grad().unwrap();
    let wg = ramp(&[4, 2, 3, 3]).requires_grad().unwrap();
    let bt = ramp(&[2]).requires_grad().unwrap();
    let y = conv_transpose2d(&x, &wg, Some(&bt), &to).unwrap();
    let g = y.sum_all().unwrap().backward().unwrap();
    assert_eq!(g.get(&x).unwrap().shape(), &[0, 4, 0, 5]);
    assert_eq!(vals(g.get(&wg).unwrap()), vec![0.0; 72]);
    assert_eq!(vals(g.get(&bt).unwrap()), vec![0.0; 2]);
    let e = conv_transpose2d(&empty(&[1, 4, 0, 5]), &wt, Some(&ramp(&[3])), &to).unwrap_err();
    assert!(
        e.to_string().contains("expected bias to be 1-dimensional"),
        "{e}"
    );
    let e = conv_transpose2d(&empty(&[1, 4, 0, 5]), &wt, None, &to).unwrap_err();
    assert!(
        e.to_string()
            .contains("Only zero batch or zero channel inputs are supported"),
        "{e}"
    );
    let e = conv_transpose2d(&empty(&[1, 3, 0, 5]), &wt, None, &to).unwrap_err();
    assert!(!e.to_string().contains("Only zero batch"), "{e}");
    // An empty batch of non-empty images goes to the Empty backend before the backend's
    // checks: any output padding, an output extent of 0 (not a negative one).
    let op = ConvTranspose2dOptions {
        output_padding: [1, 1],
        ..Default::default()
    };
    let y = conv_transpose2d(&empty(&[0, 4, 5, 5]), &wt, None, &op).unwrap();
    assert_eq!(y.shape(), &[0, 2, 8, 8]);
    let y = conv_transpose2d(&empty(&[0, 4, 0, 5]), &ramp(&[4, 2, 1, 1]), None, &to).unwrap();
    assert_eq!(y.shape(), &[0, 2, 0, 5]);
    // A bias of the wrong size is named before the output padding and the output size.
    let e = conv_transpose2d(&ramp(&[1, 4, 5, 5]), &wt, Some(&ramp(&[3])), &op).unwrap_err();
    assert!(
        e.to_string().contains("expected bias to be 1-dimensional"),
        "{e}"
    );
    let p1 = ConvTranspose2dOptions {
        padding: wgtensor::ops::Padding::uniform(1),
        ..Default::default()
    };
    let (x1, w1) = (ramp(&[1, 4, 1, 1]), ramp(&[4, 2, 1, 1]));
    let e = conv_transpose2d(&x1, &w1, Some(&ramp(&[3])), &p1).unwrap_err();
    assert!(
        e.to_string().contains("expected bias to be 1-dimensional"),
        "{e}"
    );
    assert!(conv_transpose2d(&x1, &w1, None, &p1).is_err());
    let e = wgtensor::ops::conv1d(
        &empty(&[2, 3, 0]),
        &ramp(&[4, 3, 1]),
        None,
        &Conv1dOptions {
            padding: Padding1d::uniform(1),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("but got input shape: [2, 3, 0]"),
        "{e}"
    );
    still_works(dev());
}

#[test]
fn batch_norm_with_empty_and_single_values() {
    let x = ramp(&[1, 3]);
    // One value per channel when training: PyTorch's error, not NaN.
    let e = batch_norm_train(&x, None, &BatchNormOptions::default()).unwrap_err();
    names_op(&e, "batch_norm_train");
    assert!(
        e.to_string().contains("more than 1 value per channel"),
        "{e}"
    );
    // An empty batch is fine in training, as in PyTorch (it refuses exactly one value): an
    // empty output, [C] saved statistics, running statistics untouched, the batch counted.
    let mut st = BatchNormState::new(dev(), 3, DType::F32).unwrap();
    let out =
        batch_norm_train(&empty(&[0, 3]), Some(&mut st), &BatchNormOptions::default()).unwrap();
    assert_eq!(out.y.shape(), &[0, 3]);
    assert_eq!(out.saved.mean().shape(), &[3]);
    assert_eq!(vals(&st.running_mean), vec![0.0; 3]);
    assert_eq!(vals(&st.running_var), vec![1.0; 3]);
    assert_eq!(st.num_batches_tracked, 1);
    let e = batch_norm_train(&ramp(&[1, 2, 1, 1]), None, &BatchNormOptions::default()).unwrap_err();
    assert!(
        e.to_string().contains("more than 1 value per channel"),
        "{e}"
    );
    // No channels: empty outputs, and the batch is counted.
    let mut st = BatchNormState::new(dev(), 0, DType::F32).unwrap();
    let out = batch_norm_train(
        &empty(&[4, 0, 2]),
        Some(&mut st),
        &BatchNormOptions::default(),
    )
    .unwrap();
    let (y, m, s) = (out.y, out.saved.mean().clone(), out.saved.invstd().clone());
    assert_eq!(
        (y.shape(), m.shape(), s.shape()),
        (&[4, 0, 2][..], &[0][..], &[0][..])
    );
    assert_eq!(st.num_batches_tracked, 1);
    // Inference on an empty batch.
    let rm = Tensor::zeros(dev(), &[3], DType::F32).unwrap();
    let rv = Tensor::full(dev(), &[3], 1.0, DType::F32).unwrap();
    let y = batch_norm_inference(&empty(&[0, 3]), &rm, &rv, &BatchNormOptions::default()).unwrap();
    assert_eq!(y.shape(), &[0, 3]);
    // Backward over an empty batch: empty dx, zero parameter gradients.
    let BatchNormGrads {
        dx,
        dweight: dg,
        dbias: db,
    } = batch_norm_backward(
        &empty(&[0, 3]),
        &empty(&[0, 3]),
        None,
        &BatchNormSaved::new(rm.clone(), rv.clone()).unwrap(),
    )
    .unwrap();
    assert_eq!(dx.shape(), &[0, 3]);
    assert_eq!(vals(&dg), vec![0.0; 3]);
    assert_eq!(vals(&db), vec![0.0; 3]);
    // An empty 1-D input (PyTorch's sample_inputs_batch_norm has one): returned as is, with
    // statistics of no channels; tracked or not; its backward is empty too. A non-empty 1-D
    // input is still refused.
    let (rm0, rv0) = (empty(&[0]), empty(&[0]));
    let x = empty(&[0]).requires_grad().unwrap();
    let y = batch_norm_inference(&x, &rm0, &rv0, &BatchNormOptions::default()).unwrap();
    assert_eq!(y.shape(), &[0]);
    let mut st = BatchNormState::from_tensors(rm0.clone(), rv0.clone(), Some(0.1));
    let out = batch_norm_train(&x, Some(&mut st), &BatchNormOptions::default()).unwrap();
    assert_eq!(
        (out.y.shape(), out.saved.mean().shape()),
        (&[0][..], &[0][..])
    );
    let g = batch_norm_backward(&empty(&[0]), &x.detach(), None, &out.saved).unwrap();
    assert_eq!((g.dx.shape(), g.dbias.shape()), (&[0][..], &[0][..]));
    let e = batch_norm_inference(&ramp(&[3]), &rm0, &rv0, &BatchNormOptions::default());
    names_op(&e.unwrap_err(), "batch_norm_inference");
    still_works(dev());
}

#[test]
fn num_batches_tracked_saturates() {
    let mut st = BatchNormState::new(dev(), 2, DType::F32).unwrap();
    st.momentum = None;
    st.num_batches_tracked = u64::MAX;
    let x = ramp(&[4, 2]);
    batch_norm_train(&x, Some(&mut st), &BatchNormOptions::default()).unwrap();
    assert_eq!(st.num_batches_tracked, u64::MAX);
    let rm = vals(&st.running_mean);
    let rv = vals(&st.running_var);
    assert!(rm.iter().chain(&rv).all(|v| v.is_finite()), "{rm:?} {rv:?}");
}
