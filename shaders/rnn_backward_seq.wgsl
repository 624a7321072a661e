// A whole BPTT of one LSTM / GRU direction in one dispatch, for hidden sizes up to 64 on GPUs
// (the forward's rnn_seq.wgsl, backwards): the per-step kernels cost two dispatches a step,
// while the recurrence's batch rows never meet. A workgroup of 256 invocations owns 4 RP batch
// rows; invocation (lane, rq) = (li % 64, li / 64) owns rows rq * RP .. + RP and units
// lane + 64 u (u < UPI). Each step's dA_h rows (the values it stores, G*H a row) also go to
// workgroup memory, double buffered, so the next processed step's recurrent gradient
//   rec[b, j] = sum_k dA_h[b, k] W_hh[k, j]   (K = G*H, in order, as the portable step sums)
// reads them there while W_hh [G*H, H] is read as stored (64 lanes, 64 consecutive weights);
// one barrier per step. Each step's inputs that do not depend on the recurrence (dy, the saved
// gates and states) load before its recurrent product, and the carries stay in registers.
// A dispatch walks `p.steps` steps (a chunk of a long sequence); one that continues a
// sequence (`p.has_rec`) first loads the dA_h rows of the step processed before it from dah
// (at `p.a_prev`, the values as stored). The gate derivatives are the per-step kernels'
// (lib/rnn_backward_common.wgsl's *_backward_store) at the step's offsets: the same dA_h, dA_x
// and carries. Needs lib/activation.wgsl, lib/rnn_backward_common.wgsl and
// lib/rnn_seq_cells.wgsl.

// Values of one dA buffer: RG RP rows of G*H (the planner keeps RP * G * H <= 512).
const DA_ROWS: u32 = 2048u;

// The dA_h rows of the workgroup's batch rows, two buffers (16 KiB, WebGPU's default limit).
var<workgroup> da: array<f32, 2u * DA_ROWS>;

// The offsets of processed step s.
fn boffs_at(s: u32) -> BOffs {
    let n = p.batch;
    let d_carry = s * 2u * n * p.hidden;
    let d_dy = s * n * p.dy_rs;
    let d_a = s * n * p.gh;
    let d_g = s * n * 4u * p.hidden;
    let d_slot = s * n * p.seq_rs;
    let cin = p.carry_in + d_carry;
    let cout = p.carry_out + d_carry;
    if (p.down == 1u) {
        return BOffs(p.dy_off - d_dy, p.a_off - d_a, p.g_off - d_g, p.prev_off - d_slot,
            p.cur_off - d_slot, cin, cout);
    }
    return BOffs(p.dy_off + d_dy, p.a_off + d_a, p.g_off + d_g, p.prev_off + d_slot,
        p.cur_off + d_slot, cin, cout);
}

// Index of value k of the workgroup's row r in buffer `buf`.
fn da_at(buf: u32, r: u32, k: u32) -> u32 {
    return buf * DA_ROWS + r * p.gh + k;
}

// The recurrent gradients of invocation li's cells from buffer `cur`: element (cell) 2 i + u
// for row rq * RP + i, unit lane + 64 u (units past H read the last unit; never
// stored).
fn seq_rec(cur: u32, li: u32) -> array<f32, CELLS> {
    let lane = li % 64u;
    let rq = li / 64u;
    let h = p.hidden;
    var acc: array<f32, CELLS>;
    for (var k = 0u; k < p.gh; k++) {
        // The rows' dA_h[k] once for every unit.
        var dv: array<f32, 4>;
        for (var i = 0u; i < RP; i++) {
            dv[i] = da[da_at(cur, rq * RP + i, k)];
        }
        for (var u = 0u; u < UPI; u++) {
            let w = f32(whh[k * h + min(lane + 64u * u, h - 1u)]);
            for (var i = 0u; i < RP; i++) {
                acc[2u * i + u] = fma(dv[i], w, acc[2u * i + u]);
            }
        }
    }
    return acc;
}

