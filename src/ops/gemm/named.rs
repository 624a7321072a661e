//! PyTorch's fixed-rank products, `mm`, `bmm`, `mv`, `dot` and `outer`: each checks its
//! operands' ranks and sizes in its own words, then runs as [`matmul`](super::matmul) (or a
//! broadcast product for `outer`), differentiable as it is.

use super::shape::{dtype_mismatch, Route};
use crate::{Error, Result, Tensor};

/// A rank refusal of `op`.
fn rank_error(op: &'static str, msg: String) -> Error {
    Error::shape(op, msg)
}

impl Tensor {
    /// PyTorch's `torch.mm(self, mat2)`: `[M, K] @ [K, N]`, both 2-D (no broadcasting).
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{DType, Device, Tensor};
    /// let dev = Device::new()?;
    /// let a = Tensor::ones(&dev, &[2, 3], DType::F32)?;
    /// let b = Tensor::ones(&dev, &[3, 4], DType::F32)?;
    /// assert_eq!(a.mm(&b)?.to_vec::<f32>()?, vec![3.0; 8]);
    /// # Ok(()) }
    /// ```
    pub fn mm(&self, mat2: &Tensor) -> Result<Tensor> {
        let op = "mm";
        for (what, t) in [("self", self), ("mat2", mat2)] {
            if t.rank() != 2 {
                let msg = format!("{what} must be a matrix, got {}-D tensor", t.rank());
                return Err(rank_error(op, msg));
            }
        }
        let ([m, k], [k2, n]) = (dims2(self), dims2(mat2));
        if k != k2 {
            return Err(Error::shape(
                op,
                format!("mat1 and mat2 shapes cannot be multiplied ({m}x{k} and {k2}x{n})"),
            ));
        }
        self.same_dtype_factors(op, mat2)?;
        self.require_float(op)?;
        self.matmul(mat2)
    }

    /// PyTorch's `torch.bmm(self, batch2)`: `[B, M, K] @ [B, K, N]`, both 3-D with the same
    /// batch (no broadcasting).
    pub fn bmm(&self, batch2: &Tensor) -> Result<Tensor> {
        let op = "bmm";
        for (what, t) in [("batch1", self), ("batch2", batch2)] {
            if t.rank() != 3 {
                return Err(rank_error(op, format!("{what} must be a 3D tensor")));
            }
        }
        let (a, b) = (self.shape(), batch2.shape());
        if b[..2] != [a[0], a[2]] {
            return Err(Error::shape(
                op,
                format!(
                    "Expected size for first two dimensions of batch2 tensor to be: [{}, {}] \
                     but got: [{}, {}].",
                    a[0], a[2], b[0], b[1]
                ),
            ));
        }
        if self.dtype() != batch2.dtype() {
            return Err(dtype_mismatch(op, Route::Bmm, self.dtype(), batch2.dtype()));
        }
        self.require_float(op)?;
        self.matmul(batch2)
    }

    /// PyTorch's `torch.mv(self, vec)`: `[M, K] @ [K]`, a 2-D matrix and a 1-D vector.
    pub fn mv(&self, vec: &Tensor) -> Result<Tensor> {
        let op = "mv";
        if self.rank() != 2 || vec.rank() != 1 {
            return Err(rank_error(
                op,
                format!(
                    "vector + matrix @ vector expected, got 1, {}, {}",
                    self.rank(),
                    vec.rank()
                ),
            ));
        }
        let [m, k] = dims2(self);
        if vec.shape()[0] != k {
            return Err(Error::shape(
                op,
                format!(
                    "size mismatch, got input ({m}), mat ({m}x{k}), vec ({})",
                    vec.shape()[0]
                ),
            ));
        }
        if self.dtype() != vec.dtype() {
            return Err(dtype_mismatch(op, Route::Mv, self.dtype(), vec.dtype()));
        }
        self.require_float(op)?;
        self.matmul(vec)
    }

    /// PyTorch's `torch.dot(self, other)`: the 0-d sum of products of two 1-D tensors of one
    /// length (0 for empty ones).
    pub fn dot(&self, other: &Tensor) -> Result<Tensor> {
        let op = "dot";
        if self.rank() != 1 || other.rank() != 1 {
            return Err(rank_error(
                op,
                format!(
                    "1D tensors expected, but got {}D and {}D tensors",
                    self.rank(),
                    other.rank()
                ),
            ));
        }
        if self.dtype() != other.dtype() {
            // dot's dtype check comes before its size check.
            return Err(dtype_mismatch(op, Route::Dot, self.dtype(), other.dtype()));
        }
        let (n, m) = (self.shape()[0], other.shape()[0]);
        if n != m {
            return Err(Error::shape(
                op,
                format!(
                    "inconsistent tensor size, expected tensor [{n}] and src [{m}] to have the \
                     same number of elements, but got {n} and {m} elements respectively"
                ),
            ));
        }
        self.matmul(other).map_err(|e| match e {
            // matmul names itself for two vectors' dtypes: they are dot's words.
            Error::InvalidArgument { msg, .. } => Error::arg(op, msg),
            e => e,
        })
    }

    /// PyTorch's `torch.outer(self, vec2)`: `[N] x [M] -> [N, M]`, `self[i] * vec2[j]`, the
    /// dtypes promoted as a product's.
    pub fn outer(&self, vec2: &Tensor) -> Result<Tensor> {
        let op = "outer";
        for (what, t) in [("self", self), ("vec2", vec2)] {
            if t.rank() != 1 {
                // PyTorch's message starts with the op's name, as the error's display does.
                let msg = format!("Expected 1-D argument {what}, but got {}-D", t.rank());
                return Err(rank_error(op, msg));
            }
        }
        self.unsqueeze(1)?.mul(vec2)
    }
}

/// A 2-D tensor's sizes.
fn dims2(t: &Tensor) -> [usize; 2] {
    [t.shape()[0], t.shape()[1]]
}
