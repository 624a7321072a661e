//! Out-of-range indices are errors, as in PyTorch: ops that take indices check them on the
//! device without stalling the queue, and the next sync or readback returns an `Err` naming
//! the op, the index and the size. Each test opens its own device, since the report goes to
//! whichever readback on the device comes next. `check_indices: false` keeps the documented
//! fill (NaN, nothing added) as an explicit choice.

use wgtensor::ops::{cross_entropy, embedding, nll_loss, CrossEntropyOptions, NllLossOptions};
use wgtensor::{DType, Device, DeviceOptions, Error, Tensor};

fn checked() -> Device {
    Device::new().unwrap()
}

fn ids(d: &Device, v: &[i32]) -> Tensor {
    Tensor::from_slice(d, v, &[v.len()]).unwrap()
}

fn table(d: &Device, rows: usize) -> Tensor {
    let v: Vec<f32> = (0..rows * 2).map(|i| i as f32).collect();
    Tensor::from_slice(d, &v, &[rows, 2]).unwrap()
}

/// The readback of `t` fails naming `op` and containing `needle`; the device then works.
fn fails(d: &Device, t: wgtensor::Result<Tensor>, op: &str, needle: &str) {
    let e = t.and_then(|t| {
        t.to_dtype(DType::F32)?
            .to_vec::<f32>()
            .map(|_| ())
            .map(|_| t)
    });
    let e = e.expect_err("an out-of-range index must be reported");
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
    let m = e.to_string();
    assert!(m.starts_with(&format!("{op}:")), "{m}");
    assert!(m.contains(needle), "{op}: {m}");
    // Reported once: the device goes on.
    let ok = Tensor::from_slice(d, &[1.0f32, 2.0], &[2]).unwrap();
    assert_eq!(
        ok.add_scalar(1.0).unwrap().to_vec::<f32>().unwrap(),
        vec![2.0, 3.0]
    );
}

#[test]
fn gather_index_select_and_embedding_refuse_out_of_range_indices() {
    let d = checked();
    // The probes: id 4 in a 4-row table; 3, -1 and i32::MIN in gather/index_select.
    fails(
        &d,
        embedding(&ids(&d, &[0, 4]), &table(&d, 4), None),
        "embedding",
        "index 4",
    );
    for bad in [3, -1, i32::MIN] {
        let x = table(&d, 3);
        fails(
            &d,
            x.index_select(0, &ids(&d, &[0, bad])),
            "index_select",
            &bad.to_string(),
        );
        let idx = Tensor::from_slice(&d, &[0i32, bad], &[2, 1]).unwrap();
        fails(
            &d,
            x.gather(0, &idx),
            "gather",
            "out of bounds for dimension 0 with size 3",
        );
    }
    // In range: no error, right values.
    let x = table(&d, 4);
    let e = embedding(&ids(&d, &[3, 0]), &x, None).unwrap();
    assert_eq!(e.to_vec::<f32>().unwrap(), vec![6.0, 7.0, 0.0, 1.0]);
}

#[test]
fn one_hot_and_scatter_add_refuse_out_of_range_indices() {
    let d = checked();
    fails(
        &d,
        ids(&d, &[0, 3]).one_hot(3),
        "one_hot",
        "smaller than num_classes",
    );
    fails(&d, ids(&d, &[-1, 0]).one_hot(3), "one_hot", "non-negative");
    // A result past the device's limits (6.4 GB: past 4 GiB, which no adapter's binding
    // passes) is refused under one_hot's name before the class table (200M classes: 800 MB
    // on the device, 1.6 GB staged on the host) is built.
    let e = ids(&d, &[0; 8]).one_hot(200_000_000).unwrap_err();
    assert!(e.to_string().contains("one_hot"), "{e}");
    let base = Tensor::zeros(&d, &[3], DType::F32).unwrap();
    let src = Tensor::ones(&d, &[2], DType::F32).unwrap();
    fails(
        &d,
        base.scatter_add(0, &ids(&d, &[0, 3]), &src),
        "scatter_add",
        "index 3",
    );
    let ok = base.scatter_add(0, &ids(&d, &[2, 2]), &src).unwrap();
    assert_eq!(ok.to_vec::<f32>().unwrap(), vec![0.0, 0.0, 2.0]);
}

