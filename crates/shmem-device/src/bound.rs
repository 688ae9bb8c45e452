//! Bounded waits: a wait that does not complete within its bound stops the kernel with a
//! report of who waited for what, instead of spinning forever.
//!
//! - **Per wait**: the `_within` forms ([`crate::p2p::wait_until_within`],
//!   [`crate::signal::signal_wait_until_within`], …) take a [`Duration`].
//! - **Program-wide**: every wait of this crate — [`crate::p2p`]'s and
//!   [`crate::signal`]'s waits, the grid barriers of [`crate::scoped`] and its
//!   [`wait_acquire`](crate::scoped::wait_acquire) — obeys the bound the host sets in the
//!   module (`SHMEM_WAIT_TIMEOUT=2s`, or `Shmem::set_wait_bound`), with no change to the
//!   kernel. A per-wait bound takes precedence.
//!
//! Every wait polls once first. When the condition already holds it returns, having read
//! nothing else. Otherwise it loads the module's configuration together with a second poll
//! (`poll_bounded`). With no bound (the default) the wait then goes on as NVSHMEM's own.
//! With a bound, the wait polls (`nvshmem_TYPE_test`, or the barrier's or the acquire wait's
//! load) and reads `%globaltimer` between polls; when the bound passes, the
//! first thread of the module to expire writes a [`WaitReport`] into host memory the host
//! mapped for it, and traps. The host sees the trap at its next synchronisation and returns
//! the report as its error (PE, kernel, source location of the wait, address, expected and
//! seen values, time waited); the launcher then stops every PE. Waits inside NVSHMEM's own
//! collectives (barriers, reductions) are not bounded: NVSHMEM's code waits there.
//!
//! On the simulator the same bound applies to the same waits (per simulated world:
//! the simulator's `World::set_wait_bound_ns`), on the host clock, and the kernel panics with the same
//! report.

use crate::p2p::Cmp;
use core::panic::Location;
use core::time::Duration;

/// The name of the module global that holds a module's [`WaitConfig`] (kept visible by the
/// build so that the host can find and set it).
pub const CONFIG_SYMBOL: &str = "shmem_rs_wait_config";

/// A module's bound and where its report goes, set by the host when it loads the module.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitConfig {
    /// The program-wide bound in nanoseconds; 0: none.
    pub bound_ns: u64,
    /// The device address of this PE's [`WaitReport`] (mapped host memory); 0: none.
    pub report: u64,
    /// Set by the first thread to expire, so that one report is written.
    pub claimed: u32,
    /// Padding (the layout is shared with the host).
    pub reserved: u32,
}

#[cfg(target_arch = "nvptx64")]
#[unsafe(no_mangle)]
#[used]
#[allow(non_upper_case_globals)]
static mut shmem_rs_wait_config: WaitConfig = WaitConfig {
    bound_ns: 0,
    report: 0,
    claimed: 0,
    reserved: 0,
};

/// How a wait reads the program-wide bound (module memory the host writes only while no
/// kernel of the module runs). Measured on one H200, 2 PEs under MPS and 1 PE
/// (BENCHMARKS.md, "The bound read through L1 in grid barriers").
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum BoundRead {
    /// `ld.volatile`, from L2: for a wait a thread makes once or a few times in a launch.
    /// Read through the non-coherent path instead, the MoE dispatch at 128 tokens took 3 %
    /// more (its first read misses L1 and takes longer).
    Once,
    /// `ld.global.nc`, which keeps it in L1 after the first read: for a wait a thread makes
    /// many times in a launch, as a persistent kernel's grid barriers. The persistent halo
    /// at 1024² f32 took 0.98 of the time with it in its barriers (0.95-0.97 with every
    /// wait reading this way): every block reads the bound at each barrier, and from L2 the
    /// loop's next poll waited for it.
    Repeated,
}

/// The program-wide bound in nanoseconds (0: none), read as `read` says.
#[inline(always)]
fn program_bound_ns(read: BoundRead) -> u64 {
    #[cfg(target_arch = "nvptx64")]
    {
        // SAFETY: only the address of the module global is taken.
        let p = unsafe { &raw const shmem_rs_wait_config.bound_ns };
        match read {
            // SAFETY: a read of a module global that the host writes only while no kernel
            // of the module runs. Volatile so that it stays where the wait put it
            // ([`poll_bounded`]).
            BoundRead::Once => unsafe { p.read_volatile() },
            BoundRead::Repeated => {
                let ns: u64;
                // SAFETY: as above: the word is read-only while the kernel runs, which is
                // what the non-coherent path asks; `p` is a valid, aligned global address.
                unsafe {
                    core::arch::asm!(
                        "ld.global.nc.u64 {ns}, [{p}];",
                        ns = out(reg64) ns,
                        p = in(reg64) p,
                        options(readonly, nostack, preserves_flags)
                    )
                };
                ns
            }
        }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = read;
        crate::host::wait_bound_ns()
    }
}

