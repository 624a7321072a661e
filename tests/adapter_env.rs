//! Adapter selection honours WGPU_ADAPTER_NAME. The variable is set only in child processes
//! (the test binary re-running itself): no test mutates its own process's environment, which
//! is undefined behaviour while other threads read it (`set_var` is `unsafe` in Rust 2024).
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

use wgtensor::{Device, Error};

/// Set in the child process, with the value the parent expects the adapter name to satisfy.
const CHILD_VAR: &str = "WGTENSOR_TEST_CHILD";

/// Re-runs `test` of this binary with WGPU_ADAPTER_NAME = `name` and `expect` passed along.
fn run_in_child(test: &str, name: &str, expect: &str) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--test-threads=1", "--nocapture"])
        .env(CHILD_VAR, expect)
        .env("WGPU_ADAPTER_NAME", name)
        .output()
        .expect("the test binary re-runs itself");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child run of {test} failed:\n{text}");
    assert!(text.contains("1 passed"), "the child ran no test:\n{text}");
}

#[test]
fn unknown_adapter_name_is_an_error_naming_it() {
    const NAME: &str = "unknown_adapter_name_is_an_error_naming_it";
    let Some(expect) = std::env::var_os(CHILD_VAR) else {
        run_in_child(NAME, "no-such-adapter-xyz", "error");
        return;
    };
    assert_eq!(expect, "error");
    let e = Device::new().unwrap_err();
    assert!(matches!(e, Error::NoAdapter(_)), "{e:?}");
    assert!(e.to_string().contains("no-such-adapter-xyz"), "{e}");
    // The message says what to install and which variables pick an adapter.
    assert!(e.to_string().contains("mesa-vulkan-drivers"), "{e}");
    assert!(e.to_string().contains("WGPU_BACKEND"), "{e}");
}

/// A substring of the real adapter's name, in any case, selects it.
#[test]
fn adapter_name_substring_selects_the_adapter() {
    const NAME: &str = "adapter_name_substring_selects_the_adapter";
    let Some(expect) = std::env::var_os(CHILD_VAR) else {
        let name = Device::new().unwrap().adapter_info().name.clone();
        let part: String = name.chars().take(4).collect::<String>().to_uppercase();
        run_in_child(NAME, &part, &name);
        return;
    };
    let d = Device::new().unwrap();
    assert_eq!(d.adapter_info().name, expect.to_string_lossy());
}