#[test]
fn losses_refuse_out_of_range_targets_but_not_the_ignore_index() {
    let d = checked();
    let logits = Tensor::from_slice(&d, &[0.1f32, 0.2, 0.3, 0.4, 0.5, 0.6], &[2, 3]).unwrap();
    let logp = logits.log_softmax(1).unwrap();
    fails(
        &d,
        nll_loss(&logp, &ids(&d, &[0, 3]), &NllLossOptions::default()),
        "nll_loss",
        "Target 3 is out of bounds.",
    );
    fails(
        &d,
        cross_entropy(&logits, &ids(&d, &[-5, 1]), &CrossEntropyOptions::default()),
        "cross_entropy",
        "Target -5 is out of bounds.",
    );
    // ignore_index (-100 by default) is no error, and the loss is the other sample's.
    let l = cross_entropy(
        &logits,
        &ids(&d, &[-100, 1]),
        &CrossEntropyOptions::default(),
    )
    .unwrap();
    let v = l.to_vec::<f32>().unwrap()[0];
    let want = -(0.5f64 - (0.4f64.exp() + 0.5f64.exp() + 0.6f64.exp()).ln());
    assert!((v as f64 - want).abs() < 1e-5, "{v} vs {want}");
}

/// No classes (C = 0), as PyTorch: samples whose target is ignored count with a loss of 0 (a
/// mean of NaN over no weight), and any other target is out of range.
#[test]
fn losses_over_no_classes_take_ignored_targets_only() {
    use wgtensor::ops::Reduction;
    let d = checked();
    let x = Tensor::zeros(&d, &[2, 0], DType::F32).unwrap();
    let t = ids(&d, &[-100, -100]);
    let nll = |reduction| {
        let o = NllLossOptions {
            reduction,
            ..Default::default()
        };
        nll_loss(&x, &t, &o).unwrap().to_vec::<f32>().unwrap()
    };
    assert_eq!(nll(Reduction::None), vec![0.0, 0.0]);
    assert_eq!(nll(Reduction::Sum), vec![0.0]);
    assert!(nll(Reduction::Mean)[0].is_nan());
    let ce = cross_entropy(&x, &t, &CrossEntropyOptions::default()).unwrap();
    assert!(ce.to_vec::<f32>().unwrap()[0].is_nan());
    // The gradient of the input is as empty as the input.
    let xg = Tensor::zeros(&d, &[2, 0], DType::F32)
        .unwrap()
        .requires_grad()
        .unwrap();
    let o = NllLossOptions {
        reduction: Reduction::Sum,
        ..Default::default()
    };
    let g = nll_loss(&xg, &t, &o).unwrap().backward().unwrap();
    assert_eq!(g.get(&xg).unwrap().shape(), &[2, 0]);
    fails(
        &d,
        nll_loss(&x, &ids(&d, &[-100, 0]), &NllLossOptions::default()),
        "nll_loss",
        "Target 0 is out of bounds.",
    );
}

#[test]
fn sync_reports_an_index_error_too() {
    let d = checked();
    let _y = table(&d, 2).index_select(0, &ids(&d, &[5])).unwrap();
    let e = d
        .sync()
        .expect_err("the pending index error comes out at sync");
    assert!(e.to_string().contains("index_select"), "{e}");
    d.sync().unwrap();
}

