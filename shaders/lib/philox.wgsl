// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): a
// counter and a 64-bit key give four independent u32s, so random streams are pure functions of
// (seed, counter) on every backend. Used by random.wgsl (src/ops/random.rs) and by attention's
// dropout (shaders/attention.wgsl), which draws one counter per attention weight.

// 32 x 32 -> 64-bit product as (hi, lo), from 16-bit halves (WGSL has no mulhi).
fn mul_wide(a: u32, b: u32) -> vec2<u32> {
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let p11 = a1 * b1;
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    let lo = (p00 & 0xffffu) | (mid << 16u);
    let hi = p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
    return vec2<u32>(hi, lo);
}

fn philox(ctr_in: vec4<u32>, key_in: vec2<u32>) -> vec4<u32> {
    var c = ctr_in;
    var k = key_in;
    for (var r = 0u; r < 10u; r++) {
        let m0 = mul_wide(0xD2511F53u, c.x);
        let m1 = mul_wide(0xCD9E8D57u, c.z);
        c = vec4<u32>(m1.x ^ c.y ^ k.x, m1.y, m0.x ^ c.w ^ k.y, m0.y);
        k = k + vec2<u32>(0x9E3779B9u, 0xBB67AE85u);
    }
    return c;
}

// [0, 1) with 24 random bits (every value exact in f32).
fn unit(v: u32) -> f32 {
    return f32(v >> 8u) * 5.9604644775390625e-8;
}
