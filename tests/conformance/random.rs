//! The device's Philox4x32-10 against a CPU transcription (Random123's constants): `rand` bit
//! for bit and `randn` within a few f32 ulp of Box-Muller on the same counters. The same seed
//! must give the same numbers on every backend, so the browser suite runs these checks too
//! (tests/browser/conformance.rs); tests/random.rs adds the moments, dropout and initializers.
//! Self-contained (no `crate::` paths) so tests/random.rs can include it as well.

use wgtensor::ops::{rand, randn};
use wgtensor::{DType, Device};

fn mulhilo(a: u32, b: u32) -> (u32, u32) {
    let p = a as u64 * b as u64;
    ((p >> 32) as u32, p as u32)
}

/// Philox4x32-10 (Random123's constants).
pub fn philox(ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let (mut c, mut k) = (ctr, key);
    for _ in 0..10 {
        let (h0, l0) = mulhilo(0xD251_1F53, c[0]);
        let (h1, l1) = mulhilo(0xCD9E_8D57, c[2]);
        c = [h1 ^ c[1] ^ k[0], l1, h0 ^ c[3] ^ k[1], l0];
        k = [
            k[0].wrapping_add(0x9E37_79B9),
            k[1].wrapping_add(0xBB67_AE85),
        ];
    }
    c
}

/// The first `n` u32s of the stream of `seed` from block `block`.
pub fn stream(seed: u64, block: u64, n: usize) -> Vec<u32> {
    let mut out = Vec::new();
    let mut b = block;
    while out.len() < n {
        out.extend(philox(
            [b as u32, (b >> 32) as u32, 0, 0],
            [seed as u32, (seed >> 32) as u32],
        ));
        b += 1;
    }
    out.truncate(n);
    out
}

/// The top 24 bits as a float in [0, 1), as the shader maps them.
pub fn unit(v: u32) -> f32 {
    (v >> 8) as f32 * 5.960_464_5e-8
}

/// `rand` after `manual_seed(seed)`: bit-exact, and a second call continues the stream where
/// the first stopped (streams of successive calls never overlap).
pub async fn check_rand_bit_exact(d: &Device, seed: u64) -> Result<(), String> {
    d.manual_seed(seed);
    let a = rand(d, &[10], DType::F32).map_err(|e| e.to_string())?;
    let b = rand(d, &[7, 3], DType::F32).map_err(|e| e.to_string())?;
    let a = a.to_vec_async::<f32>().await.map_err(|e| e.to_string())?;
    let b = b.to_vec_async::<f32>().await.map_err(|e| e.to_string())?;
    // The first call used ceil(10 / 4) = 3 blocks; the second starts at block 3.
    let want_a: Vec<f32> = stream(seed, 0, 10).into_iter().map(unit).collect();
    let want_b: Vec<f32> = stream(seed, 3, 21).into_iter().map(unit).collect();
    if a != want_a || b != want_b {
        return Err(format!(
            "rand(seed {seed:#x}): got {a:?} then {b:?}, want {want_a:?} then {want_b:?}"
        ));
    }
    Ok(())
}

/// `randn` after `manual_seed(seed)`: Box-Muller on consecutive pairs of the stream.
pub async fn check_randn(d: &Device, seed: u64, n: usize) -> Result<(), String> {
    d.manual_seed(seed);
    let z = randn(d, &[n], DType::F32).map_err(|e| e.to_string())?;
    let z = z.to_vec_async::<f32>().await.map_err(|e| e.to_string())?;
    let u = stream(seed, 0, n + 1);
    for (e, &g) in z.iter().enumerate() {
        let pair = e & !1;
        let r = (-2.0 * (1.0 - unit(u[pair]) as f64).ln()).sqrt();
        let a = 2.0 * std::f64::consts::PI * unit(u[pair + 1]) as f64;
        let want = if e % 2 == 0 { r * a.cos() } else { r * a.sin() };
        // The shader's log and sin/cos are its own polynomials (not the backend's), so the
        // bound holds on every backend: a few f32 ulp of the result and of sqrt's argument.
        if (g as f64 - want).abs() >= 2e-6 * (1.0 + want.abs()) {
            return Err(format!("randn(seed {seed}) element {e}: {g} vs {want}"));
        }
    }
    Ok(())
}

#[cfg(not(target_arch = "wasm32"))]
#[test]
fn philox_streams_match_on_this_backend() {
    let d = Device::new().expect("device");
    for seed in [0, 1, 0x1234_5678_9abc_def0, u64::MAX] {
        pollster::block_on(check_rand_bit_exact(&d, seed)).unwrap();
        pollster::block_on(check_randn(&d, seed, 1000)).unwrap();
    }
}
