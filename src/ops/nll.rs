//! Class-index losses (shaders/nll.wgsl): PyTorch's `nll_loss`, and `cross_entropy` with
//! class-index targets (log_softmax, then nll, plus label smoothing composed from the
//! elementwise ops). Targets are [`DType::I32`] tensors.

use bytemuck::{Pod, Zeroable};

use crate::autograd::{record, BackwardOp};
use crate::ops::loss_options::{CrossEntropyOptions, Reduction};
use crate::ops::map::WG;
use crate::runtime::pipeline::ShaderVariant;
use crate::runtime::{Access, Kernel};
use crate::{DType, Error, Result, Tensor};

const SRC: &str = include_str!("../../shaders/nll.wgsl");

use Access::{Read as R, ReadWrite as RW};

static NLL: Kernel = Kernel::new("nll", SRC, "nll", &[R, R, R, RW, RW]).slots(&[1, 2, 3, 4, 5]);

static NLL_BACKWARD: Kernel =
    Kernel::new("nll", SRC, "nll_backward", &[R, R, R, RW]).slots(&[1, 2, 3, 4]);

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct NllParams {
    numel: u32,
    classes: u32,
    inner: u32,
    ignore: i32,
}

/// Options of [`nll_loss`] (PyTorch's keyword arguments and defaults).
#[derive(Debug, Clone, Copy)]
pub struct NllLossOptions<'a> {
    /// A weight per class (`[C]`, the input's dtype; for inputs of rank 3 and more any shape
    /// of C elements, as PyTorch's `nll_loss2d` takes, though `cross_entropy`'s label
    /// smoothing takes `[C]` only).
    pub weight: Option<&'a Tensor>,
    /// Samples whose target equals this value count for nothing (PyTorch's default -100).
    pub ignore_index: i64,
    /// How the per-sample losses are reduced; `Mean` divides by the summed weights of the
    /// counted targets (NaN when every target is ignored, as in PyTorch).
    pub reduction: Reduction,
}

impl Default for NllLossOptions<'_> {
    fn default() -> Self {
        NllLossOptions {
            weight: None,
            ignore_index: -100,
            reduction: Reduction::Mean,
        }
    }
}

/// The validated problem: `[N, C, D]` log-probabilities and `[N, D]` targets.
struct Problem {
    classes: usize,
    inner: usize,
    /// The per-sample loss shape (the target's).
    target_shape: Vec<usize>,
}

