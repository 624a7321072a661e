// Portable register-tiled GEMM (any adapter; the plan runs it on CPU adapters without 8-lane
// subgroups, GPUs get gemm_wg.wgsl): an 8x8 workgroup computes a 32x32 tile, each invocation a
// 4x4 block held in registers; no workgroup memory, no barriers (barriers are very costly on
// CPU adapters). Ragged edges clamp their loads and skip their stores. Also holds the
// deterministic split-k reduction that every kernel's `*_partial` entry feeds.
// Needs lib/activation.wgsl and lib/gemm_common.wgsl.

// The 4x4 block at rows r0.., cols c0.. over k in kr: acc[i][j] = sum_k A[r0+i,k] B[k,c0+j].
fn tile_4x4(bs: Bases, r0: u32, c0: u32, kr: vec2<u32>) -> array<vec4<f32>, 4> {
    let lr = p.m - 1u;
    let lc = p.n - 1u;
    let ra = vec4<u32>(min(r0, lr), min(r0 + 1u, lr), min(r0 + 2u, lr), min(r0 + 3u, lr)) * p.a_rs + bs.a;
    let cb = vec4<u32>(min(c0, lc), min(c0 + 1u, lc), min(c0 + 2u, lc), min(c0 + 3u, lc)) * p.b_cs + bs.b;
    var acc: array<vec4<f32>, 4>;
    // K in blocks of KBLOCK, each summed into fresh accumulators, then added to the total
    // (a two-level sum): fmas in turn drift on constant data (3.9e-5 over 4096), where
    // PyTorch's CPU kernels block K. Indexed with constants only, as `acc`.
    var blk: array<vec4<f32>, 4>;
    for (var k0 = kr.x; k0 < kr.y; k0 += KBLOCK) {
        let k1 = min(k0 + KBLOCK, kr.y);
        // Zeroed by assignment: a `var` declared in a loop body is zeroed on every pass by
        // WGSL's rules, but the browser's compiler (Chrome's, through SwiftShader) did not.
        blk = array<vec4<f32>, 4>();
        for (var k = k0; k < k1; k++) {
            let ka = k * p.a_cs;
            let kb = k * p.b_rs;
            let bv = vec4<f32>(f32(b[cb.x + kb]), f32(b[cb.y + kb]), f32(b[cb.z + kb]), f32(b[cb.w + kb]));
            blk[0] = fma(vec4<f32>(f32(a[ra.x + ka])), bv, blk[0]);
            blk[1] = fma(vec4<f32>(f32(a[ra.y + ka])), bv, blk[1]);
            blk[2] = fma(vec4<f32>(f32(a[ra.z + ka])), bv, blk[2]);
            blk[3] = fma(vec4<f32>(f32(a[ra.w + ka])), bv, blk[3]);
        }
        acc[0] += blk[0];
        acc[1] += blk[1];
        acc[2] += blk[2];
        acc[3] += blk[3];
        if (kr.y - k0 <= KBLOCK) {
            break;
        }
    }
    return acc;
}

fn store_row4_out(row: u32, c0: u32, v: vec4<f32>, bs: Bases) {
    store_out(row, c0, v.x, bs);
    store_out(row, c0 + 1u, v.y, bs);
    store_out(row, c0 + 2u, v.z, bs);
    store_out(row, c0 + 3u, v.w, bs);
}

fn store_row4_ws(z: u32, row: u32, c0: u32, v: vec4<f32>) {
    store_ws(z, row, c0, v.x);
    store_ws(z, row, c0 + 1u, v.y);
    store_ws(z, row, c0 + 2u, v.z);
    store_ws(z, row, c0 + 3u, v.w);
}

@compute @workgroup_size(8, 8)
fn gemm_tiled(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let r0 = wid.y * 32u + lid.y * 4u;
    let c0 = wid.x * 32u + lid.x * 4u;
    let bs = bases(wid.z);
    let acc = tile_4x4(bs, r0, c0, k_range(wid.z));
    store_row4_out(r0, c0, acc[0], bs);
    store_row4_out(r0 + 1u, c0, acc[1], bs);
    store_row4_out(r0 + 2u, c0, acc[2], bs);
    store_row4_out(r0 + 3u, c0, acc[3], bs);
}

@compute @workgroup_size(8, 8)
fn gemm_tiled_partial(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let r0 = wid.y * 32u + lid.y * 4u;
    let c0 = wid.x * 32u + lid.x * 4u;
    let acc = tile_4x4(bases(wid.z), r0, c0, k_range(wid.z));
    store_row4_ws(wid.z, r0, c0, acc[0]);
    store_row4_ws(wid.z, r0 + 1u, c0, acc[1]);
    store_row4_ws(wid.z, r0 + 2u, c0, acc[2]);
    store_row4_ws(wid.z, r0 + 3u, c0, acc[3]);
}

override WG: u32;

// out[i] = epilogue(sum over s = 0, 1, ..., splits-1 of ws[s, i]): a fixed order, so the same
// inputs give bitwise-identical results on every run. One invocation per output element.
// The slices add in blocks of 32, each a fresh sum, then the blocks (a GPU's split of a long K
// has hundreds of slices; up to 32 the order is the plain one).
@compute @workgroup_size(WG)
fn splitk_reduce(@builtin(workgroup_id) wid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    let mn = p.m * p.n;
    let total = mn * p.batch;
    if (i >= total) {
        return;
    }
    var acc = 0.0;
    for (var s0 = 0u; s0 < p.splits; s0 += 32u) {
        var blk = 0.0;
        for (var s = s0; s < min(s0 + 32u, p.splits); s++) {
            blk += ws[s * total + i];
        }
        acc += blk;
    }
    let bi = i / mn;
    let rc = i % mn;
    store_out(rc / p.n, rc % p.n, acc, bases(bi));
}
