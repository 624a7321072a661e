//! Version counters (PyTorch's `_version`): a backward whose saved tensors were written in
//! place after the op ran (an optimizer step, `copy_from` under `no_grad`, `gemm_into`) is
//! PyTorch's "modified by an inplace operation" error, never a silently wrong gradient. A
//! write into a tensor no backward saved is fine, as in PyTorch.

use super::{dev, vals};
use wgtensor::ops::gemm_into;
use wgtensor::optim::{Adam, AdamOptions, Sgd, SgdOptions};
use wgtensor::{no_grad, Tensor};

fn t(v: &[f32]) -> Tensor {
    Tensor::from_slice(dev(), v, &[v.len()]).unwrap()
}

fn assert_inplace_error(r: wgtensor::Result<wgtensor::Grads>) {
    let e = r.expect_err("a stale saved tensor must fail the backward");
    let m = e.to_string();
    assert!(m.contains("modified by an inplace operation"), "{m}");
    assert!(m.contains("expected version"), "{m}");
}

/// A backward that fails its version check keeps the node: a retry repeats the in-place
/// error (PyTorch's engine releases a node's saved tensors only after its function returns),
/// and retain_graph's pass after restoring nothing still refuses.
#[test]
fn a_failed_backward_keeps_its_node() {
    let a = t(&[1.0, 1.0, 1.0]);
    let w = t(&[1.0, 2.0, 3.0]).requires_grad().unwrap();
    let z = w.mul(&a).unwrap().sum_all().unwrap();
    no_grad(|| a.copy_from(&t(&[0.0, 0.0, 0.0]))).unwrap();
    // PyTorch's tag of the tensor, then its versions.
    let m = z.backward().unwrap_err().to_string();
    assert!(
        m.contains("[torch.FloatTensor [3]] is at version 1; expected version 0 instead"),
        "{m}"
    );
    assert_inplace_error(z.backward());
    assert_inplace_error(z.backward_retain_graph());
}

#[test]
fn optimizer_step_before_backward_is_an_error() {
    let w = t(&[1.0, 2.0, 3.0]).requires_grad().unwrap();
    let loss = w.mul(&w).unwrap().sum_all().unwrap();
    let before = w.version();
    let mut opt = Sgd::new(
        vec![w.clone()],
        SgdOptions {
            lr: 0.1,
            ..Default::default()
        },
    )
    .unwrap();
    opt.step_with(&[Some(&t(&[1.0, 1.0, 1.0]))]).unwrap();
    assert_eq!(w.version(), before + 1);
    assert_inplace_error(loss.backward());

    // Adam too, and the right order (backward, then step) works: d(w.w)/dw = 2w.
    let w = t(&[1.0, 2.0, 3.0]).requires_grad().unwrap();
    let loss = w.mul(&w).unwrap().sum_all().unwrap();
    let g = loss.backward().unwrap();
    assert_eq!(vals(g.get(&w).unwrap()), vec![2.0, 4.0, 6.0]);
    let mut opt = Adam::new(vec![w.clone()], AdamOptions::default()).unwrap();
    opt.step(&g).unwrap();
    let loss = w.mul(&w).unwrap().sum_all().unwrap();
    opt.step(&g).unwrap();
    assert_inplace_error(loss.backward());

    // An empty parameter is written too (PyTorch's in-place update bumps at any size).
    let w = t(&[]).requires_grad().unwrap();
    let mut opt = Sgd::new(vec![w.clone()], SgdOptions::default()).unwrap();
    opt.step_with(&[Some(&t(&[]))]).unwrap();
    assert_eq!(w.version(), 1);
    let mut opt = Adam::new(vec![w.clone()], AdamOptions::default()).unwrap();
    opt.step_with(&[Some(&t(&[]))]).unwrap();
    assert_eq!(w.version(), 2);
}

