//! The device side of index checks (the kernel is src/ops/index_check.rs): the error buffer
//! kernels record the first out-of-range index in, and its report at the next sync or
//! readback. A readback made while a check is pending copies the buffer behind the data into
//! the same staging buffer and clears it, so reporting costs no extra round trip (a readback
//! that times out after that keeps its staging buffer for the next one: late_check.rs).

use super::device::{Device, STORAGE_USAGE};
use crate::{Error, Result};

/// Bytes of the error buffer: count, op code, index, size, dim (u32 each), padded.
pub(crate) const INDEX_ERR_BYTES: u64 = 32;

impl Device {
    /// The code of `op` in the device's table of checked ops and the error buffer, created on
    /// first use (wgpu zero-fills new buffers).
    pub(crate) fn index_check_target(&self, op: &'static str) -> Result<(u32, wgpu::Buffer)> {
        let mut st = self.lock_state();
        let code = match st.index_ops.iter().position(|&o| o == op) {
            Some(i) => i,
            None => {
                st.index_ops.push(op);
                st.index_ops.len() - 1
            }
        };
        let buf = match &st.index_err {
            Some(b) => b.clone(),
            None => {
                let b = self.scoped(op, || {
                    self.inner.device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("index errors"),
                        size: INDEX_ERR_BYTES,
                        usage: STORAGE_USAGE,
                        mapped_at_creation: false,
                    })
                })?;
                st.index_err = Some(b.clone());
                b
            }
        };
        Ok((code as u32, buf))
    }

    /// Notes that a check was recorded: the next sync or readback reads the error buffer.
    pub(crate) fn note_index_check(&self) {
        self.lock_state().index_check_pending = true;
    }

    /// The error buffer, when a check ran since it was last read (the flag stays set: a
    /// readback of it reports and clears it).
    pub(crate) fn pending_index_buffer(&self) -> Option<wgpu::Buffer> {
        let st = self.lock_state();
        st.index_check_pending
            .then(|| st.index_err.clone())
            .flatten()
    }

    /// The first index error held by readbacks that timed out after their batch cleared the
    /// error buffer (src/runtime/late_check.rs), reported once; their staging buffers are
    /// read and destroyed. Those whose map has not completed stay for the next readback or
    /// sync. A map that failed lost the bytes: that is reported instead, since outputs of the
    /// checked ops may hold the out-of-range placeholders.
    pub(crate) fn take_late_index_errors(&self, op: &'static str) -> Result<()> {
        let late = std::mem::take(&mut self.lock_state().late_checks);
        if late.is_empty() {
            return Ok(());
        }
        let lost = |msg: String| Error::Readback {
            op,
            msg: format!(
                "the result of an index check was lost ({msg}): outputs of index ops recorded \
                 before this readback may hold placeholders for out-of-range indices"
            ),
        };
        let mut first = None;
        let mut waiting = Vec::new();
        for mut c in late {
            let Some(status) = c.status() else {
                waiting.push(c);
                continue;
            };
            let found = match status {
                Ok(()) => {
                    let found = match c.staging.get_mapped_range(0..c.total) {
                        Ok(view) => {
                            let at = c.at as usize;
                            self.index_error(&view[at..at + INDEX_ERR_BYTES as usize])
                        }
                        Err(e) => Some(lost(e.to_string())),
                    };
                    c.staging.unmap();
                    found
                }
                Err(msg) => Some(lost(msg)),
            };
            self.lock_state().pool.forget(&c.staging);
            c.staging.destroy();
            first = first.or(found);
        }
        self.lock_state().late_checks.extend(waiting);
        first.map_or(Ok(()), Err)
    }

    /// wasm: waits until the map of every late check has its outcome (a sync's reads see
    /// them). A check whose copy sits in a batch parked since (another task's work) keeps its
    /// map unrequested: mapping it would fail that batch's submission.
    #[cfg(target_arch = "wasm32")]
    pub(crate) async fn settle_late_checks(&self) {
        let mut late = {
            let mut st = self.lock_state();
            if st.submitter.parked() == 0 {
                st.late_checks.iter_mut().for_each(|c| c.request());
            }
            std::mem::take(&mut st.late_checks)
        };
        for c in &mut late {
            c.settle().await;
        }
        let mut st = self.lock_state();
        let newer = std::mem::replace(&mut st.late_checks, late);
        st.late_checks.extend(newer);
    }

    /// The error the bytes of the error buffer describe, if any.
    pub(crate) fn index_error(&self, raw: &[u8]) -> Option<Error> {
        let word = |i: usize| {
            raw.get(i * 4..i * 4 + 4)
                .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        let count = word(0);
        if count == 0 {
            return None;
        }
        let op = self
            .lock_state()
            .index_ops
            .get(word(1) as usize)
            .copied()
            .unwrap_or("index_check");
        let (index, size, dim) = (word(2) as i32, word(3), word(4));
        let more = match (count > 1, op) {
            (false, _) => String::new(),
            // The value checks count values, of both operands.
            (true, "binary_cross_entropy") => format!(" ({count} values outside [0, 1] in all)"),
            (true, _) => format!(" ({count} out-of-range indices in all)"),
        };
        let what = match op {
            // Value checks (src/ops/value_check.rs): the value's bits, the operand's number.
            "binary_cross_entropy" => {
                let operand = if dim == 0 { "input" } else { "target" };
                let value = f32::from_bits(index as u32);
                format!("all elements of {operand} should be between 0 and 1 (found {value})")
            }
            "one_hot" if index < 0 => "Class values must be non-negative.".to_string(),
            "one_hot" => format!("Class values must be smaller than num_classes. ({size})"),
            "nll_loss" | "cross_entropy" => {
                format!("Target {index} is out of bounds. (the input has {size} classes)")
            }
            // PyTorch's index_select says this (an IndexError), then our detail.
            "index_select" => format!(
                "index out of range in self: index {index} is out of bounds for dimension {dim} \
                 with size {size}"
            ),
            "embedding" => {
                format!("index out of range in self: index {index} for a table of {size} rows")
            }
            _ => format!("index {index} is out of bounds for dimension {dim} with size {size}"),
        };
        let value = if op == "one_hot" {
            format!(" (got {index})")
        } else {
            String::new()
        };
        Some(Error::arg(
            op,
            format!(
                "{what}{value}{more}; found on the device by an op recorded before this sync \
                 or readback (DeviceOptions::check_indices)"
            ),
        ))
    }
}
