//! f64 reference gradients, written as loops over row-major data (no code shared with the
//! library), each with the scale its f32 rounding error is bounded by.

use wgtensor::ops::{Activation, ReduceOp, ScalarOp, UnaryOp};

use crate::common::reference::{self as r, numel, unravel};

/// Unit roundoff of f32 (half an ulp of 1).
pub const U: f64 = f32::EPSILON as f64 / 2.0;

/// Unit roundoff of f16 (2^-11).
pub const U16: f64 = 1.0 / 2048.0;

thread_local! {
    /// The unit roundoff the bounds below use: f32's, or f16's for f16 tests (every f16 op
    /// stores its result in f16, one f16 rounding per store the f32 bounds count as U).
    static UNIT: std::cell::Cell<f64> = const { std::cell::Cell::new(U) };
}

/// The unit roundoff in effect on this thread.
pub fn u() -> f64 {
    UNIT.with(|c| c.get())
}

/// Sets [`u`] for this thread.
pub fn set_unit(v: f64) {
    UNIT.with(|c| c.set(v));
}

/// A reference gradient and an error bound per element.
#[derive(Debug, Clone)]
pub struct Want {
    pub grad: Vec<f64>,
    pub tol: Vec<f64>,
}

/// Flat index into `shape` of the element that output index `i` of `out` reads through numpy
/// broadcasting (right-aligned, size-1 dims read index 0).
pub fn bcast_index(i: usize, out: &[usize], shape: &[usize]) -> usize {
    let idx = unravel(i, out);
    let lead = out.len() - shape.len();
    let mut j = 0;
    for (d, &s) in shape.iter().enumerate() {
        j = j * s + if s == 1 { 0 } else { idx[lead + d] };
    }
    j
}

/// Sums per-element terms of the broadcast shape `out` back to `shape`: the gradient, and
/// the bound `(count + k) * 2U * sum |term| + sum extra` for terms with `k` roundings each
/// and absolute errors `extra` already in them.
pub fn sum_to(terms: &[f64], extra: &[f64], out: &[usize], shape: &[usize], k: f64) -> Want {
    let n = numel(shape);
    let (mut g, mut mag, mut cnt, mut ex) =
        (vec![0.0; n], vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    for (i, (&t, &e)) in terms.iter().zip(extra).enumerate() {
        let j = bcast_index(i, out, shape);
        g[j] += t;
        mag[j] += t.abs();
        cnt[j] += 1.0;
        ex[j] += e;
    }
    let tol = (0..n)
        .map(|j| (cnt[j] + k) * 2.0 * u() * mag[j] + ex[j])
        .collect();
    Want { grad: g, tol }
}

/// d/dx of each unary op in f64 (PyTorch's conventions at kinks: relu'(0) = 0, abs'(0) = 0).
pub fn unary_deriv(op: UnaryOp, x: f64) -> f64 {
    let s = r::sigmoid(x);
    match op {
        UnaryOp::Neg => -1.0,
        UnaryOp::Abs => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                0.0
            }
        }
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => 1.0 / x,
        UnaryOp::Sqrt => 0.5 / x.sqrt(),
        UnaryOp::Relu => (x > 0.0) as u8 as f64,
        UnaryOp::Sigmoid => s * (1.0 - s),
        UnaryOp::Tanh => 1.0 - x.tanh() * x.tanh(),
        UnaryOp::Gelu => {
            let cdf = 0.5 * (1.0 + r::erf(x / std::f64::consts::SQRT_2));
            cdf + x * (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt()
        }
        UnaryOp::Silu => s * (1.0 + x * (1.0 - s)),
        UnaryOp::Log1p => 1.0 / (1.0 + x),
        UnaryOp::Softplus => s,
        UnaryOp::GeluTanh => {
            let (k, c) = ((2.0 / std::f64::consts::PI).sqrt(), 0.044715);
            let t = (k * (x + c * x * x * x)).tanh();
            0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * c * x * x)
        }
    }
}

