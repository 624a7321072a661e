//! Public ops. Each family: validate -> pick variant -> launch through the runtime.

pub mod activation;
pub mod argext;
pub mod attention;
pub mod batchnorm;
pub mod binary;
mod binary_grad;
mod clamp;
pub mod compare;
mod constructors;
pub mod conv;
pub mod copy;
mod donate;
pub(crate) mod elementwise_params;
pub(crate) mod elementwise_vec4;
pub mod gemm;
pub(crate) mod grad_kernel;
pub mod hardtanh;
pub mod index;
pub(crate) mod index_check;
pub(crate) mod index_kernels;
pub mod leaky_relu;
pub mod loss;
pub(crate) mod loss_options;
pub mod loss_pointwise;
pub mod map;
mod map_grad;
pub mod nll;
pub mod norm;
mod norm_checks;
mod one_hot;
mod operators;
pub mod pool;
pub mod random;
mod rearrange;
pub mod reduce;
mod reduce_dims;
mod reduce_grad;
mod reduce_plan;
pub mod rnn;
mod saved_inputs;
pub(crate) mod segment;
pub mod softmax;
pub mod softplus;
pub(crate) mod transpose_copy;
pub(crate) mod value_check;
pub(crate) mod view_grad;
pub(crate) mod wg;
mod wide_scalar;

pub use activation::Activation;
pub use attention::{scaled_dot_product_attention, AttnMask, SdpaOptions};
/// The planners' types, for inspection by tests and benchmarks; not part of the stable API.
#[doc(hidden)]
pub use batchnorm::BatchNormPlan;
pub use batchnorm::{
    batch_norm_backward, batch_norm_inference, batch_norm_train, BatchNormGrads, BatchNormOptions,
    BatchNormOutput, BatchNormSaved, BatchNormState,
};
pub use binary::BinaryOp;
pub use compare::{where_cond, CmpOp};
pub use conv::{
    conv1d, conv1d_backward_input, conv1d_backward_weight, conv2d, conv2d_backward_input,
    conv2d_backward_weight, conv_backward_bias, conv_transpose1d, conv_transpose2d, Conv1dOptions,
    Conv2dOptions, ConvTranspose1dOptions, ConvTranspose2dOptions, Padding, Padding1d,
};
pub use copy::{cat, pad, stack, PadMode};
pub use gemm::{gemm, gemm_into, matmul, Bias, GemmOptions};
pub use hardtanh::{hardsigmoid, hardswish, hardtanh, relu6};
pub use index::embedding;
pub use leaky_relu::leaky_relu;
pub use loss::{
    binary_cross_entropy_with_logits, cross_entropy, cross_entropy_probs, mse_loss,
    BceWithLogitsOptions, CrossEntropyOptions, Reduction,
};
pub use loss_pointwise::{
    binary_cross_entropy, huber_loss, kl_div, l1_loss, smooth_l1_loss, KlDivReduction,
};
pub use map::{ScalarOp, UnaryOp};
pub use nll::{nll_loss, NllLossOptions};
pub use norm::{group_norm, layer_norm, rms_norm};
pub use pool::{
    adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool2d_backward, adaptive_max_pool2d,
    adaptive_max_pool2d_backward, adaptive_max_pool2d_with_indices, avg_pool1d, avg_pool2d,
    avg_pool2d_backward, max_pool1d, max_pool1d_with_indices, max_pool2d, max_pool2d_backward,
    max_pool2d_with_indices, AvgPool1dOptions, AvgPool2dOptions, MaxPool1dOptions,
    MaxPool2dOptions,
};
pub use random::{
    bernoulli, dropout, kaiming_uniform, normal, rand, randn, uniform, xavier_uniform,
};
pub use reduce::ReduceOp;
pub use rnn::{
    gru_cell, lstm_cell, Rnn, RnnGrads, RnnKind, RnnOptions, RnnOutput, RnnSaved, RnnWeightGrads,
    RnnWeights,
};
pub use softmax::{log_softmax, softmax};
pub use softplus::softplus;

/// The kernel-family registry: one entry per family, each defined as `FAMILY` next to the
/// family's kernels. A new family adds its `FAMILY` here and nowhere else;
/// [`params_layouts`] and [`shader_variants`] are folds over this list, and tests/shaders.rs
/// fails for a file of `shaders/` that no family (or more than one) names.
#[doc(hidden)]
pub fn families() -> &'static [crate::runtime::pipeline::Family] {
    const FAMILIES: &[crate::runtime::pipeline::Family] = &[
        map::FAMILY,
        binary::FAMILY,
        reduce::FAMILY,
        gemm::launch::FAMILY,
        conv::launch::FAMILY,
        rnn::FAMILY,
        batchnorm::FAMILY,
        grad_kernel::FAMILY,
        softmax::FAMILY,
        random::FAMILY,
        pool::FAMILY,
        copy::FAMILY,
        crate::optim::FAMILY,
        compare::FAMILY,
        index_kernels::FAMILY,
        argext::FAMILY,
        index_check::FAMILY,
        value_check::FAMILY,
        nll::FAMILY,
        segment::FAMILY,
        norm::FAMILY,
        attention::kernel::FAMILY,
        transpose_copy::FAMILY,
    ];
    FAMILIES
}

/// The layout of every kernel family's `#[repr(C)]` params structs (see
/// [`ParamsLayout`](crate::runtime::pipeline::ParamsLayout)), gathered from [`families`].
#[doc(hidden)]
pub fn params_layouts() -> Vec<crate::runtime::pipeline::ParamsLayout> {
    families().iter().flat_map(|f| (f.params)()).collect()
}

/// Every shader variant the crate can compile (kernel, dtypes, override constants), gathered
/// from [`families`].
#[doc(hidden)]
pub fn shader_variants() -> Vec<crate::runtime::pipeline::ShaderVariant> {
    families().iter().flat_map(|f| (f.variants)()).collect()
}
