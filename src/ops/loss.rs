//! Losses with PyTorch's names, formulas and `reduction` (`none` / `mean` / `sum`), composed
//! from the elementwise, reduction and softmax ops (so they run wherever those do and are
//! differentiated through them).

use super::saved_inputs::saving_inputs;
use crate::autograd::BackwardOp;
pub use crate::ops::loss_options::{CrossEntropyOptions, Reduction};
use crate::{DType, Error, Result, Tensor};

/// A loss kernel's dtype dispatch, after its shape checks: an integer operand is PyTorch's
/// `"kernel" not implemented for 'Int'` (AT_DISPATCH's words).
pub(crate) fn float_kernel(op: &'static str, kernel: &str, t: &Tensor) -> Result<()> {
    if t.dtype().is_float() {
        return Ok(());
    }
    Err(Error::arg(
        op,
        format!(
            "\"{kernel}\" not implemented for '{}'",
            t.dtype().scalar_name()
        ),
    ))
}

pub(crate) fn reduce(t: Tensor, r: Reduction) -> Result<Tensor> {
    match r {
        Reduction::None => Ok(t),
        Reduction::Sum => t.sum_all(),
        Reduction::Mean => t.mean_all(),
    }
}

/// PyTorch's type promotion of a float input and target of different dtypes (f16 logits with
/// f32 targets compute in f32, and so does the loss): both converted (differentiably), or
/// `None` when they agree or one is not a float (left to the dtype checks).
pub(crate) fn promoted(input: &Tensor, target: &Tensor) -> Result<Option<(Tensor, Tensor)>> {
    let (a, b) = (input.dtype(), target.dtype());
    if a == b || !a.is_float() || !b.is_float() {
        return Ok(None);
    }
    let dt = crate::dtype::promote(a, b);
    Ok(Some((input.to_dtype(dt)?, target.to_dtype(dt)?)))
}

/// [`promoted`], and an integer target of a float input taken in the input's dtype, as the
/// regression losses PyTorch builds as binary ops (`mse_loss`, `l1_loss`, `smooth_l1_loss`,
/// `huber_loss`) promote it; the target gets no gradient (it has none to get).
pub(crate) fn promoted_numeric(
    input: &Tensor,
    target: &Tensor,
) -> Result<Option<(Tensor, Tensor)>> {
    if input.dtype().is_float() && !target.dtype().is_float() {
        return Ok(Some((input.clone(), target.to_dtype(input.dtype())?)));
    }
    promoted(input, target)
}

/// log_softmax's refusal of a 0-d input to cross_entropy (its class dim is 1), in its words.
const CLASS_DIM_OF_SCALAR: &str = "Dimension out of range (expected to be in range of [-1, 0], \
                                   but got 1) (input must have a class dim, got a scalar)";

/// [`promoted_numeric`], and an integer input of a float target taken in the target's dtype,
/// as `mse_loss`, `l1_loss` and `smooth_l1_loss` compute (`huber_loss` and `kl_div` refuse an
/// integer input in PyTorch too).
pub(crate) fn promoted_regression(
    input: &Tensor,
    target: &Tensor,
) -> Result<Option<(Tensor, Tensor)>> {
    if !input.dtype().is_float() && target.dtype().is_float() {
        return Ok(Some((input.to_dtype(target.dtype())?, target.clone())));
    }
    promoted_numeric(input, target)
}

/// Input and target of one shape, device and dtype. A shape mismatch reads as PyTorch's
/// functional's check for the BCE losses (it raises before any kernel), else as ours.
pub(crate) fn same_shape(op: &'static str, input: &Tensor, target: &Tensor) -> Result<()> {
    same_shape_any_dtype(op, input, target)?;
    input.same_dtype(op, target)
}

