//! Batched GEMM (shaders/gemm_wg.wgsl on GPUs; shaders/gemm_sg8.wgsl and shaders/gemm.wgsl on
//! CPU adapters; shaders/lib/gemm_common.wgsl shared).
//!
//! `out[b] = act(alpha * A[b] B[b] + beta * C[b] + bias)` with numpy batch broadcasting; every
//! operand is read through its strides, so transposes and broadcast batches cost no copy.
//! Large-K problems use a deterministic split-k: S partial GEMMs write an f32 workspace
//! `[S, batch, M, N]` and a reduction sums the slices in a fixed order.
pub(crate) mod grad;
pub(crate) mod launch;
mod named;
pub(crate) mod options;
pub(crate) mod plan;
#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod probe;
pub(crate) mod run;
mod shape;
mod window;

use crate::{Error, Result, Tensor};
#[doc(hidden)]
pub use launch::{gemm_variants, params_layout};
pub use options::{Bias, GemmOptions};
pub(crate) use plan::has_sg8;
#[doc(hidden)]
pub use plan::{plan, plan_for, plan_for_dtype, GemmKernel, GemmPlan};
#[cfg(not(target_arch = "wasm32"))]
#[doc(hidden)]
pub use probe::{fail_next_coop_probe, stall_next_coop_probe};
use run::{run, run_kernel};
use shape::Route;

/// The epilogue activation, defined in [`ops::activation`](crate::ops::activation) and
/// re-exported here where it has always been reachable.
pub use crate::ops::activation::Activation;

/// `act(alpha * a @ b + beta * c + bias)` for `a [..., M, K]`, `b [..., K, N]` with broadcast
/// batch dims (`[4,1,m,k] x [1,3,k,n] -> [4,3,m,n]`).
///
/// PyTorch's `torch.addmm` / `torch.baddbmm` generalised, with a fused bias and activation:
/// `act(x @ w.T + b)` is one call, the `nn.Linear` forward. Operands are read through their
/// strides (transposed or broadcast views cost no copy); the output is a new contiguous tensor
/// of the operands' dtype, accumulated in f32. Long K is split into slices summed in a fixed
/// order ([`GemmOptions::split_k`]), so repeated runs give bitwise identical results.
///
/// Errors: [`Error::Shape`] for ranks below 2, inner dims that differ, batch dims or `c` that
/// do not broadcast, a bias of the wrong length; [`Error::InvalidArgument`] when `a` and `b`
/// differ in dtype (ATen's "expected m1 and m2 to have the same dtype" words), for i32
/// operands (the kernels are float-only, as CUDA's addmm), and for an alpha (or, with a `c`,
/// a beta) past f32's range where applied (addmm converts them checked; alpha only when
/// K > 0, neither for an empty output);
/// [`Error::DType`] when `c` or the bias differs from them; [`Error::DeviceMismatch`] across
/// devices; [`Error::InvalidArgument`] for `split_k: Some(0)`; [`Error::Size`]
/// for K beyond the supported length.
///
/// ```no_run,ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::ops::{gemm, Activation, Bias, GemmOptions};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let x = Tensor::full(&dev, &[32, 128], 0.5, DType::F32)?; // [batch, in]
/// let w = Tensor::full(&dev, &[64, 128], 0.01, DType::F32)?; // [out, in] (nn.Linear.weight)
/// let b = Tensor::zeros(&dev, &[64], DType::F32)?;
/// // relu(x @ w.T + b), one dispatch
/// let opts = GemmOptions {
///     bias: Some(Bias::PerColumn(&b)),
///     activation: Activation::Relu,
///     ..Default::default()
/// };
/// let y = gemm(&x, &w.transpose(0, 1)?, &opts)?;
/// assert_eq!(y.shape(), &[32, 64]);
/// # Ok(()) }
/// ```
pub fn gemm(a: &Tensor, b: &Tensor, options: &GemmOptions) -> Result<Tensor> {
    grad::recorded(a, b, options, |o| run("gemm", a, b, o, None))
}

#[doc(hidden)]
/// [`gemm`] on a chosen kernel instead of the planner's (untracked by autograd), so a
/// benchmark can time one tile against another on the same adapter. Errors as [`gemm`], and
/// [`Error::InvalidArgument`] where the adapter cannot run `kernel`.
pub fn gemm_with_kernel(
    a: &Tensor,
    b: &Tensor,
    options: &GemmOptions,
    kernel: GemmKernel,
) -> Result<Tensor> {
    run_kernel("gemm", a, b, options, None, Some(kernel))
}

