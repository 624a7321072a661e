//! `Tensor`: pooled GPU storage plus a layout (shape, element strides, offset) and a dtype.
//! Views share storage; ops read strided inputs directly and write contiguous outputs.

use std::sync::Arc;

pub(crate) use crate::error::check_fill;
use crate::layout::{checked_numel, Layout};
use crate::ops::view_grad::{self, ViewKind};
use crate::runtime::window::Span;
use crate::runtime::{Device, Storage};
use crate::{DType, Element, Error, Result};

/// An n-dimensional array on a GPU [`Device`], like a PyTorch `torch.Tensor` on a CUDA device.
///
/// A tensor is a handle: pooled GPU storage plus a [`Layout`] (shape, element strides, offset)
/// and a [`DType`]. `Clone` is cheap and shares the storage. View ops ([`reshape`] of
/// contiguous data, [`permute`], [`transpose`], [`narrow`], [`unsqueeze`],
/// [`broadcast_to`]) return new handles on the same storage without a copy; ops read strided
/// views directly and always write a fresh contiguous output, so tensors are never modified in
/// place (the exceptions say so: [`Tensor::copy_from`], [`gemm_into`](crate::ops::gemm_into),
/// the running statistics of [`batch_norm_train`](crate::ops::batch_norm_train), optimizer
/// steps and state-dict loading; each bumps the storage's version).
///
/// Ops are recorded, not run: they return at once and the GPU runs them in batches. Reading
/// back ([`to_vec`], [`to_vec_async`]) or [`Device::sync`] waits for the work. The storage
/// returns to the device's pool when the last handle (and the last pending command using it)
/// is gone.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let x = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
/// assert_eq!((x.shape(), x.dtype()), (&[2, 3][..], DType::F32));
/// let xt = x.transpose(0, 1)?; // [3, 2], a view: no copy, not contiguous
/// assert!(xt.shares_storage(&x) && !xt.is_contiguous());
/// assert_eq!(xt.to_vec::<f32>()?, vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
/// # Ok(()) }
/// ```
///
/// [`reshape`]: Tensor::reshape
/// [`permute`]: Tensor::permute
/// [`transpose`]: Tensor::transpose
/// [`narrow`]: Tensor::narrow
/// [`unsqueeze`]: Tensor::unsqueeze
/// [`broadcast_to`]: Tensor::broadcast_to
/// [`to_vec`]: Tensor::to_vec
/// [`to_vec_async`]: Tensor::to_vec_async
#[derive(Clone)]
pub struct Tensor {
    pub(crate) storage: Arc<Storage>,
    pub(crate) layout: Layout,
    pub(crate) dtype: DType,
    /// Autograd: `None` for tensors no gradient flows through, a flagged meta for a frozen
    /// leaf (see `crate::autograd`).
    pub(crate) grad: Option<Arc<crate::autograd::GradMeta>>,
    /// For a view made while grad mode was off of a tracked tensor (or a view of one): the meta
    /// of the root of its chain of views. While that is still tracked, PyTorch forbids writing
    /// the view in place with grad mode on (its `NO_GRAD_MODE` creation meta), since whether
    /// the write should be recorded is ambiguous.
    pub(crate) no_grad_view: Option<Arc<crate::autograd::GradMeta>>,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tensor")
            .field("shape", &self.shape())
            .field("strides", &self.strides())
            .field("offset", &self.layout.offset())
            .field("dtype", &self.dtype)
            .finish()
    }
}

/// An integer index that may count from the end when negative, as PyTorch's: `narrow`'s
/// `start` accepts any of Rust's integer types (a literal infers as `i32`).
pub trait SignedIndex: Copy {
    /// The value, widened losslessly.
    fn to_i128(self) -> i128;
}

macro_rules! signed_index {
    ($($t:ty),*) => {$(
        impl SignedIndex for $t {
            fn to_i128(self) -> i128 {
                self as i128
            }
        }
    )*};
}
signed_index!(i32, i64, isize, u32, u64, usize);

