//! Every differentiable op: autograd gradients (f32) against the f64 reference gradients of
//! grad_ref.rs, under proptest. Each case draws its shapes and values from one seed; the
//! loss is `sum(y * r)` for a random `r`, so the upstream gradient is `r` exactly (1 * r).

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use wgtensor::ops::{
    gemm, matmul, Activation, Bias, BinaryOp, GemmOptions, ReduceOp, ScalarOp, UnaryOp,
};
use wgtensor::{DType, Tensor};

use crate::common::reference::{numel, permute};
use crate::common::{device, ViewOp};
use crate::grad_ref::{self, u, GemmProblem, Want, U, U16};

const CASES: u32 = 64;
const CASES_F16: u32 = 32;

thread_local! {
    static DTYPE: std::cell::Cell<DType> = const { std::cell::Cell::new(DType::F32) };
}

/// The dtype this thread's cases run in (values, uploads and the bounds' unit roundoff).
pub fn set_dtype(dt: DType) {
    DTYPE.with(|c| c.set(dt));
    grad_ref::set_unit(if dt == DType::F16 { U16 } else { U });
}

pub fn dtype() -> DType {
    DTYPE.with(|c| c.get())
}

/// `v` rounded to this thread's dtype.
fn round(v: f64) -> f64 {
    crate::common::round_to_dtype(dtype(), v)
}

/// xorshift64*: the case's values from its seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub fn coin(&mut self, p: f64) -> bool {
        self.unit() < p
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in [lo, hi), rounded to the case's dtype.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        round(lo + (hi - lo) * self.unit())
    }
    pub fn int(&mut self, lo: i32, hi: i32) -> f64 {
        (lo + self.below((hi - lo + 1) as usize) as i32) as f64
    }
    pub fn values(&mut self, n: usize, f: impl Fn(&mut Rng) -> f64) -> Vec<f64> {
        (0..n).map(|_| f(self)).collect()
    }
    pub fn shape(&mut self, min_rank: usize, max_rank: usize, max_dim: usize) -> Vec<usize> {
        let r = min_rank + self.below(max_rank - min_rank + 1);
        (0..r).map(|_| 1 + self.below(max_dim)).collect()
    }
}

pub fn upload(data: &[f64], shape: &[usize]) -> Tensor {
    crate::common::upload(device(), data, shape, dtype())
}

pub fn leaf(data: &[f64], shape: &[usize]) -> Tensor {
    upload(data, shape).requires_grad().unwrap()
}

/// `sum(y * r)` as a one-element tensor.
pub fn loss(y: &Tensor, r: &[f64]) -> Tensor {
    let p = y.mul(&upload(r, y.shape())).unwrap();
    p.reshape(&[p.numel()]).unwrap().sum(0, false).unwrap()
}

/// A gradient to compare once the case has recorded everything: readbacks are done together
/// at the end (blocking natively, awaited in the browser), so a case needs no readback itself.
pub struct Pending {
    what: String,
    got: Option<Tensor>,
    want: Want,
    /// A missing gradient means zero (finite-difference checks of unreached leaves).
    none_is_zero: bool,
    /// f16: the gradient's own final store, and subnormal spacing (2^-24) for tiny values.
    store: f64,
    floor: f64,
}

thread_local! {
    static PENDING: std::cell::RefCell<Vec<Pending>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn push(what: &str, got: Option<&Tensor>, want: &Want, none_is_zero: bool) {
    let (store, floor) = match dtype() {
        DType::F16 => (2.0 * U16, 1e-6),
        DType::F32 | DType::I32 => (0.0, 1e-30),
    };
    PENDING.with(|p| {
        p.borrow_mut().push(Pending {
            what: what.to_string(),
            got: got.cloned(),
            want: want.clone(),
            none_is_zero,
            store,
            floor,
        })
    });
}

/// Queues the comparison of `got` (which must exist) with `want`.
pub fn check(what: &str, got: Option<&Tensor>, want: &Want) -> Result<(), TestCaseError> {
    push(what, got, want, false);
    Ok(())
}

/// [`check`] where a missing gradient stands for zeros.
pub fn check_or_zero(what: &str, got: Option<&Tensor>, want: &Want) {
    push(what, got, want, true);
}

fn take_pending() -> Vec<Pending> {
    PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()))
}

