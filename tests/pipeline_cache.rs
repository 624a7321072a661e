//! The persisted pipeline cache (`DeviceOptions::pipeline_cache`): save, reload, a damaged
//! file, the `WGTENSOR_CACHE_DIR` override (in a child process: no test mutates this
//! process's environment) and `Off`. On an adapter without `PIPELINE_CACHE` (anything but Vulkan) the tests assert
//! the `Unsupported` status and that nothing is written, instead of skipping.
// Native only: wasm32 has no pipeline cache (and no files).
#![cfg(not(target_arch = "wasm32"))]

use std::path::{Path, PathBuf};

use wgtensor::{Device, DeviceOptions, PipelineCacheSetting, PipelineCacheStatus, Tensor};

/// A fresh, not yet existing directory under the system's temp dir.
fn temp_cache_dir(tag: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::env::temp_dir().join(format!(
        "wgtensor-pcache-{tag}-{}-{nanos}",
        std::process::id()
    ))
}

fn device(setting: PipelineCacheSetting) -> Device {
    Device::with_options(DeviceOptions {
        pipeline_cache: setting,
        // No cooperative-matrix self-test at open: it would compile pipelines before the
        // test's "nothing compiled yet".
        cooperative_matrix: false,
        ..Default::default()
    })
    .expect("a device opens whatever the cache file holds")
}

fn supported(dev: &Device) -> bool {
    dev.features().contains(wgpu::Features::PIPELINE_CACHE)
}

/// Compiles a few pipelines and checks their results.
fn compute_checked(dev: &Device) {
    let x = Tensor::from_slice(dev, &[1.0f32, -2.0, 3.0, -4.0], &[2, 2]).unwrap();
    let y = x.relu().unwrap().add_scalar(0.5).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![1.5, 0.5, 3.5, 0.5]);
    let s = y.matmul(&x).unwrap();
    assert_eq!(s.to_vec::<f32>().unwrap(), vec![3.0, -5.0, 5.0, -9.0]);
}

/// The files in `dir` (none if it does not exist).
fn files(dir: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(dir) {
        Ok(entries) => entries.map(|e| e.unwrap().path()).collect(),
        Err(_) => Vec::new(),
    }
}

