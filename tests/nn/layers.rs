//! Layers: default-initialization bounds, forwards equal to the functional ops, convolution and
//! embedding layers, PyTorch's constructor arguments and composed activations.

use super::*;

#[test]
fn default_initialization_bounds() {
    let l = nn::Linear::new(dev(), 200, 50, true).unwrap();
    let b = 1.0 / 200f32.sqrt();
    assert!(vals(&l.weight).iter().all(|v| v.abs() <= b));
    assert!(vals(l.bias.as_ref().unwrap()).iter().all(|v| v.abs() <= b));
    let c = nn::Conv2d::new(dev(), 8, 16, 3, Default::default()).unwrap();
    let b = 1.0 / 72f32.sqrt();
    assert!(vals(&c.weight).iter().all(|v| v.abs() <= b));
    assert_eq!(c.weight.shape(), &[16, 8, 3, 3]);
    let bn = nn::BatchNorm2d::new(dev(), 3).unwrap();
    assert_eq!(vals(bn.weight.as_ref().unwrap()), vec![1.0; 3]);
    assert!(nn::Conv2d::new(
        dev(),
        3,
        4,
        3,
        nn::Conv2dConfig {
            groups: 2,
            ..Default::default()
        }
    )
    .is_err());
}

#[test]
fn forwards_match_the_functional_ops() {
    let x = wgtensor::ops::randn(dev(), &[2, 1, 8, 8], DType::F32).unwrap();
    let c = nn::Conv2d::new(dev(), 1, 4, 3, Default::default()).unwrap();
    let want = vals(&conv2d(&x, &c.weight, c.bias.as_ref(), &c.options).unwrap());
    assert_eq!(vals(&c.forward(&x).unwrap()), want);
    let l = nn::Linear::new(dev(), 8, 3, true).unwrap();
    let xs = wgtensor::ops::randn(dev(), &[5, 8], DType::F32).unwrap();
    let y = vals(&l.forward(&xs).unwrap());
    let (xv, wv, bv) = (vals(&xs), vals(&l.weight), vals(l.bias.as_ref().unwrap()));
    for r in 0..5 {
        for o in 0..3 {
            let want: f32 = bv[o] + (0..8).map(|i| xv[r * 8 + i] * wv[o * 8 + i]).sum::<f32>();
            assert!((y[r * 3 + o] - want).abs() < 1e-4, "{r} {o}");
        }
    }
    // An unbatched [in] input gives [out], row 0's values (PyTorch's 1-D Linear).
    let one = l
        .forward(&xs.narrow(0, 0, 1).unwrap().squeeze(0).unwrap())
        .unwrap();
    assert_eq!(one.shape(), &[3]);
    assert_eq!(vals(&one), y[..3].to_vec());
    // The whole model runs; eval mode makes it deterministic (no dropout, running stats).
    let mut m = cnn();
    let xi = wgtensor::ops::randn(dev(), &[3, 1, 8, 8], DType::F32).unwrap();
    assert_eq!(m.forward(&xi).unwrap().shape(), &[3, 3]);
    m.eval();
    assert!(!m.is_training());
    assert_eq!(
        vals(&m.forward(&xi).unwrap()),
        vals(&m.forward(&xi).unwrap())
    );
}

