//! scaled_dot_product_attention conformance (the fused forward and backward kernels, through
//! autograd) against the f64 reference of tests/common/attention_ref.rs: odd lengths (L, S not
//! multiples of any tile), head dims up to 300 (several column blocks), grouped-query heads,
//! every mask kind and broadcast, causal, empty sequences; on the CPU tile plan and on the GPU
//! one (`gpu_plans_device`).
//!
//! Tolerance per element, with A = scale * E * max|q| max|k| bounding a score and T the
//! number of terms per sum (L + S + E + Ev + 16): 8 T (1 + A) EPS32 times the sum of the
//! absolute values of the element's terms (the reference's `*_mag`), since a score's rounding
//! error moves every weight of its row by that relative amount and each result is a sum of at
//! most T products; f16 multiplies it by 2^11 for the rounded storage of the output (read back
//! by the backward) and of the gradients.

use proptest::prelude::*;
#[cfg(not(target_arch = "wasm32"))]
use wgtensor::ops::attention::Plan;
use wgtensor::ops::{scaled_dot_product_attention, AttnMask, SdpaOptions};
use wgtensor::{DType, Device, Tensor};

use crate::check::{compare, fetch_async, ok, EPS32};
use crate::common::attention_ref::{attention, AttnGeom};
#[cfg(not(target_arch = "wasm32"))]
use crate::common::require_f16;
use crate::common::{device, round_to_dtype, upload};
#[cfg(not(target_arch = "wasm32"))]
use crate::strategies::run_async;
use crate::strategies::Rng;

const CASES_F32: u32 = 48;
const CASES_F16: u32 = 16;

#[derive(Clone, Copy, Debug)]
pub(crate) enum MaskKind {
    None,
    /// Bool `[L, S]` (nonzero = attend), shared by every batch and head.
    BoolShared,
    /// Bool `[B, 1, L, S]`: per batch, broadcast over heads.
    BoolPerBatch,
    /// Additive `[H, L, S]` with some `-inf`: per head, broadcast over batches (the batch and
    /// head strides cannot merge into one).
    AddPerHead,
    /// Additive `[B, H, L, S]`.
    AddFull,
}

#[derive(Clone, Debug)]
pub(crate) struct AttnProblem {
    b: usize,
    heads: usize,
    kv_heads: usize,
    l: usize,
    s: usize,
    e: usize,
    ev: usize,
    causal: bool,
    mask: MaskKind,
    scale: Option<f64>,
    gpu: bool,
    seed: u64,
    dtype: DType,
}

/// The device a case runs on: the GPU plan forced on the adapter when `gpu` (natively and in
/// the browser), else the default device.
fn plan_device(gpu: bool) -> &'static Device {
    if gpu {
        return crate::common::gpu_plans_device();
    }
    device()
}

pub(crate) fn problem(
    dtype: DType,
    lens: std::ops::RangeInclusive<usize>,
    dims: std::ops::RangeInclusive<usize>,
) -> impl Strategy<Value = AttnProblem> {
    (
        (
            1usize..=2,
            prop_oneof![
                Just((1usize, 1usize)),
                Just((2, 2)),
                Just((3, 1)),
                Just((4, 2))
            ],
        ),
        (lens.clone(), lens, dims.clone(), dims),
        (
            any::<bool>(),
            prop_oneof![
                Just(MaskKind::None),
                Just(MaskKind::BoolShared),
                Just(MaskKind::BoolPerBatch),
                Just(MaskKind::AddPerHead),
                Just(MaskKind::AddFull)
            ],
            prop_oneof![Just(None), Just(Some(0.3))],
        ),
        (any::<bool>(), any::<u64>()),
    )
        .prop_map(
            move |((b, (heads, kv_heads)), (l, s, e, ev), (causal, mask, scale), (gpu, seed))| {
                AttnProblem {
                    b,
                    heads,
                    kv_heads,
                    l,
                    s,
                    e,
                    ev,
                    causal: causal && matches!(mask, MaskKind::None),
                    mask,
                    scale,
                    gpu,
                    seed,
                    dtype,
                }
            },
        )
}

