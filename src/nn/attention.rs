//! `nn.MultiheadAttention`: PyTorch's parameters (`in_proj_weight`, or `q_proj_weight` /
//! `k_proj_weight` / `v_proj_weight` when `kdim` / `vdim` differ from `embed_dim`;
//! `in_proj_bias`; the `out_proj` child), initialization, mask conventions and layouts. Without
//! attention weights to return, the attention itself is [`scaled_dot_product_attention`]
//! (the fused kernel, unless an additive mask is tracked); with them, the explicit composition
//! PyTorch writes.

use super::attention_masks::{
    attn_mask, check_mask_dtypes, check_merged_mask_dtype, key_padding_mask, mask_tensor,
    merged_mask_dtype, MhaOptions,
};
use super::layers::{param, Linear};
use super::{Forward, Module, Visitor, VisitorMut};
use crate::ops::{
    gemm, scaled_dot_product_attention, xavier_uniform, AttnMask, Bias, GemmOptions, SdpaOptions,
};
use crate::{DType, Device, Error, Result, Tensor};

const OP: &str = "MultiheadAttention";

/// Options of [`MultiheadAttention`] beyond `embed_dim` and `num_heads` (PyTorch's defaults:
/// no dropout, biases, `[L, N, E]` inputs, `kdim = vdim = embed_dim`). PyTorch's
/// `add_bias_kv` and `add_zero_attn` are not offered.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MultiheadAttentionConfig {
    /// Dropout probability on the attention weights, in training mode only (0).
    pub dropout: f64,
    /// Biases on the input and output projections (true).
    pub bias: bool,
    /// Inputs and outputs are `[N, L, E]` instead of `[L, N, E]` (false).
    pub batch_first: bool,
    /// Features of the keys; `None` is `embed_dim`.
    pub kdim: Option<usize>,
    /// Features of the values; `None` is `embed_dim`.
    pub vdim: Option<usize>,
}

impl Default for MultiheadAttentionConfig {
    fn default() -> Self {
        MultiheadAttentionConfig {
            dropout: 0.0,
            bias: true,
            batch_first: false,
            kdim: None,
            vdim: None,
        }
    }
}

/// Multi-head attention (PyTorch's `nn.MultiheadAttention`): `out_proj(attention(q W_q^T +
/// b_q, k W_k^T + b_k, v W_v^T + b_v))` over `num_heads` heads of `embed_dim / num_heads`
/// features each. Parameters and `state_dict()` names are PyTorch's: `in_proj_weight`
/// `[3E, E]` (xavier uniform) or, when `kdim` / `vdim` differ from `E`, `q_proj_weight` `[E, E]`,
/// `k_proj_weight` `[E, kdim]`, `v_proj_weight` `[E, vdim]`; `in_proj_bias` `[3E]` (zeros);
/// `out_proj.weight` (Linear's initialization) and `out_proj.bias` (zeros).
///
/// Inputs are `[L, N, E]` (`[N, L, E]` with `batch_first`) or unbatched `[L, E]`. As a
/// [`Forward`] it is self-attention without masks.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{self, Forward, MhaMask, MhaOptions, Module};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let cfg = nn::MultiheadAttentionConfig { batch_first: true, ..Default::default() };
/// let mha = nn::MultiheadAttention::new(&dev, 8, 2, cfg)?;
/// let names: Vec<String> = mha.state_dict().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]);
/// let x = Tensor::zeros(&dev, &[2, 5, 8], DType::F32)?; // [N, L, E]
/// let pad = Tensor::from_slice(&dev, &[0i32, 0, 0, 1, 1, 0, 0, 0, 0, 0], &[2, 5])?;
/// let opts = MhaOptions { key_padding_mask: Some(MhaMask::Bool(&pad)), ..Default::default() };
/// let (out, weights) = mha.forward_attn(&x, &x, &x, &opts)?;
/// assert_eq!(out.shape(), &[2, 5, 8]);
/// assert_eq!(weights.unwrap().shape(), &[2, 5, 5]); // averaged over the heads
/// assert_eq!(mha.forward(&x)?.shape(), &[2, 5, 8]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MultiheadAttention {
    /// `[3E, E]`: the query, key and value projections stacked (when `kdim = vdim = E`).
    pub in_proj_weight: Option<Tensor>,
    /// `[E, E]`, when `kdim` or `vdim` differs from `E`.
    pub q_proj_weight: Option<Tensor>,
    /// `[E, kdim]`, when `kdim` or `vdim` differs from `E`.
    pub k_proj_weight: Option<Tensor>,
    /// `[E, vdim]`, when `kdim` or `vdim` differs from `E`.
    pub v_proj_weight: Option<Tensor>,
    /// `[3E]`, with `bias`.
    pub in_proj_bias: Option<Tensor>,
    /// The output projection `[E, E]`.
    pub out_proj: Linear,
    /// `E`.
    pub embed_dim: usize,
    /// Heads; `E / num_heads` features each.
    pub num_heads: usize,
    /// Features of the keys.
    pub kdim: usize,
    /// Features of the values.
    pub vdim: usize,
    /// Dropout probability on the attention weights (training only).
    pub dropout: f64,
    /// `[N, L, E]` inputs and outputs.
    pub batch_first: bool,
    /// Training mode (dropout on).
    pub training: bool,
}

