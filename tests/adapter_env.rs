//! Adapter selection honours WGPU_ADAPTER_NAME (own test binary: it sets the environment).
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

use wgtensor::{Device, Error};

#[test]
fn unknown_adapter_name_is_an_error_naming_it() {
    std::env::set_var("WGPU_ADAPTER_NAME", "no-such-adapter-xyz");
    let e = Device::new().unwrap_err();
    assert!(matches!(e, Error::NoAdapter(_)), "{e:?}");
    assert!(e.to_string().contains("no-such-adapter-xyz"), "{e}");
    // The message says what to install and which variables pick an adapter.
    assert!(e.to_string().contains("mesa-vulkan-drivers"), "{e}");
    assert!(e.to_string().contains("WGPU_BACKEND"), "{e}");

    // A substring of the real adapter's name selects it.
    std::env::remove_var("WGPU_ADAPTER_NAME");
    let name = Device::new().unwrap().adapter_info().name.clone();
    let part: String = name.chars().take(4).collect::<String>().to_uppercase();
    std::env::set_var("WGPU_ADAPTER_NAME", &part);
    let d = Device::new().unwrap();
    assert_eq!(d.adapter_info().name, name);
}
