//! Typed buffers on the symmetric heap.

use crate::args::HostArg;
use crate::error::{Error, Result};
use crate::runtime::Shmem;
use crate::stream::StreamRef;
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
        Ok(SymBuffer {
            rt,
            ptr: rt.backend.alloc(bytes)?.cast::<T>(),
            len,
            _t: PhantomData,
        })
    }

    fn bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// This PE's address of the buffer.
    pub(crate) fn raw(&self) -> *mut T {
        self.ptr
    }

    /// The runtime it was allocated from.
    pub(crate) fn runtime(&self) -> &'rt Shmem {
        self.rt
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

    /// This PE's copy as a cudarc [`CudaSlice`](cudarc::driver::CudaSlice) on `stream`, for
    /// cudarc's copies and kernels and for libraries that take one (cuBLAS). The view
    /// borrows the buffer mutably, so the buffer is neither used through shmem-rs nor freed
    /// while it lives, and dropping it leaves the memory to the buffer (NVSHMEM's heap is
    /// never handed to `cuMemFree`). Work enqueued through it is ordered on `stream` only:
    /// a kernel of this crate that reads what a cudarc copy wrote must be launched on the
    /// same stream or after a [`Shmem::wait_for`].
    pub fn as_cuda_slice(
        &mut self,
        stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    ) -> Result<CudaView<'_, T>> {
        let gpu = self.rt.gpu()?;
        if stream.context().cu_ctx() != gpu.ctx.cu_ctx() {
            return Err(Error::Invalid(
                "the stream belongs to another CUDA context than this PE's".into(),
            ));
        }
        // SAFETY: `ptr` is `len` initialised elements of device memory of this context
        // (the symmetric heap), valid for the view's lifetime (it borrows the buffer); the
        // view's `Drop` leaks the slice, so cudarc never frees it.
        let slice = unsafe { stream.upgrade_device_ptr::<T>(self.ptr as u64, self.len) };
        Ok(CudaView {
            slice: std::mem::ManuallyDrop::new(slice),
            _buffer: PhantomData,
        })
    }

    /// Fills this PE's copy with zero bytes.
    pub fn zero(&self) -> Result<()> {
        // SAFETY: `ptr` is `bytes()` bytes of this PE's symmetric heap.
        unsafe { self.rt.backend.fill_zero(self.ptr.cast(), self.bytes()) }
    }

    /// Enqueues a fill of this PE's copy with zero bytes on `stream`: ordered after what
    /// was enqueued there before, and before what comes after (a kernel's counters and
    /// signal words reset between launches without the host waiting). In a capture, use
    /// [`Capture::zero`](crate::Capture::zero).
    pub fn zero_on(&self, stream: StreamRef<'_>) -> Result<()> {
        // SAFETY: `ptr` is `bytes()` bytes of this PE's symmetric heap; dropping the buffer
        // waits for every stream of the context before freeing it, so the fill runs first.
        unsafe {
            self.rt
                .backend
                .fill_zero_on(self.ptr.cast(), self.bytes(), stream)
        }
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
        // SAFETY: lengths match; the destination is this PE's symmetric copy.
        unsafe {
            self.rt
                .backend
                .write(self.ptr.cast(), src.as_ptr().cast(), self.bytes())
        }
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
        // SAFETY: lengths match; the source is this PE's symmetric copy.
        unsafe {
            self.rt
                .backend
                .read(dst.as_mut_ptr().cast(), self.ptr.cast(), self.bytes())
        }
    }

    /// The address at which this process can reach `pe`'s copy by loads, stores and
    /// copy-engine copies (`nvshmem_ptr`), or `None` when `pe` is not mapped (another node).
    pub fn peer_device_ptr(&self, pe: i32) -> Result<Option<u64>> {
        self.rt.check_pe(pe)?;
        Ok(self.rt.backend.peer_ptr(self.ptr.cast_const().cast(), pe))
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
        // SAFETY: allocated by the backend in `new`, freed once; collective by the
        // documented drop-order contract.
        unsafe { self.rt.backend.free(self.ptr.cast()) }
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

/// A symmetric buffer seen as a cudarc slice ([`SymBuffer::as_cuda_slice`]): derefs to
/// [`cudarc::driver::CudaSlice`], and gives the memory back to the buffer when dropped.
pub struct CudaView<'b, T> {
    slice: std::mem::ManuallyDrop<cudarc::driver::CudaSlice<T>>,
    _buffer: PhantomData<&'b mut T>,
}

