//! `nn.TransformerEncoderLayer` and `nn.TransformerEncoder`: PyTorch's child names
//! (`self_attn`, `linear1`, `dropout`, `linear2`, `norm1`, `norm2`, `dropout1`, `dropout2`;
//! `layers.{i}`, `norm`), defaults and both normalization placements, over
//! [`MultiheadAttention`]'s fused path.

use super::attention::{same_view, MultiheadAttention, MultiheadAttentionConfig};
use super::attention_masks::{check_mask_dtypes, mask_tensor, MhaMask, MhaOptions};
use super::layers::{Dropout, Linear};
use super::norm::{LayerNorm, LayerNormConfig};
use super::{Forward, Module, MAX_LAYERS};
use crate::{Device, Error, Result, Tensor};

/// The feed-forward activation of a [`TransformerEncoderLayer`] (PyTorch's `activation="relu"`
/// or `"gelu"`, the exact erf form).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TransformerActivation {
    /// `max(x, 0)`, PyTorch's default.
    #[default]
    Relu,
    /// The exact GELU.
    Gelu,
}

/// Options of [`TransformerEncoderLayer`] beyond `d_model` and `nhead`, with PyTorch's
/// defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TransformerEncoderLayerConfig {
    /// Hidden size of the feed-forward block (2048).
    pub dim_feedforward: usize,
    /// Dropout probability in the attention and after each block, training only (0.1).
    pub dropout: f64,
    /// The feed-forward activation (relu).
    pub activation: TransformerActivation,
    /// The layer norms' epsilon (1e-5).
    pub layer_norm_eps: f64,
    /// `[N, L, E]` inputs and outputs instead of `[L, N, E]` (false).
    pub batch_first: bool,
    /// Pre-norm (`x + block(norm(x))`) instead of post-norm (`norm(x + block(x))`) (false).
    pub norm_first: bool,
    /// Biases in the linear layers and the layer norms (true).
    pub bias: bool,
}

impl TransformerEncoderLayerConfig {
    /// The attentions' and the norms' options these give (the encoder and decoder layers').
    pub(super) fn sublayers(&self) -> (MultiheadAttentionConfig, LayerNormConfig) {
        let mha = MultiheadAttentionConfig {
            dropout: self.dropout,
            bias: self.bias,
            batch_first: self.batch_first,
            kdim: None,
            vdim: None,
        };
        let norm = LayerNormConfig {
            eps: self.layer_norm_eps,
            elementwise_affine: true,
            bias: self.bias,
        };
        (mha, norm)
    }
}

impl Default for TransformerEncoderLayerConfig {
    fn default() -> Self {
        TransformerEncoderLayerConfig {
            dim_feedforward: 2048,
            dropout: 0.1,
            activation: TransformerActivation::Relu,
            layer_norm_eps: 1e-5,
            batch_first: false,
            norm_first: false,
            bias: true,
        }
    }
}