#[test]
fn saved_cache_reloads_and_a_damaged_file_is_not_used() {
    let dir = temp_cache_dir("reload");
    let dev = device(PipelineCacheSetting::Dir(dir.clone()));
    if !supported(&dev) {
        assert_eq!(dev.stats().pipeline_cache, PipelineCacheStatus::Unsupported);
        compute_checked(&dev);
        assert!(!dev.save_pipeline_cache().unwrap());
        drop(dev);
        assert!(
            files(&dir).is_empty(),
            "an unsupported cache writes nothing"
        );
        return;
    }

    // First run: no file yet; nothing is written before pipelines are compiled.
    assert_eq!(dev.stats().pipeline_cache, PipelineCacheStatus::Empty);
    assert!(!dev.save_pipeline_cache().unwrap(), "nothing compiled yet");
    assert!(files(&dir).is_empty());
    compute_checked(&dev);
    assert!(dev.save_pipeline_cache().unwrap(), "new pipelines: written");
    assert!(
        !dev.save_pipeline_cache().unwrap(),
        "nothing new since: not rewritten"
    );
    let written = files(&dir);
    assert_eq!(
        written.len(),
        1,
        "one file, no temporaries left: {written:?}"
    );
    let path = written[0].clone();
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let key = wgpu::util::pipeline_cache_key(dev.adapter_info()).unwrap();
    assert!(name.starts_with(&key), "{name} is keyed by {key}");
    assert!(name.contains(env!("CARGO_PKG_VERSION")), "{name}");
    let file_len = std::fs::metadata(&path).unwrap().len();
    drop(dev);

    // Second run: loaded; the device computes as before.
    let dev = device(PipelineCacheSetting::Dir(dir.clone()));
    match dev.stats().pipeline_cache {
        PipelineCacheStatus::Loaded { bytes } => {
            assert!(
                bytes > 0 && bytes < file_len,
                "{bytes} of a {file_len} byte file"
            )
        }
        other => panic!("expected Loaded, got {other:?}"),
    }
    compute_checked(&dev);
    drop(dev);

    // A flipped bit: the checksum fails, the file is not handed to the driver, the device
    // still opens and computes, and the next save replaces the file.
    let good = std::fs::read(&path).unwrap();
    let mut bad = good.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0x40;
    std::fs::write(&path, &bad).unwrap();
    let dev = device(PipelineCacheSetting::Dir(dir.clone()));
    assert_eq!(dev.stats().pipeline_cache, PipelineCacheStatus::Rejected);
    compute_checked(&dev);
    assert!(
        dev.save_pipeline_cache().unwrap(),
        "the damaged file is replaced"
    );
    drop(dev);
    let dev = device(PipelineCacheSetting::Dir(dir.clone()));
    assert!(
        matches!(
            dev.stats().pipeline_cache,
            PipelineCacheStatus::Loaded { .. }
        ),
        "{:?}",
        dev.stats().pipeline_cache
    );
    drop(dev);

    // Truncated, empty and foreign files: never used, never fatal.
    for contents in [
        &good[..good.len() / 2],
        &[][..],
        &b"not a wgtensor cache"[..],
    ] {
        std::fs::write(&path, contents).unwrap();
        let dev = device(PipelineCacheSetting::Dir(dir.clone()));
        assert_eq!(dev.stats().pipeline_cache, PipelineCacheStatus::Rejected);
        compute_checked(&dev);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Runs the named test of this binary in a child process with `vars` set, so that no thread
/// of this process ever mutates the environment (undefined behaviour while other threads read
/// it: `set_var` is `unsafe` in Rust 2024). The child finds `CHILD_VAR` set and runs the body.
fn run_in_child(test: &str, vars: &[(&str, &std::ffi::OsStr)]) {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([test, "--exact", "--test-threads=1", "--nocapture"])
        .env(CHILD_VAR, "1");
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("the test binary re-runs itself");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child run of {test} failed:\n{text}");
    assert!(text.contains("1 passed"), "the child ran no test:\n{text}");
}

/// Set in the child process that [`run_in_child`] starts.
const CHILD_VAR: &str = "WGTENSOR_TEST_CHILD";

/// `Default` honours `WGTENSOR_CACHE_DIR`, and `Off` reads and writes nothing. The body runs
/// in a child process started with the variable set (see [`run_in_child`]); this process
/// then checks what the child left in the directory.
#[test]
fn default_setting_follows_the_env_override_and_off_writes_nothing() {
    const NAME: &str = "default_setting_follows_the_env_override_and_off_writes_nothing";
    if std::env::var_os(CHILD_VAR).is_none() {
        let dir = temp_cache_dir("env");
        run_in_child(NAME, &[("WGTENSOR_CACHE_DIR", dir.as_os_str())]);
        // The child saved at most one file, and only where the variable pointed.
        assert!(files(&dir).len() <= 1, "{:?}", files(&dir));
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let dir = PathBuf::from(std::env::var_os("WGTENSOR_CACHE_DIR").unwrap());

    let dev = device(PipelineCacheSetting::Off);
    assert_eq!(dev.stats().pipeline_cache, PipelineCacheStatus::Off);
    assert!(!supported(&dev), "Off does not request PIPELINE_CACHE");
    compute_checked(&dev);
    assert!(!dev.save_pipeline_cache().unwrap());
    drop(dev);
    assert!(files(&dir).is_empty(), "Off wrote {:?}", files(&dir));

    let dev = device(PipelineCacheSetting::Default);
    compute_checked(&dev);
    let status = dev.stats().pipeline_cache;
    let cached = supported(&dev);
    drop(dev); // saves on drop
    if cached {
        assert_eq!(status, PipelineCacheStatus::Empty);
        assert_eq!(
            files(&dir).len(),
            1,
            "saved on drop into WGTENSOR_CACHE_DIR"
        );
        let dev = device(PipelineCacheSetting::Default);
        assert!(
            matches!(
                dev.stats().pipeline_cache,
                PipelineCacheStatus::Loaded { .. }
            ),
            "{:?}",
            dev.stats().pipeline_cache
        );
    } else {
        assert_eq!(status, PipelineCacheStatus::Unsupported);
        assert!(files(&dir).is_empty());
    }
}
