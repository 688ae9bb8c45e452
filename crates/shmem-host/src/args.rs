//! Typed kernel arguments: which host value may stand for which kernel parameter.
//!
//! `#[shmem_kernel] fn k(a: SymSlice<f32>, n: u32)` gives the kernel type `k` with
//! `Params = (SymSlice<f32>, u32)`. A launch of `k` takes any `A: HostArgs<(SymSlice<f32>, u32)>`,
//! i.e. a tuple whose elements implement [`HostArg`] for the corresponding parameter. Numbers
//! stand for themselves; symmetric buffers (from the runtime) stand for `Sym`/`SymSlice`.
//! Anything else is a compile error at the launch site.

use core::ffi::c_void;
use shmem_device::kernel::KernelParam;

/// A host value that can be passed for a kernel parameter of type `P`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be passed for a kernel parameter of type `{P}`",
    note = "numbers pass as themselves; symmetric buffers pass for Sym<T>/SymSlice<T>; device buffers for DevicePtr<T>/DeviceSlice<T>"
)]
pub trait HostArg<P: KernelParam> {
    /// The device-side value.
    fn to_param(&self) -> P;
}

macro_rules! identity_args {
    ($($t:ty)*) => { $(
        impl HostArg<$t> for $t {
            fn to_param(&self) -> $t {
                *self
            }
        }
    )* };
}
identity_args!(i8 i16 i32 i64 u8 u16 u32 u64 f32 f64 usize isize bool shmem_device::Team);

/// A tuple of host values for a kernel's whole parameter tuple `P`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not match the kernel's parameters `{P}`",
    label = "pass a tuple with one host value per kernel parameter, in order",
    note = "the kernel takes `{P}`; a single argument is a one-element tuple: `(&buffer,)`"
)]
pub trait HostArgs<P> {
    /// The device-side parameter tuple.
    fn to_params(&self) -> P;
}

/// A parameter tuple laid out for `cuLaunchKernel`: one pointer per parameter.
pub trait ParamPtrs {
    /// Pointers to each field, in order. Valid while `self` is neither moved nor dropped.
    fn param_ptrs(&mut self) -> Vec<*mut c_void>;
}

macro_rules! tuples {
    ($(($($a:ident $p:ident $i:tt),*);)*) => { $(
        impl<$($p: KernelParam, $a: HostArg<$p>),*> HostArgs<($($p,)*)> for ($($a,)*) {
            #[allow(clippy::unused_unit)]
            fn to_params(&self) -> ($($p,)*) {
                ($(self.$i.to_param(),)*)
            }
        }
        impl<$($p: KernelParam),*> ParamPtrs for ($($p,)*) {
            fn param_ptrs(&mut self) -> Vec<*mut c_void> {
                vec![$((&raw mut self.$i).cast::<c_void>()),*]
            }
        }
    )* };
}

tuples! {
    ();
    (A0 P0 0);
    (A0 P0 0, A1 P1 1);
    (A0 P0 0, A1 P1 1, A2 P2 2);
    (A0 P0 0, A1 P1 1, A2 P2 2, A3 P3 3);
    (A0 P0 0, A1 P1 1, A2 P2 2, A3 P3 3, A4 P4 4);
    (A0 P0 0, A1 P1 1, A2 P2 2, A3 P3 3, A4 P4 4, A5 P5 5);
    (A0 P0 0, A1 P1 1, A2 P2 2, A3 P3 3, A4 P4 4, A5 P5 5, A6 P6 6);
    (A0 P0 0, A1 P1 1, A2 P2 2, A3 P3 3, A4 P4 4, A5 P5 5, A6 P6 6, A7 P7 7);
    (A0 P0 0, A1 P1 1, A2 P2 2, A3 P3 3, A4 P4 4, A5 P5 5, A6 P6 6, A7 P7 7, A8 P8 8);
    (A0 P0 0, A1 P1 1, A2 P2 2, A3 P3 3, A4 P4 4, A5 P5 5, A6 P6 6, A7 P7 7, A8 P8 8, A9 P9 9);
    (A0 P0 0, A1 P1 1, A2 P2 2, A3 P3 3, A4 P4 4, A5 P5 5, A6 P6 6, A7 P7 7, A8 P8 8, A9 P9 9, A10 P10 10);
    (A0 P0 0, A1 P1 1, A2 P2 2, A3 P3 3, A4 P4 4, A5 P5 5, A6 P6 6, A7 P7 7, A8 P8 8, A9 P9 9, A10 P10 10, A11 P11 11);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_map_to_themselves_and_pointers_address_each_field() {
        let mut params: (u32, f64, i8) = (7u32, 2.5f64, -1i8).to_params();
        assert_eq!(params, (7, 2.5, -1));
        let base = (&raw const params) as usize;
        let size = core::mem::size_of_val(&params);
        let ptrs = params.param_ptrs();
        assert_eq!(ptrs.len(), 3);
        for p in &ptrs {
            let a = *p as usize;
            assert!(a >= base && a < base + size, "pointer outside the tuple");
        }
        // SAFETY: the pointers address the fields of `params`, which is alive and unmoved.
        unsafe {
            assert_eq!(*ptrs[0].cast::<u32>(), 7);
            assert_eq!(*ptrs[1].cast::<f64>(), 2.5);
            assert_eq!(*ptrs[2].cast::<i8>(), -1);
        }
    }

    #[test]
    fn empty_parameter_list() {
        let mut p: () = ().to_params();
        assert!(p.param_ptrs().is_empty());
    }
}
