// Reduction over one axis of a strided tensor: out[o] = fold(x[base(o) + r * red_stride]),
// r = 0..red_len, always in a fixed order so results are bitwise reproducible.
// `reduce_rows`: one invocation per output (many outputs / short reductions).
// `reduce_wg`: one workgroup per output, strided partial folds then a shared-memory tree
// (few outputs / long reductions).
// `reduce_wg_split` + `reduce_partials` (GPUs: too few outputs to fill the device; CPU adapters:
// sums whose lanes would each add more than about 64 values in turn): each output's
// reduction cut into `segs` segments, one workgroup each, whose folds land in an f32 workspace,
// then one workgroup per output folds its segments in order.
// `reduce_rows_split` + `reduce_rows_partials` (GPUs: many outputs with long reductions, e.g. a
// bias gradient summing 16k rows per column; CPU adapters: sums of rows past 128): invocation (o, j) folds segment j of output o
// into the workspace at [j, o], then one invocation per output folds its segments in order. Needs lib/activation.wgsl (the NaN-propagating max/min).

struct Params {
    n_out: u32,
    rank: u32,
    offset: u32,
    red_len: u32,
    red_stride: u32,
    divisor: f32,
    // A window of the outputs (a tensor larger than one binding; 0 and 0 otherwise): outputs
    // decode their input coordinates from base + o and store at out_off + o.
    base: u32,
    out_off: u32,
    shape: array<vec4<u32>, 2>,
    strides: array<vec4<u32>, 2>,
    // The *_carry entry points: bit 0 starts from the carried folds, bit 1 leaves them in
    // `carry` instead of storing the outputs.
    flags: u32,
    // reduce_wg_split / reduce_partials: segments per output and values per segment (a
    // multiple of WG).
    segs: u32,
    seg_len: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read_write> y: array<T>;

// RED_SUM (mean = sum / divisor, as PyTorch divides), RED_MAX, RED_MIN: constants the runtime
// emits from REDUCE_DEFS in src/ops/reduce.rs.
override OP: u32 = 0u;
override WG: u32;

var<workgroup> partial: array<f32, WG>;

fn identity() -> f32 {
    switch OP {
        // -inf / +inf, so a row of infinities reduces to itself. WGSL constant expressions
        // cannot hold an infinity (Tint rejects the shader), so the bits pass through a
        // uniform load and are only put together at run time.
        case RED_MAX: { return bitcast<f32>(0xff800000u | (p.rank & 0u)); }
        case RED_MIN: { return bitcast<f32>(0x7f800000u | (p.rank & 0u)); }
        default: { return 0.0; }
    }
}

fn fold(acc: f32, v: f32) -> f32 {
    switch OP {
        case RED_MAX: { return max_nan(acc, v); }
        case RED_MIN: { return min_nan(acc, v); }
        default: { return acc + v; }
    }
}

fn finish(acc: f32) -> T {
    if (OP == RED_SUM) {
        return T(div_f(acc, p.divisor));
    }
    return T(acc);
}

// The fold of every lane's `acc` in a fixed halving tree (lane i takes lane i + h, h = WG / 2,
// ..., 1), as every lane sees it. Every invocation of the workgroup must call it (barriers).
fn tree_fold(lid: u32, acc: f32) -> f32 {
    partial[lid] = acc;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (lid < s) {
            partial[lid] = fold(partial[lid], partial[lid + s]);
        }
        workgroupBarrier();
    }
    return partial[0];
}

