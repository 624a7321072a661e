//! Random numbers on the device (shaders/random.wgsl): a counter-based Philox4x32-10
//! generator, so a stream is a pure function of (seed, offset), the same on every backend and
//! in the browser. Each call takes the next `ceil(n / 4)` counters of the device's generator
//! ([`Device::manual_seed`] resets it), so streams of successive calls never overlap.
//! Uniform bits (`rand`, `uniform`, `bernoulli`, `dropout`) are bit-identical everywhere; the
//! normals use the shader's own log and sin/cos polynomials rather than the backend's (whose
//! accuracy WGSL leaves open), so they agree across backends and browsers to a few f32 ulp
//! (tests/conformance/random.rs runs in both suites).
//!
//! PyTorch's `rand`, `randn`, `uniform_`, `normal_`, `bernoulli`, `dropout` (inverted scaling)
//! and the default initializers of its layers (`kaiming_uniform_`, `xavier_uniform_`).

use bytemuck::{Pod, Zeroable};

use crate::error::cpp_double;
use crate::runtime::pipeline::{ShaderLib, ShaderVariant};
use crate::runtime::{Access, Kernel, Storage};
use crate::tensor::check_new_shape;
use crate::{DType, Device, Error, Result, Tensor};

const WG: u32 = 64;

const DIST_UNIFORM: u32 = 0;
const DIST_NORMAL: u32 = 1;
const DIST_BERNOULLI: u32 = 2;
const DIST_DROPOUT: u32 = 3;
const RANDOM_DEFS: &[(&str, u32)] = &[
    ("DIST_UNIFORM", DIST_UNIFORM),
    ("DIST_NORMAL", DIST_NORMAL),
    ("DIST_BERNOULLI", DIST_BERNOULLI),
    ("DIST_DROPOUT", DIST_DROPOUT),
];

static RANDOM: Kernel = Kernel::new(
    "random",
    include_str!("../../shaders/random.wgsl"),
    "main",
    &[Access::Read, Access::ReadWrite],
)
.defs(RANDOM_DEFS)
.libs(&[&PHILOX]);

/// Philox4x32-10 (shaders/lib/philox.wgsl), shared with attention's dropout.
pub(crate) static PHILOX: ShaderLib = ShaderLib::new(include_str!("../../shaders/lib/philox.wgsl"));

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct RandomParams {
    numel: u32,
    key_lo: u32,
    key_hi: u32,
    ctr_lo: u32,
    ctr_hi: u32,
    a: f32,
    b: f32,
    _pad0: u32,
}

/// Fills a new tensor of `shape` with distribution `dist` (reading `x` for dropout).
#[allow(clippy::too_many_arguments)]
fn generate(
    op: &'static str,
    dev: &Device,
    shape: &[usize],
    dtype: DType,
    dist: u32,
    a: f32,
    b: f32,
    x: Option<&Tensor>,
) -> Result<Tensor> {
    check_new_shape(dev, op, shape, dtype)?;
    // Refused before the empty shortcut, as PyTorch dispatches on the dtype first.
    if !dtype.is_float() {
        return Err(int_refusal(op, dist));
    }
    let out = Tensor::empty(dev, op, shape, dtype)?;
    let n = out.numel() as u64;
    if n == 0 {
        return Ok(out);
    }
    let blocks = n.div_ceil(4);
    let (seed, ctr) = dev.take_random_counters(blocks);
    let params = RandomParams {
        numel: n as u32,
        key_lo: seed as u32,
        key_hi: (seed >> 32) as u32,
        ctr_lo: ctr as u32,
        ctr_hi: (ctr >> 32) as u32,
        a,
        b,
        _pad0: 0,
    };
    // Generators read nothing: their input binding gets a small placeholder (a read binding
    // may not alias the output's read_write one).
    let placeholder;
    let input = match x {
        Some(t) => t.buffer(),
        None => {
            placeholder = Storage::scratch(dev, op, 16)?;
            placeholder.buffer()
        }
    };
    dev.launch(
        op,
        &RANDOM,
        &[dtype],
        &[("DIST", dist as f64), ("WG", WG as f64)],
        bytemuck::bytes_of(&params),
        &[input, out.buffer()],
        dev.grid_1d(op, blocks.div_ceil(WG as u64))?,
    )?;
    Ok(out)
}

