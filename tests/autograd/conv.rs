//! Convolutions (1-D, 2-D, transposed) with stride, padding, dilation, groups, bias and fused
//! activation: autograd gradients against the f64 tap-by-tap reference.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use wgtensor::ops::{
    conv1d, conv2d, conv_transpose2d, Conv1dOptions, Conv2dOptions, ConvTranspose2dOptions, Padding,
};

use crate::common::conv_ref::ConvGeom;
use crate::grad_ref::{self, Taps};
use crate::ops::{check, f16, leaf, loss, run, Rng, ACTS};

const CASES: u32 = 24;

fn geom(rng: &mut Rng, one_d: bool) -> ConvGeom {
    loop {
        let groups = 1 + rng.below(2);
        let kh = if one_d { 1 } else { 1 + rng.below(3) };
        let g = ConvGeom {
            n: 1 + rng.below(2),
            c: groups * (1 + rng.below(3)),
            h: if one_d { 1 } else { 1 + rng.below(6) },
            w: 1 + rng.below(7),
            o: groups * (1 + rng.below(3)),
            kh,
            kw: 1 + rng.below(3),
            groups,
            stride: [if one_d { 1 } else { 1 + rng.below(2) }, 1 + rng.below(2)],
            pad: if one_d {
                [0, 0, rng.below(2), rng.below(2)]
            } else {
                [rng.below(2), rng.below(2), rng.below(2), rng.below(2)]
            },
            dil: [if one_d { 1 } else { 1 + rng.below(2) }, 1 + rng.below(2)],
        };
        if g.valid() {
            return g;
        }
    }
}

fn taps_of(g: &ConvGeom) -> Vec<(usize, usize, usize)> {
    let mut t = Vec::new();
    g.for_each_tap(|xi, wi, yi| t.push((xi, wi, yi)));
    t
}

pub fn conv_case(seed: u64, one_d: bool) -> Result<(), TestCaseError> {
    let mut rng = Rng::new(seed);
    let g = geom(&mut rng, one_d);
    let act = ACTS[rng.below(ACTS.len())];
    let with_bias = rng.coin(0.6);
    let x = rng.values(g.x_len(), |r| r.uniform(-1.0, 1.0));
    let w = rng.values(g.w_len(), |r| r.uniform(-1.0, 1.0));
    let b = rng.values(g.o, |r| r.uniform(-1.0, 1.0));
    let up = rng.values(g.y_len(), |r| r.uniform(-1.0, 1.0));
    let (xs, ws) = (g.x_shape(), g.w_shape());
    let o2 = Conv2dOptions {
        stride: g.stride,
        padding: Padding {
            top: g.pad[0],
            bottom: g.pad[1],
            left: g.pad[2],
            right: g.pad[3],
        },
        dilation: g.dil,
        groups: g.groups,
        activation: act,
    };
    let (xt, wt) = if one_d {
        (
            leaf(&x, &[xs[0], xs[1], xs[3]]),
            leaf(&w, &[ws[0], ws[1], ws[3]]),
        )
    } else {
        (leaf(&x, &xs), leaf(&w, &ws))
    };
    let bt = leaf(&b, &[g.o]);
    let bias = with_bias.then_some(&bt);
    let y = if one_d {
        let o1 = Conv1dOptions {
            stride: g.stride[1],
            padding: wgtensor::ops::Padding1d {
                left: g.pad[2],
                right: g.pad[3],
            },
            dilation: g.dil[1],
            groups: g.groups,
            activation: act,
        };
        conv1d(&xt, &wt, bias, &o1).unwrap()
    } else {
        conv2d(&xt, &wt, bias, &o2).unwrap()
    };
    let grads = loss(&y, &up).backward().unwrap();
    let taps = taps_of(&g);
    let per = g.oh() * g.ow();
    let ch = move |o: usize| (o / per) % g.o;
    let (dx, dw, db) = grad_ref::taps(&Taps {
        taps: &taps,
        p: &x,
        q: &w,
        out_len: g.y_len(),
        bias: with_bias.then_some((&b[..], &ch as &dyn Fn(usize) -> usize)),
        act,
        g: &up,
    });
    let what = format!("{g:?} {act:?} bias {with_bias}");
    check(&format!("{what}: dx"), grads.get(&xt), &dx)?;
    check(&format!("{what}: dw"), grads.get(&wt), &dw)?;
    if let Some(db) = db {
        check(&format!("{what}: db"), grads.get(&bt), &db)?;
    }
    Ok(())
}

