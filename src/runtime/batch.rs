//! The pending batch: one command encoder plus its param arena. Params of every dispatch are
//! packed on the CPU and written with a single `write_buffer` just before the batch is
//! submitted; each dispatch binds its slot through a dynamic offset.

#[derive(Default)]
pub(crate) struct Batch {
    pub(crate) encoder: Option<wgpu::CommandEncoder>,
    /// Uniform buffer holding `max_dispatches_per_submit` param slots.
    pub(crate) arena: Option<wgpu::Buffer>,
    params: Vec<u8>,
    pub(crate) dispatches: usize,
    /// Copies and clears recorded (they count toward the batch size like dispatches).
    pub(crate) commands: usize,
    /// Bytes of new buffers created while this batch was open.
    pub(crate) bytes: u64,
}

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

    /// Appends one dispatch's params at the next slot; returns its byte offset.
    pub(crate) fn push_params(&mut self, params: &[u8], slot: u64) -> u64 {
        let offset = self.dispatches as u64 * slot;
        self.params.resize(offset as usize, 0);
        self.params.extend_from_slice(params);
        self.dispatches += 1;
        offset
    }

    /// Closes the batch: uploads the params and returns the command buffer and the arena
    /// (to go back to the pool once submitted). `None` if nothing was recorded.
    pub(crate) fn finish(
        &mut self,
        queue: &wgpu::Queue,
    ) -> Option<(wgpu::CommandBuffer, Option<wgpu::Buffer>)> {
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
        self.bytes = 0;
        Some((encoder.finish(), arena))
    }
}
