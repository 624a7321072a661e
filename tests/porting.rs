//! The porting guide's end-to-end check (docs/PORTING.md): a PyTorch CNN (conv + batch norm
//! whose running statistics saw three training batches, max pool, a depthwise conv, a linear
//! classifier) written as a `#[derive(Module)]` struct, loaded strictly from the state dict
//! PyTorch saved (tests/fixtures/porting_cnn.safetensors, made by
//! tests/fixtures/make_porting_cnn.py), gives PyTorch's eval-mode logits for PyTorch's input.
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

use wgtensor::nn::{self, Forward, Module};
use wgtensor::ops::{Conv2dOptions, Padding};
use wgtensor::{io, Device, Result, Tensor};

#[derive(Module)]
struct Net {
    features: nn::Sequential,
    classifier: nn::Linear,
}

impl Net {
    fn new(dev: &Device) -> Result<Net> {
        let same = nn::Conv2dConfig {
            padding: 1,
            ..Default::default()
        };
        let depthwise = Conv2dOptions {
            padding: Padding::uniform(1),
            groups: 8,
            ..Default::default()
        };
        Ok(Net {
            features: nn::Sequential::new()
                .push(nn::Conv2d::new(dev, 3, 8, 3, same)?)
                .push(nn::BatchNorm2d::new(dev, 8)?)
                .push(nn::ReLU)
                .push(nn::MaxPool2d::new(2))
                .push(nn::Conv2d::with_options(
                    dev,
                    8,
                    8,
                    [3, 3],
                    depthwise,
                    false,
                )?)
                .push(nn::ReLU),
            classifier: nn::Linear::new(dev, 8 * 4 * 4, 5, true)?,
        })
    }
}

impl Forward for Net {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.classifier
            .forward(&self.features.forward(x)?.flatten(1, -1)?)
    }
}

#[test]
fn a_ported_pytorch_cnn_gives_pytorch_logits() {
    let dev = Device::new().unwrap();
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/porting_cnn.safetensors"
    );
    let mut file = io::load_safetensors_file(&dev, path).unwrap();
    let x = file.remove("__input__").unwrap();
    let want = file.remove("__logits__").unwrap().to_vec::<f32>().unwrap();
    let mut net = Net::new(&dev).unwrap();
    // Strict: every key of PyTorch's state dict is one of ours and the other way round.
    net.load_state_dict(&file, true).unwrap();
    net.eval();
    let got = net.forward(&x).unwrap();
    assert_eq!(got.shape(), &[2, 5]);
    let got = got.to_vec::<f32>().unwrap();
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!((g - w).abs() <= 1e-5, "logit {i}: {g} vs PyTorch's {w}");
    }
    // The batch norm's counter came along with the statistics.
    let sd = net.state_dict();
    let (_, nbt) = sd
        .iter()
        .find(|(n, _)| n == "features.1.num_batches_tracked")
        .unwrap();
    assert_eq!(nbt.item().unwrap(), 3.0);
}
