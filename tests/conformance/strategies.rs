//! Shared proptest strategies: shapes, value distributions, and operands that are strided views
//! (permuted, sliced, broadcast, combinations) of uploaded host data. Everything is generic over
//! the dtype, so later kernel families (GEMM, conv, ...) reuse the same building blocks.
//!
//! Shapes and view kinds shrink through proptest (dims towards 1, ranks down, views towards
//! contiguous). The values themselves and the finer view choices (which permutation, which
//! slice) are derived from a `seed` with a small deterministic generator, so a shrunk problem
//! prints compactly and replays exactly; small problems also print their data.

use std::fmt;
use std::ops::RangeInclusive;

use proptest::prelude::*;
use wgtensor::{DType, Device, Tensor};

use crate::common::{self, reference, ViewOp};

// ---------------------------------------------------------------------------------------------
// Deterministic generator for seed-derived choices
// ---------------------------------------------------------------------------------------------

/// SplitMix64: tiny, fast, and good enough to spread test values.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x853c_49e6_748f_ea9b)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`n >= 1`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn coin(&mut self, p: f64) -> bool {
        self.unit() < p
    }
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Shapes
// ---------------------------------------------------------------------------------------------

/// A dimension in 1..=7: size 1 about 40% of the time, otherwise mostly not a power of two.
pub fn dim() -> impl Strategy<Value = usize> + Clone {
    prop_oneof![3 => Just(1usize), 7 => 1usize..=7]
}

/// Shapes whose rank is in `ranks`, dims from [`dim`].
pub fn shape(ranks: RangeInclusive<usize>) -> impl Strategy<Value = Vec<usize>> + Clone {
    prop::collection::vec(dim(), ranks)
}

/// Rank 0..=5 (rank 0 is a scalar tensor).
pub fn small_shape() -> impl Strategy<Value = Vec<usize>> + Clone {
    shape(0..=5)
}

/// Shapes of roughly 250 to 72k elements (several to hundreds of 256-wide workgroups), with
/// odd sizes that are not multiples of any tile and interior size-1 dims.
pub fn large_shape() -> BoxedStrategy<Vec<usize>> {
    prop_oneof![
        (257usize..=70_000).prop_map(|n| vec![n]),
        (100usize..=300, 100usize..=240).prop_map(|(a, b)| vec![a, b]),
        (1usize..=20, 30usize..=60, 30usize..=60).prop_map(|(a, b, c)| vec![a, b, c]),
        (1usize..=3, 30usize..=150, 30usize..=150).prop_map(|(a, b, c)| vec![a, b, 1, c]),
    ]
    .boxed()
}

// ---------------------------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------------------------

/// How test values are drawn. Values are rounded to the operand's dtype after drawing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Dist {
    /// Integers in `lo..=hi`. Sums, differences, products, max and min of such values are exact
    /// in f32 (below 2^24) and in f16 (below 2^11), which gives exact-equality cases.
    SmallInt(i32, i32),
    /// Uniform in `[lo, hi)`.
    Uniform(f64, f64),
    /// `±10^u`, `u` uniform in `[lo, hi]`, 3% exact zeros: spans many magnitudes, so small inputs
    /// probe relative accuracy (tanh, GELU near 0).
    SignedLog(f64, f64),
    /// `±10^u` without zeros: magnitudes bounded away from 0 (denominators, rdiv operands).
    AwayFromZero(f64, f64),
    /// `10^u`, `u` uniform in `[lo, hi]`: positive inputs for log and sqrt.
    PosLog(f64, f64),
    /// Points on a quarter-ulp grid of normal f16 numbers (all f32-exact): f16 values, exact
    /// ties between two neighbours and values just off a tie, with 3% zeros. Probes the
    /// round-to-nearest-even conversion f32 -> f16.
    F16Grid,
}

impl Dist {
    pub fn sample(self, rng: &mut Rng) -> f64 {
        let sign = |rng: &mut Rng| if rng.coin(0.5) { -1.0 } else { 1.0 };
        match self {
            Dist::SmallInt(lo, hi) => (lo + rng.below((hi - lo + 1) as usize) as i32) as f64,
            Dist::Uniform(lo, hi) => lo + (hi - lo) * rng.unit(),
            Dist::SignedLog(lo, hi) => {
                if rng.coin(0.03) {
                    0.0
                } else {
                    sign(rng) * 10f64.powf(lo + (hi - lo) * rng.unit())
                }
            }
            Dist::AwayFromZero(lo, hi) => sign(rng) * 10f64.powf(lo + (hi - lo) * rng.unit()),
            Dist::PosLog(lo, hi) => 10f64.powf(lo + (hi - lo) * rng.unit()),
            Dist::F16Grid => {
                if rng.coin(0.03) {
                    return 0.0;
                }
                // Normal f16 binades 2^-14 ..= 2^15; no quarter steps above the largest
                // binade's values so nothing rounds past 65504 (overflow is not tested here).
                let e = -14 + rng.below(30) as i32;
                let h = 2f64.powi(e) * (1.0 + rng.below(1024) as f64 / 1024.0);
                let quarter = if e == 15 { 0 } else { rng.below(4) };
                sign(rng) * (h + quarter as f64 * 2f64.powi(e - 12))
            }
        }
    }

