//! Addresses: symmetric, local and peer.
//!
//! NVSHMEM's one-sided operations name remote memory by a *symmetric address*: the address
//! of an object on the symmetric heap, which every PE allocated collectively at the same
//! offset. The same address, handed to NVSHMEM with a PE number, means "that object on
//! that PE". A plain device pointer has no such meaning on another PE, and passing one as a
//! remote destination is undefined behaviour in C. Here the distinction is a type:
//!
//! | type | points to | remote operand of put/get/atomics? |
//! |---|---|---|
//! | [`Sym<T>`] / [`SymSlice<T>`] | symmetric heap, same offset on every PE | yes |
//! | [`DevicePtr<T>`] / [`DeviceSlice<T>`] | this GPU's global memory (cudaMalloc, a non-symmetric buffer) | no, local side only |
//! | [`PeerPtr<T>`] / [`PeerSlice<T>`] | another PE's symmetric object, mapped into this GPU's address space (NVLink / same node), from [`crate::ptr`] | loads and stores, not NVSHMEM calls |
//! | [`SharedPtr<T>`] | the calling block's shared memory, from [`crate::shared::dynamic`] | no, this block only |
//!
//! Offsets are in elements of `T`, never bytes. Slices carry their length, and the
//! operations that take two slices check that the lengths agree.
//!
//! All of these are `Copy` handles with a stable layout (`#[repr(C)]`), so they can be kernel
//! parameters. None of them is a Rust reference: GPU memory is shared by thousands of threads
//! and other PEs, so reading and writing through them is `unsafe` and the caller argues that
//! no other thread writes the same element concurrently (or uses the atomics in
//! [`crate::amo`] and [`crate::scoped`]).

use core::marker::PhantomData;

macro_rules! pointer_common {
    ($name:ident, $what:literal) => {
        impl<T> Clone for $name<T> {
            #[inline(always)]
            fn clone(&self) -> Self {
                *self
            }
        }
        impl<T> Copy for $name<T> {}
        impl<T> core::fmt::Debug for $name<T> {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                write!(f, concat!($what, "({:p})"), self.ptr)
            }
        }
        impl<T> $name<T> {
            /// Wraps a raw pointer.
            ///
            /// # Safety
            #[doc = concat!("`ptr` must be ", $what, " address of a `T`, or this handle must never be dereferenced or handed to NVSHMEM.")]
            #[inline(always)]
            pub const unsafe fn from_raw(ptr: *mut T) -> Self {
                Self { ptr, _t: PhantomData }
            }
            /// The raw pointer. For a symmetric handle this is also the address of this PE's
            /// own copy, usable with plain loads and stores.
            #[inline(always)]
            pub const fn as_ptr(self) -> *mut T {
                self.ptr
            }
            /// The handle `count` elements further on (no bounds: a single-element handle
            /// has none). Pointer arithmetic wraps, so this is safe; using the result is not.
            #[inline(always)]
            pub const fn wrapping_add(self, count: usize) -> Self {
                Self { ptr: self.ptr.wrapping_add(count), _t: PhantomData }
            }
            /// The same address as a handle to a `U`.
            ///
            /// # Safety
            /// The address is aligned for `U` and the memory holds valid `U`s wherever it is read.
            #[inline(always)]
            pub const unsafe fn cast<U>(self) -> $name<U> {
                $name { ptr: self.ptr.cast(), _t: PhantomData }
            }
            /// Reads the element with a plain load.
            ///
            /// # Safety
            /// The address is valid and aligned for `T` and no thread or PE writes it
            /// concurrently (a concurrent write is a data race; use [`crate::scoped`]).
            #[inline(always)]
            pub unsafe fn read(self) -> T {
                // SAFETY: the caller guarantees validity and the absence of racing writes.
                unsafe { self.ptr.read() }
            }
            /// Reads the element with a volatile load (never cached in a register, never
            /// merged): for polling a flag another agent writes.
            ///
            /// # Safety
            /// As [`Self::read`], except that a concurrent write by another agent is allowed
            /// for types whose loads are single instructions (`u32`, `u64`, ...).
            #[inline(always)]
            pub unsafe fn read_volatile(self) -> T {
                // SAFETY: the caller guarantees validity.
                unsafe { self.ptr.read_volatile() }
            }
            /// Writes the element with a plain store.
            ///
            /// # Safety
            /// The address is valid and aligned for `T` and no thread or PE reads or writes
            /// it concurrently.
            #[inline(always)]
            pub unsafe fn write(self, value: T) {
                // SAFETY: the caller guarantees validity and exclusive access.
                unsafe { self.ptr.write(value) }
            }
            /// Writes the element with a volatile store.
            ///
            /// # Safety
            /// As [`Self::write`].
            #[inline(always)]
            pub unsafe fn write_volatile(self, value: T) {
                // SAFETY: the caller guarantees validity and exclusive access.
                unsafe { self.ptr.write_volatile(value) }
            }
        }
    };
}

