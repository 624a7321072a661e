//! Pooling (shaders/pool.wgsl) with PyTorch's semantics and names: `max_pool1d/2d` (kernel,
//! stride, padding, dilation, ceil_mode), `avg_pool1d/2d` (count_include_pad, ceil_mode,
//! divisor_override), `adaptive_avg_pool1d/2d`, `adaptive_max_pool2d`, and their backward
//! passes. Inputs are `[N, C, H, W]` or unbatched `[C, H, W]` (1-D: `[N, C, L]` or `[C, L]`).
//! The backward gathers per input element (max: the gradient goes to each window's first
//! maximum, as PyTorch routes it), so it is deterministic and needs no atomics.

use bytemuck::{Pod, Zeroable};

use crate::ops::activation::ACTIVATION;
use crate::runtime::pipeline::ShaderVariant;
use crate::runtime::{Access, Kernel};
use crate::{DType, Error, Result, Tensor};

const WG: u32 = 64;
const POOL_MAX: u32 = 0;
const POOL_AVG: u32 = 1;
const POOL_DEFS: &[(&str, u32)] = &[("POOL_MAX", POOL_MAX), ("POOL_AVG", POOL_AVG)];
const SRC: &str = include_str!("../../shaders/pool.wgsl");

use Access::{Read as R, ReadWrite as RW};

static FORWARD: Kernel = Kernel::new("pool", SRC, "pool_forward", &[R, RW])
    .slots(&[1, 3])
    .libs(&[&ACTIVATION])
    .defs(POOL_DEFS);
static INDICES: Kernel = Kernel::new("pool", SRC, "pool_indices", &[R, RW])
    .slots(&[1, 4])
    .libs(&[&ACTIVATION])
    .defs(POOL_DEFS);
static BACKWARD: Kernel = Kernel::new("pool", SRC, "pool_backward", &[R, R, RW])
    .slots(&[1, 2, 3])
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

/// Options of [`max_pool2d`] (PyTorch's `nn.MaxPool2d` arguments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxPool2dOptions {
    /// Window size (kH, kW).
    pub kernel_size: [usize; 2],
    /// Step between windows; `None` is the kernel size (PyTorch's default).
    pub stride: Option<[usize; 2]>,
    /// Implicit `-inf` padding on both sides of each axis (at most half the effective kernel).
    pub padding: [usize; 2],
    /// Spacing between window taps.
    pub dilation: [usize; 2],
    /// Round the output size up (the last window may start in the input or left padding only).
    pub ceil_mode: bool,
}

impl MaxPool2dOptions {
    /// A `k x k` window with stride `k` (PyTorch's `MaxPool2d(k)`).
    pub fn new(k: usize) -> Self {
        MaxPool2dOptions {
            kernel_size: [k, k],
            stride: None,
            padding: [0, 0],
            dilation: [1, 1],
            ceil_mode: false,
        }
    }
}

/// Options of [`avg_pool2d`] (PyTorch's `nn.AvgPool2d` arguments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AvgPool2dOptions {
    /// Window size (kH, kW).
    pub kernel_size: [usize; 2],
    /// Step between windows; `None` is the kernel size.
    pub stride: Option<[usize; 2]>,
    /// Zero padding on both sides of each axis (at most half the kernel).
    pub padding: [usize; 2],
    /// Round the output size up.
    pub ceil_mode: bool,
    /// Count padded positions in the divisor (PyTorch's default, true).
    pub count_include_pad: bool,
    /// Divide by this instead of the window size.
    pub divisor_override: Option<usize>,
}

impl AvgPool2dOptions {
    /// A `k x k` window with stride `k` (PyTorch's `AvgPool2d(k)`).
    pub fn new(k: usize) -> Self {
        AvgPool2dOptions {
            kernel_size: [k, k],
            stride: None,
            padding: [0, 0],
            ceil_mode: false,
            count_include_pad: true,
            divisor_override: None,
        }
    }
}

/// Options of [`max_pool1d`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxPool1dOptions {
    /// Window size.
    pub kernel_size: usize,
    /// Step between windows; `None` is the kernel size.
    pub stride: Option<usize>,
    /// Implicit `-inf` padding on both sides.
    pub padding: usize,
    /// Spacing between window taps.
    pub dilation: usize,
    /// Round the output size up.
    pub ceil_mode: bool,
}

