//! One attention call, validated: the operands broadcast and packed as the kernels read them
//! (`q` `[N, L, E]`, `k` `[Nk, S, E]`, `v` `[Nk, S, Ev]`), the mask turned additive and
//! described by strides, and the shapes the gradients must come back in.

use super::{AttnMask, SdpaOptions};
use crate::autograd::NoGradGuard;
use crate::layout::broadcast_shapes;
use crate::{DType, Error, Result, Tensor};

/// An additive f32 mask read in place through strides: element (n, i, j) of the scores, with
/// `n = n0 * heads + n1`, adds `t[off + n0 * n0_stride + n1 * n1_stride + i * l_stride + j *
/// s_stride]`.
#[derive(Clone, Debug)]
pub(crate) struct MaskView {
    pub t: Tensor,
    pub off: usize,
    pub n0_stride: usize,
    pub n1_stride: usize,
    pub l_stride: usize,
    pub s_stride: usize,
}

/// A validated attention problem (see the module docs); built by
/// [`scaled_dot_product_attention`](super::scaled_dot_product_attention) and its reference.
#[derive(Clone, Debug)]
pub struct Problem {
    pub(crate) op: &'static str,
    /// Packed, broadcast operands (untracked).
    pub(crate) q: Tensor,
    pub(crate) k: Tensor,
    pub(crate) v: Tensor,
    pub(crate) mask: Option<MaskView>,
    /// The broadcast leading dims of q (and of the output), and of k / v.
    pub(crate) lead: Vec<usize>,
    pub(crate) kv_lead: Vec<usize>,
    /// The callers' shapes, which the gradients take.
    pub(crate) shapes: [Vec<usize>; 3],
    pub(crate) n: usize,
    pub(crate) l: usize,
    pub(crate) s: usize,
    pub(crate) e: usize,
    pub(crate) ev: usize,
    /// Query heads (the last leading dim, 1 without leading dims) and key/value heads.
    pub(crate) heads: usize,
    pub(crate) kv_heads: usize,
    pub(crate) scale: f32,
    pub(crate) causal: bool,
    pub(crate) dropout_p: f32,
    /// What kept weights are scaled by: at::dropout's `1 / (1 - p)`, 1 - p rounded to f32 and
    /// the quotient taken in f32 (0 for p = 1).
    pub(crate) drop_scale: f32,
}

/// The stride `s` with `offset(f) = f * s` for the flat index `f` over dims `shape` with
/// `strides`, if one exists (broadcast dims have stride 0; unit dims do not count).
fn merged_stride(shape: &[usize], strides: &[usize]) -> Option<usize> {
    let mut s = None;
    let mut inner = 1usize;
    for (&n, &st) in shape.iter().zip(strides).rev() {
        if n > 1 {
            let base = *s.get_or_insert(if inner == 1 { st } else { 0 });
            if st != base.checked_mul(inner)? {
                return None;
            }
        }
        inner = inner.checked_mul(n)?;
    }
    Some(s.unwrap_or(0))
}

