// 2-D pooling over [N*C, H, W] planes (1-D pools use H = 1): max or average over windows that
// are either regular (kernel, stride, padding, dilation) or adaptive (PyTorch's
// start = floor(o * in / out), end = ceil((o + 1) * in / out)). The forward writes one output
// per invocation; the backward gathers, for each input element, the gradient of every window
// that holds it (max: only windows whose first maximum is this element, as PyTorch routes it),
// so no atomics and a fixed summation order. Needs lib/activation.wgsl (isnan_f).

struct Params {
    planes: u32,
    h: u32,
    w: u32,
    oh: u32,
    ow: u32,
    kh: u32,
    kw: u32,
    sh: u32,
    sw: u32,
    ph: u32,
    pw: u32,
    dh: u32,
    dw: u32,
    x_off: u32,
    // Average pools: 1 when the padding counts toward the divisor.
    include_pad: u32,
    // A divisor that replaces the window size when non-zero (divisor_override).
    divisor: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read> dy: array<T>;
@group(0) @binding(3) var<storage, read_write> y: array<T>;
@group(0) @binding(4) var<storage, read_write> yi: array<i32>;

// POOL_* are emitted by the runtime from POOL_DEFS in src/ops/pool.rs.
override MODE: u32 = 0u;
override ADAPTIVE: bool = false;
override WG: u32;

// The taps of output index `o` along one axis: (first input index, tap count, tap step) with
// the first index possibly negative (padding), as i32.
struct Taps {
    start: i32,
    count: u32,
    step: u32,
}

// (floor(a * b / d), a * b mod d) for a quotient below 2^32 (every caller's a is at most d,
// so it is at most b): the bounds of adaptive windows are such quotients, and a * b passes u32
// (a 1-D pool of 100000 samples to 50000) where PyTorch computes them in int64. Past u32 the
// product is formed in 16-bit limbs and divided bit by bit.
fn mul_div(a: u32, b: u32, d: u32) -> vec2<u32> {
    if (b == 0u || a <= 0xffffffffu / b) {
        let x = a * b;
        return vec2<u32>(x / d, x % d);
    }
    let p00 = (a & 0xffffu) * (b & 0xffffu);
    let p01 = (a & 0xffffu) * (b >> 16u);
    let p10 = (a >> 16u) * (b & 0xffffu);
    let p11 = (a >> 16u) * (b >> 16u);
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    let lo = (p00 & 0xffffu) | (mid << 16u);
    // The remainder starts as the high word, below d since the quotient fits 32 bits.
    var r = p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
    var q = 0u;
    for (var i = 0u; i < 32u; i++) {
        // r < d before the shift, so 2 r + 1 < 2 d: one subtraction, wrapping when the shift
        // carried out of 32 bits.
        let carry = r >> 31u;
        r = (r << 1u) | ((lo >> (31u - i)) & 1u);
        q = q << 1u;
        if (carry != 0u || r >= d) {
            r -= d;
            q |= 1u;
        }
    }
    return vec2<u32>(q, r);
}

// ceil(a * b / d) under mul_div's bound.
fn mul_div_up(a: u32, b: u32, d: u32) -> u32 {
    let x = mul_div(a, b, d);
    return x.x + select(0u, 1u, x.y != 0u);
}

fn taps(o: u32, len: u32, out: u32, k: u32, s: u32, pad: u32, d: u32) -> Taps {
    if (ADAPTIVE) {
        let a = mul_div(o, len, out).x;
        let b = mul_div_up(o + 1u, len, out);
        return Taps(i32(a), b - a, 1u);
    }
    return Taps(i32(o * s) - i32(pad), k, d);
}

// Average divisor of output (oy, ox): PyTorch's avg_pool2d rules.
fn avg_divisor(ty: Taps, tx: Taps) -> f32 {
    if (p.divisor != 0.0) {
        return p.divisor;
    }
    if (ADAPTIVE) {
        return f32(ty.count) * f32(tx.count);
    }
    let hs = ty.start;
    let ws = tx.start;
    let he = min(hs + i32(p.kh), i32(p.h + p.ph));
    let we = min(ws + i32(p.kw), i32(p.w + p.pw));
    // In f32, not i32: a padded window past 46340 x 46340 wraps an i32 product (PyTorch
    // multiplies in i64); factors below 2^24 are exact in f32 and the product rounds once, as
    // PyTorch's conversion of its i64 count does (a side past 2^24 rounds once more).
    if (p.include_pad != 0u) {
        return f32(he - hs) * f32(we - ws);
    }
    let h0 = max(hs, 0);
    let w0 = max(ws, 0);
    let h1 = min(he, i32(p.h));
    let w1 = min(we, i32(p.w));
    return f32(h1 - h0) * f32(w1 - w0);
}

// The taps of `t` inside [0, len), as a range [x, y) of tap numbers: loops run over the input
// a window covers, not over the whole (possibly huge, mostly padded) kernel.
fn inside(t: Taps, len: u32) -> vec2<u32> {
    let room = i32(len) - t.start;
    if (room <= 0) {
        return vec2<u32>(0u, 0u);
    }
    var first = 0u;
    if (t.start < 0) {
        first = (u32(-t.start) + t.step - 1u) / t.step;
    }
    let end = min(t.count, (u32(room) + t.step - 1u) / t.step);
    return vec2<u32>(first, max(first, end));
}

struct Pooled {
    value: f32,
    arg: i32,
}

// The window's result and, for max, the flat in-plane index of its first maximum (or of its
// last NaN, as PyTorch's max pooling picks it); -1 when the window holds no input.
fn window(plane: u32, oy: u32, ox: u32) -> Pooled {
    let ty = taps(oy, p.h, p.oh, p.kh, p.sh, p.ph, p.dh);
    let tx = taps(ox, p.w, p.ow, p.kw, p.sw, p.pw, p.dw);
    let base = p.x_off + plane * p.h * p.w;
    var best = bitcast<f32>(0xff800000u | (p.h & 0u));
    var arg = -1;
    var sum = 0.0;
    let iy = inside(ty, p.h);
    let ix = inside(tx, p.w);
    for (var i = iy.x; i < iy.y; i++) {
        let r = ty.start + i32(i * ty.step);
        for (var j = ix.x; j < ix.y; j++) {
            let c = tx.start + i32(j * tx.step);
            let idx = u32(r) * p.w + u32(c);
            let v = f32(x[base + idx]);
            sum += v;
            // PyTorch's rule: a larger value or any NaN takes over, so ties keep the first.
            if (arg < 0 || v > best || isnan_f(v)) {
                best = v;
                arg = i32(idx);
            }
        }
    }
    if (MODE == POOL_MAX) {
        return Pooled(best, arg);
    }
    return Pooled(div_f(sum, avg_divisor(ty, tx)), arg);
}

@compute @workgroup_size(WG)
fn pool_forward(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    let per = p.oh * p.ow;
    if (i >= p.planes * per) {
        return;
    }
    let plane = i / per;
    let rem = i % per;
    y[i] = T(window(plane, rem / p.ow, rem % p.ow).value);
}

// Max pooling's `return_indices`: the flat in-plane index of each window's maximum.
@compute @workgroup_size(WG)
fn pool_indices(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    let per = p.oh * p.ow;
    if (i >= p.planes * per) {
        return;
    }
    let plane = i / per;
    let rem = i % per;
    yi[i] = window(plane, rem / p.ow, rem % p.ow).arg;
}

// The range of outputs along one axis whose taps can reach input index `v` (inclusive low,
// exclusive high); the caller checks each candidate's taps exactly.
fn reach(v: u32, len: u32, out: u32, k: u32, s: u32, pad: u32, d: u32) -> vec2<u32> {
    if (ADAPTIVE) {
        // Window o covers [floor(o*len/out), ceil((o+1)*len/out)): o from floor(v*out/len)
        // minus one (overlaps) to ceil((v+1)*out/len).
        let f = mul_div(v, out, len).x;
        let lo = select(0u, f - 1u, f > 0u);
        let hi = min(out, mul_div_up(v + 1u, out, len) + 1u);
        return vec2<u32>(lo, hi);
    }
    // o * s - pad <= v and v <= o * s - pad + (k - 1) * d.
    let span = (k - 1u) * d;
    let top = v + pad;
    let lo = select(0u, (top - span + s - 1u) / s, top > span);
    let hi = min(out, top / s + 1u);
    return vec2<u32>(lo, hi);
}

@compute @workgroup_size(WG)
fn pool_backward(@builtin(workgroup_id) wid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    let per = p.h * p.w;
    if (i >= p.planes * per) {
        return;
    }
    let plane = i / per;
    let idx = i % per;
    let r = idx / p.w;
    let c = idx % p.w;
    let ry = reach(r, p.h, p.oh, p.kh, p.sh, p.ph, p.dh);
    let rx = reach(c, p.w, p.ow, p.kw, p.sw, p.pw, p.dw);
    var g = 0.0;
    for (var oy = ry.x; oy < ry.y; oy++) {
        let ty = taps(oy, p.h, p.oh, p.kh, p.sh, p.ph, p.dh);
        let dyr = i32(r) - ty.start;
        if (dyr < 0 || u32(dyr) % ty.step != 0u || u32(dyr) / ty.step >= ty.count) {
            continue;
        }
        for (var ox = rx.x; ox < rx.y; ox++) {
            let tx = taps(ox, p.w, p.ow, p.kw, p.sw, p.pw, p.dw);
            let dxc = i32(c) - tx.start;
            if (dxc < 0 || u32(dxc) % tx.step != 0u || u32(dxc) / tx.step >= tx.count) {
                continue;
            }
            let o = (plane * p.oh + oy) * p.ow + ox;
            if (MODE == POOL_MAX) {
                // Each window's argmax comes precomputed (pool_indices): recomputing it here
                // cost a whole window per candidate, (H W)^2 per plane for a global max pool.
                if (yi[o] == i32(idx)) {
                    g += f32(dy[o]);
                }
            } else {
                g += div_f(f32(dy[o]), avg_divisor(ty, tx));
            }
        }
    }
    y[i] = T(g);
}
