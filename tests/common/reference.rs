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
//! - single-axis reductions,
//! - batched GEMM with broadcast batch dims and the fused epilogue, and numpy `matmul`,
//! - batch normalization (statistics, inference, training forward, running stats, backward).

use wgtensor::ops::{Activation, BinaryOp, ReduceOp, ScalarOp, UnaryOp};

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

/// The row-major flat index of the multi-index `c` in `shape` (the inverse of [`unravel`]).
pub fn ravel(c: &[usize], shape: &[usize]) -> usize {
    c.iter().zip(shape).fold(0, |acc, (&x, &n)| acc * n + x)
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
        BinaryOp::Pow => pow,
    }
}

/// PyTorch's pow: `x^0 = 1`, negative bases follow the integer exponent's sign rule.
pub fn pow(x: f64, e: f64) -> f64 {
    if e == 0.0 {
        1.0
    } else {
        x.powf(e)
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
        UnaryOp::Silu => |x| x * sigmoid(x),
        UnaryOp::Log1p => f64::ln_1p,
        UnaryOp::Softplus => |x| x.max(0.0) + (-x.abs()).exp().ln_1p(),
        UnaryOp::GeluTanh => |x| {
            let inner = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
            0.5 * x * (1.0 + inner.tanh())
        },
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
        ScalarOp::Pow => pow,
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

// ---------------------------------------------------------------------------------------------
// GEMM
// ---------------------------------------------------------------------------------------------

/// The activation of a GEMM epilogue as a function (`None` is the identity).
pub fn activation_fn(act: Activation) -> fn(f64) -> f64 {
    match act {
        Activation::None => |x| x,
        Activation::Relu => unary_fn(UnaryOp::Relu),
        Activation::Gelu => unary_fn(UnaryOp::Gelu),
        Activation::Sigmoid => unary_fn(UnaryOp::Sigmoid),
        Activation::Tanh => unary_fn(UnaryOp::Tanh),
    }
}

/// Which way the epilogue's bias vector runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BiasSide {
    /// One value per output column (`[N]`).
    Column,
    /// One value per output row (`[M]`).
    Row,
}

/// Output of [`gemm`]: the result and the magnitudes its rounding errors scale with, every
/// vector row-major over `shape`.
#[derive(Clone, Debug)]
pub struct GemmRef {
    pub shape: Vec<usize>,
    /// `act(pre)`.
    pub out: Vec<f64>,
    /// `alpha * sum_k a_ik b_kj + beta * c_ij + bias`, before the activation.
    pub pre: Vec<f64>,
    /// `sum_k |a_ik b_kj|`: the scale of the accumulation error.
    pub abs_prod: Vec<f64>,
    /// `|beta * c_ij| + |bias|`: the scale of the epilogue's additions.
    pub abs_epi: Vec<f64>,
}

/// Batched product of row-major `a [..., M, K]` and `b [..., K, N]` (both rank >= 2) whose
/// batch dims broadcast numpy style. Returns `(sum_k a b, sum_k |a b|, shape)`.
pub fn batched_matmul(
    a: &[f64],
    a_shape: &[usize],
    b: &[f64],
    b_shape: &[usize],
) -> (Vec<f64>, Vec<f64>, Vec<usize>) {
    let (ra, rb) = (a_shape.len(), b_shape.len());
    assert!(
        ra >= 2 && rb >= 2,
        "reference batched_matmul needs rank >= 2"
    );
    let (m, k, n) = (a_shape[ra - 2], a_shape[ra - 1], b_shape[rb - 1]);
    assert_eq!(
        b_shape[rb - 2],
        k,
        "reference batched_matmul: inner dims differ"
    );
    let batch = broadcast_shapes(&a_shape[..ra - 2], &b_shape[..rb - 2]).unwrap_or_else(|| {
        panic!(
            "reference batched_matmul: batch dims of {a_shape:?} and {b_shape:?} do not broadcast"
        )
    });
    // Materialize both operands at the full batch shape (stride-0 gathers), then plain loops.
    let full = |r: usize, c: usize| [batch.clone(), vec![r, c]].concat();
    let a = broadcast_to(a, a_shape, &full(m, k));
    let b = broadcast_to(b, b_shape, &full(k, n));
    let nb = numel(&batch);
    let mut sum = vec![0.0; nb * m * n];
    let mut abs = vec![0.0; nb * m * n];
    for z in 0..nb {
        let (ab, bb, ob) = (z * m * k, z * k * n, z * m * n);
        for i in 0..m {
            let row = ob + i * n;
            for kk in 0..k {
                let x = a[ab + i * k + kk];
                let brow = &b[bb + kk * n..bb + (kk + 1) * n];
                for (j, &y) in brow.iter().enumerate() {
                    sum[row + j] += x * y;
                    abs[row + j] += (x * y).abs();
                }
            }
        }
    }
    let mut shape = batch;
    shape.extend([m, n]);
    (sum, abs, shape)
}

/// `act(alpha * a @ b + beta * c + bias)` for `a [..., M, K]`, `b [..., K, N]` with broadcast
/// batch dims; `c` broadcasts to the output shape, the bias has `N` (column) or `M` (row)
/// values.
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    a: &[f64],
    a_shape: &[usize],
    b: &[f64],
    b_shape: &[usize],
    alpha: f64,
    beta: f64,
    c: Option<(&[f64], &[usize])>,
    bias: Option<(BiasSide, &[f64])>,
    act: Activation,
) -> GemmRef {
    let (prod, abs_prod, shape) = batched_matmul(a, a_shape, b, b_shape);
    let r = shape.len();
    let (m, n) = (shape[r - 2], shape[r - 1]);
    let c = c.map(|(data, c_shape)| broadcast_to(data, c_shape, &shape));
    if let Some((side, v)) = bias {
        let want = if side == BiasSide::Column { n } else { m };
        assert_eq!(v.len(), want, "reference gemm: bias length");
    }
    let f = activation_fn(act);
    let len = prod.len();
    let (mut out, mut pre, mut abs_epi) = (vec![0.0; len], vec![0.0; len], vec![0.0; len]);
    for i in 0..len {
        let (row, col) = ((i / n) % m, i % n);
        let mut y = alpha * prod[i];
        let mut mag = 0.0;
        if let Some(c) = &c {
            y += beta * c[i];
            mag += (beta * c[i]).abs();
        }
        if let Some((side, v)) = bias {
            let t = if side == BiasSide::Column {
                v[col]
            } else {
                v[row]
            };
            y += t;
            mag += t.abs();
        }
        pre[i] = y;
        out[i] = f(y);
        abs_epi[i] = mag;
    }
    GemmRef {
        shape,
        out,
        pre,
        abs_prod,
        abs_epi,
    }
}

