//! Kernel benchmarks: `cargo bench --bench kernels -- [--list] [--json] [CASE...]`.
//!
//! One line per case: `case=<name> ms=<median> gflops=<x> first_ms=<y>`. `ms` is the median of
//! at least 7 timed runs after warm-up, each waiting for the GPU to finish. `first_ms` is the
//! cold first call in a fresh process (this binary re-runs itself with `--first CASE`), pipeline
//! compilation included. Where an issue gives a peer figure on this adapter, `peer_ms` and
//! `vs_peer` (peer time / ours) are printed too. Timings on a shared CPU are noisy: compare
//! ratios from one run, never absolute times across runs.
//!
//! Bandwidth-bound cases (batch norm) print `gbps=` instead of `gflops=`: effective bytes / time,
//! where the effective bytes are the least any implementation must move, every tensor element
//! read or written once (see each case's `bytes`). `copy_bw` measures the adapter's plain buffer
//! copy on the same byte convention (bytes read + bytes written); `copy_shader` is the same copy
//! through a compute shader (on CPU adapters a storage load is a per-lane loop, so shaders stay
//! well below the driver's memcpy). Both run whenever a bandwidth case is selected, and
//! bandwidth cases then also print `of_copy=` (their gbps / copy_bw's gbps in the same run).
//!
//! Paired ratios come from runs alternating with a baseline (see [`Paired`]), so host-speed drift
//! cancels: `of_shader=` (bandwidth cases: gbps / copy_shader's gbps), `of_peak=` (GEMM cases:
//! gflops / fma_peak's gflops) and `vs_s1=` (gemm_splitk*: the S=1 time / the automatic plan's).
// Native only (blocking device, readback and wall clock): an empty program on wasm32.
#![cfg_attr(target_arch = "wasm32", no_main)]
#![cfg(not(target_arch = "wasm32"))]

use std::time::Instant;

use wgtensor::ops::{
    batch_norm_backward, batch_norm_inference, batch_norm_train, gemm, Activation, BatchNormState,
    GemmOptions, Rnn, RnnKind, RnnWeights,
};
use wgtensor::{DType, Device, Tensor};

#[path = "cases/conv.rs"]
mod conv;
#[path = "cases/tiny.rs"]
mod tiny;

type Run = Box<dyn FnMut() -> wgtensor::Result<()>>;
/// Builds a case's inputs on the device and returns its timed body.
type Setup = Box<dyn Fn(&Device) -> wgtensor::Result<Run>>;

struct Case {
    name: &'static str,
    /// Floating-point operations of one run (for gflops); 0 for bandwidth-bound cases.
    flops: f64,
    /// Effective bytes of one run (for gbps): the least any implementation must read plus write;
    /// 0 for compute-bound cases.
    bytes: f64,
    /// Median from the peer measurement on this adapter, if any.
    peer_ms: Option<f64>,
    needs_f16: bool,
    setup: Setup,
}

fn data(n: usize, seed: u32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(2654435761).wrapping_add(12345);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

fn tensor(dev: &Device, shape: &[usize], dtype: DType, seed: u32) -> wgtensor::Result<Tensor> {
    let n = shape.iter().product();
    Tensor::from_slice(dev, &data(n, seed), shape)?.to_dtype(dtype)
}

fn gemm_case(
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
/// vec4 FMAs per step of `i` in FMA_WGSL (6 chains x 4 lanes; FMA_ITERS is a multiple of 4).
const FMA_PER_ITER: f64 = 24.0;
const FMA_INVOCATIONS: u32 = 64 * 256;
const FMA_ITERS: u32 = 8192;

fn fma_case(dev: &Device) -> wgtensor::Result<Run> {
    use wgpu::util::DeviceExt;
    let d = dev.wgpu_device().clone();
    let q = dev.clone();
    let module = d.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("fma_peak"),
        source: wgpu::ShaderSource::Wgsl(FMA_WGSL.into()),
    });
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
        contents: bytemuck::cast_slice(&[FMA_ITERS, 0, 0, 0]),
        usage: wgpu::BufferUsages::UNIFORM,
    });
    let out = d.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: FMA_INVOCATIONS as u64 * 4,
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
            pass.dispatch_workgroups(FMA_INVOCATIONS / 64, 1, 1);
        }
        q.submit([e.finish()])?;
        q.sync()
    }))
}

