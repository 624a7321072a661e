//! RNN inputs that used to panic, run with wrong weights, or fail with an unclear error.

use wgtensor::ops::{lstm_cell, Rnn, RnnKind, RnnWeights};
use wgtensor::{DType, Error, Tensor};

use super::{dev, names_op, ramp, still_works, vals};

fn small(shape: &[usize], scale: f32) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| ((i * 7 % 11) as f32 - 5.0) * scale)
        .collect();
    Tensor::from_slice(dev(), &v, shape).unwrap()
}

fn weights(kind: RnnKind, input: usize, hidden: usize) -> RnnWeights {
    let g = kind.gates() * hidden;
    RnnWeights::new(
        kind,
        &small(&[g, input], 0.05),
        &small(&[g, hidden], 0.04),
        Some(&small(&[g], 0.03)),
        Some(&small(&[g], 0.02)),
    )
    .unwrap()
}

/// Input size 0: the gates see only the biases and the recurrence, exactly as an input of size
/// 1 holding zeros.
#[test]
fn input_size_zero_matches_a_zero_input() {
    for kind in [RnnKind::Lstm, RnnKind::Gru] {
        let (t, b, h) = (3, 2, 4);
        let w1 = weights(kind, 1, h);
        let w0 = RnnWeights::new(
            kind,
            &Tensor::zeros(dev(), &[kind.gates() * h, 0], DType::F32).unwrap(),
            &w1.w_hh,
            Some(&w1.b_ih),
            Some(&w1.b_hh),
        )
        .unwrap();
        let r0 = Rnn::new(
            kind,
            wgtensor::ops::RnnOptions {
                num_layers: 1,
                bidirectional: false,
                batch_first: false,
            },
            vec![w0],
        )
        .unwrap();
        let r1 = Rnn::new(
            kind,
            wgtensor::ops::RnnOptions {
                num_layers: 1,
                bidirectional: false,
                batch_first: false,
            },
            vec![w1],
        )
        .unwrap();
        let x0 = Tensor::zeros(dev(), &[t, b, 0], DType::F32).unwrap();
        let x1 = Tensor::zeros(dev(), &[t, b, 1], DType::F32).unwrap();
        let y0 = r0.forward(&x0, None, None).unwrap();
        let y1 = r1.forward(&x1, None, None).unwrap();
        let (a, e) = (vals(&y0.output), vals(&y1.output));
        assert_eq!(a.len(), t * b * h);
        for (p, q) in a.iter().zip(&e) {
            assert!((p - q).abs() < 1e-6, "{kind:?}: {a:?} vs {e:?}");
        }
        assert!(a.iter().any(|&v| v != 0.0), "the biases must show");
    }
}

/// Weights built by struct literal are checked (and strided ones packed) by `Rnn::new`, and
/// fields changed afterwards are checked at use.
#[test]
fn struct_literal_weights_are_validated() {
    let (i, h) = (3, 4);
    let good = weights(RnnKind::Lstm, i, h);
    // The same w_hh as a transposed (strided) view.
    let wt = good.w_hh.transpose(0, 1).unwrap().contiguous().unwrap();
    let strided = RnnWeights {
        w_hh: wt.transpose(0, 1).unwrap(),
        ..good.clone()
    };
    assert!(!strided.w_hh.is_contiguous());
    let x = small(&[2, 2, i], 0.3);
    let want = vals(
        &Rnn::new(
            RnnKind::Lstm,
            wgtensor::ops::RnnOptions {
                num_layers: 1,
                bidirectional: false,
                batch_first: false,
            },
            vec![good.clone()],
        )
        .unwrap()
        .forward(&x, None, None)
        .unwrap()
        .output,
    );
    let got = vals(
        &Rnn::new(
            RnnKind::Lstm,
            wgtensor::ops::RnnOptions {
                num_layers: 1,
                bidirectional: false,
                batch_first: false,
            },
            vec![strided.clone()],
        )
        .unwrap()
        .forward(&x, None, None)
        .unwrap()
        .output,
    );
    assert_eq!(got, want);
    // A wrong hidden size (w_hh of a GRU in an LSTM) is refused.
    let wrong = RnnWeights {
        w_hh: small(&[3 * h, h], 0.1),
        ..good.clone()
    };
    let e = Rnn::new(
        RnnKind::Lstm,
        wgtensor::ops::RnnOptions {
            num_layers: 1,
            bidirectional: false,
            batch_first: false,
        },
        vec![wrong.clone()],
    )
    .unwrap_err();
    names_op(&e, "lstm");
    // Fields changed after construction are checked at use.
    let mut r = Rnn::new(
        RnnKind::Lstm,
        wgtensor::ops::RnnOptions {
            num_layers: 1,
            bidirectional: false,
            batch_first: false,
        },
        vec![good],
    )
    .unwrap();
    r.weights[0].w_hh = strided.w_hh.clone();
    let e = r.forward(&x, None, None).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "lstm", .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("weight_hh"), "{e}");
    r.weights[0] = wrong;
    let e = r.forward(&x, None, None).unwrap_err();
    assert!(e.to_string().contains("weight_hh"), "{e}");
    still_works(dev());
}

