//! nn::MultiheadAttention, nn::TransformerEncoderLayer and nn::TransformerEncoder against
//! PyTorch: each case loads PyTorch's state dict strictly, runs the forward on PyTorch's
//! inputs and the backward of `sum(out * g)`, and compares the output, the input gradients and
//! every parameter gradient with PyTorch's (tests/fixtures/attention.safetensors, written by
//! scripts/export_attention.py). Then the layers' names, initialization, modes, weights and
//! errors.
// Native only (blocking device and readback).
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::fixture_case::{check_forward_backward, close, Case};

use wgtensor::nn::{
    self, Forward, MhaMask, MhaOptions, Module, MultiheadAttention, MultiheadAttentionConfig,
    TransformerActivation, TransformerEncoder, TransformerEncoderLayer,
    TransformerEncoderLayerConfig,
};
use wgtensor::{DType, Tensor};

/// A case of tests/fixtures/attention.safetensors.
fn case(name: &'static str) -> Case {
    Case::load("attention.safetensors", name)
}

fn mha(cfg: MultiheadAttentionConfig, c: &Case) -> MultiheadAttention {
    let mut m = MultiheadAttention::new(common::device(), 8, 2, cfg).unwrap();
    m.load_state_dict(&c.state_dict(), true).unwrap();
    m.eval();
    m
}

#[test]
fn mha_sequence_first_with_bool_masks_matches_pytorch_on_both_paths() {
    let c = case("mha_a");
    let m = mha(MultiheadAttentionConfig::default(), &c);
    let (kpm, am) = (c.get("in.key_padding_mask"), c.get("in.attn_mask"));
    for need_weights in [false, true] {
        let (q, k, v) = (c.input("query"), c.input("key"), c.input("value"));
        let opts = MhaOptions {
            key_padding_mask: Some(MhaMask::Bool(&kpm)),
            attn_mask: Some(MhaMask::Bool(&am)),
            need_weights,
            ..Default::default()
        };
        let (out, w) = m.forward_attn(&q, &k, &v, &opts).unwrap();
        assert_eq!(out.shape(), &[5, 3, 8]);
        match w {
            Some(w) => close(&w, &c.get("weights"), "mha_a averaged weights"),
            None => assert!(!need_weights),
        }
        check_forward_backward(&c, &m, &out, &[("query", &q), ("key", &k), ("value", &v)]);
    }
}

#[test]
fn mha_batch_first_self_attention_with_float_mask_matches_pytorch() {
    let c = case("mha_b");
    let cfg = MultiheadAttentionConfig {
        batch_first: true,
        ..Default::default()
    };
    let m = mha(cfg, &c);
    let am = c.get("in.attn_mask");
    let x = c.input("x");
    let opts = MhaOptions {
        attn_mask: Some(MhaMask::Additive(&am)),
        need_weights: false,
        ..Default::default()
    };
    let (out, w) = m.forward_attn(&x, &x, &x, &opts).unwrap();
    assert!(w.is_none());
    check_forward_backward(&c, &m, &out, &[("x", &x)]);
    // Per-head weights [N, H, L, S].
    let opts = MhaOptions {
        need_weights: true,
        average_attn_weights: false,
        ..opts
    };
    let (_, w) = m.forward_attn(&x, &x, &x, &opts).unwrap();
    close(&w.unwrap(), &c.get("weights"), "mha_b per-head weights");
}

#[test]
fn mha_with_kdim_vdim_uses_separate_projections_and_matches_pytorch() {
    let c = case("mha_c");
    let cfg = MultiheadAttentionConfig {
        batch_first: true,
        kdim: Some(4),
        vdim: Some(6),
        ..Default::default()
    };
    let m = mha(cfg, &c);
    let names: Vec<String> = m.state_dict().into_iter().map(|(n, _)| n).collect();
    let want = [
        "q_proj_weight",
        "k_proj_weight",
        "v_proj_weight",
        "in_proj_bias",
        "out_proj.weight",
        "out_proj.bias",
    ];
    assert_eq!(names, want);
    let kpm = c.get("in.key_padding_mask");
    let (q, k, v) = (c.input("query"), c.input("key"), c.input("value"));
    let opts = MhaOptions {
        key_padding_mask: Some(MhaMask::Bool(&kpm)),
        need_weights: false,
        ..Default::default()
    };
    let (out, _) = m.forward_attn(&q, &k, &v, &opts).unwrap();
    check_forward_backward(&c, &m, &out, &[("query", &q), ("key", &k), ("value", &v)]);
    let opts = MhaOptions {
        need_weights: true,
        ..opts
    };
    let (_, w) = m.forward_attn(&q, &k, &v, &opts).unwrap();
    close(&w.unwrap(), &c.get("weights"), "mha_c weights");
}

fn encoder_layer(c: &Case, cfg: TransformerEncoderLayerConfig) -> TransformerEncoderLayer {
    let mut l = TransformerEncoderLayer::new(common::device(), 8, 2, cfg).unwrap();
    l.load_state_dict(&c.state_dict(), true).unwrap();
    l.eval();
    l
}

