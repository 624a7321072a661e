//! Layer norm, group norm and RMS norm (shaders/norm.wgsl), PyTorch's `F.layer_norm`,
//! `F.group_norm` and `F.rms_norm`: each normalizes contiguous rows of the packed input (one
//! workgroup per row, statistics in f32 with fixed-order workgroup reductions; one invocation
//! per row for rows of at most 32 values; on GPUs, few long rows split into segments whose
//! partial statistics merge in order), then applies the per-channel affine; f16 storage
//! computes in f32. The backward is fused too: the input gradient per row from the saved mean
//! / rstd, and the weight and bias gradients as a column reduction over rows in a fixed order
//! (deterministic, no atomics).

use bytemuck::{Pod, Zeroable};

use crate::autograd::{record, BackwardOp, NoGradGuard};
use crate::ops::activation::ACTIVATION;
use crate::ops::norm_checks::{check_group, check_trailing};
use crate::ops::reduce_plan::split_long_rows;
use crate::ops::saved_inputs::saving_inputs;
use crate::runtime::pipeline::{ShaderLib, ShaderVariant};
use crate::runtime::{Access, Bind, Kernel};
use crate::{DType, Error, Result, Tensor};
use Access::{Read as R, ReadWrite as RW};

const SRC: &str = include_str!("../../shaders/norm.wgsl");
/// Invocations per workgroup: one 8-lane SIMD register on CPU adapters (a wider workgroup
/// pays a context switch per barrier there), 64 on GPUs.
const CPU_WG: u32 = 8;
const GPU_WG: u32 = 64;

fn wg(dev: &crate::Device) -> u32 {
    [GPU_WG, CPU_WG][usize::from(dev.caps().cpu)]
}

/// rsqrt_f, the guarded `1 / sqrt`.
const LIBS: &[&ShaderLib] = &[&ACTIVATION];

/// A kernel of norm.wgsl: `entry` with its bindings' access and slots, the activation lib.
const fn norm_kernel(
    entry: &'static str,
    access: &'static [Access],
    slots: &'static [u32],
) -> Kernel {
    Kernel::new("norm", SRC, entry, access)
        .slots(slots)
        .libs(LIBS)
}

/// Forward and dx kernels: three inputs (x, weight or dy, bias or saved stats), two outputs.
const IN3_OUT2: &[Access] = &[R, R, R, RW, RW];
/// Weight-gradient kernels: two inputs, three outputs.
const IN2_OUT3: &[Access] = &[R, R, RW, RW, RW];
/// The split second passes: three inputs, the output, the statistics and the partials.
const IN3_OUT3: &[Access] = &[R, R, R, RW, RW, RW];

static FWD: Kernel = norm_kernel("norm_fwd", IN3_OUT2, &[1, 2, 3, 5, 6]);
static DX: Kernel = norm_kernel("norm_dx", IN3_OUT2, &[1, 2, 4, 5, 6]);
static FWD_ROWS: Kernel = norm_kernel("norm_fwd_rows", IN3_OUT2, &[1, 2, 3, 5, 6]);
static DX_ROWS: Kernel = norm_kernel("norm_dx_rows", IN3_OUT2, &[1, 2, 4, 5, 6]);
static DW: Kernel = norm_kernel("norm_dw", IN2_OUT3, &[1, 4, 5, 6, 7]);
static DW_COLS: Kernel = norm_kernel("norm_dw_cols", IN2_OUT3, &[1, 4, 5, 6, 7]);
/// The split row kernels (few long rows on GPUs): partials of each (row, segment) into
/// `parts`, then each segment normalized (or differentiated) from its row's merged partials.
static FWD_PART: Kernel = norm_kernel("norm_fwd_part", &[R, RW], &[1, 8]);
static FWD_SPLIT: Kernel = norm_kernel("norm_fwd_split", IN3_OUT3, &[1, 2, 3, 5, 6, 8]);
static DX_PART: Kernel = norm_kernel("norm_dx_part", &[R, R, R, RW, RW], &[1, 2, 4, 6, 8]);
static DX_SPLIT: Kernel = norm_kernel("norm_dx_split", IN3_OUT3, &[1, 2, 4, 5, 6, 8]);

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct NormParams {
    rows: u32,
    len: u32,
    groups: u32,
    inner: u32,
    eps: f32,
    flags: u32,
    nweights: u32,
    per_group: u32,
    segs: u32,
    seg_len: u32,
    pad0: u32,
    pad1: u32,
}

