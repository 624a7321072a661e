//! The kernels' launches behind the public batch-norm entry points (api.rs): untracked, on
//! validated arguments.

use super::types::{BatchNormOptions, BatchNormOutput, BatchNormSaved, BatchNormState, ViewId};
use super::*;

/// The untracked forward of [`batch_norm_inference`](super::batch_norm_inference) (grad.rs
/// records it).
pub(crate) fn inference_untracked(
    x: &Tensor,
    running_mean: &Tensor,
    running_var: &Tensor,
    o: &BatchNormOptions,
) -> Result<Tensor> {
    let op = "batch_norm_inference";
    let (gamma, beta, activation) = (o.weight, o.bias, o.activation);
    // F.batch_norm checks eps before the kernel checks the input's rank.
    let eps = check_eps(op, o.eps, false)?;
    let c = input_channels(op, x)?;
    let dt = x.dtype;
    let vecs = [
        ("running_mean", Some(running_mean)),
        ("running_var", Some(running_var)),
        ("weight (gamma)", gamma),
        ("bias (beta)", beta),
    ];
    check_channel_counts(op, x, &vecs, c)?;
    let rmean_os = check_channel_vec(op, "running_mean", x, running_mean, c, dt)?;
    let rvar_os = check_channel_vec(op, "running_var", x, running_var, c, dt)?;
    let gamma_os = gamma
        .map(|g| check_channel_vec(op, "weight (gamma)", x, g, c, dt))
        .transpose()?;
    let beta_os = beta
        .map(|b| check_channel_vec(op, "bias (beta)", x, b, c, dt))
        .transpose()?;
    if x.numel() == 0 {
        return Tensor::empty(x.device(), op, x.shape(), dt);
    }
    let (mut inp, _) = prepare(op, x, None)?;
    let dev = inp.x.device().clone();
    let y = Tensor::empty(&dev, op, inp.x.shape(), dt)?;
    let p = &mut inp.params;
    p.eps = eps;
    p.rmean_os = rmean_os;
    p.rvar_os = rvar_os;
    p.gamma_os = gamma_os.unwrap_or_default();
    p.beta_os = beta_os.unwrap_or_default();
    p.flags =
        if gamma.is_some() { FLAG_GAMMA } else { 0 } | if beta.is_some() { FLAG_BETA } else { 0 };
    // Absent parameters bind placeholders the kernel never reads (flags say so).
    let (unused, no_gamma, no_beta) = (
        inp.placeholder(op)?,
        inp.placeholder(op)?,
        inp.placeholder(op)?,
    );
    let windows = inp.windows(op, &[y.buffer()])?;
    let (gb, bb) = (
        gamma.map_or(no_gamma.buffer(), |g| g.buffer()),
        beta.map_or(no_beta.buffer(), |b| b.buffer()),
    );
    let consts = inp.consts(Some(activation));
    inp.run_data(
        op,
        &INFER,
        &consts,
        &windows,
        None,
        Some(y.buffer()),
        |xb, _, ob| {
            let [o4, o1] = inp.out_binds(ob.unwrap_or(xb), &unused);
            [xb, xb, o4, o1]
                .into_iter()
                .chain([gb, bb, running_mean.buffer(), running_var.buffer()].map(Bind::whole))
                .collect()
        },
    )?;
    Ok(y)
}