/// Fused attention's backward reads its output and the mask as well as q, k and v: writing
/// either after the forward is the in-place error, not a silently wrong gradient.
#[test]
fn attention_output_or_mask_written_before_backward_is_an_error() {
    use wgtensor::ops::{scaled_dot_product_attention as sdpa, AttnMask, SdpaOptions};
    let mk = |n: usize| {
        let v: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
        Tensor::from_slice(dev(), &v, &[1, 4, 8]).unwrap()
    };
    let mask = Tensor::zeros(dev(), &[4, 4], wgtensor::DType::F32).unwrap();
    for write_mask in [false, true] {
        let q = mk(32).requires_grad().unwrap();
        let (k, v) = (mk(32), mk(32));
        let o = SdpaOptions {
            attn_mask: Some(AttnMask::Additive(&mask)),
            ..Default::default()
        };
        let out = sdpa(&q, &k, &v, &o).unwrap();
        let loss = out.sum_all().unwrap();
        if write_mask {
            no_grad(|| mask.copy_from(&Tensor::full(dev(), &[4, 4], -1.0, wgtensor::DType::F32)?))
                .unwrap();
        } else {
            no_grad(|| out.copy_from(&Tensor::zeros(dev(), &[1, 4, 8], wgtensor::DType::F32)?))
                .unwrap();
        }
        assert_inplace_error(loss.backward());
    }
    // A strided v (the usual head transpose), which the kernels read packed: writing its
    // base is caught too, as PyTorch's backends save the caller's v.
    let q = Tensor::from_slice(dev(), &[0.1f32; 24], &[1, 2, 3, 4])
        .unwrap()
        .requires_grad()
        .unwrap();
    let k = Tensor::from_slice(dev(), &[0.2f32; 40], &[1, 2, 5, 4]).unwrap();
    let vb = Tensor::from_slice(dev(), &[0.3f32; 40], &[1, 5, 2, 4]).unwrap();
    let out = sdpa(
        &q,
        &k,
        &vb.transpose(1, 2).unwrap(),
        &SdpaOptions::default(),
    )
    .unwrap();
    no_grad(|| vb.copy_from(&Tensor::zeros(dev(), &[1, 5, 2, 4], wgtensor::DType::F32)?)).unwrap();
    assert_inplace_error(out.sum_all().unwrap().backward());
}

#[test]
fn copy_from_into_a_saved_input_is_an_error() {
    let w = t(&[1.0, 2.0, 3.0]).requires_grad().unwrap();
    let x = t(&[1.0, 2.0, 3.0]);
    let loss = w.mul(&x).unwrap().sum_all().unwrap();
    no_grad(|| x.copy_from(&t(&[10.0, 20.0, 30.0]))).unwrap();
    assert_inplace_error(loss.backward());

    // A view shares the counter: writing through it is caught as well.
    let x = t(&[1.0, 2.0, 3.0, 4.0]);
    let loss = w
        .mul(&x.narrow(0, 0, 3).unwrap())
        .unwrap()
        .sum_all()
        .unwrap();
    no_grad(|| x.narrow(0, 3, 1).unwrap().copy_from(&t(&[9.0]))).unwrap();
    assert_inplace_error(loss.backward());
}

#[test]
fn gemm_into_a_saved_operand_is_an_error() {
    let w = Tensor::from_slice(dev(), &[1.0f32, 2.0, 3.0, 4.0], &[2, 2])
        .unwrap()
        .requires_grad()
        .unwrap();
    let x = Tensor::from_slice(dev(), &[1.0f32, 0.0, 0.0, 1.0], &[2, 2]).unwrap();
    let loss = w.matmul(&x).unwrap().sum_all().unwrap();
    let a = Tensor::from_slice(dev(), &[2.0f32; 4], &[2, 2]).unwrap();
    no_grad(|| gemm_into(&x, &a, &a, 1.0, 0.0)).unwrap();
    assert_inplace_error(loss.backward());
}

