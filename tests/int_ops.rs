//! i32 tensors, comparisons, `where_cond`, argmax/argmin and the index ops (gather,
//! index_select, scatter_add, embedding, one_hot) against host references written from
//! PyTorch's definitions, with their gradients, in f32 and f16.
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use proptest::prelude::*;
use wgtensor::ops::{embedding, CmpOp};
use wgtensor::{f16, DType, Device, Tensor};

/// This binary's device, with `check_indices` off: several tests here pin down what
/// out-of-range indices do without the device-side check (NaN, 0, nothing added), and an
/// index error on a shared, checked device would be reported to whichever test reads back
/// next. tests/robustness/indices.rs covers the checked default.
fn dev() -> &'static Device {
    static DEV: std::sync::OnceLock<Device> = std::sync::OnceLock::new();
    DEV.get_or_init(|| {
        Device::with_options(wgtensor::DeviceOptions {
            check_indices: false,
            ..Default::default()
        })
        .expect("no wgpu adapter")
    })
}

fn ti(v: &[i32], shape: &[usize]) -> Tensor {
    Tensor::from_slice(dev(), v, shape).unwrap()
}

fn tf(v: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_slice(dev(), v, shape).unwrap()
}

fn f(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

fn i(t: &Tensor) -> Vec<i32> {
    t.to_vec::<i32>().unwrap()
}

#[test]
fn i32_tensors_round_trip_view_and_cast() {
    let big = [1 << 30, -(1 << 30) - 7, 16_777_217, -1, 0, i32::MAX];
    let t = ti(&big, &[2, 3]);
    assert_eq!(t.dtype(), DType::I32);
    assert_eq!(i(&t), big);
    // A strided copy is exact past 2^24 (no f32 detour).
    let tt = t.transpose(0, 1).unwrap().contiguous().unwrap();
    assert_eq!(
        i(&tt),
        vec![1 << 30, -1, -(1 << 30) - 7, 0, 16_777_217, i32::MAX]
    );
    assert_eq!(
        i(&t.narrow(1, 1, 2).unwrap().contiguous().unwrap()),
        vec![-(1 << 30) - 7, 16_777_217, 0, i32::MAX]
    );
    // Casts: float -> i32 truncates toward zero and saturates, i32 -> float rounds.
    let x = tf(&[2.7, -2.7, 0.5, -0.5, 3e9, -3e9, 1e3], &[7]);
    // The top saturates at the largest f32 below 2^31 (the shader converts in f32).
    assert_eq!(
        i(&x.to_dtype(DType::I32).unwrap()),
        vec![2, -2, 0, 0, 2_147_483_520, i32::MIN, 1000]
    );
    let back = ti(&[3, -4, 16_777_217], &[3]).to_dtype(DType::F32).unwrap();
    assert_eq!(f(&back), vec![3.0, -4.0, 16_777_216.0]);
    if dev().supports_f16() {
        let h = Tensor::from_slice(dev(), &[f16::from_f32(-7.75), f16::from_f32(65504.0)], &[2])
            .unwrap();
        assert_eq!(i(&h.to_dtype(DType::I32).unwrap()), vec![-7, 65504]);
        let h2 = ti(&[5, -3], &[2]).to_dtype(DType::F16).unwrap();
        assert_eq!(
            h2.to_vec::<f16>().unwrap(),
            vec![f16::from_f32(5.0), f16::from_f32(-3.0)]
        );
        // Well past f16's range: infinite, as PyTorch's cast (WGSL requires inf from 2^16;
        // nearer the edge it leaves the rounding open). Exact values stay exact.
        let h3 = ti(&[70000, -70000, 2048, 65504], &[4])
            .to_dtype(DType::F16)
            .unwrap();
        let want = [f32::INFINITY, f32::NEG_INFINITY, 2048.0, 65504.0];
        assert_eq!(f(&h3.to_dtype(DType::F32).unwrap()), want);
    }
    // Constructors.
    assert_eq!(
        i(&Tensor::full(dev(), &[3], -2.0, DType::I32).unwrap()),
        vec![-2; 3]
    );
    assert_eq!(
        i(&Tensor::zeros(dev(), &[2], DType::I32).unwrap()),
        vec![0, 0]
    );
    assert_eq!(
        i(&Tensor::arange(dev(), 0.0, 5.0, 2.0, DType::I32).unwrap()),
        vec![0, 2, 4]
    );
    assert_eq!(
        i(&wgtensor::ops::cat(&[&ti(&[1, 2], &[2]), &ti(&[3], &[1])], 0).unwrap()),
        vec![1, 2, 3]
    );
    assert_eq!(i(&ti(&[], &[0, 3])), Vec::<i32>::new());
    // Reading as the wrong host type is an error.
    assert!(t.to_vec::<f32>().is_err());
}

#[test]
fn i32_refused_by_float_math_with_a_clear_error() {
    let t = ti(&[1, 2, 3], &[3]);
    for (what, r) in [
        ("relu", t.relu()),
        ("add", t.add(&t)),
        ("add_scalar", t.add_scalar(1.0)),
        ("sum", t.sum(0, false)),
        ("softmax", t.softmax(0)),
    ] {
        let e = r.unwrap_err().to_string();
        assert!(e.starts_with(what) && e.contains("I32"), "{what}: {e}");
        assert!(e.contains("to_dtype"), "{what}: {e}");
    }
    // Empty i32 tensors are refused alike (they returned early, a mean of nothing as 0).
    let empty = ti(&[], &[0]);
    for (what, r) in [
        ("add", empty.add(&empty)),
        ("sum", empty.sum(0, false)),
        ("mean", empty.mean(0, false)),
        ("max", empty.max(0, false)),
        ("softmax", empty.softmax(0)),
    ] {
        let e = r.unwrap_err().to_string();
        assert!(e.starts_with(what) && e.contains("I32"), "{what}: {e}");
    }
    let e = t.matmul(&ti(&[1, 2, 3], &[3, 1])).unwrap_err().to_string();
    assert!(e.contains("I32") || e.contains("i32"), "{e}");
    let e = t.clone().requires_grad().unwrap_err().to_string();
    assert!(e.contains("floating point"), "{e}");
    // PyTorch's order: sum/max/min check the dim first, clamp its bounds first.
    for r in [t.sum(5, false), t.max(5, false), t.min(-2, false)] {
        let e = r.unwrap_err().to_string();
        assert!(e.contains("Dimension out of range"), "{e}");
    }
    let e = t.clamp(None, None).unwrap_err().to_string();
    assert!(e.contains("At least one of 'min' or 'max'"), "{e}");
    // dropout's in-place product cannot land in an int tensor (p = 1 gives int zeros).
    let e = wgtensor::ops::dropout(&t, 0.5, true)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("result type Float can't be cast to the desired output type Int"),
        "{e}"
    );
    assert_eq!(
        i(&wgtensor::ops::dropout(&t, 1.0, true).unwrap()),
        vec![0; 3]
    );
    // The pools without an integer kernel in PyTorch refuse an empty i32 input as a full one
    // (they returned it early), in its words.
    use wgtensor::ops::{avg_pool1d, avg_pool2d, max_pool1d};
    use wgtensor::ops::{AvgPool1dOptions, AvgPool2dOptions, MaxPool1dOptions};
    let e4 = Tensor::zeros(dev(), &[0, 1, 4, 4], DType::I32).unwrap();
    let e3 = Tensor::zeros(dev(), &[0, 1, 4], DType::I32).unwrap();
    for (what, r) in [
        ("avg_pool2d", avg_pool2d(&e4, &AvgPool2dOptions::new(2))),
        ("avg_pool1d", avg_pool1d(&e3, &AvgPool1dOptions::new(2))),
        ("max_pool1d", max_pool1d(&e3, &MaxPool1dOptions::new(2))),
    ] {
        let e = r.unwrap_err().to_string();
        assert!(
            e.starts_with(what) && e.contains("not implemented for 'Int'"),
            "{what}: {e}"
        );
    }
    // nll_loss's kernel refuses an integer input after its shape checks (cross_entropy's
    // log_softmax before them).
    use wgtensor::ops::{cross_entropy, nll_loss, CrossEntropyOptions, NllLossOptions};
    let logits = ti(&[0; 3], &[1, 3]);
    let two = ti(&[0, 1], &[2]);
    let e = nll_loss(&logits, &two, &NllLossOptions::default()).unwrap_err();
    assert!(
        e.to_string().contains("Expected input batch_size (1)"),
        "{e}"
    );
    let e = nll_loss(&logits, &ti(&[0], &[1]), &NllLossOptions::default()).unwrap_err();
    assert!(e.to_string().contains("I32"), "{e}");
    let e = cross_entropy(&logits, &two, &CrossEntropyOptions::default()).unwrap_err();
    assert!(e.to_string().contains("I32"), "{e}");
    // The adaptive average pools return an empty integer output before their dispatch.
    use wgtensor::ops::{adaptive_avg_pool1d, adaptive_avg_pool2d};
    let y = adaptive_avg_pool2d(&e4, [2, 2]).unwrap();
    assert_eq!((y.shape(), y.dtype()), (&[0, 1, 2, 2][..], DType::I32));
    let full = Tensor::zeros(dev(), &[1, 1, 4, 4], DType::I32).unwrap();
    let y = adaptive_avg_pool2d(&full, [0, 2]).unwrap();
    assert_eq!((y.shape(), y.dtype()), (&[1, 1, 0, 2][..], DType::I32));
    assert!(adaptive_avg_pool2d(&full, [2, 2]).is_err());
    let y = adaptive_avg_pool1d(&e3, 2).unwrap();
    assert_eq!((y.shape(), y.dtype()), (&[0, 1, 2][..], DType::I32));
    // PyTorch's max_pool2d takes integers: an empty one is an empty result.
    let y = wgtensor::ops::max_pool2d(&e4, &wgtensor::ops::MaxPool2dOptions::new(2)).unwrap();
    assert_eq!((y.shape(), y.dtype()), (&[0, 1, 2, 2][..], DType::I32));
}