/// numpy `matmul`: a 1-D first operand is a row `[1, K]`, a 1-D second operand a column
/// `[K, 1]`, and the added dims are removed from the result. Returns
/// `(sum_k a b, sum_k |a b|, shape)`.
pub fn matmul(
    a: &[f64],
    a_shape: &[usize],
    b: &[f64],
    b_shape: &[usize],
) -> (Vec<f64>, Vec<f64>, Vec<usize>) {
    let a2: Vec<usize> = if a_shape.len() == 1 {
        vec![1, a_shape[0]]
    } else {
        a_shape.to_vec()
    };
    let b2: Vec<usize> = if b_shape.len() == 1 {
        vec![b_shape[0], 1]
    } else {
        b_shape.to_vec()
    };
    let (sum, abs, mut shape) = batched_matmul(a, &a2, b, &b2);
    let r = shape.len();
    if b_shape.len() == 1 {
        shape.remove(r - 1);
    }
    if a_shape.len() == 1 {
        shape.remove(r - 2);
    }
    (sum, abs, shape)
}

// ---------------------------------------------------------------------------------------------
// Batch normalization
// ---------------------------------------------------------------------------------------------

/// `(N, C, S)` of a batch-norm input `[N, C, ...]` (S = product of the trailing dims).
pub fn bn_dims(shape: &[usize]) -> (usize, usize, usize) {
    assert!(shape.len() >= 2, "reference batch norm needs rank >= 2");
    (shape[0], shape[1], numel(&shape[2..]))
}

