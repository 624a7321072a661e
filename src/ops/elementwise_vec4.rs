//! The GPU variants of the contiguous maps and binaries (`main_vec4*` in shaders/map.wgsl and
//! shaders/binary.wgsl): each invocation loads and stores `vec4<T>` and walks a grid-stride
//! loop, the grid at most a fixed number of workgroups ([`VEC4_GROUPS`]) rather than one
//! invocation per element, each invocation loading [`UNROLL`] vec4s before it stores any. On a
//! GPU that is what reaches the memory bandwidth: one scalar load per invocation leaves most
//! of it unused.
//!
//! Chosen by [`plan_body`] from [`Caps`]: never on a CPU adapter (lavapipe keeps the scalar
//! kernels, which it vectorizes across invocations itself), and only when every operand is
//! packed in the output's order from an offset that is a multiple of 4 elements (so each
//! binding starts on a whole vec4: 16 bytes for f32 and i32, 8 for f16). The vec4 kernel
//! covers a prefix of the elements, the *body*, a multiple of 4 elements that also ends on a
//! binding-aligned byte of the output; the scalar kernel then does the rest (fewer than
//! `max(4, align / es)` elements) with its output binding starting exactly there. Tensors
//! larger than one binding run in windows like the scalar kernels
//! ([`for_windows`](crate::runtime::window::for_windows)); every window starts on a multiple of
//! 4 elements, so each operand's binding does too. The per-lane math is the scalar kernel's
//! `apply` / `combine`, so results (NaN included) are the same.

use crate::ops::activation::ACTIVATION;
use crate::ops::elementwise_params::{BinaryParams, Donated, MapParams, BINARY_DEFS, MAP_DEFS};
use crate::ops::wg::WG;
use crate::runtime::pipeline::ShaderVariant;
use crate::runtime::window::{for_windows, Operand, Span};
use crate::runtime::Caps;
use crate::runtime::{Access, Kernel};
use crate::{DType, Result, Tensor};

use Access::{Read as R, ReadWrite as RW};

const MAP_SRC: &str = include_str!("../../shaders/map.wgsl");
const BINARY_SRC: &str = include_str!("../../shaders/binary.wgsl");

/// Workgroups of a vec4 dispatch (at most): 2048 x 256 invocations, a few waves on the largest
/// GPUs; each invocation loops over the vec4s past the grid.
pub const VEC4_GROUPS: u64 = 2048;

pub(crate) static MAP_VEC4: Kernel = Kernel::new("map", MAP_SRC, "main_vec4", &[R, RW])
    .slots(&[4, 5])
    .libs(&[&ACTIVATION])
    .defs(MAP_DEFS)
    .ints();
pub(crate) static MAP_VEC4_INPLACE: Kernel =
    Kernel::new("map", MAP_SRC, "main_vec4_inplace", &[RW])
        .slots(&[6])
        .libs(&[&ACTIVATION])
        .defs(MAP_DEFS);
static BINARY_VEC4: Kernel = Kernel::new("binary", BINARY_SRC, "main_vec4", &[R, R, RW])
    .slots(&[5, 6, 7])
    .libs(&[&ACTIVATION])
    .defs(BINARY_DEFS);
static BINARY_VEC4_INPLACE_A: Kernel =
    Kernel::new("binary", BINARY_SRC, "main_vec4_inplace_a", &[R, RW])
        .slots(&[6, 8])
        .libs(&[&ACTIVATION])
        .defs(BINARY_DEFS);
static BINARY_VEC4_INPLACE_B: Kernel =
    Kernel::new("binary", BINARY_SRC, "main_vec4_inplace_b", &[R, RW])
        .slots(&[5, 8])
        .libs(&[&ACTIVATION])
        .defs(BINARY_DEFS);

static BINARY_VEC4_BCAST: Kernel =
    Kernel::new("binary", BINARY_SRC, "main_vec4_bcast", &[R, R, RW])
        .slots(&[5, 6, 7])
        .libs(&[&ACTIVATION])
        .defs(BINARY_DEFS);

