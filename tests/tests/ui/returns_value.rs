use shmem_device::prelude::*;

#[shmem_kernel]
pub unsafe fn k(out: Sym<i32>) -> i32 {
    let _ = out;
    0
}

fn main() {}
