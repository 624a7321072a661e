//! Layers: PyTorch's state-dict names and order, default-initialization bounds, forwards equal
//! to the functional ops, BatchNorm's train/eval modes and counters, and a state dict saved to
//! safetensors and loaded into a fresh model (strict and not). `#[derive(Module)]` models:
//! names and order as PyTorch's for the equivalent `nn.Module`, `eval()` reaching nested
//! layers, save/load round trips, the containers.
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

use wgtensor::io::{load_safetensors, save_safetensors};
use wgtensor::nn::{self, Forward, Module};
use wgtensor::ops::{conv2d, AvgPool2dOptions, MaxPool2dOptions};
use wgtensor::{DType, Device, Tensor};

fn dev() -> &'static Device {
    static DEV: std::sync::OnceLock<Device> = std::sync::OnceLock::new();
    DEV.get_or_init(|| Device::new().expect("device"))
}

fn vals(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

fn cnn() -> nn::Sequential {
    let d = dev();
    nn::Sequential::new()
        .push(
            nn::Conv2d::new(
                d,
                1,
                4,
                3,
                nn::Conv2dConfig {
                    padding: 1,
                    ..Default::default()
                },
            )
            .unwrap(),
        )
        .push(nn::BatchNorm2d::new(d, 4).unwrap())
        .push(nn::ReLU)
        .push(nn::MaxPool2d(MaxPool2dOptions::new(2)))
        .push(
            nn::Conv2d::new(
                d,
                4,
                4,
                3,
                nn::Conv2dConfig {
                    padding: 1,
                    groups: 4,
                    bias: false,
                    ..Default::default()
                },
            )
            .unwrap(),
        )
        .push(nn::AvgPool2d(AvgPool2dOptions::new(2)))
        .push(nn::Flatten)
        .push(nn::Dropout::new(0.5))
        .push(nn::Linear::new(d, 4 * 2 * 2, 3, true).unwrap())
}

#[test]
fn state_dict_names_follow_pytorch() {
    let m = cnn();
    let names: Vec<String> = m.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "0.weight",
            "0.bias",
            "1.weight",
            "1.bias",
            "1.running_mean",
            "1.running_var",
            "1.num_batches_tracked",
            "4.weight",
            "8.weight",
            "8.bias",
        ]
    );
    let params: Vec<String> = m.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(params.len(), 7);
    assert_eq!(m.num_parameters(), 4 * 9 + 4 + 4 + 4 + 4 * 9 + 16 * 3 + 3);
}

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

#[test]
fn batch_norm_modes_and_counter() {
    let mut bn = nn::BatchNorm1d::new(dev(), 2).unwrap();
    let x = Tensor::from_slice(dev(), &[1.0f32, 10.0, 3.0, 20.0, 5.0, 30.0], &[3, 2]).unwrap();
    let y = vals(&bn.forward(&x).unwrap());
    // Training: batch statistics (mean 3, biased var 8/3 for channel 0).
    let s = (8.0f32 / 3.0 + 1e-5).sqrt();
    assert!((y[0] + 2.0 / s).abs() < 1e-4, "{y:?}");
    assert_eq!(bn.0.state.borrow().num_batches_tracked, 1);
    // Running mean after one step with momentum 0.1: 0.1 * 3 = 0.3.
    let rm = vals(&bn.0.state.borrow().running_mean);
    assert!((rm[0] - 0.3).abs() < 1e-6, "{rm:?}");
    bn.eval();
    assert!(!bn.0.training);
    let y = vals(&bn.forward(&x).unwrap());
    let rv = vals(&bn.0.state.borrow().running_var);
    let want = (1.0 - rm[0]) / (rv[0] + 1e-5).sqrt();
    assert!((y[0] - want).abs() < 1e-4);
    assert!(bn
        .forward(&Tensor::zeros(dev(), &[2, 2, 2, 2], DType::F32).unwrap())
        .is_err());
}

#[test]
fn save_and_load_into_a_fresh_model() {
    let mut m = cnn();
    let x = wgtensor::ops::randn(dev(), &[4, 1, 8, 8], DType::F32).unwrap();
    m.forward(&x).unwrap(); // updates running stats and the counter
    m.set_training(false);
    let want = vals(&m.forward(&x).unwrap());
    let sd = m.state_dict();
    let refs: Vec<(&str, &Tensor)> = sd.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let bytes = save_safetensors(&refs).unwrap();
    let mut fresh = cnn();
    fresh.set_training(false);
    assert_ne!(vals(&fresh.forward(&x).unwrap()), want);
    let src = load_safetensors(dev(), &bytes).unwrap();
    let report = nn::load_state_dict(&mut fresh, &src, true).unwrap();
    assert!(
        report.missing.is_empty() && report.unexpected.is_empty(),
        "{report:?}"
    );
    assert_eq!(vals(&fresh.forward(&x).unwrap()), want);
    // The counter is an integer scalar, as PyTorch's (int64 there, i32 here).
    let counter: Vec<i32> = fresh
        .state_dict()
        .into_iter()
        .filter(|(n, _)| n == "1.num_batches_tracked")
        .map(|(_, t)| t.to_vec::<i32>().unwrap()[0])
        .collect();
    assert_eq!(counter, vec![1]);
    // Strict loading of a partial dict fails naming the missing keys; non-strict reports them.
    let mut partial = src.clone();
    partial.remove("8.bias");
    let e = nn::load_state_dict(&mut cnn(), &partial, true).unwrap_err();
    assert!(e.to_string().contains("8.bias"), "{e}");
    assert!(
        e.to_string()
            .contains("Error(s) in loading state_dict for Sequential:"),
        "{e}"
    );
    let r = nn::load_state_dict(&mut cnn(), &partial, false).unwrap();
    assert_eq!(r.missing, vec!["8.bias".to_string()]);
    // As PyTorch: missing keys in the model's state-dict order, its error wording.
    let mut lin = nn::Linear::new(dev(), 2, 2, true).unwrap();
    let r = nn::load_state_dict(&mut lin, &std::collections::HashMap::new(), false).unwrap();
    assert_eq!(r.missing, ["weight", "bias"]);
    let e = nn::load_state_dict(&mut lin, &std::collections::HashMap::new(), true)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("Error(s) in loading state_dict for Linear:\n\tMissing key(s) in state_dict: \"weight\", \"bias\". "),
        "{e}"
    );
}

#[test]
fn lstm_and_gru_names_and_init() {
    let c = nn::RnnConfig {
        num_layers: 2,
        bidirectional: true,
        batch_first: true,
        ..Default::default()
    };
    let lstm = nn::Lstm::new(dev(), 5, 4, c).unwrap();
    let names: Vec<String> = lstm.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        &names[..5],
        [
            "weight_ih_l0",
            "weight_hh_l0",
            "bias_ih_l0",
            "bias_hh_l0",
            "weight_ih_l0_reverse"
        ]
    );
    assert_eq!(names.len(), 16);
    assert_eq!(names[8], "weight_ih_l1");
    let sd = lstm.state_dict();
    assert_eq!(sd[8].1.shape(), &[16, 8], "layer 1 sees both directions");
    let k = 1.0 / 2.0f32;
    assert!(sd.iter().all(|(_, t)| vals(t).iter().all(|v| v.abs() <= k)));
    let x = wgtensor::ops::randn(dev(), &[3, 6, 5], DType::F32).unwrap();
    assert_eq!(lstm.forward(&x).unwrap().shape(), &[3, 6, 8]);
    let out = lstm.forward_with_state(&x, None, None).unwrap();
    assert_eq!(out.h_n.shape(), &[4, 3, 4]);
    let gru = nn::Gru::new(dev(), 5, 4, Default::default()).unwrap();
    assert_eq!(gru.state_dict()[0].1.shape(), &[12, 5]);
    assert_eq!(
        gru.forward(&wgtensor::ops::randn(dev(), &[6, 3, 5], DType::F32).unwrap())
            .unwrap()
            .shape(),
        &[6, 3, 4]
    );
}

