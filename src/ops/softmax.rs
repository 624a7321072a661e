//! softmax and log_softmax along one axis (shaders/softmax.wgsl), PyTorch's `softmax(x, dim)`
//! and `log_softmax(x, dim)`: numerically stable (the row max is subtracted first), any axis of
//! any strided view read in place, one pass per row where the row fits one invocation's loop
//! or one workgroup per row for few long rows (on GPUs, rows too few to fill the device are
//! split into segments whose partial max and sum merge in order); f16 computes in f32.

use bytemuck::{Pod, Zeroable};

use crate::layout::{contiguous_strides, pack_dims, Layout, MAX_RANK};
use crate::ops::activation::ACTIVATION;
use crate::ops::reduce_plan::split_long_rows;
use crate::runtime::pipeline::ShaderVariant;
use crate::runtime::window::{for_slab_windows, SlabInput, Span};
use crate::runtime::{Access, Bind, Kernel};
use crate::{DType, Result, Tensor};

const SRC: &str = include_str!("../../shaders/softmax.wgsl");
const WG: u32 = 64;

static ROWS: Kernel = Kernel::new(
    "softmax",
    SRC,
    "softmax_rows",
    &[Access::Read, Access::ReadWrite],
)
.libs(&[&ACTIVATION]);
static WORKGROUP: Kernel = Kernel::new(
    "softmax",
    SRC,
    "softmax_wg",
    &[Access::Read, Access::ReadWrite],
)
.libs(&[&ACTIVATION]);

/// Few long rows split into segments (GPUs): each segment's max and sum, then each segment
/// written from its row's merged partials.
static PART: Kernel = Kernel::new(
    "softmax",
    SRC,
    "softmax_part",
    &[Access::Read, Access::ReadWrite],
)
.slots(&[1, 3])
.libs(&[&ACTIVATION]);
static SPLIT: Kernel = Kernel::new(
    "softmax",
    SRC,
    "softmax_split",
    &[Access::Read, Access::ReadWrite, Access::ReadWrite],
)
.libs(&[&ACTIVATION]);

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct SoftmaxParams {
    rows: u32,
    rank: u32,
    offset: u32,
    len: u32,
    stride: u32,
    out_stride: u32,
    base: u32,
    out_off: u32,
    segs: u32,
    seg_len: u32,
    pad0: u32,
    pad1: u32,
    shape: [u32; MAX_RANK],
    strides: [u32; MAX_RANK],
    out_strides: [u32; MAX_RANK],
}

/// A workgroup per row pays barriers, so it is used only when rows are too few to fill the
/// device and each is long. On GPUs it also takes long contiguous rows however many: one
/// invocation per row would walk its own row, so a warp's loads touch as many cache lines as
/// it has lanes, and a few thousand rows (cross-entropy logits over a 50k vocabulary) would
/// occupy a few percent of the device's lanes.
fn use_workgroup_variant(caps: &crate::Caps, rows: usize, len: usize, stride: usize) -> bool {
    len > 256 && (rows < 1024 || (!caps.cpu && stride == 1))
}

/// The recorded forward: softmax's backward is `y * (g - sum(g * y))` and log_softmax's
/// `g - exp(y) * sum(g)` along `dim`, composed from existing ops (one reduction each).
fn run(op: &'static str, x: &Tensor, dim: isize, log: bool) -> Result<Tensor> {
    let y = run_untracked(op, x, dim, log)?;
    Ok(crate::autograd::record(y, &[x], |y| {
        Box::new(SoftmaxBackward {
            y: y.clone(),
            dim,
            log,
        })
    }))
}

struct SoftmaxBackward {
    y: Tensor,
    dim: isize,
    log: bool,
}

impl crate::autograd::BackwardOp for SoftmaxBackward {
    fn saved(&self) -> Vec<&Tensor> {
        vec![&self.y]
    }