/// How a broadcast operand repeats along the flat output index `i` (row-major order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bcast {
    /// Element `i % period` (a bias over rows: `[N, C] + [C]`).
    Rows { period: usize },
    /// Element `(i / run) % period` (a bias over planes: `[N, C, H, W] + [C, 1, 1]`; a scalar
    /// is `period` 1).
    Runs { period: usize, run: usize },
}

/// The pattern of a view of `shape` and `strides` (broadcast to the output's shape, zero
/// strides on broadcast dims) whose elements are read in the output's order, or `None` when it
/// is none of [`Bcast`]'s (or packed like the output).
pub fn bcast_pattern(shape: &[usize], strides: &[usize]) -> Option<Bcast> {
    // Merge adjacent dims laid out as one (zero strides merge with zero strides).
    let mut dims: Vec<(usize, usize)> = Vec::new();
    for (&d, &st) in shape.iter().zip(strides) {
        if d == 1 {
            continue;
        }
        match dims.last_mut() {
            Some(last) if last.1 == st * d => *last = (last.0 * d, st),
            _ => dims.push((d, st)),
        }
    }
    match dims[..] {
        [(_, 0), (period, 1)] => Some(Bcast::Rows { period }),
        [(period, 1), (run, 0)] | [(_, 0), (period, 1), (run, 0)] => {
            Some(Bcast::Runs { period, run })
        }
        [(run, 0)] => Some(Bcast::Runs { period: 1, run }),
        _ => None,
    }
}

/// The vec4 broadcast kernel's launch, when it applies: a GPU, f32 or f16, a fresh output,
/// every buffer within one binding, one operand packed like the output from an offset that is
/// a multiple of 4, the other in a [`Bcast`] pattern whose rows (from a vec4-aligned offset)
/// or runs are multiples of 4 elements. Returns whether it ran (then it wrote every element).
#[allow(clippy::too_many_arguments)]
pub(crate) fn binary_bcast(
    op: &'static str,
    code: u32,
    x: &Tensor,
    y: &Tensor,
    la: &crate::layout::Layout,
    lb: &crate::layout::Layout,
    out: &Tensor,
    params: &mut BinaryParams,
) -> Result<bool> {
    let dev = x.device();
    let total = out.numel() as u64;
    let limit = dev.max_binding_bytes();
    if dev.caps().cpu
        || !matches!(x.dtype, DType::F32 | DType::F16)
        || !total.is_multiple_of(4)
        || total / 4 > u32::MAX as u64
        || [x, y, out].iter().any(|t| t.buffer().size() > limit)
    {
        return Ok(false);
    }
    // (full, small) in operand order, and whether the full one is a.
    let (full, small, fl, sl, full_is_a) = if la.is_contiguous() {
        (x, y, la, lb, true)
    } else if lb.is_contiguous() {
        (y, x, lb, la, false)
    } else {
        return Ok(false);
    };
    let (foff, soff) = (fl.offset() as u64, sl.offset() as u64);
    if foff % 4 != 0 {
        return Ok(false);
    }
    let (pattern, period, run, off_b) = match bcast_pattern(sl.shape(), sl.strides()) {
        Some(Bcast::Rows { period }) if period % 4 == 0 && soff % 4 == 0 => {
            (1, period, 1, soff / 4)
        }
        Some(Bcast::Runs { period, run }) if run % 4 == 0 => (2, period, run, soff),
        _ => return Ok(false),
    };
    if [period, run].iter().any(|&v| v as u64 > u32::MAX as u64) || off_b > u32::MAX as u64 {
        return Ok(false);
    }
    let n4 = total / 4;
    params.numel = n4 as u32;
    params.off_a = (foff / 4) as u32;
    params.off_b = off_b as u32;
    params.base = 0;
    params.shape[0] = pattern;
    params.shape[1] = period as u32;
    params.shape[2] = run as u32;
    params.shape[3] = full_is_a as u32;
    let consts = [("OP", code as f64), ("WG", WG as f64)];
    let binds = [full.buffer(), small.buffer(), out.buffer()];
    dev.launch(
        op,
        &BINARY_VEC4_BCAST,
        &[x.dtype],
        &consts,
        bytemuck::bytes_of(params),
        &binds,
        dev.grid_1d(op, vec4_groups(n4))?,
    )?;
    Ok(true)
}

