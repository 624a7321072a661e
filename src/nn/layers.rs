//! The layers: parameters created with PyTorch's default initialization, state-dict names as
//! PyTorch's, forward passes through the crate's ops.

use super::{Forward, Module, Visitor, VisitorMut};
use crate::ops::{
    adaptive_avg_pool2d, avg_pool2d, conv2d, dropout, gemm, kaiming_uniform, max_pool2d, uniform,
    Activation, AvgPool2dOptions, Bias, Conv2dOptions, GemmOptions, MaxPool2dOptions, Padding,
};
use crate::{DType, Device, Error, Result, Tensor};

/// A trainable parameter (the one place layers create them): tracked by autograd, as
/// PyTorch's `nn.Parameter` requires grad. Run inference inside `no_grad` so that no graph is
/// recorded.
pub(super) fn param(t: Tensor) -> Result<Tensor> {
    t.requires_grad()
}

/// PyTorch's `reset_parameters` of Linear and the convolutions: a `shape` weight by
/// `kaiming_uniform_(a = sqrt(5))`, then (when `bias`) a bias of `bias_len` from
/// [`bias_init`], both trainable leaves, drawn in that order. The fan-in is PyTorch's
/// `_calculate_fan_in_and_fan_out`: the weight's dims past the first (`in` of a Linear,
/// `in / groups * k...` of a convolution, `out / groups * k...` of a transposed one), taken
/// once the weight exists (so its size was checked and the product fits).
pub(super) fn weight_and_bias(
    dev: &Device,
    shape: &[usize],
    bias_len: usize,
    bias: bool,
) -> Result<(Tensor, Option<Tensor>)> {
    let weight = param(kaiming_uniform(dev, shape, 5f64.sqrt(), DType::F32)?)?;
    let fan_in = shape[1..].iter().product();
    let bias = match bias {
        true => Some(param(bias_init(dev, bias_len, fan_in)?)?),
        false => None,
    };
    Ok((weight, bias))
}

/// PyTorch's bias initialization for a layer with `fan_in` inputs: `U(-1/sqrt(fan_in),
/// 1/sqrt(fan_in))`.
fn bias_init(dev: &Device, n: usize, fan_in: usize) -> Result<Tensor> {
    let b = if fan_in > 0 {
        1.0 / (fan_in as f64).sqrt()
    } else {
        0.0
    };
    uniform(dev, &[n], -b, b, DType::F32)
}

/// `impl Module` for a layer without parameters, buffers, flags or children (a pool, an
/// activation): it has nothing to report.
macro_rules! stateless_module {
    ($name:ident) => {
        /// Nothing: no parameters, buffers, flags or children.
        impl Module for $name {
            fn visit(&self, _: &mut dyn Visitor) {}
            fn visit_mut(&mut self, _: &mut dyn VisitorMut) {}
        }
    };
}

/// `y = x W^T + b` (PyTorch's `nn.Linear`): `weight [out, in]`, `bias [out]`, initialized with
/// `kaiming_uniform_(a = sqrt(5))` and `U(-1/sqrt(in), 1/sqrt(in))`. Input `[..., in]`.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{self, Forward, Module};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let fc = nn::Linear::new(&dev, 64, 10, true)?;
/// assert_eq!(fc.weight.shape(), &[10, 64]); // [out, in], as PyTorch
/// let y = fc.forward(&Tensor::zeros(&dev, &[32, 64], DType::F32)?)?;
/// assert_eq!(y.shape(), &[32, 10]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Module)]
#[module(crate = "crate")]
pub struct Linear {
    /// `[out_features, in_features]`.
    pub weight: Tensor,
    /// `[out_features]`, when the layer has a bias; of the weight's dtype (unlike
    /// `F.linear`, which broadcasts a `[1]` bias and adds one of another dtype on its
    /// matmul path, the fused epilogue takes exactly this).
    pub bias: Option<Tensor>,
}

impl Linear {
    /// A new layer with PyTorch's default initialization.
    pub fn new(
        dev: &Device,
        in_features: usize,
        out_features: usize,
        bias: bool,
    ) -> Result<Linear> {
        let shape = [out_features, in_features];
        let (weight, bias) = weight_and_bias(dev, &shape, out_features, bias)?;
        Ok(Linear { weight, bias })
    }
}

/// The convolution layers' groups checks, in `_ConvNd.__init__`'s order and words.
pub(super) fn check_groups(op: &'static str, inp: usize, out: usize, groups: usize) -> Result<()> {
    let why = if groups == 0 {
        "groups must be a positive integer"
    } else if !inp.is_multiple_of(groups) {
        "in_channels must be divisible by groups"
    } else if !out.is_multiple_of(groups) {
        "out_channels must be divisible by groups"
    } else {
        return Ok(());
    };
    Err(Error::arg(
        op,
        format!("{why} (groups {groups}, in_channels {inp}, out_channels {out})"),
    ))
}

