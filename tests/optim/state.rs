//! Optimizer state saved and restored; refused steps and state loads change nothing.

use super::*;

/// Saving the state and loading it into a fresh optimizer continues the same trajectory; a
/// parameter without a gradient is skipped.
#[test]
fn state_round_trip_and_skipped_params() {
    let n = 16;
    let mk = |v: f32| {
        Tensor::full(dev(), &[n], v as f64, DType::F32)
            .unwrap()
            .requires_grad()
            .unwrap()
    };
    let (a, b) = (mk(1.0), mk(2.0));
    let o = AdamOptions {
        lr: 0.05,
        amsgrad: true,
        ..Default::default()
    };
    let mut opt = Adam::new(vec![a.clone(), b.clone()], o).unwrap();
    let g = Tensor::from_slice(dev(), &grad_values(n, 0), &[n]).unwrap();
    opt.step_with(&[Some(&g), None]).unwrap();
    assert_eq!(vals(&b), vec![2.0; n], "no gradient: untouched");
    // Copy the state (the optimizer updates its tensors in place).
    let saved: Vec<(String, Tensor)> = opt
        .state_tensors()
        .into_iter()
        .map(|(k, t)| (k, t.add_scalar(0.0).unwrap()))
        .collect();
    let steps = [opt.step_count(0).unwrap(), opt.step_count(1).unwrap()];
    assert_eq!(saved.len(), 3);
    let a2 = no_grad(|| a.add_scalar(0.0))
        .unwrap()
        .requires_grad()
        .unwrap();
    opt.step_with(&[Some(&g), None]).unwrap();
    let mut fresh = Adam::new(vec![a2.clone(), b.clone()], o).unwrap();
    fresh.load_state_tensors(&saved, &steps).unwrap();
    fresh.step_with(&[Some(&g), None]).unwrap();
    assert_eq!(vals(&a2), vals(&a));
    // A parameter without state is at step 0 (PyTorch keeps the step in the state): a later
    // count for it is refused, not run with zero moments and a skewed bias correction.
    let e = fresh.load_state_tensors(&[], &[3, 0]).unwrap_err();
    assert!(e.to_string().contains("no state"), "{e}");
    // Names are checked.
    let e = fresh
        .load_state_tensors(&[("7.exp_avg".into(), mk(0.0))], &steps)
        .unwrap_err();
    assert!(e.to_string().starts_with("adam:"), "{e}");
    // SGD's momentum buffers round-trip too.
    let p = mk(1.0);
    let mut sgd = Sgd::new(
        vec![p.clone()],
        SgdOptions {
            lr: 0.1,
            momentum: 0.9,
            ..Default::default()
        },
    )
    .unwrap();
    sgd.step_with(&[Some(&g)]).unwrap();
    let st = sgd.state_tensors();
    assert_eq!(st[0].0, "0.momentum_buffer");
    assert_eq!(vals(&st[0].1), vals(&g));
}

