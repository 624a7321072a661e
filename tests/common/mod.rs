//! Shared helpers for the integration tests: one process-wide device, the f16 gate, and
//! building test tensors (including strided views) from host data together with the host-side
//! model of the same view.
#![allow(dead_code)]

pub mod attention_ref;
pub mod conv_ref;
pub mod fixture_case;
pub mod norm_ref;
pub mod reference;
pub mod rnn_ref;

#[cfg(not(target_arch = "wasm32"))]
use std::sync::OnceLock;

use wgtensor::{f16, DType, Device, Element, Tensor};

/// The process-wide device every test shares (adapter creation is slow on lavapipe).
#[cfg(not(target_arch = "wasm32"))]
pub fn device() -> &'static Device {
    static DEVICE: OnceLock<Device> = OnceLock::new();
    DEVICE.get_or_init(|| {
        Device::new().expect("no wgpu adapter: install a Vulkan driver (e.g. Mesa lavapipe)")
    })
}

/// A second process-wide device without the SUBGROUP feature: kernels with a subgroup variant
/// (GEMM's `sg8`) run their portable variant on it, so tests can cover both.
#[cfg(not(target_arch = "wasm32"))]
pub fn portable_device() -> &'static Device {
    static DEVICE: OnceLock<Device> = OnceLock::new();
    DEVICE.get_or_init(|| {
        Device::with_options(wgtensor::DeviceOptions {
            disable_subgroups: true,
            ..Default::default()
        })
        .expect("no wgpu adapter: install a Vulkan driver (e.g. Mesa lavapipe)")
    })
}

/// A third process-wide device that plans kernels as on a GPU
/// ([`DeviceOptions::gpu_plans`](wgtensor::DeviceOptions::gpu_plans)): the GPU tile shapes run
/// on lavapipe, so tests cover them without a GPU.
#[cfg(not(target_arch = "wasm32"))]
pub fn gpu_plans_device() -> &'static Device {
    static DEVICE: OnceLock<Device> = OnceLock::new();
    DEVICE.get_or_init(|| {
        Device::with_options(wgtensor::DeviceOptions {
            gpu_plans: true,
            // The FMA kernels for f16 GEMMs too (the cooperative-matrix tile has its own
            // devices in tests/conformance/gemm/coop.rs).
            cooperative_matrix: false,
            // What GPUs compile: no index clamps (lavapipe's default keeps them).
            shader_checks: wgtensor::ShaderChecks::DivisionOnly,
            ..Default::default()
        })
        .expect("no wgpu adapter: install a Vulkan driver (e.g. Mesa lavapipe)")
    })
}

/// A device planning as a discrete GPU of 256 workgroup slots
/// ([`DeviceOptions::parallelism`](wgtensor::DeviceOptions::parallelism) with `gpu_plans`):
/// lavapipe's own estimate (its host threads) makes the planners' "too few workgroups to fill
/// the device" variants rare at test sizes; here they run as they would on a large GPU. No
/// subgroups: a GPU's are not 8 lanes wide, so the sg8 kernels stay off as they would there.
#[cfg(not(target_arch = "wasm32"))]
pub fn wide_gpu_plans_device() -> &'static Device {
    static DEVICE: OnceLock<Device> = OnceLock::new();
    DEVICE.get_or_init(|| {
        Device::with_options(wgtensor::DeviceOptions {
            gpu_plans: true,
            cooperative_matrix: false,
            parallelism: Some(256),
            disable_subgroups: true,
            shader_checks: wgtensor::ShaderChecks::DivisionOnly,
            ..Default::default()
        })
        .expect("no wgpu adapter: install a Vulkan driver (e.g. Mesa lavapipe)")
    })
}

