//! `nn.LSTMCell` and `nn.GRUCell`: one step of the fused recurrent kernels
//! ([`lstm_cell`](crate::ops::lstm_cell), [`gru_cell`](crate::ops::gru_cell)) with PyTorch's
//! parameter names (`weight_ih`, `weight_hh`, `bias_ih`, `bias_hh`) and initialization (every
//! weight and bias `U(-1/sqrt(H), 1/sqrt(H))`), for loops that feed each step's output back in
//! (decoders, sampling).

use super::{Forward, Module, Visitor, VisitorMut};
use crate::ops::{gru_cell, lstm_cell, uniform, RnnKind, RnnWeights};
use crate::{DType, Device, Error, Result, Tensor};

/// The weights of one cell and its parameters by PyTorch's names (the weights share their
/// storage, so an optimizer's or a state dict's writes reach the step).
#[derive(Debug, Clone)]
struct CellParams {
    kind: RnnKind,
    weights: RnnWeights,
    params: Vec<(String, Tensor)>,
    hidden_size: usize,
}

impl CellParams {
    fn new(
        dev: &Device,
        kind: RnnKind,
        input_size: usize,
        hidden_size: usize,
        bias: bool,
    ) -> Result<CellParams> {
        let layer = cell_name(kind);
        let g = kind.gates().checked_mul(hidden_size).ok_or_else(|| {
            Error::size(
                layer,
                format!("hidden_size {hidden_size} overflows the gate count"),
            )
        })?;
        // PyTorch's RNNCellBase takes a hidden size of 0 (its bound is then 0; the
        // parameters are empty and the cell's output is [B, 0]).
        let k = match hidden_size {
            0 => 0.0,
            h => 1.0 / (h as f64).sqrt(),
        };
        // Tracked parameters, as every layer's.
        let t = |shape: &[usize]| uniform(dev, shape, -k, k, DType::F32)?.requires_grad();
        let (w_ih, w_hh) = (t(&[g, input_size])?, t(&[g, hidden_size])?);
        let mut params = vec![
            ("weight_ih".to_string(), w_ih.clone()),
            ("weight_hh".to_string(), w_hh.clone()),
        ];
        let biases = if bias {
            let (b_ih, b_hh) = (t(&[g])?, t(&[g])?);
            params.push(("bias_ih".to_string(), b_ih.clone()));
            params.push(("bias_hh".to_string(), b_hh.clone()));
            Some((b_ih, b_hh))
        } else {
            None
        };
        let weights = RnnWeights::new(
            kind,
            &w_ih,
            &w_hh,
            biases.as_ref().map(|b| &b.0),
            biases.as_ref().map(|b| &b.1),
        )?;
        Ok(CellParams {
            kind,
            weights,
            params,
            hidden_size,
        })
    }

    /// Zeros in place of an absent state: `[B, H]` for an input `[B, I]`, `[H]` for an
    /// unbatched `[I]` (PyTorch's `hx=None`); other ranks are the step's to refuse.
    fn zeros_for(&self, x: &Tensor) -> Result<Tensor> {
        let shape = match x.shape() {
            &[b, _] => vec![b, self.hidden_size],
            _ => vec![self.hidden_size],
        };
        Tensor::zeros(x.device(), &shape, x.dtype())
    }
}

fn cell_name(kind: RnnKind) -> &'static str {
    kind.classes().1
}

/// PyTorch's `nn.LSTMCell(input_size, hidden_size, bias)`: `(h', c')` from `x [B, I]` and the
/// state `(h [B, H], c [B, H])` (or unbatched `[I]` and `[H]`), zeros when absent.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{LstmCell, Module};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let cell = LstmCell::new(&dev, 10, 20, true)?;
/// let names: Vec<String> = cell.state_dict().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]);
/// let x = Tensor::zeros(&dev, &[3, 10], DType::F32)?;
/// let (mut h, mut c) = cell.forward_cell(&x, None)?;
/// for _ in 0..4 {
///     (h, c) = cell.forward_cell(&x, Some((&h, &c)))?;
/// }
/// assert_eq!((h.shape(), c.shape()), (&[3, 20][..], &[3, 20][..]));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct LstmCell {
    cell: CellParams,
}

impl LstmCell {
    /// A new cell with PyTorch's initialization; `bias: false` leaves out `bias_ih` and
    /// `bias_hh`. A `hidden_size` of 0 gives empty parameters and `[B, 0]` states, as
    /// PyTorch's.
    pub fn new(
        dev: &Device,
        input_size: usize,
        hidden_size: usize,
        bias: bool,
    ) -> Result<LstmCell> {
        let cell = CellParams::new(dev, RnnKind::Lstm, input_size, hidden_size, bias)?;
        Ok(LstmCell { cell })
    }

    /// One step: PyTorch's `cell(x, (h, c))`, or `cell(x)` with `state` `None`.
    pub fn forward_cell(
        &self,
        x: &Tensor,
        state: Option<(&Tensor, &Tensor)>,
    ) -> Result<(Tensor, Tensor)> {
        match state {
            Some((h, c)) => lstm_cell(x, h, c, &self.cell.weights),
            None => {
                let z = self.cell.zeros_for(x)?;
                lstm_cell(x, &z, &z, &self.cell.weights)
            }
        }
    }
}

/// PyTorch's `nn.GRUCell(input_size, hidden_size, bias)`: `h'` from `x [B, I]` and the state
/// `h [B, H]` (or unbatched `[I]` and `[H]`), zeros when absent.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{Forward, GruCell};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let cell = GruCell::new(&dev, 10, 20, true)?;
/// let x = Tensor::zeros(&dev, &[10], DType::F32)?; // unbatched
/// let h = cell.forward(&x)?; // zero state
/// let h = cell.forward_cell(&x, Some(&h))?;
/// assert_eq!(h.shape(), &[20]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct GruCell {
    cell: CellParams,
}

impl GruCell {
    /// A new cell with PyTorch's initialization; `bias: false` leaves out `bias_ih` and
    /// `bias_hh`. A `hidden_size` of 0 gives empty parameters and `[B, 0]` states, as
    /// PyTorch's.
    pub fn new(dev: &Device, input_size: usize, hidden_size: usize, bias: bool) -> Result<GruCell> {
        let cell = CellParams::new(dev, RnnKind::Gru, input_size, hidden_size, bias)?;
        Ok(GruCell { cell })
    }

    /// One step: PyTorch's `cell(x, h)`, or `cell(x)` with `h` `None`.
    pub fn forward_cell(&self, x: &Tensor, h: Option<&Tensor>) -> Result<Tensor> {
        match h {
            Some(h) => gru_cell(x, h, &self.cell.weights),
            None => gru_cell(x, &self.cell.zeros_for(x)?, &self.cell.weights),
        }
    }
}

/// The step from a zero state (PyTorch's `cell(x)`).
impl Forward for GruCell {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_cell(x, None)
    }
}

macro_rules! cell_module {
    ($($name:ident),*) => {$(
        /// The parameters by PyTorch's names, no buffers, flags or children; errors name the
        /// layer as PyTorch's class (`LSTMCell`, `GRUCell`).
        impl Module for $name {
            fn visit(&self, v: &mut dyn Visitor) {
                for (name, t) in &self.cell.params {
                    v.parameter(name, t);
                }
            }
            fn visit_mut(&mut self, _: &mut dyn VisitorMut) {}
            fn layer_name(&self) -> &'static str {
                cell_name(self.cell.kind)
            }
        }
    )*};
}

cell_module!(LstmCell, GruCell);
