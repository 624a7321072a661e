//! Fused LSTM and GRU (shaders/rnn.wgsl, rnn_sg8.wgsl, rnn_wg.wgsl, rnn_ks.wgsl, rnn_seq.wgsl,
//! shaders/lib/rnn_common.wgsl).
//!
//! PyTorch semantics and layouts: LSTM gates (i, f, g, o), GRU gates (r, z, n) with r applied
//! to (W_hn h + b_hn); `W_ih [G*H, I]`, `W_hh [G*H, H]`, biases `[G*H]`; input `[T, B, I]`
//! (or `[B, T, I]` with `batch_first`). A layer runs one GEMM for the input projection of all
//! steps, then one fused dispatch per step (on GPUs with H <= 64, one per 64 steps: the
//! sequence kernel), all recorded into the batched encoder.

pub(crate) mod backward;
mod backward_kernels;
mod forward;
mod grad;
pub(crate) mod step;
pub(crate) mod weights;

pub use backward::{RnnGrads, RnnWeightGrads};
#[doc(hidden)]
pub use step::params_layout;
use step::*;
pub use weights::{RnnKind, RnnOptions, RnnWeights};

use std::collections::HashMap;

use crate::ops::gemm::{gemm, Bias, GemmOptions};
use crate::runtime::pipeline::ShaderVariant;
use crate::{DType, Error, Result, Tensor};

/// A multi-layer, optionally bidirectional LSTM or GRU (PyTorch's `nn.LSTM` / `nn.GRU`).
///
/// Built with [`Rnn::new`] or [`Rnn::from_pytorch`]; run with [`Rnn::forward`] (inference) or
/// [`Rnn::forward_train`] then [`Rnn::backward`] (BPTT). D is 2 when bidirectional, else 1.
/// The fields are public for inspection and updates (e.g. an optimizer step on the weights);
/// every run checks them again, so an edit that breaks the shapes is an error, not a
/// wrong result.
#[derive(Debug, Clone)]
pub struct Rnn {
    /// LSTM or GRU.
    pub kind: RnnKind,
    /// Features per step of the input (I).
    pub input_size: usize,
    /// Features of the hidden state (H).
    pub hidden_size: usize,
    /// Stacked layers; layer `l > 0` reads the `D * H` outputs of layer `l - 1`.
    pub num_layers: usize,
    /// A second direction runs over the reversed sequence; outputs are concatenated on the
    /// feature dim (forward first), as in PyTorch.
    pub bidirectional: bool,
    /// Input and output are `[B, T, ...]` instead of `[T, B, ...]` (the states stay
    /// `[num_layers * D, B, H]`), as PyTorch's `batch_first`.
    pub batch_first: bool,
    /// Indexed `layer * D + direction`.
    pub weights: Vec<RnnWeights>,
}

/// What [`Rnn::forward`] returns, PyTorch's `(output, h_n)` / `(output, (h_n, c_n))`.
#[derive(Debug, Clone)]
pub struct RnnOutput {
    /// `[T, B, D*H]` (`[B, T, D*H]` with batch_first).
    pub output: Tensor,
    /// `[num_layers * D, B, H]`.
    pub h_n: Tensor,
    /// LSTM only.
    pub c_n: Option<Tensor>,
}

/// What [`Rnn::forward_train`] keeps for [`Rnn::backward`].
#[derive(Debug, Clone)]
pub struct RnnSaved {
    t: usize,
    b: usize,
    layers: Vec<SavedLayer>,
}

#[derive(Debug, Clone)]
struct SavedLayer {
    /// The layer input `[T, B, I_l]` (a view: layer 0's x, or the previous layer's states).
    input: Tensor,
    /// `[T + 2, B, D*H]` state sequences (see shaders/lib/rnn_common.wgsl).
    hseq: Tensor,
    cseq: Option<Tensor>,
    /// Per direction: `[T, B, 4H]` gate activations (LSTM i, f, g, o; GRU r, z, n, W_hn h + b_hn).
    gates: Vec<Tensor>,
}

