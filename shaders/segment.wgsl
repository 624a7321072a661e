// Row scatter-add through buckets: the backward of index_select and embedding,
// out[o, v, i] = sum over j with idx[j] == v of g[o, j, i], in O(L + V) bucketing work plus
// one read of g per output, instead of every output scanning the whole index.
// `seg_count` counts each row's indices (atomics: the counts are exact whatever the order),
// `seg_scan` turns counts into bucket starts, `seg_fill` drops each position j into its row's
// bucket (in arbitrary order), `seg_sort` sorts every bucket by j, and `seg_sum` adds each
// bucket's rows of g in that order: the sum order is fixed, so results are bitwise
// reproducible. Indices outside [0, rows) and the `skip` row (embedding's padding_idx) enter
// no bucket.

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
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> idx: array<i32>;
@group(0) @binding(2) var<storage, read_write> cursor: array<atomic<u32>>;
@group(0) @binding(3) var<storage, read_write> starts: array<u32>;
@group(0) @binding(4) var<storage, read_write> list: array<u32>;
@group(0) @binding(5) var<storage, read> g: array<T>;
@group(0) @binding(6) var<storage, read_write> out: array<T>;

override WG: u32;

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

// One workgroup: each lane sums a contiguous chunk of counts, lane 0 scans the 256 partial
// sums, then each lane writes its chunk's starts (and resets the cursors to them).
@compute @workgroup_size(SCAN_WG)
fn seg_scan(@builtin(local_invocation_index) lid: u32) {
    let chunk = (p.rows + SCAN_WG - 1u) / SCAN_WG;
    let lo = min(lid * chunk, p.rows);
    let hi = min(lo + chunk, p.rows);
    var s = 0u;
    for (var v = lo; v < hi; v++) {
        s += atomicLoad(&cursor[v]);
    }
    part[lid] = s;
    workgroupBarrier();
    if (lid == 0u) {
        var acc = 0u;
        for (var t = 0u; t < SCAN_WG; t++) {
            let x = part[t];
            part[t] = acc;
            acc += x;
        }
        starts[p.rows] = acc;
    }
    workgroupBarrier();
    var acc = part[lid];
    for (var v = lo; v < hi; v++) {
        let c = atomicLoad(&cursor[v]);
        starts[v] = acc;
        atomicStore(&cursor[v], acc);
        acc += c;
    }
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

// Buckets up to this length are insertion-sorted; longer ones heap-sorted.
const SHORT_BUCKET: u32 = 32u;

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
// row's share of the index) and insertion sort suits them; a row that most of the index hits
// (a padding id over a whole batch) would cost it quadratic time on one invocation, seconds
// on a GPU for 30k ids, so long buckets are heap-sorted: n log n, in place.
@compute @workgroup_size(WG)
fn seg_sort(@builtin(workgroup_id) wid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let v = thread_index(wid, nwg, lid);
    if (v >= p.rows) {
        return;
    }
    let a = starts[v];
    let b = starts[v + 1u];
    let n = b - a;
    if (n <= SHORT_BUCKET) {
        for (var i = a + 1u; i < b; i++) {
            let key = list[i];
            var k = i;
            while (k > a && list[k - 1u] > key) {
                list[k] = list[k - 1u];
                k--;
            }
            list[k] = key;
        }
        return;
    }
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
    var acc = 0.0;
    for (var k = starts[v]; k < starts[v + 1u]; k++) {
        acc += f32(g[(o * p.len + list[k]) * p.inner + i]);
    }
    out[e] = T(acc);
}
