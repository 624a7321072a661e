//! The default memory budget of CPU adapters is the process's host memory, shared by every
//! such device: two devices each filling "their" 3/4 of the host once filled it together. A
//! test binary of its own, so no other test's buffers move the process-wide count.
#![cfg(not(target_arch = "wasm32"))]

use wgtensor::{DType, Device, DeviceOptions, Tensor};

#[test]
fn cpu_devices_share_one_host_budget() {
    let a = Device::new().expect("no wgpu adapter");
    if a.adapter_info().device_type != wgpu::DeviceType::Cpu {
        // GPUs keep no budget of their own: nothing is counted.
        let t = Tensor::zeros(&a, &[1 << 20], DType::F32).unwrap();
        assert_eq!(Device::host_budget_held(), 0);
        drop(t);
        return;
    }
    let mib = 1u64 << 20;
    let base = Device::host_budget_held();
    let b = Device::new().unwrap();
    let ta = Tensor::zeros(&a, &[8 << 20], DType::F32).unwrap();
    let tb = Tensor::zeros(&b, &[8 << 20], DType::F32).unwrap();
    let both = Device::host_budget_held();
    assert!(both >= base + 64 * mib, "{both} vs {base}");
    // A device with a budget of its own is not counted.
    let c = Device::with_options(DeviceOptions {
        memory_limit: Some(1 << 30),
        ..Default::default()
    })
    .unwrap();
    let tc = Tensor::zeros(&c, &[8 << 20], DType::F32).unwrap();
    assert_eq!(Device::host_budget_held(), both);
    // A freed tensor's buffer stays cached (still held); dropping the device frees it all.
    drop(tb);
    assert_eq!(Device::host_budget_held(), both);
    b.sync().unwrap();
    drop(b);
    let after = Device::host_budget_held();
    assert!(after + 32 * mib <= both, "{after} vs {both}");
    // Cleared caches leave the count too.
    drop(ta);
    a.sync().unwrap();
    a.clear_pool();
    assert!(Device::host_budget_held() + 32 * mib <= after);
    drop(tc);
}
