//! Device-side value checks (shaders/value_check.wgsl): `binary_cross_entropy` launches one
//! small dispatch over its input and one over its target, as PyTorch checks that both hold
//! probabilities. An element outside the range, or NaN, records the first failure in the
//! device's error buffer, the one the index checks use (src/ops/index_check.rs), and the next
//! sync or readback reports it as `Err` naming the op, the operand and the value. Nothing
//! waits for the GPU at the op. `DeviceOptions::check_indices = false` skips these checks too.

use bytemuck::{Pod, Zeroable};

use crate::ops::activation::ACTIVATION;
use crate::runtime::pipeline::ShaderVariant;
use crate::runtime::window::{for_windows, Operand};
use crate::runtime::{Access, Bind, Kernel};
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
    let t = t.contiguous_at_zero()?;
    let (code, err) = dev.index_check_target(op)?;
    let mut p = CheckParams {
        numel: 0,
        offset: 0,
        op: code,
        which,
        lo,
        hi,
        _pad0: 0,
        _pad1: 0,
    };
    // In windows of one binding each, as the elementwise ops that follow read the operand
    // (a view binds only its own span of a larger storage).
    let start = t.layout.offset() as u64;
    let operand = Operand {
        buffer: t.buffer(),
        es: t.dtype.size() as u64,
        offset: start,
        follows_output: true,
        end: start + n as u64,
    };
    for_windows(dev, op, n as u64, &[operand], WG as u64, |_, len, sp| {
        p.numel = len as u32;
        p.offset = sp[0].rel as u32;
        dev.launch_binds(
            op,
            &CHECK,
            &[t.dtype],
            &[("WG", WG as f64)],
            bytemuck::bytes_of(&p),
            &[sp[0].bind(t.buffer()), Bind::whole(&err)],
            dev.grid_1d(op, len.div_ceil(WG as u64))?,
        )
    })?;
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

/// Every (kernel, dtypes, override constants) combination of this family's kernels, for
/// tests/shaders.rs to translate and validate each.
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
