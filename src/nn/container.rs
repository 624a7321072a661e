//! The containers, with PyTorch's child names: [`Sequential`] (`0`, `1`, ... applied in
//! order), [`ModuleList`] (`0`, `1`, ...) and [`ModuleDict`] (by key, in insertion order).

use std::any::Any;
use std::ops::{Index, IndexMut};

use super::{Forward, Module, ModuleField, Visitor, VisitorMut};
use crate::{Error, Result, Tensor};

/// A layer of a [`Sequential`]: a [`Forward`] that can be handed out as a module and looked at
/// as its own type. (`Box<dyn Layer>` is a `Layer` too: call these on `**box`, the layer.)
trait Layer: Forward {
    fn as_forward(&self) -> &(dyn Forward + 'static);
    fn as_forward_mut(&mut self) -> &mut (dyn Forward + 'static);
    fn as_module(&self) -> &dyn Module;
    fn as_module_mut(&mut self) -> &mut dyn Module;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Forward + 'static> Layer for T {
    fn as_forward(&self) -> &(dyn Forward + 'static) {
        self
    }
    fn as_forward_mut(&mut self) -> &mut (dyn Forward + 'static) {
        self
    }
    fn as_module(&self) -> &dyn Module {
        self
    }
    fn as_module_mut(&mut self) -> &mut dyn Module {
        self
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// `items.insert(index, item)` for the containers' `insert`: an index past the end is an
/// error naming `op`, where `Vec::insert` would panic.
fn insert_at<T>(op: &'static str, items: &mut Vec<T>, index: usize, item: T) -> Result<()> {
    if index > items.len() {
        return Err(Error::arg(
            op,
            format!(
                "Index out of range: {index} (a container of {} entries)",
                items.len()
            ),
        ));
    }
    items.insert(index, item);
    Ok(())
}

/// Layers applied in order, named `0`, `1`, ... as PyTorch's `nn.Sequential`; indexable
/// (`seq[1]` is the second layer as a [`Forward`]; [`get_as`](Sequential::get_as) gives it as
/// its own type).
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{self, Forward, Module};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let mlp = nn::Sequential::new()
///     .push(nn::Linear::new(&dev, 4, 8, true)?)
///     .push(nn::ReLU)
///     .push(nn::Linear::new(&dev, 8, 2, true)?);
/// let names: Vec<String> = mlp.state_dict().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["0.weight", "0.bias", "2.weight", "2.bias"]); // PyTorch's keys
/// assert_eq!(mlp.forward(&Tensor::zeros(&dev, &[3, 4], DType::F32)?)?.shape(), &[3, 2]);
/// let h = mlp[0].forward(&Tensor::zeros(&dev, &[3, 4], DType::F32)?)?; // the first layer alone
/// assert_eq!(h.shape(), &[3, 8]);
/// let last: &nn::Linear = mlp.get_as(2).unwrap(); // typed access
/// assert_eq!(last.weight.shape(), &[2, 8]);
/// # Ok(()) }
/// ```
pub struct Sequential {
    layers: Vec<Box<dyn Layer>>,
    // The container's own `training`, as every PyTorch module has one: `eval()` on a sequence
    // of layers without flags (Linear, ReLU) still reads back as not training.
    training: bool,
}

impl Default for Sequential {
    fn default() -> Self {
        Sequential::new()
    }
}

impl Sequential {
    /// An empty sequence, in training mode.
    pub fn new() -> Sequential {
        Sequential {
            layers: Vec::new(),
            training: true,
        }
    }

    /// Appends a layer (builder style).
    pub fn push(mut self, layer: impl Forward + 'static) -> Sequential {
        self.layers.push(Box::new(layer));
        self
    }

    /// Appends a layer in place (PyTorch's `append`).
    pub fn append(&mut self, layer: impl Forward + 'static) -> &mut Sequential {
        self.layers.push(Box::new(layer));
        self
    }

    /// Inserts a layer before position `index` (PyTorch's `insert`); the later layers move
    /// up one name (`1` becomes `2`), as PyTorch renumbers. An index past the end is an error.
    pub fn insert(&mut self, index: usize, layer: impl Forward + 'static) -> Result<()> {
        insert_at(
            "Sequential::insert",
            &mut self.layers,
            index,
            Box::new(layer),
        )
    }

    /// Removes and returns the layer at `index` (PyTorch's `pop`); the later layers move down
    /// one name. `None` past the end.
    pub fn pop(&mut self, index: usize) -> Option<Box<dyn Forward>> {
        (index < self.layers.len()).then(|| self.layers.remove(index) as Box<dyn Forward>)
    }

    /// The number of layers.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// True when there is no layer.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// The layer at `index`, if there is one.
    pub fn get(&self, index: usize) -> Option<&dyn Forward> {
        self.layers.get(index).map(|l| (**l).as_forward())
    }

    /// The layer at `index`, mutably.
    pub fn get_mut(&mut self, index: usize) -> Option<&mut (dyn Forward + 'static)> {
        self.layers.get_mut(index).map(|l| (**l).as_forward_mut())
    }

    /// The layer at `index` as its own type: `None` when there is no layer there or it is
    /// another type. A layer added boxed (a `Box<dyn Forward>`, as [`pop`](Self::pop) returns
    /// it) is its own type here too, as in PyTorch.
    pub fn get_as<T: Forward + 'static>(&self, index: usize) -> Option<&T> {
        let mut layer: &dyn Any = (**self.layers.get(index)?).as_any();
        loop {
            if let Some(t) = layer.downcast_ref::<T>() {
                return Some(t);
            }
            layer = &**layer.downcast_ref::<Box<dyn Forward>>()? as &dyn Any;
        }
    }

    /// The layer at `index` as its own type, mutably.
    pub fn get_as_mut<T: Forward + 'static>(&mut self, index: usize) -> Option<&mut T> {
        let mut layer: &mut dyn Any = (**self.layers.get_mut(index)?).as_any_mut();
        loop {
            if layer.is::<T>() {
                return layer.downcast_mut::<T>();
            }
            layer = &mut **layer.downcast_mut::<Box<dyn Forward>>()? as &mut dyn Any;
        }
    }

    /// The layers in order.
    pub fn iter(&self) -> impl Iterator<Item = &dyn Forward> + '_ {
        self.layers.iter().map(|l| (**l).as_forward())
    }
}

impl Index<usize> for Sequential {
    type Output = dyn Forward;
    /// The layer at `index`; panics past the end, as a slice does.
    fn index(&self, index: usize) -> &(dyn Forward + 'static) {
        let len = self.layers.len();
        match self.layers.get(index) {
            Some(l) => (**l).as_forward(),
            None => panic!("Sequential index {index} out of range for {len} layers"),
        }
    }
}

impl IndexMut<usize> for Sequential {
    /// The layer at `index`, mutable; panics past the end, as a slice does
    /// ([`Sequential::get_mut`] returns an `Option`).
    fn index_mut(&mut self, index: usize) -> &mut (dyn Forward + 'static) {
        let len = self.layers.len();
        match self.layers.get_mut(index) {
            Some(l) => (**l).as_forward_mut(),
            None => panic!("Sequential index {index} out of range for {len} layers"),
        }
    }
}

impl Module for Sequential {
    fn visit(&self, visitor: &mut dyn Visitor) {
        visitor.training(self.training);
        for (i, l) in self.layers.iter().enumerate() {
            visitor.child(&i.to_string(), (**l).as_module());
        }
    }
    fn visit_mut(&mut self, visitor: &mut dyn VisitorMut) {
        visitor.training(&mut self.training);
        for (i, l) in self.layers.iter_mut().enumerate() {
            visitor.child(&i.to_string(), (**l).as_module_mut());
        }
    }
}

impl Forward for Sequential {
    /// Runs the layers in order. An error names the layer that raised it by its index and
    /// type (`1 (Linear): ...`, [`Error::Layer`]; nested containers join their paths), and
    /// [`Error::root`] gives what the op itself reported.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut y = x.clone();
        for (i, l) in self.layers.iter().enumerate() {
            y = l
                .forward(&y)
                .map_err(|e| e.in_layer(&i.to_string(), l.layer_name()))?;
        }
        Ok(y)
    }
}