    fn name(&self) -> &'static str {
        if self.log {
            "log_softmax"
        } else {
            "softmax"
        }
    }

    fn backward(&self, grads: &[Option<Tensor>], _needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = grads.first().and_then(Option::as_ref) else {
            return Ok(vec![None]);
        };
        // Narrower dtypes (f16) in f32, rounded once at the end, as PyTorch's kernels accumulate
        // in float: the row sum and `g - sum` would otherwise each round to f16, losing the
        // cancellation's small difference (a cross-entropy gradient at a confident target
        // became 0) or overflowing the sum of a long row.
        let dtype = self.y.dtype();
        let widen = |t: &Tensor| match dtype {
            DType::F32 => Ok(t.clone()),
            _ => t.to_dtype(DType::F32),
        };
        let (y, g) = (&widen(&self.y)?, &widen(g)?);
        let narrow = |t: Tensor| match dtype {
            DType::F32 => Ok(t),
            d => t.to_dtype(d),
        };
        if y.rank() == 0 {
            // One element along dim 0, as the forward: the same formula (0 for finite values,
            // NaN where x or g is not, as PyTorch's).
            let (y1, g1) = (y.reshape(&[1])?, g.reshape(&[1])?);
            let gx = if self.log {
                g1.sub(&y1.exp()?.mul(&g1)?)?
            } else {
                y1.mul(&g1.sub(&g1.mul(&y1)?)?)?
            };
            return Ok(vec![Some(narrow(gx.reshape(&[])?)?)]);
        }
        let gx = if self.log {
            g.sub(&y.exp()?.mul(&g.sum(self.dim, true)?)?)?
        } else {
            y.mul(&g.sub(&g.mul(y)?.sum(self.dim, true)?)?)?
        };
        Ok(vec![Some(narrow(gx)?)])
    }
}

fn run_untracked(op: &'static str, x: &Tensor, dim: isize, log: bool) -> Result<Tensor> {
    let dev = x.device();
    // PyTorch treats a rank-0 tensor as one element along dim 0 or -1.
    if x.rank() == 0 {
        Layout::normalize_dim(op, dim, 1)?;
        return run(op, &x.reshape(&[1])?, 0, log)?.reshape(&[]);
    }
    let d = Layout::normalize_dim(op, dim, x.rank())?;
    x.require_float(op)?;
    let out = Tensor::empty(dev, op, x.shape(), x.dtype)?;
    let len = x.shape()[d];
    let outer = x.layout.without_dim(d);
    let rows = outer.numel();
    if rows == 0 || len == 0 {
        return Ok(out);
    }
    let mut out_strides = contiguous_strides(x.shape());
    let out_stride = out_strides.remove(d);
    let params = SoftmaxParams {
        rows: rows as u32,
        rank: outer.rank() as u32,
        offset: x.layout.offset() as u32,
        len: len as u32,
        stride: x.strides()[d] as u32,
        out_stride: out_stride as u32,
        base: 0,
        out_off: 0,
        segs: 1,
        seg_len: len as u32,
        pad0: 0,
        pad1: 0,
        shape: pack_dims(outer.shape()),
        strides: pack_dims(outer.strides()),
        out_strides: pack_dims(&out_strides),
    };
    let wg_variant = use_workgroup_variant(dev.caps(), rows, len, x.strides()[d]);
    let consts = [("LOG", f64::from(u8::from(log))), ("WG", WG as f64)];
    let dts = [x.dtype];
    let launch = |p: &SoftmaxParams, binds: &[Bind], n: u64| {
        let (kernel, groups) = if wg_variant {
            (&WORKGROUP, n)
        } else {
            (&ROWS, n.div_ceil(WG as u64))
        };
        let grid = dev.grid_1d(op, groups)?;
        dev.launch_binds(
            op,
            kernel,
            &dts,
            &consts,
            bytemuck::bytes_of(p),
            binds,
            grid,
        )
    };
    let limit = dev.max_binding_bytes();
    if x.buffer().size() <= limit && out.buffer().size() <= limit {
        if let Some((segs, seg_len)) = split_long_rows(dev.caps(), rows, len) {
            let parts =
                crate::runtime::Storage::scratch(dev, op, rows as u64 * u64::from(segs) * 8)?;
            let p = SoftmaxParams {
                segs,
                seg_len,
                ..params
            };
            let bytes = bytemuck::bytes_of(&p);
            let grid = dev.grid_1d(op, rows as u64 * u64::from(segs))?;
            let binds = [Bind::whole(x.buffer()), Bind::whole(parts.buffer())];
            dev.launch_binds(op, &PART, &dts, &consts, bytes, &binds, grid)?;
            let binds = [
                Bind::whole(x.buffer()),
                Bind::whole(out.buffer()),
                Bind::whole(parts.buffer()),
            ];
            dev.launch_binds(op, &SPLIT, &dts, &consts, bytes, &binds, grid)?;
            return Ok(out);
        }
        let binds = [Bind::whole(x.buffer()), Bind::whole(out.buffer())];
        return launch(&params, &binds, rows as u64).map(|()| out);
    }
    // Windows of whole slabs (the softmax dim times the dims after it) of the packed output,
    // and of x when packed too (else x must fit one binding whole).
    let mut params = params;
    let (es, align) = (x.dtype.size() as u64, dev.storage_align());
    let inner: u64 = x.shape()[d + 1..].iter().product::<usize>() as u64;
    let input = SlabInput {
        buffer: x.buffer(),
        es,
        offset: x.layout.offset() as u64,
        end: x.layout.span() as u64,
        packed: x.is_contiguous(),
    };
    for_slab_windows(dev, op, &input, rows as u64, len as u64, inner, true, |w| {
        let ys = Span::of(w.slab_start, w.slab_end, es, align, out.buffer().size());
        params.rows = w.rows as u32;
        params.base = w.start as u32;
        // Rows decode global coordinates: windowed bindings shift back by the window's start.
        params.out_off = (ys.rel as u32).wrapping_sub(w.slab_start as u32);
        params.offset = w.x_offset;
        let binds = [w.x.bind(x.buffer()), ys.bind(out.buffer())];
        launch(&params, &binds, w.rows)
    })?;
    Ok(out)
}

