//! The parameters of an optimizer: names, groups with their own learning rate and weight decay,
//! the checks made when they are added, and the checks of a step's gradients (all made before
//! the optimizer changes anything).

use std::collections::{HashMap, HashSet};

use crate::autograd::Grads;
use crate::error::py_float;
use crate::runtime::Storage;
use crate::{DType, Device, Error, Result, Tensor};

/// What an optimizer can be built over: plain tensors (named by their index, `"0"`, `"1"`,
/// ..., as PyTorch's `state_dict` numbers them) or named tensors, as
/// [`Module::named_parameters`](crate::nn::Module::named_parameters) returns them (the names
/// then name the optimizer's state, see `state_tensors`).
///
/// An optimizer's groups are all named or all unnamed (PyTorch's rule: "all optimizer param
/// groups should be with/without names"). A name may be given twice, as two groups built from
/// sibling modules' `named_parameters` give `weight` twice (PyTorch keys its state by index):
/// the state entries of a later parameter with an earlier one's name carry `{name}[{index}]`.
///
/// Every parameter must be a leaf (one that requires grad, [`Tensor::requires_grad`], a frozen
/// one, or a plain tensor, as PyTorch's optimizers accept: the last two get no gradient and
/// are skipped), of a floating-point dtype, contiguous from the start of its storage, and no
/// two may share storage.
pub trait IntoParams {
    /// The parameters in order, each with its name when it has one.
    fn into_params(self) -> Vec<(Option<String>, Tensor)>;
}

impl IntoParams for Vec<Tensor> {
    fn into_params(self) -> Vec<(Option<String>, Tensor)> {
        self.into_iter().map(|t| (None, t)).collect()
    }
}

impl IntoParams for &[Tensor] {
    fn into_params(self) -> Vec<(Option<String>, Tensor)> {
        self.iter().map(|t| (None, t.clone())).collect()
    }
}

impl<const N: usize> IntoParams for [Tensor; N] {
    fn into_params(self) -> Vec<(Option<String>, Tensor)> {
        self.into_iter().map(|t| (None, t)).collect()
    }
}

impl IntoParams for Vec<(String, Tensor)> {
    fn into_params(self) -> Vec<(Option<String>, Tensor)> {
        self.into_iter().map(|(n, t)| (Some(n), t)).collect()
    }
}

impl IntoParams for &[(String, Tensor)] {
    fn into_params(self) -> Vec<(Option<String>, Tensor)> {
        self.iter()
            .map(|(n, t)| (Some(n.clone()), t.clone()))
            .collect()
    }
}

/// A group of parameters with its own learning rate and weight decay (PyTorch's parameter
/// groups, `optimizer.add_param_group({'params': ..., 'lr': ...})`); what a group leaves unset
/// comes from the optimizer's options.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::optim::{ParamGroup, Sgd, SgdOptions};
/// use wgtensor::{Device, Tensor};
/// let dev = Device::new()?;
/// let body = Tensor::from_slice(&dev, &[1.0f32, 2.0], &[2])?.requires_grad()?;
/// let head = Tensor::from_slice(&dev, &[1.0f32, 2.0], &[2])?.requires_grad()?;
/// let mut opt = Sgd::new(vec![("body".to_string(), body.clone())], SgdOptions { lr: 0.1, ..Default::default() })?;
/// opt.add_param_group(ParamGroup::new(vec![("head".to_string(), head.clone())]).lr(1.0))?;
/// let grads = body.add(&head)?.sum_all()?.backward()?; // both gradients are [1, 1]
/// opt.step(&grads)?;
/// assert_eq!(body.to_vec::<f32>()?, vec![0.9, 1.9]);
/// assert_eq!(head.to_vec::<f32>()?, vec![0.0, 1.0]);
/// assert_eq!((opt.group_lr(0), opt.group_lr(1)), (Some(0.1), Some(1.0)));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ParamGroup {
    pub(crate) params: Vec<(Option<String>, Tensor)>,
    pub(crate) lr: Option<f64>,
    pub(crate) weight_decay: Option<f64>,
}

