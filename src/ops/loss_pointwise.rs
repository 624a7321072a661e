//! The pointwise losses beside `mse_loss` (loss.rs): PyTorch's `l1_loss`, `smooth_l1_loss`,
//! `huber_loss`, `binary_cross_entropy` (on probabilities) and `kl_div`, with its formulas,
//! defaults and argument checks, composed from elementwise ops so autograd differentiates
//! them (a select's gradient takes the branch its value took); binary_cross_entropy,
//! smooth_l1 and huber record PyTorch's explicit backward instead.

use super::loss::{
    broadcastable, float_kernel, promoted, promoted_numeric, promoted_regression, reduce,
    same_shape, shapes_broadcast,
};
use super::loss_options::Reduction;
use super::saved_inputs::saving_inputs;
use super::ScalarOp;
use crate::autograd::{record, BackwardOp, NoGradGuard};
use crate::{DType, Error, Result, Tensor};

/// Mean absolute error `|input - target|` (PyTorch's `l1_loss`; input and target broadcast,
/// as [`mse_loss`](super::mse_loss)). Its gradient is `sign(input - target)`, 0 where they
/// are equal, as PyTorch's.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::ops::{l1_loss, Reduction};
/// use wgtensor::{Device, Tensor};
/// let dev = Device::new()?;
/// let x = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0], &[3])?;
/// let y = Tensor::from_slice(&dev, &[1.5f32, 2.0, 1.0], &[3])?;
/// assert_eq!(l1_loss(&x, &y, Reduction::Sum)?.item()?, 2.5);
/// # Ok(()) }
/// ```
pub fn l1_loss(input: &Tensor, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
    if let Some((i, t)) = promoted_regression(input, target)? {
        return l1_loss(&i, &t, reduction);
    }
    broadcastable("l1_loss", input, target)?;
    // PyTorch's l1_loss of integers is integer arithmetic, which this crate has not (named
    // here, not by the subtraction inside).
    input.require_float("l1_loss")?;
    reduce(input.sub(target)?.abs()?, reduction)
}

/// `0.5 d^2 / beta` where `|d| < beta`, else `|d| - 0.5 beta`, with `d = input - target`
/// (PyTorch's `smooth_l1_loss`; its default `beta` is 1, and `beta = 0` is [`l1_loss`]).
/// Input and target broadcast. Errors for a negative or NaN `beta`.
pub fn smooth_l1_loss(
    input: &Tensor,
    target: &Tensor,
    reduction: Reduction,
    beta: f64,
) -> Result<Tensor> {
    let loss = smooth_l1_composed(input, target, reduction, beta)?;
    // F.smooth_l1_loss calls l1_loss, which saves no input, for beta == 0 only.
    Ok(match beta == 0.0 {
        true => loss,
        false => saving_inputs("SmoothL1LossBackward0", loss, &[input, target]),
    })
}

/// [`smooth_l1_loss`] without the node that saves its inputs.
fn smooth_l1_composed(
    input: &Tensor,
    target: &Tensor,
    reduction: Reduction,
    beta: f64,
) -> Result<Tensor> {
    let op = "smooth_l1_loss";
    if beta != 0.0 {
        // beta 0 is F.smooth_l1_loss's l1_loss, which broadcasts in its kernel.
        shapes_broadcast(op, input, target)?;
    }
    if beta.is_nan() || beta < 0.0 {
        return Err(Error::arg(
            op,
            format!("smooth_l1_loss does not support negative values for beta, got {beta}"),
        ));
    }
    if beta == 0.0 {
        return l1_loss(input, target, reduction);
    }
    if let Some((i, t)) = promoted_regression(input, target)? {
        return smooth_l1_composed(&i, &t, reduction, beta);
    }
    broadcastable(op, input, target)?;
    float_kernel(op, "smooth_l1_cpu", input)?;
    // With m = min(|d|, beta): 0.5 m^2 / beta + (|d| - m), without a select, whose
    // unselected branch would turn an infinite d into NaN.
    let loss = kinked(input, target, Kink::SmoothL1(beta), |d, dt| {
        let beta = param_in(beta, dt);
        if (beta as f32) < f32::MIN_POSITIVE {
            // A beta that rounds to 0 or a subnormal in f32 (the kernels' type; a GPU may
            // flush subnormals) or f16: l1, as PyTorch's kernel, which casts it, computes it
            // (up to differences below 1.2e-38); 0 / 0 would make every loss NaN.
            return Ok(d.clone());
        }
        let m = d.min_scalar_raw(beta)?;
        // (m / beta) m / 2: neither m^2 (underflow) nor 0.5 / beta (inf for a tiny beta).
        m.div_scalar(beta)?
            .mul(&m)?
            .mul_scalar(0.5)?
            .add(&d.sub(&m)?)
    })?;
    reduce(loss, reduction)
}

