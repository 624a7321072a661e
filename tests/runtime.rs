//! Runtime behaviour: bounded in-flight submissions, bounded pool memory, the write_buffer
//! reuse hazard, shape-independent pipeline caching, batching and readback.
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

use wgtensor::ops::ReduceOp;
use wgtensor::{DType, Device, DeviceOptions, Tensor};

fn device_with(opts: DeviceOptions) -> Device {
    Device::with_options(opts).expect("device")
}

/// 100k dependent small ops with no readback: the submitter never lets more than
/// `max_in_flight` submissions be outstanding and the pool stays small, because freed buffers
/// return to the pool at each submit and are reused by the next batch.
#[test]
fn hundred_thousand_ops_stay_bounded() {
    let opts = DeviceOptions {
        max_dispatches_per_submit: 64,
        max_in_flight: 3,
        ..Default::default()
    };
    let cap = opts.max_in_flight;
    let dev = device_with(opts);
    let opened = dev.stats();
    let n = 100_000usize;
    let mut x = Tensor::zeros(&dev, &[16], DType::F32).unwrap();
    let one = Tensor::full(&dev, &[16], 1.0, DType::F32).unwrap();
    let mut max_seen = 0;
    for i in 0..n {
        // Alternate two op kinds so the batch mixes pipelines.
        x = if i % 2 == 0 {
            x.add(&one).unwrap()
        } else {
            x.add_scalar(1.0).unwrap()
        };
        if i % 997 == 0 {
            let s = dev.stats();
            max_seen = max_seen.max(s.in_flight);
            assert!(
                s.in_flight <= cap,
                "in flight {} > cap {cap} at op {i}",
                s.in_flight
            );
        }
    }
    let before_readback = dev.stats();
    let v = x.to_vec::<f32>().unwrap();
    assert!(v.iter().all(|&e| e == n as f32), "got {:?}", &v[..4]);
    let s = dev.stats();
    // Bound: a batch frees at most 64 outputs of the 256-byte class before it is submitted,
    // plus one 16 KiB param arena per batch that is not yet reusable; 1 MiB is generous.
    let bound = 1u64 << 20;
    println!(
        "100k ops: submissions={} peak_in_flight={} max_sampled_in_flight={} pool_peak_bytes={} live={} cached={} dispatches={}",
        s.submissions, s.peak_in_flight, max_seen, s.pool.peak_bytes, s.pool.live_bytes, s.pool.cached_bytes, s.dispatches
    );
    assert!(before_readback.peak_in_flight <= cap);
    assert!(s.peak_in_flight <= cap && s.peak_in_flight >= 1);
    assert!(
        s.pool.peak_bytes <= bound,
        "pool peak {} > {bound}",
        s.pool.peak_bytes
    );
    assert!(
        s.submissions >= (n / 64) as u64,
        "only {} submissions",
        s.submissions
    );
    // + the `full` broadcast copy, and whatever the device ran when it opened (the
    // cooperative-matrix self-test on an adapter with tensor cores).
    assert_eq!(s.dispatches - opened.dispatches, n as u64 + 1);
}

/// The write_buffer reuse hazard (docs/ARCHITECTURE.md, "Buffers"): `queue.write_buffer` runs before every command of the next submit.
/// If the pool handed `a`'s buffer to `c` while `b = a + 1` was still pending, the upload of
/// `c` would land before `b` is computed and `b` would read `c`'s values.
#[test]
fn freed_buffer_is_not_refilled_before_pending_readers_run() {
    let dev = device_with(DeviceOptions {
        max_dispatches_per_submit: 10_000, // keep everything in one pending batch
        ..Default::default()
    });
    let n = 1000;
    for round in 0..20 {
        let data: Vec<f32> = (0..n).map(|i| (i + round) as f32).collect();
        let a = Tensor::from_slice(&dev, &data, &[n]).unwrap();
        let b = a.add_scalar(1.0).unwrap(); // pending: reads a's buffer
        drop(a); // the buffer goes back to the pool while b's dispatch is unsubmitted
        let poison = vec![-7.0f32; n];
        let c = Tensor::from_slice(&dev, &poison, &[n]).unwrap(); // same size class
        let got = b.to_vec::<f32>().unwrap();
        let want: Vec<f32> = data.iter().map(|v| v + 1.0).collect();
        if let Some(i) = (0..n).find(|&i| got[i] != want[i]) {
            panic!(
                "round {round}: pending reader saw a refilled buffer: b[{i}] = {} (want {})",
                got[i], want[i]
            );
        }
        assert_eq!(c.to_vec::<f32>().unwrap(), poison);
    }
}

