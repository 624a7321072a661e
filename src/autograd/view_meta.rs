//! What a view carries from its creation (PyTorch's `CreationMeta` and `base_`): the root of
//! its chain of views, whether it was made under no_grad of a tracked tensor, and whether it
//! is one of several views one op returned (`split`, `chunk`). In-place writes read these to
//! refuse in PyTorch's words.

use std::sync::Arc;

use super::is_grad_enabled;
use crate::Tensor;

impl Tensor {
    /// Whether this is a view made under no_grad of a tensor that is still tracked.
    pub(crate) fn is_no_grad_view(&self) -> bool {
        self.no_grad_view
            .as_ref()
            .is_some_and(|m| m.live().is_some())
    }

    /// Gives `out`, a view of `x`'s storage just recorded, PyTorch's view creation meta: the
    /// root of its chain of views (PyTorch's `base_`), kept in its meta when it is tracked and
    /// as `no_grad_view` when it was made under no_grad of a tracked tensor (inherited through
    /// further views), and the output index of a multi-output view (propagated to views of
    /// it, as PyTorch's creation meta is).
    pub(crate) fn inherit_view_meta(out: &mut Tensor, x: &Tensor) {
        let root = x
            .live_meta()
            .map(|m| m.view_base.clone().unwrap_or_else(|| m.clone()));
        let multi_output = x.live_meta().and_then(|m| m.multi_output);
        out.no_grad_view = match (&x.no_grad_view, &root) {
            (Some(base), _) => Some(base.clone()),
            (None, Some(r)) if !is_grad_enabled() => Some(r.clone()),
            _ => None,
        };
        // The view's meta was just made by its record: not yet shared.
        if let Some(m) = out.grad.as_mut().and_then(Arc::get_mut) {
            m.view_base = root;
            m.multi_output = multi_output;
        }
    }

    /// Marks this piece, output `index` of the op PyTorch names `op` (`Split`, for chunk too;
    /// `SplitWithSizes`, `Unbind`), as one of several views one op returned (a no-op for an
    /// untracked piece). Its meta was just made by its record.
    pub(crate) fn mark_multi_output(&mut self, index: usize, op: &'static str) {
        if let Some(m) = self.grad.as_mut().and_then(Arc::get_mut) {
            m.multi_output = Some((index, op));
        }
    }

    /// The output index and op name of a tracked multi-output view
    /// ([`Tensor::mark_multi_output`]).
    pub(crate) fn multi_output_index(&self) -> Option<(usize, &'static str)> {
        self.live_meta().and_then(|m| m.multi_output)
    }

    /// Whether this tracked tensor views a leaf (check_inplace's `_base().is_leaf()`, whatever
    /// the base's current flag).
    pub(crate) fn is_view_of_leaf(&self) -> bool {
        self.live_meta()
            .and_then(|m| m.view_base.as_ref())
            .is_some_and(|b| b.node.is_none())
    }
}
