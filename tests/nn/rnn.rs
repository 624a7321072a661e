//! Recurrent layers and cells: PyTorch's names and initialization, no-bias, dropout between
//! layers, unbatched input.

use super::*;

#[test]
fn lstm_and_gru_names_and_init() {
    let c = nn::RnnConfig {
        num_layers: 2,
        bidirectional: true,
        batch_first: true,
        ..Default::default()
    };
    let lstm = nn::Lstm::new(dev(), 5, 4, c).unwrap();
    let names: Vec<String> = lstm.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        &names[..5],
        [
            "weight_ih_l0",
            "weight_hh_l0",
            "bias_ih_l0",
            "bias_hh_l0",
            "weight_ih_l0_reverse"
        ]
    );
    assert_eq!(names.len(), 16);
    assert_eq!(names[8], "weight_ih_l1");
    let sd = lstm.state_dict();
    assert_eq!(sd[8].1.shape(), &[16, 8], "layer 1 sees both directions");
    let k = 1.0 / 2.0f32;
    assert!(sd.iter().all(|(_, t)| vals(t).iter().all(|v| v.abs() <= k)));
    let x = wgtensor::ops::randn(dev(), &[3, 6, 5], DType::F32).unwrap();
    assert_eq!(lstm.forward(&x).unwrap().shape(), &[3, 6, 8]);
    let out = lstm.forward_with_state(&x, None, None).unwrap();
    assert_eq!(out.h_n.shape(), &[4, 3, 4]);
    let gru = nn::Gru::new(dev(), 5, 4, Default::default()).unwrap();
    assert_eq!(gru.state_dict()[0].1.shape(), &[12, 5]);
    assert_eq!(
        gru.forward(&wgtensor::ops::randn(dev(), &[6, 3, 5], DType::F32).unwrap())
            .unwrap()
            .shape(),
        &[6, 3, 4]
    );
}

/// `without_bias()` is PyTorch's `bias=False`: the weights alone in the state dict, and the
/// same outputs and weight gradients as the layer with its biases zeroed.
#[test]
fn lstm_without_bias_matches_zero_biases() {
    let c = nn::RnnConfig {
        num_layers: 2,
        bidirectional: true,
        dropout: 0.5,
        ..Default::default()
    };
    let with = nn::Lstm::new(dev(), 3, 4, c).unwrap();
    let mut without = with.clone().without_bias().unwrap();
    let names: Vec<String> = without.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names.len(), 8);
    assert!(names.iter().all(|n| n.starts_with("weight_")), "{names:?}");
    assert_eq!(names[2], "weight_ih_l0_reverse");
    for (n, b) in with.named_parameters() {
        if n.starts_with("bias_") {
            let zeros = Tensor::zeros(dev(), b.shape(), DType::F32).unwrap();
            wgtensor::autograd::no_grad(|| b.copy_from(&zeros)).unwrap();
        }
    }
    let x = wgtensor::ops::randn(dev(), &[5, 2, 3], DType::F32).unwrap();
    let mut with = with;
    with.eval();
    without.eval();
    let (a, b) = (with.forward(&x).unwrap(), without.forward(&x).unwrap());
    assert_eq!(vals(&a), vals(&b));
    let ga = a.sum_all().unwrap().backward().unwrap();
    let gb = b.sum_all().unwrap().backward().unwrap();
    for (n, p) in without.named_parameters() {
        assert_eq!(vals(gb.get(&p).unwrap()), vals(ga.get(&p).unwrap()), "{n}");
    }
    // Training with dropout between layers runs the per-layer models, biases gone there too.
    without.train();
    let y = without.forward_with_state(&x, None, None).unwrap();
    assert_eq!(
        (y.output.shape(), y.h_n.shape()),
        (&[5, 2, 8][..], &[4, 2, 4][..])
    );
}

/// An edited public `num_layers` is an error on the training path with dropout between
/// layers (its own loop over the layers), as on the one-call path, never an overflow.
#[test]
fn lstm_dropout_path_rechecks_edited_fields() {
    let c = nn::RnnConfig {
        num_layers: 2,
        bidirectional: true,
        dropout: 0.5,
        ..Default::default()
    };
    let mut m = nn::Lstm::new(dev(), 4, 8, c).unwrap();
    let x = Tensor::zeros(dev(), &[3, 2, 4], DType::F32).unwrap();
    assert!(m.forward(&x).is_ok());
    for layers in [usize::MAX, 3] {
        m.rnn.num_layers = layers;
        let e = m.forward(&x).unwrap_err().to_string();
        assert!(e.contains("weight sets"), "{layers}: {e}");
    }
}

