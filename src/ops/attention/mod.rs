//! Scaled dot-product attention, PyTorch's `F.scaled_dot_product_attention`: one fused kernel
//! family (shaders/attention.wgsl, launched from `kernel.rs`) that streams K/V tiles through
//! workgroup memory with an online softmax (FlashAttention-2's schedule), so the `L x S` score
//! matrix never exists in memory: the forward keeps O(L E) (the output and one log-sum-exp per
//! query row). The backward recomputes the scores from that log-sum-exp: one pass over query
//! blocks for dQ, one over key blocks for dK and dV, each summing in a fixed order (no
//! atomics), so gradients are deterministic. [`mod@reference`] is the plain composition of
//! `matmul` and `softmax`: the test oracle, and the path of a call whose additive mask is
//! tracked (its gradient needs the scores).

pub(crate) mod kernel;
mod plan;
mod problem;
pub mod reference;

use crate::autograd::{record, BackwardOp, NoGradGuard};
use crate::{Result, Tensor};

pub use problem::Problem;

#[doc(hidden)]
pub use plan::{forward_plan, ForwardPlan, Plan};

/// How an attention mask is read ([`SdpaOptions::attn_mask`]).
#[derive(Clone, Copy, Debug)]
pub enum AttnMask<'a> {
    /// PyTorch's boolean mask: a nonzero entry means the query may attend to that key, zero
    /// means it may not (the crate has no bool dtype: comparisons give f32 1/0 and bool
    /// tensors load as i32; any dtype is read as nonzero / zero).
    Bool(&'a Tensor),
    /// A float mask added to the scaled scores (`-inf` excludes a key). A tracked one (a
    /// learned bias) gets its gradient, as in PyTorch: such a call runs the plain composition
    /// (`reference::scaled_dot_product_attention`, O(L S) memory) instead of the fused kernels.
    Additive(&'a Tensor),
}

/// Options of [`scaled_dot_product_attention`], PyTorch's keyword arguments; `Default` gives
/// PyTorch's defaults (no mask, not causal, scale `1 / sqrt(E)`, no dropout, no GQA).
#[derive(Clone, Copy, Debug, Default)]
pub struct SdpaOptions<'a> {
    /// A mask broadcastable to `[.., L, S]` (see [`AttnMask`]).
    pub attn_mask: Option<AttnMask<'a>>,
    /// Causal attention with PyTorch's upper-left alignment: query `i` attends to keys
    /// `j <= i`. Must not be combined with `attn_mask`.
    pub is_causal: bool,
    /// Multiplies `q k^T`; `None` is `1 / sqrt(E)`.
    pub scale: Option<f64>,
    /// Dropout on the attention weights (inverted scaling, drawn from the device's generator,
    /// [`Device::manual_seed`](crate::Device::manual_seed)); applied whenever it is nonzero, as
    /// in PyTorch's functional form (pass 0 in evaluation); outside `[0, 1]` (or NaN) it is an
    /// error, as on PyTorch's CPU backends.
    pub dropout_p: f64,
    /// Grouped-query attention: `k` and `v` may have fewer heads (dim -3) than `q`, each a
    /// divisor of them; query head `h` reads key head `h / (Hq / Hk)` and value head
    /// `h / (Hq / Hv)` (the kernels group equal key and value heads in place; unequal ones are
    /// repeated first, as PyTorch's `repeat_interleave`).
    pub enable_gqa: bool,
}

