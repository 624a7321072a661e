//! Small-op throughput: where the cost per dispatch, not the kernel, sets the speed.
//!
//! - `tiny_ops`: a chain of dependent adds of 64 floats through wgtensor.
//! - `tiny_ops_raw`: the same chain as a plain wgpu loop on a device of its own: the same add,
//!   a fresh bind group per dispatch, params packed into one uniform arena per batch (dynamic
//!   offsets), one compute pass per batch of 64 dispatches, at most 3 submissions in flight.
//!   `tiny_ops` reports `vs_raw=` (its time / the raw loop's, paired in one run).
//! - `small_op_mix`: an LSTM step's elementwise tail and an SGD update over 50 parameters,
//!   reporting dispatches per second.
//! - `gpu/sync_raw`: `gpu/sync_op` (one small op, then a sync) as a plain wgpu loop, the floor
//!   wgpu and the driver set for a synced op.

use std::collections::VecDeque;

use wgtensor::ops::ScalarOp;
use wgtensor::{DType, Device, Tensor};

use super::inputs::tensor;
use super::{Case, Run};

/// Dependent ops per run.
pub const CHAIN: usize = 2000;
const N: usize = 64;
const BATCH: usize = 64;
const SLOT: u64 = 256;

fn tiny_case(dev: &Device) -> wgtensor::Result<Run> {
    let y = tensor(dev, &[N], DType::F32, 1)?;
    let mut x = tensor(dev, &[N], DType::F32, 2)?;
    dev.sync()?;
    Ok(Box::new(move || {
        for _ in 0..CHAIN {
            x = x.add(&y)?;
        }
        Ok(())
    }))
}

const ADD_WGSL: &str = "
struct P { n: u32, pad0: u32, pad1: u32, pad2: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x < p.n) {
        c[g.x] = a[g.x] + b[g.x];
    }
}
";

fn err(e: impl std::fmt::Display) -> wgtensor::Error {
    wgtensor::Error::NoAdapter(e.to_string())
}

/// A plain wgpu device of the default adapter with `wgsl`'s `main` as a pipeline over a
/// uniform at binding 0 (dynamic offset) and storage buffers a, b (read) and c (written).
struct Raw {
    d: wgtensor::wgpu::Device,
    q: wgtensor::wgpu::Queue,
    layout: wgtensor::wgpu::BindGroupLayout,
    pipe: wgtensor::wgpu::ComputePipeline,
}

fn raw_device(wgsl: &'static str) -> wgtensor::Result<Raw> {
    use wgtensor::wgpu;
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.request_adapter(&Default::default())).map_err(err)?;
    let (d, q) = pollster::block_on(adapter.request_device(&Default::default())).map_err(err)?;
    let module = d.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("raw"),
        source: wgpu::ShaderSource::Wgsl(wgsl.into()),
    });
    let entry =
        |binding: u32, ty: wgpu::BufferBindingType, dynamic: bool| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty,
                has_dynamic_offset: dynamic,
                min_binding_size: None,
            },
            count: None,
        };
    let ro = wgpu::BufferBindingType::Storage { read_only: true };
    let rw = wgpu::BufferBindingType::Storage { read_only: false };
    let layout = d.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: None,
        entries: &[
            entry(0, wgpu::BufferBindingType::Uniform, true),
            entry(1, ro, false),
            entry(2, ro, false),
            entry(3, rw, false),
        ],
    });
    let pl = d.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: None,
        bind_group_layouts: &[Some(&layout)],
        immediate_size: 0,
    });
    let pipe = d.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("raw"),
        layout: Some(&pl),
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    Ok(Raw { d, q, layout, pipe })
}

impl Raw {
    fn storage(&self, bytes: u64) -> wgtensor::wgpu::Buffer {
        use wgtensor::wgpu;
        self.d.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: bytes,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    fn bind_group(
        &self,
        arena: &wgtensor::wgpu::Buffer,
        a: &wgtensor::wgpu::Buffer,
        b: &wgtensor::wgpu::Buffer,
        c: &wgtensor::wgpu::Buffer,
    ) -> wgtensor::wgpu::BindGroup {
        use wgtensor::wgpu;
        self.d.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &self.layout,
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: arena,
                        offset: 0,
                        size: wgpu::BufferSize::new(SLOT),
                    }),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: a.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 2,
                    resource: b.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 3,
                    resource: c.as_entire_binding(),
                },
            ],
        })
    }

    fn arena(&self, slots: usize) -> wgtensor::wgpu::Buffer {
        use wgtensor::wgpu;
        self.d.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: slots as u64 * SLOT,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }
}

