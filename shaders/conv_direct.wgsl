// Direct convolution for groups with few rows (depthwise, small channel multipliers): the
// implicit GEMM of lib/conv_common.wgsl, but each invocation computes DR rows x 8 neighbouring
// columns of one output line (j0, j1 fixed, j2 .. j2 + 7). On CPU adapters every storage load
// is a per-lane loop, so loads decide the speed: the 8 gathered values serve all DR rows, and
// when the k step moves the gather by exactly one column (forward and weight gradient with
// stride == dilation, e.g. the 3x3 stride-1 depthwise) the window slides and only one new
// value is loaded per tap. Invocations are numbered (group, row block, j0, j1, column block)
// over grid x and y, so no lane computes another line's columns and small groups share
// workgroups; grid z is the split-k slice.
// Needs lib/activation.wgsl and lib/conv_common.wgsl.

override WG: u32;
// Rows per invocation: 1, 2, 4 or 8.
override DR: u32;

struct Line {
    ok: bool,
    g: u32,
    // Split-k slot: split * groups + g.
    z: u32,
    row: u32,
    c: Col,
    // Valid columns in this block (1..8).
    nv: u32,
}

fn line_of(i: u32, split: u32) -> Line {
    let nb = (p.c_e2 + 7u) / 8u;
    let jb = i % nb;
    let t = i / nb;
    let j1 = t % p.c_e1;
    let t2 = t / p.c_e1;
    let n0 = p.ncols / (p.c_e1 * p.c_e2);
    let j0 = t2 % n0;
    let t3 = t2 / n0;
    let rb = (p.m + DR - 1u) / DR;
    let g = min(t3 / rb, p.groups - 1u);
    let row = (t3 % rb) * DR;
    return Line(t3 < rb * p.groups, g, split * p.groups + g, row,
                col_at(g, vec3<u32>(j0, j1, jb * 8u)), min(8u, p.c_e2 - jb * 8u));
}

// B at column `dj` of the line (as gather() for the column j2 + dj).
fn tap(c: Col, kp: KPart, dj: u32) -> f32 {
    var cj = c;
    cj.w += i32(dj) * p.b_c2;
    return gather(cj, kp);
}

// acc[2r], acc[2r + 1]: row ln.row + r, columns 0-3 and 4-7.
fn lines(g: u32, ln: Line, kr: vec2<u32>) -> array<vec4<f32>, 16> {
    let ra0 = a_row(g, ln.row + 0u);
    let ra1 = a_row(g, ln.row + 1u);
    let ra2 = a_row(g, ln.row + 2u);
    let ra3 = a_row(g, ln.row + 3u);
    let ra4 = a_row(g, ln.row + 4u);
    let ra5 = a_row(g, ln.row + 5u);
    let ra6 = a_row(g, ln.row + 6u);
    let ra7 = a_row(g, ln.row + 7u);
    let slide = !TRANSPOSED && p.b_k2 == p.b_c2;
    var x: array<f32, 8>;
    var acc: array<vec4<f32>, 16>;
    var it = k_start(kr.x);
    // K in blocks of KBLOCK, each summed into fresh accumulators, then added to the total
    // (a two-level sum): fmas in turn drift on constant data (3.9e-5 over 4096), where
    // PyTorch's CPU kernels block K. Indexed with constants only, as `acc`.
    var blk: array<vec4<f32>, 16>;
    for (var k0 = kr.x; k0 < kr.y; k0 += KBLOCK) {
        let k1 = min(k0 + KBLOCK, kr.y);
        // Zeroed by assignment: a `var` declared in a loop body is zeroed on every pass by
        // WGSL's rules, but the browser's compiler (Chrome's, through SwiftShader) did not.
        blk = array<vec4<f32>, 16>();
        for (var k = k0; k < k1; k++) {
            let kp = k_part(it);
            if (slide && it.k2 != 0u && k != kr.x) {
                x[0] = x[1];
                x[1] = x[2];
                x[2] = x[3];
                x[3] = x[4];
                x[4] = x[5];
                x[5] = x[6];
                x[6] = x[7];
                x[7] = tap(ln.c, kp, 7u);
            } else {
                x[0] = tap(ln.c, kp, 0u);
                x[1] = tap(ln.c, kp, 1u);
                x[2] = tap(ln.c, kp, 2u);
                x[3] = tap(ln.c, kp, 3u);
                x[4] = tap(ln.c, kp, 4u);
                x[5] = tap(ln.c, kp, 5u);
                x[6] = tap(ln.c, kp, 6u);
                x[7] = tap(ln.c, kp, 7u);
            }
            let ak = a_k(it);
            let lo = vec4<f32>(x[0], x[1], x[2], x[3]);
            let hi = vec4<f32>(x[4], x[5], x[6], x[7]);
            let w0 = vec4<f32>(f32(a[ra0 + ak]));
            blk[0] = fma(w0, lo, blk[0]);
            blk[1] = fma(w0, hi, blk[1]);
            if (DR > 1u) {
                let w1 = vec4<f32>(f32(a[ra1 + ak]));
                blk[2] = fma(w1, lo, blk[2]);
                blk[3] = fma(w1, hi, blk[3]);
            }
            if (DR > 2u) {
                let w2 = vec4<f32>(f32(a[ra2 + ak]));
                blk[4] = fma(w2, lo, blk[4]);
                blk[5] = fma(w2, hi, blk[5]);
            }
            if (DR > 3u) {
                let w3 = vec4<f32>(f32(a[ra3 + ak]));
                blk[6] = fma(w3, lo, blk[6]);
                blk[7] = fma(w3, hi, blk[7]);
            }
            if (DR > 4u) {
                let w4 = vec4<f32>(f32(a[ra4 + ak]));
                blk[8] = fma(w4, lo, blk[8]);
                blk[9] = fma(w4, hi, blk[9]);
            }
            if (DR > 5u) {
                let w5 = vec4<f32>(f32(a[ra5 + ak]));
                blk[10] = fma(w5, lo, blk[10]);
                blk[11] = fma(w5, hi, blk[11]);
            }
            if (DR > 6u) {
                let w6 = vec4<f32>(f32(a[ra6 + ak]));
                blk[12] = fma(w6, lo, blk[12]);
                blk[13] = fma(w6, hi, blk[13]);
            }
            if (DR > 7u) {
                let w7 = vec4<f32>(f32(a[ra7 + ak]));
                blk[14] = fma(w7, lo, blk[14]);
                blk[15] = fma(w7, hi, blk[15]);
            }
            it = k_next(it);
        }
        acc[0] += blk[0];
        acc[1] += blk[1];
        acc[2] += blk[2];
        acc[3] += blk[3];
        acc[4] += blk[4];
        acc[5] += blk[5];
        acc[6] += blk[6];
        acc[7] += blk[7];
        acc[8] += blk[8];
        acc[9] += blk[9];
        acc[10] += blk[10];
        acc[11] += blk[11];
        acc[12] += blk[12];
        acc[13] += blk[13];
        acc[14] += blk[14];
        acc[15] += blk[15];
        if (kr.y - k0 <= KBLOCK) {
            break;
        }
    }
    return acc;
}

