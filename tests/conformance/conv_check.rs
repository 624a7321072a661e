//! Shared convolution conformance machinery (conv.rs, conv_large.rs, conv_grad.rs): generated
//! problems (geometry, seeds, integer or float data, views), operands uploaded as views, the
//! kernel plan of each direction, the error model and the checks of every op against the f64
//! loops of tests/common/conv_ref.rs.
//!
//! Kernel families (`ops::conv::conv2d_plan` of each direction): groups with fewer than 8
//! rows (the GEMM's M) run `Direct` (`DirectLines` for single-row groups whose kernel rows step
//! one source line) on every device; larger groups run `Sg8` (8-lane subgroups, the default
//! device on lavapipe) or the portable `Tiled` (the device without subgroups).
//!
//! Error model: every output is a sum of L products (L = the reduction length: C/groups*kH*kW
//! forward, O/groups*kH*kW data gradient, N*OH*OW weight gradient) accumulated in f32, in
//! slices for split-k then summed. Each product rounds once and each partial sum rounds once,
//! so `|got - want| <= (L + S + 1) * EPS32/2 * sum|products|` (S = number of split slices,
//! bounded by L), taken here as `(L + 2) * EPS32 * sum|products|` plus the output rounding
//! (`check::out_round`); the bias adds one rounding of |y|. A fused activation maps the
//! pre-activation error e to `lipschitz * e` plus its own f32 error (`elementwise::unary_err32`
//! at |x| + e), as in gemm.rs. Small-integer inputs whose sums stay below 2^24 are exact (every
//! product and partial sum, in any order and split, is an integer below 2^24): tolerance 0.

use proptest::prelude::*;
use wgtensor::ops::{
    conv1d, conv1d_backward_input, conv1d_backward_weight, conv2d, conv2d_backward_input,
    conv2d_backward_weight, conv_backward_bias, conv_transpose1d, conv_transpose2d, Activation,
    Conv1dOptions, Conv2dOptions, ConvTranspose1dOptions, ConvTranspose2dOptions, UnaryOp,
};
use wgtensor::{DType, Device, Tensor};

use crate::check::{compare, fetch_async, ok, out_round, EPS32};
use crate::common::conv_ref::{self, ConvGeom, Dir};
use crate::common::{self, reference, ViewOp};
use crate::elementwise::unary_err32;
use crate::strategies::Rng;

/// 2^24: integers below it are exact in f32.
pub const F32_INT_LIMIT: f64 = 16_777_216.0;

pub const ACTIVATIONS: [Activation; 5] = [
    Activation::None,
    Activation::Relu,
    Activation::Gelu,
    Activation::Sigmoid,
    Activation::Tanh,
];

// ---------------------------------------------------------------------------------------------
// Problems
// ---------------------------------------------------------------------------------------------

/// A generated problem: geometry plus seeds for the data; `int` draws small integers, `views`
/// passes the operands as views (see [`Layout`]).
#[derive(Debug, Clone, Copy)]
pub struct Problem {
    pub g: ConvGeom,
    pub seed: u64,
    pub int: bool,
    pub bias: bool,
    pub views: bool,
}

/// Shrinks the kernel until the dilated kernel fits the padded input (keeps a generated case
/// legal).
pub fn fit_kernel(mut geom: ConvGeom) -> ConvGeom {
    while !geom.valid() {
        if geom.h + geom.pad[0] + geom.pad[1] <= geom.dil[0] * (geom.kh - 1) {
            geom.kh -= 1;
        }
        if geom.w + geom.pad[2] + geom.pad[3] <= geom.dil[1] * (geom.kw - 1) {
            geom.kw -= 1;
        }
    }
    geom
}

/// Groups and channels per group: `g` groups of `cg` input channels, or depthwise (one input
/// channel per group, at least 2 groups) with the channel multiplier `og`.
pub fn grouping(cg: usize, g: usize, depthwise: bool) -> (usize, usize) {
    if depthwise {
        (1, cg.max(2))
    } else {
        (cg, g)
    }
}

/// Rows per group of generated problems (the GEMM's M: O/groups forward and weight gradient,
/// C/groups data gradient), which pick the kernel family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rows {
    /// 1-4 rows: the `Direct` kernel (the same WGSL on every device).
    Few,
    /// 8-12 rows: one row tile of the GEMM kernels (`Sg8` on the default device on lavapipe,
    /// `Tiled` on the portable device).
    Gemm,
    /// 32-72 rows: the GPU large-tile kernel (`WgTiled`, 64- and 128-row tiles) on the
    /// `gpu_plans` device.
    Wide,
}

