//! `nn.LSTM` and `nn.GRU`: PyTorch's parameter names (`weight_ih_l{k}`, `weight_hh_l{k}`,
//! `bias_ih_l{k}`, `bias_hh_l{k}`, `_reverse` for the second direction) and initialization
//! (every weight and bias `U(-1/sqrt(H), 1/sqrt(H))`), over the fused [`Rnn`] kernels.

use super::{Forward, Module, Visitor, VisitorMut, MAX_LAYERS};
use crate::ops::{uniform, Rnn, RnnKind, RnnOutput, RnnWeights};
use crate::{DType, Device, Result, Tensor};

/// Shape options of [`Lstm`] and [`Gru`] beyond the input and hidden sizes (PyTorch's
/// defaults: one layer, one direction, `[T, B, I]` inputs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RnnConfig {
    /// Stacked layers.
    pub num_layers: usize,
    /// A second direction over the reversed sequence; outputs are concatenated.
    pub bidirectional: bool,
    /// Inputs and outputs are `[B, T, F]` instead of `[T, B, F]`.
    pub batch_first: bool,
    /// Dropout probability on the outputs of every layer but the last, in training only
    /// (PyTorch's `dropout`; 0 turns it off). With one layer it drops nothing, where PyTorch
    /// also warns (this crate has no warnings).
    pub dropout: f64,
}

impl Default for RnnConfig {
    fn default() -> Self {
        RnnConfig {
            num_layers: 1,
            bidirectional: false,
            batch_first: false,
            dropout: 0.0,
        }
    }
}

/// A recurrent layer: the fused kernels' [`Rnn`] and the parameters by their PyTorch names.
#[derive(Debug, Clone)]
pub struct Recurrent {
    /// The model the forward pass runs (it shares storage with the parameters). Training and
    /// evaluation both run it as it is; but the state dict and `named_parameters` list the
    /// tensors made at construction, so change weights by writing into them
    /// ([`Tensor::copy_from`]), not by replacing a weight set.
    pub rnn: Rnn,
    params: Vec<(String, Tensor)>,
    /// Dropout between layers: in training with several layers, the layers run one at a time
    /// (single-layer models over `rnn`'s weights, built at each call so that edits to `rnn`
    /// apply to training as to evaluation) with dropout in between.
    dropout: f64,
    training: bool,
}

/// RNNBase's dropout check, in its words (NaN refused too).
fn check_dropout(p: f64) -> Result<()> {
    if !(0.0..=1.0).contains(&p) {
        return Err(crate::Error::arg(
            "RNN",
            format!(
                "dropout should be a number in range [0, 1] representing the probability of an \
                 element being zeroed, got {p}"
            ),
        ));
    }
    Ok(())
}

impl Recurrent {
    /// The dropout probability between layers (PyTorch's `rnn.dropout`).
    pub fn dropout(&self) -> f64 {
        self.dropout
    }

    /// Sets the dropout between layers, used from the next forward (PyTorch's assignment to
    /// `rnn.dropout`); refused outside `[0, 1]`, as at construction.
    pub fn set_dropout(&mut self, p: f64) -> Result<()> {
        check_dropout(p)?;
        self.dropout = p;
        Ok(())
    }

