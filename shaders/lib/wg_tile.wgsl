// The large-tile core of the GPU kernels (gemm_wg.wgsl, conv_wg.wgsl, rnn_wg.wgsl,
// rnn_backward_wg.wgsl): an output tile of
// BM = 16 TM rows x BN = 64 columns per 16x16 workgroup, TM x 4 outputs per invocation, the
// operand tiles staged through workgroup memory KT = 8 steps of K at a time, double buffered.
// The including kernel owns the loads (GEMM reads through strides, convolution gathers, the
// recurrent steps read state rows); this file owns the staged layout, the double-buffered K
// loop and the FMA loop, so every kernel runs the same core. The kernel defines:
//   struct Ctx                      what its loads need (bases, counters, ...)
//   fn k_fast(ctx: ptr<function, Ctx>) -> vec2<bool>
//                                   whether A and B are staged k-fast (see stage_pos)
//   fn load_step(ctx: ptr<function, Ctx>, k0: u32, kend: u32, li: u32) -> Staged
//                                   element q of invocation li's share of the K step at k0, at
//                                   a_pos / b_pos, 0 for k >= kend (it may advance ctx)
//
// Layout: A is staged transposed (wa[k][m]) and B as is (wb[k][n]), both as vec4 rows padded
// by one vec4 (33 and 17 vec4): invocation (tx, ty) reads its TM rows as TM / 4 vec4 (the same
// words for the 16 invocations of a row: a broadcast) and its 4 columns tx*4.. as one vec4 (16
// consecutive vec4 across a row), so a K step costs TM / 4 + 1 workgroup loads for 4 TM FMAs.
// A scalar store at (k, m) hits word k * 132 + m: a warp storing a k-fast operand (8 k of 4
// rows) touches 32 distinct banks. Sized for TM = 8 (12.5 KiB, within WebGPU's default
// 16 KiB); TM = 4 uses the first half of each A row.

// Rows per invocation: 4 (64 x 64 tiles) or 8 (128 x 64 tiles).
override TM: u32 = 8u;

const WX: u32 = 16u;
const WY: u32 = 16u;
const KT: u32 = 8u;
const BN: u32 = 64u;
const SA: u32 = 33u;
const SB: u32 = 17u;
// Elements of B each invocation stages per K step (BN * KT / 256).
const B_PER: u32 = 2u;

var<workgroup> wa: array<vec4<f32>, 2u * KT * SA>;
var<workgroup> wb: array<vec4<f32>, 2u * KT * SB>;

// Rows of the output tile: 16 * TM.
fn tile_rows() -> u32 {
    return WY * TM;
}

// Elements of A each invocation stages per K step (BM * KT / 256 = TM / 2).
fn a_per() -> u32 {
    return TM / 2u;
}

// (row or column within the tile, k within the step) of staged element `e` of an operand
// tile of `len` rows or columns: k-fast when the operand is contiguous along K (8 neighbouring
// invocations read 8 consecutive k of one row: 32-byte segments), else along the tile.
fn stage_pos(e: u32, len: u32, k_fast: bool) -> vec2<u32> {
    if (k_fast) {
        return vec2<u32>(e / KT, e % KT);
    }
    return vec2<u32>(e % len, e / len);
}

// (row, k) within the step of invocation li's A element q, and (column, k) of its B element q.
fn a_pos(li: u32, q: u32, k_fast: bool) -> vec2<u32> {
    return stage_pos(li + q * WX * WY, tile_rows(), k_fast);
}

fn b_pos(li: u32, q: u32, k_fast: bool) -> vec2<u32> {
    return stage_pos(li + q * WX * WY, BN, k_fast);
}

// One K step's share of one invocation: TM / 2 <= 4 elements of A and 2 of B.
struct Staged {
    a: array<f32, 4>,
    b: array<f32, 2>,
}

fn put_a(buf: u32, m: u32, k: u32, v: f32) {
    wa[(buf * KT + k) * SA + m / 4u][m % 4u] = v;
}

fn put_b(buf: u32, k: u32, n: u32, v: f32) {
    wb[(buf * KT + k) * SB + n / 4u][n % 4u] = v;
}

// acc[i][j] += sum over the KT staged steps of buffer `buf` of A[ty*TM + i, k] B[k, tx*4 + j].
fn fma_tile(buf: u32, lid: vec3<u32>, acc: ptr<function, array<vec4<f32>, 8>>) {
    for (var kk = 0u; kk < KT; kk++) {
        let ao = (buf * KT + kk) * SA + lid.y * (TM / 4u);
        let bv = wb[(buf * KT + kk) * SB + lid.x];
        for (var h = 0u; h < TM / 4u; h++) {
            let av = wa[ao + h];
            (*acc)[4u * h] = fma(vec4<f32>(av.x), bv, (*acc)[4u * h]);
            (*acc)[4u * h + 1u] = fma(vec4<f32>(av.y), bv, (*acc)[4u * h + 1u]);
            (*acc)[4u * h + 2u] = fma(vec4<f32>(av.z), bv, (*acc)[4u * h + 2u]);
            (*acc)[4u * h + 3u] = fma(vec4<f32>(av.w), bv, (*acc)[4u * h + 3u]);
        }
    }
}

// Writes a loaded step into buffer `buf` of the staged tiles.
fn store_step(s: Staged, buf: u32, li: u32, kf: vec2<bool>) {
    for (var q = 0u; q < a_per(); q++) {
        let pa = a_pos(li, q, kf.x);
        put_a(buf, pa.x, pa.y, s.a[q]);
    }
    for (var q = 0u; q < B_PER; q++) {
        let pb = b_pos(li, q, kf.y);
        put_b(buf, pb.y, pb.x, s.b[q]);
    }
}

// The TM x 4 block of invocation (tx, ty) summed over k in kr: acc[i][j] = sum_k
// A[ty*TM + i, k] B[k, tx*4 + j] of the tile the kernel's loads describe. Double buffered:
// the next step's elements are loaded into registers before the FMAs on the current buffer and
// stored into the other buffer after them, one barrier per step. Every barrier is in uniform
// control flow as long as kr is uniform across the workgroup.
fn tile_k(ctx: ptr<function, Ctx>, kr: vec2<u32>, lid: vec3<u32>) -> array<vec4<f32>, 8> {
    let li = lid.x + lid.y * WX;
    let kf = k_fast(ctx);
    let steps = (kr.y - kr.x + KT - 1u) / KT;
    var acc: array<vec4<f32>, 8>;
    store_step(load_step(ctx, kr.x, kr.y, li), 0u, li, kf);
    workgroupBarrier();
    for (var t = 0u; t < steps; t++) {
        let cur = t & 1u;
        let more = t + 1u < steps;
        var next: Staged;
        if (more) {
            next = load_step(ctx, kr.x + (t + 1u) * KT, kr.y, li);
        }
        fma_tile(cur, lid, &acc);
        if (more) {
            store_step(next, 1u - cur, li, kf);
        }
        workgroupBarrier();
    }
    return acc;
}
