//! Pooling's fixed cases (1-D pools and options, NaN, divisor_override) and PyTorch's argument
//! errors. The property tests against the f64 transcription of PyTorch's kernels live in
//! tests/conformance/pool.rs (shared with the browser suite).
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

use wgtensor::ops::{
    adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_max_pool2d,
    adaptive_max_pool2d_with_indices, avg_pool1d, avg_pool2d, max_pool1d, max_pool1d_with_indices,
    max_pool2d, AvgPool1dOptions, AvgPool2dOptions, MaxPool1dOptions, MaxPool2dOptions,
};
use wgtensor::{Device, Tensor};

fn dev() -> &'static Device {
    static DEV: std::sync::OnceLock<Device> = std::sync::OnceLock::new();
    DEV.get_or_init(|| Device::new().expect("device"))
}

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f32>()
        .unwrap()
        .into_iter()
        .map(f64::from)
        .collect()
}

#[test]
fn one_d_pools_and_options() {
    let x = Tensor::from_slice(dev(), &[1.0f32, 5.0, 2.0, 4.0, 3.0, 0.0, 7.0], &[1, 1, 7]).unwrap();
    assert_eq!(
        vals(&max_pool1d(&x, &MaxPool1dOptions::new(2)).unwrap()),
        vec![5.0, 4.0, 3.0]
    );
    let ceil = MaxPool1dOptions {
        ceil_mode: true,
        ..MaxPool1dOptions::new(2)
    };
    assert_eq!(
        vals(&max_pool1d(&x, &ceil).unwrap()),
        vec![5.0, 4.0, 3.0, 7.0]
    );
    let (y, idx) = max_pool1d_with_indices(&x, &ceil).unwrap();
    assert_eq!(vals(&y), vec![5.0, 4.0, 3.0, 7.0]);
    assert_eq!(
        (idx.shape(), idx.to_vec::<i32>().unwrap()),
        (&[1, 1, 4][..], vec![1, 3, 4, 6])
    );
    let near = |got: Vec<f64>, want: &[f64]| {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{got:?} vs {want:?}");
        }
    };
    near(
        vals(&avg_pool1d(&x, &AvgPool1dOptions::new(3)).unwrap()),
        &[8.0 / 3.0, 7.0 / 3.0],
    );
    let pad = AvgPool1dOptions {
        padding: 1,
        count_include_pad: false,
        ..AvgPool1dOptions::new(3)
    };
    near(vals(&avg_pool1d(&x, &pad).unwrap()), &[3.0, 3.0, 3.5]);
    near(vals(&adaptive_avg_pool1d(&x, 1).unwrap()), &[22.0 / 7.0]);
    // Unbatched [C, L].
    let u = x.reshape(&[1, 7]).unwrap();
    assert_eq!(
        max_pool1d(&u, &MaxPool1dOptions::new(3)).unwrap().shape(),
        &[1, 2]
    );
    // divisor_override and NaN.
    let x2 = Tensor::from_slice(dev(), &[1.0f32, 2.0, 3.0, f32::NAN], &[1, 1, 2, 2]).unwrap();
    let o = AvgPool2dOptions {
        divisor_override: Some(2),
        ..AvgPool2dOptions::new(2)
    };
    assert!(vals(&avg_pool2d(&x2, &o).unwrap())[0].is_nan());
    assert!(vals(&max_pool2d(&x2, &MaxPool2dOptions::new(2)).unwrap())[0].is_nan());
    let x3 = Tensor::from_slice(dev(), &[1.0f32, 2.0, 3.0, 4.0], &[1, 1, 2, 2]).unwrap();
    assert_eq!(vals(&avg_pool2d(&x3, &o).unwrap()), vec![5.0]);
}

