//! Many threads at once, more of them than cores: threads each with their own `Device`, and
//! threads sharing one, mixing GEMMs, split-k GEMMs, elementwise chains, readbacks, syncs,
//! `stats` and drops. Every result is checked, and a watchdog turns a hang into a failure
//! naming each stuck worker and the step it was in (a deadlock in the submit / wait / map
//! path would otherwise stall the whole test binary).
// Native only (threads, blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use wgtensor::ops::{gemm, GemmOptions};
use wgtensor::{Device, DeviceOptions, Tensor};

/// The steps a worker goes through, in order; its progress slot holds the current one.
const STEPS: [&str; 7] = [
    "gemm",
    "split-k gemm",
    "elementwise chain",
    "readback",
    "sync",
    "stats",
    "drop",
];

/// One worker's body: gets its progress slot.
type Worker = Box<dyn FnOnce(&AtomicUsize) + Send>;

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let x = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed);
            (x >> 8) as f32 / (1u32 << 23) as f32 - 1.0
        })
        .collect()
}

/// `a [m, k] @ b [k, n]` in f64, for checking.
fn matmul_ref(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0f64; m * n];
    for i in 0..m {
        for p in 0..k {
            let x = a[i * k + p] as f64;
            for j in 0..n {
                c[i * n + j] += x * b[p * n + j] as f64;
            }
        }
    }
    c
}

fn assert_close(op: &str, got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{op}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (*g as f64 - w).abs() <= tol * (1.0 + w.abs()),
            "{op}: element {i} is {g}, expected {w}"
        );
    }
}

/// One worker's loop on `dev`; `progress` holds `iteration * STEPS.len() + step`.
fn work(dev: &Device, seed: u32, iters: usize, progress: &AtomicUsize) {
    let at = |it: usize, step: usize| progress.store(it * STEPS.len() + step, Ordering::SeqCst);
    let (m, k, n) = (24 + (seed as usize % 3) * 8, 40, 32);
    let av = values(m * k, seed);
    let bv = values(k * n, seed ^ 0x5bd1);
    let want = matmul_ref(&av, &bv, m, k, n);
    // Split-k shape: a long K against a small output.
    let (sm, sk, sn) = (8, 2048, 8);
    let sav = values(sm * sk, seed ^ 0x1234);
    let sbv = values(sk * sn, seed ^ 0x4321);
    let swant = matmul_ref(&sav, &sbv, sm, sk, sn);
    for it in 0..iters {
        at(it, 0);
        let a = Tensor::from_slice(dev, &av, &[m, k]).unwrap();
        let b = Tensor::from_slice(dev, &bv, &[k, n]).unwrap();
        let c = a.matmul(&b).unwrap();
        at(it, 1);
        let sa = Tensor::from_slice(dev, &sav, &[sm, sk]).unwrap();
        let sb = Tensor::from_slice(dev, &sbv, &[sk, sn]).unwrap();
        let sc = gemm(
            &sa,
            &sb,
            &GemmOptions {
                split_k: Some(4),
                ..Default::default()
            },
        )
        .unwrap();
        at(it, 2);
        // A chain of small ops the in-flight cap has to throttle.
        let mut x = c.clone();
        for _ in 0..20 {
            x = x.mul_scalar(0.5).unwrap().add_scalar(0.25).unwrap();
        }
        at(it, 3);
        assert_close("gemm", &c.to_vec::<f32>().unwrap(), &want, 1e-5);
        assert_close("split-k gemm", &sc.to_vec::<f32>().unwrap(), &swant, 1e-4);
        at(it, 4);
        if it % 2 == 0 {
            dev.sync().unwrap();
        }
        at(it, 5);
        let s = dev.stats();
        assert!(s.in_flight <= dev.options().max_in_flight, "{s:?}");
        at(it, 6);
        // x converges to 0.5 whatever c held: one readback of it checks the chain ran.
        let xs = x.to_vec::<f32>().unwrap();
        assert!(xs.iter().all(|v| (v - 0.5).abs() < 1e-4), "chain {xs:?}");
        drop((a, b, c, sa, sb, sc, x));
    }
    progress.store(usize::MAX, Ordering::SeqCst);
}

/// Runs `workers` (each gets its index) on threads and waits at most `limit`; on a hang,
/// fails naming every worker that has not finished and the step it is stuck in.
fn run_with_watchdog(workers: Vec<Worker>, limit: Duration) {
    let progress: Arc<Vec<AtomicUsize>> =
        Arc::new((0..workers.len()).map(|_| AtomicUsize::new(0)).collect());
    let (tx, rx) = mpsc::channel();
    let count = workers.len();
    for (i, w) in workers.into_iter().enumerate() {
        let (tx, progress) = (tx.clone(), progress.clone());
        std::thread::spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w(&progress[i])));
            let _ = tx.send((i, r.err().map(|e| panic_text(&*e))));
        });
    }
    let deadline = Instant::now() + limit;
    let mut finished = 0;
    while finished < count {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((i, None)) => {
                let _ = i;
                finished += 1;
            }
            Ok((i, Some(msg))) => panic!("worker {i} failed: {msg}"),
            Err(_) => {
                let stuck: Vec<String> = progress
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.load(Ordering::SeqCst) != usize::MAX)
                    .map(|(i, p)| {
                        let v = p.load(Ordering::SeqCst);
                        format!(
                            "worker {i} in iteration {} at '{}'",
                            v / STEPS.len(),
                            STEPS[v % STEPS.len()]
                        )
                    })
                    .collect();
                panic!(
                    "hang: no progress within {limit:?}; stuck: {}",
                    stuck.join("; ")
                );
            }
        }
    }
}

