// Binary elementwise ops with numpy broadcasting: both inputs are read through their own
// element strides (0 on broadcast dims), the output is contiguous. The op is an override.
// Needs lib/activation.wgsl (the NaN-propagating max/min).

struct Params {
    numel: u32,
    rank: u32,
    off_a: u32,
    off_b: u32,
    shape: array<vec4<u32>, 2>,
    sa: array<vec4<u32>, 2>,
    sb: array<vec4<u32>, 2>,
    // Flat index of this dispatch's first element (a window of a tensor larger than one
    // binding; 0 otherwise): strided operands decode coordinates from base + i.
    base: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<T>;
@group(0) @binding(2) var<storage, read> b: array<T>;
@group(0) @binding(3) var<storage, read_write> c: array<T>;

override OP: u32 = 0u;
override WG: u32;
// Both inputs packed row-major with the output's shape: no coordinate decode.
override CONTIG: bool = false;

// OP_* are emitted by the runtime from BINARY_DEFS in src/ops/binary.rs.
fn combine(x: f32, y: f32) -> f32 {
    switch OP {
        case OP_SUB: { return x - y; }
        case OP_MUL: { return x * y; }
        case OP_DIV: { return div_f(x, y); }
        case OP_MAX: { return max_nan(x, y); }
        case OP_MIN: { return min_nan(x, y); }
        case OP_POW: { return pow_f(x, y); }
        default: { return x + y; }
    }
}

// The elements of a and b that output element i combines.
fn operands(i: u32) -> vec2<u32> {
    var ia = p.off_a;
    var ib = p.off_b;
    if (CONTIG) {
        return vec2<u32>(ia + i, ib + i);
    }
    var rem = p.base + i;
    for (var d = i32(p.rank) - 1; d >= 0; d--) {
        let k = u32(d);
        let n = p.shape[k / 4u][k % 4u];
        let c = rem % n;
        rem = rem / n;
        ia += c * p.sa[k / 4u][k % 4u];
        ib += c * p.sb[k / 4u][k % 4u];
    }
    return vec2<u32>(ia, ib);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= p.numel) {
        return;
    }
    let ix = operands(i);
    c[i] = T(combine(f32(a[ix.x]), f32(b[ix.y])));
}

// In place (src/ops/donate.rs): the donated operand is packed with the output's shape and is
// bound once, read and overwritten at its own index (its offset in the binding plus i); the
// other operand is read through its strides as usual.
@group(0) @binding(4) var<storage, read_write> io: array<T>;

@compute @workgroup_size(WG)
fn main_inplace_a(@builtin(workgroup_id) wid: vec3<u32>,
                  @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= p.numel) {
        return;
    }
    let ix = operands(i);
    io[ix.x] = T(combine(f32(io[ix.x]), f32(b[ix.y])));
}

@compute @workgroup_size(WG)
fn main_inplace_b(@builtin(workgroup_id) wid: vec3<u32>,
                  @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= p.numel) {
        return;
    }
    let ix = operands(i);
    io[ix.y] = T(combine(f32(a[ix.x]), f32(io[ix.y])));
}

// ---------------------------------------------------------------------------------------------
// vec4 variants for GPUs (src/ops/elementwise_vec4.rs): both operands packed with the output's
// shape, their offsets multiples of 4 elements, read and written as vec4 through bindings of
// their own in a grid-stride loop (the grid sized to the GPU). The params are reused: `numel`
// counts vec4s, `off_a` / `off_b` are in vec4s and `base` is the output's offset in vec4s. The
// same `combine` per lane: results match the scalar kernel's. Elements past the last whole
// vec4 window are left to the scalar kernel.
// ---------------------------------------------------------------------------------------------

@group(0) @binding(5) var<storage, read> a4: array<vec4<T>>;
@group(0) @binding(6) var<storage, read> b4: array<vec4<T>>;
@group(0) @binding(7) var<storage, read_write> c4: array<vec4<T>>;
@group(0) @binding(8) var<storage, read_write> io4: array<vec4<T>>;

fn combine4(x: vec4<T>, y: vec4<T>) -> vec4<T> {
    let u = vec4<f32>(x);
    let v = vec4<f32>(y);
    return vec4<T>(vec4<f32>(combine(u.x, v.x), combine(u.y, v.y), combine(u.z, v.z),
                             combine(u.w, v.w)));
}

// The vec4 loops take UNROLL vec4s of each operand a step, all loaded before any result is
// stored (see map.wgsl's main_vec4: a store may alias a later load for all the compiler
// knows); the rest goes one vec4 a step.
const UNROLL: u32 = 4u;

@compute @workgroup_size(WG)
fn main_vec4(@builtin(workgroup_id) wid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let stride = nwg.x * WG;
    var i = wid.x * WG + lid;
    for (; i + (UNROLL - 1u) * stride < p.numel; i += UNROLL * stride) {
        let x0 = a4[p.off_a + i];
        let y0 = b4[p.off_b + i];
        let x1 = a4[p.off_a + i + stride];
        let y1 = b4[p.off_b + i + stride];
        let x2 = a4[p.off_a + i + 2u * stride];
        let y2 = b4[p.off_b + i + 2u * stride];
        let x3 = a4[p.off_a + i + 3u * stride];
        let y3 = b4[p.off_b + i + 3u * stride];
        c4[p.base + i] = combine4(x0, y0);
        c4[p.base + i + stride] = combine4(x1, y1);
        c4[p.base + i + 2u * stride] = combine4(x2, y2);
        c4[p.base + i + 3u * stride] = combine4(x3, y3);
    }
    for (; i < p.numel; i += stride) {
        c4[p.base + i] = combine4(a4[p.off_a + i], b4[p.off_b + i]);
    }
}