#[test]
fn cell_errors_name_the_wrong_state() {
    let w = weights(RnnKind::Lstm, 3, 4);
    let x = ramp(&[2, 3]);
    let h = ramp(&[2, 4]);
    let e = lstm_cell(&x, &h, &ramp(&[2, 5]), &w).unwrap_err();
    names_op(&e, "lstm");
    let m = e.to_string();
    assert!(
        m.contains("hidden1 has inconsistent hidden_size: got 5, expected 4"),
        "{m}"
    );
    let e = lstm_cell(&x, &ramp(&[3, 4]), &ramp(&[2, 4]), &w).unwrap_err();
    assert!(
        e.to_string()
            .contains("Input batch size 2 doesn't match hidden0 batch size 3"),
        "{e}"
    );
}

#[test]
fn backward_with_a_foreign_saved_state_names_it() {
    let r = Rnn::new(
        RnnKind::Lstm,
        wgtensor::ops::RnnOptions {
            num_layers: 1,
            bidirectional: false,
            batch_first: false,
        },
        vec![weights(RnnKind::Lstm, 3, 4)],
    )
    .unwrap();
    let (_, saved_long) = r
        .forward_train(&small(&[5, 2, 3], 0.2), None, None)
        .unwrap();
    let (out, _) = r
        .forward_train(&small(&[2, 2, 3], 0.2), None, None)
        .unwrap();
    // dy of the short call with the long call's saved state: the shapes disagree.
    let e = r
        .backward(&saved_long, &out.output, None, None)
        .unwrap_err();
    names_op(&e, "lstm");
    assert!(
        e.to_string().contains("dy") || e.to_string().contains("saved"),
        "{e}"
    );
    // A saved state of another model (other hidden size) is named as such.
    let other = Rnn::new(
        RnnKind::Lstm,
        wgtensor::ops::RnnOptions {
            num_layers: 1,
            bidirectional: false,
            batch_first: false,
        },
        vec![weights(RnnKind::Lstm, 3, 6)],
    )
    .unwrap();
    let (o2, saved_other) = other
        .forward_train(&small(&[2, 2, 3], 0.2), None, None)
        .unwrap();
    let dy = Tensor::zeros(dev(), out.output.shape(), DType::F32).unwrap();
    let e = r.backward(&saved_other, &dy, None, None).unwrap_err();
    assert!(e.to_string().contains("saved state"), "{e}");
    drop(o2);
    still_works(dev());
}

/// Initial states given as strided views (last dim not unit-stride) are read correctly.
#[test]
fn strided_initial_states() {
    let (t, b, i, h) = (2, 3, 2, 4);
    let r = Rnn::new(
        RnnKind::Lstm,
        wgtensor::ops::RnnOptions {
            num_layers: 1,
            bidirectional: true,
            batch_first: false,
        },
        vec![weights(RnnKind::Lstm, i, h), weights(RnnKind::Lstm, i, h)],
    )
    .unwrap();
    let x = small(&[t, b, i], 0.3);
    // [2, H, B] transposed to [2, B, H]: stride of H is B.
    let h0t = small(&[2, h, b], 0.2).transpose(1, 2).unwrap();
    let c0t = small(&[2, h, b], 0.1).transpose(1, 2).unwrap();
    assert_ne!(h0t.strides()[2], 1);
    let want = r
        .forward(
            &x,
            Some(&h0t.contiguous().unwrap()),
            Some(&c0t.contiguous().unwrap()),
        )
        .unwrap();
    let got = r.forward(&x, Some(&h0t), Some(&c0t)).unwrap();
    assert_eq!(vals(&got.output), vals(&want.output));
    assert_eq!(vals(&got.h_n), vals(&want.h_n));
}

