//! `#[derive(Module)]` models: names and order as PyTorch's for the equivalent `nn.Module`,
//! `eval()` reaching nested layers, save/load round trips; the containers.

use super::*;

/// PyTorch:
///
/// ```python
/// class Block(nn.Module):
///     def __init__(self):
///         super().__init__()
///         self.conv = nn.Conv2d(8, 8, 3, padding=1, bias=False)
///         self.bn = nn.BatchNorm2d(8)
/// ```
#[derive(Module)]
struct Block {
    conv: nn::Conv2d,
    bn: nn::BatchNorm2d,
}

impl Forward for Block {
    fn forward(&self, x: &Tensor) -> wgtensor::Result<Tensor> {
        self.bn.forward(&self.conv.forward(x)?)?.relu()
    }
}

/// PyTorch (registration order as the fields; `scale` and `mean` are the module's own
/// parameter and buffer, which PyTorch lists before any child's whatever the order of
/// assignment):
///
/// ```python
/// class Net(nn.Module):
///     def __init__(self):
///         super().__init__()
///         self.stem = nn.Conv2d(1, 8, 3, padding=1)
///         self.scale = nn.Parameter(torch.ones(8, 1, 1))
///         self.register_buffer("mean", torch.zeros(1))
///         self.features = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8),
///                                       nn.ReLU(), nn.MaxPool2d(2))
///         self.blocks = nn.ModuleList([Block(), Block()])
///         self.proj = nn.Conv2d(8, 8, 1)
///         self.extra = None
///         self.drop = nn.Dropout(0.5)
///         self.classifier = nn.Linear(8 * 4 * 4, 10)
///         self.classes = 10
/// ```
#[derive(Module)]
struct Net {
    stem: nn::Conv2d,
    scale: Tensor,
    #[module(buffer)]
    mean: Tensor,
    features: nn::Sequential,
    blocks: Vec<Block>,
    proj: Option<nn::Conv2d>,
    extra: Option<nn::Linear>,
    drop: nn::Dropout,
    classifier: nn::Linear,
    #[module(skip)]
    classes: usize,
}

impl Forward for Net {
    fn forward(&self, x: &Tensor) -> wgtensor::Result<Tensor> {
        let mut x = self.features.forward(&self.stem.forward(x)?)?;
        for b in &self.blocks {
            x = b.forward(&x)?;
        }
        if let Some(p) = &self.proj {
            x = p.forward(&x)?;
        }
        let x = nn::Flatten.forward(&x.mul(&self.scale)?.sub(&self.mean)?)?;
        self.classifier.forward(&self.drop.forward(&x)?)
    }
}

fn net() -> Net {
    let d = dev();
    let same = nn::Conv2dConfig {
        padding: 1,
        ..Default::default()
    };
    let block = || Block {
        conv: nn::Conv2d::new(
            d,
            8,
            8,
            3,
            nn::Conv2dConfig {
                bias: false,
                ..same
            },
        )
        .unwrap(),
        bn: nn::BatchNorm2d::new(d, 8).unwrap(),
    };
    Net {
        stem: nn::Conv2d::new(d, 1, 8, 3, same).unwrap(),
        scale: Tensor::ones(d, &[8, 1, 1], DType::F32)
            .unwrap()
            .requires_grad()
            .unwrap(),
        mean: Tensor::zeros(d, &[1], DType::F32).unwrap(),
        features: nn::Sequential::new()
            .push(nn::Conv2d::new(d, 8, 8, 3, same).unwrap())
            .push(nn::BatchNorm2d::new(d, 8).unwrap())
            .push(nn::ReLU)
            .push(nn::MaxPool2d(MaxPool2dOptions::new(2))),
        blocks: vec![block(), block()],
        proj: Some(nn::Conv2d::new(d, 8, 8, 1, Default::default()).unwrap()),
        extra: None,
        drop: nn::Dropout::default(), // nn.Dropout(): p = 0.5
        classifier: nn::Linear::new(d, 8 * 4 * 4, 10, true).unwrap(),
        classes: 10,
    }
}

fn names(v: Vec<(String, Tensor)>) -> Vec<String> {
    v.into_iter().map(|(n, _)| n).collect()
}

