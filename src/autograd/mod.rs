//! Reverse-mode automatic differentiation, with the graph kept on the tensors (as candle and
//! PyTorch do; the reasons are in docs/AUTOGRAD.md).
//!
//! ```no_run,ignore-wasm32
//! # fn main() -> wgtensor::Result<()> {
//! use wgtensor::{no_grad, Device, Tensor};
//! let dev = Device::new()?;
//! let x = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0], &[3])?;
//! let w = Tensor::from_slice(&dev, &[0.5f32, -1.0, 2.0], &[3])?.requires_grad()?;
//! let loss = x.mul(&w)?.tanh()?.sum(0, false)?; // one element
//! let grads = loss.backward()?;
//! let gw = grads.get(&w).expect("the loss depends on w");
//! let w2 = no_grad(|| w.sub(&gw.mul_scalar(0.1)?))?; // untracked update
//! assert!(!w2.is_tracked());
//! # Ok(()) }
//! ```
//!
//! A tensor marked with [`Tensor::requires_grad`] is a *leaf*. An op whose inputs include a
//! tracked tensor (and that runs while grad mode is on, see [`no_grad`]) gives its output a
//! `Node` holding the op's backward (one small `BackwardOp` struct per op family, kept
//! beside the op's forward in `src/ops/`) and an edge to each tracked input. Untracked tensors
//! carry `None` (a frozen leaf keeps its meta, flagged) and pay nothing: an op checks its
//! inputs' meta and returns.
//!
//! [`Tensor::backward`] walks the nodes from the highest creation number down. Creation order
//! is a topological order (every node is created after the nodes of its inputs), so a max-heap
//! on that number visits a node only after every consumer has added its gradient, with no
//! recursive sort. The backward of each visited node that saved tensors is *taken* out of it,
//! which releases them to the pool during the pass; a later backward through that node is an
//! error. Nodes that saved nothing (views, `add`, `sum`, ...) serve any number of passes,
//! except those whose PyTorch twin saves a tensor or copies slices (scalar `mul`/`div`,
//! circular `pad`: `BackwardOp::single_use`), which serve one.
//!
//! Not differentiable: in-place ops (`gemm_into` refuses tracked operands while recording;
//! `batch_norm_train` refuses tracked running statistics). `Rnn::forward_train` /
//! `Rnn::backward` stay the manual path and record nothing of their own.

use std::cell::Cell;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::{DType, Error, Result, Tensor};

mod grads;
mod view_meta;
pub use grads::Grads;

/// `Send + Sync` on native targets, nothing on wasm32 (where wgpu handles, and so tensors,
/// are neither): backward ops hold tensors and must be as shareable as tensors are.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) trait Shareable: Send + Sync {}
#[cfg(not(target_arch = "wasm32"))]
impl<T: Send + Sync> Shareable for T {}
/// See the native definition.
#[cfg(target_arch = "wasm32")]
pub(crate) trait Shareable {}
#[cfg(target_arch = "wasm32")]
impl<T> Shareable for T {}

