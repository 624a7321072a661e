//! The masks of [`MultiheadAttention`](crate::nn::MultiheadAttention) and the transformer
//! layers: their types and options, PyTorch's `_canonical_mask` dtype rules, the shape checks
//! of `_mha_shape_check` and `multi_head_attention_forward` in its words, and their
//! conversion to the additive masks the attention adds.

use crate::{DType, Error, Result, Tensor};

const OP: &str = "MultiheadAttention";

/// A mask of [`MultiheadAttention`](crate::nn::MultiheadAttention), read as `nn.MultiheadAttention` reads its
/// `key_padding_mask` and `attn_mask`. Note that the boolean convention is the opposite of
/// [`AttnMask::Bool`](crate::ops::AttnMask::Bool) (`F.scaled_dot_product_attention`'s), as it is in PyTorch.
#[derive(Clone, Copy, Debug)]
pub enum MhaMask<'a> {
    /// PyTorch's boolean mask: a nonzero entry means the position is masked out (may NOT be
    /// attended to), zero means it may. The crate has no bool dtype: bool tensors load from
    /// safetensors as i32 and comparisons give f32 1 / 0; any dtype is read as nonzero / zero.
    Bool(&'a Tensor),
    /// A float mask added to the scaled scores (`-inf` excludes a position).
    Additive(&'a Tensor),
}

/// The keyword arguments of
/// [`MultiheadAttention::forward_attn`](crate::nn::MultiheadAttention::forward_attn), PyTorch's; `Default` gives
/// PyTorch's defaults (no masks, `need_weights` and `average_attn_weights` true, not causal).
#[derive(Clone, Copy, Debug)]
pub struct MhaOptions<'a> {
    /// Keys to ignore per batch element: `[N, S]` (`[S]` for unbatched inputs).
    pub key_padding_mask: Option<MhaMask<'a>>,
    /// Positions each query may not attend to: `[L, S]` (shared by the batch and the heads)
    /// or `[N * num_heads, L, S]`.
    pub attn_mask: Option<MhaMask<'a>>,
    /// Return the attention weights (computed explicitly, O(L S) memory); false runs the
    /// fused kernel and returns `None`.
    pub need_weights: bool,
    /// Return the weights averaged over the heads (`[N, L, S]`) instead of per head
    /// (`[N, num_heads, L, S]`).
    pub average_attn_weights: bool,
    /// Causal attention (query `i` attends to keys `j <= i`). As in PyTorch, a given
    /// `attn_mask` is taken to be the causal mask; unlike PyTorch, `attn_mask` may be left out
    /// (the causal mask is then made here).
    pub is_causal: bool,
}

impl Default for MhaOptions<'_> {
    fn default() -> Self {
        MhaOptions {
            key_padding_mask: None,
            attn_mask: None,
            need_weights: true,
            average_attn_weights: true,
            is_causal: false,
        }
    }
}

/// The dtype of the masks the attention adds, as PyTorch's `_canonical_mask` leaves them (a
/// bool mask in the query's dtype `dt`, a float one in its own) and merges them (their sum
/// promotes).
pub(super) fn merged_mask_dtype(opts: &MhaOptions, fused_causal: bool, dt: DType) -> DType {
    let kind = |m: MhaMask| match m {
        MhaMask::Bool(_) => dt,
        MhaMask::Additive(t) => t.dtype(),
    };
    let attn = opts.attn_mask.filter(|_| !fused_causal);
    [attn, opts.key_padding_mask]
        .into_iter()
        .flatten()
        .map(kind)
        .reduce(crate::dtype::promote)
        .unwrap_or(dt)
}

/// The merged mask's dtype `merged` as the attention takes it: the explicit path's `baddbmm`
/// needs the query's dtype `dt`, the fused path's SDPA f32 or the query's.
pub(super) fn check_merged_mask_dtype(merged: DType, dt: DType, need_weights: bool) -> Result<()> {
    let name = DType::c10_name;
    if merged != dt && need_weights {
        return Err(Error::arg(
            OP,
            format!(
                "Input dtypes must be the same, got: input {}, batch1: {}, batch2: {} (a \
                 float mask must have the query's dtype to be added to the scores)",
                name(merged),
                name(dt),
                name(dt)
            ),
        ));
    }
    if merged != dt && merged != DType::F32 {
        return Err(Error::arg(
            OP,
            format!(
                "Expected attn_mask dtype to be bool or float or to match query dtype, but \
                 got attn_mask.dtype: {} and  query.dtype: {} instead.",
                name(merged),
                name(dt)
            ),
        ));
    }
    Ok(())
}

