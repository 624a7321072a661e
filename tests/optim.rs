//! Optimizers against an f64 transcription of PyTorch's update math over several steps (SGD
//! with momentum, dampening, Nesterov and weight decay; Adam, AdamW, AMSGrad, maximize), a
//! learning-rate change between steps, state saved and restored, clip_grad_norm, and errors.
//! Gradients matched by identity (`step(&grads)`), parameter groups, parameters refused at
//! construction, and atomic steps and state loads: every refused call leaves the parameters
//! and the state exactly as they were.
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

use wgtensor::optim::{clip_grad_norm, Adam, AdamOptions, ParamGroup, Sgd, SgdOptions};
use wgtensor::{no_grad, DType, Device, Tensor};

fn dev() -> &'static Device {
    static DEV: std::sync::OnceLock<Device> = std::sync::OnceLock::new();
    DEV.get_or_init(|| Device::new().expect("device"))
}

/// A tracked leaf of shape `[v.len()]`.
fn leaf(v: &[f32]) -> Tensor {
    Tensor::from_slice(dev(), v, &[v.len()])
        .unwrap()
        .requires_grad()
        .unwrap()
}

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f32>()
        .unwrap()
        .into_iter()
        .map(f64::from)
        .collect()
}

/// Deterministic gradients of step `s` for `n` elements.
fn grad_values(n: usize, s: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (((i * 31 + s * 17) % 23) as f32 - 11.0) / 7.0)
        .collect()
}

fn close(got: &[f64], want: &[f64], what: &str) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 2e-5 * (1.0 + w.abs()),
            "{what}: element {i}: {g} vs {w}"
        );
    }
}

/// PyTorch's SGD in f64.
fn sgd_ref(p: &mut [f64], buf: &mut Option<Vec<f64>>, g: &[f64], o: &SgdOptions) {
    let mut d: Vec<f64> = g.iter().map(|&x| if o.maximize { -x } else { x }).collect();
    if o.weight_decay != 0.0 {
        for (di, pi) in d.iter_mut().zip(p.iter()) {
            *di += o.weight_decay * pi;
        }
    }
    if o.momentum != 0.0 {
        let b = match buf {
            None => d.clone(),
            Some(b) => b
                .iter()
                .zip(&d)
                .map(|(bi, di)| o.momentum * bi + (1.0 - o.dampening) * di)
                .collect(),
        };
        if o.nesterov {
            for (di, bi) in d.iter_mut().zip(&b) {
                *di += o.momentum * bi;
            }
        } else {
            d = b.clone();
        }
        *buf = Some(b);
    }
    for (pi, di) in p.iter_mut().zip(&d) {
        *pi -= o.lr * di;
    }
}

/// PyTorch's single-tensor Adam / AdamW in f64.
fn adam_ref(
    p: &mut [f64],
    st: &mut (Vec<f64>, Vec<f64>, Vec<f64>),
    t: i32,
    g: &[f64],
    o: &AdamOptions,
) {
    let (b1, b2) = o.betas;
    for i in 0..p.len() {
        let mut gi = if o.maximize { -g[i] } else { g[i] };
        if o.decoupled_weight_decay {
            p[i] *= 1.0 - o.lr * o.weight_decay;
        } else if o.weight_decay != 0.0 {
            gi += o.weight_decay * p[i];
        }
        // ATen's lerp: from `end` back for weights >= 0.5.
        let w = 1.0 - b1;
        st.0[i] = if w < 0.5 {
            st.0[i] + w * (gi - st.0[i])
        } else {
            gi - (gi - st.0[i]) * (1.0 - w)
        };
        st.1[i] = b2 * st.1[i] + (1.0 - b2) * gi * gi;
        let bc1 = 1.0 - b1.powi(t);
        let bc2 = 1.0 - b2.powi(t);
        let v = if o.amsgrad {
            st.2[i] = st.2[i].max(st.1[i]);
            st.2[i]
        } else {
            st.1[i]
        };
        let denom = v.sqrt() / bc2.sqrt() + o.eps;
        p[i] -= o.lr / bc1 * st.0[i] / denom;
    }
}

#[test]
fn sgd_matches_pytorch_over_steps() {
    let n = 37;
    let configs = [
        SgdOptions {
            lr: 0.1,
            ..Default::default()
        },
        SgdOptions {
            lr: 0.05,
            momentum: 0.9,
            ..Default::default()
        },
        SgdOptions {
            lr: 0.05,
            momentum: 0.9,
            dampening: 0.3,
            weight_decay: 0.01,
            ..Default::default()
        },
        SgdOptions {
            lr: 0.05,
            momentum: 0.8,
            nesterov: true,
            weight_decay: 0.1,
            ..Default::default()
        },
        SgdOptions {
            lr: 0.02,
            momentum: 0.5,
            maximize: true,
            ..Default::default()
        },
    ];
    for o in configs {
        let init: Vec<f32> = (0..n).map(|i| i as f32 / 10.0 - 1.5).collect();
        let p = leaf(&init);
        let mut opt = Sgd::new(vec![p.clone()], o).unwrap();
        let mut want: Vec<f64> = init.iter().map(|&x| x as f64).collect();
        let mut buf = None;
        let mut ro = o;
        for s in 0..6 {
            if s == 3 {
                opt.set_lr(o.lr * 0.5).unwrap();
                ro.lr = o.lr * 0.5;
            }
            let gv = grad_values(n, s);
            let g = Tensor::from_slice(dev(), &gv, &[n]).unwrap();
            opt.step_with(&[Some(&g)]).unwrap();
            let g64: Vec<f64> = gv.iter().map(|&x| x as f64).collect();
            sgd_ref(&mut want, &mut buf, &g64, &ro);
            close(&vals(&p), &want, &format!("{o:?} step {s}"));
        }
    }
}

#[test]
fn adam_and_adamw_match_pytorch_over_steps() {
    let n = 50;
    let configs = [
        AdamOptions {
            lr: 0.01,
            ..Default::default()
        },
        AdamOptions {
            lr: 0.01,
            weight_decay: 0.1,
            ..Default::default()
        },
        AdamOptions {
            lr: 0.01,
            amsgrad: true,
            ..Default::default()
        },
        AdamOptions {
            lr: 0.02,
            betas: (0.8, 0.99),
            eps: 1e-6,
            ..AdamOptions::adamw()
        },
        AdamOptions {
            lr: 0.01,
            maximize: true,
            amsgrad: true,
            ..AdamOptions::adamw()
        },
    ];
    for o in configs {
        let init: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
        let p = Tensor::from_slice(dev(), &init, &[5, 10])
            .unwrap()
            .requires_grad()
            .unwrap();
        let mut opt = Adam::new(vec![p.clone()], o).unwrap();
        let mut want: Vec<f64> = init.iter().map(|&x| x as f64).collect();
        let mut st = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
        for s in 0..8 {
            let gv = grad_values(n, s);
            let g = Tensor::from_slice(dev(), &gv, &[5, 10]).unwrap();
            opt.step_with(&[Some(&g)]).unwrap();
            let g64: Vec<f64> = gv.iter().map(|&x| x as f64).collect();
            adam_ref(&mut want, &mut st, s as i32 + 1, &g64, &o);
            close(&vals(&p), &want, &format!("{o:?} step {s}"));
        }
        assert_eq!(opt.step_count(0), Some(8));
    }
}