/// Output counts over which the GPU reduction planners (`reduce_plan`, `argext_plan`) split
/// strided rows into segments on `dev`: enough outputs for one invocation each (two per
/// estimated slot) yet too few to fill the device alone: 2..=20 per slot (on lavapipe, whose
/// slots are its threads, 4..=40 with 2 threads; on a discrete GPU, 256 slots, 512..=5120).
pub fn rows_split_outputs(dev: &Device) -> std::ops::RangeInclusive<usize> {
    let slots = dev.caps().parallelism.max(2);
    2 * slots..=20 * slots
}

/// The browser's three shared devices (default, without subgroups, and planning as on a GPU),
/// opened by [`init_devices`]: a wasm test cannot block on device creation, so each browser
/// test awaits `init_devices()` first and the shared code then finds them through `device()`,
/// `portable_device()` and `gpu_plans_device()` as on native.
#[cfg(target_arch = "wasm32")]
mod wasm_devices {
    use std::cell::Cell;

    use wgtensor::{Device, DeviceOptions};

    type Devices = (&'static Device, &'static Device, &'static Device);

    thread_local! {
        static DEVICES: Cell<Option<Devices>> = const { Cell::new(None) };
    }

    pub async fn init_devices() -> &'static Device {
        if let Some((d, _, _)) = DEVICES.get() {
            return d;
        }
        let open = |opts: DeviceOptions| async move {
            let dev = Device::new_async_with(opts)
                .await
                .expect("no WebGPU adapter: run Chromium with --enable-unsafe-webgpu");
            &*Box::leak(Box::new(dev))
        };
        let d = open(DeviceOptions::default()).await;
        let p = open(DeviceOptions {
            disable_subgroups: true,
            ..Default::default()
        })
        .await;
        let g = open(DeviceOptions {
            gpu_plans: true,
            cooperative_matrix: false,
            ..Default::default()
        })
        .await;
        // Two tests racing through the awaits above keep the first set.
        if DEVICES.get().is_none() {
            DEVICES.set(Some((d, p, g)));
        }
        DEVICES.get().expect("set above").0
    }

    fn get() -> Devices {
        DEVICES
            .get()
            .expect("browser tests must `init_devices().await` before using the device")
    }

    pub fn device() -> &'static Device {
        get().0
    }

    pub fn portable_device() -> &'static Device {
        get().1
    }

    pub fn gpu_plans_device() -> &'static Device {
        get().2
    }
}
#[cfg(target_arch = "wasm32")]
pub use wasm_devices::{device, gpu_plans_device, init_devices, portable_device};

/// Fails the calling f16 test on adapters without SHADER_F16. scripts/test.sh passes
/// `--skip f16` on such adapters, so f16 cases show up as filtered out, never as passed.
pub fn require_f16(dev: &Device) {
    if !dev.supports_f16() {
        panic!("adapter lacks SHADER_F16: run the suite with `--skip f16`");
    }
}

/// `v` rounded to the nearest value of `T` (round to nearest even), back in f64.
pub fn round_to<T: Element>(v: f64) -> f64 {
    T::from_f64(v).to_f64()
}

/// `v` rounded to the nearest value of `dtype`, back in f64.
pub fn round_to_dtype(dtype: DType, v: f64) -> f64 {
    match dtype {
        DType::F32 => round_to::<f32>(v),
        DType::F16 => round_to::<f16>(v),
        DType::I32 => round_to::<i32>(v),
    }
}

/// Uploads row-major `data` as a `dtype` tensor of `shape` (values are rounded to `dtype`).
/// The row-major `rows x cols` matrix `v` as a `dtype` tensor; `transposed`: stored
/// `[cols, rows]` and read through its transpose (strides (1, rows)).
pub fn matrix(
    dev: &Device,
    v: &[f32],
    (rows, cols): (usize, usize),
    transposed: bool,
    dtype: DType,
) -> Tensor {
    let t = if transposed {
        let mut t = vec![0.0; v.len()];
        for r in 0..rows {
            for c in 0..cols {
                t[c * rows + r] = v[r * cols + c];
            }
        }
        Tensor::from_slice::<f32>(dev, &t, &[cols, rows]).and_then(|t| t.transpose(0, 1))
    } else {
        Tensor::from_slice::<f32>(dev, v, &[rows, cols])
    };
    t.and_then(|t| t.to_dtype(dtype))
        .unwrap_or_else(|e| panic!("matrix [{rows} x {cols}] as {dtype:?}: {e}"))
}