fn compare(p: &Pending, got: &[f64]) -> Result<(), TestCaseError> {
    let what = &p.what;
    prop_assert_eq!(got.len(), p.want.grad.len(), "{}: element count", what);
    for (i, ((&g, &w), &t)) in got.iter().zip(&p.want.grad).zip(&p.want.tol).enumerate() {
        let t = t + p.store * w.abs() + p.floor;
        prop_assert!(
            (g - w).abs() <= t,
            "{}: element {} is {} want {} (|err| {:e} > tol {:e})",
            what,
            i,
            g,
            w,
            (g - w).abs(),
            t
        );
    }
    Ok(())
}

/// Reads back and compares every queued gradient.
pub async fn verify_async() -> Result<(), TestCaseError> {
    for p in take_pending() {
        let got = match &p.got {
            Some(t) => crate::common::download_async(t)
                .await
                .map_err(|e| TestCaseError::fail(format!("{}: {e}", p.what)))?,
            None if p.none_is_zero => vec![0.0; p.want.grad.len()],
            None => return Err(TestCaseError::fail(format!("{}: no gradient", p.what))),
        };
        compare(&p, &got)?;
    }
    Ok(())
}

/// Builds one case in f32, queueing its checks (the caller verifies).
pub fn build(
    case: impl Fn(u64) -> Result<(), TestCaseError>,
    seed: u64,
) -> Result<(), TestCaseError> {
    take_pending();
    set_dtype(DType::F32);
    case(seed)
}

/// Runs one case and checks what it queued (the readbacks block: native only).
pub fn run(
    case: impl Fn(u64) -> Result<(), TestCaseError>,
    seed: u64,
) -> Result<(), TestCaseError> {
    build(case, seed)?;
    pollster::block_on(verify_async())
}

const UNARY: [UnaryOp; 13] = [
    UnaryOp::Neg,
    UnaryOp::Abs,
    UnaryOp::Exp,
    UnaryOp::Log,
    UnaryOp::Sqrt,
    UnaryOp::Relu,
    UnaryOp::Sigmoid,
    UnaryOp::Tanh,
    UnaryOp::Gelu,
    UnaryOp::Silu,
    UnaryOp::Log1p,
    UnaryOp::Softplus,
    UnaryOp::GeluTanh,
];

/// One case of every op of the family from the same seed.
pub fn unary_case(seed: u64) -> Result<(), TestCaseError> {
    for (i, &op) in UNARY.iter().enumerate() {
        unary_op(seed.wrapping_add(i as u64 * 0x9e37_79b9), op)?;
    }
    Ok(())
}

fn unary_op(seed: u64, op: UnaryOp) -> Result<(), TestCaseError> {
    let mut rng = Rng::new(seed);
    let shape = rng.shape(0, 3, 5);
    let n = numel(&shape);
    let x = rng.values(n, |r| match op {
        UnaryOp::Log | UnaryOp::Sqrt => r.uniform(0.05, 8.0),
        UnaryOp::Log1p => r.uniform(-0.95, 8.0),
        UnaryOp::Exp => r.uniform(-6.0, 6.0),
        // Exact zeros probe the kinks (relu'(0) = abs'(0) = 0, as PyTorch).
        _ if r.coin(0.1) => 0.0,
        _ => r.uniform(-6.0, 6.0),
    });
    let g = rng.values(n, |r| r.uniform(-2.0, 2.0));
    let xt = leaf(&x, &shape);
    let grads = loss(&xt.unary(op).unwrap(), &g).backward().unwrap();
    check(
        &format!("{op:?} {shape:?}"),
        grads.get(&xt),
        &grad_ref::unary(op, &x, &g),
    )
}

const SCALAR: [ScalarOp; 9] = [
    ScalarOp::Pow,
    ScalarOp::Add,
    ScalarOp::Sub,
    ScalarOp::RSub,
    ScalarOp::Mul,
    ScalarOp::Div,
    ScalarOp::RDiv,
    ScalarOp::Max,
    ScalarOp::Min,
];

/// One case of every op of the family from the same seed.
pub fn scalar_case(seed: u64) -> Result<(), TestCaseError> {
    for (i, &op) in SCALAR.iter().enumerate() {
        scalar_op(seed.wrapping_add(i as u64 * 0x9e37_79b9), op)?;
    }
    Ok(())
}

