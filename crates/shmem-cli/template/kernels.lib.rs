//! The GPU kernels of {{name}}: compiled to PTX by `app/build.rs` (for the GPU) and, as an
//! ordinary crate, into the program (for the CPU simulator).

#![no_std]

use shmem_device::prelude::*;

/// Thread `i` writes `my_pe() * 1000 + i` into element `i` of the next PE's `data`.
///
/// # Safety
/// `data` is symmetric and of the same length on every PE, every PE launches the kernel, and
/// nobody reads `data` until the host has synchronised the launch and passed a barrier.
#[shmem_kernel]
pub unsafe fn send_to_next(data: SymSlice<i32>) {
    let (me, n) = (my_pe(), n_pes());
    let i = global_idx_x() as usize;
    if i < data.len() {
        // SAFETY: `(me + 1) % n` is a PE, `i` is in bounds, `data` is symmetric (the contract).
        unsafe { p(data.at(i), me * 1000 + i as i32, (me + 1) % n) };
    }
    quiet();
}