/// The batch-norm benchmark shape (ResNet-50's first stage), f32.
const BN_SHAPE: [usize; 4] = [32, 64, 56, 56];
const BN_BYTES: f64 = (32 * 64 * 56 * 56 * 4) as f64;
/// Bytes one `copy_bw` run moves: the source read and the destination written once.
const COPY_BYTES: f64 = 2.0 * BN_BYTES;

/// Training forward with affine parameters and running statistics (momentum 0.1).
fn bn_train_case(dev: &Device) -> wgtensor::Result<Run> {
    let c = BN_SHAPE[1];
    let x = tensor(dev, &BN_SHAPE, DType::F32, 1)?;
    let g = tensor(dev, &[c], DType::F32, 2)?.add_scalar(2.0)?;
    let b = tensor(dev, &[c], DType::F32, 3)?;
    let mut st = BatchNormState::new(dev, c, DType::F32)?;
    dev.sync()?;
    Ok(Box::new(move || {
        batch_norm_train(&x, Some(&g), Some(&b), Some(&mut st), 1e-5).map(drop)
    }))
}

fn bn_backward_case(dev: &Device) -> wgtensor::Result<Run> {
    let c = BN_SHAPE[1];
    let x = tensor(dev, &BN_SHAPE, DType::F32, 1)?;
    let dy = tensor(dev, &BN_SHAPE, DType::F32, 4)?;
    let g = tensor(dev, &[c], DType::F32, 2)?.add_scalar(2.0)?;
    let (_, mean, invstd) = batch_norm_train(&x, Some(&g), None, None, 1e-5)?;
    dev.sync()?;
    Ok(Box::new(move || {
        batch_norm_backward(&dy, &x, &mean, &invstd, Some(&g)).map(drop)
    }))
}

fn bn_infer_case(dev: &Device) -> wgtensor::Result<Run> {
    let c = BN_SHAPE[1];
    let x = tensor(dev, &BN_SHAPE, DType::F32, 1)?;
    let g = tensor(dev, &[c], DType::F32, 2)?.add_scalar(2.0)?;
    let b = tensor(dev, &[c], DType::F32, 3)?;
    let rm = tensor(dev, &[c], DType::F32, 5)?;
    let rv = tensor(dev, &[c], DType::F32, 6)?.add_scalar(2.0)?;
    dev.sync()?;
    Ok(Box::new(move || {
        batch_norm_inference(&x, &rm, &rv, Some(&g), Some(&b), 1e-5, Activation::None).map(drop)
    }))
}