/// A transformer encoder layer (PyTorch's `nn.TransformerEncoderLayer`): self-attention and a
/// feed-forward block `linear2(dropout(act(linear1(x))))`, each with a residual connection and
/// a layer norm, before (`norm_first`) or after the residual sum. Children and `state_dict()`
/// names are PyTorch's (`self_attn.in_proj_weight`, `linear1.weight`, `norm1.bias`, ...).
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{self, Forward, Module};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let cfg = nn::TransformerEncoderLayerConfig {
///     dim_feedforward: 32,
///     batch_first: true,
///     norm_first: true,
///     activation: nn::TransformerActivation::Gelu,
///     ..Default::default()
/// };
/// let mut layer = nn::TransformerEncoderLayer::new(&dev, 16, 4, cfg)?;
/// layer.eval();
/// let x = Tensor::zeros(&dev, &[2, 7, 16], DType::F32)?; // [N, L, E]
/// let y = layer.forward_with(&x, None, None, true)?; // causal
/// assert_eq!(y.shape(), &[2, 7, 16]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Module)]
#[module(crate = "crate")]
pub struct TransformerEncoderLayer {
    /// The self-attention.
    pub self_attn: MultiheadAttention,
    /// `d_model -> dim_feedforward`.
    pub linear1: Linear,
    /// Dropout after the activation.
    pub dropout: Dropout,
    /// `dim_feedforward -> d_model`.
    pub linear2: Linear,
    /// The norm of the attention block.
    pub norm1: LayerNorm,
    /// The norm of the feed-forward block.
    pub norm2: LayerNorm,
    /// Dropout on the attention block's output.
    pub dropout1: Dropout,
    /// Dropout on the feed-forward block's output.
    pub dropout2: Dropout,
    /// The feed-forward activation.
    #[module(skip)]
    pub activation: TransformerActivation,
    /// Pre-norm.
    #[module(skip)]
    pub norm_first: bool,
    /// The layer's own training flag (PyTorch's `layer.training`, set by `train()` / `eval()`
    /// with its children's): its fast path asks for eval of the layer, whatever its attention's
    /// flag says.
    #[module(training)]
    pub training: bool,
}

impl TransformerEncoderLayer {
    /// A layer of width `d_model` with `nhead` heads, PyTorch's initialization.
    pub fn new(
        dev: &Device,
        d_model: usize,
        nhead: usize,
        c: TransformerEncoderLayerConfig,
    ) -> Result<TransformerEncoderLayer> {
        let op = "TransformerEncoderLayer";
        let (mha, norm) = c.sublayers();
        // PyTorch builds self_attn first (its embed_dim check), then linear1 and its Dropout
        // modules, whose range check lets NaN through.
        let self_attn = MultiheadAttention::new(dev, d_model, nhead, mha)?;
        if !c.dropout.is_nan() {
            crate::ops::random::check_dropout_p(op, c.dropout)?;
        }
        Ok(TransformerEncoderLayer {
            self_attn,
            linear1: Linear::new(dev, d_model, c.dim_feedforward, c.bias)?,
            dropout: Dropout::new(c.dropout),
            linear2: Linear::new(dev, c.dim_feedforward, d_model, c.bias)?,
            norm1: LayerNorm::with_config(dev, &[d_model], norm)?,
            norm2: LayerNorm::with_config(dev, &[d_model], norm)?,
            dropout1: Dropout::new(c.dropout),
            dropout2: Dropout::new(c.dropout),
            activation: c.activation,
            norm_first: c.norm_first,
            training: true,
        })
    }

    /// PyTorch's `forward(src, src_mask, src_key_padding_mask, is_causal)`: `src` `[L, N, E]`
    /// (`[N, L, E]` with `batch_first`, or `[L, E]`), masks as
    /// [`MultiheadAttention::forward_attn`] reads them (bool nonzero = masked out; `src_mask`
    /// `[L, L]` or `[N * nhead, L, L]`, `src_key_padding_mask` `[N, L]`); `is_causal` with no
    /// `src_mask` makes the causal mask.
    ///
    /// In eval without gradients, for batch-first 3-D input and an even head count, PyTorch
    /// takes its fused fast path, whose attention reads every mask as bool (a nonzero additive
    /// entry, a `-1e9` padding bias too, masks its key out) and gives NaN for a query whose
    /// mask excludes every key (the slow path gives 0): so does this layer. Off that path its
    /// attention is the general one (PyTorch hands it float masks, which keep
    /// `MultiheadAttention` off its own fast path).
    pub fn forward_with(
        &self,
        src: &Tensor,
        src_mask: Option<MhaMask>,
        src_key_padding_mask: Option<MhaMask>,
        is_causal: bool,
    ) -> Result<Tensor> {
        check_mask_dtypes(
            "TransformerEncoderLayer",
            [
                ("src_key_padding_mask", src_key_padding_mask),
                ("src_mask", src_mask),
            ],
        )?;
        let fast = self.takes_fast_path(src);
        self.forward_layer(src, src_mask, src_key_padding_mask, is_causal, fast, fast)
    }

    /// Whether PyTorch's `TransformerEncoderLayer.forward` takes its fast path
    /// (`why_not_sparsity_fast_path` empty: eval, batch-first 3-D input, a packed in-projection
    /// with bias, an even head count, the norms' eps equal, no gradient recorded; the
    /// activation always qualifies here).
    fn takes_fast_path(&self, src: &Tensor) -> bool {
        !self.training
            && self.self_attn.fast_path_shape()
            && self.norm1.eps == self.norm2.eps
            && src.rank() == 3
            && !(crate::autograd::is_grad_enabled()
                && (src.is_tracked() || self.parameters().iter().any(Tensor::is_tracked)))
    }

    /// The layer's formula, its attention as PyTorch's fast path computes it when `fast` (see
    /// [`forward_with`](Self::forward_with)), else the general path (also on the encoder's
    /// nested-tensor path, whose layers attend to each sequence's real tokens only). `quiet`:
    /// no dropout anywhere, the attention's included, whatever the children's flags say (the
    /// fused kernel of PyTorch's fast path, and its nested path's layers in eval, have none).
    fn forward_layer(
        &self,
        src: &Tensor,
        src_mask: Option<MhaMask>,
        src_key_padding_mask: Option<MhaMask>,
        is_causal: bool,
        fast: bool,
        quiet: bool,
    ) -> Result<Tensor> {
        // A child's error names it (`self_attn (MultiheadAttention): ...`).
        let at = |name: &'static str, layer: &'static str| move |e: Error| e.in_layer(name, layer);
        // Quiet, no Dropout module runs (_transformer_encoder_layer_fwd calls none), so a NaN
        // p is no error there either.
        let drop = |d: &Dropout, h: Tensor| if quiet { Ok(h) } else { d.forward(&h) };
        let eval_attn;
        let self_attn = if quiet && self.self_attn.training {
            eval_attn = MultiheadAttention {
                training: false,
                ..self.self_attn.clone()
            };
            &eval_attn
        } else {
            &self.self_attn
        };
        let sa = |x: &Tensor| -> Result<Tensor> {
            let opts = MhaOptions {
                key_padding_mask: src_key_padding_mask,
                attn_mask: src_mask,
                need_weights: false,
                average_attn_weights: true,
                is_causal,
            };
            let attn = match fast {
                true => self_attn.encoder_fast_path(x, &opts),
                false => self_attn.forward_general(x, x, x, &opts).map(|r| r.0),
            };
            drop(
                &self.dropout1,
                attn.map_err(at("self_attn", "MultiheadAttention"))?,
            )
        };
        let ff = |x: &Tensor| {
            let (l1, l2) = (&self.linear1, &self.linear2);
            let ends = [&self.dropout, &self.dropout2];
            feed_forward(x, l1, self.activation, l2, ends, quiet)
        };
        let norm1 = |x: &Tensor| self.norm1.forward(x).map_err(at("norm1", "LayerNorm"));
        let norm2 = |x: &Tensor| self.norm2.forward(x).map_err(at("norm2", "LayerNorm"));
        if self.norm_first {
            let x = src.add(&sa(&norm1(src)?)?)?;
            x.add(&ff(&norm2(&x)?)?)
        } else {
            let x = norm1(&src.add(&sa(src)?)?)?;
            norm2(&x.add(&ff(&x)?)?)
        }
    }
}

impl Forward for TransformerEncoderLayer {
    /// [`forward_with`](TransformerEncoderLayer::forward_with) without masks.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_with(x, None, None, false)
    }
}

