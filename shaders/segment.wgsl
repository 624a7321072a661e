// Row scatter-add through buckets: the backward of index_select and embedding,
// out[o, v, i] = sum over j with idx[j] == v of g[o, j, i], in O(L + V) bucketing work plus
// one read of g per output, instead of every output scanning the whole index.
// `seg_count` counts each row's indices (atomics: the counts are exact whatever the order),
// `seg_scan` turns counts into bucket starts, `seg_fill` drops each position j into its row's
// bucket (in arbitrary order), `seg_sort` sorts every bucket by j, and `seg_sum` adds each
// bucket's rows of g in that order: the sum order is fixed, so results are bitwise
// reproducible. Indices outside [0, rows) and the `skip` row (embedding's padding_idx) enter
// no bucket.
//
// General scatter_add (any index, not one 1-D index broadcast): `seg_keys` turns each index
// element e into the flat output position it adds to (-1 for none), the passes above bucket
// those keys (rows = the output's elements), and `seg_scatter` adds each output's bucket of src
// values to its base in ascending e, which for one output is ascending position along dim: the
// gather form's sums, rounded once (on GPUs a bucket past 256 sums in lanes and a tree).

struct Params {
    // L: the index's length.
    len: u32,
    // V: the rows of the output along the indexed dim.
    rows: u32,
    // The index's element offset and stride.
    idx_off: u32,
    idx_stride: u32,
    // Output elements (outer * rows * inner) and the inner extent.
    numel: u32,
    inner: u32,
    skip: i32,
    // seg_keys / seg_scatter: the rank, the scattered dim, src's and the base's element
    // offsets, and flags (bit 0: a base, bound as `base` for the scatters, already in `out`
    // for the row sums; every sum starts from it).
    rank: u32,
    dim: u32,
    src_off: u32,
    base_off: u32,
    flags: u32,
    // The index's shape (the contributing region) and strides, src's strides, the output's
    // shape and contiguous strides, and the base's strides.
    ishape: array<vec4<u32>, 2>,
    si: array<vec4<u32>, 2>,
    ss: array<vec4<u32>, 2>,
    oshape: array<vec4<u32>, 2>,
    so: array<vec4<u32>, 2>,
    sb: array<vec4<u32>, 2>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> idx: array<i32>;
@group(0) @binding(2) var<storage, read_write> cursor: array<atomic<u32>>;
@group(0) @binding(3) var<storage, read_write> starts: array<u32>;
@group(0) @binding(4) var<storage, read_write> list: array<u32>;
@group(0) @binding(5) var<storage, read> g: array<T>;
@group(0) @binding(6) var<storage, read_write> out: array<T>;
@group(0) @binding(7) var<storage, read> base: array<T>;
// seg_sort_long's second list (its merge passes alternate between `list` and this).
@group(0) @binding(8) var<storage, read_write> tmp: array<u32>;

override WG: u32;
// Long buckets (more than MID_BUCKET positions) go to the workgroup kernels on GPUs:
// seg_sort_long sorts them and seg_sum_long / seg_scatter_long add them (seg_sum and
// seg_scatter skip them). Without, on CPU adapters, seg_sort heap-sorts them in the list and
// one invocation adds each output's bucket (one thread walks the list fast there, and the merge
// passes' binary searches took twice as long for a million ids).
override LONG_SORT: bool = false;
// T is a float type: seg_scatter sums in f32 (else in i32, wrapping on overflow as int32 adds
// do). The other passes read no T data.
override FLOAT: bool = true;

const SCAN_WG: u32 = 256u;
var<workgroup> part: array<u32, 256>;

fn thread_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * nwg.x) * WG + lid;
}

// The bucket of position j, or rows when it has none.
fn row_of(j: u32) -> u32 {
    let v = idx[p.idx_off + j * p.idx_stride];
    if (v < 0 || u32(v) >= p.rows || v == p.skip) {
        return p.rows;
    }
    return u32(v);
}