/// A padded window past 46340 x 46340 divides by its true area (PyTorch counts it in i64; an
/// i32 count wrapped negative), in the forward and the gradient; a 2^20 kernel over a 3 x 3
/// input loops over the nine values it covers.
#[test]
fn huge_padded_windows() {
    let x = Tensor::from_slice(
        dev(),
        &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
        &[1, 1, 3, 3],
    )
    .unwrap()
    .requires_grad()
    .unwrap();
    let o = AvgPool2dOptions {
        padding: [23170; 2],
        ..AvgPool2dOptions::new(46341)
    };
    let y = avg_pool2d(&x, &o).unwrap();
    let area = 46341.0f32 * 46341.0f32;
    let want = f64::from(45.0f32 / area);
    let got = vals(&y);
    assert_eq!(got.len(), 1);
    assert!((got[0] - want).abs() <= want * 1e-6, "{got:?} vs {want}");
    let g = y.sum_all().unwrap().backward().unwrap();
    let gw = f64::from(1.0f32 / area);
    for v in vals(g.get(&x).unwrap()) {
        assert!((v - gw).abs() <= gw * 1e-6, "{v} vs {gw}");
    }
    let m = MaxPool2dOptions {
        padding: [1 << 19; 2],
        ..MaxPool2dOptions::new(1 << 20)
    };
    let y = max_pool2d(&x, &m).unwrap();
    assert_eq!(vals(&y), vec![9.0]);
    let g = y.sum_all().unwrap().backward().unwrap();
    assert_eq!(
        vals(g.get(&x).unwrap()),
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    );
}

