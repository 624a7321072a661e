//! Grouped convolution, PyTorch layouts: input NCHW (NCL), weight `[O, C/groups, kH, kW]`
//! (`[O, C/groups, K]`), bias `[O]`. Forward, data gradient (= transposed convolution) and
//! weight gradient are one implicit GEMM each (src/ops/conv/launch.rs): all groups in one dispatch, no
//! im2col buffer, split-k with a fixed-order reduction when K is long (weight gradients).

mod checks;
mod empty;
mod geom;
mod grad;
pub(crate) mod launch;
mod params;
mod plan;

pub use geom::{
    Conv1dOptions, Conv2dOptions, ConvTranspose1dOptions, ConvTranspose2dOptions, Padding,
    Padding1d,
};
#[doc(hidden)]
pub use launch::conv_variants;
pub use params::Direction as ConvDirection;
pub use plan::{plan, ConvPlan, ConvVariant};

use checks::{check_bias, check_bias_dtype, check_pair};
use geom::{as_4d, dims4, Geom};
use grad::{forward, transpose_impl};
use params::Direction;

use crate::Device;

use crate::ops::activation::Activation;
use crate::{DType, Error, Result, Tensor};

/// The plan (kernel variant, row block, split) that `conv2d` ([`ConvDirection::Forward`]),
/// `conv2d_backward_input` (`Data`, with dy of the forward's output size) or
/// `conv2d_backward_weight` (`Weight`) launches for input `[n, c, h, w]` and weight
/// `[o, c / groups, kh, kw]` with `options` on `dev`. It validates like the ops; the 1-D ops
/// use the same plan with h = kh = 1.
pub fn conv2d_plan(
    dev: &Device,
    dir: ConvDirection,
    input: [usize; 4],
    weight: [usize; 4],
    options: &Conv2dOptions,
) -> Result<ConvPlan> {
    let op = "conv2d_plan";
    let g = Geom::new(op, input, weight, options)?;
    // conv2d's own check: a forward weight has at least one output channel per group.
    if matches!(dir, Direction::Forward) {
        geom::check_weight_dim0(op, options.groups, weight[0], &weight, "out_channels")?;
    }
    Ok(plan::launch_plan(dev, &g, dir))
}

fn no_activation(op: &'static str, act: Activation) -> Result<()> {
    if act != Activation::None {
        return Err(Error::arg(
            op,
            format!("a gradient has no fused activation, got {act:?}"),
        ));
    }
    Ok(())
}

/// 2-D convolution `act(conv(x, w) + bias)`: x `[N, C, H, W]`, w `[O, C/groups, kH, kW]`,
/// bias `[O]` -> `[N, O, OH, OW]`; an unbatched x `[C, H, W]` gives `[O, OH, OW]`.
///
/// PyTorch's `F.conv2d` (a cross-correlation, as there) with a fused activation;
/// `OH = (H + top + bottom - dilation * (kH - 1) - 1) / stride + 1`, likewise OW. x, w and
/// the bias may be strided views (an NHWC tensor permuted to NCHW is packed first, as
/// PyTorch's cuDNN path makes its operands contiguous); the output is a new contiguous NCHW
/// tensor of x's dtype. Grouped and depthwise convolutions run all groups
/// in one dispatch, without im2col buffers.
///
/// Errors: [`Error::Shape`] for inputs that are not rank 3 or 4, an input whose channels are
/// not the weight's dim 1 times `groups` (channels `groups` does not divide included), a bias
/// that is not `[O]`, or a kernel larger than the padded input; [`Error::InvalidArgument`] for
/// a zero stride, dilation or group count, a weight whose dim 0 is below or not a multiple
/// of `groups`, or (first of all, conv2d_symint's check) a bias of another dtype than x;
/// [`Error::DType`] / [`Error::DeviceMismatch`] when x and w differ.
///
/// ```no_run,ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::ops::{conv2d, Activation, Conv2dOptions, Padding};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let x = Tensor::full(&dev, &[8, 32, 56, 56], 1.0, DType::F32)?;
/// // A 3x3 depthwise convolution with stride 2, ReLU fused.
/// let w = Tensor::full(&dev, &[32, 1, 3, 3], 0.1, DType::F32)?;
/// let opts = Conv2dOptions {
///     stride: [2, 2],
///     padding: Padding::uniform(1),
///     groups: 32,
///     activation: Activation::Relu,
///     ..Default::default()
/// };
/// let y = conv2d(&x, &w, None, &opts)?;
/// assert_eq!(y.shape(), &[8, 32, 28, 28]);
/// # Ok(()) }
/// ```
pub fn conv2d(x: &Tensor, w: &Tensor, bias: Option<&Tensor>, o: &Conv2dOptions) -> Result<Tensor> {
    let op = "conv2d";
    check_bias_dtype(op, x, bias)?;
    let positive = (o.groups, &o.stride[..], &o.dilation[..]);
    batched(op, x, w, Spatial::Two, positive, |x| {
        forward(op, x, w, bias, o)
    })
}