/// The row-major indices of channel `c`'s values in a `[N, C, S]` tensor.
pub fn bn_channel_indices(shape: &[usize], c: usize) -> Vec<usize> {
    let (n, ch, s) = bn_dims(shape);
    (0..n)
        .flat_map(|i| (0..s).map(move |j| (i * ch + c) * s + j))
        .collect()
}

/// Per-channel statistics of the row-major `(x, shape)`, by two passes in f64.
#[derive(Clone, Debug)]
pub struct BnStats {
    pub mean: Vec<f64>,
    /// Biased variance (divided by the count).
    pub var: Vec<f64>,
    /// Unbiased variance (divided by count - 1; NaN for a count of 1).
    pub var_unbiased: Vec<f64>,
    /// `max |x - mean|` per channel: the spread the kernel's rounding errors scale with.
    pub spread: Vec<f64>,
    /// Values per channel, N * S.
    pub count: usize,
}

pub fn bn_stats(x: &[f64], shape: &[usize]) -> BnStats {
    let (_, c, _) = bn_dims(shape);
    let mut st = BnStats {
        mean: vec![0.0; c],
        var: vec![0.0; c],
        var_unbiased: vec![0.0; c],
        spread: vec![0.0; c],
        count: 0,
    };
    for ch in 0..c {
        let idx = bn_channel_indices(shape, ch);
        let m = idx.len() as f64;
        let mean = idx.iter().map(|&i| x[i]).sum::<f64>() / m;
        let m2: f64 = idx.iter().map(|&i| (x[i] - mean) * (x[i] - mean)).sum();
        st.mean[ch] = mean;
        st.var[ch] = m2 / m;
        st.var_unbiased[ch] = m2 / (m - 1.0);
        st.spread[ch] = idx.iter().map(|&i| (x[i] - mean).abs()).fold(0.0, f64::max);
        st.count = idx.len();
    }
    st
}

/// `(x - mean[c]) * invstd[c] * gamma[c] + beta[c]` per element, before any activation;
/// gamma / beta default to 1 / 0.
pub fn bn_normalize(
    x: &[f64],
    shape: &[usize],
    mean: &[f64],
    invstd: &[f64],
    gamma: Option<&[f64]>,
    beta: Option<&[f64]>,
) -> Vec<f64> {
    let (_, c, s) = bn_dims(shape);
    x.iter()
        .enumerate()
        .map(|(i, &v)| {
            let ch = (i / s) % c;
            let g = gamma.map_or(1.0, |g| g[ch]);
            let b = beta.map_or(0.0, |b| b[ch]);
            (v - mean[ch]) * invstd[ch] * g + b
        })
        .collect()
}

/// Inference: `act((x - rm) / sqrt(rv + eps) * gamma + beta)`; returns (output, pre-activation).
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_inference(
    x: &[f64],
    shape: &[usize],
    running_mean: &[f64],
    running_var: &[f64],
    gamma: Option<&[f64]>,
    beta: Option<&[f64]>,
    eps: f64,
    act: Activation,
) -> (Vec<f64>, Vec<f64>) {
    let invstd: Vec<f64> = running_var.iter().map(|v| 1.0 / (v + eps).sqrt()).collect();
    let pre = bn_normalize(x, shape, running_mean, &invstd, gamma, beta);
    let f = activation_fn(act);
    (pre.iter().map(|&v| f(v)).collect(), pre)
}

/// Training forward: the batch statistics, `saved_invstd = 1 / sqrt(var + eps)` and the output.
#[derive(Clone, Debug)]
pub struct BnTrainRef {
    pub stats: BnStats,
    pub invstd: Vec<f64>,
    pub y: Vec<f64>,
}

pub fn batch_norm_train(
    x: &[f64],
    shape: &[usize],
    gamma: Option<&[f64]>,
    beta: Option<&[f64]>,
    eps: f64,
) -> BnTrainRef {
    let stats = bn_stats(x, shape);
    let invstd: Vec<f64> = stats.var.iter().map(|v| 1.0 / (v + eps).sqrt()).collect();
    let y = bn_normalize(x, shape, &stats.mean, &invstd, gamma, beta);
    BnTrainRef { stats, invstd, y }
}

