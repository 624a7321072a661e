//! A pass-through node for a loss composed of other ops whose PyTorch twin is one node that
//! saves its inputs (`MseLossBackward0`, `SmoothL1LossBackward0` and `HuberLossBackward0` save
//! `self` and `target`): PyTorch refuses a backward after either was written in place, where
//! the composed graph, which saved only their difference, would silently differentiate the
//! old values.

use crate::autograd::{record, BackwardOp};
use crate::{Result, Tensor};

/// `out` itself, its gradient passed through a node named `name` that saves `inputs`, so that
/// an in-place write to one of them before the backward is the saved-tensor version error,
/// and a second backward without `retain_graph` fails as PyTorch's freed node does.
pub(crate) fn saving_inputs(name: &'static str, out: Tensor, inputs: &[&Tensor]) -> Tensor {
    if !out.is_tracked() {
        return out;
    }
    let kept = inputs.iter().map(|t| t.detach()).collect();
    record(out.detach(), &[&out], |_| {
        Box::new(SavedInputs { name, kept })
    })
}

struct SavedInputs {
    name: &'static str,
    kept: Vec<Tensor>,
}

impl BackwardOp for SavedInputs {
    fn name(&self) -> &'static str {
        self.name
    }

    fn backward(&self, grads: &[Option<Tensor>], _needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        Ok(vec![grads[0].clone()])
    }

    fn saved(&self) -> Vec<&Tensor> {
        self.kept.iter().collect()
    }
}