impl Rnn {
    /// Builds from per-(layer, direction) weights, checking that sizes chain.
    ///
    /// `weights` holds `num_layers * D` sets indexed `layer * D + direction`; the input and
    /// hidden sizes are read from them. Errors: [`Error::InvalidArgument`] for a wrong number of
    /// sets, [`Error::Shape`] when a layer's sizes do not follow from the one below,
    /// [`Error::DType`] / [`Error::DeviceMismatch`] for a mix of dtypes or devices.
    ///
    /// ```no_run,ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::ops::{Rnn, RnnKind, RnnWeights, RnnOptions};
    /// use wgtensor::{DType, Device, Tensor};
    /// let dev = Device::new()?;
    /// let (input, hidden) = (32, 64);
    /// // A 2-layer LSTM (nn.LSTM(32, 64, num_layers=2)); biases default to zeros.
    /// let mut weights = Vec::new();
    /// for in_size in [input, hidden] {
    ///     let w_ih = Tensor::full(&dev, &[4 * hidden, in_size], 0.05, DType::F32)?;
    ///     let w_hh = Tensor::full(&dev, &[4 * hidden, hidden], 0.05, DType::F32)?;
    ///     weights.push(RnnWeights::new(RnnKind::Lstm, &w_ih, &w_hh, None, None)?);
    /// }
    /// let opts = RnnOptions { num_layers: 2, ..Default::default() };
    /// let lstm = Rnn::new(RnnKind::Lstm, opts, weights)?;
    /// assert_eq!((lstm.input_size, lstm.hidden_size), (32, 64));
    /// # Ok(()) }
    /// ```
    pub fn new(kind: RnnKind, options: RnnOptions, weights: Vec<RnnWeights>) -> Result<Rnn> {
        let RnnOptions {
            num_layers,
            bidirectional,
            batch_first,
        } = options;
        let op = kind.name();
        let d = if bidirectional { 2 } else { 1 };
        // Weight sets may have been built by struct literal: check each as RnnWeights::new
        // does (and pack strided w_hh / b_hh, which the step kernels read row-major).
        let weights = weights
            .iter()
            .map(|w| RnnWeights::new(kind, &w.w_ih, &w.w_hh, Some(&w.b_ih), Some(&w.b_hh)))
            .collect::<Result<Vec<_>>>()?;
        if num_layers == 0 || num_layers.checked_mul(d) != Some(weights.len()) {
            return Err(Error::arg(
                op,
                format!(
                    "{} weight sets for {num_layers} layers x {d} directions",
                    weights.len()
                ),
            ));
        }
        let hidden = weights[0].hidden(kind);
        let input = weights[0].input();
        for (i, w) in weights.iter().enumerate() {
            // One dtype and device for the whole stack, so a mix fails here, naming the layer.
            weights[0].w_ih.same_dtype(op, &w.w_ih)?;
            weights[0].w_ih.same_device(op, &w.w_ih)?;
            let want_in = if i < d { input } else { d * hidden };
            if w.hidden(kind) != hidden || w.input() != want_in {
                return Err(Error::shape(
                    op,
                    format!(
                        "layer {} direction {}: weight_ih {:?} / weight_hh {:?} do not match input {want_in}, hidden {hidden}",
                        i / d,
                        i % d,
                        w.w_ih.shape(),
                        w.w_hh.shape()
                    ),
                ));
            }
        }
        Ok(Rnn {
            kind,
            input_size: input,
            hidden_size: hidden,
            num_layers,
            bidirectional,
            batch_first,
            weights,
        })
    }

