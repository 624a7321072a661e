//! Optimizers with PyTorch's update math (`torch.optim.SGD`, `Adam`, `AdamW`): each step updates
//! every parameter in place on the device with one fused dispatch (shaders/optim.wgsl), no host
//! round trip; the state (momentum buffers, moment estimates, step count) lives on the device
//! and can be saved and loaded. [`clip_grad_norm`] scales gradients on the device too.
//!
//! ```no_run,ignore-wasm32
//! # fn main() -> wgtensor::Result<()> {
//! use wgtensor::optim::{Adam, AdamOptions};
//! use wgtensor::{DType, Device, Tensor};
//! let dev = Device::new()?;
//! let w = Tensor::zeros(&dev, &[4], DType::F32)?;
//! let mut opt = Adam::new(vec![w.clone()], AdamOptions { lr: 1e-3, ..Default::default() })?;
//! let g = Tensor::full(&dev, &[4], 0.5, DType::F32)?;
//! opt.step(&[Some(&g)])?; // w is updated in place
//! # Ok(()) }
//! ```

mod kernel;

use kernel::{
    check_param, launch, OptimParams, FLAG_AMSGRAD, FLAG_DECOUPLED, FLAG_FIRST, FLAG_MAXIMIZE,
    FLAG_MOMENTUM, FLAG_NESTEROV, OPT_ADAM, OPT_SGD,
};
#[doc(hidden)]
pub use kernel::{optim_variants, params_layout};

use crate::{Error, Result, Tensor};

fn check_hyper(op: &'static str, what: &str, v: f64, lo: f64, hi: f64) -> Result<()> {
    if !(v.is_finite() && v >= lo && v <= hi) {
        return Err(Error::arg(
            op,
            format!("{what} must be in [{lo}, {hi}], got {v}"),
        ));
    }
    Ok(())
}

/// The gradients of one step, aligned with the parameters; `None` skips a parameter (PyTorch
/// skips parameters whose `.grad` is None).
fn check_grads(op: &'static str, params: &[Tensor], grads: &[Option<&Tensor>]) -> Result<()> {
    if grads.len() != params.len() {
        return Err(Error::arg(
            op,
            format!(
                "{} gradients for {} parameters (pass None for a parameter without one)",
                grads.len(),
                params.len()
            ),
        ));
    }
    Ok(())
}

/// Options of [`Sgd`], PyTorch's defaults apart from `lr`, which PyTorch requires.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SgdOptions {
    /// Learning rate.
    pub lr: f64,
    /// Momentum factor (0: plain SGD).
    pub momentum: f64,
    /// Dampening of the momentum's gradient term.
    pub dampening: f64,
    /// L2 penalty added to the gradient.
    pub weight_decay: f64,
    /// Nesterov momentum (needs momentum > 0 and dampening 0).
    pub nesterov: bool,
    /// Maximize the objective instead of minimizing it.
    pub maximize: bool,
}

impl Default for SgdOptions {
    fn default() -> Self {
        SgdOptions {
            lr: 1e-3,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
            maximize: false,
        }
    }
}

///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// use wgtensor::optim::{Sgd, SgdOptions};
/// let w = Tensor::from_slice(&dev, &[1.0f32, -2.0], &[2])?.requires_grad()?;
/// let mut opt = Sgd::new(vec![w.clone()], SgdOptions { lr: 0.1, momentum: 0.9, ..Default::default() })?;
/// let loss = w.mul(&w)?.sum_all()?; // d/dw = 2w
/// let grads = loss.backward()?;
/// opt.step(&[grads.get(&w)])?; // in place on the device
/// assert_eq!(w.to_vec::<f32>()?, vec![0.8, -1.6]);
/// # Ok(()) }
/// ```
/// Stochastic gradient descent with momentum (PyTorch's `torch.optim.SGD`).
#[derive(Debug)]
pub struct Sgd {
    params: Vec<Tensor>,
    opts: SgdOptions,
    /// Per parameter, created at its first step with momentum.
    momentum_buffers: Vec<Option<Tensor>>,
}

impl Sgd {
    /// An optimizer over `params` (updated in place; each must be contiguous).
    pub fn new(params: Vec<Tensor>, opts: SgdOptions) -> Result<Sgd> {
        let op = "sgd";
        check_hyper(op, "lr", opts.lr, 0.0, f64::MAX)?;
        check_hyper(op, "momentum", opts.momentum, 0.0, f64::MAX)?;
        check_hyper(op, "dampening", opts.dampening, f64::MIN, f64::MAX)?;
        check_hyper(op, "weight_decay", opts.weight_decay, 0.0, f64::MAX)?;
        if opts.nesterov && (opts.momentum <= 0.0 || opts.dampening != 0.0) {
            return Err(Error::arg(
                op,
                "Nesterov momentum requires a momentum and zero dampening",
            ));
        }
        for (i, p) in params.iter().enumerate() {
            check_param(op, i, p)?;
        }
        let n = params.len();
        Ok(Sgd {
            params,
            opts,
            momentum_buffers: vec![None; n],
        })
    }

