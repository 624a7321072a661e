//! Autograd in the browser: the native suite's cases (tests/autograd), each built from a fixed
//! seed (the graph, its backward and the f64 reference run synchronously) and verified with
//! awaited readbacks. f16 cases run only when the adapter has SHADER_F16.

use proptest::test_runner::TestCaseError;
use wasm_bindgen_test::{console_log, wasm_bindgen_test};

use crate::common::init_devices;
use crate::{conv, graphs, ops};

/// Builds and verifies `n` cases of `case` (f16 when asked); panics naming the failing seed.
async fn cases(name: &str, n: u64, f16: bool, case: impl Fn(u64) -> Result<(), TestCaseError>) {
    for i in 0..n {
        let seed = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5eed;
        let built = if f16 {
            ops::build_f16(&case, seed)
        } else {
            ops::build(&case, seed)
        };
        let r = match built {
            Ok(()) => ops::verify_async().await,
            Err(e) => Err(e),
        };
        if let Err(e) = r {
            panic!("{name}: seed {seed} failed: {e}");
        }
    }
    console_log!("{name}: {n} cases passed");
}

#[wasm_bindgen_test]
async fn autograd_f32() {
    init_devices().await;
    cases("unary_grads", 6, false, ops::unary_case).await;
    cases("scalar_grads", 6, false, ops::scalar_case).await;
    cases("binary_grads", 6, false, ops::binary_case).await;
    cases("reduce_grads", 6, false, ops::reduce_case).await;
    cases("view_grads", 12, false, ops::view_case).await;
    cases("gemm_grads", 12, false, ops::gemm_case).await;
    cases("matmul_grads", 6, false, ops::matmul_case).await;
    cases("conv2d_grads", 8, false, |s| conv::conv_case(s, false)).await;
    cases("conv1d_grads", 4, false, |s| conv::conv_case(s, true)).await;
    cases("conv_transpose2d_grads", 8, false, conv::transpose_case).await;
    cases("random_graphs", 12, false, graphs::graph_case).await;
}

#[wasm_bindgen_test]
async fn autograd_f16() {
    if !crate::conformance::f16_or_skip("autograd_f16").await {
        return;
    }
    cases("unary_grads_f16", 4, true, ops::unary_case).await;
    cases("binary_grads_f16", 4, true, ops::binary_case).await;
    cases("gemm_grads_f16", 6, true, ops::gemm_case).await;
    cases("conv2d_grads_f16", 4, true, |s| conv::conv_case(s, false)).await;
}
