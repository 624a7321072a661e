//! The map family (shaders/map.wgsl): contiguous copy, dtype cast, unary math, scalar ops.
//! One kernel, specialized by the `OP` override; strided inputs are read in place.

use crate::layout::pack_dims;
use crate::ops::activation::ACTIVATION;
use crate::ops::elementwise_params::MapParams;
pub(crate) use crate::ops::elementwise_params::MAP_DEFS;
use crate::ops::elementwise_vec4 as vec4;
use crate::ops::map_grad;
use crate::ops::transpose_copy;
use crate::ops::view_grad::{self, ViewKind};
use crate::runtime::window::{for_windows, Operand};
use crate::runtime::{Access, Kernel};
use crate::{DType, Result, Tensor};

const SRC: &str = include_str!("../../shaders/map.wgsl");

use Access::{Read as R, ReadWrite as RW};

// The copy path (OP_COPY) converts T to U directly, exact for i32; the math ops refuse
// i32 in `map` before launching.
static MAP: Kernel = Kernel::new("map", SRC, "main", &[R, RW])
    .libs(&[&ACTIVATION])
    .defs(MAP_DEFS)
    .ints();

/// The same math over a donated input's own buffer (src/ops/donate.rs).
static MAP_INPLACE: Kernel = Kernel::new("map", SRC, "main_inplace", &[RW])
    .slots(&[3])
    .libs(&[&ACTIVATION])
    .defs(MAP_DEFS);

/// f32 <-> i32 over a donated input's own buffer.
static CAST_INPLACE: Kernel = Kernel::new(
    "cast_inplace",
    include_str!("../../shaders/cast_inplace.wgsl"),
    "main",
    &[RW],
)
.ints();

pub(crate) use crate::ops::wg::WG;

/// Unary functions, applied elementwise in f32 by [`Tensor::unary`] (and its shorthands such
/// as [`Tensor::relu`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnaryOp {
    /// `-x` (`torch.neg`).
    Neg,
    /// `|x|` (`torch.abs`).
    Abs,
    /// `e^x` (`torch.exp`).
    Exp,
    /// Natural logarithm (`torch.log`): NaN below 0, -inf at 0.
    Log,
    /// Square root (`torch.sqrt`): NaN below 0.
    Sqrt,
    /// `max(x, 0)` (`torch.relu`); NaN and `-0.0` pass through.
    Relu,
    /// `1 / (1 + e^-x)` (`torch.sigmoid`).
    Sigmoid,
    /// Hyperbolic tangent (`torch.tanh`).
    Tanh,
    /// Exact (erf) GELU, as PyTorch's default.
    Gelu,
    /// `x * sigmoid(x)` (`torch.nn.functional.silu`, also called swish).
    Silu,
    /// `log(1 + x)`, accurate for small `x` (`torch.log1p`): -inf at -1, NaN below.
    Log1p,
    /// `log(1 + e^x)` without overflow (`torch.nn.functional.softplus` with `beta` 1 and no
    /// threshold; [`softplus`](crate::ops::softplus()) takes both).
    Softplus,
    /// GELU's tanh approximation, `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`
    /// (PyTorch's `F.gelu(x, approximate='tanh')`, GPT-2's).
    GeluTanh,
}

/// `tensor (op) scalar` and the reversed forms, applied elementwise in f32 by
/// [`Tensor::scalar_op`] (PyTorch's ops with a Python number as one operand).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScalarOp {
    /// x + s
    Add,
    /// x - s
    Sub,
    /// s - x
    RSub,
    /// x * s
    Mul,
    /// x / s
    Div,
    /// s / x, as `x.reciprocal() * s` in f32 (`Tensor::rdiv_scalar` also rounds the
    /// reciprocal to f16 first for f16 tensors)
    RDiv,
    /// max(x, s) (`torch.clamp(x, min=s)`)
    Max,
    /// min(x, s) (`torch.clamp(x, max=s)`)
    Min,
    /// x ^ s (`torch.pow(x, s)`)
    Pow,
}