    fn new(
        dev: &Device,
        kind: RnnKind,
        input_size: usize,
        hidden_size: usize,
        c: RnnConfig,
    ) -> Result<Recurrent> {
        check_dropout(c.dropout)?;
        // PyTorch's RNNBase refuses these at construction, in this order (the functional
        // ops and the cells take an input size of 0).
        for (name, v) in [
            ("input_size", input_size),
            ("hidden_size", hidden_size),
            ("num_layers", c.num_layers),
        ] {
            if v == 0 {
                return Err(crate::Error::arg(
                    "RNN",
                    format!("{name} must be greater than zero, got 0"),
                ));
            }
        }
        let d = if c.bidirectional { 2 } else { 1 };
        // Sizes are the caller's: bounded before any product (empty layers, hidden_size 0,
        // would otherwise let num_layers run a loop for ever).
        if c.num_layers > MAX_LAYERS {
            return Err(crate::Error::size(
                "RNN",
                format!(
                    "num_layers {} is above the supported {MAX_LAYERS}",
                    c.num_layers
                ),
            ));
        }
        let g = kind.gates().checked_mul(hidden_size).ok_or_else(|| {
            crate::Error::size(
                "RNN",
                format!("hidden_size {hidden_size} overflows the gate count"),
            )
        })?;
        let k = 1.0 / (hidden_size as f64).sqrt();
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
        Recurrent::assemble(kind, c, weights, params)
    }

    /// The model over `weights`, indexed `layer * D + direction`, with `params` as the state
    /// dict lists them.
    fn assemble(
        kind: RnnKind,
        c: RnnConfig,
        weights: Vec<RnnWeights>,
        params: Vec<(String, Tensor)>,
    ) -> Result<Recurrent> {
        let rnn = Rnn::new(
            kind,
            crate::ops::RnnOptions {
                num_layers: c.num_layers,
                bidirectional: c.bidirectional,
                batch_first: c.batch_first,
            },
            weights,
        )?;
        Ok(Recurrent {
            rnn,
            params,
            dropout: c.dropout,
            training: true,
        })
    }

    /// The same layer without biases (PyTorch's `bias=False`): no `bias_ih_l*` / `bias_hh_l*`
    /// parameters, so the state dict lists the weights alone and loads PyTorch's `bias=False`
    /// files; the gates add nothing. The weights are kept (not re-drawn), as is the training
    /// mode.
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::nn::{self, Module};
    /// let dev = wgtensor::Device::new()?;
    /// let gru = nn::Gru::new(&dev, 4, 8, nn::RnnConfig::default())?.without_bias()?;
    /// let names: Vec<String> = gru.state_dict().into_iter().map(|(n, _)| n).collect();
    /// assert_eq!(names, ["weight_ih_l0", "weight_hh_l0"]);
    /// # Ok(()) }
    /// ```
    pub fn without_bias(self) -> Result<Recurrent> {
        let kind = self.rnn.kind;
        let params: Vec<(String, Tensor)> = self
            .params
            .into_iter()
            .filter(|(n, _)| n.starts_with("weight_"))
            .collect();
        // Two weights per (layer, direction), weight_ih first (see `Recurrent::new`).
        let weights = params
            .chunks(2)
            .map(|p| RnnWeights::new(kind, &p[0].1, &p[1].1, None, None))
            .collect::<Result<Vec<_>>>()?;
        let c = RnnConfig {
            num_layers: self.rnn.num_layers,
            bidirectional: self.rnn.bidirectional,
            batch_first: self.rnn.batch_first,
            dropout: self.dropout,
        };
        let mut r = Recurrent::assemble(kind, c, weights, params)?;
        r.training = self.training;
        Ok(r)
    }

