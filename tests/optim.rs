//! Optimizers against an f64 transcription of PyTorch's update math over several steps (SGD
//! with momentum, dampening, Nesterov and weight decay; Adam, AdamW, AMSGrad, maximize), a
//! learning-rate change between steps, state saved and restored, clip_grad_norm, and errors.
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

use wgtensor::optim::{clip_grad_norm, Adam, AdamOptions, Sgd, SgdOptions};
use wgtensor::{DType, Device, Tensor};

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
        st.0[i] += (1.0 - b1) * (gi - st.0[i]);
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
        let p = Tensor::from_slice(dev(), &init, &[n]).unwrap();
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
            opt.step(&[Some(&g)]).unwrap();
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
        let p = Tensor::from_slice(dev(), &init, &[5, 10]).unwrap();
        let mut opt = Adam::new(vec![p.clone()], o).unwrap();
        let mut want: Vec<f64> = init.iter().map(|&x| x as f64).collect();
        let mut st = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
        for s in 0..8 {
            let gv = grad_values(n, s);
            let g = Tensor::from_slice(dev(), &gv, &[5, 10]).unwrap();
            opt.step(&[Some(&g)]).unwrap();
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
    let mk = |v: f32| Tensor::full(dev(), &[n], v as f64, DType::F32).unwrap();
    let (a, b) = (mk(1.0), mk(2.0));
    let o = AdamOptions {
        lr: 0.05,
        amsgrad: true,
        ..Default::default()
    };
    let mut opt = Adam::new(vec![a.clone(), b.clone()], o).unwrap();
    let g = Tensor::from_slice(dev(), &grad_values(n, 0), &[n]).unwrap();
    opt.step(&[Some(&g), None]).unwrap();
    assert_eq!(vals(&b), vec![2.0; n], "no gradient: untouched");
    // Copy the state (the optimizer updates its tensors in place).
    let saved: Vec<(String, Tensor)> = opt
        .state_tensors()
        .into_iter()
        .map(|(k, t)| (k, t.add_scalar(0.0).unwrap()))
        .collect();
    let steps = [opt.step_count(0).unwrap(), opt.step_count(1).unwrap()];
    assert_eq!(saved.len(), 3);
    let a2 = a.add_scalar(0.0).unwrap();
    opt.step(&[Some(&g), None]).unwrap();
    let mut fresh = Adam::new(vec![a2.clone(), b.clone()], o).unwrap();
    fresh.load_state_tensors(&saved, &steps).unwrap();
    fresh.step(&[Some(&g), None]).unwrap();
    assert_eq!(vals(&a2), vals(&a));
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
    sgd.step(&[Some(&g)]).unwrap();
    let st = sgd.state_tensors();
    assert_eq!(st[0].0, "0.momentum_buffer");
    assert_eq!(vals(&st[0].1), vals(&g));
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
}

#[test]
fn errors_name_the_optimizer() {
    let p = Tensor::zeros(dev(), &[4], DType::F32).unwrap();
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
            vec![p.reshape(&[2, 2]).unwrap().transpose(0, 1).unwrap()],
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
    let e = opt.step(&[Some(&wrong)]).unwrap_err();
    assert!(e.to_string().starts_with("adam:"), "{e}");
    let e = opt.step(&[]).unwrap_err();
    assert!(e.to_string().contains("1 parameters"), "{e}");
}
