// What the attention kernels share (shaders/attention.wgsl and attention_reg.wgsl for GPUs,
// attention_rows.wgsl for CPU adapters; src/ops/attention/kernel.rs): the params, the bindings, operand loads by
// number (`load`: every entry point that calls it binds q, k, v and dout, the forward with q
// standing in for dout), and the score, mask, causal and dropout rules, so both compute the
// same function. Needs lib/philox.wgsl (dropout) before it.

struct Params {
    n: u32,
    l: u32,
    s: u32,
    e: u32,
    ev: u32,
    heads: u32,
    kv_heads: u32,
    group: u32,
    scale: f32,
    // bit 0: mask, bit 1: causal, bit 2: dropout; bit 3 (attn_fwd): the grid's batches are
    // key/value batches whose group of query heads one workgroup's rows span.
    flags: u32,
    drop_p: f32,
    drop_scale: f32,
    seed_lo: u32,
    seed_hi: u32,
    ctr: u32,
    // Workgroups along the rows of one batch, and column blocks.
    row_blocks: u32,
    col_blocks: u32,
    // Batches the grid walks (N for attn_fwd / attn_dq, Nk for attn_dkv and for attn_fwd with
    // flag 8).
    batches: u32,
    // The additive f32 mask: element (n, i, j) is at m_off + (n / heads) m_n0 + (n % heads) m_n1
    // + i m_l + j m_s.
    m_off: u32,
    m_n0: u32,
    m_n1: u32,
    m_l: u32,
    m_s: u32,
    // attn_fwd: key ranges each row is split into (1: none). Split rows write their partial
    // rows to the scratch bound as `stats` for attn_combine.
    splits: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<T>;
@group(0) @binding(2) var<storage, read> k: array<T>;
@group(0) @binding(3) var<storage, read> v: array<T>;
@group(0) @binding(4) var<storage, read> mask: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<T>;
// lse [N L] then D [N L].
@group(0) @binding(6) var<storage, read_write> stats: array<f32>;
@group(0) @binding(7) var<storage, read> o: array<T>;
@group(0) @binding(8) var<storage, read> dout: array<T>;
@group(0) @binding(9) var<storage, read_write> dq: array<T>;
@group(0) @binding(10) var<storage, read> stats_r: array<f32>;
@group(0) @binding(11) var<storage, read_write> dk: array<T>;
@group(0) @binding(12) var<storage, read_write> dv: array<T>;

// Non-finite values built at run time (WGSL constants must be finite).
fn neg_inf() -> f32 {
    return bitcast<f32>(0xff800000u | (p.flags & 0u));
}

// Tests -inf by its bits: compilers that assume float compares never see a NaN (lavapipe's
// does) may answer `x != -inf` wrongly for a NaN x, which turned a NaN row into zeros.
fn is_neg_inf(x: f32) -> bool {
    return bitcast<u32>(x) == 0xff800000u;
}

fn pos_inf() -> f32 {
    return bitcast<f32>(0x7f800000u | (p.flags & 0u));
}

fn kv_of(n: u32) -> u32 {
    return (n / p.heads) * p.kv_heads + (n % p.heads) / p.group;
}

// The scaled, masked score of query i and key j of batch n from their dot product; -inf
// outside the problem, above the causal diagonal, or where the mask says so.
fn logit(dot: f32, n: u32, i: u32, j: u32) -> f32 {
    if (i >= p.l || j >= p.s || ((p.flags & 2u) != 0u && j > i)) {
        return neg_inf();
    }
    var s = dot * p.scale;
    if ((p.flags & 1u) != 0u) {
        s += mask[p.m_off + (n / p.heads) * p.m_n0 + (n % p.heads) * p.m_n1 + i * p.m_l
            + j * p.m_s];
    }
    return s;
}

// Keys queries up to row `last` may attend to (together): all, or (causal) up to `last`.
fn keys_until(last: u32) -> u32 {
    if ((p.flags & 2u) != 0u) {
        return min(p.s, last + 1u);
    }
    return p.s;
}

// The dropout factor of weight (n, i, j): 1 without dropout, else 0 or 1 / (1 - p).
fn drop_factor(n: u32, i: u32, j: u32) -> f32 {
    if ((p.flags & 4u) == 0u) {
        return 1.0;
    }
    // Word 3's top bit tags attention's counters: shaders/random.wgsl's are (lo, hi, 0, 0),
    // so without it the first call after a seed (ctr 0) drew the next rand's bits.
    let bits = philox(vec4<u32>(j, i, n, p.ctr | 0x80000000u), vec2<u32>(p.seed_lo, p.seed_hi));
    return select(0.0, p.drop_scale, unit(bits.x) >= p.drop_p);
}

// The forward's results for row `row` = n L + i (every forward kernel and attn_combine): output
// column `col` is acc / l, and the log-sum-exp m + log l; a row whose keys are all masked (its
// running max never left -inf) gets acc, its zero weights times the values (zeros, or NaN
// where a value is not finite, as PyTorch's safe softmax times v), and +inf, zero weights in
// the backward.
fn put_out(row: u32, col: u32, acc: f32, m: f32, l: f32) {
    out[row * p.ev + col] = T(select(acc / l, acc, is_neg_inf(m)));
}

fn put_lse(row: u32, m: f32, l: f32) {
    stats[row] = select(m + log(l), pos_inf(), is_neg_inf(m));
}

// Key split `split` of row n L + i (p.splits > 1): its unnormalized output column `col` and its
// (max, sum) pair, in the scratch bound as `stats` that attn_combine reads (outputs first,
// then the pairs).
fn split_row(split: u32, row: u32) -> u32 {
    return split * p.n * p.l + row;
}

fn put_split_out(srow: u32, col: u32, acc: f32) {
    stats[srow * p.ev + col] = acc;
}

fn put_split_stats(srow: u32, m: f32, l: f32) {
    let at = p.splits * p.n * p.l * p.ev + 2u * srow;
    stats[at] = m;
    stats[at + 1u] = l;
}

// The tile kernels (attention.wgsl, attention_reg.wgsl): decodes the flat workgroup index into (row block, batch, column block); x = batches
// walked, false past the grid's end.
fn decode(wid: vec3<u32>, nwg: vec3<u32>) -> vec4<u32> {
    let flat = wid.x + wid.y * nwg.x;
    let rb = flat % p.row_blocks;
    let rest = flat / p.row_blocks;
    let live = rest < p.batches * p.col_blocks * p.splits;
    return vec4<u32>(rb, rest % p.batches, rest / p.batches, u32(live));
}

// What a forward workgroup walks (attn_fwd, attn_fwd_reg), for the grid's decoded `w` and a
// tile of `br` rows walking `bc` keys at a time. The grid's batch is a query batch, or (flag
// 8, grouped-query decoding) a key/value batch whose query heads' rows the workgroup takes
// together, head after head (they lie contiguously from its first head n0), so each K/V tile
// is read once for the group.
struct FwdBlock {
    // Row block, column block and key split.
    rb: u32,
    cb: u32,
    split: u32,
    // First query batch, key/value batch, and rows of the grid's batch.
    n0: u32,
    nk: u32,
    rows: u32,
    // This split's keys [j_first, s_end): whole tiles, so splits never share a tile; causal
    // stops at the block's last query position (of a group's rows: the last one).
    j_first: u32,
    s_end: u32,
}

fn fwd_block(w: vec4<u32>, br: u32, bc: u32) -> FwdBlock {
    var b: FwdBlock;
    b.rb = w.x;
    b.cb = w.z % p.col_blocks;
    b.split = w.z / p.col_blocks;
    let grouped = (p.flags & 8u) != 0u;
    b.n0 = w.y;
    b.nk = kv_of(w.y);
    b.rows = p.l;
    if (grouped) {
        b.nk = w.y;
        b.n0 = (b.nk / p.kv_heads) * p.heads + (b.nk % p.kv_heads) * p.group;
        b.rows = p.group * p.l;
    }
    let per = (p.s + bc * p.splits - 1u) / (bc * p.splits) * bc;
    b.j_first = b.split * per;
    let last = select(b.rb * br + br - 1u, p.l - 1u, grouped);
    b.s_end = min(keys_until(last), b.j_first + per);
    return b;
}

// Query batch and query of block row `rho` (p.l, outside the problem, past the rows).
fn fwd_row(b: FwdBlock, rho: u32) -> vec2<u32> {
    let live = rho < b.rows;
    return vec2<u32>(b.n0 + select(0u, rho / p.l, live), select(p.l, rho % p.l, live));
}

// Operands by number, so one staging loop or dot product serves each of them (WGSL's core has
// no pointers to storage buffers as function parameters).
const SRC_Q: u32 = 0u;
const SRC_K: u32 = 1u;
const SRC_V: u32 = 2u;
const SRC_DOUT: u32 = 3u;

fn load(src: u32, i: u32) -> f32 {
    switch (src) {
        case 0u: {
            return f32(q[i]);
        }
        case 1u: {
            return f32(k[i]);
        }
        case 2u: {
            return f32(v[i]);
        }
        default: {
            return f32(dout[i]);
        }
    }
}