/// Edits to the public model (`batch_first`, a weight set) reach the training path with
/// dropout between layers as they reach evaluation: a vanishing p gives evaluation's output.
#[test]
fn rnn_dropout_path_follows_edits_to_the_model() {
    let mut gru = nn::Gru::new(
        dev(),
        4,
        8,
        nn::RnnConfig {
            num_layers: 2,
            dropout: 1e-9,
            ..Default::default()
        },
    )
    .unwrap();
    gru.rnn.batch_first = true;
    let other = nn::Gru::new(dev(), 8, 8, Default::default()).unwrap();
    gru.rnn.weights[1] = other.rnn.weights[0].clone();
    let x = wgtensor::ops::randn(dev(), &[3, 5, 4], DType::F32).unwrap();
    let train = vals(&gru.forward(&x).unwrap());
    gru.set_training(false);
    let eval = vals(&gru.forward(&x).unwrap());
    assert_eq!(train.len(), 3 * 5 * 8);
    assert!(
        train.iter().zip(&eval).all(|(a, b)| (a - b).abs() < 1e-5),
        "{train:?}\n{eval:?}"
    );
}

/// An empty batch over a long sequence returns at once (no step has anything to compute),
/// forward and backward, with PyTorch's shapes.
#[test]
fn rnn_empty_batch_over_a_long_sequence() {
    let lstm = nn::Lstm::new(dev(), 3, 4, Default::default()).unwrap();
    let x = Tensor::zeros(dev(), &[200_000, 0, 3], DType::F32)
        .unwrap()
        .requires_grad()
        .unwrap();
    let start = std::time::Instant::now();
    let out = lstm.forward_with_state(&x, None, None).unwrap();
    assert_eq!(out.output.shape(), &[200_000, 0, 4]);
    assert_eq!(out.h_n.shape(), &[1, 0, 4]);
    let g = out.output.sum_all().unwrap().backward().unwrap();
    assert_eq!(g.get(&x).unwrap().shape(), &[200_000, 0, 3]);
    let gw = vals(g.get(&lstm.rnn.weights[0].w_hh).unwrap());
    assert!(gw.iter().all(|&v| v == 0.0));
    // No step is recorded: nothing here grows with T but the empty shapes.
    assert!(start.elapsed().as_secs() < 60, "{:?}", start.elapsed());
}

/// PyTorch's `dropout` between stacked RNN layers: only in training, never after the last
/// layer; evaluation equals the fused model; p -> 0 matches it too; p = 1 cuts every layer
/// but the last off its input; gradients reach every layer; states keep their shapes.
#[test]
fn rnn_dropout_between_layers() {
    for gru in [false, true] {
        let c = |dropout| nn::RnnConfig {
            num_layers: 3,
            bidirectional: true,
            dropout,
            ..Default::default()
        };
        let make = |p| {
            if gru {
                nn::Gru::new(dev(), 5, 4, c(p)).unwrap()
            } else {
                nn::Lstm::new(dev(), 5, 4, c(p)).unwrap()
            }
        };
        let x = wgtensor::ops::randn(dev(), &[6, 2, 5], DType::F32).unwrap();
        let mut m = make(0.5);
        let fused = vals(&m.rnn.forward(&x, None, None).unwrap().output);
        m.set_training(false);
        assert_eq!(
            vals(&m.forward(&x).unwrap()),
            fused,
            "eval is the fused model"
        );
        m.set_training(true);
        let train = m.forward_with_state(&x, None, None).unwrap();
        assert_eq!(train.output.shape(), &[6, 2, 8]);
        assert_eq!(train.h_n.shape(), &[6, 2, 4]);
        assert_eq!(train.c_n.is_some(), !gru);
        assert_ne!(
            vals(&train.output),
            fused,
            "dropout changes the training output"
        );
        let g = train.output.sum_all().unwrap().backward().unwrap();
        assert!(m.named_parameters().iter().all(|(_, p)| g.get(p).is_some()));
        // A vanishing p keeps (and scales by ~1) every element: the layer-by-layer path equals
        // the fused one.
        let tiny = make(1e-9);
        let want = vals(&tiny.rnn.forward(&x, None, None).unwrap().output);
        let got = vals(&tiny.forward(&x).unwrap());
        assert!(got.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-5));
        // p = 1: the last layer sees zeros whatever the input.
        let all = make(1.0);
        let x2 = wgtensor::ops::randn(dev(), &[6, 2, 5], DType::F32).unwrap();
        assert_eq!(
            vals(&all.forward(&x).unwrap()),
            vals(&all.forward(&x2).unwrap())
        );
        // test_RNN_change_dropout: p set between forwards applies at the next one.
        m.set_dropout(0.0).unwrap();
        assert_eq!(m.dropout(), 0.0);
        assert_eq!(vals(&m.forward(&x).unwrap()), fused, "p set to 0");
        m.set_dropout(1.0).unwrap();
        assert_eq!(
            vals(&m.forward(&x).unwrap()),
            vals(&m.forward(&x2).unwrap()),
            "p set to 1"
        );
        assert!(m.set_dropout(f64::NAN).is_err() && m.set_dropout(-0.1).is_err());
        assert_eq!(m.dropout(), 1.0, "a refused p changes nothing");
    }
    assert!(nn::Lstm::new(
        dev(),
        5,
        4,
        nn::RnnConfig {
            dropout: 1.5,
            ..Default::default()
        }
    )
    .is_err());
}

