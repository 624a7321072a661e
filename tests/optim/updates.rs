//! Update math against an f64 transcription of PyTorch's over several steps: SGD (momentum,
//! dampening, Nesterov, weight decay), Adam, AdamW, AMSGrad, maximize; gradients matched by
//! identity, parameter groups, named parameters, tensors that never required grad.

use super::*;

#[test]
fn sgd_matches_pytorch_over_steps() {
    let n = 37;
    let configs = [
        SgdOptions {
            lr: 0.1,
            ..Default::default()
        },
        SgdOptions {
            lr: 0.05,
            momentum: 0.9,
            ..Default::default()
        },
        SgdOptions {
            lr: 0.05,
            momentum: 0.9,
            dampening: 0.3,
            weight_decay: 0.01,
            ..Default::default()
        },
        SgdOptions {
            lr: 0.05,
            momentum: 0.8,
            nesterov: true,
            weight_decay: 0.1,
            ..Default::default()
        },
        SgdOptions {
            lr: 0.02,
            momentum: 0.5,
            maximize: true,
            ..Default::default()
        },
    ];
    for o in configs {
        let init: Vec<f32> = (0..n).map(|i| i as f32 / 10.0 - 1.5).collect();
        let p = leaf(&init);
        let mut opt = Sgd::new(vec![p.clone()], o).unwrap();
        let mut want: Vec<f64> = init.iter().map(|&x| x as f64).collect();
        let mut buf = None;
        let mut ro = o;
        for s in 0..6 {
            if s == 3 {
                opt.set_lr(o.lr * 0.5).unwrap();
                ro.lr = o.lr * 0.5;
            }
            let gv = grad_values(n, s);
            let g = Tensor::from_slice(dev(), &gv, &[n]).unwrap();
            opt.step_with(&[Some(&g)]).unwrap();
            let g64: Vec<f64> = gv.iter().map(|&x| x as f64).collect();
            sgd_ref(&mut want, &mut buf, &g64, &ro);
            close(&vals(&p), &want, &format!("{o:?} step {s}"));
        }
    }
}

#[test]
fn adam_and_adamw_match_pytorch_over_steps() {
    let n = 50;
    let configs = [
        AdamOptions {
            lr: 0.01,
            ..Default::default()
        },
        AdamOptions {
            lr: 0.01,
            weight_decay: 0.1,
            ..Default::default()
        },
        AdamOptions {
            lr: 0.01,
            amsgrad: true,
            ..Default::default()
        },
        AdamOptions {
            lr: 0.02,
            betas: (0.8, 0.99),
            eps: 1e-6,
            ..AdamOptions::adamw()
        },
        AdamOptions {
            lr: 0.01,
            maximize: true,
            amsgrad: true,
            ..AdamOptions::adamw()
        },
    ];
    for o in configs {
        let init: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
        let p = Tensor::from_slice(dev(), &init, &[5, 10])
            .unwrap()
            .requires_grad()
            .unwrap();
        let mut opt = Adam::new(vec![p.clone()], o).unwrap();
        let mut want: Vec<f64> = init.iter().map(|&x| x as f64).collect();
        let mut st = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
        for s in 0..8 {
            let gv = grad_values(n, s);
            let g = Tensor::from_slice(dev(), &gv, &[5, 10]).unwrap();
            opt.step_with(&[Some(&g)]).unwrap();
            let g64: Vec<f64> = gv.iter().map(|&x| x as f64).collect();
            adam_ref(&mut want, &mut st, s as i32 + 1, &g64, &o);
            close(&vals(&p), &want, &format!("{o:?} step {s}"));
        }
        assert_eq!(opt.step_count(0), Some(8));
    }
}