/// [`same_shape`] without the dtype: for the losses whose kernels check a dtype first.
pub(crate) fn same_shape_any_dtype(
    op: &'static str,
    input: &Tensor,
    target: &Tensor,
) -> Result<()> {
    input.same_device(op, target)?;
    let (t, i) = (target.shape(), input.shape());
    if t != i {
        let msg = match op {
            "binary_cross_entropy" => format!(
                "Using a target size (torch.Size({t:?})) that is different to the input size \
                 (torch.Size({i:?})) is deprecated. Please ensure they have the same size."
            ),
            "binary_cross_entropy_with_logits" => format!(
                "Target size (torch.Size({t:?})) must be the same as input size \
                 (torch.Size({i:?}))"
            ),
            _ => format!("target shape {t:?} must match input shape {i:?}"),
        };
        return Err(Error::shape(op, msg));
    }
    Ok(())
}

/// The regression losses' shape rule (PyTorch's `mse_loss`, `l1_loss`, `smooth_l1_loss`,
/// `huber_loss`, `kl_div`): input and target broadcast to a common shape (PyTorch warns
/// when it differs from the input's, then computes on `broadcast_tensors`); the same device
/// and dtype (the callers promote mixed float dtypes first, see [`promoted`]).
pub(crate) fn broadcastable(op: &'static str, input: &Tensor, target: &Tensor) -> Result<()> {
    input.same_device(op, target)?;
    input.same_dtype(op, target)?;
    shapes_broadcast(op, input, target)
}

/// The shape part of [`broadcastable`]: F.smooth_l1_loss and F.huber_loss broadcast input and
/// target (torch.broadcast_tensors) before their kernels check beta or delta.
pub(crate) fn shapes_broadcast(op: &'static str, input: &Tensor, target: &Tensor) -> Result<()> {
    crate::layout::broadcast_shapes(op, input.shape(), target.shape()).map_err(|_| {
        Error::shape(
            op,
            format!(
                "target shape {:?} does not broadcast with input shape {:?}",
                target.shape(),
                input.shape()
            ),
        )
    })?;
    Ok(())
}

/// Mean squared error `(input - target)^2` (PyTorch's `mse_loss`). Input and target
/// broadcast, as PyTorch's (which warns when the shapes differ).
pub fn mse_loss(input: &Tensor, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
    let loss = mse_composed(input, target, reduction)?;
    Ok(saving_inputs("MseLossBackward0", loss, &[input, target]))
}

/// [`mse_loss`] from elementwise ops, whose graph saves only the difference.
fn mse_composed(input: &Tensor, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
    if let Some((i, t)) = promoted_regression(input, target)? {
        return mse_composed(&i, &t, reduction);
    }
    broadcastable("mse_loss", input, target)?;
    float_kernel("mse_loss", "mse_cpu", input)?;
    let d = input.sub(target)?;
    reduce(d.mul(&d)?, reduction)
}

/// Options of [`binary_cross_entropy_with_logits`].
#[derive(Debug, Clone, Copy, Default)]
pub struct BceWithLogitsOptions<'a> {
    /// Rescales each element's loss (broadcast to the input).
    pub weight: Option<&'a Tensor>,
    /// Weight of the positive term per class (broadcast along the last dim).
    pub pos_weight: Option<&'a Tensor>,
    /// How the per-element losses are reduced.
    pub reduction: Reduction,
}

/// PyTorch's `binary_cross_entropy_with_logits`, in its numerically stable form:
/// `(1 - y) x + l softplus(-x)` with `softplus(z) = max(z, 0) + log1p(exp(-|z|))` (PyTorch's
/// `-log_sigmoid(x)`) and `l = 1 + (pos_weight - 1) y`. f16 logits with an f32 target give an
/// f32 loss; f32 logits with an f16 target give an f16 loss, as PyTorch's in-place kernel.
pub fn binary_cross_entropy_with_logits(
    input: &Tensor,
    target: &Tensor,
    o: &BceWithLogitsOptions,
) -> Result<Tensor> {
    // PyTorch's kernel builds the loss in place in `1 - target`: an f16 target makes the
    // loss of f32 logits f16, each in-place step rounding to it.
    let half_loss = input.dtype() == DType::F32 && target.dtype() == DType::F16;
    let loss = bce_with_logits_composed(input, target, o, half_loss)?;
    // The node below saves the cast copies of operands of another dtype; PyTorch's one node
    // saves the caller's input, target, weight and pos_weight.
    let cast = |t: Option<&Tensor>| t.is_some_and(|t| t.dtype() != input.dtype());
    if cast(Some(target)) || cast(o.weight) || cast(o.pos_weight) {
        let callers: Vec<&Tensor> = [Some(input), Some(target), o.weight, o.pos_weight]
            .into_iter()
            .flatten()
            .collect();
        return Ok(saving_inputs(
            "BinaryCrossEntropyWithLogitsBackward0",
            loss,
            &callers,
        ));
    }
    Ok(loss)
}

