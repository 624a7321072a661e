//! Model-level fuzz: random small models built from the `nn` layers, random shapes (0
//! included) and dtypes, run through forward, backward, an optimizer step, save and reload.
//! A valid case must give finite results and a reloaded model that computes the same output;
//! an invalid one (a wrong feature count, an f16 input to f32 layers, an empty channel dim)
//! must be a clean `Err`. Nothing may panic or hang, and the device stays usable throughout.

use std::sync::mpsc;
use std::time::Duration;

use wgtensor::nn::{self, Forward, Module};
use wgtensor::optim::{Adam, AdamOptions};
use wgtensor::{io, DType, Device, Tensor};

struct Rng(u64);
impl Rng {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n.max(1) as u64) as usize
    }
}

/// A random model and an input for it; `valid` says whether the input fits the model.
fn build(d: &Device, r: &mut Rng) -> wgtensor::Result<(nn::Sequential, Tensor, bool)> {
    let batch = [0, 1, 2, 3][r.next(4)];
    let mut valid = true;
    let (model, x) = if r.next(2) == 0 {
        // An MLP: Linear / activation / Dropout layers.
        let mut feats = 1 + r.next(6);
        let first = feats;
        let mut m = nn::Sequential::new();
        for _ in 0..1 + r.next(3) {
            let out = 1 + r.next(6);
            m = m.push(nn::Linear::new(d, feats, out, r.next(2) == 0)?);
            m = match r.next(4) {
                0 => m.push(nn::ReLU),
                1 => m.push(nn::Tanh),
                2 => m.push(nn::Dropout::new(0.25)),
                _ => m.push(nn::GELU),
            };
            feats = out;
        }
        let mut inf = first;
        if r.next(6) == 0 {
            inf += 1; // wrong feature count
            valid = false;
        }
        let v: Vec<f32> = (0..batch * inf)
            .map(|i| ((i * 7 % 11) as f32 - 5.0) / 4.0)
            .collect();
        (m, Tensor::from_slice(d, &v, &[batch, inf])?)
    } else {
        // A CNN: conv, batch norm, relu, a pool, flatten, linear.
        let c = 1 + r.next(3);
        let o = 1 + r.next(4);
        let hw = 4 + r.next(4);
        let k = 1 + r.next(3);
        let cfg = nn::Conv2dConfig {
            padding: k / 2,
            ..Default::default()
        };
        let oh = hw + 2 * (k / 2) - k + 1;
        let pooled = oh / 2;
        let m = nn::Sequential::new()
            .push(nn::Conv2d::new(d, c, o, k, cfg)?)
            .push(nn::BatchNorm2d::new(d, o)?)
            .push(nn::ReLU)
            .push(nn::MaxPool2d(wgtensor::ops::MaxPool2dOptions::new(2)))
            .push(nn::Flatten)
            .push(nn::Linear::new(d, o * pooled * pooled, 3, true)?);
        let mut cin = c;
        if r.next(6) == 0 {
            cin += 1; // wrong channel count
            valid = false;
        }
        let n = batch * cin * hw * hw;
        let v: Vec<f32> = (0..n).map(|i| ((i * 5 % 13) as f32 - 6.0) / 5.0).collect();
        // Batch norm in training needs more than one value per channel.
        if batch * pooled * pooled == 0 && batch > 0 {
            valid = false;
        }
        (m, Tensor::from_slice(d, &v, &[batch, cin, hw, hw])?)
    };
    let x = if r.next(8) == 0 && d.supports_f16() {
        valid = false; // f16 input to f32 layers
        x.to_dtype(DType::F16)?
    } else {
        x
    };
    Ok((model, x, valid))
}

fn finite(t: &Tensor) -> wgtensor::Result<bool> {
    Ok(t.to_dtype(DType::F32)?
        .to_vec::<f32>()?
        .iter()
        .all(|v| v.is_finite()))
}

/// One case end to end; `Ok(true)` when it ran (valid), `Ok(false)` for a clean refusal.
fn run_case(d: &Device, seed: u64) -> wgtensor::Result<bool> {
    let mut r = Rng(seed);
    let (mut model, x, valid) = build(d, &mut r)?;
    let result = (|| -> wgtensor::Result<Tensor> {
        model.set_training(true);
        let y = model.forward(&x)?;
        let loss = y.mul(&y)?.sum_all()?;
        let grads = loss.backward()?;
        let mut opt = Adam::new(model.named_parameters(), AdamOptions::default())?;
        opt.step(&grads)?;
        assert!(finite(&loss)?, "seed {seed}: loss not finite");
        Ok(y)
    })();
    let y = match (result, valid) {
        (Ok(y), true) => y,
        (Err(_), false) => return Ok(false),
        (Ok(y), false) => panic!("seed {seed}: an invalid case ran, giving {:?}", y.shape()),
        (Err(e), true) => panic!("seed {seed}: a valid case failed: {e}"),
    };
    assert!(finite(&y)?, "seed {seed}: output not finite");
    // Save and reload into a fresh model of the same shape, then compare in eval mode.
    model.set_training(false);
    let sd = model.state_dict();
    let named: Vec<(&str, &Tensor)> = sd.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let bytes = io::save_safetensors(&named)?;
    let loaded = io::load_safetensors(d, &bytes)?;
    let mut r2 = Rng(seed);
    let (mut fresh, _, _) = build(d, &mut r2)?;
    nn::load_state_dict(&mut fresh, &loaded, true)?;
    fresh.set_training(false);
    let a = model.forward(&x)?.to_vec::<f32>()?;
    let b = fresh.forward(&x)?.to_vec::<f32>()?;
    assert_eq!(
        a, b,
        "seed {seed}: the reloaded model computes something else"
    );
    Ok(true)
}

#[test]
fn random_models_train_save_and_reload_or_fail_cleanly() {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let d = Device::new().unwrap();
        let mut ran = 0;
        for seed in 0..24u64 {
            if run_case(&d, seed * 7919 + 1).unwrap() {
                ran += 1;
            }
            // The device stays usable after every case, refused or not.
            let t = Tensor::from_slice(&d, &[1.0f32, 2.0], &[2]).unwrap();
            assert_eq!(
                t.add_scalar(1.0).unwrap().to_vec::<f32>().unwrap(),
                vec![2.0, 3.0]
            );
        }
        tx.send(ran).unwrap();
    });
    match rx.recv_timeout(Duration::from_secs(300)) {
        Ok(ran) => assert!(ran >= 12, "only {ran} of 24 cases were valid"),
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("the model fuzz hung for 300 s"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("a model fuzz case panicked"),
    }
}
