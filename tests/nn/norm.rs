//! Normalization layers: BatchNorm's train/eval modes and counters, without running stats, past
//! the grid limit, f16 activations; LayerNorm, GroupNorm, RMSNorm.

use super::*;

#[test]
fn batch_norm_modes_and_counter() {
    let mut bn = nn::BatchNorm1d::new(dev(), 2).unwrap();
    let x = Tensor::from_slice(dev(), &[1.0f32, 10.0, 3.0, 20.0, 5.0, 30.0], &[3, 2]).unwrap();
    let y = vals(&bn.forward(&x).unwrap());
    // Training: batch statistics (mean 3, biased var 8/3 for channel 0).
    let s = (8.0f32 / 3.0 + 1e-5).sqrt();
    assert!((y[0] + 2.0 / s).abs() < 1e-4, "{y:?}");
    assert_eq!(bn.0.state.borrow().num_batches_tracked, 1);
    // Running mean after one step with momentum 0.1: 0.1 * 3 = 0.3.
    let rm = vals(&bn.0.state.borrow().running_mean);
    assert!((rm[0] - 0.3).abs() < 1e-6, "{rm:?}");
    bn.eval();
    assert!(!bn.0.training);
    let y = vals(&bn.forward(&x).unwrap());
    let rv = vals(&bn.0.state.borrow().running_var);
    let want = (1.0 - rm[0]) / (rv[0] + 1e-5).sqrt();
    assert!((y[0] - want).abs() < 1e-4);
    assert!(bn
        .forward(&Tensor::zeros(dev(), &[2, 2, 2, 2], DType::F32).unwrap())
        .is_err());
}

/// LayerNorm, GroupNorm, RMSNorm and SiLU: PyTorch's parameter names, shapes and init (weight
/// ones, bias zeros), the options that drop parameters, forwards equal to the functional ops,
/// gradients reaching the parameters, a group count that does not divide the channels refused.
#[test]
fn norm_layers_and_silu() {
    let d = dev();
    let names = |m: &dyn Module| -> Vec<String> {
        m.named_parameters().into_iter().map(|(n, _)| n).collect()
    };
    let ln = nn::LayerNorm::new(d, &[2, 3]).unwrap();
    assert_eq!(names(&ln), ["weight", "bias"]);
    assert_eq!(ln.weight.as_ref().unwrap().shape(), &[2, 3]);
    assert_eq!(vals(ln.weight.as_ref().unwrap()), vec![1.0; 6]);
    assert_eq!(vals(ln.bias.as_ref().unwrap()), vec![0.0; 6]);
    let no_bias = nn::LayerNormConfig {
        bias: false,
        ..Default::default()
    };
    assert_eq!(
        names(&nn::LayerNorm::with_config(d, &[3], no_bias).unwrap()),
        ["weight"]
    );
    let plain = nn::LayerNormConfig {
        elementwise_affine: false,
        ..Default::default()
    };
    assert!(names(&nn::LayerNorm::with_config(d, &[3], plain).unwrap()).is_empty());

    let gn = nn::GroupNorm::new(d, 2, 4).unwrap();
    assert_eq!(names(&gn), ["weight", "bias"]);
    assert_eq!(gn.weight.as_ref().unwrap().shape(), &[4]);
    let e = nn::GroupNorm::new(d, 3, 4).unwrap_err().to_string();
    assert!(
        e.contains("num_channels (4) must be divisible by num_groups (3)"),
        "{e}"
    );
    let rn = nn::RMSNorm::new(d, &[3]).unwrap();
    assert_eq!(names(&rn), ["weight"]);
    assert_eq!(rn.eps, None);

    let x = Tensor::from_slice(
        d,
        &(0..24)
            .map(|i| ((i * 7) % 11) as f32 - 5.0)
            .collect::<Vec<_>>(),
        &[2, 4, 3],
    )
    .unwrap();
    let want = wgtensor::ops::group_norm(&x, 2, None, None, 1e-5).unwrap();
    assert_eq!(vals(&gn.forward(&x).unwrap()), vals(&want));
    assert!(gn.forward(&x.reshape(&[2, 12]).unwrap()).is_err());
    let want = wgtensor::ops::layer_norm(&x, &[3], None, None, 1e-5).unwrap();
    let ln3 = nn::LayerNorm::new(d, &[3]).unwrap();
    assert_eq!(vals(&ln3.forward(&x).unwrap()), vals(&want));
    let want = wgtensor::ops::rms_norm(&x, &[3], None, None).unwrap();
    assert_eq!(vals(&rn.forward(&x).unwrap()), vals(&want));
    assert_eq!(
        vals(&nn::SiLU.forward(&x).unwrap()),
        vals(&x.silu().unwrap())
    );

    // A small block: names with the Sequential's indices, gradients for every parameter.
    let block = nn::Sequential::new()
        .push(nn::Linear::new(d, 3, 3, true).unwrap())
        .push(nn::LayerNorm::new(d, &[3]).unwrap())
        .push(nn::SiLU)
        .push(nn::RMSNorm::new(d, &[3]).unwrap());
    assert_eq!(
        names(&block),
        ["0.weight", "0.bias", "1.weight", "1.bias", "3.weight"]
    );
    let y = block.forward(&x.reshape(&[8, 3]).unwrap()).unwrap();
    let grads = y.mul(&y).unwrap().sum_all().unwrap().backward().unwrap();
    for (n, p) in block.named_parameters() {
        assert!(grads.get(&p).is_some(), "{n} has no gradient");
    }
}

