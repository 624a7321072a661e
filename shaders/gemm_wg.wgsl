// Workgroup-memory tiled GEMM for GPUs (the plan picks it whenever the adapter is not a CPU):
// lib/wg_tile.wgsl's core, a 16 TM x 64 output tile per 16x16 workgroup, TM x 4 per
// invocation (rows ty*TM.., columns tx*4..). Every invocation stages TM / 2 elements of A and
// 2 of B per K step through the operand strides: k-fast when the operand is contiguous along
// K, else along M / N, so global reads coalesce for plain and transposed views alike.
// Out-of-range elements (ragged M, N and the last K step) are staged as 0, so the FMA loop
// needs no bounds. Double buffered: the next step's elements are loaded into registers before
// the FMAs on the current buffer and stored into the other buffer after them, one barrier per
// K step. Every barrier is in uniform control flow: the K loop's bounds come from uniforms and
// the workgroup id only. Needs lib/activation.wgsl, lib/gemm_common.wgsl, lib/wg_tile.wgsl.

// One K step's share of one invocation: TM / 2 <= 4 elements of A and 2 of B.
struct Staged {
    a: array<f32, 4>,
    b: array<f32, 2>,
}

// Loads the A and B elements of the K step starting at k0 (k below kend) into registers.
fn load_step(bs: Bases, r0: u32, c0: u32, k0: u32, kend: u32, li: u32) -> Staged {
    var s: Staged;
    let a_kf = p.a_cs == 1u;
    let b_kf = p.b_rs == 1u && p.b_cs != 1u;
    for (var q = 0u; q < a_per(); q++) {
        let pa = stage_pos(li + q * WX * WY, tile_rows(), a_kf);
        let ra = r0 + pa.x;
        let ka = k0 + pa.y;
        var va = 0.0;
        if (ra < p.m && ka < kend) {
            va = f32(a[bs.a + ra * p.a_rs + ka * p.a_cs]);
        }
        s.a[q] = va;
    }
    for (var q = 0u; q < B_PER; q++) {
        let pb = stage_pos(li + q * WX * WY, BN, b_kf);
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
    for (var q = 0u; q < a_per(); q++) {
        let pa = stage_pos(li + q * WX * WY, tile_rows(), a_kf);
        put_a(buf, pa.x, pa.y, s.a[q]);
    }
    for (var q = 0u; q < B_PER; q++) {
        let pb = stage_pos(li + q * WX * WY, BN, b_kf);
        put_b(buf, pb.y, pb.x, s.b[q]);
    }
}

// The TM x 4 block of invocation (tx, ty) in the tile at (r0, c0), summed over k in kr.
fn tile_wg(bs: Bases, r0: u32, c0: u32, kr: vec2<u32>, lid: vec3<u32>) -> array<vec4<f32>, 8> {
    let li = lid.x + lid.y * WX;
    let steps = (kr.y - kr.x + KT - 1u) / KT;
    var acc: array<vec4<f32>, 8>;
    store_step(load_step(bs, r0, c0, kr.x, kr.y, li), 0u, li);
    workgroupBarrier();
    for (var t = 0u; t < steps; t++) {
        let cur = t & 1u;
        let more = t + 1u < steps;
        var next: Staged;
        if (more) {
            next = load_step(bs, r0, c0, kr.x + (t + 1u) * KT, kr.y, li);
        }
        fma_tile(cur, lid, &acc);
        if (more) {
            store_step(next, 1u - cur, li);
        }
        workgroupBarrier();
    }
    return acc;
}

@compute @workgroup_size(16, 16)
fn gemm_wg(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let r0 = wid.y * tile_rows();
    let c0 = wid.x * BN;
    let bs = bases(wid.z);
    let acc = tile_wg(bs, r0, c0, k_range(wid.z), lid);
    let col = c0 + lid.x * 4u;
    for (var i = 0u; i < TM; i++) {
        let row = r0 + lid.y * TM + i;
        let v = acc[i];
        store_out(row, col, v.x, bs);
        store_out(row, col + 1u, v.y, bs);
        store_out(row, col + 2u, v.z, bs);
        store_out(row, col + 3u, v.w, bs);
    }
}

@compute @workgroup_size(16, 16)
fn gemm_wg_partial(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let r0 = wid.y * tile_rows();
    let c0 = wid.x * BN;
    let acc = tile_wg(bases(wid.z), r0, c0, k_range(wid.z), lid);
    let col = c0 + lid.x * 4u;
    for (var i = 0u; i < TM; i++) {
        let row = r0 + lid.y * TM + i;
        let v = acc[i];
        store_ws(wid.z, row, col, v.x);
        store_ws(wid.z, row, col + 1u, v.y);
        store_ws(wid.z, row, col + 2u, v.z);
        store_ws(wid.z, row, col + 3u, v.w);
    }
}