/// PyTorch's unbatched recurrent input: `[T, I]` with `[L * D, H]` states runs as a batch of
/// one (where batch_first puts it or not) and gives `[T, D * H]` and `[L * D, H]`; 3-D states
/// with a 2-D input are an error naming them.
#[test]
fn rnn_unbatched_input() {
    for (gru, batch_first) in [(false, false), (true, true), (false, true)] {
        let c = nn::RnnConfig {
            num_layers: 2,
            bidirectional: true,
            batch_first,
            ..Default::default()
        };
        let m = if gru {
            nn::Gru::new(dev(), 5, 4, c).unwrap()
        } else {
            nn::Lstm::new(dev(), 5, 4, c).unwrap()
        };
        let x = wgtensor::ops::randn(dev(), &[6, 5], DType::F32).unwrap();
        let h0 = wgtensor::ops::randn(dev(), &[4, 4], DType::F32).unwrap();
        let c0 = (!gru).then(|| wgtensor::ops::randn(dev(), &[4, 4], DType::F32).unwrap());
        let one = m.forward_with_state(&x, Some(&h0), c0.as_ref()).unwrap();
        assert_eq!(one.output.shape(), &[6, 8]);
        assert_eq!(one.h_n.shape(), &[4, 4]);
        let bd = if batch_first { 0 } else { 1 };
        let batched = m
            .forward_with_state(
                &x.unsqueeze(bd).unwrap(),
                Some(&h0.unsqueeze(1).unwrap()),
                c0.as_ref().map(|c| c.unsqueeze(1).unwrap()).as_ref(),
            )
            .unwrap();
        assert_eq!(vals(&one.output), vals(&batched.output));
        assert_eq!(vals(&one.h_n), vals(&batched.h_n));
        if let (Some(a), Some(b)) = (&one.c_n, &batched.c_n) {
            assert_eq!(a.shape(), &[4, 4]);
            assert_eq!(vals(a), vals(b));
        }
        let e = m
            .forward_with_state(&x, Some(&h0.unsqueeze(1).unwrap()), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("For unbatched 2-D input, hx should also be 2-D but got 3-D tensor"),
            "{e}"
        );
        // Gradients reach the parameters through the unbatched path.
        let g = m
            .forward(&x)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        assert!(m.named_parameters().iter().all(|(_, p)| g.get(p).is_some()));
    }
}

