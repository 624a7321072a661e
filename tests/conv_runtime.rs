//! Convolution runtime behaviour, on private devices so that the dispatch and pool counters see
//! only this test's work: a grouped or depthwise convolution is one launch whatever the group
//! count (all groups in one grid), split-k records exactly two dispatches (partial GEMMs and the
//! fixed-order reduction) where `ops::conv::conv2d_plan` says it splits, and the split-k workspace
//! comes from the pool and is reused (no pool growth over repeated calls after a warm-up).
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

#[path = "common/mod.rs"]
mod common;

use common::conv_ref::{ConvGeom, Dir};
use wgtensor::ops::{
    conv2d, conv2d_backward_input, conv2d_backward_weight, conv_transpose2d, Activation,
    Conv2dOptions, ConvTranspose2dOptions,
};
use wgtensor::{Device, DeviceOptions, Tensor};

/// A fresh device; `portable` disables subgroups (no `Sg8` kernel).
fn device(portable: bool) -> Device {
    Device::with_options(DeviceOptions {
        disable_subgroups: portable,
        ..Default::default()
    })
    .expect("no wgpu adapter")
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let x = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed);
            (x >> 8) as f32 / (1u32 << 23) as f32 - 1.0
        })
        .collect()
}

fn upload(dev: &Device, shape: &[usize], seed: u32) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_slice(dev, &values(n, seed), shape).expect("upload")
}

use common::conv_options as options;

use common::conv_plan as plan_of;

/// The operands of `g`, uploaded once.
struct Operands {
    x: Tensor,
    w: Tensor,
    dy: Tensor,
    bias: Tensor,
}

impl Operands {
    fn new(dev: &Device, g: &ConvGeom) -> Operands {
        Operands {
            x: upload(dev, &g.x_shape(), 1),
            w: upload(dev, &g.w_shape(), 2),
            dy: upload(dev, &g.y_shape(), 3),
            bias: upload(dev, &[g.o], 4),
        }
    }

    /// Runs `dir` (the forward with bias and relu) and returns the result.
    fn run(&self, g: &ConvGeom, dir: Dir) -> Tensor {
        let o = options(g);
        let r = match dir {
            Dir::Forward => conv2d(
                &self.x,
                &self.w,
                Some(&self.bias),
                &Conv2dOptions {
                    activation: Activation::Relu,
                    ..o
                },
            ),
            Dir::Data => conv2d_backward_input(&self.dy, &self.w, [g.h, g.w], &o),
            Dir::Weight => conv2d_backward_weight(&self.dy, &self.x, [g.kh, g.kw], &o),
        };
        r.unwrap_or_else(|e| panic!("{dir:?} of {g:?}: {e}"))
    }
}

/// Dispatches recorded by `dir` of `g` (operands uploaded beforehand).
fn dispatches(dev: &Device, g: &ConvGeom, dir: Dir) -> u64 {
    let ops = Operands::new(dev, g);
    dev.sync().unwrap();
    let before = dev.stats().dispatches;
    let y = ops.run(g, dir);
    let n = dev.stats().dispatches - before;
    drop(y);
    n
}

const DIRS: [Dir; 3] = [Dir::Forward, Dir::Data, Dir::Weight];

/// x [2, 32, 8, 8] with a 3x3 kernel, 32 output channels, groups 1 ... 32 (depthwise at 32):
/// forward, data gradient and weight gradient each record one dispatch whatever the group
/// count (all groups are one grid; K is short, no split), on both devices. The same on
/// 24x24 images, whose weight gradient (K = 2 * 24 * 24 = 1152) splits for every group
/// count: two dispatches each.
#[test]
fn grouped_convolution_dispatches_do_not_depend_on_groups() {
    for portable in [false, true] {
        let dev = device(portable);
        for (hw, wgrad_split) in [(8, false), (24, true)] {
            let mut counts = Vec::new();
            for groups in [1, 2, 4, 8, 16, 32] {
                let g = ConvGeom {
                    n: 2,
                    c: 32,
                    h: hw,
                    w: hw,
                    o: 32,
                    kh: 3,
                    kw: 3,
                    groups,
                    stride: [1, 1],
                    pad: [1; 4],
                    dil: [1, 1],
                };
                let row: Vec<u64> = DIRS.iter().map(|&d| dispatches(&dev, &g, d)).collect();
                for (dir, n) in DIRS.iter().zip(&row) {
                    let pl = plan_of(&dev, &g, *dir);
                    let split = *dir == Dir::Weight && wgrad_split;
                    assert_eq!(
                        (pl.splits > 1, *n),
                        (split, 1 + split as u64),
                        "{dir:?} with groups {groups} on {hw}x{hw} (portable {portable}): {pl:?}"
                    );
                }
                counts.push((groups, row));
            }
            println!("dispatches (fwd, dgrad, wgrad) by groups, {hw}x{hw}, portable {portable}: {counts:?}");
            assert!(counts.iter().all(|(_, c)| *c == counts[0].1), "{counts:?}");
        }
    }
}

