//! Where PyTorch's order of operations decides the last bit (or an overflow): `s / x` as
//! `x.reciprocal() * s`, the divisor's gradient as `-g ((a / b) / b)`, linspace stepped in the
//! dtype, and clamp_min / clamp_max refusing a bound past the dtype. Expected values are
//! PyTorch's (its kernels emulated bit for bit: each op in float, rounded to the dtype).
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]
// The expected values are exact f16 numbers, written out in full.
#![allow(clippy::excessive_precision)]

mod common;

use wgtensor::ops::BinaryOp;
use wgtensor::{f16, DType, Tensor};

fn h(v: &[f32]) -> Tensor {
    let v: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
    Tensor::from_slice(common::device(), &v, &[v.len()]).unwrap()
}

fn hv(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f16>()
        .unwrap()
        .iter()
        .map(|x| x.to_f32())
        .collect()
}

#[test]
fn rdiv_scalar_is_a_rounded_reciprocal_times_s_f16() {
    common::require_f16(common::device());
    let x = h(&[1.0009765625, 1e-5, 4.0]);
    // 1 / 1.0009765625 rounds to 0.9990234375 in f16, times 3 is 2.9970703125 -> 2.99609375;
    // 1 / 1e-5 overflows f16 before the product with 0.5.
    let y = hv(&x.rdiv_scalar(3.0).unwrap());
    assert_eq!(y[0], 2.99609375);
    let y = hv(&x.rdiv_scalar(0.5).unwrap());
    assert_eq!(y[1], f32::INFINITY);
    assert_eq!(y[2], 0.125);
    // The gradient: -(g s) (r r), r the rounded reciprocal (x = 1.7, s = 2: -0.6923828125;
    // -(s / x) / x, the other order, gives -0.69189453125).
    let x = h(&[1.7]).requires_grad().unwrap();
    let g = x
        .rdiv_scalar(2.0)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(hv(g.get(&x).unwrap()), vec![-0.6923828125]);
}

