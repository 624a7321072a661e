//! Convolution geometry: the public option structs, validation, and the output-size math.
//! conv1d is conv2d with H = 1 (kernel height 1, no vertical padding or stride).

use crate::ops::activation::Activation;
use crate::{Error, Result, Tensor};

/// Zero padding per side, in elements.
///
/// Per side rather than PyTorch's one `(ph, pw)` pair, so asymmetric padding (`'same'` with
/// an even kernel, TensorFlow-style `SAME` with stride) needs no padded copy of the input.
/// For the transposed convolutions it is PyTorch's `padding` there: rows and columns cropped
/// from the output's sides. `Default` is no padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Padding {
    /// Rows of zeros above the input.
    pub top: usize,
    /// Rows of zeros below the input.
    pub bottom: usize,
    /// Columns of zeros left of the input.
    pub left: usize,
    /// Columns of zeros right of the input.
    pub right: usize,
}

impl Padding {
    /// The same padding on all four sides.
    pub fn uniform(p: usize) -> Self {
        Padding::symmetric(p, p)
    }

    /// `ph` above and below, `pw` left and right (PyTorch's `padding=(ph, pw)`).
    pub fn symmetric(ph: usize, pw: usize) -> Self {
        Padding {
            top: ph,
            bottom: ph,
            left: pw,
            right: pw,
        }
    }

    /// PyTorch's `padding='same'` for stride 1: the output keeps the input size. The total
    /// `dilation * (kernel - 1)` is split with the odd element at the bottom / right.
    pub fn same(kernel: [usize; 2], dilation: [usize; 2]) -> Self {
        let split = |k: usize, d: usize| {
            let total = d.saturating_mul(k.saturating_sub(1));
            (total / 2, total - total / 2)
        };
        let (top, bottom) = split(kernel[0], dilation[0]);
        let (left, right) = split(kernel[1], dilation[1]);
        Padding {
            top,
            bottom,
            left,
            right,
        }
    }
}

/// Options of [`conv2d`](super::conv2d) and its gradients. `Default`: stride 1, no padding,
/// dilation 1, one group, no activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2dOptions {
    /// (vertical, horizontal).
    pub stride: [usize; 2],
    /// Zeros around the input, per side.
    pub padding: Padding,
    /// (vertical, horizontal).
    pub dilation: [usize; 2],
    /// Channel groups (PyTorch's `groups`): C and O must both divide by it; `groups == C`
    /// is a depthwise convolution. All groups run in one dispatch.
    pub groups: usize,
    /// Fused after the bias (forward only; gradients reject anything but `None`).
    pub activation: Activation,
}

impl Default for Conv2dOptions {
    fn default() -> Self {
        Conv2dOptions {
            stride: [1, 1],
            padding: Padding::default(),
            dilation: [1, 1],
            groups: 1,
            activation: Activation::None,
        }
    }
}

/// Zero padding of a 1-D convolution, per side like [`Padding`] (the same style for both
/// ranks). For [`conv_transpose1d`](super::conv_transpose1d) it is PyTorch's `padding` there:
/// elements cropped from the output's ends. `Default` is no padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Padding1d {
    /// Zeros before the first element.
    pub left: usize,
    /// Zeros after the last element.
    pub right: usize,
}

impl Padding1d {
    /// The same padding on both ends (PyTorch's `padding=p`).
    pub fn uniform(p: usize) -> Self {
        Padding1d { left: p, right: p }
    }

    /// PyTorch's `padding='same'` for stride 1: `dilation * (kernel - 1)` split with the odd
    /// element on the right.
    pub fn same(kernel: usize, dilation: usize) -> Self {
        let total = dilation.saturating_mul(kernel.saturating_sub(1));
        Padding1d {
            left: total / 2,
            right: total - total / 2,
        }
    }
}

/// Options of [`conv1d`](super::conv1d) and its gradients. `Default`: stride 1, no padding,
/// dilation 1, one group, no activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv1dOptions {
    /// Step between output positions, in input elements.
    pub stride: usize,
    /// Zeros before and after the sequence.
    pub padding: Padding1d,
    /// Spacing between kernel taps (1: adjacent).
    pub dilation: usize,
    /// Channel groups, as [`Conv2dOptions::groups`].
    pub groups: usize,
    /// Fused after the bias (forward only; gradients reject anything but `None`).
    pub activation: Activation,
}

impl Default for Conv1dOptions {
    fn default() -> Self {
        Conv1dOptions {
            stride: 1,
            padding: Padding1d::default(),
            dilation: 1,
            groups: 1,
            activation: Activation::None,
        }
    }
}

