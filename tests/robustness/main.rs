//! Adversarial inputs: empty tensors with PyTorch's results, NaN propagation, sizes at the u32
//! limits, memory that stays bounded and a budget that fails cleanly, absurd options, and a
//! fuzzed sweep of every public op that must return `Ok` with the right answer or an `Err`
//! naming the op, never panic or hang, with the device usable after every error.
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

#[path = "../common/mod.rs"]
mod common;
mod division;
mod donation;
mod empty;
mod fuzz;
mod hazards;
mod indices;
mod int_scatter;
mod limits;
mod memory;
mod model_fuzz;
mod nan;
mod probes;
mod rnn;
mod scalars;
mod sweep;
mod uploads;
mod versions;
mod windows;

use wgtensor::{Device, Error, Tensor};

pub fn dev() -> &'static Device {
    static DEV: std::sync::OnceLock<Device> = std::sync::OnceLock::new();
    DEV.get_or_init(|| Device::new().expect("device"))
}

/// A tensor of `shape` holding 0.5, 1.5, 2.5, ... (distinct, exact in f16 too).
pub fn ramp(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|i| i as f32 + 0.5).collect();
    Tensor::from_slice(dev(), &v, shape).unwrap()
}

pub fn vals(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

/// Asserts `e`'s message names `op` (every error reads `op: ...`).
pub fn names_op(e: &Error, op: &str) {
    let m = e.to_string();
    assert!(
        m.starts_with(&format!("{op}:")),
        "error {m:?} does not name {op}"
    );
}

/// The device still computes right after an error.
pub fn still_works(d: &Device) {
    let a = Tensor::from_slice(d, &[1.0f32, 2.0, 3.0], &[3]).unwrap();
    assert_eq!(vals(&a.mul_scalar(2.0).unwrap()), vec![2.0, 4.0, 6.0]);
}