fn check(
    op: &'static str,
    input: &Tensor,
    target: &Tensor,
    weight: Option<&Tensor>,
) -> Result<Problem> {
    input.same_device(op, target)?;
    // cross_entropy's log_softmax refuses an integer input first; nll_loss's kernel does
    // after its shape checks (below).
    let nll = op == "nll_loss";
    if !nll {
        input.require_float(op)?;
    }
    let s = input.shape();
    let (expected, classes, inner): (Vec<usize>, usize, usize) =
        match s.len() {
            0 => return Err(Error::shape(
                op,
                "Expected 1 or more dimensions (got 0) (input must have a class dim: [C], [N, C] \
                 or [N, C, d1, ...])",
            )),
            1 => (vec![], s[0], 1),
            _ => {
                let mut e = vec![s[0]];
                e.extend_from_slice(&s[2..]);
                (e, s[1], s[2..].iter().product())
            }
        };
    let t = target.shape();
    // A 0-d target against a batch is read as batch 0, as PyTorch's target.size(0) there (an
    // empty batch passes that check and fails the size check below).
    let tb = t.first().copied().unwrap_or(0);
    let batch_mismatch = s.len() >= 2 && tb != s[0];
    // After nll_loss_nd's batch check (and, for ranks 3 and 5+, its target-size check, which
    // comes before the reshape into nll_loss2d), the autograd layer of the function it calls
    // refuses a tracked weight before that kernel's checks (not a silent None, nor the
    // smoothing term's part of it).
    let reshaped = s.len() == 3 || s.len() >= 5;
    let function = match s.len() {
        0..=2 => "nll_loss_forward",
        _ => "nll_loss2d_forward",
    };
    if !batch_mismatch && !reshaped {
        crate::ops::loss_options::no_requires_grad(op, function, "weight", weight)?;
    }
    // The target's dtype: after its rank (ranks 1, 2 and 4: nll_loss_forward's and
    // nll_loss2d's own checks) or its whole shape (3 and 5+: nll_loss_nd's), before the rest.
    let dtype_check = || {
        if target.dtype == DType::I32 {
            return Ok(());
        }
        Err(Error::arg(
            op,
            format!(
                "class-index targets must be an i32 tensor, got {:?} (probability targets: cross_entropy with a float target)",
                target.dtype
            ),
        ))
    };
    // A 1-D input with a [1] target reaches here only from the backward's refusal
    // ([`one_class_of_1d`] takes it before); these are its words.
    let fits = t == expected.as_slice();
    // PyTorch's checks in its order and words (nll_loss_nd, then nll_loss / nll_loss2d).
    let msg = if batch_mismatch {
        Some(format!(
            "Expected input batch_size ({}) to match target batch_size ({tb}).",
            s[0]
        ))
    } else if s.len() <= 2 && t.len() > 1 {
        Some("0D or 1D target tensor expected, multi-target not supported".to_string())
    } else if s.len() == 4 && t.len() != 3 {
        Some(format!(
            "only batches of spatial targets supported (3D tensors) but got targets of \
             dimension: {}",
            t.len()
        ))
    } else {
        None
    };
    if let Some(msg) = msg {
        return Err(Error::shape(
            op,
            format!("{msg} (target shape {t:?} must be {expected:?} for input shape {s:?})"),
        ));
    }
    if !reshaped {
        dtype_check()?;
    }
    // nll_loss2d's weight rule (inputs of rank 3 and more go through it): any shape of C
    // elements, in its words. Its check runs before its size check (rank 4: after the target's
    // rank); nll_loss_nd's target-size check of other ranks runs before it.
    const ALL_OR_NO: &str = "weight tensor should be defined either for all or no classes";
    let spatial_weight_bad = weight.is_some_and(|w| s.len() >= 3 && w.numel() != classes);
    if spatial_weight_bad && s.len() == 4 {
        return Err(Error::shape(op, ALL_OR_NO));
    }
    if !fits {
        let msg = match s.len() {
            1 if t != [1] => format!(
                "For 1D input, 1D target must have size 1, but got target size: {}",
                t[0]
            ),
            2 if t.is_empty() => "Dimension specified as 0 but tensor has no dimensions".into(),
            1 | 2 => format!("size mismatch (got input: {s:?}, target: {t:?})"),
            4 => format!("size mismatch (got input: {s:?} , target: {t:?}"),
            _ => format!("Expected target size {expected:?}, got {t:?}"),
        };
        return Err(Error::shape(
            op,
            format!("{msg} (target shape {t:?} must be {expected:?} for input shape {s:?})"),
        ));
    }
    if reshaped {
        crate::ops::loss_options::no_requires_grad(op, function, "weight", weight)?;
        dtype_check()?;
    }
    if spatial_weight_bad {
        return Err(Error::shape(op, ALL_OR_NO));
    }
    if let Some(w) = weight {
        input.same_device(op, w)?;
        if s.len() <= 2 && w.shape() != [classes] {
            return Err(Error::shape(
                op,
                format!(
                    "weight tensor should be defined either for all {classes} classes or no \
                     classes but got weight tensor of shape: {:?}",
                    w.shape()
                ),
            ));
        }
    }
    if nll {
        input.require_float(op)?;
    }
    if let Some(w) = weight {
        input.same_dtype(op, w)?;
    }
    Ok(Problem {
        classes,
        inner,
        target_shape: expected,
    })
}

/// PyTorch's forward takes a `[1]` target beside a 1-D input as its one class (a 0-d loss, as
/// for a 0-d target), and its backward refuses it ("size mismatch (got input: [3], target:
/// [1])"): the loss of the 0-d target, recorded with a node whose backward gives that
/// refusal. `None` for any other pair.
fn one_class_of_1d(
    op: &'static str,
    input: &Tensor,
    target: &Tensor,
    loss_of: impl FnOnce(&Tensor) -> Result<Tensor>,
) -> Result<Option<Tensor>> {
    if input.rank() != 1 || target.shape() != [1] {
        return Ok(None);
    }
    let t0 = target.reshape(&[])?;
    let loss = {
        let _guard = crate::autograd::NoGradGuard::new();
        loss_of(&t0)?
    };
    let msg = format!(
        "size mismatch (got input: {:?}, target: [1]) (a 1-D input takes a 0-d target)",
        input.shape()
    );
    Ok(Some(record(loss, &[input], |_| {
        Box::new(RefusedBackward { op, msg })
    })))
}

