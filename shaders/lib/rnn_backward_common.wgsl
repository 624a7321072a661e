// One fused BPTT step of an LSTM (gates i, f, g, o) or GRU (gates r, z, n), PyTorch semantics.
// One invocation per (batch row b, hidden unit j) computes the recurrent gradient
//   dh_t[b, j] = dy_t[b, j] + carry_h[b, j] + sum_k dA_h_{t+1}[b, k] W_hh[k, j]   (K = G*H)
// and the gate derivatives in registers, writing the pre-activation gate gradients of this
// step (dA_h for W_hh / b_hh / the next recurrent product; for a GRU also dA_x for W_ih / b_ih /
// dx, which differs from dA_h in the n block) and the carries into the previous step:
// LSTM dc_{t-1} (carry_c), GRU dh_t * z (the direct path of h_{t-1}, carry_h).
// Saved state from the training forward: gates [T, B, 4H] (LSTM i, f, g, o; GRU r, z, n, hn),
// the sequence buffers [T + 2, B, D*H] holding h_{t-1} / c_{t-1} (slot `prev`) and c_t (slot
// `cur`). Carries live in [T + 1, 2, B, H]: step s reads slot s and writes slot s + 1.
// This file: parameters, bindings and the gate derivatives shared by rnn_backward.wgsl
// (portable step), rnn_backward_sg8.wgsl (8-lane subgroup step), rnn_backward_wg.wgsl (GPUs)
// and rnn_backward_seq.wgsl (GPUs: every step in one dispatch). Needs lib/activation.wgsl.

struct Params {
    batch: u32,
    hidden: u32,
    // G * H.
    gh: u32,
    // 0 on the first processed step (no dA_{t+1} yet), 1 afterwards.
    has_rec: u32,
    // dy of this step and direction (offset of row 0, row stride D*H).
    dy_off: u32,
    dy_rs: u32,
    // This step's dA rows ([B, G*H] at a_off) and the previously processed step's (a_prev).
    a_off: u32,
    a_prev: u32,
    // This step's saved gates ([B, 4H] at g_off).
    g_off: u32,
    // Sequence buffers: row stride D*H, previous-state and current-state row offsets.
    seq_rs: u32,
    prev_off: u32,
    cur_off: u32,
    // Carry slots read and written by this step ([2, B, H] each: h then c).
    carry_in: u32,
    carry_out: u32,
    // Always 0, unknown to the compiler (see rnn_backward_sg8.wgsl).
    zero: f32,
    // K slices of the GPU step's recurrent product (rnn_backward_wg.wgsl); unused elsewhere.
    splits: u32,
    // rnn_backward_seq.wgsl: the steps of the direction, and 1 when the time index falls as
    // processing goes on (the forward direction; the offsets above are step 0's).
    steps: u32,
    down: u32,
    pad0: u32,
    pad1: u32,
}

// Where a step reads and writes: its dy rows, dA rows, saved gates, the state slots before and
// after it, and its carry slots in and out (the per-step kernels take them from the params,
// rnn_backward_seq.wgsl from its step).
struct BOffs {
    dy: u32,
    a: u32,
    g: u32,
    prev: u32,
    cur: u32,
    cin: u32,
    cout: u32,
}