fn raw_case(_dev: &Device) -> wgtensor::Result<Run> {
    use wgtensor::wgpu;
    let raw = raw_device(ADD_WGSL)?;
    let storage = || raw.storage((N * 4) as u64);
    let (y, x0, x1) = (storage(), storage(), storage());
    let arena = raw.arena(BATCH);
    let mut params = vec![0u8; BATCH * SLOT as usize];
    for s in 0..BATCH {
        params[s * SLOT as usize..s * SLOT as usize + 4].copy_from_slice(&(N as u32).to_le_bytes());
    }
    let mut in_flight: VecDeque<wgpu::SubmissionIndex> = VecDeque::new();
    Ok(Box::new(move || {
        let mut done = 0;
        let mut flip = false;
        while done < CHAIN {
            let n = BATCH.min(CHAIN - done);
            raw.q.write_buffer(&arena, 0, &params);
            let mut enc = raw.d.create_command_encoder(&Default::default());
            {
                let mut pass = enc.begin_compute_pass(&Default::default());
                pass.set_pipeline(&raw.pipe);
                for i in 0..n {
                    let (src, dst) = if flip { (&x1, &x0) } else { (&x0, &x1) };
                    flip = !flip;
                    let bg = raw.bind_group(&arena, src, &y, dst);
                    pass.set_bind_group(0, &bg, &[(i as u64 * SLOT) as u32]);
                    pass.dispatch_workgroups(1, 1, 1);
                }
            }
            // At most 3 submissions outstanding, as wgtensor's default cap.
            while in_flight.len() >= 3 {
                let oldest = in_flight.pop_front().expect("len >= 3");
                raw.d
                    .poll(wgpu::PollType::Wait {
                        submission_index: Some(oldest),
                        timeout: None,
                    })
                    .map_err(err)?;
            }
            in_flight.push_back(raw.q.submit([enc.finish()]));
            done += n;
        }
        // Finish here: the harness's Device::sync does not cover this device.
        raw.d
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(err)?;
        in_flight.clear();
        Ok(())
    }))
}

/// Elements of `gpu/sync_raw`'s op: `gpu/sync_op`'s 2^20.
const SYNC_N: usize = 1 << 20;

/// `gpu/sync_op` as a plain wgpu loop on a device of its own: the params written with
/// `write_buffer`, one dispatch of `tiny_ops_raw`'s add as `x + x` on 2^20 f32 (the traffic of
/// `x * 1.5`: the second read hits the cache), one submit, then polls (yielding between them,
/// as wgtensor's wait) until `on_submitted_work_done` fires. What wgpu and the
/// driver cost a synced op, against which `gpu/sync_op` reads wgtensor's own share.
fn sync_raw_case(_dev: &Device) -> wgtensor::Result<Run> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use wgtensor::wgpu;
    let raw = raw_device(ADD_WGSL)?;
    let (x, y) = (
        raw.storage((SYNC_N * 4) as u64),
        raw.storage((SYNC_N * 4) as u64),
    );
    let arena = raw.arena(1);
    let bg = raw.bind_group(&arena, &x, &x, &y);
    let mut params = vec![0u8; SLOT as usize];
    params[..4].copy_from_slice(&(SYNC_N as u32).to_le_bytes());
    Ok(Box::new(move || {
        raw.q.write_buffer(&arena, 0, &params);
        let mut enc = raw.d.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            pass.set_pipeline(&raw.pipe);
            pass.set_bind_group(0, &bg, &[0]);
            pass.dispatch_workgroups((SYNC_N / 256) as u32, 1, 1);
        }
        raw.q.submit([enc.finish()]);
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        raw.q
            .on_submitted_work_done(move || flag.store(true, Ordering::Release));
        loop {
            raw.d.poll(wgpu::PollType::Poll).map_err(err)?;
            if done.load(Ordering::Acquire) {
                return Ok(());
            }
            std::thread::yield_now();
        }
    }))
}

/// An LSTM step's elementwise tail on [64, 256] gates, then an SGD step (p -= lr * g) over 50
/// parameters of assorted sizes.
fn mix_case(dev: &Device) -> wgtensor::Result<Run> {
    let gates: Vec<Tensor> = (0..4)
        .map(|i| tensor(dev, &[64, 256], DType::F32, 10 + i))
        .collect::<wgtensor::Result<_>>()?;
    let mut c = tensor(dev, &[64, 256], DType::F32, 20)?;
    let sizes = [64usize, 256, 1024, 4096, 256 * 64];
    let mut params: Vec<Tensor> = (0..50)
        .map(|i| tensor(dev, &[sizes[i % sizes.len()]], DType::F32, 30 + i as u32))
        .collect::<wgtensor::Result<_>>()?;
    let grads: Vec<Tensor> = params
        .iter()
        .enumerate()
        .map(|(i, p)| tensor(dev, p.shape(), DType::F32, 100 + i as u32))
        .collect::<wgtensor::Result<_>>()?;
    dev.sync()?;
    Ok(Box::new(move || {
        let i = gates[0].sigmoid()?;
        let f = gates[1].sigmoid()?;
        let g = gates[2].tanh()?;
        let o = gates[3].sigmoid()?;
        c = f.mul(&c)?.add(&i.mul(&g)?)?;
        let h = o.mul(&c.tanh()?)?;
        drop(h);
        for (p, g) in params.iter_mut().zip(&grads) {
            *p = p.sub(&g.scalar_op(ScalarOp::Mul, 0.01)?)?;
        }
        Ok(())
    }))
}

/// No flops or bytes: instead of gflops or gbps these report `us_per_op=` (tiny_ops*) and
/// `dispatches_per_s=` (what goes through the wgtensor device; tiny_ops_raw uses its own).
pub fn cases() -> Vec<Case> {
    vec![
        Case::new("tiny_ops_raw", raw_case),
        Case::new("tiny_ops", tiny_case),
        Case::new("small_op_mix", mix_case),
        Case::new("gpu/sync_raw", sync_raw_case),
    ]
}
