//! cat, stack, split, chunk and pad against host references (PyTorch's results), with strided
//! inputs, empty pieces and errors.
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

use proptest::prelude::*;
use wgtensor::ops::{cat, pad, stack, PadMode};
use wgtensor::{DType, Device, Tensor};

fn dev() -> &'static Device {
    static DEV: std::sync::OnceLock<Device> = std::sync::OnceLock::new();
    DEV.get_or_init(|| Device::new().expect("device"))
}

fn ramp(shape: &[usize], base: f32) -> (Tensor, Vec<f32>) {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|i| base + i as f32).collect();
    (Tensor::from_slice(dev(), &v, shape).unwrap(), v)
}

fn vals(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

#[test]
fn cat_and_stack() {
    let (a, av) = ramp(&[2, 3], 0.0);
    let (b, bv) = ramp(&[2, 1], 100.0);
    let c = cat(&[&a, &b], 1).unwrap();
    assert_eq!(c.shape(), &[2, 4]);
    assert_eq!(
        vals(&c),
        vec![av[0], av[1], av[2], bv[0], av[3], av[4], av[5], bv[1]]
    );
    // A transposed view, dim -2, and an empty piece.
    let e = Tensor::zeros(dev(), &[0, 2], DType::F32).unwrap();
    let t = a.transpose(0, 1).unwrap(); // [3, 2]
    let c = cat(&[&t, &e, &b.transpose(0, 1).unwrap()], -2).unwrap();
    assert_eq!(c.shape(), &[4, 2]);
    assert_eq!(vals(&c), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0, 100.0, 101.0]);
    // A legacy [0] tensor is skipped; tracked, it still gets its (empty) gradient.
    let z = Tensor::zeros(dev(), &[0], DType::F32).unwrap();
    assert_eq!(cat(&[&z, &a], 0).unwrap().shape(), &[2, 3]);
    let zl = z.clone().requires_grad().unwrap();
    let al = a.clone().requires_grad().unwrap();
    let g = cat(&[&zl, &al], 0)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(g.get(&zl).map(|t| t.shape().to_vec()), Some(vec![0]));
    // Mixed dtypes promote as PyTorch's (i32 < f16 < f32), the gradient back in each
    // input's dtype.
    let i = Tensor::from_slice(dev(), &[7i32, 8, 9], &[1, 3]).unwrap();
    let al = a.clone().requires_grad().unwrap();
    let c = cat(&[&al, &i], 0).unwrap();
    assert_eq!((c.dtype(), c.shape()), (DType::F32, &[3, 3][..]));
    assert_eq!(vals(&c)[6..], [7.0, 8.0, 9.0]);
    let g = c.sum_all().unwrap().backward().unwrap();
    assert_eq!(vals(g.get(&al).unwrap()), vec![1.0; 6]);
    if dev().supports_f16() {
        let h = a.to_dtype(DType::F16).unwrap();
        let c = cat(&[&i, &h], 0).unwrap();
        assert_eq!(c.dtype(), DType::F16);
        assert_eq!(cat(&[&h, &a], 1).unwrap().dtype(), DType::F32);
    }
    // Stack: a new dim.
    let (x, xv) = ramp(&[3], 0.0);
    let (y, yv) = ramp(&[3], 10.0);
    let s = stack(&[&x, &y], 0).unwrap();
    assert_eq!(s.shape(), &[2, 3]);
    assert_eq!(vals(&s), [xv.clone(), yv.clone()].concat());
    let s = stack(&[&x, &y], -1).unwrap();
    assert_eq!(s.shape(), &[3, 2]);
    assert_eq!(vals(&s), vec![0.0, 10.0, 1.0, 11.0, 2.0, 12.0]);
    // Errors name the op.
    for (r, op) in [
        (cat(&[&a, &x], 0), "cat"),
        (cat(&[&a, &b], 0), "cat"),
        (cat(&[], 0), "cat"),
        (cat(&[&a, &b], 2), "cat"),
        (stack(&[&x, &a], 0), "stack"),
    ] {
        let e = r.unwrap_err();
        assert!(e.to_string().starts_with(&format!("{op}:")), "{e}");
    }
}

/// On a CPU adapter packed, 4-byte aligned pieces are joined by buffer copies (no dispatch);
/// the others (f16 pieces of odd length, strided ones) by the copy kernel, in one output.
#[test]
fn packed_pieces_join_by_buffer_copies() {
    // A device of its own: the dispatch counts would see other tests' work on the shared one.
    let own = Device::new().unwrap();
    let ramp = |shape: &[usize], base: f32| {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|i| base + i as f32).collect();
        (Tensor::from_slice(&own, &v, shape).unwrap(), v)
    };
    let (a, av) = ramp(&[2, 3], 0.0);
    let (b, bv) = ramp(&[1, 3], 50.0);
    own.sync().unwrap();
    let before = own.stats().dispatches;
    let c = cat(&[&a, &b], 0).unwrap();
    if own.caps().cpu {
        assert_eq!(own.stats().dispatches, before, "two buffer copies");
    }
    assert_eq!(vals(&c), [av.clone(), bv.clone()].concat());
    // A narrowed (offset) packed source, copied in place into a narrowed destination.
    let dst = Tensor::zeros(&own, &[4, 3], DType::F32).unwrap();
    dst.narrow(0, 1, 2)
        .unwrap()
        .copy_from(&c.narrow(0, 1, 2).unwrap())
        .unwrap();
    let mut want = vec![0.0; 12];
    want[3..9].copy_from_slice(&[av[3..].to_vec(), bv.clone()].concat());
    assert_eq!(vals(&dst), want);
    if own.supports_f16() {
        // f16 [1, 3] pieces are 6 bytes: the second starts mid-word, so the kernel copies.
        let h = |t: &Tensor| t.to_dtype(DType::F16).unwrap();
        let (x, xv) = ramp(&[1, 3], 1.0);
        let (y, yv) = ramp(&[2, 3], 10.0);
        let (z, zv) = ramp(&[2, 2], 20.0);
        let c = cat(
            &[
                &h(&x),
                &h(&y),
                &h(&x),
                &h(&z)
                    .transpose(0, 1)
                    .unwrap()
                    .reshape(&[1, 4])
                    .unwrap()
                    .narrow(1, 0, 3)
                    .unwrap(),
            ],
            0,
        )
        .unwrap();
        let got = c.to_dtype(DType::F32).unwrap();
        let zt = vec![zv[0], zv[2], zv[1]];
        assert_eq!(vals(&got), [xv.clone(), yv, xv, zt].concat());
        // [1, 2] f16 pieces are 4 bytes: every one a buffer copy on a CPU adapter.
        let (p, pv) = ramp(&[3, 2], 5.0);
        let pieces = p.to_dtype(DType::F16).unwrap().split(1, 0).unwrap();
        let refs: Vec<&Tensor> = pieces.iter().rev().collect();
        own.sync().unwrap();
        let before = own.stats().dispatches;
        let c = cat(&refs, 0).unwrap();
        if own.caps().cpu {
            assert_eq!(own.stats().dispatches, before, "three buffer copies");
        }
        let got = vals(&c.to_dtype(DType::F32).unwrap());
        assert_eq!(got, [&pv[4..], &pv[2..4], &pv[..2]].concat());
    }
}