/// PyTorch's unbatched cells: lstm_cell / gru_cell take x [I], h [H] (and c [H]) and return
/// states of h's shape, equal to the batch-of-one step.
#[test]
fn rnn_cells_take_unbatched_input() {
    use wgtensor::ops::{gru_cell, lstm_cell, randn, RnnKind, RnnWeights};
    let (i, h) = (3, 4);
    for kind in [RnnKind::Lstm, RnnKind::Gru] {
        let g = if kind == RnnKind::Lstm { 4 } else { 3 };
        let w_ih = randn(dev(), &[g * h, i], DType::F32).unwrap();
        let w_hh = randn(dev(), &[g * h, h], DType::F32).unwrap();
        let w = RnnWeights::new(kind, &w_ih, &w_hh, None, None).unwrap();
        let x = randn(dev(), &[i], DType::F32).unwrap();
        let h0 = randn(dev(), &[h], DType::F32).unwrap();
        let c0 = randn(dev(), &[h], DType::F32).unwrap();
        let b = |t: &Tensor| t.unsqueeze(0).unwrap();
        if kind == RnnKind::Lstm {
            let (h1, c1) = lstm_cell(&x, &h0, &c0, &w).unwrap();
            let (hb, cb) = lstm_cell(&b(&x), &b(&h0), &b(&c0), &w).unwrap();
            assert_eq!((h1.shape(), c1.shape()), (&[h][..], &[h][..]));
            assert_eq!((vals(&h1), vals(&c1)), (vals(&hb), vals(&cb)));
        } else {
            let h1 = gru_cell(&x, &h0, &w).unwrap();
            assert_eq!(h1.shape(), &[h]);
            assert_eq!(vals(&h1), vals(&gru_cell(&b(&x), &b(&h0), &w).unwrap()));
            // A batched x with an unbatched h is neither form.
            assert!(gru_cell(&b(&x), &h0, &w).is_err());
        }
    }
}

