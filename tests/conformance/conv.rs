//! Convolution conformance: conv2d / conv1d forward (bias, every activation), data gradient,
//! transposed convolution, weight gradient (split-k) and bias gradient against the f64 loops of
//! tests/common/conv_ref.rs, on generated geometries: N, C, H, W from 1 and odd, kernels 1-7,
//! stride 1-3, dilation 1-3, asymmetric padding, groups dividing C and O, depthwise with a
//! channel multiplier.
//!
//! Error model: every output is a sum of L products (L = the reduction length: C/groups*kH*kW
//! forward, O/groups*kH*kW data gradient, N*OH*OW weight gradient) accumulated in f32, in
//! slices for split-k then summed. Each product rounds once and each partial sum rounds once,
//! so `|got - want| <= (L + S + 1) * EPS32/2 * sum|products|` (S = number of split slices,
//! bounded by L), taken here as `(L + 2) * EPS32 * sum|products|` plus the output rounding
//! (`check::out_round`); the bias adds one rounding of |y|. Small-integer inputs whose sums stay
//! below 2^24 are exact: tolerance 0.

use proptest::prelude::*;
use wgtensor::ops::{
    conv1d, conv1d_backward_input, conv1d_backward_weight, conv2d, conv2d_backward_input,
    conv2d_backward_weight, conv_backward_bias, conv_transpose2d, Conv1dOptions, Conv2dOptions,
    ConvTranspose2dOptions, Padding,
};
use wgtensor::DType;

use crate::check::{compare, fetch_async, ok, out_round, EPS32};
use crate::common::conv_ref::{self, ConvGeom};
use crate::common::{self, device, require_f16};
#[cfg(not(target_arch = "wasm32"))]
use crate::strategies::run_async;
use crate::strategies::Rng;

const CASES_F32: u32 = 48;
const CASES_F16: u32 = 12;

/// A generated problem: geometry plus seeds for the data; `int` draws small integers.
#[derive(Debug, Clone, Copy)]
pub struct Problem {
    pub g: ConvGeom,
    pub seed: u64,
    pub int: bool,
    pub bias: bool,
}

fn geom_strategy() -> impl Strategy<Value = ConvGeom> {
    (
        (1usize..=3, 1usize..=4, 1usize..=4, 1usize..=9, 1usize..=9),
        (
            1usize..=7,
            1usize..=7,
            1usize..=3,
            1usize..=3,
            1usize..=3,
            1usize..=3,
        ),
        (0usize..=3, 0usize..=3, 0usize..=3, 0usize..=3),
        (1usize..=3, any::<bool>(), any::<bool>()),
    )
        .prop_map(
            |((n, cg, og, h, w), (kh, kw, sh, sw, dh, dw), pad, (g, depthwise, one_d))| {
                let (cg, groups) = if depthwise { (1, cg.max(2)) } else { (cg, g) };
                let mut geom = ConvGeom {
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
                };
                // Shrink the kernel until it fits (keeps every generated case legal).
                while !geom.valid() {
                    if geom.h + geom.pad[0] + geom.pad[1] <= geom.dil[0] * (geom.kh - 1) {
                        geom.kh -= 1;
                    }
                    if geom.w + geom.pad[2] + geom.pad[3] <= geom.dil[1] * (geom.kw - 1) {
                        geom.kw -= 1;
                    }
                }
                geom
            },
        )
}

pub fn problem() -> impl Strategy<Value = Problem> {
    (
        geom_strategy(),
        any::<u64>(),
        prop::bool::weighted(0.25),
        any::<bool>(),
    )
        .prop_map(|(g, seed, int, bias)| Problem { g, seed, int, bias })
}

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

pub fn options(g: &ConvGeom) -> Conv2dOptions {
    Conv2dOptions {
        stride: g.stride,
        padding: Padding {
            top: g.pad[0],
            bottom: g.pad[1],
            left: g.pad[2],
            right: g.pad[3],
        },
        dilation: g.dil,
        groups: g.groups,
        ..Default::default()
    }
}

/// Bound for a sum of `len` products whose magnitudes sum to `mag`, rounded to `dtype`.
fn tol(dtype: DType, want: f64, mag: f64, len: usize, int: bool) -> f64 {
    let err32 = if int && mag < 16_777_216.0 {
        0.0
    } else {
        (len as f64 + 2.0) * EPS32 * mag
    };
    out_round(dtype, want, err32)
}

/// Rounds reference inputs to `dtype` (the kernels see exactly those values).
fn rounded(dtype: DType, v: Vec<f64>) -> Vec<f64> {
    v.into_iter()
        .map(|x| common::round_to_dtype(dtype, x))
        .collect()
}

struct Data {
    x: Vec<f64>,
    w: Vec<f64>,
    dy: Vec<f64>,
    bias: Vec<f64>,
}

