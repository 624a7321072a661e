//! Weights IO in the safetensors format (the `safetensors` crate parses and validates it):
//! tensors by name from bytes or a file, saved back the same way, and loading a state dict
//! into existing parameter tensors in place (strict or not), as PyTorch's `load_state_dict`.
//! f32, f16 and i32 load as they are (f16 as f32 on a device without f16 storage); bf16 and
//! f64 convert to f32 on load; the other integers (int8 to int64, uint8 to uint64) and bool
//! load as i32 (values outside the i32 range are an error). i32 tensors save as `I32`.

use std::collections::HashMap;

use safetensors::{Dtype as StDtype, SafeTensors};

use crate::{DType, Device, Error, Result, Tensor};

mod state_dict;
pub(crate) use state_dict::check_load;
pub use state_dict::{load_state_dict, LoadReport};

fn io_err(op: &'static str, e: impl std::fmt::Display) -> Error {
    Error::Io {
        op,
        msg: e.to_string(),
    }
}

/// One tensor's values converted to a dtype the device stores.
fn upload(
    dev: &Device,
    name: &str,
    dtype: StDtype,
    shape: &[usize],
    data: &[u8],
) -> Result<Tensor> {
    let op = "load_safetensors";
    let words = |n: usize| data.chunks_exact(n);
    match dtype {
        StDtype::F32 => {
            let v: Vec<f32> = words(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            Tensor::from_slice(dev, &v, shape)
        }
        StDtype::F16 => {
            let v: Vec<half::f16> = words(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]))
                .collect();
            if !dev.supports_f16() {
                // An adapter without f16 storage loads the values as f32 (exactly), as BF16
                // loads: an f32 model can still take them (load_state_dict converts).
                let v: Vec<f32> = v.iter().map(|h| h.to_f32()).collect();
                return Tensor::from_slice(dev, &v, shape);
            }
            Tensor::from_slice(dev, &v, shape)
        }
        StDtype::BF16 => {
            let v: Vec<f32> = words(2)
                .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect();
            Tensor::from_slice(dev, &v, shape)
        }
        StDtype::F64 => {
            let v: Vec<f32> = words(8)
                .map(|b| f64::from_le_bytes(b.try_into().unwrap_or([0; 8])) as f32)
                .collect();
            Tensor::from_slice(dev, &v, shape)
        }
        // Integer entries (class labels, token ids, a BatchNorm's int64 `num_batches_tracked`)
        // load as i32, the device's integer type; an int64 value outside its range is an
        // error rather than a silently wrapped index.
        StDtype::I64 => {
            let v = words(8)
                .map(|b| {
                    let x = i64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
                    i32::try_from(x).map_err(|_| Error::Io {
                        op,
                        msg: format!("tensor {name:?}: int64 value {x} does not fit the i32 the device stores"),
                    })
                })
                .collect::<Result<Vec<i32>>>()?;
            Tensor::from_slice(dev, &v, shape)
        }
        StDtype::I32 => {
            let v: Vec<i32> = words(4)
                .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            Tensor::from_slice(dev, &v, shape)
        }
        StDtype::U8 | StDtype::BOOL => {
            let v: Vec<i32> = data.iter().map(|&b| b as i32).collect();
            Tensor::from_slice(dev, &v, shape)
        }
        // The narrower integers convert exactly.
        StDtype::I8 => {
            let v: Vec<i32> = data.iter().map(|&b| i32::from(b as i8)).collect();
            Tensor::from_slice(dev, &v, shape)
        }
        StDtype::I16 | StDtype::U16 => {
            let v: Vec<i32> = words(2)
                .map(|b| match dtype {
                    StDtype::I16 => i32::from(i16::from_le_bytes([b[0], b[1]])),
                    _ => i32::from(u16::from_le_bytes([b[0], b[1]])),
                })
                .collect();
            Tensor::from_slice(dev, &v, shape)
        }
        // The wider unsigned ones as int64: values past i32 are an error.
        StDtype::U32 | StDtype::U64 => {
            let n = if dtype == StDtype::U32 { 4 } else { 8 };
            let v = words(n)
                .map(|b| {
                    let mut w = [0u8; 8];
                    w[..n].copy_from_slice(b);
                    let x = u64::from_le_bytes(w);
                    i32::try_from(x).map_err(|_| Error::Io {
                        op,
                        msg: format!("tensor {name:?}: {dtype:?} value {x} does not fit the i32 the device stores"),
                    })
                })
                .collect::<Result<Vec<i32>>>()?;
            Tensor::from_slice(dev, &v, shape)
        }
        other => Err(Error::Io {
            op,
            msg: format!(
                "tensor {name:?} has dtype {other:?}; floats (F32, F16, BF16, F64), integers \
                 (I8 to I64, U8 to U64) and BOOL load"
            ),
        }),
    }
    .map_err(|e| match e {
        // What the device ran out of keeps its variant (callers match on it), under the load's
        // name, the tensor named in the message where it has one; a shape it refuses names the
        // tensor.
        Error::TooLarge {
            bytes,
            limit_name,
            limit,
            ..
        } => Error::TooLarge {
            op,
            bytes,
            limit_name,
            limit,
        },
        Error::OutOfMemory { msg, .. } => Error::OutOfMemory {
            op,
            msg: format!("tensor {name:?} ({dtype:?} {shape:?}): {msg}"),
        },
        Error::DeviceLost { .. } | Error::Io { .. } => e,
        other => Error::Io {
            op,
            msg: format!("tensor {name:?} ({dtype:?} {shape:?}): {other}"),
        },
    })
}

