//! LSTM / GRU (layers, bidirectional, batch_first, initial states) and the single-step cells:
//! autograd through the fused BPTT against the f64 loops of tests/common/rnn_ref.rs, with the
//! f32 bound of tests/conformance/rnn.rs (`compare_grads`).

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use wgtensor::ops::{gru_cell, lstm_cell, Rnn, RnnKind, RnnWeights};
use wgtensor::Tensor;

use crate::common::reference::permute;
use crate::common::rnn_ref::{self, RefWeights};
use crate::grad_ref::Want;
use crate::ops::{check, leaf, run, Rng};

const CASES: u32 = 16;

fn max_abs(v: &[f64]) -> f64 {
    v.iter().fold(0.0, |m, x| m.max(x.abs()))
}

/// The conformance suite's f32 bound: `base * max(max |want|, 1)` for the whole tensor.
fn want(v: Vec<f64>, base: f64) -> Want {
    let tol = base * max_abs(&v).max(1.0);
    let n = v.len();
    Want {
        grad: v,
        tol: vec![tol; n],
    }
}

/// `sum(y * r)` over several outputs.
fn loss_of(parts: &[(&Tensor, &[f64])]) -> Tensor {
    let mut total: Option<Tensor> = None;
    for (y, r) in parts {
        let l = crate::ops::loss(y, r);
        total = Some(match total {
            None => l,
            Some(t) => t.add(&l).unwrap(),
        });
    }
    total.unwrap()
}