/// Conv1d, ConvTranspose2d and Embedding: PyTorch's weight layouts and init bounds, forwards
/// equal to the functional ops, gradients reaching every parameter, the padding row.
#[test]
fn conv1d_conv_transpose2d_and_embedding_layers() {
    use wgtensor::ops::{conv1d, conv_transpose2d, embedding};
    let c1 = nn::Conv1d::new(
        dev(),
        4,
        6,
        3,
        nn::Conv2dConfig {
            padding: 1,
            groups: 2,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(c1.weight.shape(), &[6, 2, 3]);
    let b = 1.0 / 6f32.sqrt();
    assert!(vals(&c1.weight).iter().all(|v| v.abs() <= b));
    assert!(vals(c1.bias.as_ref().unwrap()).iter().all(|v| v.abs() <= b));
    let x = wgtensor::ops::randn(dev(), &[2, 4, 10], DType::F32).unwrap();
    let want = vals(&conv1d(&x, &c1.weight, c1.bias.as_ref(), &c1.options).unwrap());
    let y = c1.forward(&x).unwrap();
    assert_eq!((y.shape(), vals(&y)), (&[2, 6, 10][..], want));
    let g = y.sum_all().unwrap().backward().unwrap();
    assert!(g.get(&c1.weight).is_some() && g.get(c1.bias.as_ref().unwrap()).is_some());

    let ct = nn::ConvTranspose2d::new(
        dev(),
        6,
        4,
        3,
        nn::ConvTranspose2dConfig {
            stride: 2,
            padding: 1,
            output_padding: 1,
            ..Default::default()
        },
    )
    .unwrap();
    // PyTorch's transposed layout [in, out / groups, k, k]; fan-in from dim 1: 4 * 9.
    assert_eq!(ct.weight.shape(), &[6, 4, 3, 3]);
    let b = 1.0 / 36f32.sqrt();
    assert!(vals(&ct.weight).iter().all(|v| v.abs() <= b));
    let x = wgtensor::ops::randn(dev(), &[1, 6, 5, 5], DType::F32).unwrap();
    let y = ct.forward(&x).unwrap();
    assert_eq!(y.shape(), &[1, 4, 10, 10]);
    let want = vals(&conv_transpose2d(&x, &ct.weight, ct.bias.as_ref(), &ct.options).unwrap());
    assert_eq!(vals(&y), want);
    let names: Vec<String> = ct.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["weight", "bias"]);
    assert!(nn::ConvTranspose2d::new(
        dev(),
        6,
        4,
        3,
        nn::ConvTranspose2dConfig {
            groups: 4,
            ..Default::default()
        }
    )
    .is_err());

    let emb = nn::Embedding::new(dev(), 50, 8, Some(-1)).unwrap();
    assert_eq!(emb.padding_idx, Some(49));
    let w = vals(&emb.weight);
    // +0.0 as PyTorch's fill, never -0.0.
    assert!(w[49 * 8..].iter().all(|&v| v.to_bits() == 0));
    let mean = w.iter().map(|&v| v as f64).sum::<f64>() / (49.0 * 8.0);
    assert!(mean.abs() < 0.3, "N(0, 1) init: mean {mean}");
    let ids = Tensor::from_slice(dev(), &[3i32, 49, 3, 10], &[2, 2]).unwrap();
    let y = emb.forward(&ids).unwrap();
    assert_eq!(y.shape(), &[2, 2, 8]);
    assert_eq!(
        vals(&y),
        vals(&embedding(&ids, &emb.weight, Some(49)).unwrap())
    );
    let g = y.sum_all().unwrap().backward().unwrap();
    let gw = vals(g.get(&emb.weight).unwrap());
    assert!(gw[3 * 8..4 * 8].iter().all(|&v| v == 2.0));
    assert!(gw[10 * 8..11 * 8].iter().all(|&v| v == 1.0));
    assert!(gw[49 * 8..].iter().all(|&v| v == 0.0), "the padding row");
    assert_eq!(emb.state_dict()[0].0, "weight");
    assert!(nn::Embedding::new(dev(), 5, 2, Some(5)).is_err());
}

/// PyTorch's unbatched convolution input (`[C, L]`, `[C, H, W]`): the layers and the ops give
/// the batch-of-one result without its batch dim, and the input's gradient has the input's
/// shape and the batched gradient's values.
#[test]
fn conv_layers_take_unbatched_input() {
    use wgtensor::ops::conv_transpose1d;
    let cfg = nn::Conv2dConfig {
        padding: 1,
        groups: 2,
        ..Default::default()
    };
    let c1 = nn::Conv1d::new(dev(), 4, 6, 3, cfg).unwrap();
    let c2 = nn::Conv2d::new(dev(), 4, 6, 3, cfg).unwrap();
    let ct = nn::ConvTranspose2d::new(
        dev(),
        4,
        6,
        3,
        nn::ConvTranspose2dConfig {
            stride: 2,
            ..Default::default()
        },
    )
    .unwrap();
    let wt1 = wgtensor::ops::randn(dev(), &[4, 3, 2], DType::F32).unwrap();
    let t1 = |x: &Tensor| conv_transpose1d(x, &wt1, None, &Default::default());
    type Case<'a> = (
        &'a dyn Fn(&Tensor) -> wgtensor::Result<Tensor>,
        &'a [usize],
        &'a [usize],
    );
    let cases: [Case; 4] = [
        (&|x| c1.forward(x), &[4, 7], &[6, 7]),
        (&|x| c2.forward(x), &[4, 5, 6], &[6, 5, 6]),
        (&|x| ct.forward(x), &[4, 3, 2], &[6, 7, 5]),
        (&t1, &[4, 5], &[3, 6]),
    ];
    for (f, shape, out) in cases {
        let x = wgtensor::ops::randn(dev(), shape, DType::F32)
            .unwrap()
            .requires_grad()
            .unwrap();
        let y = f(&x).unwrap();
        assert_eq!(y.shape(), out, "input {shape:?}");
        let xb = x.detach().unsqueeze(0).unwrap().requires_grad().unwrap();
        let yb = f(&xb).unwrap();
        assert_eq!(&yb.shape()[1..], out);
        assert_eq!(vals(&y), vals(&yb), "input {shape:?}");
        let w = wgtensor::ops::randn(dev(), out, DType::F32).unwrap();
        let g = y.mul(&w).unwrap().sum_all().unwrap().backward().unwrap();
        let gb = yb
            .mul(&w.unsqueeze(0).unwrap())
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let (gx, gxb) = (g.get(&x).unwrap(), gb.get(&xb).unwrap());
        assert_eq!(gx.shape(), shape);
        assert_eq!(vals(gx), vals(gxb), "input {shape:?}");
    }
    // Neither batched nor unbatched.
    let e = c2
        .forward(&Tensor::zeros(dev(), &[4, 5], DType::F32).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("3-D [C, H, W]") && e.contains("[4, 5]"), "{e}");
}