/// `g * f'(x)` and its bound. The f32 derivative is computed from the f32 input or output
/// (WGSL: exp within 3 + 2|x| ulp, division 2.5 ulp, the erf approximation 1.5e-7 absolute),
/// so each op gets the bound of its formula.
pub fn unary(op: UnaryOp, x: &[f64], g: &[f64]) -> Want {
    let mut grad = Vec::with_capacity(x.len());
    let mut tol = Vec::with_capacity(x.len());
    for (&x, &g) in x.iter().zip(g) {
        let d = unary_deriv(op, x);
        let w = g * d;
        let a = x.abs();
        let t = match op {
            UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu => 0.0,
            UnaryOp::Exp => (2.0 * (3.0 + 2.0 * a) + 2.0) * u() * w.abs(),
            UnaryOp::Log => 6.0 * u() * w.abs(),
            // g / (x + 1): the sum's rounding (relative 1 ulp) and the division's.
            UnaryOp::Log1p => 8.0 * u() * w.abs(),
            // g * sigmoid(x): sigmoid's (8 + 2|x|) ulp and the product.
            UnaryOp::Softplus => (12.0 + 2.0 * a) * 2.0 * u() * w.abs(),
            UnaryOp::Sqrt => 20.0 * u() * w.abs(),
            UnaryOp::Sigmoid => {
                g.abs() * ((10.0 + 4.0 * a) * 2.0 * u() * d + 8.0 * u()) + 2.0 * u() * w.abs()
            }
            UnaryOp::Tanh => {
                g.abs() * ((10.0 + 8.0 * a) * 2.0 * u() * d + 16.0 * u()) + 2.0 * u() * w.abs()
            }
            UnaryOp::Gelu => {
                g.abs() * (4e-7 + (16.0 + 4.0 * a * a) * u() * (1.0 + a)) + 2.0 * u() * w.abs()
            }
            // tanh's error in t (about (10 + 8|inner|) ulp, inner ~ |x| + |x|^3 / 10) through
            // the terms' factors of up to 1 + |x|^3, and their roundings.
            UnaryOp::GeluTanh => {
                let inner = a + 0.05 * a * a * a;
                g.abs() * (10.0 + 8.0 * inner) * 4.0 * u() * (1.0 + a * a * a) + 2.0 * u() * w.abs()
            }
            // s (1 + x (1 - s)) from sigmoid's s (within (8 + 2|x|) ulp, amplified by at most
            // 1 + 3|x| through the formula), plus a few roundings of its terms.
            UnaryOp::Silu => {
                let s = r::sigmoid(x);
                g.abs()
                    * ((1.0 + 3.0 * a) * (10.0 + 2.0 * a) * 2.0 * u() * s
                        + 8.0 * u() * (1.0 + a) * s)
                    + 2.0 * u() * w.abs()
            }
        };
        grad.push(w);
        tol.push(t);
    }
    Want { grad, tol }
}

/// `g * d(x op s)/dx` (max/min as torch 2.15's clamp_min / clamp_max: the gradient passes where
/// x > s / x < s).
pub fn scalar(op: ScalarOp, s: f64, x: &[f64], g: &[f64]) -> Want {
    let mut grad = Vec::with_capacity(x.len());
    let mut tol = Vec::with_capacity(x.len());
    for (&x, &g) in x.iter().zip(g) {
        let (w, k) = match op {
            ScalarOp::Add | ScalarOp::Sub => (g, 0.0),
            ScalarOp::RSub => (-g, 0.0),
            ScalarOp::Mul => (g * s, 1.0),
            ScalarOp::Div => (g / s, 3.0),
            // r = 1 / x (2.5 ulp), g s, r r and their product (1 rounding each).
            ScalarOp::RDiv => (-g * s / (x * x), 14.0),
            ScalarOp::Max => (if x > s { g } else { 0.0 }, 0.0),
            ScalarOp::Min => (if x < s { g } else { 0.0 }, 0.0),
            // WGSL pow is exp2(s log2 x): its error grows with |s ln x|.
            ScalarOp::Pow => (g * s * x.powf(s - 1.0), 16.0 + 8.0 * (s * x.ln()).abs()),
        };
        grad.push(w);
        tol.push(k * u() * w.abs());
    }
    Want { grad, tol }
}

