//! The GPU variants of the elementwise kernels, run on lavapipe through
//! `DeviceOptions::gpu_plans`: the vec4 maps and binaries (src/ops/elementwise_vec4.rs) and
//! the tiled transpose copy (src/ops/transpose_copy.rs). Each case runs on the default device
//! (the scalar kernels) and on the GPU-plan device and must agree bit for bit (NaN as NaN),
//! covering sizes with and without a scalar tail, view offsets on and off the vec4 grid, f16,
//! i32 copies and casts, donated (in-place) outputs, and windows under a lowered
//! `max_binding_bytes`; the transposes are also checked against the host.
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::{device, download, gpu_plans_device, require_f16, upload};
use wgtensor::ops::{BinaryOp, ScalarOp, UnaryOp};
use wgtensor::{DType, Device, DeviceOptions, Tensor};

/// Deterministic values with NaN, infinities, signed zeros, negatives and large magnitudes.
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|i| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (s >> 11) as f64 / (1u64 << 53) as f64;
            match i % 29 {
                3 => f64::NAN,
                7 => f64::INFINITY,
                11 => f64::NEG_INFINITY,
                13 => -0.0,
                17 => 0.0,
                19 => (u - 0.5) * 1e4,
                _ => (u - 0.5) * 8.0,
            }
        })
        .collect()
}

fn same(what: &str, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g.to_bits() == w.to_bits();
        assert!(ok, "{what}: element {k}: got {g}, want {w}");
    }
}

/// `f` on a `dtype` tensor of `n` values, viewed from element `off` of a longer buffer, on
/// both devices.
fn both(
    what: &str,
    n: usize,
    off: usize,
    dtype: DType,
    f: impl Fn(&Tensor) -> wgtensor::Result<Tensor>,
) {
    let mut data = values(n + off, n as u64);
    if what.ends_with("i32") {
        // A float -> i32 cast of NaN is unspecified (PyTorch's too).
        data.iter_mut()
            .filter(|v| v.is_nan())
            .for_each(|v| *v = 1.0);
    }
    let run = |dev: &Device| {
        let t = upload(dev, &data, &[n + off], dtype);
        let v = t.narrow(0, off, n).unwrap();
        download(&f(&v).unwrap()).unwrap()
    };
    let want = run(device());
    let got = run(gpu_plans_device());
    same(&format!("{what} n={n} off={off} {dtype:?}"), &got, &want);
}

const UNARY: [UnaryOp; 13] = [
    UnaryOp::Neg,
    UnaryOp::Abs,
    UnaryOp::Exp,
    UnaryOp::Log,
    UnaryOp::Sqrt,
    UnaryOp::Relu,
    UnaryOp::Sigmoid,
    UnaryOp::Tanh,
    UnaryOp::Gelu,
    UnaryOp::Silu,
    UnaryOp::Log1p,
    UnaryOp::Softplus,
    UnaryOp::GeluTanh,
];
const SCALAR: [ScalarOp; 9] = [
    ScalarOp::Add,
    ScalarOp::Sub,
    ScalarOp::RSub,
    ScalarOp::Mul,
    ScalarOp::Div,
    ScalarOp::RDiv,
    ScalarOp::Max,
    ScalarOp::Min,
    ScalarOp::Pow,
];
const BINARY: [BinaryOp; 7] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Max,
    BinaryOp::Min,
    BinaryOp::Pow,
];

// Sizes: all scalar (under one granule), a body with a tail, a whole number of granules, and a
// 2-D odd size; offsets 0 and 8 (vec4 grid) and 3 (scalar fallback).
const SIZES: [(usize, usize); 7] = [
    (7, 0),
    (1000, 0),
    (4096, 8),
    (3 * 333, 3),
    (1027, 8),
    // Several workgroups, some invocations taking four vec4s a step, then one at a time.
    (9395, 4),
    (70001, 0),
];

