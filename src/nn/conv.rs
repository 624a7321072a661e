//! The other convolution layers: PyTorch's `nn.Conv1d`, `nn.ConvTranspose1d` and
//! `nn.ConvTranspose2d`, with its parameter names, weight layouts and default initialization
//! (`nn.Conv2d` is in layers.rs).

use super::layers::{check_groups, weight_and_bias};
use super::{Forward, Module};
use crate::ops::{
    conv1d, conv_transpose1d, conv_transpose2d, Activation, Conv1dOptions, ConvTranspose1dOptions,
    ConvTranspose2dOptions, Padding, Padding1d,
};
use crate::{Device, Result, Tensor};

/// PyTorch's `nn.Conv1d` over `[N, C, L]` (or `[C, L]`): `weight [out, in / groups, k]`,
/// `bias [out]`, initialized as PyTorch does (kaiming_uniform with a = sqrt(5); bias
/// `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`). The [`Conv2dConfig`](super::Conv2dConfig) fields
/// apply along the one spatial dim.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{self, Forward, Module};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let conv = nn::Conv1d::new(&dev, 4, 8, 3, nn::Conv2dConfig { padding: 1, groups: 2, ..Default::default() })?;
/// assert_eq!(conv.weight.shape(), &[8, 2, 3]);
/// let y = conv.forward(&Tensor::zeros(&dev, &[2, 4, 16], DType::F32)?)?;
/// assert_eq!(y.shape(), &[2, 8, 16]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Module)]
#[module(crate = "crate")]
pub struct Conv1d {
    /// `[out_channels, in_channels / groups, k]`.
    pub weight: Tensor,
    /// `[out_channels]`, when the layer has a bias.
    pub bias: Option<Tensor>,
    /// The convolution's options.
    #[module(skip)]
    pub options: Conv1dOptions,
}

impl Conv1d {
    /// A new layer with PyTorch's default initialization.
    pub fn new(
        dev: &Device,
        in_channels: usize,
        out_channels: usize,
        kernel_size: usize,
        c: super::Conv2dConfig,
    ) -> Result<Conv1d> {
        check_groups("Conv1d", in_channels, out_channels, c.groups)?;
        let shape = [out_channels, in_channels / c.groups, kernel_size];
        let (weight, bias) = weight_and_bias(dev, &shape, out_channels, c.bias)?;
        Ok(Conv1d {
            weight,
            bias,
            options: Conv1dOptions {
                stride: c.stride,
                padding: Padding1d::uniform(c.padding),
                dilation: c.dilation,
                groups: c.groups,
                activation: Activation::None,
            },
        })
    }
}

impl Forward for Conv1d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        conv1d(x, &self.weight, self.bias.as_ref(), &self.options)
    }
}

/// Options of [`ConvTranspose2d`] beyond the channel counts and kernel size (PyTorch's
/// defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvTranspose2dConfig {
    /// The upsampling factor.
    pub stride: usize,
    /// Rows and columns cropped from each side of the output (PyTorch's `padding`).
    pub padding: usize,
    /// Extra rows and columns on the bottom and right; below the stride or the dilation.
    pub output_padding: usize,
    /// Spacing between kernel taps.
    pub dilation: usize,
    /// Channel groups.
    pub groups: usize,
    /// Whether the layer has a bias.
    pub bias: bool,
}

impl Default for ConvTranspose2dConfig {
    fn default() -> Self {
        ConvTranspose2dConfig {
            stride: 1,
            padding: 0,
            output_padding: 0,
            dilation: 1,
            groups: 1,
            bias: true,
        }
    }
}

