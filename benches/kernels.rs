//! Kernel benchmarks: `cargo bench --bench kernels -- [--list] [--json] [CASE...]`; see
//! docs/BENCHMARKS.md for what each case measures and how to read the figures.
//!
//! This file is the harness: the command line, timing, paired ratios and output. The cases live
//! in `cases/`, one file per kernel family, each with a `cases()` list.
//!
//! One line per case: `case=<name> ms=<median> gflops=<x> first_warm_ms=<w> first_ms=<y>`. `ms` is the median of
//! at least 7 timed runs after warm-up, each waiting for the GPU to finish. `first_ms` is the
//! cold first call in a fresh process (this binary re-runs itself with `--first CASE`), pipeline
//! compilation included, with the driver's shader caches disabled (`MESA_SHADER_CACHE_DISABLE`);
//! `first_warm_ms` the same with them warm. Timings on a shared CPU are noisy: compare ratios from one run, never
//! absolute times across runs.
//!
//! Bandwidth-bound cases (batch norm) print `gbps=` instead of `gflops=`: effective bytes / time,
//! where the effective bytes are the least any implementation must move, every tensor element
//! read or written once (see each case's `bytes`). Selecting one also runs the copy baselines
//! (`cases/copy.rs`), and each then prints `of_copy=` (its gbps / copy_bw's gbps in the same
//! run).
//!
//! Paired ratios come from runs alternating with a baseline (see [`Paired`]), so host-speed drift
//! cancels: `of_shader=` (bandwidth cases: gbps / copy_shader's gbps), `of_peak=` (GEMM cases:
//! gflops / fma_peak's gflops; `gpu/` cases: / gpu/fma_peak's), `vs_s1=` (gemm_splitk*: the S=1 time / the automatic plan's) and
//! `vs_raw=` (tiny_ops: its time / tiny_ops_raw's), `vs_one_shape=` (dynamic_shapes: its time /
//! dynamic_shapes_one's).
//!
//! The `gpu/` family (`cases/gpu.rs`) is skipped on CPU adapters unless a case is named in full.
//!
//! `--checks=auto|full|loops|div|none` opens every device with that `ShaderChecks` (default: the
//! library's). `--no-first` skips the first-call figures (`first_ms=?`), `--short` times each case for about
//! 0.5 s instead of 2 s: together they cut a GPU session's bench run about fourfold.
//! `--clear-pool` empties the device's buffer pool (`Device::clear_pool`) before each case, so a
//! case's figure does not depend on what the cases before it left cached.
//!
//! Two knobs time a GPU hypothesis in one session without a patched build (run the bench
//! twice, with and without): `--parallelism=N` opens every device with
//! `DeviceOptions::parallelism` N (the planners' split counts: split-k slices, the recurrent
//! step's K split, attention's key splits), and `--memory-hints=dedicated` opens it on a wgpu
//! device whose sub-allocated memory blocks stay at 128 MiB (see [`open_device`]).
// Native only (blocking device, readback and wall clock): an empty program on wasm32.
#![cfg_attr(target_arch = "wasm32", no_main)]
#![cfg(not(target_arch = "wasm32"))]

use std::time::Instant;

use wgtensor::Device;

#[path = "cases/attention.rs"]
mod attention;
#[path = "cases/batchnorm.rs"]
mod batchnorm;
#[path = "cases/conv.rs"]
mod conv;
#[path = "cases/copy.rs"]
mod copy;
#[path = "cases/dynamic.rs"]
mod dynamic;
#[path = "cases/gemm.rs"]
mod gemm;
#[path = "cases/gpu.rs"]
mod gpu;
#[path = "cases/index.rs"]
mod index;
#[path = "cases/inputs.rs"]
mod inputs;
#[path = "cases/norm.rs"]
mod norm;
#[path = "cases/rnn.rs"]
mod rnn;
#[path = "cases/tiny.rs"]
mod tiny;
#[path = "cases/train.rs"]
mod train;

/// A case's timed body: one run of the measured work.
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
    needs_f16: bool,
    setup: Setup,
}

impl Case {
    /// A case that reports time only; `flops` / `bytes` add gflops or gbps.
    fn new(name: &'static str, setup: impl Fn(&Device) -> wgtensor::Result<Run> + 'static) -> Case {
        Case {
            name,
            flops: 0.0,
            bytes: 0.0,
            needs_f16: false,
            setup: Box::new(setup),
        }
    }

    fn flops(self, flops: f64) -> Case {
        Case { flops, ..self }
    }