/// nn.LSTMCell / nn.GRUCell: PyTorch's names and init bounds; a step against an f64 reference
/// of PyTorch's cell formulas over the cell's own parameters (batched and unbatched, an absent
/// state as zeros); gradients reach every parameter; a loaded state dict reaches the step;
/// `bias: false` leaves the biases out.
#[test]
fn lstm_and_gru_cells() {
    let d = dev();
    let (i, h, b) = (3usize, 4usize, 2usize);
    let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
    let f64s = |t: &Tensor| -> Vec<f64> { vals(t).iter().map(|&v| v as f64).collect() };
    let xv: Vec<f32> = (0..b * i).map(|k| (k as f32 * 0.37).sin()).collect();
    let hv: Vec<f32> = (0..b * h).map(|k| (k as f32 * 0.53).cos() * 0.5).collect();
    let cv: Vec<f32> = (0..b * h).map(|k| (k as f32 * 0.29).sin() * 0.8).collect();
    let x = Tensor::from_slice(d, &xv, &[b, i]).unwrap();
    let h0 = Tensor::from_slice(d, &hv, &[b, h]).unwrap();
    let c0 = Tensor::from_slice(d, &cv, &[b, h]).unwrap();
    for lstm in [true, false] {
        let (lc, gc) = if lstm {
            (Some(nn::LstmCell::new(d, i, h, true).unwrap()), None)
        } else {
            (None, Some(nn::GruCell::new(d, i, h, true).unwrap()))
        };
        let m: &dyn Module = match (&lc, &gc) {
            (Some(c), _) => c,
            (_, Some(c)) => c,
            _ => unreachable!(),
        };
        let sd = m.state_dict();
        let names: Vec<&str> = sd.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]);
        let bound = 1.0 / (h as f32).sqrt();
        for (n, t) in &sd {
            assert!(vals(t).iter().all(|v| v.abs() <= bound), "{n} init");
        }
        let (wi, wh, bi, bh) = (
            f64s(&sd[0].1),
            f64s(&sd[1].1),
            f64s(&sd[2].1),
            f64s(&sd[3].1),
        );
        // Gate pre-activations of row r, unit u: W_ih x + b_ih and W_hh h + b_hh, separately
        // (GRU's n gate applies r to the second).
        let unit = |r: usize, gate: usize, u: usize, hs: &[f32]| -> (f64, f64) {
            let row = gate * h + u;
            let a = bi[row]
                + (0..i)
                    .map(|k| wi[row * i + k] * xv[r * i + k] as f64)
                    .sum::<f64>();
            let c = bh[row]
                + (0..h)
                    .map(|k| wh[row * h + k] * hs[r * h + k] as f64)
                    .sum::<f64>();
            (a, c)
        };
        for zero_state in [false, true] {
            let hs: Vec<f32> = if zero_state {
                vec![0.0; b * h]
            } else {
                hv.clone()
            };
            let cs: Vec<f32> = if zero_state {
                vec![0.0; b * h]
            } else {
                cv.clone()
            };
            let (got_h, got_c) = match (&lc, &gc, zero_state) {
                (Some(c), _, false) => {
                    let (h1, c1) = c.forward_cell(&x, Some((&h0, &c0))).unwrap();
                    (vals(&h1), vals(&c1))
                }
                (Some(c), _, true) => {
                    let (h1, c1) = c.forward_cell(&x, None).unwrap();
                    (vals(&h1), vals(&c1))
                }
                (_, Some(c), false) => (vals(&c.forward_cell(&x, Some(&h0)).unwrap()), vec![]),
                (_, Some(c), true) => (vals(&c.forward(&x).unwrap()), vec![]),
                _ => unreachable!(),
            };
            for r in 0..b {
                for u in 0..h {
                    let s = |gate: usize| {
                        let (a, c) = unit(r, gate, u, &hs);
                        a + c
                    };
                    let (want_h, want_c) = if lstm {
                        let c1 = sig(s(1)) * cs[r * h + u] as f64 + sig(s(0)) * s(2).tanh();
                        (sig(s(3)) * c1.tanh(), Some(c1))
                    } else {
                        let rr = sig(s(0));
                        let z = sig(s(1));
                        let (a, c) = unit(r, 2, u, &hs);
                        let n = (a + rr * c).tanh();
                        ((1.0 - z) * n + z * hs[r * h + u] as f64, None)
                    };
                    let k = r * h + u;
                    assert!(
                        (got_h[k] as f64 - want_h).abs() < 1e-5,
                        "lstm {lstm} h[{k}]"
                    );
                    if let Some(wc) = want_c {
                        assert!((got_c[k] as f64 - wc).abs() < 1e-5, "c[{k}]");
                    }
                }
            }
        }
        // Unbatched: the first row alone, states [H].
        let x1 = x.narrow(0, 0, 1).unwrap().reshape(&[i]).unwrap();
        let h1 = match (&lc, &gc) {
            (Some(c), _) => c.forward_cell(&x1, None).unwrap().0,
            (_, Some(c)) => c.forward_cell(&x1, None).unwrap(),
            _ => unreachable!(),
        };
        assert_eq!(h1.shape(), &[h]);
        // Gradients reach every parameter.
        let out = match (&lc, &gc) {
            (Some(c), _) => c.forward_cell(&x, Some((&h0, &c0))).unwrap().0,
            (_, Some(c)) => c.forward_cell(&x, Some(&h0)).unwrap(),
            _ => unreachable!(),
        };
        let grads = out.sum_all().unwrap().backward().unwrap();
        for (n, t) in &m.named_parameters() {
            assert!(grads.get(t).is_some(), "lstm {lstm}: no gradient for {n}");
        }
    }
    // A loaded state dict reaches the step: zero weights and biases give h' = 0 (GRU from a
    // zero state: (1 - z) tanh(0) + z 0).
    let mut cell = nn::GruCell::new(d, i, h, true).unwrap();
    let zeros: std::collections::HashMap<String, Tensor> = cell
        .state_dict()
        .into_iter()
        .map(|(n, t)| (n, Tensor::zeros(d, t.shape(), DType::F32).unwrap()))
        .collect();
    cell.load_state_dict(&zeros, true).unwrap();
    assert!(vals(&cell.forward(&x).unwrap()).iter().all(|&v| v == 0.0));
    let no_bias = nn::LstmCell::new(d, i, h, false).unwrap();
    let names: Vec<String> = no_bias.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["weight_ih", "weight_hh"]);
    // PyTorch's cells take a hidden size of 0 (test_RNN_cell_forward_zero_hidden_size).
    let x = Tensor::zeros(d, &[3, 10], DType::F32).unwrap();
    let h0 = Tensor::zeros(d, &[3, 0], DType::F32).unwrap();
    let gru = nn::GruCell::new(d, 10, 0, true).unwrap();
    assert_eq!(gru.forward_cell(&x, Some(&h0)).unwrap().shape(), [3, 0]);
    assert_eq!(gru.forward(&x).unwrap().shape(), [3, 0]);
    let lstm = nn::LstmCell::new(d, 10, 0, true).unwrap();
    let (h, c) = lstm.forward_cell(&x, Some((&h0, &h0))).unwrap();
    assert_eq!((h.shape(), c.shape()), (&[3, 0][..], &[3, 0][..]));
    assert_eq!(lstm.forward_cell(&x, None).unwrap().0.shape(), [3, 0]);
}