@compute @workgroup_size(WG)
fn seg_count(@builtin(workgroup_id) wid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let j = thread_index(wid, nwg, lid);
    if (j >= p.len) {
        return;
    }
    let v = row_of(j);
    if (v < p.rows) {
        atomicAdd(&cursor[v], 1u);
    }
}

// The sum of the counts of rows [lo, hi).
fn count_range(lo: u32, hi: u32) -> u32 {
    var s = 0u;
    for (var v = lo; v < hi; v++) {
        s += atomicLoad(&cursor[v]);
    }
    return s;
}

// Lane 0 only: `part` becomes its exclusive prefix sums; returns their total.
fn scan_part() -> u32 {
    var acc = 0u;
    for (var t = 0u; t < SCAN_WG; t++) {
        let x = part[t];
        part[t] = acc;
        acc += x;
    }
    return acc;
}

// The starts of rows [lo, hi), the first at `first`; their cursors reset to them.
fn start_range(lo: u32, hi: u32, first: u32) {
    var acc = first;
    for (var v = lo; v < hi; v++) {
        let c = atomicLoad(&cursor[v]);
        starts[v] = acc;
        atomicStore(&cursor[v], acc);
        acc += c;
    }
}

// One workgroup: each lane sums a contiguous chunk of counts, lane 0 scans the 256 partial
// sums, then each lane writes its chunk's starts (and resets the cursors to them).
@compute @workgroup_size(SCAN_WG)
fn seg_scan(@builtin(local_invocation_index) lid: u32) {
    let chunk = (p.rows + SCAN_WG - 1u) / SCAN_WG;
    let lo = min(lid * chunk, p.rows);
    let hi = min(lo + chunk, p.rows);
    part[lid] = count_range(lo, hi);
    workgroupBarrier();
    if (lid == 0u) {
        starts[p.rows] = scan_part();
    }
    workgroupBarrier();
    start_range(lo, hi, part[lid]);
}

// Long count arrays (a general scatter buckets by output element: millions of rows) scan in
// three passes over blocks of SCAN_BLOCK counts instead of one workgroup walking them all:
// `seg_scan_sums` leaves each block's total after the starts (at starts[rows + 1 + b]),
// `seg_scan_top` turns those totals into the blocks' starts with seg_scan's method, and
// `seg_scan_apply` writes each block's starts (lane chunks of 16 scanned in workgroup memory)
// and resets the cursors to them.
const SCAN_BLOCK: u32 = 4096u;
const SCAN_CHUNK: u32 = 16u;

// Lane `lid` of block `b`: its chunk of rows [lo, hi) (empty past the rows), whose count sum
// it leaves in part[lid].
fn block_lane_counts(b: u32, lid: u32) -> vec2<u32> {
    let lo = min(b * SCAN_BLOCK + lid * SCAN_CHUNK, p.rows);
    let hi = min(lo + SCAN_CHUNK, p.rows);
    part[lid] = count_range(lo, hi);
    return vec2<u32>(lo, hi);
}

@compute @workgroup_size(SCAN_WG)
fn seg_scan_sums(@builtin(workgroup_id) wid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let b = wid.x + wid.y * nwg.x;
    _ = block_lane_counts(b, lid);
    workgroupBarrier();
    for (var w = SCAN_WG / 2u; w > 0u; w = w / 2u) {
        if (lid < w) {
            part[lid] += part[lid + w];
        }
        workgroupBarrier();
    }
    if (lid == 0u && b * SCAN_BLOCK < p.rows) {
        starts[p.rows + 1u + b] = part[0];
    }
}

@compute @workgroup_size(SCAN_WG)
fn seg_scan_top(@builtin(local_invocation_index) lid: u32) {
    let blocks = (p.rows + SCAN_BLOCK - 1u) / SCAN_BLOCK;
    let first = p.rows + 1u;
    let chunk = (blocks + SCAN_WG - 1u) / SCAN_WG;
    let lo = min(lid * chunk, blocks);
    let hi = min(lo + chunk, blocks);
    var s = 0u;
    for (var b = lo; b < hi; b++) {
        s += starts[first + b];
    }
    part[lid] = s;
    workgroupBarrier();
    if (lid == 0u) {
        starts[p.rows] = scan_part();
    }
    workgroupBarrier();
    var acc = part[lid];
    for (var b = lo; b < hi; b++) {
        let c = starts[first + b];
        starts[first + b] = acc;
        acc += c;
    }
}