/// Which normalization, and how its rows and weights lie in the packed input.
#[derive(Clone, Copy, Debug)]
struct Plan {
    op: &'static str,
    /// Normalization groups (rows) and values per row.
    rows: usize,
    len: usize,
    /// Group norm's G and plane size (1 and 1 for layer / RMS norm).
    groups: usize,
    inner: usize,
    /// Elements of the weight (and bias).
    nweights: usize,
    rms: bool,
    eps: f32,
}

/// Whether the weight gradients run one invocation per weight (`norm_dw_cols`, walking its
/// column of rows: reads coalesced across weights) rather than a workgroup per weight
/// (`norm_dw`). Only with one value per row and weight (layer and RMS norm); on GPUs only
/// for columns of at most 256 rows, since a transformer's [8192, 768] activations would give
/// 768 invocations walking 8192 rows each, a sliver of the device.
fn per_weight_invocation(caps: &crate::Caps, plan: &Plan) -> bool {
    plan.inner == 1 && (caps.cpu || plan.rows / plan.groups.max(1) <= 256)
}

impl Plan {
    /// Runs the split row kernels `part` then `finish` with `binds` (whose last entry the
    /// partials take) over `segs` segments of `seg_len` values per row.
    fn launch_split(
        &self,
        x: &Tensor,
        (part, part_binds): (&Kernel, &[usize]),
        finish: &Kernel,
        params: &NormParams,
        binds: &[Bind],
        (segs, seg_len): (u32, u32),
    ) -> Result<()> {
        let dev = x.device();
        let parts =
            crate::runtime::Storage::scratch(dev, self.op, self.rows as u64 * u64::from(segs) * 8)?;
        let mut params = *params;
        params.segs = segs;
        params.seg_len = seg_len;
        let grid = dev.grid_1d(self.op, self.rows as u64 * u64::from(segs))?;
        let mut all: Vec<Bind> = binds.to_vec();
        all.push(Bind::whole(parts.buffer()));
        let first: Vec<Bind> = part_binds.iter().map(|&i| all[i]).collect();
        self.launch(x, part, &params, &first, grid)?;
        self.launch(x, finish, &params, &all, grid)
    }

    /// Rows this short leave most of a workgroup idle: one invocation per row instead.
    fn short_rows(&self) -> bool {
        self.len <= 32
    }

    /// The row kernel (forward or dx) and its grid.
    fn row_kernel(
        &self,
        dev: &crate::Device,
        wide: &'static Kernel,
        short: &'static Kernel,
    ) -> Result<(&'static Kernel, [u32; 3])> {
        if self.short_rows() {
            Ok((
                short,
                dev.grid_1d(self.op, (self.rows as u64).div_ceil(u64::from(wg(dev))))?,
            ))
        } else {
            Ok((wide, dev.grid_1d(self.op, self.rows as u64)?))
        }
    }

    /// Launches `kernel` over `x`'s rows with this plan's op name and the adapter's width.
    fn launch(
        &self,
        x: &Tensor,
        kernel: &Kernel,
        params: &NormParams,
        binds: &[Bind],
        grid: [u32; 3],
    ) -> Result<()> {
        let dev = x.device();
        dev.launch_binds(
            self.op,
            kernel,
            &[x.dtype],
            &[("WG", f64::from(wg(dev)))],
            bytemuck::bytes_of(params),
            binds,
            grid,
        )
    }

