//! Learning-rate schedulers, PyTorch's `torch.optim.lr_scheduler` classes with their chained
//! forms (`get_lr`): each step multiplies a group's *current* rate by the epoch's factor, so
//! schedulers stack (each applied to the rate the previous one set) and a rate the caller sets
//! between steps carries on, as in PyTorch; `LambdaLR` and the cosine's restarts read the
//! groups' initial rates (`base_lrs`, PyTorch's `initial_lr`, which the first scheduler made
//! on an optimizer records and later ones share). A scheduler does not hold its optimizer (a
//! Rust borrow would forbid the optimizer's own steps in between): it is given the optimizer
//! at construction and at each step, as PyTorch's loop calls `optimizer.step()` then
//! `scheduler.step()`.

use crate::{Error, Result};

/// An optimizer whose groups' learning rates a scheduler sets ([`super::Sgd`],
/// [`super::Adam`]).
pub trait LrGroups {
    /// The number of parameter groups.
    fn lr_groups(&self) -> usize;
    /// The learning rate of group `g`.
    fn lr_of(&self, g: usize) -> Option<f64>;
    /// Sets the learning rate of group `g`: any finite rate, negative ones included (a
    /// schedule can pass below zero, as PyTorch's).
    fn set_lr_of(&mut self, g: usize, lr: f64) -> Result<()>;
    /// The initial rate of group `g` a scheduler recorded (PyTorch's `initial_lr` entry):
    /// `None` until one was made. The default keeps none.
    fn initial_lr_of(&self, _g: usize) -> Option<f64> {
        None
    }
    /// Records group `g`'s initial rate (the first scheduler made on the optimizer does). The
    /// default keeps none, so each scheduler takes the current rate as its base.
    fn set_initial_lr_of(&mut self, _g: usize, _lr: f64) {}
}

/// How the learning rate follows the epoch `e` (PyTorch's scheduler classes and their
/// arguments). The formulas below are the closed forms of one scheduler on an optimizer whose
/// rates nothing else changes, `base` a group's initial rate; [`LrScheduler`] applies them
/// chained, as PyTorch does, each step a factor of the current rate.
#[derive(Debug, Clone)]
pub enum Schedule {
    /// `StepLR(step_size, gamma)`: `base * gamma^(e / step_size)` (integer division).
    Step {
        /// Epochs between decays (at least 1).
        step_size: u64,
        /// The decay factor (PyTorch's default 0.1).
        gamma: f64,
    },
    /// `MultiStepLR(milestones, gamma)`: `base * gamma^(milestones reached by e)`; a milestone
    /// given twice counts twice, as in PyTorch.
    MultiStep {
        /// The epochs at which the rate decays.
        milestones: Vec<u64>,
        /// The decay factor (PyTorch's default 0.1).
        gamma: f64,
    },
    /// `ExponentialLR(gamma)`: `base * gamma^e`.
    Exponential {
        /// The decay factor per epoch.
        gamma: f64,
    },
    /// `CosineAnnealingLR(T_max, eta_min)`:
    /// `eta_min + (base - eta_min) (1 + cos(pi e / T_max)) / 2`.
    CosineAnnealing {
        /// Epochs of the half period (at least 1).
        t_max: u64,
        /// The lowest rate (PyTorch's default 0).
        eta_min: f64,
    },
    /// `LinearLR(start_factor, end_factor, total_iters)`: `base` times a factor going
    /// linearly from `start_factor` to `end_factor` over `total_iters` epochs, then held.
    Linear {
        /// The factor at epoch 0, in (0, 1] (PyTorch's default 1/3).
        start_factor: f64,
        /// The factor from `total_iters` on, in [0, 1] (PyTorch's default 1).
        end_factor: f64,
        /// Epochs of the ramp (PyTorch's default 5; 0 holds `start_factor`).
        total_iters: u64,
    },
    /// `LambdaLR(lr_lambda)`: `base * f(e)`.
    Lambda(fn(u64) -> f64),
}

