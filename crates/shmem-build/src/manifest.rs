//! The manifest written beside each PTX file: what `shmem-host` needs to know about the
//! module before loading it.

use serde::{Deserialize, Serialize};

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
    pub fn read(path: &std::path::Path) -> crate::Result<Manifest> {
        use crate::error::IoContext;
        let text = std::fs::read_to_string(path).ctx(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| {
            crate::Error::Crate(format!(
                "{} is not a shmem-rs manifest: {e}",
                path.display()
            ))
        })
    }

    /// The kernel named `name`.
    pub fn kernel(&self, name: &str) -> Option<&KernelManifest> {
        self.kernels.iter().find(|k| k.name == name)
    }
}

/// The raw record a `#[shmem_kernel]` leaves in the bitcode.
#[derive(Deserialize)]
pub(crate) struct MetaRecord {
    pub name: String,
    pub params: Vec<MetaParam>,
    #[serde(default)]
    pub max_threads: Option<u32>,
    #[serde(default)]
    pub min_blocks: Option<u32>,
}

#[derive(Deserialize)]
pub(crate) struct MetaParam {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: String,
}