fn scalar_op(seed: u64, op: ScalarOp) -> Result<(), TestCaseError> {
    let mut rng = Rng::new(seed);
    let shape = rng.shape(1, 3, 5);
    let n = numel(&shape);
    // Small integers make x == s ties for max/min; rdiv needs x away from 0.
    let x = rng.values(n, |r| match op {
        ScalarOp::Max | ScalarOp::Min => r.int(-3, 3),
        ScalarOp::RDiv => r.uniform(0.25, 4.0) * if r.coin(0.5) { -1.0 } else { 1.0 },
        ScalarOp::Pow => r.uniform(0.5, 3.0),
        _ => r.uniform(-4.0, 4.0),
    });
    let s = match op {
        ScalarOp::Max | ScalarOp::Min => rng.int(-2, 2),
        _ => rng.uniform(0.25, 3.0) * if rng.coin(0.5) { -1.0 } else { 1.0 },
    };
    let g = rng.values(n, |r| r.uniform(-2.0, 2.0));
    let xt = leaf(&x, &shape);
    let grads = loss(&xt.scalar_op(op, s).unwrap(), &g).backward().unwrap();
    check(
        &format!("{op:?} {s} {shape:?}"),
        grads.get(&xt),
        &grad_ref::scalar(op, s, &x, &g),
    )
}

const BINARY: [BinaryOp; 7] = [
    BinaryOp::Pow,
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Max,
    BinaryOp::Min,
];

/// `out` with a random number of leading dims dropped and random dims set to 1.
fn broadcast_source(rng: &mut Rng, out: &[usize]) -> Vec<usize> {
    let drop = rng.below(out.len() + 1).min(out.len() - 1);
    out[drop..]
        .iter()
        .map(|&d| if rng.coin(0.3) { 1 } else { d })
        .collect()
}

/// One case of every op of the family from the same seed.
pub fn binary_case(seed: u64) -> Result<(), TestCaseError> {
    for (i, &op) in BINARY.iter().enumerate() {
        binary_op(seed.wrapping_add(i as u64 * 0x9e37_79b9), op)?;
    }
    Ok(())
}

fn binary_op(seed: u64, op: BinaryOp) -> Result<(), TestCaseError> {
    let mut rng = Rng::new(seed);
    let out = rng.shape(1, 3, 4);
    let (sa, sb) = (
        broadcast_source(&mut rng, &out),
        broadcast_source(&mut rng, &out),
    );
    let out = crate::common::reference::broadcast_shapes(&sa, &sb).unwrap();
    let gen = |r: &mut Rng, divisor: bool| match op {
        BinaryOp::Max | BinaryOp::Min => r.int(-2, 2),
        BinaryOp::Div if divisor => r.uniform(0.5, 2.0) * if r.coin(0.5) { -1.0 } else { 1.0 },
        // pow: positive bases (a negative base needs an integer exponent), exponents in [-2, 2].
        BinaryOp::Pow if !divisor => r.uniform(0.5, 2.0),
        _ => r.uniform(-2.0, 2.0),
    };
    let a = rng.values(numel(&sa), |r| gen(r, false));
    let b = rng.values(numel(&sb), |r| gen(r, true));
    let g = rng.values(numel(&out), |r| r.uniform(-2.0, 2.0));
    // Either operand may be untracked (its gradient is then not computed).
    let (track_a, track_b) = match rng.below(3) {
        0 => (true, false),
        1 => (false, true),
        _ => (true, true),
    };
    let at = if track_a {
        leaf(&a, &sa)
    } else {
        upload(&a, &sa)
    };
    let bt = if track_b {
        leaf(&b, &sb)
    } else {
        upload(&b, &sb)
    };
    let grads = loss(&at.binary(&bt, op).unwrap(), &g).backward().unwrap();
    // Per-element terms at the broadcast shape: (d/da, roundings), (d/db, roundings).
    let len = numel(&out);
    let (mut ta, mut tb) = (vec![0.0; len], vec![0.0; len]);
    let (ka, kb) = match op {
        BinaryOp::Add | BinaryOp::Sub | BinaryOp::Max | BinaryOp::Min => (0.0, 0.0),
        BinaryOp::Mul => (1.0, 1.0),
        BinaryOp::Div => (3.0, 12.0),
        BinaryOp::Pow => (4.0, 4.0),
    };
    // pow's own error (WGSL: pow is exp2(y log2 x), log within 2^-21 absolute near 1), as an
    // absolute error per term.
    let (mut ea, mut eb) = (vec![0.0; len], vec![0.0; len]);
    for i in 0..len {
        let x = a[grad_ref::bcast_index(i, &out, &sa)];
        let y = b[grad_ref::bcast_index(i, &out, &sb)];
        let w = |first: bool| {
            if x == y {
                0.5
            } else if first {
                1.0
            } else {
                0.0
            }
        };
        let (da, db) = match op {
            BinaryOp::Add => (1.0, 1.0),
            BinaryOp::Sub => (1.0, -1.0),
            BinaryOp::Mul => (y, x),
            BinaryOp::Div => (1.0 / y, -x / (y * y)),
            BinaryOp::Max => (w(x > y), w(y > x)),
            BinaryOp::Min => (w(x < y), w(y < x)),
            BinaryOp::Pow => (y * x.powf(y - 1.0), x.powf(y) * x.ln()),
        };
        ta[i] = g[i] * da;
        tb[i] = g[i] * db;
        if op == BinaryOp::Pow {
            let l = x.ln().abs();
            ea[i] = ta[i].abs() * 2.0 * u() * (8.0 + 8.0 * (y - 1.0).abs() * l);
            eb[i] = (g[i] * x.powf(y)).abs() * 2e-6
                + tb[i].abs() * 2.0 * u() * (8.0 + 8.0 * y.abs() * l);
        }
    }
    let what = format!("{op:?} {sa:?} {sb:?}");
    if track_a {
        check(
            &format!("{what} da"),
            grads.get(&at),
            &grad_ref::sum_to(&ta, &ea, &out, &sa, ka),
        )?;
    } else {
        prop_assert!(grads.get(&at).is_none());
    }
    if track_b {
        check(
            &format!("{what} db"),
            grads.get(&bt),
            &grad_ref::sum_to(&tb, &eb, &out, &sb, kb),
        )?;
    }
    Ok(())
}

