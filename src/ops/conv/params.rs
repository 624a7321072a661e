//! [`ConvParams`]: the GEMM view of one convolution direction (which tensor is A, which is
//! gathered as B, how rows, columns and K map onto them), mirrored by the shaders' `Params`.

use bytemuck::{Pod, Zeroable};

use super::geom::Geom;

/// Mirrors `Params` in shaders/lib/conv_common.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable, Default, Debug)]
pub(crate) struct ConvParams {
    pub(crate) m: u32,
    pub(crate) ncols: u32,
    pub(crate) k: u32,
    pub(crate) groups: u32,
    pub(crate) k_e1: u32,
    pub(crate) k_e2: u32,
    pub(crate) c_e1: u32,
    pub(crate) c_e2: u32,
    pub(crate) a_off: u32,
    pub(crate) a_gs: u32,
    pub(crate) a_rs: u32,
    pub(crate) a_s0: u32,
    pub(crate) a_s1: u32,
    pub(crate) a_s2: u32,
    pub(crate) b_off: u32,
    pub(crate) b_gs: u32,
    pub(crate) b_k0: u32,
    pub(crate) b_c0: u32,
    pub(crate) b_k1: i32,
    pub(crate) b_k2: i32,
    pub(crate) b_c1: i32,
    pub(crate) b_c2: i32,
    pub(crate) b_h0: i32,
    pub(crate) b_w0: i32,
    pub(crate) src_h: u32,
    pub(crate) src_w: u32,
    pub(crate) div_h: i32,
    pub(crate) div_w: i32,
    pub(crate) o_gs: u32,
    pub(crate) o_rs: u32,
    pub(crate) o_s0: u32,
    pub(crate) o_s1: u32,
    pub(crate) o_s2: u32,
    pub(crate) splits: u32,
    pub(crate) k_chunk: u32,
    pub(crate) bias_off: u32,
    pub(crate) scale: f32,
    /// The output's first element in its binding (a window of a tensor larger than one
    /// binding; 0 otherwise).
    pub(crate) o_off: u32,
    /// Added to the grid z of the partial passes (a window of K slices; 0 otherwise).
    pub(crate) z0: u32,
    pub(crate) _pad1: u32,
}

/// Which gradient (or the forward) a convolution launch computes: see
/// [`conv2d_plan`](super::conv2d_plan).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// y from x and the weight.
    Forward,
    /// dx from dy and the weight (also the transposed convolution).
    Data,
    /// dW from dy and x.
    Weight,
}

fn u(v: usize) -> u32 {
    v as u32
}
fn i(v: usize) -> i32 {
    v as i32
}

impl ConvParams {
    /// The GEMM view of `dir` on geometry `g` (offsets and split are filled in by `run`).
    /// Returns the params and whether the gather needs the strided-transposed test.
    pub(crate) fn new(g: &Geom, dir: Direction) -> (ConvParams, bool) {
        let (cg, og) = (g.cg(), g.og());
        let kk = g.kh * g.kw;
        let (hw, ohw) = (g.h * g.w, g.oh * g.ow);
        let mut p = ConvParams {
            groups: u(g.groups),
            div_h: 1,
            div_w: 1,
            scale: 1.0,
            ..Default::default()
        };
        let mut transposed = false;
        match dir {
            Direction::Forward => {
                // rows o, k (c, kh, kw), cols (n, oh, ow); A = weight, B = x.
                (p.m, p.ncols, p.k) = (u(og), u(g.n * ohw), u(cg * kk));
                (p.k_e1, p.k_e2, p.c_e1, p.c_e2) = (u(g.kh), u(g.kw), u(g.oh), u(g.ow));
                (p.a_gs, p.a_rs, p.a_s0, p.a_s1, p.a_s2) =
                    (u(og * cg * kk), u(cg * kk), u(kk), u(g.kw), 1);
                (p.b_gs, p.b_k0, p.b_c0) = (u(cg * hw), u(hw), u(g.c * hw));
                (p.b_k1, p.b_k2) = (i(g.dil[0]), i(g.dil[1]));
                (p.b_c1, p.b_c2) = (i(g.stride[0]), i(g.stride[1]));
                (p.b_h0, p.b_w0) = (-i(g.pad.top), -i(g.pad.left));
                (p.src_h, p.src_w) = (u(g.h), u(g.w));
                (p.o_gs, p.o_rs, p.o_s0, p.o_s1, p.o_s2) =
                    (u(og * ohw), u(ohw), u(g.o * ohw), u(g.ow), 1);
            }
            Direction::Data => {
                // rows c, k (o, kh, kw), cols (n, ih, iw); A = weight, B = dy at
                // oh = (ih + pad - kh * d) / stride.
                (p.m, p.ncols, p.k) = (u(cg), u(g.n * hw), u(og * kk));
                (p.k_e1, p.k_e2, p.c_e1, p.c_e2) = (u(g.kh), u(g.kw), u(g.h), u(g.w));
                (p.a_gs, p.a_rs, p.a_s0, p.a_s1, p.a_s2) =
                    (u(og * cg * kk), u(kk), u(cg * kk), u(g.kw), 1);
                (p.b_gs, p.b_k0, p.b_c0) = (u(og * ohw), u(ohw), u(g.o * ohw));
                (p.b_k1, p.b_k2) = (-i(g.dil[0]), -i(g.dil[1]));
                (p.b_c1, p.b_c2) = (1, 1);
                (p.b_h0, p.b_w0) = (i(g.pad.top), i(g.pad.left));
                (p.src_h, p.src_w) = (u(g.oh), u(g.ow));
                (p.div_h, p.div_w) = (i(g.stride[0]), i(g.stride[1]));
                transposed = g.stride != [1, 1];
                (p.o_gs, p.o_rs, p.o_s0, p.o_s1, p.o_s2) =
                    (u(cg * hw), u(hw), u(g.c * hw), u(g.w), 1);
            }
            Direction::Weight => {
                // rows o, k (n, oh, ow), cols (c, kh, kw); A = dy, B = x.
                (p.m, p.ncols, p.k) = (u(og), u(cg * kk), u(g.n * ohw));
                (p.k_e1, p.k_e2, p.c_e1, p.c_e2) = (u(g.oh), u(g.ow), u(g.kh), u(g.kw));
                (p.a_gs, p.a_rs, p.a_s0, p.a_s1, p.a_s2) =
                    (u(og * ohw), u(ohw), u(g.o * ohw), u(g.ow), 1);
                (p.b_gs, p.b_k0, p.b_c0) = (u(cg * hw), u(g.c * hw), u(hw));
                (p.b_k1, p.b_k2) = (i(g.stride[0]), i(g.stride[1]));
                (p.b_c1, p.b_c2) = (i(g.dil[0]), i(g.dil[1]));
                (p.b_h0, p.b_w0) = (-i(g.pad.top), -i(g.pad.left));
                (p.src_h, p.src_w) = (u(g.h), u(g.w));
                (p.o_gs, p.o_rs, p.o_s0, p.o_s1, p.o_s2) =
                    (u(og * cg * kk), u(cg * kk), u(kk), u(g.kw), 1);
            }
        }
        (p, transposed)
    }
}
