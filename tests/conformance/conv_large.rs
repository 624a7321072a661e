//! Convolution conformance on the kernels' larger paths, against the same f64 reference and
//! error model as conv.rs (see its module doc):
//!
//! - row blocks: rows per group M (O/groups forward and weight gradient, C/groups data
//!   gradient) at every block boundary of both kernel families (Direct: DR = 1, 2, 4, 8 rows
//!   per invocation below 8 rows; GEMM: RT = 1, 2, 4 row blocks of 8 on `Sg8`, two 32-row
//!   tiles above 32 on both), ragged rows, many ragged columns (> 64);
//! - split-k: K >= 1024 with few output tiles (the weight gradient's N*OH*OW, a forward with
//!   C/groups*kH*kW >= 1024, a data gradient with O/groups*kH*kW >= 1024), where the partial
//!   GEMMs write an f32 workspace and a fixed-order reduction applies bias and activation;
//!   each such case asserts that the launch splits (`ops::conv::plan`);
//! - exact cases: small-integer data on every path (small, row blocks, split-k) with tolerance
//!   0, and bitwise determinism of split-k over repeated runs.
//!
//! The GEMM kernels run on both devices (`Sg8` on the default device on lavapipe, `Tiled` on
//! the portable one); Direct is the same WGSL on every device.

use proptest::prelude::*;
use wgtensor::ops::conv::ConvVariant;
use wgtensor::ops::{conv2d, conv2d_backward_input, conv2d_backward_weight, conv_transpose2d};
use wgtensor::ops::{Activation, Conv2dOptions, ConvTranspose2dOptions};
use wgtensor::{DType, Device, Tensor};

use crate::check::compare_bits;
use crate::common::conv_ref::{ConvGeom, Dir};
use crate::common::{self, device, portable_device, require_f16};
use crate::conv_check::{
    check_backward, check_dgrad, check_forward, check_transpose, check_wgrad, expected_plan,
    fit_kernel, grouping, int_problem, make_data, options, output_padding, problem_of, Problem,
    Rows, ACTIVATIONS,
};
use crate::strategies::run;
use pollster::block_on;

// Each large or split-k case costs tens of milliseconds (reference loops included).
const CASES_LARGE_F32: u32 = 6;
const CASES_LARGE_TILED_F32: u32 = 4;
const CASES_LARGE_F16: u32 = 3;
/// Per direction.
const CASES_SPLITK_F32: u32 = 3;
const CASES_SPLITK_TILED_F32: u32 = 2;
const CASES_SPLITK_F16: u32 = 1;

// ---------------------------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------------------------

/// Rows per group: one row block (RT = 1), 9-16 (RT = 2), 17-40 (RT = 4; above 32 two row
/// tiles, the second ragged).
fn rows() -> BoxedStrategy<usize> {
    prop_oneof![1 => 1usize..=8, 2 => 9usize..=16, 2 => 17usize..=40].boxed()
}

/// Products of the reference loops, kept below a few million per direction.
fn taps(g: &ConvGeom) -> usize {
    g.n * g.o * g.oh() * g.ow() * g.cg() * g.kh * g.kw
}

/// Many rows per group and many columns (N*OH*OW > 64), grouped or depthwise with a channel
/// multiplier, kernels 1-4, stride and dilation 1-2, asymmetric padding.
fn large_geom() -> BoxedStrategy<ConvGeom> {
    (
        (1usize..=2, rows(), rows(), 6usize..=14, 6usize..=14),
        (
            1usize..=4,
            1usize..=4,
            1usize..=2,
            1usize..=2,
            1usize..=2,
            1usize..=2,
        ),
        (0usize..=2, 0usize..=2, 0usize..=2, 0usize..=2),
        (1usize..=2, any::<bool>()),
    )
        .prop_map(
            |((n, cg, og, h, w), (kh, kw, sh, sw, dh, dw), pad, (g, depthwise))| {
                let (cg, groups) = grouping(cg, g, depthwise);
                let groups = if depthwise { 2 + groups % 3 } else { groups };
                fit_kernel(ConvGeom {
                    n,
                    c: cg * groups,
                    h,
                    w,
                    o: og * groups,
                    kh,
                    kw,
                    groups,
                    stride: [sh, sw],
                    pad: [pad.0, pad.1, pad.2, pad.3],
                    dil: [dh, dw],
                })
            },
        )
        .prop_filter("many columns, bounded work", |g| {
            g.n * g.oh() * g.ow() > 64 && taps(g) <= 4_000_000
        })
        .boxed()
}

