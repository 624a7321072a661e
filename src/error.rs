//! The crate's error type. Every variant names the op that failed and the values involved,
//! so a message reads like `add: shapes [2, 3] and [4] do not broadcast`.

use crate::DType;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in wgtensor. Library code returns these instead of panicking.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Shapes that the op cannot combine (broadcast, inner dims, element counts, ...).
    #[error("{op}: {msg}")]
    Shape {
        /// The op that failed, as named in the API (`"matmul"`, `"conv2d"`, `"to_vec"`, ...).
        op: &'static str,
        /// What was wrong, with the values involved.
        msg: String,
    },
    /// An argument that is out of range (axis, permutation, narrow range, option values).
    #[error("{op}: {msg}")]
    InvalidArgument {
        /// The op that failed, as named in the API (`"matmul"`, `"conv2d"`, `"to_vec"`, ...).
        op: &'static str,
        /// What was wrong, with the values involved.
        msg: String,
    },
    /// Two tensors (or a tensor and the requested element type) have different dtypes.
    #[error("{op}: dtype mismatch, expected {expected:?} got {got:?}")]
    DType {
        /// The op that failed, as named in the API (`"matmul"`, `"conv2d"`, `"to_vec"`, ...).
        op: &'static str,
        /// The dtype the op needed (usually the first operand's).
        expected: DType,
        /// The dtype it was given.
        got: DType,
    },
    /// Tensors created on different devices were combined.
    #[error("{op}: Expected all tensors to be on the same device, but found at least two devices (tensors live on different devices)")]
    DeviceMismatch {
        /// The op that failed, as named in the API (`"matmul"`, `"conv2d"`, `"to_vec"`, ...).
        op: &'static str,
    },
    /// A dimension is zero where the op needs data, or a size overflows u32 / usize.
    #[error("{op}: {msg}")]
    Size {
        /// The op that failed, as named in the API (`"matmul"`, `"conv2d"`, `"to_vec"`, ...).
        op: &'static str,
        /// What was wrong, with the values involved.
        msg: String,
    },
    /// The tensor does not fit in one binding or buffer of this adapter.
    #[error("{op}: {bytes} bytes exceed the adapter's {limit_name} of {limit} bytes")]
    TooLarge {
        /// The op that failed, as named in the API (`"matmul"`, `"conv2d"`, `"to_vec"`, ...).
        op: &'static str,
        /// The size asked for, in bytes.
        bytes: u64,
        /// The limit exceeded: a wgpu limit (`max_storage_buffer_binding_size`,
        /// `max_buffer_size`) or the 4 GiB - 1 that u32 indexing reaches.
        limit_name: &'static str,
        /// That limit's value on this adapter, in bytes.
        limit: u64,
    },
    /// The op needs an adapter feature this device lacks (e.g. SHADER_F16 for f16 tensors).
    #[error("{op}: the adapter lacks the {feature} feature")]
    MissingFeature {
        /// The op that failed, as named in the API (`"matmul"`, `"conv2d"`, `"to_vec"`, ...).
        op: &'static str,
        /// The wgpu feature's name, e.g. `SHADER_F16`.
        feature: &'static str,
    },
    /// No adapter matched, or the device could not be created.
    #[error("device: {0}")]
    NoAdapter(String),
    /// wgpu reported a validation error.
    #[error("{op}: wgpu validation error: {msg}")]
    Validation {
        /// The op that failed, as named in the API (`"matmul"`, `"conv2d"`, `"to_vec"`, ...).
        op: &'static str,
        /// wgpu's message.
        msg: String,
    },
    /// wgpu reported an out-of-memory error.
    #[error("{op}: out of GPU memory: {msg}")]
    OutOfMemory {
        /// The op that failed, as named in the API (`"matmul"`, `"conv2d"`, `"to_vec"`, ...).
        op: &'static str,
        /// wgpu's message, or which budget ([`DeviceOptions::memory_limit`](crate::DeviceOptions::memory_limit)) ran out.
        msg: String,
    },
    /// The device was lost (driver reset, destroyed, ...). Nothing can run on it any more.
    #[error("{op}: device lost: {msg}")]
    DeviceLost {
        /// The op that failed, as named in the API (`"matmul"`, `"conv2d"`, `"to_vec"`, ...).
        op: &'static str,
        /// The reason and message the driver gave.
        msg: String,
    },
    /// Reading or writing a file or a serialized format (safetensors) failed.
    #[error("{op}: {msg}")]
    Io {
        /// The operation that failed.
        op: &'static str,
        /// What went wrong (the path, the key, the parser's message).
        msg: String,
    },
    /// Mapping a buffer for readback failed.
    #[error("{op}: readback failed: {msg}")]
    Readback {
        /// The op that failed, as named in the API (`"matmul"`, `"conv2d"`, `"to_vec"`, ...).
        op: &'static str,
        /// Why the mapping failed.
        msg: String,
    },
    /// An error raised by code built on wgtensor (a model's own checks), made with
    /// [`Error::msg`].
    #[error("{context}: {msg}")]
    Other {
        /// Where it happened (a function, a layer, a file).
        context: String,
        /// What went wrong.
        msg: String,
    },
    /// An error inside a layer's forward, with the layer's path in its model and its type
    /// (`classifier.1 (Linear): ...`): see [`Error::in_layer`].
    #[error("{path} ({layer}): {source}")]
    Layer {
        /// The layer's state-dict path (`features.0`), empty for the top-level module.
        path: String,
        /// The layer's type (`Linear`, `Conv2d`).
        layer: &'static str,
        /// The error the layer's op returned.
        source: Box<Error>,
    },
}