/// Modules in a list, named `0`, `1`, ... (PyTorch's `nn.ModuleList`): `blocks.0.weight`
/// inside a model. Typed (`ModuleList<Block>`) or, by default, boxed layers of any type
/// (`ModuleList<Box<dyn Forward>>`). It has no forward of its own: the model's forward runs
/// the items as it needs. (A `Vec` field of a `#[derive(Module)]` struct is named the same
/// way.)
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{self, Forward, Module};
/// use wgtensor::Device;
/// let dev = Device::new()?;
/// let layers: nn::ModuleList<nn::Linear> =
///     (0..3).map(|_| nn::Linear::new(&dev, 4, 4, false)).collect::<Result<_, _>>()?;
/// let names: Vec<String> = layers.state_dict().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["0.weight", "1.weight", "2.weight"]);
/// assert_eq!(layers[1].weight.shape(), &[4, 4]);
/// let mut mixed = nn::ModuleList::new(); // ModuleList<Box<dyn Forward>>
/// mixed.push(Box::new(nn::Linear::new(&dev, 4, 4, true)?) as Box<dyn Forward>);
/// mixed.push(Box::new(nn::ReLU));
/// assert_eq!(mixed.len(), 2);
/// # Ok(()) }
/// ```
pub struct ModuleList<M = Box<dyn Forward>> {
    items: Vec<M>,
    // The list's own flag (see `Sequential::training`).
    training: bool,
}

