//! State dicts: PyTorch's names and order, safetensors save and load into a fresh model
//! (strict and not), detached entries, trainable parameters, `num_batches_tracked`.

use super::*;

#[test]
fn state_dict_names_follow_pytorch() {
    let m = cnn();
    let names: Vec<String> = m.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "0.weight",
            "0.bias",
            "1.weight",
            "1.bias",
            "1.running_mean",
            "1.running_var",
            "1.num_batches_tracked",
            "4.weight",
            "8.weight",
            "8.bias",
        ]
    );
    let params: Vec<String> = m.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(params.len(), 7);
    assert_eq!(m.num_parameters(), 4 * 9 + 4 + 4 + 4 + 4 * 9 + 16 * 3 + 3);
}

#[test]
fn save_and_load_into_a_fresh_model() {
    let mut m = cnn();
    let x = wgtensor::ops::randn(dev(), &[4, 1, 8, 8], DType::F32).unwrap();
    m.forward(&x).unwrap(); // updates running stats and the counter
    m.set_training(false);
    let want = vals(&m.forward(&x).unwrap());
    let sd = m.state_dict();
    let refs: Vec<(&str, &Tensor)> = sd.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let bytes = save_safetensors(&refs).unwrap();
    let mut fresh = cnn();
    fresh.set_training(false);
    assert_ne!(vals(&fresh.forward(&x).unwrap()), want);
    let src = load_safetensors(dev(), &bytes).unwrap();
    let report = nn::load_state_dict(&mut fresh, &src, true).unwrap();
    assert!(
        report.missing.is_empty() && report.unexpected.is_empty(),
        "{report:?}"
    );
    assert_eq!(vals(&fresh.forward(&x).unwrap()), want);
    // The counter is an integer scalar, as PyTorch's (int64 there, i32 here).
    let counter: Vec<i32> = fresh
        .state_dict()
        .into_iter()
        .filter(|(n, _)| n == "1.num_batches_tracked")
        .map(|(_, t)| t.to_vec::<i32>().unwrap()[0])
        .collect();
    assert_eq!(counter, vec![1]);
    // Strict loading of a partial dict fails naming the missing keys; non-strict reports them.
    let mut partial = src.clone();
    partial.remove("8.bias");
    let e = nn::load_state_dict(&mut cnn(), &partial, true).unwrap_err();
    assert!(e.to_string().contains("8.bias"), "{e}");
    assert!(
        e.to_string()
            .contains("Error(s) in loading state_dict for Sequential:"),
        "{e}"
    );
    let r = nn::load_state_dict(&mut cnn(), &partial, false).unwrap();
    assert_eq!(r.missing, vec!["8.bias".to_string()]);
    // As PyTorch: missing keys in the model's state-dict order, its error wording.
    let mut lin = nn::Linear::new(dev(), 2, 2, true).unwrap();
    let r = nn::load_state_dict(&mut lin, &std::collections::HashMap::new(), false).unwrap();
    assert_eq!(r.missing, ["weight", "bias"]);
    let e = nn::load_state_dict(&mut lin, &std::collections::HashMap::new(), true)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("Error(s) in loading state_dict for Linear:\n\tMissing key(s) in state_dict: \"weight\", \"bias\". "),
        "{e}"
    );
}

/// Layer parameters are tracked (PyTorch's parameters require grad): a loss through a model
/// has gradients for every parameter; under no_grad nothing is recorded.
#[test]
fn parameters_are_tracked_and_trainable() {
    let m = cnn();
    assert!(m.named_parameters().iter().all(|(_, t)| t.is_tracked()));
    let x = wgtensor::ops::randn(dev(), &[4, 1, 8, 8], DType::F32).unwrap();
    let y = m.forward(&x).unwrap();
    let loss = y.mul(&y).unwrap().sum_all().unwrap();
    let grads = loss.backward().unwrap();
    for (name, p) in m.named_parameters() {
        let g = grads
            .get(&p)
            .unwrap_or_else(|| panic!("no gradient for {name}"));
        assert_eq!(g.shape(), p.shape(), "{name}");
    }
    let y = wgtensor::no_grad(|| m.forward(&x)).unwrap();
    assert!(!y.is_tracked());
}

