//! Buffer donation (MLX's `is_donatable` + `move_or_copy`): an elementwise op that consumes its
//! input writes the result into the input's buffer when nothing else can observe that buffer,
//! instead of allocating a new one. A chain of owned ops on one large tensor then needs one
//! buffer, not two.
//!
//! A consumed input is donated only when all of these hold:
//! - it is the only handle on its storage (no other tensor, view, clone, saved-for-backward
//!   copy or pending autograd node holds it: `Arc::strong_count == 1`);
//! - it is packed from offset 0 and the output has its shape and element size;
//! - the op is not recorded by autograd (recording may save the input for the backward);
//! - its buffer was never handed to the application (`Tensor::wgpu_buffer`).
//!
//! A readback cannot be pending on it: `to_vec` borrows the tensor until the copy is recorded,
//! and commands run in recording order, so earlier readers of the buffer (a pending copy or
//! dispatch) see the old values. wgpu rejects one buffer bound both read-only and read_write in
//! a dispatch (and WebGPU two read_write bindings of it), so the in-place kernels bind the
//! donated buffer once, read_write (`main_inplace*` in shaders/map.wgsl and binary.wgsl,
//! shaders/cast_inplace.wgsl).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::autograd::records;
use crate::layout::broadcast_shapes;
use crate::ops::binary::Donated;
use crate::ops::{BinaryOp, ScalarOp, UnaryOp};
use crate::{DType, Result, Tensor};

impl Tensor {
    /// Whether this handle's buffer may become an output buffer (see the module doc); the
    /// caller checks shapes, element sizes and autograd.
    pub(crate) fn donatable(&self) -> bool {
        Arc::strong_count(&self.storage) == 1
            && self.layout.is_contiguous()
            && self.layout.offset() == 0
            && !self.storage.exported.load(Ordering::Relaxed)
    }

    /// This tensor's buffer relabelled as `dtype` (after an in-place kernel wrote it).
    fn donated(self, dtype: DType) -> Tensor {
        self.device().note_donation();
        self.bump_version();
        Tensor {
            storage: self.storage,
            layout: self.layout,
            dtype,
            grad: None,
            no_grad_view: None,
        }
    }

    /// [`Tensor::unary`], consuming `self`: the result reuses its buffer when it is donatable
    /// (uniquely held, packed, not recorded by autograd), else this is `self.unary(op)`.
    /// Results are identical either way.
    ///
    /// ```no_run,ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::ops::UnaryOp;
    /// use wgtensor::{DType, Device, Tensor};
    /// let dev = Device::new()?;
    /// let x = Tensor::full(&dev, &[1 << 20], 2.0, DType::F32)?;
    /// let y = x.into_unary(UnaryOp::Sqrt)?.into_unary(UnaryOp::Neg)?; // one buffer
    /// assert_eq!(dev.stats().donations, 2);
    /// assert!((y.to_vec::<f32>()?[0] + 2f32.sqrt()).abs() < 1e-6);
    /// # Ok(()) }
    /// ```
    pub fn into_unary(self, op: UnaryOp) -> Result<Tensor> {
        if records([&self]) || !self.donatable() {
            return self.unary(op);
        }
        self.unary_in_place(op)?;
        let dt = self.dtype;
        Ok(self.donated(dt))
    }

    /// [`Tensor::scalar_op`], consuming `self` (donating its buffer as [`Tensor::into_unary`]).
    /// The owned operators (`x * 2.0`, `-x`, ...) call this.
    pub fn into_scalar_op(self, op: ScalarOp, s: f64) -> Result<Tensor> {
        self.check_bound(op, s)?;
        if records([&self]) || !self.donatable() {
            return self.scalar_op(op, s);
        }
        let s = super::map::kernel_scalar(op, self.dtype, s)?;
        self.scalar_in_place(op, s)?;
        let dt = self.dtype;
        Ok(self.donated(dt))
    }

    /// [`Tensor::to_dtype`], consuming `self`: a cast between the 4-byte dtypes (f32 and i32)
    /// reuses the buffer when it is donatable; other casts change the element size and
    /// allocate.
    pub fn into_dtype(self, dtype: DType) -> Result<Tensor> {
        let same_size = self.dtype.size() == 4 && dtype.size() == 4;
        if dtype == self.dtype || !same_size || records([&self]) || !self.donatable() {
            return self.to_dtype(dtype);
        }
        self.device().require_dtype("to_dtype", dtype)?;
        self.cast_in_place(dtype)?;
        Ok(self.donated(dtype))
    }

    /// [`Tensor::binary`], consuming `self` (donating its buffer as [`Tensor::into_unary`]
    /// when it already has the broadcast output's shape). The owned operators
    /// (`a + &b`, `a * b`, ...) call this.
    ///
    /// ```no_run,ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{DType, Device, Tensor};
    /// let dev = Device::new()?;
    /// let bias = Tensor::full(&dev, &[64], 0.5, DType::F32)?;
    /// let mut acc = Tensor::zeros(&dev, &[128, 64], DType::F32)?;
    /// for _ in 0..10 {
    ///     acc = (acc + &bias)?; // accumulates in place
    /// }
    /// assert_eq!(acc.to_vec::<f32>()?[0], 5.0);
    /// assert_eq!(dev.stats().donations, 10);
    /// # Ok(()) }
    /// ```
    pub fn into_binary(self, other: &Tensor, op: BinaryOp) -> Result<Tensor> {
        binary_owned(self, other, Donated::A, op)
    }
}

/// `a op b` where `own` is `a` (or `b`, per `side`) and consumed: in place when it is
/// donatable and has the broadcast output's shape, else the ordinary op.
pub(crate) fn binary_owned(
    own: Tensor,
    other: &Tensor,
    side: Donated,
    op: BinaryOp,
) -> Result<Tensor> {
    let (a, b) = match side {
        Donated::A => (&own, other),
        Donated::B => (other, &own),
    };
    let recorded = records([a, b]);
    // Only floats donate: an i32 operand (even an empty one) takes the checked path's error.
    let fits = !recorded
        && own.dtype.is_float()
        && own.donatable()
        && a.dtype == b.dtype
        && a.device().same(b.device())
        && broadcast_shapes(op.name(), a.shape(), b.shape())
            .is_ok_and(|s| s.as_slice() == own.shape());
    if !fits {
        return a.binary(b, op);
    }
    a.binary_in_place(b, op, side)?;
    let dt = own.dtype;
    Ok(own.donated(dt))
}

/// `a op b` with both consumed: `a`'s buffer if it can be donated, else `b`'s.
pub(crate) fn binary_pair(a: Tensor, b: Tensor, op: BinaryOp) -> Result<Tensor> {
    if a.donatable() && a.numel() >= b.numel() {
        binary_owned(a, &b, Donated::A, op)
    } else {
        binary_owned(b, &a, Donated::B, op)
    }
}
