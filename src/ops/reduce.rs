//! Reductions over one axis (shaders/reduce.wgsl). The general kernel later families reuse:
//! any strided input, fixed-order accumulation in f32, and three variants picked by a plain
//! function of the problem and the adapter ([`reduce_plan`]): one invocation per output, one
//! workgroup per output, or each output split into segments reduced by a workgroup (or an
//! invocation) each, then their partials: on GPUs when the outputs are too few to fill the
//! device, on CPU adapters to keep a sum's runs short (accuracy).

use bytemuck::{Pod, Zeroable};

use crate::layout::{pack_dims, Layout, MAX_RANK};
use crate::ops::activation::ACTIVATION;
use crate::runtime::window::{binding_elems, for_slab_windows, too_wide, SlabInput, Span};
use crate::runtime::{Access, Bind, Kernel};
use crate::{DType, Error, Result, Tensor};

use super::reduce_plan::WG;
pub use super::reduce_plan::{reduce_plan, ReducePlan};

const SRC: &str = include_str!("../../shaders/reduce.wgsl");

use Access::{Read as R, ReadWrite as RW};

static ROWS: Kernel = Kernel::new("reduce", SRC, "reduce_rows", &[R, RW])
    .libs(&[&ACTIVATION])
    .defs(REDUCE_DEFS);
/// The same folds in windows over the reduced axis, carried in an f32 workspace.
static ROWS_CARRY: Kernel = Kernel::new("reduce", SRC, "reduce_rows_carry", &[R, RW, RW])
    .libs(&[&ACTIVATION])
    .defs(REDUCE_DEFS);
static WORKGROUP_CARRY: Kernel = Kernel::new("reduce", SRC, "reduce_wg_carry", &[R, RW, RW])
    .libs(&[&ACTIVATION])
    .defs(REDUCE_DEFS);
static WORKGROUP: Kernel = Kernel::new("reduce", SRC, "reduce_wg", &[R, RW])
    .libs(&[&ACTIVATION])
    .defs(REDUCE_DEFS);
/// A split reduction's segments (x into the f32 workspace at binding 3)...
static SPLIT: Kernel = Kernel::new("reduce", SRC, "reduce_wg_split", &[R, RW])
    .slots(&[1, 3])
    .libs(&[&ACTIVATION])
    .defs(REDUCE_DEFS);
/// ...and their partials, folded per output into y.
static PARTIALS: Kernel = Kernel::new("reduce", SRC, "reduce_partials", &[RW, RW])
    .slots(&[2, 3])
    .libs(&[&ACTIVATION])
    .defs(REDUCE_DEFS);
/// A rows split's segments (one invocation per output and segment)...
static ROWS_SPLIT: Kernel = Kernel::new("reduce", SRC, "reduce_rows_split", &[R, RW])
    .slots(&[1, 3])
    .libs(&[&ACTIVATION])
    .defs(REDUCE_DEFS);
/// ...and their partials, one invocation per output.
static ROWS_PARTIALS: Kernel = Kernel::new("reduce", SRC, "reduce_rows_partials", &[RW, RW])
    .slots(&[2, 3])
    .libs(&[&ACTIVATION])
    .defs(REDUCE_DEFS);

/// Reductions along one dim, accumulated in f32 by [`Tensor::reduce`] (and its shorthands
/// such as [`Tensor::sum`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    /// The sum (`torch.sum`); 0 over an empty dim.
    Sum,
    /// The largest value (the values of `torch.max(dim)`, or `torch.amax` of one dim); an
    /// error over an empty dim. Its gradient is `max(dim)`'s: all of it to the first
    /// maximum (or first NaN), where `amax` splits it evenly over ties.
    Max,
    /// The smallest value (as [`ReduceOp::Max`], `torch.min(dim)`'s gradient); an error over
    /// an empty dim.
    Min,
    /// The arithmetic mean (`torch.mean`); NaN over an empty dim.
    Mean,
}

