use shmem_device::prelude::*;

#[shmem_kernel]
pub async unsafe fn k(data: SymSlice<u32>) {
    let _ = data;
}

fn main() {}
