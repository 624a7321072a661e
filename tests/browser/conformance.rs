//! The browser's subset of the conformance suite: for every op family, the native suite's
//! strategies and checks (tests/conformance) with fewer cases, fixed seeds and awaited
//! readbacks. `device()` runs the kernels the adapter's features select; `portable_device()`
//! (no SUBGROUP) the portable variants; `gpu_plans_device()` the GPU plans (the large-tile GEMM
//! and convolution, attention's tiles) on whatever adapter the browser offers. f16 cases run only when the adapter has SHADER_F16
//! and are reported as skipped otherwise.

use proptest::prelude::*;
use wasm_bindgen_test::{console_log, wasm_bindgen_test};
use wgtensor::ops::conv::ConvVariant;
use wgtensor::ops::Activation;
use wgtensor::DType;

use crate::common::conv_ref::{ConvGeom, Dir};
use crate::common::{device, gpu_plans_device, init_devices, portable_device};
use crate::conv_check::{self as conv, Rows};
use crate::gemm::Mode;
use crate::runner::check_cases;
use crate::strategies::{general_dist, operand, small_shape, view_kind, Dist};
use crate::{
    attention, batchnorm as bn, elementwise as ew, gemm, index_ops as ix, losses, norm, pool,
    random, reduce, rnn, softmax,
};

/// Opens the shared devices; false (after saying so) when f16 cases must be skipped.
pub(crate) async fn f16_or_skip(name: &str) -> bool {
    let dev = init_devices().await;
    if dev.supports_f16() {
        return true;
    }
    // Browsers may hide the adapter's name: fall back to its backend and type.
    let info = dev.adapter_info();
    let adapter = if info.name.is_empty() {
        format!(
            "{:?} {:?} adapter, name hidden by the browser",
            info.backend, info.device_type
        )
    } else {
        info.name.clone()
    };
    console_log!("{name}: SKIPPED, the adapter ({adapter}) lacks SHADER_F16");
    false
}

#[wasm_bindgen_test]
async fn adapter() {
    let dev = init_devices().await;
    let info = dev.adapter_info();
    console_log!(
        "adapter: {:?} ({:?}, {:?}), f16 {}, subgroups {} ({}..={} lanes), \
         max workgroup storage {} B, storage buffers per stage {}",
        info.name,
        info.backend,
        info.device_type,
        dev.supports_f16(),
        dev.features().contains(wgpu::Features::SUBGROUP),
        info.subgroup_min_size,
        info.subgroup_max_size,
        dev.limits().max_compute_workgroup_storage_size,
        dev.limits().max_storage_buffers_per_shader_stage,
    );
    assert_eq!(info.backend, wgpu::Backend::BrowserWebGpu);
}

// ---- elementwise ----------------------------------------------------------------------------

#[wasm_bindgen_test]
async fn elementwise_f32() {
    init_devices().await;
    let f = DType::F32;
    check_cases(
        "unary_f32",
        20,
        ew::unary_problem(f, false),
        ew::check_unary,
    )
    .await;
    check_cases(
        "unary_large_f32",
        2,
        ew::unary_problem(f, true),
        ew::check_unary,
    )
    .await;
    check_cases("scalar_f32", 16, ew::scalar_problem(f), ew::check_scalar).await;
    check_cases(
        "binary_f32",
        20,
        ew::binary_problem(f, false),
        ew::check_binary,
    )
    .await;
    check_cases(
        "binary_large_f32",
        2,
        ew::binary_problem(f, true),
        ew::check_binary,
    )
    .await;
    let x = operand(f, small_shape(), view_kind(), general_dist());
    check_cases("contiguous_f32", 12, x, ew::check_contiguous).await;
    check_cases("reshape_f32", 12, ew::reshape_problem(f), ew::check_reshape).await;
    let fill = async |p: &ew::FillProblem| ew::check_fill(p, f).await;
    check_cases("zeros_full_f32", 8, ew::fill_problem(), fill).await;
}

