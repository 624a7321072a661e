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

// A float's place in the order of floats, on its bits: a GPU that flushes subnormals would
// compare 1e-40 equal to 0, where PyTorch says 1e-40 > 0. -0.0 takes +0.0's key; NaN gets a
// key past +inf's, so callers test NaN first.
fn float_key(v: f32) -> u32 {
    var b = bitcast<u32>(v);
    if ((b & 0x7fffffffu) == 0u) {
        b = 0u;
    }
    return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}

// a > b in IEEE's order on the keys; false where either is NaN.
fn gt_f(a: f32, b: f32) -> bool {
    return !isnan_f(a) && !isnan_f(b) && float_key(a) > float_key(b);
}

// a < b in IEEE's order on the keys; false where either is NaN.
fn lt_f(a: f32, b: f32) -> bool {
    return !isnan_f(a) && !isnan_f(b) && float_key(a) < float_key(b);
}

// PyTorch's clamp_min(x, s) / clamp_max(x, s) (and clamp, hardtanh, relu6 on them): x is kept
// unless it is past the bound, so on the tie of -0.0 and 0.0 the result is x's zero, where
// WGSL's max/min may return either. The tie is found on the bits (a compiler may fold a
// compare-and-select into max): both operands zero.
fn clamp_min_f(v: f32, s: f32) -> f32 {
    return select(max_nan(v, s), v, ((bitcast<u32>(v) | bitcast<u32>(s)) & 0x7fffffffu) == 0u);
}

fn clamp_max_f(v: f32, s: f32) -> f32 {
    return select(min_nan(v, s), v, ((bitcast<u32>(v) | bitcast<u32>(s)) & 0x7fffffffu) == 0u);
}

// Division correctly rounded on every adapter. WGSL allows 2.5 ulp for `/`, and GPUs use that
// freedom (NVIDIA: a reciprocal times the dividend), so the mean of ones came out 0.99999994.
// One Newton step corrects the quotient: the residual a - q * b is exact, and
// q + residual / b rounds to the nearest float in all but rare near-ties, which a last
// residual settles. The residuals are computed on the integer significands (quot_residual),
// since no float formula for it survives every
// compiler: Vulkan's fma need not be fused (lavapipe's is not: fma(-q, b, a) moved 10% of the
// correctly rounded quotients one ulp off), and without SPIR-V's NoContraction, which naga does
// not emit, drivers may contract and reassociate float arithmetic (NVIDIA's turned both
// Dekker's two-float product and a sum of exact split partial products into the rounded
// a - q * b: on an H200 17% of quotients stayed off, 2^28 by two ulps). A zero, infinite or NaN
// quotient (a zero or infinite divisor, overflow, underflow) is kept as `/` gave it, since
// the residual of those is not meaningful; so is any quotient whose dividend, divisor or
// quotient lies outside [2^-100, 2^100): there q * b may overflow (a near f32's maximum: the
// residual was NaN) or the correction r / b falls among the subnormals and rounds twice.
fn div_f(a: f32, b: f32) -> f32 {
    let q = a / b;
    let c = quot_lo(a, b, q);
    let r = q + c.x;
    // The step rounds wrong only where a / b lies within about 2^-25 ulp of a midpoint and
    // the correction's own rounding crosses it (1 / 0.99999994 from q = 1.0000002 gave 1.0):
    // one more residual, on the integers, moves such a quotient by its last ulp (a quotient
    // of floats is never exactly a midpoint, so more than half an ulp off is decided).
    let ra = bitcast<u32>(r) & 0x7fffffffu;
    let x = quot_residual(bitcast<u32>(a) & 0x7fffffffu, bitcast<u32>(b) & 0x7fffffffu, ra);
    let off = x.ok && 2u * u32(abs(x.r)) > x.mb;
    let fixed = bitcast<f32>(select(bitcast<u32>(r) - 1u, bitcast<u32>(r) + 1u, x.r > 0));
    return select(q, select(r, fixed, off), c.y != 0.0);
}