impl Schedule {
    /// The rate at epoch `e` from the current rate `lr` and the initial one `base` (PyTorch's
    /// chained `get_lr`; at `e = 0` what its constructor's first step sets). `base` is `None`
    /// for a group added to the optimizer after the scheduler was made: the chained formulas
    /// scale its rate too, and those that read `base_lrs` (LambdaLR, CosineAnnealingLR's
    /// restart) give `None`, as PyTorch's strict zips (since 2.10) raise there: `_update_lr`'s
    /// for LambdaLR's shorter list, the restart's own `zip(base_lrs, param_groups)`.
    fn lr(&self, lr: f64, base: Option<f64>, e: u64) -> Option<f64> {
        Some(match self {
            Schedule::Step { step_size, gamma } => {
                if e == 0 || !e.is_multiple_of(*step_size) {
                    lr
                } else {
                    lr * gamma
                }
            }
            Schedule::MultiStep { milestones, gamma } => {
                let hits = milestones.iter().filter(|&&m| m == e).count();
                if hits == 0 {
                    lr
                } else {
                    // powf, as Python's `gamma ** count` (powi rounds differently from 3 on).
                    lr * gamma.powf(hits as f64)
                }
            }
            Schedule::Exponential { gamma } => {
                if e == 0 {
                    lr
                } else {
                    lr * gamma
                }
            }
            Schedule::CosineAnnealing { t_max, eta_min } => {
                let pi = std::f64::consts::PI;
                let t = *t_max as f64;
                if e == 0 {
                    lr
                } else if (i128::from(e) - 1 - i128::from(*t_max))
                    .rem_euclid(2 * i128::from(*t_max))
                    == 0
                {
                    // The restart after a minimum, from the initial rate (PyTorch's branch).
                    lr + (base? - eta_min) * (1.0 - (pi / t).cos()) / 2.0
                } else {
                    (1.0 + (pi * e as f64 / t).cos()) / (1.0 + (pi * (e - 1) as f64 / t).cos())
                        * (lr - eta_min)
                        + eta_min
                }
            }
            Schedule::Linear {
                start_factor,
                end_factor,
                total_iters,
            } => {
                if e == 0 {
                    lr * start_factor
                } else if e > *total_iters {
                    lr
                } else {
                    let d = end_factor - start_factor;
                    // PyTorch's chained form (with end_factor 0 its last step can round to a
                    // tiny negative rate, -1.9e-18 for start 1/3 over 4 steps, kept as there).
                    lr * (1.0 + d / (*total_iters as f64 * start_factor + (e - 1) as f64 * d))
                }
            }
            Schedule::Lambda(f) => base? * f(e),
        })
    }

    /// PyTorch's argument checks, and the refusals [`LrScheduler::new`] lists.
    fn check(&self) -> Result<()> {
        let op = "lr_scheduler";
        let finite = |name: &str, v: f64| {
            if v.is_finite() {
                Ok(())
            } else {
                Err(Error::arg(op, format!("{name} must be finite, got {v}")))
            }
        };
        match self {
            Schedule::Step { step_size, gamma } => {
                if *step_size == 0 {
                    return Err(Error::arg(op, "step_size must be at least 1, got 0"));
                }
                finite("gamma", *gamma)
            }
            Schedule::MultiStep { gamma, .. } | Schedule::Exponential { gamma } => {
                finite("gamma", *gamma)
            }
            Schedule::CosineAnnealing { t_max, eta_min } => {
                if *t_max == 0 {
                    return Err(Error::arg(op, "T_max must be at least 1, got 0"));
                }
                finite("eta_min", *eta_min)
            }
            Schedule::Linear {
                start_factor,
                end_factor,
                total_iters,
            } => {
                if !(*start_factor > 0.0 && *start_factor <= 1.0) {
                    return Err(Error::arg(
                        op,
                        format!(
                            "Starting multiplicative factor expected to be greater than 0 and \
                             less or equal to 1. (got {start_factor})"
                        ),
                    ));
                }
                if !(0.0..=1.0).contains(end_factor) {
                    return Err(Error::arg(
                        op,
                        format!(
                            "Ending multiplicative factor expected to be between 0 and 1. (got \
                             {end_factor})"
                        ),
                    ));
                }
                // total_iters 0 holds start_factor for good, as in PyTorch.
                let _ = total_iters;
                Ok(())
            }
            Schedule::Lambda(_) => Ok(()),
        }
    }
}

