//! Prints the adapter wgtensor would use. `--require-f16` exits with status 3 when the adapter
//! lacks SHADER_F16 (scripts/test.sh uses it to skip the f16 conformance cases).
// Native only (blocking device): an empty program on wasm32.
#![cfg_attr(target_arch = "wasm32", no_main)]
#![cfg(not(target_arch = "wasm32"))]

fn main() {
    let dev = match wgtensor::Device::new() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("adapter_info: {e}");
            std::process::exit(2);
        }
    };
    let info = dev.adapter_info();
    println!(
        "adapter: {} | backend {:?} | type {:?} | driver {} {} | f16 {} | pipeline cache {:?}",
        info.name,
        info.backend,
        info.device_type,
        info.driver,
        info.driver_info,
        dev.supports_f16(),
        dev.stats().pipeline_cache
    );
    let l = dev.limits();
    println!(
        "limits: workgroup storage {} bytes | invocations per workgroup {} | subgroups {}..{} lanes",
        l.max_compute_workgroup_storage_size,
        l.max_compute_invocations_per_workgroup,
        info.subgroup_min_size,
        info.subgroup_max_size
    );
    if std::env::args().any(|a| a == "--require-f16") && !dev.supports_f16() {
        std::process::exit(3);
    }
}
