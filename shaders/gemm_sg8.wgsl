// GEMM for adapters whose subgroups are exactly 8 lanes wide (CPU adapters such as lavapipe on
// AVX2: one subgroup = one SIMD register). There every storage load is a per-lane loop (about
// 38 cycles per 8 lanes), so loads per FMA matter. Each lane loads a *different* row of A (4
// gathers fetch 32 rows) and the rows reach all lanes through subgroupBroadcast (a register
// shuffle); each lane owns 4 columns of B (4 gathers). Per k: 8 gathers feed 128 FMAs per lane.
// The 128 accumulators spill (and the 128 of the K block, lib/gemm_common.wgsl's KBLOCK), and
// lavapipe blends each with the loop's execution mask every iteration: about 1900 x86 instructions per k, 40% of them the gathers (measured; wider tiles,
// vec4 loads and k-unrolling all measured no faster on lavapipe).
// A subgroup computes a 32x32 tile; a workgroup stacks SGS subgroups into a (32*SGS)x32 tile
// (the plan sets SGS = 1: on lavapipe more subgroups per workgroup gained nothing).
// Grid x walks down the rows so consecutive workgroups reuse the same B panel from cache.
// Accumulators are only ever indexed with constants so they stay in registers.
// Needs lib/activation.wgsl and lib/gemm_common.wgsl.

// Subgroups per workgroup.
override SGS: u32;

fn tile_sg8(bs: Bases, row0: u32, col0: u32, lane: u32, kr: vec2<u32>) -> array<vec4<f32>, 32> {
    let lr = p.m - 1u;
    let lc = p.n - 1u;
    let ra0 = bs.a + min(row0 + lane, lr) * p.a_rs;
    let ra1 = bs.a + min(row0 + 8u + lane, lr) * p.a_rs;
    let ra2 = bs.a + min(row0 + 16u + lane, lr) * p.a_rs;
    let ra3 = bs.a + min(row0 + 24u + lane, lr) * p.a_rs;
    let c = col0 + lane;
    let cb = vec4<u32>(min(c, lc), min(c + 8u, lc), min(c + 16u, lc), min(c + 24u, lc)) * p.b_cs + bs.b;
    var acc: array<vec4<f32>, 32>;
    // K in blocks of KBLOCK, each summed into fresh accumulators and then added to the total
    // (a two-level sum): fmas in turn drift on constant data (3.9e-5 over 4096), where
    // PyTorch's BLAS blocks K. Indexed with constants only, as `acc`.
    var blk: array<vec4<f32>, 32>;
    for (var k0 = kr.x; k0 < kr.y; k0 += KBLOCK) {
        let k1 = min(k0 + KBLOCK, kr.y);
        // Zeroed by assignment: a `var` declared in a loop body is zeroed on every pass by
        // WGSL's rules, but the browser's compiler (Chrome's, through SwiftShader) did not.
        blk = array<vec4<f32>, 32>();
        for (var k = k0; k < k1; k++) {
            let ka = k * p.a_cs;
            let kb = k * p.b_rs;
            let a0 = f32(a[ra0 + ka]);
            let a1 = f32(a[ra1 + ka]);
            let a2 = f32(a[ra2 + ka]);
            let a3 = f32(a[ra3 + ka]);
            let bv = vec4<f32>(f32(b[cb.x + kb]), f32(b[cb.y + kb]), f32(b[cb.z + kb]), f32(b[cb.w + kb]));
            blk[0] = fma(vec4<f32>(subgroupBroadcast(a0, 0u)), bv, blk[0]);
            blk[1] = fma(vec4<f32>(subgroupBroadcast(a0, 1u)), bv, blk[1]);
            blk[2] = fma(vec4<f32>(subgroupBroadcast(a0, 2u)), bv, blk[2]);
            blk[3] = fma(vec4<f32>(subgroupBroadcast(a0, 3u)), bv, blk[3]);
            blk[4] = fma(vec4<f32>(subgroupBroadcast(a0, 4u)), bv, blk[4]);
            blk[5] = fma(vec4<f32>(subgroupBroadcast(a0, 5u)), bv, blk[5]);
            blk[6] = fma(vec4<f32>(subgroupBroadcast(a0, 6u)), bv, blk[6]);
            blk[7] = fma(vec4<f32>(subgroupBroadcast(a0, 7u)), bv, blk[7]);
            blk[8] = fma(vec4<f32>(subgroupBroadcast(a1, 0u)), bv, blk[8]);
            blk[9] = fma(vec4<f32>(subgroupBroadcast(a1, 1u)), bv, blk[9]);
            blk[10] = fma(vec4<f32>(subgroupBroadcast(a1, 2u)), bv, blk[10]);
            blk[11] = fma(vec4<f32>(subgroupBroadcast(a1, 3u)), bv, blk[11]);
            blk[12] = fma(vec4<f32>(subgroupBroadcast(a1, 4u)), bv, blk[12]);
            blk[13] = fma(vec4<f32>(subgroupBroadcast(a1, 5u)), bv, blk[13]);
            blk[14] = fma(vec4<f32>(subgroupBroadcast(a1, 6u)), bv, blk[14]);
            blk[15] = fma(vec4<f32>(subgroupBroadcast(a1, 7u)), bv, blk[15]);
            blk[16] = fma(vec4<f32>(subgroupBroadcast(a2, 0u)), bv, blk[16]);
            blk[17] = fma(vec4<f32>(subgroupBroadcast(a2, 1u)), bv, blk[17]);
            blk[18] = fma(vec4<f32>(subgroupBroadcast(a2, 2u)), bv, blk[18]);
            blk[19] = fma(vec4<f32>(subgroupBroadcast(a2, 3u)), bv, blk[19]);
            blk[20] = fma(vec4<f32>(subgroupBroadcast(a2, 4u)), bv, blk[20]);
            blk[21] = fma(vec4<f32>(subgroupBroadcast(a2, 5u)), bv, blk[21]);
            blk[22] = fma(vec4<f32>(subgroupBroadcast(a2, 6u)), bv, blk[22]);
            blk[23] = fma(vec4<f32>(subgroupBroadcast(a2, 7u)), bv, blk[23]);
            blk[24] = fma(vec4<f32>(subgroupBroadcast(a3, 0u)), bv, blk[24]);
            blk[25] = fma(vec4<f32>(subgroupBroadcast(a3, 1u)), bv, blk[25]);
            blk[26] = fma(vec4<f32>(subgroupBroadcast(a3, 2u)), bv, blk[26]);
            blk[27] = fma(vec4<f32>(subgroupBroadcast(a3, 3u)), bv, blk[27]);
            blk[28] = fma(vec4<f32>(subgroupBroadcast(a3, 4u)), bv, blk[28]);
            blk[29] = fma(vec4<f32>(subgroupBroadcast(a3, 5u)), bv, blk[29]);
            blk[30] = fma(vec4<f32>(subgroupBroadcast(a3, 6u)), bv, blk[30]);
            blk[31] = fma(vec4<f32>(subgroupBroadcast(a3, 7u)), bv, blk[31]);
        }
        acc[0] += blk[0];
        acc[1] += blk[1];
        acc[2] += blk[2];
        acc[3] += blk[3];
        acc[4] += blk[4];
        acc[5] += blk[5];
        acc[6] += blk[6];
        acc[7] += blk[7];
        acc[8] += blk[8];
        acc[9] += blk[9];
        acc[10] += blk[10];
        acc[11] += blk[11];
        acc[12] += blk[12];
        acc[13] += blk[13];
        acc[14] += blk[14];
        acc[15] += blk[15];
        acc[16] += blk[16];
        acc[17] += blk[17];
        acc[18] += blk[18];
        acc[19] += blk[19];
        acc[20] += blk[20];
        acc[21] += blk[21];
        acc[22] += blk[22];
        acc[23] += blk[23];
        acc[24] += blk[24];
        acc[25] += blk[25];
        acc[26] += blk[26];
        acc[27] += blk[27];
        acc[28] += blk[28];
        acc[29] += blk[29];
        acc[30] += blk[30];
        acc[31] += blk[31];
        if (kr.y - k0 <= KBLOCK) {
            break;
        }
    }
    return acc;
}