/// A learning-rate scheduler over an optimizer's groups (PyTorch's `LRScheduler`).
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::optim::{LrScheduler, Schedule, Sgd, SgdOptions};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let w = Tensor::zeros(&dev, &[3], DType::F32)?.requires_grad()?;
/// let mut opt = Sgd::new(vec![w], SgdOptions { lr: 0.1, ..Default::default() })?;
/// let mut sched = LrScheduler::new(&mut opt, Schedule::Step { step_size: 2, gamma: 0.5 })?;
/// for _epoch in 0..4 {
///     // ... opt.step(&grads)? for each batch ...
///     sched.step(&mut opt)?;
/// }
/// assert!((opt.lr() - 0.025).abs() < 1e-12); // 0.1 * 0.5^(4 / 2)
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct LrScheduler {
    schedule: Schedule,
    base: Vec<f64>,
    epoch: u64,
    last: Vec<f64>,
}

impl LrScheduler {
    /// Takes the groups' initial rates (recorded by an earlier scheduler on this optimizer,
    /// else their current rates, which it records) and sets epoch 0's rates (PyTorch's
    /// constructor: `LinearLR` starts at `start_factor` times the rate at once). Errors for
    /// arguments PyTorch refuses, and, at once, for some it accepts and fails on later or
    /// turns into NaN rates: a non-finite factor or `eta_min`, a `step_size` or `t_max` of 0 (a division
    /// by zero at PyTorch's first step).
    pub fn new(opt: &mut impl LrGroups, schedule: Schedule) -> Result<LrScheduler> {
        schedule.check()?;
        let mut base = Vec::with_capacity(opt.lr_groups());
        for g in 0..opt.lr_groups() {
            let b = match opt.initial_lr_of(g) {
                Some(b) => b,
                None => {
                    let b = opt.lr_of(g).unwrap_or(0.0);
                    opt.set_initial_lr_of(g, b);
                    b
                }
            };
            base.push(b);
        }
        let mut s = LrScheduler {
            schedule,
            base,
            epoch: 0,
            last: Vec::new(),
        };
        s.apply(opt, 0)?;
        Ok(s)
    }

    /// A scheduler that continues a run `epoch` epochs in (a checkpoint's): the optimizer's
    /// current rates are taken as that epoch's (restore them first, `set_group_lr`), nothing
    /// is set now, and the next [`step`](LrScheduler::step) sets epoch `epoch + 1`'s.
    /// `base_lrs` are the groups' initial rates the first run recorded
    /// ([`base_lrs`](LrScheduler::base_lrs)), one per group; they become the optimizer's
    /// recorded initial rates. PyTorch's recommended resume: build the scheduler, then
    /// `scheduler.load_state_dict(saved)` (its `last_epoch=` argument is not the same: the
    /// step it takes at construction re-applies a step or multi-step schedule's decay when
    /// `epoch` is a decay epoch).
    /// Errors for the arguments [`LrScheduler::new`] refuses, and for `base_lrs` of another
    /// length than the groups or not finite rates; nothing changes then.
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::optim::{LrScheduler, Schedule, Sgd, SgdOptions};
    /// use wgtensor::{DType, Device, Tensor};
    /// let dev = Device::new()?;
    /// let w = Tensor::zeros(&dev, &[3], DType::F32)?.requires_grad()?;
    /// let o = SgdOptions { lr: 0.1, ..Default::default() };
    /// let step = Schedule::Step { step_size: 2, gamma: 0.5 };
    /// let mut opt = Sgd::new(vec![w.clone()], o)?;
    /// let mut sched = LrScheduler::new(&mut opt, step.clone())?;
    /// for _ in 0..3 {
    ///     sched.step(&mut opt)?;
    /// }
    /// // Saved: the epoch, the rates and the base rates. Restored in a new run:
    /// let (epoch, lr, base) = (sched.epoch(), opt.lr(), sched.base_lrs().to_vec());
    /// let mut opt2 = Sgd::new(vec![w], o)?;
    /// opt2.set_lr(lr)?;
    /// let mut resumed = LrScheduler::resume(&mut opt2, step, epoch, &base)?;
    /// resumed.step(&mut opt2)?; // epoch 4: 0.1 * 0.5^2
    /// assert!((opt2.lr() - 0.025).abs() < 1e-12);
    /// # Ok(()) }
    /// ```
    pub fn resume(
        opt: &mut impl LrGroups,
        schedule: Schedule,
        epoch: u64,
        base_lrs: &[f64],
    ) -> Result<LrScheduler> {
        schedule.check()?;
        let op = "lr_scheduler";
        if base_lrs.len() != opt.lr_groups() {
            return Err(Error::arg(
                op,
                format!(
                    "resuming takes one initial rate per parameter group: {} for {} groups \
                     (PyTorch: param 'initial_lr' is not specified in param_groups when resuming)",
                    base_lrs.len(),
                    opt.lr_groups()
                ),
            ));
        }
        if let Some((g, b)) = base_lrs.iter().enumerate().find(|(_, b)| !b.is_finite()) {
            return Err(Error::arg(
                op,
                format!("initial rate {b} of group {g} is not a finite rate"),
            ));
        }
        let last: Vec<f64> = (0..opt.lr_groups())
            .map(|g| opt.lr_of(g).unwrap_or(0.0))
            .collect();
        for (g, &b) in base_lrs.iter().enumerate() {
            opt.set_initial_lr_of(g, b);
        }
        Ok(LrScheduler {
            schedule,
            base: base_lrs.to_vec(),
            epoch,
            last,
        })
    }