/// Validates a shape for a new tensor: rank, u32-indexable, fits one binding. Zero-size dims
/// are allowed (an empty tensor, as in PyTorch): its storage is a minimal buffer no kernel
/// reads.
pub(crate) fn check_new_shape(
    device: &Device,
    op: &'static str,
    shape: &[usize],
    dtype: DType,
) -> Result<usize> {
    let n = checked_numel(op, shape)?;
    device.require_dtype(op, dtype)?;
    let bytes = (n as u64)
        .checked_mul(dtype.size() as u64)
        .ok_or_else(|| Error::size(op, format!("shape {shape:?} overflows the byte count")))?;
    device.check_bytes(op, bytes)?;
    Ok(n)
}

impl Tensor {
    /// A fresh contiguous tensor with unspecified contents (every op overwrites all of it).
    pub(crate) fn empty(
        device: &Device,
        op: &'static str,
        shape: &[usize],
        dtype: DType,
    ) -> Result<Tensor> {
        let n = check_new_shape(device, op, shape, dtype)?;
        let storage = Storage::new(device, op, (n * dtype.size()) as u64)?;
        Ok(Tensor {
            storage: Arc::new(storage),
            layout: Layout::contiguous(shape),
            dtype,
            grad: None,
            no_grad_view: None,
        })
    }

    /// Uploads `data` (row-major) as a new contiguous tensor of `shape`, with the dtype of `T`
    /// (`f32`, [`f16`](crate::f16) or `i32`); PyTorch's `torch.tensor(data).reshape(shape)`. An empty
    /// `shape` (`&[]`) is a scalar holding one value.
    ///
    /// The upload is queued and lands before any op recorded later runs. Errors:
    /// [`Error::Shape`] when `data.len()` is not the element count of `shape`,
    /// [`Error::MissingFeature`] for f16 on a device without SHADER_F16, [`Error::Size`] /
    /// [`Error::TooLarge`] for shapes past the rank limit ([`MAX_RANK`](crate::layout::MAX_RANK))
    /// or the adapter's buffer limits.
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{f16, Device, Tensor};
    /// let dev = Device::new()?;
    /// let a = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
    /// let s = Tensor::from_slice(&dev, &[0.5f32], &[])?; // a 0-d scalar
    /// if dev.supports_f16() {
    ///     let h = Tensor::from_slice(&dev, &[f16::from_f32(1.5)], &[1])?;
    /// }
    /// assert!(Tensor::from_slice(&dev, &[1.0f32; 3], &[2, 2]).is_err()); // 3 values, 4 slots
    /// # Ok(()) }
    /// ```
    pub fn from_slice<T: Element>(device: &Device, data: &[T], shape: &[usize]) -> Result<Tensor> {
        let op = "from_slice";
        // The dtype first (torch.tensor(data) is made before its reshape), then the count in
        // reshape's words, then the shape's own limits.
        device.require_dtype(op, T::DTYPE)?;
        let count = shape.iter().fold(1usize, |a, &d| a.saturating_mul(d));
        if data.len() != count {
            return Err(Error::shape(
                op,
                format!(
                    "shape '{shape:?}' is invalid for input of size {} ({} values for shape \
                     {shape:?})",
                    data.len(),
                    data.len()
                ),
            ));
        }
        check_new_shape(device, op, shape, T::DTYPE)?;
        let t = Tensor::empty(device, op, shape, T::DTYPE)?;
        device.write_buffer(op, t.buffer(), 0, bytemuck::cast_slice(data))?;
        Ok(t)
    }

    /// A new contiguous tensor of `shape` filled with zeros (PyTorch's `torch.zeros`), cleared
    /// on the GPU with no upload. Errors as [`Tensor::from_slice`] does for the shape and dtype.
    pub fn zeros(device: &Device, shape: &[usize], dtype: DType) -> Result<Tensor> {
        let t = Tensor::empty(device, "zeros", shape, dtype)?;
        let bytes = (t.numel() * dtype.size()).div_ceil(4) as u64 * 4;
        if bytes > 0 {
            device.record_clear("zeros", t.buffer(), bytes)?;
        }
        Ok(t)
    }