/// Which of the two kinked losses a [`KinkBackward`] differentiates.
#[derive(Clone, Copy)]
enum Kink {
    SmoothL1(f64),
    Huber(f64),
}

/// A kinked loss's elementwise terms, `terms(|input - target|, dtype)` computed untracked,
/// with PyTorch's explicit backward recorded over them from the one difference both need.
/// For f16 the terms run in f32 on the f16 `|input - target|` and round once, as PyTorch's
/// half kernels compute `z` in half, then the loss in float (`dtype` says which parameter
/// rounding applies: [`param_in`]).
fn kinked(
    input: &Tensor,
    target: &Tensor,
    kink: Kink,
    terms: impl FnOnce(&Tensor, DType) -> Result<Tensor>,
) -> Result<Tensor> {
    let (d, loss) = {
        let _guard = NoGradGuard::new();
        let d = input.sub(target)?;
        let z = d.abs()?;
        let loss = match z.dtype() {
            DType::F16 => terms(&z.to_dtype(DType::F32)?, DType::F16)?.to_dtype(DType::F16)?,
            dt => terms(&z, dt)?,
        };
        (d, loss)
    };
    Ok(record(loss, &[input, target], |_| {
        Box::new(KinkBackward {
            d,
            input_shape: input.shape().to_vec(),
            target_shape: target.shape().to_vec(),
            kink,
        })
    }))
}

/// PyTorch's smooth_l1_backward / huber_backward: the gradient of `d = input - target` is
/// `d / beta` (smooth_l1) or `d` (huber) where `|d|` is below the threshold, else
/// `sign(d)` or `delta sign(d)`: one clamp, `clamp(d / beta, -1, 1)` or
/// `clamp(d, -delta, delta)`, so a NaN difference gives a NaN gradient and a large delta
/// loses nothing to cancellation. Computed in f32 (the bounds need not fit f16).
struct KinkBackward {
    d: Tensor,
    input_shape: Vec<usize>,
    target_shape: Vec<usize>,
    kink: Kink,
}

impl BackwardOp for KinkBackward {
    fn name(&self) -> &'static str {
        match self.kink {
            Kink::SmoothL1(_) => "smooth_l1_loss",
            Kink::Huber(_) => "huber_loss",
        }
    }

    fn backward(&self, grads: &[Option<Tensor>], needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = grads.first().and_then(Option::as_ref) else {
            return Ok(vec![None, None]);
        };
        let d = self.d.to_dtype(DType::F32)?;
        let slope = match self.kink {
            // A beta below f32's normal range divides as the least normal f32 (see
            // smooth_l1_loss): sign(d) but for differences as tiny, NaN kept, 0 at 0.
            Kink::SmoothL1(beta) => d
                .div_scalar(beta.max(f64::from(f32::MIN_POSITIVE)))?
                .clamp(Some(-1.0), Some(1.0))?,
            // A delta past f32 never bends (see huber_loss).
            Kink::Huber(delta) if (delta as f32).is_infinite() => d,
            Kink::Huber(delta) => d.clamp(Some(-delta), Some(delta))?,
        };
        let gd = slope.mul(&g.to_dtype(DType::F32)?)?.to_dtype(g.dtype())?;
        let dx = if needs.first() == Some(&true) {
            Some(crate::autograd::sum_to(&gd, &self.input_shape)?)
        } else {
            None
        };
        let dy = if needs.get(1) == Some(&true) {
            Some(crate::autograd::sum_to(&gd.neg()?, &self.target_shape)?)
        } else {
            None
        };
        Ok(vec![dx, dy])
    }

    fn saved(&self) -> Vec<&Tensor> {
        vec![&self.d]
    }
}

