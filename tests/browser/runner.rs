//! Runs a conformance strategy in the browser. proptest's runner calls the test synchronously,
//! but readback in the browser is async, so cases are generated here with a fixed-seed
//! deterministic runner (the same cases on every run) and each one is awaited. A failure is
//! shrunk the way proptest does it (simplify while it fails, complicate when it passes) and
//! reported with the minimal failing problem.

use std::fmt::Debug;

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{TestCaseError, TestRunner};
use wasm_bindgen_test::console_log;

/// Shrinking steps at most (each one is a GPU run).
const MAX_SHRINK_ITERS: u32 = 256;

/// Checks `cases` deterministic cases of `strategy` with `test`; panics with the minimal
/// failing problem.
pub async fn check_cases<S>(
    name: &str,
    cases: u32,
    strategy: S,
    test: impl AsyncFn(&S::Value) -> Result<(), TestCaseError>,
) where
    S: Strategy,
    S::Value: Debug,
{
    let mut runner = TestRunner::deterministic();
    for case in 0..cases {
        let mut tree = strategy
            .new_tree(&mut runner)
            .unwrap_or_else(|e| panic!("{name}: generating case {case}: {e}"));
        let value = tree.current();
        let Err(err) = test(&value).await else {
            continue;
        };
        let first_err = err.to_string();
        let (mut minimal, mut minimal_err) = (value, err);
        let mut iters = 0;
        if tree.simplify() {
            while iters < MAX_SHRINK_ITERS {
                iters += 1;
                let v = tree.current();
                match test(&v).await {
                    Err(e) => {
                        (minimal, minimal_err) = (v, e);
                        if !tree.simplify() {
                            break;
                        }
                    }
                    Ok(()) => {
                        if !tree.complicate() {
                            break;
                        }
                    }
                }
            }
        }
        panic!(
            "{name}: case {case} of {cases} failed: {first_err}\n\
             minimal failing input ({iters} shrink steps): {minimal:#?}\n\
             which fails with: {minimal_err}"
        );
    }
    console_log!("{name}: {cases} cases passed");
}
