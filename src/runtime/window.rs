//! Windows over tensors larger than one storage binding. WebGPU and Vulkan cap a binding at
//! `max_storage_buffer_binding_size` (128 MiB on many adapters, lavapipe included) while a
//! buffer may be much larger; an op over such a tensor runs one dispatch per window of its
//! output, binding only the byte range of each operand that window reads or writes. Range
//! offsets must be multiples of `min_storage_buffer_offset_alignment`, so a window's binding
//! starts at the aligned byte at or below its first element and the kernel skips the
//! difference (`Span::rel`).
//!
//! The planning here is pure arithmetic, unit-tested without a GPU.

use super::bind_cache::Bind;
use super::device::Device;
use crate::layout::Layout;
use crate::{Error, Result};

/// The binding that covers elements `[first, end)` of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    /// Byte offset of the binding (aligned).
    pub offset: u64,
    /// Byte size of the binding (a multiple of 4, within the buffer).
    pub size: u64,
    /// Elements from the binding's start to `first`.
    pub rel: u64,
}

impl Span {
    /// Elements `[first, end)` of `es`-byte elements in a buffer of `buffer_size` bytes, the
    /// binding offset aligned down to `align`.
    pub(crate) fn of(first: u64, end: u64, es: u64, align: u64, buffer_size: u64) -> Span {
        let start = first * es;
        let offset = start / align * align;
        let size = ((end * es).max(start + 1) - offset)
            .div_ceil(4)
            .saturating_mul(4)
            .min(buffer_size - offset);
        Span {
            offset,
            size,
            rel: (start - offset) / es,
        }
    }

    /// Every element `layout` reaches, of `es` bytes, in a buffer of `buffer_size` bytes: what
    /// a kernel reading a view through its strides from `rel` binds.
    pub(crate) fn of_layout(layout: &Layout, es: u64, align: u64, buffer_size: u64) -> Span {
        Span::of(
            layout.offset() as u64,
            layout.span() as u64,
            es,
            align,
            buffer_size,
        )
    }

    pub(crate) fn bind(self, buffer: &wgpu::Buffer) -> Bind<'_> {
        Bind {
            buffer,
            offset: self.offset,
            size: self.size,
        }
    }
}

/// Output elements per window so that `len` consecutive elements of every operand (the
/// largest element `es_max` bytes), plus the alignment slack, fit `limit` bytes; a multiple
/// of `granule` (the kernel's workgroup size) so windows start on whole workgroups.
pub(crate) fn window_len(limit: u64, align: u64, es_max: u64, granule: u64) -> u64 {
    let len = (limit.saturating_sub(align + 4)) / es_max;
    (len / granule * granule).max(granule)
}

/// The error for an operand no window can bind: a strided view whose whole span exceeds one
/// binding.
pub(crate) fn too_wide(op: &'static str, bytes: u64, limit: u64) -> Error {
    Error::TooLarge {
        op,
        bytes,
        limit_name: "storage binding size (a strided operand larger than one binding)",
        limit,
    }
}

/// One operand of an elementwise op, as the windows see it.
pub(crate) struct Operand<'a> {
    pub buffer: &'a wgpu::Buffer,
    /// Element size in bytes.
    pub es: u64,
    /// Element index of the operand's first element (its layout offset).
    pub offset: u64,
    /// Packed in the output's element order: each window binds just its own elements.
    /// Otherwise (broadcast or strided) every window binds the operand's whole span.
    pub follows_output: bool,
    /// One past the last element index the operand reads (its layout's span).
    pub end: u64,
}

/// Runs `launch` once per window of `n` output elements, with each operand's binding range
/// for that window (in operand order): `launch(start, len, spans)`. Windows are a multiple
/// of `granule` elements and every range fits the device's binding limit, or this errors
/// (an operand read through strides whose whole span exceeds one binding).
pub(crate) fn for_windows(
    dev: &Device,
    op: &'static str,
    n: u64,
    operands: &[Operand],
    granule: u64,
    mut launch: impl FnMut(u64, u64, &[Span]) -> Result<()>,
) -> Result<()> {
    let (limit, align) = (dev.max_binding_bytes(), dev.storage_align());
    let es_max = operands.iter().map(|o| o.es).max().unwrap_or(4);
    let len = window_len(limit, align, es_max, granule);
    let mut fixed = Vec::with_capacity(operands.len());
    for o in operands {
        fixed.push(if o.follows_output {
            None
        } else {
            let sp = Span::of(o.offset, o.end, o.es, align, o.buffer.size());
            if sp.size > limit {
                return Err(too_wide(op, (o.end - o.offset) * o.es, limit));
            }
            Some(sp)
        });
    }
    let mut spans = Vec::with_capacity(operands.len());
    for (s, l) in windows(n, len) {
        spans.clear();
        for (o, f) in operands.iter().zip(&fixed) {
            spans.push(f.unwrap_or_else(|| {
                Span::of(o.offset + s, o.offset + s + l, o.es, align, o.buffer.size())
            }));
        }
        launch(s, l, &spans)?;
    }
    Ok(())
}

/// Elements of `es` bytes that one binding holds, less the alignment slack a window's binding
/// may start with.
pub(crate) fn binding_elems(dev: &Device, es: u64) -> u64 {
    dev.max_binding_bytes()
        .saturating_sub(dev.storage_align() + 4)
        / es
}

