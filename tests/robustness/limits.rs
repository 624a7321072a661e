//! Sizes at the u32 limits the API accepts finish with the right answer or are refused up front.

use wgtensor::ops::{gemm, matmul, GemmOptions};
use wgtensor::{DType, Error, Tensor};

use super::{dev, names_op, still_works, vals};

/// A reduction over 2^32 - 1 logical elements (a broadcast view: no memory) finishes, and its
/// loop does not wrap: sum of ones, mean 1, max 1.
#[test]
fn reduction_over_nearly_2_pow_32_elements_finishes() {
    let n = u32::MAX as usize;
    let x = Tensor::full(dev(), &[1], 1.0, DType::F32)
        .unwrap()
        .broadcast_to(&[n])
        .unwrap();
    let s = vals(&x.sum(0, false).unwrap())[0];
    // Each of the 256 lanes adds 2^24 ones exactly; the f32 total rounds to 2^32.
    assert_eq!(s, n as f32, "{s}");
    assert_eq!(vals(&x.max(0, false).unwrap()), vec![1.0]);
    still_works(dev());
}

/// GEMM with a K past what the kernels accept is refused, naming the op and K; the plan never
/// drops a K slice, even at K = 2^32 - 1.
#[test]
fn gemm_k_at_the_limit() {
    let k = u32::MAX as usize;
    let a = Tensor::full(dev(), &[1, 1], 1.0, DType::F32)
        .unwrap()
        .broadcast_to(&[1, k])
        .unwrap();
    let b = Tensor::full(dev(), &[1, 1], 1.0, DType::F32)
        .unwrap()
        .broadcast_to(&[k, 1])
        .unwrap();
    let e = matmul(&a, &b).unwrap_err();
    assert!(matches!(e, Error::Size { .. }), "{e:?}");
    names_op(&e, "matmul");
    assert!(e.to_string().contains(&k.to_string()), "{e}");
    let e = gemm(&a, &b, &GemmOptions::default()).unwrap_err();
    names_op(&e, "gemm");
    for split in [None, Some(2), Some(3), Some(7), Some(1 << 16)] {
        let p = wgtensor::ops::gemm::plan(dev(), 1, 1, k, 1, split).unwrap();
        let covered = p.splits as u64 * p.k_chunk as u64;
        assert!(covered >= k as u64, "{p:?} drops K");
        assert!(
            (p.splits as u64 - 1) * (p.k_chunk as u64) < k as u64,
            "{p:?} has an empty slice"
        );
    }
    still_works(dev());
}
