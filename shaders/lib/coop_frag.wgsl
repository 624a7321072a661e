// The fragments of lib/coop_tile.wgsl on cooperative matrices (tensor cores): 16x16 f16
// operands from the staged tiles, 16x16 f32 accumulators (VK_KHR_cooperative_matrix's
// 16x16x16 f16 x f16 + f32 configuration, wgpu's EXPERIMENTAL_COOPERATIVE_MATRIX). The tile
// calls only these functions, so lib/coop_frag_emu.wgsl can stand in for them on adapters
// without cooperative matrices (the tile's conformance tests on lavapipe).

alias FragA = coop_mat16x16<f16, A>;
alias FragB = coop_mat16x16<f16, B>;
alias FragC = coop_mat16x16<f32, C>;

// Nothing to set up: the matrices know their lanes.
fn frag_begin(li: u32) {}

// Values of a 16x16 fragment per lane: 8.
fn frag_per_lane() -> u32 {
    return 8u;
}

// The 16x16 A fragment at ca[off], rows `st` halves apart.
fn frag_a(off: u32, st: u32) -> FragA {
    return coopLoadT<FragA>(&ca[off], st);
}

// The 16x16 B fragment at cb[off], rows `st` halves apart.
fn frag_b(off: u32, st: u32) -> FragB {
    return coopLoadT<FragB>(&cb[off], st);
}

// c + a b, accumulated in f32.
fn frag_mma(a: FragA, b: FragB, c: FragC) -> FragC {
    return coopMultiplyAdd(a, b, c);
}

// Stores `c` row-major (16 f32 per row) at cs[off].
fn frag_store(c: FragC, off: u32) {
    coopStoreT(c, &cs[off], 16u);
}