impl Conv1dOptions {
    pub(crate) fn to_2d(self) -> Conv2dOptions {
        Conv2dOptions {
            stride: [1, self.stride],
            padding: Padding {
                top: 0,
                bottom: 0,
                left: self.padding.left,
                right: self.padding.right,
            },
            dilation: [1, self.dilation],
            groups: self.groups,
            activation: self.activation,
        }
    }
}

/// Options of [`conv_transpose2d`](super::conv_transpose2d) (PyTorch `ConvTranspose2d`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvTranspose2dOptions {
    /// (vertical, horizontal): the upsampling factor.
    pub stride: [usize; 2],
    /// Rows / columns cropped from each side of the output (PyTorch's `padding`).
    pub padding: Padding,
    /// Extra rows / columns on the bottom / right; each must be below its stride or dilation.
    pub output_padding: [usize; 2],
    /// (vertical, horizontal) spacing between kernel taps.
    pub dilation: [usize; 2],
    /// Channel groups: C_in and C_out must both divide by it.
    pub groups: usize,
    /// Fused after the bias.
    pub activation: Activation,
}

impl Default for ConvTranspose2dOptions {
    fn default() -> Self {
        ConvTranspose2dOptions {
            stride: [1, 1],
            padding: Padding::default(),
            output_padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
            activation: Activation::None,
        }
    }
}

/// Options of [`conv_transpose1d`](super::conv_transpose1d).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvTranspose1dOptions {
    /// The upsampling factor.
    pub stride: usize,
    /// Elements cropped from the output's ends (PyTorch's `padding`).
    pub padding: Padding1d,
    /// Extra elements on the right; must be below the stride or the dilation.
    pub output_padding: usize,
    /// Spacing between kernel taps.
    pub dilation: usize,
    /// Channel groups: C_in and C_out must both divide by it.
    pub groups: usize,
    /// Fused after the bias.
    pub activation: Activation,
}

impl Default for ConvTranspose1dOptions {
    fn default() -> Self {
        ConvTranspose1dOptions {
            stride: 1,
            padding: Padding1d::default(),
            output_padding: 0,
            dilation: 1,
            groups: 1,
            activation: Activation::None,
        }
    }
}

impl ConvTranspose1dOptions {
    pub(crate) fn to_2d(self) -> ConvTranspose2dOptions {
        ConvTranspose2dOptions {
            stride: [1, self.stride],
            padding: Padding {
                top: 0,
                bottom: 0,
                left: self.padding.left,
                right: self.padding.right,
            },
            output_padding: [0, self.output_padding],
            dilation: [1, self.dilation],
            groups: self.groups,
            activation: self.activation,
        }
    }
}

/// One convolution problem in forward terms: x [n, c, h, w] * w [o, c/groups, kh, kw] ->
/// y [n, o, oh, ow].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geom {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub o: usize,
    pub kh: usize,
    pub kw: usize,
    pub groups: usize,
    pub stride: [usize; 2],
    pub pad: Padding,
    pub dil: [usize; 2],
    pub oh: usize,
    pub ow: usize,
}

/// Output length of one spatial axis, or `None` when the (dilated) kernel does not fit. In
/// u128: a kernel size comes from the caller (a weight gradient's `kernel_size`) and may be
/// anything up to `usize::MAX`, so the dilated span must not overflow; such a span never fits.
pub(crate) fn out_len(len: usize, pad: usize, k: usize, s: usize, d: usize) -> Option<usize> {
    let padded = len as i128 + pad as i128;
    (padded >= kernel_span(k, d) && s > 0)
        .then(|| ((padded - kernel_span(k, d)) / s as i128 + 1).min(usize::MAX as i128) as usize)
}

/// A dilated kernel's extent as PyTorch computes it, `d (k - 1) + 1`: 1 - d for an empty
/// kernel (which convolves only inputs without channels, into an empty result).
fn kernel_span(k: usize, d: usize) -> i128 {
    d as i128 * (k as i128 - 1) + 1
}

/// Largest stride, dilation, padding, output padding or group count accepted: far beyond any
/// real model, and small enough that the size arithmetic cannot overflow.
pub(crate) const OPTION_LIMIT: usize = 1 << 20;

/// ATen's words for an empty kernel (slow_conv2d_shape_check and its transposed twin); a 1-D
/// convolution's kernel height is 1.
pub(crate) fn empty_kernel_words(kh: usize, kw: usize) -> String {
    format!(
        "kernel size should be greater than zero, but got kernel_height: {kh} kernel_width: {kw}"
    )
}