    /// Builds from PyTorch state-dict names: `weight_ih_l{k}`, `weight_hh_l{k}`, `bias_ih_l{k}`,
    /// `bias_hh_l{k}`, with `_reverse` for the second direction. Names may carry a module
    /// prefix, as a whole model's state dict has them (`lstm.weight_ih_l0`,
    /// `encoder.rnn.weight_hh_l1_reverse`); one prefix must serve every name.
    pub fn from_pytorch(
        kind: RnnKind,
        tensors: &HashMap<String, Tensor>,
        num_layers: usize,
        bidirectional: bool,
        batch_first: bool,
    ) -> Result<Rnn> {
        let op = kind.name();
        // The module prefix: what precedes "weight_ih_l0" in the (one) key that ends with it.
        let prefixes: Vec<&str> = tensors
            .keys()
            .filter_map(|k| k.strip_suffix("weight_ih_l0"))
            .filter(|p| p.is_empty() || p.ends_with('.'))
            .collect();
        let prefix = match prefixes.as_slice() {
            [p] => p.to_string(),
            [] => String::new(),
            many => {
                return Err(Error::arg(
                    op,
                    format!(
                    "several RNN modules in the state dict ({many:?}): pass one module's tensors"
                ),
                ))
            }
        };
        let mut weights = Vec::new();
        for l in 0..num_layers {
            for suffix in if bidirectional {
                &["", "_reverse"][..]
            } else {
                &[""][..]
            } {
                let get = |n: &str| tensors.get(&format!("{prefix}{n}_l{l}{suffix}"));
                let need = |n: &str| {
                    get(n).ok_or_else(|| {
                        Error::arg(op, format!("missing tensor {prefix}{n}_l{l}{suffix}"))
                    })
                };
                weights.push(RnnWeights::new(
                    kind,
                    need("weight_ih")?,
                    need("weight_hh")?,
                    get("bias_ih"),
                    get("bias_hh"),
                )?);
            }
        }
        Rnn::new(
            kind,
            RnnOptions {
                num_layers,
                bidirectional,
                batch_first,
            },
            weights,
        )
    }

    /// Checks the public fields at use: they may have been changed (or the whole struct built
    /// by literal) since [`Rnn::new`] validated them.
    pub(crate) fn check_weights(&self) -> Result<()> {
        let op = self.kind.name();
        let (d, h, g) = (self.dirs(), self.hidden_size, self.kind.gates());
        if self.num_layers == 0 || self.num_layers.checked_mul(d) != Some(self.weights.len()) {
            return Err(Error::arg(
                op,
                format!(
                    "{} weight sets for {} layers x {d} directions",
                    self.weights.len(),
                    self.num_layers
                ),
            ));
        }
        // hidden_size is public too: the products below must not overflow.
        if g.checked_mul(h).and_then(|gh| gh.checked_mul(d)).is_none() {
            return Err(Error::size(
                op,
                format!("hidden_size {h} overflows the gate count"),
            ));
        }
        for (i, w) in self.weights.iter().enumerate() {
            let want_in = if i < d { self.input_size } else { d * h };
            let shapes_ok = w.w_ih.shape() == [g * h, want_in]
                && w.w_hh.shape() == [g * h, h]
                && w.b_ih.shape() == [g * h]
                && w.b_hh.shape() == [g * h];
            if !shapes_ok {
                return Err(Error::shape(
                    op,
                    format!(
                        "layer {} direction {}: weight_ih {:?}, weight_hh {:?}, bias_ih {:?}, \
                         bias_hh {:?} do not match input {want_in}, hidden {h} ({g} gates)",
                        i / d,
                        i % d,
                        w.w_ih.shape(),
                        w.w_hh.shape(),
                        w.b_ih.shape(),
                        w.b_hh.shape()
                    ),
                ));
            }
            // The step kernels read w_hh and b_hh as packed rows from element 0.
            for (what, t) in [("weight_hh", &w.w_hh), ("bias_hh", &w.b_hh)] {
                if !t.is_contiguous() || t.layout.offset() != 0 {
                    return Err(Error::arg(
                        op,
                        format!(
                            "layer {} direction {}: {what} must be contiguous from offset 0 \
                             (strides {:?}, offset {}); build weights with RnnWeights::new",
                            i / d,
                            i % d,
                            t.strides(),
                            t.layout.offset()
                        ),
                    ));
                }
            }
            let w0 = &self.weights[0].w_ih;
            for t in [&w.w_ih, &w.w_hh, &w.b_ih, &w.b_hh] {
                w0.same_device(op, t)?;
                w0.same_dtype(op, t)?;
            }
        }
        Ok(())
    }

    fn dirs(&self) -> usize {
        if self.bidirectional {
            2
        } else {
            1
        }
    }