#[derive(Clone, Copy)]
enum MapOp {
    Identity,
    Unary(UnaryOp),
    Scalar(ScalarOp),
}

impl MapOp {
    /// The shader's OP code: the row of [`MAP_DEFS`] that names this op.
    fn code(self) -> u32 {
        let i = match self {
            MapOp::Identity => 0,
            MapOp::Unary(u) => 1 + u as usize,
            MapOp::Scalar(s) => 1 + UNARY_NAMES.len() + s as usize,
        };
        MAP_DEFS[i].1
    }
}

/// Runs the map kernel: `out[i] = op(x[strided i], scalar)`, output contiguous of `out_dtype`.
fn map(
    op_name: &'static str,
    x: &Tensor,
    op: MapOp,
    scalar: f32,
    out_dtype: DType,
) -> Result<Tensor> {
    let dev = x.device();
    if !matches!(op, MapOp::Identity) {
        x.require_float(op_name)?;
    }
    let out = Tensor::empty(dev, op_name, x.shape(), out_dtype)?;
    if out.numel() == 0 {
        return Ok(out);
    }
    // On a GPU a view with its last two dims transposed is copied through tiles.
    if matches!(op, MapOp::Identity) && transpose_copy::try_copy(op_name, x, &out)? {
        return Ok(out);
    }
    let l = &x.layout;
    let mut params = MapParams {
        numel: l.numel() as u32,
        rank: l.rank() as u32,
        offset: l.offset() as u32,
        scalar,
        shape: pack_dims(l.shape()),
        strides: pack_dims(l.strides()),
        base: 0,
        _pad0: 0,
        _pad1: 0,
        _pad2: 0,
    };
    let contig = l.is_contiguous();
    let consts = [
        ("OP", op.code() as f64),
        ("WG", WG as f64),
        ("CONTIG", f64::from(u8::from(contig))),
    ];
    let dts = [x.dtype, out_dtype];
    // On a GPU a packed input's first `skip` elements go through the vec4 kernel.
    let skip = if contig {
        vec4::map_body(op_name, x, Some(&out), &dts, op.code(), &mut params)?
    } else {
        0
    };
    let n = out.numel() as u64 - skip;
    if n == 0 {
        return Ok(out);
    }
    let operands = [
        Operand {
            buffer: x.buffer(),
            es: x.dtype.size() as u64,
            offset: l.offset() as u64 + skip,
            follows_output: contig,
            end: l.span() as u64,
        },
        Operand {
            buffer: out.buffer(),
            es: out_dtype.size() as u64,
            offset: skip,
            follows_output: true,
            end: out.numel() as u64,
        },
    ];
    // One window (whole buffers) unless a buffer is larger than one binding.
    for_windows(dev, op_name, n, &operands, WG as u64, |s, n, sp| {
        // The output's binding starts at its window's first element (`skip` ends on an
        // aligned byte, windows are whole workgroups): the shader writes y[i].
        debug_assert_eq!(sp[1].rel, 0);
        params.numel = n as u32;
        params.base = s as u32;
        params.offset = sp[0].rel as u32;
        dev.launch_binds(
            op_name,
            &MAP,
            &dts,
            &consts,
            bytemuck::bytes_of(&params),
            &[sp[0].bind(x.buffer()), sp[1].bind(out.buffer())],
            dev.grid_1d(op_name, n.div_ceil(WG as u64))?,
        )
    })?;
    Ok(out)
}

