//! Batch normalization over channel axis 1 (shaders/batchnorm.wgsl): inference, training forward
//! and backward for inputs `[N, C]`, `[N, C, L]`, `[N, C, H, W]` (any rank >= 2: the dims after
//! the channel axis are flattened), with PyTorch semantics.
//!
//! dtypes: `x`, `dy`, outputs, `gamma`, `beta` and the running statistics share one dtype (f32 or
//! f16, as PyTorch keeps them in the parameter dtype). The saved statistics (`saved_mean`,
//! `saved_invstd`) are always f32, as PyTorch's half-precision kernels save them in the
//! accumulation type; all arithmetic runs in f32.
//!
//! Each data pass splits channel c's `N*S` values into chunks (a plain function of the shape and
//! the adapter type, see [`BatchNormPlan`]); one workgroup per (chunk, channel) loops over its
//! chunk and leaves partials in a pooled f32 workspace: one per lane on CPU adapters (no
//! barriers), one per workgroup on GPUs (the lanes merged in workgroup memory by a fixed tree,
//! [`BatchNormPlan::parts`]). A per-channel pass then merges the partials in a fixed order, so
//! results are bitwise identical on every run. Training statistics are Welford updates of pivot-shifted values per lane,
//! merged with Chan's formula (never `E[x^2] - E[x]^2`), so a mean of 1e4 with a spread of 1e-2
//! keeps full precision.
//!
//! Files: types.rs holds the public types, api.rs the forward entry points, launch.rs the
//! kernels' launches, grad.rs what autograd records and the explicit `batch_norm_backward`.
//!
//! Dispatches: inference 1; training 3 (partial statistics, per-channel finalize with the
//! in-place running-stat update, normalize); backward 3 (partial sums, per-channel finalize,
//! dx).
//!
//! ```no_run,ignore-wasm32
//! # fn main() -> wgtensor::Result<()> {
//! use wgtensor::ops::{
//!     batch_norm_backward, batch_norm_inference, batch_norm_train, Activation, BatchNormOptions,
//!     BatchNormState,
//! };
//! use wgtensor::{DType, Device, Tensor};
//!
//! let dev = Device::new()?;
//! let x = Tensor::full(&dev, &[8, 16, 32, 32], 0.5, DType::F32)?;
//! let gamma = Tensor::full(&dev, &[16], 1.0, DType::F32)?;
//! let beta = Tensor::zeros(&dev, &[16], DType::F32)?;
//! let o = BatchNormOptions {
//!     weight: Some(&gamma),
//!     bias: Some(&beta),
//!     activation: Activation::Relu,
//!     ..Default::default()
//! };
//! let mut state = BatchNormState::new(&dev, 16, DType::F32)?; // momentum 0.1, as PyTorch
//! let out = batch_norm_train(&x, Some(&mut state), &o)?;
//! let dy = Tensor::full(&dev, out.y.shape(), 1.0, DType::F32)?; // the gradient of y
//! let grads = batch_norm_backward(&dy, &x, Some(&gamma), &out.saved)?;
//! let eval = batch_norm_inference(&x, &state.running_mean, &state.running_var, &o)?;
//! # Ok(()) }
//! ```

mod api;
mod grad;
mod launch;
mod plan;
mod types;

pub use api::{batch_norm_inference, batch_norm_train};
pub use grad::batch_norm_backward;
pub use plan::{plan, plan_for, BatchNormPlan};
use plan::{CPU_LANES, GPU_LANES};
pub use types::{
    BatchNormGrads, BatchNormOptions, BatchNormOutput, BatchNormSaved, BatchNormState,
};

use std::collections::HashSet;

use bytemuck::{Pod, Zeroable};

use crate::ops::activation::{Activation, ACTIVATION};
use crate::runtime::pipeline::{ShaderLib, ShaderVariant};
use crate::runtime::window::{self, Span};
use crate::runtime::{Access, Bind, Kernel, Storage};
use crate::{DType, Error, Result, Tensor};

const SRC: &str = include_str!("../../../shaders/batchnorm.wgsl");
const LIBS: &[&ShaderLib] = &[&ACTIVATION];

use Access::{Read as R, ReadWrite as RW};