    /// PyTorch's input checks, in its order and words: a 2-D (unbatched) or 3-D input, states
    /// of the matching rank, the input's dtype against the weights', then its last size
    /// `input_size` (`check_input`). Runs
    /// before the states' sizes and the sequence length are checked, as there.
    pub(crate) fn check_input(
        &self,
        op: &'static str,
        x: &Tensor,
        h0: Option<&Tensor>,
        c0: Option<&Tensor>,
    ) -> Result<()> {
        let class = self.kind.classes().0;
        let (rank, i) = (x.rank(), x.shape().last().copied().unwrap_or(0));
        if !matches!(rank, 2 | 3) {
            return Err(Error::shape(
                op,
                format!("{class}: Expected input to be 2D or 3D, got {rank}D instead"),
            ));
        }
        self.check_state_ranks(op, x, h0, c0)?;
        // RNNBase.check_input: the weights' dtype is the expected one, in its words.
        if let Some(w) = self.weights.first().map(|s| s.w_ih.dtype()) {
            if x.dtype() != w {
                let (w, x) = (w.torch_name(), x.dtype().torch_name());
                return Err(Error::arg(
                    op,
                    format!(
                        "RNN input dtype ({x}) does not match weight dtype ({w}). Convert \
                         input: input.to({w}), or convert model: model.to({x})"
                    ),
                ));
            }
        }
        if i != self.input_size {
            return Err(Error::shape(
                op,
                format!(
                    "input.size(-1) must be equal to input_size. Expected {}, got {i}",
                    self.input_size
                ),
            ));
        }
        Ok(())
    }

    /// The states' ranks against the input's (PyTorch's `For batched 3-D input, hx should
    /// also be 3-D ...`), checked after the input's rank and before its feature size.
    fn check_state_ranks(
        &self,
        op: &'static str,
        x: &Tensor,
        h0: Option<&Tensor>,
        c0: Option<&Tensor>,
    ) -> Result<()> {
        let lstm = matches!(self.kind, RnnKind::Lstm);
        let (form, dims) = if x.rank() == 3 {
            ("batched 3-D", 3)
        } else {
            ("unbatched 2-D", 2)
        };
        let wrong = |s: Option<&Tensor>| s.is_some_and(|s| s.rank() != dims);
        if wrong(h0) || wrong(c0) {
            let got = match (h0, c0) {
                (Some(h), Some(c)) if lstm => format!(
                    "hx and cx should also be {dims}-D but got ({}-D, {}-D) tensors",
                    h.rank(),
                    c.rank()
                ),
                (Some(h), _) if wrong(h0) => {
                    format!("hx should also be {dims}-D but got {}-D tensor", h.rank())
                }
                (_, c) => format!(
                    "cx should also be {dims}-D but got {}-D tensor",
                    c.map_or(0, Tensor::rank)
                ),
            };
            return Err(Error::shape(op, format!("For {form} input, {got}")));
        }
        Ok(())
    }

    /// Checks `h0` / `c0` against input `x`: `[num_layers * D, B, H]` for a batched `x`
    /// (`B` from `batch_first`), `[num_layers * D, H]` for an unbatched one; the same device
    /// and dtype as `x`; a wrong size gets PyTorch's `Expected hidden[0] size (...)`. Callers
    /// run [`Rnn::check_input`] first, which checks the states' ranks.
    pub(crate) fn check_states(
        &self,
        op: &'static str,
        x: &Tensor,
        h0: Option<&Tensor>,
        c0: Option<&Tensor>,
    ) -> Result<()> {
        let lstm = matches!(self.kind, RnnKind::Lstm);
        let rows = self.num_layers * self.dirs();
        let want = match x.shape() {
            &[a, b, _] => vec![rows, if self.batch_first { a } else { b }, self.hidden_size],
            _ => vec![rows, self.hidden_size],
        };
        // PyTorch's words first: LSTM's states are its hidden[0] and hidden[1]. It compares an
        // unbatched input's states after giving them a batch dim of 1 (`hx.unsqueeze(1)`), so
        // its part shows that dim; ours shows the shapes as given.
        let lifted = |sh: &[usize]| {
            let mut v = sh.to_vec();
            if x.rank() == 2 {
                v.insert(1.min(v.len()), 1);
            }
            v
        };
        let tuple = lifted(&want)
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        for (name, which, s) in [("h0", "[0]", h0), ("c0", "[1]", c0)] {
            if let Some(s) = s {
                if s.shape() != want.as_slice() {
                    let which = if lstm { which } else { "" };
                    return Err(Error::shape(
                        op,
                        format!(
                            "Expected hidden{which} size ({tuple}), got {:?}: {name} must be \
                             {want:?}, got {:?}",
                            lifted(s.shape()),
                            s.shape()
                        ),
                    ));
                }
                x.same_device(op, s)?;
                x.same_dtype(op, s)?;
            }
        }
        Ok(())
    }

