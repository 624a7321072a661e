//! Optimizers and schedulers against PyTorch: update math (updates.rs), state and atomic
//! refusals (state.rs), errors (errors.rs), gradient clipping (clip.rs), schedulers
//! (schedule.rs). Shared here: the device and the f64 references of PyTorch's update math.
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

mod clip;
mod errors;
mod schedule;
mod state;
mod updates;

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
