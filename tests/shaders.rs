//! Portability: every shader variant the crate compiles (each dtype prelude and override set)
//! is parsed and validated by naga and translated to SPIR-V (Vulkan), MSL (Metal) and HLSL
//! (DX12). Metal and DX12 cannot run here; this is how we know they would compile.
// Native only (blocking device and readback); tests/browser/ is the wasm32 suite.
#![cfg(not(target_arch = "wasm32"))]

use std::collections::HashSet;

use naga::back::{hlsl, msl, spv};
use naga::valid::{Capabilities, ValidationFlags, Validator};
use wgtensor::ops::shader_variants;

/// A variant's module parsed, validated and specialized to its override values, as wgpu
/// compiles it; errors name the variant (`ctx`) and the stage that failed.
fn specialized(
    v: &wgtensor::runtime::ShaderVariant,
    ctx: &str,
) -> Result<(naga::Module, naga::valid::ModuleInfo), String> {
    let module = naga::front::wgsl::parse_str(&v.source)
        .map_err(|e| format!("{ctx}: parse: {}", e.emit_to_string(&v.source)))?;
    let info = Validator::new(ValidationFlags::all(), Capabilities::all())
        .validate(&module)
        .map_err(|e| format!("{ctx}: validate: {e:?}"))?;
    let mut constants = naga::back::PipelineConstants::default();
    for (name, value) in &v.constants {
        constants.insert(name.to_string(), *value);
    }
    let (module, info) = naga::back::pipeline_constants::process_overrides(
        &module,
        &info,
        Some((naga::ShaderStage::Compute, v.entry)),
        &constants,
    )
    .map_err(|e| format!("{ctx}: overrides: {e:?}"))?;
    Ok((module.into_owned(), info.into_owned()))
}

fn translate(v: &wgtensor::runtime::ShaderVariant) -> Result<(), String> {
    let ctx = format!(
        "{} / {} {:?} {:?}",
        v.kernel, v.entry, v.dtypes, v.constants
    );
    let (module, info) = specialized(v, &ctx)?;
    let stage = naga::ShaderStage::Compute;

    spv::write_vec(
        &module,
        &info,
        &spv::Options::default(),
        Some(&spv::PipelineOptions {
            shader_stage: stage,
            entry_point: v.entry.to_string(),
        }),
    )
    .map_err(|e| format!("{ctx}: spir-v: {e:?}"))?;

    let msl_options = msl::Options {
        lang_version: (2, 4),
        ..Default::default()
    };
    msl::write_string(
        &module,
        &info,
        &msl_options,
        &msl::PipelineOptions {
            entry_point: Some((stage, v.entry.to_string())),
            ..Default::default()
        },
    )
    .map_err(|e| format!("{ctx}: msl: {e:?}"))?;

    // wgpu exposes cooperative matrices on Vulkan and Metal only (naga has no HLSL for them):
    // the planner never picks such a kernel on DX12.
    if v.source.contains("enable wgpu_cooperative_matrix;") {
        return Ok(());
    }
    // Shader model 6.2 is what f16 needs on DX12 (wgpu compiles with DXC there).
    let hlsl_options = hlsl::Options {
        shader_model: hlsl::ShaderModel::V6_2,
        ..Default::default()
    };
    let pipeline = hlsl::PipelineOptions {
        entry_point: Some((stage, v.entry.to_string())),
    };
    let mut out = String::new();
    hlsl::Writer::new(&mut out, &hlsl_options, &pipeline)
        .write(&module, &info, None)
        .map_err(|e| format!("{ctx}: hlsl: {e:?}"))?;
    Ok(())
}

#[test]
fn every_variant_translates_to_spirv_msl_and_hlsl() {
    let variants = shader_variants();
    assert!(
        variants.len() > 100,
        "only {} variants listed",
        variants.len()
    );
    let failures: Vec<String> = variants.iter().filter_map(|v| translate(v).err()).collect();
    assert!(
        failures.is_empty(),
        "{} of {} variants failed:\n{}",
        failures.len(),
        variants.len(),
        failures.join("\n")
    );
}

#[test]
fn every_shader_file_is_covered_by_a_variant() {
    let variants = shader_variants();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/shaders");
    let mut covered = HashSet::new();
    for entry in std::fs::read_dir(dir).expect("shaders dir") {
        let path = entry.expect("dir entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("wgsl") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read shader");
        assert!(
            variants.iter().any(|v| v.source.ends_with(&text)),
            "{} is not compiled by any listed variant",
            path.display()
        );
        covered.insert(path);
    }
    assert!(
        covered.len() >= 3,
        "found only {} shader files",
        covered.len()
    );
}

