// Attention for GPUs with register tiles (src/ops/attention/plan.rs, `Plan::RegTiles`, from
// 32 rows): attn_fwd_reg, attn_dq_reg and attn_dkv_reg solve the problems of attn_fwd, attn_dq
// and attn_dkv (attention.wgsl) with the same params, bindings and results, FlashAttention-2's
// schedule with more work per value staged. The forward is described here; the backward
// entry points at the end share its tiles (block_dot, block_acc). A workgroup of 16 x 16
// invocations owns BR = 64 query rows and walks the keys in tiles of BC = 32; invocation
// (tx, ty) holds the scores of rows ty + 16 i (i < 4) and keys tx + 16 j (j < 2) and the
// outputs of the same rows at columns c0 + tx + 16 a (a < CPL), c0 the column block's first.
// attn_fwd's tile gives each invocation one score and reads two staged values per FMA; here a
// staged Q value serves two keys and a K value four rows (6 loads per 8 FMAs), a staged
// weight and V value four rows and one column (P V: 4 + 2 loads per 8 FMAs), and each K / V
// tile is staged once for 64 rows instead of 16. Workgroup memory stays under WebGPU's
// default 16 KiB: Q and K pass in chunks of DK = 16 values (rows padded to 17 floats, so
// the 16 lanes of a row reading one column hit 16 banks), V in chunks of 32 columns through
// the same buffer, and the tile's weights in `sp` (rows padded to 33).
//
// Online softmax per key tile: the scores go to sp; four lanes per row fold eight scores
// each into partial maxima; every lane folds its rows' running max and the four partials in
// order (all lanes agree), weighs its own scores, and leaves the weights (dropped) in sp and
// its rows' partial sums; the row's tx = 0 lane adds the 16 partial sums in tx order into the
// running sum. Results are deterministic; they differ from attn_fwd's in rounding only (its
// sums run in other orders).
//
// Rows of the grid's batch: queries of one query batch, or (flags bit 3) the rows of every
// query head of one key/value batch, head after head (grouped-query attention), as attn_fwd.
// Key splits (p.splits > 1) leave unnormalized rows and (max, sum) pairs in the scratch bound
// as `stats` for attn_combine (attention.wgsl), as attn_fwd.
//
// Needs lib/philox.wgsl, lib/activation.wgsl (max_nan) and lib/attention_common.wgsl.

const BR: u32 = 64u;
const BC: u32 = 32u;
const DK: u32 = 16u;
const PK: u32 = 17u;
const PV: u32 = 33u;
// Output columns per invocation: a column block is 16 CPL = 128 columns
// (src/ops/attention/plan.rs mirrors it).
const CPL: u32 = 8u;
const RB: u32 = 4u;
const CB: u32 = 2u;

// Q chunk [BR][PK] then K chunk [BC][PK]; later a V chunk [BC][PV], or the softmax's partials.
var<workgroup> stg: array<f32, 1632>;
// The tile's scores, then its weights: [BR][PV].
var<workgroup> sp: array<f32, 2112>;
var<workgroup> rm: array<f32, BR>;
var<workgroup> rl: array<f32, BR>;

// Stages rows [r0, r0 + rows) x columns [c0, c0 + cols) of the packed [.., width] operand
// `src` at `base` (rows ending at `lim`) into stg from `at`, rows `pitch` floats apart, zero
// outside.
fn stage_reg(src: u32, lid: u32, base: u32, r0: u32, rows: u32, lim: u32, c0: u32, cols: u32,
             width: u32, at: u32, pitch: u32) {
    for (var t = lid; t < rows * cols; t += 256u) {
        let rr = t / cols;
        let cc = t % cols;
        var val = 0.0;
        if (r0 + rr < lim && c0 + cc < width) {
            val = load(src, base + (r0 + rr) * width + c0 + cc);
        }
        stg[at + rr * pitch + cc] = val;
    }
}

// This lane's RB x CB block of A B^T for rows [ar0, ar0 + BR) of operand `a` (at `ab`, rows
// ending at `al`) and rows [br0, br0 + BC) of `b` (at `bb`, rows ending at `bl`), both packed
// [.., width]: element (i, j) pairs row ty + 16 i with row tx + 16 j. The operands pass
// through stg in chunks of DK. Holds barriers: every invocation calls it, with uniform
// arguments but lid.
fn block_dot(lid: u32, a: u32, ab: u32, ar0: u32, al: u32, b: u32, bb: u32, br0: u32, bl: u32,
             width: u32) -> array<array<f32, CB>, RB> {
    let tx = lid % 16u;
    let ty = lid / 16u;
    var s: array<array<f32, CB>, RB>;
    for (var e0 = 0u; e0 < width; e0 += DK) {
        stage_reg(a, lid, ab, ar0, BR, al, e0, DK, width, 0u, PK);
        stage_reg(b, lid, bb, br0, BC, bl, e0, DK, width, BR * PK, PK);
        workgroupBarrier();
        // All DK steps, a constant trip count the compiler unrolls: past the width both staged
        // operands are zeros.
        for (var d = 0u; d < DK; d++) {
            var bv: array<f32, CB>;
            for (var j = 0u; j < CB; j++) {
                bv[j] = stg[BR * PK + (tx + 16u * j) * PK + d];
            }
            for (var i = 0u; i < RB; i++) {
                let av = stg[(ty + 16u * i) * PK + d];
                for (var j = 0u; j < CB; j++) {
                    s[i][j] = fma(av, bv[j], s[i][j]);
                }
            }
        }
        workgroupBarrier();
    }
    return s;
}

