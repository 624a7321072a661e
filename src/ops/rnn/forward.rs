//! The LSTM/GRU forward's recording: per layer and direction the input-projection GEMM, then
//! the step kernels (ops/rnn/step.rs) or, on GPUs with H <= 64, the sequence kernel.

use super::*;

impl Rnn {
    pub(super) fn forward_impl(
        &self,
        x: &Tensor,
        h0: Option<&Tensor>,
        c0: Option<&Tensor>,
        train: bool,
    ) -> Result<(RnnOutput, Option<RnnSaved>)> {
        let op = self.kind.name();
        self.check_weights()?;
        let w0 = &self.weights[0].w_ih;
        x.same_device(op, w0)?;
        // PyTorch's order: the input's rank, its states' ranks, its dtype and size, the
        // states, then (in ATen) the sequence length.
        self.check_input(op, x, h0, c0)?;
        if x.rank() != 3 {
            return Err(Error::shape(
                op,
                format!(
                    "input must be [T, B, I] (or [B, T, I] with batch_first), got {:?}",
                    x.shape()
                ),
            ));
        }
        self.check_states(op, x, h0, c0)?;
        let xs = if self.batch_first {
            x.transpose(0, 1)?
        } else {
            x.clone()
        };
        let (t, b) = (xs.shape()[0], xs.shape()[1]);
        if t == 0 {
            return Err(Error::size(
                op,
                format!(
                    "Expected sequence length to be larger than 0 in RNN, got input {:?}",
                    x.shape()
                ),
            ));
        }
        let (d, h, l) = (self.dirs(), self.hidden_size, self.num_layers);
        if c0.is_some() && self.kind == RnnKind::Gru {
            return Err(Error::arg(op, "a GRU has no cell state c0"));
        }
        let dev = x.device();
        let mut input = xs;
        let mut finals_h = Vec::new();
        let mut finals_c = Vec::new();
        let mut saved = Vec::new();
        for layer in 0..l {
            let hseq = Tensor::zeros(dev, &[t + 2, b, d * h], x.dtype())?;
            let cseq = match self.kind {
                RnnKind::Lstm => Some(Tensor::zeros(dev, &[t + 2, b, d * h], x.dtype())?),
                RnnKind::Gru => None,
            };
            let mut gates = Vec::new();
            for dir in 0..d {
                let w = &self.weights[layer * d + dir];
                let idx = layer * d + dir;
                // The initial state of the forward direction sits in slot 0, reverse in T + 1.
                let slot = if dir == 0 { 0 } else { t + 1 };
                if let Some(s) = h0 {
                    copy_state(dev, &s.narrow(0, idx, 1)?, &hseq, slot, dir, h)?;
                }
                if let (Some(s), Some(cs)) = (c0, &cseq) {
                    copy_state(dev, &s.narrow(0, idx, 1)?, cs, slot, dir, h)?;
                }
                let g = if train {
                    Some(Tensor::empty(dev, op, &[t, b, 4 * h], x.dtype())?)
                } else {
                    None
                };
                self.run_direction(&input, w, &hseq, cseq.as_ref(), g.as_ref(), dir)?;
                gates.extend(g);
                let last = if dir == 0 { t } else { 1 };
                finals_h.push(hseq.narrow(0, last, 1)?.narrow(2, dir * h, h)?);
                if let Some(cs) = &cseq {
                    finals_c.push(cs.narrow(0, last, 1)?.narrow(2, dir * h, h)?);
                }
            }
            let next = hseq.narrow(0, 1, t)?;
            if train {
                saved.push(SavedLayer {
                    input,
                    hseq,
                    cseq,
                    gates,
                });
            }
            input = next;
        }
        let output = if self.batch_first {
            input.transpose(0, 1)?
        } else {
            input
        };
        let h_n = final_states(dev, &finals_h, b, h)?;
        let c_n = if finals_c.is_empty() {
            None
        } else {
            Some(final_states(dev, &finals_c, b, h)?)
        };
        let saved = train.then(|| RnnSaved {
            t,
            b,
            layers: saved,
        });
        Ok((RnnOutput { output, h_n, c_n }, saved))
    }