#[test]
fn writes_into_tensors_no_backward_saved_are_fine() {
    // add saves neither operand: changing one afterwards does not matter, as in PyTorch.
    let w = t(&[1.0, 2.0, 3.0]).requires_grad().unwrap();
    let x = t(&[1.0, 2.0, 3.0]);
    let loss = w.add(&x).unwrap().sum_all().unwrap();
    no_grad(|| x.copy_from(&t(&[7.0, 8.0, 9.0]))).unwrap();
    let g = loss.backward().unwrap();
    assert_eq!(vals(g.get(&w).unwrap()), vec![1.0, 1.0, 1.0]);
    // The counter moves once per in-place write.
    assert_eq!(x.version(), 1);
    assert_eq!(x.detach().version(), 1);

    // max(dim) / min(dim) save their indices, not the input (PyTorch's max.dim backward): the
    // input written afterwards, the gradient still goes to the forward's argmax.
    for max in [true, false] {
        let w = Tensor::from_slice(dev(), &[1.0f32, 5.0, 2.0, 7.0, 3.0, 0.0], &[2, 3])
            .unwrap()
            .requires_grad()
            .unwrap();
        let y = if max {
            w.max(1, false)
        } else {
            w.min(1, false)
        }
        .unwrap();
        no_grad(|| w.copy_from(&Tensor::zeros(dev(), &[2, 3], wgtensor::DType::F32)?)).unwrap();
        let g = y.backward_with_grad(&t(&[2.0, 3.0])).unwrap();
        let want = if max {
            vec![0.0, 2.0, 0.0, 3.0, 0.0, 0.0]
        } else {
            vec![2.0, 0.0, 0.0, 0.0, 0.0, 3.0]
        };
        assert_eq!(vals(g.get(&w).unwrap()), want, "max {max}");
    }
    // div saves its operands, not its output (PyTorch's div backward): the output written in
    // place leaves both gradients as they were: 1/b and -a/b^2.
    let a = t(&[1.0, -6.0]).requires_grad().unwrap();
    let b = t(&[2.0, 4.0]).requires_grad().unwrap();
    let y = a.div(&b).unwrap();
    no_grad(|| y.copy_from(&t(&[9.0, 9.0]))).unwrap();
    let g = y.backward_with_grad(&t(&[1.0, 1.0])).unwrap();
    assert_eq!(vals(g.get(&a).unwrap()), vec![0.5, 0.25]);
    assert_eq!(vals(g.get(&b).unwrap()), vec![-0.25, 0.375]);
}

/// Saved tensors that are views of the caller's: batch norm's output with a fused activation
/// (its backward reads the activation's output) and the recurrent stack's layer-0 input.
#[test]
fn writes_into_a_fused_output_or_an_rnn_input_are_errors() {
    use wgtensor::ops::{batch_norm_train, Activation, BatchNormOptions};
    let x = Tensor::from_slice(dev(), &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3, 1])
        .unwrap()
        .requires_grad()
        .unwrap();
    let o = BatchNormOptions {
        activation: Activation::Relu,
        ..Default::default()
    };
    let out = batch_norm_train(&x, None, &o).unwrap();
    let ones = Tensor::full(dev(), &[2, 3, 1], 1.0, wgtensor::DType::F32).unwrap();
    // Untouched, the backward runs.
    let out2 = batch_norm_train(&x, None, &o).unwrap();
    out2.y.backward_with_grad(&ones).unwrap();
    no_grad(|| out.y.copy_from(&Tensor::zeros_like(&ones).unwrap())).unwrap();
    assert_inplace_error(out.y.backward_with_grad(&ones));
    // The saved mean and inverse std are handed out too: writing them is the same error.
    for pick in [0, 1] {
        let out = batch_norm_train(&x, None, &o).unwrap();
        let s = [out.saved.mean(), out.saved.invstd()][pick];
        s.copy_from(&Tensor::full(dev(), &[3], 100.0, wgtensor::DType::F32).unwrap())
            .unwrap();
        assert_inplace_error(out.y.backward_with_grad(&ones));
    }

    let lstm = wgtensor::nn::Lstm::new(dev(), 3, 2, Default::default()).unwrap();
    let xs = wgtensor::ops::randn(dev(), &[4, 1, 3], wgtensor::DType::F32).unwrap();
    let y = lstm.rnn.forward(&xs, None, None).unwrap().output;
    let loss = y.sum_all().unwrap();
    no_grad(|| xs.copy_from(&Tensor::zeros_like(&xs).unwrap())).unwrap();
    assert_inplace_error(loss.backward());
}

