//! The GPU path of `contiguous()` and `to_dtype()` for a view whose last two dims are
//! transposed (`x.transpose(-2, -1).contiguous()`, shaders/transpose.wgsl): a 32x32 tile
//! through workgroup memory, so both the reads and the writes are coalesced, batched over the
//! leading dims. The map kernel's strided copy reads such a view `ld` elements apart per
//! invocation, which leaves most of a GPU's bandwidth unused.
//!
//! Chosen by [`plan`] from [`Caps`]: never on a CPU adapter (lavapipe keeps the map kernel,
//! whose workgroups run without barriers there), and only for views whose second-to-last dim
//! has unit stride, whose leading dims collapse to one batch stride, and whose input span and
//! output each fit one storage binding; every other strided copy keeps the map kernel.

use bytemuck::{Pod, Zeroable};

use crate::layout::Layout;
use crate::runtime::pipeline::ShaderVariant;
use crate::runtime::window::Span;
use crate::runtime::{Access, Caps, Kernel};
use crate::{DType, Result, Tensor};

const SRC: &str = include_str!("../../shaders/transpose.wgsl");
/// The tile's side (the shader's `TILE`).
const TILE: u64 = 32;
/// Smallest transposed dims worth a tile: below it the map kernel's strided copy is as good.
const MIN_DIM: usize = 8;

static TRANSPOSE: Kernel = Kernel::new(
    "transpose",
    SRC,
    "transpose_tile",
    &[Access::Read, Access::ReadWrite],
)
.ints();

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct TransposeParams {
    rows: u32,
    cols: u32,
    batch: u32,
    src_off: u32,
    ld: u32,
    sb: u32,
    _pad0: u32,
    _pad1: u32,
}

/// A transposed copy: output `[batch, rows, cols]` element `(b, i, j)` reads input element
/// `offset + b * sb + i + j * ld`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransposePlan {
    /// Product of the leading dims.
    pub batch: usize,
    /// The second-to-last dim (unit stride in the input).
    pub rows: usize,
    /// The last dim.
    pub cols: usize,
    /// The input's stride along the last dim.
    pub ld: usize,
    /// The input's stride between batch entries (0 for one).
    pub sb: usize,
}

/// The tiled plan for a packed copy of the view `l` on an adapter with `caps`, or `None` (the
/// map kernel copies it).
pub fn plan(caps: &Caps, l: &Layout) -> Option<TransposePlan> {
    let r = l.rank();
    if caps.cpu || r < 2 {
        return None;
    }
    let (shape, strides) = (l.shape(), l.strides());
    let (rows, cols) = (shape[r - 2], shape[r - 1]);
    if rows < MIN_DIM || cols < MIN_DIM || strides[r - 2] != 1 || strides[r - 1] == 1 {
        return None;
    }
    // The leading dims must step through the input with one stride: each non-unit dim's
    // stride is the next non-unit dim's stride times its size.
    let mut sb = 0;
    let mut next: Option<(usize, usize)> = None;
    for k in (0..r - 2).rev() {
        if shape[k] == 1 {
            continue;
        }
        match next {
            None => sb = strides[k],
            Some((n, s)) if strides[k] == n * s => {}
            Some(_) => return None,
        }
        next = Some((shape[k], strides[k]));
    }
    let batch: usize = shape[..r - 2].iter().product();
    let tiles = |d: usize| (d as u64).div_ceil(TILE);
    let max = u64::from(caps.max_workgroups_per_dim);
    if batch as u64 > max || tiles(rows) > max || tiles(cols) > max {
        return None;
    }
    Some(TransposePlan {
        batch,
        rows,
        cols,
        ld: strides[r - 1],
        sb,
    })
}