/// Host values uniform in [-1, 1), rounded to the dtype.
fn values(rng: &mut Rng, n: usize, dtype: DType) -> Vec<f64> {
    (0..n)
        .map(|_| round_to_dtype(dtype, rng.unit() * 2.0 - 1.0))
        .collect()
}

fn max_abs(v: &[f64]) -> f64 {
    v.iter()
        .filter(|x| x.is_finite())
        .fold(0.0, |a, x| a.max(x.abs()))
}

pub(crate) async fn check_attention(p: &AttnProblem) -> Result<(), TestCaseError> {
    let dev = plan_device(p.gpu);
    let what = format!("{p:?}");
    let mut rng = Rng::new(p.seed);
    let n = p.b * p.heads;
    let nk = p.b * p.kv_heads;
    let (qs, ks, vs) = (
        vec![p.b, p.heads, p.l, p.e],
        vec![p.b, p.kv_heads, p.s, p.e],
        vec![p.b, p.kv_heads, p.s, p.ev],
    );
    let qh = values(&mut rng, n * p.l * p.e, p.dtype);
    let kh = values(&mut rng, nk * p.s * p.e, p.dtype);
    let vh = values(&mut rng, nk * p.s * p.ev, p.dtype);
    let gh = values(&mut rng, n * p.l * p.ev, p.dtype);
    // The mask as given (shape, values) and broadcast to the reference's additive [n, l, s].
    let ls = p.l * p.s;
    let (mshape, mvals, bool_mask): (Vec<usize>, Vec<f64>, bool) = match p.mask {
        MaskKind::None => (vec![], vec![], false),
        MaskKind::BoolShared => (
            vec![p.l, p.s],
            (0..ls)
                .map(|_| f64::from(u8::from(rng.coin(0.8))))
                .collect(),
            true,
        ),
        MaskKind::BoolPerBatch => (
            vec![p.b, 1, p.l, p.s],
            (0..p.b * ls)
                .map(|_| f64::from(u8::from(rng.coin(0.7))))
                .collect(),
            true,
        ),
        MaskKind::AddPerHead | MaskKind::AddFull => {
            let count = if matches!(p.mask, MaskKind::AddPerHead) {
                p.heads * ls
            } else {
                n * ls
            };
            let shape = if matches!(p.mask, MaskKind::AddPerHead) {
                vec![p.heads, p.l, p.s]
            } else {
                vec![p.b, p.heads, p.l, p.s]
            };
            let v = (0..count)
                .map(|_| {
                    if rng.coin(0.1) {
                        f64::NEG_INFINITY
                    } else {
                        rng.unit() * 4.0 - 2.0
                    }
                })
                .collect();
            (shape, v, false)
        }
    };
    let full_mask: Option<Vec<f64>> = (!mshape.is_empty()).then(|| {
        let mut m = vec![0.0; n * ls];
        for bb in 0..p.b {
            for h in 0..p.heads {
                for x in 0..ls {
                    let src = match p.mask {
                        MaskKind::BoolShared => mvals[x],
                        MaskKind::BoolPerBatch => mvals[bb * ls + x],
                        MaskKind::AddPerHead => mvals[h * ls + x],
                        _ => mvals[(bb * p.heads + h) * ls + x],
                    };
                    m[(bb * p.heads + h) * ls + x] = if bool_mask {
                        if src != 0.0 {
                            0.0
                        } else {
                            f64::NEG_INFINITY
                        }
                    } else {
                        src
                    };
                }
            }
        }
        m
    });
    let scale = p.scale.unwrap_or(1.0 / (p.e as f64).sqrt());
    let g = AttnGeom {
        n,
        heads: p.heads,
        kv_heads: p.kv_heads,
        l: p.l,
        s: p.s,
        e: p.e,
        ev: p.ev,
        scale: f64::from(scale as f32),
        causal: p.causal,
    };
    let want = attention(&g, &qh, &kh, &vh, full_mask.as_deref(), None, &gh);

    let q = ok(&what, upload(dev, &qh, &qs, p.dtype).requires_grad())?;
    let k = ok(&what, upload(dev, &kh, &ks, p.dtype).requires_grad())?;
    let v = ok(&what, upload(dev, &vh, &vs, p.dtype).requires_grad())?;
    let gt = upload(
        dev,
        &gh,
        &qs[..2]
            .iter()
            .chain(&[p.l, p.ev])
            .copied()
            .collect::<Vec<_>>(),
        p.dtype,
    );
    let mt: Option<Tensor> = (!mshape.is_empty()).then(|| {
        let m32: Vec<f32> = mvals.iter().map(|&x| x as f32).collect();
        Tensor::from_slice(dev, &m32, &mshape).expect("mask upload")
    });
    let attn_mask = mt.as_ref().map(|m| {
        if bool_mask {
            AttnMask::Bool(m)
        } else {
            AttnMask::Additive(m)
        }
    });
    let opts = SdpaOptions {
        attn_mask,
        is_causal: p.causal,
        scale: p.scale,
        enable_gqa: p.heads != p.kv_heads,
        ..Default::default()
    };
    let out = ok(&what, scaled_dot_product_attention(&q, &k, &v, &opts))?;
    prop_assert_eq!(out.shape(), &[p.b, p.heads, p.l, p.ev][..]);
    let grads = ok(&what, out.backward_with_grad(&gt))?;
    let amax = scale * p.e as f64 * max_abs(&qh) * max_abs(&kh);
    let terms = (p.l + p.s + p.e + p.ev + 16) as f64;
    let rel = 8.0
        * terms
        * (1.0 + amax)
        * EPS32
        * if p.dtype == DType::F16 {
            256.0 * 8.0
        } else {
            1.0
        };
    let grad = |t: &Tensor| {
        grads
            .get(t)
            .cloned()
            .ok_or_else(|| TestCaseError::fail("missing gradient"))
    };
    for (name, t, want, mag) in [
        ("out", out.clone(), &want.out, &want.out_mag),
        ("dq", grad(&q)?, &want.dq, &want.dq_mag),
        ("dk", grad(&k)?, &want.dk, &want.dk_mag),
        ("dv", grad(&v)?, &want.dv, &want.dv_mag),
    ] {
        let got = fetch_async(name, &t, t.shape()).await?;
        compare(&format!("{what} {name}"), t.shape(), &got, want, |i| {
            rel * mag[i] + 1e-30
        })?;
    }
    Ok(())
}