@compute @workgroup_size(WG)
fn main_vec4_inplace_a(@builtin(workgroup_id) wid: vec3<u32>,
                       @builtin(num_workgroups) nwg: vec3<u32>,
                       @builtin(local_invocation_index) lid: u32) {
    let stride = nwg.x * WG;
    var i = wid.x * WG + lid;
    for (; i + (UNROLL - 1u) * stride < p.numel; i += UNROLL * stride) {
        let x0 = io4[p.off_a + i];
        let y0 = b4[p.off_b + i];
        let x1 = io4[p.off_a + i + stride];
        let y1 = b4[p.off_b + i + stride];
        let x2 = io4[p.off_a + i + 2u * stride];
        let y2 = b4[p.off_b + i + 2u * stride];
        let x3 = io4[p.off_a + i + 3u * stride];
        let y3 = b4[p.off_b + i + 3u * stride];
        io4[p.off_a + i] = combine4(x0, y0);
        io4[p.off_a + i + stride] = combine4(x1, y1);
        io4[p.off_a + i + 2u * stride] = combine4(x2, y2);
        io4[p.off_a + i + 3u * stride] = combine4(x3, y3);
    }
    for (; i < p.numel; i += stride) {
        let k = p.off_a + i;
        io4[k] = combine4(io4[k], b4[p.off_b + i]);
    }
}

@compute @workgroup_size(WG)
fn main_vec4_inplace_b(@builtin(workgroup_id) wid: vec3<u32>,
                       @builtin(num_workgroups) nwg: vec3<u32>,
                       @builtin(local_invocation_index) lid: u32) {
    let stride = nwg.x * WG;
    var i = wid.x * WG + lid;
    for (; i + (UNROLL - 1u) * stride < p.numel; i += UNROLL * stride) {
        let x0 = a4[p.off_a + i];
        let y0 = io4[p.off_b + i];
        let x1 = a4[p.off_a + i + stride];
        let y1 = io4[p.off_b + i + stride];
        let x2 = a4[p.off_a + i + 2u * stride];
        let y2 = io4[p.off_b + i + 2u * stride];
        let x3 = a4[p.off_a + i + 3u * stride];
        let y3 = io4[p.off_b + i + 3u * stride];
        io4[p.off_b + i] = combine4(x0, y0);
        io4[p.off_b + i + stride] = combine4(x1, y1);
        io4[p.off_b + i + 2u * stride] = combine4(x2, y2);
        io4[p.off_b + i + 3u * stride] = combine4(x3, y3);
    }
    for (; i < p.numel; i += stride) {
        let k = p.off_b + i;
        io4[k] = combine4(a4[p.off_a + i], io4[k]);
    }
}

// One operand packed with the output's shape (bound at 5), the other broadcast in one of two
// patterns along the flat output index (bound at 6), both bound whole, the output too: the
// GPUs' vec4 path for a bias over rows ([N, C] + [C]) or over planes ([N, C, H, W] + [C, 1, 1],
// a scalar). p.shape[0] = (pattern, period, run, full operand is a): pattern 1 reads the
// small operand's vec4 i % (period / 4) from vec4 off_b (period and off_b*4 multiples of 4);
// pattern 2 splats its element off_b + (4 i / run) % period (run a multiple of 4). numel
// counts vec4s, off_a is the full operand's offset in vec4s.
fn small4(i: u32) -> vec4<T> {
    let period = p.shape[0].y;
    if (p.shape[0].x == 1u) {
        return b4[p.off_b + i % (period / 4u)];
    }
    let e = p.off_b + (4u * i / p.shape[0].z) % period;
    return vec4<T>(b4[e / 4u][e % 4u]);
}

@compute @workgroup_size(WG)
fn main_vec4_bcast(@builtin(workgroup_id) wid: vec3<u32>,
                   @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let stride = nwg.x * WG;
    var i = wid.x * WG + lid;
    // UNROLL vec4s of the full operand in flight, as main_vec4 (the small one is cached).
    for (; i + (UNROLL - 1u) * stride < p.numel; i += UNROLL * stride) {
        let f0 = a4[p.off_a + i];
        let f1 = a4[p.off_a + i + stride];
        let f2 = a4[p.off_a + i + 2u * stride];
        let f3 = a4[p.off_a + i + 3u * stride];
        bcast_store(i, f0);
        bcast_store(i + stride, f1);
        bcast_store(i + 2u * stride, f2);
        bcast_store(i + 3u * stride, f3);
    }
    for (; i < p.numel; i += stride) {
        bcast_store(i, a4[p.off_a + i]);
    }
}

// Output vec4 i from the full operand's vec4 f and the small operand, in the operands' order.
fn bcast_store(i: u32, f: vec4<T>) {
    let s = small4(i);
    if (p.shape[0].w == 1u) {
        c4[i] = combine4(f, s);
    } else {
        c4[i] = combine4(s, f);
    }
}