@compute @workgroup_size(SCAN_WG)
fn seg_scan_apply(@builtin(workgroup_id) wid: vec3<u32>,
                  @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let b = wid.x + wid.y * nwg.x;
    let r = block_lane_counts(b, lid);
    workgroupBarrier();
    if (lid == 0u) {
        _ = scan_part();
    }
    workgroupBarrier();
    if (b * SCAN_BLOCK >= p.rows) {
        return;
    }
    start_range(r.x, r.y, starts[p.rows + 1u + b] + part[lid]);
}

@compute @workgroup_size(WG)
fn seg_fill(@builtin(workgroup_id) wid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let j = thread_index(wid, nwg, lid);
    if (j >= p.len) {
        return;
    }
    let v = row_of(j);
    if (v < p.rows) {
        list[atomicAdd(&cursor[v], 1u)] = j;
    }
}

// Runs up to SHORT_BUCKET are insertion-sorted, up to MID_BUCKET heap-sorted in a private
// array (a hub row's few hundred positions: each sift step an L1 access instead of a
// dependent global load and store); longer buckets go to seg_sort_long (src/ops/segment.rs
// mirrors MID_BUCKET, a test checks the two agree).
const SHORT_BUCKET: u32 = 32u;
const MID_BUCKET: u32 = 256u;

// sift_down on a private array of `end` entries.
fn sift_down_private(buf: ptr<function, array<u32, MID_BUCKET>>, root0: u32, end: u32) {
    var root = root0;
    loop {
        var c = 2u * root + 1u;
        if (c >= end) {
            break;
        }
        if (c + 1u < end && (*buf)[c] < (*buf)[c + 1u]) {
            c += 1u;
        }
        let top = (*buf)[root];
        let kid = (*buf)[c];
        if (top >= kid) {
            break;
        }
        (*buf)[root] = kid;
        (*buf)[c] = top;
        root = c;
    }
}

// Sorts list[a .. a + n), n <= MID_BUCKET, in a private array: in the storage buffer every
// shift of the insertion sort and every sift step was a global load and store, each waiting
// on the last.
fn sort_private(a: u32, n: u32) {
    var buf: array<u32, MID_BUCKET>;
    for (var i = 0u; i < n; i++) {
        buf[i] = list[a + i];
    }
    if (n <= SHORT_BUCKET) {
        for (var i = 1u; i < n; i++) {
            let key = buf[i];
            var k = i;
            while (k > 0u && buf[k - 1u] > key) {
                buf[k] = buf[k - 1u];
                k--;
            }
            buf[k] = key;
        }
    } else {
        for (var s = n / 2u; s > 0u; s--) {
            sift_down_private(&buf, s - 1u, n);
        }
        for (var end = n - 1u; end > 0u; end--) {
            let top = buf[0];
            buf[0] = buf[end];
            buf[end] = top;
            sift_down_private(&buf, 0u, end);
        }
    }
    for (var i = 0u; i < n; i++) {
        list[a + i] = buf[i];
    }
}

// Moves element `root` of the max-heap list[a .. a + end) down to its place.
fn sift_down(a: u32, root0: u32, end: u32) {
    var root = root0;
    loop {
        var c = 2u * root + 1u;
        if (c >= end) {
            break;
        }
        if (c + 1u < end && list[a + c] < list[a + c + 1u]) {
            c += 1u;
        }
        let top = list[a + root];
        let kid = list[a + c];
        if (top >= kid) {
            break;
        }
        list[a + root] = kid;
        list[a + c] = top;
        root = c;
    }
}