/// The tensors of `tensors` whose names start with `prefix` followed by a dot, under the rest
/// of their names: the part of a whole model's state dict that one submodule loads
/// (`select_prefix(&sd, "encoder")` maps `encoder.0.weight` to `0.weight`). A `prefix` with a
/// trailing dot works the same; an empty one selects everything.
///
/// ```ignore-wasm32
/// # fn main() -> wgtensor::Result<()> {
/// use wgtensor::{io, DType, Device, Tensor};
/// let dev = Device::new()?;
/// let w = Tensor::zeros(&dev, &[2], DType::F32)?;
/// let bytes = io::save_safetensors(&[("encoder.0.weight", &w), ("head.weight", &w)])?;
/// let enc = io::select_prefix(&io::load_safetensors(&dev, &bytes)?, "encoder");
/// assert_eq!(enc.keys().collect::<Vec<_>>(), ["0.weight"]);
/// # Ok(()) }
/// ```
pub fn select_prefix(tensors: &HashMap<String, Tensor>, prefix: &str) -> HashMap<String, Tensor> {
    let p = prefix.trim_end_matches('.');
    tensors
        .iter()
        .filter_map(|(name, t)| {
            let rest = if p.is_empty() {
                Some(name.as_str())
            } else {
                name.strip_prefix(p).and_then(|r| r.strip_prefix('.'))
            };
            rest.map(|r| (r.to_string(), t.clone()))
        })
        .collect()
}

/// Refuses bytes that are a PyTorch `torch.save` file (a zip archive, or a bare pickle in
/// the legacy format), whose first bytes would otherwise parse as an absurd safetensors
/// header length ("header too large").
fn not_a_pickle(op: &'static str, bytes: &[u8]) -> Result<()> {
    let zip = bytes.starts_with(b"PK\x03\x04");
    let pickle = bytes.len() >= 2 && bytes[0] == 0x80 && (2..=5).contains(&bytes[1]);
    // A safetensors header of 640, 896, 1152 or 1408 bytes also starts 0x80 0x02..=0x05 (its
    // length, little-endian); its JSON then opens at byte 8, where neither a zip nor a
    // torch.save pickle has a `{`.
    let safetensors = bytes.get(8) == Some(&b'{');
    if (zip || pickle) && !safetensors {
        return Err(Error::Io {
            op,
            msg: format!(
                "not a safetensors file: it looks like a PyTorch {} (torch.save); save the state \
                 dict with safetensors.torch.save_file(model.state_dict(), \"model.safetensors\") \
                 instead",
                if zip { "zip checkpoint" } else { "pickle" }
            ),
        });
    }
    Ok(())
}

