// Portable recurrent step (any adapter): one invocation per (batch row, hidden unit), all
// gates of that unit accumulated in one vec4. Also the state-block copy used for h0/c0 and
// h_n/c_n. Needs lib/activation.wgsl and lib/rnn_common.wgsl.

override WG: u32;

// The invocation's index on a grid of WG-wide workgroups laid out by `Device::grid_1d` (x,
// then y past the adapter's per-dimension limit), so B x H past 65535 x WG still runs.
fn flat_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * nwg.x) * WG + lid;
}

fn recurrent_dot(b: u32, j: u32, ngates: u32) -> vec4<f32> {
    let h = p.hidden;
    let jj = min(j, h - 1u);
    let hrow = p.prev_off + min(b, p.batch - 1u) * p.seq_rs;
    // W_hh [G*H, H] row-major: gate g of unit j is row g*H + j.
    let w0 = jj * h;
    let w1 = (h + jj) * h;
    let w2 = (2u * h + jj) * h;
    let w3 = (min(3u, ngates - 1u) * h + jj) * h;
    var acc = vec4<f32>(0.0);
    for (var k = 0u; k < h; k++) {
        let hv = f32(hseq[hrow + k]);
        let w = vec4<f32>(f32(whh[w0 + k]), f32(whh[w1 + k]), f32(whh[w2 + k]), f32(whh[w3 + k]));
        acc = fma(vec4<f32>(hv), w, acc);
    }
    return acc;
}

@compute @workgroup_size(WG)
fn lstm_step(@builtin(workgroup_id) wid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    // Past the last (row, unit): a grid split over y rounds its rows up (no barriers here).
    if (i >= p.batch * p.hidden) {
        return;
    }
    let b = i / p.hidden;
    let j = i % p.hidden;
    lstm_finish(b, j, recurrent_dot(b, j, 4u) + hidden_bias(j, 4u));
}

@compute @workgroup_size(WG)
fn gru_step(@builtin(workgroup_id) wid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    // Past the last (row, unit): a grid split over y rounds its rows up (no barriers here).
    if (i >= p.batch * p.hidden) {
        return;
    }
    let b = i / p.hidden;
    let j = i % p.hidden;
    gru_finish(b, j, recurrent_dot(b, j, 3u) + hidden_bias(j, 3u));
}

// Copies a [B, H] state block between sequence slots and tensors (h0 in, h_n out).
@compute @workgroup_size(WG)
fn load_state(@builtin(workgroup_id) wid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    // Past the last (row, unit): a grid split over y rounds its rows up (no barriers here).
    if (i >= p.batch * p.hidden) {
        return;
    }
    let b = i / p.hidden;
    let j = i % p.hidden;
    if (b >= p.batch) {
        return;
    }
    hseq[p.dst_off + b * p.dst_rs + j] = src[p.src_off + b * p.src_rs + j];
}