#[test]
fn pre_norm_gelu_causal_encoder_layer_matches_pytorch() {
    let c = case("enc_pre");
    let cfg = TransformerEncoderLayerConfig {
        dim_feedforward: 16,
        dropout: 0.0,
        activation: TransformerActivation::Gelu,
        batch_first: true,
        norm_first: true,
        ..Default::default()
    };
    let layer = encoder_layer(&c, cfg);
    // PyTorch's call: the float causal mask with the is_causal hint.
    let mask = nn_causal(5);
    let src = c.input("src");
    let out = layer
        .forward_with(&src, Some(MhaMask::Additive(&mask)), None, true)
        .unwrap();
    check_forward_backward(&c, &layer, &out, &[("src", &src)]);
    // The hint alone (the mask made here) and the mask alone (the explicit masked path) agree.
    let src = c.input("src");
    let out = layer.forward_with(&src, None, None, true).unwrap();
    check_forward_backward(&c, &layer, &out, &[("src", &src)]);
    let src = c.input("src");
    let out = layer
        .forward_with(&src, Some(MhaMask::Additive(&mask)), None, false)
        .unwrap();
    check_forward_backward(&c, &layer, &out, &[("src", &src)]);
}

/// `nn.Transformer.generate_square_subsequent_mask(l)`.
fn nn_causal(l: usize) -> Tensor {
    let v: Vec<f32> = (0..l * l)
        .map(|x| {
            if x % l <= x / l {
                0.0
            } else {
                f32::NEG_INFINITY
            }
        })
        .collect();
    Tensor::from_slice(common::device(), &v, &[l, l]).unwrap()
}

#[test]
fn post_norm_relu_encoder_layer_with_padding_matches_pytorch() {
    let c = case("enc_post");
    let cfg = TransformerEncoderLayerConfig {
        dim_feedforward: 16,
        ..Default::default()
    };
    let layer = encoder_layer(&c, cfg); // dropout 0.1, in eval
    let kpm = c.get("in.src_key_padding_mask");
    let src = c.input("src");
    let out = layer
        .forward_with(&src, None, Some(MhaMask::Bool(&kpm)), false)
        .unwrap();
    check_forward_backward(&c, &layer, &out, &[("src", &src)]);
}

#[test]
fn encoder_stack_with_final_norm_matches_pytorch() {
    let c = case("enc_stack");
    let dev = common::device();
    let cfg = TransformerEncoderLayerConfig {
        dim_feedforward: 16,
        dropout: 0.0,
        batch_first: true,
        norm_first: true,
        ..Default::default()
    };
    let base = TransformerEncoderLayer::new(dev, 8, 2, cfg).unwrap();
    let norm = nn::LayerNorm::new(dev, &[8]).unwrap();
    let mut enc = nn::TransformerEncoder::new(&base, 2, Some(norm)).unwrap();
    // The copies start equal and independent.
    let sd = enc.state_dict();
    let find = |n: &str| sd.iter().find(|(k, _)| k == n).unwrap().1.clone();
    let (w0, w1) = (
        find("layers.0.linear1.weight"),
        find("layers.1.linear1.weight"),
    );
    assert!(!w0.shares_storage(&w1));
    assert_eq!(w0.to_vec::<f32>().unwrap(), w1.to_vec::<f32>().unwrap());
    enc.load_state_dict(&c.state_dict(), true).unwrap();
    enc.eval();
    let mask = nn_causal(5);
    let src = c.input("src");
    let out = enc
        .forward_with(&src, Some(MhaMask::Additive(&mask)), None, true)
        .unwrap();
    check_forward_backward(&c, &enc, &out, &[("src", &src)]);
}

/// With weights asked for, the attention mask and the key padding mask are merged before they
/// meet the scores, as PyTorch's (attn_mask + key_padding_mask, then baddbmm) and as the path
/// without weights: added one after the other, a 1e8 and a -1e8 on one key wiped its score.
#[test]
fn both_masks_merge_before_the_scores_with_weights_too() {
    let dev = common::device();
    let m = MultiheadAttention::new(dev, 4, 1, Default::default()).unwrap();
    let x = Tensor::from_slice(
        dev,
        &(0..12).map(|i| (i as f32 * 0.37).sin()).collect::<Vec<_>>(),
        &[3, 1, 4],
    )
    .unwrap();
    let am = Tensor::from_slice(
        dev,
        &[1e8f32, 0.0, 0.0, 1e8, 0.0, 0.0, 1e8, 0.0, 0.0],
        &[3, 3],
    )
    .unwrap();
    let kpm = Tensor::from_slice(dev, &[-1e8f32, 0.0, 0.0], &[1, 3]).unwrap();
    let run = |need_weights: bool| {
        let opts = MhaOptions {
            attn_mask: Some(MhaMask::Additive(&am)),
            key_padding_mask: Some(MhaMask::Additive(&kpm)),
            need_weights,
            ..Default::default()
        };
        m.forward_attn(&x, &x, &x, &opts).unwrap()
    };
    let (with, weights) = run(true);
    let (without, _) = run(false);
    close(&with, &without, "output with and without weights");
    assert_eq!(weights.unwrap().shape(), &[1, 3, 3]);
}