/// An RNN's backward reads its state sequences, and its output is a view of the last one:
/// writing the output (or c_n's sequence) after the forward is the in-place error, not a
/// silently wrong gradient. h_n and c_n have storage of their own: writing the output leaves
/// them as they were (PyTorch returns separate tensors).
#[test]
fn rnn_output_written_before_backward_is_an_error() {
    use wgtensor::nn::{self, Forward};
    let lstm = nn::Lstm::new(dev(), 3, 4, nn::RnnConfig::default()).unwrap();
    let x = Tensor::from_slice(dev(), &[0.5f32; 5 * 2 * 3], &[5, 2, 3]).unwrap();
    let out = lstm.forward_with_state(&x, None, None).unwrap();
    let h_n = out.h_n.to_vec::<f32>().unwrap();
    let loss = out.h_n.sum_all().unwrap();
    no_grad(|| {
        out.output
            .copy_from(&Tensor::zeros(dev(), &[5, 2, 4], wgtensor::DType::F32)?)
    })
    .unwrap();
    assert_eq!(
        out.h_n.to_vec::<f32>().unwrap(),
        h_n,
        "h_n is not the output's storage"
    );
    assert_inplace_error(loss.backward());
    // Untouched, the same forward's backward runs.
    let out = lstm.forward_with_state(&x, None, None).unwrap();
    assert!(out.h_n.sum_all().unwrap().backward().is_ok());
    let _ = lstm.forward(&x).unwrap();
}

/// mse, smooth_l1 and huber are one node in PyTorch that saves `self` and `target`: writing
/// either before the backward is an error, also where a dtype promotion computed the loss on
/// copies; smooth_l1 with beta 0 is l1_loss there, which saves neither.
#[test]
fn regression_losses_check_their_inputs_versions() {
    use wgtensor::ops::{huber_loss, mse_loss, smooth_l1_loss, Reduction};
    use wgtensor::DType;
    type Loss = fn(&Tensor, &Tensor) -> wgtensor::Result<Tensor>;
    let losses: [(Loss, bool); 4] = [
        (|x, y| mse_loss(x, y, Reduction::Mean), true),
        (|x, y| smooth_l1_loss(x, y, Reduction::Sum, 0.5), true),
        (
            |x, y| huber_loss(x, y, Reduction::None, 1.0)?.sum_all(),
            true,
        ),
        (|x, y| smooth_l1_loss(x, y, Reduction::Sum, 0.0), false),
    ];
    for (i, (loss, saves)) in losses.into_iter().enumerate() {
        for target_dtype in [DType::F32, DType::I32] {
            let x = t(&[1.0, 2.0, 3.0]).requires_grad().unwrap();
            let y = t(&[0.0, 4.0, 5.0]).to_dtype(target_dtype).unwrap();
            let l = loss(&x, &y).unwrap();
            no_grad(|| y.copy_from(&t(&[1.0, 1.0, 1.0]).to_dtype(target_dtype)?)).unwrap();
            match saves {
                true => assert_inplace_error(l.backward()),
                false => {
                    let g = l.backward().unwrap();
                    assert_eq!(vals(g.get(&x).unwrap()), vec![1.0, -1.0, -1.0], "{i}");
                }
            }
            // Untouched inputs: one backward, with the composed gradient.
            let y = t(&[0.0, 4.0, 5.0]);
            let l = loss(&x, &y).unwrap();
            assert!(l.backward().is_ok(), "{i}");
        }
    }
}

/// softplus saves its input in every dtype (PyTorch's SoftplusBackward0 saves `self`): an f16
/// input written before the backward is caught as an f32 one is; untouched, the f16 gradient
/// is sigmoid(x) rounded once.
#[test]
fn softplus_checks_its_f16_input_version() {
    use wgtensor::DType;
    for dtype in [DType::F32, DType::F16] {
        if dtype == DType::F16 && !dev().supports_f16() {
            continue;
        }
        let x = t(&[0.5, -1.0])
            .to_dtype(dtype)
            .unwrap()
            .requires_grad()
            .unwrap();
        let y = wgtensor::ops::softplus(&x, 1.0, 20.0).unwrap();
        let g = y.sum_all().unwrap().backward().unwrap();
        let want: Vec<f32> = [0.5f32, -1.0]
            .iter()
            .map(|v| 1.0 / (1.0 + (-v).exp()))
            .collect();
        let got = vals(&g.get(&x).unwrap().to_dtype(DType::F32).unwrap());
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() < 1e-3, "{dtype:?} {got:?}");
        }
        let y = wgtensor::ops::softplus(&x, 1.0, 20.0).unwrap();
        no_grad(|| x.copy_from(&t(&[0.0, 0.0]).to_dtype(dtype)?)).unwrap();
        assert_inplace_error(y.sum_all().unwrap().backward());
    }
}

