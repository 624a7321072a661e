//! nn::MultiheadAttention where PyTorch takes its fast path (`torch._native_multi_head_attention`:
//! eval, no gradient, batch-first self-attention with one tensor as query, key and value, a
//! packed in-projection with a bias, an even head count): masks are read as bool (a nonzero
//! additive entry masks its key out) and a query with every key masked gives NaN, as
//! test_multihead_self_attn_two_masks_fast_path says; elsewhere the general path's results.
// Native only (blocking device and readback).
#![cfg(not(target_arch = "wasm32"))]

mod common;

use wgtensor::nn::{
    MhaMask, MhaOptions, Module, MultiheadAttention, MultiheadAttentionConfig,
    TransformerEncoderLayer, TransformerEncoderLayerConfig,
};
use wgtensor::Tensor;

fn mha(batch_first: bool) -> MultiheadAttention {
    let cfg = MultiheadAttentionConfig {
        batch_first,
        ..Default::default()
    };
    let mut m = MultiheadAttention::new(common::device(), 4, 2, cfg).unwrap();
    m.eval();
    m
}

/// [2, 3, 4]: two sequences of three tokens.
fn input() -> Tensor {
    let xs: Vec<f32> = (0..24).map(|i| ((i * 7 % 11) as f32 - 5.0) * 0.3).collect();
    Tensor::from_slice(common::device(), &xs, &[2, 3, 4]).unwrap()
}

fn mask(v: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_slice(common::device(), v, shape).unwrap()
}

fn run(m: &MultiheadAttention, q: &Tensor, k: &Tensor, opts: &MhaOptions) -> Vec<f32> {
    m.forward_attn(q, k, k, opts)
        .unwrap()
        .0
        .to_vec::<f32>()
        .unwrap()
}

fn opts<'a>(pad: Option<MhaMask<'a>>, attn: Option<MhaMask<'a>>) -> MhaOptions<'a> {
    MhaOptions {
        key_padding_mask: pad,
        attn_mask: attn,
        need_weights: false,
        ..Default::default()
    }
}

#[test]
fn a_fully_masked_query_is_nan_on_the_fast_path_only() {
    let (m, x) = (mha(true), input());
    // The first sequence has every key padded.
    let pad = mask(&[1., 1., 1., 0., 1., 0.], &[2, 3]);
    let o = opts(Some(MhaMask::Bool(&pad)), None);
    let fast = wgtensor::no_grad(|| run(&m, &x, &x, &o));
    assert!(fast[..12].iter().all(|v| v.is_nan()), "{fast:?}");
    assert!(fast[12..].iter().all(|v| v.is_finite()), "{fast:?}");
    // With gradients recorded (the parameters are tracked) the general path: no NaN.
    let slow = run(&m, &x, &x, &o);
    assert!(slow.iter().all(|v| v.is_finite()), "{slow:?}");
    assert_eq!(slow[12..], fast[12..]);
    // Key and value another tensor than the query (the same values): not self-attention.
    let y = x.contiguous().unwrap().add_scalar(0.0).unwrap();
    let cross = wgtensor::no_grad(|| run(&m, &x, &y, &o));
    assert!(cross.iter().all(|v| v.is_finite()), "{cross:?}");
    // Not batch-first, odd head count, training: the general path too.
    let xt = x.transpose(0, 1).unwrap().contiguous().unwrap();
    let padt = pad.clone();
    let ot = opts(Some(MhaMask::Bool(&padt)), None);
    let lf = wgtensor::no_grad(|| run(&mha(false), &xt, &xt, &ot));
    assert!(lf.iter().all(|v| v.is_finite()), "{lf:?}");
    let mut train = mha(true);
    train.train();
    let tr = wgtensor::no_grad(|| run(&train, &x, &x, &o));
    assert!(tr.iter().all(|v| v.is_finite()), "{tr:?}");
    // An attention mask whose row 1 excludes every key: that query's row only, in both
    // sequences; with need_weights the weights' row is NaN too.
    let am = mask(&[0., 1., 0., 1., 1., 1., 0., 0., 0.], &[3, 3]);
    let o = opts(None, Some(MhaMask::Bool(&am)));
    let y = wgtensor::no_grad(|| run(&m, &x, &x, &o));
    for (i, v) in y.iter().enumerate() {
        assert_eq!(v.is_nan(), (i / 4) % 3 == 1, "{i}: {v}");
    }
    let ow = MhaOptions {
        need_weights: true,
        ..o
    };
    let (yw, w) = wgtensor::no_grad(|| m.forward_attn(&x, &x, &x, &ow)).unwrap();
    assert_eq!(
        yw.to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.is_nan())
            .collect::<Vec<_>>(),
        y.iter().map(|v| v.is_nan()).collect::<Vec<_>>()
    );
    let w = w.unwrap().to_vec::<f32>().unwrap();
    for (i, v) in w.iter().enumerate() {
        assert_eq!(v.is_nan(), (i / 3) % 3 == 1, "weight {i}: {v}");
    }
    // The same mask as a float (-inf) one keeps PyTorch's MultiheadAttention off its fast
    // path ("floating-point masks are not supported for fast path"): zeros, no NaN.
    let inf = f32::NEG_INFINITY;
    let af = mask(&[0., inf, 0., inf, inf, inf, 0., 0., 0.], &[3, 3]);
    let yf = wgtensor::no_grad(|| run(&m, &x, &x, &opts(None, Some(MhaMask::Additive(&af)))));
    assert!(yf.iter().all(|v| v.is_finite()), "{yf:?}");
}