fn panic_text(e: &(dyn std::any::Any + Send)) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "non-string panic".into())
}

fn threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    (cores * 2).clamp(4, 16)
}

/// A small in-flight cap so the submit path waits for the GPU often.
fn small_cap() -> DeviceOptions {
    DeviceOptions {
        max_in_flight: 2,
        ..Default::default()
    }
}

#[test]
fn threads_each_with_their_own_device() {
    let workers: Vec<Worker> = (0..threads())
        .map(|i| {
            Box::new(move |p: &AtomicUsize| {
                let dev = Device::with_options(small_cap()).unwrap();
                work(&dev, i as u32, 6, p);
            }) as Worker
        })
        .collect();
    run_with_watchdog(workers, Duration::from_secs(240));
}

#[test]
fn threads_sharing_one_device() {
    let dev = Device::with_options(small_cap()).unwrap();
    let workers: Vec<Worker> = (0..threads())
        .map(|i| {
            let dev = dev.clone();
            Box::new(move |p: &AtomicUsize| work(&dev, 100 + i as u32, 8, p)) as Worker
        })
        .collect();
    run_with_watchdog(workers, Duration::from_secs(240));
    dev.sync().unwrap();
    assert_eq!(dev.stats().in_flight, 0);
}

/// The hardest mix for the locks: one in flight at a time and no pool cache (every freed
/// buffer is destroyed, which takes wgpu's device-wide lock), threads clearing the pool and
/// reading stats while others submit, sync and read back, and threads opening and dropping
/// devices of their own beside them.
#[test]
fn shared_device_under_buffer_churn_beside_private_devices() {
    let dev = Device::with_options(DeviceOptions {
        max_in_flight: 1,
        pool_cap_bytes: Some(0),
        ..Default::default()
    })
    .unwrap();
    let n = threads();
    let mut workers: Vec<Worker> = Vec::new();
    for i in 0..n {
        let dev = dev.clone();
        workers.push(Box::new(move |p: &AtomicUsize| {
            if i % 4 == 3 {
                // Opens, uses and drops devices of its own while the shared one is busy.
                for round in 0..3 {
                    let own = Device::with_options(small_cap()).unwrap();
                    work(&own, 200 + (i * 10 + round) as u32, 1, p);
                    drop(own);
                    dev.clear_pool();
                    let _ = dev.stats();
                }
                p.store(usize::MAX, Ordering::SeqCst);
            } else {
                work(&dev, 300 + i as u32, 5, p);
            }
        }));
    }
    run_with_watchdog(workers, Duration::from_secs(240));
    dev.sync().unwrap();
    assert_eq!(dev.stats().in_flight, 0);
}

/// Models move to other threads, as PyTorch modules do: a `Sequential` (with batch norm,
/// whose statistics live in an `nn::StateCell`), a `ModuleList` of boxed layers and a bare
/// `Box<dyn Forward>`, each run on a thread of its own against the same layers run here.
#[test]
fn models_move_to_other_threads() {
    use wgtensor::nn::{self, Forward, Module};
    let dev = Device::new().unwrap();
    let build = || {
        nn::Sequential::new()
            .push(nn::Linear::new(&dev, 6, 4, true).unwrap())
            .push(nn::BatchNorm1d::new(&dev, 4).unwrap())
            .push(nn::ReLU)
    };
    let mut here = build();
    let mut there = build();
    let sd = here.state_dict().into_iter().collect();
    there.load_state_dict(&sd, true).unwrap();
    here.eval();
    there.eval();
    let x = Tensor::from_slice(&dev, &values(18, 3), &[3, 6]).unwrap();
    let want = here.forward(&x).unwrap().to_vec::<f32>().unwrap();
    let boxed: Box<dyn Forward> = Box::new(there);
    let mut list = nn::ModuleList::new();
    list.push(boxed);
    let xs = x.clone();
    let got = std::thread::spawn(move || {
        let y = list[0].forward(&xs).unwrap();
        (y.to_vec::<f32>().unwrap(), list)
    })
    .join()
    .unwrap();
    assert_eq!(got.0, want);
    // And back: the list came home with its layer.
    assert_eq!(got.1[0].forward(&x).unwrap().to_vec::<f32>().unwrap(), want);
}

