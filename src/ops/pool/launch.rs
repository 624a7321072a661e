//! The pooling kernels (shaders/pool.wgsl): window geometry, the recorded launch and its
//! backward, the shader variants and the params layout.

use bytemuck::{Pod, Zeroable};

use super::options::{AvgPool2dOptions, MaxPool2dOptions};
use crate::ops::activation::ACTIVATION;
use crate::runtime::pipeline::ShaderVariant;
use crate::runtime::{Access, Kernel};
use crate::{DType, Error, Result, Tensor};

const WG: u32 = 64;
pub(super) const POOL_MAX: u32 = 0;
pub(super) const POOL_AVG: u32 = 1;
const POOL_DEFS: &[(&str, u32)] = &[("POOL_MAX", POOL_MAX), ("POOL_AVG", POOL_AVG)];
const SRC: &str = include_str!("../../../shaders/pool.wgsl");

use Access::{Read as R, ReadWrite as RW};

static FORWARD: Kernel = Kernel::new("pool", SRC, "pool_forward", &[R, RW])
    .slots(&[1, 3])
    .libs(&[&ACTIVATION])
    .defs(POOL_DEFS);
static INDICES: Kernel = Kernel::new("pool", SRC, "pool_indices", &[R, RW])
    .slots(&[1, 4])
    .libs(&[&ACTIVATION])
    .defs(POOL_DEFS);
/// The backward; max pools bind the windows' argmax indices at slot 4 (computed by
/// `pool_indices` first), average pools a 4-byte placeholder there.
static BACKWARD: Kernel = Kernel::new("pool", SRC, "pool_backward", &[R, R, RW, RW])
    .slots(&[1, 2, 3, 4])
    .libs(&[&ACTIVATION])
    .defs(POOL_DEFS);

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable, Default)]
struct PoolParams {
    planes: u32,
    h: u32,
    w: u32,
    oh: u32,
    ow: u32,
    kh: u32,
    kw: u32,
    sh: u32,
    sw: u32,
    ph: u32,
    pw: u32,
    dh: u32,
    dw: u32,
    x_off: u32,
    include_pad: u32,
    divisor: f32,
}

/// What the kernel needs for one pooling problem.
#[derive(Clone, Copy)]
pub(super) struct Window {
    mode: u32,
    adaptive: bool,
    k: [usize; 2],
    s: [usize; 2],
    p: [usize; 2],
    d: [usize; 2],
    include_pad: bool,
    divisor: usize,
}

/// PyTorch's `pooling_output_shape`, signed (at most 0 when no window fits) for any `usize`
/// options and a stride of at least 1: in i128, with `d (k - 1)` saturating (two options near
/// usize::MAX pass i128, an invalid size either way).
pub(super) fn pooling_output_shape(
    len: usize,
    k: usize,
    pad: usize,
    s: usize,
    d: usize,
    ceil: bool,
) -> i128 {
    let (len, k, pad, s, d) = (len as i128, k as i128, pad as i128, s as i128, d as i128);
    // Rounded toward -inf (PyTorch's div_rtn): with ceil_mode a kernel up to stride - 1
    // longer than the padded input still gives one window, which hangs past the end.
    let numer = len + 2 * pad - d.saturating_mul(k - 1) - 1 + if ceil { s - 1 } else { 0 };
    let mut out = numer.div_euclid(s) + 1;
    // The last window must start inside the input or the left padding.
    if ceil && (out - 1) * s >= len + pad {
        out -= 1;
    }
    out
}

/// [`pooling_output_shape`] of options within their limits, refused when no window fits.
fn out_size(
    op: &'static str,
    len: usize,
    k: usize,
    pad: usize,
    s: usize,
    d: usize,
    ceil: bool,
) -> Result<usize> {
    let out = pooling_output_shape(len, k, pad, s, d, ceil);
    if out < 1 {
        let eff = d as i64 * (k as i64 - 1) + 1;
        return Err(Error::shape(
            op,
            format!(
                "Output size is too small: input {len} with padding {pad} is shorter than the \
                 effective kernel {eff}"
            ),
        ));
    }
    Ok(out as usize)
}

