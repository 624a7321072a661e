//! The persisted pipeline cache: wgpu's `PIPELINE_CACHE` blob kept on disk between runs, so a
//! driver that honours it does not compile the same pipelines again at the next start-up.
//!
//! Vulkan only (wgpu implements it nowhere else, and browsers keep their own cache: on wasm32
//! `PipelineCache::get_data` panics, so nothing here runs there). The file lives in the
//! directory [`PipelineCacheSetting`] picks, named after `wgpu::util::pipeline_cache_key` (the
//! adapter's vendor and device) plus the crate version. wgpu validates its own header (backend,
//! adapter, driver version) but hashes nothing, so the blob is wrapped in a header of ours
//! with an FNV-1a checksum: a truncated or corrupted file is never handed to the driver. A blob
//! from another device or driver raises a validation error even with `fallback: true`, so the
//! cache is created inside an error scope and created again without data when that happens.
//! None of this can fail device creation: a file that cannot be used is reported in
//! [`PipelineCacheStatus`] and replaced at the next save.

#[cfg(not(target_arch = "wasm32"))]
use std::path::{Path, PathBuf};

use super::options::PipelineCacheSetting;
#[cfg(not(target_arch = "wasm32"))]
use super::pipeline::Persisted;
use super::pipeline::PipelineCache;
#[cfg(not(target_arch = "wasm32"))]
use crate::{Error, Result};

/// What the device did with the persisted pipeline cache when it opened (reported by
/// [`Device::stats`](crate::Device::stats) as
/// [`DeviceStats::pipeline_cache`](crate::DeviceStats::pipeline_cache)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PipelineCacheStatus {
    /// Turned off by [`DeviceOptions::pipeline_cache`](crate::DeviceOptions::pipeline_cache),
    /// or [`PipelineCacheSetting::Default`] found no cache directory (neither
    /// `WGTENSOR_CACHE_DIR`, `XDG_CACHE_HOME` nor a home directory).
    #[default]
    Off,
    /// The device cannot persist pipelines: a backend other than Vulkan, an adapter without
    /// `PIPELINE_CACHE`, a device handed to [`Device::from_wgpu`](crate::Device::from_wgpu)
    /// without that feature enabled, or wasm32.
    Unsupported,
    /// No file for this adapter and crate version yet: pipelines compile into an empty cache,
    /// which the next save writes.
    Empty,
    /// A file passed the checksum and wgpu accepted it. The driver may still ignore its
    /// contents (wgpu falls back to an empty cache silently when, e.g., the file was written by
    /// an older wgpu), so this says the cache was loaded, not that it held every pipeline.
    Loaded {
        /// Size of the blob handed to wgpu, in bytes (lavapipe's blob holds headers only, about
        /// 96 bytes; drivers that cache pipelines write kilobytes to megabytes).
        bytes: u64,
    },
    /// A file was found but not used: unreadable, truncated, its checksum failed, or wgpu
    /// rejected it (written for another device or driver). The device runs with an empty cache
    /// and the next save replaces the file.
    Rejected,
}

/// Whether the device should request `PIPELINE_CACHE` (when the adapter offers it): never on
/// wasm32, never when the setting is off or wgpu has no cache key for this adapter.
pub(crate) fn wants_feature(setting: &PipelineCacheSetting, info: &wgpu::AdapterInfo) -> bool {
    #[cfg(not(target_arch = "wasm32"))]
    {
        *setting != PipelineCacheSetting::Off && wgpu::util::pipeline_cache_key(info).is_some()
    }
    #[cfg(target_arch = "wasm32")]
    {
        let _ = (setting, info);
        false
    }
}

/// The op name in every error of this module.
#[cfg(not(target_arch = "wasm32"))]
const OP: &str = "pipeline_cache";