/// PyTorch's `nn.ConvTranspose2d`: `weight [in, out / groups, k, k]` (PyTorch's transposed
/// layout), `bias [out]`, initialized as PyTorch does: kaiming_uniform with a = sqrt(5), whose
/// fan-in PyTorch takes from the weight's dim 1 (`out / groups * k * k`), and the bias from
/// the same fan-in.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{self, Forward, Module};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let up = nn::ConvTranspose2d::new(&dev, 8, 4, 2, nn::ConvTranspose2dConfig { stride: 2, ..Default::default() })?;
/// assert_eq!(up.weight.shape(), &[8, 4, 2, 2]);
/// let y = up.forward(&Tensor::zeros(&dev, &[1, 8, 5, 5], DType::F32)?)?;
/// assert_eq!(y.shape(), &[1, 4, 10, 10]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Module)]
#[module(crate = "crate")]
pub struct ConvTranspose2d {
    /// `[in_channels, out_channels / groups, k, k]`.
    pub weight: Tensor,
    /// `[out_channels]`, when the layer has a bias.
    pub bias: Option<Tensor>,
    /// The transposed convolution's options.
    #[module(skip)]
    pub options: ConvTranspose2dOptions,
}

impl ConvTranspose2d {
    /// A new layer with a square `kernel_size` and PyTorch's default initialization.
    pub fn new(
        dev: &Device,
        in_channels: usize,
        out_channels: usize,
        kernel_size: usize,
        c: ConvTranspose2dConfig,
    ) -> Result<ConvTranspose2d> {
        check_groups("ConvTranspose2d", in_channels, out_channels, c.groups)?;
        let shape = [
            in_channels,
            out_channels / c.groups,
            kernel_size,
            kernel_size,
        ];
        let (weight, bias) = weight_and_bias(dev, &shape, out_channels, c.bias)?;
        Ok(ConvTranspose2d {
            weight,
            bias,
            options: ConvTranspose2dOptions {
                stride: [c.stride; 2],
                padding: Padding::uniform(c.padding),
                output_padding: [c.output_padding; 2],
                dilation: [c.dilation; 2],
                groups: c.groups,
                activation: Activation::None,
            },
        })
    }
}

impl Forward for ConvTranspose2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        conv_transpose2d(x, &self.weight, self.bias.as_ref(), &self.options)
    }
}

/// PyTorch's `nn.ConvTranspose1d` over `[N, C, L]` (or `[C, L]`): `weight [in, out / groups,
/// k]`, `bias [out]`, initialized as [`ConvTranspose2d`] (fan-in from the weight's dim 1,
/// `out / groups * k`); the [`ConvTranspose2dConfig`] fields apply along the one spatial dim.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{self, Forward};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let up = nn::ConvTranspose1d::new(&dev, 8, 4, 2, nn::ConvTranspose2dConfig { stride: 2, ..Default::default() })?;
/// assert_eq!(up.weight.shape(), &[8, 4, 2]);
/// assert_eq!(up.forward(&Tensor::zeros(&dev, &[1, 8, 5], DType::F32)?)?.shape(), &[1, 4, 10]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Module)]
#[module(crate = "crate")]
pub struct ConvTranspose1d {
    /// `[in_channels, out_channels / groups, k]`.
    pub weight: Tensor,
    /// `[out_channels]`, when the layer has a bias.
    pub bias: Option<Tensor>,
    /// The transposed convolution's options.
    #[module(skip)]
    pub options: ConvTranspose1dOptions,
}

impl ConvTranspose1d {
    /// A new layer with PyTorch's default initialization.
    pub fn new(
        dev: &Device,
        in_channels: usize,
        out_channels: usize,
        kernel_size: usize,
        c: ConvTranspose2dConfig,
    ) -> Result<ConvTranspose1d> {
        check_groups("ConvTranspose1d", in_channels, out_channels, c.groups)?;
        let shape = [in_channels, out_channels / c.groups, kernel_size];
        let (weight, bias) = weight_and_bias(dev, &shape, out_channels, c.bias)?;
        Ok(ConvTranspose1d {
            weight,
            bias,
            options: ConvTranspose1dOptions {
                stride: c.stride,
                padding: Padding1d::uniform(c.padding),
                output_padding: c.output_padding,
                dilation: c.dilation,
                groups: c.groups,
                activation: Activation::None,
            },
        })
    }
}

impl Forward for ConvTranspose1d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        conv_transpose1d(x, &self.weight, self.bias.as_ref(), &self.options)
    }
}