/// Validates `x` ([N, C, H, W] or [C, H, W]) and returns (planes, H, W, leading dims).
fn planes_2d(op: &'static str, x: &Tensor) -> Result<(usize, usize, usize, Vec<usize>)> {
    let s = x.shape();
    let lead = match s.len() {
        4 => s[..2].to_vec(),
        3 => s[..1].to_vec(),
        _ => {
            return Err(Error::shape(
                op,
                format!(
                    "Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for \
                     input, but got:{s:?} (a 3-D [C, H, W] or 4-D [N, C, H, W] input)"
                ),
            ))
        }
    };
    // PyTorch's pool shape checks: only the batch may be empty.
    let (c, h, w) = (s[s.len() - 3], s[s.len() - 2], s[s.len() - 1]);
    if c == 0 || h == 0 || w == 0 {
        return Err(Error::shape(
            op,
            format!(
                "Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for \
                 input, but got:{s:?} (non-empty channel and spatial dims: only the batch may \
                 be empty)"
            ),
        ));
    }
    Ok((lead.iter().product(), h, w, lead))
}

fn check_regular(
    op: &'static str,
    k: [usize; 2],
    s: [usize; 2],
    p: [usize; 2],
    d: [usize; 2],
) -> Result<()> {
    // The kernel's i32 window arithmetic (start + kernel, output x stride) stays below 2^31
    // for sides below 2^30 (refused past that in `launch`) with every option below 2^28.
    const LIMIT: usize = 1 << 28;
    for v in [k, s, p, d] {
        if v.iter().any(|&x| x > LIMIT) {
            return Err(Error::size(
                op,
                format!("option value {v:?} is above {LIMIT}"),
            ));
        }
    }
    // PyTorch's words, in the order of its checks: pooling_output_shape's stride and
    // effective-kernel pad (`(k - 1) d + 1`, 1 - d for an empty kernel, truncated as C++
    // divides), then pool2d_shape_check's kernel and dilation; its pad <= kernel / 2 comes
    // after the input's planes ([`check_half_kernel`]).
    let zero = |what: &str| {
        Err(Error::arg(
            op,
            format!(
                "{what}: kernel_size {k:?}, stride {s:?} and dilation {d:?} must be greater \
                 than zero"
            ),
        ))
    };
    if s.contains(&0) {
        return zero("stride should not be zero");
    }
    let effective = |a: usize| (k[a] as i128 - 1) * d[a] as i128 + 1;
    if (0..2).any(|a| p[a] as i128 > effective(a) / 2) {
        return Err(Error::arg(
            op,
            format!(
                "pad should be at most half of effective kernel size, but got pad={p:?}, \
                 kernel_size={k:?} and dilation={d:?}"
            ),
        ));
    }
    if k.contains(&0) {
        return zero("kernel size should be greater than zero");
    }
    if d.contains(&0) {
        return zero("dilation should be greater than zero");
    }
    Ok(())
}

/// pool2d_shape_check's pad <= kernel / 2 (max_pool1d's too), after the input's planes: with
/// dilation it is stricter than [`check_regular`]'s.
fn check_half_kernel(op: &'static str, k: [usize; 2], p: [usize; 2], d: [usize; 2]) -> Result<()> {
    if (0..2).any(|a| p[a] > k[a] / 2) {
        return Err(Error::arg(
            op,
            format!(
                "pad should be smaller than or equal to half of kernel size, but got \
                 pad={p:?}, kernel_size={k:?} and dilation={d:?}"
            ),
        ));
    }
    Ok(())
}

/// The recorded forward (`dy` None) or a gradient launch (`dy` given, untracked): a pool's
/// backward is the same family's gradient gather over the saved input's windows.
pub(super) fn run(
    op: &'static str,
    x: &Tensor,
    win: Window,
    out_hw: [usize; 2],
    dy: Option<&Tensor>,
) -> Result<Tensor> {
    let y = run_untracked(op, x, win, out_hw, dy)?;
    if dy.is_some() {
        return Ok(y);
    }
    Ok(crate::autograd::record(y, &[x], |_| {
        Box::new(PoolBackward {
            x: x.detach(),
            win,
            out_hw,
            name: op,
        })
    }))
}

