//! scaled_dot_product_attention beyond the conformance suite: broadcasting leading dims and
//! low ranks against the plain composition, empty and degenerate shapes as PyTorch gives them,
//! NaN rows, fully masked rows, argument errors, dropout (kept fraction, values, determinism and
//! gradients against the f64 reference with the same dropout pattern), a finite-difference
//! check, deterministic gradients, and O(L E) forward memory at L = S = 8192.
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

#[path = "common/mod.rs"]
mod common;

use common::attention_ref::{attention, AttnGeom};
use common::{device, download, upload};
use wgtensor::ops::attention::reference::scaled_dot_product_attention as composed;
use wgtensor::ops::{scaled_dot_product_attention as sdpa, AttnMask, SdpaOptions};
use wgtensor::{DType, Device, DeviceOptions, Error, Tensor};

fn randn(dev: &Device, shape: &[usize]) -> Tensor {
    wgtensor::ops::randn(dev, shape, DType::F32).unwrap()
}

fn leaf(dev: &Device, shape: &[usize]) -> Tensor {
    randn(dev, shape).requires_grad().unwrap()
}

fn vals(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

fn assert_close(what: &str, got: &Tensor, want: &Tensor, tol: f32) {
    assert_eq!(got.shape(), want.shape(), "{what}: shapes");
    let (g, w) = (vals(got), vals(want));
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let ok = (a.is_nan() && b.is_nan()) || (a - b).abs() <= tol * (1.0 + b.abs());
        assert!(ok, "{what}: element {i}: got {a}, want {b}");
    }
}

/// The fused op and the composition agree on outputs and on the gradients of q, k and v.
/// Options with `mask` and PyTorch's other defaults.
fn masked(mask: AttnMask<'_>) -> SdpaOptions<'_> {
    SdpaOptions {
        attn_mask: Some(mask),
        ..Default::default()
    }
}

fn agree(q: &Tensor, k: &Tensor, v: &Tensor, opts: &SdpaOptions) {
    let dev = q.device();
    let a = sdpa(q, k, v, opts).unwrap();
    let b = composed(q, k, v, opts).unwrap();
    assert_close("out", &a, &b, 2e-5);
    let g = randn(dev, a.shape());
    let ga = a.backward_with_grad(&g).unwrap();
    let gb = b.backward_with_grad(&g).unwrap();
    for (name, t) in [("dq", q), ("dk", k), ("dv", v)] {
        let (x, y) = (ga.get(t).unwrap(), gb.get(t).unwrap());
        assert_eq!(x.shape(), t.shape(), "{name} takes its operand's shape");
        assert_close(name, x, y, 5e-5);
    }
}

#[test]
fn broadcast_leading_dims_and_low_ranks() {
    let dev = device();
    let d = SdpaOptions::default();
    // k and v broadcast over q's batch; v has no leading dims at all.
    agree(
        &leaf(dev, &[2, 3, 7, 5]),
        &leaf(dev, &[1, 3, 9, 5]),
        &leaf(dev, &[9, 4]),
        &d,
    );
    // Rank 2 (no batch) and rank 3.
    agree(
        &leaf(dev, &[6, 8]),
        &leaf(dev, &[11, 8]),
        &leaf(dev, &[11, 3]),
        &d,
    );
    agree(
        &leaf(dev, &[3, 6, 8]),
        &leaf(dev, &[3, 11, 8]),
        &leaf(dev, &[3, 11, 3]),
        &SdpaOptions {
            is_causal: true,
            scale: Some(0.7),
            ..d
        },
    );
    // A bool mask broadcast over batches, one per head ([H, L, S]): the batch and head strides
    // do not merge, so the op packs it.
    let m = wgtensor::ops::rand(dev, &[3, 7, 9], DType::F32)
        .unwrap()
        .gt_scalar(0.3)
        .unwrap();
    agree(
        &leaf(dev, &[2, 3, 7, 5]),
        &leaf(dev, &[2, 3, 9, 5]),
        &leaf(dev, &[2, 3, 9, 6]),
        &SdpaOptions {
            attn_mask: Some(AttnMask::Bool(&m)),
            ..d
        },
    );
    // Grouped-query attention through the composition too.
    agree(
        &leaf(dev, &[1, 6, 5, 4]),
        &leaf(dev, &[1, 2, 8, 4]),
        &leaf(dev, &[1, 2, 8, 4]),
        &SdpaOptions {
            enable_gqa: true,
            ..d
        },
    );
}

/// enable_gqa with key and value heads that differ (each dividing the query's), as PyTorch's
/// pre_process_group_query_attention_input: each repeated (repeat_interleave on dim -3) to the
/// query's heads; the gradients come back summed to each operand's own heads.
#[test]
fn gqa_with_unequal_key_and_value_heads() {
    let dev = device();
    let (q, k, v) = (
        leaf(dev, &[1, 6, 4, 8]),
        leaf(dev, &[1, 2, 5, 8]),
        leaf(dev, &[1, 3, 5, 3]),
    );
    let gqa = SdpaOptions {
        enable_gqa: true,
        ..Default::default()
    };
    let a = sdpa(&q, &k, &v, &gqa).unwrap();
    assert_eq!(a.shape(), &[1, 6, 4, 3]);
    let rep = |t: &Tensor, h: usize| {
        let idx: Vec<i32> = (0..6).map(|i| (i / (6 / h)) as i32).collect();
        let idx = Tensor::from_slice(dev, &idx, &[6]).unwrap();
        t.index_select(-3, &idx).unwrap()
    };
    let b = sdpa(&q, &rep(&k, 2), &rep(&v, 3), &SdpaOptions::default()).unwrap();
    assert_close("out", &a, &b, 1e-6);
    let g = randn(dev, a.shape());
    let (ga, gb) = (
        a.backward_with_grad(&g).unwrap(),
        b.backward_with_grad(&g).unwrap(),
    );
    for (name, t) in [("dq", &q), ("dk", &k), ("dv", &v)] {
        let x = ga.get(t).unwrap();
        assert_eq!(x.shape(), t.shape(), "{name}");
        assert_close(name, x, gb.get(t).unwrap(), 1e-6);
    }
    // The composed path (a tracked mask) repeats them too.
    let m = Tensor::zeros(dev, &[4, 5], DType::F32)
        .unwrap()
        .requires_grad()
        .unwrap();
    let masked = SdpaOptions {
        attn_mask: Some(AttnMask::Additive(&m)),
        ..gqa
    };
    assert_close("composed", &sdpa(&q, &k, &v, &masked).unwrap(), &b, 2e-5);
    // No query heads: both repeat to none, an empty result (0 % h == 0, as PyTorch's).
    let o = sdpa(
        &leaf(dev, &[1, 0, 4, 8]),
        &leaf(dev, &[1, 2, 5, 8]),
        &leaf(dev, &[1, 1, 5, 3]),
        &gqa,
    )
    .unwrap();
    assert_eq!(o.shape(), &[1, 0, 4, 3]);
    // Heads that do not divide the query's are refused in PyTorch's words.
    let e = err(sdpa(&q, &k, &leaf(dev, &[1, 4, 5, 3]), &gqa));
    assert!(
        e.contains("Number of heads in key and value must divide the number of heads in"),
        "{e}"
    );
    // No key or value heads: PyTorch's check before the divisibility one.
    let q4 = leaf(dev, &[1, 4, 3, 8]);
    let e = err(sdpa(
        &q4,
        &leaf(dev, &[1, 0, 5, 8]),
        &leaf(dev, &[1, 2, 5, 8]),
        &gqa,
    ));
    assert!(
        e.contains("Number of heads in key and value must be greater than 0"),
        "{e}"
    );
}

/// 3-D query, key and value take a 4-D mask of leading size 1 (`[1, 1 | B, L, S]`, built for
/// 4-D models), as PyTorch's op, whose scores for such operands are `[1, B, L, S]`; a tracked
/// one gets its 4-D gradient. A leading size past 1 stays refused.
#[test]
fn three_d_operands_take_a_four_d_mask_of_leading_size_one() {
    let dev = device();
    let (q, k, v) = (
        leaf(dev, &[2, 3, 4]),
        leaf(dev, &[2, 5, 4]),
        leaf(dev, &[2, 5, 4]),
    );
    fn with(m: &Tensor) -> SdpaOptions<'_> {
        masked(AttnMask::Additive(m))
    }
    // [L, S] lifted to [1, 1, L, S], [B, L, S] to [1, B, L, S].
    for m in [randn(dev, &[3, 5]), randn(dev, &[2, 3, 5])] {
        let want = sdpa(&q, &k, &v, &with(&m)).unwrap();
        let lifted: Vec<usize> = [1, 1][m.rank() - 2..]
            .iter()
            .chain(m.shape())
            .copied()
            .collect();
        let m4 = m.reshape(&lifted).unwrap();
        let what = format!("{lifted:?}");
        assert_close(&what, &sdpa(&q, &k, &v, &with(&m4)).unwrap(), &want, 1e-6);
        let r = composed(&q, &k, &v, &with(&m4)).unwrap();
        assert_close(&format!("{what} reference"), &r, &want, 1e-5);
    }
    // A bool mask too.
    let keep = Tensor::from_slice(dev, &[1.0f32, 1.0, 0.0, 1.0, 0.0], &[1, 1, 1, 5]).unwrap();
    let o = sdpa(&q, &k, &v, &masked(AttnMask::Bool(&keep))).unwrap();
    assert_eq!(o.shape(), &[2, 3, 4]);
    // A tracked bias keeps its shape's gradient.
    let bias = leaf(dev, &[1, 1, 3, 5]);
    let g = sdpa(&q, &k, &v, &with(&bias))
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(g.get(&bias).unwrap().shape(), &[1, 1, 3, 5]);
    // A leading size of 2 is refused, as PyTorch's broadcast of [2, 1, L, S] against [1, B, L, S]
    // output.
    assert!(sdpa(&q, &k, &v, &with(&randn(dev, &[2, 1, 3, 5]))).is_err());
    // A misfit one is named as given.
    let e = err(sdpa(&q, &k, &v, &with(&randn(dev, &[1, 1, 4, 5]))));
    assert!(e.contains("[1, 1, 4, 5]"), "{e}");
}