/// The input of an op over slabs, as [`for_slab_windows`] sees it.
pub(crate) struct SlabInput<'a> {
    pub buffer: &'a wgpu::Buffer,
    /// Element size in bytes.
    pub es: u64,
    /// Element index of the input's first element (its layout offset).
    pub offset: u64,
    /// One past the last element index the input reads (its layout's span).
    pub end: u64,
    /// Packed (contiguous): each window binds just its own slabs. Otherwise every window binds
    /// the input's whole span, which must fit one binding.
    pub packed: bool,
}

/// One window of [`for_slab_windows`].
pub(crate) struct SlabWindow {
    /// The window's first row.
    pub start: u64,
    /// The window's number of rows.
    pub rows: u64,
    /// Element index, in the packed order, of the window's first slab: kernels decode global
    /// coordinates, so a slab-windowed binding's offset is shifted back by it.
    pub slab_start: u64,
    /// One past the window's last slab element (packed order).
    pub slab_end: u64,
    /// The input's binding for this window.
    pub x: Span,
    /// The element offset the kernel adds to the input's global indices: the binding's `rel`,
    /// shifted back by `slab_start` (mod 2^32) for a packed input.
    pub x_offset: u32,
}

/// Runs `launch` once per window of `rows` rows of an op along one axis of an input viewed as
/// `[A, R, B]` (R the axis, of `len` elements; B the `inner` elements after it): row `i` is
/// `(i / inner, i % inner)` and reads the slab `i / inner`, `len * inner` consecutive elements
/// of a packed input. Windows hold whole multiples of `inner` rows, as many slabs as one
/// binding holds. `slabbed_output`: the output is laid out in slabs like the input (softmax),
/// so windows are sized by slabs even for a strided input; otherwise it holds one element per
/// row (a reduction) and a strided input's windows are sized by rows. Errors when one slab, or
/// a strided input's whole span, is past one binding.
#[allow(clippy::too_many_arguments)]
pub(crate) fn for_slab_windows(
    dev: &Device,
    op: &'static str,
    x: &SlabInput,
    rows: u64,
    len: u64,
    inner: u64,
    slabbed_output: bool,
    mut launch: impl FnMut(&SlabWindow) -> Result<()>,
) -> Result<()> {
    let (limit, align) = (dev.max_binding_bytes(), dev.storage_align());
    let cap = binding_elems(dev, x.es);
    let slab = len * inner;
    let size = x.buffer.size();
    let fixed = Span::of(x.offset, x.end, x.es, align, size);
    let by_slabs = x.packed || slabbed_output;
    let per = if by_slabs { cap / slab * inner } else { cap };
    if per == 0 || (!x.packed && fixed.size > limit) {
        let bytes = if per == 0 && by_slabs {
            slab * x.es
        } else {
            fixed.size
        };
        return Err(too_wide(op, bytes, limit));
    }
    for (start, n) in windows(rows, per) {
        let (a0, a1) = (start / inner, (start + n).div_ceil(inner));
        let (slab_start, slab_end) = (a0 * slab, a1 * slab);
        let (xs, x_offset) = if x.packed {
            let xs = Span::of(
                x.offset + slab_start,
                x.offset + slab_end,
                x.es,
                align,
                size,
            );
            (xs, (xs.rel as u32).wrapping_sub(slab_start as u32))
        } else {
            (fixed, fixed.rel as u32)
        };
        launch(&SlabWindow {
            start,
            rows: n,
            slab_start,
            slab_end,
            x: xs,
            x_offset,
        })?;
    }
    Ok(())
}

/// `[start, start + len)` windows covering `n` elements.
pub(crate) fn windows(n: u64, len: u64) -> impl Iterator<Item = (u64, u64)> {
    let len = len.max(1);
    (0..n.div_ceil(len)).map(move |w| {
        let s = w * len;
        (s, len.min(n - s))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_align_down_and_cover_the_range() {
        // f32 elements 10..20 with 32-byte alignment: bytes 40..80, binding from 32.
        let s = Span::of(10, 20, 4, 32, 1 << 20);
        assert_eq!(
            s,
            Span {
                offset: 32,
                size: 48,
                rel: 2
            }
        );
        // f16: sizes round up to 4 bytes; clamped to the buffer.
        let s = Span::of(3, 4, 2, 256, 8);
        assert_eq!(
            s,
            Span {
                offset: 0,
                size: 8,
                rel: 3
            }
        );
        // An empty range still binds 4 bytes.
        let s = Span::of(8, 8, 4, 16, 64);
        assert_eq!(
            s,
            Span {
                offset: 32,
                size: 4,
                rel: 0
            }
        );
    }

    #[test]
    fn windows_fit_the_limit_and_cover_everything() {
        let len = window_len(1024, 256, 4, 64);
        assert_eq!(len, 128);
        assert!(len * 4 + 256 <= 1024);
        let w: Vec<_> = windows(300, len).collect();
        assert_eq!(w, vec![(0, 128), (128, 128), (256, 44)]);
        assert_eq!(windows(0, 5).count(), 0);
        // Every window's span fits the limit whatever its start.
        for (s, l) in windows(10_000, len) {
            for off in [0u64, 3, 17, 255] {
                let sp = Span::of(off + s, off + s + l, 4, 256, u64::MAX / 2);
                assert!(sp.size <= 1024, "{sp:?}");
            }
        }
    }
}
