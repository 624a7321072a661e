//! The cooperative-matrix GEMM (`gemm_coop`: f16 on 16x16x16 fragments with f32 accumulation)
//! on a device opened with `DeviceOptions::cooperative_matrix`. Where the adapter offers the
//! configuration (NVIDIA through VK_KHR_cooperative_matrix: a GPU session's run of this suite),
//! f16 products must plan `Coop16` and pass the f16 cases (general, exact, split-k, matmul,
//! ragged edges and views) with the suite's bounds; elsewhere (lavapipe) the option must be
//! ignored: the plan stays on the FMA kernels and f16 results are unchanged.

use std::sync::OnceLock;

use wgtensor::ops::gemm::{plan_for_dtype, GemmKernel};
use wgtensor::DeviceOptions;

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
    let caps = coop_device().caps();
    let plan = plan_for_dtype(caps, DType::F16, 256, 256, 256, 1, None).unwrap();
    assert_eq!(plan.kernel == GemmKernel::Coop16, caps.coop16, "{plan:?}");
    if !caps.coop16 {
        // The option is ignored: the same plan as without it.
        let plain = plan_for_dtype(device().caps(), DType::F16, 256, 256, 256, 1, None).unwrap();
        assert_eq!(plan, plain);
        eprintln!(
            "gemm_coop: not run, {} offers no 16x16x16 f16 cooperative matrices",
            coop_device().adapter_info().name
        );
    }
    caps.coop16
}

#[test]
fn gemm_coop_f16() {
    if !coop_available() {
        return;
    }
    let dev = coop_device();
    gemm_cases(dev, 16, DType::F16, general_sizes(), Mode::General);
    gemm_cases(dev, 8, DType::F16, general_sizes(), Mode::Exact);
    gemm_cases(dev, 6, DType::F16, splitk_sizes(), Mode::SplitK);
    gemm_cases(dev, 2, DType::F16, large_sizes(), Mode::General);
}
