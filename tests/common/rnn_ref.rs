//! f64 reference for LSTM/GRU sequences (PyTorch semantics), plain loops.
//!
//! The `*_with` variants take a [`Store`] hook called on every intermediate the GPU kernels
//! store in the tensor dtype (src/ops/rnn: the input projection xp, each step's h and c, the
//! saved gates; in BPTT dA, the carries and the GEMM / column-sum outputs), following the
//! kernels' data flow (BPTT uses the forward's stored values). [`Exact`] leaves them alone: the
//! plain functions are the exact f64 reference. A hook that rounds there models the f16 kernels
//! (tests/conformance/rnn.rs).

/// Called on each value the GPU stores in the tensor dtype; returns the value as stored.
pub trait Store {
    fn store(&mut self, v: f64) -> f64;
}

/// The exact reference: stores keep every value.
pub struct Exact;

impl Store for Exact {
    fn store(&mut self, v: f64) -> f64 {
        v
    }
}

/// Gate count: LSTM 4 (i, f, g, o), GRU 3 (r, z, n).
pub fn gates(lstm: bool) -> usize {
    if lstm {
        4
    } else {
        3
    }
}

/// Weights of one (layer, direction) as f64 row-major: w_ih [G*H, I], w_hh [G*H, H], biases [G*H].
#[derive(Debug, Clone)]
pub struct RefWeights {
    pub w_ih: Vec<f64>,
    pub w_hh: Vec<f64>,
    pub b_ih: Vec<f64>,
    pub b_hh: Vec<f64>,
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// One step for all batch rows. x [B, I], h/c [B, H]; returns (h', c').
#[allow(clippy::too_many_arguments)]
pub fn cell(
    lstm: bool,
    w: &RefWeights,
    x: &[f64],
    h: &[f64],
    c: &[f64],
    b: usize,
    i: usize,
    hs: usize,
) -> (Vec<f64>, Vec<f64>) {
    let (hn, cn, _) = step(lstm, w, x, h, c, b, i, hs, &mut Exact);
    (hn, cn)
}

/// [`cell`] with the GPU's stores: xp = x W_ih^T + b_ih (the input-projection GEMM's output),
/// then h' and c' (the state sequences). Also returns the stored xp [B, G*H].
#[allow(clippy::too_many_arguments)]
fn step(
    lstm: bool,
    w: &RefWeights,
    x: &[f64],
    h: &[f64],
    c: &[f64],
    b: usize,
    i: usize,
    hs: usize,
    st: &mut dyn Store,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let g = gates(lstm);
    let mut hn = vec![0.0; b * hs];
    let mut cn = vec![0.0; b * hs];
    let mut xp = vec![0.0; b * g * hs];
    for bb in 0..b {
        // gx[row] = W_ih x + b_ih, gh[row] = W_hh h + b_hh for every gate row.
        let mut gx = vec![0.0; g * hs];
        let mut gh = vec![0.0; g * hs];
        for row in 0..g * hs {
            let mut ax = w.b_ih[row];
            for k in 0..i {
                ax += w.w_ih[row * i + k] * x[bb * i + k];
            }
            let mut ah = w.b_hh[row];
            for k in 0..hs {
                ah += w.w_hh[row * hs + k] * h[bb * hs + k];
            }
            gx[row] = st.store(ax);
            gh[row] = ah;
        }
        for j in 0..hs {
            let o = bb * hs + j;
            if lstm {
                let pre = |q: usize| gx[q * hs + j] + gh[q * hs + j];
                let (ig, fg, gg, og) = (
                    sigmoid(pre(0)),
                    sigmoid(pre(1)),
                    pre(2).tanh(),
                    sigmoid(pre(3)),
                );
                let cv = fg * c[o] + ig * gg;
                // h' uses c' before it is stored.
                hn[o] = st.store(og * cv.tanh());
                cn[o] = st.store(cv);
            } else {
                let r = sigmoid(gx[j] + gh[j]);
                let z = sigmoid(gx[hs + j] + gh[hs + j]);
                let n = (gx[2 * hs + j] + r * gh[2 * hs + j]).tanh();
                hn[o] = st.store((1.0 - z) * n + z * h[o]);
            }
        }
        xp[bb * g * hs..(bb + 1) * g * hs].copy_from_slice(&gx);
    }
    (hn, cn, xp)
}

/// Whole multi-layer, optionally bidirectional sequence. x [T, B, I]; h0/c0 [L*D, B, H]
/// (zeros when None). weights indexed layer * D + dir. Returns (output [T, B, D*H], h_n, c_n).
#[allow(clippy::too_many_arguments)]
pub fn sequence(
    lstm: bool,
    weights: &[RefWeights],
    layers: usize,
    dirs: usize,
    x: &[f64],
    t: usize,
    b: usize,
    i: usize,
    hs: usize,
    h0: Option<&[f64]>,
    c0: Option<&[f64]>,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    sequence_with(
        lstm, weights, layers, dirs, x, t, b, i, hs, h0, c0, &mut Exact,
    )
}

/// [`sequence`] with the GPU's stores (see [`Store`]).
#[allow(clippy::too_many_arguments)]
pub fn sequence_with(
    lstm: bool,
    weights: &[RefWeights],
    layers: usize,
    dirs: usize,
    x: &[f64],
    t: usize,
    b: usize,
    i: usize,
    hs: usize,
    h0: Option<&[f64]>,
    c0: Option<&[f64]>,
    st: &mut dyn Store,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut input = x.to_vec();
    let mut in_size = i;
    let mut h_n = vec![0.0; layers * dirs * b * hs];
    let mut c_n = vec![0.0; layers * dirs * b * hs];
    for l in 0..layers {
        let mut out = vec![0.0; t * b * dirs * hs];
        for d in 0..dirs {
            let idx = l * dirs + d;
            let state = |s: Option<&[f64]>| {
                s.map_or(vec![0.0; b * hs], |v| {
                    v[idx * b * hs..(idx + 1) * b * hs].to_vec()
                })
            };
            let (mut h, mut c) = (state(h0), state(c0));
            let steps: Vec<usize> = if d == 0 {
                (0..t).collect()
            } else {
                (0..t).rev().collect()
            };
            for s in steps {
                let xs = &input[s * b * in_size..(s + 1) * b * in_size];
                let (hn, cn, _) = step(lstm, &weights[idx], xs, &h, &c, b, in_size, hs, st);
                h = hn;
                c = cn;
                for bb in 0..b {
                    for j in 0..hs {
                        out[(s * b + bb) * dirs * hs + d * hs + j] = h[bb * hs + j];
                    }
                }
            }
            h_n[idx * b * hs..(idx + 1) * b * hs].copy_from_slice(&h);
            c_n[idx * b * hs..(idx + 1) * b * hs].copy_from_slice(&c);
        }
        input = out;
        in_size = dirs * hs;
    }
    (input, h_n, c_n)
}

/// Gradients of a whole sequence: dx [T, B, I], dh0/dc0 [L*D, B, H], per-(layer, dir) weight
/// gradients in the [`RefWeights`] layout.
#[derive(Debug, Clone)]
pub struct RefGrads {
    pub dx: Vec<f64>,
    pub dh0: Vec<f64>,
    pub dc0: Vec<f64>,
    pub dw: Vec<RefWeights>,
}

/// BPTT by plain loops. dy [T, B, D*H]; dh_n / dc_n [L*D, B, H] (zeros when None). Runs the
/// forward, keeping every step's previous state, input projection and new cell state, then
/// walks each direction backwards.
#[allow(clippy::too_many_arguments)]
pub fn sequence_backward(
    lstm: bool,
    weights: &[RefWeights],
    layers: usize,
    dirs: usize,
    x: &[f64],
    t: usize,
    b: usize,
    i: usize,
    hs: usize,
    h0: Option<&[f64]>,
    c0: Option<&[f64]>,
    dy: &[f64],
    dh_n: Option<&[f64]>,
    dc_n: Option<&[f64]>,
) -> RefGrads {
    sequence_backward_with(
        lstm, weights, layers, dirs, x, t, b, i, hs, h0, c0, dy, dh_n, dc_n, &mut Exact,
    )
}

/// What the forward keeps of one step for BPTT (all as stored): h_{t-1}, c_{t-1}, xp, c_t.
#[derive(Clone, Default)]
struct Saved {
    h: Vec<f64>,
    c: Vec<f64>,
    xp: Vec<f64>,
    c_new: Vec<f64>,
}

/// [`sequence_backward`] with the GPU's stores (see [`Store`]): the forward's (via [`step`]);
/// the saved gate activations (LSTM i, f, g, o; GRU r, z, n, W_hn h + b_hn); per step the
/// carries (LSTM dc * f, GRU dh * z) and the gate gradients dA_h (and a GRU's dA_x, equal to
/// dA_h except in the n block); per direction the weight and bias gradients and dx (with two
/// directions the first one's dx is stored, then the second adds to it); dh0.
#[allow(clippy::too_many_arguments)]
pub fn sequence_backward_with(
    lstm: bool,
    weights: &[RefWeights],
    layers: usize,
    dirs: usize,
    x: &[f64],
    t: usize,
    b: usize,
    i: usize,
    hs: usize,
    h0: Option<&[f64]>,
    c0: Option<&[f64]>,
    dy: &[f64],
    dh_n: Option<&[f64]>,
    dc_n: Option<&[f64]>,
    st: &mut dyn Store,
) -> RefGrads {
    let g = gates(lstm);
    let sb = b * hs;
    let slice = |s: Option<&[f64]>, idx: usize| {
        s.map_or(vec![0.0; sb], |v| v[idx * sb..(idx + 1) * sb].to_vec())
    };
    // Forward, keeping each layer's input and, per (layer, dir, time), what BPTT reads.
    let mut inputs = vec![x.to_vec()];
    let mut saved: Vec<Vec<Saved>> = Vec::new();
    let mut in_size = i;
    for l in 0..layers {
        let input = inputs[l].clone();
        let mut out = vec![0.0; t * b * dirs * hs];
        for d in 0..dirs {
            let idx = l * dirs + d;
            let (mut h, mut c) = (slice(h0, idx), slice(c0, idx));
            let mut per_t = vec![Saved::default(); t];
            let steps: Vec<usize> = if d == 0 {
                (0..t).collect()
            } else {
                (0..t).rev().collect()
            };
            for s in steps {
                let xs = &input[s * b * in_size..(s + 1) * b * in_size];
                let (hn, cn, xp) = step(lstm, &weights[idx], xs, &h, &c, b, in_size, hs, st);
                per_t[s] = Saved {
                    h,
                    c,
                    xp,
                    c_new: cn.clone(),
                };
                h = hn;
                c = cn;
                for bb in 0..b {
                    for j in 0..hs {
                        out[(s * b + bb) * dirs * hs + d * hs + j] = h[bb * hs + j];
                    }
                }
            }
            saved.push(per_t);
        }
        inputs.push(out);
        in_size = dirs * hs;
    }
    let mut dh0 = vec![0.0; layers * dirs * sb];
    let mut dc0 = vec![0.0; layers * dirs * sb];
    let mut dw: Vec<RefWeights> = Vec::new();
    let mut grad = dy.to_vec();
    for l in (0..layers).rev() {
        let in_size = if l == 0 { i } else { dirs * hs };
        let input = &inputs[l];
        let mut dx = vec![0.0; t * b * in_size];
        let mut layer_dw = Vec::new();
        for d in 0..dirs {
            let idx = l * dirs + d;
            let w = &weights[idx];
            let mut gw = RefWeights {
                w_ih: vec![0.0; w.w_ih.len()],
                w_hh: vec![0.0; w.w_hh.len()],
                b_ih: vec![0.0; w.b_ih.len()],
                b_hh: vec![0.0; w.b_hh.len()],
            };
            let (mut dh_c, mut dc_c) = (slice(dh_n, idx), slice(dc_n, idx));
            let steps: Vec<usize> = if d == 0 {
                (0..t).rev().collect()
            } else {
                (0..t).collect()
            };
            for s in steps {
                let sv = &saved[idx][s];
                let (hp, cp) = (&sv.h, &sv.c);
                let mut ndh = vec![0.0; sb];
                let mut ndc = vec![0.0; sb];
                for bb in 0..b {
                    let xr = &input[(s * b + bb) * in_size..(s * b + bb + 1) * in_size];
                    let hr = &hp[bb * hs..(bb + 1) * hs];
                    let gx = &sv.xp[bb * g * hs..(bb + 1) * g * hs];
                    // W_hh h + b_hh, in registers on the GPU.
                    let gh: Vec<f64> = (0..g * hs)
                        .map(|row| {
                            w.b_hh[row] + (0..hs).map(|k| w.w_hh[row * hs + k] * hr[k]).sum::<f64>()
                        })
                        .collect();
                    let mut dax = vec![0.0; g * hs];
                    let mut dah = vec![0.0; g * hs];
                    for j in 0..hs {
                        let o = bb * hs + j;
                        let dh = grad[(s * b + bb) * dirs * hs + d * hs + j] + dh_c[o];
                        if lstm {
                            let p = |q: usize| gx[q * hs + j] + gh[q * hs + j];
                            let ig = st.store(sigmoid(p(0)));
                            let fg = st.store(sigmoid(p(1)));
                            let gg = st.store(p(2).tanh());
                            let og = st.store(sigmoid(p(3)));
                            let tc = sv.c_new[o].tanh();
                            let dc = dc_c[o] + dh * og * (1.0 - tc * tc);
                            ndc[o] = st.store(dc * fg);
                            let a = [
                                dc * gg * ig * (1.0 - ig),
                                dc * cp[o] * fg * (1.0 - fg),
                                dc * ig * (1.0 - gg * gg),
                                dh * tc * og * (1.0 - og),
                            ];
                            for q in 0..4 {
                                let v = st.store(a[q]);
                                dax[q * hs + j] = v;
                                dah[q * hs + j] = v;
                            }
                        } else {
                            let rf = sigmoid(gx[j] + gh[j]);
                            let zf = sigmoid(gx[hs + j] + gh[hs + j]);
                            let hnf = gh[2 * hs + j];
                            let nf = (gx[2 * hs + j] + rf * hnf).tanh();
                            let (r, z) = (st.store(rf), st.store(zf));
                            let (n, hn) = (st.store(nf), st.store(hnf));
                            let dan = dh * (1.0 - z) * (1.0 - n * n);
                            let dar = st.store(dan * hn * r * (1.0 - r));
                            let daz = st.store(dh * (hp[o] - n) * z * (1.0 - z));
                            dax[j] = dar;
                            dax[hs + j] = daz;
                            dax[2 * hs + j] = st.store(dan);
                            dah[j] = dar;
                            dah[hs + j] = daz;
                            dah[2 * hs + j] = st.store(dan * r);
                            ndh[o] += st.store(dh * z);
                        }
                    }
                    for row in 0..g * hs {
                        gw.b_ih[row] += dax[row];
                        gw.b_hh[row] += dah[row];
                        for k in 0..in_size {
                            gw.w_ih[row * in_size + k] += dax[row] * xr[k];
                            dx[(s * b + bb) * in_size + k] += dax[row] * w.w_ih[row * in_size + k];
                        }
                        for k in 0..hs {
                            gw.w_hh[row * hs + k] += dah[row] * hr[k];
                            ndh[bb * hs + k] += dah[row] * w.w_hh[row * hs + k];
                        }
                    }
                }
                dh_c = ndh;
                dc_c = ndc;
            }
            for v in [
                &mut gw.w_ih,
                &mut gw.w_hh,
                &mut gw.b_ih,
                &mut gw.b_hh,
                &mut dx,
            ]
            .into_iter()
            .flatten()
            {
                *v = st.store(*v);
            }
            for (o, v) in dh_c.iter().enumerate() {
                dh0[idx * sb + o] = st.store(*v);
            }
            dc0[idx * sb..(idx + 1) * sb].copy_from_slice(&dc_c);
            layer_dw.push(gw);
        }
        // Layers are visited last to first; keep dw indexed layer * D + dir.
        dw.extend(layer_dw);
        grad = dx;
    }
    // dw was filled last layer first: reorder to layer * D + dir.
    let mut ordered = Vec::with_capacity(dw.len());
    for l in 0..layers {
        let from = (layers - 1 - l) * dirs;
        ordered.extend(dw[from..from + dirs].iter().cloned());
    }
    RefGrads {
        dx: grad,
        dh0,
        dc0,
        dw: ordered,
    }
}
