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
// (portable step), rnn_backward_sg8.wgsl (8-lane subgroup step) and rnn_backward_wg.wgsl
// (GPUs). Needs lib/activation.wgsl.

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

// rec: this row's dA_h_{t+1} W_hh (0 on the first processed step).
fn lstm_backward_finish(b: u32, j: u32, rec: f32) {
    if (b >= p.batch || j >= p.hidden) {
        return;
    }
    lstm_backward_finish_at(params_boffs(), b, j, rec);
}

// lstm_backward_finish at the step `o` (b and j in range); returns the four dA_h values as
// stored.
fn lstm_backward_finish_at(o: BOffs, b: u32, j: u32, rec: f32) -> vec4<f32> {
    let h = p.hidden;
    let cin = o.cin + b * h + j;
    let dh = rec + f32(dy[o.dy + b * p.dy_rs + j]) + f32(carry[cin]);
    let go = o.g + b * 4u * h + j;
    let ig = f32(gates[go]);
    let fg = f32(gates[go + h]);
    let gg = f32(gates[go + 2u * h]);
    let og = f32(gates[go + 3u * h]);
    let row = b * p.seq_rs + j;
    let c = f32(cseq[o.cur + row]);
    let cp = f32(cseq[o.prev + row]);
    let tc = tanh_f(c);
    let dc = f32(carry[cin + p.batch * h]) + dh * og * (1.0 - tc * tc);
    let d_o = dh * tc;
    let di = dc * gg;
    let dg = dc * ig;
    let df = dc * cp;
    let cout = o.cout + b * h + j;
    carry[cout] = T(0.0);
    carry[cout + p.batch * h] = T(dc * fg);
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
    return vec4<f32>(dav);
}

fn gru_backward_finish(b: u32, j: u32, rec: f32) {
    if (b >= p.batch || j >= p.hidden) {
        return;
    }
    gru_backward_finish_at(params_boffs(), b, j, rec);
}

// gru_backward_finish at the step `o` (b and j in range); returns the three dA_h values as
// stored (the fourth lane 0).
fn gru_backward_finish_at(o: BOffs, b: u32, j: u32, rec: f32) -> vec4<f32> {
    let h = p.hidden;
    let dh = rec + f32(dy[o.dy + b * p.dy_rs + j]) + f32(carry[o.cin + b * h + j]);
    let go = o.g + b * 4u * h + j;
    let r = f32(gates[go]);
    let z = f32(gates[go + h]);
    let n = f32(gates[go + 2u * h]);
    let hn = f32(gates[go + 3u * h]);
    let hp = f32(hseq[o.prev + b * p.seq_rs + j]);
    let dan = dh * (1.0 - z) * (1.0 - n * n);
    let dar = dan * hn * r * (1.0 - r);
    let daz = dh * (hp - n) * z * (1.0 - z);
    let cout = o.cout + b * h + j;
    carry[cout] = T(dh * z);
    carry[cout + p.batch * h] = T(0.0);
    let ao = o.a + b * p.gh + j;
    let dav = vec3<T>(T(dar), T(daz), T(dan * r));
    dah[ao] = dav.x;
    dah[ao + h] = dav.y;
    dah[ao + 2u * h] = dav.z;
    dax[ao] = dav.x;
    dax[ao + h] = dav.y;
    dax[ao + 2u * h] = T(dan);
    return vec4<f32>(vec3<f32>(dav), 0.0);
}
