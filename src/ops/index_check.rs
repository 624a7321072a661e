//! Device-side index checks (shaders/index_check.wgsl): ops that take indices (gather,
//! index_select, embedding, scatter_add, one_hot, nll_loss and cross_entropy) launch one small
//! dispatch over their index tensor before the op itself. An index out of range records the
//! first failure in the device's error buffer; the next sync or readback reports it as
//! `Err` naming the op, the index and the size (`Device::take_index_error`), as PyTorch
//! raises. Nothing waits for the GPU at the op: the queue never stalls for a check.
//! `DeviceOptions::check_indices = false` skips the checks; out-of-range indices then read NaN
//! (0 for i32 data), add nothing, or give an all-zero one-hot row, as documented per op.

use bytemuck::{Pod, Zeroable};

use crate::runtime::pipeline::ShaderVariant;
use crate::runtime::{Access, Kernel};
use crate::{DType, Result, Tensor};

const WG: u32 = 64;

static CHECK: Kernel = Kernel::new(
    "index_check",
    include_str!("../../shaders/index_check.wgsl"),
    "index_check",
    &[Access::Read, Access::ReadWrite],
)
.ints();

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct CheckParams {
    numel: u32,
    offset: u32,
    size: u32,
    op: u32,
    dim: u32,
    ignore: i32,
    flags: u32,
    _pad: u32,
}

/// Checks that every element of the i32 `index` lies in `[0, size)` (or equals `ignore`), for
/// `op`'s `dim`. A no-op when the device's `check_indices` option is off or `index` is empty.
pub(crate) fn check_indices(
    op: &'static str,
    index: &Tensor,
    size: usize,
    dim: usize,
    ignore: Option<i32>,
) -> Result<()> {
    let dev = index.device();
    let n = index.numel();
    if !dev.options().check_indices || n == 0 {
        return Ok(());
    }
    let idx = index.contiguous_at_zero()?;
    let (code, err) = dev.index_check_target(op)?;
    let p = CheckParams {
        numel: n as u32,
        offset: idx.layout.offset() as u32,
        size: size.min(u32::MAX as usize) as u32,
        op: code,
        dim: dim as u32,
        ignore: ignore.unwrap_or(0),
        flags: ignore.is_some() as u32,
        _pad: 0,
    };
    dev.launch(
        op,
        &CHECK,
        &[DType::I32],
        &[("WG", WG as f64)],
        bytemuck::bytes_of(&p),
        &[idx.buffer(), &err],
        dev.grid_1d(op, (n as u64).div_ceil(WG as u64))?,
    )?;
    dev.note_index_check();
    Ok(())
}

/// The index_check family's entry in the kernel-family registry (`ops::families()`).
pub(crate) const FAMILY: crate::runtime::pipeline::Family = crate::runtime::pipeline::Family {
    name: "index_check",
    shaders: &["index_check.wgsl"],
    params: || vec![params_layout()],
    variants: index_check_variants,
};

/// Every (kernel, dtypes, override constants) combination of this family's kernels, for
/// tests/shaders.rs to translate and validate each.
#[doc(hidden)]
pub fn index_check_variants() -> Vec<ShaderVariant> {
    vec![ShaderVariant::new(
        &CHECK,
        &[DType::I32],
        &[("WG", WG as f64)],
    )]
}

/// The params struct's layout, checked against the shader's `struct Params` in tests/shaders.rs.
#[doc(hidden)]
pub fn params_layout() -> crate::runtime::pipeline::ParamsLayout {
    crate::runtime::pipeline::params_layout!(
        CHECK,
        &[DType::I32],
        CheckParams {
            numel,
            offset,
            size,
            op,
            dim,
            ignore,
            flags,
            _pad
        }
    )
}
