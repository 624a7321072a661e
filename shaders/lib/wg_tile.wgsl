// The large-tile core of the GPU kernels (gemm_wg.wgsl, conv_wg.wgsl, rnn_wg.wgsl,
// rnn_backward_wg.wgsl): an output tile of BM = 16 TM rows x BN = 16 TN columns per 16x16
// workgroup, TM x TN outputs per invocation, the operand tiles staged through workgroup memory
// KT = 8 steps of K at a time, double buffered.
// The including kernel owns the loads (GEMM reads through strides, convolution gathers, the
// recurrent steps read state rows); this file owns the staged layout, the double-buffered K
// loop and the FMA loop, so every kernel runs the same core. The kernel defines:
//   struct Ctx                      what its loads need (bases, counters, ...)
//   fn k_fast(ctx: ptr<function, Ctx>) -> vec2<bool>
//                                   whether A and B are staged k-fast (see quad_pos)
//   fn load_step(ctx: ptr<function, Ctx>, k0: u32, kend: u32, li: u32) -> Staged
//                                   element q of invocation li's quads of the K step at k0, at
//                                   a_pos / b_pos, 0 for k >= kend (it may advance ctx); only
//                                   the quads it owns (a_owns / b_owns) are stored, so it
//                                   should skip the loads of the others
//
// Invocation (tx, ty) owns rows ty*TM .. ty*TM + TM - 1 and, for TN = 4, columns tx*4 .. +3
// (acc[i]); for TN = 8 also columns 64 + tx*4 .. +3 (acc[8 + i]). The two column halves keep
// the 16 invocations of a row reading 16 consecutive vec4 of B (conflict-free) where 8
// consecutive columns each would read every other vec4.
//
// Layout: A is staged transposed (wa[k][m]) and B as is (wb[k][n]), both as rows of 32 vec4
// (128 values, the widest tile): a K step costs TM / 4 + TN / 4 workgroup vec4 loads for TM TN
// FMAs (the A loads are broadcasts: the same words for the 16 invocations of a row). Instead
// of padding, vec4 v of staged row k sits at slot v ^ k (`slot`): 8 lanes storing the quads of
// a k-fast operand (8 k of the same 4 rows) then touch distinct banks, a warp
// reading a row still reads a permutation of its vec4, and the two operands' double buffers
// take exactly 16 KiB, WebGPU's default limit.

// Rows per invocation: 4 (64-row tiles) or 8 (128-row tiles).
override TM: u32 = 8u;
// Columns per invocation: 4 (64-column tiles) or 8 (128-column tiles).
override TN: u32 = 4u;

const WX: u32 = 16u;
const WY: u32 = 16u;
const KT: u32 = 8u;
// vec4 per staged row.
const SROW: u32 = 32u;

var<workgroup> wa: array<vec4<f32>, 2u * KT * SROW>;
var<workgroup> wb: array<vec4<f32>, 2u * KT * SROW>;

// Rows of the output tile: 16 * TM.
fn tile_rows() -> u32 {
    return WY * TM;
}

// Columns of the output tile: 16 * TN.
fn tile_cols() -> u32 {
    return WX * TN;
}

// Invocations stage whole vec4 ("quads": 4 consecutive rows of A or columns of B at one k),
// never single components: a write to one component of a vector may access the whole vector
// (WGSL's memory model; MSL and HLSL compile it so), so invocations writing different
// components of one staged vec4 in the same barrier interval would race and lose values on
// Metal and D3D12. A K step has BM * KT / 4 = 32 TM quads of A and 32 TN of B (128 or 256
// for 256 invocations): invocation li stages A's quad li where li < 32 TM, and B's quad
// li - (256 - 32 TN) where li >= 256 - 32 TN (so with 64-wide tiles of both, the two halves
// of the workgroup load one operand each).
fn a_owns(li: u32) -> bool {
    return li < 32u * TM;
}

fn b_owns(li: u32) -> bool {
    return li >= WX * WY - 32u * TN;
}

// Elements of each operand an owning invocation stages per K step: one quad.
fn a_per() -> u32 {
    return 4u;
}

fn b_per() -> u32 {
    return 4u;
}

// The array index of vec4 `v` of staged row `row` (buffer * KT + k; row % KT = k).
fn slot(row: u32, v: u32) -> u32 {
    return row * SROW + (v ^ (row % KT));
}

