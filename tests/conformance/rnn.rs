//! LSTM / GRU sequences and cells against the f64 reference in tests/common/rnn_ref.rs.
//!
//! Tolerance: every step's gate pre-activations are f32 dot products of length I + H with
//! |w|, |x|, |h| <= 1, so each carries <= (I + H + 2) * eps_f32 relative error of its magnitude;
//! sigmoid/tanh/exp add a few ulps and are 1-Lipschitz or less, and the recurrence is a
//! contraction for the small weights used here, so errors do not compound beyond ~T times the
//! per-step error. Outputs are bounded by 1: |err| <= 2e-6 * T * (I + H + 8) is generous yet
//! orders of magnitude below what a wrong gate, bias or index would produce.
//!
//! f16 (f16 tensors, f32 arithmetic): inputs, weights, states and output gradients are
//! generated as f16 values and the reference runs on exactly those, so the error is that of the
//! f32 arithmetic (bounded as above) plus the rounding of every intermediate the kernels store
//! in f16 (src/ops/rnn):
//! - forward: the input projection xp = x W_ih^T + b_ih (a GEMM: f32 accumulation, one
//!   rounding); each step's h and c (the state sequences, which are also the layer output, the
//!   next layer's input and h_n / c_n); in training the gate activations (LSTM i, f, g, o; GRU
//!   r, z, n and W_hn h + b_hn), which BPTT reads back together with the stored states;
//! - backward: per step the gate gradients dA_h (GRU also dA_x, its n block differs) and the
//!   carries (LSTM dc * f, GRU dh * z); per layer and direction dW_ih, dW_hh (GEMMs), db_ih,
//!   db_hh (column sums), dx (a GEMM; with two directions the first one's dx is stored and
//!   added as the second GEMM's C; it is the next lower layer's dy) and dh0 (a GEMM whose C is
//!   the stored h carry); dc0 is the last stored c carry.
//!
//! A store moves its value by at most one f16 ulp (<= 2^-10 |v|: WGSL lets f32 -> f16 return
//! either neighbour) or flushes a subnormal. How that propagates depends on the problem, and a
//! worst-case bound (absolute row sums of W_hh and W_ih, maximal gate slopes) grows by more than
//! 1x per step, ~100x above the errors seen: useless as a check. So the tests measure the
//! propagation of this very model instead: rnn_ref's `*_with` functions call a hook at each of
//! these stores, in the kernels' data flow, and `McRound` moves every stored value by a random
//! fraction in [-1, 1] of its ulp. For each checked tensor
//!
//!     tol = 2 * spread + ulp16(max |want|) + (the f32 bound),
//!
//! spread = its largest deviation from the exact reference over MC_RUNS runs of the model; the
//! ulp term is the tensor's own last store, which a few samples need not reach. lavapipe
//! rounds to nearest (<= 1/2 ulp), less than the model: over 300-400 random problems per test
//! the GPU error stayed below 0.9 spread and 0.4 tol (outputs, h_n, c_n <= 1.4 ulp), and a
//! run of the model with round-to-nearest stores matched the GPU forward to <= 1/2 ulp, mostly
//! bit for bit, so the list above is the kernels' actual one. For scale: a systematic 4-ulp
//! error in the stored h or c carry fails these tests; 2 ulp, or keeping the step kernels'
//! dot products at f16 precision (short sums here), is within f16's own noise.

use std::collections::HashMap;

use proptest::prelude::*;
use wgtensor::ops::{gru_cell, lstm_cell, Rnn, RnnKind, RnnWeights};
use wgtensor::{DType, Device, Tensor};

#[cfg(not(target_arch = "wasm32"))]
use crate::common::download;
use crate::common::rnn_ref::{self, RefWeights};
use crate::common::{device, download_async, portable_device, require_f16, round_to_dtype, upload};

// f16 case counts (each f16 case also runs the reference MC_RUNS more times for its tolerance);
// the f16 variants share the kernels' code with f32 and run fewer cases.
const CASES_F16: u32 = 12;
const CASES_PORTABLE_F16: u32 = 8;

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
    dtype: DType,
}

