//! `pad` (constant, reflect, replicate, circular) on the copy family's `pad` kernel
//! (shaders/copy.wgsl, launched with the family's params), and its backward.

use super::{CopyParams, PAD, PAD_CIRCULAR, PAD_CONSTANT, PAD_REFLECT, PAD_REPLICATE, WG};
use crate::layout::pack_dims;
use crate::{DType, Error, Result, Tensor};

/// How [`pad`] fills the border (PyTorch's `mode=`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum PadMode {
    /// A constant value.
    #[default]
    Constant,
    /// The input mirrored at its edges, without repeating the edge (`[1, 2, 3]` padded by 2 on
    /// the left: `[3, 2, 1, 2, 3]`); each pad must be smaller than its dim.
    Reflect,
    /// The edge value repeated.
    Replicate,
    /// The input wrapped around (PyTorch's `"circular"`: `[1, 2, 3]` padded by 2 on the
    /// left: `[2, 3, 1, 2, 3]`); each pad at most its dim's size.
    Circular,
}

impl PadMode {
    /// PyTorch's name of the mode (`"reflect"`, ...), as its errors quote it.
    fn name(self) -> &'static str {
        match self {
            PadMode::Constant => "constant",
            PadMode::Reflect => "reflect",
            PadMode::Replicate => "replicate",
            PadMode::Circular => "circular",
        }
    }
}

/// PyTorch's `torch.nn.functional.pad`: `pads` lists (before, after) pairs starting from the
/// last dim (`[left, right, top, bottom, ...]`), at most one pair per dim; `value` fills
/// [`PadMode::Constant`] borders. As PyTorch's, the other modes pad the last 1, 2 or 3 dims of
/// a `(C, ...)` or `(N, C, ...)` input (2 pads on rank 2 or 3, 4 on rank 3 or 4, 6 on rank 4
/// or 5), take no `value` (pass 0), and reflect and replicate refuse empty dims but the batch.
///
/// Pads are any integers (`&[1, 1]`, a `&[usize]`, a `&[isize]`); a negative one crops, as
/// PyTorch's: the constant and circular modes crop the input first (circular then wraps the
/// cropped input), reflect and replicate pad the whole input then crop, so their borders
/// mirror or repeat the input's own edges. The result is always a new tensor.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::ops::{pad, PadMode};
/// use wgtensor::{Device, Tensor};
/// let dev = Device::new()?;
/// let x = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0], &[1, 4])?;
/// let y = pad(&x, &[2, -1], PadMode::Reflect, 0.0)?;
/// assert_eq!(y.to_vec::<f32>()?, vec![3.0, 2.0, 1.0, 2.0, 3.0]);
/// let y = pad(&x, &[-1, 2], PadMode::Constant, 9.0)?;
/// assert_eq!(y.to_vec::<f32>()?, vec![2.0, 3.0, 4.0, 9.0, 9.0]);
/// # Ok(()) }
/// ```
pub fn pad<P: TryInto<i64> + Copy>(
    x: &Tensor,
    pads: &[P],
    mode: PadMode,
    value: f64,
) -> Result<Tensor> {
    let op = "pad";
    let too_long = || Error::size(op, "a pad past i64 makes its dim longer than 2^31 - 1");
    let pads = pads
        .iter()
        .map(|&p| p.try_into().map_err(|_| too_long()))
        .collect::<Result<Vec<i64>>>()?;
    check_pads(x, pads.len(), mode, value)?;
    // The padding part of each pad (the crops are below); past usize (wasm32) it is too long.
    let positive = pads
        .iter()
        .map(|&p| usize::try_from(p.max(0)).map_err(|_| too_long()))
        .collect::<Result<Vec<usize>>>()?;
    if pads.iter().all(|&p| p >= 0) {
        return pad_positive(x, &positive, mode, value);
    }
    let rank = x.rank();
    // (dim, crop before, crop after) and (input size, output size) per padded dim.
    let (mut crops, mut sizes) = (Vec::new(), Vec::new());
    for (i, pair) in pads.chunks(2).enumerate() {
        let d = rank - 1 - i;
        let len = x.shape()[d] as i64;
        let (l, r) = (pair[0], pair[1]);
        let out = len.saturating_add(l).saturating_add(r);
        // Negated saturating: i64::MIN crops as much as i64::MAX would.
        let (crop_l, crop_r) = (0i64.saturating_sub(l).max(0), 0i64.saturating_sub(r).max(0));
        let cropped = crop_l.saturating_add(crop_r);
        let bad = match mode {
            PadMode::Circular if l > len || r > len => {
                Some("Padding value causes wrapping around more than once.".to_string())
            }
            PadMode::Circular if out < 0 => {
                Some("Negative padding value is resulting in an empty dimension".to_string())
            }
            // These crop the input before padding: the crops must fit in it.
            // constant_pad_nd narrows every cropped dim before it sizes the output: crops past
            // the input (a negative size among them) get narrow's words.
            PadMode::Constant | PadMode::Circular if cropped > len => {
                Some("narrow(): length must be non-negative.".to_string())
            }
            PadMode::Reflect if l >= len || r >= len => Some(reflect_too_wide(x, i, d, l, r)),
            _ => None,
        };
        if let Some(msg) = bad {
            return Err(Error::arg(op, msg));
        }
        sizes.push((len, out));
        crops.push((d, crop_l as usize, crop_r as usize));
    }
    // Reflection and replication: every padded dim of the output at least 1 (ATen's
    // pad_shape_check), in its D / H / W words, one dim's sentence its own.
    if matches!(mode, PadMode::Reflect | PadMode::Replicate) && sizes.iter().any(|&(_, o)| o < 1) {
        let names = ["W", "H", "D"];
        let named = |f: fn(&(i64, i64)) -> i64, sep: &str| -> String {
            let parts: Vec<String> = (0..sizes.len())
                .rev()
                .map(|i| format!("{}: {}", names[i], f(&sizes[i])))
                .collect();
            parts.join(sep)
        };
        let (input, output) = (named(|s| s.0, ", "), named(|s| s.1, " "));
        let msg = match sizes.len() {
            1 => format!("input ({input}) is too small. Calculated output {output}"),
            _ => format!(
                "Calculated output {output} must be >= 1 in every dimension (input {input})"
            ),
        };
        return Err(Error::arg(op, msg));
    }
    let crop = |t: &Tensor| -> Result<Tensor> {
        let mut t = t.clone();
        for &(d, before, after) in &crops {
            let len = t.shape()[d] - before - after;
            t = t.narrow(d as isize, before, len)?;
        }
        Ok(t)
    };
    match mode {
        // The input cropped, then padded (the circular border wraps the cropped input, as
        // PyTorch's _pad_circular copies from the output's interior).
        PadMode::Constant | PadMode::Circular => pad_positive(&crop(x)?, &positive, mode, value),
        // The whole input padded, then cropped: the borders mirror or repeat the input's own
        // edges, as PyTorch's kernels index the uncropped input.
        PadMode::Reflect | PadMode::Replicate => {
            crop(&pad_positive(x, &positive, mode, value)?)?.contiguous_at_zero()
        }
    }
}