#[test]
fn unary_and_scalar_maps_f32() {
    for (n, off) in SIZES {
        for op in UNARY {
            both(&format!("{op:?}"), n, off, DType::F32, |t| t.unary(op));
        }
        for op in SCALAR {
            both(&format!("{op:?}"), n, off, DType::F32, |t| {
                t.scalar_op(op, 1.5)
            });
        }
        both("max NaN", n, off, DType::F32, |t| t.max_scalar(f64::NAN));
    }
}

#[test]
fn unary_and_scalar_maps_f16() {
    require_f16(gpu_plans_device());
    for (n, off) in [(1000, 0), (1027, 4), (300, 3)] {
        for op in UNARY {
            both(&format!("{op:?}"), n, off, DType::F16, |t| t.unary(op));
        }
        for op in [ScalarOp::Mul, ScalarOp::Div, ScalarOp::Min, ScalarOp::Pow] {
            both(&format!("{op:?}"), n, off, DType::F16, |t| {
                t.scalar_op(op, -0.75)
            });
        }
    }
}

#[test]
fn copies_and_casts() {
    for (n, off) in SIZES {
        both("contiguous", n, off, DType::F32, Tensor::contiguous);
        both("i32 contiguous", n, off, DType::I32, Tensor::contiguous);
        both("to i32", n, off, DType::F32, |t| {
            t.clamp(Some(-1e6), Some(1e6))?.to_dtype(DType::I32)
        });
        both("i32 to f32", n, off, DType::I32, |t| t.to_dtype(DType::F32));
    }
    if gpu_plans_device().supports_f16() {
        for (n, off) in [(1000, 0), (1027, 4), (300, 2)] {
            both("to f16", n, off, DType::F32, |t| t.to_dtype(DType::F16));
            both("f16 to f32", n, off, DType::F16, |t| t.to_dtype(DType::F32));
        }
    }
}

/// `op(x, y)` with `x` and `y` viewed from offsets `offs` of longer buffers, on both devices.
fn binary_both(n: usize, offs: [usize; 2], dtype: DType, op: BinaryOp) {
    let (a, b) = (values(n + offs[0], 1), values(n + offs[1], 2));
    let run = |dev: &Device| {
        let x = upload(dev, &a, &[n + offs[0]], dtype)
            .narrow(0, offs[0], n)
            .unwrap();
        let y = upload(dev, &b, &[n + offs[1]], dtype)
            .narrow(0, offs[1], n)
            .unwrap();
        download(&x.binary(&y, op).unwrap()).unwrap()
    };
    let what = format!("{op:?} n={n} offs={offs:?} {dtype:?}");
    same(&what, &run(gpu_plans_device()), &run(device()));
}

#[test]
fn binaries_f32() {
    for op in BINARY {
        for (n, offs) in [
            (7, [0, 0]),
            (1000, [0, 0]),
            (4096, [4, 8]),
            (1027, [0, 3]),
            (999, [12, 4]),
        ] {
            binary_both(n, offs, DType::F32, op);
        }
    }
}

/// `op(x, y)` with `x` of `xs` viewed from element `offs[0]` and `y` of `ys` from `offs[1]`
/// (then permuted by `perm` when given), broadcast, on both devices.
fn bcast_both(
    xs: &[usize],
    ys: &[usize],
    offs: [usize; 2],
    perm: Option<&[usize]>,
    dtype: DType,
    op: BinaryOp,
) {
    let (nx, ny): (usize, usize) = (xs.iter().product(), ys.iter().product());
    let (a, b) = (values(nx + offs[0], 5), values(ny + offs[1], 6));
    let run = |dev: &Device| {
        let view = |data: &[f64], n: usize, off: usize, shape: &[usize]| {
            upload(dev, data, &[n + off], dtype)
                .narrow(0, off, n)
                .unwrap()
                .reshape(shape)
                .unwrap()
        };
        let mut x = view(&a, nx, offs[0], xs);
        if let Some(p) = perm {
            x = x.permute(p).unwrap();
        }
        let y = view(&b, ny, offs[1], ys);
        // Both operand orders: the packed operand first and second.
        let xy = download(&x.binary(&y, op).unwrap()).unwrap();
        let yx = download(&y.binary(&x, op).unwrap()).unwrap();
        [xy, yx].concat()
    };
    let what = format!("{op:?} {xs:?} {ys:?} offs={offs:?} perm={perm:?} {dtype:?}");
    same(&what, &run(gpu_plans_device()), &run(device()));
}

