// Fused scaled-dot-product attention (src/ops/attention/kernel.rs), FlashAttention-2's
// schedule (Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work
// Partitioning", 2023) in portable WGSL. q is [N, L, E], k [Nk, S, E], v [Nk, S, Ev], all packed;
// query batch n reads key/value batch kv_of(n) (grouped-query attention: `group` query heads
// share one key/value head). A workgroup of BR x BC invocations owns BR rows and walks the
// other side in tiles of BC; invocation (r, c) computes one score of the tile, and owns the
// output columns c0 + a * BC + c (a < ACC) of its row. Operand chunks of DK values pass
// through workgroup memory with rows padded to PK = DK + 1 floats (no bank conflicts when
// the lanes of a row read a column). Sums run in a fixed order: results are deterministic.
//
// attn_fwd: rows are queries (of one query batch, or with flags bit 3 of every query head of
// one key/value batch, head after head: grouped-query decoding reads each K/V tile once per
// group). Per key tile: scores, then the row's running max m (every lane of the row folds the
// tile's scores) and sum l (the row's c = 0 invocation adds the lanes' weights), then the
// rescaled accumulation of P V.
// Writes out = acc / l and stats[n L + i] = m + log l (the log-sum-exp; +inf for a row whose
// keys are all masked, whose output is then 0 as in PyTorch's safe softmax).
// attn_dq: rows are queries. D_i = dO_i . O_i (written to stats[N L + n L + i] for attn_dkv),
// then per key tile P = exp(s - lse), dS = P (z dO V^T - D), dQ += dS K.
// attn_dkv: rows are keys of one key/value batch; walks the query tiles of every query head
// of its group: dV += (P z)^T dO, dK += dS^T Q.
// Column blocks (grid) split Ev (and E for dQ / dK) into ranges of ACC * BC columns; a block
// recomputes the scores, so ACC bounds registers, not head sizes.
// Key splits (attn_fwd, p.splits > 1, FlashDecoding): split t of a row walks the keys
// [t C, (t + 1) C) with C = ceil(S / (BC splits)) BC and writes its unnormalized output, running
// max and sum to the scratch bound as `stats`: outputs at ((t N + n) L + i) Ev + col, then
// (max, sum) pairs at splits N L Ev + 2 ((t N + n) L + i). attn_combine merges the splits of
// each output element in split order and writes out and the log-sum-exp.
//
// max_nan (a NaN score makes its row NaN, as PyTorch) comes from lib/activation.wgsl.
//
// Dropout keeps weight (n, i, j) when Philox(j, i, n, ctr) (lib/philox.wgsl) gives a unit
// value >= p, and scales kept weights by 1 / (1 - p); the backward redraws the same bits.

// Params, bindings and the score / dropout helpers: lib/attention_common.wgsl.

override BR: u32;
override BC: u32;
// Chunk width of the staged operands; a multiple of BC.
override DK: u32;
override PK: u32 = DK + 1u;
override WGS: u32 = BR * BC;
override TA: u32 = BR * PK;
override TB: u32 = BC * PK;
override TP: u32 = BR * BC;

// Output columns per invocation and column block (src/ops/attention/plan.rs mirrors it).
const ACC: u32 = 16u;

var<workgroup> ta: array<f32, TA>;
var<workgroup> tb: array<f32, TB>;
var<workgroup> pt: array<f32, TP>;
var<workgroup> pt2: array<f32, TP>;
var<workgroup> rm: array<f32, BR>;
var<workgroup> rl: array<f32, BR>;

// Stages rows [r0, r0 + rows) x columns [c0, c0 + DK) of the packed [.., width] operand `src`
// (SRC_Q, ...) at `base` (whose rows end at `lim`) into ta (side 0) or tb (side 1), zero
// outside. Four loads go out before their four stores: a load then its store per step waited
// on every load in turn, and the decode tile's 32 lanes stage 32 x 64 values a tile (64
// steps each).
fn stage(src: u32, side: u32, lid: u32, base: u32, r0: u32, rows: u32, lim: u32, c0: u32,
         width: u32) {
    let total = rows * DK;
    var t = lid;
    for (; t + 3u * WGS < total; t += 4u * WGS) {
        let v0 = stage_val(src, base, r0, lim, c0, width, t);
        let v1 = stage_val(src, base, r0, lim, c0, width, t + WGS);
        let v2 = stage_val(src, base, r0, lim, c0, width, t + 2u * WGS);
        let v3 = stage_val(src, base, r0, lim, c0, width, t + 3u * WGS);
        put(side, staged_at(t), v0);
        put(side, staged_at(t + WGS), v1);
        put(side, staged_at(t + 2u * WGS), v2);
        put(side, staged_at(t + 3u * WGS), v3);
    }
    for (; t < total; t += WGS) {
        put(side, staged_at(t), stage_val(src, base, r0, lim, c0, width, t));
    }
}

