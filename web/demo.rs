//! The demo page's wasm module (`web/build.sh` builds it and runs `wasm-bindgen --target web`
//! into `web/pkg/`; `web/main.js` calls [`run_demo`]).
//!
//! It opens the device, then runs a small workload on deterministic random data — a grouped
//! 1-D convolution of `[N, C, L]`, batch normalization (training forward) of its output and an
//! LSTM over the normalized sequence —
//! timing each op (first call, pipeline compilation included, and the median of a few more)
//! and checking every output against the pure-Rust f64 reference of the conformance suite
//! (tests/common), the same code the native and browser tests use.
//!
//! Then the page trains a model live, one step per call, drawing the loss as it falls: a small
//! CNN on the handwritten digits (web/train.rs, the default) or a small decoder-only character
//! transformer (web/train_transformer.rs), as the page's model select box says.
//!
//! Each op's reference is also timed: the plain-Rust CPU implementation in the same wasm
//! module, for the speed-up column.
//!
//! Adding a step is a few lines in `run`: produce the input, call [`Demo::step`] with the GPU
//! op and the reference (each step's reference starts from the GPU values of its input).
#![cfg(target_arch = "wasm32")]

#[path = "../tests/common/conv_ref.rs"]
mod conv_ref; // allows dead code itself

#[allow(dead_code)]
#[path = "../tests/common/reference.rs"]
mod reference;
#[allow(dead_code)]
#[path = "../tests/common/rnn_ref.rs"]
mod rnn_ref;

mod train;
mod train_transformer;

use std::fmt::Write as _;

use wasm_bindgen::prelude::*;
use wgtensor::ops::{
    batch_norm_train, conv1d, BatchNormOptions, Conv1dOptions, Rnn, RnnKind, RnnWeights,
};
use wgtensor::{Device, Result, Tensor};

/// Workload sizes: a batch of N sequences with C channels and L steps; a convolution of
/// kernel size KW in GROUPS groups (padding keeps the length); LSTM hidden size H.
const N: usize = 8;
const C: usize = 16;
const L: usize = 64;
const KW: usize = 3;
const GROUPS: usize = 4;
const H: usize = 32;
const BN_EPS: f64 = 1e-5;
/// Timed calls after the first one (the median is reported).
const REPEATS: usize = 5;

/// Runs the workload; resolves to a JSON report (adapter, per-op timings and checks, `pass`).
#[wasm_bindgen]
pub async fn run_demo() -> std::result::Result<String, JsValue> {
    run().await.map_err(js)
}