macro_rules! slice_common {
    ($name:ident, $elem:ident, $what:literal) => {
        impl<T> Clone for $name<T> {
            #[inline(always)]
            fn clone(&self) -> Self {
                *self
            }
        }
        impl<T> Copy for $name<T> {}
        impl<T> core::fmt::Debug for $name<T> {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                write!(f, concat!($what, "({:p}; {})"), self.ptr, self.len)
            }
        }
        impl<T> $name<T> {
            /// Wraps a raw pointer and an element count.
            ///
            /// # Safety
            #[doc = concat!("`ptr..ptr+len` must be ", $what, " range of `T`s, or this handle must never be dereferenced or handed to NVSHMEM.")]
            #[inline(always)]
            pub const unsafe fn from_raw_parts(ptr: *mut T, len: usize) -> Self {
                Self { ptr, len, _t: PhantomData }
            }
            /// Number of elements.
            #[inline(always)]
            pub const fn len(self) -> usize {
                self.len
            }
            /// Whether the slice has no elements.
            #[inline(always)]
            pub const fn is_empty(self) -> bool {
                self.len == 0
            }
            /// The raw pointer to the first element (for a symmetric slice: of this PE's copy).
            #[inline(always)]
            pub const fn as_ptr(self) -> *mut T {
                self.ptr
            }
            /// Element `index`.
            ///
            /// # Panics
            /// If `index >= len` (on the GPU: prints the location and traps).
            #[inline(always)]
            #[track_caller]
            pub fn at(self, index: usize) -> $elem<T> {
                assert!(index < self.len, "index out of bounds");
                $elem { ptr: self.ptr.wrapping_add(index), _t: PhantomData }
            }
            /// Element `index` without a bounds check.
            ///
            /// # Safety
            /// `index < self.len()`.
            #[inline(always)]
            pub unsafe fn at_unchecked(self, index: usize) -> $elem<T> {
                // SAFETY: the caller keeps `index` in bounds, so the pointer stays inside the
                // allocation this slice describes.
                $elem { ptr: unsafe { self.ptr.add(index) }, _t: PhantomData }
            }
            /// The `len` elements starting at `start`.
            ///
            /// # Panics
            /// If `start + len` exceeds this slice.
            #[inline(always)]
            #[track_caller]
            pub fn sub(self, start: usize, len: usize) -> Self {
                assert!(
                    start <= self.len && len <= self.len - start,
                    "sub-slice out of bounds"
                );
                Self { ptr: self.ptr.wrapping_add(start), len, _t: PhantomData }
            }
            /// Splits into `[0, mid)` and `[mid, len)`.
            ///
            /// # Panics
            /// If `mid > len`.
            #[inline(always)]
            #[track_caller]
            pub fn split_at(self, mid: usize) -> (Self, Self) {
                assert!(mid <= self.len, "split point out of bounds");
                (
                    Self { ptr: self.ptr, len: mid, _t: PhantomData },
                    Self { ptr: self.ptr.wrapping_add(mid), len: self.len - mid, _t: PhantomData },
                )
            }
            /// The same bytes as a slice of `U` (the length is rounded down to whole `U`s).
            ///
            /// # Safety
            /// The start is aligned for `U` and the memory holds valid `U`s wherever it is read.
            #[inline(always)]
            pub const unsafe fn cast<U>(self) -> $name<U> {
                let bytes = self.len * core::mem::size_of::<T>();
                let len = if core::mem::size_of::<U>() == 0 { 0 } else { bytes / core::mem::size_of::<U>() };
                $name { ptr: self.ptr.cast(), len, _t: PhantomData }
            }
            /// Reads element `index` with a plain load.
            ///
            /// # Safety
            /// No thread or PE writes that element concurrently.
            ///
            /// # Panics
            /// If `index >= len`.
            #[inline(always)]
            #[track_caller]
            pub unsafe fn read(self, index: usize) -> T {
                // SAFETY: bounds checked by `at`; the caller excludes racing writes.
                unsafe { self.at(index).read() }
            }
            /// Writes element `index` with a plain store.
            ///
            /// # Safety
            /// No thread or PE reads or writes that element concurrently.
            ///
            /// # Panics
            /// If `index >= len`.
            #[inline(always)]
            #[track_caller]
            pub unsafe fn write(self, index: usize, value: T) {
                // SAFETY: bounds checked by `at`; the caller guarantees exclusive access.
                unsafe { self.at(index).write(value) }
            }
        }
    };
}