/// Construction refuses what PyTorch's constructors refuse: an RNN with hidden_size or
/// num_layers 0, attention with embed_dim or num_heads 0.
#[test]
fn zero_sizes_are_refused_at_construction() {
    for (h, layers, what) in [(0, 1, "hidden_size"), (4, 0, "num_layers")] {
        let c = nn::RnnConfig {
            num_layers: layers,
            ..Default::default()
        };
        for e in [
            nn::Lstm::new(dev(), 3, h, c).unwrap_err(),
            nn::Gru::new(dev(), 3, h, c).unwrap_err(),
        ] {
            let e = e.to_string();
            assert!(e.contains(what) && e.contains("greater than zero"), "{e}");
        }
    }
    for (e, h) in [(0, 1), (4, 0)] {
        let err = nn::MultiheadAttention::new(dev(), e, h, Default::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("must be greater than 0"), "{err}");
    }
}

/// A Sequential's layer error names the layer's type: a boxed layer by its contents, LSTM and
/// GRU (one Rust type) by PyTorch's class names.
#[test]
fn sequential_errors_name_boxed_and_recurrent_layers() {
    let lin: Box<dyn Forward> = Box::new(nn::Linear::new(dev(), 4, 2, true).unwrap());
    let seq = nn::Sequential::new().push(nn::ReLU).push(lin);
    let bad = Tensor::zeros(dev(), &[2, 3], DType::F32).unwrap();
    let e = seq.forward(&bad).unwrap_err().to_string();
    assert!(e.starts_with("1 (Linear):"), "{e}");
    let seq = nn::Sequential::new()
        .push(nn::Lstm::new(dev(), 4, 2, Default::default()).unwrap())
        .push(nn::Gru::new(dev(), 4, 2, Default::default()).unwrap());
    let e = seq.forward(&bad).unwrap_err().to_string();
    assert!(e.starts_with("0 (LSTM):"), "{e}");
    let x = Tensor::zeros(dev(), &[5, 1, 4], DType::F32).unwrap();
    let e = seq.forward(&x).unwrap_err().to_string();
    assert!(e.starts_with("1 (GRU):"), "{e}");
}

