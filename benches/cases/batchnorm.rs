//! Batch-norm cases: bandwidth-bound, so they report `gbps=` over effective bytes (every tensor
//! element read or written once; the per-channel vectors, 2 KiB, are not counted) and are
//! paired with `copy_shader` for `of_shader=`.

use wgtensor::ops::{
    batch_norm_backward, batch_norm_inference, batch_norm_train, BatchNormOptions, BatchNormState,
};
use wgtensor::{DType, Device};

use super::inputs::tensor;
use super::{Case, Run};

/// The batch-norm benchmark shape (ResNet-50's first stage), f32.
const BN_SHAPE: [usize; 4] = [32, 64, 56, 56];
/// Bytes of one BN_SHAPE tensor; the copy baselines move tensors of this size too.
pub const BN_BYTES: f64 = (32 * 64 * 56 * 56 * 4) as f64;

/// Training forward with affine parameters and running statistics (momentum 0.1).
fn bn_train_case(dev: &Device) -> wgtensor::Result<Run> {
    bn_train_run(dev, BN_SHAPE)
}

/// [`bn_train_case`] on an input of `shape` ([N, C, H, W]).
pub fn bn_train_run(dev: &Device, shape: [usize; 4]) -> wgtensor::Result<Run> {
    let c = shape[1];
    let x = tensor(dev, &shape, DType::F32, 1)?;
    let g = tensor(dev, &[c], DType::F32, 2)?.add_scalar(2.0)?;
    let b = tensor(dev, &[c], DType::F32, 3)?;
    let mut st = BatchNormState::new(dev, c, DType::F32)?;
    dev.sync()?;
    Ok(Box::new(move || {
        batch_norm_train(
            &x,
            Some(&mut st),
            &BatchNormOptions {
                weight: Some(&g),
                bias: Some(&b),
                ..Default::default()
            },
        )
        .map(drop)
    }))
}

/// Backward with gamma, from the statistics of one training forward done at set-up.
fn bn_backward_case(dev: &Device) -> wgtensor::Result<Run> {
    let c = BN_SHAPE[1];
    let x = tensor(dev, &BN_SHAPE, DType::F32, 1)?;
    let dy = tensor(dev, &BN_SHAPE, DType::F32, 4)?;
    let g = tensor(dev, &[c], DType::F32, 2)?.add_scalar(2.0)?;
    let saved = batch_norm_train(
        &x,
        None,
        &BatchNormOptions {
            weight: Some(&g),
            ..Default::default()
        },
    )?
    .saved;
    dev.sync()?;
    Ok(Box::new(move || {
        batch_norm_backward(&dy, &x, Some(&g), &saved).map(drop)
    }))
}

/// Inference with running statistics and affine parameters, no fused activation.
fn bn_infer_case(dev: &Device) -> wgtensor::Result<Run> {
    let c = BN_SHAPE[1];
    let x = tensor(dev, &BN_SHAPE, DType::F32, 1)?;
    let g = tensor(dev, &[c], DType::F32, 2)?.add_scalar(2.0)?;
    let b = tensor(dev, &[c], DType::F32, 3)?;
    let rm = tensor(dev, &[c], DType::F32, 5)?;
    let rv = tensor(dev, &[c], DType::F32, 6)?.add_scalar(2.0)?;
    dev.sync()?;
    Ok(Box::new(move || {
        batch_norm_inference(
            &x,
            &rm,
            &rv,
            &BatchNormOptions {
                weight: Some(&g),
                bias: Some(&b),
                ..Default::default()
            },
        )
        .map(drop)
    }))
}

pub fn cases() -> Vec<Case> {
    vec![
        // x read once, y written once.
        Case::new("batchnorm_train", bn_train_case).bytes(2.0 * BN_BYTES),
        // dy and x read once, dx written once.
        Case::new("batchnorm_backward", bn_backward_case).bytes(3.0 * BN_BYTES),
        // x read once, y written once.
        Case::new("batchnorm_infer", bn_infer_case).bytes(2.0 * BN_BYTES),
    ]
}
