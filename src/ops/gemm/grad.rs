//! Backward of `gemm` / `matmul` (forward in src/ops/gemm/mod.rs).
//!
//! For `y = act(z)`, `z = alpha * A B + beta * C + bias`: `dZ = dY * act'`, then
//! `dA = alpha dZ B^T`, `dB = alpha A^T dZ` (transposes are free views; both are GEMMs with
//! the deterministic split-k), `dC = beta dZ` and the bias gradient is a row or column sum,
//! each summed back over broadcast batch dims. relu, sigmoid and tanh derivatives come from
//! the output, so their epilogue stays fused; GELU's needs the pre-activation, so a tracked
//! GELU GEMM runs as a plain GEMM followed by a recorded `gelu` (`Activation::split_unfused`).

use super::options::{Bias, GemmOptions};
use super::run::run;
use crate::autograd::{record, records, sum_to, BackwardOp};
use crate::ops::activation::Activation;
use crate::ops::grad_kernel::activation_grad;
use crate::{Error, Result, Tensor};

/// The tracked `gemm` (what `ops::gemm` runs), for the backward's products.
fn gemm(a: &Tensor, b: &Tensor, o: &GemmOptions) -> Result<Tensor> {
    recorded(a, b, o, |o| run("gemm", a, b, o, None))
}

struct GemmBackward {
    /// Saved only when the other operand needs a gradient.
    a: Option<Tensor>,
    b: Option<Tensor>,
    a_shape: Vec<usize>,
    b_shape: Vec<usize>,
    alpha: f64,
    beta: f64,
    c_shape: Option<Vec<usize>>,
    /// `Some(per_row)` when a bias was added.
    bias_per_row: Option<bool>,
    act: Activation,
    /// The output, for the relu / sigmoid / tanh derivatives.
    y: Option<Tensor>,
}

fn missing() -> Error {
    Error::arg("gemm", "backward is missing a saved tensor")
}

impl GemmBackward {
    /// `alpha * dZ @ B^T`, summed to A's shape.
    fn grad_a(&self, gz: &Tensor) -> Result<Tensor> {
        let b = self.b.as_ref().ok_or_else(missing)?;
        let bt = b.transpose(-1, -2)?;
        let o = GemmOptions {
            alpha: self.alpha,
            ..Default::default()
        };
        sum_to(&gemm(gz, &bt, &o)?, &self.a_shape)
    }

    /// `alpha * A^T @ dZ`, summed to B's shape.
    fn grad_b(&self, gz: &Tensor) -> Result<Tensor> {
        let a = self.a.as_ref().ok_or_else(missing)?;
        let o = GemmOptions {
            alpha: self.alpha,
            ..Default::default()
        };
        let r = gz.rank();
        if self.b_shape.len() == 2 && r > 2 {
            // The batch folds into K: [K, B*M] @ [B*M, N] is one GEMM that sums over the batch
            // in its (deterministic) K loop.
            let (m, n) = (gz.shape()[r - 2], gz.shape()[r - 1]);
            let k = self.a_shape[self.a_shape.len() - 1];
            let rows = gz.shape()[..r - 1].iter().product::<usize>();
            let mut full = gz.shape()[..r - 2].to_vec();
            full.extend([m, k]);
            let a2 = a.broadcast_to(&full)?.reshape(&[rows, k])?;
            let gz2 = gz.reshape(&[rows, n])?;
            return at_times(&a2, &gz2, &o);
        }
        if r == 2 && a.rank() == 2 && self.b_shape.len() == 2 {
            return at_times(a, gz, &o);
        }
        sum_to(&gemm(&a.transpose(-1, -2)?, gz, &o)?, &self.b_shape)
    }
}

/// `alpha * a^T @ gz` for `a` `[rows, k]` and `gz` `[rows, n]`: rows is the product's K,
/// which a linear layer over more than `MAX_K` rows passes (its forward runs in row windows):
/// then the rows go in chunks whose products are added in order, as PyTorch computes them.
fn at_times(a: &Tensor, gz: &Tensor, o: &GemmOptions) -> Result<Tensor> {
    let rows = a.shape()[0];
    let mut sum: Option<Tensor> = None;
    for r0 in (0..rows.max(1)).step_by(super::launch::MAX_K) {
        let len = super::launch::MAX_K.min(rows - r0);
        let part = gemm(
            &a.narrow(0, r0, len)?.transpose(0, 1)?,
            &gz.narrow(0, r0, len)?,
            o,
        )?;
        sum = Some(match sum {
            None => part,
            Some(s) => s.add(&part)?,
        });
    }
    sum.ok_or_else(missing)
}

