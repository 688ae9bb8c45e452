//! Typed buffers on the symmetric heap.

use crate::args::HostArg;
use crate::error::{Error, Result};
use crate::runtime::{Backend, Shmem};
use cudarc::driver::{result, sys};
use shmem_device::{Sym, SymSlice};
use std::marker::PhantomData;

/// `len` elements of `T` on the symmetric heap of every PE, allocated collectively by
/// [`Shmem::alloc`]. It borrows the runtime, so it is freed before NVSHMEM is finalized.
///
/// Dropping it frees it with `nvshmem_free`, which is collective: every PE must drop its
/// buffers in the same order (as with any NVSHMEM program).
pub struct SymBuffer<'rt, T> {
    rt: &'rt Shmem,
    ptr: *mut T,
    len: usize,
    _t: PhantomData<T>,
}

impl<'rt, T: Copy + 'static> SymBuffer<'rt, T> {
    pub(crate) fn new(rt: &'rt Shmem, len: usize) -> Result<Self> {
        let bytes = len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
            Error::Invalid(format!(
                "{len} elements of {} overflow",
                std::any::type_name::<T>()
            ))
        })?;
        #[cfg(feature = "sim")]
        if let Some(sim) = rt.sim() {
            let offset = sim
                .alloc(bytes)?
                .map_err(|(min, max)| Error::UnequalAllocation {
                    mine: bytes,
                    min,
                    max,
                })?;
            let b = SymBuffer {
                rt,
                ptr: sim.world().address(sim.my_pe() as u32, offset).cast::<T>(),
                len,
                _t: PhantomData,
            };
            b.zero()?;
            return Ok(b);
        }
        let (min, max) = rt.min_max(bytes as i64)?;
        if min != max {
            return Err(Error::UnequalAllocation {
                mine: bytes,
                min: min as usize,
                max: max as usize,
            });
        }
        let ptr = rt.gpu()?.raw_malloc(bytes).cast::<T>();
        if ptr.is_null() {
            return Err(Error::Nvshmem {
                call: "nvshmem_malloc (symmetric heap exhausted? see NVSHMEM_SYMMETRIC_SIZE)",
                status: -1,
            });
        }
        let b = SymBuffer {
            rt,
            ptr,
            len,
            _t: PhantomData,
        };
        b.zero()?;
        Ok(b)
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The device address of this PE's copy (for cudarc launches and libraries such as
    /// cuBLAS); under the simulator, its address in this process.
    pub fn device_ptr(&self) -> u64 {
        self.ptr as u64
    }

    /// Under the simulator: this PE's copy as host memory (no kernel runs while a PE's host
    /// code does: launches are collective).
    #[cfg(feature = "sim")]
    fn host_slice(&self) -> Option<*mut T> {
        self.rt.sim().map(|_| self.ptr)
    }
    #[cfg(not(feature = "sim"))]
    fn host_slice(&self) -> Option<*mut T> {
        None
    }

    /// Fills this PE's copy with zero bytes.
    pub fn zero(&self) -> Result<()> {
        if let Some(p) = self.host_slice() {
            // SAFETY: `len` `T`s of this PE's simulated heap, which only this thread touches
            // while no launch runs.
            unsafe { std::ptr::write_bytes(p, 0, self.len) };
            return Ok(());
        }
        // SAFETY: `ptr` is `len * size_of::<T>()` bytes of this PE's symmetric heap.
        unsafe {
            result::memset_d8_sync(
                self.ptr as sys::CUdeviceptr,
                0,
                self.len * std::mem::size_of::<T>(),
            )?
        };
        Ok(())
    }

    /// Copies `src` into this PE's copy.
    pub fn copy_from(&self, src: &[T]) -> Result<()> {
        if src.len() != self.len {
            return Err(Error::Invalid(format!(
                "copy_from: buffer has {} elements, host slice {}",
                self.len,
                src.len()
            )));
        }
        if let Some(p) = self.host_slice() {
            // SAFETY: lengths match; `p` is this PE's simulated copy (see `zero`).
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p, self.len) };
            return Ok(());
        }
        self.rt.synchronize()?;
        // SAFETY: lengths match; the destination is this PE's symmetric copy; the stream is idle.
        unsafe { result::memcpy_htod_sync(self.ptr as sys::CUdeviceptr, src)? };
        Ok(())
    }

    /// Copies this PE's copy into `dst`, after the stream's work has finished.
    pub fn copy_to(&self, dst: &mut [T]) -> Result<()> {
        if dst.len() != self.len {
            return Err(Error::Invalid(format!(
                "copy_to: buffer has {} elements, host slice {}",
                self.len,
                dst.len()
            )));
        }
        if let Some(p) = self.host_slice() {
            // SAFETY: lengths match; `p` is this PE's simulated copy (see `zero`).
            unsafe { std::ptr::copy_nonoverlapping(p, dst.as_mut_ptr(), self.len) };
            return Ok(());
        }
        self.rt.synchronize()?;
        // SAFETY: lengths match; the source is this PE's symmetric copy; the stream is idle.
        unsafe { result::memcpy_dtoh_sync(dst, self.ptr as sys::CUdeviceptr)? };
        Ok(())
    }

    /// The address at which this process can reach `pe`'s copy by loads, stores and
    /// copy-engine copies (`nvshmem_ptr`), or `None` when `pe` is not mapped (another node).
    pub fn peer_device_ptr(&self, pe: i32) -> Result<Option<u64>> {
        self.rt.check_pe(pe)?;
        #[cfg(feature = "sim")]
        if let Some(sim) = self.rt.sim() {
            let w = sim.world();
            let offset = self.ptr as usize - w.address(sim.my_pe() as u32, 0) as usize;
            return Ok(Some(w.address(pe as u32, offset) as u64));
        }
        let lib = self.rt.gpu()?.lib;
        // SAFETY: `ptr` is a live symmetric address; `pe` is in range; the call only
        // translates the address.
        let p = unsafe { (lib.nvshmem_ptr)(self.ptr.cast_const().cast(), pe) };
        Ok((!p.is_null()).then_some(p as u64))
    }

    /// This PE's copy as a `Vec`.
    pub fn to_vec(&self) -> Result<Vec<T>>
    where
        T: Default,
    {
        let mut v = vec![T::default(); self.len];
        self.copy_to(&mut v)?;
        Ok(v)
    }

    /// Element `i`, to pass for a `Sym<T>` kernel parameter.
    pub fn at(&self, i: usize) -> Result<SymAt<'_, T>> {
        if i >= self.len {
            return Err(Error::Invalid(format!(
                "index {i} out of range for a buffer of {}",
                self.len
            )));
        }
        Ok(SymAt {
            ptr: self.ptr.wrapping_add(i),
            _b: PhantomData,
        })
    }
}

