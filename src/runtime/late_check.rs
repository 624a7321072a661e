//! Readbacks that carried the index error buffer's bytes but could not report them: their map
//! wait timed out after the batch was submitted, the device check after the map failed (an
//! uncaptured error, reported instead), or (in the browser) the readback's future was dropped
//! before it finished. The batch cleared the error buffer on the device, so those bytes live
//! only in the staging buffer, which is kept until a later readback or sync reads them
//! (src/runtime/index_errors.rs, `take_late_index_errors`).

/// The receiving end of a staging buffer's map request.
pub(crate) type MapReceiver =
    futures::channel::oneshot::Receiver<std::result::Result<(), wgpu::BufferAsyncError>>;

/// The sending end: what a map callback reports through.
pub(crate) type MapSender =
    futures::channel::oneshot::Sender<std::result::Result<(), wgpu::BufferAsyncError>>;

/// Requests the map of `total` bytes of a staging buffer whose copy has been submitted,
/// reporting to `tx`.
pub(crate) fn request_map(staging: &wgpu::Buffer, total: u64, tx: MapSender) {
    staging.map_async(wgpu::MapMode::Read, 0..total, move |r| {
        let _ = tx.send(r);
    });
}

/// What a map's callback reported, or that it was dropped without running, as the reason the
/// bytes are lost.
fn outcome(
    r: std::result::Result<
        std::result::Result<(), wgpu::BufferAsyncError>,
        futures::channel::oneshot::Canceled,
    >,
) -> Result<(), String> {
    match r {
        Ok(s) => s.map_err(|e| e.to_string()),
        Err(_) => Err("its map callback never ran".to_string()),
    }
}

/// Such a readback's staging buffer (still counted by the pool; mapped, or with its map
/// request pending on `rx`), its `total` mapped bytes, with the error buffer's bytes at `at`.
pub(crate) struct LateCheck {
    pub(crate) staging: wgpu::Buffer,
    pub(crate) at: u64,
    pub(crate) total: u64,
    rx: MapReceiver,
    /// The map's outcome once received (`Err` with why the bytes are lost).
    status: Option<Result<(), String>>,
    /// wasm: the map is not requested yet, because the batch holding the copy was still
    /// parked when its readback was dropped; requested once the parked batches are submitted
    /// (`Device::submit_parked`).
    #[cfg(target_arch = "wasm32")]
    unrequested: Option<MapSender>,
}

impl LateCheck {
    /// A check whose map was requested and reports on `rx`.
    pub(crate) fn new(staging: wgpu::Buffer, at: u64, total: u64, rx: MapReceiver) -> Self {
        Self {
            staging,
            at,
            total,
            rx,
            status: None,
            #[cfg(target_arch = "wasm32")]
            unrequested: None,
        }
    }

    /// wasm: a check whose copy may still be parked: its map waits for [`Self::request`].
    #[cfg(target_arch = "wasm32")]
    pub(crate) fn parked(staging: wgpu::Buffer, at: u64, total: u64) -> Self {
        let (tx, rx) = futures::channel::oneshot::channel();
        let mut c = Self::new(staging, at, total, rx);
        c.unrequested = Some(tx);
        c
    }

    /// wasm: requests the map if it was not yet (call once the parked batches are submitted).
    #[cfg(target_arch = "wasm32")]
    pub(crate) fn request(&mut self) {
        if let Some(tx) = self.unrequested.take() {
            request_map(&self.staging, self.total, tx);
        }
    }

    /// The map's outcome if known: `Ok` when mapped, `Err` with why the bytes are lost.
    pub(crate) fn status(&mut self) -> Option<Result<(), String>> {
        if self.status.is_none() {
            self.status = self.rx.try_recv().transpose().map(outcome);
        }
        self.status.clone()
    }

    /// wasm: whether the map was requested (a parked copy's is not, until its batch is
    /// submitted).
    #[cfg(target_arch = "wasm32")]
    pub(crate) fn requested(&self) -> bool {
        self.unrequested.is_none()
    }

    /// wasm: waits for the map's outcome; call only once it was [requested](Self::requested)
    /// (else the wait would hold the map's sender for ever).
    #[cfg(target_arch = "wasm32")]
    pub(crate) async fn settle(&mut self) {
        if self.status.is_none() && self.requested() {
            self.status = Some(outcome((&mut self.rx).await));
        }
    }
}
