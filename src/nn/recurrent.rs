//! `nn.LSTM` and `nn.GRU`: PyTorch's parameter names (`weight_ih_l{k}`, `weight_hh_l{k}`,
//! `bias_ih_l{k}`, `bias_hh_l{k}`, `_reverse` for the second direction) and initialization
//! (every weight and bias `U(-1/sqrt(H), 1/sqrt(H))`), over the fused [`Rnn`] kernels.

use super::Module;
use crate::ops::{uniform, Rnn, RnnKind, RnnOutput, RnnWeights};
use crate::{DType, Device, Result, Tensor};

/// Shape options of [`Lstm`] and [`Gru`] beyond the input and hidden sizes (PyTorch's
/// defaults: one layer, one direction, `[T, B, I]` inputs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RnnConfig {
    /// Stacked layers.
    pub num_layers: usize,
    /// A second direction over the reversed sequence; outputs are concatenated.
    pub bidirectional: bool,
    /// Inputs and outputs are `[B, T, F]` instead of `[T, B, F]`.
    pub batch_first: bool,
}

impl Default for RnnConfig {
    fn default() -> Self {
        RnnConfig {
            num_layers: 1,
            bidirectional: false,
            batch_first: false,
        }
    }
}

/// A recurrent layer: the fused kernels' [`Rnn`] and the parameters by their PyTorch names.
#[derive(Debug, Clone)]
pub struct Recurrent {
    /// The model the forward pass runs (it shares storage with the parameters).
    pub rnn: Rnn,
    params: Vec<(String, Tensor)>,
}

impl Recurrent {
    fn new(
        dev: &Device,
        kind: RnnKind,
        input_size: usize,
        hidden_size: usize,
        c: RnnConfig,
    ) -> Result<Recurrent> {
        let d = if c.bidirectional { 2 } else { 1 };
        let g = kind.gates() * hidden_size;
        let k = if hidden_size > 0 {
            1.0 / (hidden_size as f64).sqrt()
        } else {
            0.0
        };
        let mut weights = Vec::new();
        let mut params = Vec::new();
        for l in 0..c.num_layers {
            for dir in 0..d {
                let suffix = if dir == 1 { "_reverse" } else { "" };
                let inp = if l == 0 { input_size } else { d * hidden_size };
                // Tracked parameters, as every layer's (see `layers::param`).
                let t = |shape: &[usize]| -> Result<Tensor> {
                    uniform(dev, shape, -k, k, DType::F32)?.requires_grad()
                };
                let (w_ih, w_hh, b_ih, b_hh) =
                    (t(&[g, inp])?, t(&[g, hidden_size])?, t(&[g])?, t(&[g])?);
                params.push((format!("weight_ih_l{l}{suffix}"), w_ih.clone()));
                params.push((format!("weight_hh_l{l}{suffix}"), w_hh.clone()));
                params.push((format!("bias_ih_l{l}{suffix}"), b_ih.clone()));
                params.push((format!("bias_hh_l{l}{suffix}"), b_hh.clone()));
                weights.push(RnnWeights::new(
                    kind,
                    &w_ih,
                    &w_hh,
                    Some(&b_ih),
                    Some(&b_hh),
                )?);
            }
        }
        let rnn = Rnn::new(kind, c.num_layers, c.bidirectional, c.batch_first, weights)?;
        Ok(Recurrent { rnn, params })
    }

    /// The full forward: output and final states from optional initial states
    /// (`[num_layers * D, B, H]`, zeros when absent).
    pub fn forward_with_state(
        &self,
        x: &Tensor,
        h0: Option<&Tensor>,
        c0: Option<&Tensor>,
    ) -> Result<RnnOutput> {
        self.rnn.forward(x, h0, c0)
    }
}

impl Module for Recurrent {
    /// The output sequence (use [`Recurrent::forward_with_state`] for the final states).
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(self.rnn.forward(x, None, None)?.output)
    }
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.params.clone()
    }
}

/// PyTorch's `nn.LSTM(input_size, hidden_size, num_layers, bidirectional, batch_first)`.
pub struct Lstm;

impl Lstm {
    /// A new LSTM with PyTorch's initialization.
    #[allow(clippy::new_ret_no_self)]
    pub fn new(
        dev: &Device,
        input_size: usize,
        hidden_size: usize,
        c: RnnConfig,
    ) -> Result<Recurrent> {
        Recurrent::new(dev, RnnKind::Lstm, input_size, hidden_size, c)
    }
}

/// PyTorch's `nn.GRU(input_size, hidden_size, num_layers, bidirectional, batch_first)`.
pub struct Gru;

impl Gru {
    /// A new GRU with PyTorch's initialization.
    #[allow(clippy::new_ret_no_self)]
    pub fn new(
        dev: &Device,
        input_size: usize,
        hidden_size: usize,
        c: RnnConfig,
    ) -> Result<Recurrent> {
        Recurrent::new(dev, RnnKind::Gru, input_size, hidden_size, c)
    }
}