// Value t of a staged chunk (row t / DK, column c0 + t % DK), 0 outside the operand.
fn stage_val(src: u32, base: u32, r0: u32, lim: u32, c0: u32, width: u32, t: u32) -> f32 {
    let rr = t / DK;
    let cc = c0 + t % DK;
    if (r0 + rr < lim && cc < width) {
        return load(src, base + (r0 + rr) * width + cc);
    }
    return 0.0;
}

// Where staged value t lives in ta / tb.
fn staged_at(t: u32) -> u32 {
    return (t / DK) * PK + t % DK;
}

fn put(side: u32, at: u32, val: f32) {
    if (side == 0u) {
        ta[at] = val;
    } else {
        tb[at] = val;
    }
}

// Dot product of staged ta row r and tb row c over the first w values of the chunk.
fn chunk_dot(r: u32, c: u32, w: u32) -> f32 {
    var acc = 0.0;
    for (var d = 0u; d < w; d++) {
        acc = fma(ta[r * PK + d], tb[c * PK + d], acc);
    }
    return acc;
}

// For invocation (r, c): the dot product of row ar0 + r of operand `a` (at base ab, rows
// ending at al) and row br0 + c of operand `b` (base bb, rows ending at bl), both packed
// [.., width], staged chunk by chunk through ta (BR rows) and tb (BC rows). Holds barriers:
// every invocation of the workgroup calls it, with uniform arguments but lid.
fn tile_dot(lid: u32, a: u32, ab: u32, ar0: u32, al: u32, b: u32, bb: u32, br0: u32, bl: u32,
            width: u32) -> f32 {
    var dot = 0.0;
    for (var e0 = 0u; e0 < width; e0 += DK) {
        stage(a, 0u, lid, ab, ar0, BR, al, e0, width);
        stage(b, 1u, lid, bb, br0, BC, bl, e0, width);
        workgroupBarrier();
        dot += chunk_dot(lid / BC, lid % BC, min(DK, width - e0));
        workgroupBarrier();
    }
    return dot;
}

// acc[a] += sum over jj < BC of weight (r, jj) times column col0 + a BC + c of row r0 + jj of
// operand `src` (base `base`, rows ending at `lim`, packed [.., width]), for the columns of
// the block below `width`: the weights are pt (`second` false) or pt2. Holds barriers, like
// tile_dot.
fn tile_acc(acc: ptr<function, array<f32, ACC>>, second: bool, lid: u32, src: u32, base: u32,
            r0: u32, lim: u32, col0: u32, width: u32) {
    let r = lid / BC;
    let c = lid % BC;
    for (var e0 = 0u; e0 < ACC * BC && col0 + e0 < width; e0 += DK) {
        stage(src, 1u, lid, base, r0, BC, lim, col0 + e0, width);
        workgroupBarrier();
        for (var t = 0u; t < DK / BC; t++) {
            var sum = 0.0;
            for (var jj = 0u; jj < BC; jj++) {
                let wt = select(pt[r * BC + jj], pt2[r * BC + jj], second);
                sum = fma(wt, tb[jj * PK + c + t * BC], sum);
            }
            (*acc)[e0 / BC + t] += sum;
        }
        workgroupBarrier();
    }
}