    /// True when every value is an integer (exact-arithmetic cases).
    pub fn is_int(self) -> bool {
        matches!(self, Dist::SmallInt(..))
    }
}

/// A general-purpose mix: small integers (exact cases), a uniform range, and wide magnitudes.
pub fn general_dist() -> impl Strategy<Value = Dist> + Clone {
    prop_oneof![
        Just(Dist::SmallInt(-8, 8)),
        Just(Dist::Uniform(-100.0, 100.0)),
        Just(Dist::SignedLog(-4.0, 2.0)),
    ]
}

// ---------------------------------------------------------------------------------------------
// Views
// ---------------------------------------------------------------------------------------------

/// How an operand's logical shape is produced from uploaded data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViewKind {
    /// Uploaded with exactly the logical shape.
    Contiguous,
    /// `permute`/`transpose` of a tensor with permuted dims.
    Permuted,
    /// `narrow` on one or more dims of a larger parent (non-zero offset, gaps between rows).
    Sliced,
    /// `narrow` on a larger parent, then `permute`.
    SlicedPermuted,
    /// `broadcast_to` of a tensor with size-1 and missing leading dims (stride 0).
    Broadcast,
    /// `broadcast_to` of a sliced and permuted view.
    BroadcastOfView,
}

/// Every view kind; shrinks towards `Contiguous`, which is drawn more often so that ops on
/// two operands also hit their all-contiguous fast path regularly.
pub fn view_kind() -> impl Strategy<Value = ViewKind> + Clone {
    prop_oneof![
        3 => Just(ViewKind::Contiguous),
        1 => Just(ViewKind::Permuted),
        1 => Just(ViewKind::Sliced),
        1 => Just(ViewKind::SlicedPermuted),
        1 => Just(ViewKind::Broadcast),
        1 => Just(ViewKind::BroadcastOfView),
    ]
}

/// `d` written as a negative dim half of the time (exercises negative-dim handling).
fn maybe_negative(d: usize, rank: usize, rng: &mut Rng) -> isize {
    if rng.coin(0.5) {
        d as isize - rank as isize
    } else {
        d as isize
    }
}

/// A permuted view with logical `shape`: returns the shape of the tensor to permute and the op.
fn plan_permute(shape: &[usize], rng: &mut Rng) -> (Vec<usize>, ViewOp) {
    let r = shape.len();
    if r >= 2 && rng.coin(0.4) {
        let a = rng.below(r);
        let b = (a + 1 + rng.below(r - 1)) % r;
        let mut inner = shape.to_vec();
        inner.swap(a, b);
        let op = ViewOp::Transpose(maybe_negative(a, r, rng), maybe_negative(b, r, rng));
        return (inner, op);
    }
    let mut perm: Vec<usize> = (0..r).collect();
    rng.shuffle(&mut perm);
    // permute(perm) maps dim i of the view to dim perm[i] of its input.
    let mut inner = vec![0; r];
    for (i, &p) in perm.iter().enumerate() {
        inner[p] = shape[i];
    }
    (inner, ViewOp::Permute(perm))
}

/// A sliced view with logical `shape` (rank >= 1): a parent 1..=3 larger on some dims, narrowed.
fn plan_narrow(shape: &[usize], rng: &mut Rng) -> (Vec<usize>, Vec<ViewOp>) {
    let r = shape.len();
    if r == 0 {
        return (vec![], vec![]);
    }
    let forced = rng.below(r);
    let mut parent = shape.to_vec();
    let mut ops = Vec::new();
    for d in 0..r {
        if d == forced || rng.coin(0.4) {
            let extra = 1 + rng.below(3);
            let start = rng.below(extra + 1);
            parent[d] += extra;
            ops.push(ViewOp::Narrow {
                dim: maybe_negative(d, r, rng),
                start,
                len: shape[d],
            });
        }
    }
    (parent, ops)
}

/// The source shape of a broadcast to `shape`: some leading dims dropped, some dims set to 1.
pub fn broadcast_source(shape: &[usize], rng: &mut Rng) -> Vec<usize> {
    let drop = if rng.coin(0.5) {
        rng.below(shape.len() + 1)
    } else {
        0
    };
    shape[drop..]
        .iter()
        .map(|&d| if rng.coin(0.5) { 1 } else { d })
        .collect()
}

