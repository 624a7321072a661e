//! Learning-rate schedulers over many epochs, alone and chained, as PyTorch's.

use super::*;

/// A run resumed from a checkpoint (its epoch, rates and base rates) continues exactly as the
/// uninterrupted run, for chained and closed-form schedules; bad base rates are refused.
#[test]
fn lr_schedulers_resume_where_they_stopped() {
    use wgtensor::optim::{LrScheduler, Schedule};
    let o = SgdOptions {
        lr: 0.1,
        ..Default::default()
    };
    let make = || {
        let mut opt = Sgd::new(vec![leaf(&[1.0])], o).unwrap();
        opt.add_param_group(ParamGroup::new(vec![leaf(&[2.0])]).lr(1.0))
            .unwrap();
        opt
    };
    let rates = |opt: &Sgd| vec![opt.group_lr(0).unwrap(), opt.group_lr(1).unwrap()];
    for s in [
        Schedule::CosineAnnealing {
            t_max: 4,
            eta_min: 0.01,
        },
        Schedule::MultiStep {
            milestones: vec![2, 5, 5],
            gamma: 0.5,
        },
        Schedule::Lambda(|e| 1.0 / (1.0 + e as f64)),
    ] {
        let mut opt = make();
        let mut sched = LrScheduler::new(&mut opt, s.clone()).unwrap();
        let mut want = Vec::new();
        let mut saved = None;
        for e in 1..=9u64 {
            sched.step(&mut opt).unwrap();
            want.push(rates(&opt));
            if e == 3 {
                saved = Some((sched.epoch(), rates(&opt), sched.base_lrs().to_vec()));
            }
        }
        let (epoch, lrs, base) = saved.unwrap();
        let mut opt2 = make();
        for (g, lr) in lrs.iter().enumerate() {
            opt2.set_group_lr(g, *lr).unwrap();
        }
        let mut resumed = LrScheduler::resume(&mut opt2, s.clone(), epoch, &base).unwrap();
        assert_eq!((resumed.epoch(), resumed.last_lr()), (3, &lrs[..]));
        assert_eq!(rates(&opt2), lrs, "{s:?}: resume sets nothing");
        for (k, w) in want[3..].iter().enumerate() {
            resumed.step(&mut opt2).unwrap();
            let got = rates(&opt2);
            assert!(
                got.iter().zip(w).all(|(a, b)| (a - b).abs() < 1e-12),
                "{s:?} epoch {}: {got:?} vs {w:?}",
                k + 4
            );
        }
        let mut opt3 = make();
        // The last epoch a u64 counts: a step past it is an error, never a wrap to epoch 0.
        let mut at_end = LrScheduler::resume(&mut opt3, s.clone(), u64::MAX, &base).unwrap();
        assert!(at_end.step(&mut opt3).is_err());
        assert_eq!(at_end.epoch(), u64::MAX);
        assert!(LrScheduler::resume(&mut opt3, s.clone(), 3, &base[..1]).is_err());
        assert!(LrScheduler::resume(&mut opt3, s.clone(), 3, &[0.1, f64::NAN]).is_err());
    }
}

