//! GEMM cases and their ceiling, `fma_peak`: a register-only FMA kernel that `of_peak=` divides
//! every GEMM's gflops by (in alternating runs), because the peak of a software adapter is not
//! a published figure and moves with the driver version and the host.

use wgtensor::ops::gemm::{gemm_with_kernel, GemmKernel};
use wgtensor::ops::{gemm, GemmOptions};
use wgtensor::{DType, Device};

use super::inputs::tensor;
use super::{Case, Run};

/// `a x b` in `dtype`; `split_k: Some(1)` forces the unsplit plan (the `*_s1` baselines of
/// `vs_s1=`), `None` lets the planner choose.
pub fn gemm_case(
    dev: &Device,
    a: &[usize],
    b: &[usize],
    dtype: DType,
    split_k: Option<u32>,
) -> wgtensor::Result<Run> {
    let ta = tensor(dev, a, dtype, 1)?;
    let tb = tensor(dev, b, dtype, 2)?;
    dev.sync()?;
    let opts = GemmOptions {
        split_k,
        ..Default::default()
    };
    Ok(Box::new(move || gemm(&ta, &tb, &opts).map(drop)))
}

/// `gemm_case` (f32, the planner's split) on a forced kernel: the A/B twin of a GPU case, so
/// one run times the planner's tile against the one it replaced on the same adapter.
pub fn gemm_kernel_case(
    dev: &Device,
    a: &[usize],
    b: &[usize],
    kernel: GemmKernel,
) -> wgtensor::Result<Run> {
    let ta = tensor(dev, a, DType::F32, 1)?;
    let tb = tensor(dev, b, DType::F32, 2)?;
    dev.sync()?;
    let opts = GemmOptions::default();
    Ok(Box::new(move || {
        gemm_with_kernel(&ta, &tb, &opts, kernel).map(drop)
    }))
}

/// A register-only FMA loop: 6 independent vec4 chains per invocation, the loop body unrolled 4
/// times. On SIMD-per-lane CPU adapters a vec4 occupies 4 vector registers, so 24 accumulators
/// stay in registers and the chains hide FMA latency; the unrolling matters there because every
/// iteration also pays for the loop's execution mask (blending each loop-carried value), which
/// halves the rate of a body of one FMA per chain. The ceiling any kernel here can approach.
const FMA_WGSL: &str = "
struct P { iters: u32, pad0: u32, pad1: u32, pad2: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let x = vec4<f32>(f32(gid.x) * 1e-7, 0.999, 0.998, 0.997);
    let y = vec4<f32>(1e-6);
    var a0 = x; var a1 = x + 1.0; var a2 = x + 2.0; var a3 = x + 3.0; var a4 = x + 4.0; var a5 = x + 5.0;
    for (var i = 0u; i < p.iters; i += 4u) {
        a0 = fma(a0, x, y); a1 = fma(a1, x, y); a2 = fma(a2, x, y);
        a3 = fma(a3, x, y); a4 = fma(a4, x, y); a5 = fma(a5, x, y);
        a0 = fma(a0, x, y); a1 = fma(a1, x, y); a2 = fma(a2, x, y);
        a3 = fma(a3, x, y); a4 = fma(a4, x, y); a5 = fma(a5, x, y);
        a0 = fma(a0, x, y); a1 = fma(a1, x, y); a2 = fma(a2, x, y);
        a3 = fma(a3, x, y); a4 = fma(a4, x, y); a5 = fma(a5, x, y);
        a0 = fma(a0, x, y); a1 = fma(a1, x, y); a2 = fma(a2, x, y);
        a3 = fma(a3, x, y); a4 = fma(a4, x, y); a5 = fma(a5, x, y);
    }
    let s = a0 + a1 + a2 + a3 + a4 + a5;
    out[gid.x] = s.x + s.y + s.z + s.w;
}
";
/// vec4 FMAs per step of `i` in FMA_WGSL (6 chains x 4 lanes; the iterations are a multiple of
/// 4).
const FMA_PER_ITER: f64 = 24.0;
/// Invocations x iterations of one `fma_peak` run: 16k x 8192 on a CPU adapter.
const FMA_WORK: u64 = 1 << 27;

/// The grid of an FMA run of `work` invocation-iterations on an adapter that runs
/// `parallelism` workgroups of 256 at once (`Caps::parallelism`): 8 of FMA_WGSL's 64-wide
/// workgroups per estimated 256-wide slot (enough resident warps to hide FMA latency on a GPU),
/// at least 16k invocations (a CPU adapter's grid) and at most 2^21 (32k workgroups, within
/// every adapter's grid limit); the iterations make up the same work, so the flops of a case
/// do not depend on the adapter.
pub fn fma_grid(parallelism: usize, work: u64) -> (u32, u32) {
    let inv = (parallelism as u64 * 2048)
        .next_power_of_two()
        .clamp(1 << 14, 1 << 21);
    (inv as u32, (work / inv).max(4) as u32)
}

