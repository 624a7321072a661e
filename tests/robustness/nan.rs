//! NaN propagates as in PyTorch: through relu (standalone and fused), maximum/minimum, the
//! scalar max/min, the max/min reductions, and batch-norm statistics.

use wgtensor::ops::{
    batch_norm_inference, batch_norm_train, conv2d, gemm, Activation, BatchNormOptions,
    Conv2dOptions, GemmOptions, ScalarOp,
};
use wgtensor::{DType, Tensor};

use super::{dev, vals};
use crate::common::matrix;

fn t(v: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_slice(dev(), v, shape).unwrap()
}

const NAN: f32 = f32::NAN;

#[test]
fn elementwise_keeps_nan() {
    let x = t(&[NAN, -1.0, 2.0], &[3]);
    let r = vals(&x.relu().unwrap());
    assert!(r[0].is_nan() && r[1] == 0.0 && r[2] == 2.0, "{r:?}");
    let one = t(&[1.0, 1.0, 1.0], &[3]);
    for y in [
        x.maximum(&one).unwrap(),
        one.maximum(&x).unwrap(),
        x.minimum(&one).unwrap(),
        one.minimum(&x).unwrap(),
        x.scalar_op(ScalarOp::Max, 0.0).unwrap(),
        x.scalar_op(ScalarOp::Min, 0.0).unwrap(),
    ] {
        let v = vals(&y);
        assert!(v[0].is_nan(), "{v:?}");
        assert!(!v[1].is_nan() && !v[2].is_nan(), "{v:?}");
    }
    // relu's gradient passes at NaN, as PyTorch's threshold_backward (y <= 0 ? 0 : g), and
    // is 0 at 0 and below; through the fused GEMM epilogue too.
    let xl = t(&[NAN, -1.0, 0.0, 2.0], &[4]).requires_grad().unwrap();
    let g = xl.relu().unwrap().sum_all().unwrap().backward().unwrap();
    assert_eq!(vals(g.get(&xl).unwrap()), vec![1.0, 0.0, 0.0, 1.0]);
    let al = t(&[NAN, 1.0, -1.0, 0.0], &[4, 1]).requires_grad().unwrap();
    let y = gemm(
        &al,
        &t(&[1.0], &[1, 1]),
        &GemmOptions {
            activation: Activation::Relu,
            ..Default::default()
        },
    )
    .unwrap();
    let g = y.sum_all().unwrap().backward().unwrap();
    assert_eq!(vals(g.get(&al).unwrap()), vec![1.0, 1.0, 0.0, 0.0]);
    // Dropout, untracked as tracked, is x * mask * scale: a dropped NaN stays NaN and a
    // dropped inf becomes NaN, never 0 (PyTorch's src * mask * scale).
    for tracked in [false, true] {
        let mk = |v: f32| {
            let x = t(&[v; 64], &[64]);
            if tracked {
                x.requires_grad().unwrap()
            } else {
                x
            }
        };
        let d = vals(&wgtensor::ops::dropout(&mk(NAN), 0.5, true).unwrap());
        assert!(d.iter().all(|v| v.is_nan()), "tracked {tracked}: {d:?}");
        let d = vals(&wgtensor::ops::dropout(&mk(f32::INFINITY), 0.5, true).unwrap());
        assert!(
            d.iter().all(|&v| v.is_nan() || v == f32::INFINITY) && d.iter().any(|v| v.is_nan()),
            "tracked {tracked}: {d:?}"
        );
    }
    // A NaN scalar too.
    let v = vals(&one.scalar_op(ScalarOp::Max, f64::NAN).unwrap());
    assert!(v.iter().all(|x| x.is_nan()), "{v:?}");
    // f16 as well.
    if dev().supports_f16() {
        let h = x.to_dtype(DType::F16).unwrap().relu().unwrap();
        let v = vals(&h.to_dtype(DType::F32).unwrap());
        assert!(v[0].is_nan(), "{v:?}");
    }
}

#[test]
fn max_min_reductions_keep_nan() {
    // Short rows (one invocation per output) and long rows of few outputs (a workgroup each).
    for len in [5usize, 1000] {
        let mut v: Vec<f32> = (0..2 * len).map(|i| i as f32).collect();
        v[len / 2] = NAN; // row 0 only
        let x = t(&v, &[2, len]);
        for y in [x.max(1, false).unwrap(), x.min(1, false).unwrap()] {
            let r = vals(&y);
            assert!(r[0].is_nan() && !r[1].is_nan(), "len {len}: {r:?}");
        }
    }
    // Infinities reduce to themselves.
    let x = t(&[f32::NEG_INFINITY; 4], &[4]);
    assert_eq!(vals(&x.max(0, false).unwrap()), vec![f32::NEG_INFINITY]);
    let x = t(&[f32::INFINITY; 4], &[4]);
    assert_eq!(vals(&x.min(0, false).unwrap()), vec![f32::INFINITY]);
}

