//! The cooperative-matrix GEMM's self-test, run when a device opens with `Caps::coop16`:
//! wgpu calls the feature experimental and each driver compiles the tile's matrices itself, so
//! the device multiplies a small f16 product on the tile (ragged in M, N and K, several K steps;
//! whole and split along K) and compares it with the exact sums before trusting it. A device
//! whose test fails to compile or miscomputes is assembled again on the same wgpu device
//! without the tile; one whose test loses the device or does not finish in time
//! (`PROBE_WAIT`) is opened afresh without the feature (src/device_open.rs). Either way
//! [`Device::cooperative_matrix_refused`] keeps the error, so a driver with a broken tile costs
//! speed, never a wrong result or the device.
#![cfg(not(target_arch = "wasm32"))]

use std::cell::Cell;

use super::plan::{plan_for_dtype, GemmKernel};
use super::{gemm, GemmOptions};
use crate::{DType, Device, Error, Result, Tensor};

/// The test's product: more than 64 rows and columns (so it plans the tile), ragged against its
/// 128 x 128 tile and its K steps of 16.
const M: usize = 130;
const N: usize = 136;
const K: usize = 40;

thread_local! {
    /// Set by [`fail_next_coop_probe`] (1) or [`stall_next_coop_probe`] (2): how the next
    /// self-test on this thread ends; 0: it runs.
    static FORCE_NEXT: Cell<u8> = const { Cell::new(0) };
}

/// Makes the next cooperative-matrix self-test on this thread fail, so tests can see a device
/// refuse the tile (a device opens on the thread that asks for it).
#[doc(hidden)]
pub fn fail_next_coop_probe() {
    FORCE_NEXT.with(|f| f.set(1));
}

/// Makes the next cooperative-matrix self-test on this thread end as a GPU that never
/// finishes it would (a wait that timed out), so tests can see the device opened again
/// without the tile.
#[doc(hidden)]
pub fn stall_next_coop_probe() {
    FORCE_NEXT.with(|f| f.set(2));
}

/// Multiplies the test product on `dev`'s cooperative-matrix tile, whole and split in two
/// along K (the tile's product kernel and its split-k kernel): `Err` if planning, compiling or
/// running either fails or any value differs from the exact sum (small integers, exact in f16
/// and in every summation order). Its waits for the GPU are bounded by `PROBE_WAIT`.
pub(crate) fn check(dev: &Device) -> Result<()> {
    match FORCE_NEXT.with(|f| f.replace(0)) {
        1 => {
            return Err(Error::Other {
                context: OP.into(),
                msg: "self-test failed on request (fail_next_coop_probe)".into(),
            })
        }
        2 => {
            return Err(Error::Readback {
                op: OP,
                msg: "self-test stalled on request (stall_next_coop_probe)".into(),
            })
        }
        _ => {}
    }
    // A CPU adapter (the emulated tile under gpu_plans) may compile as it runs: no cap there.
    if dev.adapter_info().device_type == wgpu::DeviceType::Cpu {
        return multiply_and_compare(dev);
    }
    crate::runtime::with_wait_cap(PROBE_WAIT, || multiply_and_compare(dev))
}

/// The longest the self-test waits for a GPU: the product takes milliseconds, so a longer
/// wait means a driver stuck on the tile, and the device is opened again without it.
const PROBE_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// The op its errors name.
const OP: &str = "cooperative_matrix";

/// The test's product, whole and split, compared with the exact sums.
fn multiply_and_compare(dev: &Device) -> Result<()> {
    let av: Vec<f32> = (0..M * K).map(|i| ((i * 5 + 1) % 7) as f32 - 3.0).collect();
    let bv: Vec<f32> = (0..K * N).map(|i| ((i * 3 + 2) % 7) as f32 - 3.0).collect();
    let a = Tensor::from_slice(dev, &av, &[M, K])?.to_dtype(DType::F16)?;
    let b = Tensor::from_slice(dev, &bv, &[K, N])?.to_dtype(DType::F16)?;
    for split in [None, Some(2)] {
        let plan = plan_for_dtype(dev.caps(), DType::F16, M, N, K, 1, split)?;
        if plan.kernel != GemmKernel::Coop16 || plan.splits != split.unwrap_or(1) {
            return Err(Error::Other {
                context: OP.into(),
                msg: format!("self-test planned {plan:?}, not the cooperative-matrix tile"),
            });
        }
        let opts = GemmOptions {
            split_k: split,
            ..Default::default()
        };
        let got = gemm(&a, &b, &opts)?.to_dtype(DType::F32)?.to_vec::<f32>()?;
        for i in 0..M {
            for j in 0..N {
                let want: f32 = (0..K).map(|p| av[i * K + p] * bv[p * N + j]).sum();
                if got[i * N + j] != want {
                    return Err(Error::Other {
                        context: OP.into(),
                        msg: format!(
                            "self-test: [{M} x {K}] x [{K} x {N}] f16 product, split {split:?}, \
                             gave {} at ({i}, {j}), expected {want}",
                            got[i * N + j]
                        ),
                    });
                }
            }
        }
    }
    Ok(())
}
