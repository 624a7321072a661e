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

// mul_wide, philox and unit come from lib/philox.wgsl.

// Natural log of x in (0, 1] from +, *, / and bit operations only: WGSL leaves log's accuracy
// to the implementation (SwiftShader's differs from lavapipe's in the 4th digit), and the same
// seed must give the same normals on every backend. x = m 2^e with m in [sqrt(1/2), sqrt(2)),
// log m = 2 atanh(s), s = (m - 1) / (m + 1) < 0.172, whose series to s^9 is below f32's ulp.
fn ln_portable(x: f32) -> f32 {
    let bits = bitcast<u32>(x);
    var e = i32((bits >> 23u) & 0xffu) - 127;
    var m = bitcast<f32>((bits & 0x007fffffu) | 0x3f800000u);
    if (m > 1.4142135) {
        m = m * 0.5;
        e = e + 1;
    }
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let poly = s * (2.0 + s2 * (0.6666667 + s2 * (0.4 + s2 * (0.2857143 + s2 * 0.22222222))));
    // ln 2 split so that e * hi is exact.
    return f32(e) * 0.693145751953125 + (poly + f32(e) * 1.4286068e-6);
}

// (sin, cos) of 2 pi u for u in [0, 1), portable for the same reason: the quadrant from 4u
// (exact), then Taylor series on [0, pi/2) whose truncation (t^13 / 13!) is below f32's ulp.
fn sincos_turns(u: f32) -> vec2<f32> {
    let q4 = u * 4.0;
    let q = floor(q4);
    let t = (q4 - q) * 1.5707964;
    let t2 = t * t;
    let sn = t * (1.0 + t2 * (-0.16666667 + t2 * (0.008333334 + t2 * (-0.0001984127
        + t2 * (2.7557319e-6 + t2 * -2.5052108e-8)))));
    let cs = 1.0 + t2 * (-0.5 + t2 * (0.041666668 + t2 * (-0.0013888889 + t2 * (2.4801587e-5
        + t2 * (-2.7557319e-7 + t2 * 2.0876757e-9)))));
    switch u32(q) {
        case 0u: { return vec2<f32>(sn, cs); }
        case 1u: { return vec2<f32>(cs, -sn); }
        case 2u: { return vec2<f32>(-sn, -cs); }
        default: { return vec2<f32>(-cs, sn); }
    }
}

fn value(e: u32, r: vec4<u32>, lane: u32) -> f32 {
    let u = unit(r[lane]);
    switch DIST {
        case DIST_NORMAL: {
            // Box-Muller on the lane pair (0, 1) or (2, 3); 1 - u keeps the log finite.
            let pair = lane & 2u;
            let u1 = 1.0 - unit(r[pair]);
            let u2 = unit(r[pair + 1u]);
            let radius = sqrt(-2.0 * ln_portable(u1));
            let sc = sincos_turns(u2);
            let z = select(radius * sc.x, radius * sc.y, (lane & 1u) == 0u);
            return p.a + p.b * z;
        }
        case DIST_BERNOULLI: {
            return select(0.0, 1.0, u < p.a);
        }
        case DIST_DROPOUT: {
            // Keep with probability 1 - a, scaled by b = 1 / (1 - a) (inverted dropout). A
            // dropped element is x * 0, as PyTorch's x * mask * scale: NaN and inf give NaN.
            return f32(x[e]) * select(0.0, p.b, u >= p.a);
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
            var v = T(value(e, r, lane));
            // [a, b) in T: a draw that rounds up to b (f16 near 1, or a range narrow against
            // its magnitude) becomes a, as PyTorch's uniform_ does. An empty range (a == b,
            // -0 and +0 among them) keeps the computed a + 0 (+0 for the zeros, as PyTorch).
            if (DIST == DIST_UNIFORM && v >= T(p.b) && T(p.a) < T(p.b)) {
                v = T(p.a);
            }
            y[e] = v;
        }
    }
}
