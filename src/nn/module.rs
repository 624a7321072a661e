//! The [`Module`] trait: one required pair of visitor methods that every layer implements (or
//! `#[derive(Module)]` writes), and everything a model needs (named parameters and buffers,
//! the state dict, `train()` / `eval()`, loading) provided on top of it, so that none of it can
//! be forgotten by one layer and silently skipped.

use std::collections::{HashMap, HashSet};

use crate::io::LoadReport;
use crate::{DType, Device, Error, Result, Tensor};

/// What a module shows of itself, for reading: see [`Module::visit`]. The methods a visitor
/// does not care about keep their default (ignore the entry); `child` must decide whether to
/// descend.
pub trait Visitor {
    /// A trainable parameter (PyTorch's `nn.Parameter`) registered as `name`.
    fn parameter(&mut self, name: &str, tensor: &Tensor) {
        let _ = (name, tensor);
    }

    /// A buffer (running statistics and other state that is saved but not trained; PyTorch's
    /// `register_buffer`) registered as `name`.
    fn buffer(&mut self, name: &str, tensor: &Tensor) {
        let _ = (name, tensor);
    }

    /// A non-persistent buffer (PyTorch's `register_buffer(.., persistent=False)`: a causal
    /// mask, rotary frequencies): one of [`Module::named_buffers`], but not in the state dict,
    /// so neither saved nor loaded.
    fn transient_buffer(&mut self, name: &str, tensor: &Tensor) {
        let _ = (name, tensor);
    }

    /// A buffer kept on the host as an integer (BatchNorm's `num_batches_tracked`): in the
    /// state dict as an i32 scalar on `device`.
    fn counter(&mut self, name: &str, value: u64, device: &Device) {
        let _ = (name, value, device);
    }

    /// [`Visitor::counter`] with the i32 scalar that shows it in the state dict, which the
    /// module keeps equal to `value` (it writes it at every change), so a state dict taken
    /// earlier follows the count as PyTorch's buffer does. The default treats it as
    /// [`Visitor::counter`].
    fn counter_tensor(&mut self, name: &str, value: u64, tensor: &Tensor) {
        self.counter(name, value, tensor.device())
    }

    /// A counter whose i32 scalar holds a count written into it from outside (through a state
    /// dict's entry) that the module has not taken yet: until it does, the scalar is the count.
    /// The default treats it as a [`Visitor::buffer`] (the scalar as it is).
    fn counter_held(&mut self, name: &str, tensor: &Tensor) {
        self.buffer(name, tensor)
    }

    /// A training flag of this module (PyTorch's `module.training`).
    fn training(&mut self, training: bool) {
        let _ = training;
    }

    /// A child module registered as `name` (its entries are `name.<entry>`); call
    /// `module.visit(self)` (with the name pushed) to descend.
    fn child(&mut self, name: &str, module: &dyn Module);
}

/// What a module lets change in place: see [`Module::visit_mut`]. Tensors are not here: they
/// are changed through their storage (loading copies into it), which every holder of the
/// tensor shares.
pub trait VisitorMut {
    /// A training flag of this module, to set for `train()` / `eval()`.
    fn training(&mut self, training: &mut bool) {
        let _ = training;
    }

    /// A counter buffer (see [`Visitor::counter`]) registered as `name`, to restore.
    fn counter(&mut self, name: &str, value: &mut u64) {
        let _ = (name, value);
    }

    /// A child module registered as `name`; call `module.visit_mut(self)` to descend.
    fn child(&mut self, name: &str, module: &mut dyn Module);
}