/// [`binary_cross_entropy_with_logits`] on operands of one dtype, as one node; with
/// `half_loss` (f32 logits, an f16 target) the loss is f16, rounded after each of PyTorch's
/// in-place steps: `(1 - y)`, its product with x, the difference with the log-sigmoid term,
/// the weight's product.
fn bce_with_logits_composed(
    input: &Tensor,
    target: &Tensor,
    o: &BceWithLogitsOptions,
    half_loss: bool,
) -> Result<Tensor> {
    let op = "binary_cross_entropy_with_logits";
    if let Some((i, t)) = promoted(input, target)? {
        return bce_with_logits_composed(&i, &t, o, half_loss);
    }
    // The shapes first: the functional raises its size error before any kernel.
    same_shape_any_dtype(op, input, target)?;
    // PyTorch multiplies both in place into the input-shaped loss: each must broadcast to
    // the input's shape without growing it (a [N] weight on [N, 1] logits is an error there,
    // not an [N, N] loss), and is cast to the loss's dtype.
    // derivatives.yaml has no formula for either: PyTorch's autograd layer raises, in the
    // arguments' order, before the kernel's checks (not a silent gradient).
    use crate::ops::loss_options::no_requires_grad;
    no_requires_grad(op, op, "weight", o.weight)?;
    no_requires_grad(op, op, "pos_weight", o.pos_weight)?;
    // The kernel's first op, log_sigmoid, dispatches on the input's dtype.
    float_kernel(op, "log_sigmoid_cpu", input)?;
    input.same_dtype(op, target)?;
    let fit = |name: &str, w: &Tensor| -> Result<Tensor> {
        input.same_device(op, w)?;
        if w.layout().broadcast_to(input.shape()).is_err() {
            return Err(Error::shape(
                op,
                format!(
                    "{name} of shape {:?} must broadcast to the input's shape {:?}",
                    w.shape(),
                    input.shape()
                ),
            ));
        }
        w.to_dtype(input.dtype())
    };
    // The kernel multiplies by pos_weight first, then by weight.
    let pos_weight = o.pos_weight.map(|w| fit("pos_weight", w)).transpose()?;
    let weight = o.weight.map(|w| fit("weight", w)).transpose()?;
    let loss = {
        let _guard = crate::autograd::NoGradGuard::new();
        // log(1 + e^-x) in one kernel, as PyTorch's log_sigmoid: max(-x, 0) + log1p(e^-|x|)
        // keeps the small term's digits (log(1 + tiny) rounds it to 0, and f16 steps of 1e-3
        // made the loss at x = 4 1.3% high).
        let softplus = input.neg()?.unary(crate::ops::UnaryOp::Softplus)?;
        let term = match &pos_weight {
            Some(pw) => {
                let l = pw.add_scalar(-1.0)?.mul(target)?.add_scalar(1.0)?;
                l.mul(&softplus)?
            }
            None => softplus,
        };
        let round = |t: Tensor| match half_loss {
            true => t.to_dtype(DType::F16)?.to_dtype(DType::F32),
            false => Ok(t),
        };
        let one_minus = round(target.scalar_op(crate::ops::ScalarOp::RSub, 1.0)?)?;
        let loss = round(round(one_minus.mul(input)?)?.add(&term)?)?;
        let loss = match &weight {
            Some(w) => round(loss.mul(w)?)?,
            None => loss,
        };
        match half_loss {
            true => loss.to_dtype(DType::F16)?,
            false => loss,
        }
    };
    let loss = crate::autograd::record(loss, &[input, target], |_| {
        Box::new(BceWithLogitsBackward {
            x: input.detach(),
            y: target.detach(),
            w: weight.as_ref().map(Tensor::detach),
            pw: pos_weight.as_ref().map(Tensor::detach),
        })
    });
    reduce(loss, o.reduction)
}

