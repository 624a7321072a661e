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

/// A safetensors file whose header length reads as a pickle's first bytes (0x80, then 2..=5:
/// headers of 640, 896, 1152, 1408 bytes, as train_cnn's state dict has) loads: it is not
/// taken for a torch.save file.
#[test]
fn headers_that_start_like_a_pickle_load() {
    for len in [0x280u64, 0x380, 0x480, 0x580] {
        let mut json = r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#.to_string();
        while (json.len() as u64) < len {
            json.push(' ');
        }
        let mut bytes = len.to_le_bytes().to_vec();
        bytes.extend(json.as_bytes());
        bytes.extend(1.5f32.to_le_bytes());
        let m = load_safetensors(dev(), &bytes).unwrap();
        assert_eq!(m["a"].to_vec::<f32>().unwrap(), vec![1.5], "header {len}");
    }
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

/// f16 weights load as f32 (exactly) on a device without f16 storage, so an f32 model still
/// takes them, instead of the whole file failing.
#[test]
fn f16_loads_as_f32_without_f16_storage() {
    let vals = [1.5f32, -0.25, 65504.0, 6.1e-5];
    let bytes: Vec<u8> = vals
        .iter()
        .flat_map(|v| f16::from_f32(*v).to_le_bytes())
        .collect();
    let view = TensorView::new(Dtype::F16, vec![2, 2], &bytes).unwrap();
    let file = safetensors::serialize(vec![("w".to_string(), view)], None).unwrap();
    let plain = Device::with_options(wgtensor::DeviceOptions {
        disable_f16: true,
        ..Default::default()
    })
    .unwrap();
    assert!(!plain.supports_f16());
    let w = &load_safetensors(&plain, &file).unwrap()["w"];
    assert_eq!(w.dtype(), DType::F32);
    let want: Vec<f32> = vals.iter().map(|v| f16::from_f32(*v).to_f32()).collect();
    assert_eq!(w.to_vec::<f32>().unwrap(), want);
    if dev().supports_f16() {
        let h = &load_safetensors(dev(), &file).unwrap()["w"];
        assert_eq!(h.dtype(), DType::F16);
    }
}

#[test]
fn save_and_reload_is_bit_exact() {
    let a = Tensor::from_slice(dev(), &[1.0f32, -0.0, 3.5e-8, f32::MAX], &[2, 2]).unwrap();
    let b = Tensor::from_slice(dev(), &[f16::from_f32(0.1), f16::from_f32(-7.0)], &[2]).unwrap();
    // A strided view is saved as its logical (row-major) values.
    let at = a.transpose(0, 1).unwrap();
    let bytes = save_safetensors(&[("a", &a), ("b", &b), ("at", &at)]).unwrap();
    // The header carries safetensors.torch's `{"format": "pt"}`.
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let format = meta
        .metadata()
        .as_ref()
        .and_then(|m| m.get("format").cloned());
    assert_eq!(format.as_deref(), Some("pt"));
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
    // A directory that does not exist: the error names the path given.
    let bad = std::env::temp_dir().join("wgtensor-no-such-dir/model.safetensors");
    let e = save_safetensors_file(&bad, &[("a", &a)])
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(&format!("save_safetensors: {}: ", bad.display())),
        "{e}"
    );
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
        e.to_string().contains("Unexpected key(s) in state_dict: ")
            && e.to_string().contains("\"bn1.running_mean\""),
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
            .contains("size mismatch for features.0.weight")
            && e.to_string()
                .contains("from checkpoint, the shape in current model is torch.Size([8, 9])"),
        "{e}"
    );
    // A source on another device is copied over through the host, converted to the
    // target's dtype (PyTorch's param.copy_ copies across devices).
    let other = Device::new().unwrap();
    let mut mixed = HashMap::<String, Tensor>::new();
    mixed.insert(
        "a".into(),
        Tensor::full(dev(), &[2], 1.0, DType::F32).unwrap(),
    );
    mixed.insert(
        "b".into(),
        Tensor::full(&other, &[2], 1.0, DType::F32).unwrap(),
    );
    let (ta, tb) = (
        Tensor::zeros(dev(), &[2], DType::F32).unwrap(),
        Tensor::zeros(dev(), &[2], DType::F32).unwrap(),
    );
    load_state_dict(&[("a", &ta), ("b", &tb)], &mixed, true).unwrap();
    assert_eq!(tb.to_vec::<f32>().unwrap(), vec![1.0, 1.0]);
    let ti = Tensor::zeros(dev(), &[2], DType::I32).unwrap();
    mixed.insert(
        "b".into(),
        Tensor::full(&other, &[2], 2.75, DType::F32).unwrap(),
    );
    load_state_dict(&[("b", &ti)], &mixed, false).unwrap();
    assert_eq!(ti.to_vec::<i32>().unwrap(), vec![2, 2]);
    // An f16 source for a device without f16: widened to f32 on the host.
    if dev().supports_f16() {
        let no16 = Device::with_options(wgtensor::DeviceOptions {
            disable_f16: true,
            ..Default::default()
        })
        .unwrap();
        let t32 = Tensor::zeros(&no16, &[2], DType::F32).unwrap();
        let h = Tensor::full(dev(), &[2], 1.5, DType::F16).unwrap();
        let src16 = HashMap::from([("w".to_string(), h)]);
        load_state_dict(&[("w", &t32)], &src16, true).unwrap();
        assert_eq!(t32.to_vec::<f32>().unwrap(), vec![1.5, 1.5]);
    }
}

