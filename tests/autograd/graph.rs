//! The graph's behaviour, independent of any one op's derivative.

use wgtensor::autograd::{is_grad_enabled, no_grad, NoGradGuard};
use wgtensor::ops::{gemm_into, matmul};
use wgtensor::{DType, Error, Tensor};

use crate::common::device;

fn t(data: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_slice(device(), data, shape).unwrap()
}

fn leaf(data: &[f32], shape: &[usize]) -> Tensor {
    t(data, shape).requires_grad().unwrap()
}

fn vals(x: &Tensor) -> Vec<f32> {
    x.to_vec::<f32>().unwrap()
}

fn total(y: &Tensor) -> Tensor {
    y.reshape(&[y.numel()]).unwrap().sum(0, false).unwrap()
}

/// x used twice (and through two paths) accumulates: d/dx sum(x*x + 3x) = 2x + 3.
#[test]
fn reuse_accumulates() {
    let x = leaf(&[1.0, -2.0, 0.5], &[3]);
    let y = x.mul(&x).unwrap().add(&x.mul_scalar(3.0).unwrap()).unwrap();
    let g = total(&y).backward().unwrap();
    assert_eq!(vals(g.get(&x).unwrap()), vec![5.0, -1.0, 4.0]);
    assert_eq!(g.len(), 1);
}

/// `Grads::accumulate` sums two passes' gradients leaf by leaf (PyTorch's `.grad` after two
/// `backward()` calls), takes over leaves only the second reached, records no graph, and
/// leaves the first unchanged when a sum fails.
#[test]
fn grads_accumulate_over_passes() {
    let x = leaf(&[1.0, -2.0], &[2]);
    let y = leaf(&[4.0], &[1]);
    let mut g = total(&x.mul_scalar(3.0).unwrap()).backward().unwrap();
    let second = total(&x.mul(&x).unwrap().mul(&y).unwrap())
        .backward()
        .unwrap();
    g.accumulate(second).unwrap();
    // 3 + 2 x y, and y's gradient sum(x^2) from the second pass alone.
    assert_eq!(vals(g.get(&x).unwrap()), vec![11.0, -13.0]);
    assert_eq!(vals(g.get(&y).unwrap()), vec![5.0]);
    assert_eq!(g.len(), 2);
    assert!(!g.get(&x).unwrap().is_tracked());
    // Nothing to add changes nothing; an empty map takes everything over.
    g.accumulate(wgtensor::Grads::default()).unwrap();
    assert_eq!(vals(g.get(&x).unwrap()), vec![11.0, -13.0]);
    let mut empty = wgtensor::Grads::default();
    empty.accumulate(g).unwrap();
    assert_eq!((empty.len(), vals(empty.get(&y).unwrap())), (2, vec![5.0]));
}

