//! The kernel panic handler: prints where the panic happened, then traps.
//!
//! A trap aborts the kernel; the host sees `CUDA_ERROR_LAUNCH_FAILED` (or an illegal
//! instruction) at the next synchronisation, and the message is in the process's stdout,
//! printed by the driver from the device's printf buffer. Disable the `panic-handler`
//! feature to supply your own.

use core::panic::PanicInfo;

#[repr(C)]
struct Args {
    file_len: i32,
    file: *const u8,
    line: u32,
    col: u32,
    msg_len: i32,
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
    let args = Args {
        file_len: file.len() as i32,
        file: file.as_ptr(),
        line,
        col,
        msg_len: msg.len() as i32,
        msg: msg.as_ptr(),
    };
    // SAFETY: the format string is NUL-terminated and its conversions (%.*s, %u, %u, %.*s)
    // match the fields of `Args`, laid out as the CUDA vprintf ABI expects (naturally aligned).
    unsafe {
        crate::sys::vprintf(
            c"shmem kernel panicked at %.*s:%u:%u: %.*s\n"
                .as_ptr()
                .cast(),
            (&raw const args).cast(),
        );
        core::arch::nvptx::trap()
    }
}