fn relation(op: CmpOp, a: f64, b: f64) -> bool {
    match op {
        CmpOp::Eq => a == b,
        CmpOp::Ne => a != b,
        CmpOp::Lt => a < b,
        CmpOp::Le => a <= b,
        CmpOp::Gt => a > b,
        CmpOp::Ge => a >= b,
    }
}

const OPS: [CmpOp; 6] = [
    CmpOp::Eq,
    CmpOp::Ne,
    CmpOp::Lt,
    CmpOp::Le,
    CmpOp::Gt,
    CmpOp::Ge,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Every relation, broadcast shapes and strided views, in f32, f16 and i32, with NaN.
    #[test]
    fn compare_matches_reference(
        rows in 1usize..5, cols in 1usize..6, seed in 0u64..1000, dt in 0usize..3,
    ) {
        let dtype = [DType::F32, DType::F16, DType::I32][dt];
        if dtype == DType::F16 && !dev().supports_f16() {
            return Ok(());
        }
        let mut s = seed;
        let mut next = || { s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407); ((s >> 33) % 7) as f64 - 3.0 };
        let mut a: Vec<f64> = (0..rows * cols).map(|_| next()).collect();
        let b: Vec<f64> = (0..cols).map(|_| next()).collect();
        if dtype != DType::I32 {
            a[0] = f64::NAN;
        }
        // a is uploaded transposed, then viewed back: a strided [rows, cols] input.
        let at: Vec<f64> = (0..rows * cols).map(|k| { let (c, r) = (k / rows, k % rows); a[r * cols + c] }).collect();
        let ta = common::upload(dev(), &at, &[cols, rows], dtype).transpose(0, 1).unwrap();
        let tb = common::upload(dev(), &b, &[cols], dtype);
        for op in OPS {
            let got = common::download(&ta.compare(&tb, op).unwrap()).unwrap();
            let want: Vec<f64> = (0..rows * cols).map(|k| relation(op, a[k], b[k % cols]) as u8 as f64).collect();
            prop_assert_eq!(&got, &want, "{:?} {:?}", op, dtype);
        }
        // Scalars.
        let got = common::download(&ta.gt_scalar(0.5).unwrap()).unwrap();
        let want: Vec<f64> = a.iter().map(|&v| (v > 0.5) as u8 as f64).collect();
        prop_assert_eq!(got, want);
    }

    /// where_cond with a three-way broadcast; gradients go to the chosen side.
    #[test]
    fn where_matches_reference(rows in 1usize..4, cols in 1usize..5, seed in 0u64..1000) {
        let mut s = seed;
        let mut next = || { s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407); ((s >> 33) % 9) as f64 - 4.0 };
        let cond: Vec<f64> = (0..rows).map(|_| next()).collect(); // [rows, 1]
        let a: Vec<f64> = (0..cols).map(|_| next()).collect(); // [cols]
        let b: Vec<f64> = (0..rows * cols).map(|_| next()).collect(); // [rows, cols]
        let tc = common::upload(dev(), &cond, &[rows, 1], DType::I32);
        let ta = common::upload(dev(), &a, &[cols], DType::F32).requires_grad().unwrap();
        let tb = common::upload(dev(), &b, &[rows, cols], DType::F32).requires_grad().unwrap();
        let y = tc.where_cond(&ta, &tb).unwrap();
        let want: Vec<f64> = (0..rows * cols).map(|k| if cond[k / cols] != 0.0 { a[k % cols] } else { b[k] }).collect();
        prop_assert_eq!(common::download(&y).unwrap(), want);
        let g = y.mul_scalar(2.0).unwrap().sum_all().unwrap().backward().unwrap();
        let ga: Vec<f64> = (0..cols).map(|_| (0..rows).filter(|&r| cond[r] != 0.0).count() as f64 * 2.0).collect();
        let gb: Vec<f64> = (0..rows * cols).map(|k| if cond[k / cols] != 0.0 { 0.0 } else { 2.0 }).collect();
        prop_assert_eq!(common::download(g.get(&ta).unwrap()).unwrap(), ga);
        prop_assert_eq!(common::download(g.get(&tb).unwrap()).unwrap(), gb);
    }
}