/// PyTorch's words for its autograd errors (test_autograd matches them), our hint after.
#[test]
fn autograd_errors_in_pytorch_words() {
    let has = |r: wgtensor::Result<wgtensor::Grads>, want: &str| {
        let e = r.unwrap_err().to_string();
        assert!(e.contains(want), "{e}\nwants: {want}");
    };
    let x = leaf(&[1.0, 2.0], &[2]);
    let loss = total(&x.exp().unwrap());
    loss.backward().unwrap();
    has(loss.backward(), "Specify retain_graph=True");
    has(
        t(&[1.0], &[1]).backward(),
        "element 0 of tensors does not require grad and does not have a grad_fn",
    );
    let mut y = x.mul_scalar(2.0).unwrap();
    let e = y.set_requires_grad(false).unwrap_err().to_string();
    assert!(
        e.contains("you can only change requires_grad flags of leaf variables."),
        "{e}"
    );
    let i = Tensor::from_slice(device(), &[1i32], &[1]).unwrap();
    let e = i.requires_grad().unwrap_err().to_string();
    assert!(
        e.contains("Only Tensors of floating point and complex dtype can require gradients"),
        "{e}"
    );
    // An in-place write into a leaf that requires grad, in grad mode.
    let e = x.copy_from(&t(&[0.0, 0.0], &[2])).unwrap_err().to_string();
    assert!(
        e.contains("a leaf Variable that requires grad is being used in an in-place operation."),
        "{e}"
    );
    // A leaf only read (the source of a copy) is not the leaf being written.
    let buf = t(&[0.0, 0.0], &[2]);
    let e = buf.copy_from(&x).unwrap_err().to_string();
    assert!(
        !e.contains("leaf Variable") && e.contains("in-place"),
        "{e}"
    );
    // A tracked non-leaf: refused in our words only.
    let e = y.copy_from(&t(&[0.0, 0.0], &[2])).unwrap_err().to_string();
    assert!(
        !e.contains("leaf Variable") && e.contains("in-place"),
        "{e}"
    );
    // A view of the leaf (through two views): PyTorch's view_of_leaf words.
    let view = x.reshape(&[2, 1]).unwrap().narrow(0, 0, 1).unwrap();
    let e = view.copy_from(&t(&[0.0], &[1, 1])).unwrap_err().to_string();
    assert!(
        e.contains(
            "a view of a leaf Variable that requires grad is being used in an in-place operation."
        ),
        "{e}"
    );
    // The same words once the leaf is frozen (check_inplace asks only whether the view's
    // base is a leaf; the view itself still requires grad).
    let mut w = leaf(&[1.0, 2.0], &[2]);
    let wv = w.reshape(&[2, 1]).unwrap();
    w.set_requires_grad(false).unwrap();
    let e = wv
        .copy_from(&t(&[0.0, 0.0], &[2, 1]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("a view of a leaf Variable that requires grad"),
        "{e}"
    );
    // A view made under no_grad of a tracked tensor, written with grad mode on: refused
    // (PyTorch's NO_GRAD_MODE creation meta), also through a further view; written under
    // no_grad, or through detach(), it is fine.
    let nv = wgtensor::autograd::no_grad(|| x.narrow(0, 0, 1)).unwrap();
    let zero = t(&[0.0], &[1]);
    for dst in [
        nv.clone(),
        nv.reshape(&[1, 1]).unwrap().reshape(&[1]).unwrap(),
    ] {
        let e = dst.copy_from(&zero).unwrap_err().to_string();
        assert!(
            e.contains("A view was created in no_grad mode and is being modified inplace with grad mode enabled."),
            "{e}"
        );
    }
    wgtensor::autograd::no_grad(|| nv.copy_from(&zero)).unwrap();
    nv.detach().copy_from(&t(&[3.0], &[1])).unwrap();
    assert_eq!(crate::common::download(&x).unwrap()[0], 3.0);
    // The base frozen since: the view no longer requires grad, so the write is fine (PyTorch
    // asks at the write, not when the view was made).
    let mut w = t(&[1.0, 2.0], &[2]).requires_grad().unwrap();
    let wv = wgtensor::autograd::no_grad(|| w.narrow(0, 0, 1)).unwrap();
    w.set_requires_grad(false).unwrap();
    wv.copy_from(&zero).unwrap();
    assert_eq!(crate::common::download(&w).unwrap(), vec![0.0, 2.0]);
    // Through a tracked view first: the root of the chain (the leaf) decides.
    let mut w = t(&[1.0, 2.0], &[2]).requires_grad().unwrap();
    let a = w.narrow(0, 0, 2).unwrap();
    let av = wgtensor::autograd::no_grad(|| a.narrow(0, 0, 1)).unwrap();
    assert!(av.copy_from(&zero).is_err());
    w.set_requires_grad(false).unwrap();
    av.copy_from(&zero).unwrap();
    // A no_grad view of an untracked tensor is an ordinary tensor.
    let plain = t(&[1.0, 2.0], &[2]);
    let pv = wgtensor::autograd::no_grad(|| plain.narrow(0, 0, 1)).unwrap();
    pv.copy_from(&zero).unwrap();
}

/// A leaf's gradient is packed whatever view the backward produced (PyTorch's layout
/// contract): x @ w^T leaves dW as a transposed view.
#[test]
fn leaf_gradients_are_contiguous() {
    let w = leaf(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let x = t(&[1.0, 2.0, 3.0], &[1, 3]);
    let g = total(&matmul(&x, &w.transpose(0, 1).unwrap()).unwrap())
        .backward()
        .unwrap();
    let gw = g.get(&w).unwrap();
    assert!(gw.is_contiguous(), "{:?}", gw.strides());
    assert_eq!(vals(gw), vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
    let g = total(&w.transpose(0, 1).unwrap().mul_scalar(2.0).unwrap())
        .backward()
        .unwrap();
    assert!(g.get(&w).unwrap().is_contiguous());
}

/// pow's exponent gradient where the base is 0: the masked 0 times an infinite incoming
/// gradient is NaN, as PyTorch's grad * where(a == 0 & b >= 0, 0, y ln a).
#[test]
fn pow_exponent_gradient_at_zero_base() {
    let a = t(&[0.0, 4.0], &[2]);
    let b = leaf(&[1.0, 0.5], &[2]);
    // sqrt's gradient at 0 is infinite.
    let g = total(&a.pow(&b).unwrap().sqrt().unwrap())
        .backward()
        .unwrap();
    let gb = vals(g.get(&b).unwrap());
    assert!(gb[0].is_nan(), "{gb:?}");
    // sqrt(4^b) = 2^b, whose derivative is 2^b ln 2.
    assert!((gb[1] - 2f32.sqrt() * 2f32.ln()).abs() < 1e-5, "{gb:?}");
    // A finite gradient keeps the exact 0.
    let g = total(&a.pow(&b).unwrap()).backward().unwrap();
    assert_eq!(vals(g.get(&b).unwrap())[0], 0.0);
}

/// Leaves that the loss does not depend on, and untracked inputs, get no gradient.
#[test]
fn only_reached_leaves() {
    let x = leaf(&[1.0, 2.0], &[2]);
    let unused = leaf(&[1.0, 2.0], &[2]);
    let c = t(&[3.0, 4.0], &[2]);
    let g = total(&x.mul(&c).unwrap()).backward().unwrap();
    assert_eq!(vals(g.get(&x).unwrap()), vec![3.0, 4.0]);
    assert!(g.get(&unused).is_none());
    assert!(g.get(&c).is_none());
    // A clone of a leaf is the same leaf.
    assert!(g.get(&x.clone()).is_some());
}

#[test]
fn second_backward_is_an_error() {
    let x = leaf(&[1.0, 2.0], &[2]);
    let loss = total(&x.exp().unwrap());
    loss.backward().unwrap();
    let e = loss.backward().unwrap_err();
    assert!(
        e.to_string().contains("already freed")
            && e.to_string()
                .contains("Trying to backward through the graph a second time"),
        "unexpected error: {e}"
    );
    // An intermediate of a consumed graph is consumed too.
    let y = x.exp().unwrap();
    let l1 = total(&y);
    l1.backward().unwrap();
    let e = total(&y.mul_scalar(2.0).unwrap()).backward().unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "backward", .. }),
        "{e}"
    );
}

