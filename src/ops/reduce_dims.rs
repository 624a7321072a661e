//! Reductions over several dims or all of them (`sum_dims`, `mean_dims`, `sum_all`,
//! `mean_all`), composed from the one-dim reductions of src/ops/reduce.rs.

use crate::layout::Layout;
use crate::ops::ScalarOp;
use crate::{DType, Error, Result, Tensor};

impl Tensor {
    /// Distinct dims, normalized and sorted from the last to the first; no dims means every
    /// dim (PyTorch's `dim=[]`). A rank-0 tensor takes dim 0 or -1 (its one element), given
    /// back as no dims: there is nothing to reduce. Every dim's range is checked before any
    /// repeat, as PyTorch (its reductions size the result, which wraps each dim, before
    /// `dim_list_to_bitset` looks for repeats): `[0, 0, 5]` of a matrix names dim 5.
    fn reduction_dims(&self, op: &'static str, dims: &[isize]) -> Result<Vec<usize>> {
        if dims.is_empty() {
            return Ok((0..self.rank()).rev().collect());
        }
        let normalized = dims
            .iter()
            .map(|&d| Layout::normalize_dim(op, d, self.rank().max(1)))
            .collect::<Result<Vec<usize>>>()?;
        let mut ds: Vec<usize> = Vec::with_capacity(dims.len());
        for d in normalized {
            if ds.contains(&d) {
                return Err(Error::arg(
                    op,
                    format!("dim {d} appears multiple times in the list of dims {dims:?}"),
                ));
            }
            ds.push(d);
        }
        if self.rank() == 0 {
            return Ok(Vec::new());
        }
        ds.sort_unstable_by(|a, b| b.cmp(a));
        Ok(ds)
    }

    /// Adjacent `ds` (sorted from the last) that the layout can view as one dim: that view
    /// and the merged dim's index. One reduction over them then sums every element in one
    /// pass, accumulating in f32 and rounding once (a global average pool's H and W).
    fn merge_dims(&self, ds: &[usize]) -> Result<Option<(Tensor, usize)>> {
        let (Some(&hi), Some(&lo)) = (ds.first(), ds.last()) else {
            return Ok(None);
        };
        if ds.len() < 2 || hi - lo + 1 != ds.len() {
            return Ok(None);
        }
        let mut shape = self.shape()[..lo].to_vec();
        shape.push(self.shape()[lo..=hi].iter().product());
        shape.extend_from_slice(&self.shape()[hi + 1..]);
        if self.layout.reshape(&shape).is_none() {
            return Ok(None);
        }
        Ok(Some((self.reshape(&shape)?, lo)))
    }

    /// This shape with the dims `ds` removed, or kept as 1s.
    fn reduced_shape(&self, ds: &[usize], keepdim: bool) -> Vec<usize> {
        let mut out = Vec::with_capacity(self.rank());
        for (i, &n) in self.shape().iter().enumerate() {
            if !ds.contains(&i) {
                out.push(n);
            } else if keepdim {
                out.push(1);
            }
        }
        out
    }

    /// The sum over several dims (PyTorch's `sum(dim=(..), keepdim)`), reduced one dim at a
    /// time from the last. An empty `dims` sums over every dim, as PyTorch's `dim=[]`. f16
    /// over several dims sums in f32 and rounds once, as PyTorch's (a partial sum stored as
    /// f16 after each dim would round, or overflow to inf, on the way).
    pub fn sum_dims(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        let ds = self.reduction_dims("sum", dims)?;
        if self.rank() == 0 {
            // A copy, as the reductions of more elements give a new tensor.
            return self.sum(0, keepdim);
        }
        if let Some((merged, d)) = self.merge_dims(&ds)? {
            return merged
                .sum(d as isize, false)?
                .reshape(&self.reduced_shape(&ds, keepdim));
        }
        if ds.len() > 1 && self.dtype() == DType::F16 {
            return self
                .to_dtype(DType::F32)?
                .sum_dims(dims, keepdim)?
                .to_dtype(DType::F16);
        }
        let mut t = self.clone();
        for d in ds {
            t = t.sum(d as isize, keepdim)?;
        }
        Ok(t)
    }

    /// The mean over several dims (PyTorch's `mean(dim=(..), keepdim)`): the sum divided once
    /// by the number of elements reduced (in f32 for f16, rounded once). An empty `dims`
    /// averages every element.
    pub fn mean_dims(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        self.require_mean_dtype()?;
        let ds = self.reduction_dims("mean", dims)?;
        if self.rank() == 0 {
            return self.mean(0, keepdim);
        }
        if let [d] = ds[..] {
            // One dim: the reduction divides in f32 before its store.
            return self.mean(d as isize, keepdim);
        }
        if let Some((merged, d)) = self.merge_dims(&ds)? {
            return merged
                .mean(d as isize, false)?
                .reshape(&self.reduced_shape(&ds, keepdim));
        }
        if self.dtype() == DType::F16 {
            return self
                .to_dtype(DType::F32)?
                .mean_dims(dims, keepdim)?
                .to_dtype(DType::F16);
        }
        let count: usize = ds.iter().map(|&d| self.shape()[d]).product();
        let s = self.sum_dims(dims, keepdim)?;
        // MeanBackward saves no tensor: the division's node serves another backward too.
        if count == 0 {
            return s.scalar_op_as(ScalarOp::Mul, f64::NAN, false);
        }
        s.scalar_op_as(ScalarOp::Div, count as f64, false)
    }

    /// The sum of every element, as a `[]` tensor (PyTorch's `sum()`). An f32 view that is
    /// not packed (a broadcast, a transpose) is reduced a dim at a time rather than copied
    /// whole first ([`Tensor::sum_dims`] over every dim); f16 such views are copied packed
    /// (the dim-at-a-time sum of f16 widens a copy to f32, twice the bytes) and summed once.
    pub fn sum_all(&self) -> Result<Tensor> {
        if self.f16_view_to_pack() {
            return self.reshape(&[self.numel()])?.sum(0, false);
        }
        self.sum_dims(&[], false)
    }

    /// The mean of every element, as a `[]` tensor (NaN when empty, as PyTorch's `mean()`);
    /// views as [`Tensor::sum_all`].
    pub fn mean_all(&self) -> Result<Tensor> {
        if self.f16_view_to_pack() {
            return self.reshape(&[self.numel()])?.mean(0, false);
        }
        self.mean_dims(&[], false)
    }

    /// An f16 tensor of several dims that no reshape can view flat.
    fn f16_view_to_pack(&self) -> bool {
        self.dtype() == DType::F16
            && self.rank() > 1
            && self.layout.reshape(&[self.numel()]).is_none()
    }
}
