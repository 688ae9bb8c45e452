//! Build Rust NVSHMEM kernels to PTX.
//!
//! This is the library behind `cargo xtask build-ptx`, and what a user's `build.rs` calls to
//! build and embed kernels ([`embed_kernels`]):
//!
//! ```no_run
//! // build.rs of a program whose kernels are the crate in ../my-kernels; main.rs then has
//! // `static KERNELS: EmbeddedKernels = shmem_host::include_kernels!("my-kernels");`
//! shmem_build::embed_kernels("../my-kernels");
//! ```
//!
//! # The pipeline
//!
//! | step | tool | result |
//! |---|---|---|
//! | 1 | `cargo rustc --target nvptx64-nvidia-cuda -Zbuild-std=core`, fat LTO | one bitcode module: the crate and `core` |
//! | 2 | `llvm-link --only-needed` with `libnvshmem_device*.bc` | kernels + the NVSHMEM functions they use |
//! | 3 | read the linked IR | kernel records, NVSHMEM version, call graph → collective kernels |
//! | 4 | `opt` internalize (all but entries and NVSHMEM state), `default<O3>`, `globaldce` | NVSHMEM inlined into the kernels |
//! | 5 | `llc -mcpu=sm_XX -mattr=+ptxXY` | PTX |
//! | 6 | verify; `ptxas` when installed | entries, globals, no stray externs; accepted by ptxas; a cubin |
//!
//! The LLVM tools are the toolchain's own (`llvm-tools` component), so the bitcode rustc
//! writes is always readable by them.

mod device;
mod embed;
mod error;
pub mod ir;
pub mod link;
pub mod locate;
mod meta;
pub mod ptx;
pub mod sass;
pub mod setup;
mod toolchain;

pub use device::scrub as scrub_cargo_env;
pub use embed::{ARCHS_VAR, Embedded, KERNELS_VAR, embed_kernels, try_embed_kernels};
pub use error::{Error, Result};
pub use locate::Nvshmem;
pub use shmem_manifest::{
    Arch, KernelManifest, MANIFEST_FORMAT, Manifest, ParamManifest, Resources, search,
};
pub use toolchain::Toolchain;

use error::IoContext;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The one command that installs what building kernels needs.
pub const SETUP_FIX: &str = "shmem setup   (or, in the shmem-rs checkout, `cargo xtask setup`): installs the \
     toolchain components, NVSHMEM's wheel and ptxas into ~/.cache/shmem-rs";

/// Whether to run `ptxas` on the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PtxasCheck {
    /// When ptxas is found (the default).
    IfFound,
    /// Always; a missing ptxas is an error (CI).
    Require,
    /// Never.
    Skip,
}

/// Builds one kernel crate for one or more architectures.
#[derive(Clone, Debug)]
pub struct Builder {
    crate_dir: PathBuf,
    archs: Vec<Arch>,
    nvshmem: Option<PathBuf>,
    toolchain: Option<String>,
    out_dir: Option<PathBuf>,
    ptxas: PtxasCheck,
    context: Option<(Toolchain, Workspace)>,
}

/// One built PTX file and its manifest.
#[derive(Clone, Debug)]
pub struct Artifact {
    /// The architecture.
    pub arch: Arch,
    /// `<out>/<arch>/<crate>.ptx`.
    pub ptx: PathBuf,
    /// `<out>/<arch>/<crate>.json`.
    pub manifest_path: PathBuf,
    /// The manifest's content.
    pub manifest: Manifest,
    /// Whether this call relinked or ran ptxas (false: everything was up to date).
    pub rebuilt: bool,
    /// The kernel crate's source directory (for `rerun-if-changed`).
    pub crate_dir: PathBuf,
}

impl Builder {
    /// A builder for the kernel crate in `crate_dir` (the directory of its `Cargo.toml`).
    pub fn new(crate_dir: impl Into<PathBuf>) -> Builder {
        Builder {
            crate_dir: crate_dir.into(),
            archs: vec![Arch::Sm90],
            nvshmem: None,
            toolchain: None,
            out_dir: None,
            ptxas: PtxasCheck::IfFound,
            context: None,
        }
    }
    /// Reuse a toolchain and workspace the caller already has (building several crates:
    /// detect and run `cargo metadata` once, not once per crate).
    pub fn in_workspace(mut self, toolchain: Toolchain, workspace: Workspace) -> Builder {
        self.context = Some((toolchain, workspace));
        self
    }
    /// Build for these architectures (default: `sm_90`).
    pub fn archs(mut self, archs: impl IntoIterator<Item = Arch>) -> Builder {
        self.archs = archs.into_iter().collect();
        self
    }
    /// Use the NVSHMEM in `dir` instead of searching.
    pub fn nvshmem_dir(mut self, dir: impl Into<PathBuf>) -> Builder {
        self.nvshmem = Some(dir.into());
        self
    }
    /// Use this rustup toolchain (default: `nightly`, else `stable` with `RUSTC_BOOTSTRAP`).
    pub fn toolchain(mut self, name: impl Into<String>) -> Builder {
        self.toolchain = Some(name.into());
        self
    }
    /// Write `<arch>/<crate>.{ptx,json}` under `dir` (default: `<target>/ptx`).
    pub fn out_dir(mut self, dir: impl Into<PathBuf>) -> Builder {
        self.out_dir = Some(dir.into());
        self
    }
    /// Whether to run ptxas.
    pub fn ptxas(mut self, check: PtxasCheck) -> Builder {
        self.ptxas = check;
        self
    }

