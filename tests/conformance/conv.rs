//! Convolution conformance on small generated problems: conv2d / conv1d forward (bias, every
//! fused activation), data gradient, transposed convolution (conv_transpose2d / 1d), weight
//! gradient and bias gradient against the f64 loops of tests/common/conv_ref.rs: N, C, H, W
//! from 1 and odd, kernels 1-7, stride 1-3, dilation 1-3, asymmetric padding, groups dividing C
//! and O, depthwise with a channel multiplier, operands that are views (offsets, transposed
//! weights, sliced channels). Small problems (`Rows::Few`: the Direct kernel, the same WGSL on
//! every device) run on the default device; 8-12 rows per group (`Rows::Gemm`: `Sg8` on the
//! default device on lavapipe, `Tiled` on the portable one) on both. Problems, checks and the
//! error model: conv_check.rs; larger paths: conv_large.rs; finite differences: conv_grad.rs.

use proptest::prelude::*;
use wgtensor::ops::conv::{plan, ConvVariant};
use wgtensor::ops::Activation;
use wgtensor::DType;
use wgtensor::Device;

use crate::common::conv_ref::{ConvGeom, Dir};
use crate::common::{device, portable_device, require_f16};
use crate::conv_check::{
    check_1d_backward, check_backward, check_forward, check_transpose, check_wgrad, expected_plan,
    output_padding, problem, Problem, Rows, ACTIVATIONS,
};
use crate::strategies::run;
use pollster::block_on;

// Case counts: small problems (the Direct kernel, device-independent) run on the default device
// only; problems with 8-12 rows per group run the GEMM kernels on both devices.
const CASES_F32: u32 = 48;
const CASES_GEMM_F32: u32 = 16;
// f16 shares the kernels' code (f32 accumulation, one rounding at the store) and every f16
// variant is another pipeline: small problems here, the GEMM kernels in conv_large.rs.
const CASES_F16: u32 = 8;

/// The kernels under test: groups with fewer than 8 rows run `Direct` on any device; larger
/// ones run `Sg8` on the default device exactly when the adapter has 8-lane subgroups (lavapipe
/// on AVX2) and `Tiled` on the portable device; a GPU adapter runs 8 rows `Direct` too (its
/// plan takes the direct kernel below 32 rows over lines of 8 columns or more).
#[test]
fn conv_kernel_selection() {
    let sg8 = {
        let info = device().adapter_info();
        device().features().contains(wgpu::Features::SUBGROUP)
            && info.subgroup_min_size == 8
            && info.subgroup_max_size == 8
    };
    for (dev, gemm) in [
        (
            device(),
            if sg8 {
                ConvVariant::Sg8
            } else {
                ConvVariant::Tiled
            },
        ),
        (portable_device(), ConvVariant::Tiled),
    ] {
        let eight = if dev.caps().cpu {
            gemm
        } else {
            ConvVariant::Direct
        };
        for (m, want) in [
            (1, ConvVariant::Direct),
            (7, ConvVariant::Direct),
            (8, eight),
        ] {
            let pl = plan(dev, m, 100, 100, 2).unwrap();
            assert_eq!(pl.variant, want, "m = {m}: {pl:?}");
        }
    }
    eprintln!(
        "conv kernels under test (8+ rows per group): default device {}, portable device Tiled",
        if sg8 { "Sg8" } else { "Tiled" }
    );
}

#[test]
fn conv2d_forward_f32() {
    run(CASES_F32, problem(Rows::Few), |p| {
        block_on(check_forward(device(), p, DType::F32, Activation::None))
    });
}

#[test]
fn conv2d_forward_gemm_f32() {
    run(CASES_GEMM_F32, problem(Rows::Gemm), |p| {
        block_on(check_forward(device(), p, DType::F32, Activation::None))
    });
}

#[test]
fn conv2d_forward_tiled_f32() {
    run(CASES_GEMM_F32, problem(Rows::Gemm), |p| {
        block_on(check_forward(
            portable_device(),
            p,
            DType::F32,
            Activation::None,
        ))
    });
}

#[test]
fn conv2d_forward_f16() {
    require_f16(device());
    run(CASES_F16, problem(Rows::Few), |p| {
        block_on(check_forward(device(), p, DType::F16, Activation::None))
    });
}

/// Fixed problems for the activation tests, one per kernel family: 3 rows per group (the
/// Direct kernel, DR = 4), and 12 rows per group over ragged columns (the GEMM kernels, RT = 2
/// on `Sg8`). The activation is fused into each kernel's store; the geometry does not matter
/// for it, and each (kernel, activation, dtype) is one more pipeline to compile.
fn act_problems() -> [Problem; 2] {
    let p = |g, seed| Problem {
        g,
        seed,
        int: false,
        bias: true,
        views: false,
    };
    let gemm = ConvGeom {
        n: 2,
        c: 8,
        h: 6,
        w: 7,
        o: 24,
        kh: 3,
        kw: 2,
        groups: 2,
        stride: [1, 2],
        pad: [1, 0, 1, 1],
        dil: [2, 1],
    };
    let direct = ConvGeom { c: 6, o: 6, ..gemm };
    [p(direct, 30), p(gemm, 31)]
}

/// Every fused activation after the bias, forward and (with `transposed`) conv_transpose2d
/// (whose output_padding here exceeds the vertical stride: dy rows past the input are zeros).
fn activations(dev: &Device, dtype: DType, problems: &[Problem], transposed: bool) {
    for act in ACTIVATIONS {
        for p in problems {
            let mut r = block_on(check_forward(dev, p, dtype, act));
            if transposed {
                r = r.and_then(|_| block_on(check_transpose(dev, p, dtype, [1, 0], act)));
            }
            r.unwrap_or_else(|e| panic!("{act:?}: {e}\n{p:?}"));
        }
    }
}

