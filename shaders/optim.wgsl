// Fused optimizer steps: one dispatch updates one parameter in place (param, grad and its
// state buffers), with PyTorch's update math (torch.optim.SGD / Adam / AdamW, single-tensor
// implementation), computed in f32. The host folds the step-dependent scalars (Adam's bias
// corrections) in f64.

struct Params {
    numel: u32,
    // Bit flags: FLAG_* below.
    flags: u32,
    lr: f32,
    weight_decay: f32,
    // SGD: momentum, dampening. Adam: beta1, beta2.
    c0: f32,
    c1: f32,
    // Adam: eps, lr / (1 - beta1^t), sqrt(1 - beta2^t).
    eps: f32,
    step_size: f32,
    bc2_sqrt: f32,
    // 1 - c0, 1 - c1 and AdamW's 1 - lr * weight_decay, computed in f64 by the host and
    // rounded once, as PyTorch passes them (1 - 0.999 in f32 arithmetic is 1.3e-5 off).
    one_minus_c0: f32,
    one_minus_c1: f32,
    decay: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> param: array<T>;
@group(0) @binding(2) var<storage, read> grad: array<T>;
@group(0) @binding(3) var<storage, read_write> s1: array<T>;
@group(0) @binding(4) var<storage, read_write> s2: array<T>;
@group(0) @binding(5) var<storage, read_write> s3: array<T>;

override WG: u32;

// FLAG_* and OPT_* are emitted by the runtime from OPTIM_DEFS in src/optim/kernel.rs.
override KIND: u32 = 0u;

fn has(flag: u32) -> bool {
    return (p.flags & flag) != 0u;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= p.numel) {
        return;
    }
    var w = f32(param[i]);
    var g = f32(grad[i]);
    if (has(FLAG_MAXIMIZE)) {
        g = -g;
    }
    if (KIND == OPT_SGD) {
        if (p.weight_decay != 0.0) {
            g = g + p.weight_decay * w;
        }
        if (has(FLAG_MOMENTUM)) {
            var buf = g;
            if (!has(FLAG_FIRST)) {
                buf = p.c0 * f32(s1[i]) + p.one_minus_c1 * g;
            }
            s1[i] = T(buf);
            if (has(FLAG_NESTEROV)) {
                g = g + p.c0 * buf;
            } else {
                g = buf;
            }
        }
        param[i] = T(w - p.lr * g);
        return;
    }
    // Adam / AdamW.
    if (has(FLAG_DECOUPLED)) {
        w = w * p.decay;
    } else if (p.weight_decay != 0.0) {
        g = g + p.weight_decay * w;
    }
    // m.lerp_(g, 1 - beta1) and v * beta2 + (1 - beta2) * g * g, as PyTorch writes them.
    // ATen's lerp takes the form by the weight: from `end` back for weights >= 0.5, so
    // beta1 = 0 gives m = g exactly (m_old + (g - m_old) cancels when |g| << |m_old|).
    let m_old = f32(s1[i]);
    var m = m_old + p.one_minus_c0 * (g - m_old);
    if (p.one_minus_c0 >= 0.5) {
        m = g - (g - m_old) * (1.0 - p.one_minus_c0);
    }
    let v = p.c1 * f32(s2[i]) + p.one_minus_c1 * g * g;
    s1[i] = T(m);
    s2[i] = T(v);
    var vd = v;
    if (has(FLAG_AMSGRAD)) {
        vd = max_nan(f32(s3[i]), v);
        s3[i] = T(vd);
    }
    // div_f: WGSL's `/` may be 2.5 ulp off (NVIDIA: a reciprocal times the dividend), where
    // PyTorch's divisions round once.
    let denom = div_f(sqrt(vd), p.bc2_sqrt) + p.eps;
    param[i] = T(w - div_f(p.step_size * m, denom));
}