    /// Runs the pipeline for every architecture.
    pub fn build(&self) -> Result<Vec<Artifact>> {
        let manifest_path = self.crate_dir.join("Cargo.toml");
        let (tc, meta) = match &self.context {
            Some((tc, ws)) => (tc.clone(), ws.clone()),
            None => {
                let tc = Toolchain::detect(self.toolchain.as_deref())?;
                let ws = Workspace::read(&tc, &manifest_path)?;
                (tc, ws)
            }
        };
        let pkg = meta
            .packages
            .iter()
            .find(|p| same_file(&p.manifest_path, &manifest_path))
            .ok_or_else(|| Error::Crate(format!("no package at {}", manifest_path.display())))?
            .clone();
        let nvshmem = Nvshmem::locate(self.nvshmem.as_deref())?;
        let ptxas = match self.ptxas {
            PtxasCheck::Skip => None,
            PtxasCheck::IfFound => locate::ptxas(),
            PtxasCheck::Require => Some(locate::ptxas().ok_or_else(|| Error::Toolchain {
                problem: format!(
                    "ptxas not found (PTXAS, CUDA_HOME/bin, PATH, {}, site-packages)",
                    locate::deps_dir().join("cuda-nvcc").display()
                ),
                fix: SETUP_FIX.into(),
            })?),
        };
        let out_root = self
            .out_dir
            .clone()
            .unwrap_or_else(|| meta.target_dir.join("ptx"));
        let mut artifacts = Vec::new();
        for &arch in &self.archs {
            let nv_bc = nvshmem.bitcode(arch)?;
            let target_dir = meta.target_dir.join("shmem-build").join(arch.name());
            let (bc, log) =
                device::build_bitcode(&tc, &manifest_path, &pkg.name, arch, &target_dir)?;
            if log.contains("warning") {
                eprint!("{log}");
            }
            let out_dir = out_root.join(arch.name());
            std::fs::create_dir_all(&out_dir).ctx(|| format!("creating {}", out_dir.display()))?;
            let ptx_path = out_dir.join(format!("{}.ptx", pkg.name));
            let manifest_file = out_dir.join(format!("{}.json", pkg.name));
            let inputs = fingerprint(&bc, &[&nv_bc], arch, &tc.version);
            let cubin_path = out_dir.join(format!("{}.cubin", pkg.name));
            // One work directory per (NVSHMEM, output) pair, so concurrent builds of the same
            // crate against different NVSHMEM versions do not share intermediate files.
            let work = target_dir
                .join("shmem-link")
                .join(&pkg.name)
                .join(path_key(&[&nv_bc, &out_dir]));
            let previous = Manifest::read(&manifest_file)
                .ok()
                .filter(|m| m.fingerprint == inputs && ptx_path.is_file());
            let (mut manifest, mut rebuilt) = match previous {
                Some(m) => (m, false),
                None => {
                    let linked = link::link(&tc, &bc, &nv_bc, arch, &work)?;
                    let problems = link::verify(&linked.ptx, &linked.kernels, arch);
                    let tmp_ptx = work.join(format!("{}.ptx", pkg.name));
                    std::fs::write(&tmp_ptx, &linked.ptx)
                        .ctx(|| format!("writing {}", tmp_ptx.display()))?;
                    if !problems.is_empty() {
                        return Err(Error::Verify {
                            ptx: tmp_ptx,
                            problems,
                        });
                    }
                    let _ = std::fs::remove_file(&cubin_path);
                    std::fs::write(&ptx_path, &linked.ptx)
                        .ctx(|| format!("writing {}", ptx_path.display()))?;
                    let (maj, min) = arch.ptx_isa();
                    let m = Manifest {
                        format: MANIFEST_FORMAT,
                        crate_name: pkg.name.clone(),
                        arch: arch.name().into(),
                        ptx_isa: format!("{maj}.{min}"),
                        ptx: format!("{}.ptx", pkg.name),
                        nvshmem_version: linked.nvshmem_version,
                        nvshmem_bitcode: nv_bc.display().to_string(),
                        toolchain: tc.version.clone(),
                        ptxas_verified: false,
                        cubin: None,
                        kernels: linked.kernels,
                        fingerprint: inputs,
                    };
                    (m, true)
                }
            };
            // ptxas is not part of the fingerprint: unchanged PTX that was never checked is
            // checked now, without relinking; PTX already checked stays checked.
            if let Some(ptxas) = &ptxas
                && (!manifest.ptxas_verified || !cubin_path.is_file())
            {
                {
                    std::fs::create_dir_all(&work)
                        .ctx(|| format!("creating {}", work.display()))?;
                    let tmp_cubin = work.join(format!("{}.cubin", pkg.name));
                    let resources = match link::ptxas(ptxas, &ptx_path, arch, &tmp_cubin) {
                        Ok((_, r)) => r,
                        Err(e) => {
                            let _ = std::fs::remove_file(&manifest_file);
                            return Err(e);
                        }
                    };
                    for k in &mut manifest.kernels {
                        k.resources = resources
                            .iter()
                            .find(|(name, _)| *name == k.name)
                            .map(|(_, r)| *r);
                    }
                    std::fs::copy(&tmp_cubin, &cubin_path)
                        .ctx(|| format!("writing {}", cubin_path.display()))?;
                    manifest.ptxas_verified = true;
                    manifest.cubin = Some(format!("{}.cubin", pkg.name));
                    rebuilt = true;
                }
            }
            if rebuilt {
                let json = manifest.to_json();
                std::fs::write(&manifest_file, json + "\n")
                    .ctx(|| format!("writing {}", manifest_file.display()))?;
            }
            artifacts.push(Artifact {
                arch,
                ptx: ptx_path,
                manifest_path: manifest_file,
                manifest,
                rebuilt,
                crate_dir: pkg.dir.clone(),
            });
        }
        Ok(artifacts)
    }
}

