//! The GPU plan's convolution kernel (`conv_wg`: the large-tile core shared with GEMM, 64x64
//! and 128x64 tiles staged through workgroup memory, double buffered) run on lavapipe through
//! `gpu_plans_device()`, against the same f64 reference and error model as conv.rs: generated
//! problems with 32-72 rows per group (every direction, the transposed convolution, views,
//! groups and depthwise multipliers), small-integer problems (exact), f16, fixed row counts at
//! the tile boundaries, and split-k in every direction (bias and activation applied by the
//! reduction) with bitwise determinism. Also the GPU plan's other change: the direct kernel for
//! 8-31 rows per group over lines of 8 columns or more.

use wgtensor::ops::conv::{plan, ConvVariant};
use wgtensor::ops::Activation;
use wgtensor::{DType, Device};

use crate::common::conv_ref::{ConvGeom, Dir};
use crate::common::{gpu_plans_device, require_f16};
use crate::conv_check::{expected_plan, int_problem, problem, Problem, Rows};
use crate::conv_large::{check_all, check_split, runs_agree};
use crate::strategies::run;

const CASES_F32: u32 = 6;
const CASES_EXACT_F32: u32 = 4;
const CASES_F16: u32 = 2;

fn dev() -> &'static Device {
    gpu_plans_device()
}

#[test]
fn conv_wg_is_the_gpu_plan_from_32_rows() {
    // Below 32 rows the direct kernel (over these 100-column lines) or the register kernels.
    for m in [1, 7, 8, 31, 32, 200] {
        let pl = plan(dev(), m, 100, 100, 1).unwrap();
        assert_eq!(
            pl.variant == ConvVariant::WgTiled,
            m >= 32,
            "m = {m}: {pl:?}"
        );
    }
    // TM = 8 once the 128-row tiles alone fill the device's estimated slots (lavapipe's are
    // its threads, a discrete GPU's 256), else TM = 4.
    let slots = dev().caps().parallelism;
    assert_eq!(plan(dev(), 64, 4096, 100, 1).unwrap().rt, 4);
    assert_eq!(plan(dev(), 128, 64 * (slots - 1), 100, 1).unwrap().rt, 4);
    assert_eq!(plan(dev(), 128, 64 * slots, 100, 1).unwrap().rt, 8);
    // Never TN = 8 (the 128 x 128 tile ran slower on the H200): 128 x 64 however wide.
    let shape = |m, ncols| {
        let pl = plan(dev(), m, ncols, 100, 1).unwrap();
        (pl.rt, pl.ct)
    };
    assert_eq!(shape(128, 128 * slots), (8, 4));
    assert_eq!(shape(64, 128 * slots), (4, 4));
}

#[test]
fn conv_wg_f32() {
    run(CASES_F32, problem(Rows::Wide), |p| {
        check_all(dev(), p, DType::F32, Activation::None, [0, 0])
    });
}

#[test]
fn conv_wg_exact_f32() {
    run(CASES_EXACT_F32, int_problem(Rows::Wide), |p| {
        check_all(dev(), p, DType::F32, Activation::Relu, [0, 0])
    });
}

#[test]
fn conv_wg_f16() {
    require_f16(dev());
    run(CASES_F16, problem(Rows::Wide), |p| {
        check_all(dev(), p, DType::F16, Activation::None, [0, 0])
    });
}