fn params_boffs() -> BOffs {
    return BOffs(p.dy_off, p.a_off, p.g_off, p.prev_off, p.cur_off, p.carry_in, p.carry_out);
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> whh: array<T>;
@group(0) @binding(2) var<storage, read> dy: array<T>;
@group(0) @binding(3) var<storage, read> gates: array<T>;
@group(0) @binding(4) var<storage, read> hseq: array<T>;
@group(0) @binding(5) var<storage, read> cseq: array<T>;
@group(0) @binding(6) var<storage, read_write> carry: array<T>;
@group(0) @binding(7) var<storage, read_write> dah: array<T>;
@group(0) @binding(8) var<storage, read_write> dax: array<T>;

// What a step reads for batch row b, unit j that does not depend on the recurrence: dy, the
// saved gates, and for an LSTM c_t and c_{t-1} (s.x, s.y), for a GRU h_{t-1} (s.x).
struct BIn {
    dy: f32,
    g: vec4<f32>,
    s: vec2<f32>,
}

// A step's results for one (row, unit): the dA_h values as stored (a GRU's fourth lane 0) and
// the carries into the next processed step as stored (h, c).
struct BOut {
    da: vec4<f32>,
    carry: vec2<f32>,
}

// dy and the saved gates of (b, j) at step `o`, the state values left 0.
fn bwd_in(o: BOffs, b: u32, j: u32) -> BIn {
    let h = p.hidden;
    let go = o.g + b * 4u * h + j;
    let g = vec4<f32>(
        f32(gates[go]),
        f32(gates[go + h]),
        f32(gates[go + 2u * h]),
        f32(gates[go + 3u * h]),
    );
    return BIn(f32(dy[o.dy + b * p.dy_rs + j]), g, vec2<f32>(0.0));
}

// An LSTM step's inputs: bwd_in with c_t and c_{t-1}. (Each kind reads only its own state
// buffer: an entry point's pipeline layout holds every binding its code can reach.)
fn lstm_bwd_in(o: BOffs, b: u32, j: u32) -> BIn {
    var x = bwd_in(o, b, j);
    let row = b * p.seq_rs + j;
    x.s = vec2<f32>(f32(cseq[o.cur + row]), f32(cseq[o.prev + row]));
    return x;
}

// A GRU step's inputs: bwd_in with h_{t-1}.
fn gru_bwd_in(o: BOffs, b: u32, j: u32) -> BIn {
    var x = bwd_in(o, b, j);
    x.s.x = f32(hseq[o.prev + b * p.seq_rs + j]);
    return x;
}

// The carries into step `o` of (b, j) as stored (h, c); a GRU (3 gates) has no c carry.
fn carry_in(o: BOffs, b: u32, j: u32, ngates: u32) -> vec2<f32> {
    let cin = o.cin + b * p.hidden + j;
    var cy = vec2<f32>(f32(carry[cin]), 0.0);
    if (ngates == 4u) {
        cy.y = f32(carry[cin + p.batch * p.hidden]);
    }
    return cy;
}

// rec: this row's dA_h_{t+1} W_hh (0 on the first processed step).
fn lstm_backward_finish(b: u32, j: u32, rec: f32) {
    if (b >= p.batch || j >= p.hidden) {
        return;
    }
    let o = params_boffs();
    lstm_backward_store(o, b, j, rec, lstm_bwd_in(o, b, j), carry_in(o, b, j, 4u));
}

// The LSTM gate derivatives of (b, j) at step `o` from the recurrent gradient `rec`, the
// step's inputs `x` (bwd_in) and carries `cy` (carry_in): stores dA_h and the carries out.
fn lstm_backward_store(o: BOffs, b: u32, j: u32, rec: f32, x: BIn, cy: vec2<f32>) -> BOut {
    let h = p.hidden;
    let dh = rec + x.dy + cy.x;
    let ig = x.g.x;
    let fg = x.g.y;
    let gg = x.g.z;
    let og = x.g.w;
    let c = x.s.x;
    let cp = x.s.y;
    let tc = tanh_f(c);
    let dc = cy.y + dh * og * (1.0 - tc * tc);
    let d_o = dh * tc;
    let di = dc * gg;
    let dg = dc * ig;
    let df = dc * cp;
    let cout = o.cout + b * h + j;
    let carry_c = T(dc * fg);
    carry[cout] = T(0.0);
    carry[cout + p.batch * h] = carry_c;
    let ao = o.a + b * p.gh + j;
    let dav = vec4<T>(
        T(di * ig * (1.0 - ig)),
        T(df * fg * (1.0 - fg)),
        T(dg * (1.0 - gg * gg)),
        T(d_o * og * (1.0 - og)),
    );
    dah[ao] = dav.x;
    dah[ao + h] = dav.y;
    dah[ao + 2u * h] = dav.z;
    dah[ao + 3u * h] = dav.w;
    return BOut(vec4<f32>(dav), vec2<f32>(0.0, f32(carry_c)));
}

fn gru_backward_finish(b: u32, j: u32, rec: f32) {
    if (b >= p.batch || j >= p.hidden) {
        return;
    }
    let o = params_boffs();
    gru_backward_store(o, b, j, rec, gru_bwd_in(o, b, j), carry_in(o, b, j, 3u));
}

// The GRU gate derivatives of (b, j) at step `o`, as lstm_backward_store; the fourth dA_h lane
// is 0.
fn gru_backward_store(o: BOffs, b: u32, j: u32, rec: f32, x: BIn, cy: vec2<f32>) -> BOut {
    let h = p.hidden;
    let dh = rec + x.dy + cy.x;
    let r = x.g.x;
    let z = x.g.y;
    let n = x.g.z;
    let hn = x.g.w;
    let hp = x.s.x;
    let dan = dh * (1.0 - z) * (1.0 - n * n);
    let dar = dan * hn * r * (1.0 - r);
    let daz = dh * (hp - n) * z * (1.0 - z);
    let cout = o.cout + b * h + j;
    let carry_h = T(dh * z);
    carry[cout] = carry_h;
    carry[cout + p.batch * h] = T(0.0);
    let ao = o.a + b * p.gh + j;
    let dav = vec3<T>(T(dar), T(daz), T(dan * r));
    dah[ao] = dav.x;
    dah[ao + h] = dav.y;
    dah[ao + 2u * h] = dav.z;
    dax[ao] = dav.x;
    dax[ao + h] = dav.y;
    dax[ao + 2u * h] = T(dan);
    return BOut(vec4<f32>(vec3<f32>(dav), 0.0), vec2<f32>(f32(carry_h), 0.0));
}
