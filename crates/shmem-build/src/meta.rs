//! The record each `#[shmem_kernel]` leaves in the bitcode (read back by `link.rs`).

use crate::ptx::EntryBounds;
use serde::Deserialize;

/// The raw record a `#[shmem_kernel]` leaves in the bitcode.
#[derive(Deserialize)]
pub(crate) struct MetaRecord {
    pub name: String,
    pub params: Vec<MetaParam>,
    /// `max_threads`, `min_blocks`, `max_registers`.
    #[serde(flatten)]
    pub bounds: EntryBounds,
    /// `sm_NN(...)`: bounds that replace those above from `sm_NN` up.
    #[serde(default)]
    pub arch: Vec<ArchBounds>,
}

/// One `sm_NN(...)` of a `#[shmem_kernel]`.
#[derive(Deserialize)]
pub(crate) struct ArchBounds {
    pub sm: u32,
    #[serde(flatten)]
    pub bounds: EntryBounds,
}

impl MetaRecord {
    /// The kernel's bounds on compute capability `sm` (`90`): those of the newest
    /// `sm_NN(...)` with `NN <= sm`, else the kernel's own.
    pub fn bounds_for(&self, sm: u32) -> EntryBounds {
        self.arch
            .iter()
            .filter(|a| a.sm <= sm)
            .max_by_key(|a| a.sm)
            .map_or(self.bounds, |a| a.bounds)
    }
}

#[derive(Deserialize)]
pub(crate) struct MetaParam {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_arch_bounds_at_or_below_the_target_apply() {
        let m: MetaRecord = serde_json::from_str(
            r#"{"name":"k","params":[],"max_registers":72,"arch":[{"sm":100,"max_threads":256,"min_blocks":2},{"sm":90,"max_registers":64}]}"#,
        )
        .unwrap();
        let regs = |r| EntryBounds {
            max_registers: Some(r),
            ..EntryBounds::default()
        };
        assert_eq!(m.bounds_for(80), regs(72));
        assert_eq!(m.bounds_for(89), regs(72));
        assert_eq!(m.bounds_for(90), regs(64));
        assert_eq!(
            m.bounds_for(100),
            EntryBounds {
                max_threads: Some(256),
                min_blocks: Some(2),
                max_registers: None,
            }
        );
        let plain: MetaRecord =
            serde_json::from_str(r#"{"name":"k","params":[],"max_threads":128}"#).unwrap();
        assert_eq!(plain.bounds_for(90).max_threads, Some(128));
    }
}
