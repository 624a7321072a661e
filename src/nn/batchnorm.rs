//! Batch normalization layers (PyTorch's `nn.BatchNorm1d` / `nn.BatchNorm2d`): parameters,
//! running-statistic buffers and the train / eval modes over the ops of src/ops/batchnorm/.

use std::sync::atomic::{AtomicU64, Ordering};

use super::layers::param;
use super::module::{counter_scalar, write_counter};
use super::state_cell::StateCell;
use super::{Forward, Module, Visitor, VisitorMut};
use crate::ops::{
    batch_norm_inference, batch_norm_train, Activation, BatchNormOptions, BatchNormState,
};
use crate::{DType, Device, Error, Result, Tensor};

/// Batch normalization over `[N, C, H, W]` (PyTorch's `nn.BatchNorm2d`): `weight` (1s) and
/// `bias` (0s) per channel, buffers `running_mean`, `running_var`, `num_batches_tracked`;
/// training normalizes with the batch statistics and updates the running ones, evaluation uses
/// the running ones.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{self, Forward, Module};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let mut bn = nn::BatchNorm2d::new(&dev, 3)?;
/// let x = wgtensor::ops::randn(&dev, &[4, 3, 5, 5], DType::F32)?;
/// let y = bn.forward(&x)?; // batch statistics; running ones updated
/// bn.eval(); // PyTorch's eval(): the running statistics
/// let z = bn.forward(&x)?;
/// assert_eq!((y.shape(), z.shape()), (x.shape(), x.shape()));
/// assert_eq!(bn.state_dict().len(), 5); // weight, bias, running_mean, running_var, num_batches_tracked
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct BatchNorm2d {
    /// `[C]`, initialized to 1 (absent with `affine = false`).
    pub weight: Option<Tensor>,
    /// `[C]`, initialized to 0 (absent with `affine = false`).
    pub bias: Option<Tensor>,
    /// Running statistics, momentum and the count of training batches, in a cell with
    /// `RefCell`'s methods that threads may share (so the layer is `Sync`; a borrow held by
    /// another thread is waited for). Drop a `borrow_mut()` guard before calling the layer's
    /// [`Module`] methods (`state_dict`, `parameters`) on the same thread: they read the
    /// statistics through it and, as with a `RefCell`, panic while it is held mutably
    /// (`forward` returns an error instead).
    pub state: StateCell<BatchNormState>,
    /// Added to the variance.
    pub eps: f64,
    /// Training mode (batch statistics); [`Module::eval`] clears it, [`Module::train`] sets it.
    pub training: bool,
    rank: usize,
    /// PyTorch's `track_running_stats` ([`BatchNorm2d::without_running_stats`] clears it).
    tracking: bool,
    /// `num_batches_tracked` as the state dict shows it (an i32 scalar written at every
    /// change of the count), so a state dict taken earlier follows training as PyTorch's.
    counter: Tensor,
    /// The counter scalar's version after the layer's own last write: a newer one means a
    /// write through a state-dict entry (`copy_from`, `io::load_state_dict`), which the count
    /// adopts, as PyTorch's buffer is that tensor.
    counter_seen: AtomicU64,
}

impl BatchNorm2d {
    /// Whether the counter scalar was written from outside since the layer's own last write
    /// (see `counter_seen`): it then holds the count, until [`adopt_counter`](Self::adopt_counter)
    /// takes it.
    fn counter_pending(&self) -> bool {
        self.counter.version() != self.counter_seen.load(Ordering::Relaxed)
    }

    /// Takes a count written into the counter scalar from outside since the layer's own last
    /// write into `count`. The read blocks (and reports the device's pending errors, as any
    /// readback): native only (in the browser such a write is not seen).
    fn adopt_counter(&self, count: &mut u64) -> Result<()> {
        let version = self.counter.version();
        if !self.counter_pending() {
            return Ok(());
        }
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(&n) = self.counter.to_vec::<i32>()?.first() {
            *count = n.max(0) as u64;
        }
        #[cfg(target_arch = "wasm32")]
        let _ = count;
        self.counter_seen.store(version, Ordering::Relaxed);
        Ok(())
    }