// (a - q b) / b, the correction of a quotient q within a few ulp of a / b, and in y 1 where it
// applies (dividend, divisor and quotient in [2^-100, 2^100)), else (0, 0). The residual is
// exact (div_residual); its division by b is within a few ulp of the correction.
fn quot_lo(a: f32, b: f32, q: f32) -> vec2<f32> {
    let qa = bitcast<u32>(q) & 0x7fffffffu;
    let ba = bitcast<u32>(b) & 0x7fffffffu;
    let aa = bitcast<u32>(a) & 0x7fffffffu;
    // 0x0d800000 is 2^-100, 0x71800000 2^100.
    let lo = 0x0d800000u;
    let hi = 0x71800000u;
    let inside = qa >= lo && qa < hi && ba >= lo && ba < hi && aa >= lo && aa < hi;
    // The correction of |q| (the signs of a, b and q agree), with q's sign.
    let step = div_residual(aa, ba, qa);
    let c = bitcast<f32>(bitcast<u32>(step) ^ (bitcast<u32>(q) & 0x80000000u));
    let ok = inside && !isnan_f(step);
    return select(vec2<f32>(0.0), vec2<f32>(c, 1.0), ok);
}

// (|a| - |q| |b|) / |b| for positive normal floats given by their bits, where q is within a few
// ulp of a / b: the residual in units of 2^(eq + eb - 46) is ma 2^s - mq mb on the 24-bit
// significands (s = ea - eq - eb + 23, 22 to 25), at most about 3 mb in magnitude, so u32
// arithmetic that wraps past 2^32 still gives it exactly; divided by mb it is the correction in
// units of q's ulp, 2^(eq - 23). A shift out of that range (q far from a / b) gives NaN, and
// div_f keeps q.
fn div_residual(aa: u32, ba: u32, qa: u32) -> f32 {
    let x = quot_residual(aa, ba, qa);
    let nan = bitcast<f32>(0x7fc00000u | (aa & 0u));
    return select(nan, ldexp(f32(x.r) / f32(x.mb), x.eq - 23), x.ok);
}

// A quotient's exact residual on the integer significands (div_residual): r in units of
// 2^(eq + eb - 46), b's significand mb, q's unbiased exponent eq, and whether the shift was in
// range (q within a few ulp of a / b).
struct QuotResidual {
    r: i32,
    mb: u32,
    eq: i32,
    ok: bool,
}

fn quot_residual(aa: u32, ba: u32, qa: u32) -> QuotResidual {
    let ea = i32(aa >> 23u);
    let eb = i32(ba >> 23u) - 127;
    let eq = i32(qa >> 23u) - 127;
    let s = ea - eq - eb + 23 - 127;
    let ma = (aa & 0x007fffffu) | 0x00800000u;
    let mb = (ba & 0x007fffffu) | 0x00800000u;
    let mq = (qa & 0x007fffffu) | 0x00800000u;
    let r = bitcast<i32>((ma << u32(clamp(s, 0, 31))) - mq * mb);
    return QuotResidual(r, mb, eq, s >= 20 && s <= 26);
}

// e^r for |r| <= 0.35 (ln 2 / 2 and a little): Taylor to r^9 (the rest under 2e-10) in
// Horner's form, about 1 ulp; lavapipe's builtin was 2.6e-7 off on this range.
fn exp_small(r: f32) -> f32 {
    var p = 1.0 / 362880.0;
    p = fma(p, r, 1.0 / 40320.0);
    p = fma(p, r, 1.0 / 5040.0);
    p = fma(p, r, 1.0 / 720.0);
    p = fma(p, r, 1.0 / 120.0);
    p = fma(p, r, 1.0 / 24.0);
    p = fma(p, r, 1.0 / 6.0);
    p = fma(p, r, 0.5);
    p = fma(p, r, 1.0);
    return fma(p, r, 1.0);
}