/// A whole model's state dict: names carry the module prefix.
#[test]
fn from_pytorch_accepts_module_prefixes() {
    use std::collections::HashMap;
    let w = weights(RnnKind::Gru, 3, 4);
    let mut sd = HashMap::new();
    sd.insert("encoder.rnn.weight_ih_l0".to_string(), w.w_ih.clone());
    sd.insert("encoder.rnn.weight_hh_l0".to_string(), w.w_hh.clone());
    sd.insert("encoder.rnn.bias_ih_l0".to_string(), w.b_ih.clone());
    sd.insert("encoder.rnn.bias_hh_l0".to_string(), w.b_hh.clone());
    sd.insert("decoder.weight".to_string(), small(&[2, 2], 0.1));
    let r = Rnn::from_pytorch(RnnKind::Gru, &sd, 1, false, false).unwrap();
    let direct = Rnn::new(
        RnnKind::Gru,
        wgtensor::ops::RnnOptions {
            num_layers: 1,
            bidirectional: false,
            batch_first: false,
        },
        vec![w],
    )
    .unwrap();
    let x = small(&[2, 2, 3], 0.3);
    assert_eq!(
        vals(&r.forward(&x, None, None).unwrap().output),
        vals(&direct.forward(&x, None, None).unwrap().output)
    );
    // Two RNN modules in one dict are ambiguous: an error naming them.
    sd.insert("other.weight_ih_l0".to_string(), small(&[12, 3], 0.1));
    let e = Rnn::from_pytorch(RnnKind::Gru, &sd, 1, false, false).unwrap_err();
    assert!(e.to_string().contains("several RNN modules"), "{e}");
}

/// Without an output gradient (`None`), backward equals backward with an all-zeros `dy`: only
/// the final states' gradients flow.
#[test]
fn backward_without_dy_equals_zeros() {
    use wgtensor::ops::RnnOptions;
    let dev = dev();
    let up = |shape: &[usize]| wgtensor::ops::uniform(dev, shape, -0.5, 0.5, DType::F32);
    let w = RnnWeights::new(
        RnnKind::Lstm,
        &up(&[16, 3]).unwrap(),
        &up(&[16, 4]).unwrap(),
        Some(&up(&[16]).unwrap()),
        Some(&up(&[16]).unwrap()),
    )
    .unwrap();
    let rnn = Rnn::new(
        RnnKind::Lstm,
        RnnOptions {
            batch_first: true,
            ..Default::default()
        },
        vec![w],
    )
    .unwrap();
    let x = up(&[2, 5, 3]).unwrap();
    let (out, saved) = rnn.forward_train(&x, None, None).unwrap();
    let dh = up(&[1, 2, 4]).unwrap();
    let zeros = Tensor::zeros(dev, out.output.shape(), DType::F32).unwrap();
    let a = rnn.backward(&saved, None, Some(&dh), None).unwrap();
    let b = rnn.backward(&saved, &zeros, Some(&dh), None).unwrap();
    assert_eq!(a.dx.to_vec::<f32>().unwrap(), b.dx.to_vec::<f32>().unwrap());
    assert_eq!(
        a.weights[0].w_hh.to_vec::<f32>().unwrap(),
        b.weights[0].w_hh.to_vec::<f32>().unwrap()
    );
    assert!(a.dx.to_vec::<f32>().unwrap().iter().any(|&v| v != 0.0));
}

