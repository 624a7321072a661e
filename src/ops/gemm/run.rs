//! The untracked GEMM: validate, plan and record one product (directly, or in windows when an
//! operand exceeds one binding). The entry points in gemm/mod.rs and the backward in
//! ops/gemm/grad.rs both call it.

use super::launch::{dispatch, packed_batch, GemmBinds, Problem};
use super::options::GemmOptions;
use super::plan::{plan_for_dtype, plan_forced, GemmKernel};
use crate::runtime::Bind;
use crate::{Result, Tensor};

/// The shared core of every public entry: validate, plan, then record the product pass (and,
/// with split-k, the fixed-order reduction of the slices). `into` is `None` for a fresh
/// output, or the in-place target (c_mode 2) for `gemm_into`.
pub(crate) fn run(
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    o: &GemmOptions,
    into: Option<&Tensor>,
) -> Result<Tensor> {
    run_kernel(op, a, b, o, into, None)
}

/// [`run`] on `kernel` where given (validated by `plan_forced`), else on the planner's.
pub(crate) fn run_kernel(
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    o: &GemmOptions,
    into: Option<&Tensor>,
    kernel: Option<GemmKernel>,
) -> Result<Tensor> {
    let e = match Problem::new(op, a, b, o, into) {
        Ok(pb) => return run_problem(op, pb, a, b, o, into, kernel),
        Err(e) => e,
    };
    // C is read only with beta != 0 (and never besides an in-place target).
    let c = o.c.filter(|_| into.is_none() && o.reads_c());
    let Some([Some(ap), Some(bp), cp]) = packed_batch(&e, a, b, c)? else {
        return Err(e);
    };
    let po = GemmOptions {
        c: cp.as_ref().or(o.c),
        ..*o
    };
    // Once: packed operands merge their batch dims (a second failure is an error, not a loop).
    let pb = Problem::new(op, &ap, &bp, &po, into)?;
    run_problem(op, pb, &ap, &bp, &po, into, kernel)
}

/// [`run_kernel`] on a validated problem of `a` and `b`.
fn run_problem(
    op: &'static str,
    pb: Problem,
    a: &Tensor,
    b: &Tensor,
    o: &GemmOptions,
    into: Option<&Tensor>,
    kernel: Option<GemmKernel>,
) -> Result<Tensor> {
    let dev = a.device();
    let (m, n, batch) = (pb.m, pb.n, pb.batch());
    let caps = dev.caps();
    let pl = match kernel {
        Some(kr) => plan_forced(caps, a.dtype, kr, m, n, pb.k, batch, o.split_k)?,
        None => plan_for_dtype(caps, a.dtype, m, n, pb.k, batch, o.split_k)?,
    };
    let out = match into {
        Some(t) => t.clone(),
        None => Tensor::empty(dev, op, &pb.out_shape, a.dtype)?,
    };
    if m == 0 || n == 0 || batch == 0 {
        return Ok(out);
    }
    let limit = dev.max_binding_bytes();
    let c_t = if pb.c_mode == 1 { o.c } else { None };
    let bufs = [Some(a), Some(b), c_t, pb.bias, Some(&out)];
    let max = dev.limits().max_compute_workgroups_per_dimension;
    let (tm, tn) = pl.tile();
    let tiles_fit = m.div_ceil(tm) <= max as usize && n.div_ceil(tn) <= max as usize;
    // The split-k workspace is bound whole too (f32 partials of every output per slice).
    let ws_bytes = match pl.splits {
        1 => 0,
        s => (s as u64).saturating_mul((m * n * batch) as u64 * 4),
    };
    if !tiles_fit || ws_bytes > limit || bufs.iter().flatten().any(|t| t.buffer().size() > limit) {
        // An operand, the output or the split-k workspace is larger than one binding, or the
        // row or column tiles pass the grid limit (a linear layer over millions of rows,
        // which PyTorch runs): windows of rows and columns, whose partials fit.
        super::window::run_windowed(op, &pb, &pl, o, a, b, c_t, &out)?;
        return Ok(out);
    }
    let launches = pb.launches(op, &pl, pb.params(&pl, o), max)?;
    let c_buf = c_t.map_or(a.buffer(), |c| c.buffer());
    let bias_buf = pb.bias.map_or(a.buffer(), |t| t.buffer());
    let binds = GemmBinds {
        a: Bind::whole(a.buffer()),
        b: Bind::whole(b.buffer()),
        c: Bind::whole(c_buf),
        bias: Bind::whole(bias_buf),
        out: Bind::whole(out.buffer()),
    };
    for (params, grid, total) in launches {
        dispatch(op, a, &pl, &params, o.activation, &binds, grid, total)?;
    }
    Ok(out)
}