impl<T> Drop for SymBuffer<'_, T> {
    fn drop(&mut self) {
        match &self.rt.backend {
            Backend::Gpu(g) => {
                let _ = g.stream.synchronize();
                // SAFETY: allocated by `nvshmem_malloc` in `new`, freed once; collective by
                // the documented drop-order contract.
                unsafe { (g.lib.nvshmem_free)(self.ptr.cast()) }
            }
            // The first PE to drop it frees the offset in every heap; no PE can allocate
            // again before every PE has dropped it (allocation is collective, drops come in
            // the same order on every PE).
            #[cfg(feature = "sim")]
            Backend::Sim(s) => {
                let w = s.world();
                w.free_offset(self.ptr as usize - w.address(s.my_pe() as u32, 0) as usize);
            }
        }
    }
}

/// One element of a [`SymBuffer`], for a `Sym<T>` kernel parameter.
#[derive(Clone, Copy)]
pub struct SymAt<'b, T> {
    ptr: *mut T,
    _b: PhantomData<&'b T>,
}

impl<T: Copy + 'static> HostArg<SymSlice<T>> for &SymBuffer<'_, T> {
    fn to_param(&self) -> SymSlice<T> {
        // SAFETY: `ptr..ptr+len` is a symmetric allocation alive for as long as `self`.
        unsafe { SymSlice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T: Copy + 'static> HostArg<Sym<T>> for &SymBuffer<'_, T> {
    fn to_param(&self) -> Sym<T> {
        // SAFETY: the first element of a symmetric allocation (a zero-length buffer still has
        // a valid symmetric address, which the kernel must not dereference).
        unsafe { Sym::from_raw(self.ptr) }
    }
}

impl<T: Copy + 'static> HostArg<Sym<T>> for SymAt<'_, T> {
    fn to_param(&self) -> Sym<T> {
        // SAFETY: an in-bounds element of a live symmetric allocation.
        unsafe { Sym::from_raw(self.ptr) }
    }
}
