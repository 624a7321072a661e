//! Random (often invalid) shapes and options for the model-level ops: convolution, batch norm
//! and the RNNs. Each call is `Ok` with the expected output shape and finite values from finite
//! inputs, or an `Err` naming the op; the device keeps working after every error.

use proptest::prelude::*;
use wgtensor::ops::{
    batch_norm_backward, batch_norm_inference, batch_norm_train, conv1d, conv2d,
    conv2d_backward_input, conv2d_backward_weight, conv_transpose2d, Activation, BatchNormOptions,
    Conv1dOptions, Conv2dOptions, ConvTranspose2dOptions, Padding, Rnn, RnnKind, RnnWeights,
};
use wgtensor::{DType, Tensor};

use super::{dev, still_works, vals};

fn small_dim() -> impl Strategy<Value = usize> {
    prop_oneof![1 => Just(0usize), 3 => 1usize..5]
}

fn tensor(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|i| ((i * 13 % 7) as f32 - 3.0) * 0.25).collect();
    Tensor::from_slice(dev(), &v, shape).unwrap()
}

fn judge(op: &str, r: wgtensor::Result<Vec<Tensor>>) -> Result<(), TestCaseError> {
    match r {
        Ok(ts) => {
            for t in ts {
                let v = vals(&t);
                prop_assert!(v.iter().all(|x| x.is_finite()), "{op}: non-finite output");
            }
        }
        Err(e) => {
            let m = e.to_string();
            prop_assert!(m.starts_with(&format!("{op}:")), "{m:?} does not name {op}");
            still_works(dev());
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn convolutions(
        x in proptest::collection::vec(small_dim(), 4),
        w in proptest::collection::vec(small_dim(), 4),
        stride in 0usize..3, pad in 0usize..3, dil in 0usize..3, groups in 0usize..3,
    ) {
        let o = Conv2dOptions {
            stride: [stride, 1],
            padding: Padding::uniform(pad),
            dilation: [1, dil],
            groups,
            activation: Activation::Relu,
        };
        let (tx, tw) = (tensor(&x), tensor(&w));
        let y = conv2d(&tx, &tw, None, &o);
        if let Ok(y) = &y {
            // An input without channels gives none (PyTorch's empty backend).
            let channels = if x[1] == 0 { 0 } else { w[0] };
            prop_assert_eq!(y.shape()[..2].to_vec(), vec![x[0], channels]);
        }
        judge("conv2d", y.map(|t| vec![t]))?;
        let g = Conv2dOptions { activation: Activation::None, ..o };
        judge("conv2d_backward_weight",
            conv2d_backward_weight(&tensor(&[x[0], w[0], 2, 2]), &tx, [w[2], w[3]], &g).map(|t| vec![t]))?;
        judge("conv2d_backward_input",
            conv2d_backward_input(&tensor(&[x[0], w[0], 2, 2]), &tw, [x[2], x[3]], &g).map(|t| vec![t]))?;
        let t = ConvTranspose2dOptions { stride: [stride, 1], groups, ..Default::default() };
        judge("conv_transpose2d", conv_transpose2d(&tx, &tw, None, &t).map(|t| vec![t]))?;
        let c1 = Conv1dOptions { stride, padding: wgtensor::ops::Padding1d { left: pad, right: 0 }, dilation: dil, groups, ..Default::default() };
        judge("conv1d", conv1d(&tensor(&x[..3]), &tensor(&w[..3]), None, &c1).map(|t| vec![t]))?;
    }

    #[test]
    fn batch_norms(shape in proptest::collection::vec(small_dim(), 0..5), eps in prop_oneof![Just(1e-5f64), Just(-1.0), Just(0.0), Just(1e300), Just(f64::NAN)]) {
        let x = tensor(&shape);
        // A NaN eps passes (F.batch_norm's checks are `<= 0` and `< 0`) and gives NaN: only
        // the Ok-or-named-error part applies.
        let keep = |ts: Vec<Tensor>| if eps.is_nan() { vec![] } else { ts };
        let c = shape.get(1).copied().unwrap_or(1);
        let rm = Tensor::zeros(dev(), &[c], DType::F32).unwrap();
        let rv = Tensor::full(dev(), &[c], 1.0, DType::F32).unwrap();
        judge("batch_norm_inference",
            batch_norm_inference(&x, &rm, &rv, &BatchNormOptions { eps, ..Default::default() }).map(|t| keep(vec![t])))?;
        let tr = batch_norm_train(&x, None, &BatchNormOptions { eps, ..Default::default() });
        if let Ok(out) = &tr {
            judge("batch_norm_backward",
                batch_norm_backward(&x, &x, None, &out.saved).map(|g| keep(vec![g.dx, g.dweight, g.dbias])))?;
        }
        judge("batch_norm_train", tr.map(|o| keep(vec![o.y, o.saved.mean().clone(), o.saved.invstd().clone()])))?;
    }

    #[test]
    fn rnns(
        gru in any::<bool>(), t in small_dim(), b in small_dim(), i in small_dim(), h in small_dim(),
        layers in 0usize..3, bidir in any::<bool>(), xi in small_dim(),
    ) {
        let kind = if gru { RnnKind::Gru } else { RnnKind::Lstm };
        let g = kind.gates();
        let d = if bidir { 2 } else { 1 };
        let mut ws = Vec::new();
        for l in 0..layers {
            for _ in 0..d {
                let inp = if l == 0 { i } else { d * h };
                match RnnWeights::new(kind, &tensor(&[g * h, inp]), &tensor(&[g * h, h]), None, None) {
                    Ok(w) => ws.push(w),
                    Err(e) => { judge(if gru { "gru" } else { "lstm" }, Err(e))?; return Ok(()); }
                }
            }
        }
        let name = if gru { "gru" } else { "lstm" };
        let rnn = match Rnn::new(kind, wgtensor::ops::RnnOptions { num_layers: layers, bidirectional: bidir, batch_first: false }, ws) {
            Ok(r) => r,
            Err(e) => return judge(name, Err(e)),
        };
        let x = tensor(&[t, b, xi]);
        let r = rnn.forward_train(&x, None, None);
        if let Ok((out, saved)) = &r {
            prop_assert_eq!(out.output.shape(), &[t, b, d * h][..]);
            let dy = Tensor::zeros(dev(), out.output.shape(), DType::F32).unwrap();
            judge(name, rnn.backward(saved, &dy, None, None).map(|g| vec![g.dx, g.dh0]))?;
        }
        judge(name, r.map(|(o, _)| vec![o.output, o.h_n]))?;
    }
}