/// The largest finite value of a float `dtype` (the random kernels write floats only; an
/// integer one is refused as `dist`'s kernel refuses it).
fn dtype_max(op: &'static str, dtype: DType, dist: u32) -> Result<f64> {
    match dtype {
        DType::F32 => Ok(f32::MAX as f64),
        DType::F16 => Ok(65504.0),
        DType::I32 => Err(int_refusal(op, dist)),
    }
}

/// PyTorch's refusal of an integer dtype by the kernel that samples `dist`.
fn int_refusal(op: &'static str, dist: u32) -> Error {
    let kernel = match dist {
        DIST_NORMAL => "normal_kernel_cpu",
        _ => "check_uniform_bounds",
    };
    Error::arg(
        op,
        format!("\"{kernel}\" not implemented for 'Int' (the samples are floats: F32 or F16)"),
    )
}

/// `v` is finite and within `dtype`'s range (PyTorch's "from is out of bounds for c10::Half",
/// which an infinite or NaN bound fails too).
fn check_in_range(op: &'static str, what: &str, v: f64, dtype: DType, max: f64) -> Result<()> {
    if v.is_nan() || v.abs() > max {
        return Err(Error::arg(
            op,
            format!(
                "{what} is out of bounds for {}: {what}={}, the largest {dtype:?} is {max}",
                // CHECK_OUT_OF_BOUNDS streams `self.dtype()`, a TypeMeta: C++'s name.
                dtype.c10_name(),
                cpp_double(v)
            ),
        ));
    }
    Ok(())
}

/// The largest |z| of the normal kernel: `sqrt(-2 ln u1)` at its smallest `u1 = 2^-24`
/// (`1 - unit`, 24-bit uniforms) is 5.7681, times |sin|, |cos| <= 1; rounded up.
const NORMAL_MAX_Z: f64 = 5.77;

/// Uniform samples in `[low, high)` (PyTorch's `torch.empty(shape).uniform_(low, high)`).
///
/// As PyTorch, errors ([`Error::InvalidArgument`]) when a bound is not finite or outside
/// `dtype`'s range, when `low > high`, or when `high - low` exceeds the largest value of
/// `dtype`, computed as PyTorch does (in f64 from the bounds as given) or as the kernel does
/// (in f32 from the bounds rounded to f32): samples would overflow to inf or NaN.
pub fn uniform(dev: &Device, shape: &[usize], low: f64, high: f64, dtype: DType) -> Result<Tensor> {
    uniform_op("uniform", dev, shape, low, high, dtype)
}

fn uniform_op(
    op: &'static str,
    dev: &Device,
    shape: &[usize],
    low: f64,
    high: f64,
    dtype: DType,
) -> Result<Tensor> {
    let max = dtype_max(op, dtype, DIST_UNIFORM)?;
    check_in_range(op, "from", low, dtype, max)?;
    check_in_range(op, "to", high, dtype, max)?;
    if low > high {
        return Err(Error::arg(
            op,
            format!(
                "uniform_ expects to return a [from, to) range, but found from={} > to={}",
                cpp_double(low),
                cpp_double(high)
            ),
        ));
    }
    let (a, b) = (low as f32, high as f32);
    // PyTorch's span in f64 from the bounds as given, and the kernel's from the bounds
    // rounded to f32 (exact in f64; at most f32::MAX exactly when the kernel's f32
    // difference is finite).
    let span = (b as f64 - a as f64).max(high - low);
    if span > max {
        return Err(Error::arg(
            op,
            format!(
                "uniform_ expects to-from <= std::numeric_limits<{}>::max(), but found to={} \
                 and from={} which result in to-from to exceed the limit ({span} > {max})",
                dtype.scalar_name(),
                cpp_double(high),
                cpp_double(low)
            ),
        ));
    }
    generate(op, dev, shape, dtype, DIST_UNIFORM, a, b, None)
}