/// `without_bias()` is PyTorch's `bias=False`: the weights alone in the state dict, and the
/// same outputs and weight gradients as the layer with its biases zeroed.
#[test]
fn lstm_without_bias_matches_zero_biases() {
    let c = nn::RnnConfig {
        num_layers: 2,
        bidirectional: true,
        dropout: 0.5,
        ..Default::default()
    };
    let with = nn::Lstm::new(dev(), 3, 4, c).unwrap();
    let mut without = with.clone().without_bias().unwrap();
    let names: Vec<String> = without.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names.len(), 8);
    assert!(names.iter().all(|n| n.starts_with("weight_")), "{names:?}");
    assert_eq!(names[2], "weight_ih_l0_reverse");
    for (n, b) in with.named_parameters() {
        if n.starts_with("bias_") {
            let zeros = Tensor::zeros(dev(), b.shape(), DType::F32).unwrap();
            wgtensor::autograd::no_grad(|| b.copy_from(&zeros)).unwrap();
        }
    }
    let x = wgtensor::ops::randn(dev(), &[5, 2, 3], DType::F32).unwrap();
    let mut with = with;
    with.eval();
    without.eval();
    let (a, b) = (with.forward(&x).unwrap(), without.forward(&x).unwrap());
    assert_eq!(vals(&a), vals(&b));
    let ga = a.sum_all().unwrap().backward().unwrap();
    let gb = b.sum_all().unwrap().backward().unwrap();
    for (n, p) in without.named_parameters() {
        assert_eq!(vals(gb.get(&p).unwrap()), vals(ga.get(&p).unwrap()), "{n}");
    }
    // Training with dropout between layers runs the per-layer models, biases gone there too.
    without.train();
    let y = without.forward_with_state(&x, None, None).unwrap();
    assert_eq!(
        (y.output.shape(), y.h_n.shape()),
        (&[5, 2, 8][..], &[4, 2, 4][..])
    );
}

/// An edited public `num_layers` is an error on the training path with dropout between
/// layers (its own loop over the layers), as on the one-call path, never an overflow.
#[test]
fn lstm_dropout_path_rechecks_edited_fields() {
    let c = nn::RnnConfig {
        num_layers: 2,
        bidirectional: true,
        dropout: 0.5,
        ..Default::default()
    };
    let mut m = nn::Lstm::new(dev(), 4, 8, c).unwrap();
    let x = Tensor::zeros(dev(), &[3, 2, 4], DType::F32).unwrap();
    assert!(m.forward(&x).is_ok());
    for layers in [usize::MAX, 3] {
        m.rnn.num_layers = layers;
        let e = m.forward(&x).unwrap_err().to_string();
        assert!(e.contains("weight sets"), "{layers}: {e}");
    }
}

/// Layer parameters are tracked (PyTorch's parameters require grad): a loss through a model
/// has gradients for every parameter; under no_grad nothing is recorded.
#[test]
fn parameters_are_tracked_and_trainable() {
    let m = cnn();
    assert!(m.named_parameters().iter().all(|(_, t)| t.is_tracked()));
    let x = wgtensor::ops::randn(dev(), &[4, 1, 8, 8], DType::F32).unwrap();
    let y = m.forward(&x).unwrap();
    let loss = y.mul(&y).unwrap().sum_all().unwrap();
    let grads = loss.backward().unwrap();
    for (name, p) in m.named_parameters() {
        let g = grads
            .get(&p)
            .unwrap_or_else(|| panic!("no gradient for {name}"));
        assert_eq!(g.shape(), p.shape(), "{name}");
    }
    let y = wgtensor::no_grad(|| m.forward(&x)).unwrap();
    assert!(!y.is_tracked());
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

/// PyTorch's `dropout` between stacked RNN layers: only in training, never after the last
/// layer; evaluation equals the fused model; p -> 0 matches it too; p = 1 cuts every layer
/// but the last off its input; gradients reach every layer; states keep their shapes.
#[test]
fn rnn_dropout_between_layers() {
    for gru in [false, true] {
        let c = |dropout| nn::RnnConfig {
            num_layers: 3,
            bidirectional: true,
            dropout,
            ..Default::default()
        };
        let make = |p| {
            if gru {
                nn::Gru::new(dev(), 5, 4, c(p)).unwrap()
            } else {
                nn::Lstm::new(dev(), 5, 4, c(p)).unwrap()
            }
        };
        let x = wgtensor::ops::randn(dev(), &[6, 2, 5], DType::F32).unwrap();
        let mut m = make(0.5);
        let fused = vals(&m.rnn.forward(&x, None, None).unwrap().output);
        m.set_training(false);
        assert_eq!(
            vals(&m.forward(&x).unwrap()),
            fused,
            "eval is the fused model"
        );
        m.set_training(true);
        let train = m.forward_with_state(&x, None, None).unwrap();
        assert_eq!(train.output.shape(), &[6, 2, 8]);
        assert_eq!(train.h_n.shape(), &[6, 2, 4]);
        assert_eq!(train.c_n.is_some(), !gru);
        assert_ne!(
            vals(&train.output),
            fused,
            "dropout changes the training output"
        );
        let g = train.output.sum_all().unwrap().backward().unwrap();
        assert!(m.named_parameters().iter().all(|(_, p)| g.get(p).is_some()));
        // A vanishing p keeps (and scales by ~1) every element: the layer-by-layer path equals
        // the fused one.
        let tiny = make(1e-9);
        let want = vals(&tiny.rnn.forward(&x, None, None).unwrap().output);
        let got = vals(&tiny.forward(&x).unwrap());
        assert!(got.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-5));
        // p = 1: the last layer sees zeros whatever the input.
        let all = make(1.0);
        let x2 = wgtensor::ops::randn(dev(), &[6, 2, 5], DType::F32).unwrap();
        assert_eq!(
            vals(&all.forward(&x).unwrap()),
            vals(&all.forward(&x2).unwrap())
        );
    }
    assert!(nn::Lstm::new(
        dev(),
        5,
        4,
        nn::RnnConfig {
            dropout: 1.5,
            ..Default::default()
        }
    )
    .is_err());
}

/// PyTorch's unbatched recurrent input: `[T, I]` with `[L * D, H]` states runs as a batch of
/// one (where batch_first puts it or not) and gives `[T, D * H]` and `[L * D, H]`; 3-D states
/// with a 2-D input are an error naming them.
#[test]
fn rnn_unbatched_input() {
    for (gru, batch_first) in [(false, false), (true, true), (false, true)] {
        let c = nn::RnnConfig {
            num_layers: 2,
            bidirectional: true,
            batch_first,
            ..Default::default()
        };
        let m = if gru {
            nn::Gru::new(dev(), 5, 4, c).unwrap()
        } else {
            nn::Lstm::new(dev(), 5, 4, c).unwrap()
        };
        let x = wgtensor::ops::randn(dev(), &[6, 5], DType::F32).unwrap();
        let h0 = wgtensor::ops::randn(dev(), &[4, 4], DType::F32).unwrap();
        let c0 = (!gru).then(|| wgtensor::ops::randn(dev(), &[4, 4], DType::F32).unwrap());
        let one = m.forward_with_state(&x, Some(&h0), c0.as_ref()).unwrap();
        assert_eq!(one.output.shape(), &[6, 8]);
        assert_eq!(one.h_n.shape(), &[4, 4]);
        let bd = if batch_first { 0 } else { 1 };
        let batched = m
            .forward_with_state(
                &x.unsqueeze(bd).unwrap(),
                Some(&h0.unsqueeze(1).unwrap()),
                c0.as_ref().map(|c| c.unsqueeze(1).unwrap()).as_ref(),
            )
            .unwrap();
        assert_eq!(vals(&one.output), vals(&batched.output));
        assert_eq!(vals(&one.h_n), vals(&batched.h_n));
        if let (Some(a), Some(b)) = (&one.c_n, &batched.c_n) {
            assert_eq!(a.shape(), &[4, 4]);
            assert_eq!(vals(a), vals(b));
        }
        let e = m
            .forward_with_state(&x, Some(&h0.unsqueeze(1).unwrap()), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("h0 must be 2-D [num_layers * D, H]"), "{e}");
        // Gradients reach the parameters through the unbatched path.
        let g = m
            .forward(&x)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        assert!(m.named_parameters().iter().all(|(_, p)| g.get(p).is_some()));
    }
}

// ---------------------------------------------------------------------------------------------
// #[derive(Module)]

/// PyTorch:
///
/// ```python
/// class Block(nn.Module):
///     def __init__(self):
///         super().__init__()
///         self.conv = nn.Conv2d(8, 8, 3, padding=1, bias=False)
///         self.bn = nn.BatchNorm2d(8)
/// ```
#[derive(Module)]
struct Block {
    conv: nn::Conv2d,
    bn: nn::BatchNorm2d,
}

impl Forward for Block {
    fn forward(&self, x: &Tensor) -> wgtensor::Result<Tensor> {
        self.bn.forward(&self.conv.forward(x)?)?.relu()
    }
}