/// The group of an optimizer's constructor: PyTorch's "optimizer got an empty parameter list"
/// when it holds none (a group added later may be empty, as in PyTorch, if the optimizer's
/// parameters are unnamed: an empty group has no names).
pub(crate) fn first_group(op: &'static str, params: impl IntoParams) -> Result<ParamGroup> {
    let group = ParamGroup::new(params);
    if group.params.is_empty() {
        return Err(Error::arg(op, "optimizer got an empty parameter list"));
    }
    Ok(group)
}

impl ParamGroup {
    /// A group over `params` with the optimizer's learning rate and weight decay.
    pub fn new(params: impl IntoParams) -> ParamGroup {
        ParamGroup {
            params: params.into_params(),
            lr: None,
            weight_decay: None,
        }
    }

    /// This group's learning rate.
    pub fn lr(mut self, lr: f64) -> ParamGroup {
        self.lr = Some(lr);
        self
    }

    /// This group's weight decay (L2 penalty for SGD and Adam, decoupled for AdamW).
    pub fn weight_decay(mut self, weight_decay: f64) -> ParamGroup {
        self.weight_decay = Some(weight_decay);
        self
    }
}

pub(crate) fn check_hyper(op: &'static str, what: &str, v: f64, lo: f64, hi: f64) -> Result<()> {
    if !(v.is_finite() && v >= lo && v <= hi) {
        // PyTorch's "Invalid learning rate: -0.1", with the range (f64's extremes spelled as
        // unbounded, not as 309 digits).
        let range = match (lo == f64::MIN, hi == f64::MAX) {
            (true, true) => "finite".to_string(),
            (false, true) => format!("finite and >= {lo}"),
            (true, false) => format!("finite and <= {hi}"),
            (false, false) if hi < 1.0 && hi > 1.0 - 1e-15 => format!("in [{lo}, 1)"),
            (false, false) => format!("in [{lo}, {hi}]"),
        };
        let name = match what {
            "lr" => "Invalid learning rate".to_string(),
            "momentum" => "Invalid momentum value".to_string(),
            "weight_decay" => "Invalid weight_decay value".to_string(),
            "eps" => "Invalid epsilon value".to_string(),
            "betas.0" => "Invalid beta parameter at index 0".to_string(),
            "betas.1" => "Invalid beta parameter at index 1".to_string(),
            other => format!("invalid {other}"),
        };
        return Err(Error::arg(
            op,
            format!("{name}: {} (it must be {range})", py_float(v)),
        ));
    }
    Ok(())
}

/// The hyperparameters a group may set for itself.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct GroupOpts {
    pub(crate) lr: f64,
    pub(crate) weight_decay: f64,
}

fn storage_key(t: &Tensor) -> *const Storage {
    std::sync::Arc::as_ptr(&t.storage)
}

/// The parameters of one optimizer, all groups together in the order they were added.
#[derive(Debug, Default)]
pub(crate) struct ParamSet {
    pub(crate) params: Vec<Tensor>,
    /// The given name, or the parameter's index for an unnamed one.
    pub(crate) names: Vec<String>,
    /// Whether the name was given (error messages quote it).
    named: Vec<bool>,
    /// The group of each parameter.
    pub(crate) group_of: Vec<usize>,
    pub(crate) groups: Vec<GroupOpts>,
    /// Each group's `initial_lr` (PyTorch's param-group entry that the first scheduler sets
    /// and later ones share as their base): `None` until a scheduler is made.
    pub(crate) initial_lrs: Vec<Option<f64>>,
    /// The name each parameter's state entries carry (`state_tensors`): its name, or
    /// `{name}[{index}]` where an earlier parameter has it (`next_key`).
    keys: Vec<String>,
    by_key: HashMap<String, usize>,
}

/// The state key of parameter `i` named `name`, given the keys of the parameters before it:
/// the name itself when no earlier key is, else `{name}[{i}]` (again suffixed while taken).
/// PyTorch keys its state by index, so it accepts a name given twice, as two groups of
/// sibling modules' `named_parameters` give `weight` twice; a key depends only on the
/// parameters before it, so adding a group never renames existing state.
fn next_key(by_key: &HashMap<String, usize>, name: &str, i: usize) -> String {
    let mut key = name.to_string();
    while by_key.contains_key(&key) {
        key = format!("{key}[{i}]");
    }
    key
}

