use shmem_device::prelude::*;

#[shmem_kernel]
pub const fn k<T>(a: &u32, b: *const u8) -> u32 {
    0
}

fn main() {}