/// Runs the in-place map kernel over `x` (donated: packed from offset 0, uniquely held).
fn map_in_place(
    op_name: &'static str,
    kernel: &'static Kernel,
    x: &Tensor,
    dtypes: &[DType],
    op: MapOp,
    scalar: f32,
) -> Result<()> {
    let dev = x.device();
    let n = x.numel();
    if n == 0 {
        return Ok(());
    }
    let mut params = MapParams {
        numel: n as u32,
        rank: 1,
        offset: 0,
        scalar,
        shape: pack_dims(&[n]),
        strides: pack_dims(&[1]),
        base: 0,
        _pad0: 0,
        _pad1: 0,
        _pad2: 0,
    };
    let mut consts = vec![("WG", WG as f64)];
    if !matches!(op, MapOp::Identity) {
        consts.push(("OP", op.code() as f64));
    }
    let skip = if std::ptr::eq(kernel, &MAP_INPLACE) {
        let dts = [dtypes[0], dtypes[1]];
        vec4::map_body(op_name, x, None, &dts, op.code(), &mut params)?
    } else {
        0
    };
    let io = [Operand {
        buffer: x.buffer(),
        es: x.dtype.size() as u64,
        offset: skip,
        follows_output: true,
        end: n as u64,
    }];
    for_windows(
        dev,
        op_name,
        n as u64 - skip,
        &io,
        WG as u64,
        |s, len, sp| {
            params.numel = len as u32;
            params.base = s as u32;
            params.offset = sp[0].rel as u32;
            dev.launch_binds(
                op_name,
                kernel,
                dtypes,
                &consts,
                bytemuck::bytes_of(&params),
                &[sp[0].bind(x.buffer())],
                dev.grid_1d(op_name, len.div_ceil(WG as u64))?,
            )
        },
    )
}

impl Tensor {
    /// `op` over this (donated) tensor's own buffer.
    pub(crate) fn unary_in_place(&self, op: UnaryOp) -> Result<()> {
        let name = UNARY_NAMES[op as usize];
        self.require_float(name)?;
        let dts = [self.dtype, self.dtype];
        map_in_place(name, &MAP_INPLACE, self, &dts, MapOp::Unary(op), 0.0)
    }

    /// `x (op) s` over this (donated) tensor's own buffer.
    pub(crate) fn scalar_in_place(&self, op: ScalarOp, s: f32) -> Result<()> {
        let name = SCALAR_NAMES[op as usize];
        self.require_float(name)?;
        let dts = [self.dtype, self.dtype];
        map_in_place(name, &MAP_INPLACE, self, &dts, MapOp::Scalar(op), s)
    }

    /// Converts this (donated) tensor's elements to `dtype` in place; both dtypes are 4 bytes.
    pub(crate) fn cast_in_place(&self, dtype: DType) -> Result<()> {
        let dts = [self.dtype, dtype];
        map_in_place("to_dtype", &CAST_INPLACE, self, &dts, MapOp::Identity, 0.0)
    }
}

const UNARY_NAMES: [&str; 13] = [
    "neg",
    "abs",
    "exp",
    "log",
    "sqrt",
    "relu",
    "sigmoid",
    "tanh",
    "gelu",
    "silu",
    "log1p",
    "softplus",
    "gelu_tanh",
];
const SCALAR_NAMES: [&str; 9] = [
    "add_scalar",
    "sub_scalar",
    "rsub_scalar",
    "mul_scalar",
    "div_scalar",
    "rdiv_scalar",
    "max_scalar",
    "min_scalar",
    "pow",
];

impl Tensor {
    /// `self` when already contiguous (row-major and packed, at any offset in its buffer, so a
    /// contiguous view still shares its base's storage, as PyTorch's `contiguous`), else a
    /// packed row-major copy.
    pub fn contiguous(&self) -> Result<Tensor> {
        if self.is_contiguous() {
            return Ok(self.clone());
        }
        self.contiguous_at_zero()
    }

    /// `self` when contiguous from offset 0, else a packed copy at offset 0 (what kernels that
    /// bind a whole buffer need). A leading slice of a base past one binding (`x.narrow(0, 0,
    /// k)`) is copied too: its own elements fit one binding where the base's buffer does not.
    pub(crate) fn contiguous_at_zero(&self) -> Result<Tensor> {
        let limit = self.device().max_binding_bytes();
        let bytes = self.numel() as u64 * self.dtype.size() as u64;
        let slice_of_large = self.buffer().size() > limit && bytes <= limit;
        if self.is_contiguous() && self.layout.offset() == 0 && !slice_of_large {
            return Ok(self.clone());
        }
        let out = map("contiguous", self, MapOp::Identity, 0.0, self.dtype)?;
        Ok(view_grad::record_view(self, out, || ViewKind::Identity))
    }