    fn params(&self, has_w: bool, has_b: bool) -> NormParams {
        NormParams {
            rows: self.rows as u32,
            len: self.len as u32,
            groups: self.groups as u32,
            inner: self.inner as u32,
            eps: self.eps,
            flags: u32::from(has_w) | (u32::from(has_b) << 1) | (u32::from(self.rms) << 2),
            nweights: self.nweights as u32,
            per_group: (self.rows / self.groups.max(1)) as u32,
            segs: 1,
            seg_len: self.len as u32,
            pad0: 0,
            pad1: 0,
        }
    }
}

/// PyTorch's mixed-dtype rule for layer and group norm: f16 activations with f32 parameters
/// (the `nn` layers' own) are computed in f32, the result in f16.
fn mixed(x: &Tensor, params: [Option<&Tensor>; 2]) -> bool {
    let mut defined = params.into_iter().flatten().peekable();
    x.dtype() == DType::F16 && defined.peek().is_some() && defined.all(|p| p.dtype() == DType::F32)
}

/// The untracked forward: (y, stats [2 * rows] f32 = mean then rstd).
fn forward(
    plan: &Plan,
    x: &Tensor,
    w: Option<&Tensor>,
    b: Option<&Tensor>,
) -> Result<(Tensor, Tensor)> {
    let op = plan.op;
    let dev = x.device();
    let y = Tensor::empty(dev, op, x.shape(), x.dtype)?;
    let stats = Tensor::empty(dev, op, &[2 * plan.rows], DType::F32)?;
    if x.numel() == 0 {
        return Ok((y, stats));
    }
    let x = x.contiguous_at_zero()?;
    let w = w.map(Tensor::contiguous_at_zero).transpose()?;
    let b = b.map(Tensor::contiguous_at_zero).transpose()?;
    let params = plan.params(w.is_some(), b.is_some());
    // Absent parameters bind x (read-only, never read: the flags say so).
    let binds = [
        Bind::whole(x.buffer()),
        Bind::whole(w.as_ref().unwrap_or(&x).buffer()),
        Bind::whole(b.as_ref().unwrap_or(&x).buffer()),
        Bind::whole(y.buffer()),
        Bind::whole(stats.buffer()),
    ];
    if let Some(split) = split_long_rows(dev.caps(), plan.rows, plan.len) {
        // The part pass binds x and the partials (the last of the finishing pass's binds).
        let part = (&FWD_PART, &[0, 5][..]);
        plan.launch_split(&x, part, &FWD_SPLIT, &params, &binds, split)?;
        return Ok((y, stats));
    }
    let (kernel, grid) = plan.row_kernel(dev, &FWD, &FWD_ROWS)?;
    plan.launch(&x, kernel, &params, &binds, grid)?;
    Ok((y, stats))
}

/// The weight and bias gradients, flat.
type ParamGrads = (Tensor, Tensor);