impl ParamSet {
    /// The name parameter `i`'s state entries carry.
    pub(crate) fn state_key(&self, i: usize) -> &str {
        &self.keys[i]
    }

    /// `parameter 3` or `parameter 3 ("fc.weight")`, for error messages.
    pub(crate) fn label(&self, i: usize) -> String {
        if self.named[i] {
            format!("parameter {i} ({:?})", self.names[i])
        } else {
            format!("parameter {i}")
        }
    }

    /// Checks every parameter of `group` (dtype, leaf, layout, binding size, storage
    /// shared with another parameter, names), then appends the group; nothing is added when
    /// any check fails.
    pub(crate) fn add_group(
        &mut self,
        op: &'static str,
        group: ParamGroup,
        defaults: GroupOpts,
    ) -> Result<()> {
        let opts = GroupOpts {
            lr: group.lr.unwrap_or(defaults.lr),
            weight_decay: group.weight_decay.unwrap_or(defaults.weight_decay),
        };
        // A group's own values need only be finite: PyTorch checks the constructor's defaults
        // (there, before this), not a group's (`add_param_group({"lr": -0.1})` steps).
        check_hyper(op, "lr", opts.lr, f64::MIN, f64::MAX)?;
        check_hyper(op, "weight_decay", opts.weight_decay, f64::MIN, f64::MAX)?;
        // PyTorch's rule: every parameter named or none, in every group (an empty group has
        // no names, as there).
        let named = group.params.iter().filter(|(n, _)| n.is_some()).count();
        if named != 0 && named != group.params.len() {
            return Err(Error::arg(
                op,
                format!(
                    "all optimizer params should be with/without names. Some param names are \
                     missing ({named} of {} named)",
                    group.params.len()
                ),
            ));
        }
        if let Some(&first) = self.named.first() {
            if first != (named != 0) {
                let with = if named != 0 { "with" } else { "without" };
                return Err(Error::arg(
                    op,
                    format!(
                        "all optimizer param groups should be with/without names. cannot add \
                         param group {with} names to the optimizer"
                    ),
                ));
            }
        }
        let mut storages: HashMap<*const Storage, String> = self
            .params
            .iter()
            .enumerate()
            .map(|(i, p)| (storage_key(p), self.label(i)))
            .collect();
        let base = self.params.len();
        let mut new_names = Vec::with_capacity(group.params.len());
        for (k, (name, t)) in group.params.iter().enumerate() {
            let i = base + k;
            let label = match name {
                Some(n) => format!("parameter {i} ({n:?})"),
                None => format!("parameter {i}"),
            };
            check_param(op, &label, t)?;
            if let Some(other) = storages.insert(storage_key(t), label.clone()) {
                // PyTorch's wording when the other is in an earlier group.
                let across = if self.params.iter().any(|p| storage_key(p) == storage_key(t)) {
                    "some parameters appear in more than one parameter group: "
                } else {
                    ""
                };
                return Err(Error::arg(
                    op,
                    format!(
                        "{across}{label} shares its storage with {other} (the same tensor given \
                         twice?): each parameter must have storage of its own"
                    ),
                ));
            }
            new_names.push(name.clone().unwrap_or_else(|| i.to_string()));
        }
        for (k, name) in new_names.iter().enumerate() {
            let key = next_key(&self.by_key, name, base + k);
            self.by_key.insert(key.clone(), base + k);
            self.keys.push(key);
        }
        let g = self.groups.len();
        self.groups.push(opts);
        self.initial_lrs.push(None);
        for ((name, t), n) in group.params.into_iter().zip(new_names) {
            self.named.push(name.is_some());
            self.names.push(n);
            self.params.push(t);
            self.group_of.push(g);
        }
        Ok(())
    }