/// A plain buffer-to-buffer copy of the batch-norm tensor's size (`copy_buffer_to_buffer`),
/// submitted directly to the queue: the adapter's copy bandwidth.
fn copy_case(dev: &Device) -> wgtensor::Result<Run> {
    let d = dev.wgpu_device().clone();
    let q = dev.clone();
    let size = BN_BYTES as u64;
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
/// contiguous block): the ceiling of any shader-based bandwidth kernel on this adapter, which
/// on CPU adapters sits well below the driver's memcpy (`copy_bw`).
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

fn cases() -> Vec<Case> {
    let g = |m: f64, n: f64, k: f64, b: f64| 2.0 * m * n * k * b;
    let mut v = vec![
        Case {
            name: "fma_peak",
            flops: 2.0 * FMA_PER_ITER * FMA_ITERS as f64 * FMA_INVOCATIONS as f64,
            bytes: 0.0,
            peer_ms: None,
            needs_f16: false,
            setup: Box::new(fma_case),
        },
        Case {
            name: "gemm_1024",
            flops: g(1024.0, 1024.0, 1024.0, 1.0),
            bytes: 0.0,
            peer_ms: Some(179.0),
            needs_f16: false,
            setup: Box::new(|d| gemm_case(d, &[1024, 1024], &[1024, 1024], DType::F32, None)),
        },
        Case {
            name: "bgemm",
            flops: g(256.0, 256.0, 256.0, 32.0),
            bytes: 0.0,
            peer_ms: Some(119.0),
            needs_f16: false,
            setup: Box::new(|d| gemm_case(d, &[32, 256, 256], &[32, 256, 256], DType::F32, None)),
        },
        Case {
            name: "gemm_splitk",
            flops: g(64.0, 64.0, 8192.0, 1.0),
            bytes: 0.0,
            peer_ms: Some(7.8),
            needs_f16: false,
            setup: Box::new(|d| gemm_case(d, &[64, 8192], &[8192, 64], DType::F32, None)),
        },
        Case {
            name: "gemm_splitk_s1",
            flops: g(64.0, 64.0, 8192.0, 1.0),
            bytes: 0.0,
            peer_ms: None,
            needs_f16: false,
            setup: Box::new(|d| gemm_case(d, &[64, 8192], &[8192, 64], DType::F32, Some(1))),
        },
        // One output tile of the subgroup kernel: fewer tiles than cores, where split-k pays on
        // a CPU adapter too (gemm_splitk's two tiles already cover two cores).
        Case {
            name: "gemm_splitk_1tile",
            flops: g(32.0, 32.0, 8192.0, 1.0),
            bytes: 0.0,
            peer_ms: None,
            needs_f16: false,
            setup: Box::new(|d| gemm_case(d, &[32, 8192], &[8192, 32], DType::F32, None)),
        },
        Case {
            name: "gemm_splitk_1tile_s1",
            flops: g(32.0, 32.0, 8192.0, 1.0),
            bytes: 0.0,
            peer_ms: None,
            needs_f16: false,
            setup: Box::new(|d| gemm_case(d, &[32, 8192], &[8192, 32], DType::F32, Some(1))),
        },
        Case {
            name: "gemm_1024_f16",
            flops: g(1024.0, 1024.0, 1024.0, 1.0),
            bytes: 0.0,
            peer_ms: None,
            needs_f16: true,
            setup: Box::new(|d| gemm_case(d, &[1024, 1024], &[1024, 1024], DType::F16, None)),
        },
        Case {
            name: "copy_bw",
            flops: 0.0,
            bytes: COPY_BYTES,
            peer_ms: None,
            needs_f16: false,
            setup: Box::new(copy_case),
        },
        Case {
            name: "copy_shader",
            flops: 0.0,
            bytes: 2.0 * BN_BYTES,
            peer_ms: None,
            needs_f16: false,
            setup: Box::new(copy_shader_case),
        },
        Case {
            name: "batchnorm_train",
            flops: 0.0,
            // x read once, y written once (the per-channel vectors, 2 KiB, are not counted).
            // The peer figure (~0.3 GB/s) counts x alone; on this convention it is ~0.55.
            bytes: 2.0 * BN_BYTES,
            peer_ms: Some(94.0),
            needs_f16: false,
            setup: Box::new(bn_train_case),
        },
        Case {
            name: "batchnorm_backward",
            flops: 0.0,
            // dy and x read once, dx written once.
            bytes: 3.0 * BN_BYTES,
            peer_ms: None,
            needs_f16: false,
            setup: Box::new(bn_backward_case),
        },
        Case {
            name: "batchnorm_infer",
            flops: 0.0,
            // x read once, y written once.
            bytes: 2.0 * BN_BYTES,
            peer_ms: None,
            needs_f16: false,
            setup: Box::new(bn_infer_case),
        },
        Case {
            name: "lstm_seq",
            flops: rnn_flops(4),
            bytes: 0.0,
            peer_ms: Some(433.0),
            needs_f16: false,
            setup: Box::new(|d| rnn_case(d, RnnKind::Lstm)),
        },
        Case {
            name: "gru_seq",
            flops: rnn_flops(3),
            bytes: 0.0,
            peer_ms: Some(355.0),
            needs_f16: false,
            setup: Box::new(|d| rnn_case(d, RnnKind::Gru)),
        },
        Case {
            name: "lstm_seq_backward",
            // Forward, then backward: the recurrent gradient of every step plus the three
            // whole-sequence GEMMs (dW_ih, dW_hh, dx), about twice the forward's flops.
            flops: 3.0 * rnn_flops(4),
            bytes: 0.0,
            peer_ms: None,
            needs_f16: false,
            setup: Box::new(rnn_backward_case),
        },
    ];
    v.extend(conv::cases());
    v.extend(tiny::cases());
    v
}

/// lstm_seq / gru_seq: input 64, hidden 64, batch 256, T 50, one layer, forward.
const RNN: (usize, usize, usize, usize) = (50, 256, 64, 64);

/// GEMM flops of a forward: input projection plus the recurrent product of every step.
fn rnn_flops(gates: usize) -> f64 {
    let (t, b, i, h) = RNN;
    2.0 * (t * b * gates * h * (i + h)) as f64
}

/// The lstm_seq / gru_seq layer and input, weights in PyTorch's init range
/// U(-1/sqrt(H), 1/sqrt(H)) so the gates stay out of saturation.
fn rnn_problem(dev: &Device, kind: RnnKind) -> wgtensor::Result<(Rnn, Tensor)> {
    let (t, b, i, h) = RNN;
    let g = kind.gates();
    let scale = 1.0 / (h as f32).sqrt();
    let w = |shape: &[usize], seed| -> wgtensor::Result<Tensor> {
        let n = shape.iter().product();
        Tensor::from_slice(
            dev,
            &data(n, seed).iter().map(|v| v * scale).collect::<Vec<_>>(),
            shape,
        )
    };
    let weights = RnnWeights::new(
        kind,
        &w(&[g * h, i], 11)?,
        &w(&[g * h, h], 12)?,
        Some(&w(&[g * h], 13)?),
        Some(&w(&[g * h], 14)?),
    )?;
    let rnn = Rnn::new(kind, 1, false, false, vec![weights])?;
    let x = tensor(dev, &[t, b, i], DType::F32, 15)?;
    Ok((rnn, x))
}

fn rnn_case(dev: &Device, kind: RnnKind) -> wgtensor::Result<Run> {
    let (rnn, x) = rnn_problem(dev, kind)?;
    dev.sync()?;
    Ok(Box::new(move || rnn.forward(&x, None, None).map(drop)))
}

/// lstm_seq_backward: forward_train + backward of the lstm_seq problem, dy of ones-scale data.
fn rnn_backward_case(dev: &Device) -> wgtensor::Result<Run> {
    let (t, b, _, h) = RNN;
    let (rnn, x) = rnn_problem(dev, RnnKind::Lstm)?;
    let dy = tensor(dev, &[t, b, h], DType::F32, 16)?;
    dev.sync()?;
    Ok(Box::new(move || {
        let (_, saved) = rnn.forward_train(&x, None, None)?;
        rnn.backward(&saved, &dy, None, None).map(drop)
    }))
}

fn time_once(dev: &Device, run: &mut Run) -> wgtensor::Result<f64> {
    let t = Instant::now();
    run()?;
    dev.sync()?;
    Ok(t.elapsed().as_secs_f64() * 1e3)
}

/// The cold first call: in a fresh process, device already open, nothing compiled yet.
fn first_call(name: &str) -> wgtensor::Result<f64> {
    let dev = Device::new()?;
    let case = cases()
        .into_iter()
        .find(|c| c.name == name)
        .expect("known case");
    let mut run = (case.setup)(&dev)?;
    time_once(&dev, &mut run)
}

fn first_ms_in_fresh_process(name: &str) -> Option<f64> {
    let exe = std::env::current_exe().ok()?;
    let out = std::process::Command::new(exe)
        .args(["--first", name])
        .output()
        .ok()?;
    String::from_utf8(out.stdout).ok()?.trim().parse().ok()
}

/// Ratios reported against a baseline case timed in alternation with the case itself: pair i
/// runs the baseline, then the case, and contributes baseline_ms / case_ms; the printed value is
/// the median over the pairs, scaled to the named quantity. On a shared host whose speed drifts
/// by 2x within minutes, a pair sees the same machine, so these ratios hold where two medians
/// taken seconds apart do not.
struct Paired {
    label: &'static str,
    baseline: &'static str,
    /// Multiplies baseline_ms / case_ms (e.g. byte or flop ratios, so the result compares rates).
    scale: fn(&Case, &Case) -> f64,
    /// Report case_ms / baseline_ms instead (a cost relative to the baseline, e.g. `vs_raw`).
    inverse: bool,
}

fn paired_for(case: &Case) -> Vec<Paired> {
    let mut v = Vec::new();
    let copy = case.name == "copy_bw" || case.name == "copy_shader";
    if case.bytes > 0.0 && !copy {
        v.push(Paired {
            label: "of_shader",
            baseline: "copy_shader",
            scale: |c, b| c.bytes / b.bytes,
            inverse: false,
        });
    }
    if case.name.contains("gemm") {
        v.push(Paired {
            label: "of_peak",
            baseline: "fma_peak",
            scale: |c, b| c.flops / b.flops,
            inverse: false,
        });
    }
    let s1 = match case.name {
        "gemm_splitk" => Some("gemm_splitk_s1"),
        "gemm_splitk_1tile" => Some("gemm_splitk_1tile_s1"),
        _ => None,
    };
    if let Some(baseline) = s1 {
        v.push(Paired {
            label: "vs_s1",
            baseline,
            scale: |_, _| 1.0,
            inverse: false,
        });
    }
    if case.name == "tiny_ops" {
        v.push(Paired {
            label: "vs_raw",
            baseline: "tiny_ops_raw",
            scale: |_, _| 1.0,
            inverse: true,
        });
    }
    v
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

struct Row {
    name: &'static str,
    ms: f64,
    gflops: Option<f64>,
    gbps: Option<f64>,
    /// gbps / copy_bw's gbps in the same run (bandwidth cases).
    of_copy: Option<f64>,
    /// Paired ratios (see [`Paired`]), in print order.
    paired: Vec<(&'static str, f64)>,
    first_ms: Option<f64>,
    peer_ms: Option<f64>,
    /// Small-op cases: dispatches recorded per second of the median run.
    dispatches_per_s: Option<f64>,
}

fn main() -> wgtensor::Result<()> {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    if let Some(i) = args.iter().position(|a| a == "--first") {
        let name = args.get(i + 1).map(String::as_str).unwrap_or("");
        println!("{:.2}", first_call(name)?);
        return Ok(());
    }
    if args.iter().any(|a| a == "--list") {
        for c in cases() {
            println!("{}", c.name);
        }
        return Ok(());
    }
    let json = args.iter().any(|a| a == "--json");
    let wanted: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let dev = Device::new()?;
    let info = dev.adapter_info();
    if !json {
        println!(
            "# adapter: {} ({:?}) {}",
            info.name, info.backend, info.driver_info
        );
    }
    let all = cases();
    // Bandwidth cases are reported against copy_bw of the same run, so selecting one selects
    // copy_bw too (it is listed, and so measured, before them).
    // A case name selects itself; a family prefix (`conv1d_groups_sweep`) selects its lines.
    let selected = |name: &str| {
        wanted.is_empty()
            || wanted.iter().any(|w| {
                name == w.as_str()
                    || name
                        .strip_prefix(w.as_str())
                        .is_some_and(|r| r.starts_with('/'))
            })
    };
    let wants_copy = all.iter().any(|c| c.bytes > 0.0 && selected(c.name));
    let mut rows = Vec::new();
    // Baselines of paired ratios, set up once on first use.
    let mut baselines: Vec<(&'static str, Run)> = Vec::new();
    for case in &all {
        let copy_case = case.name == "copy_bw" || case.name == "copy_shader";
        if !(selected(case.name) || copy_case && wants_copy) {
            continue;
        }
        if case.needs_f16 && !dev.supports_f16() {
            println!("case={} skipped=adapter-lacks-SHADER_F16", case.name);
            continue;
        }
        let first_ms = first_ms_in_fresh_process(case.name);
        let mut run = (case.setup)(&dev)?;
        for _ in 0..2 {
            time_once(&dev, &mut run)?;
        }
        let before = dev.stats().dispatches;
        time_once(&dev, &mut run)?;
        let dispatches = dev.stats().dispatches - before;
        // At least 7 timed runs, more for short cases (up to ~2 s of timing).
        let probe = time_once(&dev, &mut run)?;
        let n = ((2000.0 / probe.max(0.1)) as usize).clamp(7, 51);
        let t: Vec<f64> = (0..n)
            .map(|_| time_once(&dev, &mut run))
            .collect::<wgtensor::Result<_>>()?;
        let ms = median(t);
        let mut paired = Vec::new();
        for pr in paired_for(case) {
            let Some(bcase) = all.iter().find(|c| c.name == pr.baseline) else {
                continue;
            };
            if !baselines.iter().any(|(nm, _)| *nm == pr.baseline) {
                let mut b = (bcase.setup)(&dev)?;
                time_once(&dev, &mut b)?;
                baselines.push((pr.baseline, b));
            }
            let base = &mut baselines
                .iter_mut()
                .find(|(nm, _)| *nm == pr.baseline)
                .expect("just inserted")
                .1;
            let mut r = Vec::with_capacity(n);
            for _ in 0..n {
                let tb = time_once(&dev, base)?;
                let tc = time_once(&dev, &mut run)?;
                r.push(if pr.inverse { tc / tb } else { tb / tc });
            }
            paired.push((pr.label, median(r) * (pr.scale)(case, bcase)));
        }
        let gbps = (case.bytes > 0.0).then(|| case.bytes / ms / 1e6);
        let gbps_of = |name: &str| {
            rows.iter()
                .find(|r: &&Row| r.name == name)
                .and_then(|r| r.gbps)
        };
        let copy_gbps = gbps_of("copy_bw");
        let row = Row {
            name: case.name,
            ms,
            gflops: (case.flops > 0.0).then(|| case.flops / ms / 1e6),
            gbps,
            of_copy: match (gbps, copy_gbps) {
                (Some(g), Some(c)) if case.name != "copy_bw" => Some(g / c),
                _ => None,
            },
            paired,
            first_ms,
            peer_ms: case.peer_ms,
            dispatches_per_s: (dispatches > 0 && case.flops == 0.0 && case.bytes == 0.0)
                .then(|| dispatches as f64 / ms * 1e3),
        };
        if !json {
            print_line(&row);
        }
        rows.push(row);
    }
    if json {
        let items: Vec<String> = rows
            .iter()
            .map(|r| {
                let opt = |v: Option<f64>| v.map_or("null".into(), |v| format!("{v:.3}"));
                let paired: String = r
                    .paired
                    .iter()
                    .map(|(l, v)| format!(",\"{l}\":{v:.3}"))
                    .collect();
                format!(
                    "{{\"case\":\"{}\",\"ms\":{:.3},\"gflops\":{},\"gbps\":{},\"of_copy\":{}{},\"first_ms\":{},\"peer_ms\":{}}}",
                    r.name,
                    r.ms,
                    opt(r.gflops),
                    opt(r.gbps),
                    opt(r.of_copy),
                    paired,
                    opt(r.first_ms),
                    r.peer_ms.map_or("null".into(), |v| format!("{v}"))
                )
            })
            .collect();
        println!("[{}]", items.join(","));
    }
    Ok(())
}

fn print_line(r: &Row) {
    let mut s = format!("case={} ms={:.3}", r.name, r.ms);
    if let Some(g) = r.gflops {
        s += &format!(" gflops={g:.2}");
    }
    if let Some(g) = r.gbps {
        s += &format!(" gbps={g:.2}");
    }
    if let Some(f) = r.of_copy {
        s += &format!(" of_copy={f:.2}");
    }
    for (l, v) in &r.paired {
        s += &format!(" {l}={v:.2}");
    }
    if let Some(d) = r.dispatches_per_s {
        s += &format!(" dispatches_per_s={d:.0}");
    }
    if r.name.starts_with("tiny_ops") {
        s += &format!(" us_per_op={:.1}", r.ms * 1e3 / tiny::CHAIN as f64);
    }
    match r.first_ms {
        Some(f) => s += &format!(" first_ms={f:.1}"),
        None => s += " first_ms=?",
    }
    if let Some(p) = r.peer_ms {
        s += &format!(" peer_ms={p} vs_peer={:.2}x", p / r.ms);
    }
    println!("{s}");
}
