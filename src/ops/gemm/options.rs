//! [`GemmOptions`] and [`Bias`]: what a caller asks of a GEMM (shared by the entry points in
//! gemm/mod.rs, the launch in gemm/launch.rs, the windowed launch and the backward).

use crate::ops::activation::Activation;
use crate::Tensor;

/// A bias added in the epilogue: one value per output column (`[N]`) or per row (`[M]`).
/// The same bias is added to every batch entry; its dtype and device must match the operands.
#[derive(Debug, Clone, Copy)]
pub enum Bias<'a> {
    /// `[N]`, added to every row: `nn.Linear`'s bias.
    PerColumn(&'a Tensor),
    /// `[M]`, added to every column.
    PerRow(&'a Tensor),
}

/// Options of [`gemm`](fn@super::gemm). `Default` is a plain product: alpha 1, beta 1 (used
/// only with `c`), no bias, no activation, split-k chosen automatically.
#[derive(Debug, Clone, Copy)]
pub struct GemmOptions<'a> {
    /// Scale of the product `a @ b` (PyTorch's `addmm` `alpha`).
    pub alpha: f64,
    /// Scale of `c` (PyTorch's `addmm` `beta`). With 0, `c` is not read at all, so NaN or inf
    /// in it do not propagate (as in PyTorch).
    pub beta: f64,
    /// Added as `beta * C`; broadcastable to the output shape.
    pub c: Option<&'a Tensor>,
    /// A vector added after `alpha * a @ b + beta * c`, before the activation.
    pub bias: Option<Bias<'a>>,
    /// Applied last, to the whole sum.
    pub activation: Activation,
    /// Force the number of K slices (1 disables split-k). `None`: chosen from the problem and
    /// the adapter (`Caps::parallelism`: host threads on CPU adapters), so results are
    /// bitwise the same on every run of one adapter but may differ in the last bits between
    /// adapters, hosts, or batched and unbatched calls; a fixed count makes them the same
    /// wherever the kernels are the same.
    pub split_k: Option<u32>,
}

impl Default for GemmOptions<'_> {
    fn default() -> Self {
        GemmOptions {
            alpha: 1.0,
            beta: 1.0,
            c: None,
            bias: None,
            activation: Activation::None,
            split_k: None,
        }
    }
}

impl GemmOptions<'_> {
    /// Whether the product reads `c`: given, with a beta that is not 0 in f32, the kernels'
    /// type (a beta that rounds to 0 must not read C, as BLAS with beta 0: 0 * NaN).
    pub(crate) fn reads_c(&self) -> bool {
        self.c.is_some() && self.beta as f32 != 0.0
    }
}
