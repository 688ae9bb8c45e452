use shmem_device::prelude::*;

#[shmem_kernel(blocks = 4)]
pub unsafe fn k(n: u32) {
    let _ = n;
}

fn main() {}
