//! Elementwise conformance: unary, scalar and binary ops (with numpy broadcasting), contiguous
//! copies, reshape, dtype conversion, zeros/full — on contiguous tensors and on permuted,
//! sliced and broadcast views — against the f64 reference.
//!
//! Tolerances (f32 error bounds of each op; `check::out_round` adds the final rounding to
//! the output dtype, one f16 ulp ~ 2^-11..2^-10 relative for f16 outputs, whose inputs are
//! already f16 values so the reference is computed from exactly those values):
//! - neg, abs, relu, max, min, copies, conversions: exact (they return an input value or a
//!   correctly rounded conversion of it).
//! - add, sub, mul (tensor and scalar forms): WGSL requires correctly rounded results, so
//!   within half an f32 ulp, and exactly equal when the true result is an f32 — which every
//!   small-integer case is (`Dist::SmallInt`), giving exact-equality checks.
//! - div, rdiv: WGSL allows 2.5 ulp.
//! - exp, log, sqrt, sigmoid, tanh, gelu: see `unary_err32`.

use proptest::prelude::*;
use wgtensor::ops::{BinaryOp, ScalarOp, UnaryOp};
use wgtensor::{DType, Tensor};

#[cfg(not(target_arch = "wasm32"))]
use crate::check::fetch;
use crate::check::{compare, compare_bits, correctly_rounded, fetch_async, ok, out_round, EPS32};
use crate::common::{device, reference, require_f16};
#[cfg(not(target_arch = "wasm32"))]
use crate::strategies::run_async;
use crate::strategies::{
    broadcast_source, general_dist, large_shape, operand, operand_of_shape, small_shape, view_kind,
    Dist, Operand, Rng, ViewKind,
};

/// The device a case runs on: natively about a third of the cases (picked from the shapes)
/// run on the GPU plan (`gpu_plans_device`: the vec4 maps and binaries, the tiled transpose
/// copy), the rest on the default device; the browser's default device always. Also a suffix
/// for the failure message.
fn case_device(shapes: &[&[usize]]) -> (&'static wgtensor::Device, &'static str) {
    let h = shapes
        .iter()
        .flat_map(|s| s.iter())
        .fold(7usize, |h, &d| h.wrapping_mul(31).wrapping_add(d + 1));
    #[cfg(not(target_arch = "wasm32"))]
    if h % 3 == 0 {
        return (crate::common::gpu_plans_device(), " (GPU plan)");
    }
    let _ = h;
    (device(), "")
}

// Case counts: f32 tests run more cases than f16 ones (f16 shares most code paths); tests on
// large shapes (up to ~70k elements) run few cases because each costs far more.
const CASES_F32: u32 = 40;
const CASES_F16: u32 = 20;
const CASES_LARGE_F32: u32 = 10;
const CASES_LARGE_F16: u32 = 5;

fn shapes(large: bool) -> BoxedStrategy<Vec<usize>> {
    if large {
        large_shape()
    } else {
        small_shape().boxed()
    }
}

// ---------------------------------------------------------------------------------------------
// Unary
// ---------------------------------------------------------------------------------------------

const UNARY_OPS: [UnaryOp; 13] = [
    UnaryOp::Neg,
    UnaryOp::Abs,
    UnaryOp::Relu,
    UnaryOp::Exp,
    UnaryOp::Log,
    UnaryOp::Sqrt,
    UnaryOp::Sigmoid,
    UnaryOp::Tanh,
    UnaryOp::Gelu,
    UnaryOp::Silu,
    UnaryOp::Log1p,
    UnaryOp::Softplus,
    UnaryOp::GeluTanh,
];

#[derive(Clone, Debug)]
pub(crate) struct UnaryProblem {
    op: UnaryOp,
    x: Operand,
}

