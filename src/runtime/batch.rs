//! The pending batch: one command encoder, the compute pass its dispatches are recorded into,
//! and its param arena. Params of every dispatch are packed on the CPU and written with a single
//! `write_buffer` just before the batch is submitted; each dispatch binds its slot through a
//! dynamic offset.
//!
//! All dispatches of a batch share one compute pass: wgpu makes each dispatch its own usage
//! scope and inserts the barriers dependent dispatches need, so one pass costs no correctness
//! and saves a begin/end per dispatch. The pass ends only where a command must run outside it
//! (buffer clears and copies, readbacks) and when the batch is finished.

#[derive(Default)]
pub(crate) struct Batch {
    // Declared before the encoder so that it is dropped (ended) first.
    pass: Option<wgpu::ComputePass<'static>>,
    pub(crate) encoder: Option<wgpu::CommandEncoder>,
    /// Uniform buffer holding `max_dispatches_per_submit` param slots.
    pub(crate) arena: Option<wgpu::Buffer>,
    params: Vec<u8>,
    pub(crate) dispatches: usize,
    /// Copies and clears recorded (they count toward the batch size like dispatches).
    pub(crate) commands: usize,
    /// Bytes of new buffers created, and of uploads made, while this batch was open.
    pub(crate) bytes: u64,
    /// Uploads (`queue.write_buffer`) made since the last submit: wgpu stages each one until
    /// the next submission, so many small uploads flush too ([`MAX_UPLOADS_PER_SUBMIT`]).
    pub(crate) uploads: usize,
    /// Buffers the batch writes (read_write bindings, copy and clear destinations, upload
    /// targets): if its submission fails, their contents are garbage (see `BufferPool::poison`).
    pub(crate) written: Vec<wgpu::Buffer>,
}

/// A submission is made after this many uploads even when their bytes stay far below
/// `max_bytes_per_submit` and no dispatch was recorded: wgpu keeps a staging allocation per
/// upload until the next submit, so an upload-only loop would otherwise grow without bound.
pub(crate) const MAX_UPLOADS_PER_SUBMIT: usize = 1024;

impl Batch {
    pub(crate) fn open(&mut self, device: &wgpu::Device, arena: wgpu::Buffer) {
        if self.encoder.is_none() {
            self.open_without_arena(device);
        }
        self.arena = Some(arena);
    }

    pub(crate) fn open_without_arena(&mut self, device: &wgpu::Device) {
        self.encoder = Some(
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("wgtensor batch"),
            }),
        );
    }

    /// The batch's compute pass, begun on first use (`None` when no encoder is open).
    pub(crate) fn pass(&mut self) -> Option<&mut wgpu::ComputePass<'static>> {
        if self.pass.is_none() {
            let encoder = self.encoder.as_mut()?;
            let pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("wgtensor batch"),
                timestamp_writes: None,
            });
            // The encoder stays locked while the pass lives; `end_pass` ends it before the
            // encoder is used again.
            self.pass = Some(pass.forget_lifetime());
        }
        self.pass.as_mut()
    }

    /// Ends the open pass (if any): the next command records outside it.
    pub(crate) fn end_pass(&mut self) {
        self.pass = None;
    }

    /// The encoder for a command that must run outside a compute pass (copies, clears).
    pub(crate) fn encoder_outside_pass(&mut self) -> Option<&mut wgpu::CommandEncoder> {
        self.end_pass();
        self.encoder.as_mut()
    }

    /// Appends one dispatch's params at the next slot; returns its byte offset.
    pub(crate) fn push_params(&mut self, params: &[u8], slot: u64) -> u64 {
        let offset = self.dispatches as u64 * slot;
        self.params.resize(offset as usize, 0);
        self.params.extend_from_slice(params);
        self.dispatches += 1;
        offset
    }

    /// Notes a buffer this batch writes (once per batch).
    pub(crate) fn note_written(&mut self, buf: &wgpu::Buffer) {
        if !self.written.contains(buf) {
            self.written.push(buf.clone());
        }
    }

    /// Closes the batch: uploads the params and returns the command buffer and the arena
    /// (to go back to the pool once submitted). `None` if nothing was recorded.
    pub(crate) fn finish(
        &mut self,
        queue: &wgpu::Queue,
    ) -> Option<(wgpu::CommandBuffer, Option<wgpu::Buffer>)> {
        self.end_pass();
        // Counted bytes and uploads start over even with nothing to submit (buffers created
        // with no batch open): otherwise every later allocation would call a no-op flush.
        self.bytes = 0;
        self.uploads = 0;
        let encoder = self.encoder.take()?;
        let arena = self.arena.take();
        if let Some(a) = &arena {
            if !self.params.is_empty() {
                self.params.resize(self.params.len().div_ceil(4) * 4, 0);
                queue.write_buffer(a, 0, &self.params);
            }
        }
        self.params.clear();
        self.dispatches = 0;
        self.commands = 0;
        Some((encoder.finish(), arena))
    }
}