/// Opens the persisted cache for a new device and installs it into `pipelines` (nothing when
/// it is off or unsupported); returns what happened. Never fails: a file that cannot be used
/// only changes the status.
pub(crate) fn open(
    setting: &PipelineCacheSetting,
    info: &wgpu::AdapterInfo,
    device: &wgpu::Device,
    pipelines: &mut PipelineCache,
) -> PipelineCacheStatus {
    #[cfg(target_arch = "wasm32")]
    {
        let _ = (info, device, pipelines);
        match setting {
            PipelineCacheSetting::Off => PipelineCacheStatus::Off,
            _ => PipelineCacheStatus::Unsupported,
        }
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        if *setting == PipelineCacheSetting::Off {
            return PipelineCacheStatus::Off;
        }
        let key = match wgpu::util::pipeline_cache_key(info) {
            Some(key) if device.features().contains(wgpu::Features::PIPELINE_CACHE) => key,
            _ => return PipelineCacheStatus::Unsupported,
        };
        let Some(dir) = cache_dir(setting) else {
            return PipelineCacheStatus::Off;
        };
        let path = dir.join(file_name(&key));
        // A path that is there but no regular file (a pipe would block the open) is not read.
        let read = match std::fs::metadata(&path) {
            Ok(m) if !m.is_file() => Err(std::io::Error::other("not a regular file")),
            _ => std::fs::read(&path),
        };
        let (blob, mut status) = match read {
            Ok(file) => match unwrap_blob(&file) {
                Some(blob) => (
                    Some(blob.to_vec()),
                    PipelineCacheStatus::Loaded {
                        bytes: blob.len() as u64,
                    },
                ),
                None => (None, PipelineCacheStatus::Rejected),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                (None, PipelineCacheStatus::Empty)
            }
            Err(_) => (None, PipelineCacheStatus::Rejected),
        };
        let mut saved_hash = None;
        let mut cache = None;
        if let Some(blob) = &blob {
            cache = create(device, Some(blob));
            match cache {
                Some(_) => saved_hash = Some(fnv1a64(blob)),
                None => status = PipelineCacheStatus::Rejected,
            }
        }
        let Some(cache) = cache.or_else(|| create(device, None)) else {
            // Even an empty cache failed (it should not): compile without one.
            return PipelineCacheStatus::Unsupported;
        };
        pipelines.persisted = Some(Persisted {
            cache,
            path,
            saved_hash,
            saved_at: pipelines.compiled,
        });
        status
    }
}

/// Creates a wgpu pipeline cache, `None` when wgpu reported an error (a blob from another
/// device raises one even with `fallback: true`).
#[cfg(not(target_arch = "wasm32"))]
fn create(device: &wgpu::Device, data: Option<&[u8]>) -> Option<wgpu::PipelineCache> {
    let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let val = device.push_error_scope(wgpu::ErrorFilter::Validation);
    // SAFETY: `data` is a blob that `PipelineCache::get_data` returned for an adapter with the
    // same `pipeline_cache_key` (the file name) and crate version, read back byte for byte
    // (our checksum over it matched). wgpu checks its own header (backend, adapter, driver
    // version, ABI) and falls back or errors on a mismatch, which the scopes catch.
    let cache = unsafe {
        device.create_pipeline_cache(&wgpu::PipelineCacheDescriptor {
            label: Some("wgtensor"),
            data,
            fallback: true,
        })
    };
    let val = pollster::block_on(val.pop());
    let oom = pollster::block_on(oom.pop());
    (val.is_none() && oom.is_none()).then_some(cache)
}

/// The directory `setting` names, `None` when it is off or no cache directory is known.
#[cfg(not(target_arch = "wasm32"))]
fn cache_dir(setting: &PipelineCacheSetting) -> Option<PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    match setting {
        PipelineCacheSetting::Off => None,
        PipelineCacheSetting::Dir(dir) => Some(dir.clone()),
        PipelineCacheSetting::Default => {
            if let Some(dir) = var("WGTENSOR_CACHE_DIR") {
                return Some(dir);
            }
            // The XDG spec ignores relative paths.
            let base = var("XDG_CACHE_HOME")
                .filter(|p| p.is_absolute())
                .or_else(|| {
                    if cfg!(windows) {
                        var("LOCALAPPDATA")
                    } else if cfg!(target_os = "macos") {
                        var("HOME").map(|h| h.join("Library").join("Caches"))
                    } else {
                        var("HOME").map(|h| h.join(".cache"))
                    }
                })?;
            Some(base.join("wgtensor"))
        }
    }
}

/// The cache file's name: wgpu's key for the adapter plus the crate version (a new wgtensor
/// compiles other pipelines, so it starts a file of its own).
#[cfg(not(target_arch = "wasm32"))]
fn file_name(key: &str) -> String {
    format!("{key}-wgtensor-{}.bin", env!("CARGO_PKG_VERSION"))
}

