//! Kernel benchmarks: `cargo bench --bench kernels -- [--list] [--json] [CASE...]`.
//!
//! One line per case: `case=<name> ms=<median> gflops=<x> first_ms=<y>`. `ms` is the median of
//! at least 7 timed runs after warm-up, each waiting for the GPU to finish. `first_ms` is the
//! cold first call in a fresh process (this binary re-runs itself with `--first CASE`), pipeline
//! compilation included. Where an issue gives a peer figure on this adapter, `peer_ms` and
//! `vs_peer` (peer time / ours) are printed too. Timings on a shared CPU are noisy: compare
//! ratios from one run, never absolute times across runs.

use std::time::Instant;

use wgtensor::ops::{gemm, GemmOptions};
use wgtensor::{DType, Device, Tensor};

type Run = Box<dyn FnMut() -> wgtensor::Result<()>>;

struct Case {
    name: &'static str,
    /// Floating-point operations of one run (for gflops).
    flops: f64,
    /// Median from the peer measurement on this adapter, if any.
    peer_ms: Option<f64>,
    needs_f16: bool,
    setup: fn(&Device) -> wgtensor::Result<Run>,
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

/// A register-only FMA loop with the same shape of work as the GEMM kernel's inner loop
/// (16 vec4 accumulators per invocation): the ceiling any GEMM here can approach.
const FMA_WGSL: &str = "
struct P { iters: u32, pad0: u32, pad1: u32, pad2: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let x = vec4<f32>(f32(gid.x) * 1e-7, 0.999, 0.998, 0.997);
    let y = vec4<f32>(1e-6);
    var a0 = x; var a1 = x + 1.0; var a2 = x + 2.0; var a3 = x + 3.0;
    var a4 = x + 4.0; var a5 = x + 5.0; var a6 = x + 6.0; var a7 = x + 7.0;
    var a8 = x + 8.0; var a9 = x + 9.0; var a10 = x + 10.0; var a11 = x + 11.0;
    var a12 = x + 12.0; var a13 = x + 13.0; var a14 = x + 14.0; var a15 = x + 15.0;
    for (var i = 0u; i < p.iters; i++) {
        a0 = fma(a0, x, y); a1 = fma(a1, x, y); a2 = fma(a2, x, y); a3 = fma(a3, x, y);
        a4 = fma(a4, x, y); a5 = fma(a5, x, y); a6 = fma(a6, x, y); a7 = fma(a7, x, y);
        a8 = fma(a8, x, y); a9 = fma(a9, x, y); a10 = fma(a10, x, y); a11 = fma(a11, x, y);
        a12 = fma(a12, x, y); a13 = fma(a13, x, y); a14 = fma(a14, x, y); a15 = fma(a15, x, y);
    }
    let s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11 + a12 + a13 + a14 + a15;
    out[gid.x] = s.x + s.y + s.z + s.w;
}
";
const FMA_INVOCATIONS: u32 = 64 * 256;
const FMA_ITERS: u32 = 2048;

fn fma_case(dev: &Device) -> wgtensor::Result<Run> {
    use wgpu::util::DeviceExt;
    let d = dev.wgpu_device().clone();
    let q = dev.wgpu_queue().clone();
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
        q.submit([e.finish()]);
        // Submitted outside the runtime's queue, so wait here rather than in Device::sync.
        d.poll(wgpu::PollType::wait_indefinitely())
            .map(drop)
            .map_err(|e| wgtensor::Error::NoAdapter(e.to_string()))
    }))
}

fn cases() -> Vec<Case> {
    let g = |m: f64, n: f64, k: f64, b: f64| 2.0 * m * n * k * b;
    vec![
        Case {
            name: "fma_peak",
            flops: 2.0 * 64.0 * FMA_ITERS as f64 * FMA_INVOCATIONS as f64,
            peer_ms: None,
            needs_f16: false,
            setup: fma_case,
        },
        Case {
            name: "gemm_1024",
            flops: g(1024.0, 1024.0, 1024.0, 1.0),
            peer_ms: Some(179.0),
            needs_f16: false,
            setup: |d| gemm_case(d, &[1024, 1024], &[1024, 1024], DType::F32, None),
        },
        Case {
            name: "bgemm",
            flops: g(256.0, 256.0, 256.0, 32.0),
            peer_ms: Some(119.0),
            needs_f16: false,
            setup: |d| gemm_case(d, &[32, 256, 256], &[32, 256, 256], DType::F32, None),
        },
        Case {
            name: "gemm_splitk",
            flops: g(64.0, 64.0, 8192.0, 1.0),
            peer_ms: Some(7.8),
            needs_f16: false,
            setup: |d| gemm_case(d, &[64, 8192], &[8192, 64], DType::F32, None),
        },
        Case {
            name: "gemm_splitk_s1",
            flops: g(64.0, 64.0, 8192.0, 1.0),
            peer_ms: None,
            needs_f16: false,
            setup: |d| gemm_case(d, &[64, 8192], &[8192, 64], DType::F32, Some(1)),
        },
        Case {
            name: "gemm_1024_f16",
            flops: g(1024.0, 1024.0, 1024.0, 1.0),
            peer_ms: None,
            needs_f16: true,
            setup: |d| gemm_case(d, &[1024, 1024], &[1024, 1024], DType::F16, None),
        },
    ]
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

struct Row {
    name: &'static str,
    ms: f64,
    gflops: f64,
    first_ms: Option<f64>,
    peer_ms: Option<f64>,
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
    let mut rows = Vec::new();
    for case in cases() {
        if !wanted.is_empty() && !wanted.iter().any(|w| *w == case.name) {
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
        // At least 7 timed runs, more for short cases (up to ~2 s of timing).
        let probe = time_once(&dev, &mut run)?;
        let n = ((2000.0 / probe.max(0.1)) as usize).clamp(7, 51);
        let mut t: Vec<f64> = (0..n)
            .map(|_| time_once(&dev, &mut run))
            .collect::<wgtensor::Result<_>>()?;
        t.sort_by(f64::total_cmp);
        let ms = t[t.len() / 2];
        let row = Row {
            name: case.name,
            ms,
            gflops: case.flops / ms / 1e6,
            first_ms,
            peer_ms: case.peer_ms,
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
                format!(
                    "{{\"case\":\"{}\",\"ms\":{:.3},\"gflops\":{:.2},\"first_ms\":{},\"peer_ms\":{}}}",
                    r.name,
                    r.ms,
                    r.gflops,
                    r.first_ms.map_or("null".into(), |v| format!("{v:.2}")),
                    r.peer_ms.map_or("null".into(), |v| format!("{v}"))
                )
            })
            .collect();
        println!("[{}]", items.join(","));
    }
    Ok(())
}

fn print_line(r: &Row) {
    let mut s = format!("case={} ms={:.3} gflops={:.2}", r.name, r.ms, r.gflops);
    match r.first_ms {
        Some(f) => s += &format!(" first_ms={f:.1}"),
        None => s += " first_ms=?",
    }
    if let Some(p) = r.peer_ms {
        s += &format!(" peer_ms={p} vs_peer={:.2}x", p / r.ms);
    }
    println!("{s}");
}