/// The pool still reuses: once the batch that read a freed buffer is submitted, the buffer is
/// handed out again (so the hazard test above is not passing by never reusing anything).
#[test]
fn pool_reuses_buffers_after_submission() {
    let dev = device_with(DeviceOptions::default());
    let a = Tensor::from_slice(&dev, &vec![1.0f32; 4096], &[4096]).unwrap();
    let b = a.add_scalar(1.0).unwrap();
    drop(a);
    dev.sync().unwrap();
    let misses = dev.stats().pool.misses;
    let hits = dev.stats().pool.hits;
    let c = Tensor::from_slice(&dev, &vec![2.0f32; 4096], &[4096]).unwrap();
    let s = dev.stats();
    assert_eq!(
        s.pool.misses, misses,
        "a new buffer was created instead of reusing"
    );
    assert_eq!(s.pool.hits, hits + 1);
    assert_eq!(b.to_vec::<f32>().unwrap(), vec![2.0; 4096]);
    assert_eq!(c.to_vec::<f32>().unwrap(), vec![2.0; 4096]);
}

/// Freed buffers beyond the pool cap are destroyed, not cached.
#[test]
fn pool_cap_bounds_cached_bytes() {
    let cap = 64 << 10;
    let dev = device_with(DeviceOptions {
        pool_cap_bytes: Some(cap),
        ..Default::default()
    });
    let ts: Vec<Tensor> = (0..32)
        .map(|i| Tensor::zeros(&dev, &[1024 + i * 300], DType::F32).unwrap())
        .collect();
    drop(ts);
    dev.sync().unwrap();
    let s = dev.stats();
    assert!(
        s.pool.cached_bytes <= cap,
        "cached {} > cap {cap}",
        s.pool.cached_bytes
    );
}

/// A freed buffer up to two size classes larger serves a request (sizes that drift between
/// calls reuse what was freed); a much larger one does not.
#[test]
fn a_slightly_larger_freed_buffer_serves_a_request() {
    let dev = device_with(DeviceOptions::default());
    drop(Tensor::zeros(&dev, &[100_000], DType::F32).unwrap());
    dev.sync().unwrap();
    let before = dev.stats().pool;
    // 90% of the size: served by the cached buffer.
    let t = Tensor::zeros(&dev, &[90_000], DType::F32).unwrap();
    let after = dev.stats().pool;
    assert_eq!(after.misses, before.misses, "{before:?} -> {after:?}");
    assert_eq!(after.hits, before.hits + 1);
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![0.0; 90_000]);
    drop(t);
    dev.sync().unwrap();
    // A quarter of the size: a new buffer, the large one stays cached.
    let before = dev.stats().pool;
    let _small = Tensor::zeros(&dev, &[25_000], DType::F32).unwrap();
    assert_eq!(dev.stats().pool.misses, before.misses + 1);
}