/// Names a safetensors file cannot hold are an `Err` naming the op and the name, before any
/// readback, from both save paths: a name given twice (it panicked inside the safetensors
/// crate), the reserved `__metadata__` key, and an empty name.
#[test]
fn save_refuses_bad_names() {
    let a = Tensor::from_slice(dev(), &[1.0f32, 2.0], &[2]).unwrap();
    let b = Tensor::from_slice(dev(), &[3.0f32], &[1]).unwrap();
    let cases: [(&[(&str, &Tensor)], &str); 4] = [
        (&[("w", &a), ("w", &b)], "\"w\""),
        (&[("x", &a), ("w", &a), ("y", &b), ("w", &a)], "\"w\""),
        (&[("__metadata__", &a)], "__metadata__"),
        (&[("w", &a), ("", &b)], "empty"),
    ];
    for (tensors, needle) in cases {
        for e in [
            save_safetensors(tensors).unwrap_err(),
            pollster::block_on(wgtensor::io::save_safetensors_async(tensors)).unwrap_err(),
        ] {
            let m = e.to_string();
            assert!(
                matches!(e, wgtensor::Error::InvalidArgument { .. }),
                "{e:?}"
            );
            assert!(
                m.starts_with("save_safetensors:") && m.contains(needle),
                "{m}"
            );
        }
        let path = std::env::temp_dir().join(format!(
            "wgtensor-io-bad-names-{}.safetensors",
            std::process::id()
        ));
        assert!(save_safetensors_file(&path, tensors).is_err());
        assert!(!path.exists());
    }
    // Distinct names still save, and the same tensor under two names is fine.
    let bytes = save_safetensors(&[("w", &a), ("w2", &a), ("b", &b)]).unwrap();
    let m = load_safetensors(dev(), &bytes).unwrap();
    assert_eq!(m["w2"].to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
}

/// A safetensors file from raw header JSON and data bytes.
fn raw_file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut h = header.as_bytes().to_vec();
    h.resize(h.len().div_ceil(8) * 8, b' ');
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend_from_slice(data);
    out
}