/// Split-k is two dispatches (partials, then the reduction with bias and activation), an
/// unsplit launch one, exactly as `ops::conv::plan` decides, for each direction and kernel.
#[test]
fn splitk_dispatch_counts_match_the_plan() {
    let base = ConvGeom {
        n: 1,
        c: 8,
        h: 6,
        w: 6,
        o: 8,
        kh: 3,
        kw: 3,
        groups: 1,
        stride: [1, 1],
        pad: [0; 4],
        dil: [1, 1],
    };
    let cases = [
        // Forward: K = C/groups * 9 = 1152 over 16 columns (splits); K = 72 (does not).
        (Dir::Forward, ConvGeom { c: 128, ..base }, true),
        (
            Dir::Forward,
            ConvGeom {
                c: 256,
                groups: 2,
                o: 16,
                ..base
            },
            true,
        ),
        (Dir::Forward, base, false),
        // Data gradient: K = O/groups * 9 = 1152, strided (the TRANSPOSED gather).
        (
            Dir::Data,
            ConvGeom {
                o: 128,
                stride: [2, 2],
                ..base
            },
            true,
        ),
        (
            Dir::Data,
            ConvGeom {
                o: 256,
                c: 16,
                groups: 2,
                ..base
            },
            true,
        ),
        // Weight gradient: K = N * OH * OW = 4 * 576 (8 rows per group: a GEMM kernel) or
        // 2 * 576 (depthwise: the Direct kernel); 16 is far too short.
        (
            Dir::Weight,
            ConvGeom {
                n: 4,
                h: 24,
                w: 24,
                pad: [1; 4],
                ..base
            },
            true,
        ),
        (
            Dir::Weight,
            ConvGeom {
                n: 2,
                h: 24,
                w: 24,
                pad: [1; 4],
                groups: 8,
                ..base
            },
            true,
        ),
        (Dir::Weight, base, false),
    ];
    for portable in [false, true] {
        let dev = device(portable);
        for (dir, g, split) in cases {
            let pl = plan_of(&dev, &g, dir);
            assert_eq!(pl.splits > 1, split, "{dir:?} of {g:?}: {pl:?}");
            let n = dispatches(&dev, &g, dir);
            assert_eq!(n, 1 + split as u64, "{dir:?} of {g:?}: {pl:?}");
        }
        // conv_transpose2d with bias and an activation: the data-gradient launch.
        let g = ConvGeom {
            o: 128,
            stride: [2, 2],
            ..base
        };
        let x = upload(&dev, &g.y_shape(), 5);
        let w = upload(&dev, &g.w_shape(), 6);
        let b = upload(&dev, &[g.c], 7);
        let o = ConvTranspose2dOptions {
            stride: [2, 2],
            output_padding: [1, 1],
            activation: Activation::Gelu,
            ..Default::default()
        };
        dev.sync().unwrap();
        let before = dev.stats().dispatches;
        let y = conv_transpose2d(&x, &w, Some(&b), &o).unwrap();
        assert_eq!(dev.stats().dispatches - before, 2, "{:?}", y.shape());
    }
}