/// state_dict entries are detached, as PyTorch's (`keep_vars=False`): nothing recorded, and an
/// in-place copy into one writes the model. Turning requires_grad on over a parameter that is
/// a plain tensor is an error naming it, not a silent no-op.
#[test]
fn state_dict_is_detached_and_plain_parameters_are_named() {
    let d = dev();
    let mut lin = nn::Linear::new(d, 2, 2, true).unwrap();
    let sd = lin.state_dict();
    assert!(sd.iter().all(|(_, t)| !t.is_tracked()));
    let zeros = Tensor::zeros(d, &[2, 2], DType::F32).unwrap();
    sd[0].1.copy_from(&zeros).unwrap();
    assert_eq!(vals(&lin.weight), vec![0.0; 4]);
    assert!(
        lin.weight.is_tracked(),
        "the parameter itself stays trainable"
    );
    lin.weight = Tensor::from_slice(d, &[1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    let e = lin.set_requires_grad(true).unwrap_err().to_string();
    assert!(e.contains("parameter weight is a plain tensor"), "{e}");
    lin.weight = lin.weight.requires_grad().unwrap();
    lin.set_requires_grad(false).unwrap();
    lin.set_requires_grad(true).unwrap();
    assert!(lin.weight.is_tracked());
    // A parameter that is an op's output is refused before any flag changes.
    let bias = lin.bias.clone().unwrap();
    lin.bias = Some(bias.mul_scalar(2.0).unwrap());
    let e = lin.set_requires_grad(false).unwrap_err().to_string();
    assert!(e.contains("parameter bias") && e.contains("leaf"), "{e}");
    assert!(lin.weight.is_tracked(), "the weight was not frozen");
}

/// num_batches_tracked in a state dict shares the layer's count as PyTorch's buffer does: a
/// dict taken before training shows the count after it (as it shows the running statistics),
/// and loading it back changes nothing, so a cumulative average (momentum None) goes on with
/// the right factor.
#[test]
fn a_state_dict_follows_num_batches_tracked() {
    let cfg = nn::BatchNormConfig {
        momentum: None,
        ..Default::default()
    };
    let mut bn = nn::BatchNorm1d::with_config(dev(), 2, cfg).unwrap();
    let sd: std::collections::HashMap<String, Tensor> = bn.state_dict().into_iter().collect();
    let batch = |a: f32, b: f32| {
        let v: Vec<f32> = (0..4).flat_map(|i| [a + i as f32, b - i as f32]).collect();
        Tensor::from_slice(dev(), &v, &[4, 2]).unwrap()
    };
    bn.forward(&batch(0.0, 4.0)).unwrap(); // channel means 1.5 and 2.5
    assert_eq!(sd["num_batches_tracked"].to_vec::<i32>().unwrap(), vec![1]);
    nn::load_state_dict(&mut bn, &sd, true).unwrap();
    assert_eq!(bn.0.state.borrow().num_batches_tracked, 1);
    bn.forward(&batch(4.0, 8.0)).unwrap(); // means 5.5 and 6.5
    let mean = bn.0.state.borrow().running_mean.to_vec::<f32>().unwrap();
    assert_eq!(mean, vec![3.5, 4.5], "the average of both batches");
    assert_eq!(sd["num_batches_tracked"].to_vec::<i32>().unwrap(), vec![2]);
    // A count set through the public state shows at the next state_dict().
    bn.0.state.borrow_mut().num_batches_tracked = 7;
    let sd2: std::collections::HashMap<String, Tensor> = bn.state_dict().into_iter().collect();
    assert_eq!(sd2["num_batches_tracked"].to_vec::<i32>().unwrap(), vec![7]);
}

/// PyTorch's _BatchNorm.forward counts a training batch before F.batch_norm checks it: a
/// refused batch (one value per channel) still counts, so a cumulative average weighs the next
/// batch 1/2 (PyTorch: running_mean = batch mean / 2 after one refused and one good batch); the
/// count reaches a state dict taken before.
#[test]
fn a_refused_training_batch_still_counts() {
    let cfg = nn::BatchNormConfig {
        momentum: None,
        ..Default::default()
    };
    let bn = nn::BatchNorm1d::with_config(dev(), 2, cfg).unwrap();
    let sd: std::collections::HashMap<String, Tensor> = bn.state_dict().into_iter().collect();
    let one = Tensor::zeros(dev(), &[1, 2], DType::F32).unwrap();
    let e = bn.forward(&one).unwrap_err().to_string();
    assert!(e.contains("Expected more than 1 value per channel"), "{e}");
    assert_eq!(bn.0.state.borrow().num_batches_tracked, 1);
    assert_eq!(sd["num_batches_tracked"].to_vec::<i32>().unwrap(), vec![1]);
    let x = Tensor::from_slice(dev(), &[1.0f32, 4.0, 3.0, 8.0], &[2, 2]).unwrap();
    bn.forward(&x).unwrap();
    let mean = bn.0.state.borrow().running_mean.to_vec::<f32>().unwrap();
    assert_eq!(mean, vec![1.0, 3.0]);
    // A wrong rank is the layer's own check, before the count.
    assert!(bn
        .forward(&Tensor::zeros(dev(), &[2], DType::F32).unwrap())
        .is_err());
    assert_eq!(bn.0.state.borrow().num_batches_tracked, 2);
}

/// `load_state_dict_async` (the browser's way to restore counters) loads what the method loads,
/// the count included, and refuses what it refuses, changing nothing.
#[test]
fn load_state_dict_async_restores_the_count_too() {
    let cfg = nn::BatchNormConfig {
        momentum: None,
        ..Default::default()
    };
    let src = nn::BatchNorm1d::with_config(dev(), 2, cfg).unwrap();
    src.0.state.borrow_mut().num_batches_tracked = 9;
    src.0
        .state
        .borrow()
        .running_mean
        .copy_from(&Tensor::full(dev(), &[2], 1.0, DType::F32).unwrap())
        .unwrap();
    let sd: std::collections::HashMap<String, Tensor> = src.state_dict().into_iter().collect();
    let mut bn = nn::BatchNorm1d::with_config(dev(), 2, cfg).unwrap();
    let r = pollster::block_on(nn::load_state_dict_async(&mut bn, &sd, true)).unwrap();
    assert!(r.missing.is_empty() && r.unexpected.is_empty());
    assert_eq!(bn.0.state.borrow().num_batches_tracked, 9);
    // The tenth batch weighs 1/10 against the loaded mean of 1.
    let x = Tensor::from_slice(dev(), &[11.0f32, 21.0, 11.0, 21.0], &[2, 2]).unwrap();
    bn.forward(&x).unwrap();
    let mean = bn.0.state.borrow().running_mean.to_vec::<f32>().unwrap();
    assert_eq!(mean, vec![2.0, 3.0]);
    // A bad entry: an error, nothing written (the count stays 10).
    let mut bad = sd.clone();
    bad.insert(
        "weight".into(),
        Tensor::zeros(dev(), &[3], DType::F32).unwrap(),
    );
    let e = pollster::block_on(nn::load_state_dict_async(&mut bn, &bad, true)).unwrap_err();
    assert!(e.to_string().contains("size mismatch for weight"), "{e}");
    assert_eq!(bn.0.state.borrow().num_batches_tracked, 10);
}

/// Loading visits a module's own parameters, then its buffers, then its children, whatever
/// order its fields come in (PyTorch's `_load_from_state_dict` before the recursion): missing
/// keys are listed in state-dict order and a tied tensor ends with the child's entry.
#[test]
fn loading_follows_state_dict_order() {
    #[derive(Module)]
    struct Net {
        head: nn::Linear,
        tied: Tensor,
        #[module(buffer)]
        b: Tensor,
    }
    let head = nn::Linear::new(dev(), 2, 2, false).unwrap();
    let tied = head.weight.clone();
    let mut net = Net {
        head,
        tied,
        b: Tensor::zeros(dev(), &[1], DType::F32).unwrap(),
    };
    let keys: Vec<String> = net.state_dict().into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["tied", "b", "head.weight"]);
    let r = net
        .load_state_dict(&std::collections::HashMap::new(), false)
        .unwrap();
    assert_eq!(r.missing, keys);
    let fill = |v: f64, shape: &[usize]| Tensor::full(dev(), shape, v, DType::F32).unwrap();
    let src = std::collections::HashMap::from([
        ("tied".to_string(), fill(1.0, &[2, 2])),
        ("b".to_string(), fill(2.0, &[1])),
        ("head.weight".to_string(), fill(3.0, &[2, 2])),
    ]);
    net.load_state_dict(&src, true).unwrap();
    assert_eq!(
        vals(&net.tied),
        [3.0; 4],
        "PyTorch writes the child's entry last"
    );
}

/// A size mismatch in PyTorch's words; a counter takes a 0-d or a one-element 1-D entry only.
#[test]
fn size_mismatches_in_pytorch_words() {
    let mut lin = nn::Linear::new(dev(), 2, 2, false).unwrap();
    let src = std::collections::HashMap::from([(
        "weight".to_string(),
        Tensor::zeros(dev(), &[3, 3], DType::F32).unwrap(),
    )]);
    let e = lin.load_state_dict(&src, true).unwrap_err().to_string();
    assert!(
        e.contains(
            "size mismatch for weight: copying a param with shape torch.Size([3, 3]) from \
             checkpoint, the shape in current model is torch.Size([2, 2])."
        ),
        "{e}"
    );
    let mut bn = nn::BatchNorm1d::new(dev(), 2).unwrap();
    let mut sd: std::collections::HashMap<String, Tensor> = bn.state_dict().into_iter().collect();
    for (shape, ok) in [(&[][..], true), (&[1][..], true), (&[1, 1][..], false)] {
        let n = Tensor::from_slice(dev(), &[5i32], shape).unwrap();
        sd.insert("num_batches_tracked".to_string(), n);
        let r = bn.load_state_dict(&sd, true);
        assert_eq!(r.is_ok(), ok, "{shape:?}: {r:?}");
        if !ok {
            let e = r.unwrap_err().to_string();
            assert!(e.contains("size mismatch for num_batches_tracked: copying a param with shape torch.Size([1, 1])"), "{e}");
        }
    }
    assert_eq!(bn.0.state.borrow().num_batches_tracked, 5);
    // A 1-D entry of another length, empty included, is a size mismatch (PyTorch takes
    // `input_param[0]` only when `shape[0] == 1`).
    for n in [0, 2] {
        sd.insert(
            "num_batches_tracked".to_string(),
            Tensor::from_slice(dev(), &[4i32, 9][..n], &[n]).unwrap(),
        );
        let e = bn.load_state_dict(&sd, true).unwrap_err().to_string();
        assert!(
            e.contains(&format!(
                "size mismatch for num_batches_tracked: copying a param with shape \
                 torch.Size([{n}])"
            )),
            "{e}"
        );
        assert_eq!(bn.0.state.borrow().num_batches_tracked, 5);
    }
    let mut m = nn::BatchNorm1d::new(dev(), 2).unwrap();
    let mut sd2: std::collections::HashMap<String, Tensor> = m.state_dict().into_iter().collect();
    sd2.insert(
        "weight".into(),
        Tensor::zeros(dev(), &[0], DType::F32).unwrap(),
    );
    assert!(m.load_state_dict(&sd2, true).is_err());
}

/// Every size mismatch in one error under the class's name, after the strict key lines, as
/// PyTorch collects them; nothing is written. A list of modules is a `ModuleList` there.
#[test]
fn load_errors_collect_every_mismatch() {
    let mut lin = nn::Linear::new(dev(), 3, 5, true).unwrap();
    let before = vals(&lin.weight);
    let z = |s: &[usize]| Tensor::zeros(dev(), s, DType::F32).unwrap();
    let src = std::collections::HashMap::from([
        ("weight".to_string(), z(&[2, 4])),
        ("bias".to_string(), z(&[7])),
    ]);
    let e = lin.load_state_dict(&src, false).unwrap_err().to_string();
    assert!(
        e.contains(
            "Error(s) in loading state_dict for Linear:\n\tsize mismatch for weight: copying a \
             param with shape torch.Size([2, 4]) from checkpoint, the shape in current model is \
             torch.Size([5, 3]).\n\tsize mismatch for bias: copying a param with shape \
             torch.Size([7]) from checkpoint, the shape in current model is torch.Size([5])."
        ),
        "{e}"
    );
    // Strict: the missing key first, then the mismatch.
    let src = std::collections::HashMap::from([("weight".to_string(), z(&[2, 4]))]);
    let e = lin.load_state_dict(&src, true).unwrap_err().to_string();
    assert!(
        e.contains(
            "for Linear:\n\tMissing key(s) in state_dict: \"bias\". \n\tsize mismatch for \
             weight"
        ),
        "{e}"
    );
    // A good entry beside a bad one is not written.
    let src = std::collections::HashMap::from([
        ("weight".to_string(), z(&[5, 3])),
        ("bias".to_string(), z(&[7])),
    ]);
    assert!(lin.load_state_dict(&src, true).is_err());
    assert_eq!(vals(&lin.weight), before);
    let mut list = vec![nn::Linear::new(dev(), 2, 2, true).unwrap()];
    let e = list
        .load_state_dict(&Default::default(), true)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("Error(s) in loading state_dict for ModuleList:"),
        "{e}"
    );
    let mut arr = [nn::Linear::new(dev(), 2, 2, true).unwrap()];
    let e = arr
        .load_state_dict(&Default::default(), true)
        .unwrap_err()
        .to_string();
    assert!(e.contains("for ModuleList:"), "{e}");
    // A list of tensors is PyTorch's ParameterList.
    let mut ps = vec![Tensor::zeros(dev(), &[2], DType::F32)
        .unwrap()
        .requires_grad()
        .unwrap()];
    let e = ps
        .load_state_dict(&Default::default(), true)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("Error(s) in loading state_dict for ParameterList:"),
        "{e}"
    );
    // io::load_state_dict collects them too, without a class name.
    let targets = [("a", &lin.weight), ("b", &lin.bias.clone().unwrap())];
    let src =
        std::collections::HashMap::from([("a".to_string(), z(&[1])), ("b".to_string(), z(&[2]))]);
    let e = wgtensor::io::load_state_dict(&targets, &src, true)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("Error(s) in loading state_dict:\n\tsize mismatch for a")
            && e.contains("\n\tsize mismatch for b"),
        "{e}"
    );
}