/// Inputs in each op's domain that keep f16 results finite.
fn unary_dists(op: UnaryOp, dtype: DType) -> BoxedStrategy<Dist> {
    match op {
        UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu => general_dist().boxed(),
        UnaryOp::Exp => {
            // e^9 = 8103 < f16 max 65504; e^-9 = 1.2e-4 stays a normal f16.
            let lim = if dtype == DType::F16 { 9.0 } else { 10.0 };
            prop_oneof![
                Just(Dist::Uniform(-lim, lim)),
                Just(Dist::SignedLog(-4.0, 0.9))
            ]
            .boxed()
        }
        // Positive only; the second range concentrates on [0.4, 2.5], where log's WGSL bound is
        // absolute rather than relative.
        UnaryOp::Log | UnaryOp::Sqrt => {
            prop_oneof![Just(Dist::PosLog(-4.0, 4.0)), Just(Dist::PosLog(-0.4, 0.4))].boxed()
        }
        UnaryOp::Sigmoid
        | UnaryOp::Tanh
        | UnaryOp::Gelu
        | UnaryOp::GeluTanh
        | UnaryOp::Silu
        | UnaryOp::Softplus => prop_oneof![
            Just(Dist::SignedLog(-4.0, 1.0)),
            Just(Dist::Uniform(-10.0, 10.0))
        ]
        .boxed(),
        // Above -1: magnitudes down to 1e-6 (where log(1 + x) would lose every digit), the
        // series' range and beyond.
        UnaryOp::Log1p => prop_oneof![
            Just(Dist::SignedLog(-6.0, -0.05)),
            Just(Dist::Uniform(-0.95, 20.0)),
            Just(Dist::PosLog(-1.0, 4.0))
        ]
        .boxed(),
    }
}

pub(crate) fn unary_problem(dtype: DType, large: bool) -> impl Strategy<Value = UnaryProblem> {
    prop::sample::select(&UNARY_OPS[..]).prop_flat_map(move |op| {
        operand(dtype, shapes(large), view_kind(), unary_dists(op, dtype))
            .prop_map(move |x| UnaryProblem { op, x })
    })
}

/// Error bound of the kernel's f32 result for input `x` with exact result `want`.
/// `EPS32 * |want|` bounds one f32 ulp of the result.
pub(crate) fn unary_err32(op: UnaryOp, x: f64, want: f64) -> f64 {
    let ulps = |k: f64| k * EPS32 * want.abs();
    match op {
        UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu => 0.0,
        // WGSL: exp is accurate to 3 + 2|x| ulp.
        UnaryOp::Exp => ulps(3.0 + 2.0 * x.abs()),
        // WGSL: log is accurate to 3 ulp outside [0.5, 2] and to 2^-21 absolute inside.
        UnaryOp::Log => {
            if (0.5..=2.0).contains(&x) {
                2f64.powi(-21)
            } else {
                ulps(3.0)
            }
        }
        // WGSL: sqrt inherits from 1 / inverseSqrt(x): 2 ulp + 2.5 ulp division, plus rounding.
        UnaryOp::Sqrt => ulps(5.0),
        // 1/(1+e^-x) or e^x/(1+e^x): exp's 3 + 2|x| ulp pass through with a factor <= 1, then
        // an add (0.5 ulp) and a division (2.5 ulp); 8 + 2|x| ulp with margin.
        UnaryOp::Sigmoid => ulps(8.0 + 2.0 * x.abs()),
        // Relative accuracy over the whole range, like any libm tanh (PyTorch's reference);
        // near 0 this rules out evaluating 1 - e^(-2|x|), which cancels. The kernel uses an
        // odd polynomial below 0.625 (~1.2 ulp) and (1 - t) / (1 + t), t = e^(-2|x|), above:
        // there exp's 3 + 4|x| ulp on t, scaled by 2t / ((1 + t)^2 tanh x) (at most 3.4 ulp of
        // the result, at x = 0.625), plus a division (2.5 ulp) and two adds stay below 8 ulp.
        UnaryOp::Tanh => ulps(8.0),
        // 0.5 x (1 + erf(x / sqrt 2)) with the Abramowitz-Stegun 7.1.26 erf (|error| < 1.5e-7)
        // whose exp contributes at most ~3 ulp of 1 (6 * 2^-24 with margin): the erf error is
        // scaled by 0.5|x|; then a few roundings of the result.
        UnaryOp::Gelu => 0.5 * x.abs() * (1.5e-7 + 3.0 * EPS32) + ulps(4.0),
        // 0.5 x (1 + tanh(inner)): tanh's 8 ulp of |t| <= 1, and inner's few roundings carried
        // by tanh' = 1 - t^2 (at most about one ulp of 1), scaled by 0.5|x|; then the result's
        // roundings.
        UnaryOp::GeluTanh => 0.5 * x.abs() * 12.0 * EPS32 + ulps(4.0),
        // x * sigmoid(x): sigmoid's 8 + 2|x| ulp, then one product.
        UnaryOp::Silu => ulps(9.0 + 2.0 * x.abs()),
        // Below |x| = 0.5: x / (2 + x) within 1.5 ulp, a short series whose roundings add
        // about 2 ulp, and the final product; above, log of 1 + x (rounded by half an ulp of
        // 1 + x) with WGSL's log bound (absolute 2^-21 on [0.5, 2], else 3 ulp).
        UnaryOp::Log1p => {
            if x.abs() < 0.5 {
                ulps(6.0)
            } else if (0.5..=2.0).contains(&(1.0 + x)) {
                2f64.powi(-21) + ulps(2.0)
            } else {
                ulps(5.0)
            }
        }
        // max(x, 0) + log1p(e^-|x|): exp's 3 + 2|x| ulp carried through log1p (a factor at
        // most 1) plus log1p's own bound on the term, then one add.
        UnaryOp::Softplus => {
            let e = (-x.abs()).exp();
            let term = e.ln_1p();
            let log1p_err = if e < 0.5 {
                6.0 * EPS32 * term
            } else {
                2f64.powi(-21) + 2.0 * EPS32 * term
            };
            (3.0 + 2.0 * x.abs()) * EPS32 * term + log1p_err + ulps(1.0)
        }
    }
}

