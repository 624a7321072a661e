//! GEMM over operands or outputs larger than one storage binding (src/runtime/window.rs), or
//! whose row or column tiles pass the grid limit: each batch entry is cut into windows of
//! output rows and columns such that the part of A (those rows), B (those columns), C and the
//! output each window touches fits one binding and its tiles fit the grid,
//! and the windows run the full problem's plan (variant, split-k slices and chunk), so every
//! output element is summed in the same order as unsplit: the results are bitwise identical.
//!
//! An operand whose window cannot shrink below a binding (a transposed A whose every row spans
//! the whole buffer, for instance) is refused with `Error::TooLarge`.

use super::launch::{dispatch, GemmBinds, GemmParams, Problem};
use super::options::GemmOptions;
use super::plan::GemmPlan;
use crate::runtime::window::{too_wide, Span};
use crate::{Error, Result, Tensor};

/// Elements spanned by a `rows x cols` window of a matrix with strides `(rs, cs)`.
fn extent(rows: u64, cols: u64, rs: u64, cs: u64) -> u64 {
    if rows == 0 || cols == 0 {
        return 0;
    }
    (rows - 1) * rs + (cols - 1) * cs + 1
}

/// The largest `x` in `1..=max` with `f(x) <= cap` (`f` non-decreasing), or `None`.
fn largest(max: u64, cap: u64, f: impl Fn(u64) -> u64) -> Option<u64> {
    if f(1) > cap {
        return None;
    }
    let (mut lo, mut hi) = (1, max);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if f(mid) <= cap {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Some(lo)
}

/// Window sizes `(rows, cols)` for an `m x n x k` product: columns first (B's and the
/// output's row reach), then rows (A's, C's and the output's), each rounded to whole tiles
/// when that still fits. `cap` is in elements; `ws_cap` bounds the split-k workspace.
fn window_dims(
    pb: &Problem,
    pl: &GemmPlan,
    c_strides: Option<(u64, u64)>,
    cap: u64,
    ws_cap: u64,
) -> Option<(u64, u64)> {
    let (m, n, k) = (pb.m as u64, pb.n as u64, pb.k as u64);
    let r = pb.out_shape.len();
    let st = |l: &crate::Layout| (l.strides()[r - 2] as u64, l.strides()[r - 1] as u64);
    let ((ars, acs), (brs, bcs)) = (st(&pb.al), st(&pb.bl));
    let (tm, tn) = pl.tile();
    let splits = pl.splits as u64;
    let round = |x: u64, t: u64, max: u64| if x >= t { x / t * t } else { x }.min(max);
    // One row of the window's split-k partials must fit the workspace too (an accuracy split
    // of a wide broadcast B would otherwise leave no row that fits).
    let col_cap = ws_cap / splits.max(1);
    if col_cap == 0 {
        return None;
    }
    let cols = largest(n.min(col_cap), cap, |c| extent(k, c, brs, bcs).max(c))?;
    let cols = round(cols, tn as u64, n);
    let fits_rows = |rw: u64| {
        extent(rw, k, ars, acs) <= cap
            && extent(rw, cols, n, 1) <= cap
            && c_strides.is_none_or(|(rs, cs)| extent(rw, cols, rs, cs) <= cap)
            && splits * rw * cols <= ws_cap
    };
    let rows = largest(m, 0, |rw| u64::from(!fits_rows(rw)))?;
    Some((round(rows, tm as u64, m), cols))
}

/// Runs the product of `pb` (planned as `pl`) in windows; `out` is the contiguous output (or
/// the in-place C of `gemm_into`), `c` a separate C operand when read.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_windowed(
    op: &'static str,
    pb: &Problem,
    pl: &GemmPlan,
    o: &GemmOptions,
    a: &Tensor,
    b: &Tensor,
    c: Option<&Tensor>,
    out: &Tensor,
) -> Result<()> {
    let dev = a.device();
    let (limit, align) = (dev.max_binding_bytes(), dev.storage_align());
    let es = a.dtype().size() as u64;
    let cap = limit.saturating_sub(align + 4) / es;
    let r = pb.out_shape.len();
    let st = |l: &crate::Layout| (l.strides()[r - 2] as u64, l.strides()[r - 1] as u64);
    let c_strides = (pb.c_mode == 1).then(|| st(&pb.cl));
    let (m, n, k) = (pb.m as u64, pb.n as u64, pb.k as u64);
    let Some((wr, wc)) = window_dims(pb, pl, c_strides, cap, limit / 4) else {
        let (ars, acs) = st(&pb.al);
        return Err(too_wide(op, extent(m, k, ars, acs) * es, limit));
    };
    // Whole tiles within the grid limit on each axis (the sg8 kernel swaps x and y, but both
    // share the limit).
    let max = u64::from(dev.limits().max_compute_workgroups_per_dimension);
    let (tm, tn) = pl.tile();
    let (wr, wc) = (wr.min(max * tm as u64), wc.min(max * tn as u64));
    let base = pb.params(pl, o);
    let [a_bs, b_bs, c_bs] = &pb.batch_strides;
    let size = |t: &Tensor| t.buffer().size();
    // The bias is a vector: small, bound whole.
    let bias_buf = pb.bias.map_or(a.buffer(), |t| t.buffer());
    let bias_end = pb.bias.map_or(1, |t| t.layout().span() as u64);
    let bias_bind = Span::of(0, bias_end, es, align, bias_buf.size());
    if bias_bind.size > limit {
        return Err(too_wide(op, bias_bind.size, limit));
    }
    for bi in 0..pb.batch() {
        // Element offsets of this batch entry (the merged batch dims, as the shader's bases()).
        let (mut ao, mut bo, mut co) = (pb.al.offset(), pb.bl.offset(), pb.cl.offset());
        let mut rem = bi;
        for d in (0..pb.bm.len()).rev() {
            let ci = rem % pb.bm[d];
            rem /= pb.bm[d];
            ao += ci * a_bs[d];
            bo += ci * b_bs[d];
            co += ci * c_bs[d];
        }
        let oo = if pb.c_mode == 2 {
            co as u64
        } else {
            out.layout().offset() as u64 + (bi as u64) * m * n
        };
        let (ars, acs) = st(&pb.al);
        let (brs, bcs) = st(&pb.bl);
        for r0 in (0..m).step_by(wr as usize) {
            let rows = wr.min(m - r0);
            for c0 in (0..n).step_by(wc as usize) {
                let cols = wc.min(n - c0);
                let a0 = ao as u64 + r0 * ars;
                let sa = Span::of(a0, a0 + extent(rows, k, ars, acs), es, align, size(a));
                let b0 = bo as u64 + c0 * bcs;
                let sb = Span::of(b0, b0 + extent(k, cols, brs, bcs), es, align, size(b));
                let o0 = oo + r0 * n + c0;
                let so = Span::of(o0, o0 + extent(rows, cols, n, 1), es, align, size(out));
                let mut p: GemmParams = base;
                p.m = rows as u32;
                p.n = cols as u32;
                p.batch = 1;
                p.batch_rank = 0;
                p.bshape = [0; 4];
                p.a_bs = [0; 4];
                p.b_bs = [0; 4];
                p.c_bs = [0; 4];
                p.a_off = sa.rel as u32;
                p.b_off = sb.rel as u32;
                p.o_rs = n as u32;
                p.o_off = so.rel as u32;
                let c_bind = match (pb.c_mode, c) {
                    (1, Some(ct)) => {
                        let (crs, ccs) = st(&pb.cl);
                        let c0e = co as u64 + r0 * crs + c0 * ccs;
                        let sc =
                            Span::of(c0e, c0e + extent(rows, cols, crs, ccs), es, align, size(ct));
                        p.c_off = sc.rel as u32;
                        sc.bind(ct.buffer())
                    }
                    (2, _) => {
                        // In place: the output window is C.
                        p.c_off = so.rel as u32;
                        p.c_rs = n as u32;
                        p.c_cs = 1;
                        sa.bind(a.buffer())
                    }
                    _ => sa.bind(a.buffer()),
                };
                p.bias_off = base.bias_off
                    + match pb.bias_code {
                        1 => c0 as u32 * base.bias_stride,
                        2 => r0 as u32 * base.bias_stride,
                        _ => 0,
                    };
                let binds = GemmBinds {
                    a: sa.bind(a.buffer()),
                    b: sb.bind(b.buffer()),
                    c: c_bind,
                    bias: bias_bind.bind(bias_buf),
                    out: so.bind(out.buffer()),
                };
                let (tm, tn) = pl.tile();
                let (gx, gy) = (cols.div_ceil(tn as u64), rows.div_ceil(tm as u64));
                let gz = pl.splits as u64;
                let [x, y] = pl.grid_xy(gx, gy);
                let grid = [x, y, gz];
                let grid = grid.map(|g| g as u32);
                let max = dev.limits().max_compute_workgroups_per_dimension;
                if grid.iter().any(|&g| g > max) {
                    return Err(Error::size(
                        op,
                        format!("a window of {rows} x {cols} outputs needs a grid of {grid:?}, over the adapter's {max}"),
                    ));
                }
                dispatch(op, a, pl, &p, o.activation, &binds, grid, rows * cols)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_and_search() {
        assert_eq!(extent(3, 4, 10, 1), 24);
        assert_eq!(extent(0, 4, 10, 1), 0);
        assert_eq!(largest(100, 50, |x| x * 3), Some(16));
        assert_eq!(largest(100, 2, |x| x * 3), None);
        assert_eq!(largest(5, 1000, |x| x), Some(5));
    }
}