impl Problem {
    /// Validates and packs one call's operands (untracked: the caller records the op).
    pub fn new(
        op: &'static str,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        opts: &SdpaOptions,
    ) -> Result<Problem> {
        let _guard = NoGradGuard::new();
        for t in [k, v] {
            q.same_device(op, t)?;
            q.same_dtype(op, t)?;
        }
        for (name, t) in [("query", q), ("key", k), ("value", v)] {
            if t.rank() < 2 {
                return Err(Error::shape(
                    op,
                    format!(
                        "{name} must have at least 2 dims [.., len, dim], got shape {:?}",
                        t.shape()
                    ),
                ));
            }
        }
        check_mask(op, q, opts)?;
        let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
        // Below 4-D PyTorch runs its math path, whose GQA preprocessing reads each operand's
        // size(-3), q's first, before the products check the sizes.
        if let Some(r) = [qs, ks, vs]
            .iter()
            .map(|s| s.len())
            .find(|&r| opts.enable_gqa && r < 3)
        {
            return Err(Error::shape(
                op,
                format!(
                    "Dimension out of range (expected to be in range of [-{r}, {}], but got -3)",
                    r - 1
                ),
            ));
        }
        let (l, e) = (qs[qs.len() - 2], qs[qs.len() - 1]);
        let (s, ek) = (ks[ks.len() - 2], ks[ks.len() - 1]);
        let (sv, ev) = (vs[vs.len() - 2], vs[vs.len() - 1]);
        if ek != e {
            return Err(Error::shape(
                op,
                format!("key's last dim must equal query's ({e}), got key {ks:?}, query {qs:?}"),
            ));
        }
        if sv != s {
            return Err(Error::shape(
                op,
                format!(
                    "value's length (dim -2) must equal key's ({s}), got value {vs:?}, key {ks:?}"
                ),
            ));
        }
        // A p past 1 is at::dropout's error; a negative or NaN one PyTorch's CPU default
        // (flash) refuses too (its `dropout_p == 0` check), where only the math backend would
        // drop nothing.
        if !(0.0..=1.0).contains(&opts.dropout_p) {
            return Err(Error::arg(
                op,
                format!(
                    "dropout probability has to be between 0 and 1, but got {} (dropout_p)",
                    crate::error::cpp_double(opts.dropout_p)
                ),
            ));
        }
        if opts.is_causal && opts.attn_mask.is_some() {
            return Err(Error::arg(
                op,
                "_scaled_dot_product_attention: Explicit attn_mask should not be set when \
                 is_causal=True",
            ));
        }
        let lead_of = |sh: &[usize]| sh[..sh.len() - 2].to_vec();
        let (ql, kl, vl) = (lead_of(qs), lead_of(ks), lead_of(vs));
        let gqa = opts.enable_gqa;
        let (lead, kv_lead) = if gqa {
            let (hq, hk, hv) = (qs[qs.len() - 3], ks[ks.len() - 3], vs[vs.len() - 3]);
            // Unequal key and value heads were repeated to the query's by the caller
            // (repeat_kv_heads).
            // No heads at all (repeated to the query's 0) is an empty problem.
            let empty = hq == 0 && hk == 0;
            if hk != hv || (!empty && (hk == 0 || hq % hk != 0)) {
                return Err(Error::shape(op, gqa_heads_message(hq, hk, hv)));
            }
            let b = broadcast_shapes(op, &ql[..ql.len() - 1], &kl[..kl.len() - 1])?;
            let b = broadcast_shapes(op, &b, &vl[..vl.len() - 1])?;
            let mut lead = b.clone();
            lead.push(hq);
            let mut kv_lead = b;
            kv_lead.push(hk);
            (lead, kv_lead)
        } else {
            let b = broadcast_shapes(op, &ql, &kl)?;
            let b = broadcast_shapes(op, &b, &vl)?;
            (b.clone(), b)
        };
        // The scores come from q and k alone (v's extra batch dims join at the product with
        // v): PyTorch adds the mask to them in place, so it must fit them.
        let qk_lead = match gqa {
            true => lead.clone(),
            false => broadcast_shapes(op, &ql, &kl)?,
        };
        let full = |lead: &[usize], a: usize, b: usize| {
            let mut sh = lead.to_vec();
            sh.extend([a, b]);
            sh
        };
        let pack = |t: &Tensor, sh: Vec<usize>| -> Result<Tensor> {
            let t = t.detach();
            if t.shape() == sh.as_slice() {
                t.contiguous_at_zero()
            } else {
                t.broadcast_to(&sh)?.contiguous_at_zero()
            }
        };
        // The broadcast of three operands can reach a size none of them has (each dim of
        // the lead from another operand): bound it before any product.
        // The scores [.., L, S] are never materialised by the fused kernels (long contexts
        // past 2^32 scores run); only a mask broadcast to them is (checked in mask_view).
        crate::layout::checked_numel(op, &full(&lead, l, e))?;
        let n: usize = lead.iter().product();
        let heads = lead.last().copied().unwrap_or(1);
        let kv_heads = kv_lead.last().copied().unwrap_or(1);
        // After every argument check: PyTorch's validate_sdpa_input has no dtype rule beyond
        // agreement, and only its math kernel refuses integers, where it computes: an empty
        // output or key sequence gives an empty or zero result of the operands' dtype.
        if n != 0 && l != 0 && ev != 0 && s != 0 {
            q.require_float(op)?;
        }
        let mask = match opts.attn_mask {
            None => None,
            Some(m) => {
                let t = match m {
                    AttnMask::Bool(t) | AttnMask::Additive(t) => t,
                };
                mask_fits(op, t, &full(&qk_lead, l, s))?;
                Some(mask_view(op, q, m, &full(&lead, l, s), heads)?)
            }
        };
        let scale = opts.scale.unwrap_or(1.0 / (e as f64).sqrt());
        Ok(Problem {
            op,
            q: pack(q, full(&lead, l, e))?,
            k: pack(k, full(&kv_lead, s, e))?,
            v: pack(v, full(&kv_lead, s, ev))?,
            mask,
            shapes: [qs.to_vec(), ks.to_vec(), vs.to_vec()],
            n,
            l,
            s,
            e,
            ev,
            heads,
            kv_heads,
            lead,
            kv_lead,
            scale: scale as f32,
            causal: opts.is_causal,
            dropout_p: opts.dropout_p as f32,
            drop_scale: if opts.dropout_p < 1.0 {
                1.0f32 / ((1.0 - opts.dropout_p) as f32)
            } else {
                0.0
            },
        })
    }