/// Saving the state and loading it into a fresh optimizer continues the same trajectory; a
/// parameter without a gradient is skipped.
#[test]
fn state_round_trip_and_skipped_params() {
    let n = 16;
    let mk = |v: f32| {
        Tensor::full(dev(), &[n], v as f64, DType::F32)
            .unwrap()
            .requires_grad()
            .unwrap()
    };
    let (a, b) = (mk(1.0), mk(2.0));
    let o = AdamOptions {
        lr: 0.05,
        amsgrad: true,
        ..Default::default()
    };
    let mut opt = Adam::new(vec![a.clone(), b.clone()], o).unwrap();
    let g = Tensor::from_slice(dev(), &grad_values(n, 0), &[n]).unwrap();
    opt.step_with(&[Some(&g), None]).unwrap();
    assert_eq!(vals(&b), vec![2.0; n], "no gradient: untouched");
    // Copy the state (the optimizer updates its tensors in place).
    let saved: Vec<(String, Tensor)> = opt
        .state_tensors()
        .into_iter()
        .map(|(k, t)| (k, t.add_scalar(0.0).unwrap()))
        .collect();
    let steps = [opt.step_count(0).unwrap(), opt.step_count(1).unwrap()];
    assert_eq!(saved.len(), 3);
    let a2 = no_grad(|| a.add_scalar(0.0))
        .unwrap()
        .requires_grad()
        .unwrap();
    opt.step_with(&[Some(&g), None]).unwrap();
    let mut fresh = Adam::new(vec![a2.clone(), b.clone()], o).unwrap();
    fresh.load_state_tensors(&saved, &steps).unwrap();
    fresh.step_with(&[Some(&g), None]).unwrap();
    assert_eq!(vals(&a2), vals(&a));
    // A parameter without state is at step 0 (PyTorch keeps the step in the state): a later
    // count for it is refused, not run with zero moments and a skewed bias correction.
    let e = fresh.load_state_tensors(&[], &[3, 0]).unwrap_err();
    assert!(e.to_string().contains("no state"), "{e}");
    // Names are checked.
    let e = fresh
        .load_state_tensors(&[("7.exp_avg".into(), mk(0.0))], &steps)
        .unwrap_err();
    assert!(e.to_string().starts_with("adam:"), "{e}");
    // SGD's momentum buffers round-trip too.
    let p = mk(1.0);
    let mut sgd = Sgd::new(
        vec![p.clone()],
        SgdOptions {
            lr: 0.1,
            momentum: 0.9,
            ..Default::default()
        },
    )
    .unwrap();
    sgd.step_with(&[Some(&g)]).unwrap();
    let st = sgd.state_tensors();
    assert_eq!(st[0].0, "0.momentum_buffer");
    assert_eq!(vals(&st[0].1), vals(&g));
}

/// beta1 = 0 (GAN training's setting) keeps m = g exactly, as ATen's lerp does for weights of
/// 0.5 and up (m_old + (g - m_old) lost a small gradient after a large one); AMSGrad's running
/// maximum keeps a NaN, as torch.maximum.
#[test]
fn adam_beta1_zero_and_amsgrad_nan() {
    let w = leaf(&[0.0]);
    let o = AdamOptions {
        lr: 0.1,
        betas: (0.0, 0.0),
        ..Default::default()
    };
    let mut opt = Adam::new(vec![w.clone()], o).unwrap();
    let g1 = Tensor::from_slice(dev(), &[1e4f32], &[1]).unwrap();
    let g2 = Tensor::from_slice(dev(), &[1e-4f32], &[1]).unwrap();
    opt.step_with(&[Some(&g1)]).unwrap();
    opt.step_with(&[Some(&g2)]).unwrap();
    let m = opt
        .state_tensors()
        .into_iter()
        .find(|(k, _)| k == "0.exp_avg")
        .unwrap()
        .1;
    assert_eq!(vals(&m), vec![f64::from(1e-4f32)]);
    close(&vals(&w), &[-0.1 - 0.1 * 1e-4 / (1e-4 + 1e-8)], "w");

    let a = leaf(&[0.0]);
    let o = AdamOptions {
        amsgrad: true,
        ..Default::default()
    };
    let mut opt = Adam::new(vec![a.clone()], o).unwrap();
    opt.step_with(&[Some(&Tensor::from_slice(dev(), &[1.0f32], &[1]).unwrap())])
        .unwrap();
    opt.step_with(&[Some(&Tensor::from_slice(dev(), &[f32::NAN], &[1]).unwrap())])
        .unwrap();
    let st = opt.state_tensors();
    let vmax = &st.iter().find(|(k, _)| k == "0.max_exp_avg_sq").unwrap().1;
    assert!(vals(vmax)[0].is_nan());
}

#[test]
fn clip_grad_norm_scales_on_the_device() {
    let g1 = Tensor::from_slice(dev(), &[3.0f32, 0.0], &[2]).unwrap();
    let g2 = Tensor::from_slice(dev(), &[0.0f32, 4.0, 0.0], &[3]).unwrap();
    let (clipped, norm) = clip_grad_norm(&[&g1, &g2], 1.0).unwrap();
    assert!((vals(&norm)[0] - 5.0).abs() < 1e-6);
    close(&vals(&clipped[0]), &[0.6, 0.0], "clipped");
    close(&vals(&clipped[1]), &[0.0, 0.8, 0.0], "clipped");
    // Below the threshold the gradients are unchanged.
    let (same, _) = clip_grad_norm(&[&g1, &g2], 10.0).unwrap();
    close(&vals(&same[1]), &[0.0, 4.0, 0.0], "unclipped");
    assert!(clip_grad_norm(&[], 1.0).is_err());
    // An infinite max_norm measures the norm and leaves the gradients as they are.
    let (same, norm) = clip_grad_norm(&[&g1, &g2], f64::INFINITY).unwrap();
    assert!((vals(&norm)[0] - 5.0).abs() < 1e-6);
    assert_eq!(vals(&same[0]), vec![3.0, 0.0]);
    for bad in [-1.0, f64::NAN, f64::NEG_INFINITY] {
        assert!(clip_grad_norm(&[&g1], bad).is_err(), "{bad}");
    }
}