/// A layer or a model: its parameters, buffers, training flags and child modules, by PyTorch's
/// names. Implement the two visitor methods (or `#[derive(Module)]` them from a struct's
/// fields, see [the `nn` module](crate::nn)); every other method is provided on top of them,
/// the same for every module. The computation is [`Forward`].
///
/// Names and order follow PyTorch's `nn.Module`: a child's entries are prefixed with its name
/// and a dot (`features.0.weight`), and [`state_dict`](Module::state_dict) lists each module's
/// own parameters, then its own buffers, then each child's entries in registration order.
///
/// Cloning a layer (most layers are `Clone`) is not PyTorch's `copy.deepcopy`: the clone holds
/// the same parameter and buffer tensors (a write through one, an optimizer step included,
/// shows in the other) with its own training flags and options. For independent weights,
/// build a new layer and [`load_state_dict`](Module::load_state_dict) the first one's state
/// into it.
pub trait Module {
    /// Shows `visitor` this module's own parameters, buffers, counters and training flags and
    /// each child (by the names it registers them under, in registration order). A module
    /// reports everything it holds: what it leaves out is not saved, loaded, trained or
    /// switched to evaluation.
    fn visit(&self, visitor: &mut dyn Visitor);

    /// Lends `visitor` this module's training flags, counters and children, mutably: the same
    /// entries as [`visit`](Module::visit) reports, less the tensors.
    fn visit_mut(&mut self, visitor: &mut dyn VisitorMut);