/// PyTorch (registration order as the fields; `scale` and `mean` are the module's own
/// parameter and buffer, which PyTorch lists before any child's whatever the order of
/// assignment):
///
/// ```python
/// class Net(nn.Module):
///     def __init__(self):
///         super().__init__()
///         self.stem = nn.Conv2d(1, 8, 3, padding=1)
///         self.scale = nn.Parameter(torch.ones(8, 1, 1))
///         self.register_buffer("mean", torch.zeros(1))
///         self.features = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8),
///                                       nn.ReLU(), nn.MaxPool2d(2))
///         self.blocks = nn.ModuleList([Block(), Block()])
///         self.proj = nn.Conv2d(8, 8, 1)
///         self.extra = None
///         self.drop = nn.Dropout(0.5)
///         self.classifier = nn.Linear(8 * 4 * 4, 10)
///         self.classes = 10
/// ```
#[derive(Module)]
struct Net {
    stem: nn::Conv2d,
    scale: Tensor,
    #[module(buffer)]
    mean: Tensor,
    features: nn::Sequential,
    blocks: Vec<Block>,
    proj: Option<nn::Conv2d>,
    extra: Option<nn::Linear>,
    drop: nn::Dropout,
    classifier: nn::Linear,
    #[module(skip)]
    classes: usize,
}

impl Forward for Net {
    fn forward(&self, x: &Tensor) -> wgtensor::Result<Tensor> {
        let mut x = self.features.forward(&self.stem.forward(x)?)?;
        for b in &self.blocks {
            x = b.forward(&x)?;
        }
        if let Some(p) = &self.proj {
            x = p.forward(&x)?;
        }
        let x = nn::Flatten.forward(&x.mul(&self.scale)?.sub(&self.mean)?)?;
        self.classifier.forward(&self.drop.forward(&x)?)
    }
}

fn net() -> Net {
    let d = dev();
    let same = nn::Conv2dConfig {
        padding: 1,
        ..Default::default()
    };
    let block = || Block {
        conv: nn::Conv2d::new(
            d,
            8,
            8,
            3,
            nn::Conv2dConfig {
                bias: false,
                ..same
            },
        )
        .unwrap(),
        bn: nn::BatchNorm2d::new(d, 8).unwrap(),
    };
    Net {
        stem: nn::Conv2d::new(d, 1, 8, 3, same).unwrap(),
        scale: Tensor::ones(d, &[8, 1, 1], DType::F32)
            .unwrap()
            .requires_grad()
            .unwrap(),
        mean: Tensor::zeros(d, &[1], DType::F32).unwrap(),
        features: nn::Sequential::new()
            .push(nn::Conv2d::new(d, 8, 8, 3, same).unwrap())
            .push(nn::BatchNorm2d::new(d, 8).unwrap())
            .push(nn::ReLU)
            .push(nn::MaxPool2d(MaxPool2dOptions::new(2))),
        blocks: vec![block(), block()],
        proj: Some(nn::Conv2d::new(d, 8, 8, 1, Default::default()).unwrap()),
        extra: None,
        drop: nn::Dropout::new(0.5),
        classifier: nn::Linear::new(d, 8 * 4 * 4, 10, true).unwrap(),
        classes: 10,
    }
}

fn names(v: Vec<(String, Tensor)>) -> Vec<String> {
    v.into_iter().map(|(n, _)| n).collect()
}

/// The names and order PyTorch gives the equivalent model (written out from its rules: per
/// module its own parameters, then its own buffers, then each child in registration order).
#[test]
fn derived_model_names_and_order_follow_pytorch() {
    let m = net();
    let bn = |p: &str| {
        [
            "weight",
            "bias",
            "running_mean",
            "running_var",
            "num_batches_tracked",
        ]
        .map(|n| format!("{p}.{n}"))
    };
    let mut want_sd: Vec<String> = ["scale", "mean", "stem.weight", "stem.bias"]
        .map(String::from)
        .to_vec();
    want_sd.extend(["features.0.weight".into(), "features.0.bias".into()]);
    want_sd.extend(bn("features.1"));
    for b in 0..2 {
        want_sd.push(format!("blocks.{b}.conv.weight"));
        want_sd.extend(bn(&format!("blocks.{b}.bn")));
    }
    want_sd.extend(
        [
            "proj.weight",
            "proj.bias",
            "classifier.weight",
            "classifier.bias",
        ]
        .map(String::from),
    );
    assert_eq!(names(m.state_dict()), want_sd);
    assert_eq!(
        names(m.named_parameters()),
        [
            "scale",
            "stem.weight",
            "stem.bias",
            "features.0.weight",
            "features.0.bias",
            "features.1.weight",
            "features.1.bias",
            "blocks.0.conv.weight",
            "blocks.0.bn.weight",
            "blocks.0.bn.bias",
            "blocks.1.conv.weight",
            "blocks.1.bn.weight",
            "blocks.1.bn.bias",
            "proj.weight",
            "proj.bias",
            "classifier.weight",
            "classifier.bias",
        ]
    );
    assert_eq!(
        names(m.named_buffers()),
        [
            "mean",
            "features.1.running_mean",
            "features.1.running_var",
            "features.1.num_batches_tracked",
            "blocks.0.bn.running_mean",
            "blocks.0.bn.running_var",
            "blocks.0.bn.num_batches_tracked",
            "blocks.1.bn.running_mean",
            "blocks.1.bn.running_var",
            "blocks.1.bn.num_batches_tracked",
        ]
    );
    assert_eq!(m.parameters().len(), 17);
    assert_eq!(
        m.num_parameters(),
        8 + (72 + 8) + (576 + 8) + 16 + 2 * (576 + 16) + (64 + 8) + (1280 + 10)
    );
    // Every parameter trains: a loss reaches each one (the buffer is not a parameter).
    let x = wgtensor::ops::randn(dev(), &[2, 1, 8, 8], DType::F32).unwrap();
    let y = m.forward(&x).unwrap();
    assert_eq!(y.shape(), &[2, m.classes]);
    let g = y.mul(&y).unwrap().sum_all().unwrap().backward().unwrap();
    for (n, p) in m.named_parameters() {
        assert!(g.get(&p).is_some(), "no gradient for {n}");
    }
    assert!(!m.mean.is_tracked());
}

/// `eval()` on the outer model reaches a BatchNorm two levels down (in a Vec of derived
/// blocks) and one inside a Sequential, and the Dropout; the nested batch norm then normalizes
/// with its running statistics.
#[test]
fn eval_and_train_reach_every_nested_layer() {
    let mut m = net();
    assert!(m.is_training());
    m.eval();
    assert!(!m.is_training());
    assert!(!m.blocks[1].bn.training && !m.blocks[0].bn.training && !m.drop.training);
    assert!(!m.features.get_as::<nn::BatchNorm2d>(1).unwrap().training);
    let x = wgtensor::ops::randn(dev(), &[2, 1, 8, 8], DType::F32).unwrap();
    let a = vals(&m.forward(&x).unwrap());
    assert_eq!(a, vals(&m.forward(&x).unwrap()), "eval is deterministic");
    assert_eq!(m.blocks[1].bn.state.borrow().num_batches_tracked, 0);
    m.train();
    assert!(m.is_training() && m.blocks[1].bn.training && m.drop.training);
    m.forward(&x).unwrap();
    assert_eq!(m.blocks[1].bn.state.borrow().num_batches_tracked, 1);

    // A batch norm nested in derived structs: in eval mode, y = (x - running_mean) /
    // sqrt(running_var + eps) with the fresh statistics (0 and 1), not the batch's.
    #[derive(Module)]
    struct Inner {
        bn: nn::BatchNorm1d,
    }
    #[derive(Module)]
    struct Outer {
        inner: Inner,
    }
    let mut o = Outer {
        inner: Inner {
            bn: nn::BatchNorm1d::new(dev(), 2).unwrap(),
        },
    };
    let x = Tensor::from_slice(dev(), &[1.0f32, 10.0, 3.0, 20.0], &[2, 2]).unwrap();
    let train = vals(&o.inner.bn.forward(&x).unwrap());
    assert!((train[0] + 1.0).abs() < 1e-3, "batch statistics: {train:?}");
    o.eval();
    let y = vals(&o.inner.bn.forward(&x).unwrap());
    // After one training batch: running_mean = 0.1 * batch mean, running_var = 0.9 + 0.1 *
    // unbiased batch var.
    let (rm, rv) = (0.1 * 2.0, 0.9 + 0.1 * 2.0);
    let want = (1.0 - rm) / (rv + 1e-5f32).sqrt();
    assert!((y[0] - want).abs() < 1e-4, "{y:?} vs {want}");
}

