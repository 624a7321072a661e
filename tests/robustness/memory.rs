//! Memory stays bounded whether or not ops are recorded, the memory budget fails cleanly with
//! `Error::OutOfMemory` and leaves the device usable, and absurd options are refused.

use wgtensor::{DType, Device, DeviceOptions, Error, Tensor};

use super::{dev, names_op, still_works, vals};

/// Uploads and drops with no op recorded in between recycle their buffers.
#[test]
fn upload_and_drop_loop_stays_bounded() {
    // No cooperative-matrix self-test at open: its buffers would count as misses here.
    let d = Device::with_options(DeviceOptions {
        cooperative_matrix: false,
        ..Default::default()
    })
    .unwrap();
    let data = vec![1.0f32; 4096];
    for _ in 0..5_000 {
        let t = Tensor::from_slice(&d, &data, &[4096]).unwrap();
        drop(t);
    }
    let st = d.stats().pool;
    assert!(st.live_bytes + st.cached_bytes <= 1 << 20, "{st:?}");
    assert!(st.misses <= 4, "every upload created a buffer: {st:?}");
    // zeros records a clear: the clears submit now and then, so the cache stays bounded too.
    for _ in 0..5_000 {
        drop(Tensor::zeros(&d, &[4096], DType::F32).unwrap());
    }
    let st = d.stats().pool;
    assert!(st.peak_bytes <= 8 << 20, "{st:?}");
    // Uploads while a batch is open (a pending clear) also end up reused.
    let keep = Tensor::zeros(&d, &[16], DType::F32).unwrap();
    for _ in 0..5_000 {
        drop(Tensor::from_slice(&d, &data, &[4096]).unwrap());
    }
    let st = d.stats().pool;
    assert!(st.peak_bytes <= 300 << 20, "{st:?}");
    assert_eq!(vals(&keep), vec![0.0; 16]);
}

#[test]
fn memory_limit_refuses_cleanly_and_recovers() {
    let limit = 16u64 << 20;
    let d = Device::with_options(DeviceOptions {
        memory_limit: Some(limit),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(d.stats().memory_limit, limit);
    let mut held = Vec::new();
    let err = loop {
        match Tensor::zeros(&d, &[1 << 20], DType::F32) {
            Ok(t) => held.push(t),
            Err(e) => break e,
        }
        assert!(held.len() <= 16, "the limit was not enforced");
    };
    assert!(matches!(err, Error::OutOfMemory { .. }), "{err:?}");
    names_op(&err, "zeros");
    assert!(err.to_string().contains("memory_limit"), "{err}");
    assert!(held.len() >= 2, "{}", held.len());
    // An op whose output does not fit fails the same way, naming the op.
    let e = held[0].add(&held[1]).unwrap_err();
    assert!(matches!(e, Error::OutOfMemory { op: "add", .. }), "{e:?}");
    // Tensors that filled the budget can still be read back: a readback's staging buffer
    // (short-lived) may pass the limit.
    let last = held.last().unwrap();
    assert_eq!(last.to_vec::<f32>().unwrap(), vec![0.0; 1 << 20]);
    assert_eq!(held[0].narrow(0, 5, 1).unwrap().item().unwrap(), 0.0);
    // Freeing makes room again, and earlier results are intact.
    held.truncate(1);
    assert_eq!(
        vals(&held[0].narrow(0, 0, 4).unwrap().contiguous().unwrap()),
        vec![0.0; 4]
    );
    let t = Tensor::zeros(&d, &[1 << 20], DType::F32).unwrap();
    assert_eq!(
        vals(&t.add(&held[0]).unwrap().narrow(0, 7, 2).unwrap()),
        vec![0.0; 2]
    );
    still_works(&d);
}

#[test]
fn default_memory_limit_is_bounded_on_cpu_adapters() {
    let st = dev().stats();
    if dev().adapter_info().device_type == wgpu::DeviceType::Cpu {
        let text = std::fs::read_to_string("/proc/meminfo").unwrap();
        let kib: u64 = text
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap();
        assert!(st.memory_limit <= kib * 1024, "{}", st.memory_limit);
    }
}

#[test]
fn absurd_options_are_refused_up_front() {
    let cases = [
        DeviceOptions {
            max_dispatches_per_submit: usize::MAX,
            ..Default::default()
        },
        DeviceOptions {
            max_dispatches_per_submit: 0,
            ..Default::default()
        },
        DeviceOptions {
            max_in_flight: usize::MAX,
            ..Default::default()
        },
        DeviceOptions {
            max_in_flight: 0,
            ..Default::default()
        },
        DeviceOptions {
            max_bytes_per_submit: 0,
            ..Default::default()
        },
        DeviceOptions {
            memory_limit: Some(0),
            ..Default::default()
        },
        DeviceOptions {
            parallelism: Some(0),
            ..Default::default()
        },
    ];
    for opts in cases {
        let e = Device::with_options(opts.clone()).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { op: "device", .. }),
            "{opts:?}: {e:?}"
        );
    }
    // A limit below one batch's parameter buffer (64 slots of 256 bytes) would make every
    // first dispatch run out of memory: refused when the device opens.
    let e = Device::with_options(DeviceOptions {
        memory_limit: Some(8 << 10),
        ..Default::default()
    })
    .unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "Device", .. })
            && e.to_string().contains("parameter buffer of 16384 bytes"),
        "{e:?}"
    );
    // Exactly the buffer leaves no room for any tensor: refused too; a little more works.
    let e = Device::with_options(DeviceOptions {
        memory_limit: Some(16 << 10),
        ..Default::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("at least 16640 bytes"), "{e:?}");
    let d = Device::with_options(DeviceOptions {
        memory_limit: Some(16640),
        ..Default::default()
    })
    .unwrap();
    let x = Tensor::from_slice(&d, &[1.0f32, 2.0], &[2]).unwrap();
    assert_eq!(vals(&x), vec![1.0, 2.0]);
}

/// A command buffer wgpu refuses at submission (one using a buffer destroyed since it was
/// recorded) is `submit`'s error, not the next op's; the device goes on.
#[test]
fn a_refused_outside_submission_is_submits_error() {
    let d = Device::new().unwrap();
    let y = Tensor::zeros(&d, &[4], DType::F32).unwrap();
    let (yb, yo, bytes) = y.wgpu_buffer().unwrap();
    let gone = d.wgpu_device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("gone"),
        size: 16,
        usage: wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let mut enc = d.wgpu_device().create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(&gone, 0, yb, yo, bytes);
    let cmd = enc.finish();
    gone.destroy();
    let e = d.submit([cmd]).unwrap_err();
    names_op(&e, "submit");
    assert_eq!(vals(&y), vec![0.0; 4]);
    still_works(&d);
}

/// Work submitted from outside goes through the same in-flight cap and after pending ops.
#[test]
fn outside_submissions_respect_the_cap_and_order() {
    let d = Device::with_options(DeviceOptions {
        max_in_flight: 2,
        ..Default::default()
    })
    .unwrap();
    let a = Tensor::from_slice(&d, &[1.0f32; 64], &[64]).unwrap();
    let b = a.add_scalar(1.0).unwrap(); // pending, not yet submitted
    for _ in 0..50 {
        let e = d.wgpu_device().create_command_encoder(&Default::default());
        d.submit([e.finish()]).unwrap();
    }
    let st = d.stats();
    assert!(st.peak_in_flight <= 2, "{st:?}");
    assert!(st.submissions >= 50, "{st:?}");
    assert_eq!(vals(&b), vec![2.0; 64]);
}
