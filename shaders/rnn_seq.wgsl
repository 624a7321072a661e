// A whole sequence of one LSTM / GRU direction in one dispatch (one per chunk of up to 64
// steps, each starting from the slot the last wrote), for hidden sizes up to 64 (the planner's
// limit, `seq_shape`; the buffers hold 128 with UPI = 2): the per-step
// kernels cost a dispatch each (on an H200 about 16 us a step for the bench's B 256, H 64,
// whose LSTM product is 8 MFLOP), while the batch rows of a recurrence never meet, so a
// workgroup can walk every step of its own rows with one barrier per step. A workgroup of
// 256 invocations owns 4 RP batch rows; invocation (lane, rq) = (li % 64, li / 64) owns rows
// rq * RP .. + RP of those and units lane + 64 u (u < UPI), all gates in a vec4 (the planner
// takes RP < 4 where 4-row groups would leave the device's slots idle). The rows'
// h_{t-1} live in workgroup memory (double buffered: a step reads one buffer and writes the
// other, so one barrier per step suffices), their c in registers (each (row, unit) is one
// invocation's); each step's input projections are loaded before its dot product. W_hh comes
// transposed, [H, G*H] (row k holds every gate row's k-th weight), so the 64 lanes of a row
// group read 64 consecutive weights per gate and k; its rows serve RP batch rows each. Sums
// run over k in order and add b_hh last, as the portable step does. Every step writes what
// the per-step kernels write (h and c into slot next, the saved gates at g_off + s g_step), so
// training and the outputs are unchanged. Needs lib/activation.wgsl, lib/rnn_common.wgsl and
// lib/rnn_seq_cells.wgsl.

// The most rows per workgroup (RP = 4) and the widest H.
const RMAX: u32 = 16u;
const HMAX: u32 = 128u;

// h_{t-1} of the workgroup's rows, two buffers of RMAX x HMAX (16 KiB, WebGPU's default
// limit).
var<workgroup> hs: array<f32, 2u * RMAX * HMAX>;

// The slots and slices step s of the direction reads and writes.
fn offs_at(s: u32) -> Offs {
    let ds = s * p.batch * p.seq_rs;
    let dx = s * p.batch * p.x_rs;
    let dg = s * p.g_step;
    if (p.reverse == 1u) {
        return Offs(p.prev_off - ds, p.next_off - ds, p.x_off - dx, p.g_off - dg);
    }
    return Offs(p.prev_off + ds, p.next_off + ds, p.x_off + dx, p.g_off + dg);
}

// Workgroup-memory index of row `r` (below rows()) of buffer `buf`, unit `j`.
fn hs_at(buf: u32, r: u32, j: u32) -> u32 {
    return (buf * RMAX + r) * HMAX + j;
}

// The initial state of invocation li's cells into buffer 0 (other rows are read only for
// rows past the batch, whose results are never stored).
fn seq_load(wid: u32, li: u32) {
    for (var e = 0u; e < CELLS; e++) {
        let c = cell(wid, li, e);
        if (c.ok) {
            hs[hs_at(0u, c.r, c.j)] = f32(hseq[p.prev_off + c.b * p.seq_rs + c.j]);
        }
    }
}

// h_{t-1} W_hh^T + b_hh from buffer `cur` for invocation li's cells: element (cell)
// 2 i + u holds the gates of row rq * RP + i, unit lane + 64 u (a GRU's fourth lane repeats
// its third gate, unused). Units past H read the last unit; their results are never stored.
fn seq_dot(cur: u32, li: u32, ngates: u32) -> array<vec4<f32>, CELLS> {
    let lane = li % 64u;
    let rq = li / 64u;
    let h = p.hidden;
    let gh = ngates * h;
    let g3 = min(3u, ngates - 1u) * h;
    var acc: array<vec4<f32>, CELLS>;
    for (var k = 0u; k < h; k++) {
        let wr = k * gh;
        // The rows' h_{t-1}[k] once for every unit.
        var hv: array<f32, 4>;
        for (var i = 0u; i < RP; i++) {
            hv[i] = hs[hs_at(cur, rq * RP + i, k)];
        }
        for (var u = 0u; u < UPI; u++) {
            let j = min(lane + 64u * u, h - 1u);
            let w = vec4<f32>(
                f32(whh[wr + j]),
                f32(whh[wr + h + j]),
                f32(whh[wr + 2u * h + j]),
                f32(whh[wr + g3 + j]),
            );
            for (var i = 0u; i < RP; i++) {
                acc[2u * i + u] = fma(vec4<f32>(hv[i]), w, acc[2u * i + u]);
            }
        }
    }
    for (var u = 0u; u < UPI; u++) {
        let bias = hidden_bias(lane + 64u * u, ngates);
        for (var i = 0u; i < RP; i++) {
            acc[2u * i + u] += bias;
        }
    }
    return acc;
}

// The input projections of step `o` for invocation li's cells, loaded before the step's dot
// product so their latency hides behind it (they do not depend on the recurrence).
fn seq_xp(o: Offs, wid: u32, li: u32, ngates: u32) -> array<vec4<f32>, CELLS> {
    var xg: array<vec4<f32>, CELLS>;
    for (var e = 0u; e < CELLS; e++) {
        let c = cell(wid, li, e);
        if (c.ok) {
            xg[e] = xp_gates(o, c.b, c.j, ngates);
        }
    }
    return xg;
}

@compute @workgroup_size(256)
fn lstm_seq(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    seq_load(wid.x, li);
    // c_{t-1} of each cell as stored, kept in registers: each cell is this invocation's.
    var cs: array<f32, CELLS>;
    for (var e = 0u; e < CELLS; e++) {
        let c = cell(wid.x, li, e);
        if (c.ok) {
            cs[e] = f32(cseq[p.prev_off + c.b * p.seq_rs + c.j]);
        }
    }
    workgroupBarrier();
    for (var s = 0u; s < p.steps; s++) {
        let cur = s & 1u;
        let o = offs_at(s);
        let xg = seq_xp(o, wid.x, li, 4u);
        let acc = seq_dot(cur, li, 4u);
        for (var e = 0u; e < CELLS; e++) {
            let c = cell(wid.x, li, e);
            if (c.ok) {
                let ch = lstm_store(o, c.b, c.j, acc[e] + xg[e], cs[e]);
                cs[e] = ch.x;
                hs[hs_at(1u - cur, c.r, c.j)] = ch.y;
            }
        }
        workgroupBarrier();
    }
}

@compute @workgroup_size(256)
fn gru_seq(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    seq_load(wid.x, li);
    workgroupBarrier();
    for (var s = 0u; s < p.steps; s++) {
        let cur = s & 1u;
        let o = offs_at(s);
        let xg = seq_xp(o, wid.x, li, 3u);
        let acc = seq_dot(cur, li, 3u);
        for (var e = 0u; e < CELLS; e++) {
            let c = cell(wid.x, li, e);
            if (c.ok) {
                // h_{t-1} as stored is this step's buffer.
                let hp = hs[hs_at(cur, c.r, c.j)];
                hs[hs_at(1u - cur, c.r, c.j)] = gru_store(o, c.b, c.j, acc[e], xg[e], hp);
            }
        }
        workgroupBarrier();
    }
}
