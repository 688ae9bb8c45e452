//! What device-only operations do when kernel code is compiled for the host.
//!
//! Kernel crates compile for the host so that the whole workspace type-checks without the
//! GPU target. Executing device code there needs a backend that provides NVSHMEM's
//! semantics on the CPU; until one is selected, reaching a device operation on the host is
//! a bug in the caller, reported by name.

/// Panics: `op` is a device operation reached on the host.
#[cfg(not(target_arch = "nvptx64"))]
#[cold]
#[inline(never)]
#[track_caller]
pub(crate) fn device_only(op: &str) -> ! {
    panic!(
        "shmem_device::{op} runs only inside a GPU kernel: build the kernel crate with \
         `cargo xtask build-ptx` and launch it through shmem-host"
    )
}

/// A special register read on the host: the simulated thread's position under the CPU
/// simulator, else [`device_only`].
#[cfg(not(target_arch = "nvptx64"))]
#[track_caller]
pub(crate) fn host_register(name: &str) -> u32 {
    #[cfg(feature = "sim")]
    if let Some(v) = crate::sim::register(name) {
        return v;
    }
    device_only(name)
}
