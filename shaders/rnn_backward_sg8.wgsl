// BPTT step for adapters with 8-lane subgroups (lavapipe): dA_{t+1} W_hh is the GEMM
// [B x G*H] x [G*H x H], computed with the scheme of rnn_sg8.wgsl: each lane gathers a
// different batch row of dA_{t+1} (4 gathers fetch 32 rows) that reach all lanes through
// subgroupBroadcast, and each lane owns one hidden unit j whose W_hh column it reads (rows of
// W_hh are contiguous in j, so the 8 lanes read 8 adjacent values). A subgroup covers 32 batch
// rows x 8 hidden units; a workgroup stacks SGS subgroups along the batch.
// Needs lib/activation.wgsl and lib/rnn_backward_common.wgsl.

override SGS: u32;

fn recurrent_sg8(row0: u32, j: u32, lane: u32) -> array<f32, 32> {
    let h = p.hidden;
    let jj = min(j, h - 1u);
    let lr = p.batch - 1u;
    let r0 = p.a_prev + min(row0 + lane, lr) * p.gh;
    let r1 = p.a_prev + min(row0 + 8u + lane, lr) * p.gh;
    let r2 = p.a_prev + min(row0 + 16u + lane, lr) * p.gh;
    let r3 = p.a_prev + min(row0 + 24u + lane, lr) * p.gh;
    var acc: array<f32, 32>;
    if (p.has_rec != 0u) {
        for (var k = 0u; k < p.gh; k++) {
            let v0 = f32(dah[r0 + k]);
            let v1 = f32(dah[r1 + k]);
            let v2 = f32(dah[r2 + k]);
            let v3 = f32(dah[r3 + k]);
            let w = f32(whh[k * h + jj]);
            acc[0] = fma(subgroupBroadcast(v0, 0u), w, acc[0]);
            acc[1] = fma(subgroupBroadcast(v0, 1u), w, acc[1]);
            acc[2] = fma(subgroupBroadcast(v0, 2u), w, acc[2]);
            acc[3] = fma(subgroupBroadcast(v0, 3u), w, acc[3]);
            acc[4] = fma(subgroupBroadcast(v0, 4u), w, acc[4]);
            acc[5] = fma(subgroupBroadcast(v0, 5u), w, acc[5]);
            acc[6] = fma(subgroupBroadcast(v0, 6u), w, acc[6]);
            acc[7] = fma(subgroupBroadcast(v0, 7u), w, acc[7]);
            acc[8] = fma(subgroupBroadcast(v1, 0u), w, acc[8]);
            acc[9] = fma(subgroupBroadcast(v1, 1u), w, acc[9]);
            acc[10] = fma(subgroupBroadcast(v1, 2u), w, acc[10]);
            acc[11] = fma(subgroupBroadcast(v1, 3u), w, acc[11]);
            acc[12] = fma(subgroupBroadcast(v1, 4u), w, acc[12]);
            acc[13] = fma(subgroupBroadcast(v1, 5u), w, acc[13]);
            acc[14] = fma(subgroupBroadcast(v1, 6u), w, acc[14]);
            acc[15] = fma(subgroupBroadcast(v1, 7u), w, acc[15]);
            acc[16] = fma(subgroupBroadcast(v2, 0u), w, acc[16]);
            acc[17] = fma(subgroupBroadcast(v2, 1u), w, acc[17]);
            acc[18] = fma(subgroupBroadcast(v2, 2u), w, acc[18]);
            acc[19] = fma(subgroupBroadcast(v2, 3u), w, acc[19]);
            acc[20] = fma(subgroupBroadcast(v2, 4u), w, acc[20]);
            acc[21] = fma(subgroupBroadcast(v2, 5u), w, acc[21]);
            acc[22] = fma(subgroupBroadcast(v2, 6u), w, acc[22]);
            acc[23] = fma(subgroupBroadcast(v2, 7u), w, acc[23]);
            acc[24] = fma(subgroupBroadcast(v3, 0u), w, acc[24]);
            acc[25] = fma(subgroupBroadcast(v3, 1u), w, acc[25]);
            acc[26] = fma(subgroupBroadcast(v3, 2u), w, acc[26]);
            acc[27] = fma(subgroupBroadcast(v3, 3u), w, acc[27]);
            acc[28] = fma(subgroupBroadcast(v3, 4u), w, acc[28]);
            acc[29] = fma(subgroupBroadcast(v3, 5u), w, acc[29]);
            acc[30] = fma(subgroupBroadcast(v3, 6u), w, acc[30]);
            acc[31] = fma(subgroupBroadcast(v3, 7u), w, acc[31]);
        }
    }
    return acc;
}

// A second array filled with constant indices (plus a runtime zero, so it is not merged back
// into acc): acc stays in registers during the k loop and the gate math runs once in a loop.
fn detach(acc: array<f32, 32>, zero: f32) -> array<f32, 32> {
    var out: array<f32, 32>;
    out[0] = acc[0] + zero;
    out[1] = acc[1] + zero;
    out[2] = acc[2] + zero;
    out[3] = acc[3] + zero;
    out[4] = acc[4] + zero;
    out[5] = acc[5] + zero;
    out[6] = acc[6] + zero;
    out[7] = acc[7] + zero;
    out[8] = acc[8] + zero;
    out[9] = acc[9] + zero;
    out[10] = acc[10] + zero;
    out[11] = acc[11] + zero;
    out[12] = acc[12] + zero;
    out[13] = acc[13] + zero;
    out[14] = acc[14] + zero;
    out[15] = acc[15] + zero;
    out[16] = acc[16] + zero;
    out[17] = acc[17] + zero;
    out[18] = acc[18] + zero;
    out[19] = acc[19] + zero;
    out[20] = acc[20] + zero;
    out[21] = acc[21] + zero;
    out[22] = acc[22] + zero;
    out[23] = acc[23] + zero;
    out[24] = acc[24] + zero;
    out[25] = acc[25] + zero;
    out[26] = acc[26] + zero;
    out[27] = acc[27] + zero;
    out[28] = acc[28] + zero;
    out[29] = acc[29] + zero;
    out[30] = acc[30] + zero;
    out[31] = acc[31] + zero;
    return out;
}

@compute @workgroup_size(SGS * 8u)
fn lstm_backward_step_sg8(@builtin(workgroup_id) wid: vec3<u32>,
                          @builtin(subgroup_id) sg: u32,
                          @builtin(subgroup_invocation_id) lane: u32) {
    let row0 = wid.x * SGS * 32u + sg * 32u;
    let j = wid.y * 8u + lane;
    let rec = detach(recurrent_sg8(row0, j, lane), p.zero);
    for (var r = 0u; r < 32u; r++) {
        lstm_backward_finish(row0 + r, j, rec[r]);
    }
}

@compute @workgroup_size(SGS * 8u)
fn gru_backward_step_sg8(@builtin(workgroup_id) wid: vec3<u32>,
                         @builtin(subgroup_id) sg: u32,
                         @builtin(subgroup_invocation_id) lane: u32) {
    let row0 = wid.x * SGS * 32u + sg * 32u;
    let j = wid.y * 8u + lane;
    let rec = detach(recurrent_sg8(row0, j, lane), p.zero);
    for (var r = 0u; r < 32u; r++) {
        gru_backward_finish(row0 + r, j, rec[r]);
    }
}
