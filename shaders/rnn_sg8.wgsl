// Recurrent step for adapters with 8-lane subgroups (lavapipe): h_{t-1} W_hh^T is the GEMM
// [B x H] x [H x G*H] restricted to the 4 gate columns of each hidden unit, so it uses the
// GEMM's sg8 scheme: each lane gathers a different batch row of h_{t-1} (4 gathers fetch 32
// rows) that reach all lanes through subgroupBroadcast, and each lane owns one hidden unit j
// whose 4 gate rows of W_hh it gathers. Per k: 8 gathers feed 128 FMAs per lane. A subgroup
// covers 32 batch rows x 8 hidden units; a workgroup stacks SGS subgroups along the batch.
// Accumulators are indexed with constants only, so they stay in registers.
// Needs lib/activation.wgsl and lib/rnn_common.wgsl.

override SGS: u32;

fn step_sg8(row0: u32, j: u32, lane: u32, ngates: u32) -> array<vec4<f32>, 32> {
    let h = p.hidden;
    let jj = min(j, h - 1u);
    let lr = p.batch - 1u;
    let h0 = p.prev_off + min(row0 + lane, lr) * p.seq_rs;
    let h1 = p.prev_off + min(row0 + 8u + lane, lr) * p.seq_rs;
    let h2 = p.prev_off + min(row0 + 16u + lane, lr) * p.seq_rs;
    let h3 = p.prev_off + min(row0 + 24u + lane, lr) * p.seq_rs;
    let wb = vec4<u32>(jj, h + jj, 2u * h + jj, min(3u, ngates - 1u) * h + jj) * h;
    var acc: array<vec4<f32>, 32>;
    for (var k = 0u; k < h; k++) {
        let a0 = f32(hseq[h0 + k]);
        let a1 = f32(hseq[h1 + k]);
        let a2 = f32(hseq[h2 + k]);
        let a3 = f32(hseq[h3 + k]);
        let w = vec4<f32>(f32(whh[wb.x + k]), f32(whh[wb.y + k]), f32(whh[wb.z + k]), f32(whh[wb.w + k]));
        acc[0] = fma(vec4<f32>(subgroupBroadcast(a0, 0u)), w, acc[0]);
        acc[1] = fma(vec4<f32>(subgroupBroadcast(a0, 1u)), w, acc[1]);
        acc[2] = fma(vec4<f32>(subgroupBroadcast(a0, 2u)), w, acc[2]);
        acc[3] = fma(vec4<f32>(subgroupBroadcast(a0, 3u)), w, acc[3]);
        acc[4] = fma(vec4<f32>(subgroupBroadcast(a0, 4u)), w, acc[4]);
        acc[5] = fma(vec4<f32>(subgroupBroadcast(a0, 5u)), w, acc[5]);
        acc[6] = fma(vec4<f32>(subgroupBroadcast(a0, 6u)), w, acc[6]);
        acc[7] = fma(vec4<f32>(subgroupBroadcast(a0, 7u)), w, acc[7]);
        acc[8] = fma(vec4<f32>(subgroupBroadcast(a1, 0u)), w, acc[8]);
        acc[9] = fma(vec4<f32>(subgroupBroadcast(a1, 1u)), w, acc[9]);
        acc[10] = fma(vec4<f32>(subgroupBroadcast(a1, 2u)), w, acc[10]);
        acc[11] = fma(vec4<f32>(subgroupBroadcast(a1, 3u)), w, acc[11]);
        acc[12] = fma(vec4<f32>(subgroupBroadcast(a1, 4u)), w, acc[12]);
        acc[13] = fma(vec4<f32>(subgroupBroadcast(a1, 5u)), w, acc[13]);
        acc[14] = fma(vec4<f32>(subgroupBroadcast(a1, 6u)), w, acc[14]);
        acc[15] = fma(vec4<f32>(subgroupBroadcast(a1, 7u)), w, acc[15]);
        acc[16] = fma(vec4<f32>(subgroupBroadcast(a2, 0u)), w, acc[16]);
        acc[17] = fma(vec4<f32>(subgroupBroadcast(a2, 1u)), w, acc[17]);
        acc[18] = fma(vec4<f32>(subgroupBroadcast(a2, 2u)), w, acc[18]);
        acc[19] = fma(vec4<f32>(subgroupBroadcast(a2, 3u)), w, acc[19]);
        acc[20] = fma(vec4<f32>(subgroupBroadcast(a2, 4u)), w, acc[20]);
        acc[21] = fma(vec4<f32>(subgroupBroadcast(a2, 5u)), w, acc[21]);
        acc[22] = fma(vec4<f32>(subgroupBroadcast(a2, 6u)), w, acc[22]);
        acc[23] = fma(vec4<f32>(subgroupBroadcast(a2, 7u)), w, acc[23]);
        acc[24] = fma(vec4<f32>(subgroupBroadcast(a3, 0u)), w, acc[24]);
        acc[25] = fma(vec4<f32>(subgroupBroadcast(a3, 1u)), w, acc[25]);
        acc[26] = fma(vec4<f32>(subgroupBroadcast(a3, 2u)), w, acc[26]);
        acc[27] = fma(vec4<f32>(subgroupBroadcast(a3, 3u)), w, acc[27]);
        acc[28] = fma(vec4<f32>(subgroupBroadcast(a3, 4u)), w, acc[28]);
        acc[29] = fma(vec4<f32>(subgroupBroadcast(a3, 5u)), w, acc[29]);
        acc[30] = fma(vec4<f32>(subgroupBroadcast(a3, 6u)), w, acc[30]);
        acc[31] = fma(vec4<f32>(subgroupBroadcast(a3, 7u)), w, acc[31]);
    }
    return acc;
}