fn rnn_case(seed: u64) -> Result<(), TestCaseError> {
    let mut rng = Rng::new(seed);
    let lstm = rng.coin(0.5);
    let kind = if lstm { RnnKind::Lstm } else { RnnKind::Gru };
    let (layers, bidir, batch_first) = (1 + rng.below(2), rng.coin(0.5), rng.coin(0.5));
    let (t, b, i, h) = (
        1 + rng.below(4),
        1 + rng.below(3),
        1 + rng.below(4),
        1 + rng.below(4),
    );
    let d = if bidir { 2 } else { 1 };
    let g = rnn_ref::gates(lstm);
    let val = |r: &mut Rng| r.uniform(-0.6, 0.6);
    let mut refw = Vec::new();
    let mut leaves = Vec::new();
    for l in 0..layers {
        for _ in 0..d {
            let il = if l == 0 { i } else { d * h };
            let w = RefWeights {
                w_ih: rng.values(g * h * il, val),
                w_hh: rng.values(g * h * h, val),
                b_ih: rng.values(g * h, val),
                b_hh: rng.values(g * h, val),
            };
            leaves.push(RnnWeights {
                w_ih: leaf(&w.w_ih, &[g * h, il]),
                w_hh: leaf(&w.w_hh, &[g * h, h]),
                b_ih: leaf(&w.b_ih, &[g * h]),
                b_hh: leaf(&w.b_hh, &[g * h]),
            });
            refw.push(w);
        }
    }
    let rnn = Rnn::new(
        kind,
        wgtensor::ops::RnnOptions {
            num_layers: layers,
            bidirectional: bidir,
            batch_first,
        },
        leaves.clone(),
    )
    .unwrap();
    let x = rng.values(t * b * i, |r| r.uniform(-1.0, 1.0));
    let with_h0 = rng.coin(0.5);
    let with_c0 = lstm && rng.coin(0.5);
    let h0 = rng.values(layers * d * b * h, val);
    let c0 = rng.values(layers * d * b * h, val);
    let state = [layers * d, b, h];
    // x in [T, B, I] for the reference; the op gets [B, T, I] with batch_first.
    let xt = if batch_first {
        leaf(&permute(&x, &[t, b, i], &[1, 0, 2]), &[b, t, i])
    } else {
        leaf(&x, &[t, b, i])
    };
    let h0t = leaf(&h0, &state);
    let c0t = leaf(&c0, &state);
    let out = rnn
        .forward(&xt, with_h0.then_some(&h0t), with_c0.then_some(&c0t))
        .unwrap();
    let dy = rng.values(t * b * d * h, |r| r.uniform(-1.0, 1.0));
    let with_dhn = rng.coin(0.5);
    let with_dcn = lstm && rng.coin(0.5);
    let dhn = rng.values(layers * d * b * h, |r| r.uniform(-1.0, 1.0));
    let dcn = rng.values(layers * d * b * h, |r| r.uniform(-1.0, 1.0));
    let dy_op = if batch_first {
        permute(&dy, &[t, b, d * h], &[1, 0, 2])
    } else {
        dy.clone()
    };
    let mut parts: Vec<(&Tensor, &[f64])> = vec![(&out.output, &dy_op)];
    if with_dhn {
        parts.push((&out.h_n, &dhn));
    }
    let c_n = out.c_n.clone();
    if with_dcn {
        parts.push((c_n.as_ref().unwrap(), &dcn));
    }
    let grads = loss_of(&parts).backward().unwrap();
    let r = rnn_ref::sequence_backward(
        lstm,
        &refw,
        layers,
        d,
        &x,
        t,
        b,
        i,
        h,
        with_h0.then_some(&h0[..]),
        with_c0.then_some(&c0[..]),
        &dy,
        with_dhn.then_some(&dhn[..]),
        with_dcn.then_some(&dcn[..]),
    );
    let base = 4e-6 * (t * layers) as f64 * (i + d * h + 8) as f64;
    let what = format!(
        "{kind:?} L{layers} D{d} batch_first {batch_first} T{t} B{b} I{i} H{h} h0 {with_h0} c0 {with_c0} dh_n {with_dhn} dc_n {with_dcn}"
    );
    let dx = if batch_first {
        permute(&r.dx, &[t, b, i], &[1, 0, 2])
    } else {
        r.dx.clone()
    };
    check(&format!("{what}: dx"), grads.get(&xt), &want(dx, base))?;
    if with_h0 {
        check(
            &format!("{what}: dh0"),
            grads.get(&h0t),
            &want(r.dh0.clone(), base),
        )?;
    } else {
        prop_assert!(grads.get(&h0t).is_none());
    }
    if with_c0 {
        check(
            &format!("{what}: dc0"),
            grads.get(&c0t),
            &want(r.dc0.clone(), base),
        )?;
    }
    for (k, (l, w)) in leaves.iter().zip(&r.dw).enumerate() {
        check(
            &format!("{what}: dW_ih[{k}]"),
            grads.get(&l.w_ih),
            &want(w.w_ih.clone(), base),
        )?;
        check(
            &format!("{what}: dW_hh[{k}]"),
            grads.get(&l.w_hh),
            &want(w.w_hh.clone(), base),
        )?;
        check(
            &format!("{what}: db_ih[{k}]"),
            grads.get(&l.b_ih),
            &want(w.b_ih.clone(), base),
        )?;
        check(
            &format!("{what}: db_hh[{k}]"),
            grads.get(&l.b_hh),
            &want(w.b_hh.clone(), base),
        )?;
    }
    Ok(())
}

