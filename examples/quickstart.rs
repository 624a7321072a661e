//! Prints the adapter, runs a small computation on the GPU and checks it against the CPU.
//! `cargo run --release --example quickstart`
// Native only (blocking device and readback): an empty program on wasm32.
#![cfg_attr(target_arch = "wasm32", no_main)]
#![cfg(not(target_arch = "wasm32"))]

use wgtensor::{Device, Tensor};

fn main() -> wgtensor::Result<()> {
    let dev = Device::new()?;
    let info = dev.adapter_info();
    println!(
        "adapter: {} ({:?}, {:?})",
        info.name, info.backend, info.device_type
    );
    println!("driver:  {} {}", info.driver, info.driver_info);
    println!("f16:     {}", dev.supports_f16());
    println!(
        "limits:  max_storage_buffer_binding_size={} max_buffer_size={}",
        dev.limits().max_storage_buffer_binding_size,
        dev.limits().max_buffer_size
    );

    // y = mean over columns of tanh(a * b + 0.5), a read through a transposed view, b broadcast.
    let (rows, cols) = (64usize, 37usize);
    let a: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 7 % 23) as f32 - 11.0) / 8.0)
        .collect();
    let b: Vec<f32> = (0..cols).map(|j| 1.0 + j as f32 / cols as f32).collect();
    let ta = Tensor::from_slice(&dev, &a, &[cols, rows])?.transpose(0, 1)?; // [rows, cols] view
    let tb = Tensor::from_slice(&dev, &b, &[cols])?;
    let y = ta.mul(&tb)?.add_scalar(0.5)?.tanh()?.mean(1, false)?;
    let gpu = y.to_vec::<f32>()?;

    let mut max_err = 0.0f64;
    for r in 0..rows {
        let mut acc = 0.0f64;
        for c in 0..cols {
            acc += (a[c * rows + r] as f64 * b[c] as f64 + 0.5).tanh();
        }
        max_err = max_err.max((acc / cols as f64 - gpu[r] as f64).abs());
    }
    println!("tanh/mean over a [{rows}x{cols}] transposed view: max |gpu - cpu| = {max_err:.2e}");
    let stats = dev.stats();
    println!(
        "stats: {} pipelines, {} dispatches, {} submissions, pool peak {} bytes",
        stats.pipelines_compiled, stats.dispatches, stats.submissions, stats.pool.peak_bytes
    );
    if max_err > 1e-5 {
        eprintln!("MISMATCH against the CPU reference");
        std::process::exit(1);
    }
    println!("OK: matches the CPU reference");
    Ok(())
}
