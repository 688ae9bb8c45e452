//! Host side of shmem-rs.
//!
//! The runtime (NVSHMEM start-up on every GPU, symmetric buffers, module loading and
//! launch) is being built in the host-runtime issue. This crate already defines how a
//! `#[shmem_kernel]`'s parameter types map to the host values a launch takes, because that
//! mapping is what makes a wrong argument a compile error; see [`args`].

pub mod args;