/// Every refused SGD step (gradient count, shape, dtype, device-side aliasing of the parameter
/// or of the optimizer's state, a bad gradient at the second parameter) leaves the parameters,
/// their versions and the momentum buffers exactly as they were; valid steps then give
/// PyTorch's numbers.
#[test]
fn refused_sgd_steps_change_nothing() {
    let w = leaf(&[1.0, 2.0]);
    let v = leaf(&[5.0, 6.0, 7.0]);
    let mut opt = Sgd::new(vec![w.clone(), v.clone()], sgd_momentum()).unwrap();
    let ones = Tensor::from_slice(dev(), &[1.0f32, 1.0], &[2]).unwrap();
    let ones3 = Tensor::from_slice(dev(), &[1.0f32, 1.0, 1.0], &[3]).unwrap();
    let wrong_shape = Tensor::from_slice(dev(), &[1.0f32, 1.0, 1.0], &[3]).unwrap();
    let wrong_dtype = Tensor::from_slice(dev(), &[1i32, 1], &[2]).unwrap();
    let unchanged = |w_want: &[f64], v_want: &[f64], versions: (u64, u64)| {
        assert_eq!(vals(&w), w_want);
        assert_eq!(vals(&v), v_want);
        assert_eq!((w.version(), v.version()), versions);
    };
    let versions = (w.version(), v.version());
    let refused: Vec<Vec<Option<&Tensor>>> = vec![
        vec![Some(&wrong_shape), None],
        vec![Some(&wrong_dtype), None],
        vec![Some(&ones)],
        vec![Some(&ones), Some(&ones3), None],
        // A failure at the second parameter leaves the first one unstepped.
        vec![Some(&ones), Some(&ones)],
        // The parameter as its own gradient, and as another parameter's.
        vec![Some(&w), None],
        vec![Some(&ones), Some(&v)],
        vec![None, Some(&v)],
    ];
    for (k, g) in refused.iter().enumerate() {
        let e = opt.step_with(g).unwrap_err();
        assert!(e.to_string().starts_with("sgd:"), "case {k}: {e}");
        unchanged(&[1.0, 2.0], &[5.0, 6.0, 7.0], versions);
        assert!(
            opt.state_tensors().is_empty(),
            "case {k}: no momentum buffer"
        );
    }
    // A view of the parameter is its storage too.
    let view = w.detach().reshape(&[2]).unwrap();
    assert!(opt.step_with(&[Some(&view), None]).is_err());
    // The first valid step: PyTorch's [0.9, 1.9] (not [0.95, 1.95] from a stale zero buffer).
    opt.step_with(&[Some(&ones), None]).unwrap();
    close(&vals(&w), &[0.9, 1.9], "first step");
    assert_eq!(vals(&v), vec![5.0, 6.0, 7.0], "no gradient: skipped");
    let state = opt.state_tensors();
    assert_eq!(state.len(), 1);
    assert_eq!(state[0].0, "0.momentum_buffer");
    // The optimizer's own state as a gradient is refused too.
    let before = state_vals(opt.state_tensors());
    let versions = (w.version(), v.version());
    let e = opt.step_with(&[Some(&state[0].1), None]).unwrap_err();
    assert!(e.to_string().contains("state"), "{e}");
    let e = opt.step_with(&[Some(&ones), Some(&wrong_shape.reshape(&[1, 3]).unwrap())]);
    assert!(e.is_err());
    assert_eq!(state_vals(opt.state_tensors()), before);
    assert_eq!((w.version(), v.version()), versions);
    close(&vals(&w), &[0.9, 1.9], "after refused steps");
    // The second step: buf = 0.9 * 1 + 1 = 1.9, w = [0.9, 1.9] - 0.19.
    opt.step_with(&[Some(&ones), Some(&ones3)]).unwrap();
    close(&vals(&w), &[0.71, 1.71], "second step");
    close(&vals(&v), &[4.9, 5.9, 6.9], "v's first step");
}

/// Refused Adam steps count no step and create no state; the first valid step is step 1.
#[test]
fn refused_adam_steps_change_nothing() {
    let o = AdamOptions {
        lr: 0.1,
        amsgrad: true,
        ..Default::default()
    };
    let a = leaf(&[1.0, 2.0]);
    let b = leaf(&[3.0, 4.0]);
    let mut opt = Adam::new(vec![a.clone(), b.clone()], o).unwrap();
    let g = Tensor::from_slice(dev(), &[0.5f32, -1.0], &[2]).unwrap();
    let bad = Tensor::from_slice(dev(), &[0.5f32], &[1]).unwrap();
    for grads in [
        vec![Some(&g), Some(&bad)],
        vec![Some(&a), None],
        vec![Some(&g), Some(&a)],
        vec![Some(&g)],
    ] {
        assert!(opt.step_with(&grads).is_err());
        assert_eq!(opt.step_counts(), &[0, 0]);
        assert!(opt.state_tensors().is_empty());
        assert_eq!((vals(&a), vals(&b)), (vec![1.0, 2.0], vec![3.0, 4.0]));
    }
    opt.step_with(&[Some(&g), None]).unwrap();
    assert_eq!(opt.step_counts(), &[1, 0]);
    let mut want = vec![1.0, 2.0];
    let mut st = (vec![0.0; 2], vec![0.0; 2], vec![0.0; 2]);
    adam_ref(&mut want, &mut st, 1, &[0.5, -1.0], &o);
    close(&vals(&a), &want, "adam step 1");
    // A refused step after state exists: its moments and counts stay.
    let before = state_vals(opt.state_tensors());
    assert_eq!(before.len(), 3);
    let exp_avg = opt.state_tensors().remove(0).1;
    assert!(opt.step_with(&[Some(&exp_avg), None]).is_err());
    assert!(opt.step_with(&[Some(&g), Some(&bad)]).is_err());
    assert_eq!(state_vals(opt.state_tensors()), before);
    assert_eq!(opt.step_counts(), &[1, 0]);
    opt.step_with(&[Some(&g), None]).unwrap();
    adam_ref(&mut want, &mut st, 2, &[0.5, -1.0], &o);
    close(&vals(&a), &want, "adam step 2");
}

