//! The GPU plan's kernel (`gemm_wg`: 128 x 64 or 64 x 64 tiles staged through workgroup memory
//! 8 steps of K at a time, double buffered) run on lavapipe through `gpu_plans_device()`: a share of
//! the suite's generated cases (general, exact, large, split-k, f16, matmul; batched,
//! broadcast, transposed and sliced views, every epilogue) and fixed ragged edges (M, N and K
//! off the tile, K < KT, K = 0, split and unsplit). Same checks and bounds as the parent module.

use wgtensor::ops::gemm::GemmKernel;

use super::*;
use crate::common::gpu_plans_device;

const CASES_F32: u32 = 16;
const CASES_F16: u32 = 8;
const CASES_EXACT_F32: u32 = 12;
const CASES_EXACT_F16: u32 = 6;
const CASES_LARGE_F32: u32 = 2;
const CASES_SPLITK_F32: u32 = 8;
const CASES_SPLITK_EXACT_F32: u32 = 6;
const CASES_MATMUL_F32: u32 = 12;

fn dev() -> &'static Device {
    gpu_plans_device()
}

#[test]
fn gemm_wg_is_the_gpu_plan() {
    for (m, n, k) in [(100, 100, 100), (1, 1, 0), (5000, 3, 70000), (64, 4096, 64)] {
        let p = plan(dev(), m, n, k, 1, None).unwrap();
        assert!(
            matches!(p.kernel, GemmKernel::WgTiled | GemmKernel::WgTiled128),
            "{p:?}"
        );
        // 64 rows or fewer: the 64-row tile.
        if m <= 64 {
            assert_eq!(p.kernel, GemmKernel::WgTiled, "{p:?}");
        }
    }
    // The 128 x 64 tile once its tiles alone fill the estimated slots (lavapipe's are its
    // threads, a discrete GPU's 256), however wide; one tile fewer: 64 x 64.
    let slots = dev().caps().parallelism;
    for n in [64, 8192] {
        let p = plan(dev(), 128 * slots, n, 64, 1, None).unwrap();
        assert_eq!(p.kernel, GemmKernel::WgTiled128, "{p:?}");
    }
    // The slots filled by a batch of one-tile products.
    let p = plan(dev(), 128, 64, 64, slots, None).unwrap();
    assert_eq!(p.kernel, GemmKernel::WgTiled128, "{p:?}");
    let p = plan(dev(), 128 * (slots - 1), 64, 64, 1, None).unwrap();
    assert_eq!(p.kernel, GemmKernel::WgTiled, "{p:?}");
}

#[test]
fn gemm_wg_f32() {
    gemm_cases(dev(), CASES_F32, DType::F32, general_sizes(), Mode::General);
}

#[test]
fn gemm_wg_f16() {
    require_f16(dev());
    gemm_cases(dev(), CASES_F16, DType::F16, general_sizes(), Mode::General);
}

#[test]
fn gemm_wg_exact_f32() {
    gemm_cases(
        dev(),
        CASES_EXACT_F32,
        DType::F32,
        general_sizes(),
        Mode::Exact,
    );
}

#[test]
fn gemm_wg_exact_f16() {
    require_f16(dev());
    gemm_cases(
        dev(),
        CASES_EXACT_F16,
        DType::F16,
        general_sizes(),
        Mode::Exact,
    );
}

#[test]
fn gemm_wg_large_f32() {
    gemm_cases(
        dev(),
        CASES_LARGE_F32,
        DType::F32,
        large_sizes(),
        Mode::General,
    );
}

#[test]
fn gemm_wg_splitk_f32() {
    gemm_cases(
        dev(),
        CASES_SPLITK_F32,
        DType::F32,
        splitk_sizes(),
        Mode::SplitK,
    );
}

#[test]
fn gemm_wg_splitk_exact_f32() {
    gemm_cases(
        dev(),
        CASES_SPLITK_EXACT_F32,
        DType::F32,
        splitk_sizes(),
        Mode::SplitKExact,
    );
}

#[test]
fn splitk_wg_deterministic_f32() {
    pollster::block_on(splitk_deterministic(dev(), DType::F32));
}

#[test]
fn splitk_wg_agrees_with_unsplit_f32() {
    pollster::block_on(splitk_agrees_with_unsplit(dev(), DType::F32));
}

#[test]
fn matmul_wg_f32() {
    run_async(CASES_MATMUL_F32, matmul_problem(DType::F32), async |p| {
        check_matmul(dev(), p).await
    });
}

/// Sizes on and off the 64 x 64 and 128 x 64 tiles and the K step of 8: K < KT, K = 0 (the epilogue alone),
/// one element, one row or column, several ragged tiles; each with a transposed operand, a
/// sliced or broadcast view, C, a bias and an activation, unsplit and split in 2 and 3, on
/// small integers (exact) and uniform values, f32 and f16.
#[test]
fn gemm_wg_ragged_edges() {
    let sizes = [
        (1, 1, 1),
        (64, 64, 8),
        (65, 63, 7),
        (63, 65, 9),
        (3, 130, 0),
        (129, 65, 16),
        (64, 1, 17),
        (1, 64, 5),
        (70, 70, 3),
        (128, 128, 64),
        (129, 64, 9),
        (255, 63, 40),
        (200, 257, 33),
        (129, 130, 8),
    ];
    let kinds = [
        ViewKind::Contiguous,
        ViewKind::Sliced,
        ViewKind::Permuted,
        ViewKind::Broadcast,
    ];
    for dtype in [DType::F32, DType::F16] {
        if dtype == DType::F16 && !dev().supports_f16() {
            continue;
        }
        for (i, &(m, n, k)) in sizes.iter().enumerate() {
            let splits: &[Option<u32>] = if k >= 3 {
                &[None, Some(2), Some(3)]
            } else {
                &[None]
            };
            for (j, &split_k) in splits.iter().enumerate() {
                let exact = (i + j) % 2 == 0;
                let dist = match (exact, dtype) {
                    (true, DType::F16) => Dist::SmallInt(-3, 3),
                    (true, _) => Dist::SmallInt(-8, 8),
                    (false, _) => Dist::Uniform(-1.0, 1.0),
                };
                let act = if exact {
                    ACTIVATIONS[i % 2]
                } else {
                    ACTIVATIONS[i % ACTIVATIONS.len()]
                };
                let spec = Spec {
                    m,
                    n,
                    k,
                    a_batch: if i % 3 == 1 { vec![2, 1] } else { vec![] },
                    b_batch: if i % 3 == 1 { vec![3] } else { vec![] },
                    trans: (i % 2 == 1, (i + j) % 3 == 1),
                    kinds: [
                        kinds[i % 4],
                        kinds[(i + 1) % 4],
                        kinds[(i + j) % 4],
                        ViewKind::Contiguous,
                    ],
                    dist,
                    alpha: if exact { 2.0 } else { 0.75 },
                    beta: if exact { -1.0 } else { 1.5 },
                    c_mode: (i % 3) as u8,
                    bias: [None, Some(BiasSide::Column), Some(BiasSide::Row)][(i + j) % 3],
                    act,
                    split_k,
                    into: i % 5 == 4,
                    seed: 1000 + (i * 10 + j) as u64,
                };
                let p = build(dtype, spec);
                if let Err(e) = pollster::block_on(check_gemm(dev(), &p, false)) {
                    panic!("{e}\nproblem: {p:#?}");
                }
            }
        }
    }
}