    /// The output's shape `[.., L, Ev]`.
    pub fn out_shape(&self) -> Vec<usize> {
        let mut sh = self.lead.clone();
        sh.extend([self.l, self.ev]);
        sh
    }

    /// Query heads per key/value head.
    pub(crate) fn group(&self) -> usize {
        self.heads / self.kv_heads.max(1)
    }
}

/// validate_sdpa_input's mask check, after the operands' dtypes, devices and ranks and before
/// any size: an additive mask is f32 or the query's dtype (its device is checked with its
/// shape, later, as PyTorch's kernels find it).
fn check_mask(op: &'static str, q: &Tensor, opts: &SdpaOptions) -> Result<()> {
    if let Some(AttnMask::Additive(m)) = opts.attn_mask {
        if m.dtype != DType::F32 && m.dtype != q.dtype {
            let name = DType::c10_name;
            return Err(Error::arg(
                op,
                format!(
                    "Expected attn_mask dtype to be bool or float or to match query dtype, but \
                     got attn_mask.dtype: {} and  query.dtype: {} instead.",
                    name(m.dtype),
                    name(q.dtype)
                ),
            ));
        }
    }
    Ok(())
}

/// PyTorch's words for heads enable_gqa cannot group (its sentence ends at "in" in ATen),
/// after its check that the key has heads at all (no value heads: PyTorch's default CPU
/// kernel returns zeros, its math backend refuses; refused here in the grouping's words).
fn gqa_heads_message(hq: usize, hk: usize, hv: usize) -> String {
    if hk == 0 {
        return format!(
            "Number of heads in key and value must be greater than 0 (query {hq}, key {hk}, \
             value {hv})"
        );
    }
    format!(
        "Number of heads in key and value must divide the number of heads in query (query \
         {hq}, key {hk}, value {hv})"
    )
}