// Binding numbers of shaders/batchnorm.wgsl.
const X4: u32 = 1;
const X1: u32 = 2;
const DY4: u32 = 3;
const DY1: u32 = 4;
const OUT4: u32 = 5;
const OUT1: u32 = 6;
const WS: u32 = 7;
const GAMMA: u32 = 8;
const BETA: u32 = 9;
const RMEAN: u32 = 10;
const RVAR: u32 = 11;
const SMEAN: u32 = 12;
const SINV: u32 = 13;
const DGAMMA: u32 = 14;
const DBETA: u32 = 15;

/// A batch norm entry point binding `bindings` at `slots`.
const fn kernel(entry: &'static str, bindings: &'static [Access], slots: &'static [u32]) -> Kernel {
    Kernel::new("batchnorm", SRC, entry, bindings)
        .slots(slots)
        .libs(LIBS)
}
static STATS: Kernel = kernel("bn_stats", &[R, R, RW], &[X4, X1, WS]);
/// bn_stats over a window that may not hold sample 0: the pivots come gathered (SMEAN slot).
static STATS_PIVOTS: Kernel = kernel("bn_stats_pivots", &[R, R, RW, RW], &[X4, X1, WS, SMEAN]);
static FINALIZE: Kernel = kernel(
    "bn_finalize",
    &[RW, RW, RW, RW, RW, RW, RW],
    &[WS, GAMMA, BETA, RMEAN, RVAR, SMEAN, SINV],
);
static APPLY: Kernel = kernel("bn_apply", &[R, R, RW, RW, RW], &[X4, X1, OUT4, OUT1, WS]);
static INFER: Kernel = kernel(
    "bn_infer",
    &[R, R, RW, RW, RW, RW, RW, RW],
    &[X4, X1, OUT4, OUT1, GAMMA, BETA, RMEAN, RVAR],
);
static GRAD_STATS: Kernel = kernel(
    "bn_grad_stats",
    &[R, R, R, R, RW, RW],
    &[X4, X1, DY4, DY1, SMEAN, WS],
);
static GRAD_FINALIZE: Kernel = kernel(
    "bn_grad_finalize",
    &[RW, RW, RW, RW, RW, RW],
    &[WS, GAMMA, SMEAN, SINV, DGAMMA, DBETA],
);
static GRAD_APPLY: Kernel = kernel(
    "bn_grad_apply",
    &[R, R, R, R, RW, RW, RW],
    &[X4, X1, DY4, DY1, OUT4, OUT1, WS],
);

/// Invocations per workgroup of the per-channel passes (`FIN_WG` in the shader).
const FIN_WG: u64 = 64;

const FLAG_GAMMA: u32 = 1;
const FLAG_BETA: u32 = 2;
const FLAG_RUNNING: u32 = 4;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable, Default)]
struct BnParams {
    channels: u32,
    sg: u32,
    plane: u32,
    groups: u32,
    chunk: u32,
    chunks: u32,
    step_n: u32,
    step_s: u32,
    x_off: u32,
    dy_off: u32,
    count: f32,
    eps: f32,
    factor: f32,
    flags: u32,
    gamma_os: [u32; 2],
    beta_os: [u32; 2],
    rmean_os: [u32; 2],
    rvar_os: [u32; 2],
    smean_os: [u32; 2],
    sinv_os: [u32; 2],
    ws_part: u32,
    vec: u32,
    chunk0: u32,
    o_off: u32,
}

/// Chunks `[chunk0, chunk0 + chunks)` of every channel, over samples `[na, nb)`.
struct DataWindow {
    chunk0: u32,
    chunks: u32,
    na: u64,
    nb: u64,
}

/// The validated input: shape facts and the tensors to bind (packed copies of strided views).
struct Input {
    x: Tensor,
    c: usize,
    plan: BatchNormPlan,
    params: BnParams,
}

/// The channel count of a valid input (`check_input`'s rule): an empty 1-D input is a batch of
/// no channels, which PyTorch's batch_norm returns as is before any rank check.
fn input_channels(op: &'static str, x: &Tensor) -> Result<usize> {
    if x.rank() == 1 && x.numel() == 0 {
        x.device().require_dtype(op, x.dtype)?;
        return Ok(0);
    }
    check_input(op, x)?;
    Ok(x.shape()[1])
}

