// Attention for CPU adapters (src/ops/attention/plan.rs picks it by Caps): the same
// problem, params and results as attention.wgsl, with one invocation per row and column block
// instead of a workgroup per tile. No workgroup memory and no barriers (each barrier switches
// every fibre of a workgroup on a CPU adapter, and the tiled kernels' many barriers also made
// them slow to compile there); neighbouring invocations take neighbouring rows, so the key and
// value rows they read are shared through the host's caches. The online softmax rescales the
// accumulator only when the running max grows.
//
// attn_fwd_rows: query row i of batch n, output columns [c0, c0 + ACCR). attn_dq_rows: dQ of
// query row i (and D_i = dO_i . O_i into stats for the next pass). attn_dkv_rows: dK and dV
// of key row j of key/value batch nk, over the query rows of every query head of its group.
// Sums run in a fixed order: results are deterministic. Each sum over keys (or queries) adds
// blocks of KBLOCK terms into a block accumulator and then the blocks into the total, so no
// total takes thousands of terms in turn (a constant V over 8192 keys drifted 6.5e-5). The
// block accumulators are declared once and reset by assignment: Chrome's compiler (through
// SwiftShader) did not re-zero a `var` declared in a loop body.
//
// max_nan comes from lib/activation.wgsl, philox and unit from lib/philox.wgsl.

// Params, bindings and the score / dropout helpers: lib/attention_common.wgsl.

override WG: u32;

// Output columns per invocation and column block (src/ops/attention/plan.rs mirrors it).
const ACCR: u32 = 64u;
// Keys (or queries) per block of a sum.
const KBLOCK: u32 = 64u;

// (row, batch, column block) of this invocation for `rows` rows per batch; w = 0 past the end.
fn decode_rows(wid: vec3<u32>, nwg: vec3<u32>, lid: u32, rows: u32) -> vec4<u32> {
    let id = (wid.x + wid.y * nwg.x) * WG + lid;
    let rest = id / max(rows, 1u);
    return vec4<u32>(id % max(rows, 1u), rest % p.batches, rest / p.batches,
                     u32(rest < p.batches * p.col_blocks));
}

// Caches the first ACCR values of the row of operand `src` at `base` (of `len` values).
fn cache_row(dst: ptr<function, array<f32, ACCR>>, src: u32, base: u32, len: u32) {
    for (var x = 0u; x < min(len, ACCR); x++) {
        (*dst)[x] = load(src, base + x);
    }
}

// The dot product of a cached row (its first ACCR values in a private array, the rest read
// from `own` at `oi`) with row `xi` of operand `other`, over `len` values: the cached row is
// this invocation's own, while the other is the same for every invocation of a SIMD group,
// so its loads broadcast instead of gathering across lanes.
fn dot_cached(cached: ptr<function, array<f32, ACCR>>, own: u32, oi: u32, other: u32, xi: u32,
              len: u32) -> f32 {
    let head = min(len, ACCR);
    var acc = 0.0;
    for (var x = 0u; x < head; x++) {
        acc = fma((*cached)[x], load(other, xi + x), acc);
    }
    for (var x = head; x < len; x++) {
        acc = fma(load(own, oi + x), load(other, xi + x), acc);
    }
    return acc;
}

@compute @workgroup_size(WG)
fn attn_fwd_rows(@builtin(workgroup_id) wid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let w = decode_rows(wid, nwg, lid, p.l);
    if (w.w == 0u) {
        return;
    }
    let i = w.x;
    let n = w.y;
    let c0 = w.z * ACCR;
    let nk = kv_of(n);
    let ncols = min(ACCR, p.ev - c0);
    let s_end = keys_until(i);
    var m = neg_inf();
    var l = 0.0;
    var acc: array<f32, ACCR>;
    var lb = 0.0;
    var blk: array<f32, ACCR>;
    let qi = (n * p.l + i) * p.e;
    var qr: array<f32, ACCR>;
    cache_row(&qr, SRC_Q, qi, p.e);
    for (var j0 = 0u; j0 < s_end; j0 += KBLOCK) {
        lb = 0.0;
        for (var c = 0u; c < ncols; c++) {
            blk[c] = 0.0;
        }
        for (var j = j0; j < min(j0 + KBLOCK, s_end); j++) {
            let sc = logit(dot_cached(&qr, SRC_Q, qi, SRC_K, (nk * p.s + j) * p.e, p.e), n, i, j);
            if (is_neg_inf(sc)) {
                // A masked key weighs 0, and PyTorch's attn @ v still multiplies its value:
                // 0 * inf and 0 * NaN are NaN (tested on the bits: a compiler may fold 0 * v).
                let vj = (nk * p.s + j) * p.ev + c0;
                for (var c = 0u; c < ncols; c++) {
                    let bits = bitcast<u32>(f32(v[vj + c]));
                    if ((bits & 0x7f800000u) == 0x7f800000u) {
                        blk[c] = bitcast<f32>(0x7fc00000u | (bits & 0u));
                    }
                }
                continue;
            }
            let m_new = max_nan(m, sc);
            // Bits, not a float compare: a NaN max must take this branch (see is_neg_inf).
            if (bitcast<u32>(m_new) != bitcast<u32>(m)) {
                var alpha = 0.0;
                if (!is_neg_inf(m)) {
                    alpha = exp(m - m_new);
                }
                // The block so far joins the total as it is rescaled (one pass, not two).
                l = (l + lb) * alpha;
                lb = 0.0;
                for (var c = 0u; c < ncols; c++) {
                    acc[c] = (acc[c] + blk[c]) * alpha;
                    blk[c] = 0.0;
                }
                m = m_new;
            }
            let pv = exp(sc - m);
            lb += pv;
            let pz = pv * drop_factor(n, i, j);
            let vj = (nk * p.s + j) * p.ev + c0;
            for (var c = 0u; c < ncols; c++) {
                blk[c] = fma(pz, f32(v[vj + c]), blk[c]);
            }
        }
        l += lb;
        for (var c = 0u; c < ncols; c++) {
            acc[c] += blk[c];
        }
    }
    let row = n * p.l + i;
    for (var c = 0u; c < ncols; c++) {
        put_out(row, c0 + c, acc[c], m, l);
    }
    if (w.z == 0u) {
        put_lse(row, m, l);
    }
}

