//! wgpu interop: wgtensor on a device the application created, and tensors used by the
//! application's own compute pipeline (a plain wgpu pipeline written here), ordered with
//! wgtensor's pending work through `Device::submit`.
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

use wgtensor::wgpu;
use wgtensor::{DType, Device, DeviceOptions, Tensor};

const DOUBLE: &str = "
@group(0) @binding(0) var<storage, read_write> v: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x < arrayLength(&v)) {
        v[g.x] = v[g.x] * 2.0;
    }
}
";

/// Doubles `bytes` bytes at `offset` of `buf` with the app's own pipeline, submitted through
/// wgtensor's queue.
fn double_in_place(dev: &Device, buf: &wgpu::Buffer, offset: u64, bytes: u64) {
    let d = dev.wgpu_device();
    let module = d.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("app_double"),
        source: wgpu::ShaderSource::Wgsl(DOUBLE.into()),
    });
    let pipe = d.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("app_double"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let bg = d.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipe.get_bind_group_layout(0),
        entries: &[wgpu::BindGroupEntry {
            binding: 0,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: buf,
                offset,
                size: wgpu::BufferSize::new(bytes),
            }),
        }],
    });
    let mut enc = d.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipe);
        pass.set_bind_group(0, &bg, &[]);
        pass.dispatch_workgroups((bytes / 4).div_ceil(64) as u32, 1, 1);
    }
    dev.submit([enc.finish()]).unwrap();
}

#[test]
fn app_pipeline_reads_and_writes_a_tensor_in_order() {
    let dev = Device::new().unwrap();
    let a = Tensor::from_slice(
        &dev,
        &(0..100).map(|i| i as f32).collect::<Vec<_>>(),
        &[100],
    )
    .unwrap();
    // Pending (not yet submitted) wgtensor work produces the tensor the app then doubles.
    let b = a.add_scalar(1.0).unwrap();
    let (buf, offset, bytes) = b.wgpu_buffer().unwrap();
    assert_eq!((offset, bytes), (0, 400));
    double_in_place(&dev, buf, offset, bytes);
    // wgtensor work after the app's sees its result.
    let c = b.add_scalar(0.5).unwrap();
    let want: Vec<f32> = (0..100).map(|i| (i as f32 + 1.0) * 2.0 + 0.5).collect();
    assert_eq!(c.to_vec::<f32>().unwrap(), want);

    // A contiguous view at an offset gives its byte range; strided views are refused. (Binding
    // at an offset needs min_storage_buffer_offset_alignment: rows of exactly that size.)
    let w = (dev.limits().min_storage_buffer_offset_alignment / 4) as usize;
    let m = Tensor::from_slice(&dev, &vec![1.0f32; 3 * w], &[3, w]).unwrap();
    let row = m.narrow(0, 1, 1).unwrap();
    let (buf, offset, bytes) = row.wgpu_buffer().unwrap();
    assert_eq!((offset, bytes), (4 * w as u64, 4 * w as u64));
    double_in_place(&dev, buf, offset, bytes);
    let want = [vec![1.0f32; w], vec![2.0; w], vec![1.0; w]].concat();
    assert_eq!(m.to_vec::<f32>().unwrap(), want);
    let e = m.transpose(0, 1).unwrap().wgpu_buffer().unwrap_err();
    assert!(e.to_string().starts_with("wgpu_buffer:"), "{e}");
}

