//! A pooled GPU buffer owned by one or more tensors (through `Arc`). Dropping the last owner
//! hands the buffer back to the pool, which delays reuse until pending readers are submitted.

use super::device::{Device, STORAGE_USAGE};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::Result;

pub(crate) struct Storage {
    buffer: Option<wgpu::Buffer>,
    pub(crate) device: Device,
    /// Set once the buffer was handed to the application (`Tensor::wgpu_buffer`): it may hold
    /// a clone of it, so the buffer is never donated to an op's output.
    pub(crate) exported: AtomicBool,
    /// Bumped by every in-place write into the buffer (optimizer steps, `copy_from`,
    /// `gemm_into`, running statistics, donation): PyTorch's version counter. Autograd
    /// records it for the tensors a backward saves and refuses to use them once it moved.
    version: AtomicU64,
}

impl Storage {
    pub(crate) fn new(device: &Device, op: &'static str, bytes: u64) -> Result<Storage> {
        let buffer = device.alloc_buffer(op, bytes.max(4), STORAGE_USAGE)?;
        Ok(Storage {
            buffer: Some(buffer),
            device: device.clone(),
            exported: AtomicBool::new(false),
            version: AtomicU64::new(0),
        })
    }

    /// A workspace that only GPU commands recorded from now on will fill.
    pub(crate) fn scratch(device: &Device, op: &'static str, bytes: u64) -> Result<Storage> {
        let buffer = device.alloc_buffer_from(op, bytes.max(4), STORAGE_USAGE, true)?;
        Ok(Storage {
            buffer: Some(buffer),
            device: device.clone(),
            exported: AtomicBool::new(false),
            version: AtomicU64::new(0),
        })
    }

    /// The number of in-place writes so far.
    pub(crate) fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// Notes an in-place write into the buffer.
    pub(crate) fn bump_version(&self) {
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn buffer(&self) -> &wgpu::Buffer {
        self.buffer.as_ref().expect("present until drop")
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        if let Some(b) = self.buffer.take() {
            self.device.release_buffer(b);
        }
    }
}