impl<T> std::ops::Deref for CudaView<'_, T> {
    type Target = cudarc::driver::CudaSlice<T>;
    fn deref(&self) -> &Self::Target {
        &self.slice
    }
}

impl<T> std::ops::DerefMut for CudaView<'_, T> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.slice
    }
}

impl<T> Drop for CudaView<'_, T> {
    fn drop(&mut self) {
        // SAFETY: taken once, here; `leak` hands back the pointer without freeing it (the
        // symmetric heap owns the memory) after ordering the stream behind pending work.
        let slice = unsafe { std::mem::ManuallyDrop::take(&mut self.slice) };
        let _ = slice.leak();
    }
}

/// Device memory the program allocated (a cudarc [`CudaSlice`](cudarc::driver::CudaSlice)),
/// registered with NVSHMEM ([`Shmem::register_buffer`]) so that kernels may use it as the *local*
/// side of puts and gets: it passes for a `DeviceSlice<T>` kernel parameter. It is not
/// symmetric (no other PE can address it).
///
/// It borrows the slice mutably, so the slice is neither freed nor moved while registered;
/// dropping it unregisters the memory (`nvshmemx_buffer_unregister`) after waiting for this
/// PE's work, so do not drop it while a kernel that uses it runs on another stream.
pub struct Registered<'s, 'rt, T> {
    rt: &'rt Shmem,
    ptr: *mut T,
    len: usize,
    _slice: PhantomData<&'s mut cudarc::driver::CudaSlice<T>>,
}

impl Shmem {
    /// Registers `slice` with NVSHMEM (`nvshmemx_buffer_register`); see [`Registered`].
    /// On a GPU only: the simulator has no device memory ([`Error::Simulator`]).
    pub fn register_buffer<'s, T>(
        &self,
        slice: &'s mut cudarc::driver::CudaSlice<T>,
    ) -> Result<Registered<'s, '_, T>> {
        use cudarc::driver::DevicePtr;
        let gpu = self.gpu()?;
        if slice.context().cu_ctx() != gpu.ctx.cu_ctx() {
            return Err(Error::Invalid(
                "the slice belongs to another CUDA context than this PE's".into(),
            ));
        }
        let len = slice.len();
        let bytes = std::mem::size_of::<T>() * len;
        let (ptr, _sync) = slice.device_ptr(&gpu.stream);
        let ptr = ptr as *mut T;
        gpu.ctx.bind_to_thread()?;
        // SAFETY: `bytes` of device memory of this context, kept allocated while registered
        // (the registration borrows the slice).
        unsafe { gpu.nv.buffer_register(ptr.cast(), bytes.max(1))? };
        Ok(Registered {
            rt: self,
            ptr,
            len,
            _slice: PhantomData,
        })
    }
}

impl<T> Registered<'_, '_, T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<T> Drop for Registered<'_, '_, T> {
    fn drop(&mut self) {
        if let Ok(gpu) = self.rt.gpu()
            && gpu.settle()
        {
            // SAFETY: registered in `Shmem::register_buffer`, once; this PE's work is done.
            let _ = unsafe { gpu.nv.buffer_unregister(self.ptr.cast()) };
        }
    }
}

impl<T: Copy + 'static> HostArg<shmem_device::DeviceSlice<T>> for &Registered<'_, '_, T> {
    fn to_param(&self) -> shmem_device::DeviceSlice<T> {
        // SAFETY: `len` elements of registered device memory, alive while `self` is.
        unsafe { shmem_device::DeviceSlice::from_raw_parts(self.ptr, self.len) }
    }
}
