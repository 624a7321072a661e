//! GEMM runtime behaviour, on private devices so that the pool and dispatch counters see only
//! this test's work: the split-k workspace comes from the pool and is reused (no pool growth
//! over 100 calls after a warm-up), split-k records exactly two dispatches (partial GEMMs and
//! the fixed-order reduction), and transposed or broadcast operands are read through their
//! strides (one dispatch, no copies).
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use wgtensor::ops::gemm::plan;
use wgtensor::ops::{gemm, Activation, Bias, GemmOptions};
use wgtensor::{DType, Device, DeviceOptions, Tensor};

/// A fresh device; `portable` disables subgroups (the `tiled` kernel instead of `sg8`).
fn device(portable: bool) -> Device {
    Device::with_options(DeviceOptions {
        disable_subgroups: portable,
        ..Default::default()
    })
    .expect("no wgpu adapter")
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let x = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed);
            (x >> 8) as f32 / (1u32 << 23) as f32 - 1.0
        })
        .collect()
}

fn upload(dev: &Device, shape: &[usize], seed: u32) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_slice(dev, &values(n, seed), shape).expect("upload")
}

/// After a warm-up with the same call pattern, 100 split-k GEMMs (results dropped, `sync`
/// every `sync_every` calls or only at the end) create no buffer: no pool misses, the same
/// peak and live bytes; every call's workspace and output come from the cache.
fn workspace_reused(portable: bool, sync_every: Option<usize>) {
    let dev = device(portable);
    let (m, n, k) = (16, 24, 8192);
    let pl = plan(&dev, m, n, k, 1, None).unwrap();
    assert!(
        pl.splits > 1,
        "[{m} x {k}] x [{k} x {n}] does not split: {pl:?}"
    );
    assert!(
        !(portable && pl.sg8()),
        "the portable device planned {pl:?}"
    );
    let a = upload(&dev, &[m, k], 1);
    let b = upload(&dev, &[k, n], 2);
    let bias = upload(&dev, &[n], 3);
    let opts = GemmOptions {
        bias: Some(Bias::PerColumn(&bias)),
        activation: Activation::Relu,
        ..Default::default()
    };
    let calls = |count: usize| {
        for i in 1..=count {
            drop(gemm(&a, &b, &opts).expect("gemm"));
            if sync_every.is_some_and(|s| i % s == 0) {
                dev.sync().expect("sync");
            }
        }
        dev.sync().expect("sync");
    };
    let reference = gemm(&a, &b, &opts).unwrap().to_vec::<f32>().unwrap();
    calls(100);
    let before = dev.stats();
    calls(100);
    let after = dev.stats();
    let last = gemm(&a, &b, &opts).unwrap().to_vec::<f32>().unwrap();
    println!(
        "split-k x100 ({}, sync every {sync_every:?}): {pl:?} before {:?} after {:?}",
        if portable { "tiled" } else { "sg8" },
        before.pool,
        after.pool
    );
    assert_eq!(
        after.pool.misses, before.pool.misses,
        "buffers were created after the warm-up"
    );
    assert_eq!(after.pool.peak_bytes, before.pool.peak_bytes, "pool grew");
    assert_eq!(
        after.pool.live_bytes, before.pool.live_bytes,
        "live bytes leaked"
    );
    // Workspace + output per call, at least (param arenas come from the pool too).
    assert!(
        after.pool.hits >= before.pool.hits + 200,
        "only {} pool hits for 100 calls",
        after.pool.hits - before.pool.hits
    );
    assert_eq!(after.dispatches - before.dispatches, 200);
    // Reusing the workspace does not change the result.
    assert!(
        last.iter()
            .zip(&reference)
            .all(|(x, y)| x.to_bits() == y.to_bits()),
        "result changed after 200 calls"
    );
}

#[test]
fn splitk_workspace_reused_periodic_sync() {
    workspace_reused(false, Some(10));
}

#[test]
fn splitk_workspace_reused_final_sync() {
    workspace_reused(false, None);
}

#[test]
fn splitk_tiled_workspace_reused_periodic_sync() {
    workspace_reused(true, Some(10));
}

#[test]
fn splitk_tiled_workspace_reused_final_sync() {
    workspace_reused(true, None);
}