impl ReduceOp {
    pub(crate) fn name(self) -> &'static str {
        ["sum", "max", "min", "mean"][self as usize]
    }
    fn code(self) -> u32 {
        match self {
            ReduceOp::Sum | ReduceOp::Mean => RED_SUM,
            ReduceOp::Max => RED_MAX,
            ReduceOp::Min => RED_MIN,
        }
    }
}

// The fold codes (mean is a sum divided on store), emitted to the shader as WGSL constants.
const RED_SUM: u32 = 0;
const RED_MAX: u32 = 1;
const RED_MIN: u32 = 2;
const REDUCE_DEFS: &[(&str, u32)] = &[
    ("RED_SUM", RED_SUM),
    ("RED_MAX", RED_MAX),
    ("RED_MIN", RED_MIN),
];

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct ReduceParams {
    n_out: u32,
    rank: u32,
    offset: u32,
    red_len: u32,
    red_stride: u32,
    divisor: f32,
    base: u32,
    out_off: u32,
    shape: [u32; MAX_RANK],
    strides: [u32; MAX_RANK],
    flags: u32,
    segs: u32,
    seg_len: u32,
    _pad2: u32,
}

impl Tensor {
    /// mean's dtype check, first as in PyTorch's meta function (before its dims), in its
    /// words: a mean of integers has no output dtype to infer.
    pub(crate) fn require_mean_dtype(&self) -> Result<()> {
        if self.dtype.is_float() {
            return Ok(());
        }
        Err(Error::arg(
            "mean",
            format!(
                "mean(): could not infer output dtype. Input dtype must be either a floating \
                 point or complex dtype. Got: Int (convert with to_dtype(DType::F32); input \
                 {:?})",
                self.dtype
            ),
        ))
    }

