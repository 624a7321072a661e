//! Activation layers over the functional ops (compositions of elementwise ops, or ops that
//! record PyTorch's own backward: hardtanh, hardsigmoid, hardswish, softplus): PyTorch's `nn.Hardtanh`, `nn.ReLU6`, `nn.Hardsigmoid`, `nn.Hardswish`
//! (MobileNet), `nn.LeakyReLU`, `nn.Softplus`, `nn.Softmax` and `nn.LogSoftmax`. The single-op activations (`ReLU`, `GELU`,
//! `SiLU`, ...) are in layers.rs.

use super::{Forward, Module, Visitor, VisitorMut};
use crate::{Error, Result, Tensor};

/// `impl Module` for a layer without parameters, buffers, flags or children.
macro_rules! parameterless {
    ($($name:ident),*) => {$(
        /// No parameters, buffers, flags or children.
        impl Module for $name {
            fn visit(&self, _: &mut dyn Visitor) {}
            fn visit_mut(&mut self, _: &mut dyn VisitorMut) {}
        }
    )*};
}

/// PyTorch's `nn.Hardtanh(min_val, max_val)`: `x` clamped to `[min_val, max_val]`, with
/// PyTorch's gradient ([`hardtanh`](fn@crate::ops::hardtanh)): it passes strictly inside the
/// range and at NaN (where [`Tensor::clamp`]'s is 0), and is 0 at the bounds.
#[derive(Debug, Clone, Copy)]
pub struct Hardtanh {
    /// The lower bound (PyTorch's default -1).
    pub min_val: f64,
    /// The upper bound (PyTorch's default 1).
    pub max_val: f64,
}

impl Default for Hardtanh {
    fn default() -> Self {
        Hardtanh {
            min_val: -1.0,
            max_val: 1.0,
        }
    }
}

/// PyTorch's `nn.ReLU6`: `min(max(x, 0), 6)`, its gradient 0 at 0 and 6 ([`Hardtanh`]).
#[derive(Debug, Clone, Copy)]
pub struct ReLU6;

/// PyTorch's `nn.Hardsigmoid`: `relu6(x + 3) / 6`, its gradient 0 from `|x| = 3` on
/// ([`hardsigmoid`](crate::ops::hardsigmoid)).
#[derive(Debug, Clone, Copy)]
pub struct Hardsigmoid;

/// PyTorch's `nn.Hardswish`: `x * relu6(x + 3) / 6` (MobileNetV3).
#[derive(Debug, Clone, Copy)]
pub struct Hardswish;

/// PyTorch's `nn.LeakyReLU(negative_slope)`: `x` where positive, `negative_slope * x` elsewhere.
#[derive(Debug, Clone, Copy)]
pub struct LeakyReLU {
    /// The slope for negative inputs (PyTorch's default 0.01).
    pub negative_slope: f64,
}

impl Default for LeakyReLU {
    fn default() -> Self {
        LeakyReLU {
            negative_slope: 0.01,
        }
    }
}

/// PyTorch's `nn.Softplus(beta, threshold)`: [`softplus`](crate::ops::softplus()), `log(1 +
/// e^(beta x)) / beta`, and `x` where `beta x > threshold`.
#[derive(Debug, Clone, Copy)]
pub struct Softplus {
    /// The sharpness (PyTorch's default 1).
    pub beta: f64,
    /// Above `beta x` past this, the input itself (PyTorch's default 20).
    pub threshold: f64,
}

impl Default for Softplus {
    fn default() -> Self {
        Softplus {
            beta: 1.0,
            threshold: 20.0,
        }
    }
}

/// PyTorch's `nn.Softmax(dim)`.
#[derive(Debug, Clone, Copy)]
pub struct Softmax {
    /// The dim normalized over (negative counts from the end).
    pub dim: isize,
}

/// PyTorch's `nn.LogSoftmax(dim)`.
#[derive(Debug, Clone, Copy)]
pub struct LogSoftmax {
    /// The dim normalized over (negative counts from the end).
    pub dim: isize,
}

parameterless!(
    Hardtanh,
    ReLU6,
    Hardsigmoid,
    Hardswish,
    LeakyReLU,
    Softplus,
    Softmax,
    LogSoftmax
);

impl Forward for Hardtanh {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        // PyTorch's constructor asserts `not max_val <= min_val`: a NaN bound passes it, and
        // the op then gives NaN everywhere.
        if self.max_val <= self.min_val {
            return Err(Error::arg(
                "Hardtanh",
                format!(
                    "max_val ({}) must be greater than min_val ({})",
                    crate::error::py_float(self.max_val),
                    crate::error::py_float(self.min_val)
                ),
            ));
        }
        crate::ops::hardtanh(x, self.min_val, self.max_val)
    }
}

impl Forward for ReLU6 {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        crate::ops::relu6(x)
    }
}

impl Forward for Hardsigmoid {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        crate::ops::hardsigmoid(x)
    }
}

impl Forward for Hardswish {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        crate::ops::hardswish(x)
    }
}

impl Forward for LeakyReLU {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        crate::ops::leaky_relu::leaky_relu_as("LeakyReLU", x, self.negative_slope)
    }
}

impl Forward for Softplus {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        crate::ops::softplus(x, self.beta, self.threshold)
    }
}

impl Forward for Softmax {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.softmax(self.dim)
    }
}

impl Forward for LogSoftmax {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.log_softmax(self.dim)
    }
}
