//! Buffer donation: owned elementwise calls on a uniquely held input write into its buffer
//! (peak memory one tensor, not two), with results identical to the allocating calls; any
//! other holder of the buffer (a clone, a view, autograd, the application) disables it.

use wgtensor::ops::{BinaryOp, ScalarOp, UnaryOp};
use wgtensor::{DType, Device, Tensor};

use super::vals;

/// Step `i` of the test chain, owned (donating) or by reference; `col` is broadcast per row.
fn step(x: Tensor, col: &Tensor, i: usize, owned: bool) -> Tensor {
    let r = match (i % 5, owned) {
        (0, true) => x * 1.5,
        (0, false) => &x * 1.5,
        (1, true) => x - 0.25,
        (1, false) => &x - 0.25,
        (2, true) => x.into_unary(UnaryOp::Tanh),
        (2, false) => x.tanh(),
        (3, true) => x + col,
        (3, false) => &x + col,
        (_, true) => x.into_scalar_op(ScalarOp::Max, -0.5),
        (_, false) => x.scalar_op(ScalarOp::Max, -0.5),
    };
    r.unwrap()
}

/// 100 owned elementwise ops on a 64 MiB tensor keep the pool's peak within 1.1x of the tensor
/// (the allocating chain needs two live tensors per step), and give the same bits.
#[test]
fn owned_chain_on_64_mib_keeps_one_buffer() {
    let (rows, cols) = (4096, 4096); // 16 Mi f32 = 64 MiB
    let bytes = (rows * cols * 4) as u64;
    let d = Device::new().unwrap();
    let col = Tensor::from_slice(
        &d,
        &(0..cols)
            .map(|i| (i % 7) as f32 * 0.125 - 0.375)
            .collect::<Vec<_>>(),
        &[cols],
    )
    .unwrap();
    let mut x = wgtensor::ops::rand(&d, &[rows, cols], DType::F32).unwrap();
    // (A packed narrow is a view of x: read it and let it go before the chain.)
    let start = vals(&x.narrow(0, 0, 2).unwrap());
    d.sync().unwrap();
    let before = d.stats();
    for i in 0..100 {
        x = step(x, &col, i, true);
    }
    let got = vals(&x.narrow(0, 0, 2).unwrap().contiguous().unwrap());
    let st = d.stats();
    assert_eq!(st.donations - before.donations, 100, "{st:?}");
    assert!(
        st.pool.peak_bytes as f64 <= 1.1 * bytes as f64,
        "peak {} bytes for a {bytes}-byte tensor",
        st.pool.peak_bytes
    );
    // The allocating chain over the same two rows gives the same bits.
    let mut y = Tensor::from_slice(&d, &start, &[2, cols]).unwrap();
    for i in 0..100 {
        y = step(y, &col, i, false);
    }
    let want = vals(&y);
    assert!(
        got.iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "owned and allocating chains differ"
    );
}

/// The allocating chain holds input and output at every step: at least twice the tensor.
#[test]
fn allocating_chain_needs_two_buffers() {
    let d = Device::new().unwrap();
    let mut x = Tensor::full(&d, &[1 << 20], 1.0, DType::F32).unwrap();
    for i in 0..10 {
        x = step(
            x,
            &Tensor::full(&d, &[1], 0.5, DType::F32).unwrap(),
            i,
            false,
        );
    }
    vals(&x);
    let st = d.stats();
    assert_eq!(st.donations, 0);
    assert!(st.pool.peak_bytes >= 2 * (4 << 20), "{st:?}");
}

