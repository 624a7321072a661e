//! nn::TransformerDecoderLayer and nn::TransformerDecoder against PyTorch: each case loads
//! PyTorch's state dict strictly, runs the forward on PyTorch's inputs and the backward of
//! `sum(out * g)`, and compares the output, the input gradients and every parameter gradient
//! with PyTorch's, then the output in eval without gradients (tests/fixtures/decoder.safetensors,
//! written by scripts/export_decoder.py). Then the layers' names, copies and errors.
// Native only (blocking device and readback).
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::fixture_case::{check_forward_backward, close, Case};
use wgtensor::nn::{
    self, MhaMask, Module, TransformerActivation, TransformerDecoder, TransformerDecoderLayer,
    TransformerDecoderLayerConfig, TransformerDecoderOptions,
};
use wgtensor::{no_grad, DType, Tensor};

fn case(name: &'static str) -> Case {
    Case::load("decoder.safetensors", name)
}

fn layer(c: &Case, cfg: TransformerDecoderLayerConfig) -> TransformerDecoderLayer {
    let cfg = TransformerDecoderLayerConfig {
        dim_feedforward: 16,
        dropout: 0.0,
        ..cfg
    };
    let mut l = TransformerDecoderLayer::new(common::device(), 8, 2, cfg).unwrap();
    l.load_state_dict(&c.state_dict(), true).unwrap();
    l
}

/// The case's output and every gradient against PyTorch's in training, then its output in eval
/// without gradients (where PyTorch's attention may take its fast path).
fn check_case<M: Module>(
    c: &Case,
    model: &mut M,
    run: impl Fn(&M, &Tensor, &Tensor) -> wgtensor::Result<Tensor>,
) {
    let (tgt, memory) = (c.input("tgt"), c.input("memory"));
    let out = run(model, &tgt, &memory).unwrap();
    check_forward_backward(c, model, &out, &[("tgt", &tgt), ("memory", &memory)]);
    model.eval();
    let y = no_grad(|| run(model, &c.get("in.tgt"), &c.get("in.memory"))).unwrap();
    close(&y, &c.get("out_eval"), &format!("{} eval", c.name));
}

/// Post-norm relu, sequence-first: a float causal target mask and a bool memory padding mask.
#[test]
fn post_norm_layer_with_causal_and_padding_masks_matches_pytorch() {
    let c = case("dec_a");
    let mut l = layer(&c, Default::default());
    let (tm, mkpm) = (c.get("in.tgt_mask"), c.get("in.memory_key_padding_mask"));
    let o = TransformerDecoderOptions {
        tgt_mask: Some(MhaMask::Additive(&tm)),
        memory_key_padding_mask: Some(MhaMask::Bool(&mkpm)),
        ..Default::default()
    };
    check_case(&c, &mut l, |l, t, m| l.forward_with(t, m, &o));
    // The causal hint with its mask gives the same.
    let causal = TransformerDecoderOptions {
        tgt_is_causal: true,
        ..o
    };
    let y = no_grad(|| l.forward_with(&c.get("in.tgt"), &c.get("in.memory"), &causal)).unwrap();
    close(&y, &c.get("out_eval"), "dec_a eval, causal hint");
}

/// Pre-norm gelu, batch-first: bool target padding and memory masks.
#[test]
fn pre_norm_gelu_batch_first_layer_matches_pytorch() {
    let c = case("dec_b");
    let cfg = TransformerDecoderLayerConfig {
        activation: TransformerActivation::Gelu,
        batch_first: true,
        norm_first: true,
        ..Default::default()
    };
    let mut l = layer(&c, cfg);
    let (tkpm, mm) = (c.get("in.tgt_key_padding_mask"), c.get("in.memory_mask"));
    let o = TransformerDecoderOptions {
        tgt_key_padding_mask: Some(MhaMask::Bool(&tkpm)),
        memory_mask: Some(MhaMask::Bool(&mm)),
        ..Default::default()
    };
    check_case(&c, &mut l, |l, t, m| l.forward_with(t, m, &o));
}

/// Two post-norm layers (set apart after the copy) and a final norm, batch-first, causal.
#[test]
fn decoder_stack_with_final_norm_matches_pytorch() {
    let c = case("dec_c");
    let cfg = TransformerDecoderLayerConfig {
        dim_feedforward: 16,
        dropout: 0.0,
        batch_first: true,
        ..Default::default()
    };
    let l = TransformerDecoderLayer::new(common::device(), 8, 2, cfg).unwrap();
    let norm = nn::LayerNorm::new(common::device(), &[8]).unwrap();
    let mut dec = TransformerDecoder::new(&l, 2, Some(norm)).unwrap();
    dec.load_state_dict(&c.state_dict(), true).unwrap();
    let causal = nn::generate_square_subsequent_mask(common::device(), 5).unwrap();
    assert_eq!(
        causal.to_vec::<f32>().unwrap(),
        c.get("in.tgt_mask").to_vec::<f32>().unwrap()
    );
    let o = TransformerDecoderOptions {
        tgt_mask: Some(MhaMask::Additive(&causal)),
        ..Default::default()
    };
    check_case(&c, &mut dec, |d, t, m| d.forward_with(t, m, &o));
}

