// Shared by the convolution kernels (conv.wgsl, conv_sg8.wgsl, conv_wg.wgsl): one implicit GEMM that serves
// forward, data gradient and weight gradient. Per group g (grid z):
//   out[g](row, col) = sum_k A[g](row, k) * B[g](k, col)
// with no im2col buffer. k and col each decompose into three counters (k0, k1, k2) and
// (j0, j1, j2); A is affine in the k counters, B is a gather from a 4-D source whose channel
// offset, row h and column w are sums of a column part and a k part:
//   forward  rows o,  k (c, kh, kw), cols (n, oh, ow): B = x at h = oh*s - pad + kh*d
//   dgrad    rows c,  k (o, kh, kw), cols (n, ih, iw): B = dy at h = (ih + pad - kh*d) / s
//   wgrad    rows o,  k (n, oh, ow), cols (c, kh, kw): B = x at h = kh*d - pad + oh*s
// (the Rust side fills the strides). TRANSPOSED adds the divisibility test of strided dgrad;
// without it the hot loop has no integer division. Split-k: z = split * groups + g.

// K steps the CPU-adapter kernels sum in turn before adding their block to the total (the
// same in lib/gemm_common.wgsl).
const KBLOCK: u32 = 64u;

struct Params {
    m: u32,
    ncols: u32,
    k: u32,
    groups: u32,
    // Extents of k1, k2 and j1, j2 (k0 and j0 are what remains).
    k_e1: u32,
    k_e2: u32,
    c_e1: u32,
    c_e2: u32,
    a_off: u32,
    a_gs: u32,
    a_rs: u32,
    a_s0: u32,
    a_s1: u32,
    a_s2: u32,
    b_off: u32,
    b_gs: u32,
    b_k0: u32,
    b_c0: u32,
    b_k1: i32,
    b_k2: i32,
    b_c1: i32,
    b_c2: i32,
    b_h0: i32,
    b_w0: i32,
    src_h: u32,
    src_w: u32,
    div_h: i32,
    div_w: i32,
    o_gs: u32,
    o_rs: u32,
    o_s0: u32,
    o_s1: u32,
    o_s2: u32,
    splits: u32,
    k_chunk: u32,
    bias_off: u32,
    // Always 1: conv_sg8 copies its accumulators through `scale *` so the copy stays a real
    // transform (a plain copy is merged back and pushes the accumulators out of registers).
    scale: f32,
    // The output's first element in its binding (a window of a tensor larger than one
    // binding; 0 otherwise).
    o_off: u32,
    // Added to the grid z of the split-k partial passes: a window of the K slices (the
    // weight gradient over a tensor larger than one binding) writes its slices' partials.
    z0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<T>;
@group(0) @binding(2) var<storage, read> b: array<T>;
@group(0) @binding(3) var<storage, read> bias: array<T>;
@group(0) @binding(4) var<storage, read_write> out: array<T>;
@group(0) @binding(5) var<storage, read_write> ws: array<f32>;

// BIAS: 1 adds bias[g * m + row]. ACT: see activate() in lib/activation.wgsl.
override BIAS: u32 = 0u;
override ACT: u32 = 0u;
override TRANSPOSED: bool = false;


// One output column as seen by the gather (offset, h and w parts) and by the store, with its
// counters so that neighbouring columns follow without integer division (a vector division is
// a scalar loop on CPU adapters and cost more than the whole depthwise kernel).
struct Col {
    off: u32,
    h: i32,
    w: i32,
    out: u32,
    j: vec3<u32>,
}

fn col_at(g: u32, j: vec3<u32>) -> Col {
    return Col(
        p.b_off + g * p.b_gs + j.x * p.b_c0,
        p.b_h0 + i32(j.y) * p.b_c1,
        p.b_w0 + i32(j.z) * p.b_c2,
        p.o_off + g * p.o_gs + j.x * p.o_s0 + j.y * p.o_s1 + j.z * p.o_s2,
        j,
    );
}

// Column `col_in` (clamped to the last column: ragged lanes load valid data and skip stores).
fn col_state(g: u32, col_in: u32) -> Col {
    let col = min(col_in, p.ncols - 1u);
    let t = col / p.c_e2;
    let j0 = t / p.c_e1;
    return col_at(g, vec3<u32>(j0, t - j0 * p.c_e1, col - t * p.c_e2));
}

// Column `col` given `c`, the state of column `col - by` (clamped like col_state).
fn col_step(g: u32, c: Col, col: u32, by: u32) -> Col {
    if (col >= p.ncols) {
        return col_state(g, col);
    }
    var j = c.j;
    j.z += by;
    while (j.z >= p.c_e2) {
        j.z -= p.c_e2;
        j.y += 1u;
        if (j.y == p.c_e1) {
            j.y = 0u;
            j.x += 1u;
        }
    }
    return col_at(g, j);
}

// The k counters, advanced in order (uniform across the subgroup, so the wraps do not diverge).
struct KIter {
    k0: u32,
    k1: u32,
    k2: u32,
}

fn k_start(k: u32) -> KIter {
    if (p.splits == 1u) {
        return KIter(0u, 0u, 0u);
    }
    let t = k / p.k_e2;
    return KIter(t / p.k_e1, t % p.k_e1, k % p.k_e2);
}

fn k_next(it: KIter) -> KIter {
    var r = it;
    r.k2 += 1u;
    if (r.k2 == p.k_e2) {
        r.k2 = 0u;
        r.k1 += 1u;
        if (r.k1 == p.k_e1) {
            r.k1 = 0u;
            r.k0 += 1u;
        }
    }
    return r;
}

// Element offset of A(row, k) without the row part.
fn a_k(it: KIter) -> u32 {
    return it.k0 * p.a_s0 + it.k1 * p.a_s1 + it.k2 * p.a_s2;
}

fn a_row(g: u32, row: u32) -> u32 {
    return p.a_off + g * p.a_gs + min(row, p.m - 1u) * p.a_rs;
}

// The k part of the gather: offset, h and w.
struct KPart {
    off: u32,
    h: i32,
    w: i32,
}

fn k_part(it: KIter) -> KPart {
    return KPart(it.k0 * p.b_k0, i32(it.k1) * p.b_k1, i32(it.k2) * p.b_k2);
}

// B(k, col): zero outside the source (padding) and, transposed, between strided taps.
fn gather(c: Col, kp: KPart) -> f32 {
    var h = c.h + kp.h;
    var w = c.w + kp.w;
    var ok = true;
    if (TRANSPOSED) {
        let hq = h / p.div_h;
        let wq = w / p.div_w;
        ok = h >= 0 && w >= 0 && hq * p.div_h == h && wq * p.div_w == w;
        h = hq;
        w = wq;
    }
    ok = ok && u32(h) < p.src_h && u32(w) < p.src_w;
    let idx = c.off + kp.off + u32(h) * p.src_w + u32(w);
    return select(0.0, f32(b[select(0u, idx, ok)]), ok);
}

// Group of grid z (split-k: z = split * groups + g); without a split z is the group.
fn group_of(z: u32) -> u32 {
    if (p.splits == 1u) {
        return z;
    }
    return z % p.groups;
}

fn k_range(z: u32) -> vec2<u32> {
    if (p.splits == 1u) {
        return vec2<u32>(0u, p.k);
    }
    // As GEMM's k_range: the end is kb + min(k_chunk, k - kb), which cannot wrap.
    let kb = min((z / p.groups) * p.k_chunk, p.k);
    return vec2<u32>(kb, kb + min(p.k_chunk, p.k - kb));
}

fn store_out(g: u32, row: u32, col: u32, c: Col, v: f32) {
    if (row < p.m && col < p.ncols) {
        var y = v;
        if (BIAS == 1u) {
            y += f32(bias[p.bias_off + g * p.m + row]);
        }
        out[c.out + row * p.o_rs] = T(activate(y, ACT));
    }
}

fn store_ws(z: u32, row: u32, col: u32, v: f32) {
    if (row < p.m && col < p.ncols) {
        ws[(z * p.m + row) * p.ncols + col] = v;
    }
}

// The 4 columns c0.. of a row; `cs` are their states (from cols4).
fn store_row4(g: u32, row: u32, c0: u32, cs: array<Col, 4>, v: vec4<f32>) {
    store_out(g, row, c0, cs[0], v.x);
    store_out(g, row, c0 + 1u, cs[1], v.y);
    store_out(g, row, c0 + 2u, cs[2], v.z);
    store_out(g, row, c0 + 3u, cs[3], v.w);
}

fn cols4(g: u32, c0: u32) -> array<Col, 4> {
    let c_0 = col_state(g, c0);
    let c_1 = col_step(g, c_0, c0 + 1u, 1u);
    let c_2 = col_step(g, c_1, c0 + 2u, 1u);
    return array<Col, 4>(c_0, c_1, c_2, col_step(g, c_2, c0 + 3u, 1u));
}

fn store_row4_ws(z: u32, row: u32, c0: u32, v: vec4<f32>) {
    store_ws(z, row, c0, v.x);
    store_ws(z, row, c0 + 1u, v.y);
    store_ws(z, row, c0 + 2u, v.z);
    store_ws(z, row, c0 + 3u, v.w);
}
