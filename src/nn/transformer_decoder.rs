//! `nn.TransformerDecoderLayer` and `nn.TransformerDecoder`: PyTorch's child names
//! (`self_attn`, `multihead_attn`, `linear1`, `dropout`, `linear2`, `norm1`..`norm3`,
//! `dropout1`..`dropout3`; `layers.{i}`, `norm`), defaults and both normalization placements.
//! Each attention is [`MultiheadAttention::forward_attn`], so it takes PyTorch's paths (its
//! own fast path in eval without gradients included). Their forward needs the memory: it is
//! `forward_with`, and they are not [`Forward`](super::Forward) layers.

use super::attention::MultiheadAttention;
use super::attention_masks::{MhaMask, MhaOptions};
use super::layers::{Dropout, Linear};
use super::norm::LayerNorm;
use super::transformer::{
    copies, feed_forward, DeepCopy, TransformerActivation, TransformerEncoderLayerConfig,
};
use super::{Forward, Module};
use crate::{Device, Error, Result, Tensor};

/// Options of [`TransformerDecoderLayer`]: PyTorch's decoder layer takes the encoder layer's
/// (`dim_feedforward`, `dropout`, `activation`, `layer_norm_eps`, `batch_first`, `norm_first`,
/// `bias`) with the same defaults.
pub type TransformerDecoderLayerConfig = TransformerEncoderLayerConfig;

/// The masks and causal hints of a decoder's forward (PyTorch's `tgt_mask`, `memory_mask`,
/// `tgt_key_padding_mask`, `memory_key_padding_mask`, `tgt_is_causal`, `memory_is_causal`),
/// read as [`MultiheadAttention::forward_attn`] reads its masks (bool nonzero = masked out).
/// A causal hint tells the attention that its mask is the causal one; as in
/// [`MhaOptions::is_causal`], the mask may be left out (the causal mask is then made), where
/// PyTorch refuses a hint without its mask.
#[derive(Debug, Clone, Copy, Default)]
pub struct TransformerDecoderOptions<'a> {
    /// The self-attention's mask, `[T, T]` or `[N * nhead, T, T]`.
    pub tgt_mask: Option<MhaMask<'a>>,
    /// The cross-attention's mask, `[T, S]` or `[N * nhead, T, S]`.
    pub memory_mask: Option<MhaMask<'a>>,
    /// Padded target positions, `[N, T]`.
    pub tgt_key_padding_mask: Option<MhaMask<'a>>,
    /// Padded memory positions, `[N, S]`.
    pub memory_key_padding_mask: Option<MhaMask<'a>>,
    /// `tgt_mask` is the causal mask.
    pub tgt_is_causal: bool,
    /// `memory_mask` is the causal mask.
    pub memory_is_causal: bool,
}

/// An attention block's key padding mask, attention mask and causal hint.
type BlockMasks<'a> = (Option<MhaMask<'a>>, Option<MhaMask<'a>>, bool);

