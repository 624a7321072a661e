//! Runtime behaviour in the browser, on private devices so the counters see only this test:
//! the in-flight cap over a long loop, and errors that surface as `Err`, never as panics.

use wasm_bindgen_test::{console_log, wasm_bindgen_test};
use wgtensor::{Device, DeviceOptions, Error, Tensor};

const OPS: usize = 10_000;
const SYNC_EVERY: usize = 1_000;
const TAIL: usize = 500;

/// 10k dependent ops with a `sync_async().await` every 1000: batches of 64 dispatches give 16
/// batches between syncs, far more than the cap of 3, yet at no point are more than 3
/// submissions in flight (batches past the cap are parked until the next sync). Then 500 more
/// ops are read back without a sync: the readback submits the parked batches itself. The
/// result is exact (small integers), so nothing was lost or reordered.
#[wasm_bindgen_test]
async fn ten_thousand_ops_keep_in_flight_at_or_under_the_cap() {
    let opts = DeviceOptions::default();
    let cap = opts.max_in_flight;
    let dev = Device::new_async_with(opts).await.unwrap();
    let n = 4096;
    let start: Vec<f32> = (0..n).map(|i| (i % 97) as f32).collect();
    let mut x = Tensor::from_slice(&dev, &start, &[n]).unwrap();
    let (mut peak_in_flight, mut peak_parked, mut syncs) = (0, 0, 0);
    let t0 = js_now();
    for i in 0..OPS {
        x = x.add_scalar(1.0).unwrap();
        let s = dev.stats();
        peak_in_flight = peak_in_flight.max(s.in_flight);
        peak_parked = peak_parked.max(s.parked);
        assert!(
            s.in_flight <= cap,
            "op {i}: {} in flight > cap {cap}",
            s.in_flight
        );
        if (i + 1) % SYNC_EVERY == 0 {
            dev.sync_async().await.unwrap();
            syncs += 1;
            let s = dev.stats();
            assert_eq!((s.in_flight, s.parked), (0, 0), "after sync {syncs}");
        }
    }
    let loop_ms = js_now() - t0;
    let s = dev.stats();
    for _ in 0..TAIL {
        x = x.add_scalar(1.0).unwrap();
    }
    let parked_before_readback = dev.stats().parked;
    assert!(parked_before_readback > 0, "the tail left nothing parked");
    let got = x.to_vec_async::<f32>().await.unwrap();
    let want: Vec<f32> = start.iter().map(|v| v + (OPS + TAIL) as f32).collect();
    assert_eq!(got, want);
    let after = dev.stats();
    assert_eq!((after.parked, after.dispatches), (0, (OPS + TAIL) as u64));
    assert!(after.peak_in_flight <= cap);
    console_log!(
        "in-flight: {OPS} ops, {} dispatches, {} submissions, {syncs} syncs; peak in flight {} \
         (runtime counter {}) vs cap {cap}; up to {peak_parked} batches parked at once; pool \
         peak {} KiB; {loop_ms:.0} ms; then {TAIL} ops read back without a sync: \
         {parked_before_readback} parked batches submitted by the readback",
        s.dispatches,
        s.submissions,
        peak_in_flight,
        s.peak_in_flight,
        s.pool.peak_bytes >> 10,
    );
    assert!(s.peak_in_flight <= cap && peak_in_flight <= cap);
    assert_eq!(s.dispatches, OPS as u64);
    assert!(s.submissions >= (OPS / 64) as u64);
    // The cap really was in the way: without parking, 16 batches would have been in flight.
    assert!(peak_parked >= SYNC_EVERY / 64 - cap, "parked {peak_parked}");
}

/// A loop that never awaits parks one batch per op here (a batch a dispatch, one in flight)
/// until the bound refuses new work with an `Err` that says to await; both remedies it names
/// then work at the bound: a readback (which submits the parked batches first) and
/// `sync_async`. Nothing recorded before the refusal is lost.
#[wasm_bindgen_test]
async fn the_parking_bound_refuses_work_and_both_remedies_drain_it() {
    let opts = DeviceOptions {
        max_dispatches_per_submit: 1,
        max_in_flight: 1,
        ..DeviceOptions::default()
    };
    let dev = Device::new_async_with(opts).await.unwrap();
    let mut x = Tensor::from_slice(&dev, &[0.0f32, 1.0], &[2]).unwrap();
    let mut done = 0usize;
    // Runs ops until one is refused; returns its error.
    let fill = |x: &mut Tensor, done: &mut usize| -> Error {
        for _ in 0..5000 {
            match x.add_scalar(1.0) {
                Ok(y) => {
                    *x = y;
                    *done += 1;
                }
                Err(e) => return e,
            }
        }
        panic!("5000 ops without an await were never refused");
    };
    let e = fill(&mut x, &mut done);
    assert!(e.to_string().contains("await Device::sync_async()"), "{e}");
    assert!(dev.stats().parked >= 1000, "{}", dev.stats().parked);
    // A readback at the bound: the parked work runs, in order.
    let got = x.to_vec_async::<f32>().await.unwrap();
    assert_eq!(got, vec![done as f32, done as f32 + 1.0]);
    assert_eq!(dev.stats().parked, 0);
    // And sync_async at the bound, after which ops run again.
    let e = fill(&mut x, &mut done);
    assert!(
        e.to_string().contains("finished batches are waiting"),
        "{e}"
    );
    dev.sync_async().await.unwrap();
    assert_eq!(dev.stats().parked, 0);
    let y = x.add_scalar(1.0).unwrap();
    assert_eq!(
        y.to_vec_async::<f32>().await.unwrap(),
        vec![done as f32 + 1.0, done as f32 + 2.0]
    );
}