// Sorts one bucket, fixing the order seg_fill's atomics left arbitrary (the positions are
// distinct, so every sort gives the same ascending list). Buckets are short for most data (a
// row's share of the index): sorted here, one invocation each. A longer bucket (a row that much
// of the index hits: a padding id over a whole batch, a graph's hub) is, with LONG_SORT,
// appended to the long list (`cursor[0]` the count, then the rows, in arbitrary order: each is
// sorted on its own) for seg_sort_long, which sorts it with a whole workgroup (on a GPU one
// invocation's n log n dependent global steps took seconds for a million ids); without, it is
// heap-sorted in place here.
@compute @workgroup_size(WG)
fn seg_sort(@builtin(workgroup_id) wid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let v = thread_index(wid, nwg, lid);
    if (v >= p.rows) {
        return;
    }
    let a = starts[v];
    let n = starts[v + 1u] - a;
    if (n <= MID_BUCKET) {
        sort_private(a, n);
    } else if (LONG_SORT) {
        let s = atomicAdd(&cursor[0], 1u);
        atomicStore(&cursor[1u + s], v);
    } else {
        for (var s = n / 2u; s > 0u; s--) {
            sift_down(a, s - 1u, n);
        }
        for (var end = n - 1u; end > 0u; end--) {
            let top = list[a];
            list[a] = list[a + end];
            list[a + end] = top;
            sift_down(a, 0u, end);
        }
    }
}

const LONG_WG: u32 = 256u;
var<workgroup> long_items: u32;
var<workgroup> long_start: u32;
var<workgroup> long_len: u32;

// How many items the long kernels take: the long buckets (cursor[0]) times `per_bucket`
// (outputs per bucket for the sums, 1 for the sort), uniform across the workgroup.
fn long_items_of(lid: u32, per_bucket: u32) -> u32 {
    if (lid == 0u) {
        long_items = atomicLoad(&cursor[0]) * per_bucket;
    }
    return workgroupUniformLoad(&long_items);
}

// Element i of `list` (from_list) or of `tmp`.
fn read_run(from_list: bool, i: u32) -> u32 {
    if (from_list) {
        return list[i];
    }
    return tmp[i];
}

fn write_run(to_list: bool, i: u32, x: u32) {
    if (to_list) {
        list[i] = x;
    } else {
        tmp[i] = x;
    }
}

// How many of the ascending run [lo, hi) of `list` (from_list) or `tmp` are below x.
fn count_below(from_list: bool, lo: u32, hi: u32, x: u32) -> u32 {
    var l = lo;
    var h = hi;
    while (l < h) {
        let m = l + (h - l) / 2u;
        if (read_run(from_list, m) < x) {
            l = m + 1u;
        } else {
            h = m;
        }
    }
    return l - lo;
}

// The long buckets, one workgroup each (a workgroup takes every nwg-th of the long list):
// each lane sorts runs of MID_BUCKET in a private array, then merge passes double the runs
// until one holds the bucket, alternating between `list` and `tmp`. In a pass every element
// lands at its index in its run plus the count of the partner run's elements below it (the
// positions are distinct, so no two land on one slot): n / 256 binary searches a lane, all
// independent. The bucket bounds pass through workgroup memory so the loops around the
// barriers stay uniform.
@compute @workgroup_size(LONG_WG)
fn seg_sort_long(@builtin(workgroup_id) wid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let count = long_items_of(lid, 1u);
    for (var r = wid.x + wid.y * nwg.x; r < count; r += nwg.x * nwg.y) {
        if (lid == 0u) {
            let v = atomicLoad(&cursor[1u + r]);
            long_start = starts[v];
            long_len = starts[v + 1u] - starts[v];
        }
        let a = workgroupUniformLoad(&long_start);
        let n = workgroupUniformLoad(&long_len);
        for (var c = lid * MID_BUCKET; c < n; c += LONG_WG * MID_BUCKET) {
            sort_private(a + c, min(MID_BUCKET, n - c));
        }
        storageBarrier();
        var from_list = true;
        for (var width = MID_BUCKET; width < n; width *= 2u) {
            for (var t = lid; t < n; t += LONG_WG) {
                let lo = t / (2u * width) * (2u * width);
                let mid = min(lo + width, n);
                let hi = min(lo + 2u * width, n);
                let x = read_run(from_list, a + t);
                var at = 0u;
                if (t < mid) {
                    at = t + count_below(from_list, a + mid, a + hi, x);
                } else {
                    at = t - (mid - lo) + count_below(from_list, a + lo, a + mid, x);
                }
                write_run(!from_list, a + at, x);
            }
            storageBarrier();
            from_list = !from_list;
        }
        if (!from_list) {
            for (var t = lid; t < n; t += LONG_WG) {
                list[a + t] = tmp[a + t];
            }
        }
        storageBarrier();
    }
}