#[test]
fn empty_and_degenerate_shapes() {
    let dev = device();
    let d = SdpaOptions::default();
    // No value columns and no head dim over nearly 2^32 query rows: an empty result, no row
    // statistics allocated for it.
    let (q, k, v) = (
        Tensor::zeros(dev, &[1 << 16, (1 << 16) - 1, 0], DType::F32).unwrap(),
        Tensor::zeros(dev, &[1, 1, 0], DType::F32).unwrap(),
        Tensor::zeros(dev, &[1, 1, 0], DType::F32).unwrap(),
    );
    assert_eq!(
        sdpa(&q, &k, &v, &d).unwrap().shape(),
        &[1 << 16, (1 << 16) - 1, 0]
    );
    // No keys: zeros, as PyTorch; gradients zero.
    let q = leaf(dev, &[2, 3, 4]);
    let k = leaf(dev, &[2, 0, 4]);
    let v = leaf(dev, &[2, 0, 5]);
    let o = sdpa(&q, &k, &v, &d).unwrap();
    assert_eq!(o.shape(), &[2, 3, 5]);
    assert!(vals(&o).iter().all(|&x| x == 0.0));
    let g = o.sum_all().unwrap().backward().unwrap();
    assert!(vals(g.get(&q).unwrap()).iter().all(|&x| x == 0.0));
    assert_eq!(g.get(&k).unwrap().shape(), &[2, 0, 4]);
    // No queries, no batches, no value columns.
    for (qs, ks, vs, out) in [
        (vec![2, 0, 4], vec![2, 3, 4], vec![2, 3, 5], vec![2, 0, 5]),
        (vec![0, 2, 4], vec![0, 3, 4], vec![0, 3, 5], vec![0, 2, 5]),
        (vec![2, 2, 4], vec![2, 3, 4], vec![2, 3, 0], vec![2, 2, 0]),
    ] {
        let (q, k, v) = (leaf(dev, &qs), leaf(dev, &ks), leaf(dev, &vs));
        let o = sdpa(&q, &k, &v, &d).unwrap();
        assert_eq!(o.shape(), out.as_slice());
        let g = o.sum_all().unwrap().backward().unwrap();
        assert_eq!(g.get(&k).unwrap().shape(), ks.as_slice());
    }
    // No head dim: every score is 0, the weights uniform: the mean of v (PyTorch).
    let q = randn(dev, &[3, 0]);
    let k = randn(dev, &[4, 0]);
    let v = Tensor::from_slice(dev, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &[4, 2]).unwrap();
    let o = sdpa(&q, &k, &v, &d).unwrap();
    assert_eq!(vals(&o), vec![4.0, 5.0, 4.0, 5.0, 4.0, 5.0]);
    // The same on the composed path, which a tracked additive mask takes.
    assert_eq!(
        vals(&composed(&q, &k, &v, &d).unwrap()),
        vec![4.0, 5.0, 4.0, 5.0, 4.0, 5.0]
    );
    let m = Tensor::zeros(dev, &[3, 4], DType::F32)
        .unwrap()
        .requires_grad()
        .unwrap();
    let masked = masked(AttnMask::Additive(&m));
    let o = sdpa(&q, &k, &v, &masked).unwrap();
    assert_eq!(vals(&o), vec![4.0, 5.0, 4.0, 5.0, 4.0, 5.0]);
}

