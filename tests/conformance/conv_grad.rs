//! Finite differences: the data, weight and bias gradients are the gradients of the device
//! forward, and the gradients of the transposed convolution are the forward convolution and
//! the weight gradient, on tiny f32 problems (the Direct kernel) and one with 8-12 rows per group
//! (the GEMM kernels: Sg8 on the default device, Tiled on the portable one).
//!
//! For `L(x, w, b) = <dy, conv2d(x, w) + b>` (the loss whose gradients the backward ops
//! compute), central differences along a direction u give, with `x± = f32(x ± e u)`:
//!
//!     L(x+) - L(x-) = <dgrad(dy, w), x+ - x->     (the same for w with wgrad, b with db)
//!
//! exactly in real arithmetic, because L is linear in each argument: there is no truncation
//! error, only rounding. The device computes both sides; each forward output y_i errs by at
//! most its conv.rs bound E_i, so a loss by `sum |dy_i| E_i`, and each gradient entry by its
//! own bound G_j, so the right side by `sum |x+_j - x-_j| G_j`. The check allows the sum of
//! those (plus f64 dot-product rounding), and also requires the random-direction difference to
//! be 100 times that tolerance, so a wrong tap, sign, group or channel offset in any gradient
//! (which moves it by O(1)) cannot pass. e = 1/4 along a random direction (random magnitudes,
//! the signs of the reference gradient so that the derivative cannot cancel), and along single
//! coordinates (spot checks of individual gradient entries, including entries at the border).
//! (Linearity makes the step size irrelevant to the truncation error; 1/4 keeps the difference
//! of the two losses well above their rounding.)

use wgtensor::ops::{
    conv2d, conv2d_backward_input, conv2d_backward_weight, conv_backward_bias, conv_transpose2d,
    ConvTranspose2dOptions,
};
use wgtensor::{DType, Device};

use crate::check::EPS32;
use crate::common::conv_ref::{self, ConvGeom};
use crate::common::{self, device, portable_device};
use crate::conv_check::{data, options, rounded};
use crate::strategies::Rng;

const E: f64 = 0.25;

/// L on the device, and the bound of its error (`sum |dy_i| E_i`), at a point.
type Loss<'a> = Box<dyn Fn(&[f64]) -> (f64, f64) + 'a>;

/// A linear functional of one argument `v` (the others fixed), evaluated on the device, with
/// its gradient from the device's backward op and the error bounds of both.
struct Case<'a> {
    what: String,
    v: Vec<f64>,
    loss: Loss<'a>,
    grad: Vec<f64>,
    grad_err: Vec<f64>,
    /// The reference gradient: the random direction follows its signs.
    grad_ref: Vec<f64>,
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn abs_dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x * y).abs()).sum()
}

/// Per-element bound `(len + 2) EPS32 mag` of a sum of `len` products (conv.rs module doc).
fn bound(mag: &[f64], len: usize) -> Vec<f64> {
    mag.iter().map(|m| (len as f64 + 2.0) * EPS32 * m).collect()
}

/// `L(v+) - L(v-)` against `<grad, v+ - v->` along a random direction and a few coordinates.
fn check_case(c: &Case, rng: &mut Rng) {
    let n = c.v.len();
    // Random magnitudes in [1/2, 1) with the signs of the reference gradient: the directional
    // derivative sum |g_j| u_j cannot cancel, so it is far above the rounding tolerance.
    let signed = |j: usize, r: f64| if c.grad_ref[j] < 0.0 { -r } else { r };
    let mut dirs: Vec<Vec<f64>> = vec![(0..n).map(|j| signed(j, 0.5 + 0.5 * rng.unit())).collect()];
    for j in [0, n - 1, rng.below(n)] {
        let mut u = vec![0.0; n];
        u[j] = 1.0;
        dirs.push(u);
    }
    for (k, u) in dirs.iter().enumerate() {
        let step = |sign: f64| -> Vec<f64> {
            let v: Vec<f64> = c.v.iter().zip(u).map(|(v, u)| v + sign * E * u).collect();
            rounded(DType::F32, v)
        };
        let (vp, vm) = (step(1.0), step(-1.0));
        let delta: Vec<f64> = vp.iter().zip(&vm).map(|(a, b)| a - b).collect();
        let ((lp, ep), (lm, em)) = ((c.loss)(&vp), (c.loss)(&vm));
        let lhs = lp - lm;
        let rhs = dot(&c.grad, &delta);
        let tol = ep + em + abs_dot(&delta, &c.grad_err) + 1e-12 * (lp.abs() + lm.abs());
        let dir = if k == 0 {
            "a random direction".to_string()
        } else {
            format!("coordinate {}", u.iter().position(|&x| x == 1.0).unwrap())
        };
        assert!(
            (lhs - rhs).abs() <= tol,
            "{} along {dir}: difference quotient {} vs gradient {} (|diff| {:e} > tol {:e})",
            c.what,
            lhs / (2.0 * E),
            rhs / (2.0 * E),
            ((lhs - rhs) / (2.0 * E)).abs(),
            tol / (2.0 * E)
        );
        if k == 0 {
            assert!(
                rhs.abs() > 100.0 * tol,
                "{}: the random-direction derivative {rhs:e} is too small to test (tol {tol:e})",
                c.what
            );
        }
    }
}

