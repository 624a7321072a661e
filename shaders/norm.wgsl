// Layer norm, group norm and RMS norm (src/ops/norm.rs): each normalizes contiguous rows of a
// packed [rows, len] tensor (a row is one normalization group: the trailing normalized_shape of
// layer / RMS norm, the C / G channels times the plane of one group of group norm), then applies
// a per-channel affine. One workgroup per row; statistics in f32, two passes over the row
// (mean, of the values less the row's first, then the mean of squared deviations; RMS norm
// takes mean = 0), each a fixed-order workgroup tree reduction, so results are deterministic.
// Needs no lib.
//
// The weight index of element i of row r is ((r % groups) * len + i) / inner: layer / RMS norm
// have groups = inner = 1 (the weight spans the row); group norm has groups = G and inner = the
// plane size (channel = g * C / G + i / inner).
//
// Entry points: norm_fwd (y, and the saved mean / rstd per row), norm_dx (the input gradient of
// a row from the saved statistics), norm_dw (one workgroup per weight index: the weight and
// bias gradients as a column reduction over rows in a fixed order; no atomics). Short rows,
// which would leave most of a workgroup idle, run norm_fwd_rows / norm_dx_rows instead: one
// invocation per row, the same two passes as a sequential loop. Weights of one value per row
// (inner = 1: layer / RMS norm) take norm_dw_cols: one invocation per weight looping over the
// rows in order, neighbouring invocations reading neighbouring values.
//
// Few long rows (group norm of one image: 32 rows of 32k values) would leave most of a GPU idle
// with a workgroup per row: the split entries give each row `segs` workgroups. norm_fwd_part
// leaves each segment's (mean, sum of squared deviations), two passes over the segment;
// norm_fwd_split merges a row's segments in order (Chan et al.'s pairwise update), writes the
// statistics and normalizes its segment. norm_dx_part / norm_dx_split do the same with the
// sums of the input gradient. Fixed order throughout: deterministic.