struct PoolBackward {
    x: Tensor,
    win: Window,
    out_hw: [usize; 2],
    name: &'static str,
}

impl crate::autograd::BackwardOp for PoolBackward {
    fn saved(&self) -> Vec<&Tensor> {
        vec![&self.x]
    }

    fn name(&self) -> &'static str {
        self.name
    }

    fn backward(&self, grads: &[Option<Tensor>], _needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        Ok(vec![match grads.first().and_then(Option::as_ref) {
            Some(g) => Some(run_untracked(
                "pool backward",
                &self.x,
                self.win,
                self.out_hw,
                Some(g),
            )?),
            None => None,
        }])
    }
}

fn run_untracked(
    op: &'static str,
    x: &Tensor,
    win: Window,
    out_hw: [usize; 2],
    dy: Option<&Tensor>,
) -> Result<Tensor> {
    launch(op, x, win, out_hw, dy, false)
}

/// The flat in-plane index of each window's maximum (PyTorch's `return_indices=True`), i32.
pub(super) fn indices_untracked(
    op: &'static str,
    x: &Tensor,
    win: Window,
    out_hw: [usize; 2],
) -> Result<Tensor> {
    launch(op, x, win, out_hw, None, true)
}

fn launch(
    op: &'static str,
    x: &Tensor,
    win: Window,
    out_hw: [usize; 2],
    dy: Option<&Tensor>,
    indices: bool,
) -> Result<Tensor> {
    let (planes, h, w, lead) = planes_2d(op, x)?;
    let mut out_shape = lead.clone();
    out_shape.extend(out_hw);
    if let Some(dy) = dy {
        x.same_device(op, dy)?;
        x.same_dtype(op, dy)?;
        if dy.shape() != out_shape.as_slice() {
            return Err(Error::shape(
                op,
                format!(
                    "grad_output has shape {:?}, the pooled output of input {:?} has {out_shape:?}",
                    dy.shape(),
                    x.shape()
                ),
            ));
        }
    }
    x.device().require_dtype(op, x.dtype)?;
    // The kernels index the input and the output with u32 (plane, row, column) products;
    // adaptive windows' bounds (o * len / out) take 64-bit products in the shader (`mul_div`
    // in shaders/pool.wgsl), and regular windows step by their stride, so any sizes whose
    // planes index in u32 work. Output sizes come from the caller (adaptive pools): any of
    // them may be near usize::MAX.
    let (oh, ow) = (out_hw[0] as u128, out_hw[1] as u128);
    // The window starts o * stride - padding are i32: sides past 2^30 are refused too.
    let (hh, ww) = ((h as u128).max(oh), (w as u128).max(ow));
    // The side bound first: it keeps the product of three sides within u128.
    let plane_ok = hh.max(ww) < 1 << 30 && planes as u128 * hh * ww < u32::MAX as u128;
    if !plane_ok {
        return Err(Error::size(
            op,
            format!(
                "input {:?} pooled to {out_hw:?} (as [planes, height, width] = [{planes}, {h}, {w}]): the planes are beyond u32 indexing",
                x.shape()
            ),
        ));
    }
    let dev = x.device();
    let result_shape = if dy.is_some() {
        x.shape().to_vec()
    } else {
        out_shape
    };
    let out_dtype = if indices { DType::I32 } else { x.dtype };
    let out = Tensor::empty(dev, op, &result_shape, out_dtype)?;
    if out.numel() == 0 {
        return Ok(out);
    }
    let xs = x.contiguous_at_zero()?;
    let params = PoolParams {
        planes: planes as u32,
        h: h as u32,
        w: w as u32,
        oh: out_hw[0] as u32,
        ow: out_hw[1] as u32,
        kh: win.k[0] as u32,
        kw: win.k[1] as u32,
        sh: win.s[0] as u32,
        sw: win.s[1] as u32,
        ph: win.p[0] as u32,
        pw: win.p[1] as u32,
        dh: win.d[0] as u32,
        dw: win.d[1] as u32,
        x_off: 0,
        include_pad: win.include_pad as u32,
        divisor: win.divisor as f32,
    };
    let consts = [
        ("MODE", win.mode as f64),
        ("ADAPTIVE", f64::from(u8::from(win.adaptive))),
        ("WG", WG as f64),
    ];
    let n = out.numel() as u64;
    let grid = dev.grid_1d(op, n.div_ceil(WG as u64))?;
    match dy {
        None => dev.launch(
            op,
            if indices { &INDICES } else { &FORWARD },
            &[x.dtype],
            &consts,
            bytemuck::bytes_of(&params),
            &[xs.buffer(), out.buffer()],
            grid,
        )?,
        Some(dy) => {
            let g = dy.contiguous_at_zero()?;
            // Held until the backward is recorded, so the pool cannot hand the buffer on.
            let (arg_t, arg_s);
            let args = if win.mode == POOL_MAX {
                arg_t = launch(op, &xs, win, out_hw, None, true)?;
                arg_t.buffer()
            } else {
                arg_s = crate::runtime::Storage::scratch(dev, op, 4)?;
                arg_s.buffer()
            };
            dev.launch(
                op,
                &BACKWARD,
                &[x.dtype],
                &consts,
                bytemuck::bytes_of(&params),
                &[xs.buffer(), g.buffer(), out.buffer(), args],
                grid,
            )?
        }
    }
    Ok(out)
}