@compute @workgroup_size(WG)
fn attn_dq_rows(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let w = decode_rows(wid, nwg, lid, p.l);
    if (w.w == 0u) {
        return;
    }
    let i = w.x;
    let n = w.y;
    let c0 = w.z * ACCR;
    let nk = kv_of(n);
    let ncols = min(ACCR, p.e - c0);
    let oi = (n * p.l + i) * p.ev;
    var d = 0.0;
    for (var x = 0u; x < p.ev; x++) {
        d = fma(f32(dout[oi + x]), f32(o[oi + x]), d);
    }
    if (w.z == 0u) {
        stats[p.n * p.l + n * p.l + i] = d;
    }
    let lse = stats[n * p.l + i];
    let s_end = keys_until(i);
    var acc: array<f32, ACCR>;
    var blk: array<f32, ACCR>;
    let qrow = (n * p.l + i) * p.e;
    var qr: array<f32, ACCR>;
    cache_row(&qr, SRC_Q, qrow, p.e);
    var dr: array<f32, ACCR>;
    cache_row(&dr, SRC_DOUT, oi, p.ev);
    for (var j0 = 0u; j0 < s_end; j0 += KBLOCK) {
        for (var c = 0u; c < ncols; c++) {
            blk[c] = 0.0;
        }
        for (var j = j0; j < min(j0 + KBLOCK, s_end); j++) {
            let sc = logit(dot_cached(&qr, SRC_Q, qrow, SRC_K, (nk * p.s + j) * p.e, p.e), n, i, j);
            if (is_neg_inf(sc)) {
                continue;
            }
            let pv = exp(sc - lse);
            let ds = pv * (drop_factor(n, i, j) * dot_cached(&dr, SRC_DOUT, oi, SRC_V, (nk * p.s + j) * p.ev, p.ev) - d);
            let kj = (nk * p.s + j) * p.e + c0;
            for (var c = 0u; c < ncols; c++) {
                blk[c] = fma(ds, f32(k[kj + c]), blk[c]);
            }
        }
        for (var c = 0u; c < ncols; c++) {
            acc[c] += blk[c];
        }
    }
    let qi = (n * p.l + i) * p.e + c0;
    for (var c = 0u; c < ncols; c++) {
        dq[qi + c] = T(acc[c] * p.scale);
    }
}

@compute @workgroup_size(WG)
fn attn_dkv_rows(@builtin(workgroup_id) wid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let w = decode_rows(wid, nwg, lid, p.s);
    if (w.w == 0u) {
        return;
    }
    let j = w.x;
    let nk = w.y;
    let c0 = w.z * ACCR;
    let kc = min(ACCR, max(p.e, c0) - c0);
    let vc = min(ACCR, max(p.ev, c0) - c0);
    let kj = (nk * p.s + j) * p.e;
    let vj = (nk * p.s + j) * p.ev;
    var acck: array<f32, ACCR>;
    var accv: array<f32, ACCR>;
    var blkk: array<f32, ACCR>;
    var blkv: array<f32, ACCR>;
    var kr: array<f32, ACCR>;
    cache_row(&kr, SRC_K, kj, p.e);
    var vr: array<f32, ACCR>;
    cache_row(&vr, SRC_V, vj, p.ev);
    var i_start = 0u;
    if ((p.flags & 2u) != 0u) {
        i_start = j;
    }
    for (var g = 0u; g < p.group; g++) {
        let n = (nk / p.kv_heads) * p.heads + (nk % p.kv_heads) * p.group + g;
        for (var i0 = i_start; i0 < p.l; i0 += KBLOCK) {
            for (var c = 0u; c < ACCR; c++) {
                blkk[c] = 0.0;
                blkv[c] = 0.0;
            }
            for (var i = i0; i < min(i0 + KBLOCK, p.l); i++) {
                let sc = logit(dot_cached(&kr, SRC_K, kj, SRC_Q, (n * p.l + i) * p.e, p.e), n, i, j);
                if (is_neg_inf(sc)) {
                    continue;
                }
                let oi = (n * p.l + i) * p.ev;
                let pv = exp(sc - stats_r[n * p.l + i]);
                let z = drop_factor(n, i, j);
                let ds = pv * (z * dot_cached(&vr, SRC_V, vj, SRC_DOUT, oi, p.ev) - stats_r[p.n * p.l + n * p.l + i]);
                let pz = pv * z;
                for (var c = 0u; c < vc; c++) {
                    blkv[c] = fma(pz, f32(dout[oi + c0 + c]), blkv[c]);
                }
                let qi = (n * p.l + i) * p.e + c0;
                for (var c = 0u; c < kc; c++) {
                    blkk[c] = fma(ds, f32(q[qi + c]), blkk[c]);
                }
            }
            for (var c = 0u; c < ACCR; c++) {
                acck[c] += blkk[c];
                accv[c] += blkv[c];
            }
        }
    }
    for (var c = 0u; c < kc; c++) {
        dk[kj + c0 + c] = T(acck[c] * p.scale);
    }
    for (var c = 0u; c < vc; c++) {
        dv[vj + c0 + c] = T(accv[c]);
    }
}
