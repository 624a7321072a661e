//! `DeviceOptions::shader_checks`: dropping wgpu's loop counters and index clamps must not
//! change a single bit of any result. A kernel that indexed past one of its arrays would read
//! a clamped element under `Full` and something else without the clamps; one whose loop relied
//! on the counter would not end. The GPU plans (the kernels GPUs run, forced with `gpu_plans`)
//! of the tiled families, on ragged shapes that exercise every tile edge, under `Full` and
//! under `DivisionOnly` (what Vulkan GPUs compile by default), bit for bit.
#![cfg(not(target_arch = "wasm32"))]

use wgtensor::ops::{
    conv2d, conv2d_backward_weight, gemm, layer_norm, scaled_dot_product_attention, Conv2dOptions,
    GemmOptions, Padding, SdpaOptions,
};
use wgtensor::{Device, DeviceOptions, ShaderChecks, Tensor};

fn device(checks: ShaderChecks) -> Device {
    Device::with_options(DeviceOptions {
        gpu_plans: true,
        cooperative_matrix: false,
        shader_checks: checks,
        ..Default::default()
    })
    .expect("no wgpu adapter")
}

fn wave(n: usize, k: f32) -> Vec<f32> {
    (0..n).map(|i| ((i as f32 + 1.0) * k).sin()).collect()
}

fn t(dev: &Device, shape: &[usize], k: f32) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_slice(dev, &wave(n, k), shape).unwrap()
}

fn bits(x: &Tensor) -> Vec<u32> {
    x.to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// Every op's output on `dev`, in a fixed order.
fn outputs(dev: &Device) -> Vec<(&'static str, Vec<u32>)> {
    let mut out = Vec::new();
    // GEMM: ragged M, N and K (the 64- and 128-row tiles' edges), and a split-k shape.
    let a = t(dev, &[131, 77], 0.31);
    let b = t(dev, &[77, 69], 0.17);
    let o = GemmOptions::default();
    out.push(("gemm", bits(&gemm(&a, &b, &o).unwrap())));
    let a = t(dev, &[33, 4099], 0.07);
    let b = t(dev, &[4099, 35], 0.05);
    out.push(("gemm split-k", bits(&gemm(&a, &b, &o).unwrap())));
    // Convolution forward and weight gradient (the large-tile core and the direct kernel).
    let x = t(dev, &[2, 5, 11, 13], 0.23);
    let w = t(dev, &[40, 5, 3, 3], 0.11);
    let co = Conv2dOptions {
        padding: Padding::same([3, 3], [1, 1]),
        ..Default::default()
    };
    let y = conv2d(&x, &w, None, &co).unwrap();
    out.push(("conv2d", bits(&y)));
    let dw = conv2d_backward_weight(&y, &x, [3, 3], &co).unwrap();
    out.push(("conv2d weight gradient", bits(&dw)));
    // Reductions, softmax and a norm over long and short rows (split and unsplit plans).
    let r = t(dev, &[3, 5000], 0.013);
    out.push(("sum", bits(&r.sum(1, false).unwrap())));
    out.push(("column sum", bits(&r.sum(0, false).unwrap())));
    out.push(("softmax", bits(&r.softmax(1).unwrap())));
    out.push((
        "layer_norm",
        bits(&layer_norm(&r, &[5000], None, None, 1e-5).unwrap()),
    ));
    // Attention: a ragged query and key count on the 16-row tile.
    let q = t(dev, &[2, 19, 24], 0.19);
    let k = t(dev, &[2, 37, 24], 0.29);
    let v = t(dev, &[2, 37, 20], 0.41);
    let att = scaled_dot_product_attention(&q, &k, &v, &SdpaOptions::default()).unwrap();
    out.push(("attention", bits(&att)));
    // Several row blocks of the 16-row tile (33 queries over 70 keys, ragged blocks and
    // chunks), with gradients.
    let q = t(dev, &[2, 33, 20], 0.23).requires_grad().unwrap();
    let k = t(dev, &[2, 70, 20], 0.31).requires_grad().unwrap();
    let v = t(dev, &[2, 70, 36], 0.37).requires_grad().unwrap();
    let att = scaled_dot_product_attention(&q, &k, &v, &SdpaOptions::default()).unwrap();
    out.push(("attention (row blocks)", bits(&att)));
    let grads = att.sum_all().unwrap().backward().unwrap();
    for (name, x) in [("dq", &q), ("dk", &k), ("dv", &v)] {
        out.push((name, bits(grads.get(x).unwrap())));
    }
    out
}

#[test]
fn dropping_the_checks_changes_no_bit() {
    let full = device(ShaderChecks::Full);
    let fast = device(ShaderChecks::DivisionOnly);
    assert_eq!(fast.shader_checks(), ShaderChecks::DivisionOnly);
    assert_eq!(full.shader_checks(), ShaderChecks::Full);
    for ((what, want), (_, got)) in outputs(&full).into_iter().zip(outputs(&fast)) {
        assert_eq!(want.len(), got.len(), "{what}");
        let diff = want.iter().zip(&got).position(|(a, b)| a != b);
        assert!(diff.is_none(), "{what}: first difference at {diff:?}");
    }
}

/// The default resolves by adapter: a CPU adapter keeps the index clamps (LLVM compiles some
/// kernels ten times slower without them), a Vulkan GPU drops them.
#[test]
fn the_default_resolves_by_adapter() {
    let dev = Device::new().unwrap();
    let info = dev.adapter_info();
    let want = if info.device_type == wgpu::DeviceType::Cpu {
        ShaderChecks::NoLoopBounding
    } else if info.backend == wgpu::Backend::Vulkan {
        ShaderChecks::DivisionOnly
    } else {
        ShaderChecks::NoLoopBounding
    };
    assert_eq!(
        dev.shader_checks(),
        want,
        "{} ({:?})",
        info.name,
        info.backend
    );
}
