// Counter-based random numbers (Philox4x32-10, Salmon et al., "Parallel random numbers: as
// easy as 1, 2, 3", SC 2011): invocation i turns counter (base + i) and the 64-bit key into
// four independent u32s, so a stream is a pure function of (seed, offset) on every backend,
// with no state on the GPU. DIST picks what the u32s become; the element e of the output is
// lane e % 4 of invocation e / 4.

struct Params {
    numel: u32,
    key_lo: u32,
    key_hi: u32,
    // Counter of the first block (64-bit).
    ctr_lo: u32,
    ctr_hi: u32,
    // uniform: [a, b); normal: mean a, std b; bernoulli / dropout: probability a, scale b.
    a: f32,
    b: f32,
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read_write> y: array<T>;

// DIST_* are emitted by the runtime from RANDOM_DEFS in src/ops/random.rs.
override DIST: u32 = 0u;
override WG: u32;

// 32 x 32 -> 64-bit product as (hi, lo), from 16-bit halves (WGSL has no mulhi).
fn mul_wide(a: u32, b: u32) -> vec2<u32> {
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let p11 = a1 * b1;
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    let lo = (p00 & 0xffffu) | (mid << 16u);
    let hi = p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
    return vec2<u32>(hi, lo);
}

fn philox(ctr_in: vec4<u32>, key_in: vec2<u32>) -> vec4<u32> {
    var c = ctr_in;
    var k = key_in;
    for (var r = 0u; r < 10u; r++) {
        let m0 = mul_wide(0xD2511F53u, c.x);
        let m1 = mul_wide(0xCD9E8D57u, c.z);
        c = vec4<u32>(m1.x ^ c.y ^ k.x, m1.y, m0.x ^ c.w ^ k.y, m0.y);
        k = k + vec2<u32>(0x9E3779B9u, 0xBB67AE85u);
    }
    return c;
}

// [0, 1) with 24 random bits (every value exact in f32).
fn unit(v: u32) -> f32 {
    return f32(v >> 8u) * 5.9604644775390625e-8;
}

fn value(e: u32, r: vec4<u32>, lane: u32) -> f32 {
    let u = unit(r[lane]);
    switch DIST {
        case DIST_NORMAL: {
            // Box-Muller on the lane pair (0, 1) or (2, 3); 1 - u keeps the log finite.
            let pair = lane & 2u;
            let u1 = 1.0 - unit(r[pair]);
            let u2 = unit(r[pair + 1u]);
            let radius = sqrt(-2.0 * log(u1));
            let angle = 6.283185307179586 * u2;
            let z = select(radius * sin(angle), radius * cos(angle), (lane & 1u) == 0u);
            return p.a + p.b * z;
        }
        case DIST_BERNOULLI: {
            return select(0.0, 1.0, u < p.a);
        }
        case DIST_DROPOUT: {
            // Keep with probability 1 - a, scaled by b = 1 / (1 - a) (inverted dropout).
            return select(0.0, f32(x[e]) * p.b, u >= p.a);
        }
        default: {
            return p.a + (p.b - p.a) * u;
        }
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    let first = i * 4u;
    if (i >= (p.numel + 3u) / 4u) {
        return;
    }
    // 64-bit counter: base + i.
    let lo = p.ctr_lo + i;
    let hi = p.ctr_hi + select(0u, 1u, lo < i);
    let r = philox(vec4<u32>(lo, hi, 0u, 0u), vec2<u32>(p.key_lo, p.key_hi));
    for (var lane = 0u; lane < 4u; lane++) {
        let e = first + lane;
        if (e < p.numel) {
            y[e] = T(value(e, r, lane));
        }
    }
}