/// The backward of one recorded op. Implementations save *detached* tensors (see
/// [`Tensor::detach`]): a saved tensor that kept its graph would make dropping a deep graph
/// recursive and pin nodes that backward has already consumed.
pub(crate) trait BackwardOp: Shareable {
    /// The op's name, for error messages.
    fn name(&self) -> &'static str;
    /// Gradients of the inputs from the gradients of the outputs (`None`: no gradient reached
    /// that output). `needs[i]` is false for inputs that are not tracked; their entry may be
    /// `None` and should not be computed.
    fn backward(&self, grads: &[Option<Tensor>], needs: &[bool]) -> Result<Vec<Option<Tensor>>>;
    /// The tensors the backward reads that a caller could still write in place (inputs and
    /// outputs it keeps, not temporaries of its own): their versions are recorded when the
    /// node is created and checked before the backward runs (PyTorch's saved-tensor check).
    /// An op that returns none here must hold no tensors at all: its node is not freed by a
    /// backward and serves later passes too, unless [`BackwardOp::single_use`].
    fn saved(&self) -> Vec<&Tensor>;
    /// True when PyTorch's twin of this op saves a tensor where this one keeps none (`x * 2`'s
    /// wrapped scalar; a circular pad's CopySlices): its node serves one backward, as
    /// PyTorch's.
    fn single_use(&self) -> bool {
        false
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// What a tracked tensor knows about its place in the graph.
pub(crate) struct GradMeta {
    /// The key of this tensor's gradient in [`Grads`]; clones of a tensor share it.
    id: u64,
    /// `None` for a leaf; else the node that produced the tensor and which of its outputs.
    node: Option<Arc<Node>>,
    index: usize,
    /// Checked against the gradient backward computes for this tensor.
    shape: Vec<usize>,
    dtype: DType,
    /// A leaf whose `requires_grad` was turned off. The flag lives here, shared by every
    /// handle of the leaf (the module's field, the optimizer's and `named_parameters()`'s
    /// clones), as PyTorch's flag lives on the one tensor object they all name: freezing
    /// through any handle freezes the parameter, and unfreezing keeps its key, so an optimizer
    /// built before finds its gradients again.
    frozen: AtomicBool,
    /// For a tracked view: the meta of the tensor at the root of its chain of views (PyTorch's
    /// `base_`), which decides at write time whether an in-place write is refused in
    /// PyTorch's `view_of_leaf` words.
    view_base: Option<Arc<GradMeta>>,
    /// For a piece of `split`, `chunk` or `unbind` (and views of it): its output index and
    /// PyTorch's name of the op, for its refusal of an in-place write into one of several
    /// views one op returned.
    multi_output: Option<(usize, &'static str)>,
}

impl GradMeta {
    /// This meta, when its tensor takes part in the graph (not a frozen leaf).
    fn live(self: &Arc<Self>) -> Option<&Arc<Self>> {
        (!self.frozen.load(Ordering::Relaxed)).then_some(self)
    }
}

/// One recorded op.
pub(crate) struct Node {
    /// Creation number: larger means created later (a topological order).
    seq: u64,
    name: &'static str,
    outputs: usize,
    /// Taken by backward (`None` afterwards), or shared while a `retain_graph` pass runs it.
    state: Mutex<Option<Arc<NodeState>>>,
}

struct NodeState {
    op: Box<dyn BackwardOp>,
    /// The versions of `op.saved()` when the op ran.
    versions: Vec<u64>,
    /// One per op input: `None` for inputs that need no gradient.
    inputs: Vec<Option<Arc<GradMeta>>>,
}

fn take_inputs(state: &Mutex<Option<Arc<NodeState>>>) -> Vec<Arc<GradMeta>> {
    let mut guard = match state.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    };
    // Shared only while a retain_graph pass is running this node; that pass then drops it.
    match guard.as_mut().and_then(Arc::get_mut) {
        Some(s) => std::mem::take(&mut s.inputs)
            .into_iter()
            .flatten()
            .collect(),
        None => Vec::new(),
    }
}

impl Drop for Node {
    /// Frees the chain of nodes only this one keeps alive with an explicit stack: dropping a
    /// graph one call per node would overflow the stack on deep graphs (PyTorch issue #5534).
    fn drop(&mut self) {
        let mut stack = take_inputs(&self.state);
        while let Some(meta) = stack.pop() {
            let Ok(meta) = Arc::try_unwrap(meta) else {
                continue;
            };
            let Some(node) = meta.node else {
                continue;
            };
            if let Ok(node) = Arc::try_unwrap(node) {
                stack.extend(take_inputs(&node.state));
            }
        }
    }
}

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
}

/// True unless the calling thread is inside [`no_grad`] or holds a [`NoGradGuard`].
pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(|g| g.get())
}

