//! The record each `#[shmem_kernel]` leaves in the bitcode (read back by `link.rs`).

use serde::Deserialize;

/// The raw record a `#[shmem_kernel]` leaves in the bitcode.
#[derive(Deserialize)]
pub(crate) struct MetaRecord {
    pub name: String,
    pub params: Vec<MetaParam>,
    #[serde(default)]
    pub max_threads: Option<u32>,
    #[serde(default)]
    pub min_blocks: Option<u32>,
    #[serde(default)]
    pub max_registers: Option<u32>,
}

#[derive(Deserialize)]
pub(crate) struct MetaParam {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: String,
}