/// `s / x` is PyTorch's `x.reciprocal() * s`: the reciprocal saves its result, not x, and the
/// product saves no tensor, so writing x or the output before the backward is fine, and the
/// gradient is the forward's, -s / x^2. A second backward fails, as both nodes are freed.
#[test]
fn rdiv_saves_the_reciprocal_not_its_input() {
    for s in [1.0, 3.0] {
        let w = t(&[2.0, 4.0]).requires_grad().unwrap();
        let y = w.rdiv_scalar(s).unwrap();
        assert_eq!(vals(&y), vec![s as f32 / 2.0, s as f32 / 4.0]);
        no_grad(|| w.copy_from(&t(&[8.0, 8.0]))).unwrap();
        no_grad(|| y.copy_from(&t(&[0.0, 0.0]))).unwrap();
        let l = y.sum_all().unwrap();
        let g = l.backward_retain_graph().unwrap();
        let want = vec![-s as f32 / 4.0, -s as f32 / 16.0];
        assert_eq!(vals(g.get(&w).unwrap()), want, "{s}");
        let y = w.rdiv_scalar(s).unwrap().sum_all().unwrap();
        y.backward().unwrap();
        assert!(y.backward().is_err(), "{s}");
    }
}

/// clamp with one NaN bound gives NaN and passes no gradient; its node saves x, as PyTorch's
/// ClampBackward1, so a write to x before the backward is the in-place error.
#[test]
fn clamp_with_a_nan_bound_saves_its_input() {
    for (min, max) in [(Some(f64::NAN), None), (None, Some(f64::NAN))] {
        let x = t(&[1.0, -1.0]).requires_grad().unwrap();
        let y = x.clamp(min, max).unwrap();
        assert!(vals(&y).iter().all(|v| v.is_nan()));
        let g = y.sum_all().unwrap().backward().unwrap();
        assert_eq!(vals(g.get(&x).unwrap()), vec![0.0, 0.0]);
        let y = x.clamp(min, max).unwrap();
        no_grad(|| x.copy_from(&t(&[5.0, 5.0]))).unwrap();
        assert_inplace_error(y.sum_all().unwrap().backward());
    }
}

/// A convolution saves its input and its weight whichever gradients are needed (PyTorch's
/// ConvolutionBackward0): a first layer's weight written before the backward (untracked
/// input) is the version error, and a node whose only tracked input is the bias serves one
/// backward.
#[test]
fn conv_saves_input_and_weight() {
    use wgtensor::ops::{conv2d, Conv2dOptions};
    use wgtensor::DType;
    let x = Tensor::full(dev(), &[1, 1, 3, 3], 1.0, DType::F32).unwrap();
    let w = Tensor::full(dev(), &[1, 1, 2, 2], 1.0, DType::F32)
        .unwrap()
        .requires_grad()
        .unwrap();
    let o = Conv2dOptions::default();
    let loss = conv2d(&x, &w, None, &o).unwrap().sum_all().unwrap();
    no_grad(|| w.copy_from(&Tensor::full(dev(), &[1, 1, 2, 2], 2.0, DType::F32)?)).unwrap();
    assert_inplace_error(loss.backward());
    let wf = Tensor::full(dev(), &[1, 1, 2, 2], 1.0, DType::F32).unwrap();
    let b = Tensor::zeros(dev(), &[1], DType::F32)
        .unwrap()
        .requires_grad()
        .unwrap();
    let l2 = conv2d(&x, &wf, Some(&b), &o).unwrap().sum_all().unwrap();
    assert_eq!(vals(l2.backward().unwrap().get(&b).unwrap()), vec![4.0]);
    assert!(l2.backward().is_err());
}