/// conv_transpose2d of x [N, C_in, H, W] is the data gradient of the convolution `t` from
/// [N, C_out, H', W'] to [N, C_in, H(+1), W(+1)]; the reference runs t's taps backwards.
pub fn transpose_case(seed: u64) -> Result<(), TestCaseError> {
    let mut rng = Rng::new(seed);
    let (groups, n) = (1 + rng.below(2), 1 + rng.below(2));
    let (c_in, c_out) = (groups * (1 + rng.below(3)), groups * (1 + rng.below(3)));
    let (h, wd) = (1 + rng.below(4), 1 + rng.below(4));
    let (kh, kw) = (1 + rng.below(3), 1 + rng.below(3));
    let stride = [1 + rng.below(2), 1 + rng.below(2)];
    let dil = [1 + rng.below(2), 1 + rng.below(2)];
    let pad = [rng.below(2), rng.below(2), rng.below(2), rng.below(2)];
    // output_padding below max(stride, dilation), as PyTorch requires.
    let op = [
        rng.below(stride[0].max(dil[0])),
        rng.below(stride[1].max(dil[1])),
    ];
    let full = |len: usize, k: usize, ax: usize, p: usize| {
        ((len - 1) * stride[ax] + dil[ax] * (k - 1) + 1 + op[ax]).checked_sub(p)
    };
    let (Some(oh), Some(ow)) = (
        full(h, kh, 0, pad[0] + pad[1]),
        full(wd, kw, 1, pad[2] + pad[3]),
    ) else {
        return Ok(());
    };
    if oh == 0 || ow == 0 {
        return Ok(());
    }
    let t = ConvGeom {
        n,
        c: c_out,
        h: oh,
        w: ow,
        o: c_in,
        kh,
        kw,
        groups,
        stride,
        pad,
        dil,
    };
    prop_assert!(t.valid() && t.oh() >= h && t.ow() >= wd, "{t:?}");
    let act = ACTS[rng.below(ACTS.len())];
    let with_bias = rng.coin(0.6);
    let x = rng.values(n * c_in * h * wd, |r| r.uniform(-1.0, 1.0));
    let w = rng.values(t.w_len(), |r| r.uniform(-1.0, 1.0));
    let b = rng.values(c_out, |r| r.uniform(-1.0, 1.0));
    let up = rng.values(t.x_len(), |r| r.uniform(-1.0, 1.0));
    let xt = leaf(&x, &[n, c_in, h, wd]);
    let wt = leaf(&w, &t.w_shape());
    let bt = leaf(&b, &[c_out]);
    let opts = ConvTranspose2dOptions {
        stride,
        padding: Padding {
            top: pad[0],
            bottom: pad[1],
            left: pad[2],
            right: pad[3],
        },
        output_padding: op,
        dilation: dil,
        groups,
        activation: act,
    };
    let y = conv_transpose2d(&xt, &wt, with_bias.then_some(&bt), &opts).unwrap();
    prop_assert_eq!(y.shape(), &[n, c_out, oh, ow][..]);
    let grads = loss(&y, &up).backward().unwrap();
    // t's taps (t-input = y index, weight, t-output = x index), minus the rows of t's output
    // beyond x (output_padding >= stride), which read zeros.
    let (toh, tow) = (t.oh(), t.ow());
    let mut taps = Vec::new();
    t.for_each_tap(|yi, wi, xi_t| {
        let (col, row) = (xi_t % tow, (xi_t / tow) % toh);
        if row < h && col < wd {
            let nc = xi_t / (tow * toh);
            taps.push(((nc * h + row) * wd + col, wi, yi));
        }
    });
    let per = oh * ow;
    let ch = move |o: usize| (o / per) % c_out;
    let (dx, dw, db) = grad_ref::taps(&Taps {
        taps: &taps,
        p: &x,
        q: &w,
        out_len: t.x_len(),
        bias: with_bias.then_some((&b[..], &ch as &dyn Fn(usize) -> usize)),
        act,
        g: &up,
    });
    let what = format!("transpose of {t:?} op {op:?} {act:?} bias {with_bias}");
    check(&format!("{what}: dx"), grads.get(&xt), &dx)?;
    check(&format!("{what}: dw"), grads.get(&wt), &dw)?;
    if let Some(db) = db {
        check(&format!("{what}: db"), grads.get(&bt), &db)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn conv2d_grads(seed in any::<u64>()) { run(|s| conv_case(s, false), seed)?; }

    #[test]
    fn conv1d_grads(seed in any::<u64>()) { run(|s| conv_case(s, true), seed)?; }

    #[test]
    fn conv_transpose2d_grads(seed in any::<u64>()) { run(transpose_case, seed)?; }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES / 2))]

    #[test]
    fn conv2d_grads_f16(seed in any::<u64>()) { f16(|s| conv_case(s, false), seed)?; }

    #[test]
    fn conv1d_grads_f16(seed in any::<u64>()) { f16(|s| conv_case(s, true), seed)?; }

    #[test]
    fn conv_transpose2d_grads_f16(seed in any::<u64>()) { f16(transpose_case, seed)?; }
}