/// Loading state checks every entry before replacing anything and keeps private copies.
#[test]
fn load_state_is_atomic_and_private() {
    let w = leaf(&[1.0, 2.0]);
    let v = leaf(&[5.0, 6.0, 7.0]);
    let mut opt = Sgd::new(
        vec![("w".to_string(), w.clone()), ("v".to_string(), v.clone())],
        sgd_momentum(),
    )
    .unwrap();
    let ones = Tensor::from_slice(dev(), &[1.0f32, 1.0], &[2]).unwrap();
    opt.step_with(&[Some(&ones), None]).unwrap();
    let before = state_vals(opt.state_tensors());
    assert_eq!(
        before,
        vec![("w.momentum_buffer".to_string(), vec![1.0, 1.0])]
    );
    let mine = Tensor::from_slice(dev(), &[4.0f32, 4.0], &[2]).unwrap();
    let three = Tensor::from_slice(dev(), &[0.0f32, 0.0, 0.0], &[3]).unwrap();
    let bad: Vec<Vec<(String, Tensor)>> = vec![
        // A good entry first, then a bad one: nothing is loaded.
        vec![
            ("w.momentum_buffer".into(), mine.clone()),
            ("v.momentum_buffer".into(), mine.clone()),
        ],
        vec![
            ("w.momentum_buffer".into(), mine.clone()),
            ("nope.momentum_buffer".into(), three.clone()),
        ],
        vec![
            ("w.momentum_buffer".into(), mine.clone()),
            ("w.momentum_buffer".into(), mine.clone()),
        ],
        vec![("w.exp_avg".into(), mine.clone())],
        // A position past the parameters (a position within them loads: see below).
        vec![("2.momentum_buffer".into(), mine.clone())],
        // Integer state is no momentum buffer.
        vec![(
            "w.momentum_buffer".into(),
            Tensor::from_slice(dev(), &[1i32, 1], &[2]).unwrap(),
        )],
    ];
    for (k, st) in bad.iter().enumerate() {
        let e = opt.load_state_tensors(st).unwrap_err();
        assert!(e.to_string().starts_with("sgd:"), "case {k}: {e}");
        assert_eq!(state_vals(opt.state_tensors()), before, "case {k}");
    }
    // A valid load is a copy: writing the caller's tensor afterwards changes nothing.
    opt.load_state_tensors(&[
        ("w.momentum_buffer".into(), mine.clone()),
        ("v.momentum_buffer".into(), three.clone()),
    ])
    .unwrap();
    let st = opt.state_tensors();
    assert!(st
        .iter()
        .all(|(_, t)| !t.shares_storage(&mine) && !t.shares_storage(&three)));
    no_grad(|| mine.copy_from(&ones)).unwrap();
    assert_eq!(
        state_vals(opt.state_tensors()),
        vec![
            ("w.momentum_buffer".to_string(), vec![4.0, 4.0]),
            ("v.momentum_buffer".to_string(), vec![0.0, 0.0, 0.0]),
        ]
    );
    // buf = 0.9 * 4 + 1 = 4.6; w = [1, 2] - 0.1 * [1, 1] - 0.46.
    opt.step_with(&[Some(&ones), None]).unwrap();
    close(&vals(&w), &[0.44, 1.44], "step from the loaded buffer");
    // Loading replaces the whole state: an empty load drops the buffers.
    opt.load_state_tensors(&[]).unwrap();
    assert!(opt.state_tensors().is_empty());
    // State of another float dtype is cast to the parameter's, as PyTorch's load_state_dict.
    if dev().supports_f16() {
        let half = mine.to_dtype(DType::F16).unwrap();
        opt.load_state_tensors(&[("w.momentum_buffer".into(), half)])
            .unwrap();
        let st = opt.state_tensors();
        assert_eq!(
            (st[0].1.dtype(), vals(&st[0].1)),
            (DType::F32, vec![1.0, 1.0])
        );
    }

    // Adam: an incomplete entry set, AMSGrad's entry without AMSGrad, a wrong count of steps.
    let a = leaf(&[1.0, 2.0]);
    let mut adam = Adam::new(vec![a.clone()], AdamOptions::default()).unwrap();
    adam.step_with(&[Some(&ones)]).unwrap();
    let before = state_vals(adam.state_tensors());
    let z = || Tensor::zeros(dev(), &[2], DType::F32).unwrap();
    for (st, steps) in [
        (vec![("0.exp_avg".to_string(), z())], vec![5]),
        (
            vec![
                ("0.exp_avg".to_string(), z()),
                ("0.exp_avg_sq".to_string(), z()),
                ("0.max_exp_avg_sq".to_string(), z()),
            ],
            vec![5],
        ),
        (
            vec![
                ("0.exp_avg".to_string(), z()),
                ("0.exp_avg_sq".to_string(), z()),
            ],
            vec![5, 5],
        ),
    ] {
        assert!(adam.load_state_tensors(&st, &steps).is_err());
        assert_eq!(state_vals(adam.state_tensors()), before);
        assert_eq!(adam.step_counts(), &[1]);
    }
}

