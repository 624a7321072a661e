//! GEMM conformance: `gemm` (alpha/beta with a broadcast C, every bias x activation epilogue,
//! forced and automatic split-k), `gemm_into` and numpy `matmul` (1-D operands), on batched
//! operands whose batch dims broadcast (`[4,1,m,k] x [1,3,k,n]`), in all four transpose
//! combinations (`.transpose(-1, -2)` views, so the inner stride is not 1) and on sliced,
//! permuted and broadcast views — for both kernels: the default device (the `sg8` subgroup
//! kernel on lavapipe) and a device without subgroups (the portable `tiled` kernel); the GPU
//! plan's workgroup-memory kernel (`gemm_wg`) runs a share of the cases in [`wg`].
//!
//! Error bound (f32 accumulation; u = 2^-24 = EPS32 / 2; S = sum_k |a_ik b_kj|; K the
//! reduction length). Each accumulation step `acc = fma(a, b, acc)` rounds at most twice (WGSL
//! lets `fma` round the product and the sum separately), each time by at most u times a value
//! bounded by S. Split-k sums S slices of about K/S steps and then the S partials: at most
//! ceil(K/S) + S <= K + 1 roundings along any path. So the product errs by at most
//! `(K + 2) * EPS32 * S` (the `+ 2` also absorbs the (1 - K u)^-1 of the classical bound). The
//! epilogue `alpha * acc + beta * c + bias` adds at most four roundings (alpha product, beta
//! product, two adds) of values bounded by `T = |alpha| S + |beta c| + |bias|`:
//!
//!     |pre - exact_pre| <= e = EPS32 * ((K + 2) |alpha| S + 3 T)
//!
//! (3 * EPS32 = 6u covers the four roundings with margin). An activation with Lipschitz
//! constant L (relu 1, sigmoid 1/4, tanh 1, exact GELU 1.13 = max of Phi(x) + x phi(x)) maps it
//! to L e, plus the activation's own f32 error (`elementwise::unary_err32`, the same bounds as
//! the standalone unary ops, evaluated at |x| + e). f16: inputs are f16 values (the reference
//! uses exactly those), accumulation and epilogue are f32 as above, then one final rounding to
//! f16 (`check::out_round`: one f16 ulp, none when the exact result is representable).
//!
//! Exact cases: small-integer inputs, integer alpha and beta, no or relu activation, and
//! T < 2^24 make every product, partial sum (in any order and any split) and epilogue step an
//! integer below 2^24, so the f32 result is exact: the tolerance is 0 (f16 outputs: 0 when
//! the integer is an f16 value).

use proptest::prelude::*;
use wgtensor::ops::gemm::{plan, GemmPlan};
use wgtensor::ops::{gemm, gemm_into, Activation, Bias, GemmOptions, UnaryOp};
use wgtensor::{DType, Device, Tensor};

use crate::check::{compare, compare_bits, fetch_async, ok, out_round, EPS32};
use crate::common::reference::{self, BiasSide, GemmRef};
use crate::common::{self, device, portable_device, require_f16, ViewOp};
use crate::elementwise::unary_err32;
#[cfg(not(target_arch = "wasm32"))]
use crate::strategies::run_async;
use crate::strategies::{broadcast_source, plan_view, view_kind, Dist, Operand, Rng, ViewKind};

// Case counts (each case costs ~1-10 ms; the large and long-K ones more). Both kernels run every
// strategy; f16 shares the kernels' code paths and runs fewer cases.
const CASES_F32: u32 = 48;
const CASES_F16: u32 = 20;
const CASES_EXACT_F32: u32 = 24;
const CASES_EXACT_F16: u32 = 12;
const CASES_LARGE_F32: u32 = 3;
const CASES_LARGE_F16: u32 = 2;
const CASES_SPLITK_F32: u32 = 16;
const CASES_SPLITK_F16: u32 = 8;
const CASES_SPLITK_EXACT_F32: u32 = 10;
const CASES_MATMUL_F32: u32 = 32;
const CASES_MATMUL_F16: u32 = 12;

/// 2^24: integers below it are exact in f32.
const F32_INT_LIMIT: f64 = 16_777_216.0;

const ACTIVATIONS: [Activation; 5] = [
    Activation::None,
    Activation::Relu,
    Activation::Gelu,
    Activation::Sigmoid,
    Activation::Tanh,
];

// ---------------------------------------------------------------------------------------------
// Problems
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub(crate) struct GemmProblem {
    /// `[..., M, K]`.
    a: Operand,
    /// `[..., K, N]`.
    b: Operand,
    alpha: f32,
    beta: f32,
    /// `gemm`: broadcastable to the output. `gemm_into`: the contiguous target (a view that
    /// starts at a non-zero offset when `kind` is `Sliced`).
    c: Option<Operand>,
    bias: Option<(BiasSide, Operand)>,
    act: Activation,
    split_k: Option<u32>,
    /// Run `gemm_into(c, a, b, alpha, beta)` instead of `gemm`.
    into: bool,
}

impl GemmProblem {
    fn operands(&self) -> impl Iterator<Item = &Operand> {
        [&self.a, &self.b]
            .into_iter()
            .chain(self.c.as_ref())
            .chain(self.bias.as_ref().map(|(_, t)| t))
    }

    /// True when the f32 computation is exact (see the module doc; the per-element magnitude
    /// condition T < 2^24 is checked in [`gemm_tol`]).
    fn exact(&self) -> bool {
        self.operands().all(|o| o.dist.is_int())
            && self.alpha.fract() == 0.0
            && self.beta.fract() == 0.0
            && matches!(self.act, Activation::None | Activation::Relu)
    }

    fn dtype(&self) -> DType {
        self.a.dtype
    }
}

