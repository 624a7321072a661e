//! BPTT backward of the fused LSTM/GRU (its kernels in ops/rnn/backward_kernels.rs): one
//! fused dispatch per step for the recurrent gradient and the gate derivatives (on GPUs two:
//! the recurrent product in K slices on the large-tile core, then the derivatives summing the
//! slices; with H <= 64 one dispatch for every step), then the weight gradients as GEMMs
//! over the sequence.

use super::backward_kernels::*;
use super::*;
use crate::ops::gemm::grad::over_k_chunks;
use crate::runtime::Storage;

/// Gradients of one layer and direction's weights, PyTorch layout: each field has the shape
/// of the [`RnnWeights`](super::RnnWeights) field of the same name (what PyTorch leaves in
/// `.grad` after `backward()`).
#[derive(Debug, Clone)]
pub struct RnnWeightGrads {
    /// `[G*H, I]`, the gradient of `weight_ih_l{k}`.
    pub w_ih: Tensor,
    /// `[G*H, H]`, the gradient of `weight_hh_l{k}`.
    pub w_hh: Tensor,
    /// `[G*H]`, the gradient of `bias_ih_l{k}`.
    pub b_ih: Tensor,
    /// `[G*H]`, the gradient of `bias_hh_l{k}`.
    pub b_hh: Tensor,
}

impl From<RnnWeightGrads> for RnnWeights {
    /// The gradients as a weight set (e.g. to apply an update by hand); no check is made, so
    /// build an [`Rnn`] through [`Rnn::new`], which validates it.
    fn from(g: RnnWeightGrads) -> RnnWeights {
        RnnWeights {
            w_ih: g.w_ih,
            w_hh: g.w_hh,
            b_ih: g.b_ih,
            b_hh: g.b_hh,
        }
    }
}

impl From<RnnWeights> for RnnWeightGrads {
    /// A weight set in the gradients' struct (the same four tensors).
    fn from(w: RnnWeights) -> RnnWeightGrads {
        RnnWeightGrads {
            w_ih: w.w_ih,
            w_hh: w.w_hh,
            b_ih: w.b_ih,
            b_hh: w.b_hh,
        }
    }
}

/// What [`Rnn::backward`] returns.
#[derive(Debug, Clone)]
pub struct RnnGrads {
    /// Same shape and layout convention as the forward input.
    pub dx: Tensor,
    /// `[num_layers * D, B, H]`.
    pub dh0: Tensor,
    /// LSTM only, `[num_layers * D, B, H]`.
    pub dc0: Option<Tensor>,
    /// Indexed `layer * D + direction`.
    pub weights: Vec<RnnWeightGrads>,
}

/// Column sums of `m` `[R, N]`. On CPU adapters as `ones[1, R] @ m` (the ones a broadcast view
/// of one uploaded value): the bias gradients then run on the GEMM pipeline the weight
/// gradients already compiled instead of compiling a reduction too (a pipeline costs ~100 ms
/// cold on lavapipe), and their split-k keeps each K run short. A GPU's GEMM tiles leave one
/// invocation hundreds to thousands of rows added in turn (2.7e-5 off on near-constant gate
/// gradients, past PyTorch's f32 tolerance), so GPUs take the reduction, which adds a lane's
/// values in trees and blocks (`fold_range` in shaders/reduce.wgsl).
fn col_sum(m: &Tensor) -> Result<Tensor> {
    let dev = m.device();
    if !dev.caps().cpu {
        return m.sum(0, false);
    }
    let one = match m.dtype() {
        DType::F16 => Tensor::from_slice(dev, &[half::f16::ONE], &[1, 1])?,
        _ => Tensor::from_slice(dev, &[1f32], &[1, 1])?,
    };
    let ones = one.broadcast_to(&[1, m.shape()[0]])?;
    over_k_chunks(&ones, m, &GemmOptions::default(), gemm)?.reshape(&[m.shape()[1]])
}

/// `[T, B, N]` (or any rank-3 view whose first two dims merge) as `[T*B, N]`, copying only
/// when the view cannot be reshaped.
fn flat2(x: &Tensor) -> Result<Tensor> {
    let s = x.shape();
    x.reshape(&[s[0] * s[1], s[2]])
}