fn geom_strategy(rows: Rows) -> impl Strategy<Value = ConvGeom> {
    let (per_group, max_groups) = match rows {
        Rows::Few => (1usize..=4, 3usize),
        Rows::Gemm => (8usize..=12, 2),
        Rows::Wide => (32usize..=72, 2),
    };
    (
        (
            1usize..=3,
            per_group.clone(),
            per_group,
            1usize..=9,
            1usize..=9,
        ),
        (
            1usize..=7,
            1usize..=7,
            1usize..=3,
            1usize..=3,
            1usize..=3,
            1usize..=3,
        ),
        (0usize..=3, 0usize..=3, 0usize..=3, 0usize..=3),
        (1usize..=max_groups, any::<bool>(), any::<bool>()),
    )
        .prop_map(
            move |((n, cg, og, h, w), (kh, kw, sh, sw, dh, dw), pad, (g, depthwise, one_d))| {
                // Depthwise: `og` is the channel multiplier; the groups count stays small.
                let (cg, groups) = grouping(cg, g, depthwise);
                let groups = if depthwise { groups.min(4) } else { groups };
                fit_kernel(ConvGeom {
                    n,
                    c: cg * groups,
                    h: if one_d { 1 } else { h },
                    w,
                    o: og * groups,
                    kh: if one_d { 1 } else { kh },
                    kw,
                    groups,
                    stride: [if one_d { 1 } else { sh }, sw],
                    pad: if one_d {
                        [0, 0, pad.2, pad.3]
                    } else {
                        [pad.0, pad.1, pad.2, pad.3]
                    },
                    dil: [if one_d { 1 } else { dh }, dw],
                })
            },
        )
}

/// Seeds, the value kind (`int`: forced, or small integers a quarter of the time), bias and
/// views for geometries from `geoms`.
pub fn problem_of(
    geoms: impl Strategy<Value = ConvGeom>,
    int: Option<bool>,
) -> impl Strategy<Value = Problem> {
    let int = match int {
        Some(v) => Just(v).boxed(),
        None => prop::bool::weighted(0.25).boxed(),
    };
    (
        geoms,
        any::<u64>(),
        int,
        any::<bool>(),
        prop::bool::weighted(0.25),
    )
        .prop_map(|(g, seed, int, bias, views)| Problem {
            g,
            seed,
            int,
            bias,
            views,
        })
}

pub fn problem(rows: Rows) -> impl Strategy<Value = Problem> {
    problem_of(geom_strategy(rows), None)
}

/// Small problems with small-integer data only (exact results).
pub fn int_problem(rows: Rows) -> impl Strategy<Value = Problem> {
    problem_of(geom_strategy(rows), Some(true))
}

// ---------------------------------------------------------------------------------------------
// Data and operands
// ---------------------------------------------------------------------------------------------

/// Values in [-1, 1), or small integers in -3..=3 (exact sums).
pub fn data(len: usize, int: bool, rng: &mut Rng) -> Vec<f64> {
    (0..len)
        .map(|_| {
            if int {
                rng.below(7) as f64 - 3.0
            } else {
                rng.unit() * 2.0 - 1.0
            }
        })
        .collect()
}

pub use crate::common::conv_options as options;

/// Rounds reference inputs to `dtype` (the kernels see exactly those values).
pub fn rounded(dtype: DType, v: Vec<f64>) -> Vec<f64> {
    v.into_iter()
        .map(|x| common::round_to_dtype(dtype, x))
        .collect()
}

pub struct Data {
    pub x: Vec<f64>,
    pub w: Vec<f64>,
    pub dy: Vec<f64>,
    pub bias: Vec<f64>,
}

pub fn make_data(p: &Problem, dtype: DType) -> Data {
    let mut rng = Rng::new(p.seed);
    let g = &p.g;
    Data {
        x: rounded(dtype, data(g.x_len(), p.int, &mut rng)),
        w: rounded(dtype, data(g.w_len(), p.int, &mut rng)),
        dy: rounded(dtype, data(g.y_len(), p.int, &mut rng)),
        bias: rounded(dtype, data(g.o, p.int, &mut rng)),
    }
}

/// How an operand reaches the op. Views exercise the launch's offsets (`Offset`: a contiguous
/// view at a non-zero offset, read in place) and its packing of strided operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Contiguous,
    /// `narrow(0, start, len)` of a parent with more rows (elements outside hold junk).
    Offset,
    /// `transpose(0, 1)` of a tensor stored with dims 0 and 1 swapped.
    Transposed,
    /// `narrow(1, 1, len)` of a parent with one more entry in dim 1 (strided).
    Sliced,
}

