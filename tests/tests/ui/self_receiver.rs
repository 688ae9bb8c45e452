use shmem_device::prelude::*;

struct S;

impl S {
    #[shmem_kernel]
    pub unsafe fn k(&self, data: SymSlice<u32>) {
        let _ = data;
    }
}

fn main() {}