fn make_data(p: &Problem, dtype: DType) -> Data {
    let mut rng = Rng::new(p.seed);
    let g = &p.g;
    Data {
        x: rounded(dtype, data(g.x_len(), p.int, &mut rng)),
        w: rounded(dtype, data(g.w_len(), p.int, &mut rng)),
        dy: rounded(dtype, data(g.y_len(), p.int, &mut rng)),
        bias: rounded(dtype, data(g.o, p.int, &mut rng)),
    }
}

pub(crate) async fn check_forward(p: &Problem, dtype: DType) -> Result<(), TestCaseError> {
    let dev = device();
    let g = &p.g;
    let d = make_data(p, dtype);
    let x = common::upload(dev, &d.x, &g.x_shape(), dtype);
    let w = common::upload(dev, &d.w, &g.w_shape(), dtype);
    let b = common::upload(dev, &d.bias, &[g.o], dtype);
    let bias = p.bias.then_some(&b);
    let (want, mag) = conv_ref::conv_forward(g, &d.x, &d.w, p.bias.then_some(d.bias.as_slice()));
    let len = g.cg() * g.kh * g.kw;
    let y = ok("conv2d", conv2d(&x, &w, bias, &options(g)))?;
    let got = fetch_async("conv2d", &y, &g.y_shape()).await?;
    compare("conv2d", &g.y_shape(), &got, &want, |i| {
        tol(dtype, want[i], mag[i] + want[i].abs(), len, p.int)
    })?;
    if g.h == 1 && g.kh == 1 && g.stride[0] == 1 && g.pad[0] + g.pad[1] == 0 {
        let o1 = Conv1dOptions {
            stride: g.stride[1],
            padding: [g.pad[2], g.pad[3]],
            dilation: g.dil[1],
            groups: g.groups,
            ..Default::default()
        };
        let x1 = ok("reshape", x.reshape(&[g.n, g.c, g.w]))?;
        let w1 = ok("reshape", w.reshape(&[g.o, g.cg(), g.kw]))?;
        let y1 = ok("conv1d", conv1d(&x1, &w1, bias, &o1))?;
        let got1 = fetch_async("conv1d", &y1, &[g.n, g.o, g.ow()]).await?;
        compare("conv1d", &[g.n, g.o, g.ow()], &got1, &want, |i| {
            tol(dtype, want[i], mag[i] + want[i].abs(), len, p.int)
        })?;
    }
    Ok(())
}

pub(crate) async fn check_backward(p: &Problem, dtype: DType) -> Result<(), TestCaseError> {
    let dev = device();
    let g = &p.g;
    let d = make_data(p, dtype);
    let x = common::upload(dev, &d.x, &g.x_shape(), dtype);
    let w = common::upload(dev, &d.w, &g.w_shape(), dtype);
    let dy = common::upload(dev, &d.dy, &g.y_shape(), dtype);
    let o = options(g);

    let (want, mag) = conv_ref::conv_backward_input(g, &d.dy, &d.w);
    let dx = ok("dgrad", conv2d_backward_input(&dy, &w, [g.h, g.w], &o))?;
    let got = fetch_async("dgrad", &dx, &g.x_shape()).await?;
    let len = g.og() * g.kh * g.kw;
    compare("conv2d_backward_input", &g.x_shape(), &got, &want, |i| {
        tol(dtype, want[i], mag[i], len, p.int)
    })?;

    let (want, mag) = conv_ref::conv_backward_weight(g, &d.dy, &d.x);
    let dw = ok("wgrad", conv2d_backward_weight(&dy, &x, [g.kh, g.kw], &o))?;
    let got = fetch_async("wgrad", &dw, &g.w_shape()).await?;
    let len = g.n * g.oh() * g.ow();
    compare("conv2d_backward_weight", &g.w_shape(), &got, &want, |i| {
        tol(dtype, want[i], mag[i], len, p.int)
    })?;

    let want = conv_ref::conv_backward_bias(g, &d.dy);
    let db = ok("bias grad", conv_backward_bias(&dy))?;
    let got = fetch_async("bias grad", &db, &[g.o]).await?;
    let mag = conv_ref::conv_backward_bias(g, &d.dy.iter().map(|v| v.abs()).collect::<Vec<_>>());
    compare("conv_backward_bias", &[g.o], &got, &want, |i| {
        tol(dtype, want[i], mag[i], len, p.int)
    })?;
    Ok(())
}

#[test]
fn conv2d_forward_f32() {
    run_async(CASES_F32, problem(), async |p| {
        check_forward(p, DType::F32).await
    });
}

#[test]
fn conv2d_forward_f16() {
    require_f16(device());
    run_async(CASES_F16, problem(), async |p| {
        check_forward(p, DType::F16).await
    });
}

#[test]
fn conv2d_backward_f32() {
    run_async(CASES_F32, problem(), async |p| {
        check_backward(p, DType::F32).await
    });
}

#[test]
fn conv2d_backward_f16() {
    require_f16(device());
    run_async(CASES_F16, problem(), async |p| {
        check_backward(p, DType::F16).await
    });
}

