// Shared by the GEMM kernels (gemm.wgsl, gemm_sg8.wgsl, gemm_wg.wgsl, gemm_coop.wgsl,
// gemm_coop_partial.wgsl): parameters, bindings, batch decode, the staging kernels' operand
// walks,
// the fused epilogue and the two ways a tile leaves the kernel (final output or split-k slice).
//
// out[z] = act(alpha * A[z] B[z] + beta * C[z] + bias), every operand read through element
// strides, so transposed and broadcast views cost nothing. Split-k: grid z = split * batch + b;
// slice `split` covers k in [split * k_chunk, min(k, (split + 1) * k_chunk)) and writes raw f32
// partial sums to the workspace ws[z, m, n]; `splitk_reduce` sums the slices in a fixed order.

// K steps the CPU-adapter kernels sum in turn before adding their block to the total (the
// same in lib/conv_common.wgsl).
const KBLOCK: u32 = 64u;

struct Params {
    m: u32,
    n: u32,
    k: u32,
    batch: u32,
    a_off: u32,
    a_rs: u32,
    a_cs: u32,
    splits: u32,
    b_off: u32,
    b_rs: u32,
    b_cs: u32,
    k_chunk: u32,
    c_off: u32,
    c_rs: u32,
    c_cs: u32,
    bias_off: u32,
    alpha: f32,
    beta: f32,
    batch_rank: u32,
    bias_stride: u32,
    bshape: vec4<u32>,
    a_bs: vec4<u32>,
    b_bs: vec4<u32>,
    c_bs: vec4<u32>,
    // 0 none, 1 a separate C tensor, 2 in place (out holds C).
    c_mode: u32,
    // 0 none, 1 per column, 2 per row.
    bias_mode: u32,
    // The output's row stride (n, except in a window of a wider output) and its first
    // element (0, except in a window; in place the output starts at c_off instead).
    o_rs: u32,
    o_off: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<T>;
@group(0) @binding(2) var<storage, read> b: array<T>;
@group(0) @binding(3) var<storage, read> cin: array<T>;
@group(0) @binding(4) var<storage, read> bias: array<T>;
@group(0) @binding(5) var<storage, read_write> out: array<T>;
@group(0) @binding(6) var<storage, read_write> ws: array<f32>;

// ACT: see activate() in lib/activation.wgsl. Where C and the bias come from are uniforms
// (p.c_mode, p.bias_mode), not overrides: every epilogue shares one pipeline, so a model's
// first GEMMs with and without bias or C compile once (a pipeline costs ~200 ms on lavapipe),
// for a branch per stored element.
override ACT: u32 = 0u;

struct Bases {
    a: u32,
    b: u32,
    c: u32,
    o: u32,
}

// Element offsets of batch entry `z % batch` in A, B, C and the contiguous output.
fn bases(z: u32) -> Bases {
    let bi = z % p.batch;
    var rem = bi;
    var ao = p.a_off;
    var bo = p.b_off;
    var co = p.c_off;
    for (var d = i32(p.batch_rank) - 1; d >= 0; d--) {
        let e = u32(d);
        let n = p.bshape[e];
        let c = rem % n;
        rem = rem / n;
        ao += c * p.a_bs[e];
        bo += c * p.b_bs[e];
        co += c * p.c_bs[e];
    }
    // In place (c_mode 2) the output is the C view, which may start at element c_off.
    let oo = select(p.o_off, p.c_off, p.c_mode == 2u);
    return Bases(ao, bo, co, oo + bi * p.m * p.n);
}

// (z / batch) * k_chunk <= k (the plan makes splits = ceil(k / k_chunk)); the end is computed
// as kb + min(k_chunk, k - kb) so that it cannot wrap past 2^32.
fn k_range(z: u32) -> vec2<u32> {
    let kb = min((z / p.batch) * p.k_chunk, p.k);
    return vec2<u32>(kb, kb + min(p.k_chunk, p.k - kb));
}

// One invocation's share of an operand's K steps in the staging kernels (gemm_wg.wgsl,
// lib/coop_tile.wgsl), fixed for the whole K loop: its element q sits at tile position
// t + q * tq (a row of A or a column of B, counted from the matrix's first) and at k + q * kq
// within the step, and the step at k0 reads it from global element g + q * gq + k0 * gk.
// Both kernels place an invocation's elements at positions affine in q (lib/coop_tile.wgsl:
// element li + q * 256 of the step, at (e / 16, e % 16) or (e % 128, e / 128);
// lib/wg_tile.wgsl: a quad of 4 consecutive rows or columns at one k), so computing this once
// leaves each staged value a multiply-add of address and two compares, where decoding its
// position every step cost several times that.
struct Walk {
    t: u32,
    tq: u32,
    k: u32,
    kq: u32,
    g: u32,
    gq: u32,
    gk: u32,
}

// Whether the staging kernels stage A and B k-fast (consecutive invocations along K): where
// the operand is contiguous along K, so that reads coalesce for plain and transposed views.
fn stage_k_fast() -> vec2<bool> {
    return vec2<bool>(p.a_cs == 1u, p.b_rs == 1u && p.b_cs != 1u);
}

// The walk whose elements 0 and 1 sit at (tile position, k) p0 and p1 of a tile that starts
// at t0 of an operand read at base + t * ts + k * ks.
fn walk(p0: vec2<u32>, p1: vec2<u32>, t0: u32, base: u32, ts: u32, ks: u32) -> Walk {
    let d = p1 - p0;
    let t = t0 + p0.x;
    return Walk(t, d.x, p0.y, d.y, base + t * ts + p0.y * ks, d.x * ts + d.y * ks, ks);
}

// The walk of A over the tile's rows from r0, of B over its columns from c0.
fn walk_a(p0: vec2<u32>, p1: vec2<u32>, r0: u32, bs: Bases) -> Walk {
    return walk(p0, p1, r0, bs.a, p.a_rs, p.a_cs);
}

fn walk_b(p0: vec2<u32>, p1: vec2<u32>, c0: u32, bs: Bases) -> Walk {
    return walk(p0, p1, c0, bs.b, p.b_cs, p.b_rs);
}

// Whether element q of the step at k0 lies inside the operand (tile positions below `len`:
// M for A, N for B; k below kend); outside, the kernels stage 0.
fn walk_in(w: Walk, q: u32, len: u32, k0: u32, kend: u32) -> bool {
    return w.t + q * w.tq < len && k0 + w.k + q * w.kq < kend;
}

// The global index of element q of the step at k0.
fn walk_at(w: Walk, q: u32, k0: u32) -> u32 {
    return w.g + k0 * w.gk + q * w.gq;
}

// `y` = alpha * (A B)[row, col]; adds C and bias, applies the activation.
fn epilogue_scaled(y_in: f32, row: u32, col: u32, bs: Bases) -> f32 {
    var y = y_in;
    if (p.c_mode == 1u) {
        y += p.beta * f32(cin[bs.c + row * p.c_rs + col * p.c_cs]);
    }
    // beta = 0 does not read the in-place target (BLAS / PyTorch: NaN and inf in C are not
    // propagated, C may be uninitialized), like a separate C, which is dropped when beta = 0.
    if (p.c_mode == 2u && p.beta != 0.0) {
        y += p.beta * f32(out[bs.o + row * p.o_rs + col]);
    }
    if (p.bias_mode == 1u) {
        y += f32(bias[p.bias_off + col * p.bias_stride]);
    }
    if (p.bias_mode == 2u) {
        y += f32(bias[p.bias_off + row * p.bias_stride]);
    }
    return activate(y, ACT);
}

fn store_scaled(row: u32, col: u32, y: f32, bs: Bases) {
    if (row < p.m && col < p.n) {
        out[bs.o + row * p.o_rs + col] = T(epilogue_scaled(y, row, col, bs));
    }
}

fn store_out(row: u32, col: u32, v: f32, bs: Bases) {
    store_scaled(row, col, p.alpha * v, bs);
}

fn store_ws(z: u32, row: u32, col: u32, v: f32) {
    if (row < p.m && col < p.n) {
        ws[(z * p.m + row) * p.n + col] = v;
    }
}