/// A count written through a state-dict entry (`copy_from`, `io::load_state_dict` with the
/// entries as targets) becomes the layer's, as PyTorch's buffer is that tensor: the next state
/// dict shows it and training counts on from it.
#[test]
fn a_count_written_through_the_state_dict_is_the_layers() {
    let cfg = nn::BatchNormConfig {
        momentum: None,
        ..Default::default()
    };
    let mut bn = nn::BatchNorm1d::with_config(dev(), 2, cfg).unwrap();
    let sd = bn.state_dict();
    let entry = |sd: &[(String, Tensor)]| {
        let (_, t) = sd.iter().find(|(n, _)| n == "num_batches_tracked").unwrap();
        t.clone()
    };
    let five = Tensor::from_slice(dev(), &[5i32], &[]).unwrap();
    entry(&sd).copy_from(&five).unwrap();
    // eval() and train() change no buffer; a state dict shows the written count.
    bn.eval();
    bn.train();
    assert_eq!(entry(&sd).to_vec::<i32>().unwrap(), [5]);
    assert_eq!(entry(&bn.state_dict()).to_vec::<i32>().unwrap(), [5]);
    assert_eq!(bn.named_parameters().len(), 2);
    // A source without the counter still loads strictly (the count is kept); one with it
    // sets the count at once, in eval too.
    let without: std::collections::HashMap<String, Tensor> = bn
        .state_dict()
        .into_iter()
        .filter(|(n, _)| n != "num_batches_tracked")
        .map(|(n, t)| (n, t.deep_clone().unwrap()))
        .collect();
    let report = bn.load_state_dict(&without, true).unwrap();
    assert!(report.missing.is_empty(), "{report:?}");
    assert_eq!(entry(&bn.state_dict()).to_vec::<i32>().unwrap(), [5]);
    let mut with = without.clone();
    let nine = Tensor::from_slice(dev(), &[9i32], &[]).unwrap();
    with.insert("num_batches_tracked".to_string(), nine);
    bn.eval();
    entry(&sd).copy_from(&five).unwrap();
    bn.load_state_dict(&with, true).unwrap();
    assert_eq!(bn.0.state.borrow().num_batches_tracked, 9);
    assert_eq!(entry(&sd).to_vec::<i32>().unwrap(), [9]);
    entry(&sd).copy_from(&five).unwrap();
    bn.train();
    let x = Tensor::from_slice(dev(), &[1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    bn.forward(&x).unwrap();
    assert_eq!(bn.0.state.borrow().num_batches_tracked, 6);
    // io::load_state_dict with the state dict's entries as targets.
    let sd = bn.state_dict();
    let targets: Vec<(&str, &Tensor)> = sd.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut src: std::collections::HashMap<String, Tensor> = sd
        .iter()
        .map(|(n, t)| (n.clone(), t.deep_clone().unwrap()))
        .collect();
    src.insert("num_batches_tracked".to_string(), five);
    wgtensor::io::load_state_dict(&targets, &src, true).unwrap();
    bn.forward(&x).unwrap();
    assert_eq!(bn.0.state.borrow().num_batches_tracked, 6);
}