struct Params {
    rows: u32,
    len: u32,
    groups: u32,
    inner: u32,
    eps: f32,
    // bit 0: weight given, bit 1: bias given, bit 2: RMS norm (no mean).
    flags: u32,
    // norm_dw: number of weights, and rows per group (rows / groups).
    nweights: u32,
    per_group: u32,
    // The split entries: segments per row and values per segment (the last may hold fewer).
    segs: u32,
    seg_len: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read> w: array<T>;
@group(0) @binding(3) var<storage, read> b: array<T>;
@group(0) @binding(4) var<storage, read> dy: array<T>;
// y (norm_fwd), dx (norm_dx) or the weight gradient (norm_dw).
@group(0) @binding(5) var<storage, read_write> out: array<T>;
// mean [rows] then rstd [rows], f32.
@group(0) @binding(6) var<storage, read_write> stats: array<f32>;
// The bias gradient (norm_dw).
@group(0) @binding(7) var<storage, read_write> out2: array<T>;
// The split entries' partials, 2 f32 per (row, segment) at 2 (r segs + s).
@group(0) @binding(8) var<storage, read_write> parts: array<f32>;

override WG: u32;

var<workgroup> red: array<vec2<f32>, WG>;

// Sum over the workgroup of each invocation's `v`; every invocation calls it.
fn reduce2(lid: u32, v: vec2<f32>) -> vec2<f32> {
    red[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (lid < s) {
            red[lid] = red[lid] + red[lid + s];
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

// The weight / bias index of element i of row r (no integer division for layer / RMS norm).
fn channel(r: u32, i: u32) -> u32 {
    if (p.groups == 1u && p.inner == 1u) {
        return i;
    }
    return ((r % p.groups) * p.len + i) / p.inner;
}

fn weight_of(r: u32, i: u32) -> f32 {
    if ((p.flags & 1u) != 0u) {
        return f32(w[channel(r, i)]);
    }
    return 1.0;
}

// Element i of the row at base, normalized.
fn xhat(base: u32, i: u32, mean: f32, rstd: f32) -> f32 {
    return (f32(x[base + i]) - mean) * rstd;
}

// (dy * weight, xhat) of element i of row r (at base): the terms of the input gradient.
fn grad_terms(base: u32, r: u32, i: u32, mean: f32, rstd: f32) -> vec2<f32> {
    return vec2<f32>(f32(dy[base + i]) * weight_of(r, i), xhat(base, i, mean, rstd));
}

// dx = rstd (g - mean(g) - xhat mean(g xhat)) from the terms t = (g, xhat) and the row means
// mg (0 for RMS norm) and mgx.
fn dx_of(t: vec2<f32>, rstd: f32, mg: f32, mgx: f32) -> f32 {
    return rstd * (t.x - mg - t.y * mgx);
}

fn bias_of(r: u32, i: u32) -> f32 {
    if ((p.flags & 2u) != 0u) {
        return f32(b[channel(r, i)]);
    }
    return 0.0;
}

fn is_rms() -> bool {
    return (p.flags & 4u) != 0u;
}

// The value the mean pass subtracts before summing (the first of the `len` values at `at`; 0
// for RMS norm, dead rows and empty ones): the sum of x - pivot is exactly 0 for a constant row,
// so its mean is the value itself and it normalizes to the bias, as PyTorch's Welford means do
// (a plain f32 sum is off by a few ulps there, which rstd ~ 1 / sqrt(eps) magnifies), and a
// row near the f32 maximum sums no overflow.
// Every lane loop below adds its terms into a block of at most BLOCK, then the block into its
// total (a two-level sum): a lane adding thousands of values in turn drifts on constant data,
// 3.9e-5 over 4096 (a layer norm's bias gradient over 4096 rows of the constant dy of a
// mean), where PyTorch's CPU kernels reduce in chunks. One add per BLOCK terms; the order is
// fixed, so results stay deterministic.
const BLOCK: u32 = 64u;

fn row_pivot(live: bool, at: u32, len: u32) -> f32 {
    if (!live || len == 0u || is_rms()) {
        return 0.0;
    }
    return f32(x[at]);
}

@compute @workgroup_size(WG)
fn norm_fwd(@builtin(workgroup_id) wid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    // Uniform control flow: every invocation reaches the barriers.
    let r = wid.x + wid.y * nwg.x;
    let live = r < p.rows;
    let base = r * p.len;
    let n = f32(p.len);
    var s = 0.0;
    let pivot = row_pivot(live, base, p.len);
    if (live && !is_rms()) {
        var blk = 0.0;
        var k = 0u;
        for (var i = lid; i < p.len; i += WG) {
            blk += f32(x[base + i]) - pivot;
            k++;
            if (k == BLOCK) {
                s += blk;
                blk = 0.0;
                k = 0u;
            }
        }
        s += blk;
    }
    let mean = pivot + reduce2(lid, vec2<f32>(s, 0.0)).x / n;
    var q = 0.0;
    if (live) {
        var blk = 0.0;
        var k = 0u;
        for (var i = lid; i < p.len; i += WG) {
            let d = f32(x[base + i]) - mean;
            blk += d * d;
            k++;
            if (k == BLOCK) {
                q += blk;
                blk = 0.0;
                k = 0u;
            }
        }
        q += blk;
    }
    let rstd = rsqrt_f(reduce2(lid, vec2<f32>(q, 0.0)).x / n + p.eps);
    if (!live) {
        return;
    }
    if (lid == 0u) {
        stats[r] = mean;
        stats[p.rows + r] = rstd;
    }
    for (var i = lid; i < p.len; i += WG) {
        out[base + i] = T(xhat(base, i, mean, rstd) * weight_of(r, i) + bias_of(r, i));
    }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * weight (no mean(g) term for
// RMS norm, whose xhat = x * rstd).
@compute @workgroup_size(WG)
fn norm_dx(@builtin(workgroup_id) wid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let r = wid.x + wid.y * nwg.x;
    let live = r < p.rows;
    let base = r * p.len;
    let n = f32(p.len);
    var mean = 0.0;
    var rstd = 0.0;
    var acc = vec2<f32>(0.0);
    if (live) {
        mean = stats[r];
        rstd = stats[p.rows + r];
        var blk = vec2<f32>(0.0);
        var k = 0u;
        for (var i = lid; i < p.len; i += WG) {
            let t = grad_terms(base, r, i, mean, rstd);
            blk += vec2<f32>(t.x, t.x * t.y);
            k++;
            if (k == BLOCK) {
                acc += blk;
                blk = vec2<f32>(0.0);
                k = 0u;
            }
        }
        acc += blk;
    }
    let m = reduce2(lid, acc) / n;
    if (!live) {
        return;
    }
    let mg = select(m.x, 0.0, is_rms());
    for (var i = lid; i < p.len; i += WG) {
        out[base + i] = T(dx_of(grad_terms(base, r, i, mean, rstd), rstd, mg, m.y));
    }
}

// Weight j of group g = j / (len / inner), channel q = j % (len / inner): the values
// (row n * groups + g, element q * inner + s) for n < per_group, s < inner, summed in that order
// by lane-strided partials and a tree.
@compute @workgroup_size(WG)
fn norm_dw(@builtin(workgroup_id) wid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let j = wid.x + wid.y * nwg.x;
    let live = j < p.nweights;
    var acc = vec2<f32>(0.0);
    if (live) {
        let cg = p.len / p.inner;
        let g = j / cg;
        let q = j % cg;
        let total = p.per_group * p.inner;
        var blk = vec2<f32>(0.0);
        var k = 0u;
        for (var t = lid; t < total; t += WG) {
            let r = (t / p.inner) * p.groups + g;
            let i = r * p.len + q * p.inner + t % p.inner;
            let d = f32(dy[i]);
            let xh = (f32(x[i]) - stats[r]) * stats[p.rows + r];
            blk += vec2<f32>(d * xh, d);
            k++;
            if (k == BLOCK) {
                acc += blk;
                blk = vec2<f32>(0.0);
                k = 0u;
            }
        }
        acc += blk;
    }
    let s = reduce2(lid, acc);
    if (live && lid == 0u) {
        out[j] = T(s.x);
        out2[j] = T(s.y);
    }
}

// norm_fwd with one invocation per row (short rows).
@compute @workgroup_size(WG)
fn norm_fwd_rows(@builtin(workgroup_id) wid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let r = (wid.x + wid.y * nwg.x) * WG + lid;
    if (r >= p.rows) {
        return;
    }
    let base = r * p.len;
    let n = f32(p.len);
    var s = 0.0;
    let pivot = row_pivot(true, base, p.len);
    if (!is_rms()) {
        for (var i = 0u; i < p.len; i++) {
            s += f32(x[base + i]) - pivot;
        }
    }
    let mean = pivot + s / n;
    var q = 0.0;
    for (var i = 0u; i < p.len; i++) {
        let d = f32(x[base + i]) - mean;
        q += d * d;
    }
    let rstd = rsqrt_f(q / n + p.eps);
    stats[r] = mean;
    stats[p.rows + r] = rstd;
    for (var i = 0u; i < p.len; i++) {
        out[base + i] = T(xhat(base, i, mean, rstd) * weight_of(r, i) + bias_of(r, i));
    }
}

// norm_dx with one invocation per row (short rows).
@compute @workgroup_size(WG)
fn norm_dx_rows(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let r = (wid.x + wid.y * nwg.x) * WG + lid;
    if (r >= p.rows) {
        return;
    }
    let base = r * p.len;
    let n = f32(p.len);
    let mean = stats[r];
    let rstd = stats[p.rows + r];
    var acc = vec2<f32>(0.0);
    for (var i = 0u; i < p.len; i++) {
        let t = grad_terms(base, r, i, mean, rstd);
        acc += vec2<f32>(t.x, t.x * t.y);
    }
    let m = acc / n;
    let mg = select(m.x, 0.0, is_rms());
    for (var i = 0u; i < p.len; i++) {
        out[base + i] = T(dx_of(grad_terms(base, r, i, mean, rstd), rstd, mg, m.y));
    }
}

// norm_dw for inner = 1: one invocation per weight j (group j / len, element j % len of each of
// its rows), the rows summed in order.
@compute @workgroup_size(WG)
fn norm_dw_cols(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let j = (wid.x + wid.y * nwg.x) * WG + lid;
    if (j >= p.nweights) {
        return;
    }
    let g = j / p.len;
    let q = j % p.len;
    var acc = vec2<f32>(0.0);
    var blk = vec2<f32>(0.0);
    var k = 0u;
    for (var n = 0u; n < p.per_group; n++) {
        let r = n * p.groups + g;
        let i = r * p.len + q;
        let d = f32(dy[i]);
        let xh = (f32(x[i]) - stats[r]) * stats[p.rows + r];
        blk += vec2<f32>(d * xh, d);
        k++;
        if (k == BLOCK) {
            acc += blk;
            blk = vec2<f32>(0.0);
            k = 0u;
        }
    }
    acc += blk;
    out[j] = T(acc.x);
    out2[j] = T(acc.y);
}

// The segment of the split entries' workgroup: (row, segment, first value, end).
fn segment(wid: vec3<u32>, nwg: vec3<u32>) -> vec4<u32> {
    let g = wid.x + wid.y * nwg.x;
    let sg = g % p.segs;
    let start = sg * p.seg_len;
    return vec4<u32>(g / p.segs, sg, start, min(p.len, start + p.seg_len));
}

@compute @workgroup_size(WG)
fn norm_fwd_part(@builtin(workgroup_id) wid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let sgm = segment(wid, nwg);
    let live = sgm.x < p.rows;
    let base = sgm.x * p.len;
    var s = 0.0;
    // The row's pivot for every segment: each segment's mean is kept relative to it, so the
    // means norm_fwd_split merges are small where the row's values sit far from 0, and the
    // row's mean is rounded to f32 once, after the merge, as norm_fwd's is. Absolute segment
    // means would each be rounded at the scale of the values (3000's ulp is 2.4e-4), and the
    // merge would add those errors up.
    let pivot = row_pivot(live, base, p.len);
    if (live && !is_rms()) {
        var blk = 0.0;
        var k = 0u;
        for (var i = sgm.z + lid; i < sgm.w; i += WG) {
            blk += f32(x[base + i]) - pivot;
            k++;
            if (k == BLOCK) {
                s += blk;
                blk = 0.0;
                k = 0u;
            }
        }
        s += blk;
    }
    let rel = reduce2(lid, vec2<f32>(s, 0.0)).x / f32(sgm.w - sgm.z);
    var q = 0.0;
    if (live) {
        var blk = 0.0;
        var k = 0u;
        for (var i = sgm.z + lid; i < sgm.w; i += WG) {
            let d = (f32(x[base + i]) - pivot) - rel;
            blk += d * d;
            k++;
            if (k == BLOCK) {
                q += blk;
                blk = 0.0;
                k = 0u;
            }
        }
        q += blk;
    }
    let m2 = reduce2(lid, vec2<f32>(q, 0.0)).x;
    if (live && lid == 0u) {
        let at = 2u * (sgm.x * p.segs + sgm.y);
        parts[at] = rel;
        parts[at + 1u] = m2;
    }
}

@compute @workgroup_size(WG)
fn norm_fwd_split(@builtin(workgroup_id) wid: vec3<u32>,
                  @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let sgm = segment(wid, nwg);
    let r = sgm.x;
    if (r >= p.rows) {
        return;
    }
    // Chan's update, segment by segment (RMS norm: means 0, so the sums of squares add). The
    // first segment starts the triple rather than merging into an empty one: its weight would
    // be 0, and a mean past 1.8e19 squares to inf, 0 * inf = NaN, whatever order a driver's
    // compiler gives the product (NVIDIA's gave NaN for a constant row of -3.3e38).
    var cnt = f32(min(p.len, p.seg_len));
    // Relative to the row's pivot (norm_fwd_part), added back once after the merge.
    var mean = parts[2u * r * p.segs];
    var m2 = parts[2u * r * p.segs + 1u];
    for (var t = 1u; t < p.segs; t++) {
        let at = 2u * (r * p.segs + t);
        let nb = f32(min(p.len, (t + 1u) * p.seg_len) - t * p.seg_len);
        let delta = parts[at] - mean;
        let tot = cnt + nb;
        mean += delta * (nb / tot);
        m2 += parts[at + 1u] + delta * (delta * (cnt * nb / tot));
        cnt = tot;
    }
    mean += row_pivot(true, r * p.len, p.len);
    let rstd = rsqrt_f(m2 / f32(p.len) + p.eps);
    if (sgm.y == 0u && lid == 0u) {
        stats[r] = mean;
        stats[p.rows + r] = rstd;
    }
    let base = r * p.len;
    for (var i = sgm.z + lid; i < sgm.w; i += WG) {
        out[base + i] = T(xhat(base, i, mean, rstd) * weight_of(r, i) + bias_of(r, i));
    }
}

@compute @workgroup_size(WG)
fn norm_dx_part(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let sgm = segment(wid, nwg);
    let r = sgm.x;
    let live = r < p.rows;
    let base = r * p.len;
    var acc = vec2<f32>(0.0);
    if (live) {
        let mean = stats[r];
        let rstd = stats[p.rows + r];
        var blk = vec2<f32>(0.0);
        var k = 0u;
        for (var i = sgm.z + lid; i < sgm.w; i += WG) {
            let t = grad_terms(base, r, i, mean, rstd);
            blk += vec2<f32>(t.x, t.x * t.y);
            k++;
            if (k == BLOCK) {
                acc += blk;
                blk = vec2<f32>(0.0);
                k = 0u;
            }
        }
        acc += blk;
    }
    let sums = reduce2(lid, acc);
    if (live && lid == 0u) {
        let at = 2u * (r * p.segs + sgm.y);
        parts[at] = sums.x;
        parts[at + 1u] = sums.y;
    }
}

@compute @workgroup_size(WG)
fn norm_dx_split(@builtin(workgroup_id) wid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let sgm = segment(wid, nwg);
    let r = sgm.x;
    if (r >= p.rows) {
        return;
    }
    var sums = vec2<f32>(0.0);
    for (var t = 0u; t < p.segs; t++) {
        let at = 2u * (r * p.segs + t);
        sums += vec2<f32>(parts[at], parts[at + 1u]);
    }
    let m = sums / f32(p.len);
    let mean = stats[r];
    let rstd = stats[p.rows + r];
    let mg = select(m.x, 0.0, is_rms());
    let base = r * p.len;
    for (var i = sgm.z + lid; i < sgm.w; i += WG) {
        out[base + i] = T(dx_of(grad_terms(base, r, i, mean, rstd), rstd, mg, m.y));
    }
}
