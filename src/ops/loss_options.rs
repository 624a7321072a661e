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
    /// A weight per class (`[C]`).
    pub weight: Option<&'a Tensor>,
    /// Class-index targets equal to this value count for nothing (PyTorch's default -100).
    /// Probability targets take only a negative value (an error otherwise, as in PyTorch).
    pub ignore_index: i64,
    /// Mixes the target with the uniform distribution: `y (1 - e) + e / C`.
    pub label_smoothing: f64,
    /// How the per-sample losses are reduced: for class-index targets `Mean` divides by the
    /// summed weights of the counted targets; for probability targets it is the mean over
    /// samples, as PyTorch's.
    pub reduction: Reduction,
}

impl CrossEntropyOptions<'_> {
    /// PyTorch's check, for class indices and probabilities alike.
    pub(crate) fn check_label_smoothing(&self, op: &'static str) -> Result<()> {
        if !(0.0..=1.0).contains(&self.label_smoothing) {
            return Err(Error::arg(
                op,
                format!(
                    "label_smoothing must be in [0, 1], got {}",
                    self.label_smoothing
                ),
            ));
        }
        Ok(())
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
