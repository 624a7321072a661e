//! Layer / group norm cases (shaders/norm.wgsl): bandwidth-bound, so they report `gbps=` over
//! effective bytes (x read and y written once, dy too for the backward; the per-channel
//! vectors are not counted).
//!
//! - `layer_norm_fwd`: a transformer's [tokens, hidden] = [4096, 768] with weight and bias.
//! - `layer_norm_fwd_bwd`: the same forward and its fused backward (dx, dweight, dbias).
//! - `group_norm_fwd`: [8, 64, 56, 56] in 32 groups, with weight and bias.

use wgtensor::ops::{group_norm, layer_norm};
use wgtensor::{DType, Device};

use super::inputs::tensor;
use super::{Case, Run};

const LN: [usize; 2] = [4096, 768];
const GN: [usize; 4] = [8, 64, 56, 56];

fn bytes(shape: &[usize], tensors: usize) -> f64 {
    (shape.iter().product::<usize>() * 4 * tensors) as f64
}

fn ln_fwd(dev: &Device) -> wgtensor::Result<Run> {
    let x = tensor(dev, &LN, DType::F32, 1)?;
    let w = tensor(dev, &[LN[1]], DType::F32, 2)?;
    let b = tensor(dev, &[LN[1]], DType::F32, 3)?;
    dev.sync()?;
    Ok(Box::new(move || {
        layer_norm(&x, &[LN[1]], Some(&w), Some(&b), 1e-5).map(drop)
    }))
}

fn ln_fwd_bwd(dev: &Device) -> wgtensor::Result<Run> {
    let x = tensor(dev, &LN, DType::F32, 1)?.requires_grad()?;
    let w = tensor(dev, &[LN[1]], DType::F32, 2)?.requires_grad()?;
    let b = tensor(dev, &[LN[1]], DType::F32, 3)?.requires_grad()?;
    let dy = tensor(dev, &LN, DType::F32, 4)?;
    dev.sync()?;
    Ok(Box::new(move || {
        let y = layer_norm(&x, &[LN[1]], Some(&w), Some(&b), 1e-5)?;
        let grads = y.backward_with_grad(&dy)?;
        // Keep the gradients alive until the run's sync.
        let _ = (grads.get(&x).cloned(), grads.get(&w).cloned());
        Ok(())
    }))
}

fn gn_fwd(dev: &Device) -> wgtensor::Result<Run> {
    let x = tensor(dev, &GN, DType::F32, 1)?;
    let w = tensor(dev, &[GN[1]], DType::F32, 2)?;
    let b = tensor(dev, &[GN[1]], DType::F32, 3)?;
    dev.sync()?;
    Ok(Box::new(move || {
        group_norm(&x, 32, Some(&w), Some(&b), 1e-5).map(drop)
    }))
}

pub fn cases() -> Vec<Case> {
    vec![
        Case::new("layer_norm_fwd", ln_fwd).bytes(bytes(&LN, 2)),
        // Forward: x read, y written; backward: x and dy read twice (dx, then the column
        // reduction), dx written.
        Case::new("layer_norm_fwd_bwd", ln_fwd_bwd).bytes(bytes(&LN, 2 + 5)),
        Case::new("group_norm_fwd", gn_fwd).bytes(bytes(&GN, 2)),
    ]
}
