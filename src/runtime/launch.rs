//! The one launch path every op uses: look up (or compile) the pipeline, pack the params into
//! the batch's arena, reuse or create the bind group, and record the dispatch into the batch's
//! compute pass; plus the clears and copies recorded outside the pass.

use std::sync::Arc;

use super::bind_cache::{Bind, Bindings};
use super::device::{lock, Device, PARAMS_USAGE};
use super::pipeline::{CachedPipeline, Kernel};
use super::pool::size_class;
use crate::{DType, Error, Result};

impl Device {
    /// Looks up or compiles a pipeline.
    pub(crate) fn pipeline(
        &self,
        op: &'static str,
        kernel: &Kernel,
        dtypes: &[DType],
        constants: &[(&'static str, f64)],
    ) -> Result<Arc<CachedPipeline>> {
        let mut cache = lock(&self.inner.pipelines);
        if let Some(p) = cache.get(kernel, dtypes, constants) {
            return Ok(p);
        }
        self.scoped(op, || {
            cache.compile(&self.inner.device, kernel, dtypes, constants)
        })
    }

    /// The one launch path: bind Params (binding 0, a slice of the batch's param arena) and the
    /// storage buffers (bindings 1..), record the dispatch, submit when the batch is full.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch(
        &self,
        op: &'static str,
        kernel: &Kernel,
        dtypes: &[DType],
        constants: &[(&'static str, f64)],
        params: &[u8],
        buffers: &[&wgpu::Buffer],
        grid: [u32; 3],
    ) -> Result<()> {
        let binds: Vec<Bind> = buffers.iter().map(|b| Bind::whole(b)).collect();
        self.launch_binds(op, kernel, dtypes, constants, params, &binds, grid)
    }

    /// [`Device::launch`] with byte ranges of buffers: the windowed ops bind the part of a
    /// large tensor each dispatch reads or writes. Every range must fit one binding
    /// (`Device::binding_limit`); a whole buffer past it means the op does not split that
    /// tensor, and the error says so.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch_binds(
        &self,
        op: &'static str,
        kernel: &Kernel,
        dtypes: &[DType],
        constants: &[(&'static str, f64)],
        params: &[u8],
        buffers: &[Bind],
        grid: [u32; 3],
    ) -> Result<()> {
        debug_assert_eq!(buffers.len(), kernel.bindings.len(), "{}", kernel.name);
        let limit = self.inner.binding_limit;
        if let Some(b) = buffers.iter().find(|b| b.size > limit) {
            return Err(Error::TooLarge {
                op,
                bytes: b.size,
                limit_name:
                    "storage binding size (this op does not split tensors larger than one binding)",
                limit,
            });
        }
        if params.len() as u64 > self.inner.param_slot {
            return Err(Error::arg(
                op,
                format!(
                    "params of {} bytes exceed the {} byte slot",
                    params.len(),
                    self.inner.param_slot
                ),
            ));
        }
        let max = self.inner.limits.max_compute_workgroups_per_dimension;
        if grid.iter().any(|&g| g > max) {
            return Err(Error::size(
                op,
                format!("grid {grid:?} exceeds max_compute_workgroups_per_dimension {max}"),
            ));
        }
        if !kernel.ints && dtypes.contains(&DType::I32) {
            return Err(Error::arg(
                op,
                "expects floating-point tensors (f32 or f16), got I32; convert with to_dtype(DType::F32)",
            ));
        }
        self.check(op)?;
        let pipeline = self.pipeline(op, kernel, dtypes, constants)?;
        if grid.contains(&0) {
            return Ok(());
        }
        let mut st = self.lock_state();
        let st = &mut *st;
        if st.batch.arena.is_none() {
            let slots = self.inner.opts.max_dispatches_per_submit as u64;
            let arena = match st.pool.take(slots * self.inner.param_slot, PARAMS_USAGE) {
                Some(b) => b,
                None => {
                    let size = size_class(slots * self.inner.param_slot);
                    // The arena counts toward the memory budget like any buffer.
                    self.make_room_locked(st, op, size)?;
                    st.pool.note_created(size);
                    self.inner.device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("param arena"),
                        size,
                        usage: PARAMS_USAGE,
                        mapped_at_creation: false,
                    })
                }
            };
            st.batch.open(&self.inner.device, arena);
        }
        let offset = st.batch.push_params(params, self.inner.param_slot);
        let Some(arena) = st.batch.arena.as_ref() else {
            return Err(Error::arg(op, "internal: no param arena for the dispatch"));
        };
        let slot_of = |i: usize| kernel.slot(i);
        let bind_group = st.bind_groups.get(
            &self.inner.device,
            &Bindings {
                layout: &pipeline.layout,
                label: kernel.name,
                arena,
                slot_size: self.inner.param_slot,
                buffers,
                slot_of: &slot_of,
            },
            st.pool.generation,
        );
        let Some(pass) = st.batch.pass() else {
            return Err(Error::arg(
                op,
                "internal: no command encoder open for the dispatch",
            ));
        };
        pass.set_pipeline(&pipeline.pipeline);
        pass.set_bind_group(0, &bind_group, &[offset as u32]);
        pass.dispatch_workgroups(grid[0], grid[1], grid[2]);
        st.dispatches += 1;
        if st.batch.dispatches + st.batch.commands >= self.inner.opts.max_dispatches_per_submit {
            self.flush_locked(st, op)?;
        }
        Ok(())
    }

    /// Records a buffer-to-buffer copy into the pending batch.
    pub(crate) fn record_copy(
        &self,
        src: &wgpu::Buffer,
        src_offset: u64,
        dst: &wgpu::Buffer,
        bytes: u64,
    ) {
        let mut st = self.lock_state();
        if st.batch.encoder.is_none() {
            st.batch.open_without_arena(&self.inner.device);
        }
        if let Some(enc) = st.batch.encoder_outside_pass() {
            enc.copy_buffer_to_buffer(src, src_offset, dst, 0, bytes);
        }
        st.batch.commands += 1;
    }

    /// Records a clear (zero fill) into the pending batch.
    pub(crate) fn record_clear(&self, buf: &wgpu::Buffer, bytes: u64) {
        let mut st = self.lock_state();
        if st.batch.encoder.is_none() {
            st.batch.open_without_arena(&self.inner.device);
        }
        if let Some(enc) = st.batch.encoder_outside_pass() {
            enc.clear_buffer(buf, 0, Some(bytes));
        }
        st.batch.commands += 1;
        // Clears and copies count toward the batch size like dispatches, so a loop of them
        // submits now and then and the buffers freed meanwhile become reusable.
        if st.batch.dispatches + st.batch.commands >= self.inner.opts.max_dispatches_per_submit {
            let _ = self.flush_locked(&mut st, "record_clear");
        }
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod override_tests {
    use super::*;
    use crate::runtime::{Access, Kernel};

    // Each invocation of one workgroup bumps a counter: the count is the real workgroup size.
    static COUNT: Kernel = Kernel {
        name: "count_invocations",
        source: "override WG: u32 = 64u;\n\
                 override SGS: u32 = 4u;\n\
                 @group(0) @binding(1) var<storage, read_write> out: array<atomic<u32>>;\n\
                 @compute @workgroup_size(WG) fn plain() { atomicAdd(&out[0], 1u); }\n\
                 @compute @workgroup_size(SGS * 8u) fn expr() { atomicAdd(&out[0], 1u); }",
        entry: "plain",
        bindings: &[Access::ReadWrite],
        slots: &[],
        libs: &[],
        defs: &[],
        ints: false,
    };
    static COUNT_EXPR: Kernel = Kernel {
        entry: "expr",
        ..COUNT
    };

    fn invocations(dev: &Device, k: &Kernel, consts: &[(&'static str, f64)]) -> u32 {
        let t = crate::Tensor::zeros(dev, &[4], DType::F32).unwrap();
        dev.launch(
            "count",
            k,
            &[DType::F32],
            consts,
            &[0u8; 16],
            &[t.buffer()],
            [1, 1, 1],
        )
        .unwrap();
        let raw = dev.read_bytes("count", t.buffer(), 0, 4).unwrap();
        u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]])
    }

    /// Kernels size their grids from the override values, so the pipeline must really run
    /// workgroups of that size (not the default).
    #[test]
    fn override_workgroup_sizes_take_effect() {
        let dev = Device::new().unwrap();
        assert_eq!(invocations(&dev, &COUNT, &[("WG", 8.0)]), 8);
        assert_eq!(invocations(&dev, &COUNT, &[("WG", 128.0)]), 128);
        assert_eq!(invocations(&dev, &COUNT_EXPR, &[("SGS", 1.0)]), 8);
        assert_eq!(invocations(&dev, &COUNT_EXPR, &[("SGS", 8.0)]), 64);
    }
}