/// The names and order PyTorch gives the equivalent model (written out from its rules: per
/// module its own parameters, then its own buffers, then each child in registration order).
#[test]
fn derived_model_names_and_order_follow_pytorch() {
    let m = net();
    let bn = |p: &str| {
        [
            "weight",
            "bias",
            "running_mean",
            "running_var",
            "num_batches_tracked",
        ]
        .map(|n| format!("{p}.{n}"))
    };
    let mut want_sd: Vec<String> = ["scale", "mean", "stem.weight", "stem.bias"]
        .map(String::from)
        .to_vec();
    want_sd.extend(["features.0.weight".into(), "features.0.bias".into()]);
    want_sd.extend(bn("features.1"));
    for b in 0..2 {
        want_sd.push(format!("blocks.{b}.conv.weight"));
        want_sd.extend(bn(&format!("blocks.{b}.bn")));
    }
    want_sd.extend(
        [
            "proj.weight",
            "proj.bias",
            "classifier.weight",
            "classifier.bias",
        ]
        .map(String::from),
    );
    assert_eq!(names(m.state_dict()), want_sd);
    assert_eq!(
        names(m.named_parameters()),
        [
            "scale",
            "stem.weight",
            "stem.bias",
            "features.0.weight",
            "features.0.bias",
            "features.1.weight",
            "features.1.bias",
            "blocks.0.conv.weight",
            "blocks.0.bn.weight",
            "blocks.0.bn.bias",
            "blocks.1.conv.weight",
            "blocks.1.bn.weight",
            "blocks.1.bn.bias",
            "proj.weight",
            "proj.bias",
            "classifier.weight",
            "classifier.bias",
        ]
    );
    assert_eq!(
        names(m.named_buffers()),
        [
            "mean",
            "features.1.running_mean",
            "features.1.running_var",
            "features.1.num_batches_tracked",
            "blocks.0.bn.running_mean",
            "blocks.0.bn.running_var",
            "blocks.0.bn.num_batches_tracked",
            "blocks.1.bn.running_mean",
            "blocks.1.bn.running_var",
            "blocks.1.bn.num_batches_tracked",
        ]
    );
    assert_eq!(m.parameters().len(), 17);
    assert_eq!(
        m.num_parameters(),
        8 + (72 + 8) + (576 + 8) + 16 + 2 * (576 + 16) + (64 + 8) + (1280 + 10)
    );
    // Every parameter trains: a loss reaches each one (the buffer is not a parameter).
    let x = wgtensor::ops::randn(dev(), &[2, 1, 8, 8], DType::F32).unwrap();
    let y = m.forward(&x).unwrap();
    assert_eq!(y.shape(), &[2, m.classes]);
    let g = y.mul(&y).unwrap().sum_all().unwrap().backward().unwrap();
    for (n, p) in m.named_parameters() {
        assert!(g.get(&p).is_some(), "no gradient for {n}");
    }
    assert!(!m.mean.is_tracked());
}