    /// The parameters, in order.
    pub fn params(&self) -> &[Tensor] {
        &self.params
    }

    /// The current learning rate.
    pub fn lr(&self) -> f64 {
        self.opts.lr
    }

    /// Changes the learning rate for the following steps (schedulers).
    pub fn set_lr(&mut self, lr: f64) -> Result<()> {
        check_hyper("sgd", "lr", lr, 0.0, f64::MAX)?;
        self.opts.lr = lr;
        Ok(())
    }

    /// One step: every parameter with a gradient is updated in place by one dispatch.
    pub fn step(&mut self, grads: &[Option<&Tensor>]) -> Result<()> {
        let op = "sgd";
        check_grads(op, &self.params, grads)?;
        let o = self.opts;
        for (i, (p, g)) in self.params.iter().zip(grads).enumerate() {
            let Some(g) = g else { continue };
            let mut flags = if o.maximize { FLAG_MAXIMIZE } else { 0 };
            if o.momentum != 0.0 {
                flags |= FLAG_MOMENTUM;
                if o.nesterov {
                    flags |= FLAG_NESTEROV;
                }
                if self.momentum_buffers[i].is_none() {
                    flags |= FLAG_FIRST;
                    self.momentum_buffers[i] = Some(Tensor::zeros(p.device(), p.shape(), p.dtype)?);
                }
            }
            let params = OptimParams {
                flags,
                lr: o.lr as f32,
                weight_decay: o.weight_decay as f32,
                c0: o.momentum as f32,
                c1: o.dampening as f32,
                ..Default::default()
            };
            let buf = self.momentum_buffers[i].as_ref();
            launch(op, OPT_SGD, p, g, [buf, None, None], params)?;
        }
        Ok(())
    }

    /// The state as PyTorch's `state_dict()['state']` names it: `{i}.momentum_buffer`.
    pub fn state_tensors(&self) -> Vec<(String, Tensor)> {
        self.momentum_buffers
            .iter()
            .enumerate()
            .filter_map(|(i, b)| b.clone().map(|t| (format!("{i}.momentum_buffer"), t)))
            .collect()
    }

    /// Restores state saved by [`Sgd::state_tensors`] (names and shapes checked).
    pub fn load_state_tensors(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        for (name, t) in state {
            let i = parse_state_name("sgd", name, &["momentum_buffer"], &self.params, t)?.0;
            self.momentum_buffers[i] = Some(t.contiguous()?);
        }
        Ok(())
    }
}

/// Parses `{i}.{what}` and checks `t` against parameter `i`; returns (i, what).
fn parse_state_name<'a>(
    op: &'static str,
    name: &'a str,
    known: &[&str],
    params: &[Tensor],
    t: &Tensor,
) -> Result<(usize, &'a str)> {
    let bad = || Error::arg(op, format!("unexpected state entry {name:?}"));
    let (idx, what) = name.split_once('.').ok_or_else(bad)?;
    let i: usize = idx.parse().map_err(|_| bad())?;
    if i >= params.len() || !known.contains(&what) {
        return Err(bad());
    }
    if t.shape() != params[i].shape() || t.dtype() != params[i].dtype() {
        return Err(Error::shape(
            op,
            format!(
                "state {name:?} has shape {:?} ({:?}), parameter {i} has {:?} ({:?})",
                t.shape(),
                t.dtype(),
                params[i].shape(),
                params[i].dtype()
            ),
        ));
    }
    Ok((i, what))
}

/// Options of [`Adam`] (PyTorch's defaults; [`AdamOptions::adamw`] gives AdamW's).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamOptions {
    /// Learning rate.
    pub lr: f64,
    /// Decay rates of the first and second moment estimates.
    pub betas: (f64, f64),
    /// Added to the denominator for numerical stability.
    pub eps: f64,
    /// L2 penalty (Adam: added to the gradient; AdamW: decoupled, `p *= 1 - lr * wd`).
    pub weight_decay: f64,
    /// Keep the maximum of the second moment (AMSGrad).
    pub amsgrad: bool,
    /// Decoupled weight decay (AdamW).
    pub decoupled_weight_decay: bool,
    /// Maximize the objective instead of minimizing it.
    pub maximize: bool,
}

impl Default for AdamOptions {
    fn default() -> Self {
        AdamOptions {
            lr: 1e-3,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.0,
            amsgrad: false,
            decoupled_weight_decay: false,
            maximize: false,
        }
    }
}

