//! The manifest written beside each PTX file: what `shmem-host` needs to know about the
//! module before loading it.

use crate::Arch;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A manifest that cannot be read or is not one this version understands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestError(pub String);

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ManifestError {}

/// `"3.4.5"` → `(3, 4, 5)`; a missing patch is 0.
pub fn parse_version(v: &str) -> Option<(u32, u32, u32)> {
    let mut it = v.trim().split('.').map(|p| p.parse::<u32>().ok());
    Some((it.next()??, it.next()??, it.next().flatten().unwrap_or(0)))
}

/// Format version of [`Manifest`]; bumped on incompatible change.
pub const MANIFEST_FORMAT: u32 = 1;

/// `target/ptx/<arch>/<crate>.json`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    /// [`MANIFEST_FORMAT`].
    pub format: u32,
    /// The kernel crate's package name.
    #[serde(rename = "crate")]
    pub crate_name: String,
    /// `sm_90` etc.
    pub arch: String,
    /// The PTX ISA version of the file (`8.5`).
    pub ptx_isa: String,
    /// The PTX file name, beside the manifest.
    pub ptx: String,
    /// The NVSHMEM device library linked in, `major.minor.patch` (from the bitcode's
    /// `nvshmemi_device_lib_version_d`). The host library must be this version or newer.
    pub nvshmem_version: String,
    /// Which bitcode file was linked.
    pub nvshmem_bitcode: String,
    /// `rustc -V` of the toolchain that compiled the kernels.
    pub toolchain: String,
    /// Whether `ptxas` accepted the file at build time.
    pub ptxas_verified: bool,
    /// The cubin `ptxas` made for exactly this arch, beside the manifest (when it ran).
    pub cubin: Option<String>,
    /// The kernels (PTX entries).
    pub kernels: Vec<KernelManifest>,
    /// Hash of the build inputs; an unchanged fingerprint skips relinking.
    pub fingerprint: String,
}

/// One kernel.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct KernelManifest {
    /// The PTX entry name.
    pub name: String,
    /// Must be launched collectively (`nvshmemx_collective_launch`): it reaches an NVSHMEM
    /// barrier, sync, wait or collective (derived from the linked call graph).
    pub collective: bool,
    /// The NVSHMEM functions that make it collective.
    pub collective_because: Vec<String>,
    /// Parameters, in order.
    pub params: Vec<ParamManifest>,
    /// Launch bounds from `#[shmem_kernel(max_threads = N)]` (PTX `.maxntid`): launches with
    /// more threads per block fail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_threads: Option<u32>,
    /// `#[shmem_kernel(min_blocks = M)]` (PTX `.minnctapersm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_blocks: Option<u32>,
    /// `#[shmem_kernel(max_registers = R)]` (PTX `.maxnreg`): `ptxas` keeps the kernel within R
    /// registers a thread, spilling if it must.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_registers: Option<u32>,
    /// What `ptxas -v` reported for the entry (when ptxas ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,
}

/// A kernel's registers and local memory as `ptxas -v` reports them for its entry.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Resources {
    /// Registers per thread.
    pub registers: u32,
    /// Bytes of stack frame per thread (its own and its callees').
    pub stack_bytes: u32,
    /// Bytes of spill stores.
    pub spill_stores: u32,
    /// Bytes of spill loads.
    pub spill_loads: u32,
}

impl Resources {
    /// Whether ptxas spilled registers to local memory.
    pub fn spills(&self) -> bool {
        self.spill_stores > 0 || self.spill_loads > 0
    }
}

/// One kernel parameter.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ParamManifest {
    /// Name in the Rust signature.
    pub name: String,
    /// Type as written in the Rust signature.
    #[serde(rename = "type")]
    pub ty: String,
    /// Size in bytes (from the PTX entry).
    pub size: u32,
    /// Alignment in bytes (from the PTX entry).
    pub align: u32,
}

impl Manifest {
    /// Reads a manifest file.
    pub fn read(path: &std::path::Path) -> Result<Manifest, ManifestError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ManifestError(format!("reading {}: {e}", path.display())))?;
        Manifest::from_json(&text)
            .map_err(|e| ManifestError(format!("{}: {}", path.display(), e.0)))
    }

    /// Parses a manifest (the text of a `.json` the builder wrote).
    pub fn from_json(text: &str) -> Result<Manifest, ManifestError> {
        let m: Manifest = serde_json::from_str(text)
            .map_err(|e| ManifestError(format!("not a shmem-rs manifest: {e}")))?;
        if m.format != MANIFEST_FORMAT {
            return Err(ManifestError(format!(
                "manifest format {} of `{}`, but this program reads format {MANIFEST_FORMAT}: rebuild the kernels with this version of shmem-rs",
                m.format, m.crate_name
            )));
        }
        Ok(m)
    }

    /// The manifest as the builder writes it.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a manifest serialises")
    }

    /// [`Manifest::nvshmem_version`](Manifest#structfield.nvshmem_version) as `(major, minor, patch)`.
    pub fn nvshmem_release(&self) -> Result<(u32, u32, u32), ManifestError> {
        parse_version(&self.nvshmem_version).ok_or_else(|| {
            ManifestError(format!(
                "manifest of `{}` has an unreadable NVSHMEM version {:?}",
                self.crate_name, self.nvshmem_version
            ))
        })
    }

    /// [`Manifest::arch`](Manifest#structfield.arch) as an [`Arch`].
    pub fn target_arch(&self) -> Result<Arch, ManifestError> {
        self.arch.parse().map_err(|e: crate::UnknownArch| {
            ManifestError(format!("manifest of `{}`: {e}", self.crate_name))
        })
    }

    /// The kernel named `name`.
    pub fn kernel(&self, name: &str) -> Option<&KernelManifest> {
        self.kernels.iter().find(|k| k.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_format() {
        assert_eq!(parse_version("3.4.5"), Some((3, 4, 5)));
        assert_eq!(parse_version("3.8"), Some((3, 8, 0)));
        assert_eq!(parse_version("x.1"), None);
        let m = Manifest {
            format: MANIFEST_FORMAT,
            crate_name: "k".into(),
            arch: "sm_90".into(),
            ptx_isa: "8.5".into(),
            ptx: "k.ptx".into(),
            nvshmem_version: "3.4.5".into(),
            nvshmem_bitcode: String::new(),
            toolchain: String::new(),
            ptxas_verified: false,
            cubin: None,
            kernels: vec![],
            fingerprint: String::new(),
        };
        let back = Manifest::from_json(&m.to_json()).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.nvshmem_release().unwrap(), (3, 4, 5));
        assert_eq!(back.target_arch().unwrap(), Arch::Sm90);
        let newer = m.to_json().replace("\"format\": 1", "\"format\": 99");
        let e = Manifest::from_json(&newer).unwrap_err().to_string();
        assert!(e.contains("format 99") && e.contains("rebuild"), "{e}");
        assert!(
            Manifest::from_json("{")
                .unwrap_err()
                .to_string()
                .contains("not a shmem-rs manifest")
        );
    }
}
