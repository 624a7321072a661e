//! f64 reference for LSTM/GRU sequences (PyTorch semantics), plain loops.

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
    let g = gates(lstm);
    let mut hn = vec![0.0; b * hs];
    let mut cn = vec![0.0; b * hs];
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
            gx[row] = ax;
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
                cn[o] = fg * c[o] + ig * gg;
                hn[o] = og * cn[o].tanh();
            } else {
                let r = sigmoid(gx[j] + gh[j]);
                let z = sigmoid(gx[hs + j] + gh[hs + j]);
                let n = (gx[2 * hs + j] + r * gh[2 * hs + j]).tanh();
                hn[o] = (1.0 - z) * n + z * h[o];
            }
        }
    }
    (hn, cn)
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
                let (hn, cn) = cell(lstm, &weights[idx], xs, &h, &c, b, in_size, hs);
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

/// Pre-activations of one batch row: (W_ih x + b_ih, W_hh h + b_hh), each [G*H].
fn pre(
    w: &RefWeights,
    g: usize,
    x: &[f64],
    h: &[f64],
    i: usize,
    hs: usize,
) -> (Vec<f64>, Vec<f64>) {
    let mut gx = w.b_ih.clone();
    let mut gh = w.b_hh.clone();
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(p, q)| p * q).sum::<f64>();
    for row in 0..g * hs {
        gx[row] += dot(&w.w_ih[row * i..(row + 1) * i], x);
        gh[row] += dot(&w.w_hh[row * hs..(row + 1) * hs], h);
    }
    (gx, gh)
}

/// BPTT by plain loops. dy [T, B, D*H]; dh_n / dc_n [L*D, B, H] (zeros when None). Recomputes
/// the forward, keeping every step's previous state, then walks each direction backwards.
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
    let g = gates(lstm);
    let sb = b * hs;
    let slice = |s: Option<&[f64]>, idx: usize| {
        s.map_or(vec![0.0; sb], |v| v[idx * sb..(idx + 1) * sb].to_vec())
    };
    // Forward, keeping each layer's input and, per (layer, dir, time), (h_prev, c_prev).
    let mut inputs = vec![x.to_vec()];
    let mut prevs: Vec<Vec<(Vec<f64>, Vec<f64>)>> = Vec::new();
    let mut in_size = i;
    for l in 0..layers {
        let input = inputs[l].clone();
        let mut out = vec![0.0; t * b * dirs * hs];
        for d in 0..dirs {
            let idx = l * dirs + d;
            let (mut h, mut c) = (slice(h0, idx), slice(c0, idx));
            let mut per_t = vec![(Vec::new(), Vec::new()); t];
            let steps: Vec<usize> = if d == 0 {
                (0..t).collect()
            } else {
                (0..t).rev().collect()
            };
            for s in steps {
                per_t[s] = (h.clone(), c.clone());
                let xs = &input[s * b * in_size..(s + 1) * b * in_size];
                let (hn, cn) = cell(lstm, &weights[idx], xs, &h, &c, b, in_size, hs);
                h = hn;
                c = cn;
                for bb in 0..b {
                    for j in 0..hs {
                        out[(s * b + bb) * dirs * hs + d * hs + j] = h[bb * hs + j];
                    }
                }
            }
            prevs.push(per_t);
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
                let (hp, cp) = &prevs[idx][s];
                let mut ndh = vec![0.0; sb];
                let mut ndc = vec![0.0; sb];
                for bb in 0..b {
                    let xr = &input[(s * b + bb) * in_size..(s * b + bb + 1) * in_size];
                    let hr = &hp[bb * hs..(bb + 1) * hs];
                    let (gx, gh) = pre(w, g, xr, hr, in_size, hs);
                    let mut dax = vec![0.0; g * hs];
                    let mut dah = vec![0.0; g * hs];
                    for j in 0..hs {
                        let o = bb * hs + j;
                        let dh = grad[(s * b + bb) * dirs * hs + d * hs + j] + dh_c[o];
                        if lstm {
                            let p = |q: usize| gx[q * hs + j] + gh[q * hs + j];
                            let (ig, fg, gg, og) =
                                (sigmoid(p(0)), sigmoid(p(1)), p(2).tanh(), sigmoid(p(3)));
                            let c = fg * cp[o] + ig * gg;
                            let tc = c.tanh();
                            let dc = dc_c[o] + dh * og * (1.0 - tc * tc);
                            ndc[o] = dc * fg;
                            let a = [
                                dc * gg * ig * (1.0 - ig),
                                dc * cp[o] * fg * (1.0 - fg),
                                dc * ig * (1.0 - gg * gg),
                                dh * tc * og * (1.0 - og),
                            ];
                            for q in 0..4 {
                                dax[q * hs + j] = a[q];
                                dah[q * hs + j] = a[q];
                            }
                        } else {
                            let r = sigmoid(gx[j] + gh[j]);
                            let z = sigmoid(gx[hs + j] + gh[hs + j]);
                            let hn = gh[2 * hs + j];
                            let n = (gx[2 * hs + j] + r * hn).tanh();
                            let dan = dh * (1.0 - z) * (1.0 - n * n);
                            let dar = dan * hn * r * (1.0 - r);
                            let daz = dh * (hp[o] - n) * z * (1.0 - z);
                            dax[j] = dar;
                            dax[hs + j] = daz;
                            dax[2 * hs + j] = dan;
                            dah[j] = dar;
                            dah[hs + j] = daz;
                            dah[2 * hs + j] = dan * r;
                            ndh[o] += dh * z;
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
            dh0[idx * sb..(idx + 1) * sb].copy_from_slice(&dh_c);
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