/// copy_from as PyTorch's copy_: a source that broadcasts (a row into every row), of another
/// dtype (converted), or sharing the destination's storage (read whole first).
#[test]
fn copy_from_broadcasts_converts_and_reads_overlaps_whole() {
    let dst = Tensor::zeros(dev(), &[2, 3], DType::F32).unwrap();
    let (row, rv) = ramp(&[3], 1.0);
    dst.copy_from(&row).unwrap();
    assert_eq!(vals(&dst), [rv.clone(), rv.clone()].concat());
    let i = Tensor::from_slice(dev(), &[7i32, -8], &[2, 1]).unwrap();
    dst.copy_from(&i).unwrap();
    assert_eq!(vals(&dst), vec![7.0, 7.0, 7.0, -8.0, -8.0, -8.0]);
    if dev().supports_f16() {
        let h = Tensor::zeros(dev(), &[2, 3], DType::F16).unwrap();
        h.copy_from(&row).unwrap();
        assert_eq!(
            vals(&h.to_dtype(DType::F32).unwrap()),
            [rv.clone(), rv].concat()
        );
    }
    // Dense views of one storage that share some elements are refused, as PyTorch's
    // partial-overlap check (a shifted window, the transpose, a row into the whole); the very
    // same view is a no-op.
    let (x, xv) = ramp(&[5], 0.0);
    let words = "unsupported operation: some elements of the input tensor and the written-to \
                 tensor refer to a single memory location. Please clone() the tensor before \
                 performing the operation.";
    let (m, _) = ramp(&[2, 2], 0.0);
    for (dst, src) in [
        (x.narrow(0, 1, 4).unwrap(), x.narrow(0, 0, 4).unwrap()),
        (m.clone(), m.transpose(0, 1).unwrap()),
        (m.clone(), m.select(0, 0).unwrap()),
    ] {
        let e = dst.copy_from(&src).unwrap_err().to_string();
        assert!(e.starts_with("copy_from:") && e.contains(words), "{e}");
    }
    x.copy_from(&x.clone()).unwrap();
    assert_eq!(vals(&x), xv);
    // A destination that repeats elements is found before the shapes are compared.
    let rep = Tensor::zeros(dev(), &[1], DType::F32)
        .unwrap()
        .broadcast_to(&[3])
        .unwrap();
    let e = rep
        .copy_from(&Tensor::zeros(dev(), &[2], DType::F32).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("more than one element of the written-to tensor"),
        "{e}"
    );
    // The overlap is found before the broadcast is (TensorIterator's order).
    let e = x
        .copy_from(&x.narrow(0, 1, 2).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains(words), "{e}");
    // Views whose element ranges are disjoint copy; a source that is not dense (a strided
    // column) is read whole first, as PyTorch's too-hard case.
    x.narrow(0, 0, 2)
        .unwrap()
        .copy_from(&x.narrow(0, 3, 2).unwrap())
        .unwrap();
    assert_eq!(vals(&x), [&xv[3..5], &xv[2..]].concat());
    let (s, sv) = ramp(&[3, 2], 0.0);
    s.narrow(1, 1, 1)
        .unwrap()
        .copy_from(&s.narrow(1, 0, 1).unwrap())
        .unwrap();
    assert_eq!(vals(&s), vec![sv[0], sv[0], sv[2], sv[2], sv[4], sv[4]]);
    let e = dst
        .copy_from(&Tensor::zeros(dev(), &[2, 2], DType::F32).unwrap())
        .unwrap_err();
    assert!(e.to_string().starts_with("copy_from:"), "{e}");
    let e = row.copy_from(&dst).unwrap_err();
    assert!(e.to_string().contains("does not broadcast"), "{e}");
}

/// deep_clone is PyTorch's clone: new storage (writes do not reach the copy), any layout and
/// dtype, and the gradient passes through.
#[test]
fn deep_clone_copies_storage_and_passes_gradients() {
    let (x, xv) = ramp(&[2, 3], 1.0);
    let c = x.transpose(0, 1).unwrap().deep_clone().unwrap();
    assert!(!c.shares_storage(&x) && c.is_contiguous());
    let packed = x.deep_clone().unwrap();
    assert!(!packed.shares_storage(&x));
    x.copy_from(&Tensor::zeros(dev(), &[2, 3], DType::F32).unwrap())
        .unwrap();
    assert_eq!(vals(&packed), xv);
    assert_eq!(vals(&c), vec![xv[0], xv[3], xv[1], xv[4], xv[2], xv[5]]);
    let i = Tensor::from_slice(dev(), &[3i32, -4], &[2]).unwrap();
    assert_eq!(
        i.deep_clone().unwrap().to_vec::<i32>().unwrap(),
        vec![3, -4]
    );
    let l = x.clone().requires_grad().unwrap();
    let g = l
        .deep_clone()
        .unwrap()
        .mul_scalar(3.0)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(vals(g.get(&l).unwrap()), vec![3.0; 6]);
}

#[test]
fn split_and_chunk_are_views() {
    let (a, _) = ramp(&[7, 2], 0.0);
    let parts = a.split(3, 0).unwrap();
    assert_eq!(
        parts.iter().map(|p| p.shape()[0]).collect::<Vec<_>>(),
        vec![3, 3, 1]
    );
    assert!(parts.iter().all(|p| p.shares_storage(&a)));
    assert_eq!(vals(&parts[2].contiguous().unwrap()), vec![12.0, 13.0]);
    // chunk(3) of 7 -> ceil(7/3) = 3 per chunk: 3, 3, 1; chunk(4) of 6 -> 2, 2, 2 (3 chunks).
    assert_eq!(a.chunk(3, 0).unwrap().len(), 3);
    let (b, _) = ramp(&[6], 0.0);
    assert_eq!(b.chunk(4, 0).unwrap().len(), 3);
    assert!(b.chunk(0, 0).is_err());
    // An empty dim gives `chunks` empty pieces, as PyTorch's.
    let e = Tensor::zeros(dev(), &[0, 3], DType::F32).unwrap();
    let pieces = e.chunk(3, 0).unwrap();
    assert_eq!(pieces.len(), 3);
    assert!(pieces.iter().all(|p| p.shape() == [0, 3]));
    assert!(b.split(0, 0).is_err());
}