/// The churn case: after a working set past 1 GiB was allocated and freed, an op on a large
/// tensor reuses cached buffers instead of destroying and re-creating one per call (the
/// default pool has no cap below the memory budget).
#[test]
fn churn_past_a_gib_then_steady_ops_create_no_buffers() {
    let dev = device_with(DeviceOptions::default());
    // 1.25 GiB of 64 MiB tensors freed, then ops on a larger (96 MiB) tensor: with a 1 GiB
    // cap the op's output was the largest cached class, destroyed first by every trim.
    let big: Vec<Tensor> = (0..20)
        .map(|_| Tensor::zeros(&dev, &[16 << 20], DType::F32).unwrap())
        .collect();
    drop(big);
    dev.sync().unwrap();
    let x = Tensor::full(&dev, &[24 << 20], 1.5, DType::F32).unwrap();
    // Outputs freed within one batch are reusable once it is submitted, so the steady state
    // holds a few outputs; the warm-up runs the same pattern as the measured loop.
    for _ in 0..2 {
        for _ in 0..5 {
            x.mul_scalar(1.0).unwrap();
        }
        dev.sync().unwrap();
    }
    let before = dev.stats().pool;
    for _ in 0..5 {
        x.mul_scalar(1.0).unwrap();
    }
    dev.sync().unwrap();
    let after = dev.stats().pool;
    assert_eq!(after.misses, before.misses, "{before:?} -> {after:?}");
    assert!(after.cached_bytes + after.live_bytes <= after.peak_bytes);
}

struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

/// One round of a fixed op mix over a rank-3 shape: contiguous and strided inputs, broadcasting,
/// unary/scalar/binary ops and both reduction variants.
fn op_mix(dev: &Device, shape: [usize; 3], long: usize) {
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n).map(|i| (i % 13) as f32 * 0.25).collect();
    let x = Tensor::from_slice(dev, &data, &shape).unwrap();
    let xt = x.transpose(0, 2).unwrap();
    let row = Tensor::from_slice(dev, &vec![0.5f32; shape[2]], &[shape[2]]).unwrap();
    let y = x
        .add(&row)
        .unwrap()
        .mul(&x)
        .unwrap()
        .relu()
        .unwrap()
        .sub_scalar(0.1)
        .unwrap();
    let z = xt
        .exp()
        .unwrap()
        .maximum(&xt)
        .unwrap()
        .contiguous()
        .unwrap();
    let r1 = y.reduce(-1, ReduceOp::Sum, false).unwrap();
    let r2 = z.reduce(0, ReduceOp::Max, true).unwrap();
    let big = Tensor::from_slice(dev, &vec![1.0f32; 2 * long], &[2, long]).unwrap();
    let r3 = big.reduce(1, ReduceOp::Mean, false).unwrap();
    let h = x.to_dtype(DType::F16);
    if dev.supports_f16() {
        h.unwrap().to_dtype(DType::F32).unwrap();
    }
    r1.to_vec::<f32>().unwrap();
    r2.to_vec::<f32>().unwrap();
    assert_eq!(r3.to_vec::<f32>().unwrap(), vec![1.0, 1.0]);
}

/// Pipelines are keyed by (kernel, dtype, override constants), never by shape. On CPU adapters
/// every op here has one plan, so after one warm-up round 50 rounds over random shapes compile
/// nothing new. GPU plans choose among a few variants by size (one invocation or a workgroup per
/// output, split rows, vec4 or scalar elementwise): there compiles stop once the rounds have
/// met each variant, so after 100 random rounds 50 more over fresh shapes compile nothing.
/// (On an H200 the single-round form failed: 17 pipelines after the 50 rounds, 12 after one.)
#[test]
fn pipelines_do_not_depend_on_shapes() {
    for gpu_plans in [false, true] {
        let dev = device_with(DeviceOptions {
            gpu_plans,
            ..Default::default()
        });
        let mut rng = Lcg(42);
        let mut round = |dev: &Device| {
            let shape = [1 + rng.next(9), 1 + rng.next(17), 1 + rng.next(33)];
            op_mix(dev, shape, 100 + rng.next(5000));
        };
        op_mix(&dev, [2, 3, 4], 1000);
        let first = dev.stats().pipelines_compiled;
        assert!(first >= 8, "warm-up compiled only {first} pipelines");
        if !dev.caps().cpu {
            for _ in 0..100 {
                round(&dev);
            }
        }
        let warm = dev.stats().pipelines_compiled;
        for _ in 0..50 {
            round(&dev);
        }
        assert_eq!(
            dev.stats().pipelines_compiled,
            warm,
            "gpu_plans {gpu_plans}: compiled after the warm-up rounds"
        );
    }
}