/// Geometries whose `dir` GEMM has K >= 1024 and few output tiles (split-k territory).
fn splitk_geom(dir: Dir) -> BoxedStrategy<ConvGeom> {
    // A long K from the channels: C/groups (forward) or O/groups (data gradient) with a 3x3
    // (>= 114 channels) or 5x5 (>= 41) kernel.
    let long = || {
        prop_oneof![
            (114usize..=160).prop_map(|c| (c, 3usize)),
            (41usize..=64).prop_map(|c| (c, 5usize)),
        ]
    };
    let short = || 1usize..=12;
    let s = match dir {
        Dir::Forward | Dir::Data => (
            (1usize..=2, long(), short(), 5usize..=8, 5usize..=8),
            (1usize..=2, 1usize..=2, 0usize..=1, 0usize..=1, 1usize..=2),
        )
            .prop_map(move |((n, (lc, k), sc, h, w), (groups, s, p0, p1, d))| {
                let (cg, og) = if dir == Dir::Forward {
                    (lc, sc)
                } else {
                    (sc, lc)
                };
                fit_kernel(ConvGeom {
                    n,
                    c: cg * groups,
                    h,
                    w,
                    o: og * groups,
                    kh: k,
                    kw: k,
                    groups,
                    stride: [s, 1],
                    pad: [p0, p1, p1, p0],
                    dil: [1, d],
                })
            })
            .boxed(),
        // A long K = N*OH*OW from a batch of 2-4 24..36-pixel images.
        Dir::Weight => (
            (
                2usize..=4,
                1usize..=4,
                1usize..=12,
                24usize..=36,
                24usize..=36,
            ),
            (1usize..=3, 1usize..=3, 1usize..=2, 1usize..=2, 0usize..=2),
            (1usize..=3, any::<bool>()),
        )
            .prop_map(|((n, cg, og, h, w), (kh, kw, s, d, p), (g, depthwise))| {
                let (cg, groups) = grouping(cg, g, depthwise);
                fit_kernel(ConvGeom {
                    n,
                    c: cg * groups,
                    h,
                    w,
                    o: og * groups,
                    kh,
                    kw,
                    groups,
                    stride: [1, s],
                    pad: [p, 0, 0, p],
                    dil: [d, 1],
                })
            })
            .boxed(),
    };
    s.prop_filter("K >= 1024", move |g| g.gemm_dims(dir).2 >= 1024)
        .boxed()
}

fn large_problem(int: Option<bool>) -> impl Strategy<Value = (Problem, (usize, usize))> {
    (problem_of(large_geom(), int), (0usize..=1, 0usize..=1))
}

fn splitk_problem(dir: Dir, int: Option<bool>) -> impl Strategy<Value = (Problem, usize)> {
    (problem_of(splitk_geom(dir), int), 0usize..5)
}

// ---------------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------------

/// Forward (bias, `act`), data gradient, weight gradient, bias gradient and the transposed
/// convolution (bias, `act`) of one problem.
pub(crate) fn check_all(
    dev: &Device,
    p: &Problem,
    dtype: DType,
    act: Activation,
    out_pad: [usize; 2],
) -> Result<(), TestCaseError> {
    block_on(check_forward(dev, p, dtype, act))?;
    block_on(check_backward(dev, p, dtype))?;
    block_on(check_transpose(dev, p, dtype, out_pad, act))
}

/// Large problems with bias and without activation (conv.rs tests every activation and no
/// bias on both kernel families; each variant is one more pipeline per row block and dtype to
/// compile, seconds on lavapipe).
fn large_cases(dev: &Device, cases: u32, dtype: DType, int: Option<bool>) {
    run(cases, large_problem(int), |(p, op)| {
        let p = Problem { bias: true, ..*p };
        check_all(dev, &p, dtype, Activation::None, output_padding(&p.g, *op))
    });
}

/// Direction `dir` of a split-k problem: the launch must split; the forward and the
/// transposed convolution (the data-gradient GEMM) run with bias and `act`, which the
/// split-k reduction applies.
pub(crate) fn check_split(
    dev: &Device,
    p: &Problem,
    dtype: DType,
    dir: Dir,
    act: Activation,
) -> Result<(), TestCaseError> {
    let pl = expected_plan(dev, &p.g, dir);
    prop_assert!(
        pl.splits > 1,
        "{:?} of {:?} does not split: {:?}",
        dir,
        p.g,
        pl
    );
    match dir {
        Dir::Forward => block_on(check_forward(dev, p, dtype, act)),
        Dir::Data => {
            block_on(check_dgrad(dev, p, dtype))?;
            block_on(check_transpose(dev, p, dtype, [0, 0], act))
        }
        Dir::Weight => block_on(check_wgrad(dev, p, dtype)),
    }
}