    fn bytes(self, bytes: f64) -> Case {
        Case { bytes, ..self }
    }

    /// Skipped (and said so) on adapters without SHADER_F16.
    fn f16_only(self) -> Case {
        Case {
            needs_f16: true,
            ..self
        }
    }
}

/// Every case, in run order (`--list` prints this order). copy_bw comes before the bandwidth
/// cases because their `of_copy=` reads its row from the same run.
fn cases() -> Vec<Case> {
    let mut v = gemm::cases();
    v.extend(copy::cases());
    v.extend(batchnorm::cases());
    v.extend(rnn::cases());
    v.extend(conv::cases());
    v.extend(tiny::cases());
    v.extend(dynamic::cases());
    v.extend(index::cases());
    v.extend(norm::cases());
    v.extend(attention::cases());
    v.extend(train::cases());
    v.extend(gpu::cases());
    v
}

fn is_copy_baseline(name: &str) -> bool {
    name == "copy_bw" || name == "copy_shader"
}

fn time_once(dev: &Device, run: &mut Run) -> wgtensor::Result<f64> {
    let t = Instant::now();
    run()?;
    dev.sync()?;
    Ok(t.elapsed().as_secs_f64() * 1e3)
}

/// The cold first call: in a fresh process, device already open, nothing compiled yet.
fn first_call(name: &str) -> wgtensor::Result<f64> {
    let dev = open_device(device_options())?;
    let case = cases()
        .into_iter()
        .find(|c| c.name == name)
        .expect("known case");
    let mut run = (case.setup)(&dev)?;
    time_once(&dev, &mut run)
}

