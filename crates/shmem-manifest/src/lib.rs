//! What the kernel builder (`shmem-build`) writes and the runtime (`shmem-host`) reads: the
//! manifest beside each built module ([`Manifest`]), GPU architectures ([`Arch`]), and where
//! NVSHMEM's pip wheels are installed ([`search`]).
//!
//! A small crate on purpose: a program that only loads and launches kernels depends on this,
//! not on the PTX pipeline. Its only dependencies are `serde` and `serde_json`.

mod arch;
mod manifest;
pub mod search;

pub use arch::{Arch, UnknownArch};
pub use manifest::{
    KernelManifest, MANIFEST_FORMAT, Manifest, ManifestError, ParamManifest, Resources,
    parse_version,
};