/// `0.5 d^2` where `|d| < delta`, else `delta (|d| - 0.5 delta)`, with `d = input - target`
/// (PyTorch's `huber_loss`; its default `delta` is 1, where it equals [`smooth_l1_loss`]).
/// Input and target broadcast. Errors for a `delta` that is not positive.
pub fn huber_loss(
    input: &Tensor,
    target: &Tensor,
    reduction: Reduction,
    delta: f64,
) -> Result<Tensor> {
    let loss = huber_composed(input, target, reduction, delta)?;
    Ok(saving_inputs("HuberLossBackward0", loss, &[input, target]))
}

/// [`huber_loss`] without the node that saves its inputs.
fn huber_composed(
    input: &Tensor,
    target: &Tensor,
    reduction: Reduction,
    delta: f64,
) -> Result<Tensor> {
    let op = "huber_loss";
    shapes_broadcast(op, input, target)?;
    if delta.is_nan() || delta <= 0.0 {
        return Err(Error::arg(
            op,
            format!("huber_loss does not support non-positive values for delta, got {delta}"),
        ));
    }
    // Mixed float dtypes computed in the promoted one, each element's loss stored in the
    // input's (PyTorch's kernel writes into `empty_like(input)`: an f16 element past 65504 is
    // inf before any mean), then reduced.
    if let Some((i, t)) = promoted_numeric(input, target)? {
        let loss = huber_composed(&i, &t, Reduction::None, delta)?;
        let loss = match loss.dtype() == input.dtype() {
            true => loss,
            false => loss.to_dtype(input.dtype())?,
        };
        return reduce(loss, reduction);
    }
    broadcastable(op, input, target)?;
    float_kernel(op, "huber_cpu", input)?;
    // Infinite once cast to f32 (the kernels' type), as PyTorch's kernel casts it; the
    // linear term below would add inf * 0 = NaN.
    let loss = kinked(input, target, Kink::Huber(delta), |d, dt| {
        let delta = param_in(delta, dt);
        if (delta as f32).is_infinite() {
            // Never linear: half the squared error (the form below would add inf * 0).
            // Halved first, as PyTorch's 0.5 * z * z: d * d overflows f16 from 256.
            d.mul_scalar(0.5)?.mul(d)
        } else {
            huber_terms(d, delta)
        }
    })?;
    reduce(loss, reduction)
}

/// A loss parameter as the kernel of a `dtype` input holds it: rounded to f16 for f16
/// (`scalar_t(beta)`, past 65504 infinite), else as given.
fn param_in(v: f64, dtype: DType) -> f64 {
    match dtype {
        DType::F16 => f64::from(crate::dtype::f16_of(v).to_f32()),
        _ => v,
    }
}

/// `0.5 m^2 + delta (|d| - m)` for `d` holding `|input - target|`.
fn huber_terms(d: &Tensor, delta: f64) -> Result<Tensor> {
    // With m = min(|d|, delta): 0.5 m^2 + delta (|d| - m), as smooth_l1_loss.
    let m = d.min_scalar_raw(delta)?;
    // (m / 2) m: m^2 first would overflow f16 for delta past 256.
    m.mul_scalar(0.5)?
        .mul(&m)?
        .add(&d.sub(&m)?.mul_scalar(delta)?)
}

