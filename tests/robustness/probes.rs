//! The adversarial probes of robustness round 2 that the other modules here do not already
//! reproduce, each as the issue wrote it: refused optimizer steps change nothing, non-leaf
//! parameters are refused, a duplicate name in a save is an error (it panicked), i32
//! comparisons are exact against any f64 scalar, and random ranges a dtype cannot hold are
//! refused.

use super::{dev, vals};
use wgtensor::ops::uniform;
use wgtensor::optim::{Adam, AdamOptions, Sgd, SgdOptions};
use wgtensor::{io, DType, Tensor};

fn leaf(v: &[f32]) -> Tensor {
    Tensor::from_slice(dev(), v, &[v.len()])
        .unwrap()
        .requires_grad()
        .unwrap()
}

#[test]
fn refused_optimizer_steps_change_nothing() {
    let w = leaf(&[1.0, 2.0]);
    let o = SgdOptions {
        lr: 0.1,
        momentum: 0.9,
        ..Default::default()
    };
    let mut sgd = Sgd::new(vec![w.clone()], o).unwrap();
    let wrong = Tensor::from_slice(dev(), &[1.0f32; 3], &[3]).unwrap();
    assert!(sgd.step_with(&[Some(&wrong)]).is_err());
    let g = Tensor::from_slice(dev(), &[1.0f32, 1.0], &[2]).unwrap();
    sgd.step_with(&[Some(&g)]).unwrap();
    // A fresh momentum buffer: the first real step is plain SGD, as in PyTorch.
    assert_eq!(vals(&w), vec![0.9, 1.9]);

    let w = leaf(&[1.0, 2.0]);
    let mut adam = Adam::new(vec![w.clone()], AdamOptions::default()).unwrap();
    assert!(adam.step_with(&[Some(&wrong)]).is_err());
    assert_eq!(adam.step_count(0), Some(0), "a refused step is not counted");
    // Non-leaf parameters are refused at construction (untracked ones are taken, as PyTorch
    // takes them: tests/optim.rs).
    let base = leaf(&[1.0, 2.0]);
    assert!(Sgd::new(vec![base.mul_scalar(0.01).unwrap()], o).is_err());
}

#[test]
fn saving_a_duplicate_name_is_an_error() {
    let a = Tensor::from_slice(dev(), &[1.0f32], &[1]).unwrap();
    let b = Tensor::from_slice(dev(), &[2.0f32], &[1]).unwrap();
    let e = io::save_safetensors(&[("w", &a), ("w", &b)]).unwrap_err();
    assert!(e.to_string().contains("\"w\""), "{e}");
}

#[test]
fn i32_comparisons_are_exact_against_any_scalar() {
    let t = Tensor::from_slice(dev(), &[i32::MAX, 0], &[2]).unwrap();
    let f = |r: wgtensor::Result<Tensor>| vals(&r.unwrap().to_dtype(DType::F32).unwrap());
    assert_eq!(f(t.eq_scalar(4294967296.0)), vec![0.0, 0.0]);
    assert_eq!(f(t.lt_scalar(3e9)), vec![1.0, 1.0]);
    let t = Tensor::from_slice(dev(), &[i32::MIN, 0], &[2]).unwrap();
    assert_eq!(f(t.gt_scalar(-3e9)), vec![1.0, 1.0]);
}

#[test]
fn random_ranges_past_the_dtype_are_refused() {
    assert!(uniform(dev(), &[4096], -3e38, 3e38, DType::F32).is_err());
    assert!(uniform(dev(), &[4096], -1e39, 1e39, DType::F32).is_err());
    if dev().supports_f16() {
        assert!(uniform(dev(), &[4096], -1e5, 1e5, DType::F16).is_err());
    }
    // Wide but representable ranges still work and stay finite.
    let u = uniform(dev(), &[4096], -1e38, 1e38, DType::F32).unwrap();
    assert!(vals(&u).iter().all(|v| v.is_finite()));
}