    /// Notes that the layer's own write left the counter scalar at its current version.
    fn counter_written(&self) {
        self.counter_seen
            .store(self.counter.version(), Ordering::Relaxed);
    }

    /// The functional ops' options for this layer's parameters.
    fn options(&self) -> BatchNormOptions<'_> {
        BatchNormOptions {
            weight: self.weight.as_ref(),
            bias: self.bias.as_ref(),
            eps: self.eps,
            activation: Activation::None,
        }
    }

    /// PyTorch's defaults: eps 1e-5, momentum 0.1, affine, tracking running statistics.
    pub fn new(dev: &Device, channels: usize) -> Result<BatchNorm2d> {
        Self::with_config(dev, channels, BatchNormConfig::default())
    }

    /// PyTorch's `nn.BatchNorm2d(channels, eps, momentum, affine)`.
    pub fn with_config(dev: &Device, channels: usize, c: BatchNormConfig) -> Result<BatchNorm2d> {
        Self::build("BatchNorm2d", dev, channels, c)
    }

    /// [`BatchNorm2d::with_config`] with the layer's name for its errors. eps is checked at
    /// the forward, as PyTorch's `F.batch_norm` does (positive in training, non-negative with
    /// running statistics; [`crate::ops::batch_norm_train`]).
    fn build(
        op: &'static str,
        dev: &Device,
        channels: usize,
        c: BatchNormConfig,
    ) -> Result<BatchNorm2d> {
        if c.momentum.is_some_and(|m| !m.is_finite()) {
            return Err(Error::arg(
                op,
                format!("momentum must be finite, got {:?}", c.momentum),
            ));
        }
        let (weight, bias) = if c.affine {
            (
                Some(param(Tensor::ones(dev, &[channels], DType::F32)?)?),
                Some(param(Tensor::zeros(dev, &[channels], DType::F32)?)?),
            )
        } else {
            (None, None)
        };
        let mut state = BatchNormState::new(dev, channels, DType::F32)?;
        state.momentum = c.momentum;
        Ok(BatchNorm2d {
            weight,
            bias,
            state: StateCell::new(state),
            eps: c.eps,
            training: true,
            rank: 4,
            tracking: true,
            counter: counter_scalar(0, dev)?,
            counter_seen: AtomicU64::new(0),
        })
    }

    /// PyTorch's `track_running_stats=False`: the layer keeps no running statistics (none in
    /// its state dict) and normalizes with the batch's statistics in training and evaluation
    /// alike.
    ///
    /// ```ignore-wasm32
    /// # fn main() -> wgtensor::Result<()> {
    /// use wgtensor::nn::{self, Module};
    /// use wgtensor::Device;
    /// let dev = Device::new()?;
    /// let bn = nn::BatchNorm2d::new(&dev, 3)?.without_running_stats();
    /// assert!(!bn.tracks_running_stats());
    /// assert_eq!(bn.state_dict().len(), 2); // weight and bias only
    /// # Ok(()) }
    /// ```
    pub fn without_running_stats(mut self) -> BatchNorm2d {
        self.tracking = false;
        self
    }

    /// Whether the layer keeps running statistics (PyTorch's `track_running_stats`).
    pub fn tracks_running_stats(&self) -> bool {
        self.tracking
    }
}

/// Options of [`BatchNorm2d`] and [`BatchNorm1d`] (PyTorch's constructor arguments and
/// defaults: eps 1e-5, momentum 0.1, affine).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchNormConfig {
    /// Added to the variance.
    pub eps: f64,
    /// Weight of the batch statistic in the running averages; `None` is a cumulative average
    /// (PyTorch's `momentum=None`).
    pub momentum: Option<f64>,
    /// Learnable per-channel weight and bias.
    pub affine: bool,
}

impl Default for BatchNormConfig {
    fn default() -> Self {
        BatchNormConfig {
            eps: 1e-5,
            momentum: Some(0.1),
            affine: true,
        }
    }
}