/// Batch norm reads vec4 groups when the plane size is a multiple of 4 and single values
/// otherwise; both run in the same pipelines, so a plane size that breaks divisibility (or an odd
/// offset) after the first call compiles nothing.
#[test]
fn batch_norm_pipelines_do_not_depend_on_plane_divisibility() {
    use wgtensor::ops::{batch_norm_backward, batch_norm_train, BatchNormOptions};
    let dev = device_with(DeviceOptions::default());
    let run = |shape: &[usize]| {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|i| (i % 7) as f32 - 3.0).collect();
        let x = Tensor::from_slice(&dev, &v, shape).unwrap();
        let out = batch_norm_train(&x, None, &BatchNormOptions::default()).unwrap();
        let y = &out.y;
        let dx = batch_norm_backward(y, &x, None, &out.saved).unwrap().dx;
        dx.to_vec::<f32>().unwrap();
    };
    run(&[2, 3, 4, 4]);
    let warm = dev.stats().pipelines_compiled;
    for shape in [[2, 3, 5, 3], [3, 2, 7, 1], [1, 4, 2, 2], [2, 1, 3, 3]] {
        run(&shape);
    }
    assert_eq!(dev.stats().pipelines_compiled, warm);
}

/// The batch is submitted every `max_dispatches_per_submit` dispatches, and on readback/sync.
#[test]
fn batches_split_by_dispatch_count_and_flush_on_sync() {
    let dev = device_with(DeviceOptions {
        max_dispatches_per_submit: 10,
        ..Default::default()
    });
    let mut x = Tensor::from_slice(&dev, &[1.0f32; 8], &[8]).unwrap();
    dev.sync().unwrap();
    let s0 = dev.stats().submissions;
    for _ in 0..35 {
        x = x.add_scalar(1.0).unwrap();
    }
    assert_eq!(dev.stats().submissions - s0, 3);
    dev.sync().unwrap();
    assert_eq!(dev.stats().submissions - s0, 4);
    assert_eq!(dev.stats().in_flight, 0);
    assert_eq!(x.to_vec::<f32>().unwrap(), vec![36.0; 8]);
}

/// A device (with `opts`' other fields) whose GPU waits give up after 1 ms.
fn timeout_device(opts: DeviceOptions) -> Device {
    device_with(DeviceOptions {
        gpu_timeout: std::time::Duration::from_millis(1),
        ..opts
    })
}

/// A pause between retries of a timed-out wait: retrying at once kept a driver's lock so busy
/// that the other tests of the binary stalled behind it (an H200, 12 test threads: the binary
/// hung).
fn pause() {
    std::thread::sleep(std::time::Duration::from_millis(2));
}

/// Syncs until a sync succeeds (each waits at most the device's timeout): the GPU is idle.
fn drain(dev: &Device) {
    let start = std::time::Instant::now();
    while dev.sync().is_err() {
        assert!(start.elapsed().as_secs() < 120, "the GPU never drained");
        pause();
    }
}

/// Reads `t`, retrying while the wait times out.
fn read_retrying(t: &Tensor) -> Vec<f32> {
    let start = std::time::Instant::now();
    loop {
        match t.to_vec::<f32>() {
            Ok(v) => return v,
            Err(e) => assert!(start.elapsed().as_secs() < 120, "{e}"),
        }
        pause();
    }
}