#[test]
fn nan_rows_and_fully_masked_rows() {
    let dev = device();
    let mut qh = vec![0.5f32; 3 * 4];
    qh[4] = f32::NAN; // row 1
    let q = Tensor::from_slice(dev, &qh, &[3, 4]).unwrap();
    let k = randn(dev, &[5, 4]);
    let v = randn(dev, &[5, 2]);
    let o = vals(&sdpa(&q, &k, &v, &SdpaOptions::default()).unwrap());
    assert!(o[2].is_nan() && o[3].is_nan(), "{o:?}");
    assert!(o[0].is_finite() && o[5].is_finite(), "{o:?}");
    // Row 1 may attend to nothing: its output and its gradients are 0 (PyTorch's safe
    // softmax); the other rows are unaffected.
    let mut mh = vec![1.0f32; 15];
    mh[5..10].fill(0.0);
    let m = Tensor::from_slice(dev, &mh, &[3, 5]).unwrap();
    let q = leaf(dev, &[3, 4]);
    let k = leaf(dev, &[5, 4]);
    let v = leaf(dev, &[5, 2]);
    let opts = masked(AttnMask::Bool(&m));
    let o = sdpa(&q, &k, &v, &opts).unwrap();
    let ov = vals(&o);
    assert_eq!(&ov[2..4], &[0.0, 0.0]);
    let g = o.sum_all().unwrap().backward().unwrap();
    assert_eq!(&vals(g.get(&q).unwrap())[4..8], &[0.0; 4]);
    agree(&q, &k, &v, &opts);
    // The same with an additive mask of -inf.
    let add = m
        .eq_scalar(0.0)
        .unwrap()
        .mul_scalar(-1e30)
        .unwrap()
        .mul_scalar(1e30)
        .unwrap();
    let o2 = sdpa(&q, &k, &v, &masked(AttnMask::Additive(&add))).unwrap();
    assert_close("additive -inf mask", &o2, &o, 1e-6);
}

/// A value that is not finite at a masked key still reaches every row as NaN, the fully masked
/// row too (PyTorch's attn @ v multiplies it by its zero weight): on the row kernels of CPU
/// adapters, which skipped masked keys, and on the GPU tiles.
#[test]
fn masked_keys_still_multiply_their_values() {
    let gpu = Device::with_options(DeviceOptions {
        gpu_plans: true,
        ..Default::default()
    })
    .unwrap();
    for dev in [device().clone(), gpu] {
        let dev = &dev;
        for bad in [f32::INFINITY, f32::NAN] {
            let q = randn(dev, &[1, 1, 5, 4]);
            let k = randn(dev, &[1, 1, 5, 4]);
            let mut vh = vals(&randn(dev, &[1, 1, 5, 4]));
            vh[16..20].fill(bad); // key 4
            let v = Tensor::from_slice(dev, &vh, &[1, 1, 5, 4]).unwrap();
            // Key 4 masked for every query, query 0 fully masked.
            let mut mh = vec![1.0f32; 25];
            for i in 0..5 {
                mh[i * 5 + 4] = 0.0;
            }
            mh[..5].fill(0.0);
            let m = Tensor::from_slice(dev, &mh, &[5, 5]).unwrap();
            let opts = masked(AttnMask::Bool(&m));
            let o = vals(&sdpa(&q, &k, &v, &opts).unwrap());
            assert!(o.iter().all(|x| x.is_nan()), "{bad}: {o:?}");
            let r = vals(&composed(&q, &k, &v, &opts).unwrap());
            assert!(r.iter().all(|x| x.is_nan()), "reference, {bad}: {r:?}");
        }
        // Key ranges split over workgroups (few rows, many keys): a range whose keys are all
        // masked still carries its values' NaN, on a partly and on a fully masked row.
        let (q, k) = (randn(dev, &[1, 2, 2, 8]), randn(dev, &[1, 2, 1400, 8]));
        let mut vh = vals(&randn(dev, &[1, 2, 1400, 8]));
        vh[3 * 8..4 * 8].fill(f32::INFINITY); // head 0, key 3
        let v = Tensor::from_slice(dev, &vh, &[1, 2, 1400, 8]).unwrap();
        // Row 0 sees keys from 700 on, row 1 none.
        let mut mh = vec![0.0f32; 2 * 1400];
        mh[700..1400].fill(1.0);
        let m = Tensor::from_slice(dev, &mh, &[2, 1400]).unwrap();
        let opts = masked(AttnMask::Bool(&m));
        let o = vals(&sdpa(&q, &k, &v, &opts).unwrap());
        assert!(o[..16].iter().all(|x| x.is_nan()), "head 0: {:?}", &o[..16]);
        assert!(
            o[16..24].iter().all(|x| x.is_finite()),
            "head 1, row 0: {o:?}"
        );
        assert_eq!(&o[24..], &[0.0; 8], "head 1, row 1");
        // Finite values keep the fully masked row's zeros.
        let v = randn(dev, &[1, 1, 5, 4]);
        let (q, k) = (randn(dev, &[1, 1, 5, 4]), randn(dev, &[1, 1, 5, 4]));
        let mut mh = vec![1.0f32; 25];
        mh[..5].fill(0.0);
        let m = Tensor::from_slice(dev, &mh, &[5, 5]).unwrap();
        let opts = masked(AttnMask::Bool(&m));
        let o = vals(&sdpa(&q, &k, &v, &opts).unwrap());
        assert_eq!(&o[..4], &[0.0; 4]);
        assert!(o[4..].iter().all(|x| x.is_finite()));
    }
}