pub fn upload(dev: &Device, data: &[f64], shape: &[usize], dtype: DType) -> Tensor {
    let t = match dtype {
        DType::F32 => Tensor::from_slice(
            dev,
            &data.iter().map(|&v| v as f32).collect::<Vec<_>>(),
            shape,
        ),
        DType::F16 => Tensor::from_slice(
            dev,
            &data.iter().map(|&v| f16::from_f64(v)).collect::<Vec<_>>(),
            shape,
        ),
        DType::I32 => Tensor::from_slice(
            dev,
            &data.iter().map(|&v| v.round() as i32).collect::<Vec<_>>(),
            shape,
        ),
    };
    t.unwrap_or_else(|e| panic!("upload of shape {shape:?} as {dtype:?} failed: {e}"))
}

/// Reads any tensor back as f64 (row-major over its logical shape).
pub async fn download_async(t: &Tensor) -> wgtensor::Result<Vec<f64>> {
    Ok(match t.dtype() {
        DType::F32 => t
            .to_vec_async::<f32>()
            .await?
            .into_iter()
            .map(f64::from)
            .collect(),
        DType::F16 => t
            .to_vec_async::<f16>()
            .await?
            .into_iter()
            .map(f64::from)
            .collect(),
        DType::I32 => t
            .to_vec_async::<i32>()
            .await?
            .into_iter()
            .map(f64::from)
            .collect(),
    })
}

/// [`download_async`], blocking (native).
#[cfg(not(target_arch = "wasm32"))]
pub fn download(t: &Tensor) -> wgtensor::Result<Vec<f64>> {
    pollster::block_on(download_async(t))
}

/// One step that turns a tensor into a view of it. Applied both to the GPU tensor (through
/// the public view API) and to host data (through `reference`), so a test can compare a
/// kernel that reads the strided view with the reference on the materialized values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ViewOp {
    /// `narrow(dim, start, len)`; `dim` may be negative.
    Narrow {
        dim: isize,
        start: usize,
        len: usize,
    },
    /// `permute(perm)`.
    Permute(Vec<usize>),
    /// `transpose(a, b)`; dims may be negative.
    Transpose(isize, isize),
    /// `broadcast_to(shape)` (stride 0 on the broadcast dims).
    BroadcastTo(Vec<usize>),
}

fn norm_dim(d: isize, rank: usize) -> usize {
    if d < 0 {
        (d + rank as isize) as usize
    } else {
        d as usize
    }
}

impl ViewOp {
    /// Applies the view to a GPU tensor.
    pub fn apply(&self, t: &Tensor) -> wgtensor::Result<Tensor> {
        match self {
            ViewOp::Narrow { dim, start, len } => t.narrow(*dim, *start, *len),
            ViewOp::Permute(p) => t.permute(p),
            ViewOp::Transpose(a, b) => t.transpose(*a, *b),
            ViewOp::BroadcastTo(s) => t.broadcast_to(s),
        }
    }

    /// Applies the view to row-major host data; returns the materialized values and shape.
    pub fn apply_host(&self, data: &[f64], shape: &[usize]) -> (Vec<f64>, Vec<usize>) {
        match self {
            ViewOp::Narrow { dim, start, len } => {
                let d = norm_dim(*dim, shape.len());
                let mut s = shape.to_vec();
                s[d] = *len;
                (reference::narrow(data, shape, d, *start, *len), s)
            }
            ViewOp::Permute(p) => (
                reference::permute(data, shape, p),
                p.iter().map(|&i| shape[i]).collect(),
            ),
            ViewOp::Transpose(a, b) => {
                let mut perm: Vec<usize> = (0..shape.len()).collect();
                perm.swap(norm_dim(*a, shape.len()), norm_dim(*b, shape.len()));
                ViewOp::Permute(perm).apply_host(data, shape)
            }
            ViewOp::BroadcastTo(s) => (reference::broadcast_to(data, shape, s), s.clone()),
        }
    }
}