    /// The full forward: output and final states from optional initial states
    /// (`[num_layers * D, B, H]`, zeros when absent). An unbatched `[T, I]` input takes and
    /// gives states without the batch dim, as PyTorch's ([`Rnn::forward`](crate::ops::Rnn::forward)).
    pub fn forward_with_state(
        &self,
        x: &Tensor,
        h0: Option<&Tensor>,
        c0: Option<&Tensor>,
    ) -> Result<RnnOutput> {
        if !self.training || self.dropout == 0.0 || self.rnn.num_layers < 2 {
            return self.rnn.forward(x, h0, c0);
        }
        // Layer by layer, dropout on every output but the last (PyTorch's placement).
        let d = if self.rnn.bidirectional { 2 } else { 1 };
        // The public fields re-checked first, as the one-call path does (an edited
        // `num_layers` would overflow the state check's row count), then the states whole, as
        // that path checks them (slices of a wrong-sized state would otherwise pass, or fail
        // as a narrow).
        let op = self.rnn.kind.name();
        self.rnn.check_weights()?;
        self.rnn.check_input(op, x, h0, c0)?;
        self.rnn.check_states(op, x, h0, c0)?;
        let state = |s: Option<&Tensor>, l: usize| s.map(|t| t.narrow(0, l * d, d)).transpose();
        let (mut hs, mut cs) = (Vec::new(), Vec::new());
        let mut input = x.clone();
        let r = &self.rnn;
        let options = crate::ops::RnnOptions {
            num_layers: 1,
            bidirectional: r.bidirectional,
            batch_first: r.batch_first,
        };
        let layers = r
            .weights
            .chunks(d)
            .map(|w| Rnn::new(r.kind, options, w.to_vec()))
            .collect::<Result<Vec<_>>>()?;
        let n = layers.len();
        for (l, layer) in layers.iter().enumerate() {
            let out = layer.forward(&input, state(h0, l)?.as_ref(), state(c0, l)?.as_ref())?;
            hs.push(out.h_n);
            cs.extend(out.c_n);
            input = if l + 1 < n {
                crate::ops::dropout(&out.output, self.dropout, true)?
            } else {
                out.output
            };
        }
        let cat = |v: &[Tensor]| crate::ops::cat(&v.iter().collect::<Vec<_>>(), 0);
        Ok(RnnOutput {
            output: input,
            h_n: cat(&hs)?,
            c_n: if cs.is_empty() { None } else { Some(cat(&cs)?) },
        })
    }
}

/// The parameters by PyTorch's names (`weight_ih_l0`, ...), the training flag (dropout
/// between layers).
impl Module for Recurrent {
    fn visit(&self, v: &mut dyn Visitor) {
        for (name, t) in &self.params {
            v.parameter(name, t);
        }
        v.training(self.training);
    }
    fn visit_mut(&mut self, v: &mut dyn VisitorMut) {
        v.training(&mut self.training);
    }
    fn layer_name(&self) -> &'static str {
        self.rnn.kind.classes().0
    }
}

impl Forward for Recurrent {
    /// The output sequence (use [`Recurrent::forward_with_state`] for the final states).
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(self.forward_with_state(x, None, None)?.output)
    }
}

/// PyTorch's `nn.LSTM(input_size, hidden_size, num_layers, bidirectional, batch_first,
/// dropout)`. `Lstm::new` returns the [`Recurrent`] layer (LSTM and GRU are one type, so a
/// model may hold either in one field).
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{self, Forward, Module};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let lstm = nn::Lstm::new(&dev, 10, 20, nn::RnnConfig { num_layers: 2, ..Default::default() })?;
/// assert_eq!(lstm.state_dict()[0].0, "weight_ih_l0");
/// let x = wgtensor::ops::randn(&dev, &[5, 3, 10], DType::F32)?; // [T, B, I]
/// let out = lstm.forward_with_state(&x, None, None)?;
/// assert_eq!((out.output.shape(), out.h_n.shape()), (&[5, 3, 20][..], &[2, 3, 20][..]));
/// # Ok(()) }
/// ```
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

/// PyTorch's `nn.GRU(input_size, hidden_size, num_layers, bidirectional, batch_first,
/// dropout)`. `Gru::new` returns the [`Recurrent`] layer (LSTM and GRU are one type, so a
/// model may hold either in one field).
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{self, Forward, Module};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let gru = nn::Gru::new(&dev, 10, 20, nn::RnnConfig { batch_first: true, bidirectional: true, ..Default::default() })?;
/// let y = gru.forward(&wgtensor::ops::randn(&dev, &[3, 5, 10], DType::F32)?)?; // [B, T, I]
/// assert_eq!(y.shape(), &[3, 5, 40]); // both directions
/// # Ok(()) }
/// ```
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
