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
        let o = GemmOptions {
            alpha: self.alpha,
            ..Default::default()
        };
        if gz.rank() > 2 && batch_numel(&self.a_shape) == 1 {
            // A shared over the batch: dA^T = sum_b B_b dZ_b^T.
            let at = folded(&b.transpose(-1, -2)?, &gz.transpose(-1, -2)?, &o)?;
            return at.transpose(0, 1)?.reshape(&self.a_shape);
        }
        let bt = b.transpose(-1, -2)?;
        // K here is the forward's N, which the forward never bounds (wide outputs run in
        // windows).
        sum_to(&over_k_chunks(gz, &bt, &o, gemm)?, &self.a_shape)
    }

    /// `alpha * A^T @ dZ`, summed to B's shape.
    fn grad_b(&self, gz: &Tensor) -> Result<Tensor> {
        let a = self.a.as_ref().ok_or_else(missing)?;
        let o = GemmOptions {
            alpha: self.alpha,
            ..Default::default()
        };
        if gz.rank() > 2 && batch_numel(&self.b_shape) == 1 {
            // B shared over the batch (2-D, or batch dims all 1): dB = sum_b A_b^T dZ_b.
            return folded(a, gz, &o)?.reshape(&self.b_shape);
        }
        // K is the forward's M (the rows of A, here batched), which the forward never bounds.
        let at = a.transpose(-1, -2)?;
        sum_to(&over_k_chunks(&at, gz, &o, gemm)?, &self.b_shape)
    }
}

/// `sum_b x_b^T @ g_b` for `x [..., R, K]` (broadcast to g's batch) and `g [..., R, C]`, as
/// `[K, C]`: the batch folds into the product's K, `[K, B*R] @ [B*R, C]`, one GEMM that sums
/// over it in its (deterministic) K loop, as PyTorch's matmul folds an operand shared over
/// the batch. A `[B, K, C]` product summed afterwards would need B times the result's memory.
fn folded(x: &Tensor, g: &Tensor, o: &GemmOptions) -> Result<Tensor> {
    let r = g.rank();
    let rows = g.shape()[..r - 1].iter().product::<usize>();
    let (c, k) = (g.shape()[r - 1], x.shape()[x.rank() - 1]);
    let mut full = g.shape()[..r - 1].to_vec();
    full.push(k);
    let x2 = x.broadcast_to(&full)?.reshape(&[rows, k])?;
    let g2 = g.reshape(&[rows, c])?;
    over_k_chunks(&x2.transpose(0, 1)?, &g2, o, gemm)
}

/// The elements of a shape's batch dims (all but the last two): 1 for a matrix.
fn batch_numel(shape: &[usize]) -> usize {
    shape[..shape.len().saturating_sub(2)].iter().product()
}

/// `product(x, y, o)` (a GEMM with `alpha`, no epilogue) for any K (x's last dim, y's
/// second-to-last): a backward's K is a forward dimension the forward does not bound (a
/// linear layer over more than `MAX_K` rows, an output more than `MAX_K` wide, both run in
/// windows), so past `MAX_K`, or where an operand is larger than one binding (a product
/// windows over M and N, never K), the K range goes in chunks whose products are added in
/// order, as PyTorch computes them.
pub(crate) fn over_k_chunks(
    x: &Tensor,
    y: &Tensor,
    o: &GemmOptions,
    product: impl Fn(&Tensor, &Tensor, &GemmOptions) -> Result<Tensor>,
) -> Result<Tensor> {
    let max_k = super::launch::MAX_K;
    let (rx, ry) = (x.rank(), y.rank());
    let k = if rx >= 2 && ry >= 2 {
        x.shape()[rx - 1]
    } else {
        0
    };
    let cap = crate::runtime::window::binding_elems(x.device(), x.dtype().size() as u64);
    let per_k = (x.numel() / k.max(1)).max(y.numel() / k.max(1)).max(1) as u64;
    let chunk = max_k.min((cap / per_k).max(1) as usize);
    if k <= chunk {
        return product(x, y, o);
    }
    let mut sum: Option<Tensor> = None;
    for k0 in (0..k).step_by(chunk) {
        let len = chunk.min(k - k0);
        let part = product(&x.narrow(-1, k0, len)?, &y.narrow(-2, k0, len)?, o)?;
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
                    // Every dim but the rows in one reduction (f16 accumulates in f32): a
                    // row sum stored first overflowed f16 where the whole sum is finite.
                    let dims: Vec<isize> =
                        (0..r as isize).filter(|&d| d != r as isize - 2).collect();
                    gz.sum_dims(&dims, false)?
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
    // The first operand is the destination of every caller.
    let dest = tensors.first();
    if crate::autograd::is_grad_enabled() && dest.is_some_and(|t| t.is_no_grad_view()) {
        return Err(Error::arg(
            op,
            "A view was created in no_grad mode and is being modified inplace with grad mode \
             enabled. Given that this use case is ambiguous and error-prone, it is forbidden. \
             You can clarify your code by moving both the view and the inplace either both \
             inside the no_grad block (if you don't want the inplace to be tracked) or both \
             outside (if you want the inplace to be tracked).",
        ));
    }
    let multi_output = dest.and_then(|t| t.multi_output_index());
    if let (Some((i, fwd)), true) = (multi_output, crate::autograd::is_grad_enabled()) {
        // handle_view_on_rebase, before check_inplace's leaf checks; current PyTorch names
        // the forward op there (`forward_op_name()`: Split, for chunk too).
        return Err(Error::arg(
            op,
            format!(
                "Output {i} of {fwd} is a view and is being modified inplace. This \
                 view is the output of a function that returns multiple views. Such functions \
                 do not allow the output views to be modified inplace. You should replace the \
                 inplace operation by an out-of-place one."
            ),
        ));
    }
    if records(tensors.iter().copied()) {
        // PyTorch's words where it refuses too (a written leaf that requires grad, or a view
        // of one); it differentiates in-place ops on other tensors, which are not offered
        // here.
        let what = if dest.is_some_and(|t| t.is_tracked() && t.is_leaf()) {
            "a leaf Variable that requires grad is being used in an in-place operation. "
        } else if dest.is_some_and(|t| t.is_view_of_leaf()) {
            "a view of a leaf Variable that requires grad is being used in an in-place \
             operation. "
        } else {
            ""
        };
        return Err(Error::arg(
            op,
            format!(
                "{what}in-place ops are not differentiable: an operand is tracked by autograd \
                 (run it under autograd::no_grad, or detach the operands)"
            ),
        ));
    }
    Ok(())
}