/// Split-k is two dispatches (partials, then the reduction with the epilogue), S = 1 one.
#[test]
fn splitk_dispatch_counts() {
    for portable in [false, true] {
        let dev = device(portable);
        let a = upload(&dev, &[8, 4096], 1);
        let b = upload(&dev, &[4096, 8], 2);
        for (split_k, want) in [(None, 2), (Some(1), 1), (Some(3), 2)] {
            let before = dev.stats().dispatches;
            let opts = GemmOptions {
                split_k,
                ..Default::default()
            };
            let y = gemm(&a, &b, &opts).unwrap();
            assert_eq!(
                dev.stats().dispatches - before,
                want,
                "split_k {split_k:?}: {:?}",
                plan(&dev, 8, 8, 4096, 1, split_k).unwrap()
            );
            drop(y);
        }
    }
}

/// Transposed operands, a broadcast batch (`[4,1,m,k] x [1,3,k,n]`), a stride-0 broadcast view,
/// a sliced batch and a broadcast C are consumed through their strides: one dispatch and as
/// many pool allocations as the same GEMM on contiguous copies (the output and the batch's
/// param arena), i.e. no hidden copies.
#[test]
fn views_are_read_in_place() {
    for portable in [false, true] {
        let dev = device(portable);
        let (m, n, k) = (20, 12, 36);
        let at = upload(&dev, &[4, 1, k, m], 1).transpose(-1, -2).unwrap();
        let bt = upload(&dev, &[1, 3, n, k], 2).transpose(-1, -2).unwrap();
        let b_bcast = upload(&dev, &[k, n], 3)
            .broadcast_to(&[4, 3, k, n])
            .unwrap();
        let a_sliced = at.narrow(0, 1, 2).unwrap();
        let c_row = upload(&dev, &[n], 4);
        let bias = upload(&dev, &[m], 5);
        let with_epilogue = GemmOptions {
            c: Some(&c_row),
            bias: Some(Bias::PerRow(&bias)),
            activation: Activation::Gelu,
            ..Default::default()
        };
        let cases: [(&Tensor, &Tensor, GemmOptions); 3] = [
            (&at, &bt, GemmOptions::default()),
            (&at, &b_bcast, with_epilogue),
            (&a_sliced, &bt, with_epilogue),
        ];
        // (dispatches, pool allocations) of one GEMM recorded into a fresh batch.
        let cost = |a: &Tensor, b: &Tensor, opts: &GemmOptions| {
            dev.sync().unwrap();
            let before = dev.stats();
            let y = gemm(a, b, opts).unwrap();
            let after = dev.stats();
            drop(y);
            let allocs = |s: &wgtensor::DeviceStats| s.pool.hits + s.pool.misses;
            (
                after.dispatches - before.dispatches,
                allocs(&after) - allocs(&before),
            )
        };
        for (a, b, opts) in cases {
            let (ac, bc) = (a.contiguous().unwrap(), b.contiguous().unwrap());
            let packed = cost(&ac, &bc, &opts);
            let views = cost(a, b, &opts);
            assert_eq!(packed.0, 1);
            assert_eq!(
                views,
                packed,
                "(dispatches, allocations) for views {:?} {:?} x {:?} {:?}, vs contiguous",
                a.shape(),
                a.strides(),
                b.shape(),
                b.strides()
            );
        }
    }
}

