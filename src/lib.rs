//! # wgtensor
//!
//! A portable GPU tensor runtime on wgpu/WGSL. Tensors live in pooled wgpu buffers; ops record
//! compute dispatches into a pending command encoder that is submitted in batches through a
//! bounded in-flight queue, so memory stays bounded however far the caller runs ahead.
//!
//! The design (layers, the life of an op, buffer reuse and hazards, how to add a kernel
//! family) is in `docs/ARCHITECTURE.md` in the repository.
//!
//! ```no_run,ignore-wasm32
//! # fn main() -> wgtensor::Result<()> {
//! use wgtensor::{Device, Tensor};
//! let dev = Device::new()?;
//! let a = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
//! let b = Tensor::from_slice(&dev, &[10.0f32, 20.0, 30.0], &[3])?;
//! let c = a.add(&b)?.relu()?.sum(1, false)?; // broadcast add, relu, row sums
//! assert_eq!(c.to_vec::<f32>()?, vec![66.0, 75.0]);
//! # Ok(()) }
//! ```

// wgpu's WebGPU handles are !Send and !Sync on wasm32 (one thread); the Arcs that make Device
// and Tensor cheap to clone are kept there for the same API on every target.
#![cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]

pub mod autograd;
mod dtype;
mod error;
pub mod layout;
pub mod ops;
pub mod runtime;
mod tensor;

pub use autograd::{no_grad, Grads, NoGradGuard};
pub use dtype::{DType, Element};
pub use error::{Error, Result};
pub use half::f16;
pub use layout::Layout;
pub use runtime::{Caps, Device, DeviceOptions, DeviceStats, PoolStats};
pub use tensor::Tensor;
/// The wgpu crate this version of wgtensor is built on, so interop code names the same types.
pub use wgpu;