impl MultiheadAttention {
    /// PyTorch's `nn.MultiheadAttention(embed_dim, num_heads, dropout, bias, kdim=, vdim=,
    /// batch_first=)` with its initialization (`MultiheadAttentionConfig::default()` gives
    /// PyTorch's defaults). Errors when `embed_dim` is not a multiple of `num_heads`. Any
    /// `dropout` is accepted here, as PyTorch's constructor does. A forward in training
    /// refuses one above 1; one below 0 or NaN drops nothing with `need_weights` (its
    /// `dropout_p > 0` test) and is refused without, as scaled_dot_product_attention on
    /// PyTorch's CPU backends.
    pub fn new(
        dev: &Device,
        embed_dim: usize,
        num_heads: usize,
        c: MultiheadAttentionConfig,
    ) -> Result<MultiheadAttention> {
        if embed_dim == 0 || num_heads == 0 {
            return Err(Error::arg(
                OP,
                format!("embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} and num_heads={num_heads} instead"),
            ));
        }
        if !embed_dim.is_multiple_of(num_heads) {
            return Err(Error::arg(
                OP,
                format!("embed_dim must be divisible by num_heads, got embed_dim {embed_dim} and num_heads {num_heads}"),
            ));
        }
        let (kdim, vdim) = (c.kdim.unwrap_or(embed_dim), c.vdim.unwrap_or(embed_dim));
        let e = embed_dim;
        // The packed projection is [3 E, E]: E is the caller's, 3 E must not overflow.
        let e3 = e
            .checked_mul(3)
            .ok_or_else(|| Error::size(OP, format!("embed_dim {e} overflows 3 * embed_dim")))?;
        let xavier = |shape: &[usize]| param(xavier_uniform(dev, shape, 1.0, DType::F32)?);
        let same = kdim == e && vdim == e;
        let (in_proj_weight, q, k, v) = if same {
            (Some(xavier(&[e3, e])?), None, None, None)
        } else {
            let (q, k, v) = (xavier(&[e, e])?, xavier(&[e, kdim])?, xavier(&[e, vdim])?);
            (None, Some(q), Some(k), Some(v))
        };
        let zeros = |n: usize| param(Tensor::zeros(dev, &[n], DType::F32)?);
        let in_proj_bias = c.bias.then(|| zeros(e3)).transpose()?;
        let mut out_proj = Linear::new(dev, e, e, c.bias)?;
        out_proj.bias = c.bias.then(|| zeros(e)).transpose()?;
        Ok(MultiheadAttention {
            in_proj_weight,
            q_proj_weight: q,
            k_proj_weight: k,
            v_proj_weight: v,
            in_proj_bias,
            out_proj,
            embed_dim,
            num_heads,
            kdim,
            vdim,
            dropout: c.dropout,
            batch_first: c.batch_first,
            training: true,
        })
    }