    /// Parameters by their `state_dict()` names, in PyTorch's order (each module's own, then
    /// its children's); a tensor registered twice (tied weights) is listed once, under its
    /// first name, as PyTorch's `named_parameters()` does.
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        dedup(collect(self, true, false, false))
    }

    /// The parameters alone, in the order of [`named_parameters`](Module::named_parameters).
    fn parameters(&self) -> Vec<Tensor> {
        self.named_parameters()
            .into_iter()
            .map(|(_, t)| t)
            .collect()
    }

    /// Buffers (running statistics, `num_batches_tracked`, non-persistent ones too) by their
    /// names, each module's own before its children's.
    fn named_buffers(&self) -> Vec<(String, Tensor)> {
        dedup(collect(self, false, true, true))
    }

    /// Parameters and buffers by name, in PyTorch's `state_dict()` order: per module, its
    /// parameters, then its buffers, then its children's entries. Detached, as PyTorch's
    /// (`keep_vars=False`): they share the parameters' storage (`sd[k].copy_from(..)` under
    /// [`no_grad`](crate::no_grad) or not writes into the model) but record nothing.
    fn state_dict(&self) -> Vec<(String, Tensor)> {
        collect(self, true, true, false)
            .into_iter()
            .map(|(n, t)| (n, t.detach()))
            .collect()
    }

    /// The module's name in layer errors ([`Error::Layer`](crate::Error::Layer), which
    /// [`Sequential`](super::Sequential) raises) and in a
    /// [`load_state_dict`](Module::load_state_dict) error (`Error(s) in loading state_dict for
    /// Linear:`, as PyTorch names the class): by default its type's name without path or
    /// generics (`Linear`); LSTM and GRU, one type, say `LSTM` / `GRU`; a `Box` gives its
    /// contents' name; a `Vec` or array of modules is `ModuleList`.
    fn layer_name(&self) -> &'static str {
        let full = std::any::type_name::<Self>();
        let base = full.split('<').next().unwrap_or(full);
        base.rsplit("::").next().unwrap_or(base)
    }

    /// The number of parameter elements.
    fn num_parameters(&self) -> usize {
        self.named_parameters().iter().map(|(_, t)| t.numel()).sum()
    }

    /// Turns `requires_grad` of every parameter on or off (PyTorch's `requires_grad_(mode)`):
    /// freezing a pretrained backbone for fine-tuning. The flag is each leaf's, shared by all
    /// its handles ([`Tensor::set_requires_grad`]), so the optimizers already built see it: a
    /// frozen parameter gets no gradient and is skipped; unfrozen, it trains again.
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument), changing nothing, for a
    /// parameter that is the output of a tracked op, and (turning the flag on) for one that is
    /// a plain tensor, not a leaf made with `requires_grad()` (none of the `nn` layers' are
    /// either).
    fn set_requires_grad(&mut self, requires_grad: bool) -> Result<()> {
        let params = self.named_parameters();
        // Checked before any flag changes: a refusal leaves every parameter as it was.
        if let Some((name, _)) = params.iter().find(|(_, p)| p.is_tracked() && !p.is_leaf()) {
            return Err(Error::arg(
                "set_requires_grad",
                format!(
                    "parameter {name}: you can only change requires_grad flags of leaf \
                     variables (it is the output of a tracked op: use detach() for a copy \
                     without gradients)"
                ),
            ));
        }
        if requires_grad {
            // The flag lives in a leaf's shared meta; a plain tensor has none, and setting it
            // on the clone named_parameters() lends would leave the module's field untouched.
            if let Some((name, _)) = params.iter().find(|(_, p)| !p.has_grad_key()) {
                return Err(Error::arg(
                    "set_requires_grad",
                    format!(
                        "parameter {name} is a plain tensor, not a leaf that requires grad: \
                         assign it as `tensor.requires_grad()?` (the nn layers' own parameters \
                         are)"
                    ),
                ));
            }
        }
        for (name, mut p) in params {
            p.set_requires_grad(requires_grad)
                .map_err(|e| Error::arg("set_requires_grad", format!("parameter {name}: {e}")))?;
        }
        Ok(())
    }

    /// Sets every training flag in the module and its children (PyTorch's `train(mode)`).
    fn set_training(&mut self, training: bool) {
        struct Set(bool);
        impl VisitorMut for Set {
            fn training(&mut self, training: &mut bool) {
                *training = self.0;
            }
            fn child(&mut self, _: &str, module: &mut dyn Module) {
                module.visit_mut(self);
            }
        }
        self.visit_mut(&mut Set(training));
    }

    /// Training mode everywhere (PyTorch's `train()`): batch statistics, dropout.
    fn train(&mut self) {
        self.set_training(true);
    }

    /// Evaluation mode everywhere (PyTorch's `eval()`): running statistics, no dropout.
    fn eval(&mut self) {
        self.set_training(false);
    }

    /// False when any layer of the module is in evaluation mode. The containers
    /// ([`Sequential`](super::Sequential), [`ModuleList`](super::ModuleList),
    /// [`ModuleDict`](super::ModuleDict)) carry a flag of their own, so `eval()` reads back as
    /// not training even when no layer inside has one (Linear, ReLU); a bare layer without a
    /// flag (and a derived struct without a `#[module(training)]` field) always reads true.
    fn is_training(&self) -> bool {
        struct All(bool);
        impl Visitor for All {
            fn training(&mut self, training: bool) {
                self.0 &= training;
            }
            fn child(&mut self, _: &str, module: &dyn Module) {
                module.visit(self);
            }
        }
        let mut all = All(true);
        self.visit(&mut all);
        all.0
    }

    /// Copies a state dict (e.g. from [`crate::io::load_safetensors`]) into the parameters and
    /// buffers in place and restores the counters; `strict` as PyTorch's `load_state_dict`
    /// (missing or unexpected keys are an error naming them; otherwise they are reported). A
    /// counter the source lacks (`num_batches_tracked`) keeps its value and is not missing, as
    /// PyTorch's batch norm fills it in for a plain dict. Dtypes convert, and a source on
    /// another device is copied over through the host, as PyTorch's `param.copy_` (in the
    /// browser only through [`crate::nn::load_state_dict_async`], which can wait). Nothing
    /// changes when an error is returned. In the browser (wasm32) a counter cannot be read back without blocking and
    /// keeps its value: [`crate::nn::load_state_dict_async`] restores it there.
    fn load_state_dict(
        &mut self,
        source: &HashMap<String, Tensor>,
        strict: bool,
    ) -> Result<LoadReport> {
        load(self, source, strict)
    }
}

/// The parameters and buffers of `m` (as asked; `transient`: the non-persistent buffers too),
/// by name, in PyTorch's state-dict order.
fn collect<M: Module + ?Sized>(
    m: &M,
    params: bool,
    buffers: bool,
    transient: bool,
) -> Vec<(String, Tensor)> {
    let mut c = Collect {
        prefix: String::new(),
        params,
        buffers,
        transient,
        own_params: Vec::new(),
        own_buffers: Vec::new(),
        children: Vec::new(),
    };
    m.visit(&mut c);
    c.finish()
}

/// One module's entries: its own parameters and buffers in the order it reports them, and its
/// children's entries (collected depth first as they are met), emitted in PyTorch's order.
struct Collect {
    prefix: String,
    params: bool,
    buffers: bool,
    transient: bool,
    own_params: Vec<(String, Tensor)>,
    own_buffers: Vec<(String, Tensor)>,
    children: Vec<(String, Tensor)>,
}

