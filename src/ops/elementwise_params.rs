//! The params structs and op-code tables of the map and binary kernels, shared by their scalar
//! launches (src/ops/map.rs, src/ops/binary.rs) and the GPU vec4 launches
//! (src/ops/elementwise_vec4.rs) without an import cycle between those files.

use bytemuck::{Pod, Zeroable};

use crate::layout::MAX_RANK;

/// The map kernel's params (the vec4 entry points reuse them: src/ops/elementwise_vec4.rs).
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub(crate) struct MapParams {
    pub(crate) numel: u32,
    pub(crate) rank: u32,
    pub(crate) offset: u32,
    pub(crate) scalar: f32,
    pub(crate) shape: [u32; MAX_RANK],
    pub(crate) strides: [u32; MAX_RANK],
    pub(crate) base: u32,
    pub(crate) _pad0: u32,
    pub(crate) _pad1: u32,
    pub(crate) _pad2: u32,
}

/// The map kernel's op codes, in `MapOp` order (identity, the unary ops, the scalar ops): the
/// one table of them. The shader switches on these names, which the runtime emits as WGSL
/// constants; the values are the row numbers, so no two ops can share one.
pub(crate) const MAP_DEFS: &[(&str, u32)] = &[
    ("OP_COPY", 0),
    ("OP_NEG", 1),
    ("OP_ABS", 2),
    ("OP_EXP", 3),
    ("OP_LOG", 4),
    ("OP_SQRT", 5),
    ("OP_RELU", 6),
    ("OP_SIGMOID", 7),
    ("OP_TANH", 8),
    ("OP_GELU", 9),
    ("OP_SILU", 10),
    ("OP_LOG1P", 11),
    ("OP_SOFTPLUS", 12),
    ("OP_GELU_TANH", 13),
    ("OP_ADD_SCALAR", 14),
    ("OP_SUB_SCALAR", 15),
    ("OP_RSUB_SCALAR", 16),
    ("OP_MUL_SCALAR", 17),
    ("OP_DIV_SCALAR", 18),
    ("OP_RDIV_SCALAR", 19),
    ("OP_MAX_SCALAR", 20),
    ("OP_MIN_SCALAR", 21),
    ("OP_POW_SCALAR", 22),
];

/// Which operand of a binary op gives its buffer to the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Donated {
    A,
    B,
}

/// The binary kernel's op codes (the `BinaryOp` discriminants, checked in src/ops/binary.rs),
/// emitted to the shader as WGSL constants.
pub(crate) const BINARY_DEFS: &[(&str, u32)] = &[
    ("OP_ADD", 0),
    ("OP_SUB", 1),
    ("OP_MUL", 2),
    ("OP_DIV", 3),
    ("OP_MAX", 4),
    ("OP_MIN", 5),
    ("OP_POW", 6),
];

/// The binary kernel's params (the vec4 entry points reuse them: src/ops/elementwise_vec4.rs).
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub(crate) struct BinaryParams {
    pub(crate) numel: u32,
    pub(crate) rank: u32,
    pub(crate) off_a: u32,
    pub(crate) off_b: u32,
    pub(crate) shape: [u32; MAX_RANK],
    pub(crate) sa: [u32; MAX_RANK],
    pub(crate) sb: [u32; MAX_RANK],
    pub(crate) base: u32,
    pub(crate) _pad0: u32,
    pub(crate) _pad1: u32,
    pub(crate) _pad2: u32,
}