pub(crate) async fn check_unary(p: &UnaryProblem) -> Result<(), TestCaseError> {
    let (dev, plan) = case_device(&[&p.x.shape]);
    let what = format!("{:?}{plan}", p.op);
    let y = ok(&what, p.x.tensor(dev).unary(p.op))?;
    prop_assert_eq!(y.dtype(), p.x.dtype);
    let xs = p.x.values();
    let want = reference::unary(&xs, p.op);
    let got = fetch_async(&what, &y, &p.x.shape).await?;
    compare(&what, &p.x.shape, &got, &want, |i| {
        out_round(p.x.dtype, want[i], unary_err32(p.op, xs[i], want[i]))
    })
}

#[test]
fn unary_f32() {
    run_async(CASES_F32, unary_problem(DType::F32, false), check_unary);
}

#[test]
fn unary_f16() {
    require_f16(device());
    run_async(CASES_F16, unary_problem(DType::F16, false), check_unary);
}

#[test]
fn unary_large_f32() {
    run_async(
        CASES_LARGE_F32,
        unary_problem(DType::F32, true),
        check_unary,
    );
}

#[test]
fn unary_large_f16() {
    require_f16(device());
    run_async(
        CASES_LARGE_F16,
        unary_problem(DType::F16, true),
        check_unary,
    );
}

// ---------------------------------------------------------------------------------------------
// Scalar ops
// ---------------------------------------------------------------------------------------------

const SCALAR_OPS: [ScalarOp; 8] = [
    ScalarOp::Add,
    ScalarOp::Sub,
    ScalarOp::RSub,
    ScalarOp::Mul,
    ScalarOp::Div,
    ScalarOp::RDiv,
    ScalarOp::Max,
    ScalarOp::Min,
];

#[derive(Clone, Debug)]
pub(crate) struct ScalarProblem {
    op: ScalarOp,
    s: f32,
    x: Operand,
}

/// Small integers (exact cases) or arbitrary f32 values.
fn general_scalar() -> BoxedStrategy<f32> {
    prop_oneof![(-8i32..=8).prop_map(|v| v as f32), -100f32..100f32].boxed()
}

