// Workgroup-memory tiled GEMM for GPUs (the plan picks it whenever the adapter is not a CPU):
// lib/wg_tile.wgsl's core and its double-buffered K loop, a 16 TM x 16 TN output tile per 16x16
// workgroup, TM x TN per invocation (rows ty*TM.., columns tx*4.. and for TN = 8 also
// 64 + tx*4..). Every invocation stages TM / 2 elements of A and TN / 2 of B per K step
// through the operand strides: k-fast when the
// operand is contiguous along K, else along M / N, so global reads coalesce for plain and
// transposed views alike. Out-of-range elements (ragged M, N and the last K step) are staged
// as 0, so the FMA loop needs no bounds. The K loop's bounds come from uniforms and the
// workgroup id only. Needs lib/activation.wgsl, lib/gemm_common.wgsl, lib/wg_tile.wgsl.

// What the loads need: the batch entry's bases and the tile's origin.
struct Ctx {
    bs: Bases,
    r0: u32,
    c0: u32,
}

fn k_fast(ctx: ptr<function, Ctx>) -> vec2<bool> {
    return vec2<bool>(p.a_cs == 1u, p.b_rs == 1u && p.b_cs != 1u);
}

// Loads the A and B elements of the K step starting at k0 (k below kend) into registers.
fn load_step(ctx: ptr<function, Ctx>, k0: u32, kend: u32, li: u32) -> Staged {
    var s: Staged;
    let kf = k_fast(ctx);
    let c = *ctx;
    for (var q = 0u; q < a_per(); q++) {
        let pa = a_pos(li, q, kf.x);
        let ra = c.r0 + pa.x;
        let ka = k0 + pa.y;
        var va = 0.0;
        if (ra < p.m && ka < kend) {
            va = f32(a[c.bs.a + ra * p.a_rs + ka * p.a_cs]);
        }
        s.a[q] = va;
    }
    for (var q = 0u; q < b_per(); q++) {
        let pb = b_pos(li, q, kf.y);
        let cb = c.c0 + pb.x;
        let kb = k0 + pb.y;
        var vb = 0.0;
        if (cb < p.n && kb < kend) {
            vb = f32(b[c.bs.b + kb * p.b_rs + cb * p.b_cs]);
        }
        s.b[q] = vb;
    }
    return s;
}

@compute @workgroup_size(16, 16)
fn gemm_wg(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let r0 = wid.y * tile_rows();
    let c0 = wid.x * tile_cols();
    let bs = bases(wid.z);
    var ctx = Ctx(bs, r0, c0);
    let acc = tile_k(&ctx, k_range(wid.z), lid);
    for (var hf = 0u; hf < TN / 4u; hf++) {
        let col = c0 + hf * 64u + lid.x * 4u;
        for (var i = 0u; i < TM; i++) {
            let row = r0 + lid.y * TM + i;
            let v = acc[8u * hf + i];
            store_out(row, col, v.x, bs);
            store_out(row, col + 1u, v.y, bs);
            store_out(row, col + 2u, v.z, bs);
            store_out(row, col + 3u, v.w, bs);
        }
    }
}

@compute @workgroup_size(16, 16)
fn gemm_wg_partial(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let r0 = wid.y * tile_rows();
    let c0 = wid.x * tile_cols();
    var ctx = Ctx(bases(wid.z), r0, c0);
    let acc = tile_k(&ctx, k_range(wid.z), lid);
    for (var hf = 0u; hf < TN / 4u; hf++) {
        let col = c0 + hf * 64u + lid.x * 4u;
        for (var i = 0u; i < TM; i++) {
            let row = r0 + lid.y * TM + i;
            let v = acc[8u * hf + i];
            store_ws(wid.z, row, col, v.x);
            store_ws(wid.z, row, col + 1u, v.y);
            store_ws(wid.z, row, col + 2u, v.z);
            store_ws(wid.z, row, col + 3u, v.w);
        }
    }
}
