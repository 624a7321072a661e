// Negative log-likelihood with class-index targets (PyTorch's nll_loss), the core of
// cross_entropy. Log-probabilities are packed [N, C, D] (D: the product of the trailing dims);
// targets are i32 [N, D]. `nll` writes one loss per (n, d), -w[t] * logp[n, t, d], plus the
// weight it counted (the mean's denominator) and whether the target was counted; a target
// equal to IGNORE counts nothing, one outside [0, C) gives NaN (never an out-of-bounds read).
// `nll_backward` writes dlogp: -w[t] * g[n, d] at the target class, 0 elsewhere.

struct Params {
    numel: u32,
    classes: u32,
    inner: u32,
    ignore: i32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<T>;
@group(0) @binding(2) var<storage, read> labels: array<i32>;
@group(0) @binding(3) var<storage, read> weight: array<T>;
@group(0) @binding(4) var<storage, read_write> out: array<T>;
// nll: [counted weight per sample (M), counted flag per sample (M)].
@group(0) @binding(5) var<storage, read_write> aux: array<f32>;

override WG: u32;
override HAS_WEIGHT: bool = false;

fn class_weight(t: u32) -> f32 {
    if (HAS_WEIGHT) {
        return f32(weight[t]);
    }
    return 1.0;
}

@compute @workgroup_size(WG)
fn nll(@builtin(workgroup_id) wid: vec3<u32>,
       @builtin(num_workgroups) nwg: vec3<u32>,
       @builtin(local_invocation_index) lid: u32) {
    let m = (wid.x + wid.y * nwg.x) * WG + lid;
    if (m >= p.numel) {
        return;
    }
    let t = labels[m];
    var loss = 0.0;
    var w = 0.0;
    var counted = 0.0;
    if (t != p.ignore) {
        counted = 1.0;
        if (t < 0 || u32(t) >= p.classes) {
            // NaN from bits at run time (WGSL has no NaN literal).
            loss = bitcast<f32>(0x7fc00000u + p.numel * 0u);
            w = loss;
        } else {
            let n = m / p.inner;
            let d = m % p.inner;
            w = class_weight(u32(t));
            loss = -w * f32(src[(n * p.classes + u32(t)) * p.inner + d]);
        }
    }
    out[m] = T(loss);
    aux[m] = w;
    aux[p.numel + m] = counted;
}

@compute @workgroup_size(WG)
fn nll_backward(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let e = (wid.x + wid.y * nwg.x) * WG + lid;
    if (e >= p.numel) {
        return;
    }
    let d = e % p.inner;
    let c = (e / p.inner) % p.classes;
    let n = e / (p.inner * p.classes);
    let m = n * p.inner + d;
    let t = labels[m];
    var g = 0.0;
    if (t != p.ignore && t == i32(c)) {
        g = -class_weight(c) * f32(src[m]);
    }
    out[e] = T(g);
}
