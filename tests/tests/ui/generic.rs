use shmem_device::prelude::*;

#[shmem_kernel]
pub unsafe fn k<T: Copy>(data: SymSlice<T>) {
    let _ = data;
}

fn main() {}