#[wasm_bindgen_test]
async fn elementwise_f16() {
    if !f16_or_skip("elementwise_f16").await {
        return;
    }
    let h = DType::F16;
    check_cases("unary_f16", 6, ew::unary_problem(h, false), ew::check_unary).await;
    check_cases("scalar_f16", 4, ew::scalar_problem(h), ew::check_scalar).await;
    check_cases(
        "binary_f16",
        6,
        ew::binary_problem(h, false),
        ew::check_binary,
    )
    .await;
    let to_f16 = operand(DType::F32, small_shape(), view_kind(), Just(Dist::F16Grid));
    let conv = async |x: &_| ew::check_to_dtype(x, h).await;
    check_cases("to_dtype_f32_to_f16", 4, to_f16, conv).await;
    let to_f32 = operand(h, small_shape(), view_kind(), general_dist());
    let conv = async |x: &_| ew::check_to_dtype(x, DType::F32).await;
    check_cases("to_dtype_f16_to_f32", 4, to_f32, conv).await;
}

// ---- softmax and the index ops ---------------------------------------------------------------

#[wasm_bindgen_test]
async fn softmax_and_index_ops_f32() {
    init_devices().await;
    let f = DType::F32;
    let sm = softmax::small_problem(f);
    check_cases("softmax_f32", 8, sm, softmax::check_softmax).await;
    check_cases("argmax_argmin_f32", 8, ix::arg_problem(f), ix::check_arg).await;
    check_cases("compare_f32", 6, ix::compare_problem(f), ix::check_compare).await;
    let ci = ix::compare_problem(DType::I32);
    check_cases("compare_i32", 6, ci, ix::check_compare).await;
    check_cases("gather_f32", 8, ix::gather_problem(f), ix::check_gather).await;
    check_cases("cross_entropy_f32", 8, ix::ce_problem(f), ix::check_ce).await;
}

#[wasm_bindgen_test]
async fn losses_f32() {
    init_devices().await;
    losses::mse().await;
    losses::log_and_sqrt_outside_their_domains().await;
    losses::pointwise_losses().await;
    losses::bce_with_logits().await;
    losses::cross_entropy_with_probability_targets().await;
    losses::cross_entropy_class_indices_match_pytorch_with_gradients().await;
    losses::nll_loss_ignore_index_weights_and_errors().await;
    console_log!(
        "losses_f32: mse, log / sqrt domains, pointwise losses, bce_with_logits, cross_entropy (probabilities, indices), nll_loss"
    );
}

#[wasm_bindgen_test]
async fn pooling_f32() {
    init_devices().await;
    check_cases(
        "pool2d_regular",
        12,
        pool::regular_problem(),
        pool::check_regular,
    )
    .await;
    check_cases(
        "pool2d_adaptive",
        8,
        pool::adaptive_problem(),
        pool::check_adaptive,
    )
    .await;
}

#[wasm_bindgen_test]
async fn philox_streams_match_native() {
    let dev = init_devices().await;
    for seed in [0, 1, 0x1234_5678_9abc_def0, u64::MAX] {
        random::check_rand_bit_exact(dev, seed).await.unwrap();
        random::check_randn(dev, seed, 256).await.unwrap();
    }
    console_log!("philox_streams_match_native: 4 seeds, rand bit-exact, randn within 2e-6");
}

#[wasm_bindgen_test]
async fn softmax_and_index_ops_f16() {
    if !f16_or_skip("softmax_and_index_ops_f16").await {
        return;
    }
    let h = DType::F16;
    let sm = softmax::small_problem(h);
    check_cases("softmax_f16", 4, sm, softmax::check_softmax).await;
    check_cases("argmax_argmin_f16", 4, ix::arg_problem(h), ix::check_arg).await;
    check_cases("gather_f16", 4, ix::gather_problem(h), ix::check_gather).await;
    check_cases("cross_entropy_f16", 4, ix::ce_problem(h), ix::check_ce).await;
}

// ---- layer / group / RMS norm --------------------------------------------------------------

#[wasm_bindgen_test]
async fn norms_f32() {
    init_devices().await;
    let f = DType::F32;
    check_cases("norm_f32", 8, norm::problem(f), norm::check_norm).await;
    check_cases(
        "norm_portable_f32",
        4,
        norm::problem(f),
        norm::check_norm_portable,
    )
    .await;
}

#[wasm_bindgen_test]
async fn norms_f16() {
    if !f16_or_skip("norms_f16").await {
        return;
    }
    check_cases("norm_f16", 4, norm::problem(DType::F16), norm::check_norm).await;
}

// ---- attention ------------------------------------------------------------------------------