    /// The gradient of each parameter in `grads`, found by identity (`None`: the loss did not
    /// reach it).
    pub(crate) fn gather<'a>(&self, grads: &'a Grads) -> Vec<Option<&'a Tensor>> {
        self.params.iter().map(|p| grads.get(p)).collect()
    }

    /// Checks a step's gradients before anything changes: one per parameter, each on its
    /// parameter's device with its dtype and shape, none sharing storage with a parameter or
    /// with the optimizer's `state`, bindable as a whole, and every device involved healthy.
    pub(crate) fn check_grads(
        &self,
        op: &'static str,
        grads: &[Option<&Tensor>],
        state: &[&Tensor],
    ) -> Result<()> {
        if grads.len() != self.params.len() {
            return Err(Error::arg(
                op,
                format!(
                    "{} gradients for {} parameters (pass None for a parameter without one, or \
                     step with autograd's Grads to match them by identity)",
                    grads.len(),
                    self.params.len()
                ),
            ));
        }
        let params: HashMap<*const Storage, usize> = self
            .params
            .iter()
            .enumerate()
            .map(|(i, p)| (storage_key(p), i))
            .collect();
        let states: HashSet<*const Storage> = state.iter().map(|t| storage_key(t)).collect();
        let mut devices: Vec<&Device> = Vec::new();
        for (i, (p, g)) in self.params.iter().zip(grads).enumerate() {
            let Some(g) = g else { continue };
            p.same_device(op, g)?;
            if g.dtype() != p.dtype() {
                return Err(Error::DType {
                    op,
                    expected: p.dtype(),
                    got: g.dtype(),
                });
            }
            if g.shape() != p.shape() {
                return Err(Error::shape(
                    op,
                    format!(
                        "the gradient of {} has shape {:?}, the parameter {:?}",
                        self.label(i),
                        g.shape(),
                        p.shape()
                    ),
                ));
            }
            match params.get(&storage_key(g)) {
                Some(&j) if j == i => {
                    return Err(Error::arg(
                        op,
                        format!(
                            "the gradient of {} is the parameter itself (shares its storage): a \
                             tensor cannot be its own gradient",
                            self.label(i)
                        ),
                    ))
                }
                Some(&j) => {
                    return Err(Error::arg(
                        op,
                        format!(
                            "the gradient of {} shares storage with {}, which the step updates \
                             in place",
                            self.label(i),
                            self.label(j)
                        ),
                    ))
                }
                None => {}
            }
            if states.contains(&storage_key(g)) {
                return Err(Error::arg(
                    op,
                    format!(
                        "the gradient of {} shares storage with the optimizer's state, which \
                         the step updates in place",
                        self.label(i)
                    ),
                ));
            }
            // Bound whole when already packed; a packed copy is the parameter's size.
            if g.is_contiguous() && g.layout().offset() == 0 {
                check_binding(op, &format!("the gradient of {}", self.label(i)), g)?;
            }
            if !devices.iter().any(|d| d.same(g.device())) {
                devices.push(g.device());
            }
        }
        for d in devices {
            d.check(op)?;
        }
        Ok(())
    }

    /// The index of the parameter a state entry `{name}.{what}` belongs to and its `what`,
    /// with `t` checked against that parameter (device, dtype, shape).
    pub(crate) fn parse_state_name<'a>(
        &self,
        op: &'static str,
        entry: &'a str,
        known: &[&str],
        t: &Tensor,
    ) -> Result<(usize, &'a str)> {
        let bad = || {
            Error::arg(
                op,
                format!(
                    "unexpected state entry {entry:?} (expected {{parameter name}}.{{{}}}, a name \
                     an earlier parameter has too as {{name}}[{{index}}])",
                    known.join("|")
                ),
            )
        };
        let (name, what) = entry.rsplit_once('.').ok_or_else(bad)?;
        // A name no parameter has may be a position (`3`, as an optimizer of plain tensors
        // keys its state): PyTorch pairs saved state with parameters by position.
        let by_position = || {
            name.parse::<usize>()
                .ok()
                .filter(|i| *i < self.params.len() && i.to_string() == name)
        };
        let i = match self.by_key.get(name) {
            Some(&i) => i,
            None => by_position().ok_or_else(bad)?,
        };
        if !known.contains(&what) {
            return Err(bad());
        }
        let p = &self.params[i];
        p.same_device(op, t)?;
        if t.dtype() == DType::I32 {
            return Err(Error::arg(
                op,
                format!("state {entry:?} is an i32 tensor: optimizer state is floating point"),
            ));
        }
        // Another float dtype is cast to the parameter's, as PyTorch's load_state_dict does.
        if t.shape() != p.shape() {
            return Err(Error::shape(
                op,
                format!(
                    "state {entry:?} has shape {:?} ({:?}), {} has {:?} ({:?})",
                    t.shape(),
                    t.dtype(),
                    self.label(i),
                    p.shape(),
                    p.dtype()
                ),
            ));
        }
        Ok((i, what))
    }

    /// Learning rate of group `g`.
    pub(crate) fn group_lr(&self, g: usize) -> Option<f64> {
        self.groups.get(g).map(|o| o.lr)
    }

    /// Sets the learning rate of group `g`: any finite rate, as PyTorch's
    /// `param_group["lr"] = lr` (only the constructors' defaults must be >= 0; chained
    /// schedulers can step below zero).
    pub(crate) fn set_group_lr(&mut self, op: &'static str, g: usize, lr: f64) -> Result<()> {
        check_hyper(op, "lr", lr, f64::MIN, f64::MAX)?;
        let n = self.groups.len();
        let o = self.groups.get_mut(g).ok_or_else(|| {
            Error::arg(
                op,
                format!("no parameter group {g} (the optimizer has {n})"),
            )
        })?;
        o.lr = lr;
        Ok(())
    }

    /// Sets the learning rate of every group (any finite rate, as [`Self::set_group_lr`]).
    pub(crate) fn set_lr(&mut self, op: &'static str, lr: f64) -> Result<()> {
        check_hyper(op, "lr", lr, f64::MIN, f64::MAX)?;
        for o in &mut self.groups {
            o.lr = lr;
        }
        Ok(())
    }
}

