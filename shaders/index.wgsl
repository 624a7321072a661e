// Index ops. `gather`: out[c] = x[c with c[dim] replaced by index[c]] (index_select and
// embedding are gathers through a broadcast index view).
// `scatter_add`: out[c] = self[c] + sum over j of src[c with dim = j] where
// index[c with dim = j] == c[dim], summed in order of j: a deterministic gather form of
// PyTorch's scatter_add_ (no atomics, so every run gives the same bits).
// Indices outside [0, len) read NaN (0 for i32 data) in `gather` and are skipped by
// `scatter_add`: never an out-of-bounds access.

struct Params {
    numel: u32,
    rank: u32,
    dim: u32,
    // gather: x's size along dim; scatter_add: index's size along dim.
    len: u32,
    off_x: u32,
    off_i: u32,
    off_s: u32,
    // scatter_add: the row (value of c[dim]) that receives nothing (embedding's padding_idx),
    // or -1 for none.
    skip: i32,
    // The output's shape.
    shape: array<vec4<u32>, 2>,
    // x's strides (gather), src's (scatter_add).
    sx: array<vec4<u32>, 2>,
    // index strides.
    si: array<vec4<u32>, 2>,
    // scatter_add: self's strides.
    ss: array<vec4<u32>, 2>,
    // scatter_add: the index's shape.
    ishape: array<vec4<u32>, 2>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read> idx: array<i32>;
@group(0) @binding(3) var<storage, read> base: array<T>;
@group(0) @binding(4) var<storage, read_write> out: array<T>;

override WG: u32;
// T is a float type: out-of-range gathers read NaN (else 0), scatter_add sums in f32 (else
// in i32).
override FLOAT: bool = true;
// scatter_add adds `base` (else starts from zero).
override HAS_BASE: bool = false;

fn at(v: array<vec4<u32>, 2>, k: u32) -> u32 {
    return v[k / 4u][k % 4u];
}

fn thread_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * nwg.x) * WG + lid;
}

@compute @workgroup_size(WG)
fn gather(@builtin(workgroup_id) wid: vec3<u32>,
          @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let i = thread_index(wid, nwg, lid);
    if (i >= p.numel) {
        return;
    }
    var rem = i;
    var ox = p.off_x;
    var oi = p.off_i;
    for (var d = i32(p.rank) - 1; d >= 0; d--) {
        let k = u32(d);
        let n = at(p.shape, k);
        let c = rem % n;
        rem = rem / n;
        oi += c * at(p.si, k);
        if (k != p.dim) {
            ox += c * at(p.sx, k);
        }
    }
    let j = idx[oi];
    if (j < 0 || u32(j) >= p.len) {
        if (FLOAT) {
            // NaN built from bits at run time: WGSL has no NaN literal.
            out[i] = T(bitcast<f32>(0x7fc00000u + p.numel * 0u));
        } else {
            out[i] = T(0);
        }
        return;
    }
    out[i] = x[ox + u32(j) * at(p.sx, p.dim)];
}

@compute @workgroup_size(WG)
fn scatter_add(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let i = thread_index(wid, nwg, lid);
    if (i >= p.numel) {
        return;
    }
    var rem = i;
    var os = p.off_s;
    var ox = p.off_x;
    var oi = p.off_i;
    var row = 0u;
    // Whether c lies inside the index's extent on every dim but `dim`.
    var inside = true;
    for (var d = i32(p.rank) - 1; d >= 0; d--) {
        let k = u32(d);
        let n = at(p.shape, k);
        let c = rem % n;
        rem = rem / n;
        os += c * at(p.ss, k);
        if (k == p.dim) {
            row = c;
        } else {
            inside = inside && c < at(p.ishape, k);
            ox += c * at(p.sx, k);
            oi += c * at(p.si, k);
        }
    }
    // Floats sum in f32, i32 data in i32 (wrapping on overflow, as int32 adds do), from the
    // base (PyTorch's output starts as a copy of self, then each src is added in order).
    var acc = 0.0;
    var iacc = 0i;
    if (HAS_BASE) {
        if (FLOAT) {
            acc = f32(base[os]);
        } else {
            iacc = i32(base[os]);
        }
    }
    if (inside && i32(row) != p.skip) {
        let sxd = at(p.sx, p.dim);
        let sid = at(p.si, p.dim);
        for (var j = 0u; j < p.len; j++) {
            if (idx[oi + j * sid] == i32(row)) {
                if (FLOAT) {
                    acc += f32(x[ox + j * sxd]);
                } else {
                    iacc += i32(x[ox + j * sxd]);
                }
            }
        }
    }
    if (FLOAT) {
        out[i] = T(acc);
    } else {
        out[i] = T(iacc);
    }
}