/// The safetensors parser's limit on a header's length.
const MAX_HEADER: u64 = 100_000_000;

/// The header length `n` (a file's first 8 bytes) against the file's `len` bytes (at least 8)
/// and the parser's limit.
fn check_header_len(op: &'static str, n: u64, len: u64) -> Result<()> {
    let err = |msg: String| Err(Error::Io { op, msg });
    if n > len - 8 {
        return err(format!(
            "invalid header length: the header's {n} bytes run past the file's {len} bytes"
        ));
    }
    if n > MAX_HEADER {
        return err(format!(
            "header too large: {n} bytes, more than safetensors' limit of {MAX_HEADER}"
        ));
    }
    Ok(())
}

/// Checks a header before the parser does, so that the errors name the tensor and the
/// numbers: a header length past the file or past the parser's limit (refused before it is
/// read), data offsets past the data (safetensors 0.8 sums them unchecked, so offsets near
/// `usize::MAX` overflow in its parser), a shape whose size overflows or differs from its
/// offsets' span, and data bytes the tensors do not cover. Headers this cannot read are left to
/// the parser, which reports them.
fn check_header(op: &'static str, bytes: &[u8]) -> Result<()> {
    let err = |msg: String| Err(Error::Io { op, msg });
    let Some(n) = bytes
        .get(..8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    else {
        return Ok(());
    };
    let len = bytes.len() as u64;
    check_header_len(op, n, len)?;
    let header = &bytes[8..8 + n as usize];
    let Ok(serde_json::Value::Object(entries)) = serde_json::from_slice(header) else {
        return Ok(());
    };
    let data = len - 8 - n;
    let mut spans = Vec::new();
    let mut all_checked = true;
    for (name, entry) in &entries {
        if name == "__metadata__" {
            continue;
        }
        let offsets: Vec<u64> = entry
            .get("data_offsets")
            .and_then(|o| o.as_array())
            .map(|a| a.iter().filter_map(|v| v.as_u64()).collect())
            .unwrap_or_default();
        for &end in &offsets {
            if end > data {
                return err(format!(
                    "tensor {name:?}: data offset {end} is past the file's {data} data bytes"
                ));
            }
        }
        let shape: Option<Vec<u64>> = entry
            .get("shape")
            .and_then(|s| s.as_array())
            .and_then(|a| a.iter().map(|v| v.as_u64()).collect());
        // Bits per element as the parser counts them (an unknown name is left to it).
        let dtype = entry
            .get("dtype")
            .and_then(|d| serde_json::from_value::<StDtype>(d.clone()).ok());
        let (Some(shape), Some(dtype), &[start, end]) = (shape, dtype, offsets.as_slice()) else {
            all_checked = false;
            continue;
        };
        let bits = dtype.bitsize() as u64;
        let Some(numel) = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)) else {
            return err(format!(
                "tensor {name:?}: shape {shape:?} overflows (its element count is past 2^64)"
            ));
        };
        let size = numel.checked_mul(bits).map(|b| b.div_ceil(8));
        if end < start {
            return err(format!(
                "tensor {name:?}: invalid offset: data_offsets [{start}, {end}] end before they \
                 start"
            ));
        }
        if size != end.checked_sub(start) {
            return err(format!(
                "tensor {name:?}: data_offsets [{start}, {end}] hold {} bytes, its shape \
                 {shape:?} of {dtype} needs {}",
                end.saturating_sub(start),
                size.map_or("more than 2^64".to_string(), |s| s.to_string())
            ));
        }
        spans.push((start, end, name));
    }
    // Every data byte belongs to exactly one tensor (the parser refuses any other file); in
    // order of their offsets, each tensor starts where the previous one ends.
    if !all_checked {
        return Ok(());
    }
    spans.sort();
    let mut at = 0;
    for (start, end, name) in spans {
        if start != at {
            return err(format!(
                "tensor {name:?}: its data starts at byte {start} but the tensors before it \
                 end at {at} (overlapping or uncovered data)"
            ));
        }
        at = end;
    }
    if at != data {
        return err(format!(
            "incomplete metadata: the tensors cover {at} of the file's {data} data bytes"
        ));
    }
    Ok(())
}

