use shmem_device::prelude::*;

#[shmem_kernel]
pub unsafe fn k(pair: (u32, u32)) {
    let _ = pair;
}

fn main() {}