/// A matrix operand of logical shape `[..., rows, cols]`. With `trans` the data is laid out as
/// `[..., cols, rows]` (then viewed per `kind`) and the operand is its `.transpose(-1, -2)`:
/// unit stride along the rows, stride >= rows along the columns.
fn mat_operand(
    dtype: DType,
    shape: &[usize],
    trans: bool,
    kind: ViewKind,
    dist: Dist,
    seed: u64,
) -> Operand {
    let mut rng = Rng::new(seed);
    let r = shape.len();
    let mut inner = shape.to_vec();
    if trans {
        inner.swap(r - 2, r - 1);
    }
    let (parent, mut ops) = plan_view(&inner, kind, &mut rng);
    if trans {
        ops.push(ViewOp::Transpose(-1, -2));
    }
    let data = (0..reference::numel(&parent))
        .map(|_| common::round_to_dtype(dtype, dist.sample(&mut rng)))
        .collect();
    Operand {
        dtype,
        shape: shape.to_vec(),
        kind,
        parent,
        ops,
        dist,
        seed,
        data,
    }
}

/// A `gemm_into` target of `shape`: contiguous, or (`sliced`) rows `start..` of a parent with
/// 1..=3 extra leading rows, i.e. contiguous but starting at a non-zero element offset. The
/// elements of the parent outside the view must survive the call.
fn into_target(dtype: DType, shape: &[usize], sliced: bool, dist: Dist, seed: u64) -> Operand {
    let mut rng = Rng::new(seed);
    let (parent, ops, kind) = if sliced {
        let extra = 1 + rng.below(3);
        let start = 1 + rng.below(extra);
        let mut parent = shape.to_vec();
        parent[0] += extra;
        let op = ViewOp::Narrow {
            dim: 0,
            start,
            len: shape[0],
        };
        (parent, vec![op], ViewKind::Sliced)
    } else {
        (shape.to_vec(), vec![], ViewKind::Contiguous)
    };
    let data = (0..reference::numel(&parent))
        .map(|_| common::round_to_dtype(dtype, dist.sample(&mut rng)))
        .collect();
    Operand {
        dtype,
        shape: shape.to_vec(),
        kind,
        parent,
        ops,
        dist,
        seed,
        data,
    }
}

/// Everything a problem is built from (drawn by proptest, shrinkable).
#[derive(Clone, Debug)]
struct Spec {
    m: usize,
    n: usize,
    k: usize,
    a_batch: Vec<usize>,
    b_batch: Vec<usize>,
    trans: (bool, bool),
    kinds: [ViewKind; 4],
    dist: Dist,
    alpha: f32,
    beta: f32,
    /// 0: no C; 1: C of the full output shape; 2: C of a shape that broadcasts to it (`[N]`,
    /// `[M, 1]`, `[1, N]`, no batch dims, a scalar, ...).
    c_mode: u8,
    bias: Option<BiasSide>,
    act: Activation,
    split_k: Option<u32>,
    into: bool,
    seed: u64,
}

fn build(dtype: DType, s: Spec) -> GemmProblem {
    let mut rng = Rng::new(s.seed);
    let mut seed = || rng.next_u64();
    let a_shape = [s.a_batch.clone(), vec![s.m, s.k]].concat();
    let b_shape = [s.b_batch.clone(), vec![s.k, s.n]].concat();
    let a = mat_operand(dtype, &a_shape, s.trans.0, s.kinds[0], s.dist, seed());
    let b = mat_operand(dtype, &b_shape, s.trans.1, s.kinds[1], s.dist, seed());
    let batch = reference::broadcast_shapes(&s.a_batch, &s.b_batch).expect("batch dims broadcast");
    let out_shape = [batch, vec![s.m, s.n]].concat();
    if s.into {
        let sliced = s.kinds[2] != ViewKind::Contiguous;
        let c = into_target(dtype, &out_shape, sliced, s.dist, seed());
        return GemmProblem {
            a,
            b,
            alpha: s.alpha,
            beta: s.beta,
            c: Some(c),
            bias: None,
            act: Activation::None,
            split_k: s.split_k,
            into: true,
        };
    }
    let c = match s.c_mode {
        0 => None,
        mode => {
            let c_seed = seed();
            let shape = if mode == 1 {
                out_shape.clone()
            } else {
                broadcast_source(&out_shape, &mut Rng::new(c_seed))
            };
            Some(Operand::new(dtype, &shape, s.kinds[2], s.dist, c_seed))
        }
    };
    let bias = s.bias.map(|side| {
        let len = if side == BiasSide::Column { s.n } else { s.m };
        (
            side,
            Operand::new(dtype, &[len], s.kinds[3], s.dist, seed()),
        )
    });
    GemmProblem {
        a,
        b,
        alpha: s.alpha,
        beta: s.beta,
        c,
        bias,
        act: s.act,
        split_k: s.split_k,
        into: false,
    }
}

// ---------------------------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------------------------

/// Sizes around the kernels' tile edges (32 and 64, 4-wide and 16-row blocks, 128).
const TILE_EDGES: [usize; 12] = [31, 32, 33, 63, 64, 65, 95, 96, 97, 127, 128, 129];

/// M, N or K of an unbatched problem, 1..=300: size 1 and small ragged sizes often, tile
/// edges, and the whole range.
fn gemm_dim() -> BoxedStrategy<usize> {
    prop_oneof![
        2 => Just(1usize),
        3 => 2usize..=9,
        4 => 10usize..=100,
        2 => prop::sample::select(&TILE_EDGES[..]),
        2 => 101usize..=300,
    ]
    .boxed()
}

/// M, N or K of a batched problem (up to 16 batch entries): at most 70 so a case stays cheap.
fn batched_dim() -> BoxedStrategy<usize> {
    prop_oneof![
        2 => Just(1usize),
        3 => 2usize..=9,
        4 => 10usize..=70,
        1 => prop::sample::select(&TILE_EDGES[..6]),
    ]
    .boxed()
}

