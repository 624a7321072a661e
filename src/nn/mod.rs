//! Layers with PyTorch's names, parameters, `state_dict()` keys and default initialization
//! (`torch.nn`): [`Linear`], [`Conv1d`], [`Conv2d`], [`ConvTranspose1d`], [`ConvTranspose2d`], [`Embedding`],
//! [`BatchNorm2d`] / [`BatchNorm1d`] / [`BatchNorm3d`], [`LayerNorm`], [`GroupNorm`], [`RMSNorm`],
//! [`Lstm`] / [`Gru`], [`LstmCell`] / [`GruCell`], [`MultiheadAttention`], [`TransformerEncoderLayer`] /
//! [`TransformerEncoder`], [`TransformerDecoderLayer`] / [`TransformerDecoder`], [`Dropout`], the pools, activations (with [`ReLU6`], [`Hardswish`],
//! [`Hardsigmoid`], [`LeakyReLU`], [`Softplus`], [`Softmax`], [`LogSoftmax`]),
//! [`Flatten`], and the containers [`Sequential`], [`ModuleList`] and [`ModuleDict`].
//!
//! A model is a struct of layers with `#[derive(Module)]`, as a PyTorch model is an
//! `nn.Module` whose `__init__` assigns them: the derive registers each field under its name,
//! so the model's parameters, buffers and `state_dict()` keys are PyTorch's
//! (`features.0.weight`, `classifier.bias`), and `train()` / `eval()` reach every layer. Its
//! forward pass is an implementation of [`Forward`] (or any method of your own).
//!
//! ```ignore-wasm32
//! # fn main() -> wgtensor::Result<()> {
//! use wgtensor::nn::{self, Forward, Module};
//! use wgtensor::ops::MaxPool2dOptions;
//! use wgtensor::{DType, Device, Result, Tensor};
//!
//! #[derive(Module)]
//! struct Net {
//!     features: nn::Sequential,      // features.0.weight, features.1.running_mean, ...
//!     blocks: Vec<nn::Conv2d>,       // blocks.0.weight, blocks.1.weight (an nn.ModuleList)
//!     head: Option<nn::Linear>,      // head.weight, head.bias when Some (None: nothing)
//!     classifier: nn::Linear,        // classifier.weight, classifier.bias
//!     #[module(skip)]
//!     classes: usize,                // anything else is skipped explicitly
//! }
//!
//! impl Forward for Net {
//!     fn forward(&self, x: &Tensor) -> Result<Tensor> {
//!         let mut x = self.features.forward(x)?;
//!         for b in &self.blocks {
//!             x = b.forward(&x)?.relu()?;
//!         }
//!         let x = nn::Flatten.forward(&x)?;
//!         let x = match &self.head {
//!             Some(h) => h.forward(&x)?.relu()?,
//!             None => x,
//!         };
//!         self.classifier.forward(&x)
//!     }
//! }
//!
//! let dev = Device::new()?;
//! let same = nn::Conv2dConfig { padding: 1, ..Default::default() };
//! let mut net = Net {
//!     features: nn::Sequential::new()
//!         .push(nn::Conv2d::new(&dev, 1, 8, 3, same)?)
//!         .push(nn::BatchNorm2d::new(&dev, 8)?)
//!         .push(nn::ReLU)
//!         .push(nn::MaxPool2d(MaxPool2dOptions::new(2))),
//!     blocks: vec![nn::Conv2d::new(&dev, 8, 8, 3, same)?, nn::Conv2d::new(&dev, 8, 8, 3, same)?],
//!     head: None,
//!     classifier: nn::Linear::new(&dev, 8 * 4 * 4, 10, true)?,
//!     classes: 10,
//! };
//! let names: Vec<String> = net.state_dict().into_iter().map(|(n, _)| n).collect();
//! assert_eq!(names, [
//!     "features.0.weight", "features.0.bias",
//!     "features.1.weight", "features.1.bias",
//!     "features.1.running_mean", "features.1.running_var", "features.1.num_batches_tracked",
//!     "blocks.0.weight", "blocks.0.bias", "blocks.1.weight", "blocks.1.bias",
//!     "classifier.weight", "classifier.bias",
//! ]);
//! net.eval(); // the batch norm inside `features` now uses its running statistics
//! let y = net.forward(&Tensor::zeros(&dev, &[2, 1, 8, 8], DType::F32)?)?;
//! assert_eq!(y.shape(), &[2, net.classes]);
//! # Ok(()) }
//! ```
//!
//! Field rules and attributes:
//!
//! - a field holding a module (a layer, a container, a derived struct, a `Box<dyn Forward>`) is
//!   a child, a [`Tensor`] a parameter; an `Option` of either counts when `Some`, a `Vec` (or
//!   an array) is a list whose items are named `0`, `1`, ... ([`ModuleField`]);
//! - `#[module(skip)]` leaves a field out (sizes, options; anything else is a compile error
//!   naming the field, so that nothing holding parameters is forgotten);
//! - `#[module(buffer)]` makes a `Tensor` (or `Option<Tensor>`) field a buffer: saved and
//!   loaded, not a parameter;
//! - `#[module(training)]` makes a `bool` field the module's training flag (`train()` /
//!   `eval()` set it), for a model that runs e.g. [`ops::dropout`](crate::ops::dropout) itself;
//! - `#[module(rename = "name")]` gives a field another state-dict name;
//! - `#[module(crate = "path")]` on the struct names this crate when it is re-exported.
//!
//! A field the derive cannot place is a compile error at the field, not a parameter silently
//! left out:
//!
//! ```compile_fail,E0277
//! use wgtensor::nn::{self, Module};
//! #[derive(Module)]
//! struct Net {
//!     fc: nn::Linear,
//!     hidden: usize, // `usize` is not a module, a Tensor, or an Option or Vec of them
//! }
//! ```
//!
//! A layer of your own with tensors to compute from implements [`Module`] by hand: `visit`
//! reports each parameter, buffer, training flag and child to a [`Visitor`], `visit_mut` lends
//! the flags, counters and children to a [`VisitorMut`]; everything else
//! ([`named_parameters`](Module::named_parameters), [`state_dict`](Module::state_dict),
//! [`eval`](Module::eval), [`load_state_dict`](Module::load_state_dict), ...) is provided.
//!
//! ```ignore-wasm32
//! # fn main() -> wgtensor::Result<()> {
//! use wgtensor::nn::{self, Forward, Module, Visitor, VisitorMut};
//! use wgtensor::{DType, Device, Result, Tensor};
//!
//! /// `x * scale`, with a learned per-feature scale.
//! struct Scale {
//!     scale: Tensor,
//! }
//!
//! impl Module for Scale {
//!     fn visit(&self, v: &mut dyn Visitor) {
//!         v.parameter("scale", &self.scale);
//!     }
//!     fn visit_mut(&mut self, _: &mut dyn VisitorMut) {} // no flags, counters or children
//! }
//!
//! impl Forward for Scale {
//!     fn forward(&self, x: &Tensor) -> Result<Tensor> {
//!         x.mul(&self.scale)
//!     }
//! }
//!
//! let dev = Device::new()?;
//! let s = Scale { scale: Tensor::ones(&dev, &[4], DType::F32)?.requires_grad()? };
//! let model = nn::Sequential::new().push(nn::Linear::new(&dev, 4, 4, true)?).push(s);
//! let names: Vec<String> = model.named_parameters().into_iter().map(|(n, _)| n).collect();
//! assert_eq!(names, ["0.weight", "0.bias", "1.scale"]);
//! # Ok(()) }
//! ```