/// An f32 or i32 0-d second factor or divisor beside f16 data: the result is f16, but the 0-d
/// value enters the op unrounded, as PyTorch's mul and div kernels read it (the f32 opmath
/// scalar): 0.5 * 1e5 is 49984, not inf (1e5 narrowed to f16), and 0.5 / 1e5 is finite, not 0.
/// PyTorch's CPU kernels narrow it as a first factor and for add and sub.
#[test]
fn a_wide_0d_operand_enters_f16_ops_unrounded_f16() {
    let dev = common::device();
    common::require_f16(dev);
    let x = h(&[0.5, 3.0]);
    let s = Tensor::from_slice(dev, &[1e5f32], &[]).unwrap();
    let y = x.mul(&s).unwrap();
    assert_eq!(y.dtype(), DType::F16);
    assert_eq!(hv(&y), vec![49984.0, f32::INFINITY]);
    assert_eq!(hv(&s.mul(&x).unwrap()), vec![f32::INFINITY; 2]);
    let near = h(&[-6e4]);
    assert_eq!(hv(&near.add(&s).unwrap()), vec![f32::INFINITY]);
    let q = hv(&x.div(&s).unwrap());
    assert_eq!(q[0], f16::from_f32(0.5 / 1e5).to_f32());
    assert!(q[0] > 0.0);
    let i = Tensor::from_slice(dev, &[100_000i32], &[]).unwrap();
    assert_eq!(hv(&x.mul(&i).unwrap()), vec![49984.0, f32::INFINITY]);
    // The gradients as PyTorch's MulBackward0 / DivBackward0 (torch 2.15, upstream c): x's
    // from g times (over) the unrounded scalar, the scalar's from f16 products summed to f16;
    // a first factor narrowed in the value but not in x's gradient.
    let xs = [2.3f32, -1.7, 0.37, 5.9];
    let c = h(&[0.3, 1.1, -0.7, 0.9]);
    type Case = (bool, BinaryOp, [f32; 4], [f32; 4], f32);
    let cases: [Case; 3] = [
        (
            false,
            BinaryOp::Mul,
            [
                0.2301025390625,
                -0.1700439453125,
                0.037017822265625,
                0.58984375,
            ],
            [
                0.029998779296875,
                0.1099853515625,
                -0.07000732421875,
                0.0899658203125,
            ],
            3.87109375,
        ),
        (
            false,
            BinaryOp::Div,
            [23.0, -17.0, 3.701171875, 59.0],
            [3.0, 11.0, -7.0, 9.0],
            -387.25,
        ),
        (
            true,
            BinaryOp::Mul,
            [0.22998046875, -0.169921875, 0.037017822265625, 0.58984375],
            [
                0.029998779296875,
                0.1099853515625,
                -0.07000732421875,
                0.0899658203125,
            ],
            3.87109375,
        ),
    ];
    for (s_first, op, y_want, gx_want, gs_want) in cases {
        let x = h(&xs).requires_grad().unwrap();
        let s = Tensor::from_slice(dev, &[0.1f32], &[])
            .unwrap()
            .requires_grad()
            .unwrap();
        let y = if s_first {
            s.binary(&x, op)
        } else {
            x.binary(&s, op)
        }
        .unwrap();
        assert_eq!(hv(&y), y_want, "{op:?} s_first {s_first}");
        let g = y.mul(&c).unwrap().sum_all().unwrap().backward().unwrap();
        assert_eq!(hv(g.get(&x).unwrap()), gx_want, "{op:?} s_first {s_first}");
        let gs = g.get(&s).unwrap();
        assert_eq!(gs.dtype(), DType::F32);
        assert_eq!(
            gs.to_vec::<f32>().unwrap(),
            vec![gs_want],
            "{op:?} s_first {s_first}"
        );
    }
    // The node saves what PyTorch's does (x, for the scalar's gradient): x written in place
    // before the backward is the version error; a second backward fails; empty x works.
    let x = h(&xs);
    let s = Tensor::from_slice(dev, &[0.1f32], &[])
        .unwrap()
        .requires_grad()
        .unwrap();
    let y = x.mul(&s).unwrap().sum_all().unwrap();
    wgtensor::no_grad(|| x.copy_from(&h(&[0.0; 4]))).unwrap();
    let e = y.backward().unwrap_err().to_string();
    assert!(e.contains("modified by an inplace operation"), "{e}");
    let y = x.mul(&s).unwrap().sum_all().unwrap();
    y.backward().unwrap();
    assert!(y.backward().is_err());
    let empty = h(&[]).mul(&s).unwrap();
    assert_eq!((empty.dtype(), empty.shape()), (DType::F16, &[0][..]));
    // The gradient still comes back in each operand's dtype.
    let xr = h(&[2.0]).requires_grad().unwrap();
    let sr = Tensor::from_slice(dev, &[0.1f32], &[])
        .unwrap()
        .requires_grad()
        .unwrap();
    let g = xr.mul(&sr).unwrap().sum_all().unwrap().backward().unwrap();
    assert_eq!(g.get(&xr).unwrap().dtype(), DType::F16);
    assert_eq!(hv(g.get(&xr).unwrap()), vec![f16::from_f32(0.1).to_f32()]);
    assert_eq!(g.get(&sr).unwrap().dtype(), DType::F32);
    assert_eq!(g.get(&sr).unwrap().to_vec::<f32>().unwrap(), vec![2.0]);
}

#[test]
fn rdiv_scalar_f32_rounds_the_reciprocal_first() {
    let x = Tensor::from_slice(common::device(), &[3.0f32, 7.0, 0.1], &[3]).unwrap();
    let got = x.rdiv_scalar(10.0).unwrap().to_vec::<f32>().unwrap();
    let want: Vec<f32> = [3.0f32, 7.0, 0.1]
        .iter()
        .map(|v| (1.0 / v) * 10.0)
        .collect();
    assert_eq!(got, want);
}

#[test]
fn the_divisors_gradient_is_g_times_a_over_b_over_b_f16() {
    common::require_f16(common::device());
    // PyTorch: -g * ((a / b) / b); (100 / 0.01) / 0.01 overflows f16, so the gradient is
    // -inf (the other order, (g / b) (a / b), gives -100).
    let a = h(&[100.0]);
    let b = h(&[0.01]).requires_grad().unwrap();
    let gy = h(&[1e-4]);
    let g = a.div(&b).unwrap().backward_with_grad(&gy).unwrap();
    assert_eq!(hv(g.get(&b).unwrap()), vec![f32::NEG_INFINITY]);
}

