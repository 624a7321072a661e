//! Public ops. Each family: validate -> pick variant -> launch through the runtime.

pub mod batchnorm;
mod batchnorm_grad;
pub mod binary;
mod binary_grad;
pub mod conv;
pub mod gemm;
mod gemm_grad;
pub(crate) mod grad_kernel;
pub mod map;
mod map_grad;
pub mod reduce;
mod reduce_grad;
pub mod rnn;
pub(crate) mod view_grad;

pub use batchnorm::{
    batch_norm_backward, batch_norm_inference, batch_norm_train, BatchNormPlan, BatchNormState,
};
pub use binary::BinaryOp;
pub use conv::{
    conv1d, conv1d_backward_input, conv1d_backward_weight, conv2d, conv2d_backward_input,
    conv2d_backward_weight, conv_backward_bias, conv_transpose1d, conv_transpose2d, Conv1dOptions,
    Conv2dOptions, ConvTranspose1dOptions, ConvTranspose2dOptions, Padding,
};
pub use gemm::{gemm, gemm_into, matmul, Activation, Bias, GemmOptions};
pub use map::{ScalarOp, UnaryOp};
pub use reduce::ReduceOp;
pub use rnn::{
    gru_cell, lstm_cell, Rnn, RnnGrads, RnnKind, RnnOutput, RnnSaved, RnnWeightGrads, RnnWeights,
};

/// The layout of every kernel family's `#[repr(C)]` params struct (see
/// [`ParamsLayout`](crate::runtime::pipeline::ParamsLayout)).
#[doc(hidden)]
pub fn params_layouts() -> Vec<crate::runtime::pipeline::ParamsLayout> {
    vec![
        map::params_layout(),
        binary::params_layout(),
        reduce::params_layout(),
        gemm::params_layout(),
        batchnorm::params_layout(),
        conv::launch::params_layout(),
        rnn::params_layout(),
        rnn::backward::params_layout(),
        grad_kernel::params_layout(),
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
    v
}
