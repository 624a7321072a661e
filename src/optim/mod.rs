//! Optimizers with PyTorch's update math (`torch.optim.SGD`, `Adam`, `AdamW`): each step updates
//! every parameter in place on the device with one fused dispatch (shaders/optim.wgsl), no host
//! round trip; the state (momentum buffers, moment estimates, step counts) lives on the device
//! and can be saved and loaded. [`clip_grad_norm`] scales gradients on the device too, and
//! [`LrScheduler`] sets the groups' learning rates epoch by epoch (PyTorch's
//! `lr_scheduler` classes, [`Schedule`]).
//!
//! ```no_run,ignore-wasm32
//! # fn main() -> wgtensor::Result<()> {
//! use wgtensor::nn::{Forward, Linear, Module};
//! use wgtensor::optim::{Adam, AdamOptions};
//! use wgtensor::{Device, Tensor};
//! let dev = Device::new()?;
//! let model = Linear::new(&dev, 4, 2, true)?;
//! // Named parameters ("weight", "bias"), as PyTorch's model.named_parameters().
//! let mut opt = Adam::new(model.named_parameters(), AdamOptions { lr: 1e-3, ..Default::default() })?;
//! let x = Tensor::ones(&dev, &[8, 4], wgtensor::DType::F32)?;
//! let loss = model.forward(&x)?.sum_all()?;
//! let grads = loss.backward()?;
//! opt.step(&grads)?; // each parameter's gradient found by identity; updated in place
//! # Ok(()) }
//! ```
//!
//! **Parameters** ([`IntoParams`]) are tracked leaves ([`Tensor::requires_grad`]; the `nn`
//! layers create theirs so) of a floating-point dtype, contiguous from the start of their
//! storage. The constructors refuse the output of a tracked op (PyTorch's "can't optimize a
//! non-leaf Tensor": backward never gives it a gradient), an untracked tensor, an `I32` tensor
//! and the same tensor (or two views of one storage) given twice. Given with names
//! (`Vec<(String, Tensor)>`, as [`Module::named_parameters`](crate::nn::Module::named_parameters)
//! returns them), the names key the saved state; plain tensors are named by their index.
//! [`ParamGroup`]s add parameters with their own learning rate and weight decay.
//!
//! **Gradients** are matched to parameters by identity: `step(&grads)` takes the [`Grads`] of
//! [`Tensor::backward`] and looks each parameter up in it, so gradients cannot be paired with
//! the wrong parameter; a parameter the loss did not reach has no gradient and is skipped (as
//! PyTorch skips a parameter whose `.grad` is `None`). `step_with(&[Option<&Tensor>])` takes
//! gradients by position instead, one per parameter in the order of `params()`, for gradients
//! computed by hand (clipped, averaged, from the manual backward kernels).
//!
//! **There is no `zero_grad`.** PyTorch accumulates gradients into each parameter's `.grad`
//! until `optimizer.zero_grad()` clears them; here gradients are never stored on the
//! parameters: every `backward()` returns a fresh [`Grads`] value that the step reads and the
//! caller drops, so nothing carries over from one step to the next and there is nothing to
//! zero. To accumulate over several micro-batches, add their gradients yourself (`grads.get(p)`
//! of each) and step with the sums through `step_with`.
//!
//! **Steps are atomic.** A step checks everything first (the number of gradients, each one's
//! device, dtype and shape, none of them sharing storage with a parameter or with the
//! optimizer's state, the devices' health), then allocates the state of parameters stepped for
//! the first time and compiles the kernel, and only then records the updates; a refused step
//! leaves the parameters, the state and the step counts exactly as they were. Each parameter's
//! new state and step count are committed when its update is recorded, so should the device
//! itself fail in the middle (lost, out of memory), the state still describes what was
//! recorded. `load_state_tensors` likewise checks every entry before replacing anything, and
//! keeps private copies of the tensors it is given.

mod clip;
mod kernel;
mod params;
mod schedule;

pub use clip::{clip_grad_norm, clip_grad_value};
pub(crate) use kernel::FAMILY;
use kernel::{
    check_grid, launch, packed, private_copy, warm, OptimParams, Spares, FLAG_AMSGRAD,
    FLAG_DECOUPLED, FLAG_FIRST, FLAG_MAXIMIZE, FLAG_MOMENTUM, FLAG_NESTEROV, OPT_ADAM, OPT_SGD,
};
#[doc(hidden)]
pub use kernel::{optim_variants, params_layout};
use params::{check_hyper, GroupOpts, ParamSet};
pub use params::{IntoParams, ParamGroup};
pub use schedule::{LrGroups, LrScheduler, Schedule};