/// PyTorch's `binary_cross_entropy` on probabilities:
/// `-w (y log(x) + (1 - y) log(1 - x))`, each log clamped at -100 as PyTorch's (so a
/// probability of exactly 0 or 1 gives a finite loss), and PyTorch's gradients
/// (`w (x - y) / max(x (1 - x), 1e-12)` for the input, `-w logit(x)` for the target).
/// `weight` rescales each element (broadcast to the input); it takes no gradient, as in
/// PyTorch, so a tracked weight is an error. The input and target must hold probabilities in
/// [0, 1], as PyTorch checks: an element outside, or NaN, makes the next sync or readback
/// return an error naming the operand and the value (checked on the device, as out-of-range
/// indices are; [`DeviceOptions::check_indices`](crate::DeviceOptions::check_indices) off
/// skips the check, and an input outside then gives NaN, a target outside a finite loss of the
/// formula). For logits use
/// [`binary_cross_entropy_with_logits`](super::binary_cross_entropy_with_logits), which is
/// numerically stable.
pub fn binary_cross_entropy(
    input: &Tensor,
    target: &Tensor,
    weight: Option<&Tensor>,
    reduction: Reduction,
) -> Result<Tensor> {
    let op = "binary_cross_entropy";
    same_shape(op, input, target)?;
    if let Some(w) = weight {
        input.same_device(op, w)?;
        let refuse = || {
            Err(Error::shape(
                op,
                format!(
                    "weight of shape {:?} does not broadcast to the input's shape {:?}",
                    w.shape(),
                    input.shape()
                ),
            ))
        };
        // F.binary_cross_entropy expands the weight with the target before the autograd
        // layer's check; the kernel's in-place product refuses a weight that grows the input.
        if crate::layout::broadcast_shapes(op, target.shape(), w.shape()).is_err() {
            return refuse();
        }
        super::loss_options::no_requires_grad(op, op, "weight", Some(w))?;
        if w.layout().broadcast_to(input.shape()).is_err() {
            return refuse();
        }
    }
    // The kernel's dispatch (after F.binary_cross_entropy's weight checks), before the value
    // checks, which read floats.
    float_kernel(op, "binary_cross_entropy", input)?;
    super::value_check::check_values(op, input, 0, 0.0, 1.0)?;
    super::value_check::check_values(op, target, 1, 0.0, 1.0)?;
    let loss = {
        let _guard = NoGradGuard::new();
        let (log_x, log_1mx) = clamped_logs(input)?;
        let one_minus_y = target.scalar_op(ScalarOp::RSub, 1.0)?;
        let loss = target
            .mul(&log_x)?
            .add(&one_minus_y.mul(&log_1mx)?)?
            .neg()?;
        times_weight(loss, weight)?
    };
    let loss = record(loss, &[input, target], |_| {
        Box::new(BceBackward {
            x: input.detach(),
            y: target.detach(),
            w: weight.map(Tensor::detach),
        })
    });
    reduce(loss, reduction)
}

/// `t` times the weight, as PyTorch's `t.mul_(weight)` (the loss and both gradients): an f16
/// `t` and an f32 weight multiply in f32 and round once; another weight takes `t`'s dtype.
fn times_weight(t: Tensor, w: Option<&Tensor>) -> Result<Tensor> {
    match w {
        None => Ok(t),
        Some(w) if (t.dtype(), w.dtype()) == (DType::F16, DType::F32) => {
            t.to_dtype(DType::F32)?.mul(w)?.to_dtype(DType::F16)
        }
        Some(w) => t.mul(&w.to_dtype(t.dtype())?),
    }
}

/// `max(log(x), -100)` and `max(log1p(-x), -100)`, PyTorch's clamped logs (NaN outside
/// [0, 1] and for NaN); log1p keeps a small x's `-x` where `log(1 - x)` rounds it to 0.
fn clamped_logs(x: &Tensor) -> Result<(Tensor, Tensor)> {
    Ok((
        x.log()?.max_scalar_raw(-100.0)?,
        x.neg()?.log1p()?.max_scalar_raw(-100.0)?,
    ))
}

/// PyTorch's binary_cross_entropy_backward and its target gradient:
/// `dx = g (x - y) / max(x (1 - x), 1e-12)` (finite at probabilities 0 and 1) and
/// `dy = -logit(x) g` (unclamped, as PyTorch's: infinite there), each then times the weight
/// (its own dtype, as the forward: [`times_weight`]).
struct BceBackward {
    x: Tensor,
    y: Tensor,
    w: Option<Tensor>,
}

