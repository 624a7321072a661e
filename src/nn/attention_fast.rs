//! Where PyTorch's attention fast paths give other results than its general path, and so this
//! layer's: with masks. `MultiheadAttention.forward` takes `torch._native_multi_head_attention`
//! in eval without gradients for batch-first self-attention given bool masks only (float masks
//! send it down the general path); `TransformerEncoderLayer.forward` takes
//! `torch._transformer_encoder_layer_fwd` under its own conditions, with its masks made float
//! and merged. Both end in attention.cpp's `masked_softmax`, which reads the mask as bool
//! (`attn_mask->to(kBool)`: a nonzero additive entry masks its key out entirely) and gives NaN
//! for a query whose every key is masked (its softmax sums to 0), where the general path's
//! fused kernel gives 0.

use super::attention::{same_view, MultiheadAttention};
use super::attention_masks::{additive, mask_tensor, MhaMask, MhaOptions};
use super::Module;
use crate::{Result, Tensor};

impl MultiheadAttention {
    /// Whether PyTorch's `MultiheadAttention.forward` takes its fast path, masks aside: eval,
    /// batch-first 3-D input, self-attention (query, key and value the same tensor), a packed
    /// in-projection with a bias, an even head count, and no gradient recorded (grad mode off,
    /// or neither the query nor a parameter tracked).
    pub(crate) fn takes_fast_path(&self, query: &Tensor, key: &Tensor, value: &Tensor) -> bool {
        self.fast_path_layout()
            && query.rank() == 3
            && same_view(query, key)
            && same_view(key, value)
            && !(crate::autograd::is_grad_enabled()
                && (query.is_tracked() || self.parameters().iter().any(Tensor::is_tracked)))
    }

    /// The module's part of its own fast path's conditions: eval and
    /// [`fast_path_shape`](Self::fast_path_shape).
    pub(crate) fn fast_path_layout(&self) -> bool {
        !self.training && self.fast_path_shape()
    }

    /// What both fast paths (this module's and the encoder layer's, which reads the layer's
    /// own training flag instead of this one's) ask of the module: batch-first, an even head
    /// count, a packed in-projection with a bias.
    pub(crate) fn fast_path_shape(&self) -> bool {
        self.batch_first
            && self.num_heads.is_multiple_of(2)
            && self.in_proj_weight.is_some()
            && self.in_proj_bias.is_some()
    }

    /// A mask of checked shape in the `[N, H or 1, L, S]` form the fast paths combine (`pad`:
    /// a key padding mask `[N, S]`; else `[L, S]` or `[N * H, L, S]`), with its head count.
    fn four_d(&self, t: &Tensor, pad: bool, n: usize, l: usize) -> Result<(Tensor, usize)> {
        let h = self.num_heads;
        Ok(match (pad, t.rank()) {
            (true, _) => (t.reshape(&[n, 1, 1, l])?, 1),
            (false, 2) => (t.reshape(&[1, 1, l, l])?, 1),
            (false, _) => (t.reshape(&[n, h, l, l])?, h),
        })
    }

    /// `MultiheadAttention.forward`'s fast path where it changes the result: bool masks only
    /// (see the module docs); `None` where the general path's result is PyTorch's: no fast
    /// path, no masks, a float mask, or `is_causal` without a mask (an extension of ours:
    /// PyTorch needs the mask; with one, the fast path takes the mask for what it is).
    pub(super) fn fast_path_forward(
        &self,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        opts: &MhaOptions,
    ) -> Result<Option<(Tensor, Option<Tensor>)>> {
        let masks = [opts.key_padding_mask, opts.attn_mask];
        if masks.iter().all(Option::is_none)
            || masks
                .iter()
                .any(|m| matches!(m, Some(MhaMask::Additive(_))))
            || (opts.is_causal && opts.attn_mask.is_none())
            || !self.takes_fast_path(query, key, value)
        {
            return Ok(None);
        }
        let o = MhaOptions {
            is_causal: false,
            ..*opts
        };
        self.masked_softmax_path(query, &o).map(Some)
    }