use crate::{DType, Device, Error, Grads, Result, Tensor};

/// Compiles the update kernel for every (device, dtype) of the parameters a step updates and
/// checks their grids, before the step's first launch.
fn warm_all(op: &'static str, kind: u32, set: &ParamSet, grads: &[Option<&Tensor>]) -> Result<()> {
    let mut seen: Vec<(&Device, DType)> = Vec::new();
    for (p, g) in set.params.iter().zip(grads) {
        if g.is_none() {
            continue;
        }
        check_grid(op, p)?;
        if !seen
            .iter()
            .any(|(d, t)| d.same(p.device()) && *t == p.dtype())
        {
            warm(op, p.device(), kind, p.dtype())?;
            seen.push((p.device(), p.dtype()));
        }
    }
    Ok(())
}

/// A state entry given twice.
fn duplicate(op: &'static str, name: &str) -> Error {
    Error::arg(op, format!("state entry {name:?} is given twice"))
}

/// The accessors every optimizer has, over its parameter groups (`self.set`, a [`ParamSet`])
/// and its options' learning rate (`self.opts.lr`): written once, expanded into an inherent
/// `impl` of each optimizer (`$op` names the optimizer in errors).
macro_rules! group_accessors {
    ($opt:ident, $op:literal) => {
        impl $opt {
            #[doc = concat!(
                "The parameters of every group, in order (the order of [`",
                stringify!($opt),
                "::step_with`])."
            )]
            pub fn params(&self) -> &[Tensor] {
                &self.set.params
            }

            /// The parameters' names: those given, else each one's index.
            pub fn param_names(&self) -> &[String] {
                &self.set.names
            }

            /// The number of parameter groups.
            pub fn num_groups(&self) -> usize {
                self.set.groups.len()
            }

            /// The learning rate of the first group.
            pub fn lr(&self) -> f64 {
                self.set.group_lr(0).unwrap_or(self.opts.lr)
            }

            #[doc = concat!(
                "Sets the learning rate of every group for the following steps (schedulers); \
                 see [`",
                stringify!($opt),
                "::set_group_lr`] for one group."
            )]
            pub fn set_lr(&mut self, lr: f64) -> Result<()> {
                self.set.set_lr($op, lr)
            }

            #[doc = concat!(
                "The learning rate of group `g` (0: the parameters given to [`",
                stringify!($opt),
                "::new`])."
            )]
            pub fn group_lr(&self, g: usize) -> Option<f64> {
                self.set.group_lr(g)
            }

            /// Sets the learning rate of group `g` for the following steps.
            pub fn set_group_lr(&mut self, g: usize, lr: f64) -> Result<()> {
                self.set.set_group_lr($op, g, lr)
            }

            /// The weight decay of group `g`.
            pub fn group_weight_decay(&self, g: usize) -> Option<f64> {
                self.set.groups.get(g).map(|o| o.weight_decay)
            }
        }

        /// The groups' learning rates, for [`LrScheduler`].
        impl LrGroups for $opt {
            fn lr_groups(&self) -> usize {
                self.num_groups()
            }
            fn lr_of(&self, g: usize) -> Option<f64> {
                self.group_lr(g)
            }
            fn set_lr_of(&mut self, g: usize, lr: f64) -> Result<()> {
                self.set_group_lr(g, lr)
            }
            fn initial_lr_of(&self, g: usize) -> Option<f64> {
                self.set.initial_lrs.get(g).copied().flatten()
            }
            fn set_initial_lr_of(&mut self, g: usize, lr: f64) {
                if let Some(slot) = self.set.initial_lrs.get_mut(g) {
                    *slot = Some(lr);
                }
            }
        }
    };
}

group_accessors!(Sgd, "sgd");
group_accessors!(Adam, "adam");

/// Options of [`Sgd`], PyTorch's defaults apart from `lr`, which PyTorch requires.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SgdOptions {
    /// Learning rate (of every group that does not set its own).
    pub lr: f64,
    /// Momentum factor (0: plain SGD).
    pub momentum: f64,
    /// Dampening of the momentum's gradient term.
    pub dampening: f64,
    /// L2 penalty added to the gradient (of every group that does not set its own).
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

