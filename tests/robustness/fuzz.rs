//! A fuzzed sweep of the public API: random shapes (zero, one, odd, huge broadcast extents,
//! mismatched ranks), views and argument values. Every call returns `Ok` with the f64
//! reference's result or an `Err` whose message names the op; never a panic or a hang (a
//! watchdog aborts the process), and the device keeps working after every error.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use wgtensor::ops::{matmul, BinaryOp, ReduceOp, ScalarOp, UnaryOp};
use wgtensor::{DType, Device, Error, Tensor};

use super::{dev, still_works, vals};
use crate::common::reference as r;

/// Aborts the process if dropped later than `limit` after creation: a hang fails loudly.
struct Watchdog(Arc<AtomicBool>);

impl Watchdog {
    fn new(what: String, limit: Duration) -> Watchdog {
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        std::thread::spawn(move || {
            let start = std::time::Instant::now();
            while start.elapsed() < limit {
                if flag.load(Ordering::Acquire) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            eprintln!("fuzz: {what} did not finish within {limit:?}");
            std::process::abort();
        });
        Watchdog(done)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

const UNARY: [UnaryOp; 11] = [
    UnaryOp::Neg,
    UnaryOp::Abs,
    UnaryOp::Exp,
    UnaryOp::Log,
    UnaryOp::Sqrt,
    UnaryOp::Relu,
    UnaryOp::Sigmoid,
    UnaryOp::Tanh,
    UnaryOp::Gelu,
    UnaryOp::Log1p,
    UnaryOp::Softplus,
];
const SCALAR: [ScalarOp; 8] = [
    ScalarOp::Add,
    ScalarOp::Sub,
    ScalarOp::RSub,
    ScalarOp::Mul,
    ScalarOp::Div,
    ScalarOp::RDiv,
    ScalarOp::Max,
    ScalarOp::Min,
];
const BINARY: [BinaryOp; 6] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Max,
    BinaryOp::Min,
];
const REDUCE: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min];

#[derive(Debug, Clone)]
enum Call {
    Unary(usize),
    Scalar(usize, f32),
    Binary(usize),
    Reduce(usize, isize, bool),
    Matmul,
    Reshape(Vec<usize>),
    Permute(Vec<usize>),
    Narrow(isize, usize, usize),
    Broadcast(Vec<usize>),
    Contiguous,
    ToDtype,
}

fn dim() -> impl Strategy<Value = usize> {
    prop_oneof![3 => Just(1usize), 2 => Just(0usize), 4 => 2usize..6]
}

fn shape() -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(dim(), 0..5)
}

fn call() -> impl Strategy<Value = Call> {
    prop_oneof![
        (0..UNARY.len()).prop_map(Call::Unary),
        (0..SCALAR.len(), -3.0f32..3.0).prop_map(|(o, s)| Call::Scalar(o, s)),
        (0..BINARY.len()).prop_map(Call::Binary),
        (0..REDUCE.len(), -5isize..5, any::<bool>()).prop_map(|(o, d, k)| Call::Reduce(o, d, k)),
        Just(Call::Matmul),
        shape().prop_map(Call::Reshape),
        proptest::collection::vec(0usize..5, 0..5).prop_map(Call::Permute),
        (-5isize..5, 0usize..6, 0usize..6).prop_map(|(d, s, l)| Call::Narrow(d, s, l)),
        shape().prop_map(Call::Broadcast),
        Just(Call::Contiguous),
        Just(Call::ToDtype),
    ]
}

fn data(n: usize, salt: usize) -> Vec<f64> {
    (0..n)
        .map(|i| (((i * 37 + salt * 11) % 17) as f64 - 8.0) / 4.0)
        .collect()
}

/// Asserts an error names `op` (messages read `op: ...`).
fn check_err(e: &Error, op: &str, call: &Call) {
    let m = e.to_string();
    assert!(
        m.starts_with(&format!("{op}:")),
        "{call:?}: error {m:?} does not name {op}"
    );
}

fn close(got: &[f32], want: &[f64], call: &Call) {
    assert_eq!(got.len(), want.len(), "{call:?}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan())
            || (g as f64 == w)
            || ((g as f64 - w).abs() <= 1e-4 * w.abs().max(1.0));
        assert!(ok, "{call:?}: element {i}: got {g}, want {w}");
    }
}

/// The reference result and its shape; `None` where PyTorch raises.
type Expected = (Vec<f64>, Vec<usize>);

