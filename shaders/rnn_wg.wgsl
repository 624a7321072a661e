// Recurrent step for GPUs on the large-tile core (lib/wg_tile.wgsl, shared with GEMM and
// convolution): h_{t-1} W_hh^T for a tile of 16 TM batch rows x 16 hidden units, all gates
// of a unit in one invocation's vec4, then the gate math of lib/rnn_common.wgsl in registers.
// The core's 64 columns are (unit, gate) pairs, column 4 u + g being row g*H + u of W_hh, so
// invocation (tx, ty) ends with the gates of unit tx for batch rows ty*TM.. in acc[i]; a GRU's
// fourth gate column is staged as 0. Both operands are staged k-fast (h rows and W_hh rows are
// contiguous along K = H): a warp reads 4 rows of 8 consecutive k (32-byte segments), where the
// portable step's invocations each walked a W_hh row of their own. Needs lib/activation.wgsl,
// lib/rnn_common.wgsl and lib/wg_tile.wgsl.

// The tile's first batch row and unit, and the gates per unit (4: LSTM, 3: GRU).
struct Ctx {
    r0: u32,
    u0: u32,
    ngates: u32,
}

fn k_fast(ctx: ptr<function, Ctx>) -> vec2<bool> {
    return vec2<bool>(true, true);
}

fn load_step(ctx: ptr<function, Ctx>, k0: u32, kend: u32, li: u32) -> Staged {
    var s: Staged;
    let c = *ctx;
    let h = p.hidden;
    for (var q = 0u; q < a_per(); q++) {
        let pa = a_pos(li, q, true);
        let b = c.r0 + pa.x;
        let k = k0 + pa.y;
        if (a_owns(li) && b < p.batch && k < kend) {
            s.a[q] = f32(hseq[p.prev_off + b * p.seq_rs + k]);
        }
    }
    // A quad of B is the gates of one unit at one k.
    for (var q = 0u; q < b_per(); q++) {
        let pb = b_pos(li, q, true);
        let u = c.u0 + pb.x / 4u;
        let g = pb.x % 4u;
        let k = k0 + pb.y;
        if (b_owns(li) && u < h && g < c.ngates && k < kend) {
            s.b[q] = f32(whh[(g * h + u) * h + k]);
        }
    }
    return s;
}

// The recurrent pre-activations of invocation (tx, ty): acc[i] holds the gates of unit
// u0 + tx for batch row r0 + ty*TM + i.
fn step_tile(r0: u32, u0: u32, lid: vec3<u32>, ngates: u32) -> array<vec4<f32>, 16> {
    var ctx = Ctx(r0, u0, ngates);
    return tile_k(&ctx, vec2<u32>(0u, p.hidden), lid);
}

@compute @workgroup_size(16, 16)
fn lstm_step_wg(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let r0 = wid.y * tile_rows();
    let j = wid.x * 16u + lid.x;
    let acc = step_tile(r0, wid.x * 16u, lid, 4u);
    let bias = hidden_bias(j, 4u);
    for (var i = 0u; i < TM; i++) {
        lstm_finish(r0 + lid.y * TM + i, j, acc[i] + bias);
    }
}

@compute @workgroup_size(16, 16)
fn gru_step_wg(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let r0 = wid.y * tile_rows();
    let j = wid.x * 16u + lid.x;
    let acc = step_tile(r0, wid.x * 16u, lid, 3u);
    let bias = hidden_bias(j, 3u);
    for (var i = 0u; i < TM; i++) {
        gru_finish(r0 + lid.y * TM + i, j, acc[i] + bias);
    }
}