/// `per_wait` in nanoseconds (at least 1) if given, else the program-wide bound.
#[inline(always)]
fn bound_ns(per_wait: Option<Duration>, read: BoundRead) -> u64 {
    match per_wait {
        Some(d) => (d.as_nanos().min(u64::MAX as u128) as u64).max(1),
        None => program_bound_ns(read),
    }
}

/// Which wait expired.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitKind {
    /// [`crate::p2p::wait_until`].
    WaitUntil = 1,
    /// [`crate::p2p::wait_until_all`].
    WaitUntilAll = 2,
    /// [`crate::p2p::wait_until_any`].
    WaitUntilAny = 3,
    /// [`crate::signal::signal_wait_until`].
    SignalWaitUntil = 4,
    /// A grid barrier of [`crate::scoped`] (`grid_barrier`, `grid_sync`).
    GridBarrier = 5,
    /// [`crate::scoped::wait_acquire`].
    WaitAcquire = 6,
}

impl WaitKind {
    fn name(raw: u32) -> &'static str {
        match raw {
            1 => "wait_until",
            2 => "wait_until_all",
            3 => "wait_until_any",
            4 => "signal_wait_until",
            5 => "a grid barrier",
            6 => "scoped::wait_acquire",
            _ => "a wait",
        }
    }
}

/// Bytes of the source file name a report keeps.
pub const FILE_BYTES: usize = 160;

/// What a wait that outlived its bound reports. The layout is shared with the host, which
/// reads it from mapped memory after the kernel traps; [`core::fmt::Display`] writes it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct WaitReport {
    /// 0 until written; 2 once every other field is.
    pub state: u32,
    /// The PE that waited.
    pub pe: i32,
    /// A [`WaitKind`].
    pub kind: u32,
    /// The comparison ([`Cmp`] as `i32`; `Ge` for barriers).
    pub cmp: i32,
    /// Source line and column of the wait.
    pub line: u32,
    /// See `line`.
    pub column: u32,
    /// The waiting thread's block and thread index.
    pub block: [u32; 3],
    /// See `block`.
    pub thread: [u32; 3],
    /// Bytes of the waited-for word (its value fields hold its bits, zero-extended).
    pub elem_bytes: u32,
    /// Bytes of `file` in use.
    pub file_len: u32,
    /// The address waited on (for `_all`/`_any`, the first word not satisfied).
    pub addr: u64,
    /// The value it is compared with.
    pub expected: u64,
    /// The value it held when the bound passed.
    pub seen: u64,
    /// Nanoseconds waited, and the bound.
    pub elapsed_ns: u64,
    /// See `elapsed_ns`.
    pub bound_ns: u64,
    /// The source file of the wait (cut to [`FILE_BYTES`]).
    pub file: [u8; FILE_BYTES],
}

impl WaitReport {
    /// A report nobody has written.
    pub const EMPTY: WaitReport = WaitReport {
        state: 0,
        pe: -1,
        kind: 0,
        cmp: 0,
        line: 0,
        column: 0,
        block: [0; 3],
        thread: [0; 3],
        elem_bytes: 0,
        file_len: 0,
        addr: 0,
        expected: 0,
        seen: 0,
        elapsed_ns: 0,
        bound_ns: 0,
        file: [0; FILE_BYTES],
    };

    /// Whether the device finished writing it.
    pub fn is_written(&self) -> bool {
        self.state == 2
    }

    /// The source file of the wait.
    pub fn file(&self) -> &str {
        let n = (self.file_len as usize).min(FILE_BYTES);
        core::str::from_utf8(&self.file[..n]).unwrap_or("<file name not UTF-8>")
    }
}

impl core::fmt::Display for WaitReport {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let cmp = match self.cmp {
            0 => "==",
            1 => "!=",
            2 => ">",
            3 => "<=",
            4 => "<",
            _ => ">=",
        };
        let [bx, by, bz] = self.block;
        let [tx, ty, tz] = self.thread;
        write!(
            f,
            "PE {} block ({bx}, {by}, {bz}) thread ({tx}, {ty}, {tz}): {} at {}:{}:{} waited \
             {:.3} s (bound {:.3} s) for the {}-byte word at {:#x} to become {cmp} {}; it \
             holds {}",
            self.pe,
            WaitKind::name(self.kind),
            self.file(),
            self.line,
            self.column,
            self.elapsed_ns as f64 * 1e-9,
            self.bound_ns as f64 * 1e-9,
            self.elem_bytes,
            self.addr,
            self.expected,
            self.seen,
        )
    }
}