/// Normal samples with `mean` and standard deviation `std` (PyTorch's `normal_`), by
/// Box-Muller on pairs of uniforms.
///
/// A NaN `mean` gives NaN samples, as PyTorch's. Errors ([`Error::InvalidArgument`]) when
/// `mean` is infinite or `std` not finite, either is outside `dtype`'s range, when `std < 0`
/// or NaN (PyTorch's `std >= 0.0` check), or when `|mean| + 5.77 std` (the kernel's largest sample: its
/// uniforms have 24 bits, so `|z| <= 5.7681`) exceeds the largest value of `dtype`. An empty
/// shape gives an empty tensor after the `std >= 0` check alone, as `normal_` returns there.
pub fn normal(dev: &Device, shape: &[usize], mean: f64, std: f64, dtype: DType) -> Result<Tensor> {
    let op = "normal";
    // PyTorch's own check (and its wording) comes first: a negative std is named as such
    // even where it is also past the dtype's range, or the dtype not a float.
    if std.is_nan() || std < 0.0 {
        return Err(Error::arg(
            op,
            format!(
                "normal expects std >= 0.0, but found std {}",
                cpp_double(std)
            ),
        ));
    }
    if let Some(t) = empty_fill(dev, op, shape, dtype)? {
        return Ok(t);
    }
    let max = dtype_max(op, dtype, DIST_NORMAL)?;
    // A NaN mean propagates (PyTorch checks only std): every sample is NaN.
    if !mean.is_nan() {
        check_in_range(op, "mean", mean, dtype, max)?;
    }
    check_in_range(op, "std", std, dtype, max)?;
    let reach = mean.abs() + NORMAL_MAX_Z * std;
    if reach > max {
        return Err(Error::arg(
            op,
            format!(
                "|mean| + {NORMAL_MAX_Z} * std = {reach} exceeds the largest {dtype:?} ({max}), \
                 with mean={mean} and std={std}: samples would overflow"
            ),
        ));
    }
    generate(
        op,
        dev,
        shape,
        dtype,
        DIST_NORMAL,
        mean as f32,
        std as f32,
        None,
    )
}

/// `U[0, 1)` samples (PyTorch's `torch.rand`).
pub fn rand(dev: &Device, shape: &[usize], dtype: DType) -> Result<Tensor> {
    generate("rand", dev, shape, dtype, DIST_UNIFORM, 0.0, 1.0, None)
}

/// Standard normal samples (PyTorch's `torch.randn`).
pub fn randn(dev: &Device, shape: &[usize], dtype: DType) -> Result<Tensor> {
    if let Some(t) = empty_fill(dev, "randn", shape, dtype)? {
        return Ok(t);
    }
    generate("randn", dev, shape, dtype, DIST_NORMAL, 0.0, 1.0, None)
}

/// The empty tensor of a normal fill of no elements: `normal_` returns right after its std
/// check (`CHECK_EMPTY_AND_RETURN`), before its kernel's dtype dispatch and without the range
/// checks this crate adds, so `torch.randn(0, dtype=torch.int32)` is an empty int tensor;
/// with elements an i32 dtype is refused.
fn empty_fill(
    dev: &Device,
    op: &'static str,
    shape: &[usize],
    dtype: DType,
) -> Result<Option<Tensor>> {
    if !shape.contains(&0) {
        return Ok(None);
    }
    check_new_shape(dev, op, shape, dtype)?;
    Tensor::zeros(dev, shape, dtype).map(Some)
}

/// 1 with probability `p`, else 0 (PyTorch's `torch.bernoulli` of a constant probability),
/// in any dtype: I32 too, as PyTorch's `bernoulli_(p)` fills integer tensors (drawn in f32,
/// where 0 and 1 are exact).
pub fn bernoulli(dev: &Device, shape: &[usize], p: f64, dtype: DType) -> Result<Tensor> {
    let op = "bernoulli";
    if !(0.0..=1.0).contains(&p) {
        return Err(Error::arg(
            op,
            format!(
                "bernoulli_ expects p to be in [0, 1], but got p={}",
                cpp_double(p)
            ),
        ));
    }
    if dtype == DType::I32 {
        check_new_shape(dev, op, shape, dtype)?;
        return generate(
            op,
            dev,
            shape,
            DType::F32,
            DIST_BERNOULLI,
            p as f32,
            0.0,
            None,
        )?
        .to_dtype(DType::I32);
    }
    generate(op, dev, shape, dtype, DIST_BERNOULLI, p as f32, 0.0, None)
}