/// `eval()` on the outer model reaches a BatchNorm two levels down (in a Vec of derived
/// blocks) and one inside a Sequential, and the Dropout; the nested batch norm then normalizes
/// with its running statistics.
#[test]
fn eval_and_train_reach_every_nested_layer() {
    let mut m = net();
    assert!(m.is_training());
    m.eval();
    assert!(!m.is_training());
    assert!(!m.blocks[1].bn.training && !m.blocks[0].bn.training && !m.drop.training);
    assert!(!m.features.get_as::<nn::BatchNorm2d>(1).unwrap().training);
    let x = wgtensor::ops::randn(dev(), &[2, 1, 8, 8], DType::F32).unwrap();
    let a = vals(&m.forward(&x).unwrap());
    assert_eq!(a, vals(&m.forward(&x).unwrap()), "eval is deterministic");
    assert_eq!(m.blocks[1].bn.state.borrow().num_batches_tracked, 0);
    m.train();
    assert!(m.is_training() && m.blocks[1].bn.training && m.drop.training);
    m.forward(&x).unwrap();
    assert_eq!(m.blocks[1].bn.state.borrow().num_batches_tracked, 1);

    // A batch norm nested in derived structs: in eval mode, y = (x - running_mean) /
    // sqrt(running_var + eps) with the fresh statistics (0 and 1), not the batch's.
    #[derive(Module)]
    struct Inner {
        bn: nn::BatchNorm1d,
    }
    #[derive(Module)]
    struct Outer {
        inner: Inner,
    }
    let mut o = Outer {
        inner: Inner {
            bn: nn::BatchNorm1d::new(dev(), 2).unwrap(),
        },
    };
    let x = Tensor::from_slice(dev(), &[1.0f32, 10.0, 3.0, 20.0], &[2, 2]).unwrap();
    let train = vals(&o.inner.bn.forward(&x).unwrap());
    assert!((train[0] + 1.0).abs() < 1e-3, "batch statistics: {train:?}");
    o.eval();
    let y = vals(&o.inner.bn.forward(&x).unwrap());
    // After one training batch: running_mean = 0.1 * batch mean, running_var = 0.9 + 0.1 *
    // unbiased batch var.
    let (rm, rv) = (0.1 * 2.0, 0.9 + 0.1 * 2.0);
    let want = (1.0 - rm) / (rv + 1e-5f32).sqrt();
    assert!((y[0] - want).abs() < 1e-4, "{y:?} vs {want}");
}

/// save -> safetensors -> load into a fresh model: every parameter, buffer and counter
/// (num_batches_tracked of each nested BatchNorm) comes back; the eval outputs match.
/// A strict load of an incomplete dict fails naming the key and changes nothing.
#[test]
fn derived_model_state_dict_round_trip() {
    let mut m = net();
    let x = wgtensor::ops::randn(dev(), &[4, 1, 8, 8], DType::F32).unwrap();
    m.forward(&x).unwrap();
    m.forward(&x).unwrap(); // counters at 2, running statistics moved
    m.eval();
    let want = vals(&m.forward(&x).unwrap());
    let sd = m.state_dict();
    let refs: Vec<(&str, &Tensor)> = sd.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let src = load_safetensors(dev(), &save_safetensors(&refs).unwrap()).unwrap();

    let mut fresh = net();
    fresh.eval();
    assert_ne!(vals(&fresh.forward(&x).unwrap()), want);
    let report = fresh.load_state_dict(&src, true).unwrap();
    assert!(report.missing.is_empty() && report.unexpected.is_empty());
    assert_eq!(vals(&fresh.forward(&x).unwrap()), want);
    for b in &fresh.blocks {
        assert_eq!(b.bn.state.borrow().num_batches_tracked, 2);
    }
    let f1 = fresh.features.get_as::<nn::BatchNorm2d>(1).unwrap();
    assert_eq!(f1.state.borrow().num_batches_tracked, 2);
    assert_eq!(names(fresh.state_dict()), names(m.state_dict()));

    // Strict, a counter missing: loaded, as PyTorch's batch norm fills in
    // num_batches_tracked for a plain dict; that counter keeps its value.
    let mut partial = src.clone();
    partial.remove("blocks.1.bn.num_batches_tracked");
    let mut other = net();
    other.load_state_dict(&partial, true).unwrap();
    assert_eq!(other.blocks[1].bn.state.borrow().num_batches_tracked, 0);
    assert_eq!(vals(&other.classifier.weight), vals(&m.classifier.weight));
    // Strict, a weight missing: an error naming it, and nothing loaded.
    let mut other = net();
    let w0 = vals(&other.classifier.weight);
    let mut no_w = src.clone();
    no_w.remove("blocks.1.bn.weight");
    let e = other.load_state_dict(&no_w, true).unwrap_err().to_string();
    assert!(e.contains("blocks.1.bn.weight"), "{e}");
    assert_eq!(
        vals(&other.classifier.weight),
        w0,
        "a refused load copies nothing"
    );
    // Not strict: loaded, no counter reported missing, that counter untouched.
    partial.insert(
        "unused".into(),
        Tensor::zeros(dev(), &[1], DType::F32).unwrap(),
    );
    let r = nn::load_state_dict(&mut other, &partial, false).unwrap();
    assert!(r.missing.is_empty(), "{:?}", r.missing);
    assert_eq!(r.unexpected, ["unused"]);
    assert_eq!(other.blocks[0].bn.state.borrow().num_batches_tracked, 2);
    assert_eq!(other.blocks[1].bn.state.borrow().num_batches_tracked, 0);
    assert_eq!(vals(&other.classifier.weight), vals(&m.classifier.weight));
    // A shape mismatch is an error before anything is copied, counters included.
    let mut bad = src.clone();
    bad.insert(
        "proj.bias".into(),
        Tensor::zeros(dev(), &[3], DType::F32).unwrap(),
    );
    let mut third = net();
    let e = third.load_state_dict(&bad, true).unwrap_err().to_string();
    assert!(e.contains("proj.bias"), "{e}");
    assert_eq!(third.blocks[0].bn.state.borrow().num_batches_tracked, 0);
}

