//! Hints to the compiler, for the places where LLVM's choice costs a kernel time.
//!
//! [`assume`] states a precondition the compiler may rely on (checked in the simulator).
//!
//! [`opaque`] hands a value through a point the optimiser cannot see past. Its use is a loop
//! in a persistent kernel whose body LLVM inlines whole: every address that does not change
//! between iterations (a peer's base, a signal word, a halo row) is hoisted out of the loop
//! and kept in a register for the loop's whole life, and under a register budget those
//! values are what spills. Taking the loop's inputs through [`opaque`] at the top of each
//! iteration keeps those computations where they are used, for a few integer instructions
//! an iteration. CUDA C++ writes the same as `asm volatile("" : "+l"(x));`.
//!
//! ```ignore
//! for it in 0..iters {
//!     // recomputed each iteration from here on, so nothing derived from it stays live
//!     let sync = hint::opaque(sync);
//!     edge_row(sync, /* ... */);
//!     grid_barrier(counter, it + 1);
//! }
//! ```

/// Tells the compiler that `cond` holds, so that it drops the code for where it does not:
/// on the GPU nothing checks it; in the simulator it is checked, and a panic with `msg`
/// where it fails (so the simulator's tests find a broken precondition).
///
/// For a precondition of a kernel's contract inside its hot loops, where even a cheap check
/// costs the loop around it. Measured (the MoE example's dispatch kernels for mapped PEs,
/// whose peer addresses are never null; one H200, 1 PE, low-latency `bf16`, 4096 tokens,
/// BENCHMARKS.md, seventy-ninth session): against the kernel that handles null addresses,
/// a round took 1.018 of its time with a `panic!` at each null address, 1.008 with a
/// `trap`, and 0.995 with this.
///
/// # Safety
/// `cond` is true. On the GPU a false one is undefined behaviour.
#[inline(always)]
#[track_caller]
pub unsafe fn assume(cond: bool, msg: &'static str) {
    #[cfg(target_arch = "nvptx64")]
    {
        let _ = msg;
        // SAFETY: the caller's contract.
        unsafe { core::hint::assert_unchecked(cond) }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    assert!(cond, "{msg}");
}

/// Returns `x` unchanged, as a value the compiler knows nothing about: what is computed from
/// the result is computed after this call (never hoisted above it or out of the loop
/// around it), and no fact about `x` (a constant, known bits, loop invariance) crosses it.
/// On the GPU it is one register move, which `ptxas` removes; on the host (the CPU
/// simulator) it is `x`.
///
/// Measured (the halo example's persistent kernels, `BENCHMARKS.md`): an edge block's loop
/// that may send its row both ways, with the row's wait, update and `put_signal` inline,
/// spilled 20–24 bytes at 64 registers on sm_90, and with them as a call each iteration cost
/// 0.3–0.5 µs; with the slab's fields and the signal array taken through `opaque` it neither
/// spills nor calls.
#[inline(always)]
pub fn opaque<T: Opaque>(x: T) -> T {
    x.opaque()
}

/// The types [`opaque`] takes: integers and pointers of 32 and 64 bits (one register).
/// Sealed.
pub trait Opaque: Copy + sealed::Sealed {
    /// [`opaque`].
    fn opaque(self) -> Self;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! opaque_int {
    ($reg:ident, $mov:literal, $($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl Opaque for $t {
            #[inline(always)]
            fn opaque(self) -> Self {
                #[cfg(target_arch = "nvptx64")]
                {
                    let mut x = self;
                    // SAFETY: a move of a register onto itself: no memory, no other effect.
                    // Not `pure`, so that LLVM neither hoists nor merges it.
                    unsafe {
                        core::arch::asm!($mov, inout($reg) x, options(nomem, nostack, preserves_flags))
                    };
                    x
                }
                #[cfg(not(target_arch = "nvptx64"))]
                self
            }
        }
    )*};
}

opaque_int!(reg32, "mov.b32 {0}, {0};", u32, i32);
opaque_int!(reg64, "mov.b64 {0}, {0};", u64, i64, usize, isize);

impl<T> sealed::Sealed for *mut T {}
impl<T> Opaque for *mut T {
    #[inline(always)]
    fn opaque(self) -> Self {
        self.with_addr(self.addr().opaque())
    }
}

impl<T> sealed::Sealed for *const T {}
impl<T> Opaque for *const T {
    #[inline(always)]
    fn opaque(self) -> Self {
        self.with_addr(self.addr().opaque())
    }
}

#[cfg(test)]
mod tests {
    use super::opaque;

    #[test]
    fn opaque_returns_its_argument() {
        assert_eq!(opaque(7u32), 7);
        assert_eq!(opaque(-7i32), -7);
        assert_eq!(opaque(u64::MAX - 1), u64::MAX - 1);
        assert_eq!(opaque(i64::MIN), i64::MIN);
        assert_eq!(opaque(12usize), 12);
        assert_eq!(opaque(-12isize), -12);
        let mut x = 5u8;
        let p: *mut u8 = &mut x;
        assert_eq!(opaque(p), p);
        assert_eq!(opaque(p.cast_const()), p.cast_const());
        // SAFETY: `p` points to `x`, alive here; the pointer kept its provenance.
        assert_eq!(unsafe { *opaque(p) }, 5);
    }

    /// In the simulator `assume` checks: a true condition passes, a false one panics with
    /// the message.
    #[test]
    fn assume_is_checked_in_the_simulator() {
        extern crate std;
        use std::string::String;
        // SAFETY: true.
        unsafe { super::assume(1 + 1 == 2, "arithmetic") };
        // SAFETY: not on the GPU: the simulator checks it (the panic is the test).
        let err = std::panic::catch_unwind(|| unsafe { super::assume(false, "a broken contract") })
            .expect_err("a false condition should panic");
        let msg = err
            .downcast_ref::<String>()
            .map(String::as_str)
            .unwrap_or("");
        assert!(msg.contains("a broken contract"), "{msg:?}");
    }
}