/// A name given twice (two groups from sibling modules' `named_parameters`, as PyTorch
/// accepts) is kept by `param_names`; the state of a later parameter with an earlier one's
/// name is keyed `{name}[{index}]`, so both round-trip, and adding a group renames no earlier
/// key; a derived key that is another parameter's name is suffixed again.
#[test]
fn a_name_given_twice_keys_the_state_by_index() {
    let mk = |v: f32| leaf(&[v, v]);
    let (w0, b0, w1) = (mk(1.0), mk(2.0), mk(3.0));
    let o = SgdOptions {
        lr: 0.1,
        momentum: 0.9,
        ..Default::default()
    };
    let named = |v: Vec<(&str, &Tensor)>| -> Vec<(String, Tensor)> {
        v.into_iter()
            .map(|(n, t)| (n.to_string(), t.clone()))
            .collect()
    };
    let mut sgd = Sgd::new(named(vec![("weight", &w0), ("bias", &b0)]), o).unwrap();
    let g0 = Tensor::from_slice(dev(), &[1.0f32, 1.0], &[2]).unwrap();
    sgd.step_with(&[Some(&g0), None]).unwrap();
    let before: Vec<String> = sgd.state_tensors().into_iter().map(|(k, _)| k).collect();
    assert_eq!(before, ["weight.momentum_buffer"]);
    sgd.add_param_group(ParamGroup::new(named(vec![("weight", &w1)])).lr(1.0))
        .unwrap();
    assert_eq!(sgd.param_names(), &["weight", "bias", "weight"]);
    let g1 = Tensor::from_slice(dev(), &[2.0f32, 2.0], &[2]).unwrap();
    sgd.step_with(&[Some(&g0), None, Some(&g1)]).unwrap();
    // Each group's rate: 1 - 0.1 - 0.1 (1 + 0.9) and 3 - 1.0 * 2.
    close(&vals(&w0), &[0.71, 0.71], "group 0");
    close(&vals(&w1), &[1.0, 1.0], "group 1");
    let st = state_vals(sgd.state_tensors());
    let keys: Vec<&str> = st.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        ["weight.momentum_buffer", "weight[2].momentum_buffer"]
    );
    assert_eq!(st[1].1, vec![2.0, 2.0]);
    let saved: Vec<(String, Tensor)> = sgd
        .state_tensors()
        .into_iter()
        .map(|(k, t)| (k, t.add_scalar(0.0).unwrap()))
        .collect();
    // Loaded by key: swapped values land on the other parameter.
    let swapped = vec![
        (saved[0].0.clone(), saved[1].1.clone()),
        (saved[1].0.clone(), saved[0].1.clone()),
    ];
    sgd.load_state_tensors(&swapped).unwrap();
    let st = state_vals(sgd.state_tensors());
    close(&st[0].1, &[2.0, 2.0], "weight's buffer");
    close(&st[1].1, &[1.9, 1.9], "weight[2]'s buffer");
    assert!(sgd
        .load_state_tensors(&[("weight[1].momentum_buffer".into(), g0.clone())])
        .is_err());
    // Adam names its moments the same way.
    let mut adam = Adam::new(
        named(vec![("w", &mk(1.0)), ("w", &mk(1.0))]),
        AdamOptions::default(),
    )
    .unwrap();
    adam.step_with(&[None, Some(&g0)]).unwrap();
    let keys: Vec<String> = adam.state_tensors().into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["w[1].exp_avg", "w[1].exp_avg_sq"]);
    // "x" twice derives "x[1]", which a third parameter is called: it becomes "x[1][2]".
    let mut s = Sgd::new(
        named(vec![("x", &mk(0.0)), ("x", &mk(0.0)), ("x[1]", &mk(0.0))]),
        o,
    )
    .unwrap();
    s.step_with(&[Some(&g0), Some(&g0), Some(&g0)]).unwrap();
    let keys: Vec<String> = s.state_tensors().into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        keys,
        [
            "x.momentum_buffer",
            "x[1].momentum_buffer",
            "x[1][2].momentum_buffer"
        ]
    );
}