/// LayerNorm and GroupNorm (f32 parameters) on f16 activations, as PyTorch's mixed-dtype rule:
/// computed in f32, the result in f16; the parameters' gradients come back in f32.
#[test]
fn norm_layers_take_f16_activations() {
    let d = dev();
    if !d.supports_f16() {
        return;
    }
    let x32 = Tensor::from_slice(
        d,
        &(0..16)
            .map(|i| ((i * 5) % 7) as f32 - 3.0)
            .collect::<Vec<_>>(),
        &[2, 4, 2],
    )
    .unwrap();
    let x = x32.to_dtype(DType::F16).unwrap();
    let ln = nn::LayerNorm::new(d, &[2]).unwrap();
    let gn = nn::GroupNorm::new(d, 2, 4).unwrap();
    for (y, want) in [
        (ln.forward(&x).unwrap(), ln.forward(&x32).unwrap()),
        (gn.forward(&x).unwrap(), gn.forward(&x32).unwrap()),
    ] {
        assert_eq!(y.dtype(), DType::F16);
        let want = want.to_dtype(DType::F16).unwrap();
        assert_eq!(
            y.to_vec::<half::f16>().unwrap(),
            want.to_vec::<half::f16>().unwrap()
        );
    }
    let sum = |y: Tensor| {
        y.to_dtype(DType::F32)
            .unwrap()
            .mul(&x32)
            .unwrap()
            .sum_all()
            .unwrap()
    };
    let loss = sum(ln.forward(&x).unwrap())
        .add(&sum(gn.forward(&x).unwrap()))
        .unwrap();
    let g = loss.backward().unwrap();
    for m in [&ln as &dyn Module, &gn] {
        for (n, p) in m.named_parameters() {
            assert_eq!(g.get(&p).expect("a gradient").dtype(), DType::F32, "{n}");
        }
    }
    // An f32 input with f16 parameters stays an error, as PyTorch's.
    let w16 = Tensor::ones(d, &[2], DType::F16).unwrap();
    assert!(wgtensor::ops::layer_norm(&x32, &[2], Some(&w16), None, 1e-5).is_err());
}