// Row `row`, the first `nv` of the 8 columns starting at `c`.
fn store_row8(g: u32, row: u32, c: Col, nv: u32, lo: vec4<f32>, hi: vec4<f32>) {
    let o = c.out + row * p.o_rs;
    var b = 0.0;
    if (BIAS == 1u) {
        b = f32(bias[p.bias_off + g * p.m + row]);
    }
    let v = array<f32, 8>(lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w);
    for (var j = 0u; j < 8u; j++) {
        if (j < nv) {
            out[o + j * p.o_s2] = T(activate(v[j] + b, ACT));
        }
    }
}

fn store_line(g: u32, ln: Line, r: u32, lo: vec4<f32>, hi: vec4<f32>) {
    if (ln.row + r < p.m) {
        store_row8(g, ln.row + r, ln.c, ln.nv, lo, hi);
    }
}


fn store_line_ws(z: u32, ln: Line, r: u32, lo: vec4<f32>, hi: vec4<f32>) {
    // Column index of the line's first column: (j0 * c_e1 + j1) * c_e2 + j2.
    let col0 = (ln.c.j.x * p.c_e1 + ln.c.j.y) * p.c_e2 + ln.c.j.z;
    let v = array<f32, 8>(lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w);
    for (var j = 0u; j < 8u; j++) {
        if (j < ln.nv) {
            store_ws(z, ln.row + r, col0 + j, v[j]);
        }
    }
}

@compute @workgroup_size(WG)
fn conv_direct(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let ln = line_of((wid.x + wid.y * nwg.x) * WG + lid, wid.z);
    if (!ln.ok) {
        return;
    }
    let g = ln.g;
    let acc = lines(g, ln, k_range(ln.z));
    store_line(g, ln, 0u, acc[0], acc[1]);
    if (DR > 1u) {
        store_line(g, ln, 1u, acc[2], acc[3]);
    }
    if (DR > 2u) {
        store_line(g, ln, 2u, acc[4], acc[5]);
    }
    if (DR > 3u) {
        store_line(g, ln, 3u, acc[6], acc[7]);
    }
    if (DR > 4u) {
        store_line(g, ln, 4u, acc[8], acc[9]);
    }
    if (DR > 5u) {
        store_line(g, ln, 5u, acc[10], acc[11]);
    }
    if (DR > 6u) {
        store_line(g, ln, 6u, acc[12], acc[13]);
    }
    if (DR > 7u) {
        store_line(g, ln, 7u, acc[14], acc[15]);
    }
}

