//! Bandwidth baselines, on the batch-norm tensor's size and the same byte convention (bytes
//! read + bytes written): what the bandwidth cases are measured against, in the same run.
//!
//! - `copy_bw`: the adapter's plain buffer copy; bandwidth cases print `of_copy=` (their gbps
//!   / its gbps).
//! - `copy_shader`: the same copy through a compute shader; bandwidth cases print `of_shader=`
//!   (paired with it). On CPU adapters a storage load is a per-lane loop, so every shader,
//!   this one included, stays well below the driver's memcpy: this is the ceiling a shader can
//!   reach, `copy_bw` is not.

use wgtensor::Device;

use super::batchnorm::BN_BYTES;
use super::{Case, Run};

/// A plain buffer-to-buffer copy (`copy_buffer_to_buffer`), submitted directly to the queue.
fn copy_case(dev: &Device) -> wgtensor::Result<Run> {
    copy_run(dev, BN_BYTES as u64)
}

/// [`copy_case`] on buffers of `size` bytes.
pub fn copy_run(dev: &Device, size: u64) -> wgtensor::Result<Run> {
    let d = dev.wgpu_device().clone();
    let q = dev.clone();
    let usage = wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
    let mk = || {
        d.create_buffer(&wgpu::BufferDescriptor {
            label: Some("copy_bw"),
            size,
            usage,
            mapped_at_creation: false,
        })
    };
    let (src, dst) = (mk(), mk());
    // Fill the source once so the copy reads committed memory.
    let mut e = d.create_command_encoder(&Default::default());
    e.clear_buffer(&src, 0, None);
    q.submit([e.finish()])?;
    Ok(Box::new(move || {
        let mut e = d.create_command_encoder(&Default::default());
        e.copy_buffer_to_buffer(&src, 0, &dst, 0, size);
        q.submit([e.finish()])?;
        q.sync()
    }))
}

/// The same copy through a compute shader (vec4 loads and stores, each workgroup streaming a
/// contiguous block).
const COPY_WGSL: &str = "
struct P { n4: u32, per: u32, pad0: u32, pad1: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> dst: array<vec4<f32>>;
override WG: u32 = 64u;
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lane: u32) {
    let base = wid.x * WG * p.per + lane;
    // Whole iterations first with no test inside the loop (a per-element branch puts the loop
    // under an execution mask on CPU adapters and halves its speed), then the ragged tail.
    let avail = (p.n4 - min(p.n4, wid.x * WG * p.per)) / WG;
    let full = min(p.per, avail);
    for (var k = 0u; k < full; k++) {
        dst[base + k * WG] = src[base + k * WG];
    }
    let i = base + full * WG;
    if (full < p.per && i < p.n4) {
        dst[i] = src[i];
    }
}
";

fn copy_shader_case(dev: &Device) -> wgtensor::Result<Run> {
    use wgpu::util::DeviceExt;
    let d = dev.wgpu_device().clone();
    let q = dev.clone();
    // 8-lane workgroups with long loops on CPU adapters (one SIMD register streams a block),
    // 64-lane ones elsewhere.
    let cpu = dev.adapter_info().device_type == wgpu::DeviceType::Cpu;
    let (wg, per) = if cpu { (8u32, 512u32) } else { (64, 16) };
    let n4 = (BN_BYTES / 16.0) as u32;
    let module = d.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("copy_shader"),
        source: wgpu::ShaderSource::Wgsl(COPY_WGSL.into()),
    });
    let pipe = d.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("copy_shader"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: wgpu::PipelineCompilationOptions {
            constants: &[("WG", wg as f64)],
            ..Default::default()
        },
        cache: None,
    });
    let params = d.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: None,
        contents: bytemuck::cast_slice(&[n4, per, 0, 0]),
        usage: wgpu::BufferUsages::UNIFORM,
    });
    let mk = || {
        d.create_buffer(&wgpu::BufferDescriptor {
            label: Some("copy_shader"),
            size: BN_BYTES as u64,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        })
    };
    let (src, dst) = (mk(), mk());
    let bg = d.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipe.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry {
                binding: 0,
                resource: params.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: src.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 2,
                resource: dst.as_entire_binding(),
            },
        ],
    });
    let groups = n4.div_ceil(wg * per);
    Ok(Box::new(move || {
        let mut e = d.create_command_encoder(&Default::default());
        {
            let mut pass = e.begin_compute_pass(&Default::default());
            pass.set_pipeline(&pipe);
            pass.set_bind_group(0, &bg, &[]);
            pass.dispatch_workgroups(groups, 1, 1);
        }
        q.submit([e.finish()])?;
        q.sync()
    }))
}

/// Both copies read the source and write the destination once: 2 x BN_BYTES per run.
pub fn cases() -> Vec<Case> {
    vec![
        Case::new("copy_bw", copy_case).bytes(2.0 * BN_BYTES),
        Case::new("copy_shader", copy_shader_case).bytes(2.0 * BN_BYTES),
    ]
}