/// save -> safetensors -> load into a fresh model: every parameter, buffer and counter
/// (num_batches_tracked of each nested BatchNorm) comes back; the eval outputs match.
/// A strict load of an incomplete dict fails naming the key and changes nothing.
#[test]
fn derived_model_state_dict_round_trip() {
    let mut m = net();
    let x = wgtensor::ops::randn(dev(), &[4, 1, 8, 8], DType::F32).unwrap();
    m.forward(&x).unwrap();
    m.forward(&x).unwrap(); // counters at 2, running statistics moved
    m.eval();
    let want = vals(&m.forward(&x).unwrap());
    let sd = m.state_dict();
    let refs: Vec<(&str, &Tensor)> = sd.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let src = load_safetensors(dev(), &save_safetensors(&refs).unwrap()).unwrap();

    let mut fresh = net();
    fresh.eval();
    assert_ne!(vals(&fresh.forward(&x).unwrap()), want);
    let report = fresh.load_state_dict(&src, true).unwrap();
    assert!(report.missing.is_empty() && report.unexpected.is_empty());
    assert_eq!(vals(&fresh.forward(&x).unwrap()), want);
    for b in &fresh.blocks {
        assert_eq!(b.bn.state.borrow().num_batches_tracked, 2);
    }
    let f1 = fresh.features.get_as::<nn::BatchNorm2d>(1).unwrap();
    assert_eq!(f1.state.borrow().num_batches_tracked, 2);
    assert_eq!(names(fresh.state_dict()), names(m.state_dict()));

    // Strict, a counter missing: loaded, as PyTorch's batch norm fills in
    // num_batches_tracked for a plain dict; that counter keeps its value.
    let mut partial = src.clone();
    partial.remove("blocks.1.bn.num_batches_tracked");
    let mut other = net();
    other.load_state_dict(&partial, true).unwrap();
    assert_eq!(other.blocks[1].bn.state.borrow().num_batches_tracked, 0);
    assert_eq!(vals(&other.classifier.weight), vals(&m.classifier.weight));
    // Strict, a weight missing: an error naming it, and nothing loaded.
    let mut other = net();
    let w0 = vals(&other.classifier.weight);
    let mut no_w = src.clone();
    no_w.remove("blocks.1.bn.weight");
    let e = other.load_state_dict(&no_w, true).unwrap_err().to_string();
    assert!(e.contains("blocks.1.bn.weight"), "{e}");
    assert_eq!(
        vals(&other.classifier.weight),
        w0,
        "a refused load copies nothing"
    );
    // Not strict: loaded, no counter reported missing, that counter untouched.
    partial.insert(
        "unused".into(),
        Tensor::zeros(dev(), &[1], DType::F32).unwrap(),
    );
    let r = nn::load_state_dict(&mut other, &partial, false).unwrap();
    assert!(r.missing.is_empty(), "{:?}", r.missing);
    assert_eq!(r.unexpected, ["unused"]);
    assert_eq!(other.blocks[0].bn.state.borrow().num_batches_tracked, 2);
    assert_eq!(other.blocks[1].bn.state.borrow().num_batches_tracked, 0);
    assert_eq!(vals(&other.classifier.weight), vals(&m.classifier.weight));
    // A shape mismatch is an error before anything is copied, counters included.
    let mut bad = src.clone();
    bad.insert(
        "proj.bias".into(),
        Tensor::zeros(dev(), &[3], DType::F32).unwrap(),
    );
    let mut third = net();
    let e = third.load_state_dict(&bad, true).unwrap_err().to_string();
    assert!(e.contains("proj.bias"), "{e}");
    assert_eq!(third.blocks[0].bn.state.borrow().num_batches_tracked, 0);
}

/// ModuleList and ModuleDict inside a model: `layers.0.weight`, `heads.name.weight`, in
/// insertion order; replacing keeps the place; bad names are refused.
#[test]
fn module_list_and_dict_names() {
    #[derive(Module)]
    struct Model {
        layers: nn::ModuleList<nn::Linear>,
        heads: nn::ModuleDict,
        mixed: nn::ModuleList,
    }
    let d = dev();
    let mut heads = nn::ModuleDict::new();
    let lin = |i, o, b| nn::Linear::new(d, i, o, b).unwrap();
    assert!(heads
        .insert("score", Box::new(lin(4, 1, false)) as Box<dyn Forward>)
        .unwrap()
        .is_none());
    heads.insert("classify", Box::new(lin(4, 3, true))).unwrap();
    // Replacing keeps the position (as assigning to a PyTorch ModuleDict key).
    let old = heads.insert("score", Box::new(lin(4, 2, false))).unwrap();
    assert!(old.is_some());
    for bad in ["", "a.b"] {
        assert!(heads.insert(bad, Box::new(nn::ReLU)).is_err());
    }
    let mut mixed = nn::ModuleList::new();
    mixed.push(Box::new(nn::ReLU) as Box<dyn Forward>);
    mixed.push(Box::new(nn::BatchNorm1d::new(d, 4).unwrap()));
    let mut m = Model {
        layers: (0..2).map(|_| lin(4, 4, true)).collect(),
        heads,
        mixed,
    };
    assert_eq!(
        names(m.state_dict()),
        [
            "layers.0.weight",
            "layers.0.bias",
            "layers.1.weight",
            "layers.1.bias",
            "heads.score.weight",
            "heads.classify.weight",
            "heads.classify.bias",
            "mixed.1.weight",
            "mixed.1.bias",
            "mixed.1.running_mean",
            "mixed.1.running_var",
            "mixed.1.num_batches_tracked",
        ]
    );
    assert_eq!(m.heads.keys().collect::<Vec<_>>(), ["score", "classify"]);
    assert_eq!(m.heads["score"].state_dict()[0].1.shape(), &[2, 4]);
    assert!(m.heads.get("missing").is_none() && m.heads.contains_key("classify"));
    assert_eq!(m.layers[1].weight.shape(), &[4, 4]);
    let x = Tensor::ones(d, &[3, 4], DType::F32).unwrap();
    assert_eq!(m.heads["classify"].forward(&x).unwrap().shape(), &[3, 3]);
    m.eval();
    assert!(!m.mixed[1].is_training());
    assert!(m.heads.remove("score").is_some());
    assert_eq!(names(m.heads.state_dict())[0], "classify.weight");
}

/// `eval()` on containers of layers without flags of their own (Linear, ReLU) reads back as not
/// training, as PyTorch's `Sequential(Linear, ReLU).eval().training` is False; `train()` turns
/// it back, and a nested container follows its parent.
#[test]
fn containers_carry_their_own_training_flag() {
    let d = dev();
    let mut seq = nn::Sequential::new()
        .push(nn::Linear::new(d, 2, 3, true).unwrap())
        .push(nn::ReLU)
        .push(nn::Sequential::new().push(nn::Linear::new(d, 3, 1, false).unwrap()));
    assert!(seq.is_training());
    seq.eval();
    assert!(!seq.is_training());
    assert!(!seq.get_as::<nn::Sequential>(2).unwrap().is_training());
    seq.train();
    assert!(seq.is_training() && seq.get_as::<nn::Sequential>(2).unwrap().is_training());
    let mut list: nn::ModuleList<nn::Linear> = vec![nn::Linear::new(d, 2, 2, true).unwrap()].into();
    list.eval();
    assert!(!list.is_training());
    let mut dict: nn::ModuleDict<nn::Linear> = nn::ModuleDict::new();
    dict.insert("a", nn::Linear::new(d, 2, 2, true).unwrap())
        .unwrap();
    dict.set_training(false);
    assert!(!dict.is_training());
    dict.train();
    assert!(dict.is_training());
}

