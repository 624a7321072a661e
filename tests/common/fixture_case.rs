//! Cases of the PyTorch fixtures in tests/fixtures (written by scripts/export_attention.py and
//! scripts/export_decoder.py): a case's entries under `<case>.`, its state dict, inputs and
//! the comparison of an output and every gradient with PyTorch's.
#![cfg(not(target_arch = "wasm32"))]

use std::collections::HashMap;

use wgtensor::nn::Module;
use wgtensor::{io, Tensor};

/// One case of a fixture: the entries under `<case>.`.
pub struct Case {
    pub name: &'static str,
    all: HashMap<String, Tensor>,
}

impl Case {
    /// The case `name` of tests/fixtures/`file`.
    pub fn load(file: &str, name: &'static str) -> Case {
        let path = format!("{}/tests/fixtures/{file}", env!("CARGO_MANIFEST_DIR"));
        let file = io::load_safetensors_file(super::device(), &path).unwrap();
        Case {
            name,
            all: io::select_prefix(&file, name),
        }
    }
    pub fn get(&self, key: &str) -> Tensor {
        self.all
            .get(key)
            .unwrap_or_else(|| panic!("{}: no {key} in the fixture", self.name))
            .clone()
    }
    pub fn state_dict(&self) -> HashMap<String, Tensor> {
        io::select_prefix(&self.all, "sd")
    }
    /// A float input as a leaf that records gradients.
    pub fn input(&self, key: &str) -> Tensor {
        self.get(&format!("in.{key}")).requires_grad().unwrap()
    }
}

/// `got` within 1e-5 (relative to the larger of 1 and PyTorch's value) of `want`.
pub fn close(got: &Tensor, want: &Tensor, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let g = got.to_vec::<f32>().unwrap();
    let w = want.to_vec::<f32>().unwrap();
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        assert!(
            (a - b).abs() <= 1e-5 * b.abs().max(1.0),
            "{what}[{i}]: {a} vs PyTorch's {b}"
        );
    }
}

/// Backward of `sum(out * g)`; compares the output, the named inputs' gradients and every
/// parameter's gradient with the case's.
pub fn check_forward_backward(
    c: &Case,
    model: &dyn Module,
    out: &Tensor,
    inputs: &[(&str, &Tensor)],
) {
    close(out, &c.get("out"), &format!("{} output", c.name));
    let grads = out.backward_with_grad(&c.get("g")).unwrap();
    for (name, t) in inputs {
        let g = grads
            .get(t)
            .unwrap_or_else(|| panic!("{}: no grad of {name}", c.name));
        close(
            g,
            &c.get(&format!("grad.in.{name}")),
            &format!("{} d{name}", c.name),
        );
    }
    let params = model.named_parameters();
    assert!(!params.is_empty());
    for (name, p) in params {
        let g = grads
            .get(&p)
            .unwrap_or_else(|| panic!("{}: no grad of {name}", c.name));
        close(
            g,
            &c.get(&format!("grad.sd.{name}")),
            &format!("{} d{name}", c.name),
        );
    }
}