/// binary_cross_entropy's input and target must be probabilities, as PyTorch checks ("all
/// elements of input should be between 0 and 1"): checked on the device like indices, NaN
/// included, in f32 and f16; 0 and 1 themselves are fine.
#[test]
fn binary_cross_entropy_refuses_values_outside_zero_one() {
    use wgtensor::ops::{binary_cross_entropy, Reduction};
    let d = checked();
    let vals = |v: &[f32]| Tensor::from_slice(&d, v, &[v.len()]).unwrap();
    let bce = |x: &[f32], y: &[f32], dt: DType| {
        let (x, y) = (vals(x).to_dtype(dt)?, vals(y).to_dtype(dt)?);
        binary_cross_entropy(&x, &y, None, Reduction::Sum)
    };
    let mut dtypes = vec![DType::F32];
    if d.supports_f16() {
        dtypes.push(DType::F16);
    }
    for dt in dtypes {
        let input = "all elements of input should be between 0 and 1";
        let target = "all elements of target should be between 0 and 1";
        let op = "binary_cross_entropy";
        fails(
            &d,
            bce(&[0.5, 1.5], &[1.0, 0.0], dt),
            op,
            &format!("{input} (found 1.5)"),
        );
        fails(&d, bce(&[-0.5, 0.5], &[1.0, 0.0], dt), op, input);
        fails(
            &d,
            bce(&[f32::NAN, 0.5], &[1.0, 0.0], dt),
            op,
            "(found NaN)",
        );
        fails(
            &d,
            bce(&[0.5, 0.5], &[2.0, 0.0], dt),
            op,
            &format!("{target} (found 2)"),
        );
        fails(&d, bce(&[0.5, 0.5], &[0.0, f32::NAN], dt), op, target);
        let l = bce(&[0.0, 1.0, 0.5], &[0.0, 1.0, 1.0], dt).unwrap();
        let v = l.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
        assert!(
            (v[0] - std::f32::consts::LN_2).abs() < 1e-3,
            "{dt:?}: {v:?}"
        );
    }
    // Operands past one binding are checked in windows, as the loss itself runs: a value
    // outside [0, 1] in the last window is found, and in-range ones compute.
    let small = Device::with_options(DeviceOptions {
        max_binding_bytes: Some(4096),
        ..Default::default()
    })
    .unwrap();
    let n = 3000;
    let mut xs = vec![0.5f32; n];
    let ys = vec![1.0f32; n];
    let run = |xs: &[f32]| {
        let x = Tensor::from_slice(&small, xs, &[n]).unwrap();
        let y = Tensor::from_slice(&small, &ys, &[n]).unwrap();
        binary_cross_entropy(&x, &y, None, Reduction::Mean)
    };
    let l = run(&xs).unwrap().to_vec::<f32>().unwrap();
    assert!((l[0] - std::f32::consts::LN_2).abs() < 1e-5, "{l:?}");
    xs[n - 1] = 1.25;
    fails(&small, run(&xs), "binary_cross_entropy", "(found 1.25)");
    xs[0] = -1.0;
    fails(
        &small,
        run(&xs),
        "binary_cross_entropy",
        "(2 values outside [0, 1] in all)",
    );
}

#[test]
fn unchecked_devices_keep_the_documented_fill() {
    let d = Device::with_options(DeviceOptions {
        check_indices: false,
        ..Default::default()
    })
    .unwrap();
    let y = embedding(&ids(&d, &[0, 4]), &table(&d, 4), None).unwrap();
    let v = y.to_vec::<f32>().unwrap();
    assert_eq!(&v[..2], &[0.0, 1.0]);
    assert!(v[2].is_nan() && v[3].is_nan(), "{v:?}");
    let logp = Tensor::from_slice(&d, &[-1.0f32, -2.0, -0.5, -0.7], &[2, 2]).unwrap();
    let l = nll_loss(&logp, &ids(&d, &[0, 2]), &NllLossOptions::default()).unwrap();
    assert!(l.to_vec::<f32>().unwrap()[0].is_nan());
    // Probabilities outside [0, 1]: the input's give NaN, never a finite wrong value.
    let bad = Tensor::from_slice(&d, &[1.5f32, -0.5], &[2]).unwrap();
    let y = Tensor::from_slice(&d, &[1.0f32, 0.0], &[2]).unwrap();
    let l = wgtensor::ops::binary_cross_entropy(&bad, &y, None, wgtensor::ops::Reduction::None);
    assert!(l
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .all(|v| v.is_nan()));
    d.sync().unwrap();
}

/// A deterministic xorshift32 stream from `seed` (non-zero).
pub(super) fn xorshift(mut state: u32) -> impl FnMut() -> u32 {
    move || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state
    }
}

