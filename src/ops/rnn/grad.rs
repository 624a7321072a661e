//! Backward of [`Rnn::forward`] (and so of `lstm_cell` / `gru_cell`, which run it on one
//! step): one recorded node for the whole stack whose backward is the fused BPTT of
//! [`Rnn::backward`], not a node per step. While tracking, the forward runs as
//! `forward_train` (keeping the gates and state sequences) on detached tensors, so the saved
//! state holds no graph.

use crate::autograd::{record_multi, records, BackwardOp, NoGradGuard};
use crate::{Error, Result, Tensor};

use super::{Rnn, RnnKind, RnnOutput, RnnSaved, RnnWeights};

struct RnnBackward {
    /// The model with detached weights.
    rnn: Rnn,
    saved: RnnSaved,
    out_shape: Vec<usize>,
    /// The caller's initial states (detached), kept for the version check: PyTorch's
    /// backends all save them (`linear_hh(hx)`, `forgetgate * cx`, cuDNN's `hx`, `cx`).
    h0: Option<Tensor>,
    c0: Option<Tensor>,
}

impl BackwardOp for RnnBackward {
    fn saved(&self) -> Vec<&Tensor> {
        // Layer 0's input is the caller's x (a view of its storage; the other layers' inputs
        // are this op's own state sequences): its version is checked like the weights'. So are
        // the state sequences the backward reads: the output is a view of the last layer's.
        self.rnn
            .weights
            .iter()
            .flat_map(|w| [&w.w_ih, &w.w_hh, &w.b_ih, &w.b_hh])
            .chain(self.saved.layers.first().map(|l| &l.input))
            .chain(self.h0.iter().chain(&self.c0))
            .chain(
                self.saved
                    .layers
                    .iter()
                    .flat_map(|l| std::iter::once(&l.hseq).chain(l.cseq.as_ref())),
            )
            .collect()
    }

    fn name(&self) -> &'static str {
        match self.rnn.kind {
            RnnKind::Lstm => "lstm",
            RnnKind::Gru => "gru",
        }
    }

    fn backward(&self, grads: &[Option<Tensor>], needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let get = |i: usize| grads.get(i).and_then(Option::as_ref);
        let dev = self.rnn.weights[0].w_ih.device();
        let dtype = self.rnn.weights[0].w_ih.dtype();
        // Only h_n or c_n may have received a gradient: the output's is then zero.
        let dy = match get(0) {
            Some(g) => g.clone(),
            None => Tensor::zeros(dev, &self.out_shape, dtype)?,
        };
        let g = self.rnn.backward(&self.saved, &dy, get(1), get(2))?;
        let mut out = Vec::with_capacity(needs.len());
        out.push(Some(g.dx));
        if self.h0.is_some() {
            out.push(Some(g.dh0));
        }
        if self.c0.is_some() {
            out.push(Some(g.dc0.ok_or_else(|| {
                Error::arg(self.name(), "backward returned no cell-state gradient")
            })?));
        }
        for w in g.weights {
            out.extend([Some(w.w_ih), Some(w.w_hh), Some(w.b_ih), Some(w.b_hh)]);
        }
        if out.len() != needs.len() {
            return Err(Error::arg(
                self.name(),
                format!("{} gradients for {} inputs", out.len(), needs.len()),
            ));
        }
        // Inputs that need no gradient get none (the fused backward computes them together).
        Ok(out
            .into_iter()
            .zip(needs)
            .map(|(g, &need)| g.filter(|_| need))
            .collect())
    }
}

/// [`Rnn::forward`], recorded when any input or weight is tracked.
pub(super) fn forward(
    rnn: &Rnn,
    x: &Tensor,
    h0: Option<&Tensor>,
    c0: Option<&Tensor>,
) -> Result<RnnOutput> {
    let weights = rnn
        .weights
        .iter()
        .flat_map(|w| [&w.w_ih, &w.w_hh, &w.b_ih, &w.b_hh]);
    if !records([Some(x), h0, c0].into_iter().flatten().chain(weights)) {
        return rnn.forward_impl(x, h0, c0, false).map(|(out, _)| out);
    }
    let mut inputs = vec![x];
    inputs.extend(h0);
    inputs.extend(c0);
    for w in &rnn.weights {
        inputs.extend([&w.w_ih, &w.w_hh, &w.b_ih, &w.b_hh]);
    }
    let detached = Rnn {
        weights: rnn
            .weights
            .iter()
            .map(|w| RnnWeights {
                w_ih: w.w_ih.detach(),
                w_hh: w.w_hh.detach(),
                b_ih: w.b_ih.detach(),
                b_hh: w.b_hh.detach(),
            })
            .collect(),
        ..rnn.clone()
    };
    let (out, saved) = {
        let _guard = NoGradGuard::new();
        detached.forward_train(
            &x.detach(),
            h0.map(Tensor::detach).as_ref(),
            c0.map(Tensor::detach).as_ref(),
        )?
    };
    let lstm = out.c_n.is_some();
    let mut outs = vec![out.output, out.h_n];
    outs.extend(out.c_n);
    let mut outs = record_multi(outs, &inputs, |o| {
        Box::new(RnnBackward {
            rnn: detached,
            saved,
            out_shape: o[0].shape().to_vec(),
            h0: h0.map(Tensor::detach),
            c0: c0.map(Tensor::detach),
        })
    })
    .into_iter();
    let missing = || Error::arg("rnn", "internal: recording lost an output");
    let output = outs.next().ok_or_else(missing)?;
    let h_n = outs.next().ok_or_else(missing)?;
    let c_n = if lstm {
        Some(outs.next().ok_or_else(missing)?)
    } else {
        None
    };
    Ok(RnnOutput { output, h_n, c_n })
}