async fn run() -> Result<String> {
    let dev = Device::new_async().await?;
    let mut demo = Demo {
        dev: dev.clone(),
        steps: Vec::new(),
    };

    let in_data = uniform(N * C * L, 1, 1.0);
    let input = upload(&dev, &in_data, &[N, C, L])?;

    // Grouped conv1d [N, C, L] -> [N, C, L]: weight [C, C / GROUPS, KW], bias, padding 1.
    let cg = C / GROUPS;
    let w_data = uniform(C * cg * KW, 8, 0.5);
    let b_data = uniform(C, 9, 0.1);
    let (w, b) = (
        upload(&dev, &w_data, &[C, cg, KW])?,
        upload(&dev, &b_data, &[C])?,
    );
    let opts = Conv1dOptions {
        padding: wgtensor::ops::Padding1d::uniform(KW / 2),
        groups: GROUPS,
        ..Default::default()
    };
    let conv = || conv1d(&input, &w, Some(&b), &opts);
    let geom = conv_ref::ConvGeom {
        n: N,
        c: C,
        h: 1,
        w: L,
        o: C,
        kh: 1,
        kw: KW,
        groups: GROUPS,
        stride: [1, 1],
        pad: [0, 0, KW / 2, KW / 2],
        dil: [1, 1],
    };
    let (want, mag) = conv_ref::conv_forward(&geom, &in_data, &w_data, Some(&b_data));
    // The conformance bound: (K + 2) f32 epsilons of the sum of |products| (plus the bias).
    let tol = (cg * KW + 3) as f64 * f32::EPSILON as f64 * mag.iter().fold(1.0, |m, v| v.max(m));
    // The reference runs again inside the step so that its CPU time is measured.
    let _ = want;
    let cpu_conv = || conv_ref::conv_forward(&geom, &in_data, &w_data, Some(&b_data)).0;
    let (x, x_data) = demo.step("conv1d (grouped)", conv, cpu_conv, tol).await?;

    // Batch norm (training forward): per-channel statistics over N and L.
    let gamma_data = uniform(C, 2, 1.0)
        .iter()
        .map(|v| 1.0 + 0.5 * v)
        .collect::<Vec<_>>();
    let beta_data = uniform(C, 3, 0.5);
    let (gamma, beta) = (
        upload(&dev, &gamma_data, &[C])?,
        upload(&dev, &beta_data, &[C])?,
    );
    let bn = || {
        batch_norm_train(
            &x,
            None,
            &BatchNormOptions {
                weight: Some(&gamma),
                bias: Some(&beta),
                eps: BN_EPS,
                ..Default::default()
            },
        )
        .map(|r| r.y)
    };
    let want = || {
        let (g, b) = (Some(&gamma_data[..]), Some(&beta_data[..]));
        reference::batch_norm_train(&x_data, &[N, C, L], g, b, BN_EPS).y
    };
    // |y| <= a few: the f32 statistics over N * L values err by far less than this.
    let (y, y_data) = demo.step("batch_norm_train", bn, want, 1e-4).await?;

    // LSTM over the sequence: [N, C, L] -> [L, N, C] (seq-first), hidden H, one layer. Its
    // reference starts from the normalized values the GPU produced.
    let xs = y.permute(&[2, 0, 1])?.contiguous()?;
    let seq = reference::permute(&y_data, &[N, C, L], &[2, 0, 1]);
    let k = 1.0 / (H as f64).sqrt();
    let w = rnn_ref::RefWeights {
        w_ih: uniform(4 * H * C, 4, k),
        w_hh: uniform(4 * H * H, 5, k),
        b_ih: uniform(4 * H, 6, k),
        b_hh: uniform(4 * H, 7, k),
    };
    let weights = RnnWeights::new(
        RnnKind::Lstm,
        &upload(&dev, &w.w_ih, &[4 * H, C])?,
        &upload(&dev, &w.w_hh, &[4 * H, H])?,
        Some(&upload(&dev, &w.b_ih, &[4 * H])?),
        Some(&upload(&dev, &w.b_hh, &[4 * H])?),
    )?;
    let lstm = Rnn::new(
        RnnKind::Lstm,
        wgtensor::ops::RnnOptions {
            num_layers: 1,
            bidirectional: false,
            batch_first: false,
        },
        vec![weights],
    )?;
    let run_lstm = || lstm.forward(&xs, None, None).map(|o| o.output);
    let want = || {
        let ws = std::slice::from_ref(&w);
        rnn_ref::sequence(true, ws, 1, 1, &seq, L, N, C, H, None, None).0
    };
    // The conformance suite's bound: 2e-6 per step and per term of the gate dot products.
    let tol = 2e-6 * L as f64 * (C + H + 8) as f64;
    demo.step("lstm_forward", run_lstm, want, tol).await?;

    Ok(demo.report())
}

struct Step {
    name: &'static str,
    shape: Vec<usize>,
    first_ms: f64,
    median_ms: f64,
    max_err: f64,
    tol: f64,
    cpu_ms: f64,
}

struct Demo {
    dev: Device,
    steps: Vec<Step>,
}