    /// PyTorch's `forward(query, key, value, key_padding_mask, need_weights, attn_mask,
    /// average_attn_weights, is_causal)`: `query` `[L, N, E]`, `key` `[S, N, kdim]`, `value`
    /// `[S, N, vdim]` (`[N, L, E]`, ... with `batch_first`; `[L, E]`, `[S, kdim]`, `[S, vdim]`
    /// unbatched) give the output `[L, N, E]` (the query's layout) and, with `need_weights`,
    /// the attention weights `[N, L, S]` (`[N, num_heads, L, S]` without
    /// `average_attn_weights`; no `N` unbatched), after dropout as PyTorch returns them.
    ///
    /// Masks: see [`MhaOptions`] and [`MhaMask`](super::MhaMask) (bool nonzero = masked out). Without
    /// `need_weights` the key padding and attention masks are merged into one additive mask
    /// and the fused kernel runs (where a query has every key masked, it gives zeros, as
    /// PyTorch's general path; the explicit path gives NaN there, as PyTorch's does).
    ///
    /// Where PyTorch takes its fast path (eval without gradients, batch-first self-attention
    /// with `query`, `key` and `value` one tensor, a packed in-projection with a bias, an even
    /// head count, and bool masks only: a float mask keeps it off), a query with every key
    /// masked gives NaN, as there.
    ///
    /// Errors ([`Error::Shape`]) name the layer and the shapes: inputs of other ranks or
    /// feature sizes, keys and values of different lengths or batches, masks of other shapes;
    /// [`Error::InvalidArgument`] for an additive mask of an integer dtype, checked first (PyTorch's
    /// `_canonical_mask`), also where `is_causal` drops the mask, and for a float mask the
    /// attention cannot add (with `need_weights`, one of another dtype than the query's, in
    /// `baddbmm`'s words; without, one neither f32 nor the query's, in SDPA's).
    pub fn forward_attn(
        &self,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        opts: &MhaOptions,
    ) -> Result<(Tensor, Option<Tensor>)> {
        check_mask_dtypes(
            OP,
            [
                ("key_padding_mask", opts.key_padding_mask),
                ("attn_mask", opts.attn_mask),
            ],
        )?;
        match self.fast_path_forward(query, key, value, opts)? {
            Some(r) => Ok(r),
            None => self.forward_general(query, key, value, opts),
        }
    }