/// After a warm-up with the same call pattern, 100 split-k weight gradients (results dropped,
/// `sync` every 10 calls or only at the end) create no buffer: no pool misses, the same peak
/// and live bytes; every call's workspace and output come from the cache, and the result does
/// not change.
fn workspace_reused(portable: bool, sync_every: Option<usize>) {
    let dev = device(portable);
    let g = ConvGeom {
        n: 4,
        c: 8,
        h: 24,
        w: 24,
        o: 16,
        kh: 3,
        kw: 3,
        groups: 2,
        stride: [1, 1],
        pad: [1; 4],
        dil: [1, 1],
    };
    let pl = plan_of(&dev, &g, Dir::Weight);
    assert!(pl.splits > 1, "{g:?} does not split: {pl:?}");
    let ops = Operands::new(&dev, &g);
    let calls = |count: usize| {
        for i in 1..=count {
            drop(ops.run(&g, Dir::Weight));
            if sync_every.is_some_and(|s| i % s == 0) {
                dev.sync().expect("sync");
            }
        }
        dev.sync().expect("sync");
    };
    let reference = ops.run(&g, Dir::Weight).to_vec::<f32>().unwrap();
    calls(100);
    let before = dev.stats();
    calls(100);
    let after = dev.stats();
    let last = ops.run(&g, Dir::Weight).to_vec::<f32>().unwrap();
    println!(
        "conv wgrad split-k x100 (portable {portable}, sync every {sync_every:?}): {pl:?} before {:?} after {:?}",
        before.pool, after.pool
    );
    assert_eq!(
        after.pool.misses, before.pool.misses,
        "buffers were created after the warm-up"
    );
    assert_eq!(after.pool.peak_bytes, before.pool.peak_bytes, "pool grew");
    assert_eq!(
        after.pool.live_bytes, before.pool.live_bytes,
        "live bytes leaked"
    );
    assert!(
        after.pool.hits >= before.pool.hits + 200,
        "only {} pool hits for 100 calls",
        after.pool.hits - before.pool.hits
    );
    assert_eq!(after.dispatches - before.dispatches, 200);
    assert!(
        last.iter()
            .zip(&reference)
            .all(|(x, y)| x.to_bits() == y.to_bits()),
        "result changed after 200 calls"
    );
}

#[test]
fn conv_splitk_workspace_reused_periodic_sync() {
    workspace_reused(false, Some(10));
}

#[test]
fn conv_splitk_workspace_reused_final_sync() {
    workspace_reused(false, None);
}

#[test]
fn conv_splitk_tiled_workspace_reused() {
    workspace_reused(true, Some(10));
}

/// A convolution whose output columns (samples x pixels) need more workgroups than the
/// adapter allows on one grid axis, though every tensor fits a binding, runs in windows of
/// whole samples with the full problem's plan: each sample's output equals that sample
/// convolved alone (the same kernel and order, so bitwise), forward and data gradient.
#[test]
fn outputs_past_the_grid_limit_run_in_sample_windows() {
    let dev = device(true);
    let max = dev.limits().max_compute_workgroups_per_dimension as usize;
    let (n, hw, o) = (9, 512, 8);
    let shape = [n, 1, hw, hw];
    let opts = Conv2dOptions {
        padding: wgtensor::ops::Padding::uniform(1),
        ..Default::default()
    };
    let plan = wgtensor::ops::conv::conv2d_plan(
        &dev,
        wgtensor::ops::conv::ConvDirection::Forward,
        shape,
        [o, 1, 3, 3],
        &opts,
    )
    .unwrap();
    // The portable CPU plan: 32 x 32 output tiles, one workgroup per 32 columns along x, so
    // the case passes the grid limit. A GPU plans other kernels for it (Direct: 8 rows of
    // lines of 512), whose grids may fit; the per-sample equality below holds either way.
    let cpu = dev.caps().cpu;
    if cpu {
        assert_eq!(
            plan.variant,
            wgtensor::ops::conv::ConvVariant::Tiled,
            "{plan:?}"
        );
        assert!(n * hw * hw / 32 > max, "the case must pass the grid limit");
    }
    let x = upload(&dev, &shape, 1);
    let w = upload(&dev, &[o, 1, 3, 3], 2);
    let y = conv2d(&x, &w, None, &opts).unwrap();
    let dx = conv2d_backward_input(&y, &w, [hw, hw], &opts).unwrap();
    for i in [0, 4, n - 1] {
        let xi = x.narrow(0, i, 1).unwrap();
        let yi = conv2d(&xi, &w, None, &opts).unwrap();
        let got = y.narrow(0, i, 1).unwrap().to_vec::<f32>().unwrap();
        assert!(got == yi.to_vec::<f32>().unwrap(), "forward, sample {i}");
        let dxi = conv2d_backward_input(&yi, &w, [hw, hw], &opts).unwrap();
        let got = dx.narrow(0, i, 1).unwrap().to_vec::<f32>().unwrap();
        assert!(
            got == dxi.to_vec::<f32>().unwrap(),
            "data gradient, sample {i}"
        );
    }
}

