// argmax / argmin along one dim, and the max / min gradient routed through them.
// The index of a row is its first NaN if it has one (NaN counts as the extremum, as PyTorch's
// argmax / argmin and max(dim) do), else its first maximum (minimum). `beats` decides between
// two candidates by value, then by the smaller index, so any order of merging candidates gives
// the index a serial scan finds: the plans below may split a row among lanes and segments.
// - argext_rows: one invocation per (output, segment), neighbouring invocations on neighbouring
//   outputs (strided rows read coalesced).
// - argext_wg: one workgroup per (output, segment), lanes strided over the segment and merged
//   in workgroup memory (long contiguous rows; few outputs).
// - argext_parts: the segments' candidate indices (segs > 1) merged per output, in order.
// - argext_route: the max / min gradient, g at each row's index and zero elsewhere.
// Segment s of output o writes its index to out_i[s * n_out + o]: with one segment that is the
// result itself. Needs lib/activation.wgsl (isnan_f); ARG_* come from ARGEXT_DEFS in
// src/ops/argext.rs.

struct Params {
    // Reduced rows (outputs).
    n_out: u32,
    rank: u32,
    dim: u32,
    // The reduced length.
    len: u32,
    off_x: u32,
    // Segments per row and values per segment (1 and len when rows are not split).
    segs: u32,
    seg_len: u32,
    // argext_route: g's offset and x's element count.
    off_g: u32,
    numel: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
    // x's shape and strides; argext_route: g's strides broadcast to x's shape (0 at dim).
    shape: array<vec4<u32>, 2>,
    sx: array<vec4<u32>, 2>,
    sg: array<vec4<u32>, 2>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read> parts: array<i32>;
@group(0) @binding(3) var<storage, read> g: array<T>;
@group(0) @binding(4) var<storage, read_write> out_i: array<i32>;
@group(0) @binding(5) var<storage, read_write> dst: array<T>;

override OP: u32 = 0u;
override WG: u32;

// No candidate yet (a lane past its segment's end).
const NONE: u32 = 0xffffffffu;

var<workgroup> wv: array<T, WG>;
var<workgroup> wk: array<u32, WG>;

fn at(v: array<vec4<u32>, 2>, k: u32) -> u32 {
    return v[k / 4u][k % 4u];
}

fn thread_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * nwg.x) * WG + lid;
}

// x's offset of element 0 of reduced row `o` (rows in row-major order of the other dims).
fn row_base(o: u32) -> u32 {
    var rem = o;
    var off = p.off_x;
    for (var d = i32(p.rank) - 1; d >= 0; d--) {
        let k = u32(d);
        if (k != p.dim) {
            let n = at(p.shape, k);
            off += (rem % n) * at(p.sx, k);
            rem = rem / n;
        }
    }
    return off;
}

fn row_step() -> u32 {
    return select(0u, at(p.sx, p.dim), p.rank > 0u);
}

// (v, k) is a better candidate than (b, bk): a NaN beats any number, then the extremum, then
// the smaller index.
fn beats(v: T, k: u32, b: T, bk: u32) -> bool {
    let vn = isnan_f(f32(v));
    let bn = isnan_f(f32(b));
    if (vn || bn) {
        return vn && (!bn || k < bk);
    }
    if (v == b) {
        return k < bk;
    }
    return select((v < b), (v > b), OP == ARG_MAX);
}

// The index of the first NaN or first extremum among k in [start, end) (start < end).
fn scan(base: u32, step: u32, start: u32, end: u32) -> u32 {
    var best = x[base + start * step];
    var bk = start;
    if (isnan_f(f32(best))) {
        return bk;
    }
    for (var k = start + 1u; k < end; k++) {
        let v = x[base + k * step];
        if (isnan_f(f32(v))) {
            return k;
        }
        // Strict comparison keeps the first of equal extrema.
        if (select((v < best), (v > best), OP == ARG_MAX)) {
            best = v;
            bk = k;
        }
    }
    return bk;
}

// The end of the segment from `start` (< len): start + seg_len may pass 2^32 for the last
// segment of a broadcast row just under it, so the remaining length is taken first.
fn seg_end(start: u32) -> u32 {
    return start + min(p.seg_len, p.len - start);
}

@compute @workgroup_size(WG)
fn argext_rows(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let i = thread_index(wid, nwg, lid);
    if (i >= p.n_out * p.segs) {
        return;
    }
    let o = i % p.n_out;
    let start = (i / p.n_out) * p.seg_len;
    out_i[i] = i32(scan(row_base(o), row_step(), start, seg_end(start)));
}

@compute @workgroup_size(WG)
fn argext_wg(@builtin(workgroup_id) wid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let i = wid.x + wid.y * nwg.x;
    if (i >= p.n_out * p.segs) {
        return;
    }
    let base = row_base(i % p.n_out);
    let step = row_step();
    let start = (i / p.n_out) * p.seg_len;
    let end = seg_end(start);
    // Each lane keeps its own first NaN or first extremum (its indices ascend).
    var bv = T(0);
    var bk = NONE;
    for (var k = start + lid; k < end; k += WG) {
        let v = x[base + k * step];
        if (bk == NONE || beats(v, k, bv, bk)) {
            bv = v;
            bk = k;
        }
        if (isnan_f(f32(v))) {
            break;
        }
        // k + WG may wrap past 2^32 when end is just under it.
        if (end - k <= WG) {
            break;
        }
    }
    wv[lid] = bv;
    wk[lid] = bk;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (lid < s) {
            let ok = wk[lid + s];
            if (ok != NONE && (wk[lid] == NONE || beats(wv[lid + s], ok, wv[lid], wk[lid]))) {
                wv[lid] = wv[lid + s];
                wk[lid] = ok;
            }
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        out_i[i] = i32(wk[0]);
    }
}

@compute @workgroup_size(WG)
fn argext_parts(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let o = thread_index(wid, nwg, lid);
    if (o >= p.n_out) {
        return;
    }
    let base = row_base(o);
    let step = row_step();
    var bk = u32(parts[o]);
    var bv = x[base + bk * step];
    for (var s = 1u; s < p.segs; s++) {
        let k = u32(parts[s * p.n_out + o]);
        let v = x[base + k * step];
        if (beats(v, k, bv, bk)) {
            bv = v;
            bk = k;
        }
    }
    out_i[o] = i32(bk);
}

// One invocation per element of the (contiguous) gradient: parts holds each row's index.
@compute @workgroup_size(WG)
fn argext_route(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let i = thread_index(wid, nwg, lid);
    if (i >= p.numel) {
        return;
    }
    var rem = i;
    var o = 0u;
    var packed = 1u;
    var kd = 0u;
    var go = p.off_g;
    for (var d = i32(p.rank) - 1; d >= 0; d--) {
        let k = u32(d);
        let n = at(p.shape, k);
        let c = rem % n;
        rem = rem / n;
        go += c * at(p.sg, k);
        if (k == p.dim) {
            kd = c;
        } else {
            o += c * packed;
            packed *= n;
        }
    }
    dst[i] = select(T(0), g[go], i32(kd) == parts[o]);
}