impl<M> ModuleList<M> {
    /// An empty list, in training mode.
    pub fn new() -> ModuleList<M> {
        ModuleList::from(Vec::new())
    }

    /// Appends a module (PyTorch's `append`).
    pub fn push(&mut self, module: M) {
        self.items.push(module);
    }

    /// Inserts a module before position `index` (PyTorch's `insert`); the later ones move up
    /// one name. An index past the end is an error.
    pub fn insert(&mut self, index: usize, module: M) -> Result<()> {
        insert_at("ModuleList::insert", &mut self.items, index, module)
    }

    /// Appends every module of `modules` (PyTorch's `extend`).
    pub fn extend(&mut self, modules: impl IntoIterator<Item = M>) {
        self.items.extend(modules);
    }

    /// Removes and returns the module at `index` (PyTorch's `pop`); `None` past the end.
    pub fn pop(&mut self, index: usize) -> Option<M> {
        (index < self.items.len()).then(|| self.items.remove(index))
    }

    /// The number of modules.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when there is no module.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The module at `index`, if there is one.
    pub fn get(&self, index: usize) -> Option<&M> {
        self.items.get(index)
    }

    /// The module at `index`, mutably.
    pub fn get_mut(&mut self, index: usize) -> Option<&mut M> {
        self.items.get_mut(index)
    }

    /// The modules in order.
    pub fn iter(&self) -> std::slice::Iter<'_, M> {
        self.items.iter()
    }

    /// The modules in order, mutably.
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, M> {
        self.items.iter_mut()
    }
}

impl<M> Default for ModuleList<M> {
    fn default() -> Self {
        ModuleList::new()
    }
}

impl<M> From<Vec<M>> for ModuleList<M> {
    fn from(items: Vec<M>) -> Self {
        ModuleList {
            items,
            training: true,
        }
    }
}

impl<M> FromIterator<M> for ModuleList<M> {
    fn from_iter<I: IntoIterator<Item = M>>(iter: I) -> Self {
        ModuleList::from(iter.into_iter().collect::<Vec<M>>())
    }
}

impl<M> Index<usize> for ModuleList<M> {
    type Output = M;
    /// The module at `index`; panics past the end, as a slice does ([`ModuleList::get`]
    /// returns an `Option`).
    fn index(&self, index: usize) -> &M {
        &self.items[index]
    }
}

impl<M> IndexMut<usize> for ModuleList<M> {
    /// The module at `index`, mutable; panics past the end, as a slice does
    /// ([`ModuleList::get_mut`] returns an `Option`).
    fn index_mut(&mut self, index: usize) -> &mut M {
        &mut self.items[index]
    }
}

impl<'a, M> IntoIterator for &'a ModuleList<M> {
    type Item = &'a M;
    type IntoIter = std::slice::Iter<'a, M>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.iter()
    }
}

impl<'a, M> IntoIterator for &'a mut ModuleList<M> {
    type Item = &'a mut M;
    type IntoIter = std::slice::IterMut<'a, M>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.iter_mut()
    }
}

impl<M: Module> Module for ModuleList<M> {
    fn visit(&self, visitor: &mut dyn Visitor) {
        visitor.training(self.training);
        self.items.visit(visitor)
    }
    fn visit_mut(&mut self, visitor: &mut dyn VisitorMut) {
        visitor.training(&mut self.training);
        self.items.visit_mut(visitor)
    }
}

