//! What wgtensor is for, in one run: a grouped 1-D convolution, batch norm and an LSTM, forward
//! and backward on the GPU, each forward checked against a plain f64 CPU reference; then GEMM
//! and convolution timings and the runtime's counters (in-flight cap, pool).
//!
//! `scripts/demo.sh` (installs a Vulkan driver first when none is found) or
//! `cargo run --release --example quickstart`.
// Native only (blocking device and readback): an empty program on wasm32.
#![cfg_attr(target_arch = "wasm32", no_main)]
#![cfg(not(target_arch = "wasm32"))]

use std::time::Instant;

use wgtensor::ops::{
    batch_norm_backward, batch_norm_train, conv1d, conv1d_backward_input, conv1d_backward_weight,
    conv2d, matmul, BatchNormOptions, BatchNormOutput, Conv1dOptions, Conv2dOptions, Padding, Rnn,
    RnnKind, RnnWeights,
};
use wgtensor::{DType, Device, Tensor};

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (((i * 7919 + seed * 104729) % 2000) as f32 / 1000.0) - 1.0)
        .collect()
}

fn max_err(gpu: &[f32], cpu: &[f64]) -> f64 {
    gpu.iter()
        .zip(cpu)
        .map(|(&g, &c)| (g as f64 - c).abs())
        .fold(0.0, f64::max)
}

/// Grouped conv1d, stride 1, padding `pad` on both sides.
#[allow(clippy::too_many_arguments)]
fn conv1d_ref(x: &[f32], w: &[f32], b: &[f32], dims: [usize; 6], pad: usize) -> Vec<f64> {
    let [n, c, l, o, k, g] = dims;
    let (cg, og) = (c / g, o / g);
    let ol = l + 2 * pad - k + 1;
    let mut y = vec![0.0f64; n * o * ol];
    for ni in 0..n {
        for oi in 0..o {
            let grp = oi / og;
            for t in 0..ol {
                let mut acc = b[oi] as f64;
                for ci in 0..cg {
                    for ki in 0..k {
                        let pos = t as isize + ki as isize - pad as isize;
                        if pos >= 0 && (pos as usize) < l {
                            let xv = x[(ni * c + grp * cg + ci) * l + pos as usize] as f64;
                            acc += w[(oi * cg + ci) * k + ki] as f64 * xv;
                        }
                    }
                }
                y[(ni * o + oi) * ol + t] = acc;
            }
        }
    }
    y
}

/// Training-mode batch norm over [N, C, L] (no affine).
fn batch_norm_ref(x: &[f64], n: usize, c: usize, l: usize, eps: f64) -> Vec<f64> {
    let mut y = vec![0.0; x.len()];
    for ci in 0..c {
        let idx = |ni: usize, t: usize| (ni * c + ci) * l + t;
        let cnt = (n * l) as f64;
        let mean = (0..n)
            .flat_map(|ni| (0..l).map(move |t| (ni, t)))
            .map(|(ni, t)| x[idx(ni, t)])
            .sum::<f64>()
            / cnt;
        let var = (0..n)
            .flat_map(|ni| (0..l).map(move |t| (ni, t)))
            .map(|(ni, t)| (x[idx(ni, t)] - mean).powi(2))
            .sum::<f64>()
            / cnt;
        for ni in 0..n {
            for t in 0..l {
                y[idx(ni, t)] = (x[idx(ni, t)] - mean) / (var + eps).sqrt();
            }
        }
    }
    y
}

