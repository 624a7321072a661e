//! Uploads count toward a flush even when no op is recorded: wgpu stages every
//! `queue.write_buffer` until the next submit, so a loop of small uploads (far below
//! `max_bytes_per_submit`) must still submit now and then, or its staging memory grows without
//! bound.

use wgtensor::{DType, Device, Tensor};

use super::vals;

#[test]
fn small_upload_only_loop_submits() {
    // No cooperative-matrix self-test at open (on NVIDIA it submits before the test starts).
    let d = Device::with_options(wgtensor::DeviceOptions {
        cooperative_matrix: false,
        ..Default::default()
    })
    .unwrap();
    let before = d.stats();
    assert_eq!(before.submissions, 0, "{before:?}");
    let data = [1f32; 256];
    for _ in 0..5_000 {
        drop(Tensor::from_slice(&d, &data, &[256]).unwrap());
    }
    let st = d.stats();
    assert!(
        st.submissions > before.submissions,
        "5000 uploads made no submission, so wgpu held all their staging copies: {st:?}"
    );
    // Enough submissions for the staging memory to stay bounded, not one per upload.
    assert!(st.submissions <= 50, "{st:?}");
    assert!(
        st.pool.live_bytes + st.pool.cached_bytes <= 1 << 20,
        "{:?}",
        st.pool
    );
    assert!(st.pool.peak_bytes <= 1 << 20, "{:?}", st.pool);
    // Uploads interleaved with kept tensors stay correct across the flushes.
    let kept: Vec<Tensor> = (0..2_100)
        .map(|i| Tensor::from_slice(&d, &[i as f32], &[1]).unwrap())
        .collect();
    for (i, t) in kept.iter().enumerate().step_by(97) {
        assert_eq!(vals(t), vec![i as f32]);
    }
}

/// Buffers created with no batch open count their bytes; past `max_bytes_per_submit` the
/// (empty) flush starts the count over, so the next small op does not submit at once.
#[test]
fn byte_count_resets_when_nothing_was_recorded() {
    let d = Device::with_options(wgtensor::DeviceOptions {
        max_bytes_per_submit: 4096,
        cooperative_matrix: false,
        ..Default::default()
    })
    .unwrap();
    // 8 KiB created with no batch open: over the byte budget, nothing to submit.
    let big = Tensor::zeros(&d, &[2048], DType::F32).unwrap();
    // A few small buffers (1 KiB in all) and their clears fit the budget after the reset.
    let small: Vec<Tensor> = (0..4)
        .map(|_| Tensor::zeros(&d, &[16], DType::F32).unwrap())
        .collect();
    assert_eq!(d.stats().submissions, 0, "{:?}", d.stats());
    assert_eq!(vals(&small[3]), vec![0.0; 16]);
    assert_eq!(vals(&big.narrow(0, 2040, 8).unwrap()), vec![0.0; 8]);
}