fn splitk_cases(dev: &Device, cases: u32, dtype: DType, int: Option<bool>) {
    for dir in [Dir::Forward, Dir::Data, Dir::Weight] {
        run(cases, splitk_problem(dir, int), |(p, act)| {
            check_split(dev, p, dtype, dir, ACTIVATIONS[*act])
        });
    }
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[test]
fn conv2d_large_f32() {
    large_cases(device(), CASES_LARGE_F32, DType::F32, None);
}

#[test]
fn conv2d_large_tiled_f32() {
    large_cases(portable_device(), CASES_LARGE_TILED_F32, DType::F32, None);
}

#[test]
fn conv2d_large_f16() {
    require_f16(device());
    large_cases(device(), CASES_LARGE_F16, DType::F16, None);
}

/// Rows per group `ms` at the row-block boundaries of both kernel families (Direct: 1, 2, 3 |
/// 5, 7; GEMM: 8 | 9, 16 | 17, 32 | 33, 40) for each direction, over ragged columns; asserts
/// the kernel family and row block the plan picks.
fn row_blocks(dev: &Device, ms: &[usize]) {
    let mut failures = Vec::new();
    for (i, &m) in ms.iter().enumerate() {
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
            let pl = expected_plan(dev, &g, dir);
            let (direct, rt) = if m < 8 {
                (true, m.next_power_of_two())
            } else {
                (false, m.div_ceil(8).next_power_of_two().min(4))
            };
            let is_direct = matches!(pl.variant, ConvVariant::Direct | ConvVariant::DirectLines);
            assert_eq!(
                (is_direct, pl.rt as usize, pl.splits),
                (direct, rt, 1),
                "{dir:?} of {g:?}: {pl:?}"
            );
        }
        let p = Problem {
            g,
            seed: 50 + i as u64,
            int: false,
            bias: true,
            views: false,
        };
        if let Err(e) = check_all(dev, &p, DType::F32, Activation::None, [0, 0]) {
            failures.push(format!("m = {m}: {e}\n{p:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn conv2d_row_blocks_f32() {
    row_blocks(device(), &[1, 2, 3, 5, 7, 8, 9, 16, 17, 32, 33, 40]);
}

#[test]
fn conv2d_row_blocks_tiled_f32() {
    // Direct (m < 8) is the same WGSL on every device; Tiled has one 32-row tile.
    row_blocks(portable_device(), &[8, 9, 33, 40]);
}

#[test]
fn conv_splitk_f32() {
    splitk_cases(device(), CASES_SPLITK_F32, DType::F32, None);
}

#[test]
fn conv_splitk_tiled_f32() {
    splitk_cases(portable_device(), CASES_SPLITK_TILED_F32, DType::F32, None);
}

#[test]
fn conv_splitk_f16() {
    require_f16(device());
    splitk_cases(device(), CASES_SPLITK_F16, DType::F16, None);
}

/// Small integers everywhere: every output of forward, data gradient, weight gradient, bias
/// gradient and transposed convolution is exact (tolerance 0; the checks assert that every case
/// qualifies), on small problems of `rows`, row-block problems and split-k problems (with
/// relu, applied by the split-k reduction).
fn exact(dev: &Device, small: &[(Rows, u32)], large: u32, split: u32) {
    for &(rows, cases) in small {
        run(cases, int_problem(rows), |p| {
            check_all(dev, p, DType::F32, Activation::None, [0, 0])
        });
    }
    large_cases(dev, large, DType::F32, Some(true));
    for dir in [Dir::Forward, Dir::Data, Dir::Weight] {
        run(split, splitk_problem(dir, Some(true)), |(p, _)| {
            check_split(dev, p, DType::F32, dir, Activation::Relu)
        });
    }
}

#[test]
fn conv_exact_f32() {
    exact(device(), &[(Rows::Few, 16), (Rows::Gemm, 6)], 3, 2);
}

#[test]
fn conv_exact_tiled_f32() {
    exact(portable_device(), &[(Rows::Gemm, 6)], 2, 1);
}

#[test]
fn conv_exact_f16() {
    require_f16(device());
    run(6, int_problem(Rows::Few), |p| {
        block_on(check_forward(device(), p, DType::F16, Activation::None))?;
        block_on(check_backward(device(), p, DType::F16))
    });
}

// ---------------------------------------------------------------------------------------------
// Split-k determinism
// ---------------------------------------------------------------------------------------------

/// One fixed split-k problem per direction: a grouped weight gradient (K = 4*24*24), a forward
/// with C/groups*9 = 1152, a strided data gradient with O/groups*9 = 1152.
fn splitk_fixed() -> [(Dir, ConvGeom); 3] {
    let base = ConvGeom {
        n: 4,
        c: 8,
        h: 24,
        w: 24,
        o: 16,
        kh: 3,
        kw: 3,
        groups: 2,
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
                o: 8,
                groups: 1,
                pad: [0; 4],
                ..base
            },
        ),
        (
            Dir::Data,
            ConvGeom {
                n: 1,
                c: 8,
                h: 6,
                w: 6,
                o: 256,
                stride: [2, 2],
                pad: [0; 4],
                ..base
            },
        ),
    ]
}

/// Runs `dir` of `g` (forward with bias and tanh) on float data; returns the output.
fn run_dir(dev: &Device, g: &ConvGeom, dir: Dir, dtype: DType) -> Tensor {
    let p = Problem {
        g: *g,
        seed: 7,
        int: false,
        bias: true,
        views: false,
    };
    let d = make_data(&p, dtype);
    let x = common::upload(dev, &d.x, &g.x_shape(), dtype);
    let w = common::upload(dev, &d.w, &g.w_shape(), dtype);
    let dy = common::upload(dev, &d.dy, &g.y_shape(), dtype);
    let b = common::upload(dev, &d.bias, &[g.o], dtype);
    let o = options(g);
    let r = match dir {
        Dir::Forward => conv2d(
            &x,
            &w,
            Some(&b),
            &Conv2dOptions {
                activation: Activation::Tanh,
                ..o
            },
        ),
        Dir::Data => conv2d_backward_input(&dy, &w, [g.h, g.w], &o),
        Dir::Weight => conv2d_backward_weight(&dy, &x, [g.kh, g.kw], &o),
    };
    r.unwrap_or_else(|e| panic!("{dir:?} of {g:?}: {e}"))
}

/// `runs` runs of `dir` on `g`, which must split K, give bitwise identical outputs (the slices
/// are summed in a fixed order).
pub(crate) fn runs_agree(dev: &Device, g: &ConvGeom, dir: Dir, dtype: DType, runs: usize) {
    let pl = expected_plan(dev, g, dir);
    assert!(pl.splits > 1, "{dir:?} of {g:?} does not split: {pl:?}");
    let first = common::download(&run_dir(dev, g, dir, dtype)).unwrap();
    for run in 1..runs {
        let again = common::download(&run_dir(dev, g, dir, dtype)).unwrap();
        let what = format!("{dir:?} of {g:?} ({pl:?}), run {run} vs run 0");
        compare_bits(&what, &[first.len()], dtype, &again, &first)
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Three runs of each split-k problem are bitwise identical; so are three transposed
/// convolutions (with bias and gelu) on the data-gradient problem.
fn splitk_deterministic(dev: &Device, dtype: DType) {
    for (dir, g) in splitk_fixed() {
        runs_agree(dev, &g, dir, dtype, 3);
    }
    // conv_transpose2d from the data-gradient problem's O = 256 channels to its C = 8.
    let (_, g) = splitk_fixed()[2];
    let p = Problem {
        g,
        seed: 8,
        int: false,
        bias: true,
        views: false,
    };
    let d = make_data(&p, dtype);
    let x = common::upload(dev, &d.dy, &g.y_shape(), dtype);
    let w = common::upload(dev, &d.w, &g.w_shape(), dtype);
    let b = common::upload(dev, &d.bias[..g.c], &[g.c], dtype);
    let o = ConvTranspose2dOptions {
        stride: g.stride,
        groups: g.groups,
        output_padding: [1, 1],
        activation: Activation::Gelu,
        ..Default::default()
    };
    let run = || common::download(&conv_transpose2d(&x, &w, Some(&b), &o).unwrap()).unwrap();
    let first = run();
    for i in 1..3 {
        compare_bits(
            &format!("conv_transpose2d run {i} vs run 0"),
            &[first.len()],
            dtype,
            &run(),
            &first,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn conv_splitk_deterministic_f32() {
    splitk_deterministic(device(), DType::F32);
}

#[test]
fn conv_splitk_tiled_deterministic_f32() {
    splitk_deterministic(portable_device(), DType::F32);
}

#[test]
fn conv_splitk_deterministic_f16() {
    require_f16(device());
    splitk_deterministic(device(), DType::F16);
}