@compute @workgroup_size(WG)
fn conv_direct_partial(@builtin(workgroup_id) wid: vec3<u32>,
                       @builtin(num_workgroups) nwg: vec3<u32>,
                       @builtin(local_invocation_index) lid: u32) {
    let ln = line_of((wid.x + wid.y * nwg.x) * WG + lid, wid.z + p.z0);
    if (!ln.ok) {
        return;
    }
    let g = ln.g;
    let acc = lines(g, ln, k_range(ln.z));
    store_line_ws(ln.z, ln, 0u, acc[0], acc[1]);
    if (DR > 1u) {
        store_line_ws(ln.z, ln, 1u, acc[2], acc[3]);
    }
    if (DR > 2u) {
        store_line_ws(ln.z, ln, 2u, acc[4], acc[5]);
    }
    if (DR > 3u) {
        store_line_ws(ln.z, ln, 3u, acc[6], acc[7]);
    }
    if (DR > 4u) {
        store_line_ws(ln.z, ln, 4u, acc[8], acc[9]);
    }
    if (DR > 5u) {
        store_line_ws(ln.z, ln, 5u, acc[10], acc[11]);
    }
    if (DR > 6u) {
        store_line_ws(ln.z, ln, 6u, acc[12], acc[13]);
    }
    if (DR > 7u) {
        store_line_ws(ln.z, ln, 7u, acc[14], acc[15]);
    }
}

// 4 lines x 8 columns of a single-row group (depthwise with multiplier 1), for gathers whose
// k1 and k2 steps move the source by exactly one line and one column (stride == dilation both
// ways): line q at kernel row kh reads the source row that line q + 1 read at kh - 1, so each
// new kernel row loads one new 8-wide window instead of four (S keeps the windows at the
// lines' first tap), and each further tap one value per line. Lines past
// the last one (ragged heights) are computed and not stored. No split-k.
struct Lines4 {
    ok: bool,
    g: u32,
    c: array<Col, 4>,
    nl: u32,
    nv: u32,
}

fn lines4_of(i: u32) -> Lines4 {
    let nb = (p.c_e2 + 7u) / 8u;
    let jb = i % nb;
    let t = i / nb;
    let lb = (p.c_e1 + 3u) / 4u;
    let j1 = (t % lb) * 4u;
    let t2 = t / lb;
    let n0 = p.ncols / (p.c_e1 * p.c_e2);
    let j0 = t2 % n0;
    let g = min(t2 / n0, p.groups - 1u);
    // Lines past the last one are not clamped: line q's next kernel row is line q + 1's
    // current window, so it must be the true neighbour (zeros past the source come from the
    // gather's bounds test); their stores are skipped.
    var c: array<Col, 4>;
    c[0] = col_at(g, vec3<u32>(j0, j1 + 0u, jb * 8u));
    c[1] = col_at(g, vec3<u32>(j0, j1 + 1u, jb * 8u));
    c[2] = col_at(g, vec3<u32>(j0, j1 + 2u, jb * 8u));
    c[3] = col_at(g, vec3<u32>(j0, j1 + 3u, jb * 8u));
    return Lines4(t2 / n0 < p.groups, g, c, min(4u, p.c_e1 - j1), min(8u, p.c_e2 - jb * 8u));
}