pub(crate) fn problem(dtype: DType) -> impl Strategy<Value = Problem> {
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
            move |(lstm, t, b, i, h, layers, bidirectional, batch_first, with_h0, seed)| Problem {
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
                dtype,
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

/// [`values`] rounded to `dtype`: exactly the values the GPU tensors hold.
fn values_in(dtype: DType, n: usize, seed: u64, scale: f64) -> Vec<f64> {
    values(n, seed, scale)
        .into_iter()
        .map(|v| round_to_dtype(dtype, v))
        .collect()
}

fn weights_for(p: &Problem, dev: &Device, idx: usize, in_size: usize) -> (RefWeights, RnnWeights) {
    let g = rnn_ref::gates(p.lstm);
    let seed = p.seed ^ (idx as u64 * 7919);
    // PyTorch initializes with U(-1/sqrt(H), 1/sqrt(H)).
    let k = 1.0 / (p.h as f64).sqrt();
    let v = |n, seed| values_in(p.dtype, n, seed, k);
    let rw = RefWeights {
        w_ih: v(g * p.h * in_size, seed + 1),
        w_hh: v(g * p.h * p.h, seed + 2),
        b_ih: v(g * p.h, seed + 3),
        b_hh: v(g * p.h, seed + 4),
    };
    let kind = if p.lstm { RnnKind::Lstm } else { RnnKind::Gru };
    let gw = RnnWeights::new(
        kind,
        &upload(dev, &rw.w_ih, &[g * p.h, in_size], p.dtype),
        &upload(dev, &rw.w_hh, &[g * p.h, p.h], p.dtype),
        Some(&upload(dev, &rw.b_ih, &[g * p.h], p.dtype)),
        Some(&upload(dev, &rw.b_hh, &[g * p.h], p.dtype)),
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

/// f32 bounds of a forward's (output and h, c) (the module note).
fn seq_tol32(p: &Problem) -> (f64, f64) {
    let d = if p.bidirectional { 2 } else { 1 };
    let tol = 2e-6 * p.t as f64 * p.layers as f64 * (p.i + d * p.h + 8) as f64;
    // c is not bounded by 1 (it accumulates up to T), so scale the bound with T.
    (tol, tol * p.t as f64)
}

/// Tolerances of a forward's output, h_n and c_n: the f32 bounds, and for f16 the storage
/// model's spread on top (module note).
#[allow(clippy::too_many_arguments)]
fn forward_tols(
    p: &Problem,
    refw: &[RefWeights],
    x: &[f64],
    h0: Option<&[f64]>,
    c0: Option<&[f64]>,
    want: [&[f64]; 3],
) -> [f64; 3] {
    let d = if p.bidirectional { 2 } else { 1 };
    let (tol, tol_c) = seq_tol32(p);
    let tol32 = [tol, tol, tol_c];
    match p.dtype {
        DType::F32 | DType::I32 => tol32,
        DType::F16 => {
            let spread = mc_spread(p.seed, &want, |st| {
                let (y, h, c) = rnn_ref::sequence_with(
                    p.lstm, refw, p.layers, d, x, p.t, p.b, p.i, p.h, h0, c0, st,
                );
                vec![y, h, c]
            });
            [0, 1, 2].map(|k| f16_tol(spread[k], want[k], tol32[k]))
        }
    }
}

fn max_abs(v: &[f64]) -> f64 {
    v.iter().fold(0.0f64, |m, x| m.max(x.abs()))
}

/// f16 tolerance of one tensor (module note): twice the storage model's spread, one ulp of the
/// tensor's largest value (its own final store), plus the f32 bound.
fn f16_tol(spread: f64, want: &[f64], tol32: f64) -> f64 {
    2.0 * spread + ulp16(max_abs(want)) + tol32
}

/// Smallest normal f16.
const MIN_NORMAL16: f64 = 1.0 / 16384.0;

/// Spacing of f16 values at |v| (the subnormal spacing 2^-24 below the normal range).
fn ulp16(v: f64) -> f64 {
    if v.abs() < MIN_NORMAL16 {
        return MIN_NORMAL16 / 1024.0;
    }
    2f64.powi(v.abs().log2().floor() as i32 - 10)
}

/// The f16 storage model as a store hook: every stored value moves by a uniform random fraction
/// in [-1, 1] of its f16 ulp; a subnormal lands anywhere between 0 (flushed) and itself.
struct McRound(u64);

impl McRound {
    fn uniform(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 11) as f64) / ((1u64 << 53) as f64)
    }
}

impl rnn_ref::Store for McRound {
    fn store(&mut self, v: f64) -> f64 {
        let r = self.uniform();
        if v.abs() < MIN_NORMAL16 {
            v * r
        } else {
            v + (2.0 * r - 1.0) * ulp16(v)
        }
    }
}

/// Runs of the storage model per tolerance.
const MC_RUNS: u64 = 6;

/// Per output tensor, the largest deviation from `exact` over [`MC_RUNS`] runs of `run` under
/// the storage model.
fn mc_spread(
    seed: u64,
    exact: &[&[f64]],
    run: impl Fn(&mut dyn rnn_ref::Store) -> Vec<Vec<f64>>,
) -> Vec<f64> {
    let mut dev = vec![0.0f64; exact.len()];
    for k in 0..MC_RUNS {
        let mut st = McRound(seed ^ (k + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        for (d, (got, want)) in dev.iter_mut().zip(run(&mut st).iter().zip(exact)) {
            for (g, w) in got.iter().zip(want.iter()) {
                *d = d.max((g - w).abs());
            }
        }
    }
    dev
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
    let rnn = Rnn::new(
        kind,
        wgtensor::ops::RnnOptions {
            num_layers: p.layers,
            bidirectional: p.bidirectional,
            batch_first: p.batch_first,
        },
        gpuw,
    )
    .unwrap();
    (refw, rnn)
}

pub(crate) async fn run_sequence(p: &Problem, dev: &Device) -> Result<(), TestCaseError> {
    let d = if p.bidirectional { 2 } else { 1 };
    let (refw, rnn) = build_rnn(p, dev);
    let x = values_in(p.dtype, p.t * p.b * p.i, p.seed ^ 99, 1.0);
    let states = p.layers * d * p.b * p.h;
    let h0 = p
        .with_h0
        .then(|| values_in(p.dtype, states, p.seed ^ 5, 0.5));
    let c0 = (p.with_h0 && p.lstm).then(|| values_in(p.dtype, states, p.seed ^ 6, 0.5));
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
    let xin = upload_seq(dev, &x, [p.t, p.b, p.i], p.batch_first, p.dtype);
    let sshape = [p.layers * d, p.b, p.h];
    let h0t = h0.as_ref().map(|v| upload(dev, v, &sshape, p.dtype));
    let c0t = c0.as_ref().map(|v| upload(dev, v, &sshape, p.dtype));
    let out = rnn.forward(&xin, h0t.as_ref(), c0t.as_ref()).unwrap();
    let y = if p.batch_first {
        out.output.transpose(0, 1).unwrap()
    } else {
        out.output.clone()
    };
    prop_assert_eq!(y.shape(), &[p.t, p.b, d * p.h][..]);
    prop_assert_eq!(y.dtype(), p.dtype);
    let [tol_y, tol_h, tol_c] = forward_tols(
        p,
        &refw,
        &x,
        h0.as_deref(),
        c0.as_deref(),
        [&want_y, &want_h, &want_c],
    );
    check_close("output", &download_async(&y).await.unwrap(), &want_y, tol_y)?;
    check_close(
        "h_n",
        &download_async(&out.h_n).await.unwrap(),
        &want_h,
        tol_h,
    )?;
    if p.lstm {
        check_close(
            "c_n",
            &download_async(out.c_n.as_ref().unwrap()).await.unwrap(),
            &want_c,
            tol_c,
        )?;
    } else {
        prop_assert!(out.c_n.is_none());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn rnn_sequence_f32(p in problem(DType::F32)) {
        pollster::block_on(run_sequence(&p, device()))?;
    }

    #[test]
    fn rnn_sequence_portable_f32(p in problem(DType::F32)) {
        pollster::block_on(run_sequence(&p, portable_device()))?;
    }
}

#[cfg(not(target_arch = "wasm32"))]
proptest! {
    #![proptest_config(ProptestConfig { cases: 16, failure_persistence: None, ..ProptestConfig::default() })]

    /// The GPU step (`rnn_wg.wgsl`, the large-tile core) forced on lavapipe.
    #[test]
    fn rnn_sequence_gpu_plans_f32(p in problem(DType::F32)) {
        pollster::block_on(run_sequence(&p, crate::common::gpu_plans_device()))?;
    }
}

/// The GPU steps over several row tiles (64 batch rows each) and ragged unit tiles (16 units
/// forward, 64 backward), LSTM and GRU, both directions, with h0; the backward's recurrent
/// product in K slices. Every case has more than 64 units: smaller ones run the sequence
/// kernels on GPUs (`rnn_sequence_kernel_shapes`).
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn rnn_gpu_step_spans_tiles() {
    for (lstm, b, h) in [(true, 70, 161), (false, 129, 145), (true, 64, 144)] {
        let p = Problem {
            lstm,
            t: 3,
            b,
            i: 5,
            h,
            layers: 1,
            bidirectional: true,
            batch_first: false,
            with_h0: true,
            seed: b as u64,
            dtype: DType::F32,
        };
        pollster::block_on(run_sequence(&p, crate::common::gpu_plans_device()))
            .unwrap_or_else(|e| panic!("lstm {lstm} b {b} h {h}: {e}"));
    }
    for (lstm, b, h, with_dhn) in [
        (true, 5, 130, true),
        (false, 66, 140, false),
        (true, 3, 129, false),
    ] {
        let p = Problem {
            lstm,
            t: 3,
            b,
            i: 4,
            h,
            layers: 2,
            bidirectional: true,
            batch_first: false,
            with_h0: true,
            seed: 7 + b as u64,
            dtype: DType::F32,
        };
        pollster::block_on(run_backward(
            &p,
            with_dhn,
            crate::common::gpu_plans_device(),
        ))
        .unwrap_or_else(|e| panic!("backward: lstm {lstm} b {b} h {h}: {e}"));
    }
}

/// The K-split GPU step (a device planning as a 256-slot GPU, where every shape here has too
/// few large tiles): several row tiles (16 rows) and unit tiles (8 units), ragged edges, LSTM
/// and GRU, both directions, f32 and f16; more than 64 units (smaller ones run the sequence
/// kernel on GPUs), so K is always longer than the 8 slices.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn rnn_k_split_step_spans_tiles() {
    let dev = crate::common::wide_gpu_plans_device();
    assert_eq!(dev.caps().parallelism, 256);
    let mut cases = vec![
        (true, 70, 161, DType::F32),
        (false, 33, 137, DType::F32),
        (true, 5, 129, DType::F32),
        (false, 16, 136, DType::F32),
    ];
    if dev.supports_f16() {
        cases.extend([(true, 20, 149, DType::F16), (false, 9, 130, DType::F16)]);
    }
    for (lstm, b, h, dtype) in cases {
        let p = Problem {
            lstm,
            t: 3,
            b,
            i: 6,
            h,
            layers: 2,
            bidirectional: true,
            batch_first: false,
            with_h0: true,
            seed: 11 + b as u64,
            dtype,
        };
        pollster::block_on(run_sequence(&p, dev))
            .unwrap_or_else(|e| panic!("lstm {lstm} b {b} h {h} {dtype:?}: {e}"));
    }
}

/// The sequence kernels (every step of a direction in one dispatch, GPUs with up to 64
/// units), forward and backward, in each of their shapes on the `gpu_plans` device (2 slots):
/// forward 4, 2 and 1 batch rows per invocation (B 37 and 70, 9, 3 and 5), backward 4
/// (LSTM of 32 units), 2 (50 to 64 units) and 1 (B 3 and 5); ragged rows and units, LSTM and GRU,
/// two bidirectional layers with h0 and c0 (and dh_n, dc_n in half the backward cases), f32
/// and f16; on a 256-slot device, one row per invocation over several workgroups; sequences
/// of 70 and 150 steps, which take a dispatch per 64 steps.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn rnn_sequence_kernel_shapes() {
    let narrow = crate::common::gpu_plans_device();
    let wide = crate::common::wide_gpu_plans_device();
    let mut cases = vec![
        (true, 37, 64, DType::F32, narrow, 5),
        (false, 70, 50, DType::F32, narrow, 5),
        (true, 9, 60, DType::F32, narrow, 5),
        (false, 3, 63, DType::F32, narrow, 5),
        (true, 5, 1, DType::F32, narrow, 5),
        (true, 37, 32, DType::F32, narrow, 5),
        (true, 9, 64, DType::F32, narrow, 5),
        (false, 200, 31, DType::F32, wide, 5),
        // Past SEQ_CHUNK (64) steps: three dispatches a direction, each continuing the last.
        (true, 3, 9, DType::F32, narrow, 150),
        (false, 20, 5, DType::F32, narrow, 70),
    ];
    if narrow.supports_f16() {
        cases.extend([
            (true, 20, 48, DType::F16, narrow, 5),
            (false, 17, 33, DType::F16, narrow, 5),
        ]);
    }
    for (n, (lstm, b, h, dtype, dev, t)) in cases.into_iter().enumerate() {
        let p = Problem {
            lstm,
            t,
            b,
            i: 6,
            h,
            layers: 2,
            bidirectional: true,
            batch_first: b % 2 == 1,
            with_h0: true,
            seed: 21 + b as u64,
            dtype,
        };
        pollster::block_on(run_sequence(&p, dev))
            .unwrap_or_else(|e| panic!("lstm {lstm} b {b} h {h} {dtype:?}: {e}"));
        pollster::block_on(run_backward(&p, n % 2 == 0, dev))
            .unwrap_or_else(|e| panic!("backward: lstm {lstm} b {b} h {h} {dtype:?}: {e}"));
    }
}

/// The arguments of [`run_cell`]: (lstm, batch, input, hidden, seed).
pub(crate) fn cell_args() -> impl Strategy<Value = (bool, usize, usize, usize, u64)> {
    (
        any::<bool>(),
        1usize..=16,
        1usize..=12,
        1usize..=20,
        any::<u64>(),
    )
}

/// One `lstm_cell` / `gru_cell` step on random states.
pub(crate) async fn run_cell(
    dtype: DType,
    lstm: bool,
    b: usize,
    i: usize,
    h: usize,
    seed: u64,
) -> Result<(), TestCaseError> {
    let dev = device();
    let p = Problem {
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
        dtype,
    };
    let (rw, gw) = weights_for(&p, dev, 0, i);
    let x = values_in(dtype, b * i, seed ^ 1, 1.0);
    let hv = values_in(dtype, b * h, seed ^ 2, 0.5);
    let cv = values_in(dtype, b * h, seed ^ 3, 0.5);
    let (want_h, want_c) = rnn_ref::cell(lstm, &rw, &x, &hv, &cv, b, i, h);
    let xt = upload(dev, &x, &[b, i], dtype);
    let ht = upload(dev, &hv, &[b, h], dtype);
    // A cell is a one-step sequence (output = h_n).
    let [_, tol_h, tol_c] = forward_tols(
        &p,
        &[rw],
        &x,
        Some(&hv),
        Some(&cv),
        [&want_h, &want_h, &want_c],
    );
    if lstm {
        let ct = upload(dev, &cv, &[b, h], dtype);
        let (h2, c2) = lstm_cell(&xt, &ht, &ct, &gw).unwrap();
        prop_assert_eq!(h2.shape(), &[b, h][..]);
        prop_assert_eq!(h2.dtype(), dtype);
        check_close("h'", &download_async(&h2).await.unwrap(), &want_h, tol_h)?;
        check_close("c'", &download_async(&c2).await.unwrap(), &want_c, tol_c)?;
    } else {
        let h2 = gru_cell(&xt, &ht, &gw).unwrap();
        prop_assert_eq!(h2.dtype(), dtype);
        check_close("h'", &download_async(&h2).await.unwrap(), &want_h, tol_h)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn rnn_cells_f32((lstm, b, i, h, seed) in cell_args()) {
        pollster::block_on(run_cell(DType::F32, lstm, b, i, h, seed))?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES_F16, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn rnn_sequence_f16(p in problem(DType::F16)) {
        require_f16(device());
        pollster::block_on(run_sequence(&p, device()))?;
    }

    #[test]
    fn rnn_cells_f16((lstm, b, i, h, seed) in cell_args()) {
        require_f16(device());
        pollster::block_on(run_cell(DType::F16, lstm, b, i, h, seed))?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES_PORTABLE_F16, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn rnn_sequence_portable_f16(p in problem(DType::F16)) {
        require_f16(portable_device());
        pollster::block_on(run_sequence(&p, portable_device()))?;
    }
}

/// A single-layer forward is the input-projection GEMM plus one dispatch per step; on GPUs
/// with up to 64 units, the GEMM, W_hh's transposed copy and one sequence dispatch.
#[test]
fn single_layer_forward_records_t_plus_one_dispatches() {
    // Private devices: the dispatch counter sees only this test's work.
    let cpu = Device::new().unwrap();
    let gpu = Device::with_options(wgtensor::DeviceOptions {
        gpu_plans: true,
        cooperative_matrix: false,
        ..Default::default()
    })
    .unwrap();
    // The default device plans as a CPU only on a CPU adapter (lavapipe); on a GPU it takes
    // the sequence kernel too.
    let steps = if cpu.caps().cpu { 13 + 1 } else { 3 };
    for (lstm, dev, want) in [
        (true, &cpu, steps),
        (false, &cpu, steps),
        (true, &gpu, 3),
        (false, &gpu, 3),
    ] {
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
            dtype: DType::F32,
        };
        let (_, rnn) = build_rnn(&p, dev);
        let x = upload(dev, &values(13 * 5 * 7, 1, 1.0), &[13, 5, 7], DType::F32);
        let before = dev.stats().dispatches;
        let out = rnn.forward(&x, None, None).unwrap();
        assert_eq!(dev.stats().dispatches - before, want, "lstm={lstm}");
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
        dtype: DType::F32,
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
    let rnn = Rnn::new(
        RnnKind::Lstm,
        wgtensor::ops::RnnOptions {
            num_layers: 1,
            bidirectional: false,
            batch_first: false,
        },
        vec![w.clone()],
    )
    .unwrap();
    // Input size mismatch.
    let e = rnn.forward(&t(&[2, 5, 7]), None, None).unwrap_err();
    assert!(e.to_string().contains('7'), "{e}");
    // State shape mismatch.
    let e = rnn
        .forward(&t(&[2, 5, 3]), Some(&t(&[1, 4, 4])), None)
        .unwrap_err();
    assert!(matches!(e, wgtensor::Error::Shape { .. }), "{e:?}");
    assert!(e.to_string().contains("[1, 5, 4]"), "{e}");
    // Wrong rank input; an empty sequence is refused as PyTorch refuses it.
    assert!(rnn.forward(&t(&[3]), None, None).is_err());
    assert!(rnn.forward(&t(&[1, 5, 3, 1]), None, None).is_err());
    // ([T, I] is PyTorch's unbatched input.)
    assert_eq!(
        rnn.forward(&t(&[5, 3]), None, None).unwrap().h_n.shape(),
        &[1, 4]
    );
    let empty = Tensor::zeros(dev, &[0, 5, 3], DType::F32).unwrap();
    let e = rnn.forward(&empty, None, None).unwrap_err();
    assert!(e.to_string().contains("sequence length"), "{e}");
    // Layer count and weight sets must agree.
    let e = Rnn::new(
        RnnKind::Lstm,
        wgtensor::ops::RnnOptions {
            num_layers: 2,
            bidirectional: false,
            batch_first: false,
        },
        vec![w],
    )
    .unwrap_err();
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
    let v = |n, seed, scale| values_in(p.dtype, n, seed, scale);
    BackwardCase {
        refw,
        rnn,
        x: v(p.t * p.b * p.i, p.seed ^ 99, 1.0),
        h0: p.with_h0.then(|| v(states, p.seed ^ 5, 0.5)),
        c0: (p.with_h0 && p.lstm).then(|| v(states, p.seed ^ 6, 0.5)),
        dy: v(p.t * p.b * d * p.h, p.seed ^ 7, 1.0),
        dh_n: with_dhn.then(|| v(states, p.seed ^ 8, 1.0)),
        dc_n: (with_dhn && p.lstm).then(|| v(states, p.seed ^ 9, 1.0)),
    }
}

/// `[T, B, N]` host data uploaded as the layout the Rnn expects (`[B, T, N]` when batch_first).
fn upload_seq(
    dev: &Device,
    v: &[f64],
    shape: [usize; 3],
    batch_first: bool,
    dtype: DType,
) -> Tensor {
    let t = upload(dev, v, &shape, dtype);
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
    let st = |v: &Option<Vec<f64>>| v.as_ref().map(|v| upload(dev, v, &sshape, p.dtype));
    let xt = upload_seq(dev, &c.x, [p.t, p.b, p.i], p.batch_first, p.dtype);
    let (h0, c0, dhn, dcn) = (st(&c.h0), st(&c.c0), st(&c.dh_n), st(&c.dc_n));
    let (_, saved) = c.rnn.forward_train(&xt, h0.as_ref(), c0.as_ref()).unwrap();
    let dy = upload_seq(dev, &c.dy, [p.t, p.b, d * p.h], p.batch_first, p.dtype);
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
    ref_grads_with(p, c, &mut rnn_ref::Exact)
}

/// The reference gradients with the given store hook (see rnn_ref).
fn ref_grads_with(p: &Problem, c: &BackwardCase, st: &mut dyn rnn_ref::Store) -> rnn_ref::RefGrads {
    let d = if p.bidirectional { 2 } else { 1 };
    rnn_ref::sequence_backward_with(
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
        st,
    )
}

/// The gradient tensors in a fixed order: dx, dh0, (LSTM) dc0, then per weight set dW_ih,
/// dW_hh, db_ih, db_hh.
fn grad_parts(g: &rnn_ref::RefGrads, lstm: bool) -> Vec<(String, &[f64])> {
    let mut v: Vec<(String, &[f64])> = vec![("dx".into(), &g.dx), ("dh0".into(), &g.dh0)];
    if lstm {
        v.push(("dc0".into(), &g.dc0));
    }
    for (k, w) in g.dw.iter().enumerate() {
        v.push((format!("dW_ih[{k}]"), &w.w_ih));
        v.push((format!("dW_hh[{k}]"), &w.w_hh));
        v.push((format!("db_ih[{k}]"), &w.b_ih));
        v.push((format!("db_hh[{k}]"), &w.b_hh));
    }
    v
}

/// f32: gradients are sums over up to T * B products of bounded terms, each step's error is
/// that of the forward (see the module note) times bounded gate derivatives; the bound scales
/// with the largest gradient magnitude of the tensor checked. f16: the storage model's spread
/// on top (module note).
fn compare_grads(
    p: &Problem,
    c: &BackwardCase,
    got: &rnn_ref::RefGrads,
    want: &rnn_ref::RefGrads,
) -> Result<(), TestCaseError> {
    let d = if p.bidirectional { 2 } else { 1 };
    let base = 4e-6 * (p.t * p.layers) as f64 * (p.i + d * p.h + 8) as f64;
    prop_assert_eq!(got.dw.len(), want.dw.len());
    let (got, want) = (grad_parts(got, p.lstm), grad_parts(want, p.lstm));
    let tol32: Vec<f64> = want
        .iter()
        .map(|(_, w)| base * max_abs(w).max(1.0))
        .collect();
    let tols = match p.dtype {
        DType::F32 | DType::I32 => tol32,
        DType::F16 => {
            let exact: Vec<&[f64]> = want.iter().map(|(_, w)| *w).collect();
            let spread = mc_spread(p.seed, &exact, |st| {
                let g = ref_grads_with(p, c, st);
                grad_parts(&g, p.lstm)
                    .into_iter()
                    .map(|(_, v)| v.to_vec())
                    .collect()
            });
            (0..want.len())
                .map(|k| f16_tol(spread[k], want[k].1, tol32[k]))
                .collect()
        }
    };
    for (((what, g), (_, w)), tol) in got.iter().zip(&want).zip(tols) {
        check_close(what, g, w, tol)?;
    }
    Ok(())
}

pub(crate) fn backward_problem(dtype: DType) -> impl Strategy<Value = (Problem, bool)> {
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
            move |(
                lstm,
                t,
                b,
                i,
                hh,
                layers,
                bidirectional,
                batch_first,
                with_h0,
                with_dhn,
                seed,
            )| {
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
                        dtype,
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
    compare_grads(p, &c, &gpu_grads(p, &c, dev).await, &ref_grads(p, &c))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn rnn_backward_f32((p, with_dhn) in backward_problem(DType::F32)) {
        pollster::block_on(run_backward(&p, with_dhn, device()))?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn rnn_backward_portable_f32((p, with_dhn) in backward_problem(DType::F32)) {
        pollster::block_on(run_backward(&p, with_dhn, portable_device()))?;
    }

    /// The training forward on the GPU step, then the backward (forced GPU plans).
    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn rnn_backward_gpu_plans_f32((p, with_dhn) in backward_problem(DType::F32)) {
        pollster::block_on(run_backward(&p, with_dhn, crate::common::gpu_plans_device()))?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES_F16, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn rnn_backward_f16((p, with_dhn) in backward_problem(DType::F16)) {
        require_f16(device());
        pollster::block_on(run_backward(&p, with_dhn, device()))?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES_PORTABLE_F16, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn rnn_backward_portable_f16((p, with_dhn) in backward_problem(DType::F16)) {
        require_f16(portable_device());
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
            dtype: DType::F32,
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

/// Backward costs exactly one dispatch per step and direction on CPU adapters, one for every
/// step on GPUs with up to 64 units (the sequence kernel; above, two a step: the recurrent
/// product in K slices, then the gate derivatives); the rest is per layer.
#[test]
fn backward_records_one_dispatch_per_step() {
    // Private devices: the dispatch counter sees only this test's work.
    let cpu = Device::new().unwrap();
    let gpu = Device::with_options(wgtensor::DeviceOptions {
        gpu_plans: true,
        cooperative_matrix: false,
        ..Default::default()
    })
    .unwrap();
    for (lstm, dev) in [(true, &cpu), (false, &cpu), (true, &gpu), (false, &gpu)] {
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
                dtype: DType::F32,
            };
            let (_, rnn) = build_rnn(&p, dev);
            let x = upload(dev, &values(t * 4 * 5, 1, 1.0), &[t, 4, 5], DType::F32);
            let dy = upload(dev, &values(t * 4 * 7, 2, 1.0), &[t, 4, 7], DType::F32);
            let (_, saved) = rnn.forward_train(&x, None, None).unwrap();
            let before = dev.stats().dispatches;
            rnn.backward(&saved, &dy, None, None).unwrap();
            counts.push(dev.stats().dispatches - before);
        }
        // GPUs with up to 64 units: one dispatch for all the steps, however many.
        let per_step = if dev.caps().cpu { 1 } else { 0 };
        assert_eq!(
            counts[1] - counts[0],
            8 * per_step,
            "lstm={lstm}: {counts:?}"
        );
    }
}

#[test]
fn rnn_backward_errors_name_the_values() {
    let dev = device();
    let t = |shape: &[usize]| Tensor::zeros(dev, shape, DType::F32).unwrap();
    let lstm_w = RnnWeights::new(RnnKind::Lstm, &t(&[16, 3]), &t(&[16, 4]), None, None).unwrap();
    let rnn = Rnn::new(
        RnnKind::Lstm,
        wgtensor::ops::RnnOptions {
            num_layers: 1,
            bidirectional: false,
            batch_first: false,
        },
        vec![lstm_w],
    )
    .unwrap();
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
    let gru = Rnn::new(
        RnnKind::Gru,
        wgtensor::ops::RnnOptions {
            num_layers: 1,
            bidirectional: true,
            batch_first: false,
        },
        vec![gru_w.clone(), gru_w],
    )
    .unwrap();
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

/// Mixed dtypes (f16 with f32) are rejected naming the op and both dtypes. A test of its own
/// because f16 tensors need SHADER_F16 (adapters without it skip f16 tests).
#[test]
fn rnn_dtype_errors_f16() {
    let dev = device();
    require_f16(dev);
    let t32 = |shape: &[usize]| Tensor::zeros(dev, shape, DType::F32).unwrap();
    let t16 = |shape: &[usize]| Tensor::zeros(dev, shape, DType::F16).unwrap();
    let dtype_err = |e: wgtensor::Error, op: &str| {
        assert!(
            matches!(&e, wgtensor::Error::DType { op: o, .. } if *o == op),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains("dtype mismatch") && msg.contains("F16") && msg.contains("F32"),
            "{msg}"
        );
    };
    let lstm = RnnKind::Lstm;
    let w32 = RnnWeights::new(lstm, &t32(&[16, 3]), &t32(&[16, 4]), None, None).unwrap();
    let rnn = Rnn::new(
        lstm,
        wgtensor::ops::RnnOptions {
            num_layers: 1,
            bidirectional: false,
            batch_first: false,
        },
        vec![w32.clone()],
    )
    .unwrap();
    // f16 input, f32 weights: RNNBase.check_input's words (the weights' dtype expected),
    // after the rank checks; the cells compare dtypes as their GEMMs do.
    for e in [
        rnn.forward(&t16(&[2, 5, 3]), None, None).unwrap_err(),
        rnn.forward(&t16(&[5, 3]), None, None).unwrap_err(),
        rnn.forward_train(&t16(&[2, 5, 3]), None, None).unwrap_err(),
    ] {
        assert!(
            e.to_string().contains(
                "lstm: RNN input dtype (torch.float16) does not match weight dtype \
                     (torch.float32). Convert input: input.to(torch.float32), or convert \
                     model: model.to(torch.float16)"
            ),
            "{e}"
        );
    }
    // The cells check sizes (ATen's check_rnn_cell_forward_input) before their GEMMs' dtypes.
    let e = lstm_cell(&t16(&[5, 2]), &t32(&[5, 4]), &t32(&[5, 4]), &w32).unwrap_err();
    assert!(e.to_string().contains("inconsistent input_size"), "{e}");
    let e = rnn.forward(&t16(&[1, 2, 5, 3]), None, None).unwrap_err();
    assert!(
        e.to_string()
            .contains("LSTM: Expected input to be 2D or 3D, got 4D instead"),
        "{e}"
    );
    dtype_err(
        lstm_cell(&t16(&[5, 3]), &t16(&[5, 4]), &t16(&[5, 4]), &w32).unwrap_err(),
        "lstm",
    );
    let g32 = RnnWeights::new(RnnKind::Gru, &t32(&[12, 3]), &t32(&[12, 4]), None, None).unwrap();
    dtype_err(
        gru_cell(&t16(&[5, 3]), &t16(&[5, 4]), &g32).unwrap_err(),
        "gru",
    );
    // f16 initial states with an f32 input.
    let x32 = t32(&[2, 5, 3]);
    dtype_err(
        rnn.forward(&x32, Some(&t16(&[1, 5, 4])), None).unwrap_err(),
        "lstm",
    );
    dtype_err(
        rnn.forward(&x32, None, Some(&t16(&[1, 5, 4]))).unwrap_err(),
        "lstm",
    );
    dtype_err(
        lstm_cell(&t32(&[5, 3]), &t32(&[5, 4]), &t16(&[5, 4]), &w32).unwrap_err(),
        "lstm",
    );
    // Weights and biases of one set must agree.
    dtype_err(
        RnnWeights::new(RnnKind::Gru, &t32(&[12, 3]), &t16(&[12, 4]), None, None).unwrap_err(),
        "gru",
    );
    dtype_err(
        RnnWeights::new(
            lstm,
            &t32(&[16, 3]),
            &t32(&[16, 4]),
            Some(&t16(&[16])),
            None,
        )
        .unwrap_err(),
        "lstm",
    );
    // Backward: f16 dy or dh_n for an f32 Rnn.
    let (_, saved) = rnn.forward_train(&x32, None, None).unwrap();
    dtype_err(
        rnn.backward(&saved, &t16(&[2, 5, 4]), None, None)
            .unwrap_err(),
        "lstm",
    );
    dtype_err(
        rnn.backward(&saved, &t32(&[2, 5, 4]), Some(&t16(&[1, 5, 4])), None)
            .unwrap_err(),
        "lstm",
    );
    // Sets of different dtypes (f16 layer 0 or forward direction, f32 after it): Rnn::new
    // rejects the stack.
    let w16 = RnnWeights::new(lstm, &t16(&[16, 3]), &t16(&[16, 4]), None, None).unwrap();
    let w32_l1 = RnnWeights::new(lstm, &t32(&[16, 4]), &t32(&[16, 4]), None, None).unwrap();
    for (layers, bidirectional, sets) in [
        (2, false, vec![w16.clone(), w32_l1]),
        (1, true, vec![w16, w32]),
    ] {
        dtype_err(
            Rnn::new(
                lstm,
                wgtensor::ops::RnnOptions {
                    num_layers: layers,
                    bidirectional,
                    batch_first: false,
                },
                sets,
            )
            .unwrap_err(),
            "lstm",
        );
    }
}

/// Batches past one subgroup block (32 rows; sg8 stacks up to 4 per workgroup) and hidden
/// sizes past one 8-unit block, in both directions.
#[test]
fn rnn_backward_wide_batch() {
    wide_batch(DType::F32);
}

#[test]
fn rnn_backward_wide_batch_f16() {
    require_f16(device());
    wide_batch(DType::F16);
}

fn wide_batch(dtype: DType) {
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
            dtype,
        };
        for dev in [device(), portable_device()] {
            pollster::block_on(run_backward(&p, true, dev)).unwrap();
        }
    }
}

/// Bias gradients are column sums over all T * B rows of the gate gradients. With zero
/// weights every row's gate gradients are equal, so the sum over B rows must be B times the
/// one-row sum (exact in f64; PyTorch's f32 tolerance here). On GPU plans a GEMM of a ones
/// vector left an invocation thousands of rows added in turn (about 2e-5 off at 8192 rows).
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn bias_gradients_of_long_batches_keep_f32_precision() {
    let devs = [device(), crate::common::gpu_plans_device()];
    for dev in devs {
        for kind in [RnnKind::Lstm, RnnKind::Gru] {
            let gates = if kind == RnnKind::Lstm { 4 } else { 3 };
            let (h, i) = (8, 3);
            let full = |shape: &[usize], v: f64| Tensor::full(dev, shape, v, DType::F32).unwrap();
            let (w_ih, w_hh) = (full(&[gates * h, i], 0.0), full(&[gates * h, h], 0.0));
            let b_ih: Vec<f32> = (0..gates * h).map(|j| 0.3 - 0.05 * j as f32).collect();
            let b_ih = Tensor::from_slice(dev, &b_ih, &[gates * h]).unwrap();
            let b_hh = full(&[gates * h], 0.1);
            let w = RnnWeights::new(kind, &w_ih, &w_hh, Some(&b_ih), Some(&b_hh)).unwrap();
            let rnn = Rnn::new(kind, Default::default(), vec![w]).unwrap();
            let bias_grads = |b: usize| {
                let x = full(&[1, b, i], 0.7);
                let (_, saved) = rnn.forward_train(&x, None, None).unwrap();
                let dy = full(&[1, b, h], 0.3);
                let g = rnn.backward(&saved, &dy, None, None).unwrap();
                let w = &g.weights[0];
                (download(&w.b_ih).unwrap(), download(&w.b_hh).unwrap())
            };
            let (one_ih, one_hh) = bias_grads(1);
            let rows = 8192;
            let (many_ih, many_hh) = bias_grads(rows);
            for (what, one, many) in [("b_ih", one_ih, many_ih), ("b_hh", one_hh, many_hh)] {
                for (j, (o, m)) in one.iter().zip(&many).enumerate() {
                    let want = o * rows as f64;
                    let tol = 2e-6 * want.abs() + 1e-9;
                    assert!(
                        (m - want).abs() <= tol,
                        "{kind:?} {what}[{j}] over {rows} rows, cpu plans {}: {m} vs {want}",
                        dev.caps().cpu
                    );
                }
            }
        }
    }
}