    /// A new contiguous tensor of `shape` filled with `value`, rounded to `dtype` (PyTorch's
    /// `torch.full`; for [`DType::I32`] truncated toward zero, as PyTorch's cast). Errors as
    /// [`Tensor::from_slice`] does for the shape and dtype, and with
    /// [`Error::InvalidArgument`] for a value the dtype cannot hold, as PyTorch's checked
    /// conversion ("value cannot be converted to type ... without overflow"): a finite value
    /// past the largest f16 (65504) or f32, or for [`DType::I32`] NaN or a value below -2^31 or
    /// at or past 2^31. Infinities and NaN fill float tensors.
    pub fn full(device: &Device, shape: &[usize], value: f64, dtype: DType) -> Result<Tensor> {
        check_new_shape(device, "full", shape, dtype)?;
        check_fill("full", value, dtype)?;
        let t = Tensor::scalar_of(device, value, dtype)?
            .broadcast_to(shape)?
            .contiguous_at_zero()?;
        if t.numel() <= 1 {
            // The broadcast view already counts as contiguous (sizes 1 and 0 ignore strides):
            // give it a packed layout's strides over its one-element buffer, as PyTorch's.
            return Ok(t.view(Layout::contiguous(shape)));
        }
        Ok(t)
    }

    /// A 0-d tensor of `value` rounded to `dtype` (float overflow to +-inf, i32 truncated and
    /// saturating), unchecked: an op's operand (a comparison's bound), not a user's fill value.
    pub(crate) fn scalar_of(device: &Device, value: f64, dtype: DType) -> Result<Tensor> {
        match dtype {
            DType::F32 => Tensor::from_slice(device, &[value as f32], &[]),
            DType::F16 => Tensor::from_slice(device, &[crate::dtype::f16_of(value)], &[]),
            DType::I32 => Tensor::from_slice(device, &[value as i32], &[]),
        }
    }

    /// The device whose memory holds the tensor; ops combine only tensors of the same device
    /// (else [`Error::DeviceMismatch`]).
    pub fn device(&self) -> &Device {
        &self.storage.device
    }
    /// The element type (PyTorch's `tensor.dtype`).
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// The size of each dimension (PyTorch's `tensor.shape`); `[]` for a 0-d scalar.
    pub fn shape(&self) -> &[usize] {
        self.layout.shape()
    }
    /// The step between neighbours of each dimension, in elements (PyTorch's
    /// `tensor.stride()`); 0 along broadcast dimensions.
    pub fn strides(&self) -> &[usize] {
        self.layout.strides()
    }
    /// Shape, strides and element offset into the storage together.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
    /// The number of dimensions (PyTorch's `tensor.dim()`).
    pub fn rank(&self) -> usize {
        self.layout.rank()
    }
    /// The number of elements, the product of the shape (PyTorch's `tensor.numel()`).
    pub fn numel(&self) -> usize {
        self.layout.numel()
    }
    /// True when the elements are packed in row-major order (PyTorch's
    /// `tensor.is_contiguous()`); the offset may be non-zero.
    pub fn is_contiguous(&self) -> bool {
        self.layout.is_contiguous()
    }
    pub(crate) fn buffer(&self) -> &wgpu::Buffer {
        self.storage.buffer()
    }