#[test]
fn state_dict_names_and_initialization_are_pytorchs() {
    let dev = common::device();
    let m = MultiheadAttention::new(dev, 8, 2, Default::default()).unwrap();
    let names: Vec<String> = m.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "in_proj_weight",
            "in_proj_bias",
            "out_proj.weight",
            "out_proj.bias"
        ]
    );
    assert_eq!(m.in_proj_weight.as_ref().unwrap().shape(), &[24, 8]);
    // xavier_uniform_ on [3E, E]: bound sqrt(6 / (E + 3E)).
    let bound = (6.0f32 / 32.0).sqrt();
    let w = m.in_proj_weight.as_ref().unwrap().to_vec::<f32>().unwrap();
    assert!(w.iter().all(|x| x.abs() <= bound) && w.iter().any(|x| x.abs() > bound / 2.0));
    let zeros = |t: &Tensor| t.to_vec::<f32>().unwrap().iter().all(|&x| x == 0.0);
    assert!(zeros(m.in_proj_bias.as_ref().unwrap()));
    assert!(zeros(m.out_proj.bias.as_ref().unwrap()));
    let cfg = MultiheadAttentionConfig {
        bias: false,
        ..Default::default()
    };
    let m = MultiheadAttention::new(dev, 8, 2, cfg).unwrap();
    let names: Vec<String> = m.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["in_proj_weight", "out_proj.weight"]);

    let layer = TransformerEncoderLayer::new(dev, 8, 2, Default::default()).unwrap();
    let names: Vec<String> = layer.state_dict().into_iter().map(|(n, _)| n).collect();
    let want = [
        "self_attn.in_proj_weight",
        "self_attn.in_proj_bias",
        "self_attn.out_proj.weight",
        "self_attn.out_proj.bias",
        "linear1.weight",
        "linear1.bias",
        "linear2.weight",
        "linear2.bias",
        "norm1.weight",
        "norm1.bias",
        "norm2.weight",
        "norm2.bias",
    ];
    assert_eq!(names, want);
    assert_eq!(layer.linear1.weight.shape(), &[2048, 8]);

    // A frozen layer's copies stay frozen leaves (deepcopy keeps requires_grad=False), and
    // an optimizer accepts them; the copies are leaves of their own.
    let mut frozen = layer.clone();
    frozen.set_requires_grad(false).unwrap();
    let enc = TransformerEncoder::new(&frozen, 2, None).unwrap();
    let params = enc.named_parameters();
    assert_eq!(params.len(), 2 * want.len());
    assert!(params.iter().all(|(_, p)| !p.is_tracked() && p.is_leaf()));
    wgtensor::optim::Sgd::new(params, Default::default()).unwrap();
    let mut enc = enc;
    enc.set_requires_grad(true).unwrap();
    assert!(enc.named_parameters().iter().all(|(_, p)| p.is_tracked()));
    assert!(
        !frozen.linear1.weight.is_tracked(),
        "the copies are other leaves"
    );
}

#[test]
fn dropout_follows_train_and_eval() {
    let dev = common::device();
    let cfg = TransformerEncoderLayerConfig {
        dim_feedforward: 16,
        dropout: 0.5,
        batch_first: true,
        ..Default::default()
    };
    let mut layer = TransformerEncoderLayer::new(dev, 8, 2, cfg).unwrap();
    let x = wgtensor::ops::randn(dev, &[2, 6, 8], DType::F32).unwrap();
    let run = |l: &TransformerEncoderLayer| l.forward(&x).unwrap().to_vec::<f32>().unwrap();
    assert!(layer.is_training() && layer.self_attn.training);
    assert_ne!(
        run(&layer),
        run(&layer),
        "dropout should draw a new mask each call"
    );
    layer.eval();
    assert!(!layer.is_training() && !layer.self_attn.training);
    assert!(!layer.dropout.training && !layer.dropout1.training && !layer.dropout2.training);
    let a = run(&layer);
    assert_eq!(a, run(&layer));
    // Evaluation equals the same weights with dropout 0.
    let mut plain = layer.clone();
    for d in [&mut plain.dropout, &mut plain.dropout1, &mut plain.dropout2] {
        d.p = 0.0;
    }
    plain.self_attn.dropout = 0.0;
    plain.train();
    let b = run(&plain);
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() <= 1e-6, "{x} vs {y}");
    }
    // Attention dropout alone: weights in training are rescaled and some are zeroed.
    let cfg = MultiheadAttentionConfig {
        dropout: 0.5,
        batch_first: true,
        ..Default::default()
    };
    let mut m = MultiheadAttention::new(dev, 8, 2, cfg).unwrap();
    let (_, w) = m.forward_attn(&x, &x, &x, &Default::default()).unwrap();
    let w = w.unwrap().to_vec::<f32>().unwrap();
    assert!(w.contains(&0.0));
    m.eval();
    let (_, w) = m.forward_attn(&x, &x, &x, &Default::default()).unwrap();
    assert!(w.unwrap().to_vec::<f32>().unwrap().iter().all(|&p| p > 0.0));
}

#[test]
fn need_weights_gives_averaged_weights_and_unbatched_inputs_work() {
    let dev = common::device();
    let m = MultiheadAttention::new(dev, 8, 4, Default::default()).unwrap(); // [L, N, E]
    let q = wgtensor::ops::randn(dev, &[3, 2, 8], DType::F32).unwrap();
    let kv = wgtensor::ops::randn(dev, &[5, 2, 8], DType::F32).unwrap();
    let (out, w) = m.forward_attn(&q, &kv, &kv, &Default::default()).unwrap();
    assert_eq!(out.shape(), &[3, 2, 8]);
    let w = w.unwrap();
    assert_eq!(w.shape(), &[2, 3, 5]); // [N, L, S]
    for row in w.to_vec::<f32>().unwrap().chunks(5) {
        assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5);
    }
    let per_head = MhaOptions {
        average_attn_weights: false,
        ..Default::default()
    };
    let (_, wh) = m.forward_attn(&q, &kv, &kv, &per_head).unwrap();
    let wh = wh.unwrap();
    assert_eq!(wh.shape(), &[2, 4, 3, 5]);
    let avg = wh.mean(1, false).unwrap().to_vec::<f32>().unwrap();
    for (a, b) in avg.iter().zip(w.to_vec::<f32>().unwrap()) {
        assert!((a - b).abs() < 1e-6);
    }
    // Unbatched [L, E] equals the batch of one; the fused path agrees with the explicit one.
    let q0 = q.narrow(1, 0, 1).unwrap().squeeze(1).unwrap();
    let kv0 = kv.narrow(1, 0, 1).unwrap().squeeze(1).unwrap();
    let (o0, w0) = m
        .forward_attn(&q0, &kv0, &kv0, &Default::default())
        .unwrap();
    assert_eq!(o0.shape(), &[3, 8]);
    assert_eq!(w0.unwrap().shape(), &[3, 5]);
    let fused = MhaOptions {
        need_weights: false,
        ..Default::default()
    };
    let (f0, none) = m.forward_attn(&q0, &kv0, &kv0, &fused).unwrap();
    assert!(none.is_none());
    let want = out
        .narrow(1, 0, 1)
        .unwrap()
        .squeeze(1)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    for got in [o0, f0] {
        for (a, b) in got.to_vec::<f32>().unwrap().iter().zip(&want) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
    }
}