/// The embedding backward of `v` (ids in `[0, rows)`) against the f32 sums of each row's
/// positions in ascending order, bit for bit: in turn on CPU adapters, and on GPUs (a real one,
/// or the GPU plans) in the lanes of a long bucket's workgroup (`common::bucket_sum`).
fn embedding_grads_sum_in_position_order(v: &[i32], rows: usize, next: &mut impl FnMut() -> u32) {
    let l = v.len();
    let r: Vec<f32> = (0..2 * l)
        .map(|_| (next() % 2001) as f32 / 997.0 - 1.0)
        .collect();
    // Each output's terms in position order.
    let mut terms = vec![Vec::new(); 2 * rows];
    for (j, &id) in v.iter().enumerate() {
        for c in 0..2 {
            terms[id as usize * 2 + c].push(r[j * 2 + c]);
        }
    }
    let dev = checked();
    let gpu = crate::common::on_gpu(&dev);
    for (d, gpu) in [
        (dev, gpu),
        (crate::common::gpu_plans_device().clone(), true),
    ] {
        let w = Tensor::zeros(&d, &[rows, 2], DType::F32)
            .unwrap()
            .requires_grad()
            .unwrap();
        let rt = Tensor::from_slice(&d, &r, &[l, 2]).unwrap();
        let y = embedding(&ids(&d, v), &w, None).unwrap();
        let grads = y.mul(&rt).unwrap().sum_all().unwrap().backward().unwrap();
        let got = grads.get(&w).unwrap().to_vec::<f32>().unwrap();
        for (i, g) in got.iter().enumerate() {
            let w = crate::common::bucket_sum(&terms[i], gpu);
            assert_eq!(
                g.to_bits(),
                w.to_bits(),
                "gpu {gpu}: row {} col {}: {g} vs {w}",
                i / 2,
                i % 2
            );
        }
    }
}

/// One row hit by most of the index (a padding id over a whole batch, 36k of 40k ids): the
/// backward's bucket for it is sorted in n log n (a quadratic sort on one invocation took
/// seconds), and every row's gradient is the f32 sum of its positions in ascending order,
/// bit for bit.
#[test]
fn embedding_backward_with_one_dominant_row_sums_in_position_order() {
    let mut next = xorshift(12345);
    let v: Vec<i32> = (0..40_000)
        .map(|_| {
            let r = next();
            if r.is_multiple_of(10) {
                (r / 10 % 10) as i32
            } else {
                3
            }
        })
        .collect();
    embedding_grads_sum_in_position_order(&v, 10, &mut next);
}

/// Buckets of every length class: 1-32 positions (insertion sort), 33-256 (heap sort in a
/// private array) and past 256 (heap sort in the list), in random order.
#[test]
fn embedding_backward_buckets_of_every_length_sum_in_position_order() {
    let mut next = xorshift(777);
    // Row r gets about 3 r + 1 positions: 1 to 300 over 100 rows.
    let mut v: Vec<i32> = (0..100).flat_map(|r| vec![r; 3 * r as usize + 1]).collect();
    for i in (1..v.len()).rev() {
        v.swap(i, next() as usize % (i + 1));
    }
    embedding_grads_sum_in_position_order(&v, 100, &mut next);
}

/// A graph-style aggregation: `scatter_add` along dim 0 with one 1-D index broadcast over the
/// feature dim (`idx.unsqueeze(1).expand(..)`) runs through the bucketed row scatter, and its
/// result (and its gradients) are bitwise those of the gather form, which a materialised
/// (contiguous) copy of the same index takes.
#[test]
fn scatter_add_with_a_broadcast_index_matches_the_gather_form() {
    let d = checked();
    let (n, e, f) = (50usize, 3000usize, 6usize);
    let mut next = xorshift(777);
    let edges: Vec<i32> = (0..e).map(|_| (next() % n as u32) as i32).collect();
    let vals: Vec<f32> = (0..e * f)
        .map(|_| (next() % 2001) as f32 / 997.0 - 1.0)
        .collect();
    let basev: Vec<f32> = (0..n * f).map(|i| i as f32 * 0.01).collect();
    let idx1 = ids(&d, &edges);
    let wide = idx1
        .reshape(&[e, 1])
        .unwrap()
        .broadcast_to(&[e, f])
        .unwrap();
    let packed = wide.contiguous().unwrap();
    assert_eq!(wide.strides()[1], 0);
    let src = Tensor::from_slice(&d, &vals, &[e, f])
        .unwrap()
        .requires_grad()
        .unwrap();
    let base = Tensor::from_slice(&d, &basev, &[n, f]).unwrap();
    let fast = base.scatter_add(0, &wide, &src).unwrap();
    let slow = base.scatter_add(0, &packed, &src).unwrap();
    let (a, b) = (fast.to_vec::<f32>().unwrap(), slow.to_vec::<f32>().unwrap());
    assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
    // The sums themselves: from the base (PyTorch's copy of self), then position order.
    let mut want = basev.clone();
    for (j, &r) in edges.iter().enumerate() {
        for c in 0..f {
            want[r as usize * f + c] += vals[j * f + c];
        }
    }
    assert!(a.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits()));
    // Gradients flow to src as before (a gather of the output gradient).
    let g = fast.sum_all().unwrap().backward().unwrap();
    let gs = g.get(&src).unwrap().to_vec::<f32>().unwrap();
    assert!(gs.iter().all(|&x| x == 1.0));
}