/// PyTorch's binary_cross_entropy_with_logits_backward and its target gradient, with
/// `t = pos_weight y`: `dx = g w ((t + 1 - y) sigmoid(x) - t)` (`sigmoid(x) - y` without
/// pos_weight) and `dy = g w (pos_weight softplus(-x) - softplus(x))` (`-x` without). Explicit,
/// not the composed forward's chain rule: that gives `(1 - y) - l sigmoid(-x)`, whose two
/// terms cancel in f16 (exactly 0 for y = 0 and x < -8.3, where PyTorch's is about 1e-4).
struct BceWithLogitsBackward {
    x: Tensor,
    y: Tensor,
    w: Option<Tensor>,
    pw: Option<Tensor>,
}

impl BackwardOp for BceWithLogitsBackward {
    fn name(&self) -> &'static str {
        "binary_cross_entropy_with_logits"
    }

    fn backward(&self, grads: &[Option<Tensor>], needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let Some(gw) = super::loss_options::weighted_grad(grads, self.w.as_ref())? else {
            return Ok(vec![None, None]);
        };
        let (x, y) = (&self.x, &self.y);
        let dx = if needs.first() == Some(&true) {
            let d = match &self.pw {
                Some(pw) => {
                    let t = pw.mul(y)?;
                    t.sub(y)?.add_scalar(1.0)?.mul(&x.sigmoid()?)?.sub(&t)?
                }
                None => x.sigmoid()?.sub(y)?,
            };
            Some(gw.mul(&d)?)
        } else {
            None
        };
        let dy = if needs.get(1) == Some(&true) {
            let d = match &self.pw {
                Some(pw) => {
                    let sp = |z: &Tensor| z.unary(crate::ops::UnaryOp::Softplus);
                    pw.mul(&sp(&x.neg()?)?)?.sub(&sp(x)?)?
                }
                None => x.neg()?,
            };
            Some(gw.mul(&d)?)
        } else {
            None
        };
        Ok(vec![dx, dy])
    }

    fn saved(&self) -> Vec<&Tensor> {
        [&self.x, &self.y]
            .into_iter()
            .chain(&self.w)
            .chain(&self.pw)
            .collect()
    }
}

/// PyTorch's `cross_entropy(input, target)`: input logits `[N, C]`, `[C]` or
/// `[N, C, d1, ...]`. An i32 `target` holds class indices (`[N]`, `[]` or `[N, d1, ...]`;
/// `ignore_index`, `label_smoothing` and class `weight` as PyTorch); a float `target` of the
/// input's shape holds class probabilities ([`cross_entropy_probs`]). Numerically stable (a
/// fused log_softmax) and differentiable in the input.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::ops::{cross_entropy, CrossEntropyOptions};
/// use wgtensor::{Device, Tensor};
/// let dev = Device::new()?;
/// let logits = Tensor::from_slice(&dev, &[2.0f32, 0.0, 0.0, 0.0, 3.0, 0.0], &[2, 3])?;
/// let labels = Tensor::from_slice(&dev, &[0i32, 1], &[2])?;
/// let loss = cross_entropy(&logits, &labels, &CrossEntropyOptions::default())?;
/// let expect = ((1.0 + 2.0 * (-2.0f64).exp()).ln() + (1.0 + 2.0 * (-3.0f64).exp()).ln()) / 2.0;
/// assert!((loss.to_vec::<f32>()?[0] as f64 - expect).abs() < 1e-6);
/// # Ok(()) }
/// ```
pub fn cross_entropy(input: &Tensor, target: &Tensor, o: &CrossEntropyOptions) -> Result<Tensor> {
    if input.rank() == 0 && target.dtype() == crate::DType::I32 {
        // Its class-index path runs log_softmax over dim 1 first.
        return Err(Error::shape("cross_entropy", CLASS_DIM_OF_SCALAR));
    }
    // PyTorch takes a target of the input's shape as class probabilities before it looks at
    // the dtype, so integer labels shaped like the logits get this, not a shape error.
    if target.dtype() == crate::DType::I32 && target.shape() == input.shape() {
        return Err(Error::arg(
            "cross_entropy",
            format!(
                "Expected floating point type for target with class probabilities, got Int (a \
                 target of the input's shape {:?} holds class probabilities; class indices \
                 have the input's shape without the class dim)",
                input.shape()
            ),
        ));
    }
    if target.dtype() == crate::DType::I32 {
        crate::ops::nll::cross_entropy_indices(input, target, o)
    } else {
        cross_entropy_probs(input, target, o)
    }
}

