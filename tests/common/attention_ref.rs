//! f64 reference of scaled-dot-product attention (forward and backward), written from
//! PyTorch's math backend as naive loops over row-major data; no code shared with the crate.
//! Operands are already broadcast: q `[n, l, e]`, k `[nk, s, e]`, v `[nk, s, ev]` with
//! `n = b * heads`, `nk = b * kv_heads` (query head h reads key/value head
//! `h / (heads / kv_heads)`); the mask is additive `[n, l, s]` (`-inf` excludes); `drop` holds
//! each weight's dropout factor `[n, l, s]` (0 or 1 / (1 - p)).
// Index loops mirror the formulas' subscripts.
#![allow(clippy::needless_range_loop)]

/// One problem's geometry and options.
#[derive(Clone, Debug)]
pub struct AttnGeom {
    pub n: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub l: usize,
    pub s: usize,
    pub e: usize,
    pub ev: usize,
    pub scale: f64,
    pub causal: bool,
}

impl AttnGeom {
    /// The key/value batch that query batch `b` reads.
    pub fn kv_of(&self, b: usize) -> usize {
        (b / self.heads) * self.kv_heads + (b % self.heads) / (self.heads / self.kv_heads)
    }
}

/// Outputs and gradients of one problem, with magnitudes for tolerances.
pub struct AttnRef {
    pub out: Vec<f64>,
    /// Softmax weights `[n, l, s]` (after masking, before dropout).
    pub p: Vec<f64>,
    pub dq: Vec<f64>,
    pub dk: Vec<f64>,
    pub dv: Vec<f64>,
    /// The same sums over absolute values of their terms (`sum p |v|`, `scale sum |dS| |k|`,
    /// ...): what each result's rounding error scales with.
    pub out_mag: Vec<f64>,
    pub dq_mag: Vec<f64>,
    pub dk_mag: Vec<f64>,
    pub dv_mag: Vec<f64>,
}

fn scores(
    g: &AttnGeom,
    q: &[f64],
    k: &[f64],
    mask: Option<&[f64]>,
    b: usize,
    i: usize,
) -> Vec<f64> {
    let kb = g.kv_of(b);
    (0..g.s)
        .map(|j| {
            if g.causal && j > i {
                return f64::NEG_INFINITY;
            }
            let dot: f64 = (0..g.e)
                .map(|x| q[(b * g.l + i) * g.e + x] * k[(kb * g.s + j) * g.e + x])
                .sum();
            let add = mask.map_or(0.0, |m| m[(b * g.l + i) * g.s + j]);
            if g.e == 0 {
                add
            } else {
                dot * g.scale + add
            }
        })
        .collect()
}

/// Forward and backward (of `sum(out * dout)`).
pub fn attention(
    g: &AttnGeom,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    mask: Option<&[f64]>,
    drop: Option<&[f64]>,
    dout: &[f64],
) -> AttnRef {
    let nk = g.n / g.heads * g.kv_heads;
    let mut r = AttnRef {
        out: vec![0.0; g.n * g.l * g.ev],
        p: vec![0.0; g.n * g.l * g.s],
        dq: vec![0.0; g.n * g.l * g.e],
        dk: vec![0.0; nk * g.s * g.e],
        dv: vec![0.0; nk * g.s * g.ev],
        out_mag: vec![0.0; g.n * g.l * g.ev],
        dq_mag: vec![0.0; g.n * g.l * g.e],
        dk_mag: vec![0.0; nk * g.s * g.e],
        dv_mag: vec![0.0; nk * g.s * g.ev],
    };
    for b in 0..g.n {
        let kb = g.kv_of(b);
        for i in 0..g.l {
            let sc = scores(g, q, k, mask, b, i);
            let m = sc.iter().cloned().fold(f64::NEG_INFINITY, |a, x| {
                if a.is_nan() || x.is_nan() {
                    f64::NAN
                } else {
                    a.max(x)
                }
            });
            let p: Vec<f64> = if m == f64::NEG_INFINITY {
                vec![0.0; g.s]
            } else {
                let ex: Vec<f64> = sc.iter().map(|&x| (x - m).exp()).collect();
                let sum: f64 = ex.iter().sum();
                ex.iter().map(|x| x / sum).collect()
            };
            let z = |j: usize| drop.map_or(1.0, |d| d[(b * g.l + i) * g.s + j]);
            let row = (b * g.l + i) * g.s;
            r.p[row..row + g.s].copy_from_slice(&p);
            for c in 0..g.ev {
                r.out[(b * g.l + i) * g.ev + c] = (0..g.s)
                    .map(|j| p[j] * z(j) * v[(kb * g.s + j) * g.ev + c])
                    .sum();
                r.out_mag[(b * g.l + i) * g.ev + c] = (0..g.s)
                    .map(|j| (p[j] * z(j) * v[(kb * g.s + j) * g.ev + c]).abs())
                    .sum();
            }
            // Backward of the row.
            let d_o = &dout[(b * g.l + i) * g.ev..(b * g.l + i + 1) * g.ev];
            let dp: Vec<f64> = (0..g.s)
                .map(|j| {
                    z(j) * (0..g.ev)
                        .map(|c| d_o[c] * v[(kb * g.s + j) * g.ev + c])
                        .sum::<f64>()
                })
                .collect();
            let dd: f64 = (0..g.s).map(|j| p[j] * dp[j]).sum();
            let dd_mag: f64 = (0..g.ev)
                .map(|c| (d_o[c] * r.out_mag[(b * g.l + i) * g.ev + c]).abs())
                .sum();
            for j in 0..g.s {
                let ds = p[j] * (dp[j] - dd);
                let dp_mag = z(j)
                    * (0..g.ev)
                        .map(|c| (d_o[c] * v[(kb * g.s + j) * g.ev + c]).abs())
                        .sum::<f64>();
                let ds_mag = p[j] * (dp_mag + dd_mag);
                let sc = if g.e == 0 { 0.0 } else { g.scale };
                for x in 0..g.e {
                    let (kx, qx) = (k[(kb * g.s + j) * g.e + x], q[(b * g.l + i) * g.e + x]);
                    r.dq[(b * g.l + i) * g.e + x] += sc * ds * kx;
                    r.dk[(kb * g.s + j) * g.e + x] += sc * ds * qx;
                    r.dq_mag[(b * g.l + i) * g.e + x] += (sc * ds_mag * kx).abs();
                    r.dk_mag[(kb * g.s + j) * g.e + x] += (sc * ds_mag * qx).abs();
                }
                for c in 0..g.ev {
                    r.dv[(kb * g.s + j) * g.ev + c] += p[j] * z(j) * d_o[c];
                    r.dv_mag[(kb * g.s + j) * g.ev + c] += (p[j] * z(j) * d_o[c]).abs();
                }
            }
        }
    }
    r
}
