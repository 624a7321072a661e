//! t, unbind, movedim, repeat, flip, roll, tril and triu against host references written from
//! PyTorch's definitions (and PyTorch's printed values where noted), with gradients, empty and
//! 0-d tensors, f16 / i32 data and PyTorch's error words.
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

use wgtensor::{DType, Device, Tensor};

fn dev() -> &'static Device {
    static DEV: std::sync::OnceLock<Device> = std::sync::OnceLock::new();
    DEV.get_or_init(|| Device::new().expect("device"))
}

fn ramp(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|i| i as f32).collect();
    Tensor::from_slice(dev(), &v, shape).unwrap()
}

fn vals(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap()
}

fn err(r: wgtensor::Result<impl std::fmt::Debug>) -> String {
    r.unwrap_err().to_string()
}

/// Row-major strides of `shape`.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// `out[idx] = x[map(idx)]` over `out_shape`, `x` a ramp of `in_shape` (its value is its flat
/// position).
fn gather_ref(
    in_shape: &[usize],
    out_shape: &[usize],
    map: impl Fn(&[usize]) -> Vec<usize>,
) -> Vec<f32> {
    let (si, so) = (strides(in_shape), strides(out_shape));
    let n: usize = out_shape.iter().product();
    (0..n)
        .map(|flat| {
            let idx: Vec<usize> = (0..out_shape.len())
                .map(|d| flat / so[d] % out_shape[d])
                .collect();
            let src = map(&idx);
            src.iter().zip(&si).map(|(a, b)| a * b).sum::<usize>() as f32
        })
        .collect()
}