#[test]
fn runs_on_a_device_the_app_created() {
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.request_adapter(&Default::default())).unwrap();
    let (device, queue) = pollster::block_on(adapter.request_device(&Default::default())).unwrap();
    let dev = Device::from_wgpu(adapter, device.clone(), queue, DeviceOptions::default()).unwrap();
    assert!(dev.wgpu_device() == &device);
    // A device without compute (wgpu's WebGL2 defaults) is refused when adopted, not at the
    // first op's division by its zero limits.
    let adapter = pollster::block_on(instance.request_adapter(&Default::default())).unwrap();
    let desc = wgpu::DeviceDescriptor {
        required_limits: wgpu::Limits::downlevel_webgl2_defaults()
            .using_resolution(adapter.limits()),
        ..Default::default()
    };
    let (d, q) = pollster::block_on(adapter.request_device(&desc)).unwrap();
    let e = Device::from_wgpu(adapter, d, q, DeviceOptions::default()).unwrap_err();
    assert!(
        e.to_string()
            .contains("max_compute_workgroups_per_dimension is 0"),
        "{e}"
    );
    // Buffers too small for a batch's parameter arena (64 slots of 256 bytes): refused when
    // adopted, not by every batch's validation error; fewer dispatches per batch fit.
    let adapter = pollster::block_on(instance.request_adapter(&Default::default())).unwrap();
    let desc = wgpu::DeviceDescriptor {
        required_limits: wgpu::Limits {
            max_buffer_size: 8192,
            max_storage_buffer_binding_size: 8192,
            ..wgpu::Limits::default()
        }
        .using_resolution(adapter.limits()),
        ..Default::default()
    };
    let (d, q) = pollster::block_on(adapter.request_device(&desc)).unwrap();
    let e = Device::from_wgpu(
        adapter.clone(),
        d.clone(),
        q.clone(),
        DeviceOptions::default(),
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("max_dispatches_per_submit = 64"),
        "{e}"
    );
    let small = DeviceOptions {
        max_dispatches_per_submit: 16,
        ..DeviceOptions::default()
    };
    let sd = Device::from_wgpu(adapter, d, q, small).unwrap();
    let s = Tensor::from_slice(&sd, &[1.0f32, 2.0], &[2]).unwrap();
    assert_eq!(s.add(&s).unwrap().to_vec::<f32>().unwrap(), [2.0, 4.0]);
    // No SHADER_F16 requested by the app: f16 is refused, f32 works.
    assert!(Tensor::zeros(&dev, &[2], DType::F16).is_err());
    let x = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    let y = x.matmul(&x).unwrap().sum(1, false).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![17.0, 37.0]);
    // The app's own buffer and pipeline on the same device, through the same queue.
    let t = Tensor::from_slice(&dev, &[3.0f32; 64], &[64]).unwrap();
    let (buf, off, bytes) = t.wgpu_buffer().unwrap();
    double_in_place(&dev, buf, off, bytes);
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![6.0; 64]);
    // Bad options are refused as by Device::with_options.
    let adapter = pollster::block_on(instance.request_adapter(&Default::default())).unwrap();
    let (device, queue) = pollster::block_on(adapter.request_device(&Default::default())).unwrap();
    let opts = DeviceOptions {
        max_in_flight: 0,
        ..Default::default()
    };
    assert!(Device::from_wgpu(adapter, device, queue, opts).is_err());
}

/// `Device::stats` runs no wgpu callbacks (it does not poll): an application callback that
/// calls into the device, pending while work is in flight, cannot meet the device's lock held
/// by its own thread there. (Submissions do poll under the lock: `Device::wgpu_device` says
/// callbacks must not call into the device.)
#[test]
fn stats_runs_no_wgpu_callbacks() {
    let dev = Device::new().expect("device");
    let x = Tensor::full(&dev, &[1 << 20], 1.0, DType::F32).unwrap();
    let mut y = x.relu().unwrap();
    for _ in 0..20 {
        y = y.add(&x).unwrap();
    }
    dev.submit(std::iter::empty()).unwrap();
    let buf = dev.wgpu_device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("app_map"),
        size: 4,
        usage: wgpu::BufferUsages::MAP_READ,
        mapped_at_creation: false,
    });
    let d2 = dev.clone();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    buf.slice(..).map_async(wgpu::MapMode::Read, move |_| {
        let _ = d2.stats();
        let _ = done_tx.send(());
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let d3 = dev.clone();
    std::thread::spawn(move || {
        for _ in 0..50 {
            let _ = d3.stats();
        }
        let _ = tx.send(());
    });
    if rx.recv_timeout(std::time::Duration::from_secs(60)).is_err() {
        // The stuck thread holds the device's lock: dropping anything of the device here
        // would wait for it too, so fail without dropping.
        std::mem::forget((dev, x, y, buf));
        panic!("stats deadlocked in an application callback");
    }
    // The callback runs at the next poll outside the lock: this sync's wait (a readback
    // first could poll under the lock while it waits for room to submit its copy).
    dev.sync().unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap()[0], 21.0);
    done_rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the map callback ran");
}

/// On an app's device with fewer storage bindings per stage than a kernel needs, that op is an
/// error on every call (a failed pipeline is not cached and reused), and the rest of the
/// device's work goes on.
#[test]
fn a_kernel_the_device_cannot_build_fails_every_time() {
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.request_adapter(&Default::default())).unwrap();
    let desc = wgpu::DeviceDescriptor {
        required_limits: wgpu::Limits {
            max_storage_buffers_per_shader_stage: 4,
            ..Default::default()
        },
        ..Default::default()
    };
    let (device, queue) = pollster::block_on(adapter.request_device(&desc)).unwrap();
    let dev = Device::from_wgpu(adapter, device, queue, DeviceOptions::default()).unwrap();
    let x = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    let opts = wgtensor::ops::BatchNormOptions::default();
    let run = || wgtensor::ops::batch_norm_train(&x, None, &opts);
    assert!(run().is_err());
    assert!(run().is_err(), "the second call fails too");
    let y = x.add_scalar(1.0).unwrap();
    dev.sync().unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![2.0, 3.0, 4.0, 5.0]);
}
