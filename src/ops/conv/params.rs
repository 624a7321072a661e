//! [`ConvParams`]: the GEMM view of one convolution direction (which tensor is A, which is
//! gathered as B, how rows, columns and K map onto them), mirrored by the shaders' `Params`.

use bytemuck::{Pod, Zeroable};

use super::geom::Geom;

/// Mirrors `Params` in shaders/lib/conv_common.wgsl: the GEMM view of one direction,
/// `out[g](row, col) = sum_k A[g](row, k) * B[g](k, col)`, with K split into counters
/// `(k0, k1, k2)` and columns into `(j0, j1, j2)` (extents `k_e*`, `c_e*`; the first of each is
/// what remains). A is affine in the k counters (`a_*`); B is gathered from a 4-D source at
/// channel offset `b_off + g * b_gs + k0 * b_k0 + j0 * b_c0`, row
/// `h = b_h0 + j1 * b_c1 + k1 * b_k1` and column `w = b_w0 + j2 * b_c2 + k2 * b_k2` (`b_*`,
/// `src_*`, `div_*`); the output is affine in the row and column counters (`o_*`).
/// Forward: rows o, k (c, kh, kw), cols (n, oh, ow), A = weight, B = x. Data gradient: rows c,
/// k (o, kh, kw), cols (n, ih, iw), A = weight, B = dy. Weight gradient: rows o,
/// k (n, oh, ow), cols (c, kh, kw), A = dy, B = x.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable, Default, Debug)]
pub(crate) struct ConvParams {
    /// Rows of each group's GEMM: output channels per group (forward, weight gradient) or input
    /// channels per group (data gradient).
    pub(crate) m: u32,
    /// Columns of each group's GEMM: `n * oh * ow` (forward), `n * h * w` (data gradient) or
    /// `cg * kh * kw` (weight gradient).
    pub(crate) ncols: u32,
    /// The reduction length: `cg * kh * kw` (forward), `og * kh * kw` (data gradient) or
    /// `n * oh * ow` (weight gradient). Decomposed into the counters `(k0, k1, k2)`.
    pub(crate) k: u32,
    /// Convolution groups; grid z is the group (with split-k, `split * groups + g`).
    pub(crate) groups: u32,
    /// Extent of the counter `k1` (`kh`, or `oh` for the weight gradient); `k0` is what remains.
    pub(crate) k_e1: u32,
    /// Extent of the counter `k2`, the fastest (`kw`, or `ow` for the weight gradient).
    pub(crate) k_e2: u32,
    /// Extent of the column counter `j1` (`oh`, `h` for the data gradient, `kh` for the weight
    /// gradient); `j0` is what remains.
    pub(crate) c_e1: u32,
    /// Extent of the column counter `j2`, the fastest (`ow`, `w`, or `kw`).
    pub(crate) c_e2: u32,
    /// A's first element in its binding (its layout offset).
    pub(crate) a_off: u32,
    /// A's element stride between groups.
    pub(crate) a_gs: u32,
    /// A's element stride between GEMM rows.
    pub(crate) a_rs: u32,
    /// A's element stride per step of `k0` (A is affine in the k counters).
    pub(crate) a_s0: u32,
    /// A's element stride per step of `k1`.
    pub(crate) a_s1: u32,
    /// A's element stride per step of `k2`.
    pub(crate) a_s2: u32,
    /// The gathered source's first element in its binding (layout offset, or the window's
    /// relative offset).
    pub(crate) b_off: u32,
    /// The gathered source's element stride between groups (the group's channels).
    pub(crate) b_gs: u32,
    /// Source offset per step of `k0` (a channel plane, or a whole sample for the weight
    /// gradient).
    pub(crate) b_k0: u32,
    /// Source offset per step of the column counter `j0` (a sample, or a channel plane for the
    /// weight gradient).
    pub(crate) b_c0: u32,
    /// Source row `h` per step of `k1`: the dilation (negated for the data gradient; the
    /// stride for the weight gradient).
    pub(crate) b_k1: i32,
    /// Source column `w` per step of `k2`, as `b_k1`.
    pub(crate) b_k2: i32,
    /// Source row `h` per step of `j1`: the stride (1 for the data gradient; the dilation for the
    /// weight gradient).
    pub(crate) b_c1: i32,
    /// Source column `w` per step of `j2`, as `b_c1`.
    pub(crate) b_c2: i32,
    /// Source row of counters 0: `-pad.top` (`+pad.top` for the data gradient).
    pub(crate) b_h0: i32,
    /// Source column of counters 0: `-pad.left` (`+pad.left` for the data gradient).
    pub(crate) b_w0: i32,
    /// The source's height: taps with `h` outside `[0, src_h)` read 0 (padding).
    pub(crate) src_h: u32,
    /// The source's width, as `src_h`; also the row stride of the gather.
    pub(crate) src_w: u32,
    /// The stride the strided data gradient divides `h` by (`TRANSPOSED`: a tap is real only
    /// where it divides); 1 otherwise.
    pub(crate) div_h: i32,
    /// As `div_h` for `w`.
    pub(crate) div_w: i32,
    /// The output's element stride between groups.
    pub(crate) o_gs: u32,
    /// The output's element stride between GEMM rows.
    pub(crate) o_rs: u32,
    /// The output's element stride per step of the column counter `j0`.
    pub(crate) o_s0: u32,
    /// The output's element stride per step of `j1`.
    pub(crate) o_s1: u32,
    /// The output's element stride per step of `j2`.
    pub(crate) o_s2: u32,
    /// Split-k factor: 1, or the number of K slices whose partials go to the workspace.
    pub(crate) splits: u32,
    /// K steps per split-k slice.
    pub(crate) k_chunk: u32,
    /// The bias's first element in its binding (layout offset); read at
    /// `bias_off + g * m + row`.
    pub(crate) bias_off: u32,
    /// Always 1: conv_sg8 copies its accumulators through `scale *` so the copy stays a real
    /// transform (a plain copy is merged back and pushes the accumulators out of registers).
    pub(crate) scale: f32,
    /// The output's first element in its binding (a window of a tensor larger than one
    /// binding; 0 otherwise).
    pub(crate) o_off: u32,
    /// Added to the grid z of the partial passes (a window of K slices; 0 otherwise).
    pub(crate) z0: u32,
    /// Padding to the WGSL struct's size.
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