/// Sequential: `seq[i]` runs one layer, `get_as` gives a layer as its own type (mutably too),
/// out-of-range and wrong-type lookups are `None`.
#[test]
fn sequential_indexing() {
    let mut seq = cnn();
    assert_eq!(seq.len(), 9);
    let x = wgtensor::ops::randn(dev(), &[2, 1, 8, 8], DType::F32).unwrap();
    let y0 = seq[0].forward(&x).unwrap();
    let conv: &nn::Conv2d = seq.get_as(0).unwrap();
    let want = vals(&conv2d(&x, &conv.weight, conv.bias.as_ref(), &conv.options).unwrap());
    assert_eq!(vals(&y0), want);
    assert!(
        seq.get_as::<nn::Linear>(0).is_none(),
        "a Conv2d is not a Linear"
    );
    assert!(seq.get(9).is_none() && seq.get_as::<nn::Linear>(9).is_none());
    assert_eq!(
        seq.get_as::<nn::Linear>(8).unwrap().weight.shape(),
        &[3, 16]
    );
    seq.get_as_mut::<nn::Dropout>(7).unwrap().p = 0.25;
    seq[7].eval();
    let drop: &nn::Dropout = seq.get_as(7).unwrap();
    assert_eq!((drop.p, drop.training), (0.25, false));
    assert!(seq.get_mut(1).is_some());
    assert_eq!(seq.iter().count(), 9);
    let mut s = nn::Sequential::new();
    s.append(nn::ReLU).append(nn::Tanh);
    assert_eq!(s.len(), 2);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = &s[2];
    }));
    assert!(r.is_err(), "past the end panics, as a slice");
}