impl Forward for Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        // The weight is a public field: check its rank before reading its dims.
        let &[out_f, in_f] = self.weight.shape() else {
            return Err(Error::shape(
                "Linear",
                format!(
                    "weight must be [out_features, in_features], got {:?}",
                    self.weight.shape()
                ),
            ));
        };
        let Some(&got) = x.shape().last() else {
            // ATen's linear checks the ranks first, in its own name.
            return Err(Error::shape(
                "linear",
                "both arguments to linear need to be at least 1D, but they are 0D and 2D \
                 (a 0-d input has no features; Linear takes [*, in_features])",
            ));
        };
        // F.linear with a bias of a matrix (or of a contiguous input of any rank, flattened to
        // one by _flatten_nd_linear, with a contiguous bias) is addmm, whose meta checks the
        // dtypes (bias against the weight, then input against the weight) before the shapes.
        let addmm = |b: &Tensor| x.rank() == 2 || (x.is_contiguous() && b.is_contiguous());
        if let Some(b) = self.bias.as_ref().filter(|b| addmm(b)) {
            let w = self.weight.dtype();
            for (what, t) in [("self", b.dtype()), ("mat1", x.dtype())] {
                if t != w {
                    return Err(Error::arg(
                        "linear",
                        format!(
                            "{what} and mat2 must have the same dtype, but got {} and {}",
                            t.scalar_name(),
                            w.scalar_name()
                        ),
                    ));
                }
            }
        }
        if got != in_f {
            let rows = x.shape()[..x.rank() - 1].iter().product::<usize>();
            return Err(Error::shape(
                "linear",
                format!(
                    "mat1 and mat2 shapes cannot be multiplied ({rows}x{got} and {in_f}x{out_f}): \
                     input of shape {:?} has {got} features in its last dim, expected {in_f} \
                     (weight [{out_f}, {in_f}]); check the size the layer before produces \
                     (an image of another size changes what Flatten gives)",
                    x.shape(),
                ),
            ));
        }
        if x.rank() == 1 {
            // PyTorch's unbatched input: one row in, one row out.
            return self.forward(&x.unsqueeze(0)?)?.squeeze(0);
        }
        gemm(
            x,
            &self.weight.transpose(0, 1)?,
            &GemmOptions {
                bias: self.bias.as_ref().map(Bias::PerColumn),
                ..Default::default()
            },
        )
    }
}

/// Options of [`Conv2d`] beyond the channel counts and kernel size (PyTorch's defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2dConfig {
    /// Step between windows.
    pub stride: usize,
    /// Zero padding on every side.
    pub padding: usize,
    /// Spacing between kernel taps.
    pub dilation: usize,
    /// Channel groups (in and out channels must be divisible; `groups = in` is depthwise).
    pub groups: usize,
    /// Whether the layer has a bias.
    pub bias: bool,
}

impl Default for Conv2dConfig {
    fn default() -> Self {
        Conv2dConfig {
            stride: 1,
            padding: 0,
            dilation: 1,
            groups: 1,
            bias: true,
        }
    }
}

/// PyTorch's `nn.Conv2d`: `weight [out, in / groups, k, k]`, `bias [out]`, initialized as
/// PyTorch does (kaiming_uniform with a = sqrt(5); bias from the fan-in).
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{self, Forward, Module};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let dw = nn::Conv2d::new(&dev, 16, 16, 3, nn::Conv2dConfig { padding: 1, groups: 16, ..Default::default() })?;
/// assert_eq!(dw.weight.shape(), &[16, 1, 3, 3]); // depthwise
/// let y = dw.forward(&Tensor::zeros(&dev, &[2, 16, 8, 8], DType::F32)?)?;
/// assert_eq!(y.shape(), &[2, 16, 8, 8]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Module)]
#[module(crate = "crate")]
pub struct Conv2d {
    /// `[out_channels, in_channels / groups, k, k]`.
    pub weight: Tensor,
    /// `[out_channels]`, when the layer has a bias.
    pub bias: Option<Tensor>,
    /// The convolution's options.
    #[module(skip)]
    pub options: Conv2dOptions,
}

