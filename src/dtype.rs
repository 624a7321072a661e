//! Element types. Storage is f32 or f16; kernels always compute in f32 registers.

use half::f16;

/// The element type of a tensor's storage (PyTorch's `torch.float32` / `torch.float16`).
/// Kernels load either into f32 registers and compute in f32, rounding only when they store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// 32-bit IEEE float, host type `f32`. Available on every adapter.
    F32,
    /// 16-bit IEEE half float, host type [`f16`](crate::f16). Needs the adapter's SHADER_F16
    /// feature ([`Device::supports_f16`](crate::Device::supports_f16)); ops on a device
    /// without it return [`Error::MissingFeature`](crate::Error::MissingFeature).
    F16,
    /// 32-bit signed integer, host type `i32`: class labels, token ids, gather/scatter indices
    /// and the results of [`argmax`](crate::Tensor::argmax). Views, copies, casts
    /// ([`to_dtype`](crate::Tensor::to_dtype), truncating toward zero from floats),
    /// comparisons, [`where_cond`](crate::Tensor::where_cond) and the index ops take it; float
    /// math (arithmetic, reductions, GEMM, conv, ...) returns an error asking for a cast.
    /// PyTorch's int64 indices load as i32 (see [`io`](crate::io)).
    I32,
}

impl DType {
    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 => 2,
            DType::I32 => 4,
        }
    }

    /// PyTorch's name (`torch.float32`), for errors in its words.
    pub(crate) const fn torch_name(self) -> &'static str {
        match self {
            DType::F32 => "torch.float32",
            DType::F16 => "torch.float16",
            DType::I32 => "torch.int32",
        }
    }

    /// PyTorch's `toString(ScalarType)` (`Float`, `Half`, `Int`), as its dtype messages print it.
    pub(crate) const fn scalar_name(self) -> &'static str {
        match self {
            DType::F32 => "Float",
            DType::F16 => "Half",
            DType::I32 => "Int",
        }
    }

    /// ATen's C++ name (`float`, `c10::Half`), as its dtype messages print it.
    pub(crate) const fn c10_name(self) -> &'static str {
        match self {
            DType::F32 => "float",
            DType::F16 => "c10::Half",
            DType::I32 => "int",
        }
    }

    /// WGSL scalar type name.
    pub(crate) const fn wgsl(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::I32 => "i32",
        }
    }

    /// True for the floating-point dtypes (PyTorch's `dtype.is_floating_point`).
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16)
    }
}

/// A host element type that maps to a [`DType`]: `f32`, [`f16`](crate::f16) and `i32`. It types the
/// uploads and readbacks ([`Tensor::from_slice`](crate::Tensor::from_slice),
/// [`Tensor::to_vec`](crate::Tensor::to_vec)), whose bytes are copied as they are. Sealed:
/// only these three map to a dtype of their own size (another type's bytes would be read as
/// the dtype's).
pub trait Element:
    bytemuck::Pod + Copy + Send + Sync + std::fmt::Debug + 'static + sealed::Sealed
{
    /// The tensor dtype whose storage holds values of this type.
    const DTYPE: DType;
    /// The value widened to f64 (exact for every element type).
    fn to_f64(self) -> f64;
    /// `v` as this type: rounded to the nearest float, or for `i32` truncated toward zero
    /// (Rust's `as`: past i32's range it saturates, and NaN gives 0; PyTorch leaves those
    /// undefined, x86 gives i32::MIN).
    fn from_f64(v: f64) -> Self;
}

mod sealed {
    /// Implemented by [`Element`](super::Element)'s three types alone.
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for i32 {}
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}

/// `v` in f16 as PyTorch converts a double (c10's `Half(float(v))`: rounded to f32 first, then
/// to f16), on every platform; `half`'s own `from_f64` rounds once on some targets and twice on
/// others (through F16C on x86).
pub(crate) fn f16_of(v: f64) -> f16 {
    f16::from_f32(v as f32)
}

impl Element for f16 {
    const DTYPE: DType = DType::F16;
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(v: f64) -> Self {
        f16_of(v)
    }
}

impl Element for i32 {
    const DTYPE: DType = DType::I32;
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as i32
    }
}

/// PyTorch's `result_type` of two tensors: a 0-d tensor against one with dims gives the
/// latter's dtype when both are of one category (f16 `x == torch.tensor(0.1)` compares in
/// f16), else [`promote`] (a float of either kind beats i32).
pub(crate) fn result_type(a: &crate::Tensor, b: &crate::Tensor) -> DType {
    let same_kind = a.dtype.is_float() == b.dtype.is_float();
    match (a.rank() == 0, b.rank() == 0) {
        (true, false) if same_kind => b.dtype,
        (false, true) if same_kind => a.dtype,
        _ => promote(a.dtype, b.dtype),
    }
}

/// PyTorch's type promotion among the stored dtypes: any float beats i32, f32 beats f16.
pub(crate) fn promote(a: DType, b: DType) -> DType {
    match (a, b) {
        (DType::F32, _) | (_, DType::F32) => DType::F32,
        (DType::F16, _) | (_, DType::F16) => DType::F16,
        _ => DType::I32,
    }
}