@compute @workgroup_size(WGS)
fn attn_fwd(@builtin(workgroup_id) wid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let w = decode(wid, nwg);
    if (w.w == 0u) {
        return;
    }
    let b = fwd_block(w, BR, BC);
    let rb = b.rb;
    let cb = b.cb;
    let split = b.split;
    let rows = b.rows;
    let r = lid / BC;
    let c = lid % BC;
    // This lane's query: batch n, row i (p.l past the rows).
    let nq = fwd_row(b, rb * BR + r);
    let n = nq.x;
    let i = nq.y;
    let c0 = cb * ACC * BC;
    let qbase = b.n0 * p.l * p.e;
    let kbase = b.nk * p.s * p.e;
    let vbase = b.nk * p.s * p.ev;
    if (c == 0u) {
        rm[r] = neg_inf();
        rl[r] = 0.0;
    }
    workgroupBarrier();
    var acc: array<f32, ACC>;
    let j_first = b.j_first;
    let s_end = b.s_end;
    for (var j0 = j_first; j0 < s_end; j0 += BC) {
        let dot = tile_dot(lid, SRC_Q, qbase, rb * BR, rows, SRC_K, kbase, j0, p.s, p.e);
        let sc = logit(dot, n, i, j0 + c);
        pt[lid] = sc;
        workgroupBarrier();
        // Online softmax, every lane of the row at once: each folds the row's scores into the
        // running max in column order (the same max everywhere), then weighs its own score;
        // the row's c = 0 lane adds the weights in column order. One exp and one dropout draw
        // per lane instead of BC in a row on one lane.
        let m_old = rm[r];
        var mx = m_old;
        for (var cc = 0u; cc < BC; cc++) {
            mx = max_nan(mx, pt[r * BC + cc]);
        }
        var alpha = 1.0;
        if (!is_neg_inf(mx)) {
            alpha = exp(m_old - mx);
        }
        var pv = 0.0;
        if (!is_neg_inf(sc)) {
            pv = exp(sc - mx);
        }
        workgroupBarrier();
        pt[lid] = pv * drop_factor(n, i, j0 + c);
        pt2[lid] = pv;
        workgroupBarrier();
        // The row's lanes read rm again at the next tile, past tile_acc's barriers (it stages
        // at least one chunk: the column block starts below Ev).
        if (c == 0u) {
            var sum = 0.0;
            for (var cc = 0u; cc < BC; cc++) {
                sum += pt2[r * BC + cc];
            }
            rl[r] = rl[r] * alpha + sum;
            rm[r] = mx;
        }
        for (var a = 0u; a < ACC; a++) {
            acc[a] *= alpha;
        }
        tile_acc(&acc, false, lid, SRC_V, vbase, j0, p.s, c0, p.ev);
    }
    if (i >= p.l) {
        return;
    }
    let row = n * p.l + i;
    if (p.splits > 1u) {
        let srow = split_row(split, row);
        for (var a = 0u; a < ACC; a++) {
            let col = c0 + a * BC + c;
            if (col < p.ev) {
                put_split_out(srow, col, acc[a]);
            }
        }
        if (cb == 0u && c == 0u) {
            put_split_stats(srow, rm[r], rl[r]);
        }
        return;
    }
    for (var a = 0u; a < ACC; a++) {
        let col = c0 + a * BC + c;
        if (col < p.ev) {
            put_out(row, col, acc[a], rm[r], rl[r]);
        }
    }
    if (cb == 0u && c == 0u) {
        put_lse(row, rm[r], rl[r]);
    }
}

// One invocation per output element (n L + i) Ev + col: the splits' partial rows rescaled to
// their common max and summed in split order (stats_r: the scratch attn_fwd wrote).
@compute @workgroup_size(WGS)
fn attn_combine(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let e = (wid.x + wid.y * nwg.x) * WGS + lid;
    let rows = p.n * p.l;
    if (e >= rows * p.ev) {
        return;
    }
    let row = e / p.ev;
    let col = e % p.ev;
    let ml = p.splits * rows * p.ev;
    var mx = neg_inf();
    for (var t = 0u; t < p.splits; t++) {
        mx = max_nan(mx, stats_r[ml + 2u * (t * rows + row)]);
    }
    var lf = 0.0;
    var acc = 0.0;
    for (var t = 0u; t < p.splits; t++) {
        let at = ml + 2u * (t * rows + row);
        let m = stats_r[at];
        // A split whose keys are all masked weighs nothing (and exp(-inf - -inf) is NaN); its
        // partial, zero weights times its values (0, or NaN where a value is not finite, as
        // PyTorch's attn @ v), is added as it is.
        if (!is_neg_inf(m)) {
            let f = exp(m - mx);
            lf += stats_r[at + 1u] * f;
            acc += stats_r[(t * rows + row) * p.ev + col] * f;
        } else {
            acc += stats_r[(t * rows + row) * p.ev + col];
        }
    }
    put_out(row, col, acc, mx, lf);
    if (col == 0u) {
        put_lse(row, mx, lf);
    }
}

