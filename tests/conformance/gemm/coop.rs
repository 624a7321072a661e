//! The cooperative-matrix GEMM (`gemm_coop`: f16 on 16x16x16 fragments with f32 accumulation)
//! on a device opened with `DeviceOptions::cooperative_matrix`. Where the adapter offers the
//! configuration (NVIDIA through VK_KHR_cooperative_matrix: a GPU session's run of this suite),
//! f16 products of more than 64 rows and columns must plan `Coop16` and every f16 case must
//! pass with the suite's bounds; elsewhere (lavapipe) the option alone must be ignored: the
//! plan stays on the FMA kernels and f16 results are unchanged. The tile's own tests (its
//! sizes, its split-k, fixed shapes checked exactly) run on `tile_device`: the real tile where
//! the adapter offers it, else, on a CPU adapter, the same tile over emulated fragments
//! (`gpu_plans` with the option, shaders/lib/coop_frag_emu.wgsl).

use std::sync::OnceLock;

use wgtensor::ops::gemm::{
    fail_next_coop_probe, plan_for_dtype, stall_next_coop_probe, GemmKernel,
};
use wgtensor::ops::{gemm, GemmOptions};
use wgtensor::DeviceOptions;

use crate::common::matrix;
use crate::strategies::Rng;

use super::*;

fn coop_device() -> &'static Device {
    static DEVICE: OnceLock<Device> = OnceLock::new();
    DEVICE.get_or_init(|| {
        Device::with_options(DeviceOptions {
            cooperative_matrix: true,
            ..Default::default()
        })
        .expect("no wgpu adapter")
    })
}

/// Whether the adapter runs f16 GEMMs on cooperative matrices; says so either way.
fn coop_available() -> bool {
    // A tile that failed its self-test on this driver is a failure here, not a skip.
    if let Some(e) = coop_device().cooperative_matrix_refused() {
        panic!("the cooperative-matrix tile failed its self-test: {e}");
    }
    let caps = coop_device().caps();
    let plan = plan_for_dtype(caps, DType::F16, 256, 256, 256, 1, None).unwrap();
    assert_eq!(plan.kernel == GemmKernel::Coop16, caps.coop16, "{plan:?}");
    if !caps.coop16 {
        // The option is ignored: the same plan as on a device opened without it.
        let without = Device::with_options(DeviceOptions {
            cooperative_matrix: false,
            ..Default::default()
        })
        .expect("no wgpu adapter");
        let plain = plan_for_dtype(without.caps(), DType::F16, 256, 256, 256, 1, None).unwrap();
        assert_eq!(plan, plain);
        eprintln!(
            "gemm_coop: not run, {} offers no 16x16x16 f16 cooperative matrices",
            coop_device().adapter_info().name
        );
    }
    caps.coop16
}

/// Every f16 shape on a device with cooperative matrices: the tile where it is planned, the
/// FMA kernels for 64 rows or columns or fewer (and split-k for those).
#[test]
fn gemm_coop_f16() {
    if !coop_available() {
        return;
    }
    let dev = coop_device();
    gemm_cases(dev, 12, DType::F16, general_sizes(), Mode::General);
    gemm_cases(dev, 6, DType::F16, general_sizes(), Mode::Exact);
    gemm_cases(dev, 4, DType::F16, splitk_sizes(), Mode::SplitK);
}

/// Where the cooperative-matrix tile runs: the real tile where the adapter offers it, else
/// the emulated one on a CPU adapter; `None` on a GPU without it.
fn tile_device() -> Option<&'static Device> {
    if coop_available() {
        Some(coop_device())
    } else {
        emulated_device()
    }
}