/// State saved by an optimizer of plain tensors (keyed by index) loads into one built on the
/// same parameters with names, by position, as PyTorch's test_can_load_from_to_named_state_dict;
/// their momentum then moves alike. An index past the parameters, or both keys of one
/// parameter, are refused.
#[test]
fn indexed_state_loads_into_a_named_optimizer_by_position() {
    let o = sgd_momentum();
    let (a0, a1) = (leaf(&[1.0, 2.0]), leaf(&[3.0, 4.0]));
    let (b0, b1) = (leaf(&[1.0, 2.0]), leaf(&[3.0, 4.0]));
    let g = Tensor::from_slice(dev(), &[0.5f32, -0.5], &[2]).unwrap();
    let mut plain = Sgd::new(vec![a0.clone(), a1.clone()], o).unwrap();
    plain.step_with(&[Some(&g), Some(&g)]).unwrap();
    let saved = plain.state_tensors();
    assert_eq!(saved[1].0, "1.momentum_buffer");
    let names = vec![
        ("fc.weight".to_string(), b0.clone()),
        ("fc.bias".to_string(), b1.clone()),
    ];
    let mut named = Sgd::new(names, o).unwrap();
    named.load_state_tensors(&saved).unwrap();
    let st = state_vals(named.state_tensors());
    assert_eq!(st[0].0, "fc.weight.momentum_buffer");
    assert_eq!(st[1].1, state_vals(saved.clone())[1].1);
    // The next step continues both momentum buffers alike.
    plain.step_with(&[Some(&g), Some(&g)]).unwrap();
    named.step_with(&[Some(&g), Some(&g)]).unwrap();
    let (p, n) = (
        state_vals(plain.state_tensors()),
        state_vals(named.state_tensors()),
    );
    assert_eq!(p[0].1, n[0].1);
    assert_eq!(p[1].1, n[1].1);
    let bad = vec![("2.momentum_buffer".to_string(), g.clone())];
    assert!(named.load_state_tensors(&bad).is_err());
    let twice = vec![
        ("0.momentum_buffer".to_string(), g.clone()),
        ("fc.weight.momentum_buffer".to_string(), g.clone()),
    ];
    assert!(named.load_state_tensors(&twice).is_err());
}

