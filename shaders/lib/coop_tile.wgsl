// The core of the f16 GEMM on cooperative matrices (gemm_coop.wgsl, gemm_coop_partial.wgsl):
// f16 GEMM on cooperative matrices (tensor cores on NVIDIA through VK_KHR_cooperative_matrix's
// 16x16x16 f16 -> f32 configuration, wgpu's EXPERIMENTAL_COOPERATIVE_MATRIX): planned only
// where the adapter offers that configuration with 32-lane subgroups and
// `DeviceOptions::cooperative_matrix` asks for it. A workgroup of 4 subgroups computes a 64x64
// output tile; subgroup s owns the 32x32 quadrant (s / 2, s % 2) as 2x2 fragments accumulated
// in f32. Each K step stages a 64x32 A tile and a 32x64 B tile (f16, rows padded by 8 halves)
// through the operand strides, zero-filled outside M, N and the slice's K range, as
// gemm_wg.wgsl does; the fragments load from workgroup memory row-major. The epilogue stores
// one fragment at a time into a per-subgroup 16x16 f32 scratch and each lane applies
// lib/gemm_common.wgsl's store to 8 of its values. Every barrier and cooperative operation is
// in uniform control flow (the loop bounds come from uniforms and the workgroup id).
// The including kernel defines `fn emit(row: u32, col: u32, v: f32, bs: Bases, z: u32)`, the
// store of one output value: the product kernel stores the output, the split-k kernel its
// workspace. The two are separate modules because an entry point's pipeline layout must hold
// every binding its code can reach, and only the split-k layout has the workspace.
// Needs lib/activation.wgsl and lib/gemm_common.wgsl with T = f16.

const CT: u32 = 64u;
const CK: u32 = 32u;
// Padded row lengths (halves) of the staged tiles.
const CSA: u32 = CK + 8u;
const CSB: u32 = CT + 8u;
const CWG: u32 = 128u;

var<workgroup> ca: array<f16, CT * CSA>;
var<workgroup> cb: array<f16, CK * CSB>;
var<workgroup> cs: array<f32, 4u * 256u>;

// (row or column within the tile, k within the step) of staged element `e`: k-fast when the
// operand is contiguous along K, else along the tile.
fn stage_at(e: u32, k_fast: bool) -> vec2<u32> {
    if (k_fast) {
        return vec2<u32>(e / CK, e % CK);
    }
    return vec2<u32>(e % CT, e / CT);
}

// Stages the K step at k0 (k below kend): 2048 elements of each operand, 16 per invocation.
fn stage(bs: Bases, r0: u32, c0: u32, k0: u32, kend: u32, li: u32) {
    let a_kf = p.a_cs == 1u;
    let b_kf = p.b_rs == 1u && p.b_cs != 1u;
    for (var q = 0u; q < CT * CK / CWG; q++) {
        let e = li + q * CWG;
        let pa = stage_at(e, a_kf);
        let m = pa.x;
        let k = pa.y;
        var va = f16(0.0);
        if (r0 + m < p.m && k0 + k < kend) {
            va = f16(a[bs.a + (r0 + m) * p.a_rs + (k0 + k) * p.a_cs]);
        }
        ca[m * CSA + k] = va;
        let pb = stage_at(e, b_kf);
        let n = pb.x;
        let kb = pb.y;
        var vb = f16(0.0);
        if (c0 + n < p.n && k0 + kb < kend) {
            vb = f16(b[bs.b + (k0 + kb) * p.b_rs + (c0 + n) * p.b_cs]);
        }
        cb[kb * CSB + n] = vb;
    }
}

// Stores fragment `c` (rows fr.., columns fc.. of the tile) through the subgroup's scratch:
// lane l emits elements l + 32 q through the kernel's `emit` (z: the split-k slice).
fn put_frag(c: coop_mat16x16<f32, C>, sg: u32, lane: u32, row0: u32, col0: u32, bs: Bases, z: u32) {
    coopStoreT(c, &cs[sg * 256u], 16u);
    workgroupBarrier();
    for (var q = 0u; q < 8u; q++) {
        let e = lane + 32u * q;
        let v = cs[sg * 256u + e];
        emit(row0 + e / 16u, col0 + e % 16u, v, bs, z);
    }
    workgroupBarrier();
}

fn gemm_coop_tile(wid: vec3<u32>, li: u32) {
    let r0 = wid.y * CT;
    let c0 = wid.x * CT;
    let bs = bases(wid.z);
    let kr = k_range(wid.z);
    let sg = li / 32u;
    let lane = li % 32u;
    let qr = (sg / 2u) * 32u;
    let qc = (sg % 2u) * 32u;
    var c00: coop_mat16x16<f32, C>;
    var c01: coop_mat16x16<f32, C>;
    var c10: coop_mat16x16<f32, C>;
    var c11: coop_mat16x16<f32, C>;
    let steps = (kr.y - kr.x + CK - 1u) / CK;
    for (var t = 0u; t < steps; t++) {
        stage(bs, r0, c0, kr.x + t * CK, kr.y, li);
        workgroupBarrier();
        for (var kk = 0u; kk < CK; kk += 16u) {
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&ca[qr * CSA + kk], CSA);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&ca[(qr + 16u) * CSA + kk], CSA);
            let b0 = coopLoadT<coop_mat16x16<f16, B>>(&cb[kk * CSB + qc], CSB);
            let b1 = coopLoadT<coop_mat16x16<f16, B>>(&cb[kk * CSB + qc + 16u], CSB);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
        }
        workgroupBarrier();
    }
    put_frag(c00, sg, lane, r0 + qr, c0 + qc, bs, wid.z);
    put_frag(c01, sg, lane, r0 + qr, c0 + qc + 16u, bs, wid.z);
    put_frag(c10, sg, lane, r0 + qr + 16u, c0 + qc, bs, wid.z);
    put_frag(c11, sg, lane, r0 + qr + 16u, c0 + qc + 16u, bs, wid.z);
}
