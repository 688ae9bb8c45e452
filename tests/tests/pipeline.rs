//! The kernel pipeline end to end, without a GPU: every example kernel crate is built for
//! sm_80 and sm_90 against NVSHMEM 3.4.5 and 3.8.0 bitcode (the halo exchange against 3.4.5,
//! the version the GPUs run; `cargo xtask build-ptx` in CI builds it and `shmem-bench` too); ptxas accepts every file; each
//! kernel's entry and NVSHMEM's globals are in the PTX; the manifest marks exactly the
//! kernels that wait or synchronise as collective.
//!
//! Modules with much out-of-line code (NVSHMEM 3.8's transport functions, the collectives'
//! out-of-line reductions) are compiled by ptxas function by function and linked by nvlink
//! (`link::Compilation`); the matrix checks which modules take that path.
//!
//! Needs `cargo xtask setup --nvshmem-version 3.4.5 --nvshmem-version 3.8.0` (CI runs it).
//! Without it the test says what is missing and passes only if `SHMEM_REQUIRE_PIPELINE` is
//! unset; CI sets it, so there a missing dependency fails the run.

use shmem_build::link::Compilation::{self, Separate, WholeProgram};
use shmem_build::{Arch, Artifact, Builder, PtxasCheck, ptx};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn nvshmem_dir(version: &str) -> Option<PathBuf> {
    let d = shmem_build::locate::deps_dir().join(format!("nvshmem-{version}"));
    shmem_build::Nvshmem::at(&d).map(|n| n.root)
}

fn prerequisites() -> bool {
    let missing: Vec<String> = ["3.4.5", "3.8.0"]
        .iter()
        .filter(|v| nvshmem_dir(v).is_none())
        .map(|v| {
            format!(
                "NVSHMEM {v} in {}",
                shmem_build::locate::deps_dir().display()
            )
        })
        .chain(
            shmem_build::locate::ptxas()
                .is_none()
                .then(|| "ptxas".to_string()),
        )
        .collect();
    if missing.is_empty() {
        return true;
    }
    let msg = format!(
        "missing {}: run `cargo xtask setup --nvshmem-version 3.4.5 --nvshmem-version 3.8.0`",
        missing.join(", ")
    );
    assert!(
        std::env::var_os("SHMEM_REQUIRE_PIPELINE").is_none(),
        "{msg}"
    );
    eprintln!("SKIPPED: {msg}");
    false
}

/// Builds `krate` for both archs against `version`, into an output directory of its own
/// (3.4.5 into `target/ptx`, shared with `cargo xtask build-ptx`, so a CI run that built the
/// examples first relinks nothing here).
fn build(krate: &str, version: &str, arch: Arch) -> Artifact {
    let out = if version == "3.4.5" {
        root().join("target/ptx")
    } else {
        root().join(format!("target/ptx-nvshmem-{version}"))
    };
    let mut a = Builder::new(root().join("examples").join(krate))
        .archs([arch])
        .nvshmem_dir(nvshmem_dir(version).unwrap())
        .ptxas(PtxasCheck::Require)
        .out_dir(out)
        .build()
        .unwrap_or_else(|e| panic!("{krate} {arch} NVSHMEM {version}: {e}"));
    a.pop().unwrap()
}

fn compilation(a: &Artifact) -> Compilation {
    Compilation::for_ptx(&ptx::parse(&std::fs::read_to_string(&a.ptx).unwrap()))
}

fn check(a: &Artifact, version: &str, expected: &[(&str, bool)]) {
    let m = &a.manifest;
    assert_eq!(m.nvshmem_version, version, "{}", a.ptx.display());
    assert_eq!(m.arch, a.arch.name());
    assert!(m.ptxas_verified, "ptxas did not run on {}", a.ptx.display());
    let cubin = a.ptx.with_extension("cubin");
    assert!(
        cubin.is_file() && std::fs::metadata(&cubin).unwrap().len() > 0,
        "no cubin beside {}",
        a.ptx.display()
    );
    let text = std::fs::read_to_string(&a.ptx).unwrap();
    let info = ptx::parse(&text);
    assert_eq!(info.target, a.arch.name());
    // The host writes the last one at load (bounded waits: shmem_device::bound).
    for g in [
        "nvshmemi_device_state_d",
        "nvshmemi_device_lib_version_d",
        "shmem_rs_wait_config",
    ] {
        assert!(
            info.visible_globals.iter().any(|v| v == g),
            "{g} not visible in {}",
            a.ptx.display()
        );
    }
    assert!(
        info.externs
            .iter()
            .all(|x| ["vprintf", "__assertfail", "malloc", "free"].contains(&x.as_str())),
        "{:?}",
        info.externs
    );
    let mut names: Vec<&str> = m.kernels.iter().map(|k| k.name.as_str()).collect();
    names.sort();
    let mut want: Vec<&str> = expected.iter().map(|(n, _)| *n).collect();
    want.sort();
    assert_eq!(names, want, "kernels of {}", a.ptx.display());
    for (name, collective) in expected {
        let k = m.kernel(name).unwrap();
        // Every parameter's size is its type's (the last one's too, before `// @name`).
        for p in &k.params {
            let want = match p.ty.split('<').next().unwrap_or_default() {
                "SymSlice" | "DeviceSlice" => Some(16),
                "Sym" | "DevicePtr" | "u64" | "i64" | "f64" | "usize" => Some(8),
                "u32" | "i32" | "f32" | "Team" => Some(4),
                _ => None,
            };
            if let Some(want) = want {
                assert_eq!(p.size, want, "{name}: parameter {} ({})", p.name, p.ty);
            }
        }
        assert_eq!(
            k.collective, *collective,
            "{name}: collective because {:?}",
            k.collective_because
        );
        assert!(
            info.entries
                .iter()
                .any(|e| e.name == *name && e.params.len() == k.params.len()),
            "{name} entry in {}",
            a.ptx.display()
        );
        assert!(
            k.params.iter().all(|p| p.size > 0 && p.align > 0),
            "{name}: {:?}",
            k.params
        );
    }
}

