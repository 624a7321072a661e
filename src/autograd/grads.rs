//! [`Grads`]: the gradients a backward pass hands back, keyed by leaf.

use std::collections::HashMap;

use super::NoGradGuard;
use crate::{Result, Tensor};

/// Gradients of the leaves a backward pass reached, keyed by tensor (clones of a leaf share
/// its key).
#[derive(Default)]
pub struct Grads {
    pub(super) map: HashMap<u64, Tensor>,
}

impl std::fmt::Debug for Grads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grads")
            .field("tensors", &self.map.len())
            .finish()
    }
}

impl Grads {
    /// The gradient of `t`, if `t` is a leaf that the loss depends on and that required grad
    /// when the backward ran (a leaf frozen since keeps its key: this finds nothing for it
    /// from later passes).
    pub fn get(&self, t: &Tensor) -> Option<&Tensor> {
        self.map.get(&t.grad.as_ref()?.id)
    }
    /// Takes the gradient of `t` out of the map.
    pub fn remove(&mut self, t: &Tensor) -> Option<Tensor> {
        self.map.remove(&t.grad.as_ref()?.id)
    }
    /// Number of leaves with a gradient.
    pub fn len(&self) -> usize {
        self.map.len()
    }
    /// True when no leaf received a gradient.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Adds `other`'s gradients into these, leaf by leaf: PyTorch's accumulation into `.grad`
    /// over several `backward()` calls before one optimizer step (micro-batches). A leaf only
    /// `other` has is taken over; one both have gets the sum, computed without recording a
    /// graph. On an error nothing changes.
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{Device, Tensor};
    /// let dev = Device::new()?;
    /// let w = Tensor::from_slice(&dev, &[1.0f32, 2.0], &[2])?.requires_grad()?;
    /// let mut grads = w.mul_scalar(3.0)?.sum_all()?.backward()?; // d/dw = 3
    /// grads.accumulate(w.mul(&w)?.sum_all()?.backward()?)?; // + 2w
    /// assert_eq!(grads.get(&w).unwrap().to_vec::<f32>()?, vec![5.0, 7.0]);
    /// # Ok(()) }
    /// ```
    pub fn accumulate(&mut self, other: Grads) -> Result<()> {
        let _untracked = NoGradGuard::new();
        // Sums first, so a failure leaves both maps as they were.
        let mut sums = Vec::with_capacity(other.map.len());
        for (k, g) in &other.map {
            if let Some(prev) = self.map.get(k) {
                sums.push((*k, prev.add(g)?));
            }
        }
        let mut other = other.map;
        for (k, s) in sums {
            other.insert(k, s);
        }
        self.map.extend(other);
        Ok(())
    }
}
