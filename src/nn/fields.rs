//! What the fields of a `#[derive(Module)]` struct can be: [`ModuleField`] (a child module, a
//! parameter, or an `Option`, `Vec` or array of them) and [`BufferField`] (a buffer tensor).

use super::module::{Module, Visitor, VisitorMut};
use crate::Tensor;

/// What a field of a `#[derive(Module)]` struct can be (the derive visits each one under its
/// name): a module (a child), a [`Tensor`] (a parameter), or an `Option` or `Vec` of them.
/// A `Vec` (and an array) is itself a module whose items are named `0`, `1`, ... (PyTorch's
/// `nn.ModuleList` / `nn.ParameterList`), so its entries read `field.0.weight`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a module, a Tensor, or an Option or Vec of them",
    label = "this field holds no parameters the derive knows of",
    note = "mark a field without parameters `#[module(skip)]`, a training flag \
            `#[module(training)]`, a buffer tensor `#[module(buffer)]`"
)]
pub trait ModuleField {
    /// Reports the field, registered as `name`, to `visitor`.
    fn visit_field(&self, name: &str, visitor: &mut dyn Visitor);
    /// Lends the field, registered as `name`, to `visitor` (see [`Module::visit_mut`]).
    fn visit_field_mut(&mut self, name: &str, visitor: &mut dyn VisitorMut);
    /// PyTorch's name of a list of these (its errors' header): `nn.ModuleList`, or
    /// `nn.ParameterList` for tensors.
    #[doc(hidden)]
    fn list_name() -> &'static str
    where
        Self: Sized,
    {
        "ModuleList"
    }
}

impl<M: Module> ModuleField for M {
    fn visit_field(&self, name: &str, visitor: &mut dyn Visitor) {
        visitor.child(name, self);
    }
    fn visit_field_mut(&mut self, name: &str, visitor: &mut dyn VisitorMut) {
        visitor.child(name, self);
    }
}

impl ModuleField for Tensor {
    fn visit_field(&self, name: &str, visitor: &mut dyn Visitor) {
        visitor.parameter(name, self);
    }
    /// A tensor has nothing a [`VisitorMut`] changes.
    fn visit_field_mut(&mut self, _: &str, _: &mut dyn VisitorMut) {}
    fn list_name() -> &'static str {
        "ParameterList"
    }
}

impl<T: ModuleField> ModuleField for Option<T> {
    fn visit_field(&self, name: &str, visitor: &mut dyn Visitor) {
        if let Some(x) = self {
            x.visit_field(name, visitor);
        }
    }
    fn visit_field_mut(&mut self, name: &str, visitor: &mut dyn VisitorMut) {
        if let Some(x) = self {
            x.visit_field_mut(name, visitor);
        }
    }
    fn list_name() -> &'static str {
        T::list_name()
    }
}

// A list of modules is PyTorch's nn.ModuleList (of tensors, its nn.ParameterList), and named
// so in errors (the type name would be `Vec` or `Linear; 3]`).
impl<T: ModuleField> Module for Vec<T> {
    fn visit(&self, visitor: &mut dyn Visitor) {
        self.as_slice().visit_items(visitor);
    }
    fn visit_mut(&mut self, visitor: &mut dyn VisitorMut) {
        self.as_mut_slice().visit_items_mut(visitor);
    }
    fn layer_name(&self) -> &'static str {
        T::list_name()
    }
}

impl<T: ModuleField, const N: usize> Module for [T; N] {
    fn visit(&self, visitor: &mut dyn Visitor) {
        self.as_slice().visit_items(visitor);
    }
    fn visit_mut(&mut self, visitor: &mut dyn VisitorMut) {
        self.as_mut_slice().visit_items_mut(visitor);
    }
    fn layer_name(&self) -> &'static str {
        T::list_name()
    }
}

/// Items named by their index.
trait Items {
    fn visit_items(&self, visitor: &mut dyn Visitor);
    fn visit_items_mut(&mut self, visitor: &mut dyn VisitorMut);
}

impl<T: ModuleField> Items for [T] {
    fn visit_items(&self, visitor: &mut dyn Visitor) {
        for (i, x) in self.iter().enumerate() {
            x.visit_field(&i.to_string(), visitor);
        }
    }
    fn visit_items_mut(&mut self, visitor: &mut dyn VisitorMut) {
        for (i, x) in self.iter_mut().enumerate() {
            x.visit_field_mut(&i.to_string(), visitor);
        }
    }
}

/// What a `#[module(buffer)]` field can be: a [`Tensor`] (a buffer: saved and loaded, not
/// trained) or an `Option` of one.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a buffer: `#[module(buffer)]` takes a Tensor or an Option<Tensor>"
)]
pub trait BufferField {
    /// Reports the buffer, registered as `name`, to `visitor`.
    fn visit_buffer(&self, name: &str, visitor: &mut dyn Visitor);

    /// Reports the buffer as a non-persistent one (`#[module(buffer(persistent = false))]`,
    /// see [`Visitor::transient_buffer`]).
    fn visit_transient_buffer(&self, name: &str, visitor: &mut dyn Visitor);
}

impl BufferField for Tensor {
    fn visit_buffer(&self, name: &str, visitor: &mut dyn Visitor) {
        visitor.buffer(name, self);
    }
    fn visit_transient_buffer(&self, name: &str, visitor: &mut dyn Visitor) {
        visitor.transient_buffer(name, self);
    }
}

impl<T: BufferField> BufferField for Option<T> {
    fn visit_buffer(&self, name: &str, visitor: &mut dyn Visitor) {
        if let Some(x) = self {
            x.visit_buffer(name, visitor);
        }
    }
    fn visit_transient_buffer(&self, name: &str, visitor: &mut dyn Visitor) {
        if let Some(x) = self {
            x.visit_transient_buffer(name, visitor);
        }
    }
}