/// A value no kernel may read: it would show up in any sum it entered.
const JUNK: f64 = 1000.0;

/// Uploads `data` (row-major over `shape`) as a `layout` view of logical `shape`.
pub fn tensor(dev: &Device, data: &[f64], shape: &[usize], dtype: DType, layout: Layout) -> Tensor {
    let embed = |dim: usize, start: usize, extra: usize| {
        let outer: usize = shape[..dim].iter().product();
        let inner: usize = shape[dim + 1..].iter().product();
        let mut parent = shape.to_vec();
        parent[dim] += extra;
        let mut out = vec![JUNK; reference::numel(&parent)];
        for o in 0..outer {
            for i in 0..shape[dim] {
                let src = (o * shape[dim] + i) * inner;
                let dst = (o * parent[dim] + start + i) * inner;
                out[dst..dst + inner].copy_from_slice(&data[src..src + inner]);
            }
        }
        let op = ViewOp::Narrow {
            dim: dim as isize,
            start,
            len: shape[dim],
        };
        common::build_view(dev, &out, &parent, &[op], dtype)
    };
    match layout {
        Layout::Contiguous => common::upload(dev, data, shape, dtype),
        Layout::Offset => embed(0, 2, 3),
        Layout::Sliced => embed(1, 1, 1),
        Layout::Transposed => {
            let mut perm: Vec<usize> = (0..shape.len()).collect();
            perm.swap(0, 1);
            let stored = reference::permute(data, shape, &perm);
            let parent: Vec<usize> = perm.iter().map(|&i| shape[i]).collect();
            let op = ViewOp::Transpose(0, 1);
            common::build_view(dev, &stored, &parent, &[op], dtype)
        }
    }
}

/// The layouts of a problem's x, w, dy and bias.
fn layouts(p: &Problem) -> [Layout; 4] {
    if p.views {
        [
            Layout::Offset,
            Layout::Transposed,
            Layout::Sliced,
            Layout::Offset,
        ]
    } else {
        [Layout::Contiguous; 4]
    }
}

// ---------------------------------------------------------------------------------------------
// Kernel plans
// ---------------------------------------------------------------------------------------------

pub use crate::common::conv_plan as expected_plan;

// ---------------------------------------------------------------------------------------------
// Tolerances
// ---------------------------------------------------------------------------------------------

/// The f32 error bound of the activation of a value `x` known to within `e` (the bound of
/// gemm.rs: Lipschitz constant times e plus the activation's own error at |x| + e).
fn act_err32(act: Activation, x: f64, want: f64, e: f64) -> f64 {
    let (lipschitz, op) = match act {
        Activation::None => return e,
        Activation::Relu => (1.0, UnaryOp::Relu),
        Activation::Gelu => (1.13, UnaryOp::Gelu),
        Activation::Sigmoid => (0.25, UnaryOp::Sigmoid),
        Activation::Tanh => (1.0, UnaryOp::Tanh),
    };
    lipschitz * e + unary_err32(op, x.abs() + e, want.abs() + lipschitz * e)
}

/// Bound for `out = act(pre)`, `pre` a sum of `len` products whose magnitudes (with the bias)
/// sum to `mag`, rounded to `dtype` (module doc). Integer data: exact below 2^24.
pub fn tol(
    dtype: DType,
    pre: f64,
    out: f64,
    mag: f64,
    len: usize,
    int: bool,
    act: Activation,
) -> f64 {
    let e = if int && mag < F32_INT_LIMIT {
        0.0
    } else {
        (len as f64 + 2.0) * EPS32 * mag
    };
    out_round(dtype, out, act_err32(act, pre, out, e))
}

