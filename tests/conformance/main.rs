//! Property-based conformance suite: every kernel against the f64 reference in
//! tests/common/reference.rs, on generated shapes and strided views (see docs/ARCHITECTURE.md, "Testing strategy").
//!
//! f16 tests have `f16` in their names and fail on adapters without SHADER_F16; run with
//! `--skip f16` there (scripts/test.sh does).
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

#[path = "../common/mod.rs"]
mod common;

mod argext;
mod attention;
mod batchnorm;
mod check;
mod conv;
mod conv_check;
mod conv_grad;
mod conv_large;
mod conv_wg;
mod elementwise;
mod gemm;
mod index_ops;
mod losses;
mod norm;
mod pool;
mod random;
mod reduce;
mod rnn;
mod softmax;
mod strategies;

/// The reference's erf against published values (Abramowitz & Stegun table 7.1 / high-precision
/// libraries) and its two branches against each other where they meet: the GELU reference
/// must be far more accurate than the tolerance it is used with.
#[test]
fn reference_erf() {
    use common::reference::{erf, erfc, gelu};
    let table = [
        (0.0, 0.0),
        (0.1, 0.112_462_916_018_284_9),
        (0.5, 0.520_499_877_813_046_5),
        (1.0, 0.842_700_792_949_714_9),
        (1.5, 0.966_105_146_475_310_7),
        (2.0, 0.995_322_265_018_952_7),
        (3.0, 0.999_977_909_503_001_4),
    ];
    for (x, want) in table {
        assert!(
            (erf(x) - want).abs() <= 1e-15,
            "erf({x}) = {}, want {want}",
            erf(x)
        );
        assert!((erf(-x) + want).abs() <= 1e-15, "erf(-{x})");
    }
    let tails = [
        (2.0, 4.677_734_981_047_266e-3),
        (3.0, 2.209_049_699_858_544e-5),
        (5.0, 1.537_459_794_428_035e-12),
    ];
    for (x, want) in tails {
        assert!(
            ((erfc(x) - want) / want).abs() <= 1e-13,
            "erfc({x}) = {}, want {want}",
            erfc(x)
        );
    }
    for x in [1.999_999, 2.0, 2.000_001] {
        assert!((erf(x) + erfc(x) - 1.0).abs() <= 1e-15, "erf + erfc at {x}");
    }
    // GELU(1) = 0.5 (1 + erf(1/sqrt 2)) = 0.841344746068543.
    assert!((gelu(1.0) - 0.841_344_746_068_543).abs() <= 1e-14);
    assert!((gelu(-1.0) + 0.158_655_253_931_457).abs() <= 1e-14);
}