const REDUCE: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min];

/// One case of every op of the family from the same seed.
pub fn reduce_case(seed: u64) -> Result<(), TestCaseError> {
    for (i, &op) in REDUCE.iter().enumerate() {
        reduce_op(seed.wrapping_add(i as u64 * 0x9e37_79b9), op)?;
    }
    Ok(())
}

fn reduce_op(seed: u64, op: ReduceOp) -> Result<(), TestCaseError> {
    let mut rng = Rng::new(seed);
    let shape = rng.shape(1, 3, 6);
    let dim = rng.below(shape.len());
    let keepdim = rng.coin(0.5);
    // Negative dims count from the end.
    let arg = if rng.coin(0.5) {
        dim as isize - shape.len() as isize
    } else {
        dim as isize
    };
    let n = numel(&shape);
    // Small integers make ties: the gradient goes to the first extremum only.
    let x = rng.values(n, |r| match op {
        ReduceOp::Max | ReduceOp::Min => r.int(-2, 2),
        _ => r.uniform(-3.0, 3.0),
    });
    let g = rng.values(n / shape[dim], |r| r.uniform(-2.0, 2.0));
    let xt = leaf(&x, &shape);
    let y = xt.reduce(arg, op, keepdim).unwrap();
    let grads = loss(&y, &g).backward().unwrap();
    check(
        &format!("{op:?} {shape:?} dim {arg} keepdim {keepdim}"),
        grads.get(&xt),
        &grad_ref::reduce(op, &x, &shape, dim, &g),
    )
}

/// A random view step valid for `shape`, or None to stop.
#[derive(Debug, Clone)]
enum Step {
    View(ViewOp),
    Reshape(Vec<usize>),
    /// `unsqueeze(dim)` with dim in `-(rank+1)..=rank`.
    Unsqueeze(isize),
    Contiguous,
}

fn view_step(rng: &mut Rng, shape: &[usize]) -> Step {
    let r = shape.len();
    match rng.below(7) {
        5 if r < 4 => {
            let d = rng.below(r + 1) as isize;
            Step::Unsqueeze(if rng.coin(0.5) {
                d - (r as isize + 1)
            } else {
                d
            })
        }
        0 if r > 0 => {
            let dim = rng.below(r);
            let start = rng.below(shape[dim]);
            let len = 1 + rng.below(shape[dim] - start);
            Step::View(ViewOp::Narrow {
                dim: dim as isize - if rng.coin(0.5) { r as isize } else { 0 },
                start,
                len,
            })
        }
        1 if r > 1 => {
            let mut p: Vec<usize> = (0..r).collect();
            for i in (1..r).rev() {
                p.swap(i, rng.below(i + 1));
            }
            Step::View(ViewOp::Permute(p))
        }
        2 if r > 1 => Step::View(ViewOp::Transpose(rng.below(r) as isize, -1)),
        3 if r < 4 => {
            let mut t: Vec<usize> = shape
                .iter()
                .map(|&d| if d == 1 { 1 + rng.below(3) } else { d })
                .collect();
            if rng.coin(0.5) {
                t.insert(0, 1 + rng.below(3));
            }
            Step::View(ViewOp::BroadcastTo(t))
        }
        4 => {
            let n = numel(shape);
            if rng.coin(0.5) || r < 2 {
                Step::Reshape(vec![n])
            } else {
                let mut s = shape.to_vec();
                s.reverse();
                Step::Reshape(s)
            }
        }
        _ => Step::Contiguous,
    }
}

