//! Layers: PyTorch's state-dict names and order, default-initialization bounds, forwards equal
//! to the functional ops, BatchNorm's train/eval modes and counters, and a state dict saved to
//! safetensors and loaded into a fresh model (strict and not).
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

use wgtensor::io::{load_safetensors, save_safetensors};
use wgtensor::nn::{self, Module};
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
    // The whole model runs; eval mode makes it deterministic (no dropout, running stats).
    let mut m = cnn();
    let xi = wgtensor::ops::randn(dev(), &[3, 1, 8, 8], DType::F32).unwrap();
    assert_eq!(m.forward(&xi).unwrap().shape(), &[3, 3]);
    m.set_training(false);
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
    bn.set_training(false);
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
    let r = nn::load_state_dict(&mut cnn(), &partial, false).unwrap();
    assert_eq!(r.missing, vec!["8.bias".to_string()]);
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
    assert!(w[49 * 8..].iter().all(|&v| v == 0.0));
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