/// A stack of encoder layers with an optional final norm (PyTorch's `nn.TransformerEncoder`):
/// `state_dict()` names `layers.{i}.*` and `norm.*`.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{self, Forward, Module};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let cfg = nn::TransformerEncoderLayerConfig { dim_feedforward: 32, ..Default::default() };
/// let layer = nn::TransformerEncoderLayer::new(&dev, 16, 4, cfg)?;
/// let enc = nn::TransformerEncoder::new(&layer, 2, Some(nn::LayerNorm::new(&dev, &[16])?))?;
/// assert!(enc.state_dict().iter().any(|(n, _)| n == "layers.1.linear2.bias"));
/// assert_eq!(enc.forward(&Tensor::zeros(&dev, &[7, 2, 16], DType::F32)?)?.shape(), &[7, 2, 16]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Module)]
#[module(crate = "crate")]
pub struct TransformerEncoder {
    /// The layers, run in order.
    pub layers: Vec<TransformerEncoderLayer>,
    /// The final norm, if any.
    pub norm: Option<LayerNorm>,
    /// PyTorch's `enable_nested_tensor` (default true): whether the forward may take the
    /// nested-tensor path (see [`forward_with`](Self::forward_with)); false keeps the padded
    /// positions' computed values.
    #[module(skip)]
    pub enable_nested_tensor: bool,
    /// PyTorch's `mask_check` (default true): the nested path needs a left-aligned padding
    /// mask. False takes it for any mask, as PyTorch's `_nested_tensor_from_mask(...,
    /// mask_check=False)`: each sequence's real tokens are its first `count` positions, where
    /// `count` is how many its mask keeps.
    #[module(skip)]
    pub mask_check: bool,
}

