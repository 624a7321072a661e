//! `scatter_add` on i32 data sums in i32, as PyTorch's int32 `scatter_add` does: exact past
//! 2^24 (where an f32 sum would round) and wrapping on overflow, through each of its three
//! paths (the gather form, the general bucketed scatter with its long buckets on GPU plans,
//! and a broadcast 1-D index, whose float row scatter i32 data does not take).

use super::common;
use super::indices::xorshift;
use wgtensor::{DType, Device, Tensor};

/// `base` `[n, f]` plus, for each `(j, c)` of an `[e, f]` index, `src[j, c]` at
/// `[index[j, c], c]`, in wrapping i32 arithmetic.
fn host_scatter(n: usize, f: usize, idx: &[i32], src: &[i32], base: &[i32]) -> Vec<i32> {
    let mut out = base.to_vec();
    for (k, (&i, &s)) in idx.iter().zip(src).enumerate() {
        let o = i as usize * f + k % f;
        out[o] = out[o].wrapping_add(s);
    }
    assert_eq!(out.len(), n * f);
    out
}

fn scatter(d: &Device, dims: [usize; 3], idx: &[i32], src: &[i32], base: &[i32]) -> Vec<i32> {
    let [n, e, f] = dims;
    let index = Tensor::from_slice(d, idx, &[e, f]).unwrap();
    let s = Tensor::from_slice(d, src, &[e, f]).unwrap();
    let b = Tensor::from_slice(d, base, &[n, f]).unwrap();
    let out = b.scatter_add(0, &index, &s).unwrap();
    assert_eq!(out.dtype(), DType::I32);
    out.to_vec::<i32>().unwrap()
}

/// Equal, or the first difference reported (not both vectors).
fn same(got: &[i32], want: &[i32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    if let Some(k) = (0..got.len()).find(|&k| got[k] != want[k]) {
        panic!(
            "{what}: element {k} is {} where {} was expected",
            got[k], want[k]
        );
    }
}

#[test]
fn scatter_add_sums_i32_exactly_and_wraps() {
    for d in [super::dev(), common::gpu_plans_device()] {
        // The gather form (3 index entries along the dim): 2^24 + 1 stays exact, and
        // i32::MAX + 1 wraps to i32::MIN.
        let base = [16_777_217, 0, i32::MAX, -5];
        let idx = [0, 0, 1, 1, 0, 1];
        let src = [2, 7, 1, 3, -4, 9];
        let got = scatter(d, [2, 3, 2], &idx, &src, &base);
        assert_eq!(got, vec![16_777_215, 7, i32::MIN, 7]);
        assert_eq!(got, host_scatter(2, 2, &idx, &src, &base));

        // The general bucketed scatter: 600 entries along the dim into 64 rows over 32
        // columns, values near 2^28 (their f32 sums would round), and four columns whose
        // every entry goes to row 5 (buckets of 600: the long-bucket kernels on GPU plans).
        let (n, e, f) = (64usize, 600usize, 32usize);
        let mut next = xorshift(99);
        let idx: Vec<i32> = (0..e * f)
            .map(|k| {
                if k % f < 4 {
                    5
                } else {
                    (next() % n as u32) as i32
                }
            })
            .collect();
        let src: Vec<i32> = (0..e * f)
            .map(|_| (next() % (1 << 28)) as i32 - (1 << 27) + 1)
            .collect();
        let base: Vec<i32> = (0..n * f).map(|k| k as i32 * 1_000_003).collect();
        let got = scatter(d, [n, e, f], &idx, &src, &base);
        same(&got, &host_scatter(n, f, &idx, &src, &base), "general");
        // Sums past i32 wrap there too: every entry of a hub column near i32::MAX.
        let big: Vec<i32> = (0..e * f).map(|k| i32::MAX - (k % 97) as i32).collect();
        let got = scatter(d, [n, e, f], &idx, &big, &base);
        same(&got, &host_scatter(n, f, &idx, &big, &base), "wrapping");

        // One 1-D index broadcast over the columns (stride 0), as graph aggregations write it.
        let rows: Vec<i32> = (0..e).map(|_| (next() % n as u32) as i32).collect();
        let wide = Tensor::from_slice(d, &rows, &[e, 1])
            .unwrap()
            .broadcast_to(&[e, f])
            .unwrap();
        let s = Tensor::from_slice(d, &src, &[e, f]).unwrap();
        let b = Tensor::from_slice(d, &base, &[n, f]).unwrap();
        let got = b
            .scatter_add(0, &wide, &s)
            .unwrap()
            .to_vec::<i32>()
            .unwrap();
        let flat: Vec<i32> = (0..e * f).map(|k| rows[k / f]).collect();
        same(
            &got,
            &host_scatter(n, f, &flat, &src, &base),
            "broadcast index",
        );
    }
}

#[test]
fn scatter_add_wants_one_dtype_for_self_and_src() {
    let d = super::dev();
    let base = Tensor::zeros(d, &[3], DType::I32).unwrap();
    let idx = Tensor::from_slice(d, &[0i32, 2], &[2]).unwrap();
    let src = Tensor::ones(d, &[2], DType::F32).unwrap();
    let e = base.scatter_add(0, &idx, &src).unwrap_err();
    super::names_op(&e, "scatter_add");
    assert!(
        e.to_string()
            .contains("Expected self.dtype to be equal to src.dtype"),
        "{e}"
    );
    // Without a base of its own dtype it fails the same way the other way round.
    let src = Tensor::ones(d, &[2], DType::I32).unwrap();
    let basef = Tensor::zeros(d, &[3], DType::F32).unwrap();
    assert!(basef.scatter_add(0, &idx, &src).is_err());
    let ok = base.scatter_add(0, &idx, &src).unwrap();
    assert_eq!(ok.to_vec::<i32>().unwrap(), vec![1, 0, 1]);
}