    /// Converts to `dtype` (PyTorch's `tensor.to(dtype)`): f32 <-> f16 rounds to nearest
    /// even; a float to [`DType::I32`] truncates toward zero and saturates (at `i32::MIN`, and
    /// at 2147483520, the largest f32 below 2^31; NaN gives an unspecified value, as in
    /// PyTorch); i32 to a float rounds to nearest. A cast to
    /// i32 carries no gradient.
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype {
            return Ok(self.clone());
        }
        self.device().require_dtype("to_dtype", dtype)?;
        if self.dtype == DType::I32 && dtype == DType::F16 {
            // Through f32 too: WGSL leaves an inexact int-to-float conversion's rounding to
            // the implementation (a driver has cut an i32 past f16's range to its low bits,
            // where PyTorch gives inf); i32 -> f32 -> f16 rounds twice only past 2^24, where
            // f16 is infinite either way.
            return self.to_dtype(DType::F32)?.to_dtype(dtype);
        }
        if self.dtype == DType::F16 && dtype == DType::I32 {
            // Through f32: the shader compilers clamp a float-to-int conversion to the range of
            // the source type (an f16 inf would give 65504), an f32 one saturates as below.
            return self.to_dtype(DType::F32)?.to_dtype(dtype);
        }
        let out = map("to_dtype", self, MapOp::Identity, 0.0, dtype)?;
        Ok(map_grad::record_to_dtype(self, out))
    }

    /// `op` applied to every element: a new contiguous tensor of the same shape and dtype.
    /// Strided views are read in place, without a copy first.
    pub fn unary(&self, op: UnaryOp) -> Result<Tensor> {
        let out = map(
            UNARY_NAMES[op as usize],
            self,
            MapOp::Unary(op),
            0.0,
            self.dtype,
        )?;
        Ok(map_grad::record_unary(self, op, out))
    }

    /// `x (op) s` for every element `x` (or `s (op) x` for the reversed ops): a new contiguous
    /// tensor of the same shape and dtype, computed in f32. Scalars are f64 throughout the API
    /// (as PyTorch's Python numbers and [`Tensor::full`]); the kernel rounds `s` to f32.
    pub fn scalar_op(&self, op: ScalarOp, s: f64) -> Result<Tensor> {
        self.check_bound(op, s)?;
        self.scalar_op_as(op, s, true)
    }

    /// A `Max` / `Min` bound a float dtype cannot hold is clamp_min / clamp_max's overflow
    /// error (their bound is converted checked); the other ops take `s` as a double.
    pub(crate) fn check_bound(&self, op: ScalarOp, s: f64) -> Result<()> {
        if matches!(op, ScalarOp::Max | ScalarOp::Min) && self.dtype.is_float() {
            crate::tensor::check_fill(SCALAR_NAMES[op as usize], s, self.dtype)?;
        }
        Ok(())
    }

    /// [`Tensor::scalar_op`]; `wrapped` false records a node that serves several backward
    /// passes whatever the op (a mean's division: PyTorch's MeanBackward saves no tensor,
    /// where `x / s` saves the wrapped scalar).
    pub(crate) fn scalar_op_as(&self, op: ScalarOp, s: f64, wrapped: bool) -> Result<Tensor> {
        let k = kernel_scalar(op, self.dtype, s)?;
        if op == ScalarOp::RDiv && crate::autograd::records([self]) {
            // PyTorch's graph of `s / x` (Tensor.__rtruediv__): the reciprocal, which saves its
            // result (so x may be written afterwards), then the product with the wrapped
            // scalar. The value is the fused kernel's, as untracked.
            let r = self.scalar_op_recorded(ScalarOp::RDiv, 1.0, 1.0, wrapped)?;
            let out = {
                let _guard = crate::autograd::NoGradGuard::new();
                self.scalar_op_recorded(op, s, k, wrapped)?
            };
            return Ok(map_grad::record_scalar(&r, ScalarOp::Mul, k, true, out));
        }
        self.scalar_op_recorded(op, s, k, wrapped)
    }

    /// [`Tensor::scalar_op_as`] as one node, `k` the scalar the kernel takes.
    fn scalar_op_recorded(&self, op: ScalarOp, s: f64, k: f32, wrapped: bool) -> Result<Tensor> {
        let out = map(
            SCALAR_NAMES[op as usize],
            self,
            MapOp::Scalar(op),
            k,
            self.dtype,
        )?;
        // pow's backward takes the exponent as given (PyTorch's pow_backward: `g s x^(s-1)`,
        // only the f16 kernel of x^(s-1) rounding s - 1); a bound's mask compares with the
        // bound as the forward rounded it.
        let grad_s = if op == ScalarOp::Pow { s as f32 } else { k };
        Ok(map_grad::record_scalar(self, op, grad_s, wrapped, out))
    }

    /// `-x` elementwise ([`UnaryOp::Neg`]).
    pub fn neg(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Neg)
    }
    /// `|x|` elementwise ([`UnaryOp::Abs`]).
    pub fn abs(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Abs)
    }
    /// `e^x` elementwise ([`UnaryOp::Exp`]).
    pub fn exp(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Exp)
    }
    /// Natural logarithm elementwise ([`UnaryOp::Log`]).
    pub fn log(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Log)
    }
    /// Square root elementwise ([`UnaryOp::Sqrt`]).
    pub fn sqrt(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Sqrt)
    }
    /// `max(x, 0)` elementwise ([`UnaryOp::Relu`]), as PyTorch's `clamp_min(x, 0)`: NaN and
    /// `-0.0` pass through.
    pub fn relu(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Relu)
    }
    /// The logistic sigmoid elementwise ([`UnaryOp::Sigmoid`]).
    pub fn sigmoid(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Sigmoid)
    }
    /// Hyperbolic tangent elementwise ([`UnaryOp::Tanh`]).
    pub fn tanh(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Tanh)
    }
    /// Exact (erf) GELU elementwise ([`UnaryOp::Gelu`]).
    pub fn gelu(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Gelu)
    }
    /// GELU's tanh approximation elementwise ([`UnaryOp::GeluTanh`], PyTorch's
    /// `F.gelu(x, approximate='tanh')`).
    pub fn gelu_tanh(&self) -> Result<Tensor> {
        self.unary(UnaryOp::GeluTanh)
    }
    /// `x * sigmoid(x)` elementwise ([`UnaryOp::Silu`], PyTorch's `F.silu`).
    pub fn silu(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Silu)
    }
    /// `log(1 + x)` elementwise, accurate where `1 + x` would round ([`UnaryOp::Log1p`],
    /// PyTorch's `torch.log1p`): `log1p(1e-10)` is 1e-10, where `(1 + x).log()` is 0.
    pub fn log1p(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Log1p)
    }
    /// `x + s` elementwise ([`ScalarOp::Add`]).
    pub fn add_scalar(&self, s: f64) -> Result<Tensor> {
        self.scalar_op(ScalarOp::Add, s)
    }
    /// `x - s` elementwise ([`ScalarOp::Sub`]; [`ScalarOp::RSub`] is `s - x`).
    pub fn sub_scalar(&self, s: f64) -> Result<Tensor> {
        self.scalar_op(ScalarOp::Sub, s)
    }
    /// `x * s` elementwise ([`ScalarOp::Mul`]).
    pub fn mul_scalar(&self, s: f64) -> Result<Tensor> {
        self.scalar_op(ScalarOp::Mul, s)
    }
    /// `x / s` elementwise ([`ScalarOp::Div`]; [`ScalarOp::RDiv`] is `s / x`).
    pub fn div_scalar(&self, s: f64) -> Result<Tensor> {
        self.scalar_op(ScalarOp::Div, s)
    }
    /// `s - x` (PyTorch's `torch.rsub(x, s)`).
    pub fn rsub_scalar(&self, s: f64) -> Result<Tensor> {
        self.scalar_op(ScalarOp::RSub, s)
    }
    /// `s / x`, as PyTorch computes it (`x.reciprocal() * s`: the reciprocal rounded to the
    /// dtype, then the product, so in f16 a tiny `x` gives inf even where `s / x` would fit).
    pub fn rdiv_scalar(&self, s: f64) -> Result<Tensor> {
        // A shader's f32 -> f16 -> f32 round trip is no rounding a compiler must keep (NIR
        // folds it away): f16 stores the reciprocal, then multiplies, each step recorded.
        if self.dtype == DType::F16 && s != 1.0 {
            return self.scalar_op(ScalarOp::RDiv, 1.0)?.mul_scalar(s);
        }
        self.scalar_op(ScalarOp::RDiv, s)
    }
    /// `x ^ s` (PyTorch's `torch.pow(x, s)`: `x^0 = 1`, a negative base with a fractional
    /// exponent is NaN, `0^-s` is infinite).
    pub fn pow_scalar(&self, s: f64) -> Result<Tensor> {
        self.scalar_op(ScalarOp::Pow, s)
    }
}