@compute @workgroup_size(WGS)
fn attn_dq(@builtin(workgroup_id) wid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let w = decode(wid, nwg);
    if (w.w == 0u) {
        return;
    }
    let rb = w.x;
    let n = w.y;
    let cb = w.z;
    let r = lid / BC;
    let c = lid % BC;
    let i = rb * BR + r;
    let nk = kv_of(n);
    let c0 = cb * ACC * BC;
    let qbase = n * p.l * p.e;
    let obase = n * p.l * p.ev;
    let kbase = nk * p.s * p.e;
    let vbase = nk * p.s * p.ev;
    // D_i = dO_i . O_i: this invocation's share of the row, then the row's c = 0 sums them.
    var part = 0.0;
    if (i < p.l) {
        for (var col = c; col < p.ev; col += BC) {
            part = fma(f32(dout[obase + i * p.ev + col]), f32(o[obase + i * p.ev + col]), part);
        }
    }
    pt[lid] = part;
    workgroupBarrier();
    if (c == 0u) {
        var d = 0.0;
        for (var cc = 0u; cc < BC; cc++) {
            d += pt[r * BC + cc];
        }
        rm[r] = d;
        if (i < p.l) {
            rl[r] = stats[n * p.l + i];
            if (cb == 0u) {
                stats[p.n * p.l + n * p.l + i] = d;
            }
        } else {
            rl[r] = pos_inf();
        }
    }
    workgroupBarrier();
    let d_i = rm[r];
    let lse = rl[r];
    var acc: array<f32, ACC>;
    let s_end = keys_until(rb * BR + BR - 1u);
    for (var j0 = 0u; j0 < s_end; j0 += BC) {
        let j = j0 + c;
        let dot = tile_dot(lid, SRC_Q, qbase, rb * BR, p.l, SRC_K, kbase, j0, p.s, p.e);
        let dp = tile_dot(lid, SRC_DOUT, obase, rb * BR, p.l, SRC_V, vbase, j0, p.s, p.ev);
        let sc = logit(dot, n, i, j);
        var pv = 0.0;
        if (!is_neg_inf(sc)) {
            pv = exp(sc - lse);
        }
        pt[lid] = pv * (drop_factor(n, i, j) * dp - d_i);
        tile_acc(&acc, false, lid, SRC_K, kbase, j0, p.s, c0, p.e);
    }
    if (i >= p.l) {
        return;
    }
    for (var a = 0u; a < ACC; a++) {
        let col = c0 + a * BC + c;
        if (col < p.e) {
            dq[qbase + i * p.e + col] = T(acc[a] * p.scale);
        }
    }
}

@compute @workgroup_size(WGS)
fn attn_dkv(@builtin(workgroup_id) wid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let w = decode(wid, nwg);
    if (w.w == 0u) {
        return;
    }
    let rb = w.x;
    let nk = w.y;
    let cb = w.z;
    let r = lid / BC;
    let c = lid % BC;
    let j = rb * BR + r;
    let c0 = cb * ACC * BC;
    let kbase = nk * p.s * p.e;
    let vbase = nk * p.s * p.ev;
    var acck: array<f32, ACC>;
    var accv: array<f32, ACC>;
    // Causal: queries before the block's first key attend to none of its keys.
    var i_start = 0u;
    if ((p.flags & 2u) != 0u) {
        i_start = (rb * BR / BC) * BC;
    }
    for (var g = 0u; g < p.group; g++) {
        let n = (nk / p.kv_heads) * p.heads + (nk % p.kv_heads) * p.group + g;
        let qbase = n * p.l * p.e;
        let obase = n * p.l * p.ev;
        for (var i0 = i_start; i0 < p.l; i0 += BC) {
            let i = i0 + c;
            let dot = tile_dot(lid, SRC_K, kbase, rb * BR, p.s, SRC_Q, qbase, i0, p.l, p.e);
            let dp = tile_dot(lid, SRC_V, vbase, rb * BR, p.s, SRC_DOUT, obase, i0, p.l, p.ev);
            let sc = logit(dot, n, i, j);
            var pv = 0.0;
            var d_i = 0.0;
            if (!is_neg_inf(sc)) {
                pv = exp(sc - stats_r[n * p.l + i]);
                d_i = stats_r[p.n * p.l + n * p.l + i];
            }
            let z = drop_factor(n, i, j);
            pt[lid] = pv * z;
            pt2[lid] = pv * (z * dp - d_i);
            tile_acc(&accv, false, lid, SRC_DOUT, obase, i0, p.l, c0, p.ev);
            tile_acc(&acck, true, lid, SRC_Q, qbase, i0, p.l, c0, p.e);
        }
    }
    if (j >= p.s) {
        return;
    }
    for (var a = 0u; a < ACC; a++) {
        let col = c0 + a * BC + c;
        if (col < p.e) {
            dk[kbase + j * p.e + col] = T(acck[a] * p.scale);
        }
        if (col < p.ev) {
            dv[vbase + j * p.ev + col] = T(accv[a]);
        }
    }
}
