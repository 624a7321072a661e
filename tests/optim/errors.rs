//! Errors: the optimizer named, its own gradient refused, bad parameters at construction.

use super::*;

#[test]
fn errors_name_the_optimizer() {
    let base = Tensor::zeros(dev(), &[4], DType::F32).unwrap();
    let p = base.clone().requires_grad().unwrap();
    let cases = [
        Sgd::new(
            vec![p.clone()],
            SgdOptions {
                lr: -1.0,
                ..Default::default()
            },
        )
        .map(drop),
        Sgd::new(
            vec![p.clone()],
            SgdOptions {
                nesterov: true,
                ..Default::default()
            },
        )
        .map(drop),
        Sgd::new(
            vec![base
                .reshape(&[2, 2])
                .unwrap()
                .transpose(0, 1)
                .unwrap()
                .requires_grad()
                .unwrap()],
            SgdOptions::default(),
        )
        .map(drop),
    ];
    for c in cases {
        assert!(c.unwrap_err().to_string().starts_with("sgd:"));
    }
    let e = Adam::new(
        vec![p.clone()],
        AdamOptions {
            betas: (1.0, 0.9),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(e.to_string().starts_with("adam:"), "{e}");
    let mut opt = Adam::new(vec![p.clone()], AdamOptions::default()).unwrap();
    let wrong = Tensor::zeros(dev(), &[5], DType::F32).unwrap();
    let e = opt.step_with(&[Some(&wrong)]).unwrap_err();
    assert!(e.to_string().starts_with("adam:"), "{e}");
    let e = opt.step_with(&[]).unwrap_err();
    assert!(e.to_string().contains("1 parameters"), "{e}");
}

/// A parameter given as its own gradient is an `Err` before anything is recorded: the device
/// stays usable, and a tensor computed before reads back correctly.
#[test]
fn own_gradient_is_refused_and_the_device_stays_usable() {
    let a = Tensor::from_slice(dev(), &[1.0f32, 2.0, 3.0], &[3]).unwrap();
    let b = a.add_scalar(1.0).unwrap();
    let w = leaf(&[1.0, 2.0, 3.0]);
    let mut sgd = Sgd::new(vec![w.clone()], sgd_momentum()).unwrap();
    let e = sgd.step_with(&[Some(&w)]).unwrap_err();
    assert!(e.to_string().contains("its own gradient"), "{e}");
    let mut adam = Adam::new(vec![w.clone()], AdamOptions::default()).unwrap();
    assert!(adam.step_with(&[Some(&w)]).is_err());
    assert_eq!(vals(&b), vec![2.0, 3.0, 4.0]);
    assert_eq!(vals(&w), vec![1.0, 2.0, 3.0]);
    let c = b.mul_scalar(2.0).unwrap();
    assert_eq!(vals(&c), vec![4.0, 6.0, 8.0]);
    assert_eq!(adam.step_count(0), Some(0));
}

/// The constructors refuse what backward would never give a gradient to, what cannot be
/// updated in place, and the same storage twice.
#[test]
fn construction_refuses_bad_parameters() {
    let w = leaf(&[1.0, 2.0]);
    let msg = |r: wgtensor::Result<Sgd>| r.unwrap_err().to_string();
    let o = SgdOptions::default;
    // A non-leaf: the output of a tracked op.
    let m = msg(Sgd::new(vec![w.mul_scalar(0.01).unwrap()], o()));
    assert!(m.contains("can't optimize a non-leaf Tensor"), "{m}");
    // No parameters: PyTorch's "optimizer got an empty parameter list".
    let m = msg(Sgd::new(Vec::<Tensor>::new(), o()));
    assert!(m.contains("optimizer got an empty parameter list"), "{m}");
    let m = Adam::new(Vec::<Tensor>::new(), AdamOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        m.starts_with("adam:") && m.contains("empty parameter list"),
        "{m}"
    );
    // I32.
    let ids = Tensor::from_slice(dev(), &[1i32, 2], &[2]).unwrap();
    let m = msg(Sgd::new(vec![ids], o()));
    assert!(m.contains("I32"), "{m}");
    // The same tensor twice (a clone shares the storage), and a view of it; across groups in
    // PyTorch's words.
    let m = msg(Sgd::new(vec![w.clone(), w.clone()], o()));
    assert!(m.contains("shares its storage"), "{m}");
    assert!(!m.contains("more than one parameter group"), "{m}");
    let mut two = Sgd::new(vec![w.clone()], o()).unwrap();
    let e = two
        .add_param_group(ParamGroup::new(vec![w.clone()]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("some parameters appear in more than one parameter group"),
        "{e}"
    );
    let alias = w.detach().requires_grad().unwrap();
    assert!(Sgd::new(vec![w.clone(), alias], o()).is_err());
    // A view at an offset cannot be updated in place.
    let base = Tensor::from_slice(dev(), &[1.0f32, 2.0, 3.0], &[3]).unwrap();
    let tail = base.narrow(0, 1, 2).unwrap().requires_grad().unwrap();
    assert!(msg(Sgd::new(vec![tail], o())).contains("contiguous"));
    let v = leaf(&[0.0]);
    // Accepted: a tensor slice, an array, named tensors.
    Sgd::new(&[w.clone(), v.clone()][..], o()).unwrap();
    Sgd::new([w.clone(), v.clone()], o()).unwrap();
}
