//! Whole training steps of the two example models (examples/train_cnn.rs and
//! examples/char_lstm.rs) on a fixed batch: forward, backward through autograd, and an Adam
//! step. What a user training those models pays per step, all dispatch overhead included.
//!
//! - `cnn_train_step`: the digits CNN (conv + batch norm, grouped and depthwise convs, max
//!   pool, linear) on a [64, 1, 8, 8] batch, class-index cross_entropy.
//! - `lstm_train_step`: embedding (V = 96, E = 32), a 2-layer LSTM (hidden 128) over T = 32,
//!   B = 16, a linear head, class-index cross_entropy.
//! - `lstm_train_step_forward`, `lstm_train_step_backward`: that step's forward and loss alone,
//!   and with the backward (no Adam step); `lstm_train_step_rnn`: one layer's `forward_train`
//!   and `backward` at the second layer's shape (ops::Rnn alone). Together they say where the
//!   step's time goes.

use wgtensor::nn::{self, Forward, Module};
use wgtensor::ops::{cross_entropy, MaxPool2dOptions};
use wgtensor::optim::{Adam, AdamOptions};
use wgtensor::{Device, Tensor};

use super::inputs::data;
use super::{Case, Run};

fn adam(params: Vec<(String, Tensor)>) -> wgtensor::Result<Adam> {
    Adam::new(
        params,
        AdamOptions {
            lr: 1e-3,
            ..Default::default()
        },
    )
}

/// One step: loss, backward, Adam (gradients matched to parameters by identity).
fn step(loss: &Tensor, opt: &mut Adam) -> wgtensor::Result<()> {
    let grads = loss.backward()?;
    opt.step(&grads)
}

fn cnn_case(dev: &Device) -> wgtensor::Result<Run> {
    let cfg = |padding, groups| nn::Conv2dConfig {
        padding,
        groups,
        ..Default::default()
    };
    let m = nn::Sequential::new()
        .push(nn::Conv2d::new(dev, 1, 16, 3, cfg(1, 1))?)
        .push(nn::BatchNorm2d::new(dev, 16)?)
        .push(nn::ReLU)
        .push(nn::Conv2d::new(dev, 16, 32, 3, cfg(1, 4))?)
        .push(nn::ReLU)
        .push(nn::Conv2d::new(dev, 32, 32, 3, cfg(1, 32))?)
        .push(nn::ReLU)
        .push(nn::MaxPool2d(MaxPool2dOptions::new(2)))
        .push(nn::Flatten)
        .push(nn::Linear::new(dev, 32 * 4 * 4, 10, true)?);
    let mut opt = adam(m.named_parameters())?;
    let x = Tensor::from_slice(dev, &data(64 * 64, 3), &[64, 1, 8, 8])?;
    let labels: Vec<i32> = (0..64).map(|i| i * 7 % 10).collect();
    let y = Tensor::from_slice(dev, &labels, &[64])?;
    dev.sync()?;
    Ok(Box::new(move || {
        let loss = cross_entropy(&m.forward(&x)?, &y, &Default::default())?;
        step(&loss, &mut opt)
    }))
}

/// The char-LSTM model of `lstm_train_step` with its Adam, a batch and the loss closure's
/// pieces.
struct CharLstm {
    embed: nn::Embedding,
    lstm: nn::Recurrent,
    head: nn::Linear,
    opt: Adam,
    x: Tensor,
    y: Tensor,
}

const LSTM_T: usize = 32;
const LSTM_B: usize = 16;
const LSTM_H: usize = 128;

impl CharLstm {
    fn new(dev: &Device) -> wgtensor::Result<Self> {
        const V: usize = 96;
        let embed = nn::Embedding::new(dev, V, 32, None)?;
        let lstm = nn::Lstm::new(
            dev,
            32,
            LSTM_H,
            nn::RnnConfig {
                num_layers: 2,
                ..Default::default()
            },
        )?;
        let head = nn::Linear::new(dev, LSTM_H, V, true)?;
        let named: Vec<(String, Tensor)> = [
            ("embed", embed.named_parameters()),
            ("lstm", lstm.named_parameters()),
            ("head", head.named_parameters()),
        ]
        .into_iter()
        .flat_map(|(m, ps)| ps.into_iter().map(move |(n, t)| (format!("{m}.{n}"), t)))
        .collect();
        let opt = adam(named)?;
        let ids: Vec<i32> = (0..LSTM_T * LSTM_B)
            .map(|i| ((i * 31 + 7) % V) as i32)
            .collect();
        let x = Tensor::from_slice(dev, &ids, &[LSTM_T, LSTM_B])?;
        let next: Vec<i32> = ids.iter().map(|&i| (i + 1) % V as i32).collect();
        let y = Tensor::from_slice(dev, &next, &[LSTM_T * LSTM_B])?;
        dev.sync()?;
        Ok(CharLstm {
            embed,
            lstm,
            head,
            opt,
            x,
            y,
        })
    }

    fn loss(&self) -> wgtensor::Result<Tensor> {
        let h = self
            .lstm
            .forward(&self.embed.forward(&self.x)?)?
            .reshape(&[LSTM_T * LSTM_B, LSTM_H])?;
        cross_entropy(&self.head.forward(&h)?, &self.y, &Default::default())
    }
}

fn lstm_case(dev: &Device) -> wgtensor::Result<Run> {
    let mut m = CharLstm::new(dev)?;
    Ok(Box::new(move || {
        let loss = m.loss()?;
        step(&loss, &mut m.opt)
    }))
}

/// `lstm_train_step`'s forward and loss alone (recorded, no backward): with
/// `lstm_train_step_backward` it splits the step's time.
fn lstm_forward_case(dev: &Device) -> wgtensor::Result<Run> {
    let m = CharLstm::new(dev)?;
    Ok(Box::new(move || m.loss().map(drop)))
}

/// `lstm_train_step` without the Adam step: forward, loss and backward.
fn lstm_backward_case(dev: &Device) -> wgtensor::Result<Run> {
    let m = CharLstm::new(dev)?;
    Ok(Box::new(move || m.loss()?.backward().map(drop)))
}

pub fn cases() -> Vec<Case> {
    vec![
        Case::new("cnn_train_step", cnn_case),
        Case::new("lstm_train_step", lstm_case),
        Case::new("lstm_train_step_forward", lstm_forward_case),
        Case::new("lstm_train_step_backward", lstm_backward_case),
        Case::new("lstm_train_step_rnn", |d| {
            super::rnn::lstm_train_run(d, (LSTM_T, LSTM_B, LSTM_H, LSTM_H))
        }),
    ]
}