mod activation;
mod attention;
mod attention_fast;
mod attention_masks;
mod batchnorm;
mod cells;
mod container;
mod conv;
mod embedding;
mod fields;
mod layers;
mod module;
mod norm;
mod recurrent;
mod state_cell;
mod transformer;
mod transformer_decoder;

use std::collections::HashMap;

pub use activation::{
    Hardsigmoid, Hardswish, Hardtanh, LeakyReLU, LogSoftmax, ReLU6, Softmax, Softplus,
};
pub use attention::{MultiheadAttention, MultiheadAttentionConfig};
pub use attention_masks::{MhaMask, MhaOptions};
pub use batchnorm::{BatchNorm1d, BatchNorm2d, BatchNorm3d, BatchNormConfig};
pub use cells::{GruCell, LstmCell};
pub use container::{ModuleDict, ModuleList, Sequential};
pub use conv::{Conv1d, ConvTranspose1d, ConvTranspose2d, ConvTranspose2dConfig};
pub use embedding::Embedding;
pub use fields::{BufferField, ModuleField};
pub use layers::{
    AdaptiveAvgPool2d, AvgPool2d, Conv2d, Conv2dConfig, Dropout, Flatten, GELUTanh, Linear,
    MaxPool2d, ReLU, SiLU, Sigmoid, Tanh, GELU,
};
pub use module::{Forward, MaybeSend, MaybeSync, Module, Visitor, VisitorMut};
pub use norm::{GroupNorm, GroupNormConfig, LayerNorm, LayerNormConfig, RMSNorm, RMSNormConfig};
pub use recurrent::{Gru, Lstm, Recurrent, RnnConfig};
pub use state_cell::{BorrowConflict, StateCell, StateRef, StateRefMut};
pub use transformer::{
    TransformerActivation, TransformerEncoder, TransformerEncoderLayer,
    TransformerEncoderLayerConfig,
};
pub use transformer_decoder::{
    generate_square_subsequent_mask, TransformerDecoder, TransformerDecoderLayer,
    TransformerDecoderLayerConfig, TransformerDecoderOptions,
};
/// `#[derive(Module)]`: implements [`Module`] for a struct from its fields (see the
/// [module documentation](self) for the rules and the `#[module(...)]` attributes). It shares
/// the trait's name, so `use wgtensor::nn::Module;` brings both.
pub use wgtensor_derive::Module;

use crate::{Result, Tensor};

/// The most layers a stacked module (an RNN, a transformer encoder) builds: far beyond any real
/// model, and a bound on the construction loop, which would otherwise run until memory ran out.
pub(crate) const MAX_LAYERS: usize = 1 << 16;

/// Copies a state dict (e.g. from [`crate::io::load_safetensors`]) into `module`'s parameters
/// and buffers in place; `strict` as PyTorch's `load_state_dict`. The same as
/// [`Module::load_state_dict`].
pub fn load_state_dict(
    module: &mut dyn Module,
    source: &HashMap<String, Tensor>,
    strict: bool,
) -> Result<crate::io::LoadReport> {
    module.load_state_dict(source, strict)
}

/// [`load_state_dict`] as a future, for the browser: it also restores the counters
/// (`num_batches_tracked`, which a momentum of `None` reads), which the blocking method
/// cannot read back there and leaves as they were. On native targets it gives the same
/// result as the method.
pub async fn load_state_dict_async<M: Module + ?Sized>(
    module: &mut M,
    source: &HashMap<String, Tensor>,
    strict: bool,
) -> Result<crate::io::LoadReport> {
    module::load_async(module, source, strict).await
}
