// Convolution on the GPUs' large-tile core (lib/wg_tile.wgsl, shared with gemm_wg.wgsl): the
// implicit GEMM of lib/conv_common.wgsl with a 16 TM x 16 TN output tile of one group per
// 16x16 workgroup, TM x TN outputs per invocation, A and B staged through workgroup memory 8
// steps of K at a time by the core's double-buffered K loop.
// Every invocation keeps the positions it stages fixed for the whole K loop, so a step
// advances k counters by KT (digit-wise, KT's digits computed once: no division in the K
// loop) instead of decomposing k per element: A (affine in k, stored
// k-fast in every direction) is staged k-fast, a quad of 4 rows at one k; B (a gather) along the
// columns when the innermost column counter is the longer run (forward: ow; data gradient:
// iw; each invocation gathers a quad of 4 neighbouring columns, neighbouring invocations the
// next quads), else along K (weight gradient: k2 is ow while the columns' is kw; neighbouring
// invocations read neighbouring source columns). Out-of-range K is staged as 0;
// ragged rows and columns read clamped positions whose results are never stored.
// Needs lib/activation.wgsl, lib/conv_common.wgsl and lib/wg_tile.wgsl.

// What an invocation loads from, fixed over the K loop except the k counters.
struct Ctx {
    // Element offsets of its A rows (clamped) and the counters of its A k.
    arow: array<u32, 4>,
    ka: KIter,
    // Its B columns (clamped) and the counters of their k (a quad's 4 columns share one k).
    cols: array<Col, 4>,
    kb: KIter,
    // KT steps of k as digit increments (see k_adv).
    step: KIter,
}

// The k counters of an arbitrary k (k_start serves only slice starts).
fn k_at(k: u32) -> KIter {
    let t = k / p.k_e2;
    return KIter(t / p.k_e1, t % p.k_e1, k % p.k_e2);
}

// KT as digits of k (k0, k1, k2 below k_e1 and k_e2): computed once per invocation, so the
// K loop advances its counters without a division.
fn k_step() -> KIter {
    let t = KT / p.k_e2;
    return KIter(t / p.k_e1, t % p.k_e1, KT % p.k_e2);
}

// `it` advanced by KT steps of k (`st` = k_step()): digit-wise addition, each digit carrying
// at most once (k2 + d2 < 2 k_e2, k1 + d1 + 1 < 2 k_e1).
fn k_adv(it: KIter, st: KIter) -> KIter {
    var r = it;
    r.k2 += st.k2;
    var carry = 0u;
    if (r.k2 >= p.k_e2) {
        r.k2 -= p.k_e2;
        carry = 1u;
    }
    r.k1 += st.k1 + carry;
    r.k0 += st.k0;
    if (r.k1 >= p.k_e1) {
        r.k1 -= p.k_e1;
        r.k0 += 1u;
    }
    return r;
}

fn b_k_fast() -> bool {
    return p.k_e2 > p.c_e2;
}

fn k_fast(ctx: ptr<function, Ctx>) -> vec2<bool> {
    return vec2<bool>(true, b_k_fast());
}

fn loader(g: u32, r0: u32, c0: u32, k0: u32, li: u32) -> Ctx {
    var ld: Ctx;
    for (var q = 0u; q < a_per(); q++) {
        let pa = a_pos(li, q, true);
        ld.arow[q] = a_row(g, r0 + pa.x);
    }
    ld.ka = k_at(k0 + a_pos(li, 0u, true).y);
    ld.step = k_step();
    for (var q = 0u; q < b_per(); q++) {
        ld.cols[q] = col_state(g, c0 + b_pos(li, q, b_k_fast()).x);
    }
    ld.kb = k_at(k0 + b_pos(li, 0u, b_k_fast()).y);
    return ld;
}

// Loads the step starting at k0 (k below kend) and advances the loader's counters.
fn load_step(ld: ptr<function, Ctx>, k0: u32, kend: u32, li: u32) -> Staged {
    var s: Staged;
    if (a_owns(li)) {
        let ka = k0 + a_pos(li, 0u, true).y;
        let ak = a_k((*ld).ka);
        for (var q = 0u; q < a_per(); q++) {
            if (ka < kend) {
                s.a[q] = f32(a[(*ld).arow[q] + ak]);
            }
        }
        (*ld).ka = k_adv((*ld).ka, (*ld).step);
    }
    if (b_owns(li)) {
        let kb = k0 + b_pos(li, 0u, b_k_fast()).y;
        let part = k_part((*ld).kb);
        for (var q = 0u; q < b_per(); q++) {
            if (kb < kend) {
                s.b[q] = gather((*ld).cols[q], part);
            }
        }
        (*ld).kb = k_adv((*ld).kb, (*ld).step);
    }
    return s;
}

// The TM x TN block of invocation (tx, ty) in group g's tile at (r0, c0), summed over k in kr.
fn tile_conv(g: u32, r0: u32, c0: u32, kr: vec2<u32>, lid: vec3<u32>) -> array<vec4<f32>, 16> {
    var ctx = loader(g, r0, c0, kr.x, lid.x + lid.y * WX);
    return tile_k(&ctx, kr, lid);
}

@compute @workgroup_size(16, 16)
fn conv_wg(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let r0 = wid.y * tile_rows();
    let c0 = wid.x * tile_cols();
    let g = group_of(wid.z);
    let acc = tile_conv(g, r0, c0, k_range(wid.z), lid);
    for (var hf = 0u; hf < TN / 4u; hf++) {
        let col = c0 + hf * 64u + lid.x * 4u;
        let cs = cols4(g, col);
        for (var i = 0u; i < TM; i++) {
            store_row4(g, r0 + lid.y * TM + i, col, cs, acc[8u * hf + i]);
        }
    }
}

@compute @workgroup_size(16, 16)
fn conv_wg_partial(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let r0 = wid.y * tile_rows();
    let c0 = wid.x * tile_cols();
    let z = wid.z + p.z0;
    let acc = tile_conv(group_of(z), r0, c0, k_range(z), lid);
    for (var hf = 0u; hf < TN / 4u; hf++) {
        let col = c0 + hf * 64u + lid.x * 4u;
        for (var i = 0u; i < TM; i++) {
            store_row4_ws(z, r0 + lid.y * TM + i, col, acc[8u * hf + i]);
        }
    }
}