const RING: &[(&str, bool)] = &[("ring", false)];
const API: &[(&str, bool)] = &[
    ("rma_p_g", false),
    ("rma_bulk", false),
    ("rma_small", false),
    ("rma_warp", false),
    ("group_entry", false),
    ("signals", true),
    ("waits", true),
    ("atomics", false),
    ("ordering", true),
    ("barriers", true),
    ("peer_memory", false),
    ("block_shared", false),
    ("block_votes", false),
    ("named_barriers", false),
    ("grid_sync_rounds", false),
    ("pdl_first", false),
    ("pdl_second", false),
    ("shared_beyond_default", false),
    ("vec16", false),
    ("bulk_copies", false),
    ("fp8_convert", false),
    ("bf16_convert", false),
    ("bounds_check", false),
];
const COLL: &[(&str, bool)] = &[("collectives", true)];
const HALO: &[(&str, bool)] = &[
    ("step_f32", true),
    ("step_f64", true),
    ("persistent_f32", true),
    ("persistent_f64", true),
];

/// `#[shmem_kernel(max_threads = 512, min_blocks = M)]` reaches the manifest and the PTX.
fn check_launch_bounds(a: &Artifact) {
    let text = std::fs::read_to_string(&a.ptx).unwrap();
    for (name, blocks) in [("step_f32", 3), ("persistent_f64", 2)] {
        let k = a.manifest.kernel(name).unwrap();
        assert_eq!(
            (k.max_threads, k.min_blocks),
            (Some(512), Some(blocks)),
            "{name}"
        );
        let entry = text.find(&format!(".entry {name}(")).unwrap();
        let body = entry + text[entry..].find("\n{").unwrap();
        let head = &text[entry..body];
        assert!(
            head.contains(".maxntid 512, 1, 1")
                && head.contains(&format!(".minnctapersm {blocks}")),
            "{name}: {head}"
        );
    }
}

fn matrix(arch: Arch) {
    if !prerequisites() {
        return;
    }
    for version in ["3.4.5", "3.8.0"] {
        let ring = build("ring", version, arch);
        check(&ring, version, RING);
        let api = build("api-suite", version, arch);
        check(&api, version, API);
        let coll = build("collectives-suite", version, arch);
        check(&coll, version, COLL);
        // Small modules compile whole; the collectives (out-of-line reductions) and, with
        // 3.8, NVSHMEM's large transport functions compile function by function.
        let api_mode = if version == "3.8.0" {
            Separate
        } else {
            WholeProgram
        };
        for (a, mode) in [(&ring, WholeProgram), (&api, api_mode), (&coll, Separate)] {
            assert_eq!(compilation(a), mode, "{}", a.ptx.display());
        }
        if version == "3.4.5" {
            let halo = build("halo-exchange", version, arch);
            check(&halo, version, HALO);
            check_launch_bounds(&halo);
        }
    }
}

#[test]
fn sm_80_both_nvshmem_versions() {
    matrix(Arch::Sm80);
}

#[test]
fn sm_90_both_nvshmem_versions() {
    matrix(Arch::Sm90);
}

#[test]
fn manifest_records_parameter_layout() {
    if !prerequisites() {
        return;
    }
    let a = build("api-suite", "3.4.5", Arch::Sm90);
    let k = a.manifest.kernel("atomics").unwrap();
    let params: Vec<(&str, &str, u32, u32)> = k
        .params
        .iter()
        .map(|p| (p.name.as_str(), p.ty.as_str(), p.size, p.align))
        .collect();
    assert_eq!(params[0], ("v32", "SymSlice<i32>", 16, 8));
    assert_eq!(params[6], ("counter", "Sym<u64>", 8, 8));
    let reread = shmem_build::Manifest::read(Path::new(&a.manifest_path)).unwrap();
    assert_eq!(reread, a.manifest);
}

#[test]
fn sm_100_ring_both_nvshmem_versions() {
    if !prerequisites() {
        return;
    }
    for version in ["3.4.5", "3.8.0"] {
        let a = build("ring", version, Arch::Sm100);
        check(&a, version, RING);
        assert_eq!(a.manifest.ptx_isa, "8.6", "sm_100 needs PTX ISA 8.6");
    }
}
