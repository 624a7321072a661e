//! Deterministic inputs for the cases: the same seed gives the same data on every run and
//! machine, so timings never depend on what the data happens to be.

use wgtensor::{DType, Device, Tensor};

/// `n` values in [-1, 1] from an xorshift generator seeded by `seed`.
pub fn data(n: usize, seed: u32) -> Vec<f32> {
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

/// A device tensor of `shape` filled with [`data`], converted to `dtype`.
pub fn tensor(dev: &Device, shape: &[usize], dtype: DType, seed: u32) -> wgtensor::Result<Tensor> {
    let n = shape.iter().product();
    Tensor::from_slice(dev, &data(n, seed), shape)?.to_dtype(dtype)
}
