//! A 2-layer LSTM character model trained on the repository's own text (its Rust sources and
//! docs, embedded at build time) with `nn::Embedding`, `nn::Lstm`, a linear head, autograd and
//! Adam; then it samples text. Characters and targets are i32 ids: the embedding looks them up
//! and `cross_entropy` takes the class indices directly (no one-hot matrices).
//!
//! `cargo run --release --example char_lstm` (last line:
//! `final_loss=<nats/char> unigram_entropy=<nats/char>`).
// Native only (blocking device and readback, terminal progress bar).
#![cfg_attr(target_arch = "wasm32", no_main)]
#![cfg(not(target_arch = "wasm32"))]

use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use wgtensor::nn::{self, Forward, Module};
use wgtensor::ops::{cross_entropy, softmax};
use wgtensor::optim::{clip_grad_norm, Adam, AdamOptions};
use wgtensor::{no_grad, Device, Result, Tensor};

const TEXT: &[&str] = &[
    include_str!("../README.md"),
    include_str!("../docs/ARCHITECTURE.md"),
    include_str!("../src/tensor.rs"),
    include_str!("../src/layout.rs"),
    include_str!("../src/ops/gemm/mod.rs"),
];
const SEQ: usize = 32;
const BATCH: usize = 16;
const HIDDEN: usize = 128;
const EMBED: usize = 32;
const STEPS: usize = 800;

/// The model, with PyTorch's attribute names: its parameters are `embed.weight`,
/// `lstm.weight_ih_l0`, ..., `head.bias`, as a PyTorch `nn.Module` with the same attributes
/// names them.
#[derive(Module)]
struct CharLstm {
    embed: nn::Embedding,
    lstm: nn::Recurrent,
    head: nn::Linear,
}

impl CharLstm {
    /// The hidden states `[T, B, H]` of the ids `[T, B]`.
    fn hidden(&self, ids: &Tensor) -> Result<Tensor> {
        self.lstm.forward(&self.embed.forward(ids)?)
    }
}

/// `[T, B]` input ids and `[T * B]` next-character ids of the windows starting at `starts`.
fn window(dev: &Device, ids: &[usize], starts: &[usize]) -> Result<(Tensor, Tensor)> {
    let b = starts.len();
    let mut x = vec![0i32; SEQ * b];
    let mut y = vec![0i32; SEQ * b];
    for (j, &s) in starts.iter().enumerate() {
        for t in 0..SEQ {
            x[t * b + j] = ids[s + t] as i32;
            y[t * b + j] = ids[s + t + 1] as i32;
        }
    }
    Ok((
        Tensor::from_slice(dev, &x, &[SEQ, b])?,
        Tensor::from_slice(dev, &y, &[SEQ * b])?,
    ))
}

fn main() -> Result<()> {
    let dev = Device::new()?;
    dev.manual_seed(1);
    let text: String = TEXT.concat();
    let mut vocab: Vec<char> = text.chars().collect();
    vocab.sort_unstable();
    vocab.dedup();
    let v = vocab.len();
    let ids: Vec<usize> = text
        .chars()
        .map(|c| vocab.binary_search(&c).unwrap_or(0))
        .collect();
    // The unigram entropy: what a model that ignores context achieves at best.
    let mut counts = vec![0usize; v];
    for &i in &ids {
        counts[i] += 1;
    }
    let total = ids.len() as f64;
    let unigram: f64 = counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| -(c as f64 / total) * (c as f64 / total).ln())
        .sum();
    let model = CharLstm {
        embed: nn::Embedding::new(&dev, v, EMBED, None)?,
        lstm: nn::Lstm::new(
            &dev,
            EMBED,
            HIDDEN,
            nn::RnnConfig {
                num_layers: 2,
                ..Default::default()
            },
        )?,
        head: nn::Linear::new(&dev, HIDDEN, v, true)?,
    };
    let params = model.parameters();
    let mut opt = Adam::new(
        model.named_parameters(),
        AdamOptions {
            lr: 3e-3,
            ..Default::default()
        },
    )?;
    let bar = ProgressBar::new(STEPS as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: usize| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % n as u64) as usize
    };
    let mut recent = Vec::new();
    for step in 0..STEPS {
        let t0 = Instant::now();
        let starts: Vec<usize> = (0..BATCH).map(|_| next(ids.len() - SEQ - 1)).collect();
        let (x, y) = window(&dev, &ids, &starts)?;
        let h = model.hidden(&x)?.reshape(&[SEQ * BATCH, HIDDEN])?;
        let logits = model.head.forward(&h)?;
        let loss = cross_entropy(&logits, &y, &Default::default())?;
        let grads = loss.backward()?;
        let g: Vec<&Tensor> = params.iter().filter_map(|p| grads.get(p)).collect();
        let (clipped, _) = clip_grad_norm(&g, 5.0)?;
        let mut it = clipped.iter();
        let gs: Vec<Option<&Tensor>> = params
            .iter()
            .map(|p| grads.get(p).and_then(|_| it.next()))
            .collect();
        // Clipped gradients are our own tensors: step by position (the order of `params`).
        opt.step_with(&gs)?;
        let l = loss.to_vec::<f32>()?[0] as f64;
        recent.push(l);
        if recent.len() > 20 {
            recent.remove(0);
        }
        bar.inc(1);
        bar.set_message(format!(
            "loss {:.3} nats/char (unigram {unigram:.3}) step {:.0} ms",
            recent.iter().sum::<f64>() / recent.len() as f64,
            t0.elapsed().as_secs_f64() * 1e3
        ));
        if step == 9 {
            bar.println(format!(
                "pool live after 10 steps: {} KiB",
                dev.stats().pool.live_bytes >> 10
            ));
        }
    }
    bar.finish();
    // Sample 200 characters, feeding the whole prefix each time (no state carried).
    let mut out: Vec<usize> = ids[..SEQ].to_vec();
    no_grad(|| -> Result<()> {
        for _ in 0..200 {
            let start = out.len() - SEQ;
            let x: Vec<i32> = out[start..].iter().map(|&c| c as i32).collect();
            let x = Tensor::from_slice(&dev, &x, &[SEQ, 1])?;
            let h = model
                .hidden(&x)?
                .narrow(0, SEQ - 1, 1)?
                .reshape(&[1, HIDDEN])?;
            let p = softmax(&model.head.forward(&h)?, -1)?.to_vec::<f32>()?;
            let u = next(1_000_000) as f32 / 1e6;
            let mut acc = 0.0;
            let c = p
                .iter()
                .position(|&pi| {
                    acc += pi;
                    acc > u
                })
                .unwrap_or(v - 1);
            out.push(c);
        }
        Ok(())
    })?;
    let sample: String = out[SEQ..].iter().map(|&i| vocab[i]).collect();
    println!("sample:\n{sample}\n");
    let st = dev.stats();
    println!(
        "device: {} dispatches, {} submissions (peak in flight {}), pool live {} KiB, peak {} KiB",
        st.dispatches,
        st.submissions,
        st.peak_in_flight,
        st.pool.live_bytes >> 10,
        st.pool.peak_bytes >> 10
    );
    let final_loss = recent.iter().sum::<f64>() / recent.len() as f64;
    println!("final_loss={final_loss:.4} unigram_entropy={unigram:.4}");
    Ok(())
}