/// The untracked forward of [`batch_norm_train`](super::batch_norm_train) (grad.rs records
/// it).
pub(crate) fn train_untracked(
    x: &Tensor,
    state: Option<&mut BatchNormState>,
    o: &BatchNormOptions,
) -> Result<BatchNormOutput> {
    let op = "batch_norm_train";
    let (gamma, beta) = (o.weight, o.bias);
    // Values per channel (N times the trailing dims): not numel / C, which C = 0 would divide.
    // F.batch_norm's _verify_batch_size runs before any rank check (a [1] input fails here).
    let s = x.shape();
    let count: usize =
        s.first().copied().unwrap_or(1) * s.get(2..).unwrap_or(&[]).iter().product::<usize>();
    // PyTorch refuses exactly one value per channel (no variance); an empty batch is fine.
    if count == 1 && !s.is_empty() {
        return Err(Error::shape(
            op,
            format!(
                "Expected more than 1 value per channel when training, got input size \
                 torch.Size({s:?})"
            ),
        ));
    }
    // After the batch check and before the kernel's rank check, as F.batch_norm.
    let eps = check_eps(op, o.eps, true)?;
    let c = input_channels(op, x)?;
    let dt = x.dtype;
    // _batch_norm_impl_index's order: the counts of running_mean, running_var, weight and
    // bias, then (native_batch_norm) their devices and dtypes. (PyTorch returns an empty
    // input before the counts; here they are checked for it too.)
    let vecs = [
        ("running_mean", state.as_ref().map(|s| &s.running_mean)),
        ("running_var", state.as_ref().map(|s| &s.running_var)),
        ("weight (gamma)", gamma),
        ("bias (beta)", beta),
    ];
    check_channel_counts(op, x, &vecs, c)?;
    let running_os = state
        .as_ref()
        .map(|st| {
            Ok::<_, Error>((
                check_channel_vec(op, "running_mean", x, &st.running_mean, c, dt)?,
                check_channel_vec(op, "running_var", x, &st.running_var, c, dt)?,
            ))
        })
        .transpose()?;
    let gamma_os = gamma
        .map(|g| check_channel_vec(op, "weight (gamma)", x, g, c, dt))
        .transpose()?;
    let beta_os = beta
        .map(|b| check_channel_vec(op, "bias (beta)", x, b, c, dt))
        .transpose()?;
    let mut running = None;
    if let (Some(st), Some((rmean_os, rvar_os))) = (&state, running_os) {
        let rm = &st.running_mean;
        let rv = &st.running_var;
        let mut others = vec![("the input", x), ("running_var", rv)];
        others.extend(gamma.map(|g| ("weight (gamma)", g)));
        others.extend(beta.map(|b| ("bias (beta)", b)));
        check_in_place(op, "running_mean", rm, &others)?;
        others[1] = ("running_mean", rm);
        check_in_place(op, "running_var", rv, &others)?;
        let factor = match st.momentum {
            Some(m) if m.is_finite() => m as f32,
            Some(m) => {
                return Err(Error::arg(op, format!("momentum must be finite, got {m}")));
            }
            None => 1.0 / st.num_batches_tracked.saturating_add(1) as f32,
        };
        running = Some((rmean_os, rvar_os, factor));
    }
    if c == 0 || count == 0 {
        // Nothing to normalize (no channels, or an empty batch, which PyTorch accepts and
        // leaves the running statistics alone), but the call still counts as a training
        // batch, as nn.BatchNorm counts it.
        let dev = x.device();
        let y = Tensor::empty(dev, op, x.shape(), dt)?;
        let mean = Tensor::zeros(dev, &[c], DType::F32)?;
        let invstd = Tensor::zeros(dev, &[c], DType::F32)?;
        let out = output(x, y.clone(), y, mean, invstd, o.activation);
        if let Some(st) = state {
            st.num_batches_tracked = st.num_batches_tracked.saturating_add(1);
        }
        return Ok(out);
    }
    let (mut inp, _) = prepare(op, x, None)?;
    let dev = inp.x.device().clone();
    let y = Tensor::empty(&dev, op, inp.x.shape(), dt)?;
    let saved_mean = Tensor::empty(&dev, op, &[c], DType::F32)?;
    let saved_invstd = Tensor::empty(&dev, op, &[c], DType::F32)?;
    let ws = inp.workspace(op)?;
    let p = &mut inp.params;
    p.eps = eps;
    p.gamma_os = gamma_os.unwrap_or_default();
    p.beta_os = beta_os.unwrap_or_default();
    p.smean_os = [0, 1];
    p.sinv_os = [0, 1];
    p.flags =
        if gamma.is_some() { FLAG_GAMMA } else { 0 } | if beta.is_some() { FLAG_BETA } else { 0 };
    if let Some((rm, rv, f)) = running {
        p.rmean_os = rm;
        p.rvar_os = rv;
        p.factor = f;
        p.flags |= FLAG_RUNNING;
    }
    let params = bytemuck::bytes_of(&inp.params);
    let dts = [dt];
    let data = inp.consts(None);
    let xb = inp.x.buffer();
    let (fused, after) = o.activation.split_unfused();
    let windows = inp.windows(op, &[y.buffer()])?;
    let wsb = ws.buffer();
    if windows.is_some() {
        // Windows past sample 0 get each channel's first value (the Welford pivot) gathered.
        let s: usize = inp.x.shape()[2..].iter().product();
        let pivots = inp
            .x
            .narrow(0, 0, 1)?
            .reshape(&[c, s])?
            .narrow(1, 0, 1)?
            .to_dtype(DType::F32)?
            .contiguous_at_zero()?;
        let pb = pivots.buffer();
        inp.run_data(op, &STATS_PIVOTS, &data, &windows, None, None, |x, _, _| {
            vec![x, x, Bind::whole(wsb), Bind::whole(pb)]
        })?;
    } else {
        dev.launch(
            op,
            &STATS,
            &dts,
            &data,
            params,
            &[xb, xb, wsb],
            inp.data_grid(),
        )?;
    }
    // Absent tensors bind placeholders, which the kernel never touches (flags say so).
    let unused: Vec<Storage> = (0..4).map(|_| inp.placeholder(op)).collect::<Result<_>>()?;
    let (rmb, rvb) = match &state {
        Some(st) => (st.running_mean.buffer(), st.running_var.buffer()),
        None => (unused[2].buffer(), unused[3].buffer()),
    };
    dev.launch(
        op,
        &FINALIZE,
        &dts,
        &data,
        params,
        &[
            wsb,
            gamma.map_or(unused[0].buffer(), |g| g.buffer()),
            beta.map_or(unused[1].buffer(), |b| b.buffer()),
            rmb,
            rvb,
            saved_mean.buffer(),
            saved_invstd.buffer(),
        ],
        inp.channel_grid(op)?,
    )?;
    let consts = inp.consts(Some(fused));
    inp.run_data(
        op,
        &APPLY,
        &consts,
        &windows,
        None,
        Some(y.buffer()),
        |x, _, ob| {
            let [o4, o1] = inp.out_binds(ob.unwrap_or(x), &unused[0]);
            vec![x, x, o4, o1, Bind::whole(wsb)]
        },
    )?;
    if let Some(st) = state {
        st.running_mean.bump_version();
        st.running_var.bump_version();
        // Saturates: a wrapped count would make momentum=None's factor 1/0.
        st.num_batches_tracked = st.num_batches_tracked.saturating_add(1);
    }
    // GELU's derivative needs its input: y is stored as the pre-activation, activated here.
    let activated = after.apply(&y)?;
    Ok(output(
        x,
        activated,
        y,
        saved_mean,
        saved_invstd,
        o.activation,
    ))
}