/// PyTorch's `track_running_stats=False`: no running buffers or counter in the state dict,
/// and the batch's statistics in evaluation as in training.
#[test]
fn batchnorm_without_running_stats() {
    use wgtensor::ops::{batch_norm_train, BatchNormOptions};
    let mut bn = nn::BatchNorm2d::new(dev(), 3)
        .unwrap()
        .without_running_stats();
    assert!(!bn.tracks_running_stats());
    let names: Vec<String> = bn.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["weight", "bias"]);
    let x = wgtensor::ops::randn(dev(), &[4, 3, 2, 2], DType::F32).unwrap();
    let want = vals(
        &batch_norm_train(&x, None, &BatchNormOptions::default())
            .unwrap()
            .y,
    );
    assert_eq!(vals(&bn.forward(&x).unwrap()), want);
    bn.eval();
    assert_eq!(
        vals(&bn.forward(&x).unwrap()),
        want,
        "batch statistics in eval"
    );
    assert_eq!(bn.state.borrow().num_batches_tracked, 0);
    let mut bn1 = nn::BatchNorm1d::new(dev(), 3)
        .unwrap()
        .without_running_stats();
    bn1.eval();
    let x1 = wgtensor::ops::randn(dev(), &[5, 3], DType::F32).unwrap();
    let y1 = vals(&bn1.forward(&x1).unwrap());
    let want1 = vals(
        &batch_norm_train(&x1, None, &BatchNormOptions::default())
            .unwrap()
            .y,
    );
    assert_eq!(y1, want1);
    assert_eq!(bn1.state_dict().len(), 2);
}

/// BatchNorm1d over more features than the grid's 65535 per dimension (the channels continue
/// on z): training output, running statistics, the input gradient and evaluation against the
/// host formulas, at channels on both sides of the limit.
#[test]
fn batch_norm_over_more_channels_than_the_grid_limit() {
    let (n, c) = (3usize, 70_000usize);
    let xv: Vec<f32> = (0..n * c)
        .map(|i| ((i * 7919 % 1009) as f32) / 500.0 - 1.0)
        .collect();
    let gv: Vec<f32> = (0..n * c)
        .map(|i| ((i * 31 % 17) as f32) / 8.0 - 1.0)
        .collect();
    // The CPU plans, and the GPU plans (64-lane workgroups merged through barriers, which
    // the channels past the last must skip together).
    let gpu = Device::with_options(wgtensor::DeviceOptions {
        gpu_plans: true,
        cooperative_matrix: false,
        ..Default::default()
    })
    .unwrap();
    for d in [dev(), &gpu] {
        batch_norm_channels_past_the_limit(d, n, c, &xv, &gv);
    }
}

fn batch_norm_channels_past_the_limit(d: &Device, n: usize, c: usize, xv: &[f32], gv: &[f32]) {
    let x = Tensor::from_slice(d, xv, &[n, c])
        .unwrap()
        .requires_grad()
        .unwrap();
    let gw = Tensor::from_slice(d, gv, &[n, c]).unwrap();
    let mut bn = nn::BatchNorm1d::new(d, c).unwrap();
    let yt = bn.forward(&x).unwrap();
    let y = vals(&yt);
    let g = yt.mul(&gw).unwrap().sum_all().unwrap().backward().unwrap();
    let gx = vals(g.get(&x).unwrap());
    let checked = [0, 1, 65_534, 65_535, 65_536, c - 1];
    let rm = vals(&bn.0.state.borrow().running_mean);
    let rv = vals(&bn.0.state.borrow().running_var);
    for ch in checked {
        let col = |v: &[f32]| (0..n).map(|r| f64::from(v[r * c + ch])).collect::<Vec<_>>();
        let (xs, gs) = (col(xv), col(gv));
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64;
        let inv = 1.0 / (var + 1e-5).sqrt();
        let xh: Vec<f64> = xs.iter().map(|v| (v - mean) * inv).collect();
        let mg = gs.iter().sum::<f64>() / n as f64;
        let mgx = gs.iter().zip(&xh).map(|(g, h)| g * h).sum::<f64>() / n as f64;
        for r in 0..n {
            let i = r * c + ch;
            assert!((f64::from(y[i]) - xh[r]).abs() < 1e-4, "y at channel {ch}");
            let dx = inv * (gs[r] - mg - xh[r] * mgx);
            assert!(
                (f64::from(gx[i]) - dx).abs() < 1e-3,
                "dx at channel {ch}: {} vs {dx}",
                gx[i]
            );
        }
        assert!(
            (f64::from(rm[ch]) - 0.1 * mean).abs() < 1e-6,
            "running mean {ch}"
        );
        let unbiased = var * n as f64 / (n - 1) as f64;
        assert!(
            (f64::from(rv[ch]) - (0.9 + 0.1 * unbiased)).abs() < 1e-5,
            "running var {ch}"
        );
    }
    bn.eval();
    let ye = vals(&bn.forward(&x.detach()).unwrap());
    for ch in checked {
        let i = 2 * c + ch;
        let want = (f64::from(xv[i]) - f64::from(rm[ch])) / (f64::from(rv[ch]) + 1e-5).sqrt();
        assert!(
            (f64::from(ye[i]) - want).abs() < 1e-4,
            "eval at channel {ch}"
        );
    }
}