/// `gemm_with_kernel` runs each forced kernel on this adapter (the GPU tiles on lavapipe
/// too) with the planner's split: small-integer operands with a transposed B, a bias and a
/// ragged 200 x 150 x 40 shape, unsplit and split 3 ways, give the exact f64 reference on
/// every kernel (the 128-row tiles in f16 too), each first call compiling that kernel's
/// pipeline; a kernel the adapter lacks is refused, naming it.
#[test]
fn forced_kernels_match_the_reference() {
    use wgtensor::ops::gemm::{gemm_with_kernel, GemmKernel};
    let dev = device(false);
    let (m, n, k) = (200usize, 150usize, 40usize);
    let ints = |len: usize, seed: usize| -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7 + seed) % 9) as f32 - 4.0)
            .collect()
    };
    let (av, bv, biasv) = (ints(m * k, 1), ints(n * k, 5), ints(n, 3));
    let a = Tensor::from_slice(&dev, &av, &[m, k]).unwrap();
    let bt = Tensor::from_slice(&dev, &bv, &[n, k]).unwrap();
    let bias = Tensor::from_slice(&dev, &biasv, &[n]).unwrap();
    let b = bt.transpose(0, 1).unwrap();
    let want: Vec<f32> = (0..m * n)
        .map(|e| {
            let (i, j) = (e / n, e % n);
            let dot: f64 = (0..k)
                .map(|q| av[i * k + q] as f64 * bv[j * k + q] as f64)
                .sum();
            (2.0 * dot + biasv[j] as f64) as f32
        })
        .collect();
    let mut kernels = vec![
        GemmKernel::Tiled,
        GemmKernel::WgTiled,
        GemmKernel::WgTiled128,
        GemmKernel::WgTiled128x128,
    ];
    if dev.caps().sg8 {
        kernels.push(GemmKernel::Sg8);
    } else {
        let e = gemm_with_kernel(&a, &b, &GemmOptions::default(), GemmKernel::Sg8).unwrap_err();
        assert!(e.to_string().contains("Sg8"), "{e}");
    }
    // Each kernel, unsplit and split, on operands of `dtype` against the exact reference.
    let check = |dtype: DType, kernels: &[GemmKernel]| {
        let cast = |t: &Tensor| t.to_dtype(dtype).unwrap();
        let (a, b, bias) = (cast(&a), cast(&b), cast(&bias));
        for &kernel in kernels {
            for split_k in [None, Some(3)] {
                let o = GemmOptions {
                    alpha: 2.0,
                    bias: Some(Bias::PerColumn(&bias)),
                    split_k,
                    ..Default::default()
                };
                let got = gemm_with_kernel(&a, &b, &o, kernel).unwrap();
                assert_eq!(
                    got.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap(),
                    want,
                    "{dtype:?} {kernel:?}, split {split_k:?}"
                );
            }
        }
    };
    check(DType::F32, &kernels);
    // The large tiles in f16 too (the products are small integers, exact in f16 and in the
    // kernels' f32 sums), split and not: the 128 x 128 tile no plan takes keeps a check.
    if dev.supports_f16() {
        check(
            DType::F16,
            &[GemmKernel::WgTiled128, GemmKernel::WgTiled128x128],
        );
    }
    if !dev.caps().coop16 {
        let e = gemm_with_kernel(&a, &b, &GemmOptions::default(), GemmKernel::Coop16);
        assert!(e.unwrap_err().to_string().contains("Coop16"));
    }
}

/// Host product of batched [.., m, k] x [.., k, n] (both packed, same batch, or `b` one
/// matrix shared by every batch entry).
fn host_bmm(
    a: &[f32],
    b: &[f32],
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    b_shared: bool,
) -> Vec<f32> {
    let mut out = vec![0.0f32; batch * m * n];
    for z in 0..batch {
        let bb = if b_shared { 0 } else { z * k * n };
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0f64;
                for l in 0..k {
                    s += a[z * m * k + i * k + l] as f64 * b[bb + l * n + j] as f64;
                }
                out[z * m * n + i * n + j] = s as f32;
            }
        }
    }
    out
}

fn close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 * w.abs().max(1.0),
            "{what}[{i}]: {g} vs {w}"
        );
    }
}

