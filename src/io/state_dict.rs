//! Loading a state dict into existing parameter tensors in place, as PyTorch's
//! `load_state_dict`: the keys matched (strict or not), sizes and overlaps checked, every
//! mismatch named in one error, then the copies.

use std::collections::HashMap;

use crate::ops::copy;
use crate::{DType, Error, Result, Tensor};

/// What [`load_state_dict`] did not match (PyTorch's `missing_keys` / `unexpected_keys`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Target names the source lacks.
    pub missing: Vec<String>,
    /// Source names no target has.
    pub unexpected: Vec<String>,
}

/// PyTorch's `load_state_dict` error for an entry of another shape than the model's, word for
/// word (shapes as `torch.Size([2, 3])`).
fn size_mismatch(name: &str, source: &[usize], target: &[usize]) -> String {
    format!(
        "size mismatch for {name}: copying a param with shape torch.Size({source:?}) from \
         checkpoint, the shape in current model is torch.Size({target:?})."
    )
}

/// PyTorch's words for a parameter whose `copy_` raised `words` (its "While copying the
/// parameter named ..." line).
fn copy_exception(name: &str, target: &Tensor, source: &Tensor, words: &str) -> String {
    format!(
        "While copying the parameter named \"{name}\", whose dimensions in the model are \
         torch.Size({:?}) and whose dimensions in the checkpoint are torch.Size({:?}), an \
         exception occurred : ('{words}',).",
        target.shape(),
        source.shape()
    )
}

