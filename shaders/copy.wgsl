// Strided copies: `copy_into` writes a strided source into a strided region of the output
// (cat, stack, and writing one view into another); `pad` writes a padded copy of a strided
// input, the padding filled with a constant, reflected, replicated or wrapped around
// (PyTorch's modes).
// Coordinates are decoded once per element from the shared logical shape.

struct Params {
    numel: u32,
    rank: u32,
    src_off: u32,
    dst_off: u32,
    value: f32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
    // The logical shape walked (copy: the source's; pad: the output's).
    shape: array<vec4<u32>, 2>,
    src_strides: array<vec4<u32>, 2>,
    // copy: the destination's strides; pad: the source's shape.
    aux: array<vec4<u32>, 2>,
    // pad: padding before each dim.
    before: array<vec4<u32>, 2>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read_write> y: array<T>;

// PAD_* are emitted by the runtime from COPY_DEFS in src/ops/copy.rs.
override MODE: u32 = 0u;
override WG: u32;

fn at(v: array<vec4<u32>, 2>, k: u32) -> u32 {
    return v[k / 4u][k % 4u];
}

@compute @workgroup_size(WG)
fn copy_into(@builtin(workgroup_id) wid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= p.numel) {
        return;
    }
    var rem = i;
    var si = p.src_off;
    var di = p.dst_off;
    for (var d = i32(p.rank) - 1; d >= 0; d--) {
        let k = u32(d);
        let n = at(p.shape, k);
        let c = rem % n;
        rem = rem / n;
        si += c * at(p.src_strides, k);
        di += c * at(p.aux, k);
    }
    y[di] = x[si];
}

@compute @workgroup_size(WG)
fn pad(@builtin(workgroup_id) wid: vec3<u32>,
       @builtin(num_workgroups) nwg: vec3<u32>,
       @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= p.numel) {
        return;
    }
    var rem = i;
    var si = p.src_off;
    var inside = true;
    for (var d = i32(p.rank) - 1; d >= 0; d--) {
        let k = u32(d);
        let n = at(p.shape, k);
        let c = i32(rem % n);
        rem = rem / n;
        let len = i32(at(p.aux, k));
        var s = c - i32(at(p.before, k));
        if (s < 0 || s >= len) {
            if (MODE == PAD_REFLECT) {
                // Mirror without repeating the edge: -1 -> 1, len -> len - 2.
                let period = 2 * (len - 1);
                var m = abs(s) % max(period, 1);
                if (m >= len) {
                    m = period - m;
                }
                s = m;
            } else if (MODE == PAD_REPLICATE) {
                s = clamp(s, 0, len - 1);
            } else if (MODE == PAD_CIRCULAR) {
                // Wrapped once at most (the host checks each pad against len).
                s = select(s - len, s + len, s < 0);
            } else {
                inside = false;
            }
        }
        si += u32(max(s, 0)) * at(p.src_strides, k);
    }
    if (inside) {
        y[i] = x[si];
    } else {
        y[i] = T(p.value);
    }
}
