// Batch normalization over the channel axis 1 of a packed [N, C, S] tensor (S = product of the
// trailing dims, 1 for [N, C]). Statistics and coefficients are always f32; x, dy, outputs and
// the per-channel parameters are T.
//
// Work split (the same for every data pass): channel c's N*S values are read in "groups" of VEC
// values (a vec4 when S and the offsets allow it, else one value). Group t of the channel lives at
// n = t / sg, s = t % sg (sg = S / VEC). The channel's groups are cut into `chunks` chunks of
// `chunk` groups (a multiple of WG); workgroup (j, c) handles chunk j of channel c and lane l takes
// the chunk's groups l, l + WG, l + 2 WG, ... A lane walks its groups with an incremental
// (address, s) cursor, so the loop has no integer division. The loop is uniform across the
// workgroup (a lane-masked step only for the chunk's last partial row of WG groups) and there
// are no barriers and no shared memory: on CPU adapters a workgroup is one 8-lane subgroup
// streaming 8 consecutive groups per step.
//
// Reductions are deterministic: each lane keeps its own partial, partials land in a workspace at
// fixed positions, and a per-channel finalize merges them in a fixed order. On GPUs (WG > 8) a
// workgroup first merges its lanes' partials in workgroup memory (a fixed tree, `leave_partial`)
// and leaves one: the finalize, one invocation per channel, would otherwise walk chunks * WG
// partials serially, each merge waiting on a global load, with only C invocations busy.
//
// Training statistics: each lane runs Welford's update on values shifted by a per-channel pivot
// (the channel's first value), so that data with a large mean and a tiny spread keeps its
// precision; partial (count, mean, M2) triples are merged with Chan's formula. The output is then
// y = (x - pivot) * scale + shift' with shift' = beta - (mean - pivot) * scale, which never forms
// x * scale for large x (inference does the same with pivot = running_mean).