// `acc` folded with the values of the output at `base` at r = start, start + step, ... below
// `end`. `end` may be just under 2^32 (a broadcast view): no loop steps `r` past `end`, so it
// cannot wrap. Eight loads are issued before their folds: a memory-bound reduction needs more
// loads in flight per lane than a chain of dependent load-then-add (on the H200 four took the
// sum of 2^26 f32 from 0.53 to 0.14 ms; eight cost lavapipe about 35 ms more to compile a
// reduction, 0.19 s against 0.155, and ran no slower there).
// Sums keep their precision over long lanes (a GPU's split sum of 10^8 values leaves a lane
// about 1500 in turn; every add in turn rounds, all the same way on constant data): the eight
// fold in a tree, eight such trees into `blk` (64 values), and only the blocks into `acc`, so
// no chain of dependent adds passes len / 64 + 11 (the blocks of 64 start at `start`: the
// carried windows hold whole blocks to stay bitwise the unsplit pass). Max and min come out
// the same in any order.
fn fold_range(acc0: f32, base: u32, start: u32, end: u32, step: u32) -> f32 {
    var acc = acc0;
    if (start >= end) {
        return acc;
    }
    // Counted in values of this lane, so no index steps past `end`.
    let count = (end - start - 1u) / step + 1u;
    let trees = count / 8u;
    var blk = identity();
    var t = 0u;
    while (t < trees) {
        let r = start + t * 8u * step;
        let v0 = f32(x[base + r * p.red_stride]);
        let v1 = f32(x[base + (r + step) * p.red_stride]);
        let v2 = f32(x[base + (r + 2u * step) * p.red_stride]);
        let v3 = f32(x[base + (r + 3u * step) * p.red_stride]);
        let v4 = f32(x[base + (r + 4u * step) * p.red_stride]);
        let v5 = f32(x[base + (r + 5u * step) * p.red_stride]);
        let v6 = f32(x[base + (r + 6u * step) * p.red_stride]);
        let v7 = f32(x[base + (r + 7u * step) * p.red_stride]);
        blk = fold(blk, fold(fold(fold(v0, v1), fold(v2, v3)), fold(fold(v4, v5), fold(v6, v7))));
        t += 1u;
        if ((t & 7u) == 0u) {
            acc = fold(acc, blk);
            blk = identity();
        }
    }
    acc = fold(acc, blk);
    for (var i = trees * 8u; i < count; i++) {
        acc = fold(acc, f32(x[base + (start + i * step) * p.red_stride]));
    }
    return acc;
}

fn base_index(o: u32) -> u32 {
    var rem = p.base + o;
    var off = p.offset;
    for (var d = i32(p.rank) - 1; d >= 0; d--) {
        let k = u32(d);
        let n = p.shape[k / 4u][k % 4u];
        off += (rem % n) * p.strides[k / 4u][k % 4u];
        rem = rem / n;
    }
    return off;
}

@compute @workgroup_size(WG)
fn reduce_rows(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let o = (wid.x + wid.y * nwg.x) * WG + lid;
    if (o >= p.n_out) {
        return;
    }
    let base = base_index(o);
    var acc = identity();
    acc = fold_range(acc, base, 0u, p.red_len, 1u);
    y[p.out_off + o] = finish(acc);
}

@compute @workgroup_size(WG)
fn reduce_wg(@builtin(workgroup_id) wid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    // Uniform control flow: every invocation of the workgroup reaches the barriers.
    let o = wid.x + wid.y * nwg.x;
    let live = o < p.n_out;
    var acc = identity();
    if (live) {
        let base = base_index(o);
        acc = fold_range(acc, base, lid, p.red_len, WG);
    }
    let total = tree_fold(lid, acc);
    if (live && lid == 0u) {
        y[p.out_off + o] = finish(total);
    }
}

// Windows over the reduced axis (a packed tensor past one binding whose slab per output group
// exceeds it, e.g. a reduction along the outermost dim): the running folds are carried between
// windows in f32 (exact), one per output for reduce_rows_carry and one per (output, lane) for
// reduce_wg_carry; windows hold whole blocks of 64 values a lane (or exactly one tree of 8 where
// a binding holds fewer), so every lane folds the same values in the same order as the unsplit
// pass and the results are bitwise identical (see CarryWindows in src/ops/reduce.rs).
@group(0) @binding(3) var<storage, read_write> carry: array<f32>;

@compute @workgroup_size(WG)
fn reduce_rows_carry(@builtin(workgroup_id) wid: vec3<u32>,
                     @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    let o = (wid.x + wid.y * nwg.x) * WG + lid;
    if (o >= p.n_out) {
        return;
    }
    let base = base_index(o);
    var acc = identity();
    if ((p.flags & 1u) != 0u) {
        acc = carry[o];
    }
    acc = fold_range(acc, base, 0u, p.red_len, 1u);
    if ((p.flags & 2u) != 0u) {
        carry[o] = acc;
    } else {
        y[p.out_off + o] = finish(acc);
    }
}

