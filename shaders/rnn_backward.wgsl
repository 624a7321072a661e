// Portable BPTT step (any adapter): one invocation per (batch row, hidden unit), looping over
// the G*H columns of dA_{t+1} for the recurrent gradient. Needs lib/activation.wgsl and
// lib/rnn_backward_common.wgsl.

override WG: u32;

// dA_h_{t+1} W_hh for row b, unit j.
fn recurrent_grad(b: u32, j: u32) -> f32 {
    let h = p.hidden;
    var acc = 0.0;
    if (p.has_rec != 0u) {
        let arow = p.a_prev + min(b, p.batch - 1u) * p.gh;
        let jj = min(j, h - 1u);
        for (var k = 0u; k < p.gh; k++) {
            acc = fma(f32(dah[arow + k]), f32(whh[k * h + jj]), acc);
        }
    }
    return acc;
}

@compute @workgroup_size(WG)
fn lstm_backward_step(@builtin(workgroup_id) wid: vec3<u32>,
                      @builtin(num_workgroups) nwg: vec3<u32>,
                      @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    // Past the last (row, unit): a grid split over y rounds its rows up (no barriers here).
    if (i >= p.batch * p.hidden) {
        return;
    }
    let b = i / p.hidden;
    let j = i % p.hidden;
    lstm_backward_finish(b, j, recurrent_grad(b, j));
}

@compute @workgroup_size(WG)
fn gru_backward_step(@builtin(workgroup_id) wid: vec3<u32>,
                     @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    // Past the last (row, unit): a grid split over y rounds its rows up (no barriers here).
    if (i >= p.batch * p.hidden) {
        return;
    }
    let b = i / p.hidden;
    let j = i % p.hidden;
    gru_backward_finish(b, j, recurrent_grad(b, j));
}