// exp within about 1 ulp on every adapter: x = n ln 2 + r with |r| <= ln 2 / 2 (ln 2 in two
// parts, Cody and Waite's reduction, so r is exact to about 2^-40), then exp_small(r) scaled by
// 2^n. WGSL allows exp 3 + 2|x| ulp, and adapters take it: exp2 of x * log2(e) rounded to f32
// is off by about |x| * 6e-8 relative (lavapipe's 3.8e-6 at -85; 1.2e-6 at x = 20 is already
// past PyTorch's f32 tolerance). Past the range: inf above ln(f32 max), 0 below ln of half the least
// subnormal (tested before the reduction, which would turn +-inf into NaN).
fn exp_f(x: f32) -> f32 {
    if (isnan_f(x)) {
        return x;
    }
    // From f32(88.72284), the first float whose exp rounds past f32's maximum: inf by the
    // test, not by ldexp overflowing (which SPIR-V's Ldexp leaves undefined).
    if (x >= 88.72284) {
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
    return ldexp(ldexp(exp_small(r), h), e - h);
}

// PyTorch's clamp_min(x, 0): only values below 0 become 0, so NaN and -0.0 pass through
// (WGSL's max(-0.0, 0.0) may return either zero). Tested on the bits, as isnan_f: a compiler
// may turn a float compare-and-select into max, which need not keep -0.0. Below 0: the sign
// bit, a nonzero magnitude, and not NaN (-inf is 0xff800000).
fn relu_f(v: f32) -> f32 {
    let b = bitcast<u32>(v);
    return select(v, 0.0, b > 0x80000000u && b <= 0xff800000u);
}

// log and sqrt outside their domains: WGSL leaves log(0), log(x < 0) and sqrt(x < 0)
// undefined (SwiftShader's log(0) is -88, not -inf), so the map ops spell out PyTorch's
// -inf and NaN. The constants are built at run time (WGSL constants cannot hold them).
fn log_f(v: f32) -> f32 {
    let inf = bitcast<f32>(0x7f800000u | (bitcast<u32>(v) & 0u));
    let nan = bitcast<f32>(0x7fc00000u | (bitcast<u32>(v) & 0u));
    // Cases on the bits: a compiler may assume no infinities (WGSL allows it, and Metal
    // compiles with fast math) and fold a comparison with one, and an adapter may flush a
    // subnormal to 0 in a comparison.
    let b = bitcast<u32>(v);
    if (isnan_f(v)) {
        return v;
    }
    if ((b & 0x7fffffffu) == 0u) {
        return -inf;
    }
    if (b >= 0x80000000u) {
        return nan;
    }
    if (b == 0x7f800000u) {
        return inf;
    }
    // v = f 2^k with f in [0.71, 1.42): log v = k ln 2 + ln f, ln 2 in two parts (k times the
    // high part is exact) and ln f from ln_near_one. The builtin was 1e-7 off near 1 on
    // lavapipe (log(0.98) 5e-6 relative), and about -88 for every subnormal.
    let fk = frac_exp(b);
    let k = fk.y;
    let l = ln_near_one(fk.x);
    return (k * 0.693145751953125 + l.x) + (k * 1.4286068203094172e-6 + l.y);
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

// 1 / sqrt(v) as PyTorch's rstd and invstd: inf at +-0 (with 0's sign, as 1 / sqrt(-0)), 0 at
// +inf, NaN where v is negative or NaN (a zero eps over a constant channel, an infinite one, a
// negative eps, which PyTorch takes, over a small variance). WGSL leaves inverseSqrt
// indeterminate outside the positive finite floats, so v is classified by its bits (a
// compiler may assume no NaN in comparisons, and an adapter that flushes subnormals would
// take a positive subnormal for 0): a subnormal m 2^-149 is read as the normal m 2^-21 times
// 2^-128, whose rsqrt is rsqrt(m 2^-21) 2^64. The special values are built at run time (WGSL
// has no inf or NaN literal).
fn rsqrt_f(v: f32) -> f32 {
    let b = bitcast<u32>(v);
    let mag = b & 0x7fffffffu;
    if (mag == 0u) {
        return bitcast<f32>(b | 0x7f800000u);
    }
    if (b > 0x7f800000u) {
        return bitcast<f32>(0x7fc00000u | (b & 0u));
    }
    if (b == 0x7f800000u) {
        return bitcast<f32>(b & 0u);
    }
    if (b < 0x00800000u) {
        return inverseSqrt(f32(b) * 4.76837158203125e-7) * 18446744073709551616.0;
    }
    return inverseSqrt(v);
}

// PyTorch's pow, C99's special values: x^0 = 1 and 1^e = 1 (NaN included), (-1)^(+-inf) = 1,
// a negative base with an integer exponent keeps its sign rule, with a fractional one it is
// NaN, and (-inf)^e is +-0 or +-inf by e's sign and parity; WGSL's pow leaves x <= 0
// undefined (and 1^inf is NaN through exp2(inf * 0)).
// a * b as hi + lo, within about 2^-35 relative of the exact product (no overflow or
// underflow assumed); |lo| may reach 2^-11 |hi|. `fma(a, b, -a * b)` would give the rounding
// error of a * b in one step, but Vulkan need not fuse fma (lavapipe does not, which left pow
// 3e-6 off), nor HLSL's mad; Dekker's error term, which subtracts the rounded product a * b
// from exact partial products, breaks where a compiler fuses that subtraction with the
// multiplication (on an H200 pow came out f32-accurate only); and the error-free sums that
// would turn the partial products into a rounded hi fold away where a compiler simplifies
// (x + y) - x to y (lavapipe's does). So no rounded product and no such sum takes part: each
// factor splits into its top 12 significant bits and the rest (split12), hi is the product of
// the tops (exact: 12 x 12 bits) and lo the other three partial products (each exact, so a
// compiler contracting one into the sum changes nothing), summed with a rounding of about
// 2^-24 of themselves. (Veltkamp's split, 4097 a - (4097 a - a), breaks when its inner
// difference is fused.)
fn two_prod(a: f32, b: f32) -> vec2<f32> {
    let x = split12(a);
    let y = split12(b);
    return vec2<f32>(x.x * y.x, (x.x * y.y + x.y * y.x) + x.y * y.y);
}

// v as its top 12 significant bits (the low 12 mantissa bits masked off) and the rest, both
// exact: products of two such halves fit f32's 24 bits.
fn split12(v: f32) -> vec2<f32> {
    let h = bitcast<f32>(bitcast<u32>(v) & 0xfffff000u);
    return vec2<f32>(h, v - h);
}

// (f, k) with x = f 2^k and f in [0.71, 1.42), from the bits of a positive, finite, nonzero x.
// A subnormal is the integer of its bits times 2^-149, so no arithmetic touches it (an adapter
// may flush it to 0).
fn frac_exp(bits: u32) -> vec2<f32> {
    var w = bitcast<f32>(bits);
    var kb = 0.0;
    if (bits < 0x00800000u) {
        w = f32(bits);
        kb = -149.0;
    }
    let fe = frexp(w);
    var f = fe.fract;
    var k = f32(fe.exp) + kb;
    if (f < 0.70710678) {
        f *= 2.0;
        k -= 1.0;
    }
    return vec2<f32>(f, k);
}

// ln f for f in [0.7, 1.42] as hi + lo, within about 2e-8: 2 atanh(s) with s = (f - 1) / (f + 1)
// carried in two floats (|s| <= 0.172: the series to s^13 leaves under 1e-12). lavapipe's
// builtin log is 1e-7 off there (5e-6 relative at 0.98), which a power's exponent multiplies.
// s's low part is the quotient's exact correction (quot_lo) and f + 1's rounding v_lo is read
// on the integer significands, so they hold under any contraction or reassociation a driver
// applies (lavapipe's NIR folds f - ((f + 1) - 1) to 0 and a closing two-sum to nothing, which
// left pow 1e-5 off for large exponents). hi + lo is returned unnormalized (|lo| < 0.011 |hi|).
fn ln_near_one(f: f32) -> vec2<f32> {
    let u = f - 1.0;
    let v = f + 1.0;
    let v_lo = ldexp(f32(i32(units24(f) + 0x01000000u) - i32(units24(v))), -24);
    let s = div_f(u, v);
    let s_lo = quot_lo(u, v, s).x - (s * v_lo) / v;
    let s2 = s * s;
    var t = 1.0 / 13.0;
    t = fma(t, s2, 1.0 / 11.0);
    t = fma(t, s2, 1.0 / 9.0);
    t = fma(t, s2, 1.0 / 7.0);
    t = fma(t, s2, 1.0 / 5.0);
    t = fma(t, s2, 1.0 / 3.0);
    return vec2<f32>(2.0 * s, 2.0 * s_lo + 2.0 * s * s2 * t);
}

// A positive normal float in [0.5, 4) in units of 2^-24, from its bits (exact: at most 26
// bits).
fn units24(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    return ((b & 0x007fffffu) | 0x00800000u) << ((b >> 23u) - 126u);
}

// x as its integer part (toward zero) and the rest, both from x's bits, so no compiler can
// fold x - i into other sums (x finite; integers from 2^23 on have no rest).
fn int_frac(x: f32) -> vec2<f32> {
    let b = bitcast<u32>(x);
    let biased = (b >> 23u) & 0xffu;
    if (biased < 127u) {
        return vec2<f32>(0.0, x);
    }
    if (biased >= 150u) {
        return vec2<f32>(x, 0.0);
    }
    let m = (b & 0x007fffffu) | 0x00800000u;
    return split_point(m, 150u - biased, select(1.0, -1.0, (b >> 31u) == 1u));
}

// sign v 2^-shift (shift 1 to 31) as its integer part and the rest, each exact as far as f32
// holds it: the integer bits above the binary point and the fraction below it.
fn split_point(v: u32, shift: u32, sign: f32) -> vec2<f32> {
    let frac = v & ((1u << shift) - 1u);
    return vec2<f32>(sign * f32(v >> shift), sign * ldexp(f32(frac), -i32(shift)));
}

// e k for an integer |k| < 256 as (i, f, z): i an integer and |f| < 1 with e k = i + f (f
// rounded to f32), from e's significand times |k| in u32 (below 2^32) split at e's binary
// point, so no float sum can lose its low bits; z = 0, or +-1 with i = f = 0 where |e k| >=
// 2^20 (z its sign).
fn mul_int(e: f32, k: i32) -> vec3<f32> {
    let eb = bitcast<u32>(e);
    let mag = u32(abs(k));
    if (mag == 0u || (eb & 0x7fffffffu) == 0u) {
        return vec3<f32>(0.0);
    }
    let neg = ((eb >> 31u) == 1u) != (k < 0);
    let sign = select(1.0, -1.0, neg);
    let biased = i32((eb >> 23u) & 0xffu);
    let sub = biased == 0;
    let me = select((eb & 0x007fffffu) | 0x00800000u, eb & 0x007fffffu, sub);
    // e = me 2^-shift.
    let shift = 150 - select(biased, 1, sub);
    if (shift <= 3) {
        return vec3<f32>(0.0, 0.0, sign);
    }
    let prod = me * mag;
    if (shift >= 32) {
        return vec3<f32>(0.0, sign * ldexp(f32(prod), -shift), 0.0);
    }
    if ((prod >> u32(shift)) >= 0x00100000u) {
        return vec3<f32>(0.0, 0.0, sign);
    }
    return vec3<f32>(split_point(prod, u32(shift), sign), 0.0);
}

// |x|^e for x != 0 (NaN, zero and the exponents pow_f special-cases are handled there), as
// 2^t with t = e log2 |x| = e k + e log2 f, |x| = f 2^k with f in [0.71, 1.42) (frac_exp) and
// ln f in two floats (ln_near_one): WGSL's pow is exp2(e * log2 x) in f32, whose rounding of
// the exponent costs about |e log2 x| * 6e-8 relative (641^3.7 came out 2.6e-6 off on
// lavapipe, twice PyTorch's f32 tolerance). t's integer part is taken off exactly before any
// float sum: e k on the integers (mul_int), e log2 f as an exact product of its top halves
// (two_prod) less its rounding, and the small rest; the fractions left are under 2 in
// magnitude, so whatever order a driver sums them in costs about 1e-7 (summing t first, as
// a two-float Fast2Sum did, cost 1e-6 on an H200, whose compiler reassociates). Then
// 2^t = 2^n e^(ln 2 (t - n)) with exp_small on |t - n| <= 1/2.
// Infinite |x| and infinite e keep the builtin (their results are 0, 1 or inf); subnormal |x|
// goes through frac_exp (lavapipe's builtin read every subnormal as about 2^-127).
fn pow_abs(a: f32, e: f32) -> f32 {
    let inf = bitcast<f32>(0x7f800000u | (bitcast<u32>(a) & 0u));
    let ba = bitcast<u32>(a) & 0x7fffffffu;
    let eb = bitcast<u32>(e);
    if ((eb & 0x7fffffffu) == 0x7f800000u) {
        // An infinite exponent (|x| = 1 is pow_f's): 0 or inf by which side of 1 |x| is and
        // e's sign, on the bits (the builtin's log2 of 0.99999994 may be 0, and inf * 0 NaN).
        return select(0.0, inf, (ba > 0x3f800000u) == ((eb >> 31u) == 0u));
    }
    if (ba >= 0x7f800000u) {
        return pow(a, e);
    }
    let fk = frac_exp(ba);
    let l = ln_near_one(fk.x);
    // log2 f = p.x + p_lo (log2(e) in two parts), |log2 f| < 0.52.
    // ln f's low part (up to 0.011 of it) gets its own exact product: rounded into p_lo, e
    // times it cost up to 5e-7 near |t| = 128.
    let p = two_prod(l.x, 1.4426950408889634);
    let pl = two_prod(l.y, 1.4426950408889634);
    let p_lo = p.y + (pl.y + l.x * 1.925963033500345e-8);
    let ek = mul_int(e, i32(fk.y));
    if (ek.z != 0.0) {
        // |e k| >= 2^20 with |k| >= 1 > 2 |log2 f|: |t| > 3000.
        return select(0.0, inf, ek.z > 0.0);
    }
    // e log2 f's exact top product, split on its bits: c.x itself may reach |t|, and summed
    // with the small terms first it would cost 5e-6.
    let c = two_prod(e, p.x);
    let cl = two_prod(e, pl.x);
    let cf = int_frac(c.x);
    let g = (ek.y + cf.y) + (cl.x + ((c.y + cl.y) + e * p_lo));
    let ng = round(g);
    let n = (ek.x + cf.x) + ng;
    let r = g - ng;
    let y = exp_small(r * 0.6931471805599453);
    // 2^n y is past f32's range from 2^128 on: decided on n and y (n + r rounds to 128 for r
    // just below 0, whose results are still finite), before ldexp could overflow (which SPIR-V
    // leaves undefined).
    if (n > 128.0 || (n == 128.0 && y >= 1.0)) {
        return inf;
    }
    if (n + r < -151.0) {
        return 0.0;
    }
    let m = i32(n);
    let h = m / 2;
    return ldexp(ldexp(y, h), m - h);
}

// Whether the float of bits `b` is an integer (2: odd, 1: even) or not (0), on its bits (a GPU
// that flushes subnormals finds floor(1e-40) == 1e-40); infinities count as even.
fn int_kind(b: u32) -> u32 {
    let biased = (b >> 23u) & 0xffu;
    if ((b & 0x7fffffffu) == 0u || biased > 150u) {
        return 1u;
    }
    if (biased < 127u) {
        return 0u;
    }
    let shift = 150u - biased;
    let m = (b & 0x007fffffu) | 0x00800000u;
    if ((m & ((1u << shift) - 1u)) != 0u) {
        return 0u;
    }
    return 1u + ((m >> shift) & 1u);
}

fn pow_f(x: f32, e: f32) -> f32 {
    let eb = bitcast<u32>(e);
    // e's zero and sign on the bits, as x's below (a flushing GPU took 1e-40 for 0).
    let e_zero = (eb & 0x7fffffffu) == 0u;
    let e_neg = (eb >> 31u) == 1u && !e_zero;
    let e_pos = (eb >> 31u) == 0u && !e_zero;
    if (e_zero || x == 1.0) {
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
    // Integer and odd on the bits (every f32 from 2^24 on is even, and for e = +-inf float
    // arithmetic would be inf - inf, which a compiler assuming no infinities, as WGSL allows,
    // need not keep unequal to 1).
    let kind = int_kind(eb);
    let odd = kind == 2u;
    // Infinities tested on their bits, as in log_f (a fast-math compiler may fold `== inf`).
    if (x == -1.0 && (bitcast<u32>(e) & 0x7fffffffu) == 0x7f800000u) {
        return 1.0;
    }
    if (bitcast<u32>(x) == 0xff800000u) {
        let mag = select(0.0, inf, e_pos);
        return select(mag, -mag, odd);
    }
    // Zero, the magnitude and the sign on the bits: a GPU that flushes subnormals compares
    // 1e-40 equal to 0 (an H200 gave 1e-40^0.1 = 0, not 1e-4) and may flush abs(1e-40).
    if ((bitcast<u32>(x) & 0x7fffffffu) == 0u) {
        // +-0 or +-inf by e's sign; negative only for -0 with an odd e.
        let mag = select(0.0, inf, e_neg);
        return select(mag, -mag, odd && bitcast<u32>(x) == 0x80000000u);
    }
    let r = pow_abs(bitcast<f32>(bitcast<u32>(x) & 0x7fffffffu), e);
    if ((bitcast<u32>(x) >> 31u) == 1u) {
        if (kind == 0u) {
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

// GELU's tanh approximation in PyTorch's order: inner = sqrt(2 / pi) (x + 0.044715 x^3), then
// 0.5 x (1 + tanh(inner)). Past |x| = 1e12 tanh is +-1: x above, -0.0 below, as PyTorch's
// (where the cube overflows, too), and NaN at -inf (its -inf * 0); built on the bits, which a
// compiler cannot fold.
fn gelu_tanh_f(v: f32) -> f32 {
    if (abs(v) > 1e12) {
        let b = bitcast<u32>(v);
        if (b == 0xff800000u) {
            return bitcast<f32>(0x7fc00000u | (b & 0u));
        }
        return select(bitcast<f32>(0x80000000u | (b & 0u)), v, v > 0.0);
    }
    let inner = 0.7978845608028654 * (v + 0.044715 * v * v * v);
    return 0.5 * v * (1.0 + tanh_f(inner));
}

// Its derivative as PyTorch's GeluBackward (approximate='tanh'): 0.5 (1 + t) + 0.5 x (1 - t^2)
// sqrt(2 / pi) (1 + 3 0.044715 x^2), t = tanh(inner); past |x| = 1e12 1 or 0, and NaN where
// x^2 overflows (PyTorch's 0 * inf, from |x| near 2^64 on, infinities included).
fn gelu_tanh_grad(v: f32) -> f32 {
    if (abs(v) > 1e12) {
        let sq = bitcast<u32>(v * v) & 0x7fffffffu;
        if (sq >= 0x7f800000u) {
            return bitcast<f32>(0x7fc00000u | (sq & 0u));
        }
        return select(0.0, 1.0, v > 0.0);
    }
    let x2 = v * v;
    let t = tanh_f(0.7978845608028654 * (v + 0.044715 * x2 * v));
    let left = 0.5 * (1.0 + t);
    let right = 0.5 * v * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x2);
    return left + right;
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