/// Our header in front of wgpu's blob: magic, format version, zero, blob length, FNV-1a of
/// the blob; integers little-endian.
#[cfg(not(target_arch = "wasm32"))]
const MAGIC: [u8; 8] = *b"WGTPCACH";
#[cfg(not(target_arch = "wasm32"))]
const FORMAT: u32 = 1;
#[cfg(not(target_arch = "wasm32"))]
const HEADER_LEN: usize = 32;

/// 64-bit FNV-1a: a checksum against truncation and bit rot, not an authenticator.
#[cfg(not(target_arch = "wasm32"))]
fn fnv1a64(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The file contents for `blob`: our header, then the blob.
#[cfg(not(target_arch = "wasm32"))]
fn wrap_blob(blob: &[u8]) -> Vec<u8> {
    let mut file = Vec::with_capacity(HEADER_LEN + blob.len());
    file.extend_from_slice(&MAGIC);
    file.extend_from_slice(&FORMAT.to_le_bytes());
    file.extend_from_slice(&0u32.to_le_bytes());
    file.extend_from_slice(&(blob.len() as u64).to_le_bytes());
    file.extend_from_slice(&fnv1a64(blob).to_le_bytes());
    file.extend_from_slice(blob);
    file
}

/// The blob inside a cache file, `None` unless the magic, format, length and checksum match.
#[cfg(not(target_arch = "wasm32"))]
fn unwrap_blob(file: &[u8]) -> Option<&[u8]> {
    let (header, blob) = file.split_at_checked(HEADER_LEN)?;
    let u32_at = |i: usize| u32::from_le_bytes(header[i..i + 4].try_into().unwrap_or([0; 4]));
    let u64_at = |i: usize| u64::from_le_bytes(header[i..i + 8].try_into().unwrap_or([0; 8]));
    let ok = header[..8] == MAGIC
        && u32_at(8) == FORMAT
        && u64_at(16) == blob.len() as u64
        && u64_at(24) == fnv1a64(blob);
    ok.then_some(blob)
}

/// Writes `bytes` to `path` atomically: a temporary file in the same directory, flushed, then
/// renamed over `path`, so a reader (another process opening a device) sees the old file or
/// the new one, never a partial one.
#[cfg(not(target_arch = "wasm32"))]
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let io = |what: &str, p: &Path, e: std::io::Error| Error::Io {
        op: OP,
        msg: format!("cannot {what} {}: {e}", p.display()),
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir).map_err(|e| io("create the directory", dir, e))?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let written = std::fs::File::create_new(&tmp).and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_all()
    });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io("write", &tmp, e));
    }
    if let Err(e) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(&format!("rename {} to", tmp.display()), path, e));
    }
    Ok(())
}