/// Host reference of `pad` for one dim at a time.
fn pad_ref(
    v: &[f32],
    shape: &[usize],
    pads: &[usize],
    mode: PadMode,
    value: f32,
) -> (Vec<f32>, Vec<usize>) {
    let rank = shape.len();
    let mut before = vec![0; rank];
    let mut out_shape = shape.to_vec();
    for (i, pair) in pads.chunks(2).enumerate() {
        let d = rank - 1 - i;
        before[d] = pair[0];
        out_shape[d] += pair[0] + pair[1];
    }
    let n: usize = out_shape.iter().product();
    let mut out = vec![0.0; n];
    for (o, slot) in out.iter_mut().enumerate() {
        let mut rem = o;
        let mut src = 0usize;
        let mut stride = 1usize;
        let mut inside = true;
        let mut idx = vec![0i64; rank];
        for d in (0..rank).rev() {
            idx[d] = (rem % out_shape[d]) as i64 - before[d] as i64;
            rem /= out_shape[d];
        }
        for d in (0..rank).rev() {
            let len = shape[d] as i64;
            let mut s = idx[d];
            if s < 0 || s >= len {
                match mode {
                    PadMode::Reflect => {
                        s = if s < 0 { -s } else { 2 * (len - 1) - s };
                    }
                    PadMode::Replicate => s = s.clamp(0, len - 1),
                    PadMode::Circular => s = s.rem_euclid(len),
                    PadMode::Constant => inside = false,
                }
            }
            src += s.max(0) as usize * stride;
            stride *= shape[d];
        }
        *slot = if inside { v[src] } else { value };
    }
    (out, out_shape)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn pad_matches_pytorch(
        shape in proptest::collection::vec(1usize..5, 1..4),
        pads in proptest::collection::vec(0usize..4, 1..4),
        mode in prop_oneof![
            Just(PadMode::Constant),
            Just(PadMode::Reflect),
            Just(PadMode::Replicate),
            Just(PadMode::Circular),
        ],
        transposed in any::<bool>(),
    ) {
        let pairs = (pads.len()).min(shape.len());
        let pads: Vec<usize> = pads.iter().take(pairs).flat_map(|&p| [p, (p + 1) % 3]).collect();
        let (x, xv) = ramp(&shape, 1.0);
        // A transposed view padded equals the padded contiguous copy of the same view.
        let (x, xv, shape) = if transposed && shape.len() >= 2 {
            let t = x.transpose(0, -1).unwrap();
            let c = t.contiguous().unwrap();
            let v = vals(&c);
            let s = t.shape().to_vec();
            (t, v, s)
        } else {
            (x, xv, shape)
        };
        let reflect_ok = pads.chunks(2).enumerate().all(|(i, p)| {
            let len = shape[shape.len() - 1 - i];
            p[0] < len && p[1] < len
        });
        let circular_ok = pads.chunks(2).enumerate().all(|(i, p)| {
            let len = shape[shape.len() - 1 - i];
            p[0] <= len && p[1] <= len
        });
        // Only the constant mode takes a value (PyTorch refuses one elsewhere).
        let value = if mode == PadMode::Constant { -7.5 } else { 0.0 };
        if mode != PadMode::Constant {
            prop_assert!(pad(&x, &pads, mode, -7.5).is_err());
        }
        let got = pad(&x, &pads, mode, value);
        // PyTorch's non-constant modes take (C, ...) or (N, C, ...) inputs only.
        let dims = pads.len() / 2;
        let rank_ok = mode == PadMode::Constant || (dims + 1..=dims + 2).contains(&shape.len());
        if !rank_ok
            || (mode == PadMode::Reflect && !reflect_ok)
            || (mode == PadMode::Circular && !circular_ok)
        {
            let e = got.unwrap_err();
            prop_assert!(e.to_string().starts_with("pad:"), "{}", e);
            return Ok(());
        }
        let got = got.unwrap();
        let (want, want_shape) = pad_ref(&xv, &shape, &pads, mode, value as f32);
        prop_assert_eq!(got.shape(), want_shape.as_slice());
        prop_assert_eq!(vals(&got), want);
    }
}

/// Host reference of `pad` with signed pads, PyTorch's semantics: constant and circular crop
/// the input, then pad (circular wraps the cropped input), reflect and replicate index the
/// whole input; `None` where PyTorch (or, for a circular pad longer than the cropped input,
/// which PyTorch reads out of its interior, this crate) refuses.
fn pad_ref_signed(
    v: &[f32],
    shape: &[usize],
    pads: &[i64],
    mode: PadMode,
    value: f32,
) -> Option<(Vec<f32>, Vec<usize>)> {
    let rank = shape.len();
    let mut out_shape = shape.to_vec();
    let (mut left, mut crop0, mut kept) = (vec![0i64; rank], vec![0i64; rank], vec![0i64; rank]);
    let mut outs = Vec::new();
    for d in 0..rank {
        kept[d] = shape[d] as i64;
    }
    for (i, pair) in pads.chunks(2).enumerate() {
        let d = rank - 1 - i;
        let (len, l, r) = (shape[d] as i64, pair[0], pair[1]);
        let out = len + l + r;
        let crop = (-l).max(0) + (-r).max(0);
        let ok = match mode {
            PadMode::Constant => out >= 0 && crop <= len,
            PadMode::Circular => {
                l <= len && r <= len && out >= 0 && crop <= len && l.max(0).max(r) <= len - crop
            }
            PadMode::Reflect => l < len && r < len && out >= 0,
            PadMode::Replicate => out >= 0,
        };
        if !ok {
            return None;
        }
        outs.push(out);
        out_shape[d] = out as usize;
        left[d] = l;
        crop0[d] = (-l).max(0);
        kept[d] = len - crop;
    }
    // Reflection and replication refuse any padded dim under 1 (torch 2.15's pad_shape_check).
    let edge = matches!(mode, PadMode::Reflect | PadMode::Replicate);
    if edge && outs.iter().any(|&o| o < 1) {
        return None;
    }
    let n: usize = out_shape.iter().product();
    let mut out = vec![0.0; n];
    for (o, slot) in out.iter_mut().enumerate() {
        let (mut rem, mut src, mut stride, mut inside) = (o, 0usize, 1usize, true);
        let mut pos = vec![0i64; rank];
        for d in (0..rank).rev() {
            pos[d] = (rem % out_shape[d]) as i64;
            rem /= out_shape[d];
        }
        for d in (0..rank).rev() {
            let last = shape[d] as i64 - 1;
            let j = pos[d] - left[d];
            let s = match mode {
                PadMode::Constant => {
                    inside &= (0..=last).contains(&j);
                    j
                }
                PadMode::Reflect if j < 0 => -j,
                PadMode::Reflect if j > last => 2 * last - j,
                PadMode::Reflect => j,
                PadMode::Replicate => j.clamp(0, last),
                PadMode::Circular => {
                    (pos[d] - left[d].max(0)).rem_euclid(kept[d].max(1)) + crop0[d]
                }
            };
            src += s.max(0) as usize * stride;
            stride *= shape[d];
        }
        *slot = if inside { v[src] } else { value };
    }
    Some((out, out_shape))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Negative pads crop, as PyTorch's F.pad, in every mode: values and shapes against the
    /// signed reference, an error naming `pad` where that refuses, and gradients that sum
    /// back onto the input (the total of a padded ramp's gradient counts every output once).
    #[test]
    fn pad_with_negative_pads_crops_as_pytorch(
        shape in proptest::collection::vec(2usize..6, 1..4),
        pads in proptest::collection::vec(-3i64..3, 2..7),
        mode in prop_oneof![
            Just(PadMode::Constant),
            Just(PadMode::Reflect),
            Just(PadMode::Replicate),
            Just(PadMode::Circular),
        ],
    ) {
        let pairs = (pads.len() / 2).min(shape.len());
        let pads = &pads[..2 * pairs];
        let (x, xv) = ramp(&shape, 1.0);
        let x = x.requires_grad().unwrap();
        let value = if mode == PadMode::Constant { -7.5 } else { 0.0 };
        let got = pad(&x, pads, mode, value);
        let rank_ok = mode == PadMode::Constant || (pairs + 1..=pairs + 2).contains(&shape.len());
        let want = pad_ref_signed(&xv, &shape, pads, mode, value as f32).filter(|_| rank_ok);
        let Some((want, want_shape)) = want else {
            let e = got.unwrap_err();
            prop_assert!(e.to_string().starts_with("pad:"), "{}", e);
            return Ok(());
        };
        let got = got.unwrap_or_else(|e| panic!("{mode:?} {shape:?} {pads:?}: {e}"));
        prop_assert_eq!(got.shape(), want_shape.as_slice());
        prop_assert_eq!(vals(&got), want);
        let g = got.sum_all().unwrap().backward().unwrap();
        let gx = vals(g.get(&x).unwrap());
        let copied = if mode == PadMode::Constant {
            // Constant borders come from no input element.
            vals(&got).iter().filter(|&&v| v != -7.5).count()
        } else {
            got.numel()
        };
        prop_assert_eq!(gx.iter().sum::<f32>(), copied as f32);
    }
}