/// Divisors with |s| >= 0.5.
fn away_from_zero_scalar() -> BoxedStrategy<f32> {
    prop_oneof![
        prop_oneof![-8i32..=-1, 1i32..=8].prop_map(|v| v as f32),
        (0.5f32..50.0, any::<bool>()).prop_map(|(v, neg)| if neg { -v } else { v }),
    ]
    .boxed()
}

pub(crate) fn scalar_problem(dtype: DType) -> impl Strategy<Value = ScalarProblem> {
    prop::sample::select(&SCALAR_OPS[..]).prop_flat_map(move |op| {
        let (scalars, dists) = match op {
            ScalarOp::Div => (away_from_zero_scalar(), general_dist().boxed()),
            // The tensor is the denominator: |x| in [0.5, 31.6].
            ScalarOp::RDiv => (
                general_scalar(),
                Just(Dist::AwayFromZero(-0.3, 1.5)).boxed(),
            ),
            _ => (general_scalar(), general_dist().boxed()),
        };
        (scalars, operand(dtype, small_shape(), view_kind(), dists))
            .prop_map(move |(s, x)| ScalarProblem { op, s, x })
    })
}

pub(crate) async fn check_scalar(p: &ScalarProblem) -> Result<(), TestCaseError> {
    let (dev, plan) = case_device(&[&p.x.shape]);
    let what = format!("{:?} scalar {}{plan}", p.op, p.s);
    let y = ok(&what, p.x.tensor(dev).scalar_op(p.op, f64::from(p.s)))?;
    prop_assert_eq!(y.dtype(), p.x.dtype);
    let want = reference::scalar(&p.x.values(), p.op, p.s as f64);
    let got = fetch_async(&what, &y, &p.x.shape).await?;
    let dt = p.x.dtype;
    compare(&what, &p.x.shape, &got, &want, |i| match p.op {
        ScalarOp::Add | ScalarOp::Sub | ScalarOp::RSub | ScalarOp::Mul => {
            correctly_rounded(dt, want[i])
        }
        ScalarOp::Div | ScalarOp::RDiv => out_round(dt, want[i], 2.5 * EPS32 * want[i].abs()),
        // The result is x or s exactly; only an f16 output may round s.
        ScalarOp::Max | ScalarOp::Min => out_round(dt, want[i], 0.0),
        // Not drawn here (tests/elementwise_extra.rs checks pow): exp2(e log2 x) accuracy.
        ScalarOp::Pow => out_round(dt, want[i], 64.0 * EPS32 * want[i].abs()),
    })
}

#[test]
fn scalar_f32() {
    run_async(CASES_F32, scalar_problem(DType::F32), check_scalar);
}

#[test]
fn scalar_f16() {
    require_f16(device());
    run_async(CASES_F16, scalar_problem(DType::F16), check_scalar);
}

// ---------------------------------------------------------------------------------------------
// Binary ops with broadcasting
// ---------------------------------------------------------------------------------------------

const BINARY_OPS: [BinaryOp; 6] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Max,
    BinaryOp::Min,
];

#[derive(Clone, Debug)]
pub(crate) struct BinaryProblem {
    op: BinaryOp,
    a: Operand,
    b: Operand,
}

/// Two operands whose shapes broadcast to (at most) a drawn shape: when `broadcast` is drawn,
/// each operand drops some leading dims and sets some dims to 1 (e.g. [4, 1, 3] with [5, 1]);
/// each is independently a contiguous tensor or a strided view.
pub(crate) fn binary_problem(dtype: DType, large: bool) -> impl Strategy<Value = BinaryProblem> {
    (
        prop::sample::select(&BINARY_OPS[..]),
        shapes(large),
        any::<bool>(),
        any::<u64>(),
    )
        .prop_flat_map(move |(op, shape, broadcast, shape_seed)| {
            let mut rng = Rng::new(shape_seed);
            let (sa, sb) = if broadcast {
                (
                    broadcast_source(&shape, &mut rng),
                    broadcast_source(&shape, &mut rng),
                )
            } else {
                (shape.clone(), shape)
            };
            let b_dists = match op {
                // Denominators with |b| in [0.5, 31.6].
                BinaryOp::Div => Just(Dist::AwayFromZero(-0.3, 1.5)).boxed(),
                _ => general_dist().boxed(),
            };
            (
                operand_of_shape(dtype, sa, view_kind(), general_dist()),
                operand_of_shape(dtype, sb, view_kind(), b_dists),
            )
                .prop_map(move |(a, b)| BinaryProblem { op, a, b })
        })
}