/// Batch dims of A and B: none, or two shapes that broadcast to a batch shape with dims 1..=4
/// and at most `max` entries (leading dims dropped and dims set to 1 independently per
/// operand: `[4, 1] x [1, 3]`, `[2, 3] x [3]`, ...).
fn batch_pair(max: usize) -> BoxedStrategy<(Vec<usize>, Vec<usize>)> {
    prop_oneof![
        1 => Just((vec![], vec![])),
        2 => (prop::collection::vec(1usize..=4, 1..=3), any::<u64>())
            .prop_filter("batch too large", move |(s, _)| s.iter().product::<usize>() <= max)
            .prop_map(|(s, seed)| {
                let mut rng = Rng::new(seed);
                (broadcast_source(&s, &mut rng), broadcast_source(&s, &mut rng))
            }),
    ]
    .boxed()
}

pub(crate) type Sizes = (usize, usize, usize, Vec<usize>, Vec<usize>);

/// Unbatched problems over the full 1..=300 range, or batched ones with smaller matrices.
pub(crate) fn general_sizes() -> BoxedStrategy<Sizes> {
    prop_oneof![
        (gemm_dim(), gemm_dim(), gemm_dim()).prop_map(|(m, n, k)| (m, n, k, vec![], vec![])),
        (batched_dim(), batched_dim(), batched_dim(), batch_pair(16))
            .prop_map(|(m, n, k, (ab, bb))| (m, n, k, ab, bb)),
    ]
    .boxed()
}

/// All three dims in 100..=300 (no batch): long K loops over many full and ragged tiles.
pub(crate) fn large_sizes() -> BoxedStrategy<Sizes> {
    (100usize..=300, 100usize..=300, 100usize..=300)
        .prop_map(|(m, n, k)| (m, n, k, vec![], vec![]))
        .boxed()
}

/// Small M, N and K up to 20000 (split-k territory), with an occasional small batch.
pub(crate) fn splitk_sizes() -> BoxedStrategy<Sizes> {
    let mn = || prop_oneof![2 => Just(1usize), 6 => 2usize..=24, 1 => 31usize..=33];
    let k = prop_oneof![
        1 => 1usize..=1023,
        4 => 1024usize..=20_000,
        1 => prop::sample::select(vec![1024usize, 4096, 8192, 16_384, 20_000]),
    ];
    (mn(), mn(), k, batch_pair(2))
        .prop_map(|(m, n, k, (ab, bb))| (m, n, k, ab, bb))
        .boxed()
}

/// Values for a problem: with a saturating activation, values whose products sum to O(1..10)
/// so sigmoid, tanh and GELU are tested off their flat tails; f16: magnitudes that keep
/// 300-term (and, for split-k, 20000-term random-sign) sums far below 65504.
fn dists(dtype: DType, act: Activation, long_k: bool) -> BoxedStrategy<Dist> {
    match (act, dtype) {
        (Activation::Gelu | Activation::Sigmoid | Activation::Tanh, _) => prop_oneof![
            Just(Dist::SmallInt(-2, 2)),
            Just(Dist::Uniform(-1.0, 1.0)),
            Just(Dist::SignedLog(-3.0, 0.0)),
        ]
        .boxed(),
        (_, DType::F32 | DType::I32) => prop_oneof![
            Just(Dist::SmallInt(-8, 8)),
            Just(Dist::Uniform(-100.0, 100.0)),
            Just(Dist::SignedLog(-4.0, 2.0)),
        ]
        .boxed(),
        (_, DType::F16) if long_k => prop_oneof![
            Just(Dist::SmallInt(-3, 3)),
            Just(Dist::Uniform(-1.0, 1.0)),
            Just(Dist::SignedLog(-3.0, 0.0)),
        ]
        .boxed(),
        (_, DType::F16) => prop_oneof![
            Just(Dist::SmallInt(-4, 4)),
            Just(Dist::Uniform(-2.0, 2.0)),
            Just(Dist::SignedLog(-3.0, 0.3)),
        ]
        .boxed(),
    }
}

/// alpha, beta: 1, small integers (0 included), or arbitrary values in [-2, 2).
fn scalar() -> BoxedStrategy<f32> {
    prop_oneof![
        2 => Just(1.0f32),
        2 => (-3i32..=3).prop_map(|v| v as f32),
        1 => -2.0f32..2.0,
    ]
    .boxed()
}

fn int_scalar() -> BoxedStrategy<f32> {
    prop_oneof![2 => Just(1.0f32), 3 => (-3i32..=3).prop_map(|v| v as f32)].boxed()
}

fn bias_side() -> BoxedStrategy<Option<BiasSide>> {
    prop_oneof![
        2 => Just(None),
        1 => Just(Some(BiasSide::Column)),
        1 => Just(Some(BiasSide::Row)),
    ]
    .boxed()
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Any values, any epilogue, automatic split or a forced small split.
    General,
    /// Small integers, integer alpha/beta, no or relu activation.
    Exact,
    /// Long K: automatic or forced split factors (dividing K or not, even above K).
    SplitK,
    /// Long K with exact inputs.
    SplitKExact,
}