/// The untracked backward: dx when `need_x`, (dweight, dbias) when `need_params`.
fn backward(
    plan: &Plan,
    dy: &Tensor,
    x: &Tensor,
    w: Option<&Tensor>,
    stats: &Tensor,
    need_x: bool,
    need_params: bool,
) -> Result<(Option<Tensor>, Option<ParamGrads>)> {
    let op = plan.op;
    let dev = x.device();
    x.check_grad_output(op, dy)?;
    let params = plan.params(w.is_some(), false);
    let empty = x.numel() == 0;
    let (x, dy) = (x.contiguous_at_zero()?, dy.contiguous_at_zero()?);
    let dx = if need_x {
        let dx = Tensor::empty(dev, op, x.shape(), x.dtype)?;
        if !empty {
            let w = w.map(Tensor::contiguous_at_zero).transpose()?;
            let binds = [
                Bind::whole(x.buffer()),
                Bind::whole(w.as_ref().unwrap_or(&x).buffer()),
                Bind::whole(dy.buffer()),
                Bind::whole(dx.buffer()),
                Bind::whole(stats.buffer()),
            ];
            if let Some(split) = split_long_rows(dev.caps(), plan.rows, plan.len) {
                // The part pass binds x, the weight, dy, the statistics and the partials.
                let part = (&DX_PART, &[0, 1, 2, 4, 5][..]);
                plan.launch_split(&x, part, &DX_SPLIT, &params, &binds, split)?;
            } else {
                let (kernel, grid) = plan.row_kernel(dev, &DX, &DX_ROWS)?;
                plan.launch(&x, kernel, &params, &binds, grid)?;
            }
        }
        Some(dx)
    } else {
        None
    };
    let dwb = if need_params {
        if empty || plan.nweights == 0 {
            let z = || Tensor::zeros(dev, &[plan.nweights], x.dtype);
            Some((z()?, z()?))
        } else {
            let dw = Tensor::empty(dev, op, &[plan.nweights], x.dtype)?;
            let db = Tensor::empty(dev, op, &[plan.nweights], x.dtype)?;
            let binds = [
                Bind::whole(x.buffer()),
                Bind::whole(dy.buffer()),
                Bind::whole(dw.buffer()),
                Bind::whole(stats.buffer()),
                Bind::whole(db.buffer()),
            ];
            let (kernel, groups) = if per_weight_invocation(dev.caps(), plan) {
                (
                    &DW_COLS,
                    (plan.nweights as u64).div_ceil(u64::from(wg(dev))),
                )
            } else {
                (&DW, plan.nweights as u64)
            };
            let grid = dev.grid_1d(op, groups)?;
            plan.launch(&x, kernel, &params, &binds, grid)?;
            Some((dw, db))
        }
    } else {
        None
    };
    Ok((dx, dwb))
}

struct NormBackward {
    plan: Plan,
    x: Tensor,
    weight: Option<Tensor>,
    /// layer_norm's bias, which PyTorch's node saves (group norm's does not): kept for the
    /// version check.
    bias: Option<Tensor>,
    has_bias: bool,
    stats: Tensor,
    /// The weight's shape (its gradient comes out flat).
    w_shape: Vec<usize>,
}

impl BackwardOp for NormBackward {
    fn saved(&self) -> Vec<&Tensor> {
        std::iter::once(&self.x)
            .chain(&self.weight)
            .chain(&self.bias)
            .collect()
    }

    fn name(&self) -> &'static str {
        self.plan.op
    }

    fn backward(&self, grads: &[Option<Tensor>], needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = grads.first().and_then(Option::as_ref) else {
            return Ok(vec![None; needs.len()]);
        };
        let need = |i: usize| needs.get(i) != Some(&false);
        let need_params = (1..needs.len()).any(need);
        let (dx, dwb) = backward(
            &self.plan,
            g,
            &self.x,
            self.weight.as_ref(),
            &self.stats,
            need(0),
            need_params,
        )?;
        let mut out = vec![dx];
        if let Some((dw, db)) = dwb {
            if self.weight.is_some() {
                out.push(Some(dw.reshape(&self.w_shape)?));
            }
            if self.has_bias {
                out.push(Some(db.reshape(&self.w_shape)?));
            }
        } else {
            out.resize(needs.len(), None);
        }
        Ok(out)
    }
}

/// Runs the forward and records it for autograd.
fn run(plan: Plan, x: &Tensor, w: Option<&Tensor>, b: Option<&Tensor>) -> Result<Tensor> {
    let (y, stats) = {
        let _guard = NoGradGuard::new();
        forward(&plan, x, w, b)?
    };
    let mut inputs = vec![x];
    inputs.extend(w);
    inputs.extend(b);
    Ok(record(y, &inputs, |_| {
        Box::new(NormBackward {
            plan,
            x: x.detach(),
            weight: w.map(Tensor::detach),
            bias: b.filter(|_| plan.op == "layer_norm").map(Tensor::detach),
            has_bias: b.is_some(),
            stats,
            w_shape: w.or(b).map(|t| t.shape().to_vec()).unwrap_or_default(),
        })
    }))
}

