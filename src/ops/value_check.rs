//! Device-side value checks (shaders/value_check.wgsl): `binary_cross_entropy` launches one
//! small dispatch over its input and one over its target, as PyTorch checks that both hold
//! probabilities. An element outside the range, or NaN, records the first failure in the
//! device's error buffer, the one the index checks use (src/ops/index_check.rs), and the next
//! sync or readback reports it as `Err` naming the op, the operand and the value. Nothing
//! waits for the GPU at the op. `DeviceOptions::check_indices = false` skips these checks too.

use bytemuck::{Pod, Zeroable};

use crate::ops::activation::ACTIVATION;
use crate::runtime::pipeline::ShaderVariant;
use crate::runtime::{Access, Kernel};
use crate::{DType, Result, Tensor};

const WG: u32 = 64;

static CHECK: Kernel = Kernel::new(
    "value_check",
    include_str!("../../shaders/value_check.wgsl"),
    "value_check",
    &[Access::Read, Access::ReadWrite],
)
.libs(&[&ACTIVATION]);

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct CheckParams {
    numel: u32,
    offset: u32,
    op: u32,
    which: u32,
    lo: f32,
    hi: f32,
    _pad0: u32,
    _pad1: u32,
}

/// Checks on the device that every element of the float tensor `t` lies in `[lo, hi]` (NaN
/// fails); `which` numbers the operand for `op`'s error message (see
/// `Device::index_error`). A no-op when the device's `check_indices` option is off or `t` is
/// empty.
pub(crate) fn check_values(
    op: &'static str,
    t: &Tensor,
    which: u32,
    lo: f32,
    hi: f32,
) -> Result<()> {
    let dev = t.device();
    let n = t.numel();
    if !dev.options().check_indices || n == 0 {
        return Ok(());
    }
    let t = t.contiguous()?;
    let (code, err) = dev.index_check_target(op)?;
    let p = CheckParams {
        numel: n as u32,
        offset: t.layout.offset() as u32,
        op: code,
        which,
        lo,
        hi,
        _pad0: 0,
        _pad1: 0,
    };
    dev.launch(
        op,
        &CHECK,
        &[t.dtype],
        &[("WG", WG as f64)],
        bytemuck::bytes_of(&p),
        &[t.buffer(), &err],
        dev.grid_1d(op, (n as u64).div_ceil(WG as u64))?,
    )?;
    dev.note_index_check();
    Ok(())
}

/// The value_check family's entry in the kernel-family registry (`ops::families()`).
pub(crate) const FAMILY: crate::runtime::pipeline::Family = crate::runtime::pipeline::Family {
    name: "value_check",
    shaders: &["value_check.wgsl"],
    params: || vec![params_layout()],
    variants: value_check_variants,
};

#[doc(hidden)]
pub fn value_check_variants() -> Vec<ShaderVariant> {
    [DType::F32, DType::F16]
        .into_iter()
        .map(|dt| ShaderVariant::new(&CHECK, &[dt], &[("WG", WG as f64)]))
        .collect()
}

/// The params struct's layout, checked against the shader's `struct Params` in tests/shaders.rs.
#[doc(hidden)]
pub fn params_layout() -> crate::runtime::pipeline::ParamsLayout {
    crate::runtime::pipeline::params_layout!(
        CHECK,
        &[DType::F32],
        CheckParams {
            numel,
            offset,
            op,
            which,
            lo,
            hi,
            _pad0,
            _pad1
        }
    )
}