// acc[i][a] += sum over jj < BC of sp[ty + 16 i][jj] times column c0 + tx + 16 a of row
// r0 + jj of operand `src` (at `base`, rows ending at `lim`, packed [.., width]), for the
// block's columns below `width`: `src` passes through stg in chunks of 32 columns, lane
// columns tx + 16 a falling in chunk a / 2 (the chunk loop's trip count is a constant, so
// acc's indices are). Holds barriers, like block_dot.
fn block_acc(acc: ptr<function, array<array<f32, CPL>, RB>>, lid: u32, src: u32, base: u32,
             r0: u32, lim: u32, c0: u32, width: u32) {
    let tx = lid % 16u;
    let ty = lid / 16u;
    for (var q = 0u; q < CPL / 2u; q++) {
        let cv = c0 + 32u * q;
        if (cv < width) {
            stage_reg(src, lid, base, r0, BC, lim, cv, 32u, width, 0u, PV);
            workgroupBarrier();
            for (var jj = 0u; jj < BC; jj++) {
                let v0 = stg[jj * PV + tx];
                let v1 = stg[jj * PV + tx + 16u];
                for (var i = 0u; i < RB; i++) {
                    let pw = sp[(ty + 16u * i) * PV + jj];
                    (*acc)[i][2u * q] = fma(pw, v0, (*acc)[i][2u * q]);
                    (*acc)[i][2u * q + 1u] = fma(pw, v1, (*acc)[i][2u * q + 1u]);
                }
            }
            workgroupBarrier();
        }
    }
}

