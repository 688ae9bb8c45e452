use shmem_device::prelude::*;

#[shmem_kernel]
pub unsafe fn k(counter: Sym<i8>) {
    // NVSHMEM has no 8-bit atomics.
    unsafe { atomic_fetch_add(counter, 1i8, 0) };
}

fn main() {}