pub(crate) fn gemm_problem(
    dtype: DType,
    sizes: BoxedStrategy<Sizes>,
    mode: Mode,
) -> impl Strategy<Value = GemmProblem> {
    let exact = matches!(mode, Mode::Exact | Mode::SplitKExact);
    let long_k = matches!(mode, Mode::SplitK | Mode::SplitKExact);
    let acts: &'static [Activation] = if exact {
        &ACTIVATIONS[..2]
    } else {
        &ACTIVATIONS[..]
    };
    let split = if long_k {
        prop_oneof![
            3 => Just(None),
            1 => Just(Some(1u32)),
            3 => (2u32..=9).prop_map(Some),
            1 => prop::sample::select(vec![13u32, 64, 100, 333]).prop_map(Some),
        ]
        .boxed()
    } else {
        prop_oneof![3 => Just(None), 1 => (1u32..=7).prop_map(Some)].boxed()
    };
    let (alpha, beta) = if exact {
        (int_scalar(), int_scalar())
    } else {
        (scalar(), scalar())
    };
    let layout = (
        (any::<bool>(), any::<bool>()),
        [view_kind(), view_kind(), view_kind(), view_kind()],
    );
    let epilogue = (
        alpha,
        beta,
        0u8..=2,
        bias_side(),
        split,
        prop::bool::weighted(0.15),
    );
    (sizes, prop::sample::select(acts))
        .prop_flat_map(move |(sz, act)| {
            let dist = if exact {
                match dtype {
                    DType::F32 | DType::I32 => Just(Dist::SmallInt(-8, 8)).boxed(),
                    DType::F16 => Just(Dist::SmallInt(-3, 3)).boxed(),
                }
            } else {
                dists(dtype, act, long_k)
            };
            (
                Just(sz),
                Just(act),
                dist,
                layout.clone(),
                epilogue.clone(),
                any::<u64>(),
            )
        })
        .prop_map(
            move |(
                (m, n, k, a_batch, b_batch),
                act,
                dist,
                (trans, kinds),
                (alpha, beta, c_mode, bias, split_k, into),
                seed,
            )| {
                let spec = Spec {
                    m,
                    n,
                    k,
                    a_batch,
                    b_batch,
                    trans,
                    kinds,
                    dist,
                    alpha,
                    beta,
                    c_mode,
                    bias,
                    act,
                    split_k,
                    into,
                    seed,
                };
                build(dtype, spec)
            },
        )
}

// ---------------------------------------------------------------------------------------------
// Checking
// ---------------------------------------------------------------------------------------------

/// The f32 error bound of the activation of a value `x` known to within `e` (module doc).
fn act_err32(act: Activation, x: f64, want: f64, e: f64) -> f64 {
    let (lipschitz, op) = match act {
        Activation::None => return e,
        Activation::Relu => (1.0, UnaryOp::Relu),
        Activation::Gelu => (1.13, UnaryOp::Gelu),
        Activation::Sigmoid => (0.25, UnaryOp::Sigmoid),
        Activation::Tanh => (1.0, UnaryOp::Tanh),
    };
    lipschitz * e + unary_err32(op, x.abs() + e, want.abs() + lipschitz * e)
}

/// Tolerance of output element `i` (module doc): exact cases 0 in f32, otherwise
/// `EPS32 * ((K + 2) |alpha| S + 3 T)` through the activation; then the output rounding.
fn gemm_tol(
    dtype: DType,
    k: usize,
    alpha: f32,
    act: Activation,
    exact: bool,
    r: &GemmRef,
    i: usize,
) -> f64 {
    let alpha = (alpha as f64).abs();
    let t = alpha * r.abs_prod[i] + r.abs_epi[i];
    let err32 = if exact && t < F32_INT_LIMIT {
        0.0
    } else {
        let e = EPS32 * ((k as f64 + 2.0) * alpha * r.abs_prod[i] + 3.0 * t);
        act_err32(act, r.pre[i], r.out[i], e)
    };
    out_round(dtype, r.out[i], err32)
}

fn dims(p: &GemmProblem) -> (usize, usize, usize, usize) {
    let (ra, rb) = (p.a.shape.len(), p.b.shape.len());
    let (m, k, n) = (p.a.shape[ra - 2], p.a.shape[ra - 1], p.b.shape[rb - 1]);
    let batch = reference::broadcast_shapes(&p.a.shape[..ra - 2], &p.b.shape[..rb - 2])
        .expect("batch dims broadcast");
    (m, n, k, reference::numel(&batch))
}

/// Runs the problem on `dev` and checks it against the reference. With `must_be_exact`, also
/// fails unless the problem qualifies for the zero tolerance.
pub(crate) async fn check_gemm(
    dev: &Device,
    p: &GemmProblem,
    must_be_exact: bool,
) -> Result<(), TestCaseError> {
    let dtype = p.dtype();
    let (m, n, k, batch) = dims(p);
    let pl = plan(dev, m, n, k, batch, p.split_k).unwrap();
    if must_be_exact {
        prop_assert!(p.exact(), "exact-mode problem is not exact: {:?}", p);
    }
    if let Some(s) = p.split_k {
        // A forced split is honoured: min(S, K) slices of ceil(K / S) steps, the last shorter.
        let want = (k as u32).div_ceil((k as u32).div_ceil(s.clamp(1, k as u32)));
        prop_assert_eq!(pl.splits, want, "forced split_k {} not honoured", s);
    }
    let what = format!(
        "{} {:?} x {:?} ({:?})",
        if p.into { "gemm_into" } else { "gemm" },
        p.a.shape,
        p.b.shape,
        pl
    );
    let a = p.a.tensor(dev);
    let b = p.b.tensor(dev);
    let c_vals = p.c.as_ref().map(|c| (c.values(), c.shape.clone()));
    let bias_vals = p.bias.as_ref().map(|(side, t)| (*side, t.values()));
    let r = reference::gemm(
        &p.a.values(),
        &p.a.shape,
        &p.b.values(),
        &p.b.shape,
        p.alpha as f64,
        p.beta as f64,
        c_vals.as_ref().map(|(v, s)| (&v[..], &s[..])),
        bias_vals.as_ref().map(|(side, v)| (*side, &v[..])),
        p.act,
    );
    // f16 holds nothing beyond 65504. Random-sign sums stay far below it (see `dists`), but
    // when both operands are broadcast along K the K products add up coherently and the exact
    // result can leave f16's range: the kernel's inf is then right and no comparison applies.
    if dtype == DType::F16 && r.out.iter().any(|v| v.abs() > 65504.0) {
        return Err(TestCaseError::reject(
            "the exact result is outside f16's range",
        ));
    }
    let got = if p.into {
        let c = p.c.as_ref().expect("gemm_into has a target");
        let parent = common::upload(dev, &c.data, &c.parent, dtype);
        let mut target = parent.clone();
        for op in &c.ops {
            target = ok("target view", op.apply(&target))?;
        }
        ok(
            &what,
            gemm_into(&target, &a, &b, p.alpha.into(), p.beta.into()),
        )?;
        // Elements of the parent outside the target view are untouched.
        let all = fetch_async("gemm_into parent", &parent, &c.parent).await?;
        let inner: usize = c.shape[1..].iter().product();
        let start = match c.ops.first() {
            Some(ViewOp::Narrow { start, .. }) => start * inner,
            _ => 0,
        };
        let end = start + c.numel();
        let outside: Vec<usize> = (0..all.len()).filter(|&i| i < start || i >= end).collect();
        let got_out: Vec<f64> = outside.iter().map(|&i| all[i]).collect();
        let want_out: Vec<f64> = outside.iter().map(|&i| c.data[i]).collect();
        compare_bits(
            &format!("{what}: parent outside the target"),
            &[outside.len()],
            dtype,
            &got_out,
            &want_out,
        )?;
        fetch_async(&what, &target, &r.shape).await?
    } else {
        let c = p.c.as_ref().map(|c| c.tensor(dev));
        let bias_t = p.bias.as_ref().map(|(_, t)| t.tensor(dev));
        let bias = match (&p.bias, &bias_t) {
            (Some((BiasSide::Column, _)), Some(t)) => Some(Bias::PerColumn(t)),
            (Some((BiasSide::Row, _)), Some(t)) => Some(Bias::PerRow(t)),
            _ => None,
        };
        let opts = GemmOptions {
            alpha: p.alpha.into(),
            beta: p.beta.into(),
            c: c.as_ref(),
            bias,
            activation: p.act,
            split_k: p.split_k,
        };
        let y = ok(&what, gemm(&a, &b, &opts))?;
        prop_assert_eq!(y.dtype(), dtype);
        fetch_async(&what, &y, &r.shape).await?
    };
    let exact = p.exact();
    compare(&what, &r.shape, &got, &r.out, |i| {
        gemm_tol(dtype, k, p.alpha, p.act, exact, &r, i)
    })
}