/// Stochastic gradient descent with momentum (PyTorch's `torch.optim.SGD`).
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
/// opt.step(&grads)?; // w's gradient found by identity, w updated in place on the device
/// assert_eq!(w.to_vec::<f32>()?, vec![0.8, -1.6]);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Sgd {
    set: ParamSet,
    opts: SgdOptions,
    /// Per parameter, created at its first step with momentum.
    momentum_buffers: Vec<Option<Tensor>>,
    spares: Spares,
}

impl Sgd {
    /// An optimizer over `params` (one group with `opts.lr` and `opts.weight_decay`): tensors
    /// or named tensors, each a tracked leaf updated in place (see the [module](self) doc).
    pub fn new(params: impl IntoParams, opts: SgdOptions) -> Result<Sgd> {
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
        let mut opt = Sgd {
            set: ParamSet::default(),
            opts,
            momentum_buffers: Vec::new(),
            spares: Spares::default(),
        };
        opt.add_param_group(ParamGroup::new(params))?;
        Ok(opt)
    }

    /// Adds a group of parameters with its own learning rate and weight decay (PyTorch's
    /// `add_param_group`); unset ones come from the options. Checked as in [`Sgd::new`], also
    /// against the parameters already present; nothing is added when a check fails.
    pub fn add_param_group(&mut self, group: ParamGroup) -> Result<()> {
        let defaults = GroupOpts {
            lr: self.opts.lr,
            weight_decay: self.opts.weight_decay,
        };
        self.set.add_group("sgd", group, defaults)?;
        self.momentum_buffers.resize(self.set.params.len(), None);
        Ok(())
    }

    /// One step from autograd's gradients: each parameter's gradient is looked up by identity
    /// (`grads.get(param)`), a parameter without one is skipped, and each one with a gradient
    /// is updated in place by one dispatch. Atomic: a refused step changes nothing.
    pub fn step(&mut self, grads: &Grads) -> Result<()> {
        let g = self.set.gather(grads);
        self.step_with(&g)
    }

    /// One step from gradients given by position: one entry per parameter, in the order of
    /// [`Sgd::params`], `None` skipping a parameter. Checked as [`Sgd::step`] is.
    pub fn step_with(&mut self, grads: &[Option<&Tensor>]) -> Result<()> {
        let op = "sgd";
        let state: Vec<&Tensor> = self.momentum_buffers.iter().flatten().collect();
        self.set.check_grads(op, grads, &state)?;
        warm_all(op, OPT_SGD, &self.set, grads)?;
        let o = self.opts;
        // Everything that allocates, into locals; nothing of the optimizer changes yet.
        let mut jobs = Vec::new();
        for (i, g) in grads.iter().enumerate() {
            let Some(g) = g else { continue };
            let p = &self.set.params[i];
            let group = self.set.groups[self.set.group_of[i]];
            self.spares.ensure(op, p.device())?;
            let mut flags = if o.maximize { FLAG_MAXIMIZE } else { 0 };
            let mut new_buf = None;
            if o.momentum != 0.0 {
                flags |= FLAG_MOMENTUM;
                if o.nesterov {
                    flags |= FLAG_NESTEROV;
                }
                if self.momentum_buffers[i].is_none() {
                    // The first step writes the buffer without reading it.
                    flags |= FLAG_FIRST;
                    new_buf = Some(Tensor::empty(p.device(), op, p.shape(), p.dtype)?);
                }
            }
            let params = OptimParams {
                flags,
                lr: group.lr as f32,
                weight_decay: group.weight_decay as f32,
                c0: o.momentum as f32,
                c1: o.dampening as f32,
                one_minus_c1: (1.0 - o.dampening) as f32,
                ..Default::default()
            };
            jobs.push((i, packed(g)?, new_buf, params));
        }
        for (i, g, new_buf, params) in jobs {
            let buf = new_buf.as_ref().or(self.momentum_buffers[i].as_ref());
            let p = &self.set.params[i];
            launch(op, OPT_SGD, p, &g, [buf, None, None], &self.spares, params)?;
            if new_buf.is_some() {
                self.momentum_buffers[i] = new_buf;
            }
        }
        Ok(())
    }

    /// The state as PyTorch's `state_dict()['state']` holds it, keyed
    /// `{parameter name}.momentum_buffer` (`0.momentum_buffer` for unnamed parameters). The
    /// tensors are the optimizer's own, which each step updates in place: copy them to keep a
    /// snapshot.
    pub fn state_tensors(&self) -> Vec<(String, Tensor)> {
        self.momentum_buffers
            .iter()
            .enumerate()
            .filter_map(|(i, b)| {
                b.clone()
                    .map(|t| (format!("{}.momentum_buffer", self.set.names[i]), t))
            })
            .collect()
    }

