//! PyTorch's rearranging ops composed from views, copies and gathers: `t`, `unbind`,
//! `movedim` (views), `repeat`, `flip`, `roll` (new tensors), and `tril` / `triu` (a mask from
//! two aranges). Each is differentiable through the ops it is made of.

use crate::layout::Layout;
use crate::{DType, Error, Result, Tensor};

/// PyTorch's words for a dim of a 0-d tensor where the op needs a real dim (unbind, roll).
fn no_dims(op: &'static str, dim: isize) -> Error {
    Error::arg(
        op,
        format!("Dimension specified as {dim} but tensor has no dimensions"),
    )
}

/// `dims` normalized against `rank` (a 0-d tensor takes 0 and -1), entry by entry as flip's
/// dim_list_to_bitset: the first entry out of range or seen before is the one named.
fn distinct_dims(op: &'static str, dims: &[isize], rank: usize) -> Result<Vec<usize>> {
    let mut ds = Vec::with_capacity(dims.len());
    for &d in dims {
        let d = Layout::normalize_dim(op, d, rank.max(1))?;
        if ds.contains(&d) {
            return Err(Error::arg(
                op,
                format!("dim {d} appears multiple times in the list of dims"),
            ));
        }
        ds.push(d);
    }
    Ok(ds)
}

/// `y` as a new tensor of its own: a copy where it still views `x`'s storage (no dim needed
/// moving), as PyTorch's repeat, flip and roll always return new tensors.
fn new_tensor(y: Tensor, x: &Tensor) -> Result<Tensor> {
    match y.shares_storage(x) {
        true => y.deep_clone(),
        false => Ok(y),
    }
}

/// The gather index that tiles a dim of `s` entries `r` times: `j mod s` for each output j.
fn tile_index(op: &'static str, s: usize, r: usize) -> Result<Vec<i32>> {
    let n = s.checked_mul(r).filter(|&n| n <= i32::MAX as usize);
    let n = n.ok_or_else(|| Error::size(op, format!("{r} repeats of a dim of {s} pass i32")))?;
    Ok((0..n).map(|j| (j % s) as i32).collect())
}

impl Tensor {
    /// PyTorch's `x.t()`: a 2-D tensor transposed (a view); 0-D and 1-D tensors come back as
    /// they are (a new view). Errors for more than 2 dims, in PyTorch's words.
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{DType, Device, Tensor};
    /// let dev = Device::new()?;
    /// let w = Tensor::zeros(&dev, &[3, 5], DType::F32)?;
    /// assert_eq!(w.t()?.shape(), &[5, 3]);
    /// # Ok(()) }
    /// ```
    pub fn t(&self) -> Result<Tensor> {
        match self.rank() {
            2 => self.transpose(0, 1),
            0 | 1 => self.permute(&(0..self.rank()).collect::<Vec<_>>()),
            r => Err(Error::arg(
                "t",
                format!("t() expects a tensor with <= 2 dimensions, but self is {r}D"),
            )),
        }
    }

    /// PyTorch's `torch.unbind(x, dim)`: the slices along `dim`, each without it (views; an
    /// empty `dim` gives none). As PyTorch's outputs of a function returning several views,
    /// they refuse in-place writes while tracked.
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{Device, Tensor};
    /// let dev = Device::new()?;
    /// let x = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
    /// let rows = x.unbind(0)?;
    /// assert_eq!(rows[1].to_vec::<f32>()?, vec![3.0, 4.0]);
    /// # Ok(()) }
    /// ```
    pub fn unbind(&self, dim: isize) -> Result<Vec<Tensor>> {
        let op = "unbind";
        // A 0-d tensor's dim wraps as one of rank 1 first (PyTorch's maybe_wrap_dim).
        let d = Layout::normalize_dim(op, dim, self.rank().max(1))?;
        if self.rank() == 0 {
            return Err(no_dims(op, d as isize));
        }
        if self.shape()[d] == 0 {
            return Ok(Vec::new());
        }
        self.split(1, d as isize)?
            .iter()
            .enumerate()
            .map(|(i, piece)| {
                let mut slice = piece.squeeze(d as isize)?;
                slice.mark_multi_output(i, "Unbind");
                Ok(slice)
            })
            .collect()
    }