pub(crate) async fn check_binary(p: &BinaryProblem) -> Result<(), TestCaseError> {
    let (dev, plan) = case_device(&[&p.a.shape, &p.b.shape]);
    let what = format!("{:?}{plan}", p.op);
    let (a, b) = (p.a.tensor(dev), p.b.tensor(dev));
    let c = ok(&what, a.binary(&b, p.op))?;
    prop_assert_eq!(c.dtype(), p.a.dtype);
    let (want, shape) =
        reference::binary(&p.a.values(), &p.a.shape, &p.b.values(), &p.b.shape, p.op);
    let got = fetch_async(&what, &c, &shape).await?;
    let dt = p.a.dtype;
    compare(&what, &shape, &got, &want, |i| match p.op {
        BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul => correctly_rounded(dt, want[i]),
        BinaryOp::Div => out_round(dt, want[i], 2.5 * EPS32 * want[i].abs()),
        BinaryOp::Max | BinaryOp::Min => 0.0,
        BinaryOp::Pow => out_round(dt, want[i], 64.0 * EPS32 * want[i].abs()),
    })
}

#[test]
fn binary_f32() {
    run_async(CASES_F32, binary_problem(DType::F32, false), check_binary);
}

#[test]
fn binary_f16() {
    require_f16(device());
    run_async(CASES_F16, binary_problem(DType::F16, false), check_binary);
}

#[test]
fn binary_large_f32() {
    run_async(
        CASES_LARGE_F32,
        binary_problem(DType::F32, true),
        check_binary,
    );
}

#[test]
fn binary_large_f16() {
    require_f16(device());
    run_async(
        CASES_LARGE_F16,
        binary_problem(DType::F16, true),
        check_binary,
    );
}

// ---------------------------------------------------------------------------------------------
// contiguous(), reshape
// ---------------------------------------------------------------------------------------------

pub(crate) async fn check_contiguous(x: &Operand) -> Result<(), TestCaseError> {
    let (dev, _) = case_device(&[&x.shape]);
    let t = x.tensor(dev);
    let c = ok("contiguous", t.contiguous())?;
    prop_assert!(c.is_contiguous(), "contiguous() gave {:?}", c);
    // PyTorch's rule: a contiguous view (at any offset) is returned as is, sharing storage.
    if t.is_contiguous() {
        prop_assert!(
            c.shares_storage(&t) && c.layout().offset() == t.layout().offset(),
            "contiguous() copied an already packed tensor"
        );
    } else {
        prop_assert!(c.layout().offset() == 0, "a copy at {:?}", c);
    }
    let got = fetch_async("contiguous", &c, &x.shape).await?;
    compare_bits("contiguous", &x.shape, x.dtype, &got, &x.values())
}

#[test]
fn contiguous_f32() {
    run_async(
        CASES_F32,
        operand(DType::F32, small_shape(), view_kind(), general_dist()),
        check_contiguous,
    );
}

#[test]
fn contiguous_f16() {
    require_f16(device());
    run_async(
        CASES_F16,
        operand(DType::F16, small_shape(), view_kind(), general_dist()),
        check_contiguous,
    );
}

#[derive(Clone, Debug)]
pub(crate) struct ReshapeProblem {
    x: Operand,
    to: Vec<usize>,
}