fn err(r: wgtensor::Result<Tensor>) -> String {
    let e = r.expect_err("must fail");
    assert!(
        matches!(
            e,
            Error::Shape { .. }
                | Error::InvalidArgument { .. }
                | Error::DType { .. }
                | Error::DeviceMismatch { .. }
        ),
        "{e:?}"
    );
    e.to_string()
}

#[test]
fn argument_errors_name_the_op_and_values() {
    let dev = device();
    let d = SdpaOptions::default();
    let (q, k, v) = (
        randn(dev, &[2, 3, 4]),
        randn(dev, &[2, 5, 4]),
        randn(dev, &[2, 5, 6]),
    );
    let e = err(sdpa(&q, &randn(dev, &[2, 5, 3]), &v, &d));
    assert!(
        e.contains("scaled_dot_product_attention") && e.contains("(4)"),
        "{e}"
    );
    let e = err(sdpa(&q, &k, &randn(dev, &[2, 6, 6]), &d));
    assert!(e.contains("value") && e.contains("(5)"), "{e}");
    let e = err(sdpa(&randn(dev, &[4]), &k, &v, &d));
    assert!(e.contains("at least 2 dims"), "{e}");
    // An integer query beside float keys is a dtype mismatch first, an all-integer 1-D call a
    // rank error (validate_sdpa_input's order); integers alone are refused after those.
    let qi = q.to_dtype(wgtensor::DType::I32).unwrap();
    let e = err(sdpa(&qi, &k, &v, &d));
    assert!(
        e.contains("F32") && e.contains("I32") && !e.contains("floating"),
        "{e}"
    );
    let i1 = Tensor::zeros(dev, &[4], wgtensor::DType::I32).unwrap();
    let e = err(sdpa(&i1, &i1, &i1, &d));
    assert!(e.contains("at least 2 dims"), "{e}");
    let (ki, vi) = (
        k.to_dtype(wgtensor::DType::I32).unwrap(),
        v.to_dtype(wgtensor::DType::I32).unwrap(),
    );
    let e = err(sdpa(&qi, &ki, &vi, &d));
    assert!(e.contains("floating"), "{e}");
    // Where PyTorch's math kernel computes nothing, integers pass: an empty output is empty,
    // an empty key sequence gives zeros, in i32.
    let zi = |s: &[usize]| Tensor::zeros(dev, s, wgtensor::DType::I32).unwrap();
    let ones = |s: &[usize]| Tensor::from_slice(dev, &vec![1i32; s.iter().product()], s).unwrap();
    for (qs, ks, vs, out) in [
        ([2, 0, 4], [2, 3, 4], [2, 3, 4], [2, 0, 4]),
        ([0, 2, 4], [0, 3, 4], [0, 3, 4], [0, 2, 4]),
        ([2, 2, 0], [2, 3, 0], [2, 3, 0], [2, 2, 0]),
        ([2, 2, 4], [2, 0, 4], [2, 0, 4], [2, 2, 4]),
    ] {
        let o = sdpa(&ones(&qs), &zi(&ks), &zi(&vs), &d).unwrap();
        assert_eq!((o.shape(), o.dtype()), (&out[..], wgtensor::DType::I32));
        assert!(o.to_vec::<i32>().unwrap().iter().all(|&x| x == 0));
    }
    // Keys but no query features: PyTorch's softmax of the (integer) scores refuses them.
    err(sdpa(
        &ones(&[2, 2, 0]),
        &zi(&[2, 3, 0]),
        &zi(&[2, 3, 4]),
        &d,
    ));
    // Only PyTorch's math kernel refuses integers: every argument check comes first.
    let drop2 = SdpaOptions {
        dropout_p: 2.0,
        ..d
    };
    let e = err(sdpa(&qi, &ki, &vi, &drop2));
    assert!(e.contains("dropout probability"), "{e}");
    let e = err(sdpa(
        &q,
        &randn(dev, &[3, 5, 4]),
        &randn(dev, &[3, 5, 6]),
        &d,
    ));
    assert!(e.contains("broadcast") || e.contains("[2]"), "{e}");
    let bad_mask = randn(dev, &[4, 5]);
    let e = err(sdpa(
        &q,
        &k,
        &v,
        &SdpaOptions {
            attn_mask: Some(AttnMask::Bool(&bad_mask)),
            ..d
        },
    ));
    assert!(e.contains("attn_mask") && e.contains("[4, 5]"), "{e}");
    let m = randn(dev, &[3, 5]);
    let e = err(sdpa(
        &q,
        &k,
        &v,
        &SdpaOptions {
            attn_mask: Some(AttnMask::Bool(&m)),
            is_causal: true,
            ..d
        },
    ));
    assert!(
        e.contains("Explicit attn_mask should not be set when is_causal=True"),
        "{e}"
    );
    for (p, shown) in [(1.5, "1.5"), (-0.1, "-0.1"), (f64::NAN, "nan")] {
        let e = err(sdpa(&q, &k, &v, &SdpaOptions { dropout_p: p, ..d }));
        let words = format!("dropout probability has to be between 0 and 1, but got {shown}");
        assert!(e.contains(&words), "{e}");
    }
    let e = err(sdpa(
        &randn(dev, &[1, 3, 2, 4]),
        &randn(dev, &[1, 2, 5, 4]),
        &randn(dev, &[1, 2, 5, 4]),
        &SdpaOptions {
            enable_gqa: true,
            ..d
        },
    ));
    assert!(
        e.contains("Number of heads in key and value must divide the number of heads in")
            && e.contains("query 3"),
        "{e}"
    );
    let ints = Tensor::from_slice(dev, &[1i32; 15], &[3, 5]).unwrap();
    let e = err(sdpa(
        &q,
        &k,
        &v,
        &SdpaOptions {
            attn_mask: Some(AttnMask::Additive(&ints)),
            ..d
        },
    ));
    assert!(
        e.contains(
            "Expected attn_mask dtype to be bool or float or to match query dtype, but got \
             attn_mask.dtype: int and  query.dtype: float instead."
        ),
        "{e}"
    );
    // validate_sdpa_input checks the mask's dtype before any size: a key of another feature
    // size, or heads enable_gqa cannot group, report the mask first.
    for (ks, gqa) in [(&[3, 5, 7][..], false), (&[1, 2, 5, 4][..], true)] {
        let qq = if gqa {
            randn(dev, &[1, 3, 3, 4])
        } else {
            q.clone()
        };
        let e = err(sdpa(
            &qq,
            &randn(dev, ks),
            &randn(dev, ks),
            &SdpaOptions {
                attn_mask: Some(AttnMask::Additive(&ints)),
                enable_gqa: gqa,
                ..d
            },
        ));
        assert!(e.contains("Expected attn_mask dtype"), "{ks:?}: {e}");
    }
    // An f16 additive mask beside an f32 query too (validate_sdpa_input).
    if dev.supports_f16() {
        let m16 = randn(dev, &[3, 5]).to_dtype(DType::F16).unwrap();
        let e = err(sdpa(
            &q,
            &k,
            &v,
            &SdpaOptions {
                attn_mask: Some(AttnMask::Additive(&m16)),
                ..d
            },
        ));
        assert!(e.contains("attn_mask.dtype: c10::Half"), "{e}");
    }
    // i32 operands are refused, an i32 bool mask is fine.
    let qi = Tensor::from_slice(dev, &[1i32; 24], &[2, 3, 4]).unwrap();
    err(sdpa(&qi, &k, &v, &d));
    let o = sdpa(
        &q,
        &k,
        &v,
        &SdpaOptions {
            attn_mask: Some(AttnMask::Bool(&ints)),
            ..d
        },
    )
    .unwrap();
    assert_close(
        "all-true i32 mask",
        &o,
        &sdpa(&q, &k, &v, &d).unwrap(),
        1e-6,
    );
    let other = Device::new().unwrap();
    err(sdpa(&q, &randn(&other, &[2, 5, 4]), &v, &d));
}