#[test]
fn wrong_shapes_are_errors_naming_the_layer_and_the_shapes() {
    let dev = common::device();
    let err = MultiheadAttention::new(dev, 10, 3, Default::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("MultiheadAttention") && err.contains("10") && err.contains('3'),
        "{err}"
    );
    let err = MultiheadAttention::new(dev, 0, 1, Default::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "embed_dim and num_heads must be greater than 0, got embed_dim=0 and num_heads=1 \
             instead"
        ),
        "{err}"
    );
    // nn.MultiheadAttention builds with any dropout; its forward in training refuses one
    // outside [0, 1] (F.dropout's words), in eval nothing is dropped.
    let cfg = MultiheadAttentionConfig {
        dropout: 1.5,
        ..Default::default()
    };
    let mut m = MultiheadAttention::new(dev, 8, 2, cfg).unwrap();
    let x = Tensor::zeros(dev, &[4, 2, 8], DType::F32).unwrap();
    let err = m
        .forward_attn(&x, &x, &x, &MhaOptions::default())
        .unwrap_err()
        .to_string();
    let words = "dropout probability has to be between 0 and 1, but got 1.5";
    assert!(err.contains(words), "{err}");
    m.eval();
    assert!(m.forward_attn(&x, &x, &x, &MhaOptions::default()).is_ok());
    // At or below 0 (or NaN) the explicit path drops nothing in training (`dropout_p > 0`).
    for p in [-0.5, f64::NAN] {
        let cfg = MultiheadAttentionConfig {
            dropout: p,
            ..Default::default()
        };
        let m = MultiheadAttention::new(dev, 8, 2, cfg).unwrap();
        let xs: Vec<f32> = (0..64).map(|i| (i % 7) as f32 * 0.25).collect();
        let x = Tensor::from_slice(dev, &xs, &[4, 2, 8]).unwrap();
        let (y, w) = m.forward_attn(&x, &x, &x, &MhaOptions::default()).unwrap();
        let w = w.unwrap().to_vec::<f32>().unwrap();
        // Each averaged weight row sums to 1: nothing was zeroed or rescaled.
        for row in w.chunks(4) {
            assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5, "{row:?}");
        }
        assert!(y.to_vec::<f32>().unwrap().iter().all(|v| v.is_finite()));
        // Without weights the fused path refuses it, as SDPA on PyTorch's CPU backends.
        let o = MhaOptions {
            need_weights: false,
            ..Default::default()
        };
        let e = m.forward_attn(&x, &x, &x, &o).unwrap_err().to_string();
        assert!(
            e.contains("dropout probability has to be between 0 and 1"),
            "{e}"
        );
    }
    let cfg = TransformerEncoderLayerConfig {
        dropout: 1.5,
        ..Default::default()
    };
    let err = TransformerEncoderLayer::new(dev, 8, 2, cfg)
        .unwrap_err()
        .to_string();
    assert!(err.contains(words), "{err}");

    let m = MultiheadAttention::new(dev, 8, 2, Default::default()).unwrap();
    let x = Tensor::zeros(dev, &[4, 2, 8], DType::F32).unwrap();
    let bad = Tensor::zeros(dev, &[4, 2, 6], DType::F32).unwrap();
    let msg = |r: wgtensor::Result<(Tensor, Option<Tensor>)>| r.unwrap_err().to_string();
    // An integer additive mask is refused, as PyTorch's "only bool and floating types of
    // attn_mask are supported" (a bool-style i32 mask goes in MhaMask::Bool).
    let im = Tensor::zeros(dev, &[4, 4], DType::I32).unwrap();
    for need_weights in [true, false] {
        let o = MhaOptions {
            attn_mask: Some(MhaMask::Additive(&im)),
            need_weights,
            ..Default::default()
        };
        let e = msg(m.forward_attn(&x, &x, &x, &o));
        assert!(e.contains("MultiheadAttention") && e.contains("I32"), "{e}");
    }
    let e = msg(m.forward_attn(&bad, &x, &x, &Default::default()));
    assert!(
        e.contains("MultiheadAttention") && e.contains("[4, 2, 6]"),
        "{e}"
    );
    let flat = Tensor::zeros(dev, &[8], DType::F32).unwrap();
    let e = msg(m.forward_attn(&flat, &x, &x, &Default::default()));
    assert!(e.contains("MultiheadAttention") && e.contains("[8]"), "{e}");
    let short = Tensor::zeros(dev, &[3, 2, 8], DType::F32).unwrap();
    let e = msg(m.forward_attn(&x, &x, &short, &Default::default()));
    assert!(
        e.contains(
            "key shape torch.Size([4, 2, 8]) does not match value shape torch.Size([3, 2, 8])"
        ),
        "{e}"
    );
    let e = msg(m.forward_attn(&bad, &x, &x, &Default::default()));
    assert!(
        e.contains("was expecting embedding dimension of 8, but got 6"),
        "{e}"
    );
    // Separate key and value projections (kdim, vdim): PyTorch's sentences for them.
    let cfg = MultiheadAttentionConfig {
        kdim: Some(3),
        vdim: Some(3),
        ..Default::default()
    };
    let sep = MultiheadAttention::new(dev, 8, 2, cfg).unwrap();
    let z = |s: &[usize]| Tensor::zeros(dev, s, DType::F32).unwrap();
    let e = msg(sep.forward_attn(&x, &z(&[5, 2, 3]), &z(&[6, 2, 3]), &Default::default()));
    assert!(
        e.contains("key's sequence and batch dims torch.Size([5, 2]) do not match value's torch.Size([6, 2])"),
        "{e}"
    );
    let e = msg(sep.forward_attn(&x, &z(&[5, 2, 4]), &z(&[5, 2, 3]), &Default::default()));
    assert!(
        e.contains("expecting key weights shape of (8, 4), but got torch.Size([8, 3])"),
        "{e}"
    );
    let e = msg(sep.forward_attn(&x, &z(&[5, 2, 3]), &z(&[5, 2, 4]), &Default::default()));
    assert!(
        e.contains("expecting value weights shape of (8, 4), but got torch.Size([8, 3])"),
        "{e}"
    );
    let kpm = Tensor::zeros(dev, &[4, 2], DType::F32).unwrap(); // [S, N]: transposed
    let opts = MhaOptions {
        key_padding_mask: Some(MhaMask::Bool(&kpm)),
        ..Default::default()
    };
    let e = msg(m.forward_attn(&x, &x, &x, &opts));
    assert!(
        e.contains("Expected key_padded_mask.shape[0] to be 2, but got 4"),
        "{e}"
    );
    // Unbatched: PyTorch has unsqueezed the mask to [1, S] by then.
    let kpm = Tensor::zeros(dev, &[3], DType::F32).unwrap();
    let x2 = Tensor::zeros(dev, &[4, 8], DType::F32).unwrap();
    let opts = MhaOptions {
        key_padding_mask: Some(MhaMask::Bool(&kpm)),
        ..Default::default()
    };
    let e = msg(m.forward_attn(&x2, &x2, &x2, &opts));
    assert!(
        e.contains("Expected key_padded_mask.shape[1] to be 4, but got 3"),
        "{e}"
    );
    let am = Tensor::zeros(dev, &[2, 4, 4], DType::F32).unwrap(); // needs N * H = 4
    let opts = MhaOptions {
        attn_mask: Some(MhaMask::Additive(&am)),
        need_weights: false,
        ..Default::default()
    };
    let e = msg(m.forward_attn(&x, &x, &x, &opts));
    assert!(
        e.contains("attn_mask") && e.contains("[4, 4, 4]") && e.contains("[2, 4, 4]"),
        "{e}"
    );

    let layer = TransformerEncoderLayer::new(dev, 8, 2, Default::default()).unwrap();
    let e = layer.forward(&bad).unwrap_err().to_string();
    assert!(
        e.contains("self_attn (MultiheadAttention)") && e.contains("[4, 2, 6]"),
        "{e}"
    );
    // In a stack, the path names the layer.
    let enc = nn::TransformerEncoder::new(&layer, 2, None).unwrap();
    let e = enc.forward(&bad).unwrap_err().to_string();
    assert!(e.contains("layers.0.self_attn (MultiheadAttention)"), "{e}");
}