// Adds b_hh into a second array with constant indices: acc stays in registers during the
// k loop (a plain copy would be merged back into acc), and the gate math then runs once
// in a loop over this array; inlining it 32 times made the pipeline compile for seconds.
fn with_bias(acc: array<vec4<f32>, 32>, bias: vec4<f32>) -> array<vec4<f32>, 32> {
    var pre: array<vec4<f32>, 32>;
    pre[0] = acc[0] + bias;
    pre[1] = acc[1] + bias;
    pre[2] = acc[2] + bias;
    pre[3] = acc[3] + bias;
    pre[4] = acc[4] + bias;
    pre[5] = acc[5] + bias;
    pre[6] = acc[6] + bias;
    pre[7] = acc[7] + bias;
    pre[8] = acc[8] + bias;
    pre[9] = acc[9] + bias;
    pre[10] = acc[10] + bias;
    pre[11] = acc[11] + bias;
    pre[12] = acc[12] + bias;
    pre[13] = acc[13] + bias;
    pre[14] = acc[14] + bias;
    pre[15] = acc[15] + bias;
    pre[16] = acc[16] + bias;
    pre[17] = acc[17] + bias;
    pre[18] = acc[18] + bias;
    pre[19] = acc[19] + bias;
    pre[20] = acc[20] + bias;
    pre[21] = acc[21] + bias;
    pre[22] = acc[22] + bias;
    pre[23] = acc[23] + bias;
    pre[24] = acc[24] + bias;
    pre[25] = acc[25] + bias;
    pre[26] = acc[26] + bias;
    pre[27] = acc[27] + bias;
    pre[28] = acc[28] + bias;
    pre[29] = acc[29] + bias;
    pre[30] = acc[30] + bias;
    pre[31] = acc[31] + bias;
    return pre;
}

@compute @workgroup_size(SGS * 8u)
fn lstm_step_sg8(@builtin(workgroup_id) wid: vec3<u32>,
                 @builtin(subgroup_id) sg: u32,
                 @builtin(subgroup_invocation_id) lane: u32) {
    let row0 = wid.x * SGS * 32u + sg * 32u;
    let j = wid.y * 8u + lane;
    let pre = with_bias(step_sg8(row0, j, lane, 4u), hidden_bias(j, 4u));
    for (var r = 0u; r < 32u; r++) {
        lstm_finish(row0 + r, j, pre[r]);
    }
}

@compute @workgroup_size(SGS * 8u)
fn gru_step_sg8(@builtin(workgroup_id) wid: vec3<u32>,
                 @builtin(subgroup_id) sg: u32,
                 @builtin(subgroup_invocation_id) lane: u32) {
    let row0 = wid.x * SGS * 32u + sg * 32u;
    let j = wid.y * 8u + lane;
    let pre = with_bias(step_sg8(row0, j, lane, 3u), hidden_bias(j, 3u));
    for (var r = 0u; r < 32u; r++) {
        gru_finish(row0 + r, j, pre[r]);
    }
}