/// Modules by name, in insertion order (PyTorch's `nn.ModuleDict`): `blocks.name.weight`
/// inside a model. Typed or, by default, boxed layers of any type. A name must be non-empty
/// and hold no `.`, as in PyTorch.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{self, Forward, Module};
/// use wgtensor::Device;
/// let dev = Device::new()?;
/// let mut heads = nn::ModuleDict::new(); // ModuleDict<Box<dyn Forward>>
/// heads.insert("classify", Box::new(nn::Linear::new(&dev, 8, 10, true)?) as Box<dyn Forward>)?;
/// heads.insert("score", Box::new(nn::Linear::new(&dev, 8, 1, false)?))?;
/// let names: Vec<String> = heads.state_dict().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["classify.weight", "classify.bias", "score.weight"]);
/// assert!(heads.get("score").is_some() && heads.insert("a.b", Box::new(nn::ReLU)).is_err());
/// # Ok(()) }
/// ```
pub struct ModuleDict<M = Box<dyn Forward>> {
    entries: Vec<(String, M)>,
    // The dict's own flag (see `Sequential::training`).
    training: bool,
}

impl<M> ModuleDict<M> {
    /// An empty dict, in training mode.
    pub fn new() -> ModuleDict<M> {
        ModuleDict {
            entries: Vec::new(),
            training: true,
        }
    }

    /// Adds `module` as `name` (at the end), or replaces the module of that name in its place
    /// and returns the old one. An empty name or one with a `.` is an error. (PyTorch also
    /// refuses names of the dict's own attributes, `training` or `keys`, which a Rust struct
    /// has no clash with: they are accepted here.)
    pub fn insert(&mut self, name: impl Into<String>, module: M) -> Result<Option<M>> {
        let name = name.into();
        // add_module's two checks, in its words.
        if name.contains('.') {
            return Err(Error::arg(
                "ModuleDict::insert",
                format!("module name can't contain \".\", got: {name}"),
            ));
        }
        if name.is_empty() {
            return Err(Error::arg(
                "ModuleDict::insert",
                "module name can't be empty string \"\"",
            ));
        }
        match self.entries.iter_mut().find(|(n, _)| *n == name) {
            Some((_, m)) => Ok(Some(std::mem::replace(m, module))),
            None => {
                self.entries.push((name, module));
                Ok(None)
            }
        }
    }

    /// Removes and returns the module called `name` (PyTorch's `pop`).
    pub fn remove(&mut self, name: &str) -> Option<M> {
        let i = self.entries.iter().position(|(n, _)| n == name)?;
        Some(self.entries.remove(i).1)
    }

    /// The module called `name`.
    pub fn get(&self, name: &str) -> Option<&M> {
        self.entries.iter().find(|(n, _)| n == name).map(|(_, m)| m)
    }

    /// The module called `name`, mutably.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut M> {
        self.entries
            .iter_mut()
            .find(|(n, _)| n == name)
            .map(|(_, m)| m)
    }

    /// True when a module is called `name`.
    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// The names in insertion order.
    pub fn keys(&self) -> impl Iterator<Item = &str> + '_ {
        self.entries.iter().map(|(n, _)| n.as_str())
    }

    /// Names and modules in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &M)> + '_ {
        self.entries.iter().map(|(n, m)| (n.as_str(), m))
    }

    /// Names and modules in insertion order, the modules mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&str, &mut M)> + '_ {
        self.entries.iter_mut().map(|(n, m)| (n.as_str(), m))
    }

    /// The number of modules.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there is no module.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<M> Default for ModuleDict<M> {
    fn default() -> Self {
        ModuleDict::new()
    }
}

impl<M> Index<&str> for ModuleDict<M> {
    type Output = M;
    /// The module called `name`; panics when there is none, as a `HashMap` does.
    fn index(&self, name: &str) -> &M {
        match self.get(name) {
            Some(m) => m,
            None => panic!("ModuleDict has no module {name:?}"),
        }
    }
}

impl<M: Module> Module for ModuleDict<M> {
    fn visit(&self, visitor: &mut dyn Visitor) {
        visitor.training(self.training);
        for (n, m) in &self.entries {
            m.visit_field(n, visitor);
        }
    }
    fn visit_mut(&mut self, visitor: &mut dyn VisitorMut) {
        visitor.training(&mut self.training);
        for (n, m) in &mut self.entries {
            m.visit_field_mut(n, visitor);
        }
    }
}