/// A transformer decoder layer (PyTorch's `nn.TransformerDecoderLayer`): self-attention over
/// the target, attention from the target to the encoder's output (`memory`) and a feed-forward
/// block `linear2(dropout(act(linear1(x))))`, each with a residual connection and a layer norm,
/// before (`norm_first`) or after the residual sum. Children and `state_dict()` names are
/// PyTorch's (`self_attn.in_proj_weight`, `multihead_attn.out_proj.bias`, `norm3.weight`, ...).
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{self, MhaMask, Module};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let cfg = nn::TransformerDecoderLayerConfig {
///     dim_feedforward: 32,
///     batch_first: true,
///     ..Default::default()
/// };
/// let mut layer = nn::TransformerDecoderLayer::new(&dev, 16, 4, cfg)?;
/// layer.eval();
/// let tgt = Tensor::zeros(&dev, &[2, 5, 16], DType::F32)?; // [N, T, E]
/// let memory = Tensor::zeros(&dev, &[2, 7, 16], DType::F32)?; // [N, S, E]
/// let causal = nn::generate_square_subsequent_mask(&dev, 5)?;
/// let opts = nn::TransformerDecoderOptions {
///     tgt_mask: Some(MhaMask::Additive(&causal)),
///     tgt_is_causal: true,
///     ..Default::default()
/// };
/// assert_eq!(layer.forward_with(&tgt, &memory, &opts)?.shape(), &[2, 5, 16]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Module)]
#[module(crate = "crate")]
pub struct TransformerDecoderLayer {
    /// The target's self-attention.
    pub self_attn: MultiheadAttention,
    /// The attention from the target to the memory.
    pub multihead_attn: MultiheadAttention,
    /// `d_model -> dim_feedforward`.
    pub linear1: Linear,
    /// Dropout after the activation.
    pub dropout: Dropout,
    /// `dim_feedforward -> d_model`.
    pub linear2: Linear,
    /// The norm of the self-attention block.
    pub norm1: LayerNorm,
    /// The norm of the cross-attention block.
    pub norm2: LayerNorm,
    /// The norm of the feed-forward block.
    pub norm3: LayerNorm,
    /// Dropout on the self-attention block's output.
    pub dropout1: Dropout,
    /// Dropout on the cross-attention block's output.
    pub dropout2: Dropout,
    /// Dropout on the feed-forward block's output.
    pub dropout3: Dropout,
    /// The feed-forward activation.
    #[module(skip)]
    pub activation: TransformerActivation,
    /// Pre-norm.
    #[module(skip)]
    pub norm_first: bool,
    /// The layer's own training flag (PyTorch's `layer.training`).
    #[module(training)]
    pub training: bool,
}

impl TransformerDecoderLayer {
    /// A layer of width `d_model` with `nhead` heads, PyTorch's initialization.
    pub fn new(
        dev: &Device,
        d_model: usize,
        nhead: usize,
        c: TransformerDecoderLayerConfig,
    ) -> Result<TransformerDecoderLayer> {
        let op = "TransformerDecoderLayer";
        let (mha, norm) = c.sublayers();
        // PyTorch's order: both attentions (their checks), then the linear layers and the
        // Dropout modules, whose range check lets NaN through.
        let self_attn = MultiheadAttention::new(dev, d_model, nhead, mha)?;
        let multihead_attn = MultiheadAttention::new(dev, d_model, nhead, mha)?;
        if !c.dropout.is_nan() {
            crate::ops::random::check_dropout_p(op, c.dropout)?;
        }
        Ok(TransformerDecoderLayer {
            self_attn,
            multihead_attn,
            linear1: Linear::new(dev, d_model, c.dim_feedforward, c.bias)?,
            dropout: Dropout::new(c.dropout),
            linear2: Linear::new(dev, c.dim_feedforward, d_model, c.bias)?,
            norm1: LayerNorm::with_config(dev, &[d_model], norm)?,
            norm2: LayerNorm::with_config(dev, &[d_model], norm)?,
            norm3: LayerNorm::with_config(dev, &[d_model], norm)?,
            dropout1: Dropout::new(c.dropout),
            dropout2: Dropout::new(c.dropout),
            dropout3: Dropout::new(c.dropout),
            activation: c.activation,
            norm_first: c.norm_first,
            training: true,
        })
    }

    /// PyTorch's `forward(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
    /// memory_key_padding_mask, tgt_is_causal, memory_is_causal)`: `tgt` `[T, N, E]`, `memory`
    /// `[S, N, E]` (`[N, T, E]` and `[N, S, E]` with `batch_first`, or unbatched `[T, E]` and
    /// `[S, E]`); the result has `tgt`'s shape.
    pub fn forward_with(
        &self,
        tgt: &Tensor,
        memory: &Tensor,
        o: &TransformerDecoderOptions,
    ) -> Result<Tensor> {
        // A child's error names it (`multihead_attn (MultiheadAttention): ...`).
        let at = |name: &'static str, layer: &'static str| move |e: Error| e.in_layer(name, layer);
        // An attention block: the attention of `x` over `kv` with these masks (its error naming
        // the child), then the block's dropout.
        let block = |a: &MultiheadAttention,
                     name: &'static str,
                     x: &Tensor,
                     kv: &Tensor,
                     (key_padding_mask, attn_mask, is_causal): BlockMasks,
                     drop: &Dropout|
         -> Result<Tensor> {
            let opts = MhaOptions {
                key_padding_mask,
                attn_mask,
                need_weights: false,
                average_attn_weights: true,
                is_causal,
            };
            let y = a
                .forward_attn(x, kv, kv, &opts)
                .map_err(at(name, "MultiheadAttention"))?
                .0;
            drop.forward(&y)
        };
        let tgt_masks = (o.tgt_key_padding_mask, o.tgt_mask, o.tgt_is_causal);
        let memory_masks = (o.memory_key_padding_mask, o.memory_mask, o.memory_is_causal);
        let sa = |x: &Tensor| {
            let a = &self.self_attn;
            block(a, "self_attn", x, x, tgt_masks, &self.dropout1)
        };
        let mha = |x: &Tensor| {
            let a = &self.multihead_attn;
            block(a, "multihead_attn", x, memory, memory_masks, &self.dropout2)
        };
        let ff = |x: &Tensor| {
            let (l1, l2) = (&self.linear1, &self.linear2);
            let ends = [&self.dropout, &self.dropout3];
            feed_forward(x, l1, self.activation, l2, ends, false)
        };
        let norm = |n: &LayerNorm, name: &'static str, x: &Tensor| {
            n.forward(x).map_err(at(name, "LayerNorm"))
        };
        if self.norm_first {
            let x = tgt.add(&sa(&norm(&self.norm1, "norm1", tgt)?)?)?;
            let x = x.add(&mha(&norm(&self.norm2, "norm2", &x)?)?)?;
            x.add(&ff(&norm(&self.norm3, "norm3", &x)?)?)
        } else {
            let x = norm(&self.norm1, "norm1", &tgt.add(&sa(tgt)?)?)?;
            let x = norm(&self.norm2, "norm2", &x.add(&mha(&x)?)?)?;
            norm(&self.norm3, "norm3", &x.add(&ff(&x)?)?)
        }
    }
}

