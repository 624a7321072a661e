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