@compute @workgroup_size(WG)
fn seg_sum(@builtin(workgroup_id) wid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let e = thread_index(wid, nwg, lid);
    if (e >= p.numel) {
        return;
    }
    let i = e % p.inner;
    let v = (e / p.inner) % p.rows;
    let o = e / (p.inner * p.rows);
    if (LONG_SORT && starts[v + 1u] - starts[v] > MID_BUCKET) {
        return;
    }
    // Flag 1: `out` holds the base already (index_add_rows copied it): the sum starts there,
    // as PyTorch's scatter_add starts from self.
    var acc = 0.0;
    if ((p.flags & 1u) != 0u) {
        acc = f32(out[e]);
    }
    for (var k = starts[v]; k < starts[v + 1u]; k++) {
        acc += f32(g[(o * p.len + list[k]) * p.inner + i]);
    }
    out[e] = T(acc);
}

var<workgroup> lane_sums: array<f32, LONG_WG>;

// The workgroup's sum of the lanes' `acc` (lane l added entries l, l + LONG_WG, ... of a
// bucket, in order), folded in a fixed tree: the same order every run, whichever workgroup
// takes the output. Every lane returns it.
fn fold_lanes(lid: u32, acc: f32) -> f32 {
    lane_sums[lid] = acc;
    workgroupBarrier();
    for (var s = LONG_WG / 2u; s > 0u; s /= 2u) {
        if (lid < s) {
            lane_sums[lid] += lane_sums[lid + s];
        }
        workgroupBarrier();
    }
    let total = lane_sums[0];
    workgroupBarrier();
    return total;
}

var<workgroup> lane_isums: array<i32, LONG_WG>;

// fold_lanes for i32 sums (integer scatter_add), wrapping on overflow.
fn fold_lanes_i32(lid: u32, acc: i32) -> i32 {
    lane_isums[lid] = acc;
    workgroupBarrier();
    for (var s = LONG_WG / 2u; s > 0u; s /= 2u) {
        if (lid < s) {
            lane_isums[lid] += lane_isums[lid + s];
        }
        workgroupBarrier();
    }
    let total = lane_isums[0];
    workgroupBarrier();
    return total;
}

// The outputs of the long buckets (GPUs): one workgroup per output element (bucket, outer,
// inner index), its LONG_WG lanes each adding every LONG_WG-th entry of the sorted bucket,
// then folded in a fixed tree. One invocation adding a hub row's million entries in turn
// took about a second on a GPU.
@compute @workgroup_size(LONG_WG)
fn seg_sum_long(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let outer = p.numel / (p.rows * p.inner);
    let items = long_items_of(lid, outer * p.inner);
    for (var w = wid.x + wid.y * nwg.x; w < items; w += nwg.x * nwg.y) {
        let i = w % p.inner;
        let o = (w / p.inner) % outer;
        let v = atomicLoad(&cursor[1u + w / (p.inner * outer)]);
        let at = (o * p.rows + v) * p.inner + i;
        // Lane 0 starts from a base `out` holds (seg_sum's flag 1).
        var acc = 0.0;
        if (lid == 0u && (p.flags & 1u) != 0u) {
            acc = f32(out[at]);
        }
        for (var k = starts[v] + lid; k < starts[v + 1u]; k += LONG_WG) {
            acc += f32(g[(o * p.len + list[k]) * p.inner + i]);
        }
        let total = fold_lanes(lid, acc);
        if (lid == 0u) {
            out[at] = T(total);
        }
    }
}

