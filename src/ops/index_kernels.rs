//! The index kernels (shaders/index.wgsl): `gather` and `scatter_add`, their params
//! and override constants, the shader variants and the params layout (used by ops/index.rs).

use bytemuck::{Pod, Zeroable};

use crate::layout::MAX_RANK;
use crate::ops::map::WG;
use crate::runtime::pipeline::ShaderVariant;
use crate::runtime::{Access, Kernel};
use crate::DType;

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