/// Runs this binary again with `--first NAME`: this process has compiled pipelines already.
/// The first call in a fresh process: `cold` with every shader cache disabled (Mesa's disk
/// cache would otherwise hold the compiled shaders of any earlier run on this machine, making a
/// "first" call 4-9x faster than a real cold start), else warm (the driver's caches as they
/// are, after one run that filled them).
fn first_ms_in_fresh_process(name: &str, cold: bool) -> Option<f64> {
    let exe = std::env::current_exe().ok()?;
    let run = || {
        let mut cmd = std::process::Command::new(&exe);
        cmd.args(["--first", name]);
        cmd.args(std::env::args().filter(|a| {
            ["--checks=", "--parallelism=", "--memory-hints="]
                .iter()
                .any(|k| a.starts_with(k))
        }));
        // Cold: no driver cache and an empty wgtensor pipeline cache directory (a persisted
        // PIPELINE_CACHE from an earlier run would otherwise skip the driver's compile).
        let fresh = std::env::temp_dir().join(format!("wgtensor-cold-{}", std::process::id()));
        if cold {
            cmd.env("MESA_SHADER_CACHE_DISABLE", "true");
            // NVIDIA's driver keeps its own shader disk cache.
            cmd.env("__GL_SHADER_DISK_CACHE", "0");
            cmd.env("WGTENSOR_CACHE_DIR", &fresh);
        }
        let out = cmd.output().ok()?;
        let _ = std::fs::remove_dir_all(&fresh);
        // The figure is the last line (a case's setup may print lines of its own).
        let text = String::from_utf8(out.stdout).ok()?;
        text.lines().last()?.trim().parse().ok()
    };
    if !cold {
        run()?;
    }
    run()
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
    if case.bytes > 0.0 && !is_copy_baseline(case.name) {
        v.push(Paired {
            label: "of_shader",
            baseline: "copy_shader",
            scale: |c, b| c.bytes / b.bytes,
            inverse: false,
        });
    }
    // gpu/ cases: against their own, GPU-sized FMA grid.
    let gpu_peak = case.name.starts_with("gpu/") && case.flops > 0.0;
    if gpu_peak && case.name != "gpu/fma_peak" {
        v.push(Paired {
            label: "of_peak",
            baseline: "gpu/fma_peak",
            scale: |c, b| c.flops / b.flops,
            inverse: false,
        });
    } else if case.name.contains("gemm") && !gpu_peak {
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
    if case.name == "dynamic_shapes" {
        v.push(Paired {
            label: "vs_one_shape",
            baseline: "dynamic_shapes_one",
            scale: |_, _| 1.0,
            inverse: true,
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

/// Baselines of paired ratios, set up once on first use and kept for the rest of the run.
type Baselines = Vec<(&'static str, Run)>;

/// The case's paired ratios (label, value), `n` pairs each, in [`paired_for`] order.
fn paired_ratios(
    dev: &Device,
    case: &Case,
    run: &mut Run,
    n: usize,
    all: &[Case],
    baselines: &mut Baselines,
) -> wgtensor::Result<Vec<(&'static str, f64)>> {
    let mut paired = Vec::new();
    for pr in paired_for(case) {
        let Some(bcase) = all.iter().find(|c| c.name == pr.baseline) else {
            continue;
        };
        if !baselines.iter().any(|(nm, _)| *nm == pr.baseline) {
            let mut b = (bcase.setup)(dev)?;
            time_once(dev, &mut b)?;
            baselines.push((pr.baseline, b));
        }
        let base = &mut baselines
            .iter_mut()
            .find(|(nm, _)| *nm == pr.baseline)
            .expect("just inserted")
            .1;
        let mut r = Vec::with_capacity(n);
        for _ in 0..n {
            let tb = time_once(dev, base)?;
            let tc = time_once(dev, run)?;
            r.push(if pr.inverse { tc / tb } else { tb / tc });
        }
        paired.push((pr.label, median(r) * (pr.scale)(case, bcase)));
    }
    Ok(paired)
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
    /// The first call with the driver's shader caches warm.
    first_warm_ms: Option<f64>,
    /// Small-op cases: dispatches recorded per second of the median run.
    dispatches_per_s: Option<f64>,
}

/// `--checks=auto|full|loops|div|none`: the shader runtime checks of every device the run opens.
static CHECKS: std::sync::OnceLock<wgtensor::ShaderChecks> = std::sync::OnceLock::new();
/// `--parallelism=N`: `DeviceOptions::parallelism` of every device the run opens.
static PARALLELISM: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
/// `--memory-hints=dedicated`: see [`open_device`].
static DEDICATED_BLOCKS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// The options every device of the run opens with (cases that open their own start from it).
fn device_options() -> wgtensor::DeviceOptions {
    wgtensor::DeviceOptions {
        shader_checks: CHECKS.get().copied().unwrap_or_default(),
        parallelism: PARALLELISM.get().copied(),
        ..Default::default()
    }
}

/// Opens a device of the run. With `--memory-hints=dedicated`, through `Device::from_wgpu` on
/// a wgpu device created with `MemoryHints::Manual` blocks of 128 MiB: wgpu's default hint
/// (`Performance`) grows gpu-allocator's blocks from 128 to 256 MiB once one exists, so late in
/// a run a 205 MB tensor is sub-allocated inside a shared block where a fresh run gives it
/// memory of its own. One suspect of the memory-bound cases' slowdown late in a long GPU run
/// (docs/BENCHMARKS.md); the run with the flag against the run without tells.
fn open_device(opts: wgtensor::DeviceOptions) -> wgtensor::Result<Device> {
    if !DEDICATED_BLOCKS.get().copied().unwrap_or(false) {
        return Device::with_options(opts);
    }
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    // WGPU_ADAPTER_NAME and WGPU_POWER_PREF as the library's own pick reads them.
    let adapter = pollster::block_on(wgpu::util::initialize_adapter_from_env_or_default(
        &instance, None,
    ))
    .map_err(|e| wgtensor::Error::NoAdapter(format!("--memory-hints=dedicated: {e}")))?;
    let mut wanted = wgpu::Features::SUBGROUP | wgpu::Features::SHADER_F16;
    if opts.cooperative_matrix {
        wanted |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
    }
    let features = adapter.features() & wanted;
    let experimental_features =
        if features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
            // SAFETY: as the library's own request (runtime/open.rs): only gemm_coop uses the
            // feature, after its self-test, which `Device::from_wgpu` runs too.
            unsafe { wgpu::ExperimentalFeatures::enabled() }
        } else {
            wgpu::ExperimentalFeatures::disabled()
        };
    const MIB: u64 = 1 << 20;
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("wgtensor bench, 128 MiB blocks"),
        required_features: features,
        required_limits: adapter.limits(),
        experimental_features,
        memory_hints: wgpu::MemoryHints::Manual {
            suballocated_device_memory_block_size: 128 * MIB..128 * MIB,
        },
        ..Default::default()
    }))
    .map_err(|e| wgtensor::Error::NoAdapter(format!("--memory-hints=dedicated: {e}")))?;
    Device::from_wgpu(adapter, device, queue, opts)
}

/// Reads `--checks=`, `--parallelism=` and `--memory-hints=` into [`CHECKS`], [`PARALLELISM`]
/// and [`DEDICATED_BLOCKS`].
fn set_knobs(args: &[String]) {
    if let Some(n) = args.iter().find_map(|a| a.strip_prefix("--parallelism=")) {
        let n: usize = n
            .parse()
            .ok()
            .filter(|&n| n >= 1)
            .unwrap_or_else(|| panic!("--parallelism={n}: expected a count of at least 1"));
        let _ = PARALLELISM.set(n);
    }
    match args.iter().find_map(|a| a.strip_prefix("--memory-hints=")) {
        None | Some("default") => {}
        Some("dedicated") => {
            let _ = DEDICATED_BLOCKS.set(true);
        }
        Some(other) => panic!("--memory-hints={other}: expected default or dedicated"),
    }
    let checks = match args.iter().find_map(|a| a.strip_prefix("--checks=")) {
        None => wgtensor::ShaderChecks::default(),
        Some("full") => wgtensor::ShaderChecks::Full,
        Some("loops") => wgtensor::ShaderChecks::NoLoopBounding,
        Some("div") => wgtensor::ShaderChecks::DivisionOnly,
        Some("auto") => wgtensor::ShaderChecks::Auto,
        Some("none") => wgtensor::ShaderChecks::None,
        Some(other) => panic!("--checks={other}: expected auto, full, loops, div or none"),
    };
    let _ = CHECKS.set(checks);
}

/// How cases are measured (command-line flags).
struct Opts {
    /// Measure the cold and warm first calls in fresh processes (`--no-first` skips them: a
    /// GPU session's device time is short and they triple a case's cost).
    first: bool,
    /// Timing window of the median (`--short`: 0.5 s instead of 2 s).
    window_ms: f64,
}

/// Times one case: cold first call, two warm-up runs, one run counting dispatches, then the
/// median of n runs and the paired ratios. `rows` are the cases measured before it in this run.
fn measure(
    dev: &Device,
    case: &Case,
    all: &[Case],
    baselines: &mut Baselines,
    rows: &[Row],
    opts: &Opts,
) -> wgtensor::Result<Row> {
    let (first_ms, first_warm_ms) = if opts.first {
        (
            first_ms_in_fresh_process(case.name, true),
            first_ms_in_fresh_process(case.name, false),
        )
    } else {
        (None, None)
    };
    let mut run = (case.setup)(dev)?;
    for _ in 0..2 {
        time_once(dev, &mut run)?;
    }
    let before = dev.stats().dispatches;
    time_once(dev, &mut run)?;
    let dispatches = dev.stats().dispatches - before;
    // At least 7 timed runs, more for short cases (up to the window: ~2 s, or 0.5 s with
    // --short).
    let probe = time_once(dev, &mut run)?;
    let n = ((opts.window_ms / probe.max(0.1)) as usize).clamp(7, 51);
    let t: Vec<f64> = (0..n)
        .map(|_| time_once(dev, &mut run))
        .collect::<wgtensor::Result<_>>()?;
    let ms = median(t);
    let paired = paired_ratios(dev, case, &mut run, n, all, baselines)?;
    let gbps = (case.bytes > 0.0).then(|| case.bytes / ms / 1e6);
    // gpu/ cases against gpu/copy_bw where it ran (it is skipped on CPU adapters).
    let copy_row = |n: &str| rows.iter().find(|r| r.name == n).and_then(|r| r.gbps);
    let copy_gbps = case
        .name
        .starts_with("gpu/")
        .then(|| copy_row("gpu/copy_bw"))
        .flatten()
        .or_else(|| copy_row("copy_bw"));
    Ok(Row {
        name: case.name,
        ms,
        gflops: (case.flops > 0.0).then(|| case.flops / ms / 1e6),
        gbps,
        of_copy: match (gbps, copy_gbps) {
            (Some(g), Some(c)) if !case.name.ends_with("copy_bw") => Some(g / c),
            _ => None,
        },
        paired,
        first_ms,
        first_warm_ms,
        dispatches_per_s: (dispatches > 0 && case.flops == 0.0 && case.bytes == 0.0)
            .then(|| dispatches as f64 / ms * 1e3),
    })
}

fn main() -> wgtensor::Result<()> {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    set_knobs(&args);
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
    let clear_pool = args.iter().any(|a| a == "--clear-pool");
    let opts = Opts {
        first: !args.iter().any(|a| a == "--no-first"),
        window_ms: if args.iter().any(|a| a == "--short") {
            500.0
        } else {
            2000.0
        },
    };
    let wanted: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let dev = open_device(device_options())?;
    let info = dev.adapter_info();
    if !json {
        println!(
            "# adapter: {} ({:?}) {}",
            info.name, info.backend, info.driver_info
        );
    }
    let all = cases();
    // A case name selects itself; a family prefix (`conv1d_groups_sweep`, or `gpu/` with its
    // slash) selects its lines.
    let named = |name: &str| wanted.iter().any(|w| name == w.as_str());
    let selected = |name: &str| {
        wanted.is_empty()
            || named(name)
            || wanted.iter().any(|w| {
                name.strip_prefix(w.as_str())
                    .is_some_and(|r| r.starts_with('/') || w.ends_with('/') && !r.is_empty())
            })
    };
    // Bandwidth cases are reported against the copies of the same run, so selecting one
    // selects the copies too (they are listed, and so measured, before them).
    // gpu/ cases are skipped on CPU adapters unless named in full.
    let cpu = info.device_type == wgpu::DeviceType::Cpu;
    let skipped = |name: &str| name.starts_with("gpu/") && cpu && !named(name);
    let wants_copy = all
        .iter()
        .any(|c| c.bytes > 0.0 && selected(c.name) && !skipped(c.name));
    // gpu/ bandwidth cases also select their own GPU-sized copy.
    let wants_gpu_copy = all
        .iter()
        .any(|c| c.bytes > 0.0 && c.name.starts_with("gpu/") && selected(c.name));
    let mut rows = Vec::new();
    let mut baselines = Baselines::new();
    for case in &all {
        if !(selected(case.name)
            || is_copy_baseline(case.name) && wants_copy
            || case.name == "gpu/copy_bw" && wants_gpu_copy)
        {
            continue;
        }
        if skipped(case.name) {
            println!(
                "case={} skipped=cpu-adapter (gpu/ cases run on a CPU adapter only when named \
                 in full: kernels --bench {})",
                case.name, case.name
            );
            continue;
        }
        if case.needs_f16 && !dev.supports_f16() {
            println!("case={} skipped=adapter-lacks-SHADER_F16", case.name);
            continue;
        }
        if clear_pool {
            dev.clear_pool();
        }
        // A case that fails says why and the run goes on: one kernel's error must not cost a
        // GPU session the figures of every case after it.
        let row = match measure(&dev, case, &all, &mut baselines, &rows, &opts) {
            Ok(row) => row,
            Err(e) => {
                let msg = format!("case={} error={}", case.name, e).replace('\n', " ");
                // --json keeps stdout one JSON array.
                if json {
                    eprintln!("{msg}");
                } else {
                    println!("{msg}");
                }
                continue;
            }
        };
        if !json {
            println!("{}", line(&row));
        }
        rows.push(row);
    }
    if json {
        let items: Vec<String> = rows.iter().map(json_item).collect();
        println!("[{}]", items.join(","));
    }
    Ok(())
}

/// The text output: `case=<name> ms=...`, then whichever figures the case has.
fn line(r: &Row) -> String {
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
    if r.name == "gpu/sync_op" || r.name == "gpu/sync_raw" {
        s += &format!(" us={:.1}", r.ms * 1e3);
    }
    if r.name.starts_with("tiny_ops") {
        s += &format!(" us_per_op={:.1}", r.ms * 1e3 / tiny::CHAIN as f64);
    }
    if let Some(w) = r.first_warm_ms {
        s += &format!(" first_warm_ms={w:.1}");
    }
    match r.first_ms {
        Some(f) => s += &format!(" first_ms={f:.1}"),
        None => s += " first_ms=?",
    }
    s
}

/// One JSON object per case; figures a case lacks are `null`, paired ratios appear by label.
fn json_item(r: &Row) -> String {
    let opt = |v: Option<f64>| v.map_or("null".into(), |v| format!("{v:.3}"));
    let paired: String = r
        .paired
        .iter()
        .map(|(l, v)| format!(",\"{l}\":{v:.3}"))
        .collect();
    format!(
        "{{\"case\":\"{}\",\"ms\":{:.3},\"gflops\":{},\"gbps\":{},\"of_copy\":{}{},\"first_ms\":{},\"first_warm_ms\":{}}}",
        r.name,
        r.ms,
        opt(r.gflops),
        opt(r.gbps),
        opt(r.of_copy),
        paired,
        opt(r.first_ms),
        opt(r.first_warm_ms),
    )
}