impl Collect {
    fn finish(mut self) -> Vec<(String, Tensor)> {
        self.own_params.append(&mut self.own_buffers);
        self.own_params.append(&mut self.children);
        self.own_params
    }
}

impl Visitor for Collect {
    fn parameter(&mut self, name: &str, tensor: &Tensor) {
        if self.params {
            self.own_params
                .push((format!("{}{name}", self.prefix), tensor.clone()));
        }
    }
    fn buffer(&mut self, name: &str, tensor: &Tensor) {
        if self.buffers {
            self.own_buffers
                .push((format!("{}{name}", self.prefix), tensor.clone()));
        }
    }
    fn transient_buffer(&mut self, name: &str, tensor: &Tensor) {
        if self.transient {
            self.buffer(name, tensor);
        }
    }
    fn counter(&mut self, name: &str, value: u64, device: &Device) {
        // PyTorch stores the count as an int64 scalar; here an i32 one (the device's integer
        // type, saturating) made on demand. Making it fails only on a lost device, where saving
        // the state dict fails too.
        if self.buffers {
            if let Ok(t) = counter_scalar(value, device) {
                self.own_buffers.push((format!("{}{name}", self.prefix), t));
            }
        }
    }
    fn counter_tensor(&mut self, name: &str, value: u64, tensor: &Tensor) {
        // The module's own scalar, brought up to date (its count may have been set directly
        // through the module's public state), so the entry shares the module's storage. A
        // write that fails (out of memory for its upload) leaves the last count written, but
        // the key stays: a state dict without it would fail a strict load.
        if self.buffers {
            let _ = write_counter(tensor, value);
            self.own_buffers
                .push((format!("{}{name}", self.prefix), tensor.clone()));
        }
    }
    fn child(&mut self, name: &str, module: &dyn Module) {
        let mut sub = Collect {
            prefix: format!("{}{name}.", self.prefix),
            params: self.params,
            buffers: self.buffers,
            transient: self.transient,
            own_params: Vec::new(),
            own_buffers: Vec::new(),
            children: Vec::new(),
        };
        module.visit(&mut sub);
        self.children.extend(sub.finish());
    }
}

/// Drops the second and later names of one tensor (the same storage, view and dtype).
fn dedup(v: Vec<(String, Tensor)>) -> Vec<(String, Tensor)> {
    let mut seen = HashSet::new();
    v.into_iter()
        .filter(|(_, t)| {
            // The leaf too (PyTorch dedups by Parameter object): two leaves over one buffer
            // (`b.weight = a.weight.detach().requires_grad()?`) are two parameters.
            seen.insert((
                t.grad.as_ref().map(|g| std::sync::Arc::as_ptr(g) as usize),
                std::sync::Arc::as_ptr(&t.storage) as usize,
                t.shape().to_vec(),
                t.strides().to_vec(),
                t.layout.offset(),
                t.dtype,
            ))
        })
        .collect()
}

/// Everything loading touches: the tensors by name, in state-dict order (as [`Collect`]: a
/// module's parameters, its buffers, then its children's, whatever order its fields come in,
/// so missing keys are listed and tied tensors written in PyTorch's order), and the counters'
/// names.
#[derive(Default)]
struct Targets {
    prefix: String,
    own_params: Vec<(String, Tensor)>,
    own_buffers: Vec<(String, Tensor)>,
    children: Vec<(String, Tensor)>,
    counters: Vec<String>,
}

impl Targets {
    /// The tensors in state-dict order, and the counters' names.
    fn finish(mut self) -> (Vec<(String, Tensor)>, Vec<String>) {
        self.own_params.append(&mut self.own_buffers);
        self.own_params.append(&mut self.children);
        (self.own_params, self.counters)
    }
}