impl AdamOptions {
    /// PyTorch's `AdamW` defaults: decoupled weight decay 0.01.
    pub fn adamw() -> AdamOptions {
        AdamOptions {
            weight_decay: 1e-2,
            decoupled_weight_decay: true,
            ..Default::default()
        }
    }
}

///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// use wgtensor::optim::{Adam, AdamOptions};
/// let w = Tensor::from_slice(&dev, &[1.0f32, -2.0], &[2])?.requires_grad()?;
/// let mut opt = Adam::new(vec![w.clone()], AdamOptions::adamw())?; // or Default::default() for Adam
/// for _ in 0..3 {
///     let grads = w.mul(&w)?.sum_all()?.backward()?;
///     opt.step(&[grads.get(&w)])?;
/// }
/// let v = w.to_vec::<f32>()?;
/// assert!(v[0] < 1.0 && v[1] > -2.0); // both moved toward 0
/// # Ok(()) }
/// ```
/// Adam and AdamW (PyTorch's `torch.optim.Adam` / `AdamW`), with AMSGrad optional.
#[derive(Debug)]
pub struct Adam {
    params: Vec<Tensor>,
    opts: AdamOptions,
    /// Per parameter: steps taken, exp_avg, exp_avg_sq, max_exp_avg_sq (AMSGrad).
    steps: Vec<u64>,
    state: Vec<Option<[Tensor; 3]>>,
}

impl Adam {
    /// An optimizer over `params` (updated in place; each must be contiguous).
    pub fn new(params: Vec<Tensor>, opts: AdamOptions) -> Result<Adam> {
        let op = "adam";
        check_hyper(op, "lr", opts.lr, 0.0, f64::MAX)?;
        check_hyper(op, "eps", opts.eps, 0.0, f64::MAX)?;
        check_hyper(op, "betas.0", opts.betas.0, 0.0, 1.0 - f64::EPSILON)?;
        check_hyper(op, "betas.1", opts.betas.1, 0.0, 1.0 - f64::EPSILON)?;
        check_hyper(op, "weight_decay", opts.weight_decay, 0.0, f64::MAX)?;
        for (i, p) in params.iter().enumerate() {
            check_param(op, i, p)?;
        }
        let n = params.len();
        Ok(Adam {
            params,
            opts,
            steps: vec![0; n],
            state: vec![None; n],
        })
    }

    /// AdamW: [`Adam`] with decoupled weight decay (`opts.decoupled_weight_decay` is set).
    pub fn adamw(params: Vec<Tensor>, opts: AdamOptions) -> Result<Adam> {
        Adam::new(
            params,
            AdamOptions {
                decoupled_weight_decay: true,
                ..opts
            },
        )
    }

    /// The parameters, in order.
    pub fn params(&self) -> &[Tensor] {
        &self.params
    }

    /// The current learning rate.
    pub fn lr(&self) -> f64 {
        self.opts.lr
    }

    /// Changes the learning rate for the following steps (schedulers).
    pub fn set_lr(&mut self, lr: f64) -> Result<()> {
        check_hyper("adam", "lr", lr, 0.0, f64::MAX)?;
        self.opts.lr = lr;
        Ok(())
    }

    /// One step: every parameter with a gradient is updated in place by one dispatch.
    pub fn step(&mut self, grads: &[Option<&Tensor>]) -> Result<()> {
        let op = "adam";
        check_grads(op, &self.params, grads)?;
        let o = self.opts;
        for (i, (p, g)) in self.params.iter().zip(grads).enumerate() {
            let Some(g) = g else { continue };
            if self.state[i].is_none() {
                let z = || Tensor::zeros(p.device(), p.shape(), p.dtype);
                self.state[i] = Some([z()?, z()?, z()?]);
            }
            self.steps[i] = self.steps[i].saturating_add(1);
            let t = self.steps[i].min(i32::MAX as u64) as i32;
            // PyTorch's single-tensor Adam: step_size = lr / (1 - beta1^t), denominators
            // divided by sqrt(1 - beta2^t), both in double precision on the host.
            let bc1 = 1.0 - o.betas.0.powi(t);
            let bc2 = 1.0 - o.betas.1.powi(t);
            let mut flags = if o.maximize { FLAG_MAXIMIZE } else { 0 };
            if o.amsgrad {
                flags |= FLAG_AMSGRAD;
            }
            if o.decoupled_weight_decay {
                flags |= FLAG_DECOUPLED;
            }
            let params = OptimParams {
                flags,
                lr: o.lr as f32,
                weight_decay: o.weight_decay as f32,
                c0: o.betas.0 as f32,
                c1: o.betas.1 as f32,
                eps: o.eps as f32,
                step_size: (o.lr / bc1) as f32,
                bc2_sqrt: bc2.sqrt() as f32,
                ..Default::default()
            };
            let Some([m, v, vmax]) = self.state[i].as_ref() else {
                continue;
            };
            let vmax = o.amsgrad.then_some(vmax);
            launch(op, OPT_ADAM, p, g, [Some(m), Some(v), vmax], params)?;
        }
        Ok(())
    }

