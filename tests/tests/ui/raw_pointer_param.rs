#[shmem_device::shmem_kernel]
pub unsafe fn k(data: *mut f32) {
    let _ = data;
}

fn main() {}
