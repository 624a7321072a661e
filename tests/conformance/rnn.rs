//! LSTM / GRU sequences and cells against the f64 reference in tests/common/rnn_ref.rs.
//!
//! Tolerance: every step's gate pre-activations are f32 dot products of length I + H with
//! |w|, |x|, |h| <= 1, so each carries <= (I + H + 2) * eps_f32 relative error of its magnitude;
//! sigmoid/tanh/exp add a few ulps and are 1-Lipschitz or less, and the recurrence is a
//! contraction for the small weights used here, so errors do not compound beyond ~T times the
//! per-step error. Outputs are bounded by 1: |err| <= 2e-6 * T * (I + H + 8) is generous yet
//! orders of magnitude below what a wrong gate, bias or index would produce.

use std::collections::HashMap;

use proptest::prelude::*;
use wgtensor::ops::{gru_cell, lstm_cell, Rnn, RnnKind, RnnWeights};
use wgtensor::{DType, Device, Tensor};

#[cfg(not(target_arch = "wasm32"))]
use crate::common::download;
use crate::common::rnn_ref::{self, RefWeights};
use crate::common::{device, download_async, portable_device, upload};

#[derive(Debug, Clone)]
pub(crate) struct Problem {
    lstm: bool,
    t: usize,
    b: usize,
    i: usize,
    h: usize,
    layers: usize,
    bidirectional: bool,
    batch_first: bool,
    with_h0: bool,
    seed: u64,
}

pub(crate) fn problem() -> impl Strategy<Value = Problem> {
    (
        any::<bool>(),
        1usize..=20,
        1usize..=16,
        1usize..=12,
        1usize..=20,
        1usize..=2,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(
            |(lstm, t, b, i, h, layers, bidirectional, batch_first, with_h0, seed)| Problem {
                lstm,
                t,
                b,
                i,
                h,
                layers,
                bidirectional,
                batch_first,
                with_h0,
                seed,
            },
        )
}

/// Deterministic values in [-scale, scale].
fn values(n: usize, seed: u64, scale: f64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = ((s >> 11) as f64) / ((1u64 << 53) as f64);
            // Round through f32 so GPU and reference start from identical inputs.
            ((2.0 * u - 1.0) * scale) as f32 as f64
        })
        .collect()
}

fn weights_for(p: &Problem, dev: &Device, idx: usize, in_size: usize) -> (RefWeights, RnnWeights) {
    let g = rnn_ref::gates(p.lstm);
    let seed = p.seed ^ (idx as u64 * 7919);
    // PyTorch initializes with U(-1/sqrt(H), 1/sqrt(H)).
    let k = 1.0 / (p.h as f64).sqrt();
    let rw = RefWeights {
        w_ih: values(g * p.h * in_size, seed + 1, k),
        w_hh: values(g * p.h * p.h, seed + 2, k),
        b_ih: values(g * p.h, seed + 3, k),
        b_hh: values(g * p.h, seed + 4, k),
    };
    let kind = if p.lstm { RnnKind::Lstm } else { RnnKind::Gru };
    let gw = RnnWeights::new(
        kind,
        &upload(dev, &rw.w_ih, &[g * p.h, in_size], DType::F32),
        &upload(dev, &rw.w_hh, &[g * p.h, p.h], DType::F32),
        Some(&upload(dev, &rw.b_ih, &[g * p.h], DType::F32)),
        Some(&upload(dev, &rw.b_hh, &[g * p.h], DType::F32)),
    )
    .unwrap();
    (rw, gw)
}

fn check_close(what: &str, got: &[f64], want: &[f64], tol: f64) -> Result<(), TestCaseError> {
    prop_assert_eq!(got.len(), want.len(), "{} length", what);
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        prop_assert!(
            (g - w).abs() <= tol,
            "{}[{}]: got {} want {} (tol {})",
            what,
            k,
            g,
            w,
            tol
        );
    }
    Ok(())
}

/// The problem's layer stack: f64 reference weights and the GPU `Rnn` built from them.
fn build_rnn(p: &Problem, dev: &Device) -> (Vec<RefWeights>, Rnn) {
    let d = if p.bidirectional { 2 } else { 1 };
    let mut refw = Vec::new();
    let mut gpuw = Vec::new();
    for l in 0..p.layers {
        for dir in 0..d {
            let in_size = if l == 0 { p.i } else { d * p.h };
            let (r, g) = weights_for(p, dev, l * d + dir, in_size);
            refw.push(r);
            gpuw.push(g);
        }
    }
    let kind = if p.lstm { RnnKind::Lstm } else { RnnKind::Gru };
    let rnn = Rnn::new(kind, p.layers, p.bidirectional, p.batch_first, gpuw).unwrap();
    (refw, rnn)
}