/// Disables recording on this thread until dropped, then restores the previous mode (also
/// when unwinding, so a panic cannot leave grad mode off).
pub struct NoGradGuard {
    prev: bool,
    // Thread-local state: the guard must be dropped on the thread that created it.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl NoGradGuard {
    /// Turns grad mode off for this thread until the guard drops.
    #[allow(clippy::new_without_default)]
    pub fn new() -> NoGradGuard {
        let prev = GRAD_ENABLED.with(|g| g.replace(false));
        NoGradGuard {
            prev,
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for NoGradGuard {
    fn drop(&mut self) {
        GRAD_ENABLED.with(|g| g.set(self.prev));
    }
}

/// Runs `f` with recording off on this thread: ops inside record nothing, even on tracked
/// inputs (inference, optimizer updates). Outputs kept from a tracked forward pin its graph
/// until they drop; run inference under `no_grad` so nothing is kept.
pub fn no_grad<R>(f: impl FnOnce() -> R) -> R {
    let _guard = NoGradGuard::new();
    f()
}

/// True when an op over `inputs` is recorded: grad mode is on and one of them is tracked.
/// Ops that pick an untracked fast path, or refuse in-place work, ask this, as `record` does.
pub(crate) fn records<'a>(inputs: impl IntoIterator<Item = &'a Tensor>) -> bool {
    is_grad_enabled() && inputs.into_iter().any(Tensor::is_tracked)
}

/// Records an op with one output. `make` builds the backward from the untracked output and is
/// only called when something is tracked, so untracked ops pay one `Option` check per input.
pub(crate) fn record<F>(mut out: Tensor, inputs: &[&Tensor], make: F) -> Tensor
where
    F: FnOnce(&Tensor) -> Box<dyn BackwardOp>,
{
    // Integer outputs (indices, argmax, casts to i32) carry no gradient, as in PyTorch.
    if !records(inputs.iter().copied()) || !out.dtype.is_float() {
        return out;
    }
    let node = new_node(1, inputs, make(&out));
    out.grad = Some(output_meta(&out, node, 0));
    out
}

/// Records an op with several outputs (each gets its own gradient slot).
pub(crate) fn record_multi<F>(outs: Vec<Tensor>, inputs: &[&Tensor], make: F) -> Vec<Tensor>
where
    F: FnOnce(&[Tensor]) -> Box<dyn BackwardOp>,
{
    if !records(inputs.iter().copied()) {
        return outs;
    }
    let node = new_node(outs.len(), inputs, make(&outs));
    outs.into_iter()
        .enumerate()
        .map(|(index, mut t)| {
            if t.dtype.is_float() {
                t.grad = Some(output_meta(&t, node.clone(), index));
            }
            t
        })
        .collect()
}

fn new_node(outputs: usize, inputs: &[&Tensor], op: Box<dyn BackwardOp>) -> Arc<Node> {
    Arc::new(Node {
        seq: next_id(),
        name: op.name(),
        outputs,
        state: Mutex::new(Some(Arc::new(NodeState {
            versions: op.saved().iter().map(|t| t.version()).collect(),
            op,
            inputs: inputs.iter().map(|t| t.live_meta().cloned()).collect(),
        }))),
    })
}

fn output_meta(t: &Tensor, node: Arc<Node>, index: usize) -> Arc<GradMeta> {
    Arc::new(GradMeta {
        id: next_id(),
        node: Some(node),
        index,
        shape: t.shape().to_vec(),
        dtype: t.dtype,
        frozen: AtomicBool::new(false),
        view_base: None,
        multi_output: None,
    })
}

/// Adds `g` into `slot` (the first gradient is kept as is).
fn accumulate(slot: &mut Option<Tensor>, g: Tensor) -> Result<()> {
    *slot = Some(match slot.take() {
        None => g,
        // Both are the backward's own temporaries: the sum reuses one's buffer when it can.
        Some(prev) => (prev + g)?,
    });
    Ok(())
}

fn check_grad(meta: &GradMeta, g: &Tensor, node: &'static str) -> Result<()> {
    if g.shape() != meta.shape.as_slice() || g.dtype != meta.dtype {
        return Err(Error::shape(
            "backward",
            format!(
                "{node} produced a {:?} gradient of shape {:?} for a {:?} input of shape {:?}",
                g.dtype,
                g.shape(),
                meta.dtype,
                meta.shape
            ),
        ));
    }
    Ok(())
}

/// PyTorch's error for a saved tensor written in place after the op ran (an optimizer step
/// before `backward`, a `copy_from` under `no_grad`): the gradient would silently use the new
/// values.
fn check_versions(name: &'static str, state: &NodeState) -> Result<()> {
    for (t, &was) in state.op.saved().iter().zip(&state.versions) {
        let now = t.version();
        if now != was {
            // PyTorch's tag of the tensor: its legacy type name and its shape.
            let kind = match t.dtype() {
                crate::DType::F32 => "Float",
                crate::DType::F16 => "Half",
                crate::DType::I32 => "Int",
            };
            return Err(Error::arg(
                "backward",
                format!(
                    "one of the variables needed for gradient computation has been modified \
                     by an inplace operation: [torch.{kind}Tensor {:?}] is at version {now}; \
                     expected version {was} instead (saved by {name}). Run the forward again \
                     after the in-place write (an optimizer step, copy_from, gemm_into), or \
                     call backward before it",
                    t.shape()
                ),
            ));
        }
    }
    Ok(())
}

/// Gradients of every leaf `meta` depends on, with `seed` as the gradient of `meta`'s tensor.
/// `retain` keeps every node's backward (and saved tensors) for another pass.
fn run_backward(meta: &Arc<GradMeta>, seed: Tensor, retain: bool) -> Result<Grads> {
    // Backward ops run on untracked tensors; the guard also covers user code that called
    // backward inside a scope where some op could otherwise record.
    let _guard = NoGradGuard::new();
    let mut grads = Grads::default();
    let Some(root) = &meta.node else {
        grads.map.insert(meta.id, owned(seed)?);
        return Ok(grads);
    };
    let mut heap = BinaryHeap::new();
    let mut pending: HashMap<u64, (Arc<Node>, Vec<Option<Tensor>>)> = HashMap::new();
    let mut slots = vec![None; root.outputs];
    if let Some(slot) = slots.get_mut(meta.index) {
        *slot = Some(seed);
    }
    pending.insert(root.seq, (root.clone(), slots));
    heap.push(root.seq);
    while let Some(seq) = heap.pop() {
        let Some((node, outs)) = pending.remove(&seq) else {
            continue;
        };
        let lock = || {
            node.state.lock().map_err(|_| {
                Error::arg(
                    "backward",
                    format!("the {} node was poisoned by a panic", node.name),
                )
            })
        };
        // A node that saved nothing holds no tensors and frees nothing, so it stays for
        // another pass, as PyTorch's AddBackward or TBackward do (its "backward through the
        // graph a second time" error comes from reading freed saved tensors). Another is
        // released once its backward has run: one whose version check or backward fails
        // keeps its state, so a retry repeats that error, as PyTorch's engine releases a
        // node's variables only after its function returns.
        let (state, consume) = {
            let guard = lock()?;
            let keeps_nothing = guard
                .as_ref()
                .is_some_and(|s| s.op.saved().is_empty() && !s.op.single_use());
            (guard.clone(), !(retain || keeps_nothing))
        };
        let state = state.ok_or_else(|| {
            Error::arg(
                "backward",
                format!(
                    "Trying to backward through the graph a second time (or directly access \
                     saved tensors after they have already been freed). Specify \
                     retain_graph=True (backward_retain_graph() here) if you need to backward \
                     through the graph a second time: the graph through {} was already freed \
                     by an earlier backward(); run the forward again, or use \
                     backward_retain_graph() on the first pass",
                    node.name
                ),
            )
        })?;
        check_versions(node.name, &state)?;
        let needs: Vec<bool> = state.inputs.iter().map(Option::is_some).collect();
        let gin = state.op.backward(&outs, &needs)?;
        drop(outs);
        if consume {
            lock()?.take();
        }
        if gin.len() != state.inputs.len() {
            return Err(Error::arg(
                "backward",
                format!(
                    "{} returned {} gradients for {} inputs",
                    node.name,
                    gin.len(),
                    state.inputs.len()
                ),
            ));
        }
        let inputs = match Arc::try_unwrap(state) {
            // The saved tensors go back to the pool before the next node allocates.
            Ok(NodeState { op, inputs, .. }) => {
                drop(op);
                inputs
            }
            Err(shared) => shared.inputs.clone(),
        };
        for (input, g) in inputs.iter().zip(gin) {
            let (Some(m), Some(g)) = (input, g) else {
                continue;
            };
            check_grad(m, &g, node.name)?;
            match &m.node {
                // A leaf frozen after this graph was recorded gets nothing, as PyTorch's
                // AccumulateGrad skips a leaf that no longer requires grad.
                None if m.frozen.load(Ordering::Relaxed) => {}
                None => {
                    let mut slot = grads.map.remove(&m.id);
                    accumulate(&mut slot, g)?;
                    if let Some(s) = slot {
                        grads.map.insert(m.id, s);
                    }
                }
                Some(n) => {
                    let entry = pending.entry(n.seq).or_insert_with(|| {
                        heap.push(n.seq);
                        (n.clone(), vec![None; n.outputs])
                    });
                    let slot = entry.1.get_mut(m.index).ok_or_else(|| {
                        Error::arg("backward", format!("{} has no output {}", n.name, m.index))
                    })?;
                    accumulate(slot, g)?;
                }
            }
        }
    }
    // Taken out of the map one at a time, so that the count `owned` reads is not raised by a
    // clone; of two leaves sharing one tensor, the first is copied and the second keeps it.
    let ids: Vec<u64> = grads.map.keys().copied().collect();
    for id in ids {
        if let Some(g) = grads.map.remove(&id) {
            grads.map.insert(id, owned(g)?);
        }
    }
    Ok(grads)
}

/// `g` as a gradient of its own, as PyTorch's AccumulateGrad gives: a copy where it shares its
/// storage with anything else (another leaf's gradient, as add's backward hands both inputs
/// the same tensor; the caller's seed; a retained graph's saved tensor) or repeats elements (a
/// broadcast view, as sum's backward gives), so that writing into one gradient changes no
/// other tensor.
fn owned(g: Tensor) -> Result<Tensor> {
    // As PyTorch's layout contract for contiguous leaves: the gradient is packed, not left
    // as a transpose's backward made it (Linear's weight). Leaves are contiguous here but for
    // views marked requires_grad, whose gradient is packed too (PyTorch keeps their strides).
    if !g.is_contiguous() && g.numel() != 0 {
        return g.contiguous_at_zero();
    }
    let repeats = g
        .shape()
        .iter()
        .zip(g.strides())
        .any(|(&n, &s)| s == 0 && n > 1);
    if (!repeats && Arc::strong_count(&g.storage) == 1) || g.numel() == 0 {
        return Ok(g);
    }
    let out = Tensor::empty(g.device(), "backward", g.shape(), g.dtype())?;
    out.copy_from(&g)?;
    Ok(out)
}

/// PyTorch's `sum_to`: sums a broadcast gradient back to `shape` (the leading dims the
/// broadcast added, and every dim where `shape` has 1).
pub(crate) fn sum_to(g: &Tensor, shape: &[usize]) -> Result<Tensor> {
    if g.shape() == shape {
        return Ok(g.clone());
    }
    let op = "sum_to";
    if g.rank() < shape.len() {
        return Err(Error::shape(
            op,
            format!("cannot sum {:?} to the higher rank {shape:?}", g.shape()),
        ));
    }
    let lead = g.rank() - shape.len();
    let mut dims: Vec<isize> = (0..lead as isize).collect();
    for (d, &s) in shape.iter().enumerate() {
        let n = g.shape()[lead + d];
        if s == 1 && n != 1 {
            dims.push((lead + d) as isize);
        } else if s != n {
            return Err(Error::shape(
                op,
                format!("{:?} does not broadcast to {shape:?}", g.shape()),
            ));
        }
    }
    if dims.is_empty() {
        return g.reshape(shape);
    }
    // One reduction over every dim, as PyTorch's sum_to: f16 sums in f32 and rounds once
    // (summed a dim at a time, its partial sums would round, or overflow to inf, on the way).
    g.sum_dims(&dims, true)?.reshape(shape)
}

impl Tensor {
    /// Marks this tensor as a leaf whose gradient [`Tensor::backward`] computes (PyTorch's
    /// `requires_grad_()`). A tracked tensor (a leaf, or an op output, which already requires
    /// grad) is returned as is; a frozen leaf is unfrozen.
    ///
    /// Unlike PyTorch's flag, the leaf starts at the returned handle: clones and views taken
    /// from an untracked tensor before this call stay untracked handles of the same storage
    /// (as [`Tensor::detach`] gives), so their uses get no gradient and may be written in
    /// place. Mark the tensor first and take clones and views from the result.
    pub fn requires_grad(mut self) -> Result<Tensor> {
        self.set_requires_grad(true)?;
        Ok(self)
    }

    /// Turns tracking of a leaf on or off (PyTorch's `requires_grad_(on)`). Off on an untracked
    /// tensor and on on a tracked op output do nothing; off on a tracked op output is an
    /// error, as in PyTorch ("you can only change requires_grad flags of leaf variables").
    ///
    /// The flag belongs to the leaf, not to this handle: every clone of a leaf (a module's
    /// field, the clones `named_parameters()` returns, an optimizer's) sees the change, as
    /// every Python name of one tensor does. So freezing through `named_parameters()` freezes
    /// the module's parameter, and a parameter frozen, then unfrozen, keeps its gradient key:
    /// [`Grads::get`] and optimizers built before find its gradients again. (A [`detach`]ed
    /// tensor is another leaf: turning it on gives it a key of its own.)
    ///
    /// [`detach`]: Tensor::detach
    pub fn set_requires_grad(&mut self, on: bool) -> Result<()> {
        if let Some(m) = self.grad.as_ref().filter(|m| m.node.is_none()) {
            // A leaf, frozen or not: flip the shared flag.
            m.frozen.store(!on, Ordering::Relaxed);
            return Ok(());
        }
        match (&self.grad, on) {
            (Some(m), false) if m.node.is_some() => Err(Error::arg(
                "requires_grad",
                "you can only change requires_grad flags of leaf variables. This one is the \
                 output of a tracked op: use detach() for a copy without gradients",
            )),
            (None, true) if !self.dtype.is_float() => Err(Error::arg(
                "requires_grad",
                // requires_grad_()'s words, then those of torch.tensor(requires_grad=True).
                format!(
                    "only Tensors of floating point dtype can require gradients (Only Tensors \
                     of floating point and complex dtype can require gradients; got {:?})",
                    self.dtype
                ),
            )),
            (Some(_), _) | (None, false) => Ok(()),
            (None, true) => {
                self.grad = Some(Arc::new(GradMeta {
                    id: next_id(),
                    node: None,
                    index: 0,
                    shape: self.shape().to_vec(),
                    dtype: self.dtype,
                    frozen: AtomicBool::new(false),
                    view_base: None,
                    multi_output: None,
                }));
                Ok(())
            }
        }
    }

    /// True when this tensor is a leaf that requires grad or the output of a tracked op.
    pub fn is_tracked(&self) -> bool {
        self.live_meta().is_some()
    }

    /// True for a tracked tensor or a frozen leaf: [`Grads`] can hold a gradient for it.
    pub(crate) fn has_grad_key(&self) -> bool {
        self.grad.is_some()
    }

    /// The graph meta of a tracked tensor (`None` when untracked or a frozen leaf).
    fn live_meta(&self) -> Option<&Arc<GradMeta>> {
        self.grad.as_ref()?.live()
    }

    /// True for tensors that are not the output of a tracked op (untracked ones included).
    pub fn is_leaf(&self) -> bool {
        self.grad.as_ref().is_none_or(|m| m.node.is_none())
    }

    /// The same data without its graph: ops on it record nothing. Shares storage, no copy.
    /// It may be written in place whatever the grad mode (as PyTorch's `detach()`).
    pub fn detach(&self) -> Tensor {
        let mut t = self.clone();
        t.grad = None;
        t.no_grad_view = None;
        t
    }

    /// Gradients of this single-element tensor (the loss) with respect to every tracked leaf
    /// it depends on, seeded with 1. The nodes it runs through that saved tensors are
    /// consumed: those are released, and a second backward through them is an error (nodes
    /// that saved nothing serve any number of passes, but scalar `mul`/`div` and
    /// reflect/replicate/circular `pad` serve one, as PyTorch's save a tensor or copy slices
    /// there).
    pub fn backward(&self) -> Result<Grads> {
        let meta = self.tracked_meta()?;
        self.check_scalar_loss()?;
        let seed = Tensor::full(self.device(), self.shape(), 1.0, self.dtype)?;
        run_backward(meta, seed, false)
    }

    /// [`Tensor::backward`] that keeps the graph (PyTorch's `retain_graph=True`): the saved
    /// tensors stay alive, so another backward through the same nodes works. They cost their
    /// memory until the outputs drop or a plain `backward` consumes the nodes.
    pub fn backward_retain_graph(&self) -> Result<Grads> {
        let meta = self.tracked_meta()?;
        self.check_scalar_loss()?;
        let seed = Tensor::full(self.device(), self.shape(), 1.0, self.dtype)?;
        run_backward(meta, seed, true)
    }

    fn check_scalar_loss(&self) -> Result<()> {
        if self.numel() != 1 {
            return Err(Error::shape(
                "backward",
                format!(
                    "grad can be implicitly created only for scalar outputs, got shape {:?}; \
                     reduce to one element or call backward_with_grad",
                    self.shape()
                ),
            ));
        }
        Ok(())
    }

    /// [`Tensor::backward`] from an explicit gradient of this tensor (same shape; another
    /// dtype is cast to this tensor's first, as PyTorch does).
    pub fn backward_with_grad(&self, grad: &Tensor) -> Result<Grads> {
        // _make_grads compares the shapes before the engine looks for a grad_fn.
        if grad.shape() != self.shape() {
            return Err(Error::shape(
                "backward",
                format!(
                    "Mismatch in shape: grad_output[0] has a shape of torch.Size({:?}) and \
                     output[0] has a shape of torch.Size({:?}). (the gradient passed to \
                     backward_with_grad must have the output's shape)",
                    grad.shape(),
                    self.shape()
                ),
            ));
        }
        let meta = self.tracked_meta()?;
        self.same_device("backward", grad)?;
        let grad = grad.detach().to_dtype(meta.dtype)?;
        check_grad(meta, &grad, "backward_with_grad")?;
        run_backward(meta, grad, false)
    }

    fn tracked_meta(&self) -> Result<&Arc<GradMeta>> {
        self.live_meta().ok_or_else(|| {
            Error::arg(
                "backward",
                "element 0 of tensors does not require grad and does not have a grad_fn: \
                 mark a leaf with requires_grad() and compute from it while grad mode is on",
            )
        })
    }
}