impl TransformerEncoder {
    /// `num_layers` independent copies of `encoder_layer` (its parameters copied, not shared,
    /// as PyTorch's deep copies) and an optional final norm. Errors: [`Error::Size`] for more
    /// than 65536 layers.
    pub fn new(
        encoder_layer: &TransformerEncoderLayer,
        num_layers: usize,
        norm: Option<LayerNorm>,
    ) -> Result<TransformerEncoder> {
        let layers = copies("TransformerEncoder", encoder_layer, num_layers, deep_copy)?;
        Ok(TransformerEncoder {
            layers,
            norm,
            enable_nested_tensor: true,
            mask_check: true,
        })
    }

    /// PyTorch's `forward(src, mask, src_key_padding_mask, is_causal)`: each layer's
    /// [`forward_with`](TransformerEncoderLayer::forward_with), then the norm.
    ///
    /// Padded positions come out as PyTorch's default (`enable_nested_tensor`) computes them:
    /// in evaluation without gradients, a batch-first post-norm encoder of an even head count
    /// given only a left-aligned key padding mask runs on the unpadded tokens and pads its
    /// output with zeros before the final norm, so padded positions are 0 (or the norm of 0),
    /// and NaN or inf at a padded position never reaches a real token. Every other position
    /// is the same either way (for a left-aligned mask). [`enable_nested_tensor`](Self::enable_nested_tensor) false keeps
    /// the computed values; [`mask_check`](Self::mask_check) false takes the path for a mask
    /// that is not left-aligned too. An encoder of no layers is refused, as PyTorch's forward.
    /// The left-alignment test reads the mask back, which the browser (wasm32) cannot do
    /// without blocking: there padded positions keep their computed values.
    pub fn forward_with(
        &self,
        src: &Tensor,
        mask: Option<MhaMask>,
        src_key_padding_mask: Option<MhaMask>,
        is_causal: bool,
    ) -> Result<Tensor> {
        check_mask_dtypes(
            "TransformerEncoder",
            [
                ("src_key_padding_mask", src_key_padding_mask),
                ("mask", mask),
            ],
        )?;
        if self.layers.is_empty() {
            // PyTorch's forward reads self.layers[0] first.
            return Err(Error::arg(
                "TransformerEncoder",
                "index 0 is out of range (an encoder needs at least one layer)",
            ));
        }
        let keep = match mask.is_none() && !is_causal && self.enable_nested_tensor {
            true => self.nested_keep(src, src_key_padding_mask)?,
            false => None,
        };
        // The nested tensor's real tokens, as a bool padding mask for the layers (masking
        // what the caller's masks, where it is left-aligned; PyTorch's layers see only the
        // real tokens).
        let nested_pad = keep
            .as_ref()
            .map(|k| k.reshape(&[k.shape()[0], k.shape()[1]])?.eq_scalar(0.0))
            .transpose()?;
        // The nested path drops padded tokens before the first layer and pads the output
        // with exact zeros: NaN or inf there never reaches a real token.
        let mut x = match &keep {
            Some(k) => k.where_cond(src, &src.zeros_like()?)?,
            None => src.clone(),
        };
        for (i, layer) in self.layers.iter().enumerate() {
            // On PyTorch's nested-tensor path the layers see only the real tokens (the padded
            // positions are zeroed after the last); otherwise each takes its own path (see
            // forward_with).
            let y = match &nested_pad {
                Some(p) => {
                    let pad = Some(MhaMask::Bool(p));
                    layer.forward_layer(&x, mask, pad, is_causal, false, !layer.training)
                }
                None => layer.forward_with(&x, mask, src_key_padding_mask, is_causal),
            };
            x = y.map_err(|e| e.in_layer(&format!("layers.{i}"), "TransformerEncoderLayer"))?;
        }
        if let Some(keep) = keep {
            x = keep.where_cond(&x, &x.zeros_like()?)?;
        }
        match &self.norm {
            Some(n) => n.forward(&x),
            None => Ok(x),
        }
    }