/// `p` in `[0, 1]`, else nn.Dropout's (and at::dropout's) words, the value as Python prints it.
pub(crate) fn check_dropout_p(op: &'static str, p: f64) -> Result<()> {
    if !(0.0..=1.0).contains(&p) {
        return Err(Error::arg(
            op,
            format!(
                "dropout probability has to be between 0 and 1, but got {}",
                crate::error::py_float(p)
            ),
        ));
    }
    Ok(())
}

/// PyTorch's `dropout(x, p, training)`: in training, each element is zeroed with probability
/// `p` and the rest scaled by `1 / (1 - p)` (inverted dropout, so evaluation needs no
/// rescaling); `p = 1` gives `x * 0` (zeros, NaN where `x` is not finite). Not training (or `p = 0`): `x` itself.
pub fn dropout(x: &Tensor, p: f64, training: bool) -> Result<Tensor> {
    let op = "dropout";
    check_dropout_p(op, p)?;
    // _dropout_impl returns an empty input as it is too.
    if !training || p == 0.0 || x.numel() == 0 {
        return Ok(x.clone());
    }
    if p == 1.0 {
        // As PyTorch: x * 0, so NaN and inf stay NaN and the gradient is zeros, not absent
        // (an i32 x gives i32 zeros, as its `input * zeros({})`).
        if x.dtype == DType::I32 {
            return Tensor::zeros(x.device(), x.shape(), DType::I32);
        }
        return x.mul_scalar(0.0);
    }
    if x.dtype == DType::I32 {
        // PyTorch's noise is input's dtype: `noise.div_(1 - p)` cannot land in an int tensor.
        return Err(Error::arg(
            op,
            "result type Float can't be cast to the desired output type Int",
        ));
    }
    // A tracked input is recorded for autograd as x * mask, the mask (0 or 1 / (1 - p)) drawn
    // by the same kernel from ones, so tracked and untracked calls give bitwise the same result.
    // In f16 the mask holds 0 or 1 and the scale is applied after (x * mask is exact): a
    // stored f16 scale would round the output twice, and past p = 0.99998 be inf.
    // Otherwise the kernel reads x itself, packed from element 0 as it indexes x[e].
    let tracked = x.is_tracked();
    // PyTorch's `noise.div_(1 - p)`: 1 - p rounded to f32, the quotient taken in f32 (in f64
    // it was one ulp off for p = 0.47, 0.71, 0.97, 0.999).
    let scale = f64::from(1.0f32 / ((1.0 - p) as f32));
    let half_mask = tracked && x.dtype == DType::F16;
    let input = if tracked {
        Tensor::ones(x.device(), x.shape(), x.dtype)?
    } else {
        x.contiguous_at_zero()?
    };
    let out = generate(
        op,
        x.device(),
        x.shape(),
        x.dtype,
        DIST_DROPOUT,
        p as f32,
        if half_mask { 1.0 } else { scale as f32 },
        Some(&input),
    )?;
    match (tracked, half_mask) {
        (true, true) => {
            let y = {
                let _guard = crate::autograd::NoGradGuard::new();
                x.mul(&out)?.mul_scalar(scale)?
            };
            Ok(crate::autograd::record(y, &[x], |_| {
                Box::new(HalfDropoutBackward { mask: out, scale })
            }))
        }
        (true, false) => x.mul(&out),
        _ => Ok(out),
    }
}

/// f16 dropout's backward: `g * mask`, then the scale (one rounding, as the forward's; the
/// other order would round `g * scale` to f16 first, inf past p = 0.99998, and inf * 0 is
/// NaN where the element was dropped).
struct HalfDropoutBackward {
    /// 0 or 1 (exact in f16).
    mask: Tensor,
    scale: f64,
}

impl crate::autograd::BackwardOp for HalfDropoutBackward {
    fn name(&self) -> &'static str {
        "dropout"
    }

    fn saved(&self) -> Vec<&Tensor> {
        vec![&self.mask]
    }

    fn backward(&self, grads: &[Option<Tensor>], _needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = grads.first().and_then(Option::as_ref) else {
            return Ok(vec![None]);
        };
        Ok(vec![Some(g.mul(&self.mask)?.mul_scalar(self.scale)?)])
    }
}