    /// The wgpu buffer holding this tensor and the byte range of its elements, for the
    /// application's own passes on [`Device::wgpu_device`] (interop). The tensor must be
    /// contiguous and its range 4-byte aligned (a view at an unaligned offset can be copied to
    /// offset 0 with [`Tensor::deep_clone`]; an odd number of f16 values must be padded); the
    /// buffer
    /// may be larger than the range (pooled size classes). A binding at a non-zero offset must
    /// also respect the adapter's `min_storage_buffer_offset_alignment`; otherwise bind the whole
    /// buffer and index from `offset / element size`.
    ///
    /// When it is safe: ops on the tensor may still be pending (recorded, not yet run), so
    /// submit the work that uses the buffer with [`Device::submit`], which runs it after
    /// everything wgtensor recorded before. Writing the buffer changes every view sharing the
    /// storage (see [`Tensor::shares_storage`]); keep the tensor alive while the app's work
    /// may use the buffer, since a dropped tensor's buffer is reused by later ops.
    pub fn wgpu_buffer(&self) -> Result<(&wgpu::Buffer, u64, u64)> {
        let op = "wgpu_buffer";
        let size = self.dtype.size() as u64;
        let offset = self.layout.offset() as u64 * size;
        let bytes = self.numel() as u64 * size;
        if !self.is_contiguous() {
            return Err(Error::arg(
                op,
                format!(
                    "the tensor (shape {:?}, strides {:?}) is not contiguous; call contiguous() first",
                    self.shape(),
                    self.strides()
                ),
            ));
        }
        if !offset.is_multiple_of(4) {
            return Err(Error::arg(
                op,
                format!(
                    "the view starts at byte {offset}, not a multiple of 4; call deep_clone() \
                     first (a packed copy at offset 0)"
                ),
            ));
        }
        if !bytes.is_multiple_of(4) {
            // wgpu's copies and storage bindings take whole words.
            return Err(Error::arg(
                op,
                format!(
                    "the tensor's {bytes} bytes are not a multiple of 4 (an odd number of f16 \
                     elements); pad it to an even count first"
                ),
            ));
        }
        // Exported: its buffer is never donated to an op's output from now on.
        self.storage
            .exported
            .store(true, std::sync::atomic::Ordering::Relaxed);
        Ok((self.buffer(), offset, bytes))
    }

    /// How many in-place writes the tensor's storage has seen (PyTorch's `_version`): optimizer
    /// steps, [`copy_from`](Tensor::copy_from), [`gemm_into`](crate::ops::gemm_into), batch
    /// norm's running statistics. Views, clones and [`detach`](Tensor::detach)ed tensors share
    /// the counter. A backward that saved this tensor refuses to run once it moved.
    pub fn version(&self) -> u64 {
        self.storage.version()
    }

    /// The binding of the elements this view spans in its buffer ([`Span::of_layout`]): a
    /// kernel that reads it at `rel` through its strides binds no more, so a row of a base
    /// past one binding fits where the whole buffer does not.
    pub(crate) fn view_span(&self) -> Span {
        Span::of_layout(
            &self.layout,
            self.dtype.size() as u64,
            self.device().storage_align(),
            self.buffer().size(),
        )
    }

    /// Notes an in-place write into this tensor's storage (see [`Tensor::version`]).
    pub(crate) fn bump_version(&self) {
        self.storage.bump_version();
    }