impl Error {
    /// An error of the caller's own, for code built on wgtensor that returns
    /// [`Result`](crate::Result): `Err(Error::msg("my_model", "expected 3 channels"))`.
    pub fn msg(context: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Other {
            context: context.into(),
            msg: msg.into(),
        }
    }

    /// This error as raised inside the layer at `path` (its state-dict prefix) of type
    /// `layer`. Errors already carrying a layer keep the innermost one and gain the outer
    /// path as a prefix, so the message names the full path of the layer that failed.
    pub fn in_layer(self, path: &str, layer: &'static str) -> Self {
        match self {
            Error::Layer {
                path: inner,
                layer: l,
                source,
            } => Error::Layer {
                path: match (path.is_empty(), inner.is_empty()) {
                    (true, _) => inner,
                    (false, true) => path.to_string(),
                    (false, false) => format!("{path}.{inner}"),
                },
                layer: l,
                source,
            },
            other => Error::Layer {
                path: path.to_string(),
                layer,
                source: Box::new(other),
            },
        }
    }

    /// The error beneath any layer context ([`Error::Layer`]): what the op itself reported.
    pub fn root(&self) -> &Error {
        match self {
            Error::Layer { source, .. } => source.root(),
            other => other,
        }
    }

    pub(crate) fn shape(op: &'static str, msg: impl Into<String>) -> Self {
        Error::Shape {
            op,
            msg: msg.into(),
        }
    }
    pub(crate) fn arg(op: &'static str, msg: impl Into<String>) -> Self {
        Error::InvalidArgument {
            op,
            msg: msg.into(),
        }
    }
    pub(crate) fn size(op: &'static str, msg: impl Into<String>) -> Self {
        Error::Size {
            op,
            msg: msg.into(),
        }
    }
}

/// `v` as Python's `repr` prints a float (`1.0`, `-0.5`, `-1e-08`, `1e+20`), so errors read
/// as PyTorch's ("Invalid epsilon value: -1e-08").
pub(crate) fn py_float(v: f64) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.into();
    }
    let sci = format!("{v:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let e: i32 = exp.parse().unwrap_or(0);
    if (-4..16).contains(&e) {
        let s = format!("{v}");
        if s.contains('.') {
            s
        } else {
            format!("{s}.0")
        }
    } else {
        let sign = if e < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", e.unsigned_abs())
    }
}

/// `v` as C++'s `operator<<` prints a double (`%g`, 6 significant digits: `1.5`, `2`, `1e-07`,
/// `1.23457e+06`, `nan`), so errors that ATen words with a streamed double read as PyTorch's
/// ("normal expects std >= 0.0, but found std nan").
pub(crate) fn cpp_double(v: f64) -> String {
    if v.is_nan() {
        return if v.is_sign_negative() { "-nan" } else { "nan" }.into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.into();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let strip = |s: String| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    // The exponent after rounding to 6 significant digits picks the form, as %g does.
    let sci = format!("{v:.5e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let x: i32 = exp.parse().unwrap_or(0);
    if (-4..6).contains(&x) {
        let decimals = (5 - x).max(0) as usize;
        strip(format!("{v:.decimals$}"))
    } else {
        let sign = if x < 0 { '-' } else { '+' };
        format!(
            "{}e{sign}{:02}",
            strip(mantissa.to_string()),
            x.unsigned_abs()
        )
    }
}

/// PyTorch's checked conversion of a fill value ("value cannot be converted to type ... without
/// overflow"): a finite value past the largest f16 (65504) or f32, or for [`DType::I32`] NaN or
/// a value below -2^31 or at or past 2^31 (one between truncates), is an error naming `op`;
/// infinities and NaN fill float tensors.
pub(crate) fn check_fill(op: &'static str, value: f64, dtype: DType) -> Result<()> {
    let max = match dtype {
        DType::F32 => f64::from(f32::MAX),
        DType::F16 => f64::from(half::f16::MAX),
        DType::I32 => f64::from(i32::MAX),
    };
    let fits = match dtype {
        // c10's overflows<int, double>: below the lowest, or at or past 2^31 (2147483647.5
        // truncates to i32::MAX, as current PyTorch's cast).
        DType::I32 => value >= f64::from(i32::MIN) && value < max + 1.0,
        _ => !value.is_finite() || value.abs() <= max,
    };
    if !fits {
        return Err(Error::arg(
            op,
            format!(
                "value cannot be converted to type {} without overflow: {}",
                // C++'s names, as PyTorch's message has them.
                match dtype {
                    DType::F32 => "float",
                    DType::F16 => "c10::Half",
                    DType::I32 => "int",
                },
                py_float(value)
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::cpp_double;

    #[test]
    fn doubles_print_as_cpp_streams_them() {
        let cases = [
            (1.5, "1.5"),
            (2.0, "2"),
            (-1.0, "-1"),
            (0.1, "0.1"),
            (1e-7, "1e-07"),
            (1e20, "1e+20"),
            (1234567.0, "1.23457e+06"),
            (123456.0, "123456"),
            (999999.5, "1e+06"),
            (0.0001, "0.0001"),
            (0.00001234, "1.234e-05"),
            (-0.0, "-0"),
            (f64::NAN, "nan"),
            (-f64::NAN, "-nan"),
            (9.999995e-5, "0.0001"),
            (1e16, "1e+16"),
            (f64::NEG_INFINITY, "-inf"),
            (3.0e-3, "0.003"),
        ];
        for (v, want) in cases {
            assert_eq!(cpp_double(v), want, "{v}");
        }
    }
}
