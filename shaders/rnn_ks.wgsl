// Recurrent step for GPUs whose large-tile step (rnn_wg.wgsl) would leave most of the device
// idle: B 64, H 512 gives that step 32 workgroups for an H200's 132 SMs, each walking K = 512
// in 64 dependent steps of 8, so a step costs its K walk's latency (about 50 us), not its
// 134 MFLOP. Here a workgroup of 256 invocations owns a small tile, RG * RT = 16 batch rows x
// UB = 8 hidden units (all gates), and splits K over KS = 8 lanes per output: lane (o, s)
// walks k = s, s + KS, ... (the KS lanes of an output read KS consecutive values of one h
// row and of each gate's W_hh row: 32-byte segments in f32) and keeps RT rows x 4 gates in
// registers. The KS partials of an output meet in workgroup memory and lane s < RT adds those
// of row s in slice order (deterministic), then applies the gate math of lib/rnn_common.wgsl.
// The same problem gets 8x the workgroups and an eighth of the K walk per lane. Needs
// lib/activation.wgsl and lib/rnn_common.wgsl (src/ops/rnn/step.rs mirrors the tile).

// Lanes per output (slices of K).
const KS: u32 = 8u;
// Hidden units per workgroup.
const UB: u32 = 8u;
// Batch rows per lane, and row groups per workgroup: 256 = KS * UB * RG.
const RT: u32 = 4u;
const RG: u32 = 4u;
const LANES: u32 = 256u;

// Every lane's partial gates, row after row: red[i * LANES + lane] for row i < RT (16 KiB,
// WebGPU's default limit).
var<workgroup> red: array<vec4<f32>, 1024>;

// h_{t-1} W_hh^T over this lane's slice of K for unit j and batch rows b0.. b0 + RT: acc[i]
// holds the gates of row b0 + i (a GRU's fourth lane repeats its third gate, unused).
fn slice_dot(j: u32, b0: u32, s: u32, ngates: u32) -> array<vec4<f32>, RT> {
    var acc: array<vec4<f32>, RT>;
    let h = p.hidden;
    if (j >= h) {
        return acc;
    }
    // Rows past the batch read the last row (valid memory); their results are never stored.
    var rows: array<u32, RT>;
    for (var i = 0u; i < RT; i++) {
        rows[i] = p.prev_off + min(b0 + i, p.batch - 1u) * p.seq_rs;
    }
    let gs = h * h;
    let w0 = j * h;
    let w3 = min(3u, ngates - 1u) * gs + w0;
    for (var k = s; k < h; k += KS) {
        let w = vec4<f32>(f32(whh[w0 + k]), f32(whh[w0 + gs + k]), f32(whh[w0 + 2u * gs + k]),
                          f32(whh[w3 + k]));
        for (var i = 0u; i < RT; i++) {
            acc[i] = fma(vec4<f32>(f32(hseq[rows[i] + k])), w, acc[i]);
        }
    }
    return acc;
}

// Leaves this lane's partials, then lane s < RT of each output adds row s's KS partials in
// slice order and returns them (lanes s >= RT get zeros, unused). Holds a barrier: every
// invocation calls it.
fn reduce_row(acc: array<vec4<f32>, RT>, lane: u32) -> vec4<f32> {
    for (var i = 0u; i < RT; i++) {
        red[i * LANES + lane] = acc[i];
    }
    workgroupBarrier();
    let s = lane % KS;
    var sum = vec4<f32>(0.0);
    if (s < RT) {
        let first = s * LANES + (lane - s);
        for (var t = 0u; t < KS; t++) {
            sum += red[first + t];
        }
    }
    return sum;
}

// (unit, first batch row of the lane's output) of lane `lane` in workgroup `wid`.
fn ks_output(wid: vec3<u32>, lane: u32) -> vec2<u32> {
    let o = lane / KS;
    return vec2<u32>(wid.x * UB + o % UB, wid.y * (RG * RT) + (o / UB) * RT);
}

@compute @workgroup_size(256)
fn lstm_step_ks(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(local_invocation_index) lane: u32) {
    let at = ks_output(wid, lane);
    let s = lane % KS;
    let sum = reduce_row(slice_dot(at.x, at.y, s, 4u), lane);
    if (s < RT) {
        lstm_finish(at.y + s, at.x, sum + hidden_bias(at.x, 4u));
    }
}

@compute @workgroup_size(256)
fn gru_step_ks(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(local_invocation_index) lane: u32) {
    let at = ks_output(wid, lane);
    let s = lane % KS;
    let sum = reduce_row(slice_dot(at.x, at.y, s, 3u), lane);
    if (s < RT) {
        gru_finish(at.y + s, at.x, sum + hidden_bias(at.x, 3u));
    }
}
