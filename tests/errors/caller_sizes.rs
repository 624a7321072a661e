//! Sizes that come from the caller rather than from a tensor (output sizes, group counts,
//! layer sizes, constructor lengths, weight shapes, layouts built by hand): values near
//! `usize::MAX` are refused with an error naming the op, never an arithmetic panic.

use super::*;
use wgtensor::nn::{self, Embedding, MultiheadAttention, RnnConfig};
use wgtensor::ops::conv::{conv2d_plan, ConvDirection};
use wgtensor::ops::{
    adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_max_pool2d, group_norm, kaiming_uniform,
    scaled_dot_product_attention, xavier_uniform, Conv2dOptions, Rnn, RnnKind, RnnOptions,
    SdpaOptions,
};
use wgtensor::Layout;

const HUGE: usize = usize::MAX;

fn zeros(shape: &[usize]) -> Tensor {
    Tensor::zeros(dev(), shape, DType::F32).unwrap()
}

/// `r` is an error whose op is `op`.
fn refused<T>(r: wgtensor::Result<T>, op: &str) {
    match r {
        Ok(_) => panic!("{op}: accepted"),
        Err(e) => assert!(msg(&e).contains(op), "{op}: {e}"),
    }
}

#[test]
fn adaptive_pool_output_sizes() {
    let x = t(&[1, 1, 2, 2]);
    refused(adaptive_avg_pool2d(&x, [HUGE, 1]), "adaptive_avg_pool2d");
    refused(adaptive_avg_pool2d(&x, [1 << 63, 1]), "adaptive_avg_pool2d");
    // Two planes and both sides huge: planes * h * w passes u128 (the side bound comes first).
    let x2 = t(&[1, 2, 2, 2]);
    refused(
        adaptive_avg_pool2d(&x2, [HUGE, HUGE]),
        "adaptive_avg_pool2d",
    );
    refused(
        adaptive_max_pool2d(&x2, [HUGE, HUGE]),
        "adaptive_max_pool2d",
    );
    refused(
        adaptive_avg_pool1d(&t(&[1, 1, 2]), HUGE),
        "adaptive_avg_pool1d",
    );
}

#[test]
fn group_norm_groups_over_no_channels() {
    refused(
        group_norm(&zeros(&[2, 0]), HUGE, None, None, 1e-5),
        "group_norm",
    );
    refused(
        group_norm(&zeros(&[1, 0]), HUGE, None, None, 1e-5),
        "group_norm",
    );
    // A legal count of groups over no channels still works (an empty result).
    let y = group_norm(&zeros(&[2, 0]), 3, None, None, 1e-5).unwrap();
    assert_eq!(y.shape(), &[2, 0]);
}

#[test]
fn attention_broadcast_past_usize() {
    // Three empty operands whose batch dims broadcast to 2^66 rows.
    let q = zeros(&[1 << 22, 1, 1, 0, 1]);
    let k = zeros(&[1, 1 << 22, 1, 0, 1]);
    let v = zeros(&[1, 1, 1 << 22, 0, 1]);
    refused(
        scaled_dot_product_attention(&q, &k, &v, &SdpaOptions::default()),
        "scaled_dot_product_attention",
    );
}

#[test]
fn initializer_and_constructor_lengths() {
    refused(
        kaiming_uniform(dev(), &[1, 2, HUGE], 5f64.sqrt(), DType::F32),
        "fan_in_and_fan_out",
    );
    refused(
        xavier_uniform(dev(), &[HUGE, HUGE], 1.0, DType::F32),
        "fan_in_and_fan_out",
    );
    refused(
        nn::Conv2d::new(dev(), 1, 1, HUGE, Default::default()),
        "fan_in_and_fan_out",
    );
    refused(
        Tensor::linspace(dev(), 0.0, 1.0, HUGE, DType::F32),
        "linspace",
    );
    refused(Tensor::arange(dev(), 0.0, 4e9, 1.0, DType::F32), "arange");
}

#[test]
fn layer_sizes() {
    let wide = RnnOptions {
        num_layers: HUGE,
        bidirectional: true,
        batch_first: false,
    };
    assert!(Rnn::new(RnnKind::Lstm, wide, vec![]).is_err());
    refused(nn::Lstm::new(dev(), 1, HUGE, RnnConfig::default()), "RNN");
    let deep = RnnConfig {
        num_layers: HUGE,
        ..Default::default()
    };
    refused(nn::Gru::new(dev(), 1, 1, deep), "RNN");
    refused(
        MultiheadAttention::new(dev(), HUGE, 1, Default::default()),
        "MultiheadAttention",
    );
    refused(Embedding::new(dev(), 1 << 63, 4, Some(0)), "Embedding");
    // A stack of copies: without a bound it would copy until memory ran out.
    let layer = nn::TransformerEncoderLayer::new(
        dev(),
        4,
        2,
        nn::TransformerEncoderLayerConfig {
            dim_feedforward: 4,
            ..Default::default()
        },
    )
    .unwrap();
    refused(
        nn::TransformerEncoder::new(&layer, HUGE, None),
        "TransformerEncoder",
    );
}

