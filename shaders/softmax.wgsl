// softmax / log_softmax along one axis of a strided tensor, numerically stable: each row is
// scanned for its max m, then s = sum exp(x - m), then y = exp(x - m) / s (or x - m - log s).
// `softmax_rows`: one invocation per row (many short rows). `softmax_wg`: one workgroup per row
// with workgroup-memory reductions (few long rows). Fewer rows than a GPU has room for
// (softmax over one 1M-long row) split each row into `segs` segments of `seg_len` values:
// `softmax_part` leaves each segment's max m and sum of exp(x - m) in `parts` (2 f32 at
// 2 (row segs + segment)), `softmax_split` merges its row's segments in order (rescaled to the
// row max) and writes its segment. Rows are read through the input's strides
// and written to the contiguous output at the row's own positions, so any axis works without a
// copy. Needs lib/activation.wgsl (max_nan: a NaN in a row makes the whole row NaN, as in
// PyTorch).

struct Params {
    rows: u32,
    rank: u32,
    offset: u32,
    len: u32,
    stride: u32,
    out_stride: u32,
    // A window of whole rows (a tensor larger than one binding; 0 and 0 otherwise): rows
    // decode their coordinates from base + o, and the output index starts at out_off.
    base: u32,
    out_off: u32,
    // The split entries: segments per row and values per segment.
    segs: u32,
    seg_len: u32,
    pad0: u32,
    pad1: u32,
    shape: array<vec4<u32>, 2>,
    strides: array<vec4<u32>, 2>,
    out_strides: array<vec4<u32>, 2>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read_write> y: array<T>;
@group(0) @binding(3) var<storage, read_write> parts: array<f32>;

// log_softmax instead of softmax.
override LOG: bool = false;
override WG: u32;

var<workgroup> red: array<f32, WG>;

// Element offsets of row `o` in x and in the output.
fn row_bases(o: u32) -> vec2<u32> {
    var rem = p.base + o;
    var xi = p.offset;
    var yi = p.out_off;
    for (var d = i32(p.rank) - 1; d >= 0; d--) {
        let k = u32(d);
        let n = p.shape[k / 4u][k % 4u];
        let c = rem % n;
        rem = rem / n;
        xi += c * p.strides[k / 4u][k % 4u];
        yi += c * p.out_strides[k / 4u][k % 4u];
    }
    return vec2<u32>(xi, yi);
}

fn finish(v: f32, m: f32, s: f32) -> T {
    if (LOG) {
        return T(v - m - log(s));
    }
    return T(div_f(exp(v - m), s));
}

@compute @workgroup_size(WG)
fn softmax_rows(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let o = (wid.x + wid.y * nwg.x) * WG + lid;
    if (o >= p.rows) {
        return;
    }
    let b = row_bases(o);
    var m = bitcast<f32>(0xff800000u | (p.rank & 0u));
    for (var r = 0u; r < p.len; r++) {
        m = max_nan(m, f32(x[b.x + r * p.stride]));
    }
    // The row's sum in blocks of 64, then the blocks (a two-level sum: one invocation adding
    // a 100k-long row in turn drifts, PyTorch's vectorized sum does not).
    var s = 0.0;
    var blk = 0.0;
    for (var r = 0u; r < p.len; r++) {
        blk += exp(f32(x[b.x + r * p.stride]) - m);
        if (r % 64u == 63u) {
            s += blk;
            blk = 0.0;
        }
    }
    s += blk;
    for (var r = 0u; r < p.len; r++) {
        y[b.y + r * p.out_stride] = finish(f32(x[b.x + r * p.stride]), m, s);
    }
}

// Tree reduction of `red` (max or sum); every invocation of the workgroup calls it.
fn reduce_red(lid: u32, is_max: bool) -> f32 {
    workgroupBarrier();
    for (var w = WG / 2u; w > 0u; w = w / 2u) {
        if (lid < w) {
            if (is_max) {
                red[lid] = max_nan(red[lid], red[lid + w]);
            } else {
                red[lid] = red[lid] + red[lid + w];
            }
        }
        workgroupBarrier();
    }
    let v = red[0];
    workgroupBarrier();
    return v;
}

@compute @workgroup_size(WG)
fn softmax_wg(@builtin(workgroup_id) wid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    // Uniform control flow: every invocation reaches the barriers.
    let o = wid.x + wid.y * nwg.x;
    let live = o < p.rows;
    var b = vec2<u32>(0u, 0u);
    if (live) {
        b = row_bases(o);
    }
    var m = bitcast<f32>(0xff800000u | (p.rank & 0u));
    if (live) {
        // Stops before `r + WG` could wrap for a row just under 2^32.
        for (var r = lid; r < p.len; r += WG) {
            m = max_nan(m, f32(x[b.x + r * p.stride]));
            if (p.len - r <= WG) {
                break;
            }
        }
    }
    red[lid] = m;
    m = reduce_red(lid, true);
    var s = 0.0;
    if (live) {
        // Blocks of 64 terms, then the blocks (as softmax_rows).
        var blk = 0.0;
        var k = 0u;
        for (var r = lid; r < p.len; r += WG) {
            blk += exp(f32(x[b.x + r * p.stride]) - m);
            k++;
            if (k == 64u) {
                s += blk;
                blk = 0.0;
                k = 0u;
            }
            if (p.len - r <= WG) {
                break;
            }
        }
        s += blk;
    }
    red[lid] = s;
    s = reduce_red(lid, false);
    if (live) {
        for (var r = lid; r < p.len; r += WG) {
            y[b.y + r * p.out_stride] = finish(f32(x[b.x + r * p.stride]), m, s);
            if (p.len - r <= WG) {
                break;
            }
        }
    }
}

// -inf by its bits (see lib/attention_common.wgsl's is_neg_inf: NaN-unaware compares).
fn is_neg_inf(v: f32) -> bool {
    return bitcast<u32>(v) == 0xff800000u;
}

// The split entries' (row, segment, first value, end of the segment).
fn segment(wid: vec3<u32>, nwg: vec3<u32>) -> vec4<u32> {
    let g = wid.x + wid.y * nwg.x;
    let sg = g % p.segs;
    let start = sg * p.seg_len;
    return vec4<u32>(g / p.segs, sg, start, min(p.len, start + p.seg_len));
}

@compute @workgroup_size(WG)
fn softmax_part(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let sgm = segment(wid, nwg);
    let live = sgm.x < p.rows;
    var b = vec2<u32>(0u, 0u);
    if (live) {
        b = row_bases(sgm.x);
    }
    var m = bitcast<f32>(0xff800000u | (p.rank & 0u));
    if (live) {
        for (var r = sgm.z + lid; r < sgm.w; r += WG) {
            m = max_nan(m, f32(x[b.x + r * p.stride]));
            if (sgm.w - r <= WG) {
                break;
            }
        }
    }
    red[lid] = m;
    m = reduce_red(lid, true);
    var s = 0.0;
    // A segment of -inf adds nothing (exp(-inf - -inf) would be NaN).
    if (live && !is_neg_inf(m)) {
        var blk = 0.0;
        var k = 0u;
        for (var r = sgm.z + lid; r < sgm.w; r += WG) {
            blk += exp(f32(x[b.x + r * p.stride]) - m);
            k++;
            if (k == 64u) {
                s += blk;
                blk = 0.0;
                k = 0u;
            }
            if (sgm.w - r <= WG) {
                break;
            }
        }
        s += blk;
    }
    red[lid] = s;
    s = reduce_red(lid, false);
    if (live && lid == 0u) {
        let at = 2u * (sgm.x * p.segs + sgm.y);
        parts[at] = m;
        parts[at + 1u] = s;
    }
}

@compute @workgroup_size(WG)
fn softmax_split(@builtin(workgroup_id) wid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let sgm = segment(wid, nwg);
    if (sgm.x >= p.rows) {
        return;
    }
    let first = 2u * sgm.x * p.segs;
    var m = bitcast<f32>(0xff800000u | (p.rank & 0u));
    for (var t = 0u; t < p.segs; t++) {
        m = max_nan(m, parts[first + 2u * t]);
    }
    var s = 0.0;
    for (var t = 0u; t < p.segs; t++) {
        let mt = parts[first + 2u * t];
        if (!is_neg_inf(mt)) {
            s += parts[first + 2u * t + 1u] * exp(mt - m);
        }
    }
    let b = row_bases(sgm.x);
    for (var r = sgm.z + lid; r < sgm.w; r += WG) {
        y[b.y + r * p.out_stride] = finish(f32(x[b.x + r * p.stride]), m, s);
        if (sgm.w - r <= WG) {
            break;
        }
    }
}