/// A CPU adapter opened with `gpu_plans` and `cooperative_matrix`: f16 products plan the
/// cooperative-matrix tile and run it over the plain-WGSL fragments
/// (shaders/lib/coop_frag_emu.wgsl), so the tile's staging, double buffering, split-k and
/// epilogue are tested without tensor cores. `None` elsewhere (a GPU runs the real tile
/// above, or has none).
fn emulated_device() -> Option<&'static Device> {
    static DEVICE: OnceLock<Device> = OnceLock::new();
    let dev = DEVICE.get_or_init(|| {
        Device::with_options(DeviceOptions {
            cooperative_matrix: true,
            gpu_plans: true,
            ..Default::default()
        })
        .expect("no wgpu adapter")
    });
    let cpu = dev.adapter_info().device_type == wgpu::DeviceType::Cpu;
    if !cpu || !dev.supports_f16() {
        return None;
    }
    assert!(
        dev.caps().coop16 && dev.coop_emulated(),
        "{:?}, self-test: {:?}",
        dev.caps(),
        dev.cooperative_matrix_refused()
    );
    Some(dev)
}

#[test]
fn gemm_coop_tile_f16() {
    let Some(dev) = tile_device() else {
        return;
    };
    let plan = plan_for_dtype(dev.caps(), DType::F16, 300, 300, 300, 1, None).unwrap();
    assert_eq!(plan.kernel, GemmKernel::Coop16, "{plan:?}");
    // f32 keeps the FMA kernels.
    let plan = plan_for_dtype(dev.caps(), DType::F32, 300, 300, 300, 1, None).unwrap();
    assert_ne!(plan.kernel, GemmKernel::Coop16, "{plan:?}");
    // Products of 64 rows or columns or fewer keep the FMA kernels: the tile's own cases.
    gemm_cases(dev, 10, DType::F16, tile_sizes(), Mode::General);
    gemm_cases(dev, 6, DType::F16, tile_sizes(), Mode::Exact);
    gemm_cases(dev, 3, DType::F16, tile_splitk_sizes(), Mode::SplitK);
    gemm_cases(dev, 2, DType::F16, large_sizes(), Mode::General);
}

/// Every device that runs the tile passed its self-test when it opened; one whose test fails
/// (forced here) opens without the tile, keeps the error, plans the FMA kernels and still
/// multiplies f16 right.
#[test]
fn a_failed_self_test_keeps_the_fma_kernels() {
    let Some(tiled) = tile_device() else {
        return;
    };
    assert!(tiled.cooperative_matrix_refused().is_none());
    fail_next_coop_probe();
    let dev = Device::with_options(tiled.options().clone()).unwrap();
    let e = dev
        .cooperative_matrix_refused()
        .expect("the forced failure is kept");
    assert!(
        e.to_string().starts_with("cooperative_matrix: self-test"),
        "{e}"
    );
    assert!(
        !dev.caps().coop16 && !dev.coop_emulated(),
        "{:?}",
        dev.caps()
    );
    assert!(
        dev.options().cooperative_matrix,
        "the options stay as given"
    );
    let plan = plan_for_dtype(dev.caps(), DType::F16, 300, 300, 300, 1, None).unwrap();
    assert_ne!(plan.kernel, GemmKernel::Coop16, "{plan:?}");
    gemm_cases(&dev, 3, DType::F16, tile_sizes(), Mode::Exact);
    // The request was this thread's next test only.
    let again = Device::with_options(tiled.options().clone()).unwrap();
    assert!(again.caps().coop16 && again.cooperative_matrix_refused().is_none());
}

/// A self-test the GPU never finishes (forced here as the timed-out wait it would end in)
/// leaves nothing to trust on that wgpu device: the device is opened afresh without the tile,
/// keeps the error and multiplies f16 right.
#[test]
fn a_stalled_self_test_reopens_the_device_without_the_tile() {
    let Some(tiled) = tile_device() else {
        return;
    };
    stall_next_coop_probe();
    let dev = Device::with_options(tiled.options().clone()).unwrap();
    let e = dev.cooperative_matrix_refused().expect("the stall is kept");
    assert!(
        matches!(e, wgtensor::Error::Readback { .. }) && e.to_string().contains("stalled"),
        "{e}"
    );
    assert!(
        !dev.caps().coop16 && !dev.coop_emulated(),
        "{:?}",
        dev.caps()
    );
    gemm_cases(&dev, 3, DType::F16, tile_sizes(), Mode::Exact);
}