/// The attributes and field kinds beyond the CNN: a training flag, rename, tuple structs,
/// generic structs, `Box<dyn Forward>`, arrays, Vec<Tensor> (a parameter list), tied weights
/// (listed once by named_parameters, under both names in the state dict), the root path.
#[test]
fn derive_attributes_and_field_kinds() {
    #[derive(wgtensor::Module)]
    struct Pair(nn::Linear, #[module(skip)] (), nn::Linear);

    #[derive(Module)]
    struct Wrap<M: Module> {
        inner: M,
        #[module(rename = "0")]
        first: Box<dyn Forward>,
        arr: [nn::Linear; 2],
        gains: Vec<Tensor>,
        #[module(buffer)]
        mask: Option<Tensor>,
        #[module(training)]
        training: bool,
    }

    // A where clause as rustfmt writes it, with a trailing comma.
    #[derive(Module)]
    struct Bounded<M>
    where
        M: Module,
    {
        inner: M,
    }

    let d = dev();
    let lin = || nn::Linear::new(d, 2, 2, false).unwrap();
    let bounded = Bounded { inner: lin() };
    assert_eq!(names(bounded.state_dict()), ["inner.weight"]);
    let shared = lin();
    let pair = Pair(shared.clone(), (), shared);
    assert_eq!(names(pair.state_dict()), ["0.weight", "2.weight"]);
    assert_eq!(names(pair.named_parameters()), ["0.weight"], "tied: once");
    // Two leaves over one buffer are two parameters (PyTorch dedups by Parameter object).
    let a = lin();
    let mut b = lin();
    b.weight = a.weight.detach().requires_grad().unwrap();
    let two = Pair(a, (), b);
    assert_eq!(names(two.named_parameters()), ["0.weight", "2.weight"]);
    let gain = || {
        Tensor::ones(d, &[2], DType::F32)
            .unwrap()
            .requires_grad()
            .unwrap()
    };
    let mut w = Wrap {
        inner: pair,
        first: Box::new(nn::Dropout::new(0.1)),
        arr: [lin(), lin()],
        gains: vec![gain(), gain()],
        mask: Some(Tensor::ones(d, &[2], DType::F32).unwrap()),
        training: true,
    };
    assert_eq!(
        names(w.state_dict()),
        [
            "mask",
            "inner.0.weight",
            "inner.2.weight",
            "arr.0.weight",
            "arr.1.weight",
            "gains.0",
            "gains.1",
        ]
    );
    assert_eq!(names(w.named_buffers()), ["mask"]);
    w.eval();
    assert!(!w.training && !w.is_training());
    w.train();
    assert!(w.training);
    w.mask = None;
    assert!(w.named_buffers().is_empty());
}

/// LayerNorm, GroupNorm, RMSNorm and SiLU: PyTorch's parameter names, shapes and init (weight
/// ones, bias zeros), the options that drop parameters, forwards equal to the functional ops,
/// gradients reaching the parameters, a group count that does not divide the channels refused.
#[test]
fn norm_layers_and_silu() {
    let d = dev();
    let names = |m: &dyn Module| -> Vec<String> {
        m.named_parameters().into_iter().map(|(n, _)| n).collect()
    };
    let ln = nn::LayerNorm::new(d, &[2, 3]).unwrap();
    assert_eq!(names(&ln), ["weight", "bias"]);
    assert_eq!(ln.weight.as_ref().unwrap().shape(), &[2, 3]);
    assert_eq!(vals(ln.weight.as_ref().unwrap()), vec![1.0; 6]);
    assert_eq!(vals(ln.bias.as_ref().unwrap()), vec![0.0; 6]);
    let no_bias = nn::LayerNormConfig {
        bias: false,
        ..Default::default()
    };
    assert_eq!(
        names(&nn::LayerNorm::with_config(d, &[3], no_bias).unwrap()),
        ["weight"]
    );
    let plain = nn::LayerNormConfig {
        elementwise_affine: false,
        ..Default::default()
    };
    assert!(names(&nn::LayerNorm::with_config(d, &[3], plain).unwrap()).is_empty());

    let gn = nn::GroupNorm::new(d, 2, 4).unwrap();
    assert_eq!(names(&gn), ["weight", "bias"]);
    assert_eq!(gn.weight.as_ref().unwrap().shape(), &[4]);
    assert!(nn::GroupNorm::new(d, 3, 4).is_err());
    let rn = nn::RMSNorm::new(d, &[3]).unwrap();
    assert_eq!(names(&rn), ["weight"]);
    assert_eq!(rn.eps, None);

    let x = Tensor::from_slice(
        d,
        &(0..24)
            .map(|i| ((i * 7) % 11) as f32 - 5.0)
            .collect::<Vec<_>>(),
        &[2, 4, 3],
    )
    .unwrap();
    let want = wgtensor::ops::group_norm(&x, 2, None, None, 1e-5).unwrap();
    assert_eq!(vals(&gn.forward(&x).unwrap()), vals(&want));
    assert!(gn.forward(&x.reshape(&[2, 12]).unwrap()).is_err());
    let want = wgtensor::ops::layer_norm(&x, &[3], None, None, 1e-5).unwrap();
    let ln3 = nn::LayerNorm::new(d, &[3]).unwrap();
    assert_eq!(vals(&ln3.forward(&x).unwrap()), vals(&want));
    let want = wgtensor::ops::rms_norm(&x, &[3], None, None).unwrap();
    assert_eq!(vals(&rn.forward(&x).unwrap()), vals(&want));
    assert_eq!(
        vals(&nn::SiLU.forward(&x).unwrap()),
        vals(&x.silu().unwrap())
    );

    // A small block: names with the Sequential's indices, gradients for every parameter.
    let block = nn::Sequential::new()
        .push(nn::Linear::new(d, 3, 3, true).unwrap())
        .push(nn::LayerNorm::new(d, &[3]).unwrap())
        .push(nn::SiLU)
        .push(nn::RMSNorm::new(d, &[3]).unwrap());
    assert_eq!(
        names(&block),
        ["0.weight", "0.bias", "1.weight", "1.bias", "3.weight"]
    );
    let y = block.forward(&x.reshape(&[8, 3]).unwrap()).unwrap();
    let grads = y.mul(&y).unwrap().sum_all().unwrap().backward().unwrap();
    for (n, p) in block.named_parameters() {
        assert!(grads.get(&p).is_some(), "{n} has no gradient");
    }
}

/// LayerNorm and GroupNorm (f32 parameters) on f16 activations, as PyTorch's mixed-dtype rule:
/// computed in f32, the result in f16; the parameters' gradients come back in f32.
#[test]
fn norm_layers_take_f16_activations() {
    let d = dev();
    if !d.supports_f16() {
        return;
    }
    let x32 = Tensor::from_slice(
        d,
        &(0..16)
            .map(|i| ((i * 5) % 7) as f32 - 3.0)
            .collect::<Vec<_>>(),
        &[2, 4, 2],
    )
    .unwrap();
    let x = x32.to_dtype(DType::F16).unwrap();
    let ln = nn::LayerNorm::new(d, &[2]).unwrap();
    let gn = nn::GroupNorm::new(d, 2, 4).unwrap();
    for (y, want) in [
        (ln.forward(&x).unwrap(), ln.forward(&x32).unwrap()),
        (gn.forward(&x).unwrap(), gn.forward(&x32).unwrap()),
    ] {
        assert_eq!(y.dtype(), DType::F16);
        let want = want.to_dtype(DType::F16).unwrap();
        assert_eq!(
            y.to_vec::<half::f16>().unwrap(),
            want.to_vec::<half::f16>().unwrap()
        );
    }
    let sum = |y: Tensor| {
        y.to_dtype(DType::F32)
            .unwrap()
            .mul(&x32)
            .unwrap()
            .sum_all()
            .unwrap()
    };
    let loss = sum(ln.forward(&x).unwrap())
        .add(&sum(gn.forward(&x).unwrap()))
        .unwrap();
    let g = loss.backward().unwrap();
    for m in [&ln as &dyn Module, &gn] {
        for (n, p) in m.named_parameters() {
            assert_eq!(g.get(&p).expect("a gradient").dtype(), DType::F32, "{n}");
        }
    }
    // An f32 input with f16 parameters stays an error, as PyTorch's.
    let w16 = Tensor::ones(d, &[2], DType::F16).unwrap();
    assert!(wgtensor::ops::layer_norm(&x32, &[2], Some(&w16), None, 1e-5).is_err());
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
    assert!(nn::BatchNorm1d::with_config(d, 3, eps(0.0)).is_ok());
    for bad in [-1e-5, f64::INFINITY, f64::NAN] {
        let e = nn::BatchNorm1d::with_config(d, 3, eps(bad)).unwrap_err();
        assert!(e.to_string().starts_with("BatchNorm1d:"), "{e}");
    }
    let e = nn::BatchNorm2d::with_config(d, 3, eps(-1.0)).unwrap_err();
    assert!(e.to_string().starts_with("BatchNorm2d:"), "{e}");

    let x = Tensor::ones(d, &[1, 1, 4, 4], DType::F32).unwrap();
    assert_eq!(
        nn::MaxPool2d::new(2).forward(&x).unwrap().shape(),
        &[1, 1, 2, 2]
    );
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
    // hardswish is -0.5 at -3 and 1.5 at 3.
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
        (0.0, -0.5, 0.5, 1.5, 1.0)
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
    assert!(e.starts_with("Hardtanh") && e.contains("min_val 1"), "{e}");

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

/// PyTorch's `track_running_stats=False`: no running buffers or counter in the state dict,
/// and the batch's statistics in evaluation as in training.
#[test]
fn batchnorm_without_running_stats() {
    use wgtensor::ops::{batch_norm_train, BatchNormOptions};
    let mut bn = nn::BatchNorm2d::new(dev(), 3)
        .unwrap()
        .without_running_stats();
    assert!(!bn.tracks_running_stats());
    let names: Vec<String> = bn.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["weight", "bias"]);
    let x = wgtensor::ops::randn(dev(), &[4, 3, 2, 2], DType::F32).unwrap();
    let want = vals(
        &batch_norm_train(&x, None, &BatchNormOptions::default())
            .unwrap()
            .y,
    );
    assert_eq!(vals(&bn.forward(&x).unwrap()), want);
    bn.eval();
    assert_eq!(
        vals(&bn.forward(&x).unwrap()),
        want,
        "batch statistics in eval"
    );
    assert_eq!(bn.state.borrow().num_batches_tracked, 0);
    let mut bn1 = nn::BatchNorm1d::new(dev(), 3)
        .unwrap()
        .without_running_stats();
    bn1.eval();
    let x1 = wgtensor::ops::randn(dev(), &[5, 3], DType::F32).unwrap();
    let y1 = vals(&bn1.forward(&x1).unwrap());
    let want1 = vals(
        &batch_norm_train(&x1, None, &BatchNormOptions::default())
            .unwrap()
            .y,
    );
    assert_eq!(y1, want1);
    assert_eq!(bn1.state_dict().len(), 2);
}

/// PyTorch's unbatched cells: lstm_cell / gru_cell take x [I], h [H] (and c [H]) and return
/// states of h's shape, equal to the batch-of-one step.
#[test]
fn rnn_cells_take_unbatched_input() {
    use wgtensor::ops::{gru_cell, lstm_cell, randn, RnnKind, RnnWeights};
    let (i, h) = (3, 4);
    for kind in [RnnKind::Lstm, RnnKind::Gru] {
        let g = if kind == RnnKind::Lstm { 4 } else { 3 };
        let w_ih = randn(dev(), &[g * h, i], DType::F32).unwrap();
        let w_hh = randn(dev(), &[g * h, h], DType::F32).unwrap();
        let w = RnnWeights::new(kind, &w_ih, &w_hh, None, None).unwrap();
        let x = randn(dev(), &[i], DType::F32).unwrap();
        let h0 = randn(dev(), &[h], DType::F32).unwrap();
        let c0 = randn(dev(), &[h], DType::F32).unwrap();
        let b = |t: &Tensor| t.unsqueeze(0).unwrap();
        if kind == RnnKind::Lstm {
            let (h1, c1) = lstm_cell(&x, &h0, &c0, &w).unwrap();
            let (hb, cb) = lstm_cell(&b(&x), &b(&h0), &b(&c0), &w).unwrap();
            assert_eq!((h1.shape(), c1.shape()), (&[h][..], &[h][..]));
            assert_eq!((vals(&h1), vals(&c1)), (vals(&hb), vals(&cb)));
        } else {
            let h1 = gru_cell(&x, &h0, &w).unwrap();
            assert_eq!(h1.shape(), &[h]);
            assert_eq!(vals(&h1), vals(&gru_cell(&b(&x), &b(&h0), &w).unwrap()));
            // A batched x with an unbatched h is neither form.
            assert!(gru_cell(&b(&x), &h0, &w).is_err());
        }
    }
}

/// BatchNorm1d over more features than the grid's 65535 per dimension (the channels continue
/// on z): training output, running statistics, the input gradient and evaluation against the
/// host formulas, at channels on both sides of the limit.
#[test]
fn batch_norm_over_more_channels_than_the_grid_limit() {
    let (n, c) = (3usize, 70_000usize);
    let xv: Vec<f32> = (0..n * c)
        .map(|i| ((i * 7919 % 1009) as f32) / 500.0 - 1.0)
        .collect();
    let gv: Vec<f32> = (0..n * c)
        .map(|i| ((i * 31 % 17) as f32) / 8.0 - 1.0)
        .collect();
    // The CPU plans, and the GPU plans (64-lane workgroups merged through barriers, which
    // the channels past the last must skip together).
    let gpu = Device::with_options(wgtensor::DeviceOptions {
        gpu_plans: true,
        cooperative_matrix: false,
        ..Default::default()
    })
    .unwrap();
    for d in [dev(), &gpu] {
        batch_norm_channels_past_the_limit(d, n, c, &xv, &gv);
    }
}

fn batch_norm_channels_past_the_limit(d: &Device, n: usize, c: usize, xv: &[f32], gv: &[f32]) {
    let x = Tensor::from_slice(d, xv, &[n, c])
        .unwrap()
        .requires_grad()
        .unwrap();
    let gw = Tensor::from_slice(d, gv, &[n, c]).unwrap();
    let mut bn = nn::BatchNorm1d::new(d, c).unwrap();
    let yt = bn.forward(&x).unwrap();
    let y = vals(&yt);
    let g = yt.mul(&gw).unwrap().sum_all().unwrap().backward().unwrap();
    let gx = vals(g.get(&x).unwrap());
    let checked = [0, 1, 65_534, 65_535, 65_536, c - 1];
    let rm = vals(&bn.0.state.borrow().running_mean);
    let rv = vals(&bn.0.state.borrow().running_var);
    for ch in checked {
        let col = |v: &[f32]| (0..n).map(|r| f64::from(v[r * c + ch])).collect::<Vec<_>>();
        let (xs, gs) = (col(xv), col(gv));
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64;
        let inv = 1.0 / (var + 1e-5).sqrt();
        let xh: Vec<f64> = xs.iter().map(|v| (v - mean) * inv).collect();
        let mg = gs.iter().sum::<f64>() / n as f64;
        let mgx = gs.iter().zip(&xh).map(|(g, h)| g * h).sum::<f64>() / n as f64;
        for r in 0..n {
            let i = r * c + ch;
            assert!((f64::from(y[i]) - xh[r]).abs() < 1e-4, "y at channel {ch}");
            let dx = inv * (gs[r] - mg - xh[r] * mgx);
            assert!(
                (f64::from(gx[i]) - dx).abs() < 1e-3,
                "dx at channel {ch}: {} vs {dx}",
                gx[i]
            );
        }
        assert!(
            (f64::from(rm[ch]) - 0.1 * mean).abs() < 1e-6,
            "running mean {ch}"
        );
        let unbiased = var * n as f64 / (n - 1) as f64;
        assert!(
            (f64::from(rv[ch]) - (0.9 + 0.1 * unbiased)).abs() < 1e-5,
            "running var {ch}"
        );
    }
    bn.eval();
    let ye = vals(&bn.forward(&x.detach()).unwrap());
    for ch in checked {
        let i = 2 * c + ch;
        let want = (f64::from(xv[i]) - f64::from(rm[ch])) / (f64::from(rv[ch]) + 1e-5).sqrt();
        assert!(
            (f64::from(ye[i]) - want).abs() < 1e-4,
            "eval at channel {ch}"
        );
    }
}

/// PyTorch's mixed type (AMP): f16 activations through a BatchNorm2d whose parameters and
/// running statistics are f32, in training and evaluation; the output is f16, x's gradient
/// f16 and the weight's f32, all equal to the f32 computation up to f16 rounding.
#[test]
fn batch_norm_f16_input_with_f32_parameters() {
    if !dev().supports_f16() {
        return;
    }
    let xv: Vec<f32> = (0..2 * 3 * 4 * 4)
        .map(|i| ((i * 13 % 29) as f32) / 7.0 - 2.0)
        .collect();
    let x32 = Tensor::from_slice(dev(), &xv, &[2, 3, 4, 4]).unwrap();
    let x16 = x32.to_dtype(DType::F16).unwrap().requires_grad().unwrap();
    let x32 = x16
        .detach()
        .to_dtype(DType::F32)
        .unwrap()
        .requires_grad()
        .unwrap();
    let mut a = nn::BatchNorm2d::new(dev(), 3).unwrap();
    let mut b = nn::BatchNorm2d::new(dev(), 3).unwrap();
    let y16 = a.forward(&x16).unwrap();
    let y32 = b.forward(&x32).unwrap();
    assert_eq!(y16.dtype(), DType::F16);
    let close = |p: &[f32], q: &[f32], tol: f32| p.iter().zip(q).all(|(u, v)| (u - v).abs() <= tol);
    let v16 = vals(&y16.to_dtype(DType::F32).unwrap());
    assert!(close(&v16, &vals(&y32), 4e-3), "outputs");
    let (ga, gb) = (
        y16.to_dtype(DType::F32)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap(),
        y32.mul_scalar(1.0)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap(),
    );
    let gx = ga.get(&x16).unwrap();
    assert_eq!(gx.dtype(), DType::F16);
    let gw = ga.get(a.weight.as_ref().unwrap()).unwrap();
    assert_eq!(gw.dtype(), DType::F32);
    let gw32 = gb.get(b.weight.as_ref().unwrap()).unwrap();
    assert!(close(&vals(gw), &vals(gw32), 1e-2), "weight gradients");
    let sa = vals(&a.state.borrow().running_mean);
    assert!(
        close(&sa, &vals(&b.state.borrow().running_mean), 1e-3),
        "running mean"
    );
    a.eval();
    b.eval();
    let e16 = a.forward(&x16.detach()).unwrap();
    assert_eq!(e16.dtype(), DType::F16);
    let e32 = b.forward(&x32.detach()).unwrap();
    assert!(
        close(&vals(&e16.to_dtype(DType::F32).unwrap()), &vals(&e32), 4e-3),
        "eval"
    );
}

/// The explicit batch-norm backward takes the mixed forward's saved statistics: f16 dy and x
/// with an f32 weight (and a fused relu, whose saved input is f32) give dx in f16 and dweight
/// in f32, equal to the f32 computation up to f16 rounding; swapped arguments are still caught.
#[test]
fn batch_norm_backward_f16_input_with_f32_weight() {
    use wgtensor::ops::{batch_norm_backward, batch_norm_train, Activation, BatchNormOptions};
    if !dev().supports_f16() {
        return;
    }
    let xv: Vec<f32> = (0..2 * 3 * 5)
        .map(|i| ((i * 7 % 11) as f32) / 3.0 - 1.5)
        .collect();
    let gv: Vec<f32> = (0..2 * 3 * 5)
        .map(|i| ((i * 5 % 7) as f32) / 4.0 - 0.5)
        .collect();
    let x32 = Tensor::from_slice(dev(), &xv, &[2, 3, 5]).unwrap();
    let g32 = Tensor::from_slice(dev(), &gv, &[2, 3, 5]).unwrap();
    let x16 = x32.to_dtype(DType::F16).unwrap();
    let g16 = g32.to_dtype(DType::F16).unwrap();
    let (x32, g32) = (
        x16.to_dtype(DType::F32).unwrap(),
        g16.to_dtype(DType::F32).unwrap(),
    );
    let w = Tensor::from_slice(dev(), &[0.5f32, -1.0, 2.0], &[3]).unwrap();
    let o = BatchNormOptions {
        weight: Some(&w),
        activation: Activation::Relu,
        ..Default::default()
    };
    let f16run = batch_norm_train(&x16, None, &o).unwrap();
    let f32run = batch_norm_train(&x32, None, &o).unwrap();
    let a = batch_norm_backward(&g16, &x16, Some(&w), &f16run.saved).unwrap();
    let b = batch_norm_backward(&g32, &x32, Some(&w), &f32run.saved).unwrap();
    assert_eq!((a.dx.dtype(), a.dweight.dtype()), (DType::F16, DType::F32));
    let close = |p: &[f32], q: &[f32], tol: f32| p.iter().zip(q).all(|(u, v)| (u - v).abs() <= tol);
    assert!(close(
        &vals(&a.dx.to_dtype(DType::F32).unwrap()),
        &vals(&b.dx),
        1e-2
    ));
    assert!(close(&vals(&a.dweight), &vals(&b.dweight), 1e-2));
    let e = batch_norm_backward(&x16, &g16, Some(&w), &f16run.saved).unwrap_err();
    assert!(e.to_string().contains("swapped"), "{e}");
}

/// state_dict entries are detached, as PyTorch's (`keep_vars=False`): nothing recorded, and an
/// in-place copy into one writes the model. Turning requires_grad on over a parameter that is
/// a plain tensor is an error naming it, not a silent no-op.
#[test]
fn state_dict_is_detached_and_plain_parameters_are_named() {
    let d = dev();
    let mut lin = nn::Linear::new(d, 2, 2, true).unwrap();
    let sd = lin.state_dict();
    assert!(sd.iter().all(|(_, t)| !t.is_tracked()));
    let zeros = Tensor::zeros(d, &[2, 2], DType::F32).unwrap();
    sd[0].1.copy_from(&zeros).unwrap();
    assert_eq!(vals(&lin.weight), vec![0.0; 4]);
    assert!(
        lin.weight.is_tracked(),
        "the parameter itself stays trainable"
    );
    lin.weight = Tensor::from_slice(d, &[1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    let e = lin.set_requires_grad(true).unwrap_err().to_string();
    assert!(e.contains("parameter weight is a plain tensor"), "{e}");
    lin.weight = lin.weight.requires_grad().unwrap();
    lin.set_requires_grad(false).unwrap();
    lin.set_requires_grad(true).unwrap();
    assert!(lin.weight.is_tracked());
}

/// Sequential's and ModuleList's insert / pop / extend, as PyTorch's: the names renumber.
#[test]
fn containers_insert_and_pop() {
    let d = dev();
    let mut seq = nn::Sequential::new()
        .push(nn::Linear::new(d, 2, 3, true).unwrap())
        .push(nn::Linear::new(d, 3, 1, false).unwrap());
    seq.insert(1, nn::ReLU).unwrap();
    let keys: Vec<String> = seq.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(keys, ["0.weight", "0.bias", "2.weight"]);
    assert!(seq.insert(4, nn::ReLU).is_err());
    let x = Tensor::ones(d, &[4, 2], DType::F32).unwrap();
    assert_eq!(seq.forward(&x).unwrap().shape(), &[4, 1]);
    let relu = seq.pop(1).expect("the ReLU");
    assert_eq!(relu.forward(&x).unwrap().shape(), &[4, 2]);
    assert!(seq.pop(2).is_none());
    let keys: Vec<String> = seq.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(keys, ["0.weight", "0.bias", "1.weight"]);

    let mut list: nn::ModuleList<nn::Linear> = nn::ModuleList::new();
    list.extend((0..2).map(|_| nn::Linear::new(d, 2, 2, false).unwrap()));
    list.insert(0, nn::Linear::new(d, 2, 5, false).unwrap())
        .unwrap();
    assert_eq!(list[0].weight.shape(), &[5, 2]);
    assert!(list
        .insert(9, nn::Linear::new(d, 2, 2, false).unwrap())
        .is_err());
    assert_eq!(list.pop(0).unwrap().weight.shape(), &[5, 2]);
    assert_eq!(list.len(), 2);
    assert!(list.pop(2).is_none());
}

/// nn.LSTMCell / nn.GRUCell: PyTorch's names and init bounds; a step against an f64 reference
/// of PyTorch's cell formulas over the cell's own parameters (batched and unbatched, an absent
/// state as zeros); gradients reach every parameter; a loaded state dict reaches the step;
/// `bias: false` leaves the biases out.
#[test]
fn lstm_and_gru_cells() {
    let d = dev();
    let (i, h, b) = (3usize, 4usize, 2usize);
    let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
    let f64s = |t: &Tensor| -> Vec<f64> { vals(t).iter().map(|&v| v as f64).collect() };
    let xv: Vec<f32> = (0..b * i).map(|k| (k as f32 * 0.37).sin()).collect();
    let hv: Vec<f32> = (0..b * h).map(|k| (k as f32 * 0.53).cos() * 0.5).collect();
    let cv: Vec<f32> = (0..b * h).map(|k| (k as f32 * 0.29).sin() * 0.8).collect();
    let x = Tensor::from_slice(d, &xv, &[b, i]).unwrap();
    let h0 = Tensor::from_slice(d, &hv, &[b, h]).unwrap();
    let c0 = Tensor::from_slice(d, &cv, &[b, h]).unwrap();
    for lstm in [true, false] {
        let (lc, gc) = if lstm {
            (Some(nn::LstmCell::new(d, i, h, true).unwrap()), None)
        } else {
            (None, Some(nn::GruCell::new(d, i, h, true).unwrap()))
        };
        let m: &dyn Module = match (&lc, &gc) {
            (Some(c), _) => c,
            (_, Some(c)) => c,
            _ => unreachable!(),
        };
        let sd = m.state_dict();
        let names: Vec<&str> = sd.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]);
        let bound = 1.0 / (h as f32).sqrt();
        for (n, t) in &sd {
            assert!(vals(t).iter().all(|v| v.abs() <= bound), "{n} init");
        }
        let (wi, wh, bi, bh) = (
            f64s(&sd[0].1),
            f64s(&sd[1].1),
            f64s(&sd[2].1),
            f64s(&sd[3].1),
        );
        // Gate pre-activations of row r, unit u: W_ih x + b_ih and W_hh h + b_hh, separately
        // (GRU's n gate applies r to the second).
        let unit = |r: usize, gate: usize, u: usize, hs: &[f32]| -> (f64, f64) {
            let row = gate * h + u;
            let a = bi[row]
                + (0..i)
                    .map(|k| wi[row * i + k] * xv[r * i + k] as f64)
                    .sum::<f64>();
            let c = bh[row]
                + (0..h)
                    .map(|k| wh[row * h + k] * hs[r * h + k] as f64)
                    .sum::<f64>();
            (a, c)
        };
        for zero_state in [false, true] {
            let hs: Vec<f32> = if zero_state {
                vec![0.0; b * h]
            } else {
                hv.clone()
            };
            let cs: Vec<f32> = if zero_state {
                vec![0.0; b * h]
            } else {
                cv.clone()
            };
            let (got_h, got_c) = match (&lc, &gc, zero_state) {
                (Some(c), _, false) => {
                    let (h1, c1) = c.forward_cell(&x, Some((&h0, &c0))).unwrap();
                    (vals(&h1), vals(&c1))
                }
                (Some(c), _, true) => {
                    let (h1, c1) = c.forward_cell(&x, None).unwrap();
                    (vals(&h1), vals(&c1))
                }
                (_, Some(c), false) => (vals(&c.forward_cell(&x, Some(&h0)).unwrap()), vec![]),
                (_, Some(c), true) => (vals(&c.forward(&x).unwrap()), vec![]),
                _ => unreachable!(),
            };
            for r in 0..b {
                for u in 0..h {
                    let s = |gate: usize| {
                        let (a, c) = unit(r, gate, u, &hs);
                        a + c
                    };
                    let (want_h, want_c) = if lstm {
                        let c1 = sig(s(1)) * cs[r * h + u] as f64 + sig(s(0)) * s(2).tanh();
                        (sig(s(3)) * c1.tanh(), Some(c1))
                    } else {
                        let rr = sig(s(0));
                        let z = sig(s(1));
                        let (a, c) = unit(r, 2, u, &hs);
                        let n = (a + rr * c).tanh();
                        ((1.0 - z) * n + z * hs[r * h + u] as f64, None)
                    };
                    let k = r * h + u;
                    assert!(
                        (got_h[k] as f64 - want_h).abs() < 1e-5,
                        "lstm {lstm} h[{k}]"
                    );
                    if let Some(wc) = want_c {
                        assert!((got_c[k] as f64 - wc).abs() < 1e-5, "c[{k}]");
                    }
                }
            }
        }
        // Unbatched: the first row alone, states [H].
        let x1 = x.narrow(0, 0, 1).unwrap().reshape(&[i]).unwrap();
        let h1 = match (&lc, &gc) {
            (Some(c), _) => c.forward_cell(&x1, None).unwrap().0,
            (_, Some(c)) => c.forward_cell(&x1, None).unwrap(),
            _ => unreachable!(),
        };
        assert_eq!(h1.shape(), &[h]);
        // Gradients reach every parameter.
        let out = match (&lc, &gc) {
            (Some(c), _) => c.forward_cell(&x, Some((&h0, &c0))).unwrap().0,
            (_, Some(c)) => c.forward_cell(&x, Some(&h0)).unwrap(),
            _ => unreachable!(),
        };
        let grads = out.sum_all().unwrap().backward().unwrap();
        for (n, t) in &m.named_parameters() {
            assert!(grads.get(t).is_some(), "lstm {lstm}: no gradient for {n}");
        }
    }
    // A loaded state dict reaches the step: zero weights and biases give h' = 0 (GRU from a
    // zero state: (1 - z) tanh(0) + z 0).
    let mut cell = nn::GruCell::new(d, i, h, true).unwrap();
    let zeros: std::collections::HashMap<String, Tensor> = cell
        .state_dict()
        .into_iter()
        .map(|(n, t)| (n, Tensor::zeros(d, t.shape(), DType::F32).unwrap()))
        .collect();
    cell.load_state_dict(&zeros, true).unwrap();
    assert!(vals(&cell.forward(&x).unwrap()).iter().all(|&v| v == 0.0));
    let no_bias = nn::LstmCell::new(d, i, h, false).unwrap();
    let names: Vec<String> = no_bias.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["weight_ih", "weight_hh"]);
    assert!(nn::LstmCell::new(d, i, 0, true).is_err());
}