/// Nodes that saved no tensors (views, add, sum, mean, scalar add, cat, casts, constant pads)
/// are not freed by a backward, as in PyTorch: a transposed weight built once serves every
/// step; a node that saved tensors (matmul) is still single-use, and so are scalar mul and div
/// and reflect, replicate and circular pads, whose PyTorch twins save a tensor (the wrapped
/// scalar, the input) or copy slices in place (CopySlices, freed after one pass).
#[test]
fn nodes_that_saved_nothing_serve_another_backward() {
    use wgtensor::ops::{pad, PadMode};
    let w = leaf(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let wt = w.transpose(0, 1).unwrap().add_scalar(2.0).unwrap();
    let wt = wt.add(&wt).unwrap().to_dtype(DType::F32).unwrap();
    let x = t(&[1.0, -1.0], &[1, 2]);
    for _ in 0..2 {
        let y = matmul(&x, &wt).unwrap();
        let g = total(&y).backward().unwrap();
        // y_j = sum_i x_i 2 (W[j, i] + 2), so dW[j, i] = 2 x_i: rows [2, -2].
        assert_eq!(vals(g.get(&w).unwrap()), vec![2.0, -2.0, 2.0, -2.0]);
    }
    // A mean over dims the reduction cannot merge divides after the sum (its own node).
    let w3 = leaf(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &[2, 2, 2]);
    let reusable = [
        w.mean_dims(&[0], false).unwrap(),
        w.mean_all().unwrap(),
        w3.mean_dims(&[0, 2], false).unwrap(),
        pad(&w, &[1, 1], PadMode::Constant, 0.0).unwrap(),
    ];
    for y in &reusable {
        let l = total(y);
        l.backward().unwrap();
        l.backward().unwrap();
    }
    let single = [
        w.mul_scalar(2.0).unwrap(),
        w.div_scalar(2.0).unwrap(),
        pad(&w, &[1, 1], PadMode::Reflect, 0.0).unwrap(),
        pad(&w, &[1, 1], PadMode::Replicate, 0.0).unwrap(),
        pad(&w, &[1, 1], PadMode::Circular, 0.0).unwrap(),
    ];
    for y in &single {
        let l = total(y);
        l.backward().unwrap();
        let e = l.backward().unwrap_err().to_string();
        assert!(
            e.contains("backward through the graph a second time"),
            "{e}"
        );
    }
    let y = matmul(&x, &wt).unwrap();
    let l = total(&y);
    l.backward().unwrap();
    assert!(l
        .backward()
        .unwrap_err()
        .to_string()
        .contains("already freed"));
}

#[test]
fn backward_argument_errors() {
    let x = leaf(&[1.0, 2.0], &[2]);
    let y = x.mul_scalar(2.0).unwrap();
    let e = y.backward().unwrap_err();
    assert!(e.to_string().contains("only for scalar outputs"), "{e}");
    let e = t(&[1.0], &[1]).backward().unwrap_err();
    assert!(e.to_string().contains("does not require grad"), "{e}");
    // backward_with_grad: the seed must match.
    let e = y.backward_with_grad(&t(&[1.0], &[1])).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e}");
    assert!(
        e.to_string().contains(
            "Mismatch in shape: grad_output[0] has a shape of torch.Size([1]) and output[0] has \
             a shape of torch.Size([2])."
        ),
        "{e}"
    );
    // _make_grads compares the shapes first, even for an output without a graph.
    let e = t(&[1.0, 2.0, 3.0], &[3])
        .backward_with_grad(&t(&[1.0], &[1]))
        .unwrap_err();
    assert!(e.to_string().contains("Mismatch in shape"), "{e}");
    let g = y.backward_with_grad(&t(&[1.0, -1.0], &[2])).unwrap();
    assert_eq!(vals(g.get(&x).unwrap()), vec![2.0, -2.0]);
    // A seed of another dtype is cast to the output's, as PyTorch's engine does.
    let seed = Tensor::from_slice(x.device(), &[3i32, -1], &[2]).unwrap();
    let y = x.mul_scalar(2.0).unwrap();
    let g = y.backward_with_grad(&seed).unwrap();
    let gx = g.get(&x).unwrap();
    assert_eq!((gx.dtype(), vals(gx)), (DType::F32, vec![6.0, -2.0]));
    // Only leaves turn requires_grad off; on, an op output (already tracked) is unchanged.
    let z = x.exp().unwrap();
    assert!(z.clone().set_requires_grad(false).is_err());
    let z2 = z.clone().requires_grad().unwrap();
    assert!(z2.is_tracked() && !z2.is_leaf());
    assert_eq!(
        vals(
            z2.backward_with_grad(&t(&[1.0, 1.0], &[2]))
                .unwrap()
                .get(&x)
                .unwrap()
        ),
        vals(&z)
    );
    let mut d = z.detach();
    assert!(!d.is_tracked());
    d.set_requires_grad(true).unwrap();
    assert!(d.is_leaf() && d.is_tracked());
    d.set_requires_grad(false).unwrap();
    assert!(!d.is_tracked());
    // The loss itself as a leaf.
    let s = leaf(&[2.0], &[]);
    assert_eq!(vals(s.backward().unwrap().get(&s).unwrap()), vec![1.0]);
}

#[test]
fn no_grad_records_nothing() {
    let x = leaf(&[1.0, 2.0], &[2]);
    let y = no_grad(|| x.mul_scalar(2.0).unwrap().exp().unwrap());
    assert!(!y.is_tracked());
    assert!(is_grad_enabled());
    {
        let _g = NoGradGuard::new();
        assert!(!is_grad_enabled());
        assert!(!matmul(&x, &x).unwrap().is_tracked());
        // Nested scopes restore the outer mode.
        no_grad(|| assert!(!is_grad_enabled()));
        assert!(!is_grad_enabled());
    }
    assert!(is_grad_enabled());
    // A panic inside no_grad does not leave grad mode off.
    let r = std::panic::catch_unwind(|| no_grad(|| panic!("inside no_grad")));
    assert!(r.is_err());
    assert!(is_grad_enabled());
    // Untracked inputs record nothing with grad mode on either.
    assert!(!t(&[1.0], &[1]).exp().unwrap().is_tracked());
    // detach() cuts the graph.
    let d = x.mul_scalar(3.0).unwrap().detach();
    assert!(!d.exp().unwrap().is_tracked());
}

/// In-place GEMM refuses tracked operands while recording, and works under no_grad.
#[test]
fn in_place_gemm() {
    let a = leaf(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let b = t(&[1.0, 0.0, 0.0, 1.0], &[2, 2]);
    let c = Tensor::zeros(device(), &[2, 2], DType::F32).unwrap();
    assert!(gemm_into(&c, &a, &b, 1.0, 0.0).is_err());
    no_grad(|| gemm_into(&c, &a, &b, 1.0, 0.0)).unwrap();
    assert_eq!(vals(&c), vec![1.0, 2.0, 3.0, 4.0]);
}

/// One step of y = sum((x w)^2) / n and a hand-written SGD update under no_grad.
fn train_step(x: &Tensor, w: &Tensor, lr: f32) -> Tensor {
    let y = matmul(x, w).unwrap();
    let loss = total(&y.mul(&y).unwrap())
        .div_scalar(y.numel() as f64)
        .unwrap();
    let g = loss.backward().unwrap();
    let gw = g.get(w).unwrap();
    no_grad(|| w.sub(&gw.mul_scalar(f64::from(lr)).unwrap()).unwrap())
        .requires_grad()
        .unwrap()
}

/// 1000 steps keep the pool's live bytes flat: backward releases every saved tensor and the
/// graph of each step is freed with its loss.
#[test]
fn training_loop_memory_is_flat() {
    // A device of its own: the shared one serves tests running in parallel.
    let dev = &wgtensor::Device::new().unwrap();
    let x = Tensor::from_slice(
        dev,
        &(0..32).map(|i| (i as f32 * 0.37).sin()).collect::<Vec<_>>(),
        &[8, 4],
    )
    .unwrap();
    let w0 = [0.5f32, -0.25, 0.125, 1.0, 0.3, -0.7, 0.2, 0.9];
    let mut w = Tensor::from_slice(dev, &w0, &[4, 2])
        .unwrap()
        .requires_grad()
        .unwrap();
    let mut at_100 = 0;
    for step in 1..=1000 {
        w = train_step(&x, &w, 0.05);
        if step == 100 || step == 1000 {
            dev.sync().unwrap();
            let live = dev.stats().pool.live_bytes;
            if step == 100 {
                at_100 = live;
            } else {
                assert_eq!(live, at_100, "live bytes grew from step 100 to 1000");
            }
        }
    }
    // The loss went down (the loop trains).
    let y = matmul(&x, &w).unwrap();
    let l = vals(&total(&y.mul(&y).unwrap()))[0];
    assert!(l < 1.0, "loss {l}");
}

/// Same inputs, bitwise-same gradients (split-k GEMM, broadcast sums, accumulation).
#[test]
fn gradients_are_deterministic() {
    let run = || {
        let a = leaf(
            &(0..64 * 1500)
                .map(|i| ((i * 7919) % 113) as f32 / 57.0 - 1.0)
                .collect::<Vec<_>>(),
            &[64, 1500],
        );
        let b = leaf(
            &(0..1500 * 3)
                .map(|i| ((i * 104729) % 97) as f32 / 49.0 - 1.0)
                .collect::<Vec<_>>(),
            &[1500, 3],
        );
        let bias = leaf(&[0.1, -0.2, 0.3], &[3]);
        let y = matmul(&a, &b).unwrap().add(&bias).unwrap().tanh().unwrap();
        let loss = total(&y.mul(&y).unwrap().add(&y).unwrap());
        let g = loss.backward().unwrap();
        [
            vals(g.get(&a).unwrap()),
            vals(g.get(&b).unwrap()),
            vals(g.get(&bias).unwrap()),
        ]
    };
    let (r1, r2) = (run(), run());
    for (x, y) in r1.iter().zip(&r2) {
        assert!(x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()));
    }
}

