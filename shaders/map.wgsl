// Elementwise map: strided input of type T -> contiguous output of type U.
// One family covers copy (contiguous), dtype cast, unary math and scalar ops; the op is an
// override constant so each pipeline is specialized without text templating.
// The runtime prepends the dtype prelude (`alias T = ...; alias U = ...;`).

struct Params {
    numel: u32,
    rank: u32,
    offset: u32,
    scalar: f32,
    shape: array<vec4<u32>, 2>,
    strides: array<vec4<u32>, 2>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read_write> y: array<U>;

override OP: u32 = 0u;
override WG: u32 = 256u;
// Input is packed row-major from `offset`: skip the coordinate decode.
override CONTIG: bool = false;

fn src_index(i: u32) -> u32 {
    if (CONTIG) {
        return p.offset + i;
    }
    var rem = i;
    var off = p.offset;
    for (var d = i32(p.rank) - 1; d >= 0; d--) {
        let k = u32(d);
        let n = p.shape[k / 4u][k % 4u];
        off += (rem % n) * p.strides[k / 4u][k % 4u];
        rem = rem / n;
    }
    return off;
}

// Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): WGSL has no erf and GELU needs the exact form.
fn erf_approx(v: f32) -> f32 {
    let a = abs(v);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    return sign(v) * (1.0 - poly * exp(-a * a));
}

// Overflow-safe forms: exp of a large argument must not turn into inf/inf = NaN.
fn sigmoid_f(v: f32) -> f32 {
    if (v >= 0.0) {
        return 1.0 / (1.0 + exp(-v));
    }
    let e = exp(v);
    return e / (1.0 + e);
}

// Below 0.625, 1 - e^(-2|v|) cancels (relative error grows like 1/|v|; tanh(1e-8) would be 0),
// so use v * P(v^2): a degree-5 Chebyshev fit of tanh(v)/v on [0, 0.625], about 1 ulp in f32.
fn tanh_f(v: f32) -> f32 {
    let a = abs(v);
    if (a < 0.625) {
        let y = v * v;
        let p = ((((-0.00565713518 * y + 0.0205881915) * y - 0.0537201077) * y + 0.133311141) * y
            - 0.333332599) * y + 1.0;
        return v * p;
    }
    let t = exp(-2.0 * a);
    return sign(v) * (1.0 - t) / (1.0 + t);
}

fn apply(v: f32, s: f32) -> f32 {
    switch OP {
        case 1u: { return -v; }
        case 2u: { return abs(v); }
        case 3u: { return exp(v); }
        case 4u: { return log(v); }
        case 5u: { return sqrt(v); }
        case 6u: { return max(v, 0.0); }
        case 7u: { return sigmoid_f(v); }
        case 8u: { return tanh_f(v); }
        case 9u: { return 0.5 * v * (1.0 + erf_approx(v * 0.70710678118654752)); }
        case 10u: { return v + s; }
        case 11u: { return v - s; }
        case 12u: { return s - v; }
        case 13u: { return v * s; }
        case 14u: { return v / s; }
        case 15u: { return s / v; }
        case 16u: { return max(v, s); }
        case 17u: { return min(v, s); }
        default: { return v; }
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= p.numel) {
        return;
    }
    y[i] = U(apply(f32(x[src_index(i)]), p.scalar));
}