pub fn view_case(seed: u64) -> Result<(), TestCaseError> {
    let mut rng = Rng::new(seed);
    let shape = rng.shape(1, 3, 4);
    let n = numel(&shape);
    let x = rng.values(n, |r| r.uniform(-2.0, 2.0));
    let xt = leaf(&x, &shape);
    // The host model follows each element's source index through the same views.
    let mut idx: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let mut cur_shape = shape.clone();
    let mut y = xt.clone();
    let mut steps = Vec::new();
    for _ in 0..1 + rng.below(4) {
        let step = view_step(&mut rng, &cur_shape);
        match &step {
            Step::View(v) => {
                y = v.apply(&y).unwrap();
                (idx, cur_shape) = v.apply_host(&idx, &cur_shape);
            }
            Step::Reshape(s) => {
                y = y.reshape(s).unwrap();
                cur_shape = s.clone();
            }
            Step::Unsqueeze(d) => {
                y = y.unsqueeze(*d).unwrap();
                let at = if *d < 0 {
                    *d + cur_shape.len() as isize + 1
                } else {
                    *d
                };
                cur_shape.insert(at as usize, 1);
            }
            Step::Contiguous => y = y.contiguous().unwrap(),
        }
        steps.push(step);
    }
    prop_assert_eq!(y.shape(), cur_shape.as_slice());
    let g = rng.values(idx.len(), |r| r.uniform(-2.0, 2.0));
    let grads = loss(&y, &g).backward().unwrap();
    let (mut want, mut mag, mut cnt) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    for (i, &src) in idx.iter().enumerate() {
        want[src as usize] += g[i];
        mag[src as usize] += g[i].abs();
        cnt[src as usize] += 1.0;
    }
    let tol = (0..n).map(|j| cnt[j] * 2.0 * u() * mag[j]).collect();
    check(
        &format!("{shape:?} {steps:?}"),
        grads.get(&xt),
        &Want { grad: want, tol },
    )
}

pub const ACTS: [Activation; 5] = [
    Activation::None,
    Activation::Relu,
    Activation::Gelu,
    Activation::Sigmoid,
    Activation::Tanh,
];

/// A leaf holding `data` (row-major over `shape`, rank >= 2), optionally stored transposed
/// (the op then reads a transposed view). Returns (leaf, view used by the op).
fn operand(rng: &mut Rng, data: &[f64], shape: &[usize]) -> (Tensor, Tensor, bool) {
    let r = shape.len();
    if rng.coin(0.4) {
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 1, r - 2);
        let stored: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
        let l = leaf(&permute(data, shape, &perm), &stored);
        let v = l.transpose(-1, -2).unwrap();
        (l, v, true)
    } else {
        let l = leaf(data, shape);
        (l.clone(), l, false)
    }
}

/// The reference gradient of an operand stored transposed, in its storage order.
fn stored(w: Want, shape: &[usize], transposed: bool) -> Want {
    if !transposed {
        return w;
    }
    let r = shape.len();
    let mut perm: Vec<usize> = (0..r).collect();
    perm.swap(r - 1, r - 2);
    Want {
        grad: permute(&w.grad, shape, &perm),
        tol: permute(&w.tol, shape, &perm),
    }
}