/// PyTorch's `cross_entropy` with class-probability targets: input logits `[N, C, d1, ...]`
/// (or `[C]`), target probabilities of the same shape; the loss of each sample is
/// `-sum_c w_c y_c log_softmax(x)_c` over the class dim (1, or 0 for a `[C]` input).
pub fn cross_entropy_probs(
    input: &Tensor,
    target: &Tensor,
    o: &CrossEntropyOptions,
) -> Result<Tensor> {
    let op = "cross_entropy";
    if let Some((i, t)) = promoted(input, target)? {
        return cross_entropy_probs(&i, &t, o);
    }
    if input.shape() != target.shape() {
        // PyTorch takes its class-index branch for any other shape, which checks
        // label_smoothing first.
        o.check_label_smoothing(op)?;
    }
    if target.rank() + 1 == input.rank() && input.shape() != target.shape() {
        // Class indices given as floats (labels built as f32).
        return Err(Error::shape(
            op,
            format!(
                "target {:?} of shape {:?} looks like class indices for input {:?}: class \
                 indices must be an I32 tensor (convert with .to_dtype(DType::I32)); a float \
                 target holds class probabilities and has the input's shape",
                target.dtype(),
                target.shape(),
                input.shape()
            ),
        ));
    }
    same_shape(op, input, target)?;
    if input.rank() == 0 {
        return Err(Error::shape(op, CLASS_DIM_OF_SCALAR));
    }
    // cross_entropy_loss_symint's order for probability targets: ignore_index, then
    // cross_entropy_loss_prob_target's weight and label_smoothing checks.
    if o.ignore_index >= 0 {
        return Err(Error::arg(
            op,
            format!(
                "ignore_index is not supported for floating point target (ignore_index {}: \
                 leave it at -100, or pass class indices as an I32 target)",
                o.ignore_index
            ),
        ));
    }
    let cdim = if input.rank() == 1 { 0 } else { 1 };
    let c = input.shape()[cdim];
    if let Some(w) = o.weight {
        input.same_device(op, w)?;
        if w.shape() != [c] {
            return Err(Error::shape(
                op,
                format!(
                    "weight tensor should be defined either for all {c} classes or no classes \
                     but got weight tensor of shape: {:?}",
                    w.shape()
                ),
            ));
        }
    }
    let e = o.check_label_smoothing(op)?;
    let logp = input.log_softmax(cdim as isize)?;
    let mut y = target.clone();
    if e > 0.0 {
        y = y.mul_scalar(1.0 - e)?.add_scalar(e / c as f64)?;
    }
    let mut prod = logp.mul(&y)?;
    if let Some(w) = o.weight {
        // [C] along the class dim: [C, 1, ..., 1].
        let mut ws = vec![c];
        ws.extend(std::iter::repeat_n(1, input.rank() - cdim - 1));
        prod = prod.mul(&w.reshape(&ws)?)?;
    }
    let per_sample = prod.sum(cdim as isize, false)?.neg()?;
    if o.reduction == Reduction::Mean && input.numel() == 0 {
        // PyTorch's mean over an empty input (no classes too) is NaN; the mean of the
        // per-sample sums over 0 classes would be 0.
        return per_sample.sum_all()?.mul_scalar(f64::NAN);
    }
    reduce(per_sample, o.reduction)
}
