//! [`Reduction`] and [`CrossEntropyOptions`], shared by the composed losses (loss.rs) and the
//! fused NLL kernel (nll.rs), which loss.rs's `cross_entropy` calls down to.

use crate::{Error, Result, Tensor};

/// How a loss reduces its per-element values (PyTorch's `reduction=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reduction {
    /// The per-element losses, unreduced.
    None,
    /// Their mean (PyTorch's default); NaN for an empty input, as in PyTorch.
    #[default]
    Mean,
    /// Their sum.
    Sum,
}

/// Options of [`cross_entropy`](crate::ops::cross_entropy) and
/// [`cross_entropy_probs`](crate::ops::cross_entropy_probs) (PyTorch's keyword arguments and
/// defaults).
#[derive(Debug, Clone, Copy)]
pub struct CrossEntropyOptions<'a> {
    /// A weight per class (`[C]`; with class-index targets and inputs of rank 3 and more any
    /// shape of C elements, as PyTorch's `nll_loss2d` takes, except where label smoothing
    /// views it by its first dim and, under `Mean`, gathers from it as 1-D).
    pub weight: Option<&'a Tensor>,
    /// Class-index targets equal to this value count for nothing (PyTorch's default -100).
    /// Probability targets take only a negative value (an error otherwise, as in PyTorch).
    pub ignore_index: i64,
    /// Mixes the target with the uniform distribution: `y (1 - e) + e / C`. At most 1; 0,
    /// negative or NaN is no smoothing, as PyTorch's.
    pub label_smoothing: f64,
    /// How the per-sample losses are reduced: for class-index targets `Mean` divides by the
    /// summed weights of the counted targets; for probability targets it is the mean over
    /// samples, as PyTorch's.
    pub reduction: Reduction,
}

impl CrossEntropyOptions<'_> {
    /// PyTorch's check, for class indices and probabilities alike: smoothing applies only
    /// above 0, where it must be at most 1; a negative or NaN value is no smoothing (PyTorch
    /// tests `label_smoothing > 0.0` before its bound). Returns the smoothing to apply.
    pub(crate) fn check_label_smoothing(&self, op: &'static str) -> Result<f64> {
        let e = self.label_smoothing;
        if e > 1.0 {
            return Err(Error::arg(
                op,
                format!(
                    "label_smoothing must be between 0.0 and 1.0. Got: {}",
                    crate::error::cpp_double(e)
                ),
            ));
        }
        Ok(if e > 0.0 { e } else { 0.0 })
    }
}

impl Default for CrossEntropyOptions<'_> {
    fn default() -> Self {
        CrossEntropyOptions {
            weight: None,
            ignore_index: -100,
            label_smoothing: 0.0,
            reduction: Reduction::Mean,
        }
    }
}

/// PyTorch's `check_no_requires_grad` for a loss argument derivatives.yaml gives no formula
/// (a class or element `weight`, `pos_weight`): an error in its words while grad mode records
/// the argument, where a gradient would otherwise be silently missing. `function` is the ATen
/// function PyTorch names (`nll_loss_forward` under `cross_entropy`).
pub(crate) fn no_requires_grad(
    op: &'static str,
    function: &str,
    arg: &str,
    t: Option<&Tensor>,
) -> Result<()> {
    if t.is_some_and(|t| crate::autograd::records([t])) {
        return Err(Error::arg(
            op,
            format!(
                "The function '{function}' is not differentiable with respect to argument \
                 '{arg}'. This input cannot have requires_grad True. (pass a {arg} that does \
                 not require grad, or detach it)"
            ),
        ));
    }
    Ok(())
}

/// A loss backward's seed: the upstream gradient times the element weight, `None` when no
/// gradient reached the loss.
pub(crate) fn weighted_grad(
    grads: &[Option<Tensor>],
    w: Option<&Tensor>,
) -> Result<Option<Tensor>> {
    let Some(g) = grads.first().and_then(Option::as_ref) else {
        return Ok(None);
    };
    Ok(Some(match w {
        Some(w) => g.mul(w)?,
        None => g.clone(),
    }))
}