/// Broadcast binaries: rows ([N, C] + [C]), planes ([N, C, H, W] + [C, 1, 1]), columns
/// ([N, C] + [N, 1]) and scalars take the vec4 broadcast kernel on the GPU plan where rows
/// and runs are multiples of 4; odd ones, offsets off the vec4 grid, two-level broadcasts and
/// strided operands keep the scalar kernel. All bitwise against the default device.
#[test]
fn broadcast_binaries() {
    let cases: [(&[usize], &[usize], [usize; 2]); 12] = [
        (&[64, 32], &[32], [0, 0]),
        // Several workgroups, some invocations taking four vec4s a step.
        (&[40, 256], &[256], [0, 0]),
        (&[8, 16, 12, 12], &[16, 1, 1], [4, 0]),
        (&[64, 32], &[32], [4, 8]),
        (&[64, 32], &[32], [0, 2]),
        (&[64, 33], &[33], [0, 0]),
        (&[3, 5, 4, 6], &[5, 1, 1], [0, 1]),
        (&[3, 5, 3, 3], &[5, 1, 1], [0, 0]),
        (&[16, 12], &[16, 1], [8, 3]),
        (&[4, 8, 4], &[1], [0, 7]),
        (&[2, 3, 8], &[2, 1, 8], [0, 0]),
        (&[6, 8], &[8], [2, 0]),
    ];
    for op in BINARY {
        for (xs, ys, offs) in cases {
            bcast_both(xs, ys, offs, None, DType::F32, op);
        }
    }
    // A strided full operand: scalar.
    bcast_both(
        &[32, 64],
        &[32],
        [0, 0],
        Some(&[1, 0]),
        DType::F32,
        BinaryOp::Add,
    );
    if gpu_plans_device().supports_f16() {
        for (xs, ys, offs) in cases {
            bcast_both(xs, ys, offs, None, DType::F16, BinaryOp::Mul);
        }
    }
}

#[test]
fn binaries_f16() {
    require_f16(gpu_plans_device());
    for op in BINARY {
        for (n, offs) in [(1000, [0, 0]), (1027, [4, 8]), (300, [1, 0])] {
            binary_both(n, offs, DType::F16, op);
        }
    }
}

#[test]
fn donated_outputs() {
    let n = 1000;
    let run = |dev: &Device| {
        let data = values(n, 9);
        let x = upload(dev, &data, &[n], DType::F32);
        let y = upload(dev, &values(n, 10), &[n], DType::F32);
        let x = x.into_unary(UnaryOp::Tanh).unwrap();
        let x = x.into_scalar_op(ScalarOp::Mul, 3.0).unwrap();
        let x = x.into_binary(&y, BinaryOp::Max).unwrap();
        // The other side donated: y's buffer takes y - x.
        let z = y.into_binary(&x, BinaryOp::Sub).unwrap();
        let z = x.clone().into_binary(&z, BinaryOp::Mul).unwrap();
        let before = dev.stats().donations;
        let w = upload(dev, &data, &[n], DType::F32)
            .into_unary(UnaryOp::Exp)
            .unwrap();
        assert_eq!(dev.stats().donations, before + 1);
        let mut out = download(&z).unwrap();
        out.extend(download(&w).unwrap());
        out
    };
    same("donated", &run(gpu_plans_device()), &run(device()));
}