/// Every malformed or unsupported file is an `Err`, never a panic: truncations, flipped bytes,
/// headers with duplicate keys, overlapping or out-of-range offsets, overflowing shapes, ranks
/// past the limit, dtypes the device does not store.
#[test]
fn load_refuses_malformed_files() {
    let good = pytorch_like_file();
    for n in [0, 1, 7, 8, 9, 16, good.len() / 2, good.len() - 1] {
        assert!(
            load_safetensors(dev(), &good[..n]).is_err(),
            "truncated to {n}"
        );
    }
    let mut extra = good.clone();
    extra.push(0);
    assert!(load_safetensors(dev(), &extra).is_err());
    // Flipped bytes anywhere (deterministic): Ok or Err, never a panic.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..300 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut f = good.clone();
        let i = (seed >> 33) as usize % f.len();
        f[i] ^= 1 << ((seed >> 20) % 8);
        let _ = load_safetensors(dev(), &f);
    }
    let bad = [
        // Header length past the file.
        raw_file(
            r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
            &[],
        )[..]
            .to_vec(),
        // A key given twice in the JSON.
        raw_file(
            r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#,
            &[0; 8],
        ),
        // Overlapping offsets.
        raw_file(
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#,
            &[0; 8],
        ),
        // Offsets past the data.
        raw_file(
            r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#,
            &[0; 8],
        ),
        // Shape and byte count disagree.
        raw_file(
            r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#,
            &[0; 8],
        ),
        // A shape whose element count overflows.
        raw_file(
            r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,0]}}"#,
            &[],
        ),
        // Rank past the limit (zero elements).
        raw_file(
            r#"{"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,0],"data_offsets":[0,0]}}"#,
            &[],
        ),
        // A dtype the device does not store.
        raw_file(
            r#"{"a":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}}"#,
            &[0; 8],
        ),
        // A uint64 value past the i32 the device stores.
        raw_file(
            r#"{"a":{"dtype":"U64","shape":[1],"data_offsets":[0,8]}}"#,
            &(1u64 << 31).to_le_bytes(),
        ),
        // Offsets whose sum overflows (safetensors 0.8 adds them unchecked).
        raw_file(
            &format!(
                "{{{}}}",
                (0..8u64)
                    .map(|k| {
                        let m = (1u64 << 61) - 1;
                        format!(
                            r#""t{k}":{{"dtype":"U8","shape":[{m}],"data_offsets":[{},{}]}}"#,
                            k * m,
                            (k + 1) * m
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            &[],
        ),
        // Not a safetensors dtype, not a tensor entry, not JSON.
        raw_file(
            r#"{"a":{"dtype":"X9","shape":[1],"data_offsets":[0,4]}}"#,
            &[0; 4],
        ),
        raw_file(
            r#"{"__metadata__":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
            &[0; 4],
        ),
        raw_file(r#"{"a":5}"#, &[]),
        raw_file("{", &[]),
        raw_file("\u{0}\u{0}", &[]),
        // A header length near u64::MAX.
        [u64::MAX.to_le_bytes().as_slice(), b"{}"].concat(),
    ];
    for (i, f) in bad.iter().enumerate() {
        let e = load_safetensors(dev(), f);
        assert!(e.is_err(), "case {i} loaded: {:?}", e.map(|m| m.len()));
    }
    // An empty file header is an empty state dict.
    assert_eq!(
        load_safetensors(dev(), &raw_file("{}", &[])).unwrap().len(),
        0
    );
}

/// The integer dtypes PyTorch saves (int8 to int64, uint8 to uint64) load as i32, exactly;
/// errors while making a tensor name it.
#[test]
fn narrow_and_wide_integers_load_as_i32() {
    let mut data = Vec::new();
    data.extend([0xffu8, 0x7f]); // i8: -1, 127
    data.extend((-2i16).to_le_bytes());
    data.extend(65535u16.to_le_bytes());
    data.extend(7u32.to_le_bytes());
    data.extend(((1u64 << 31) - 1).to_le_bytes());
    let f = raw_file(
        concat!(
            r#"{"a":{"dtype":"I8","shape":[2],"data_offsets":[0,2]},"#,
            r#""b":{"dtype":"I16","shape":[],"data_offsets":[2,4]},"#,
            r#""c":{"dtype":"U16","shape":[1],"data_offsets":[4,6]},"#,
            r#""d":{"dtype":"U32","shape":[1],"data_offsets":[6,10]},"#,
            r#""e":{"dtype":"U64","shape":[1],"data_offsets":[10,18]}}"#
        ),
        &data,
    );
    let sd = load_safetensors(dev(), &f).unwrap();
    let get = |k: &str| sd[k].to_vec::<i32>().unwrap();
    assert_eq!(get("a"), [-1, 127]);
    assert_eq!((get("b"), sd["b"].shape().len()), (vec![-2], 0));
    assert_eq!(get("c"), [65535]);
    assert_eq!(get("d"), [7]);
    assert_eq!(get("e"), [i32::MAX]);
    assert!(sd.values().all(|t| t.dtype() == DType::I32));
    let f = raw_file(
        r#"{"encoder.big":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}}"#,
        &[0; 4],
    );
    let e = load_safetensors(dev(), &f).unwrap_err().to_string();
    assert!(
        e.starts_with("load_safetensors") && e.contains("encoder.big"),
        "{e}"
    );
}

/// A one-element `[1]` source loads into a 0-d parameter (PyTorch's backward-compatibility
/// rule in `_load_from_state_dict`); other shape mismatches stay errors.
#[test]
fn a_one_element_source_loads_into_a_scalar() {
    let temp = Tensor::zeros(dev(), &[], DType::F32).unwrap();
    let mut src = HashMap::new();
    src.insert(
        "temp".to_string(),
        Tensor::from_slice(dev(), &[2.5f32], &[1]).unwrap(),
    );
    load_state_dict(&[("temp", &temp)], &src, true).unwrap();
    assert_eq!(temp.to_vec::<f32>().unwrap(), vec![2.5]);
    // Only a one-element 1-D source (PyTorch's `input_param[0]` when `shape[0] == 1`): a
    // longer or an empty one is a size mismatch, and nothing is written.
    for n in [2, 0] {
        src.insert(
            "temp".to_string(),
            Tensor::from_slice(dev(), &[1.0f32, 2.0][..n], &[n]).unwrap(),
        );
        let e = load_state_dict(&[("temp", &temp)], &src, true).unwrap_err();
        assert!(
            e.to_string().contains(&format!(
                "size mismatch for temp: copying a param with shape torch.Size([{n}]) from \
                 checkpoint, the shape in current model is torch.Size([])."
            )),
            "{e}"
        );
        assert_eq!(temp.to_vec::<f32>().unwrap(), vec![2.5]);
    }
    src.insert(
        "temp".to_string(),
        Tensor::zeros(dev(), &[1, 1], DType::F32).unwrap(),
    );
    let e = load_state_dict(&[("temp", &temp)], &src, true).unwrap_err();
    assert!(e.to_string().contains("size mismatch for temp"), "{e}");
}

/// A target that repeats elements (a broadcast view) cannot be written: the load is refused
/// in PyTorch's words before anything is copied, the other targets untouched.
#[test]
fn a_target_that_repeats_elements_is_refused_before_any_copy() {
    let a = Tensor::zeros(dev(), &[3], DType::F32).unwrap();
    let b = Tensor::zeros(dev(), &[1], DType::F32)
        .unwrap()
        .broadcast_to(&[3])
        .unwrap();
    let mut src = HashMap::new();
    for k in ["a", "b"] {
        src.insert(
            k.to_string(),
            Tensor::full(dev(), &[3], 1.0, DType::F32).unwrap(),
        );
    }
    let e = load_state_dict(&[("a", &a), ("b", &b)], &src, true)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("While copying the parameter named \"b\", whose dimensions in the model are torch.Size([3])"),
        "{e}"
    );
    assert_eq!(a.to_vec::<f32>().unwrap(), [0.0; 3]);
    // A source sharing some of its target's elements (copy_from's partial overlap): refused in
    // the same pass, nothing copied; the very same view loads (a no-op).
    let (a, w) = (
        Tensor::zeros(dev(), &[3], DType::F32).unwrap(),
        Tensor::from_slice(dev(), &[1.0f32, 2.0, 3.0, 4.0], &[4]).unwrap(),
    );
    let c = w.narrow(0, 0, 3).unwrap();
    let mut src = HashMap::new();
    src.insert(
        "a".to_string(),
        Tensor::full(dev(), &[3], 1.0, DType::F32).unwrap(),
    );
    src.insert("c".to_string(), w.narrow(0, 1, 3).unwrap());
    let e = load_state_dict(&[("a", &a), ("c", &c)], &src, true)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("While copying the parameter named \"c\"")
            && e.contains("some elements of the input tensor and the written-to tensor"),
        "{e}"
    );
    assert_eq!(a.to_vec::<f32>().unwrap(), [0.0; 3]);
    src.insert("c".to_string(), c.clone());
    load_state_dict(&[("a", &a), ("c", &c)], &src, true).unwrap();
    assert_eq!(c.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0]);
}