    /// Replaces the state with `state` (as [`Sgd::state_tensors`] names it; a parameter without
    /// an entry starts again without a momentum buffer, as in PyTorch's `load_state_dict`).
    /// Every entry is checked (name, device, shape, a float dtype, none given twice) before
    /// anything changes; the optimizer keeps copies in the parameter's dtype (PyTorch casts
    /// loaded state so), never the given tensors.
    pub fn load_state_tensors(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        let op = "sgd";
        let mut given: Vec<Option<&Tensor>> = vec![None; self.set.params.len()];
        for (name, t) in state {
            let (i, _) = self
                .set
                .parse_state_name(op, name, &["momentum_buffer"], t)?;
            if given[i].replace(t).is_some() {
                return Err(duplicate(op, name));
            }
        }
        let copies = given
            .into_iter()
            .zip(&self.set.params)
            .map(|(t, p)| t.map(|t| private_copy(op, t, p.dtype())).transpose())
            .collect::<Result<Vec<_>>>()?;
        self.momentum_buffers = copies;
        Ok(())
    }
}

/// Options of [`Adam`] (PyTorch's defaults; [`AdamOptions::adamw`] gives AdamW's).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamOptions {
    /// Learning rate (of every group that does not set its own).
    pub lr: f64,
    /// Decay rates of the first and second moment estimates.
    pub betas: (f64, f64),
    /// Added to the denominator for numerical stability.
    pub eps: f64,
    /// L2 penalty (Adam: added to the gradient; AdamW: decoupled, `p *= 1 - lr * wd`), of
    /// every group that does not set its own.
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

/// The moment estimates of one parameter.
#[derive(Debug)]
struct AdamState {
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    /// With AMSGrad only.
    max_exp_avg_sq: Option<Tensor>,
}

impl AdamState {
    fn tensors(&self) -> impl Iterator<Item = &Tensor> {
        [
            Some(&self.exp_avg),
            Some(&self.exp_avg_sq),
            self.max_exp_avg_sq.as_ref(),
        ]
        .into_iter()
        .flatten()
    }
}

/// The names of Adam's state entries, in PyTorch's order.
const ADAM_STATE: [&str; 3] = ["exp_avg", "exp_avg_sq", "max_exp_avg_sq"];

/// Adam and AdamW (PyTorch's `torch.optim.Adam` / `AdamW`), with AMSGrad optional.
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
///     opt.step(&grads)?;
/// }
/// let v = w.to_vec::<f32>()?;
/// assert!(v[0] < 1.0 && v[1] > -2.0); // both moved toward 0
/// assert_eq!(opt.step_count(0), Some(3));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Adam {
    set: ParamSet,
    opts: AdamOptions,
    /// Per parameter: steps taken (PyTorch's `state[p]['step']`).
    steps: Vec<u64>,
    /// Per parameter, created at its first step.
    state: Vec<Option<AdamState>>,
    spares: Spares,
}

impl Adam {
    /// An optimizer over `params` (one group with `opts.lr` and `opts.weight_decay`): tensors
    /// or named tensors, each a tracked leaf updated in place (see the [module](self) doc).
    pub fn new(params: impl IntoParams, opts: AdamOptions) -> Result<Adam> {
        let op = "adam";
        check_hyper(op, "lr", opts.lr, 0.0, f64::MAX)?;
        check_hyper(op, "eps", opts.eps, 0.0, f64::MAX)?;
        check_hyper(op, "betas.0", opts.betas.0, 0.0, 1.0 - f64::EPSILON)?;
        check_hyper(op, "betas.1", opts.betas.1, 0.0, 1.0 - f64::EPSILON)?;
        check_hyper(op, "weight_decay", opts.weight_decay, 0.0, f64::MAX)?;
        let mut opt = Adam {
            set: ParamSet::default(),
            opts,
            steps: Vec::new(),
            state: Vec::new(),
            spares: Spares::default(),
        };
        opt.add_param_group(ParamGroup::new(params))?;
        Ok(opt)
    }