/// beta1 = 0 (GAN training's setting) keeps m = g exactly, as ATen's lerp does for weights of
/// 0.5 and up (m_old + (g - m_old) lost a small gradient after a large one); AMSGrad's running
/// maximum keeps a NaN, as torch.maximum.
#[test]
fn adam_beta1_zero_and_amsgrad_nan() {
    let w = leaf(&[0.0]);
    let o = AdamOptions {
        lr: 0.1,
        betas: (0.0, 0.0),
        ..Default::default()
    };
    let mut opt = Adam::new(vec![w.clone()], o).unwrap();
    let g1 = Tensor::from_slice(dev(), &[1e4f32], &[1]).unwrap();
    let g2 = Tensor::from_slice(dev(), &[1e-4f32], &[1]).unwrap();
    opt.step_with(&[Some(&g1)]).unwrap();
    opt.step_with(&[Some(&g2)]).unwrap();
    let m = opt
        .state_tensors()
        .into_iter()
        .find(|(k, _)| k == "0.exp_avg")
        .unwrap()
        .1;
    assert_eq!(vals(&m), vec![f64::from(1e-4f32)]);
    close(&vals(&w), &[-0.1 - 0.1 * 1e-4 / (1e-4 + 1e-8)], "w");

    let a = leaf(&[0.0]);
    let o = AdamOptions {
        amsgrad: true,
        ..Default::default()
    };
    let mut opt = Adam::new(vec![a.clone()], o).unwrap();
    opt.step_with(&[Some(&Tensor::from_slice(dev(), &[1.0f32], &[1]).unwrap())])
        .unwrap();
    opt.step_with(&[Some(&Tensor::from_slice(dev(), &[f32::NAN], &[1]).unwrap())])
        .unwrap();
    let st = opt.state_tensors();
    let vmax = &st.iter().find(|(k, _)| k == "0.max_exp_avg_sq").unwrap().1;
    assert!(vals(vmax)[0].is_nan());
}

/// `step(&grads)` looks each parameter up in autograd's gradients by identity: the order of the
/// parameters does not matter, two same-shaped gradients cannot be swapped, and a parameter
/// the loss did not reach is skipped.
#[test]
fn step_matches_gradients_by_identity() {
    let c = Tensor::from_slice(dev(), &[3.0f32, -1.0, 0.5], &[3]).unwrap();
    let run = |reversed: bool| {
        let a = leaf(&[1.0, 2.0, 3.0]);
        let b = leaf(&[-1.0, 0.5, 2.0]);
        let unused = leaf(&[7.0, 7.0, 7.0]);
        let named = if reversed {
            vec![
                ("unused".to_string(), unused.clone()),
                ("b".to_string(), b.clone()),
                ("a".to_string(), a.clone()),
            ]
        } else {
            vec![
                ("a".to_string(), a.clone()),
                ("b".to_string(), b.clone()),
                ("unused".to_string(), unused.clone()),
            ]
        };
        let mut opt = Adam::new(
            named,
            AdamOptions {
                lr: 0.1,
                ..Default::default()
            },
        )
        .unwrap();
        // loss = sum(a * c) + sum(b * b): da = c, db = 2b (same shapes, different values).
        let loss = a
            .mul(&c)
            .unwrap()
            .sum_all()
            .unwrap()
            .add(&b.mul(&b).unwrap().sum_all().unwrap())
            .unwrap();
        let grads = loss.backward().unwrap();
        assert!(grads.get(&unused).is_none());
        opt.step(&grads).unwrap();
        let unused_steps = opt.step_count(if reversed { 0 } else { 2 });
        (vals(&a), vals(&b), vals(&unused), unused_steps)
    };
    let (a1, b1, u1, s1) = run(false);
    let (a2, b2, u2, s2) = run(true);
    assert_eq!(
        (&a1, &b1),
        (&a2, &b2),
        "the order of the parameters is irrelevant"
    );
    assert_eq!(
        (u1, u2),
        (vec![7.0; 3], vec![7.0; 3]),
        "unreached: untouched"
    );
    assert_eq!((s1, s2), (Some(0), Some(0)), "unreached: no step counted");
    // Against the reference with the right pairing.
    let o = AdamOptions {
        lr: 0.1,
        ..Default::default()
    };
    let mut wa = vec![1.0, 2.0, 3.0];
    let mut wb = vec![-1.0, 0.5, 2.0];
    let gb: Vec<f64> = wb.iter().map(|x| 2.0 * x).collect();
    let z = || (vec![0.0; 3], vec![0.0; 3], vec![0.0; 3]);
    adam_ref(&mut wa, &mut z(), 1, &[3.0, -1.0, 0.5], &o);
    adam_ref(&mut wb, &mut z(), 1, &gb, &o);
    close(&a1, &wa, "a");
    close(&b1, &wb, "b");
    // Positional gradients in the wrong order would have been accepted: same shapes.
    let a = leaf(&[1.0, 2.0, 3.0]);
    let b = leaf(&[-1.0, 0.5, 2.0]);
    let mut opt = Sgd::new(vec![a.clone(), b.clone()], SgdOptions::default()).unwrap();
    let loss = a.mul(&c).unwrap().sum_all().unwrap();
    let grads = loss.backward().unwrap();
    let ga = grads.get(&a).unwrap();
    assert!(
        opt.step_with(&[None, Some(ga)]).is_ok(),
        "by position: b got a's gradient"
    );
    assert_ne!(vals(&b), vec![-1.0, 0.5, 2.0]);
}

