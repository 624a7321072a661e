//! The epilogue activations: the [`Activation`] enum, its WGSL (shaders/lib/activation.wgsl,
//! which also holds the elementwise math every family shares: NaN tests, NaN-propagating
//! max/min, the 1-ulp division, pow) with its `ACT_*` codes, and the rule that decides which
//! activation a recorded (autograd) op keeps fused. The derivative of a fused activation is
//! computed by `activation_grad` in src/ops/grad_kernel.rs, beside the other derivative codes
//! of the backward kernels.

use crate::runtime::pipeline::ShaderLib;
use crate::{Result, Tensor};

/// Activation fused into an epilogue (its codes reach the shaders through `ACTIVATION_DEFS`).
///
/// GEMM ([`GemmOptions::activation`](crate::ops::GemmOptions::activation)), the convolutions
/// and batch normalization apply it to the result before it is stored, saving the extra pass
/// (and memory round trip) that a separate [`Tensor::relu`] and the like would cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Activation {
    /// The identity (no activation).
    #[default]
    None,
    /// `max(x, 0)`.
    Relu,
    /// Exact (erf) GELU.
    Gelu,
    /// The logistic sigmoid `1 / (1 + e^-x)`.
    Sigmoid,
    /// Hyperbolic tangent.
    Tanh,
}

/// The epilogue activation codes as the shaders name them (`activate()` in
/// shaders/lib/activation.wgsl switches on these constants, emitted from this table).
pub(crate) const ACTIVATION_DEFS: &[(&str, u32)] = &[
    ("ACT_NONE", Activation::None as u32),
    ("ACT_RELU", Activation::Relu as u32),
    ("ACT_GELU", Activation::Gelu as u32),
    ("ACT_SIGMOID", Activation::Sigmoid as u32),
    ("ACT_TANH", Activation::Tanh as u32),
];

/// The activation functions and the shared elementwise math, listed in the `libs` of the map,
/// binary, compare, reduce, softmax, pool, index and gradient kernels and of every fused
/// epilogue (GEMM, conv, batch norm, rnn); its `ACT_*` codes come with it.
pub(crate) static ACTIVATION: ShaderLib =
    ShaderLib::new(include_str!("../../shaders/lib/activation.wgsl")).defs(ACTIVATION_DEFS);

impl Activation {
    /// Every activation, in code order.
    pub(crate) const ALL: [Activation; 5] = [
        Activation::None,
        Activation::Relu,
        Activation::Gelu,
        Activation::Sigmoid,
        Activation::Tanh,
    ];

    /// Whether the derivative is read from the activation's output (relu, sigmoid, tanh and
    /// the identity), so a recorded op may keep the activation fused in its epilogue and save
    /// the output. GELU's derivative needs its input, which a fused epilogue never stores.
    pub(crate) fn grad_from_output(self) -> bool {
        self != Activation::Gelu
    }

    /// The activation of a recorded (autograd) op split in two: `(fused, after)`, where
    /// `fused` runs in the kernel's epilogue (its derivative read from the output) and
    /// `after` runs unfused on the kernel's result as a separate recorded op
    /// ([`Activation::apply`]). GELU gives `(None, Gelu)`, every other activation `(act,
    /// None)`.
    pub(crate) fn split_unfused(self) -> (Activation, Activation) {
        if self.grad_from_output() {
            (self, Activation::None)
        } else {
            (Activation::None, self)
        }
    }

    /// `act(x)` as a standalone elementwise op (recorded when `x` is tracked); the identity
    /// returns `x` itself.
    pub(crate) fn apply(self, x: &Tensor) -> Result<Tensor> {
        match self {
            Activation::None => Ok(x.clone()),
            Activation::Relu => x.relu(),
            Activation::Gelu => x.gelu(),
            Activation::Sigmoid => x.sigmoid(),
            Activation::Tanh => x.tanh(),
        }
    }
}