/// A 20k-node chain is freed without overflowing the stack, and backward through a long
/// chain works.
#[test]
fn deep_graph() {
    let x = leaf(&[1.0], &[1]);
    let mut y = x.clone();
    for _ in 0..20_000 {
        y = y.add_scalar(0.0).unwrap();
    }
    drop(y);
    // where_cond with a tracked condition saves it detached: the same chain through the
    // condition frees as well (a saved clone held each node a second time and the drop
    // recursed once per node).
    let zero = leaf(&[0.0], &[1]).detach();
    let mut y = x.clone();
    for _ in 0..20_000 {
        y = y.where_cond(&y, &zero).unwrap();
    }
    drop(y);
    let mut y = x.clone();
    for _ in 0..300 {
        y = y.mul_scalar(1.0).unwrap();
    }
    let g = total(&y).backward().unwrap();
    assert_eq!(vals(g.get(&x).unwrap()), vec![1.0]);
}

/// The fused families release their saved tensors too: 200 steps of conv2d (bias, relu) ->
/// batch_norm_train -> LSTM cell -> GEMM loss keep live bytes equal at steps 50 and 200.
#[test]
fn fused_training_loop_memory_is_flat() {
    use wgtensor::ops::{
        batch_norm_train, conv2d, lstm_cell, Activation, BatchNormOptions, Conv2dOptions, Padding,
        RnnKind, RnnWeights,
    };
    let dev = &wgtensor::Device::new().unwrap();
    let up = |data: Vec<f32>, shape: &[usize]| Tensor::from_slice(dev, &data, shape).unwrap();
    let wave = |n: usize, k: f32| (0..n).map(|i| ((i as f32 + 1.0) * k).sin() * 0.5).collect();
    let x = up(wave(2 * 3 * 5 * 5, 0.37), &[2, 3, 5, 5]);
    let mut params = vec![
        up(wave(4 * 3 * 3 * 3, 0.11), &[4, 3, 3, 3]), // conv weight
        up(wave(4, 0.7), &[4]),                       // conv bias
        up(wave(4, 0.3).iter().map(|v| v + 1.0).collect(), &[4]), // bn gamma
        up(wave(16 * 4, 0.05), &[16, 4]),             // w_ih (4 gates x H 4, input 4)
        up(wave(16 * 4, 0.09), &[16, 4]),             // w_hh
    ];
    params = params
        .into_iter()
        .map(|p| p.requires_grad().unwrap())
        .collect();
    let o = Conv2dOptions {
        padding: Padding::same([3, 3], [1, 1]),
        activation: Activation::Relu,
        ..Default::default()
    };
    let mut at_50 = 0;
    for step in 1..=200 {
        let y = conv2d(&x, &params[0], Some(&params[1]), &o).unwrap();
        let y = batch_norm_train(
            &y,
            None,
            &BatchNormOptions {
                weight: Some(&params[2]),
                ..Default::default()
            },
        )
        .unwrap()
        .y;
        // [2, 4, 5, 5] -> per-sample channel means [2, 4] as the LSTM input.
        let feat = y.reshape(&[2, 4, 25]).unwrap().mean(2, false).unwrap();
        let w = RnnWeights::new(RnnKind::Lstm, &params[3], &params[4], None, None).unwrap();
        let h0 = Tensor::zeros(dev, &[2, 4], DType::F32).unwrap();
        let (h, c) = lstm_cell(&feat, &h0, &h0, &w).unwrap();
        let loss = total(&h.mul(&h).unwrap().add(&c).unwrap());
        let g = loss.backward().unwrap();
        params = params
            .iter()
            .map(|p| {
                let gp = g.get(p).unwrap();
                no_grad(|| p.sub(&gp.mul_scalar(0.01)?))
                    .unwrap()
                    .requires_grad()
                    .unwrap()
            })
            .collect();
        if step == 50 || step == 200 {
            dev.sync().unwrap();
            let live = dev.stats().pool.live_bytes;
            if step == 50 {
                at_50 = live;
            } else {
                assert_eq!(live, at_50, "live bytes grew from step 50 to 200");
            }
        }
    }
}

/// retain_graph keeps the saved tensors: two passes give the same gradients, then a plain
/// backward consumes the graph and a further one is an error.
#[test]
fn retain_graph() {
    let x = leaf(&[0.5, -1.0, 2.0], &[3]);
    let loss = total(&x.mul(&x).unwrap().tanh().unwrap());
    let g1 = vals(loss.backward_retain_graph().unwrap().get(&x).unwrap());
    let g2 = vals(loss.backward_retain_graph().unwrap().get(&x).unwrap());
    assert_eq!(g1, g2);
    let g3 = vals(loss.backward().unwrap().get(&x).unwrap());
    assert_eq!(g1, g3);
    assert!(loss.backward().is_err());
    assert!(loss.backward_retain_graph().is_err());
}

