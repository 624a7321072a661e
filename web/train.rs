//! The page's live workload: a small CNN trained on the 8x8 handwritten digits
//! (examples/digits.bin, the training example's data) with the crate's nn layers, autograd,
//! class-index cross_entropy and Adam, one step per call so the page can draw the loss between
//! steps. The trainer lives in a thread-local (the page is single-threaded); `train_start`
//! builds it, `train_step` runs one step and resolves to a JSON line of figures.

use std::cell::RefCell;
use std::fmt::Write as _;

use wasm_bindgen::prelude::*;
use wgtensor::nn::{self, Forward, Module};
use wgtensor::ops::{cross_entropy, MaxPool2dOptions};
use wgtensor::optim::{Adam, AdamOptions};
use wgtensor::{no_grad, Device, Result, Tensor};

use crate::js;

/// 65 bytes per image: 64 pixels (0..=16, row-major 8x8), then the label.
const DIGITS: &[u8] = include_bytes!("../examples/digits.bin");
/// Held-out images (the last ones of a fixed shuffle), as in the training example.
const TEST: usize = 360;

struct Trainer {
    dev: Device,
    model: nn::Sequential,
    opt: Adam,
    train: Vec<usize>,
    batch: usize,
    step: usize,
    test_x: Tensor,
    test_y: Tensor,
}

thread_local! {
    static TRAINER: RefCell<Option<Trainer>> = const { RefCell::new(None) };
}

/// Images `[n, 1, 8, 8]` in [0, 1] and i32 labels `[n]` of the samples `idx`.
fn batch(dev: &Device, idx: &[usize]) -> Result<(Tensor, Tensor)> {
    let mut px = Vec::with_capacity(idx.len() * 64);
    let mut labels = Vec::with_capacity(idx.len());
    for &i in idx {
        let rec = &DIGITS[i * 65..(i + 1) * 65];
        px.extend(rec[..64].iter().map(|&p| p as f32 / 16.0));
        labels.push(rec[64] as i32);
    }
    Ok((
        Tensor::from_slice(dev, &px, &[idx.len(), 1, 8, 8])?,
        Tensor::from_slice(dev, &labels, &[idx.len()])?,
    ))
}

async fn start(batch_size: usize) -> Result<Trainer> {
    let dev = Device::new_async().await?;
    dev.manual_seed(0);
    let n = DIGITS.len() / 65;
    let mut order: Vec<usize> = (0..n).collect();
    let mut s = 0x2545_f491_4f6c_dd1du64;
    for i in (1..n).rev() {
        s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        order.swap(i, (s >> 33) as usize % (i + 1));
    }
    let (train, test) = order.split_at(n - TEST);
    let (test_x, test_y) = batch(&dev, test)?;
    let model = nn::Sequential::new()
        .push(nn::Conv2d::new(
            &dev,
            1,
            16,
            3,
            nn::Conv2dConfig {
                padding: 1,
                ..Default::default()
            },
        )?)
        .push(nn::ReLU)
        .push(nn::MaxPool2d(MaxPool2dOptions::new(2)))
        .push(nn::Flatten)
        .push(nn::Linear::new(&dev, 16 * 4 * 4, 10, true)?);
    let opt = Adam::new(
        model.named_parameters(),
        AdamOptions {
            lr: 5e-3,
            ..Default::default()
        },
    )?;
    Ok(Trainer {
        dev,
        model,
        opt,
        train: train.to_vec(),
        batch: batch_size.clamp(1, 512),
        step: 0,
        test_x,
        test_y,
    })
}

impl Trainer {
    /// One step; every `eval_every` steps also the test accuracy (computed on the device).
    async fn step(&mut self, eval: bool) -> Result<String> {
        let t0 = crate::now_ms();
        let n = self.train.len();
        let from = (self.step * self.batch) % n;
        let idx: Vec<usize> = (0..self.batch)
            .map(|k| self.train[(from + k) % n])
            .collect();
        let (x, y) = batch(&self.dev, &idx)?;
        let loss = cross_entropy(&self.model.forward(&x)?, &y, &Default::default())?;
        let grads = loss.backward()?;
        self.opt.step(&grads)?;
        let loss = loss.to_vec_async::<f32>().await?[0];
        self.step += 1;
        let step_ms = crate::now_ms() - t0;
        let mut acc = String::from("null");
        if eval {
            let logits = no_grad(|| self.model.forward(&self.test_x))?;
            let a = logits.argmax(1, false)?.eq(&self.test_y)?.mean_all()?;
            acc = format!("{:.4}", a.to_vec_async::<f32>().await?[0]);
        }
        let mut j = String::new();
        let _ = write!(
            j,
            "{{\"step\":{},\"loss\":{loss:.5},\"test_accuracy\":{acc},\"step_ms\":{step_ms:.1}{}}}",
            self.step,
            crate::device_stats_json(&self.dev),
        );
        Ok(j)
    }
}

/// Builds a fresh model and optimizer (a new device, so the figures start from zero).
#[wasm_bindgen]
pub async fn train_start(batch_size: usize) -> std::result::Result<(), JsValue> {
    let t = start(batch_size).await.map_err(js)?;
    TRAINER.with(|c| *c.borrow_mut() = Some(t));
    Ok(())
}

/// One training step; with `eval` also the held-out accuracy. Resolves to a JSON object.
#[wasm_bindgen]
pub async fn train_step(eval: bool) -> std::result::Result<String, JsValue> {
    let mut t = TRAINER
        .with(|c| c.borrow_mut().take())
        .ok_or_else(|| JsValue::from_str("train_start has not run"))?;
    let r = t.step(eval).await;
    TRAINER.with(|c| *c.borrow_mut() = Some(t));
    r.map_err(js)
}