    /// Steps taken by parameter `i` (PyTorch's `state[i]['step']`).
    pub fn step_count(&self, i: usize) -> Option<u64> {
        self.steps.get(i).copied()
    }

    /// The state as PyTorch's `state_dict()['state']` names it: `{i}.exp_avg`,
    /// `{i}.exp_avg_sq`, `{i}.max_exp_avg_sq` (AMSGrad); the step counts are
    /// [`Adam::step_count`].
    pub fn state_tensors(&self) -> Vec<(String, Tensor)> {
        let mut v = Vec::new();
        for (i, s) in self.state.iter().enumerate() {
            if let Some([m, s2, vmax]) = s {
                v.push((format!("{i}.exp_avg"), m.clone()));
                v.push((format!("{i}.exp_avg_sq"), s2.clone()));
                if self.opts.amsgrad {
                    v.push((format!("{i}.max_exp_avg_sq"), vmax.clone()));
                }
            }
        }
        v
    }

    /// Restores state saved by [`Adam::state_tensors`] and the per-parameter step counts.
    pub fn load_state_tensors(&mut self, state: &[(String, Tensor)], steps: &[u64]) -> Result<()> {
        let op = "adam";
        if steps.len() != self.params.len() {
            return Err(Error::arg(
                op,
                format!(
                    "{} step counts for {} parameters",
                    steps.len(),
                    self.params.len()
                ),
            ));
        }
        for (name, t) in state {
            let (i, what) = parse_state_name(
                op,
                name,
                &["exp_avg", "exp_avg_sq", "max_exp_avg_sq"],
                &self.params,
                t,
            )?;
            if self.state[i].is_none() {
                let p = &self.params[i];
                let z = || Tensor::zeros(p.device(), p.shape(), p.dtype);
                self.state[i] = Some([z()?, z()?, z()?]);
            }
            let slot = match what {
                "exp_avg" => 0,
                "exp_avg_sq" => 1,
                _ => 2,
            };
            if let Some(s) = self.state[i].as_mut() {
                s[slot] = t.contiguous()?;
            }
        }
        self.steps = steps.to_vec();
        Ok(())
    }
}

/// Scales `grads` so that their joint L2 norm is at most `max_norm` (PyTorch's
/// `clip_grad_norm_`: coefficient `max_norm / (total_norm + 1e-6)` clamped to 1), entirely on
/// the device. Returns the new gradients and the total norm before clipping (a `[]` tensor).
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// use wgtensor::optim::clip_grad_norm;
/// let g = Tensor::from_slice(&dev, &[3.0f32, 4.0], &[2])?; // norm 5
/// let (clipped, norm) = clip_grad_norm(&[&g], 1.0)?;
/// assert_eq!(norm.to_vec::<f32>()?, vec![5.0]);
/// let c = clipped[0].to_vec::<f32>()?;
/// assert!((c[0] - 0.6).abs() < 1e-5 && (c[1] - 0.8).abs() < 1e-5);
/// # Ok(()) }
/// ```
pub fn clip_grad_norm(grads: &[&Tensor], max_norm: f64) -> Result<(Vec<Tensor>, Tensor)> {
    let op = "clip_grad_norm";
    check_hyper(op, "max_norm", max_norm, 0.0, f64::MAX)?;
    let Some(first) = grads.first() else {
        return Err(Error::arg(op, "no gradients given"));
    };
    let mut total: Option<Tensor> = None;
    for g in grads {
        first.same_device(op, g)?;
        // Squares summed in f32, so f16 gradients do not overflow the norm.
        let flat = g.reshape(&[g.numel()])?.to_dtype(crate::DType::F32)?;
        let sq = flat.mul(&flat)?.sum(0, false)?;
        total = Some(match total {
            None => sq,
            Some(t) => t.add(&sq)?,
        });
    }
    let Some(total) = total else {
        return Err(Error::arg(op, "no gradients given"));
    };
    let norm = total.sqrt()?;
    let coef = norm
        .add_scalar(1e-6)?
        .scalar_op(crate::ops::ScalarOp::RDiv, max_norm)?
        .scalar_op(crate::ops::ScalarOp::Min, 1.0)?;
    let clipped = grads
        .iter()
        .map(|g| g.mul(&coef.to_dtype(g.dtype())?))
        .collect::<Result<Vec<_>>>()?;
    Ok((clipped, norm))
}