/// Rejects option values the size arithmetic could overflow on, naming them.
/// `_convolution`'s groups check and check_shape_forward's stride and dilation checks, in
/// PyTorch's order and words.
pub(crate) fn check_positive(
    op: &'static str,
    groups: usize,
    stride: &[usize],
    dilation: &[usize],
) -> Result<()> {
    check_groups_and_stride(op, groups, stride, dilation)?;
    if dilation.contains(&0) {
        return Err(positive_error(
            op,
            "dilation should be greater than zero",
            stride,
            dilation,
        ));
    }
    Ok(())
}

/// [`check_positive`] without the dilation: the checks that run before the weight's rank is
/// compared with the input's (PyTorch's is_dilation_neg passes a dilation of 0 on to it).
pub(crate) fn check_groups_and_stride(
    op: &'static str,
    groups: usize,
    stride: &[usize],
    dilation: &[usize],
) -> Result<()> {
    if groups == 0 {
        return Err(Error::arg(
            op,
            "non-positive groups is not supported: groups must be at least 1, got 0",
        ));
    }
    if stride.contains(&0) {
        return Err(positive_error(
            op,
            "non-positive stride is not supported",
            stride,
            dilation,
        ));
    }
    Ok(())
}

fn positive_error(op: &'static str, what: &str, stride: &[usize], dilation: &[usize]) -> Error {
    Error::arg(
        op,
        format!("{what}: stride {stride:?} and dilation {dilation:?} must be at least 1"),
    )
}

pub(crate) fn check_option_limits(op: &'static str, values: &[(&str, &[usize])]) -> Result<()> {
    for (what, v) in values {
        if v.iter().any(|&x| x > OPTION_LIMIT) {
            return Err(Error::size(
                op,
                format!("{what} {v:?} is above the supported {OPTION_LIMIT}"),
            ));
        }
    }
    Ok(())
}

/// The product of the non-zero `dims`, or `None` past u64. Zeros are skipped so that an empty
/// problem (no batch, no output channels) still bounds every other extent: the launch
/// parameters multiply them (`conv2d_plan` plans such shapes too).
fn product(dims: &[usize]) -> Option<u64> {
    dims.iter()
        .filter(|&&d| d != 0)
        .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))
}

impl Geom {
    /// Input channels per group.
    pub fn cg(&self) -> usize {
        self.c / self.groups
    }
    /// Output channels per group.
    pub fn og(&self) -> usize {
        self.o / self.groups
    }

    /// Validates the options and builds the geometry of input `[n, c, h, w]` with weight
    /// `[o, cw, kh, kw]` (`cw` must be c / groups), every extent within the kernels' limits.
    pub fn new(
        op: &'static str,
        x: [usize; 4],
        wshape: [usize; 4],
        o: &Conv2dOptions,
    ) -> Result<Geom> {
        Self::new_then(op, x, wshape, o, |_| Ok(()))
    }

    /// [`Geom::new`] running `after_channels(out_channels)` where check_shape_forward checks
    /// a forward's bias: after the channels, before the kernel size.
    pub(crate) fn new_then(
        op: &'static str,
        x: [usize; 4],
        wshape: [usize; 4],
        o: &Conv2dOptions,
        after_channels: impl FnOnce(usize) -> Result<()>,
    ) -> Result<Geom> {
        let g = Self::shape_checked(op, x, wshape, o, after_channels)?;
        let (n, oc, oh, ow, h, w, p) = (g.n, g.o, g.oh, g.ow, g.h, g.w, g.pad);
        // The kernels index with u32 / i32: keep every extent and stride far from overflow.
        let limit = i32::MAX as u64;
        for (what, v) in [
            ("input", product(&x)),
            ("weight", product(&wshape)),
            ("output", product(&[n, oc, oh, ow])),
            (
                "padded input",
                product(&[
                    h.saturating_add(p.top + p.bottom),
                    w.saturating_add(p.left + p.right),
                ]),
            ),
        ] {
            if v.is_none_or(|v| v > limit) {
                let v = v.map_or("more than 2^64".into(), |v| v.to_string());
                return Err(Error::size(
                    op,
                    format!("{what} spans {v} elements (its non-zero dims), more than {limit}"),
                ));
            }
        }
        Ok(g)
    }