/// Writes the persisted cache of `pipelines` if pipelines were compiled since it was loaded or
/// last saved and the driver's blob changed (`Device::save_pipeline_cache`, also run when the
/// last handle of a device drops).
pub(crate) fn save(pipelines: &std::sync::Mutex<PipelineCache>) -> crate::Result<bool> {
    #[cfg(target_arch = "wasm32")]
    {
        // No cache is ever created here (and `get_data` would panic).
        let _ = pipelines;
        Ok(false)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        fn lock(m: &std::sync::Mutex<PipelineCache>) -> std::sync::MutexGuard<'_, PipelineCache> {
            // As the device's own lock: a panic elsewhere must not stop the save.
            m.lock().unwrap_or_else(|e| e.into_inner())
        }
        let (blob, hash, path, compiled) = {
            let mut pipelines = lock(pipelines);
            let compiled = pipelines.compiled;
            let Some(p) = &mut pipelines.persisted else {
                return Ok(false);
            };
            if compiled == p.saved_at {
                return Ok(false);
            }
            let Some(blob) = p.cache.get_data() else {
                return Ok(false);
            };
            let hash = fnv1a64(&blob);
            if p.saved_hash == Some(hash) {
                // The driver added nothing (e.g. every pipeline came from the file).
                p.saved_at = compiled;
                return Ok(false);
            }
            (blob, hash, p.path.clone(), compiled)
        };
        // Written without the pipeline lock: ops keep compiling meanwhile.
        write_atomic(&path, &wrap_blob(&blob))?;
        let mut pipelines = lock(pipelines);
        if let Some(p) = &mut pipelines.persisted {
            p.saved_hash = Some(hash);
            p.saved_at = p.saved_at.max(compiled);
        }
        Ok(true)
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    /// A fresh directory name under the system's temp dir.
    fn unique_temp_dir(tag: &str) -> PathBuf {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        std::env::temp_dir().join(format!(
            "wgtensor-store-{tag}-{}-{nanos}",
            std::process::id()
        ))
    }

    #[test]
    fn fnv1a64_matches_the_reference_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn wrapped_blob_round_trips_and_damage_is_detected() {
        let blob: Vec<u8> = (0..200u32).map(|i| (i * 7) as u8).collect();
        let file = wrap_blob(&blob);
        assert_eq!(unwrap_blob(&file), Some(&blob[..]));
        assert_eq!(unwrap_blob(&wrap_blob(&[])), Some(&[][..]));
        // Truncated anywhere, extended, a flipped bit in the blob or the header.
        for len in [0, 10, HEADER_LEN - 1, HEADER_LEN, file.len() - 1] {
            assert_eq!(unwrap_blob(&file[..len]), None, "truncated to {len}");
        }
        let mut longer = file.clone();
        longer.push(0);
        assert_eq!(unwrap_blob(&longer), None);
        for i in [0, 8, 16, 24, HEADER_LEN, file.len() - 1] {
            let mut bad = file.clone();
            bad[i] ^= 0x10;
            assert_eq!(unwrap_blob(&bad), None, "bit flipped at {i}");
        }
    }

    #[test]
    fn default_dir_honours_the_override() {
        // Only the explicit settings: the environment is shared with concurrent tests.
        assert_eq!(cache_dir(&PipelineCacheSetting::Off), None);
        let d = PathBuf::from("/some/dir");
        assert_eq!(
            cache_dir(&PipelineCacheSetting::Dir(d.clone())),
            Some(d.clone())
        );
        assert!(file_name("wgpu_pipeline_cache_vulkan_1_2")
            .starts_with("wgpu_pipeline_cache_vulkan_1_2-wgtensor-"));
    }

    #[test]
    fn atomic_write_replaces_the_file_and_leaves_no_temporary() {
        let dir = unique_temp_dir("unit");
        let path = dir.join("nested").join("cache.bin");
        write_atomic(&path, b"first").unwrap();
        write_atomic(&path, b"second").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("cache.bin")]);
        // A directory that cannot be created: an Io error naming the op and the path.
        let e = write_atomic(&path.join("under-a-file").join("x.bin"), b"x").unwrap_err();
        match &e {
            Error::Io { op, msg } => {
                assert_eq!(*op, "pipeline_cache");
                assert!(msg.contains("under-a-file"), "{msg}");
            }
            other => panic!("{other:?}"),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A blob that passes our checksum but was written for another device: wgpu raises a
    /// validation error even with `fallback: true`; the device must open anyway, reject it and
    /// compute.
    #[test]
    fn foreign_blob_is_rejected_inside_the_error_scope() {
        let dir = unique_temp_dir("foreign");
        let dev = crate::Device::with_options(crate::DeviceOptions {
            pipeline_cache: PipelineCacheSetting::Dir(dir.clone()),
            ..Default::default()
        })
        .unwrap();
        let info = dev.adapter_info().clone();
        if !dev.features().contains(wgpu::Features::PIPELINE_CACHE) {
            assert_eq!(dev.stats().pipeline_cache, PipelineCacheStatus::Unsupported);
            return;
        }
        let mut own = PipelineCache::default();
        let status = open(
            &PipelineCacheSetting::Dir(dir.join("unused")),
            &info,
            dev.wgpu_device(),
            &mut own,
        );
        assert_eq!(status, PipelineCacheStatus::Empty);
        let mut blob = own
            .persisted
            .unwrap()
            .cache
            .get_data()
            .expect("a Vulkan blob");
        // wgpu's header: magic 8, version 4, ABI 4, backend 1, then the adapter key with the
        // vendor id at bytes 3..7.
        blob[21] ^= 0x5a;
        let key = wgpu::util::pipeline_cache_key(&info).unwrap();
        write_atomic(&dir.join(file_name(&key)), &wrap_blob(&blob)).unwrap();
        let mut foreign = PipelineCache::default();
        let status = open(
            &PipelineCacheSetting::Dir(dir.clone()),
            &info,
            dev.wgpu_device(),
            &mut foreign,
        );
        assert_eq!(status, PipelineCacheStatus::Rejected);
        assert!(
            foreign.persisted.is_some(),
            "an empty cache replaces the rejected one"
        );
        dev.check("test")
            .expect("the rejection stays inside the scope");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