    /// The untracked forward of [`Tensor::reduce`] (src/ops/reduce_grad.rs records it).
    pub(crate) fn reduce_forward(&self, dim: isize, op: ReduceOp, keepdim: bool) -> Result<Tensor> {
        let name = op.name();
        // A rank-0 input is `Tensor::reduce`'s to handle; here its dim is out of range. The
        // dim first, as PyTorch's sum/max/min (mean checks its dtype before, in its caller).
        let d = Layout::normalize_dim(name, dim, self.rank())?;
        // Before the empty early returns (a mean of nothing would fill an i32 with NaN).
        self.require_float(name)?;
        let red_len = self.shape()[d];
        let outer = self.layout.without_dim(d);
        let n_out = outer.numel();
        let mut out_shape = outer.shape().to_vec();
        if keepdim {
            out_shape.insert(d, 1);
        }
        let dev = self.device();
        if red_len == 0 {
            // PyTorch: max/min of nothing has no value; a sum is 0 and a mean 0/0 = NaN.
            return match op {
                ReduceOp::Max | ReduceOp::Min => Err(Error::size(
                    name,
                    format!(
                        "Expected reduction dim {d} to have non-zero size (input shape {:?})",
                        self.shape()
                    ),
                )),
                ReduceOp::Sum => Tensor::zeros(dev, &out_shape, self.dtype),
                ReduceOp::Mean => Tensor::full(dev, &out_shape, f64::NAN, self.dtype),
            };
        }
        let out = Tensor::empty(dev, name, &out_shape, self.dtype)?;
        if n_out == 0 {
            return Ok(out);
        }
        let mut params = ReduceParams {
            n_out: n_out as u32,
            rank: outer.rank() as u32,
            offset: self.layout.offset() as u32,
            red_len: red_len as u32,
            red_stride: self.strides()[d] as u32,
            divisor: if op == ReduceOp::Mean {
                red_len as f32
            } else {
                1.0
            },
            base: 0,
            out_off: 0,
            shape: pack_dims(outer.shape()),
            strides: pack_dims(outer.strides()),
            flags: 0,
            segs: 0,
            seg_len: 0,
            _pad2: 0,
        };
        let consts = [("OP", op.code() as f64), ("WG", WG as f64)];
        let dts = [self.dtype];
        let mut plan = reduce_plan(dev.caps(), n_out, red_len, self.strides()[d]);
        let limit = dev.max_binding_bytes();
        let partials = match plan {
            ReducePlan::Split { segs, .. } | ReducePlan::RowsSplit { segs, .. } => {
                n_out as u64 * segs as u64 * 4
            }
            _ => 0,
        };
        // CPU adapters split for a sum's accuracy alone: max and min are exact in any order.
        // And a workspace past one binding (a broadcast input holds far fewer bytes than its
        // outputs' partials) keeps the unsplit kernel.
        if (dev.caps().cpu && matches!(op, ReduceOp::Max | ReduceOp::Min)) || partials > limit {
            plan = plan.unsplit();
        }
        // Windows of a split plan run its unsplit kernel.
        let wg_variant = matches!(plan, ReducePlan::Workgroup | ReducePlan::Split { .. });
        let launch = |p: &ReduceParams, binds: &[Bind], n: u64| {
            let (kernel, groups) = if wg_variant {
                (&WORKGROUP, n)
            } else {
                (&ROWS, n.div_ceil(WG as u64))
            };
            let grid = dev.grid_1d(name, groups)?;
            dev.launch_binds(
                name,
                kernel,
                &dts,
                &consts,
                bytemuck::bytes_of(p),
                binds,
                grid,
            )
        };
        if self.buffer().size() <= limit && out.buffer().size() <= limit {
            let split = match plan {
                ReducePlan::Split { segs, seg_len } => Some((segs, seg_len, &SPLIT, &PARTIALS, 1)),
                ReducePlan::RowsSplit { segs, seg_len } => {
                    Some((segs, seg_len, &ROWS_SPLIT, &ROWS_PARTIALS, WG as u64))
                }
                _ => None,
            };
            if let Some((segs, seg_len, parts, fold, per_group)) = split {
                // The workspace of n_out * segs f32 partials fits one binding (checked above).
                let ws =
                    crate::runtime::Storage::scratch(dev, name, n_out as u64 * segs as u64 * 4)?;
                params.segs = segs;
                params.seg_len = seg_len;
                let bytes = bytemuck::bytes_of(&params);
                let grid = dev.grid_1d(name, (n_out as u64 * segs as u64).div_ceil(per_group))?;
                let binds = [Bind::whole(self.buffer()), Bind::whole(ws.buffer())];
                dev.launch_binds(name, parts, &dts, &consts, bytes, &binds, grid)?;
                let grid = dev.grid_1d(name, (n_out as u64).div_ceil(per_group))?;
                let binds = [Bind::whole(out.buffer()), Bind::whole(ws.buffer())];
                dev.launch_binds(name, fold, &dts, &consts, bytes, &binds, grid)?;
                return Ok(out);
            }
            let binds = [Bind::whole(self.buffer()), Bind::whole(out.buffer())];
            launch(&params, &binds, n_out as u64)?;
            return Ok(out);
        }
        // Windows of outputs: a packed input [A, R, B] (R reduced, B the dims after it) binds
        // the slabs of R * B elements of the outer indices each window covers; windows hold
        // whole multiples of B outputs. Any other input must fit one binding whole.
        let es = self.dtype.size() as u64;
        let cap = binding_elems(dev, es);
        let packed = self.is_contiguous();
        let inner: u64 = self.shape()[d + 1..].iter().product::<usize>() as u64;
        if packed && cap / (red_len as u64 * inner) == 0 {
            // One output group's slab (R x inner) is past a binding: windows over R too.
            let carry = CarryWindows {
                name,
                op_code: op.code(),
                wg_variant,
                red_len: red_len as u64,
                inner,
                cap,
            };
            carry.run(self, &out, params)?;
            return Ok(out);
        }
        let input = SlabInput {
            buffer: self.buffer(),
            es,
            offset: self.layout.offset() as u64,
            end: self.layout.span() as u64,
            packed,
        };
        let align = dev.storage_align();
        for_slab_windows(
            dev,
            name,
            &input,
            n_out as u64,
            red_len as u64,
            inner,
            false,
            |w| {
                let ys = Span::of(w.start, w.start + w.rows, es, align, out.buffer().size());
                params.n_out = w.rows as u32;
                params.base = w.start as u32;
                params.out_off = ys.rel as u32;
                // Decoded from base + o: a windowed input's offset is shifted back (mod 2^32).
                params.offset = w.x_offset;
                let binds = [w.x.bind(self.buffer()), ys.bind(out.buffer())];
                launch(&params, &binds, w.rows)
            },
        )?;
        Ok(out)
    }