#[test]
fn conv2d_activations_f32() {
    activations(device(), DType::F32, &act_problems(), true);
}

#[test]
fn conv2d_activations_tiled_f32() {
    // The Direct problem runs the same WGSL on every device.
    activations(portable_device(), DType::F32, &act_problems()[1..], true);
}

#[test]
fn conv2d_activations_f16() {
    require_f16(device());
    // The f16 store (one rounding after the activation) is the same code in every kernel.
    activations(device(), DType::F16, &act_problems()[..1], false);
}

#[test]
fn conv2d_backward_f32() {
    run(CASES_F32, problem(Rows::Few), |p| {
        block_on(check_backward(device(), p, DType::F32))
    });
}

#[test]
fn conv2d_backward_gemm_f32() {
    run(CASES_GEMM_F32, problem(Rows::Gemm), |p| {
        block_on(check_backward(device(), p, DType::F32))
    });
}

#[test]
fn conv2d_backward_tiled_f32() {
    run(CASES_GEMM_F32, problem(Rows::Gemm), |p| {
        block_on(check_backward(portable_device(), p, DType::F32))
    });
}

#[test]
fn conv2d_backward_f16() {
    require_f16(device());
    run(CASES_F16, problem(Rows::Few), |p| {
        block_on(check_backward(device(), p, DType::F16))
    });
}

/// conv_transpose2d with bias, output_padding below stride or dilation.
fn transpose_cases(dev: &Device, rows: Rows, cases: u32, dtype: DType) {
    let s = (problem(rows), 0usize..=2, 0usize..=2);
    run(cases, s, |(p, a, b)| {
        let out_pad = output_padding(&p.g, (*a, *b));
        block_on(check_transpose(dev, p, dtype, out_pad, Activation::None))
    });
}

#[test]
fn conv_transpose2d_f32() {
    transpose_cases(device(), Rows::Few, CASES_F32, DType::F32);
}

#[test]
fn conv_transpose2d_gemm_f32() {
    transpose_cases(device(), Rows::Gemm, CASES_GEMM_F32, DType::F32);
}

#[test]
fn conv_transpose2d_tiled_f32() {
    transpose_cases(portable_device(), Rows::Gemm, CASES_GEMM_F32, DType::F32);
}

#[test]
fn conv_transpose2d_f16() {
    require_f16(device());
    transpose_cases(device(), Rows::Few, CASES_F16, DType::F16);
}

/// The 1-D gradient entry points agree with the reference on H = 1 problems.
#[test]
fn conv1d_backward_f32() {
    let s = problem(Rows::Few).prop_filter("1-D", |p| {
        p.g.h == 1 && p.g.kh == 1 && p.g.stride[0] == 1 && p.g.pad[0] + p.g.pad[1] == 0
    });
    run(24, s, |p| block_on(check_1d_backward(device(), p)));
}

/// `DirectLines` (one row per group, kernel rows stepping one source line: depthwise forward
/// with stride == dilation, and the weight gradient of a single-output-channel group) over
/// heights that are not multiples of its 4-line blocks, against the reference on integers
/// (exact). The kernel is the same WGSL on every device: the default device only. Minimal failing case: conv2d of x = [1, 2, 3, 4, 5, 6] as [1, 1, 6, 1] with
/// w = [1, 10] as [1, 1, 2, 1] must give [21, 32, 43, 54, 65].
#[test]
fn conv2d_direct_lines_ragged() {
    let base = ConvGeom {
        n: 2,
        c: 3,
        h: 6,
        w: 5,
        o: 3,
        kh: 2,
        kw: 3,
        groups: 3,
        stride: [1, 1],
        pad: [0, 0, 1, 1],
        dil: [1, 1],
    };
    let mut cases = vec![(
        ConvGeom {
            n: 1,
            c: 1,
            h: 6,
            w: 1,
            o: 1,
            kh: 2,
            kw: 1,
            groups: 1,
            pad: [0; 4],
            ..base
        },
        Dir::Forward,
    )];
    for h in 5..=12 {
        cases.push((ConvGeom { h, ..base }, Dir::Forward));
        let s2 = ConvGeom {
            h,
            stride: [2, 1],
            dil: [2, 1],
            pad: [2, 1, 1, 1],
            ..base
        };
        cases.push((s2, Dir::Forward));
    }
    // Three 8-column blocks per line, the last ragged.
    cases.push((
        ConvGeom {
            h: 9,
            w: 19,
            ..base
        },
        Dir::Forward,
    ));
    for kh in 4..=7 {
        cases.push((ConvGeom { h: 9, kh, ..base }, Dir::Weight));
    }
    let dev = device();
    let mut failures = Vec::new();
    for (i, &(g, dir)) in cases.iter().enumerate() {
        let pl = expected_plan(dev, &g, dir);
        let p = Problem {
            g,
            seed: 70 + i as u64,
            int: true,
            bias: dir == Dir::Forward,
            views: false,
        };
        let r = match dir {
            Dir::Forward => block_on(check_forward(dev, &p, DType::F32, Activation::None)),
            _ => block_on(check_wgrad(dev, &p, DType::F32)),
        };
        if let Err(e) = r {
            failures.push(format!("{dir:?} {pl:?} of {g:?}:\n{e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