/// A batch whose workgroup grid passes the adapter's 65535 on z (PyTorch runs such batches
/// of small matrices) runs in chunks: one batch dim, two batch dims (chunks of whole inner
/// runs; chunks of the inner dim when it alone passes the limit), a shared B, C with beta,
/// and in place.
#[test]
fn batches_past_the_grid_limit() {
    let dev = device(false);
    let max = dev.limits().max_compute_workgroups_per_dimension as usize;
    let nb = max + 4467;
    let (m, k, n) = (2, 3, 2);
    let av = values(nb * m * k, 1);
    let bv = values(nb * k * n, 2);
    let a = Tensor::from_slice(&dev, &av, &[nb, m, k]).unwrap();
    let b = Tensor::from_slice(&dev, &bv, &[nb, k, n]).unwrap();
    let want = host_bmm(&av, &bv, nb, m, k, n, false);
    let y = a.matmul(&b).unwrap();
    close(&y.to_vec::<f32>().unwrap(), &want, "bmm");
    // Two batch dims that do not merge (B's are transposed), chunked along the outer one.
    let (o, i) = (nb.div_ceil(300), 300);
    let nb2 = o * i;
    let a2v = values(nb2 * m * k, 3);
    let b2v = values(nb2 * k * n, 4);
    let a2 = Tensor::from_slice(&dev, &a2v, &[o, i, m, k]).unwrap();
    let b2t: Vec<f32> = (0..nb2 * k * n)
        .map(|e| {
            // Stored [i, o, k, n]: entry (oo, ii) at (ii * o + oo).
            let (ii, rest) = (e / (o * k * n), e % (o * k * n));
            let (oo, kn) = (rest / (k * n), rest % (k * n));
            b2v[(oo * i + ii) * k * n + kn]
        })
        .collect();
    let b2 = Tensor::from_slice(&dev, &b2t, &[i, o, k, n])
        .unwrap()
        .transpose(0, 1)
        .unwrap();
    let want2 = host_bmm(&a2v, &b2v, nb2, m, k, n, false);
    close(
        &a2.matmul(&b2).unwrap().to_vec::<f32>().unwrap(),
        &want2,
        "4-D",
    );
    // Batch dims that cannot merge (B broadcast over the outer one) whose inner dim alone
    // passes the limit: chunks of the inner dim, once per outer index.
    let a3v = values(2 * nb * m * k, 6);
    let a3 = Tensor::from_slice(&dev, &a3v, &[2, nb, m, k]).unwrap();
    let mut want4 = host_bmm(&a3v[..nb * m * k], &bv, nb, m, k, n, false);
    want4.extend(host_bmm(&a3v[nb * m * k..], &bv, nb, m, k, n, false));
    close(
        &a3.matmul(&b).unwrap().to_vec::<f32>().unwrap(),
        &want4,
        "inner dim chunks",
    );
    // One B for the whole batch, C added with beta (a split-k request: the planner keeps one
    // slice where the batch alone fills z).
    let bs = Tensor::from_slice(&dev, &bv[..k * n], &[k, n]).unwrap();
    let shared = host_bmm(&av, &bv[..k * n], nb, m, k, n, true);
    let cv = values(nb * m * n, 5);
    let c = Tensor::from_slice(&dev, &cv, &[nb, m, n]).unwrap();
    let y = gemm(
        &a,
        &bs,
        &GemmOptions {
            split_k: Some(3),
            beta: 0.5,
            c: Some(&c),
            ..Default::default()
        },
    )
    .unwrap();
    let want3: Vec<f32> = shared.iter().zip(&cv).map(|(p, c)| p + 0.5 * c).collect();
    close(&y.to_vec::<f32>().unwrap(), &want3, "split-k with C");
    // In place: c = a b + 0.5 c.
    wgtensor::ops::gemm_into(&c, &a, &bs, 1.0, 0.5).unwrap();
    close(&c.to_vec::<f32>().unwrap(), &want3, "in place");
}