    /// [`forward_attn`](Self::forward_attn) as PyTorch's general path computes it.
    pub(super) fn forward_general(
        &self,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        opts: &MhaOptions,
    ) -> Result<(Tensor, Option<Tensor>)> {
        let batched = query.rank() == 3;
        if !(query.rank() == 2 || batched)
            || key.rank() != query.rank()
            || value.rank() != query.rank()
        {
            // PyTorch's words first (its _mha_shape_check).
            let (q, k, v) = (query.rank(), key.rank(), value.rank());
            let pytorch = match q {
                3 => format!(
                    "For batched (3-D) `query`, expected `key` and `value` to be 3-D but found \
                     {k}-D and {v}-D tensors respectively"
                ),
                2 => format!(
                    "For unbatched (2-D) `query`, expected `key` and `value` to be 2-D but \
                     found {k}-D and {v}-D tensors respectively"
                ),
                _ => format!(
                    "query should be unbatched 2D or batched 3D tensor but received {q}-D query \
                     tensor"
                ),
            };
            return Err(Error::shape(
                OP,
                format!(
                    "{pytorch}: query, key and value should all be 3-D (batched) or all 2-D \
                     (unbatched), got query {:?}, key {:?}, value {:?}",
                    query.shape(),
                    key.shape(),
                    value.shape()
                ),
            ));
        }
        // Everything below works on [N, L, features].
        let to_batch_first = |t: &Tensor| -> Result<Tensor> {
            match (batched, self.batch_first) {
                (false, _) => t.unsqueeze(0),
                (true, true) => Ok(t.clone()),
                (true, false) => t.transpose(0, 1),
            }
        };
        let (q_in, k_in, v_in) = (
            to_batch_first(query)?,
            to_batch_first(key)?,
            to_batch_first(value)?,
        );
        let (n, l, s) = (q_in.shape()[0], q_in.shape()[1], k_in.shape()[1]);
        let (e, h) = (self.embed_dim, self.num_heads);
        // _mha_shape_check's mask ranks, and an unbatched query's 3-D attn_mask shape, come
        // before the features; the other mask shapes are checked after the in-projection.
        if let Some(m) = opts.key_padding_mask {
            if mask_tensor(m).rank() != if batched { 2 } else { 1 } {
                key_padding_mask(m, batched, n, s, query.dtype())?;
            }
        }
        if let Some(m) = opts.attn_mask {
            let t = mask_tensor(m);
            let rank = t.rank();
            if !(rank == 2 || rank == 3) || (!batched && rank == 3 && t.shape() != [h, l, s]) {
                attn_mask(m, self.num_heads, batched, n, l, s, query.dtype())?;
            }
        }
        // The fields are public: a module edited after `new` is checked again.
        if h == 0 || !e.is_multiple_of(h) {
            return Err(Error::arg(
                OP,
                format!(
                    "embed_dim must be divisible by num_heads, got embed_dim {e} and num_heads {h}"
                ),
            ));
        }
        let d = e / h;
        let layout = if !batched {
            "unbatched [L, E]"
        } else if self.batch_first {
            "batch_first [N, L, E]"
        } else {
            "[L, N, E]"
        };
        // F.multi_head_attention_forward's asserts in its order and words, its shapes sequence
        // first ([S, N, E]: batch-first inputs are transposed, unbatched ones unsqueezed).
        let seq_first = |t: &Tensor| -> Vec<usize> {
            let s = t.shape();
            vec![s[1], s[0], s[2]]
        };
        let (ks, vs) = (seq_first(&k_in), seq_first(&v_in));
        let pytorch = if q_in.shape()[2] != e {
            Some(format!(
                "was expecting embedding dimension of {e}, but got {}",
                q_in.shape()[2]
            ))
        } else if self.kdim == e && self.vdim == e && ks != vs {
            Some(format!(
                "key shape torch.Size({ks:?}) does not match value shape torch.Size({vs:?})"
            ))
        } else if (self.kdim != e || self.vdim != e) && ks[..2] != vs[..2] {
            Some(format!(
                "key's sequence and batch dims torch.Size({:?}) do not match value's \
                 torch.Size({:?})",
                &ks[..2],
                &vs[..2]
            ))
        } else if (self.kdim != e || self.vdim != e) && ks[2] != self.kdim {
            Some(format!(
                "expecting key weights shape of ({e}, {}), but got torch.Size([{e}, {}])",
                ks[2], self.kdim
            ))
        } else if (self.kdim != e || self.vdim != e) && vs[2] != self.vdim {
            Some(format!(
                "expecting value weights shape of ({e}, {}), but got torch.Size([{e}, {}])",
                vs[2], self.vdim
            ))
        } else {
            None
        };
        if let Some(pytorch) = pytorch {
            return Err(Error::shape(
                OP,
                format!(
                    "{pytorch}: got query {:?}, key {:?}, value {:?} ({layout})",
                    query.shape(),
                    key.shape(),
                    value.shape()
                ),
            ));
        }
        if k_in.shape()[2] != self.kdim || v_in.shape()[2] != self.vdim {
            return Err(Error::shape(
                OP,
                format!(
                    "expected query, key and value ({layout}) with {e}, {} and {} features (embed_dim, kdim, vdim), got query {:?}, key {:?}, value {:?}",
                    self.kdim,
                    self.vdim,
                    query.shape(),
                    key.shape(),
                    value.shape()
                ),
            ));
        }
        if k_in.shape()[..2] != v_in.shape()[..2] || k_in.shape()[0] != n {
            return Err(Error::shape(
                OP,
                format!(
                    "key and value should have the same sequence length and the query's batch ({layout}), got query {:?}, key {:?}, value {:?}",
                    query.shape(),
                    key.shape(),
                    value.shape()
                ),
            ));
        }
        let (q, k, v) = self.project(&q_in, &k_in, &v_in, query, key, value, [n, l, s])?;
        let dt = q.dtype();
        let fused_causal = opts.is_causal && opts.key_padding_mask.is_none() && !opts.need_weights;
        let mask_dt = merged_mask_dtype(opts, fused_causal, dt);
        // F.multi_head_attention_forward drops the mask under fused causal before its shape
        // checks (its rank was checked above): the causal kernel stands in for it. It checks
        // attn_mask's shape before key_padding_mask's.
        let mut attn = match opts.attn_mask {
            Some(_) if fused_causal => None,
            m => m
                .map(|m| attn_mask(m, self.num_heads, batched, n, l, s, mask_dt))
                .transpose()?,
        };
        let kpm = opts
            .key_padding_mask
            .map(|m| key_padding_mask(m, batched, n, s, mask_dt))
            .transpose()?;
        // After the shapes, as the attention (baddbmm or SDPA) takes the merged mask.
        check_merged_mask_dtype(mask_dt, dt, opts.need_weights)?;
        // After the masks' checks, as PyTorch drops out when it computes the attention. The
        // fused path hands p to scaled_dot_product_attention, whose checks are PyTorch's
        // CPU backends' (outside [0, 1] or NaN refused); the explicit path drops out only
        // for p > 0, as multi_head_attention_forward's `if dropout_p > 0.0`.
        let dropout_p = match (self.training, opts.need_weights) {
            (false, _) => 0.0,
            (true, false) => self.dropout,
            (true, true) if self.dropout > 0.0 => {
                crate::ops::random::check_dropout_p(OP, self.dropout)?;
                self.dropout
            }
            (true, true) => 0.0,
        };
        if opts.is_causal && !fused_causal && attn.is_none() {
            attn = Some(crate::ops::attention::reference::causal_additive(
                q.device(),
                l,
                s,
                dt,
            )?);
        }
        // PyTorch merges the two masks before either meets the scores (attn_mask +
        // key_padding_mask, then baddbmm): added one after the other, 1e8 then -1e8 would wipe
        // the score between them.
        let merged = match (attn, kpm) {
            (Some(a), Some(p)) => Some(a.add(&p)?),
            (a, p) => a.or(p),
        };
        let (out, weights) = if !opts.need_weights {
            let mask = if fused_causal { None } else { merged };
            let sdpa = SdpaOptions {
                attn_mask: mask.as_ref().map(AttnMask::Additive),
                is_causal: fused_causal,
                scale: None,
                dropout_p,
                enable_gqa: false,
            };
            (scaled_dot_product_attention(&q, &k, &v, &sdpa)?, None)
        } else {
            // PyTorch's explicit path: scale q, add the masks, softmax, dropout, then v.
            let mut scores = q
                .mul_scalar(1.0 / (d as f64).sqrt())?
                .matmul(&k.transpose(-2, -1)?)?;
            if let Some(m) = &merged {
                scores = scores.add(m)?;
            }
            let mut p = scores.softmax(-1)?;
            if dropout_p > 0.0 {
                p = crate::ops::dropout(&p, dropout_p, true)?;
            }
            let out = p.matmul(&v)?;
            let w = if opts.average_attn_weights {
                p.mean(1, false)?
            } else {
                p
            };
            let w = if batched { w } else { w.squeeze(0)? };
            (out, Some(w))
        };
        // [N, H, L, D] -> [N, L, E] -> out_proj -> the query's layout.
        let out = out.permute(&[0, 2, 1, 3])?.reshape(&[n, l, e])?;
        let out = self.out_proj.forward(&out)?;
        let out = match (batched, self.batch_first) {
            (false, _) => out.squeeze(0)?,
            (true, true) => out,
            (true, false) => out.transpose(0, 1)?,
        };
        Ok((out, weights))
    }

