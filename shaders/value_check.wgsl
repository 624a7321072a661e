// Device-side value checks: one invocation per element of a float tensor (packed from
// `offset`). An element outside [lo, hi], or NaN, records the first failure in the device's
// error buffer, which the index checks share (count, op code, the value's f32 bits, 0, which
// operand), for the runtime to report at the next sync or readback as PyTorch raises (its
// binary_cross_entropy checks that inputs and targets are probabilities). Needs
// lib/activation.wgsl (isnan_f: comparisons alone may be compiled as if NaN never occurs).

struct Params {
    numel: u32,
    offset: u32,
    // The op's code in the device's table of checked ops.
    op: u32,
    // Which operand this is (the op's error message names it).
    which: u32,
    lo: f32,
    hi: f32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> v: array<T>;
@group(0) @binding(2) var<storage, read_write> err: array<atomic<u32>>;

override WG: u32;

@compute @workgroup_size(WG)
fn value_check(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= p.numel) {
        return;
    }
    let x = f32(v[p.offset + i]);
    if (isnan_f(x) || x < p.lo || x > p.hi) {
        // The first failure writes its details; later ones only count.
        if (atomicAdd(&err[0], 1u) == 0u) {
            atomicStore(&err[1], p.op);
            atomicStore(&err[2], bitcast<u32>(x));
            atomicStore(&err[3], 0u);
            atomicStore(&err[4], p.which);
        }
    }
}