/// One product whose row tiles pass the adapter's 65535 on the grid (a linear layer over
/// millions of rows, as PyTorch runs) goes in windows of rows: the plain product, and a
/// per-row bias with a fused relu, whose offsets move with each window. 128 rows a tile (the
/// largest) times the limit, plus a ragged rest, pass the limit for every tile.
#[test]
fn rows_past_the_grid_limit() {
    let dev = device(false);
    let max = dev.limits().max_compute_workgroups_per_dimension as usize;
    let (m, k, n) = (max * 128 + 77, 2, 3);
    let av = values(m * k, 7);
    let bv = values(k * n, 8);
    let rv = values(m, 9);
    let a = Tensor::from_slice(&dev, &av, &[m, k]).unwrap();
    let b = Tensor::from_slice(&dev, &bv, &[k, n]).unwrap();
    let rb = Tensor::from_slice(&dev, &rv, &[m]).unwrap();
    let want = host_bmm(&av, &bv, 1, m, k, n, false);
    close(
        &a.matmul(&b).unwrap().to_vec::<f32>().unwrap(),
        &want,
        "product",
    );
    let y = gemm(
        &a,
        &b,
        &GemmOptions {
            bias: Some(Bias::PerRow(&rb)),
            activation: Activation::Relu,
            ..Default::default()
        },
    )
    .unwrap();
    let want: Vec<f32> = want
        .iter()
        .enumerate()
        .map(|(i, &v)| (v + rv[i / n]).max(0.0))
        .collect();
    close(&y.to_vec::<f32>().unwrap(), &want, "per-row bias, relu");
    // C with beta, then in place (C's own rows are the output's).
    let cv = values(m * n, 10);
    let c = Tensor::from_slice(&dev, &cv, &[m, n]).unwrap();
    let plain = host_bmm(&av, &bv, 1, m, k, n, false);
    let want: Vec<f32> = plain.iter().zip(&cv).map(|(p, c)| p + 0.5 * c).collect();
    let y = gemm(
        &a,
        &b,
        &GemmOptions {
            c: Some(&c),
            beta: 0.5,
            ..Default::default()
        },
    )
    .unwrap();
    close(&y.to_vec::<f32>().unwrap(), &want, "C with beta");
    wgtensor::ops::gemm_into(&c, &a, &b, 1.0, 0.5).unwrap();
    close(&c.to_vec::<f32>().unwrap(), &want, "in place");
    drop((y, c));
    // A batch of two such products (B shared): windows per batch entry.
    let (m2, n2) = (max * 128 + 5, 2);
    let a2v = values(2 * m2, 11);
    let b2v = values(n2, 12);
    let a2 = Tensor::from_slice(&dev, &a2v, &[2, m2, 1]).unwrap();
    let b2 = Tensor::from_slice(&dev, &b2v, &[1, n2]).unwrap();
    let want = host_bmm(&a2v, &b2v, 2, m2, 1, n2, true);
    close(
        &a2.matmul(&b2).unwrap().to_vec::<f32>().unwrap(),
        &want,
        "batched",
    );
}

/// The weight gradient of a product over more rows than one GEMM's longest K (2^24) sums the
/// products of row chunks in order (a linear layer over 2^24 + 3 rows): the forward runs in
/// row windows, the backward as PyTorch computes it instead of refusing K.
#[test]
fn weight_gradient_over_more_rows_than_the_longest_k() {
    let dev = device(false);
    let m = (1usize << 24) + 3;
    let av: Vec<f32> = (0..m).map(|i| ((i % 7) as f32) * 0.25 - 0.5).collect();
    let a = Tensor::from_slice(&dev, &av, &[m, 1]).unwrap();
    let w = Tensor::from_slice(&dev, &[2.0f32], &[1, 1])
        .unwrap()
        .requires_grad()
        .unwrap();
    // d(sum(a w))/dw = sum(a): small multiples of 0.25, exact in f32 partial sums.
    let g = a.matmul(&w).unwrap().sum_all().unwrap().backward().unwrap();
    let want: f64 = av.iter().map(|&v| f64::from(v)).sum();
    let got = f64::from(g.get(&w).unwrap().to_vec::<f32>().unwrap()[0]);
    assert!(
        (got - want).abs() <= 1e-6 * want.abs().max(1.0),
        "{got} vs {want}"
    );
}