/// More (row, unit) pairs than 65535 workgroups of 64 hold (B x H = 4,194,304 here): the state
/// copies (h0 in, the stacked h_n out, dh_n and dh0 in the backward) and the portable step
/// kernels spread their grid over y, as every other one-invocation-per-element op does. Rows
/// are independent, so the first and last rows must equal the same model run on those rows
/// alone, in the output, the final states and the gradients of x, h0 and c0.
#[test]
fn batch_times_hidden_past_one_grid_dimension() {
    use wgtensor::nn::{Gru, Lstm, RnnConfig};
    let (i, layers) = (2, 2);
    let portable = wgtensor::Device::with_options(wgtensor::DeviceOptions {
        disable_subgroups: true,
        ..Default::default()
    })
    .unwrap();
    // The GPU plans' tiled steps (64 batch rows a workgroup) would need a grid past the limit
    // from 65535 * 64 rows: they give way to the portable step, forward and backward.
    let gpu = super::common::gpu_plans_device();
    for (d, h) in [(dev(), 8), (&portable, 8), (gpu, 1)] {
        let b = 65535 * 64 / h + 8;
        for lstm in [true, false] {
            let c = RnnConfig {
                num_layers: layers,
                ..Default::default()
            };
            let m = if lstm {
                Lstm::new(d, i, h, c).unwrap()
            } else {
                Gru::new(d, i, h, c).unwrap()
            };
            let fill = |n: usize, k: f32| -> Vec<f32> {
                (0..n).map(|j| ((j as f32) * k).sin() * 0.5).collect()
            };
            let x = fill(b * i, 0.37);
            let s0 = fill(layers * b * h, 0.11);
            let rows: Vec<usize> = (0..4).chain(b - 4..b).collect();
            let pick = |v: &[f32], outer: usize, w: usize| -> Vec<f32> {
                let mut out = Vec::new();
                for o in 0..outer {
                    for &r in &rows {
                        out.extend_from_slice(&v[(o * b + r) * w..(o * b + r + 1) * w]);
                    }
                }
                out
            };
            // (output, h_n, c_n, dx, dh0, dc0) of a run on `n` rows.
            let run = |xs: &[f32], s: &[f32], n: usize| {
                let leaf = |v: &[f32], shape: &[usize]| {
                    Tensor::from_slice(d, v, shape)
                        .unwrap()
                        .requires_grad()
                        .unwrap()
                };
                let xt = leaf(xs, &[1, n, i]);
                let h0 = leaf(s, &[layers, n, h]);
                let c0 = leaf(s, &[layers, n, h]);
                let out = m
                    .forward_with_state(&xt, Some(&h0), lstm.then_some(&c0))
                    .unwrap();
                let mut loss = out
                    .output
                    .sum_all()
                    .unwrap()
                    .add(&out.h_n.mul_scalar(0.5).unwrap().sum_all().unwrap())
                    .unwrap();
                if let Some(c_n) = &out.c_n {
                    loss = loss
                        .add(&c_n.mul_scalar(0.25).unwrap().sum_all().unwrap())
                        .unwrap();
                }
                let g = loss.backward().unwrap();
                let grad = |t: &Tensor| g.get(t).map(vals).unwrap_or_default();
                [
                    vals(&out.output),
                    vals(&out.h_n),
                    out.c_n.as_ref().map(vals).unwrap_or_default(),
                    grad(&xt),
                    grad(&h0),
                    if lstm { grad(&c0) } else { vec![] },
                ]
            };
            let big = run(&x, &s0, b);
            let small = run(&pick(&x, 1, i), &pick(&s0, layers, h), rows.len());
            let widths = [
                (1, h),
                (layers, h),
                (layers, h),
                (1, i),
                (layers, h),
                (layers, h),
            ];
            let names = ["output", "h_n", "c_n", "dx", "dh0", "dc0"];
            for ((got, want), ((outer, w), name)) in
                big.iter().zip(&small).zip(widths.iter().zip(names))
            {
                let got = if got.is_empty() {
                    vec![]
                } else {
                    pick(got, *outer, *w)
                };
                assert_eq!(got.len(), want.len(), "{name}");
                for (k, (g, w)) in got.iter().zip(want).enumerate() {
                    assert!(
                        (g - w).abs() <= 1e-5,
                        "lstm {lstm}, {:?}: {name}[{k}] {g} != {w}",
                        d.adapter_info().name
                    );
                }
            }
        }
    }
}

/// An unbatched input's wrong-sized states: PyTorch's words compare them with the batch dim
/// of 1 its forward adds ("Expected hidden[0] size (1, 1, 20), got [2, 1, 20]"), ours show
/// them as the caller passed them.
#[test]
fn unbatched_state_errors_show_the_callers_shapes() {
    let lstm = wgtensor::nn::Lstm::new(dev(), 10, 20, Default::default()).unwrap();
    let x = Tensor::zeros(dev(), &[5, 10], DType::F32).unwrap();
    let h0 = Tensor::zeros(dev(), &[2, 20], DType::F32).unwrap();
    let c0 = Tensor::zeros(dev(), &[1, 20], DType::F32).unwrap();
    let e = lstm
        .forward_with_state(&x, Some(&h0), Some(&c0))
        .unwrap_err();
    let m = e.to_string();
    assert!(
        m.contains(
            "Expected hidden[0] size (1, 1, 20), got [2, 1, 20]: h0 must be [1, 20], got [2, 20]"
        ),
        "unexpected message {m:?}"
    );
    still_works(dev());
}
