// Elementwise map: strided input of type T -> contiguous output of type U.
// One family covers copy (contiguous), dtype cast, unary math and scalar ops; the op is an
// override constant so each pipeline is specialized without text templating.
// The runtime prepends the dtype prelude (`alias T = ...; alias U = ...;`) and
// shaders/lib/activation.wgsl.

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
override WG: u32;
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

fn apply(v: f32, s: f32) -> f32 {
    switch OP {
        case 1u: { return -v; }
        case 2u: { return abs(v); }
        case 3u: { return exp(v); }
        case 4u: { return log(v); }
        case 5u: { return sqrt(v); }
        case 6u: { return relu_f(v); }
        case 7u: { return sigmoid_f(v); }
        case 8u: { return tanh_f(v); }
        case 9u: { return gelu_f(v); }
        case 10u: { return v + s; }
        case 11u: { return v - s; }
        case 12u: { return s - v; }
        case 13u: { return v * s; }
        case 14u: { return v / s; }
        case 15u: { return s / v; }
        case 16u: { return max_nan(v, s); }
        case 17u: { return min_nan(v, s); }
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
