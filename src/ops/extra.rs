//! Conveniences PyTorch users reach for: `ones`, `arange`, `linspace`, the `*_like`
//! constructors, reductions over several dims or all of them, and `std::ops` operators on
//! `&Tensor` whose output is `Result<Tensor>` (never a panic), as candle's are.

use std::ops::{Add, Div, Mul, Neg, Sub};

use crate::layout::Layout;
use crate::ops::binary::Donated;
use crate::ops::donate::{binary_owned, binary_pair};
use crate::ops::{BinaryOp, ScalarOp, UnaryOp};
use crate::{DType, Device, Element, Error, Result, Tensor};

/// Uploads host values as `dtype`.
fn upload(dev: &Device, v: &[f64], shape: &[usize], dtype: DType) -> Result<Tensor> {
    match dtype {
        DType::F32 => {
            let h: Vec<f32> = v.iter().map(|&x| f32::from_f64(x)).collect();
            Tensor::from_slice(dev, &h, shape)
        }
        DType::F16 => {
            let h: Vec<half::f16> = v.iter().map(|&x| half::f16::from_f64(x)).collect();
            Tensor::from_slice(dev, &h, shape)
        }
        DType::I32 => {
            let h: Vec<i32> = v.iter().map(|&x| i32::from_f64(x)).collect();
            Tensor::from_slice(dev, &h, shape)
        }
    }
}

impl Tensor {
    /// A tensor of ones (PyTorch's `torch.ones`).
    pub fn ones(device: &Device, shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::full(device, shape, 1.0, dtype)
    }

    /// `start, start + step, ...` up to but excluding `end` (PyTorch's `torch.arange`).
    pub fn arange(
        device: &Device,
        start: f64,
        end: f64,
        step: f64,
        dtype: DType,
    ) -> Result<Tensor> {
        let op = "arange";
        if !(start.is_finite() && end.is_finite() && step.is_finite()) || step == 0.0 {
            return Err(Error::arg(
                op,
                format!("start {start}, end {end} and step {step} must be finite, step non-zero"),
            ));
        }
        if (end - start) * step < 0.0 {
            return Err(Error::arg(
                op,
                format!("upper bound and larger bound inconsistent with step sign: start {start}, end {end}, step {step}"),
            ));
        }
        let n = ((end - start) / step).ceil().max(0.0);
        if n > u32::MAX as f64 {
            return Err(Error::size(op, format!("{n} elements exceed u32 indexing")));
        }
        let v: Vec<f64> = (0..n as usize).map(|i| start + i as f64 * step).collect();
        upload(device, &v, &[v.len()], dtype)
    }

    /// `steps` evenly spaced values from `start` to `end` inclusive (PyTorch's
    /// `torch.linspace`).
    pub fn linspace(
        device: &Device,
        start: f64,
        end: f64,
        steps: usize,
        dtype: DType,
    ) -> Result<Tensor> {
        let op = "linspace";
        if !(start.is_finite() && end.is_finite()) {
            return Err(Error::arg(
                op,
                format!("start {start} and end {end} must be finite"),
            ));
        }
        let v: Vec<f64> = match steps {
            0 => Vec::new(),
            1 => vec![start],
            n => {
                let step = (end - start) / (n - 1) as f64;
                // PyTorch fills the second half from the end, so `end` is exact.
                (0..n)
                    .map(|i| {
                        if i < n / 2 {
                            start + step * i as f64
                        } else {
                            end - step * (n - 1 - i) as f64
                        }
                    })
                    .collect()
            }
        };
        upload(device, &v, &[steps], dtype)
    }

    /// Zeros with this tensor's shape, dtype and device.
    pub fn zeros_like(&self) -> Result<Tensor> {
        Tensor::zeros(self.device(), self.shape(), self.dtype)
    }

    /// Ones with this tensor's shape, dtype and device.
    pub fn ones_like(&self) -> Result<Tensor> {
        Tensor::ones(self.device(), self.shape(), self.dtype)
    }

    /// `value` with this tensor's shape, dtype and device.
    pub fn full_like(&self, value: f64) -> Result<Tensor> {
        Tensor::full(self.device(), self.shape(), value, self.dtype)
    }