#[cfg(not(target_arch = "wasm32"))]
fn gemm_cases(dev: &Device, cases: u32, dtype: DType, sizes: BoxedStrategy<Sizes>, mode: Mode) {
    let exact = matches!(mode, Mode::Exact | Mode::SplitKExact);
    run_async(cases, gemm_problem(dtype, sizes, mode), async |p| {
        check_gemm(dev, p, exact).await
    });
}

// ---------------------------------------------------------------------------------------------
// Tests: general, exact, large, split-k — each on both kernels
// ---------------------------------------------------------------------------------------------

/// The kernels under test: the portable device never picks `sg8`; the default device picks it
/// exactly when the adapter runs 8-lane subgroups (lavapipe on AVX2 does).
#[test]
fn gemm_kernel_selection() {
    let p = plan(portable_device(), 100, 100, 100, 1, None).unwrap();
    assert!(!p.sg8(), "the device without subgroups planned {p:?}");
    let dev = device();
    let info = dev.adapter_info();
    let has_sg8 = dev.features().contains(wgpu::Features::SUBGROUP)
        && info.subgroup_min_size == 8
        && info.subgroup_max_size == 8;
    let p = plan(dev, 100, 100, 100, 1, None).unwrap();
    assert_eq!(p.sg8(), has_sg8, "{p:?} on {info:?}");
    eprintln!(
        "gemm kernels under test: default device {}, portable device tiled",
        if p.sg8() { "sg8" } else { "tiled" }
    );
}

#[test]
fn gemm_f32() {
    gemm_cases(
        device(),
        CASES_F32,
        DType::F32,
        general_sizes(),
        Mode::General,
    );
}

#[test]
fn gemm_tiled_f32() {
    gemm_cases(
        portable_device(),
        CASES_F32,
        DType::F32,
        general_sizes(),
        Mode::General,
    );
}

#[test]
fn gemm_f16() {
    require_f16(device());
    gemm_cases(
        device(),
        CASES_F16,
        DType::F16,
        general_sizes(),
        Mode::General,
    );
}

#[test]
fn gemm_tiled_f16() {
    require_f16(portable_device());
    gemm_cases(
        portable_device(),
        CASES_F16,
        DType::F16,
        general_sizes(),
        Mode::General,
    );
}

#[test]
fn gemm_exact_f32() {
    gemm_cases(
        device(),
        CASES_EXACT_F32,
        DType::F32,
        general_sizes(),
        Mode::Exact,
    );
}

#[test]
fn gemm_tiled_exact_f32() {
    gemm_cases(
        portable_device(),
        CASES_EXACT_F32,
        DType::F32,
        general_sizes(),
        Mode::Exact,
    );
}

#[test]
fn gemm_exact_f16() {
    require_f16(device());
    gemm_cases(
        device(),
        CASES_EXACT_F16,
        DType::F16,
        general_sizes(),
        Mode::Exact,
    );
}

#[test]
fn gemm_tiled_exact_f16() {
    require_f16(portable_device());
    gemm_cases(
        portable_device(),
        CASES_EXACT_F16,
        DType::F16,
        general_sizes(),
        Mode::Exact,
    );
}

#[test]
fn gemm_large_f32() {
    gemm_cases(
        device(),
        CASES_LARGE_F32,
        DType::F32,
        large_sizes(),
        Mode::General,
    );
}

#[test]
fn gemm_tiled_large_f32() {
    gemm_cases(
        portable_device(),
        CASES_LARGE_F32,
        DType::F32,
        large_sizes(),
        Mode::General,
    );
}

#[test]
fn gemm_large_f16() {
    require_f16(device());
    gemm_cases(
        device(),
        CASES_LARGE_F16,
        DType::F16,
        large_sizes(),
        Mode::General,
    );
}

