//! Layers with PyTorch's names, parameters, `state_dict()` keys and default initialization
//! (`torch.nn`): [`Linear`], [`Conv1d`], [`Conv2d`], [`ConvTranspose2d`], [`Embedding`],
//! [`BatchNorm2d`] / [`BatchNorm1d`], [`Lstm`] / [`Gru`], [`Dropout`], the pools, activations, [`Flatten`] and [`Sequential`]. A user's own model joins by
//! implementing [`Module`] (a `forward` and the list of its children or parameters).
//!
//! ```no_run,ignore-wasm32
//! # fn main() -> wgtensor::Result<()> {
//! use wgtensor::nn::{self, Module};
//! use wgtensor::{DType, Device, Tensor};
//! let dev = Device::new()?;
//! let model = nn::Sequential::new()
//!     .push(nn::Conv2d::new(&dev, 1, 8, 3, Default::default())?)
//!     .push(nn::ReLU)
//!     .push(nn::Flatten)
//!     .push(nn::Linear::new(&dev, 8 * 6 * 6, 10, true)?);
//! let names: Vec<String> = model.state_dict().into_iter().map(|(n, _)| n).collect();
//! assert_eq!(names, ["0.weight", "0.bias", "3.weight", "3.bias"]);
//! let y = model.forward(&Tensor::zeros(&dev, &[2, 1, 8, 8], DType::F32)?)?;
//! # Ok(()) }
//! ```

mod conv;
mod embedding;
mod layers;
mod recurrent;

use std::collections::HashMap;

pub use conv::{Conv1d, ConvTranspose2d, ConvTranspose2dConfig};
pub use embedding::Embedding;
pub use layers::{
    AdaptiveAvgPool2d, AvgPool2d, BatchNorm1d, BatchNorm2d, Conv2d, Conv2dConfig, Dropout, Flatten,
    Linear, MaxPool2d, ReLU, Sigmoid, Tanh, GELU,
};
pub use recurrent::{Gru, Lstm, Recurrent, RnnConfig};

use crate::{Result, Tensor};

/// A layer or model: a forward pass and its named parameters and buffers.
pub trait Module {
    /// The forward pass.
    fn forward(&self, x: &Tensor) -> Result<Tensor>;

    /// Parameters by their `state_dict()` names, in PyTorch's registration order.
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }

    /// Buffers (e.g. running statistics) by their `state_dict()` names.
    fn named_buffers(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }

    /// Switches training behaviour (batch statistics, dropout) on or off (PyTorch's
    /// `train()` / `eval()`).
    fn set_training(&mut self, _training: bool) {}

    /// Restores what is not a tensor in place (e.g. `num_batches_tracked`) from a state dict
    /// whose keys carry `prefix`.
    fn load_counters(&mut self, _source: &HashMap<String, Tensor>, _prefix: &str) -> Result<()> {
        Ok(())
    }

    /// Parameters and buffers by name, as PyTorch's `state_dict()` orders them per module
    /// (parameters first, then buffers).
    fn state_dict(&self) -> Vec<(String, Tensor)> {
        let mut v = self.named_parameters();
        v.extend(self.named_buffers());
        v
    }

    /// The number of parameter elements.
    fn num_parameters(&self) -> usize {
        self.named_parameters().iter().map(|(_, t)| t.numel()).sum()
    }
}

/// Copies a state dict (e.g. from [`crate::io::load_safetensors`]) into `module`'s parameters
/// and buffers in place; `strict` as PyTorch's `load_state_dict`.
pub fn load_state_dict(
    module: &mut dyn Module,
    source: &HashMap<String, Tensor>,
    strict: bool,
) -> Result<crate::io::LoadReport> {
    let sd = module.state_dict();
    // Counters are restored by the module itself, not copied into a tensor.
    let (counters, tensors): (Vec<_>, Vec<_>) = sd
        .iter()
        .partition(|(n, _)| n.ends_with("num_batches_tracked"));
    let targets: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut rest = source.clone();
    let mut missing_counters = Vec::new();
    for (n, _) in &counters {
        if rest.remove(n.as_str()).is_none() {
            missing_counters.push(n.clone());
        }
    }
    let mut report =
        crate::io::load_state_dict(&targets, &rest, strict && missing_counters.is_empty())?;
    if strict && !missing_counters.is_empty() {
        return Err(crate::Error::Io {
            op: "load_state_dict",
            msg: format!("Error(s) in loading state_dict: missing keys {missing_counters:?}"),
        });
    }
    report.missing.extend(missing_counters);
    module.load_counters(source, "")?;
    Ok(report)
}

///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{self, Module};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let mlp = nn::Sequential::new()
///     .push(nn::Linear::new(&dev, 4, 8, true)?)
///     .push(nn::ReLU)
///     .push(nn::Linear::new(&dev, 8, 2, true)?);
/// let names: Vec<String> = mlp.state_dict().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["0.weight", "0.bias", "2.weight", "2.bias"]); // PyTorch's keys
/// assert_eq!(mlp.forward(&Tensor::zeros(&dev, &[3, 4], DType::F32)?)?.shape(), &[3, 2]);
/// # Ok(()) }
/// ```
/// Layers applied in order, named `0`, `1`, ... as PyTorch's `nn.Sequential`.
#[derive(Default)]
pub struct Sequential {
    layers: Vec<Box<dyn Module>>,
}

impl Sequential {
    /// An empty sequence.
    pub fn new() -> Sequential {
        Sequential { layers: Vec::new() }
    }

    /// Appends a layer (builder style).
    pub fn push(mut self, layer: impl Module + 'static) -> Sequential {
        self.layers.push(Box::new(layer));
        self
    }

    /// The number of layers.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// True when there is no layer.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }
}

/// `prefix.name` for every entry.
fn prefixed(prefix: &str, v: Vec<(String, Tensor)>) -> Vec<(String, Tensor)> {
    v.into_iter()
        .map(|(n, t)| (format!("{prefix}.{n}"), t))
        .collect()
}

impl Module for Sequential {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut y = x.clone();
        for l in &self.layers {
            y = l.forward(&y)?;
        }
        Ok(y)
    }
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.layers
            .iter()
            .enumerate()
            .flat_map(|(i, l)| prefixed(&i.to_string(), l.named_parameters()))
            .collect()
    }
    fn named_buffers(&self) -> Vec<(String, Tensor)> {
        self.layers
            .iter()
            .enumerate()
            .flat_map(|(i, l)| prefixed(&i.to_string(), l.named_buffers()))
            .collect()
    }
    fn state_dict(&self) -> Vec<(String, Tensor)> {
        // PyTorch orders a container's state dict by module: each child's parameters, then its
        // buffers.
        self.layers
            .iter()
            .enumerate()
            .flat_map(|(i, l)| prefixed(&i.to_string(), l.state_dict()))
            .collect()
    }
    fn set_training(&mut self, training: bool) {
        for l in &mut self.layers {
            l.set_training(training);
        }
    }
    fn load_counters(&mut self, source: &HashMap<String, Tensor>, prefix: &str) -> Result<()> {
        for (i, l) in self.layers.iter_mut().enumerate() {
            l.load_counters(source, &format!("{prefix}{i}."))?;
        }
        Ok(())
    }
}
