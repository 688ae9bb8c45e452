use shmem_device::kernel::{Kernel, ParamKind};
use shmem_device::prelude::*;
use shmem_host::args::HostArgs;

/// Every kind of parameter the macro accepts.
/// Launch bounds, as CUDA's `__launch_bounds__(256, 2)`.
///
/// # Safety
/// None needed.
#[shmem_kernel(max_threads = 256, min_blocks = 2)]
pub unsafe fn bounded(n: u32) {
    let _ = n;
}

/// A register budget.
///
/// # Safety
/// None needed.
#[shmem_kernel(max_registers = 64)]
pub unsafe fn budgeted(n: u32) {
    let _ = n;
}

/// A register budget for older GPUs, and launch bounds from sm_90 up.
///
/// # Safety
/// None needed.
#[shmem_kernel(max_registers = 72, sm_90(max_threads = 256, min_blocks = 4))]
pub unsafe fn budgeted_per_arch(n: u32) {
    let _ = n;
}

#[shmem_kernel]
pub unsafe fn all_kinds(a: SymSlice<f32>, b: Sym<u64>, c: DeviceSlice<i8>, d: DevicePtr<u16>, n: u32, x: f64, t: Team, flag: bool) {
    let _ = (a, b, c, d, n, x, t, flag);
}

/// A safe `fn` is accepted too (its body needs `unsafe` blocks for NVSHMEM calls).
#[shmem_kernel]
pub fn empty() {}

fn launch<K: Kernel>(_args: impl HostArgs<K::Params>) {}

fn main() {
    assert_eq!(<all_kinds as Kernel>::NAME, "all_kinds");
    let kinds: Vec<ParamKind> = <all_kinds as Kernel>::PARAMS.iter().map(|p| p.kind).collect();
    assert_eq!(kinds[0], ParamKind::SymSlice);
    assert_eq!(kinds[4], ParamKind::Scalar);
    assert_eq!(kinds[6], ParamKind::Team);
    assert_eq!(<all_kinds as Kernel>::PARAMS[0].ty, "SymSlice<f32>");
    launch::<empty>(());
}
