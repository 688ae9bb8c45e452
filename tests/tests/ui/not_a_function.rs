use shmem_device::prelude::*;

#[shmem_kernel]
pub struct K;

fn main() {}