/// The map family's entry in the kernel-family registry (`ops::families()`).
pub(crate) const FAMILY: crate::runtime::pipeline::Family = crate::runtime::pipeline::Family {
    name: "map",
    shaders: &["map.wgsl", "cast_inplace.wgsl"],
    params: || vec![params_layout(), cast_params_layout()],
    variants: map_variants,
};

/// Every (kernel, dtypes, override constants) combination of this family's kernels, for
/// tests/shaders.rs to translate and validate each.
#[doc(hidden)]
pub fn map_variants() -> Vec<crate::runtime::pipeline::ShaderVariant> {
    let mut v = Vec::new();
    for dts in [
        [DType::F32, DType::F32],
        [DType::F16, DType::F16],
        [DType::F32, DType::F16],
        [DType::F16, DType::F32],
    ] {
        for &(_, code) in MAP_DEFS {
            for contig in [0.0, 1.0] {
                v.push(crate::runtime::pipeline::ShaderVariant::new(
                    &MAP,
                    &dts,
                    &[("OP", code as f64), ("WG", WG as f64), ("CONTIG", contig)],
                ));
            }
        }
    }
    // In place: the same ops over one buffer, and the 4-byte casts.
    for dt in [DType::F32, DType::F16] {
        for &(_, code) in &MAP_DEFS[1..] {
            v.push(crate::runtime::pipeline::ShaderVariant::new(
                &MAP_INPLACE,
                &[dt, dt],
                &[("WG", WG as f64), ("OP", code as f64)],
            ));
        }
    }
    // The other dtype pairs' modules carry the in-place entry point too (never launched with
    // them): listed so every entry point of every module is translated.
    for dts in [
        [DType::F32, DType::F16],
        [DType::F16, DType::F32],
        [DType::I32, DType::I32],
        [DType::I32, DType::F32],
        [DType::F32, DType::I32],
        [DType::I32, DType::F16],
        [DType::F16, DType::I32],
    ] {
        v.push(crate::runtime::pipeline::ShaderVariant::new(
            &MAP_INPLACE,
            &dts,
            &[("WG", WG as f64), ("OP", 1.0)],
        ));
    }
    for dts in [[DType::F32, DType::I32], [DType::I32, DType::F32]] {
        v.push(crate::runtime::pipeline::ShaderVariant::new(
            &CAST_INPLACE,
            &dts,
            &[("WG", WG as f64)],
        ));
    }
    // i32 only copies and casts.
    let int_pairs = [
        [DType::I32, DType::I32],
        [DType::I32, DType::F32],
        [DType::F32, DType::I32],
        [DType::I32, DType::F16],
        [DType::F16, DType::I32],
    ];
    for dts in int_pairs {
        for contig in [0.0, 1.0] {
            v.push(crate::runtime::pipeline::ShaderVariant::new(
                &MAP,
                &dts,
                &[("OP", 0.0), ("WG", WG as f64), ("CONTIG", contig)],
            ));
        }
    }
    // The GPU's vec4 entry points (src/ops/elementwise_vec4.rs), in every one of those modules.
    let float_pairs = [
        [DType::F32, DType::F32],
        [DType::F16, DType::F16],
        [DType::F32, DType::F16],
        [DType::F16, DType::F32],
    ];
    v.extend(vec4::map_vec4_variants(&float_pairs, &int_pairs));
    v
}