pub fn gemm_case(seed: u64) -> Result<(), TestCaseError> {
    let mut rng = Rng::new(seed);
    let (m, n) = (1 + rng.below(6), 1 + rng.below(6));
    let k = if rng.coin(0.3) {
        20 + rng.below(60)
    } else {
        1 + rng.below(6)
    };
    let batch = rng.shape(0, 2, 3);
    let mut sa = broadcast_batch(&mut rng, &batch);
    sa.extend([m, k]);
    let mut sb = broadcast_batch(&mut rng, &batch);
    sb.extend([k, n]);
    let out_batch =
        crate::common::reference::broadcast_shapes(&sa[..sa.len() - 2], &sb[..sb.len() - 2])
            .unwrap();
    let mut out = out_batch.clone();
    out.extend([m, n]);
    let alpha = [1.0, 0.5, -1.5][rng.below(3)];
    let beta = [1.0, 0.5, 0.0][rng.below(3)];
    let c_shape = match rng.below(5) {
        0 => Some(vec![n]),
        1 => Some(vec![m, 1]),
        2 => Some(out.clone()),
        _ => None,
    };
    let bias_row = match rng.below(3) {
        0 => Some(false),
        1 => Some(true),
        _ => None,
    };
    let act = ACTS[rng.below(ACTS.len())];
    let split_k = if k >= 2 && rng.coin(0.3) {
        Some(2)
    } else {
        None
    };
    let a = rng.values(numel(&sa), |r| r.uniform(-1.0, 1.0));
    let b = rng.values(numel(&sb), |r| r.uniform(-1.0, 1.0));
    let c = c_shape
        .as_ref()
        .map(|s| rng.values(numel(s), |r| r.uniform(-1.0, 1.0)));
    let bias = bias_row.map(|row| rng.values(if row { m } else { n }, |r| r.uniform(-1.0, 1.0)));
    let g = rng.values(numel(&out), |r| r.uniform(-1.0, 1.0));

    let (al, av, a_t) = operand(&mut rng, &a, &sa);
    let (bl, bv, b_t) = operand(&mut rng, &b, &sb);
    let ct = c.as_ref().zip(c_shape.as_ref()).map(|(d, s)| leaf(d, s));
    let bias_t = bias.as_ref().map(|d| leaf(d, &[d.len()]));
    let opts = GemmOptions {
        alpha,
        beta,
        c: ct.as_ref(),
        bias: bias_row.zip(bias_t.as_ref()).map(|(row, t)| {
            if row {
                Bias::PerRow(t)
            } else {
                Bias::PerColumn(t)
            }
        }),
        activation: act,
        split_k,
    };
    let y = gemm(&av, &bv, &opts).unwrap();
    prop_assert_eq!(y.shape(), out.as_slice());
    let grads = loss(&y, &g).backward().unwrap();
    let p = GemmProblem {
        a: &a,
        a_shape: &sa,
        b: &b,
        b_shape: &sb,
        alpha,
        beta,
        c: c.as_deref().zip(c_shape.as_deref()),
        bias: bias_row.zip(bias.as_deref()),
        act,
        g: &g,
    };
    let (da, db, dc, dbias) = grad_ref::gemm(&p);
    let what = format!(
        "{sa:?}{} x {sb:?}{} alpha {alpha} beta {beta} c {c_shape:?} bias {bias_row:?} {act:?} split {split_k:?}",
        if a_t { "^T" } else { "" },
        if b_t { "^T" } else { "" }
    );
    check(
        &format!("{what}: da"),
        grads.get(&al),
        &stored(da, &sa, a_t),
    )?;
    check(
        &format!("{what}: db"),
        grads.get(&bl),
        &stored(db, &sb, b_t),
    )?;
    if let (Some(t), Some(w)) = (&ct, dc) {
        check(&format!("{what}: dc"), grads.get(t), &w)?;
    }
    if let (Some(t), Some(w)) = (&bias_t, dbias) {
        check(&format!("{what}: dbias"), grads.get(t), &w)?;
    }
    Ok(())
}

/// A batch shape that broadcasts to `batch`: leading dims dropped, some dims set to 1.
fn broadcast_batch(rng: &mut Rng, batch: &[usize]) -> Vec<usize> {
    let drop = rng.below(batch.len() + 1);
    batch[drop..]
        .iter()
        .map(|&d| if rng.coin(0.3) { 1 } else { d })
        .collect()
}