/// The constructors PyTorch users reach for: a non-square, strided, dilated Conv2d with
/// per-side padding; BatchNorm's eps, momentum and affine; pools from a size; loading the part
/// of a state dict under a prefix.
#[test]
fn pytorch_constructor_arguments() {
    use wgtensor::ops::{Conv2dOptions, Padding};
    let d = dev();
    let o = Conv2dOptions {
        stride: [2, 1],
        padding: Padding {
            top: 1,
            bottom: 1,
            left: 2,
            right: 2,
        },
        dilation: [1, 2],
        ..Default::default()
    };
    let conv = nn::Conv2d::with_options(d, 3, 4, [3, 5], o, false).unwrap();
    assert_eq!(conv.weight.shape(), &[4, 3, 3, 5]);
    assert!(conv.bias.is_none());
    let y = conv
        .forward(&Tensor::zeros(d, &[1, 3, 8, 9], DType::F32).unwrap())
        .unwrap();
    // H: (8 + 2 - 3) / 2 + 1 = 4; W: (9 + 4 - 2 * 4 - 1) / 1 + 1 = 5.
    assert_eq!(y.shape(), &[1, 4, 4, 5]);
    assert!(
        nn::Conv2d::with_options(d, 3, 4, [3, 3], Conv2dOptions { groups: 2, ..o }, true).is_err()
    );

    let bn = nn::BatchNorm2d::with_config(
        d,
        3,
        nn::BatchNormConfig {
            eps: 1e-3,
            momentum: None,
            affine: false,
        },
    )
    .unwrap();
    assert_eq!(bn.eps, 1e-3);
    assert!(bn.weight.is_none() && bn.bias.is_none());
    assert_eq!(bn.state.borrow().momentum, None);
    let names: Vec<String> = bn.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        ["running_mean", "running_var", "num_batches_tracked"]
    );
    // eps 0 is PyTorch's to allow; a negative or infinite one is refused under the layer's
    // own name.
    let eps = |eps: f64| nn::BatchNormConfig {
        eps,
        ..Default::default()
    };
    // eps is F.batch_norm's to check, at the forward (common_modules' error inputs build
    // the layer with eps 0 and -1): positive in training, non-negative in evaluation.
    let mut bn = nn::BatchNorm1d::with_config(d, 3, eps(0.0)).unwrap();
    let x3 = Tensor::ones(d, &[2, 3], DType::F32).unwrap();
    let e = bn.forward(&x3).unwrap_err().to_string();
    assert!(
        e.contains("eps must be positive during training, but got 0.0"),
        "{e}"
    );
    bn.eval();
    assert_eq!(bn.forward(&x3).unwrap().shape(), &[2, 3]);
    let mut bn = nn::BatchNorm2d::with_config(d, 3, eps(-1.0)).unwrap();
    bn.eval();
    let e = bn
        .forward(&Tensor::ones(d, &[1, 3, 2, 2], DType::F32).unwrap())
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("eps must be non-negative, but got -1.0"),
        "{e}"
    );
    // nn.Dropout's constructor check (test_invalid_dropout_p), p as Python prints it.
    for (p, shown) in [(-0.1, "-0.1"), (1.1, "1.1")] {
        let e = nn::Dropout::try_new(p).unwrap_err().to_string();
        let words = format!("dropout probability has to be between 0 and 1, but got {shown}");
        assert!(e.contains(&words), "{e}");
    }
    // NaN passes `p < 0 or p > 1`; the forward's check refuses it.
    let nan = nn::Dropout::try_new(f64::NAN).unwrap();
    let e = nan.forward(&x3).unwrap_err().to_string();
    assert!(e.contains("but got nan"), "{e}");
    assert_eq!(nn::Dropout::try_new(1.0).unwrap().p, 1.0);
    // nn.Dropout()'s default p.
    let dflt = nn::Dropout::default();
    assert_eq!((dflt.p, dflt.training), (0.5, true));
    // _check_input_dim's words.
    let e = bn.forward(&x3).unwrap_err().to_string();
    assert!(e.contains("expected 4D input (got 2D input)"), "{e}");

    let x = Tensor::ones(d, &[1, 1, 4, 4], DType::F32).unwrap();
    assert_eq!(
        nn::MaxPool2d::new(2).forward(&x).unwrap().shape(),
        &[1, 1, 2, 2]
    );
    // return_indices=True: each window's first maximum, as a flat index in its plane.
    let r: Vec<f32> = (0..16).map(|i| ((i * 7) % 16) as f32).collect();
    let xr = Tensor::from_slice(d, &r, &[1, 1, 4, 4]).unwrap();
    let (v, idx) = nn::MaxPool2d::new(2).forward_with_indices(&xr).unwrap();
    assert_eq!(v.to_vec::<f32>().unwrap(), vec![12.0, 14.0, 15.0, 13.0]);
    assert_eq!(idx.to_vec::<i32>().unwrap(), vec![4, 2, 9, 11]);
    assert_eq!(
        nn::AvgPool2d::new(4)
            .forward(&x)
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![1.0]
    );

    let w = Tensor::zeros(d, &[2], DType::F32).unwrap();
    let bytes = wgtensor::io::save_safetensors(&[
        ("encoder.0.weight", &w),
        ("encoderx.w", &w),
        ("head.weight", &w),
    ])
    .unwrap();
    let all = wgtensor::io::load_safetensors(d, &bytes).unwrap();
    let enc = wgtensor::io::select_prefix(&all, "encoder.");
    assert_eq!(enc.keys().collect::<Vec<_>>(), ["0.weight"]);
    assert_eq!(wgtensor::io::select_prefix(&all, "").len(), 3);
}