/// PyTorch's running-statistic update: `(1 - f) * running + f * batch` with the unbiased
/// variance.
pub fn bn_running_update(
    running_mean: &[f64],
    running_var: &[f64],
    stats: &BnStats,
    factor: f64,
) -> (Vec<f64>, Vec<f64>) {
    let upd = |r: &[f64], b: &[f64]| -> Vec<f64> {
        r.iter()
            .zip(b)
            .map(|(&r, &b)| (1.0 - factor) * r + factor * b)
            .collect()
    };
    (
        upd(running_mean, &stats.mean),
        upd(running_var, &stats.var_unbiased),
    )
}

/// Backward of the training forward, from the saved statistics, plus the magnitudes the
/// kernel's rounding errors scale with.
#[derive(Clone, Debug)]
pub struct BnBackwardRef {
    pub dx: Vec<f64>,
    /// `sum dy * (x - mean) * invstd` per channel.
    pub dgamma: Vec<f64>,
    /// `sum dy` per channel.
    pub dbeta: Vec<f64>,
    /// `sum |dy|` and `sum |dy (x - mean)|` per channel.
    pub abs_dy: Vec<f64>,
    pub abs_dyx: Vec<f64>,
}

/// `dx = gamma * invstd * (dy - mean(dy) - xhat * mean(dy * xhat))`, `xhat = (x - mean) invstd`.
pub fn batch_norm_backward(
    dy: &[f64],
    x: &[f64],
    shape: &[usize],
    mean: &[f64],
    invstd: &[f64],
    gamma: Option<&[f64]>,
) -> BnBackwardRef {
    let (_, c, s) = bn_dims(shape);
    let mut r = BnBackwardRef {
        dx: vec![0.0; x.len()],
        dgamma: vec![0.0; c],
        dbeta: vec![0.0; c],
        abs_dy: vec![0.0; c],
        abs_dyx: vec![0.0; c],
    };
    for ch in 0..c {
        for i in bn_channel_indices(shape, ch) {
            let t = dy[i] * (x[i] - mean[ch]);
            r.dbeta[ch] += dy[i];
            r.dgamma[ch] += t * invstd[ch];
            r.abs_dy[ch] += dy[i].abs();
            r.abs_dyx[ch] += t.abs();
        }
    }
    let m = (x.len() / c) as f64;
    for (i, d) in r.dx.iter_mut().enumerate() {
        let ch = (i / s) % c;
        let g = gamma.map_or(1.0, |g| g[ch]);
        let xhat = (x[i] - mean[ch]) * invstd[ch];
        *d = g * invstd[ch] * (dy[i] - r.dbeta[ch] / m - xhat * r.dgamma[ch] / m);
    }
    r
}

// ---------------------------------------------------------------------------------------------
// softmax
// ---------------------------------------------------------------------------------------------

/// softmax (or log_softmax) of the row-major `(x, shape)` along `dim`, in f64; also returns,
/// per element, `|x - max|` and `|log(sum exp(x - max))|` of its row (the scales of the f32
/// evaluation's error).
pub fn softmax(x: &[f64], shape: &[usize], dim: usize, log: bool) -> (Vec<f64>, Vec<f64>) {
    let outer: usize = shape[..dim].iter().product();
    let len = shape[dim];
    let inner: usize = shape[dim + 1..].iter().product();
    let mut y = vec![0.0; x.len()];
    let mut scale = vec![0.0; x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |r: usize| (o * len + r) * inner + i;
            let m = (0..len).map(|r| x[at(r)]).fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = (0..len).map(|r| (x[at(r)] - m).exp()).sum();
            for r in 0..len {
                let d = x[at(r)] - m;
                y[at(r)] = if log { d - s.ln() } else { d.exp() / s };
                scale[at(r)] = d.abs() + s.ln().abs();
            }
        }
    }
    (y, scale)
}