/// conv_transpose2d is the data gradient of the forward convolution from C_out to C_in. Its
/// input is `[N, O, ih, iw]` with (ih, iw) = the forward output of `p.g`; its output size is
/// PyTorch's `(i - 1) * s - pad + d * (k - 1) + output_padding + 1`, which is the forward input
/// of a geometry `g2` whose forward output may be one longer than ih when output_padding
/// exceeds the stride (dilation > stride): those dy rows are zeros.
pub(crate) async fn check_transpose(
    p: &Problem,
    dtype: DType,
    out_pad: [usize; 2],
) -> Result<(), TestCaseError> {
    let dev = device();
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
    let (mut want, mag) = conv_ref::conv_backward_input(&g2, &dy, &wv);
    if p.bias {
        for (i, v) in want.iter_mut().enumerate() {
            *v += bv[(i / (oh * ow)) % g.c];
        }
    }
    let x = common::upload(dev, &xt, &[g.n, g.o, ih, iw], dtype);
    let w = common::upload(dev, &wv, &g.w_shape(), dtype);
    let b = common::upload(dev, &bv, &[g.c], dtype);
    let o = ConvTranspose2dOptions {
        stride: g.stride,
        padding: options(&g).padding,
        output_padding: out_pad,
        dilation: g.dil,
        groups: g.groups,
        ..Default::default()
    };
    let y = ok(
        "conv_transpose2d",
        conv_transpose2d(&x, &w, p.bias.then_some(&b), &o),
    )?;
    let got = fetch_async("conv_transpose2d", &y, &g2.x_shape()).await?;
    let len = g.og() * g.kh * g.kw;
    compare("conv_transpose2d", &g2.x_shape(), &got, &want, |i| {
        tol(dtype, want[i], mag[i] + want[i].abs(), len, p.int)
    })
}

#[test]
fn conv_transpose2d_f32() {
    let s = (problem(), 0usize..=2, 0usize..=2);
    run_async(CASES_F32, s, async |(p, a, b)| {
        check_transpose_padded(p, *a, *b, DType::F32).await
    });
}

/// [`check_transpose`] with output paddings `a`, `b` clamped to what PyTorch accepts.
pub(crate) async fn check_transpose_padded(
    p: &Problem,
    a: usize,
    b: usize,
    dtype: DType,
) -> Result<(), TestCaseError> {
    let op = [
        a.min(p.g.stride[0].max(p.g.dil[0]) - 1),
        b.min(p.g.stride[1].max(p.g.dil[1]) - 1),
    ];
    check_transpose(p, dtype, op).await
}

/// The 1-D gradient entry points agree with the reference on H = 1 problems.
#[test]
fn conv1d_backward_f32() {
    run_async(24, problem_1d(), check_backward_1d);
}

/// Problems with H = 1 (the 1-D entry points).
pub(crate) fn problem_1d() -> impl Strategy<Value = Problem> {
    problem().prop_filter("1-D", |p| {
        p.g.h == 1 && p.g.kh == 1 && p.g.stride[0] == 1 && p.g.pad[0] + p.g.pad[1] == 0
    })
}

pub(crate) async fn check_backward_1d(p: &Problem) -> Result<(), TestCaseError> {
    let dev = device();
    let g = &p.g;
    let d = make_data(p, DType::F32);
    let x = common::upload(dev, &d.x, &[g.n, g.c, g.w], DType::F32);
    let w = common::upload(dev, &d.w, &[g.o, g.cg(), g.kw], DType::F32);
    let dy = common::upload(dev, &d.dy, &[g.n, g.o, g.ow()], DType::F32);
    let o = Conv1dOptions {
        stride: g.stride[1],
        padding: [g.pad[2], g.pad[3]],
        dilation: g.dil[1],
        groups: g.groups,
        ..Default::default()
    };
    let (want, mag) = conv_ref::conv_backward_input(g, &d.dy, &d.w);
    let dx = ok("dgrad1d", conv1d_backward_input(&dy, &w, g.w, &o))?;
    let got = fetch_async("dgrad1d", &dx, &[g.n, g.c, g.w]).await?;
    compare(
        "conv1d_backward_input",
        &[g.n, g.c, g.w],
        &got,
        &want,
        |i| tol(DType::F32, want[i], mag[i], g.og() * g.kw, p.int),
    )?;
    let (want, mag) = conv_ref::conv_backward_weight(g, &d.dy, &d.x);
    let dw = ok("wgrad1d", conv1d_backward_weight(&dy, &x, g.kw, &o))?;
    let got = fetch_async("wgrad1d", &dw, &[g.o, g.cg(), g.kw]).await?;
    compare(
        "conv1d_backward_weight",
        &[g.o, g.cg(), g.kw],
        &got,
        &want,
        |i| tol(DType::F32, want[i], mag[i], g.n * g.ow(), p.int),
    )
}