#[test]
fn gemm_tiled_large_f16() {
    require_f16(portable_device());
    gemm_cases(
        portable_device(),
        CASES_LARGE_F16,
        DType::F16,
        large_sizes(),
        Mode::General,
    );
}

#[test]
fn gemm_splitk_f32() {
    gemm_cases(
        device(),
        CASES_SPLITK_F32,
        DType::F32,
        splitk_sizes(),
        Mode::SplitK,
    );
}

#[test]
fn gemm_tiled_splitk_f32() {
    gemm_cases(
        portable_device(),
        CASES_SPLITK_F32,
        DType::F32,
        splitk_sizes(),
        Mode::SplitK,
    );
}

#[test]
fn gemm_splitk_f16() {
    require_f16(device());
    gemm_cases(
        device(),
        CASES_SPLITK_F16,
        DType::F16,
        splitk_sizes(),
        Mode::SplitK,
    );
}

#[test]
fn gemm_tiled_splitk_f16() {
    require_f16(portable_device());
    gemm_cases(
        portable_device(),
        CASES_SPLITK_F16,
        DType::F16,
        splitk_sizes(),
        Mode::SplitK,
    );
}

#[test]
fn gemm_splitk_exact_f32() {
    gemm_cases(
        device(),
        CASES_SPLITK_EXACT_F32,
        DType::F32,
        splitk_sizes(),
        Mode::SplitKExact,
    );
}

#[test]
fn gemm_tiled_splitk_exact_f32() {
    gemm_cases(
        portable_device(),
        CASES_SPLITK_EXACT_F32,
        DType::F32,
        splitk_sizes(),
        Mode::SplitKExact,
    );
}

/// The broadcast example `[4,1,m,k] x [1,3,k,n] -> [4,3,m,n]` with ragged sizes, both
/// transposes, a `[M, 1]` C and each activation, on both kernels, unsplit and split.
#[test]
fn gemm_broadcast_batch_fixed() {
    for dev in [device(), portable_device()] {
        for (i, act) in ACTIVATIONS.into_iter().enumerate() {
            for split_k in [None, Some(3)] {
                let spec = Spec {
                    m: 37,
                    n: 19,
                    k: 45,
                    a_batch: vec![4, 1],
                    b_batch: vec![1, 3],
                    trans: (i % 2 == 1, i % 3 == 1),
                    kinds: [ViewKind::Contiguous; 4],
                    dist: Dist::Uniform(-1.0, 1.0),
                    alpha: 0.75,
                    beta: -1.5,
                    c_mode: 0,
                    bias: Some(BiasSide::Row),
                    act,
                    split_k,
                    into: false,
                    seed: 11 + i as u64,
                };
                let mut p = build(DType::F32, spec);
                p.c = Some(Operand::new(
                    DType::F32,
                    &[37, 1],
                    ViewKind::Contiguous,
                    Dist::Uniform(-1.0, 1.0),
                    5,
                ));
                if let Err(e) = pollster::block_on(check_gemm(dev, &p, false)) {
                    panic!("{e}\nproblem: {p:#?}");
                }
            }
        }
    }
}

/// `gemm_into` a target that is contiguous but starts at a non-zero offset (rows of a larger
/// tensor, odd element offsets for f16 too): the result lands in the view, the rest of the
/// parent is untouched; batched, unsplit and split, both kernels.
#[test]
fn gemm_into_offset_target() {
    for dev in [device(), portable_device()] {
        for dtype in [DType::F32, DType::F16] {
            if dtype == DType::F16 && !dev.supports_f16() {
                continue;
            }
            for (i, k) in [3usize, 70, 1100].into_iter().enumerate() {
                let int = Dist::SmallInt(-3, 3);
                let seed = 100 + i as u64;
                let p = GemmProblem {
                    a: mat_operand(dtype, &[2, 9, k], i == 1, ViewKind::Contiguous, int, seed),
                    b: mat_operand(dtype, &[k, 13], false, ViewKind::Sliced, int, seed + 1),
                    alpha: 2.0,
                    beta: if i == 2 { 0.0 } else { -1.0 },
                    c: Some(into_target(dtype, &[2, 9, 13], true, int, seed + 2)),
                    bias: None,
                    act: Activation::None,
                    split_k: None,
                    into: true,
                };
                if let Err(e) = pollster::block_on(check_gemm(dev, &p, true)) {
                    panic!("{e}\nproblem: {p:#?}");
                }
            }
        }
    }
}