/// Host reference of `x.transpose(-2, -1)` for a packed `[batch, r, c]` input.
fn host_transpose(data: &[f64], batch: usize, r: usize, c: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(data.len());
    for b in 0..batch {
        for j in 0..c {
            for i in 0..r {
                out.push(data[b * r * c + i * c + j]);
            }
        }
    }
    out
}

fn transpose_case(dev: &Device, shape: &[usize], dtype: DType, to: DType) {
    let (r, c) = (shape[shape.len() - 2], shape[shape.len() - 1]);
    let n: usize = shape.iter().product();
    let data: Vec<f64> = values(n, 5)
        .into_iter()
        .map(
            |v| match (dtype == DType::I32 || to == DType::I32, v.is_nan()) {
                (true, true) => 7.0,
                (true, false) => v.clamp(-1e4, 1e4).trunc(),
                _ => v,
            },
        )
        .collect();
    let x = upload(dev, &data, shape, dtype);
    let t = x.transpose(-2, -1).unwrap();
    let y = if to == dtype {
        t.contiguous().unwrap()
    } else {
        t.to_dtype(to).unwrap()
    };
    let host_in = download(&x).unwrap();
    let want: Vec<f64> = host_transpose(&host_in, n / (r * c), r, c)
        .into_iter()
        .map(|v| common::round_to_dtype(to, v))
        .collect();
    same(
        &format!("transpose {shape:?} {dtype:?}->{to:?}"),
        &download(&y).unwrap(),
        &want,
    );
}

#[test]
fn transposed_copies() {
    for dev in [device(), gpu_plans_device()] {
        for shape in [
            &[64, 48][..],
            &[33, 70],
            &[3, 40, 37],
            &[2, 3, 9, 100],
            &[5, 5],
        ] {
            transpose_case(dev, shape, DType::F32, DType::F32);
        }
        transpose_case(dev, &[40, 37], DType::I32, DType::I32);
        transpose_case(dev, &[40, 37], DType::F32, DType::I32);
        if dev.supports_f16() {
            transpose_case(dev, &[2, 65, 31], DType::F16, DType::F16);
            transpose_case(dev, &[65, 31], DType::F32, DType::F16);
        }
        // A narrowed view transposed: its last-dim stride is the parent's row length.
        let data = values(40 * 72, 6);
        let x = upload(dev, &data, &[40, 72], DType::F32);
        let v = x.narrow(1, 3, 50).unwrap().transpose(0, 1).unwrap();
        let got = download(&v.contiguous().unwrap()).unwrap();
        let host = download(&x).unwrap();
        let want: Vec<f64> = (0..50)
            .flat_map(|j| (0..40).map(move |i| (i, j)))
            .map(|(i, j)| host[i * 72 + 3 + j])
            .collect();
        same("narrowed transpose", &got, &want);
    }
}

/// A GPU-plan device whose bindings hold 8 KiB: the vec4 kernels run in windows and the
/// transposes bind whole views that fit.
#[test]
fn windows_under_a_lowered_binding_limit() {
    let dev = Device::with_options(DeviceOptions {
        gpu_plans: true,
        cooperative_matrix: false,
        max_binding_bytes: Some(8192),
        ..Default::default()
    })
    .expect("device");
    let n = 10_001;
    let run = |dev: &Device| {
        let x = upload(dev, &values(n + 4, 7), &[n + 4], DType::F32)
            .narrow(0, 4, n)
            .unwrap();
        let y = upload(dev, &values(n, 8), &[n], DType::F32);
        let a = x.unary(UnaryOp::Sigmoid).unwrap();
        let b = x.mul(&y).unwrap();
        let c = y.clone().into_binary(&a, BinaryOp::Add).unwrap();
        // The scalar vec4 map in windows (contiguous() keeps a contiguous view as it is, so no
        // longer copies one).
        let d = x.mul_scalar(1.0).unwrap();
        let mut out = Vec::new();
        for t in [a, b, c, d] {
            out.extend(download(&t).unwrap());
        }
        out
    };
    same("windowed", &run(&dev), &run(device()));
    // Transposes within one binding (a strided view past one is refused by either kernel).
    transpose_case(&dev, &[30, 40], DType::F32, DType::F32);
    transpose_case(&dev, &[3, 20, 30], DType::F32, DType::F32);
}

