// Workgroup-memory tiled GEMM for GPUs (the plan picks it whenever the adapter is not a CPU).
// A 16x16 workgroup computes a 64x64 output tile; invocation (tx, ty) holds a 4x4 register
// block at rows ty + 16 i and columns tx + 16 j (i, j = 0..3), so neighbouring invocations
// read neighbouring workgroup-memory words and store neighbouring output columns.
// K advances KT steps at a time: the A tile [BM x KT] and the B tile [KT x BN] are staged in
// workgroup memory, A transposed (wa[kk][m]) so both are read along a row. Rows are padded to
// BM + 4 (and BN + 4) words: a warp storing a k-fast operand (8 k by 4 rows) then hits 32
// distinct banks. Every invocation loads BM * KT / 256 elements of each operand through the
// operand strides (k-fast when the operand is contiguous along K, else along M / N, so global
// reads coalesce for plain and transposed views alike); out-of-range elements (ragged M, N
// and the last K step) are staged as 0, so the FMA loop needs no bounds. Double buffered: the
// next step's elements are loaded into registers before the FMAs on the current buffer and
// stored into the other buffer after them, one barrier per K step. 2 x KT x (68 + 68) f32 =
// 8.5 KiB at KT = 8, within WebGPU's default 16 KiB.
// Every barrier is in uniform control flow: the K loop's bounds come from uniforms and the
// workgroup id only. Needs lib/activation.wgsl and lib/gemm_common.wgsl.

// K steps per staged tile: 4 or 8 (16 would need 17 KiB of workgroup memory; the staging
// registers hold KT / 4 <= 4 elements).
override KT: u32 = 8u;

// Workgroup 16 x 16, register block 4 x 4, so a 64 x 64 output tile.
const WX: u32 = 16u;
const WY: u32 = 16u;
const BM: u32 = 64u;
const BN: u32 = 64u;
// Padded row lengths of the staged tiles.
const SA: u32 = BM + 4u;
const SB: u32 = BN + 4u;

var<workgroup> wa: array<f32, 2u * KT * SA>;
var<workgroup> wb: array<f32, 2u * KT * SB>;

// One K step's share of one invocation: KT / 4 elements of A and of B, and where they go.
struct Staged {
    a: array<f32, 4>,
    b: array<f32, 4>,
}

// (row or column within the tile, k within the step) of element `e` of an operand tile of
// `len` rows or columns; k-fast when the operand is contiguous along K.
fn stage_pos(e: u32, len: u32, k_fast: bool) -> vec2<u32> {
    if (k_fast) {
        return vec2<u32>(e / KT, e % KT);
    }
    return vec2<u32>(e % len, e / len);
}

// Loads the A and B elements of the K step starting at k0 (k below kend) into registers.
fn load_step(bs: Bases, r0: u32, c0: u32, k0: u32, kend: u32, li: u32) -> Staged {
    var s: Staged;
    let a_kf = p.a_cs == 1u;
    let b_kf = p.b_rs == 1u && p.b_cs != 1u;
    for (var q = 0u; q < KT / 4u; q++) {
        let e = li + q * WX * WY;
        let pa = stage_pos(e, BM, a_kf);
        let ra = r0 + pa.x;
        let ka = k0 + pa.y;
        var va = 0.0;
        if (ra < p.m && ka < kend) {
            va = f32(a[bs.a + ra * p.a_rs + ka * p.a_cs]);
        }
        s.a[q] = va;
        let pb = stage_pos(e, BN, b_kf);
        let cb = c0 + pb.x;
        let kb = k0 + pb.y;
        var vb = 0.0;
        if (cb < p.n && kb < kend) {
            vb = f32(b[bs.b + kb * p.b_rs + cb * p.b_cs]);
        }
        s.b[q] = vb;
    }
    return s;
}

// Writes a loaded step into buffer `buf` of the staged tiles.
fn store_step(s: Staged, buf: u32, li: u32) {
    let a_kf = p.a_cs == 1u;
    let b_kf = p.b_rs == 1u && p.b_cs != 1u;
    for (var q = 0u; q < KT / 4u; q++) {
        let e = li + q * WX * WY;
        let pa = stage_pos(e, BM, a_kf);
        wa[(buf * KT + pa.y) * SA + pa.x] = s.a[q];
        let pb = stage_pos(e, BN, b_kf);
        wb[(buf * KT + pb.y) * SB + pb.x] = s.b[q];
    }
}

// The 4x4 block of invocation (tx, ty) in the tile at (r0, c0), summed over k in kr:
// acc[i][j] = sum_k A[r0 + ty + 16 i, k] B[k, c0 + tx + 16 j].
fn tile_wg(bs: Bases, r0: u32, c0: u32, kr: vec2<u32>, lid: vec3<u32>) -> array<vec4<f32>, 4> {
    let li = lid.x + lid.y * WX;
    let steps = (kr.y - kr.x + KT - 1u) / KT;
    var acc: array<vec4<f32>, 4>;
    store_step(load_step(bs, r0, c0, kr.x, kr.y, li), 0u, li);
    workgroupBarrier();
    for (var t = 0u; t < steps; t++) {
        let cur = t & 1u;
        let more = t + 1u < steps;
        var next: Staged;
        if (more) {
            next = load_step(bs, r0, c0, kr.x + (t + 1u) * KT, kr.y, li);
        }
        for (var kk = 0u; kk < KT; kk++) {
            let ao = (cur * KT + kk) * SA + lid.y;
            let bo = (cur * KT + kk) * SB + lid.x;
            let bv = vec4<f32>(wb[bo], wb[bo + 16u], wb[bo + 32u], wb[bo + 48u]);
            acc[0] = fma(vec4<f32>(wa[ao]), bv, acc[0]);
            acc[1] = fma(vec4<f32>(wa[ao + 16u]), bv, acc[1]);
            acc[2] = fma(vec4<f32>(wa[ao + 32u]), bv, acc[2]);
            acc[3] = fma(vec4<f32>(wa[ao + 48u]), bv, acc[3]);
        }
        if (more) {
            store_step(next, 1u - cur, li);
        }
        workgroupBarrier();
    }
    return acc;
}

@compute @workgroup_size(16, 16)
fn gemm_wg(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let r0 = wid.y * BM;
    let c0 = wid.x * BN;
    let bs = bases(wid.z);
    let acc = tile_wg(bs, r0, c0, k_range(wid.z), lid);
    for (var i = 0u; i < 4u; i++) {
        let row = r0 + lid.y + 16u * i;
        let v = acc[i];
        store_out(row, c0 + lid.x, v.x, bs);
        store_out(row, c0 + lid.x + 16u, v.y, bs);
        store_out(row, c0 + lid.x + 32u, v.z, bs);
        store_out(row, c0 + lid.x + 48u, v.w, bs);
    }
}

@compute @workgroup_size(16, 16)
fn gemm_wg_partial(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let r0 = wid.y * BM;
    let c0 = wid.x * BN;
    let acc = tile_wg(bases(wid.z), r0, c0, k_range(wid.z), lid);
    for (var i = 0u; i < 4u; i++) {
        let row = r0 + lid.y + 16u * i;
        let v = acc[i];
        store_ws(wid.z, row, c0 + lid.x, v.x);
        store_ws(wid.z, row, c0 + lid.x + 16u, v.y);
        store_ws(wid.z, row, c0 + lid.x + 32u, v.z);
        store_ws(wid.z, row, c0 + lid.x + 48u, v.w);
    }
}