pub(crate) async fn run_sequence(p: &Problem, dev: &Device) -> Result<(), TestCaseError> {
    let d = if p.bidirectional { 2 } else { 1 };
    let (refw, rnn) = build_rnn(p, dev);
    let x = values(p.t * p.b * p.i, p.seed ^ 99, 1.0);
    let states = p.layers * d * p.b * p.h;
    let h0 = p.with_h0.then(|| values(states, p.seed ^ 5, 0.5));
    let c0 = (p.with_h0 && p.lstm).then(|| values(states, p.seed ^ 6, 0.5));
    let (want_y, want_h, want_c) = rnn_ref::sequence(
        p.lstm,
        &refw,
        p.layers,
        d,
        &x,
        p.t,
        p.b,
        p.i,
        p.h,
        h0.as_deref(),
        c0.as_deref(),
    );

    // batch_first input is the [B, T, I] transpose of the same data.
    let xt = upload(dev, &x, &[p.t, p.b, p.i], DType::F32);
    let xin = if p.batch_first {
        xt.transpose(0, 1).unwrap().contiguous().unwrap()
    } else {
        xt
    };
    let sshape = [p.layers * d, p.b, p.h];
    let h0t = h0.as_ref().map(|v| upload(dev, v, &sshape, DType::F32));
    let c0t = c0.as_ref().map(|v| upload(dev, v, &sshape, DType::F32));
    let out = rnn.forward(&xin, h0t.as_ref(), c0t.as_ref()).unwrap();
    let y = if p.batch_first {
        out.output.transpose(0, 1).unwrap()
    } else {
        out.output.clone()
    };
    prop_assert_eq!(y.shape(), &[p.t, p.b, d * p.h][..]);
    let tol = 2e-6 * p.t as f64 * p.layers as f64 * (p.i + d * p.h + 8) as f64;
    check_close("output", &download_async(&y).await.unwrap(), &want_y, tol)?;
    check_close(
        "h_n",
        &download_async(&out.h_n).await.unwrap(),
        &want_h,
        tol,
    )?;
    if p.lstm {
        // c is not bounded by 1 (it accumulates up to T), so scale the bound with T.
        check_close(
            "c_n",
            &download_async(out.c_n.as_ref().unwrap()).await.unwrap(),
            &want_c,
            tol * p.t as f64,
        )?;
    } else {
        prop_assert!(out.c_n.is_none());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn rnn_sequence_f32(p in problem()) {
        pollster::block_on(run_sequence(&p, device()))?;
    }

    #[test]
    fn rnn_sequence_portable_f32(p in problem()) {
        pollster::block_on(run_sequence(&p, portable_device()))?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn rnn_cells_f32(p in cell_problem()) {
        pollster::block_on(run_cell(&p, device()))?;
    }
}

/// Single steps (`lstm_cell`, `gru_cell`): a one-step, one-layer problem with an initial state.
pub(crate) fn cell_problem() -> impl Strategy<Value = Problem> {
    (
        any::<bool>(),
        1usize..=16,
        1usize..=12,
        1usize..=20,
        any::<u64>(),
    )
        .prop_map(|(lstm, b, i, h, seed)| Problem {
            lstm,
            t: 1,
            b,
            i,
            h,
            layers: 1,
            bidirectional: false,
            batch_first: false,
            with_h0: true,
            seed,
        })
}

pub(crate) async fn run_cell(p: &Problem, dev: &Device) -> Result<(), TestCaseError> {
    let (lstm, b, i, h, seed) = (p.lstm, p.b, p.i, p.h, p.seed);
    let (rw, gw) = weights_for(p, dev, 0, i);
    let x = values(b * i, seed ^ 1, 1.0);
    let hv = values(b * h, seed ^ 2, 0.5);
    let cv = values(b * h, seed ^ 3, 0.5);
    let (want_h, want_c) = rnn_ref::cell(lstm, &rw, &x, &hv, &cv, b, i, h);
    let xt = upload(dev, &x, &[b, i], DType::F32);
    let ht = upload(dev, &hv, &[b, h], DType::F32);
    let tol = 2e-6 * (i + h + 8) as f64;
    if lstm {
        let ct = upload(dev, &cv, &[b, h], DType::F32);
        let (h2, c2) = lstm_cell(&xt, &ht, &ct, &gw).unwrap();
        prop_assert_eq!(h2.shape(), &[b, h][..]);
        check_close("h'", &download_async(&h2).await.unwrap(), &want_h, tol)?;
        check_close("c'", &download_async(&c2).await.unwrap(), &want_c, tol)?;
    } else {
        let h2 = gru_cell(&xt, &ht, &gw).unwrap();
        check_close("h'", &download_async(&h2).await.unwrap(), &want_h, tol)?;
    }
    Ok(())
}

/// A single-layer forward is the input-projection GEMM plus one dispatch per step.
#[test]
fn single_layer_forward_records_t_plus_one_dispatches() {
    let dev = Device::new().unwrap();
    for lstm in [true, false] {
        let p = Problem {
            lstm,
            t: 13,
            b: 5,
            i: 7,
            h: 9,
            layers: 1,
            bidirectional: false,
            batch_first: false,
            with_h0: false,
            seed: 3,
        };
        let (_, gw) = weights_for(&p, &dev, 0, p.i);
        let kind = if lstm { RnnKind::Lstm } else { RnnKind::Gru };
        let rnn = Rnn::new(kind, 1, false, false, vec![gw]).unwrap();
        let x = upload(&dev, &values(13 * 5 * 7, 1, 1.0), &[13, 5, 7], DType::F32);
        let before = dev.stats().dispatches;
        let out = rnn.forward(&x, None, None).unwrap();
        assert_eq!(dev.stats().dispatches - before, 13 + 1, "lstm={lstm}");
        // The outputs are views of the state buffer: reading them back costs no dispatch.
        assert_eq!(out.output.shape(), &[13, 5, 9]);
    }
}

/// PyTorch state-dict names load the right tensors (checked through the computation).
#[test]
fn loads_pytorch_named_weights() {
    let dev = device();
    let p = Problem {
        lstm: true,
        t: 4,
        b: 3,
        i: 5,
        h: 6,
        layers: 2,
        bidirectional: true,
        batch_first: false,
        with_h0: false,
        seed: 11,
    };
    let mut named = HashMap::new();
    let mut refw = Vec::new();
    for l in 0..2 {
        for (dir, suffix) in ["", "_reverse"].iter().enumerate() {
            let in_size = if l == 0 { p.i } else { 2 * p.h };
            let (r, g) = weights_for(&p, dev, l * 2 + dir, in_size);
            named.insert(format!("weight_ih_l{l}{suffix}"), g.w_ih.clone());
            named.insert(format!("weight_hh_l{l}{suffix}"), g.w_hh.clone());
            named.insert(format!("bias_ih_l{l}{suffix}"), g.b_ih.clone());
            named.insert(format!("bias_hh_l{l}{suffix}"), g.b_hh.clone());
            refw.push(r);
        }
    }
    let rnn = Rnn::from_pytorch(RnnKind::Lstm, &named, 2, true, false).unwrap();
    let x = values(4 * 3 * 5, 8, 1.0);
    let (want, _, _) = rnn_ref::sequence(true, &refw, 2, 2, &x, 4, 3, 5, 6, None, None);
    let out = rnn
        .forward(&upload(dev, &x, &[4, 3, 5], DType::F32), None, None)
        .unwrap();
    let got = download(&out.output).unwrap();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-4, "{g} vs {w}");
    }
    named.remove("weight_hh_l1_reverse");
    let e = Rnn::from_pytorch(RnnKind::Lstm, &named, 2, true, false).unwrap_err();
    assert!(e.to_string().contains("weight_hh_l1_reverse"), "{e}");
}