    /// [`Geom::new`] without the kernels' extent limits: the geometry of a convolution that
    /// runs no kernel (an empty result); `after_channels` as [`Geom::new_then`]'s.
    pub(crate) fn shape_checked(
        op: &'static str,
        x: [usize; 4],
        wshape: [usize; 4],
        o: &Conv2dOptions,
        after_channels: impl FnOnce(usize) -> Result<()>,
    ) -> Result<Geom> {
        let [n, c, h, w] = x;
        let [oc, cw, kh, kw] = wshape;
        let g = o.groups;
        let p = o.padding;
        check_option_limits(
            op,
            &[
                ("stride", &o.stride),
                ("dilation", &o.dilation),
                ("padding", &[p.top, p.bottom, p.left, p.right]),
                ("groups", &[g]),
            ],
        )?;
        // A forward convolution's errors start as PyTorch's (check_shape_forward), with the
        // caller's shapes: a 1-D one arrives as [n, c, 1, l]. Its dilation is the backend's
        // check, after the shapes and the empty results (forward_untracked); an empty
        // result's extent takes a dilation of 0 as an effective kernel of 1.
        let forward = matches!(op, "conv1d" | "conv2d");
        match forward {
            true => check_groups_and_stride(op, g, &o.stride, &o.dilation)?,
            false => check_positive(op, g, &o.stride, &o.dilation)?,
        }
        let caller = |s: [usize; 4]| caller_shape(op, &s);
        // A forward convolution checks in PyTorch's order (the weight first; its input check
        // below covers channels groups does not divide).
        if !forward && c % g != 0 {
            return Err(Error::arg(
                op,
                format!("groups {g} does not divide in_channels {c}"),
            ));
        }
        // PyTorch's check_shape_forward: a forward convolution's weight has at least one
        // output channel per group (no output channels is an error there, not an empty
        // result), and a multiple of groups.
        if forward {
            check_weight_dim0(op, g, oc, &caller(wshape), "out_channels")?;
        } else if oc % g != 0 {
            return Err(Error::arg(
                op,
                format!("groups {g} does not divide out_channels {oc}"),
            ));
        }
        if cw.checked_mul(g) != Some(c) {
            // Name the input first: the usual mistake is the input's layout, not the weight.
            // 1-D convolutions arrive as [n, c, 1, l].
            let expects = cw.saturating_mul(g);
            let hint = if expects == 0 {
                String::new()
            } else if x[3] == expects && x[2] == 1 {
                format!(
                    "; if the input is channels-last ({} channels in its last dim), \
                     convolutions take channels first: .permute(&[0, 2, 1]) for [N, L, C], \
                     .permute(&[0, 3, 1, 2]) for [N, H, W, C]",
                    x[3]
                )
            } else if x[3] == expects {
                format!(
                    "; the input looks channels-last (NHWC, {} channels in its last dim): \
                     convolutions take NCHW, so permute it with .permute(&[0, 3, 1, 2])",
                    x[3]
                )
            } else {
                String::new()
            };
            let pytorch = match forward {
                true => format!(
                    "Given groups={g}, weight of size {:?}, expected input{:?} to have {expects} \
                     channels, but got {c} channels instead: {}",
                    caller(wshape),
                    caller(x),
                    match c % g {
                        0 => String::new(),
                        _ => format!("groups {g} does not divide in_channels {c}; "),
                    }
                ),
                false => String::new(),
            };
            return Err(Error::shape(
                op,
                format!(
                    "{pytorch}input {x:?} has {c} channels in dim 1 (the layout is N, C, ...): \
                     weight {wshape:?} must have in_channels / groups = {c} / {g} = {} in dim \
                     1, got {cw} (it expects inputs of {expects} channels){hint}",
                    c / g,
                ),
            ));
        }
        after_channels(oc)?;
        // An empty batch gives an empty result (PyTorch), and so do no output channels where
        // they pass the check above (the gradient and transposed geometries); so do empty
        // input channels in the forward, before it gets here (`empty_channels` in empty.rs);
        // empty kernels have no meaningful convolution. A forward's empty spatial dims go on
        // to the kernel-size check below, as check_shape_forward's padded sizes (the forward
        // then refuses them unless the batch is empty, as PyTorch's backend choice).
        // The gradients of an empty batch take an empty image too (PyTorch's Empty backend
        // gives their zeros).
        // A forward's empty kernel is refused after the padded-size check below.
        let zero = !forward && ([c, kh, kw].contains(&0) || (n > 0 && [h, w].contains(&0)));
        if zero {
            return Err(Error::shape(
                op,
                format!(
                    "zero-size dimension: input {x:?}, weight {wshape:?} (only the batch and the \
                     output channels may be empty)"
                ),
            ));
        }
        let oh = out_len(h, p.top + p.bottom, kh, o.stride[0], o.dilation[0]);
        let ow = out_len(w, p.left + p.right, kw, o.stride[1], o.dilation[1]);
        let (Some(oh), Some(ow)) = (oh, ow) else {
            let pytorch = match forward {
                true => {
                    // Padded input and dilated kernel, " x "-separated as PyTorch's.
                    let padded = [h + p.top + p.bottom, w + p.left + p.right];
                    let dilated = [
                        kernel_span(kh, o.dilation[0]),
                        kernel_span(kw, o.dilation[1]),
                    ];
                    let show = |v: [i128; 2]| match op {
                        "conv1d" => v[1].to_string(),
                        _ => format!("{} x {}", v[0], v[1]),
                    };
                    format!(
                        "Calculated padded input size per channel: ({}). Kernel size: ({}). \
                         Kernel size can't be greater than actual input size; ",
                        show(padded.map(|v| v as i128)),
                        show(dilated)
                    )
                }
                false => String::new(),
            };
            return Err(Error::shape(
                op,
                format!(
                    "{pytorch}output size would be <= 0: input {h}x{w} padded by {p:?}, kernel \
                     {kh}x{kw} with dilation {:?}",
                    o.dilation
                ),
            ));
        };
        if forward && c != 0 && [kh, kw].contains(&0) {
            // The words of ATen's backend check (slow_conv2d_shape_check), with conv1d's
            // height 1, reached after the padded-size check as in PyTorch. An input without
            // channels (`empty_channels` in empty.rs) gets its empty result.
            return Err(Error::shape(
                op,
                format!(
                    "{} (input {x:?}, weight {wshape:?})",
                    empty_kernel_words(kh, kw)
                ),
            ));
        }
        Ok(Geom {
            n,
            c,
            h,
            w,
            o: oc,
            kh,
            kw,
            groups: g,
            stride: o.stride,
            pad: p,
            dil: o.dilation,
            oh,
            ow,
        })
    }
}

