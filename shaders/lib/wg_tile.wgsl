// The large-tile core of the GPU kernels (gemm_wg.wgsl, conv_wg.wgsl, rnn_wg.wgsl,
// rnn_backward_wg.wgsl): an output tile of
// BM = 16 TM rows x BN = 64 columns per 16x16 workgroup, TM x 4 outputs per invocation, the
// operand tiles staged through workgroup memory KT = 8 steps of K at a time, double buffered.
// The including kernel owns the K loop and the loads (GEMM reads through strides, convolution
// gathers); this file owns the staged layout and the FMA loop, so both run the same core.
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