#[cfg(not(target_arch = "wasm32"))]
#[test]
fn attention_f32() {
    run_async(
        CASES_F32,
        problem(DType::F32, 0..=40, 1..=72),
        check_attention,
    );
}

/// Head dims past one column block (ACC * BC columns) and past one staged chunk.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn attention_wide_heads_f32() {
    run_async(8, problem(DType::F32, 1..=20, 120..=300), check_attention);
}

/// Runs `cases` of `problems` on the GPU plan, asserting each takes a forward plan `want`
/// accepts before checking it.
#[cfg(not(target_arch = "wasm32"))]
fn check_planned(
    cases: u32,
    problems: impl Strategy<Value = AttnProblem>,
    want: fn(&wgtensor::ops::attention::ForwardPlan) -> bool,
) {
    use wgtensor::ops::attention::forward_plan;
    run_async(cases, problems, async |p| {
        let caps = plan_device(true).caps();
        let fp = forward_plan(caps, p.b * p.heads, p.l, p.s, p.ev, p.heads / p.kv_heads);
        prop_assert!(want(&fp), "{p:?}: {fp:?}");
        check_attention(p).await
    });
}

/// The forward's key splits (forced with `gpu_plans`: its parallelism is the host's threads):
/// decoding (L of 1-3 over 1-4 heads, the one-row tile) and a short prefill of one head (the
/// 16-row tile), over 256-700 keys, so 2 or more key ranges each; every mask kind, causal and
/// GQA; the backward reads the merged log-sum-exp.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn attention_key_splits_f32() {
    let problems = (
        problem(DType::F32, 1..=3, 1..=72),
        256usize..=700,
        any::<bool>(),
    )
        .prop_map(|(mut p, s, prefill)| {
            p.b = 1;
            p.gpu = true;
            p.s = s;
            if prefill {
                (p.heads, p.kv_heads) = (1, 1);
                p.l = 2 + 4 * p.l;
            }
            p
        });
    check_planned(12, problems, |fp| fp.splits > 1);
}

