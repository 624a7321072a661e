//! Public ops. Each family: validate -> pick variant -> launch through the runtime.

pub mod activation;
pub mod attention;
pub mod batchnorm;
pub mod binary;
mod binary_grad;
pub mod compare;
pub mod conv;
pub mod copy;
mod donate;
pub mod extra;
pub mod gemm;
mod gemm_grad;
mod gemm_window;
pub(crate) mod grad_kernel;
pub mod index;
pub(crate) mod index_check;
pub(crate) mod index_kernels;
pub mod loss;
pub(crate) mod loss_options;
pub mod map;
mod map_grad;
pub mod nll;
pub mod norm;
pub mod pool;
pub mod random;
pub mod reduce;
mod reduce_grad;
pub mod rnn;
pub(crate) mod segment;
pub mod softmax;
pub(crate) mod view_grad;
pub(crate) mod wg;

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
pub use index::embedding;
pub use loss::{
    binary_cross_entropy_with_logits, cross_entropy, cross_entropy_probs, mse_loss,
    BceWithLogitsOptions, CrossEntropyOptions, Reduction,
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

/// The layout of every kernel family's `#[repr(C)]` params struct (see
/// [`ParamsLayout`](crate::runtime::pipeline::ParamsLayout)).
#[doc(hidden)]
pub fn params_layouts() -> Vec<crate::runtime::pipeline::ParamsLayout> {
    vec![
        map::params_layout(),
        map::cast_params_layout(),
        binary::params_layout(),
        reduce::params_layout(),
        gemm::params_layout(),
        batchnorm::params_layout(),
        conv::launch::params_layout(),
        rnn::params_layout(),
        rnn::backward::params_layout(),
        grad_kernel::params_layout(),
        softmax::params_layout(),
        random::params_layout(),
        pool::params_layout(),
        copy::params_layout(),
        crate::optim::params_layout(),
        compare::params_layout(),
        index::params_layout(),
        index_check::params_layout(),
        nll::params_layout(),
        segment::params_layout(),
        norm::params_layout(),
        attention::kernel::params_layout(),
    ]
}

/// Every shader variant the crate can compile (kernel, dtypes, override constants).
#[doc(hidden)]
pub fn shader_variants() -> Vec<crate::runtime::pipeline::ShaderVariant> {
    let mut v = map::map_variants();
    v.extend(binary::binary_variants());
    v.extend(reduce::reduce_variants());
    v.extend(gemm::gemm_variants());
    v.extend(conv::conv_variants());
    v.extend(rnn::rnn_variants());
    v.extend(batchnorm::batchnorm_variants());
    v.extend(grad_kernel::grad_variants());
    v.extend(softmax::softmax_variants());
    v.extend(random::random_variants());
    v.extend(pool::pool_variants());
    v.extend(copy::copy_variants());
    v.extend(crate::optim::optim_variants());
    v.extend(compare::compare_variants());
    v.extend(index::index_variants());
    v.extend(index_check::index_check_variants());
    v.extend(nll::nll_variants());
    v.extend(segment::segment_variants());
    v.extend(norm::norm_variants());
    v.extend(attention::kernel::attention_variants());
    v
}
