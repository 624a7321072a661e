//! Pure-Rust f64 reference implementations for the conformance suite.
//!
//! Everything here is written as naive loops over row-major `f64` data so that it is easy to
//! check by eye and shares no code with the library under test (no `Layout`, no strides from
//! the crate). Tensors are passed as `(data, shape)` pairs, data row-major.
//!
//! Sections (later kernel families add theirs at the end in the same style):
//! - indexing helpers and the strided gather (the model of every view),
//! - numpy broadcasting and elementwise binary ops,
//! - unary math (with an accurate `erf`/`erfc` for exact GELU) and scalar ops,
//! - single-axis reductions.

use wgtensor::ops::{BinaryOp, ReduceOp, ScalarOp, UnaryOp};

// ---------------------------------------------------------------------------------------------
// Indexing
// ---------------------------------------------------------------------------------------------

/// Number of elements of `shape` (1 for rank 0).
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Row-major element strides of `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    strides
}

/// The multi-index of row-major flat index `i` in `shape`.
pub fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
    idx
}

/// Reads the view `(shape, strides, offset)` of `data` into a row-major vector:
/// `out[i] = data[offset + sum_d idx(i)[d] * strides[d]]` (an odometer walk, no allocation per
/// element, so multi-million-element views stay cheap).
pub fn gather(data: &[f64], shape: &[usize], strides: &[usize], offset: usize) -> Vec<f64> {
    assert_eq!(
        shape.len(),
        strides.len(),
        "gather: rank of shape and strides differ"
    );
    let n = numel(shape);
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; shape.len()];
    let mut at = offset;
    for _ in 0..n {
        out.push(data[at]);
        // Advance the multi-index (last dim fastest) and the source position with it.
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            at += strides[d];
            if idx[d] < shape[d] {
                break;
            }
            at -= strides[d] * shape[d];
            idx[d] = 0;
        }
    }
    out
}

/// `data[.., start..start+len, ..]` along `dim` of the row-major tensor `(data, shape)`.
pub fn narrow(data: &[f64], shape: &[usize], dim: usize, start: usize, len: usize) -> Vec<f64> {
    assert!(start + len <= shape[dim], "narrow: range out of bounds");
    let strides = contiguous_strides(shape);
    let mut new_shape = shape.to_vec();
    new_shape[dim] = len;
    gather(data, &new_shape, &strides, start * strides[dim])
}

/// Dimension `i` of the result is dimension `perm[i]` of the input (numpy `transpose(perm)`).
pub fn permute(data: &[f64], shape: &[usize], perm: &[usize]) -> Vec<f64> {
    let strides = contiguous_strides(shape);
    let new_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let new_strides: Vec<usize> = perm.iter().map(|&p| strides[p]).collect();
    gather(data, &new_shape, &new_strides, 0)
}

/// numpy broadcasting of two shapes, `None` when they are incompatible.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    let dim = |s: &[usize], i: usize| {
        if i < rank - s.len() {
            1
        } else {
            s[i - (rank - s.len())]
        }
    };
    (0..rank)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// Repeats `(data, shape)` to `target` (numpy `broadcast_to`): a gather with stride 0 on the
/// broadcast and the new leading dimensions.
pub fn broadcast_to(data: &[f64], shape: &[usize], target: &[usize]) -> Vec<f64> {
    assert!(
        target.len() >= shape.len(),
        "broadcast_to: target rank is lower"
    );
    let lead = target.len() - shape.len();
    let src = contiguous_strides(shape);
    let strides: Vec<usize> = (0..target.len())
        .map(|i| {
            if i < lead {
                0
            } else if shape[i - lead] == target[i] {
                src[i - lead]
            } else {
                assert_eq!(shape[i - lead], 1, "broadcast_to: {shape:?} to {target:?}");
                0
            }
        })
        .collect();
    gather(data, target, &strides, 0)
}

// ---------------------------------------------------------------------------------------------
// Elementwise binary ops
// ---------------------------------------------------------------------------------------------

pub fn binary_fn(op: BinaryOp) -> fn(f64, f64) -> f64 {
    match op {
        BinaryOp::Add => |x, y| x + y,
        BinaryOp::Sub => |x, y| x - y,
        BinaryOp::Mul => |x, y| x * y,
        BinaryOp::Div => |x, y| x / y,
        BinaryOp::Max => f64::max,
        BinaryOp::Min => f64::min,
    }
}

/// `a (op) b` with numpy broadcasting; returns the row-major result and its shape.
pub fn binary(
    a: &[f64],
    a_shape: &[usize],
    b: &[f64],
    b_shape: &[usize],
    op: BinaryOp,
) -> (Vec<f64>, Vec<usize>) {
    let shape = broadcast_shapes(a_shape, b_shape).unwrap_or_else(|| {
        panic!("reference binary: {a_shape:?} and {b_shape:?} do not broadcast")
    });
    let a = broadcast_to(a, a_shape, &shape);
    let b = broadcast_to(b, b_shape, &shape);
    let f = binary_fn(op);
    (a.iter().zip(&b).map(|(&x, &y)| f(x, y)).collect(), shape)
}

// ---------------------------------------------------------------------------------------------
// Unary and scalar ops
// ---------------------------------------------------------------------------------------------

const FRAC_2_SQRT_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI;

/// erf by its Maclaurin series, used for |x| < 2 where every term is below 2.4 in magnitude,
/// so the alternating sum loses no more than a couple of ulps.
fn erf_series(x: f64) -> f64 {
    let x2 = x * x;
    // term_n = (-1)^n x^(2n+1) / n!, summed as term_n / (2n+1).
    let mut term = x;
    let mut sum = x;
    let mut n = 0.0;
    loop {
        n += 1.0;
        term *= -x2 / n;
        let add = term / (2.0 * n + 1.0);
        sum += add;
        if add.abs() <= 1e-17 * sum.abs() {
            break;
        }
    }
    FRAC_2_SQRT_PI * sum
}

/// erfc(x) for x >= 2 by Laplace's continued fraction
/// erfc x = exp(-x^2)/sqrt(pi) * 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + 2/(x + ...))))),
/// evaluated bottom-up with a fixed depth that converges to f64 precision for x >= 2.
fn erfc_cf(x: f64) -> f64 {
    let mut t = x;
    for k in (1..=120).rev() {
        t = x + (k as f64 * 0.5) / t;
    }
    (-x * x).exp() / (std::f64::consts::PI.sqrt() * t)
}

/// The error function, accurate to about 1e-15 absolute (series below 2, continued fraction
/// for the complement above).
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x.abs() < 2.0 {
        erf_series(x)
    } else {
        x.signum() * (1.0 - erfc_cf(x.abs()))
    }
}

/// The complementary error function 1 - erf(x), with full relative accuracy in the tail.
pub fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x >= 2.0 {
        erfc_cf(x)
    } else if x <= -2.0 {
        2.0 - erfc_cf(-x)
    } else {
        1.0 - erf_series(x)
    }
}

/// Exact GELU: 0.5 x (1 + erf(x / sqrt 2)) = 0.5 x erfc(-x / sqrt 2) (no cancellation for x < 0).
pub fn gelu(x: f64) -> f64 {
    0.5 * x * erfc(-x / std::f64::consts::SQRT_2)
}

pub fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

pub fn unary_fn(op: UnaryOp) -> fn(f64) -> f64 {
    match op {
        UnaryOp::Neg => |x| -x,
        UnaryOp::Abs => f64::abs,
        UnaryOp::Exp => f64::exp,
        UnaryOp::Log => f64::ln,
        UnaryOp::Sqrt => f64::sqrt,
        UnaryOp::Relu => |x| x.max(0.0),
        UnaryOp::Sigmoid => sigmoid,
        UnaryOp::Tanh => f64::tanh,
        UnaryOp::Gelu => gelu,
    }
}

pub fn unary(x: &[f64], op: UnaryOp) -> Vec<f64> {
    let f = unary_fn(op);
    x.iter().map(|&v| f(v)).collect()
}

pub fn scalar_fn(op: ScalarOp) -> fn(f64, f64) -> f64 {
    match op {
        ScalarOp::Add => |x, s| x + s,
        ScalarOp::Sub => |x, s| x - s,
        ScalarOp::RSub => |x, s| s - x,
        ScalarOp::Mul => |x, s| x * s,
        ScalarOp::Div => |x, s| x / s,
        ScalarOp::RDiv => |x, s| s / x,
        ScalarOp::Max => f64::max,
        ScalarOp::Min => f64::min,
    }
}

/// `x (op) s` elementwise.
pub fn scalar(x: &[f64], op: ScalarOp, s: f64) -> Vec<f64> {
    let f = scalar_fn(op);
    x.iter().map(|&v| f(v, s)).collect()
}

// ---------------------------------------------------------------------------------------------
// Reductions
// ---------------------------------------------------------------------------------------------

/// Shape of a reduction of `shape` over `dim`.
pub fn reduced_shape(shape: &[usize], dim: usize, keepdim: bool) -> Vec<usize> {
    let mut out = shape.to_vec();
    if keepdim {
        out[dim] = 1;
    } else {
        out.remove(dim);
    }
    out
}

/// Folds `f` over axis `dim` of the row-major `(x, shape)`; the result is row-major over the
/// remaining axes (the same order with or without keepdim).
fn fold_axis(
    x: &[f64],
    shape: &[usize],
    dim: usize,
    init: f64,
    f: impl Fn(f64, f64) -> f64,
) -> Vec<f64> {
    let outer: usize = shape[..dim].iter().product();
    let len = shape[dim];
    let inner: usize = shape[dim + 1..].iter().product();
    let mut out = vec![init; outer * inner];
    for o in 0..outer {
        for r in 0..len {
            for i in 0..inner {
                let acc = &mut out[o * inner + i];
                *acc = f(*acc, x[(o * len + r) * inner + i]);
            }
        }
    }
    out
}

/// Reduces `(x, shape)` over `dim` with `op`; returns the result and its shape.
pub fn reduce(
    x: &[f64],
    shape: &[usize],
    dim: usize,
    op: ReduceOp,
    keepdim: bool,
) -> (Vec<f64>, Vec<usize>) {
    let len = shape[dim] as f64;
    let out = match op {
        ReduceOp::Sum => fold_axis(x, shape, dim, 0.0, |a, v| a + v),
        ReduceOp::Mean => fold_axis(x, shape, dim, 0.0, |a, v| a + v)
            .into_iter()
            .map(|s| s / len)
            .collect(),
        ReduceOp::Max => fold_axis(x, shape, dim, f64::NEG_INFINITY, f64::max),
        ReduceOp::Min => fold_axis(x, shape, dim, f64::INFINITY, f64::min),
    };
    (out, reduced_shape(shape, dim, keepdim))
}

/// sum |x_i| over `dim`, the scale of a summation's rounding error.
pub fn abs_sum(x: &[f64], shape: &[usize], dim: usize) -> Vec<f64> {
    fold_axis(x, shape, dim, 0.0, |a, v| a + v.abs())
}