#[wasm_bindgen_test]
async fn attention_f32() {
    init_devices().await;
    let p = attention::problem(DType::F32, 0..=24, 1..=40);
    check_cases("attention_f32", 8, p, attention::check_attention).await;
}

/// 32 queries or more: on the GPU plan, several row blocks of the 16-row tile.
#[wasm_bindgen_test]
async fn attention_many_rows_f32() {
    init_devices().await;
    let p = attention::problem(DType::F32, 32..=40, 1..=40);
    check_cases("attention_many_rows_f32", 4, p, attention::check_attention).await;
}

// ---- reductions -----------------------------------------------------------------------------

#[wasm_bindgen_test]
async fn reduce_f32() {
    init_devices().await;
    let f = DType::F32;
    check_cases(
        "reduce_f32",
        20,
        reduce::small_problem(f),
        reduce::check_reduce,
    )
    .await;
    check_cases(
        "reduce_long_f32",
        4,
        reduce::long_problem(f),
        reduce::check_reduce,
    )
    .await;
    let many = reduce::many_outputs_problem(f);
    check_cases("reduce_many_outputs_f32", 2, many, reduce::check_reduce).await;
    reduce::fixed_long_cases(f).await;
    console_log!("reduce_workgroup_fixed_f32: 64 fixed cases passed");
}

#[wasm_bindgen_test]
async fn reduce_f16() {
    if !f16_or_skip("reduce_f16").await {
        return;
    }
    let h = DType::F16;
    check_cases(
        "reduce_f16",
        6,
        reduce::small_problem(h),
        reduce::check_reduce,
    )
    .await;
    check_cases(
        "reduce_long_f16",
        2,
        reduce::long_problem(h),
        reduce::check_reduce,
    )
    .await;
}

// ---- GEMM (incl. split-k) -------------------------------------------------------------------

#[wasm_bindgen_test]
async fn gemm_f32() {
    init_devices().await;
    let f = DType::F32;
    for (name, dev) in [("default", device()), ("portable", portable_device())] {
        let check = async |p: &_| gemm::check_gemm(dev, p, false).await;
        let exact = async |p: &_| gemm::check_gemm(dev, p, true).await;
        let general = gemm::gemm_problem(f, gemm::general_sizes(), Mode::General);
        check_cases(&format!("gemm_f32 ({name})"), 12, general, check).await;
        let ex = gemm::gemm_problem(f, gemm::general_sizes(), Mode::Exact);
        check_cases(&format!("gemm_exact_f32 ({name})"), 6, ex, exact).await;
        let large = gemm::gemm_problem(f, gemm::large_sizes(), Mode::General);
        check_cases(&format!("gemm_large_f32 ({name})"), 1, large, check).await;
        let matmul = async |p: &_| gemm::check_matmul(dev, p).await;
        let mm = gemm::matmul_problem(f);
        check_cases(&format!("matmul_f32 ({name})"), 8, mm, matmul).await;
    }
}

#[wasm_bindgen_test]
async fn gemm_splitk_f32() {
    init_devices().await;
    let f = DType::F32;
    for (name, dev) in [("default", device()), ("portable", portable_device())] {
        let check = async |p: &_| gemm::check_gemm(dev, p, false).await;
        let exact = async |p: &_| gemm::check_gemm(dev, p, true).await;
        let sk = gemm::gemm_problem(f, gemm::splitk_sizes(), Mode::SplitK);
        check_cases(&format!("gemm_splitk_f32 ({name})"), 6, sk, check).await;
        let ske = gemm::gemm_problem(f, gemm::splitk_sizes(), Mode::SplitKExact);
        check_cases(&format!("gemm_splitk_exact_f32 ({name})"), 4, ske, exact).await;
    }
    gemm::splitk_deterministic(device(), f).await;
    console_log!("splitk_deterministic_f32: 3 problems x 2 splits x 3 runs bitwise equal");
}

#[wasm_bindgen_test]
async fn gemm_f16() {
    if !f16_or_skip("gemm_f16").await {
        return;
    }
    let h = DType::F16;
    let check = async |p: &_| gemm::check_gemm(device(), p, false).await;
    let general = gemm::gemm_problem(h, gemm::general_sizes(), Mode::General);
    check_cases("gemm_f16", 4, general, check).await;
    let sk = gemm::gemm_problem(h, gemm::splitk_sizes(), Mode::SplitK);
    check_cases("gemm_splitk_f16", 2, sk, check).await;
}