/// A learning rate, weight decay or Adam step size past f32 is PyTorch's overflow error at the
/// step (its add / addcdiv convert them with a check), before any parameter changes.
#[test]
fn steps_refuse_scalars_past_f32() {
    let ones = Tensor::from_slice(dev(), &[1.0f32, 1.0], &[2]).unwrap();
    let words = "value cannot be converted to type float without overflow";
    let sgds = [
        SgdOptions {
            lr: 1e39,
            ..Default::default()
        },
        SgdOptions {
            weight_decay: 1e39,
            ..Default::default()
        },
        SgdOptions {
            momentum: 1e39,
            nesterov: true,
            ..Default::default()
        },
    ];
    for o in sgds {
        let w = leaf(&[1.0, 2.0]);
        let mut opt = Sgd::new(vec![w.clone()], o).unwrap();
        let e = opt.step_with(&[Some(&ones)]).unwrap_err().to_string();
        assert!(e.starts_with("sgd:") && e.contains(words), "{e}");
        assert_eq!(vals(&w), vec![1.0, 2.0]);
        assert!(opt.state_tensors().is_empty());
    }
    // Dampening's factor from the second step, once a buffer exists.
    let w = leaf(&[1.0, 2.0]);
    let o = SgdOptions {
        momentum: 0.5,
        dampening: -1e39,
        ..Default::default()
    };
    let mut opt = Sgd::new(vec![w.clone()], o).unwrap();
    opt.step_with(&[Some(&ones)]).unwrap();
    let before = vals(&w);
    assert!(opt
        .step_with(&[Some(&ones)])
        .unwrap_err()
        .to_string()
        .contains(words));
    assert_eq!(vals(&w), before);
    // Adam: the step size lr / (1 - beta1) = 5e38 at step 1; 3e37 gives 3e38 and passes.
    for (lr, ok) in [(5e37, false), (3e37, true)] {
        let w = leaf(&[1.0, 2.0]);
        let o = AdamOptions {
            lr,
            ..Default::default()
        };
        let mut opt = Adam::new(vec![w.clone()], o).unwrap();
        let r = opt.step_with(&[Some(&ones)]);
        assert_eq!(r.is_ok(), ok, "lr {lr}: {r:?}");
        if !ok {
            assert_eq!(vals(&w), vec![1.0, 2.0]);
        }
    }
}

/// A step writes each parameter as often as PyTorch's does, so `version()` counts as
/// `_version`: once for SGD and Adam, twice for AdamW with weight decay (its decay's `mul_`,
/// then its `addcdiv_`).
#[test]
fn steps_count_pytorchs_writes() {
    let ones = Tensor::from_slice(dev(), &[1.0f32, 1.0], &[2]).unwrap();
    for (wd, want) in [(0.0, 1), (0.01, 2)] {
        let w = leaf(&[1.0, 2.0]);
        let o = AdamOptions {
            weight_decay: wd,
            ..AdamOptions::adamw()
        };
        let mut opt = Adam::adamw(vec![w.clone()], o).unwrap();
        let before = w.version();
        opt.step_with(&[Some(&ones)]).unwrap();
        assert_eq!(w.version() - before, want, "AdamW weight_decay {wd}");
    }
    let w = leaf(&[1.0, 2.0]);
    let o = AdamOptions {
        weight_decay: 0.01,
        ..Default::default()
    };
    let mut opt = Adam::new(vec![w.clone()], o).unwrap();
    let before = w.version();
    opt.step_with(&[Some(&ones)]).unwrap();
    assert_eq!(w.version() - before, 1, "Adam");
}