/// Grouped-query decoding on the GPU plan: one to four queries, 2-4 query heads per key/value
/// head, one workgroup taking the whole group's rows (each K/V tile read once per group), over
/// 1-700 keys (split into ranges from 256 on), with every mask kind, causal and gradients.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn attention_grouped_decode_f32() {
    let heads = prop_oneof![
        Just((2usize, 1usize)),
        Just((4, 2)),
        Just((3, 1)),
        Just((4, 1))
    ];
    let problems = (problem(DType::F32, 1..=4, 1..=72), heads, 1usize..=700).prop_map(
        |(mut p, (h, kv), s)| {
            (p.heads, p.kv_heads) = (h, kv);
            p.gpu = true;
            p.s = s;
            p
        },
    );
    check_planned(12, problems, |fp| fp.grouped);
}

/// The 16-row tiles over 32-90 queries on the GPU plan (prefill): several ragged row blocks,
/// head dims across the 64-value chunks, every mask kind, causal, GQA, scales, and the
/// backward from the log-sum-exp.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn attention_tiles_many_rows_f32() {
    let problems = problem(DType::F32, 32..=90, 1..=72).prop_map(|mut p| {
        p.gpu = true;
        p
    });
    check_planned(
        12,
        problems,
        |fp| matches!(fp.plan, Plan::Tiles(t) if t.br == 16),
    );
}

/// The 16-row tiles over head dims past one 256-column block and many chunks, and split over
/// the keys (one head of 17-48 queries over 256-700 keys: two or three row blocks, too few for
/// the `gpu_plans` device's slots), with every mask kind and causal.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn attention_tiles_wide_and_split_f32() {
    let wide = problem(DType::F32, 32..=70, 257..=400).prop_map(|mut p| {
        p.gpu = true;
        p
    });
    check_planned(
        5,
        wide,
        |fp| matches!(fp.plan, Plan::Tiles(t) if t.br == 16),
    );
    let split = (problem(DType::F32, 17..=48, 1..=72), 256usize..=700).prop_map(|(mut p, s)| {
        (p.b, p.heads, p.kv_heads) = (1, 1, 1);
        p.gpu = true;
        p.s = s;
        p
    });
    check_planned(6, split, |fp| {
        matches!(fp.plan, Plan::Tiles(t) if t.br == 16) && fp.splits > 1
    });
}

/// The 16-row tiles over 32-70 queries in f16.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn attention_tiles_many_rows_f16() {
    require_f16(plan_device(true));
    let problems = problem(DType::F16, 32..=70, 1..=48).prop_map(|mut p| {
        p.gpu = true;
        p
    });
    check_planned(
        4,
        problems,
        |fp| matches!(fp.plan, Plan::Tiles(t) if t.br == 16),
    );
}

/// The key splits in f16 (decoding, one to three queries over 256-700 keys).
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn attention_key_splits_f16() {
    require_f16(plan_device(true));
    let problems = (problem(DType::F16, 1..=3, 1..=48), 256usize..=700).prop_map(|(mut p, s)| {
        p.b = 1;
        p.gpu = true;
        p.s = s;
        p
    });
    check_planned(4, problems, |fp| fp.splits > 1);
}

#[cfg(not(target_arch = "wasm32"))]
#[test]
fn attention_f16() {
    require_f16(device());
    run_async(
        CASES_F16,
        problem(DType::F16, 1..=33, 1..=48),
        check_attention,
    );
}
