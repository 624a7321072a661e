//! The nn layers against PyTorch's modules: state dicts (state.rs), layers and their
//! constructors (layers.rs), normalization (norm.rs), recurrent layers and cells (rnn.rs),
//! `#[derive(Module)]` models and the containers (derive.rs). Shared here: the device and a
//! small CNN.
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

mod derive;
mod derive_more;
mod layers;
mod norm;
mod rnn;
mod state;

use wgtensor::io::{load_safetensors, save_safetensors};
use wgtensor::nn::{self, Forward, Module};
use wgtensor::ops::{conv2d, AvgPool2dOptions, MaxPool2dOptions};
use wgtensor::{DType, Device, Tensor};

fn dev() -> &'static Device {
    static DEV: std::sync::OnceLock<Device> = std::sync::OnceLock::new();
    DEV.get_or_init(|| Device::new().expect("device"))
}

fn vals(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

fn cnn() -> nn::Sequential {
    let d = dev();
    nn::Sequential::new()
        .push(
            nn::Conv2d::new(
                d,
                1,
                4,
                3,
                nn::Conv2dConfig {
                    padding: 1,
                    ..Default::default()
                },
            )
            .unwrap(),
        )
        .push(nn::BatchNorm2d::new(d, 4).unwrap())
        .push(nn::ReLU)
        .push(nn::MaxPool2d(MaxPool2dOptions::new(2)))
        .push(
            nn::Conv2d::new(
                d,
                4,
                4,
                3,
                nn::Conv2dConfig {
                    padding: 1,
                    groups: 4,
                    bias: false,
                    ..Default::default()
                },
            )
            .unwrap(),
        )
        .push(nn::AvgPool2d(AvgPool2dOptions::new(2)))
        .push(nn::Flatten)
        .push(nn::Dropout::new(0.5))
        .push(nn::Linear::new(d, 4 * 2 * 2, 3, true).unwrap())
}