    /// Advances one epoch and sets every group's rate for it (PyTorch's `scheduler.step()`;
    /// groups added since the scheduler was made are scheduled from their current rates, as
    /// PyTorch's chained formulas do). Errors when the optimizer has fewer groups than at
    /// construction; when it has more and the epoch's formula reads the initial rates
    /// (LambdaLR's, the cosine restart), as PyTorch's strict zips raise since 2.10 ("zip()
    /// argument 2 is shorter than argument 1", "... longer ..." for the restart); or when a
    /// new rate is not finite (a rate grown past f64): then nothing changes, the epoch
    /// included. A negative rate is set, as PyTorch's (a lambda's negative factor; a cosine
    /// schedule with `eta_min` chained with a step decay can pass below zero).
    pub fn step(&mut self, opt: &mut impl LrGroups) -> Result<()> {
        self.check_groups(opt)?;
        let next = self.epoch.checked_add(1).ok_or_else(|| {
            Error::arg(
                "lr_scheduler",
                format!("epoch {} is the last one a scheduler counts", self.epoch),
            )
        })?;
        self.apply(opt, next)?;
        self.epoch = next;
        Ok(())
    }

    fn check_groups(&self, opt: &impl LrGroups) -> Result<()> {
        if opt.lr_groups() < self.base.len() {
            return Err(Error::arg(
                "lr_scheduler",
                format!(
                    "the optimizer has {} parameter groups, the scheduler was made for {}",
                    opt.lr_groups(),
                    self.base.len()
                ),
            ));
        }
        Ok(())
    }

    /// Sets epoch `e`'s rates, every one checked before the first is set.
    fn apply(&mut self, opt: &mut impl LrGroups, e: u64) -> Result<()> {
        let lrs = (0..opt.lr_groups())
            .map(|g| {
                let lr = opt.lr_of(g).unwrap_or(0.0);
                self.schedule.lr(lr, self.base.get(g).copied(), e)
            })
            .collect::<Option<Vec<f64>>>()
            .ok_or_else(|| {
                Error::arg(
                    "lr_scheduler",
                    format!(
                        // LambdaLR's short list fails _update_lr's zip (groups, values); the
                        // cosine restart's own zip (base_lrs, groups) fails first.
                        "zip() argument 2 is {} than argument 1 (epoch {e}: the optimizer \
                         has {} parameter groups, this schedule's formula reads the initial \
                         rates of the {} it was made for)",
                        if matches!(self.schedule, Schedule::Lambda(_)) {
                            "shorter"
                        } else {
                            "longer"
                        },
                        opt.lr_groups(),
                        self.base.len()
                    ),
                )
            })?;
        if let Some((g, lr)) = lrs.iter().enumerate().find(|(_, lr)| !lr.is_finite()) {
            return Err(Error::arg(
                "lr_scheduler",
                format!("epoch {e} gives group {g} the learning rate {lr}, not a finite rate"),
            ));
        }
        for (g, &lr) in lrs.iter().enumerate() {
            opt.set_lr_of(g, lr)?;
        }
        self.last = lrs;
        Ok(())
    }

    /// The rates the last step set, one per group (PyTorch's `get_last_lr()`).
    pub fn last_lr(&self) -> &[f64] {
        &self.last
    }

    /// The epochs stepped (PyTorch's `last_epoch`).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The groups' initial rates (PyTorch's `base_lrs`).
    pub fn base_lrs(&self) -> &[f64] {
        &self.base
    }
}