    /// True when both tensors view the same GPU buffer.
    pub fn shares_storage(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.storage, &other.storage)
    }

    pub(crate) fn view(&self, layout: Layout) -> Tensor {
        Tensor {
            storage: self.storage.clone(),
            layout,
            dtype: self.dtype,
            grad: None,
            // A view of a no_grad view is one too, whichever path made it.
            no_grad_view: self.no_grad_view.clone(),
        }
    }

    pub(crate) fn same_device(&self, op: &'static str, other: &Tensor) -> Result<()> {
        if !self.device().same(other.device()) {
            return Err(Error::DeviceMismatch { op });
        }
        Ok(())
    }

    pub(crate) fn same_dtype(&self, op: &'static str, other: &Tensor) -> Result<()> {
        if self.dtype != other.dtype {
            return Err(Error::DType {
                op,
                expected: self.dtype,
                got: other.dtype,
            });
        }
        Ok(())
    }

    /// The two factors of a matrix product in one dtype, else an error in ATen's words
    /// ("expected m1 and m2 to have the same dtype, but got: float != c10::Half", which
    /// test_linalg matches).
    pub(crate) fn same_dtype_factors(&self, op: &'static str, other: &Tensor) -> Result<()> {
        if self.dtype != other.dtype {
            return Err(Error::arg(
                op,
                format!(
                    "expected m1 and m2 to have the same dtype, but got: {} != {}",
                    self.dtype.c10_name(),
                    other.dtype.c10_name()
                ),
            ));
        }
        Ok(())
    }

    /// A backward's `dy` must be a gradient of `self`: same device, dtype and shape.
    pub(crate) fn check_grad_output(&self, op: &'static str, dy: &Tensor) -> Result<()> {
        self.same_device(op, dy)?;
        self.same_dtype(op, dy)?;
        if dy.shape() != self.shape() {
            return Err(Error::shape(
                op,
                format!(
                    "grad_output has shape {:?} but the input has shape {:?}",
                    dy.shape(),
                    self.shape()
                ),
            ));
        }
        Ok(())
    }

    /// Float-only ops (math, reductions, GEMM, ...) refuse i32 tensors with this error.
    pub(crate) fn require_float(&self, op: &'static str) -> Result<()> {
        if !self.dtype.is_float() {
            return Err(Error::arg(
                op,
                format!(
                    "expects a floating-point tensor (f32 or f16), got {:?}; convert with to_dtype(DType::F32)",
                    self.dtype
                ),
            ));
        }
        Ok(())
    }

    /// A view with a new shape; copies first when no strides over the data describe it.
    pub(crate) fn reshape_untracked(&self, shape: &[usize]) -> Result<Tensor> {
        let op = "reshape";
        // The count first, as PyTorch's sentence comes before any size limit.
        let n = shape.iter().fold(1usize, |a, &d| a.saturating_mul(d));
        if n != self.numel() {
            return Err(Error::shape(
                op,
                format!(
                    "shape '{shape:?}' is invalid for input of size {} (shape {:?})",
                    self.numel(),
                    self.shape()
                ),
            ));
        }
        // The rank and an empty shape's other dims (as [0, 2^40, 2^40]) still have bounds.
        checked_numel(op, shape)?;
        match self.layout.reshape(shape) {
            Some(l) => Ok(self.view(l)),
            None => {
                // The new layout describes the packed copy, so it must view the copy's storage.
                let packed = self.contiguous_at_zero()?;
                let layout = packed.layout.reshape(shape).expect("contiguous");
                Ok(packed.view(layout))
            }
        }
    }

    /// A view with the dimensions reordered: dim `i` of the result is dim `perm[i]` of `self`
    /// (PyTorch's `permute`). Never copies. Errors with [`Error::InvalidArgument`] when `perm`
    /// is not a permutation of `0..rank`.
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{DType, Device, Tensor};
    /// let dev = Device::new()?;
    /// let nhwc = Tensor::zeros(&dev, &[8, 32, 32, 3], DType::F32)?;
    /// let nchw = nhwc.permute(&[0, 3, 1, 2])?; // a strided view, ready for conv2d
    /// assert_eq!(nchw.shape(), &[8, 3, 32, 32]);
    /// assert_eq!(nchw.strides(), &[3072, 1, 96, 3]);
    /// # Ok(()) }
    /// ```
    pub fn permute(&self, perm: &[usize]) -> Result<Tensor> {
        let out = self.view(self.layout.permute(perm)?);
        Ok(view_grad::record_view(self, out, || {
            ViewKind::permute(perm)
        }))
    }

    /// A view with dims `a` and `b` swapped (PyTorch's `transpose`; negative dims count from
    /// the end). Never copies: matmul and the other ops read the strided result directly.
    /// Errors with [`Error::InvalidArgument`] for a dim out of range.
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{DType, Device, Tensor};
    /// let dev = Device::new()?;
    /// let w = Tensor::zeros(&dev, &[10, 64], DType::F32)?; // [out, in], as nn.Linear keeps it
    /// let x = Tensor::zeros(&dev, &[32, 64], DType::F32)?;
    /// let y = x.matmul(&w.transpose(-2, -1)?)?; // x @ w.T without a copy of w
    /// assert_eq!(y.shape(), &[32, 10]);
    /// # Ok(()) }
    /// ```
    pub fn transpose(&self, a: isize, b: isize) -> Result<Tensor> {
        let out = self.view(self.layout.transpose(a, b)?);
        Ok(view_grad::record_view(self, out, || {
            ViewKind::Transpose(a, b)
        }))
    }

    /// A view of the `len` elements starting at `start` along `dim` (PyTorch's `narrow`):
    /// negative dims count from the end, and so does a negative `start` (as PyTorch's), which
    /// may be any integer type ([`SignedIndex`](crate::SignedIndex)). Never copies. Errors with
    /// [`Error::InvalidArgument`] for a dim or a range out of bounds.
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{Device, Tensor};
    /// let dev = Device::new()?;
    /// let x = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
    /// let cols = x.narrow(-1, 1, 2)?; // x[:, 1:3]
    /// assert_eq!(cols.to_vec::<f32>()?, vec![2.0, 3.0, 5.0, 6.0]);
    /// assert!(x.narrow(1, 2, 2).is_err());
    /// assert_eq!(x.narrow(1, -1, 1)?.to_vec::<f32>()?, vec![3.0, 6.0]); // x[:, -1:]
    /// # Ok(()) }
    /// ```
    pub fn narrow(&self, dim: isize, start: impl SignedIndex, len: usize) -> Result<Tensor> {
        let op = "narrow";
        if self.rank() == 0 {
            return Err(Error::arg(
                op,
                "narrow() cannot be applied to a 0-dim tensor.",
            ));
        }
        let d = Layout::normalize_dim(op, dim, self.rank())?;
        let size = self.shape()[d] as i128;
        let s = start.to_i128();
        let start = if s < 0 { s + size } else { s };
        if start < 0 || start > size {
            return Err(Error::arg(
                op,
                format!(
                    "start out of range (expected to be in range of [{}, {size}], but got {s}) \
                     (dim {d})",
                    -size
                ),
            ));
        }
        let start = start as usize;
        let out = self.view(self.layout.narrow(dim, start, len)?);
        Ok(view_grad::record_view(self, out, || {
            ViewKind::narrow(self, dim, start)
        }))
    }

    /// A view with a size-1 dim inserted at `dim` (PyTorch's `unsqueeze`; negative dims count
    /// from `rank + 1`). Never copies, whatever the strides.
    pub fn unsqueeze(&self, dim: isize) -> Result<Tensor> {
        let out = self.view(self.layout.unsqueeze(dim)?);
        // Its gradient drops the size-1 dim again: a reshape to the source's shape.
        Ok(view_grad::record_view(self, out, || ViewKind::Reshape))
    }

    /// A view expanded to `shape` by numpy broadcasting rules (PyTorch's `expand` /
    /// `broadcast_to`): size-1 dims stretch with stride 0 and new leading dims are added; no
    /// memory is allocated. Errors with [`Error::Shape`] when the shapes do not broadcast.
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{Device, Tensor};
    /// let dev = Device::new()?;
    /// let row = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0], &[3])?;
    /// let m = row.broadcast_to(&[2, 3])?;
    /// assert_eq!(m.strides(), &[0, 1]);
    /// assert_eq!(m.to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
    /// assert!(row.broadcast_to(&[2, 4]).is_err());
    /// # Ok(()) }
    /// ```
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Tensor> {
        // Shape compatibility first, as expand's inferExpandGeometry, then the size limit.
        let layout = self.layout.broadcast_to(shape)?;
        checked_numel("broadcast_to", shape)?;
        let out = self.view(layout);
        Ok(view_grad::record_view(self, out, || ViewKind::Broadcast))
    }

    /// Copies the elements to the host in row-major order of the shape (PyTorch's
    /// `tensor.cpu().flatten().tolist()`), blocking until every op it depends on has run.
    /// Native only; on wasm use [`Tensor::to_vec_async`].
    ///
    /// Errors: [`Error::DType`] when `T` is not the tensor's dtype (no conversion happens: use
    /// [`Tensor::to_dtype`] first), and any error the GPU reported for the pending work
    /// ([`Error::DeviceLost`], [`Error::OutOfMemory`], [`Error::Validation`],
    /// [`Error::Readback`]).
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{f16, DType, Device, Tensor};
    /// let dev = Device::new()?;
    /// let x = Tensor::full(&dev, &[2, 2], 0.25, DType::F32)?;
    /// assert_eq!(x.to_vec::<f32>()?, vec![0.25; 4]);
    /// assert!(x.to_vec::<f16>().is_err()); // wrong element type
    /// # Ok(()) }
    /// ```
    #[cfg(not(target_arch = "wasm32"))]
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if self.numel() == 0 {
            self.check_read_dtype::<T>()?;
            return Ok(Vec::new());
        }
        let (src, offset, bytes) = self.readback_source::<T>()?;
        let raw = self
            .device()
            .read_bytes("to_vec", src.buffer(), offset, bytes)?;
        Ok(bytemuck::pod_collect_to_vec(&raw))
    }

    /// The value of a one-element tensor (any shape, any dtype) as an `f64`, PyTorch's
    /// `item()`: reads it back, so it waits for the work that computes it. Native only; on
    /// wasm use [`Tensor::item_async`]. Errors with [`Error::Shape`] when the tensor holds
    /// other than one element, and as [`Tensor::to_vec`].
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{Device, Tensor};
    /// let dev = Device::new()?;
    /// let loss = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0], &[3])?.mean(0, false)?;
    /// assert_eq!(loss.item()?, 2.0);
    /// # Ok(()) }
    /// ```
    #[cfg(not(target_arch = "wasm32"))]
    pub fn item(&self) -> Result<f64> {
        self.check_item()?;
        Ok(match self.dtype {
            DType::F32 => self.to_vec::<f32>()?[0] as f64,
            DType::F16 => self.to_vec::<half::f16>()?[0].to_f64(),
            DType::I32 => self.to_vec::<i32>()?[0] as f64,
        })
    }

    /// [`Tensor::item`] as a future (the wasm path; also works natively).
    pub async fn item_async(&self) -> Result<f64> {
        self.check_item()?;
        Ok(match self.dtype {
            DType::F32 => self.to_vec_async::<f32>().await?[0] as f64,
            DType::F16 => self.to_vec_async::<half::f16>().await?[0].to_f64(),
            DType::I32 => self.to_vec_async::<i32>().await?[0] as f64,
        })
    }

    fn check_item(&self) -> Result<()> {
        if self.numel() != 1 {
            return Err(Error::shape(
                "item",
                format!(
                    "a Tensor with {} elements cannot be converted to Scalar (shape {:?})",
                    self.numel(),
                    self.shape()
                ),
            ));
        }
        Ok(())
    }

    /// [`Tensor::to_vec`] as a future that resolves once the data is on the host: the
    /// readback on wasm, where the browser thread cannot block, and an async point where work
    /// held back by the in-flight cap is submitted (see [`Device::sync_async`]). On native it
    /// blocks inside the first poll, as `to_vec` does, so the same async code runs on both.
    /// Errors as `to_vec` does.
    pub async fn to_vec_async<T: Element>(&self) -> Result<Vec<T>> {
        // The element type first (a GPU error arriving at the await below would otherwise
        // be reported, and used up, in its place).
        self.check_read_dtype::<T>()?;
        // The parked batches go first, so a readback (and the copy a view may need) still
        // runs when they reached the bound under which new work is refused.
        #[cfg(target_arch = "wasm32")]
        self.device().submit_parked("to_vec").await?;
        if self.numel() == 0 {
            return Ok(Vec::new());
        }
        let (src, offset, bytes) = self.readback_source::<T>()?;
        let raw = self
            .device()
            .read_bytes_async("to_vec", src.buffer(), offset, bytes)
            .await?;
        Ok(bytemuck::pod_collect_to_vec(&raw))
    }

    /// A tensor whose bytes can be copied out directly (contiguous, 4-byte aligned start).
    fn check_read_dtype<T: Element>(&self) -> Result<()> {
        if T::DTYPE != self.dtype {
            return Err(Error::DType {
                op: "to_vec",
                expected: self.dtype,
                got: T::DTYPE,
            });
        }
        Ok(())
    }

    fn readback_source<T: Element>(&self) -> Result<(Tensor, u64, u64)> {
        self.check_read_dtype::<T>()?;
        let size = self.dtype.size() as u64;
        let offset = self.layout.offset() as u64 * size;
        let src = if self.is_contiguous() && offset.is_multiple_of(4) {
            self.clone()
        } else {
            self.contiguous_at_zero()?
        };
        let offset = src.layout.offset() as u64 * size;
        Ok((src, offset, self.numel() as u64 * size))
    }
}