// (row or column within the tile, k within the step) of element q of quad u of an operand
// tile of `len` rows or columns: k-fast when the operand is contiguous along K (8 neighbouring
// invocations read 8 consecutive k of one row: 32-byte segments), else along the tile (each
// invocation reads 4 consecutive values).
fn quad_pos(u: u32, q: u32, len: u32, k_fast: bool) -> vec2<u32> {
    if (k_fast) {
        return vec2<u32>(4u * (u / KT) + q, u % KT);
    }
    let w = len / 4u;
    return vec2<u32>(4u * (u % w) + q, u / w);
}

// (row, k) within the step of invocation li's A element q, and (column, k) of its B element q;
// meaningful where the invocation owns a quad of that operand (`a_owns`, `b_owns`).
fn a_pos(li: u32, q: u32, k_fast: bool) -> vec2<u32> {
    return quad_pos(li, q, tile_rows(), k_fast);
}

fn b_pos(li: u32, q: u32, k_fast: bool) -> vec2<u32> {
    return quad_pos(li - (WX * WY - 32u * TN), q, tile_cols(), k_fast);
}

// One K step's share of one invocation: a quad of A and one of B where it owns them.
struct Staged {
    a: array<f32, 4>,
    b: array<f32, 4>,
}

// acc[i][j] += sum over the KT staged steps of buffer `buf` of A[ty*TM + i, k] B[k, tx*4 + j],
// and for TN = 8 acc[8 + i][j] the same for column 64 + tx*4 + j.
fn fma_tile(buf: u32, lid: vec3<u32>, acc: ptr<function, array<vec4<f32>, 16>>) {
    for (var kk = 0u; kk < KT; kk++) {
        let row = buf * KT + kk;
        let b0 = wb[slot(row, lid.x)];
        var b1 = vec4<f32>(0.0);
        if (TN == 8u) {
            b1 = wb[slot(row, lid.x + 16u)];
        }
        for (var h = 0u; h < TM / 4u; h++) {
            let av = wa[slot(row, lid.y * (TM / 4u) + h)];
            (*acc)[4u * h] = fma(vec4<f32>(av.x), b0, (*acc)[4u * h]);
            (*acc)[4u * h + 1u] = fma(vec4<f32>(av.y), b0, (*acc)[4u * h + 1u]);
            (*acc)[4u * h + 2u] = fma(vec4<f32>(av.z), b0, (*acc)[4u * h + 2u]);
            (*acc)[4u * h + 3u] = fma(vec4<f32>(av.w), b0, (*acc)[4u * h + 3u]);
            if (TN == 8u) {
                (*acc)[8u + 4u * h] = fma(vec4<f32>(av.x), b1, (*acc)[8u + 4u * h]);
                (*acc)[9u + 4u * h] = fma(vec4<f32>(av.y), b1, (*acc)[9u + 4u * h]);
                (*acc)[10u + 4u * h] = fma(vec4<f32>(av.z), b1, (*acc)[10u + 4u * h]);
                (*acc)[11u + 4u * h] = fma(vec4<f32>(av.w), b1, (*acc)[11u + 4u * h]);
            }
        }
    }
}

// Writes a loaded step into buffer `buf` of the staged tiles: each owned quad as one vec4.
fn store_step(s: Staged, buf: u32, li: u32, kf: vec2<bool>) {
    if (a_owns(li)) {
        let pa = a_pos(li, 0u, kf.x);
        wa[slot(buf * KT + pa.y, pa.x / 4u)] = vec4<f32>(s.a[0], s.a[1], s.a[2], s.a[3]);
    }
    if (b_owns(li)) {
        let pb = b_pos(li, 0u, kf.y);
        wb[slot(buf * KT + pb.y, pb.x / 4u)] = vec4<f32>(s.b[0], s.b[1], s.b[2], s.b[3]);
    }
}

// The TM x TN block of invocation (tx, ty) summed over k in kr: acc[i][j] = sum_k
// A[ty*TM + i, k] B[k, tx*4 + j] of the tile the kernel's loads describe (TN = 8: acc[8 + i][j]
// for column 64 + tx*4 + j). Double buffered:
// the next step's elements are loaded into registers before the FMAs on the current buffer and
// stored into the other buffer after them, one barrier per step. Every barrier is in uniform
// control flow as long as kr is uniform across the workgroup.
fn tile_k(ctx: ptr<function, Ctx>, kr: vec2<u32>, lid: vec3<u32>) -> array<vec4<f32>, 16> {
    let li = lid.x + lid.y * WX;
    let kf = k_fast(ctx);
    let steps = (kr.y - kr.x + KT - 1u) / KT;
    var acc: array<vec4<f32>, 16>;
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