    /// AdamW: [`Adam`] with decoupled weight decay (`opts.decoupled_weight_decay` is set).
    /// The decay itself is `opts.weight_decay`: start from [`AdamOptions::adamw`] (PyTorch's
    /// `AdamW` default 0.01, as in `AdamOptions { lr, ..AdamOptions::adamw() }`), since
    /// `AdamOptions::default()` is Adam's, with no decay.
    pub fn adamw(params: impl IntoParams, opts: AdamOptions) -> Result<Adam> {
        Adam::new(
            params,
            AdamOptions {
                decoupled_weight_decay: true,
                ..opts
            },
        )
    }

    /// Adds a group of parameters with its own learning rate and weight decay (PyTorch's
    /// `add_param_group`); unset ones come from the options. Checked as in [`Adam::new`], also
    /// against the parameters already present; nothing is added when a check fails.
    pub fn add_param_group(&mut self, group: ParamGroup) -> Result<()> {
        let defaults = GroupOpts {
            lr: self.opts.lr,
            weight_decay: self.opts.weight_decay,
        };
        self.set.add_group("adam", group, defaults)?;
        let n = self.set.params.len();
        self.steps.resize(n, 0);
        self.state.resize_with(n, || None);
        Ok(())
    }

    /// One step from autograd's gradients: each parameter's gradient is looked up by identity
    /// (`grads.get(param)`), a parameter without one is skipped (its step count unchanged), and
    /// each one with a gradient is updated in place by one dispatch. Atomic: a refused step
    /// changes nothing, step counts included.
    pub fn step(&mut self, grads: &Grads) -> Result<()> {
        let g = self.set.gather(grads);
        self.step_with(&g)
    }

