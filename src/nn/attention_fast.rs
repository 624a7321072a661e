//! Where PyTorch's `MultiheadAttention` fast path (`torch._native_multi_head_attention`, taken
//! in eval without gradients for batch-first self-attention) gives other results than its
//! general path, and so this layer's: with masks. Its `masked_softmax` (attention.cpp) reads
//! every mask as bool (`attn_mask->to(kBool)`), so a nonzero additive entry masks its key out
//! entirely (a `-1e9` padding bias too, not only `-inf`), and a query whose every key is
//! masked gets NaN (its softmax sums to 0), where the general path's fused kernel gives 0.

use super::attention::{mask_tensor, same_view, MhaMask, MhaOptions, MultiheadAttention};
use super::Module;
use crate::{Result, Tensor};

impl MultiheadAttention {
    /// Whether PyTorch's `MultiheadAttention.forward` takes its fast path: eval, batch-first
    /// 3-D input, self-attention (query, key and value the same tensor), a packed in-projection
    /// with a bias, an even head count, and no gradient recorded (grad mode off, or neither the
    /// query nor a parameter tracked).
    pub(crate) fn takes_fast_path(&self, query: &Tensor, key: &Tensor, value: &Tensor) -> bool {
        !self.training
            && self.batch_first
            && query.rank() == 3
            && self.num_heads.is_multiple_of(2)
            && self.in_proj_weight.is_some()
            && self.in_proj_bias.is_some()
            && same_view(query, key)
            && same_view(key, value)
            && !(crate::autograd::is_grad_enabled()
                && (query.is_tracked() || self.parameters().iter().any(Tensor::is_tracked)))
    }

    /// The fast path's result when it takes masks (see the module docs); `None` where the
    /// general path's result is PyTorch's: no fast path, no masks, `is_causal` without a
    /// mask (an extension of ours: PyTorch needs the mask), or an additive mask of a dtype
    /// the general path refuses (its error is the one to give).
    pub(super) fn fast_path_forward(
        &self,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        opts: &MhaOptions,
    ) -> Result<Option<(Tensor, Option<Tensor>)>> {
        let masks = [opts.key_padding_mask, opts.attn_mask];
        let refused =
            |m: &Option<MhaMask>| matches!(m, Some(MhaMask::Additive(t)) if !t.dtype().is_float());
        if masks.iter().all(Option::is_none)
            || masks.iter().any(refused)
            || (opts.is_causal && opts.attn_mask.is_none())
            || !self.takes_fast_path(query, key, value)
        {
            return Ok(None);
        }
        let hard = |m: MhaMask| mask_tensor(m).ne_scalar(0.0);
        let pad = opts.key_padding_mask.map(hard).transpose()?;
        let attn = opts.attn_mask.map(hard).transpose()?;
        // The fast path takes a given mask for what it is (`is_causal` is only a hint there).
        let hard_opts = MhaOptions {
            key_padding_mask: pad.as_ref().map(MhaMask::Bool),
            attn_mask: attn.as_ref().map(MhaMask::Bool),
            is_causal: false,
            ..*opts
        };
        let (out, weights) = self.forward_general(query, key, value, &hard_opts)?;
        if opts.need_weights {
            // The explicit softmax of a row of -inf is NaN already, as the fast path's.
            return Ok(Some((out, weights)));
        }
        // The shapes passed the general path's checks: pad [N, S], attn [L, S] or [N H, L, S].
        let (n, l, s, h) = (
            query.shape()[0],
            query.shape()[1],
            key.shape()[1],
            self.num_heads,
        );
        let mut heads = 1;
        let mut all = pad.map(|p| p.reshape(&[n, 1, 1, s])).transpose()?;
        if let Some(a) = attn {
            let a = if a.rank() == 2 {
                a.reshape(&[1, 1, l, s])?
            } else {
                heads = h;
                a.reshape(&[n, h, l, s])?
            };
            all = Some(match all {
                Some(p) => p.maximum(&a)?,
                None => a,
            });
        }
        let Some(all) = all else {
            return Ok(Some((out, weights)));
        };
        // A query excludes every key when the mean of its exclusions is 1, in any head (that
        // head's NaN reaches the whole row through out_proj).
        let rows = all
            .broadcast_to(&[n, heads, l, s])?
            .mean(-1, false)?
            .eq_scalar(1.0)?
            .max(1, false)?
            .reshape(&[n, l, 1])?;
        Ok(Some((out.masked_fill(&rows, f64::NAN)?, weights)))
    }
}
