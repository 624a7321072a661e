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

/// PyTorch's `torch.nn.functional.pad`: `pads` lists (before, after) pairs starting from the
/// last dim (`[left, right, top, bottom, ...]`), at most one pair per dim; `value` fills
/// [`PadMode::Constant`] borders. As PyTorch's, the other modes pad the last 1, 2 or 3 dims of
/// a `(C, ...)` or `(N, C, ...)` input (2 pads on rank 2 or 3, 4 on rank 3 or 4, 6 on rank 4
/// or 5), take no `value` (pass 0), and reflect and replicate refuse empty dims but the batch.
pub fn pad(x: &Tensor, pads: &[usize], mode: PadMode, value: f64) -> Result<Tensor> {
    let out = pad_untracked(x, pads, mode, value)?;
    Ok(crate::autograd::record(out, &[x], |_| {
        // Pair i pads dim rank - 1 - i; the gradient is the unpadded window of g.
        let rank = x.rank();
        let window = pads
            .chunks(2)
            .enumerate()
            .map(|(i, pair)| (rank - 1 - i, pair[0], x.shape()[rank - 1 - i]))
            .collect();
        Box::new(PadBackward { window, mode })
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
    fn saved(&self) -> Vec<&Tensor> {
        Vec::new()
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
    if !pads.len().is_multiple_of(2) || pads.len() / 2 > x.rank() {
        return Err(Error::arg(
            op,
            format!(
                "padding length must be even and cover at most the {} dims of the input, got \
                 {pads:?}",
                x.rank()
            ),
        ));
    }
    if mode != PadMode::Constant && value != 0.0 {
        // PyTorch: 'Padding mode "reflect" doesn't take in value argument' (0 stands for
        // "not given" here, the argument being a plain f64).
        return Err(Error::arg(
            op,
            format!("padding mode {mode:?} doesn't take a value argument, got {value} (pass 0)"),
        ));
    }
    let rank = x.rank();
    if mode != PadMode::Constant {
        // PyTorch's _pad_enum: the padding functions of 1, 2 and 3 dims take (C, ...) or
        // (N, C, ...) inputs, and nothing else.
        let dims = pads.len() / 2;
        if dims == 0 || !(dims + 1..=dims + 2).contains(&rank) {
            return Err(Error::arg(
                op,
                format!(
                    "Only 2D, 3D, 4D, 5D padding with non-constant padding are supported for now: \
                     mode {mode:?} pads {dims} dims of an input of rank {rank} (it takes rank \
                     {} or {})",
                    dims + 1,
                    dims + 2
                ),
            ));
        }
        // Reflection and replication pads take an empty batch, but no other empty dim.
        let batch = rank - dims - 1;
        if mode != PadMode::Circular && x.shape()[batch..].contains(&0) {
            return Err(Error::arg(
                op,
                format!(
                    "Expected a tensor with possibly 0 batch size and other non-zero dimensions \
                     for input, but got {:?} (mode {mode:?})",
                    x.shape()
                ),
            ));
        }
    }
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
                return Err(Error::arg(
                    op,
                    format!(
                        "padding size should be less than the corresponding input dimension, \
                         but got padding ({}, {}) at dimension {d} of input {:?}",
                        pair[0],
                        pair[1],
                        x.shape()
                    ),
                ))
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