/// Batch dims that merge into more than the kernel's four (alternating broadcasts at rank 7)
/// run on packed copies, as PyTorch's matmul expands them; the gradients reach both operands.
#[test]
fn unmergeable_batch_dims_are_packed() {
    let dev = device(false);
    let (sa, sb) = ([2usize, 1, 2, 1, 2, 3, 4], [1usize, 2, 1, 2, 1, 4, 5]);
    let av = values(sa.iter().product(), 13);
    let bv = values(sb.iter().product(), 14);
    let a = Tensor::from_slice(&dev, &av, &sa)
        .unwrap()
        .requires_grad()
        .unwrap();
    let b = Tensor::from_slice(&dev, &bv, &sb)
        .unwrap()
        .requires_grad()
        .unwrap();
    let y = a.matmul(&b).unwrap();
    assert_eq!(y.shape(), &[2, 2, 2, 2, 2, 3, 5]);
    let got = y.to_vec::<f32>().unwrap();
    // Batch index (i0..i4) of the output reads A at (i0, 0, i2, 0, i4), B at (0, i1, 0, i3, 0).
    for z in 0..32 {
        let i: Vec<usize> = (0..5).map(|d| (z >> (4 - d)) & 1).collect();
        let az = (i[0] * 2 + i[2]) * 2 + i[4];
        let bz = i[1] * 2 + i[3];
        let want = host_bmm(
            &av[az * 12..az * 12 + 12],
            &bv[bz * 20..bz * 20 + 20],
            1,
            3,
            4,
            5,
            false,
        );
        close(&got[z * 15..z * 15 + 15], &want, "packed batch");
    }
    let g = y.sum_all().unwrap().backward().unwrap();
    assert_eq!(g.get(&a).unwrap().shape(), &sa);
    assert_eq!(g.get(&b).unwrap().shape(), &sb);
    // d(sum y)/dA[.., r, k]: B's row k summed over its columns and the 4 B matrices A meets.
    let ga = g.get(&a).unwrap().to_vec::<f32>().unwrap();
    let want: Vec<f32> = (0..8 * 12)
        .map(|e| {
            let k = e % 4;
            (0..4)
                .map(|bz| (0..5).map(|j| bv[bz * 20 + k * 5 + j]).sum::<f32>())
                .sum()
        })
        .collect();
    close(&ga, &want, "A's gradient");
    // Empty batches and K = 0 on a strided view: an empty result and zeros, not a loop.
    let z = |s: &[usize]| Tensor::zeros(&dev, s, wgtensor::DType::F32).unwrap();
    let y = z(&[0, 1, 2, 1, 2, 1, 3, 4])
        .matmul(&z(&[1, 2, 1, 2, 1, 2, 4, 5]))
        .unwrap();
    assert_eq!(y.shape(), &[0, 2, 2, 2, 2, 2, 3, 5]);
    let a0 = z(&[2, 1, 2, 1, 2, 1, 3, 5]).narrow(-1, 0, 0).unwrap();
    let y = a0.matmul(&z(&[1, 2, 1, 2, 1, 2, 0, 4])).unwrap();
    assert_eq!(y.shape(), &[2, 2, 2, 2, 2, 2, 3, 4]);
    assert!(y.to_vec::<f32>().unwrap().iter().all(|&v| v == 0.0));
}

/// Long K keeps PyTorch's precision: each output accumulates at most a few thousand products
/// in turn (the plan splits K into slices of at most 4096), where one run of 2^19 fmas over positive
/// values drifted 5e-5. The inputs are positive, so every rounding leans the same way. Also
/// on the GPU plans with a discrete GPU's parallelism, within 3e-6: splits of 256, each one
/// running sum as cuBLAS's tiles (ones against 0.1 over K 8192 drifted 2.1e-6; blocked sums
/// cost 12-31% on an H200).
#[test]
fn long_k_keeps_its_precision() {
    let gpu = common::wide_gpu_plans_device().clone();
    for dev in [device(false), device(true), gpu] {
        let dev = &dev;
        // The GPU tiles (forced, or a GPU adapter's own plans) keep one running sum per slice.
        let tol = if dev.caps().cpu { 2e-6 } else { 3e-6 };
        let frac = |i: usize, g: f64| ((i as f64 * g).fract()) as f32;
        for (m, k, n, constant) in [
            (1, 1 << 20, 1, false),
            (8, 1 << 18, 8, false),
            (4, 8192, 4, true),
            (4, 4000, 4, true),
        ] {
            // Constant operands (ones against 0.1) drift the most: every fma rounds the same way.
            let av: Vec<f32> = (0..m * k)
                .map(|i| {
                    if constant {
                        1.0
                    } else {
                        frac(i, 0.618_033_988_7)
                    }
                })
                .collect();
            let bv: Vec<f32> = (0..k * n)
                .map(|i| {
                    if constant {
                        0.1
                    } else {
                        frac(i, 0.414_213_562_3)
                    }
                })
                .collect();
            let a = Tensor::from_slice(dev, &av, &[m, k]).unwrap();
            let b = Tensor::from_slice(dev, &bv, &[k, n]).unwrap();
            let y = wgtensor::ops::matmul(&a, &b)
                .unwrap()
                .to_vec::<f32>()
                .unwrap();
            for r in 0..m {
                for c in 0..n {
                    let want: f64 = (0..k)
                        .map(|j| av[r * k + j] as f64 * bv[j * n + c] as f64)
                        .sum();
                    let got = y[r * n + c] as f64;
                    let e = (got - want).abs() / want;
                    assert!(
                        e <= tol,
                        "[{m}, {k}, {n}] ({r}, {c}): {got} vs {want}, {e:.1e}"
                    );
                }
            }
        }
    }
}

