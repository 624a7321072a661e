// f16 GEMM on cooperative matrices, the product kernel: lib/coop_tile.wgsl's tile, each value
// stored through the epilogue (lib/gemm_common.wgsl's store_out).
// Needs lib/activation.wgsl, lib/gemm_common.wgsl, lib/coop_tile.wgsl and a fragment library
// (lib/coop_frag.wgsl or lib/coop_frag_emu.wgsl) with T = f16.

fn emit(row: u32, col: u32, v: f32, bs: Bases, z: u32) {
    store_out(row, col, v, bs);
}

@compute @workgroup_size(256)
fn gemm_coop(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    gemm_coop_tile(wid, li);
}