/// Gradient of a one-axis reduction of `(x, shape)` over `dim` with upstream `g` (the reduced
/// shape, row-major; keepdim does not change the order).
pub fn reduce(op: ReduceOp, x: &[f64], shape: &[usize], dim: usize, g: &[f64]) -> Want {
    let len = shape[dim];
    let inner: usize = shape[dim + 1..].iter().product();
    let outer: usize = shape[..dim].iter().product();
    let mut grad = vec![0.0; x.len()];
    let mut tol = vec![0.0; x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let gi = g[o * inner + i];
            let at = |j: usize| (o * len + j) * inner + i;
            match op {
                ReduceOp::Sum => (0..len).for_each(|j| grad[at(j)] = gi),
                ReduceOp::Mean => (0..len).for_each(|j| {
                    grad[at(j)] = gi / len as f64;
                    tol[at(j)] = 3.0 * u() * (gi / len as f64).abs();
                }),
                ReduceOp::Max | ReduceOp::Min => {
                    let mut best = 0;
                    for j in 1..len {
                        let better = if op == ReduceOp::Max {
                            x[at(j)] > x[at(best)]
                        } else {
                            x[at(j)] < x[at(best)]
                        };
                        if better {
                            best = j;
                        }
                    }
                    grad[at(best)] = gi;
                }
            }
        }
    }
    Want { grad, tol }
}

/// A GEMM problem `act(alpha a b + beta c + bias)` in row-major f64 (see `reference::gemm`).
pub struct GemmProblem<'a> {
    pub a: &'a [f64],
    pub a_shape: &'a [usize],
    pub b: &'a [f64],
    pub b_shape: &'a [usize],
    pub alpha: f64,
    pub beta: f64,
    pub c: Option<(&'a [f64], &'a [usize])>,
    /// (per row, values)
    pub bias: Option<(bool, &'a [f64])>,
    pub act: Activation,
    /// The upstream gradient (output shape, row-major).
    pub g: &'a [f64],
}

