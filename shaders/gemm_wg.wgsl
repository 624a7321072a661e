// Workgroup-memory tiled GEMM for GPUs (the plan picks it whenever the adapter is not a CPU):
// lib/wg_tile.wgsl's core and its double-buffered K loop, a 16 TM x 16 TN output tile per 16x16
// workgroup, TM x TN per invocation (rows ty*TM.., columns tx*4.. and for TN = 8 also
// 64 + tx*4..). Invocations stage a quad (4 rows of A or 4 columns of B at one k) of each
// operand they own per K step (lib/wg_tile.wgsl) through the operand strides: k-fast when the
// operand is contiguous along K, else along M / N, so global reads coalesce for plain and
// transposed views alike. Out-of-range elements (ragged M, N and the last K step) are staged
// as 0, so the FMA loop needs no bounds. The K loop's bounds come from uniforms and the
// workgroup id only. Needs lib/activation.wgsl, lib/gemm_common.wgsl, lib/wg_tile.wgsl.

// What the loads need: the batch entry's bases and invocation li's walks of A and B over the
// tile at (r0, c0) (lib/gemm_common.wgsl; element q is lib/wg_tile.wgsl's a_pos / b_pos).
struct Ctx {
    bs: Bases,
    wa: Walk,
    wb: Walk,
}

fn k_fast(ctx: ptr<function, Ctx>) -> vec2<bool> {
    return stage_k_fast();
}

fn ctx_at(bs: Bases, r0: u32, c0: u32, lid: vec3<u32>) -> Ctx {
    let li = lid.x + lid.y * WX;
    let kf = stage_k_fast();
    return Ctx(
        bs,
        walk_a(a_pos(li, 0u, kf.x), a_pos(li, 1u, kf.x), r0, bs),
        walk_b(b_pos(li, 0u, kf.y), b_pos(li, 1u, kf.y), c0, bs),
    );
}

// Loads the A and B elements of the K step starting at k0 (k below kend) into registers.
fn load_step(ctx: ptr<function, Ctx>, k0: u32, kend: u32, li: u32) -> Staged {
    var s: Staged;
    let c = *ctx;
    if (a_owns(li)) {
        for (var q = 0u; q < a_per(); q++) {
            if (walk_in(c.wa, q, p.m, k0, kend)) {
                s.a[q] = f32(a[walk_at(c.wa, q, k0)]);
            }
        }
    }
    if (b_owns(li)) {
        for (var q = 0u; q < b_per(); q++) {
            if (walk_in(c.wb, q, p.n, k0, kend)) {
                s.b[q] = f32(b[walk_at(c.wb, q, k0)]);
            }
        }
    }
    return s;
}

@compute @workgroup_size(16, 16)
fn gemm_wg(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let r0 = wid.y * tile_rows();
    let c0 = wid.x * tile_cols();
    let bs = bases(wid.z);
    var ctx = ctx_at(bs, r0, c0, lid);
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
    var ctx = ctx_at(bases(wid.z), r0, c0, lid);
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