/// A shape as the caller of `op` gave it: the 1-D convolutions run as 2-D ones on
/// `[n, c, 1, l]`, shown as `[n, c, l]`; other shapes as they are.
pub(crate) fn caller_shape(op: &str, s: &[usize]) -> Vec<usize> {
    match (op, s) {
        ("conv1d" | "conv_transpose1d", &[a, b, 1, l]) => vec![a, b, l],
        _ => s.to_vec(),
    }
}

/// PyTorch's check_shape_forward on a convolution weight's dim 0 (`shown`: the weight's shape
/// as the caller gave it), which holds `oc` channels (the output channels of a forward
/// weight, the input channels of a transposed one, as `role` says): at least one per group,
/// and a multiple of `g`.
pub(crate) fn check_weight_dim0(
    op: &'static str,
    g: usize,
    oc: usize,
    shown: &[usize],
    role: &str,
) -> Result<()> {
    if oc < g {
        return Err(Error::arg(
            op,
            format!(
                "Given groups={g}, expected weight to be at least {g} at dimension 0, but got \
                 weight of size {shown:?} instead"
            ),
        ));
    }
    if !oc.is_multiple_of(g) {
        return Err(Error::arg(
            op,
            format!(
                "Given groups={g}, expected weight to be divisible by {g} at dimension 0, but \
                 got weight of size {shown:?} instead: groups {g} does not divide {role} {oc}"
            ),
        ));
    }
    Ok(())
}

/// The layout a rank error names: a weight's, or an input's.
pub(super) fn layout_of(what: &str, spatial: &str) -> String {
    if what.contains("weight") {
        format!("[out_channels, in_channels / groups, {spatial}] or, transposed, [in_channels, out_channels / groups, {spatial}]")
    } else {
        format!("[N, C, {spatial}]")
    }
}

/// The dims of a rank-`r` tensor as an array, or a shape error naming `what`.
pub(crate) fn dims4(op: &'static str, t: &Tensor, what: &str) -> Result<[usize; 4]> {
    t.shape().try_into().map_err(|_| {
        Error::shape(
            op,
            format!(
                "{what} must be 4-D ({}), got shape {:?}",
                layout_of(what, "H, W"),
                t.shape()
            ),
        )
    })
}

/// A 3-D `[N, C, L]` tensor (or weight `[O, C/groups, K]`) as its 4-D `H = 1` view.
pub(crate) fn as_4d(op: &'static str, t: &Tensor, what: &str) -> Result<Tensor> {
    match t.shape() {
        &[a, b, l] => t.reshape(&[a, b, 1, l]),
        s => Err(Error::shape(
            op,
            format!(
                "{what} must be 3-D ({}), got shape {s:?}",
                layout_of(what, "L")
            ),
        )),
    }
}