/// A malformed header's error names the tensor and the numbers.
#[test]
fn malformed_headers_are_named() {
    let err = |bytes: &[u8]| load_safetensors(dev(), bytes).unwrap_err().to_string();
    let e = err(&raw_file(
        r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#,
        &[0; 8],
    ));
    assert!(
        e.contains("tensor \"a\": data_offsets [0, 8] hold 8 bytes, its shape [3] of F32 needs 12"),
        "{e}"
    );
    let e = err(&raw_file(
        r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}}"#,
        &[0; 4],
    ));
    assert!(
        e.contains("tensor \"a\": shape") && e.contains("overflows"),
        "{e}"
    );
    let e = err(&raw_file(
        r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
        &[0; 8],
    ));
    assert!(
        e.contains("the tensors cover 4 of the file's 8 data bytes"),
        "{e}"
    );
    let e = err(&raw_file(
        r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#,
        &[0; 8],
    ));
    assert!(e.contains("its data starts at byte 4"), "{e}");
    let mut past = 100u64.to_le_bytes().to_vec();
    past.extend_from_slice(b"{}");
    assert!(err(&past).contains("the header's 100 bytes run past the file's 10 bytes"));
    // Offsets that end before they start (an empty tensor's span would otherwise read as 0).
    let e = err(&raw_file(
        r#"{"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
        &[0; 4],
    ));
    assert!(
        e.contains("tensor \"a\": invalid offset: data_offsets [4, 0] end before they start"),
        "{e}"
    );
}