#[test]
fn rnn_errors_name_the_values() {
    let dev = device();
    let t = |shape: &[usize]| Tensor::zeros(dev, shape, DType::F32).unwrap();
    // weight_hh must be [G*H, H].
    let e = RnnWeights::new(RnnKind::Lstm, &t(&[16, 3]), &t(&[12, 4]), None, None).unwrap_err();
    assert!(
        matches!(e, wgtensor::Error::Shape { op: "lstm", .. }),
        "{e:?}"
    );
    // weight_ih rows must match weight_hh.
    let e = RnnWeights::new(RnnKind::Gru, &t(&[9, 3]), &t(&[12, 4]), None, None).unwrap_err();
    assert!(
        matches!(e, wgtensor::Error::Shape { op: "gru", .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("[9, 3]"), "{e}");
    let w = RnnWeights::new(RnnKind::Lstm, &t(&[16, 3]), &t(&[16, 4]), None, None).unwrap();
    let rnn = Rnn::new(RnnKind::Lstm, 1, false, false, vec![w.clone()]).unwrap();
    // Input size mismatch.
    let e = rnn.forward(&t(&[2, 5, 7]), None, None).unwrap_err();
    assert!(e.to_string().contains('7'), "{e}");
    // State shape mismatch.
    let e = rnn
        .forward(&t(&[2, 5, 3]), Some(&t(&[1, 4, 4])), None)
        .unwrap_err();
    assert!(matches!(e, wgtensor::Error::Shape { .. }), "{e:?}");
    assert!(e.to_string().contains("[1, 5, 4]"), "{e}");
    // Wrong rank input; an empty sequence cannot even be built (zero-size dims are rejected).
    assert!(rnn.forward(&t(&[5, 3]), None, None).is_err());
    assert!(matches!(
        Tensor::zeros(dev, &[0, 5, 3], DType::F32),
        Err(wgtensor::Error::Size { .. })
    ));
    // Layer count and weight sets must agree.
    let e = Rnn::new(RnnKind::Lstm, 2, false, false, vec![w]).unwrap_err();
    assert!(
        matches!(e, wgtensor::Error::InvalidArgument { .. }),
        "{e:?}"
    );
}

// ---- backward (BPTT) -----------------------------------------------------------------------

/// Weights, GPU Rnn and the host data of a backward problem.
struct BackwardCase {
    refw: Vec<RefWeights>,
    rnn: Rnn,
    x: Vec<f64>,
    h0: Option<Vec<f64>>,
    c0: Option<Vec<f64>>,
    dy: Vec<f64>,
    dh_n: Option<Vec<f64>>,
    dc_n: Option<Vec<f64>>,
}

fn backward_case(p: &Problem, with_dhn: bool, dev: &Device) -> BackwardCase {
    let d = if p.bidirectional { 2 } else { 1 };
    let (refw, rnn) = build_rnn(p, dev);
    let states = p.layers * d * p.b * p.h;
    BackwardCase {
        refw,
        rnn,
        x: values(p.t * p.b * p.i, p.seed ^ 99, 1.0),
        h0: p.with_h0.then(|| values(states, p.seed ^ 5, 0.5)),
        c0: (p.with_h0 && p.lstm).then(|| values(states, p.seed ^ 6, 0.5)),
        dy: values(p.t * p.b * d * p.h, p.seed ^ 7, 1.0),
        dh_n: with_dhn.then(|| values(states, p.seed ^ 8, 1.0)),
        dc_n: (with_dhn && p.lstm).then(|| values(states, p.seed ^ 9, 1.0)),
    }
}

/// `[T, B, N]` host data uploaded as the layout the Rnn expects (`[B, T, N]` when batch_first).
fn upload_seq(dev: &Device, v: &[f64], shape: [usize; 3], batch_first: bool) -> Tensor {
    let t = upload(dev, v, &shape, DType::F32);
    if batch_first {
        t.transpose(0, 1).unwrap().contiguous().unwrap()
    } else {
        t
    }
}

/// GPU gradients as host vectors: dx [T, B, I] (time-major), dh0, dc0, per-set weight grads.
async fn gpu_grads(p: &Problem, c: &BackwardCase, dev: &Device) -> rnn_ref::RefGrads {
    let d = if p.bidirectional { 2 } else { 1 };
    let sshape = [p.layers * d, p.b, p.h];
    let st = |v: &Option<Vec<f64>>| v.as_ref().map(|v| upload(dev, v, &sshape, DType::F32));
    let xt = upload_seq(dev, &c.x, [p.t, p.b, p.i], p.batch_first);
    let (h0, c0, dhn, dcn) = (st(&c.h0), st(&c.c0), st(&c.dh_n), st(&c.dc_n));
    let (_, saved) = c.rnn.forward_train(&xt, h0.as_ref(), c0.as_ref()).unwrap();
    let dy = upload_seq(dev, &c.dy, [p.t, p.b, d * p.h], p.batch_first);
    let g = c
        .rnn
        .backward(&saved, &dy, dhn.as_ref(), dcn.as_ref())
        .unwrap();
    let dx = if p.batch_first {
        g.dx.transpose(0, 1).unwrap()
    } else {
        g.dx.clone()
    };
    assert_eq!(dx.shape(), &[p.t, p.b, p.i]);
    assert_eq!(g.dh0.shape(), &sshape);
    assert_eq!(g.dc0.is_some(), p.lstm);
    let get = async |t: &Tensor| download_async(t).await.unwrap();
    let mut dw = Vec::new();
    for w in &g.weights {
        dw.push(RefWeights {
            w_ih: get(&w.w_ih).await,
            w_hh: get(&w.w_hh).await,
            b_ih: get(&w.b_ih).await,
            b_hh: get(&w.b_hh).await,
        });
    }
    rnn_ref::RefGrads {
        dx: get(&dx).await,
        dh0: get(&g.dh0).await,
        dc0: match &g.dc0 {
            Some(t) => get(t).await,
            None => vec![0.0; p.layers * d * p.b * p.h],
        },
        dw,
    }
}

fn ref_grads(p: &Problem, c: &BackwardCase) -> rnn_ref::RefGrads {
    let d = if p.bidirectional { 2 } else { 1 };
    rnn_ref::sequence_backward(
        p.lstm,
        &c.refw,
        p.layers,
        d,
        &c.x,
        p.t,
        p.b,
        p.i,
        p.h,
        c.h0.as_deref(),
        c.c0.as_deref(),
        &c.dy,
        c.dh_n.as_deref(),
        c.dc_n.as_deref(),
    )
}

/// Gradients are sums over up to T * B products of bounded terms, each step's error is that of
/// the forward (see the module note) times bounded gate derivatives; the bound scales with the
/// largest gradient magnitude of the tensor checked.
fn check_grad(what: &str, got: &[f64], want: &[f64], base: f64) -> Result<(), TestCaseError> {
    let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    check_close(what, got, want, base * scale)
}

fn compare_grads(
    p: &Problem,
    got: &rnn_ref::RefGrads,
    want: &rnn_ref::RefGrads,
) -> Result<(), TestCaseError> {
    let d = if p.bidirectional { 2 } else { 1 };
    let base = 4e-6 * (p.t * p.layers) as f64 * (p.i + d * p.h + 8) as f64;
    check_grad("dx", &got.dx, &want.dx, base)?;
    check_grad("dh0", &got.dh0, &want.dh0, base)?;
    if p.lstm {
        check_grad("dc0", &got.dc0, &want.dc0, base)?;
    }
    prop_assert_eq!(got.dw.len(), want.dw.len());
    for (k, (g, w)) in got.dw.iter().zip(&want.dw).enumerate() {
        check_grad(&format!("dW_ih[{k}]"), &g.w_ih, &w.w_ih, base)?;
        check_grad(&format!("dW_hh[{k}]"), &g.w_hh, &w.w_hh, base)?;
        check_grad(&format!("db_ih[{k}]"), &g.b_ih, &w.b_ih, base)?;
        check_grad(&format!("db_hh[{k}]"), &g.b_hh, &w.b_hh, base)?;
    }
    Ok(())
}

pub(crate) fn backward_problem() -> impl Strategy<Value = (Problem, bool)> {
    (
        any::<bool>(),
        1usize..=8,
        1usize..=6,
        1usize..=6,
        0usize..=4,
        1usize..=2,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(
            |(lstm, t, b, i, hh, layers, bidirectional, batch_first, with_h0, with_dhn, seed)| {
                (
                    Problem {
                        lstm,
                        t,
                        b,
                        i,
                        // Odd hidden sizes 1..=9.
                        h: 2 * hh + 1,
                        layers,
                        bidirectional,
                        batch_first,
                        with_h0,
                        seed,
                    },
                    with_dhn,
                )
            },
        )
}

pub(crate) async fn run_backward(
    p: &Problem,
    with_dhn: bool,
    dev: &Device,
) -> Result<(), TestCaseError> {
    let c = backward_case(p, with_dhn, dev);
    compare_grads(p, &gpu_grads(p, &c, dev).await, &ref_grads(p, &c))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn rnn_backward_f32((p, with_dhn) in backward_problem()) {
        pollster::block_on(run_backward(&p, with_dhn, device()))?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn rnn_backward_portable_f32((p, with_dhn) in backward_problem()) {
        pollster::block_on(run_backward(&p, with_dhn, portable_device()))?;
    }
}

/// Loss sum(y * dy) + sum(h_n * dh_n) + sum(c_n * dc_n) of the f64 reference forward.
fn ref_loss(p: &Problem, c: &BackwardCase) -> f64 {
    let d = if p.bidirectional { 2 } else { 1 };
    let (y, hn, cn) = rnn_ref::sequence(
        p.lstm,
        &c.refw,
        p.layers,
        d,
        &c.x,
        p.t,
        p.b,
        p.i,
        p.h,
        c.h0.as_deref(),
        c.c0.as_deref(),
    );
    let dot = |a: &[f64], b: &Option<Vec<f64>>| {
        b.as_ref()
            .map_or(0.0, |b| a.iter().zip(b).map(|(x, y)| x * y).sum())
    };
    y.iter().zip(&c.dy).map(|(a, b)| a * b).sum::<f64>() + dot(&hn, &c.dh_n) + dot(&cn, &c.dc_n)
}

/// Central differences of the f64 reference forward check both the reference BPTT (tightly)
/// and the GPU gradients (at f32 accuracy), on tiny 2-layer bidirectional cases.
#[test]
fn rnn_backward_matches_finite_differences() {
    let dev = device();
    for lstm in [true, false] {
        let p = Problem {
            lstm,
            t: 3,
            b: 2,
            i: 3,
            h: 3,
            layers: 2,
            bidirectional: true,
            batch_first: false,
            with_h0: true,
            seed: 21,
        };
        let mut c = backward_case(&p, true, dev);
        let want = ref_grads(&p, &c);
        let got = pollster::block_on(gpu_grads(&p, &c, dev));
        let eps = 1e-5;
        let check = |what: &str, analytic_ref: f64, analytic_gpu: f64, fd: f64| {
            assert!(
                (analytic_ref - fd).abs() <= 1e-7 * (1.0 + fd.abs()),
                "lstm={lstm} {what}: reference {analytic_ref} vs finite difference {fd}"
            );
            assert!(
                (analytic_gpu - fd).abs() <= 1e-4 * (1.0 + fd.abs()),
                "lstm={lstm} {what}: gpu {analytic_gpu} vs finite difference {fd}"
            );
        };
        macro_rules! fd {
            ($field:expr, $k:expr) => {{
                let v = $field[$k];
                $field[$k] = v + eps;
                let up = ref_loss(&p, &c);
                $field[$k] = v - eps;
                let down = ref_loss(&p, &c);
                $field[$k] = v;
                (up - down) / (2.0 * eps)
            }};
        }
        for set in 0..4 {
            for k in [0, 5, 13] {
                let f = fd!(c.refw[set].w_ih, k);
                check(
                    &format!("dW_ih[{set}][{k}]"),
                    want.dw[set].w_ih[k],
                    got.dw[set].w_ih[k],
                    f,
                );
                let f = fd!(c.refw[set].w_hh, k);
                check(
                    &format!("dW_hh[{set}][{k}]"),
                    want.dw[set].w_hh[k],
                    got.dw[set].w_hh[k],
                    f,
                );
            }
            for k in [1, 7] {
                let f = fd!(c.refw[set].b_ih, k);
                check(
                    &format!("db_ih[{set}][{k}]"),
                    want.dw[set].b_ih[k],
                    got.dw[set].b_ih[k],
                    f,
                );
                let f = fd!(c.refw[set].b_hh, k);
                check(
                    &format!("db_hh[{set}][{k}]"),
                    want.dw[set].b_hh[k],
                    got.dw[set].b_hh[k],
                    f,
                );
            }
        }
        for k in [0, 4, 11, 17] {
            let f = fd!(c.x, k);
            check(&format!("dx[{k}]"), want.dx[k], got.dx[k], f);
            let f = fd!(c.h0.as_mut().unwrap(), k);
            check(&format!("dh0[{k}]"), want.dh0[k], got.dh0[k], f);
            if lstm {
                let f = fd!(c.c0.as_mut().unwrap(), k);
                check(&format!("dc0[{k}]"), want.dc0[k], got.dc0[k], f);
            }
        }
    }
}

/// Backward costs exactly one dispatch per step and direction (the rest is per layer).
#[test]
fn backward_records_one_dispatch_per_step() {
    let dev = Device::new().unwrap();
    for lstm in [true, false] {
        let mut counts = Vec::new();
        for t in [5, 13] {
            let p = Problem {
                lstm,
                t,
                b: 4,
                i: 5,
                h: 7,
                layers: 1,
                bidirectional: false,
                batch_first: false,
                with_h0: false,
                seed: 4,
            };
            let (_, gw) = weights_for(&p, &dev, 0, p.i);
            let kind = if lstm { RnnKind::Lstm } else { RnnKind::Gru };
            let rnn = Rnn::new(kind, 1, false, false, vec![gw]).unwrap();
            let x = upload(&dev, &values(t * 4 * 5, 1, 1.0), &[t, 4, 5], DType::F32);
            let dy = upload(&dev, &values(t * 4 * 7, 2, 1.0), &[t, 4, 7], DType::F32);
            let (_, saved) = rnn.forward_train(&x, None, None).unwrap();
            let before = dev.stats().dispatches;
            rnn.backward(&saved, &dy, None, None).unwrap();
            counts.push(dev.stats().dispatches - before);
        }
        assert_eq!(counts[1] - counts[0], 8, "lstm={lstm}: {counts:?}");
    }
}

#[test]
fn rnn_backward_errors_name_the_values() {
    let dev = device();
    let t = |shape: &[usize]| Tensor::zeros(dev, shape, DType::F32).unwrap();
    let lstm_w = RnnWeights::new(RnnKind::Lstm, &t(&[16, 3]), &t(&[16, 4]), None, None).unwrap();
    let rnn = Rnn::new(RnnKind::Lstm, 1, false, false, vec![lstm_w]).unwrap();
    let (_, saved) = rnn.forward_train(&t(&[2, 5, 3]), None, None).unwrap();
    // dy must match the output [T, B, D*H].
    let e = rnn
        .backward(&saved, &t(&[2, 5, 3]), None, None)
        .unwrap_err();
    assert!(
        matches!(e, wgtensor::Error::Shape { op: "lstm", .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("[2, 5, 4]"), "{e}");
    let e = rnn
        .backward(&saved, &t(&[5, 2, 4]), None, None)
        .unwrap_err();
    assert!(e.to_string().contains("[5, 2, 4]"), "{e}");
    // Final-state gradients must be [L*D, B, H].
    let e = rnn
        .backward(&saved, &t(&[2, 5, 4]), Some(&t(&[1, 5, 3])), None)
        .unwrap_err();
    assert!(e.to_string().contains("dh_n"), "{e}");
    let e = rnn
        .backward(&saved, &t(&[2, 5, 4]), None, Some(&t(&[2, 5, 4])))
        .unwrap_err();
    assert!(e.to_string().contains("dc_n"), "{e}");
    // A GRU has no dc_n; a saved state from another Rnn is rejected.
    let gru_w = RnnWeights::new(RnnKind::Gru, &t(&[12, 3]), &t(&[12, 4]), None, None).unwrap();
    let gru = Rnn::new(RnnKind::Gru, 1, true, false, vec![gru_w.clone(), gru_w]).unwrap();
    let (_, gsaved) = gru.forward_train(&t(&[2, 5, 3]), None, None).unwrap();
    let e = gru
        .backward(&gsaved, &t(&[2, 5, 8]), None, Some(&t(&[2, 5, 4])))
        .unwrap_err();
    assert!(
        matches!(e, wgtensor::Error::InvalidArgument { .. }),
        "{e:?}"
    );
    assert!(rnn.backward(&gsaved, &t(&[2, 5, 4]), None, None).is_err());
}

/// Batches past one subgroup block (32 rows; sg8 stacks up to 4 per workgroup) and hidden
/// sizes past one 8-unit block, in both directions.
#[test]
fn rnn_backward_wide_batch() {
    for (lstm, b, h, bidirectional) in [(true, 70, 11, false), (false, 37, 17, true)] {
        let p = Problem {
            lstm,
            t: 3,
            b,
            i: 5,
            h,
            layers: 1,
            bidirectional,
            batch_first: false,
            with_h0: true,
            seed: 77,
        };
        for dev in [device(), portable_device()] {
            pollster::block_on(run_backward(&p, true, dev)).unwrap();
        }
    }
}