/// Copies `x` into the packed `out` (dtype `out.dtype`) through tiles when [`plan`] allows and
/// both bindings fit; returns whether it did.
pub(crate) fn try_copy(op: &'static str, x: &Tensor, out: &Tensor) -> Result<bool> {
    let dev = x.device();
    let Some(pl) = plan(dev.caps(), &x.layout) else {
        return Ok(false);
    };
    let (limit, align) = (dev.max_binding_bytes(), dev.storage_align());
    let l = &x.layout;
    let xs = x.view_span();
    let n = out.numel() as u64;
    let ys = Span::of(0, n, out.dtype.size() as u64, align, out.buffer().size());
    if xs.size > limit || ys.size > limit || l.span() as u64 >= u64::from(u32::MAX) {
        return Ok(false);
    }
    let params = TransposeParams {
        rows: pl.rows as u32,
        cols: pl.cols as u32,
        batch: pl.batch as u32,
        src_off: xs.rel as u32,
        ld: pl.ld as u32,
        sb: pl.sb as u32,
        _pad0: 0,
        _pad1: 0,
    };
    let grid = [
        (pl.cols as u64).div_ceil(TILE) as u32,
        (pl.rows as u64).div_ceil(TILE) as u32,
        pl.batch as u32,
    ];
    dev.launch_binds(
        op,
        &TRANSPOSE,
        &[x.dtype, out.dtype],
        &[],
        bytemuck::bytes_of(&params),
        &[xs.bind(x.buffer()), ys.bind(out.buffer())],
        grid,
    )?;
    Ok(true)
}

/// The transpose family's entry in the kernel-family registry (`ops::families()`).
pub(crate) const FAMILY: crate::runtime::pipeline::Family = crate::runtime::pipeline::Family {
    name: "transpose",
    shaders: &["transpose.wgsl"],
    params: || vec![params_layout()],
    variants: transpose_variants,
};

/// Copies of every dtype and the casts `to_dtype` makes.
#[doc(hidden)]
pub fn transpose_variants() -> Vec<ShaderVariant> {
    let (f32_, f16_, i32_) = (DType::F32, DType::F16, DType::I32);
    [
        [f32_, f32_],
        [f16_, f16_],
        [i32_, i32_],
        [f32_, f16_],
        [f16_, f32_],
        [i32_, f32_],
        [f32_, i32_],
        [i32_, f16_],
        [f16_, i32_],
    ]
    .iter()
    .map(|dts| ShaderVariant::new(&TRANSPOSE, dts, &[]))
    .collect()
}

/// The params struct's layout, checked against the shader's `struct Params` in tests/shaders.rs.
#[doc(hidden)]
pub fn params_layout() -> crate::runtime::pipeline::ParamsLayout {
    crate::runtime::pipeline::params_layout!(
        TRANSPOSE,
        &[DType::F32, DType::F32],
        TransposeParams {
            rows,
            cols,
            batch,
            src_off,
            ld,
            sb,
            _pad0,
            _pad1
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(shape: &[usize], perm: &[usize]) -> Layout {
        Layout::contiguous(shape).permute(perm).unwrap()
    }

    #[test]
    fn transposed_last_dims_get_tiles_on_gpus_only() {
        let gpu = Caps::test_gpu();
        let l = view(&[64, 48], &[1, 0]);
        let want = TransposePlan {
            batch: 1,
            rows: 48,
            cols: 64,
            ld: 48,
            sb: 0,
        };
        assert_eq!(plan(&gpu, &l), Some(want));
        assert_eq!(plan(&Caps::test_lavapipe(8), &l), None);
        // Batched: [3, 5, 64, 48] -> transpose(-2, -1).
        let l = view(&[3, 5, 64, 48], &[0, 1, 3, 2]);
        let p = plan(&gpu, &l).unwrap();
        assert_eq!(
            (p.batch, p.rows, p.cols, p.ld, p.sb),
            (15, 48, 64, 48, 64 * 48)
        );
    }

    #[test]
    fn other_strided_views_keep_the_map_kernel() {
        let gpu = Caps::test_gpu();
        // Contiguous, too small, or leading dims that do not collapse.
        assert_eq!(plan(&gpu, &Layout::contiguous(&[64, 64])), None);
        assert_eq!(plan(&gpu, &view(&[4, 64], &[1, 0])), None);
        assert_eq!(plan(&gpu, &view(&[3, 64, 5, 48], &[0, 2, 3, 1])), None);
    }
}