fn check_input(op: &'static str, x: &Tensor) -> Result<()> {
    if x.rank() < 2 {
        return Err(Error::shape(
            op,
            format!(
                "expected an input of rank >= 2 ([N, C], [N, C, L], [N, C, H, W]), got shape {:?}",
                x.shape()
            ),
        ));
    }
    x.device().require_dtype(op, x.dtype)
}

/// `t` itself when the kernels can read it in place (packed row-major), else a packed copy.
fn packed(t: &Tensor) -> Result<Tensor> {
    if t.is_contiguous() {
        Ok(t.clone())
    } else {
        t.contiguous_at_zero()
    }
}

/// check_dims_match_num_input_features: `c` elements, in its words (then the shapes).
/// `_batch_norm_impl_index` runs it over running_mean, running_var, weight and bias before
/// any device or dtype check ([`check_channel_counts`]).
fn check_channel_count(
    op: &'static str,
    what: &str,
    x: &Tensor,
    t: &Tensor,
    c: usize,
) -> Result<()> {
    if t.numel() != c {
        let arg = what.split(' ').next().unwrap_or(what);
        return Err(Error::shape(
            op,
            format!(
                "{arg} should contain {c} elements not {} ({what} has shape {:?}, expected [{c}] \
                 for the input {:?})",
                t.numel(),
                t.shape(),
                x.shape()
            ),
        ));
    }
    Ok(())
}

/// [`check_channel_count`] over the defined ones of `vecs`, in order.
fn check_channel_counts(
    op: &'static str,
    x: &Tensor,
    vecs: &[(&str, Option<&Tensor>)],
    c: usize,
) -> Result<()> {
    for (what, t) in vecs {
        if let Some(t) = t {
            check_channel_count(op, what, x, t, c)?;
        }
    }
    Ok(())
}

/// Checks a per-channel vector: same device and dtype as `x`, shape `[c]`. Returns its
/// (offset, stride).
fn check_channel_vec(
    op: &'static str,
    what: &str,
    x: &Tensor,
    t: &Tensor,
    c: usize,
    dtype: DType,
) -> Result<[u32; 2]> {
    x.same_device(op, t)?;
    check_channel_count(op, what, x, t, c)?;
    if t.shape() != [c] {
        return Err(Error::shape(
            op,
            format!(
                "{what} has shape {:?}, expected [{c}] (one value per channel of the input {:?})",
                t.shape(),
                x.shape()
            ),
        ));
    }
    if t.dtype != dtype {
        return Err(Error::DType {
            op,
            expected: dtype,
            got: t.dtype,
        });
    }
    Ok([t.layout.offset() as u32, t.strides()[0] as u32])
}

/// Element indices of a 1-D view.
fn elements(t: &Tensor) -> impl Iterator<Item = usize> + '_ {
    let (off, st) = (t.layout.offset(), t.strides()[0]);
    (0..t.numel()).map(move |i| off + i * st)
}

/// Errors when `a` (a 1-D vector updated in place) repeats an element (a broadcast view) or
/// shares an element with one of `others`.
fn check_in_place(
    op: &'static str,
    what: &str,
    a: &Tensor,
    others: &[(&str, &Tensor)],
) -> Result<()> {
    if a.layout().repeats_elements() {
        return Err(Error::arg(
            op,
            format!(
                "{what} (shape {:?}, strides {:?}) is updated in place and must not repeat elements",
                a.shape(),
                a.strides()
            ),
        ));
    }
    for (name, b) in others {
        if !a.shares_storage(b) {
            continue;
        }
        let mine: HashSet<usize> = elements(a).collect();
        let overlap = if b.rank() == 1 {
            elements(b).any(|i| mine.contains(&i))
        } else {
            let (lo, hi) = (b.layout.offset(), b.layout.span());
            mine.iter().any(|&i| i >= lo && i < hi)
        };
        if overlap {
            return Err(Error::arg(
                op,
                format!("{what} is updated in place and must not overlap {name}"),
            ));
        }
    }
    Ok(())
}