    /// Runs the whole sequence. `h0`/`c0`: `[num_layers * D, B, H]`, zeros when absent.
    ///
    /// PyTorch's `module(x, h0)` / `module(x, (h0, c0))` for x `[T, B, I]` (`[B, T, I]` with
    /// `batch_first`); see [`RnnOutput`] for the shapes returned. An unbatched `[T, I]` input
    /// takes `[num_layers * D, H]` states and gives `[T, D*H]` and `[num_layers * D, H]`, as
    /// PyTorch's. Keeps nothing for a backward pass (use [`Rnn::forward_train`] for that).
    /// Errors: [`Error::Shape`] for an input that is not rank 2 or 3 or whose feature size is
    /// not `input_size`, or states of the wrong shape;
    /// [`Error::Size`] for an empty sequence; [`Error::InvalidArgument`] for an x of another
    /// dtype than the weights (RNNBase's "RNN input dtype ... does not match weight dtype
    /// ..."); [`Error::DType`] /
    /// [`Error::DeviceMismatch`] for states of another dtype than x, or an x on another
    /// device.
    ///
    /// ```no_run,ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::ops::{Rnn, RnnKind, RnnWeights, RnnOptions};
    /// use wgtensor::{DType, Device, Tensor};
    /// let dev = Device::new()?;
    /// let w_ih = Tensor::full(&dev, &[3 * 16, 8], 0.1, DType::F32)?;
    /// let w_hh = Tensor::full(&dev, &[3 * 16, 16], 0.1, DType::F32)?;
    /// let w = RnnWeights::new(RnnKind::Gru, &w_ih, &w_hh, None, None)?;
    /// let opts = RnnOptions { batch_first: true, ..Default::default() };
    /// let gru = Rnn::new(RnnKind::Gru, opts, vec![w])?;
    /// let x = Tensor::full(&dev, &[4, 50, 8], 0.5, DType::F32)?; // [B, T, I]
    /// let out = gru.forward(&x, None, None)?;
    /// assert_eq!(out.output.shape(), &[4, 50, 16]);
    /// assert_eq!(out.h_n.shape(), &[1, 4, 16]);
    /// assert!(out.c_n.is_none()); // GRU: no cell state
    /// # Ok(()) }
    /// ```
    pub fn forward(
        &self,
        x: &Tensor,
        h0: Option<&Tensor>,
        c0: Option<&Tensor>,
    ) -> Result<RnnOutput> {
        if x.rank() != 2 {
            return grad::forward(self, x, h0, c0);
        }
        // Unbatched: a batch of one where PyTorch puts it, states without their batch dim.
        let op = self.kind.name();
        // The caller's shapes in any error, before the states gain a batch dim of 1 (the
        // weights first: they bound num_layers, which the state check multiplies).
        self.check_weights()?;
        self.check_input(op, x, h0, c0)?;
        self.check_states(op, x, h0, c0)?;
        let bd = if self.batch_first { 0 } else { 1 };
        let lift = |s: Option<&Tensor>| s.map(|t| t.unsqueeze(1)).transpose();
        let (h0, c0) = (lift(h0)?, lift(c0)?);
        let out = grad::forward(self, &x.unsqueeze(bd)?, h0.as_ref(), c0.as_ref())?;
        Ok(RnnOutput {
            output: out.output.squeeze(bd)?,
            h_n: out.h_n.squeeze(1)?,
            c_n: out.c_n.map(|c| c.squeeze(1)).transpose()?,
        })
    }

