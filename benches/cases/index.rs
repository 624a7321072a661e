//! Index ops at a real vocabulary size: the backward of an embedding lookup (V = 8,000 rows of
//! E = 64, L = 2,048 ids, Zipf-like repeats).
//!
//! - `embedding_backward`: the crate's path, bucketing the ids first (ops/segment.rs).
//! - `embedding_backward_scatter`: the same sums alone through `scatter_add`, once over the
//!   broadcast index (`idx.unsqueeze(1).expand(L, E)`: the bucketed row scatter) and once over
//!   the same index materialized (`.contiguous()`: the general bucketed scatter, keyed by output
//!   element). Either would be the gather form before, every output element scanning all L ids
//!   (597 ms on lavapipe against 11.2 ms for the whole forward and backward above). Its
//!   cold first call is two ops' (each under 1 s on lavapipe).

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

fn scatter_forms(dev: &Device) -> wgtensor::Result<Run> {
    let zeros = Tensor::zeros(dev, &[V, E], DType::F32)?;
    let idx = Tensor::from_slice(dev, &ids(), &[L, 1])?.broadcast_to(&[L, E])?;
    let packed = idx.contiguous()?;
    let g = tensor(dev, &[L, E], DType::F32, 7)?;
    dev.sync()?;
    Ok(Box::new(move || {
        let _ = zeros.scatter_add(0, &idx, &g)?;
        let _ = zeros.scatter_add(0, &packed, &g)?;
        Ok(())
    }))
}

pub fn cases() -> Vec<Case> {
    vec![
        Case::new("embedding_backward", bucketed),
        Case::new("embedding_backward_scatter", scatter_forms),
    ]
}