impl Demo {
    /// Runs `op` once (pipelines compile) and `REPEATS` more times, each timed up to the GPU's
    /// completion; checks the last output against `reference` (max abs error within `tol`);
    /// returns the output and its values, the next step's input.
    async fn step(
        &mut self,
        name: &'static str,
        op: impl Fn() -> Result<Tensor>,
        reference: impl FnOnce() -> Vec<f64>,
        tol: f64,
    ) -> Result<(Tensor, Vec<f64>)> {
        let mut times = Vec::new();
        let mut out = None;
        for _ in 0..=REPEATS {
            let t0 = now_ms();
            let y = op()?;
            self.dev.sync_async().await?;
            times.push(now_ms() - t0);
            out = Some(y);
        }
        let out = out.expect("ran at least once");
        let got: Vec<f64> = out
            .to_vec_async::<f32>()
            .await?
            .into_iter()
            .map(f64::from)
            .collect();
        let t_cpu = now_ms();
        let want = reference();
        let cpu_ms = now_ms() - t_cpu;
        let max_err = if want.len() == got.len() {
            got.iter()
                .zip(&want)
                .map(|(g, w)| (g - w).abs())
                .fold(0.0, f64::max)
        } else {
            f64::INFINITY
        };
        let first_ms = times[0];
        let mut rest = times[1..].to_vec();
        rest.sort_by(f64::total_cmp);
        self.steps.push(Step {
            name,
            shape: out.shape().to_vec(),
            first_ms,
            median_ms: rest[rest.len() / 2],
            max_err,
            tol,
            cpu_ms,
        });
        Ok((out, got))
    }

    fn report(&self) -> String {
        let info = self.dev.adapter_info();
        let pass = self.steps.iter().all(|s| s.max_err <= s.tol);
        let mut j = String::from("{");
        let _ = write!(
            j,
            "\"adapter\":{{\"name\":{},\"backend\":{},\"device_type\":{},\"driver\":{},\"f16\":{}}},",
            json_str(&info.name),
            json_str(&format!("{:?}", info.backend)),
            json_str(&format!("{:?}", info.device_type)),
            json_str(format!("{} {}", info.driver, info.driver_info).trim()),
            self.dev.supports_f16(),
        );
        j.push_str("\"steps\":[");
        for (i, s) in self.steps.iter().enumerate() {
            let _ = write!(
                j,
                "{}{{\"name\":{},\"shape\":{:?},\"first_ms\":{:.2},\"median_ms\":{:.2},\
                 \"max_abs_err\":{:e},\"tol\":{:e},\"pass\":{},\"cpu_ms\":{:.2}}}",
                if i > 0 { "," } else { "" },
                json_str(s.name),
                s.shape,
                s.first_ms,
                s.median_ms,
                s.max_err,
                s.tol,
                s.max_err <= s.tol,
                s.cpu_ms,
            );
        }
        let st = self.dev.stats();
        let _ = write!(
            j,
            "],\"dispatches\":{},\"submissions\":{},\"pipelines\":{},\"pass\":{pass}}}",
            st.dispatches, st.submissions, st.pipelines_compiled
        );
        j
    }
}

/// Deterministic values uniform in [-scale, scale), rounded through f32 so the GPU and the
/// reference start from identical inputs.
fn uniform(n: usize, seed: u64, scale: f64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let u = (s >> 11) as f64 / (1u64 << 53) as f64;
            ((2.0 * u - 1.0) * scale) as f32 as f64
        })
        .collect()
}

fn upload(dev: &Device, data: &[f64], shape: &[usize]) -> Result<Tensor> {
    let v: Vec<f32> = data.iter().map(|&x| x as f32).collect();
    Tensor::from_slice(dev, &v, shape)
}

/// A wgtensor error as the JavaScript exception the page shows.
pub(crate) fn js(e: wgtensor::Error) -> JsValue {
    JsValue::from_str(&e.to_string())
}

/// The device's counters as JSON object members (leading comma included), the part of a
/// training step's report both trainers share.
pub(crate) fn device_stats_json(dev: &Device) -> String {
    let st = dev.stats();
    format!(
        ",\"dispatches\":{},\"submissions\":{},\"in_flight\":{},\"max_in_flight\":{},\
         \"pool_live_bytes\":{},\"pool_peak_bytes\":{},\"pipelines\":{}",
        st.dispatches,
        st.submissions,
        st.in_flight,
        dev.options().max_in_flight,
        st.pool.live_bytes,
        st.pool.peak_bytes,
        st.pipelines_compiled,
    )
}

pub(crate) fn now_ms() -> f64 {
    web_sys::window()
        .and_then(|w| w.performance())
        .map_or(0.0, |p| p.now())
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
