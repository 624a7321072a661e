// Comparisons and selection with numpy broadcasting: `compare` writes an f32 mask (1.0 where
// the relation holds, else 0.0) from two inputs of type T; `select` picks `a` where the
// condition (type U, any dtype: non-zero or NaN is true) holds, else `b`. Every input is read
// through its own element strides (0 on broadcast dims); outputs are contiguous.
// Needs lib/activation.wgsl (isnan_f, which fast-math cannot fold away).

struct Params {
    numel: u32,
    rank: u32,
    off_a: u32,
    off_b: u32,
    off_c: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
    shape: array<vec4<u32>, 2>,
    sa: array<vec4<u32>, 2>,
    sb: array<vec4<u32>, 2>,
    sc: array<vec4<u32>, 2>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<T>;
@group(0) @binding(2) var<storage, read> b: array<T>;
@group(0) @binding(3) var<storage, read> cond: array<U>;
@group(0) @binding(4) var<storage, read_write> out: array<T>;
@group(0) @binding(5) var<storage, read_write> mask: array<f32>;

// CMP_* are emitted by the runtime from CMP_DEFS in src/ops/compare.rs.
override OP: u32 = 0u;
override WG: u32;

fn at(v: array<vec4<u32>, 2>, k: u32) -> u32 {
    return v[k / 4u][k % 4u];
}

// The element offsets of output element i in a, b and the condition.
fn offsets(i: u32) -> vec3<u32> {
    var rem = i;
    var o = vec3<u32>(p.off_a, p.off_b, p.off_c);
    for (var d = i32(p.rank) - 1; d >= 0; d--) {
        let k = u32(d);
        let n = at(p.shape, k);
        let c = rem % n;
        rem = rem / n;
        o += c * vec3<u32>(at(p.sa, k), at(p.sb, k), at(p.sc, k));
    }
    return o;
}

// Whether T is a float type (i32 truncates the half).
const FLOAT_T: bool = T(0.5) != T(0);

// Floats compared on their keys (float_key, lib/activation.wgsl), i32 in itself (exact past 2^24); a NaN operand makes every
// relation false but `ne`, as IEEE and PyTorch say.
fn relation(x: T, y: T) -> bool {
    if (isnan_f(f32(x)) || isnan_f(f32(y))) {
        return OP == CMP_NE;
    }
    if (FLOAT_T) {
        return ordered(float_key(f32(x)), float_key(f32(y)));
    }
    return ordered(u32(i32(x)) ^ 0x80000000u, u32(i32(y)) ^ 0x80000000u);
}

fn ordered(x: u32, y: u32) -> bool {
    switch OP {
        case CMP_EQ: { return x == y; }
        case CMP_NE: { return x != y; }
        case CMP_LT: { return x < y; }
        case CMP_LE: { return x <= y; }
        case CMP_GT: { return x > y; }
        default: { return x >= y; }
    }
}

@compute @workgroup_size(WG)
fn compare(@builtin(workgroup_id) wid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= p.numel) {
        return;
    }
    let o = offsets(i);
    mask[i] = select(0.0, 1.0, relation(a[o.x], b[o.y]));
}

@compute @workgroup_size(WG)
fn select_where(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= p.numel) {
        return;
    }
    let o = offsets(i);
    let c = f32(cond[o.z]);
    // PyTorch's bool(x): true for any non-zero value and for NaN. Tested on the bits: a GPU
    // that flushes subnormals would compare 1e-45 equal to 0.
    if ((bitcast<u32>(c) & 0x7fffffffu) != 0u) {
        out[i] = a[o.x];
    } else {
        out[i] = b[o.y];
    }
}