/// A general index (each column its own) 700 long along the scattered dim over 40 columns takes
/// the bucketed scatter (40 rows x 28k index elements of gather-form scans): every output is
/// bitwise the f32 sum from its base (PyTorch's copy of self) then its src values in position
/// order (the gather form's order), along dim 0 and through transposed views along dim 1;
/// f16 rounds once at the end; and gather's backward (the same scatter) sums in the same
/// order.
#[test]
fn scatter_add_with_a_general_index_sums_in_position_order() {
    let d = checked();
    let (n, e, f) = (40usize, 700usize, 40usize);
    let mut next = xorshift(4242);
    let idx: Vec<i32> = (0..e * f).map(|_| (next() % n as u32) as i32).collect();
    let vals: Vec<f32> = (0..e * f)
        .map(|_| (next() % 2001) as f32 / 997.0 - 1.0)
        .collect();
    let basev: Vec<f32> = (0..n * f).map(|i| i as f32 * 0.01 - 0.3).collect();
    // out[r, c] (row-major [n, f]) in f32, from the base, then position order.
    let sums = |vals: &[f32], basev: &[f32]| {
        let mut acc = basev.to_vec();
        for j in 0..e {
            for c in 0..f {
                acc[idx[j * f + c] as usize * f + c] += vals[j * f + c];
            }
        }
        acc
    };
    let want = sums(&vals, &basev);
    let index = Tensor::from_slice(&d, &idx, &[e, f]).unwrap();
    let src = Tensor::from_slice(&d, &vals, &[e, f]).unwrap();
    let base = Tensor::from_slice(&d, &basev, &[n, f]).unwrap();
    let got = base.scatter_add(0, &index, &src).unwrap();
    let got = got.to_vec::<f32>().unwrap();
    let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
    assert!(same(&got, &want), "dim 0");
    // Dim 1 of the transposed views: out [f, n].
    let t = |x: &Tensor| x.transpose(0, 1).unwrap();
    let got_t = t(&base)
        .contiguous()
        .unwrap()
        .scatter_add(1, &t(&index), &t(&src))
        .unwrap();
    let got_t = t(&got_t).contiguous().unwrap().to_vec::<f32>().unwrap();
    assert!(same(&got_t, &want), "dim 1 of transposed views");
    // f16: the f32 sum (with the base) rounded once.
    if d.supports_f16() {
        use wgtensor::f16;
        let h = |v: &[f32]| v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>();
        let (vh, bh) = (h(&vals), h(&basev));
        let back = |v: &[f16]| v.iter().map(|x| x.to_f32()).collect::<Vec<_>>();
        let want_h: Vec<f16> = sums(&back(&vh), &back(&bh))
            .iter()
            .map(|&x| f16::from_f32(x))
            .collect();
        let src_h = Tensor::from_slice(&d, &vh, &[e, f]).unwrap();
        let base_h = Tensor::from_slice(&d, &bh, &[n, f]).unwrap();
        let got_h = base_h.scatter_add(0, &index, &src_h).unwrap();
        let got_h = got_h.to_vec::<f16>().unwrap();
        assert!(got_h
            .iter()
            .zip(&want_h)
            .all(|(x, y)| x.to_bits() == y.to_bits()));
    }
    // gather's backward: the output gradient scattered back in position order.
    let x = Tensor::zeros(&d, &[n, f], DType::F32)
        .unwrap()
        .requires_grad()
        .unwrap();
    let y = x.gather(0, &index).unwrap();
    let grads = y.mul(&src).unwrap().sum_all().unwrap().backward().unwrap();
    let gx = grads.get(&x).unwrap().to_vec::<f32>().unwrap();
    assert!(
        same(&gx, &sums(&vals, &vec![0.0; n * f])),
        "gather backward"
    );
}