@compute @workgroup_size(256)
fn attn_fwd_reg(@builtin(workgroup_id) wid: vec3<u32>,
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
    let tx = lid % 16u;
    let ty = lid / 16u;
    // This lane's rows: query batch nr[i], query ir[i] (p.l past the rows).
    var nr: array<u32, RB>;
    var ir: array<u32, RB>;
    for (var i = 0u; i < RB; i++) {
        let nq = fwd_row(b, rb * BR + ty + 16u * i);
        nr[i] = nq.x;
        ir[i] = nq.y;
    }
    let c0 = cb * 16u * CPL;
    let qbase = b.n0 * p.l * p.e;
    let kbase = b.nk * p.s * p.e;
    let vbase = b.nk * p.s * p.ev;
    if (lid < BR) {
        rm[lid] = neg_inf();
        rl[lid] = 0.0;
    }
    workgroupBarrier();
    var acc: array<array<f32, CPL>, RB>;
    let j_first = b.j_first;
    let s_end = b.s_end;
    for (var j0 = j_first; j0 < s_end; j0 += BC) {
        // Scores: Q K^T.
        var s = block_dot(lid, SRC_Q, qbase, rb * BR, rows, SRC_K, kbase, j0, p.s, p.e);
        for (var i = 0u; i < RB; i++) {
            for (var j = 0u; j < CB; j++) {
                s[i][j] = logit(s[i][j], nr[i], ir[i], j0 + tx + 16u * j);
                sp[(ty + 16u * i) * PV + tx + 16u * j] = s[i][j];
            }
        }
        workgroupBarrier();
        // Partial maxima: lane (row lid / 4, part lid % 4) folds keys 8 part.. of its row.
        {
            let row = lid / 4u;
            let part = lid % 4u;
            var mx = neg_inf();
            for (var c = 0u; c < 8u; c++) {
                mx = max_nan(mx, sp[row * PV + part * 8u + c]);
            }
            stg[lid] = mx;
        }
        workgroupBarrier();
        var mx: array<f32, RB>;
        var alpha: array<f32, RB>;
        var pv: array<array<f32, CB>, RB>;
        for (var i = 0u; i < RB; i++) {
            let r = ty + 16u * i;
            let m_old = rm[r];
            var m = m_old;
            for (var part = 0u; part < 4u; part++) {
                m = max_nan(m, stg[r * 4u + part]);
            }
            mx[i] = m;
            alpha[i] = 1.0;
            if (!is_neg_inf(m)) {
                alpha[i] = exp(m_old - m);
            }
            for (var j = 0u; j < CB; j++) {
                pv[i][j] = 0.0;
                if (!is_neg_inf(s[i][j])) {
                    pv[i][j] = exp(s[i][j] - m);
                }
            }
        }
        // Every lane has read the partial maxima and its rows' running max.
        workgroupBarrier();
        for (var i = 0u; i < RB; i++) {
            let r = ty + 16u * i;
            var part_sum = 0.0;
            for (var j = 0u; j < CB; j++) {
                let key = j0 + tx + 16u * j;
                sp[r * PV + tx + 16u * j] = pv[i][j] * drop_factor(nr[i], ir[i], key);
                part_sum += pv[i][j];
            }
            stg[r * 16u + tx] = part_sum;
        }
        workgroupBarrier();
        if (tx == 0u) {
            for (var i = 0u; i < RB; i++) {
                let r = ty + 16u * i;
                var sum = 0.0;
                for (var t = 0u; t < 16u; t++) {
                    sum += stg[r * 16u + t];
                }
                rl[r] = rl[r] * alpha[i] + sum;
                rm[r] = mx[i];
            }
        }
        for (var i = 0u; i < RB; i++) {
            for (var a = 0u; a < CPL; a++) {
                acc[i][a] *= alpha[i];
            }
        }
        // The partial sums are read before stg takes V.
        workgroupBarrier();
        // P V.
        block_acc(&acc, lid, SRC_V, vbase, j0, p.s, c0, p.ev);
    }
    for (var i = 0u; i < RB; i++) {
        let r = ty + 16u * i;
        if (ir[i] >= p.l) {
            continue;
        }
        let row = nr[i] * p.l + ir[i];
        if (p.splits > 1u) {
            let srow = split_row(split, row);
            for (var a = 0u; a < CPL; a++) {
                let col = c0 + tx + 16u * a;
                if (col < p.ev) {
                    put_split_out(srow, col, acc[i][a]);
                }
            }
            if (cb == 0u && tx == 0u) {
                put_split_stats(srow, rm[r], rl[r]);
            }
            continue;
        }
        for (var a = 0u; a < CPL; a++) {
            let col = c0 + tx + 16u * a;
            if (col < p.ev) {
                put_out(row, col, acc[i][a], rm[r], rl[r]);
            }
        }
        if (cb == 0u && tx == 0u) {
            put_lse(row, rm[r], rl[r]);
        }
    }
}

// dQ for GPUs with register tiles (`Plan::RegTiles`, the problem and results of attn_dq in
// attention.wgsl): rows are 64 queries of one query batch, walking the keys in tiles of 32.
// D_i = dO_i . O_i first (four lanes per row, added in order; written for attn_dkv), then
// per key tile S = Q K^T and dP = dO V^T as register blocks, dS = P (z dP - D) with
// P = exp(S - lse) into sp, and dQ += dS K over the block's columns of E.
@compute @workgroup_size(256)
fn attn_dq_reg(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let w = decode(wid, nwg);
    if (w.w == 0u) {
        return;
    }
    let rb = w.x;
    let n = w.y;
    let cb = w.z;
    let tx = lid % 16u;
    let ty = lid / 16u;
    let nk = kv_of(n);
    let c0 = cb * 16u * CPL;
    let qbase = n * p.l * p.e;
    let obase = n * p.l * p.ev;
    let kbase = nk * p.s * p.e;
    let vbase = nk * p.s * p.ev;
    // D_i: lane (row lid / 4, part lid % 4) takes the row's columns part, part + 4, ...
    {
        let i = rb * BR + lid / 4u;
        var part = 0.0;
        if (i < p.l) {
            for (var col = lid % 4u; col < p.ev; col += 4u) {
                part = fma(f32(dout[obase + i * p.ev + col]), f32(o[obase + i * p.ev + col]),
                           part);
            }
        }
        stg[lid] = part;
    }
    workgroupBarrier();
    var d_i: array<f32, RB>;
    var lse: array<f32, RB>;
    var ir: array<u32, RB>;
    for (var i = 0u; i < RB; i++) {
        let r = ty + 16u * i;
        let qi = rb * BR + r;
        d_i[i] = ((stg[4u * r] + stg[4u * r + 1u]) + stg[4u * r + 2u]) + stg[4u * r + 3u];
        ir[i] = select(p.l, qi, qi < p.l);
        lse[i] = pos_inf();
        if (qi < p.l) {
            lse[i] = stats[n * p.l + qi];
            if (cb == 0u && tx == 0u) {
                stats[p.n * p.l + n * p.l + qi] = d_i[i];
            }
        }
    }
    // The partials are read before block_dot stages into stg.
    workgroupBarrier();
    var acc: array<array<f32, CPL>, RB>;
    let s_end = keys_until(rb * BR + BR - 1u);
    for (var j0 = 0u; j0 < s_end; j0 += BC) {
        let s = block_dot(lid, SRC_Q, qbase, rb * BR, p.l, SRC_K, kbase, j0, p.s, p.e);
        let dp = block_dot(lid, SRC_DOUT, obase, rb * BR, p.l, SRC_V, vbase, j0, p.s, p.ev);
        for (var i = 0u; i < RB; i++) {
            for (var j = 0u; j < CB; j++) {
                let key = j0 + tx + 16u * j;
                let sc = logit(s[i][j], n, ir[i], key);
                var pv = 0.0;
                if (!is_neg_inf(sc)) {
                    pv = exp(sc - lse[i]);
                }
                sp[(ty + 16u * i) * PV + tx + 16u * j] =
                    pv * (drop_factor(n, ir[i], key) * dp[i][j] - d_i[i]);
            }
        }
        workgroupBarrier();
        block_acc(&acc, lid, SRC_K, kbase, j0, p.s, c0, p.e);
    }
    for (var i = 0u; i < RB; i++) {
        if (ir[i] >= p.l) {
            continue;
        }
        for (var a = 0u; a < CPL; a++) {
            let col = c0 + tx + 16u * a;
            if (col < p.e) {
                dq[qbase + ir[i] * p.e + col] = T(acc[i][a] * p.scale);
            }
        }
    }
}

