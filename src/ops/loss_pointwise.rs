//! The pointwise losses beside `mse_loss` (loss.rs): PyTorch's `l1_loss`, `smooth_l1_loss`,
//! `huber_loss`, `binary_cross_entropy` (on probabilities) and `kl_div`, with its formulas,
//! defaults and argument checks, composed from elementwise ops so autograd differentiates
//! them (a select's gradient takes the branch its value took).

use super::loss::{reduce, same_shape};
use super::loss_options::Reduction;
use crate::{Error, Result, Tensor};

/// Mean absolute error `|input - target|` (PyTorch's `l1_loss`; shapes must match). Its
/// gradient is `sign(input - target)`, 0 where they are equal, as PyTorch's.
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
    same_shape("l1_loss", input, target)?;
    reduce(input.sub(target)?.abs()?, reduction)
}

/// `0.5 d^2 / beta` where `|d| < beta`, else `|d| - 0.5 beta`, with `d = input - target`
/// (PyTorch's `smooth_l1_loss`; its default `beta` is 1, and `beta = 0` is [`l1_loss`]).
/// Errors for a negative or NaN `beta` or shapes that differ.
pub fn smooth_l1_loss(
    input: &Tensor,
    target: &Tensor,
    reduction: Reduction,
    beta: f64,
) -> Result<Tensor> {
    let op = "smooth_l1_loss";
    if !(beta >= 0.0) {
        return Err(Error::arg(
            op,
            format!("smooth_l1_loss does not support negative values for beta, got {beta}"),
        ));
    }
    if beta == 0.0 {
        return l1_loss(input, target, reduction);
    }
    same_shape(op, input, target)?;
    let d = input.sub(target)?.abs()?;
    let quad = d.mul(&d)?.mul_scalar(0.5 / beta)?;
    let lin = d.add_scalar(-0.5 * beta)?;
    reduce(d.lt_scalar(beta)?.where_cond(&quad, &lin)?, reduction)
}

/// `0.5 d^2` where `|d| < delta`, else `delta (|d| - 0.5 delta)`, with `d = input - target`
/// (PyTorch's `huber_loss`; its default `delta` is 1, where it equals [`smooth_l1_loss`]).
/// Errors for a `delta` that is not positive or shapes that differ.
pub fn huber_loss(
    input: &Tensor,
    target: &Tensor,
    reduction: Reduction,
    delta: f64,
) -> Result<Tensor> {
    let op = "huber_loss";
    if !(delta > 0.0) {
        return Err(Error::arg(
            op,
            format!("huber_loss does not support non-positive values for delta, got {delta}"),
        ));
    }
    same_shape(op, input, target)?;
    let d = input.sub(target)?.abs()?;
    let quad = d.mul(&d)?.mul_scalar(0.5)?;
    let lin = d.add_scalar(-0.5 * delta)?.mul_scalar(delta)?;
    reduce(d.lt_scalar(delta)?.where_cond(&quad, &lin)?, reduction)
}

/// PyTorch's `binary_cross_entropy` on probabilities:
/// `-w (y log(x) + (1 - y) log(1 - x))`, each log clamped at -100 as PyTorch's (so a
/// probability of exactly 0 or 1 gives a finite loss). `weight` rescales each element
/// (broadcast to the input). The input should hold probabilities in [0, 1] (PyTorch checks
/// this on the device and fails; here a value outside gives NaN); for logits use
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
    let log_x = clamped_log(input)?;
    let log_1mx = clamped_log(&input.scalar_op(super::ScalarOp::RSub, 1.0)?)?;
    let one_minus_y = target.scalar_op(super::ScalarOp::RSub, 1.0)?;
    let mut loss = target
        .mul(&log_x)?
        .add(&one_minus_y.mul(&log_1mx)?)?
        .neg()?;
    if let Some(w) = weight {
        input.same_device(op, w)?;
        loss = loss.mul(w)?;
        if loss.shape() != input.shape() {
            return Err(Error::shape(
                op,
                format!(
                    "weight of shape {:?} does not broadcast to the input's shape {:?}",
                    w.shape(),
                    input.shape()
                ),
            ));
        }
    }
    reduce(loss, reduction)
}

/// `max(log(t), -100)`, PyTorch's clamped log in `binary_cross_entropy`, with a finite
/// gradient: where `t <= 0` the log reads 1 instead (its value replaced by -100), so its
/// backward never computes `0 / 0`; NaN stays NaN.
fn clamped_log(t: &Tensor) -> Result<Tensor> {
    let outside = t.le_scalar(0.0)?;
    let safe = outside.where_cond(&t.ones_like()?, t)?;
    let floor = Tensor::full(t.device(), &[], -100.0, t.dtype())?;
    outside.where_cond(&floor, &safe.log()?)?.max_scalar(-100.0)
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
/// Shapes must match.
pub fn kl_div(
    input: &Tensor,
    target: &Tensor,
    reduction: KlDivReduction,
    log_target: bool,
) -> Result<Tensor> {
    let op = "kl_div";
    same_shape(op, input, target)?;
    let terms = if log_target {
        target.exp()?.mul(&target.sub(input)?)?
    } else {
        // xlogy(t, t): a target of 0 adds nothing (0 log 0 would be NaN); its log reads 1
        // there, so neither the value nor the target's gradient meets log(0).
        let safe = target
            .eq_scalar(0.0)?
            .where_cond(&target.ones_like()?, target)?;
        target.mul(&safe.log()?)?.sub(&target.mul(input)?)?
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