    /// PyTorch's `torch.movedim(x, source, destination)`: a view whose dim `destination[i]` is
    /// `source[i]` of this tensor, the other dims in their order. Errors as PyTorch's for lists
    /// of different lengths, a dim out of range and a repeated dim.
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{DType, Device, Tensor};
    /// let dev = Device::new()?;
    /// let nchw = Tensor::zeros(&dev, &[8, 3, 32, 32], DType::F32)?;
    /// assert_eq!(nchw.movedim(&[1], &[3])?.shape(), &[8, 32, 32, 3]);
    /// # Ok(()) }
    /// ```
    pub fn movedim(&self, source: &[isize], destination: &[isize]) -> Result<Tensor> {
        let op = "movedim";
        if source.len() != destination.len() {
            return Err(Error::arg(
                op,
                format!(
                    "Invalid source or destination dims: source ({source:?} dims) \
                     should contain the same number of dims as destination ({destination:?} \
                     dims)"
                ),
            ));
        }
        let rank = self.rank();
        let norm = |ds: &[isize]| -> Result<Vec<usize>> {
            ds.iter()
                .map(|&d| Layout::normalize_dim(op, d, rank.max(1)))
                .collect()
        };
        let (src, dst) = (norm(source)?, norm(destination)?);
        for (what, ds, given) in [("source", &src, source), ("destination", &dst, destination)] {
            if (1..ds.len()).any(|i| ds[..i].contains(&ds[i])) {
                // The lists as the caller gave them, as PyTorch prints them.
                return Err(Error::arg(
                    op,
                    format!("repeated dim in `{what}` ({given:?})"),
                ));
            }
        }
        if rank == 0 {
            return self.permute(&[]);
        }
        // dst[i] takes src[i]; the other places take the other dims in their order.
        let mut perm = vec![usize::MAX; rank];
        for (&s, &d) in src.iter().zip(&dst) {
            perm[d] = s;
        }
        // As many free places as unmoved dims (the lists are distinct and of one length).
        let mut rest = (0..rank).filter(|d| !src.contains(d));
        for p in perm.iter_mut().filter(|p| **p == usize::MAX) {
            *p = rest.next().unwrap_or(usize::MAX);
        }
        self.permute(&perm)
    }

