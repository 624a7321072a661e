//! f64 references for layer norm, group norm and RMS norm (forward and backward), written from
//! PyTorch's definitions as naive loops over row-major data; no code shared with the crate.
//!
//! Every element belongs to one normalization set (`set_of`) and one affine channel
//! (`channel_of`): layer / RMS norm normalize each trailing slice of `normalized_shape` and
//! scale elementwise within it; group norm normalizes (sample, group) over its channels and
//! positions and scales per channel.

/// Where each element of a problem goes.
pub struct NormGeom {
    /// Normalization set of each element, and the number of sets.
    pub set_of: Vec<usize>,
    pub sets: usize,
    /// Weight / bias index of each element, and the number of weights.
    pub channel_of: Vec<usize>,
    pub channels: usize,
    /// RMS norm: no mean is subtracted.
    pub rms: bool,
}

/// layer_norm / rms_norm over the trailing `k` dims of `shape`.
pub fn trailing_geom(shape: &[usize], k: usize, rms: bool) -> NormGeom {
    let n: usize = shape.iter().product();
    let len: usize = shape[shape.len() - k..].iter().product();
    let sets = n.checked_div(len).unwrap_or(0);
    NormGeom {
        set_of: (0..n).map(|i| i / len.max(1)).collect(),
        sets,
        channel_of: (0..n).map(|i| i % len.max(1)).collect(),
        channels: len,
        rms,
    }
}

/// group_norm of `shape` = [N, C, *] in `groups` groups.
pub fn group_geom(shape: &[usize], groups: usize) -> NormGeom {
    let n: usize = shape.iter().product();
    let c = shape[1];
    let hw: usize = shape[2..].iter().product();
    let per = c / groups;
    let mut set_of = Vec::with_capacity(n);
    let mut channel_of = Vec::with_capacity(n);
    for s in 0..shape[0] {
        for ch in 0..c {
            for _ in 0..hw {
                set_of.push(s * groups + ch / per);
                channel_of.push(ch);
            }
        }
    }
    NormGeom {
        set_of,
        sets: shape[0] * groups,
        channel_of,
        channels: c,
        rms: false,
    }
}

/// The forward's values per element, and the quantities the tolerances need.
pub struct NormOut {
    pub y: Vec<f64>,
    /// The normalized value (x - mean) * rstd.
    pub xhat: Vec<f64>,
    /// The set's rstd, element count and largest |x|, per element.
    pub rstd: Vec<f64>,
    pub count: Vec<f64>,
    pub max_abs: Vec<f64>,
}

/// y = (x - mean) / sqrt(var + eps) * w + b (biased variance; mean = 0 and var = mean(x^2) for
/// RMS norm).
pub fn norm_forward(
    g: &NormGeom,
    x: &[f64],
    w: Option<&[f64]>,
    b: Option<&[f64]>,
    eps: f64,
) -> NormOut {
    let mut sum = vec![0.0; g.sets];
    let mut cnt = vec![0.0; g.sets];
    let mut mx = vec![0.0f64; g.sets];
    for (i, &v) in x.iter().enumerate() {
        let s = g.set_of[i];
        sum[s] += v;
        cnt[s] += 1.0;
        mx[s] = if v.is_nan() {
            f64::NAN
        } else {
            mx[s].max(v.abs())
        };
    }
    let mean: Vec<f64> = (0..g.sets)
        .map(|s| if g.rms { 0.0 } else { sum[s] / cnt[s] })
        .collect();
    let mut sq = vec![0.0; g.sets];
    for (i, &v) in x.iter().enumerate() {
        let s = g.set_of[i];
        sq[s] += (v - mean[s]) * (v - mean[s]);
    }
    let rstd: Vec<f64> = (0..g.sets)
        .map(|s| 1.0 / (sq[s] / cnt[s] + eps).sqrt())
        .collect();
    let mut out = NormOut {
        y: Vec::new(),
        xhat: Vec::new(),
        rstd: Vec::new(),
        count: Vec::new(),
        max_abs: Vec::new(),
    };
    for (i, &v) in x.iter().enumerate() {
        let s = g.set_of[i];
        let c = g.channel_of[i];
        let xh = (v - mean[s]) * rstd[s];
        out.y
            .push(xh * w.map_or(1.0, |w| w[c]) + b.map_or(0.0, |b| b[c]));
        out.xhat.push(xh);
        out.rstd.push(rstd[s]);
        out.count.push(cnt[s]);
        out.max_abs.push(mx[s]);
    }
    out
}

/// Gradients of sum(y * dy): (dx, dweight, dbias), from the analytic formulas
/// dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)) with gw = dy * w (no mean(gw) term for
/// RMS norm), dweight[c] = sum over channel c of dy * xhat, dbias[c] = sum of dy.
pub fn norm_backward(
    g: &NormGeom,
    f: &NormOut,
    dy: &[f64],
    w: Option<&[f64]>,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut m1 = vec![0.0; g.sets];
    let mut m2 = vec![0.0; g.sets];
    let mut dw = vec![0.0; g.channels];
    let mut db = vec![0.0; g.channels];
    for (i, &d) in dy.iter().enumerate() {
        let s = g.set_of[i];
        let c = g.channel_of[i];
        let gw = d * w.map_or(1.0, |w| w[c]);
        m1[s] += gw / f.count[i];
        m2[s] += gw * f.xhat[i] / f.count[i];
        dw[c] += d * f.xhat[i];
        db[c] += d;
    }
    let dx = (0..dy.len())
        .map(|i| {
            let s = g.set_of[i];
            let gw = dy[i] * w.map_or(1.0, |w| w[g.channel_of[i]]);
            let mg = if g.rms { 0.0 } else { m1[s] };
            f.rstd[i] * (gw - mg - f.xhat[i] * m2[s])
        })
        .collect();
    (dx, dw, db)
}