/// The schedulers against PyTorch's lr_scheduler values (written out from its formulas):
/// epoch 0 set at construction, one step per epoch, every group from its own initial rate;
/// argument errors as PyTorch's.
#[test]
fn lr_schedulers_follow_pytorch() {
    use wgtensor::optim::{LrScheduler, Schedule};
    let lrs = |s: Schedule, epochs: u64| {
        let mut opt = Sgd::new(
            vec![leaf(&[1.0])],
            SgdOptions {
                lr: 0.1,
                ..Default::default()
            },
        )
        .unwrap();
        opt.add_param_group(ParamGroup::new(vec![leaf(&[2.0])]).lr(1.0))
            .unwrap();
        let mut sched = LrScheduler::new(&mut opt, s).unwrap();
        let mut out = vec![(opt.group_lr(0).unwrap(), opt.group_lr(1).unwrap())];
        for _ in 0..epochs {
            sched.step(&mut opt).unwrap();
            out.push((opt.group_lr(0).unwrap(), opt.group_lr(1).unwrap()));
            assert_eq!(
                sched.last_lr(),
                [out.last().unwrap().0, out.last().unwrap().1]
            );
        }
        assert_eq!(sched.epoch(), epochs);
        assert_eq!(sched.base_lrs(), [0.1, 1.0]);
        out
    };
    let check = |got: Vec<(f64, f64)>, want: &[f64], what: &str| {
        for (e, ((a, b), w)) in got.iter().zip(want).enumerate() {
            assert!(
                (a - 0.1 * w).abs() < 1e-12 && (b - w).abs() < 1e-12,
                "{what} epoch {e}: {a} {b} vs {w}"
            );
        }
    };
    // StepLR(step_size=2, gamma=0.5): 1, 1, .5, .5, .25
    check(
        lrs(
            Schedule::Step {
                step_size: 2,
                gamma: 0.5,
            },
            4,
        ),
        &[1.0, 1.0, 0.5, 0.5, 0.25],
        "step",
    );
    // MultiStepLR([1, 3, 3], 0.1): a repeated milestone counts twice.
    check(
        lrs(
            Schedule::MultiStep {
                milestones: vec![1, 3, 3],
                gamma: 0.1,
            },
            4,
        ),
        &[1.0, 0.1, 0.1, 0.001, 0.001],
        "multistep",
    );
    // A milestone three times: gamma ** 3 as Python computes it, to the bit (PyTorch's
    // 0.0026999999999999997 for lr 0.1 and gamma 0.3).
    let thrice = lrs(
        Schedule::MultiStep {
            milestones: vec![2, 2, 2],
            gamma: 0.3,
        },
        3,
    );
    assert_eq!(thrice[2].0, 0.0026999999999999997);
    assert_eq!(thrice[3].0, 0.0026999999999999997);
    check(
        lrs(Schedule::Exponential { gamma: 0.9 }, 3),
        &[1.0, 0.9, 0.81, 0.729],
        "exponential",
    );
    // CosineAnnealingLR(T_max=4, eta_min=0): (1 + cos(pi e / 4)) / 2.
    let cos: Vec<f64> = (0..=4)
        .map(|e| (1.0 + (std::f64::consts::PI * e as f64 / 4.0).cos()) / 2.0)
        .collect();
    check(
        lrs(
            Schedule::CosineAnnealing {
                t_max: 4,
                eta_min: 0.0,
            },
            4,
        ),
        &cos,
        "cosine",
    );
    // LinearLR(1/3, 1, total_iters=3): factor 1/3 at once, then up to 1 and held.
    let third = 1.0 / 3.0;
    check(
        lrs(
            Schedule::Linear {
                start_factor: third,
                end_factor: 1.0,
                total_iters: 3,
            },
            4,
        ),
        &[third, third + 2.0 / 9.0, third + 4.0 / 9.0, 1.0, 1.0],
        "linear",
    );
    // LinearLR down to 0: PyTorch's chained form rounds its last factor to -1.9e-18 for start
    // 1/3 over 4 steps; every step Ok, the rate that tiny negative one there and after.
    let down = lrs(
        Schedule::Linear {
            start_factor: third,
            end_factor: 0.0,
            total_iters: 4,
        },
        6,
    );
    assert_eq!(
        &down[4..],
        &[(-1.8503717077085946e-18, -1.8503717077085944e-17); 3],
        "{down:?}"
    );
    check(
        lrs(Schedule::Lambda(|e| 1.0 / (e + 1) as f64), 2),
        &[1.0, 0.5, 1.0 / 3.0],
        "lambda",
    );
    // PyTorch's argument errors.
    let mut opt = Adam::new(vec![leaf(&[1.0])], AdamOptions::default()).unwrap();
    for bad in [
        Schedule::Linear {
            start_factor: 0.0,
            end_factor: 1.0,
            total_iters: 5,
        },
        Schedule::Linear {
            start_factor: 0.5,
            end_factor: 1.5,
            total_iters: 5,
        },
        Schedule::CosineAnnealing {
            t_max: 0,
            eta_min: 0.0,
        },
        Schedule::Step {
            step_size: 0,
            gamma: 0.1,
        },
        Schedule::Exponential { gamma: f64::NAN },
    ] {
        let e = LrScheduler::new(&mut opt, bad.clone())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("lr_scheduler"), "{bad:?}: {e}");
    }
    assert_eq!(opt.lr(), 1e-3, "a refused scheduler changes nothing");
    // Adam works the same. A group added later is scheduled from its own rate by the
    // chained formulas (PyTorch's get_lr walks every param group); LambdaLR's formula has
    // initial rates for the first groups only, and PyTorch's strict zip raises.
    let mut sched = LrScheduler::new(&mut opt, Schedule::Exponential { gamma: 0.5 }).unwrap();
    sched.step(&mut opt).unwrap();
    assert!((opt.lr() - 5e-4).abs() < 1e-15);
    opt.add_param_group(ParamGroup::new(vec![leaf(&[3.0])]).lr(0.1))
        .unwrap();
    sched.step(&mut opt).unwrap();
    assert_eq!(sched.epoch(), 2);
    let (g0, g1) = (opt.group_lr(0).unwrap(), opt.group_lr(1).unwrap());
    assert!(
        (g0 - 2.5e-4).abs() < 1e-15 && (g1 - 0.05).abs() < 1e-15,
        "{g0} {g1}"
    );
    assert_eq!(sched.last_lr().len(), 2);
    let mut lambda =
        LrScheduler::new(&mut opt, Schedule::Lambda(|e| 1.0 / (e + 1) as f64)).unwrap();
    opt.add_param_group(ParamGroup::new(vec![leaf(&[4.0])]).lr(0.2))
        .unwrap();
    let before = (opt.group_lr(0), opt.group_lr(2));
    let e = lambda.step(&mut opt).unwrap_err().to_string();
    assert!(
        e.contains("zip() argument 2 is shorter than argument 1"),
        "{e}"
    );
    assert_eq!(
        (opt.group_lr(0), opt.group_lr(2)),
        before,
        "a refused step changes nothing"
    );
    assert_eq!(lambda.epoch(), 0);
    // CosineAnnealingLR walks every group until its restart (epoch T_max + 1), whose own zip
    // of the initial rates with the groups raises.
    let mut opt = Sgd::new(vec![leaf(&[1.0])], SgdOptions::default()).unwrap();
    let mut cos = LrScheduler::new(
        &mut opt,
        Schedule::CosineAnnealing {
            t_max: 4,
            eta_min: 0.0,
        },
    )
    .unwrap();
    opt.add_param_group(ParamGroup::new(vec![leaf(&[2.0])]).lr(0.5))
        .unwrap();
    for _ in 1..=4 {
        cos.step(&mut opt).unwrap();
    }
    assert!(
        opt.group_lr(1).unwrap() < 0.5,
        "the added group is annealed too"
    );
    let before = (opt.group_lr(0), opt.group_lr(1));
    let e = cos.step(&mut opt).unwrap_err().to_string();
    assert!(
        e.contains("zip() argument 2 is longer than argument 1"),
        "{e}"
    );
    assert_eq!(
        (opt.group_lr(0), opt.group_lr(1), cos.epoch()),
        (before.0, before.1, 4)
    );
}

