//! The one launch path every op uses: look up (or compile) the pipeline, pack the params into
//! the batch's arena, reuse or create the bind group, and record the dispatch into the batch's
//! compute pass; plus the clears and copies recorded outside the pass.

use std::sync::Arc;

use super::bind_cache::{Bind, Bindings};
use super::device::{lock, Device, State, PARAMS_USAGE};
use super::pipeline::{Access, CachedPipeline, Kernel};
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
        let r = self.scoped(op, || {
            cache.compile(&self.inner.device, kernel, dtypes, constants)
        });
        if r.is_err() {
            // Not kept: a second call would find an invalid pipeline and record it, and the
            // batch would fail at submission, taking every op recorded with it down.
            cache.forget(kernel, dtypes, constants);
        }
        r
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
        check_aliasing(op, kernel, buffers)?;
        self.check(op)?;
        let pipeline = self.pipeline(op, kernel, dtypes, constants)?;
        if grid.contains(&0) {
            return Ok(());
        }
        let mut st = self.lock_state();
        let st = &mut *st;
        if let Some(e) = buffers.iter().find_map(|b| st.poisoned_by(b.buffer)) {
            return Err(e);
        }
        if st.batch.arena.is_none() {
            let slots = self.inner.opts.max_dispatches_per_submit as u64;
            let arena = match st.pool.take(slots * self.inner.param_slot, PARAMS_USAGE) {
                Some(b) => b,
                None => {
                    // The pool's class (capped at the binding limit), as `take` looks it up:
                    // the uncapped size class would never be taken again.
                    let size = st.pool.class(slots * self.inner.param_slot);
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
        // Noted once the batch this dispatch joins is open: making room for its arena may
        // flush the previous batch, which takes the written list with it.
        for (i, b) in buffers.iter().enumerate() {
            if kernel.bindings[i] == Access::ReadWrite {
                st.batch.note_written(b.buffer);
            }
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

    /// A checked buffer-to-buffer copy for an op: refused on a lost device or a poisoned
    /// source or destination (as a dispatch binding them would be), its destination noted as written, and counted
    /// toward the batch size. Offsets and `bytes` must be multiples of 4 and the buffers
    /// distinct (wgpu's copy rules); callers check that before choosing a copy over a dispatch.
    pub(crate) fn copy_buffer(
        &self,
        op: &'static str,
        src: &wgpu::Buffer,
        src_offset: u64,
        dst: &wgpu::Buffer,
        dst_offset: u64,
        bytes: u64,
    ) -> Result<()> {
        if src == dst || !(src_offset | dst_offset | bytes).is_multiple_of(4) {
            return Err(Error::arg(
                op,
                format!("internal: buffer copy of {bytes} bytes from {src_offset} to {dst_offset} is not 4-byte aligned or aliases"),
            ));
        }
        self.check(op)?;
        if bytes == 0 {
            return Ok(());
        }
        // A poisoned destination too, as a dispatch binding it is refused (a partial copy into
        // it would not make it whole). Tested and recorded under one lock: another thread's
        // failed flush in between would poison the source after the test, and the copy, in a
        // fresh batch, would then carry its garbage on as data.
        let mut st = self.lock_state();
        if let Some(e) = st.poisoned_by(src).or_else(|| st.poisoned_by(dst)) {
            return Err(e);
        }
        self.record_copy_locked(&mut st, src, src_offset, dst, dst_offset, bytes);
        if st.batch.dispatches + st.batch.commands >= self.inner.opts.max_dispatches_per_submit {
            self.flush_locked(&mut st, op)?;
        }
        Ok(())
    }

    /// Records a buffer-to-buffer copy into the pending batch.
    #[cfg(all(test, not(target_arch = "wasm32")))]
    pub(crate) fn record_copy(
        &self,
        src: &wgpu::Buffer,
        src_offset: u64,
        dst: &wgpu::Buffer,
        dst_offset: u64,
        bytes: u64,
    ) {
        let mut st = self.lock_state();
        self.record_copy_locked(&mut st, src, src_offset, dst, dst_offset, bytes);
    }

    /// Records a buffer-to-buffer copy under a state lock the caller holds, so that what it
    /// tested (a poisoned source, a pending index check) still holds when the copy is in
    /// the batch.
    pub(crate) fn record_copy_locked(
        &self,
        st: &mut State,
        src: &wgpu::Buffer,
        src_offset: u64,
        dst: &wgpu::Buffer,
        dst_offset: u64,
        bytes: u64,
    ) {
        if st.batch.encoder.is_none() {
            st.batch.open_without_arena(&self.inner.device);
        }
        st.batch.note_written(dst);
        if let Some(enc) = st.batch.encoder_outside_pass() {
            enc.copy_buffer_to_buffer(src, src_offset, dst, dst_offset, bytes);
        }
        st.batch.commands += 1;
    }

    /// Records a clear (zero fill) into the pending batch for `op`; errors when the batch
    /// this fills up fails to submit.
    pub(crate) fn record_clear(
        &self,
        op: &'static str,
        buf: &wgpu::Buffer,
        bytes: u64,
    ) -> Result<()> {
        let mut st = self.lock_state();
        self.record_clear_locked(&mut st, buf, bytes);
        // Clears and copies count toward the batch size like dispatches, so a loop of them
        // submits now and then and the buffers freed meanwhile become reusable.
        if st.batch.dispatches + st.batch.commands >= self.inner.opts.max_dispatches_per_submit {
            self.flush_locked(&mut st, op)?;
        }
        Ok(())
    }

    /// Records a clear into the pending batch under a state lock the caller holds (no flush:
    /// the caller counts the batch size).
    pub(crate) fn record_clear_locked(&self, st: &mut State, buf: &wgpu::Buffer, bytes: u64) {
        if st.batch.encoder.is_none() {
            st.batch.open_without_arena(&self.inner.device);
        }
        st.batch.note_written(buf);
        if let Some(enc) = st.batch.encoder_outside_pass() {
            enc.clear_buffer(buf, 0, Some(bytes));
        }
        st.batch.commands += 1;
    }
}

/// Refuses a dispatch that binds one buffer both read and read_write: wgpu rejects such a
/// dispatch only when the batch is finished, dropping the whole batch (every op recorded with
/// it). wgpu tracks usage per whole buffer, so it is refused whatever the ranges. Two
/// read_write bindings of one buffer are valid (WebGPU's storage usage is compatible with
/// itself); the kernels use that for placeholders of outputs they do not write.
fn check_aliasing(op: &'static str, kernel: &Kernel, buffers: &[Bind]) -> Result<()> {
    for (i, a) in buffers.iter().enumerate() {
        for (j, b) in buffers.iter().enumerate().skip(i + 1) {
            if a.buffer != b.buffer {
                continue;
            }
            let (wa, wb) = (
                kernel.bindings.get(i) == Some(&Access::ReadWrite),
                kernel.bindings.get(j) == Some(&Access::ReadWrite),
            );
            if wa != wb {
                return Err(Error::arg(
                    op,
                    format!(
                        "one buffer is bound as both an input and the output of one dispatch \
                         ({} bindings {} and {}): an argument aliases another one (for example \
                         a tensor passed as its own gradient, or an output that shares storage \
                         with an input); pass a copy instead (e.g. `t.mul_scalar(1.0)?`)",
                        kernel.name,
                        kernel.slot(i),
                        kernel.slot(j)
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod override_tests {
    use super::*;
    use crate::runtime::{Access, Kernel};

    // Each invocation of one workgroup bumps a counter: the count is the real workgroup size.
    static COUNT: Kernel = Kernel::new(
        "count_invocations",
        "override WG: u32 = 64u;\n\
                 override SGS: u32 = 4u;\n\
                 @group(0) @binding(1) var<storage, read_write> out: array<atomic<u32>>;\n\
                 @compute @workgroup_size(WG) fn plain() { atomicAdd(&out[0], 1u); }\n\
                 @compute @workgroup_size(SGS * 8u) fn expr() { atomicAdd(&out[0], 1u); }",
        "plain",
        &[Access::ReadWrite],
    );
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

#[cfg(all(test, not(target_arch = "wasm32")))]
mod hazard_tests {
    use super::*;
    use crate::runtime::{Access, Kernel};
    use crate::Tensor;

    static COPY: Kernel = Kernel::new(
        "alias_probe",
        "@group(0) @binding(1) var<storage, read> x: array<f32>;\n\
                 @group(0) @binding(2) var<storage, read_write> y: array<f32>;\n\
                 @compute @workgroup_size(64) fn main() { y[0] = x[0]; }",
        "main",
        &[Access::Read, Access::ReadWrite],
    );

    /// One buffer bound read and read_write in one dispatch is refused at launch, before
    /// anything is recorded: earlier work in the same batch still reads back.
    #[test]
    fn aliased_bindings_are_refused_at_launch() {
        let dev = Device::new().unwrap();
        let a = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0], &[3]).unwrap();
        let b = a.add_scalar(1.0).unwrap();
        let w = Tensor::zeros(&dev, &[4], DType::F32).unwrap();
        let e = dev
            .launch(
                "probe",
                &COPY,
                &[DType::F32],
                &[],
                &[0u8; 16],
                &[w.buffer(), w.buffer()],
                [1, 1, 1],
            )
            .unwrap_err();
        assert!(
            e.to_string().contains("both an input and the output"),
            "{e}"
        );
        assert_eq!(b.to_vec::<f32>().unwrap(), vec![2.0, 3.0, 4.0]);
        dev.sync().unwrap();
    }

    /// A batch wgpu refuses at submission (here a copy past the end of its destination) takes
    /// every op recorded with it down: the buffers it wrote are poisoned, so their readbacks
    /// and the ops that read them return the error instead of stale data; other tensors and
    /// later work are unaffected.
    #[test]
    fn a_refused_batch_poisons_what_it_wrote() {
        let dev = Device::new().unwrap();
        let before = Tensor::from_slice(&dev, &[5.0f32; 4], &[4]).unwrap();
        dev.sync().unwrap();
        let a = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0], &[3]).unwrap();
        let b = a.add_scalar(1.0).unwrap();
        // An index check in the refused batch: the device's one error buffer is written by
        // it, yet stays usable.
        let idx = Tensor::from_slice(&dev, &[0i32], &[1]).unwrap();
        let _picked = a.index_select(0, &idx).unwrap();
        let small = Tensor::zeros(&dev, &[4], DType::F32).unwrap();
        // 4 KiB into a 256-byte buffer: invalid, reported when the batch is finished.
        let big = Tensor::zeros(&dev, &[1024], DType::F32).unwrap();
        dev.record_copy(big.buffer(), 0, small.buffer(), 0, 4096);
        let e = dev.sync().unwrap_err();
        assert!(matches!(e, crate::Error::Validation { .. }), "{e:?}");
        dev.sync().expect("the failure was reported once");
        assert!(
            b.to_vec::<f32>().is_err(),
            "b was computed in the refused batch"
        );
        assert!(
            b.mul_scalar(2.0).is_err(),
            "ops on a poisoned buffer fail too"
        );
        let dst = Tensor::zeros(&dev, &[3], DType::F32).unwrap();
        assert!(dst.copy_from(&b).is_err(), "so does a buffer copy from one");
        assert!(b.copy_from(&dst).is_err(), "or into one");
        // Work outside the refused batch is intact, and the device goes on.
        assert_eq!(before.to_vec::<f32>().unwrap(), vec![5.0; 4]);
        let c = Tensor::from_slice(&dev, &[1.0f32, 2.0], &[2]).unwrap();
        assert_eq!(
            c.add_scalar(1.0).unwrap().to_vec::<f32>().unwrap(),
            vec![2.0, 3.0]
        );
        let i = Tensor::from_slice(&dev, &[1i32], &[1]).unwrap();
        assert_eq!(
            c.index_select(0, &i).unwrap().to_vec::<f32>().unwrap(),
            vec![2.0]
        );
        dev.sync().unwrap();
        // Freed and destroyed with the cache, the poisoned buffers leave the map (a mark
        // kept a handle and the error alive, and every later launch paid a lookup).
        assert!(dev.lock_state().pool.poisoned_count() > 0);
        drop((a, b, idx, small, big, dst, _picked));
        dev.sync().unwrap();
        dev.clear_pool();
        assert_eq!(dev.lock_state().pool.poisoned_count(), 0);
    }

    /// With no pool cache, what a refused batch wrote and freed is destroyed as the batch is
    /// handed back; its marks go with it (a mark set after that destroy stayed forever).
    #[test]
    fn a_refused_batch_leaves_no_mark_on_buffers_it_destroyed() {
        let dev = Device::with_options(crate::DeviceOptions {
            pool_cap_bytes: Some(0),
            ..Default::default()
        })
        .unwrap();
        let a = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0], &[3]).unwrap();
        dev.sync().unwrap();
        let tmp = a.add_scalar(1.0).unwrap();
        let b = tmp.mul_scalar(2.0).unwrap();
        drop(tmp);
        let small = Tensor::zeros(&dev, &[4], DType::F32).unwrap();
        let big = Tensor::zeros(&dev, &[1024], DType::F32).unwrap();
        dev.record_copy(big.buffer(), 0, small.buffer(), 0, 4096);
        assert!(dev.sync().is_err());
        assert!(
            b.to_vec::<f32>().is_err(),
            "b was computed in the refused batch"
        );
        let live = dev.lock_state().pool.poisoned_count();
        drop((b, small, big));
        dev.sync().unwrap();
        dev.clear_pool();
        assert!(live > 0);
        assert_eq!(dev.lock_state().pool.poisoned_count(), 0);
    }
}