#[test]
fn fused_relu_epilogues_keep_nan() {
    let a = t(&[NAN, 1.0, 1.0, 1.0], &[2, 2]);
    let b = t(&[1.0, -1.0, 1.0, -1.0], &[2, 2]);
    let y = vals(
        &gemm(
            &a,
            &b,
            &GemmOptions {
                activation: Activation::Relu,
                ..Default::default()
            },
        )
        .unwrap(),
    );
    assert!(y[0].is_nan() && y[1].is_nan(), "row 0 holds the NaN: {y:?}");
    assert_eq!(&y[2..], &[2.0, 0.0]);

    let mut xv = vec![1.0f32; 16];
    xv[5] = NAN;
    let x = t(&xv, &[1, 1, 4, 4]);
    let w = t(&[-1.0; 4], &[1, 1, 2, 2]);
    let o = Conv2dOptions {
        activation: Activation::Relu,
        ..Default::default()
    };
    let y = vals(&conv2d(&x, &w, None, &o).unwrap());
    // Windows covering x[1][1] are NaN, the rest relu(-4) = 0.
    assert_eq!(y.iter().filter(|v| v.is_nan()).count(), 4, "{y:?}");
    assert!(y.iter().all(|&v| v.is_nan() || v == 0.0), "{y:?}");

    let x = t(&[NAN, -1.0, 1.0, -1.0], &[2, 2]);
    let rm = Tensor::zeros(dev(), &[2], DType::F32).unwrap();
    let rv = Tensor::full(dev(), &[2], 1.0, DType::F32).unwrap();
    let y = vals(
        &batch_norm_inference(
            &x,
            &rm,
            &rv,
            &BatchNormOptions {
                eps: 0.0,
                activation: Activation::Relu,
                ..Default::default()
            },
        )
        .unwrap(),
    );
    assert!(y[0].is_nan() && y[1] == 0.0, "{y:?}");
}

#[test]
fn batch_norm_statistics_keep_nan() {
    // Channel 0 holds a NaN, channel 1 does not.
    let x = t(&[NAN, 1.0, 2.0, 3.0, 4.0, 5.0], &[3, 2]);
    let out = batch_norm_train(&x, None, &BatchNormOptions::default()).unwrap();
    let (y, mean, invstd) = (out.y, out.saved.mean().clone(), out.saved.invstd().clone());
    let (m, s, y) = (vals(&mean), vals(&invstd), vals(&y));
    assert!(m[0].is_nan() && s[0].is_nan(), "mean {m:?} invstd {s:?}");
    assert!(!m[1].is_nan() && !s[1].is_nan(), "mean {m:?} invstd {s:?}");
    assert!(y.iter().step_by(2).all(|v| v.is_nan()), "{y:?}");
    assert!(y.iter().skip(1).step_by(2).all(|v| v.is_finite()), "{y:?}");
}

/// A spread past 1.8e19 overflows the variance to inf, as PyTorch's f32 statistics do: the
/// output is then 0 (x - mean times an inverse std of 0), never NaN. The merges of lanes and
/// groups that saw no values (weight 0) must not form inf * 0 on the way, on the CPU and the
/// GPU plans (their lanes and groups merge in different trees).
#[test]
fn batch_norm_infinite_variance_gives_zero_not_nan() {
    let gpu = wgtensor::Device::with_options(wgtensor::DeviceOptions {
        gpu_plans: true,
        cooperative_matrix: false,
        ..Default::default()
    })
    .unwrap();
    for d in [dev(), &gpu] {
        // Channel 0 spreads +-1e20 (its variance 1e40 is inf in f32); channel 1 is tame.
        let v: Vec<f32> = (0..12)
            .map(|i| {
                if i % 2 == 0 {
                    [1e20, -1e20][(i / 2) % 2]
                } else {
                    (i / 2) as f32
                }
            })
            .collect();
        let x = Tensor::from_slice(d, &v, &[6, 2]).unwrap();
        let out = batch_norm_train(&x, None, &BatchNormOptions::default()).unwrap();
        let (m, s, y) = (
            vals(out.saved.mean()),
            vals(out.saved.invstd()),
            vals(&out.y),
        );
        assert_eq!((m[0], s[0]), (0.0, 0.0), "mean {m:?} invstd {s:?}");
        assert!(s[1].is_finite() && s[1] > 0.0, "invstd {s:?}");
        assert!(y.iter().step_by(2).all(|&v| v == 0.0), "{y:?}");
        assert!(y.iter().skip(1).step_by(2).all(|v| v.is_finite()), "{y:?}");
    }
}

