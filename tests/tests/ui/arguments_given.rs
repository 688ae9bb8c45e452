use shmem_device::prelude::*;

#[shmem_kernel(blocks = 4)]
pub unsafe fn k(n: u32) {
    let _ = n;
}

#[shmem_kernel(max_threads = 2048, min_blocks = 0)]
pub unsafe fn too_many(n: u32) {
    let _ = n;
}

#[shmem_kernel(min_blocks = 2)]
pub unsafe fn min_without_max(n: u32) {
    let _ = n;
}

#[shmem_kernel(max_registers = 300)]
pub unsafe fn too_many_registers(n: u32) {
    let _ = n;
}

#[shmem_kernel(max_threads = 256, max_registers = 64)]
pub unsafe fn bounds_and_registers(n: u32) {
    let _ = n;
}

#[shmem_kernel(max_registers = 72, sm_90(max_threads = 256, max_registers = 64))]
pub unsafe fn arch_bounds_and_registers(n: u32) {
    let _ = n;
}

#[shmem_kernel(sm_9x(max_registers = 64), sm_90, sm_80())]
pub unsafe fn arch_not_named(n: u32) {
    let _ = n;
}

#[shmem_kernel(sm_90(max_registers = 64), sm_90(max_registers = 72))]
pub unsafe fn arch_twice(n: u32) {
    let _ = n;
}

fn main() {}
