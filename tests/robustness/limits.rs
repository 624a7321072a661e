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

/// Empty shapes whose other dims are huge are refused (their strides would overflow), and
/// views of empty tensors never compute an offset.
#[test]
fn empty_shapes_with_huge_extents() {
    let e = Tensor::zeros(dev(), &[0, 1 << 40, 1 << 40], DType::F32).unwrap_err();
    names_op(&e, "zeros");
    let t = Tensor::zeros(dev(), &[0, 1 << 16, 1 << 15], DType::F32).unwrap();
    assert!(t.is_contiguous());
    assert_eq!(t.permute(&[1, 2, 0]).unwrap().numel(), 0);
    assert_eq!(t.unsqueeze(1).unwrap().shape(), &[0, 1, 1 << 16, 1 << 15]);
    assert_eq!(t.narrow(1, 1 << 15, 1).unwrap().shape(), &[0, 1, 1 << 15]);
    assert_eq!(t.reshape(&[1 << 15, 0, 1 << 16]).unwrap().numel(), 0);
    let e = t.reshape(&[0, 1 << 40]).unwrap_err();
    names_op(&e, "reshape");
}

/// unsqueeze inserts a size-1 dim anywhere (negative dims count from rank + 1) as a view.
#[test]
fn unsqueeze_is_a_view() {
    let t = super::ramp(&[2, 3]);
    assert_eq!(t.unsqueeze(0).unwrap().shape(), &[1, 2, 3]);
    assert_eq!(t.unsqueeze(-1).unwrap().shape(), &[2, 3, 1]);
    assert_eq!(t.unsqueeze(1).unwrap().shape(), &[2, 1, 3]);
    let v = t.transpose(0, 1).unwrap().unsqueeze(1).unwrap();
    assert!(v.shares_storage(&t));
    assert_eq!(
        vals(&v.contiguous().unwrap()),
        vec![0.5, 3.5, 1.5, 4.5, 2.5, 5.5]
    );
    assert!(t.unsqueeze(3).is_err());
    assert!(t.unsqueeze(-4).is_err());
}