/// The GPU plans' GEMM (`gemm_wg`, 64- and 128-row tiles) and convolution (`conv_wg`, 32+
/// rows per group) on the browser's adapter.
#[wasm_bindgen_test]
async fn gpu_plans_gemm_conv_f32() {
    init_devices().await;
    let (f, none, dev) = (DType::F32, Activation::None, gpu_plans_device());
    let check = async |p: &_| gemm::check_gemm(dev, p, false).await;
    let general = gemm::gemm_problem(f, gemm::general_sizes(), Mode::General);
    check_cases("gemm_f32 (gpu plans)", 6, general, check).await;
    let sk = gemm::gemm_problem(f, gemm::splitk_sizes(), Mode::SplitK);
    check_cases("gemm_splitk_f32 (gpu plans)", 3, sk, check).await;
    let fwd = async |p: &_| conv::check_forward(dev, p, f, none).await;
    check_cases(
        "conv2d_forward_f32 (gpu plans)",
        3,
        conv::problem(Rows::Wide),
        fwd,
    )
    .await;
    let bwd = async |p: &_| conv::check_backward(dev, p, f).await;
    let name = "conv2d_backward_f32 (gpu plans)";
    check_cases(name, 3, conv::problem(Rows::Wide), bwd).await;
}

// ---- convolution ----------------------------------------------------------------------------

#[wasm_bindgen_test]
async fn conv_f32() {
    init_devices().await;
    let (f, none) = (DType::F32, Activation::None);
    // Few rows per group: the direct kernels; 8-12: the GEMM kernels (both devices).
    for (rows, dev, name) in [
        (Rows::Few, device(), "direct"),
        (Rows::Gemm, device(), "gemm, default"),
        (Rows::Gemm, portable_device(), "gemm, portable"),
    ] {
        let fwd = async |p: &_| conv::check_forward(dev, p, f, none).await;
        let name_f = format!("conv2d_forward_f32 and conv1d ({name})");
        check_cases(&name_f, 8, conv::problem(rows), fwd).await;
        let bwd = async |p: &_| conv::check_backward(dev, p, f).await;
        let name_b = format!("conv2d_backward_f32: dgrad, wgrad, bias ({name})");
        check_cases(&name_b, 8, conv::problem(rows), bwd).await;
        let tr = async |(p, a, b): &(conv::Problem, usize, usize)| {
            let out_pad = conv::output_padding(&p.g, (*a, *b));
            conv::check_transpose(dev, p, f, out_pad, none).await
        };
        let problems = (conv::problem(rows), 0usize..=2, 0usize..=2);
        let name_t = format!("conv_transpose2d_f32 and 1d ({name})");
        check_cases(&name_t, 4, problems, tr).await;
    }
    let one_d = conv::problem(Rows::Few).prop_filter("1-D", |p| {
        p.g.h == 1 && p.g.kh == 1 && p.g.stride[0] == 1 && p.g.pad[0] + p.g.pad[1] == 0
    });
    let bwd_1d = async |p: &_| conv::check_1d_backward(device(), p).await;
    check_cases("conv1d_backward_f32", 6, one_d, bwd_1d).await;
    // The 4-line direct kernel (depthwise, kernel rows stepping one line), ragged heights.
    for h in [5, 8, 11] {
        let g = ConvGeom {
            n: 2,
            c: 3,
            h,
            w: 5,
            o: 3,
            kh: 2,
            kw: 3,
            groups: 3,
            stride: [1, 1],
            pad: [0, 0, 1, 1],
            dil: [1, 1],
        };
        let pl = conv::expected_plan(device(), &g, Dir::Forward);
        assert_eq!(pl.variant, ConvVariant::DirectLines, "{g:?}");
        let p = conv::Problem {
            g,
            seed: h as u64,
            int: true,
            bias: true,
            views: false,
        };
        if let Err(e) = conv::check_forward(device(), &p, f, none).await {
            panic!("DirectLines forward: {e}\n{p:?}");
        }
    }
    console_log!("conv2d_direct_lines_f32: 3 fixed cases passed");
    // Every fused activation, forward and transposed.
    for act in conv::ACTIVATIONS {
        let fwd = async |p: &_| conv::check_forward(device(), p, f, act).await;
        check_cases(
            &format!("conv2d_{act:?}_f32"),
            2,
            conv::problem(Rows::Few),
            fwd,
        )
        .await;
    }
}