    /// One step from gradients given by position: one entry per parameter, in the order of
    /// [`Adam::params`], `None` skipping a parameter. Checked as [`Adam::step`] is.
    pub fn step_with(&mut self, grads: &[Option<&Tensor>]) -> Result<()> {
        let op = "adam";
        let state: Vec<&Tensor> = self
            .state
            .iter()
            .flatten()
            .flat_map(|s| s.tensors())
            .collect();
        self.set.check_grads(op, grads, &state)?;
        warm_all(op, OPT_ADAM, &self.set, grads)?;
        let o = self.opts;
        // Everything that allocates, and the new step counts, into locals.
        let mut jobs = Vec::new();
        for (i, g) in grads.iter().enumerate() {
            let Some(g) = g else { continue };
            let p = &self.set.params[i];
            let group = self.set.groups[self.set.group_of[i]];
            self.spares.ensure(op, p.device())?;
            let new_state = match self.state[i] {
                Some(_) => None,
                None => {
                    let z = || Tensor::zeros(p.device(), p.shape(), p.dtype);
                    Some(AdamState {
                        exp_avg: z()?,
                        exp_avg_sq: z()?,
                        max_exp_avg_sq: if o.amsgrad { Some(z()?) } else { None },
                    })
                }
            };
            let step = self.steps[i].saturating_add(1);
            let t = step.min(i32::MAX as u64) as i32;
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
                lr: group.lr as f32,
                weight_decay: group.weight_decay as f32,
                c0: o.betas.0 as f32,
                c1: o.betas.1 as f32,
                one_minus_c0: (1.0 - o.betas.0) as f32,
                one_minus_c1: (1.0 - o.betas.1) as f32,
                decay: (1.0 - group.lr * group.weight_decay) as f32,
                eps: o.eps as f32,
                step_size: (group.lr / bc1) as f32,
                bc2_sqrt: bc2.sqrt() as f32,
                ..Default::default()
            };
            jobs.push((i, packed(g)?, new_state, step, params));
        }
        for (i, g, new_state, step, params) in jobs {
            let p = &self.set.params[i];
            let Some(s) = new_state.as_ref().or(self.state[i].as_ref()) else {
                return Err(Error::arg(op, "internal: no state for a stepped parameter"));
            };
            let states = [
                Some(&s.exp_avg),
                Some(&s.exp_avg_sq),
                s.max_exp_avg_sq.as_ref().filter(|_| o.amsgrad),
            ];
            launch(op, OPT_ADAM, p, &g, states, &self.spares, params)?;
            if new_state.is_some() {
                self.state[i] = new_state;
            }
            self.steps[i] = step;
        }
        Ok(())
    }

    /// Steps taken by parameter `i` (PyTorch's `state[p]['step']`); `None` past the last
    /// parameter.
    pub fn step_count(&self, i: usize) -> Option<u64> {
        self.steps.get(i).copied()
    }

    /// The step counts of every parameter, in order (for [`Adam::load_state_tensors`]).
    pub fn step_counts(&self) -> &[u64] {
        &self.steps
    }

    /// The state as PyTorch's `state_dict()['state']` holds it, keyed `{parameter name}.exp_avg`,
    /// `{parameter name}.exp_avg_sq` and, with AMSGrad, `{parameter name}.max_exp_avg_sq`
    /// (`0.exp_avg` for unnamed parameters); the step counts are [`Adam::step_counts`]. The
    /// tensors are the optimizer's own, which each step updates in place: copy them to keep a
    /// snapshot.
    pub fn state_tensors(&self) -> Vec<(String, Tensor)> {
        let mut v = Vec::new();
        for (i, s) in self.state.iter().enumerate() {
            let Some(s) = s else { continue };
            let name = &self.set.names[i];
            v.push((format!("{name}.exp_avg"), s.exp_avg.clone()));
            v.push((format!("{name}.exp_avg_sq"), s.exp_avg_sq.clone()));
            if let Some(m) = s.max_exp_avg_sq.as_ref().filter(|_| self.opts.amsgrad) {
                v.push((format!("{name}.max_exp_avg_sq"), m.clone()));
            }
        }
        v
    }

    /// Replaces the state with `state` (as [`Adam::state_tensors`] names it) and the step
    /// counts with `steps` (one per parameter). A parameter with an entry needs all of its
    /// entries (`exp_avg`, `exp_avg_sq`, and `max_exp_avg_sq` exactly when AMSGrad is on); one
    /// without starts again from zero moments at step 0 (its count must be 0), as in PyTorch's
    /// `load_state_dict`, where the step is part of a parameter's state. Every entry
    /// is checked (name, device, shape, a float dtype, none given twice) before anything
    /// changes; the optimizer keeps copies in the parameter's dtype (PyTorch casts loaded state
    /// so), never the given tensors.
    pub fn load_state_tensors(&mut self, state: &[(String, Tensor)], steps: &[u64]) -> Result<()> {
        let op = "adam";
        let n = self.set.params.len();
        if steps.len() != n {
            return Err(Error::arg(
                op,
                format!("{} step counts for {n} parameters", steps.len()),
            ));
        }
        let amsgrad = self.opts.amsgrad;
        let known: &[&str] = if amsgrad {
            &ADAM_STATE
        } else {
            &ADAM_STATE[..2]
        };
        let mut given: Vec<[Option<&Tensor>; 3]> = vec![[None; 3]; n];
        for (name, t) in state {
            let (i, what) = self.set.parse_state_name(op, name, known, t)?;
            let slot = ADAM_STATE.iter().position(|k| *k == what).unwrap_or(2);
            if given[i][slot].replace(t).is_some() {
                return Err(duplicate(op, name));
            }
        }
        for (i, g) in given.iter().enumerate() {
            let missing: Vec<&str> = known
                .iter()
                .zip(g)
                .filter(|(_, t)| t.is_none())
                .map(|(k, _)| *k)
                .collect();
            if g.iter().all(Option::is_none) && steps[i] != 0 {
                // PyTorch keeps the step inside a parameter's state: one without state is at
                // step 0, and zero moments with a later step would skew the bias corrections.
                return Err(Error::arg(
                    op,
                    format!(
                        "{} has step count {} but no state (a parameter without state starts \
                         at step 0)",
                        self.set.label(i),
                        steps[i]
                    ),
                ));
            }
            if g.iter().any(Option::is_some) && !missing.is_empty() {
                return Err(Error::arg(
                    op,
                    format!(
                        "the state of {} lacks {}",
                        self.set.label(i),
                        missing
                            .iter()
                            .map(|k| format!("{:?}", format!("{}.{k}", self.set.names[i])))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
        }
        let mut new_state = Vec::with_capacity(n);
        for ([m, v, vmax], p) in given.into_iter().zip(&self.set.params) {
            let dt = p.dtype();
            new_state.push(match (m, v) {
                (Some(m), Some(v)) => Some(AdamState {
                    exp_avg: private_copy(op, m, dt)?,
                    exp_avg_sq: private_copy(op, v, dt)?,
                    max_exp_avg_sq: vmax.map(|t| private_copy(op, t, dt)).transpose()?,
                }),
                _ => None,
            });
        }
        self.state = new_state;
        self.steps = steps.to_vec();
        Ok(())
    }
}