/// A random shape with `n` elements: the prime factors of `n` shuffled into 0..=5 dims
/// (rank 0 only for n = 1; unused dims stay 1).
fn factor_shape(n: usize, rng: &mut Rng) -> Vec<usize> {
    let mut factors = Vec::new();
    let (mut m, mut p) = (n, 2);
    while m > 1 {
        if m % p == 0 {
            factors.push(p);
            m /= p;
        } else {
            p += 1;
        }
    }
    rng.shuffle(&mut factors);
    let rank = if n == 1 {
        rng.below(3)
    } else {
        1 + rng.below(5)
    };
    let mut shape = vec![1; rank];
    for f in factors {
        let d = rng.below(rank);
        shape[d] *= f;
    }
    shape
}

pub(crate) fn reshape_problem(dtype: DType) -> impl Strategy<Value = ReshapeProblem> {
    (
        operand(dtype, small_shape(), view_kind(), general_dist()),
        any::<u64>(),
    )
        .prop_map(|(x, seed)| {
            let to = factor_shape(x.numel(), &mut Rng::new(seed));
            ReshapeProblem { x, to }
        })
}

/// Reshape keeps the row-major element order; of contiguous data it is a view (no copy), of
/// a strided view a view where strides describe the result (PyTorch's computeStride), else a
/// contiguous copy.
pub(crate) async fn check_reshape(p: &ReshapeProblem) -> Result<(), TestCaseError> {
    let dev = device();
    let t = p.x.tensor(dev);
    let r = ok("reshape", t.reshape(&p.to))?;
    if t.is_contiguous() {
        prop_assert!(r.shares_storage(&t), "reshape of contiguous data copied");
    } else {
        prop_assert!(
            r.shares_storage(&t) || r.is_contiguous(),
            "reshape of a strided view gave {:?}",
            r
        );
    }
    let got = fetch_async("reshape", &r, &p.to).await?;
    compare_bits("reshape", &p.to, p.x.dtype, &got, &p.x.values())
}

#[test]
fn reshape_f32() {
    run_async(CASES_F32, reshape_problem(DType::F32), check_reshape);
}

#[test]
fn reshape_f16() {
    require_f16(device());
    run_async(CASES_F16, reshape_problem(DType::F16), check_reshape);
}

// ---------------------------------------------------------------------------------------------
// to_dtype
// ---------------------------------------------------------------------------------------------

/// `to_dtype` promises round to nearest even (f32 -> f16) and is exact (f16 -> f32).
pub(crate) async fn check_to_dtype(x: &Operand, to: DType) -> Result<(), TestCaseError> {
    let (dev, _) = case_device(&[&x.shape]);
    let y = ok("to_dtype", x.tensor(dev).to_dtype(to))?;
    prop_assert_eq!(y.dtype(), to);
    let want: Vec<f64> = x
        .values()
        .iter()
        .map(|&v| crate::common::round_to_dtype(to, v))
        .collect();
    let got = fetch_async("to_dtype", &y, &x.shape).await?;
    compare_bits("to_dtype", &x.shape, to, &got, &want)
}

#[test]
fn to_dtype_f32_to_f16() {
    require_f16(device());
    run_async(
        CASES_F16,
        operand(DType::F32, small_shape(), view_kind(), Just(Dist::F16Grid)),
        async |x| check_to_dtype(x, DType::F16).await,
    );
}

#[test]
fn to_dtype_f16_to_f32() {
    require_f16(device());
    run_async(
        CASES_F16,
        operand(DType::F16, small_shape(), view_kind(), general_dist()),
        async |x| check_to_dtype(x, DType::F32).await,
    );
}

// ---------------------------------------------------------------------------------------------
// zeros, full
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub(crate) struct FillProblem {
    shape: Vec<usize>,
    value: f64,
}

pub(crate) fn fill_problem() -> impl Strategy<Value = FillProblem> {
    let shapes = prop_oneof![4 => small_shape().boxed(), 1 => large_shape()];
    // Integers, and values that round when converted (exercise the conversion of `value`).
    let values = prop_oneof![(-8i32..=8).prop_map(f64::from), -6e4f64..6e4];
    (shapes, values).prop_map(|(shape, value)| FillProblem { shape, value })
}