/// The composed activations MobileNets and classifiers use, against their PyTorch formulas
/// (infinities and NaN included), and a gradient through one.
#[test]
fn composed_activations_match_pytorch() {
    let d = dev();
    let xs = [
        -8.0f32,
        -3.0,
        -1.5,
        0.0,
        0.5,
        3.0,
        7.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ];
    let x = Tensor::from_slice(d, &xs, &[xs.len()]).unwrap();
    let relu6 = |v: f32| v.clamp(0.0, 6.0);
    let check = |name: &str, got: Tensor, f: &dyn Fn(f32) -> f32| {
        let got = got.to_vec::<f32>().unwrap();
        for (g, &v) in got.iter().zip(&xs) {
            let w = f(v);
            assert!(
                (g.is_nan() && w.is_nan()) || g == &w || (g - w).abs() <= 1e-6 * w.abs().max(1.0),
                "{name}({v}) = {g}, expected {w}"
            );
        }
    };
    check("relu6", nn::ReLU6.forward(&x).unwrap(), &relu6);
    check("hardsigmoid", nn::Hardsigmoid.forward(&x).unwrap(), &|v| {
        relu6(v + 3.0) / 6.0
    });
    check("hardswish", nn::Hardswish.forward(&x).unwrap(), &|v| {
        if v == f32::NEG_INFINITY {
            f32::NAN // -inf * 0, as PyTorch's x * relu6(x + 3) / 6 composition gives
        } else {
            v * relu6(v + 3.0) / 6.0
        }
    });
    let leaky = nn::LeakyReLU {
        negative_slope: 0.1,
    };
    check("leaky_relu", leaky.forward(&x).unwrap(), &|v| {
        if v > 0.0 {
            v
        } else {
            0.1 * v
        }
    });
    let nan = Tensor::from_slice(d, &[f32::NAN], &[1]).unwrap();
    assert!(leaky.forward(&nan).unwrap().to_vec::<f32>().unwrap()[0].is_nan());
    let p = nn::Softmax { dim: -1 }
        .forward(&Tensor::from_slice(d, &[0.0f32, 0.0], &[1, 2]).unwrap())
        .unwrap();
    assert_eq!(p.to_vec::<f32>().unwrap(), vec![0.5, 0.5]);
    assert!(nn::ReLU6.named_parameters().is_empty());

    // PyTorch's gradients at the kinks: hardtanh (ReLU6, Hardsigmoid) is 0 at its bounds;
    // hardswish is 0 at -3 and 1 at 3 (hardswish_backward since pytorch/pytorch#148049).
    let kinks = [-4.0f32, -3.0, -1.0, 0.0, 3.0, 6.0, 7.0, f32::NAN];
    let grad = |layer: &dyn Forward| {
        let x = Tensor::from_slice(d, &kinks, &[kinks.len()])
            .unwrap()
            .requires_grad()
            .unwrap();
        let y = layer.forward(&x).unwrap();
        let g = y.sum_all().unwrap().backward().unwrap();
        g.get(&x).unwrap().to_vec::<f32>().unwrap()
    };
    let same = |got: Vec<f32>, want: [f32; 8], name: &str| {
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g.is_nan() && w.is_nan()) || (g - w).abs() < 1e-6,
                "{name}: {got:?} vs {want:?}"
            );
        }
    };
    same(grad(&nn::ReLU6), [0., 0., 0., 0., 1., 0., 0., 1.], "relu6");
    let s = 1.0 / 6.0;
    // Hardsigmoid passes strictly inside (-3, 3) only, so NaN gets 0 (PyTorch's
    // hardsigmoid_backward), where hardtanh passes it.
    same(
        grad(&nn::Hardsigmoid),
        [0., 0., s, s, 0., 0., 0., 0.],
        "hardsigmoid",
    );
    // The masks test x itself: just below 3, x + 3 rounds to 6 but the slope is still 1/6.
    let below3 = Tensor::from_slice(d, &[3.0f32 - 2f32.powi(-22)], &[1])
        .unwrap()
        .requires_grad()
        .unwrap();
    let g = nn::Hardsigmoid
        .forward(&below3)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(g.get(&below3).unwrap().to_vec::<f32>().unwrap(), vec![s]);
    let h = nn::Hardtanh::default();
    same(grad(&h), [0., 0., 0., 1., 0., 0., 0., 1.], "hardtanh");
    let hv = h
        .forward(&Tensor::from_slice(d, &kinks, &[8]).unwrap())
        .unwrap();
    let hv = hv.to_vec::<f32>().unwrap();
    assert_eq!(&hv[..7], &[-1.0, -1.0, -1.0, 0.0, 1.0, 1.0, 1.0]);
    assert!(hv[7].is_nan());
    let hs = grad(&nn::Hardswish);
    assert_eq!(
        (hs[0], hs[1], hs[3], hs[4], hs[5]),
        (0.0, 0.0, 0.5, 1.0, 1.0)
    );
    assert!(hs[7].is_nan(), "hardswish at NaN: {}", hs[7]);
    // Just above 3, x + 3 rounds to 6, but the masks test x: the slope is 1 there (f32 and
    // f16), where a clamp's gradient of the rounded sum gave 1.5.
    for dtype in [wgtensor::DType::F32, wgtensor::DType::F16] {
        if dtype == wgtensor::DType::F16 && !d.supports_f16() {
            continue;
        }
        let above = if dtype == wgtensor::DType::F16 {
            3.0 + 2f32.powi(-9)
        } else {
            3.0 + 2f32.powi(-22)
        };
        let x = Tensor::from_slice(d, &[above], &[1])
            .unwrap()
            .to_dtype(dtype)
            .unwrap()
            .requires_grad()
            .unwrap();
        let g = nn::Hardswish
            .forward(&x)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let g = g.get(&x).unwrap().to_dtype(wgtensor::DType::F32).unwrap();
        assert_eq!(g.to_vec::<f32>().unwrap(), vec![1.0], "{dtype:?}");
    }
    // Below -3 the gradient is an exact 0 (PyTorch's hardswish_backward), even for an
    // infinite incoming gradient; the value keeps x * 0's sign.
    let low = Tensor::from_slice(d, &[-4.0f32], &[1])
        .unwrap()
        .requires_grad()
        .unwrap();
    let y = nn::Hardswish.forward(&low).unwrap();
    assert!(y.to_vec::<f32>().unwrap()[0].is_sign_negative());
    let l = y.mul_scalar(f64::INFINITY).unwrap().sum_all().unwrap();
    assert_eq!(
        l.backward()
            .unwrap()
            .get(&low)
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![0.0]
    );
    let bad = nn::Hardtanh {
        min_val: 1.0,
        max_val: 1.0,
    };
    let e = bad.forward(&x).unwrap_err().to_string();
    assert!(
        e.starts_with("Hardtanh") && e.contains("max_val (1.0) must be greater than min_val (1.0)"),
        "{e}"
    );
    // A NaN bound passes PyTorch's `max_val <= min_val` assertion; the result is all NaN.
    let nan = nn::Hardtanh {
        min_val: f64::NAN,
        max_val: 1.0,
    };
    let y = nan.forward(&x).unwrap().to_vec::<f32>().unwrap();
    assert!(y.iter().all(|v| v.is_nan()), "{y:?}");

    // d/dx leaky_relu = 1 for x > 0, slope elsewhere.
    let w = Tensor::from_slice(d, &[-2.0f32, 3.0], &[2])
        .unwrap()
        .requires_grad()
        .unwrap();
    let g = leaky
        .forward(&w)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let gw = g.get(&w).unwrap().to_vec::<f32>().unwrap();
    assert!((gw[0] - 0.1).abs() < 1e-7 && gw[1] == 1.0, "{gw:?}");
}

