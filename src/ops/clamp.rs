//! The bounds of the elementwise maps: `max_scalar` / `min_scalar` (PyTorch's `clamp_min` /
//! `clamp_max`, their bound checked against the dtype) and `clamp`, on the map kernels'
//! `Max` / `Min` scalar ops (src/ops/map.rs).

use crate::ops::ScalarOp;
use crate::tensor::check_fill;
use crate::{Error, Result, Tensor};

impl Tensor {
    /// `max(x, s)` elementwise (NaN propagates; PyTorch's `torch.clamp_min(x, s)`, which
    /// refuses an `s` past a float dtype's range: "value cannot be converted to type c10::Half
    /// without overflow").
    pub fn max_scalar(&self, s: f64) -> Result<Tensor> {
        self.scalar_op(ScalarOp::Max, s)
    }
    /// `min(x, s)` elementwise (NaN propagates; `torch.clamp_max(x, s)`, its bound checked as
    /// [`max_scalar`](Tensor::max_scalar)'s).
    pub fn min_scalar(&self, s: f64) -> Result<Tensor> {
        self.scalar_op(ScalarOp::Min, s)
    }
    /// [`max_scalar`](Tensor::max_scalar) without the range check: for callers whose bound
    /// PyTorch casts unchecked (a loss's beta, an f16 gradient's clip value) or checked
    /// already.
    pub(crate) fn max_scalar_raw(&self, s: f64) -> Result<Tensor> {
        self.scalar_op_as(ScalarOp::Max, s, true)
    }
    /// [`min_scalar`](Tensor::min_scalar) without the range check.
    pub(crate) fn min_scalar_raw(&self, s: f64) -> Result<Tensor> {
        self.scalar_op_as(ScalarOp::Min, s, true)
    }
    /// PyTorch's `clamp(min, max)`: bounds each element (either bound may be absent; NaN
    /// stays NaN). A NaN bound makes every element NaN, with a zero gradient, as PyTorch's
    /// `clamp` (its reference `torch._refs.clamp` and its CPU kernels propagate a NaN bound). With
    /// `min > max` every element becomes `max`, as in PyTorch. A finite bound the dtype cannot
    /// hold (1e39 for f32) is PyTorch's overflow error, except beside a NaN bound (clamp_out
    /// fills NaN before converting either); infinite bounds are fine.
    pub fn clamp(&self, min: Option<f64>, max: Option<f64>) -> Result<Tensor> {
        // The bounds before the dtype, as PyTorch (whose clamp takes integers too).
        if min.is_none() && max.is_none() {
            return Err(Error::arg(
                "clamp",
                "torch.clamp: At least one of 'min' or 'max' must not be None",
            ));
        }
        self.require_float("clamp")?;
        let nan_pair = matches!((min, max), (Some(a), Some(b)) if a.is_nan() || b.is_nan());
        if self.dtype.is_float() && !nan_pair {
            for b in min.iter().chain(&max) {
                check_fill("clamp", *b, self.dtype)?;
            }
        }
        if let (Some(b), None) | (None, Some(b)) = (min, max) {
            if b.is_nan() {
                // Every element NaN; the backward (ClampBackward1, which saves x) passes
                // nothing: max/min's mask against a NaN bound is all false.
                let out = self.detach().mul_scalar(f64::NAN)?;
                let op = if min.is_some() {
                    ScalarOp::Max
                } else {
                    ScalarOp::Min
                };
                return Ok(super::map_grad::record_scalar(
                    self,
                    op,
                    f32::NAN,
                    false,
                    out,
                ));
            }
        }
        let lo = match min {
            Some(m) => self.max_scalar_raw(m)?,
            None => self.clone(),
        };
        match max {
            Some(m) => lo.min_scalar_raw(m),
            None => Ok(lo),
        }
    }
}