#[wasm_bindgen_test]
async fn conv_f16() {
    if !f16_or_skip("conv_f16").await {
        return;
    }
    let (h, none) = (DType::F16, Activation::None);
    let fwd = async |p: &_| conv::check_forward(device(), p, h, none).await;
    check_cases("conv2d_forward_f16", 4, conv::problem(Rows::Few), fwd).await;
    let bwd = async |p: &_| conv::check_backward(device(), p, h).await;
    check_cases("conv2d_backward_f16", 4, conv::problem(Rows::Few), bwd).await;
}

// ---- batch normalization --------------------------------------------------------------------

#[wasm_bindgen_test]
async fn batchnorm_f32() {
    init_devices().await;
    let f = DType::F32;
    let small = || bn::small_shape().boxed();
    let infer = bn::infer_problem(f, small(), bn::x_dists().boxed());
    check_cases("batchnorm_inference_f32", 12, infer, bn::check_inference).await;
    let train = bn::train_problem(f, small(), bn::x_dists().boxed());
    check_cases("batchnorm_train_f32", 12, train, bn::check_train).await;
    let backward = bn::backward_problem(f, small(), bn::backward_dists());
    check_cases("batchnorm_backward_f32", 12, backward, bn::check_backward).await;
    let train = bn::train_problem(f, bn::large_shape(), bn::x_dists().boxed());
    check_cases("batchnorm_train_large_f32", 1, train, bn::check_train).await;
    let backward = bn::backward_problem(f, bn::large_shape(), bn::backward_dists());
    check_cases(
        "batchnorm_backward_large_f32",
        1,
        backward,
        bn::check_backward,
    )
    .await;
    bn::cumulative_average(f).await;
    console_log!("batchnorm_cumulative_average_f32: passed");
}

#[wasm_bindgen_test]
async fn batchnorm_f16() {
    if !f16_or_skip("batchnorm_f16").await {
        return;
    }
    let h = DType::F16;
    let small = || bn::small_shape().boxed();
    let infer = bn::infer_problem(h, small(), bn::x_dists_f16().boxed());
    check_cases("batchnorm_inference_f16", 4, infer, bn::check_inference).await;
    let train = bn::train_problem(h, small(), bn::x_dists_f16().boxed());
    check_cases("batchnorm_train_f16", 4, train, bn::check_train).await;
}

// ---- LSTM / GRU -----------------------------------------------------------------------------

#[wasm_bindgen_test]
async fn rnn_forward_f32() {
    init_devices().await;
    let f = DType::F32;
    for (name, dev) in [("default", device()), ("portable", portable_device())] {
        let seq = async |p: &_| rnn::run_sequence(p, dev).await;
        let name = format!("rnn_sequence_f32 ({name})");
        check_cases(&name, 8, rnn::problem(f), seq).await;
    }
    let cell = async |&(lstm, b, i, h, seed): &_| rnn::run_cell(f, lstm, b, i, h, seed).await;
    check_cases("rnn_cells_f32", 8, rnn::cell_args(), cell).await;
}

#[wasm_bindgen_test]
async fn rnn_backward_f32() {
    init_devices().await;
    for (name, dev, cases) in [("default", device(), 8), ("portable", portable_device(), 4)] {
        let bptt = async |(p, with_dhn): &_| rnn::run_backward(p, *with_dhn, dev).await;
        let problems = rnn::backward_problem(DType::F32);
        check_cases(&format!("rnn_backward_f32 ({name})"), cases, problems, bptt).await;
    }
}

#[wasm_bindgen_test]
async fn rnn_f16() {
    if !f16_or_skip("rnn_f16").await {
        return;
    }
    let h = DType::F16;
    let seq = async |p: &_| rnn::run_sequence(p, device()).await;
    check_cases("rnn_sequence_f16", 4, rnn::problem(h), seq).await;
    let bptt = async |(p, with_dhn): &_| rnn::run_backward(p, *with_dhn, device()).await;
    check_cases("rnn_backward_f16", 4, rnn::backward_problem(h), bptt).await;
}
