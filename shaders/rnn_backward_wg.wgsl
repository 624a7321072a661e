// BPTT step for GPUs: the recurrent product dA_h_{t+1} W_hh ([B, G*H] x [G*H, H]) on the
// large-tile core (lib/wg_tile.wgsl), split over K into `p.splits` slices so that a small batch
// still spreads over the device (a [64, 2048] x [2048, 512] product is 8 output tiles), each
// slice writing its f32 partial sums to `ws`; then one invocation per (batch row, unit) adds the
// slices in a fixed order (deterministic) and applies the gate derivatives of
// lib/rnn_backward_common.wgsl. dA rows are staged k-fast, W_hh rows along the units; both
// reads coalesce. Needs lib/activation.wgsl, lib/rnn_backward_common.wgsl, lib/wg_tile.wgsl.

@group(0) @binding(9) var<storage, read_write> ws: array<f32>;

override WG: u32 = 64u;

// K steps per slice: G*H / splits rounded up to whole staged steps.
fn k_chunk() -> u32 {
    let per = (p.gh + p.splits - 1u) / p.splits;
    return (per + KT - 1u) / KT * KT;
}

// The tile's first batch row and unit.
struct Ctx {
    r0: u32,
    c0: u32,
}

// dA rows k-fast, W_hh rows along the units.
fn k_fast(ctx: ptr<function, Ctx>) -> vec2<bool> {
    return vec2<bool>(true, false);
}

fn load_step(ctx: ptr<function, Ctx>, k0: u32, kend: u32, li: u32) -> Staged {
    var s: Staged;
    let c = *ctx;
    for (var q = 0u; q < a_per(); q++) {
        let pa = a_pos(li, q, true);
        let b = c.r0 + pa.x;
        let k = k0 + pa.y;
        if (a_owns(li) && b < p.batch && k < kend) {
            s.a[q] = f32(dah[p.a_prev + b * p.gh + k]);
        }
    }
    for (var q = 0u; q < b_per(); q++) {
        let pb = b_pos(li, q, false);
        let j = c.c0 + pb.x;
        let k = k0 + pb.y;
        if (b_owns(li) && j < p.hidden && k < kend) {
            s.b[q] = f32(whh[k * p.hidden + j]);
        }
    }
    return s;
}

// Slice wid.z of the recurrent product for the tile of 16 TM rows x 64 units at (wid.y, wid.x).
@compute @workgroup_size(16, 16)
fn rnn_rec_wg(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let r0 = wid.y * tile_rows();
    let c0 = wid.x * tile_cols();
    let kc = k_chunk();
    let kb = min(wid.z * kc, p.gh);
    var ctx = Ctx(r0, c0);
    let acc = tile_k(&ctx, vec2<u32>(kb, min(kb + kc, p.gh)), lid);
    let col = c0 + lid.x * 4u;
    for (var i = 0u; i < TM; i++) {
        let row = r0 + lid.y * TM + i;
        if (row < p.batch) {
            let v = acc[i];
            let base = (wid.z * p.batch + row) * p.hidden;
            for (var c = 0u; c < 4u; c++) {
                if (col + c < p.hidden) {
                    ws[base + col + c] = v[c];
                }
            }
        }
    }
}

// The recurrent gradient of (b, j): the slices summed in order (0 without a product).
fn rec_sum(b: u32, j: u32) -> f32 {
    var acc = 0.0;
    if (p.has_rec != 0u && b < p.batch && j < p.hidden) {
        for (var s = 0u; s < p.splits; s++) {
            acc += ws[(s * p.batch + b) * p.hidden + j];
        }
    }
    return acc;
}

// One invocation per (batch row, unit), the workgroups laid out flat over grid x and y (a
// batch of B H units may need more than one axis's 65535 workgroups).
fn ws_unit(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * nwg.x) * WG + lid;
}

@compute @workgroup_size(WG)
fn lstm_backward_ws(@builtin(workgroup_id) wid: vec3<u32>,
                    @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
    let u = ws_unit(wid, nwg, lid);
    let b = u / p.hidden;
    let j = u % p.hidden;
    lstm_backward_finish(b, j, rec_sum(b, j));
}

@compute @workgroup_size(WG)
fn gru_backward_ws(@builtin(workgroup_id) wid: vec3<u32>,
                   @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let u = ws_unit(wid, nwg, lid);
    let b = u / p.hidden;
    let j = u % p.hidden;
    gru_backward_finish(b, j, rec_sum(b, j));
}