fn at(v: array<vec4<u32>, 2>, k: u32) -> u32 {
    return v[k / 4u][k % 4u];
}

// The element offset of flat position `e` of `shape` through `strides`.
fn offset_of(e: u32, shape: array<vec4<u32>, 2>, strides: array<vec4<u32>, 2>) -> u32 {
    var rem = e;
    var off = 0u;
    for (var d = i32(p.rank) - 1; d >= 0; d--) {
        let k = u32(d);
        let n = at(shape, k);
        off += (rem % n) * at(strides, k);
        rem = rem / n;
    }
    return off;
}

// Index element e (row-major over ishape) -> the output position it adds to, or -1 (written
// to `list`, which this pass binds to the keys buffer).
@compute @workgroup_size(WG)
fn seg_keys(@builtin(workgroup_id) wid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let e = thread_index(wid, nwg, lid);
    if (e >= p.len) {
        return;
    }
    var rem = e;
    var oi = p.idx_off;
    var key = 0u;
    for (var d = i32(p.rank) - 1; d >= 0; d--) {
        let k = u32(d);
        let n = at(p.ishape, k);
        let c = rem % n;
        rem = rem / n;
        oi += c * at(p.si, k);
        if (k != p.dim) {
            key += c * at(p.so, k);
        }
    }
    let v = idx[oi];
    var out_key = -1;
    if (v >= 0 && u32(v) < at(p.oshape, p.dim) && v != p.skip) {
        out_key = i32(key + u32(v) * at(p.so, p.dim));
    }
    list[e] = bitcast<u32>(out_key);
}

// Output e: its base, then the src values of its bucket in ascending index position.
@compute @workgroup_size(WG)
fn seg_scatter(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let e = thread_index(wid, nwg, lid);
    if (e >= p.numel) {
        return;
    }
    if (LONG_SORT && starts[e + 1u] - starts[e] > MID_BUCKET) {
        return;
    }
    // From the base (PyTorch's output starts as a copy of self), then in position order.
    var acc = 0.0;
    var iacc = 0i;
    if ((p.flags & 1u) != 0u) {
        let b = base[p.base_off + offset_of(e, p.oshape, p.sb)];
        if (FLOAT) {
            acc = f32(b);
        } else {
            iacc = i32(b);
        }
    }
    for (var k = starts[e]; k < starts[e + 1u]; k++) {
        let v = g[p.src_off + offset_of(list[k], p.ishape, p.ss)];
        if (FLOAT) {
            acc += f32(v);
        } else {
            iacc += i32(v);
        }
    }
    if (FLOAT) {
        out[e] = T(acc);
    } else {
        out[e] = T(iacc);
    }
}

// seg_scatter for the long buckets (GPUs), as seg_sum_long: a workgroup per output, lane 0
// starting from the base, the lanes' strided sums folded in a fixed tree.
@compute @workgroup_size(LONG_WG)
fn seg_scatter_long(@builtin(workgroup_id) wid: vec3<u32>,
                    @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
    let items = long_items_of(lid, 1u);
    for (var w = wid.x + wid.y * nwg.x; w < items; w += nwg.x * nwg.y) {
        let e = atomicLoad(&cursor[1u + w]);
        var acc = 0.0;
        var iacc = 0i;
        if (lid == 0u && (p.flags & 1u) != 0u) {
            let b = base[p.base_off + offset_of(e, p.oshape, p.sb)];
            if (FLOAT) {
                acc = f32(b);
            } else {
                iacc = i32(b);
            }
        }
        for (var k = starts[e] + lid; k < starts[e + 1u]; k += LONG_WG) {
            let v = g[p.src_off + offset_of(list[k], p.ishape, p.ss)];
            if (FLOAT) {
                acc += f32(v);
            } else {
                iacc += i32(v);
            }
        }
        if (FLOAT) {
            let total = fold_lanes(lid, acc);
            if (lid == 0u) {
                out[e] = T(total);
            }
        } else {
            let total = fold_lanes_i32(lid, iacc);
            if (lid == 0u) {
                out[e] = T(total);
            }
        }
    }
}