impl Rnn {
    /// BPTT through a [`Rnn::forward_train`] run. `dy`: gradient of the output (its shape,
    /// `[T, B, D*H]` or `[B, T, D*H]` with batch_first), `&dy` or `None` when only the final
    /// states feed the loss; `dh_n` / `dc_n`: gradients of the final states `[L*D, B, H]`;
    /// each absent gradient counts as zeros. Per layer and direction: one fused dispatch per
    /// step (recurrent gradient and gate derivatives), then the weight, bias and input gradients
    /// as GEMMs / column sums over the whole sequence.
    ///
    /// What PyTorch's autograd computes for `nn.LSTM` / `nn.GRU` given the upstream gradients:
    /// the input and initial-state gradients and every weight gradient (see [`RnnGrads`]).
    /// `saved` must come from `forward_train` on this same `Rnn` with unchanged weights.
    /// Errors: [`Error::Shape`] when `dy`, `dh_n` or `dc_n` do not have the forward's shapes;
    /// [`Error::InvalidArgument`] when `saved` does not come from this configuration or a GRU
    /// is given a `dc_n`; [`Error::DType`] / [`Error::DeviceMismatch`] as for the forward.
    ///
    /// ```no_run,ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::ops::{Rnn, RnnKind, RnnWeights, RnnOptions};
    /// use wgtensor::{DType, Device, Tensor};
    /// let dev = Device::new()?;
    /// let w_ih = Tensor::full(&dev, &[4 * 16, 8], 0.1, DType::F32)?;
    /// let w_hh = Tensor::full(&dev, &[4 * 16, 16], 0.1, DType::F32)?;
    /// let w = RnnWeights::new(RnnKind::Lstm, &w_ih, &w_hh, None, None)?;
    /// let lstm = Rnn::new(RnnKind::Lstm, RnnOptions::default(), vec![w])?;
    /// let x = Tensor::full(&dev, &[20, 4, 8], 0.5, DType::F32)?; // [T, B, I]
    /// let (out, saved) = lstm.forward_train(&x, None, None)?;
    /// // loss = out.output.sum(): its gradient is all ones
    /// let dy = Tensor::full(&dev, out.output.shape(), 1.0, DType::F32)?;
    /// let grads = lstm.backward(&saved, &dy, None, None)?;
    /// assert_eq!(grads.dx.shape(), x.shape());
    /// assert_eq!(grads.weights[0].w_hh.shape(), &[64, 16]);
    /// # Ok(()) }
    /// ```
    pub fn backward<'a>(
        &self,
        saved: &RnnSaved,
        dy: impl Into<Option<&'a Tensor>>,
        dh_n: Option<&Tensor>,
        dc_n: Option<&Tensor>,
    ) -> Result<RnnGrads> {
        let op = self.kind.name();
        // Weights first: they bound hidden_size and num_layers, which check_saved multiplies.
        self.check_weights()?;
        self.check_saved(saved)?;
        let dy = self.output_grad(saved, dy.into())?;
        self.check_state_grads(&dy, dh_n, dc_n)?;
        let (t, b, d, h) = (saved.t, saved.b, self.dirs(), self.hidden_size);
        let dev = &dy.device().clone();
        let plan = step_plan(dev, self.kind, b, h, &BACKWARD_STEPS)?;
        // Time-major from here on; each layer's input gradient is the next lower layer's dy.
        let mut grad = if self.batch_first {
            dy.transpose(0, 1)?
        } else {
            dy
        };
        let n = self.num_layers * d;
        let (mut weights, mut dh0, mut dc0) = (vec![None; n], vec![None; n], vec![None; n]);
        for layer in (0..self.num_layers).rev() {
            let sl = &saved.layers[layer];
            let dyc = if grad.is_contiguous() {
                grad.clone()
            } else {
                grad.contiguous_at_zero()?
            };
            let mut dx: Option<Tensor> = None;
            for dir in 0..d {
                let idx = layer * d + dir;
                let steps = DirSteps {
                    op,
                    rnn: self,
                    sl,
                    dy: &dyc,
                    dir,
                    idx,
                    t,
                    b,
                };
                let carry = steps.initial_carry(dh_n, dc_n)?;
                let (dah, dax, last) = steps.run(&plan, &carry)?;
                let g = steps.finish(&carry, &dah, dax.as_ref(), last, dx.as_ref())?;
                weights[idx] = Some(g.weights);
                dh0[idx] = Some(g.dh0);
                dc0[idx] = g.dc0;
                dx = Some(g.dx);
            }
            let dx = dx.ok_or_else(|| Error::arg(op, "internal: no direction ran"))?;
            grad = dx.reshape(&[t, b, sl.input.shape()[2]])?;
        }
        let dx = if self.batch_first {
            grad.transpose(0, 1)?
        } else {
            grad
        };
        let dh0: Vec<Tensor> = dh0.into_iter().flatten().collect();
        let dc0: Vec<Tensor> = dc0.into_iter().flatten().collect();
        Ok(RnnGrads {
            dx,
            dh0: stack_states(dev, &dh0, b, h)?,
            dc0: if self.kind == RnnKind::Lstm {
                Some(stack_states(dev, &dc0, b, h)?)
            } else {
                None
            },
            weights: weights.into_iter().flatten().collect(),
        })
    }

    /// Errors unless `saved` has the layers, directions and sizes this Rnn produces: else it
    /// comes from another model (or another call's shapes) and the per-step views would fall
    /// outside its tensors.
    fn check_saved(&self, saved: &RnnSaved) -> Result<()> {
        let op = self.kind.name();
        let (t, b, d, h) = (saved.t, saved.b, self.dirs(), self.hidden_size);
        let lstm = self.kind == RnnKind::Lstm;
        if saved.layers.len() != self.num_layers || saved.layers.iter().any(|s| s.gates.len() != d)
        {
            return Err(Error::arg(
                op,
                "the saved state comes from an Rnn with other layers or directions",
            ));
        }
        // The saved gate activations are [T, B, 4 H]; None past usize, which no saved
        // tensor matches.
        let gates = h.checked_mul(4).map(|h4| [t, b, h4]);
        for (li, layer) in saved.layers.iter().enumerate() {
            let want_in = if li == 0 { self.input_size } else { d * h };
            let seq = [t + 2, b, d * h];
            let ok = layer.input.shape() == [t, b, want_in]
                && layer.hseq.shape() == seq
                && layer.cseq.as_ref().map(|c| c.shape() == seq) != Some(false)
                && layer.cseq.is_some() == lstm
                && layer
                    .gates
                    .iter()
                    .all(|g| gates.is_some_and(|s| g.shape() == s));
            if !ok {
                return Err(Error::arg(
                    op,
                    format!(
                        "the saved state (layer {li}: input {:?}, states {:?}) does not come from \
                         forward_train of this Rnn (input {}, hidden {h}, {d} direction(s))",
                        layer.input.shape(),
                        layer.hseq.shape(),
                        self.input_size
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The output's gradient in the forward output's shape: `dy` checked, or zeros (cleared on
    /// the device) when only the final states feed the loss.
    fn output_grad(&self, saved: &RnnSaved, dy: Option<&Tensor>) -> Result<Tensor> {
        let op = self.kind.name();
        let w0 = &self.weights[0].w_ih;
        let dh = self.dirs() * self.hidden_size;
        let want = if self.batch_first {
            [saved.b, saved.t, dh]
        } else {
            [saved.t, saved.b, dh]
        };
        let Some(dy) = dy else {
            return Tensor::zeros(w0.device(), &want, w0.dtype());
        };
        dy.same_device(op, w0)?;
        w0.same_dtype(op, dy)?;
        if dy.shape() != want {
            return Err(Error::shape(
                op,
                format!("dy must be {want:?} like the output, got {:?}", dy.shape()),
            ));
        }
        Ok(dy.clone())
    }

    /// `dh_n` / `dc_n` against the final states' shape `[L*D, B, H]`, dy's device and dtype.
    fn check_state_grads(
        &self,
        dy: &Tensor,
        dh_n: Option<&Tensor>,
        dc_n: Option<&Tensor>,
    ) -> Result<()> {
        let op = self.kind.name();
        let b = dy.shape()[if self.batch_first { 0 } else { 1 }];
        let state_shape = [self.num_layers * self.dirs(), b, self.hidden_size];
        for (name, s) in [("dh_n", dh_n), ("dc_n", dc_n)] {
            if let Some(s) = s {
                if s.shape() != state_shape {
                    return Err(Error::shape(
                        op,
                        format!("{name} must be {state_shape:?}, got {:?}", s.shape()),
                    ));
                }
                dy.same_device(op, s)?;
                dy.same_dtype(op, s)?;
            }
        }
        if dc_n.is_some() && self.kind != RnnKind::Lstm {
            return Err(Error::arg(op, "a GRU has no cell state: dc_n must be None"));
        }
        Ok(())
    }
}

/// One layer and direction of the BPTT.
struct DirSteps<'s> {
    op: &'static str,
    rnn: &'s Rnn,
    sl: &'s SavedLayer,
    /// The layer output's gradient `[T, B, D*H]`, contiguous.
    dy: &'s Tensor,
    dir: usize,
    /// `layer * D + dir`: the weight set and the final-state slice.
    idx: usize,
    t: usize,
    b: usize,
}

/// What one direction contributes to the layer's gradients.
struct DirGrads {
    weights: RnnWeightGrads,
    /// The layer input's gradient so far (both directions add up).
    dx: Tensor,
    dh0: Tensor,
    dc0: Option<Tensor>,
}

impl DirSteps<'_> {
    /// Carries `[T + 1, 2, B, H]` flattened to `[2(T + 1), B, H]`: slot 2s holds the h carry
    /// into processed step s, slot 2s + 1 the c carry; slot 0 / 1 start from dh_n / dc_n.
    fn initial_carry(&self, dh_n: Option<&Tensor>, dc_n: Option<&Tensor>) -> Result<Tensor> {
        let (b, h) = (self.b, self.rnn.hidden_size);
        let dev = self.dy.device();
        let carry = Tensor::zeros(dev, &[2 * (self.t + 1), b, h], self.dy.dtype())?;
        if let Some(s) = dh_n {
            copy_state(dev, &s.narrow(0, self.idx, 1)?, &carry, 0, 0, h)?;
        }
        if let Some(s) = dc_n {
            copy_state(dev, &s.narrow(0, self.idx, 1)?, &carry, 1, 0, h)?;
        }
        Ok(carry)
    }

    /// One fused dispatch per step, in reverse processing order: the gate pre-activation
    /// gradients `dah` (and a GRU's separate input-side `dax`), and the last processed time
    /// index.
    fn run(&self, plan: &StepPlan, carry: &Tensor) -> Result<(Tensor, Option<Tensor>, usize)> {
        let (op, t, b) = (self.op, self.t, self.b);
        let (d, h, g) = (self.rnn.dirs(), self.rnn.hidden_size, self.rnn.kind.gates());
        let lstm = self.rnn.kind == RnnKind::Lstm;
        let (dev, dtype) = (self.dy.device(), self.dy.dtype());
        let dah = Tensor::empty(dev, op, &[t, b, g * h], dtype)?;
        let dax = if lstm {
            None
        } else {
            Some(Tensor::empty(dev, op, &[t, b, g * h], dtype)?)
        };
        if b == 0 || h == 0 {
            // Nothing to differentiate: no step runs (T empty launches would cost T host
            // round trips for an empty result).
            let last = if self.dir == 0 { 0 } else { t - 1 };
            return Ok((dah, dax, last));
        }
        let state = if lstm {
            self.sl
                .cseq
                .as_ref()
                .ok_or_else(|| Error::arg(op, "internal: an LSTM forward saved no cell states"))?
        } else {
            &self.sl.hseq
        };
        let w_hh = &self.rnn.weights[self.idx].w_hh;
        let slot_elems = b * d * h;
        let dir = self.dir;
        let params_at = |s: usize, prev_ti: usize, splits: u32| {
            // Reverse processing order: the forward direction walks T-1..0.
            let (ti, prev) = if dir == 0 {
                (t - 1 - s, t - 1 - s)
            } else {
                (s, s + 2)
            };
            let p = BackwardParams {
                batch: b as u32,
                hidden: h as u32,
                gh: (g * h) as u32,
                has_rec: (s > 0) as u32,
                dy_off: (self.dy.layout().offset() + ti * b * d * h + dir * h) as u32,
                dy_rs: (d * h) as u32,
                a_off: (ti * b * g * h) as u32,
                a_prev: (prev_ti * b * g * h) as u32,
                g_off: (ti * b * 4 * h) as u32,
                seq_rs: (d * h) as u32,
                prev_off: (prev * slot_elems + dir * h) as u32,
                cur_off: ((ti + 1) * slot_elems + dir * h) as u32,
                carry_in: (s * 2 * b * h) as u32,
                carry_out: ((s + 1) * 2 * b * h) as u32,
                splits,
                ..Default::default()
            };
            (p, ti)
        };
        // What the single-dispatch steps bind (the sequence kernel's too).
        let mut bufs = vec![
            w_hh.buffer(),
            self.dy.buffer(),
            self.sl.gates[dir].buffer(),
            state.buffer(),
            carry.buffer(),
            dah.buffer(),
        ];
        if let Some(a) = &dax {
            bufs.push(a.buffer());
        }
        if let Some(rp) = seq_shape(dev.caps(), b, h, g * h) {
            let kernel = if lstm {
                &LSTM_BACKWARD_SEQ
            } else {
                &GRU_BACKWARD_SEQ
            };
            let consts = [("RP", rp as f64)];
            let grid = seq_grid(b, rp);
            // One dispatch per chunk of steps; a chunk after the first starts from the dA_h
            // rows of the step processed before it (`has_rec`, `a_prev`).
            for s0 in (0..t).step_by(SEQ_CHUNK) {
                let before = match (s0, dir) {
                    (0, _) => 0,
                    (_, 0) => t - s0,
                    _ => s0 - 1,
                };
                let p = BackwardParams {
                    steps: (t - s0).min(SEQ_CHUNK) as u32,
                    down: (dir == 0) as u32,
                    ..params_at(s0, before, 1).0
                };
                let params = bytemuck::bytes_of(&p);
                dev.launch(op, kernel, &[dtype], &consts, params, &bufs, grid)?;
            }
            // The last processed step is time 0 (forward direction) or T - 1.
            let last = if dir == 0 { 0 } else { t - 1 };
            return Ok((dah, dax, last));
        }
        // GPUs: the recurrent product on the large-tile core in K slices, then the gate
        // derivatives summing them; the slices' workspace is reused by every step. A grid
        // past the per-dimension limit (millions of batch rows) takes the step plan instead.
        let splits = rec_splits(dev.caps().parallelism, b, h, g * h);
        let max = dev.limits().max_compute_workgroups_per_dimension as usize;
        let fits = rec_grid(b, h, splits).iter().all(|&g| g <= max);
        let gpu = !dev.caps().cpu && fits;
        let ws = if gpu {
            Some(Storage::scratch(
                dev,
                op,
                splits as u64 * (b * h) as u64 * 4,
            )?)
        } else {
            None
        };
        let mut prev_ti = 0;
        for s in 0..t {
            let (p, ti) = params_at(s, prev_ti, splits);
            if let Some(ws) = &ws {
                self.gpu_step(&p, w_hh, state, carry, &dah, dax.as_ref(), ws, s > 0)?;
                prev_ti = ti;
                continue;
            }
            let params = bytemuck::bytes_of(&p);
            dev.launch(
                op,
                plan.kernel,
                &[dtype],
                &plan.consts,
                params,
                &bufs,
                plan.grid,
            )?;
            prev_ti = ti;
        }
        Ok((dah, dax, prev_ti))
    }

    /// One step on GPUs: the K slices of the recurrent product (after the first processed
    /// step), then the gate derivatives.
    #[allow(clippy::too_many_arguments)]
    fn gpu_step(
        &self,
        p: &BackwardParams,
        w_hh: &Tensor,
        state: &Tensor,
        carry: &Tensor,
        dah: &Tensor,
        dax: Option<&Tensor>,
        ws: &Storage,
        rec: bool,
    ) -> Result<()> {
        let (op, b, h) = (self.op, self.b, self.rnn.hidden_size);
        let (dev, dtype) = (self.dy.device(), self.dy.dtype());
        let params = bytemuck::bytes_of(p);
        let max = dev.limits().max_compute_workgroups_per_dimension as usize;
        let grid = rec_grid(b, h, p.splits);
        if grid.iter().any(|&g| g > max) {
            return Err(Error::size(
                op,
                format!("batch {b} x hidden {h} needs grid {grid:?}, over the adapter's {max}"),
            ));
        }
        if rec {
            let bufs = [w_hh.buffer(), dah.buffer(), ws.buffer()];
            let tm = [("TM", REC_TM as f64)];
            let grid = grid.map(|g| g as u32);
            dev.launch(op, &REC_WG, &[dtype], &tm, params, &bufs, grid)?;
        }
        let mut bufs = vec![self.dy.buffer(), self.sl.gates[self.dir].buffer()];
        match dax {
            None => bufs.extend([state.buffer(), carry.buffer(), dah.buffer()]),
            Some(dax) => {
                let hseq = self.sl.hseq.buffer();
                bufs.extend([hseq, carry.buffer(), dah.buffer(), dax.buffer()]);
            }
        }
        bufs.push(ws.buffer());
        let kernel = if dax.is_some() {
            &GRU_BACKWARD_WS
        } else {
            &LSTM_BACKWARD_WS
        };
        let wg = [("WG", WG as f64)];
        // Flat over x and y (the shader decodes both): B H units may pass one axis's limit.
        let grid = dev.grid_1d(op, (b * h).div_ceil(WG as usize) as u64)?;
        dev.launch(op, kernel, &[dtype], &wg, params, &bufs, grid)
    }

    /// The sequence-wide GEMMs and sums: weight and bias gradients, the input gradient (added
    /// to `dx_other`, the other direction's), and the initial states' gradients.
    fn finish(
        &self,
        carry: &Tensor,
        dah: &Tensor,
        dax: Option<&Tensor>,
        last: usize,
        dx_other: Option<&Tensor>,
    ) -> Result<DirGrads> {
        let (t, b, h, g) = (self.t, self.b, self.rnn.hidden_size, self.rnn.kind.gates());
        let w = &self.rnn.weights[self.idx];
        let dah2 = flat2(dah)?;
        let dax2 = match dax {
            Some(a) => flat2(a)?,
            None => dah2.clone(),
        };
        // h_{t-1} of every step: slots 0..T (forward) or 2..T+2 (reverse).
        let first = if self.dir == 0 { 0 } else { 2 };
        let hprev = flat2(
            &self
                .sl
                .hseq
                .narrow(0, first, t)?
                .narrow(2, self.dir * h, h)?,
        )?;
        let plain = GemmOptions::default();
        let weights = RnnWeightGrads {
            // K is T * B (any length): chunked past the GEMM's K bound.
            w_ih: over_k_chunks(
                &dax2.transpose(0, 1)?,
                &flat2(&self.sl.input)?,
                &plain,
                gemm,
            )?,
            w_hh: over_k_chunks(&dah2.transpose(0, 1)?, &hprev, &plain, gemm)?,
            b_ih: col_sum(&dax2)?,
            b_hh: col_sum(&dah2)?,
        };
        // Both directions' input gradients add up (fused as the GEMM's C term).
        let with = |c| GemmOptions {
            c,
            ..Default::default()
        };
        let dx = gemm(&dax2, &w.w_ih, &with(dx_other))?;
        // dh0: the last processed step's recurrent product plus the direct carry.
        let carry_h = carry.narrow(0, 2 * t, 1)?.reshape(&[b, h])?;
        let da_last = dah.narrow(0, last, 1)?.reshape(&[b, g * h])?;
        let dh0 = gemm(&da_last, &w.w_hh, &with(Some(&carry_h)))?.reshape(&[1, b, h])?;
        let dc0 = if self.rnn.kind == RnnKind::Lstm {
            Some(carry.narrow(0, 2 * t + 1, 1)?)
        } else {
            None
        };
        Ok(DirGrads {
            weights,
            dx,
            dh0,
            dc0,
        })
    }
}

/// The GPU BPTT step's grid: 64 x 64 output tiles of the recurrent product, one z slice per
/// K split.
fn rec_grid(b: usize, h: usize, splits: u32) -> [usize; 3] {
    [h.div_ceil(64), b.div_ceil(64), splits as usize]
}