/// Elements of an `n`-element contiguous op the vec4 kernel covers (0: the scalar kernel does
/// everything): on a GPU, with every operand's element offset (`offsets`) a multiple of 4, the
/// largest multiple of `max(4, align / out_es)` elements (`align` the storage-binding offset
/// alignment in bytes, `out_es` the output's element size) not past `n`, so the scalar
/// kernel's output binding for the rest starts on an aligned byte.
pub fn plan_body(caps: &Caps, n: u64, offsets: &[u64], out_es: u64, align: u64) -> u64 {
    if caps.cpu || offsets.iter().any(|o| o % 4 != 0) {
        return 0;
    }
    let g = (align / out_es.max(1)).max(4);
    n / g * g
}

/// vec4s an invocation loads before it stores any (the shaders' `const UNROLL`, map.wgsl and
/// binary.wgsl; a unit test checks both): more bytes in flight per invocation than a grid a
/// GPU can hold at once would keep with one.
pub(crate) const UNROLL: u64 = 4;

/// Workgroups for `n4` vec4s: [`UNROLL`] vec4s per invocation up to [`VEC4_GROUPS`]
/// workgroups.
pub fn vec4_groups(n4: u64) -> u64 {
    n4.div_ceil(WG as u64 * UNROLL).clamp(1, VEC4_GROUPS)
}

/// Runs `launch(n4, spans)` per window of the `body` elements (a multiple of 4), the spans'
/// `rel` all multiples of 4.
fn vec4_windows(
    x: &Tensor,
    op: &'static str,
    body: u64,
    operands: &[Operand],
    mut launch: impl FnMut(u64, &[Span]) -> Result<()>,
) -> Result<()> {
    for_windows(x.device(), op, body, operands, 4, |_, len, sp| {
        debug_assert!(len % 4 == 0 && sp.iter().all(|s| s.rel % 4 == 0));
        launch(len / 4, sp)
    })
}

/// A packed operand of `n` elements from element `offset`.
fn packed(t: &Tensor, offset: u64, n: u64) -> Operand<'_> {
    Operand {
        buffer: t.buffer(),
        es: t.dtype.size() as u64,
        offset,
        follows_output: true,
        end: offset + n,
    }
}

/// The map kernel's vec4 body over a packed input `x` (offset a multiple of 4) into `out`
/// (packed from 0), or over `x`'s own buffer when `out` is `None` (a donated input, packed
/// from 0, `dts[0] == dts[1]`). Returns the elements done (0 when the scalar kernel should do
/// all of them).
pub(crate) fn map_body(
    op: &'static str,
    x: &Tensor,
    out: Option<&Tensor>,
    dts: &[DType; 2],
    code: u32,
    params: &mut MapParams,
) -> Result<u64> {
    let dev = x.device();
    let n = x.numel() as u64;
    let off = x.layout.offset() as u64;
    let body = plan_body(
        dev.caps(),
        n,
        &[off],
        dts[1].size() as u64,
        dev.storage_align(),
    );
    if body == 0 {
        return Ok(0);
    }
    let mut operands = vec![packed(x, off, n)];
    if let Some(o) = out {
        operands.push(packed(o, 0, n));
    }
    let kernel = if out.is_some() {
        &MAP_VEC4
    } else {
        &MAP_VEC4_INPLACE
    };
    let consts = [("OP", code as f64), ("WG", WG as f64)];
    vec4_windows(x, op, body, &operands, |n4, sp| {
        params.numel = n4 as u32;
        params.offset = (sp[0].rel / 4) as u32;
        params.base = sp.get(1).map_or(0, |s| (s.rel / 4) as u32);
        let mut binds = vec![sp[0].bind(x.buffer())];
        if let Some(o) = out {
            binds.push(sp[1].bind(o.buffer()));
        }
        dev.launch_binds(
            op,
            kernel,
            dts,
            &consts,
            bytemuck::bytes_of(params),
            &binds,
            dev.grid_1d(op, vec4_groups(n4))?,
        )
    })?;
    Ok(body)
}