/// Parameter groups with their own learning rate and weight decay, per-group lr get/set, and
/// state named by the parameters' names.
#[test]
fn param_groups_have_their_own_hyperparameters() {
    let body = leaf(&[1.0, 2.0]);
    let head = leaf(&[1.0, 2.0]);
    let o = sgd_momentum();
    let mut opt = Sgd::new(vec![("body.w".to_string(), body.clone())], o).unwrap();
    opt.add_param_group(
        ParamGroup::new(vec![("head.w".to_string(), head.clone())])
            .lr(0.01)
            .weight_decay(0.5),
    )
    .unwrap();
    assert_eq!(opt.num_groups(), 2);
    assert_eq!((opt.group_lr(0), opt.group_lr(1)), (Some(0.1), Some(0.01)));
    assert_eq!(opt.group_weight_decay(1), Some(0.5));
    assert_eq!(opt.param_names(), &["body.w", "head.w"]);
    let mut ref_body = vec![1.0, 2.0];
    let mut ref_head = vec![1.0, 2.0];
    let (mut buf_body, mut buf_head) = (None, None);
    let o_head = SgdOptions {
        lr: 0.01,
        weight_decay: 0.5,
        ..o
    };
    for s in 0..3 {
        if s == 2 {
            opt.set_group_lr(1, 0.05).unwrap();
        }
        let grads = body
            .mul_scalar(3.0)
            .unwrap()
            .add(&head.mul(&head).unwrap())
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let gb = vec![3.0, 3.0];
        let gh: Vec<f64> = ref_head.iter().map(|x| 2.0 * x).collect();
        opt.step(&grads).unwrap();
        sgd_ref(&mut ref_body, &mut buf_body, &gb, &o);
        let oh = SgdOptions {
            lr: if s == 2 { 0.05 } else { 0.01 },
            ..o_head
        };
        sgd_ref(&mut ref_head, &mut buf_head, &gh, &oh);
        close(&vals(&body), &ref_body, &format!("body step {s}"));
        close(&vals(&head), &ref_head, &format!("head step {s}"));
    }
    let names: Vec<String> = opt.state_tensors().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["body.w.momentum_buffer", "head.w.momentum_buffer"]);
    // set_lr sets every group; bad values and groups are refused.
    opt.set_lr(0.2).unwrap();
    assert_eq!((opt.group_lr(0), opt.group_lr(1)), (Some(0.2), Some(0.2)));
    assert!(opt.set_group_lr(2, 0.1).is_err());
    assert!(opt.set_group_lr(0, f64::NAN).is_err());
    assert_eq!(opt.lr(), 0.2);
    // A negative rate is set, as PyTorch's param_group["lr"] (the constructors refuse one).
    opt.set_group_lr(1, -0.1).unwrap();
    assert_eq!(opt.group_lr(1), Some(-0.1));
    opt.set_group_lr(1, 0.2).unwrap();
    // A refused group adds nothing.
    let other = leaf(&[0.0]);
    let e = opt
        .add_param_group(ParamGroup::new(vec![
            ("o".to_string(), other.clone()),
            ("h".to_string(), head.clone()),
        ]))
        .unwrap_err();
    assert!(e.to_string().contains("shares its storage"), "{e}");
    // Named and unnamed groups do not mix (PyTorch's param_names rule), checked first.
    let e = opt
        .add_param_group(ParamGroup::new(vec![other.clone(), head.clone()]))
        .unwrap_err();
    assert!(
        e.to_string().contains(
            "all optimizer param groups should be with/without names. cannot add param group \
             without names to the optimizer"
        ),
        "{e}"
    );
    let mut unnamed = Sgd::new(vec![leaf(&[1.0])], o).unwrap();
    let e = unnamed
        .add_param_group(ParamGroup::new(vec![("x".to_string(), other.clone())]))
        .unwrap_err();
    assert!(
        e.to_string().contains("cannot add param group with names"),
        "{e}"
    );
    // An empty group has no names, as PyTorch's: refused by a named optimizer.
    assert!(opt
        .add_param_group(ParamGroup::new(Vec::<Tensor>::new()))
        .is_err());
    assert!(opt
        .add_param_group(ParamGroup::new(vec![other.clone()]).lr(f64::NAN))
        .is_err());
    assert_eq!((opt.params().len(), opt.num_groups()), (2, 2));

    // Adam: per-group lr in the bias-corrected step size; state named by parameter.
    let p = leaf(&[1.0, -1.0]);
    let q = leaf(&[1.0, -1.0]);
    let o = AdamOptions {
        lr: 0.1,
        ..Default::default()
    };
    let mut adam = Adam::new(vec![("p".to_string(), p.clone())], o).unwrap();
    adam.add_param_group(ParamGroup::new(vec![("q".to_string(), q.clone())]).lr(0.01))
        .unwrap();
    let g = Tensor::from_slice(dev(), &[0.5f32, 2.0], &[2]).unwrap();
    adam.step_with(&[Some(&g), Some(&g)]).unwrap();
    let (mut rp, mut rq) = (vec![1.0, -1.0], vec![1.0, -1.0]);
    let z = || (vec![0.0; 2], vec![0.0; 2], vec![0.0; 2]);
    adam_ref(&mut rp, &mut z(), 1, &[0.5, 2.0], &o);
    adam_ref(
        &mut rq,
        &mut z(),
        1,
        &[0.5, 2.0],
        &AdamOptions { lr: 0.01, ..o },
    );
    close(&vals(&p), &rp, "p");
    close(&vals(&q), &rq, "q");
    let names: Vec<String> = adam.state_tensors().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        ["p.exp_avg", "p.exp_avg_sq", "q.exp_avg", "q.exp_avg_sq"]
    );
}