/// The backward PyTorch refuses for a forward it took ([`one_class_of_1d`]).
struct RefusedBackward {
    op: &'static str,
    msg: String,
}

impl BackwardOp for RefusedBackward {
    fn name(&self) -> &'static str {
        self.op
    }

    fn backward(&self, _grads: &[Option<Tensor>], _needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        Err(Error::shape(self.op, self.msg.clone()))
    }

    fn saved(&self) -> Vec<&Tensor> {
        Vec::new()
    }
}

fn grid(op: &'static str, t: &Tensor, n: usize) -> Result<[u32; 3]> {
    t.device().grid_1d(op, (n as u64).div_ceil(WG as u64))
}

fn ignore_i32(ignore_index: i64) -> i32 {
    // An ignore_index outside the i32 range can match no i32 target; any value outside
    // [0, C) that no target holds behaves the same.
    i32::try_from(ignore_index).unwrap_or(i32::MIN)
}

/// Per-sample losses (tracked) and the f32 `[2, M]` of counted weights and counted flags.
fn nll_parts(
    op: &'static str,
    logp: &Tensor,
    target: &Tensor,
    weight: Option<&Tensor>,
    ignore_index: i64,
) -> Result<(Tensor, Tensor, Problem)> {
    let pr = check(op, logp, target, weight)?;
    let dev = logp.device();
    let m: usize = pr.target_shape.iter().product();
    let loss = Tensor::empty(dev, op, &pr.target_shape, logp.dtype)?;
    let aux = Tensor::empty(dev, op, &[2, m], DType::F32)?;
    // No classes (C = 0) is not refused here: as in PyTorch, samples whose target is
    // `ignore_index` still count (a loss of 0, weight 0), and any other target is out of
    // range for the index check below.
    if m > 0 {
        let ignore = i32::try_from(ignore_index).ok();
        let dim = if logp.rank() == 1 { 0 } else { 1 };
        super::index_check::check_indices(op, target, pr.classes, dim, ignore)?;
        let x = logp.contiguous_at_zero()?;
        let t = target.contiguous_at_zero()?;
        let p = NllParams {
            numel: m as u32,
            classes: pr.classes as u32,
            inner: pr.inner as u32,
            ignore: ignore_i32(ignore_index),
        };
        let wbuf = weight.map(|w| w.contiguous_at_zero()).transpose()?;
        dev.launch(
            op,
            &NLL,
            &[logp.dtype],
            &[
                ("WG", WG as f64),
                ("HAS_WEIGHT", weight.is_some() as u32 as f64),
            ],
            bytemuck::bytes_of(&p),
            &[
                x.buffer(),
                t.buffer(),
                wbuf.as_ref().unwrap_or(&x).buffer(),
                loss.buffer(),
                aux.buffer(),
            ],
            grid(op, logp, m)?,
        )?;
    }
    let loss = record(loss, &[logp], |_| {
        Box::new(NllBackward {
            logp: logp.detach(),
            target: target.clone(),
            weight: weight.map(Tensor::detach),
            ignore: ignore_i32(ignore_index),
            shape: logp.shape().to_vec(),
            classes: pr.classes,
            inner: pr.inner,
        })
    });
    Ok((loss, aux, pr))
}

struct NllBackward {
    /// Not read by the backward; kept for the version check, as NllLossBackward saves self.
    logp: Tensor,
    target: Tensor,
    weight: Option<Tensor>,
    ignore: i32,
    shape: Vec<usize>,
    classes: usize,
    inner: usize,
}

impl BackwardOp for NllBackward {
    fn saved(&self) -> Vec<&Tensor> {
        [&self.logp, &self.target]
            .into_iter()
            .chain(&self.weight)
            .collect()
    }