/// Threads share one model, as PyTorch modules are called from several threads: an
/// `Arc<Sequential>` with batch norm answers four threads at once, in eval mode with the
/// results of one thread alone, in training mode counting every thread's batch (the running
/// statistics' updates wait for each other).
#[test]
fn threads_share_one_model() {
    use wgtensor::nn::{self, Forward, Module};
    let dev = Device::new().unwrap();
    let mut model = nn::Sequential::new()
        .push(nn::Linear::new(&dev, 6, 4, true).unwrap())
        .push(nn::BatchNorm1d::new(&dev, 4).unwrap())
        .push(nn::ReLU);
    let x = Tensor::from_slice(&dev, &values(30, 5), &[5, 6]).unwrap();
    let counted = |m: &nn::Sequential| {
        let sd = m.state_dict();
        let (_, t) = sd
            .iter()
            .find(|(k, _)| k == "1.num_batches_tracked")
            .unwrap();
        t.to_dtype(wgtensor::DType::F32).unwrap().item().unwrap()
    };
    for training in [false, true] {
        if training {
            model.train();
        } else {
            model.eval();
        }
        let want = model.forward(&x).unwrap().to_vec::<f32>().unwrap();
        let before = counted(&model);
        let shared = Arc::new(model);
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (m, x) = (shared.clone(), x.clone());
                std::thread::spawn(move || m.forward(&x).unwrap().to_vec::<f32>().unwrap())
            })
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), want, "training {training}");
        }
        model = Arc::try_unwrap(shared).ok().unwrap();
        let after = counted(&model);
        assert_eq!(after - before, if training { 4.0 } else { 0.0 });
    }
}

/// `StateCell` keeps `RefCell`'s rules on one thread (a conflicting borrow is an error) and
/// waits for borrows held on other threads.
#[test]
fn state_cell_waits_for_other_threads() {
    use wgtensor::nn::StateCell;
    let cell = Arc::new(StateCell::new(1u32));
    {
        let r = cell.borrow();
        assert!(cell.try_borrow_mut().is_err());
        assert_eq!(*cell.try_borrow().unwrap(), *r);
    }
    {
        let _w = cell.borrow_mut();
        assert!(cell.try_borrow().is_err() && cell.try_borrow_mut().is_err());
    }
    let held = cell.borrow();
    let (tx, rx) = mpsc::channel();
    let other = cell.clone();
    // Timed from before the spawn: a thread scheduled late (a loaded GPU machine running test
    // binaries side by side) measured under 150 ms from its own start.
    let start = Instant::now();
    let t = std::thread::spawn(move || {
        *other.borrow_mut() += 1; // waits for `held`
        tx.send(start.elapsed()).unwrap();
    });
    std::thread::sleep(Duration::from_millis(200));
    assert!(rx.try_recv().is_err(), "the write did not wait");
    drop(held);
    t.join().unwrap();
    // The waiter got the cell no sooner than `held` went (200 ms after the spawn).
    assert!(rx.recv().unwrap() >= Duration::from_millis(200));
    assert_eq!(*cell.borrow(), 2);
}

/// Every out-of-range index is reported exactly once, by whichever readback or sync reads the
/// error buffer first, while other threads read back all the time: a readback takes the
/// pending check, copies the buffer and clears it under one lock, so a check recorded by
/// another thread cannot fall between the copy and the clear and be wiped unread.
#[test]
fn index_errors_survive_concurrent_readbacks() {
    let dev = Device::new().unwrap();
    let x = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0], &[4]).unwrap();
    let bad = Tensor::from_slice(&dev, &[0i32, 9], &[2]).unwrap();
    let small = Tensor::from_slice(&dev, &[5.0f32; 16], &[16]).unwrap();
    let checks = 600;
    let done = std::sync::atomic::AtomicBool::new(false);
    let reported = AtomicUsize::new(0);
    let is_index_error = |e: &wgtensor::Error| e.to_string().contains("index out of range");
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                while !done.load(Ordering::Acquire) {
                    match small.to_vec::<f32>() {
                        Ok(v) => assert_eq!(v, vec![5.0; 16]),
                        Err(e) if is_index_error(&e) => {
                            reported.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => panic!("readback failed: {e}"),
                    }
                }
            });
        }
        for i in 0..checks {
            let y = x.index_select(0, &bad).unwrap();
            drop(y);
            match dev.sync() {
                Ok(()) => {}
                Err(e) if is_index_error(&e) => {
                    reported.fetch_add(1, Ordering::SeqCst);
                }
                Err(e) => panic!("sync {i} failed: {e}"),
            }
        }
        done.store(true, Ordering::Release);
    });
    // Nothing left pending: one more sync reports nothing.
    if let Err(e) = dev.sync() {
        assert!(is_index_error(&e), "{e}");
        reported.fetch_add(1, Ordering::SeqCst);
    }
    assert_eq!(
        reported.load(Ordering::SeqCst),
        checks,
        "index errors reported"
    );
}