/// Uploads `data` (row-major over `parent`) and applies `ops` in order.
pub fn build_view(
    dev: &Device,
    data: &[f64],
    parent: &[usize],
    ops: &[ViewOp],
    dtype: DType,
) -> Tensor {
    let mut t = upload(dev, data, parent, dtype);
    for op in ops {
        t = op
            .apply(&t)
            .unwrap_or_else(|e| panic!("view {op:?} of {:?} failed: {e}", t.shape()));
    }
    t
}

/// The host model of [`build_view`]: the view's values row-major, and its shape.
pub fn host_view(data: &[f64], parent: &[usize], ops: &[ViewOp]) -> (Vec<f64>, Vec<usize>) {
    let mut cur = (data.to_vec(), parent.to_vec());
    for op in ops {
        cur = op.apply_host(&cur.0, &cur.1);
    }
    cur
}

/// The `Conv2dOptions` of a reference convolution problem.
pub fn conv_options(g: &conv_ref::ConvGeom) -> wgtensor::ops::Conv2dOptions {
    wgtensor::ops::Conv2dOptions {
        stride: g.stride,
        padding: wgtensor::ops::Padding {
            top: g.pad[0],
            bottom: g.pad[1],
            left: g.pad[2],
            right: g.pad[3],
        },
        dilation: g.dil,
        groups: g.groups,
        ..Default::default()
    }
}

/// The plan the library launches for direction `dir` of `g` (`ops::conv::conv2d_plan`).
pub fn conv_plan(
    dev: &Device,
    g: &conv_ref::ConvGeom,
    dir: conv_ref::Dir,
) -> wgtensor::ops::conv::ConvPlan {
    use wgtensor::ops::conv::ConvDirection;
    let d = match dir {
        conv_ref::Dir::Forward => ConvDirection::Forward,
        conv_ref::Dir::Data => ConvDirection::Data,
        conv_ref::Dir::Weight => ConvDirection::Weight,
    };
    wgtensor::ops::conv::conv2d_plan(
        dev,
        d,
        [g.n, g.c, g.h, g.w],
        [g.o, g.c / g.groups, g.kh, g.kw],
        &conv_options(g),
    )
    .unwrap_or_else(|e| panic!("conv2d_plan of {g:?}: {e}"))
}

/// Whether `d` plans as a GPU (its long buckets sum in lanes): every adapter but a CPU one,
/// and a CPU one opened with `gpu_plans` (the planners read `Caps::cpu`).
pub fn on_gpu(d: &Device) -> bool {
    !d.caps().cpu
}

/// A bucket's sum as the kernels add it: in index order on CPU adapters and for buckets of up
/// to 256 terms; on GPUs a longer bucket by a workgroup, lane l adding terms l, l + 256, ...
/// in order, then the 256 lane sums folded in a tree (pairs 128 apart, then 64, ...).
pub fn bucket_sum(terms: &[f32], gpu: bool) -> f32 {
    bucket_sum_from(0.0, terms, gpu)
}

/// [`bucket_sum`] starting from `base` (lane 0's start on the GPUs' long path).
pub fn bucket_sum_from(base: f32, terms: &[f32], gpu: bool) -> f32 {
    if !gpu || terms.len() <= 256 {
        return terms.iter().fold(base, |a, &t| a + t);
    }
    let mut lanes = [0.0f32; 256];
    lanes[0] = base;
    for (k, &t) in terms.iter().enumerate() {
        lanes[k % 256] += t;
    }
    let mut s = 128;
    while s > 0 {
        for l in 0..s {
            lanes[l] += lanes[l + s];
        }
        s /= 2;
    }
    lanes[0]
}