/// PyTorch's convolution of an input without channels (test_conv_empty_channel,
/// test_conv_backend's empty_channel cases): an empty result with 0 output channels, zero
/// gradients for the input, the weight and the bias; a weight expecting channels still errors.
#[test]
fn convolutions_of_inputs_without_channels() {
    let d = dev();
    let c1 = nn::Conv1d::new(
        d,
        0,
        8,
        2,
        nn::Conv2dConfig {
            stride: 2,
            ..Default::default()
        },
    )
    .unwrap();
    let x = Tensor::zeros(d, &[2, 0, 15], DType::F32)
        .unwrap()
        .requires_grad()
        .unwrap();
    let y = c1.forward(&x).unwrap();
    assert_eq!(y.shape(), [2, 0, 7]);
    let g = y.sum_all().unwrap().backward().unwrap();
    assert_eq!(g.get(&x).unwrap().shape(), [2, 0, 15]);
    assert_eq!(g.get(&c1.weight).unwrap().shape(), [8, 0, 2]);
    let db = g.get(c1.bias.as_ref().unwrap()).unwrap();
    assert_eq!(vals(db), [0.0; 8]);
    let c2 = nn::Conv2d::new(
        d,
        0,
        33,
        3,
        nn::Conv2dConfig {
            stride: 2,
            ..Default::default()
        },
    )
    .unwrap();
    let x = Tensor::zeros(d, &[2, 0, 50, 100], DType::F32).unwrap();
    assert_eq!(c2.forward(&x).unwrap().shape(), [2, 0, 24, 49]);
    // Grouped, functional, unbatched.
    let w = Tensor::zeros(d, &[12, 0, 3, 3], DType::F32).unwrap();
    let o = wgtensor::ops::Conv2dOptions {
        groups: 3,
        ..Default::default()
    };
    let x = Tensor::zeros(d, &[2, 0, 7, 8], DType::F32).unwrap();
    assert_eq!(conv2d(&x, &w, None, &o).unwrap().shape(), [2, 0, 5, 6]);
    let x = Tensor::zeros(d, &[0, 7, 8], DType::F32).unwrap();
    assert_eq!(conv2d(&x, &w, None, &o).unwrap().shape(), [0, 5, 6]);
    // The output channels of an empty result are no extent the kernels' limits guard.
    let x = Tensor::zeros(d, &[1, 0, 64, 64], DType::F32).unwrap();
    let w = Tensor::zeros(d, &[1 << 19, 0, 1, 1], DType::F32).unwrap();
    let y = conv2d(&x, &w, None, &Default::default()).unwrap();
    assert_eq!(y.shape(), [1, 0, 64, 64]);
    let o3 = wgtensor::ops::Conv2dOptions {
        groups: 3,
        ..Default::default()
    };
    let w = Tensor::zeros(d, &[4, 0, 1, 1], DType::F32).unwrap();
    let e = conv2d(&x, &w, None, &o3).unwrap_err().to_string();
    assert!(
        e.contains("expected weight to be divisible by 3 at dimension 0"),
        "{e}"
    );
    let w0 = Tensor::zeros(d, &[0, 0, 1, 1], DType::F32).unwrap();
    let e = conv2d(&x, &w0, None, &Default::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("expected weight to be at least 1 at dimension 0"),
        "{e}"
    );
    // No kernel runs: the kernels' extent limits do not apply.
    let huge = Tensor::zeros(d, &[1, 0, 46341, 46341], DType::F32).unwrap();
    let w1 = Tensor::zeros(d, &[1, 0, 1, 1], DType::F32).unwrap();
    let y = conv2d(&huge, &w1, None, &Default::default()).unwrap();
    assert_eq!(y.shape(), [1, 0, 46341, 46341]);
    // A kernel larger than the input, or a weight with channels, still errors.
    let x = Tensor::zeros(d, &[2, 0, 2, 2], DType::F32).unwrap();
    assert!(conv2d(&x, &w, None, &o).is_err());
    let w1 = Tensor::zeros(d, &[8, 1, 3, 3], DType::F32).unwrap();
    assert!(conv2d(
        &Tensor::zeros(d, &[2, 0, 7, 8], DType::F32).unwrap(),
        &w1,
        None,
        &Default::default()
    )
    .is_err());
}