/// Integer problems must qualify for the zero tolerance everywhere (else they test nothing
/// exact): every |partial sum| <= sum |products| < 2^24.
fn assert_exact(p: &Problem, what: &str, mag: &[f64]) -> Result<(), TestCaseError> {
    if p.int {
        let max = mag.iter().cloned().fold(0.0, f64::max);
        prop_assert!(
            max < F32_INT_LIMIT,
            "{}: integer case is not exact (sum |products| up to {})",
            what,
            max
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------------

/// Forward `act(conv(x, w) + bias)` (and conv1d for 1-D problems) against the reference.
pub async fn check_forward(
    dev: &Device,
    p: &Problem,
    dtype: DType,
    act: Activation,
) -> Result<(), TestCaseError> {
    let g = &p.g;
    let d = make_data(p, dtype);
    let [lx, lw, _, lb] = layouts(p);
    let x = tensor(dev, &d.x, &g.x_shape(), dtype, lx);
    let w = tensor(dev, &d.w, &g.w_shape(), dtype, lw);
    let b = tensor(dev, &d.bias, &[g.o], dtype, lb);
    let bias = p.bias.then_some(&b);
    let (pre, mag) = conv_ref::conv_forward(g, &d.x, &d.w, p.bias.then_some(d.bias.as_slice()));
    let mag: Vec<f64> = mag.iter().zip(&pre).map(|(m, y)| m + y.abs()).collect();
    let f = reference::activation_fn(act);
    let want: Vec<f64> = pre.iter().map(|&v| f(v)).collect();
    let len = g.cg() * g.kh * g.kw;
    let what = format!("conv2d {act:?} {:?}", expected_plan(dev, g, Dir::Forward));
    assert_exact(p, &what, &mag)?;
    let o = Conv2dOptions {
        activation: act,
        ..options(g)
    };
    let y = ok(&what, conv2d(&x, &w, bias, &o))?;
    prop_assert_eq!(y.dtype(), dtype);
    let got = fetch_async(&what, &y, &g.y_shape()).await?;
    let t = |i: usize| tol(dtype, pre[i], want[i], mag[i], len, p.int, act);
    compare(&what, &g.y_shape(), &got, &want, t)?;
    if g.h == 1 && g.kh == 1 && g.stride[0] == 1 && g.pad[0] + g.pad[1] == 0 {
        let o1 = Conv1dOptions {
            stride: g.stride[1],
            padding: wgtensor::ops::Padding1d {
                left: g.pad[2],
                right: g.pad[3],
            },
            dilation: g.dil[1],
            groups: g.groups,
            activation: act,
        };
        let x1 = ok("reshape", x.reshape(&[g.n, g.c, g.w]))?;
        let w1 = ok("reshape", w.reshape(&[g.o, g.cg(), g.kw]))?;
        let y1 = ok("conv1d", conv1d(&x1, &w1, bias, &o1))?;
        let got1 = fetch_async("conv1d", &y1, &[g.n, g.o, g.ow()]).await?;
        compare("conv1d", &[g.n, g.o, g.ow()], &got1, &want, t)?;
    }
    Ok(())
}

/// Data gradient against the reference.
pub async fn check_dgrad(dev: &Device, p: &Problem, dtype: DType) -> Result<(), TestCaseError> {
    let g = &p.g;
    let d = make_data(p, dtype);
    let [_, lw, ldy, _] = layouts(p);
    let w = tensor(dev, &d.w, &g.w_shape(), dtype, lw);
    let dy = tensor(dev, &d.dy, &g.y_shape(), dtype, ldy);
    let (want, mag) = conv_ref::conv_backward_input(g, &d.dy, &d.w);
    let what = format!(
        "conv2d_backward_input {:?}",
        expected_plan(dev, g, Dir::Data)
    );
    assert_exact(p, &what, &mag)?;
    let dx = ok(
        &what,
        conv2d_backward_input(&dy, &w, [g.h, g.w], &options(g)),
    )?;
    let got = fetch_async(&what, &dx, &g.x_shape()).await?;
    let len = g.og() * g.kh * g.kw;
    compare(&what, &g.x_shape(), &got, &want, |i| {
        tol(
            dtype,
            want[i],
            want[i],
            mag[i],
            len,
            p.int,
            Activation::None,
        )
    })
}

/// Weight gradient against the reference.
pub async fn check_wgrad(dev: &Device, p: &Problem, dtype: DType) -> Result<(), TestCaseError> {
    let g = &p.g;
    let d = make_data(p, dtype);
    let [lx, _, ldy, _] = layouts(p);
    let x = tensor(dev, &d.x, &g.x_shape(), dtype, lx);
    let dy = tensor(dev, &d.dy, &g.y_shape(), dtype, ldy);
    let (want, mag) = conv_ref::conv_backward_weight(g, &d.dy, &d.x);
    let what = format!(
        "conv2d_backward_weight {:?}",
        expected_plan(dev, g, Dir::Weight)
    );
    assert_exact(p, &what, &mag)?;
    let dw = ok(
        &what,
        conv2d_backward_weight(&dy, &x, [g.kh, g.kw], &options(g)),
    )?;
    let got = fetch_async(&what, &dw, &g.w_shape()).await?;
    let len = g.n * g.oh() * g.ow();
    compare(&what, &g.w_shape(), &got, &want, |i| {
        tol(
            dtype,
            want[i],
            want[i],
            mag[i],
            len,
            p.int,
            Activation::None,
        )
    })
}

/// Bias gradient (dy summed over batch and space) against the reference.
pub async fn check_bias_grad(dev: &Device, p: &Problem, dtype: DType) -> Result<(), TestCaseError> {
    let g = &p.g;
    let d = make_data(p, dtype);
    let dy = tensor(dev, &d.dy, &g.y_shape(), dtype, layouts(p)[2]);
    let want = conv_ref::conv_backward_bias(g, &d.dy);
    let abs: Vec<f64> = d.dy.iter().map(|v| v.abs()).collect();
    let mag = conv_ref::conv_backward_bias(g, &abs);
    assert_exact(p, "conv_backward_bias", &mag)?;
    let db = ok("conv_backward_bias", conv_backward_bias(&dy))?;
    prop_assert_eq!(db.dtype(), dtype);
    let got = fetch_async("conv_backward_bias", &db, &[g.o]).await?;
    let len = g.n * g.oh() * g.ow();
    compare("conv_backward_bias", &[g.o], &got, &want, |i| {
        tol(
            dtype,
            want[i],
            want[i],
            mag[i],
            len,
            p.int,
            Activation::None,
        )
    })
}

pub async fn check_backward(dev: &Device, p: &Problem, dtype: DType) -> Result<(), TestCaseError> {
    check_dgrad(dev, p, dtype).await?;
    check_wgrad(dev, p, dtype).await?;
    check_bias_grad(dev, p, dtype).await
}

/// conv_transpose2d is the data gradient of the forward convolution from C_out to C_in. Its
/// input is `[N, O, ih, iw]` with (ih, iw) = the forward output of `p.g`; its output size is
/// PyTorch's `(i - 1) * s - pad + d * (k - 1) + output_padding + 1`, which is the forward input
/// of a geometry `g2` whose forward output may be one longer than ih when output_padding
/// exceeds the stride (dilation > stride): those dy rows are zeros. With bias and `act`;
/// 1-D problems also through conv_transpose1d.
pub async fn check_transpose(
    dev: &Device,
    p: &Problem,
    dtype: DType,
    out_pad: [usize; 2],
    act: Activation,
) -> Result<(), TestCaseError> {
    let g = p.g;
    let (ih, iw) = (g.oh(), g.ow());
    let size = |i: usize, s: usize, d: usize, k: usize, op: usize, pad: usize| {
        ((i - 1) * s + d * (k - 1) + 1 + op)
            .checked_sub(pad)
            .filter(|&v| v > 0)
    };
    let oh = size(
        ih,
        g.stride[0],
        g.dil[0],
        g.kh,
        out_pad[0],
        g.pad[0] + g.pad[1],
    );
    let ow = size(
        iw,
        g.stride[1],
        g.dil[1],
        g.kw,
        out_pad[1],
        g.pad[2] + g.pad[3],
    );
    let (Some(oh), Some(ow)) = (oh, ow) else {
        return Ok(()); // PyTorch rejects these too (checked in the error tests)
    };
    let g2 = ConvGeom { h: oh, w: ow, ..g };
    let mut rng = Rng::new(p.seed);
    let xt = rounded(dtype, data(g.n * g.o * ih * iw, p.int, &mut rng));
    let wv = rounded(dtype, data(g.w_len(), p.int, &mut rng));
    let bv = rounded(dtype, data(g.c, p.int, &mut rng));
    let mut dy = vec![0.0; g2.y_len()];
    let (fh, fw) = (g2.oh(), g2.ow());
    for (i, v) in xt.iter().enumerate() {
        let (nc, r) = (i / (ih * iw), i % (ih * iw));
        dy[(nc * fh + r / iw) * fw + r % iw] = *v;
    }
    let (mut pre, mag) = conv_ref::conv_backward_input(&g2, &dy, &wv);
    if p.bias {
        for (i, v) in pre.iter_mut().enumerate() {
            *v += bv[(i / (oh * ow)) % g.c];
        }
    }
    let mag: Vec<f64> = mag.iter().zip(&pre).map(|(m, y)| m + y.abs()).collect();
    let f = reference::activation_fn(act);
    let want: Vec<f64> = pre.iter().map(|&v| f(v)).collect();
    let [lx, lw, _, lb] = layouts(p);
    let x = tensor(dev, &xt, &[g.n, g.o, ih, iw], dtype, lx);
    let w = tensor(dev, &wv, &g.w_shape(), dtype, lw);
    let b = tensor(dev, &bv, &[g.c], dtype, lb);
    let bias = p.bias.then_some(&b);
    let o = ConvTranspose2dOptions {
        stride: g.stride,
        padding: options(&g).padding,
        output_padding: out_pad,
        dilation: g.dil,
        groups: g.groups,
        activation: act,
    };
    let what = format!(
        "conv_transpose2d {act:?} output_padding {out_pad:?} {:?}",
        expected_plan(dev, &g2, Dir::Data)
    );
    assert_exact(p, &what, &mag)?;
    let y = ok(&what, conv_transpose2d(&x, &w, bias, &o))?;
    let got = fetch_async(&what, &y, &g2.x_shape()).await?;
    let len = g.og() * g.kh * g.kw;
    let t = |i: usize| tol(dtype, pre[i], want[i], mag[i], len, p.int, act);
    compare(&what, &g2.x_shape(), &got, &want, t)?;
    if g.h == 1 && g.kh == 1 && g.stride[0] == 1 && g.pad[0] + g.pad[1] == 0 && out_pad[0] == 0 {
        let o1 = ConvTranspose1dOptions {
            stride: g.stride[1],
            padding: wgtensor::ops::Padding1d {
                left: g.pad[2],
                right: g.pad[3],
            },
            output_padding: out_pad[1],
            dilation: g.dil[1],
            groups: g.groups,
            activation: act,
        };
        let x1 = ok("reshape", x.reshape(&[g.n, g.o, iw]))?;
        let w1 = ok("reshape", w.reshape(&[g.o, g.cg(), g.kw]))?;
        let y1 = ok("conv_transpose1d", conv_transpose1d(&x1, &w1, bias, &o1))?;
        let got1 = fetch_async("conv_transpose1d", &y1, &[g.n, g.c, ow]).await?;
        compare("conv_transpose1d", &[g.n, g.c, ow], &got1, &want, t)?;
    }
    Ok(())
}

/// An output_padding from `(a, b)` that the options allow (below stride or dilation).
pub fn output_padding(g: &ConvGeom, (a, b): (usize, usize)) -> [usize; 2] {
    [
        a.min(g.stride[0].max(g.dil[0]) - 1),
        b.min(g.stride[1].max(g.dil[1]) - 1),
    ]
}

/// The 1-D gradient entry points on H = 1 problems.
pub async fn check_1d_backward(dev: &Device, p: &Problem) -> Result<(), TestCaseError> {
    let g = &p.g;
    let d = make_data(p, DType::F32);
    let x = common::upload(dev, &d.x, &[g.n, g.c, g.w], DType::F32);
    let w = common::upload(dev, &d.w, &[g.o, g.cg(), g.kw], DType::F32);
    let dy = common::upload(dev, &d.dy, &[g.n, g.o, g.ow()], DType::F32);
    let o = Conv1dOptions {
        stride: g.stride[1],
        padding: wgtensor::ops::Padding1d {
            left: g.pad[2],
            right: g.pad[3],
        },
        dilation: g.dil[1],
        groups: g.groups,
        ..Default::default()
    };
    let none = Activation::None;
    let (want, mag) = conv_ref::conv_backward_input(g, &d.dy, &d.w);
    let dx = ok("dgrad1d", conv1d_backward_input(&dy, &w, g.w, &o))?;
    let got = fetch_async("dgrad1d", &dx, &[g.n, g.c, g.w]).await?;
    let len = g.og() * g.kw;
    compare(
        "conv1d_backward_input",
        &[g.n, g.c, g.w],
        &got,
        &want,
        |i| tol(DType::F32, want[i], want[i], mag[i], len, p.int, none),
    )?;
    let (want, mag) = conv_ref::conv_backward_weight(g, &d.dy, &d.x);
    let dw = ok("wgrad1d", conv1d_backward_weight(&dy, &x, g.kw, &o))?;
    let got = fetch_async("wgrad1d", &dw, &[g.o, g.cg(), g.kw]).await?;
    let len = g.n * g.ow();
    let shape = [g.o, g.cg(), g.kw];
    compare("conv1d_backward_weight", &shape, &got, &want, |i| {
        tol(DType::F32, want[i], want[i], mag[i], len, p.int, none)
    })
}
