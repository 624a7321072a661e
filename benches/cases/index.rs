//! Index ops at a real vocabulary size: the backward of an embedding lookup (V = 8,000 rows of
//! E = 64, L = 2,048 ids, Zipf-like repeats).
//!
//! - `embedding_backward`: the crate's path, bucketing the ids first (ops/segment.rs).
//! - `embedding_backward_gather`: the same sums through `scatter_add` over a broadcast index,
//!   where every output element scans all L ids (the gather form the general scatter uses):
//!   the cost the bucketing avoids. Compare the two `ms=` from one run.

use wgtensor::ops::embedding;
use wgtensor::{DType, Device, Tensor};

use super::inputs::tensor;
use super::{Case, Run};

const V: usize = 8000;
const E: usize = 64;
const L: usize = 2048;

/// Ids with many repeats of small ids (a rough Zipf shape), all in range.
fn ids() -> Vec<i32> {
    (0..L)
        .map(|j| {
            let r = (j * 2_654_435_761usize) % 1000;
            ((r * r * r) / 1_000_000 * V / 1000) as i32
        })
        .collect()
}

fn bucketed(dev: &Device) -> wgtensor::Result<Run> {
    let w = Tensor::zeros(dev, &[V, E], DType::F32)?.requires_grad()?;
    let idx = Tensor::from_slice(dev, &ids(), &[L])?;
    let g = tensor(dev, &[L, E], DType::F32, 7)?;
    dev.sync()?;
    Ok(Box::new(move || {
        let y = embedding(&idx, &w, None)?;
        let grads = y.mul(&g)?.sum_all()?.backward()?;
        // Keep the gradient alive until the run's sync.
        let _ = grads.get(&w).cloned();
        Ok(())
    }))
}

fn gather_form(dev: &Device) -> wgtensor::Result<Run> {
    let zeros = Tensor::zeros(dev, &[V, E], DType::F32)?;
    let idx = Tensor::from_slice(dev, &ids(), &[L, 1])?.broadcast_to(&[L, E])?;
    let g = tensor(dev, &[L, E], DType::F32, 7)?;
    dev.sync()?;
    Ok(Box::new(move || {
        let _ = zeros.scatter_add(0, &idx, &g)?;
        Ok(())
    }))
}

pub fn cases() -> Vec<Case> {
    vec![
        Case::new("embedding_backward", bucketed),
        Case::new("embedding_backward_gather", gather_form),
    ]
}