/// On GPUs too, an output with enough tiles to fill the device (no split for speed) takes
/// K past 4096 in slices for accuracy while its partials are small: ones against 0.1 over
/// K 8192 on four 64 x 64 tiles of a 4-slot GPU plan, which its unsplit tiles' one running
/// sum drifted 8e-5, in slices of 256 (each one running sum, as cuBLAS's tiles) within 3e-6.
#[test]
fn gpu_tiles_that_fill_the_device_split_long_k_for_accuracy() {
    let dev = Device::with_options(DeviceOptions {
        gpu_plans: true,
        parallelism: Some(4),
        disable_subgroups: true,
        ..Default::default()
    })
    .unwrap();
    let (m, k, n) = (128, 8192, 128);
    let pl = plan(&dev, m, n, k, 1, None).unwrap();
    assert_eq!(pl.splits, 32, "{pl:?}");
    let a = Tensor::full(&dev, &[m, k], 1.0, DType::F32).unwrap();
    let b = Tensor::full(&dev, &[k, n], 0.1, DType::F32).unwrap();
    let y = wgtensor::ops::matmul(&a, &b)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let want = 0.1f32 as f64 * k as f64;
    for (i, &v) in y.iter().enumerate().step_by(97) {
        let e = (v as f64 - want).abs() / want;
        assert!(e <= 3e-6, "[{i}]: {v} vs {want} ({e:.1e})");
    }
}

/// A product split for accuracy in windows past one binding: the window's columns leave room
/// for a row of split-k partials (a wide broadcast B took every column, and no row fit the
/// workspace: the product was refused as too large).
#[test]
fn accuracy_splits_fit_their_windows() {
    let dev = Device::with_options(DeviceOptions {
        gpu_plans: true,
        parallelism: Some(4),
        disable_subgroups: true,
        max_binding_bytes: Some(64 << 10),
        ..Default::default()
    })
    .unwrap();
    let (k, n) = (4100, 10000);
    assert_eq!(plan(&dev, 1, n, k, 1, None).unwrap().splits, 16);
    let av: Vec<f32> = (0..k).map(|i| (i % 7) as f32 * 0.25).collect();
    let bv: Vec<f32> = (0..n).map(|j| (j % 5) as f32 - 2.0).collect();
    let a = Tensor::from_slice(&dev, &av, &[1, k]).unwrap();
    let b = Tensor::from_slice(&dev, &bv, &[1, n])
        .unwrap()
        .broadcast_to(&[k, n])
        .unwrap();
    let y = wgtensor::ops::matmul(&a, &b)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let s: f64 = av.iter().map(|&v| v as f64).sum();
    for (j, &v) in y.iter().enumerate().step_by(37) {
        assert_eq!(v as f64, s * bv[j] as f64, "[{j}]");
    }
}

