use shmem_device::kernel::Kernel;
use shmem_device::prelude::*;
use shmem_host::args::HostArgs;

#[shmem_kernel]
pub unsafe fn scale(data: DeviceSlice<f32>, factor: f32) {
    let _ = (data, factor);
}

fn launch<K: Kernel>(_args: impl HostArgs<K::Params>) {}

fn main() {
    // Two parameters, one argument: the error says how many the kernel takes.
    launch::<scale>((2.0f32,));
}
