//! Shapes that change every call (detection, speech, variable-length batches): 50 calls of
//! conv2d + batch norm + LSTM, each with another (N, H, W) and (T, B) from a fixed list
//! (`dynamic_shapes`), against 50 calls of one shape doing the same total work per call on
//! average (`dynamic_shapes_one`); `dynamic_shapes` reports `vs_one_shape=` (its time / the
//! one-shape time, paired). Pipelines never depend on shapes, so after the first call nothing
//! compiles: the setup checks it on a fresh device and prints `pipelines_after_first=`.

use wgtensor::ops::{
    batch_norm_train, conv2d, BatchNormOptions, Conv2dOptions, Padding, Rnn, RnnKind, RnnWeights,
};
use wgtensor::{DType, Device, Tensor};

use super::inputs::tensor;
use super::{Case, Run};

const CALLS: usize = 50;
const C: usize = 16;
const HIDDEN: usize = 32;

/// (N, H, W, T, B) of call i: sizes spread around the one-shape case (4, 24, 24, 12, 4).
fn shape(i: usize) -> (usize, usize, usize, usize, usize) {
    let n = 2 + i % 5; // 2..=6
    let h = 16 + (i * 7) % 17; // 16..=32
    let w = 16 + (i * 11) % 17;
    let t = 6 + (i * 5) % 13; // 6..=18
    let b = 2 + (i * 3) % 5; // 2..=6
    (n, h, w, t, b)
}

struct Model {
    w: Tensor,
    o: Conv2dOptions,
    rnn: Rnn,
}

fn model(dev: &Device) -> wgtensor::Result<Model> {
    let g = 4 * HIDDEN;
    let weights = RnnWeights::new(
        RnnKind::Lstm,
        &tensor(dev, &[g, C], DType::F32, 3)?,
        &tensor(dev, &[g, HIDDEN], DType::F32, 4)?,
        None,
        None,
    )?;
    Ok(Model {
        w: tensor(dev, &[C, C, 3, 3], DType::F32, 2)?,
        o: Conv2dOptions {
            padding: Padding::uniform(1),
            ..Default::default()
        },
        rnn: Rnn::new(
            RnnKind::Lstm,
            wgtensor::ops::RnnOptions {
                num_layers: 1,
                bidirectional: false,
                batch_first: false,
            },
            vec![weights],
        )?,
    })
}

/// One call: conv2d + batch norm on [n, C, h, w], then an LSTM over [t, b, C].
fn call(dev: &Device, m: &Model, inputs: &[(Tensor, Tensor)], i: usize) -> wgtensor::Result<()> {
    let (x, seq) = &inputs[i];
    let y = conv2d(x, &m.w, None, &m.o)?;
    let _ = batch_norm_train(&y, None, &BatchNormOptions::default())?;
    let _ = m.rnn.forward(seq, None, None)?;
    let _ = dev;
    Ok(())
}

fn inputs(
    dev: &Device,
    shapes: &[(usize, usize, usize, usize, usize)],
) -> wgtensor::Result<Vec<(Tensor, Tensor)>> {
    shapes
        .iter()
        .enumerate()
        .map(|(i, &(n, h, w, t, b))| {
            Ok((
                tensor(dev, &[n, C, h, w], DType::F32, 10 + i as u32)?,
                tensor(dev, &[t, b, C], DType::F32, 100 + i as u32)?,
            ))
        })
        .collect()
}

fn dynamic_case(dev: &Device) -> wgtensor::Result<Run> {
    let shapes: Vec<_> = (0..CALLS).map(shape).collect();
    // On a fresh device: compile everything with the first shape, then count what the other 49
    // compile.
    {
        let fresh = crate::open_device(crate::device_options())?;
        let m = model(&fresh)?;
        let ins = inputs(&fresh, &shapes)?;
        call(&fresh, &m, &ins, 0)?;
        fresh.sync()?;
        let before = fresh.stats().pipelines_compiled;
        for i in 1..CALLS {
            call(&fresh, &m, &ins, i)?;
        }
        fresh.sync()?;
        let after = fresh.stats().pipelines_compiled - before;
        println!("case=dynamic_shapes_compiles pipelines_after_first={after}");
    }
    let m = model(dev)?;
    let ins = inputs(dev, &shapes)?;
    dev.sync()?;
    Ok(Box::new(move || {
        for i in 0..CALLS {
            call(dev_of(&ins), &m, &ins, i)?;
        }
        Ok(())
    }))
}

fn one_shape_case(dev: &Device) -> wgtensor::Result<Run> {
    let shapes = vec![(4, 24, 24, 12, 4); CALLS];
    let m = model(dev)?;
    let ins = inputs(dev, &shapes)?;
    dev.sync()?;
    Ok(Box::new(move || {
        for i in 0..CALLS {
            call(dev_of(&ins), &m, &ins, i)?;
        }
        Ok(())
    }))
}

fn dev_of(ins: &[(Tensor, Tensor)]) -> &Device {
    ins[0].0.device()
}

pub fn cases() -> Vec<Case> {
    vec![
        Case::new("dynamic_shapes_one", one_shape_case),
        Case::new("dynamic_shapes", dynamic_case),
    ]
}
