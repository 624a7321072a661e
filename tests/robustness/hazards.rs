//! No silent loss of queued work: an op whose arguments alias (a parameter passed as its own
//! gradient) is an `Err` at once, and the work queued before it still reads back.

use super::vals;
use wgtensor::optim::{Adam, AdamOptions, Sgd, SgdOptions};
use wgtensor::{Device, Tensor};

#[test]
fn a_parameter_as_its_own_gradient_loses_no_queued_work() {
    // A private device: the shared one must not see this test's errors.
    let d = Device::new().unwrap();
    for adam in [false, true] {
        let a = Tensor::from_slice(&d, &[1.0f32, 2.0, 3.0], &[3]).unwrap();
        let b = a.add_scalar(1.0).unwrap();
        let w = Tensor::from_slice(&d, &[1.0f32, 2.0, 3.0], &[3])
            .unwrap()
            .requires_grad()
            .unwrap();
        let r = if adam {
            Adam::new(vec![w.clone()], AdamOptions::default())
                .and_then(|mut o| o.step_with(&[Some(&w)]))
        } else {
            Sgd::new(
                vec![w.clone()],
                SgdOptions {
                    lr: 0.1,
                    ..Default::default()
                },
            )
            .and_then(|mut o| o.step_with(&[Some(&w)]))
        };
        assert!(
            r.is_err(),
            "adam {adam}: a parameter as its own gradient must be refused"
        );
        assert_eq!(
            vals(&b),
            vec![2.0, 3.0, 4.0],
            "adam {adam}: queued work survives"
        );
        assert_eq!(vals(&w), vec![1.0, 2.0, 3.0], "adam {adam}: w is unchanged");
        d.sync().unwrap();
    }
}
