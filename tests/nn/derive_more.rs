//! `#[derive(Module)]` beyond plain structs: fields typed through `macro_rules!`, recursive
//! generic models, and non-persistent buffers (PyTorch's `register_buffer(.., persistent=False)`).

use super::*;

// A field type given as a macro argument: the generated `self` and `visitor` must still
// resolve (they are declared by the derive, not by the macro's caller).
macro_rules! head {
    ($name:ident, $t:ty) => {
        #[derive(Module)]
        struct $name {
            fc: $t,
            #[module(buffer)]
            scale: Tensor,
        }
    };
}
head!(Head, nn::Linear);

#[test]
fn a_field_typed_by_a_macro_argument_is_visited() {
    let h = Head {
        fc: nn::Linear::new(dev(), 2, 3, true).unwrap(),
        scale: Tensor::ones(dev(), &[1], DType::F32).unwrap(),
    };
    let names: Vec<String> = h.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["scale", "fc.weight", "fc.bias"]);
}

/// A tree of modules generic over the node layer (PyTorch builds such trees freely).
#[derive(Module)]
struct Tree<M> {
    node: M,
    kids: Vec<Tree<M>>,
}

#[test]
fn a_recursive_generic_model_is_a_module() {
    let leaf = |i: usize| Tree {
        node: nn::Linear::new(dev(), 2, 2, i.is_multiple_of(2)).unwrap(),
        kids: Vec::new(),
    };
    let t = Tree {
        node: nn::Linear::new(dev(), 2, 2, false).unwrap(),
        kids: vec![leaf(0), leaf(1)],
    };
    let names: Vec<String> = t.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "node.weight",
            "kids.0.node.weight",
            "kids.0.node.bias",
            "kids.1.node.weight"
        ]
    );
}

/// A recursive model whose type parameter is only a skipped label: no bound asks for it.
#[derive(Module)]
struct Labeled<T> {
    #[module(skip)]
    label: T,
    l: nn::Linear,
    kids: Vec<Self>,
}

#[test]
fn a_recursive_model_with_a_skipped_generic_field_is_a_module() {
    let node = |label: &str, kids| Labeled {
        label: label.to_string(),
        l: nn::Linear::new(dev(), 1, 1, false).unwrap(),
        kids,
    };
    let t = node("root", vec![node("a", Vec::new())]);
    assert_eq!(t.label, "root");
    let names: Vec<String> = t.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["l.weight", "kids.0.l.weight"]);
}

/// PyTorch:
///
/// ```python
/// class Attn(nn.Module):
///     def __init__(self):
///         super().__init__()
///         self.qkv = nn.Linear(4, 12)
///         self.register_buffer("mask", torch.ones(3, 3).tril(), persistent=False)
///         self.register_buffer("stats", torch.zeros(4))
/// ```
#[derive(Module)]
struct Attn {
    qkv: nn::Linear,
    #[module(buffer(persistent = false))]
    mask: Tensor,
    #[module(buffer)]
    stats: Tensor,
}

#[test]
fn non_persistent_buffers_are_buffers_outside_the_state_dict() {
    let mk = || Attn {
        qkv: nn::Linear::new(dev(), 4, 12, true).unwrap(),
        mask: Tensor::ones(dev(), &[3, 3], DType::F32).unwrap(),
        stats: Tensor::zeros(dev(), &[4], DType::F32).unwrap(),
    };
    let a = mk();
    let names = |v: Vec<(String, Tensor)>| v.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
    assert_eq!(names(a.named_buffers()), ["mask", "stats"]);
    assert_eq!(names(a.state_dict()), ["stats", "qkv.weight", "qkv.bias"]);
    // A PyTorch checkpoint has no "mask": a strict load takes it, and leaves the mask as is;
    // a "mask" entry is unexpected, as PyTorch reports it.
    let mut b = mk();
    let sd: std::collections::HashMap<String, Tensor> = a.state_dict().into_iter().collect();
    let r = b.load_state_dict(&sd, true).unwrap();
    assert!(r.missing.is_empty() && r.unexpected.is_empty());
    assert_eq!(vals(&b.mask), vec![1.0; 9]);
    let mut extra = sd.clone();
    extra.insert(
        "mask".into(),
        Tensor::zeros(dev(), &[3, 3], DType::F32).unwrap(),
    );
    let e = b.load_state_dict(&extra, true).unwrap_err().to_string();
    assert!(
        e.contains("Unexpected key(s) in state_dict: \"mask\""),
        "{e}"
    );
    assert_eq!(vals(&b.mask), vec![1.0; 9]);
}