#[test]
fn pad_errors() {
    let (x, _) = ramp(&[2, 3], 0.0);
    for pads in [&[1usize][..], &[1, 1, 1, 1, 1, 1]] {
        let e = pad(&x, pads, PadMode::Constant, 0.0).unwrap_err();
        assert!(e.to_string().starts_with("pad:"), "{e}");
    }
    let e = pad(&x, &[3, 0], PadMode::Reflect, 0.0).unwrap_err();
    assert!(
        e.to_string()
            .contains("less than the corresponding input dimension"),
        "{e}"
    );
    // Circular padding wraps once at most: a pad of the dim's size is fine, past it an error.
    assert_eq!(
        pad(&x, &[3, 3], PadMode::Circular, 0.0).unwrap().shape(),
        &[2, 9]
    );
    let e = pad(&x, &[4, 0], PadMode::Circular, 0.0).unwrap_err();
    assert!(
        e.to_string().contains("wrapping around more than once"),
        "{e}"
    );
    // PyTorch's non-constant modes pad (C, ...) or (N, C, ...) inputs only (its _pad_enum),
    // and reflection and replication refuse empty dims but the batch.
    let only = "is not supported for";
    let (x1, _) = ramp(&[3], 0.0);
    let (x4, _) = ramp(&[2, 2, 3, 3], 0.0);
    for (t, pads) in [(&x1, &[1usize, 1][..]), (&x4, &[1, 1]), (&x, &[1, 1, 1, 1])] {
        for mode in [PadMode::Reflect, PadMode::Replicate, PadMode::Circular] {
            let e = pad(t, pads, mode, 0.0).unwrap_err().to_string();
            assert!(e.contains(only), "{mode:?} {:?} {pads:?}: {e}", t.shape());
        }
        assert!(pad(t, pads, PadMode::Constant, 0.0).is_ok());
    }
    let e = pad(
        &Tensor::zeros(dev(), &[1, 0, 3], DType::F32).unwrap(),
        &[1, 1],
        PadMode::Reflect,
        0.0,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("non-zero dimensions"), "{e}");
    // PyTorch's words, which its test_pad / test_ReflectionPad_empty / OpInfo regexes match.
    let words = |r: wgtensor::Result<Tensor>, want: &str| {
        let e = r.unwrap_err().to_string();
        assert!(e.contains(want), "{e}\nwants: {want}");
    };
    words(
        pad(
            &Tensor::zeros(dev(), &[3, 0, 10], DType::F32).unwrap(),
            &[2, 2],
            PadMode::Reflect,
            0.0,
        ),
        "Expected 2D or 3D (batch mode) tensor with possibly 0 batch size and other non-zero \
         dimensions for input, but got: [3, 0, 10]",
    );
    let (x3, _) = ramp(&[1, 1, 2], 0.0);
    words(
        pad(&x3, &[2, 1], PadMode::Reflect, 0.0),
        "Padding size should be less than the corresponding input dimension",
    );
    words(
        pad(&x, &[1], PadMode::Constant, 0.0),
        "Padding length must be divisible by 2",
    );
    words(
        pad(&x, &[1; 6], PadMode::Constant, 0.0),
        "Padding length should be less than or equal to two times the input dimension but got \
         padding length 6 and input of dimension 2",
    );
    words(
        pad(&x3, &[1, 1], PadMode::Reflect, 1.0),
        "Padding mode \"reflect\" doesn't take in value argument",
    );
    // constant_pad_nd narrows each cropped dim first: crops past the input (a negative size
    // among them) get narrow's words.
    words(
        pad(&x, &[-2, -2, 1, 0], PadMode::Constant, 0.0),
        "narrow(): length must be non-negative.",
    );
    words(
        pad(&x, &[-2, -2], PadMode::Constant, 0.0),
        "narrow(): length must be non-negative.",
    );
    words(
        pad(&x, &[-4, 5], PadMode::Constant, 0.0),
        "narrow(): length must be non-negative.",
    );
    words(
        pad(&x3, &[-2, -1], PadMode::Circular, 0.0),
        "Negative padding value is resulting in an empty dimension",
    );
    words(
        pad(&x3, &[-1, 3], PadMode::Reflect, 0.0),
        "padding (-1, 3) at dimension 2 of input [1, 1, 2]",
    );
    words(
        pad(&x3, &[-2, 0], PadMode::Replicate, 0.0),
        "input (W: 2) is too small. Calculated output W: 0",
    );
    // Two or three padded dims: each at least 1 (ATen's pad_shape_check), in its words.
    let (x4, _) = ramp(&[1, 1, 3, 4], 0.0);
    words(
        pad(&x4, &[-4, 0, 1, 0], PadMode::Reflect, 0.0),
        "Calculated output H: 4 W: 0 must be >= 1 in every dimension (input H: 3, W: 4)",
    );
    words(
        pad(&x4, &[-2, -3, 0, 0], PadMode::Replicate, 0.0),
        "Calculated output H: 3 W: -1 must be >= 1 in every dimension (input H: 3, W: 4)",
    );
    let (x5, _) = ramp(&[1, 2, 3, 4, 5], 0.0);
    words(
        pad(&x5, &[-2, -3, 0, 0, 0, 0], PadMode::Reflect, 0.0),
        "Calculated output D: 3 H: 4 W: 0 must be >= 1 in every dimension (input D: 3, H: 4, W: 5)",
    );
    assert_eq!(
        pad(&x4, &[-1, -1, -1, -1], PadMode::Replicate, 0.0)
            .unwrap()
            .shape(),
        &[1, 1, 1, 2]
    );
    // Reflection's pad of pair i is the padding function's argument 4 + 2 i.
    words(
        pad(&x4, &[0, 0, 3, 0], PadMode::Reflect, 0.0),
        "Argument #6: Padding size should be less than the corresponding input dimension, but \
         got: padding (3, 0) at dimension 2 of input [1, 1, 3, 4]",
    );
    words(
        pad(&x5, &[0, 0, 0, 0, 3, 0], PadMode::Reflect, 0.0),
        "Argument #8: Padding size",
    );
    words(
        pad(&x4, &[0, 0, -1, 3], PadMode::Reflect, 0.0),
        "Argument #6: Padding size",
    );
    // Four padded dims are no non-constant mode's, whatever the pads (PyTorch's _pad_enum).
    for pads in [[1i64; 8], [-1; 8]] {
        words(
            pad(&x5, &pads, PadMode::Replicate, 0.0),
            "Padding size 8 is not supported for 5D input tensor.",
        );
    }
    // The mode's input rules come before any pad's size, and after the value's.
    words(
        pad(&x1, &[5, 5], PadMode::Reflect, 0.0),
        "Padding size 2 is not supported for 1D input tensor.\nSupported combinations for \
         non-constant padding:\n  - 2D or 3D input: padding size = 2 (pads last dimension)",
    );
    words(
        pad(&x1, &[5, 5], PadMode::Reflect, 1.0),
        "doesn't take in value argument",
    );
    words(
        pad(
            &Tensor::zeros(dev(), &[1, 0, 3], DType::F32).unwrap(),
            &[-5, 0],
            PadMode::Replicate,
            0.0,
        ),
        "non-zero dimensions",
    );
    // Negating i64::MIN saturates (a crop past any dim), never overflows.
    words(
        pad(&x, &[i64::MIN, 0], PadMode::Constant, 0.0),
        "narrow(): length must be non-negative.",
    );
    // A crop to nothing is an empty tensor (constant), and any crop is a new tensor.
    assert_eq!(
        pad(&x, &[-1, -2], PadMode::Constant, 0.0).unwrap().shape(),
        &[2, 0]
    );
    let c = pad(&x, &[0, -1], PadMode::Constant, 0.0).unwrap();
    assert_eq!(vals(&c), [0.0, 1.0, 3.0, 4.0]);
    assert!(c.is_contiguous());
    let empty_batch = Tensor::zeros(dev(), &[0, 2, 3], DType::F32).unwrap();
    let y = pad(&empty_batch, &[1, 1], PadMode::Reflect, 0.0).unwrap();
    assert_eq!(y.shape(), &[0, 2, 5]);
    // The constant is PyTorch's checked fill: exact for i32 past 2^24 (the kernel's f32
    // would round it), an error where the dtype cannot hold it.
    let xi = Tensor::from_slice(dev(), &[1i32, 2, 3, 4], &[2, 2]).unwrap();
    let yi = pad(&xi, &[1, 0, 0, 1], PadMode::Constant, 16_777_217.0).unwrap();
    let f = 16_777_217;
    assert_eq!(yi.to_vec::<i32>().unwrap(), vec![f, 1, 2, f, 3, 4, f, f, f]);
    for (t, v) in [(&xi, 3e9), (&x, 1e300)] {
        let e = pad(t, &[1, 1], PadMode::Constant, v)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("pad:") && e.contains("without overflow"),
            "{e}"
        );
    }
    if dev().supports_f16() {
        let h = x.to_dtype(DType::F16).unwrap();
        assert!(pad(&h, &[1, 1], PadMode::Constant, 1e5).is_err());
        assert!(pad(&h, &[1, 1], PadMode::Constant, f64::NEG_INFINITY).is_ok());
    }
    // A padded dim past the kernel's i32 coordinates, or one that overflows, is refused; a
    // pad past 2^24 that stays below it works (PyTorch pads it).
    for pads in [[0, 1usize << 31], [usize::MAX, 1]] {
        let e = pad(&x, &pads, PadMode::Constant, 0.0).unwrap_err();
        assert!(e.to_string().contains("longer than 2^31 - 1"), "{e}");
    }
    let (row, _) = ramp(&[1], 5.0);
    let long = pad(&row, &[0, (1 << 24) + 1], PadMode::Constant, -1.0).unwrap();
    assert_eq!(long.shape(), &[(1 << 24) + 2]);
    assert_eq!(vals(&long.narrow(0, 0, 2).unwrap()), vec![5.0, -1.0]);
    assert_eq!(vals(&long.narrow(0, 1 << 24, 2).unwrap()), vec![-1.0, -1.0]);
    let src = Tensor::zeros(x.device(), &[(1 << 24) + 2], DType::F32)
        .unwrap()
        .requires_grad()
        .unwrap();
    // scatter_add's source gradient pads the gathered part with zeros, past 2^24 here.
    let idx = Tensor::from_slice(x.device(), &[0i32], &[1]).unwrap();
    let dst = Tensor::zeros(x.device(), &[1], DType::F32).unwrap();
    let g = dst
        .scatter_add(0, &idx, &src)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let gs = g.get(&src).unwrap();
    assert_eq!(gs.shape(), &[(1 << 24) + 2]);
    assert_eq!(gs.sum_all().unwrap().item().unwrap(), 1.0);
}