fn sg8_ws(z: u32, row: u32, c: u32, v: vec4<f32>) {
    store_ws(z, row, c, v.x);
    store_ws(z, row, c + 8u, v.y);
    store_ws(z, row, c + 16u, v.z);
    store_ws(z, row, c + 24u, v.w);
}

@compute @workgroup_size(SGS * 8u)
fn gemm_sg8(@builtin(workgroup_id) wid: vec3<u32>,
            @builtin(subgroup_id) sg: u32,
            @builtin(subgroup_invocation_id) lane: u32) {
    let row0 = wid.x * SGS * 32u + sg * 32u;
    let c = wid.y * 32u + lane;
    let bs = bases(wid.z);
    let acc = tile_sg8(bs, row0, wid.y * 32u, lane, k_range(wid.z));
    // Scale into a second array with constant indices (acc stays in registers during the loop;
    // a plain copy would be merged back into acc and force it to memory), then run the
    // epilogue once in a loop: inlining it 32 times made the pipeline compile for seconds.
    var res: array<vec4<f32>, 32>;
    res[0] = p.alpha * acc[0];
    res[1] = p.alpha * acc[1];
    res[2] = p.alpha * acc[2];
    res[3] = p.alpha * acc[3];
    res[4] = p.alpha * acc[4];
    res[5] = p.alpha * acc[5];
    res[6] = p.alpha * acc[6];
    res[7] = p.alpha * acc[7];
    res[8] = p.alpha * acc[8];
    res[9] = p.alpha * acc[9];
    res[10] = p.alpha * acc[10];
    res[11] = p.alpha * acc[11];
    res[12] = p.alpha * acc[12];
    res[13] = p.alpha * acc[13];
    res[14] = p.alpha * acc[14];
    res[15] = p.alpha * acc[15];
    res[16] = p.alpha * acc[16];
    res[17] = p.alpha * acc[17];
    res[18] = p.alpha * acc[18];
    res[19] = p.alpha * acc[19];
    res[20] = p.alpha * acc[20];
    res[21] = p.alpha * acc[21];
    res[22] = p.alpha * acc[22];
    res[23] = p.alpha * acc[23];
    res[24] = p.alpha * acc[24];
    res[25] = p.alpha * acc[25];
    res[26] = p.alpha * acc[26];
    res[27] = p.alpha * acc[27];
    res[28] = p.alpha * acc[28];
    res[29] = p.alpha * acc[29];
    res[30] = p.alpha * acc[30];
    res[31] = p.alpha * acc[31];
    // One epilogue in the loop body (128 trips, not unrolled): with the C and bias sources
    // uniforms, four inlined copies per row made the pipeline compile ~150 ms longer.
    for (var t = 0u; t < 128u; t++) {
        let r = t / 4u;
        let j = t % 4u;
        store_scaled(row0 + r, c + 8u * j, res[r][j], bs);
    }
}