@compute @workgroup_size(WG)
fn conv_direct_l4(@builtin(workgroup_id) wid: vec3<u32>,
                  @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let ln = lines4_of((wid.x + wid.y * nwg.x) * WG + lid);
    if (!ln.ok) {
        return;
    }
    let g = ln.g;
    let ra = a_row(g, 0u);
    var s: array<f32, 32>;
    var x: array<f32, 32>;
    var acc: array<vec4<f32>, 8>;
    var it = k_start(0u);
    let kr = vec2<u32>(0u, p.k);
    // K in blocks of KBLOCK, each summed into fresh accumulators, then added to the total
    // (a two-level sum): fmas in turn drift on constant data (3.9e-5 over 4096), where
    // PyTorch's CPU kernels block K. Indexed with constants only, as `acc`.
    var blk: array<vec4<f32>, 8>;
    for (var k0 = kr.x; k0 < kr.y; k0 += KBLOCK) {
        let k1 = min(k0 + KBLOCK, kr.y);
        blk = array<vec4<f32>, 8>();
        for (var k = k0; k < k1; k++) {
            let kp = k_part(it);
            if (it.k2 == 0u) {
                // A new kernel row: the lines move up one and line 3 loads its window. At a
                // channel's first row, line 3 at kernel rows -3, -2, -1, 0 reads exactly the rows
                // of lines 0, 1, 2, 3, so four such steps fill all four (one load site: compiles
                // fast).
                let n = select(1u, 4u, it.k1 == 0u);
                for (var i = 0u; i < n; i++) {
                    s[0] = s[8];
                    s[1] = s[9];
                    s[2] = s[10];
                    s[3] = s[11];
                    s[4] = s[12];
                    s[5] = s[13];
                    s[6] = s[14];
                    s[7] = s[15];
                    s[8] = s[16];
                    s[9] = s[17];
                    s[10] = s[18];
                    s[11] = s[19];
                    s[12] = s[20];
                    s[13] = s[21];
                    s[14] = s[22];
                    s[15] = s[23];
                    s[16] = s[24];
                    s[17] = s[25];
                    s[18] = s[26];
                    s[19] = s[27];
                    s[20] = s[28];
                    s[21] = s[29];
                    s[22] = s[30];
                    s[23] = s[31];
                    var kr = kp;
                    kr.h -= i32(n - 1u - i) * p.b_k1;
                    s[24] = tap(ln.c[3], kr, 0u);
                    s[25] = tap(ln.c[3], kr, 1u);
                    s[26] = tap(ln.c[3], kr, 2u);
                    s[27] = tap(ln.c[3], kr, 3u);
                    s[28] = tap(ln.c[3], kr, 4u);
                    s[29] = tap(ln.c[3], kr, 5u);
                    s[30] = tap(ln.c[3], kr, 6u);
                    s[31] = tap(ln.c[3], kr, 7u);
                }
                x = s;
            } else {
                x[0] = x[1];
                x[1] = x[2];
                x[2] = x[3];
                x[3] = x[4];
                x[4] = x[5];
                x[5] = x[6];
                x[6] = x[7];
                x[7] = tap(ln.c[0], kp, 7u);
                x[8] = x[9];
                x[9] = x[10];
                x[10] = x[11];
                x[11] = x[12];
                x[12] = x[13];
                x[13] = x[14];
                x[14] = x[15];
                x[15] = tap(ln.c[1], kp, 7u);
                x[16] = x[17];
                x[17] = x[18];
                x[18] = x[19];
                x[19] = x[20];
                x[20] = x[21];
                x[21] = x[22];
                x[22] = x[23];
                x[23] = tap(ln.c[2], kp, 7u);
                x[24] = x[25];
                x[25] = x[26];
                x[26] = x[27];
                x[27] = x[28];
                x[28] = x[29];
                x[29] = x[30];
                x[30] = x[31];
                x[31] = tap(ln.c[3], kp, 7u);
            }
            let wv = vec4<f32>(f32(a[ra + a_k(it)]));
            blk[0] = fma(wv, vec4<f32>(x[0], x[1], x[2], x[3]), blk[0]);
            blk[1] = fma(wv, vec4<f32>(x[4], x[5], x[6], x[7]), blk[1]);
            blk[2] = fma(wv, vec4<f32>(x[8], x[9], x[10], x[11]), blk[2]);
            blk[3] = fma(wv, vec4<f32>(x[12], x[13], x[14], x[15]), blk[3]);
            blk[4] = fma(wv, vec4<f32>(x[16], x[17], x[18], x[19]), blk[4]);
            blk[5] = fma(wv, vec4<f32>(x[20], x[21], x[22], x[23]), blk[5]);
            blk[6] = fma(wv, vec4<f32>(x[24], x[25], x[26], x[27]), blk[6]);
            blk[7] = fma(wv, vec4<f32>(x[28], x[29], x[30], x[31]), blk[7]);
            it = k_next(it);
        }
        acc[0] += blk[0];
        acc[1] += blk[1];
        acc[2] += blk[2];
        acc[3] += blk[3];
        acc[4] += blk[4];
        acc[5] += blk[5];
        acc[6] += blk[6];
        acc[7] += blk[7];
        if (kr.y - k0 <= KBLOCK) {
            break;
        }
    }
    {
        store_row8(g, 0u, ln.c[0], ln.nv, acc[0], acc[1]);
    }
    if (ln.nl > 1u) {
        store_row8(g, 0u, ln.c[1], ln.nv, acc[2], acc[3]);
    }
    if (ln.nl > 2u) {
        store_row8(g, 0u, ln.c[2], ln.nv, acc[4], acc[5]);
    }
    if (ln.nl > 3u) {
        store_row8(g, 0u, ln.c[3], ln.nv, acc[6], acc[7]);
    }
}
