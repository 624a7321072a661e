// Activation functions shared by the map kernel and the fused epilogues (GEMM, conv, ...).
// The runtime places this file between the dtype prelude and a kernel that lists it.

// NaN tests and NaN-propagating max/min. WGSL leaves max/min of a NaN to the implementation
// (lavapipe returns the other operand), and compilers may fold `v != v`, so the test reads the
// bits. PyTorch propagates NaN through relu, maximum/minimum and the max/min reductions: a NaN
// that vanishes would hide a diverging training run.
fn isnan_f(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

fn max_nan(a: f32, b: f32) -> f32 {
    return select(max(a, b), a + b, isnan_f(a) || isnan_f(b));
}

fn min_nan(a: f32, b: f32) -> f32 {
    return select(min(a, b), a + b, isnan_f(a) || isnan_f(b));
}

// Division within 1 ulp on every adapter. WGSL allows 2.5 ulp for `/`, and GPUs use that
// freedom (NVIDIA: a reciprocal times the dividend), so the mean of ones came out 0.99999994.
// One Newton step corrects the quotient: with a fused multiply-add the residual a - q * b is
// exact, and q + residual / b rounds to the nearest float in all but rare ties. A zero,
// infinite or NaN quotient (a zero or infinite divisor, overflow, underflow) is kept as `/`
// gave it, since the residual of those is not meaningful; so is one by a divisor of
// 2^-128 or smaller (a subnormal kept by the adapter), whose reciprocal is inf.
fn div_f(a: f32, b: f32) -> f32 {
    let q = a / b;
    let r = fma(-q, b, a);
    let refined = fma(r, 1.0 / b, q);
    let qa = bitcast<u32>(q) & 0x7fffffffu;
    let ba = bitcast<u32>(b) & 0x7fffffffu;
    return select(q, refined, qa != 0u && qa < 0x7f800000u && ba < 0x7f800000u && ba > 0x00200000u);
}

// exp within a few ulp on every adapter: x = n ln 2 + r with |r| <= ln 2 / 2 (ln 2 in two
// parts, Cody and Waite's reduction, so r is exact to about 2^-40), then exp(r) scaled by 2^n.
// WGSL allows exp 3 + 2|x| ulp, and GPUs take it: exp2 of x * log2(e) rounded to f32 is off by
// about |x| * 6e-8 relative (1.2e-6 at x = 20, past PyTorch's f32 tolerance); the builtin on r
// stays within a few ulp. Past the range: inf above ln(f32 max), 0 below ln of half the least
// subnormal (tested before the reduction, which would turn +-inf into NaN).
fn exp_f(x: f32) -> f32 {
    if (isnan_f(x)) {
        return x;
    }
    if (x > 88.8) {
        return bitcast<f32>(0x7f800000u | (bitcast<u32>(x) & 0u));
    }
    if (x < -104.0) {
        return 0.0;
    }
    let n = round(x * 1.4426950408889634);
    let r = fma(-n, 1.4286068203094172e-6, fma(-n, 0.693145751953125, x));
    let e = i32(n);
    // In two steps: ldexp by an exponent past f32's range is indeterminate in WGSL.
    let h = e / 2;
    return ldexp(ldexp(exp(r), h), e - h);
}

fn relu_f(v: f32) -> f32 {
    return select(max(v, 0.0), v, isnan_f(v));
}

// log and sqrt outside their domains: WGSL leaves log(0), log(x < 0) and sqrt(x < 0)
// undefined (SwiftShader's log(0) is -88, not -inf), so the map ops spell out PyTorch's
// -inf and NaN. The constants are built at run time (WGSL constants cannot hold them).
fn log_f(v: f32) -> f32 {
    let inf = bitcast<f32>(0x7f800000u | (bitcast<u32>(v) & 0u));
    let nan = bitcast<f32>(0x7fc00000u | (bitcast<u32>(v) & 0u));
    if (v == 0.0) {
        return -inf;
    }
    if (v < 0.0) {
        return nan;
    }
    // Infinity tested on its bits: a compiler may assume no infinities (WGSL allows it, and
    // Metal compiles with fast math) and fold a comparison with one.
    return select(log(v), inf, bitcast<u32>(v) == 0x7f800000u);
}

// log(1 + x), accurate near 0 where 1 + x rounds (torch.log1p). Below |x| = 0.5 it is
// 2 atanh(s), s = x / (2 + x) in (-1/3, 1/5), whose odd series in s converges fast (s^2 < 1/9:
// eight terms leave about 1e-9, under an f32 ulp) and rounds no 1 + x; above, 1 + x is exact
// (Sterbenz, x <= -0.5) or loses under an ulp of the result. Domain edges as log_f: -inf at
// -1, NaN below; NaN tested on its bits (a compiler may assume no NaN and fold the compare).
fn log1p_f(x: f32) -> f32 {
    if (isnan_f(x)) {
        return x;
    }
    if (abs(x) < 0.5) {
        let s = div_f(x, 2.0 + x);
        let s2 = s * s;
        var t = 1.0 / 15.0;
        t = fma(t, s2, 1.0 / 13.0);
        t = fma(t, s2, 1.0 / 11.0);
        t = fma(t, s2, 1.0 / 9.0);
        t = fma(t, s2, 1.0 / 7.0);
        t = fma(t, s2, 1.0 / 5.0);
        t = fma(t, s2, 1.0 / 3.0);
        t = fma(t, s2, 1.0);
        return 2.0 * s * t;
    }
    return log_f(1.0 + x);
}

// log(1 + e^x) as max(x, 0) + log1p(e^-|x|): no overflow, and the small term keeps its
// digits (softplus(-20) is 2.06e-9, softplus(20) is 20 + 2.06e-9).
fn softplus_f(v: f32) -> f32 {
    return max_nan(v, 0.0) + log1p_f(exp(-abs(v)));
}

fn sqrt_f(v: f32) -> f32 {
    let nan = bitcast<f32>(0x7fc00000u | (bitcast<u32>(v) & 0u));
    return select(sqrt(v), nan, v < 0.0);
}

// PyTorch's pow, C99's special values: x^0 = 1 and 1^e = 1 (NaN included), (-1)^(+-inf) = 1,
// a negative base with an integer exponent keeps its sign rule, with a fractional one it is
// NaN, and (-inf)^e is +-0 or +-inf by e's sign and parity; WGSL's pow leaves x <= 0
// undefined (and 1^inf is NaN through exp2(inf * 0)).
fn pow_f(x: f32, e: f32) -> f32 {
    if (e == 0.0 || x == 1.0) {
        return 1.0;
    }
    if (isnan_f(x) || isnan_f(e)) {
        return x + e;
    }
    // Small integer exponents exactly, as PyTorch's pow kernels special-case them (WGSL's pow
    // is exp2(e log2 x), a few ulp off: 3^2 would not be 9); each form also gives C99's
    // values at +-0 and +-inf.
    if (e == 1.0) {
        return x;
    }
    if (e == 2.0) {
        return x * x;
    }
    if (e == 3.0) {
        return x * x * x;
    }
    if (e == -1.0) {
        return div_f(1.0, x);
    }
    if (e == -2.0) {
        return div_f(1.0, x * x);
    }
    // Built at run time: WGSL constant expressions cannot hold infinities or NaN.
    let inf = bitcast<f32>(0x7f800000u | (bitcast<u32>(x) & 0u));
    // An odd integer: below 2^24 in magnitude, tested on the bits (every f32 from 2^24 on is
    // even, and for e = +-inf the arithmetic below is inf - inf, which a compiler assuming
    // no infinities, as WGSL allows, need not keep unequal to 1).
    let small = (bitcast<u32>(e) & 0x7fffffffu) < 0x4b800000u;
    let odd = small && e == floor(e) && (e - 2.0 * floor(e * 0.5)) == 1.0;
    // Infinities tested on their bits, as in log_f (a fast-math compiler may fold `== inf`).
    if (x == -1.0 && (bitcast<u32>(e) & 0x7fffffffu) == 0x7f800000u) {
        return 1.0;
    }
    if (bitcast<u32>(x) == 0xff800000u) {
        let mag = select(0.0, inf, e > 0.0);
        return select(mag, -mag, odd);
    }
    if (x == 0.0) {
        // +-0 or +-inf by e's sign; negative only for -0 with an odd e.
        let mag = select(0.0, inf, e < 0.0);
        return select(mag, -mag, odd && bitcast<u32>(x) == 0x80000000u);
    }
    let r = pow(abs(x), e);
    if (x < 0.0) {
        if (e != floor(e)) {
            // A quiet NaN, also built at run time (inf - inf may be folded to 0).
            return bitcast<f32>(0x7fc00000u | (bitcast<u32>(x) & 0u));
        }
        return select(r, -r, odd);
    }
    return r;
}

// Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): WGSL has no erf and GELU needs the exact form.
fn erf_approx(v: f32) -> f32 {
    let a = abs(v);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    return sign(v) * (1.0 - poly * exp(-a * a));
}

// Overflow-safe forms: exp of a large argument must not turn into inf/inf = NaN.
fn sigmoid_f(v: f32) -> f32 {
    if (v >= 0.0) {
        return 1.0 / (1.0 + exp(-v));
    }
    let e = exp(v);
    return e / (1.0 + e);
}

// Below 0.625, 1 - e^(-2|v|) cancels (relative error grows like 1/|v|; tanh(1e-8) would be 0),
// so use v * P(v^2): a degree-5 Chebyshev fit of tanh(v)/v on [0, 0.625], about 1 ulp in f32.
fn tanh_f(v: f32) -> f32 {
    let a = abs(v);
    if (a < 0.625) {
        let y = v * v;
        let p = ((((-0.00565713518 * y + 0.0205881915) * y - 0.0537201077) * y + 0.133311141) * y
            - 0.333332599) * y + 1.0;
        return v * p;
    }
    let t = exp(-2.0 * a);
    return sign(v) * (1.0 - t) / (1.0 + t);
}

fn gelu_f(v: f32) -> f32 {
    return 0.5 * v * (1.0 + erf_approx(v * 0.70710678118654752));
}

// Epilogue activation codes: the ACT_* constants the runtime emits from the Rust table
// (ACTIVATION_DEFS in src/ops/activation.rs).
fn activate(v: f32, code: u32) -> f32 {
    switch code {
        case ACT_RELU: { return relu_f(v); }
        case ACT_GELU: { return gelu_f(v); }
        case ACT_SIGMOID: { return sigmoid_f(v); }
        case ACT_TANH: { return tanh_f(v); }
        default: { return v; }
    }
}