    /// `U[0, 1)` samples with this tensor's shape, dtype and device.
    pub fn rand_like(&self) -> Result<Tensor> {
        crate::ops::rand(self.device(), self.shape(), self.dtype)
    }

    /// Standard normal samples with this tensor's shape, dtype and device.
    pub fn randn_like(&self) -> Result<Tensor> {
        crate::ops::randn(self.device(), self.shape(), self.dtype)
    }

    /// Distinct dims, normalized and sorted from the last to the first.
    fn reduction_dims(&self, op: &'static str, dims: &[isize]) -> Result<Vec<usize>> {
        let mut ds = dims
            .iter()
            .map(|&d| Layout::normalize_dim(op, d, self.rank()))
            .collect::<Result<Vec<_>>>()?;
        ds.sort_unstable_by(|a, b| b.cmp(a));
        let n = ds.len();
        ds.dedup();
        if ds.len() != n {
            return Err(Error::arg(op, format!("dims {dims:?} repeat a dim")));
        }
        Ok(ds)
    }

    /// The sum over several dims (PyTorch's `sum(dim=(..), keepdim)`), reduced one dim at a
    /// time from the last.
    pub fn sum_dims(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        let ds = self.reduction_dims("sum", dims)?;
        let mut t = self.clone();
        for d in ds {
            t = t.sum(d as isize, keepdim)?;
        }
        Ok(t)
    }

    /// The mean over several dims (PyTorch's `mean(dim=(..), keepdim)`): the sum divided once
    /// by the number of elements reduced.
    pub fn mean_dims(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        let ds = self.reduction_dims("mean", dims)?;
        let count: usize = ds.iter().map(|&d| self.shape()[d]).product();
        let s = self.sum_dims(dims, keepdim)?;
        if count == 0 {
            return s.mul_scalar(f64::NAN);
        }
        s.div_scalar(count as f64)
    }

    /// The sum of every element, as a `[]` tensor (PyTorch's `sum()`).
    pub fn sum_all(&self) -> Result<Tensor> {
        self.reshape(&[self.numel()])?.sum(0, false)
    }

    /// The mean of every element, as a `[]` tensor (NaN when empty, as PyTorch's `mean()`).
    pub fn mean_all(&self) -> Result<Tensor> {
        self.reshape(&[self.numel()])?.mean(0, false)
    }
}

/// The operators on tensors, by reference (allocating) and owned: an owned operand is
/// consumed and, when nothing else holds its buffer, the result is written into it (see
/// [`Tensor::into_binary`]; `a + &b` or `x * 2.0` in a loop then reuses one buffer).
macro_rules! binary_operator {
    ($trait:ident, $method:ident, $op:ident, $bop:ident, $scalar:ident, $sop:ident) => {
        impl $trait<&Tensor> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                self.$op(rhs)
            }
        }
        impl $trait<&Tensor> for Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                self.into_binary(rhs, BinaryOp::$bop)
            }
        }
        impl $trait<Tensor> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: Tensor) -> Result<Tensor> {
                binary_owned(rhs, self, Donated::B, BinaryOp::$bop)
            }
        }
        impl $trait<Tensor> for Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: Tensor) -> Result<Tensor> {
                binary_pair(self, rhs, BinaryOp::$bop)
            }
        }
        impl $trait<f64> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: f64) -> Result<Tensor> {
                self.$scalar(rhs)
            }
        }
        impl $trait<f64> for Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: f64) -> Result<Tensor> {
                self.into_scalar_op(ScalarOp::$sop, rhs)
            }
        }
    };
}

binary_operator!(Add, add, add, Add, add_scalar, Add);
binary_operator!(Sub, sub, sub, Sub, sub_scalar, Sub);
binary_operator!(Mul, mul, mul, Mul, mul_scalar, Mul);
binary_operator!(Div, div, div, Div, div_scalar, Div);

impl Neg for &Tensor {
    type Output = Result<Tensor>;
    fn neg(self) -> Result<Tensor> {
        Tensor::neg(self)
    }
}

impl Neg for Tensor {
    type Output = Result<Tensor>;
    fn neg(self) -> Result<Tensor> {
        self.into_unary(UnaryOp::Neg)
    }
}