    /// PyTorch's `x.repeat(repeats)`: the tensor tiled `repeats[i]` times along dim `i`, a new
    /// tensor. `repeats` may be longer than the rank (leading dims of 1 are added first), not
    /// shorter; a repeat of 0 gives an empty dim. Gradients sum over the copies.
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{Device, Tensor};
    /// let dev = Device::new()?;
    /// let x = Tensor::from_slice(&dev, &[1.0f32, 2.0], &[2])?;
    /// let y = x.repeat(&[2, 2])?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 1.0, 2.0]);
    /// # Ok(()) }
    /// ```
    pub fn repeat(&self, repeats: &[usize]) -> Result<Tensor> {
        let op = "repeat";
        let m = repeats.len();
        if m < self.rank() {
            return Err(Error::arg(
                op,
                format!(
                    "Number of dimensions of repeat dims can not be smaller than number of \
                     dimensions of tensor (repeats {repeats:?}, tensor of shape {:?})",
                    self.shape()
                ),
            ));
        }
        if m > crate::layout::MAX_RANK {
            return Err(Error::arg(
                op,
                format!(
                    "{m} repeats give a result of rank {m}, past the largest rank {}",
                    crate::layout::MAX_RANK
                ),
            ));
        }
        let mut padded = vec![1; m - self.rank()];
        padded.extend_from_slice(self.shape());
        let out_shape = padded
            .iter()
            .zip(repeats)
            .map(|(&s, &r)| s.checked_mul(r))
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| {
                Error::size(
                    op,
                    format!("repeats {repeats:?} of shape {padded:?} overflow a dim"),
                )
            })?;
        crate::layout::checked_numel(op, &out_shape)?;
        let y = if 2 * m <= crate::layout::MAX_RANK {
            // [1, s0, 1, s1, ...] broadcast to [r0, s0, r1, s1, ...], merged pairwise: one copy.
            let (mut single, mut tiled) = (Vec::with_capacity(2 * m), Vec::with_capacity(2 * m));
            for (&s, &r) in padded.iter().zip(repeats) {
                single.extend([1, s]);
                tiled.extend([r, s]);
            }
            self.reshape(&single)?
                .broadcast_to(&tiled)?
                .reshape(&out_shape)?
        } else {
            // Past half the largest rank: one gather per repeated dim (entry j of the tiled
            // dim is entry j mod s), at the rank of the result.
            let mut y = self.reshape(&padded)?;
            for (d, (&s, &r)) in padded.iter().zip(repeats).enumerate() {
                if r == 1 || s == 0 {
                    continue;
                }
                let index = tile_index(op, s, r)?;
                let index = Tensor::from_slice(self.device(), &index, &[index.len()])?;
                y = y.index_select(d as isize, &index)?;
            }
            y
        };
        // A repeat of ones is still a new tensor, as PyTorch's.
        new_tensor(y, self)
    }

    /// PyTorch's `torch.flip(x, dims)`: the order of the entries reversed along each of `dims`,
    /// a new tensor (no dims: a copy). Errors for a dim out of range or given twice.
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{Device, Tensor};
    /// let dev = Device::new()?;
    /// let x = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
    /// assert_eq!(x.flip(&[1])?.to_vec::<f32>()?, vec![2.0, 1.0, 4.0, 3.0]);
    /// # Ok(()) }
    /// ```
    pub fn flip(&self, dims: &[isize]) -> Result<Tensor> {
        let op = "flip";
        let ds = distinct_dims(op, dims, self.rank())?;
        if self.numel() == 0 {
            // Nothing to move (and no index to build for a long empty dim).
            return self.deep_clone();
        }
        let mut y = self.clone();
        for d in ds {
            let n = self.shape().get(d).copied().unwrap_or(1);
            if n < 2 {
                continue;
            }
            let len = i32::try_from(n)
                .map_err(|_| Error::size(op, format!("dim {d} of {n} entries is past i32")))?;
            let reversed: Vec<i32> = (0..len).rev().collect();
            let index = Tensor::from_slice(self.device(), &reversed, &[n])?;
            y = y.index_select(d as isize, &index)?;
        }
        new_tensor(y, self)
    }

    /// PyTorch's `torch.roll(x, shifts, dims)`: entries moved `shifts[i]` places along
    /// `dims[i]` (negative shifts move back), those past the end coming round to the start; a
    /// new tensor. With no `dims` the tensor rolls as one flat row of one shift and keeps its
    /// shape. A dim may be given twice (its shifts add up).
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{Device, Tensor};
    /// let dev = Device::new()?;
    /// let x = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0], &[4])?;
    /// assert_eq!(x.roll(&[1], &[0])?.to_vec::<f32>()?, vec![4.0, 1.0, 2.0, 3.0]);
    /// # Ok(()) }
    /// ```
    pub fn roll(&self, shifts: &[i64], dims: &[isize]) -> Result<Tensor> {
        let op = "roll";
        if shifts.is_empty() {
            return Err(Error::arg(op, "`shifts` required"));
        }
        if dims.is_empty() && shifts.len() == 1 {
            let flat = self.reshape(&[self.numel()])?.roll(shifts, &[0])?;
            return flat.reshape(self.shape());
        }
        if shifts.len() != dims.len() {
            return Err(Error::arg(
                op,
                format!(
                    "shifts and dimensions must align. shifts: {}, dims:{}",
                    shifts.len(),
                    dims.len()
                ),
            ));
        }
        // PyTorch's roll returns an empty tensor's copy before reading any dim.
        if self.numel() == 0 {
            return self.deep_clone();
        }
        if self.rank() == 0 {
            return Err(no_dims(op, dims[0]));
        }
        let ds = dims
            .iter()
            .map(|&d| Layout::normalize_dim(op, d, self.rank()))
            .collect::<Result<Vec<usize>>>()?;
        let mut y = self.clone();
        for (&d, &shift) in ds.iter().zip(shifts) {
            let n = self.shape()[d];
            if n == 0 {
                continue;
            }
            let s = shift.rem_euclid(n as i64) as usize;
            if s == 0 {
                continue;
            }
            let (tail, head) = (
                y.narrow(d as isize, n - s, s)?,
                y.narrow(d as isize, 0, n - s)?,
            );
            y = crate::ops::cat(&[&tail, &head], d as isize)?;
        }
        new_tensor(y, self)
    }

    /// PyTorch's `torch.tril(x, diagonal)`: the entries on and below the `diagonal`-th
    /// diagonal of the last two dims (0 the main one, positive above it), zeros elsewhere (NaN
    /// too); a batch of matrices takes the same mask. Gradients pass where entries are kept.
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::{DType, Device, Tensor};
    /// let dev = Device::new()?;
    /// let causal = Tensor::ones(&dev, &[3, 3], DType::F32)?.tril(0)?;
    /// assert_eq!(causal.to_vec::<f32>()?, vec![1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0]);
    /// # Ok(()) }
    /// ```
    pub fn tril(&self, diagonal: i64) -> Result<Tensor> {
        self.triangle("tril", diagonal, crate::ops::CmpOp::Le)
    }

    /// PyTorch's `torch.triu(x, diagonal)`: the entries on and above the `diagonal`-th diagonal
    /// of the last two dims, zeros elsewhere ([`Tensor::tril`]'s twin).
    pub fn triu(&self, diagonal: i64) -> Result<Tensor> {
        self.triangle("triu", diagonal, crate::ops::CmpOp::Ge)
    }

    /// Keeps entry (i, j) of each matrix where `j cmp i + diagonal`.
    fn triangle(&self, op: &'static str, diagonal: i64, cmp: crate::ops::CmpOp) -> Result<Tensor> {
        let r = self.rank();
        if r < 2 {
            return Err(Error::arg(
                op,
                format!("input tensor must have at least 2 dimensions, got {r}"),
            ));
        }
        if self.numel() == 0 {
            return self.deep_clone();
        }
        let (rows, cols) = (self.shape()[r - 2], self.shape()[r - 1]);
        // A diagonal past either side keeps all or nothing: clamped into i32 arithmetic.
        let k = diagonal.clamp(-(rows as i64), cols as i64) as f64;
        let dev = self.device();
        let bound =
            Tensor::arange(dev, k, k + rows as f64, 1.0, DType::I32)?.reshape(&[rows, 1])?;
        let col = Tensor::arange(dev, 0.0, cols as f64, 1.0, DType::I32)?.reshape(&[1, cols])?;
        let keep = col.compare(&bound, cmp)?;
        let zero = Tensor::zeros(dev, &[], self.dtype())?;
        keep.where_cond(self, &zero)
    }
}