/// Dropout: with v the identity, the output is the dropped weight matrix itself.
#[test]
fn dropout_pattern_values_and_gradients() {
    // A private device: tests running beside this one draw from the shared device's generator
    // between a `manual_seed` and the call it is meant for.
    let dev = &Device::new().unwrap();
    let (l, s, e) = (24, 32, 8);
    let q = randn(dev, &[2, l, e]);
    let k = randn(dev, &[2, s, e]);
    let mut eye = vec![0.0f32; s * s];
    for j in 0..s {
        eye[j * s + j] = 1.0;
    }
    let eye = Tensor::from_slice(dev, &eye, &[s, s])
        .unwrap()
        .broadcast_to(&[2, s, s])
        .unwrap();
    let p = 0.25;
    let plain = vals(&sdpa(&q, &k, &eye, &SdpaOptions::default()).unwrap());
    let opts = SdpaOptions {
        dropout_p: p,
        ..Default::default()
    };
    dev.manual_seed(7);
    let a = vals(&sdpa(&q, &k, &eye, &opts).unwrap());
    dev.manual_seed(7);
    let b = vals(&sdpa(&q, &k, &eye, &opts).unwrap());
    assert_eq!(a, b, "the same seed gives the same pattern");
    let c = vals(&sdpa(&q, &k, &eye, &opts).unwrap());
    assert_ne!(a, c, "the next call draws a new pattern");
    let mut kept = 0;
    for (x, w) in a.iter().zip(&plain) {
        if *x != 0.0 {
            kept += 1;
            assert!(
                (x - w / (1.0 - p as f32)).abs() <= 1e-6 * (1.0 + x.abs()),
                "{x} vs {w}"
            );
        }
    }
    let frac = kept as f64 / a.len() as f64;
    assert!((frac - (1.0 - p)).abs() < 0.05, "kept {frac}");
    // Gradients with that pattern against the f64 reference.
    let drop: Vec<f64> = a
        .iter()
        .zip(&plain)
        .map(|(x, _)| if *x != 0.0 { 1.0 / (1.0 - p) } else { 0.0 })
        .collect();
    let qh: Vec<f64> = vals(&q).iter().map(|&x| f64::from(x)).collect();
    let kh: Vec<f64> = vals(&k).iter().map(|&x| f64::from(x)).collect();
    let vh: Vec<f64> = (0..2 * s * 3)
        .map(|i| ((i * 37 % 11) as f64 - 5.0) / 5.0)
        .collect();
    let gh: Vec<f64> = (0..2 * l * 3)
        .map(|i| ((i * 13 % 7) as f64 - 3.0) / 3.0)
        .collect();
    let geom = AttnGeom {
        n: 2,
        heads: 1,
        kv_heads: 1,
        l,
        s,
        e,
        ev: 3,
        scale: f64::from(1.0f32 / (e as f32).sqrt()),
        causal: false,
    };
    let want = attention(&geom, &qh, &kh, &vh, None, Some(&drop), &gh);
    let ql = q.detach().requires_grad().unwrap();
    let kl = k.detach().requires_grad().unwrap();
    let vl = upload(dev, &vh, &[2, s, 3], DType::F32)
        .requires_grad()
        .unwrap();
    dev.manual_seed(7);
    let o = sdpa(&ql, &kl, &vl, &opts).unwrap();
    let g = o
        .backward_with_grad(&upload(dev, &gh, &[2, l, 3], DType::F32))
        .unwrap();
    for (name, got, want) in [
        ("out", o.clone(), &want.out),
        ("dq", g.get(&ql).unwrap().clone(), &want.dq),
        ("dk", g.get(&kl).unwrap().clone(), &want.dk),
        ("dv", g.get(&vl).unwrap().clone(), &want.dv),
    ] {
        let got = download(&got).unwrap();
        for (i, (x, w)) in got.iter().zip(want.iter()).enumerate() {
            assert!(
                (x - w).abs() <= 1e-4 * (1.0 + w.abs()),
                "{name}[{i}]: {x} vs {w}"
            );
        }
    }
    // p = 1 drops everything.
    let o = sdpa(
        &q,
        &k,
        &eye,
        &SdpaOptions {
            dropout_p: 1.0,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(vals(&o).iter().all(|&x| x == 0.0));
}

/// Central differences of sum(out * g) in f64-accumulated f32 agree with the fused backward.
#[test]
fn finite_differences() {
    let dev = device();
    let (l, s, e, ev) = (5, 7, 4, 3);
    let m = Tensor::from_slice(dev, &[0.0f32, -1.0, 0.5, 0.0, 2.0, 0.0, -0.5], &[s]).unwrap();
    let q0: Vec<f32> = (0..l * e)
        .map(|i| ((i * 7 % 13) as f32 - 6.0) / 6.0)
        .collect();
    let k = randn(dev, &[s, e]);
    let v = randn(dev, &[s, ev]);
    let g = randn(dev, &[l, ev]);
    let opts = masked(AttnMask::Additive(&m));
    let loss = |qv: &[f32]| -> f64 {
        let q = Tensor::from_slice(dev, qv, &[l, e]).unwrap();
        let o = vals(&sdpa(&q, &k, &v, &opts).unwrap());
        o.iter()
            .zip(vals(&g))
            .map(|(a, b)| f64::from(*a) * f64::from(b))
            .sum()
    };
    let q = Tensor::from_slice(dev, &q0, &[l, e])
        .unwrap()
        .requires_grad()
        .unwrap();
    let o = sdpa(&q, &k, &v, &opts).unwrap();
    let dq = vals(o.backward_with_grad(&g).unwrap().get(&q).unwrap());
    let h = 1e-2f32;
    for i in [0, 3, 7, 12, 19] {
        let (mut up, mut dn) = (q0.clone(), q0.clone());
        up[i] += h;
        dn[i] -= h;
        let fd = (loss(&up) - loss(&dn)) / (2.0 * f64::from(h));
        assert!(
            (fd - f64::from(dq[i])).abs() <= 2e-3 * (1.0 + fd.abs()),
            "dq[{i}]: finite difference {fd}, backward {}",
            dq[i]
        );
    }
}

#[test]
fn gradients_are_deterministic() {
    let dev = device();
    let q = leaf(dev, &[2, 4, 33, 16]);
    let k = leaf(dev, &[2, 2, 45, 16]);
    let v = leaf(dev, &[2, 2, 45, 16]);
    let g = randn(dev, &[2, 4, 33, 16]);
    let opts = SdpaOptions {
        enable_gqa: true,
        ..Default::default()
    };
    let run = || {
        let o = sdpa(&q, &k, &v, &opts).unwrap();
        let gr = o.backward_with_grad(&g).unwrap();
        [&q, &k, &v].map(|t| vals(gr.get(t).unwrap()))
    };
    assert_eq!(run(), run());
}

/// The forward never materialises the L x S scores: at L = S = 8192 they would take 256 MiB,
/// four times the device's whole memory limit here.
#[test]
fn forward_memory_is_linear_in_length() {
    let dev = Device::with_options(DeviceOptions {
        memory_limit: Some(64 << 20),
        ..Default::default()
    })
    .unwrap();
    let (n, e) = (8192, 8);
    let q = randn(&dev, &[n, e]);
    let k = randn(&dev, &[n, e]);
    let v = randn(&dev, &[n, e]);
    let o = sdpa(
        &q,
        &k,
        &v,
        &SdpaOptions {
            is_causal: true,
            ..Default::default()
        },
    )
    .unwrap();
    let got = vals(&o);
    // A few rows against the f64 definition (causal: row i sees keys 0..=i).
    let (qh, kh, vh) = (vals(&q), vals(&k), vals(&v));
    let scale = 1.0 / (e as f64).sqrt();
    for i in [0usize, 1, 4097, 8191] {
        let sc: Vec<f64> = (0..=i)
            .map(|j| {
                (0..e)
                    .map(|x| f64::from(qh[i * e + x]) * f64::from(kh[j * e + x]))
                    .sum::<f64>()
                    * scale
            })
            .collect();
        let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
        let sum: f64 = w.iter().sum();
        for c in 0..e {
            let want: f64 = (0..=i).map(|j| w[j] / sum * f64::from(vh[j * e + c])).sum();
            let g = f64::from(got[i * e + c]);
            assert!(
                (g - want).abs() <= 1e-4 * (1.0 + want.abs()),
                "row {i} col {c}: {g} vs {want}"
            );
        }
    }
    // The composition needs the scores and runs out of memory under the same limit.
    assert!(matches!(
        composed(&q, &k, &v, &SdpaOptions::default()),
        Err(Error::OutOfMemory { .. })
    ));
}

/// The GPU plans draw the same dropout pattern as the CPU plan from the same seed: the decode
/// tile with key splits, the grouped-query tile (a workgroup over a whole group's rows) and
/// the 16-row tile (one and several row blocks) give the row plan's output and gradients
/// within rounding.
#[test]
fn dropout_pattern_is_the_same_on_every_plan() {
    let cpu = Device::new().unwrap();
    let gpu = Device::with_options(DeviceOptions {
        gpu_plans: true,
        cooperative_matrix: false,
        ..Default::default()
    })
    .unwrap();
    // (q shape, k / v shape, grouped-query)
    let cases: [(&[usize], &[usize], bool); 5] = [
        (&[1, 4, 2, 8], &[1, 2, 300, 8], true),
        (&[1, 2, 1, 8], &[1, 2, 700, 8], false),
        (&[1, 1, 20, 8], &[1, 1, 50, 8], false),
        (&[1, 1, 70, 8], &[1, 1, 50, 8], false),
        (&[1, 1, 20, 8], &[1, 1, 40, 8], false),
    ];
    for (qs, ks, gqa) in cases {
        let opts = SdpaOptions {
            dropout_p: 0.3,
            enable_gqa: gqa,
            ..Default::default()
        };
        // The output, then the gradients of q, k and v (the backward redraws the pattern).
        let run = |dev: &Device| {
            dev.manual_seed(5);
            let (q, k, v) = (leaf(dev, qs), leaf(dev, ks), leaf(dev, ks));
            let g = randn(dev, &[qs[0], qs[1], qs[2], ks[3]]);
            dev.manual_seed(11);
            let o = sdpa(&q, &k, &v, &opts).unwrap();
            let grads = o.backward_with_grad(&g).unwrap();
            let mut all = vals(&o);
            for t in [&q, &k, &v] {
                all.extend(vals(grads.get(t).unwrap()));
            }
            all
        };
        let (a, b) = (run(&cpu), run(&gpu));
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!(
                (x - y).abs() <= 1e-4 * (1.0 + x.abs()),
                "{qs:?} x {ks:?} [{i}]: {x} (rows) vs {y} (GPU plan)"
            );
        }
    }
}

/// A tracked additive mask (a learned bias) gets its gradient, as PyTorch's: the scores'
/// gradient summed over the dims it broadcasts along, checked by central differences; the
/// output equals the fused kernels' for the same mask untracked.
#[test]
fn tracked_additive_mask_gets_its_gradient() {
    let dev = device();
    let (b, l, s, e) = (2, 3, 4, 5);
    let q = randn(dev, &[b, l, e]);
    let k = randn(dev, &[b, s, e]);
    let v = randn(dev, &[b, s, e]);
    let g = randn(dev, &[b, l, e]);
    let m0: Vec<f32> = (0..l * s)
        .map(|i| ((i * 5 % 7) as f32 - 3.0) / 4.0)
        .collect();
    let out = |mv: &[f32], track: bool| {
        let m = Tensor::from_slice(dev, mv, &[l, s]).unwrap();
        let m = if track { m.requires_grad().unwrap() } else { m };
        let opts = masked(AttnMask::Additive(&m));
        (sdpa(&q, &k, &v, &opts).unwrap(), m)
    };
    let (fused, _) = out(&m0, false);
    let (o, m) = out(&m0, true);
    assert_close("output", &o, &fused, 1e-5);
    let dm = vals(o.backward_with_grad(&g).unwrap().get(&m).unwrap());
    let loss = |mv: &[f32]| -> f64 {
        let (o, _) = out(mv, false);
        vals(&o)
            .iter()
            .zip(vals(&g))
            .map(|(a, b)| f64::from(*a) * f64::from(b))
            .sum()
    };
    let h = 1e-2f32;
    for i in 0..l * s {
        let (mut up, mut dn) = (m0.clone(), m0.clone());
        up[i] += h;
        dn[i] -= h;
        let fd = (loss(&up) - loss(&dn)) / (2.0 * f64::from(h));
        assert!(
            (f64::from(dm[i]) - fd).abs() < 2e-3 * (1.0 + fd.abs()),
            "mask[{i}]: {} vs {fd}",
            dm[i]
        );
    }
}

/// The tracked-mask (composed) path scales before the product as PyTorch's math backend, so
/// f16 scores whose unscaled products pass 65504 stay finite; with no keys it stays recorded
/// (zero and empty gradients); and the fused kernels take problems past 2^32 scores (they
/// never hold the scores).
#[test]
fn composed_path_scaling_empty_keys_and_long_contexts() {
    let dev = device();
    if dev.supports_f16() {
        let q = Tensor::full(dev, &[1, 4, 64], 40.0, DType::F16).unwrap();
        let bias = Tensor::zeros(dev, &[4, 4], DType::F16)
            .unwrap()
            .requires_grad()
            .unwrap();
        let opts = masked(AttnMask::Additive(&bias));
        let o = sdpa(&q, &q, &q, &opts).unwrap();
        assert!(vals(&o.to_dtype(DType::F32).unwrap())
            .iter()
            .all(|&v| v == 40.0));
        // f16 computed in f32 and rounded once, as the fused kernels and PyTorch's math
        // backend: scores 1280 and 1280.5 (f16's step there is 1) weigh v as [0.3775,
        // 0.6225], and an f32 mask of -1e9 over a whole row gives its uniform average, 0.5
        // (f32 does not tell the two scores apart near -1e9; in f16 the mask was -inf, and
        // the row gave zeros).
        let h = |v: &[f32], shape: &[usize]| {
            Tensor::from_slice(dev, v, shape)
                .unwrap()
                .to_dtype(DType::F16)
                .unwrap()
        };
        let q = h(&[32.0, 32.0], &[1, 1, 2]);
        let k = h(&[20.0, 20.0, 20.0, 20.015625], &[1, 2, 2]);
        let v = h(&[0.0, 1.0], &[1, 2, 1]);
        let sep = 1.0 / (1.0 + (-0.5f32).exp());
        for (mask, want) in [([0.0f32, 0.0], sep), ([-1e9, -1e9], 0.5)] {
            let m = Tensor::from_slice(dev, &mask, &[2]).unwrap();
            let tracked = m.clone().requires_grad().unwrap();
            let run = |m: &Tensor| {
                let opts = SdpaOptions {
                    attn_mask: Some(AttnMask::Additive(m)),
                    scale: Some(1.0),
                    ..Default::default()
                };
                vals(
                    &sdpa(&q, &k, &v, &opts)
                        .unwrap()
                        .to_dtype(DType::F32)
                        .unwrap(),
                )[0]
            };
            let (fused, composed) = (run(&m), run(&tracked));
            assert!(
                (fused - want).abs() < 1e-3,
                "fused {mask:?}: {fused} vs {want}"
            );
            assert!(
                (composed - want).abs() < 1e-3,
                "composed {mask:?}: {composed} vs {want}"
            );
        }
    }
    // A negative scale keeps its sign through the split.
    let (q, k, v) = (
        randn(dev, &[3, 4]),
        randn(dev, &[5, 4]),
        randn(dev, &[5, 2]),
    );
    let m = Tensor::zeros(dev, &[3, 5], DType::F32).unwrap();
    fn neg(m: &Tensor) -> SdpaOptions<'_> {
        SdpaOptions {
            attn_mask: Some(AttnMask::Additive(m)),
            scale: Some(-0.7),
            ..Default::default()
        }
    }
    let fused = sdpa(&q, &k, &v, &neg(&m)).unwrap();
    let ml = m.clone().requires_grad().unwrap();
    assert_close(
        "negative scale",
        &sdpa(&q, &k, &v, &neg(&ml)).unwrap(),
        &fused,
        1e-5,
    );
    // No keys, tracked mask: zeros, and the backward runs.
    let (q, k, v) = (leaf(dev, &[3, 4]), leaf(dev, &[0, 4]), leaf(dev, &[0, 2]));
    let m = Tensor::zeros(dev, &[3, 0], DType::F32)
        .unwrap()
        .requires_grad()
        .unwrap();
    let opts = masked(AttnMask::Additive(&m));
    let o = sdpa(&q, &k, &v, &opts).unwrap();
    assert_eq!((o.shape(), vals(&o)), (&[3, 2][..], vec![0.0; 6]));
    let g = o.sum_all().unwrap().backward().unwrap();
    assert_eq!(vals(g.get(&q).unwrap()), vec![0.0; 12]);
    assert_eq!(g.get(&m).unwrap().shape(), &[3, 0]);
    // 65536 x 65536 scores (2^32), no value columns: nothing to compute, no error.
    let q = Tensor::zeros(dev, &[65536, 1], DType::F32).unwrap();
    let v = Tensor::zeros(dev, &[65536, 0], DType::F32).unwrap();
    let o = sdpa(&q, &q, &v, &SdpaOptions::default()).unwrap();
    assert_eq!(o.shape(), &[65536, 0]);
}

