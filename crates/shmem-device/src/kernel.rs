//! What `#[shmem_kernel]` generates against: which types may be kernel parameters, and the
//! description of a kernel that the host launcher is typed by.
//!
//! A kernel parameter is copied bit for bit from the host into the kernel's parameter
//! space, so it must be `Copy`, have a fixed layout, and mean the same thing on the GPU as
//! on the host. [`KernelParam`] marks such types; `#[shmem_kernel]` requires it of every
//! parameter, with an error that names the parameter.

use crate::mem::{DevicePtr, DeviceSlice, Sym, SymSlice};
use crate::team::Team;

/// What a parameter is, as far as the host launcher cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// A plain number or `bool`, passed by value.
    Scalar,
    /// [`Sym<T>`]: from a host symmetric buffer (one element of it).
    Sym,
    /// [`SymSlice<T>`]: from a host symmetric buffer.
    SymSlice,
    /// [`DevicePtr<T>`]: from any device allocation.
    DevicePtr,
    /// [`DeviceSlice<T>`]: from any device allocation.
    DeviceSlice,
    /// [`Team`]: a team handle.
    Team,
    /// A user `#[repr(C)]` type that implements [`KernelParam`] itself.
    Plain,
}

/// A type that can be a `#[shmem_kernel]` parameter.
///
/// # Safety
/// The type is `Copy`, has a layout that is identical on the host and on `nvptx64`
/// (`#[repr(C)]` or `#[repr(transparent)]`, or a primitive), contains no references and no
/// pointers to host memory, and every bit pattern the host launcher can produce for it is a
/// valid value on the device.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a `#[shmem_kernel]` parameter",
    label = "not a kernel parameter type",
    note = "kernel parameters are copied bit for bit to the GPU: use a number, bool, Sym<T>, SymSlice<T>, DevicePtr<T>, DeviceSlice<T>, Team, or a #[repr(C)] Copy type that implements `shmem_device::kernel::KernelParam`"
)]
pub unsafe trait KernelParam: Copy + 'static {
    /// How the host launcher treats it.
    const KIND: ParamKind;
}

macro_rules! scalar_params {
    ($($t:ty)*) => { $(
        // SAFETY: primitives have the same layout on every target and no invalid bit patterns
        // that a host value of the same type could carry.
        unsafe impl KernelParam for $t {
            const KIND: ParamKind = ParamKind::Scalar;
        }
    )* };
}
scalar_params!(i8 i16 i32 i64 u8 u16 u32 u64 f32 f64 usize isize bool);

// SAFETY: `#[repr(transparent)]` over a pointer; the host passes a symmetric device address.
unsafe impl<T: 'static> KernelParam for Sym<T> {
    const KIND: ParamKind = ParamKind::Sym;
}
// SAFETY: `#[repr(C)]` { pointer, usize }, identical on x86-64 and nvptx64.
unsafe impl<T: 'static> KernelParam for SymSlice<T> {
    const KIND: ParamKind = ParamKind::SymSlice;
}
// SAFETY: `#[repr(transparent)]` over a pointer; the host passes a device address.
unsafe impl<T: 'static> KernelParam for DevicePtr<T> {
    const KIND: ParamKind = ParamKind::DevicePtr;
}
// SAFETY: `#[repr(C)]` { pointer, usize }, identical on x86-64 and nvptx64.
unsafe impl<T: 'static> KernelParam for DeviceSlice<T> {
    const KIND: ParamKind = ParamKind::DeviceSlice;
}
// SAFETY: `#[repr(transparent)]` over `i32`.
unsafe impl KernelParam for Team {
    const KIND: ParamKind = ParamKind::Team;
}

/// One parameter of a kernel, as written in its signature.
#[derive(Clone, Copy, Debug)]
pub struct ParamInfo {
    /// The parameter's name.
    pub name: &'static str,
    /// Its type, as written.
    pub ty: &'static str,
    /// How the launcher treats it.
    pub kind: ParamKind,
}

/// A kernel defined with `#[shmem_kernel]`, seen from the host.
///
/// For `#[shmem_kernel] fn ring(dst: SymSlice<i32>, n: i32)`, the macro generates a type
/// `ring` (in the type namespace, beside the function) implementing this trait with
/// `Params = (SymSlice<i32>, i32)`. `shmem-host` takes it as a type parameter,
/// `module.kernel::<ring>()`, and its launch accepts exactly the host-side counterparts of
/// `Params`; a wrong argument does not compile.
pub trait Kernel: 'static {
    /// The PTX entry name (the function's name; it is `#[no_mangle]`).
    const NAME: &'static str;
    /// The package name of the kernel crate that defines it (the module it is loaded from).
    const CRATE: &'static str;
    /// The parameter types, as a tuple in order.
    type Params: Copy + 'static;
    /// The parameters, described.
    const PARAMS: &'static [ParamInfo];

    /// Runs the kernel's body on the calling thread with `params`: how the CPU simulator
    /// (`shmem-host`'s simulated launches, feature `sim`) executes it on each simulated GPU
    /// thread. Outside a simulated launch, the first device operation the body reaches
    /// panics with its name.
    ///
    /// # Safety
    /// The kernel's own `# Safety` contract holds for `params`, as for a launch.
    #[cfg(not(target_arch = "nvptx64"))]
    unsafe fn call_on_host(params: Self::Params);
}