pub(super) fn max_window(
    op: &'static str,
    x: &Tensor,
    o: &MaxPool2dOptions,
) -> Result<(Window, [usize; 2])> {
    let s = o.stride.unwrap_or(o.kernel_size);
    // max_pool2d_with_indices' meta checks the rank before the options.
    if !matches!(x.rank(), 3 | 4) {
        return Err(Error::shape(
            op,
            format!(
                "non-empty 3D or 4D (batch mode) tensor expected for input, got {:?}",
                x.shape()
            ),
        ));
    }
    check_regular(op, o.kernel_size, s, o.padding, o.dilation)?;
    let (_, h, w, _) = planes_2d(op, x)?;
    check_half_kernel(op, o.kernel_size, o.padding, o.dilation)?;
    let oh = out_size(
        op,
        h,
        o.kernel_size[0],
        o.padding[0],
        s[0],
        o.dilation[0],
        o.ceil_mode,
    )?;
    let ow = out_size(
        op,
        w,
        o.kernel_size[1],
        o.padding[1],
        s[1],
        o.dilation[1],
        o.ceil_mode,
    )?;
    let win = Window {
        mode: POOL_MAX,
        adaptive: false,
        k: o.kernel_size,
        s,
        p: o.padding,
        d: o.dilation,
        include_pad: false,
        divisor: 0,
    };
    Ok((win, [oh, ow]))
}

pub(super) fn avg_window(
    op: &'static str,
    x: &Tensor,
    o: &AvgPool2dOptions,
) -> Result<(Window, [usize; 2])> {
    let s = o.stride.unwrap_or(o.kernel_size);
    // avg_pool2d's meta function checks the divisor before the output shape.
    if o.divisor_override == Some(0) {
        return Err(Error::arg(op, "divisor must be not zero"));
    }
    check_regular(op, o.kernel_size, s, o.padding, [1, 1])?;
    let (_, h, w, _) = planes_2d(op, x)?;
    check_half_kernel(op, o.kernel_size, o.padding, [1, 1])?;
    let oh = out_size(op, h, o.kernel_size[0], o.padding[0], s[0], 1, o.ceil_mode)?;
    let ow = out_size(op, w, o.kernel_size[1], o.padding[1], s[1], 1, o.ceil_mode)?;
    let win = Window {
        mode: POOL_AVG,
        adaptive: false,
        k: o.kernel_size,
        s,
        p: o.padding,
        d: [1, 1],
        include_pad: o.count_include_pad,
        divisor: o.divisor_override.unwrap_or(0),
    };
    Ok((win, [oh, ow]))
}