/// Runs `call` on a tensor of shape `a` (and `b` for two-operand calls) and checks the result
/// against the reference, or the error's op name.
fn run_call(call: &Call, a: &[usize], b: &[usize]) {
    let ad = data(a.iter().product(), 1);
    let bd = data(b.iter().product(), 2);
    let to32 = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
    let ta = Tensor::from_slice(dev(), &to32(&ad), a).unwrap();
    let tb = Tensor::from_slice(dev(), &to32(&bd), b).unwrap();
    // The f32 inputs as the reference sees them.
    let ad: Vec<f64> = to32(&ad).iter().map(|&x| x as f64).collect();
    let bd: Vec<f64> = to32(&bd).iter().map(|&x| x as f64).collect();
    let (op, res, want): (&str, _, Option<Expected>) = match call {
        Call::Unary(o) => {
            let u = UNARY[*o];
            let name = [
                "neg", "abs", "exp", "log", "sqrt", "relu", "sigmoid", "tanh", "gelu", "log1p",
                "softplus",
            ][*o];
            (name, ta.unary(u), Some((r::unary(&ad, u), a.to_vec())))
        }
        Call::Scalar(o, s) => {
            let name = [
                "add_scalar",
                "sub_scalar",
                "rsub_scalar",
                "mul_scalar",
                "div_scalar",
                "rdiv_scalar",
                "max_scalar",
                "min_scalar",
            ][*o];
            let w = r::scalar(&ad, SCALAR[*o], *s as f64);
            (
                name,
                ta.scalar_op(SCALAR[*o], f64::from(*s)),
                Some((w, a.to_vec())),
            )
        }
        Call::Binary(o) => {
            let op = BINARY[*o];
            let name = ["add", "sub", "mul", "div", "maximum", "minimum"][*o];
            let want = r::broadcast_shapes(a, b).map(|_| r::binary(&ad, a, &bd, b, op));
            (name, ta.binary(&tb, op), want)
        }
        Call::Reduce(o, d, k) => {
            let op = REDUCE[*o];
            let name = ["sum", "max", "min", "mean"][op as usize];
            let rank = a.len() as isize;
            let nd = if *d < 0 { d + rank } else { *d };
            let valid = rank > 0 && nd >= 0 && nd < rank;
            let want = if rank == 0 {
                // PyTorch reduces a scalar along dim 0 or -1 to itself.
                (*d == 0 || *d == -1).then(|| (ad.clone(), Vec::new()))
            } else if !valid {
                None
            } else {
                let nd = nd as usize;
                let empty_max = a[nd] == 0 && matches!(op, ReduceOp::Max | ReduceOp::Min);
                (!empty_max).then(|| r::reduce(&ad, a, nd, op, *k))
            };
            (name, ta.reduce(*d, op, *k), want)
        }
        Call::Matmul => {
            let want = if a.is_empty() || b.is_empty() {
                None
            } else {
                let ok = a[a.len() - 1] == b[if b.len() == 1 { 0 } else { b.len() - 2 }];
                let batch_ok = a.len() < 3
                    || b.len() < 3
                    || r::broadcast_shapes(&a[..a.len() - 2], &b[..b.len() - 2]).is_some();
                (ok && batch_ok).then(|| {
                    let (s, _, sh) = r::matmul(&ad, a, &bd, b);
                    (s, sh)
                })
            };
            ("matmul", matmul(&ta, &tb), want)
        }
        Call::Reshape(s) => {
            let n: usize = s.iter().product();
            let want = (n == ad.len()).then(|| (ad.clone(), s.clone()));
            ("reshape", ta.reshape(s), want)
        }
        Call::Permute(p) => {
            let mut seen = p.clone();
            seen.sort_unstable();
            let valid = p.len() == a.len() && seen == (0..a.len()).collect::<Vec<_>>();
            let want = valid.then(|| (r::permute(&ad, a, p), p.iter().map(|&i| a[i]).collect()));
            ("permute", ta.permute(p), want)
        }
        Call::Narrow(d, s, l) => {
            let rank = a.len() as isize;
            let nd = if *d < 0 { d + rank } else { *d };
            let valid = nd >= 0 && nd < rank && s + l <= a[nd as usize];
            let want = valid.then(|| {
                let nd = nd as usize;
                let mut sh = a.to_vec();
                sh[nd] = *l;
                (r::narrow(&ad, a, nd, *s, *l), sh)
            });
            ("narrow", ta.narrow(*d, *s, *l), want)
        }
        Call::Broadcast(s) => {
            let valid = s.len() >= a.len()
                && a.iter()
                    .zip(&s[s.len() - a.len()..])
                    .all(|(&x, &y)| x == y || x == 1);
            let want = valid.then(|| (r::broadcast_to(&ad, a, s), s.clone()));
            ("broadcast_to", ta.broadcast_to(s), want)
        }
        Call::Contiguous => (
            "contiguous",
            if a.is_empty() {
                ta.clone()
            } else {
                ta.transpose(0, -1).unwrap()
            }
            .contiguous(),
            Some(if a.is_empty() {
                (ad.clone(), vec![])
            } else {
                let mut perm: Vec<usize> = (0..a.len()).collect();
                perm.swap(0, a.len() - 1);
                (
                    r::permute(&ad, a, &perm),
                    perm.iter().map(|&i| a[i]).collect(),
                )
            }),
        ),
        Call::ToDtype => {
            let res = ta.to_dtype(DType::F16).and_then(|h| h.to_dtype(DType::F32));
            let w: Vec<f64> = ad
                .iter()
                .map(|&x| half::f16::from_f64(x).to_f64())
                .collect();
            (
                "to_dtype",
                res,
                dev().supports_f16().then(|| (w, a.to_vec())),
            )
        }
    };
    match (res, want) {
        (Ok(t), Some((w, shape))) => {
            assert_eq!(t.shape(), shape.as_slice(), "{call:?} on {a:?}, {b:?}");
            close(&vals(&t), &w, call);
        }
        (Ok(t), None) => panic!(
            "{call:?} on {a:?}, {b:?}: Ok {:?} where PyTorch raises",
            t.shape()
        ),
        (Err(e), Some(_)) => panic!("{call:?} on {a:?}, {b:?}: unexpected error {e}"),
        (Err(e), None) => {
            check_err(&e, op, call);
            still_works(dev());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    #[test]
    fn every_op_is_right_or_names_itself(call in call(), a in shape(), b in shape()) {
        let _w = Watchdog::new(format!("{call:?} on {a:?}, {b:?}"), Duration::from_secs(120));
        run_call(&call, &a, &b);
    }

}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Huge broadcast extents (no memory behind them): reductions finish with the right value,
    /// ops whose output would not fit are refused naming the op. The device's memory budget is
    /// 64 MiB: tensors may exceed one binding (windowed ops), so without a budget an output of
    /// up to `max_buffer_size` would be materialized and read back.
    #[test]
    fn huge_broadcast_extents(
        big in prop_oneof![Just(1usize << 20), Just(1usize << 26), Just((1usize << 31) - 1)],
        pos in 0usize..3,
        rank in 1usize..4,
        call in 0usize..6,
    ) {
        let pos = pos % rank;
        // Other dims 2 while the element count stays u32-indexable.
        let other = if big <= 1 << 26 { 2 } else { 1 };
        let mut shape = vec![other; rank];
        shape[pos] = big;
        let _w = Watchdog::new(format!("{call} on {shape:?}"), Duration::from_secs(120));
        let dev = budget_dev();
        let x = Tensor::full(dev, &[1], 0.5, DType::F32).unwrap().broadcast_to(&shape).unwrap();
        let (op, res, want): (&str, _, Option<f64>) = match call {
            0 => ("sum", x.sum(pos as isize, false), Some(0.5 * big as f64)),
            1 => ("mean", x.mean(pos as isize, true), Some(0.5)),
            2 => ("max", x.max(-1, false), Some(0.5)),
            3 => ("exp", x.exp(), Some(0.5f64.exp())),
            4 => ("add", x.add(&Tensor::full(dev, &[other], 1.0, DType::F32).unwrap()), Some(1.5)),
            _ if rank == 1 => ("matmul", matmul(&x, &x), Some(0.25 * big as f64)),
            _ => ("matmul", matmul(&x, &x.transpose(-1, -2).unwrap()), None),
        };
        match res {
            Ok(t) => {
                if let Some(w) = want {
                    let v = vals(&t);
                    prop_assert!(v.iter().all(|&g| ((g as f64) - w).abs() <= 1e-3 * w.abs()),
                        "{op} on {shape:?}: {:?} vs {w}", &v[..v.len().min(4)]);
                }
            }
            Err(e) => {
                let m = e.to_string();
                prop_assert!(m.starts_with(&format!("{op}:")), "{m}");
                still_works(dev);
            }
        }
    }
}

/// A device with a 64 MiB memory budget (see `huge_broadcast_extents`).
fn budget_dev() -> &'static Device {
    static DEV: std::sync::OnceLock<Device> = std::sync::OnceLock::new();
    DEV.get_or_init(|| {
        Device::with_options(wgtensor::DeviceOptions {
            memory_limit: Some(64 << 20),
            ..Default::default()
        })
        .expect("device")
    })
}
