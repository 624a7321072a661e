//! Readbacks whose map wait timed out after their batch was submitted while carrying the
//! index error buffer's bytes: the batch cleared the error buffer on the device, so those
//! bytes live only in the staging buffer, which is kept until a later readback or sync reads
//! them (src/runtime/index_errors.rs, `take_late_index_errors`).

/// The receiving end of a staging buffer's map request.
pub(crate) type MapReceiver =
    futures::channel::oneshot::Receiver<std::result::Result<(), wgpu::BufferAsyncError>>;

/// A timed-out readback's staging buffer (still counted by the pool), its `total` mapped
/// bytes, with the error buffer's bytes at `at`. Only native readbacks time out.
#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
pub(crate) struct LateCheck {
    pub(crate) staging: wgpu::Buffer,
    pub(crate) at: u64,
    pub(crate) total: u64,
    pub(crate) rx: MapReceiver,
}
