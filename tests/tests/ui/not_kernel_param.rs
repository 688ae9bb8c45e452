use shmem_device::prelude::*;

#[derive(Clone, Copy)]
pub struct Config {
    pub n: u32,
}

#[shmem_kernel]
pub unsafe fn k(cfg: Config, data: SymSlice<u32>) {
    let _ = (cfg, data);
}

fn main() {}