/// What a wait waits for, for its report.
pub(crate) struct Waiting {
    pub kind: WaitKind,
    pub cmp: Cmp,
    pub addr: *const u8,
    pub elem_bytes: u32,
    pub expected: u64,
}

/// The bits of `v`, zero-extended (for a report).
#[inline(always)]
pub(crate) fn bits<T: Copy>(v: T) -> u64 {
    let mut out = 0u64;
    let n = core::mem::size_of::<T>().min(8);
    // SAFETY: copies `n <= 8` bytes of a `Copy` value into a `u64` (little-endian both).
    unsafe {
        core::ptr::copy_nonoverlapping((&raw const v).cast::<u8>(), (&raw mut out).cast(), n)
    };
    out
}

/// Nanoseconds from some fixed point (`%globaltimer` on the GPU, the host clock under the
/// simulator).
#[inline(always)]
pub(crate) fn now_ns() -> u64 {
    #[cfg(target_arch = "nvptx64")]
    {
        let t: u64;
        // SAFETY: reads a special register; no memory is touched.
        unsafe {
            core::arch::asm!("mov.u64 {t}, %globaltimer;", t = out(reg64) t, options(nomem, nostack))
        };
        t
    }
    #[cfg(not(target_arch = "nvptx64"))]
    crate::host::now_ns()
}

/// Polls `done` once and, when it does not hold yet and there is a bound (`per_wait`, else
/// the program-wide one), polls until it holds or stops the kernel with the report of
/// `waiting` once the bound has passed. Returns `true` when `done` was seen to hold; `false`
/// when it did not at the first two polls and there is no bound: the caller then waits its
/// unbounded way (NVSHMEM's own wait, or [`poll`]'s loop). `done` does the polling read (a
/// yield point on the simulator).
///
/// The program-wide bound is a load of module memory, kept off the path of a wait whose
/// condition already holds (a halo that arrived during the last iteration, the last block at
/// a grid barrier, a signal the block sent itself): the first poll comes alone, and only when
/// it fails is the bound loaded, issued together with the second poll so that a wait that
/// goes on does not stall on it either. Loaded before the first poll and waited for, it cost
/// the halo's exchange on two H200s 0.3-0.5 µs an iteration; issued with the first poll but
/// unused, it still cost 1-2 % there, the thread waiting for the load before it could reuse
/// its register (BENCHMARKS.md, "Waits that poll before they read the bound").
#[inline(always)]
#[track_caller]
pub(crate) fn poll_bounded(
    per_wait: Option<Duration>,
    read: BoundRead,
    mut done: impl FnMut() -> bool,
    waiting: impl FnOnce() -> Waiting,
) -> bool {
    if done() {
        return true;
    }
    let bound_ns = bound_ns(per_wait, read);
    if done() {
        return true;
    }
    if bound_ns == 0 {
        return false;
    }
    let at = Location::caller();
    let start = now_ns();
    loop {
        if done() {
            return true;
        }
        let elapsed = now_ns().wrapping_sub(start);
        if elapsed > bound_ns {
            let w = waiting();
            let times = [elapsed, bound_ns];
            expired(at, w.kind, w.cmp, w.addr, w.elem_bytes, w.expected, times);
        }
        // The bound, not the simulator's deadlock detector, ends this wait (a step that is
        // not a poll).
        #[cfg(not(target_arch = "nvptx64"))]
        crate::host::step("a bounded wait", false);
    }
}

/// Polls `done` until it holds, under the program-wide bound ([`poll_bounded`]). For the grid
/// barriers, whose waits a persistent kernel makes at every iteration: the bound is read
/// [`BoundRead::Repeated`].
#[inline(always)]
#[track_caller]
pub(crate) fn poll(mut done: impl FnMut() -> bool, waiting: impl FnOnce() -> Waiting) {
    if !poll_bounded(None, BoundRead::Repeated, &mut done, waiting) {
        while !done() {}
    }
}