#[test]
fn t_unbind_and_movedim_are_views() {
    let x = ramp(&[2, 3]);
    let y = x.t().unwrap();
    assert_eq!(y.shape(), &[3, 2]);
    assert!(y.shares_storage(&x));
    assert_eq!(vals(&y), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    for s in [&[4][..], &[]] {
        let v = ramp(s);
        assert_eq!(v.t().unwrap().shape(), s);
    }
    assert!(err(ramp(&[2, 3, 4]).t())
        .contains("t() expects a tensor with <= 2 dimensions, but self is 3D"));

    let cols = x.unbind(1).unwrap();
    assert_eq!(cols.len(), 3);
    for (j, c) in cols.iter().enumerate() {
        assert_eq!(c.shape(), &[2]);
        assert_eq!(vals(c), vec![j as f32, 3.0 + j as f32]);
    }
    assert!(x.unbind(-2).unwrap()[1].shares_storage(&x));
    assert!(ramp(&[0, 3]).unbind(0).unwrap().is_empty());
    assert_eq!(ramp(&[0, 3]).unbind(1).unwrap().len(), 3);
    assert!(
        err(ramp(&[]).unbind(0)).contains("Dimension specified as 0 but tensor has no dimensions")
    );
    assert!(err(x.unbind(2))
        .contains("Dimension out of range (expected to be in range of [-2, 1], but got 2)"));
    // A 0-d tensor's dim wraps first, as PyTorch's.
    assert!(err(ramp(&[]).unbind(-1)).contains("Dimension specified as 0 but tensor"));
    assert!(err(ramp(&[]).unbind(5))
        .contains("Dimension out of range (expected to be in range of [-1, 0], but got 5)"));
    // Its slices are outputs of one op returning several views: no in-place write while
    // tracked, in PyTorch's words.
    let y = ramp(&[2, 3])
        .requires_grad()
        .unwrap()
        .mul_scalar(1.0)
        .unwrap();
    let e = err(y.unbind(1).unwrap()[1].copy_from(&ramp(&[2])));
    assert!(
        e.contains("Output 1 of Unbind is a view and is being modified inplace"),
        "{e}"
    );
    // Each slice's gradient lands in its own column.
    let xl = ramp(&[2, 3]).requires_grad().unwrap();
    let parts = xl.unbind(1).unwrap();
    let l = parts[0]
        .sum_all()
        .unwrap()
        .add(&parts[2].mul_scalar(3.0).unwrap().sum_all().unwrap())
        .unwrap();
    let g = l.backward().unwrap();
    assert_eq!(
        vals(g.get(&xl).unwrap()),
        vec![1.0, 0.0, 3.0, 1.0, 0.0, 3.0]
    );

    // movedim as PyTorch's: [2, 3, 4, 5] with (3, 0) -> (1, 3) is [3, 5, 4, 2].
    let x4 = ramp(&[2, 3, 4, 5]);
    let m = x4.movedim(&[3, 0], &[1, 3]).unwrap();
    assert_eq!(m.shape(), &[3, 5, 4, 2]);
    assert!(m.shares_storage(&x4));
    let want = gather_ref(&[2, 3, 4, 5], &[3, 5, 4, 2], |i| {
        vec![i[3], i[0], i[2], i[1]]
    });
    assert_eq!(vals(&m), want);
    assert_eq!(
        ramp(&[2, 3, 4]).movedim(&[0, 2], &[2, 0]).unwrap().shape(),
        &[4, 3, 2]
    );
    assert_eq!(ramp(&[2, 3]).movedim(&[-1], &[0]).unwrap().shape(), &[3, 2]);
    assert_eq!(
        ramp(&[]).movedim(&[0], &[-1]).unwrap().shape(),
        &[] as &[usize]
    );
    let x3 = ramp(&[2, 3, 4]);
    assert!(err(x3.movedim(&[0, 1], &[0])).contains(
        "movedim: Invalid source or destination dims: source ([0, 1] dims) should contain the \
         same number of dims as destination ([0] dims)"
    ));
    assert!(
        err(x3.movedim(&[0, 0], &[1, 2])).contains("movedim: repeated dim in `source` ([0, 0])")
    );
    assert!(err(x3.movedim(&[0, 1], &[2, -1]))
        .contains("movedim: repeated dim in `destination` ([2, -1])"));
    assert!(!err(x3.movedim(&[0, 0], &[1, 2])).contains("movedim: movedim"));
    assert!(err(x3.movedim(&[0], &[-4]))
        .contains("Dimension out of range (expected to be in range of [-3, 2], but got -4)"));
}

#[test]
fn repeat_tiles_and_sums_its_gradient() {
    let x = ramp(&[2, 3]);
    let y = x.repeat(&[2, 1, 2]).unwrap();
    assert_eq!(y.shape(), &[2, 2, 6]);
    let want = gather_ref(&[2, 3], &[2, 2, 6], |i| vec![i[1] % 2, i[2] % 3]);
    assert_eq!(vals(&y), want);
    // A strided input, and repeats of one: still a new tensor.
    let xt = x.t().unwrap();
    let want = gather_ref(&[2, 3], &[3, 4], |i| vec![i[1] % 2, i[0]]);
    assert_eq!(vals(&xt.repeat(&[1, 2]).unwrap()), want);
    let same = x.repeat(&[1, 1]).unwrap();
    assert!(!same.shares_storage(&x));
    assert_eq!(vals(&same), vals(&x));
    assert_eq!(x.repeat(&[1, 0]).unwrap().shape(), &[2, 0]);
    assert_eq!(ramp(&[]).repeat(&[]).unwrap().shape(), &[] as &[usize]);
    assert_eq!(vals(&ramp(&[]).repeat(&[3]).unwrap()), vec![0.0; 3]);
    // More repeats than half the largest rank (a gather per dim), PyTorch's shape and values.
    let r5 = x.repeat(&[1, 1, 1, 2, 2]).unwrap();
    assert_eq!(r5.shape(), &[1, 1, 1, 4, 6]);
    let want = gather_ref(&[2, 3], &[1, 1, 1, 4, 6], |i| vec![i[3] % 2, i[4] % 3]);
    assert_eq!(vals(&r5), want);
    assert_eq!(
        x.repeat(&[1, 1, 2, 0, 1]).unwrap().shape(),
        &[1, 1, 2, 0, 3]
    );
    let xl5 = ramp(&[2, 3]).requires_grad().unwrap();
    let g = xl5.repeat(&[1, 1, 3, 1, 2]).unwrap().sum_all().unwrap();
    assert_eq!(vals(g.backward().unwrap().get(&xl5).unwrap()), vec![6.0; 6]);
    assert!(err(ramp(&[2, 3, 4]).repeat(&[2, 2])).contains(
        "Number of dimensions of repeat dims can not be smaller than number of dimensions of \
         tensor"
    ));
    // i32 and f16 data tile alike.
    let xi = Tensor::from_slice(dev(), &[7i32, -2], &[2]).unwrap();
    assert_eq!(
        xi.repeat(&[3]).unwrap().to_vec::<i32>().unwrap(),
        vec![7, -2, 7, -2, 7, -2]
    );
    if dev().supports_f16() {
        let h = x.to_dtype(DType::F16).unwrap().repeat(&[2, 1]).unwrap();
        assert_eq!(h.dtype(), DType::F16);
        assert_eq!(vals(&h), [vals(&x), vals(&x)].concat());
    }
    // Each entry's gradient sums its copies: 2 x 2 = 4 copies, weighted by position.
    let xl = ramp(&[2, 3]).requires_grad().unwrap();
    let w = ramp(&[2, 2, 6]);
    let g = xl
        .repeat(&[2, 1, 2])
        .unwrap()
        .mul(&w)
        .unwrap()
        .sum_all()
        .unwrap();
    let g = g.backward().unwrap();
    let mut want = vec![0.0f32; 6];
    for (flat, wv) in vals(&w).iter().enumerate() {
        let (b, j) = ((flat / 6) % 2, flat % 6);
        want[b * 3 + j % 3] += wv;
    }
    assert_eq!(vals(g.get(&xl).unwrap()), want);
}

#[test]
fn flip_reverses_dims_and_its_gradient() {
    let x = ramp(&[2, 3, 4]);
    let y = x.flip(&[0, -1]).unwrap();
    let want = gather_ref(&[2, 3, 4], &[2, 3, 4], |i| vec![1 - i[0], i[1], 3 - i[2]]);
    assert_eq!(vals(&y), want);
    // A strided input (a transposed view).
    let xt = ramp(&[3, 4]).t().unwrap();
    let want = gather_ref(&[3, 4], &[4, 3], |i| vec![2 - i[1], i[0]]);
    assert_eq!(vals(&xt.flip(&[1]).unwrap()), want);
    // No dims, 0-d and size-1 dims: a copy.
    for (t, dims) in [
        (x.clone(), &[][..]),
        (ramp(&[]), &[0]),
        (ramp(&[1, 3]), &[0]),
    ] {
        let c = t.flip(dims).unwrap();
        assert!(!c.shares_storage(&t));
        assert_eq!(vals(&c), vals(&t));
    }
    assert_eq!(ramp(&[0, 3]).flip(&[0, 1]).unwrap().shape(), &[0, 3]);
    assert!(err(x.flip(&[0, -3])).contains("dim 0 appears multiple times in the list of dims"));
    // Entry by entry: the repeat before the dim out of range after it.
    assert!(err(x.flip(&[0, 0, 3])).contains("dim 0 appears multiple times in the list of dims"));
    assert!(err(x.flip(&[0, 3, 0]))
        .contains("Dimension out of range (expected to be in range of [-3, 2], but got 3)"));
    // An empty tensor with a long dim: a copy, no index built.
    let long = Tensor::zeros(dev(), &[0, 1 << 31], DType::F32).unwrap();
    assert_eq!(long.flip(&[1]).unwrap().shape(), &[0, 1 << 31]);
    assert_eq!(long.tril(0).unwrap().shape(), &[0, 1 << 31]);
    let xi = Tensor::from_slice(dev(), &[1i32, 2, 3], &[3]).unwrap();
    assert_eq!(
        xi.flip(&[0]).unwrap().to_vec::<i32>().unwrap(),
        vec![3, 2, 1]
    );
    // The gradient flows back reversed.
    let xl = ramp(&[2, 3]).requires_grad().unwrap();
    let w = ramp(&[2, 3]);
    let g = xl.flip(&[1]).unwrap().mul(&w).unwrap().sum_all().unwrap();
    let g = g.backward().unwrap();
    assert_eq!(
        vals(g.get(&xl).unwrap()),
        vec![2.0, 1.0, 0.0, 5.0, 4.0, 3.0]
    );
}

#[test]
fn roll_wraps_entries_round() {
    let x = ramp(&[3, 4]);
    for (shifts, dims) in [
        (&[1i64][..], &[1isize][..]),
        (&[-5], &[1]),
        (&[2, 7], &[0, -1]),
        (&[1, 1], &[1, 1]),
        (&[0], &[0]),
    ] {
        let mut total = [0i64; 2];
        for (&s, &d) in shifts.iter().zip(dims) {
            total[d.rem_euclid(2) as usize] += s;
        }
        let want = gather_ref(&[3, 4], &[3, 4], |i| {
            (0..2)
                .map(|d| (i[d] as i64 - total[d]).rem_euclid([3, 4][d]) as usize)
                .collect()
        });
        let y = x.roll(shifts, dims).unwrap();
        assert!(!y.shares_storage(&x));
        assert_eq!(vals(&y), want, "{shifts:?} {dims:?}");
    }
    // PyTorch's printed value for two rolls of one dim.
    let r = ramp(&[2, 3]).roll(&[1, 1], &[1, 1]).unwrap();
    assert_eq!(vals(&r), vec![1.0, 2.0, 0.0, 4.0, 5.0, 3.0]);
    // No dims: the flat order rolls, the shape stays.
    let f = x.t().unwrap().roll(&[3], &[]).unwrap();
    assert_eq!(f.shape(), &[4, 3]);
    let flat = vals(&x.t().unwrap());
    let want: Vec<f32> = (0..12).map(|i| flat[(i + 12 - 3) % 12]).collect();
    assert_eq!(vals(&f), want);
    assert_eq!(vals(&ramp(&[]).roll(&[4], &[]).unwrap()), vec![0.0]);
    assert_eq!(ramp(&[0, 3]).roll(&[1], &[0]).unwrap().shape(), &[0, 3]);
    // An empty tensor rolls to its copy before any dim is read, as PyTorch's roll.
    assert_eq!(ramp(&[0, 3]).roll(&[1], &[7]).unwrap().shape(), &[0, 3]);
    assert_eq!(
        ramp(&[0, 3]).roll(&[1, 1], &[0, 9]).unwrap().shape(),
        &[0, 3]
    );
    assert!(
        err(x.roll(&[1, 2], &[0])).contains("shifts and dimensions must align. shifts: 2, dims:1")
    );
    assert!(
        err(x.roll(&[1, 2], &[])).contains("shifts and dimensions must align. shifts: 2, dims:0")
    );
    assert!(err(x.roll(&[], &[])).contains("`shifts` required"));
    assert!(err(x.roll(&[1], &[2]))
        .contains("Dimension out of range (expected to be in range of [-2, 1], but got 2)"));
    assert!(err(ramp(&[]).roll(&[1], &[0]))
        .contains("Dimension specified as 0 but tensor has no dimensions"));
    // The gradient rolls back.
    let xl = ramp(&[4]).requires_grad().unwrap();
    let w = ramp(&[4]);
    let g = xl
        .roll(&[1], &[0])
        .unwrap()
        .mul(&w)
        .unwrap()
        .sum_all()
        .unwrap();
    let g = g.backward().unwrap();
    assert_eq!(vals(g.get(&xl).unwrap()), vec![1.0, 2.0, 3.0, 0.0]);
}

#[test]
fn tril_and_triu_keep_their_triangles() {
    let x = ramp(&[3, 4]);
    // PyTorch's printed values.
    assert_eq!(
        vals(&x.tril(-1).unwrap()),
        vec![0.0, 0.0, 0.0, 0.0, 4.0, 0.0, 0.0, 0.0, 8.0, 9.0, 0.0, 0.0]
    );
    assert_eq!(
        vals(&x.triu(2).unwrap()),
        vec![0.0, 0.0, 2.0, 3.0, 0.0, 0.0, 0.0, 7.0, 0.0, 0.0, 0.0, 0.0]
    );
    // Every diagonal, a batch, past either side, strided, against the definition.
    let xb = ramp(&[2, 3, 4]);
    for k in [-4i64, -3, -1, 0, 1, 3, 4, i64::MIN, i64::MAX] {
        for lower in [true, false] {
            let y = if lower { xb.tril(k) } else { xb.triu(k) }.unwrap();
            let want: Vec<f32> = (0..24)
                .map(|f| {
                    let (i, j) = ((f / 4) % 3, f % 4);
                    let d = j as i128 - i as i128;
                    let keep = if lower {
                        d <= k as i128
                    } else {
                        d >= k as i128
                    };
                    if keep {
                        f as f32
                    } else {
                        0.0
                    }
                })
                .collect();
            assert_eq!(vals(&y), want, "k {k} lower {lower}");
        }
    }
    let xt = ramp(&[4, 3]).t().unwrap();
    let want = gather_ref(&[4, 3], &[3, 4], |i| vec![i[1], i[0]]);
    let keep: Vec<f32> = want
        .iter()
        .enumerate()
        .map(|(f, &v)| if f % 4 <= f / 4 { v } else { 0.0 })
        .collect();
    assert_eq!(vals(&xt.tril(0).unwrap()), keep);
    // NaN outside the triangle is 0, as PyTorch's.
    let n = Tensor::from_slice(dev(), &[1.0f32, f32::NAN, 2.0, 3.0], &[2, 2]).unwrap();
    assert_eq!(vals(&n.tril(0).unwrap()), vec![1.0, 0.0, 2.0, 3.0]);
    let xi = Tensor::from_slice(dev(), &[1i32, 2, 3, 4], &[2, 2]).unwrap();
    let ti = xi.triu(0).unwrap();
    assert_eq!(ti.dtype(), DType::I32);
    assert_eq!(ti.to_vec::<i32>().unwrap(), vec![1, 2, 0, 4]);
    assert_eq!(ramp(&[0, 3]).tril(0).unwrap().shape(), &[0, 3]);
    assert!(err(ramp(&[3]).tril(0)).contains("tril: input tensor must have at least 2 dimensions"));
    assert!(!err(ramp(&[3]).tril(0)).contains("tril: tril"));
    // repeat names itself past the largest rank and for a result too large to index.
    assert!(err(ramp(&[1]).repeat(&[1; 9])).starts_with("repeat:"));
    assert!(err(ramp(&[1]).repeat(&[1 << 16, 1 << 16])).starts_with("repeat:"));
    assert!(err(ramp(&[]).triu(0)).contains("triu: input tensor must have at least 2 dimensions"));
    // The gradient passes inside the triangle only.
    let xl = ramp(&[2, 2]).requires_grad().unwrap();
    let g = xl.triu(1).unwrap().sum_all().unwrap().backward().unwrap();
    assert_eq!(vals(g.get(&xl).unwrap()), vec![0.0, 1.0, 0.0, 0.0]);
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    fn dims(rank: usize) -> impl Strategy<Value = Vec<isize>> {
        proptest::collection::vec(-(rank as isize) - 1..=(rank as isize), 0..3)
    }

    /// Every call on random shapes (empty dims, 0-d) and arguments (out-of-range and repeated
    /// dims, large shifts and diagonals) is right against the definitions or an error naming
    /// the op; never a panic.
    #[test]
    fn random_calls_are_right_or_name_the_op() {
        let cfg = ProptestConfig {
            cases: 256,
            failure_persistence: None,
            ..ProptestConfig::default()
        };
        let strat = (
            proptest::collection::vec(0usize..4, 0..4),
            0usize..5,
            dims(3),
            proptest::collection::vec(-9i64..9, 0..3),
            proptest::collection::vec(0usize..3, 0..5),
            -5i64..5,
        );
        proptest!(cfg, |((shape, which, ds, shifts, reps, k) in strat)| {
            let x = ramp(&shape);
            let rank = shape.len();
            let norm = |d: isize| -> Option<usize> {
                let r = rank.max(1) as isize;
                let d = if d < 0 { d + r } else { d };
                (0..r).contains(&d).then_some(d as usize)
            };
            let (name, got, want): (&str, _, Option<Vec<f32>>) = match which {
                0 => {
                    let ok: Option<Vec<usize>> = ds.iter().map(|&d| norm(d)).collect();
                    let distinct = ok.as_ref().is_some_and(|v| {
                        (0..v.len()).all(|i| !v[..i].contains(&v[i]))
                    });
                    let want = (ok.is_some() && distinct).then(|| {
                        let v = ok.unwrap();
                        gather_ref(&shape, &shape, |i| {
                            i.iter()
                                .enumerate()
                                .map(|(d, &j)| if v.contains(&d) { shape[d] - 1 - j } else { j })
                                .collect()
                        })
                    });
                    ("flip", x.flip(&ds), want)
                }
                1 => {
                    let want = if shifts.is_empty() {
                        None
                    } else if ds.is_empty() {
                        (shifts.len() == 1).then(|| {
                            let flat = vals(&x);
                            let n = flat.len() as i64;
                            (0..n)
                                .map(|i| flat[(i - shifts[0]).rem_euclid(n.max(1)) as usize])
                                .collect()
                        })
                    } else if shifts.len() != ds.len() {
                        None
                    } else if shape.contains(&0) {
                        // An empty tensor's copy, before any dim is read (PyTorch's roll).
                        Some(Vec::new())
                    } else if rank == 0 {
                        None
                    } else {
                        let ok: Option<Vec<usize>> = ds.iter().map(|&d| norm(d)).collect();
                        ok.map(|v| {
                            let mut total = vec![0i64; rank];
                            for (&d, &s) in v.iter().zip(&shifts) {
                                total[d] += s;
                            }
                            gather_ref(&shape, &shape, |i| {
                                (0..rank)
                                    .map(|d| {
                                        let n = shape[d] as i64;
                                        (i[d] as i64 - total[d]).rem_euclid(n.max(1)) as usize
                                    })
                                    .collect()
                            })
                        })
                    };
                    ("roll", x.roll(&shifts, &ds), want)
                }
                2 => {
                    let m = reps.len();
                    let want = (m >= rank).then(|| {
                        let mut padded = vec![1; m - rank];
                        padded.extend(&shape);
                        let out: Vec<usize> = padded.iter().zip(&reps).map(|(s, r)| s * r).collect();
                        gather_ref(&shape, &out, |i| {
                            (m - rank..m).map(|d| i[d] % padded[d]).collect()
                        })
                    });
                    ("repeat", x.repeat(&reps), want)
                }
                3 => {
                    let want = (rank >= 2).then(|| {
                        let (r, c) = (shape[rank - 2], shape[rank - 1]);
                        (0..x.numel())
                            .map(|f| {
                                let (i, j) = ((f / c.max(1)) % r.max(1), f % c.max(1));
                                if (j as i64) - (i as i64) <= k { f as f32 } else { 0.0 }
                            })
                            .collect()
                    });
                    ("tril", x.tril(k), want)
                }
                _ => {
                    let d = ds.first().copied().unwrap_or(0);
                    let want = match (rank, norm(d)) {
                        (0, _) | (_, None) => None,
                        (_, Some(d)) => Some(
                            (0..shape[d])
                                .flat_map(|j| {
                                    let mut out = shape.clone();
                                    out.remove(d);
                                    gather_ref(&shape, &out, |i| {
                                        let mut src = i.to_vec();
                                        src.insert(d, j);
                                        src
                                    })
                                })
                                .collect(),
                        ),
                    };
                    let got = x
                        .unbind(d)
                        .and_then(|ps| ps.iter().map(|p| p.contiguous()).collect::<Result<Vec<_>, _>>())
                        .map(|ps| {
                            let flat: Vec<f32> = ps.iter().flat_map(vals).collect();
                            Tensor::from_slice(dev(), &flat, &[flat.len()]).unwrap()
                        });
                    ("unbind", got, want)
                }
            };
            match (got, want) {
                (Ok(t), Some(w)) => prop_assert_eq!(vals(&t), w, "{} {:?}", name, shape),
                (Ok(t), None) => prop_assert!(false, "{name} {shape:?}: expected an error, got {:?}", t.shape()),
                (Err(e), Some(_)) => prop_assert!(false, "{name} {shape:?}: {e}"),
                (Err(e), None) => prop_assert!(e.to_string().starts_with(&format!("{name}:")), "{e}"),
            }
        });
    }
}