/// A product long enough to outlast a 1-ms wait (about 2 GFLOP on a CPU adapter, 1.1 TFLOP on
/// a GPU: 35 ms on an H200, where 137 GFLOP (4.7 ms) had finished before a test thread on a
/// loaded machine got to its wait), recorded on `dev`.
fn long_product(dev: &Device) -> Tensor {
    let probe = device_with(DeviceOptions::default());
    let cpu = probe.adapter_info().device_type == wgpu::DeviceType::Cpu;
    drop(probe);
    let n = if cpu { 1024 } else { 8192 };
    let big = Tensor::full(dev, &[n, n], 0.5, DType::F32).unwrap();
    big.matmul(&big).unwrap()
}

/// A batch whose wait for room under the in-flight cap times out is dropped unsubmitted: the
/// ops recorded in it never run, so their outputs carry the timeout (the next sync reports it
/// once, and reading them later is an error), never stale pool contents.
#[test]
fn a_batch_dropped_by_a_timeout_poisons_its_outputs() {
    let dev = timeout_device(DeviceOptions {
        max_in_flight: 1,
        ..Default::default()
    });
    // The small op's pipelines compile first: compiling while the product runs would let it
    // finish before the op's batch waits for room.
    let warm = Tensor::full(&dev, &[4], 1.0, DType::F32).unwrap();
    drop(warm.add_scalar(1.0).unwrap());
    drain(&dev);
    let y = long_product(&dev);
    dev.submit(std::iter::empty()).unwrap(); // in flight
    let z = Tensor::full(&dev, &[4], 1.0, DType::F32)
        .unwrap()
        .add_scalar(1.0)
        .unwrap();
    let e = z.to_vec::<f32>().unwrap_err().to_string();
    assert!(e.contains("timed out"), "{e}");
    // Let the product finish (each sync waits at most 1 ms); the first failed sync may be
    // the dropped batch's error, the others are timeouts.
    drain(&dev);
    let e = z.to_vec::<f32>().unwrap_err().to_string();
    assert!(
        e.contains("timed out"),
        "z never ran, so it has no values: {e}"
    );
    // Ops on it refuse too.
    assert!(z.add_scalar(1.0).is_err());
    drop(y);
}

/// A readback whose own batch is dropped by a batch-size flush that times out (the error
/// buffer's clear fills the batch after the data's copy) reports the timeout: its staging
/// buffer never received the data, so its bytes (zeros, or an earlier readback's) must not
/// come back as the values.
#[test]
fn a_readback_whose_copy_was_dropped_fails() {
    let dev = timeout_device(DeviceOptions {
        max_in_flight: 1,
        max_dispatches_per_submit: 5,
        ..Default::default()
    });
    // A readback's own wait may pass 1 ms too: tried until one completes.
    let read = read_retrying;
    let x = Tensor::from_slice(&dev, &[10.0f32, 20.0], &[2]).unwrap();
    let idx = Tensor::from_slice(&dev, &[1i32, 0], &[2]).unwrap();
    // Pipelines first, and a readback that leaves [40, 30] in a pooled staging buffer.
    let w = Tensor::from_slice(&dev, &[30.0f32, 40.0], &[2]).unwrap();
    assert_eq!(read(&w.index_select(0, &idx).unwrap()), vec![40.0, 30.0]);
    drain(&dev);
    let p = long_product(&dev);
    dev.submit(std::iter::empty()).unwrap(); // in flight, the cap is 1
                                             // The index check and the gather (2 commands), then the readback's two copies and the
                                             // error buffer's clear: the fifth command flushes, waits for room and times out.
    let y = x.index_select(0, &idx).unwrap();
    let got = y.to_vec::<f32>();
    assert!(
        got.as_ref()
            .is_err_and(|e| e.to_string().contains("timed out")),
        "{got:?}"
    );
    drain(&dev);
    let e = y.to_vec::<f32>().unwrap_err().to_string();
    assert!(e.contains("timed out"), "y never ran: {e}");
    drop(p);
    // The device goes on: the next readback reads right.
    assert_eq!(read(&x.index_select(0, &idx).unwrap()), vec![20.0, 10.0]);
}

