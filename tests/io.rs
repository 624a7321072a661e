//! safetensors IO: a file laid out as a PyTorch export (module-prefixed names, f32 / f16 /
//! bf16 / int64 entries) loads with the right values, saves and reloads bit-exactly, and
//! load_state_dict copies into existing parameters in place, strict and not.
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

use std::collections::HashMap;

use safetensors::tensor::TensorView;
use safetensors::Dtype;
use wgtensor::io::{
    load_safetensors, load_safetensors_file, load_state_dict, save_safetensors,
    save_safetensors_file,
};
use wgtensor::{f16, DType, Device, Tensor};

fn dev() -> &'static Device {
    static DEV: std::sync::OnceLock<Device> = std::sync::OnceLock::new();
    DEV.get_or_init(|| Device::new().expect("device"))
}

/// What `torch.save`-then-`safetensors.torch.save_file` of a small CNN gives: prefixed names,
/// f32 conv weights, an f16 linear layer, bf16 biases and an int64 counter.
fn pytorch_like_file() -> Vec<u8> {
    let conv_w: Vec<f32> = (0..8 * 9).map(|i| i as f32 * 0.01 - 0.3).collect();
    let lin_w: Vec<f16> = (0..6).map(|i| f16::from_f32(i as f32 * 0.5)).collect();
    let bias: Vec<half::bf16> = [1.5f32, -2.25]
        .iter()
        .map(|&v| half::bf16::from_f32(v))
        .collect();
    let rm: Vec<f32> = vec![0.1; 8];
    let nbt: i64 = 123;
    let tensors = [
        (
            "features.0.weight",
            Dtype::F32,
            vec![8, 1, 3, 3],
            bytemuck::cast_slice(&conv_w).to_vec(),
        ),
        (
            "classifier.weight",
            Dtype::F16,
            vec![2, 3],
            bytemuck::cast_slice(&lin_w).to_vec(),
        ),
        (
            "classifier.bias",
            Dtype::BF16,
            vec![2],
            bytemuck::cast_slice(&bias).to_vec(),
        ),
        (
            "bn1.running_mean",
            Dtype::F32,
            vec![8],
            bytemuck::cast_slice(&rm).to_vec(),
        ),
        (
            "bn1.num_batches_tracked",
            Dtype::I64,
            vec![],
            nbt.to_le_bytes().to_vec(),
        ),
    ];
    let views: Vec<(String, TensorView)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.to_string(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize(views, None).unwrap()
}

#[test]
fn loads_a_pytorch_export() {
    let m = load_safetensors(dev(), &pytorch_like_file()).unwrap();
    assert_eq!(m.len(), 5);
    let w = &m["features.0.weight"];
    assert_eq!((w.shape(), w.dtype()), (&[8, 1, 3, 3][..], DType::F32));
    assert_eq!(w.to_vec::<f32>().unwrap()[10], 10.0 * 0.01 - 0.3);
    let l = &m["classifier.weight"];
    assert_eq!(l.dtype(), DType::F16);
    assert_eq!(l.to_vec::<f16>().unwrap()[5], f16::from_f32(2.5));
    // bf16 converts to f32 on load.
    assert_eq!(
        m["classifier.bias"].to_vec::<f32>().unwrap(),
        vec![1.5, -2.25]
    );
    // int64 loads as the device's i32.
    let n = &m["bn1.num_batches_tracked"];
    assert_eq!(
        (n.shape(), n.dtype(), n.to_vec::<i32>().unwrap()),
        (&[][..], DType::I32, vec![123])
    );
    // Garbage is an error naming the op, not a panic.
    let e = load_safetensors(dev(), b"not a safetensors file").unwrap_err();
    assert!(e.to_string().starts_with("load_safetensors:"), "{e}");
    let e = load_safetensors_file(dev(), "/nonexistent/x.safetensors").unwrap_err();
    assert!(e.to_string().contains("/nonexistent/x.safetensors"), "{e}");
}

/// Class labels exported from PyTorch are int64: they load as i32 (and drive the class-index
/// losses directly); values past the i32 range are an error naming the tensor; i32 tensors
/// save and reload as I32.
#[test]
fn int64_labels_load_as_i32() {
    let file = |vals: &[i64]| {
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let view = TensorView::new(Dtype::I64, vec![vals.len()], &bytes).unwrap();
        safetensors::serialize(vec![("labels".to_string(), view)], None).unwrap()
    };
    let m = load_safetensors(dev(), &file(&[3, 0, -1, 2_000_000_000])).unwrap();
    let l = &m["labels"];
    assert_eq!(l.dtype(), DType::I32);
    assert_eq!(l.to_vec::<i32>().unwrap(), vec![3, 0, -1, 2_000_000_000]);
    let e = load_safetensors(dev(), &file(&[1, 1 << 40])).unwrap_err();
    assert!(
        e.to_string().contains("labels") && e.to_string().contains("1099511627776"),
        "{e}"
    );
    let bytes = wgtensor::io::save_safetensors(&[("labels", l)]).unwrap();
    let back = load_safetensors(dev(), &bytes).unwrap();
    assert_eq!(
        back["labels"].to_vec::<i32>().unwrap(),
        l.to_vec::<i32>().unwrap()
    );
}

#[test]
fn save_and_reload_is_bit_exact() {
    let a = Tensor::from_slice(dev(), &[1.0f32, -0.0, 3.5e-8, f32::MAX], &[2, 2]).unwrap();
    let b = Tensor::from_slice(dev(), &[f16::from_f32(0.1), f16::from_f32(-7.0)], &[2]).unwrap();
    // A strided view is saved as its logical (row-major) values.
    let at = a.transpose(0, 1).unwrap();
    let bytes = save_safetensors(&[("a", &a), ("b", &b), ("at", &at)]).unwrap();
    let m = load_safetensors(dev(), &bytes).unwrap();
    assert_eq!(m["a"].to_vec::<f32>().unwrap(), a.to_vec::<f32>().unwrap());
    assert_eq!(m["b"].to_vec::<f16>().unwrap(), b.to_vec::<f16>().unwrap());
    assert_eq!(
        m["at"].to_vec::<f32>().unwrap(),
        at.contiguous().unwrap().to_vec::<f32>().unwrap()
    );
    let path = std::env::temp_dir().join(format!("wgtensor-io-{}.safetensors", std::process::id()));
    save_safetensors_file(&path, &[("a", &a)]).unwrap();
    let m = load_safetensors_file(dev(), &path).unwrap();
    assert_eq!(m["a"].to_vec::<f32>().unwrap(), a.to_vec::<f32>().unwrap());
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn load_state_dict_copies_in_place() {
    let src = load_safetensors(dev(), &pytorch_like_file()).unwrap();
    let w = Tensor::zeros(dev(), &[8, 1, 3, 3], DType::F32).unwrap();
    let view = w.narrow(0, 0, 1).unwrap(); // shares w's storage: sees the update
    let l = Tensor::zeros(dev(), &[2, 3], DType::F32).unwrap(); // f16 in the file: converted
    let targets = [("features.0.weight", &w), ("classifier.weight", &l)];
    // Strict: the file's extra keys are an error naming them, and nothing is copied.
    let e = load_state_dict(&targets, &src, true).unwrap_err();
    assert!(
        e.to_string().contains("unexpected keys") && e.to_string().contains("bn1.running_mean"),
        "{e}"
    );
    assert!(w.to_vec::<f32>().unwrap().iter().all(|&v| v == 0.0));
    let report = load_state_dict(&targets, &src, false).unwrap();
    assert_eq!(report.missing, Vec::<String>::new());
    assert_eq!(report.unexpected.len(), 3);
    assert_eq!(
        w.to_vec::<f32>().unwrap(),
        src["features.0.weight"].to_vec::<f32>().unwrap()
    );
    assert_eq!(view.contiguous().unwrap().to_vec::<f32>().unwrap()[0], -0.3);
    assert_eq!(l.to_vec::<f32>().unwrap()[5], 2.5);
    // A missing key and a mis-shaped one.
    let extra = Tensor::zeros(dev(), &[3], DType::F32).unwrap();
    let r = load_state_dict(&[("head.bias", &extra)], &src, false).unwrap();
    assert_eq!(r.missing, vec!["head.bias".to_string()]);
    let wrong = Tensor::zeros(dev(), &[8, 9], DType::F32).unwrap();
    let e = load_state_dict(&[("features.0.weight", &wrong)], &src, false).unwrap_err();
    assert!(
        e.to_string()
            .contains("size mismatch for features.0.weight"),
        "{e}"
    );
    let _ = HashMap::<String, Tensor>::new();
}