#[test]
fn causal_with_key_padding_agrees_between_fused_and_explicit_paths() {
    let dev = common::device();
    let cfg = MultiheadAttentionConfig {
        batch_first: true,
        ..Default::default()
    };
    let mut m = MultiheadAttention::new(dev, 8, 2, cfg).unwrap();
    m.eval();
    let x = wgtensor::ops::randn(dev, &[2, 4, 8], DType::F32).unwrap();
    // Batch 1 pads its last key; no query row is left without keys.
    let pad =
        Tensor::from_slice(dev, &[0.0f32, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0], &[2, 4]).unwrap();
    let run = |need_weights: bool, attn_mask: Option<MhaMask>| {
        let opts = MhaOptions {
            key_padding_mask: Some(MhaMask::Bool(&pad)),
            attn_mask,
            need_weights,
            is_causal: true,
            ..Default::default()
        };
        let (out, w) = m.forward_attn(&x, &x, &x, &opts).unwrap();
        (out.to_vec::<f32>().unwrap(), w)
    };
    let (fused, _) = run(false, None);
    let (explicit, w) = run(true, None);
    // The same causal mask given as PyTorch's bool mask (nonzero above the diagonal).
    let upper: Vec<f32> = (0..16)
        .map(|i| if i % 4 > i / 4 { 1.0 } else { 0.0 })
        .collect();
    let upper = Tensor::from_slice(dev, &upper, &[4, 4]).unwrap();
    let (given, _) = run(false, Some(MhaMask::Bool(&upper)));
    for other in [&explicit, &given] {
        for (a, b) in fused.iter().zip(other) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
    }
    // Weights: zero above the diagonal and on the padded key.
    let w = w.unwrap().to_vec::<f32>().unwrap();
    for (i, p) in w.iter().enumerate() {
        let (n, l, s) = (i / 16, i / 4 % 4, i % 4);
        if s > l || (n == 1 && s == 3) {
            assert_eq!(*p, 0.0, "weight [{n}, {l}, {s}]");
        } else {
            assert!(*p > 0.0, "weight [{n}, {l}, {s}]");
        }
    }
}