/// mm, bmm, mv, dot and outer: matmul's values and gradients at their fixed ranks, and
/// PyTorch's words for ranks, sizes and dtypes.
#[test]
fn fixed_rank_products_match_matmul_and_pytorchs_words() {
    let d = common::device();
    let t = |shape: &[usize], seed: u32| {
        let n = shape.iter().product();
        Tensor::from_slice(d, &values(n, seed), shape).unwrap()
    };
    let v = |t: &Tensor| t.to_vec::<f32>().unwrap();
    let (a, b) = (t(&[2, 3], 1), t(&[3, 4], 2));
    assert_eq!(v(&a.mm(&b).unwrap()), v(&a.matmul(&b).unwrap()));
    let (p, q) = (t(&[2, 3, 4], 3), t(&[2, 4, 5], 4));
    assert_eq!(v(&p.bmm(&q).unwrap()), v(&p.matmul(&q).unwrap()));
    let x = t(&[3], 5);
    assert_eq!(v(&a.mv(&x).unwrap()), v(&a.matmul(&x).unwrap()));
    let dot = x.dot(&x).unwrap();
    assert_eq!(dot.shape(), &[] as &[usize]);
    let want: f64 = v(&x).iter().map(|&e| f64::from(e * e)).sum();
    assert!((dot.item().unwrap() - want).abs() <= 1e-6 * want.abs().max(1.0));
    let y = t(&[4], 6);
    let o = x.outer(&y).unwrap();
    assert_eq!(o.shape(), &[3, 4]);
    let (xv, yv) = (v(&x), v(&y));
    let want: Vec<f32> = xv
        .iter()
        .flat_map(|&i| yv.iter().map(move |&j| i * j))
        .collect();
    assert_eq!(v(&o), want);
    // Gradients as matmul's: d(sum(a mm b))/da = rowsums of b.
    let al = a.clone().requires_grad().unwrap();
    let g = al.mm(&b).unwrap().sum_all().unwrap().backward().unwrap();
    let rows: Vec<f32> = (0..3)
        .map(|k| v(&b)[k * 4..k * 4 + 4].iter().sum())
        .collect();
    let got = v(g.get(&al).unwrap());
    for (i, gv) in got.iter().enumerate() {
        assert!((gv - rows[i % 3]).abs() <= 1e-5, "{got:?} vs {rows:?}");
    }
    // Empty K: zeros.
    let z = t(&[2, 0], 7).mm(&t(&[0, 3], 8)).unwrap();
    assert_eq!(v(&z), vec![0.0; 6]);
    // PyTorch's words.
    let words = |r: wgtensor::Result<Tensor>, op: &str, want: &str| {
        let e = r.unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{op}:")) && e.contains(want),
            "{e}\nwants {want}"
        );
    };
    let h = t(&[3, 4], 2).to_dtype(DType::F16).unwrap();
    words(
        a.mm(&t(&[4, 5], 1)),
        "mm",
        "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)",
    );
    words(x.mm(&a), "mm", "self must be a matrix, got 1-D tensor");
    words(a.mm(&x), "mm", "mat2 must be a matrix, got 1-D tensor");
    words(
        a.mm(&h),
        "mm",
        "expected m1 and m2 to have the same dtype, but got: float != c10::Half",
    );
    words(a.bmm(&q), "bmm", "batch1 must be a 3D tensor");
    words(p.bmm(&a), "bmm", "batch2 must be a 3D tensor");
    words(
        p.bmm(&t(&[3, 4, 5], 1)),
        "bmm",
        "Expected size for first two dimensions of batch2 tensor to be: [2, 4] but got: [3, 4].",
    );
    words(
        p.bmm(&q.to_dtype(DType::F16).unwrap()),
        "bmm",
        "expected scalar type Float but found Half",
    );
    words(
        a.mv(&y),
        "mv",
        "size mismatch, got input (2), mat (2x3), vec (4)",
    );
    words(
        a.mv(&a),
        "mv",
        "vector + matrix @ vector expected, got 1, 2, 2",
    );
    words(
        a.mv(&x.to_dtype(DType::F16).unwrap()),
        "mv",
        "addmv input tensors must have the same dtype, but got Half, Float, and Half",
    );
    words(
        a.dot(&x),
        "dot",
        "1D tensors expected, but got 2D and 1D tensors",
    );
    // dot checks the dtypes before the sizes.
    words(
        x.dot(&y.to_dtype(DType::F16).unwrap()),
        "dot",
        "dot : expected both vectors to have same dtype, but found Float and Half",
    );
    // Integers are refused under the op called.
    let ai = Tensor::from_slice(d, &[1i32; 6], &[2, 3]).unwrap();
    let bi = Tensor::from_slice(d, &[1i32; 12], &[3, 4]).unwrap();
    words(ai.mm(&bi), "mm", "I32");
    words(
        x.dot(&y),
        "dot",
        "inconsistent tensor size, expected tensor [3] and src [4] to have the same number of \
         elements, but got 3 and 4 elements respectively",
    );
    words(
        x.dot(&x.to_dtype(DType::F16).unwrap()),
        "dot",
        "dot : expected both vectors to have same dtype, but found Float and Half",
    );
    words(
        a.outer(&y),
        "outer",
        "outer: Expected 1-D argument self, but got 2-D",
    );
    words(
        x.outer(&a),
        "outer",
        "outer: Expected 1-D argument vec2, but got 2-D",
    );
}