    /// [`Rnn::forward`] that also keeps what [`Rnn::backward`] needs: every step's gate
    /// activations (`[T, B, 4H]` per layer and direction), the state sequences and the inputs.
    pub fn forward_train(
        &self,
        x: &Tensor,
        h0: Option<&Tensor>,
        c0: Option<&Tensor>,
    ) -> Result<(RnnOutput, RnnSaved)> {
        let (out, saved) = self.forward_impl(x, h0, c0, true)?;
        let saved = saved.ok_or_else(|| {
            Error::arg(self.kind.name(), "internal: training forward saved nothing")
        })?;
        Ok((out, saved))
    }
}

/// One LSTM step: `(h', c')` from `x [B, I]`, `h [B, H]`, `c [B, H]` (or unbatched `x [I]`,
/// `h [H]`, `c [H]`, as PyTorch's cells take).
///
/// PyTorch's `nn.LSTMCell` forward, for loops that feed each step's output back in (decoders,
/// sampling); [`Rnn::forward`] runs a known sequence faster. Errors as [`Rnn::forward`] for
/// a one-step sequence.
///
/// ```no_run,ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::ops::{lstm_cell, RnnKind, RnnWeights};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let w_ih = Tensor::full(&dev, &[4 * 32, 10], 0.1, DType::F32)?;
/// let w_hh = Tensor::full(&dev, &[4 * 32, 32], 0.1, DType::F32)?;
/// let w = RnnWeights::new(RnnKind::Lstm, &w_ih, &w_hh, None, None)?;
/// let mut h = Tensor::zeros(&dev, &[2, 32], DType::F32)?; // [B, H]
/// let mut c = Tensor::zeros(&dev, &[2, 32], DType::F32)?;
/// let x = Tensor::full(&dev, &[2, 10], 1.0, DType::F32)?; // [B, I]
/// for _ in 0..5 {
///     (h, c) = lstm_cell(&x, &h, &c, &w)?;
/// }
/// assert_eq!(h.shape(), &[2, 32]);
/// # Ok(()) }
/// ```
pub fn lstm_cell(x: &Tensor, h: &Tensor, c: &Tensor, w: &RnnWeights) -> Result<(Tensor, Tensor)> {
    let out = cell(RnnKind::Lstm, x, h, Some(c), w)?;
    let c_n = out
        .c_n
        .ok_or_else(|| Error::arg("lstm", "internal: an LSTM forward returned no cell state"))?;
    Ok((out.h_n.reshape(h.shape())?, c_n.reshape(c.shape())?))
}

/// One GRU step: `h'` from `x [B, I]`, `h [B, H]` (or unbatched `x [I]`, `h [H]`).
pub fn gru_cell(x: &Tensor, h: &Tensor, w: &RnnWeights) -> Result<Tensor> {
    let out = cell(RnnKind::Gru, x, h, None, w)?;
    out.h_n.reshape(h.shape())
}