/// PyTorch's mixed type (AMP): f16 activations through a BatchNorm2d whose parameters and
/// running statistics are f32, in training and evaluation; the output is f16, x's gradient
/// f16 and the weight's f32, all equal to the f32 computation up to f16 rounding.
#[test]
fn batch_norm_f16_input_with_f32_parameters() {
    if !dev().supports_f16() {
        return;
    }
    let xv: Vec<f32> = (0..2 * 3 * 4 * 4)
        .map(|i| ((i * 13 % 29) as f32) / 7.0 - 2.0)
        .collect();
    let x32 = Tensor::from_slice(dev(), &xv, &[2, 3, 4, 4]).unwrap();
    let x16 = x32.to_dtype(DType::F16).unwrap().requires_grad().unwrap();
    let x32 = x16
        .detach()
        .to_dtype(DType::F32)
        .unwrap()
        .requires_grad()
        .unwrap();
    let mut a = nn::BatchNorm2d::new(dev(), 3).unwrap();
    let mut b = nn::BatchNorm2d::new(dev(), 3).unwrap();
    let y16 = a.forward(&x16).unwrap();
    let y32 = b.forward(&x32).unwrap();
    assert_eq!(y16.dtype(), DType::F16);
    let close = |p: &[f32], q: &[f32], tol: f32| p.iter().zip(q).all(|(u, v)| (u - v).abs() <= tol);
    let v16 = vals(&y16.to_dtype(DType::F32).unwrap());
    assert!(close(&v16, &vals(&y32), 4e-3), "outputs");
    let (ga, gb) = (
        y16.to_dtype(DType::F32)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap(),
        y32.mul_scalar(1.0)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap(),
    );
    let gx = ga.get(&x16).unwrap();
    assert_eq!(gx.dtype(), DType::F16);
    let gw = ga.get(a.weight.as_ref().unwrap()).unwrap();
    assert_eq!(gw.dtype(), DType::F32);
    let gw32 = gb.get(b.weight.as_ref().unwrap()).unwrap();
    assert!(close(&vals(gw), &vals(gw32), 1e-2), "weight gradients");
    let sa = vals(&a.state.borrow().running_mean);
    assert!(
        close(&sa, &vals(&b.state.borrow().running_mean), 1e-3),
        "running mean"
    );
    a.eval();
    b.eval();
    let e16 = a.forward(&x16.detach()).unwrap();
    assert_eq!(e16.dtype(), DType::F16);
    let e32 = b.forward(&x32.detach()).unwrap();
    assert!(
        close(&vals(&e16.to_dtype(DType::F32).unwrap()), &vals(&e32), 4e-3),
        "eval"
    );
}

