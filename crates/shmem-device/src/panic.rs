//! The kernel panic handler: prints where the panic happened, then traps.
//!
//! A trap aborts the kernel; the host sees `CUDA_ERROR_LAUNCH_FAILED` ("unspecified launch
//! failure") at the next synchronisation, and the message is in the process's stdout,
//! printed by the driver from the device's printf buffer. Disable the `panic-handler`
//! feature to supply your own.
//!
//! CUDA's device `printf` has no `%.*s`, so the file name and message are copied into
//! NUL-terminated buffers (cut at 255 bytes) and printed with `%s`. The buffers and
//! printf's argument block are module globals that the first panicking thread claims, not
//! stack arrays: a kernel that can panic carries no stack frame for it (`ptxas -v`). The
//! other panicking threads wait for the first one's trap, which ends the grid, and trap
//! themselves if it has not come within 50 ms.

use core::panic::PanicInfo;
use core::sync::atomic::{AtomicU32, Ordering};

const CAP: usize = 256;

/// The vprintf argument block for `%s:%u:%u: %s`: each argument at its natural alignment.
#[repr(C)]
struct Args {
    file: *const u8,
    line: u32,
    col: u32,
    msg: *const u8,
}

/// 1 once a thread has claimed the buffers below.
static CLAIMED: AtomicU32 = AtomicU32::new(0);
static mut FILE: [u8; CAP] = [0; CAP];
static mut MSG: [u8; CAP] = [0; CAP];
static mut ARGS: Args = Args {
    file: core::ptr::null(),
    line: 0,
    col: 0,
    msg: core::ptr::null(),
};

/// `s` as a NUL-terminated C string in `buf`, cut to fit.
///
/// # Safety
/// `buf` is `CAP` writable bytes that only this thread writes.
unsafe fn c_str(s: &str, buf: *mut u8) -> *const u8 {
    let n = s.len().min(CAP - 1);
    // SAFETY: the caller's contract; `n < CAP`.
    unsafe {
        core::ptr::copy_nonoverlapping(s.as_ptr(), buf, n);
        buf.add(n).write(0);
    }
    buf
}

#[panic_handler]
fn panic(info: &PanicInfo<'_>) -> ! {
    let (file, line, col) = match info.location() {
        Some(l) => (l.file(), l.line(), l.column()),
        None => ("<unknown>", 0, 0),
    };
    let msg = info
        .message()
        .as_str()
        .unwrap_or("(formatted message not shown on the GPU)");
    report(file, line, col, msg)
}

/// How long the other panicking threads wait for the first one's trap before they trap
/// themselves (which can cut its message short).
const OTHERS_WAIT_NS: u64 = 50_000_000;

/// Prints the panic (the first panicking thread of the module) and traps.
#[cold]
#[inline(never)]
fn report(file: &str, line: u32, col: u32, msg: &str) -> ! {
    if CLAIMED.swap(1, Ordering::AcqRel) != 0 {
        // Another thread is printing; its trap ends this grid too. The wait sleeps, so that
        // a printing thread of the same warp gets to run (a plain spin starved it: a
        // dispatch kernel whose every thread panicked hung), and it is bounded, so that a
        // panic ends the kernel whatever the printing thread does.
        let start = crate::bound::now_ns();
        while crate::bound::now_ns().wrapping_sub(start) < OTHERS_WAIT_NS {
            // SAFETY: suspends this thread for about a microsecond; touches no memory.
            unsafe { core::arch::asm!("nanosleep.u32 1000;", options(nomem, nostack)) };
        }
        // SAFETY: `trap` ends the kernel; nothing after it runs.
        unsafe { core::arch::nvptx::trap() }
    }
    // SAFETY: this thread alone claimed the buffers (the swap above). The format string is
    // NUL-terminated; its conversions (%s, %u, %u, %s) match the fields of `Args` in order,
    // laid out as CUDA's vprintf reads them (natural alignment), and both strings are
    // NUL-terminated buffers in global memory.
    unsafe {
        let args = &raw mut ARGS;
        args.write(Args {
            file: c_str(file, (&raw mut FILE).cast()),
            line,
            col,
            msg: c_str(msg, (&raw mut MSG).cast()),
        });
        crate::sys::vprintf(
            c"shmem kernel panicked at %s:%u:%u: %s\n".as_ptr().cast(),
            args.cast_const().cast(),
        );
        core::arch::nvptx::trap()
    }
}