/// Non-finite operands reach exactly their own rows and columns of a product, on every GEMM
/// plan (CPU and GPU tiles, vector and scalar staging, split-k) and with either operand read
/// through a transpose: column 0 of every third row of A holds inf and row 0 of every fifth
/// column of B NaN. Kernels stage zeros past M, N and a slice's K range; a load past a row's
/// or a slice's end would pull the next row's inf into a neighbour (0 x inf is NaN).
#[test]
fn gemm_non_finite_stays_in_its_rows_and_columns() {
    let devices = [
        dev(),
        crate::common::gpu_plans_device(),
        crate::common::wide_gpu_plans_device(),
    ];
    let shapes = [
        (5, 6, 7, None),
        (33, 40, 17, None),
        (70, 130, 45, None),
        (130, 140, 9, None),
        (48, 40, 600, Some(3)),
    ];
    for (di, d) in devices.into_iter().enumerate() {
        for dtype in [DType::F32, DType::F16] {
            if dtype == DType::F16 && !d.supports_f16() {
                continue;
            }
            for &(m, n, k, split) in &shapes {
                for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                    non_finite_product(d, dtype, (m, n, k), split, (ta, tb))
                        .unwrap_or_else(|e| panic!("device {di}: {e}"));
                }
            }
        }
    }
}

/// One product of `non_finite_product`'s test: `Err` says where it went wrong.
fn non_finite_product(
    d: &wgtensor::Device,
    dtype: DType,
    (m, n, k): (usize, usize, usize),
    split: Option<u32>,
    (ta, tb): (bool, bool),
) -> Result<(), String> {
    // Small integers: exact in f16 and in every summation order (|sums| <= 9 k, and f16
    // products stay below its 2048 integer range by keeping k small there).
    let k = if dtype == DType::F16 { k.min(45) } else { k };
    let mut av: Vec<f32> = (0..m * k).map(|i| ((i * 5 + 3) % 7) as f32 - 3.0).collect();
    let mut bv: Vec<f32> = (0..k * n).map(|i| ((i * 5 + 1) % 7) as f32 - 3.0).collect();
    (0..m)
        .filter(|i| i % 3 == 1)
        .for_each(|i| av[i * k] = f32::INFINITY);
    (0..n).filter(|j| j % 5 == 2).for_each(|j| bv[j] = NAN);
    let opts = GemmOptions {
        split_k: split,
        ..Default::default()
    };
    let (a, b) = (
        matrix(d, &av, (m, k), ta, dtype),
        matrix(d, &bv, (k, n), tb, dtype),
    );
    let got = gemm(&a, &b, &opts)
        .and_then(|y| y.to_dtype(DType::F32))
        .and_then(|y| y.to_vec::<f32>())
        .map_err(|e| e.to_string())?;
    for i in 0..m {
        for j in 0..n {
            // At most one non-finite term per value: the same sum in any order.
            let want: f32 = (0..k).map(|p| av[i * k + p] * bv[p * n + j]).sum();
            let g = got[i * n + j];
            if !(g == want || (g.is_nan() && want.is_nan())) {
                return Err(format!(
                    "{dtype:?} [{m} x {k}] x [{k} x {n}] split {split:?} transposed \
                     ({ta}, {tb}) at ({i}, {j}): {g} against {want}"
                ));
            }
        }
    }
    Ok(())
}

/// maximum / minimum give the losing operand an exact 0, as PyTorch's masked_fill, not
/// g * 0: `sqrt(max(x, 0))` at a clamped x passes an infinite gradient that would make NaN.
#[test]
fn maximum_gradient_of_the_loser_is_zero() {
    let x = t(&[-1.0, 2.0], &[2]).requires_grad().unwrap();
    let z = t(&[0.0, 0.0], &[2]);
    let g = x.maximum(&z).unwrap().sqrt().unwrap().sum_all().unwrap();
    let g = vals(g.backward().unwrap().get(&x).unwrap());
    assert_eq!(g[0], 0.0);
    assert!((g[1] - 0.5 / 2f32.sqrt()).abs() < 1e-6, "{g:?}");
    let y = t(&[3.0, -2.0], &[2]).requires_grad().unwrap();
    let l = y
        .minimum(&z)
        .unwrap()
        .mul_scalar(f64::INFINITY)
        .unwrap()
        .sum_all()
        .unwrap();
    let g = vals(l.backward().unwrap().get(&y).unwrap());
    assert_eq!(g, vec![0.0, f32::INFINITY]);
}