/// The packed self-attention projection is PyTorch's `query is key is value`: a detached copy
/// of x shares its storage but not its graph, so attention of (x.detach(), x, x) still
/// routes x's gradient through key and value, equal to the separate projections' (the same
/// call with a copy of x as query).
#[test]
fn mha_self_attention_shortcut_respects_autograd_identity() {
    let dev = common::device();
    let m = MultiheadAttention::new(dev, 8, 2, Default::default()).unwrap();
    let x = wgtensor::ops::randn(dev, &[5, 2, 8], DType::F32)
        .unwrap()
        .requires_grad()
        .unwrap();
    let opts = MhaOptions {
        need_weights: false,
        ..Default::default()
    };
    let grad_of = |q: &Tensor| {
        let (y, _) = m.forward_attn(q, &x, &x, &opts).unwrap();
        let g = y.sum_all().unwrap().backward().unwrap();
        g.get(&x).map(|t| t.to_vec::<f32>().unwrap())
    };
    let detached = grad_of(&x.detach()).expect("x's gradient through key and value");
    let copied = grad_of(&x.detach().contiguous().unwrap().add_scalar(0.0).unwrap()).unwrap();
    for (a, b) in detached.iter().zip(&copied) {
        assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{a} vs {b}");
    }
}

/// Under `is_causal` with no key padding mask and no weights, PyTorch drops the attn_mask
/// before its shape checks (only its rank is checked): a mask of another shape gives the
/// causal result, not an error.
#[test]
fn causal_drops_the_attn_mask_before_its_shape_check() {
    let cfg = MultiheadAttentionConfig {
        batch_first: true,
        ..Default::default()
    };
    let m = MultiheadAttention::new(common::device(), 8, 2, cfg).unwrap();
    let x = wgtensor::ops::randn(common::device(), &[2, 5, 8], DType::F32).unwrap();
    let causal = MhaOptions {
        is_causal: true,
        need_weights: false,
        ..Default::default()
    };
    let want = m.forward_attn(&x, &x, &x, &causal).unwrap().0;
    let bad = Tensor::zeros(common::device(), &[5, 6], DType::F32).unwrap();
    let opts = MhaOptions {
        attn_mask: Some(MhaMask::Additive(&bad)),
        ..causal
    };
    let got = m.forward_attn(&x, &x, &x, &opts).unwrap().0;
    assert_eq!(got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    let rank1 = Tensor::zeros(common::device(), &[5], DType::F32).unwrap();
    let opts = MhaOptions {
        attn_mask: Some(MhaMask::Additive(&rank1)),
        ..causal
    };
    let e = m.forward_attn(&x, &x, &x, &opts).unwrap_err().to_string();
    assert!(
        e.contains("expected `attn_mask` to be `None`, 2-D or 3-D but found 1-D tensor instead"),
        "{e}"
    );
    // An unbatched query's 3-D mask is compared with (num_heads, L, S) first
    // (_mha_shape_check), even on this path.
    let x1 = wgtensor::ops::randn(common::device(), &[5, 8], DType::F32).unwrap();
    let bad3 = Tensor::zeros(common::device(), &[3, 5, 5], DType::F32).unwrap();
    let opts = MhaOptions {
        attn_mask: Some(MhaMask::Additive(&bad3)),
        ..causal
    };
    let e = m
        .forward_attn(&x1, &x1, &x1, &opts)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("Expected `attn_mask` shape to be (2, 5, 5) but got torch.Size([3, 5, 5])"),
        "{e}"
    );
    let good3 = Tensor::zeros(common::device(), &[2, 5, 5], DType::F32).unwrap();
    let opts = MhaOptions {
        attn_mask: Some(MhaMask::Additive(&good3)),
        ..causal
    };
    m.forward_attn(&x1, &x1, &x1, &opts).unwrap();
}