/// A clone or a view of the input keeps its buffer: no donation, and the holder still reads
/// the old values.
#[test]
fn shared_inputs_are_not_donated() {
    let d = Device::new().unwrap();
    let x = Tensor::from_slice(&d, &[1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    let keep = x.clone();
    let y = (x * 10.0).unwrap();
    assert_eq!(vals(&y), vec![10.0, 20.0, 30.0, 40.0]);
    assert_eq!(vals(&keep), vec![1.0, 2.0, 3.0, 4.0]);
    let t = keep.transpose(0, 1).unwrap();
    let z = keep.into_unary(UnaryOp::Neg).unwrap();
    assert_eq!(vals(&z), vec![-1.0, -2.0, -3.0, -4.0]);
    assert_eq!(vals(&t.contiguous().unwrap()), vec![1.0, 3.0, 2.0, 4.0]);
    // A strided view itself is not packed: its op allocates.
    let w = t.into_unary(UnaryOp::Neg).unwrap();
    assert_eq!(vals(&w), vec![-1.0, -3.0, -2.0, -4.0]);
    // The application may hold the buffer it was given.
    let e = Tensor::from_slice(&d, &[5.0f32; 4], &[4]).unwrap();
    let (buf, _, _) = e.wgpu_buffer().unwrap();
    let _app_copy = buf.clone();
    let e2 = (e + 1.0).unwrap();
    assert_eq!(vals(&e2), vec![6.0; 4]);
    assert_eq!(d.stats().donations, 0);
    // Uniquely held again: donated.
    let f = (e2 * 2.0).unwrap();
    assert_eq!(vals(&f), vec![12.0; 4]);
    assert_eq!(d.stats().donations, 1);
}

/// Each side of a binary op can be the donor when it has the output's shape; a broadcast
/// operand cannot.
#[test]
fn binary_donates_the_operand_with_the_output_shape() {
    let d = Device::new().unwrap();
    let up = |v: &[f32], s: &[usize]| Tensor::from_slice(&d, v, s).unwrap();
    let row = up(&[1.0, 2.0], &[2]);
    let m = up(&[10.0, 20.0, 30.0, 40.0], &[2, 2]);
    // The owned operand is the broadcast one: it cannot hold the output.
    let r = (&m - row.clone()).unwrap();
    assert_eq!(vals(&r), vec![9.0, 18.0, 29.0, 38.0]);
    assert_eq!(d.stats().donations, 0);
    // rhs donated (`&a - b`), order kept.
    let r = (&row - r).unwrap();
    assert_eq!(vals(&r), vec![-8.0, -16.0, -28.0, -36.0]);
    assert_eq!(d.stats().donations, 1);
    // Both owned: the first that can.
    let r = (row.clone() * r).unwrap();
    assert_eq!(vals(&r), vec![-8.0, -32.0, -28.0, -72.0]);
    assert_eq!(d.stats().donations, 2);
    // Division is within 1 ulp on every adapter, not always the CPU's rounding: the donated
    // result is checked bitwise against the allocating path on the same device (what the
    // crate promises) and within 1 ulp against the CPU.
    let allocating = vals(&r.binary(&m, BinaryOp::Div).unwrap());
    let r = r.into_binary(&m, BinaryOp::Div).unwrap();
    assert_eq!(vals(&r), allocating);
    for (g, w) in vals(&r).iter().zip([-0.8f32, -1.6, -28.0 / 30.0, -1.8]) {
        assert!((g - w).abs() <= w.abs() * f32::EPSILON, "{g} vs {w}");
    }
    assert_eq!(d.stats().donations, 3);
    // NaN still propagates in place.
    let r = (r + up(&[f32::NAN], &[1])).unwrap();
    assert!(vals(&r).iter().all(|v| v.is_nan()));
    // Mismatched dtypes promote as PyTorch's (an i32 operand takes the float's dtype), by
    // the allocating path.
    let h = Tensor::zeros(&d, m.shape(), DType::I32).unwrap();
    let (want, before) = (vals(&m), d.stats().donations);
    let s = (m + &h).unwrap();
    assert_eq!((s.dtype(), vals(&s)), (DType::F32, want));
    assert_eq!(d.stats().donations, before);
    // Two i32 operands are still an error naming the op (no integer arithmetic).
    let e = (h.clone() + &h).unwrap_err();
    assert!(e.to_string().starts_with("add:"), "{e}");
}

/// f32 <-> i32 casts reuse the buffer; f16 changes the element size and allocates.
#[test]
fn same_size_casts_are_donated() {
    let d = Device::new().unwrap();
    let x = Tensor::from_slice(&d, &[1.9f32, -2.7, 3e9, -0.5], &[4]).unwrap();
    let i = x.into_dtype(DType::I32).unwrap();
    assert_eq!(i.dtype(), DType::I32);
    assert_eq!(i.to_vec::<i32>().unwrap(), vec![1, -2, 2147483520, 0]);
    let f = i.into_dtype(DType::F32).unwrap();
    assert_eq!(vals(&f), vec![1.0, -2.0, 2147483520.0, 0.0]);
    assert_eq!(d.stats().donations, 2);
    if d.supports_f16() {
        let h = f.into_dtype(DType::F16).unwrap();
        assert_eq!(h.dtype(), DType::F16);
        assert_eq!(d.stats().donations, 2);
    }
}

/// Recorded ops never donate (the graph may save the input); gradient accumulation of the
/// backward's own temporaries does.
#[test]
fn autograd_and_donation() {
    let d = Device::new().unwrap();
    let x = Tensor::from_slice(&d, &[0.5f32, -1.0, 2.0], &[3])
        .unwrap()
        .requires_grad()
        .unwrap();
    // y = tanh(x) * 3 + exp(x): x feeds two branches, so its gradient is accumulated.
    let y = (x.clone().into_unary(UnaryOp::Tanh).unwrap() * 3.0).unwrap();
    let y = (y + x.exp().unwrap()).unwrap();
    assert_eq!(d.stats().donations, 0, "recorded ops donated");
    let loss = y.sum_all().unwrap();
    let g = loss.backward().unwrap();
    let got = vals(g.get(&x).unwrap());
    for (i, v) in [0.5f64, -1.0, 2.0].iter().enumerate() {
        let want = 3.0 * (1.0 - v.tanh().powi(2)) + v.exp();
        assert!((got[i] as f64 - want).abs() < 1e-5, "{got:?}");
    }
    assert!(d.stats().donations >= 1, "accumulation allocated");
    // The input still reads its values.
    assert_eq!(vals(&x), vec![0.5, -1.0, 2.0]);
}