struct Params {
    channels: u32,
    // Groups per plane (S / VEC), plane stride in groups (C * sg), groups per channel (N * sg).
    sg: u32,
    plane: u32,
    groups: u32,
    // Groups per chunk (multiple of WG) and chunks per channel.
    chunk: u32,
    chunks: u32,
    // Cursor step for WG groups: WG / sg planes and WG % sg groups.
    step_n: u32,
    step_s: u32,
    // Offsets (in groups) of x and dy in their buffers.
    x_off: u32,
    dy_off: u32,
    // Values per channel N * S, eps, running-stat factor, and flags (bit 0: gamma given,
    // bit 1: beta given, bit 2: update running stats).
    count: f32,
    eps: f32,
    factor: f32,
    flags: u32,
    // Element offset and stride of each per-channel vector.
    gamma_os: vec2<u32>,
    beta_os: vec2<u32>,
    rmean_os: vec2<u32>,
    rvar_os: vec2<u32>,
    smean_os: vec2<u32>,
    sinv_os: vec2<u32>,
    // Index of the first partial in `ws` (the per-channel coefficients come first).
    ws_part: u32,
    // Values per group: 4 (vec4 loads) or 1. A uniform rather than an override constant, so that
    // one pipeline serves every shape: a plane size that is not a multiple of 4 compiles nothing.
    vec: u32,
    // A window of a tensor larger than one binding (0 and 0 otherwise): the data passes run
    // chunks chunk0 + wid.x, and the output is stored at o_off + its group index.
    chunk0: u32,
    o_off: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
// The same buffer is bound twice: as vec4 groups and as single values (p.vec picks).
@group(0) @binding(1) var<storage, read> x4: array<vec4<T>>;
@group(0) @binding(2) var<storage, read> x1: array<T>;
@group(0) @binding(3) var<storage, read> dy4: array<vec4<T>>;
@group(0) @binding(4) var<storage, read> dy1: array<T>;
@group(0) @binding(5) var<storage, read_write> out4: array<vec4<T>>;
@group(0) @binding(6) var<storage, read_write> out1: array<T>;
// f32 workspace: per-channel coefficients [C], then partials [C, chunks, parts()].
@group(0) @binding(7) var<storage, read_write> ws: array<vec4<f32>>;
// Per-channel vectors. All read_write so that user tensors sharing one buffer (a flat parameter
// store) never bind one buffer both read-only and writable in the same dispatch.
@group(0) @binding(8) var<storage, read_write> gamma: array<T>;
@group(0) @binding(9) var<storage, read_write> beta: array<T>;
@group(0) @binding(10) var<storage, read_write> rmean: array<T>;
@group(0) @binding(11) var<storage, read_write> rvar: array<T>;
@group(0) @binding(12) var<storage, read_write> smean: array<f32>;
@group(0) @binding(13) var<storage, read_write> sinv: array<f32>;
@group(0) @binding(14) var<storage, read_write> dgamma: array<T>;
@group(0) @binding(15) var<storage, read_write> dbeta: array<T>;

// Lanes per workgroup of the data passes (8 on CPU adapters: one SIMD register).
override WG: u32;
// Activation code of lib/activation.wgsl, applied by the inference pass.
override ACT: u32 = 0u;
// Invocations per workgroup of the per-channel finalize passes.
const FIN_WG: u32 = 64u;
// Largest WG (the GPU lanes of ops/batchnorm/mod.rs): the size of the lane-merge buffer.
const MAX_WG: u32 = 64u;

// Partials each data workgroup leaves: one per lane on CPU adapters (no barriers), one merged
// partial on GPUs. ops/batchnorm/mod.rs (`BatchNormPlan::parts`) sizes the workspace by the same
// rule.
fn parts() -> u32 {
    return select(WG, 1u, WG > 8u);
}

var<workgroup> lanes: array<vec4<f32>, MAX_WG>;

struct Cursor {
    // Group index relative to the packed tensor (add x_off / dy_off for the inputs).
    addr: u32,
    s: u32,
}

fn cursor_at(c: u32, t: u32) -> Cursor {
    let n = t / p.sg;
    let s = t % p.sg;
    return Cursor(n * p.plane + c * p.sg + s, s);
}

// Moves the cursor WG groups further along the channel.
fn advance(cur: Cursor) -> Cursor {
    let a = cur.addr + p.step_n * p.plane + p.step_s;
    let s = cur.s + p.step_s;
    let wrap = s >= p.sg;
    return Cursor(select(a, a + p.plane - p.sg, wrap), select(s, s - p.sg, wrap));
}

// The addresses of the four groups from `cur` on, and the cursor past them (the forward's
// passes take four groups a step).
struct Quad {
    at: vec4<u32>,
    next: Cursor,
}

fn quad(cur: Cursor) -> Quad {
    let c1 = advance(cur);
    let c2 = advance(c1);
    let c3 = advance(c2);
    return Quad(vec4<u32>(cur.addr, c1.addr, c2.addr, c3.addr), advance(c3));
}

// A group of x as f32 (only .x is meaningful when p.vec == 1).
fn load_x(a: u32) -> vec4<f32> {
    if (p.vec == 4u) {
        return vec4<f32>(x4[p.x_off + a]);
    }
    return vec4<f32>(f32(x1[p.x_off + a]), 0.0, 0.0, 0.0);
}

fn load_dy(a: u32) -> vec4<f32> {
    if (p.vec == 4u) {
        return vec4<f32>(dy4[p.dy_off + a]);
    }
    return vec4<f32>(f32(dy1[p.dy_off + a]), 0.0, 0.0, 0.0);
}

fn store_out(a: u32, v: vec4<f32>) {
    if (p.vec == 4u) {
        out4[p.o_off + a] = vec4<T>(v);
    } else {
        out1[p.o_off + a] = T(v.x);
    }
}

// Sum of the meaningful components of a group.
fn group_sum(v: vec4<f32>) -> f32 {
    if (p.vec == 4u) {
        return (v.x + v.y) + (v.z + v.w);
    }
    return v.x;
}

fn param(i: u32, os: vec2<u32>) -> u32 {
    return os.x + i * os.y;
}

fn gamma_of(c: u32) -> f32 {
    if ((p.flags & 1u) != 0u) {
        return f32(gamma[param(c, p.gamma_os)]);
    }
    return 1.0;
}

fn beta_of(c: u32) -> f32 {
    if ((p.flags & 2u) != 0u) {
        return f32(beta[param(c, p.beta_os)]);
    }
    return 0.0;
}

// The data passes' workgroup as (chunk, channel, 0): channels past the grid's limit on y
// continue on z (`chunk_grid` in ops/batchnorm/mod.rs), so a workgroup whose channel is past
// the last returns (uniformly: its whole workgroup shares the channel) before any barrier.
fn logical_wid(wid: vec3<u32>, nwg: vec3<u32>) -> vec3<u32> {
    return vec3<u32>(wid.x, wid.y + wid.z * nwg.y, 0u);
}

// The range of groups workgroup `wid` covers: (channel, first group, number of groups).
fn chunk_of(wid: vec3<u32>) -> vec3<u32> {
    let start = (p.chunk0 + wid.x) * p.chunk;
    return vec3<u32>(wid.y, start, min(p.chunk, p.groups - start));
}

fn partial_index(c: u32, j: u32, lane: u32) -> u32 {
    return p.ws_part + (c * p.chunks + j) * parts() + lane;
}

// Stores lane `lane`'s partial `v` of chunk j of channel c: as is on CPU adapters, else merged
// with the workgroup's other lanes by halving strides (lane i takes lane i + h, h = WG / 2, ...,
// 1: a fixed order) with Chan's formula (`chan`: (count, mean, M2, pivot) triples) or as sums.
// Every invocation of the workgroup calls it (it has barriers).
fn leave_partial(c: u32, j: u32, lane: u32, v: vec4<f32>, chan: bool) {
    if (parts() != 1u) {
        ws[partial_index(c, j, lane)] = v;
        return;
    }
    lanes[lane] = v;
    workgroupBarrier();
    for (var h = WG / 2u; h > 0u; h /= 2u) {
        if (lane < h) {
            let a = lanes[lane];
            let b = lanes[lane + h];
            if (chan) {
                lanes[lane] = vec4<f32>(merge(a.xyz, b.xyz), a.w);
            } else {
                lanes[lane] = a + b;
            }
        }
        workgroupBarrier();
    }
    if (lane == 0u) {
        ws[partial_index(c, j, 0u)] = lanes[0];
    }
}

// ---------------------------------------------------------------------------------------------
// Training forward
// ---------------------------------------------------------------------------------------------

// Per-lane (count, mean - pivot, M2, pivot) of one chunk.
@compute @workgroup_size(WG)
fn bn_stats(@builtin(workgroup_id) wid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lane: u32) {
    let w = logical_wid(wid, nwg);
    if (w.y >= p.channels) {
        return;
    }
    // The channel's first value (n = 0, s = 0): the shift every chunk of the channel shares.
    stats_chunk(w, lane, load_x(w.y * p.sg).x);
}

// bn_stats for a window that may not hold sample 0: the pivots come gathered in smean (unused
// by this pass otherwise).
@compute @workgroup_size(WG)
fn bn_stats_pivots(@builtin(workgroup_id) wid: vec3<u32>,
                   @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lane: u32) {
    let w = logical_wid(wid, nwg);
    if (w.y >= p.channels) {
        return;
    }
    stats_chunk(w, lane, smean[w.y]);
}

fn stats_chunk(wid: vec3<u32>, lane: u32, pivot: f32) {
    let ch = chunk_of(wid);
    let c = ch.x;
    let full = ch.z / WG;
    var cur = cursor_at(c, ch.y + lane);
    var mean = vec4<f32>(0.0);
    var m2 = vec4<f32>(0.0);
    // Four groups per iteration, loaded before any is folded: on a GPU the pass is one wave
    // whose lanes each walk their chunk, so its time is the walk's steps times the memory's
    // latency, and four loads in flight quarter the steps (CPU adapters pay their loop
    // overhead per iteration). The quad's exact (4, mean, M2) is merged into the lane's
    // running triple with Chan's formula.
    let quads = full / 4u;
    for (var k = 0u; k < quads; k++) {
        let q = quad(cur);
        cur = q.next;
        let v1 = load_x(q.at.x) - pivot;
        let v2 = load_x(q.at.y) - pivot;
        let v3 = load_x(q.at.z) - pivot;
        let v4 = load_x(q.at.w) - pivot;
        let mq = 0.25 * ((v1 + v2) + (v3 + v4));
        let e1 = v1 - mq;
        let e2 = v2 - mq;
        let e3 = v3 - mq;
        let e4 = v4 - mq;
        let m2q = (e1 * e1 + e2 * e2) + (e3 * e3 + e4 * e4);
        let d = mq - mean;
        let r = 1.0 / f32(k + 1u);
        mean += d * r;
        // The first quad's weight is 0 and d * d could be inf: selected away, since 0 * inf
        // is NaN in whatever order a driver's compiler multiplies.
        m2 += m2q + select(d * (d * (4.0 * f32(k) * r)), vec4<f32>(0.0), k == 0u);
    }
    var n = f32(4u * quads);
    for (var t = 4u * quads; t < full; t++) {
        n += 1.0;
        let v = load_x(cur.addr) - pivot;
        let d = v - mean;
        mean += d / n;
        m2 += d * (v - mean);
        cur = advance(cur);
    }
    if (lane < ch.z % WG) {
        n += 1.0;
        let v = load_x(cur.addr) - pivot;
        let d = v - mean;
        mean += d / n;
        m2 += d * (v - mean);
    }
    var cnt = n;
    var m = mean.x;
    var q = m2.x;
    if (p.vec == 4u) {
        // Chan's formula for four parts of equal count n.
        cnt = 4.0 * n;
        m = 0.25 * group_sum(mean);
        let dm = mean - vec4<f32>(m);
        q = group_sum(m2) + n * dot(dm, dm);
    }
    leave_partial(c, p.chunk0 + wid.x, lane, vec4<f32>(cnt, m, q, pivot), true);
}

// Chan's parallel merge of (count, mean, M2) triples.
fn merge(a: vec3<f32>, b: vec3<f32>) -> vec3<f32> {
    if (b.x == 0.0) {
        return a;
    }
    // An empty a is not merged: its weight would be 0, and a spread past 1.8e19 squares to
    // inf, 0 * inf = NaN, whatever order a driver's compiler gives d * (d * w).
    if (a.x == 0.0) {
        return b;
    }
    let n = a.x + b.x;
    let d = b.y - a.y;
    return vec3<f32>(n, a.y + d * div_f(b.x, n), a.z + b.z + d * (d * (a.x * div_f(b.x, n))));
}

// One invocation per channel: merge the partials in a fixed order, save mean and 1/std, update
// the running statistics in place and leave (pivot, scale, shift', 0) for bn_apply.
@compute @workgroup_size(FIN_WG)
fn bn_finalize(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c = gid.x;
    if (c >= p.channels) {
        return;
    }
    let first = partial_index(c, 0u, 0u);
    let pivot = ws[first].w;
    var acc = vec3<f32>(0.0);
    for (var i = 0u; i < p.chunks * parts(); i++) {
        acc = merge(acc, ws[first + i].xyz);
    }
    // Clamps rounding below 0 (to +0, so that eps = 0 gives invstd +inf, not -inf), but
    // keeps a NaN: a channel holding NaN must not normalize with invstd = 1/sqrt(eps). The
    // NaN test is on the bits: a compiler may turn the select into max(v, 0), which drops NaN
    // on NVIDIA (an H200 gave invstd 316.2 = 1/sqrt(1e-5) for a NaN channel).
    let v = div_f(acc.z, p.count);
    let var_b = select(v, 0.0, v <= 0.0 && !isnan_f(v));
    let invstd = rsqrt_f(var_b + p.eps);
    let mean = pivot + acc.y;
    smean[param(c, p.smean_os)] = mean;
    sinv[param(c, p.sinv_os)] = invstd;
    let scale = gamma_of(c) * invstd;
    ws[c] = vec4<f32>(pivot, scale, beta_of(c) - acc.y * scale, 0.0);
    if ((p.flags & 4u) != 0u) {
        // PyTorch: running = (1 - momentum) * running + momentum * batch statistic, with the
        // unbiased variance M2 / (n - 1).
        let f = p.factor;
        let im = param(c, p.rmean_os);
        let iv = param(c, p.rvar_os);
        rmean[im] = T((1.0 - f) * f32(rmean[im]) + f * mean);
        rvar[iv] = T((1.0 - f) * f32(rvar[iv]) + f * div_f(acc.z, p.count - 1.0));
    }
}

// y = act((x - k) * scale + shift) with per-channel (k, scale, shift).
fn normalize_chunk(wid: vec3<u32>, lane: u32, coef: vec4<f32>) {
    let ch = chunk_of(wid);
    var cur = cursor_at(ch.x, ch.y + lane);
    let full = ch.z / WG;
    // Four groups per iteration, all loaded before any is stored (a store may alias a later
    // load for all the compiler knows), as in bn_stats.
    for (var k = 0u; k < full / 4u; k++) {
        let q = quad(cur);
        cur = q.next;
        let v1 = load_x(q.at.x);
        let v2 = load_x(q.at.y);
        let v3 = load_x(q.at.z);
        let v4 = load_x(q.at.w);
        normalize_store(q.at.x, v1, coef);
        normalize_store(q.at.y, v2, coef);
        normalize_store(q.at.z, v3, coef);
        normalize_store(q.at.w, v4, coef);
    }
    for (var t = full / 4u * 4u; t < full; t++) {
        normalize_store(cur.addr, load_x(cur.addr), coef);
        cur = advance(cur);
    }
    if (lane < ch.z % WG) {
        normalize_store(cur.addr, load_x(cur.addr), coef);
    }
}

fn normalize_store(a: u32, x: vec4<f32>, coef: vec4<f32>) {
    let y = (x - coef.x) * coef.y + coef.z;
    store_out(a, vec4<f32>(activate(y.x, ACT), activate(y.y, ACT), activate(y.z, ACT), activate(y.w, ACT)));
}

// Training output from the coefficients bn_finalize left in ws.
@compute @workgroup_size(WG)
fn bn_apply(@builtin(workgroup_id) wid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lane: u32) {
    let w = logical_wid(wid, nwg);
    if (w.y >= p.channels) {
        return;
    }
    normalize_chunk(w, lane, ws[w.y]);
}

// Inference in one pass: coefficients folded per workgroup from the running statistics.
@compute @workgroup_size(WG)
fn bn_infer(@builtin(workgroup_id) wid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lane: u32) {
    let w = logical_wid(wid, nwg);
    if (w.y >= p.channels) {
        return;
    }
    let c = w.y;
    let scale = gamma_of(c) * rsqrt_f(f32(rvar[param(c, p.rvar_os)]) + p.eps);
    let k = f32(rmean[param(c, p.rmean_os)]);
    normalize_chunk(w, lane, vec4<f32>(k, scale, beta_of(c), 0.0));
}

// ---------------------------------------------------------------------------------------------
// Backward
// ---------------------------------------------------------------------------------------------

// Per-lane (sum dy, sum dy * (x - mean)) of one chunk. A lane adds up to 512 groups (CPU
// adapters' chunks): in blocks of 64 before its running sums, as the reductions do (every add
// in turn rounds, all the same way on constant terms: 1.6e-5 off for 4M values of one dy).
@compute @workgroup_size(WG)
fn bn_grad_stats(@builtin(workgroup_id) wid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lane: u32) {
    let w = logical_wid(wid, nwg);
    if (w.y >= p.channels) {
        return;
    }
    let ch = chunk_of(w);
    let c = ch.x;
    let mean = smean[param(c, p.smean_os)];
    var cur = cursor_at(c, ch.y + lane);
    var s1 = vec4<f32>(0.0);
    var s2 = vec4<f32>(0.0);
    var b1 = vec4<f32>(0.0);
    var b2 = vec4<f32>(0.0);
    let full = ch.z / WG;
    var k = 0u;
    while (k < full) {
        let end = min(full, k + 64u);
        for (; k < end; k++) {
            let g = load_dy(cur.addr);
            b1 += g;
            b2 += g * (load_x(cur.addr) - mean);
            cur = advance(cur);
        }
        s1 += b1;
        s2 += b2;
        b1 = vec4<f32>(0.0);
        b2 = vec4<f32>(0.0);
    }
    if (lane < ch.z % WG) {
        let g = load_dy(cur.addr);
        b1 += g;
        b2 += g * (load_x(cur.addr) - mean);
    }
    s1 += b1;
    s2 += b2;
    leave_partial(c, p.chunk0 + w.x, lane, vec4<f32>(group_sum(s1), group_sum(s2), 0.0, 0.0), false);
}

// One invocation per channel: fixed-order sums, dgamma = invstd * sum dy (x - mean),
// dbeta = sum dy, and the coefficients of dx = a dy + b (x - mean) + d left in ws as
// (mean, a, b, d). The partials (thousands for a long channel on a CPU adapter, which leaves
// one per lane) add in groups of 16 and groups of 16 groups before the running sums.
@compute @workgroup_size(FIN_WG)
fn bn_grad_finalize(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c = gid.x;
    if (c >= p.channels) {
        return;
    }
    let first = partial_index(c, 0u, 0u);
    var sums = vec2<f32>(0.0);
    var big = vec2<f32>(0.0);
    var small = vec2<f32>(0.0);
    for (var i = 0u; i < p.chunks * parts(); i++) {
        small += ws[first + i].xy;
        if ((i & 15u) == 15u) {
            big += small;
            small = vec2<f32>(0.0);
            if ((i & 255u) == 255u) {
                sums += big;
                big = vec2<f32>(0.0);
            }
        }
    }
    sums += big + small;
    let sdy = sums.x;
    let sdyx = sums.y;
    let invstd = sinv[param(c, p.sinv_os)];
    let dg = sdyx * invstd;
    dgamma[c] = T(dg);
    dbeta[c] = T(sdy);
    let a = gamma_of(c) * invstd;
    ws[c] = vec4<f32>(smean[param(c, p.smean_os)], a, div_f(-a * invstd * dg, p.count), div_f(-a * sdy, p.count));
}

@compute @workgroup_size(WG)
fn bn_grad_apply(@builtin(workgroup_id) wid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lane: u32) {
    let w = logical_wid(wid, nwg);
    if (w.y >= p.channels) {
        return;
    }
    let ch = chunk_of(w);
    let coef = ws[ch.x];
    var cur = cursor_at(ch.x, ch.y + lane);
    let full = ch.z / WG;
    for (var k = 0u; k < full; k++) {
        store_out(cur.addr, coef.y * load_dy(cur.addr) + coef.z * (load_x(cur.addr) - coef.x) + coef.w);
        cur = advance(cur);
    }
    if (lane < ch.z % WG) {
        store_out(cur.addr, coef.y * load_dy(cur.addr) + coef.z * (load_x(cur.addr) - coef.x) + coef.w);
    }
}