/// dx, dw and db of `<dy, conv2d(x, w) + b>` on `dev`.
fn conv_gradients(dev: &Device, g: &ConvGeom, seed: u64) {
    let mut rng = Rng::new(seed);
    let f32s = |n: usize, rng: &mut Rng| rounded(DType::F32, data(n, false, rng));
    let (x, w, b, dy) = (
        f32s(g.x_len(), &mut rng),
        f32s(g.w_len(), &mut rng),
        f32s(g.o, &mut rng),
        f32s(g.y_len(), &mut rng),
    );
    let up = |v: &[f64], s: &[usize]| common::upload(dev, v, s, DType::F32);
    let o = options(g);
    let len = g.cg() * g.kh * g.kw;
    let loss = |x: &[f64], w: &[f64], b: &[f64]| -> (f64, f64) {
        let y = conv2d(
            &up(x, &g.x_shape()),
            &up(w, &g.w_shape()),
            Some(&up(b, &[g.o])),
            &o,
        );
        let y = common::download(&y.expect("conv2d")).unwrap();
        let (want, mag) = conv_ref::conv_forward(g, x, w, Some(b));
        let mag: Vec<f64> = mag.iter().zip(&want).map(|(m, y)| m + y.abs()).collect();
        (dot(&dy, &y), abs_dot(&dy, &bound(&mag, len)))
    };
    let dyt = up(&dy, &g.y_shape());
    let what = |name: &str| format!("{name} of {g:?}");

    let dx = conv2d_backward_input(&dyt, &up(&w, &g.w_shape()), [g.h, g.w], &o).unwrap();
    let (grad_ref, mag) = conv_ref::conv_backward_input(g, &dy, &w);
    let case = Case {
        grad_ref,
        what: what("conv2d_backward_input"),
        v: x.clone(),
        loss: Box::new(|v| loss(v, &w, &b)),
        grad: common::download(&dx).unwrap(),
        grad_err: bound(&mag, g.og() * g.kh * g.kw),
    };
    check_case(&case, &mut rng);

    let dw = conv2d_backward_weight(&dyt, &up(&x, &g.x_shape()), [g.kh, g.kw], &o).unwrap();
    let (grad_ref, mag) = conv_ref::conv_backward_weight(g, &dy, &x);
    let k = g.n * g.oh() * g.ow();
    let case = Case {
        grad_ref,
        what: what("conv2d_backward_weight"),
        v: w.clone(),
        loss: Box::new(|v| loss(&x, v, &b)),
        grad: common::download(&dw).unwrap(),
        grad_err: bound(&mag, k),
    };
    check_case(&case, &mut rng);

    let db = conv_backward_bias(&dyt).unwrap();
    let abs: Vec<f64> = dy.iter().map(|v| v.abs()).collect();
    let case = Case {
        grad_ref: conv_ref::conv_backward_bias(g, &dy),
        what: what("conv_backward_bias"),
        v: b.clone(),
        loss: Box::new(|v| loss(&x, &w, v)),
        grad: common::download(&db).unwrap(),
        grad_err: bound(&conv_ref::conv_backward_bias(g, &abs), k),
    };
    check_case(&case, &mut rng);
}