fn layer(eps2: f64) -> TransformerEncoderLayer {
    let cfg = TransformerEncoderLayerConfig {
        dim_feedforward: 8,
        dropout: 0.0,
        batch_first: true,
        ..Default::default()
    };
    let mut layer = TransformerEncoderLayer::new(common::device(), 4, 2, cfg).unwrap();
    layer.norm2.eps = eps2;
    layer.eval();
    layer
}

fn run_layer(l: &TransformerEncoderLayer, attn: Option<MhaMask>, pad: Option<MhaMask>) -> Vec<f32> {
    l.forward_with(&input(), attn, pad, false)
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
}

/// The encoder layer's fast path reads every mask as bool, a float one too: a `+2` bias masks
/// like `true` and a row of `-1e9` is NaN; its slow path (gradients recorded, or norms of two
/// eps) adds the bias, as `MultiheadAttention` given the float mask directly does.
#[test]
fn the_encoder_layer_reads_float_masks_as_bool_on_its_fast_path() {
    let l = layer(1e-5);
    let bias = mask(&[0., 2., 0., -1e9, -1e9, -1e9, 0., 0., 0.5], &[3, 3]);
    let as_bool = mask(&[0., 1., 0., 1., 1., 1., 0., 0., 1.], &[3, 3]);
    let fast = wgtensor::no_grad(|| run_layer(&l, Some(MhaMask::Additive(&bias)), None));
    let hard = wgtensor::no_grad(|| run_layer(&l, Some(MhaMask::Bool(&as_bool)), None));
    let same = fast
        .iter()
        .zip(&hard)
        .all(|(a, b)| a.to_bits() == b.to_bits());
    assert!(same, "{fast:?} vs {hard:?}");
    for (i, v) in fast.iter().enumerate() {
        assert_eq!(v.is_nan(), (i / 4) % 3 == 1, "{i}: {v}");
    }
    // Gradients recorded (the parameters are tracked): the slow path, finite, other values.
    let soft = run_layer(&l, Some(MhaMask::Additive(&bias)), None);
    assert!(soft.iter().all(|v| v.is_finite()), "{soft:?}");
    assert!(soft[..4]
        .iter()
        .zip(&fast[..4])
        .any(|(a, b)| (a - b).abs() > 1e-4));
    // norm2.eps unlike norm1.eps keeps PyTorch's layer off its fast path.
    let l2 = layer(1e-6);
    let y = wgtensor::no_grad(|| run_layer(&l2, Some(MhaMask::Bool(&as_bool)), None));
    assert!(y.iter().all(|v| v.is_finite()), "{y:?}");
    // MultiheadAttention given the float mask itself: the general path (soft, no NaN).
    let x = input();
    let direct = wgtensor::no_grad(|| {
        run(
            &l.self_attn,
            &x,
            &x,
            &opts(None, Some(MhaMask::Additive(&bias))),
        )
    });
    assert!(direct.iter().all(|v| v.is_finite()), "{direct:?}");
    // An integer additive mask is refused by the layer first, as PyTorch's _canonical_mask.
    let ints = Tensor::from_slice(common::device(), &[0i32; 9], &[3, 3]).unwrap();
    let e = wgtensor::no_grad(|| l.forward_with(&x, Some(MhaMask::Additive(&ints)), None, false))
        .unwrap_err();
    assert!(
        e.to_string().contains("TransformerEncoderLayer") && e.to_string().contains("src_mask"),
        "{e}"
    );
}