/// Batch normalization over `[N, C]` or `[N, C, L]` (PyTorch's `nn.BatchNorm1d`), the same
/// parameters, buffers and modes as [`BatchNorm2d`].
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{self, Forward, Module};
/// use wgtensor::{DType, Device, Tensor};
/// let dev = Device::new()?;
/// let bn = nn::BatchNorm1d::new(&dev, 8)?;
/// let y = bn.forward(&wgtensor::ops::randn(&dev, &[16, 8], DType::F32)?)?; // [N, C] or [N, C, L]
/// assert_eq!(y.shape(), &[16, 8]);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct BatchNorm1d(pub BatchNorm2d);

impl BatchNorm1d {
    /// PyTorch's defaults: eps 1e-5, momentum 0.1, affine, tracking running statistics.
    pub fn new(dev: &Device, channels: usize) -> Result<BatchNorm1d> {
        Self::with_config(dev, channels, BatchNormConfig::default())
    }

    /// PyTorch's `nn.BatchNorm1d(channels, eps, momentum, affine)`.
    pub fn with_config(dev: &Device, channels: usize, c: BatchNormConfig) -> Result<BatchNorm1d> {
        Ok(BatchNorm1d(BatchNorm2d {
            rank: 3,
            ..BatchNorm2d::build("BatchNorm1d", dev, channels, c)?
        }))
    }

    /// PyTorch's `track_running_stats=False` ([`BatchNorm2d::without_running_stats`]).
    pub fn without_running_stats(self) -> BatchNorm1d {
        BatchNorm1d(self.0.without_running_stats())
    }
}

/// PyTorch's `nn.BatchNorm3d`: batch normalization over `[N, C, D, H, W]` volumes, per channel,
/// the layer of [`BatchNorm2d`] (the same state, names and options) for 5-D inputs.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::nn::{self, Forward};
/// use wgtensor::{DType, Device};
/// let dev = Device::new()?;
/// let bn = nn::BatchNorm3d::new(&dev, 4)?;
/// let y = bn.forward(&wgtensor::ops::randn(&dev, &[2, 4, 3, 8, 8], DType::F32)?)?;
/// assert_eq!(y.shape(), &[2, 4, 3, 8, 8]);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct BatchNorm3d(pub BatchNorm2d);

impl BatchNorm3d {
    /// PyTorch's defaults: eps 1e-5, momentum 0.1, affine, tracking running statistics.
    pub fn new(dev: &Device, channels: usize) -> Result<BatchNorm3d> {
        Self::with_config(dev, channels, BatchNormConfig::default())
    }

    /// PyTorch's `nn.BatchNorm3d(channels, eps, momentum, affine)`.
    pub fn with_config(dev: &Device, channels: usize, c: BatchNormConfig) -> Result<BatchNorm3d> {
        Ok(BatchNorm3d(BatchNorm2d {
            rank: 5,
            ..BatchNorm2d::build("BatchNorm3d", dev, channels, c)?
        }))
    }

    /// PyTorch's `track_running_stats=False` ([`BatchNorm2d::without_running_stats`]).
    pub fn without_running_stats(self) -> BatchNorm3d {
        BatchNorm3d(self.0.without_running_stats())
    }
}

/// The same entries as the [`BatchNorm2d`] inside, under the same names (no `0.` prefix).
impl Module for BatchNorm3d {
    fn visit(&self, v: &mut dyn Visitor) {
        self.0.visit(v)
    }
    fn visit_mut(&mut self, v: &mut dyn VisitorMut) {
        self.0.visit_mut(v)
    }
}

impl Forward for BatchNorm3d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.0.forward(x)
    }
}

/// The same entries as the [`BatchNorm2d`] inside, under the same names (no `0.` prefix).
impl Module for BatchNorm1d {
    fn visit(&self, v: &mut dyn Visitor) {
        self.0.visit(v)
    }
    fn visit_mut(&mut self, v: &mut dyn VisitorMut) {
        self.0.visit_mut(v)
    }
}

impl Forward for BatchNorm1d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.0.forward(x)
    }
}