    /// The encoder layer's fast path (`_transformer_encoder_layer_fwd`) for self-attention on
    /// `x`, which the layer decided to take: every mask read as bool, a float one too. Two
    /// masks, one of them float, are summed first as `merge_masks` does (a `+x` and a `-x`
    /// entry cancel), into one `[N * H, L, S]` mask as PyTorch's. The layer has checked the
    /// masks' dtypes.
    pub(crate) fn encoder_fast_path(&self, x: &Tensor, opts: &MhaOptions) -> Result<Tensor> {
        let masks = [opts.key_padding_mask, opts.attn_mask];
        // `is_causal` without a mask is ours (PyTorch needs the mask): the general path.
        let causal_only = opts.is_causal && opts.attn_mask.is_none();
        if masks.iter().all(Option::is_none) || causal_only {
            return Ok(self.forward_general(x, x, x, opts)?.0);
        }
        if let Some(merged) = self.merged_float_masks(x, opts)? {
            let o = MhaOptions {
                key_padding_mask: None,
                attn_mask: Some(MhaMask::Bool(&merged)),
                is_causal: false,
                ..*opts
            };
            return Ok(self.masked_softmax_path(x, &o)?.0);
        }
        // A float mask read as bool (a bool one is already).
        let hard = |m: Option<MhaMask>| match m {
            Some(MhaMask::Additive(t)) => t.ne_scalar(0.0).map(Some),
            _ => Ok(None),
        };
        let (pad, attn) = (hard(opts.key_padding_mask)?, hard(opts.attn_mask)?);
        let o = MhaOptions {
            key_padding_mask: pad.as_ref().map(MhaMask::Bool).or(opts.key_padding_mask),
            attn_mask: attn.as_ref().map(MhaMask::Bool).or(opts.attn_mask),
            is_causal: false,
            ..*opts
        };
        Ok(self.masked_softmax_path(x, &o)?.0)
    }

    /// `merge_masks`' sum of a padding mask and an attention mask, at least one of them
    /// float, as a `[N * H, L, S]` 0/1 mask (nonzero sums masked); `None` for any other pair,
    /// or for shapes the general path will refuse in its words.
    fn merged_float_masks(&self, x: &Tensor, opts: &MhaOptions) -> Result<Option<Tensor>> {
        let (Some(pad), Some(attn)) = (opts.key_padding_mask, opts.attn_mask) else {
            return Ok(None);
        };
        let float = |m: MhaMask| matches!(m, MhaMask::Additive(_));
        let (n, l, h) = (x.shape()[0], x.shape()[1], self.num_heads);
        let (ps, ats) = (mask_tensor(pad).shape(), mask_tensor(attn).shape());
        let shapes_ok = ps == [n, l] && (ats == [l, l] || ats == [n * h, l, l]);
        if !(float(pad) || float(attn)) || !shapes_ok {
            return Ok(None);
        }
        // Summed in f32: each float mask keeps its own values (`_canonical_mask` leaves a float
        // mask's dtype alone; an f32 1e-8 must not round to 0 in an f16 model's dtype).
        let dt = crate::DType::F32;
        let (p, _) = self.four_d(&additive(pad, dt)?, true, n, l)?;
        let (a, _) = self.four_d(&additive(attn, dt)?, false, n, l)?;
        let merged = p.add(&a)?.broadcast_to(&[n, h, l, l])?.ne_scalar(0.0)?;
        Ok(Some(merged.reshape(&[n * h, l, l])?))
    }

    /// The general path with bool masks (`opts`), then NaN on the output rows of queries whose
    /// every key is masked (in any head: that head's NaN reaches the whole row through
    /// out_proj), as `masked_softmax` gives. With weights the explicit softmax of a row of
    /// `-inf` is NaN already.
    fn masked_softmax_path(
        &self,
        x: &Tensor,
        opts: &MhaOptions,
    ) -> Result<(Tensor, Option<Tensor>)> {
        let (out, weights) = self.forward_general(x, x, x, opts)?;
        if opts.need_weights {
            return Ok((out, weights));
        }
        // The shapes passed the general path's checks: pad [N, S], attn [L, S] or [N H, L, S].
        let (n, l) = (x.shape()[0], x.shape()[1]);
        let mut heads = 1;
        let mut all: Option<Tensor> = None;
        for (m, pad) in [(opts.key_padding_mask, true), (opts.attn_mask, false)] {
            let Some(m) = m else { continue };
            let (e, hs) = self.four_d(&mask_tensor(m).ne_scalar(0.0)?, pad, n, l)?;
            heads = heads.max(hs);
            all = Some(match all {
                Some(p) => p.maximum(&e)?,
                None => e,
            });
        }
        let Some(all) = all else {
            return Ok((out, weights));
        };
        // A query excludes every key when the mean of its exclusions is 1.
        let rows = all
            .broadcast_to(&[n, heads, l, l])?
            .mean(-1, false)?
            .eq_scalar(1.0)?
            .max(1, false)?
            .reshape(&[n, l, 1])?;
        Ok((out.masked_fill(&rows, f64::NAN)?, weights))
    }
}
