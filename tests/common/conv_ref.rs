//! f64 reference loops for grouped convolution (PyTorch semantics), written straight from the
//! definition and independent of the kernels' GEMM mapping: forward, data gradient, weight
//! gradient and bias gradient, for NCHW (a 1-D problem is H = 1).
#![allow(dead_code)]

/// One convolution problem in forward terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvGeom {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub o: usize,
    pub kh: usize,
    pub kw: usize,
    pub groups: usize,
    pub stride: [usize; 2],
    /// top, bottom, left, right.
    pub pad: [usize; 4],
    pub dil: [usize; 2],
}

impl ConvGeom {
    pub fn cg(&self) -> usize {
        self.c / self.groups
    }
    pub fn og(&self) -> usize {
        self.o / self.groups
    }
    pub fn oh(&self) -> usize {
        (self.h + self.pad[0] + self.pad[1] - self.dil[0] * (self.kh - 1) - 1) / self.stride[0] + 1
    }
    pub fn ow(&self) -> usize {
        (self.w + self.pad[2] + self.pad[3] - self.dil[1] * (self.kw - 1) - 1) / self.stride[1] + 1
    }
    /// True when the padded input is at least one dilated kernel tall and wide.
    pub fn valid(&self) -> bool {
        self.h + self.pad[0] + self.pad[1] > self.dil[0] * (self.kh - 1)
            && self.w + self.pad[2] + self.pad[3] > self.dil[1] * (self.kw - 1)
    }
    pub fn x_shape(&self) -> [usize; 4] {
        [self.n, self.c, self.h, self.w]
    }
    pub fn w_shape(&self) -> [usize; 4] {
        [self.o, self.cg(), self.kh, self.kw]
    }
    pub fn y_shape(&self) -> [usize; 4] {
        [self.n, self.o, self.oh(), self.ow()]
    }
    pub fn x_len(&self) -> usize {
        self.x_shape().iter().product()
    }
    pub fn w_len(&self) -> usize {
        self.w_shape().iter().product()
    }
    pub fn y_len(&self) -> usize {
        self.y_shape().iter().product()
    }

    /// Visits every (input index, weight index, output index) triple that contributes a
    /// product x * w to y, in the definition's order.
    pub fn for_each_tap(&self, mut f: impl FnMut(usize, usize, usize)) {
        let (cg, og, oh, ow) = (self.cg(), self.og(), self.oh(), self.ow());
        for n in 0..self.n {
            for oc in 0..self.o {
                let g = oc / og;
                for y in 0..oh {
                    for x in 0..ow {
                        let yi = ((n * self.o + oc) * oh + y) * ow + x;
                        for ci in 0..cg {
                            let c = g * cg + ci;
                            for ky in 0..self.kh {
                                let ih = (y * self.stride[0] + ky * self.dil[0]) as isize
                                    - self.pad[0] as isize;
                                if ih < 0 || ih >= self.h as isize {
                                    continue;
                                }
                                for kx in 0..self.kw {
                                    let iw = (x * self.stride[1] + kx * self.dil[1]) as isize
                                        - self.pad[2] as isize;
                                    if iw < 0 || iw >= self.w as isize {
                                        continue;
                                    }
                                    let xi = ((n * self.c + c) * self.h + ih as usize) * self.w
                                        + iw as usize;
                                    let wi = ((oc * cg + ci) * self.kh + ky) * self.kw + kx;
                                    f(xi, wi, yi);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Forward `y = conv(x, w) + bias` and, per output, the sum of |x w| (for error bounds).
pub fn conv_forward(
    g: &ConvGeom,
    x: &[f64],
    w: &[f64],
    bias: Option<&[f64]>,
) -> (Vec<f64>, Vec<f64>) {
    let mut y = vec![0.0; g.y_len()];
    let mut mag = vec![0.0; g.y_len()];
    g.for_each_tap(|xi, wi, yi| {
        y[yi] += x[xi] * w[wi];
        mag[yi] += (x[xi] * w[wi]).abs();
    });
    if let Some(b) = bias {
        let per = g.oh() * g.ow();
        for (i, v) in y.iter_mut().enumerate() {
            *v += b[(i / per) % g.o];
        }
    }
    (y, mag)
}

/// Data gradient dx = sum over taps of dy * w, and the per-element sum of |dy w|.
pub fn conv_backward_input(g: &ConvGeom, dy: &[f64], w: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let mut dx = vec![0.0; g.x_len()];
    let mut mag = vec![0.0; g.x_len()];
    g.for_each_tap(|xi, wi, yi| {
        dx[xi] += dy[yi] * w[wi];
        mag[xi] += (dy[yi] * w[wi]).abs();
    });
    (dx, mag)
}

/// Weight gradient dw = sum over taps of dy * x, and the per-element sum of |dy x|.
pub fn conv_backward_weight(g: &ConvGeom, dy: &[f64], x: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let mut dw = vec![0.0; g.w_len()];
    let mut mag = vec![0.0; g.w_len()];
    g.for_each_tap(|xi, wi, yi| {
        dw[wi] += dy[yi] * x[xi];
        mag[wi] += (dy[yi] * x[xi]).abs();
    });
    (dw, mag)
}

/// Bias gradient: dy summed over batch and space, per output channel.
pub fn conv_backward_bias(g: &ConvGeom, dy: &[f64]) -> Vec<f64> {
    let per = g.oh() * g.ow();
    let mut db = vec![0.0; g.o];
    for (i, v) in dy.iter().enumerate() {
        db[(i / per) % g.o] += v;
    }
    db
}

/// The three implicit GEMMs of the kernels (src/ops/conv/launch.rs), per group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// rows O/groups, columns N*OH*OW, K = C/groups*kH*kW.
    Forward,
    /// Data gradient (and conv_transpose): rows C/groups, columns N*H*W, K = O/groups*kH*kW.
    Data,
    /// Weight gradient: rows O/groups, columns C/groups*kH*kW, K = N*OH*OW.
    Weight,
}

impl ConvGeom {
    /// (rows, columns, K) per group of the GEMM that `dir` runs.
    pub fn gemm_dims(&self, dir: Dir) -> (usize, usize, usize) {
        let kk = self.kh * self.kw;
        match dir {
            Dir::Forward => (self.og(), self.n * self.oh() * self.ow(), self.cg() * kk),
            Dir::Data => (self.cg(), self.n * self.h * self.w, self.og() * kk),
            Dir::Weight => (self.og(), self.cg() * kk, self.n * self.oh() * self.ow()),
        }
    }
}