/// One sample whose output columns alone pass a grid axis under the planned GEMM kernel (the
/// portable 32-column tiles: 1500 x 1500 pixels need 70313 workgroups on x) runs the direct
/// kernel, which lays its invocations out flat, forward and data gradient, instead of the grid
/// error (a GPU's 64-column tiles pass it at 2048 x 2048).
#[test]
fn one_sample_past_the_grid_limit_runs_the_direct_kernel() {
    use wgtensor::ops::conv::{conv2d_plan, ConvDirection, ConvVariant};
    let dev = device(true);
    let hw = 1500;
    let opts = Conv2dOptions {
        padding: wgtensor::ops::Padding::uniform(1),
        ..Default::default()
    };
    let x = upload(&dev, &[1, 1, hw, hw], 1);
    let w = upload(&dev, &[8, 1, 3, 3], 2);
    let at = |v: &[f32], c: usize, i: isize, j: isize| -> f64 {
        let n = hw as isize;
        if i < 0 || j < 0 || i >= n || j >= n {
            0.0
        } else {
            f64::from(v[c * hw * hw + (i * n + j) as usize])
        }
    };
    let plan = conv2d_plan(
        &dev,
        ConvDirection::Forward,
        [1, 1, hw, hw],
        [8, 1, 3, 3],
        &opts,
    );
    assert_eq!(plan.unwrap().variant, ConvVariant::Direct);
    let y = conv2d(&x, &w, None, &opts)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let (xv, wv) = (x.to_vec::<f32>().unwrap(), w.to_vec::<f32>().unwrap());
    for e in (0..8 * hw * hw).step_by(997) {
        let (o, i, j) = (e / (hw * hw), (e / hw % hw) as isize, (e % hw) as isize);
        let mut want = 0.0;
        for (t, &wt) in wv[o * 9..o * 9 + 9].iter().enumerate() {
            want += f64::from(wt) * at(&xv, 0, i + t as isize / 3 - 1, j + t as isize % 3 - 1);
        }
        assert!(
            (f64::from(y[e]) - want).abs() <= 1e-5,
            "forward {e}: {} vs {want}",
            y[e]
        );
    }
    // The data gradient of 8 input channels: 8 rows per group, the same columns.
    let dy = upload(&dev, &[1, 1, hw, hw], 3);
    let dx = conv2d_backward_input(&dy, &w.reshape(&[1, 8, 3, 3]).unwrap(), [hw, hw], &opts)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let dyv = dy.to_vec::<f32>().unwrap();
    for e in (0..8 * hw * hw).step_by(997) {
        let (c, i, j) = (e / (hw * hw), (e / hw % hw) as isize, (e % hw) as isize);
        let mut want = 0.0;
        for (t, &wt) in wv[c * 9..c * 9 + 9].iter().enumerate() {
            want += f64::from(wt) * at(&dyv, 0, i - t as isize / 3 + 1, j - t as isize % 3 + 1);
        }
        assert!(
            (f64::from(dx[e]) - want).abs() <= 1e-5,
            "data gradient {e}: {} vs {want}",
            dx[e]
        );
    }
}