/// The initial states are saved by every PyTorch RNN backend: writing h0 or c0 (a persistent
/// state buffer updated with `h.copy_(h_n.detach())`) before the backward is the in-place
/// error, for the layers and the cells.
#[test]
fn rnn_initial_states_written_before_backward_are_errors() {
    use wgtensor::nn;
    use wgtensor::DType;
    let lstm = nn::Lstm::new(dev(), 3, 4, nn::RnnConfig::default()).unwrap();
    let x = Tensor::from_slice(dev(), &[0.5f32; 5 * 2 * 3], &[5, 2, 3]).unwrap();
    for which in [0, 1] {
        let h0 = Tensor::full(dev(), &[1, 2, 4], 0.1, DType::F32).unwrap();
        let c0 = Tensor::full(dev(), &[1, 2, 4], 0.2, DType::F32).unwrap();
        let out = lstm.forward_with_state(&x, Some(&h0), Some(&c0)).unwrap();
        let loss = out.output.sum_all().unwrap();
        let state = if which == 0 { &h0 } else { &c0 };
        no_grad(|| state.copy_from(&out.h_n.detach())).unwrap();
        assert_inplace_error(loss.backward());
    }
    let cell = nn::GruCell::new(dev(), 3, 4, true).unwrap();
    let h = Tensor::full(dev(), &[2, 4], 0.1, DType::F32).unwrap();
    let xs = Tensor::from_slice(dev(), &[0.5f32; 6], &[2, 3]).unwrap();
    let h1 = cell.forward_cell(&xs, Some(&h)).unwrap();
    no_grad(|| h.copy_from(&h1.detach())).unwrap();
    assert_inplace_error(h1.sum_all().unwrap().backward());
}

/// gather's node saves self (gather_backward takes it), and index_select's and embedding's
/// keep the index as the caller gave it, also a strided one the kernels packed.
#[test]
fn gather_and_index_select_check_what_pytorch_saves() {
    let ints = |v: &[i32], s: &[usize]| Tensor::from_slice(dev(), v, s).unwrap();
    let w = t(&[1.0, 2.0, 3.0]).requires_grad().unwrap();
    let y = w.gather(0, &ints(&[2, 0], &[2])).unwrap();
    no_grad(|| w.copy_from(&t(&[0.0, 0.0, 0.0]))).unwrap();
    assert_inplace_error(y.sum_all().unwrap().backward());

    let table = Tensor::from_slice(dev(), &[1.0f32; 8], &[4, 2])
        .unwrap()
        .requires_grad()
        .unwrap();
    let ids = ints(&[0, 3, 1, 2], &[2, 2]);
    let column = ids.select(1, 0).unwrap();
    let y = table.index_select(0, &column).unwrap();
    no_grad(|| ids.copy_from(&ints(&[1, 1, 1, 1], &[2, 2]))).unwrap();
    assert_inplace_error(y.sum_all().unwrap().backward());

    let ids = ints(&[0, 3, 1, 2], &[2, 2]);
    let y = wgtensor::ops::embedding(&ids.transpose(0, 1).unwrap(), &table, None).unwrap();
    no_grad(|| ids.copy_from(&ints(&[1, 1, 1, 1], &[2, 2]))).unwrap();
    assert_inplace_error(y.sum_all().unwrap().backward());
}