impl Visitor for Targets {
    fn parameter(&mut self, name: &str, tensor: &Tensor) {
        self.own_params
            .push((format!("{}{name}", self.prefix), tensor.clone()));
    }
    fn buffer(&mut self, name: &str, tensor: &Tensor) {
        self.own_buffers
            .push((format!("{}{name}", self.prefix), tensor.clone()));
    }
    fn counter(&mut self, name: &str, _: u64, _: &Device) {
        self.counters.push(format!("{}{name}", self.prefix));
    }
    fn counter_held(&mut self, name: &str, _: &Tensor) {
        self.counters.push(format!("{}{name}", self.prefix));
    }
    fn child(&mut self, name: &str, module: &dyn Module) {
        let mut sub = Targets {
            prefix: format!("{}{name}.", self.prefix),
            ..Default::default()
        };
        module.visit(&mut sub);
        let (tensors, counters) = sub.finish();
        self.children.extend(tensors);
        self.counters.extend(counters);
    }
}

/// Restores counters by their full names.
struct SetCounters<'a> {
    prefix: String,
    values: &'a HashMap<String, u64>,
}

impl VisitorMut for SetCounters<'_> {
    fn counter(&mut self, name: &str, value: &mut u64) {
        if let Some(v) = self.values.get(&format!("{}{name}", self.prefix)) {
            *value = *v;
        }
    }
    fn child(&mut self, name: &str, module: &mut dyn Module) {
        let len = self.prefix.len();
        self.prefix.push_str(name);
        self.prefix.push('.');
        module.visit_mut(self);
        self.prefix.truncate(len);
    }
}

/// A counter's value from its state-dict tensor (PyTorch's int64 scalar, loaded as i32, or a
/// one-element 1-D tensor, as PyTorch's rule for 0-d entries: `check_load` refused other
/// shapes), read in the entry's own dtype and converted on the host, so nothing
/// new is recorded before the readback (which, in the browser, drains the parked batches
/// first).
async fn read_counter(t: &Tensor) -> Result<Option<u64>> {
    let first = match t.dtype() {
        DType::I32 => t.to_vec_async::<i32>().await?.first().map(|&n| n as f64),
        DType::F32 => t.to_vec_async::<f32>().await?.first().map(|&v| v as f64),
        DType::F16 => t
            .to_vec_async::<half::f16>()
            .await?
            .first()
            .map(|v| v.to_f64()),
    };
    // As to_dtype(I32) rounds toward zero and saturates (NaN to 0); the counter is unsigned,
    // so a negative count (which PyTorch's int64 buffer keeps) loads as 0.
    Ok(first.map(|v| (v as i32).max(0) as u64))
}

// A counter the source lacks is not missing: it keeps its value, as PyTorch's batch norm fills
// in `num_batches_tracked` for a state dict without version metadata (a plain dict, such as
// safetensors gives) before the strict check. Keys and shapes (the counters' too) are checked
// before anything is read or written, and the counters read and the sources on other devices
// brought over before anything is written, so that a bad one changes nothing. `read_counters` false leaves every counter as it
// is (the browser's blocking load, which cannot wait for a readback).
async fn load_with<M: Module + ?Sized>(
    m: &mut M,
    source: &HashMap<String, Tensor>,
    strict: bool,
    read_counters: bool,
) -> Result<LoadReport> {
    let class = m.layer_name();
    let mut visitor = Targets::default();
    m.visit(&mut visitor);
    let (tensors, counter_names) = visitor.finish();
    let targets: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut checked = crate::io::check_load(&targets, &counter_names, source, strict, Some(class))?;
    let mut counters = HashMap::new();
    for name in counter_names.iter().filter(|_| read_counters) {
        if let Some(src) = source.get(name) {
            if let Some(v) = read_counter(src).await? {
                counters.insert(name.clone(), v);
            }
        }
    }
    checked.bring_over().await?;
    checked.apply()?;
    m.visit_mut(&mut SetCounters {
        prefix: String::new(),
        values: &counters,
    });
    Ok(checked.report)
}