/// One-layer LSTM over [T, B, I] (PyTorch gate order i, f, g, o), zero initial state.
fn lstm_ref(x: &[f32], w_ih: &[f32], w_hh: &[f32], bias: &[f32], dims: [usize; 4]) -> Vec<f64> {
    let [t, b, i, h] = dims;
    let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
    let (mut hs, mut cs) = (vec![0.0f64; b * h], vec![0.0f64; b * h]);
    let mut out = Vec::with_capacity(t * b * h);
    for step in 0..t {
        let mut next_h = vec![0.0; b * h];
        for bi in 0..b {
            for j in 0..h {
                let gate = |gi: usize| {
                    let row = gi * h + j;
                    let mut acc = bias[row] as f64;
                    for ii in 0..i {
                        acc += w_ih[row * i + ii] as f64 * x[(step * b + bi) * i + ii] as f64;
                    }
                    for hh in 0..h {
                        acc += w_hh[row * h + hh] as f64 * hs[bi * h + hh];
                    }
                    acc
                };
                let (ig, fg, gg, og) = (sig(gate(0)), sig(gate(1)), gate(2).tanh(), sig(gate(3)));
                let c = fg * cs[bi * h + j] + ig * gg;
                cs[bi * h + j] = c;
                next_h[bi * h + j] = og * c.tanh();
            }
        }
        hs = next_h;
        out.extend_from_slice(&hs);
    }
    out
}

/// Median wall time of `f` (with a device sync) over `runs` runs, in ms.
fn time_ms(
    dev: &Device,
    runs: usize,
    mut f: impl FnMut() -> wgtensor::Result<()>,
) -> wgtensor::Result<f64> {
    f()?;
    dev.sync()?;
    let mut t = Vec::new();
    for _ in 0..runs {
        let s = Instant::now();
        f()?;
        dev.sync()?;
        t.push(s.elapsed().as_secs_f64() * 1e3);
    }
    t.sort_by(f64::total_cmp);
    Ok(t[t.len() / 2])
}