/// num_batches_tracked in a state dict shares the layer's count as PyTorch's buffer does: a
/// dict taken before training shows the count after it (as it shows the running statistics),
/// and loading it back changes nothing, so a cumulative average (momentum None) goes on with
/// the right factor.
#[test]
fn a_state_dict_follows_num_batches_tracked() {
    let cfg = nn::BatchNormConfig {
        momentum: None,
        ..Default::default()
    };
    let mut bn = nn::BatchNorm1d::with_config(dev(), 2, cfg).unwrap();
    let sd: std::collections::HashMap<String, Tensor> = bn.state_dict().into_iter().collect();
    let batch = |a: f32, b: f32| {
        let v: Vec<f32> = (0..4).flat_map(|i| [a + i as f32, b - i as f32]).collect();
        Tensor::from_slice(dev(), &v, &[4, 2]).unwrap()
    };
    bn.forward(&batch(0.0, 4.0)).unwrap(); // channel means 1.5 and 2.5
    assert_eq!(sd["num_batches_tracked"].to_vec::<i32>().unwrap(), vec![1]);
    nn::load_state_dict(&mut bn, &sd, true).unwrap();
    assert_eq!(bn.0.state.borrow().num_batches_tracked, 1);
    bn.forward(&batch(4.0, 8.0)).unwrap(); // means 5.5 and 6.5
    let mean = bn.0.state.borrow().running_mean.to_vec::<f32>().unwrap();
    assert_eq!(mean, vec![3.5, 4.5], "the average of both batches");
    assert_eq!(sd["num_batches_tracked"].to_vec::<i32>().unwrap(), vec![2]);
    // A count set through the public state shows at the next state_dict().
    bn.0.state.borrow_mut().num_batches_tracked = 7;
    let sd2: std::collections::HashMap<String, Tensor> = bn.state_dict().into_iter().collect();
    assert_eq!(sd2["num_batches_tracked"].to_vec::<i32>().unwrap(), vec![7]);
}
