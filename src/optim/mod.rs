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
//! storage. The constructors refuse an empty list (PyTorch's "optimizer got an empty parameter
//! list"), the output of a tracked op (PyTorch's "can't optimize a non-leaf Tensor": backward
//! never gives it a gradient), an `I32` tensor and the same tensor (or two views of one
//! storage) given twice. A frozen leaf (`set_requires_grad(false)`, as when fine-tuning part
//! of a model) is accepted and skipped while it gets no gradient; unfrozen, it trains again.
//! A tensor that never required grad is accepted too, as PyTorch's optimizers take it: `step`
//! never finds a gradient for it (so it stays as it is), `step_with` updates it with the
//! gradients given. Unlike PyTorch's `requires_grad_()`, calling
//! [`set_requires_grad(true)`](Tensor::set_requires_grad) on another handle of it later makes
//! that handle a new leaf the optimizer's handle does not share: to train a tensor with
//! `step`, make it require grad before building the optimizer. Given with names
//! (`Vec<(String, Tensor)>`, as [`Module::named_parameters`](crate::nn::Module::named_parameters)
//! returns them), the names key the saved state; plain tensors are named by their index. State
//! keyed by index loads into a named optimizer too, by position (PyTorch pairs saved state
//! with parameters by position); state keyed by names loads only where those names are.
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
//! zero. To accumulate over several micro-batches, fold each pass into the first with
//! [`Grads::accumulate`](crate::Grads::accumulate) and step once with the sum.
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
    check_grid, launch, packed, private_copy, warm, OptimParams, Spares, FLAG_FIRST, FLAG_MAXIMIZE,
    FLAG_MOMENTUM, FLAG_NESTEROV, OPT_SGD,
};
#[doc(hidden)]
pub use kernel::{optim_variants, params_layout};
use params::{check_hyper, first_group, GroupOpts, ParamSet};
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

        /// The groups' learning rates, for [`LrScheduler`](crate::optim::LrScheduler).
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

// After the macro, which its optimizer expands inside the module (its fields are private).
mod adam;
pub use adam::{Adam, AdamOptions};

/// Options of [`Sgd`], PyTorch's defaults (`lr` 1e-3, which older PyTorch required).
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
/// f32 parameters follow PyTorch's single-tensor arithmetic. f16 parameters (and their
/// momentum buffers, kept in f16) follow its `fused=True` step: `g + weight_decay * w` and the
/// momentum update are computed in f32 and rounded once when stored, where its default step
/// rounds each to f16 first (so `1 + 2^-11` is 1 there: an f16 weight 1 with gradient 1, lr 1
/// and weight_decay 2^-11 ends at 0 there, at -2^-11 here).
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
    /// or named tensors, each a leaf (tracked, frozen or plain) updated in place (see the
    /// [module](self) doc).
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
        opt.add_param_group(first_group(op, params)?)?;
        Ok(opt)
    }

    /// Adds a group of parameters with its own learning rate and weight decay (PyTorch's
    /// `add_param_group`); unset ones come from the options. Checked as in [`Sgd::new`] (a
    /// group's own `lr` and `weight_decay` need only be finite, as PyTorch checks only the
    /// defaults), also against the parameters already present; nothing is added when a check
    /// fails.
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
            // The scalars PyTorch's step converts with a check (add's alpha): a finite value
            // past f32 is its overflow error, before any parameter changes.
            let fits = |v: f64| crate::error::check_fill(op, v, DType::F32);
            fits(-group.lr)?;
            if group.weight_decay != 0.0 {
                fits(group.weight_decay)?;
            }
            if o.momentum != 0.0 && self.momentum_buffers[i].is_some() {
                fits(1.0 - o.dampening)?;
            }
            if o.nesterov {
                fits(o.momentum)?;
            }
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
    /// `{parameter name}.momentum_buffer` (`0.momentum_buffer` for unnamed parameters,
    /// `weight[3].momentum_buffer` for parameter 3 whose name an earlier parameter has too). The
    /// tensors are the optimizer's own, which each step updates in place: copy them to keep a
    /// snapshot.
    pub fn state_tensors(&self) -> Vec<(String, Tensor)> {
        self.momentum_buffers
            .iter()
            .enumerate()
            .filter_map(|(i, b)| {
                b.clone()
                    .map(|t| (format!("{}.momentum_buffer", self.set.state_key(i)), t))
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