/// Subgroups disabled: no tile (it maps invocations to 32-lane subgroups), neither offered
/// nor emulated.
#[test]
fn disabled_subgroups_keep_the_fma_kernels() {
    let Some(tiled) = tile_device() else {
        return;
    };
    let dev = Device::with_options(DeviceOptions {
        disable_subgroups: true,
        ..tiled.options().clone()
    })
    .unwrap();
    assert!(
        !dev.caps().coop16 && !dev.coop_emulated(),
        "{:?}",
        dev.caps()
    );
    let plan = plan_for_dtype(dev.caps(), DType::F16, 300, 300, 300, 1, None).unwrap();
    assert_ne!(plan.kernel, GemmKernel::Coop16, "{plan:?}");
}

/// Problems the cooperative-matrix tile takes (more than 64 rows and columns), some batched.
fn tile_sizes() -> BoxedStrategy<Sizes> {
    prop_oneof![
        (65usize..=300, 65usize..=300, 1usize..=300).prop_map(|(m, n, k)| (
            m,
            n,
            k,
            vec![],
            vec![]
        )),
        (65usize..=140, 65usize..=140, 1usize..=64, batch_pair(4))
            .prop_map(|(m, n, k, (ab, bb))| (m, n, k, ab, bb)),
    ]
    .boxed()
}

/// The tile's split-k territory: one to four tiles and a long K.
fn tile_splitk_sizes() -> BoxedStrategy<Sizes> {
    (65usize..=160, 65usize..=160, 1024usize..=4096)
        .prop_map(|(m, n, k)| (m, n, k, vec![], vec![]))
        .boxed()
}

/// Fixed shapes through the tile: every fragment of a full 128 x 128 tile, ragged edges in
/// M, N and K (K not a multiple of the 16-step, one step, many, none), both staging orders of
/// each operand (contiguous along K or along the tile), and a split K: small integers, whose
/// products and sums every path computes exactly, so each value must equal the plain sum.
/// Column 0 of every third row of A holds inf and row 0 of every fifth column of B NaN: they
/// must reach exactly their own rows and columns, so the staging reads nothing past a row's
/// or a slice's K range (past it lie the next row's or slice's values, and 0 x inf is NaN).
#[test]
fn gemm_coop_tile_fixed_shapes() {
    let Some(dev) = tile_device() else {
        return;
    };
    let mut rng = Rng::new(7);
    for &(m, n, k, split) in &[
        (128, 128, 32, None),
        (129, 130, 17, None),
        (65, 65, 1, None),
        (70, 66, 0, None),
        (200, 257, 33, None),
        (65, 144, 16, None),
        (72, 80, 600, Some(3)),
    ] {
        let plan = plan_for_dtype(dev.caps(), DType::F16, m, n, k, 1, split).unwrap();
        assert_eq!(plan.kernel, GemmKernel::Coop16, "{m} x {n} x {k}: {plan:?}");
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let mut av: Vec<f32> = (0..m * k).map(|_| rng.below(7) as f32 - 3.0).collect();
            let mut bv: Vec<f32> = (0..k * n).map(|_| rng.below(7) as f32 - 3.0).collect();
            if k > 0 {
                (0..m)
                    .filter(|i| i % 3 == 1)
                    .for_each(|i| av[i * k] = f32::INFINITY);
                (0..n).filter(|j| j % 5 == 2).for_each(|j| bv[j] = f32::NAN);
            }
            let a = matrix(dev, &av, (m, k), ta, DType::F16);
            let b = matrix(dev, &bv, (k, n), tb, DType::F16);
            let opts = GemmOptions {
                split_k: split,
                ..Default::default()
            };
            let got = gemm(&a, &b, &opts)
                .and_then(|y| y.to_dtype(DType::F32))
                .and_then(|y| y.to_vec::<f32>())
                .unwrap();
            for i in 0..m {
                for j in 0..n {
                    let want: f32 = (0..k).map(|p| av[i * k + p] * bv[p * n + j]).sum();
                    // One non-finite term at most per value: its sum is the same in any order.
                    assert!(
                        got[i * n + j] == want || (got[i * n + j].is_nan() && want.is_nan()),
                        "{} against {want}: \
                         [{m} x {k}] x [{k} x {n}] split {split:?} transposed ({ta}, {tb}) at \
                         ({i}, {j})",
                        got[i * n + j],
                    );
                }
            }
        }
    }
}
