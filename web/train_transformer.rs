//! The page's second live workload: the decoder-only character transformer of
//! `examples/char_transformer.rs` (the model, corpus and schedule are that example's,
//! `examples/shared/char_transformer.rs`), smaller, trained with AdamW under a warm-up then
//! cosine learning-rate schedule, one step per call. Same interface as web/train.rs:
//! `char_train_start(batch, steps)` builds it (the schedule needs the run's length), each
//! `char_train_step(eval)` runs one step and resolves to a JSON object with the same runtime
//! figures as `train_step`'s, `test_accuracy` null, and with `eval` a short `sample` of text
//! the model writes.

use std::cell::RefCell;
use std::fmt::Write as _;

use wasm_bindgen::prelude::*;
use wgtensor::ops::{cross_entropy, softmax};
use wgtensor::optim::Adam;
use wgtensor::{no_grad, Device, Result, Tensor};

use crate::js;

#[path = "../examples/shared/char_transformer.rs"]
mod model;

use model::{draw, lr_at, CharTransformer, Config, Corpus};

/// Smaller than the example's (a software adapter must keep up): 32 characters of context.
const CONFIG: Config = Config {
    seq: 32,
    d_model: 64,
    heads: 2,
    layers: 2,
    ff: 128,
};
const LR: f64 = 3e-3;
const WEIGHT_DECAY: f64 = 0.01;
/// Characters in an `eval` step's sample (continuing the start of the text).
const SAMPLE: usize = 24;

struct Trainer {
    dev: Device,
    corpus: Corpus,
    model: CharTransformer,
    opt: Adam,
    batch: usize,
    steps: usize,
    step: usize,
    rng: u64,
}

thread_local! {
    static TRAINER: RefCell<Option<Trainer>> = const { RefCell::new(None) };
}

async fn start(batch: usize, steps: usize) -> Result<Trainer> {
    let dev = Device::new_async().await?;
    dev.manual_seed(0);
    let corpus = Corpus::new();
    let model = CharTransformer::new(&dev, corpus.vocab.len(), &CONFIG)?;
    let opt = model.adamw(LR, WEIGHT_DECAY)?;
    Ok(Trainer {
        dev,
        corpus,
        model,
        opt,
        batch: batch.clamp(1, 64),
        steps: steps.max(1),
        step: 0,
        rng: 0x9e37_79b9_7f4a_7c15,
    })
}

impl Trainer {
    fn next(&mut self, n: usize) -> usize {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng % n as u64) as usize
    }

    /// `SAMPLE` characters continuing the text's first `seq` ones (temperature 0.8, a fixed
    /// seed: the same characters for the same weights).
    async fn sample(&self) -> Result<String> {
        let (seq, v) = (CONFIG.seq, self.corpus.vocab.len());
        let mut out: Vec<usize> = self.corpus.ids[..seq].to_vec();
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..SAMPLE {
            let x: Vec<i32> = out[out.len() - seq..].iter().map(|&c| c as i32).collect();
            let p = no_grad(|| -> Result<Tensor> {
                let x = Tensor::from_slice(&self.dev, &x, &[1, seq])?;
                let last = self.model.logits(&x)?.narrow(1, seq - 1, 1)?;
                softmax(&last.reshape(&[1, v])?.mul_scalar(1.0 / 0.8)?, -1)
            })?;
            let p = p.to_vec_async::<f32>().await?;
            rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            out.push(draw(&p, (rng >> 40) as f32 / (1u64 << 24) as f32));
        }
        Ok(out[seq..].iter().map(|&i| self.corpus.vocab[i]).collect())
    }

    /// One step at the schedule's learning rate; with `eval` also a sample.
    async fn step(&mut self, eval: bool) -> Result<String> {
        let t0 = crate::now_ms();
        let (seq, v) = (CONFIG.seq, self.corpus.vocab.len());
        let warmup = (self.steps / 10).clamp(1, 50);
        let lr = lr_at(self.step, self.steps, warmup, LR, LR / 10.0);
        self.opt.set_lr(lr)?;
        let len = self.corpus.ids.len();
        let starts: Vec<usize> = (0..self.batch).map(|_| self.next(len - seq - 1)).collect();
        let (x, y) = self.corpus.window(&self.dev, seq, &starts)?;
        let logits = self.model.logits(&x)?.reshape(&[self.batch * seq, v])?;
        let loss = cross_entropy(&logits, &y, &Default::default())?;
        let grads = loss.backward()?;
        self.opt.step(&grads)?;
        let loss = loss.to_vec_async::<f32>().await?[0];
        self.step += 1;
        let step_ms = crate::now_ms() - t0;
        let sample = if eval {
            crate::json_str(&self.sample().await?)
        } else {
            "null".to_string()
        };
        let mut j = String::new();
        let _ = write!(
            j,
            "{{\"step\":{},\"loss\":{loss:.5},\"test_accuracy\":null,\"lr\":{lr:.6},\
             \"unigram\":{:.4},\"sample\":{sample},\"step_ms\":{step_ms:.1}{}}}",
            self.step,
            self.corpus.unigram,
            crate::device_stats_json(&self.dev),
        );
        Ok(j)
    }
}

/// Builds a fresh model and optimizer for a run of `steps` steps of `batch` windows (a new
/// device, so the figures start from zero).
#[wasm_bindgen]
pub async fn char_train_start(batch: usize, steps: usize) -> std::result::Result<(), JsValue> {
    let t = start(batch, steps).await.map_err(js)?;
    TRAINER.with(|c| *c.borrow_mut() = Some(t));
    Ok(())
}

/// One training step; with `eval` also a sample of text. Resolves to a JSON object.
#[wasm_bindgen]
pub async fn char_train_step(eval: bool) -> std::result::Result<String, JsValue> {
    let mut t = TRAINER
        .with(|c| c.borrow_mut().take())
        .ok_or_else(|| JsValue::from_str("char_train_start has not run"))?;
    let r = t.step(eval).await;
    TRAINER.with(|c| *c.borrow_mut() = Some(t));
    r.map_err(js)
}