/// Every tensor of a safetensors file's `bytes`, by name, on `dev` (wasm: bytes from `fetch`).
pub fn load_safetensors(dev: &Device, bytes: &[u8]) -> Result<HashMap<String, Tensor>> {
    let op = "load_safetensors";
    not_a_pickle(op, bytes)?;
    check_header(op, bytes)?;
    let st = SafeTensors::deserialize(bytes).map_err(|e| io_err(op, e))?;
    let mut out = HashMap::new();
    for (name, view) in st.tensors() {
        let t = upload(dev, &name, view.dtype(), view.shape(), view.data())?;
        out.insert(name, t);
    }
    Ok(out)
}

/// [`load_safetensors`] of the file at `path` (native).
#[cfg(not(target_arch = "wasm32"))]
pub fn load_safetensors_file(
    dev: &Device,
    path: impl AsRef<std::path::Path>,
) -> Result<HashMap<String, Tensor>> {
    use std::io::Read;
    let op = "load_safetensors";
    let path = path.as_ref();
    let fail = |e: String| io_err(op, format!("{}: {e}", path.display()));
    // Only a regular file has a length to read up to: a device (/dev/zero) or a pipe would
    // be read without end, and opening a pipe without a writer blocks, so the path is asked
    // first (and the opened file again, in case the path changed in between).
    let is_file = std::fs::metadata(path)
        .map_err(|e| fail(e.to_string()))?
        .is_file();
    if !is_file {
        return Err(fail("not a regular file".to_string()));
    }
    let file = std::fs::File::open(path).map_err(|e| fail(e.to_string()))?;
    let meta = file.metadata().map_err(|e| fail(e.to_string()))?;
    if !meta.is_file() {
        return Err(fail("not a regular file".to_string()));
    }
    let len = meta.len();
    let mut file = file.take(len);
    // The first 9 bytes tell a torch.save file and the header's length: a file wrong from its
    // start is refused before its (perhaps huge) body is read.
    let mut bytes = Vec::new();
    (&mut file)
        .take(9)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(e.to_string()))?;
    // The file's own faults name its path too (several checkpoints may be loading).
    let named = |e: Error| match e {
        Error::Io { op, msg } => Error::Io {
            op,
            msg: format!("{}: {msg}", path.display()),
        },
        e => e,
    };
    not_a_pickle(op, &bytes).map_err(named)?;
    if let Some(head) = bytes.get(..8) {
        let n = u64::from_le_bytes(head.try_into().unwrap_or([0; 8]));
        check_header_len(op, n, len).map_err(named)?;
    }
    let too_big = || fail(format!("its {len} bytes do not fit in host memory"));
    let cap = usize::try_from(len).map_err(|_| too_big())?;
    bytes
        .try_reserve_exact(cap.saturating_sub(bytes.len()))
        .map_err(|_| too_big())?;
    file.read_to_end(&mut bytes)
        .map_err(|e| fail(e.to_string()))?;
    load_safetensors(dev, &bytes).map_err(named)
}