    /// One direction of one layer: the input-projection GEMM, then one fused dispatch per step
    /// (on GPUs with H <= 64, one for every [`SEQ_CHUNK`] steps: shaders/rnn_seq.wgsl).
    fn run_direction(
        &self,
        input: &Tensor,
        w: &RnnWeights,
        hseq: &Tensor,
        cseq: Option<&Tensor>,
        train_gates: Option<&Tensor>,
        dir: usize,
    ) -> Result<()> {
        let op = self.kind.name();
        let dev = input.device();
        let (t, b) = (input.shape()[0], input.shape()[1]);
        let (h, g, d) = (self.hidden_size, self.kind.gates(), self.dirs());
        if b == 0 || h == 0 {
            // Empty states: no step has anything to compute (T empty launches would cost T
            // host round trips for an empty result).
            return Ok(());
        }
        // xp [T, B, G*H] = input W_ih^T + b_ih, one GEMM for every step.
        let xp = gemm(
            input,
            &w.w_ih.transpose(0, 1)?,
            &GemmOptions {
                bias: Some(Bias::PerColumn(&w.b_ih)),
                ..Default::default()
            },
        )?;
        let scratch;
        let gates = match train_gates {
            Some(g) => g,
            None => {
                scratch = Tensor::empty(dev, op, &[b, 4 * h], input.dtype())?;
                &scratch
            }
        };
        let slot_elems = b * d * h;
        // Step 0's slots and slices: forward from slot 0 and xp[0], reverse from slot T + 1
        // and xp[T - 1].
        let (t0, prev0, next0) = if dir == 0 {
            (0, 0, 1)
        } else {
            (t - 1, t + 1, t)
        };
        let g_step = if train_gates.is_some() { b * 4 * h } else { 0 };
        let params_at = |step: usize| {
            let back = |base: usize, per: usize| {
                if dir == 0 {
                    base + step * per
                } else {
                    base - step * per
                }
            };
            RnnParams {
                batch: b as u32,
                hidden: h as u32,
                seq_rs: (d * h) as u32,
                prev_off: (back(prev0, 1) * slot_elems + dir * h) as u32,
                next_off: (back(next0, 1) * slot_elems + dir * h) as u32,
                x_off: (back(t0, 1) * b * g * h) as u32,
                x_rs: (g * h) as u32,
                g_off: (back(t0, 1) * g_step) as u32,
                reverse: dir as u32,
                g_step: g_step as u32,
                ..Default::default()
            }
        };
        let mut bufs = vec![w.w_hh.buffer(), w.b_hh.buffer(), xp.buffer(), hseq.buffer()];
        if let Some(c) = cseq {
            bufs.push(c.buffer());
        }
        bufs.push(gates.buffer());
        // Two steps or more: the sequence kernel, if it takes the shape (a single step would
        // pay W_hh's transposed copy for nothing).
        let seq = seq_plan(dev.caps(), self.kind, b, h).filter(|_| t > 1);
        if let Some(plan) = seq {
            // W_hh transposed ([H, G*H]), so the sequence kernel's lanes read consecutive
            // weights; the buffer lives until the dispatches are recorded.
            let wt = w.w_hh.transpose(0, 1)?.contiguous_at_zero()?;
            bufs[0] = wt.buffer();
            // Each chunk starts from the state slot its predecessor wrote.
            for s0 in (0..t).step_by(SEQ_CHUNK) {
                let p = RnnParams {
                    steps: (t - s0).min(SEQ_CHUNK) as u32,
                    ..params_at(s0)
                };
                dev.launch(
                    op,
                    plan.kernel,
                    &[input.dtype()],
                    &plan.consts,
                    bytemuck::bytes_of(&p),
                    &bufs,
                    plan.grid,
                )?;
            }
            return Ok(());
        }
        let plan = step_plan(dev, self.kind, b, h, &FORWARD_STEPS)?;
        for step in 0..t {
            dev.launch(
                op,
                plan.kernel,
                &[input.dtype()],
                &plan.consts,
                bytemuck::bytes_of(&params_at(step)),
                &bufs,
                plan.grid,
            )?;
        }
        Ok(())
    }
}

/// `h_n` / `c_n` `[L*D, B, H]` in storage of their own: one layer and direction's final state
/// would otherwise be a view of the state sequence, the same storage as the output's last step
/// (PyTorch returns separate tensors: a write into one must not change the other).
fn final_states(dev: &crate::Device, parts: &[Tensor], b: usize, h: usize) -> Result<Tensor> {
    match parts {
        [one] => {
            let out = Tensor::empty(dev, "rnn_state", one.shape(), one.dtype())?;
            let es = one.dtype().size() as u64;
            let (at, bytes) = (one.layout().offset() as u64 * es, one.numel() as u64 * es);
            if one.is_contiguous() && (at | bytes).is_multiple_of(4) {
                // A buffer copy, no dispatch: a one-step forward stays three dispatches.
                dev.copy_buffer("rnn_state", one.buffer(), at, out.buffer(), 0, bytes)?;
            } else {
                out.copy_from(one)?;
            }
            Ok(out)
        }
        _ => stack_states(dev, parts, b, h),
    }
}