// dK and dV for GPUs with register tiles (`Plan::RegTiles`, the problem and results of
// attn_dkv in attention.wgsl): rows are 64 keys of one key/value batch, walking the query
// tiles (32 queries) of every query head of its group. Per tile S^T = K Q^T and
// dP^T = V dO^T as register blocks, then dV += (P z)^T dO and dK += dS^T Q through sp in turn.
@compute @workgroup_size(256)
fn attn_dkv_reg(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let w = decode(wid, nwg);
    if (w.w == 0u) {
        return;
    }
    let rb = w.x;
    let nk = w.y;
    let cb = w.z;
    let tx = lid % 16u;
    let ty = lid / 16u;
    let c0 = cb * 16u * CPL;
    let kbase = nk * p.s * p.e;
    let vbase = nk * p.s * p.ev;
    // This lane's keys (p.s past the problem).
    var jr: array<u32, RB>;
    for (var i = 0u; i < RB; i++) {
        let key = rb * BR + ty + 16u * i;
        jr[i] = select(p.s, key, key < p.s);
    }
    var acck: array<array<f32, CPL>, RB>;
    var accv: array<array<f32, CPL>, RB>;
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
            let st = block_dot(lid, SRC_K, kbase, rb * BR, p.s, SRC_Q, qbase, i0, p.l, p.e);
            let dpt = block_dot(lid, SRC_V, vbase, rb * BR, p.s, SRC_DOUT, obase, i0, p.l,
                                p.ev);
            var ds: array<array<f32, CB>, RB>;
            for (var i = 0u; i < RB; i++) {
                for (var j = 0u; j < CB; j++) {
                    let qi = i0 + tx + 16u * j;
                    let sc = logit(st[i][j], n, qi, jr[i]);
                    var pv = 0.0;
                    var d_i = 0.0;
                    if (!is_neg_inf(sc)) {
                        pv = exp(sc - stats_r[n * p.l + qi]);
                        d_i = stats_r[p.n * p.l + n * p.l + qi];
                    }
                    let z = drop_factor(n, qi, jr[i]);
                    sp[(ty + 16u * i) * PV + tx + 16u * j] = pv * z;
                    ds[i][j] = pv * (z * dpt[i][j] - d_i);
                }
            }
            workgroupBarrier();
            block_acc(&accv, lid, SRC_DOUT, obase, i0, p.l, c0, p.ev);
            // The weights are read (block_acc ends on a barrier when it staged anything; when
            // it staged nothing it read nothing).
            for (var i = 0u; i < RB; i++) {
                for (var j = 0u; j < CB; j++) {
                    sp[(ty + 16u * i) * PV + tx + 16u * j] = ds[i][j];
                }
            }
            workgroupBarrier();
            block_acc(&acck, lid, SRC_Q, qbase, i0, p.l, c0, p.e);
        }
    }
    for (var i = 0u; i < RB; i++) {
        if (jr[i] >= p.s) {
            continue;
        }
        for (var a = 0u; a < CPL; a++) {
            let col = c0 + tx + 16u * a;
            if (col < p.e) {
                dk[kbase + jr[i] * p.e + col] = T(acck[i][a] * p.scale);
            }
            if (col < p.ev) {
                dv[vbase + jr[i] * p.ev + col] = T(accv[i][a]);
            }
        }
    }
}