/// Serializes host copies of `tensors` (name, dtype, shape, row-major bytes).
fn serialize(
    op: &'static str,
    host: Vec<(String, StDtype, Vec<usize>, Vec<u8>)>,
) -> Result<Vec<u8>> {
    let views = host
        .iter()
        .map(|(n, d, s, b)| {
            safetensors::tensor::TensorView::new(*d, s.clone(), b).map(|v| (n.clone(), v))
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| io_err(op, e))?;
    // `{"format": "pt"}`, as safetensors.torch.save_file writes it: loaders that check the
    // metadata (transformers' from_pretrained) take the file as PyTorch's.
    let metadata = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::serialize(views, Some(metadata)).map_err(|e| io_err(op, e))
}

fn host_entry(name: &str, t: &Tensor, bytes: Vec<u8>) -> (String, StDtype, Vec<usize>, Vec<u8>) {
    let dtype = match t.dtype() {
        DType::F32 => StDtype::F32,
        DType::F16 => StDtype::F16,
        DType::I32 => StDtype::I32,
    };
    (name.to_string(), dtype, t.shape().to_vec(), bytes)
}

/// Refuses names a safetensors file cannot hold (before any readback): empty names, the
/// reserved `__metadata__` key, and a name given twice (the format maps names to tensors).
fn check_names(op: &'static str, tensors: &[(&str, &Tensor)]) -> Result<()> {
    let mut seen = std::collections::HashSet::with_capacity(tensors.len());
    for (name, _) in tensors {
        if name.is_empty() {
            return Err(Error::arg(op, "a tensor name is empty"));
        }
        if *name == "__metadata__" {
            return Err(Error::arg(
                op,
                "the name \"__metadata__\" is reserved for the file's metadata",
            ));
        }
        if !seen.insert(*name) {
            return Err(Error::arg(op, format!("the name {name:?} is given twice")));
        }
    }
    Ok(())
}

/// The safetensors bytes of `tensors` by name (native: reads them back, blocking), with the
/// header metadata `{"format": "pt"}` that `safetensors.torch.save_file` writes. Names must
/// be non-empty, distinct and not `__metadata__` (else [`Error::InvalidArgument`]).
#[cfg(not(target_arch = "wasm32"))]
pub fn save_safetensors(tensors: &[(&str, &Tensor)]) -> Result<Vec<u8>> {
    let op = "save_safetensors";
    check_names(op, tensors)?;
    let mut host = Vec::new();
    for (name, t) in tensors {
        let bytes = match t.dtype() {
            DType::F32 => bytemuck::cast_slice(&t.to_vec::<f32>()?).to_vec(),
            DType::F16 => bytemuck::cast_slice(&t.to_vec::<half::f16>()?).to_vec(),
            DType::I32 => bytemuck::cast_slice(&t.to_vec::<i32>()?).to_vec(),
        };
        host.push(host_entry(name, t, bytes));
    }
    serialize(op, host)
}

/// [`save_safetensors`] without blocking (the wasm path).
pub async fn save_safetensors_async(tensors: &[(&str, &Tensor)]) -> Result<Vec<u8>> {
    let op = "save_safetensors";
    check_names(op, tensors)?;
    let mut host = Vec::new();
    for (name, t) in tensors {
        let bytes = match t.dtype() {
            DType::F32 => bytemuck::cast_slice(&t.to_vec_async::<f32>().await?).to_vec(),
            DType::F16 => bytemuck::cast_slice(&t.to_vec_async::<half::f16>().await?).to_vec(),
            DType::I32 => bytemuck::cast_slice(&t.to_vec_async::<i32>().await?).to_vec(),
        };
        host.push(host_entry(name, t, bytes));
    }
    serialize(op, host)
}

/// Writes [`save_safetensors`] to `path` atomically (a temporary file, then a rename).
#[cfg(not(target_arch = "wasm32"))]
pub fn save_safetensors_file(
    path: impl AsRef<std::path::Path>,
    tensors: &[(&str, &Tensor)],
) -> Result<()> {
    let op = "save_safetensors";
    let path = path.as_ref();
    let bytes = save_safetensors(tensors)?;
    // A temporary name of this process and call beside the target (not the target's name with
    // a replaced extension: `ck.1` and `ck.2` saved at once must not share one; nor longer
    // than the target's name could be).
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_file_name(format!(".wgtensor-{}-{call}.tmp", std::process::id()));
    let written = std::fs::write(&tmp, bytes)
        .map_err(|e| {
            let tmp = tmp.display();
            io_err(op, format!("{}: {e} (writing {tmp})", path.display()))
        })
        .and_then(|()| {
            std::fs::rename(&tmp, path).map_err(|e| io_err(op, format!("{}: {e}", path.display())))
        });
    if written.is_err() {
        // Nothing half-written stays behind.
        let _ = std::fs::remove_file(&tmp);
    }
    written
}
