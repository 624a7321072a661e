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
    // Flat index of this dispatch's first element (a window of a tensor larger than one
    // binding; 0 otherwise): strided inputs decode coordinates from base + i.
    base: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read_write> y: array<U>;
// The donated input of the in-place entry point, read and overwritten (T = U there).
@group(0) @binding(3) var<storage, read_write> io: array<T>;

override OP: u32 = 0u;
override WG: u32;
// Input is packed row-major from `offset`: skip the coordinate decode.
override CONTIG: bool = false;

fn src_index(i: u32) -> u32 {
    if (CONTIG) {
        return p.offset + i;
    }
    var rem = p.base + i;
    var off = p.offset;
    for (var d = i32(p.rank) - 1; d >= 0; d--) {
        let k = u32(d);
        let n = p.shape[k / 4u][k % 4u];
        off += (rem % n) * p.strides[k / 4u][k % 4u];
        rem = rem / n;
    }
    return off;
}

// OP_* are emitted by the runtime from MAP_DEFS in src/ops/map.rs.
fn apply(v: f32, s: f32) -> f32 {
    switch OP {
        case OP_NEG: { return -v; }
        case OP_ABS: { return abs(v); }
        case OP_EXP: { return exp_f(v); }
        case OP_LOG: { return log_f(v); }
        case OP_SQRT: { return sqrt_f(v); }
        case OP_RELU: { return relu_f(v); }
        case OP_SIGMOID: { return sigmoid_f(v); }
        case OP_TANH: { return tanh_f(v); }
        case OP_GELU: { return gelu_f(v); }
        case OP_SILU: { return v * sigmoid_f(v); }
        case OP_LOG1P: { return log1p_f(v); }
        case OP_SOFTPLUS: { return softplus_f(v); }
        case OP_GELU_TANH: { return gelu_tanh_f(v); }
        case OP_ADD_SCALAR: { return v + s; }
        case OP_SUB_SCALAR: { return v - s; }
        case OP_RSUB_SCALAR: { return s - v; }
        case OP_MUL_SCALAR: { return v * s; }
        case OP_DIV_SCALAR: { return div_f(v, s); }
        // PyTorch's `s / x` is `x.reciprocal() * s` (Tensor.__rtruediv__): in f32 the
        // reciprocal rounded, then the product (f16 stores the reciprocal first: map.rs).
        case OP_RDIV_SCALAR: { return div_f(1.0, v) * s; }
        case OP_MAX_SCALAR: { return clamp_min_f(v, s); }
        case OP_MIN_SCALAR: { return clamp_max_f(v, s); }
        // PyTorch's pow(tensor, scalar) takes sqrt and rsqrt for +-0.5 (not C99's pow: -inf
        // gives NaN, -0 keeps its sign); the other exponents as pow_f.
        case OP_POW_SCALAR: {
            if (s == 0.5) {
                return sqrt_f(v);
            }
            if (s == -0.5) {
                return div_f(1.0, sqrt_f(v));
            }
            return pow_f(v, s);
        }
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
    // Copies and casts convert T to U directly: exact for i32 (no f32 detour), and
    // f32 -> f16 rounds once as before.
    if (OP == OP_COPY) {
        y[i] = U(x[src_index(i)]);
        return;
    }
    y[i] = U(apply(f32(x[src_index(i)]), p.scalar));
}

// In place over a donated, packed input (src/ops/donate.rs): the same math, one binding.
@compute @workgroup_size(WG)
fn main_inplace(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= p.numel) {
        return;
    }
    let k = p.offset + i;
    io[k] = T(apply(f32(io[k]), p.scalar));
}

// ---------------------------------------------------------------------------------------------
// vec4 variants for GPUs (src/ops/elementwise_vec4.rs): a packed input whose offset is a
// multiple of 4 elements, read and written as vec4 through bindings of their own, each
// invocation walking a grid-stride loop over the vec4s so the grid is sized to the GPU, not to
// the tensor. The params are reused: `numel` counts vec4s, `offset` is the input's offset in
// vec4s and `base` the output's. The same `apply` per lane: results match the scalar kernel's.
// Elements past the last whole vec4 window are left to the scalar kernel.
// ---------------------------------------------------------------------------------------------

@group(0) @binding(4) var<storage, read> x4: array<vec4<T>>;
@group(0) @binding(5) var<storage, read_write> y4: array<vec4<U>>;
@group(0) @binding(6) var<storage, read_write> io4: array<vec4<T>>;

fn apply4(v: vec4<f32>, s: f32) -> vec4<f32> {
    return vec4<f32>(apply(v.x, s), apply(v.y, s), apply(v.z, s), apply(v.w, s));
}

fn map4(v: vec4<T>) -> vec4<U> {
    if (OP == OP_COPY) {
        return vec4<U>(v);
    }
    return vec4<U>(apply4(vec4<f32>(v), p.scalar));
}

// The vec4 loops take UNROLL vec4s a step, loaded before any is stored: a store may alias a
// later load for all the compiler knows (two bindings of one buffer), so a load-store loop
// keeps one load in flight per invocation, and the grid alone (2048 x 256 invocations, half
// of them resident on an H200) cannot cover the memory's latency. The grid is sized for
// UNROLL vec4s per invocation (src/ops/elementwise_vec4.rs, `vec4_groups`); the rest goes one
// vec4 a step.
const UNROLL: u32 = 4u;

@compute @workgroup_size(WG)
fn main_vec4(@builtin(workgroup_id) wid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let stride = nwg.x * WG;
    var i = wid.x * WG + lid;
    for (; i + (UNROLL - 1u) * stride < p.numel; i += UNROLL * stride) {
        let v0 = x4[p.offset + i];
        let v1 = x4[p.offset + i + stride];
        let v2 = x4[p.offset + i + 2u * stride];
        let v3 = x4[p.offset + i + 3u * stride];
        y4[p.base + i] = map4(v0);
        y4[p.base + i + stride] = map4(v1);
        y4[p.base + i + 2u * stride] = map4(v2);
        y4[p.base + i + 3u * stride] = map4(v3);
    }
    for (; i < p.numel; i += stride) {
        y4[p.base + i] = map4(x4[p.offset + i]);
    }
}

@compute @workgroup_size(WG)
fn main_vec4_inplace(@builtin(workgroup_id) wid: vec3<u32>,
                     @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    let stride = nwg.x * WG;
    var i = wid.x * WG + lid;
    for (; i + (UNROLL - 1u) * stride < p.numel; i += UNROLL * stride) {
        let k = p.offset + i;
        let v0 = io4[k];
        let v1 = io4[k + stride];
        let v2 = io4[k + 2u * stride];
        let v3 = io4[k + 3u * stride];
        io4[k] = vec4<T>(apply4(vec4<f32>(v0), p.scalar));
        io4[k + stride] = vec4<T>(apply4(vec4<f32>(v1), p.scalar));
        io4[k + 2u * stride] = vec4<T>(apply4(vec4<f32>(v2), p.scalar));
        io4[k + 3u * stride] = vec4<T>(apply4(vec4<f32>(v3), p.scalar));
    }
    for (; i < p.numel; i += stride) {
        let k = p.offset + i;
        io4[k] = vec4<T>(apply4(vec4<f32>(io4[k]), p.scalar));
    }
}