/// The whole buffer of `t` is bound by the update kernel: it must fit one binding.
fn check_binding(op: &'static str, what: &str, t: &Tensor) -> Result<()> {
    let size = t.buffer().size();
    let limit = t.device().max_binding_bytes();
    if size > limit {
        return Err(Error::arg(
            op,
            format!(
                "{what} is bound whole by the update kernel: its {size} byte buffer exceeds the \
                 device's {limit} byte storage binding limit"
            ),
        ));
    }
    Ok(())
}

/// Checks that `t` can be a parameter: a floating-point leaf, contiguous from the start
/// of its storage (updated in place, element i at index i), bindable as a whole.
fn check_param(op: &'static str, label: &str, t: &Tensor) -> Result<()> {
    if !t.dtype().is_float() {
        return Err(Error::arg(
            op,
            format!(
                "{label} is {:?}: only floating-point tensors (F32, F16) can be optimized",
                t.dtype()
            ),
        ));
    }
    if !t.is_leaf() {
        return Err(Error::arg(
            op,
            format!(
                "can't optimize a non-leaf Tensor: {label} is the output of a tracked op, and \
                 backward never gives it a gradient (optimize the leaf it was computed from, or \
                 use .detach().requires_grad() for a new leaf)"
            ),
        ));
    }
    // A frozen leaf, or a tensor that never required grad, is accepted (PyTorch's optimizers
    // take parameters that do not require grad and skip them while they get none): a frozen
    // leaf unfrozen later gets its gradients under the same key; a plain tensor gets none from
    // `step`, but `step_with`'s hand-computed gradients update it.
    if !t.is_contiguous() || t.layout().offset() != 0 {
        return Err(Error::arg(
            op,
            format!(
                "{label} (shape {:?}, strides {:?}, offset {}) must be contiguous from the start \
                 of its storage to be updated in place",
                t.shape(),
                t.strides(),
                t.layout().offset()
            ),
        ));
    }
    if t.numel() > u32::MAX as usize {
        return Err(Error::size(
            op,
            format!("{label} has {} elements, more than 2^32 - 1", t.numel()),
        ));
    }
    if t.dtype() == DType::F16 {
        t.device().require_dtype(op, DType::F16)?;
    }
    check_binding(op, label, t)
}