    /// The input projections split into heads: q `[N, H, L, D]`, k and v `[N, H, S, D]`.
    #[allow(clippy::too_many_arguments)]
    fn project(
        &self,
        q_in: &Tensor,
        k_in: &Tensor,
        v_in: &Tensor,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        [n, l, s]: [usize; 3],
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let (e, h) = (self.embed_dim, self.num_heads);
        let d = e / h;
        let bias = |i: usize| -> Result<Option<Tensor>> {
            self.in_proj_bias
                .as_ref()
                .map(|b| b.narrow(0, i * e, e))
                .transpose()
        };
        let linear = |x: &Tensor, w: &Tensor, b: Option<&Tensor>| -> Result<Tensor> {
            gemm(
                x,
                &w.transpose(0, 1)?,
                &GemmOptions {
                    bias: b.map(Bias::PerColumn),
                    ..Default::default()
                },
            )
        };
        let heads = |t: Tensor, len: usize| -> Result<Tensor> {
            t.reshape(&[n, len, h, d])?.permute(&[0, 2, 1, 3])
        };
        if let Some(w) = &self.in_proj_weight {
            if same_view(query, key) && same_view(key, value) {
                // Self-attention: one GEMM for the three projections.
                let qkv = linear(q_in, w, self.in_proj_bias.as_ref())?
                    .reshape(&[n, l, 3, h, d])?
                    .permute(&[2, 0, 3, 1, 4])?;
                let part = |i: usize| qkv.narrow(0, i, 1)?.squeeze(0);
                return Ok((part(0)?, part(1)?, part(2)?));
            }
            let wi = |i: usize| w.narrow(0, i * e, e);
            let q = linear(q_in, &wi(0)?, bias(0)?.as_ref())?;
            let k = linear(k_in, &wi(1)?, bias(1)?.as_ref())?;
            let v = linear(v_in, &wi(2)?, bias(2)?.as_ref())?;
            return Ok((heads(q, l)?, heads(k, s)?, heads(v, s)?));
        }
        let (Some(wq), Some(wk), Some(wv)) = (
            &self.q_proj_weight,
            &self.k_proj_weight,
            &self.v_proj_weight,
        ) else {
            return Err(Error::arg(
                OP,
                "the layer holds neither in_proj_weight nor q/k/v_proj_weight",
            ));
        };
        let q = linear(q_in, wq, bias(0)?.as_ref())?;
        let k = linear(k_in, wk, bias(1)?.as_ref())?;
        let v = linear(v_in, wv, bias(2)?.as_ref())?;
        Ok((heads(q, l)?, heads(k, s)?, heads(v, s)?))
    }
}