/// Attention `softmax(q k^T * scale + mask) v`, PyTorch's
/// `F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, scale,
/// enable_gqa)`: `q` `[.., L, E]`, `k` `[.., S, E]`, `v` `[.., S, Ev]` give `[.., L, Ev]`; the
/// leading dims broadcast (3-D operands also take a `[1, 1 | B, L, S]` mask, as PyTorch's). f32
/// or f16 (computed in f32). A query row whose keys are all masked gives zeros (as PyTorch's
/// math backend does; NaN where a masked value is not finite, since a masked key's weight of 0
/// still multiplies its value), an empty key sequence gives zeros, and a NaN makes its row
/// NaN. Tracked by autograd for `q`, `k` and `v` (a fused, deterministic
/// backward), and for a tracked additive mask (see [`AttnMask::Additive`]).
///
/// ```no_run,ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::ops::{scaled_dot_product_attention, SdpaOptions};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let q = wgtensor::ops::randn(&dev, &[2, 4, 16, 8], DType::F32)?; // [batch, heads, L, E]
/// let k = wgtensor::ops::randn(&dev, &[2, 4, 16, 8], DType::F32)?;
/// let v = wgtensor::ops::randn(&dev, &[2, 4, 16, 8], DType::F32)?;
/// let causal = SdpaOptions { is_causal: true, ..Default::default() };
/// let out = scaled_dot_product_attention(&q, &k, &v, &causal)?;
/// assert_eq!(out.shape(), &[2, 4, 16, 8]);
/// # Ok(()) }
/// ```
pub fn scaled_dot_product_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    opts: &SdpaOptions,
) -> Result<Tensor> {
    if let Some((k, v)) = problem::repeat_kv_heads(q, k, v, opts)? {
        return scaled_dot_product_attention(q, &k, &v, opts);
    }
    if let Some(m) = problem::squeeze_lead_mask(q, k, v, opts)? {
        return scaled_dot_product_attention(q, k, v, &problem::with_mask(opts, &m));
    }
    if let Some(AttnMask::Additive(m)) = opts.attn_mask {
        if crate::autograd::records([m]) {
            // A learned bias (relative positions, ALiBi) gets its gradient, the scores'
            // gradient summed to its shape, through the plain composition, as PyTorch's math
            // backend gives it: O(L S) memory for this call only.
            return reference::scaled_dot_product_attention(q, k, v, opts);
        }
    }
    let prob = Problem::new("scaled_dot_product_attention", q, k, v, opts)?;
    let (out, saved) = {
        let _guard = NoGradGuard::new();
        kernel::forward(&prob)?
    };
    Ok(record(out, &[q, k, v], |out| {
        let mask = opts.attn_mask.map(|m| match m {
            AttnMask::Bool(t) | AttnMask::Additive(t) => t,
        });
        Box::new(SdpaBackward {
            prob,
            out: out.detach(),
            saved,
            callers: [q, k, v]
                .into_iter()
                .chain(mask)
                .map(Tensor::detach)
                .collect(),
        })
    }))
}

/// What the backward needs beyond the problem: the forward's output and its saved statistics.
struct SdpaBackward {
    prob: Problem,
    out: Tensor,
    saved: kernel::Saved,
    /// The caller's q, k, v and mask, for the version check only: the problem holds packed
    /// copies of strided ones, and PyTorch's backends save the caller's tensors.
    callers: Vec<Tensor>,
}

impl BackwardOp for SdpaBackward {
    fn saved(&self) -> Vec<&Tensor> {
        // The backward reads the output (D = rowsum(dO * O)) and the mask (the caller's own
        // storage where it needed no conversion) as well as the operands.
        let mut saved = vec![&self.prob.q, &self.prob.k, &self.prob.v, &self.out];
        saved.extend(self.prob.mask.as_ref().map(|m| &m.t));
        saved.extend(&self.callers);
        saved
    }

    fn name(&self) -> &'static str {
        self.prob.op
    }

    fn backward(&self, grads: &[Option<Tensor>], needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = grads.first().and_then(Option::as_ref) else {
            return Ok(vec![None; 3]);
        };
        let need = |i: usize| needs.get(i) != Some(&false);
        let (dq, dk, dv) = kernel::backward(
            &self.prob,
            &self.out,
            &self.saved,
            g,
            need(0),
            need(1) || need(2),
        )?;
        Ok(vec![dq, dk, dv])
    }
}