/// f16 gradients get an f16 norm, each gradient's norm rounded to f16 as PyTorch's per-tensor
/// norms: past 65504 it is inf, the coefficient 0 and the gradients zeroed (PyTorch without
/// error_if_nonfinite). Mixed dtypes give the promoted one.
#[test]
fn clip_grad_norm_f16_gradients() {
    if !dev().supports_f16() {
        return;
    }
    let h = |v: &[f32], shape: &[usize]| {
        Tensor::from_slice(dev(), v, shape)
            .unwrap()
            .to_dtype(DType::F16)
            .unwrap()
    };
    let back = |t: &Tensor| vals(&t.to_dtype(DType::F32).unwrap());
    let g = h(&[3.0, 4.0], &[2]);
    let (clipped, norm) = clip_grad_norm(&[&g], 1.0).unwrap();
    assert_eq!(norm.dtype(), DType::F16);
    assert_eq!(back(&norm), vec![5.0]);
    for (got, want) in back(&clipped[0]).into_iter().zip([0.6, 0.8]) {
        assert!((got - want).abs() <= 1e-3, "f16 clipped: {got} vs {want}");
    }
    // 300 values of 4000: a norm of 69282, inf in f16.
    let big = h(&[4000.0; 300], &[300]);
    let (clipped, norm) = clip_grad_norm(&[&big], 1.0).unwrap();
    assert_eq!(back(&norm), vec![f64::INFINITY]);
    assert!(back(&clipped[0]).iter().all(|&v| v == 0.0));
    let g32 = Tensor::from_slice(dev(), &[0.0f32, 12.0], &[2]).unwrap();
    let (_, norm) = clip_grad_norm(&[&g, &g32], 1.0).unwrap();
    assert_eq!((norm.dtype(), vals(&norm)), (DType::F32, vec![13.0]));
}