/// `full` fills with `value` converted to the dtype; `zeros` really clears its (possibly
/// reused, previously filled) pooled buffer.
pub(crate) async fn check_fill(p: &FillProblem, dtype: DType) -> Result<(), TestCaseError> {
    let dev = device();
    let n = reference::numel(&p.shape);
    let full = ok("full", Tensor::full(dev, &p.shape, p.value, dtype))?;
    prop_assert_eq!(full.dtype(), dtype);
    let want = vec![crate::common::round_to_dtype(dtype, p.value); n];
    compare_bits(
        "full",
        &p.shape,
        dtype,
        &fetch_async("full", &full, &p.shape).await?,
        &want,
    )?;
    // Free a buffer full of non-zero data right before allocating the zeros of the same size.
    drop(ok("full", Tensor::full(dev, &p.shape, 3.0, dtype))?);
    let zeros = ok("zeros", Tensor::zeros(dev, &p.shape, dtype))?;
    prop_assert_eq!(zeros.dtype(), dtype);
    compare_bits(
        "zeros",
        &p.shape,
        dtype,
        &fetch_async("zeros", &zeros, &p.shape).await?,
        &vec![0.0; n],
    )
}

#[test]
fn zeros_full_f32() {
    run_async(CASES_F32, fill_problem(), async |p| {
        check_fill(p, DType::F32).await
    });
}

#[test]
fn zeros_full_f16() {
    require_f16(device());
    run_async(CASES_F16, fill_problem(), async |p| {
        check_fill(p, DType::F16).await
    });
}

// ---------------------------------------------------------------------------------------------
// The 2-D dispatch grid
// ---------------------------------------------------------------------------------------------

/// More than `max_compute_workgroups_per_dimension` (65535 in WebGPU's defaults and on
/// lavapipe) 256-wide workgroups: the grid becomes 2-D and every kernel must fold
/// `workgroup_id.y` into its index. Needs ~16.8M elements; one deterministic case per kernel
/// (map on a transposed view, broadcast binary, row reduction over a broadcast dim) with
/// small-integer data so every check is exact.
#[test]
fn grid_2d_f32() {
    let dev = device();
    let max = dev.limits().max_compute_workgroups_per_dimension.min(65535) as usize;
    let cols = 4096;
    let rows = max * 256 / cols + 1;
    let n = rows * cols;
    assert!(n.div_ceil(256) > max, "problem too small for a 2-D grid");
    let check = |what: &str, t: &Tensor, shape: &[usize], want: &[f64]| {
        let got = fetch(what, t, shape).unwrap_or_else(|e| panic!("{e}"));
        compare(what, shape, &got, want, |_| 0.0).unwrap_or_else(|e| panic!("{e}"));
    };
    let x = Operand::new(
        DType::F32,
        &[rows, cols],
        ViewKind::Contiguous,
        Dist::SmallInt(-8, 8),
        1,
    );
    let xs = x.values();
    let xt = x.tensor(dev);

    // Map: a strided (transposed) read with a 2-D grid.
    let y = xt.transpose(0, 1).unwrap().neg().unwrap();
    let want = reference::unary(
        &reference::permute(&xs, &[rows, cols], &[1, 0]),
        UnaryOp::Neg,
    );
    check("neg of transpose", &y, &[cols, rows], &want);

    // Binary: broadcast of a row vector.
    let b = Operand::new(
        DType::F32,
        &[cols],
        ViewKind::Contiguous,
        Dist::SmallInt(-8, 8),
        2,
    );
    let z = xt.add(&b.tensor(dev)).unwrap();
    let (want, shape) = reference::binary(&xs, &[rows, cols], &b.values(), &[cols], BinaryOp::Add);
    check("broadcast add", &z, &shape, &want);

    // Reduction, one invocation per output: sum over a stride-0 dim of length 3.
    let v = xt
        .reshape(&[rows, cols, 1])
        .unwrap()
        .broadcast_to(&[rows, cols, 3])
        .unwrap();
    let s = v.sum(-1, false).unwrap();
    let want: Vec<f64> = xs.iter().map(|&x| 3.0 * x).collect();
    check("row sum", &s, &[rows, cols], &want);
}