    /// The sum along `dim` ([`ReduceOp::Sum`]; PyTorch's `x.sum(dim, keepdim)`).
    pub fn sum(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        self.reduce(dim, ReduceOp::Sum, keepdim)
    }
    /// The mean along `dim` ([`ReduceOp::Mean`]; PyTorch's `x.mean(dim, keepdim)`).
    pub fn mean(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        self.reduce(dim, ReduceOp::Mean, keepdim)
    }
    /// The maximum along `dim`, values only ([`ReduceOp::Max`]; PyTorch's
    /// `x.max(dim, keepdim).values`, the values of `x.amax(dim, keepdim)`; NaN propagates).
    /// The gradient goes to the first maximum of each row, the index `max(dim)` returns, as
    /// PyTorch's `max(dim)` backward (its `amax` splits it evenly among ties).
    pub fn max(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        self.reduce(dim, ReduceOp::Max, keepdim)
    }
    /// The minimum along `dim`, values only ([`ReduceOp::Min`]; PyTorch's
    /// `x.min(dim, keepdim).values`); the gradient as [`Tensor::max`]'s.
    pub fn min(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        self.reduce(dim, ReduceOp::Min, keepdim)
    }
}

/// The values a lane of shaders/reduce.wgsl's `fold_range` adds up as one block before its
/// running fold takes the block's sum.
const FOLD_BLOCK: u64 = 64;

/// A packed reduction whose slab per output group (R x the inner dims) exceeds one binding:
/// for each outer index, windows of R rows each bind their rows, and the running folds are
/// carried between windows in an f32 workspace (`reduce_*_carry`), so each output (and each
/// lane of the workgroup variant, whose windows hold whole multiples of WG rows) folds the
/// same values in the same order as unsplit: bitwise the unsplit result. Windows hold whole
/// blocks of [`FOLD_BLOCK`] values per lane, or exactly one tree of 8 where a binding holds
/// fewer rows (still bitwise while a lane's values fit one block); for slabs wider still the
/// values are folded in turn across windows: deterministic, not bitwise, less accurate.
struct CarryWindows {
    name: &'static str,
    op_code: u32,
    wg_variant: bool,
    red_len: u64,
    inner: u64,
    /// Elements one binding holds (less the alignment slack).
    cap: u64,
}