/// The training result; `pre` is y before a GELU (else y itself).
fn output(
    x: &Tensor,
    y: Tensor,
    pre: Tensor,
    mean: Tensor,
    invstd: Tensor,
    activation: Activation,
) -> BatchNormOutput {
    let saved = BatchNormSaved {
        mean,
        invstd,
        activation,
        act_input: match activation {
            Activation::None => None,
            a if a.grad_from_output() => Some(y.clone()),
            _ => Some(pre),
        },
        input: Some(ViewId::of(x)),
        output: Some(ViewId::of(&y)),
        mixed: false,
    };
    BatchNormOutput { y, saved }
}

/// The kernels of [`batch_norm_backward`](super::batch_norm_backward), after the activation's
/// derivative has been applied to `dy`.
pub(crate) fn backward_untracked(
    dy: &Tensor,
    x: &Tensor,
    saved_mean: &Tensor,
    saved_invstd: &Tensor,
    gamma: Option<&Tensor>,
) -> Result<(Tensor, Tensor, Tensor)> {
    let op = "batch_norm_backward";
    let c = input_channels(op, x)?;
    let dt = x.dtype;
    let smean_os = check_channel_vec(op, "saved_mean", x, saved_mean, c, DType::F32)?;
    let sinv_os = check_channel_vec(op, "saved_invstd", x, saved_invstd, c, DType::F32)?;
    let gamma_os = gamma
        .map(|g| check_channel_vec(op, "weight (gamma)", x, g, c, dt))
        .transpose()?;
    if x.numel() == 0 || dy.numel() == 0 {
        // Validate dy as prepare would, then return empty dx and zero parameter gradients
        // (sums over no values).
        x.check_grad_output(op, dy)?;
        let dev = x.device();
        return Ok((
            Tensor::empty(dev, op, x.shape(), dt)?,
            Tensor::zeros(dev, &[c], dt)?,
            Tensor::zeros(dev, &[c], dt)?,
        ));
    }
    let (mut inp, dy) = prepare(op, x, Some(dy))?;
    let Some(dy) = dy else {
        return Err(Error::arg(op, "grad_output is missing"));
    };
    let dev = inp.x.device().clone();
    let dx = Tensor::empty(&dev, op, inp.x.shape(), dt)?;
    let dgamma = Tensor::empty(&dev, op, &[c], dt)?;
    let dbeta = Tensor::empty(&dev, op, &[c], dt)?;
    let ws = inp.workspace(op)?;
    let p = &mut inp.params;
    p.smean_os = smean_os;
    p.sinv_os = sinv_os;
    p.gamma_os = gamma_os.unwrap_or_default();
    p.flags = if gamma.is_some() { FLAG_GAMMA } else { 0 };
    let params = bytemuck::bytes_of(&inp.params);
    let dts = [dt];
    let data = inp.consts(None);
    let (dyb, wsb) = (dy.buffer(), ws.buffer());
    // Bindings this pass never touches get placeholders (see `Input::placeholder`).
    let unused = inp.placeholder(op)?;
    let windows = inp.windows(op, &[dyb, dx.buffer()])?;
    let smb = saved_mean.buffer();
    inp.run_data(
        op,
        &GRAD_STATS,
        &data,
        &windows,
        Some(&dy),
        None,
        |x, d, _| {
            let d = d.unwrap_or(x);
            vec![x, x, d, d, Bind::whole(smb), Bind::whole(wsb)]
        },
    )?;
    dev.launch(
        op,
        &GRAD_FINALIZE,
        &dts,
        &data,
        params,
        &[
            wsb,
            gamma.map_or(unused.buffer(), |g| g.buffer()),
            saved_mean.buffer(),
            saved_invstd.buffer(),
            dgamma.buffer(),
            dbeta.buffer(),
        ],
        inp.channel_grid(op)?,
    )?;
    inp.run_data(
        op,
        &GRAD_APPLY,
        &data,
        &windows,
        Some(&dy),
        Some(dx.buffer()),
        |x, d, o| {
            let d = d.unwrap_or(x);
            let [o4, o1] = inp.out_binds(o.unwrap_or(x), &unused);
            vec![x, x, d, d, o4, o1, Bind::whole(wsb)]
        },
    )?;
    Ok((dx, dgamma, dbeta))
}
