// In-place dtype cast between two 4-byte dtypes (f32 <-> i32) of a donated buffer: each
// element's bits are read as T, converted to U as the map kernel's copy path does (a float
// truncates toward zero and saturates), and written back as U's bits. A separate module because
// the bitcasts only type-check for 4-byte T and U.

struct Params {
    numel: u32,
    rank: u32,
    offset: u32,
    scalar: f32,
    shape: array<vec4<u32>, 2>,
    strides: array<vec4<u32>, 2>,
    // Flat index of this dispatch's first element (a window of a tensor larger than one
    // binding; 0 otherwise): strided inputs decode coordinates from base + i.
    base: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> words: array<u32>;

override WG: u32;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= p.numel) {
        return;
    }
    let k = p.offset + i;
    words[k] = bitcast<u32>(U(bitcast<T>(words[k])));
}