#[test]
fn the_divisors_gradient_rounds_as_pytorchs_in_f32() {
    let d = common::device();
    // a = 1, b = 3, g = 1: -0.11111111 this way, -0.11111112 as (g / b) (a / b).
    let (av, bv, gv) = ([1.0f32, 1.7, -3.3], [3.0f32, 0.3, 1.9], [1.0f32, 0.7, 1.3]);
    let a = Tensor::from_slice(d, &av, &[3]).unwrap();
    let b = Tensor::from_slice(d, &bv, &[3])
        .unwrap()
        .requires_grad()
        .unwrap();
    let gy = Tensor::from_slice(d, &gv, &[3]).unwrap();
    let g = a.div(&b).unwrap().backward_with_grad(&gy).unwrap();
    let want: Vec<f32> = (0..3)
        .map(|i| -(gv[i] * ((av[i] / bv[i]) / bv[i])))
        .collect();
    let got = g.get(&b).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(got, want);
    assert_eq!(got[0], -0.11111111);
}

#[test]
fn linspace_steps_in_the_dtype() {
    let d = common::device();
    let v = Tensor::linspace(d, 0.0, 10.0, 101, DType::F32).unwrap();
    let v = v.to_vec::<f32>().unwrap();
    let step = 10.0f32 / 100.0;
    for (i, x) in v.iter().enumerate() {
        let want = if i < 50 {
            step * i as f32
        } else {
            10.0 - step * (100 - i) as f32
        };
        assert_eq!(x.to_bits(), want.to_bits(), "{i}");
    }
    assert_eq!(v[9], 0.9000000357627869);
    assert_eq!(v[100], 10.0);
}

/// f16 linspace steps in f32 between ends rounded to half, then rounds each value (torch
/// 2.15's values; half arithmetic throughout gave 0.2998046875 at [3], NaN and inf for a span
/// past 65504 and -1 for the whole first half past 65505 steps).
#[test]
fn linspace_steps_in_f32_for_f16() {
    common::require_f16(common::device());
    let dev = common::device();
    let v = hv(&Tensor::linspace(dev, 0.0, 1.0, 11, DType::F16).unwrap());
    assert_eq!(v[3], 0.300048828125);
    assert_eq!((v[0], v[10]), (0.0, 1.0));
    let v = hv(&Tensor::linspace(dev, -40000.0, 40000.0, 5, DType::F16).unwrap());
    assert_eq!(v, vec![-40000.0, -20000.0, 0.0, 20000.0, 40000.0]);
    let v = hv(&Tensor::linspace(dev, 0.0, 1000.0, 7, DType::F16).unwrap());
    assert_eq!(v, vec![0.0, 166.625, 333.25, 500.0, 666.5, 833.5, 1000.0]);
    let v = hv(&Tensor::linspace(dev, -1.0, 1.0, 70001, DType::F16).unwrap());
    let worst = v
        .iter()
        .enumerate()
        .map(|(i, &x)| (x as f64 - (-1.0 + 2.0 * i as f64 / 70000.0)).abs())
        .fold(0.0, f64::max);
    assert!(worst < 5e-4, "{worst}");
}

#[test]
fn clamp_min_and_max_refuse_a_bound_past_f16() {
    common::require_f16(common::device());
    let x = h(&[1.0, -2.0]);
    for e in [
        x.max_scalar(1e5).unwrap_err(),
        x.min_scalar(-7e4).unwrap_err(),
    ] {
        assert!(
            e.to_string()
                .contains("value cannot be converted to type c10::Half without overflow"),
            "{e}"
        );
    }
    assert_eq!(
        hv(&x.max_scalar(f64::INFINITY).unwrap()),
        vec![f32::INFINITY; 2]
    );
    assert_eq!(hv(&x.max_scalar(0.5).unwrap()), vec![1.0, 0.5]);
}

#[test]
fn kinked_losses_and_kl_div_round_once_in_f16() {
    use wgtensor::ops::{huber_loss, kl_div, smooth_l1_loss, KlDivReduction, Reduction};
    common::require_f16(common::device());
    // |a - b| in half, the loss in float with beta (delta) rounded to half, one rounding.
    let l = smooth_l1_loss(&h(&[1.0]), &h(&[0.0]), Reduction::None, 0.1).unwrap();
    assert_eq!(hv(&l), vec![0.9501953125]);
    let l = huber_loss(&h(&[2.0]), &h(&[0.0]), Reduction::None, 0.1).unwrap();
    assert_eq!(hv(&l), vec![0.1949462890625]);
    // xlogy(t, t) in float, rounded once, then minus t * input.
    let l = kl_div(
        &h(&[-1.2001953125]),
        &h(&[0.300048828125]),
        KlDivReduction::None,
        false,
    )
    .unwrap();
    assert_eq!(hv(&l), vec![-0.0009765625]);
}