/// The key padding mask as an additive `[N, 1, 1, S]`.
pub(super) fn key_padding_mask(
    m: MhaMask,
    batched: bool,
    n: usize,
    s: usize,
    dt: DType,
) -> Result<Tensor> {
    let t = mask_tensor(m);
    let want: &[usize] = if batched { &[n, s] } else { &[s] };
    if t.shape() != want {
        let pytorch = match (t.rank() == want.len(), batched) {
            (false, true) => format!(
                "For batched (3-D) `query`, expected `key_padding_mask` to be `None` or 2-D \
                 but found {}-D tensor instead",
                t.rank()
            ),
            (false, false) => format!(
                "For unbatched (2-D) `query`, expected `key_padding_mask` to be `None` or \
                 1-D but found {}-D tensor instead",
                t.rank()
            ),
            // torch 2.15's _check_key_padding_mask (its "padded" spelling), dim 0 then dim 1,
            // of the batched form (an unbatched mask is unsqueezed to [1, S] before it).
            (true, _) => {
                let lift = |s: &[usize]| -> Vec<usize> {
                    if batched {
                        s.to_vec()
                    } else {
                        [&[1][..], s].concat()
                    }
                };
                let (w, g) = (lift(want), lift(t.shape()));
                let d = usize::from(w[0] == g[0]);
                format!(
                    "Expected key_padded_mask.shape[{d}] to be {}, but got {}",
                    w[d], g[d]
                )
            }
        };
        return Err(Error::shape(
            OP,
            format!(
                "{pytorch}: expected key_padding_mask of shape {want:?} ({}), got {:?}",
                if batched {
                    "[N, S]"
                } else {
                    "[S] for unbatched inputs"
                },
                t.shape()
            ),
        ));
    }
    additive(m, dt)?.reshape(&[n, 1, 1, s])
}

/// The attention mask as an additive `[L, S]` or `[N, H, L, S]`.
pub(super) fn attn_mask(
    m: MhaMask,
    num_heads: usize,
    batched: bool,
    n: usize,
    l: usize,
    s: usize,
    dt: DType,
) -> Result<Tensor> {
    let t = mask_tensor(m);
    let h = num_heads;
    let nh = if batched { n * h } else { h };
    let ok = t.shape() == [l, s] || t.shape() == [nh, l, s];
    if !ok {
        let ts = t.shape();
        let which = if batched {
            "batched (3-D)"
        } else {
            "unbatched (2-D)"
        };
        let pytorch = match t.rank() {
            2 => format!(
                "The shape of the 2D attn_mask is torch.Size({ts:?}), but should be ({l}, \
                 {s})."
            ),
            3 if batched => format!(
                "The shape of the 3D attn_mask is torch.Size({ts:?}), but should be ({nh}, \
                 {l}, {s})."
            ),
            3 => format!(
                "Expected `attn_mask` shape to be ({nh}, {l}, {s}) but got \
                 torch.Size({ts:?})"
            ),
            r => format!(
                "For {which} `query`, expected `attn_mask` to be `None`, 2-D or 3-D but \
                 found {r}-D tensor instead"
            ),
        };
        return Err(Error::shape(
            OP,
            format!(
                "{pytorch}: expected attn_mask of shape [{l}, {s}] (L, S) or [{nh}, {l}, {s}] ({}), got {:?}",
                if batched { "N * num_heads, L, S" } else { "num_heads, L, S" },
                t.shape()
            ),
        ));
    }
    let a = additive(m, dt)?;
    if a.rank() == 3 {
        a.reshape(&[n, h, l, s])
    } else {
        Ok(a)
    }
}

/// `_canonical_mask`'s dtype check, which PyTorch's MultiheadAttention and transformer layers
/// run on their masks, in order, before anything else: an additive mask must be a float.
pub(super) fn check_mask_dtypes(
    op: &'static str,
    masks: [(&str, Option<MhaMask>); 2],
) -> Result<()> {
    for (name, m) in masks {
        if let Some(MhaMask::Additive(t)) = m {
            if !t.dtype().is_float() {
                return Err(Error::arg(
                    op,
                    format!(
                        "only bool and floating types of {name} are supported: an additive \
                         {name} must be F32 or F16, got {:?} (a 0/1 mask goes in MhaMask::Bool)",
                        t.dtype()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The tensor of a mask.
pub(super) fn mask_tensor<'a>(m: MhaMask<'a>) -> &'a Tensor {
    match m {
        MhaMask::Bool(t) | MhaMask::Additive(t) => t,
    }
}

/// A mask as an additive float mask of dtype `dt` (bool: `-inf` where nonzero, else 0).
pub(super) fn additive(m: MhaMask, dt: DType) -> Result<Tensor> {
    match m {
        MhaMask::Bool(t) => {
            Tensor::zeros(t.device(), t.shape(), dt)?.masked_fill(t, f64::NEG_INFINITY)
        }
        MhaMask::Additive(t) if !t.dtype().is_float() => Err(crate::Error::DType {
            op: "MultiheadAttention",
            expected: dt,
            got: t.dtype(),
        }),
        MhaMask::Additive(t) => t.to_dtype(dt),
    }
}