/// Bucketing over more than 16k rows scans the counts in blocks of 4096 (three passes, the
/// block totals scanned in between): an embedding backward over a 30k vocabulary and a general
/// scatter_add into 200 x 100 outputs are still bitwise the host's position-order sums, the
/// block boundaries (every 4096th row) included.
#[test]
fn bucket_scans_past_one_workgroup_keep_position_order() {
    let d = checked();
    let (v, l) = (30_000usize, 6_000usize);
    let mut next = xorshift(99);
    // Ids cluster around block boundaries as well as spreading over the vocabulary.
    let ids_v: Vec<i32> = (0..l)
        .map(|j| {
            let r = next();
            if j % 3 == 0 {
                ((r % 7) as usize * 4096 + (r as usize / 7) % 3).min(v - 1) as i32
            } else {
                (r % v as u32) as i32
            }
        })
        .collect();
    let g: Vec<f32> = (0..l * 2)
        .map(|_| (next() % 2001) as f32 / 997.0 - 1.0)
        .collect();
    let w = Tensor::zeros(&d, &[v, 2], DType::F32)
        .unwrap()
        .requires_grad()
        .unwrap();
    let gt = Tensor::from_slice(&d, &g, &[l, 2]).unwrap();
    let y = embedding(&ids(&d, &ids_v), &w, None).unwrap();
    let grads = y.mul(&gt).unwrap().sum_all().unwrap().backward().unwrap();
    let got = grads.get(&w).unwrap().to_vec::<f32>().unwrap();
    let mut want = vec![0.0f32; v * 2];
    for (j, &id) in ids_v.iter().enumerate() {
        for c in 0..2 {
            want[id as usize * 2 + c] += g[j * 2 + c];
        }
    }
    assert!(
        got.iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "embedding"
    );

    let (n, e, f) = (200usize, 300usize, 100usize);
    let idx: Vec<i32> = (0..e * f).map(|_| (next() % n as u32) as i32).collect();
    let vals: Vec<f32> = (0..e * f)
        .map(|_| (next() % 2001) as f32 / 997.0 - 1.0)
        .collect();
    let index = Tensor::from_slice(&d, &idx, &[e, f]).unwrap();
    let src = Tensor::from_slice(&d, &vals, &[e, f]).unwrap();
    let base = Tensor::zeros(&d, &[n, f], DType::F32).unwrap();
    let got = base.scatter_add(0, &index, &src).unwrap();
    let got = got.to_vec::<f32>().unwrap();
    // From the base (zeros), as PyTorch: a sum of -0.0 terms stays +0.0.
    let mut want = vec![0.0f32; n * f];
    for j in 0..e {
        for c in 0..f {
            want[idx[j * f + c] as usize * f + c] += vals[j * f + c];
        }
    }
    assert!(
        got.iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "scatter_add"
    );
}

/// Unchecked indices (check_indices off): an out-of-range index adds nothing to
/// scatter_add, so its source element gets a gradient of 0, not the gather's NaN.
#[test]
fn unchecked_scatter_add_source_gradient_is_zero_out_of_range() {
    let d = Device::with_options(DeviceOptions {
        check_indices: false,
        ..Default::default()
    })
    .unwrap();
    let x = Tensor::zeros(&d, &[3], DType::F32).unwrap();
    let src = Tensor::from_slice(&d, &[1.0f32, 2.0, 3.0], &[3])
        .unwrap()
        .requires_grad()
        .unwrap();
    let idx = Tensor::from_slice(&d, &[0i32, 7, -1], &[3]).unwrap();
    let y = x.scatter_add(0, &idx, &src).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![1.0, 0.0, 0.0]);
    let g = y.sum_all().unwrap().backward().unwrap();
    assert_eq!(
        g.get(&src).unwrap().to_vec::<f32>().unwrap(),
        vec![1.0, 0.0, 0.0]
    );
}