/// For `<z, conv_transpose2d(x, w) + b>` (output_padding `op` below the stride): the gradient
/// in x is `conv2d(z, w)` and in w `conv2d_backward_weight(x, z)`.
fn transpose_gradients(dev: &Device, g: &ConvGeom, op: [usize; 2], seed: u64) {
    let (ih, iw) = (g.oh(), g.ow());
    let out = |i: usize, ax: usize, k: usize, pad: usize| {
        (i - 1) * g.stride[ax] + g.dil[ax] * (k - 1) + 1 + op[ax] - pad
    };
    let g2 = ConvGeom {
        h: out(ih, 0, g.kh, g.pad[0] + g.pad[1]),
        w: out(iw, 1, g.kw, g.pad[2] + g.pad[3]),
        ..*g
    };
    assert_eq!((g2.oh(), g2.ow()), (ih, iw), "{g2:?}");
    let mut rng = Rng::new(seed);
    let f32s = |n: usize, rng: &mut Rng| rounded(DType::F32, data(n, false, rng));
    let (x, w, b, z) = (
        f32s(g2.y_len(), &mut rng),
        f32s(g2.w_len(), &mut rng),
        f32s(g2.c, &mut rng),
        f32s(g2.x_len(), &mut rng),
    );
    let up = |v: &[f64], s: &[usize]| common::upload(dev, v, s, DType::F32);
    let ot = ConvTranspose2dOptions {
        stride: g.stride,
        padding: options(g).padding,
        output_padding: op,
        dilation: g.dil,
        groups: g.groups,
        ..Default::default()
    };
    let len = g.og() * g.kh * g.kw;
    let loss = |x: &[f64], w: &[f64]| -> (f64, f64) {
        let xt = up(x, &g2.y_shape());
        let y = conv_transpose2d(&xt, &up(w, &g2.w_shape()), Some(&up(&b, &[g2.c])), &ot);
        let y = common::download(&y.expect("conv_transpose2d")).unwrap();
        let (mut want, mag) = conv_ref::conv_backward_input(&g2, x, w);
        let per = g2.h * g2.w;
        for (i, v) in want.iter_mut().enumerate() {
            *v += b[(i / per) % g2.c];
        }
        let mag: Vec<f64> = mag.iter().zip(&want).map(|(m, y)| m + y.abs()).collect();
        (dot(&z, &y), abs_dot(&z, &bound(&mag, len)))
    };
    let zt = up(&z, &g2.x_shape());
    let o2 = options(&g2);
    let what = |name: &str| format!("{name} of {g2:?} output_padding {op:?}");

    let gx = conv2d(&zt, &up(&w, &g2.w_shape()), None, &o2).unwrap();
    let (grad_ref, mag) = conv_ref::conv_forward(&g2, &z, &w, None);
    let case = Case {
        grad_ref,
        what: what("conv_transpose2d: d/dx = conv2d"),
        v: x.clone(),
        loss: Box::new(|v| loss(v, &w)),
        grad: common::download(&gx).unwrap(),
        grad_err: bound(&mag, g.cg() * g.kh * g.kw),
    };
    check_case(&case, &mut rng);

    let xt = up(&x, &g2.y_shape());
    let gw = conv2d_backward_weight(&xt, &zt, [g.kh, g.kw], &o2).unwrap();
    let (grad_ref, mag) = conv_ref::conv_backward_weight(&g2, &x, &z);
    let case = Case {
        grad_ref,
        what: what("conv_transpose2d: d/dw = conv2d_backward_weight"),
        v: w.clone(),
        loss: Box::new(|v| loss(&x, v)),
        grad: common::download(&gw).unwrap(),
        grad_err: bound(&mag, g.n * ih * iw),
    };
    check_case(&case, &mut rng);
}

/// Tiny problems covering groups, depthwise with a multiplier, stride, dilation, asymmetric
/// padding, a 1x1 kernel and a 1-D (H = 1) problem, with an output_padding for the transpose.
fn tiny() -> Vec<(ConvGeom, [usize; 2])> {
    let g = |n, c, h, w, o, k: [usize; 2], groups, stride, pad, dil| ConvGeom {
        n,
        c,
        h,
        w,
        o,
        kh: k[0],
        kw: k[1],
        groups,
        stride,
        pad,
        dil,
    };
    vec![
        (
            g(2, 4, 5, 6, 6, [3, 2], 2, [2, 1], [1, 0, 2, 1], [1, 1]),
            [1, 0],
        ),
        (
            g(1, 3, 7, 5, 6, [3, 3], 3, [1, 2], [2, 1, 0, 1], [2, 1]),
            [0, 1],
        ),
        (
            g(2, 3, 4, 4, 2, [1, 1], 1, [3, 3], [0, 1, 1, 0], [1, 1]),
            [2, 1],
        ),
        (
            g(3, 2, 1, 9, 4, [1, 4], 2, [1, 2], [0, 0, 1, 2], [1, 2]),
            [0, 1],
        ),
        (
            g(1, 2, 6, 6, 3, [5, 5], 1, [1, 1], [2, 2, 2, 2], [1, 1]),
            [0, 0],
        ),
    ]
}

/// A problem with 8 output and 12 input channels per group: the GEMM kernels (`Sg8` on the
/// default device on lavapipe, `Tiled` on the portable one) in every direction.
fn gemm_sized() -> (ConvGeom, [usize; 2]) {
    let g = ConvGeom {
        n: 2,
        c: 24,
        h: 5,
        w: 4,
        o: 16,
        kh: 2,
        kw: 3,
        groups: 2,
        stride: [2, 1],
        pad: [1, 0, 1, 1],
        dil: [1, 2],
    };
    (g, [1, 0])
}

fn finite_differences(dev: &Device, cases: &[(ConvGeom, [usize; 2])]) {
    for (i, (g, op)) in cases.iter().enumerate() {
        conv_gradients(dev, g, 900 + i as u64);
        transpose_gradients(dev, g, *op, 950 + i as u64);
    }
}

/// The tiny problems (the Direct kernel, the same WGSL on every device) and the GEMM-sized one.
#[test]
fn conv_finite_differences_f32() {
    let mut cases = tiny();
    cases.push(gemm_sized());
    finite_differences(device(), &cases);
}

#[test]
fn conv_finite_differences_tiled_f32() {
    finite_differences(portable_device(), &[gemm_sized()]);
}