/// The kernels' f32 eps, or an error naming the value: F.batch_norm's rule in its words,
/// positive in training (batch statistics of a constant channel would divide by zero) and
/// non-negative with running statistics. Like it, NaN and inf pass (a NaN eps gives NaN, an
/// infinite one, or one past f32's range, a zero invstd). In training an eps below f32's normal
/// range becomes the least normal f32: PyTorch's CPU kernel adds eps to the batch variance in
/// f64, so there a constant channel normalizes to 0, where an eps rounded to 0 here gave 0 / 0
/// (a subnormal eps would not do: GPUs may flush it to zero).
fn check_eps(op: &'static str, eps: f64, training: bool) -> Result<f32> {
    let e = crate::error::py_float(eps);
    if training && eps <= 0.0 {
        return Err(Error::arg(
            op,
            format!("batch_norm eps must be positive during training, but got {e}"),
        ));
    }
    if eps < 0.0 {
        return Err(Error::arg(
            op,
            format!("batch_norm eps must be non-negative, but got {e}"),
        ));
    }
    if training && (eps as f32) < f32::MIN_POSITIVE {
        return Ok(f32::MIN_POSITIVE);
    }
    Ok(eps as f32)
}

/// Validates `x` (and `dy`), packs strided views and fills the shape part of the params.
fn prepare(op: &'static str, x: &Tensor, dy: Option<&Tensor>) -> Result<(Input, Option<Tensor>)> {
    check_input(op, x)?;
    if let Some(dy) = dy {
        x.check_grad_output(op, dy)?;
    }
    let x = packed(x)?;
    let dy = dy.map(packed).transpose()?;
    let shape = x.shape().to_vec();
    let (n, c, s) = (shape[0], shape[1], shape[2..].iter().product::<usize>());
    let mut offsets = vec![x.layout.offset()];
    if let Some(d) = &dy {
        offsets.push(d.layout.offset());
    }
    let pl = plan(x.device(), &shape, &offsets)?;
    let vec = pl.vec as usize;
    let sg = s / vec;
    let wg = pl.wg as usize;
    let params = BnParams {
        channels: c as u32,
        sg: sg as u32,
        plane: (c * sg) as u32,
        groups: (n * sg) as u32,
        chunk: pl.chunk,
        chunks: pl.chunks,
        step_n: (wg / sg) as u32,
        step_s: (wg % sg) as u32,
        x_off: (x.layout.offset() / vec) as u32,
        dy_off: dy.as_ref().map_or(0, |d| d.layout.offset() / vec) as u32,
        count: (n * s) as f32,
        ws_part: c as u32,
        vec: pl.vec,
        ..Default::default()
    };
    Ok((
        Input {
            x,
            c,
            plan: pl,
            params,
        },
        dy,
    ))
}

impl Input {
    fn consts(&self, act: Option<Activation>) -> Vec<(&'static str, f64)> {
        let mut v = vec![("WG", self.plan.wg as f64)];
        if let Some(a) = act {
            v.push(("ACT", a as u32 as f64));
        }
        v
    }

    /// A buffer for a binding this dispatch never touches (the other VEC width's output, an
    /// absent gamma / beta / running statistic). WebGPU, unlike Vulkan, rejects a dispatch in
    /// which a read_write storage binding aliases any other binding, so an unused binding may
    /// not repeat a buffer bound elsewhere: each one gets its own small pooled buffer.
    fn placeholder(&self, op: &'static str) -> Result<Storage> {
        Storage::scratch(self.x.device(), op, 16)
    }

