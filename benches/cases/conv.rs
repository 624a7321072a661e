//! Convolution cases: a ResNet-style 3x3 conv2d (dense, grouped, depthwise, weight gradient), a
//! grouped conv1d, and a groups sweep over conv1d. gflops count 2 x output elements x the taps
//! of one output (input channels per group x kernel size), padded taps included.

use wgtensor::ops::{
    conv1d, conv2d, conv2d_backward_weight, Conv1dOptions, Conv2dOptions, Padding,
};
use wgtensor::{DType, Device};

use super::inputs::tensor;
use super::{Case, Run};

/// x[8,64,56,56], w[64,64/groups,3,3], pad 1, stride 1.
const X2: [usize; 4] = [8, 64, 56, 56];

fn conv2d_flops(groups: usize) -> f64 {
    conv2d_flops_of(X2, groups)
}

/// Flops of a 3x3 conv2d on `x` with as many output channels as input channels.
pub fn conv2d_flops_of(x: [usize; 4], groups: usize) -> f64 {
    let [n, c, h, w] = x;
    2.0 * (n * c * h * w * (c / groups) * 9) as f64
}

fn conv2d_case(dev: &Device, groups: usize) -> wgtensor::Result<Run> {
    conv2d_run(dev, X2, groups)
}

/// A 3x3 conv2d, pad 1, on `x` with as many output channels as input channels, with bias.
pub fn conv2d_run(dev: &Device, x: [usize; 4], groups: usize) -> wgtensor::Result<Run> {
    let c = x[1];
    let x = tensor(dev, &x, DType::F32, 1)?;
    let w = tensor(dev, &[c, c / groups, 3, 3], DType::F32, 2)?;
    let b = tensor(dev, &[c], DType::F32, 3)?;
    let o = Conv2dOptions {
        padding: Padding::uniform(1),
        groups,
        ..Default::default()
    };
    dev.sync()?;
    Ok(Box::new(move || conv2d(&x, &w, Some(&b), &o).map(drop)))
}

fn wgrad_case(dev: &Device) -> wgtensor::Result<Run> {
    wgrad_run(dev, X2)
}

/// The weight gradient of [`conv2d_run`]'s dense conv on `x`.
pub fn wgrad_run(dev: &Device, x: [usize; 4]) -> wgtensor::Result<Run> {
    let dy = tensor(dev, &x, DType::F32, 4)?;
    let x = tensor(dev, &x, DType::F32, 1)?;
    let o = Conv2dOptions {
        padding: Padding::uniform(1),
        ..Default::default()
    };
    dev.sync()?;
    Ok(Box::new(move || {
        conv2d_backward_weight(&dy, &x, [3, 3], &o).map(drop)
    }))
}

/// conv1d x[n, c, l] * w[o, c/groups, 5], pad 2 (output length l).
fn conv1d_case(dev: &Device, x: [usize; 3], o: usize, groups: usize) -> wgtensor::Result<Run> {
    let xt = tensor(dev, &x, DType::F32, 5)?;
    let w = tensor(dev, &[o, x[1] / groups, 5], DType::F32, 6)?;
    let opts = Conv1dOptions {
        padding: wgtensor::ops::Padding1d::uniform(2),
        groups,
        ..Default::default()
    };
    dev.sync()?;
    Ok(Box::new(move || conv1d(&xt, &w, None, &opts).map(drop)))
}

fn conv1d_flops(x: [usize; 3], o: usize, groups: usize) -> f64 {
    2.0 * (x[0] * o * x[2] * (x[1] / groups) * 5) as f64
}

pub fn cases() -> Vec<Case> {
    let mut v = vec![
        Case::new("conv2d", |d| conv2d_case(d, 1)).flops(conv2d_flops(1)),
        Case::new("conv2d_grouped", |d| conv2d_case(d, 8)).flops(conv2d_flops(8)),
        Case::new("conv2d_depthwise", |d| conv2d_case(d, 64)).flops(conv2d_flops(64)),
        Case::new("conv1d_grouped", |d| conv1d_case(d, [4, 256, 32], 512, 128))
            .flops(conv1d_flops([4, 256, 32], 512, 128)),
        // The weight gradient of the conv2d case.
        Case::new("conv2d_wgrad", wgrad_case).flops(conv2d_flops(1)),
    ];
    // The MLX groups table: for a fixed input the time must not grow with the group count.
    const SWEEP: [(&str, [usize; 3], usize, usize); 9] = [
        ("conv1d_groups_sweep/x32_g1", [4, 32, 32], 32, 1),
        ("conv1d_groups_sweep/x32_g2", [4, 32, 32], 32, 2),
        ("conv1d_groups_sweep/x32_g4", [4, 32, 32], 32, 4),
        ("conv1d_groups_sweep/x32_g8", [4, 32, 32], 32, 8),
        ("conv1d_groups_sweep/x32_g16", [4, 32, 32], 32, 16),
        ("conv1d_groups_sweep/x32_g32", [4, 32, 32], 32, 32),
        ("conv1d_groups_sweep/x256_g2", [4, 256, 32], 512, 2),
        ("conv1d_groups_sweep/x256_g128", [4, 256, 32], 512, 128),
        ("conv1d_groups_sweep/x256_g256", [4, 256, 32], 512, 256),
    ];
    for (name, x, o, g) in SWEEP {
        v.push(Case::new(name, move |d| conv1d_case(d, x, o, g)).flops(conv1d_flops(x, o, g)));
    }
    v
}