/// The explicit batch-norm backward takes the mixed forward's saved statistics: f16 dy and x
/// with an f32 weight (and a fused relu, whose saved input is f32) give dx in f16 and dweight
/// in f32, equal to the f32 computation up to f16 rounding; swapped arguments are still caught.
#[test]
fn batch_norm_backward_f16_input_with_f32_weight() {
    use wgtensor::ops::{batch_norm_backward, batch_norm_train, Activation, BatchNormOptions};
    if !dev().supports_f16() {
        return;
    }
    let xv: Vec<f32> = (0..2 * 3 * 5)
        .map(|i| ((i * 7 % 11) as f32) / 3.0 - 1.5)
        .collect();
    let gv: Vec<f32> = (0..2 * 3 * 5)
        .map(|i| ((i * 5 % 7) as f32) / 4.0 - 0.5)
        .collect();
    let x32 = Tensor::from_slice(dev(), &xv, &[2, 3, 5]).unwrap();
    let g32 = Tensor::from_slice(dev(), &gv, &[2, 3, 5]).unwrap();
    let x16 = x32.to_dtype(DType::F16).unwrap();
    let g16 = g32.to_dtype(DType::F16).unwrap();
    let (x32, g32) = (
        x16.to_dtype(DType::F32).unwrap(),
        g16.to_dtype(DType::F32).unwrap(),
    );
    let w = Tensor::from_slice(dev(), &[0.5f32, -1.0, 2.0], &[3]).unwrap();
    let o = BatchNormOptions {
        weight: Some(&w),
        activation: Activation::Relu,
        ..Default::default()
    };
    let f16run = batch_norm_train(&x16, None, &o).unwrap();
    let f32run = batch_norm_train(&x32, None, &o).unwrap();
    let a = batch_norm_backward(&g16, &x16, Some(&w), &f16run.saved).unwrap();
    let b = batch_norm_backward(&g32, &x32, Some(&w), &f32run.saved).unwrap();
    assert_eq!((a.dx.dtype(), a.dweight.dtype()), (DType::F16, DType::F32));
    let close = |p: &[f32], q: &[f32], tol: f32| p.iter().zip(q).all(|(u, v)| (u - v).abs() <= tol);
    assert!(close(
        &vals(&a.dx.to_dtype(DType::F32).unwrap()),
        &vals(&b.dx),
        1e-2
    ));
    assert!(close(&vals(&a.dweight), &vals(&b.dweight), 1e-2));
    let e = batch_norm_backward(&x16, &g16, Some(&w), &f16run.saved).unwrap_err();
    assert!(e.to_string().contains("swapped"), "{e}");
}

/// nn::BatchNorm3d against PyTorch's (values from torch 2.15): training output and running
/// statistics over [2, 3, 2, 2, 2], the eval output, PyTorch's state-dict names and its
/// _check_input_dim words.
#[test]
fn batch_norm_3d_matches_pytorch() {
    let v: Vec<f32> = (0..48).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
    let x = Tensor::from_slice(dev(), &v, &[2, 3, 2, 2, 2]).unwrap();
    let mut bn = nn::BatchNorm3d::new(dev(), 3).unwrap();
    let close = |got: &[f32], want: &[f32]| {
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g - w).abs() <= 2e-5 * (1.0 + w.abs()),
                "{got:?} vs {want:?}"
            );
        }
    };
    let y = bn.forward(&x).unwrap();
    assert_eq!(y.shape(), &[2, 3, 2, 2, 2]);
    close(
        &vals(&y)[..6],
        &[-0.133757, 0.376019, 0.816799, 1.128926, 1.270154, 1.22137],
    );
    {
        let st = bn.0.state.borrow();
        close(
            &vals(&st.running_mean),
            &[0.028464695, -0.036415473, 0.04316869],
        );
        close(&vals(&st.running_var), &[1.3830647, 1.3686999, 1.3537337]);
        assert_eq!(st.num_batches_tracked, 1);
    }
    let names: Vec<String> = bn.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "weight",
            "bias",
            "running_mean",
            "running_var",
            "num_batches_tracked"
        ]
    );
    bn.eval();
    close(
        &vals(&bn.forward(&x).unwrap())[..4],
        &[-0.024204, 0.898252, 1.695857, 2.26066],
    );
    let e = bn
        .forward(&Tensor::zeros(dev(), &[2, 3, 4, 4], DType::F32).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("BatchNorm3d:") && e.contains("expected 5D input (got 4D input)"),
        "{e}"
    );
}
