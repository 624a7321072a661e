//! Tensors larger than one storage binding: a device whose binding limit is lowered through
//! `DeviceOptions::max_binding_bytes` runs the windowed paths on small tensors, and must give
//! bitwise the results of a device that binds them whole.

use wgtensor::ops::{gemm, gemm_into, Activation, Bias, BinaryOp, GemmOptions, ScalarOp, UnaryOp};
use wgtensor::{DType, Device, DeviceOptions, Error, Tensor};

fn small(bytes: u64) -> Device {
    small_with(bytes, false)
}

/// [`small`], planning as on a GPU with `gpu_plans`.
fn small_with(bytes: u64, gpu_plans: bool) -> Device {
    let d = Device::with_options(DeviceOptions {
        max_binding_bytes: Some(bytes),
        gpu_plans,
        ..Default::default()
    })
    .unwrap();
    assert!(d.max_binding_bytes() <= bytes);
    d
}

fn wave(n: usize, k: f32) -> Vec<f32> {
    (0..n).map(|i| ((i as f32 + 1.0) * k).sin()).collect()
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_dtype(DType::F32)
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// Runs `f` on both devices with the same inputs and compares the outputs bit for bit.
/// The windowed device must also have split the work (more dispatches than the other) when
/// the output is larger than one binding.
fn same(what: &str, inputs: &[(Vec<f32>, Vec<usize>)], f: impl Fn(&Device, &[Tensor]) -> Tensor) {
    same_at(4096, what, inputs, f)
}

/// [`same`] with a binding limit of `limit` bytes.
fn same_at(
    limit: u64,
    what: &str,
    inputs: &[(Vec<f32>, Vec<usize>)],
    f: impl Fn(&Device, &[Tensor]) -> Tensor,
) {
    let (big, win) = (Device::new().unwrap(), small(limit));
    let run = |d: &Device| {
        let ts: Vec<Tensor> = inputs
            .iter()
            .map(|(v, s)| Tensor::from_slice(d, v, s).unwrap())
            .collect();
        bits(&f(d, &ts))
    };
    let (want, got) = (run(&big), run(&win));
    assert_eq!(want.len(), got.len(), "{what}");
    let diff = want.iter().zip(&got).position(|(a, b)| a != b);
    assert!(diff.is_none(), "{what}: first difference at {diff:?}");
    // An output past the limit must have been split: at least one dispatch per window of its
    // bytes. (Not compared with the other device's count: the plans may differ with the
    // binding limit, and on an H200 a whole-binding GPU plan took 8 dispatches where the
    // windowed one took 4.)
    let dw = win.stats().dispatches as usize;
    let windows = (want.len() * 4).div_ceil(limit as usize);
    assert!(
        dw >= windows,
        "{what}: {dw} windowed dispatches for {windows} windows"
    );
}

#[test]
fn elementwise_ops_run_in_windows() {
    let n = 10_000; // 40 KB of f32 against 4 KiB bindings
    let x = (wave(n, 0.37), vec![100, 100]);
    let y = (wave(n, 0.11), vec![100, 100]);
    let row = (wave(100, 0.5), vec![100]);
    same("exp", std::slice::from_ref(&x), |_, t| t[0].exp().unwrap());
    same("scalar", std::slice::from_ref(&x), |_, t| {
        t[0].mul_scalar(3.5).unwrap()
    });
    same("cast", std::slice::from_ref(&x), |_, t| {
        t[0].to_dtype(DType::I32)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
    });
    same("add", &[x.clone(), y.clone()], |_, t| {
        t[0].add(&t[1]).unwrap()
    });
    same("broadcast row", &[x.clone(), row.clone()], |_, t| {
        t[0].mul(&t[1]).unwrap()
    });
    same("broadcast lhs", &[row.clone(), x.clone()], |_, t| {
        t[0].sub(&t[1]).unwrap()
    });
    same("full", &[], |d, _| {
        Tensor::full(d, &[3000], 1.25, DType::F32).unwrap()
    });
    // A strided view that fits one binding (30 x 30 floats) read by windows of its output.
    let m = (wave(900, 0.7), vec![30, 30]);
    same("transposed", &[m], |_, t| {
        t[0].transpose(0, 1).unwrap().contiguous().unwrap()
    });
    // Donated (in place) windows.
    same("owned", &[x.clone(), row], |_, t| {
        let a = t[0].mul_scalar(1.0).unwrap(); // a uniquely held copy
        let a = a.into_unary(UnaryOp::Tanh).unwrap();
        let a = a.into_scalar_op(ScalarOp::Add, 0.5).unwrap();
        a.into_binary(&t[1], BinaryOp::Mul).unwrap()
    });
}

#[test]
fn gemm_runs_in_windows_with_identical_bits() {
    gemm_windows(false);
}

/// The same on the GPU plan (`gemm_wg`, 64 x 64 tiles).
#[test]
fn gemm_wg_runs_in_windows_with_identical_bits() {
    gemm_windows(true);
}

fn gemm_windows(gpu_plans: bool) {
    let big = Device::with_options(DeviceOptions {
        gpu_plans,
        ..Default::default()
    })
    .unwrap();
    let win = small_with(16 << 10, gpu_plans); // 16 KiB: a 64-wide row of A fits, A does not
    let shapes = [
        ("tall A", [300, 64, 50]),
        ("wide B", [40, 64, 700]),
        ("long K, split", [8, 2048, 16]),
    ];
    gemm_windows_on(&big, &win, DType::F32, &shapes);
    // Batched, with broadcast batch dims.
    let run = |d: &Device| {
        let a = Tensor::from_slice(d, &wave(3 * 100 * 32, 0.2), &[3, 100, 32]).unwrap();
        let b = Tensor::from_slice(d, &wave(32 * 90, 0.3), &[32, 90]).unwrap();
        bits(&wgtensor::ops::matmul(&a, &b).unwrap())
    };
    assert_eq!(run(&big), run(&win), "batched");
}

/// Each `[m, k, n]` of `shapes` as `x @ w.T + bias`, relu, plus 0.5 C, then in place
/// `y = 2 x w.T + y` (B a transposed view), in `dtype` on `big` and on `win` (a lower binding
/// limit): the same bits, and `win` split the work.
fn gemm_windows_on(big: &Device, win: &Device, dtype: DType, shapes: &[(&str, [usize; 3])]) {
    for &(what, [m, k, n]) in shapes {
        let run = |d: &Device| {
            let t = |v: Vec<f32>, shape: &[usize]| {
                Tensor::from_slice(d, &v, shape)
                    .and_then(|t| t.to_dtype(dtype))
                    .unwrap()
            };
            let a = t(wave(m * k, 0.13), &[m, k]);
            let w = t(wave(n * k, 0.29), &[n, k]);
            let bias = t(wave(n, 0.5), &[n]);
            let c = t(wave(m * n, 0.05), &[m, n]);
            let o = GemmOptions {
                beta: 0.5,
                c: Some(&c),
                bias: Some(Bias::PerColumn(&bias)),
                activation: Activation::Relu,
                ..Default::default()
            };
            let y = gemm(&a, &w.transpose(0, 1).unwrap(), &o).unwrap();
            gemm_into(&y, &a, &w.transpose(0, 1).unwrap(), 2.0, 1.0).unwrap();
            bits(&y)
        };
        let before = (big.stats().dispatches, win.stats().dispatches);
        let (want, got) = (run(big), run(win));
        assert_eq!(want, got, "{what}");
        let (db, dw) = (
            big.stats().dispatches - before.0,
            win.stats().dispatches - before.1,
        );
        assert!(dw > db, "{what}: {dw} windowed dispatches vs {db}");
    }
}

/// f16 products on the cooperative-matrix tile (on a CPU adapter its emulation, through
/// `gpu_plans` + `cooperative_matrix`) in windows of one binding: the same bits as whole.
#[test]
fn gemm_coop_runs_in_windows_with_identical_bits() {
    let open = |limit: Option<u64>| {
        Device::with_options(DeviceOptions {
            gpu_plans: true,
            cooperative_matrix: true,
            max_binding_bytes: limit,
            ..Default::default()
        })
        .unwrap()
    };
    let (big, win) = (open(None), open(Some(16 << 10)));
    if !big.supports_f16() {
        return;
    }
    // A CPU adapter emulates the tile; a GPU runs it where it offers cooperative matrices.
    if big.adapter_info().device_type == wgpu::DeviceType::Cpu {
        assert!(big.coop_emulated() && win.coop_emulated());
    }
    let shapes = [
        ("tall A", [300, 64, 100]),
        ("wide B", [100, 64, 700]),
        ("long K", [72, 600, 80]),
    ];
    for &(what, [m, k, n]) in &shapes {
        let plan =
            wgtensor::ops::gemm::plan_for_dtype(big.caps(), DType::F16, m, n, k, 1, None).unwrap();
        if big.caps().coop16 {
            assert_eq!(
                plan.kernel,
                wgtensor::ops::gemm::GemmKernel::Coop16,
                "{what}"
            );
        }
    }
    gemm_windows_on(&big, &win, DType::F16, &shapes);
}

#[test]
fn what_cannot_be_windowed_is_refused_cleanly() {
    let d = small(4096);
    // A transposed view of 40 KB: every output window would need all of it.
    let x = Tensor::from_slice(&d, &wave(10_000, 0.3), &[100, 100]).unwrap();
    let e = x.transpose(0, 1).unwrap().contiguous().unwrap_err();
    assert!(matches!(e, Error::TooLarge { .. }), "{e:?}");
    assert!(e.to_string().contains("binding"), "{e}");
    // An op that does not split (argmax) names the binding limit when the view itself is
    // past it.
    let e = x.argmax(1, false).unwrap_err();
    assert!(matches!(e, Error::TooLarge { .. }), "{e:?}");
    // The device still works.
    assert_eq!(
        x.narrow(0, 0, 1).unwrap().to_vec::<f32>().unwrap().len(),
        100
    );
    // Past max_buffer_size is an allocation error naming that limit.
    let n = (d.limits().max_buffer_size.min(u32::MAX as u64) / 4 + 1) as usize;
    let e = Tensor::zeros(&d, &[n], DType::F32).unwrap_err();
    assert!(matches!(e, Error::TooLarge { .. }), "{e:?}");
}

/// The case: a 256 MiB f32 operand on the default device (lavapipe's bindings hold
/// 128 MiB), checked against an f64 reference on sampled rows.
#[test]
fn gemm_over_a_256_mib_operand() {
    let d = Device::new().unwrap();
    let (m, k, n) = (16384, 4096, 8);
    let av: Vec<f32> = (0..m * k)
        .map(|i| ((i % 251) as f32 - 125.0) / 128.0)
        .collect();
    let bv: Vec<f32> = (0..k * n).map(|i| ((i % 13) as f32 - 6.0) / 8.0).collect();
    let a = Tensor::from_slice(&d, &av, &[m, k]).unwrap();
    let b = Tensor::from_slice(&d, &bv, &[k, n]).unwrap();
    let y = wgtensor::ops::matmul(&a, &b)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    for r in [0, 1, 4095, 8191, 12000, 16383] {
        for c in 0..n {
            let want: f64 = (0..k)
                .map(|j| av[r * k + j] as f64 * bv[j * n + c] as f64)
                .sum();
            let got = y[r * n + c] as f64;
            assert!(
                (got - want).abs() <= 1e-3 * (1.0 + want.abs()),
                "[{r}, {c}] {got} vs {want}"
            );
        }
    }
}

#[test]
fn reductions_run_in_windows() {
    let x = (wave(10_000, 0.37), vec![500, 20]);
    same("sum", std::slice::from_ref(&x), |_, t| {
        t[0].sum(-1, false).unwrap()
    });
    same("mean keepdim", std::slice::from_ref(&x), |_, t| {
        t[0].mean(1, true).unwrap()
    });
    same("max", std::slice::from_ref(&x), |_, t| {
        t[0].max(-1, false).unwrap()
    });
    // Tracked: the forward saves the input instead of its argmax indices (whose kernel binds
    // the input whole), so it still computes (the stable-logsumexp `x.max(d).detach()` of a
    // model under grad mode).
    same("max tracked", std::slice::from_ref(&x), |_, t| {
        let x = t[0].clone().requires_grad().unwrap();
        x.max(-1, false).unwrap().detach()
    });
    // Few long rows take the workgroup variant: 4 KiB bindings hold 2 rows of 400.
    let long = (wave(8 * 400, 0.21), vec![8, 400]);
    same("long rows", &[long], |_, t| t[0].sum(1, false).unwrap());
    // Softmax along the last or an inner dim: windows of whole slabs (its backward is
    // composed of windowed ops).
    same("softmax", std::slice::from_ref(&x), |_, t| {
        t[0].softmax(1).unwrap()
    });
    let cube = (wave(10_000, 0.29), vec![25, 20, 20]);
    same("log_softmax dim 1", std::slice::from_ref(&cube), |_, t| {
        t[0].log_softmax(1).unwrap()
    });
    // Inner dims: windows of whole outer slabs.
    same("sum dim 1", std::slice::from_ref(&cube), |_, t| {
        t[0].sum(1, false).unwrap()
    });
    same("mean dims", std::slice::from_ref(&cube), |_, t| {
        t[0].mean_dims(&[1, 2], true).unwrap()
    });
    // Along the outermost dim: windows of rows with the folds carried, both variants (few
    // long columns: the workgroup variant; many short ones: one invocation per output).
    let tall = (wave(500 * 20, 0.13), vec![500, 20]);
    same_at(
        32 << 10,
        "sum dim 0",
        std::slice::from_ref(&tall),
        |_, t| t[0].sum(0, false).unwrap(),
    );
    same_at(
        32 << 10,
        "max dim 0",
        std::slice::from_ref(&tall),
        |_, t| t[0].max(0, true).unwrap(),
    );
    let wide = (wave(3 * 5000, 0.07), vec![3, 5000]);
    same_at(32 << 10, "mean dim 0", &[wide], |_, t| {
        t[0].mean(0, false).unwrap()
    });
    // A lane folds its values in trees of 8 and blocks of 64: windows hold whole ones. Rows
    // variant, 2 blocks a lane (windows of 64 rows where the binding holds 99); workgroup
    // variant, 16 values a lane (windows of 8 a lane where the binding holds 10).
    let rows = (wave(128 * 4096, 0.17), vec![128, 4096]);
    same_at(1600 << 10, "sum dim 0, blocks", &[rows], |_, t| {
        t[0].sum(0, false).unwrap()
    });
    // Two trees a lane would fit a window: it takes one, as a second would group differently.
    let two = (wave(32 * 48, 0.31), vec![32, 48]);
    same_at(4096, "sum dim 0, 2 trees a window", &[two], |_, t| {
        t[0].sum(0, false).unwrap()
    });
    let lanes = (wave(4096 * 3, 0.23), vec![4096, 3]);
    same_at(32 << 10, "sum dim 0, trees", &[lanes], |_, t| {
        t[0].sum(0, false).unwrap()
    });
    // A row of the inner dims past one binding cannot be windowed: refused cleanly.
    let d = small(4096);
    let t = Tensor::from_slice(&d, &wave(2 * 2000, 0.1), &[2, 2000]).unwrap();
    let e = t.sum(0, false).unwrap_err();
    assert!(matches!(e, Error::TooLarge { .. }), "{e:?}");
}

/// Convolutions over inputs and outputs past one binding run in windows of whole samples
/// (forward with bias and activation, strided and grouped; data gradient) and the weight
/// gradient in windows of its split-k slices, all bitwise the unsplit results.
#[test]
fn convolutions_run_in_windows_of_samples() {
    use wgtensor::ops::{
        conv2d, conv2d_backward_input, conv2d_backward_weight, Conv2dOptions, Padding,
    };
    let big = Device::new().unwrap();
    let win = small(16 << 10);
    let cases = [
        ("plain", 1, 1, [6, 4, 20, 20], 8),
        ("strided grouped", 2, 2, [5, 4, 21, 19], 6),
    ];
    for (what, stride, groups, xs, oc) in cases {
        let o = Conv2dOptions {
            stride: [stride, stride],
            padding: Padding::uniform(1),
            groups,
            activation: Activation::Relu,
            ..Default::default()
        };
        let run = |d: &Device| {
            let n: usize = xs.iter().product();
            let x = Tensor::from_slice(d, &wave(n, 0.17), &xs).unwrap();
            let wn = oc * (xs[1] / groups) * 9;
            let w = Tensor::from_slice(d, &wave(wn, 0.31), &[oc, xs[1] / groups, 3, 3]).unwrap();
            let b = Tensor::from_slice(d, &wave(oc, 0.5), &[oc]).unwrap();
            let y = conv2d(&x, &w, Some(&b), &o).unwrap();
            let plain = Conv2dOptions {
                activation: Activation::None,
                ..o
            };
            let dx = conv2d_backward_input(&y, &w, [xs[2], xs[3]], &plain).unwrap();
            (bits(&y), bits(&dx))
        };
        let before = win.stats().dispatches;
        assert_eq!(run(&big), run(&win), "{what}");
        assert!(win.stats().dispatches - before > 4, "{what}: not windowed");
    }
    // The weight gradient: windows of its split-k slices, then one reduction.
    let win32 = small(32 << 10);
    let wgrad = |d: &Device| {
        let x = Tensor::from_slice(d, &wave(6 * 4 * 400, 0.1), &[6, 4, 20, 20]).unwrap();
        let dy = Tensor::from_slice(d, &wave(6 * 8 * 400, 0.2), &[6, 8, 20, 20]).unwrap();
        let o = Conv2dOptions {
            padding: Padding::uniform(1),
            ..Default::default()
        };
        conv2d_backward_weight(&dy, &x, [3, 3], &o).map(|t| bits(&t))
    };
    let before = win32.stats().dispatches;
    assert_eq!(
        wgrad(&big).unwrap(),
        wgrad(&win32).unwrap(),
        "weight gradient"
    );
    assert!(
        win32.stats().dispatches - before > 3,
        "weight gradient not windowed"
    );
    // A binding too small for one slice's samples is refused cleanly.
    let e = wgrad(&small(8 << 10)).unwrap_err();
    assert!(matches!(e, Error::TooLarge { .. }), "{e:?}");
}

/// The same on the GPU plan's large-tile kernel (`conv_wg`, 32 rows per group): forward and
/// data gradient in windows of samples, and a weight gradient of one output tile (which the
/// plan splits) in windows of its split-k slices, bitwise the results of the same plan bound
/// whole.
#[test]
fn conv_wg_runs_in_windows_of_samples() {
    use wgtensor::ops::{conv2d, conv2d_backward_input, conv2d_backward_weight, Conv2dOptions};
    let big = small_with(1 << 30, true);
    let win = small_with(160 << 10, true);
    let o = Conv2dOptions {
        padding: wgtensor::ops::Padding::uniform(1),
        activation: Activation::Relu,
        ..Default::default()
    };
    let plain = Conv2dOptions {
        activation: Activation::None,
        ..o
    };
    let t = |d: &Device, shape: &[usize], k: f32| {
        let n = shape.iter().product();
        Tensor::from_slice(d, &wave(n, k), shape).unwrap()
    };
    let run = |d: &Device| {
        let x = t(d, &[6, 32, 20, 20], 0.17);
        let w = t(d, &[32, 32, 3, 3], 0.31);
        let b = t(d, &[32], 0.5);
        let y = conv2d(&x, &w, Some(&b), &o).unwrap();
        let dx = conv2d_backward_input(&y, &w, [20, 20], &plain).unwrap();
        let x4 = t(d, &[6, 4, 20, 20], 0.23);
        let dw = conv2d_backward_weight(&y, &x4, [3, 3], &plain).unwrap();
        (bits(&y), bits(&dx), bits(&dw))
    };
    let (b0, w0) = (big.stats().dispatches, win.stats().dispatches);
    assert_eq!(run(&big), run(&win));
    let (db, dw) = (big.stats().dispatches - b0, win.stats().dispatches - w0);
    assert!(dw > db, "not windowed: {dw} dispatches vs {db}");
}

/// Batch norm over tensors past one binding: the data passes run in windows of whole samples
/// with the full problem's chunks (and the gathered pivots), so inference, training (output,
/// saved and running statistics) and backward give the unsplit bits; both vec4 and scalar
/// groups.
#[test]
fn batch_norm_runs_in_windows_with_identical_bits() {
    use wgtensor::ops::{
        batch_norm_backward, batch_norm_inference, batch_norm_train, BatchNormOptions,
        BatchNormState,
    };
    let big = Device::new().unwrap();
    // Chunks of 4096 groups per channel: 160 KiB bindings hold a few whole samples of these
    // 256 KiB tensors.
    let win = small(160 << 10);
    for shape in [[8, 2, 64, 64], [8, 2, 65, 63]] {
        let c = shape[1];
        let n: usize = shape.iter().product();
        let run = |d: &Device| {
            let up = |v: Vec<f32>, s: &[usize]| Tensor::from_slice(d, &v, s).unwrap();
            let x = up(
                wave(n, 0.23).iter().map(|v| v * 3.0 + 100.0).collect(),
                &shape,
            );
            let dy = up(wave(n, 0.41), &shape);
            let g = up(wave(c, 0.7), &[c]);
            let b = up(wave(c, 0.9), &[c]);
            let o = BatchNormOptions {
                weight: Some(&g),
                bias: Some(&b),
                activation: Activation::Relu,
                ..Default::default()
            };
            let mut st = BatchNormState::new(d, c, DType::F32).unwrap();
            let out = batch_norm_train(&x, Some(&mut st), &o).unwrap();
            let gr = batch_norm_backward(&dy, &x, Some(&g), &out.saved).unwrap();
            let inf = batch_norm_inference(&x, &st.running_mean, &st.running_var, &o).unwrap();
            [
                &out.y,
                out.saved.mean(),
                out.saved.invstd(),
                &st.running_var,
                &gr.dx,
                &gr.dweight,
                &gr.dbias,
                &inf,
            ]
            .map(bits)
        };
        let before = win.stats().dispatches;
        let (want, got) = (run(&big), run(&win));
        let names = [
            "y",
            "mean",
            "invstd",
            "running_var",
            "dx",
            "dweight",
            "dbias",
            "inference",
        ];
        for ((w, g), name) in want.iter().zip(&got).zip(names) {
            assert_eq!(w, g, "{shape:?}: {name}");
        }
        assert!(
            win.stats().dispatches - before > 12,
            "{shape:?}: not windowed"
        );
    }
}

#[test]
fn binding_limit_option_is_validated() {
    let Err(e) = Device::with_options(DeviceOptions {
        max_binding_bytes: Some(100),
        ..Default::default()
    }) else {
        panic!("a 100-byte binding limit was accepted");
    };
    assert!(e.to_string().contains("max_binding_bytes"), "{e}");
    // A limit above the adapter's is capped to it.
    let d = Device::with_options(DeviceOptions {
        max_binding_bytes: Some(u64::MAX),
        ..Default::default()
    })
    .unwrap();
    assert!(d.max_binding_bytes() <= d.limits().max_storage_buffer_binding_size);
}

/// argmax binds only the view it reads: a row of a base past one binding (greedy decoding's
/// `logits[:, -1].argmax(-1)`) works, in f32 and f16.
#[test]
fn argmax_of_a_small_view_of_a_large_base() {
    for gpu_plans in [false, true] {
        argmax_of_a_row(&small_with(4096, gpu_plans));
    }
}

fn argmax_of_a_row(d: &Device) {
    for dtype in [DType::F32, DType::F16] {
        if dtype == DType::F16 && !d.supports_f16() {
            continue;
        }
        let v = wave(10_000, 0.37);
        let x = Tensor::from_slice(d, &v, &[100, 100])
            .unwrap()
            .to_dtype(dtype)
            .unwrap();
        for r in [3usize, 77] {
            let row = x.narrow(0, r, 1).unwrap();
            let got = row.argmax(1, false).unwrap().to_vec::<i32>().unwrap()[0] as usize;
            let vals: Vec<f32> = row.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
            let want = (0..100).fold(0, |b, i| if vals[i] > vals[b] { i } else { b });
            assert_eq!(got, want, "{dtype:?} row {r}");
        }
    }
}

/// The copy kernel binds only the views it reads and writes: a row of a base past one
/// binding can be cloned, joined and written (a KV cache's slot), in f32 and f16.
#[test]
fn copies_of_a_small_view_of_a_large_base() {
    for gpu_plans in [false, true] {
        let d = small_with(4096, gpu_plans);
        for dtype in [DType::F32, DType::F16] {
            if dtype == DType::F16 && !d.supports_f16() {
                continue;
            }
            let v = wave(10_000, 0.29);
            let x = Tensor::from_slice(&d, &v, &[100, 100])
                .unwrap()
                .to_dtype(dtype)
                .unwrap();
            let row = x.narrow(0, 7, 1).unwrap();
            let want = bits(&row);
            assert_eq!(bits(&row.deep_clone().unwrap()), want, "{dtype:?}");
            let joined = wgtensor::ops::cat(&[&row, &row], 0).unwrap();
            assert_eq!(bits(&joined), [want.clone(), want.clone()].concat());
            // Another row written through; the rest keep their values. (A column spans
            // nearly the whole base: refused, as one binding cannot hold its span.)
            let ones = Tensor::full(&d, &[1, 100], 1.0, dtype).unwrap();
            x.narrow(0, 9, 1).unwrap().copy_from(&ones).unwrap();
            let after = x.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
            assert!(after[900..1000].iter().all(|&v| v == 1.0), "{dtype:?}");
            assert_eq!(bits(&x.narrow(0, 7, 1).unwrap()), want, "{dtype:?}");
            let col = x.narrow(1, 3, 1).unwrap();
            let e = col.copy_from(&Tensor::full(&d, &[100, 1], 1.0, dtype).unwrap());
            assert!(matches!(e, Err(Error::TooLarge { .. })), "{e:?}");
        }
    }
}

/// Kernels that bind a packed operand whole take a leading slice of a base past one binding
/// too (the first rows of a batch, a first micro-batch): it is copied, as an offset slice is.
#[test]
fn leading_slices_of_a_large_base_are_packed_for_whole_bindings() {
    let d = small(4096);
    let x = Tensor::from_slice(&d, &wave(10_000, 0.23), &[100, 100]).unwrap();
    let head = x.narrow(0, 0, 2).unwrap();
    let fresh = Tensor::from_slice(&d, &wave(200, 0.23), &[2, 100]).unwrap();
    let ln = |t: &Tensor| wgtensor::ops::layer_norm(t, &[100], None, None, 1e-5).unwrap();
    assert_eq!(bits(&ln(&head)), bits(&ln(&fresh)));
    let pool = |t: &Tensor| {
        let t = t.reshape(&[1, 2, 10, 10]).unwrap();
        wgtensor::ops::max_pool2d(&t, &wgtensor::ops::MaxPool2dOptions::new(2)).unwrap()
    };
    assert_eq!(bits(&pool(&head)), bits(&pool(&fresh)));
}

/// Comparisons and `where` bind only the views they read: rows of a mask or of scores in a
/// base past one binding work (a slice of a precomputed causal mask), broadcast ones too.
#[test]
fn compare_and_where_of_small_views_of_a_large_base() {
    let d = small(4096);
    let x = Tensor::from_slice(&d, &wave(10_000, 0.31), &[100, 100]).unwrap();
    let (r1, r2) = (x.narrow(0, 5, 1).unwrap(), x.narrow(0, 60, 1).unwrap());
    let (f1, f2) = (r1.deep_clone().unwrap(), r2.deep_clone().unwrap());
    let gt = |a: &Tensor, b: &Tensor| a.compare(b, wgtensor::ops::CmpOp::Gt).unwrap();
    assert_eq!(bits(&gt(&r1, &r2)), bits(&gt(&f1, &f2)));
    let m = gt(&r1, &r2);
    let w = |c: &Tensor, a: &Tensor, b: &Tensor| c.where_cond(a, b).unwrap();
    assert_eq!(bits(&w(&m, &r1, &r2)), bits(&w(&m, &f1, &f2)));
    let col = r1.broadcast_to(&[3, 100]).unwrap();
    let fcol = f1.broadcast_to(&[3, 100]).unwrap();
    assert_eq!(bits(&w(&m, &col, &r2)), bits(&w(&m, &fcol, &f2)));
}

/// gather, index_select and embedding bind only the views they read: a window of a long
/// token tensor, or a row of a table past one binding, works.
#[test]
fn index_ops_on_small_views_of_a_large_base() {
    let d = small(4096);
    let toks: Vec<i32> = (0..10_000).map(|i| i * 7 % 13).collect();
    let toks = Tensor::from_slice(&d, &toks, &[10_000]).unwrap();
    let table = Tensor::from_slice(&d, &wave(13 * 4, 0.7), &[13, 4]).unwrap();
    let win = toks.narrow(0, 5000, 8).unwrap();
    let fresh = win.deep_clone().unwrap();
    let emb = |i: &Tensor| wgtensor::ops::embedding(i, &table, None).unwrap();
    assert_eq!(bits(&emb(&win)), bits(&emb(&fresh)));
    // Tracked: the backward's row scatter takes the window too.
    let tw = table.detach().requires_grad().unwrap();
    let grad = |i: &Tensor| {
        let y = wgtensor::ops::embedding(i, &tw, None).unwrap();
        let g = y.sum_all().unwrap().backward().unwrap();
        bits(g.get(&tw).unwrap())
    };
    assert_eq!(grad(&win), grad(&fresh));
    let gathered = |i: &Tensor| {
        let y = tw.reshape(&[52]).unwrap().gather(0, i).unwrap();
        let g = y.sum_all().unwrap().backward().unwrap();
        bits(g.get(&tw).unwrap())
    };
    assert_eq!(gathered(&win), gathered(&fresh));
    let big = Tensor::from_slice(&d, &wave(10_000, 0.41), &[100, 100]).unwrap();
    let row = big.select(0, 42).unwrap();
    let idx = Tensor::from_slice(&d, &[3i32, 99, 0, 3], &[4]).unwrap();
    let want = row.deep_clone().unwrap().index_select(0, &idx).unwrap();
    assert_eq!(bits(&row.index_select(0, &idx).unwrap()), bits(&want));
    let gi = Tensor::from_slice(&d, &[1i32, 0], &[2]).unwrap();
    let g = row.gather(0, &gi).unwrap();
    assert_eq!(
        bits(&g),
        bits(&row.deep_clone().unwrap().gather(0, &gi).unwrap())
    );
}
