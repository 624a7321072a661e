//! Constructors PyTorch users reach for: `ones`, `arange`, `linspace` and the `*_like`
//! constructors (`zeros`, `full` and `from_slice` are in src/tensor.rs, the random ones in
//! src/ops/random.rs).

use crate::error::cpp_double;
use crate::{DType, Device, Element, Error, Result, Tensor};

/// Uploads host values as `dtype`.
fn upload(dev: &Device, v: &[f64], shape: &[usize], dtype: DType) -> Result<Tensor> {
    match dtype {
        DType::F32 => {
            let h: Vec<f32> = v.iter().map(|&x| f32::from_f64(x)).collect();
            Tensor::from_slice(dev, &h, shape)
        }
        DType::F16 => {
            let h: Vec<half::f16> = v.iter().map(|&x| crate::dtype::f16_of(x)).collect();
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

    /// `start, start + step, ...` up to but excluding `end` (PyTorch's `torch.arange`; for
    /// [`DType::I32`], as PyTorch's, the count comes from the float bounds and the values
    /// from `start` and `step` truncated to integers, so a step below 1 repeats `start`).
    /// Float values past the dtype's range round to infinity, as PyTorch's cast (f16 computes
    /// `start + step * i` in f32, as its kernel, `start` and `step` converted checked); an i32
    /// range past i32 is an error, and so is an i32 `start` or `step` past int64 (PyTorch
    /// converts both to its int64 accumulate type, checked). A NaN or infinite step is an
    /// error, as current PyTorch's ("step must be finite but got inf").
    pub fn arange(
        device: &Device,
        start: f64,
        end: f64,
        step: f64,
        dtype: DType,
    ) -> Result<Tensor> {
        let op = "arange";
        // PyTorch's checks (its arange_check_bounds) and messages, with the values: the
        // step first (finite, then nonzero), then the bounds. A NaN step's words carry the
        // older PyTorch's sentence too.
        if !step.is_finite() {
            let older = if step.is_nan() {
                " (step must be nonzero)"
            } else {
                ""
            };
            return Err(Error::arg(
                op,
                format!("step must be finite but got {}{older}", cpp_double(step)),
            ));
        }
        if step == 0.0 {
            return Err(Error::arg(
                op,
                format!("step must be nonzero (step {})", cpp_double(step)),
            ));
        }
        if !(start.is_finite() && end.is_finite()) {
            return Err(Error::arg(
                op,
                format!(
                    "unsupported range: {} -> {} (step {})",
                    cpp_double(start),
                    cpp_double(end),
                    cpp_double(step)
                ),
            ));
        }
        // Signs compared, not multiplied (a product of tiny values underflows to -0).
        if (step > 0.0 && end < start) || (step < 0.0 && end > start) {
            return Err(Error::arg(
                op,
                format!(
                    "upper bound and lower bound inconsistent with step sign: start {}, end {}, \
                     step {}",
                    cpp_double(start),
                    cpp_double(end),
                    cpp_double(step)
                ),
            ));
        }
        let n = ((end - start) / step).ceil().max(0.0);
        if n > u32::MAX as f64 {
            return Err(Error::size(
                op,
                format!("invalid size, possible overflow: {n} elements exceed u32 indexing"),
            ));
        }
        // Refused before the host vector is built: its size is the caller's.
        crate::tensor::check_new_shape(device, op, &[n as usize], dtype)?;
        // c10's overflows<int64_t, double>: the lower end exact, the upper one 2^63.
        let past_i64 = |v: f64| !(-9223372036854775808.0..9223372036854775808.0).contains(&v);
        if dtype == DType::I32 && (past_i64(start) || past_i64(step)) {
            return Err(Error::arg(
                op,
                format!(
                    "value cannot be converted to type int64_t without overflow (start {}, \
                     step {})",
                    cpp_double(start),
                    cpp_double(step)
                ),
            ));
        }
        if dtype == DType::F16 {
            // Its kernel converts start and step to the accumulate type (f32 for f16),
            // checked, and computes `start + step * i` there.
            crate::tensor::check_fill(op, start, DType::F32)?;
            crate::tensor::check_fill(op, step, DType::F32)?;
            let (s, st) = (start as f32, step as f32);
            let v: Vec<f64> = (0..n as usize)
                .map(|i| f64::from(s + st * i as f32))
                .collect();
            return upload(device, &v, &[v.len()], dtype);
        }
        // PyTorch's integer arange: the count from the float bounds, the values from the
        // start and step cast to integers first (arange(-3, 3, 1.5) is -3, -2, -1, 0; a step
        // that casts to 0 repeats the start, as its kernel's `start + step * i`).
        let (s0, st) = if dtype == DType::I32 {
            (start.trunc(), step.trunc())
        } else {
            (start, step)
        };
        // The values are monotone: the ends bound them. An i32 range past i32 is an error,
        // as `full` and `linspace` refuse such values (PyTorch's int32 narrowing wraps them);
        // float values convert as PyTorch's cast does, to infinity past the range.
        if n > 0.0 && dtype == DType::I32 {
            crate::tensor::check_fill(op, s0, dtype)?;
            crate::tensor::check_fill(op, s0 + (n - 1.0) * st, dtype)?;
        }
        let v: Vec<f64> = (0..n as usize).map(|i| s0 + i as f64 * st).collect();
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
        // Non-finite ends compute, as PyTorch's (NaN everywhere, or a fill of `start` for one
        // step); an integer dtype refuses them in the conversion below.
        crate::tensor::check_new_shape(device, op, &[steps], dtype)?;
        // As PyTorch converts the ends to the dtype with an overflow check (an i32 range past
        // 2^31 or an f16 one past 65504 is an error, not clamped or inf values); one step
        // is a fill of `start` alone there.
        if steps > 0 {
            crate::tensor::check_fill(op, start, dtype)?;
        }
        if steps > 1 {
            crate::tensor::check_fill(op, end, dtype)?;
        }
        // PyTorch's integer linspace casts the ends to integers before it steps.
        let (start, end) = if dtype == DType::I32 {
            (start.trunc(), end.trunc())
        } else {
            (start, end)
        };
        let v: Vec<f64> = match steps {
            0 => Vec::new(),
            1 => vec![start],
            n => linspace_values(start, end, n, dtype),
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

    /// `value` with this tensor's shape, dtype and device (errors as [`Tensor::full`]).
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
}

/// linspace_kernel's values for `n >= 2` steps: the ends and the step in the dtype's compute
/// type (f32 for f32 and f16, whose ends are rounded to half first; double for integers),
/// each value `start + step * i` below the halfway point and `end - step * (n - 1 - i)` from
/// it (so `end` is exact), rounded to the dtype at the end (torch 2.15's opmath: half
/// arithmetic throughout overflowed spans past 65504 and stalled past 65505 steps).
fn linspace_values(start: f64, end: f64, n: usize, dtype: DType) -> Vec<f64> {
    let halfway = n / 2;
    match dtype {
        DType::F32 | DType::F16 => {
            let (s, e) = match dtype {
                DType::F16 => (
                    crate::dtype::f16_of(start).to_f32(),
                    crate::dtype::f16_of(end).to_f32(),
                ),
                _ => (start as f32, end as f32),
            };
            let step = (e - s) / (n - 1) as f32;
            (0..n)
                .map(|i| match i < halfway {
                    true => s + step * i as f32,
                    false => e - step * (n - 1 - i) as f32,
                })
                .map(|v| match dtype {
                    DType::F16 => half::f16::from_f32(v).to_f32(),
                    _ => v,
                })
                .map(f64::from)
                .collect()
        }
        DType::I32 => {
            let step = (end - start) / (n - 1) as f64;
            (0..n)
                .map(|i| match i < halfway {
                    true => start + step * i as f64,
                    false => end - step * (n - 1 - i) as f64,
                })
                .collect()
        }
    }
}