impl BackwardOp for BceBackward {
    fn name(&self) -> &'static str {
        "binary_cross_entropy"
    }

    fn backward(&self, grads: &[Option<Tensor>], needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = grads.first().and_then(Option::as_ref) else {
            return Ok(vec![None, None]);
        };
        let x = &self.x;
        let dx = if needs.first() == Some(&true) {
            let denom = x
                .mul(&x.scalar_op(ScalarOp::RSub, 1.0)?)?
                .max_scalar_raw(1e-12)?;
            let dx = g.mul(&x.sub(&self.y)?)?.div(&denom)?;
            Some(times_weight(dx, self.w.as_ref())?)
        } else {
            None
        };
        let dy = if needs.get(1) == Some(&true) {
            // -logit(x), unclamped as PyTorch's (+-inf at probabilities 0 and 1).
            let log_1mx = x.scalar_op(ScalarOp::RSub, 1.0)?.log()?;
            let dy = log_1mx.sub(&x.log()?)?.mul(g)?;
            Some(times_weight(dy, self.w.as_ref())?)
        } else {
            None
        };
        Ok(vec![dx, dy])
    }

    fn saved(&self) -> Vec<&Tensor> {
        [&self.x, &self.y].into_iter().chain(&self.w).collect()
    }
}

/// How [`kl_div`] reduces (PyTorch's `reduction=` of `kl_div`, which adds `batchmean`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KlDivReduction {
    /// The per-element terms.
    None,
    /// Their sum divided by the batch size (`input.shape()[0]`, 1 for a scalar): the
    /// mathematical KL divergence per sample, PyTorch's recommended setting.
    BatchMean,
    /// Their sum.
    Sum,
    /// Their mean over every element (PyTorch's default, which warns that it is not the KL
    /// divergence per sample).
    #[default]
    Mean,
}

/// PyTorch's `kl_div(input, target)`: `input` holds log-probabilities; the terms are
/// `target (log(target) - input)`, 0 where `target` is 0 (PyTorch's `xlogy`), or with
/// `log_target` (the target given as log-probabilities) `exp(target) (target - input)`.
/// Input and target broadcast, as PyTorch's. A tracked target's gradient is `log(target) + 1 - input`, and `-input`
/// where the target is 0 (PyTorch's `xlogy` gives NaN there).
pub fn kl_div(
    input: &Tensor,
    target: &Tensor,
    reduction: KlDivReduction,
    log_target: bool,
) -> Result<Tensor> {
    let op = "kl_div";
    if !(input.dtype().is_float() && target.dtype().is_float()) {
        return Err(Error::arg(op, "kl_div: Integral inputs not supported."));
    }
    if let Some((i, t)) = promoted(input, target)? {
        return kl_div(&i, &t, reduction, log_target);
    }
    broadcastable(op, input, target)?;
    let terms = if log_target {
        target.exp()?.mul(&target.sub(input)?)?
    } else {
        // xlogy(t, t): a target of 0 adds nothing (0 log 0 would be NaN); its log reads 1
        // there, so neither the value nor the target's gradient meets log(0).
        let safe = target
            .eq_scalar(0.0)?
            .where_cond(&target.ones_like()?, target)?;
        // xlogy computes t log(t) in float and rounds once (an f16 log rounded first, then
        // the product, was off by an ulp in a quarter of the values).
        let xlogy = match target.dtype() {
            DType::F16 => {
                let f = |t: &Tensor| t.to_dtype(DType::F32);
                f(target)?.mul(&f(&safe)?.log()?)?.to_dtype(DType::F16)?
            }
            _ => target.mul(&safe.log()?)?,
        };
        xlogy.sub(&target.mul(input)?)?
    };
    match reduction {
        KlDivReduction::None => Ok(terms),
        KlDivReduction::Sum => terms.sum_all(),
        KlDivReduction::Mean => terms.mean_all(),
        KlDivReduction::BatchMean => {
            let n = input.shape().first().copied().unwrap_or(1);
            terms.sum_all()?.div_scalar(n as f64)
        }
    }
}
