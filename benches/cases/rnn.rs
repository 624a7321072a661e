//! Recurrent cases: one LSTM or GRU layer over a sequence, forward and (LSTM) backward. They
//! report GEMM gflops, since the input projection and the per-step recurrent products are the
//! work; the per-step elementwise gates are counted in the time, not in the flops.

use wgtensor::ops::{Rnn, RnnKind, RnnWeights};
use wgtensor::{DType, Device, Tensor};

use super::inputs::{data, tensor};
use super::{Case, Run};

/// (T, batch, input, hidden): input 64, hidden 64, batch 256, T 50, one layer.
const RNN: (usize, usize, usize, usize) = (50, 256, 64, 64);

/// GEMM flops of a forward: input projection plus the recurrent product of every step.
fn rnn_flops(gates: usize) -> f64 {
    rnn_flops_of(RNN, gates)
}

/// [`rnn_flops`] for the problem `(T, batch, input, hidden)`.
pub fn rnn_flops_of(dims: (usize, usize, usize, usize), gates: usize) -> f64 {
    let (t, b, i, h) = dims;
    2.0 * (t * b * gates * h * (i + h)) as f64
}

/// The layer and its input, weights in PyTorch's init range U(-1/sqrt(H), 1/sqrt(H)) so the
/// gates stay out of saturation.
fn rnn_problem(
    dev: &Device,
    kind: RnnKind,
    dims: (usize, usize, usize, usize),
) -> wgtensor::Result<(Rnn, Tensor)> {
    let (t, b, i, h) = dims;
    let g = kind.gates();
    let scale = 1.0 / (h as f32).sqrt();
    let w = |shape: &[usize], seed| -> wgtensor::Result<Tensor> {
        let n = shape.iter().product();
        Tensor::from_slice(
            dev,
            &data(n, seed).iter().map(|v| v * scale).collect::<Vec<_>>(),
            shape,
        )
    };
    let weights = RnnWeights::new(
        kind,
        &w(&[g * h, i], 11)?,
        &w(&[g * h, h], 12)?,
        Some(&w(&[g * h], 13)?),
        Some(&w(&[g * h], 14)?),
    )?;
    let rnn = Rnn::new(
        kind,
        wgtensor::ops::RnnOptions {
            num_layers: 1,
            bidirectional: false,
            batch_first: false,
        },
        vec![weights],
    )?;
    let x = tensor(dev, &[t, b, i], DType::F32, 15)?;
    Ok((rnn, x))
}

fn rnn_case(dev: &Device, kind: RnnKind) -> wgtensor::Result<Run> {
    rnn_forward_run(dev, kind, RNN)
}

/// The forward of one layer on the problem `(T, batch, input, hidden)`.
pub fn rnn_forward_run(
    dev: &Device,
    kind: RnnKind,
    dims: (usize, usize, usize, usize),
) -> wgtensor::Result<Run> {
    let (rnn, x) = rnn_problem(dev, kind, dims)?;
    dev.sync()?;
    Ok(Box::new(move || rnn.forward(&x, None, None).map(drop)))
}

/// forward_train + backward of the lstm_seq problem: backward needs the saved activations of
/// its own forward, so each run does both.
fn rnn_backward_case(dev: &Device) -> wgtensor::Result<Run> {
    lstm_train_run(dev, RNN)
}

/// [`rnn_backward_case`] on the problem `(T, batch, input, hidden)`.
pub fn lstm_train_run(dev: &Device, dims: (usize, usize, usize, usize)) -> wgtensor::Result<Run> {
    let (t, b, _, h) = dims;
    let (rnn, x) = rnn_problem(dev, RnnKind::Lstm, dims)?;
    let dy = tensor(dev, &[t, b, h], DType::F32, 16)?;
    dev.sync()?;
    Ok(Box::new(move || {
        let (_, saved) = rnn.forward_train(&x, None, None)?;
        rnn.backward(&saved, &dy, None, None).map(drop)
    }))
}

pub fn cases() -> Vec<Case> {
    vec![
        Case::new("lstm_seq", |d| rnn_case(d, RnnKind::Lstm)).flops(rnn_flops(4)),
        Case::new("gru_seq", |d| rnn_case(d, RnnKind::Gru)).flops(rnn_flops(3)),
        // Forward, then backward: the recurrent gradient of every step plus the three
        // whole-sequence GEMMs (dW_ih, dW_hh, dx), about twice the forward's flops.
        Case::new("lstm_seq_backward", rnn_backward_case).flops(3.0 * rnn_flops(4)),
    ]
}