/// The adaptive pools' shape checks in PyTorch's order and words, before the dtype dispatch:
/// both check the rank first, then adaptive_max_pool2d's meta every non-batch dim (1 and up),
/// adaptive_avg_pool2d's template dims -2 and -1.
pub(super) fn adaptive_shape_check(
    op: &'static str,
    kernel: &str,
    s: &[usize],
    max: bool,
) -> Result<()> {
    let r = s.len();
    let rank = || {
        let colon = if max { ":" } else { "" };
        Err(Error::shape(
            op,
            format!("{kernel}(): Expected 3D or 4D tensor, but got{colon} {s:?}"),
        ))
    };
    let empty = |dims: std::ops::Range<usize>| -> Result<()> {
        match dims.into_iter().find(|&i| s[i] == 0) {
            Some(i) => Err(Error::shape(
                op,
                format!(
                    "{kernel}(): Expected input to have non-zero size for non-batch dimensions, \
                     but input has sizes {s:?} with dimension {i} being empty"
                ),
            )),
            None => Ok(()),
        }
    };
    if !matches!(r, 3 | 4) {
        return rank();
    }
    empty(if max { 1..r } else { r - 2..r })
}

/// PyTorch's dispatch refusal of an integer input, in its words, for the pools that have no
/// integer kernel there (the average pools, max_pool1d without indices, the adaptive pools);
/// its max_pool2d takes integers, which wgtensor's kernels refuse when there is work to do.
/// Called after the window's checks and before any empty-output return, so an empty i32 input
/// is refused as a full one.
pub(super) fn float_only(op: &'static str, kernel: &str, x: &Tensor) -> Result<()> {
    if x.dtype().is_float() {
        return Ok(());
    }
    Err(Error::arg(
        op,
        format!("\"{kernel}\" not implemented for 'Int' (convert with to_dtype(DType::F32))"),
    ))
}

pub(super) fn adaptive_window(
    op: &'static str,
    x: &Tensor,
    out: [usize; 2],
    mode: u32,
) -> Result<(Window, [usize; 2])> {
    let kernel = match mode {
        POOL_MAX => "adaptive_max_pool2d",
        _ => "adaptive_avg_pool2d",
    };
    adaptive_shape_check(op, kernel, x.shape(), mode == POOL_MAX)?;
    // The dispatch of PyTorch's kernels (which the 1-D pools reach too).
    float_only(op, kernel, x)?;
    if out.contains(&0) {
        return Err(Error::arg(
            op,
            format!("output_size {out:?} must be positive"),
        ));
    }
    planes_2d(op, x)?;
    let win = Window {
        mode,
        adaptive: true,
        k: [1, 1],
        s: [1, 1],
        p: [0, 0],
        d: [1, 1],
        include_pad: false,
        divisor: 0,
    };
    Ok((win, out))
}

/// The pool family's entry in the kernel-family registry (`ops::families()`).
pub(crate) const FAMILY: crate::runtime::pipeline::Family = crate::runtime::pipeline::Family {
    name: "pool",
    shaders: &["pool.wgsl"],
    params: || vec![params_layout()],
    variants: pool_variants,
};

/// Every (kernel, dtypes, override constants) combination of this family's kernels, for
/// tests/shaders.rs to translate and validate each.
#[doc(hidden)]
pub fn pool_variants() -> Vec<ShaderVariant> {
    let mut v = Vec::new();
    for dt in [DType::F32, DType::F16] {
        for &(_, mode) in POOL_DEFS {
            for adaptive in [0.0, 1.0] {
                let c = [
                    ("MODE", mode as f64),
                    ("ADAPTIVE", adaptive),
                    ("WG", WG as f64),
                ];
                v.push(ShaderVariant::new(&FORWARD, &[dt], &c));
                v.push(ShaderVariant::new(&BACKWARD, &[dt], &c));
                v.push(ShaderVariant::new(&INDICES, &[dt], &c));
            }
        }
    }
    v
}

/// The params struct's layout, checked against the shader's `struct Params` in tests/shaders.rs.
#[doc(hidden)]
pub fn params_layout() -> crate::runtime::pipeline::ParamsLayout {
    crate::runtime::pipeline::params_layout!(
        FORWARD,
        &[DType::F32],
        PoolParams {
            planes,
            h,
            w,
            oh,
            ow,
            kh,
            kw,
            sh,
            sw,
            ph,
            pw,
            dh,
            dw,
            x_off,
            include_pad,
            divisor
        }
    )
}