impl MaxPool1dOptions {
    /// A window of `k` with stride `k`.
    pub fn new(k: usize) -> Self {
        MaxPool1dOptions {
            kernel_size: k,
            stride: None,
            padding: 0,
            dilation: 1,
            ceil_mode: false,
        }
    }
    fn to_2d(self) -> MaxPool2dOptions {
        MaxPool2dOptions {
            kernel_size: [1, self.kernel_size],
            stride: Some([1, self.stride.unwrap_or(self.kernel_size)]),
            padding: [0, self.padding],
            dilation: [1, self.dilation],
            ceil_mode: self.ceil_mode,
        }
    }
}

/// Options of [`avg_pool1d`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AvgPool1dOptions {
    /// Window size.
    pub kernel_size: usize,
    /// Step between windows; `None` is the kernel size.
    pub stride: Option<usize>,
    /// Zero padding on both sides.
    pub padding: usize,
    /// Round the output size up.
    pub ceil_mode: bool,
    /// Count padded positions in the divisor.
    pub count_include_pad: bool,
}

impl AvgPool1dOptions {
    /// A window of `k` with stride `k`.
    pub fn new(k: usize) -> Self {
        AvgPool1dOptions {
            kernel_size: k,
            stride: None,
            padding: 0,
            ceil_mode: false,
            count_include_pad: true,
        }
    }
    fn to_2d(self) -> AvgPool2dOptions {
        AvgPool2dOptions {
            kernel_size: [1, self.kernel_size],
            stride: Some([1, self.stride.unwrap_or(self.kernel_size)]),
            padding: [0, self.padding],
            ceil_mode: self.ceil_mode,
            count_include_pad: self.count_include_pad,
            divisor_override: None,
        }
    }
}

/// What the kernel needs for one pooling problem.
#[derive(Clone, Copy)]
struct Window {
    mode: u32,
    adaptive: bool,
    k: [usize; 2],
    s: [usize; 2],
    p: [usize; 2],
    d: [usize; 2],
    include_pad: bool,
    divisor: usize,
}