#[test]
fn where_condition_semantics() {
    // NaN and any non-zero value are true, as PyTorch's bool(x).
    let c = tf(&[f32::NAN, 0.0, -0.0, 2.5], &[4]);
    let y = c
        .where_cond(&tf(&[1.0; 4], &[4]), &tf(&[0.0; 4], &[4]))
        .unwrap();
    assert_eq!(f(&y), vec![1.0, 0.0, 0.0, 1.0]);
    // i32 on both sides stays exact.
    let y = ti(&[1, 0], &[2])
        .where_cond(&ti(&[i32::MAX, 1], &[2]), &ti(&[5, -(1 << 30) - 1], &[2]))
        .unwrap();
    assert_eq!(i(&y), vec![i32::MAX, -(1 << 30) - 1]);
    // Mixed dtypes promote as PyTorch: i32 with f32 gives f32 (where and compare).
    let y = ti(&[1, 0], &[2])
        .where_cond(&tf(&[1.5, 1.5], &[2]), &ti(&[7, 7], &[2]))
        .unwrap();
    assert_eq!((y.dtype(), f(&y)), (DType::F32, vec![1.5, 7.0]));
    let m = ti(&[1, 2], &[2]).eq(&tf(&[1.0, 2.5], &[2])).unwrap();
    assert_eq!(f(&m), vec![1.0, 0.0]);
    assert!(ti(&[1, 0], &[2])
        .where_cond(&tf(&[1.0; 3], &[3]), &tf(&[0.0], &[1]))
        .is_err());
}

#[test]
fn masked_fill_as_pytorch() {
    let x = tf(&[1.0, 2.0, 3.0, 4.0], &[2, 2]).requires_grad().unwrap();
    let mask = ti(&[0, 1], &[2]); // broadcast over rows
    let y = x.masked_fill(&mask, -5.0).unwrap();
    assert_eq!(f(&y), vec![1.0, -5.0, 3.0, -5.0]);
    let g = y.sum_all().unwrap().backward().unwrap();
    assert_eq!(f(g.get(&x).unwrap()), vec![1.0, 0.0, 1.0, 0.0]);
    // The mask may grow the result, as PyTorch's out-of-place masked_fill; the gradient is
    // summed back.
    let one = tf(&[2.0], &[1]).requires_grad().unwrap();
    let y = one.masked_fill(&ti(&[1, 0, 0], &[3, 1]), 0.0).unwrap();
    assert_eq!((y.shape(), f(&y)), (&[3, 1][..], vec![0.0, 2.0, 2.0]));
    let g = y.sum_all().unwrap().backward().unwrap();
    assert_eq!(f(g.get(&one).unwrap()), vec![2.0]);
    // A value the dtype cannot hold names masked_fill.
    let e = ti(&[1], &[1])
        .masked_fill(&ti(&[1], &[1]), f64::NAN)
        .unwrap_err();
    assert!(e.to_string().starts_with("masked_fill:"), "{e}");
    // Into i32, a float value truncates toward zero as PyTorch's cast; one past i32 (or NaN,
    // inf) is an error, as PyTorch's "cannot be converted ... without overflow".
    let xi = ti(&[7, 8, 9], &[3]);
    let m = ti(&[1, 0, 1], &[3]);
    assert_eq!(i(&xi.masked_fill(&m, 2.7).unwrap()), vec![2, 8, 2]);
    assert_eq!(i(&xi.masked_fill(&m, -2.7).unwrap()), vec![-2, 8, -2]);
    for bad in [f64::NEG_INFINITY, f64::NAN, 3e9] {
        let e = xi.masked_fill(&m, bad).unwrap_err().to_string();
        assert!(e.contains("without overflow"), "{bad}: {e}");
    }
    // Float tensors: a finite value past the dtype is an error too (PyTorch's fp16 attention
    // mask pitfall, masked_fill(-1e9) on half), infinities and NaN fill.
    let xf = tf(&[1.0, 2.0, 3.0], &[3]);
    let e = xf.masked_fill(&m, 1e39).unwrap_err().to_string();
    assert!(e.contains("without overflow"), "{e}");
    assert!(f(&xf.masked_fill(&m, f64::NEG_INFINITY).unwrap())[0].is_infinite());
    if dev().supports_f16() {
        let xh = xf.to_dtype(DType::F16).unwrap();
        let e = xh.masked_fill(&m, -1e9).unwrap_err().to_string();
        assert!(
            e.contains("without overflow") && e.contains("c10::Half"),
            "{e}"
        );
        assert!(Tensor::full(dev(), &[2], 65504.0, DType::F16).is_ok());
        assert!(Tensor::full(dev(), &[2], 1e6, DType::F16).is_err());
        // Comparisons still take any bound: 1e6 is above every f16.
        let gt = xh.lt_scalar(1e6).unwrap();
        assert_eq!(f(&gt), vec![1.0; 3]);
    }
}

/// Float values into i32 truncate toward zero, as PyTorch's casts: `full`, `linspace` (float
/// steps, then the cast) and `arange` (PyTorch truncates start and step, then steps).
#[test]
fn float_values_truncate_into_i32() {
    assert_eq!(
        i(&Tensor::full(dev(), &[2], 2.7, DType::I32).unwrap()),
        vec![2, 2]
    );
    assert_eq!(
        i(&Tensor::full(dev(), &[1], -2.7, DType::I32).unwrap()),
        vec![-2]
    );
    assert_eq!(
        i(&Tensor::full(dev(), &[1], 2147483647.0, DType::I32).unwrap()),
        vec![i32::MAX]
    );
    // c10's overflow check for int is `f >= 2^31` (torch 2.15: full(.., 2147483647.9) is
    // 2147483647); 2^31 itself is refused.
    assert_eq!(
        i(&Tensor::full(dev(), &[2], 2147483647.9, DType::I32).unwrap()),
        vec![i32::MAX; 2]
    );
    assert!(Tensor::full(dev(), &[2], 2147483648.0, DType::I32).is_err());
    assert!(Tensor::full(dev(), &[1], -2147483648.5, DType::I32).is_err());
    let l = Tensor::linspace(dev(), 0.0, 10.0, 4, DType::I32).unwrap();
    assert_eq!(i(&l), vec![0, 3, 6, 10]);
    // The ends are cast first: (0, 5) in steps of 2.5.
    let l = Tensor::linspace(dev(), 0.9, 5.9, 3, DType::I32).unwrap();
    assert_eq!(i(&l), vec![0, 2, 5]);
    // A step that truncates to 0 repeats the start, the count from the float bounds.
    let a = Tensor::arange(dev(), 1.5, 3.0, 0.5, DType::I32).unwrap();
    assert_eq!(i(&a), vec![1, 1, 1]);
    let a = Tensor::arange(dev(), -3.0, 3.0, 1.5, DType::I32).unwrap();
    assert_eq!(i(&a), vec![-3, -2, -1, 0]);
    let a = Tensor::arange(dev(), 0.0, 5.0, 1.0, DType::I32).unwrap();
    assert_eq!(i(&a), vec![0, 1, 2, 3, 4]);
}