/// narrow's start counts from the end when negative, as PyTorch's, and accepts any integer
/// type; out-of-range starts are errors naming the values.
#[test]
fn narrow_with_negative_and_typed_starts() {
    let (x, _) = ramp(&[2, 5], 0.0);
    let tail = x.narrow(1, -2, 2).unwrap();
    assert_eq!(vals(&tail), vec![3.0, 4.0, 8.0, 9.0]);
    assert_eq!(
        vals(&x.narrow(-1, 1usize, 2).unwrap()),
        vec![1.0, 2.0, 6.0, 7.0]
    );
    assert_eq!(
        vals(&x.narrow(0, 1i64, 1).unwrap()),
        vec![5.0, 6.0, 7.0, 8.0, 9.0]
    );
    assert_eq!(x.narrow(1, -5, 0).unwrap().shape(), &[2, 0]);
    let e = x.narrow(1, -6, 1).unwrap_err().to_string();
    assert!(e.starts_with("narrow:") && e.contains("-6"), "{e}");
    assert!(x.narrow(1, -1, 2).is_err());
    // Its gradient lands in the narrowed columns.
    let xr = x.clone().requires_grad().unwrap();
    let g = xr
        .narrow(1, -2, 2)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(
        vals(g.get(&xr).unwrap()),
        vec![0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    );
}

/// PyTorch's `select`: `x[:, i]` as a view without the dim, negative indices, its gradient,
/// and its errors in PyTorch's words.
#[test]
fn select_takes_one_index_as_a_view() {
    let (x, _) = ramp(&[2, 3, 2], 0.0);
    let s = x.select(1, -1).unwrap(); // x[:, -1]
    assert_eq!(s.shape(), &[2, 2]);
    assert_eq!(vals(&s), vec![4.0, 5.0, 10.0, 11.0]);
    assert_eq!(s.strides(), &[6, 1]);
    assert_eq!(
        vals(&x.select(-1, 1u32).unwrap()),
        vec![1.0, 3.0, 5.0, 7.0, 9.0, 11.0]
    );
    let row = Tensor::from_slice(dev(), &[7.0f32, 8.0], &[2]).unwrap();
    let e = row.select(0, 1i64).unwrap();
    assert_eq!((e.shape(), vals(&e)), (&[][..], vec![8.0]));
    // Writes through the view reach the base.
    let base = Tensor::zeros(dev(), &[2, 2], DType::F32).unwrap();
    wgtensor::no_grad(|| base.select(1, 0).unwrap().copy_from(&row)).unwrap();
    assert_eq!(vals(&base), vec![7.0, 0.0, 8.0, 0.0]);
    // The gradient lands in the selected slice.
    let xr = x.clone().requires_grad().unwrap();
    let g = xr
        .select(1, 1)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(
        vals(g.get(&xr).unwrap()),
        vec![0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    );
    let msg = |r: wgtensor::Result<Tensor>| r.unwrap_err().to_string();
    assert!(msg(x.select(1, 3))
        .contains("select(): index 3 out of range for tensor of size [2, 3, 2] at dimension 1"));
    assert!(msg(x.select(-2, -4)).contains("index -4 out of range"));
    assert!(msg(x.select(3, 0)).contains("Dimension out of range"));
    let scalar = Tensor::from_slice(dev(), &[1.0f32], &[]).unwrap();
    assert!(msg(scalar.select(0, 0)).contains("select() cannot be applied to a 0-dim tensor."));
    let empty = Tensor::zeros(dev(), &[2, 0], DType::F32).unwrap();
    assert!(msg(empty.select(1, 0)).contains("out of range"));
    assert_eq!(empty.select(0, 1).unwrap().shape(), &[0]);
}

/// PyTorch's conveniences: `reshape_infer` with one `-1`, `squeeze`, `flatten`, `item`, and a
/// client's own error with layer context.
#[test]
fn reshape_infers_one_dim_and_views_squeeze_flatten_item() {
    let (x, v) = ramp(&[2, 3, 4], 0.0);
    assert_eq!(x.reshape_infer(&[-1, 4]).unwrap().shape(), &[6, 4]);
    assert_eq!(x.reshape_infer(&[2, -1]).unwrap().shape(), &[2, 12]);
    assert_eq!(vals(&x.reshape_infer(&[24]).unwrap()), v);
    for bad in [&[-1, -1][..], &[-2, 12], &[5, -1], &[0, -1]] {
        let e = x.reshape_infer(bad).unwrap_err();
        assert!(e.to_string().starts_with("reshape:"), "{e}");
    }
    // An empty tensor: -1 next to nonzero sizes is inferred as 0.
    let (z, _) = ramp(&[0, 3], 0.0);
    assert_eq!(z.reshape_infer(&[-1, 3]).unwrap().shape(), &[0, 3]);

    let (y, _) = ramp(&[1, 3, 1], 0.0);
    assert_eq!(y.squeeze(0).unwrap().shape(), &[3, 1]);
    assert_eq!(y.squeeze(-1).unwrap().shape(), &[1, 3]);
    assert_eq!(
        y.squeeze(1).unwrap().shape(),
        &[1, 3, 1],
        "size 3: unchanged"
    );
    assert_eq!(y.squeeze_all().unwrap().shape(), &[3]);
    assert!(y.squeeze(3).is_err());
    // A strided view squeezes without a copy.
    let t = x.narrow(1, 1, 1).unwrap();
    let s = t.squeeze(1).unwrap();
    assert!(s.shares_storage(&x));
    assert_eq!(vals(&s), vec![4.0, 5.0, 6.0, 7.0, 16.0, 17.0, 18.0, 19.0]);

    assert_eq!(x.flatten(1, -1).unwrap().shape(), &[2, 12]);
    assert_eq!(x.flatten(0, 1).unwrap().shape(), &[6, 4]);
    assert!(x.flatten(2, 1).is_err());
    // A scalar flattens to [1] over dims 0 / -1 only; nn::Flatten needs a dim 1.
    let sc = Tensor::from_slice(dev(), &[3.0f32], &[]).unwrap();
    assert_eq!(sc.flatten(0, -1).unwrap().shape(), &[1]);
    assert!(sc
        .flatten(1, 2)
        .unwrap_err()
        .to_string()
        .starts_with("flatten"));
    use wgtensor::nn::Forward;
    let e = wgtensor::nn::Flatten.forward(&Tensor::zeros(dev(), &[5], DType::F32).unwrap());
    // PyTorch's Flatten is flatten(1, -1): its dim-range error.
    let e = e.unwrap_err().to_string();
    assert!(
        e.contains("Dimension out of range (expected to be in range of [-1, 0], but got 1)"),
        "{e}"
    );

    let m = x.mean_dims(&[0, 1, 2], false).unwrap();
    assert_eq!(m.item().unwrap(), 11.5);
    let i = Tensor::from_slice(dev(), &[7i32], &[1, 1]).unwrap();
    assert_eq!(i.item().unwrap(), 7.0);
    let e = x.item().unwrap_err();
    assert!(e.to_string().contains("24 elements"), "{e}");

    // Gradients flow through the new views.
    let w = ramp(&[2, 1, 3], 1.0).0.requires_grad().unwrap();
    let g = w
        .squeeze(1)
        .unwrap()
        .reshape_infer(&[-1])
        .unwrap()
        .sum_all()
        .unwrap();
    let g = g.backward().unwrap();
    assert_eq!(vals(g.get(&w).unwrap()), vec![1.0; 6]);
}

#[test]
fn client_errors_and_layer_context() {
    use wgtensor::Error;
    let e = Error::msg("my_model", "expected 3 channels");
    assert_eq!(e.to_string(), "my_model: expected 3 channels");
    let inner = Tensor::zeros(dev(), &[2, 3], DType::F32)
        .unwrap()
        .matmul(&Tensor::zeros(dev(), &[4, 5], DType::F32).unwrap())
        .unwrap_err();
    let e = inner
        .clone()
        .in_layer("1", "Linear")
        .in_layer("classifier", "Sequential");
    assert!(e.to_string().starts_with("classifier.1 (Linear): "), "{e}");
    assert_eq!(e.root(), &inner);
}

/// Reflect, replicate and circular padding are differentiable: the gradient sums every output
/// position's gradient into the input position it copied (PyTorch's backward).
#[test]
fn reflect_and_replicate_pad_gradients() {
    fn src(mode: PadMode, o: usize, left: usize, len: usize) -> usize {
        let j = o as i64 - left as i64;
        let last = len as i64 - 1;
        (match mode {
            PadMode::Reflect if j < 0 => -j,
            PadMode::Reflect if j > last => 2 * last - j,
            PadMode::Circular => j.rem_euclid(len as i64),
            _ => j.clamp(0, last),
        }) as usize
    }
    for mode in [PadMode::Reflect, PadMode::Replicate, PadMode::Circular] {
        let (h, w) = (4usize, 5usize);
        let (l, r, t, b) = (2usize, 1usize, 1usize, 3usize.min(h - 1));
        let x = ramp(&[2, h, w], 0.0).0.requires_grad().unwrap();
        let y = pad(&x, &[l, r, t, b], mode, 0.0).unwrap();
        let (oh, ow) = (h + t + b, w + l + r);
        assert_eq!(y.shape(), &[2, oh, ow]);
        let wv: Vec<f32> = (0..2 * oh * ow)
            .map(|i| ((i * 7) % 5) as f32 - 2.0)
            .collect();
        let wt = Tensor::from_slice(dev(), &wv, &[2, oh, ow]).unwrap();
        let g = y.mul(&wt).unwrap().sum_all().unwrap().backward().unwrap();
        let mut want = vec![0.0f32; 2 * h * w];
        for n in 0..2 {
            for oy in 0..oh {
                for ox in 0..ow {
                    let (iy, ix) = (src(mode, oy, t, h), src(mode, ox, l, w));
                    want[(n * h + iy) * w + ix] += wv[(n * oh + oy) * ow + ox];
                }
            }
        }
        assert_eq!(vals(g.get(&x).unwrap()), want, "{mode:?}");
    }
}

/// A rank-0 tensor takes dim 0 or -1 as PyTorch's scalars do: transpose and squeeze give it
/// back, unsqueeze makes it `[1]`, and other dims are errors naming the op.
#[test]
fn rank0_views() {
    let s = Tensor::from_slice(dev(), &[4.5f32], &[]).unwrap();
    for (a, b) in [(0, 0), (0, -1), (-1, -1)] {
        let t = s.transpose(a, b).unwrap();
        assert_eq!((t.shape(), vals(&t)), (&[][..], vec![4.5]));
    }
    for d in [0, -1] {
        assert_eq!(s.squeeze(d).unwrap().shape(), &[] as &[usize]);
    }
    assert_eq!(s.unsqueeze(0).unwrap().shape(), &[1]);
    let e = s.transpose(0, 1).unwrap_err().to_string();
    assert!(e.starts_with("transpose:"), "{e}");
    assert!(s.squeeze(1).is_err());
    // The gradient of a transposed scalar is the scalar's.
    let sr = s.clone().requires_grad().unwrap();
    let g = sr
        .transpose(0, -1)
        .unwrap()
        .mul_scalar(2.0)
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(vals(g.get(&sr).unwrap()), vec![2.0]);
}

/// View ops that change nothing still return a new view (its own node, as PyTorch's): not the
/// leaf itself, so `set_requires_grad` on it is refused instead of freezing the leaf, and it
/// has no gradient of its own.
#[test]
fn no_op_views_are_new_views() {
    let x = Tensor::zeros(dev(), &[2, 3], DType::F32)
        .unwrap()
        .requires_grad()
        .unwrap();
    let e = Tensor::zeros(dev(), &[0], DType::F32)
        .unwrap()
        .requires_grad()
        .unwrap();
    let views = [
        x.squeeze(0).unwrap(),
        x.squeeze_all().unwrap(),
        Tensor::zeros(dev(), &[], DType::F32)
            .unwrap()
            .requires_grad()
            .unwrap()
            .squeeze(0)
            .unwrap(),
        e.split(0, 0).unwrap().remove(0),
        cat(&[&e, &e], 0).unwrap(),
    ];
    for (i, mut v) in views.into_iter().enumerate() {
        assert!(!v.is_leaf(), "view {i} is the leaf itself");
        assert!(v.set_requires_grad(false).is_err(), "view {i}");
    }
    assert!(
        x.is_tracked() && e.is_tracked(),
        "the leaves stay trainable"
    );
    // Each legacy empty input of a cat gets its (empty) gradient, as PyTorch's.
    let e2 = Tensor::zeros(dev(), &[0], DType::F32)
        .unwrap()
        .requires_grad()
        .unwrap();
    let g = cat(&[&e, &e2], 0)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(g.get(&e2).expect("e2's gradient").shape(), &[0]);
    assert_eq!(g.get(&e).expect("e's gradient").shape(), &[0]);
    let y = x.squeeze(0).unwrap();
    let g = y.sum_all().unwrap().backward().unwrap();
    assert!(g.get(&y).is_none());
    assert_eq!(vals(g.get(&x).unwrap()), vec![1.0; 6]);
}

/// PyTorch's strides for new empty and one-element tensors (a size-0 dim counts as 1), the
/// errors of split and chunk with their values, and cat's error naming the caller's positions.
#[test]
fn strides_and_split_errors() {
    // An empty tensor with a long dim: a bounded number of pieces, not memory exhausted.
    let long = Tensor::zeros(dev(), &[4_000_000_000, 0], DType::F32).unwrap();
    assert!(long.split(1, 0).unwrap_err().to_string().contains("pieces"));
    assert!(long.chunk(usize::MAX, 0).is_err());
    assert_eq!(long.split(1 << 31, 0).unwrap().len(), 2);
    let z = Tensor::zeros(dev(), &[2, 0, 3], DType::F32).unwrap();
    assert_eq!(z.strides(), &[3, 3, 1]);
    assert_eq!(
        Tensor::ones(dev(), &[1, 1], DType::F32).unwrap().strides(),
        &[1, 1]
    );
    assert_eq!(
        Tensor::full(dev(), &[0, 3], 2.0, DType::F32)
            .unwrap()
            .strides(),
        &[3, 1]
    );
    let one = Tensor::ones(dev(), &[1, 1, 1], DType::F32).unwrap();
    assert_eq!(vals(&one.add_scalar(1.0).unwrap()), vec![2.0]);
    let e = Tensor::zeros(dev(), &[5], DType::F32)
        .unwrap()
        .split(0, 0)
        .unwrap_err();
    assert!(e.to_string().contains("dimension size of 5"), "{e}");
    let empty = Tensor::zeros(dev(), &[0], DType::F32).unwrap();
    assert_eq!(empty.chunk(3, 0).unwrap().len(), 3);
    assert!(empty.chunk(usize::MAX, 0).is_err());
    let (a, _) = ramp(&[2, 3], 0.0);
    let (b, _) = ramp(&[2, 4], 0.0);
    let e = cat(&[&empty, &a, &b], 0).unwrap_err().to_string();
    assert!(
        e.contains("tensor 1 has shape [2, 3], tensor 2 has shape [2, 4]"),
        "{e}"
    );
    // PyTorch's wording for ranks that differ (its error_inputs_cat matches on it).
    let c = Tensor::zeros(dev(), &[5, 0, 9, 10], DType::F32).unwrap();
    let d = Tensor::zeros(dev(), &[4, 0], DType::F32).unwrap();
    let e = cat(&[&d, &c], 1).unwrap_err().to_string();
    assert!(
        e.contains("Tensors must have same number of dimensions: got 2 and 4"),
        "{e}"
    );
}

/// reshape and flatten return views wherever strides describe the result, as PyTorch's
/// (test_view_ops' test_reshape and test_flatten_view); where none do they copy; broadcasting
/// gives a new leading dim of size 1 the stride unsqueeze would (test_expand).
#[test]
fn reshape_views_strided_data_where_pytorch_does() {
    let (x, xv) = ramp(&[4, 4, 4], 0.0);
    // x[:, 0, :]: [4, 4] with strides [16, 1].
    let y = x.narrow(1, 0, 1).unwrap().squeeze(1).unwrap();
    let r = y.reshape(&[2, 2, 4]).unwrap();
    assert!(r.shares_storage(&y));
    let want: Vec<f32> = (0..4)
        .flat_map(|i| xv[16 * i..16 * i + 4].to_vec())
        .collect();
    assert_eq!(vals(&r), want);
    assert_eq!(
        vals(&y.reshape(&[16]).unwrap()),
        want,
        "a copy where no view fits"
    );
    assert!(!y.reshape(&[16]).unwrap().shares_storage(&y));
    let (t, tv) = ramp(&[1, 2, 3, 4], 0.0);
    let t = t.transpose(2, 3).unwrap();
    let v = t.flatten(0, 1).unwrap();
    assert!(v.shares_storage(&t));
    assert_eq!(v.shape(), [2, 4, 3]);
    let want: Vec<f32> = (0..2)
        .flat_map(|b| (0..4).flat_map(move |j| (0..3).map(move |i| (b, i, j))))
        .map(|(b, i, j)| tv[b * 12 + i * 4 + j])
        .collect();
    assert_eq!(vals(&v), want);
    wgtensor::no_grad(|| {
        v.copy_from(&Tensor::ones(dev(), v.shape(), DType::F32).unwrap())
            .unwrap()
    });
    assert_eq!(
        vals(&t),
        vec![1.0; 24],
        "a write through the view reaches the base"
    );
    // Merging dims that are not contiguous together copies: the transposed 2-D plane.
    let (p, pv) = ramp(&[3, 4], 0.0);
    let pt = p.transpose(0, 1).unwrap();
    let flat = pt.reshape(&[12]).unwrap();
    assert!(!flat.shares_storage(&pt));
    let want: Vec<f32> = (0..4)
        .flat_map(|j| (0..3).map(move |i| i * 4 + j))
        .map(|k| pv[k])
        .collect();
    assert_eq!(vals(&flat), want);
    let s = Tensor::zeros(dev(), &[5], DType::F32).unwrap();
    let e = s.broadcast_to(&[1, 1, 5]).unwrap();
    assert_eq!(
        e.strides(),
        s.unsqueeze(0).unwrap().unsqueeze(1).unwrap().strides()
    );
    assert_eq!(s.broadcast_to(&[2, 1, 5]).unwrap().strides(), [0, 5, 1]);
}

/// Four of PyTorch's view rules: `contiguous` returns a contiguous view at an offset as is
/// (sharing storage, so a write through it reaches the base); `broadcast_to` names the last
/// mismatching dim (inferExpandGeometry walks from the end) and expands a 0-d tensor with zero
/// strides; an empty broadcast view can be written (it repeats no element); and a reshape to a
/// count too large for any tensor gets the "invalid for input of size" sentence.
#[test]
fn contiguous_views_broadcast_errors_and_empty_writes_follow_pytorch() {
    let (x, _) = ramp(&[4, 3], 0.0);
    let rows = x.narrow(0, 1, 2).unwrap();
    let c = rows.contiguous().unwrap();
    assert!(c.shares_storage(&x) && c.layout().offset() == 3);
    c.copy_from(&Tensor::zeros(dev(), &[2, 3], DType::F32).unwrap())
        .unwrap();
    assert_eq!(
        vals(&x),
        [0.0, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 9.0, 10.0, 11.0]
    );
    // A strided view is still copied, to offset 0.
    let t = x.transpose(0, 1).unwrap().contiguous().unwrap();
    assert!(!t.shares_storage(&x) && t.layout().offset() == 0);

    let (a, _) = ramp(&[2, 3], 0.0);
    let e = a.broadcast_to(&[3, 4]).unwrap_err().to_string();
    assert!(
        e.contains(
            "The expanded size of the tensor (4) must match the existing size (3) at \
             non-singleton dimension 1.  Target sizes: [3, 4].  Tensor sizes: [2, 3]"
        ),
        "{e}"
    );
    // Shapes are compared before the size limit (expand's order).
    let e = a.broadcast_to(&[3, 1 << 32]).unwrap_err().to_string();
    assert!(
        e.contains("The expanded size of the tensor (4294967296) must match the existing size (3)"),
        "{e}"
    );
    let (b, _) = ramp(&[3, 2], 0.0);
    let e = b.broadcast_to(&[4, 1, 1]).unwrap_err().to_string();
    assert!(
        e.contains("tensor (1) must match the existing size (2) at non-singleton dimension 2"),
        "{e}"
    );
    let s = Tensor::from_slice(dev(), &[7.0f32], &[]).unwrap();
    let e1 = s.broadcast_to(&[1, 1]).unwrap();
    assert_eq!(e1.strides(), &[0, 0]);
    assert_eq!(vals(&e1), [7.0]);

    let d = Tensor::zeros(dev(), &[0, 1], DType::F32)
        .unwrap()
        .broadcast_to(&[0, 3])
        .unwrap();
    d.copy_from(&Tensor::zeros(dev(), &[0, 3], DType::F32).unwrap())
        .unwrap();

    let six = Tensor::zeros(dev(), &[6], DType::F32).unwrap();
    let e = six.reshape(&[1usize << 33]).unwrap_err().to_string();
    assert!(
        e.contains("shape '[8589934592]' is invalid for input of size 6"),
        "{e}"
    );
}