/// In place: `c = alpha * a @ b + beta * c` (c contiguous with the output shape, not sharing
/// storage with a or b).
///
/// PyTorch's `c.addmm_(a, b, beta=beta, alpha=alpha)`: for accumulating into an existing
/// buffer (gradient accumulation, sums over K chunks) without allocating. Every handle and
/// view sharing `c`'s storage sees the result. Errors as [`gemm`], plus [`Error::Shape`] when
/// `c` is not a contiguous tensor of the output shape and [`Error::InvalidArgument`] when it
/// shares storage with `a` or `b`.
pub fn gemm_into(c: &Tensor, a: &Tensor, b: &Tensor, alpha: f64, beta: f64) -> Result<()> {
    let o = GemmOptions {
        alpha,
        beta,
        ..Default::default()
    };
    grad::check_in_place("gemm_into", &[c, a, b])?;
    // addmm_'s meta compares C's dtype with B's first, before the product's shapes.
    if c.dtype() != b.dtype() {
        return Err(Error::DType {
            op: "gemm_into",
            expected: b.dtype(),
            got: c.dtype(),
        });
    }
    run("gemm_into", a, b, &o, Some(c))?;
    c.bump_version();
    Ok(())
}

/// numpy / PyTorch `matmul`: 1-D operands are promoted (and the added dim removed again),
/// batch dims broadcast.
///
/// [`gemm`] with default options behind PyTorch's `@`: `[K] @ [K]` is a 0-d dot product,
/// `[M, K] @ [K]` a matrix-vector product `[M]`, `[B, M, K] @ [K, N]` a batched product
/// `[B, M, N]`. Errors as [`gemm`], and [`Error::Shape`] for a 0-d operand.
///
/// ```no_run,ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::ops::matmul;
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let a = Tensor::full(&dev, &[8, 16, 32], 1.0, DType::F32)?;
/// let b = Tensor::full(&dev, &[32, 4], 2.0, DType::F32)?;
/// assert_eq!(matmul(&a, &b)?.shape(), &[8, 16, 4]); // b broadcasts over the batch
/// let v = Tensor::full(&dev, &[32], 1.0, DType::F32)?;
/// assert_eq!(a.matmul(&v)?.shape(), &[8, 16]); // matrix-vector
/// # Ok(()) }
/// ```
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let op = "matmul";
    if a.rank() == 0 || b.rank() == 0 {
        return Err(Error::shape(
            op,
            format!(
                "both arguments to matmul need to be at least 1D, but they are {}D and {}D \
                 (shapes {:?} and {:?})",
                a.rank(),
                b.rank(),
                a.shape(),
                b.shape()
            ),
        ));
    }
    // _matmul_impl's 0-D check first. Two vectors are dot's (its dtype words); everything else
    // goes through mm / mv / bmm, whose shape checks come before the dtype's (_matmul_impl
    // has none of its own). i32 is refused with the dtypes (gemm's kernels are float-only).
    if a.rank() == 1 && b.rank() == 1 && a.dtype() != b.dtype() {
        return Err(shape::dtype_mismatch(op, Route::Dot, a.dtype(), b.dtype()));
    }
    // The contracted sizes, named with the caller's shapes (not the promoted ones).
    let (ka, kb) = (
        a.shape()[a.rank() - 1],
        b.shape()[b.rank().saturating_sub(2)],
    );
    // The batch first, as PyTorch's matmul (infer_size before bmm's checks), then K, then
    // the dtypes.
    shape::batch_shape(op, a.shape(), b.shape())?;
    if ka != kb {
        return Err(shape::k_mismatch(op, a.shape(), b.shape()));
    }
    // The dtype words of the op PyTorch's matmul routes the pair to: mv for a vector on the
    // right, bmm where the right operand has a batch, mm otherwise (a batched left operand
    // folds into mm's rows).
    if a.dtype() != b.dtype() {
        let (ad, bd) = (a.dtype(), b.dtype());
        match b.rank() {
            1 => return Err(shape::dtype_mismatch(op, Route::Mv, ad, bd)),
            r if r >= 3 => return Err(shape::dtype_mismatch(op, Route::Bmm, ad, bd)),
            _ => a.same_dtype_factors(op, b)?,
        }
    }
    a.require_float(op)?;
    // Views, not reshapes: a strided or broadcast 1-D operand must not be copied.
    let a2 = if a.rank() == 1 {
        a.unsqueeze(0)?
    } else {
        a.clone()
    };
    let b2 = if b.rank() == 1 {
        b.unsqueeze(1)?
    } else {
        b.clone()
    };
    let out = grad::recorded(&a2, &b2, &GemmOptions::default(), |o| {
        run(op, &a2, &b2, o, None)
    })?;
    let mut shape = out.shape().to_vec();
    let r = shape.len();
    match (a.rank() == 1, b.rank() == 1) {
        (true, true) => shape.truncate(r - 2),
        (true, false) => {
            shape.remove(r - 2);
        }
        (false, true) => {
            shape.pop();
        }
        (false, false) => return Ok(out),
    }
    out.reshape(&shape)
}

impl Tensor {
    /// `self @ other`, PyTorch's `Tensor.matmul`: see [`matmul`].
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        matmul(self, other)
    }
}
