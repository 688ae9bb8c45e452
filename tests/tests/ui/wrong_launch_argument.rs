use shmem_device::kernel::Kernel;
use shmem_device::prelude::*;
use shmem_host::args::HostArgs;

#[shmem_kernel]
pub unsafe fn scale(data: DeviceSlice<f32>, factor: f32) {
    let _ = (data, factor);
}

fn launch<K: Kernel>(_args: impl HostArgs<K::Params>) {}

fn main() {
    // `factor` is an f32; an f64 is a compile error, not a garbled kernel argument.
    launch::<scale>((1.0f64, 2.0f64));
}