/// [`pad`]'s checks of the pad count and the mode, in PyTorch's `_pad_enum` order and words.
fn check_pads(x: &Tensor, n: usize, mode: PadMode, value: f64) -> Result<()> {
    let op = "pad";
    if !n.is_multiple_of(2) {
        return Err(Error::arg(
            op,
            format!("Padding length must be divisible by 2, got {n}"),
        ));
    }
    if n / 2 > x.rank() {
        return Err(Error::arg(
            op,
            format!(
                "Padding length should be less than or equal to two times the input dimension \
                 but got padding length {n} and input of dimension {}",
                x.rank()
            ),
        ));
    }
    if mode != PadMode::Constant && value != 0.0 {
        // 0 stands for "not given" here, the argument being a plain f64.
        return Err(Error::arg(
            op,
            format!(
                "Padding mode \"{}\" doesn't take in value argument, got {value} (pass 0)",
                mode.name()
            ),
        ));
    }
    if mode != PadMode::Constant {
        check_mode_input(x, n / 2, mode)?;
    }
    Ok(())
}

/// The non-constant modes' input rules, before any pad's size is checked (ATen's `_pad_enum`,
/// then the padding functions' `check_valid_input`): pads of 1, 2 or 3 dims take (C, ...) or
/// (N, C, ...) inputs and nothing else, and reflection and replication take an empty batch but
/// no other empty dim.
fn check_mode_input(x: &Tensor, dims: usize, mode: PadMode) -> Result<()> {
    let op = "pad";
    let rank = x.rank();
    if dims == 0 || dims > 3 || !(dims + 1..=dims + 2).contains(&rank) {
        return Err(Error::arg(
            op,
            format!(
                "Padding size {} is not supported for {rank}D input tensor.\n\
                 Supported combinations for non-constant padding:\n  \
                 - 2D or 3D input: padding size = 2 (pads last dimension)\n  \
                 - 3D or 4D input: padding size = 4 (pads last 2 dimensions)\n  \
                 - 4D or 5D input: padding size = 6 (pads last 3 dimensions)",
                2 * dims
            ),
        ));
    }
    let batch = rank - dims - 1;
    if mode != PadMode::Circular && x.shape()[batch..].contains(&0) {
        return Err(Error::arg(
            op,
            format!(
                "Expected {}D or {}D (batch mode) tensor with possibly 0 batch size and other \
                 non-zero dimensions for input, but got: {:?} (mode {})",
                dims + 1,
                dims + 2,
                x.shape(),
                mode.name()
            ),
        ));
    }
    Ok(())
}

