use shmem_device::prelude::*;

#[shmem_kernel]
pub unsafe fn k(_: u32, Team(t): Team) {
    let _ = t;
}

fn main() {}