/// A `-1e9` padding bias that covers a whole sequence makes its rows NaN on the layer's fast
/// path, as PyTorch's; a bool padding mask the same.
#[test]
fn the_encoder_layer_follows_the_fast_path() {
    let l = layer(1e-5);
    let padf = mask(&[-1e9, -1e9, -1e9, 0., 0., -1e9], &[2, 3]);
    let padb = mask(&[1., 1., 1., 0., 0., 1.], &[2, 3]);
    for pad in [MhaMask::Additive(&padf), MhaMask::Bool(&padb)] {
        let y = wgtensor::no_grad(|| run_layer(&l, None, Some(pad)));
        assert!(y[..12].iter().all(|v| v.is_nan()), "{y:?}");
        assert!(y[12..].iter().all(|v| v.is_finite()), "{y:?}");
    }
}

/// Two float masks on the layer's fast path are summed before they are read as bool, as
/// `merge_masks` does: `+5` in the padding mask cancels `-5` in the attention mask.
#[test]
fn the_encoder_layer_sums_float_masks_before_reading_them() {
    let l = layer(1e-5);
    let pad = mask(&[5., 0., 0., 0., 0., 0.], &[2, 3]);
    let attn = mask(&[-5., 0., 0., -5., 0., 0., -5., 0., 0.], &[3, 3]);
    let got = wgtensor::no_grad(|| {
        run_layer(
            &l,
            Some(MhaMask::Additive(&attn)),
            Some(MhaMask::Additive(&pad)),
        )
    });
    // The merged mask: the first sequence attends everywhere, the second masks key 0; per
    // head ([N * H, L, S] with 2 heads).
    let mut merged = vec![0f32; 2 * 2 * 3 * 3];
    for (k, m) in merged.iter_mut().enumerate() {
        let (b, key) = (k / 18, k % 3);
        *m = f32::from(u8::from(b == 1 && key == 0));
    }
    let merged = mask(&merged, &[4, 3, 3]);
    let want = wgtensor::no_grad(|| run_layer(&l, Some(MhaMask::Bool(&merged)), None));
    let same = got
        .iter()
        .zip(&want)
        .all(|(a, b)| a.to_bits() == b.to_bits());
    assert!(same, "{got:?} vs {want:?}");
}

/// The encoder's nested-tensor path drops padded tokens before the first layer and pads its
/// output with exact zeros: NaN at a padded position reaches no real token (PyTorch's
/// `_nested_tensor_from_mask`). An encoder of no layers is refused, as PyTorch's forward
/// reads `layers[0]`. The layer builds its attention before checking its dropout (the
/// embed_dim check first), whose range check lets NaN through as nn.Dropout's.
#[test]
fn the_encoders_nested_path_keeps_padded_nan_out() {
    use wgtensor::nn::TransformerEncoder;
    let l = layer(1e-5);
    let enc = TransformerEncoder::new(&l, 2, None).unwrap();
    let mut v: Vec<f32> = (0..12).map(|i| i as f32 * 0.1).collect();
    v[8..].fill(f32::NAN);
    let src = Tensor::from_slice(common::device(), &v, &[1, 3, 4]).unwrap();
    let pad = Tensor::from_slice(common::device(), &[0.0f32, 0.0, 1.0], &[1, 3])
        .unwrap()
        .to_dtype(wgtensor::DType::I32)
        .unwrap();
    let y = wgtensor::no_grad(|| enc.forward_with(&src, None, Some(MhaMask::Bool(&pad)), false))
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert!(y[..8].iter().all(|x| x.is_finite()), "{y:?}");
    assert_eq!(&y[8..], &[0.0; 4]);

    let none = TransformerEncoder::new(&l, 0, None).unwrap();
    let e = none.forward_with(&src, None, None, false).unwrap_err();
    assert!(e.to_string().contains("index 0 is out of range"), "{e}");

    let cfg = |dropout: f64| TransformerEncoderLayerConfig {
        dropout,
        ..Default::default()
    };
    let e = TransformerEncoderLayer::new(common::device(), 5, 2, cfg(1.5)).unwrap_err();
    assert!(e.to_string().contains("divisible"), "{e}");
    // A NaN dropout builds, and the fast path (eval, no gradient) calls no Dropout module.
    let mut nan = TransformerEncoderLayer::new(
        common::device(),
        4,
        2,
        TransformerEncoderLayerConfig {
            batch_first: true,
            ..cfg(f64::NAN)
        },
    )
    .unwrap();
    nan.eval();
    let x = Tensor::from_slice(common::device(), &v[..8], &[1, 2, 4]).unwrap();
    assert!(wgtensor::no_grad(|| nan.forward_with(&x, None, None, false)).is_ok());
    assert!(TransformerEncoderLayer::new(common::device(), 4, 2, cfg(1.5)).is_err());
}

