// f16 GEMM on cooperative matrices, the split-k kernel: lib/coop_tile.wgsl's tile over one K
// slice (grid z), each value stored to the f32 workspace that `splitk_reduce` sums.
// Needs lib/activation.wgsl, lib/gemm_common.wgsl, lib/coop_tile.wgsl and a fragment library
// (lib/coop_frag.wgsl or lib/coop_frag_emu.wgsl) with T = f16.

fn emit(row: u32, col: u32, v: f32, bs: Bases, z: u32) {
    store_ws(z, row, col, v);
}

@compute @workgroup_size(256)
fn gemm_coop_partial(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    gemm_coop_tile(wid, li);
}
