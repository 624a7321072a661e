//! The workgroup size of the one-invocation-per-element kernels (map, binary, compare, index,
//! nll, segment and the autograd helpers in grad_kernel.rs), in a file of its own so that
//! grad_kernel.rs does not import map.rs (whose backward imports grad_kernel.rs).

/// Invocations per workgroup (the `WG` override constant).
pub(crate) const WG: u32 = 256;