/// ModuleList and ModuleDict inside a model: `layers.0.weight`, `heads.name.weight`, in
/// insertion order; replacing keeps the place; bad names are refused.
#[test]
fn module_list_and_dict_names() {
    #[derive(Module)]
    struct Model {
        layers: nn::ModuleList<nn::Linear>,
        heads: nn::ModuleDict,
        mixed: nn::ModuleList,
    }
    let d = dev();
    let mut heads = nn::ModuleDict::new();
    let lin = |i, o, b| nn::Linear::new(d, i, o, b).unwrap();
    assert!(heads
        .insert("score", Box::new(lin(4, 1, false)) as Box<dyn Forward>)
        .unwrap()
        .is_none());
    heads.insert("classify", Box::new(lin(4, 3, true))).unwrap();
    // Replacing keeps the position (as assigning to a PyTorch ModuleDict key).
    let old = heads.insert("score", Box::new(lin(4, 2, false))).unwrap();
    assert!(old.is_some());
    // add_module's words.
    for (bad, words) in [
        ("", "module name can't be empty string \"\""),
        ("a.b", "module name can't contain \".\", got: a.b"),
    ] {
        let Err(e) = heads.insert(bad, Box::new(nn::ReLU)) else {
            panic!("{bad:?} accepted");
        };
        assert!(e.to_string().contains(words), "{e}");
    }
    let mut mixed = nn::ModuleList::new();
    mixed.push(Box::new(nn::ReLU) as Box<dyn Forward>);
    mixed.push(Box::new(nn::BatchNorm1d::new(d, 4).unwrap()));
    let mut m = Model {
        layers: (0..2).map(|_| lin(4, 4, true)).collect(),
        heads,
        mixed,
    };
    assert_eq!(
        names(m.state_dict()),
        [
            "layers.0.weight",
            "layers.0.bias",
            "layers.1.weight",
            "layers.1.bias",
            "heads.score.weight",
            "heads.classify.weight",
            "heads.classify.bias",
            "mixed.1.weight",
            "mixed.1.bias",
            "mixed.1.running_mean",
            "mixed.1.running_var",
            "mixed.1.num_batches_tracked",
        ]
    );
    assert_eq!(m.heads.keys().collect::<Vec<_>>(), ["score", "classify"]);
    assert_eq!(m.heads["score"].state_dict()[0].1.shape(), &[2, 4]);
    assert!(m.heads.get("missing").is_none() && m.heads.contains_key("classify"));
    assert_eq!(m.layers[1].weight.shape(), &[4, 4]);
    let x = Tensor::ones(d, &[3, 4], DType::F32).unwrap();
    assert_eq!(m.heads["classify"].forward(&x).unwrap().shape(), &[3, 3]);
    m.eval();
    assert!(!m.mixed[1].is_training());
    assert!(m.heads.remove("score").is_some());
    assert_eq!(names(m.heads.state_dict())[0], "classify.weight");
}