impl CarryWindows {
    fn run(&self, x: &Tensor, out: &Tensor, mut params: ReduceParams) -> Result<()> {
        let (name, dev) = (self.name, x.device());
        let (limit, align) = (dev.max_binding_bytes(), dev.storage_align());
        let es = x.dtype.size() as u64;
        let (r, inner) = (self.red_len, self.inner);
        let lanes = if self.wg_variant { WG as u64 } else { 1 };
        // Whole blocks of FOLD_BLOCK values per lane where a binding holds them, else exactly
        // one tree of 8 per lane (the lanes group their folds so, from each window's start: one
        // tree a window adds into the carried fold as the unsplit block does), else whole
        // multiples of WG rows.
        let rows_cap = self.cap / inner;
        let (block, tree) = (FOLD_BLOCK * lanes, 8 * lanes);
        let rows = if rows_cap >= block {
            rows_cap / block * block
        } else if rows_cap >= tree {
            tree
        } else {
            rows_cap / lanes * lanes
        };
        if rows == 0 || inner * lanes * 4 > limit {
            return Err(too_wide(name, r * inner * es, limit));
        }
        let carry = crate::runtime::Storage::scratch(dev, name, inner * lanes * 4)?;
        let groups = out.numel() as u64 / inner;
        let off = x.layout.offset() as u64;
        let (kernel, per_out) = if self.wg_variant {
            (&WORKGROUP_CARRY, 1)
        } else {
            (&ROWS_CARRY, WG as u64)
        };
        let consts = [("OP", self.op_code as f64), ("WG", WG as f64)];
        for a in 0..groups {
            let ys = Span::of(a * inner, (a + 1) * inner, es, align, out.buffer().size());
            let mut r0 = 0;
            while r0 < r {
                let r1 = (r0 + rows).min(r);
                let first = off + (a * r + r0) * inner;
                let xs = Span::of(
                    first,
                    first + (r1 - r0) * inner,
                    es,
                    align,
                    x.buffer().size(),
                );
                params.n_out = inner as u32;
                params.base = (a * inner) as u32;
                params.red_len = (r1 - r0) as u32;
                params.out_off = ys.rel as u32;
                params.offset = (xs.rel as u32).wrapping_sub((a * r * inner) as u32);
                params.flags = u32::from(r0 > 0) | (u32::from(r1 < r) << 1);
                let binds = [
                    xs.bind(x.buffer()),
                    ys.bind(out.buffer()),
                    Bind::whole(carry.buffer()),
                ];
                let grid = dev.grid_1d(name, inner.div_ceil(per_out))?;
                let bytes = bytemuck::bytes_of(&params);
                dev.launch_binds(name, kernel, &[x.dtype], &consts, bytes, &binds, grid)?;
                r0 = r1;
            }
        }
        Ok(())
    }
}

/// The reduce family's entry in the kernel-family registry (`ops::families()`).
pub(crate) const FAMILY: crate::runtime::pipeline::Family = crate::runtime::pipeline::Family {
    name: "reduce",
    shaders: &["reduce.wgsl"],
    params: || vec![params_layout()],
    variants: reduce_variants,
};

/// Every (kernel, dtypes, override constants) combination of this family's kernels, for
/// tests/shaders.rs to translate and validate each.
#[doc(hidden)]
pub fn reduce_variants() -> Vec<crate::runtime::pipeline::ShaderVariant> {
    let mut v = Vec::new();
    for k in [
        &ROWS,
        &WORKGROUP,
        &ROWS_CARRY,
        &WORKGROUP_CARRY,
        &SPLIT,
        &PARTIALS,
        &ROWS_SPLIT,
        &ROWS_PARTIALS,
    ] {
        for dt in [DType::F32, DType::F16] {
            for &(_, code) in REDUCE_DEFS {
                v.push(crate::runtime::pipeline::ShaderVariant::new(
                    k,
                    &[dt],
                    &[("OP", code as f64), ("WG", WG as f64)],
                ));
            }
        }
    }
    v
}

/// The params struct's layout, checked against the shader's `struct Params` in tests/shaders.rs.
#[doc(hidden)]
pub fn params_layout() -> crate::runtime::pipeline::ParamsLayout {
    crate::runtime::pipeline::params_layout!(
        ROWS,
        &[DType::F32],
        ReduceParams {
            n_out,
            rank,
            offset,
            red_len,
            red_stride,
            divisor,
            base,
            out_off,
            shape,
            strides,
            flags,
            segs,
            seg_len,
            _pad2
        }
    )
}