/// A 4-D mask of leading size 1 beside 3-D query, key and value, squeezed to 3-D: PyTorch's
/// op takes such operands' scores as `[1, B, L, S]`, so a `[1, 1 | B, L, S]` mask (one built
/// for 4-D models) applies. A view: a tracked bias keeps its 4-D gradient. `None` otherwise.
pub(crate) fn squeeze_lead_mask(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    opts: &SdpaOptions,
) -> Result<Option<Tensor>> {
    let Some(m) = opts.attn_mask.map(|m| match m {
        AttnMask::Bool(t) | AttnMask::Additive(t) => t,
    }) else {
        return Ok(None);
    };
    let three = [q, k, v].iter().all(|t| t.rank() == 3);
    if !three || m.rank() != 4 || m.shape()[0] != 1 {
        return Ok(None);
    }
    // Only where the squeezed mask fits the scores `[B, L, S]`: otherwise the refusal names
    // the mask as the caller gave it.
    let op = "scaled_dot_product_attention";
    let fits = broadcast_shapes(op, &[q.shape()[0]], &[k.shape()[0]])
        .and_then(|b| broadcast_shapes(op, &b, &[v.shape()[0]]))
        .and_then(|b| {
            let scores = [b[0], q.shape()[1], k.shape()[1]];
            broadcast_shapes(op, &m.shape()[1..], &scores).map(|s| s == scores)
        })
        .unwrap_or(false);
    if !fits {
        return Ok(None);
    }
    m.squeeze(0).map(Some)
}

/// `opts` with `mask` in place of its attention mask (of the same kind).
pub(crate) fn with_mask<'a>(opts: &SdpaOptions<'a>, mask: &'a Tensor) -> SdpaOptions<'a> {
    SdpaOptions {
        attn_mask: opts.attn_mask.map(|m| match m {
            AttnMask::Bool(_) => AttnMask::Bool(mask),
            AttnMask::Additive(_) => AttnMask::Additive(mask),
        }),
        ..*opts
    }
}

/// PyTorch's pre_process_group_query_attention_input for key and value heads that differ
/// (each dividing the query's): both repeated to the query's heads (`repeat_interleave` on dim
/// -3, by a tracked index_select), so the call runs ungrouped. `None` where nothing is to
/// repeat (no GQA, equal heads, or ranks below 3, left to [`Problem::new`]'s checks).
pub(crate) fn repeat_kv_heads(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    opts: &SdpaOptions,
) -> Result<Option<(Tensor, Tensor)>> {
    let op = "scaled_dot_product_attention";
    if !opts.enable_gqa || q.rank() < 3 || k.rank() < 3 || v.rank() < 3 {
        return Ok(None);
    }
    let head = |t: &Tensor| t.shape()[t.rank() - 3];
    let (hq, hk, hv) = (head(q), head(k), head(v));
    if hk == hv {
        return Ok(None);
    }
    // validate_sdpa_input's dtype and device checks come before the heads' (as Problem::new
    // makes them for the other calls).
    for t in [k, v] {
        q.same_device(op, t)?;
        q.same_dtype(op, t)?;
    }
    check_mask(op, q, opts)?;
    if hq == 0 && hk != 0 && hv != 0 {
        // 0 % h == 0: both repeat to no heads (an empty result), as PyTorch's.
        return Ok(Some((k.narrow(-3, 0, 0)?, v.narrow(-3, 0, 0)?)));
    }
    if hk == 0 || hv == 0 || hq % hk != 0 || hq % hv != 0 {
        return Err(Error::shape(op, gqa_heads_message(hq, hk, hv)));
    }
    let repeat = |t: &Tensor, h: usize| t.index_select(-3, &head_index(q.device(), hq, h)?);
    Ok(Some((repeat(k, hk)?, repeat(v, hv)?)))
}

/// The index that repeats `h` heads to `hq` (a multiple of it) along dim -3, each head
/// `hq / h` times in a row (PyTorch's `repeat_interleave`): query head `i` reads head
/// `i / (hq / h)`.
pub(crate) fn head_index(dev: &crate::Device, hq: usize, h: usize) -> Result<Tensor> {
    let idx: Vec<i32> = (0..hq).map(|i| (i / (hq / h)) as i32).collect();
    Tensor::from_slice(dev, &idx, &[hq])
}