/// ATen's check_pad_within_input words for reflection: pair `i` (dim `d`) is the argument
/// `4 + 2 i` of the padding function.
fn reflect_too_wide(x: &Tensor, i: usize, d: usize, l: i64, r: i64) -> String {
    format!(
        "Argument #{}: Padding size should be less than the corresponding input dimension, but \
         got: padding ({l}, {r}) at dimension {d} of input {:?}",
        4 + 2 * i,
        x.shape()
    )
}

/// [`pad`] with pads of 0 or more, recorded for autograd.
fn pad_positive(x: &Tensor, pads: &[usize], mode: PadMode, value: f64) -> Result<Tensor> {
    let out = pad_untracked(x, pads, mode, value)?;
    Ok(crate::autograd::record(out, &[x], |_| {
        // Pair i pads dim rank - 1 - i; the gradient is the unpadded window of g.
        let rank = x.rank();
        let window = pads
            .chunks(2)
            .enumerate()
            .map(|(i, pair)| (rank - 1 - i, pair[0], x.shape()[rank - 1 - i]))
            .collect();
        let input = matches!(mode, PadMode::Reflect | PadMode::Replicate).then(|| x.detach());
        Box::new(PadBackward {
            window,
            mode,
            input,
        })
    }))
}

/// Pad's backward. Constant: the gradient's window over the input. Reflect and replicate
/// read input positions several times, so their gradient sums every output position's
/// gradient into the input position it copied: per padded dim, a `scatter_add` (summing in
/// index order: deterministic) along that dim with the source index of each output position.
struct PadBackward {
    /// (dim, start, len) per padded dim.
    window: Vec<(usize, usize, usize)>,
    mode: PadMode,
    /// Reflect and replicate: the input, for the version check only (their PyTorch twins
    /// save it); so their node serves one backward.
    input: Option<Tensor>,
}

/// The input position output position `o` of a padded dim copies (`left` padded before an
/// input of `len`).
fn pad_source(mode: PadMode, o: usize, left: usize, len: usize) -> usize {
    let j = o as i64 - left as i64;
    let last = len as i64 - 1;
    let s = match mode {
        PadMode::Reflect if j < 0 => -j,
        PadMode::Reflect if j > last => 2 * last - j,
        PadMode::Circular => j.rem_euclid(len as i64),
        _ => j.clamp(0, last),
    };
    s as usize
}

impl crate::autograd::BackwardOp for PadBackward {
    /// reflection_pad and replication_pad save their input (derivatives.yaml); a constant pad
    /// saves nothing.
    fn saved(&self) -> Vec<&Tensor> {
        self.input.iter().collect()
    }

    /// A circular pad keeps no tensor, but PyTorch's (ATen's `_pad_circular`, slices copied
    /// in place: a CopySlices node) frees its graph after one backward.
    fn single_use(&self) -> bool {
        self.mode == PadMode::Circular
    }