/// The kernel-family registry (`ops::families()`) names every file of shaders/ (not
/// shaders/lib/) exactly once, and what a family lists (variants, params layouts) is built
/// from the files it names: a family left out of the registry, or a shader left out of its
/// family, fails here.
#[test]
fn every_shader_file_is_named_by_exactly_one_family() {
    let families = wgtensor::ops::families();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
    let mut names = HashSet::new();
    for f in families {
        assert!(
            names.insert(f.name),
            "family {} is registered twice",
            f.name
        );
    }
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).expect("shaders dir") {
        let path = entry.expect("dir entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("wgsl") {
            continue;
        }
        files += 1;
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let owners: Vec<&str> = families
            .iter()
            .filter(|f| f.shaders.contains(&file.as_str()))
            .map(|f| f.name)
            .collect();
        assert_eq!(
            owners.len(),
            1,
            "shaders/{file} is named by the families {owners:?}; it must belong to exactly one \
             FAMILY listed in ops::families()"
        );
    }
    assert!(files >= 3, "found only {files} shader files");
    for f in families {
        let texts: Vec<String> = f
            .shaders
            .iter()
            .map(|s| {
                std::fs::read_to_string(dir.join(s))
                    .unwrap_or_else(|e| panic!("family {} names shaders/{s}: {e}", f.name))
            })
            .collect();
        let variants = (f.variants)();
        for v in &variants {
            assert!(
                texts.iter().any(|t| v.source.ends_with(t.as_str())),
                "family {}: variant {} / {} is built from a shader the family does not name",
                f.name,
                v.kernel,
                v.entry
            );
        }
        for (s, t) in f.shaders.iter().zip(&texts) {
            assert!(
                variants.iter().any(|v| v.source.ends_with(t.as_str())),
                "family {} names shaders/{s} but lists no variant of it",
                f.name
            );
        }
        for l in (f.params)() {
            assert!(
                texts.iter().any(|t| l.source.ends_with(t.as_str())),
                "family {}: params layout {} is of a shader the family does not name",
                f.name,
                l.rust_struct
            );
        }
    }
}

#[test]
fn every_entry_point_of_every_shader_is_listed() {
    let variants = shader_variants();
    let mut sources: Vec<&str> = variants.iter().map(|v| v.source.as_str()).collect();
    sources.sort_unstable();
    sources.dedup();
    for src in sources {
        let module = naga::front::wgsl::parse_str(src).expect("parses");
        for ep in &module.entry_points {
            assert!(
                variants
                    .iter()
                    .any(|v| v.source == src && v.entry == ep.name),
                "entry point {} is never compiled",
                ep.name
            );
        }
    }
}

/// Every kernel family's `#[repr(C)]` params struct matches the shader's `struct Params` read
/// through naga: the same member names, byte offsets and sizes, and the same total size, with
/// the Rust fields tiling the struct (none left out of the comparison).
#[test]
fn params_structs_match_the_shaders() {
    let layouts = wgtensor::ops::params_layouts();
    // Every shader that declares a Params struct has its Rust mirror listed (no count kept by
    // hand: a new family is covered once its FAMILY, with its params layouts, is registered in
    // ops::families()).
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "wgsl") {
            let text = std::fs::read_to_string(&path).unwrap();
            if text.contains("struct Params") {
                assert!(
                    layouts.iter().any(|l| l.source.contains(&text)),
                    "{} declares struct Params but no params layout of a registered FAMILY \
                     checks it",
                    path.display()
                );
            }
        }
    }
    for l in layouts {
        let what = l.rust_struct;
        let module = naga::front::wgsl::parse_str(&l.source)
            .unwrap_or_else(|e| panic!("{what}: {}", e.emit_to_string(&l.source)));
        let (_, ty) = module
            .types
            .iter()
            .find(|(_, t)| t.name.as_deref() == Some("Params"))
            .unwrap_or_else(|| panic!("{what}: the shader declares no struct Params"));
        let naga::TypeInner::Struct { members, span } = &ty.inner else {
            panic!("{what}: Params is not a struct");
        };
        let gctx = module.to_ctx();
        let wgsl: Vec<(String, usize, usize)> = members
            .iter()
            .map(|m| {
                (
                    m.name.clone().unwrap_or_default(),
                    m.offset as usize,
                    module.types[m.ty].inner.size(gctx) as usize,
                )
            })
            .collect();
        let rust: Vec<(String, usize, usize)> = l
            .fields
            .iter()
            .map(|&(n, o, s)| (n.to_string(), o, s))
            .collect();
        assert_eq!(rust, wgsl, "{what} and the shader's Params differ");
        let covered: usize = l.fields.iter().map(|f| f.2).sum();
        assert_eq!(
            covered, l.size,
            "{what}: fields left out of the layout list"
        );
        assert_eq!(*span as usize, l.size, "{what}: struct sizes differ");
    }
}