/// A wgpu validation error (made here through the raw device, as a faulty kernel would) is
/// reported by WebGPU asynchronously; it surfaces as `Err(Validation)` at the next async point
/// and the device keeps working. Argument errors are plain `Err`s as on native.
#[wasm_bindgen_test]
async fn errors_surface_as_err_not_panics() {
    let dev = Device::new_async().await.unwrap();
    let e = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0], &[2]).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e:?}");
    let a = Tensor::from_slice(&dev, &[1.0f32; 6], &[2, 3]).unwrap();
    let e = a.add(&Tensor::from_slice(&dev, &[1.0f32; 4], &[4]).unwrap());
    assert!(matches!(e, Err(Error::Shape { .. })), "{e:?}");

    // MAP_READ may only be combined with COPY_DST: an invalid buffer.
    let _bad = dev.wgpu_device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("invalid on purpose"),
        size: 16,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::STORAGE,
        mapped_at_creation: false,
    });
    let e = dev.sync_async().await.unwrap_err();
    assert!(matches!(e, Error::Validation { .. }), "{e:?}");
    console_log!("errors: surfaced as {e}");

    let y = a
        .mul_scalar(2.0)
        .unwrap()
        .to_vec_async::<f32>()
        .await
        .unwrap();
    assert_eq!(y, vec![2.0; 6]);
}

fn js_now() -> f64 {
    web_sys::window()
        .and_then(|w| w.performance())
        .map_or(0.0, |p| p.now())
}

/// In the browser the blocking `load_state_dict` cannot read `num_batches_tracked` back (the
/// count keeps its value); `nn::load_state_dict_async` restores it, so a cumulative average
/// (momentum None) goes on with PyTorch's factor.
#[wasm_bindgen_test]
async fn load_state_dict_async_restores_the_count() {
    use std::collections::HashMap;
    use wgtensor::nn::{self, Forward, Module};
    let dev = Device::new_async().await.unwrap();
    let cfg = nn::BatchNormConfig {
        momentum: None,
        ..Default::default()
    };
    let src = nn::BatchNorm1d::with_config(&dev, 2, cfg).unwrap();
    src.0.state.borrow_mut().num_batches_tracked = 9;
    let sd: HashMap<String, Tensor> = src.state_dict().into_iter().collect();
    let mut bn = nn::BatchNorm1d::with_config(&dev, 2, cfg).unwrap();
    nn::load_state_dict_async(&mut bn, &sd, true).await.unwrap();
    assert_eq!(bn.0.state.borrow().num_batches_tracked, 9);
    // The tenth batch weighs 1/10 against the loaded mean of 0.
    let x = Tensor::from_slice(&dev, &[10.0f32, 20.0, 10.0, 20.0], &[2, 2]).unwrap();
    bn.forward(&x).unwrap();
    let mean =
        bn.0.state
            .borrow()
            .running_mean
            .to_vec_async::<f32>()
            .await
            .unwrap();
    assert_eq!(mean, vec![1.0, 2.0]);
}

/// A readback future dropped before its end (a timeout in `select!`) neither keeps its staging
/// buffer counted nor loses the index error its bytes carry: the next sync reports it, once,
/// whether the future was dropped while its map was pending or while its copy was still parked
/// behind the in-flight cap.
#[wasm_bindgen_test]
async fn a_dropped_readback_gives_its_buffer_back_and_keeps_its_index_error() {
    let opts = DeviceOptions {
        max_dispatches_per_submit: 1,
        max_in_flight: 1,
        ..DeviceOptions::default()
    };
    let dev = Device::new_async_with(opts).await.unwrap();
    let a = Tensor::from_slice(&dev, &[1.0f32; 256], &[256]).unwrap();
    dev.sync_async().await.unwrap();
    let live = dev.stats().pool.live_bytes;
    {
        let mut f = Box::pin(a.to_vec_async::<f32>());
        assert!(futures::poll!(f.as_mut()).is_pending());
    }
    assert_eq!(dev.stats().pool.live_bytes, live);
    dev.sync_async().await.unwrap();

    let idx = Tensor::from_slice(&dev, &[0i32, 300], &[2]).unwrap();
    for parked in [false, true] {
        let g = a.index_select(0, &idx).unwrap();
        if parked {
            // One batch in flight, the rest (the index check's copy among them) parked.
            let mut y = a.clone();
            for _ in 0..4 {
                y = y.add_scalar(1.0).unwrap();
            }
            assert!(dev.stats().parked >= 1, "{}", dev.stats().parked);
        }
        {
            let mut f = Box::pin(g.to_vec_async::<f32>());
            assert!(futures::poll!(f.as_mut()).is_pending());
        }
        let e = dev.sync_async().await.unwrap_err();
        assert!(
            e.to_string().contains("index 300 is out of bounds"),
            "parked {parked}: {e}"
        );
        dev.sync_async().await.unwrap();
    }
}