/// Gradients of a, b, c and the bias for upstream `g` (the output shape). `dZ = g act'(z)`
/// is computed by the library from the f32 output (or pre-activation for GELU), whose error
/// `dz` (the forward's accumulation bound) moves act' by at most `|act''| dz`; relu's
/// derivative may flip where `|z| <= dz`, which the bound admits as an error of `|g|`.
pub fn gemm(p: &GemmProblem) -> (Want, Want, Option<Want>, Option<Want>) {
    use crate::common::reference::{broadcast_to, BiasSide};
    let side = p
        .bias
        .map(|(row, v)| (if row { BiasSide::Row } else { BiasSide::Column }, v));
    let f = r::gemm(
        p.a, p.a_shape, p.b, p.b_shape, p.alpha, p.beta, p.c, side, p.act,
    );
    let shape = f.shape.clone();
    let rk = shape.len();
    let (m, n) = (shape[rk - 2], shape[rk - 1]);
    let k = p.a_shape[p.a_shape.len() - 1];
    let batch = &shape[..rk - 2];
    let nb = numel(batch);
    let full = |r: usize, c: usize| [batch.to_vec(), vec![r, c]].concat();
    let af = broadcast_to(p.a, p.a_shape, &full(m, k));
    let bf = broadcast_to(p.b, p.b_shape, &full(k, n));
    // dZ and its absolute error per output element.
    let len = f.pre.len();
    let (mut gz, mut ez) = (vec![0.0; len], vec![0.0; len]);
    for i in 0..len {
        let z = f.pre[i];
        let dz = (2.0 * (k as f64 + 4.0) * u()) * (p.alpha.abs() * f.abs_prod[i] + f.abs_epi[i])
            + 2.0 * u() * z.abs();
        let (d, e) = act_deriv(p.act, z, dz);
        gz[i] = p.g[i] * d;
        ez[i] = p.g[i].abs() * e + 2.0 * u() * gz[i].abs();
    }
    // dA [batch, m, k] and dB [batch, k, n] at the full batch shape, then summed to the
    // operands' shapes.
    let (mut ta, mut ea) = (vec![0.0; nb * m * k], vec![0.0; nb * m * k]);
    let (mut tb, mut eb) = (vec![0.0; nb * k * n], vec![0.0; nb * k * n]);
    let (mut ma, mut mb) = (vec![0.0; nb * m * k], vec![0.0; nb * k * n]);
    for z in 0..nb {
        for i in 0..m {
            for j in 0..n {
                let o = (z * m + i) * n + j;
                for kk in 0..k {
                    let av = af[(z * m + i) * k + kk];
                    let bv = bf[(z * k + kk) * n + j];
                    let ia = (z * m + i) * k + kk;
                    let ib = (z * k + kk) * n + j;
                    ta[ia] += p.alpha * gz[o] * bv;
                    ma[ia] += (p.alpha * gz[o] * bv).abs();
                    ea[ia] += (p.alpha * ez[o] * bv).abs();
                    tb[ib] += p.alpha * gz[o] * av;
                    mb[ib] += (p.alpha * gz[o] * av).abs();
                    eb[ib] += (p.alpha * ez[o] * av).abs();
                }
            }
        }
    }
    // Each dA element sums `n` terms per batch entry, then over the broadcast batch: the bound
    // counts at most nb * inner terms (plus alpha's rounding and the final additions).
    let fold = |t: &[f64],
                mg: &[f64],
                e: &[f64],
                inner: usize,
                op_shape: &[usize],
                rows: usize,
                cols: usize| {
        let s = sum_to(t, e, &full(rows, cols), op_shape, 0.0);
        let zeros = vec![0.0; mg.len()];
        let abs = sum_to(mg, &zeros, &full(rows, cols), op_shape, 0.0);
        let err = sum_to(e, &zeros, &full(rows, cols), op_shape, 0.0);
        let tol = (0..s.grad.len())
            .map(|j| ((nb * inner) as f64 + 4.0) * 2.0 * u() * abs.grad[j] + err.grad[j])
            .collect::<Vec<_>>();
        Want { grad: s.grad, tol }
    };
    let da = fold(&ta, &ma, &ea, n, p.a_shape, m, k);
    let db = fold(&tb, &mb, &eb, m, p.b_shape, k, n);
    let dc = p.c.map(|(_, cs)| {
        let t: Vec<f64> = gz.iter().map(|v| v * p.beta).collect();
        let e: Vec<f64> = ez.iter().map(|v| v * p.beta.abs()).collect();
        sum_to(&t, &e, &shape, cs, 2.0)
    });
    let dbias = p.bias.map(|(row, v)| {
        // Column bias [n] is the output's last dim; a row bias [m] sums over the last dim.
        if row {
            let mut t = vec![0.0; v.len()];
            let mut mg = vec![0.0; v.len()];
            let mut e = vec![0.0; v.len()];
            for i in 0..len {
                let rr = (i / n) % m;
                t[rr] += gz[i];
                mg[rr] += gz[i].abs();
                e[rr] += ez[i];
            }
            let cnt = (len / m) as f64;
            Want {
                grad: t,
                tol: (0..v.len())
                    .map(|j| (cnt + 2.0) * 2.0 * u() * mg[j] + e[j])
                    .collect(),
            }
        } else {
            sum_to(&gz, &ez, &shape, &[n], 2.0)
        }
    });
    (da, db, dc, dbias)
}

/// `act'(z)` and the absolute error of the library's f32 derivative, which it computes from
/// the f32 output (or the f32 pre-activation for GELU) whose own error is `dz`.
pub fn act_deriv(act: Activation, z: f64, dz: f64) -> (f64, f64) {
    match act {
        Activation::None => (1.0, 0.0),
        Activation::Relu => (
            (z > 0.0) as u8 as f64,
            if z.abs() <= dz { 1.0 } else { 0.0 },
        ),
        Activation::Sigmoid => (unary_deriv(UnaryOp::Sigmoid, z), 16.0 * u() + 0.1 * dz),
        Activation::Tanh => (unary_deriv(UnaryOp::Tanh, z), 16.0 * u() + 0.8 * dz),
        Activation::Gelu => (
            unary_deriv(UnaryOp::Gelu, z),
            4e-7 + (16.0 + 4.0 * z * z) * u() * (1.0 + z.abs()) + 0.8 * dz,
        ),
    }
}