/// [`Module::load_state_dict`]: [`load_with`] run to its end in one poll, which a native
/// readback finishes inside (`to_vec_async` blocks there); in the browser it reads no counter.
fn load<M: Module + ?Sized>(
    m: &mut M,
    source: &HashMap<String, Tensor>,
    strict: bool,
) -> Result<LoadReport> {
    let read_counters = cfg!(not(target_arch = "wasm32"));
    futures::FutureExt::now_or_never(load_with(m, source, strict, read_counters)).unwrap_or_else(
        || {
            Err(Error::arg(
                "load_state_dict",
                "a readback (a source tensor on another device) did not finish in one poll: \
                 in the browser use nn::load_state_dict_async",
            ))
        },
    )
}

/// [`load_with`] reading the counters without blocking: `nn::load_state_dict_async`.
pub(crate) async fn load_async<M: Module + ?Sized>(
    m: &mut M,
    source: &HashMap<String, Tensor>,
    strict: bool,
) -> Result<LoadReport> {
    load_with(m, source, strict, true).await
}

/// A counter's state-dict value: an i32 scalar (PyTorch's int64 count, saturating at
/// i32::MAX, the device's integer type).
pub(crate) fn counter_scalar(value: u64, device: &Device) -> Result<Tensor> {
    Tensor::from_slice(device, &[value.min(i32::MAX as u64) as i32], &[])
}

/// Writes `value` into a module's counter scalar (see [`Visitor::counter_tensor`]).
pub(crate) fn write_counter(tensor: &Tensor, value: u64) -> Result<()> {
    tensor.copy_from(&counter_scalar(value, tensor.device())?)
}

/// `Send` on native targets, where tensors are, so a model (a [`Sequential`](super::Sequential)
/// and a `Box<dyn Forward>` too) can move to another thread, as PyTorch modules can; nothing
/// on wasm32, where a device (and so a tensor) is neither `Send` nor `Sync`. Implemented for
/// every type that qualifies.
#[cfg(not(target_arch = "wasm32"))]
pub trait MaybeSend: Send {}
#[cfg(not(target_arch = "wasm32"))]
impl<T: Send + ?Sized> MaybeSend for T {}
/// `Send` on native targets, where tensors are; nothing on wasm32, where they are not.
#[cfg(target_arch = "wasm32")]
pub trait MaybeSend {}
#[cfg(target_arch = "wasm32")]
impl<T: ?Sized> MaybeSend for T {}

/// `Sync` on native targets, where tensors are, so threads can share a model (an
/// `Arc<Sequential>` serving requests), as PyTorch modules are used from any thread; nothing
/// on wasm32. Implemented for every type that qualifies.
#[cfg(not(target_arch = "wasm32"))]
pub trait MaybeSync: Sync {}
#[cfg(not(target_arch = "wasm32"))]
impl<T: Sync + ?Sized> MaybeSync for T {}
/// `Sync` on native targets, where tensors are; nothing on wasm32, where they are not.
#[cfg(target_arch = "wasm32")]
pub trait MaybeSync {}
#[cfg(target_arch = "wasm32")]
impl<T: ?Sized> MaybeSync for T {}

/// The computation of a module: `y = module(x)`. Layers and models with one input and one
/// output implement it (and so fit in a [`Sequential`](super::Sequential)); a model with
/// other inputs writes its own methods next to its [`Module`] implementation. A layer is
/// [`MaybeSend`] and [`MaybeSync`] (`Send` and `Sync` on native targets: it holds tensors,
/// which are; state that `forward(&self)` updates lives in a [`StateCell`](super::StateCell)
/// or a `Mutex`, not a `RefCell`), and `'static` (`Any`: a [`Sequential`](super::Sequential)
/// hands its layers back as their own types, boxed or not).
pub trait Forward: Module + MaybeSend + MaybeSync + std::any::Any {
    /// The forward pass.
    fn forward(&self, x: &Tensor) -> Result<Tensor>;
}

impl<M: Module + ?Sized> Module for Box<M> {
    fn visit(&self, visitor: &mut dyn Visitor) {
        (**self).visit(visitor)
    }
    fn visit_mut(&mut self, visitor: &mut dyn VisitorMut) {
        (**self).visit_mut(visitor)
    }
    fn layer_name(&self) -> &'static str {
        (**self).layer_name()
    }
}

impl<M: Forward + ?Sized> Forward for Box<M> {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        (**self).forward(x)
    }
}
