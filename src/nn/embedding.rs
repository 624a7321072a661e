//! PyTorch's `nn.Embedding`: a lookup table of rows by i32 id.

use super::layers::param;
use super::{Forward, Module, Visitor, VisitorMut};
use crate::ops::{embedding, normal};
use crate::{DType, Device, Error, Result, Tensor};

/// PyTorch's `nn.Embedding(num_embeddings, embedding_dim, padding_idx)`: `weight [V, E]`
/// initialized `N(0, 1)` with the `padding_idx` row zeroed; the forward maps an i32 tensor of
/// ids of any shape to `shape + [E]` ([`ops::embedding`](crate::ops::embedding)), and the
/// padding row gets no gradient. The backward buckets the ids, so its cost does not grow with
/// the vocabulary size times the number of ids.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{self, Forward, Module};
/// use wgtensor::{Device, Tensor};
/// let dev = Device::new()?;
/// let emb = nn::Embedding::new(&dev, 100, 16, Some(0))?;
/// let ids = Tensor::from_slice(&dev, &[5i32, 0, 42, 7], &[2, 2])?;
/// let x = emb.forward(&ids)?;
/// assert_eq!(x.shape(), &[2, 2, 16]);
/// assert!(x.to_vec::<f32>()?[16..32].iter().all(|&v| v == 0.0)); // the padding row
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Embedding {
    /// `[num_embeddings, embedding_dim]`.
    pub weight: Tensor,
    /// The row that reads as given and gets no gradient (non-negative once built).
    pub padding_idx: Option<i64>,
}

impl Embedding {
    /// A new table with PyTorch's initialization; a negative `padding_idx` counts from the
    /// end, as in PyTorch.
    pub fn new(
        dev: &Device,
        num_embeddings: usize,
        embedding_dim: usize,
        padding_idx: Option<i64>,
    ) -> Result<Embedding> {
        let v = i64::try_from(num_embeddings).map_err(|_| {
            Error::size(
                "Embedding",
                format!("num_embeddings {num_embeddings} is beyond i64"),
            )
        })?;
        let padding_idx = match padding_idx {
            None => None,
            // PyTorch's range check lets 0 through (`padding_idx < num_embeddings` fails only
            // past 0); zeroing row 0 of an empty table is then its index error.
            Some(0) if v == 0 => {
                return Err(Error::arg(
                    "Embedding",
                    "index 0 is out of bounds for dimension 0 with size 0 (padding_idx 0 of a \
                     table without rows)",
                ))
            }
            Some(p) if (-v..v).contains(&p) => Some(if p < 0 { p + v } else { p }),
            Some(p) => {
                return Err(Error::arg(
                    "Embedding",
                    format!(
                        "Padding_idx must be within num_embeddings (padding_idx {p}, \
                         num_embeddings {num_embeddings})"
                    ),
                ))
            }
        };
        let w = normal(dev, &[num_embeddings, embedding_dim], 0.0, 1.0, DType::F32)?;
        if let Some(p) = padding_idx {
            // A fill, as PyTorch's `fill_(0)`: multiplying by 0 would leave -0.0 where the
            // sample was negative.
            // The row alone is written (no mask of num_embeddings values).
            let zeros = Tensor::zeros(dev, &[1, embedding_dim], DType::F32)?;
            w.narrow(0, p as usize, 1)?.copy_from(&zeros)?;
        }
        Ok(Embedding {
            weight: param(w)?,
            padding_idx,
        })
    }
}

impl Module for Embedding {
    fn visit(&self, v: &mut dyn Visitor) {
        v.parameter("weight", &self.weight);
    }
    /// No flags, counters or children.
    fn visit_mut(&mut self, _: &mut dyn VisitorMut) {}
}

impl Forward for Embedding {
    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        embedding(ids, &self.weight, self.padding_idx)
    }
}
