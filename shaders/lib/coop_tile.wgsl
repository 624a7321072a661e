// The core of the f16 GEMM on cooperative matrices (gemm_coop.wgsl, gemm_coop_partial.wgsl):
// a 128x128 output tile per workgroup of 256 invocations, f16 operands, f32 accumulation.
// Planned for f16 products of more than 64 rows and columns where `Caps::coop16` holds: the
// adapter offers the 16x16x16 f16 x f16 + f32 configuration (tensor cores on NVIDIA through
// VK_KHR_cooperative_matrix) with 32-lane subgroups, has the workgroup memory below and
// `DeviceOptions::cooperative_matrix` asks, or a CPU adapter emulates the fragments (below).
//
// The tile reaches its fragments only through frag_begin / frag_per_lane / frag_a / frag_b /
// frag_mma / frag_store and the types FragA / FragB / FragC, defined by lib/coop_frag.wgsl
// (cooperative matrices) or lib/coop_frag_emu.wgsl (plain WGSL, to test this file on any
// adapter). The emulation reads an operand fragment's staged values when it is multiplied,
// not when it is loaded: keep every frag_a / frag_b and the frag_mma using it in one barrier
// interval, with no store to the staged buffer it reads between them.
//
// Invocations li / 32 form 8 subgroups of 32 lanes (NVIDIA's warps are consecutive invocation
// indices; `Caps::coop16` requires 32-lane subgroups). Subgroup s owns rows (s / 2) * 32 ..
// + 31 and columns (s % 2) * 64 .. + 63 of the tile: 2 x 4 fragments, so a K step of 16 loads
// 2 A and 4 B fragments for 8 products (the old 64x64 tile of 2 x 2 fragments per subgroup
// loaded 4 for 4 and staged half as much per product).
//
// K runs in steps of CK = 16, double buffered: while the tensor cores multiply step t from
// one staged buffer, each invocation's loads of step t + 1 (8 halves of A and 8 of B, read
// through the operand strides, zero outside M, N and the slice's K range, as gemm_wg.wgsl)
// are in flight into registers, stored to the other buffer after the products, and one
// barrier per step orders both. Staged rows are padded by 8 halves (16 bytes), so the 8 rows
// a fragment load reads at once fall on distinct banks; every fragment's start and row stride
// is a multiple of 16 bytes, the alignment cooperative-matrix loads and stores assume.
// Workgroup memory: 2 x (128 x 24 + 16 x 136) halves + 8 x 256 f32 = 29184 bytes
// (`COOP_WG_BYTES` in src/runtime/caps.rs; tests/shaders.rs checks the two agree), under
// lavapipe's 32 KiB and NVIDIA's 48 KiB.
//
// The epilogue stores one fragment at a time into its subgroup's 16x16 f32 scratch and each
// lane passes 8 of its values to the including kernel's
// `fn emit(row: u32, col: u32, v: f32, bs: Bases, z: u32)`: the product kernel stores the
// output through lib/gemm_common.wgsl's epilogue, the split-k kernel its workspace slice.
// The two are separate modules because an entry point's pipeline layout must hold every
// binding its code can reach, and only the split-k layout has the workspace.
// Every barrier and fragment operation is in uniform control flow (loop bounds and branches
// come from uniforms and the workgroup id).
// Needs lib/activation.wgsl, lib/gemm_common.wgsl and a fragment library, with T = f16.

const CT: u32 = 128u;
const CK: u32 = 16u;
const CWG: u32 = 256u;
// Padded row lengths (halves) of the staged tiles: A is staged [m][k], B [k][n].
const CSA: u32 = CK + 8u;
const CSB: u32 = CT + 8u;
// Halves of one staged buffer of each operand.
const ABUF: u32 = CT * CSA;
const BBUF: u32 = CK * CSB;
// Elements of each operand an invocation stages per K step.
const PER: u32 = CT * CK / CWG;

var<workgroup> ca: array<f16, 2u * ABUF>;
var<workgroup> cb: array<f16, 2u * BBUF>;
var<workgroup> cs: array<f32, 8u * 256u>;

// One invocation's share of a K step, between its loads and its stores.
struct Staged {
    a: array<f16, PER>,
    b: array<f16, PER>,
}

// (row or column within the tile, k within the step) of staged element `e`: k-fast when the
// operand is contiguous along K, else along the tile, so consecutive lanes read consecutive
// addresses either way. Invocation li's element q is e = li + q * CWG (`Walk`,
// lib/gemm_common.wgsl: CWG is a multiple of CK and of CT, so its positions are affine in q).
fn stage_at(e: u32, k_fast: bool) -> vec2<u32> {
    if (k_fast) {
        return vec2<u32>(e / CK, e % CK);
    }
    return vec2<u32>(e % CT, e / CT);
}

// Invocation li's staged positions of A and B: element 0 and the step per element, as staged
// indexes of buffer 0 (A staged [m][k], B [k][n]).
struct Shares {
    wa: Walk,
    wb: Walk,
    sa: vec2<u32>,
    sb: vec2<u32>,
}

