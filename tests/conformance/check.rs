//! Comparing device results with the f64 reference: ulp helpers, the rounding model of the
//! output dtype, and an element-by-element comparison that reports the first mismatches.
//!
//! Error model used throughout: kernels compute in f32 registers and round the result once to
//! the output dtype. An op's f32 error bound is stated per op (from the WGSL accuracy table or
//! an analysis of the kernel's formula); [`out_round`] then adds the final conversion.

use proptest::test_runner::TestCaseError;
use wgtensor::{f16, DType, Tensor};

use crate::common::{self, reference};

/// f32 machine epsilon 2^-23: the spacing at 1.0, and an upper bound of ulp(y)/|y|.
pub const EPS32: f64 = f32::EPSILON as f64;
/// Smallest normal f32 / f16. WGSL lets implementations flush subnormals to zero, so results
/// below these may come back as 0.
pub const MIN_NORMAL32: f64 = f32::MIN_POSITIVE as f64;
pub const MIN_NORMAL16: f64 = 6.103_515_625e-5;

/// Binary exponent of a finite non-zero f64 (floor(log2|x|)), exact.
fn exponent(x: f64) -> i32 {
    let bits = x.abs().to_bits();
    let e = ((bits >> 52) & 0x7ff) as i32;
    if e == 0 {
        // Subnormal f64: far below anything the tests produce; treat as the minimum.
        -1023
    } else {
        e - 1023
    }
}

/// Spacing of `dtype` values in the binade of |x| (subnormal spacing below the normal range).
pub fn ulp(dtype: DType, x: f64) -> f64 {
    let (mant_bits, min_exp) = match dtype {
        DType::F32 | DType::I32 => (23, -126),
        DType::F16 => (10, -14),
    };
    let e = if x == 0.0 {
        min_exp
    } else {
        exponent(x).max(min_exp)
    };
    2f64.powi(e - mant_bits)
}

/// True when `x` is exactly a value of `dtype`.
pub fn representable(dtype: DType, x: f64) -> bool {
    common::round_to_dtype(dtype, x) == x
}

/// Error bound of a result whose f32 value is within `err32` of the exact `want`, after the
/// final conversion to `dtype`:
/// - f32 output: `err32` (the bound already includes the f32 rounding);
/// - f16 output: the f32 value is converted with at most one f16 ulp of error (WGSL only
///   promises one of the two neighbouring values); no error when the result is exact and
///   representable;
/// - either: results in the subnormal range may be flushed to zero (allowed by WGSL).
pub fn out_round(dtype: DType, want: f64, err32: f64) -> f64 {
    let mut tol = match dtype {
        DType::F32 | DType::I32 => err32,
        DType::F16 if err32 == 0.0 && representable(DType::F16, want) => 0.0,
        DType::F16 => err32 + ulp(DType::F16, want.abs() + err32),
    };
    let min_normal = match dtype {
        DType::F32 | DType::I32 => MIN_NORMAL32,
        DType::F16 => MIN_NORMAL16,
    };
    if want != 0.0 && want.abs() < min_normal {
        tol = tol.max(min_normal);
    }
    tol
}

/// Bound for a correctly rounded f32 op (WGSL: `+ - *` are correctly rounded): exact when the
/// true result is an f32 (so small-integer inputs give exact equality), else half an ulp.
pub fn correctly_rounded(dtype: DType, want: f64) -> f64 {
    let err32 = if representable(DType::F32, want) {
        0.0
    } else {
        0.5 * ulp(DType::F32, want)
    };
    out_round(dtype, want, err32)
}

/// Reads `t` back and checks its shape.
pub async fn fetch_async(
    what: &str,
    t: &Tensor,
    shape: &[usize],
) -> Result<Vec<f64>, TestCaseError> {
    if t.shape() != shape {
        return Err(TestCaseError::fail(format!(
            "{what}: result shape {:?}, reference shape {shape:?}",
            t.shape()
        )));
    }
    common::download_async(t)
        .await
        .map_err(|e| TestCaseError::fail(format!("{what}: readback failed: {e}")))
}

/// [`fetch_async`], blocking (native).
#[cfg(not(target_arch = "wasm32"))]
pub fn fetch(what: &str, t: &Tensor, shape: &[usize]) -> Result<Vec<f64>, TestCaseError> {
    pollster::block_on(fetch_async(what, t, shape))
}

/// Turns a library error into a test failure naming the step.
pub fn ok<T>(what: &str, r: wgtensor::Result<T>) -> Result<T, TestCaseError> {
    r.map_err(|e| TestCaseError::fail(format!("{what}: {e}")))
}

/// Checks `|got[i] - want[i]| <= tol(i)` for every element (NaN must match NaN, infinities
/// must match exactly). Reports the number of mismatches and the first few with their
/// multi-index in `shape`.
pub fn compare(
    what: &str,
    shape: &[usize],
    got: &[f64],
    want: &[f64],
    tol: impl Fn(usize) -> f64,
) -> Result<(), TestCaseError> {
    if got.len() != want.len() {
        return Err(TestCaseError::fail(format!(
            "{what}: {} values read back, reference has {}",
            got.len(),
            want.len()
        )));
    }
    let mut bad = Vec::new();
    let mut count = 0usize;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let t = tol(i);
        let pass = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= t
        };
        if !pass {
            count += 1;
            if bad.len() < 5 {
                bad.push(format!(
                    "  at {:?}: got {g:e}, want {w:e}, |diff| {:e} > tol {t:e}",
                    reference::unravel(i, shape),
                    (g - w).abs()
                ));
            }
        }
    }
    if count == 0 {
        Ok(())
    } else {
        Err(TestCaseError::fail(format!(
            "{what}: {count} of {} elements out of tolerance\n{}",
            got.len(),
            bad.join("\n")
        )))
    }
}

/// Bitwise equality (also tells -0.0 from 0.0): for copies and conversions.
pub fn compare_bits(
    what: &str,
    shape: &[usize],
    dtype: DType,
    got: &[f64],
    want: &[f64],
) -> Result<(), TestCaseError> {
    let bits = |v: f64| match dtype {
        DType::F32 | DType::I32 => (v as f32).to_bits() as u64,
        DType::F16 => f16::from_f64(v).to_bits() as u64,
    };
    if got.len() != want.len() {
        return Err(TestCaseError::fail(format!(
            "{what}: {} values read back, reference has {}",
            got.len(),
            want.len()
        )));
    }
    let bad: Vec<usize> = (0..got.len())
        .filter(|&i| bits(got[i]) != bits(want[i]))
        .collect();
    if bad.is_empty() {
        return Ok(());
    }
    let first: Vec<String> = bad
        .iter()
        .take(5)
        .map(|&i| {
            format!(
                "  at {:?}: got {:e}, want {:e}",
                reference::unravel(i, shape),
                got[i],
                want[i]
            )
        })
        .collect();
    Err(TestCaseError::fail(format!(
        "{what}: {} of {} elements differ bitwise\n{}",
        bad.len(),
        got.len(),
        first.join("\n")
    )))
}
