//! The options of the fixed-window pools (PyTorch's `nn.MaxPool1d/2d` / `nn.AvgPool1d/2d`
//! arguments).

/// Options of [`max_pool2d`](super::max_pool2d) (PyTorch's `nn.MaxPool2d` arguments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxPool2dOptions {
    /// Window size (kH, kW).
    pub kernel_size: [usize; 2],
    /// Step between windows; `None` is the kernel size (PyTorch's default).
    pub stride: Option<[usize; 2]>,
    /// Implicit `-inf` padding on both sides of each axis (at most half the kernel size, as
    /// PyTorch checks it, also with dilation).
    pub padding: [usize; 2],
    /// Spacing between window taps.
    pub dilation: [usize; 2],
    /// Round the output size up (the last window may start in the input or left padding only).
    pub ceil_mode: bool,
}

impl MaxPool2dOptions {
    /// A `k x k` window with stride `k` (PyTorch's `MaxPool2d(k)`).
    pub fn new(k: usize) -> Self {
        MaxPool2dOptions {
            kernel_size: [k, k],
            stride: None,
            padding: [0, 0],
            dilation: [1, 1],
            ceil_mode: false,
        }
    }
}

/// Options of [`avg_pool2d`](super::avg_pool2d) (PyTorch's `nn.AvgPool2d` arguments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AvgPool2dOptions {
    /// Window size (kH, kW).
    pub kernel_size: [usize; 2],
    /// Step between windows; `None` is the kernel size.
    pub stride: Option<[usize; 2]>,
    /// Zero padding on both sides of each axis (at most half the kernel).
    pub padding: [usize; 2],
    /// Round the output size up.
    pub ceil_mode: bool,
    /// Count padded positions in the divisor (PyTorch's default, true).
    pub count_include_pad: bool,
    /// Divide by this instead of the window size.
    pub divisor_override: Option<usize>,
}

impl AvgPool2dOptions {
    /// A `k x k` window with stride `k` (PyTorch's `AvgPool2d(k)`).
    pub fn new(k: usize) -> Self {
        AvgPool2dOptions {
            kernel_size: [k, k],
            stride: None,
            padding: [0, 0],
            ceil_mode: false,
            count_include_pad: true,
            divisor_override: None,
        }
    }
}

/// Options of [`max_pool1d`](super::max_pool1d).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxPool1dOptions {
    /// Window size.
    pub kernel_size: usize,
    /// Step between windows; `None` is the kernel size.
    pub stride: Option<usize>,
    /// Implicit `-inf` padding on both sides.
    pub padding: usize,
    /// Spacing between window taps.
    pub dilation: usize,
    /// Round the output size up.
    pub ceil_mode: bool,
}

impl MaxPool1dOptions {
    /// A window of `k` with stride `k`.
    pub fn new(k: usize) -> Self {
        MaxPool1dOptions {
            kernel_size: k,
            stride: None,
            padding: 0,
            dilation: 1,
            ceil_mode: false,
        }
    }
    pub(super) fn to_2d(self) -> MaxPool2dOptions {
        MaxPool2dOptions {
            kernel_size: [1, self.kernel_size],
            stride: Some([1, self.stride.unwrap_or(self.kernel_size)]),
            padding: [0, self.padding],
            dilation: [1, self.dilation],
            ceil_mode: self.ceil_mode,
        }
    }
}

/// Options of [`avg_pool1d`](super::avg_pool1d).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AvgPool1dOptions {
    /// Window size.
    pub kernel_size: usize,
    /// Step between windows; `None` is the kernel size.
    pub stride: Option<usize>,
    /// Zero padding on both sides.
    pub padding: usize,
    /// Round the output size up.
    pub ceil_mode: bool,
    /// Count padded positions in the divisor.
    pub count_include_pad: bool,
}

impl AvgPool1dOptions {
    /// A window of `k` with stride `k`.
    pub fn new(k: usize) -> Self {
        AvgPool1dOptions {
            kernel_size: k,
            stride: None,
            padding: 0,
            ceil_mode: false,
            count_include_pad: true,
        }
    }
    pub(super) fn to_2d(self) -> AvgPool2dOptions {
        AvgPool2dOptions {
            kernel_size: [1, self.kernel_size],
            stride: Some([1, self.stride.unwrap_or(self.kernel_size)]),
            padding: [0, self.padding],
            ceil_mode: self.ceil_mode,
            count_include_pad: self.count_include_pad,
            divisor_override: None,
        }
    }
}
