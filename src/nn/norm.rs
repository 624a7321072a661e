//! The normalization layers over features (PyTorch's `nn.LayerNorm`, `nn.GroupNorm` and
//! `nn.RMSNorm`): parameters initialized as PyTorch (weight ones, bias zeros), state-dict names
//! `weight` / `bias`, forward through the fused kernels of [`crate::ops::norm`]. None of them
//! has running statistics, so training and evaluation compute the same.

use super::layers::param;
use super::{Forward, Module, Visitor, VisitorMut};
use crate::ops::{group_norm, layer_norm, rms_norm};
use crate::{DType, Device, Error, Result, Tensor};

fn ones(dev: &Device, shape: &[usize]) -> Result<Tensor> {
    param(Tensor::ones(dev, shape, DType::F32)?)
}

fn zeros(dev: &Device, shape: &[usize]) -> Result<Tensor> {
    param(Tensor::zeros(dev, shape, DType::F32)?)
}

/// `weight`, then `bias`, each when present.
fn visit_affine(weight: Option<&Tensor>, bias: Option<&Tensor>, v: &mut dyn Visitor) {
    if let Some(w) = weight {
        v.parameter("weight", w);
    }
    if let Some(b) = bias {
        v.parameter("bias", b);
    }
}

/// Options of [`LayerNorm`] (PyTorch's defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerNormConfig {
    /// Added to the variance (1e-5).
    pub eps: f64,
    /// Learned `weight` (and `bias`, see below) over the normalized shape (true).
    pub elementwise_affine: bool,
    /// A learned `bias` when `elementwise_affine` (true).
    pub bias: bool,
}

impl Default for LayerNormConfig {
    fn default() -> Self {
        LayerNormConfig {
            eps: 1e-5,
            elementwise_affine: true,
            bias: true,
        }
    }
}

/// Layer normalization over the trailing `normalized_shape` dims (PyTorch's `nn.LayerNorm`):
/// `weight` (ones) and `bias` (zeros) of shape `normalized_shape`.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{self, Forward, Module};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let ln = nn::LayerNorm::new(&dev, &[16])?;
/// let y = ln.forward(&wgtensor::ops::randn(&dev, &[4, 10, 16], DType::F32)?)?;
/// assert_eq!(y.shape(), &[4, 10, 16]);
/// let names: Vec<String> = ln.named_parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["weight", "bias"]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct LayerNorm {
    /// `normalized_shape`, initialized to 1 (absent without `elementwise_affine`).
    pub weight: Option<Tensor>,
    /// `normalized_shape`, initialized to 0 (absent without `elementwise_affine` or `bias`).
    pub bias: Option<Tensor>,
    /// The trailing dims each slice is normalized over.
    pub normalized_shape: Vec<usize>,
    /// Added to the variance.
    pub eps: f64,
}

impl LayerNorm {
    /// PyTorch's defaults: eps 1e-5, elementwise affine with a bias.
    pub fn new(dev: &Device, normalized_shape: &[usize]) -> Result<LayerNorm> {
        Self::with_config(dev, normalized_shape, LayerNormConfig::default())
    }

    /// A layer with these options.
    pub fn with_config(
        dev: &Device,
        normalized_shape: &[usize],
        config: LayerNormConfig,
    ) -> Result<LayerNorm> {
        let affine = config.elementwise_affine;
        Ok(LayerNorm {
            weight: affine.then(|| ones(dev, normalized_shape)).transpose()?,
            bias: (affine && config.bias)
                .then(|| zeros(dev, normalized_shape))
                .transpose()?,
            normalized_shape: normalized_shape.to_vec(),
            eps: config.eps,
        })
    }
}

/// Parameters `weight` and `bias` when present; no buffers, flags or children.
impl Module for LayerNorm {
    fn visit(&self, v: &mut dyn Visitor) {
        visit_affine(self.weight.as_ref(), self.bias.as_ref(), v);
    }
    fn visit_mut(&mut self, _: &mut dyn VisitorMut) {}
}

impl Forward for LayerNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        layer_norm(
            x,
            &self.normalized_shape,
            self.weight.as_ref(),
            self.bias.as_ref(),
            self.eps,
        )
    }
}

/// Options of [`GroupNorm`] (PyTorch's defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupNormConfig {
    /// Added to the variance (1e-5).
    pub eps: f64,
    /// Learned per-channel `weight` and `bias` (true).
    pub affine: bool,
}

impl Default for GroupNormConfig {
    fn default() -> Self {
        GroupNormConfig {
            eps: 1e-5,
            affine: true,
        }
    }
}