/// A symmetric address of one `T`: the same object on every PE.
///
/// The remote operand of [`crate::rma::p`], [`crate::rma::g`], the atomics, signals and waits.
/// [`Sym::as_ptr`] is also this PE's own copy.
#[repr(transparent)]
pub struct Sym<T> {
    ptr: *mut T,
    _t: PhantomData<*mut T>,
}
pointer_common!(Sym, "a symmetric");

/// A symmetric range of `T`s: the remote operand of the bulk operations in [`crate::rma`]
/// and the collectives.
///
/// Performance note: as a kernel parameter it reaches the kernel as two integers, so LLVM
/// does not know that its pointer is global and loads through it are generic (`LD.E`, where
/// CUDA C++ gets `LDG.E` for a `float *` parameter). For a buffer that a hot loop reads,
/// take a [`Sym<T>`] parameter (a bare pointer, known to be global) and pass the length
/// separately; the halo-exchange kernels do (BENCHMARKS.md).
#[repr(C)]
pub struct SymSlice<T> {
    ptr: *mut T,
    len: usize,
    _t: PhantomData<*mut T>,
}
slice_common!(SymSlice, Sym, "a symmetric");

impl<T> SymSlice<T> {
    /// This PE's own copy, as a local slice (for example as the source of a put).
    #[inline(always)]
    pub const fn local(self) -> DeviceSlice<T> {
        DeviceSlice {
            ptr: self.ptr,
            len: self.len,
            _t: PhantomData,
        }
    }
}

impl<T> Sym<T> {
    /// This PE's own copy, as a local pointer.
    #[inline(always)]
    pub const fn local(self) -> DevicePtr<T> {
        DevicePtr {
            ptr: self.ptr,
            _t: PhantomData,
        }
    }
    /// A one-element symmetric slice.
    #[inline(always)]
    pub const fn as_slice(self) -> SymSlice<T> {
        SymSlice {
            ptr: self.ptr,
            len: 1,
            _t: PhantomData,
        }
    }
}

/// A pointer to one `T` in this GPU's global memory (not necessarily symmetric).
#[repr(transparent)]
pub struct DevicePtr<T> {
    ptr: *mut T,
    _t: PhantomData<*mut T>,
}
pointer_common!(DevicePtr, "a device-global");

/// A range of `T`s in this GPU's global memory: the local operand of puts and gets.
#[repr(C)]
pub struct DeviceSlice<T> {
    ptr: *mut T,
    len: usize,
    _t: PhantomData<*mut T>,
}
slice_common!(DeviceSlice, DevicePtr, "a device-global");