/// A readback whose batch (with the copy of the index error buffer, and its clear) was
/// submitted but whose wait timed out still reports an out-of-range index found there: at the
/// next readback of any tensor, or at a sync, once; never as the placeholder values.
#[test]
fn an_index_error_outlives_a_timed_out_readback() {
    let dev = timeout_device(DeviceOptions::default());
    let x = Tensor::from_slice(&dev, &[10.0f32, 20.0], &[2]).unwrap();
    let bad = Tensor::from_slice(&dev, &[1i32, 7], &[2]).unwrap();
    let good = Tensor::from_slice(&dev, &[1i32, 0], &[2]).unwrap();
    // Pipelines first.
    assert_eq!(
        read_retrying(&x.index_select(0, &good).unwrap()),
        vec![20.0, 10.0]
    );
    drain(&dev);
    for report_at_sync in [false, true] {
        let p = long_product(&dev);
        let y = x.index_select(0, &bad).unwrap();
        let e = y.to_vec::<f32>().unwrap_err().to_string();
        assert!(e.contains("timed out"), "{e}");
        let start = std::time::Instant::now();
        let e = loop {
            let got = if report_at_sync {
                dev.sync().map(|()| Vec::new())
            } else {
                p.narrow(0, 0, 1).unwrap().to_vec::<f32>()
            };
            match got {
                Err(e) if e.to_string().contains("timed out") => {
                    assert!(start.elapsed().as_secs() < 120, "{e}");
                    pause();
                }
                other => break other.unwrap_err().to_string(),
            }
        };
        assert!(
            e.contains("index 7 is out of bounds for dimension 0 with size 2"),
            "{e}"
        );
        // Reported once: the device goes on.
        drain(&dev);
        assert_eq!(
            read_retrying(&x.index_select(0, &good).unwrap()),
            vec![20.0, 10.0]
        );
    }
}

#[test]
fn views_share_storage_and_readback_handles_offsets() {
    let dev = device_with(DeviceOptions::default());
    let data: Vec<f32> = (0..24).map(|v| v as f32).collect();
    let x = Tensor::from_slice(&dev, &data, &[2, 3, 4]).unwrap();
    let v = x.narrow(2, 1, 2).unwrap().permute(&[2, 0, 1]).unwrap();
    assert!(v.shares_storage(&x));
    assert_eq!(v.shape(), &[2, 2, 3]);
    let got = v.to_vec::<f32>().unwrap();
    let mut want = Vec::new();
    for k in 1..3 {
        for i in 0..2 {
            for j in 0..3 {
                want.push(data[i * 12 + j * 4 + k]);
            }
        }
    }
    assert_eq!(got, want);
    // A contiguous slice with a non-zero offset reads back directly.
    let row = x.narrow(0, 1, 1).unwrap();
    assert_eq!(row.to_vec::<f32>().unwrap(), data[12..].to_vec());
    let b = Tensor::from_slice(&dev, &[5.0f32], &[])
        .unwrap()
        .broadcast_to(&[3, 2])
        .unwrap();
    assert!(b.shares_storage(&b.clone()));
    assert_eq!(b.to_vec::<f32>().unwrap(), vec![5.0; 6]);
}

#[test]
fn async_readback_and_sync_work_natively() {
    let dev = device_with(DeviceOptions::default());
    let x = Tensor::from_slice(&dev, &[1.0f32, 4.0, 9.0], &[3]).unwrap();
    let y = x.sqrt().unwrap();
    pollster::block_on(dev.sync_async()).unwrap();
    assert_eq!(
        pollster::block_on(y.to_vec_async::<f32>()).unwrap(),
        vec![1.0, 2.0, 3.0]
    );
}

