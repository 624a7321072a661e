//! The plain composition of attention out of `matmul`, `softmax` and `dropout`, as PyTorch's
//! math backend writes it: it materialises the `[.., L, S]` scores (O(L S) memory), so it
//! serves as the oracle of the fused kernels' tests, as a comparison in benchmarks, and as the
//! path of a call whose additive mask is tracked (its gradient needs the scores').

use super::{Problem, SdpaOptions};
use crate::{DType, Device, Result, Tensor};

/// PyTorch's top-left causal mask `[L, S]` in `dtype`: `-inf` where key `j` > query `i`,
/// else 0, built on the device (no host buffer of L S values).
pub(crate) fn causal_additive(dev: &Device, l: usize, s: usize, dtype: DType) -> Result<Tensor> {
    let op = "causal_mask";
    crate::layout::checked_numel(op, &[l, s])?;
    let rows = Tensor::arange(dev, 0.0, l as f64, 1.0, DType::I32)?.reshape(&[l, 1])?;
    let cols = Tensor::arange(dev, 0.0, s as f64, 1.0, DType::I32)?.reshape(&[1, s])?;
    let above = cols.gt(&rows)?;
    Tensor::zeros(dev, &[l, s], dtype)?.masked_fill(&above, f64::NEG_INFINITY)
}

/// [`scaled_dot_product_attention`](super::scaled_dot_product_attention) composed from
/// tracked ops (autograd flows through each of them): the same validation (except that its
/// `[.., L, S]` scores must fit u32 indexing, where the fused kernels take longer contexts),
/// semantics and
/// results up to rounding; dropout draws its mask from the device generator in a different
/// order than the fused kernel.
pub fn scaled_dot_product_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    opts: &SdpaOptions,
) -> Result<Tensor> {
    if let Some((k, v)) = super::problem::repeat_kv_heads(q, k, v, opts)? {
        return scaled_dot_product_attention(q, &k, &v, opts);
    }
    if let Some(m) = super::problem::squeeze_lead_mask(q, k, v, opts)? {
        return scaled_dot_product_attention(q, k, v, &super::problem::with_mask(opts, &m));
    }
    let prob = Problem::new("scaled_dot_product_attention", q, k, v, opts)?;
    if q.dtype == DType::F16 {
        // In f32, rounded once at the end, as PyTorch's math backend upcasts f16 (and as the
        // fused kernels compute): f16 scores lose digits past 512, and a mask of -1e9 would
        // round to -inf and turn a fully masked row's uniform weights into zeros.
        let up = |t: &Tensor| t.to_dtype(DType::F32);
        // An f16 additive mask goes up with them (an f16 mask beside an f32 query is refused).
        let mask;
        let attn_mask = match opts.attn_mask {
            Some(super::AttnMask::Additive(t)) if t.dtype() == DType::F16 => {
                mask = up(t)?;
                Some(super::AttnMask::Additive(&mask))
            }
            m => m,
        };
        let opts = SdpaOptions { attn_mask, ..*opts };
        return scaled_dot_product_attention(&up(q)?, &up(k)?, &up(v)?, &opts)?
            .to_dtype(DType::F16);
    }
    let dev = q.device();
    let (k, v) = if prob.group() > 1 {
        let idx = super::problem::head_index(dev, prob.heads, prob.kv_heads)?;
        (k.index_select(-3, &idx)?, v.index_select(-3, &idx)?)
    } else {
        (k.clone(), v.clone())
    };
    // No head dim: every score is 0 (PyTorch's uniform weights), not 0 * inf, as in the fused
    // kernels.
    let scale = if prob.e == 0 { 0.0 } else { prob.scale };
    // Both operands scaled by sqrt(|scale|) before the product, as PyTorch's math backend: in
    // f16 the unscaled products overflow (q.k past 65504) where the scaled scores do not.
    let root = f64::from(scale).abs().sqrt();
    let mut scores = q
        .mul_scalar(root)?
        .matmul(&k.mul_scalar(root)?.transpose(-2, -1)?)?;
    if scale < 0.0 {
        scores = scores.neg()?;
    }
    match (&prob.mask, opts.attn_mask) {
        // The caller's tensor itself, so a tracked bias gets its gradient (broadcasting sums
        // it to the mask's shape); the problem's view of it is detached.
        (Some(_), Some(super::AttnMask::Additive(t))) => {
            scores = scores.add(&t.to_dtype(q.dtype)?)?;
        }
        (Some(m), _) => scores = scores.add(&m.t.to_dtype(q.dtype)?)?,
        (None, _) => {}
    }
    if prob.causal {
        scores = scores.add(&causal_additive(dev, prob.l, prob.s, q.dtype)?)?;
    }
    if prob.s == 0 {
        // No keys: zeros, still recorded (q, k and a tracked mask get zero or empty
        // gradients, as PyTorch's math path gives them).
        return scores.matmul(&v);
    }
    // PyTorch's safe softmax: a row of -inf scores (every key masked) gives zero weights, and
    // zero gradients (its softmax runs on zeros, so no NaN reaches the backward).
    let dead = scores.max(-1, true)?.eq_scalar(f64::NEG_INFINITY)?;
    let p = scores.masked_fill(&dead, 0.0)?.softmax(-1)?;
    let mut p = p.masked_fill(&dead, 0.0)?;
    if opts.dropout_p > 0.0 {
        p = crate::ops::dropout(&p, opts.dropout_p, true)?;
    }
    p.matmul(&v)
}