// A continuing chunk: the dA_h rows of the step processed before it into buffer 0 (rows past
// the batch are left alone: their results are never stored).
fn load_prev_da(wid: u32, li: u32) {
    if (p.has_rec == 0u) {
        return;
    }
    let lane = li % 64u;
    let rq = li / 64u;
    for (var i = 0u; i < RP; i++) {
        let r = rq * RP + i;
        let b = wid * rows() + r;
        if (b < p.batch) {
            for (var k = lane; k < p.gh; k += 64u) {
                da[da_at(0u, r, k)] = f32(dah[p.a_prev + b * p.gh + k]);
            }
        }
    }
}

// Stores the dA_h values `v` of row r, unit j into buffer `buf` (ngates of them).
fn put_da(buf: u32, r: u32, j: u32, v: vec4<f32>, ngates: u32) {
    let h = p.hidden;
    da[da_at(buf, r, j)] = v.x;
    da[da_at(buf, r, h + j)] = v.y;
    da[da_at(buf, r, 2u * h + j)] = v.z;
    if (ngates == 4u) {
        da[da_at(buf, r, 3u * h + j)] = v.w;
    }
}

// The carries into the chunk's first step of invocation li's cells, as stored; from then on
// they stay in registers (each cell is this invocation's).
fn seq_carries(wid: u32, li: u32, ngates: u32) -> array<vec2<f32>, CELLS> {
    var cy: array<vec2<f32>, CELLS>;
    let o = boffs_at(0u);
    for (var e = 0u; e < CELLS; e++) {
        let c = cell(wid, li, e);
        if (c.ok) {
            cy[e] = carry_in(o, c.b, c.j, ngates);
        }
    }
    return cy;
}

// The recurrent gradients of processed step s (none on a sequence's first step).
fn step_rec(s: u32, li: u32) -> array<f32, CELLS> {
    var rec: array<f32, CELLS>;
    if (s > 0u || p.has_rec == 1u) {
        rec = seq_rec(s & 1u, li);
    }
    return rec;
}

@compute @workgroup_size(256)
fn lstm_backward_seq(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    load_prev_da(wid.x, li);
    var cy = seq_carries(wid.x, li, 4u);
    workgroupBarrier();
    for (var s = 0u; s < p.steps; s++) {
        let o = boffs_at(s);
        // The step's inputs first: their latency hides behind the recurrent product.
        var xs: array<BIn, CELLS>;
        for (var e = 0u; e < CELLS; e++) {
            let c = cell(wid.x, li, e);
            if (c.ok) {
                xs[e] = lstm_bwd_in(o, c.b, c.j);
            }
        }
        let rec = step_rec(s, li);
        for (var e = 0u; e < CELLS; e++) {
            let c = cell(wid.x, li, e);
            if (c.ok) {
                let r = lstm_backward_store(o, c.b, c.j, rec[e], xs[e], cy[e]);
                cy[e] = r.carry;
                put_da(1u - (s & 1u), c.r, c.j, r.da, 4u);
            }
        }
        workgroupBarrier();
    }
}

@compute @workgroup_size(256)
fn gru_backward_seq(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    load_prev_da(wid.x, li);
    var cy = seq_carries(wid.x, li, 3u);
    workgroupBarrier();
    for (var s = 0u; s < p.steps; s++) {
        let o = boffs_at(s);
        var xs: array<BIn, CELLS>;
        for (var e = 0u; e < CELLS; e++) {
            let c = cell(wid.x, li, e);
            if (c.ok) {
                xs[e] = gru_bwd_in(o, c.b, c.j);
            }
        }
        let rec = step_rec(s, li);
        for (var e = 0u; e < CELLS; e++) {
            let c = cell(wid.x, li, e);
            if (c.ok) {
                let r = gru_backward_store(o, c.b, c.j, rec[e], xs[e], cy[e]);
                cy[e] = r.carry;
                put_da(1u - (s & 1u), c.r, c.j, r.da, 3u);
            }
        }
        workgroupBarrier();
    }
}