#[test]
fn argmax_argmin_ties_nan_keepdim_and_views() {
    let x = tf(&[1.0, 3.0, 3.0, -1.0, 0.0, -1.0, 2.0, 2.0], &[2, 4]);
    assert_eq!(i(&x.argmax(1, false).unwrap()), vec![1, 2]);
    assert_eq!(i(&x.argmin(1, false).unwrap()), vec![3, 1]);
    let k = x.argmax(-1, true).unwrap();
    assert_eq!(k.shape(), &[2, 1]);
    assert_eq!(i(&x.argmax(0, false).unwrap()), vec![0, 0, 0, 1]);
    assert_eq!(i(&x.argmax_all().unwrap()), vec![1]);
    assert_eq!(x.argmax_all().unwrap().shape(), &[] as &[usize]);
    assert_eq!(i(&x.argmin_all().unwrap()), vec![3]);
    // NaN is the extremum for both, first one wins.
    let n = tf(&[1.0, f32::NAN, 5.0, f32::NAN], &[4]);
    assert_eq!(i(&n.argmax(0, false).unwrap()), vec![1]);
    assert_eq!(i(&n.argmin(0, false).unwrap()), vec![1]);
    let n0 = tf(&[f32::NAN, 9.0], &[2]);
    assert_eq!(i(&n0.argmax(0, false).unwrap()), vec![0]);
    // A transposed view, i32 input past 2^24, and f16.
    assert_eq!(
        i(&x.transpose(0, 1).unwrap().argmax(0, false).unwrap()),
        vec![1, 2]
    );
    let big = ti(&[16_777_217, 16_777_216, -5], &[3]);
    assert_eq!(i(&big.argmax(0, false).unwrap()), vec![0]);
    assert_eq!(i(&big.argmin(0, false).unwrap()), vec![2]);
    if dev().supports_f16() {
        let h = Tensor::from_slice(dev(), &[f16::from_f32(0.5), f16::from_f32(7.0)], &[2]).unwrap();
        assert_eq!(i(&h.argmax(0, false).unwrap()), vec![1]);
    }
    // Errors: an empty reduced dim, a bad dim. An empty other dim is fine.
    assert!(tf(&[], &[2, 0]).argmax(1, false).is_err());
    assert!(x.argmax(2, false).is_err());
    assert_eq!(tf(&[], &[0, 3]).argmax(1, false).unwrap().shape(), &[0]);
    // Integer outputs are never tracked.
    let xr = x.clone().requires_grad().unwrap();
    let e = xr
        .argmax(1, false)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward();
    assert!(e.is_err());
}

/// Host gather along `dim`, NaN for out-of-range indices.
fn gather_ref(x: &[f64], xs: &[usize], dim: usize, idx: &[i32], is: &[usize]) -> Vec<f64> {
    (0..idx.len())
        .map(|k| {
            let mut c = common::reference::unravel(k, is);
            let j = idx[k];
            if j < 0 || j as usize >= xs[dim] {
                return f64::NAN;
            }
            c[dim] = j as usize;
            x[common::reference::ravel(&c, xs)]
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10))]

    /// gather forward and backward (a scatter-add of the gradient) against the reference, on
    /// a strided input, in f32 and f16.
    #[test]
    fn gather_and_its_gradient(
        a in 1usize..4, b in 1usize..5, dim in 0usize..2, seed in 0u64..1000, half in proptest::bool::ANY,
    ) {
        let dtype = if half { DType::F16 } else { DType::F32 };
        if half && !dev().supports_f16() {
            return Ok(());
        }
        let xs = [a, b];
        let x: Vec<f64> = (0..a * b).map(|k| common::round_to_dtype(dtype, (k as f64 * 0.37 + seed as f64).sin() * 3.0)).collect();
        let mut is = xs;
        is[dim] = 1 + (seed as usize % 4);
        let n: usize = is.iter().product();
        let idx: Vec<i32> = (0..n).map(|k| ((seed as usize + 7 * k) % xs[dim]) as i32).collect();
        let tx = common::upload(dev(), &x, &xs, dtype).requires_grad().unwrap();
        let tidx = ti(&idx, &is);
        let y = tx.gather(dim as isize, &tidx).unwrap();
        prop_assert_eq!(y.shape(), &is[..]);
        prop_assert_eq!(common::download(&y).unwrap(), gather_ref(&x, &xs, dim, &idx, &is));
        // d(sum(y * w)) / dx scatters w back: x[.., idx[k], ..] += w[k].
        let w: Vec<f64> = (0..n).map(|k| k as f64 + 1.0).collect();
        let g = y.mul(&common::upload(dev(), &w, &is, dtype)).unwrap().sum_all().unwrap().backward().unwrap();
        let mut want = vec![0.0; a * b];
        for k in 0..n {
            let mut c = common::reference::unravel(k, &is);
            c[dim] = idx[k] as usize;
            want[common::reference::ravel(&c, &xs)] += w[k];
        }
        let got = common::download(g.get(&tx).unwrap()).unwrap();
        for (g, w) in got.iter().zip(&want) {
            prop_assert!((g - w).abs() <= 1e-3 * (1.0 + w.abs()), "{:?} vs {:?}", got, want);
        }
    }
}

#[test]
fn gather_out_of_range_is_nan_never_oob() {
    let x = tf(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let y = x.gather(1, &ti(&[0, 2, -1, 1], &[2, 2])).unwrap();
    let v = f(&y);
    assert_eq!((v[0], v[3]), (1.0, 4.0));
    assert!(v[1].is_nan() && v[2].is_nan());
    let yi = ti(&[7, 8], &[2]).gather(0, &ti(&[1, 5], &[2])).unwrap();
    assert_eq!(i(&yi), vec![8, 0]);
    // Shape and dtype errors.
    assert!(x.gather(1, &tf(&[0.0], &[1, 1])).is_err());
    assert!(x.gather(1, &ti(&[0, 0, 0], &[3, 1])).is_err());
    assert!(x.gather(1, &ti(&[0], &[1])).is_err());
    assert!(x.gather(2, &ti(&[0], &[1, 1])).is_err());
}

#[test]
fn index_select_forward_backward_and_views() {
    let x = tf(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])
        .requires_grad()
        .unwrap();
    let idx = ti(&[2, 0, 2, 2], &[4]);
    let y = x.index_select(1, &idx).unwrap();
    assert_eq!(y.shape(), &[2, 4]);
    assert_eq!(f(&y), vec![3.0, 1.0, 3.0, 3.0, 6.0, 4.0, 6.0, 6.0]);
    let g = y.sum_all().unwrap().backward().unwrap();
    assert_eq!(f(g.get(&x).unwrap()), vec![1.0, 0.0, 3.0, 1.0, 0.0, 3.0]);
    // A strided index (every other element of a longer one) and a strided input.
    let long = ti(&[1, 9, 0, 9], &[4]);
    let strided = long
        .reshape(&[2, 2])
        .unwrap()
        .narrow(1, 0, 1)
        .unwrap()
        .reshape(&[2])
        .unwrap();
    let y = tf(&[1.0, 2.0, 3.0, 4.0], &[2, 2])
        .transpose(0, 1)
        .unwrap()
        .index_select(0, &strided)
        .unwrap();
    assert_eq!(f(&y), vec![2.0, 4.0, 1.0, 3.0]);
    // Index views that stay strided: a column (stride 2) and a broadcast (stride 0), with
    // their gradients.
    let col = long
        .reshape(&[2, 2])
        .unwrap()
        .narrow(1, 0, 1)
        .unwrap()
        .squeeze(1)
        .unwrap();
    assert_eq!(col.strides(), &[2]);
    let y = x.index_select(1, &col).unwrap();
    assert_eq!(f(&y), vec![2.0, 1.0, 5.0, 4.0]);
    let g = y.sum_all().unwrap().backward().unwrap();
    assert_eq!(f(g.get(&x).unwrap()), vec![1.0, 1.0, 0.0, 1.0, 1.0, 0.0]);
    let same = ti(&[2], &[1]).broadcast_to(&[3]).unwrap();
    let y = x.index_select(1, &same).unwrap();
    assert_eq!(f(&y), vec![3.0, 3.0, 3.0, 6.0, 6.0, 6.0]);
    // Empty index, 2-D index error, i32 data.
    assert_eq!(x.index_select(0, &ti(&[], &[0])).unwrap().shape(), &[0, 3]);
    assert!(x.index_select(0, &ti(&[0, 0], &[1, 2])).is_err());
    assert_eq!(
        i(&ti(&[5, 6, 7], &[3])
            .index_select(0, &ti(&[2, 2, 0], &[3]))
            .unwrap()),
        vec![7, 7, 5]
    );
}