/// The params struct's layout, checked against the shader's `struct Params` in tests/shaders.rs.
#[doc(hidden)]
pub fn params_layout() -> crate::runtime::pipeline::ParamsLayout {
    crate::runtime::pipeline::params_layout!(
        MAP,
        &[DType::F32, DType::F32],
        MapParams {
            numel,
            rank,
            offset,
            scalar,
            shape,
            strides,
            base,
            _pad0,
            _pad1,
            _pad2
        }
    )
}

/// The in-place cast shader's `struct Params`, which mirrors the map kernel's.
#[doc(hidden)]
pub fn cast_params_layout() -> crate::runtime::pipeline::ParamsLayout {
    crate::runtime::pipeline::params_layout!(
        CAST_INPLACE,
        &[DType::F32, DType::I32],
        MapParams {
            numel,
            rank,
            offset,
            scalar,
            shape,
            strides,
            base,
            _pad0,
            _pad1,
            _pad2
        }
    )
}

/// The scalar `s` as the kernel takes it for `op` on a `dtype` tensor: f32, except on f16
/// tensors, where PyTorch converts it to the tensor's type first: clamp and its backward
/// (`x > min`) compare with an f16 bound (f16(0.1) is at the bound 0.1: a 0 gradient), `pow`
/// raises to f16(s) (`exp_scalar.to<scalar_t>()`: f16 10^2.7 is 500.25 there, 501.25 with an
/// f32 exponent), and an exponent past f16's range is an error, as PyTorch's conversion.
pub(crate) fn kernel_scalar(op: ScalarOp, dtype: DType, s: f64) -> Result<f32> {
    match (op, dtype) {
        (ScalarOp::Max | ScalarOp::Min, DType::F16) => Ok(crate::dtype::f16_of(s).to_f32()),
        (ScalarOp::Pow, DType::F16) => {
            // c10's checked_convert: a finite value past f16's max is refused.
            crate::tensor::check_fill("pow_scalar", s, dtype)?;
            Ok(crate::dtype::f16_of(s).to_f32())
        }
        _ => Ok(s as f32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every op has its own code, the table covers every op, and the codes are the rows.
    #[test]
    fn map_codes_are_distinct_and_complete() {
        assert_eq!(MAP_DEFS.len(), 1 + UNARY_NAMES.len() + SCALAR_NAMES.len());
        for (i, (name, code)) in MAP_DEFS.iter().enumerate() {
            assert_eq!(*code as usize, i, "{name}");
        }
        let mut names: Vec<&str> = MAP_DEFS.iter().map(|d| d.0).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), MAP_DEFS.len());
        // The last unary op and the scalars' ends: the enums and the table in one order.
        assert_eq!(MapOp::Unary(UnaryOp::GeluTanh).code(), 13);
        assert_eq!(MapOp::Scalar(ScalarOp::Add).code(), 14);
        assert_eq!(MapOp::Scalar(ScalarOp::Pow).code(), 22);
    }
}