/// A small model's forward: conv2d (3x3, pad 1) + batch-norm training + relu + a sum.
fn warm_up_model(dev: &Device, n: usize, hw: usize) -> wgtensor::Result<Vec<f32>> {
    use wgtensor::ops::{batch_norm_train, conv2d, BatchNormOptions, Conv2dOptions, Padding};
    let xs: Vec<f32> = (0..n * 4 * hw * hw)
        .map(|i| (i % 11) as f32 * 0.1)
        .collect();
    let ws: Vec<f32> = (0..8 * 4 * 9)
        .map(|i| (i % 5) as f32 * 0.05 - 0.1)
        .collect();
    let x = Tensor::from_slice(dev, &xs, &[n, 4, hw, hw])?;
    let w = Tensor::from_slice(dev, &ws, &[8, 4, 3, 3])?;
    let o = Conv2dOptions {
        padding: Padding::same([3, 3], [1, 1]),
        ..Default::default()
    };
    let y = conv2d(&x, &w, None, &o)?;
    let y = batch_norm_train(&y, None, &BatchNormOptions::default())?.y;
    y.relu()?
        .reshape(&[n * 8 * hw * hw])?
        .sum(0, false)?
        .to_vec::<f32>()
}

/// After `warm_up` ran a model once on a tiny input, the first real call at another shape
/// compiles nothing; a call racing the warm-up gets the same results and nothing is compiled
/// twice. GPU plans pick kernel variants by problem size (Device::warm_up says so), so there
/// the warm-up runs at the real call's sizes.
#[test]
fn warm_up_compiles_ahead_of_the_first_call() {
    for gpu_plans in [false, true] {
        let opts = DeviceOptions {
            gpu_plans,
            ..Default::default()
        };
        let dev = device_with(opts.clone());
        let (n, hw) = if dev.caps().cpu { (1, 8) } else { (3, 20) };
        dev.warm_up(move |d| warm_up_model(d, n, hw).map(drop))
            .wait()
            .unwrap();
        let warm = dev.stats().pipelines_compiled;
        assert!(warm > 0);
        warm_up_model(&dev, 3, 20).unwrap();
        assert_eq!(
            dev.stats().pipelines_compiled,
            warm,
            "gpu_plans {gpu_plans}: the first real call compiled"
        );

        // Racing: the real call starts while the warm-up compiles; the pipelines it compiled
        // on the other device are the count both together must reach, not twice that.
        let fresh = device_with(opts);
        let handle = fresh.warm_up(move |d| warm_up_model(d, n, hw).map(drop));
        let raced = warm_up_model(&fresh, 3, 20).unwrap();
        handle.wait().unwrap();
        assert_eq!(fresh.stats().pipelines_compiled, warm);
        assert_eq!(raced, warm_up_model(&dev, 3, 20).unwrap());
    }
}

/// A failing warm-up call reports its error through `wait`, and the device stays usable.
#[test]
fn warm_up_reports_errors() {
    let dev = device_with(DeviceOptions::default());
    let err = dev
        .warm_up(|d| {
            let a = Tensor::zeros(d, &[2, 3], DType::F32)?;
            let b = Tensor::zeros(d, &[4], DType::F32)?;
            a.add(&b).map(drop)
        })
        .wait()
        .unwrap_err();
    assert!(err.to_string().contains("add"), "{err}");
    let x = Tensor::from_slice(&dev, &[1.0f32, -2.0], &[2]).unwrap();
    assert_eq!(x.relu().unwrap().to_vec::<f32>().unwrap(), vec![1.0, 0.0]);
}

/// A warm-up leaves the caller's state alone: it draws random numbers from a stream of its own
/// (a seeded sequence is the same with or without one), and it does not take the device's
/// pending errors (an index out of range in the caller's work is reported to the caller).
#[test]
fn warm_up_keeps_the_callers_stream_and_errors() {
    use wgtensor::ops::rand;
    let dev = device_with(DeviceOptions::default());
    let draw = |d: &Device| rand(d, &[8], DType::F32).unwrap().to_vec::<f32>().unwrap();
    dev.manual_seed(7);
    let plain = draw(&dev);
    dev.manual_seed(7);
    dev.warm_up(|d| rand(d, &[64], DType::F32).map(drop))
        .wait()
        .unwrap();
    assert_eq!(draw(&dev), plain);
    let x = Tensor::from_slice(&dev, &[1.0f32, 2.0], &[2]).unwrap();
    let bad = Tensor::from_slice(&dev, &[7i32], &[1]).unwrap();
    let y = x.index_select(0, &bad).unwrap();
    dev.warm_up(|d| Tensor::zeros(d, &[4], DType::F32).map(drop))
        .wait()
        .unwrap();
    let e = y.to_vec::<f32>().unwrap_err().to_string();
    assert!(e.contains("index_select"), "{e}");
    let x = Tensor::from_slice(&dev, &[1.0f32, -2.0], &[2]).unwrap();
    assert_eq!(x.relu().unwrap().to_vec::<f32>().unwrap(), vec![1.0, 0.0]);
}