/// Rows per group on and off the 64- and 128-row tiles in every direction over ragged
/// columns, with a stride (the data gradient's divisibility test) and grouped.
#[test]
fn conv_wg_row_tiles() {
    let mut failures = Vec::new();
    for (i, m) in [32usize, 33, 63, 64, 65, 100, 128, 129]
        .into_iter()
        .enumerate()
    {
        let g = ConvGeom {
            n: 2,
            c: 2 * m,
            h: 7,
            w: 6,
            o: 2 * m,
            kh: 3,
            kw: 2,
            groups: 2,
            stride: [1, 2],
            pad: [1, 1, 0, 1],
            dil: [1, 1],
        };
        for dir in [Dir::Forward, Dir::Data, Dir::Weight] {
            let pl = expected_plan(dev(), &g, dir);
            assert_eq!(pl.variant, ConvVariant::WgTiled, "{dir:?} of {g:?}: {pl:?}");
            assert!(m > 64 || pl.rt == 4, "{dir:?} of {g:?}: {pl:?}");
        }
        let p = Problem {
            g,
            seed: 90 + i as u64,
            int: i % 2 == 0,
            bias: true,
            views: i % 3 == 0,
        };
        if let Err(e) = check_all(dev(), &p, DType::F32, Activation::Gelu, [0, 0]) {
            failures.push(format!("m = {m}: {e}\n{p:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// One split-k problem per direction with 32+ rows and one output tile: a weight gradient
/// (K = 4 * 16 * 16), a forward with C * 9 = 1152, a strided data gradient with O * 9 = 1152.
fn splitk_fixed() -> [(Dir, ConvGeom); 3] {
    let base = ConvGeom {
        n: 4,
        c: 5,
        h: 16,
        w: 16,
        o: 40,
        kh: 3,
        kw: 3,
        groups: 1,
        stride: [1, 1],
        pad: [1, 1, 1, 1],
        dil: [1, 1],
    };
    [
        (Dir::Weight, base),
        (
            Dir::Forward,
            ConvGeom {
                n: 1,
                c: 128,
                h: 6,
                w: 6,
                o: 48,
                pad: [0; 4],
                ..base
            },
        ),
        (
            Dir::Data,
            ConvGeom {
                n: 1,
                c: 36,
                h: 6,
                w: 6,
                o: 128,
                stride: [2, 2],
                pad: [0; 4],
                ..base
            },
        ),
    ]
}

#[test]
fn conv_wg_splitk_f32() {
    for (i, (dir, g)) in splitk_fixed().into_iter().enumerate() {
        for int in [false, true] {
            let p = Problem {
                g,
                seed: 120 + i as u64,
                int,
                bias: true,
                views: false,
            };
            check_split(dev(), &p, DType::F32, dir, Activation::Relu)
                .unwrap_or_else(|e| panic!("{dir:?} of {g:?}: {e}"));
        }
        let pl = expected_plan(dev(), &g, dir);
        assert_eq!(pl.variant, ConvVariant::WgTiled, "{pl:?}");
        runs_agree(dev(), &g, dir, DType::F32, 2);
    }
}

/// Weight gradients on a device planning as a 256-slot GPU: 72 output channels of 2 input
/// channels (two 64-row tiles, which would split K) take one 128-row tile split over
/// K = 4 * 128 * 128 into 256 slices, the tall tile's split path; of 8 input channels (72
/// columns), two 128 x 64 tiles split as far; against the reference and run to run.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn conv_wg_large_tiles_split_k_on_a_wide_gpu() {
    let dev = crate::common::wide_gpu_plans_device();
    for (c, seed) in [(2, 310), (8, 311)] {
        let g = ConvGeom {
            n: 4,
            c,
            h: 128,
            w: 128,
            o: 72,
            kh: 3,
            kw: 3,
            groups: 1,
            stride: [1, 1],
            pad: [1, 1, 1, 1],
            dil: [1, 1],
        };
        let pl = expected_plan(dev, &g, Dir::Weight);
        assert_eq!(
            (pl.variant, pl.rt, pl.ct),
            (ConvVariant::WgTiled, 8, 4),
            "{pl:?}"
        );
        assert!(pl.splits >= 128, "{pl:?}");
        let p = Problem {
            g,
            seed,
            int: false,
            bias: false,
            views: false,
        };
        check_split(dev, &p, DType::F32, Dir::Weight, Activation::None)
            .unwrap_or_else(|e| panic!("{g:?}: {e}"));
        runs_agree(dev, &g, Dir::Weight, DType::F32, 2);
    }
}

/// A depthwise weight gradient over a long K on the GPU plan: its direct invocations (3 lines
/// of 3 columns per channel) are far too few for the device however many channels, so K is
/// split (the `gpu_plans` device's parallelism is the host's threads: 8 channels over K = 4096
/// give 2 or more slices), and the slices' fixed-order sum matches the reference, run to run.
#[test]
fn gpu_depthwise_weight_gradient_splits_k() {
    let g = ConvGeom {
        n: 4,
        c: 8,
        h: 32,
        w: 32,
        o: 8,
        kh: 3,
        kw: 3,
        groups: 8,
        stride: [1, 1],
        pad: [1, 1, 1, 1],
        dil: [1, 1],
    };
    let pl = expected_plan(dev(), &g, Dir::Weight);
    assert_eq!(pl.variant, ConvVariant::Direct, "{pl:?}");
    assert!(pl.splits > 1, "{pl:?}");
    for int in [false, true] {
        let p = Problem {
            g,
            seed: 300,
            int,
            bias: false,
            views: false,
        };
        check_split(dev(), &p, DType::F32, Dir::Weight, Activation::None)
            .unwrap_or_else(|e| panic!("{g:?}: {e}"));
    }
    runs_agree(dev(), &g, Dir::Weight, DType::F32, 2);
}

/// GPUs' direct kernel for 8 to 31 rows per group over output lines of 8 columns or more
/// (grouped convolutions such as 256 channels in 32 groups): forward and data gradient run
/// `Direct` in 8-row blocks (ragged at 9 and 31 rows), strided too (the data gradient's
/// transposed gather); the weight gradient, whose lines are kernel rows, keeps the GEMM kernels.
#[test]
fn gpu_direct_from_8_to_31_rows() {
    let mut failures = Vec::new();
    for (i, m) in [8usize, 9, 16, 31].into_iter().enumerate() {
        let stride = if i % 2 == 0 { [1, 1] } else { [2, 2] };
        let g = ConvGeom {
            n: 2,
            c: 2 * m,
            h: 5,
            w: 17,
            o: 2 * m,
            kh: 3,
            kw: 3,
            groups: 2,
            stride,
            pad: [1, 1, 1, 1],
            dil: [1, 1],
        };
        for dir in [Dir::Forward, Dir::Data] {
            let pl = expected_plan(dev(), &g, dir);
            assert_eq!(
                (pl.variant, pl.rt),
                (ConvVariant::Direct, 8),
                "{dir:?} of {g:?}: {pl:?}"
            );
        }
        let pl = expected_plan(dev(), &g, Dir::Weight);
        assert_ne!(pl.variant, ConvVariant::Direct, "{pl:?}");
        let p = Problem {
            g,
            seed: 140 + i as u64,
            int: i % 2 == 1,
            bias: true,
            views: i == 2,
        };
        if let Err(e) = check_all(dev(), &p, DType::F32, Activation::Relu, [0, 0]) {
            failures.push(format!("m = {m}: {e}\n{p:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