    /// `[N, S, 1]` ones at the tokens PyTorch's nested-tensor path keeps and zeros at the
    /// padded ones, when it takes that path (the conditions of its `why_not_sparsity_fast_path`
    /// that apply here); `None` otherwise.
    fn nested_keep(&self, src: &Tensor, pad: Option<MhaMask>) -> Result<Option<Tensor>> {
        let (Some(l0), Some(pad)) = (self.layers.first(), pad) else {
            return Ok(None);
        };
        // The first layer's fast-path conditions, and a post-norm layer.
        let eligible = l0.takes_fast_path(src) && !l0.norm_first;
        let m = mask_tensor(pad);
        if !eligible || m.shape() != [src.shape()[0], src.shape()[1]] {
            return Ok(None);
        }
        // PyTorch's left-alignment check reads the mask on the host too (a blocking read:
        // native only; on wasm32 the padded positions keep their computed values).
        let keep = m.eq_scalar(0.0)?;
        let s = src.shape()[1];
        let Some(rows) = host_values(&keep)? else {
            return Ok(None);
        };
        let left_aligned = rows
            .chunks(s.max(1))
            .all(|r| r.windows(2).all(|w| w[0] >= w[1]));
        let keep = match (left_aligned, self.mask_check) {
            (true, _) => keep,
            (false, true) => return Ok(None),
            // Without the check, each sequence keeps its first `count` positions.
            (false, false) => {
                let prefix: Vec<f32> = rows
                    .chunks(s.max(1))
                    .flat_map(|r| {
                        let count = r.iter().filter(|&&v| v != 0.0).count();
                        (0..r.len()).map(move |j| if j < count { 1.0 } else { 0.0 })
                    })
                    .collect();
                Tensor::from_slice(src.device(), &prefix, keep.shape())?
            }
        };
        Ok(Some(keep.to_dtype(src.dtype())?.reshape(&[
            src.shape()[0],
            s,
            1,
        ])?))
    }
}

/// `t`'s values on the host (a blocking read: `None` on wasm32, where the browser thread
/// cannot block).
#[cfg(not(target_arch = "wasm32"))]
fn host_values(t: &Tensor) -> Result<Option<Vec<f32>>> {
    t.to_vec::<f32>().map(Some)
}

#[cfg(target_arch = "wasm32")]
fn host_values(_t: &Tensor) -> Result<Option<Vec<f32>>> {
    Ok(None)
}

/// PyTorch's `copy.deepcopy` of a layer's tensors, one layer at a time: each tensor becomes a
/// new one holding the same values (a parameter stays a leaf, a frozen one frozen), and its
/// memo keeps a tensor tied in two places of the layer one tensor in the copy.
#[derive(Default)]
pub(super) struct DeepCopy {
    memo: Vec<(Tensor, Tensor)>,
}