#[test]
fn public_fields_changed_after_new() {
    let mut mha = MultiheadAttention::new(dev(), 4, 2, Default::default()).unwrap();
    mha.num_heads = 0;
    let x = t(&[3, 1, 4]);
    assert!(mha.forward_attn(&x, &x, &x, &Default::default()).is_err());
    let mut lin = nn::Linear::new(dev(), 2, 3, true).unwrap();
    lin.weight = zeros(&[6]);
    refused(nn::Forward::forward(&lin, &t(&[1, 2])), "Linear");
}

#[test]
fn planned_and_hand_built_shapes() {
    let o = Conv2dOptions::default();
    refused(
        conv2d_plan(
            dev(),
            ConvDirection::Forward,
            [0, HUGE, 2, 2],
            [0, HUGE, 2, 2],
            &o,
        ),
        "conv2d_plan",
    );
    let g2 = Conv2dOptions {
        groups: 2,
        ..Default::default()
    };
    refused(
        conv2d_plan(
            dev(),
            ConvDirection::Forward,
            [1, 2, 1, 1],
            [2, HUGE, 1, 1],
            &g2,
        ),
        "conv2d_plan",
    );
    // The forward plan refuses a weight conv2d refuses: fewer output channels than groups;
    // the weight gradient's plan of the same shapes has no such rule.
    let g3 = Conv2dOptions {
        groups: 3,
        ..Default::default()
    };
    refused(
        conv2d_plan(
            dev(),
            ConvDirection::Forward,
            [1, 3, 4, 4],
            [0, 1, 3, 3],
            &g3,
        ),
        "expected weight to be at least 3 at dimension 0",
    );
    assert!(conv2d_plan(
        dev(),
        ConvDirection::Weight,
        [1, 3, 4, 4],
        [3, 1, 3, 3],
        &g3
    )
    .is_ok());
    let l = Layout::contiguous(&[HUGE, 2]);
    assert_eq!(l.numel(), HUGE);
    assert!(l.span() >= 2);
    let _ = l.is_contiguous();
    assert!(Layout::contiguous(&[3, HUGE]).narrow(0, 2, 1).is_err());
    // Reshaping a strided layout of any size answers without overflowing.
    let t = l.transpose(0, 1).unwrap();
    assert_eq!(t.reshape(&[1]), None);
    let big = Layout::contiguous(&[1 << 40, 1 << 40])
        .transpose(0, 1)
        .unwrap();
    assert_eq!(big.reshape(&[1 << 40, 1 << 40]), None);
}

/// The planners are public (`#[doc(hidden)]`) and take a `Caps` a caller may build by hand:
/// extreme parallelism estimates, workgroup limits and problem sizes plan without an
/// arithmetic panic.
#[test]
fn planners_take_any_hand_built_caps() {
    use wgtensor::ops::argext::argext_plan;
    use wgtensor::ops::attention::forward_plan;
    use wgtensor::ops::gemm::plan_for_dtype;
    use wgtensor::ops::reduce::reduce_plan;
    let sizes = [0, 1, 3, 1 << 20, HUGE / 2, HUGE];
    for cpu in [false, true] {
        for parallelism in [0, 1, 256, HUGE] {
            for max_workgroups_per_dim in [0, 1, u32::MAX] {
                let caps = wgtensor::Caps {
                    cpu,
                    parallelism,
                    max_workgroups_per_dim,
                    host_threads: parallelism,
                    ..wgtensor::Caps::test_gpu()
                };
                for &a in &sizes {
                    for &b in &sizes {
                        let _ = reduce_plan(&caps, a, b, 1);
                        let _ = argext_plan(&caps, a, b, b);
                        let _ = forward_plan(&caps, a, 1, b, 64, b);
                        let _ = forward_plan(&caps, 1, a, b, a, a);
                        for dtype in [DType::F32, DType::F16] {
                            let _ = plan_for_dtype(&caps, dtype, a, b, a, 1, None);
                        }
                        let _ = wgtensor::ops::batchnorm::plan_for(&caps, &[a, b, 3], &[0, 0]);
                    }
                }
            }
        }
    }
}