/// A stack of decoder layers with an optional final norm (PyTorch's `nn.TransformerDecoder`):
/// `state_dict()` names `layers.{i}.*` and `norm.*`.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{self, Module};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let cfg = nn::TransformerDecoderLayerConfig { dim_feedforward: 32, ..Default::default() };
/// let layer = nn::TransformerDecoderLayer::new(&dev, 16, 4, cfg)?;
/// let dec = nn::TransformerDecoder::new(&layer, 2, Some(nn::LayerNorm::new(&dev, &[16])?))?;
/// assert!(dec.state_dict().iter().any(|(n, _)| n == "layers.1.norm3.bias"));
/// let tgt = Tensor::zeros(&dev, &[5, 2, 16], DType::F32)?; // [T, N, E]
/// let memory = Tensor::zeros(&dev, &[7, 2, 16], DType::F32)?; // [S, N, E]
/// let y = dec.forward_with(&tgt, &memory, &Default::default())?;
/// assert_eq!(y.shape(), &[5, 2, 16]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Module)]
#[module(crate = "crate")]
pub struct TransformerDecoder {
    /// The layers, run in order.
    pub layers: Vec<TransformerDecoderLayer>,
    /// The final norm, if any.
    pub norm: Option<LayerNorm>,
}

impl TransformerDecoder {
    /// `num_layers` independent copies of `decoder_layer` (its parameters copied, not shared,
    /// as PyTorch's deep copies) and an optional final norm. Errors: [`Error::Size`] for more
    /// than 65536 layers.
    pub fn new(
        decoder_layer: &TransformerDecoderLayer,
        num_layers: usize,
        norm: Option<LayerNorm>,
    ) -> Result<TransformerDecoder> {
        let layers = copies("TransformerDecoder", decoder_layer, num_layers, deep_copy)?;
        Ok(TransformerDecoder { layers, norm })
    }

    /// PyTorch's `forward(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
    /// memory_key_padding_mask, tgt_is_causal, memory_is_causal)`: each layer's
    /// [`forward_with`](TransformerDecoderLayer::forward_with), then the norm. A decoder of no
    /// layers is refused, as PyTorch's forward (it reads `self.layers[0]` first).
    pub fn forward_with(
        &self,
        tgt: &Tensor,
        memory: &Tensor,
        o: &TransformerDecoderOptions,
    ) -> Result<Tensor> {
        if self.layers.is_empty() {
            return Err(Error::arg(
                "TransformerDecoder",
                "index 0 is out of range (a decoder needs at least one layer)",
            ));
        }
        let mut x = tgt.clone();
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer
                .forward_with(&x, memory, o)
                .map_err(|e| e.in_layer(&format!("layers.{i}"), "TransformerDecoderLayer"))?;
        }
        match &self.norm {
            Some(n) => n.forward(&x).map_err(|e| e.in_layer("norm", "LayerNorm")),
            None => Ok(x),
        }
    }
}

/// A copy of `layer` whose parameters are new tensors holding the same values.
fn deep_copy(layer: &TransformerDecoderLayer) -> Result<TransformerDecoderLayer> {
    let mut c = layer.clone();
    let mut copy = DeepCopy::default();
    copy.attention(&mut c.self_attn)?;
    copy.attention(&mut c.multihead_attn)?;
    copy.linear(&mut c.linear1)?;
    copy.linear(&mut c.linear2)?;
    for n in [&mut c.norm1, &mut c.norm2, &mut c.norm3] {
        copy.norm(n)?;
    }
    Ok(c)
}

/// PyTorch's `nn.Transformer.generate_square_subsequent_mask(sz)`: an `[sz, sz]` f32 additive
/// mask, `-inf` above the diagonal and 0 on and below it (a position attends to itself and
/// the ones before it).
pub fn generate_square_subsequent_mask(dev: &Device, sz: usize) -> Result<Tensor> {
    let ones = Tensor::ones(dev, &[sz, sz], crate::DType::F32)?;
    let zero = Tensor::zeros(dev, &[], crate::DType::F32)?;
    let ninf = Tensor::full(dev, &[], f64::NEG_INFINITY, crate::DType::F32)?;
    ones.triu(1)?.where_cond(&ninf, &zero)
}