    fn name(&self) -> &'static str {
        "nll_loss"
    }

    fn backward(&self, grads: &[Option<Tensor>], _needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let op = "nll_loss";
        let Some(g) = grads.first().and_then(Option::as_ref) else {
            return Ok(vec![None]);
        };
        let dev = g.device();
        let out = Tensor::empty(dev, op, &self.shape, g.dtype)?;
        let n = out.numel();
        if n > 0 {
            let g = g.contiguous_at_zero()?;
            let t = self.target.contiguous_at_zero()?;
            let w = self
                .weight
                .as_ref()
                .map(|w| w.contiguous_at_zero())
                .transpose()?;
            let p = NllParams {
                numel: n as u32,
                classes: self.classes as u32,
                inner: self.inner as u32,
                ignore: self.ignore,
            };
            dev.launch(
                op,
                &NLL_BACKWARD,
                &[g.dtype],
                &[("WG", WG as f64), ("HAS_WEIGHT", w.is_some() as u32 as f64)],
                bytemuck::bytes_of(&p),
                &[
                    g.buffer(),
                    t.buffer(),
                    w.as_ref().unwrap_or(&g).buffer(),
                    out.buffer(),
                ],
                grid(op, &g, n)?,
            )?;
        }
        Ok(vec![Some(out)])
    }
}

/// Reduces per-sample losses: `Mean` divides by `denom` (the summed counted weights).
fn reduce(loss: Tensor, denom: &Tensor, r: Reduction) -> Result<Tensor> {
    match r {
        Reduction::None => Ok(loss),
        Reduction::Sum => loss.sum_all(),
        Reduction::Mean => {
            // Summed and divided in f32, rounded once, as PyTorch's half kernels do: an f16 sum
            // of the losses (8192 tokens at ln(50257) each) or of the weights (past 65504
            // counted targets) would be inf.
            let dtype = loss.dtype;
            let sum = loss.to_dtype(DType::F32)?.sum_all()?;
            sum.div(&denom.sum_all()?.to_dtype(DType::F32)?)?
                .to_dtype(dtype)
        }
    }
}

/// PyTorch's `nll_loss(input, target)`: input log-probabilities `[N, C]`, `[C]` or
/// `[N, C, d1, ...]`; target class indices (i32) `[N]`, `[]` or `[N, d1, ...]`. The loss of
/// each sample is `-weight[t] * input[n, t]`; `ignore_index` targets count nothing. A target
/// outside `[0, C)` (other than `ignore_index`) is an error at the next sync or readback, as
/// PyTorch raises (with [`DeviceOptions::check_indices`](crate::DeviceOptions::check_indices)
/// off, the loss is NaN instead).
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::ops::{nll_loss, NllLossOptions};
/// use wgtensor::{Device, Tensor};
/// let dev = Device::new()?;
/// let logp = Tensor::from_slice(&dev, &[-0.5f32, -1.0, -2.0, -0.25], &[2, 2])?;
/// let target = Tensor::from_slice(&dev, &[1i32, 1], &[2])?;
/// let loss = nll_loss(&logp, &target, &NllLossOptions::default())?;
/// assert_eq!(loss.to_vec::<f32>()?, vec![0.625]); // (1.0 + 0.25) / 2
/// # Ok(()) }
/// ```
pub fn nll_loss(input: &Tensor, target: &Tensor, o: &NllLossOptions) -> Result<Tensor> {
    if let Some(loss) = one_class_of_1d("nll_loss", input, target, |t| nll_loss(input, t, o))? {
        return Ok(loss);
    }
    let (loss, aux, _) = nll_parts("nll_loss", input, target, o.weight, o.ignore_index)?;
    reduce(loss, &aux.narrow(0, 0, 1)?, o.reduction)
}

