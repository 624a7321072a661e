// Backward helpers for autograd (src/ops/grad_kernel.rs). Two entry points share one Params
// layout; every input is read through its own element strides (0 on broadcast dims) and the
// output is contiguous over `shape`.
// - grad_binary: out = f(a, b) with numpy broadcasting, f picked by the OP override
//   (activation derivatives from the saved input or output, max/min tie weights, clamp masks);
// - narrow_grad: the gradient of a narrow, zero outside [start, start + len) along `dim`.
// (The gradient of max/min over a dim is shaders/argext.wgsl's argext_route.)
// The runtime prepends the dtype prelude (`alias T = ...;`), the op codes (GRAD_DEFS in
// src/ops/grad_kernel.rs) and shaders/lib/activation.wgsl.

struct Params {
    numel: u32,
    rank: u32,
    dim: u32,
    start: u32,
    off_a: u32,
    off_b: u32,
    off_c: u32,
    scalar: f32,
    len: u32,
    // grad_binary's first flat index in a window of a tensor larger than one binding.
    base: u32,
    pad1: u32,
    pad2: u32,
    shape: array<vec4<u32>, 2>,
    sa: array<vec4<u32>, 2>,
    sb: array<vec4<u32>, 2>,
    sc: array<vec4<u32>, 2>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<T>;
@group(0) @binding(2) var<storage, read> b: array<T>;
@group(0) @binding(3) var<storage, read> c: array<T>;
@group(0) @binding(4) var<storage, read_write> dst: array<T>;

override OP: u32 = 0u;
override WG: u32;

fn dim_of(v: array<vec4<u32>, 2>, k: u32) -> u32 {
    return v[k / 4u][k % 4u];
}

// d/dx of exact GELU: Phi(x) + x phi(x).
fn gelu_grad(x: f32) -> f32 {
    let cdf = 0.5 * (1.0 + erf_approx(x * 0.70710678118654752));
    let pdf = 0.39894228040143268 * exp(-0.5 * x * x);
    return cdf + x * pdf;
}

fn combine(g: f32, s: f32) -> f32 {
    switch OP {
        // relu from its output: PyTorch's threshold_backward (y <= 0 ? 0 : g) passes the
        // gradient where y > 0 and where y is NaN (relu keeps NaN). NaN is tested on its bits:
        // WGSL lets a compiler assume no NaN, and fold the comparison alone.
        case GRAD_RELU_FROM_Y: { return select(g, 0.0, s <= 0.0 && !isnan_f(s)); }
        case GRAD_SIGMOID_FROM_Y: { return g * s * (1.0 - s); }
        case GRAD_TANH_FROM_Y: { return g * (1.0 - s * s); }
        case GRAD_GELU_FROM_X: { return g * gelu_grad(s); }
        case GRAD_GELU_TANH_FROM_X: { return g * gelu_tanh_grad(s); }
        // silu from its input: sigmoid(x) (1 + x (1 - sigmoid(x))), as PyTorch's silu_backward.
        case GRAD_SILU_FROM_X: {
            let sg = sigmoid_f(s);
            return g * (sg * (1.0 + s * (1.0 - sg)));
        }
        // sign(NaN) is 0 in PyTorch (WGSL leaves it unspecified), so abs passes 0 there.
        case GRAD_ABS_FROM_X: { return g * select(sign(s), 0.0, isnan_f(s)); }
        case GRAD_SQRT_FROM_Y: { return g / (2.0 * s); }
        // maximum / minimum: the weight of operand g against s, as PyTorch's
        // where(g == s, 1/2, 1).masked_fill(g < s (max) or g > s (min), 0): ties split half and
        // half, and a NaN on either side gives both operands the whole gradient.
        case GRAD_MAX_WEIGHT: { return select(select(1.0, 0.0, g < s), 0.5, g == s); }
        case GRAD_MIN_WEIGHT: { return select(select(1.0, 0.0, g > s), 0.5, g == s); }
        // pow's masks: a term is 0 where the mask operand is 0 (PyTorch's masked_fill for
        // exponent == 0 and for base == 0).
        case GRAD_ZERO_WHERE_ZERO: { return select(g, 0.0, s == 0.0); }
        // hardtanh (relu6): 0 at and past its bounds, NaN passes (PyTorch's
        // hardtanh_backward tests x <= min || x >= max); hardsigmoid passes strictly inside
        // only (-3 < x < 3), NaN included in the 0s.
        // The bounds compared on the bits (gt_f / lt_f): a GPU that flushes subnormals would
        // find 1e-40 at a bound of 0. The bound is never NaN for the *_OR_NAN codes.
        case GRAD_PASS_ABOVE_OR_NAN: { return select(g, 0.0, !isnan_f(s) && !gt_f(s, p.scalar)); }
        case GRAD_PASS_BELOW_OR_NAN: { return select(g, 0.0, !isnan_f(s) && !lt_f(s, p.scalar)); }
        case GRAD_PASS_ABOVE: { return select(0.0, g, gt_f(s, p.scalar)); }
        case GRAD_PASS_BELOW: { return select(0.0, g, lt_f(s, p.scalar)); }
        // PyTorch's hardswish_backward from x, in f32 and rounded once: an exact 0 up to -3
        // (an infinite g included), g (x / 3 + 1/2) below 3, g from 3 on (the kernels since
        // pytorch/pytorch#148049: 0 at -3 and 1 at 3); NaN x gives NaN, as its vectorized CPU
        // kernel (its scalar and CUDA kernels pass g there).
        case GRAD_HARDSWISH_FROM_X: {
            if (isnan_f(s)) {
                return g * s;
            }
            if (s <= -3.0) {
                return 0.0;
            }
            return select(g * (s / 3.0 + 0.5), g, s >= 3.0);
        }
        case GRAD_SOFTPLUS_FROM_X: { return g * sigmoid_f(s); }
        // leaky_relu_backward: `x > 0 ? g : g * slope`, a NaN x on the slope's side.
        case GRAD_LEAKY_FROM_X: { return select(g * p.scalar, g, s > 0.0 && !isnan_f(s)); }
        default: { return g; }
    }
}

@compute @workgroup_size(WG)
fn grad_binary(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= p.numel) {
        return;
    }
    var ia = p.off_a;
    var ib = p.off_b;
    var rem = p.base + i;
    for (var d = i32(p.rank) - 1; d >= 0; d--) {
        let k = u32(d);
        let n = dim_of(p.shape, k);
        let co = rem % n;
        rem = rem / n;
        ia += co * dim_of(p.sa, k);
        ib += co * dim_of(p.sb, k);
    }
    dst[i] = T(combine(f32(a[ia]), f32(b[ib])));
}

@compute @workgroup_size(WG)
fn narrow_grad(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= p.numel) {
        return;
    }
    var ia = p.off_a;
    var inside = true;
    var rem = i;
    for (var d = i32(p.rank) - 1; d >= 0; d--) {
        let k = u32(d);
        let n = dim_of(p.shape, k);
        var co = rem % n;
        rem = rem / n;
        if (k == p.dim) {
            if (co < p.start || co >= p.start + p.len) {
                inside = false;
            }
            co = co - min(co, p.start);
        }
        ia += co * dim_of(p.sa, k);
    }
    if (inside) {
        dst[i] = a[ia];
    } else {
        dst[i] = T(0.0);
    }
}