/// Group normalization of `[N, C, *]` inputs (PyTorch's `nn.GroupNorm`): the channels split
/// into `num_groups` groups, each normalized over its channels and positions per sample;
/// per-channel `weight` (ones) and `bias` (zeros) of shape `[num_channels]`.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{self, Forward};
/// use wgtensor::{DType, Device};
/// let dev = Device::new()?;
/// let gn = nn::GroupNorm::new(&dev, 4, 32)?;
/// let y = gn.forward(&wgtensor::ops::randn(&dev, &[2, 32, 8, 8], DType::F32)?)?;
/// assert_eq!(y.shape(), &[2, 32, 8, 8]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct GroupNorm {
    /// `[num_channels]`, initialized to 1 (absent without `affine`).
    pub weight: Option<Tensor>,
    /// `[num_channels]`, initialized to 0 (absent without `affine`).
    pub bias: Option<Tensor>,
    /// Groups the channels are split into.
    pub num_groups: usize,
    /// Channels (dim 1) of the input.
    pub num_channels: usize,
    /// Added to the variance.
    pub eps: f64,
}

impl GroupNorm {
    /// PyTorch's defaults: eps 1e-5, affine. `num_channels` must be divisible by `num_groups`.
    pub fn new(dev: &Device, num_groups: usize, num_channels: usize) -> Result<GroupNorm> {
        Self::with_config(dev, num_groups, num_channels, GroupNormConfig::default())
    }

    /// A layer with these options.
    pub fn with_config(
        dev: &Device,
        num_groups: usize,
        num_channels: usize,
        config: GroupNormConfig,
    ) -> Result<GroupNorm> {
        if num_groups == 0 || !num_channels.is_multiple_of(num_groups) {
            return Err(Error::arg(
                "GroupNorm",
                format!(
                    "num_channels ({num_channels}) must be divisible by num_groups \
                     ({num_groups})"
                ),
            ));
        }
        let c = [num_channels];
        Ok(GroupNorm {
            weight: config.affine.then(|| ones(dev, &c)).transpose()?,
            bias: config.affine.then(|| zeros(dev, &c)).transpose()?,
            num_groups,
            num_channels,
            eps: config.eps,
        })
    }
}

/// Parameters `weight` and `bias` when affine; no buffers, flags or children.
impl Module for GroupNorm {
    fn visit(&self, v: &mut dyn Visitor) {
        visit_affine(self.weight.as_ref(), self.bias.as_ref(), v);
    }
    fn visit_mut(&mut self, _: &mut dyn VisitorMut) {}
}

impl Forward for GroupNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        // F.group_norm checks the input (its rank, the groups dividing its channels, the
        // affine parameters' size against them), as PyTorch's layer leaves it to.
        group_norm(
            x,
            self.num_groups,
            self.weight.as_ref(),
            self.bias.as_ref(),
            self.eps,
        )
    }
}

/// Options of [`RMSNorm`] (PyTorch's defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RMSNormConfig {
    /// Added to the mean square; `None` (the default) is `f32::EPSILON`, as PyTorch.
    pub eps: Option<f64>,
    /// A learned `weight` over the normalized shape (true).
    pub elementwise_affine: bool,
}

impl Default for RMSNormConfig {
    fn default() -> Self {
        RMSNormConfig {
            eps: None,
            elementwise_affine: true,
        }
    }
}

/// Root-mean-square normalization over the trailing `normalized_shape` dims (PyTorch's
/// `nn.RMSNorm`): `x / sqrt(mean(x^2) + eps) * weight`, `weight` (ones) of shape
/// `normalized_shape`.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{self, Forward};
/// use wgtensor::{DType, Device};
/// let dev = Device::new()?;
/// let norm = nn::RMSNorm::new(&dev, &[64])?;
/// let y = norm.forward(&wgtensor::ops::randn(&dev, &[3, 64], DType::F32)?)?;
/// assert_eq!(y.shape(), &[3, 64]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RMSNorm {
    /// `normalized_shape`, initialized to 1 (absent without elementwise affine).
    pub weight: Option<Tensor>,
    /// The trailing dims each slice is normalized over.
    pub normalized_shape: Vec<usize>,
    /// Added to the mean square (`None`: `f32::EPSILON`).
    pub eps: Option<f64>,
}

impl RMSNorm {
    /// PyTorch's defaults: eps `None` (f32's epsilon), a learned weight.
    pub fn new(dev: &Device, normalized_shape: &[usize]) -> Result<RMSNorm> {
        Self::with_config(dev, normalized_shape, RMSNormConfig::default())
    }

    /// A layer with these options.
    pub fn with_config(
        dev: &Device,
        normalized_shape: &[usize],
        config: RMSNormConfig,
    ) -> Result<RMSNorm> {
        Ok(RMSNorm {
            weight: config
                .elementwise_affine
                .then(|| ones(dev, normalized_shape))
                .transpose()?,
            normalized_shape: normalized_shape.to_vec(),
            eps: config.eps,
        })
    }
}

/// Parameter `weight` when present; no buffers, flags or children.
impl Module for RMSNorm {
    fn visit(&self, v: &mut dyn Visitor) {
        visit_affine(self.weight.as_ref(), None, v);
    }
    fn visit_mut(&mut self, _: &mut dyn VisitorMut) {}
}

impl Forward for RMSNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        rms_norm(x, &self.normalized_shape, self.weight.as_ref(), self.eps)
    }
}