/// The mask broadcasts to `scores` without growing them (PyTorch adds it in place).
fn mask_fits(op: &'static str, t: &Tensor, scores: &[usize]) -> Result<()> {
    let fits = t.rank() <= scores.len()
        && t.shape()
            .iter()
            .rev()
            .zip(scores.iter().rev())
            .all(|(&a, &b)| a == b || a == 1);
    if !fits {
        return Err(Error::shape(
            op,
            format!(
                "attn_mask of shape {:?} does not broadcast to the scores' shape {scores:?}",
                t.shape()
            ),
        ));
    }
    Ok(())
}

/// The mask as additive f32, viewed as `[.., L, S]` broadcast to the scores (to which
/// [`mask_fits`] of q and k's scores implies it broadcasts: v only adds batch dims where
/// those have 1).
fn mask_view(
    op: &'static str,
    q: &Tensor,
    m: AttnMask,
    scores: &[usize],
    heads: usize,
) -> Result<MaskView> {
    let t = match m {
        AttnMask::Bool(t) | AttnMask::Additive(t) => t,
    };
    q.same_device(op, t)?;
    let add = match m {
        AttnMask::Bool(t) => {
            let dev = t.device();
            let zero = Tensor::full(dev, &[], 0.0, DType::F32)?;
            let ninf = Tensor::full(dev, &[], f64::NEG_INFINITY, DType::F32)?;
            t.detach().where_cond(&zero, &ninf)?
        }
        // Its dtype was checked by Problem::new.
        AttnMask::Additive(t) => t.detach().to_dtype(DType::F32)?,
    };
    let b = add.broadcast_to(scores)?;
    let r = scores.len();
    let lead_b = &scores[..r - 2];
    let split = lead_b.len().saturating_sub(1);
    let try_view = |b: &Tensor| -> Option<MaskView> {
        let st = b.strides();
        let n0 = merged_stride(&lead_b[..split], &st[..split])?;
        let n1 = if lead_b.is_empty() || heads <= 1 {
            0
        } else {
            st[split]
        };
        Some(MaskView {
            t: b.clone(),
            off: b.layout.offset(),
            n0_stride: n0,
            n1_stride: n1,
            l_stride: st[r - 2],
            s_stride: st[r - 1],
        })
    };
    if let Some(v) = try_view(&b) {
        return Ok(v);
    }
    // Broadcast over some batch dims but not others: no single stride walks them; pack it.
    let packed = b.contiguous_at_zero()?;
    try_view(&packed).ok_or_else(|| Error::arg(op, "attn_mask: packed mask has no merged stride"))
}

#[cfg(test)]
mod tests {
    use super::merged_stride;

    #[test]
    fn merged_strides() {
        assert_eq!(merged_stride(&[], &[]), Some(0));
        assert_eq!(merged_stride(&[2, 3], &[3, 1]), Some(1));
        assert_eq!(merged_stride(&[2, 3], &[0, 0]), Some(0));
        assert_eq!(merged_stride(&[2, 1, 3], &[30, 99, 10]), Some(10));
        assert_eq!(merged_stride(&[2, 3], &[0, 5]), None);
        assert_eq!(merged_stride(&[2, 3], &[5, 0]), None);
        assert_eq!(merged_stride(&[1, 4], &[7, 0]), Some(0));
    }

    /// The kept weights' scale is at::dropout's (1 - p rounded to f32, the quotient in f32):
    /// 999.99994 for p = 0.999, where 1 / (1 - p) in f32 arithmetic on p rounded gives another.
    #[test]
    #[cfg(not(target_arch = "wasm32"))]
    fn drop_scale_is_at_dropouts() {
        use crate::{DType, Device, Tensor};
        let dev = Device::new().unwrap();
        let t = Tensor::zeros(&dev, &[1, 2, 4], DType::F32).unwrap();
        for (p, want) in [(0.999, 999.99994f32), (0.47, 1.8867925), (1.0, 0.0)] {
            let opts = super::SdpaOptions {
                dropout_p: p,
                ..Default::default()
            };
            let prob = super::Problem::new("sdpa", &t, &t, &t, &opts).unwrap();
            assert_eq!(prob.drop_scale, want, "p {p}");
        }
    }
}
