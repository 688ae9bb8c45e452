use shmem_device::prelude::*;

#[shmem_kernel]
pub unsafe fn k(data: &[f32]) {
    let _ = data;
}

fn main() {}
