//! `one_hot` (PyTorch's `F.one_hot`): class indices compared with the class range, checked
//! on the device as the index ops are (src/ops/index_check.rs), or the count inferred from
//! the indices read back.

use super::index::require_index;
use super::index_check::check_indices;
use crate::{DType, Error, Result, Tensor};

impl Tensor {
    /// PyTorch's `F.one_hot(self, num_classes)`: for an i32 tensor of class indices, an i32
    /// tensor with one more (last) dim of size `num_classes`, 1 at each index and 0 elsewhere.
    /// An index outside `[0, num_classes)` is an error at the next sync or readback, as PyTorch
    /// raises (unchecked, a row of zeros). An empty input gives the empty `[.., num_classes]`
    /// result, and refuses `num_classes` 0 or -1 (PyTorch cannot infer a count from no
    /// indices). Convert with `to_dtype` to use it as float input.
    ///
    /// `num_classes` -1 (PyTorch's default) infers the count as the largest index plus one,
    /// refusing a negative index first ("Class values must be non-negative."); that reads
    /// the indices back (PyTorch syncs the same way), so it blocks, and is refused in the
    /// browser, where reads are async: pass the count there. Any other negative count leaves
    /// every index out of range, as in PyTorch.
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{Device, Tensor};
    /// let dev = Device::new()?;
    /// let ids = Tensor::from_slice(&dev, &[3i32, 4, 1, 0], &[4])?;
    /// assert_eq!(ids.one_hot(-1)?.shape(), &[4, 5]);
    /// assert_eq!(ids.one_hot(6)?.shape(), &[4, 6]);
    /// # Ok(()) }
    /// ```
    pub fn one_hot<C: TryInto<i64> + Copy>(&self, num_classes: C) -> Result<Tensor> {
        let op = "one_hot";
        require_index(op, "input", self)?;
        let requested = num_classes
            .try_into()
            .map_err(|_| Error::arg(op, "num_classes exceeds the i64 range"))?;
        if requested > i32::MAX as i64 {
            return Err(Error::arg(
                op,
                format!("num_classes {requested} exceeds the i32 range"),
            ));
        }
        // An empty input: nothing to compare, and no class tensor to build (PyTorch returns
        // the empty shape at once, and refuses a class count it would have to infer).
        if self.numel() == 0 {
            if requested <= 0 {
                return Err(Error::arg(
                    op,
                    format!(
                        "Can not infer total number of classes from empty tensor. \
                         (num_classes {requested})"
                    ),
                ));
            }
            let num_classes = requested as usize;
            let mut shape = self.shape().to_vec();
            shape.push(num_classes);
            return Tensor::zeros(self.device(), &shape, DType::I32);
        }
        let num_classes = match requested {
            -1 => self.inferred_classes(op)?,
            n if n < 0 => {
                // PyTorch compares the values first: a negative one is named before the count
                // (in the browser, without a blocking readback, the count is).
                #[cfg(not(target_arch = "wasm32"))]
                self.inferred_classes(op)?;
                return Err(Error::arg(
                    op,
                    format!("Class values must be smaller than num_classes. (num_classes {n})"),
                ));
            }
            n => n as usize,
        };
        // The result's size is checked before the class table is built: a huge class count
        // would otherwise stage gigabytes on the host before the comparison refused it.
        let mut shape = self.shape().to_vec();
        shape.push(num_classes);
        crate::tensor::check_new_shape(self.device(), op, &shape, DType::I32)?;
        check_indices(op, self, num_classes, self.rank(), None)?;
        let classes = Tensor::arange(self.device(), 0.0, num_classes as f64, 1.0, DType::I32)?;
        self.unsqueeze(-1)?.eq(&classes)?.to_dtype(DType::I32)
    }

    /// one_hot's count for `num_classes` -1: the largest index plus one, read back, after
    /// PyTorch's check that no index is negative.
    fn inferred_classes(&self, op: &'static str) -> Result<usize> {
        #[cfg(target_arch = "wasm32")]
        {
            Err(Error::arg(
                op,
                "num_classes -1 infers the count from the indices, which needs a blocking \
                 readback the browser does not have; pass the number of classes",
            ))
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            let ids = self.to_vec::<i32>()?;
            if ids.iter().any(|&i| i < 0) {
                return Err(Error::arg(op, "Class values must be non-negative."));
            }
            let max = ids.iter().copied().max().unwrap_or(0);
            Ok(max as usize + 1)
        }
    }
}