/// Layer normalization over the trailing `normalized_shape` dims, PyTorch's
/// `F.layer_norm(x, normalized_shape, weight, bias, eps)`: each slice `x[..., :]` of
/// `normalized_shape` becomes `(x - mean) / sqrt(var + eps) * weight + bias` with the biased
/// variance; `weight` and `bias` (optional, shape `normalized_shape`, x's dtype, or f32 for
/// an f16 `x`: computed in f32 then, as PyTorch's mixed-dtype rule) apply elementwise. Tracked by autograd (fused backward kernels). A NaN makes its row NaN.
/// Any `eps` is taken, as PyTorch's (here and in [`rms_norm`] and [`group_norm`]): a negative
/// one gives NaN where `var + eps` is below 0.
///
/// ```no_run,ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// let dev = wgtensor::Device::new()?;
/// let x = wgtensor::Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0, 6.0, 8.0], &[2, 3])?;
/// let y = wgtensor::ops::layer_norm(&x, &[3], None, None, 1e-5)?; // each row: mean 0, var 1
/// # Ok(()) }
/// ```
pub fn layer_norm(
    x: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    let op = "layer_norm";
    if mixed(x, [weight, bias]) {
        let y = layer_norm(
            &x.to_dtype(DType::F32)?,
            normalized_shape,
            weight,
            bias,
            eps,
        )?;
        // One mixed-dtype node in PyTorch, which saves the caller's input.
        return Ok(saving_inputs(
            "NativeLayerNormBackward0",
            y.to_dtype(x.dtype())?,
            &[x],
        ));
    }
    let (rows, len) = check_trailing(op, x, normalized_shape, weight, bias)?;
    let plan = Plan {
        op,
        rows,
        len,
        groups: 1,
        inner: 1,
        nweights: len,
        rms: false,
        eps: eps as f32,
    };
    run(plan, x, weight, bias)
}

/// Root-mean-square normalization over the trailing `normalized_shape` dims, PyTorch's
/// `F.rms_norm(x, normalized_shape, weight, eps)`: `x / sqrt(mean(x^2) + eps) * weight`.
/// `eps` `None` is `f32::EPSILON`, as PyTorch (the epsilon of the f32 computation type, for
/// f16 inputs too). Tracked by autograd.
pub fn rms_norm(
    x: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    eps: Option<f64>,
) -> Result<Tensor> {
    let op = "rms_norm";
    if let Some(w) = weight.filter(|w| w.dtype() != x.dtype() && x.dtype().is_float()) {
        // PyTorch's fallback for a weight of another dtype (nn.RMSNorm's f32 weight on f16
        // activations, an integer weight): computed in f32, the result in x's dtype; its
        // composite's product saves the caller's weight.
        let y = rms_norm(
            &x.to_dtype(DType::F32)?,
            normalized_shape,
            Some(&w.to_dtype(DType::F32)?),
            eps,
        )?;
        // (MulBackward0 keeps the weight only when x's gradient is needed.)
        let y = y.to_dtype(x.dtype())?;
        return Ok(match x.is_tracked() {
            true => saving_inputs("MulBackward0", y, &[w]),
            false => y,
        });
    }
    let (rows, len) = check_trailing(op, x, normalized_shape, weight, None)?;
    let plan = Plan {
        op,
        rows,
        len,
        groups: 1,
        inner: 1,
        nweights: len,
        rms: true,
        eps: eps.map_or(f32::EPSILON, |e| e as f32),
    };
    run(plan, x, weight, None)
}