fn shares(bs: Bases, r0: u32, c0: u32, li: u32) -> Shares {
    let kf = stage_k_fast();
    let a0 = stage_at(li, kf.x);
    let b0 = stage_at(li, kf.y);
    let wa = walk_a(a0, stage_at(li + CWG, kf.x), r0, bs);
    let wb = walk_b(b0, stage_at(li + CWG, kf.y), c0, bs);
    return Shares(
        wa, wb,
        vec2<u32>(a0.x * CSA + a0.y, wa.tq * CSA + wa.kq),
        vec2<u32>(b0.y * CSB + b0.x, wb.kq * CSB + wb.tq),
    );
}

// Loads this invocation's share of the K step at k0 (k below kend).
fn fetch(sh: Shares, k0: u32, kend: u32) -> Staged {
    var s: Staged;
    for (var q = 0u; q < PER; q++) {
        if (walk_in(sh.wa, q, p.m, k0, kend)) {
            s.a[q] = a[walk_at(sh.wa, q, k0)];
        }
        if (walk_in(sh.wb, q, p.n, k0, kend)) {
            s.b[q] = b[walk_at(sh.wb, q, k0)];
        }
    }
    return s;
}

// Stores a fetched share into staged buffer `buf` (0 or 1).
fn put(s: Staged, buf: u32, sh: Shares) {
    let sa = buf * ABUF + sh.sa.x;
    let sb = buf * BBUF + sh.sb.x;
    for (var q = 0u; q < PER; q++) {
        ca[sa + q * sh.sa.y] = s.a[q];
        cb[sb + q * sh.sb.y] = s.b[q];
    }
}

// Stores fragment `c` (rows row0.., columns col0.. of the output) through subgroup sg's
// scratch: lane l emits elements l + 32 q through the kernel's `emit` (z: the split-k slice).
fn put_frag(c: FragC, sg: u32, lane: u32, row0: u32, col0: u32, bs: Bases, z: u32) {
    frag_store(c, sg * 256u);
    workgroupBarrier();
    for (var q = 0u; q < frag_per_lane(); q++) {
        let e = lane + 32u * q;
        emit(row0 + e / 16u, col0 + e % 16u, cs[sg * 256u + e], bs, z);
    }
    workgroupBarrier();
}

fn gemm_coop_tile(wid: vec3<u32>, li: u32) {
    frag_begin(li);
    let r0 = wid.y * CT;
    let c0 = wid.x * CT;
    let bs = bases(wid.z);
    let kr = k_range(wid.z);
    let sg = li / 32u;
    let lane = li % 32u;
    // The subgroup's rows and columns within the tile.
    let qr = (sg / 2u) * 32u;
    let qc = (sg % 2u) * 64u;
    var c00: FragC;
    var c01: FragC;
    var c02: FragC;
    var c03: FragC;
    var c10: FragC;
    var c11: FragC;
    var c12: FragC;
    var c13: FragC;
    let sh = shares(bs, r0, c0, li);
    let steps = (kr.y - kr.x + CK - 1u) / CK;
    if (steps > 0u) {
        put(fetch(sh, kr.x, kr.y), 0u, sh);
    }
    workgroupBarrier();
    for (var t = 0u; t < steps; t++) {
        let cur = t % 2u;
        let more = t + 1u < steps;
        var next: Staged;
        if (more) {
            next = fetch(sh, kr.x + (t + 1u) * CK, kr.y);
        }
        let ao = cur * ABUF + qr * CSA;
        let bo = cur * BBUF + qc;
        let a0 = frag_a(ao, CSA);
        let a1 = frag_a(ao + 16u * CSA, CSA);
        let b0 = frag_b(bo, CSB);
        let b1 = frag_b(bo + 16u, CSB);
        let b2 = frag_b(bo + 32u, CSB);
        let b3 = frag_b(bo + 48u, CSB);
        c00 = frag_mma(a0, b0, c00);
        c01 = frag_mma(a0, b1, c01);
        c02 = frag_mma(a0, b2, c02);
        c03 = frag_mma(a0, b3, c03);
        c10 = frag_mma(a1, b0, c10);
        c11 = frag_mma(a1, b1, c11);
        c12 = frag_mma(a1, b2, c12);
        c13 = frag_mma(a1, b3, c13);
        if (more) {
            put(next, 1u - cur, sh);
        }
        workgroupBarrier();
    }
    let row0 = r0 + qr;
    let col0 = c0 + qc;
    put_frag(c00, sg, lane, row0, col0, bs, wid.z);
    put_frag(c01, sg, lane, row0, col0 + 16u, bs, wid.z);
    put_frag(c02, sg, lane, row0, col0 + 32u, bs, wid.z);
    put_frag(c03, sg, lane, row0, col0 + 48u, bs, wid.z);
    put_frag(c10, sg, lane, row0 + 16u, col0, bs, wid.z);
    put_frag(c11, sg, lane, row0 + 16u, col0 + 16u, bs, wid.z);
    put_frag(c12, sg, lane, row0 + 16u, col0 + 32u, bs, wid.z);
    put_frag(c13, sg, lane, row0 + 16u, col0 + 48u, bs, wid.z);
}