/// The parent shape to upload and the view ops that turn it into a view of logical `shape`.
pub fn plan_view(shape: &[usize], kind: ViewKind, rng: &mut Rng) -> (Vec<usize>, Vec<ViewOp>) {
    match kind {
        ViewKind::Contiguous => (shape.to_vec(), vec![]),
        ViewKind::Permuted => {
            let (inner, op) = plan_permute(shape, rng);
            (inner, vec![op])
        }
        ViewKind::Sliced => plan_narrow(shape, rng),
        ViewKind::SlicedPermuted => {
            let (inner, op) = plan_permute(shape, rng);
            let (parent, mut ops) = plan_narrow(&inner, rng);
            ops.push(op);
            (parent, ops)
        }
        ViewKind::Broadcast => {
            let src = broadcast_source(shape, rng);
            (src, vec![ViewOp::BroadcastTo(shape.to_vec())])
        }
        ViewKind::BroadcastOfView => {
            let src = broadcast_source(shape, rng);
            let (parent, mut ops) = plan_view(&src, ViewKind::SlicedPermuted, rng);
            ops.push(ViewOp::BroadcastTo(shape.to_vec()));
            (parent, ops)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Operands
// ---------------------------------------------------------------------------------------------

/// A test input: host data for a parent tensor plus the view ops that produce the operand.
#[derive(Clone)]
pub struct Operand {
    pub dtype: DType,
    /// Logical shape the op sees.
    pub shape: Vec<usize>,
    pub kind: ViewKind,
    /// Shape of the uploaded tensor.
    pub parent: Vec<usize>,
    /// View ops applied to the uploaded tensor, in order.
    pub ops: Vec<ViewOp>,
    pub dist: Dist,
    pub seed: u64,
    /// Row-major values of the parent, exactly representable in `dtype`.
    pub data: Vec<f64>,
}

impl Operand {
    pub fn new(dtype: DType, shape: &[usize], kind: ViewKind, dist: Dist, seed: u64) -> Operand {
        let mut rng = Rng::new(seed);
        let (parent, ops) = plan_view(shape, kind, &mut rng);
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

    /// Uploads the parent and builds the view on the device.
    pub fn tensor(&self, dev: &Device) -> Tensor {
        let t = common::build_view(dev, &self.data, &self.parent, &self.ops, self.dtype);
        assert_eq!(
            t.shape(),
            &self.shape[..],
            "view plan produced the wrong shape: {self:?}"
        );
        t
    }

    /// The operand's logical values, row-major (the host model of the view).
    pub fn values(&self) -> Vec<f64> {
        let (v, s) = common::host_view(&self.data, &self.parent, &self.ops);
        assert_eq!(
            s, self.shape,
            "host view plan produced the wrong shape: {self:?}"
        );
        v
    }

    pub fn numel(&self) -> usize {
        reference::numel(&self.shape)
    }
}

/// Prints everything needed to replay the case; the data only when it is short.
impl fmt::Debug for Operand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("Operand");
        s.field("dtype", &self.dtype)
            .field("shape", &self.shape)
            .field("kind", &self.kind)
            .field("parent", &self.parent)
            .field("ops", &self.ops)
            .field("dist", &self.dist)
            .field("seed", &self.seed);
        if self.data.len() <= 64 {
            s.field("data", &self.data);
        } else {
            s.field(
                "data",
                &format_args!("<{} values, derived from seed>", self.data.len()),
            );
        }
        s.finish()
    }
}

/// An operand of `dtype` with a shape from `shapes`, any view kind from `kinds`, values from
/// `dists`.
pub fn operand(
    dtype: DType,
    shapes: impl Strategy<Value = Vec<usize>>,
    kinds: impl Strategy<Value = ViewKind>,
    dists: impl Strategy<Value = Dist>,
) -> impl Strategy<Value = Operand> {
    (shapes, kinds, dists, any::<u64>())
        .prop_map(move |(shape, kind, dist, seed)| Operand::new(dtype, &shape, kind, dist, seed))
}

/// An operand whose logical shape is fixed (e.g. derived from another part of the problem).
pub fn operand_of_shape(
    dtype: DType,
    shape: Vec<usize>,
    kinds: impl Strategy<Value = ViewKind>,
    dists: impl Strategy<Value = Dist>,
) -> impl Strategy<Value = Operand> {
    (kinds, dists, any::<u64>())
        .prop_map(move |(kind, dist, seed)| Operand::new(dtype, &shape, kind, dist, seed))
}

/// Runs `test` on `cases` generated problems; a failure panics with proptest's report, which
/// includes the minimal shrunk problem (`Debug` of the strategy's value).
pub fn run<S>(cases: u32, strategy: S, test: impl Fn(&S::Value) -> Result<(), TestCaseError>)
where
    S: Strategy,
    S::Value: fmt::Debug,
{
    let config = ProptestConfig {
        cases,
        failure_persistence: None,
        // Enough steps to shrink shapes, view kinds and distributions to a minimal case.
        max_shrink_iters: 1024,
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    if let Err(e) = runner.run(&strategy, |v| test(&v)) {
        panic!("{e}");
    }
}

/// [`run`] for checks that read back asynchronously (shared with the browser suite,
/// tests/browser, which runs them with a deterministic seed and `.await`).
#[cfg(not(target_arch = "wasm32"))]
pub fn run_async<S>(
    cases: u32,
    strategy: S,
    test: impl AsyncFn(&S::Value) -> Result<(), TestCaseError>,
) where
    S: Strategy,
    S::Value: fmt::Debug,
{
    run(cases, strategy, |v| pollster::block_on(test(v)));
}