@compute @workgroup_size(WG)
fn reduce_wg_carry(@builtin(workgroup_id) wid: vec3<u32>,
                   @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let o = wid.x + wid.y * nwg.x;
    let live = o < p.n_out;
    var acc = identity();
    if (live) {
        if ((p.flags & 1u) != 0u) {
            acc = carry[o * WG + lid];
        }
        let base = base_index(o);
        acc = fold_range(acc, base, lid, p.red_len, WG);
        if ((p.flags & 2u) != 0u) {
            carry[o * WG + lid] = acc;
        }
    }
    // Uniform (a uniform flag): either every invocation leaves here or all reach the barriers.
    if ((p.flags & 2u) != 0u) {
        return;
    }
    let total = tree_fold(lid, acc);
    if (live && lid == 0u) {
        y[p.out_off + o] = finish(total);
    }
}

// Workgroup (o, j) of a split reduction: the fold of output o's values [j seg_len, (j + 1)
// seg_len), left raw (f32, no division) at carry[o * segs + j]. Tree and lane order as in
// reduce_wg, so the result depends only on (segs, seg_len), never on scheduling.
@compute @workgroup_size(WG)
fn reduce_wg_split(@builtin(workgroup_id) wid: vec3<u32>,
                   @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let w = wid.x + wid.y * nwg.x;
    let o = w / p.segs;
    let j = w % p.segs;
    let live = o < p.n_out;
    var acc = identity();
    if (live) {
        let base = base_index(o);
        let start = j * p.seg_len;
        // start + seg_len may pass 2^32 for the last segment of a reduction just under it.
        let end = start + min(p.seg_len, p.red_len - start);
        acc = fold_range(acc, base, start + lid, end, WG);
    }
    let total = tree_fold(lid, acc);
    if (live && lid == 0u) {
        carry[o * p.segs + j] = total;
    }
}

// One workgroup per output: folds its segs partials (lane l takes l, l + WG, ...; then the
// tree) and stores the result.
@compute @workgroup_size(WG)
fn reduce_partials(@builtin(workgroup_id) wid: vec3<u32>,
                   @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let o = wid.x + wid.y * nwg.x;
    let live = o < p.n_out;
    var acc = identity();
    if (live) {
        for (var j = lid; j < p.segs; j += WG) {
            acc = fold(acc, carry[o * p.segs + j]);
        }
    }
    let total = tree_fold(lid, acc);
    if (live && lid == 0u) {
        y[p.out_off + o] = finish(total);
    }
}

// Invocation (o, j) of a rows split: the fold of output o's values [j seg_len, (j + 1)
// seg_len), raw, at carry[j * n_out + o] (outputs fastest: neighbouring invocations read and
// write neighbouring outputs).
@compute @workgroup_size(WG)
fn reduce_rows_split(@builtin(workgroup_id) wid: vec3<u32>,
                     @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    let t = (wid.x + wid.y * nwg.x) * WG + lid;
    let o = t % p.n_out;
    let j = t / p.n_out;
    if (j >= p.segs) {
        return;
    }
    let base = base_index(o);
    let start = j * p.seg_len;
    let end = start + min(p.seg_len, p.red_len - start);
    let acc = fold_range(identity(), base, start, end, 1u);
    carry[j * p.n_out + o] = acc;
}

// One invocation per output: its segments folded in order, in groups of 16 whose folds are
// then folded (a sum of 256 partials adds 32 times in turn, not 256: each add in turn
// rounds, all the same way on constant data), then stored.
@compute @workgroup_size(WG)
fn reduce_rows_partials(@builtin(workgroup_id) wid: vec3<u32>,
                        @builtin(num_workgroups) nwg: vec3<u32>,
                        @builtin(local_invocation_index) lid: u32) {
    let o = (wid.x + wid.y * nwg.x) * WG + lid;
    if (o >= p.n_out) {
        return;
    }
    var acc = identity();
    var group = identity();
    for (var j0 = 0u; j0 < p.segs; j0 += 16u) {
        group = identity();
        for (var j = j0; j < min(j0 + 16u, p.segs); j++) {
            group = fold(group, carry[j * p.n_out + o]);
        }
        acc = fold(acc, group);
    }
    y[p.out_off + o] = finish(acc);
}
