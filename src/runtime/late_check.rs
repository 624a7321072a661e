//! Readbacks that carried the index error buffer's bytes but could not report them: their map
//! wait timed out after the batch was submitted, or the device check after the map failed (an
//! uncaptured error, reported instead). The batch cleared the error buffer on the device, so
//! those bytes live only in the staging buffer, which is kept until a later readback or sync
//! reads them (src/runtime/index_errors.rs, `take_late_index_errors`).

/// The receiving end of a staging buffer's map request.
pub(crate) type MapReceiver =
    futures::channel::oneshot::Receiver<std::result::Result<(), wgpu::BufferAsyncError>>;

/// Such a readback's staging buffer (still counted by the pool; mapped, or with its map
/// request pending on `rx`), its `total` mapped bytes, with the error buffer's bytes at `at`.
pub(crate) struct LateCheck {
    pub(crate) staging: wgpu::Buffer,
    pub(crate) at: u64,
    pub(crate) total: u64,
    pub(crate) rx: MapReceiver,
}