/// Writes the report of an expired wait and stops the kernel. `Waiting`'s fields come
/// apart, and the times as a pair, so that each arrives in registers (a struct this large
/// is passed through the caller's stack, which every kernel with a bounded wait would then
/// carry).
#[cold]
#[inline(never)]
fn expired(
    at: &'static Location<'static>,
    kind: WaitKind,
    cmp: Cmp,
    addr: *const u8,
    elem_bytes: u32,
    expected: u64,
    [elapsed_ns, bound_ns]: [u64; 2],
) -> ! {
    let w = Waiting {
        kind,
        cmp,
        addr,
        elem_bytes,
        expected,
    };
    publish(|r: *mut WaitReport| {
        // SAFETY: `publish` passes a report only this thread writes.
        unsafe { fill(r, at, &w, elapsed_ns, bound_ns) }
    })
}

/// Writes every field of the report at `r` but `state`, field by field (on the GPU `r` is
/// the mapped host report: nothing is built on the stack first).
///
/// # Safety
/// `r` is valid for writes and no other thread writes it; `w.addr` is the waited-on word
/// of `elem_bytes <= 8` bytes (the wait's contract).
#[inline(always)]
unsafe fn fill(
    r: *mut WaitReport,
    at: &'static Location<'static>,
    w: &Waiting,
    elapsed_ns: u64,
    bound_ns: u64,
) {
    let idx = crate::thread::thread_idx();
    let blk = crate::thread::block_idx();
    let mut seen = 0u64;
    // SAFETY: the caller's contract.
    unsafe {
        let bytes = (w.elem_bytes as usize).min(8);
        for i in 0..bytes {
            seen |= (w.addr.add(i).read_volatile() as u64) << (8 * i);
        }
        let name = at.file().as_bytes();
        let n = name.len().min(FILE_BYTES);
        (&raw mut (*r).pe).write_volatile(crate::team::my_pe());
        (&raw mut (*r).kind).write_volatile(w.kind as u32);
        (&raw mut (*r).cmp).write_volatile(w.cmp as i32);
        (&raw mut (*r).line).write_volatile(at.line());
        (&raw mut (*r).column).write_volatile(at.column());
        let (block, thread) = (
            (&raw mut (*r).block).cast::<u32>(),
            (&raw mut (*r).thread).cast::<u32>(),
        );
        for (i, (b, t)) in [(blk.x, idx.x), (blk.y, idx.y), (blk.z, idx.z)]
            .into_iter()
            .enumerate()
        {
            block.add(i).write_volatile(b);
            thread.add(i).write_volatile(t);
        }
        (&raw mut (*r).elem_bytes).write_volatile(w.elem_bytes);
        (&raw mut (*r).file_len).write_volatile(n as u32);
        (&raw mut (*r).addr).write_volatile(w.addr as u64);
        (&raw mut (*r).expected).write_volatile(w.expected);
        (&raw mut (*r).seen).write_volatile(seen);
        (&raw mut (*r).elapsed_ns).write_volatile(elapsed_ns);
        (&raw mut (*r).bound_ns).write_volatile(bound_ns);
        let file = (&raw mut (*r).file).cast::<u8>();
        for (i, b) in name[..n].iter().enumerate() {
            file.add(i).write_volatile(*b);
        }
    }
}

/// The first thread to expire claims the PE's report, has `fill` write it into the mapped
/// host memory, publishes it (`state` 2 after a system fence) and traps; the others trap.
#[cfg(target_arch = "nvptx64")]
#[inline(always)]
fn publish(fill: impl FnOnce(*mut WaitReport)) -> ! {
    use core::sync::atomic::{AtomicU32, Ordering};
    // SAFETY: the module global is only read by kernels and written by the host between
    // launches; `claimed` is touched only atomically here. The report address, when set,
    // is this PE's mapped host report, which only the claiming thread writes.
    unsafe {
        let cfg = &raw mut shmem_rs_wait_config;
        let claimed = AtomicU32::from_ptr(&raw mut (*cfg).claimed);
        let report = (&raw const (*cfg).report).read() as *mut WaitReport;
        if !report.is_null() && claimed.swap(1, Ordering::AcqRel) == 0 {
            (&raw mut (*report).state).write_volatile(0);
            fill(report);
            core::arch::asm!("fence.sc.sys;", options(nostack));
            (&raw mut (*report).state).write_volatile(2);
            core::arch::asm!("fence.sc.sys;", options(nostack));
        }
        core::arch::nvptx::trap()
    }
}

#[cfg(not(target_arch = "nvptx64"))]
fn publish(fill: impl FnOnce(*mut WaitReport)) -> ! {
    let mut r = WaitReport {
        state: 2,
        ..WaitReport::EMPTY
    };
    fill(&mut r);
    panic!("a wait outlived its bound: {r}")
}