/// `eval()` on containers of layers without flags of their own (Linear, ReLU) reads back as not
/// training, as PyTorch's `Sequential(Linear, ReLU).eval().training` is False; `train()` turns
/// it back, and a nested container follows its parent.
#[test]
fn containers_carry_their_own_training_flag() {
    let d = dev();
    let mut seq = nn::Sequential::new()
        .push(nn::Linear::new(d, 2, 3, true).unwrap())
        .push(nn::ReLU)
        .push(nn::Sequential::new().push(nn::Linear::new(d, 3, 1, false).unwrap()));
    assert!(seq.is_training());
    seq.eval();
    assert!(!seq.is_training());
    assert!(!seq.get_as::<nn::Sequential>(2).unwrap().is_training());
    seq.train();
    assert!(seq.is_training() && seq.get_as::<nn::Sequential>(2).unwrap().is_training());
    let mut list: nn::ModuleList<nn::Linear> = vec![nn::Linear::new(d, 2, 2, true).unwrap()].into();
    list.eval();
    assert!(!list.is_training());
    let mut dict: nn::ModuleDict<nn::Linear> = nn::ModuleDict::new();
    dict.insert("a", nn::Linear::new(d, 2, 2, true).unwrap())
        .unwrap();
    dict.set_training(false);
    assert!(!dict.is_training());
    dict.train();
    assert!(dict.is_training());
}

/// Sequential: `seq[i]` runs one layer, `get_as` gives a layer as its own type (mutably too),
/// out-of-range and wrong-type lookups are `None`.
#[test]
fn sequential_indexing() {
    let mut seq = cnn();
    assert_eq!(seq.len(), 9);
    let x = wgtensor::ops::randn(dev(), &[2, 1, 8, 8], DType::F32).unwrap();
    let y0 = seq[0].forward(&x).unwrap();
    let conv: &nn::Conv2d = seq.get_as(0).unwrap();
    let want = vals(&conv2d(&x, &conv.weight, conv.bias.as_ref(), &conv.options).unwrap());
    assert_eq!(vals(&y0), want);
    assert!(
        seq.get_as::<nn::Linear>(0).is_none(),
        "a Conv2d is not a Linear"
    );
    assert!(seq.get(9).is_none() && seq.get_as::<nn::Linear>(9).is_none());
    assert_eq!(
        seq.get_as::<nn::Linear>(8).unwrap().weight.shape(),
        &[3, 16]
    );
    seq.get_as_mut::<nn::Dropout>(7).unwrap().p = 0.25;
    seq[7].eval();
    let drop: &nn::Dropout = seq.get_as(7).unwrap();
    assert_eq!((drop.p, drop.training), (0.25, false));
    assert!(seq.get_mut(1).is_some());
    assert_eq!(seq.iter().count(), 9);
    let mut s = nn::Sequential::new();
    s.append(nn::ReLU).append(nn::Tanh);
    assert_eq!(s.len(), 2);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = &s[2];
    }));
    assert!(r.is_err(), "past the end panics, as a slice");
}

