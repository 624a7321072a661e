// One fused recurrent step of an LSTM (gates i, f, g, o) or GRU (gates r, z, n), PyTorch
// semantics. The input projection x W_ih^T + b_ih for every step was done beforehand by one
// GEMM (xp [T, B, G*H]); a step computes h_{t-1} W_hh^T for all gates of a block of hidden units
// and batch rows and applies the gate math in registers: no gate kernels, no gate slices in
// memory except the activations saved for backward.
//
// States live in "sequence" buffers [T + 2, B, D*H]: slot 0 holds h0/c0 of the forward
// direction, slot T + 1 that of the reverse one, slot t + 1 the state after step t. A step reads
// slot `prev` and writes slot `next` of the same buffer (disjoint rows), so consecutive steps
// chain without copies and the layer output is a view of slots 1..T.
// This file: parameters, bindings and the gate math shared by rnn.wgsl (portable step,
// state copies), rnn_sg8.wgsl (8-lane subgroup step), rnn_wg.wgsl and rnn_ks.wgsl (GPU steps)
// and rnn_seq.wgsl (GPUs: every step in one dispatch). Needs lib/activation.wgsl.

struct Params {
    batch: u32,
    hidden: u32,
    // Row stride (elements) of the sequence buffers: D * H.
    seq_rs: u32,
    // Offsets of this step's previous / next state rows (slot * B * D*H + dir * H).
    prev_off: u32,
    next_off: u32,
    // This step's slice of xp and its row stride (G * H).
    x_off: u32,
    x_rs: u32,
    // Saved gate activations for this step ([B, 4H] at g_off).
    g_off: u32,
    // load_state: copy a [B, H] block from src (src_off, src_rs) to dst (dst_off, dst_rs).
    src_off: u32,
    src_rs: u32,
    dst_off: u32,
    dst_rs: u32,
    // rnn_seq.wgsl: the steps of the direction, 1 when it runs backwards in time (the slots
    // and slices above are step 0's and move down), and the elements between two steps' saved
    // gates (0: every step writes the same scratch rows).
    steps: u32,
    reverse: u32,
    g_step: u32,
    pad0: u32,
}

// Where a step reads and writes: the previous / next state slot rows, its xp slice and its
// saved gates (the per-step kernels take them from the params, rnn_seq.wgsl from its step).
struct Offs {
    prev: u32,
    next: u32,
    x: u32,
    g: u32,
}

fn params_offs() -> Offs {
    return Offs(p.prev_off, p.next_off, p.x_off, p.g_off);
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> whh: array<T>;
@group(0) @binding(2) var<storage, read> bhh: array<T>;
@group(0) @binding(3) var<storage, read> xp: array<T>;
@group(0) @binding(4) var<storage, read_write> hseq: array<T>;
@group(0) @binding(5) var<storage, read_write> cseq: array<T>;
@group(0) @binding(6) var<storage, read_write> gates: array<T>;
@group(0) @binding(7) var<storage, read> src: array<T>;

// ---- gate math (shared by both variants) -------------------------------------------------

// b_hh of hidden unit j's gates (the 4th lane is unused by a GRU's 3 gates).
fn hidden_bias(j: u32, ngates: u32) -> vec4<f32> {
    let h = p.hidden;
    let jj = min(j, h - 1u);
    let g3 = f32(bhh[min(3u, ngates - 1u) * h + jj]);
    return vec4<f32>(f32(bhh[jj]), f32(bhh[h + jj]), f32(bhh[2u * h + jj]), g3);
}

// The input projection (xp) of gates 0 .. ngates of batch row b, unit j at step `o` (a GRU's
// fourth lane 0).
fn xp_gates(o: Offs, b: u32, j: u32, ngates: u32) -> vec4<f32> {
    let h = p.hidden;
    let xo = o.x + b * p.x_rs + j;
    var g3 = 0.0;
    if (ngates == 4u) {
        g3 = f32(xp[xo + 3u * h]);
    }
    return vec4<f32>(f32(xp[xo]), f32(xp[xo + h]), f32(xp[xo + 2u * h]), g3);
}

// pre_h: h_{t-1} W_hh^T + b_hh for gates (i, f, g, o) of batch row b, hidden unit j.
fn lstm_finish(b: u32, j: u32, pre_h: vec4<f32>) {
    if (b >= p.batch || j >= p.hidden) {
        return;
    }
    let o = params_offs();
    let cp = f32(cseq[o.prev + b * p.seq_rs + j]);
    lstm_store(o, b, j, pre_h + xp_gates(o, b, j, 4u), cp);
}

// The LSTM gate math of row b, unit j at step `o` from the full pre-activations `pre`
// (h_{t-1} W_hh^T + b_hh + xp) and c_{t-1} as stored (`cp`): stores c, h and the gates, and
// returns (c, h) as stored (b and j in range).
fn lstm_store(o: Offs, b: u32, j: u32, pre: vec4<f32>, cp: f32) -> vec2<f32> {
    let h = p.hidden;
    let ig = sigmoid_f(pre.x);
    let fg = sigmoid_f(pre.y);
    let gg = tanh_f(pre.z);
    let og = sigmoid_f(pre.w);
    let row = b * p.seq_rs + j;
    let c = fg * cp + ig * gg;
    let cv = T(c);
    cseq[o.next + row] = cv;
    let hv = T(og * tanh_f(c));
    hseq[o.next + row] = hv;
    let go = o.g + b * 4u * h + j;
    gates[go] = T(ig);
    gates[go + h] = T(fg);
    gates[go + 2u * h] = T(gg);
    gates[go + 3u * h] = T(og);
    return vec2<f32>(f32(cv), f32(hv));
}

// pre_h: (W_hr h + b_hr, W_hz h + b_hz, W_hn h + b_hn, unused). r scales (W_hn h + b_hn) as in
// PyTorch.
fn gru_finish(b: u32, j: u32, pre_h: vec4<f32>) {
    if (b >= p.batch || j >= p.hidden) {
        return;
    }
    let o = params_offs();
    let hp = f32(hseq[o.prev + b * p.seq_rs + j]);
    gru_store(o, b, j, pre_h, xp_gates(o, b, j, 3u), hp);
}

// The GRU gate math of row b, unit j at step `o` from pre_h, the input projection `xg` and
// h_{t-1} as stored (`hp`): stores h and the gates, and returns h as stored (b and j in
// range).
fn gru_store(o: Offs, b: u32, j: u32, pre_h: vec4<f32>, xg: vec4<f32>, hp: f32) -> f32 {
    let h = p.hidden;
    let r = sigmoid_f(xg.x + pre_h.x);
    let z = sigmoid_f(xg.y + pre_h.y);
    let hn = pre_h.z;
    let n = tanh_f(xg.z + r * hn);
    let row = b * p.seq_rs + j;
    let hv = T((1.0 - z) * n + z * hp);
    hseq[o.next + row] = hv;
    let go = o.g + b * 4u * h + j;
    gates[go] = T(r);
    gates[go + h] = T(z);
    gates[go + 2u * h] = T(n);
    gates[go + 3u * h] = T(hn);
    return f32(hv);
}