/// lstm_cell / gru_cell: one step, through the same recorded Rnn.
fn cell_case(seed: u64) -> Result<(), TestCaseError> {
    let mut rng = Rng::new(seed);
    let lstm = rng.coin(0.5);
    let (b, i, h) = (1 + rng.below(3), 1 + rng.below(4), 1 + rng.below(4));
    let g = rnn_ref::gates(lstm);
    let val = |r: &mut Rng| r.uniform(-0.6, 0.6);
    let w = RefWeights {
        w_ih: rng.values(g * h * i, val),
        w_hh: rng.values(g * h * h, val),
        b_ih: rng.values(g * h, val),
        b_hh: rng.values(g * h, val),
    };
    let wl = RnnWeights {
        w_ih: leaf(&w.w_ih, &[g * h, i]),
        w_hh: leaf(&w.w_hh, &[g * h, h]),
        b_ih: leaf(&w.b_ih, &[g * h]),
        b_hh: leaf(&w.b_hh, &[g * h]),
    };
    let x = rng.values(b * i, |r| r.uniform(-1.0, 1.0));
    let h0 = rng.values(b * h, val);
    let c0 = rng.values(b * h, val);
    let (xt, ht, ct) = (leaf(&x, &[b, i]), leaf(&h0, &[b, h]), leaf(&c0, &[b, h]));
    let dh = rng.values(b * h, |r| r.uniform(-1.0, 1.0));
    let dc = rng.values(b * h, |r| r.uniform(-1.0, 1.0));
    let grads = if lstm {
        let kind = RnnKind::Lstm;
        let wl = RnnWeights::new(kind, &wl.w_ih, &wl.w_hh, Some(&wl.b_ih), Some(&wl.b_hh)).unwrap();
        let (h1, c1) = lstm_cell(&xt, &ht, &ct, &wl).unwrap();
        loss_of(&[(&h1, &dh), (&c1, &dc)]).backward().unwrap()
    } else {
        let h1 = gru_cell(&xt, &ht, &wl).unwrap();
        loss_of(&[(&h1, &dh)]).backward().unwrap()
    };
    // One step: dy is the new h's gradient and dh_n nothing (the output is h_n).
    let r = rnn_ref::sequence_backward(
        lstm,
        std::slice::from_ref(&w),
        1,
        1,
        &x,
        1,
        b,
        i,
        h,
        Some(&h0),
        lstm.then_some(&c0[..]),
        &dh,
        None,
        lstm.then_some(&dc[..]),
    );
    let base = 4e-6 * (i + h + 8) as f64;
    let what = format!("{} cell B{b} I{i} H{h}", if lstm { "lstm" } else { "gru" });
    check(&format!("{what}: dx"), grads.get(&xt), &want(r.dx, base))?;
    check(&format!("{what}: dh"), grads.get(&ht), &want(r.dh0, base))?;
    if lstm {
        check(&format!("{what}: dc"), grads.get(&ct), &want(r.dc0, base))?;
    }
    check(
        &format!("{what}: dW_ih"),
        grads.get(&wl.w_ih),
        &want(r.dw[0].w_ih.clone(), base),
    )?;
    check(
        &format!("{what}: db_hh"),
        grads.get(&wl.b_hh),
        &want(r.dw[0].b_hh.clone(), base),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn rnn_grads(seed in any::<u64>()) { run(rnn_case, seed)?; }

    #[test]
    fn rnn_cell_grads(seed in any::<u64>()) { run(cell_case, seed)?; }
}

/// f16: autograd must route an `Rnn` node's gradients through the fused BPTT exactly as a
/// direct `Rnn::backward` call does (whose f16 accuracy the conformance suite bounds against
/// the f64 reference with its perturbed-store tolerances): the gradients are compared bitwise.
fn rnn_f16_matches_the_fused_backward(seed: u64) -> Result<(), TestCaseError> {
    use wgtensor::{f16, DType};
    let dev = crate::common::device();
    crate::common::require_f16(dev);
    let mut rng = Rng::new(seed);
    let lstm = rng.coin(0.5);
    let kind = if lstm { RnnKind::Lstm } else { RnnKind::Gru };
    let (layers, bidir, batch_first) = (1 + rng.below(2), rng.coin(0.5), rng.coin(0.5));
    let (t, b, i, h) = (
        1 + rng.below(4),
        1 + rng.below(3),
        1 + rng.below(4),
        1 + rng.below(4),
    );
    let d = if bidir { 2 } else { 1 };
    let g = kind.gates() * h;
    let up = |v: &[f64], shape: &[usize]| -> Tensor {
        let hv: Vec<f16> = v.iter().map(|&x| f16::from_f64(x)).collect();
        Tensor::from_slice(dev, &hv, shape).unwrap()
    };
    let vals = |n: usize, r: &mut Rng| -> Vec<f64> {
        (0..n)
            .map(|_| (r.below(2001) as f64 - 1000.0) / 1600.0)
            .collect()
    };
    let mut plain = Vec::new();
    let mut tracked = Vec::new();
    for l in 0..layers {
        for _ in 0..d {
            let il = if l == 0 { i } else { d * h };
            let ws = [
                (vals(g * il, &mut rng), vec![g, il]),
                (vals(g * h, &mut rng), vec![g, h]),
                (vals(g, &mut rng), vec![g]),
                (vals(g, &mut rng), vec![g]),
            ];
            let ts: Vec<Tensor> = ws.iter().map(|(v, s)| up(v, s)).collect();
            plain.push(RnnWeights::new(kind, &ts[0], &ts[1], Some(&ts[2]), Some(&ts[3])).unwrap());
            let tr: Vec<Tensor> = ws
                .iter()
                .map(|(v, s)| up(v, s).requires_grad().unwrap())
                .collect();
            tracked.push(RnnWeights {
                w_ih: tr[0].clone(),
                w_hh: tr[1].clone(),
                b_ih: tr[2].clone(),
                b_hh: tr[3].clone(),
            });
        }
    }
    let xs = if batch_first { [b, t, i] } else { [t, b, i] };
    let xv = vals(t * b * i, &mut rng);
    let state = [layers * d, b, h];
    let h0v = vals(layers * d * b * h, &mut rng);
    let ys = if batch_first {
        [b, t, d * h]
    } else {
        [t, b, d * h]
    };
    let dyv = vals(t * b * d * h, &mut rng);
    let dhv = vals(layers * d * b * h, &mut rng);
    // The direct call.
    let rnn = Rnn::new(
        kind,
        wgtensor::ops::RnnOptions {
            num_layers: layers,
            bidirectional: bidir,
            batch_first,
        },
        plain,
    )
    .unwrap();
    let (x, h0) = (up(&xv, &xs), up(&h0v, &state));
    let (_, saved) = rnn.forward_train(&x, Some(&h0), None).unwrap();
    let direct = rnn
        .backward(&saved, &up(&dyv, &ys), Some(&up(&dhv, &state)), None)
        .unwrap();
    // Autograd: loss = sum(out * dy) + sum(h_n * dh), so d out = dy and d h_n = dh exactly.
    let rnn_t = Rnn::new(
        kind,
        wgtensor::ops::RnnOptions {
            num_layers: layers,
            bidirectional: bidir,
            batch_first,
        },
        tracked.clone(),
    )
    .unwrap();
    let (xt, h0t) = (
        up(&xv, &xs).requires_grad().unwrap(),
        up(&h0v, &state).requires_grad().unwrap(),
    );
    let out = rnn_t.forward(&xt, Some(&h0t), None).unwrap();
    let sum = |y: &Tensor, r: &Tensor| -> Tensor {
        let p = y.mul(r).unwrap();
        p.reshape(&[p.numel()])
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
            .sum(0, false)
            .unwrap()
    };
    let loss = sum(&out.output, &up(&dyv, &ys))
        .add(&sum(&out.h_n, &up(&dhv, &state)))
        .unwrap();
    let grads = loss.backward().unwrap();
    let bits = |t: &Tensor| -> Vec<u16> {
        t.to_vec::<f16>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect()
    };
    let what = format!("{kind:?} L{layers} D{d} batch_first {batch_first} T{t} B{b} I{i} H{h}");
    let pairs: Vec<(&str, &Tensor, Option<&Tensor>)> = {
        let mut v = vec![
            ("dx", &direct.dx, grads.get(&xt)),
            ("dh0", &direct.dh0, grads.get(&h0t)),
        ];
        for (k, (dw, tw)) in direct.weights.iter().zip(&tracked).enumerate() {
            let _ = k;
            v.push(("dW_ih", &dw.w_ih, grads.get(&tw.w_ih)));
            v.push(("dW_hh", &dw.w_hh, grads.get(&tw.w_hh)));
            v.push(("db_ih", &dw.b_ih, grads.get(&tw.b_ih)));
            v.push(("db_hh", &dw.b_hh, grads.get(&tw.b_hh)));
        }
        v
    };
    for (name, want, got) in pairs {
        let got =
            got.ok_or_else(|| TestCaseError::fail(format!("{what}: no gradient for {name}")))?;
        prop_assert_eq!(bits(got), bits(want), "{}: {}", what, name);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn rnn_grads_f16(seed in any::<u64>()) { rnn_f16_matches_the_fused_backward(seed)?; }
}