/// pow_scalar(+-0.5) is sqrt / rsqrt, as PyTorch's pow(tensor, scalar) dispatches them (not
/// C99's pow): NaN at -inf, -0 keeps its sign; the gradient follows (-inf at -0).
#[test]
fn pow_scalar_half_is_sqrt() {
    let x = t(&[f32::NEG_INFINITY, -0.0, 4.0], &[3])
        .requires_grad()
        .unwrap();
    let y = vals(&x.pow_scalar(0.5).unwrap());
    assert!(y[0].is_nan());
    assert_eq!((y[1], y[1].is_sign_negative(), y[2]), (0.0, true, 2.0));
    let r = vals(&x.pow_scalar(-0.5).unwrap());
    assert!(r[0].is_nan());
    assert_eq!((r[1], r[2]), (f32::NEG_INFINITY, 0.5));
    let g = x
        .pow_scalar(0.5)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let g = vals(g.get(&x).unwrap());
    assert!(g[0].is_nan());
    assert_eq!((g[1], g[2]), (f32::NEG_INFINITY, 0.25));
}

/// relu is PyTorch's clamp_min(x, 0): only values below 0 become 0, so -0.0 keeps its sign
/// (`1 / relu(-0.0)` is -inf in PyTorch) and NaN passes.
#[test]
fn relu_keeps_negative_zero() {
    let x = t(&[-0.0, 0.0, -2.0, NAN, 3.0], &[5]);
    let y = vals(&x.relu().unwrap());
    let signs: Vec<bool> = y.iter().map(|v| v.is_sign_negative()).collect();
    assert_eq!((y[0], y[1], y[2], y[4]), (0.0, 0.0, 0.0, 3.0), "{y:?}");
    assert_eq!(&signs[..3], &[true, false, false], "{y:?}");
    assert!(y[3].is_nan(), "{y:?}");
}

/// clamp_min / clamp_max keep x unless it is past the bound (PyTorch's CPU and CUDA kernels
/// agree for scalar bounds), so on a tie of -0.0 and 0.0 the result is x's zero; clamp,
/// hardtanh and relu6 run on them. In f32 and f16, and over 64 elements (the wide path).
#[test]
fn clamp_keeps_x_on_signed_zero_ties() {
    let n = 64;
    for dt in [DType::F32, DType::F16] {
        let neg = t(&vec![-0.0; n], &[n]).to_dtype(dt).unwrap();
        let pos = t(&vec![0.0; n], &[n]).to_dtype(dt).unwrap();
        let signs = |y: Tensor| -> Vec<bool> {
            let v = vals(&y.to_dtype(DType::F32).unwrap());
            assert!(v.iter().all(|&x| x == 0.0), "{v:?}");
            v.iter().map(|x| x.is_sign_negative()).collect()
        };
        for (y, negative, what) in [
            (neg.max_scalar(0.0).unwrap(), true, "clamp_min(-0, 0)"),
            (pos.max_scalar(-0.0).unwrap(), false, "clamp_min(0, -0)"),
            (neg.min_scalar(0.0).unwrap(), true, "clamp_max(-0, 0)"),
            (pos.min_scalar(-0.0).unwrap(), false, "clamp_max(0, -0)"),
            (
                neg.clamp(Some(0.0), Some(0.0)).unwrap(),
                true,
                "clamp(-0, 0, 0)",
            ),
            (wgtensor::ops::relu6(&neg).unwrap(), true, "relu6(-0)"),
            (
                wgtensor::ops::hardtanh(&pos, -1.0, -0.0).unwrap(),
                false,
                "hardtanh(0, -1, -0)",
            ),
        ] {
            assert_eq!(signs(y), vec![negative; n], "{what} {dt:?}");
        }
    }
}

/// A training eps below f32's range (1e-50) still normalizes a constant channel to 0, as
/// PyTorch's CPU kernel, which adds eps to the variance in f64; rounded to an f32 0 it gave
/// 0 / 0 = NaN. On the CPU and the GPU plans.
#[test]
fn batch_norm_train_tiny_eps_keeps_constant_channels_zero() {
    for d in [dev(), crate::common::gpu_plans_device()] {
        let v: Vec<f32> = (0..12)
            .map(|i| if i % 2 == 0 { 2.0 } else { i as f32 })
            .collect();
        let x = Tensor::from_slice(d, &v, &[6, 2]).unwrap();
        for eps in [1e-50, 1e-44] {
            let o = BatchNormOptions {
                eps,
                ..Default::default()
            };
            let y = vals(&batch_norm_train(&x, None, &o).unwrap().y);
            assert!(y.iter().step_by(2).all(|&v| v == 0.0), "eps {eps}: {y:?}");
            assert!(y.iter().skip(1).step_by(2).all(|v| v.is_finite()), "{y:?}");
        }
    }
}