/// Prints `cargo:rerun-if-changed` for the kernel crate's sources, for a `build.rs`.
pub fn emit_cargo_directives(artifacts: &[Artifact]) {
    for dir in artifacts
        .iter()
        .map(|a| &a.crate_dir)
        .collect::<std::collections::BTreeSet<_>>()
    {
        println!("cargo:rerun-if-changed={}", dir.join("src").display());
        println!(
            "cargo:rerun-if-changed={}",
            dir.join("Cargo.toml").display()
        );
    }
    println!("cargo:rerun-if-env-changed=NVSHMEM_HOME");
}

/// Bumped when the pipeline's output changes for the same inputs (2: parameter sizes of an
/// entry's last parameter read right; 3: large modules compiled separately, see
/// [`link::Compilation`]; 4: the wait configuration kept visible; 5: `ptxas -v`'s
/// resources in the manifest), so that older builds are relinked.
const PIPELINE_REVISION: u32 = 5;

/// Hash of the build inputs: the kernel bitcode's bytes (rustc may rewrite it unchanged, so
/// its time says little), the other files' identity (path, size, time: NVSHMEM's bitcode is
/// large and never edited), and the settings.
fn fingerprint(kernel_bc: &Path, others: &[&Path], arch: Arch, toolchain: &str) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (env!("CARGO_PKG_VERSION"), PIPELINE_REVISION).hash(&mut h);
    (arch, toolchain).hash(&mut h);
    std::fs::read(kernel_bc).ok().hash(&mut h);
    for f in others {
        f.hash(&mut h);
        if let Ok(m) = std::fs::metadata(f) {
            m.len().hash(&mut h);
            m.modified().ok().hash(&mut h);
        }
    }
    format!("{:016x}", h.finish())
}

/// A short stable name for a set of paths.
fn path_key(paths: &[&Path]) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    paths.hash(&mut h);
    format!("{:016x}", h.finish())
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// A package of the workspace, as `cargo metadata` reports it.
#[derive(Clone, Debug)]
pub struct Package {
    /// Package name.
    pub name: String,
    /// Its `Cargo.toml`.
    pub manifest_path: PathBuf,
    /// Its directory.
    pub dir: PathBuf,
    /// `[package.metadata.shmem] kernels = true`.
    pub is_kernel_crate: bool,
}

/// The workspace around a manifest.
#[derive(Clone, Debug)]
pub struct Workspace {
    /// Workspace root.
    pub root: PathBuf,
    /// Cargo's target directory.
    pub target_dir: PathBuf,
    /// Member packages.
    pub packages: Vec<Package>,
}

impl Workspace {
    /// `cargo metadata --no-deps` for the workspace containing `manifest_path`.
    pub fn read(tc: &Toolchain, manifest_path: &Path) -> Result<Workspace> {
        let text = toolchain::run_stdout(
            Command::new(&tc.cargo)
                .args([
                    "metadata",
                    "--format-version",
                    "1",
                    "--no-deps",
                    "--manifest-path",
                ])
                .arg(manifest_path),
        )?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Error::Crate(format!("cargo metadata: {e}")))?;
        let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
        let packages = v["packages"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|p| {
                        let manifest_path = PathBuf::from(s(&p["manifest_path"]));
                        Package {
                            name: s(&p["name"]),
                            dir: manifest_path
                                .parent()
                                .map(Path::to_path_buf)
                                .unwrap_or_default(),
                            manifest_path,
                            is_kernel_crate: p["metadata"]["shmem"]["kernels"].as_bool()
                                == Some(true),
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(Workspace {
            root: PathBuf::from(s(&v["workspace_root"])),
            target_dir: PathBuf::from(s(&v["target_directory"])),
            packages,
        })
    }
}