#[test]
fn scatter_add_forward_backward_deterministic() {
    let base = tf(&[1.0; 6], &[2, 3]).requires_grad().unwrap();
    let src = tf(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &[2, 4])
        .requires_grad()
        .unwrap();
    // dim 1: row r of index/src scatters into row r of out; index is [2, 3] (smaller than src).
    let index = ti(&[0, 2, 2, 1, 1, 0], &[2, 3]);
    let y = base.scatter_add(1, &index, &src).unwrap();
    // Row 0: src 1 -> col 0, 2 and 3 -> col 2; row 1: 5 -> col 1, 6 -> col 1, 7 -> col 0.
    assert_eq!(f(&y), vec![2.0, 1.0, 6.0, 8.0, 12.0, 1.0]);
    let w = tf(&[1.0, 10.0, 100.0, 1000.0, 10000.0, 100000.0], &[2, 3]);
    let g = y.mul(&w).unwrap().sum_all().unwrap().backward().unwrap();
    assert_eq!(f(g.get(&base).unwrap()), f(&w));
    // src's gradient gathers w at the index; entries past the index's extent get 0.
    assert_eq!(
        f(g.get(&src).unwrap()),
        vec![1.0, 100.0, 100.0, 0.0, 10000.0, 10000.0, 1000.0, 0.0]
    );
    // Same bits on every run: many colliding f32 adds.
    let n = 4096;
    let vals: Vec<f32> = (0..n)
        .map(|k| ((k * 7919) % 1000) as f32 * 1e-3 + 1e-7)
        .collect();
    let idx: Vec<i32> = (0..n).map(|k| (k % 3) as i32).collect();
    let run = || {
        Tensor::zeros(dev(), &[3], DType::F32)
            .unwrap()
            .scatter_add(0, &ti(&idx, &[n]), &tf(&vals, &[n]))
            .unwrap()
    };
    let first = f(&run());
    for _ in 0..3 {
        assert_eq!(f(&run()), first);
    }
    let want: Vec<f64> = (0..3)
        .map(|c| (0..n).filter(|k| k % 3 == c).map(|k| vals[k] as f64).sum())
        .collect();
    for (g, w) in first.iter().zip(&want) {
        assert!((*g as f64 - w).abs() < 1e-3, "{first:?} vs {want:?}");
    }
    // Out-of-range indices add nothing; errors for shapes and dtypes.
    let y = tf(&[0.0, 0.0], &[2])
        .scatter_add(0, &ti(&[1, 2, -1], &[3]), &tf(&[1.0, 2.0, 3.0], &[3]))
        .unwrap();
    assert_eq!(f(&y), vec![0.0, 1.0]);
    assert!(base
        .scatter_add(1, &index, &tf(&[1.0; 4], &[2, 2]))
        .is_err());
    assert!(base.scatter_add(1, &tf(&[0.0; 6], &[2, 3]), &src).is_err());
    // i32 data sums in i32, as PyTorch's (tests/robustness/int_scatter.rs has the paths).
    let ints = ti(&[0, 7], &[2])
        .scatter_add(0, &ti(&[0, 0], &[2]), &ti(&[1, 16_777_216], &[2]))
        .unwrap();
    assert_eq!(ints.to_vec::<i32>().unwrap(), vec![16_777_217, 7]);
    // An empty index copies self before any dtype rule, as PyTorch's (an i32 self too).
    let none = Tensor::zeros(dev(), &[0], DType::I32).unwrap();
    let copy = ti(&[4, 5], &[2])
        .scatter_add(0, &none, &ti(&[1], &[1]))
        .unwrap();
    assert_eq!(copy.to_vec::<i32>().unwrap(), vec![4, 5]);
}

#[test]
fn embedding_with_padding_idx_and_one_hot() {
    let w = tf(&[0.0, 0.0, 1.0, 2.0, 3.0, 4.0], &[3, 2])
        .requires_grad()
        .unwrap();
    let ids = ti(&[2, 1, 0, 2, 2, 0], &[2, 3]);
    let e = embedding(&ids, &w, Some(0)).unwrap();
    assert_eq!(e.shape(), &[2, 3, 2]);
    assert_eq!(
        f(&e),
        vec![3.0, 4.0, 1.0, 2.0, 0.0, 0.0, 3.0, 4.0, 3.0, 4.0, 0.0, 0.0]
    );
    let g = e.sum_all().unwrap().backward().unwrap();
    // Row 0 is padding: no gradient. Row 1 used once, row 2 three times.
    assert_eq!(f(g.get(&w).unwrap()), vec![0.0, 0.0, 1.0, 1.0, 3.0, 3.0]);
    // Negative padding_idx counts from the end; a transposed (strided) id tensor.
    let e2 = embedding(&ids.transpose(0, 1).unwrap(), &w, Some(-1)).unwrap();
    assert_eq!(e2.shape(), &[3, 2, 2]);
    let g2 = e2.sum_all().unwrap().backward().unwrap();
    assert_eq!(f(g2.get(&w).unwrap()), vec![2.0, 2.0, 1.0, 1.0, 0.0, 0.0]);
    assert!(embedding(&ids, &w, Some(3)).is_err());
    assert!(embedding(&tf(&[0.0], &[1]), &w, None).is_err());
    assert!(embedding(&ids, &tf(&[0.0; 3], &[3]), None).is_err());
    // one_hot: i32 output, trailing class dim; out-of-range gives a zero row.
    let oh = ti(&[0, 2, 1, 5], &[2, 2]).one_hot(3).unwrap();
    assert_eq!((oh.dtype(), oh.shape()), (DType::I32, &[2, 2, 3][..]));
    assert_eq!(i(&oh), vec![1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0]);
    assert!(tf(&[0.0], &[1]).one_hot(2).is_err());
    // An empty input: the empty result at once, whatever the class count (no class tensor is
    // built: 1e9 classes would not fit one binding), and PyTorch's refusal of a count of 0.
    let empty = ti(&[], &[0, 3]);
    for n in [1usize, 1_000_000_000] {
        let oh = empty.one_hot(n).unwrap();
        assert_eq!((oh.dtype(), oh.shape()), (DType::I32, &[0, 3, n][..]));
    }
    let e = empty.one_hot(0).unwrap_err().to_string();
    assert!(e.contains("one_hot") && e.contains("empty"), "{e}");
    // PyTorch's default num_classes=-1 infers the largest index plus one (test_one_hot).
    let e = empty.one_hot(-1).unwrap_err().to_string();
    assert!(e.contains("Can not infer total number of classes"), "{e}");
    let oh = ti(&[3, 4, 1, 0], &[4]).one_hot(-1).unwrap();
    assert_eq!(oh.shape(), &[4, 5]);
    assert_eq!(
        i(&oh),
        vec![0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0]
    );
    let e = ti(&[1, -1], &[2]).one_hot(-1).unwrap_err().to_string();
    assert!(e.contains("Class values must be non-negative."), "{e}");
    let e = ti(&[1, 0], &[2]).one_hot(-2).unwrap_err().to_string();
    assert!(
        e.contains("Class values must be smaller than num_classes."),
        "{e}"
    );
    // PyTorch checks the values' sign before the count.
    let e = ti(&[-1, 0], &[2]).one_hot(-2).unwrap_err().to_string();
    assert!(e.contains("Class values must be non-negative."), "{e}");
}

