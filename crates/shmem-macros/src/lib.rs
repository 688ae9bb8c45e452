//! `#[shmem_kernel]`: turns an `unsafe fn` into a GPU kernel entry plus a host-side,
//! typed description of it. See `shmem_device` for the user documentation.
//!
//! The entry point only converts token types; the work is split by phase in plain
//! `proc_macro2` functions so that it can be unit-tested: `parse` reads the item and
//! validates it (collecting every error), `device` generates the PTX entry and its
//! metadata, `host` generates the launcher type.

use proc_macro::TokenStream;

mod device;
mod host;
mod parse;

/// Marks an `unsafe fn` as an NVSHMEM GPU kernel.
///
/// ```ignore
/// #[shmem_kernel]
/// pub unsafe fn ring(dst: Sym<i32>) { /* device code */ }
/// ```
///
/// Generates, for `nvptx64`, a `#[no_mangle] extern "ptx-kernel"` entry with the body; for
/// the host, the same function (so the body type-checks) and a type `ring` implementing
/// `shmem_device::kernel::Kernel`, which `shmem-host` launches with typed arguments.
///
/// Parameters must implement `shmem_device::kernel::KernelParam` (numbers, `bool`, `Sym<T>`,
/// `SymSlice<T>`, `DevicePtr<T>`, `DeviceSlice<T>`, `Team`). Kernels return nothing, are not
/// generic, `async` or `const`, and take no `self`; each mistake is reported at its tokens.
///
/// Arguments, all optional: `max_threads = N` and `min_blocks = M` are CUDA's
/// `__launch_bounds__(N, M)` (PTX `.maxntid`, `.minnctapersm`: `ptxas` budgets registers so
/// that `M` blocks of `N` threads fit on an SM; a launch with more than `N` threads is an
/// error); or `max_registers = R` is CUDA's `__maxnreg__(R)` (PTX `.maxnreg`: at most `R`
/// registers a thread whatever the block size, spilling if it must; `cargo xtask build-ptx`
/// prints the spills). `sm_NN(...)` with those arguments replaces them for `sm_NN` and newer
/// architectures (up to the next `sm_NN(...)`), as CUDA's `#if __CUDA_ARCH__ >= NN0` around
/// the attribute would: `#[shmem_kernel(max_registers = 72, sm_90(max_registers = 64))]`
/// builds with 72 registers for `sm_80` and 64 for `sm_90` and `sm_100`.
#[proc_macro_attribute]
pub fn shmem_kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr.into(), item.into()).into()
}

/// The whole expansion, on `proc_macro2` tokens.
pub(crate) fn expand(
    attr: proc_macro2::TokenStream,
    item: proc_macro2::TokenStream,
) -> proc_macro2::TokenStream {
    match parse::parse(attr, item.clone()) {
        Ok(kernel) => {
            let device = device::generate(&kernel);
            let host = host::generate(&kernel);
            quote::quote! { #device #host }
        }
        // Re-emit the item so that the editor keeps resolving names inside it.
        Err(err) => {
            let errors = err.to_compile_error();
            quote::quote! { #errors #item }
        }
    }
}

#[cfg(test)]
mod snapshots;
