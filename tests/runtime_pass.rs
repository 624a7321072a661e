//! One compute pass per batch: dependent dispatches recorded into one pass see each other's
//! writes (wgpu makes each dispatch its own usage scope), and the pass ends where a command must
//! run outside it (clears, copies, readbacks) without reordering anything. Bind groups are reused
//! across dispatches and never outlive the buffers they bind.
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

use wgtensor::{DType, Device, DeviceOptions, Tensor};

fn big_batches() -> Device {
    Device::with_options(DeviceOptions {
        max_dispatches_per_submit: 4096,
        ..Default::default()
    })
    .expect("device")
}

/// 1000 dependent read_write dispatches in a single batch (one pass): each reads the previous
/// one's output.
#[test]
fn dependent_dispatches_in_one_pass() {
    let dev = big_batches();
    let one = Tensor::full(&dev, &[300], 1.0, DType::F32).unwrap();
    let mut x = Tensor::zeros(&dev, &[300], DType::F32).unwrap();
    let before = dev.stats().submissions;
    for i in 0..1000 {
        x = if i % 3 == 0 {
            x.add(&one).unwrap()
        } else {
            x.add_scalar(1.0).unwrap()
        };
    }
    assert_eq!(
        dev.stats().submissions,
        before,
        "the chain must stay in one batch"
    );
    assert_eq!(x.to_vec::<f32>().unwrap(), vec![1000.0; 300]);
}

/// Clears, copies and readbacks in the middle of a batch end the pass and keep their order
/// relative to the dispatches around them.
#[test]
fn pass_boundaries_keep_order() {
    let dev = big_batches();
    let a = Tensor::full(&dev, &[64], 2.0, DType::F32).unwrap();
    let b = a.mul_scalar(3.0).unwrap(); // dispatch
    let z = Tensor::zeros(&dev, &[64], DType::F32).unwrap(); // clear
    let c = z.add(&b).unwrap(); // dispatch after the clear
                                // A strided readback copies through a dispatch, a contiguous one through a buffer copy.
    let t = c.reshape(&[8, 8]).unwrap().transpose(0, 1).unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![6.0; 64]);
    let d = c.add_scalar(1.0).unwrap();
    let zz = Tensor::zeros(&dev, &[64], DType::F32).unwrap();
    let e = d.add(&zz).unwrap();
    assert_eq!(e.to_vec::<f32>().unwrap(), vec![7.0; 64]);
    // An upload between dispatches of one batch.
    let f = e.add_scalar(1.0).unwrap();
    let g = Tensor::from_slice(&dev, &[10.0f32; 64], &[64]).unwrap();
    let h = f.add(&g).unwrap();
    assert_eq!(h.to_vec::<f32>().unwrap(), vec![18.0; 64]);
}

/// Cached bind groups never bind a destroyed buffer: after the pool drops its cache, the same
/// shapes (which would hit the same bind groups) still compute right.
#[test]
fn bind_groups_survive_pool_clears() {
    let dev = Device::new().expect("device");
    let x = Tensor::full(&dev, &[1000], 1.5, DType::F32).unwrap();
    for round in 0..4 {
        let mut y = x.clone();
        for _ in 0..50 {
            y = y.add_scalar(1.0).unwrap();
        }
        assert_eq!(
            y.to_vec::<f32>().unwrap(),
            vec![51.5; 1000],
            "round {round}"
        );
        drop(y);
        dev.sync().unwrap();
        dev.clear_pool();
    }
    // A tight memory limit trims the cache all the time.
    let dev = Device::with_options(DeviceOptions {
        memory_limit: Some(1 << 20),
        ..Default::default()
    })
    .unwrap();
    let x = Tensor::full(&dev, &[40_000], 1.0, DType::F32).unwrap();
    let mut y = x.clone();
    for _ in 0..30 {
        y = y.add(&x).unwrap();
    }
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![31.0; 40_000]);
}

/// A tensor under the buffer limit is not refused for its size class (classes round up by
/// as much as a quarter): it gets as far as the memory budget, here set below it.
#[test]
fn a_tensor_under_the_buffer_limit_is_not_too_large() {
    let dev = Device::with_options(DeviceOptions {
        memory_limit: Some(1 << 30),
        ..Default::default()
    })
    .unwrap();
    // 1.92 GB: under lavapipe's 2^31 - 1 and a GPU's 4 GiB - 1 limits, in the 2 GiB class.
    let e = Tensor::zeros(&dev, &[480_000_000], DType::F32).unwrap_err();
    assert!(matches!(e, wgtensor::Error::OutOfMemory { .. }), "{e:?}");
}