    /// The windows of chunks the data passes run in when x (or dy, or the output) is larger
    /// than one binding: each spans whole samples `[na, nb)` that fit a binding. `None`: one
    /// dispatch binding whole buffers.
    fn windows(
        &self,
        op: &'static str,
        others: &[&wgpu::Buffer],
    ) -> Result<Option<Vec<DataWindow>>> {
        let dev = self.x.device();
        let limit = dev.max_binding_bytes();
        let mut bufs = vec![self.x.buffer()];
        bufs.extend_from_slice(others);
        if bufs.iter().all(|b| b.size() <= limit) {
            return Ok(None);
        }
        let p = &self.params;
        let (es, align) = (self.x.dtype().size() as u64, dev.storage_align());
        let sample = (self.c as u64) * (p.sg as u64) * (p.vec as u64) * es;
        let (chunk, groups, sg) = (p.chunk as u64, p.groups as u64, p.sg as u64);
        let samples = |j0: u64, j1: u64| {
            let (a, b) = (j0 * chunk, (j1 * chunk).min(groups));
            (a / sg, b.div_ceil(sg))
        };
        let fits = |j0, j1| {
            let (na, nb) = samples(j0, j1);
            (nb - na) * sample + align + 4 <= limit
        };
        let mut out = Vec::new();
        let mut j0 = 0u64;
        while j0 < p.chunks as u64 {
            if !fits(j0, j0 + 1) {
                return Err(window::too_wide(
                    op,
                    sample * chunk.div_ceil(sg).max(1),
                    limit,
                ));
            }
            let mut j1 = j0 + 1;
            while j1 < p.chunks as u64 && fits(j0, j1 + 1) {
                j1 += 1;
            }
            let (na, nb) = samples(j0, j1);
            out.push(DataWindow {
                chunk0: j0 as u32,
                chunks: (j1 - j0) as u32,
                na,
                nb,
            });
            j0 = j1;
        }
        Ok(Some(out))
    }

    /// The binding of samples `[w.na, w.nb)` of a packed `[N, C, ...]` tensor starting at
    /// element `first`, and the group offset the shader adds to a group index (which counts
    /// from sample 0): the window's start, moved back by `na` planes (mod 2^32).
    fn window_span(
        &self,
        op: &'static str,
        w: &DataWindow,
        t: &wgpu::Buffer,
        first: u64,
    ) -> Result<(Span, u32)> {
        let dev = self.x.device();
        let p = &self.params;
        let (es, vec) = (self.x.dtype().size() as u64, p.vec as u64);
        let plane = p.plane as u64 * vec;
        let sp = Span::of(
            first + w.na * plane,
            first + w.nb * plane,
            es,
            dev.storage_align(),
            t.size(),
        );
        if !sp.rel.is_multiple_of(vec) {
            return Err(window::too_wide(op, sp.size, dev.max_binding_bytes()));
        }
        let off = ((sp.rel / vec) as u32).wrapping_sub((w.na * p.plane as u64) as u32);
        Ok((sp, off))
    }

