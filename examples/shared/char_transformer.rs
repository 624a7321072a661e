//! The decoder-only character transformer shared by `examples/char_transformer.rs` and the
//! demo page (`web/train_transformer.rs`), both of which include this file with `#[path]`:
//! the corpus (the text `char_lstm` trains on), the model, the learning-rate schedule and the
//! AdamW setup. Not an example itself (cargo only discovers `examples/*.rs` and
//! `examples/*/main.rs`).

use std::f64::consts::PI;

use wgtensor::nn::{self, Forward, Module};
use wgtensor::optim::{Adam, AdamOptions, ParamGroup};
use wgtensor::{Device, Result, Tensor};

/// The training text: the repository's README, architecture notes and a few sources, embedded
/// at build time (the same as `examples/char_lstm.rs`).
pub const TEXT: &[&str] = &[
    include_str!("../../README.md"),
    include_str!("../../docs/ARCHITECTURE.md"),
    include_str!("../../src/tensor.rs"),
    include_str!("../../src/layout.rs"),
    include_str!("../../src/ops/gemm/mod.rs"),
];

/// The text as character ids.
pub struct Corpus {
    /// The distinct characters, sorted; an id indexes this.
    pub vocab: Vec<char>,
    /// The text, one id per character.
    pub ids: Vec<usize>,
    /// The unigram entropy in nats/char: what a model that ignores context achieves at best.
    pub unigram: f64,
}

impl Corpus {
    /// [`TEXT`] as ids.
    pub fn new() -> Corpus {
        let text: String = TEXT.concat();
        let mut vocab: Vec<char> = text.chars().collect();
        vocab.sort_unstable();
        vocab.dedup();
        let ids: Vec<usize> = text
            .chars()
            .map(|c| vocab.binary_search(&c).unwrap_or(0))
            .collect();
        let mut counts = vec![0usize; vocab.len()];
        for &i in &ids {
            counts[i] += 1;
        }
        let total = ids.len() as f64;
        let unigram = counts
            .iter()
            .filter(|&&c| c > 0)
            .map(|&c| -(c as f64 / total) * (c as f64 / total).ln())
            .sum();
        Corpus {
            vocab,
            ids,
            unigram,
        }
    }

    /// `[B, seq]` input ids and `[B * seq]` next-character ids of the windows starting at
    /// `starts` (each `start + seq < ids.len()`).
    pub fn window(&self, dev: &Device, seq: usize, starts: &[usize]) -> Result<(Tensor, Tensor)> {
        let b = starts.len();
        let mut x = Vec::with_capacity(seq * b);
        let mut y = Vec::with_capacity(seq * b);
        for &s in starts {
            x.extend(self.ids[s..s + seq].iter().map(|&c| c as i32));
            y.extend(self.ids[s + 1..s + seq + 1].iter().map(|&c| c as i32));
        }
        Ok((
            Tensor::from_slice(dev, &x, &[b, seq])?,
            Tensor::from_slice(dev, &y, &[seq * b])?,
        ))
    }
}

/// The model's sizes.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Context length: the most characters a position sees (itself included).
    pub seq: usize,
    /// Width of the residual stream.
    pub d_model: usize,
    /// Attention heads per layer.
    pub heads: usize,
    /// Transformer layers.
    pub layers: usize,
    /// Hidden width of the feed-forward blocks.
    pub ff: usize,
}

/// A decoder-only transformer over characters, with PyTorch attribute names (`tok.weight`,
/// `pos.weight`, `layers.0.self_attn.in_proj_weight`, ..., `norm.weight`, `head.bias`):
/// token plus learned positional embeddings, pre-norm GELU [`nn::TransformerEncoderLayer`]s
/// run causally (a position attends to itself and the ones before it), a final layer norm and
/// a linear head to the vocabulary.
#[derive(Module)]
pub struct CharTransformer {
    /// Token embedding `[V, E]`.
    pub tok: nn::Embedding,
    /// Learned positional embedding `[seq, E]`.
    pub pos: nn::Embedding,
    /// The layers, each independently initialized.
    pub layers: Vec<nn::TransformerEncoderLayer>,
    /// The final norm.
    pub norm: nn::LayerNorm,
    /// `E -> V` logits.
    pub head: nn::Linear,
}

impl CharTransformer {
    /// A model of `c`'s sizes over `vocab` characters (no dropout: the runs are short).
    pub fn new(dev: &Device, vocab: usize, c: &Config) -> Result<CharTransformer> {
        let cfg = nn::TransformerEncoderLayerConfig {
            dim_feedforward: c.ff,
            dropout: 0.0,
            activation: nn::TransformerActivation::Gelu,
            batch_first: true,
            norm_first: true,
            ..Default::default()
        };
        Ok(CharTransformer {
            tok: nn::Embedding::new(dev, vocab, c.d_model, None)?,
            pos: nn::Embedding::new(dev, c.seq, c.d_model, None)?,
            layers: (0..c.layers)
                .map(|_| nn::TransformerEncoderLayer::new(dev, c.d_model, c.heads, cfg))
                .collect::<Result<_>>()?,
            norm: nn::LayerNorm::new(dev, &[c.d_model])?,
            head: nn::Linear::new(dev, c.d_model, vocab, true)?,
        })
    }

    /// The logits `[B, T, V]` of the next character after each prefix of the ids `[B, T]`
    /// (`T` at most the context length).
    pub fn logits(&self, ids: &Tensor) -> Result<Tensor> {
        let t = ids.shape()[1];
        let mut x = self
            .tok
            .forward(ids)?
            .add(&self.pos.weight.narrow(0, 0, t)?)?;
        for layer in &self.layers {
            x = layer.forward_with(&x, None, None, true)?;
        }
        self.head.forward(&self.norm.forward(&x)?)
    }

    /// AdamW at `lr` with decoupled weight decay `weight_decay` on the weight matrices of the
    /// linear layers and the attention, and none on the embeddings, biases and norms (the
    /// usual split for transformers): two parameter groups, in that order.
    pub fn adamw(&self, lr: f64, weight_decay: f64) -> Result<Adam> {
        let (decay, rest): (Vec<_>, Vec<_>) = self
            .named_parameters()
            .into_iter()
            .partition(|(n, t)| t.rank() == 2 && !n.starts_with("tok.") && !n.starts_with("pos."));
        let mut opt = Adam::adamw(
            decay,
            AdamOptions {
                lr,
                weight_decay,
                ..AdamOptions::adamw()
            },
        )?;
        opt.add_param_group(ParamGroup::new(rest).weight_decay(0.0))?;
        Ok(opt)
    }
}

/// The learning rate of step `step` (from 0) of `total`: a linear warm-up over `warmup` steps
/// to `peak`, then a half cosine down to `min` at `total`.
pub fn lr_at(step: usize, total: usize, warmup: usize, peak: f64, min: f64) -> f64 {
    if step < warmup {
        return peak * (step + 1) as f64 / warmup as f64;
    }
    let p = (step - warmup) as f64 / (total - warmup).max(1) as f64;
    min + 0.5 * (peak - min) * (1.0 + (PI * p.min(1.0)).cos())
}

/// The index drawn from the probabilities `p` by `u` in `[0, 1)` (inverse CDF; the last index
/// when rounding leaves `u` above the total).
pub fn draw(p: &[f32], u: f32) -> usize {
    let mut acc = 0.0;
    p.iter()
        .position(|&pi| {
            acc += pi;
            acc > u
        })
        .unwrap_or(p.len() - 1)
}