/// The GPU plan really takes the vec4 path: a body and a scalar tail are two dispatches.
#[test]
fn gpu_plan_splits_body_and_tail() {
    let dev = Device::with_options(DeviceOptions {
        gpu_plans: true,
        cooperative_matrix: false,
        ..Default::default()
    })
    .expect("device");
    // 1001 elements: a body of at most 1000 and a tail of at least 1, whatever the alignment.
    let x = upload(&dev, &values(1001, 1), &[1001], DType::F32);
    dev.sync().unwrap();
    let before = dev.stats().dispatches;
    let y = x.mul_scalar(1.5).unwrap();
    dev.sync().unwrap();
    assert_eq!(dev.stats().dispatches - before, 2);
    let before = dev.stats().dispatches;
    let _z = y.add(&x).unwrap();
    dev.sync().unwrap();
    assert_eq!(dev.stats().dispatches - before, 2);
}

/// exp within 1.5e-7 relative (about 1 ulp) over f32's whole range, on the scalar and the vec4
/// kernels: the argument is reduced by multiples of ln 2 and the rest taken by a polynomial,
/// instead of the builtin, whose WGSL error bound (3 + 2|x| ulp) adapters use (exp2 of a
/// rounded x log2 e: lavapipe's was 3.8e-6 off at -85, past PyTorch's f32 tolerance of
/// 1.3e-6, and 1.2e-6 at 20).
/// Subnormal results may flush to zero; overflow is inf, -inf gives 0 and NaN stays NaN.
#[test]
fn exp_is_accurate_over_the_whole_range() {
    let mut xs: Vec<f32> = vec![
        -103.5,
        -95.0,
        -87.5,
        -87.3,
        -20.0,
        -1e-8,
        0.0,
        -0.0,
        1e-8,
        0.5,
        1.0,
        10.0,
        20.0,
        33.3,
        50.0,
        80.0,
        88.5,
        88.72,
        88.73,
        100.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    xs.extend((0..1000).map(|i| -100.0 + i as f32 * 0.18873));
    for dev in [device(), gpu_plans_device()] {
        let x = Tensor::from_slice(dev, &xs, &[xs.len()]).unwrap();
        let got = x.exp().unwrap().to_vec::<f32>().unwrap();
        for (&x, &g) in xs.iter().zip(&got) {
            let want = (x as f64).exp();
            let w32 = want as f32;
            let ok = if x.is_nan() {
                g.is_nan()
            } else if w32.is_infinite() || w32 == 0.0 {
                g == w32 || (w32 == 0.0 && g.abs() < f32::MIN_POSITIVE)
            } else if w32.abs() < f32::MIN_POSITIVE {
                (g as f64 - want).abs() <= f32::MIN_POSITIVE as f64
            } else {
                (g as f64 - want).abs() <= 1.5e-7 * want.abs()
            };
            assert!(ok, "exp({x}) = {g}, want {want}");
        }
    }
}

/// pow with a non-integer exponent within 3e-7 relative where the result is a normal float,
/// subnormal bases included, on both kernels: log2 |x| and e log2 |x| carried in two floats (WGSL's pow is exp2 of the
/// f32 product, about |e log2 x| * 6e-8 off: 782^4.77 came out 3e-6 off on lavapipe, twice
/// PyTorch's f32 tolerance).
#[test]
fn pow_is_accurate_for_large_results() {
    let mut b: Vec<f32> = (0..20000).map(|i| 1e-3 + i as f32 * 0.0541).collect();
    let mut e: Vec<f32> = (0..20000)
        .map(|i| -4.0 + (i % 997) as f32 * 0.0093)
        .collect();
    // Subnormal bases (lavapipe's builtin read each as about 2^-127).
    b.extend([1e-40f32, 1e-40, 1.4e-45, 5.9e-39]);
    e.extend([0.1f32, -0.25, 0.5001, 0.3]);
    for dev in [device(), gpu_plans_device()] {
        let bt = Tensor::from_slice(dev, &b, &[b.len()]).unwrap();
        let et = Tensor::from_slice(dev, &e, &[e.len()]).unwrap();
        let got = bt.pow(&et).unwrap().to_vec::<f32>().unwrap();
        for i in 0..b.len() {
            let want = (b[i] as f64).powf(e[i] as f64);
            if !(want as f32).is_normal() {
                continue;
            }
            let rel = ((got[i] as f64 - want) / want).abs();
            assert!(rel <= 3e-7, "{}^{} = {}, want {want}", b[i], e[i], got[i]);
        }
    }
}

/// pow with large exponents stays within 3e-7 relative (lavapipe's compiler folded the
/// logarithm's error terms, v_lo and a closing two-sum, to nothing: 1.3^300 came out 3e-6
/// off), and an infinite exponent and subnormal exponents give C99's values from the bits.
#[test]
fn pow_keeps_large_exponents_and_special_exponents() {
    // The last two: within 2^-17 below 2^128 the result is still finite (n + r rounded to 128
    // had made it inf).
    let cases: [(f32, f32); 8] = [
        (1.3, 300.0),
        (1.0001, 800000.0),
        (0.99, -8000.0),
        (1.7, 150.0),
        (0.9, 800.0),
        (3.1, -70.0),
        (1.5, 218.81744),
        (3.5968828, 69.31106),
    ];
    let special: [(f32, f32, f32); 7] = [
        (0.99999994, f32::INFINITY, 0.0),
        (1.0000001, f32::NEG_INFINITY, 0.0),
        (0.5, f32::NEG_INFINITY, f32::INFINITY),
        (2.0, f32::INFINITY, f32::INFINITY),
        (0.0, 1e-40, 0.0),
        (f32::INFINITY, 1e-40, f32::INFINITY),
        (0.0, -1e-40, f32::INFINITY),
    ];
    for dev in [device(), gpu_plans_device()] {
        let b: Vec<f32> = cases.iter().map(|c| c.0).collect();
        let e: Vec<f32> = cases.iter().map(|c| c.1).collect();
        let bt = Tensor::from_slice(dev, &b, &[b.len()]).unwrap();
        let et = Tensor::from_slice(dev, &e, &[e.len()]).unwrap();
        let got = bt.pow(&et).unwrap().to_vec::<f32>().unwrap();
        for (i, &(x, p)) in cases.iter().enumerate() {
            let want = (x as f64).powf(p as f64);
            let rel = ((got[i] as f64 - want) / want).abs();
            assert!(rel <= 3e-7, "{x}^{p} = {}, want {want}", got[i]);
        }
        let b: Vec<f32> = special.iter().map(|c| c.0).collect();
        let e: Vec<f32> = special.iter().map(|c| c.1).collect();
        let bt = Tensor::from_slice(dev, &b, &[b.len()]).unwrap();
        let et = Tensor::from_slice(dev, &e, &[e.len()]).unwrap();
        let got = bt.pow(&et).unwrap().to_vec::<f32>().unwrap();
        for (i, &(x, p, want)) in special.iter().enumerate() {
            assert_eq!(got[i], want, "{x}^{p}");
        }
        // A negative base with a subnormal (not integer) exponent is NaN.
        let x = Tensor::from_slice(dev, &[-2.0f32], &[1]).unwrap();
        let p = Tensor::from_slice(dev, &[1e-40f32], &[1]).unwrap();
        assert!(x.pow(&p).unwrap().to_vec::<f32>().unwrap()[0].is_nan());
    }
}

/// log within 1.5e-7 relative over the positive floats, near 1 and subnormals included (the
/// builtin was 1e-7 off near 1 on lavapipe, log(0.98) 5e-6 relative, and about -88 for every
/// subnormal); 0, negatives, inf and NaN as PyTorch's.
#[test]
fn log_is_accurate_near_one_and_everywhere() {
    let mut xs: Vec<f32> = (0..4000).map(|i| 0.9 + i as f32 * 5e-5).collect();
    xs.extend((0..2000).map(|i| 10f32.powf(-37.0 + i as f32 * 0.0374)));
    xs.extend([
        1.0,
        0.0,
        -1.0,
        f32::INFINITY,
        f32::NAN,
        1.0 + f32::EPSILON,
        1.0 - 1e-7,
    ]);
    // Subnormals (lavapipe's builtin read each as about 2^-127: log about -88), -0 and a
    // negative subnormal.
    xs.extend([1e-40, 1.4e-45, 5.9e-39, -0.0, -1e-40]);
    for dev in [device(), gpu_plans_device()] {
        let x = Tensor::from_slice(dev, &xs, &[xs.len()]).unwrap();
        let got = x.log().unwrap().to_vec::<f32>().unwrap();
        for (&x, &g) in xs.iter().zip(&got) {
            let want = (x as f64).ln();
            let ok = if x.is_nan() || x < 0.0 {
                g.is_nan()
            } else if want.is_infinite() || want == 0.0 {
                g as f64 == want
            } else {
                ((g as f64 - want) / want).abs() <= 1.5e-7
            };
            assert!(ok, "log({x}) = {g}, want {want}");
        }
    }
}

/// Division rounds correctly, as PyTorch's (IEEE) division: the refinement of `/` computes
/// its residual from an exact two-float product. With `fma` for it, which Vulkan need not
/// fuse (lavapipe does not), 10% of lavapipe's quotients came out one ulp off. (GPUs' `/` is
/// a reciprocal product; the step rounds it correctly in all but rare ties.)
#[test]
fn division_rounds_correctly() {
    let n = 1 << 18;
    let mut s = 12345u64;
    let mut rnd = || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let m = f32::from_bits(((s >> 33) as u32 & 0x007fffff) | 0x3f800000);
        m * if (s >> 20) & 1 == 1 { 3.7 } else { -0.013 }
    };
    let a: Vec<f32> = (0..n).map(|_| rnd()).collect();
    let b: Vec<f32> = (0..n).map(|_| rnd()).collect();
    for dev in [device(), gpu_plans_device()] {
        let at = Tensor::from_slice(dev, &a, &[n]).unwrap();
        let bt = Tensor::from_slice(dev, &b, &[n]).unwrap();
        let got = at.div(&bt).unwrap().to_vec::<f32>().unwrap();
        let mut off = 0;
        for i in 0..n {
            let want = a[i] / b[i];
            if got[i] != want {
                off += 1;
                let ulps = (got[i].to_bits() as i64 - want.to_bits() as i64).abs();
                assert!(ulps <= 1, "{} / {} = {}, want {want}", a[i], b[i], got[i]);
            }
        }
        assert!(
            off <= n / 10000,
            "{off} of {n} quotients not correctly rounded"
        );
        // Past the refined range: f32's maximum over 1e9 (q * b overflowed: the residual was
        // NaN) and quotients near the subnormals stay IEEE's where `/` is.
        let a = [f32::MAX, -f32::MAX, f32::MAX, 1e-20, 1e-20];
        let b = [1e9f32, 1e9, -1e12, 1.2e17, 2.5e17];
        let at = Tensor::from_slice(dev, &a, &[5]).unwrap();
        let bt = Tensor::from_slice(dev, &b, &[5]).unwrap();
        let got = at.div(&bt).unwrap().to_vec::<f32>().unwrap();
        for i in 0..5 {
            let want = a[i] / b[i];
            let ulps = (got[i].to_bits() as i64 - want.to_bits() as i64).abs();
            assert!(ulps <= 2, "{} / {} = {}, want {want}", a[i], b[i], got[i]);
        }
    }
}