/// nn::ConvTranspose1d against PyTorch's (torch 2.15, seed 0): the weight layout, names, the
/// initialization bound (1 / sqrt(fan_in), fan_in = out / groups * k) and the output with
/// PyTorch's weights loaded, stride 2, padding 1, output_padding 1, groups 2.
#[test]
fn conv_transpose_1d_matches_pytorch() {
    let d = dev();
    let cfg = nn::ConvTranspose2dConfig {
        stride: 2,
        padding: 1,
        output_padding: 1,
        groups: 2,
        ..Default::default()
    };
    let mut m = nn::ConvTranspose1d::new(d, 4, 6, 3, cfg).unwrap();
    assert_eq!(m.weight.shape(), &[4, 3, 3]);
    let names: Vec<String> = m.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["weight", "bias"]);
    let bound = 1.0 / 9f32.sqrt();
    assert!(vals(&m.weight).iter().all(|v| v.abs() <= bound));
    assert!(vals(m.bias.as_ref().unwrap())
        .iter()
        .all(|v| v.abs() <= bound));
    let w: Vec<f32> = [
        -0.002_495_607,
        0.178_814_53,
        -0.274_348_38,
        -0.245_313_02,
        -0.128_384_8,
        0.089_385_79,
        -0.006_604_393,
        0.264_296_5,
        -0.029_581_35,
        0.088_204_19,
        -0.100_737_69,
        -0.065_521_8,
        -0.318_449_5,
        -0.220_760_7,
        -0.137_407_7,
        0.012_347_857,
        0.131_778_4,
        0.200_007_6,
        -0.225_980_37,
        -0.145_154_28,
        0.121_072_37,
        0.276_796,
        -0.068_600_06,
        0.249_437_26,
        -0.053_727_787,
        0.035_271_37,
        0.301_825_4,
        -0.309_223_47,
        -0.209_845_99,
        -0.084_388_42,
        -0.129_933_33,
        0.288_000_3,
        -0.216_059_89,
        -0.153_444_29,
        -0.232_880_16,
        -0.312_187,
    ]
    .iter()
    .map(|&v: &f64| v as f32)
    .collect();
    let b: Vec<f32> = [
        -0.194_580_17f64,
        0.286_532_7,
        0.148_739_46,
        0.161_557_53,
        0.017_530_521,
        -0.170_894_5,
    ]
    .iter()
    .map(|&v| v as f32)
    .collect();
    let sd = std::collections::HashMap::from([
        (
            "weight".to_string(),
            Tensor::from_slice(d, &w, &[4, 3, 3]).unwrap(),
        ),
        ("bias".to_string(), Tensor::from_slice(d, &b, &[6]).unwrap()),
    ]);
    m.load_state_dict(&sd, true).unwrap();
    let xv: Vec<f32> = (0..40).map(|i| i as f32 * 0.1).collect();
    let y = m
        .forward(&Tensor::from_slice(d, &xv, &[2, 4, 5]).unwrap())
        .unwrap();
    assert_eq!(y.shape(), &[2, 6, 10]);
    let want: Vec<f32> = [
        -0.244949f64,
        -0.174668,
        -0.237141,
        -0.200084,
        -0.229334,
        -0.2255,
        -0.221526,
        -0.250917,
    ]
    .iter()
    .map(|&v| v as f32)
    .collect();
    for (g, w) in vals(&y).iter().zip(&want) {
        assert!((g - w).abs() <= 2e-6, "{g} vs PyTorch's {w}");
    }
}