impl Conv2d {
    /// A new layer with a square `kernel_size` and the same stride, padding and dilation on
    /// both axes.
    pub fn new(
        dev: &Device,
        in_channels: usize,
        out_channels: usize,
        kernel_size: usize,
        c: Conv2dConfig,
    ) -> Result<Conv2d> {
        let options = Conv2dOptions {
            stride: [c.stride; 2],
            padding: Padding::uniform(c.padding),
            dilation: [c.dilation; 2],
            groups: c.groups,
            activation: Activation::None,
        };
        Self::with_options(
            dev,
            in_channels,
            out_channels,
            [kernel_size; 2],
            options,
            c.bias,
        )
    }

    /// A new layer with a `[kh, kw]` kernel and any [`Conv2dOptions`]: per-axis stride and
    /// dilation, per-side padding (PyTorch's `nn.Conv2d(c, o, (3, 5), stride=(2, 1),
    /// padding=(1, 2), dilation=(1, 2))` is `[3, 5]` with `stride: [2, 1]`,
    /// `padding: Padding { top: 1, bottom: 1, left: 2, right: 2 }`, `dilation: [1, 2]`).
    pub fn with_options(
        dev: &Device,
        in_channels: usize,
        out_channels: usize,
        kernel_size: [usize; 2],
        options: Conv2dOptions,
        bias: bool,
    ) -> Result<Conv2d> {
        let op = "Conv2d";
        let g = options.groups;
        check_groups(op, in_channels, out_channels, g)?;
        let shape = [
            out_channels,
            in_channels / g,
            kernel_size[0],
            kernel_size[1],
        ];
        let (weight, bias) = weight_and_bias(dev, &shape, out_channels, bias)?;
        Ok(Conv2d {
            weight,
            bias,
            options,
        })
    }
}

impl Forward for Conv2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        conv2d(x, &self.weight, self.bias.as_ref(), &self.options)
    }
}

/// PyTorch's `nn.Dropout(p)`: inverted dropout in training, the identity in evaluation.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{self, Forward, Module};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let mut drop = nn::Dropout::new(0.5);
/// let x = Tensor::ones(&dev, &[1000], DType::F32)?;
/// let y = drop.forward(&x)?.to_vec::<f32>()?; // zeros and 2.0s (inverted scaling)
/// assert!(y.iter().all(|&v| v == 0.0 || v == 2.0));
/// drop.eval();
/// assert_eq!(drop.forward(&x)?.to_vec::<f32>()?, vec![1.0; 1000]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Dropout {
    /// The probability of zeroing an element.
    pub p: f64,
    /// Training mode.
    pub training: bool,
}

/// PyTorch's `nn.Dropout()`: p = 0.5, in training mode.
impl Default for Dropout {
    fn default() -> Dropout {
        Dropout::new(0.5)
    }
}

impl Dropout {
    /// A dropout layer in training mode. `p` is checked at each forward (it is a public
    /// field); [`Dropout::try_new`] also checks it here, as nn.Dropout's constructor does.
    pub fn new(p: f64) -> Dropout {
        Dropout { p, training: true }
    }

    /// [`Dropout::new`], refusing a `p` below 0 or above 1 in nn.Dropout's words ("dropout
    /// probability has to be between 0 and 1, but got 1.5"), as its constructor does (whose
    /// `p < 0 or p > 1` passes NaN on to the forward's check).
    pub fn try_new(p: f64) -> Result<Dropout> {
        if !p.is_nan() {
            crate::ops::random::check_dropout_p("Dropout", p)?;
        }
        Ok(Dropout::new(p))
    }
}

/// The training flag alone.
impl Module for Dropout {
    fn visit(&self, v: &mut dyn Visitor) {
        v.training(self.training);
    }
    fn visit_mut(&mut self, v: &mut dyn VisitorMut) {
        v.training(&mut self.training);
    }
}

impl Forward for Dropout {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        dropout(x, self.p, self.training)
    }
}

/// PyTorch's `nn.MaxPool2d`.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{self, Forward, Module};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// use wgtensor::ops::MaxPool2dOptions;
/// let pool = nn::MaxPool2d(MaxPool2dOptions::new(2));
/// let x = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0], &[1, 1, 2, 2])?;
/// assert_eq!(pool.forward(&x)?.to_vec::<f32>()?, vec![4.0]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct MaxPool2d(pub MaxPool2dOptions);

impl MaxPool2d {
    /// A `k x k` window with stride `k` (PyTorch's `nn.MaxPool2d(k)`).
    pub fn new(k: usize) -> MaxPool2d {
        MaxPool2d(MaxPool2dOptions::new(k))
    }
    /// Any window, stride, padding, dilation and ceil mode.
    pub fn with_options(o: MaxPool2dOptions) -> MaxPool2d {
        MaxPool2d(o)
    }
    /// PyTorch's `nn.MaxPool2d(.., return_indices=True)`: the values and, as i32, each
    /// maximum's flat index within its input plane
    /// ([`max_pool2d_with_indices`](crate::ops::max_pool2d_with_indices)).
    pub fn forward_with_indices(&self, x: &Tensor) -> Result<(Tensor, Tensor)> {
        crate::ops::max_pool2d_with_indices(x, &self.0)
    }
}