fn cell(
    kind: RnnKind,
    x: &Tensor,
    h: &Tensor,
    c: Option<&Tensor>,
    w: &RnnWeights,
) -> Result<RnnOutput> {
    let op = kind.name();
    // PyTorch's RNNCell checks (nn/modules/rnn.py, then ATen's check_rnn_cell_forward_input
    // and _hidden) in its order and words: ranks, the input size, then each state's batch
    // and hidden size (LSTM's h as hidden0, c as hidden1).
    let class = kind.classes().1;
    let one_or_two = |t: &Tensor| matches!(t.rank(), 1 | 2);
    if !one_or_two(x) {
        return Err(Error::shape(
            op,
            format!(
                "{class}: Expected input to be 1D or 2D, got {}D instead",
                x.rank()
            ),
        ));
    }
    for (k, s) in [Some(h), c].into_iter().flatten().enumerate() {
        if !one_or_two(s) {
            let what = match kind {
                RnnKind::Lstm => format!("hx[{k}]"),
                RnnKind::Gru => "hidden".to_string(),
            };
            return Err(Error::shape(
                op,
                format!(
                    "{class}: Expected {what} to be 1D or 2D, got {}D instead",
                    s.rank()
                ),
            ));
        }
    }
    // The input alone decides (RNNCellBase.forward): an unbatched x [I] lifts every state to a
    // batch of one, a batched one takes them as given, and ATen's size checks below name a
    // state that does not fit. The callers reshape the states back to h's shape.
    let lifted;
    let (x, h, c) = if x.rank() == 1 {
        lifted = (
            x.unsqueeze(0)?,
            h.unsqueeze(0)?,
            c.map(|c| c.unsqueeze(0)).transpose()?,
        );
        (&lifted.0, &lifted.1, lifted.2.as_ref())
    } else {
        (x, h, c)
    };
    let rnn = Rnn::new(
        kind,
        RnnOptions {
            num_layers: 1,
            bidirectional: false,
            batch_first: false,
        },
        vec![w.clone()],
    )?;
    let (b, hs) = (x.shape()[0], rnn.hidden_size);
    if x.shape()[1] != rnn.input_size {
        return Err(Error::shape(
            op,
            format!(
                "input has inconsistent input_size: got {} expected {}",
                x.shape()[1],
                rnn.input_size
            ),
        ));
    }
    for (label, t) in [Some(h), c].into_iter().flatten().enumerate() {
        // Each state is 2-D once lifted (ATen's check_rnn_cell_forward_hidden): a [H, 1]
        // state beside an unbatched input lifts to 3-D and is refused, not reshaped.
        let msg = match *t.shape() {
            [tb, _] if tb != b => {
                format!("Input batch size {b} doesn't match hidden{label} batch size {tb}")
            }
            [_, th] if th != hs => {
                format!("hidden{label} has inconsistent hidden_size: got {th}, expected {hs}")
            }
            [_, _] => continue,
            _ => format!(
                "Expected 2D hidden{label} (batch x hidden_size), but got {}D tensor",
                t.rank()
            ),
        };
        return Err(Error::shape(op, msg));
    }
    // Then the cell's GEMMs compare dtypes (the weights' expected), after ATen's size checks.
    w.w_ih.same_dtype(op, x)?;
    let h3 = h.reshape(&[1, b, hs])?;
    let c3 = c.map(|c| c.reshape(&[1, b, hs])).transpose()?;
    rnn.forward(&x.reshape(&[1, b, x.shape()[1]])?, Some(&h3), c3.as_ref())
}

/// The rnn family's entry in the kernel-family registry (`ops::families()`).
pub(crate) const FAMILY: crate::runtime::pipeline::Family = crate::runtime::pipeline::Family {
    name: "rnn",
    shaders: &[
        "rnn.wgsl",
        "rnn_sg8.wgsl",
        "rnn_backward.wgsl",
        "rnn_backward_sg8.wgsl",
        "rnn_wg.wgsl",
        "rnn_ks.wgsl",
        "rnn_seq.wgsl",
        "rnn_backward_wg.wgsl",
        "rnn_backward_seq.wgsl",
    ],
    params: || vec![step::params_layout(), backward_kernels::params_layout()],
    variants: rnn_variants,
};

/// Every (kernel, dtypes, override constants) combination of this family's kernels, for
/// tests/shaders.rs to translate and validate each.
#[doc(hidden)]
pub fn rnn_variants() -> Vec<ShaderVariant> {
    let mut v = Vec::new();
    for dt in [DType::F32, DType::F16] {
        for k in [&LSTM_STEP, &GRU_STEP, &LOAD_STATE] {
            v.push(ShaderVariant::new(k, &[dt], &[("WG", WG as f64)]));
        }
        for k in [&LSTM_STEP_SG8, &GRU_STEP_SG8] {
            for sgs in [1.0, 2.0, 4.0] {
                v.push(ShaderVariant::new(k, &[dt], &[("SGS", sgs)]));
            }
        }
        for k in [&LSTM_STEP_WG, &GRU_STEP_WG] {
            v.push(ShaderVariant::new(k, &[dt], &[("TM", STEP_TM as f64)]));
        }
        for k in [&LSTM_STEP_KS, &GRU_STEP_KS] {
            v.push(ShaderVariant::new(k, &[dt], &[]));
        }
        // One unit per lane (`seq_shape`: H <= 64, `UPI` at its default).
        for k in [&LSTM_SEQ, &GRU_SEQ] {
            for rp in SEQ_ROW_CHOICES {
                v.push(ShaderVariant::new(k, &[dt], &[("RP", rp as f64)]));
            }
        }
    }
    v.extend(backward_kernels::backward_variants());
    v
}