/// The binary kernel's vec4 body over `n` elements: `x` and `y` packed with the output's
/// shape from offsets `offs` (multiples of 4 for the vec4 path), written to `out` (packed from 0) or, for `out`
/// `None`, into the donated operand `side`. Returns the elements done (0: none).
#[allow(clippy::too_many_arguments)]
pub(crate) fn binary_body(
    op: &'static str,
    code: u32,
    x: &Tensor,
    y: &Tensor,
    n: u64,
    offs: [u64; 2],
    out: Option<&Tensor>,
    side: Option<Donated>,
    params: &mut BinaryParams,
) -> Result<u64> {
    let dev = x.device();
    let body = plan_body(
        dev.caps(),
        n,
        &offs,
        x.dtype.size() as u64,
        dev.storage_align(),
    );
    if body == 0 {
        return Ok(0);
    }
    let mut operands = vec![packed(x, offs[0], n), packed(y, offs[1], n)];
    if let Some(o) = out {
        operands.push(packed(o, 0, n));
    }
    let kernel = match (out, side) {
        (Some(_), _) => &BINARY_VEC4,
        (None, Some(Donated::A)) => &BINARY_VEC4_INPLACE_A,
        (None, _) => &BINARY_VEC4_INPLACE_B,
    };
    let consts = [("OP", code as f64), ("WG", WG as f64)];
    vec4_windows(x, op, body, &operands, |n4, sp| {
        params.numel = n4 as u32;
        params.off_a = (sp[0].rel / 4) as u32;
        params.off_b = (sp[1].rel / 4) as u32;
        params.base = sp.get(2).map_or(0, |s| (s.rel / 4) as u32);
        let (ba, bb) = (sp[0].bind(x.buffer()), sp[1].bind(y.buffer()));
        let binds = match (out, side) {
            (Some(o), _) => vec![ba, bb, sp[2].bind(o.buffer())],
            (None, Some(Donated::A)) => vec![bb, ba],
            (None, _) => vec![ba, bb],
        };
        dev.launch_binds(
            op,
            kernel,
            &[x.dtype],
            &consts,
            bytemuck::bytes_of(params),
            &binds,
            dev.grid_1d(op, vec4_groups(n4))?,
        )
    })?;
    Ok(body)
}

/// The map family's vec4 variants: every module (dtype pair) the scalar variants compile also
/// carries both vec4 entry points.
pub(crate) fn map_vec4_variants(
    float_pairs: &[[DType; 2]],
    int_pairs: &[[DType; 2]],
) -> Vec<ShaderVariant> {
    let mut v = Vec::new();
    let wg = ("WG", WG as f64);
    for dts in float_pairs {
        for &(_, code) in MAP_DEFS {
            v.push(ShaderVariant::new(
                &MAP_VEC4,
                dts,
                &[("OP", code as f64), wg],
            ));
        }
    }
    for dts in int_pairs {
        v.push(ShaderVariant::new(&MAP_VEC4, dts, &[("OP", 0.0), wg]));
    }
    for dt in [DType::F32, DType::F16] {
        for &(_, code) in &MAP_DEFS[1..] {
            v.push(ShaderVariant::new(
                &MAP_VEC4_INPLACE,
                &[dt, dt],
                &[("OP", code as f64), wg],
            ));
        }
    }
    for dts in float_pairs.iter().chain(int_pairs) {
        if dts[0] != dts[1] || dts[0] == DType::I32 {
            v.push(ShaderVariant::new(
                &MAP_VEC4_INPLACE,
                dts,
                &[("OP", 1.0), wg],
            ));
        }
    }
    v
}