#[test]
fn errors_name_the_optimizer() {
    let base = Tensor::zeros(dev(), &[4], DType::F32).unwrap();
    let p = base.clone().requires_grad().unwrap();
    let cases = [
        Sgd::new(
            vec![p.clone()],
            SgdOptions {
                lr: -1.0,
                ..Default::default()
            },
        )
        .map(drop),
        Sgd::new(
            vec![p.clone()],
            SgdOptions {
                nesterov: true,
                ..Default::default()
            },
        )
        .map(drop),
        Sgd::new(
            vec![base
                .reshape(&[2, 2])
                .unwrap()
                .transpose(0, 1)
                .unwrap()
                .requires_grad()
                .unwrap()],
            SgdOptions::default(),
        )
        .map(drop),
    ];
    for c in cases {
        assert!(c.unwrap_err().to_string().starts_with("sgd:"));
    }
    let e = Adam::new(
        vec![p.clone()],
        AdamOptions {
            betas: (1.0, 0.9),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(e.to_string().starts_with("adam:"), "{e}");
    let mut opt = Adam::new(vec![p.clone()], AdamOptions::default()).unwrap();
    let wrong = Tensor::zeros(dev(), &[5], DType::F32).unwrap();
    let e = opt.step_with(&[Some(&wrong)]).unwrap_err();
    assert!(e.to_string().starts_with("adam:"), "{e}");
    let e = opt.step_with(&[]).unwrap_err();
    assert!(e.to_string().contains("1 parameters"), "{e}");
}

/// SGD, momentum 0.9, lr 0.1 (PyTorch: w = [1, 2], g = [1, 1] gives [0.9, 1.9], then [0.71, 1.71]).
fn sgd_momentum() -> SgdOptions {
    SgdOptions {
        lr: 0.1,
        momentum: 0.9,
        ..Default::default()
    }
}

/// The optimizer's state as host values, by name.
fn state_vals(st: Vec<(String, Tensor)>) -> Vec<(String, Vec<f64>)> {
    st.into_iter().map(|(n, t)| (n, vals(&t))).collect()
}

/// Every refused SGD step (gradient count, shape, dtype, device-side aliasing of the parameter
/// or of the optimizer's state, a bad gradient at the second parameter) leaves the parameters,
/// their versions and the momentum buffers exactly as they were; valid steps then give
/// PyTorch's numbers.
#[test]
fn refused_sgd_steps_change_nothing() {
    let w = leaf(&[1.0, 2.0]);
    let v = leaf(&[5.0, 6.0, 7.0]);
    let mut opt = Sgd::new(vec![w.clone(), v.clone()], sgd_momentum()).unwrap();
    let ones = Tensor::from_slice(dev(), &[1.0f32, 1.0], &[2]).unwrap();
    let ones3 = Tensor::from_slice(dev(), &[1.0f32, 1.0, 1.0], &[3]).unwrap();
    let wrong_shape = Tensor::from_slice(dev(), &[1.0f32, 1.0, 1.0], &[3]).unwrap();
    let wrong_dtype = Tensor::from_slice(dev(), &[1i32, 1], &[2]).unwrap();
    let unchanged = |w_want: &[f64], v_want: &[f64], versions: (u64, u64)| {
        assert_eq!(vals(&w), w_want);
        assert_eq!(vals(&v), v_want);
        assert_eq!((w.version(), v.version()), versions);
    };
    let versions = (w.version(), v.version());
    let refused: Vec<Vec<Option<&Tensor>>> = vec![
        vec![Some(&wrong_shape), None],
        vec![Some(&wrong_dtype), None],
        vec![Some(&ones)],
        vec![Some(&ones), Some(&ones3), None],
        // A failure at the second parameter leaves the first one unstepped.
        vec![Some(&ones), Some(&ones)],
        // The parameter as its own gradient, and as another parameter's.
        vec![Some(&w), None],
        vec![Some(&ones), Some(&v)],
        vec![None, Some(&v)],
    ];
    for (k, g) in refused.iter().enumerate() {
        let e = opt.step_with(g).unwrap_err();
        assert!(e.to_string().starts_with("sgd:"), "case {k}: {e}");
        unchanged(&[1.0, 2.0], &[5.0, 6.0, 7.0], versions);
        assert!(
            opt.state_tensors().is_empty(),
            "case {k}: no momentum buffer"
        );
    }
    // A view of the parameter is its storage too.
    let view = w.detach().reshape(&[2]).unwrap();
    assert!(opt.step_with(&[Some(&view), None]).is_err());
    // The first valid step: PyTorch's [0.9, 1.9] (not [0.95, 1.95] from a stale zero buffer).
    opt.step_with(&[Some(&ones), None]).unwrap();
    close(&vals(&w), &[0.9, 1.9], "first step");
    assert_eq!(vals(&v), vec![5.0, 6.0, 7.0], "no gradient: skipped");
    let state = opt.state_tensors();
    assert_eq!(state.len(), 1);
    assert_eq!(state[0].0, "0.momentum_buffer");
    // The optimizer's own state as a gradient is refused too.
    let before = state_vals(opt.state_tensors());
    let versions = (w.version(), v.version());
    let e = opt.step_with(&[Some(&state[0].1), None]).unwrap_err();
    assert!(e.to_string().contains("state"), "{e}");
    let e = opt.step_with(&[Some(&ones), Some(&wrong_shape.reshape(&[1, 3]).unwrap())]);
    assert!(e.is_err());
    assert_eq!(state_vals(opt.state_tensors()), before);
    assert_eq!((w.version(), v.version()), versions);
    close(&vals(&w), &[0.9, 1.9], "after refused steps");
    // The second step: buf = 0.9 * 1 + 1 = 1.9, w = [0.9, 1.9] - 0.19.
    opt.step_with(&[Some(&ones), Some(&ones3)]).unwrap();
    close(&vals(&w), &[0.71, 1.71], "second step");
    close(&vals(&v), &[4.9, 5.9, 6.9], "v's first step");
}

/// Refused Adam steps count no step and create no state; the first valid step is step 1.
#[test]
fn refused_adam_steps_change_nothing() {
    let o = AdamOptions {
        lr: 0.1,
        amsgrad: true,
        ..Default::default()
    };
    let a = leaf(&[1.0, 2.0]);
    let b = leaf(&[3.0, 4.0]);
    let mut opt = Adam::new(vec![a.clone(), b.clone()], o).unwrap();
    let g = Tensor::from_slice(dev(), &[0.5f32, -1.0], &[2]).unwrap();
    let bad = Tensor::from_slice(dev(), &[0.5f32], &[1]).unwrap();
    for grads in [
        vec![Some(&g), Some(&bad)],
        vec![Some(&a), None],
        vec![Some(&g), Some(&a)],
        vec![Some(&g)],
    ] {
        assert!(opt.step_with(&grads).is_err());
        assert_eq!(opt.step_counts(), &[0, 0]);
        assert!(opt.state_tensors().is_empty());
        assert_eq!((vals(&a), vals(&b)), (vec![1.0, 2.0], vec![3.0, 4.0]));
    }
    opt.step_with(&[Some(&g), None]).unwrap();
    assert_eq!(opt.step_counts(), &[1, 0]);
    let mut want = vec![1.0, 2.0];
    let mut st = (vec![0.0; 2], vec![0.0; 2], vec![0.0; 2]);
    adam_ref(&mut want, &mut st, 1, &[0.5, -1.0], &o);
    close(&vals(&a), &want, "adam step 1");
    // A refused step after state exists: its moments and counts stay.
    let before = state_vals(opt.state_tensors());
    assert_eq!(before.len(), 3);
    let exp_avg = opt.state_tensors().remove(0).1;
    assert!(opt.step_with(&[Some(&exp_avg), None]).is_err());
    assert!(opt.step_with(&[Some(&g), Some(&bad)]).is_err());
    assert_eq!(state_vals(opt.state_tensors()), before);
    assert_eq!(opt.step_counts(), &[1, 0]);
    opt.step_with(&[Some(&g), None]).unwrap();
    adam_ref(&mut want, &mut st, 2, &[0.5, -1.0], &o);
    close(&vals(&a), &want, "adam step 2");
}

/// A parameter given as its own gradient is an `Err` before anything is recorded: the device
/// stays usable, and a tensor computed before reads back correctly.
#[test]
fn own_gradient_is_refused_and_the_device_stays_usable() {
    let a = Tensor::from_slice(dev(), &[1.0f32, 2.0, 3.0], &[3]).unwrap();
    let b = a.add_scalar(1.0).unwrap();
    let w = leaf(&[1.0, 2.0, 3.0]);
    let mut sgd = Sgd::new(vec![w.clone()], sgd_momentum()).unwrap();
    let e = sgd.step_with(&[Some(&w)]).unwrap_err();
    assert!(e.to_string().contains("its own gradient"), "{e}");
    let mut adam = Adam::new(vec![w.clone()], AdamOptions::default()).unwrap();
    assert!(adam.step_with(&[Some(&w)]).is_err());
    assert_eq!(vals(&b), vec![2.0, 3.0, 4.0]);
    assert_eq!(vals(&w), vec![1.0, 2.0, 3.0]);
    let c = b.mul_scalar(2.0).unwrap();
    assert_eq!(vals(&c), vec![4.0, 6.0, 8.0]);
    assert_eq!(adam.step_count(0), Some(0));
}

/// `step(&grads)` looks each parameter up in autograd's gradients by identity: the order of the
/// parameters does not matter, two same-shaped gradients cannot be swapped, and a parameter
/// the loss did not reach is skipped.
#[test]
fn step_matches_gradients_by_identity() {
    let c = Tensor::from_slice(dev(), &[3.0f32, -1.0, 0.5], &[3]).unwrap();
    let run = |reversed: bool| {
        let a = leaf(&[1.0, 2.0, 3.0]);
        let b = leaf(&[-1.0, 0.5, 2.0]);
        let unused = leaf(&[7.0, 7.0, 7.0]);
        let named = if reversed {
            vec![
                ("unused".to_string(), unused.clone()),
                ("b".to_string(), b.clone()),
                ("a".to_string(), a.clone()),
            ]
        } else {
            vec![
                ("a".to_string(), a.clone()),
                ("b".to_string(), b.clone()),
                ("unused".to_string(), unused.clone()),
            ]
        };
        let mut opt = Adam::new(
            named,
            AdamOptions {
                lr: 0.1,
                ..Default::default()
            },
        )
        .unwrap();
        // loss = sum(a * c) + sum(b * b): da = c, db = 2b (same shapes, different values).
        let loss = a
            .mul(&c)
            .unwrap()
            .sum_all()
            .unwrap()
            .add(&b.mul(&b).unwrap().sum_all().unwrap())
            .unwrap();
        let grads = loss.backward().unwrap();
        assert!(grads.get(&unused).is_none());
        opt.step(&grads).unwrap();
        let unused_steps = opt.step_count(if reversed { 0 } else { 2 });
        (vals(&a), vals(&b), vals(&unused), unused_steps)
    };
    let (a1, b1, u1, s1) = run(false);
    let (a2, b2, u2, s2) = run(true);
    assert_eq!(
        (&a1, &b1),
        (&a2, &b2),
        "the order of the parameters is irrelevant"
    );
    assert_eq!(
        (u1, u2),
        (vec![7.0; 3], vec![7.0; 3]),
        "unreached: untouched"
    );
    assert_eq!((s1, s2), (Some(0), Some(0)), "unreached: no step counted");
    // Against the reference with the right pairing.
    let o = AdamOptions {
        lr: 0.1,
        ..Default::default()
    };
    let mut wa = vec![1.0, 2.0, 3.0];
    let mut wb = vec![-1.0, 0.5, 2.0];
    let gb: Vec<f64> = wb.iter().map(|x| 2.0 * x).collect();
    let z = || (vec![0.0; 3], vec![0.0; 3], vec![0.0; 3]);
    adam_ref(&mut wa, &mut z(), 1, &[3.0, -1.0, 0.5], &o);
    adam_ref(&mut wb, &mut z(), 1, &gb, &o);
    close(&a1, &wa, "a");
    close(&b1, &wb, "b");
    // Positional gradients in the wrong order would have been accepted: same shapes.
    let a = leaf(&[1.0, 2.0, 3.0]);
    let b = leaf(&[-1.0, 0.5, 2.0]);
    let mut opt = Sgd::new(vec![a.clone(), b.clone()], SgdOptions::default()).unwrap();
    let loss = a.mul(&c).unwrap().sum_all().unwrap();
    let grads = loss.backward().unwrap();
    let ga = grads.get(&a).unwrap();
    assert!(
        opt.step_with(&[None, Some(ga)]).is_ok(),
        "by position: b got a's gradient"
    );
    assert_ne!(vals(&b), vec![-1.0, 0.5, 2.0]);
}

/// Parameter groups with their own learning rate and weight decay, per-group lr get/set, and
/// state named by the parameters' names.
#[test]
fn param_groups_have_their_own_hyperparameters() {
    let body = leaf(&[1.0, 2.0]);
    let head = leaf(&[1.0, 2.0]);
    let o = sgd_momentum();
    let mut opt = Sgd::new(vec![("body.w".to_string(), body.clone())], o).unwrap();
    opt.add_param_group(
        ParamGroup::new(vec![("head.w".to_string(), head.clone())])
            .lr(0.01)
            .weight_decay(0.5),
    )
    .unwrap();
    assert_eq!(opt.num_groups(), 2);
    assert_eq!((opt.group_lr(0), opt.group_lr(1)), (Some(0.1), Some(0.01)));
    assert_eq!(opt.group_weight_decay(1), Some(0.5));
    assert_eq!(opt.param_names(), &["body.w", "head.w"]);
    let mut ref_body = vec![1.0, 2.0];
    let mut ref_head = vec![1.0, 2.0];
    let (mut buf_body, mut buf_head) = (None, None);
    let o_head = SgdOptions {
        lr: 0.01,
        weight_decay: 0.5,
        ..o
    };
    for s in 0..3 {
        if s == 2 {
            opt.set_group_lr(1, 0.05).unwrap();
        }
        let grads = body
            .mul_scalar(3.0)
            .unwrap()
            .add(&head.mul(&head).unwrap())
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let gb = vec![3.0, 3.0];
        let gh: Vec<f64> = ref_head.iter().map(|x| 2.0 * x).collect();
        opt.step(&grads).unwrap();
        sgd_ref(&mut ref_body, &mut buf_body, &gb, &o);
        let oh = SgdOptions {
            lr: if s == 2 { 0.05 } else { 0.01 },
            ..o_head
        };
        sgd_ref(&mut ref_head, &mut buf_head, &gh, &oh);
        close(&vals(&body), &ref_body, &format!("body step {s}"));
        close(&vals(&head), &ref_head, &format!("head step {s}"));
    }
    let names: Vec<String> = opt.state_tensors().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["body.w.momentum_buffer", "head.w.momentum_buffer"]);
    // set_lr sets every group; bad values and groups are refused.
    opt.set_lr(0.2).unwrap();
    assert_eq!((opt.group_lr(0), opt.group_lr(1)), (Some(0.2), Some(0.2)));
    assert!(opt.set_group_lr(2, 0.1).is_err());
    assert!(opt.set_group_lr(0, -1.0).is_err());
    assert_eq!(opt.lr(), 0.2);
    // A refused group adds nothing.
    let other = leaf(&[0.0]);
    let e = opt
        .add_param_group(ParamGroup::new(vec![other.clone(), head.clone()]))
        .unwrap_err();
    assert!(e.to_string().contains("shares its storage"), "{e}");
    assert!(opt
        .add_param_group(ParamGroup::new(vec![("body.w".to_string(), other.clone())]))
        .is_err());
    assert!(opt
        .add_param_group(ParamGroup::new(vec![other.clone()]).lr(f64::NAN))
        .is_err());
    assert_eq!((opt.params().len(), opt.num_groups()), (2, 2));

    // Adam: per-group lr in the bias-corrected step size; state named by parameter.
    let p = leaf(&[1.0, -1.0]);
    let q = leaf(&[1.0, -1.0]);
    let o = AdamOptions {
        lr: 0.1,
        ..Default::default()
    };
    let mut adam = Adam::new(vec![("p".to_string(), p.clone())], o).unwrap();
    adam.add_param_group(ParamGroup::new(vec![("q".to_string(), q.clone())]).lr(0.01))
        .unwrap();
    let g = Tensor::from_slice(dev(), &[0.5f32, 2.0], &[2]).unwrap();
    adam.step_with(&[Some(&g), Some(&g)]).unwrap();
    let (mut rp, mut rq) = (vec![1.0, -1.0], vec![1.0, -1.0]);
    let z = || (vec![0.0; 2], vec![0.0; 2], vec![0.0; 2]);
    adam_ref(&mut rp, &mut z(), 1, &[0.5, 2.0], &o);
    adam_ref(
        &mut rq,
        &mut z(),
        1,
        &[0.5, 2.0],
        &AdamOptions { lr: 0.01, ..o },
    );
    close(&vals(&p), &rp, "p");
    close(&vals(&q), &rq, "q");
    let names: Vec<String> = adam.state_tensors().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        ["p.exp_avg", "p.exp_avg_sq", "q.exp_avg", "q.exp_avg_sq"]
    );
}