/// A load/store pointer to another PE's copy of a symmetric object, from [`crate::ptr`].
///
/// Loads and stores through it go straight over NVLink (or PCIe P2P); NVSHMEM is not
/// involved, so ordering them needs the scoped operations in [`crate::scoped`] or
/// [`crate::order::fence`]-free reasoning of your own, as in DeepEP's intranode kernels.
#[repr(transparent)]
pub struct PeerPtr<T> {
    ptr: *mut T,
    _t: PhantomData<*mut T>,
}
pointer_common!(PeerPtr, "a peer-mapped");

/// A pointer into the calling block's shared memory, from [`crate::shared::dynamic`]. It
/// means nothing to another block (the same address there is that block's memory) and
/// nothing after the block has finished.
#[repr(transparent)]
pub struct SharedPtr<T> {
    ptr: *mut T,
    _t: PhantomData<*mut T>,
}
pointer_common!(SharedPtr, "a block-shared");

/// A range of another PE's symmetric object mapped for loads and stores, from [`crate::ptr_slice`].
#[repr(C)]
pub struct PeerSlice<T> {
    ptr: *mut T,
    len: usize,
    _t: PhantomData<*mut T>,
}
slice_common!(PeerSlice, PeerPtr, "a peer-mapped");

/// Memory this PE may read from or write into as the *local* side of an RMA operation.
///
/// Implemented for [`DeviceSlice`] and for [`SymSlice`] (meaning this PE's own copy).
pub trait LocalSlice<T>: Copy {
    /// First element.
    fn local_ptr(self) -> *mut T;
    /// Number of elements.
    fn local_len(self) -> usize;
}

impl<T> LocalSlice<T> for DeviceSlice<T> {
    #[inline(always)]
    fn local_ptr(self) -> *mut T {
        self.ptr
    }
    #[inline(always)]
    fn local_len(self) -> usize {
        self.len
    }
}

impl<T> LocalSlice<T> for SymSlice<T> {
    #[inline(always)]
    fn local_ptr(self) -> *mut T {
        self.ptr
    }
    #[inline(always)]
    fn local_len(self) -> usize {
        self.len
    }
}

/// The raw operands of a byte-wise transfer between a symmetric range and a local one.
pub(crate) struct Operands {
    /// The symmetric side.
    pub sym: *mut core::ffi::c_void,
    /// The local side.
    pub local: *mut core::ffi::c_void,
    /// Bytes to move.
    pub bytes: usize,
}

/// Checks that both sides have the same length and returns them as raw operands.
#[inline(always)]
#[track_caller]
pub(crate) fn operands<T>(sym: SymSlice<T>, local: impl LocalSlice<T>) -> Operands {
    assert!(
        sym.len == local.local_len(),
        "RMA operands have different lengths"
    );
    Operands {
        sym: sym.ptr.cast(),
        local: local.local_ptr().cast(),
        bytes: sym.len * core::mem::size_of::<T>(),
    }
}

/// Returns a pointer through which this PE can load and store `pe`'s copy of `sym`, or
/// `None` if `pe` is not reachable by loads and stores (another node, no P2P).
///
/// NVSHMEM: `nvshmem_ptr`. For `pe == my_pe()` this is `sym`'s local address.
#[inline(always)]
pub fn ptr<T>(sym: Sym<T>, pe: i32) -> Option<PeerPtr<T>> {
    // SAFETY: `nvshmem_ptr` only translates an address; it reads NVSHMEM's device state,
    // which `nvshmemx_cumodule_init` set up before any kernel of the module runs.
    let p = unsafe { crate::sys::nvshmem_ptr(sym.ptr.cast(), pe) };
    if p.is_null() {
        None
    } else {
        Some(PeerPtr {
            ptr: p.cast(),
            _t: PhantomData,
        })
    }
}

/// [`ptr`] for a slice: `pe`'s copy of `sym`, mapped for loads and stores.
#[inline(always)]
pub fn ptr_slice<T>(sym: SymSlice<T>, pe: i32) -> Option<PeerSlice<T>> {
    // SAFETY: as in `ptr`.
    let p = unsafe { crate::sys::nvshmem_ptr(sym.ptr.cast(), pe) };
    if p.is_null() {
        None
    } else {
        Some(PeerSlice {
            ptr: p.cast(),
            len: sym.len,
            _t: PhantomData,
        })
    }
}
