//! The index kernels (shaders/index.wgsl): `gather` and `scatter_add`, their params
//! and override constants, the shader variants and the params layout (used by ops/index.rs),
//! and the gather's launch, which binds only the ranges its views span.

use bytemuck::{Pod, Zeroable};

use crate::layout::{pack_dims, Layout, MAX_RANK};
use crate::ops::map::WG;
use crate::runtime::pipeline::ShaderVariant;
use crate::runtime::window::Span;
use crate::runtime::{Access, Bind, Kernel};
use crate::{DType, Result, Tensor};

const SRC: &str = include_str!("../../shaders/index.wgsl");

use Access::{Read as R, ReadWrite as RW};

pub(crate) static GATHER: Kernel = Kernel::new("index", SRC, "gather", &[R, R, RW])
    .slots(&[1, 2, 4])
    .ints();
// Floats sum in f32, i32 data in i32 (the `FLOAT` override).
pub(crate) static SCATTER_ADD: Kernel = Kernel::new("index", SRC, "scatter_add", &[R, R, R, RW])
    .slots(&[1, 2, 3, 4])
    .ints();

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub(crate) struct IndexParams {
    pub(crate) numel: u32,
    pub(crate) rank: u32,
    pub(crate) dim: u32,
    pub(crate) len: u32,
    pub(crate) off_x: u32,
    pub(crate) off_i: u32,
    pub(crate) off_s: u32,
    pub(crate) skip: i32,
    pub(crate) shape: [u32; MAX_RANK],
    pub(crate) sx: [u32; MAX_RANK],
    pub(crate) si: [u32; MAX_RANK],
    pub(crate) ss: [u32; MAX_RANK],
    pub(crate) ishape: [u32; MAX_RANK],
}

pub(crate) fn overrides(dtype: DType, has_base: bool) -> [(&'static str, f64); 3] {
    [
        ("WG", WG as f64),
        ("FLOAT", dtype.is_float() as u32 as f64),
        ("HAS_BASE", has_base as u32 as f64),
    ]
}

/// `out[c] = x[c with c[dim] = index[c]]` over the output shape `il.shape()`, reading the index
/// through the layout `il` (possibly a broadcast view of `index`).
pub(crate) fn gather_forward(
    op: &'static str,
    x: &Tensor,
    dim: usize,
    il: &Layout,
    index: &Tensor,
) -> Result<Tensor> {
    let dev = x.device();
    let out = Tensor::empty(dev, op, il.shape(), x.dtype)?;
    let n = out.numel();
    if n == 0 {
        return Ok(out);
    }
    let mut p = IndexParams::zeroed();
    p.numel = n as u32;
    p.rank = il.rank() as u32;
    p.dim = dim as u32;
    p.len = x.shape().get(dim).copied().unwrap_or(1) as u32;
    // Only the elements the views span are bound: a layer of a KV cache or a window of a
    // long token tensor past one binding fits.
    let xs = x.view_span();
    let is = Span::of_layout(il, 4, dev.storage_align(), index.buffer().size());
    p.off_x = xs.rel as u32;
    p.off_i = is.rel as u32;
    p.shape = pack_dims(il.shape());
    p.sx = pack_dims(x.strides());
    p.si = pack_dims(il.strides());
    dev.launch_binds(
        op,
        &GATHER,
        &[x.dtype],
        &overrides(x.dtype, false),
        bytemuck::bytes_of(&p),
        &[
            xs.bind(x.buffer()),
            is.bind(index.buffer()),
            Bind::whole(out.buffer()),
        ],
        dev.grid_1d(op, (n as u64).div_ceil(WG as u64))?,
    )?;
    Ok(out)
}

/// The index family's entry in the kernel-family registry (`ops::families()`).
pub(crate) const FAMILY: crate::runtime::pipeline::Family = crate::runtime::pipeline::Family {
    name: "index",
    shaders: &["index.wgsl"],
    params: || vec![params_layout()],
    variants: index_variants,
};

/// Every (kernel, dtypes, override constants) combination of this family's kernels, for
/// tests/shaders.rs to translate and validate each.
#[doc(hidden)]
pub fn index_variants() -> Vec<ShaderVariant> {
    let mut v = Vec::new();
    for dt in [DType::F32, DType::F16, DType::I32] {
        v.push(ShaderVariant::new(&GATHER, &[dt], &overrides(dt, false)));
        for base in [false, true] {
            v.push(ShaderVariant::new(
                &SCATTER_ADD,
                &[dt],
                &overrides(dt, base),
            ));
        }
    }
    v
}

/// The params struct's layout, checked against the shader's `struct Params` in tests/shaders.rs.
#[doc(hidden)]
pub fn params_layout() -> crate::runtime::pipeline::ParamsLayout {
    crate::runtime::pipeline::params_layout!(
        GATHER,
        &[DType::F32],
        IndexParams {
            numel,
            rank,
            dim,
            len,
            off_x,
            off_i,
            off_s,
            skip,
            shape,
            sx,
            si,
            ss,
            ishape
        }
    )
}