/// The attributes and field kinds beyond the CNN: a training flag, rename, tuple structs,
/// generic structs, `Box<dyn Forward>`, arrays, Vec<Tensor> (a parameter list), tied weights
/// (listed once by named_parameters, under both names in the state dict), the root path.
#[test]
fn derive_attributes_and_field_kinds() {
    #[derive(wgtensor::Module)]
    struct Pair(nn::Linear, #[module(skip)] (), nn::Linear);

    #[derive(Module)]
    struct Wrap<M: Module> {
        inner: M,
        #[module(rename = "0")]
        first: Box<dyn Forward>,
        arr: [nn::Linear; 2],
        gains: Vec<Tensor>,
        #[module(buffer)]
        mask: Option<Tensor>,
        #[module(training)]
        training: bool,
    }

    // A where clause as rustfmt writes it, with a trailing comma.
    #[derive(Module)]
    struct Bounded<M>
    where
        M: Module,
    {
        inner: M,
    }

    let d = dev();
    let lin = || nn::Linear::new(d, 2, 2, false).unwrap();
    let bounded = Bounded { inner: lin() };
    assert_eq!(names(bounded.state_dict()), ["inner.weight"]);
    let shared = lin();
    let pair = Pair(shared.clone(), (), shared);
    assert_eq!(names(pair.state_dict()), ["0.weight", "2.weight"]);
    assert_eq!(names(pair.named_parameters()), ["0.weight"], "tied: once");
    // Two leaves over one buffer are two parameters (PyTorch dedups by Parameter object).
    let a = lin();
    let mut b = lin();
    b.weight = a.weight.detach().requires_grad().unwrap();
    let two = Pair(a, (), b);
    assert_eq!(names(two.named_parameters()), ["0.weight", "2.weight"]);
    let gain = || {
        Tensor::ones(d, &[2], DType::F32)
            .unwrap()
            .requires_grad()
            .unwrap()
    };
    let mut w = Wrap {
        inner: pair,
        first: Box::new(nn::Dropout::new(0.1)),
        arr: [lin(), lin()],
        gains: vec![gain(), gain()],
        mask: Some(Tensor::ones(d, &[2], DType::F32).unwrap()),
        training: true,
    };
    assert_eq!(
        names(w.state_dict()),
        [
            "mask",
            "inner.0.weight",
            "inner.2.weight",
            "arr.0.weight",
            "arr.1.weight",
            "gains.0",
            "gains.1",
        ]
    );
    assert_eq!(names(w.named_buffers()), ["mask"]);
    w.eval();
    assert!(!w.training && !w.is_training());
    w.train();
    assert!(w.training);
    w.mask = None;
    assert!(w.named_buffers().is_empty());
}

/// Sequential's and ModuleList's insert / pop / extend, as PyTorch's: the names renumber.
#[test]
fn containers_insert_and_pop() {
    let d = dev();
    let mut seq = nn::Sequential::new()
        .push(nn::Linear::new(d, 2, 3, true).unwrap())
        .push(nn::Linear::new(d, 3, 1, false).unwrap());
    seq.insert(1, nn::ReLU).unwrap();
    let keys: Vec<String> = seq.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(keys, ["0.weight", "0.bias", "2.weight"]);
    let e = seq.insert(4, nn::ReLU).unwrap_err().to_string();
    assert!(e.contains("Index out of range: 4"), "{e}");
    let x = Tensor::ones(d, &[4, 2], DType::F32).unwrap();
    assert_eq!(seq.forward(&x).unwrap().shape(), &[4, 1]);
    let relu = seq.pop(1).expect("the ReLU");
    assert_eq!(relu.forward(&x).unwrap().shape(), &[4, 2]);
    assert!(seq.pop(2).is_none());
    let keys: Vec<String> = seq.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(keys, ["0.weight", "0.bias", "1.weight"]);
    // A popped layer put back (PyTorch's s.insert(1, s.pop(0))) is still its own type, and
    // so is one appended boxed.
    let first = seq.pop(0).expect("the first Linear");
    seq.insert(1, first).unwrap();
    assert_eq!(seq.get_as::<nn::Linear>(1).unwrap().weight.shape(), &[3, 2]);
    assert!(seq.get_as::<nn::ReLU>(1).is_none());
    // The box itself is a type to ask for too.
    let boxed: Box<dyn Forward> = Box::new(nn::ReLU);
    seq.insert(0, boxed).unwrap();
    assert!(seq.get_as::<Box<dyn Forward>>(0).is_some());
    assert!(seq.get_as::<nn::ReLU>(0).is_some());
    assert!(seq.pop(0).is_some());
    seq.get_as_mut::<nn::Linear>(1).unwrap().bias = None;
    let boxed: Box<dyn Forward> = Box::new(nn::Linear::new(d, 1, 4, true).unwrap());
    seq.append(boxed);
    assert_eq!(seq.get_as::<nn::Linear>(2).unwrap().weight.shape(), &[4, 1]);
    let keys: Vec<String> = seq.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(keys, ["0.weight", "1.weight", "2.weight", "2.bias"]);

    let mut list: nn::ModuleList<nn::Linear> = nn::ModuleList::new();
    list.extend((0..2).map(|_| nn::Linear::new(d, 2, 2, false).unwrap()));
    list.insert(0, nn::Linear::new(d, 2, 5, false).unwrap())
        .unwrap();
    assert_eq!(list[0].weight.shape(), &[5, 2]);
    assert!(list
        .insert(9, nn::Linear::new(d, 2, 2, false).unwrap())
        .is_err());
    assert_eq!(list.pop(0).unwrap().weight.shape(), &[5, 2]);
    assert_eq!(list.len(), 2);
    assert!(list.pop(2).is_none());
}