/// The bias channel of an output index.
pub type ChannelOf = dyn Fn(usize) -> usize;

/// One tap `(p index, q index, output index)`; `Pick` maps it to (own index, other index).
type Tap = (usize, usize, usize);
type Pick = dyn Fn(&Tap) -> (usize, usize);

/// Gradients of a bilinear op `out[o] = act(sum over taps (i, j, o) of p[i] q[j] + bias[ch(o)])`
/// (a convolution and its transpose), for upstream `g`: `(dp, dq, dbias)`.
pub struct Taps<'a> {
    pub taps: &'a [(usize, usize, usize)],
    pub p: &'a [f64],
    pub q: &'a [f64],
    pub out_len: usize,
    /// Bias values and the channel of each output.
    pub bias: Option<(&'a [f64], &'a ChannelOf)>,
    pub act: Activation,
    pub g: &'a [f64],
}

pub fn taps(t: &Taps) -> (Want, Want, Option<Want>) {
    let (mut z, mut mag, mut cnt) = (
        vec![0.0; t.out_len],
        vec![0.0; t.out_len],
        vec![0.0; t.out_len],
    );
    for &(i, j, o) in t.taps {
        z[o] += t.p[i] * t.q[j];
        mag[o] += (t.p[i] * t.q[j]).abs();
        cnt[o] += 1.0;
    }
    if let Some((b, ch)) = t.bias {
        for o in 0..t.out_len {
            z[o] += b[ch(o)];
            mag[o] += b[ch(o)].abs();
        }
    }
    let (mut gz, mut ez) = (vec![0.0; t.out_len], vec![0.0; t.out_len]);
    for o in 0..t.out_len {
        let dz = (cnt[o] + 4.0) * 2.0 * u() * mag[o] + 2.0 * u() * z[o].abs();
        let (d, e) = act_deriv(t.act, z[o], dz);
        gz[o] = t.g[o] * d;
        ez[o] = t.g[o].abs() * e + 2.0 * u() * gz[o].abs();
    }
    let side = |len: usize, other: &[f64], pick: &Pick| {
        let (mut v, mut m, mut c, mut e) = (
            vec![0.0; len],
            vec![0.0; len],
            vec![0.0; len],
            vec![0.0; len],
        );
        for tap in t.taps {
            let (me, you) = pick(tap);
            let o = tap.2;
            v[me] += gz[o] * other[you];
            m[me] += (gz[o] * other[you]).abs();
            c[me] += 1.0;
            e[me] += ez[o] * other[you].abs();
        }
        Want {
            grad: v,
            tol: (0..len)
                .map(|k| (c[k] + 4.0) * 2.0 * u() * m[k] + e[k])
                .collect(),
        }
    };
    let dp = side(t.p.len(), t.q, &|&(i, j, _)| (i, j));
    let dq = side(t.q.len(), t.p, &|&(i, j, _)| (j, i));
    let db = t.bias.map(|(b, ch)| {
        let (mut v, mut m, mut c, mut e) = (
            vec![0.0; b.len()],
            vec![0.0; b.len()],
            vec![0.0; b.len()],
            vec![0.0; b.len()],
        );
        for o in 0..t.out_len {
            v[ch(o)] += gz[o];
            m[ch(o)] += gz[o].abs();
            c[ch(o)] += 1.0;
            e[ch(o)] += ez[o];
        }
        Want {
            grad: v,
            tol: (0..b.len())
                .map(|k| (c[k] + 4.0) * 2.0 * u() * m[k] + e[k])
                .collect(),
        }
    });
    (dp, dq, db)
}