/// The constructors take `nn::Module::named_parameters()` as they are.
#[test]
fn optimizers_take_named_parameters_of_a_module() {
    use wgtensor::nn::{Forward, Linear, Module};
    let lin = Linear::new(dev(), 3, 2, true).unwrap();
    let mut opt = Adam::adamw(lin.named_parameters(), AdamOptions::adamw()).unwrap();
    assert_eq!(opt.param_names(), &["weight", "bias"]);
    let x = Tensor::ones(dev(), &[4, 3], DType::F32).unwrap();
    let w0 = vals(&lin.weight);
    let grads = lin
        .forward(&x)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    opt.step(&grads).unwrap();
    assert_ne!(vals(&lin.weight), w0);
    assert_eq!(opt.step_counts(), &[1, 1]);
    let names: Vec<String> = opt.state_tensors().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "weight.exp_avg",
            "weight.exp_avg_sq",
            "bias.exp_avg",
            "bias.exp_avg_sq"
        ]
    );
}

/// Tensors that never required grad are taken, as PyTorch's optimizers take them (its
/// test_step_is_noop_when_params_have_no_grad): `step` finds no gradient and leaves them,
/// `step_with` updates them with the gradients given.
#[test]
fn plain_tensors_are_skipped_by_step_and_updated_by_step_with() {
    let p = Tensor::from_slice(dev(), &[1.0f32, 2.0], &[2]).unwrap();
    let w = leaf(&[1.0, 2.0]);
    let g = w
        .mul_scalar(3.0)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let mut sgd = Sgd::new(
        vec![p.clone()],
        SgdOptions {
            lr: 0.5,
            momentum: 0.9,
            ..Default::default()
        },
    )
    .unwrap();
    sgd.step(&g).unwrap();
    assert_eq!(p.to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
    let mut adam = Adam::new(vec![p.clone()], AdamOptions::default()).unwrap();
    adam.step(&g).unwrap();
    assert_eq!(p.to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
    let grad = Tensor::from_slice(dev(), &[2.0f32, -2.0], &[2]).unwrap();
    sgd.step_with(&[Some(&grad)]).unwrap();
    assert_eq!(p.to_vec::<f32>().unwrap(), vec![0.0, 3.0]);
}

/// Adam's `1 - beta` factors are PyTorch's (computed in f64, rounded once): the first step
/// with lr 1 moves a parameter by exactly lr. `1 - 0.999` formed in f32 arithmetic was 1.3e-5
/// off, which moved it by 1.0000065.
#[test]
fn adam_first_step_moves_by_lr() {
    for amsgrad in [false, true] {
        let w = leaf(&[0.0, 5.0]);
        let mut opt = Adam::new(
            vec![w.clone()],
            AdamOptions {
                lr: 1.0,
                amsgrad,
                ..Default::default()
            },
        )
        .unwrap();
        let g = Tensor::from_slice(dev(), &[1.0f32, -3.0], &[2]).unwrap();
        opt.step_with(&[Some(&g)]).unwrap();
        let v = vals(&w);
        assert!(
            (v[0] + 1.0).abs() < 2e-7 && (v[1] - 6.0).abs() < 5e-7,
            "{v:?}"
        );
    }
}

/// A negative rate set after construction steps uphill, as PyTorch's (torch 2.15, p = [1, 2],
/// g = [0.5, -0.5], group lr set to -0.1): SGD [1.05, 1.95], Adam [1.1, 1.9], AdamW with weight
/// decay 0.1 [1.11, 1.92] (its decay factor above 1).
#[test]
fn a_negative_rate_set_after_construction_steps_uphill() {
    let g = Tensor::from_slice(dev(), &[0.5f32, -0.5], &[2]).unwrap();
    let w = leaf(&[1.0, 2.0]);
    let mut sgd = Sgd::new(vec![w.clone()], SgdOptions::default()).unwrap();
    sgd.set_lr(-0.1).unwrap();
    sgd.step_with(&[Some(&g)]).unwrap();
    close(&vals(&w), &[1.05, 1.95], "sgd");
    for (wd, decoupled, want) in [(0.0, false, [1.1, 1.9]), (0.1, true, [1.11, 1.92])] {
        let w = leaf(&[1.0, 2.0]);
        let mut adam = Adam::new(
            vec![w.clone()],
            AdamOptions {
                weight_decay: wd,
                decoupled_weight_decay: decoupled,
                ..Default::default()
            },
        )
        .unwrap();
        adam.set_lr(-0.1).unwrap();
        adam.step_with(&[Some(&g)]).unwrap();
        close(&vals(&w), &want, "adam");
    }
    // A group's own negative rate is taken too (PyTorch checks only the defaults).
    let mut sgd = Sgd::new(vec![leaf(&[0.0])], SgdOptions::default()).unwrap();
    let p = leaf(&[1.0]);
    sgd.add_param_group(ParamGroup::new(vec![p.clone()]).lr(-0.5))
        .unwrap();
    assert_eq!(sgd.group_lr(1), Some(-0.5));
}