fn main() -> wgtensor::Result<()> {
    let dev = Device::new()?;
    let info = dev.adapter_info();
    println!(
        "adapter: {} ({:?}, {:?}), f16: {}",
        info.name,
        info.backend,
        info.device_type,
        dev.supports_f16()
    );
    let mut worst = 0.0f64;

    // 1. Grouped conv1d: x [8, 16, 64], w [32, 16/4, 3], 4 groups in one dispatch.
    let (n, c, l, o, k, g) = (8, 16, 64, 32, 3, 4);
    let (xv, wv, bv) = (
        values(n * c * l, 1),
        values(o * (c / g) * k, 2),
        values(o, 3),
    );
    let x = Tensor::from_slice(&dev, &xv, &[n, c, l])?;
    let w = Tensor::from_slice(&dev, &wv, &[o, c / g, k])?;
    let b = Tensor::from_slice(&dev, &bv, &[o])?;
    let copt = Conv1dOptions {
        padding: wgtensor::ops::Padding1d::uniform(1),
        groups: g,
        ..Default::default()
    };
    let y = conv1d(&x, &w, Some(&b), &copt)?;
    let y_cpu = conv1d_ref(&xv, &wv, &bv, [n, c, l, o, k, g], 1);
    let e = max_err(&y.to_vec::<f32>()?, &y_cpu);
    worst = worst.max(e);
    println!(
        "conv1d (4 groups, one dispatch)  {:?} -> {:?}  max |gpu - cpu| = {e:.2e}",
        x.shape(),
        y.shape()
    );

    // 2. Batch norm (training statistics) of the convolution's output.
    let BatchNormOutput {
        y: z,
        saved: bn_saved,
    } = batch_norm_train(&y, None, &BatchNormOptions::default())?;
    let z_cpu = batch_norm_ref(&y_cpu, n, o, l, 1e-5);
    let e = max_err(&z.to_vec::<f32>()?, &z_cpu);
    worst = worst.max(e);
    println!(
        "batch_norm_train                 {:?}  max |gpu - cpu| = {e:.2e}",
        z.shape()
    );

    // 3. LSTM over the normalized features as a sequence: [T = 64, B = 8, I = 32], H = 32.
    let (t, bsz, i, h) = (l, n, o, 32);
    let seq = z.permute(&[2, 0, 1])?; // [L, N, C] view, read in place
    let (wih, whh, bih) = (values(4 * h * i, 4), values(4 * h * h, 5), values(4 * h, 6));
    let scale = |v: Vec<f32>, s: f32| v.into_iter().map(|x| x * s).collect::<Vec<_>>();
    let (wih, whh) = (scale(wih, 0.2), scale(whh, 0.2));
    let weights = RnnWeights::new(
        RnnKind::Lstm,
        &Tensor::from_slice(&dev, &wih, &[4 * h, i])?,
        &Tensor::from_slice(&dev, &whh, &[4 * h, h])?,
        Some(&Tensor::from_slice(&dev, &bih, &[4 * h])?),
        None,
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
    let (out, saved) = lstm.forward_train(&seq, None, None)?;
    let seq_host: Vec<f32> = seq.contiguous()?.to_vec()?;
    let out_cpu = lstm_ref(&seq_host, &wih, &whh, &bih, [t, bsz, i, h]);
    let e = max_err(&out.output.to_vec::<f32>()?, &out_cpu);
    worst = worst.max(e);
    println!(
        "lstm (fused steps)               {:?} -> {:?}  max |gpu - cpu| = {e:.2e}",
        seq.shape(),
        out.output.shape()
    );

    // 4. Backward through all three with the fused gradient kernels: loss = sum(output).
    let dout = Tensor::full(&dev, out.output.shape(), 1.0, DType::F32)?;
    let grads = lstm.backward(&saved, &dout, None, None)?;
    let dz = grads.dx.permute(&[1, 2, 0])?; // back to [N, C, L]
    let dy = batch_norm_backward(&dz, &y, None, &bn_saved)?.dx;
    let dx = conv1d_backward_input(&dy, &w, l, &copt)?;
    let dw = conv1d_backward_weight(&dy, &x, k, &copt)?;
    let norm = |t: &Tensor| -> wgtensor::Result<f64> {
        Ok(t.to_vec::<f32>()?
            .iter()
            .map(|&v| (v as f64).powi(2))
            .sum::<f64>()
            .sqrt())
    };
    println!(
        "backward: |dW_ih| = {:.3}, |dx| = {:.3}, |dW_conv| = {:.3}  (LSTM BPTT, batch norm, conv dgrad + grouped wgrad)",
        norm(&grads.weights[0].w_ih)?,
        norm(&dx)?,
        norm(&dw)?
    );

    // 5. Timings (median of 5, including the sync).
    let a = Tensor::from_slice(&dev, &values(512 * 512, 7), &[512, 512])?;
    let gemm_ms = time_ms(&dev, 5, || matmul(&a, &a).map(drop))?;
    let xi = Tensor::from_slice(&dev, &values(4 * 32 * 32 * 32, 8), &[4, 32, 32, 32])?;
    let wi = Tensor::from_slice(&dev, &values(32 * 8 * 9, 9), &[32, 8, 3, 3])?;
    let o2 = Conv2dOptions {
        padding: Padding::uniform(1),
        groups: 4,
        ..Default::default()
    };
    let conv_ms = time_ms(&dev, 5, || conv2d(&xi, &wi, None, &o2).map(drop))?;
    println!(
        "timing: matmul 512x512x512 {gemm_ms:.2} ms ({:.1} GFLOP/s); conv2d [4,32,32,32] 3x3 groups 4 {conv_ms:.2} ms ({:.1} GFLOP/s)",
        2.0 * 512f64.powi(3) / gemm_ms / 1e6,
        2.0 * (4 * 32 * 32 * 32 * 8 * 9) as f64 / conv_ms / 1e6
    );

    let s = dev.stats();
    println!(
        "runtime: {} dispatches in {} submissions, in flight now {} (peak {}, cap {}), {} pipelines compiled",
        s.dispatches,
        s.submissions,
        s.in_flight,
        s.peak_in_flight,
        dev.options().max_in_flight,
        s.pipelines_compiled
    );
    println!(
        "pool: {} KiB live, {} KiB cached, peak {} KiB, {} hits / {} misses",
        s.pool.live_bytes >> 10,
        s.pool.cached_bytes >> 10,
        s.pool.peak_bytes >> 10,
        s.pool.hits,
        s.pool.misses
    );
    if worst > 1e-4 {
        eprintln!("MISMATCH against the CPU reference (worst error {worst:.2e})");
        std::process::exit(1);
    }
    println!("OK: every forward result matches the CPU reference");
    Ok(())
}
