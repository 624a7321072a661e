//! The LSTM / GRU parameter types: [`RnnKind`], [`RnnOptions`] and one layer's [`RnnWeights`].

use crate::{Error, Result, Tensor};

/// LSTM or GRU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RnnKind {
    /// PyTorch's `nn.LSTM`: gates (i, f, g, o), a hidden and a cell state.
    Lstm,
    /// PyTorch's `nn.GRU`: gates (r, z, n), a hidden state only.
    Gru,
}

impl RnnKind {
    /// Gates per hidden unit (PyTorch's multiplier of the weight rows).
    pub fn gates(self) -> usize {
        match self {
            RnnKind::Lstm => 4,
            RnnKind::Gru => 3,
        }
    }
    pub(crate) fn name(self) -> &'static str {
        match self {
            RnnKind::Lstm => "lstm",
            RnnKind::Gru => "gru",
        }
    }
    /// PyTorch's class of the layer (`"LSTM"`) and of its cell (`"LSTMCell"`), as its errors
    /// and layer names spell them.
    pub(crate) fn classes(self) -> (&'static str, &'static str) {
        match self {
            RnnKind::Lstm => ("LSTM", "LSTMCell"),
            RnnKind::Gru => ("GRU", "GRUCell"),
        }
    }
}

/// Shape options of [`Rnn::new`](crate::ops::Rnn::new), with PyTorch's `nn.LSTM` / `nn.GRU`
/// defaults (one layer, one direction, `[T, B, F]` sequences).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RnnOptions {
    /// Stacked layers; layer `l > 0` reads the `D * H` outputs of layer `l - 1`.
    pub num_layers: usize,
    /// A second direction over the reversed sequence; outputs concatenated (forward first).
    pub bidirectional: bool,
    /// Inputs and outputs are `[B, T, F]` instead of `[T, B, F]`.
    pub batch_first: bool,
}

impl Default for RnnOptions {
    fn default() -> Self {
        RnnOptions {
            num_layers: 1,
            bidirectional: false,
            batch_first: false,
        }
    }
}

/// Weights of one layer and direction, PyTorch layout.
///
/// G is [`RnnKind::gates`] (4 for LSTM, 3 for GRU), H the hidden size, I the layer's input
/// size (the model's input size for layer 0, `D * H` above it). Build with
/// [`RnnWeights::new`], which checks the shapes.
#[derive(Debug, Clone)]
pub struct RnnWeights {
    /// `[G*H, I]`, PyTorch's `weight_ih_l{k}`.
    pub w_ih: Tensor,
    /// `[G*H, H]`, PyTorch's `weight_hh_l{k}`.
    pub w_hh: Tensor,
    /// `[G*H]`, PyTorch's `bias_ih_l{k}`.
    pub b_ih: Tensor,
    /// `[G*H]`, PyTorch's `bias_hh_l{k}`.
    pub b_hh: Tensor,
}

impl RnnWeights {
    /// Checks the shapes against (kind, input size, hidden size); missing biases become zeros.
    pub fn new(
        kind: RnnKind,
        w_ih: &Tensor,
        w_hh: &Tensor,
        b_ih: Option<&Tensor>,
        b_hh: Option<&Tensor>,
    ) -> Result<RnnWeights> {
        let op = kind.name();
        if w_hh.rank() != 2 || w_hh.shape()[0] != kind.gates() * w_hh.shape()[1] {
            return Err(Error::shape(
                op,
                format!(
                    "weight_hh must be [{} * H, H], got {:?}",
                    kind.gates(),
                    w_hh.shape()
                ),
            ));
        }
        let gh = w_hh.shape()[0];
        if w_ih.rank() != 2 || w_ih.shape()[0] != gh {
            return Err(Error::shape(
                op,
                format!(
                    "weight_ih must be [{gh}, input_size] to match weight_hh {:?}, got {:?}",
                    w_hh.shape(),
                    w_ih.shape()
                ),
            ));
        }
        w_ih.same_device(op, w_hh)?;
        w_ih.same_dtype(op, w_hh)?;
        let bias = |b: Option<&Tensor>, what: &str| -> Result<Tensor> {
            match b {
                Some(t) => {
                    if t.shape() != [gh] {
                        return Err(Error::shape(
                            op,
                            format!("{what} must be [{gh}], got {:?}", t.shape()),
                        ));
                    }
                    w_ih.same_device(op, t)?;
                    w_ih.same_dtype(op, t)?;
                    Ok(t.clone())
                }
                None => Tensor::zeros(w_ih.device(), &[gh], w_ih.dtype()),
            }
        };
        Ok(RnnWeights {
            w_ih: w_ih.clone(),
            w_hh: w_hh.contiguous_at_zero()?,
            b_ih: bias(b_ih, "bias_ih")?,
            b_hh: bias(b_hh, "bias_hh")?.contiguous_at_zero()?,
        })
    }

    pub(crate) fn hidden(&self, kind: RnnKind) -> usize {
        self.w_hh.shape()[0] / kind.gates()
    }
    pub(crate) fn input(&self) -> usize {
        self.w_ih.shape()[1]
    }
}
