//! # wgtensor
//!
//! A portable GPU tensor runtime on wgpu/WGSL. Tensors live in pooled wgpu buffers; ops record
//! compute dispatches into a pending command encoder that is submitted in batches through a
//! bounded in-flight queue, so memory stays bounded however far the caller runs ahead.
//!
//! The design (layers, the life of an op, buffer reuse and hazards, how to add a kernel
//! family) is in `docs/ARCHITECTURE.md` in the repository.
//!
//! ```no_run,ignore-wasm32
//! # fn main() -> wgtensor::Result<()> {
//! use wgtensor::{Device, Tensor};
//! let dev = Device::new()?;
//! let a = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
//! let b = Tensor::from_slice(&dev, &[10.0f32, 20.0, 30.0], &[3])?;
//! let c = a.add(&b)?.relu()?.sum(1, false)?; // broadcast add, relu, row sums
//! assert_eq!(c.to_vec::<f32>()?, vec![66.0, 75.0]);
//! # Ok(()) }
//! ```
//!
//! It is a small deep-learning stack (what PyTorch's CUDA backend provides for convolutional,
//! recurrent and transformer models) for wherever wgpu runs: any GPU through Vulkan, Metal or
//! DX12, a CPU through a software Vulkan driver such as Mesa's lavapipe, and the browser
//! through WebGPU. Semantics and layouts follow PyTorch (NCHW, weight shapes, gate order,
//! batch-norm statistics, attention masks), so weights and results carry over. Reverse-mode autograd ([`autograd`]:
//! [`Tensor::requires_grad`], [`Tensor::backward`]) differentiates every op; the kernels'
//! own backward functions (convolution, batch norm, the RNNs) are public too. [`nn`] has
//! layers with PyTorch's names and state-dict keys (among them [`nn::MultiheadAttention`],
//! [`nn::TransformerEncoderLayer`] and [`nn::TransformerEncoder`]), [`optim`] SGD, Adam and
//! AdamW, and [`io`] safetensors loading and saving.
//!
//! ## What is in it
//!
//! | Kernel family | Functions | Notes |
//! |---|---|---|
//! | Elementwise | [`Tensor::unary`], [`Tensor::scalar_op`], [`Tensor::binary`] and shorthands ([`Tensor::add`], [`Tensor::relu`], ...), [`Tensor::contiguous`], [`Tensor::to_dtype`] | numpy broadcasting; strided views read in place |
//! | Reductions | [`Tensor::reduce`]: [`sum`](Tensor::sum), [`mean`](Tensor::mean), [`max`](Tensor::max), [`min`](Tensor::min) along a dim | f32 accumulation |
//! | Softmax | [`ops::softmax()`], [`ops::log_softmax`] along any dim | numerically stable; deterministic sums |
//! | Batched GEMM | [`ops::gemm()`], [`ops::gemm_into`], [`ops::matmul`] | batch broadcasting; fused `alpha`, `beta * C`, bias and activation; deterministic split-k for long K |
//! | Convolution | [`ops::conv2d`], [`ops::conv1d`], [`ops::conv_transpose2d`], [`ops::conv_transpose1d`], gradients ([`ops::conv2d_backward_input`], [`ops::conv2d_backward_weight`], [`ops::conv_backward_bias`], 1-D alike) | grouped and depthwise, stride, dilation, per-side padding; implicit GEMM without im2col; deterministic split-k for weight gradients |
//! | Batch norm | [`ops::batch_norm_train`] (running statistics updated on the GPU), [`ops::batch_norm_inference`], [`ops::batch_norm_backward`] | Welford / Chan statistics; fixed-order merges, bitwise reproducible |
//! | Layer, group, RMS norm | [`ops::layer_norm`], [`ops::group_norm`], [`ops::rms_norm`] | a workgroup per normalized row, f32 statistics, affine fused; fused backward with fixed-order weight gradients |
//! | Attention | [`ops::scaled_dot_product_attention`] with [`ops::SdpaOptions`] (mask as [`ops::AttnMask`], causal, scale, dropout, grouped-query heads) | FlashAttention-2 style fused forward (online softmax, O(L E) memory, masks read in place through strides; a barrier-free row kernel on CPU adapters); fused deterministic backward; [`nn::MultiheadAttention`], [`nn::TransformerEncoderLayer`] and [`nn::TransformerEncoder`] run on it |
//! | RNN | [`ops::Rnn`]: LSTM and GRU, stacked, bidirectional, `batch_first`; [`forward`](ops::Rnn::forward), [`forward_train`](ops::Rnn::forward_train) + [`backward`](ops::Rnn::backward) (BPTT); [`ops::lstm_cell`], [`ops::gru_cell`] | one fused dispatch per step (per 64 steps on GPUs with up to 64 hidden units) |
//! | Compare and select | [`Tensor::compare`] and shorthands ([`Tensor::eq`], [`Tensor::gt_scalar`], ...), [`Tensor::where_cond`], [`Tensor::masked_fill`] | f32 0/1 masks; i32 compared exactly; PyTorch's dtype promotion |
//! | Index ops | [`Tensor::argmax`], [`Tensor::argmin`], [`Tensor::gather`], [`Tensor::index_select`], [`Tensor::scatter_add`], [`ops::embedding`], [`Tensor::one_hot`] | i32 indices; deterministic backward (bucketed for embedding); out-of-range indices checked on the device and reported as `Err` at the next sync or readback, never an out-of-bounds access |
//! | Losses | [`ops::cross_entropy`] (class indices or probabilities), [`ops::nll_loss`], [`ops::mse_loss`], [`ops::binary_cross_entropy_with_logits`] | PyTorch's `reduction`, `ignore_index`, class weights, label smoothing |
//! | Pooling | [`ops::max_pool2d`] (and [`ops::max_pool2d_with_indices`]), [`ops::avg_pool2d`], adaptive and 1-D variants | PyTorch's padding, dilation, ceil_mode, count_include_pad |
//! | Random | [`ops::rand`], [`ops::randn`], [`ops::uniform`], [`ops::normal`], [`ops::bernoulli`], [`ops::dropout`], [`ops::kaiming_uniform`], [`ops::xavier_uniform`] | counter-based Philox per device, reproducible from [`Device::manual_seed`] |
//!
//! | | |
//! |---|---|
//! | dtypes | [`DType::F32`] everywhere; [`DType::F16`] storage where the adapter has SHADER_F16 ([`Device::supports_f16`]); arithmetic always in f32; [`DType::I32`] for labels, token ids and indices (copies, casts, comparisons, index ops) |
//! | Native backends | Vulkan (Linux, Windows, Android; lavapipe without a GPU), Metal (macOS, iOS), DX12 (Windows) |
//! | Browser | WebGPU on `wasm32-unknown-unknown`: open with [`Device::new_async`], read with [`Tensor::to_vec_async`], wait with [`Device::sync_async`] |
//! | Interop | [`Device::from_wgpu`] runs on an application's own wgpu device; [`Tensor::wgpu_buffer`] exposes a tensor's buffer to the application's passes, and [`Device::submit`] runs those in order with wgtensor's; [`wgpu`] is re-exported at the version used |
//!
//! ## Execution model in brief
//!
//! Ops validate their arguments and record dispatches, then return a new [`Tensor`] at once;
//! the GPU runs batches of them while the host records more. [`Tensor::to_vec`] (or
//! [`Device::sync`]) waits for the work it needs. Errors ([`Error`]) name the op and the
//! values involved; errors the GPU reports later surface at the next op or readback.
//! [`DeviceOptions`] sets the batch size, the in-flight cap and the memory budget, and
//! [`Device::stats`] shows what happened.
//!
//! ## One example per kernel family
//!
//! Elementwise ops and reductions:
//!
//! ```ignore-wasm32
//! # fn main() -> wgtensor::Result<()> {
//! use wgtensor::{Device, Tensor};
//! let dev = Device::new()?;
//! let x = Tensor::from_slice(&dev, &[1.0f32, -2.0, 3.0, -4.0], &[2, 2])?;
//! let y = x.abs()?.mul_scalar(0.5)?; // [[0.5, 1.0], [1.5, 2.0]]
//! assert_eq!(y.max(0, false)?.to_vec::<f32>()?, vec![1.5, 2.0]); // column maxima
//! let m = y.mean(-1, true)?; // row means, keepdim
//! assert_eq!((m.shape(), m.to_vec::<f32>()?), (&[2, 1][..], vec![0.75, 1.75]));
//! # Ok(()) }
//! ```
//!
//! Batched GEMM, with a broadcast batch and a forced deterministic split-k:
//!
//! ```ignore-wasm32
//! # fn main() -> wgtensor::Result<()> {
//! use wgtensor::ops::{gemm, matmul, GemmOptions};
//! use wgtensor::{Device, Tensor};
//! let dev = Device::new()?;
//! let a = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
//! let b = Tensor::from_slice(&dev, &[1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2])?;
//! assert_eq!(matmul(&a, &b)?.to_vec::<f32>()?, vec![4.0, 5.0, 10.0, 11.0]);
//! // 2 * a @ b for a batch of 4 (a broadcast view, no copy), K split in two slices.
//! let opts = GemmOptions { alpha: 2.0, split_k: Some(2), ..Default::default() };
//! let y = gemm(&a.broadcast_to(&[4, 2, 3])?, &b, &opts)?;
//! assert_eq!(y.shape(), &[4, 2, 2]);
//! assert_eq!(y.to_vec::<f32>()?[4..8], [8.0, 10.0, 20.0, 22.0]);
//! # Ok(()) }
//! ```
//!
//! 2-D convolution with a fused bias and ReLU:
//!
//! ```ignore-wasm32
//! # fn main() -> wgtensor::Result<()> {
//! use wgtensor::ops::{conv2d, Activation, Conv2dOptions};
//! use wgtensor::{DType, Device, Tensor};
//! let dev = Device::new()?;
//! let x: Vec<f32> = (1..=9).map(|v| v as f32).collect();
//! let x = Tensor::from_slice(&dev, &x, &[1, 1, 3, 3])?; // [N, C, H, W]
//! let w = Tensor::full(&dev, &[1, 1, 2, 2], 1.0, DType::F32)?; // [O, C, kH, kW]
//! let bias = Tensor::from_slice(&dev, &[-20.0f32], &[1])?;
//! let opts = Conv2dOptions { activation: Activation::Relu, ..Default::default() };
//! let y = conv2d(&x, &w, Some(&bias), &opts)?; // relu(2x2 window sums - 20)
//! assert_eq!(y.shape(), &[1, 1, 2, 2]);
//! assert_eq!(y.to_vec::<f32>()?, vec![0.0, 0.0, 4.0, 8.0]);
//! # Ok(()) }
//! ```
//!
//! Batch norm in training mode, updating the running statistics as `nn.BatchNorm1d` does:
//!
//! ```ignore-wasm32
//! # fn main() -> wgtensor::Result<()> {
//! use wgtensor::ops::{batch_norm_train, BatchNormOptions, BatchNormState};
//! use wgtensor::{DType, Device, Tensor};
//! let dev = Device::new()?;
//! let x = Tensor::from_slice(&dev, &[1.0f32, 10.0, 3.0, 30.0], &[2, 2])?; // [N, C]
//! let mut state = BatchNormState::new(&dev, 2, DType::F32)?; // momentum 0.1
//! let y = batch_norm_train(&x, Some(&mut state), &BatchNormOptions::default())?.y;
//! let near = |a: Vec<f32>, b: &[f32]| a.iter().zip(b).all(|(a, b)| (a - b).abs() < 1e-4);
//! assert!(near(y.to_vec()?, &[-1.0, -1.0, 1.0, 1.0]));
//! assert!(near(state.running_mean.to_vec()?, &[0.2, 2.0])); // 0.9 * 0 + 0.1 * mean
//! assert!(near(state.running_var.to_vec()?, &[1.1, 20.9])); // unbiased variance
//! # Ok(()) }
//! ```
//!
//! An LSTM forward over a sequence:
//!
//! ```ignore-wasm32
//! # fn main() -> wgtensor::Result<()> {
//! use wgtensor::ops::{Rnn, RnnKind, RnnOptions, RnnWeights};
//! use wgtensor::{DType, Device, Tensor};
//! let dev = Device::new()?;
//! let (t, b, i, h) = (5, 2, 3, 4); // steps, batch, input size, hidden size
//! let w_ih = Tensor::full(&dev, &[4 * h, i], 0.1, DType::F32)?; // gates i, f, g, o
//! let w_hh = Tensor::full(&dev, &[4 * h, h], 0.1, DType::F32)?;
//! let w = RnnWeights::new(RnnKind::Lstm, &w_ih, &w_hh, None, None)?;
//! let lstm = Rnn::new(RnnKind::Lstm, RnnOptions::default(), vec![w])?;
//! let x = Tensor::full(&dev, &[t, b, i], 1.0, DType::F32)?; // [T, B, I]
//! let out = lstm.forward(&x, None, None)?;
//! assert_eq!(out.output.shape(), &[t, b, h]);
//! // h_n is the output's last step.
//! let last = out.output.narrow(0, t - 1, 1)?;
//! assert_eq!(last.to_vec::<f32>()?, out.h_n.to_vec::<f32>()?);
//! assert_eq!(out.c_n.map(|c| c.shape().to_vec()), Some(vec![1, b, h]));
//! # Ok(()) }
//! ```
//!
//! Scaled dot-product attention, causal and with a key mask (for [`ops::AttnMask::Bool`],
//! nonzero = may attend, as in `F.scaled_dot_product_attention`), and its gradients:
//!
//! ```ignore-wasm32
//! # fn main() -> wgtensor::Result<()> {
//! use wgtensor::ops::{scaled_dot_product_attention as sdpa, AttnMask, SdpaOptions};
//! use wgtensor::{DType, Device, Tensor};
//! let dev = Device::new()?;
//! // q = 0: every score is 0, so a query averages the values of the keys it may see.
//! let q = Tensor::zeros(&dev, &[1, 1, 3, 2], DType::F32)?; // [batch, heads, L, E]
//! let k = Tensor::full(&dev, &[1, 1, 3, 2], 1.0, DType::F32)?; // [batch, heads, S, E]
//! let v = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[1, 1, 3, 2])?;
//! let near = |a: Vec<f32>, b: &[f32]| a.iter().zip(b).all(|(a, b)| (a - b).abs() < 1e-5);
//! let causal = SdpaOptions { is_causal: true, ..Default::default() }; // query i sees keys <= i
//! assert!(near(sdpa(&q, &k, &v, &causal)?.to_vec()?, &[1.0, 2.0, 2.0, 3.0, 3.0, 4.0]));
//! let keys = Tensor::from_slice(&dev, &[1.0f32, 1.0, 0.0], &[3])?; // broadcast to [.., L, S]
//! let masked = SdpaOptions { attn_mask: Some(AttnMask::Bool(&keys)), ..Default::default() };
//! let v = v.requires_grad()?;
//! let out = sdpa(&q, &k, &v, &masked)?; // every row: the mean of values 0 and 1
//! assert!(near(out.to_vec()?, &[2.0, 3.0, 2.0, 3.0, 2.0, 3.0]));
//! let grads = out.sum_all()?.backward()?; // the fused backward
//! let dv = grads.get(&v).expect("v is a tracked leaf");
//! assert!(near(dv.to_vec()?, &[1.5, 1.5, 1.5, 1.5, 0.0, 0.0])); // the masked key gets none
//! # Ok(()) }
//! ```

// wgpu's WebGPU handles are !Send and !Sync on wasm32 (one thread); the Arcs that make Device
// and Tensor cheap to clone are kept there for the same API on every target.
#![cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]
#![warn(missing_docs)]

pub mod autograd;
mod device_open;
mod dtype;
mod error;
pub mod io;
pub mod layout;
pub mod nn;
pub mod ops;
pub mod optim;
pub mod runtime;
mod tensor;

pub use autograd::{no_grad, Grads, NoGradGuard};
pub use dtype::{DType, Element};
pub use error::{Error, Result};
pub use half::f16;
pub use layout::Layout;
/// The [`nn::Module`] trait and its derive, at the root as well (`#[derive(wgtensor::Module)]`).
pub use nn::Module;
pub use runtime::{
    Caps, Device, DeviceOptions, DeviceStats, PipelineCacheSetting, PipelineCacheStatus, PoolStats,
    ShaderChecks, WarmUp,
};
pub use tensor::{SignedIndex, Tensor};
/// The wgpu crate this version of wgtensor is built on, so interop code names the same types.
pub use wgpu;