/// Group normalization, PyTorch's `F.group_norm(x, num_groups, weight, bias, eps)`: the
/// channels (dim 1) of `x` `[N, C, *]` split into `num_groups` groups of `C / num_groups`;
/// each sample's group is normalized over its channels and spatial positions with the biased
/// variance, then `weight` and `bias` (optional, shape `[C]`; f32 ones on an f16 `x` are
/// computed in f32, as PyTorch's mixed-dtype rule) apply per channel. Tracked by autograd.
pub fn group_norm(
    x: &Tensor,
    num_groups: usize,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    let op = "group_norm";
    if mixed(x, [weight, bias]) {
        let y = group_norm(&x.to_dtype(DType::F32)?, num_groups, weight, bias, eps)?;
        // One mixed-dtype node in PyTorch, which saves the caller's input.
        return Ok(saving_inputs(
            "NativeGroupNormBackward0",
            y.to_dtype(x.dtype())?,
            &[x],
        ));
    }
    let (c, inner) = check_group(op, x, num_groups, weight, bias)?;
    let s = x.shape();
    // num_groups divides C = 0 whatever its value: the statistics [N, groups] must still fit.
    let rows = s[0]
        .checked_mul(num_groups)
        .filter(|r| r.checked_mul(2).is_some_and(|r2| r2 <= u32::MAX as usize))
        .ok_or_else(|| {
            Error::size(
                op,
                format!(
                    "{num_groups} groups over a batch of {} are too many statistics",
                    s[0]
                ),
            )
        })?;
    let plan = Plan {
        op,
        rows,
        len: c / num_groups * inner,
        groups: num_groups,
        inner: inner.max(1),
        nweights: c,
        rms: false,
        eps: eps as f32,
    };
    run(plan, x, weight, bias)
}

/// The norm family's entry in the kernel-family registry (`ops::families()`).
pub(crate) const FAMILY: crate::runtime::pipeline::Family = crate::runtime::pipeline::Family {
    name: "norm",
    shaders: &["norm.wgsl"],
    params: || vec![params_layout()],
    variants: norm_variants,
};

/// Every (kernel, dtypes, constants) variant of this family, for tests/shaders.rs.
#[doc(hidden)]
pub fn norm_variants() -> Vec<ShaderVariant> {
    let mut v = Vec::new();
    for k in [&FWD, &DX, &DW, &FWD_ROWS, &DX_ROWS, &DW_COLS] {
        for dt in [DType::F32, DType::F16] {
            for w in [CPU_WG, GPU_WG] {
                v.push(ShaderVariant::new(k, &[dt], &[("WG", f64::from(w))]));
            }
        }
    }
    // The split kernels run on GPUs only.
    for k in [&FWD_PART, &FWD_SPLIT, &DX_PART, &DX_SPLIT] {
        for dt in [DType::F32, DType::F16] {
            v.push(ShaderVariant::new(k, &[dt], &[("WG", f64::from(GPU_WG))]));
        }
    }
    v
}

/// The params struct's layout, checked against the shader's `struct Params` in tests/shaders.rs.
#[doc(hidden)]
pub fn params_layout() -> crate::runtime::pipeline::ParamsLayout {
    crate::runtime::pipeline::params_layout!(
        FWD,
        &[DType::F32],
        NormParams {
            rows,
            len,
            groups,
            inner,
            eps,
            flags,
            nweights,
            per_group,
            segs,
            seg_len,
            pad0,
            pad1
        }
    )
}

#[cfg(test)]
mod plan_tests {
    use super::*;
    use crate::Caps;

    fn layer(rows: usize, len: usize) -> Plan {
        Plan {
            op: "layer_norm",
            rows,
            len,
            groups: 1,
            inner: 1,
            nweights: len,
            rms: false,
            eps: 1e-5,
        }
    }

    #[test]
    fn weight_gradients_of_long_columns_take_workgroups_on_gpus() {
        let (gpu, lvp) = (Caps::test_gpu(), Caps::test_lavapipe(2));
        assert!(!per_weight_invocation(&gpu, &layer(8192, 768)));
        assert!(per_weight_invocation(&gpu, &layer(256, 768)));
        assert!(per_weight_invocation(&lvp, &layer(8192, 768)));
        // Group norm (a plane per weight): a workgroup everywhere.
        let g = Plan {
            groups: 4,
            inner: 49,
            ..layer(8, 8 * 49)
        };
        assert!(!per_weight_invocation(&lvp, &g));
    }
}
