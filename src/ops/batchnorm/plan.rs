//! Batch norm's planner: how the data passes split each channel's values into chunks of
//! groups over workgroups, a pure function of the shape, the input offsets and the adapter
//! facts (unit-tested without a GPU).

use crate::{Caps, Device, Error, Result};

/// Groups (of VEC values) one workgroup's chunk aims at: 4096 vec4 groups are 16k values, 512
/// loop steps per lane with 8-lane workgroups (CPU adapters) and 64 with 64-lane ones.
const CHUNK_TARGET: usize = 4096;

#[doc(hidden)]
/// How the data passes split the work: a plain function of the shape, the input offsets and the
/// adapter type (exposed for tests and benchmarks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchNormPlan {
    /// Values per group: 4 (vec4 loads and stores) when S and the offsets are multiples of 4.
    pub vec: u32,
    /// Lanes per workgroup: 8 on CPU adapters (one SIMD register streams 8 consecutive groups),
    /// 64 elsewhere.
    pub wg: u32,
    /// Groups per chunk (a multiple of `wg`).
    pub chunk: u32,
    /// Chunks (workgroups) per channel.
    pub chunks: u32,
}

impl BatchNormPlan {
    /// Partials each data workgroup leaves in the workspace: one per lane on CPU adapters (no
    /// barriers), one on GPUs, where the lanes merge theirs in workgroup memory first so that
    /// the per-channel finalize walks `chunks` partials, not `chunks * wg` (`parts()` in
    /// shaders/batchnorm.wgsl: the same rule).
    pub fn parts(&self) -> u32 {
        if self.wg > CPU_LANES {
            1
        } else {
            self.wg
        }
    }
}

// The values the plan picks from: values per group (a uniform, one pipeline for both)
// and lanes per workgroup (WG, an override the variant list enumerates).
const SCALAR_GROUPS: u32 = 1;
const VEC4_GROUPS: u32 = 4;
pub(super) const CPU_LANES: u32 = 8;
pub(super) const GPU_LANES: u32 = 64;

#[doc(hidden)]
/// The work split for an input of `shape` whose x (and dy) start at element offsets `offsets`.
/// Errors for a shape the ops reject (rank below 2).
pub fn plan(dev: &Device, shape: &[usize], offsets: &[usize]) -> Result<BatchNormPlan> {
    plan_for(dev.caps(), shape, offsets)
}

#[doc(hidden)]
/// [`plan`] as a pure function of the adapter facts (unit-tested without a GPU).
pub fn plan_for(caps: &Caps, shape: &[usize], offsets: &[usize]) -> Result<BatchNormPlan> {
    if shape.len() < 2 {
        return Err(Error::shape(
            "batch_norm",
            format!("expected an input of rank >= 2 ([N, C, ...]), got shape {shape:?}"),
        ));
    }
    let s = shape[2..]
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&s| s.checked_mul(shape[0]).is_some())
        .ok_or_else(|| {
            Error::size(
                "batch_norm",
                format!("shape {shape:?} overflows the element count"),
            )
        })?;
    let n = shape[0];
    let vec = if s % 4 == 0 && offsets.iter().all(|o| o % 4 == 0) {
        VEC4_GROUPS as usize
    } else {
        SCALAR_GROUPS as usize
    };
    let wg = if caps.cpu { CPU_LANES } else { GPU_LANES } as usize;
    let groups = n * s / vec;
    let max = caps.max_workgroups_per_dim as usize;
    let want = groups.div_ceil(CHUNK_TARGET).clamp(1, max.max(1));
    let chunk = groups
        .div_ceil(want)
        .div_ceil(wg)
        .saturating_mul(wg)
        .max(wg);
    Ok(BatchNormPlan {
        vec: vec as u32,
        wg: wg as u32,
        chunk: chunk as u32,
        chunks: groups.div_ceil(chunk) as u32,
    })
}

#[cfg(test)]
mod plan_tests {
    use super::*;

    #[test]
    fn vec4_lanes_and_chunks() {
        let (gpu, lvp) = (Caps::test_gpu(), Caps::test_lavapipe(2));
        let p = plan_for(&lvp, &[32, 64, 56, 56], &[0]).unwrap();
        assert_eq!((p.vec, p.wg), (4, 8));
        assert_eq!(p.chunk % p.wg, 0);
        assert!(p.chunks as u64 * p.chunk as u64 * 4 >= 32 * 56 * 56);
        let g = plan_for(&gpu, &[32, 64, 56, 56], &[0]).unwrap();
        assert_eq!(g.wg, 64);
        // GPUs merge a workgroup's lanes: one partial per chunk; CPU adapters one per lane.
        assert_eq!((g.parts(), p.parts()), (1, 8));
        // S not a multiple of 4, or an offset that is not: scalar groups.
        assert_eq!(plan_for(&gpu, &[4, 3, 5], &[0]).unwrap().vec, 1);
        assert_eq!(plan_for(&gpu, &[4, 3, 8], &[0, 2]).unwrap().vec, 1);
        // Empty and invalid shapes.
        assert!(plan_for(&gpu, &[0, 3], &[0]).is_ok());
        assert!(plan_for(&gpu, &[3], &[0]).is_err());
    }
}