/// Only regular files are read (a device such as /dev/zero would be read without end); a
/// save leaves no temporary file, and saves to names that differ in their extension do not
/// share one.
#[cfg(unix)]
#[test]
fn files_are_read_and_written_safely() {
    let e = load_safetensors_file(dev(), "/dev/zero")
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a regular file"), "{e}");
    let dir = std::env::temp_dir().join(format!("wgtensor-io-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A named pipe without a writer: opening it would block, so the path is refused first.
    let fifo = dir.join("pipe.safetensors");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if made.is_ok_and(|s| s.success()) {
        let e = load_safetensors_file(dev(), &fifo).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        std::fs::remove_file(&fifo).unwrap();
    }
    // A file wrong from its first bytes is refused before its body is read: 64 GiB (sparse,
    // where the file system allows) would not fit in memory.
    let huge = dir.join("huge.safetensors");
    for (head, want) in [
        (u64::MAX.to_le_bytes().to_vec(), "invalid header length"),
        (b"PK\x03\x04\0\0\0\0\0".to_vec(), "zip checkpoint"),
    ] {
        std::fs::write(&huge, &head).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&huge).unwrap();
        if f.set_len(64 << 30).is_ok() {
            let e = load_safetensors_file(dev(), &huge).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
        std::fs::remove_file(&huge).unwrap();
    }
    // A file's own faults name its path: a torch.save zip, a truncated header, a bad body.
    let bad = dir.join("bad.safetensors");
    for (bytes, want) in [
        (b"PK\x03\x04\0\0\0\0\0".to_vec(), "zip checkpoint"),
        (16u64.to_le_bytes().to_vec(), "invalid header length"),
        ([&8u64.to_le_bytes()[..], b"not json"].concat(), ""),
    ] {
        std::fs::write(&bad, &bytes).unwrap();
        let e = load_safetensors_file(dev(), &bad).unwrap_err().to_string();
        assert!(e.contains("bad.safetensors") && e.contains(want), "{e}");
    }
    std::fs::remove_file(&bad).unwrap();
    let a = Tensor::from_slice(dev(), &[1.0f32, 2.0], &[2]).unwrap();
    let b = Tensor::from_slice(dev(), &[3.0f32], &[1]).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| save_safetensors_file(dir.join("ck.1"), &[("a", &a)]).unwrap());
        s.spawn(|| save_safetensors_file(dir.join("ck.2"), &[("a", &b)]).unwrap());
    });
    let one = load_safetensors_file(dev(), dir.join("ck.1")).unwrap();
    let two = load_safetensors_file(dev(), dir.join("ck.2")).unwrap();
    assert_eq!(one["a"].to_vec::<f32>().unwrap(), [1.0, 2.0]);
    assert_eq!(two["a"].to_vec::<f32>().unwrap(), [3.0]);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["ck.1", "ck.2"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A tensor the device has no room for keeps OutOfMemory, under the load's name and with the
/// tensor's.
#[test]
fn out_of_memory_names_the_load_and_the_tensor() {
    let big = Tensor::zeros(dev(), &[32 * 1024], DType::F32).unwrap();
    let bytes = save_safetensors(&[("encoder.weight", &big)]).unwrap();
    let small = Device::with_options(wgtensor::DeviceOptions {
        memory_limit: Some(64 << 10),
        ..Default::default()
    })
    .unwrap();
    let e = wgtensor::io::load_safetensors(&small, &bytes).unwrap_err();
    assert!(
        matches!(
            e,
            wgtensor::Error::OutOfMemory {
                op: "load_safetensors",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("\"encoder.weight\""), "{e}");
}

/// PyTorch's unexpected keys (test_load_state_dict_with_unexpected_key): every key that names
/// no target is unexpected, under a tensor's name (`fc.weight.foo`) and a module's own name
/// (`fc`) too.
#[test]
fn every_key_that_names_no_target_is_unexpected() {
    let w = Tensor::zeros(dev(), &[2], DType::F32).unwrap();
    let b = Tensor::zeros(dev(), &[2], DType::F32).unwrap();
    let targets = [("fc.weight", &w), ("fc.bias", &b)];
    let mut src = std::collections::HashMap::new();
    for k in [
        "fc.weight",
        "fc.bias",
        "fc.weight.foo",
        "fc",
        "fc.foo",
        "foo.bar",
        "foo",
    ] {
        src.insert(
            k.to_string(),
            Tensor::full(dev(), &[2], 1.0, DType::F32).unwrap(),
        );
    }
    let report = load_state_dict(&targets, &src, false).unwrap();
    assert_eq!(
        report.unexpected,
        ["fc", "fc.foo", "fc.weight.foo", "foo", "foo.bar"]
    );
    let e = load_state_dict(&targets, &src, true)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(
            "Unexpected key(s) in state_dict: \"fc\", \"fc.foo\", \"fc.weight.foo\", \"foo\", \
             \"foo.bar\"."
        ),
        "{e}"
    );
}