impl BackwardOp for GemmBackward {
    fn saved(&self) -> Vec<&Tensor> {
        [&self.a, &self.b, &self.y].into_iter().flatten().collect()
    }

    fn name(&self) -> &'static str {
        "gemm"
    }

    fn backward(&self, grads: &[Option<Tensor>], needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        let n_in = needs.len();
        let Some(g) = grads.first().and_then(Option::as_ref) else {
            return Ok(vec![None; n_in]);
        };
        let gz = activation_grad("gemm", g, self.y.as_ref(), self.act)?;
        let mut out = Vec::with_capacity(n_in);
        out.push(if needs[0] {
            Some(self.grad_a(&gz)?)
        } else {
            None
        });
        out.push(if needs[1] {
            Some(self.grad_b(&gz)?)
        } else {
            None
        });
        let mut i = 2;
        if let Some(cs) = &self.c_shape {
            out.push(if needs[i] {
                // PyTorch's maybe_multiply(grad, beta): grad * beta, 0 * grad with beta 0
                // (NaN where the gradient is not finite), whether or not C was read.
                Some(if self.beta == 1.0 {
                    sum_to(&gz, cs)?
                } else {
                    sum_to(&gz.mul_scalar(self.beta)?, cs)?
                })
            } else {
                None
            });
            i += 1;
        }
        if let Some(per_row) = self.bias_per_row {
            out.push(if needs[i] {
                let r = gz.rank();
                Some(if per_row {
                    sum_to(&gz.sum(-1, false)?, &[gz.shape()[r - 2]])?
                } else {
                    sum_to(&gz, &[gz.shape()[r - 1]])?
                })
            } else {
                None
            });
        }
        Ok(out)
    }
}

/// Runs `forward` (the untracked GEMM with the given options) and records it.
pub(crate) fn recorded(
    a: &Tensor,
    b: &Tensor,
    o: &GemmOptions,
    forward: impl Fn(&GemmOptions) -> Result<Tensor>,
) -> Result<Tensor> {
    let bias_t = match o.bias {
        Some(Bias::PerColumn(t)) | Some(Bias::PerRow(t)) => Some(t),
        None => None,
    };
    // Checked on the stack: an untracked GEMM allocates nothing for autograd.
    if !records([Some(a), Some(b), o.c, bias_t].into_iter().flatten()) {
        return forward(o);
    }
    let mut inputs = vec![a, b];
    inputs.extend(o.c);
    inputs.extend(bias_t);
    let (fused, after) = o.activation.split_unfused();
    let o = &GemmOptions {
        activation: fused,
        ..*o
    };
    let out = forward(o)?;
    let y = record(out, &inputs, |y| {
        Box::new(GemmBackward {
            a: b.is_tracked().then(|| a.detach()),
            b: a.is_tracked().then(|| b.detach()),
            a_shape: a.shape().to_vec(),
            b_shape: b.shape().to_vec(),
            alpha: o.alpha,
            beta: o.beta,
            c_shape: o.c.map(|c| c.shape().to_vec()),
            bias_per_row: o.bias.map(|bias| matches!(bias, Bias::PerRow(_))),
            act: fused,
            y: (fused != Activation::None).then(|| y.clone()),
        })
    });
    after.apply(&y)
}

/// In-place ops are not differentiable: refuse tracked operands while grad mode is on (under
/// `no_grad`, e.g. an optimizer step, they are fine).
pub(crate) fn check_in_place(op: &'static str, tensors: &[&Tensor]) -> Result<()> {
    if records(tensors.iter().copied()) {
        return Err(Error::arg(
            op,
            "in-place ops are not differentiable: an operand is tracked by autograd \
             (run it under autograd::no_grad, or detach the operands)",
        ));
    }
    Ok(())
}