/// What the norms' PyTorch nodes save: layer_norm its bias; the mixed-dtype nodes (an f16 x
/// with f32 parameters) the caller's x; rms_norm's composite the caller's weight. Eval batch
/// norm's node serves one backward even when only its bias is tracked, and an empty 1-D input
/// gives a tracked empty output.
#[test]
fn norms_check_what_pytorch_saves() {
    use wgtensor::ops::{self, BatchNormOptions, BatchNormState};
    use wgtensor::DType;
    let x = t(&[1.0, 2.0, 4.0, 3.0, 5.0, 9.0]).reshape(&[2, 3]).unwrap();
    let w = t(&[1.0, 1.0, 1.0]).requires_grad().unwrap();
    let b = t(&[0.0, 0.0, 0.0]).requires_grad().unwrap();
    let r = t(&[1.0, -2.0, 3.0, 0.5, 1.0, -1.0])
        .reshape(&[2, 3])
        .unwrap();
    let loss = ops::layer_norm(&x, &[3], Some(&w), Some(&b), 1e-5)
        .unwrap()
        .mul(&r)
        .unwrap()
        .sum_all()
        .unwrap();
    no_grad(|| b.copy_from(&t(&[1.0, 1.0, 1.0]))).unwrap();
    assert_inplace_error(loss.backward());

    if dev().supports_f16() {
        let xh = x.to_dtype(DType::F16).unwrap().requires_grad().unwrap();
        let (wf, bf) = (t(&[1.0, 1.0, 1.0]), t(&[0.0, 0.0, 0.0]));
        let y = ops::layer_norm(&xh, &[3], Some(&wf), Some(&bf), 1e-5).unwrap();
        assert_eq!(y.dtype(), DType::F16);
        let loss = y
            .to_dtype(DType::F32)
            .unwrap()
            .mul(&r)
            .unwrap()
            .sum_all()
            .unwrap();
        no_grad(|| xh.copy_from(&Tensor::zeros(dev(), &[2, 3], DType::F16)?)).unwrap();
        assert_inplace_error(loss.backward());
        let wh = t(&[1.0, 2.0, 3.0])
            .to_dtype(DType::F16)
            .unwrap()
            .requires_grad()
            .unwrap();
        // Kept only where x's gradient is needed (MulBackward0's guard).
        let xt = x.detach().requires_grad().unwrap();
        let loss = ops::rms_norm(&xt, &[3], Some(&wh), None)
            .unwrap()
            .sum_all()
            .unwrap();
        no_grad(|| wh.copy_from(&Tensor::zeros(dev(), &[3], DType::F16)?)).unwrap();
        assert_inplace_error(loss.backward());
        let loss = ops::rms_norm(&x, &[3], Some(&wh), None)
            .unwrap()
            .sum_all()
            .unwrap();
        no_grad(|| wh.copy_from(&Tensor::ones(dev(), &[3], DType::F16)?)).unwrap();
        assert!(loss.backward().is_ok());
    }
    // An integer weight on a float input: PyTorch's composite promotes it.
    let wi = Tensor::from_slice(dev(), &[1i32, 2, 3], &[3]).unwrap();
    let got = vals(&ops::rms_norm(&x, &[3], Some(&wi), None).unwrap());
    let want = vals(&ops::rms_norm(&x, &[3], Some(&t(&[1.0, 2.0, 3.0])), None).unwrap());
    assert_eq!(got, want);

    let st = BatchNormState::new(dev(), 3, DType::F32).unwrap();
    let o = BatchNormOptions {
        bias: Some(&b),
        ..Default::default()
    };
    let loss = ops::batch_norm_inference(&x, &st.running_mean, &st.running_var, &o)
        .unwrap()
        .sum_all()
        .unwrap();
    loss.backward().unwrap();
    assert!(loss.backward().is_err());
    let x0 = Tensor::zeros(dev(), &[0], DType::F32)
        .unwrap()
        .requires_grad()
        .unwrap();
    let e = Tensor::zeros(dev(), &[0], DType::F32).unwrap();
    let y = ops::batch_norm_inference(&x0, &e, &e, &BatchNormOptions::default()).unwrap();
    assert!(y.is_tracked() && y.shape() == [0]);
    let l = y.sum_all().unwrap();
    let g = l.backward().unwrap();
    assert_eq!(g.get(&x0).unwrap().shape(), &[0]);
    // ATen's empty path (clone, times weight[0], plus bias[0]) saves nothing: a second
    // backward runs, and a tracked bias alone tracks the result.
    assert!(l.backward().is_ok());
    let xe = Tensor::zeros(dev(), &[0, 3], DType::F32).unwrap();
    let y = ops::batch_norm_inference(&xe, &st.running_mean, &st.running_var, &o).unwrap();
    assert!(y.is_tracked() && y.shape() == [0, 3]);
    let l = y.sum_all().unwrap();
    assert_eq!(vals(l.backward().unwrap().get(&b).unwrap()), vec![0.0; 3]);
    assert!(l.backward().is_ok());
}

