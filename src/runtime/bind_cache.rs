//! Bind groups reused across dispatches. Pooled buffers come back again and again, so the same
//! (layout, param arena, storage buffers) recur and their bind group can be reused instead of
//! created per dispatch (wgpu validates and allocates a descriptor set for each new one).
//!
//! A cached bind group holds its buffers; one whose buffer was destroyed would be invalid, so
//! the cache empties whenever the pool destroys buffers (its `generation` moves on).

use std::collections::HashMap;

/// One storage binding: a byte range of a buffer (the whole buffer for most dispatches; a
/// window of it when an op splits a tensor larger than one binding).
#[derive(Clone, Copy)]
pub(crate) struct Bind<'a> {
    pub(crate) buffer: &'a wgpu::Buffer,
    pub(crate) offset: u64,
    pub(crate) size: u64,
}

impl<'a> Bind<'a> {
    pub(crate) fn whole(buffer: &'a wgpu::Buffer) -> Bind<'a> {
        Bind {
            buffer,
            offset: 0,
            size: buffer.size(),
        }
    }
}

/// Most storage bindings cached (batch norm's inference pass binds 8); kernels with more create
/// their bind group per dispatch.
const MAX_BINDINGS: usize = 10;
/// Entries kept before the cache starts over (bounds its memory; pools cycle few buffers).
const MAX_ENTRIES: usize = 4096;

#[derive(PartialEq, Eq, Hash)]
struct Key {
    layout: wgpu::BindGroupLayout,
    arena: wgpu::Buffer,
    buffers: [Option<(wgpu::Buffer, u64, u64)>; MAX_BINDINGS],
}

#[derive(Default)]
pub(crate) struct BindGroupCache {
    map: HashMap<Key, wgpu::BindGroup>,
    /// The pool generation the entries were made in.
    generation: u64,
    pub(crate) hits: u64,
    pub(crate) misses: u64,
}

/// What one dispatch binds: the param arena slot (binding 0) and the storage buffers at their
/// binding numbers.
pub(crate) struct Bindings<'a> {
    pub(crate) layout: &'a wgpu::BindGroupLayout,
    pub(crate) label: &'static str,
    pub(crate) arena: &'a wgpu::Buffer,
    pub(crate) slot_size: u64,
    pub(crate) buffers: &'a [Bind<'a>],
    pub(crate) slot_of: &'a dyn Fn(usize) -> u32,
}

fn create(device: &wgpu::Device, b: &Bindings) -> wgpu::BindGroup {
    let mut entries = Vec::with_capacity(b.buffers.len() + 1);
    entries.push(wgpu::BindGroupEntry {
        binding: 0,
        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: b.arena,
            offset: 0,
            size: wgpu::BufferSize::new(b.slot_size),
        }),
    });
    for (i, bind) in b.buffers.iter().enumerate() {
        entries.push(wgpu::BindGroupEntry {
            binding: (b.slot_of)(i),
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: bind.buffer,
                offset: bind.offset,
                size: wgpu::BufferSize::new(bind.size),
            }),
        });
    }
    device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some(b.label),
        layout: b.layout,
        entries: &entries,
    })
}

impl BindGroupCache {
    /// The bind group for `b`, from the cache or new. `generation` is the pool's current one.
    pub(crate) fn get(
        &mut self,
        device: &wgpu::Device,
        b: &Bindings,
        generation: u64,
    ) -> wgpu::BindGroup {
        if generation != self.generation || self.map.len() >= MAX_ENTRIES {
            self.map.clear();
            self.generation = generation;
        }
        if b.buffers.len() > MAX_BINDINGS {
            self.misses += 1;
            return create(device, b);
        }
        let mut buffers: [Option<(wgpu::Buffer, u64, u64)>; MAX_BINDINGS] = Default::default();
        for (slot, bind) in buffers.iter_mut().zip(b.buffers) {
            *slot = Some((bind.buffer.clone(), bind.offset, bind.size));
        }
        let key = Key {
            layout: b.layout.clone(),
            arena: b.arena.clone(),
            buffers,
        };
        if let Some(bg) = self.map.get(&key) {
            self.hits += 1;
            return bg.clone();
        }
        self.misses += 1;
        let bg = create(device, b);
        self.map.insert(key, bg.clone());
        bg
    }

    /// Drops every entry (and the buffers they hold).
    pub(crate) fn clear(&mut self) {
        self.map.clear();
    }
}