/// PyTorch checks the masks' dtypes first (`_canonical_mask`, also where the causal hint drops
/// the mask), then the ranks with q, k and v (`_mha_shape_check`), the features, and after the
/// in-projection attn_mask's shape before key_padding_mask's.
#[test]
fn mask_checks_run_in_pytorchs_order() {
    let dev = common::device();
    let m = MultiheadAttention::new(dev, 8, 2, Default::default()).unwrap();
    let x = Tensor::zeros(dev, &[4, 2, 8], DType::F32).unwrap();
    let narrow = Tensor::zeros(dev, &[4, 2, 6], DType::F32).unwrap();
    let int_mask = Tensor::zeros(dev, &[4, 4], DType::I32).unwrap();
    let rank3_pad = Tensor::zeros(dev, &[2, 4, 1], DType::F32).unwrap();
    let msg = |q: &Tensor, o: &MhaOptions| m.forward_attn(q, &x, &x, o).unwrap_err().to_string();
    // An integer additive mask: refused before a bad key padding mask, also under the
    // causal hint that drops it.
    for is_causal in [false, true] {
        let o = MhaOptions {
            key_padding_mask: Some(MhaMask::Bool(&rank3_pad)),
            attn_mask: Some(MhaMask::Additive(&int_mask)),
            is_causal,
            need_weights: false,
            ..Default::default()
        };
        let e = msg(&x, &o);
        assert!(
            e.contains("only bool and floating types of attn_mask are supported"),
            "{e}"
        );
        let o = MhaOptions {
            key_padding_mask: None,
            ..o
        };
        let e = msg(&x, &o);
        assert!(e.contains("types of attn_mask"), "{e}");
    }
    let o = MhaOptions {
        key_padding_mask: Some(MhaMask::Additive(&int_mask)),
        attn_mask: Some(MhaMask::Additive(&int_mask)),
        ..Default::default()
    };
    assert!(msg(&x, &o).contains("types of key_padding_mask"));
    // A key padding mask of the wrong rank is named before the query's features.
    let o = MhaOptions {
        key_padding_mask: Some(MhaMask::Bool(&rank3_pad)),
        ..Default::default()
    };
    let e = msg(&narrow, &o);
    assert!(
        e.contains("expected `key_padding_mask` to be `None` or 2-D but found 3-D"),
        "{e}"
    );
    let rank1 = Tensor::zeros(dev, &[4], DType::F32).unwrap();
    let o = MhaOptions {
        attn_mask: Some(MhaMask::Additive(&rank1)),
        ..Default::default()
    };
    let e = msg(&narrow, &o);
    assert!(e.contains("2-D or 3-D but found 1-D"), "{e}");
    // Both masks of the right ranks but wrong shapes: attn_mask's is named.
    let pad = Tensor::zeros(dev, &[2, 3], DType::F32).unwrap();
    let attn = Tensor::zeros(dev, &[4, 3], DType::F32).unwrap();
    let o = MhaOptions {
        key_padding_mask: Some(MhaMask::Bool(&pad)),
        attn_mask: Some(MhaMask::Additive(&attn)),
        ..Default::default()
    };
    let e = msg(&x, &o);
    assert!(
        e.contains("The shape of the 2D attn_mask is torch.Size([4, 3]), but should be (4, 4)."),
        "{e}"
    );
    // A float mask keeps its dtype (_canonical_mask): the explicit path's baddbmm needs the
    // query's, the fused path's SDPA f32 or the query's; after the shape checks.
    if dev.supports_f16() {
        let half = Tensor::zeros(dev, &[4, 4], DType::F16).unwrap();
        let o = MhaOptions {
            attn_mask: Some(MhaMask::Additive(&half)),
            ..Default::default()
        };
        let e = msg(&x, &o);
        assert!(
            e.contains("Input dtypes must be the same, got: input c10::Half, batch1: float"),
            "{e}"
        );
        let o = MhaOptions {
            need_weights: false,
            ..o
        };
        let e = msg(&x, &o);
        assert!(
            e.contains("Expected attn_mask dtype to be bool or float or to match query dtype"),
            "{e}"
        );
        let bad_pad = Tensor::zeros(dev, &[2, 3], DType::F32).unwrap();
        let o = MhaOptions {
            key_padding_mask: Some(MhaMask::Bool(&bad_pad)),
            ..o
        };
        assert!(msg(&x, &o).contains("Expected key_padded_mask.shape["));
    }
    // The transformer layers name their own arguments.
    let layer = TransformerEncoderLayer::new(dev, 8, 2, Default::default()).unwrap();
    let e = layer
        .forward_with(&x, Some(MhaMask::Additive(&int_mask)), None, false)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("TransformerEncoderLayer") && e.contains("types of src_mask"),
        "{e}"
    );
    let enc = TransformerEncoder::new(&layer, 0, None).unwrap();
    let e = enc
        .forward_with(&x, None, Some(MhaMask::Additive(&int_mask)), false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("types of src_key_padding_mask"), "{e}");
}

/// PyTorch's encoder takes its nested-tensor path by default: in eval without gradients, a
/// batch-first post-norm encoder given a left-aligned key padding mask pads its output with
/// zeros before the final norm, so padded positions are the norm's bias (0 without a norm);
/// every other position matches the path that keeps them (here: gradients on).
#[test]
fn encoder_zeroes_padded_positions_as_pytorchs_nested_path() {
    let dev = common::device();
    let cfg = TransformerEncoderLayerConfig {
        dim_feedforward: 16,
        dropout: 0.0,
        batch_first: true,
        ..Default::default()
    };
    let layer = TransformerEncoderLayer::new(dev, 8, 2, cfg).unwrap();
    let norm = nn::LayerNorm::new(dev, &[8]).unwrap();
    let bias: Vec<f32> = (0..8).map(|i| 0.1 * i as f32).collect();
    wgtensor::no_grad(|| {
        norm.bias
            .as_ref()
            .unwrap()
            .copy_from(&Tensor::from_slice(dev, &bias, &[8]).unwrap())
    })
    .unwrap();
    let mut enc = nn::TransformerEncoder::new(&layer, 2, Some(norm)).unwrap();
    enc.eval();
    let xs: Vec<f32> = (0..2 * 3 * 8)
        .map(|i| ((i * 7) % 11) as f32 * 0.1)
        .collect();
    let src = Tensor::from_slice(dev, &xs, &[2, 3, 8]).unwrap();
    let run = |pad: &[f32], grad: bool| {
        let m = Tensor::from_slice(dev, pad, &[2, 3]).unwrap();
        let f = || enc.forward_with(&src, None, Some(MhaMask::Bool(&m)), false);
        let y = if grad { f() } else { wgtensor::no_grad(f) };
        y.unwrap().to_vec::<f32>().unwrap()
    };
    // Row 0 pads its last token, row 1 none.
    let nested = run(&[0.0, 0.0, 1.0, 0.0, 0.0, 0.0], false);
    let kept = run(&[0.0, 0.0, 1.0, 0.0, 0.0, 0.0], true);
    let padded = 2 * 8..3 * 8;
    for (i, (a, b)) in nested.iter().zip(&kept).enumerate() {
        if padded.contains(&i) {
            assert!((a - bias[i % 8]).abs() < 1e-6, "{i}: {a}");
        } else {
            assert!((a - b).abs() < 1e-5, "{i}: {a} vs {b}");
        }
    }
    // With gradients the padded token is computed: its row is not the norm of zeros (one
    // element alone may come near its bias: 0.30069 against 0.3 on an H200).
    let off = padded
        .map(|i| (kept[i] - bias[i % 8]).abs())
        .fold(0.0f32, f32::max);
    assert!(
        off > 1e-2,
        "the padded row is computed with gradients: {off}"
    );
    // Padding that is not left-aligned (a leading pad) keeps the computed values.
    let lead = run(&[1.0, 0.0, 0.0, 0.0, 0.0, 0.0], false);
    let lead_grad = run(&[1.0, 0.0, 0.0, 0.0, 0.0, 0.0], true);
    assert_eq!(lead, lead_grad);
    // enable_nested_tensor false: the padded position keeps its computed value.
    let mut off = enc.clone();
    off.enable_nested_tensor = false;
    let m = Tensor::from_slice(dev, &[0.0f32, 0.0, 1.0, 0.0, 0.0, 0.0], &[2, 3]).unwrap();
    let y = wgtensor::no_grad(|| off.forward_with(&src, None, Some(MhaMask::Bool(&m)), false));
    for (i, (a, b)) in y
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .zip(&kept)
        .enumerate()
    {
        assert!((a - b).abs() < 1e-5, "{i}: {a} vs {b}");
    }
    // mask_check false: any mask takes the nested path, each sequence's first `count`
    // tokens taken as its real ones (a leading pad of one: the first two tokens).
    let mut unchecked = enc.clone();
    unchecked.mask_check = false;
    let m = Tensor::from_slice(dev, &[1.0f32, 0.0, 0.0, 0.0, 0.0, 0.0], &[2, 3]).unwrap();
    let y =
        wgtensor::no_grad(|| unchecked.forward_with(&src, None, Some(MhaMask::Bool(&m)), false));
    for (i, (a, b)) in y
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .zip(&nested)
        .enumerate()
    {
        assert!((a - b).abs() < 1e-6, "{i}: {a} vs {b}");
    }
}