/// The spatial rank of a convolution, for its input's shape rules.
#[derive(Clone, Copy)]
enum Spatial {
    One,
    Two,
}

/// Runs `f` on `x` as PyTorch's convolutions take their input: batched (`[N, C, H, W]`,
/// `[N, C, L]`) as it is, unbatched (`[C, H, W]`, `[C, L]`) as a batch of one whose batch dim
/// the result drops again (views both ways, so the gradient flows through). Then, in the order
/// of PyTorch's `_convolution`: the weight's rank at least 3, `positive`'s groups and stride
/// at least 1 (its dilation is shown; a dilation of 0 is the geometry's error, after), and the
/// weight's rank against the batched input's.
fn batched(
    op: &'static str,
    x: &Tensor,
    w: &Tensor,
    spatial: Spatial,
    positive: (usize, &[usize], &[usize]),
    f: impl FnOnce(&Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    let (rank, layout, unbatched) = match spatial {
        Spatial::One => (3, "[N, C, L]", "[C, L]"),
        Spatial::Two => (4, "[N, C, H, W]", "[C, H, W]"),
    };
    let weight_rank = |xs: &[usize]| -> Result<()> {
        let ws = w.shape();
        if ws.len() >= 3 {
            geom::check_groups_and_stride(op, positive.0, positive.1, positive.2)?;
        }
        let torch = if ws.len() < 3 {
            "weight should have at least three dimensions".to_string()
        } else if ws.len() != rank {
            format!(
                "Expected {r}-dimensional input for {r}-dimensional weight {ws:?}, but got \
                 {}-dimensional input of size {xs:?} instead",
                xs.len(),
                r = ws.len()
            )
        } else {
            return Ok(());
        };
        let spatial = if rank == 3 { "L" } else { "H, W" };
        Err(Error::shape(
            op,
            format!(
                "{torch} (weight must be {rank}-D {}, got shape {ws:?})",
                geom::layout_of("weight", spatial)
            ),
        ))
    };
    if x.rank() == rank {
        weight_rank(x.shape())?;
        f(x)
    } else if x.rank() + 1 == rank {
        let mut xs = vec![1];
        xs.extend_from_slice(x.shape());
        weight_rank(&xs)?;
        f(&x.unsqueeze(0)?)?.squeeze(0)
    } else {
        Err(Error::shape(
            op,
            format!(
                "Expected {}D (unbatched) or {rank}D (batched) input to {op}, but got input of \
                 size: {:?}; input must be {rank}-D {layout} or {}-D {unbatched} (unbatched)",
                rank - 1,
                x.shape(),
                rank - 1,
            ),
        ))
    }
}

/// The untracked forward of [`conv2d`] (grad.rs records it).
fn forward_untracked(
    op: &'static str,
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    o: &Conv2dOptions,
) -> Result<Tensor> {
    // check_shape_forward checks the bias right after the channels, before the kernel size;
    // the operands' dtypes are the backend's check, after every shape.
    let (xd, wd) = (dims4(op, x, "input")?, dims4(op, w, "weight")?);
    let g = Geom::new_then(op, xd, wd, o, |oc| check_bias(op, x, bias, oc, w))?;
    if (g.h == 0 || g.w == 0) && g.n > 0 {
        // _select_conv_backend: an empty input goes to the Empty backend only by its batch or
        // channels (the padded sizes passed check_shape_forward above).
        return Err(empty::only_empty_batch(op, x, ""));
    }
    if g.n == 0 {
        // The Empty backend (`input * weight`'s empty result) checks no dtype: the
        // operands' promoted one.
        x.same_device(op, w)?;
        let dt = crate::dtype::promote(x.dtype(), w.dtype());
        return Tensor::empty(x.device(), op, &[0, g.o, g.oh, g.ow], dt);
    }
    if o.dilation.contains(&0) {
        // The backend's check, in its words (conv1d's height 1).
        return Err(Error::arg(
            op,
            format!(
                "dilation should be greater than zero, but got {:?}",
                o.dilation
            ),
        ));
    }
    check_pair(op, x, w)?;
    let out = Tensor::empty(x.device(), op, &[g.n, g.o, g.oh, g.ow], x.dtype())?;
    if out.numel() == 0 {
        return Ok(out);
    }
    launch::run(op, &g, Direction::Forward, w, x, bias, o.activation, &out)?;
    Ok(out)
}

/// 1-D convolution: x `[N, C, L]`, w `[O, C/groups, K]`, bias `[O]` -> `[N, O, OL]`; an
/// unbatched x `[C, L]` gives `[O, OL]`.
///
/// PyTorch's `F.conv1d` with a fused activation: [`conv2d`] with a height of 1, so it shares
/// its kernels, output-size rule and errors.
///
/// ```no_run,ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::ops::{conv1d, Conv1dOptions, Padding1d};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let x = Tensor::full(&dev, &[4, 16, 100], 1.0, DType::F32)?; // [N, C, L]
/// let w = Tensor::full(&dev, &[32, 16, 5], 0.1, DType::F32)?;
/// let b = Tensor::zeros(&dev, &[32], DType::F32)?;
/// // padding='same', dilation 2
/// let opts = Conv1dOptions {
///     padding: Padding1d::same(5, 2),
///     dilation: 2,
///     ..Default::default()
/// };
/// assert_eq!(conv1d(&x, &w, Some(&b), &opts)?.shape(), &[4, 32, 100]);
/// # Ok(()) }
/// ```
pub fn conv1d(x: &Tensor, w: &Tensor, bias: Option<&Tensor>, o: &Conv1dOptions) -> Result<Tensor> {
    let op = "conv1d";
    check_bias_dtype(op, x, bias)?;
    let positive = (o.groups, &[o.stride][..], &[o.dilation][..]);
    batched(op, x, w, Spatial::One, positive, |x| {
        via_2d(op, (x, "input"), (w, "weight"), |x, w| {
            forward(op, x, w, bias, &o.to_2d())
        })
    })
}

/// `act(0 + bias)` over `shape` `[N, C, H, W]`: the result of a convolution that sums no terms.
fn empty_sum_epilogue(
    dev: &crate::Device,
    shape: &[usize],
    dtype: DType,
    bias: Option<&Tensor>,
    act: Activation,
) -> Result<Tensor> {
    let zeros = Tensor::zeros(dev, shape, dtype)?;
    let y = match bias {
        Some(b) => zeros.add(&b.reshape(&[1, shape[1], 1, 1])?)?,
        None => zeros,
    };
    act.apply(&y)
}

/// A 1-D op run as its 2-D one with H = 1: both operands lifted to 4-D (`as_4d`, each named
/// in its errors as given), `f` run on them, and the result's H dim dropped again.
fn via_2d(
    op: &'static str,
    (a, a_name): (&Tensor, &str),
    (b, b_name): (&Tensor, &str),
    f: impl FnOnce(&Tensor, &Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    let y = f(&as_4d(op, a, a_name)?, &as_4d(op, b, b_name)?)?;
    let s = y.shape();
    y.reshape(&[s[0], s[1], s[3]])
}

/// Data gradient of [`conv2d`]: dx `[N, C, H, W]` from dy `[N, O, OH, OW]` and the weight;
/// `input_size` is (H, W) of the forward input (several sizes give the same OH with stride > 1).
pub fn conv2d_backward_input(
    dy: &Tensor,
    w: &Tensor,
    input_size: [usize; 2],
    o: &Conv2dOptions,
) -> Result<Tensor> {
    let op = "conv2d_backward_input";
    no_activation(op, o.activation)?;
    data_grad(op, dy, w, input_size, None, o, true)
}

fn data_grad(
    op: &'static str,
    dy: &Tensor,
    w: &Tensor,
    input_size: [usize; 2],
    bias: Option<&Tensor>,
    o: &Conv2dOptions,
    exact: bool,
) -> Result<Tensor> {
    check_pair(op, dy, w)?;
    let [n, oc, dh, dw] = dims4(op, dy, "dy")?;
    let ws = dims4(op, w, "weight")?;
    if ws[0] != oc {
        // For conv_transpose the "dy" of this view is the caller's input, and weight dim 0
        // holds its input channels.
        let (what, dim0) = if exact {
            ("dy", "output")
        } else {
            ("input", "input")
        };
        return Err(Error::shape(
            op,
            format!(
                "{what} has {oc} channels but the weight {ws:?} has {} {dim0} channels",
                ws[0]
            ),
        ));
    }
    geom::check_option_limits(op, &[("groups", &[o.groups])])?;
    if !exact && o.groups > 0 && oc % o.groups != 0 {
        // The forward view's geometry would call these channels its out_channels.
        return Err(Error::arg(
            op,
            format!("in_channels {oc} must be divisible by groups {}", o.groups),
        ));
    }
    let c = ws[1] * o.groups;
    let mut g = Geom::new(op, [n, c, input_size[0], input_size[1]], ws, o)?;
    // A transposed convolution whose output_padding exceeds its stride (allowed when the
    // dilation is larger) has a forward view one row longer than its input: the missing
    // rows of dy are zeros, which the gather's bounds test provides.
    let fits = g.oh >= dh && g.ow >= dw && !exact;
    if [g.oh, g.ow] != [dh, dw] && !fits {
        return Err(Error::shape(
            op,
            format!(
                "dy is {dh}x{dw} but an input of {}x{} gives a {}x{} output with these options",
                input_size[0], input_size[1], g.oh, g.ow
            ),
        ));
    }
    (g.oh, g.ow) = (dh, dw);
    check_bias(op, dy, bias, c, w)?;
    if n == 0 {
        return Tensor::empty(dy.device(), op, &[n, c, g.h, g.w], dy.dtype());
    }
    if oc == 0 {
        // A sum over no channels: zeros, then the fused bias and activation.
        return empty_sum_epilogue(
            dy.device(),
            &[n, c, g.h, g.w],
            dy.dtype(),
            bias,
            o.activation,
        );
    }
    let out = Tensor::empty(dy.device(), op, &[n, c, g.h, g.w], dy.dtype())?;
    launch::run(op, &g, Direction::Data, w, dy, bias, o.activation, &out)?;
    Ok(out)
}

/// Data gradient of [`conv1d`]: dx `[N, C, L]` from dy `[N, O, OL]`.
pub fn conv1d_backward_input(
    dy: &Tensor,
    w: &Tensor,
    input_len: usize,
    o: &Conv1dOptions,
) -> Result<Tensor> {
    let op = "conv1d_backward_input";
    no_activation(op, o.activation)?;
    via_2d(op, (dy, "dy"), (w, "weight"), |dy, w| {
        data_grad(op, dy, w, [1, input_len], None, &o.to_2d(), true)
    })
}

/// PyTorch `conv_transpose2d`: x `[N, C_in, H, W]`, w `[C_in, C_out/groups, kH, kW]`, bias
/// `[C_out]` -> `[N, C_out, (H-1)*s - pad + d*(k-1) + output_padding + 1, ...]`. The same kernel
/// as the data gradient of a convolution from C_out to C_in channels. An unbatched x
/// `[C_in, H, W]` gives `[C_out, OH, OW]`.
///
/// `pad` is the sum of the two sides' [`Padding`]. Errors as [`conv2d`], plus
/// [`Error::InvalidArgument`] for an `output_padding` not below its stride or dilation (except
/// for an empty batch: PyTorch's Empty backend gives an empty result of the computed size,
/// 0 allowed, a negative one refused).
///
/// ```no_run,ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::ops::{conv_transpose2d, ConvTranspose2dOptions, Padding};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let x = Tensor::full(&dev, &[2, 64, 16, 16], 1.0, DType::F32)?;
/// let w = Tensor::full(&dev, &[64, 32, 4, 4], 0.01, DType::F32)?; // [C_in, C_out, kH, kW]
/// // The usual 2x upsampling layer: kernel 4, stride 2, padding 1.
/// let opts = ConvTranspose2dOptions {
///     stride: [2, 2],
///     padding: Padding::uniform(1),
///     ..Default::default()
/// };
/// assert_eq!(conv_transpose2d(&x, &w, None, &opts)?.shape(), &[2, 32, 32, 32]);
/// # Ok(()) }
/// ```
pub fn conv_transpose2d(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    o: &ConvTranspose2dOptions,
) -> Result<Tensor> {
    let op = "conv_transpose2d";
    let positive = (o.groups, &o.stride[..], &o.dilation[..]);
    batched(op, x, w, Spatial::Two, positive, |x| {
        transpose_impl(op, x, w, bias, o)
    })
}

/// The untracked forward of [`conv_transpose2d`] (grad.rs records it).
fn transpose_untracked(
    op: &'static str,
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    o: &ConvTranspose2dOptions,
) -> Result<Tensor> {
    let [_, _, h, wd] = dims4(op, x, "input")?;
    let ws = dims4(op, w, "weight")?;
    if o.stride.contains(&0) {
        return Err(Error::arg(
            op,
            format!(
                "non-positive stride is not supported (stride {:?})",
                o.stride
            ),
        ));
    }
    let p = o.padding;
    geom::check_option_limits(
        op,
        &[
            ("stride", &o.stride),
            ("dilation", &o.dilation),
            ("padding", &[p.top, p.bottom, p.left, p.right]),
            ("output_padding", &o.output_padding),
            ("groups", &[o.groups]),
        ],
    )?;
    check_transposed_channels(op, x, w, o.groups)?;
    // check_shape_forward checks the bias right after the channels, before the backend's
    // own checks (output padding, output size).
    check_bias(op, x, bias, ws[1] * o.groups, w)?;
    if x.shape()[0] == 0 || h == 0 || wd == 0 {
        // The Empty backend: chosen before any backend check (its `input * weight` still
        // needs one device).
        x.same_device(op, w)?;
        return empty::empty_transposed(op, x, ws, o);
    }
    // slow_conv_transpose2d_shape_check: the kernel before the output padding (conv1d's
    // height 1).
    if ws[2] == 0 || ws[3] == 0 {
        return Err(Error::shape(op, geom::empty_kernel_words(ws[2], ws[3])));
    }
    if o.dilation.contains(&0) {
        return Err(Error::arg(
            op,
            format!(
                "dilation should be greater than zero, but got dilation_height: {}, \
                 dilation_width: {}",
                o.dilation[0], o.dilation[1]
            ),
        ));
    }
    // After the channels, as PyTorch's shape check, in its words.
    let [oph, opw] = o.output_padding;
    if (0..2).any(|ax| o.output_padding[ax] >= o.stride[ax].max(o.dilation[ax])) {
        return Err(Error::arg(
            op,
            format!(
                "output padding must be smaller than either stride or dilation, but got \
                 output_padding_height: {oph} output_padding_width: {opw} stride_height: {} \
                 stride_width: {} dilation_height: {} dilation_width: {}",
                o.stride[0], o.stride[1], o.dilation[0], o.dilation[1]
            ),
        ));
    }
    // i128: operands are below OPTION_LIMIT and tensor dims, so nothing overflows.
    let size = |len: usize, k: usize, ax: usize, pad: usize| -> i128 {
        let i = |v: usize| v as i128;
        (i(len) - 1) * i(o.stride[ax])
            + i(o.dilation[ax]) * (i(k) - 1)
            + 1
            + i(o.output_padding[ax])
            - i(pad)
    };
    let (oh, ow) = (
        size(h, ws[2], 0, p.top + p.bottom),
        size(wd, ws[3], 1, p.left + p.right),
    );
    if oh < 1 || ow < 1 {
        // slow_conv_transpose2d_shape_check's words (conv_transpose1d's height 1).
        return Err(Error::shape(
            op,
            format!(
                "Given input size per channel: ({h} x {wd}). Calculated output size per \
                 channel: ({oh} x {ow}). Output size is too small (kernel {}x{}, padding {p:?})",
                ws[2], ws[3]
            ),
        ));
    }
    if let Some((ax, v)) = [oh, ow]
        .into_iter()
        .enumerate()
        .find(|&(_, v)| v > i32::MAX as i128)
    {
        return Err(Error::size(
            op,
            format!(
                "output size {v} on axis {ax} is past 2^31 - 1 (input {h}x{wd}, stride {:?})",
                o.stride
            ),
        ));
    }
    let (out_h, out_w) = (oh as usize, ow as usize);
    let conv = Conv2dOptions {
        stride: o.stride,
        padding: p,
        dilation: o.dilation,
        groups: o.groups,
        activation: o.activation,
    };
    data_grad(op, x, w, [out_h, out_w], bias, &conv, false)
}

/// PyTorch's check_shape_forward for a transposed weight `[C_in, C_out / groups, ...]`:
/// dim 0 holds at least one input channel per group (so no input channels is an error, as
/// there, not an empty sum) and a multiple of groups, and the input has `C_in` channels.
/// Shapes are shown as the caller gave them (a 1-D call arrives as `[n, c, 1, l]`).
fn check_transposed_channels(op: &'static str, x: &Tensor, w: &Tensor, g: usize) -> Result<()> {
    geom::check_positive(op, g, &[], &[])?;
    let ws = geom::caller_shape(op, w.shape());
    geom::check_weight_dim0(op, g, ws[0], &ws, "in_channels")?;
    let c = x.shape()[1];
    if c != ws[0] {
        return Err(Error::shape(
            op,
            format!(
                "Given transposed=1, weight of size {ws:?}, expected input{:?} to have {} \
                 channels, but got {c} channels instead",
                geom::caller_shape(op, x.shape()),
                ws[0]
            ),
        ));
    }
    Ok(())
}

/// PyTorch `conv_transpose1d`: x `[N, C_in, L]` (or unbatched `[C_in, L]`), w
/// `[C_in, C_out/groups, K]`.
pub fn conv_transpose1d(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    o: &ConvTranspose1dOptions,
) -> Result<Tensor> {
    let op = "conv_transpose1d";
    let positive = (o.groups, &[o.stride][..], &[o.dilation][..]);
    batched(op, x, w, Spatial::One, positive, |x| {
        via_2d(op, (x, "input"), (w, "weight"), |x, w| {
            transpose_impl(op, x, w, bias, &o.to_2d())
        })
    })
}

/// Weight gradient of [`conv2d`]: dW `[O, C/groups, kH, kW]` from dy `[N, O, OH, OW]` and the
/// forward input x. K = N * OH * OW is long, so this uses the deterministic split-k.
pub fn conv2d_backward_weight(
    dy: &Tensor,
    x: &Tensor,
    kernel_size: [usize; 2],
    o: &Conv2dOptions,
) -> Result<Tensor> {
    let op = "conv2d_backward_weight";
    no_activation(op, o.activation)?;
    weight_grad(op, dy, x, kernel_size, o)
}

fn weight_grad(
    op: &'static str,
    dy: &Tensor,
    x: &Tensor,
    kernel_size: [usize; 2],
    o: &Conv2dOptions,
) -> Result<Tensor> {
    check_pair(op, dy, x)?;
    let xs = dims4(op, x, "input")?;
    let [n, oc, dh, dw] = dims4(op, dy, "dy")?;
    if n != xs[0] {
        return Err(Error::shape(
            op,
            format!("dy {:?} and input {xs:?} differ in batch size", dy.shape()),
        ));
    }
    if o.groups == 0 || xs[1] % o.groups != 0 {
        return Err(Error::arg(
            op,
            format!("groups {} does not divide in_channels {}", o.groups, xs[1]),
        ));
    }
    let ws = [oc, xs[1] / o.groups, kernel_size[0], kernel_size[1]];
    let g = Geom::new(op, xs, ws, o)?;
    if [g.oh, g.ow] != [dh, dw] {
        return Err(Error::shape(
            op,
            format!(
                "dy is {dh}x{dw} but input {xs:?} with kernel {kernel_size:?} gives {}x{}",
                g.oh, g.ow
            ),
        ));
    }
    if n == 0 {
        // Every weight gradient is a sum over the (empty) batch.
        return Tensor::zeros(dy.device(), &ws, dy.dtype());
    }
    let out = Tensor::empty(dy.device(), op, &ws, dy.dtype())?;
    if out.numel() == 0 {
        return Ok(out);
    }
    launch::run(
        op,
        &g,
        Direction::Weight,
        dy,
        x,
        None,
        Activation::None,
        &out,
    )?;
    Ok(out)
}

/// Weight gradient of [`conv1d`]: dW `[O, C/groups, K]`.
pub fn conv1d_backward_weight(
    dy: &Tensor,
    x: &Tensor,
    kernel_size: usize,
    o: &Conv1dOptions,
) -> Result<Tensor> {
    let op = "conv1d_backward_weight";
    no_activation(op, o.activation)?;
    via_2d(op, (dy, "dy"), (x, "input"), |dy, x| {
        weight_grad(op, dy, x, [1, kernel_size], &o.to_2d())
    })
}

/// Bias gradient of a convolution (1-D or 2-D): dy `[N, O, ...]` summed over all but dim 1.
pub fn conv_backward_bias(dy: &Tensor) -> Result<Tensor> {
    let op = "conv_backward_bias";
    let s = dy.shape();
    if s.len() < 3 {
        return Err(Error::shape(
            op,
            format!("dy must be [N, O, ...] with at least one spatial dim, got {s:?}"),
        ));
    }
    let spatial: usize = s[2..].iter().product();
    // f16 sums in f32: the per-sample partials would otherwise round to f16 between the two
    // reductions.
    let flat = dy.to_dtype(DType::F32)?.reshape(&[s[0], s[1], spatial])?;
    flat.sum(2, false)?.sum(0, false)?.to_dtype(dy.dtype())
}