/// A readback that carried the index error buffer's bytes but failed on another error (an
/// uncaptured validation error, raised here by an invalid copy another thread encodes while
/// the readback waits) reports that error, and the index error at the next readback: the batch
/// had cleared the device's error buffer, so dropping the bytes would leave the placeholders to
/// read without an error. (Should the error land before the readback starts, the readback
/// fails before taking the check, and the same holds.)
#[test]
fn an_index_error_outlives_an_uncaptured_error() {
    let dev = device_with(DeviceOptions::default());
    let x = Tensor::from_slice(&dev, &[10.0f32, 20.0], &[2]).unwrap();
    let bad = Tensor::from_slice(&dev, &[1i32, 7], &[2]).unwrap();
    assert_eq!(x.add_scalar(0.0).unwrap().to_vec::<f32>().unwrap()[0], 10.0);
    let p = long_product(&dev);
    let y = x.index_select(0, &bad).unwrap();
    let invalid_copy = {
        let dev = dev.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            let wd = dev.wgpu_device();
            let buf = |usage| {
                wd.create_buffer(&wgpu::BufferDescriptor {
                    label: None,
                    size: 4,
                    usage,
                    mapped_at_creation: false,
                })
            };
            let (a, b) = (
                buf(wgpu::BufferUsages::COPY_SRC),
                buf(wgpu::BufferUsages::COPY_DST),
            );
            let mut enc = wd.create_command_encoder(&Default::default());
            enc.copy_buffer_to_buffer(&a, 0, &b, 0, 64); // past both ends
            drop(enc.finish());
        })
    };
    let first = y.to_vec::<f32>();
    invalid_copy.join().unwrap();
    drop(p);
    // Each error once, in either order (a fast GPU may finish the readback before the copy is
    // encoded), then the values.
    let mut errors = vec![first.unwrap_err().to_string()];
    let values = loop {
        match y.to_vec::<f32>() {
            Ok(v) => break v,
            Err(e) => errors.push(e.to_string()),
        }
        assert!(errors.len() <= 2, "{errors:?}");
    };
    let index = "index 7 is out of bounds for dimension 0 with size 2";
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert_eq!(
        errors.iter().filter(|e| e.contains(index)).count(),
        1,
        "{errors:?}"
    );
    assert_eq!(values[0], 20.0);
}

/// The param arena is made at the pool's size class, the one `take` asks for: under a small
/// binding cap (a class capped below the plain size class) steady batches reuse their arenas
/// instead of creating one per batch.
#[test]
fn param_arenas_are_reused_under_a_small_binding_cap() {
    let dev = device_with(DeviceOptions {
        max_dispatches_per_submit: 17,
        max_binding_bytes: Some(4352),
        ..DeviceOptions::default()
    });
    let x = Tensor::zeros(&dev, &[64], DType::F32).unwrap();
    let step = || {
        let y = x.add_scalar(1.0).unwrap();
        dev.sync().unwrap();
        drop(y);
    };
    for _ in 0..4 {
        step();
    }
    let before = dev.stats().pool.misses;
    for _ in 0..8 {
        step();
    }
    assert_eq!(dev.stats().pool.misses, before, "{:?}", dev.stats().pool);
}