/// The binary family's vec4 variants.
pub(crate) fn binary_vec4_variants() -> Vec<ShaderVariant> {
    let mut v = Vec::new();
    for dt in [DType::F32, DType::F16] {
        for &(_, code) in BINARY_DEFS {
            for k in [
                &BINARY_VEC4,
                &BINARY_VEC4_INPLACE_A,
                &BINARY_VEC4_INPLACE_B,
                &BINARY_VEC4_BCAST,
            ] {
                v.push(ShaderVariant::new(
                    k,
                    &[dt],
                    &[("OP", code as f64), ("WG", WG as f64)],
                ));
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_adapters_keep_the_scalar_kernel() {
        assert_eq!(plan_body(&Caps::test_lavapipe(8), 1 << 20, &[0], 4, 256), 0);
    }

    #[test]
    fn body_is_a_multiple_of_4_ending_on_an_aligned_byte() {
        let gpu = Caps::test_gpu();
        // f32 with 256-byte alignment: multiples of 64 elements.
        assert_eq!(plan_body(&gpu, 1000, &[0], 4, 256), 960);
        assert_eq!(plan_body(&gpu, 1024, &[0, 8], 4, 256), 1024);
        // f16: multiples of 128; small alignments still multiples of 4.
        assert_eq!(plan_body(&gpu, 1000, &[0], 2, 256), 896);
        assert_eq!(plan_body(&gpu, 1001, &[4], 4, 4), 1000);
        // Too small for one granule, or an offset off the vec4 grid: all scalar.
        assert_eq!(plan_body(&gpu, 63, &[0], 4, 256), 0);
        assert_eq!(plan_body(&gpu, 1 << 20, &[0, 2], 4, 256), 0);
    }

    #[test]
    fn broadcast_patterns() {
        // [N, C] + [C]: rows of C.
        assert_eq!(
            bcast_pattern(&[8, 12], &[0, 1]),
            Some(Bcast::Rows { period: 12 })
        );
        // [N, C, H, W] + [C, 1, 1]: runs of H*W over a period of C.
        assert_eq!(
            bcast_pattern(&[2, 3, 4, 5], &[0, 1, 0, 0]),
            Some(Bcast::Runs { period: 3, run: 20 })
        );
        // [N, C] + [N, 1]: runs of C, period N (no outer repeat).
        assert_eq!(
            bcast_pattern(&[6, 8], &[1, 0]),
            Some(Bcast::Runs { period: 6, run: 8 })
        );
        // A scalar; size-1 dims are ignored.
        assert_eq!(
            bcast_pattern(&[4, 1, 6], &[0, 0, 0]),
            Some(Bcast::Runs { period: 1, run: 24 })
        );
        // Two levels ([B, T, C] + [B, 1, C]), a transposed view, a packed view: none.
        assert_eq!(bcast_pattern(&[2, 3, 4], &[4, 0, 1]), None);
        assert_eq!(bcast_pattern(&[4, 4], &[1, 4]), None);
        assert_eq!(bcast_pattern(&[4, 4], &[4, 1]), None);
    }

    #[test]
    fn the_grid_is_capped() {
        assert_eq!(vec4_groups(1), 1);
        assert_eq!(vec4_groups(256 * 4 * 10), 10);
        assert_eq!(vec4_groups(256 * 4 * 10 + 1), 11);
        assert_eq!(vec4_groups(1 << 24), VEC4_GROUPS);
        for src in [MAP_SRC, BINARY_SRC] {
            assert!(src.contains(&format!("const UNROLL: u32 = {UNROLL}u;")));
        }
    }
}