/// PyTorch's `cross_entropy` with class-index targets: `log_softmax` over the class dim, then
/// [`nll_loss`], with `label_smoothing` mixing in the mean over classes as PyTorch does
/// (`(1 - e) nll + e / C * smooth`, the smoothing term weighted by the class weights, ignored
/// samples excluded, and `Mean` dividing by the same summed weights). Called by
/// [`cross_entropy`](crate::ops::cross_entropy) for an i32 target.
pub(crate) fn cross_entropy_indices(
    input: &Tensor,
    target: &Tensor,
    o: &CrossEntropyOptions,
) -> Result<Tensor> {
    let op = "cross_entropy";
    // Smoothing first, as PyTorch's cross_entropy checks it before nll_loss's shape checks.
    let e = o.check_label_smoothing(op)?;
    if e > 0.0 && input.rank() == 1 && target.shape() == [1] {
        // The smoothing term's in-place sum over a 0-d loss refuses the [1] target, after
        // nll_loss's checks of the rest (its weight, its dtypes).
        check(op, input, &target.reshape(&[])?, o.weight)?;
        return Err(Error::shape(
            op,
            "output with shape [] doesn't match the broadcast shape [1] (a 1-D input takes a \
             0-d target)",
        ));
    }
    let one = one_class_of_1d(op, input, target, |t| cross_entropy_indices(input, t, o))?;
    if let Some(loss) = one {
        return Ok(loss);
    }
    let pr = check(op, input, target, o.weight)?;
    if o.weight.is_some_and(|w| e > 0.0 && w.rank() == 0) {
        // weight.size(0) of a 0-d weight.
        return Err(Error::shape(
            op,
            "Dimension specified as 0 but tensor has no dimensions (with label_smoothing the \
             weight must be [C], got a 0-d one)",
        ));
    }
    if let Some(w) = o.weight.filter(|w| e > 0.0 && w.rank() != 1) {
        // cross_entropy_loss_label_smoothing views the weight by its first dim, then (Mean)
        // gathers from it as 1-D: only a [C] weight passes both.
        let cdim = usize::from(input.rank() > 1);
        let mut view = vec![1usize; input.rank()];
        view[cdim] = w.shape().first().copied().unwrap_or(1);
        let msg = if view[cdim] != pr.classes {
            format!(
                "shape '{view:?}' is invalid for input of size {}",
                w.numel()
            )
        } else {
            "Index tensor must have the same number of dimensions as input tensor".to_string()
        };
        if view[cdim] != pr.classes || o.reduction == Reduction::Mean {
            return Err(Error::shape(
                op,
                format!(
                    "{msg} (with label_smoothing the weight must be [C], got {:?})",
                    w.shape()
                ),
            ));
        }
    }
    let cdim: isize = if input.rank() == 1 { 0 } else { 1 };
    let logp = input.log_softmax(cdim)?;
    let (nll, aux, pr) = nll_parts(op, &logp, target, o.weight, o.ignore_index)?;
    let denom = aux.narrow(0, 0, 1)?;
    if e == 0.0 {
        return reduce(nll, &denom, o.reduction);
    }
    let weighted = match o.weight {
        Some(w) => {
            let mut ws = vec![pr.classes];
            ws.extend(std::iter::repeat_n(1, input.rank() - cdim as usize - 1));
            logp.mul(&w.reshape(&ws)?)?
        }
        None => logp,
    };
    let smooth = weighted.sum(cdim, false)?.neg()?;
    let counted = aux.narrow(0, 1, 1)?.reshape(&pr.target_shape)?;
    let zero = Tensor::zeros(input.device(), &[], input.dtype)?;
    let smooth = counted.where_cond(&smooth, &zero)?;
    let (nll, smooth) = (
        reduce(nll, &denom, o.reduction)?,
        reduce(smooth, &denom, o.reduction)?,
    );
    nll.mul_scalar(1.0 - e)?
        .add(&smooth.mul_scalar(e / pr.classes as f64)?)
}

/// The nll family's entry in the kernel-family registry (`ops::families()`).
pub(crate) const FAMILY: crate::runtime::pipeline::Family = crate::runtime::pipeline::Family {
    name: "nll",
    shaders: &["nll.wgsl"],
    params: || vec![params_layout()],
    variants: nll_variants,
};

/// Every (kernel, dtypes, override constants) combination of this family's kernels, for
/// tests/shaders.rs to translate and validate each.
#[doc(hidden)]
pub fn nll_variants() -> Vec<ShaderVariant> {
    let mut v = Vec::new();
    for dt in [DType::F32, DType::F16] {
        for w in [0.0, 1.0] {
            for k in [&NLL, &NLL_BACKWARD] {
                v.push(ShaderVariant::new(
                    k,
                    &[dt],
                    &[("WG", WG as f64), ("HAS_WEIGHT", w)],
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
        NLL,
        &[DType::F32],
        NllParams {
            numel,
            classes,
            inner,
            ignore
        }
    )
}