/// Buckets longer than one invocation sorts (257 ids and more: on GPUs a workgroup each, runs
/// of 256 merged in passes, then a workgroup per output adding them) come out in a fixed
/// order: hub rows of 257, 300, 1000 and 70001 ids among others, the gradient bitwise the
/// host's sum in that order (index order on CPU adapters), and the same on a second run; on
/// the CPU adapter's plan and the GPUs' (`gpu_plans`).
#[test]
fn index_select_backward_with_hub_rows() {
    let (v, e) = (64usize, 2usize);
    let mut ids: Vec<i32> = Vec::new();
    for (row, n) in [(3, 257), (9, 300), (40, 1000), (63, 70001)] {
        ids.extend(std::iter::repeat_n(row, n));
    }
    ids.extend((0..5000).map(|j| (j * 37 % v) as i32));
    // A fixed shuffle, so each bucket's positions are spread over the whole index.
    let l = ids.len();
    for j in (1..l).rev() {
        let k = (j * 2_654_435_761) % (j + 1);
        ids.swap(j, k);
    }
    let g: Vec<f32> = (0..l * e)
        .map(|k| ((k * 7919 % 1009) as f32 - 504.0) / 37.0)
        .collect();
    let want = |gpu: bool| -> Vec<f32> {
        let mut terms = vec![Vec::new(); v * e];
        for (j, &id) in ids.iter().enumerate() {
            for c in 0..e {
                terms[id as usize * e + c].push(g[j * e + c]);
            }
        }
        terms.iter().map(|t| common::bucket_sum(t, gpu)).collect()
    };
    for (d, gpu) in [
        (dev(), common::on_gpu(dev())),
        (common::gpu_plans_device(), true),
    ] {
        let w = Tensor::zeros(d, &[v, e], DType::F32)
            .unwrap()
            .requires_grad()
            .unwrap();
        let run = || {
            let idx = Tensor::from_slice(d, &ids, &[l]).unwrap();
            let y = w.index_select(0, &idx).unwrap();
            let gy = Tensor::from_slice(d, &g, &[l, e]).unwrap();
            f(y.backward_with_grad(&gy).unwrap().get(&w).unwrap())
        };
        let got = run();
        assert_eq!(
            got,
            want(gpu),
            "the sums match the host's bit for bit (gpu {gpu})"
        );
        assert_eq!(run(), got);
    }
    // Along a middle dim: [2, v, 3] from a gradient [2, l, 3].
    let gm: Vec<f32> = (0..2 * l * 3)
        .map(|k| ((k * 613 % 1013) as f32 - 506.0) / 29.0)
        .collect();
    let want = |gpu: bool| -> Vec<f32> {
        let mut terms = vec![Vec::new(); 2 * v * 3];
        for o in 0..2 {
            for (j, &id) in ids.iter().enumerate() {
                for c in 0..3 {
                    terms[(o * v + id as usize) * 3 + c].push(gm[(o * l + j) * 3 + c]);
                }
            }
        }
        terms.iter().map(|t| common::bucket_sum(t, gpu)).collect()
    };
    for (d, gpu) in [
        (dev(), common::on_gpu(dev())),
        (common::gpu_plans_device(), true),
    ] {
        let x = Tensor::zeros(d, &[2, v, 3], DType::F32)
            .unwrap()
            .requires_grad()
            .unwrap();
        let idx = Tensor::from_slice(d, &ids, &[l]).unwrap();
        let y = x.index_select(1, &idx).unwrap();
        let gy = Tensor::from_slice(d, &gm, &[2, l, 3]).unwrap();
        let got = f(y.backward_with_grad(&gy).unwrap().get(&x).unwrap());
        assert_eq!(got, want(gpu), "middle dim (gpu {gpu})");
    }
    // A general scatter_add (the index differs per row, so each output is a bucket) with
    // outputs that take 257 to 12000 values: the same orders, from the base.
    let (rows, cols, n) = (4usize, 16usize, 20000usize);
    let index: Vec<i32> = (0..rows * n)
        .map(|k| match k % 7 {
            0..=3 => (k / n) as i32,
            _ => ((k * 13) % cols) as i32,
        })
        .collect();
    let src: Vec<f32> = (0..rows * n)
        .map(|k| ((k * 7919 % 1009) as f32 - 504.0) / 37.0)
        .collect();
    let base: Vec<f32> = (0..rows * cols).map(|k| k as f32 * 0.25).collect();
    let want = |gpu: bool| -> Vec<f32> {
        let mut terms = vec![Vec::new(); rows * cols];
        for (k, &c) in index.iter().enumerate() {
            terms[k / n * cols + c as usize].push(src[k]);
        }
        (0..rows * cols)
            .map(|o| common::bucket_sum_from(base[o], &terms[o], gpu))
            .collect()
    };
    for (d, gpu) in [
        (dev(), common::on_gpu(dev())),
        (common::gpu_plans_device(), true),
    ] {
        let b = Tensor::from_slice(d, &base, &[rows, cols]).unwrap();
        let i = Tensor::from_slice(d, &index, &[rows, n]).unwrap();
        let s = Tensor::from_slice(d, &src, &[rows, n]).unwrap();
        let got = f(&b.scatter_add(1, &i, &s).unwrap());
        assert_eq!(got, want(gpu), "scatter_add (gpu {gpu})");
    }
}