/// The same view of the same storage in the same graph (PyTorch's `query is key` for
/// self-attention): `x` and `x.detach()` share their storage but not their gradient, so the
/// packed projection of one would route (or drop) the other's gradient.
pub(super) fn same_view(a: &Tensor, b: &Tensor) -> bool {
    let same_graph = match (&a.grad, &b.grad) {
        (None, None) => true,
        (Some(x), Some(y)) => std::sync::Arc::ptr_eq(x, y),
        _ => false,
    };
    same_graph
        && a.shares_storage(b)
        && a.shape() == b.shape()
        && a.strides() == b.strides()
        && a.layout().offset() == b.layout().offset()
        && a.dtype() == b.dtype()
}

impl Module for MultiheadAttention {
    fn visit(&self, v: &mut dyn Visitor) {
        let own = [
            ("in_proj_weight", &self.in_proj_weight),
            ("q_proj_weight", &self.q_proj_weight),
            ("k_proj_weight", &self.k_proj_weight),
            ("v_proj_weight", &self.v_proj_weight),
            ("in_proj_bias", &self.in_proj_bias),
        ];
        for (name, t) in own {
            if let Some(t) = t {
                v.parameter(name, t);
            }
        }
        v.training(self.training);
        v.child("out_proj", &self.out_proj);
    }
    fn visit_mut(&mut self, v: &mut dyn VisitorMut) {
        v.training(&mut self.training);
        v.child("out_proj", &mut self.out_proj);
    }
}

impl Forward for MultiheadAttention {
    /// Self-attention without masks, `forward_attn(x, x, x)`'s output (on the fused kernel:
    /// no weights are computed).
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let opts = MhaOptions {
            need_weights: false,
            ..Default::default()
        };
        Ok(self.forward_attn(x, x, x, &opts)?.0)
    }
}