/// `exp(x) / sum(exp(x))` along `dim` (negative counts from the end), PyTorch's
/// `torch.softmax(x, dim)`. The row max is subtracted first, so large inputs do not overflow;
/// a NaN makes its row NaN; a row of `-inf` gives NaN, as in PyTorch.
///
/// ```no_run,ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// let dev = wgtensor::Device::new()?;
/// let logits = wgtensor::Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 1.0, 1.0, 1.0], &[2, 3])?;
/// let p = wgtensor::ops::softmax(&logits, -1)?; // each row sums to 1
/// # Ok(()) }
/// ```
pub fn softmax(x: &Tensor, dim: isize) -> Result<Tensor> {
    run("softmax", x, dim, false)
}

/// `x - log(sum(exp(x)))` along `dim`, PyTorch's `torch.log_softmax(x, dim)`: computed as
/// `x - max - log(sum(exp(x - max)))`, exact where `softmax(x).log()` would underflow to
/// `-inf`.
pub fn log_softmax(x: &Tensor, dim: isize) -> Result<Tensor> {
    run("log_softmax", x, dim, true)
}

impl Tensor {
    /// [`softmax`](crate::ops::softmax()) along `dim`.
    pub fn softmax(&self, dim: isize) -> Result<Tensor> {
        softmax(self, dim)
    }
    /// [`log_softmax`](crate::ops::log_softmax) along `dim`.
    pub fn log_softmax(&self, dim: isize) -> Result<Tensor> {
        log_softmax(self, dim)
    }
}

/// The softmax family's entry in the kernel-family registry (`ops::families()`).
pub(crate) const FAMILY: crate::runtime::pipeline::Family = crate::runtime::pipeline::Family {
    name: "softmax",
    shaders: &["softmax.wgsl"],
    params: || vec![params_layout()],
    variants: softmax_variants,
};

/// Every (kernel, dtypes, override constants) combination of this family's kernels, for
/// tests/shaders.rs to translate and validate each.
#[doc(hidden)]
pub fn softmax_variants() -> Vec<ShaderVariant> {
    let mut v = Vec::new();
    for k in [&ROWS, &WORKGROUP, &PART, &SPLIT] {
        for dt in [DType::F32, DType::F16] {
            for log in [0.0, 1.0] {
                v.push(ShaderVariant::new(
                    k,
                    &[dt],
                    &[("LOG", log), ("WG", WG as f64)],
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
        SoftmaxParams {
            rows,
            rank,
            offset,
            len,
            stride,
            out_stride,
            base,
            out_off,
            segs,
            seg_len,
            pad0,
            pad1,
            shape,
            strides,
            out_strides
        }
    )
}

#[cfg(test)]
mod plan_tests {
    use super::*;
    use crate::Caps;

    #[test]
    fn long_contiguous_rows_take_a_workgroup_on_gpus() {
        let (gpu, lvp) = (Caps::test_gpu(), Caps::test_lavapipe(2));
        // Cross-entropy logits [8192, 50257] over the last dim.
        assert!(use_workgroup_variant(&gpu, 8192, 50257, 1));
        assert!(!use_workgroup_variant(&lvp, 8192, 50257, 1));
        // Strided rows (adjacent rows adjacent in memory) and short rows: one invocation each.
        assert!(!use_workgroup_variant(&gpu, 8192, 50257, 8192));
        assert!(!use_workgroup_variant(&gpu, 8192, 256, 1));
        // Few long rows: a workgroup each everywhere.
        assert!(use_workgroup_variant(&gpu, 10, 5000, 7));
        assert!(use_workgroup_variant(&lvp, 10, 5000, 1));
    }
}