/// The row scatter (one 1-D index broadcast over the columns) with a base: each sum starts
/// from its base element (PyTorch's copy of self), a hub row of 425 values too (on GPUs its
/// lanes, lane 0 from the base, folded in a tree); in f32, and in f16 from the half base in
/// f32, rounded once.
#[test]
fn row_scatter_with_a_base_and_a_hub_row() {
    let (rows, cols) = (8usize, 4usize);
    let mut ids: Vec<i32> = vec![2; 400];
    ids.extend((0..200).map(|k| ((k * 5) % rows) as i32));
    let l = ids.len();
    let src: Vec<f32> = (0..l * cols)
        .map(|k| ((k * 7919 % 1009) as f32 - 504.0) / 37.0)
        .collect();
    let base: Vec<f32> = (0..rows * cols).map(|k| 1000.0 + k as f32 * 0.25).collect();
    let want = |src: &[f32], base: &[f32], gpu: bool| -> Vec<f32> {
        (0..rows * cols)
            .map(|o| {
                let (r, c) = (o / cols, o % cols);
                let terms: Vec<f32> = (0..l)
                    .filter(|&j| ids[j] as usize == r)
                    .map(|j| src[j * cols + c])
                    .collect();
                common::bucket_sum_from(base[o], &terms, gpu)
            })
            .collect()
    };
    for (d, gpu) in [
        (dev(), common::on_gpu(dev())),
        (common::gpu_plans_device(), true),
    ] {
        let idx = Tensor::from_slice(d, &ids, &[l])
            .unwrap()
            .unsqueeze(1)
            .unwrap()
            .broadcast_to(&[l, cols])
            .unwrap();
        let s = Tensor::from_slice(d, &src, &[l, cols]).unwrap();
        let b = Tensor::from_slice(d, &base, &[rows, cols]).unwrap();
        let got = f(&b.scatter_add(0, &idx, &s).unwrap());
        assert_eq!(got, want(&src, &base, gpu), "f32 (gpu {gpu})");
        if d.supports_f16() {
            let h = |v: &[f32]| v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>();
            let back = |v: &[f16]| v.iter().map(|x| x.to_f32()).collect::<Vec<_>>();
            let (sh, bh) = (h(&src), h(&base));
            let want_h = h(&want(&back(&sh), &back(&bh), gpu));
            let s = Tensor::from_slice(d, &sh, &[l, cols]).unwrap();
            let b = Tensor::from_slice(d, &bh, &[rows, cols]).unwrap();
            let got = b.scatter_add(0, &idx, &s).unwrap().to_vec::<f16>().unwrap();
            assert_eq!(got, want_h, "f16 (gpu {gpu})");
        }
    }
}

/// The bucketed backward at a real vocabulary size: 5,000 rows, 4,000 ids with heavy repeats
/// (one id takes a quarter of them), against the host sum in index order; bitwise the same on
/// a second run; padding and out-of-range ids contribute nothing.
#[test]
fn embedding_backward_at_vocabulary_scale() {
    let (v, e, l) = (5000usize, 8usize, 4000usize);
    let ids: Vec<i32> = (0..l)
        .map(|j| match j % 4 {
            0 => 17,
            1 => -3,
            _ => ((j * 7919) % (v + 10)) as i32, // a few past the end
        })
        .collect();
    let g: Vec<f32> = (0..l * e)
        .map(|k| ((k * 31 % 97) as f32 - 48.0) / 16.0)
        .collect();
    let w = Tensor::zeros(dev(), &[v, e], DType::F32)
        .unwrap()
        .requires_grad()
        .unwrap();
    let run = || {
        let y = embedding(&ti(&ids, &[l]), &w, Some(4)).unwrap();
        let gy = tf(&g, &[l, e]);
        f(y.mul(&gy)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap()
            .get(&w)
            .unwrap())
    };
    let got = run();
    let mut want = vec![0.0f32; v * e];
    for (j, &id) in ids.iter().enumerate() {
        if id >= 0 && (id as usize) < v && id != 4 {
            for c in 0..e {
                want[id as usize * e + c] += g[j * e + c];
            }
        }
    }
    assert_eq!(got, want, "sums in index order match the host bit for bit");
    assert_eq!(run(), got);
    // index_select along a middle dim takes the same path.
    let x = Tensor::zeros(dev(), &[2, 3, 2], DType::F32)
        .unwrap()
        .requires_grad()
        .unwrap();
    let y = x.index_select(1, &ti(&[2, 2, 0, 7], &[4])).unwrap();
    let gx = y.sum_all().unwrap().backward().unwrap();
    assert_eq!(
        f(gx.get(&x).unwrap()),
        vec![1.0, 1.0, 0.0, 0.0, 2.0, 2.0, 1.0, 1.0, 0.0, 0.0, 2.0, 2.0]
    );
}

#[test]
fn accuracy_from_argmax_and_eq() {
    let logits = tf(&[0.1, 0.9, 0.8, 0.2, 0.3, 0.7], &[3, 2]);
    let labels = ti(&[1, 0, 0], &[3]);
    let acc = logits
        .argmax(1, false)
        .unwrap()
        .eq(&labels)
        .unwrap()
        .mean_all()
        .unwrap();
    assert!((f(&acc)[0] - 2.0 / 3.0).abs() < 1e-6);
    let m = ti(&[3], &[1]).compare_scalar(2.5, CmpOp::Gt).unwrap();
    assert_eq!(f(&m), vec![1.0]);
}

/// i32 tensors compare exactly against any f64 scalar, as PyTorch: scalars past the i32 range
/// (they used to saturate in `Tensor::full`), with fractions (they used to round both sides to
/// f32), ±inf and NaN. The mask keeps compare's dtype (f32) and the tensor's shape.
#[test]
fn i32_compare_scalar_is_exact() {
    let t = ti(&[i32::MAX, 0], &[2]);
    assert_eq!(f(&t.eq_scalar(4294967296.0).unwrap()), vec![0.0, 0.0]);
    assert_eq!(f(&t.lt_scalar(3e9).unwrap()), vec![1.0, 1.0]);
    let t = ti(&[i32::MIN, 0], &[2]);
    assert_eq!(f(&t.gt_scalar(-3e9).unwrap()), vec![1.0, 1.0]);

    let xs = [
        i32::MIN,
        i32::MIN + 1,
        -16777217,
        -3,
        -1,
        0,
        1,
        2,
        16777216,
        16777217,
        i32::MAX - 1,
        i32::MAX,
    ];
    let ss = [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
        0.5,
        -0.5,
        1.0,
        1.5,
        -1.5,
        -3.0,
        16777216.5,
        16777217.0,
        -16777216.5,
        2147483646.5,
        2147483647.0,
        2147483647.5,
        2147483648.0,
        4294967296.0,
        -2147483647.5,
        -2147483648.0,
        -2147483648.5,
        -2147483649.0,
        3e9,
        -3e9,
        1e300,
        -1e300,
        f64::MIN_POSITIVE,
    ];
    // A [3, 4] strided view (a transposed [4, 3] upload).
    let tt: Vec<i32> = (0..12).map(|k| xs[(k % 3) * 4 + k / 3]).collect();
    let t = ti(&tt, &[4, 3]).transpose(0, 1).unwrap();
    assert_eq!(i(&t.contiguous().unwrap()), xs.to_vec());
    for s in ss {
        for op in OPS {
            let m = t.compare_scalar(s, op).unwrap();
            assert_eq!(
                (m.dtype(), m.shape()),
                (DType::F32, &[3, 4][..]),
                "{op:?} {s}"
            );
            let want: Vec<f32> = xs
                .iter()
                .map(|&x| relation(op, x as f64, s) as u8 as f32)
                .collect();
            assert_eq!(f(&m), want, "{op:?} {s}");
        }
    }
    // Constant masks keep the shape, empty and 0-d included.
    for shape in [&[0usize, 3][..], &[]] {
        let n: usize = shape.iter().product();
        let e = ti(&vec![7; n], shape);
        for s in [f64::NAN, 1e10, 0.5] {
            let m = e.ne_scalar(s).unwrap();
            assert_eq!((m.dtype(), m.shape()), (DType::F32, shape));
            assert_eq!(f(&m), vec![1.0; n]);
        }
    }
    // Float tensors are unchanged: the scalar rounds to their dtype.
    let x = tf(&[16777216.0, 1.0], &[2]);
    assert_eq!(f(&x.eq_scalar(16777217.0).unwrap()), vec![1.0, 0.0]);
}