#[test]
fn pytorch_argument_errors() {
    let x = Tensor::from_slice(dev(), &[0.0f32; 16], &[1, 1, 4, 4]).unwrap();
    let e = max_pool2d(
        &x,
        &MaxPool2dOptions {
            padding: [2, 2],
            ..MaxPool2dOptions::new(3)
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("pad should be at most half"), "{e}");
    let e = max_pool2d(&x, &MaxPool2dOptions::new(5)).unwrap_err();
    assert!(e.to_string().starts_with("max_pool2d:"), "{e}");
    let e = max_pool2d(
        &x,
        &MaxPool2dOptions {
            stride: Some([0, 1]),
            ..MaxPool2dOptions::new(2)
        },
    )
    .unwrap_err();
    assert!(e.to_string().starts_with("max_pool2d:"), "{e}");
    let e = avg_pool2d(
        &x,
        &AvgPool2dOptions {
            divisor_override: Some(0),
            ..AvgPool2dOptions::new(2)
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("divisor"), "{e}");
    // An output size of 0 is an empty result, as PyTorch's.
    let y = adaptive_avg_pool2d(&x, [0, 2]).unwrap();
    assert_eq!(&y.shape()[y.rank() - 2..], &[0, 2]);
    let e = max_pool2d(&x.reshape(&[16]).unwrap(), &MaxPool2dOptions::new(2)).unwrap_err();
    assert!(e.to_string().starts_with("max_pool2d:"), "{e}");
    // An empty batch pools to an empty batch.
    let e0 = Tensor::zeros(dev(), &[0, 2, 4, 4], wgtensor::DType::F32).unwrap();
    assert_eq!(
        max_pool2d(&e0, &MaxPool2dOptions::new(2)).unwrap().shape(),
        &[0, 2, 2, 2]
    );
}

/// The adaptive pools' empty cases, as PyTorch's (it checks only the plane for avg, the
/// non-batch dims for max; adaptive_avg_pool1d is the 2-D pool over [.., 1, L]).
#[test]
fn adaptive_pools_with_empty_sizes() {
    let f32 = wgtensor::DType::F32;
    let x = Tensor::ones(dev(), &[2, 3, 5], f32).unwrap();
    assert_eq!(adaptive_avg_pool1d(&x, 0).unwrap().shape(), &[2, 3, 0]);
    // (1, 1) is the mean of the last two dims for any rank from 2 (a 5-D video batch too), as
    // adaptive_avg_pool2d_symint's shortcut.
    let v = Tensor::arange(dev(), 0.0, 24.0, 1.0, f32)
        .unwrap()
        .reshape(&[1, 2, 3, 2, 2])
        .unwrap();
    let y = adaptive_avg_pool2d(&v, [1, 1]).unwrap();
    assert_eq!(y.shape(), &[1, 2, 3, 1, 1]);
    assert_eq!(
        vals(&y),
        (0..6).map(|p| 4.0 * p as f64 + 1.5).collect::<Vec<_>>()
    );
    let y = adaptive_avg_pool2d(&v.reshape(&[4, 6]).unwrap(), [1, 1]).unwrap();
    assert_eq!((y.shape(), vals(&y)), (&[1usize, 1][..], vec![11.5]));
    assert!(adaptive_avg_pool2d(&v, [2, 2]).is_err());
    // An integer input gets mean's words for (1, 1), whatever its rank.
    let i = Tensor::zeros(dev(), &[1, 2, 2, 2], wgtensor::DType::I32).unwrap();
    let e = adaptive_avg_pool2d(&i, [1, 1]).unwrap_err().to_string();
    assert!(e.contains("mean(): could not infer output dtype"), "{e}");
    let e = Tensor::zeros(dev(), &[2, 3, 0], f32).unwrap();
    let y = adaptive_avg_pool1d(&e, 1).unwrap();
    assert_eq!(y.shape(), &[2, 3, 1]);
    assert!(vals(&y).iter().all(|v| v.is_nan()));
    let no_channels = Tensor::zeros(dev(), &[2, 0, 5], f32).unwrap();
    assert_eq!(
        adaptive_avg_pool1d(&no_channels, 3).unwrap().shape(),
        &[2, 0, 3]
    );
    let c0 = Tensor::zeros(dev(), &[1, 0, 4, 4], f32).unwrap();
    assert_eq!(
        adaptive_avg_pool2d(&c0, [2, 2]).unwrap().shape(),
        &[1, 0, 2, 2]
    );
    // An empty plane with an output other than (1, 1) stays an error, as in PyTorch.
    let plane0 = Tensor::zeros(dev(), &[1, 2, 0, 4], f32).unwrap();
    assert!(adaptive_avg_pool2d(&plane0, [2, 2]).is_err());
    let x4 = Tensor::ones(dev(), &[1, 2, 4, 4], f32)
        .unwrap()
        .requires_grad()
        .unwrap();
    let y = adaptive_max_pool2d(&x4, [0, 3]).unwrap();
    assert_eq!(y.shape(), &[1, 2, 0, 3]);
    // PyTorch's adaptive pooling backward refuses an empty non-batch dim
    // (test_adaptive_pooling_empty_output_size); (1, 1) is a mean, whose backward does not.
    let refused = |y: Tensor| {
        let e = y.sum_all().unwrap().backward().unwrap_err().to_string();
        assert!(
            e.contains("Expected grad_output to have non-zero size for non-batch dimensions"),
            "{e}"
        );
    };
    refused(y);
    refused(adaptive_avg_pool2d(&x4, [0, 0]).unwrap());
    refused(adaptive_avg_pool1d(&x4.reshape(&[2, 16]).unwrap(), 0).unwrap());
    let c0 = c0.requires_grad().unwrap();
    refused(adaptive_avg_pool2d(&c0, [2, 2]).unwrap());
    let g = adaptive_avg_pool2d(&c0, [1, 1])
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(g.get(&c0).unwrap().shape(), [1, 0, 4, 4]);
    // An empty batch is no empty non-batch dim: zero gradients.
    let n0 = Tensor::zeros(dev(), &[0, 2, 4, 4], f32)
        .unwrap()
        .requires_grad()
        .unwrap();
    let g = adaptive_max_pool2d(&n0, [2, 2])
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(g.get(&n0).unwrap().shape(), [0, 2, 4, 4]);
    let (v, i) = adaptive_max_pool2d_with_indices(&x4, [2, 0]).unwrap();
    assert_eq!(
        (v.shape(), i.shape()),
        (&[1, 2, 2, 0][..], &[1, 2, 2, 0][..])
    );
    assert!(
        adaptive_max_pool2d(&c0, [0, 2]).is_err(),
        "no channels: PyTorch refuses"
    );
    // Unbatched, PyTorch checks H and W only: no channels pool to no channels.
    let u0 = Tensor::zeros(dev(), &[0, 4, 4], f32).unwrap();
    assert_eq!(
        adaptive_max_pool2d(&u0, [2, 2]).unwrap().shape(),
        &[0, 2, 2]
    );
    assert_eq!(
        adaptive_max_pool2d(&u0, [0, 2]).unwrap().shape(),
        &[0, 0, 2]
    );
    // An empty length (plane) with an output of 0 is refused, as PyTorch's: the caller's op,
    // the 2-D pool's words on the lifted shape, as there.
    let l0 = Tensor::zeros(dev(), &[3, 0], f32).unwrap();
    let e = adaptive_avg_pool1d(&l0, 0).unwrap_err().to_string();
    assert!(
        e.starts_with("adaptive_avg_pool1d")
            && e.contains("but input has sizes [3, 1, 0] with dimension 2 being empty"),
        "{e}"
    );
    assert!(adaptive_avg_pool1d(&l0, 2).is_err());
    assert!(adaptive_avg_pool2d(&plane0, [0, 2]).is_err());
}

/// Regular windows index by their stride alone, so 1-D pools run over any length whose
/// planes index in u32, as PyTorch's (sequences of 131072 and 65536 samples were refused as
/// "beyond u32 indexing", a bound only adaptive windows, which multiply an index by a size,
/// need; those are still refused past it, naming why).
#[test]
fn long_one_d_pools() {
    let n = 131072;
    let xv: Vec<f32> = (0..n).map(|i| ((i * 7919) % 1000) as f32 - 500.0).collect();
    let x = Tensor::from_slice(dev(), &xv, &[1, 1, n])
        .unwrap()
        .requires_grad()
        .unwrap();
    let y = max_pool1d(&x, &MaxPool1dOptions::new(2)).unwrap();
    assert_eq!(y.shape(), &[1, 1, n / 2]);
    let want: Vec<f64> = xv.chunks(2).map(|p| p[0].max(p[1]) as f64).collect();
    assert_eq!(vals(&y), want);
    let g = y.sum_all().unwrap().backward().unwrap();
    let gx = vals(g.get(&x).unwrap());
    for (i, p) in xv.chunks(2).enumerate() {
        let first = p[0] >= p[1];
        assert_eq!(
            (gx[2 * i], gx[2 * i + 1]),
            if first { (1.0, 0.0) } else { (0.0, 1.0) }
        );
    }
    let m = 65536;
    let x = Tensor::from_slice(dev(), &xv[..m], &[1, 1, m]).unwrap();
    let o = AvgPool1dOptions {
        stride: Some(1),
        padding: 1,
        ..AvgPool1dOptions::new(3)
    };
    let y = vals(&avg_pool1d(&x, &o).unwrap());
    assert_eq!(y.len(), m);
    for i in [0, 1, 4097, m / 2, m - 1] {
        let s: f64 = (i.saturating_sub(1)..(i + 2).min(m))
            .map(|j| xv[j] as f64)
            .sum();
        assert!(
            (y[i] - s / 3.0).abs() <= 1e-4,
            "{i}: {} vs {}",
            y[i],
            s / 3.0
        );
    }
    // Adaptive windows whose bounds o * len / out pass u32 (100000 x 65536), as PyTorch's
    // int64 arithmetic computes them, forward and backward, average and max.
    let (len, out) = (100_000usize, 65536usize);
    let window = |o: usize| (o * len / out, ((o + 1) * len).div_ceil(out));
    let x = Tensor::from_slice(dev(), &xv[..len], &[1, 1, len])
        .unwrap()
        .requires_grad()
        .unwrap();
    let y = adaptive_avg_pool1d(&x, out).unwrap();
    let got = vals(&y);
    let mut want_dx = vec![0.0f64; len];
    for (o, g) in got.iter().enumerate() {
        let (a, b) = window(o);
        let s: f64 = xv[a..b].iter().map(|&v| v as f64).sum();
        let want = s / (b - a) as f64;
        assert!(
            (g - want).abs() <= 1e-4,
            "window {o} [{a}, {b}): {g} vs {want}"
        );
        for d in &mut want_dx[a..b] {
            *d += 1.0 / (b - a) as f64;
        }
    }
    let g = y.sum_all().unwrap().backward().unwrap();
    let gx = vals(g.get(&x).unwrap());
    for (j, (g, w)) in gx.iter().zip(&want_dx).enumerate() {
        assert!((g - w).abs() <= 1e-6, "dx[{j}]: {g} vs {w}");
    }
    let x2 = x.detach().reshape(&[1, 1, 1, len]).unwrap();
    let m = vals(&adaptive_max_pool2d(&x2, [1, out]).unwrap());
    for (o, v) in m.iter().enumerate() {
        let (a, b) = window(o);
        let want = xv[a..b].iter().fold(f32::MIN, |m, &v| m.max(v)) as f64;
        assert_eq!(*v, want, "max window {o}");
    }
}

/// Options up to 2^28 (a global pool over a long signal, `F.max_pool1d(x, x.size(-1))`),
/// the adaptive pools' refusals in PyTorch's words (`_list_with_default`'s rank, the kernel
/// dispatch's dtype), and avg_pool2d's divisor checked before the output shape.
#[test]
fn large_options_and_adaptive_refusals() {
    let n = 2_000_000usize;
    let v: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let x = Tensor::from_slice(dev(), &v, &[1, 1, n]).unwrap();
    let y = max_pool1d(&x, &MaxPool1dOptions::new(1_500_000)).unwrap();
    assert_eq!(y.shape(), &[1, 1, 1]);
    assert_eq!(vals(&y), vec![999.0]);
    // Ones and zeros: an f32 running sum stays exact (PyTorch's CPU kernel sums in f32 too).
    let b: Vec<f32> = (0..n).map(|i| (i % 2) as f32).collect();
    let xb = Tensor::from_slice(dev(), &b, &[1, 1, n]).unwrap();
    let y = avg_pool1d(&xb, &AvgPool1dOptions::new(n)).unwrap();
    assert_eq!(vals(&y), vec![0.5]);

    let x3 = Tensor::from_slice(dev(), &[1.0f32, 2.0, 3.0, 4.0], &[1, 1, 2, 2]).unwrap();
    let m = MaxPool2dOptions {
        padding: [1 << 27; 2],
        ..MaxPool2dOptions::new(1 << 28)
    };
    assert_eq!(vals(&max_pool2d(&x3, &m).unwrap()), vec![4.0]);
    let e = max_pool2d(&x3, &MaxPool2dOptions::new((1 << 28) + 1)).unwrap_err();
    assert!(e.to_string().contains("is above"), "{e}");

    let xi = Tensor::zeros(dev(), &[1, 2, 4, 4], wgtensor::DType::I32).unwrap();
    let e = adaptive_avg_pool2d(&xi, [2, 2]).unwrap_err().to_string();
    assert!(
        e.contains("\"adaptive_avg_pool2d\" not implemented for 'Int'"),
        "{e}"
    );
    let e = adaptive_max_pool2d(&xi, [2, 2]).unwrap_err().to_string();
    assert!(
        e.contains("\"adaptive_max_pool2d\" not implemented for 'Int'"),
        "{e}"
    );
    let x2 = Tensor::zeros(dev(), &[4, 4], wgtensor::DType::F32).unwrap();
    for e in [
        adaptive_max_pool2d(&x2, [2, 2]).unwrap_err(),
        adaptive_max_pool2d_with_indices(&x2, [2, 2]).unwrap_err(),
        adaptive_avg_pool2d(&x2, [2, 2]).unwrap_err(),
    ] {
        assert!(
            e.to_string()
                .contains("Input dimension should be at least 3"),
            "{e}"
        );
    }
    // `adaptive_avg_pool2d(x, 1)`'s mean still takes a 2-D input.
    assert_eq!(adaptive_avg_pool2d(&x2, [1, 1]).unwrap().shape(), &[1, 1]);

    let o = AvgPool2dOptions {
        padding: [2, 2],
        divisor_override: Some(0),
        ..AvgPool2dOptions::new(2)
    };
    let e = avg_pool2d(&x3, &o).unwrap_err();
    assert!(e.to_string().contains("divisor must be not zero"), "{e}");
}
