//! A small decoder-only transformer character model trained on the same text as
//! `char_lstm` (the repository's README, architecture notes and a few sources, embedded at
//! build time): token and learned positional embeddings, pre-norm
//! `nn::TransformerEncoderLayer`s run with `is_causal` (a position sees only itself and the
//! ones before it), a final `nn::LayerNorm` and a linear head (examples/shared/
//! char_transformer.rs, which the demo page trains too); AdamW (decoupled weight decay on the
//! weight matrices only) with a linear warm-up then a cosine decay of the learning rate; then
//! it samples text.
//!
//! `cargo run --release --example char_transformer` (last line:
//! `final_loss=<nats/char> unigram_entropy=<nats/char>`).
// Native only (blocking device and readback, terminal progress bar).
#![cfg_attr(target_arch = "wasm32", no_main)]
#![cfg(not(target_arch = "wasm32"))]

#[path = "shared/char_transformer.rs"]
mod model;

use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use model::{draw, lr_at, CharTransformer, Config, Corpus};
use wgtensor::ops::{cross_entropy, softmax};
use wgtensor::optim::clip_grad_norm;
use wgtensor::{no_grad, Device, Result, Tensor};

/// The model's sizes. Few heads and a short context keep a step cheap on a software
/// adapter (lavapipe): there the attention's cost grows with batch x heads far more than the
/// width's does.
const CONFIG: Config = Config {
    seq: 32,
    d_model: 128,
    heads: 2,
    layers: 2,
    ff: 256,
};
const BATCH: usize = 16;
const STEPS: usize = 800;
/// Peak learning rate, reached after `WARMUP` steps; cosine decay to `MIN_LR` at `STEPS`.
const LR: f64 = 3e-3;
const MIN_LR: f64 = 3e-4;
const WARMUP: usize = 50;
const WEIGHT_DECAY: f64 = 0.01;
/// Sampling temperature.
const TEMPERATURE: f64 = 0.8;

fn main() -> Result<()> {
    let started = Instant::now();
    let dev = Device::new()?;
    dev.manual_seed(1);
    let corpus = Corpus::new();
    let (ids, v, unigram, seq) = (&corpus.ids, corpus.vocab.len(), corpus.unigram, CONFIG.seq);
    let model = CharTransformer::new(&dev, v, &CONFIG)?;
    let mut opt = model.adamw(LR, WEIGHT_DECAY)?;
    // The optimizer's order (both groups), which `step_with` takes the gradients in.
    let params = opt.params().to_vec();
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
        let lr = lr_at(step, STEPS, WARMUP, LR, MIN_LR);
        opt.set_lr(lr)?;
        let starts: Vec<usize> = (0..BATCH).map(|_| next(ids.len() - seq - 1)).collect();
        let (x, y) = corpus.window(&dev, seq, &starts)?;
        let logits = model.logits(&x)?.reshape(&[BATCH * seq, v])?;
        let loss = cross_entropy(&logits, &y, &Default::default())?;
        let grads = loss.backward()?;
        let g: Vec<&Tensor> = params.iter().filter_map(|p| grads.get(p)).collect();
        let (clipped, _) = clip_grad_norm(&g, 1.0)?;
        let mut it = clipped.iter();
        let gs: Vec<Option<&Tensor>> = params
            .iter()
            .map(|p| grads.get(p).and_then(|_| it.next()))
            .collect();
        opt.step_with(&gs)?;
        let l = loss.to_vec::<f32>()?[0] as f64;
        recent.push(l);
        if recent.len() > 20 {
            recent.remove(0);
        }
        let msg = format!(
            "loss {:.3} nats/char (unigram {unigram:.3}) lr {lr:.1e} step {:.0} ms",
            recent.iter().sum::<f64>() / recent.len() as f64,
            t0.elapsed().as_secs_f64() * 1e3
        );
        bar.inc(1);
        // Without a terminal the bar is hidden: a line every 100 steps instead.
        if bar.is_hidden() && (step + 1) % 100 == 0 {
            eprintln!("step {}/{STEPS}: {msg}", step + 1);
        }
        bar.set_message(msg);
    }
    bar.finish();
    // Sample 200 characters, feeding the last `seq` characters each time.
    let mut out: Vec<usize> = ids[..seq].to_vec();
    no_grad(|| -> Result<()> {
        for _ in 0..200 {
            let x: Vec<i32> = out[out.len() - seq..].iter().map(|&c| c as i32).collect();
            let x = Tensor::from_slice(&dev, &x, &[1, seq])?;
            let last = model.logits(&x)?.narrow(1, seq - 1, 1)?.reshape(&[1, v])?;
            let p = softmax(&last.mul_scalar(1.0 / TEMPERATURE)?, -1)?.to_vec::<f32>()?;
            out.push(draw(&p, next(1_000_000) as f32 / 1e6));
        }
        Ok(())
    })?;
    let sample: String = out[seq..].iter().map(|&i| corpus.vocab[i]).collect();
    println!("sample (temperature {TEMPERATURE}):\n{sample}\n");
    let st = dev.stats();
    println!(
        "device: {} dispatches, {} submissions (peak in flight {}), pool live {} KiB, peak {} KiB; \
         {:.1} s in all",
        st.dispatches,
        st.submissions,
        st.peak_in_flight,
        st.pool.live_bytes >> 10,
        st.pool.peak_bytes >> 10,
        started.elapsed().as_secs_f64()
    );
    let final_loss = recent.iter().sum::<f64>() / recent.len() as f64;
    println!("final_loss={final_loss:.4} unigram_entropy={unigram:.4}");
    Ok(())
}