/// Tensors and gradients cross threads (grad mode is per thread; the graph is not).
#[test]
fn backward_on_another_thread() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Tensor>();
    send_sync::<wgtensor::Grads>();
    let x = leaf(&[1.0, 2.0], &[2]);
    let loss = total(&x.mul_scalar(3.0).unwrap());
    let g = std::thread::spawn(move || loss.backward().unwrap())
        .join()
        .unwrap();
    assert_eq!(vals(g.get(&x).unwrap()), vec![3.0, 3.0]);
}

/// Untracked calls run exactly the dispatches they ran before autograd: a fused GELU GEMM is
/// one launch; tracked, GELU is split out (GEMM + gelu) so its backward has the
/// pre-activation.
#[test]
fn untracked_ops_launch_what_they_did() {
    use wgtensor::ops::{gemm, Activation, GemmOptions};
    let dev = &wgtensor::Device::new().unwrap();
    let a = Tensor::from_slice(dev, &[1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    let o = GemmOptions {
        activation: Activation::Gelu,
        split_k: Some(1),
        ..Default::default()
    };
    let count = |f: &dyn Fn() -> Tensor| {
        let before = dev.stats().dispatches;
        let y = f();
        drop(y);
        dev.stats().dispatches - before
    };
    assert_eq!(count(&|| gemm(&a, &a, &o).unwrap()), 1);
    let t = a.clone().requires_grad().unwrap();
    assert_eq!(count(&|| gemm(&t, &a, &o).unwrap()), 2);
    assert_eq!(count(&|| no_grad(|| gemm(&t, &a, &o).unwrap())), 1);
}

/// Empty tensors flow through backward (PyTorch: their gradients are empty), and NaN inputs
/// give NaN gradients, not errors or panics.
#[test]
fn empty_and_nan_inputs() {
    let dev = device();
    let x = Tensor::zeros(dev, &[0, 3], DType::F32)
        .unwrap()
        .requires_grad()
        .unwrap();
    let w = leaf(&[1.0, 2.0, 3.0], &[3]);
    let y = x.mul(&w).unwrap().exp().unwrap().sum(0, false).unwrap(); // [3] of zeros
    let g = total(&y.add(&w).unwrap()).backward().unwrap();
    assert_eq!(g.get(&x).unwrap().shape(), &[0, 3]);
    assert_eq!(vals(g.get(&w).unwrap()), vec![1.0, 1.0, 1.0]);
    let m = Tensor::zeros(dev, &[2, 0], DType::F32)
        .unwrap()
        .requires_grad()
        .unwrap();
    let p = matmul(&m, &t(&[0.0; 0], &[0, 2])).unwrap(); // [2, 2] of zeros (K = 0)
    let g = total(&p).backward().unwrap();
    assert_eq!(g.get(&m).unwrap().shape(), &[2, 0]);

    let n = leaf(&[f32::NAN, 1.0], &[2]);
    let g = total(&n.mul(&n).unwrap().sigmoid().unwrap())
        .backward()
        .unwrap();
    let gv = vals(g.get(&n).unwrap());
    assert!(gv[0].is_nan() && gv[1].is_finite(), "{gv:?}");
}

/// max/min backward scans each row once: a 200k-element row with its maximum last, and a row
/// of ties (the first index gets the gradient, as PyTorch's max(dim)).
#[test]
fn long_rows_and_ties_in_max_backward() {
    let n = 200_000;
    let x = leaf(&(0..n).map(|i| i as f32).collect::<Vec<_>>(), &[n]);
    let g = x.max(0, false).unwrap().backward().unwrap();
    let gv = vals(g.get(&x).unwrap());
    assert_eq!(gv[n - 1], 1.0);
    assert_eq!(gv.iter().sum::<f32>(), 1.0);
    let y = leaf(&[2.0, 2.0, 1.0, 2.0, 3.0, 3.0], &[2, 3]);
    let g = total(
        &y.min(1, true)
            .unwrap()
            .add(&y.max(1, false).unwrap().reshape(&[2, 1]).unwrap())
            .unwrap(),
    )
    .backward()
    .unwrap();
    // Row 0 [2, 2, 1]: min at 2, max first at 0. Row 1 [2, 3, 3]: min at 0, max first at 1.
    assert_eq!(vals(g.get(&y).unwrap()), vec![1.0, 0.0, 1.0, 1.0, 1.0, 0.0]);
}

/// copy_from into a tracked tensor, or from one, is refused while recording (nothing would
/// carry a tracked source's gradient) and allowed under no_grad or from a detached source.
#[test]
fn copy_from_into_tracked() {
    let w = leaf(&[1.0, 2.0], &[2]);
    let src = t(&[3.0, 4.0], &[2]);
    assert!(w.copy_from(&src).is_err());
    no_grad(|| w.copy_from(&src)).unwrap();
    assert_eq!(vals(&w), vec![3.0, 4.0]);
    let buf = t(&[0.0, 0.0], &[2]);
    let e = buf.copy_from(&w).unwrap_err().to_string();
    assert!(e.starts_with("copy_from:") && e.contains("tracked"), "{e}");
    buf.copy_from(&w.detach()).unwrap();
    no_grad(|| buf.copy_from(&w)).unwrap();
    assert_eq!(vals(&buf), vec![3.0, 4.0]);
}

/// The optimizers take autograd's gradients directly: `Grads::get` per parameter, one in-place
/// step, the same leaves (their ids unchanged) tracked for the next forward.
#[test]
fn optimizer_steps_on_autograd_gradients() {
    use wgtensor::optim::{Sgd, SgdOptions};
    let x = t(&[0.5, -1.0, 2.0, 0.25, 1.5, -0.5], &[3, 2]);
    let target = t(&[1.0, 0.0, -1.0], &[3, 1]);
    let w = leaf(&[0.1, -0.2], &[2, 1]);
    let mut opt = Sgd::new(
        vec![w.clone()],
        SgdOptions {
            lr: 0.1,
            momentum: 0.9,
            ..Default::default()
        },
    )
    .unwrap();
    let mut first = None;
    let mut last = 0.0;
    for _ in 0..50 {
        let d = matmul(&x, &w).unwrap().sub(&target).unwrap();
        let l = total(&d.mul(&d).unwrap());
        last = vals(&l)[0];
        first.get_or_insert(last);
        let g = l.backward().unwrap();
        no_grad(|| opt.step(&g)).unwrap();
    }
    // The least-squares optimum of this 3 x 2 system is about 1.54.
    assert!(
        last < 1.6 && last < first.unwrap(),
        "loss {first:?} -> {last}"
    );
}

/// nn layers with public parameter fields train through autograd: mark the fields, run the
/// module, read the gradients by the same tensors.
#[test]
fn nn_linear_through_autograd() {
    use wgtensor::nn::{Forward, Linear};
    let mut lin = Linear::new(device(), 2, 1, true).unwrap();
    lin.weight.set_requires_grad(true).unwrap();
    if let Some(b) = lin.bias.as_mut() {
        b.set_requires_grad(true).unwrap();
    }
    let x = t(&[0.5, -1.0, 2.0, 0.25], &[2, 2]);
    let y = lin.forward(&x).unwrap();
    let g = total(&y).backward().unwrap();
    // d sum(x W^T + b) / dW = column sums of x; / db = batch size.
    let gw = vals(g.get(&lin.weight).unwrap());
    assert_eq!(gw, vec![2.5, -0.75]);
    assert_eq!(vals(g.get(lin.bias.as_ref().unwrap()).unwrap()), vec![2.0]);
}

/// maximum / minimum backward as PyTorch's `where(a == b, g / 2, g).masked_fill(a < b, 0)`
/// (and its mirrors): ties split half and half, and where either operand is NaN both get the
/// whole gradient; a broadcast operand sums its weights.
#[test]
fn maximum_and_minimum_gradients_with_ties_and_nan() {
    let nan = f32::NAN;
    let a = leaf(&[1.0, 2.0, 3.0, nan, 5.0, nan], &[6]);
    let b = leaf(&[2.0, 2.0, 1.0, 1.0, nan, nan], &[6]);
    let g = total(&a.maximum(&b).unwrap()).backward().unwrap();
    assert_eq!(vals(g.get(&a).unwrap()), vec![0.0, 0.5, 1.0, 1.0, 1.0, 1.0]);
    assert_eq!(vals(g.get(&b).unwrap()), vec![1.0, 0.5, 0.0, 1.0, 1.0, 1.0]);
    let g = total(&a.minimum(&b).unwrap()).backward().unwrap();
    assert_eq!(vals(g.get(&a).unwrap()), vec![1.0, 0.5, 0.0, 1.0, 1.0, 1.0]);
    assert_eq!(vals(g.get(&b).unwrap()), vec![0.0, 0.5, 1.0, 1.0, 1.0, 1.0]);
    // b broadcast over a's rows: its gradient sums the rows' weights.
    let x = leaf(&[0.0, 2.0, 4.0, 2.0], &[2, 2]);
    let s = leaf(&[2.0], &[1]);
    let g = total(&x.maximum(&s).unwrap()).backward().unwrap();
    assert_eq!(vals(g.get(&x).unwrap()), vec![0.0, 0.5, 1.0, 0.5]);
    assert_eq!(vals(g.get(&s).unwrap()), vec![2.0]);
}

/// Every leaf's gradient is a tensor of its own, as PyTorch's `.grad`: add's backward hands
/// both inputs one tensor and a sum's a broadcast view of its seed, and a caller's seed can
/// reach a leaf unchanged; writing into one gradient must change no other tensor.
#[test]
fn leaf_gradients_own_their_storage() {
    let a = leaf(&[1.0, 2.0], &[2]);
    let b = leaf(&[3.0, 4.0], &[2]);
    let g = total(&a.add(&b).unwrap()).backward().unwrap();
    let (ga, gb) = (g.get(&a).unwrap(), g.get(&b).unwrap());
    assert!(!ga.shares_storage(gb));
    for t in [ga, gb] {
        assert!(t.is_contiguous() && t.strides() == [1], "{t:?}");
    }
    ga.copy_from(&leaf(&[7.0, 7.0], &[2]).detach()).unwrap();
    assert_eq!(vals(gb), vec![1.0, 1.0]);
    // A seed given by the caller is not handed back as a gradient.
    let seed = leaf(&[5.0, 6.0], &[2]).detach();
    let g = a.add(&b).unwrap().backward_with_grad(&seed).unwrap();
    assert!(!g.get(&a).unwrap().shares_storage(&seed));
    assert!(!g.get(&b).unwrap().shares_storage(&seed));
    assert_eq!(vals(g.get(&b).unwrap()), vec![5.0, 6.0]);
    // backward on a leaf itself: the gradient is a copy of the seed.
    let g = a.backward_with_grad(&seed).unwrap();
    assert!(!g.get(&a).unwrap().shares_storage(&seed));
}

/// Freezing is the leaf's, as PyTorch's flag on the one tensor object: set through any handle
/// (the clones `named_parameters()` returns, `Module::set_requires_grad`), every handle sees
/// it; an optimizer accepts frozen parameters and skips them, and after an unfreeze finds
/// their gradients again (the key is kept). A detached copy is another leaf.
#[test]
fn freezing_is_shared_by_every_handle_of_a_leaf() {
    use wgtensor::nn::{Forward, Linear, Lstm, Module, RnnConfig};
    use wgtensor::optim::{Sgd, SgdOptions};
    let x = t(&[0.5, -1.0, 2.0, 0.25], &[2, 2]);
    let mut lin = Linear::new(device(), 2, 1, true).unwrap();
    let sgd = || SgdOptions {
        lr: 0.5,
        ..Default::default()
    };
    let mut opt = Sgd::new(lin.named_parameters(), sgd()).unwrap();
    // PyTorch's `for p in model.parameters(): p.requires_grad_(False)`, on the clones.
    for (_, mut p) in lin.named_parameters() {
        if p.shape() == [1, 2] {
            p.set_requires_grad(false).unwrap();
        }
    }
    assert!(!lin.weight.is_tracked() && lin.weight.is_leaf());
    let (w0, b0) = (vals(&lin.weight), vals(lin.bias.as_ref().unwrap()));
    let g = total(&lin.forward(&x).unwrap()).backward().unwrap();
    assert!(g.get(&lin.weight).is_none(), "frozen: no gradient");
    opt.step(&g).unwrap();
    assert_eq!(vals(&lin.weight), w0, "skipped");
    assert_eq!(vals(lin.bias.as_ref().unwrap()), vec![b0[0] - 0.5 * 2.0]);
    // Unfrozen through the field: the optimizer built before finds its gradient.
    lin.weight.set_requires_grad(true).unwrap();
    let g = total(&lin.forward(&x).unwrap()).backward().unwrap();
    assert_eq!(vals(g.get(&lin.weight).unwrap()), vec![2.5, -0.75]);
    opt.step(&g).unwrap();
    assert_eq!(
        vals(&lin.weight),
        vec![w0[0] - 0.5 * 2.5, w0[1] + 0.5 * 0.75]
    );
    // An optimizer built over a frozen model is accepted; the module-wide switch.
    lin.set_requires_grad(false).unwrap();
    assert!(lin.named_parameters().iter().all(|(_, p)| !p.is_tracked()));
    let mut opt = Sgd::new(lin.named_parameters(), sgd()).unwrap();
    assert!(!total(&lin.forward(&x).unwrap()).is_tracked());
    lin.set_requires_grad(true).unwrap();
    let g = total(&lin.forward(&x).unwrap()).backward().unwrap();
    let w1 = vals(&lin.weight);
    opt.step(&g).unwrap();
    assert_ne!(vals(&lin.weight), w1);
    // A tensor that never required grad is taken (as PyTorch's optimizers take it) and
    // skipped: no gradient is ever found for it.
    let plain = t(&[1.0], &[1]);
    let mut skip = Sgd::new(vec![plain.clone()], sgd()).unwrap();
    skip.step(&g).unwrap();
    assert_eq!(vals(&plain), vec![1.0]);
    // A detached copy is a leaf of its own.
    let mut d = lin.weight.detach();
    d.set_requires_grad(true).unwrap();
    let g = total(&d.mul_scalar(2.0).unwrap()).backward().unwrap();
    assert!(g.get(&d).is_some() && g.get(&lin.weight).is_none());
    // Frozen after the graph was recorded (a transposed weight built once, kept across
    // steps): the leaf gets nothing, as PyTorch's AccumulateGrad skips it.
    let mut w = leaf(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let wt = w.transpose(0, 1).unwrap();
    let mut opt = Sgd::new(vec![w.clone()], sgd()).unwrap();
    w.set_requires_grad(false).unwrap();
    let g = total(&matmul(&x, &wt).unwrap()).backward().unwrap();
    assert!(g.get(&w).is_none());
    opt.step(&g).unwrap();
    assert_eq!(vals(&w), vec![1.0, 2.0, 3.0, 4.0]);
    // LSTM: its weights are reached only through named_parameters(); frozen there, the
    // layer-by-layer path (dropout between layers, training) leaves them out too.
    let mut lstm = Lstm::new(
        device(),
        2,
        3,
        RnnConfig {
            num_layers: 2,
            dropout: 0.5,
            ..Default::default()
        },
    )
    .unwrap();
    let xs = t(&[0.1, 0.2, -0.3, 0.4, 0.5, -0.6], &[3, 1, 2]);
    lstm.set_requires_grad(false).unwrap();
    let frozen = lstm.named_parameters();
    let mut w = frozen[0].1.clone();
    w.set_requires_grad(true).unwrap(); // weight_ih_l0 alone trains
    for training in [true, false] {
        lstm.set_training(training);
        let g = total(&lstm.forward(&xs).unwrap()).backward().unwrap();
        assert_eq!(g.len(), 1, "training {training}");
        assert!(g.get(&frozen[0].1).is_some());
    }
}

/// A broadcast operand's f16 gradient is summed over every broadcast dim at once in f32 and
/// rounded once, as PyTorch's sum_to: dim by dim, the partial sums would round (2049 rows
/// of 1 held as 2048) or overflow (+-8e4 to +-inf, then NaN).
#[test]
fn f16_broadcast_gradients_round_once() {
    if !device().supports_f16() {
        return;
    }
    let h = |v: &[f32], s: &[usize]| t(v, s).to_dtype(DType::F16).unwrap();
    let f = |x: &Tensor| vals(&x.to_dtype(DType::F32).unwrap());
    let a = Tensor::zeros(device(), &[2049, 3], DType::F16).unwrap();
    let b = h(&[0.0], &[]).requires_grad().unwrap();
    let g = a
        .add(&b)
        .unwrap()
        .sum_dims(&[], false)
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(f(g.get(&b).unwrap()), vec![6148.0], "6147 rounded once");
    let a = Tensor::zeros(device(), &[2, 2], DType::F16).unwrap();
    let seed = h(&[4e4, -4e4, 4e4, -4e4], &[2, 2]);
    for shape in [&[1, 1][..], &[]] {
        let b = Tensor::zeros(device(), shape, DType::F16)
            .unwrap()
            .requires_grad()
            .unwrap();
        let g = a.add(&b).unwrap().backward_with_grad(&seed).unwrap();
        assert_eq!(f(g.get(&b).unwrap()), vec![0.0], "{shape:?}");
        let g = b
            .broadcast_to(&[2, 2])
            .unwrap()
            .backward_with_grad(&seed)
            .unwrap();
        assert_eq!(f(g.get(&b).unwrap()), vec![0.0], "{shape:?}");
    }
}

/// A matmul operand shared over the batch (2-D, or batch dims all 1) gets its gradient from
/// one GEMM that folds the batch into K, as PyTorch's matmul does, not from a batched
/// product the size of [batch, rows, cols] summed afterwards: on a device with 4 MiB of
/// memory, each backward below would otherwise need an 8 MiB intermediate. Values against
/// an f64 reference.
#[test]
fn shared_matmul_operand_gradients_fold_the_batch() {
    let dev = wgtensor::Device::with_options(wgtensor::DeviceOptions {
        memory_limit: Some(4 << 20),
        ..Default::default()
    })
    .unwrap();
    let (batch, m, k) = (64usize, 64usize, 512usize);
    let val = |i: usize, s: usize| ((i * 7 + s * 13) % 17) as f32 / 8.0 - 1.0;
    let upload = |n: usize, s: usize, shape: &[usize]| {
        let v: Vec<f32> = (0..n).map(|i| val(i, s)).collect();
        (Tensor::from_slice(&dev, &v, shape).unwrap(), v)
    };
    // The gradients of sum(a @ b).
    let grads = |a: &Tensor, b: &Tensor| {
        let y = matmul(a, b).unwrap();
        y.sum_all().unwrap().backward().unwrap()
    };
    let check = |what: &str, got: &Tensor, want: &dyn Fn(usize) -> f64| {
        for (i, &x) in got.to_vec::<f32>().unwrap().iter().enumerate() {
            let w = want(i);
            assert!(
                (x as f64 - w).abs() <= 1e-4 * (1.0 + w.abs()),
                "{what}[{i}] {x} vs {w}"
            );
        }
    };
    // dA for a [M, K] (and [1, M, K]) beside b [B, K, 1]: sum_b g_b b_b^T with g = 1.
    for a_shape in [vec![m, k], vec![1, m, k]] {
        let (a, _) = upload(m * k, 1, &a_shape);
        let a = a.requires_grad().unwrap();
        let (b, bv) = upload(batch * k, 2, &[batch, k, 1]);
        assert_eq!(matmul(&a, &b).unwrap().shape(), &[batch, m, 1]);
        let g = grads(&a, &b);
        let da = g.get(&a).unwrap();
        assert_eq!(da.shape(), a_shape.as_slice());
        let want: Vec<f64> = (0..k)
            .map(|kk| (0..batch).map(|bb| bv[bb * k + kk] as f64).sum())
            .collect();
        check("da", da, &|i| want[i % k]);
    }
    // dB for b [1, K, N] beside a [B, 1, K]: sum_b a_b^T g_b.
    let n = 64;
    let (a, av) = upload(batch * k, 3, &[batch, 1, k]);
    let (b, _) = upload(k * n, 4, &[1, k, n]);
    let b = b.requires_grad().unwrap();
    let g = grads(&a, &b);
    let db = g.get(&b).unwrap();
    assert_eq!(db.shape(), &[1, k, n]);
    check("db", db, &|i| {
        (0..batch).map(|bb| av[bb * k + i / n] as f64).sum()
    });
    // An empty batch: zeros of the operand's shape.
    let a = Tensor::ones(&dev, &[3, 4], DType::F32)
        .unwrap()
        .requires_grad()
        .unwrap();
    let b = Tensor::zeros(&dev, &[0, 4, 2], DType::F32).unwrap();
    let g = grads(&a, &b);
    assert_eq!(g.get(&a).unwrap().to_vec::<f32>().unwrap(), vec![0.0; 12]);
}

/// An in-place write into a piece of `split` or `chunk` (or a view of one) of a tracked
/// tensor is refused in PyTorch's multi-output words (test_inplace_on_view_multi_output_unsafe),
/// before the leaf checks; under no_grad it is allowed.
#[test]
fn split_and_chunk_pieces_refuse_in_place_writes_in_pytorchs_words() {
    let a = leaf(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0], &[3, 3]);
    let b = a.add(&a).unwrap();
    let words = "This view is the output of a function that returns multiple views.";
    for base in [&a, &b] {
        let split = base.split(1, 0).unwrap();
        let chunk = base.chunk(3, 0).unwrap();
        for pieces in [split, chunk] {
            let e = pieces[1].copy_from(&pieces[2]).unwrap_err().to_string();
            assert!(
                e.contains(words) && e.contains("Output 1 of Split is a view"),
                "{e}"
            );
            let view = pieces[0].narrow(1, 0, 2).unwrap();
            let e = view
                .copy_from(&t(&[0.0, 0.0], &[1, 2]))
                .unwrap_err()
                .to_string();
            assert!(e.contains(words), "{e}");
        }
    }
    // Plain narrows are not multi-output views, and no_grad writes are fine.
    let e = b
        .narrow(0, 0, 1)
        .unwrap()
        .copy_from(&t(&[0.0; 3], &[1, 3]))
        .unwrap_err();
    assert!(!e.to_string().contains(words), "{e}");
    let pieces = b.split(2, 1).unwrap();
    no_grad(|| pieces[0].copy_from(&t(&[0.0; 6], &[3, 2]))).unwrap();
    assert_eq!(b.to_vec::<f32>().unwrap()[..3], [0.0, 0.0, 6.0]);
}

/// `flatten(d, d)` is the tensor itself (PyTorch's test_flatten_nonview), so a leaf stays a
/// leaf with its own gradient; an empty split's one piece is a multi-output view too.
#[test]
fn flatten_of_one_dim_is_the_tensor_and_empty_split_pieces_are_multi_output() {
    let w = leaf(&[1.0, 2.0, 3.0], &[3]);
    let v = w.flatten(0, -1).unwrap();
    assert!(v.is_leaf());
    let g = v.mul(&v).unwrap().sum_all().unwrap().backward().unwrap();
    assert_eq!(
        g.get(&v).unwrap().to_vec::<f32>().unwrap(),
        vec![2.0, 4.0, 6.0]
    );
    let m = leaf(&[1.0; 6], &[2, 3]);
    assert!(m.flatten(1, 1).unwrap().is_leaf());
    assert!(!m.flatten(0, 1).unwrap().is_leaf());
    let b = Tensor::zeros(device(), &[0, 2], DType::F32)
        .unwrap()
        .requires_grad()
        .unwrap()
        .mul_scalar(2.0)
        .unwrap();
    for pieces in [b.split(1, 0).unwrap(), b.split(0, 0).unwrap()] {
        let e = pieces[0]
            .copy_from(&Tensor::zeros(device(), &[0, 2], DType::F32).unwrap())
            .unwrap_err();
        assert!(e.to_string().contains("returns multiple views"), "{e}");
    }
}

/// split's pieces share one node (PyTorch's SplitBackward0): the gradient joins the pieces'
/// gradients, zeros where a piece got none, f16 too; the pieces stay views of the input.
#[test]
fn split_pieces_share_one_node_whose_gradient_joins_theirs() {
    for dtype in [DType::F32, DType::F16] {
        if dtype == DType::F16 && !device().supports_f16() {
            continue;
        }
        let x = t(&[1.0; 12], &[2, 6])
            .to_dtype(dtype)
            .unwrap()
            .requires_grad()
            .unwrap();
        let p = x.split(2, 1).unwrap();
        assert!(p.iter().all(|q| q.shares_storage(&x) && q.is_tracked()));
        let loss = p[0]
            .sum_all()
            .unwrap()
            .add(&p[2].mul_scalar(2.0).unwrap().sum_all().unwrap())
            .unwrap();
        let g = loss.backward().unwrap();
        let gx = g.get(&x).unwrap().to_dtype(DType::F32).unwrap();
        let row = [1.0, 1.0, 0.0, 0.0, 2.0, 2.0];
        assert_eq!(
            gx.to_vec::<f32>().unwrap(),
            [row, row].concat(),
            "{dtype:?}"
        );
    }
}
