//! The kernel panic handler: prints where the panic happened, then traps.
//!
//! A trap aborts the kernel; the host sees `CUDA_ERROR_LAUNCH_FAILED` ("unspecified launch
//! failure") at the next synchronisation, and the message is in the process's stdout,
//! printed by the driver from the device's printf buffer. Disable the `panic-handler`
//! feature to supply your own.
//!
//! CUDA's device `printf` has no `%.*s`, so the file name and message are copied into
//! NUL-terminated buffers on the stack (cut at 255 bytes) and printed with `%s`.

use core::panic::PanicInfo;

const CAP: usize = 256;

/// `s` as a NUL-terminated C string in `buf`, cut to fit.
fn c_str<'a>(s: &str, buf: &'a mut [u8; CAP]) -> *const u8 {
    let n = s.len().min(CAP - 1);
    buf[..n].copy_from_slice(&s.as_bytes()[..n]);
    buf[n] = 0;
    buf.as_ptr()
}

/// The vprintf argument block for `%s:%u:%u: %s`: each argument at its natural alignment.
#[repr(C)]
struct Args {
    file: *const u8,
    line: u32,
    col: u32,
    msg: *const u8,
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
    let (mut file_buf, mut msg_buf) = ([0u8; CAP], [0u8; CAP]);
    let args = Args {
        file: c_str(file, &mut file_buf),
        line,
        col,
        msg: c_str(msg, &mut msg_buf),
    };
    // SAFETY: the format string is NUL-terminated; its conversions (%s, %u, %u, %s) match the
    // fields of `Args` in order, laid out as CUDA's vprintf reads them (natural alignment),
    // and both strings are NUL-terminated buffers that outlive the call.
    unsafe {
        crate::sys::vprintf(
            c"shmem kernel panicked at %s:%u:%u: %s\n".as_ptr().cast(),
            (&raw const args).cast(),
        );
        core::arch::nvptx::trap()
    }
}
