// lib/coop_tile.wgsl's fragments without cooperative matrices, so that the tile's staging,
// indexing, split-k and epilogue run (and are tested) on any adapter: chosen on CPU adapters
// opened with both `DeviceOptions::gpu_plans` and `cooperative_matrix`. Slow, and only for
// that. An operand fragment is its place in the staged tile, read when it is multiplied (the
// tile writes a staged buffer only after a barrier that follows every product reading it, so
// the values are those a load would have seen); an accumulator holds the 8 values lane
// `lane` stores: elements lane + 32 q of the row-major 16x16 fragment, f32 sums of the exact
// f16 products, in k order.

struct FragA {
    off: u32,
    st: u32,
}

struct FragB {
    off: u32,
    st: u32,
}

struct FragC {
    v: array<f32, 8>,
}

// This invocation's lane in its 32-lane group (the tile's "subgroup" li / 32).
var<private> emu_lane: u32;
// The fragment's 16, hidden from the shader compiler: with constant bounds lavapipe unrolls
// every product (8 per K step, 8 x 16 terms each) and took about 30 s to compile each
// variant. 0 when M is 0 (then no value is stored, so none needs computing).
var<private> emu_16: u32;

fn frag_begin(li: u32) {
    emu_lane = li % 32u;
    emu_16 = select(0u, 16u, p.m > 0u);
}

// 8 (hidden from the compiler as `emu_16` is: the epilogue is not unrolled either).
fn frag_per_lane() -> u32 {
    return emu_16 / 2u;
}

fn frag_a(off: u32, st: u32) -> FragA {
    return FragA(off, st);
}

fn frag_b(off: u32, st: u32) -> FragB {
    return FragB(off, st);
}

fn frag_mma(a: FragA, b: FragB, c: FragC) -> FragC {
    var r = c;
    for (var q = 0u; q < frag_per_lane(); q++) {
        let e = emu_lane + 32u * q;
        let row = e / 16u;
        let col = e % 16u;
        var s = r.v[q];
        for (var k = 0u; k < emu_16; k++) {
            s += f32(ca[a.off + row * a.st + k]) * f32(cb[b.off + k * b.st + col]);
        }
        r.v[q] = s;
    }
    return r;
}

fn frag_store(c: FragC, off: u32) {
    for (var q = 0u; q < frag_per_lane(); q++) {
        cs[off + emu_lane + 32u * q] = c.v[q];
    }
}