/// PyTorch's `load_state_dict` error: under `Error(s) in loading state_dict for Linear:`
/// (`module`: the loading module's type name; without one, the header ends at `state_dict:`),
/// with `strict`, `Missing key(s) in state_dict: "a", "b". ` and `Unexpected key(s) in
/// state_dict: "c". ` lines, then every size mismatch, each on its own line, as PyTorch
/// collects them.
fn load_error_message(
    report: &LoadReport,
    strict: bool,
    module: Option<&str>,
    mismatches: &[String],
) -> String {
    let quoted = |keys: &[String]| {
        keys.iter()
            .map(|k| format!("\"{k}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut msg = match module {
        Some(name) => format!("Error(s) in loading state_dict for {name}:"),
        None => "Error(s) in loading state_dict:".to_string(),
    };
    if strict && !report.missing.is_empty() {
        msg += &format!(
            "\n\tMissing key(s) in state_dict: {}. ",
            quoted(&report.missing)
        );
    }
    if strict && !report.unexpected.is_empty() {
        msg += &format!(
            "\n\tUnexpected key(s) in state_dict: {}. ",
            quoted(&report.unexpected)
        );
    }
    for m in mismatches {
        msg += "\n\t";
        msg += m;
    }
    msg
}

/// Copies `source` tensors into the `targets` (a model's parameters and buffers by their
/// state-dict names) in place, converting dtypes (and copying a source on another device over
/// through the host); shapes must match (a 0-d target also takes a one-element 1-D source, as
/// PyTorch's). `strict` (PyTorch's
/// default) makes any missing or unexpected key an error naming them; otherwise they are
/// reported. Every key that names no target is unexpected, as in current PyTorch (keys under
/// a tensor's name such as `fc.weight.foo` too). Every size mismatch is listed in one
/// error, as PyTorch's. Nothing is copied when an error is returned.
pub fn load_state_dict(
    targets: &[(&str, &Tensor)],
    source: &HashMap<String, Tensor>,
    strict: bool,
) -> Result<LoadReport> {
    let mut checked = check_load(targets, &[], source, strict, None)?;
    futures::FutureExt::now_or_never(checked.bring_over()).unwrap_or_else(|| {
        Err(Error::arg(
            "load_state_dict",
            "a source tensor on another device needs a readback, which did not finish in one \
             poll (in the browser, load it on the model's device)",
        ))
    })?;
    checked.apply()?;
    Ok(checked.report)
}

/// A checked load: the report and what to copy where.
pub(crate) struct CheckedLoad<'a> {
    pub(crate) report: LoadReport,
    pairs: Vec<(&'a Tensor, Tensor)>,
}

/// The checks of [`load_state_dict`], nothing written: keys (`counters` name entries that are
/// read, not copied, such as `num_batches_tracked`: neither missing when absent nor
/// unexpected; they take a `[]` or `[1]` entry) and shapes (a source on another device is
/// brought over later, [`CheckedLoad::bring_over`]), every mismatch
/// collected into one error under `module`'s name.
pub(crate) fn check_load<'a>(
    targets: &[(&str, &'a Tensor)],
    counters: &[String],
    source: &HashMap<String, Tensor>,
    strict: bool,
    module: Option<&str>,
) -> Result<CheckedLoad<'a>> {
    let op = "load_state_dict";
    let mut report = LoadReport::default();
    let mut pairs = Vec::new();
    let mut mismatches = Vec::new();
    for (name, t) in targets {
        match source.get(*name) {
            None => report.missing.push(name.to_string()),
            // PyTorch's backward-compatibility rule: a one-element 1-D source loads into a
            // 0-d parameter (`input_param = input_param[0]` when `input_param.shape[0] ==
            // 1`); any other 1-D source is a size mismatch.
            Some(s) if t.rank() == 0 && s.shape() == [1] => pairs.push((*t, s.reshape(&[])?)),
            Some(s) if s.shape() != t.shape() => {
                mismatches.push(size_mismatch(name, s.shape(), t.shape()))
            }
            // copy_from refuses a destination that repeats elements (a broadcast view), and a
            // source that shares some of the parameter's elements (another name viewing the
            // same storage): found here, so that nothing is copied, in PyTorch's words for an
            // exception there.
            Some(s) if t.layout().repeats_elements() => {
                mismatches.push(copy_exception(name, t, s, copy::INTERNAL_OVERLAP))
            }
            Some(s) if copy::partial_overlap(t, s).is_some() => {
                mismatches.push(copy_exception(name, t, s, copy::PARTIAL_OVERLAP))
            }
            Some(s) => pairs.push((*t, s.clone())),
        }
    }
    for name in counters {
        if let Some(s) = source.get(name) {
            if s.rank() != 0 && s.shape() != [1] {
                mismatches.push(size_mismatch(name, s.shape(), &[]));
            }
        }
    }
    let known: std::collections::HashSet<&str> = targets
        .iter()
        .map(|(n, _)| *n)
        .chain(counters.iter().map(String::as_str))
        .collect();
    // Missing keys in the targets' order, as PyTorch lists them; unexpected ones sorted (a
    // HashMap has no order to keep). Every key that names no target is unexpected: current
    // PyTorch's _load_from_state_dict reports `fc.weight.foo` under `fc` (`weight` is no
    // child module) and `fc` under the root (no tensor of that name).
    report.unexpected = source
        .keys()
        .filter(|k| !known.contains(k.as_str()))
        .cloned()
        .collect();
    report.unexpected.sort();
    let keys_bad = strict && (!report.missing.is_empty() || !report.unexpected.is_empty());
    if keys_bad || !mismatches.is_empty() {
        let msg = load_error_message(&report, strict, module, &mismatches);
        // One error as PyTorch's; its kind says which check failed first there.
        return Err(if keys_bad {
            Error::Io { op, msg }
        } else {
            Error::shape(op, msg)
        });
    }
    Ok(CheckedLoad { report, pairs })
}

impl CheckedLoad<'_> {
    /// Brings the sources that live on another device over through the host (PyTorch's
    /// `param.copy_(input_param)` copies across devices: a checkpoint loaded on one device
    /// fills a model on another), in the source's dtype, an f16 one widened to f32 on the host
    /// (exactly, as `load_safetensors` does) for a device without f16; [`Self::apply`] converts
    /// to the targets' dtypes.
    pub(crate) async fn bring_over(&mut self) -> Result<()> {
        for (t, s) in self.pairs.iter_mut() {
            let dev = t.device();
            if s.device().same(dev) {
                continue;
            }
            let shape = s.shape();
            *s = match s.dtype() {
                DType::F32 => Tensor::from_slice(dev, &s.to_vec_async::<f32>().await?, shape)?,
                DType::F16 => {
                    let v = s.to_vec_async::<half::f16>().await?;
                    if dev.supports_f16() {
                        Tensor::from_slice(dev, &v, shape)?
                    } else {
                        let w: Vec<f32> = v.iter().map(|h| h.to_f32()).collect();
                        Tensor::from_slice(dev, &w, shape)?
                    }
                }
                DType::I32 => Tensor::from_slice(dev, &s.to_vec_async::<i32>().await?, shape)?,
            };
        }
        Ok(())
    }

    /// Writes the tensors (after [`Self::bring_over`]), converting dtypes first so that one
    /// failing (a dtype the device lacks) copies nothing.
    pub(crate) fn apply(&self) -> Result<()> {
        let converted = self
            .pairs
            .iter()
            .map(|(t, s)| s.to_dtype(t.dtype()))
            .collect::<Result<Vec<_>>>()?;
        for ((t, _), s) in self.pairs.iter().zip(&converted) {
            // Loading parameters is not part of any graph (PyTorch's load_state_dict runs
            // under no_grad), so tracked parameters load too.
            crate::autograd::no_grad(|| t.copy_from(s))?;
        }
        Ok(())
    }
}