/// PyTorch's `pooling_output_shape`.
fn out_size(
    op: &'static str,
    len: usize,
    k: usize,
    pad: usize,
    s: usize,
    d: usize,
    ceil: bool,
) -> Result<usize> {
    let eff = d as u64 * (k as u64 - 1) + 1;
    let padded = len as u64 + 2 * pad as u64;
    if padded < eff {
        return Err(Error::shape(
            op,
            format!(
                "Output size is too small: input {len} with padding {pad} is shorter than the \
                 effective kernel {eff}"
            ),
        ));
    }
    let numer = padded - eff;
    let mut out = (numer + if ceil { s as u64 - 1 } else { 0 }) / s as u64 + 1;
    // The last window must start inside the input or the left padding.
    if ceil && (out - 1) * s as u64 >= len as u64 + pad as u64 {
        out -= 1;
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
                format!("expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got shape {s:?}"),
            ))
        }
    };
    let (h, w) = (s[s.len() - 2], s[s.len() - 1]);
    if h == 0 || w == 0 {
        return Err(Error::shape(
            op,
            format!("expected non-empty spatial dims, got input shape {s:?}"),
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
    max: bool,
) -> Result<()> {
    const LIMIT: usize = 1 << 20;
    for v in [k, s, p, d] {
        if v.iter().any(|&x| x > LIMIT) {
            return Err(Error::size(
                op,
                format!("option value {v:?} is above {LIMIT}"),
            ));
        }
    }
    if k.contains(&0) || s.contains(&0) || d.contains(&0) {
        return Err(Error::arg(
            op,
            format!("kernel_size {k:?}, stride {s:?} and dilation {d:?} must be greater than zero"),
        ));
    }
    for a in 0..2 {
        let eff = if max { (k[a] - 1) * d[a] + 1 } else { k[a] };
        if p[a] > eff / 2 {
            return Err(Error::arg(
                op,
                format!(
                    "pad should be at most half of effective kernel size, but got pad={:?}, \
                     kernel_size={k:?} and dilation={d:?}",
                    p
                ),
            ));
        }
    }
    Ok(())
}

/// The recorded forward (`dy` None) or a gradient launch (`dy` given, untracked): a pool's
/// backward is the same family's gradient gather over the saved input's windows.
fn run(
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
fn indices_untracked(
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
    // The kernels index planes with u32 products (adaptive windows multiply index by size).
    let fits = |a: usize, b: usize| (a as u64) * (b as u64 + 1) < u32::MAX as u64;
    if !fits(h, out_hw[0]) || !fits(w, out_hw[1]) || !fits(planes, h * w.max(out_hw[1])) {
        return Err(Error::size(
            op,
            format!(
                "input {:?} pooled to {out_hw:?} is beyond u32 indexing",
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
    let xs = x.contiguous()?;
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
            let g = dy.contiguous()?;
            dev.launch(
                op,
                &BACKWARD,
                &[x.dtype],
                &consts,
                bytemuck::bytes_of(&params),
                &[xs.buffer(), g.buffer(), out.buffer()],
                grid,
            )?
        }
    }
    Ok(out)
}

fn max_window(op: &'static str, x: &Tensor, o: &MaxPool2dOptions) -> Result<(Window, [usize; 2])> {
    let s = o.stride.unwrap_or(o.kernel_size);
    check_regular(op, o.kernel_size, s, o.padding, o.dilation, true)?;
    let (_, h, w, _) = planes_2d(op, x)?;
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

fn avg_window(op: &'static str, x: &Tensor, o: &AvgPool2dOptions) -> Result<(Window, [usize; 2])> {
    let s = o.stride.unwrap_or(o.kernel_size);
    check_regular(op, o.kernel_size, s, o.padding, [1, 1], false)?;
    if o.divisor_override == Some(0) {
        return Err(Error::arg(op, "divisor must be not zero"));
    }
    let (_, h, w, _) = planes_2d(op, x)?;
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

fn adaptive_window(
    op: &'static str,
    x: &Tensor,
    out: [usize; 2],
    mode: u32,
) -> Result<(Window, [usize; 2])> {
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

/// Lifts a 1-D input ([N, C, L] or [C, L]) to 2-D with H = 1.
fn lift_1d(op: &'static str, x: &Tensor) -> Result<Tensor> {
    match x.rank() {
        2 | 3 => x.unsqueeze(-2),
        _ => Err(Error::shape(
            op,
            format!(
                "expected a 2-D [C, L] or 3-D [N, C, L] input, got shape {:?}",
                x.shape()
            ),
        )),
    }
}

fn drop_h(t: Tensor) -> Result<Tensor> {
    let mut s = t.shape().to_vec();
    s.remove(s.len() - 2);
    t.reshape(&s)
}

/// PyTorch's `max_pool2d`: the maximum of each window (padding is `-inf`; a NaN in a window is
/// its result).
pub fn max_pool2d(x: &Tensor, o: &MaxPool2dOptions) -> Result<Tensor> {
    let op = "max_pool2d";
    let (win, out) = max_window(op, x, o)?;
    run(op, x, win, out, None)
}

/// Gradient of [`max_pool2d`] with respect to its input: each window's gradient goes to the
/// window's first maximum (PyTorch's index order), summed where windows overlap.
pub fn max_pool2d_backward(dy: &Tensor, x: &Tensor, o: &MaxPool2dOptions) -> Result<Tensor> {
    let op = "max_pool2d_backward";
    let (win, out) = max_window(op, x, o)?;
    run(op, x, win, out, Some(dy))
}

/// PyTorch's `avg_pool2d`.
pub fn avg_pool2d(x: &Tensor, o: &AvgPool2dOptions) -> Result<Tensor> {
    let op = "avg_pool2d";
    let (win, out) = avg_window(op, x, o)?;
    run(op, x, win, out, None)
}

/// Gradient of [`avg_pool2d`] with respect to its input (`x` gives the input's shape).
pub fn avg_pool2d_backward(dy: &Tensor, x: &Tensor, o: &AvgPool2dOptions) -> Result<Tensor> {
    let op = "avg_pool2d_backward";
    let (win, out) = avg_window(op, x, o)?;
    run(op, x, win, out, Some(dy))
}

/// PyTorch's `adaptive_avg_pool2d`: output `[.., oh, ow]`, window o covering
/// `[floor(o * in / out), ceil((o + 1) * in / out))` on each axis.
pub fn adaptive_avg_pool2d(x: &Tensor, output_size: [usize; 2]) -> Result<Tensor> {
    let op = "adaptive_avg_pool2d";
    let (win, out) = adaptive_window(op, x, output_size, POOL_AVG)?;
    run(op, x, win, out, None)
}

/// Gradient of [`adaptive_avg_pool2d`].
pub fn adaptive_avg_pool2d_backward(dy: &Tensor, x: &Tensor) -> Result<Tensor> {
    adaptive_backward("adaptive_avg_pool2d_backward", dy, x, POOL_AVG)
}

/// PyTorch's `adaptive_max_pool2d` (values; the windows as [`adaptive_avg_pool2d`]'s).
pub fn adaptive_max_pool2d(x: &Tensor, output_size: [usize; 2]) -> Result<Tensor> {
    let op = "adaptive_max_pool2d";
    let (win, out) = adaptive_window(op, x, output_size, POOL_MAX)?;
    run(op, x, win, out, None)
}

/// Gradient of [`adaptive_max_pool2d`].
pub fn adaptive_max_pool2d_backward(dy: &Tensor, x: &Tensor) -> Result<Tensor> {
    adaptive_backward("adaptive_max_pool2d_backward", dy, x, POOL_MAX)
}

/// The adaptive pools' backward: the output size is the gradient's trailing two dims.
fn adaptive_backward(op: &'static str, dy: &Tensor, x: &Tensor, mode: u32) -> Result<Tensor> {
    let s = dy.shape();
    let out = if s.len() >= 2 {
        [s[s.len() - 2], s[s.len() - 1]]
    } else {
        [0, 0]
    };
    let (win, out) = adaptive_window(op, x, out, mode)?;
    run(op, x, win, out, Some(dy))
}

/// PyTorch's `max_pool2d(..., return_indices=True)`: the pooled values (tracked as
/// [`max_pool2d`]'s) and, as an i32 tensor of the same shape, the flat index within each
/// input plane (`h * W + w`) of every window's maximum (its first maximum, or its NaN). The
/// indices scatter gradients or values back with [`Tensor::scatter_add`] over the
/// `[N, C, H * W]` view (PyTorch's `max_unpool2d`).
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::ops::{max_pool2d_with_indices, MaxPool2dOptions};
/// use wgtensor::{Device, Tensor};
/// let dev = Device::new()?;
/// let x = Tensor::from_slice(&dev, &[1.0f32, 5.0, 2.0, 0.0, 3.0, 4.0, 9.0, 8.0], &[1, 1, 2, 4])?;
/// let (y, idx) = max_pool2d_with_indices(&x, &MaxPool2dOptions::new(2))?;
/// assert_eq!(y.to_vec::<f32>()?, vec![5.0, 9.0]);
/// assert_eq!(idx.to_vec::<i32>()?, vec![1, 6]);
/// # Ok(()) }
/// ```
pub fn max_pool2d_with_indices(x: &Tensor, o: &MaxPool2dOptions) -> Result<(Tensor, Tensor)> {
    let op = "max_pool2d";
    let (win, out) = max_window(op, x, o)?;
    Ok((
        run(op, x, win, out, None)?,
        indices_untracked(op, x, win, out)?,
    ))
}

/// PyTorch's `max_pool1d(..., return_indices=True)`: values and i32 indices within each
/// input row of length L (see [`max_pool2d_with_indices`]).
pub fn max_pool1d_with_indices(x: &Tensor, o: &MaxPool1dOptions) -> Result<(Tensor, Tensor)> {
    let op = "max_pool1d";
    let x2 = lift_1d(op, x)?;
    let (win, out) = max_window(op, &x2, &o.to_2d())?;
    Ok((
        drop_h(run(op, &x2, win, out, None)?)?,
        drop_h(indices_untracked(op, &x2, win, out)?)?,
    ))
}

/// PyTorch's `adaptive_max_pool2d(..., return_indices=True)` (see
/// [`max_pool2d_with_indices`]).
pub fn adaptive_max_pool2d_with_indices(
    x: &Tensor,
    output_size: [usize; 2],
) -> Result<(Tensor, Tensor)> {
    let op = "adaptive_max_pool2d";
    let (win, out) = adaptive_window(op, x, output_size, POOL_MAX)?;
    Ok((
        run(op, x, win, out, None)?,
        indices_untracked(op, x, win, out)?,
    ))
}

/// PyTorch's `max_pool1d` over `[N, C, L]` or `[C, L]`.
pub fn max_pool1d(x: &Tensor, o: &MaxPool1dOptions) -> Result<Tensor> {
    let op = "max_pool1d";
    let x2 = lift_1d(op, x)?;
    let (win, out) = max_window(op, &x2, &o.to_2d())?;
    drop_h(run(op, &x2, win, out, None)?)
}

/// PyTorch's `avg_pool1d` over `[N, C, L]` or `[C, L]`.
pub fn avg_pool1d(x: &Tensor, o: &AvgPool1dOptions) -> Result<Tensor> {
    let op = "avg_pool1d";
    let x2 = lift_1d(op, x)?;
    let (win, out) = avg_window(op, &x2, &o.to_2d())?;
    drop_h(run(op, &x2, win, out, None)?)
}

/// PyTorch's `adaptive_avg_pool1d` over `[N, C, L]` or `[C, L]`.
pub fn adaptive_avg_pool1d(x: &Tensor, output_size: usize) -> Result<Tensor> {
    let op = "adaptive_avg_pool1d";
    let x2 = lift_1d(op, x)?;
    let (win, out) = adaptive_window(op, &x2, [1, output_size], POOL_AVG)?;
    drop_h(run(op, &x2, win, out, None)?)
}

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