    fn name(&self) -> &'static str {
        "pad"
    }

    fn backward(&self, grads: &[Option<Tensor>], _needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = grads.first().and_then(Option::as_ref) else {
            return Ok(vec![None]);
        };
        let mut gx = g.clone();
        for &(d, start, len) in &self.window {
            if self.mode == PadMode::Constant || gx.shape()[d] == len {
                gx = gx.narrow(d as isize, start, len)?;
                continue;
            }
            let out_len = gx.shape()[d];
            let src: Vec<i32> = (0..out_len)
                .map(|o| pad_source(self.mode, o, start, len) as i32)
                .collect();
            let mut lifted = vec![1usize; gx.rank()];
            lifted[d] = out_len;
            let index = Tensor::from_slice(g.device(), &src, &lifted)?.broadcast_to(gx.shape())?;
            let mut shape = gx.shape().to_vec();
            shape[d] = len;
            let zeros = Tensor::zeros(g.device(), &shape, gx.dtype)?;
            gx = zeros.scatter_add(d as isize, &index, &gx)?;
        }
        Ok(vec![Some(gx)])
    }
}

fn pad_untracked(x: &Tensor, pads: &[usize], mode: PadMode, value: f64) -> Result<Tensor> {
    let op = "pad";
    check_pads(x, pads.len(), mode, value)?;
    let rank = x.rank();
    let mut before = vec![0usize; rank];
    let mut shape = x.shape().to_vec();
    for (i, pair) in pads.chunks(2).enumerate() {
        let d = rank - 1 - i;
        let len = x.shape()[d];
        // The kernel's coordinates are i32: a padded dim must stay below 2^31 (a tensor of
        // 4 GiB at most never needs more).
        let padded = len
            .checked_add(pair[0])
            .and_then(|v| v.checked_add(pair[1]))
            .filter(|&v| v <= i32::MAX as usize);
        if padded.is_none() {
            return Err(Error::size(
                op,
                format!("padding {pair:?} of dim {d} (size {len}) makes it longer than 2^31 - 1"),
            ));
        }
        match mode {
            PadMode::Reflect if pair[0] >= len || pair[1] >= len => {
                let (l, r) = (pair[0] as i64, pair[1] as i64);
                return Err(Error::arg(op, reflect_too_wide(x, i, d, l, r)));
            }
            PadMode::Circular if pair[0] > len || pair[1] > len => {
                return Err(Error::arg(
                    op,
                    format!(
                        "Padding value causes wrapping around more than once: padding ({}, \
                         {}) at dimension {d} of input {:?}",
                        pair[0],
                        pair[1],
                        x.shape()
                    ),
                ))
            }
            PadMode::Replicate if len == 0 && pair[0] + pair[1] > 0 => {
                return Err(Error::arg(
                    op,
                    format!(
                        "cannot replicate-pad the empty dimension {d} of {:?}",
                        x.shape()
                    ),
                ))
            }
            _ => {}
        }
        before[d] = pair[0];
        shape[d] = len + pair[0] + pair[1];
    }
    let dev = x.device();
    if mode == PadMode::Constant {
        // PyTorch fills with a checked conversion: a value the dtype cannot hold is an error.
        crate::tensor::check_fill(op, value, x.dtype)?;
        if x.dtype == DType::I32 {
            // The kernel carries the value as f32, exact only to 2^24: an i32 fill is the
            // filled output with the input copied into its window instead.
            let out = Tensor::full(dev, &shape, value, x.dtype)?;
            let mut window = out.clone();
            for (d, &b) in before.iter().enumerate() {
                window = window.narrow(d as isize, b, x.shape()[d])?;
            }
            if x.numel() > 0 {
                window.copy_from(x)?;
            }
            return Ok(out);
        }
    }
    let out = Tensor::empty(dev, op, &shape, x.dtype)?;
    let n = out.numel();
    if n == 0 {
        return Ok(out);
    }
    let code = match mode {
        PadMode::Constant => PAD_CONSTANT,
        PadMode::Reflect => PAD_REFLECT,
        PadMode::Replicate => PAD_REPLICATE,
        PadMode::Circular => PAD_CIRCULAR,
    };
    let params = CopyParams {
        numel: n as u32,
        rank: rank as u32,
        src_off: x.layout.offset() as u32,
        dst_off: 0,
        value: value as f32,
        _pad0: 0,
        _pad1: 0,
        _pad2: 0,
        shape: pack_dims(&shape),
        src_strides: pack_dims(x.strides()),
        aux: pack_dims(x.shape()),
        before: pack_dims(&before),
    };
    dev.launch(
        op,
        &PAD,
        &[x.dtype],
        &[("MODE", code as f64), ("WG", WG as f64)],
        bytemuck::bytes_of(&params),
        &[x.buffer(), out.buffer()],
        dev.grid_1d(op, (n as u64).div_ceil(WG as u64))?,
    )?;
    Ok(out)
}