/// Schedulers chain as PyTorch's: each step multiplies the current rate, so two schedulers on
/// one optimizer stack and a rate set between steps carries on; the first records the
/// initial rate (`initial_lr`) that later ones (LambdaLR) take as their base; LinearLR with
/// total_iters 0 holds its start factor; a step whose rate would be invalid changes nothing.
#[test]
fn lr_schedulers_chain_as_pytorch() {
    use wgtensor::optim::{LrScheduler, Schedule};
    let sgd = |lr: f64| {
        Sgd::new(
            vec![leaf(&[1.0])],
            SgdOptions {
                lr,
                ..Default::default()
            },
        )
        .unwrap()
    };
    let near = |a: f64, b: f64| (a - b).abs() < 1e-12 * b.abs().max(1.0);
    // LinearLR(0.5, 1, 2) then ExponentialLR(0.9), stepped in turn.
    let mut opt = sgd(0.1);
    let mut s1 = LrScheduler::new(
        &mut opt,
        Schedule::Linear {
            start_factor: 0.5,
            end_factor: 1.0,
            total_iters: 2,
        },
    )
    .unwrap();
    let mut s2 = LrScheduler::new(&mut opt, Schedule::Exponential { gamma: 0.9 }).unwrap();
    assert!(near(opt.lr(), 0.05));
    assert_eq!(s2.base_lrs(), &[0.1], "the initial rate is shared");
    for want in [0.0675, 0.081, 0.0729] {
        s1.step(&mut opt).unwrap();
        s2.step(&mut opt).unwrap();
        assert!(near(opt.lr(), want), "{} vs {want}", opt.lr());
    }
    // A rate set between steps carries on.
    let mut opt = sgd(1.0);
    let mut s = LrScheduler::new(&mut opt, Schedule::Exponential { gamma: 0.5 }).unwrap();
    s.step(&mut opt).unwrap();
    opt.set_lr(0.2).unwrap();
    s.step(&mut opt).unwrap();
    assert!(near(opt.lr(), 0.1));
    // LambdaLR reads the recorded initial rate, not the decayed one.
    let _ = LrScheduler::new(&mut opt, Schedule::Lambda(|e| 0.1 * (e + 1) as f64)).unwrap();
    assert!(near(opt.lr(), 0.1), "{}", opt.lr());
    // total_iters 0: start_factor for good.
    let mut opt = sgd(1.0);
    let mut s = LrScheduler::new(
        &mut opt,
        Schedule::Linear {
            start_factor: 0.25,
            end_factor: 1.0,
            total_iters: 0,
        },
    )
    .unwrap();
    for _ in 0..3 {
        assert!(near(opt.lr(), 0.25));
        s.step(&mut opt).unwrap();
    }
    // CosineAnnealingLR(T_max 3, eta_min 0.01) chained with StepLR(2, 0.5) from 0.01 passes
    // below zero, as PyTorch's chained forms do (torch 2.15's rates).
    let mut opt = sgd(0.01);
    let mut cos = LrScheduler::new(
        &mut opt,
        Schedule::CosineAnnealing {
            t_max: 3,
            eta_min: 0.01,
        },
    )
    .unwrap();
    let mut step = LrScheduler::new(
        &mut opt,
        Schedule::Step {
            step_size: 2,
            gamma: 0.5,
        },
    )
    .unwrap();
    for want in [0.01, 0.005, 0.01, 0.005, -0.005, -0.005, -0.00125, 0.003125] {
        cos.step(&mut opt).unwrap();
        step.step(&mut opt).unwrap();
        assert!((opt.lr() - want).abs() < 1e-12, "{} vs {want}", opt.lr());
    }
    // An invalid rate for the second group: nothing changes, the epoch included.
    let mut opt = sgd(1.0);
    opt.add_param_group(ParamGroup::new(vec![leaf(&[2.0])]))
        .unwrap();
    opt.set_group_lr(1, 0.5).unwrap();
    let mut s = LrScheduler::new(&mut opt, Schedule::Exponential { gamma: 1e200 }).unwrap();
    s.step(&mut opt).unwrap();
    let before = (opt.group_lr(0), opt.group_lr(1));
    let e = s.step(&mut opt).unwrap_err().to_string();
    assert!(e.contains("group 0") && e.contains("inf"), "{e}");
    assert_eq!(
        (opt.group_lr(0), opt.group_lr(1), s.epoch()),
        (before.0, before.1, 1)
    );
}
