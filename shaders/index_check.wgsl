// Device-side index checks: one invocation per index (an i32 tensor, packed from `offset`).
// An index outside [0, size) that is not `ignore` (when IGNORE is set) records the first such
// failure in `err` (count, op code, index, size, dim) for the runtime to report at the next
// sync or readback, like CUDA's device-side assert but recoverable: nothing stalls here.

struct Params {
    numel: u32,
    offset: u32,
    size: u32,
    // The op's code in the device's table of checked ops (`Device::index_check_code`).
    op: u32,
    dim: u32,
    ignore: i32,
    flags: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> idx: array<i32>;
@group(0) @binding(2) var<storage, read_write> err: array<atomic<u32>>;

override WG: u32;

@compute @workgroup_size(WG)
fn index_check(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= p.numel) {
        return;
    }
    let j = idx[p.offset + i];
    if ((p.flags & 1u) != 0u && j == p.ignore) {
        return;
    }
    if (j < 0 || u32(j) >= p.size) {
        // The first failure writes its details; later ones only count.
        if (atomicAdd(&err[0], 1u) == 0u) {
            atomicStore(&err[1], p.op);
            atomicStore(&err[2], bitcast<u32>(j));
            atomicStore(&err[3], p.size);
            atomicStore(&err[4], p.dim);
        }
    }
}