/// PyTorch's test_transformerencoderlayer: a query whose mask excludes every key gives NaN on
/// the layer's fast path (eval, batch-first, no gradients) and finite values on the slow path
/// (training, or gradients on); the encoder's nested-tensor path pads such a sequence instead.
#[test]
fn fully_masked_rows_follow_pytorchs_fast_and_slow_paths() {
    let dev = common::device();
    let cfg = TransformerEncoderLayerConfig {
        dim_feedforward: 16,
        dropout: 0.0,
        batch_first: true,
        ..Default::default()
    };
    let mut layer = TransformerEncoderLayer::new(dev, 4, 2, cfg).unwrap();
    layer.eval();
    let x = Tensor::from_slice(dev, &[20f32, 30., 40., 50.], &[1, 1, 4]).unwrap();
    let run = |layer: &TransformerEncoderLayer, masked: f32, grad: bool| {
        let pad = Tensor::from_slice(dev, &[masked], &[1, 1]).unwrap();
        let f = || layer.forward_with(&x, None, Some(MhaMask::Bool(&pad)), false);
        let y = if grad { f() } else { wgtensor::no_grad(f) };
        y.unwrap().to_vec::<f32>().unwrap()
    };
    assert!(
        run(&layer, 1.0, false).iter().all(|v| v.is_nan()),
        "fast path"
    );
    assert!(
        run(&layer, 1.0, true).iter().all(|v| v.is_finite()),
        "slow path"
    );
    assert!(run(&layer, 0.0, false).iter().all(|v| v.is_finite()));
    layer.train();
    assert!(
        run(&layer, 1.0, false).iter().all(|v| v.is_finite()),
        "training"
    );
    layer.eval();
    // An attention mask whose row 1 excludes every key: that row only.
    let xs: Vec<f32> = (0..2 * 3 * 4).map(|i| (i % 5) as f32 * 0.3).collect();
    let src = Tensor::from_slice(dev, &xs, &[2, 3, 4]).unwrap();
    let inf = f32::NEG_INFINITY;
    let mask = Tensor::from_slice(dev, &[0., inf, 0., inf, inf, inf, 0., 0., 0.], &[3, 3]).unwrap();
    let y =
        wgtensor::no_grad(|| layer.forward_with(&src, Some(MhaMask::Additive(&mask)), None, false))
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
    for (i, v) in y.iter().enumerate() {
        assert_eq!(v.is_nan(), (i / 4) % 3 == 1, "{i}: {v}");
    }
    // The encoder: a left-aligned padding mask takes the nested path (no NaN, the fully
    // padded sequence zeroed); one that is not left-aligned takes each layer's fast path.
    let enc = {
        let mut e = nn::TransformerEncoder::new(&layer, 2, None).unwrap();
        e.eval();
        e
    };
    let run_enc = |pad: &[f32]| {
        let m = Tensor::from_slice(dev, pad, &[2, 3]).unwrap();
        wgtensor::no_grad(|| enc.forward_with(&src, None, Some(MhaMask::Bool(&m)), false))
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
    };
    let nested = run_enc(&[1.0, 1.0, 1.0, 0.0, 0.0, 1.0]);
    assert!(nested[..12].iter().all(|&v| v == 0.0), "{nested:?}");
    assert!(nested[12..].iter().all(|v| v.is_finite()));
    let fast = run_enc(&[1.0, 1.0, 1.0, 1.0, 0.0, 0.0]);
    assert!(fast[..12].iter().all(|v| v.is_nan()), "{fast:?}");
    assert!(fast[12..].iter().all(|v| v.is_finite()));
}