/// Parameters `weight` and `bias` (when affine), buffers `running_mean`, `running_var` and
/// the counter `num_batches_tracked` (when tracking running statistics), the training flag.
impl Module for BatchNorm2d {
    fn visit(&self, v: &mut dyn Visitor) {
        if let Some(w) = &self.weight {
            v.parameter("weight", w);
        }
        if let Some(b) = &self.bias {
            v.parameter("bias", b);
        }
        if self.tracking {
            let st = self.state.borrow();
            v.buffer("running_mean", &st.running_mean);
            v.buffer("running_var", &st.running_var);
            if self.counter_pending() {
                // Written through a state-dict entry: the scalar holds the count (the next
                // training step adopts it; a visit cannot report a readback's errors), so it
                // is handed out as it is, not overwritten.
                v.counter_held("num_batches_tracked", &self.counter);
            } else {
                v.counter_tensor("num_batches_tracked", st.num_batches_tracked, &self.counter);
                self.counter_written();
            }
        }
        v.training(self.training);
    }
    fn visit_mut(&mut self, v: &mut dyn VisitorMut) {
        if self.tracking {
            let pending = self.counter_pending();
            let count = &mut self.state.get_mut().num_batches_tracked;
            // A count the visitor sets (a load) is written, whatever it is: u64::MAX, which no
            // count reaches (the scalar saturates at i32::MAX), tells whether it set one. One
            // written through a state-dict entry stays in the scalar for the next training
            // step (train() and eval() change no buffer, as PyTorch's). A lost device fails
            // the load that set it anyway.
            let before = std::mem::replace(count, u64::MAX);
            v.counter("num_batches_tracked", count);
            let supplied = *count != u64::MAX;
            if !supplied {
                *count = before;
            }
            if supplied || !pending {
                let _ = write_counter(&self.counter, *count);
                self.counter_written();
            }
        }
        v.training(&mut self.training);
    }
}

impl Forward for BatchNorm2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        // _check_input_dim's rule and words, per layer.
        let (layer, ok, want) = match self.rank {
            3 => ("BatchNorm1d", matches!(x.rank(), 2 | 3), "2D or 3D"),
            5 => ("BatchNorm3d", x.rank() == 5, "5D"),
            _ => ("BatchNorm2d", x.rank() == 4, "4D"),
        };
        if !ok {
            return Err(Error::shape(
                layer,
                format!("expected {want} input (got {}D input)", x.rank()),
            ));
        }
        if !self.tracking {
            return Ok(batch_norm_train(x, None, &self.options())?.y);
        }
        // The state is public: a borrow the caller still holds on this thread is an error,
        // not a panic (another thread's is waited for).
        let busy = || {
            Error::arg(
                "BatchNorm",
                "the layer's state is borrowed elsewhere (drop that borrow before forward)",
            )
        };
        if self.training {
            let mut st = self.state.try_borrow_mut().map_err(|_| busy())?;
            self.adopt_counter(&mut st.num_batches_tracked)?;
            let y = match batch_norm_train(x, Some(&mut st), &self.options()) {
                Ok(out) => out.y,
                Err(e) => {
                    // PyTorch's _BatchNorm.forward counts the batch before F.batch_norm checks
                    // it: a refused batch (one value per channel, a bad eps) still counts, and
                    // momentum None's later averages see it.
                    st.num_batches_tracked = st.num_batches_tracked.saturating_add(1);
                    if !self.counter.donatable() {
                        write_counter(&self.counter, st.num_batches_tracked)?;
                        self.counter_written();
                    }
                    return Err(e);
                }
            };
            // Only a state dict (or a clone of the layer) holding the scalar can see it; while
            // none does, `state_dict()` writes the count when it hands the scalar out, so a
            // training step need not (no upload and copy per layer per step).
            if !self.counter.donatable() {
                write_counter(&self.counter, st.num_batches_tracked)?;
                self.counter_written();
            }
            Ok(y)
        } else {
            let st = self.state.try_borrow().map_err(|_| busy())?;
            batch_norm_inference(x, &st.running_mean, &st.running_var, &self.options())
        }
    }
}