/// The constructors take `nn::Module::named_parameters()` as they are.
#[test]
fn optimizers_take_named_parameters_of_a_module() {
    use wgtensor::nn::{Forward, Linear, Module};
    let lin = Linear::new(dev(), 3, 2, true).unwrap();
    let mut opt = Adam::adamw(lin.named_parameters(), AdamOptions::adamw()).unwrap();
    assert_eq!(opt.param_names(), &["weight", "bias"]);
    let x = Tensor::ones(dev(), &[4, 3], DType::F32).unwrap();
    let w0 = vals(&lin.weight);
    let grads = lin
        .forward(&x)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    opt.step(&grads).unwrap();
    assert_ne!(vals(&lin.weight), w0);
    assert_eq!(opt.step_counts(), &[1, 1]);
    let names: Vec<String> = opt.state_tensors().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "weight.exp_avg",
            "weight.exp_avg_sq",
            "bias.exp_avg",
            "bias.exp_avg_sq"
        ]
    );
}

/// Tensors that never required grad are taken, as PyTorch's optimizers take them (its
/// test_step_is_noop_when_params_have_no_grad): `step` finds no gradient and leaves them,
/// `step_with` updates them with the gradients given.
#[test]
fn plain_tensors_are_skipped_by_step_and_updated_by_step_with() {
    let p = Tensor::from_slice(dev(), &[1.0f32, 2.0], &[2]).unwrap();
    let w = leaf(&[1.0, 2.0]);
    let g = w
        .mul_scalar(3.0)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let mut sgd = Sgd::new(
        vec![p.clone()],
        SgdOptions {
            lr: 0.5,
            momentum: 0.9,
            ..Default::default()
        },
    )
    .unwrap();
    sgd.step(&g).unwrap();
    assert_eq!(p.to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
    let mut adam = Adam::new(vec![p.clone()], AdamOptions::default()).unwrap();
    adam.step(&g).unwrap();
    assert_eq!(p.to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
    let grad = Tensor::from_slice(dev(), &[2.0f32, -2.0], &[2]).unwrap();
    sgd.step_with(&[Some(&grad)]).unwrap();
    assert_eq!(p.to_vec::<f32>().unwrap(), vec![0.0, 3.0]);
}

/// The constructors refuse what backward would never give a gradient to, what cannot be
/// updated in place, and the same storage twice.
#[test]
fn construction_refuses_bad_parameters() {
    let w = leaf(&[1.0, 2.0]);
    let msg = |r: wgtensor::Result<Sgd>| r.unwrap_err().to_string();
    let o = SgdOptions::default;
    // A non-leaf: the output of a tracked op.
    let m = msg(Sgd::new(vec![w.mul_scalar(0.01).unwrap()], o()));
    assert!(m.contains("can't optimize a non-leaf Tensor"), "{m}");
    // No parameters: PyTorch's "optimizer got an empty parameter list".
    let m = msg(Sgd::new(Vec::<Tensor>::new(), o()));
    assert!(m.contains("optimizer got an empty parameter list"), "{m}");
    let m = Adam::new(Vec::<Tensor>::new(), AdamOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        m.starts_with("adam:") && m.contains("empty parameter list"),
        "{m}"
    );
    // I32.
    let ids = Tensor::from_slice(dev(), &[1i32, 2], &[2]).unwrap();
    let m = msg(Sgd::new(vec![ids], o()));
    assert!(m.contains("I32"), "{m}");
    // The same tensor twice (a clone shares the storage), and a view of it; across groups in
    // PyTorch's words.
    let m = msg(Sgd::new(vec![w.clone(), w.clone()], o()));
    assert!(m.contains("shares its storage"), "{m}");
    assert!(!m.contains("more than one parameter group"), "{m}");
    let mut two = Sgd::new(vec![w.clone()], o()).unwrap();
    let e = two
        .add_param_group(ParamGroup::new(vec![w.clone()]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("some parameters appear in more than one parameter group"),
        "{e}"
    );
    let alias = w.detach().requires_grad().unwrap();
    assert!(Sgd::new(vec![w.clone(), alias], o()).is_err());
    // A view at an offset cannot be updated in place.
    let base = Tensor::from_slice(dev(), &[1.0f32, 2.0, 3.0], &[3]).unwrap();
    let tail = base.narrow(0, 1, 2).unwrap().requires_grad().unwrap();
    assert!(msg(Sgd::new(vec![tail], o())).contains("contiguous"));
    // Duplicate names.
    let v = leaf(&[0.0]);
    let m = msg(Sgd::new(
        vec![("x".to_string(), w.clone()), ("x".to_string(), v.clone())],
        o(),
    ));
    assert!(m.contains("\"x\""), "{m}");
    // Accepted: a tensor slice, an array, named tensors.
    Sgd::new(&[w.clone(), v.clone()][..], o()).unwrap();
    Sgd::new([w.clone(), v.clone()], o()).unwrap();
}

/// Loading state checks every entry before replacing anything and keeps private copies.
#[test]
fn load_state_is_atomic_and_private() {
    let w = leaf(&[1.0, 2.0]);
    let v = leaf(&[5.0, 6.0, 7.0]);
    let mut opt = Sgd::new(
        vec![("w".to_string(), w.clone()), ("v".to_string(), v.clone())],
        sgd_momentum(),
    )
    .unwrap();
    let ones = Tensor::from_slice(dev(), &[1.0f32, 1.0], &[2]).unwrap();
    opt.step_with(&[Some(&ones), None]).unwrap();
    let before = state_vals(opt.state_tensors());
    assert_eq!(
        before,
        vec![("w.momentum_buffer".to_string(), vec![1.0, 1.0])]
    );
    let mine = Tensor::from_slice(dev(), &[4.0f32, 4.0], &[2]).unwrap();
    let three = Tensor::from_slice(dev(), &[0.0f32, 0.0, 0.0], &[3]).unwrap();
    let bad: Vec<Vec<(String, Tensor)>> = vec![
        // A good entry first, then a bad one: nothing is loaded.
        vec![
            ("w.momentum_buffer".into(), mine.clone()),
            ("v.momentum_buffer".into(), mine.clone()),
        ],
        vec![
            ("w.momentum_buffer".into(), mine.clone()),
            ("nope.momentum_buffer".into(), three.clone()),
        ],
        vec![
            ("w.momentum_buffer".into(), mine.clone()),
            ("w.momentum_buffer".into(), mine.clone()),
        ],
        vec![("w.exp_avg".into(), mine.clone())],
        vec![("0.momentum_buffer".into(), mine.clone())],
        // Integer state is no momentum buffer.
        vec![(
            "w.momentum_buffer".into(),
            Tensor::from_slice(dev(), &[1i32, 1], &[2]).unwrap(),
        )],
    ];
    for (k, st) in bad.iter().enumerate() {
        let e = opt.load_state_tensors(st).unwrap_err();
        assert!(e.to_string().starts_with("sgd:"), "case {k}: {e}");
        assert_eq!(state_vals(opt.state_tensors()), before, "case {k}");
    }
    // A valid load is a copy: writing the caller's tensor afterwards changes nothing.
    opt.load_state_tensors(&[
        ("w.momentum_buffer".into(), mine.clone()),
        ("v.momentum_buffer".into(), three.clone()),
    ])
    .unwrap();
    let st = opt.state_tensors();
    assert!(st
        .iter()
        .all(|(_, t)| !t.shares_storage(&mine) && !t.shares_storage(&three)));
    no_grad(|| mine.copy_from(&ones)).unwrap();
    assert_eq!(
        state_vals(opt.state_tensors()),
        vec![
            ("w.momentum_buffer".to_string(), vec![4.0, 4.0]),
            ("v.momentum_buffer".to_string(), vec![0.0, 0.0, 0.0]),
        ]
    );
    // buf = 0.9 * 4 + 1 = 4.6; w = [1, 2] - 0.1 * [1, 1] - 0.46.
    opt.step_with(&[Some(&ones), None]).unwrap();
    close(&vals(&w), &[0.44, 1.44], "step from the loaded buffer");
    // Loading replaces the whole state: an empty load drops the buffers.
    opt.load_state_tensors(&[]).unwrap();
    assert!(opt.state_tensors().is_empty());
    // State of another float dtype is cast to the parameter's, as PyTorch's load_state_dict.
    if dev().supports_f16() {
        let half = mine.to_dtype(DType::F16).unwrap();
        opt.load_state_tensors(&[("w.momentum_buffer".into(), half)])
            .unwrap();
        let st = opt.state_tensors();
        assert_eq!(
            (st[0].1.dtype(), vals(&st[0].1)),
            (DType::F32, vec![1.0, 1.0])
        );
    }

    // Adam: an incomplete entry set, AMSGrad's entry without AMSGrad, a wrong count of steps.
    let a = leaf(&[1.0, 2.0]);
    let mut adam = Adam::new(vec![a.clone()], AdamOptions::default()).unwrap();
    adam.step_with(&[Some(&ones)]).unwrap();
    let before = state_vals(adam.state_tensors());
    let z = || Tensor::zeros(dev(), &[2], DType::F32).unwrap();
    for (st, steps) in [
        (vec![("0.exp_avg".to_string(), z())], vec![5]),
        (
            vec![
                ("0.exp_avg".to_string(), z()),
                ("0.exp_avg_sq".to_string(), z()),
                ("0.max_exp_avg_sq".to_string(), z()),
            ],
            vec![5],
        ),
        (
            vec![
                ("0.exp_avg".to_string(), z()),
                ("0.exp_avg_sq".to_string(), z()),
            ],
            vec![5, 5],
        ),
    ] {
        assert!(adam.load_state_tensors(&st, &steps).is_err());
        assert_eq!(state_vals(adam.state_tensors()), before);
        assert_eq!(adam.step_counts(), &[1]);
    }
}

/// The schedulers against PyTorch's lr_scheduler values (written out from its formulas):
/// epoch 0 set at construction, one step per epoch, every group from its own initial rate;
/// argument errors as PyTorch's.
#[test]
fn lr_schedulers_follow_pytorch() {
    use wgtensor::optim::{LrScheduler, Schedule};
    let lrs = |s: Schedule, epochs: u64| {
        let mut opt = Sgd::new(
            vec![leaf(&[1.0])],
            SgdOptions {
                lr: 0.1,
                ..Default::default()
            },
        )
        .unwrap();
        opt.add_param_group(ParamGroup::new(vec![leaf(&[2.0])]).lr(1.0))
            .unwrap();
        let mut sched = LrScheduler::new(&mut opt, s).unwrap();
        let mut out = vec![(opt.group_lr(0).unwrap(), opt.group_lr(1).unwrap())];
        for _ in 0..epochs {
            sched.step(&mut opt).unwrap();
            out.push((opt.group_lr(0).unwrap(), opt.group_lr(1).unwrap()));
            assert_eq!(
                sched.last_lr(),
                [out.last().unwrap().0, out.last().unwrap().1]
            );
        }
        assert_eq!(sched.epoch(), epochs);
        assert_eq!(sched.base_lrs(), [0.1, 1.0]);
        out
    };
    let check = |got: Vec<(f64, f64)>, want: &[f64], what: &str| {
        for (e, ((a, b), w)) in got.iter().zip(want).enumerate() {
            assert!(
                (a - 0.1 * w).abs() < 1e-12 && (b - w).abs() < 1e-12,
                "{what} epoch {e}: {a} {b} vs {w}"
            );
        }
    };
    // StepLR(step_size=2, gamma=0.5): 1, 1, .5, .5, .25
    check(
        lrs(
            Schedule::Step {
                step_size: 2,
                gamma: 0.5,
            },
            4,
        ),
        &[1.0, 1.0, 0.5, 0.5, 0.25],
        "step",
    );
    // MultiStepLR([1, 3, 3], 0.1): a repeated milestone counts twice.
    check(
        lrs(
            Schedule::MultiStep {
                milestones: vec![1, 3, 3],
                gamma: 0.1,
            },
            4,
        ),
        &[1.0, 0.1, 0.1, 0.001, 0.001],
        "multistep",
    );
    check(
        lrs(Schedule::Exponential { gamma: 0.9 }, 3),
        &[1.0, 0.9, 0.81, 0.729],
        "exponential",
    );
    // CosineAnnealingLR(T_max=4, eta_min=0): (1 + cos(pi e / 4)) / 2.
    let cos: Vec<f64> = (0..=4)
        .map(|e| (1.0 + (std::f64::consts::PI * e as f64 / 4.0).cos()) / 2.0)
        .collect();
    check(
        lrs(
            Schedule::CosineAnnealing {
                t_max: 4,
                eta_min: 0.0,
            },
            4,
        ),
        &cos,
        "cosine",
    );
    // LinearLR(1/3, 1, total_iters=3): factor 1/3 at once, then up to 1 and held.
    let third = 1.0 / 3.0;
    check(
        lrs(
            Schedule::Linear {
                start_factor: third,
                end_factor: 1.0,
                total_iters: 3,
            },
            4,
        ),
        &[third, third + 2.0 / 9.0, third + 4.0 / 9.0, 1.0, 1.0],
        "linear",
    );
    check(
        lrs(Schedule::Lambda(|e| 1.0 / (e + 1) as f64), 2),
        &[1.0, 0.5, 1.0 / 3.0],
        "lambda",
    );
    // PyTorch's argument errors.
    let mut opt = Adam::new(vec![leaf(&[1.0])], AdamOptions::default()).unwrap();
    for bad in [
        Schedule::Linear {
            start_factor: 0.0,
            end_factor: 1.0,
            total_iters: 5,
        },
        Schedule::Linear {
            start_factor: 0.5,
            end_factor: 1.5,
            total_iters: 5,
        },
        Schedule::CosineAnnealing {
            t_max: 0,
            eta_min: 0.0,
        },
        Schedule::Step {
            step_size: 0,
            gamma: 0.1,
        },
        Schedule::Exponential { gamma: f64::NAN },
    ] {
        let e = LrScheduler::new(&mut opt, bad.clone())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("lr_scheduler"), "{bad:?}: {e}");
    }
    assert_eq!(opt.lr(), 1e-3, "a refused scheduler changes nothing");
    // Adam works the same. A group added later is scheduled from its own rate by the
    // chained formulas (PyTorch's get_lr walks every param group), and kept as it is by
    // LambdaLR, whose formula zips the initial rates with the groups.
    let mut sched = LrScheduler::new(&mut opt, Schedule::Exponential { gamma: 0.5 }).unwrap();
    sched.step(&mut opt).unwrap();
    assert!((opt.lr() - 5e-4).abs() < 1e-15);
    opt.add_param_group(ParamGroup::new(vec![leaf(&[3.0])]).lr(0.1))
        .unwrap();
    sched.step(&mut opt).unwrap();
    assert_eq!(sched.epoch(), 2);
    let (g0, g1) = (opt.group_lr(0).unwrap(), opt.group_lr(1).unwrap());
    assert!(
        (g0 - 2.5e-4).abs() < 1e-15 && (g1 - 0.05).abs() < 1e-15,
        "{g0} {g1}"
    );
    assert_eq!(sched.last_lr().len(), 2);
    let mut lambda =
        LrScheduler::new(&mut opt, Schedule::Lambda(|e| 1.0 / (e + 1) as f64)).unwrap();
    opt.add_param_group(ParamGroup::new(vec![leaf(&[4.0])]).lr(0.2))
        .unwrap();
    lambda.step(&mut opt).unwrap();
    assert_eq!(opt.group_lr(2), Some(0.2));
    assert!((opt.group_lr(0).unwrap() - 5e-4).abs() < 1e-15);
}

/// PyTorch's clip_grad_value_: every element clamped into [-v, v], NaN kept, f16 too.
#[test]
fn clip_grad_value_clamps_each_element() {
    use wgtensor::optim::clip_grad_value;
    let a = Tensor::from_slice(dev(), &[3.0f32, -0.5, -4.0, f32::NAN], &[4]).unwrap();
    let b = Tensor::from_slice(dev(), &[0.25f32, 9.0], &[2]).unwrap();
    let c = clip_grad_value(&[&a, &b], 1.0).unwrap();
    let ca = vals(&c[0]);
    assert_eq!(&ca[..3], &[1.0, -0.5, -1.0]);
    assert!(ca[3].is_nan());
    assert_eq!(vals(&c[1]), vec![0.25, 1.0]);
    if dev().supports_f16() {
        let h = b.to_dtype(DType::F16).unwrap();
        let c = clip_grad_value(&[&h], 0.5).unwrap();
        assert_eq!(c[0].dtype(), DType::F16);
        assert_eq!(vals(&c[0].to_dtype(DType::F32).unwrap()), vec![0.25, 0.5]);
    }
}

/// Adam's `1 - beta` factors are PyTorch's (computed in f64, rounded once): the first step
/// with lr 1 moves a parameter by exactly lr. `1 - 0.999` formed in f32 arithmetic was 1.3e-5
/// off, which moved it by 1.0000065.
#[test]
fn adam_first_step_moves_by_lr() {
    for amsgrad in [false, true] {
        let w = leaf(&[0.0, 5.0]);
        let mut opt = Adam::new(
            vec![w.clone()],
            AdamOptions {
                lr: 1.0,
                amsgrad,
                ..Default::default()
            },
        )
        .unwrap();
        let g = Tensor::from_slice(dev(), &[1.0f32, -3.0], &[2]).unwrap();
        opt.step_with(&[Some(&g)]).unwrap();
        let v = vals(&w);
        assert!(
            (v[0] + 1.0).abs() < 2e-7 && (v[1] - 6.0).abs() < 5e-7,
            "{v:?}"
        );
    }
}

/// Schedulers chain as PyTorch's: each step multiplies the current rate, so two schedulers on
/// one optimizer stack and a rate set between steps carries on; the first records the
/// initial rate (`initial_lr`) that later ones (LambdaLR) take as their base; LinearLR with
/// total_iters 0 holds its start factor; a step whose rate would be invalid changes nothing.
#[test]
fn lr_schedulers_chain_as_pytorch() {
    use wgtensor::optim::{LrScheduler, Schedule};
    let sgd = |lr: f64| {
        Sgd::new(
            vec![leaf(&[1.0])],
            SgdOptions {
                lr,
                ..Default::default()
            },
        )
        .unwrap()
    };
    let near = |a: f64, b: f64| (a - b).abs() < 1e-12 * b.abs().max(1.0);
    // LinearLR(0.5, 1, 2) then ExponentialLR(0.9), stepped in turn.
    let mut opt = sgd(0.1);
    let mut s1 = LrScheduler::new(
        &mut opt,
        Schedule::Linear {
            start_factor: 0.5,
            end_factor: 1.0,
            total_iters: 2,
        },
    )
    .unwrap();
    let mut s2 = LrScheduler::new(&mut opt, Schedule::Exponential { gamma: 0.9 }).unwrap();
    assert!(near(opt.lr(), 0.05));
    assert_eq!(s2.base_lrs(), &[0.1], "the initial rate is shared");
    for want in [0.0675, 0.081, 0.0729] {
        s1.step(&mut opt).unwrap();
        s2.step(&mut opt).unwrap();
        assert!(near(opt.lr(), want), "{} vs {want}", opt.lr());
    }
    // A rate set between steps carries on.
    let mut opt = sgd(1.0);
    let mut s = LrScheduler::new(&mut opt, Schedule::Exponential { gamma: 0.5 }).unwrap();
    s.step(&mut opt).unwrap();
    opt.set_lr(0.2).unwrap();
    s.step(&mut opt).unwrap();
    assert!(near(opt.lr(), 0.1));
    // LambdaLR reads the recorded initial rate, not the decayed one.
    let _ = LrScheduler::new(&mut opt, Schedule::Lambda(|e| 0.1 * (e + 1) as f64)).unwrap();
    assert!(near(opt.lr(), 0.1), "{}", opt.lr());
    // total_iters 0: start_factor for good.
    let mut opt = sgd(1.0);
    let mut s = LrScheduler::new(
        &mut opt,
        Schedule::Linear {
            start_factor: 0.25,
            end_factor: 1.0,
            total_iters: 0,
        },
    )
    .unwrap();
    for _ in 0..3 {
        assert!(near(opt.lr(), 0.25));
        s.step(&mut opt).unwrap();
    }
    // An invalid rate for the second group: nothing changes, the epoch included.
    let mut opt = sgd(1.0);
    opt.add_param_group(ParamGroup::new(vec![leaf(&[2.0])]))
        .unwrap();
    opt.set_group_lr(1, 0.5).unwrap();
    let mut s = LrScheduler::new(&mut opt, Schedule::Exponential { gamma: 1e200 }).unwrap();
    s.step(&mut opt).unwrap();
    let before = (opt.group_lr(0), opt.group_lr(1));
    let e = s.step(&mut opt).unwrap_err().to_string();
    assert!(e.contains("group 0") && e.contains("inf"), "{e}");
    assert_eq!(
        (opt.group_lr(0), opt.group_lr(1), s.epoch()),
        (before.0, before.1, 1)
    );
}