/// wgpu refuses a pipeline whose entry point reaches a binding its layout lacks, or declares a
/// binding with another access than the layout's (read-only storage against read-write). Each
/// variant's entry point, as naga's validator sees what it uses, against the layout the
/// runtime builds from the kernel's bindings and slots: a shared helper that reaches a
/// binding only another entry point's layout has fails here, not on the first GPU that runs
/// the kernel.
#[test]
fn every_entry_point_uses_only_its_layouts_bindings() {
    let mut failures = Vec::new();
    for v in shader_variants() {
        let ctx = format!("{} / {} {:?}", v.kernel, v.entry, v.dtypes);
        let module = naga::front::wgsl::parse_str(&v.source).expect("parses (see translate)");
        let info = Validator::new(ValidationFlags::all(), Capabilities::all())
            .validate(&module)
            .expect("validates (see translate)");
        let Some(ep) = module.entry_points.iter().position(|e| e.name == v.entry) else {
            failures.push(format!("{ctx}: no entry point {}", v.entry));
            continue;
        };
        let used = info.get_entry_point(ep);
        for (handle, var) in module.global_variables.iter() {
            let Some(rb) = &var.binding else { continue };
            if used[handle].is_empty() {
                continue;
            }
            let name = var.name.as_deref().unwrap_or("?");
            let Some(&(_, layout_read_only)) = v.layout.iter().find(|(b, _)| *b == rb.binding)
            else {
                failures.push(format!(
                    "{ctx}: uses `{name}` (binding {}), which its layout {:?} lacks",
                    rb.binding, v.layout
                ));
                continue;
            };
            let fits = match var.space {
                naga::AddressSpace::Uniform => rb.binding == 0,
                naga::AddressSpace::Storage { access } => {
                    rb.binding != 0
                        && layout_read_only != access.contains(naga::StorageAccess::STORE)
                }
                _ => false,
            };
            if !fits {
                failures.push(format!(
                    "{ctx}: `{name}` (binding {}, {:?}) does not match its layout entry \
                     (read-only: {layout_read_only})",
                    rb.binding, var.space
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Bytes of workgroup memory a variant's module declares once its overrides are applied.
fn workgroup_bytes(v: &wgtensor::runtime::ShaderVariant) -> u32 {
    let (module, _) = specialized(v, v.entry).expect("see translate");
    let mut layouter = naga::proc::Layouter::default();
    layouter.update(module.to_ctx()).expect("layout");
    module
        .global_variables
        .iter()
        .filter(|(_, g)| g.space == naga::AddressSpace::WorkGroup)
        .map(|(_, g)| layouter[g.ty].size)
        .sum()
}

/// Every kernel fits WebGPU's default 16 KiB of workgroup memory (browsers give no more),
/// except the cooperative-matrix GEMM tile, which needs `COOP_WG_BYTES` and is planned only
/// where the device offers that much (`Caps::coop16`).
#[test]
fn workgroup_memory_fits_what_the_planners_assume() {
    let (mut coop, mut emulated) = (0, 0);
    for v in shader_variants() {
        let bytes = workgroup_bytes(&v);
        emulated += usize::from(v.kernel == "gemm_coop_emu");
        if v.kernel.starts_with("gemm_coop") {
            assert_eq!(
                bytes,
                wgtensor::runtime::COOP_WG_BYTES,
                "{} / {}",
                v.kernel,
                v.entry
            );
            coop += 1;
        } else {
            assert!(
                bytes <= 16384,
                "{} / {} {:?} declares {bytes} bytes of workgroup memory",
                v.kernel,
                v.entry,
                v.constants
            );
        }
    }
    // Every epilogue and the split-k kernel, over real and over emulated fragments.
    assert!(
        emulated >= 4 && coop == 2 * emulated,
        "{coop} cooperative-matrix variants, {emulated} of them emulated"
    );
}

/// No kernel writes a single component of a vector in workgroup or storage memory. WGSL lets
/// such a write access the whole vector, and MSL and HLSL compile it as a read-modify-write
/// of all of it, so invocations filling different components of one vector in the same
/// barrier interval race and lose values on Metal and D3D12 (gpuweb#2112), a race that
/// Vulkan drivers and lavapipe, whose component stores are scalar, never show.
#[test]
fn no_shared_vector_is_written_a_component_at_a_time() {
    let mut failures = Vec::new();
    let mut seen = HashSet::new();
    for v in shader_variants() {
        if !seen.insert((v.kernel, v.entry, format!("{:?}", v.constants))) {
            continue;
        }
        let (module, info) = specialized(&v, v.entry).expect("see translate");
        let functions = module.functions.iter().map(|(h, f)| (f, &info[h])).chain(
            module
                .entry_points
                .iter()
                .enumerate()
                .map(|(i, e)| (&e.function, info.get_entry_point(i))),
        );
        for (f, fi) in functions {
            let mut stores = Vec::new();
            collect_stores(&f.body, &mut stores);
            for pointer in stores {
                if let Some(space) = component_of_shared_vector(&module, f, fi, pointer) {
                    failures.push(format!(
                        "{} / {}: {} writes one component of a {space:?} vector",
                        v.kernel,
                        v.entry,
                        f.name.as_deref().unwrap_or("?")
                    ));
                }
            }
        }
    }
    failures.sort();
    failures.dedup();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The pointers of every `Store` in `block`, nested blocks included.
fn collect_stores(block: &naga::Block, out: &mut Vec<naga::Handle<naga::Expression>>) {
    for s in block.iter() {
        match s {
            naga::Statement::Store { pointer, .. } => out.push(*pointer),
            naga::Statement::Block(b) => collect_stores(b, out),
            naga::Statement::If { accept, reject, .. } => {
                collect_stores(accept, out);
                collect_stores(reject, out);
            }
            naga::Statement::Loop {
                body, continuing, ..
            } => {
                collect_stores(body, out);
                collect_stores(continuing, out);
            }
            naga::Statement::Switch { cases, .. } => {
                cases.iter().for_each(|c| collect_stores(&c.body, out));
            }
            _ => {}
        }
    }
}

/// `space` where invocations share it (workgroup and storage memory).
fn shared(space: naga::AddressSpace) -> Option<naga::AddressSpace> {
    matches!(
        space,
        naga::AddressSpace::WorkGroup | naga::AddressSpace::Storage { .. }
    )
    .then_some(space)
}

/// The address space of the global `pointer` indexes a vector of, where it is an element of a
/// vector in workgroup or storage memory.
fn component_of_shared_vector(
    module: &naga::Module,
    f: &naga::Function,
    fi: &naga::valid::FunctionInfo,
    pointer: naga::Handle<naga::Expression>,
) -> Option<naga::AddressSpace> {
    let base = match f.expressions[pointer] {
        naga::Expression::Access { base, .. } | naga::Expression::AccessIndex { base, .. } => base,
        _ => return None,
    };
    let is_vector = match fi[base].ty.inner_with(&module.types) {
        naga::TypeInner::Pointer { base: t, .. } => {
            matches!(module.types[*t].inner, naga::TypeInner::Vector { .. })
        }
        naga::TypeInner::ValuePointer { size, .. } => size.is_some(),
        _ => false,
    };
    if !is_vector {
        return None;
    }
    let mut root = base;
    loop {
        match f.expressions[root] {
            naga::Expression::Access { base, .. } | naga::Expression::AccessIndex { base, .. } => {
                root = base
            }
            naga::Expression::GlobalVariable(g) => {
                return shared(module.global_variables[g].space);
            }
            // A pointer parameter (`ptr<workgroup, vec4<f32>>`) writes the caller's memory.
            naga::Expression::FunctionArgument(i) => {
                return match module.types[f.arguments[i as usize].ty].inner {
                    naga::TypeInner::Pointer { space, .. } => shared(space),
                    _ => None,
                };
            }
            _ => return None,
        }
    }
}
