// The attention forward for GPUs with register tiles (src/ops/attention/kernel.rs,
// `Plan::RegTiles`): the problem, params, bindings and results of attn_fwd (attention.wgsl),
// FlashAttention-2's schedule, with more work per value staged. A workgroup of 16 x 16
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
// (src/ops/attention/kernel.rs mirrors it).
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

@compute @workgroup_size(256)
fn attn_fwd_reg(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let w = decode(wid, nwg);
    if (w.w == 0u) {
        return;
    }
    let rb = w.x;
    let cb = w.z % p.col_blocks;
    let split = w.z / p.col_blocks;
    let tx = lid % 16u;
    let ty = lid / 16u;
    let grouped = (p.flags & 8u) != 0u;
    var n0 = w.y;
    var nk = kv_of(w.y);
    var rows = p.l;
    if (grouped) {
        nk = w.y;
        n0 = (nk / p.kv_heads) * p.heads + (nk % p.kv_heads) * p.group;
        rows = p.group * p.l;
    }
    // This lane's rows: query batch nr[i], query ir[i] (p.l, outside the problem, past the
    // rows).
    var nr: array<u32, RB>;
    var ir: array<u32, RB>;
    for (var i = 0u; i < RB; i++) {
        let rho = rb * BR + ty + 16u * i;
        let live = rho < rows;
        nr[i] = n0 + select(0u, rho / p.l, live);
        ir[i] = select(p.l, rho % p.l, live);
    }
    let c0 = cb * 16u * CPL;
    let qbase = n0 * p.l * p.e;
    let kbase = nk * p.s * p.e;
    let vbase = nk * p.s * p.ev;
    if (lid < BR) {
        rm[lid] = neg_inf();
        rl[lid] = 0.0;
    }
    workgroupBarrier();
    var acc: array<array<f32, CPL>, RB>;
    // This split's keys: whole tiles, so splits never share a tile.
    let per = (p.s + BC * p.splits - 1u) / (BC * p.splits) * BC;
    let j_first = split * per;
    // Causal: the block's last query position (any of the group's rows: the last one).
    let last = select(rb * BR + BR - 1u, p.l - 1u, grouped);
    let s_end = min(keys_until(last), j_first + per);
    for (var j0 = j_first; j0 < s_end; j0 += BC) {
        // Scores: Q K^T over chunks of DK.
        var s: array<array<f32, CB>, RB>;
        for (var e0 = 0u; e0 < p.e; e0 += DK) {
            stage_reg(SRC_Q, lid, qbase, rb * BR, BR, rows, e0, DK, p.e, 0u, PK);
            stage_reg(SRC_K, lid, kbase, j0, BC, p.s, e0, DK, p.e, BR * PK, PK);
            workgroupBarrier();
            // All DK steps, a constant trip count the compiler unrolls: past E both staged
            // operands are zeros.
            for (var d = 0u; d < DK; d++) {
                var kv: array<f32, CB>;
                for (var j = 0u; j < CB; j++) {
                    kv[j] = stg[BR * PK + (tx + 16u * j) * PK + d];
                }
                for (var i = 0u; i < RB; i++) {
                    let qv = stg[(ty + 16u * i) * PK + d];
                    for (var j = 0u; j < CB; j++) {
                        s[i][j] = fma(qv, kv[j], s[i][j]);
                    }
                }
            }
            workgroupBarrier();
        }
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
        // P V: V in chunks of 32 columns of the block; lane columns tx + 16 a fall in chunk
        // a / 2. The chunk loop has a constant trip count, so acc's indices are constants.
        for (var q = 0u; q < CPL / 2u; q++) {
            let cv = c0 + 32u * q;
            if (cv < p.ev) {
                stage_reg(SRC_V, lid, vbase, j0, BC, p.s, cv, 32u, p.ev, 0u, PV);
                workgroupBarrier();
                for (var jj = 0u; jj < BC; jj++) {
                    let v0 = stg[jj * PV + tx];
                    let v1 = stg[jj * PV + tx + 16u];
                    for (var i = 0u; i < RB; i++) {
                        let pw = sp[(ty + 16u * i) * PV + jj];
                        acc[i][2u * q] = fma(pw, v0, acc[i][2u * q]);
                        acc[i][2u * q + 1u] = fma(pw, v1, acc[i][2u * q + 1u]);
                    }
                }
                workgroupBarrier();
            }
        }
    }
    for (var i = 0u; i < RB; i++) {
        let r = ty + 16u * i;
        if (ir[i] >= p.l) {
            continue;
        }
        let n = nr[i];
        let qi = ir[i];
        if (p.splits > 1u) {
            let row = (split * p.n + n) * p.l + qi;
            for (var a = 0u; a < CPL; a++) {
                let col = c0 + tx + 16u * a;
                if (col < p.ev) {
                    stats[row * p.ev + col] = acc[i][a];
                }
            }
            if (cb == 0u && tx == 0u) {
                let at = p.splits * p.n * p.l * p.ev + 2u * row;
                stats[at] = rm[r];
                stats[at + 1u] = rl[r];
            }
            continue;
        }
        let lf = rl[r];
        // Every key masked (the running max never left -inf): zeros, and a log-sum-exp of
        // +inf that gives zero weights in the backward.
        let dead = is_neg_inf(rm[r]);
        for (var a = 0u; a < CPL; a++) {
            let col = c0 + tx + 16u * a;
            if (col < p.ev) {
                out[(n * p.l + qi) * p.ev + col] = T(select(acc[i][a] / lf, 0.0, dead));
            }
        }
        if (cb == 0u && tx == 0u) {
            stats[n * p.l + qi] = select(rm[r] + log(lf), pos_inf(), dead);
        }
    }
}