/// `(fan_in, fan_out)` of a weight of `shape` as PyTorch computes them
/// (`torch.nn.init._calculate_fan_in_and_fan_out`): dims 1 and 0 times the receptive field.
pub fn fan_in_and_fan_out(shape: &[usize]) -> Result<(usize, usize)> {
    if shape.len() < 2 {
        return Err(Error::shape(
            "fan_in_and_fan_out",
            format!(
                "Fan in and fan out can not be computed for tensor with fewer than 2 \
                 dimensions (shape {shape:?})"
            ),
        ));
    }
    // A weight shape (not yet a tensor) may be anything: bounded like a tensor's, the
    // products below cannot overflow.
    crate::layout::checked_numel("fan_in_and_fan_out", shape)?;
    let field: usize = shape[2..].iter().product();
    Ok((shape[1] * field, shape[0] * field))
}

/// PyTorch's `kaiming_uniform_(w, a, mode='fan_in', nonlinearity='leaky_relu')`, the default
/// initializer of `Linear` and `Conv` weights (with `a = sqrt(5)`): `U(-b, b)` with
/// `b = sqrt(6 / ((1 + a^2) * fan_in))`.
pub fn kaiming_uniform(dev: &Device, shape: &[usize], a: f64, dtype: DType) -> Result<Tensor> {
    if shape.contains(&0) {
        // PyTorch: "Initializing zero-element tensors is a no-op", before the fan (so a 1-D
        // empty shape is not refused).
        return Tensor::zeros(dev, shape, dtype);
    }
    let (fan_in, _) = fan_in_and_fan_out(shape)?;
    if fan_in == 0 {
        return Tensor::zeros(dev, shape, dtype);
    }
    let bound = (6.0 / ((1.0 + a * a) * fan_in as f64)).sqrt();
    uniform_op("kaiming_uniform", dev, shape, -bound, bound, dtype)
}

/// PyTorch's `xavier_uniform_(w, gain)`: `U(-b, b)` with
/// `b = gain * sqrt(6 / (fan_in + fan_out))`.
pub fn xavier_uniform(dev: &Device, shape: &[usize], gain: f64, dtype: DType) -> Result<Tensor> {
    let (fan_in, fan_out) = fan_in_and_fan_out(shape)?;
    // As f64: two fans of 2^31 pass a 32-bit usize (wasm32).
    let fans = fan_in as f64 + fan_out as f64;
    if fans == 0.0 {
        // init.py's `2.0 / float(fan_in + fan_out)` raises Python's ZeroDivisionError.
        return Err(Error::arg(
            "xavier_uniform",
            format!("float division by zero (fan_in + fan_out is 0 for shape {shape:?})"),
        ));
    }
    let bound = gain * (6.0 / fans).sqrt();
    uniform_op("xavier_uniform", dev, shape, -bound, bound, dtype)
}

/// The random family's entry in the kernel-family registry (`ops::families()`).
pub(crate) const FAMILY: crate::runtime::pipeline::Family = crate::runtime::pipeline::Family {
    name: "random",
    shaders: &["random.wgsl"],
    params: || vec![params_layout()],
    variants: random_variants,
};

/// Every (kernel, dtypes, override constants) combination of this family's kernels, for
/// tests/shaders.rs to translate and validate each.
#[doc(hidden)]
pub fn random_variants() -> Vec<ShaderVariant> {
    let mut v = Vec::new();
    for dt in [DType::F32, DType::F16] {
        for &(_, dist) in RANDOM_DEFS {
            v.push(ShaderVariant::new(
                &RANDOM,
                &[dt],
                &[("DIST", dist as f64), ("WG", WG as f64)],
            ));
        }
    }
    v
}

/// The params struct's layout, checked against the shader's `struct Params` in tests/shaders.rs.
#[doc(hidden)]
pub fn params_layout() -> crate::runtime::pipeline::ParamsLayout {
    crate::runtime::pipeline::params_layout!(
        RANDOM,
        &[DType::F32],
        RandomParams {
            numel,
            key_lo,
            key_hi,
            ctr_lo,
            ctr_hi,
            a,
            b,
            _pad0
        }
    )
}