/// Sums over thousands of keys (the forward's weighted values, dQ) or queries (dK, dV) stay
/// within a few ulp of the exact value on CPU adapters: the row kernels add blocks of 64 keys,
/// then the blocks (adding 8192 constant values in turn drifted 6.5e-5). GPUs' tile kernels
/// add a tile of 16 at a time to the total, as FlashAttention's do: 512 tiles over 8192
/// queries drift about 4e-6, held to 1e-5 there.
#[test]
fn long_sums_over_keys_and_queries_stay_accurate() {
    let dev = device();
    let long = 8192;
    // By the plan (Caps::cpu), not the adapter: a CPU adapter under gpu_plans runs the tiles.
    let tol = if dev.caps().cpu { 2e-6 } else { 1e-5 };
    let near = |what: &str, got: &[f32], want: &[f64]| {
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            let err = (g as f64 - w).abs() / w.abs().max(1e-30);
            assert!(err <= tol, "{what}[{i}]: got {g}, want {w} (rel {err:.2e})");
        }
    };
    let col0 = |rows: usize, on: usize| -> Vec<f32> {
        (0..rows)
            .flat_map(|r| [if r < on { 1.0 } else { 0.0 }, 0.0, 0.0, 0.0])
            .collect()
    };
    // Forward over 8192 keys of equal score: the mean of a constant.
    let q = Tensor::zeros(dev, &[2, 4], DType::F32).unwrap();
    let k = randn(dev, &[long, 4]);
    let v = Tensor::full(dev, &[long, 3], 0.1, DType::F32).unwrap();
    let o = sdpa(&q, &k, &v, &SdpaOptions::default()).unwrap();
    near("out", &vals(&o), &[0.1f32 as f64; 6]);
    // dK and dV over 8192 queries: two keys of equal score (p = 1/2), dO = 0.1, v0 = e0 and
    // v1 = 0, so D = 0.05, dS = +-0.025 and dK = +-scale * 8192 * 0.025 in column 0.
    let q = Tensor::from_slice(dev, &col0(long, long), &[long, 4])
        .unwrap()
        .requires_grad()
        .unwrap();
    let k = Tensor::zeros(dev, &[2, 4], DType::F32)
        .unwrap()
        .requires_grad()
        .unwrap();
    let v = Tensor::from_slice(dev, &[1.0f32, 0.0, 0.0, 0.0, 0.0, 0.0], &[2, 3])
        .unwrap()
        .requires_grad()
        .unwrap();
    let o = sdpa(&q, &k, &v, &SdpaOptions::default()).unwrap();
    let dout = Tensor::full(dev, &[long, 3], 0.1, DType::F32).unwrap();
    let g = o.backward_with_grad(&dout).unwrap();
    let (d01, half) = (0.1f32 as f64, 0.5 * 0.1f32 as f64);
    let dv = half * long as f64;
    near("dv", &vals(g.get(&v).unwrap()), &[dv; 6]);
    let dk = 0.5 * 0.5 * (d01 - half) * long as f64;
    let dk_got = vals(g.get(&k).unwrap());
    near("dk", &[dk_got[0], -dk_got[4]], &[dk, dk]);
    // dQ over 8192 keys of equal score (q . k_j = 0 with q = e3): a quarter of the keys have
    // v = e0 and k = e0, so dQ[0] = scale * 2048 * (0.1 - 0.025) / 8192.
    let q = Tensor::from_slice(dev, &[0.0f32, 0.0, 0.0, 1.0], &[1, 4])
        .unwrap()
        .requires_grad()
        .unwrap();
    let k = Tensor::from_slice(dev, &col0(long, long / 4), &[long, 4]).unwrap();
    let v: Vec<f32> = (0..long)
        .flat_map(|r| [if r < long / 4 { 1.0 } else { 0.0 }, 0.0, 0.0])
        .collect();
    let v = Tensor::from_slice(dev, &v, &[long, 3]).unwrap();
    let o = sdpa(&q, &k, &v, &SdpaOptions::default()).unwrap();
    let g = o
        .backward_with_grad(&Tensor::full(dev, &[1, 3], 0.1, DType::F32).unwrap())
        .unwrap();
    let dq = 0.5 * 0.25 * (d01 - 0.25 * d01);
    near("dq", &vals(g.get(&q).unwrap())[..1], &[dq]);
}
