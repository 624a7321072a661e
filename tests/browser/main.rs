//! Browser tests (wasm32 + WebGPU): `wasm-bindgen-test-runner` runs them in headless Chromium
//! (scripts/test-browser.sh sets it up; `cargo test --target wasm32-unknown-unknown --test
//! browser`). On native this binary is empty: the full suites run there as usual.
//!
//! - `conformance`: a fixed-seed subset of the conformance cases of every op family, generated
//!   by the same proptest strategies and checked by the same code against the same pure-Rust
//!   f64 references as natively (the conformance modules are included below), with the
//!   readbacks awaited instead of blocking.
//!   Layer / group / RMS norm and scaled-dot-product attention (forward and backward through
//!   autograd).
//!   Softmax, the losses, pooling (with indices and backward), the Philox streams (bit-exact: the same seed
//!   gives the same numbers here as natively) and the index ops (argmax, comparisons,
//!   gather/index_select with their backward, class-index cross_entropy with its gradient) are
//!   included the same way.
//! - `runtime`: the in-flight cap over a 10k-op loop, and errors surfacing as `Err` in the
//!   browser.
//! - `autograd`: fixed seeds of the native autograd cases (tests/autograd: every elementwise,
//!   view, reduction, GEMM and convolution gradient against its f64 reference, and random
//!   graphs against finite differences), the gradients read back with awaits.
//!
//! No libtest harness (`harness = false`): wasm-bindgen-test exports every test for the
//! runner, and the native `#[test]` fns of the included modules compile out, which is why the
//! modules allow dead code (their native-only helpers and case counts).

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

#[cfg(target_arch = "wasm32")]
#[path = "../common/mod.rs"]
mod common; // allows dead code itself

#[cfg(target_arch = "wasm32")]
#[allow(dead_code, unused_imports)]
#[path = "../conformance/check.rs"]
mod check;

#[cfg(target_arch = "wasm32")]
#[allow(dead_code, unused_imports)]
#[path = "../conformance/strategies.rs"]
mod strategies;

#[cfg(target_arch = "wasm32")]
#[allow(dead_code, unused_imports)]
#[path = "../conformance/elementwise.rs"]
mod elementwise;

#[cfg(target_arch = "wasm32")]
#[allow(dead_code, unused_imports)]
#[path = "../conformance/reduce.rs"]
mod reduce;

#[cfg(target_arch = "wasm32")]
#[allow(dead_code, unused_imports)]
#[path = "../conformance/gemm.rs"]
mod gemm;

#[cfg(target_arch = "wasm32")]
#[allow(dead_code, unused_imports)]
#[path = "../conformance/conv_check.rs"]
mod conv_check;

#[cfg(target_arch = "wasm32")]
#[allow(dead_code, unused_imports)]
#[path = "../conformance/batchnorm.rs"]
mod batchnorm;

#[cfg(target_arch = "wasm32")]
#[allow(dead_code, unused_imports)]
#[path = "../conformance/rnn.rs"]
mod rnn;

#[cfg(target_arch = "wasm32")]
#[allow(dead_code, unused_imports)]
#[path = "../conformance/softmax.rs"]
mod softmax;

#[cfg(target_arch = "wasm32")]
#[allow(dead_code, unused_imports)]
#[path = "../conformance/norm.rs"]
mod norm;

#[cfg(target_arch = "wasm32")]
#[allow(dead_code, unused_imports)]
#[path = "../conformance/attention.rs"]
mod attention;

#[cfg(target_arch = "wasm32")]
#[allow(dead_code, unused_imports)]
#[path = "../conformance/index_ops.rs"]
mod index_ops;

#[cfg(target_arch = "wasm32")]
#[allow(dead_code, unused_imports)]
#[path = "../conformance/pool.rs"]
mod pool;

#[cfg(target_arch = "wasm32")]
#[allow(dead_code, unused_imports)]
#[path = "../conformance/losses.rs"]
mod losses;

#[cfg(target_arch = "wasm32")]
#[allow(dead_code, unused_imports)]
#[path = "../conformance/random.rs"]
mod random;

// Autograd: the native suite's case builders (tests/autograd), verified with awaited readbacks.
#[cfg(target_arch = "wasm32")]
#[allow(dead_code, unused_imports)]
#[path = "../autograd/grad_ref.rs"]
mod grad_ref;

#[cfg(target_arch = "wasm32")]
#[allow(dead_code, unused_imports)]
#[path = "../autograd/ops.rs"]
mod ops;

#[cfg(target_arch = "wasm32")]
#[allow(dead_code, unused_imports)]
#[path = "../autograd/conv.rs"]
mod conv;

#[cfg(target_arch = "wasm32")]
#[allow(dead_code, unused_imports)]
#[path = "../autograd/graphs.rs"]
mod graphs;

#[cfg(target_arch = "wasm32")]
mod autograd;
#[cfg(target_arch = "wasm32")]
mod conformance;
#[cfg(target_arch = "wasm32")]
mod runner;
#[cfg(target_arch = "wasm32")]
mod runtime;

fn main() {
    #[cfg(not(target_arch = "wasm32"))]
    println!(
        "browser tests run on wasm32 only: scripts/test-browser.sh \
         (cargo test --target wasm32-unknown-unknown --test browser)"
    );
}