    /// The output slots (OUT4, OUT1) with `out` where the VEC variant writes, `unused` at the
    /// other.
    fn out_binds<'a>(&self, out: Bind<'a>, unused: &'a Storage) -> [Bind<'a>; 2] {
        let u = Bind::whole(unused.buffer());
        if self.plan.vec == 4 {
            [out, u]
        } else {
            [u, out]
        }
    }

    /// Records a data pass (one workgroup per chunk and channel): once over whole buffers, or
    /// once per window (see [`Input::windows`]). `binds(x, dy, out)` orders the pass's
    /// bindings from those of x, dy and the output (whole or the window's range).
    #[allow(clippy::too_many_arguments)]
    fn run_data<'a>(
        &'a self,
        op: &'static str,
        kernel: &Kernel,
        consts: &[(&'static str, f64)],
        windows: &Option<Vec<DataWindow>>,
        dy: Option<&'a Tensor>,
        out: Option<&'a wgpu::Buffer>,
        binds: impl Fn(Bind<'a>, Option<Bind<'a>>, Option<Bind<'a>>) -> Vec<Bind<'a>>,
    ) -> Result<()> {
        let dev = self.x.device();
        let dts = [self.x.dtype()];
        let Some(ws) = windows else {
            let b = binds(
                Bind::whole(self.x.buffer()),
                dy.map(|d| Bind::whole(d.buffer())),
                out.map(Bind::whole),
            );
            let params = bytemuck::bytes_of(&self.params);
            return dev.launch_binds(op, kernel, &dts, consts, params, &b, self.data_grid());
        };
        for w in ws {
            let mut p = self.params;
            p.chunk0 = w.chunk0;
            let (xs, xo) =
                self.window_span(op, w, self.x.buffer(), self.x.layout.offset() as u64)?;
            p.x_off = xo;
            let dyb = match dy {
                Some(d) => {
                    let (sp, o) = self.window_span(op, w, d.buffer(), d.layout.offset() as u64)?;
                    p.dy_off = o;
                    Some(sp.bind(d.buffer()))
                }
                None => None,
            };
            let ob = match out {
                Some(o) => {
                    let (sp, off) = self.window_span(op, w, o, 0)?;
                    p.o_off = off;
                    Some(sp.bind(o))
                }
                None => None,
            };
            let b = binds(xs.bind(self.x.buffer()), dyb, ob);
            let grid = self.chunk_grid(w.chunks);
            dev.launch_binds(op, kernel, &dts, consts, bytemuck::bytes_of(&p), &b, grid)?;
        }
        Ok(())
    }

    fn data_grid(&self) -> [u32; 3] {
        self.chunk_grid(self.plan.chunks)
    }

    /// `chunks` workgroups per channel on x, the channels on y, continued on z past the
    /// adapter's per-dimension limit (a BatchNorm1d over more than 65535 features; the shader's
    /// `logical_wid` folds y and z back into the channel and skips the ragged rest).
    fn chunk_grid(&self, chunks: u32) -> [u32; 3] {
        let max = self
            .x
            .device()
            .limits()
            .max_compute_workgroups_per_dimension as usize;
        let y = self.c.min(max).max(1);
        [chunks, y as u32, self.c.div_ceil(y) as u32]
    }

    fn channel_grid(&self, op: &'static str) -> Result<[u32; 3]> {
        let dev = self.x.device();
        dev.grid_1d(op, (self.c as u64).div_ceil(FIN_WG))
    }

    /// The f32 workspace: per-channel coefficients, then one partial per lane.
    fn workspace(&self, op: &'static str) -> Result<Storage> {
        let partials = self.c as u64 * self.plan.chunks as u64 * self.plan.parts() as u64;
        Storage::scratch(self.x.device(), op, (self.c as u64 + partials) * 16)
    }
}

/// The batchnorm family's entry in the kernel-family registry (`ops::families()`).
pub(crate) const FAMILY: crate::runtime::pipeline::Family = crate::runtime::pipeline::Family {
    name: "batchnorm",
    shaders: &["batchnorm.wgsl"],
    params: || vec![params_layout()],
    variants: batchnorm_variants,
};

/// Every (kernel, dtypes, override constants) combination of this family's kernels, for
/// tests/shaders.rs to translate and validate each.
#[doc(hidden)]
pub fn batchnorm_variants() -> Vec<ShaderVariant> {
    let mut v = Vec::new();
    for dt in [DType::F32, DType::F16] {
        for wg in [CPU_LANES, GPU_LANES] {
            let c = [("WG", wg as f64)];
            for k in [
                &STATS,
                &STATS_PIVOTS,
                &FINALIZE,
                &GRAD_STATS,
                &GRAD_FINALIZE,
                &GRAD_APPLY,
            ] {
                v.push(ShaderVariant::new(k, &[dt], &c));
            }
            for act in Activation::ALL {
                let mut ca = c.to_vec();
                ca.push(("ACT", act as u32 as f64));
                v.push(ShaderVariant::new(&INFER, &[dt], &ca));
                // Training fuses every activation but GELU, whose backward needs its input.
                if act.grad_from_output() {
                    v.push(ShaderVariant::new(&APPLY, &[dt], &ca));
                }
            }
        }
    }
    v
}

/// The params struct's layout, checked against the shader's `struct Params` in tests/shaders.rs.
#[doc(hidden)]
pub fn params_layout() -> crate::runtime::pipeline::ParamsLayout {
    crate::runtime::pipeline::params_layout!(
        STATS,
        &[DType::F32],
        BnParams {
            channels,
            sg,
            plane,
            groups,
            chunk,
            chunks,
            step_n,
            step_s,
            x_off,
            dy_off,
            count,
            eps,
            factor,
            flags,
            gamma_os,
            beta_os,
            rmean_os,
            rvar_os,
            smean_os,
            sinv_os,
            ws_part,
            vec,
            chunk0,
            o_off
        }
    )
}