/// More of what PyTorch's nodes save: a binary op of mixed dtypes keeps the caller's
/// operands (the promotion is inside PyTorch's kernel), reflect and replicate pads their
/// input, eval batch norm its input and weight; scatter_add keeps its index only for src's
/// gradient, so with src untracked a second backward runs.
#[test]
fn mixed_binaries_pads_eval_batch_norm_and_scatter_add_save_as_pytorch() {
    use wgtensor::ops::{self, BatchNormOptions, BatchNormState, PadMode};
    use wgtensor::DType;
    let x = t(&[1.0, 2.0, 3.0]).requires_grad().unwrap();
    let m = Tensor::from_slice(dev(), &[1i32, 0, 1], &[3]).unwrap();
    let loss = x.mul(&m).unwrap().sum_all().unwrap();
    no_grad(|| m.copy_from(&Tensor::zeros(dev(), &[3], DType::I32)?)).unwrap();
    assert_inplace_error(loss.backward());
    // add saves nothing: a write into the integer operand is fine.
    let m = Tensor::from_slice(dev(), &[1i32, 0, 1], &[3]).unwrap();
    let loss = x.add(&m).unwrap().sum_all().unwrap();
    no_grad(|| m.copy_from(&Tensor::zeros(dev(), &[3], DType::I32)?)).unwrap();
    assert!(loss.backward().is_ok());

    for mode in [PadMode::Reflect, PadMode::Replicate] {
        let xp = Tensor::from_slice(dev(), &[1.0f32, 2.0, 3.0, 4.0], &[1, 1, 4])
            .unwrap()
            .requires_grad()
            .unwrap();
        let loss = ops::pad(&xp, &[1, 1], mode, 0.0)
            .unwrap()
            .sum_all()
            .unwrap();
        no_grad(|| xp.copy_from(&Tensor::zeros(dev(), &[1, 1, 4], DType::F32)?)).unwrap();
        assert_inplace_error(loss.backward());
    }

    let w = t(&[1.0, 1.0, 1.0]).requires_grad().unwrap();
    let xb = t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).reshape(&[2, 3]).unwrap();
    let st = BatchNormState::new(dev(), 3, DType::F32).unwrap();
    let o = BatchNormOptions {
        weight: Some(&w),
        ..Default::default()
    };
    let loss = ops::batch_norm_inference(&xb, &st.running_mean, &st.running_var, &o)
        .unwrap()
        .sum_all()
        .unwrap();
    no_grad(|| w.copy_from(&t(&[2.0, 2.0, 2.0]))).unwrap();
    assert_inplace_error(loss.backward());

    let base = t(&[0.0, 0.0, 0.0]).requires_grad().unwrap();
    let idx = Tensor::from_slice(dev(), &[2i32, 0], &[2]).unwrap();
    let loss = base
        .scatter_add(0, &idx, &t(&[1.0, 1.0]))
        .unwrap()
        .sum_all()
        .unwrap();
    no_grad(|| idx.copy_from(&Tensor::zeros(dev(), &[2], DType::I32)?)).unwrap();
    assert_eq!(
        vals(loss.backward().unwrap().get(&base).unwrap()),
        vec![1.0; 3]
    );
    assert!(loss.backward().is_ok());
}

/// binary_cross_entropy_with_logits with an f16 target (promoted to the input's f32) keeps
/// the caller's target for the version check, as PyTorch's one node saves it.
#[test]
fn bce_with_logits_keeps_a_promoted_target() {
    use wgtensor::ops::{binary_cross_entropy_with_logits, BceWithLogitsOptions};
    use wgtensor::DType;
    if !dev().supports_f16() {
        return;
    }
    let x = t(&[0.5, -1.0]).requires_grad().unwrap();
    let y = t(&[1.0, 0.0]).to_dtype(DType::F16).unwrap();
    let loss = binary_cross_entropy_with_logits(&x, &y, &BceWithLogitsOptions::default()).unwrap();
    no_grad(|| y.copy_from(&Tensor::zeros(dev(), &[2], DType::F16)?)).unwrap();
    assert_inplace_error(loss.backward());
}

/// A max pool returning its indices keeps them for the version check, as PyTorch's node saves
/// them: writing the indices before the backward is the in-place error.
#[test]
fn max_pool_indices_written_before_backward_are_an_error() {
    use wgtensor::ops::{max_pool2d_with_indices, MaxPool2dOptions};
    use wgtensor::DType;
    let x = Tensor::from_slice(dev(), &[1.0f32, 4.0, 2.0, 3.0], &[1, 1, 2, 2])
        .unwrap()
        .requires_grad()
        .unwrap();
    let (y, idx) = max_pool2d_with_indices(&x, &MaxPool2dOptions::new(2)).unwrap();
    let loss = y.sum_all().unwrap();
    no_grad(|| idx.copy_from(&Tensor::zeros(dev(), &[1, 1, 1, 1], DType::I32)?)).unwrap();
    assert_inplace_error(loss.backward());
    let (y, _) = max_pool2d_with_indices(&x, &MaxPool2dOptions::new(2)).unwrap();
    let g = y.sum_all().unwrap().backward().unwrap();
    assert_eq!(vals(g.get(&x).unwrap()), vec![0.0, 1.0, 0.0, 0.0]);
}