/// PyTorch's names and order, independent copies, train / eval, and errors naming the layer.
#[test]
fn names_copies_modes_and_errors() {
    let dev = common::device();
    let cfg = TransformerDecoderLayerConfig {
        dim_feedforward: 16,
        ..Default::default()
    };
    let mut l = TransformerDecoderLayer::new(dev, 8, 2, cfg).unwrap();
    let names: Vec<String> = l.state_dict().into_iter().map(|(n, _)| n).collect();
    let want = [
        "self_attn.in_proj_weight",
        "self_attn.in_proj_bias",
        "self_attn.out_proj.weight",
        "self_attn.out_proj.bias",
        "multihead_attn.in_proj_weight",
        "multihead_attn.in_proj_bias",
        "multihead_attn.out_proj.weight",
        "multihead_attn.out_proj.bias",
        "linear1.weight",
        "linear1.bias",
        "linear2.weight",
        "linear2.bias",
        "norm1.weight",
        "norm1.bias",
        "norm2.weight",
        "norm2.bias",
        "norm3.weight",
        "norm3.bias",
    ];
    assert_eq!(names, want);
    let mut dec = TransformerDecoder::new(&l, 3, None).unwrap();
    assert_eq!(dec.named_parameters().len(), 3 * want.len());
    // Copies, not shared tensors: a write into one layer leaves the others and the original.
    let w0 = dec.layers[0].linear1.weight.clone();
    no_grad(|| w0.copy_from(&Tensor::zeros(dev, w0.shape(), DType::F32)?)).unwrap();
    let other = dec.layers[1].linear1.weight.to_vec::<f32>().unwrap();
    assert!(other.iter().any(|&v| v != 0.0));
    assert_eq!(other, l.linear1.weight.to_vec::<f32>().unwrap());
    dec.eval();
    assert!(dec
        .layers
        .iter()
        .all(|l| !l.training && !l.self_attn.training));
    dec.train();
    assert!(dec
        .layers
        .iter()
        .all(|l| l.training && l.multihead_attn.training));
    // Shapes that do not fit name the layer and its child.
    let tgt = Tensor::zeros(dev, &[5, 2, 8], DType::F32).unwrap();
    let memory = Tensor::zeros(dev, &[7, 2, 6], DType::F32).unwrap();
    let e = dec
        .forward_with(&tgt, &memory, &Default::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("layers.0") && e.contains("multihead_attn"),
        "{e}"
    );
    // A causal hint without its mask makes the causal mask (MhaOptions::is_causal's
    // extension; PyTorch refuses it).
    let hint = TransformerDecoderOptions {
        tgt_is_causal: true,
        ..Default::default()
    };
    let causal = nn::generate_square_subsequent_mask(dev, 5).unwrap();
    let masked = TransformerDecoderOptions {
        tgt_mask: Some(MhaMask::Additive(&causal)),
        ..Default::default()
    };
    let tgt = wgtensor::ops::randn(dev, &[5, 2, 8], DType::F32).unwrap();
    let memory = wgtensor::ops::randn(dev, &[7, 2, 8], DType::F32).unwrap();
    l.eval(); // no dropout
    let a = l.forward_with(&tgt, &memory, &hint).unwrap();
    close(
        &a,
        &l.forward_with(&tgt, &memory, &masked).unwrap(),
        "causal hint",
    );
    // The square subsequent mask: -inf above the diagonal.
    let m = nn::generate_square_subsequent_mask(dev, 3).unwrap();
    let inf = f32::NEG_INFINITY;
    assert_eq!(
        m.to_vec::<f32>().unwrap(),
        vec![0.0, inf, inf, 0.0, 0.0, inf, 0.0, 0.0, 0.0]
    );
}

/// A decoder of no layers is refused, as PyTorch's forward reads its first layer.
#[test]
fn a_decoder_needs_a_layer() {
    let dev = common::device();
    let l = TransformerDecoderLayer::new(dev, 8, 2, Default::default()).unwrap();
    let dec = TransformerDecoder::new(&l, 0, None).unwrap();
    let x = Tensor::zeros(dev, &[5, 2, 8], DType::F32).unwrap();
    let e = dec
        .forward_with(&x, &x, &Default::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("index 0 is out of range"), "{e}");
}