/// beta = 0 ignores C (BLAS, PyTorch `addmm`): NaN and inf in a C tensor or in the `gemm_into`
/// target are not propagated, unsplit and split (K = 1100 splits automatically), on both
/// kernels. Small-integer A and B, so the result is exact.
#[test]
fn gemm_beta_zero_ignores_c() {
    let (m, n) = (5, 6);
    let poison: Vec<f64> = (0..m * n)
        .map(|i| [f64::NAN, f64::INFINITY, f64::NEG_INFINITY][i % 3])
        .collect();
    for k in [7, 1100] {
        let int = Dist::SmallInt(-3, 3);
        let a = Operand::new(DType::F32, &[m, k], ViewKind::Contiguous, int, 1);
        let b = Operand::new(DType::F32, &[k, n], ViewKind::Contiguous, int, 2);
        let (want, _, shape) = reference::matmul(&a.values(), &a.shape, &b.values(), &b.shape);
        for dev in [device(), portable_device()] {
            let (at, bt) = (a.tensor(dev), b.tensor(dev));
            let what = format!("beta 0, {:?}", plan(dev, m, n, k, 1, None));
            let c = common::upload(dev, &poison, &[m, n], DType::F32);
            let opts = GemmOptions {
                beta: 0.0,
                c: Some(&c),
                ..Default::default()
            };
            let got = common::download(&gemm(&at, &bt, &opts).unwrap()).unwrap();
            compare_bits(&format!("gemm {what}"), &shape, DType::F32, &got, &want)
                .unwrap_or_else(|e| panic!("{e}"));
            gemm_into(&c, &at, &bt, 1.0, 0.0).unwrap();
            let got = common::download(&c).unwrap();
            compare_bits(
                &format!("gemm_into {what}"),
                &shape,
                DType::F32,
                &got,
                &want,
            )
            .unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// matmul (numpy semantics, 1-D operands)
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub(crate) struct MatmulProblem {
    a: Operand,
    b: Operand,
}

/// Ranks 1..=4 for each operand: 1-D vectors, matrices (either transposed) and batched
/// matrices whose batch dims broadcast.
pub(crate) fn matmul_problem(dtype: DType) -> impl Strategy<Value = MatmulProblem> {
    (
        (batched_dim(), batched_dim(), batched_dim()),
        (1usize..=4, 1usize..=4, batch_pair(12)),
        ((any::<bool>(), any::<bool>()), view_kind(), view_kind()),
        dists(dtype, Activation::None, false),
        any::<u64>(),
    )
        .prop_map(
            move |((m, n, k), (ra, rb, (ab, bb)), ((ta, tb), ka, kb), dist, seed)| {
                let shape = |rank: usize, batch: &[usize], rows: usize, cols: usize, vec_len| {
                    if rank == 1 {
                        vec![vec_len]
                    } else {
                        let nb = (rank - 2).min(batch.len());
                        [&batch[batch.len() - nb..], &[rows, cols][..]].concat()
                    }
                };
                let a_shape = shape(ra, &ab, m, k, k);
                let b_shape = shape(rb, &bb, k, n, k);
                let mut rng = Rng::new(seed);
                let a = mat_or_vec(dtype, &a_shape, ta, ka, dist, rng.next_u64());
                let b = mat_or_vec(dtype, &b_shape, tb, kb, dist, rng.next_u64());
                MatmulProblem { a, b }
            },
        )
}

fn mat_or_vec(
    dtype: DType,
    shape: &[usize],
    trans: bool,
    kind: ViewKind,
    dist: Dist,
    seed: u64,
) -> Operand {
    if shape.len() == 1 {
        Operand::new(dtype, shape, kind, dist, seed)
    } else {
        mat_operand(dtype, shape, trans, kind, dist, seed)
    }
}

pub(crate) async fn check_matmul(dev: &Device, p: &MatmulProblem) -> Result<(), TestCaseError> {
    let what = format!("matmul {:?} x {:?}", p.a.shape, p.b.shape);
    let y = ok(&what, p.a.tensor(dev).matmul(&p.b.tensor(dev)))?;
    prop_assert_eq!(y.dtype(), p.a.dtype);
    let (want, abs, shape) =
        reference::matmul(&p.a.values(), &p.a.shape, &p.b.values(), &p.b.shape);
    let k = *p.a.shape.last().expect("rank >= 1") as f64;
    let exact = p.a.dist.is_int();
    let got = fetch_async(&what, &y, &shape).await?;
    compare(&what, &shape, &got, &want, |i| {
        // The gemm bound with alpha 1 and no epilogue: EPS32 * (K + 5) * S.
        let err32 = if exact && abs[i] < F32_INT_LIMIT {
            0.0
        } else {
            EPS32 * (k + 5.0) * abs[i]
        };
        out_round(p.a.dtype, want[i], err32)
    })
}

#[test]
fn matmul_f32() {
    run_async(CASES_MATMUL_F32, matmul_problem(DType::F32), async |p| {
        check_matmul(device(), p).await
    });
}

#[test]
fn matmul_tiled_f32() {
    run_async(
        CASES_MATMUL_F32 / 2,
        matmul_problem(DType::F32),
        async |p| check_matmul(portable_device(), p).await,
    );
}

#[test]
fn matmul_f16() {
    require_f16(device());
    run_async(CASES_MATMUL_F16, matmul_problem(DType::F16), async |p| {
        check_matmul(device(), p).await
    });
}

// ---------------------------------------------------------------------------------------------
// Split-k determinism and agreement with the unsplit kernel
// ---------------------------------------------------------------------------------------------

/// Fixed split-k problems: the benchmark's weight-gradient shape, a very long K with a split
/// that does not divide it, and a batched one with a full epilogue.
fn splitk_fixed(dtype: DType, dist: Dist) -> Vec<GemmProblem> {
    let spec = |m, n, k, a_batch: Vec<usize>, split_k, c_mode, bias, act, seed| Spec {
        m,
        n,
        k,
        a_batch,
        b_batch: vec![],
        trans: (false, seed % 2 == 0),
        kinds: [ViewKind::Contiguous; 4],
        dist,
        alpha: 1.0,
        beta: 1.0,
        c_mode,
        bias,
        act,
        split_k,
        into: false,
        seed,
    };
    let act = if dist.is_int() {
        Activation::Relu
    } else {
        Activation::Tanh
    };
    vec![
        build(
            dtype,
            // One output tile: split automatically on every adapter.
            spec(32, 32, 8192, vec![], None, 0, None, Activation::None, 1),
        ),
        build(
            dtype,
            spec(5, 3, 20_000, vec![], Some(7), 2, None, Activation::None, 2),
        ),
        build(
            dtype,
            spec(
                33,
                17,
                3000,
                vec![2],
                Some(3),
                1,
                Some(BiasSide::Column),
                act,
                3,
            ),
        ),
    ]
}

pub(crate) async fn run_gemm(dev: &Device, p: &GemmProblem, split_k: Option<u32>) -> Vec<f64> {
    let a = p.a.tensor(dev);
    let b = p.b.tensor(dev);
    let c = p.c.as_ref().map(|c| c.tensor(dev));
    let bias_t = p.bias.as_ref().map(|(_, t)| t.tensor(dev));
    let bias = match (&p.bias, &bias_t) {
        (Some((BiasSide::Column, _)), Some(t)) => Some(Bias::PerColumn(t)),
        (Some((BiasSide::Row, _)), Some(t)) => Some(Bias::PerRow(t)),
        _ => None,
    };
    let opts = GemmOptions {
        alpha: p.alpha.into(),
        beta: p.beta.into(),
        c: c.as_ref(),
        bias,
        activation: p.act,
        split_k,
    };
    let y: Tensor = gemm(&a, &b, &opts).unwrap_or_else(|e| panic!("gemm failed: {e}\n{p:#?}"));
    common::download_async(&y).await.expect("readback")
}

fn splitk_plan(dev: &Device, p: &GemmProblem, split_k: Option<u32>) -> GemmPlan {
    let (m, n, k, batch) = dims(p);
    plan(dev, m, n, k, batch, split_k).unwrap()
}

/// Three runs of the same split-k GEMM (automatic and forced S) are bitwise identical.
pub(crate) async fn splitk_deterministic(dev: &Device, dtype: DType) {
    for p in splitk_fixed(dtype, Dist::Uniform(-1.0, 1.0)) {
        for split_k in [p.split_k, Some(5)] {
            let pl = splitk_plan(dev, &p, split_k);
            assert!(pl.splits > 1, "not a split-k problem: {pl:?}\n{p:#?}");
            let first = run_gemm(dev, &p, split_k).await;
            for run in 1..3 {
                let again = run_gemm(dev, &p, split_k).await;
                if let Err(e) = compare_bits(
                    &format!("split-k run {run} vs run 0 ({pl:?})"),
                    &[first.len()],
                    dtype,
                    &again,
                    &first,
                ) {
                    panic!("{e}\nproblem: {p:#?}");
                }
            }
        }
    }
}

#[test]
fn splitk_deterministic_f32() {
    pollster::block_on(splitk_deterministic(device(), DType::F32));
}

#[test]
fn splitk_tiled_deterministic_f32() {
    pollster::block_on(splitk_deterministic(portable_device(), DType::F32));
}

#[test]
fn splitk_deterministic_f16() {
    require_f16(device());
    pollster::block_on(splitk_deterministic(device(), DType::F16));
}

/// Split (automatic and forced S, dividing K or not) and unsplit (S = 1) results each meet the
/// bound against the reference, so they agree within the sum of their bounds; on small-integer
/// inputs both are exact and therefore bitwise equal.
pub(crate) async fn splitk_agrees_with_unsplit(dev: &Device, dtype: DType) {
    // Small integers: |sum| <= 64 * 20000 < 2^24 in f32; f16 keeps random-sign sums of 20000
    // products of |x| <= 3 far below 65504.
    let int = match dtype {
        DType::F32 | DType::I32 => Dist::SmallInt(-8, 8),
        DType::F16 => Dist::SmallInt(-3, 3),
    };
    for dist in [Dist::Uniform(-1.0, 1.0), int] {
        for p in splitk_fixed(dtype, dist) {
            let (_, _, k, _) = dims(&p);
            let c_vals = p.c.as_ref().map(|c| (c.values(), c.shape.clone()));
            let bias_vals = p.bias.as_ref().map(|(side, t)| (*side, t.values()));
            let r = reference::gemm(
                &p.a.values(),
                &p.a.shape,
                &p.b.values(),
                &p.b.shape,
                p.alpha as f64,
                p.beta as f64,
                c_vals.as_ref().map(|(v, s)| (&v[..], &s[..])),
                bias_vals.as_ref().map(|(side, v)| (*side, &v[..])),
                p.act,
            );
            let exact = p.exact();
            let tol = |i| gemm_tol(dtype, k, p.alpha, p.act, exact, &r, i);
            assert_eq!(splitk_plan(dev, &p, Some(1)).splits, 1);
            let unsplit = run_gemm(dev, &p, Some(1)).await;
            let fail = |e: TestCaseError| panic!("{e}\nproblem: {p:#?}");
            compare("S = 1 vs reference", &r.shape, &unsplit, &r.out, tol).unwrap_or_else(fail);
            // p.split_k: automatic for the one-tile problem, forced for the others (on a
            // CPU adapter their tiles already cover the cores, so the plan does not split).
            for split_k in [p.split_k, Some(2), Some(3), Some(7), Some(64)] {
                let pl = splitk_plan(dev, &p, split_k);
                assert!(pl.splits > 1, "not split: {pl:?}");
                let split = run_gemm(dev, &p, split_k).await;
                let what = format!("{pl:?}");
                compare(
                    &format!("{what} vs reference"),
                    &r.shape,
                    &split,
                    &r.out,
                    tol,
                )
                .unwrap_or_else(fail);
                compare(
                    &format!("{what} vs S = 1"),
                    &r.shape,
                    &split,
                    &unsplit,
                    |i| 2.0 * tol(i),
                )
                .unwrap_or_else(fail);
                if exact {
                    compare_bits(
                        &format!("{what} vs S = 1"),
                        &r.shape,
                        dtype,
                        &split,
                        &unsplit,
                    )
                    .unwrap_or_else(fail);
                }
            }
        }
    }
}

#[test]
fn splitk_agrees_with_unsplit_f32() {
    pollster::block_on(splitk_agrees_with_unsplit(device(), DType::F32));
}

#[test]
fn splitk_tiled_agrees_with_unsplit_f32() {
    pollster::block_on(splitk_agrees_with_unsplit(portable_device(), DType::F32));
}

#[test]
fn splitk_agrees_with_unsplit_f16() {
    require_f16(device());
    pollster::block_on(splitk_agrees_with_unsplit(device(), DType::F16));
}

// An explicit path: the browser suite includes this file through `#[path]`, which would
// otherwise look for `wg.rs` beside it.
#[cfg(not(target_arch = "wasm32"))]
#[path = "gemm/wg.rs"]
mod wg;

#[cfg(not(target_arch = "wasm32"))]
#[path = "gemm/coop.rs"]
mod coop;