/// The layer's own training flag picks its path, as PyTorch's `self.training` check: the layer
/// in eval with its attention set to train still takes the fast path (a bias row of `-1e9` is
/// NaN), the layer in train with its attention in eval the slow one (finite).
#[test]
fn the_encoder_layers_own_flag_picks_its_path() {
    let bias = mask(&[0., 2., 0., -1e9, -1e9, -1e9, 0., 0., 0.5], &[3, 3]);
    let mut l = layer(1e-5);
    l.self_attn.training = true;
    let y = wgtensor::no_grad(|| run_layer(&l, Some(MhaMask::Additive(&bias)), None));
    assert!(y.iter().any(|v| v.is_nan()), "{y:?}");
    l.train();
    l.self_attn.training = false;
    let y = wgtensor::no_grad(|| run_layer(&l, Some(MhaMask::Additive(&bias)), None));
    assert!(y.iter().all(|v| v.is_finite()), "{y:?}");
    // train() / eval() set the layer's flag with its children's.
    l.eval();
    assert!(!l.training && !l.self_attn.training && !l.is_training());
}

/// The encoder's copies of its layer keep ties inside the layer, as `copy.deepcopy`'s memo:
/// norm2 sharing norm1's weight is one parameter per copy (22 in PyTorch for two layers), and
/// the copies share nothing with the original or each other.
#[test]
fn the_encoders_layer_copies_keep_ties() {
    use wgtensor::nn::{Module, TransformerEncoder};
    let mut l = layer(1e-5);
    l.norm2.weight = l.norm1.weight.clone();
    assert_eq!(l.named_parameters().len(), 11);
    let enc = TransformerEncoder::new(&l, 2, None).unwrap();
    let names: Vec<String> = enc.named_parameters().into_iter().map(|p| p.0).collect();
    assert_eq!(names.len(), 22, "{names:?}");
    assert!(
        !names.iter().any(|n| n.ends_with("norm2.weight")),
        "{names:?}"
    );
    // Two keys per tie in the state dict, as PyTorch's.
    assert_eq!(enc.state_dict().len(), 24);
    let w0 = enc.layers[0].norm1.weight.as_ref().unwrap();
    let w1 = enc.layers[1].norm1.weight.as_ref().unwrap();
    assert!(!w0.shares_storage(w1) && !w0.shares_storage(l.norm1.weight.as_ref().unwrap()));
}

/// PyTorch's fused path has no dropout: a layer in eval whose children were set to train
/// (attention and Dropout modules, p = 0.5) gives the all-eval result on its fast path, and so
/// does the encoder's nested path over such layers.
#[test]
fn the_fast_paths_drop_nothing_whatever_the_childrens_flags() {
    use wgtensor::nn::TransformerEncoder;
    let cfg = TransformerEncoderLayerConfig {
        dim_feedforward: 8,
        dropout: 0.5,
        batch_first: true,
        ..Default::default()
    };
    let mut l = TransformerEncoderLayer::new(common::device(), 4, 2, cfg).unwrap();
    l.eval();
    let pad = Tensor::from_slice(common::device(), &[0i32, 0, 1], &[1, 3]).unwrap();
    let x = Tensor::from_slice(
        common::device(),
        &(0..12).map(|i| i as f32 * 0.1).collect::<Vec<_>>(),
        &[1, 3, 4],
    )
    .unwrap();
    let run = |l: &TransformerEncoderLayer| {
        wgtensor::no_grad(|| l.forward_with(&x, None, Some(MhaMask::Bool(&pad)), false))
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
    };
    let enc_run = |l: &TransformerEncoderLayer| {
        let enc = TransformerEncoder::new(l, 2, None).unwrap();
        wgtensor::no_grad(|| enc.forward_with(&x, None, Some(MhaMask::Bool(&pad)), false))
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
    };
    let (want, enc_want) = (run(&l), enc_run(&l));
    let mut noisy = l.clone();
    noisy.self_attn.training = true;
    noisy.dropout.training = true;
    noisy.dropout1.training = true;
    noisy.dropout2.training = true;
    for _ in 0..3 {
        assert_eq!(run(&noisy), want);
        assert_eq!(enc_run(&noisy), enc_want);
    }
}