/// FMA_WGSL on plain wgpu (no wgtensor planning in the way), submitted through the device so
/// the harness's sync covers it, on a grid sized from the adapter's parallelism estimate, so
/// that `of_peak=` means the same fraction on a CPU adapter and on a large GPU.
pub fn fma_sized(dev: &Device, work: u64) -> wgtensor::Result<Run> {
    let (invocations, iters) = fma_grid(dev.caps().parallelism, work);
    fma_run(dev, invocations, iters)
}

fn fma_case(dev: &Device) -> wgtensor::Result<Run> {
    fma_sized(dev, FMA_WORK)
}

/// Flops of one FMA run of `work` invocation-iterations.
pub fn fma_flops(work: u64) -> f64 {
    2.0 * FMA_PER_ITER * work as f64
}

/// FMA_WGSL on a grid of `invocations` (a multiple of 64, at most 64 x 65535) running
/// `iters` steps (a multiple of 4) each.
pub fn fma_run(dev: &Device, invocations: u32, iters: u32) -> wgtensor::Result<Run> {
    use wgpu::util::DeviceExt;
    let d = dev.wgpu_device().clone();
    let q = dev.clone();
    let desc = wgpu::ShaderModuleDescriptor {
        label: Some("fma_peak"),
        source: wgpu::ShaderSource::Wgsl(FMA_WGSL.into()),
    };
    // Compiled with the device's own checks, as the kernels it is the ceiling of.
    // SAFETY: FMA_WGSL's one loop runs `iters` steps and its indices are the invocation's own.
    let module =
        unsafe { d.create_shader_module_trusted(desc, dev.shader_checks().runtime_checks()) };
    let pipe = d.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("fma_peak"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let params = d.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: None,
        contents: bytemuck::cast_slice(&[iters, 0, 0, 0]),
        usage: wgpu::BufferUsages::UNIFORM,
    });
    let out = d.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: invocations as u64 * 4,
        usage: wgpu::BufferUsages::STORAGE,
        mapped_at_creation: false,
    });
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
                resource: out.as_entire_binding(),
            },
        ],
    });
    Ok(Box::new(move || {
        let mut e = d.create_command_encoder(&Default::default());
        {
            let mut pass = e.begin_compute_pass(&Default::default());
            pass.set_pipeline(&pipe);
            pass.set_bind_group(0, &bg, &[]);
            pass.dispatch_workgroups(invocations / 64, 1, 1);
        }
        q.submit([e.finish()])?;
        q.sync()
    }))
}

/// fma_peak first (the baseline of every `of_peak=`), then the GEMMs; each `*_s1` case is the
/// same GEMM forced to one K-slice, the baseline of the `vs_s1=` of the case before it.
pub fn cases() -> Vec<Case> {
    let g = |m: f64, n: f64, k: f64, b: f64| 2.0 * m * n * k * b;
    let f32_case = |a: [usize; 2], b: [usize; 2], split_k| {
        move |d: &Device| gemm_case(d, &a, &b, DType::F32, split_k)
    };
    vec![
        Case::new("fma_peak", fma_case).flops(fma_flops(FMA_WORK)),
        Case::new("gemm_1024", f32_case([1024, 1024], [1024, 1024], None))
            .flops(g(1024.0, 1024.0, 1024.0, 1.0)),
        Case::new("bgemm", |d| {
            gemm_case(d, &[32, 256, 256], &[32, 256, 256], DType::F32, None)
        })
        .flops(g(256.0, 256.0, 256.0, 32.0)),
        // Long K against a small output: the shape split-k exists for.
        Case::new("gemm_splitk", f32_case([64, 8192], [8192, 64], None))
            .flops(g(64.0, 64.0, 8192.0, 1.0)),
        Case::new("gemm_splitk_s1", f32_case([64, 8192], [8192, 64], Some(1)))
            .flops(g(64.0, 64.0, 8192.0, 1.0)),
        // One output tile of the subgroup kernel: fewer tiles than cores, where split-k pays on
        // a CPU adapter too (gemm_splitk's two tiles already cover two cores).
        Case::new("gemm_splitk_1tile", f32_case([32, 8192], [8192, 32], None))
            .flops(g(32.0, 32.0, 8192.0, 1.0)),
        Case::new(
            "gemm_splitk_1tile_s1",
            f32_case([32, 8192], [8192, 32], Some(1)),
        )
        .flops(g(32.0, 32.0, 8192.0, 1.0)),
        Case::new("gemm_1024_f16", |d| {
            gemm_case(d, &[1024, 1024], &[1024, 1024], DType::F16, None)
        })
        .flops(g(1024.0, 1024.0, 1024.0, 1.0))
        .f16_only(),
    ]
}