impl DeepCopy {
    fn tensor(&mut self, t: &Tensor) -> Result<Tensor> {
        if let Some((_, copy)) = self.memo.iter().find(|(orig, _)| same_view(orig, t)) {
            return Ok(copy.clone());
        }
        let mut copy = t.detach().deep_clone()?;
        if t.has_grad_key() {
            // A frozen parameter stays a frozen leaf (an optimizer accepts it), as deepcopy
            // keeps a Parameter with requires_grad=False.
            copy = copy.requires_grad()?;
            copy.set_requires_grad(t.is_tracked())?;
        }
        self.memo.push((t.clone(), copy.clone()));
        Ok(copy)
    }

    fn opt(&mut self, t: &Option<Tensor>) -> Result<Option<Tensor>> {
        t.as_ref().map(|t| self.tensor(t)).transpose()
    }

    /// Copies the attention's projections in place.
    pub(super) fn attention(&mut self, a: &mut MultiheadAttention) -> Result<()> {
        a.in_proj_weight = self.opt(&a.in_proj_weight)?;
        a.q_proj_weight = self.opt(&a.q_proj_weight)?;
        a.k_proj_weight = self.opt(&a.k_proj_weight)?;
        a.v_proj_weight = self.opt(&a.v_proj_weight)?;
        a.in_proj_bias = self.opt(&a.in_proj_bias)?;
        self.linear(&mut a.out_proj)
    }

    /// Copies the layer's weight and bias in place.
    pub(super) fn linear(&mut self, lin: &mut Linear) -> Result<()> {
        lin.weight = self.tensor(&lin.weight)?;
        lin.bias = self.opt(&lin.bias)?;
        Ok(())
    }

    /// Copies the norm's affine parameters in place.
    pub(super) fn norm(&mut self, n: &mut LayerNorm) -> Result<()> {
        n.weight = self.opt(&n.weight)?;
        n.bias = self.opt(&n.bias)?;
        Ok(())
    }
}

/// The layers' feed-forward block, `dropouts[1](linear2(dropouts[0](act(linear1(x)))))`, a
/// child's error naming it; `quiet` runs no dropout (the encoder's fast and nested paths).
pub(super) fn feed_forward(
    x: &Tensor,
    linear1: &Linear,
    activation: TransformerActivation,
    linear2: &Linear,
    dropouts: [&Dropout; 2],
    quiet: bool,
) -> Result<Tensor> {
    let drop = |d: &Dropout, h: Tensor| if quiet { Ok(h) } else { d.forward(&h) };
    let h = linear1
        .forward(x)
        .map_err(|e| e.in_layer("linear1", "Linear"))?;
    let h = match activation {
        TransformerActivation::Relu => h.relu()?,
        TransformerActivation::Gelu => h.gelu()?,
    };
    let h = drop(dropouts[0], h)?;
    let h = linear2
        .forward(&h)
        .map_err(|e| e.in_layer("linear2", "Linear"))?;
    drop(dropouts[1], h)
}

/// `n` copies of `layer` by `copy` for a stack's constructor (`op`), at most 65536.
pub(super) fn copies<L>(
    op: &'static str,
    layer: &L,
    n: usize,
    copy: fn(&L) -> Result<L>,
) -> Result<Vec<L>> {
    if n > MAX_LAYERS {
        return Err(Error::size(
            op,
            format!("num_layers {n} is above the supported {MAX_LAYERS}"),
        ));
    }
    (0..n).map(|_| copy(layer)).collect()
}

/// A copy of `layer` whose parameters are new tensors holding the same values.
fn deep_copy(layer: &TransformerEncoderLayer) -> Result<TransformerEncoderLayer> {
    let mut c = layer.clone();
    let mut copy = DeepCopy::default();
    copy.attention(&mut c.self_attn)?;
    copy.linear(&mut c.linear1)?;
    copy.linear(&mut c.linear2)?;
    copy.norm(&mut c.norm1)?;
    copy.norm(&mut c.norm2)?;
    Ok(c)
}

impl Forward for TransformerEncoder {
    /// [`forward_with`](TransformerEncoder::forward_with) without masks.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_with(x, None, None, false)
    }
}
