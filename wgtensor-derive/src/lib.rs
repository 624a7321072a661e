//! `#[derive(Module)]` for [wgtensor](https://docs.rs/wgtensor): implements
//! `wgtensor::nn::Module` for a struct from its fields, as PyTorch's `nn.Module` registers the
//! attributes a model's `__init__` assigns. Use it through the re-export,
//! `use wgtensor::nn::Module;` (the trait and the derive share the name, as serde's do).
//!
//! Each field is visited under its name, in declaration order:
//!
//! - a module (any type implementing `Module`, `Box<dyn Forward>` included) is a child:
//!   its entries are named `field.weight`, `field.sub.bias`, ...;
//! - a `Tensor` is a parameter named `field`;
//! - an `Option` of either is visited when `Some` (PyTorch's `self.bias = None`);
//! - a `Vec` of either is a list child: items are named `field.0`, `field.1`, ... (PyTorch's
//!   `nn.ModuleList` / `nn.ParameterList`).
//!
//! Any other field type is a compile error naming the field, so that nothing holding parameters
//! is left out by accident. Field attributes:
//!
//! - `#[module(skip)]`: not visited (sizes, options, caches: anything without parameters);
//! - `#[module(buffer)]`: a `Tensor` (or `Option<Tensor>`) field is a buffer, not a parameter
//!   (PyTorch's `register_buffer`): in `state_dict()` and `named_buffers()`, not trained;
//!   `#[module(buffer(persistent = false))]` a non-persistent one (`persistent=False`: a causal
//!   mask, rotary frequencies), in `named_buffers()` but neither saved nor loaded;
//! - `#[module(training)]`: a `bool` field is this module's training flag, set by `train()` /
//!   `eval()`;
//! - `#[module(rename = "name")]`: the state-dict name when it differs from the field's.
//!
//! On the struct, `#[module(crate = "path")]` names the wgtensor crate when it is not
//! `::wgtensor` (a crate that re-exports it).

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Fields, LitStr};

/// Implements `wgtensor::nn::Module` (`visit` and `visit_mut`) from the struct's fields; see
/// the crate documentation for the field rules and the `#[module(...)]` attributes.
#[proc_macro_derive(Module, attributes(module))]
pub fn derive_module(input: proc_macro::TokenStream) -> proc_macro::TokenStream {
    let input = syn::parse_macro_input!(input as DeriveInput);
    expand(input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// What a field is to the module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A child, a parameter, or an `Option` / `Vec` of them (`ModuleField`).
    Field,
    /// `#[module(buffer)]` (`BufferField`); `false` for `buffer(persistent = false)`, not in
    /// the state dict.
    Buffer(bool),
    /// `#[module(training)]`: a `bool` flag.
    Training,
    /// `#[module(skip)]`.
    Skip,
}

struct FieldSpec {
    /// How the field is accessed: `self.#access`.
    access: TokenStream,
    /// The state-dict name.
    name: String,
    role: Role,
    ty: syn::Type,
    span: Span,
}

/// The `#[module(...)]` attributes of one field.
fn field_attrs(attrs: &[syn::Attribute]) -> syn::Result<(Role, Option<LitStr>)> {
    let mut role: Option<(Role, &str)> = None;
    let mut rename = None;
    for attr in attrs.iter().filter(|a| a.path().is_ident("module")) {
        attr.parse_nested_meta(|meta| {
            let r = if meta.path.is_ident("skip") {
                (Role::Skip, "skip")
            } else if meta.path.is_ident("buffer") {
                let mut persistent = true;
                if meta.input.peek(syn::token::Paren) {
                    meta.parse_nested_meta(|inner| {
                        if inner.path.is_ident("persistent") {
                            let lit: syn::LitBool = inner.value()?.parse()?;
                            persistent = lit.value;
                            Ok(())
                        } else {
                            Err(inner.error(
                                "unknown buffer option: expected `persistent = true` or \
                                 `persistent = false`",
                            ))
                        }
                    })?;
                }
                (Role::Buffer(persistent), "buffer")
            } else if meta.path.is_ident("training") {
                (Role::Training, "training")
            } else if meta.path.is_ident("rename") {
                let lit: LitStr = meta.value()?.parse()?;
                if rename.is_some() {
                    return Err(meta.error("`rename` given twice"));
                }
                check_name(&lit)?;
                rename = Some(lit);
                return Ok(());
            } else {
                return Err(meta.error(
                    "unknown module attribute: expected `skip`, `buffer`, `training` or \
                     `rename = \"...\"`",
                ));
            };
            if let Some((_, prev)) = role {
                return Err(meta.error(format!(
                    "a field is one of `skip`, `buffer`, `training`; this one is already `{prev}`"
                )));
            }
            role = Some(r);
            Ok(())
        })?;
    }
    let role = role.map_or(Role::Field, |(r, _)| r);
    if let (Role::Skip | Role::Training, Some(lit)) = (role, &rename) {
        return Err(syn::Error::new(
            lit.span(),
            "`rename` names a parameter, buffer or child; this field has no state-dict name",
        ));
    }
    Ok((role, rename))
}

/// State-dict names are joined with dots: a name may not be empty or hold one (PyTorch refuses
/// both too).
fn check_name(lit: &LitStr) -> syn::Result<()> {
    let v = lit.value();
    if v.is_empty() || v.contains('.') {
        return Err(syn::Error::new(
            lit.span(),
            "a module entry's name must be non-empty and contain no \".\"",
        ));
    }
    Ok(())
}

/// The struct-level `#[module(crate = "path")]`.
fn crate_path(attrs: &[syn::Attribute]) -> syn::Result<syn::Path> {
    let mut path = None;
    for attr in attrs.iter().filter(|a| a.path().is_ident("module")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("crate") {
                let lit: LitStr = meta.value()?.parse()?;
                path = Some(lit.parse::<syn::Path>()?);
                Ok(())
            } else {
                Err(meta.error(
                    "unknown module attribute on a struct: expected `crate = \"...\"` (field \
                     attributes go on the fields)",
                ))
            }
        })?;
    }
    Ok(path.unwrap_or_else(|| syn::parse_quote!(::wgtensor)))
}

