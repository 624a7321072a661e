// Portable convolution (any adapter): the implicit GEMM of lib/conv_common.wgsl on a register
// tile. An 8x8 workgroup computes 32 rows x 32 columns of one group, each invocation a 4x4
// block; no workgroup memory, no barriers. Also holds the deterministic split-k reduction.
// Needs lib/activation.wgsl and lib/conv_common.wgsl.

fn tile_4x4(g: u32, r0: u32, c0: u32, kr: vec2<u32>) -> array<vec4<f32>, 4> {
    let ra = vec4<u32>(a_row(g, r0), a_row(g, r0 + 1u), a_row(g, r0 + 2u), a_row(g, r0 + 3u));
    let c_0 = col_state(g, c0);
    let c_1 = col_step(g, c_0, c0 + 1u, 1u);
    let c_2 = col_step(g, c_1, c0 + 2u, 1u);
    let c_3 = col_step(g, c_2, c0 + 3u, 1u);
    var acc: array<vec4<f32>, 4>;
    var it = k_start(kr.x);
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
            let kp = k_part(it);
            let ak = a_k(it);
            let bv = vec4<f32>(gather(c_0, kp), gather(c_1, kp), gather(c_2, kp), gather(c_3, kp));
            blk[0] = fma(vec4<f32>(f32(a[ra.x + ak])), bv, blk[0]);
            blk[1] = fma(vec4<f32>(f32(a[ra.y + ak])), bv, blk[1]);
            blk[2] = fma(vec4<f32>(f32(a[ra.z + ak])), bv, blk[2]);
            blk[3] = fma(vec4<f32>(f32(a[ra.w + ak])), bv, blk[3]);
            it = k_next(it);
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

@compute @workgroup_size(8, 8)
fn conv_tiled(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let r0 = wid.y * 32u + lid.y * 4u;
    let c0 = wid.x * 32u + lid.x * 4u;
    let g = group_of(wid.z);
    let acc = tile_4x4(g, r0, c0, k_range(wid.z));
    let cs = cols4(g, c0);
    store_row4(g, r0, c0, cs, acc[0]);
    store_row4(g, r0 + 1u, c0, cs, acc[1]);
    store_row4(g, r0 + 2u, c0, cs, acc[2]);
    store_row4(g, r0 + 3u, c0, cs, acc[3]);
}

@compute @workgroup_size(8, 8)
fn conv_tiled_partial(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let r0 = wid.y * 32u + lid.y * 4u;
    let c0 = wid.x * 32u + lid.x * 4u;
    let z = wid.z + p.z0;
    let acc = tile_4x4(group_of(z), r0, c0, k_range(z));
    store_row4_ws(z, r0, c0, acc[0]);
    store_row4_ws(z, r0 + 1u, c0, acc[1]);
    store_row4_ws(z, r0 + 2u, c0, acc[2]);
    store_row4_ws(z, r0 + 3u, c0, acc[3]);
}

override WG: u32;

// out = epilogue(sum over s = 0, 1, ..., splits-1 of ws[s]): a fixed order, so the same inputs
// give bitwise-identical results on every run. One invocation per output element.
// The slices add in blocks of 32, each a fresh sum, then the blocks (a GPU's split of a long K
// has hundreds of slices; up to 32 the order is the plain one).
@compute @workgroup_size(WG)
fn conv_splitk_reduce(@builtin(workgroup_id) wid: vec3<u32>,
                      @builtin(num_workgroups) nwg: vec3<u32>,
                      @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    let mn = p.m * p.ncols;
    let total = mn * p.groups;
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
    let g = i / mn;
    let rc = i % mn;
    let col = rc % p.ncols;
    store_out(g, rc / p.ncols, col, col_state(g, col), acc);
}
