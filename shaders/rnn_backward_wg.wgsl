// BPTT step for GPUs: the recurrent product dA_h_{t+1} W_hh ([B, G*H] x [G*H, H]) on the
// large-tile core (lib/wg_tile.wgsl), split over K into `p.splits` slices so that a small batch
// still spreads over the device (a [64, 2048] x [2048, 512] product is 8 output tiles), each
// slice writing its f32 partial sums to `ws`; then one invocation per (batch row, unit) adds the
// slices in a fixed order (deterministic) and applies the gate derivatives of
// lib/rnn_backward_common.wgsl. dA rows are staged k-fast, W_hh rows along the units; both
// reads coalesce. Needs lib/activation.wgsl, lib/rnn_backward_common.wgsl, lib/wg_tile.wgsl.

@group(0) @binding(9) var<storage, read_write> ws: array<f32>;

override WG: u32 = 64u;

struct Staged {
    a: array<f32, 4>,
    b: array<f32, 2>,
}

// K steps per slice: G*H / splits rounded up to whole staged steps.
fn k_chunk() -> u32 {
    let per = (p.gh + p.splits - 1u) / p.splits;
    return (per + KT - 1u) / KT * KT;
}

fn load_step(r0: u32, c0: u32, k0: u32, kend: u32, li: u32) -> Staged {
    var s: Staged;
    for (var q = 0u; q < a_per(); q++) {
        let pa = stage_pos(li + q * WX * WY, tile_rows(), true);
        let b = r0 + pa.x;
        let k = k0 + pa.y;
        var v = 0.0;
        if (b < p.batch && k < kend) {
            v = f32(dah[p.a_prev + b * p.gh + k]);
        }
        s.a[q] = v;
    }
    for (var q = 0u; q < B_PER; q++) {
        let pb = stage_pos(li + q * WX * WY, BN, false);
        let j = c0 + pb.x;
        let k = k0 + pb.y;
        var v = 0.0;
        if (j < p.hidden && k < kend) {
            v = f32(whh[k * p.hidden + j]);
        }
        s.b[q] = v;
    }
    return s;
}

fn store_step(s: Staged, buf: u32, li: u32) {
    for (var q = 0u; q < a_per(); q++) {
        let pa = stage_pos(li + q * WX * WY, tile_rows(), true);
        put_a(buf, pa.x, pa.y, s.a[q]);
    }
    for (var q = 0u; q < B_PER; q++) {
        let pb = stage_pos(li + q * WX * WY, BN, false);
        put_b(buf, pb.y, pb.x, s.b[q]);
    }
}

// Slice wid.z of the recurrent product for the tile of 16 TM rows x 64 units at (wid.y, wid.x).
@compute @workgroup_size(16, 16)
fn rnn_rec_wg(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let li = lid.x + lid.y * WX;
    let r0 = wid.y * tile_rows();
    let c0 = wid.x * BN;
    let kc = k_chunk();
    let kb = min(wid.z * kc, p.gh);
    let ke = min(kb + kc, p.gh);
    let steps = (ke - kb + KT - 1u) / KT;
    var acc: array<vec4<f32>, 8>;
    store_step(load_step(r0, c0, kb, ke, li), 0u, li);
    workgroupBarrier();
    for (var t = 0u; t < steps; t++) {
        let cur = t & 1u;
        let more = t + 1u < steps;
        var next: Staged;
        if (more) {
            next = load_step(r0, c0, kb + (t + 1u) * KT, ke, li);
        }
        fma_tile(cur, lid, &acc);
        if (more) {
            store_step(next, 1u - cur, li);
        }
        workgroupBarrier();
    }
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

@compute @workgroup_size(WG)
fn lstm_backward_ws(@builtin(global_invocation_id) gid: vec3<u32>) {
    let b = gid.x / p.hidden;
    let j = gid.x % p.hidden;
    lstm_backward_finish(b, j, rec_sum(b, j));
}

@compute @workgroup_size(WG)
fn gru_backward_ws(@builtin(global_invocation_id) gid: vec3<u32>) {
    let b = gid.x / p.hidden;
    let j = gid.x % p.hidden;
    gru_backward_finish(b, j, rec_sum(b, j));
}