@compute @workgroup_size(SGS * 8u)
fn gemm_sg8_partial(@builtin(workgroup_id) wid: vec3<u32>,
                    @builtin(subgroup_id) sg: u32,
                    @builtin(subgroup_invocation_id) lane: u32) {
    let row0 = wid.x * SGS * 32u + sg * 32u;
    let c = wid.y * 32u + lane;
    let acc = tile_sg8(bases(wid.z), row0, wid.y * 32u, lane, k_range(wid.z));
    // Stored in a loop from a second array, as gemm_sg8's epilogue: 32 inlined stores made
    // this pipeline compile for a second on lavapipe. The select is an exact identity the
    // compiler cannot see through (m is never 0 at a launch).
    var res: array<vec4<f32>, 32>;
    res[0] = select(acc[0], vec4<f32>(0.0), p.m == 0u);
    res[1] = select(acc[1], vec4<f32>(0.0), p.m == 0u);
    res[2] = select(acc[2], vec4<f32>(0.0), p.m == 0u);
    res[3] = select(acc[3], vec4<f32>(0.0), p.m == 0u);
    res[4] = select(acc[4], vec4<f32>(0.0), p.m == 0u);
    res[5] = select(acc[5], vec4<f32>(0.0), p.m == 0u);
    res[6] = select(acc[6], vec4<f32>(0.0), p.m == 0u);
    res[7] = select(acc[7], vec4<f32>(0.0), p.m == 0u);
    res[8] = select(acc[8], vec4<f32>(0.0), p.m == 0u);
    res[9] = select(acc[9], vec4<f32>(0.0), p.m == 0u);
    res[10] = select(acc[10], vec4<f32>(0.0), p.m == 0u);
    res[11] = select(acc[11], vec4<f32>(0.0), p.m == 0u);
    res[12] = select(acc[12], vec4<f32>(0.0), p.m == 0u);
    res[13] = select(acc[13], vec4<f32>(0.0), p.m == 0u);
    res[14] = select(acc[14], vec4<f32>(0.0), p.m == 0u);
    res[15] = select(acc[15], vec4<f32>(0.0), p.m == 0u);
    res[16] = select(acc[16], vec4<f32>(0.0), p.m == 0u);
    res[17] = select(acc[17], vec4<f32>(0.0), p.m == 0u);
    res[18] = select(acc[18], vec4<f32>(0.0), p.m == 0u);
    res[19] = select(acc[19], vec4<f32>(0.0), p.m == 0u);
    res[20] = select(acc[20], vec4<f32>(0.0), p.m == 0u);
    res[21] = select(acc[21], vec4<f32>(0.0), p.m == 0u);
    res[22] = select(acc[22], vec4<f32>(0.0), p.m == 0u);
    res[23] = select(acc[23], vec4<f32>(0.0), p.m == 0u);
    res[24] = select(acc[24], vec4<f32>(0.0), p.m == 0u);
    res[25] = select(acc[25], vec4<f32>(0.0), p.m == 0u);
    res[26] = select(acc[26], vec4<f32>(0.0), p.m == 0u);
    res[27] = select(acc[27], vec4<f32>(0.0), p.m == 0u);
    res[28] = select(acc[28], vec4<f32>(0.0), p.m == 0u);
    res[29] = select(acc[29], vec4<f32>(0.0), p.m == 0u);
    res[30] = select(acc[30], vec4<f32>(0.0), p.m == 0u);
    res[31] = select(acc[31], vec4<f32>(0.0), p.m == 0u);
    for (var r = 0u; r < 32u; r++) {
        sg8_ws(wid.z, row0 + r, c, res[r]);
    }
}
