//! Attention cases (shaders/attention.wgsl on GPUs, shaders/attention_rows.wgsl on CPU
//! adapters): `gflops=` over the standard count, 4 B H L S E for the forward (Q K^T and P V)
//! and 10 B H L S E for the backward (FlashAttention-2's count, 2.5x the forward; the fused
//! backward recomputes the scores, which is not counted), halved for causal masks.
//!
//! - `attention_fwd` / `attention_fwd_bwd`: B 1, H 4, L = S = 256, E 64 (lavapipe-sized).
//! - `attention_composed_fwd`: the same forward as the plain composition (matmul, softmax,
//!   matmul; O(L S) memory), what the fused kernel replaces.
//! - `gpu/attention_*` (skipped on CPU adapters unless named): the B 8, H 12,
//!   L = S = 1024, E 64 forward and forward + backward in f32 and f16, a causal f16 forward, and
//!   a decode step (L = 1, S = 2048, f16), and a grouped-query decode step as Llama-3 8B takes
//!   it (B 8, 32 query heads over 8 key/value heads, L = 1, S = 4096, E 128, f16: the group
//!   tile, K/V read once per group). scripts/bench_attention_torch.py times PyTorch's
//!   flash, efficient and math backends on the same shapes (docs/BENCHMARKS.md).

use wgtensor::ops::attention::reference::scaled_dot_product_attention as composed;
use wgtensor::ops::{scaled_dot_product_attention, SdpaOptions};
use wgtensor::{DType, Device};

use super::inputs::tensor;
use super::{Case, Run};

/// (B, H, L, S, E).
type Shape = (usize, usize, usize, usize, usize);

const SMALL: Shape = (1, 4, 256, 256, 64);
const GPU: Shape = (8, 12, 1024, 1024, 64);
const DECODE: Shape = (8, 12, 1, 2048, 64);
/// The grouped-query decode step: (B, query heads, key/value heads, S, E), L = 1.
const GQA_DECODE: (usize, usize, usize, usize, usize) = (8, 32, 8, 4096, 128);

fn flops((b, h, l, s, e): Shape, backward: bool, causal: bool) -> f64 {
    let f = (b * h * l * s * e) as f64 * if backward { 14.0 } else { 4.0 };
    if causal {
        f / 2.0
    } else {
        f
    }
}

fn run(
    dev: &Device,
    (b, h, l, s, e): Shape,
    dtype: DType,
    backward: bool,
    causal: bool,
    fused: bool,
) -> wgtensor::Result<Run> {
    let q = tensor(dev, &[b, h, l, e], dtype, 1)?.requires_grad()?;
    let k = tensor(dev, &[b, h, s, e], dtype, 2)?.requires_grad()?;
    let v = tensor(dev, &[b, h, s, e], dtype, 3)?.requires_grad()?;
    let g = tensor(dev, &[b, h, l, e], dtype, 4)?;
    dev.sync()?;
    Ok(Box::new(move || {
        let opts = SdpaOptions {
            is_causal: causal,
            ..Default::default()
        };
        let out = if fused {
            scaled_dot_product_attention(&q, &k, &v, &opts)?
        } else {
            composed(&q, &k, &v, &opts)?
        };
        if backward {
            let grads = out.backward_with_grad(&g)?;
            let _ = (grads.get(&q).cloned(), grads.get(&k).cloned());
        }
        Ok(())
    }))
}

/// One grouped-query decode step (`enable_gqa`), forward only.
fn gqa_decode(dev: &Device, dtype: DType) -> wgtensor::Result<Run> {
    let (b, hq, hkv, s, e) = GQA_DECODE;
    let q = tensor(dev, &[b, hq, 1, e], dtype, 1)?;
    let k = tensor(dev, &[b, hkv, s, e], dtype, 2)?;
    let v = tensor(dev, &[b, hkv, s, e], dtype, 3)?;
    dev.sync()?;
    Ok(Box::new(move || {
        let opts = SdpaOptions {
            enable_gqa: true,
            ..Default::default()
        };
        scaled_dot_product_attention(&q, &k, &v, &opts).map(drop)
    }))
}

pub fn cases() -> Vec<Case> {
    let f32 = DType::F32;
    let f16 = DType::F16;
    vec![
        Case::new("attention_fwd", move |d| {
            run(d, SMALL, f32, false, false, true)
        })
        .flops(flops(SMALL, false, false)),
        Case::new("attention_fwd_bwd", move |d| {
            run(d, SMALL, f32, true, false, true)
        })
        .flops(flops(SMALL, true, false)),
        Case::new("attention_composed_fwd", move |d| {
            run(d, SMALL, f32, false, false, false)
        })
        .flops(flops(SMALL, false, false)),
        Case::new("gpu/attention_fwd", move |d| {
            run(d, GPU, f32, false, false, true)
        })
        .flops(flops(GPU, false, false)),
        Case::new("gpu/attention_fwd_f16", move |d| {
            run(d, GPU, f16, false, false, true)
        })
        .flops(flops(GPU, false, false))
        .f16_only(),
        Case::new("gpu/attention_fwd_bwd", move |d| {
            run(d, GPU, f32, true, false, true)
        })
        .flops(flops(GPU, true, false)),
        Case::new("gpu/attention_fwd_bwd_f16", move |d| {
            run(d, GPU, f16, true, false, true)
        })
        .flops(flops(GPU, true, false))
        .f16_only(),
        Case::new("gpu/attention_causal_f16", move |d| {
            run(d, GPU, f16, false, true, true)
        })
        .flops(flops(GPU, false, true))
        .f16_only(),
        Case::new("gpu/attention_decode_f16", move |d| {
            run(d, DECODE, f16, false, false, true)
        })
        .flops(flops(DECODE, false, false))
        .f16_only(),
        Case::new("gpu/attention_decode_gqa_f16", move |d| gqa_decode(d, f16))
            .flops({
                let (b, hq, _, s, e) = GQA_DECODE;
                flops((b, hq, 1, s, e), false, false)
            })
            .f16_only(),
    ]
}