/// numpy matmul with 1-D operands (the promoted dims are views recorded around the GEMM).
pub fn matmul_case(seed: u64) -> Result<(), TestCaseError> {
    let mut rng = Rng::new(seed);
    let (m, k, n) = (1 + rng.below(5), 1 + rng.below(7), 1 + rng.below(5));
    let sa = if rng.coin(0.5) { vec![k] } else { vec![m, k] };
    let sb = if rng.coin(0.5) || sa.len() == 2 {
        vec![k]
    } else {
        vec![k, n]
    };
    let a = rng.values(numel(&sa), |r| r.uniform(-1.0, 1.0));
    let b = rng.values(numel(&sb), |r| r.uniform(-1.0, 1.0));
    let (at, bt) = (leaf(&a, &sa), leaf(&b, &sb));
    let y = matmul(&at, &bt).unwrap();
    let g = rng.values(y.numel(), |r| r.uniform(-1.0, 1.0));
    let grads = loss(&y, &g).backward().unwrap();
    // As 2-D: a [M', K], b [K, N'] with the output [M', N'] row-major = g.
    let a2 = if sa.len() == 1 {
        vec![1, k]
    } else {
        sa.clone()
    };
    let b2 = if sb.len() == 1 {
        vec![k, 1]
    } else {
        sb.clone()
    };
    let p = GemmProblem {
        a: &a,
        a_shape: &a2,
        b: &b,
        b_shape: &b2,
        alpha: 1.0,
        beta: 1.0,
        c: None,
        bias: None,
        act: Activation::None,
        g: &g,
    };
    let (da, db, _, _) = grad_ref::gemm(&p);
    let what = format!("matmul {sa:?} x {sb:?}");
    check(&format!("{what}: da"), grads.get(&at), &da)?;
    check(&format!("{what}: db"), grads.get(&bt), &db)
}

/// to_dtype: the gradient converts back (f32 -> f16 -> f32 passes g rounded to f16).
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn to_dtype_grad_f16() {
    let dev = device();
    crate::common::require_f16(dev);
    let x = leaf(&[1.0, -2.0, 3.0], &[3]);
    let h = x.to_dtype(wgtensor::DType::F16).unwrap();
    let y = h
        .mul_scalar(2.0)
        .unwrap()
        .to_dtype(wgtensor::DType::F32)
        .unwrap();
    let grads = loss(&y, &[0.1, 1.0, -3.0]).backward().unwrap();
    let got = crate::common::download(grads.get(&x).unwrap()).unwrap();
    let want: Vec<f64> = [0.1f64, 1.0, -3.0]
        .iter()
        .map(|&v| f64::from(wgtensor::f16::from_f64(f64::from(v as f32))) * 2.0)
        .collect();
    assert_eq!(got, want);
}

/// Builds `case` in f16 (after the adapter check); the caller verifies.
pub fn build_f16(
    case: impl Fn(u64) -> Result<(), TestCaseError>,
    seed: u64,
) -> Result<(), TestCaseError> {
    take_pending();
    set_dtype(DType::F16);
    let r = case(seed);
    set_dtype(DType::F32);
    r
}

/// [`run`] in f16 (native only).
pub fn f16(
    case: impl Fn(u64) -> Result<(), TestCaseError>,
    seed: u64,
) -> Result<(), TestCaseError> {
    crate::common::require_f16(device());
    build_f16(case, seed)?;
    pollster::block_on(verify_async())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES_F16))]

    #[test]
    fn unary_grads_f16(seed in any::<u64>()) { f16(unary_case, seed)?; }

    #[test]
    fn scalar_grads_f16(seed in any::<u64>()) { f16(scalar_case, seed)?; }

    #[test]
    fn binary_grads_f16(seed in any::<u64>()) { f16(binary_case, seed)?; }

    #[test]
    fn reduce_grads_f16(seed in any::<u64>()) { f16(reduce_case, seed)?; }

    #[test]
    fn view_grads_f16(seed in any::<u64>()) { f16(view_case, seed)?; }

    #[test]
    fn gemm_grads_f16(seed in any::<u64>()) { f16(gemm_case, seed)?; }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn unary_grads(seed in any::<u64>()) { run(unary_case, seed)?; }

    #[test]
    fn scalar_grads(seed in any::<u64>()) { run(scalar_case, seed)?; }

    #[test]
    fn binary_grads(seed in any::<u64>()) { run(binary_case, seed)?; }

    #[test]
    fn reduce_grads(seed in any::<u64>()) { run(reduce_case, seed)?; }

    #[test]
    fn view_grads(seed in any::<u64>()) { run(view_case, seed)?; }

    #[test]
    fn gemm_grads(seed in any::<u64>()) { run(gemm_case, seed)?; }

    #[test]
    fn matmul_grads(seed in any::<u64>()) { run(matmul_case, seed)?; }
}
