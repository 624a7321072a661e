//! Adam and AdamW (PyTorch's `torch.optim.Adam` / `AdamW`): options, the per-parameter
//! moments and step counts, the fused step, and the state's save and load.

use super::kernel::{
    launch, packed, private_copy, OptimParams, Spares, FLAG_AMSGRAD, FLAG_DECOUPLED, FLAG_MAXIMIZE,
    OPT_ADAM,
};
use super::params::{check_hyper, first_group, GroupOpts, ParamSet};
use super::{duplicate, warm_all, IntoParams, LrGroups, ParamGroup};
use crate::{DType, Error, Grads, Result, Tensor};

group_accessors!(Adam, "adam");

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
/// f32 parameters follow PyTorch's single-tensor arithmetic. f16 parameters (and their
/// moments, kept in f16 as PyTorch keeps them) follow its `fused=True` step: the moments are
/// updated and used in f32 and rounded once when stored. PyTorch's default foreach step
/// rounds each moment to f16 before using it, so a tiny gradient's `v` becomes 0 there and its
/// step `m / (sqrt(0) + eps)` huge (eps 1e-8 is 0 in f16); here that step stays finite.
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
    /// or named tensors, each a leaf (tracked, frozen or plain) updated in place (see the
    /// [module](super) doc).
    pub fn new(params: impl IntoParams, opts: AdamOptions) -> Result<Adam> {
        let op = "adam";
        check_hyper(op, "lr", opts.lr, 0.0, f64::MAX)?;
        check_hyper(op, "eps", opts.eps, 0.0, f64::MAX)?;
        // PyTorch's 0 <= beta < 1: the largest f64 below 1 is 1 - 2^-53.
        check_hyper(op, "betas.0", opts.betas.0, 0.0, 1.0 - f64::EPSILON / 2.0)?;
        check_hyper(op, "betas.1", opts.betas.1, 0.0, 1.0 - f64::EPSILON / 2.0)?;
        check_hyper(op, "weight_decay", opts.weight_decay, 0.0, f64::MAX)?;
        let mut opt = Adam {
            set: ParamSet::default(),
            opts,
            steps: Vec::new(),
            state: Vec::new(),
            spares: Spares::default(),
        };
        opt.add_param_group(first_group(op, params)?)?;
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
    /// `add_param_group`); unset ones come from the options. Checked as in [`Adam::new`] (a
    /// group's own `lr` and `weight_decay` need only be finite, as PyTorch checks only the
    /// defaults), also against the parameters already present; nothing is added when a check
    /// fails.
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
            // The scalars PyTorch's step converts with a check (addcdiv's value, add's alpha):
            // a finite value past f32 is its overflow error, before any parameter changes.
            let fits = |v: f64| crate::error::check_fill(op, v, DType::F32);
            fits(-group.lr / bc1)?;
            if !o.decoupled_weight_decay && group.weight_decay != 0.0 {
                fits(group.weight_decay)?;
            }
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
            if o.decoupled_weight_decay && self.set.groups[self.set.group_of[i]].weight_decay != 0.0
            {
                // PyTorch's AdamW writes the parameter twice (its decay's mul_, then the
                // addcdiv_): its version counts both.
                p.bump_version();
            }
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
    /// (`0.exp_avg` for unnamed parameters, `weight[3].exp_avg` for parameter 3 whose name
    /// an earlier parameter has too); the step counts are [`Adam::step_counts`]. The
    /// tensors are the optimizer's own, which each step updates in place: copy them to keep a
    /// snapshot.
    pub fn state_tensors(&self) -> Vec<(String, Tensor)> {
        let mut v = Vec::new();
        for (i, s) in self.state.iter().enumerate() {
            let Some(s) = s else { continue };
            let name = self.set.state_key(i);
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
                            .map(|k| format!("{:?}", format!("{}.{k}", self.set.state_key(i))))
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
