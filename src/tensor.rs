//! `Tensor`: pooled GPU storage plus a layout (shape, element strides, offset) and a dtype.
//! Views share storage; ops read strided inputs directly and write contiguous outputs.

use std::sync::Arc;

use crate::layout::{checked_numel, Layout};
use crate::ops::view_grad::{self, ViewKind};
use crate::runtime::{Device, Storage};
use crate::{DType, Element, Error, Result};

#[derive(Clone)]
pub struct Tensor {
    pub(crate) storage: Arc<Storage>,
    pub(crate) layout: Layout,
    pub(crate) dtype: DType,
    /// Autograd: `None` for tensors no gradient flows through (see `crate::autograd`).
    pub(crate) grad: Option<Arc<crate::autograd::GradMeta>>,
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
        })
    }

    /// Uploads `data` (row-major) as a tensor of `shape`.
    pub fn from_slice<T: Element>(device: &Device, data: &[T], shape: &[usize]) -> Result<Tensor> {
        let op = "from_slice";
        let n = check_new_shape(device, op, shape, T::DTYPE)?;
        if data.len() != n {
            return Err(Error::shape(
                op,
                format!(
                    "{} values do not fill shape {shape:?} ({n} elements)",
                    data.len()
                ),
            ));
        }
        let t = Tensor::empty(device, op, shape, T::DTYPE)?;
        device.write_buffer(op, t.buffer(), 0, bytemuck::cast_slice(data))?;
        Ok(t)
    }

    /// A tensor of zeros.
    pub fn zeros(device: &Device, shape: &[usize], dtype: DType) -> Result<Tensor> {
        let t = Tensor::empty(device, "zeros", shape, dtype)?;
        let bytes = (t.numel() * dtype.size()).div_ceil(4) as u64 * 4;
        if bytes > 0 {
            device.record_clear(t.buffer(), bytes);
        }
        Ok(t)
    }

    /// A tensor filled with `value` (converted to `dtype`).
    pub fn full(device: &Device, shape: &[usize], value: f64, dtype: DType) -> Result<Tensor> {
        check_new_shape(device, "full", shape, dtype)?;
        let one = match dtype {
            DType::F32 => Tensor::from_slice(device, &[value as f32], &[])?,
            DType::F16 => Tensor::from_slice(device, &[half::f16::from_f64(value)], &[])?,
        };
        one.broadcast_to(shape)?.contiguous()
    }

    pub fn device(&self) -> &Device {
        &self.storage.device
    }
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn shape(&self) -> &[usize] {
        self.layout.shape()
    }
    pub fn strides(&self) -> &[usize] {
        self.layout.strides()
    }
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
    pub fn rank(&self) -> usize {
        self.layout.rank()
    }
    pub fn numel(&self) -> usize {
        self.layout.numel()
    }
    pub fn is_contiguous(&self) -> bool {
        self.layout.is_contiguous()
    }
    pub(crate) fn buffer(&self) -> &wgpu::Buffer {
        self.storage.buffer()
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

    /// A view with a new shape; copies first when the data is not contiguous.
    pub(crate) fn reshape_untracked(&self, shape: &[usize]) -> Result<Tensor> {
        let op = "reshape";
        let n = checked_numel(op, shape)?;
        if n != self.numel() {
            return Err(Error::shape(
                op,
                format!(
                    "cannot reshape {:?} ({} elements) to {shape:?}",
                    self.shape(),
                    self.numel()
                ),
            ));
        }
        match self.layout.reshape(shape) {
            Some(l) => Ok(self.view(l)),
            None => {
                // The new layout describes the packed copy, so it must view the copy's storage.
                let packed = self.contiguous()?;
                let layout = packed.layout.reshape(shape).expect("contiguous");
                Ok(packed.view(layout))
            }
        }
    }

    pub fn permute(&self, perm: &[usize]) -> Result<Tensor> {
        let out = self.view(self.layout.permute(perm)?);
        Ok(view_grad::record_view(self, out, || {
            ViewKind::permute(perm)
        }))
    }

    pub fn transpose(&self, a: isize, b: isize) -> Result<Tensor> {
        let out = self.view(self.layout.transpose(a, b)?);
        Ok(view_grad::record_view(self, out, || {
            ViewKind::Transpose(a, b)
        }))
    }

    /// The `len` elements starting at `start` along `dim` (negative dims count from the end).
    pub fn narrow(&self, dim: isize, start: usize, len: usize) -> Result<Tensor> {
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

    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Tensor> {
        checked_numel("broadcast_to", shape)?;
        let out = self.view(self.layout.broadcast_to(shape)?);
        Ok(view_grad::record_view(self, out, || ViewKind::Broadcast))
    }

    /// Reads the tensor back (native, blocking). `T` must match the dtype.
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

    /// Reads the tensor back without blocking (the wasm path).
    pub async fn to_vec_async<T: Element>(&self) -> Result<Vec<T>> {
        if self.numel() == 0 {
            self.check_read_dtype::<T>()?;
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
            self.contiguous()?
        };
        let offset = src.layout.offset() as u64 * size;
        Ok((src, offset, self.numel() as u64 * size))
    }
}
