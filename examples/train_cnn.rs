//! Trains a small CNN on the 8x8 handwritten digits (1,797 images shipped as
//! examples/digits.bin; see the README for their origin and license) with the crate's layers,
//! autograd and Adam: a convolution with batch norm, a grouped convolution, a depthwise
//! convolution, max pooling and a linear classifier. Then it saves the weights to safetensors,
//! reloads them into a fresh model and checks the test accuracy again.
//!
//! `cargo run --release --example train_cnn` (last line: `test_accuracy=<x>`).
// Native only (blocking device and readback, terminal progress bar).
#![cfg_attr(target_arch = "wasm32", no_main)]
#![cfg(not(target_arch = "wasm32"))]

use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use wgtensor::io::{load_safetensors_file, save_safetensors_file};
use wgtensor::nn::{self, Forward, Module};
use wgtensor::ops::{cross_entropy, MaxPool2dOptions};
use wgtensor::optim::{Adam, AdamOptions};
use wgtensor::{no_grad, Device, Result, Tensor};

/// 65 bytes per image: 64 pixels (0..=16, row-major 8x8), then the label.
const DIGITS: &[u8] = include_bytes!("digits.bin");
const EPOCHS: usize = 15;
const BATCH: usize = 64;
const TEST: usize = 360;

fn model(dev: &Device) -> Result<nn::Sequential> {
    let cfg = |padding, groups| nn::Conv2dConfig {
        padding,
        groups,
        ..Default::default()
    };
    Ok(nn::Sequential::new()
        .push(nn::Conv2d::new(dev, 1, 16, 3, cfg(1, 1))?)
        .push(nn::BatchNorm2d::new(dev, 16)?)
        .push(nn::ReLU)
        .push(nn::Conv2d::new(dev, 16, 32, 3, cfg(1, 4))?) // grouped
        .push(nn::ReLU)
        .push(nn::Conv2d::new(dev, 32, 32, 3, cfg(1, 32))?) // depthwise
        .push(nn::ReLU)
        .push(nn::MaxPool2d(MaxPool2dOptions::new(2)))
        .push(nn::Flatten)
        .push(nn::Linear::new(dev, 32 * 4 * 4, 10, true)?))
}

/// Images [n, 1, 8, 8] scaled to [0, 1] and their i32 labels [n] for the samples `idx`.
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

/// The fraction of samples whose largest logit is at the label, computed on the device
/// (argmax, eq, mean): one number is read back.
fn evaluate(m: &mut nn::Sequential, x: &Tensor, labels: &Tensor) -> Result<f64> {
    m.eval();
    let logits = no_grad(|| m.forward(x))?;
    let acc = logits.argmax(1, false)?.eq(labels)?.mean_all()?;
    m.train();
    Ok(acc.to_vec::<f32>()?[0] as f64)
}

fn main() -> Result<()> {
    let dev = Device::new()?;
    dev.manual_seed(0);
    let n = DIGITS.len() / 65;
    // A fixed shuffle (64-bit LCG), then the last TEST images are held out.
    let mut order: Vec<usize> = (0..n).collect();
    let mut s = 0x2545_f491_4f6c_dd1du64;
    for i in (1..n).rev() {
        s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        order.swap(i, (s >> 33) as usize % (i + 1));
    }
    let (train, test) = order.split_at(n - TEST);
    let (xt, test_labels) = batch(&dev, test)?;
    let mut m = model(&dev)?;
    // Named parameters; each step finds their gradients by identity.
    let mut opt = Adam::new(
        m.named_parameters(),
        AdamOptions {
            lr: 3e-3,
            ..Default::default()
        },
    )?;
    let steps_per_epoch = train.len().div_ceil(BATCH);
    let bar = ProgressBar::new((EPOCHS * steps_per_epoch) as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut live_after_first_epoch = 0;
    for epoch in 0..EPOCHS {
        let mut loss_sum = 0.0;
        let t0 = Instant::now();
        for chunk in train.chunks(BATCH) {
            let (x, y) = batch(&dev, chunk)?;
            let logits = m.forward(&x)?;
            let loss = cross_entropy(&logits, &y, &Default::default())?;
            let grads = loss.backward()?;
            opt.step(&grads)?;
            loss_sum += loss.to_vec::<f32>()?[0] as f64;
            bar.inc(1);
        }
        let step_ms = t0.elapsed().as_secs_f64() * 1e3 / steps_per_epoch as f64;
        let acc = evaluate(&mut m, &xt, &test_labels)?;
        bar.set_message(format!(
            "epoch {} loss {:.4} test accuracy {:.3} step {step_ms:.1} ms",
            epoch + 1,
            loss_sum / steps_per_epoch as f64,
            acc
        ));
        if epoch == 0 {
            live_after_first_epoch = dev.stats().pool.live_bytes;
        }
    }
    bar.finish();
    let acc = evaluate(&mut m, &xt, &test_labels)?;
    // Save, reload into a fresh model, check again.
    let path = std::env::temp_dir().join("wgtensor-digits-cnn.safetensors");
    let sd = m.state_dict();
    let refs: Vec<(&str, &Tensor)> = sd.iter().map(|(n, t)| (n.as_str(), t)).collect();
    save_safetensors_file(&path, &refs)?;
    let mut fresh = model(&dev)?;
    nn::load_state_dict(&mut fresh, &load_safetensors_file(&dev, &path)?, true)?;
    let reloaded = evaluate(&mut fresh, &xt, &test_labels)?;
    let st = dev.stats();
    println!(
        "weights saved to {} and reloaded: test accuracy {reloaded:.4} (before saving {acc:.4})",
        path.display()
    );
    println!(
        "device: {} dispatches, {} submissions (peak in flight {}), {} pipelines; pool live {} KiB \
         (after epoch 1: {} KiB), peak {} KiB",
        st.dispatches,
        st.submissions,
        st.peak_in_flight,
        st.pipelines_compiled,
        st.pool.live_bytes >> 10,
        live_after_first_epoch >> 10,
        st.pool.peak_bytes >> 10
    );
    println!("test_accuracy={reloaded:.4}");
    Ok(())
}