/// More groups than a grid axis holds: the direct kernel lays groups out flat, so a depthwise
/// convolution over 70000 channels runs (forward, data and weight gradients) as PyTorch's,
/// on the CPU plan and the GPU plans.
#[test]
fn depthwise_over_more_groups_than_a_grid_axis() {
    use wgtensor::ops::{conv1d, Conv1dOptions};
    let gpu = Device::with_options(DeviceOptions {
        gpu_plans: true,
        cooperative_matrix: false,
        ..Default::default()
    })
    .unwrap();
    for dev in [device(true), device(false), gpu] {
        let (c, l) = (70_000usize, 6usize);
        let xv: Vec<f32> = (0..c * l)
            .map(|i| ((i / l) % 7) as f32 + (i % l) as f32 * 0.5)
            .collect();
        let x = Tensor::from_slice(&dev, &xv, &[1, c, l])
            .unwrap()
            .requires_grad()
            .unwrap();
        let w = Tensor::from_slice(&dev, &vec![1.0f32; c * 3], &[c, 1, 3])
            .unwrap()
            .requires_grad()
            .unwrap();
        let o = Conv1dOptions {
            groups: c,
            ..Default::default()
        };
        let y = conv1d(&x, &w, None, &o).unwrap();
        assert_eq!(y.shape(), &[1, c, l - 2]);
        let yv = y.to_vec::<f32>().unwrap();
        for ch in [0, 1, 65_535, 65_536, c - 1] {
            for j in 0..l - 2 {
                let want: f32 = (0..3).map(|t| xv[ch * l + j + t]).sum();
                assert_eq!(yv[ch * (l - 2) + j], want, "channel {ch}, {j}");
            }
        }
        let g = y.sum_all().unwrap().backward().unwrap();
        let dx = g.get(&x).unwrap().to_vec::<f32>().unwrap();
        let dw = g.get(&w).unwrap().to_vec::<f32>().unwrap();
        for ch in [0, 65_536, c - 1] {
            // Each input position is read by the windows that cover it: 1, 2, 3, 3, 2, 1.
            assert_eq!(&dx[ch * l..ch * l + l], &[1.0, 2.0, 3.0, 3.0, 2.0, 1.0]);
            for t in 0..3 {
                let want: f32 = (0..l - 2).map(|j| xv[ch * l + j + t]).sum();
                assert_eq!(dw[ch * 3 + t], want, "channel {ch} tap {t}");
            }
        }
    }
}

/// Weight gradients over long K keep PyTorch's precision on constant data (each output adds
/// blocks of 64 products, then the blocks): ones against a constant 0.1 gradient, dense over
/// K = 32 x 54 x 54 and depthwise over K = 8 x 54 x 54, where fmas in turn drifted 4e-5.
/// Also on the GPU plans with a discrete GPU's parallelism (the dense case splits K into
/// slices of about 256, each one running sum as cuBLAS's tiles: the slices added in turn
/// drifted 4.7e-6, in blocks of 32 slices they stay within 4e-6).
#[test]
fn weight_gradients_over_long_k_keep_their_precision() {
    use wgtensor::ops::{conv2d_backward_weight, Conv2dOptions};
    let gpu = common::wide_gpu_plans_device().clone();
    // The depthwise 7x7 case runs the four-line direct kernel (kernel rows of at least 4).
    for (dev, n, c, o, groups, kk) in [
        (
            Device::new().unwrap(),
            32usize,
            16usize,
            32usize,
            1usize,
            3usize,
        ),
        (Device::new().unwrap(), 8, 64, 64, 64, 3),
        (Device::new().unwrap(), 8, 64, 64, 64, 7),
        (gpu.clone(), 32, 16, 32, 1, 3),
    ] {
        let oh = 56 - kk + 1;
        let x = Tensor::full(&dev, &[n, c, 56, 56], 1.0, wgtensor::DType::F32).unwrap();
        let dy = Tensor::full(&dev, &[n, o, oh, oh], 0.1, wgtensor::DType::F32).unwrap();
        let opts = Conv2dOptions {
            groups,
            ..Default::default()
        };
        let dw = conv2d_backward_weight(&dy, &x, [kk, kk], &opts).unwrap();
        let want = 0.1f32 as f64 * (n * oh * oh) as f64;
        for (i, &v) in dw.to_vec::<f32>().unwrap().iter().enumerate().step_by(97) {
            let e = (v as f64 - want).abs() / want;
            assert!(
                e <= 4e-6,
                "groups {groups}: dw[{i}] {v} vs {want} ({e:.1e})"
            );
        }
    }
}