/// PyTorch's result_type for mixed dtypes: a 0-d tensor against one with dims takes the
/// latter's dtype within one category (f16 x == 0-d f32 compares in f16, as x == 0.1 does),
/// and a float of either shape beats i32.
#[test]
fn mixed_dtypes_follow_result_type() {
    let d = dev();
    let s = Tensor::from_slice(d, &[0.1f32], &[]).unwrap();
    let xi = ti(&[0, 1], &[2]);
    // i32 with dims against a 0-d f32: compared in f32.
    assert_eq!(f(&xi.lt(&s).unwrap()), vec![1.0, 0.0]);
    let m = ti(&[1, 0], &[2]);
    assert_eq!(m.where_cond(&xi, &s).unwrap().dtype(), DType::F32);
    if d.supports_f16() {
        let xh = Tensor::from_slice(d, &[f16::from_f32(0.1), f16::from_f32(0.5)], &[2]).unwrap();
        // 0.1 rounded to f16 equals x[0] in f16; in f32 it would not.
        assert_eq!(f(&xh.eq(&s).unwrap()), vec![1.0, 0.0]);
        assert_eq!(f(&s.eq(&xh).unwrap()), vec![1.0, 0.0]);
        let w = m.where_cond(&xh, &s).unwrap();
        assert_eq!(w.dtype(), DType::F16);
        // Both with dims: f32 wins, as before.
        let xf = tf(&[0.1, 0.5], &[2]);
        assert_eq!(m.where_cond(&xh, &xf).unwrap().dtype(), DType::F32);
    }
}

/// PyTorch counts a scalar as one dim of size 1 in the index ops: index_select of a scalar
/// with a one-value index is that scalar (its gradient too); gather and scatter_add mix 0-d
/// and 1-d operands.
#[test]
fn index_ops_take_scalars_as_one_dim() {
    let s = tf(&[5.0], &[]).requires_grad().unwrap();
    for idx in [ti(&[0], &[1]), ti(&[0], &[])] {
        let y = s.index_select(0, &idx).unwrap();
        assert_eq!((y.shape(), f(&y)), (&[][..], vec![5.0]));
        let y = s.index_select(-1, &idx).unwrap();
        let g = y.mul_scalar(3.0).unwrap().backward().unwrap();
        assert_eq!(f(g.get(&s).unwrap()), vec![3.0]);
    }
    let e = s
        .index_select(0, &ti(&[0, 0], &[2]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("only 1 value"), "{e}");
    assert!(s.index_select(1, &ti(&[0], &[1])).is_err());
    // gather: a 0-d index into a 1-d input gives a scalar, a 1-d index into a scalar a [1].
    let x = tf(&[1.0, 2.0], &[2]);
    let y = x.gather(0, &ti(&[1], &[])).unwrap();
    assert_eq!((y.shape(), f(&y)), (&[][..], vec![2.0]));
    let y = tf(&[7.0], &[]).gather(0, &ti(&[0], &[1])).unwrap();
    assert_eq!((y.shape(), f(&y)), (&[1][..], vec![7.0]));
    // scatter_add: a [1] self with 0-d index and src keeps self's shape.
    let y = tf(&[1.0], &[1])
        .scatter_add(0, &ti(&[0], &[]), &tf(&[2.5], &[]))
        .unwrap();
    assert_eq!((y.shape(), f(&y)), (&[1][..], vec![3.5]));
    let y = tf(&[1.0], &[])
        .scatter_add(0, &ti(&[0], &[1]), &tf(&[2.5], &[1]))
        .unwrap();
    assert_eq!((y.shape(), f(&y)), (&[][..], vec![3.5]));
}

/// An empty index skips gather's and scatter_add's shape checks, as PyTorch's (which return
/// before them): gather gives an empty result of the index's shape, scatter_add a copy of
/// self; the gradients are zeros and self's. masked_fill's errors name masked_fill.
#[test]
fn empty_indices_and_masked_fill_names() {
    let x = Tensor::from_slice(dev(), &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])
        .unwrap()
        .requires_grad()
        .unwrap();
    let e1 = Tensor::from_slice(dev(), &[] as &[i32], &[0]).unwrap();
    let e2 = Tensor::from_slice(dev(), &[] as &[i32], &[4, 0]).unwrap();
    assert_eq!(x.gather(1, &e1).unwrap().shape(), &[0]);
    let y = x.gather(1, &e2).unwrap();
    assert_eq!(y.shape(), &[4, 0]);
    let g = y.sum_all().unwrap().backward().unwrap();
    assert_eq!(g.get(&x).unwrap().to_vec::<f32>().unwrap(), vec![0.0; 6]);
    assert!(x.gather(5, &e1).is_err(), "the dim is still checked");
    let s = Tensor::from_slice(dev(), &[1.0f32, 2.0, 3.0], &[3])
        .unwrap()
        .requires_grad()
        .unwrap();
    let src = Tensor::ones(dev(), &[5, 2], DType::F32).unwrap();
    let out = s.scatter_add(0, &e2, &src).unwrap();
    assert_eq!(out.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0]);
    assert!(
        !out.shares_storage(&s),
        "a copy, as PyTorch's out-of-place form"
    );
    let g = out.sum_all().unwrap().backward().unwrap();
    assert_eq!(g.get(&s).unwrap().to_vec::<f32>().unwrap(), vec![1.0; 3]);
    let m = Tensor::ones(dev(), &[4], DType::F32).unwrap();
    let e = s.masked_fill(&m, 1.0).unwrap_err().to_string();
    assert!(e.starts_with("masked_fill"), "{e}");
    // A subnormal condition is true (PyTorch's bool(1e-45)).
    let c = Tensor::from_slice(dev(), &[1e-45f32, 0.0], &[2]).unwrap();
    let one = Tensor::ones(dev(), &[2], DType::F32).unwrap();
    let zero = Tensor::zeros(dev(), &[2], DType::F32).unwrap();
    assert_eq!(
        c.where_cond(&one, &zero).unwrap().to_vec::<f32>().unwrap(),
        vec![1.0, 0.0]
    );
}

/// An f16 cast to i32 saturates as an f32 one (the shader compilers clamp a float-to-int
/// conversion to the source type's range, so a direct f16 -> i32 conversion gave +-65504 for
/// the infinities): both go through f32.
#[test]
fn f16_infinities_cast_to_i32_as_f32_ones() {
    if !dev().supports_f16() {
        return;
    }
    let v = [f32::NEG_INFINITY, f32::INFINITY, -3.75, 65504.0];
    let x32 = Tensor::from_slice(dev(), &v, &[4]).unwrap();
    let want = x32.to_dtype(DType::I32).unwrap().to_vec::<i32>().unwrap();
    assert_eq!(want, [i32::MIN, 2147483520, -3, 65504]);
    let x16 = x32.to_dtype(DType::F16).unwrap();
    assert_eq!(
        x16.to_dtype(DType::I32).unwrap().to_vec::<i32>().unwrap(),
        want
    );
}