fn fields(data: &Data) -> syn::Result<Vec<FieldSpec>> {
    let s =
        match data {
            Data::Struct(s) => s,
            Data::Enum(e) => return Err(syn::Error::new(
                e.enum_token.span(),
                "#[derive(Module)] is for structs (a model's fields); implement Module by hand \
                 for an enum",
            )),
            Data::Union(u) => {
                return Err(syn::Error::new(
                    u.union_token.span(),
                    "#[derive(Module)] is for structs",
                ))
            }
        };
    let mut out = Vec::new();
    match &s.fields {
        Fields::Named(named) => {
            for f in &named.named {
                let ident = f.ident.as_ref().expect("named field");
                let (role, rename) = field_attrs(&f.attrs)?;
                let raw = ident.to_string();
                let name = rename
                    .map(|l| l.value())
                    .unwrap_or_else(|| raw.strip_prefix("r#").unwrap_or(&raw).to_string());
                out.push(FieldSpec {
                    access: quote!(#ident),
                    name,
                    role,
                    ty: f.ty.clone(),
                    span: f.ty.span(),
                });
            }
        }
        Fields::Unnamed(unnamed) => {
            for (i, f) in unnamed.unnamed.iter().enumerate() {
                let (role, rename) = field_attrs(&f.attrs)?;
                let index = syn::Index::from(i);
                out.push(FieldSpec {
                    access: quote!(#index),
                    name: rename.map(|l| l.value()).unwrap_or_else(|| i.to_string()),
                    role,
                    ty: f.ty.clone(),
                    span: f.ty.span(),
                });
            }
        }
        Fields::Unit => {}
    }
    let mut seen = std::collections::HashSet::new();
    for f in out
        .iter()
        .filter(|f| matches!(f.role, Role::Field | Role::Buffer(_)))
    {
        if !seen.insert(f.name.clone()) {
            return Err(syn::Error::new(
                f.span,
                format!("two fields are named {:?} in the state dict", f.name),
            ));
        }
    }
    Ok(out)
}

/// The `impl Module` for `input`, or the error to report.
fn expand(input: DeriveInput) -> syn::Result<TokenStream> {
    let krate = crate_path(&input.attrs)?;
    let fields = fields(&input.data)?;
    let nn = quote!(#krate::nn);
    let mut visit = Vec::new();
    let mut visit_mut = Vec::new();
    let mut bounds = Vec::new();
    for f in &fields {
        let (access, name, ty) = (&f.access, &f.name, &f.ty);
        // Errors point at the field's type; `self` and `visitor` resolve at the call site,
        // where the generated methods declare them (the type's own span may come from a
        // `macro_rules!` argument, whose hygiene would hide them).
        let span = f.span.resolved_at(Span::call_site());
        // The trait the field's type must implement, bounded on a generic struct. A field
        // whose type names the struct itself (`Vec<Tree<M>>`, `Vec<Self>`) gets none: that
        // bound would ask for the impl being written (the solver overflows), and the impl's
        // other bounds are what it needs.
        let mut bound = |tr: TokenStream| {
            if !refers_to_self(ty, &input.ident) {
                bounds.push(quote_spanned!(f.span=> #ty: #tr));
            }
        };
        match f.role {
            Role::Skip => {}
            Role::Field => {
                visit.push(quote_spanned! {span=>
                    #nn::ModuleField::visit_field(&self.#access, #name, visitor);
                });
                visit_mut.push(quote_spanned! {span=>
                    #nn::ModuleField::visit_field_mut(&mut self.#access, #name, visitor);
                });
                bound(quote!(#nn::ModuleField));
            }
            Role::Buffer(persistent) => {
                let method = match persistent {
                    true => quote!(visit_buffer),
                    false => quote!(visit_transient_buffer),
                };
                visit.push(quote_spanned! {span=>
                    #nn::BufferField::#method(&self.#access, #name, visitor);
                });
                bound(quote!(#nn::BufferField));
            }
            Role::Training => {
                visit.push(quote_spanned! {span=>
                    #nn::Visitor::training(visitor, self.#access);
                });
                visit_mut.push(quote_spanned! {span=>
                    #nn::VisitorMut::training(visitor, &mut self.#access);
                });
            }
        }
    }
    let ident = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    // A generic struct needs its fields' types bounded (`M: Module` for a `M` field); a plain
    // one gets no bounds, so that an unsupported field type is reported at the field.
    let where_clause = if input.generics.params.is_empty() {
        quote!(#where_clause)
    } else {
        // Each predicate followed by one comma (the user's own trailing comma is not
        // repeated: `where M: Forward,` is how rustfmt writes a multi-line clause).
        let preds = where_clause.map(|w| {
            let p = w.predicates.iter();
            quote!(#(#p,)*)
        });
        quote!(where #preds #(#bounds,)*)
    };
    Ok(quote! {
        #[automatically_derived]
        impl #impl_generics #nn::Module for #ident #ty_generics #where_clause {
            fn visit(&self, visitor: &mut dyn #nn::Visitor) {
                let _ = &visitor;
                #(#visit)*
            }
            fn visit_mut(&mut self, visitor: &mut dyn #nn::VisitorMut) {
                let _ = &visitor;
                #(#visit_mut)*
            }
        }
    })
}

/// Whether `ty` names the struct `name` or `Self` anywhere in it: as a path's first segment,
/// or after a path rooted in this crate (`crate::`, `self::`, `super::`), not `other::Name`.
fn refers_to_self(ty: &syn::Type, name: &syn::Ident) -> bool {
    fn walk(tokens: TokenStream, name: &syn::Ident) -> bool {
        // In a path after `::`; whether that path began at a local root.
        let (mut after_colons, mut local, mut colons) = (false, false, 0);
        for t in tokens {
            match t {
                proc_macro2::TokenTree::Ident(i) => {
                    if (!after_colons || local) && (&i == name || i == "Self") {
                        return true;
                    }
                    if !after_colons {
                        local = i == "crate" || i == "self" || i == "super";
                    }
                    (after_colons, colons) = (false, 0);
                }
                proc_macro2::TokenTree::Punct(p) if p.as_char() == ':' => {
                    colons += 1;
                    after_colons = colons >= 2;
                }
                proc_macro2::TokenTree::Group(g) => {
                    if walk(g.stream(), name) {
                        return true;
                    }
                    (after_colons, local, colons) = (false, false, 0);
                }
                _ => (after_colons, local, colons) = (false, false, 0),
            }
        }
        false
    }
    walk(quote!(#ty), name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_str(src: &str) -> Result<String, String> {
        let input: DeriveInput = syn::parse_str(src).map_err(|e| e.to_string())?;
        expand(input)
            .map(|t| t.to_string())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn fields_become_visits_in_order() {
        let out = expand_str(
            "struct Net { conv: Conv2d, #[module(skip)] size: usize, r#type: Linear, \
             #[module(buffer)] mask: Tensor, #[module(training)] training: bool, \
             #[module(rename = \"0\")] first: Linear }",
        )
        .unwrap();
        let at = |s: &str| out.find(s).unwrap_or_else(|| panic!("{s} not in {out}"));
        assert!(at("\"conv\"") < at("\"type\""));
        assert!(at("\"type\"") < at("\"mask\""));
        assert!(at("visit_buffer (& self . mask") > 0);
        assert!(at("training (visitor , self . training)") > 0);
        assert!(at("\"0\"") > 0);
        assert!(!out.contains("size"), "skipped: {out}");
        assert!(out.contains(":: wgtensor :: nn :: Module for Net"));
    }

    #[test]
    fn tuple_structs_are_named_by_index() {
        let out = expand_str("struct Pair(Linear, #[module(skip)] f64, Linear);").unwrap();
        assert!(out.contains("self . 0 , \"0\""), "{out}");
        assert!(out.contains("self . 2 , \"2\""), "{out}");
    }

    #[test]
    fn generic_structs_bound_their_fields() {
        let out = expand_str("struct Block<M> where M: Clone { inner: M, extra: Vec<M> }").unwrap();
        assert!(
            out.contains("where M : Clone , M : :: wgtensor :: nn :: ModuleField , Vec < M > :"),
            "{out}"
        );
    }

    #[test]
    fn recursive_generic_structs_bound_only_their_other_fields() {
        // `Vec<Tree<M>>: ModuleField` would ask for the impl being written.
        let out = expand_str(
            "struct Tree<M, T> { node: M, #[module(skip)] label: T, kids: Vec<Tree<M, T>>, \
             more: Vec<Self>, other: other::Tree<M> }",
        )
        .unwrap();
        assert!(!out.contains("Vec < Tree < M , T > > :"), "{out}");
        assert!(!out.contains("Vec < Self > :"), "{out}");
        assert!(!out.contains("T : :: wgtensor"), "{out}");
        assert!(
            out.contains("where M : :: wgtensor :: nn :: ModuleField ,"),
            "{out}"
        );
        // Another path's type of the same name is not the struct: bounded as any field.
        assert!(out.contains("other :: Tree < M > : :: wgtensor"), "{out}");
        assert!(
            out.contains("visit_field (& self . kids , \"kids\""),
            "{out}"
        );
        // A path from this crate's root to the struct is the struct.
        let out = expand_str(
            "struct Tree<M> { node: M, a: Vec<crate::Tree<M>>, b: Vec<super::m::Tree<M>> }",
        )
        .unwrap();
        assert!(!out.contains("crate :: Tree < M > > :"), "{out}");
        assert!(!out.contains("super :: m :: Tree < M > > :"), "{out}");
    }

    #[test]
    fn non_persistent_buffers_are_visited_as_such() {
        let out = expand_str(
            "struct A { #[module(buffer(persistent = false))] mask: Tensor, \
             #[module(buffer(persistent = true))] stats: Tensor }",
        )
        .unwrap();
        assert!(
            out.contains("visit_transient_buffer (& self . mask"),
            "{out}"
        );
        assert!(out.contains("visit_buffer (& self . stats"), "{out}");
        let err =
            expand_str("struct A { #[module(buffer(persistant = false))] m: Tensor }").unwrap_err();
        assert!(err.contains("unknown buffer option"), "{err}");
    }

    #[test]
    fn a_trailing_comma_in_the_where_clause_is_not_doubled() {
        let out = expand_str("struct Block<M> where M: Clone, { inner: M }").unwrap();
        assert!(!out.contains(", ,"), "{out}");
        assert!(
            out.contains("where M : Clone , M : :: wgtensor :: nn :: ModuleField"),
            "{out}"
        );
    }

    #[test]
    fn crate_path_is_configurable() {
        let out = expand_str("#[module(crate = \"my::wg\")] struct A { l: Linear }").unwrap();
        assert!(out.contains("my :: wg :: nn :: Module for A"), "{out}");
    }

    #[test]
    fn mistakes_are_errors() {
        let err = |src: &str| expand_str(src).unwrap_err();
        assert!(err("enum E { A }").contains("is for structs"));
        assert!(err("struct A { #[module(skp)] x: usize }").contains("unknown module attribute"));
        assert!(err("struct A { #[module(skip, buffer)] x: Tensor }").contains("already `skip`"));
        assert!(err("struct A { #[module(rename = \"a.b\")] x: Tensor }").contains("no \".\""));
        assert!(err("struct A { #[module(rename = \"\")] x: Tensor }").contains("non-empty"));
        assert!(
            err("struct A { #[module(rename = \"y\")] x: Tensor, y: Tensor }")
                .contains("two fields are named \"y\"")
        );
        assert!(err("struct A { #[module(skip, rename = \"y\")] x: usize }")
            .contains("no state-dict name"));
        assert!(err("#[module(skip)] struct A { x: Tensor }").contains("on a struct"));
    }
}
