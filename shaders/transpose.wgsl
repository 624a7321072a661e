// A packed copy of a view whose last two dims are transposed (src/ops/transpose_copy.rs):
// output element (b, i, j) of a [batch, rows, cols] result reads input element
// src_off + b * sb + i + j * ld, so consecutive output elements are `ld` apart in the input.
// Each 32x8 workgroup moves one 32x32 tile through workgroup memory: it reads the tile along
// the input's unit stride (coalesced), waits at a barrier, and writes it along the output's
// rows (coalesced), each invocation copying 4 elements each way. The tile rows are padded to
// 33 elements so the column reads hit 32 different banks. Used on GPUs only; CPU adapters
// run the map kernel's strided copy. T -> U is a copy or a cast (`U(x)`, as the map kernel).

struct Params {
    rows: u32,
    cols: u32,
    batch: u32,
    src_off: u32,
    ld: u32,
    sb: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read_write> y: array<U>;

const TILE: u32 = 32u;
const STEP: u32 = 8u;

var<workgroup> tile: array<T, 1056>; // 32 x 33

@compute @workgroup_size(32, 8)
fn transpose_tile(@builtin(workgroup_id) wid: vec3<u32>,
                  @builtin(local_invocation_id) lid: vec3<u32>) {
    let i0 = wid.y * TILE;
    let j0 = wid.x * TILE;
    let b = wid.z;
    let src = p.src_off + b * p.sb;
    // Read: lanes along i, the input's unit stride. tile[jl][il].
    let i = i0 + lid.x;
    for (var r = 0u; r < TILE; r += STEP) {
        let j = j0 + lid.y + r;
        if (i < p.rows && j < p.cols) {
            tile[(lid.y + r) * (TILE + 1u) + lid.x] = x[src + i + j * p.ld];
        }
    }
    workgroupBarrier();
    // Write: lanes along j, the output's unit stride.
    let j = j0 + lid.x;
    let dst = b * p.rows * p.cols;
    for (var r = 0u; r < TILE; r += STEP) {
        let ii = i0 + lid.y + r;
        if (ii < p.rows && j < p.cols) {
            y[dst + ii * p.cols + j] = U(tile[lid.x * (TILE + 1u) + lid.y + r]);
        }
    }
}