stateless_module!(MaxPool2d);

impl Forward for MaxPool2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        max_pool2d(x, &self.0)
    }
}

/// PyTorch's `nn.AvgPool2d`.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{self, Forward, Module};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// use wgtensor::ops::AvgPool2dOptions;
/// let pool = nn::AvgPool2d(AvgPool2dOptions::new(2));
/// let x = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0], &[1, 1, 2, 2])?;
/// assert_eq!(pool.forward(&x)?.to_vec::<f32>()?, vec![2.5]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct AvgPool2d(pub AvgPool2dOptions);

impl AvgPool2d {
    /// A `k x k` window with stride `k` (PyTorch's `nn.AvgPool2d(k)`).
    pub fn new(k: usize) -> AvgPool2d {
        AvgPool2d(AvgPool2dOptions::new(k))
    }
    /// Any window, stride, padding, ceil mode and divisor rule.
    pub fn with_options(o: AvgPool2dOptions) -> AvgPool2d {
        AvgPool2d(o)
    }
}

stateless_module!(AvgPool2d);

impl Forward for AvgPool2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        avg_pool2d(x, &self.0)
    }
}

/// PyTorch's `nn.AdaptiveAvgPool2d(output_size)`.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{self, Forward, Module};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let gap = nn::AdaptiveAvgPool2d([1, 1]); // global average pooling
/// let y = gap.forward(&Tensor::ones(&dev, &[2, 8, 7, 7], DType::F32)?)?;
/// assert_eq!(y.shape(), &[2, 8, 1, 1]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct AdaptiveAvgPool2d(pub [usize; 2]);

stateless_module!(AdaptiveAvgPool2d);

impl Forward for AdaptiveAvgPool2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        adaptive_avg_pool2d(x, self.0)
    }
}

/// PyTorch's `nn.Flatten()`: `[N, ...]` to `[N, prod(...)]`.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{self, Forward, Module};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let y = nn::Flatten.forward(&Tensor::zeros(&dev, &[2, 3, 4, 4], DType::F32)?)?;
/// assert_eq!(y.shape(), &[2, 48]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Flatten;

stateless_module!(Flatten);

impl Forward for Flatten {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        // PyTorch's Flatten is `flatten(1, -1)`: dim 1 must exist, so a scalar or 1-D input
        // is its dim-range error.
        x.flatten(1, -1)
    }
}

macro_rules! activation_module {
    ($(#[$doc:meta])* $name:ident, $method:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name;

        stateless_module!($name);

        impl Forward for $name {
            fn forward(&self, x: &Tensor) -> Result<Tensor> {
                x.$method()
            }
        }
    };
}

activation_module!(
    /// PyTorch's `nn.ReLU`.
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::nn::{self, Forward, Module};
    /// use wgtensor::{Device, Tensor};
    /// let dev = Device::new()?;
    /// let x = Tensor::from_slice(&dev, &[-1.0f32, 2.0], &[2])?;
    /// assert_eq!(nn::ReLU.forward(&x)?.to_vec::<f32>()?, vec![0.0, 2.0]);
    /// // nn::GELU, nn::Tanh and nn::Sigmoid work the same way.
    /// # Ok(()) }
    /// ```
    ReLU,
    relu
);
activation_module!(
    /// PyTorch's `nn.GELU` (exact, erf form).
    GELU,
    gelu
);
/// PyTorch's `nn.GELU(approximate='tanh')`: GELU's tanh approximation (GPT-2's). Its errors
/// name it `GELU`, PyTorch's class.
#[derive(Debug, Clone, Copy)]
pub struct GELUTanh;

/// Nothing: no parameters, buffers, flags or children.
impl Module for GELUTanh {
    fn visit(&self, _: &mut dyn Visitor) {}
    fn visit_mut(&mut self, _: &mut dyn VisitorMut) {}
    fn layer_name(&self) -> &'static str {
        "GELU"
    }
}

impl Forward for GELUTanh {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.gelu_tanh()
    }
}
activation_module!(
    /// PyTorch's `nn.Tanh`.
    Tanh,
    tanh
);
activation_module!(
    /// PyTorch's `nn.Sigmoid`.
    Sigmoid,
    sigmoid
);
activation_module!(
    /// PyTorch's `nn.SiLU`: `x * sigmoid(x)`.
    SiLU,
    silu
);
