//! Bulk copies ([`crate::bulk`]) on simulated GPU threads: the barrier word's phases, and each
//! copy's bytes appearing as late as the GPU may let them. A copy into shared memory reads
//! its source when issued and lands when a thread's wait sees its barrier's phase complete;
//! a copy out reads shared memory and writes global memory at the `wait_read` or `wait_all`
//! of its thread that covers its group (one a thread never waits for is dropped, which shows
//! the missing wait as missing data). Every function is a yield point of the calling
//! simulated thread, and outside a simulated launch panics with its name.

extern crate std;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::vec::Vec;

use super::device::step;

/// The barrier word: pending transaction bytes (low 32 bits, signed), pending arrivals (16
/// bits), expected arrivals (15 bits), the phase's parity (the top bit).
mod word {
    pub(super) const PHASE: u64 = 1 << 63;
    fn count(w: u64) -> u64 {
        (w >> 48) & 0x7fff
    }
    fn pending(w: u64) -> u64 {
        (w >> 32) & 0xffff
    }
    /// A new barrier's word: `arrivals` expected, parity 0.
    pub(super) fn new(arrivals: u32) -> u64 {
        let n = u64::from(arrivals & 0x7fff);
        n << 48 | n << 32
    }
    /// `w` after `arrivals` arrivals and `tx` more bytes announced (negative: landed), with
    /// the phase completed when nothing is pending.
    pub(super) fn update(w: u64, arrivals: u64, tx: i64) -> u64 {
        let bytes = (w as u32 as i32 as i64) + tx;
        let left = pending(w)
            .checked_sub(arrivals)
            .expect("bulk::Barrier: more arrivals than the phase expects");
        if left == 0 && bytes == 0 {
            ((w & PHASE) ^ PHASE) | count(w) << 48 | count(w) << 32
        } else {
            (w & PHASE) | count(w) << 48 | left << 32 | u64::from(bytes as i32 as u32)
        }
    }
}

/// A copy into shared memory whose bytes have not landed: its destination, and the bytes as
/// they were read.
type Landing = (usize, Vec<u8>);
/// Those copies by the address of their barrier.
type Inbound = BTreeMap<usize, Vec<Landing>>;
/// A copy out: its group, destination, source and length.
type Out = (u64, usize, usize, usize);

static INBOUND: Mutex<Inbound> = Mutex::new(BTreeMap::new());

std::thread_local! {
    /// This simulated thread's copies out, and its current group's number.
    static OUTBOUND: RefCell<(u64, Vec<Out>)> = const { RefCell::new((0, Vec::new())) };
}

fn inbound() -> MutexGuard<'static, Inbound> {
    INBOUND.lock().unwrap_or_else(|e| e.into_inner())
}

/// `mbarrier.init`: nothing in flight towards `at` any more.
///
/// # Safety
/// `at` is valid for reads and writes (the caller's barrier contract).
#[track_caller]
pub(crate) unsafe fn init(at: *mut u64, arrivals: u32) {
    step("bulk::Barrier::init", false);
    inbound().remove(&(at as usize));
    // SAFETY: the caller's contract; one simulated thread runs at a time.
    unsafe { at.write(word::new(arrivals)) };
}

/// `mbarrier.arrive.expect_tx`.
///
/// # Safety
/// As [`init`].
#[track_caller]
pub(crate) unsafe fn arrive_expect_tx(at: *mut u64, bytes: u32) {
    step("bulk::Barrier::arrive_expect_tx", false);
    // SAFETY: the caller's contract; one simulated thread runs at a time.
    unsafe { at.write(word::update(at.read(), 1, i64::from(bytes))) };
}

/// Polls until the phase of parity `parity` has completed, then lands its copies.
///
/// # Safety
/// As [`init`]; the copies' destinations are valid for writes (the copy contract).
#[track_caller]
pub(crate) unsafe fn wait(at: *mut u64, parity: u32) {
    loop {
        // SAFETY: the caller's contract; one simulated thread runs at a time.
        let w = unsafe { at.read() };
        if (w >> 63) as u32 != parity & 1 {
            for (dst, bytes) in inbound().remove(&(at as usize)).unwrap_or_default() {
                // SAFETY: the caller's contract.
                unsafe {
                    core::ptr::copy_nonoverlapping(bytes.as_ptr(), dst as *mut u8, bytes.len())
                };
            }
            step("bulk::Barrier::wait", false);
            return;
        }
        step("bulk::Barrier::wait", true);
    }
}

/// `cp.async.bulk.shared::cluster.global`: reads `src` now; the bytes land at `dst` when
/// `bar`'s phase is waited for.
///
/// # Safety
/// `src` valid for reads of `bytes`, `bar` as in [`init`].
#[track_caller]
pub(crate) unsafe fn copy_to_shared(dst: *mut u8, src: *const u8, bytes: u32, bar: *mut u64) {
    step("bulk::copy_to_shared", false);
    // SAFETY: the caller's contract; one simulated thread runs at a time.
    unsafe {
        let read = core::slice::from_raw_parts(src, bytes as usize).to_vec();
        inbound()
            .entry(bar as usize)
            .or_default()
            .push((dst as usize, read));
        bar.write(word::update(bar.read(), 0, -i64::from(bytes)));
    }
}

/// `cp.async.bulk.global.shared::cta.bulk_group`: recorded in the thread's current group,
/// performed at the wait that covers it.
///
/// # Safety
/// Both ends stay valid until that wait (the copy contract).
#[track_caller]
pub(crate) unsafe fn copy_to_global(dst: *mut u8, src: *const u8, bytes: u32) {
    step("bulk::copy_to_global", false);
    OUTBOUND
        .with_borrow_mut(|(group, v)| v.push((*group, dst as usize, src as usize, bytes as usize)));
}

/// `cp.async.bulk.commit_group`.
#[track_caller]
pub(crate) fn commit_group() {
    step("bulk::commit_group", false);
    OUTBOUND.with_borrow_mut(|(group, _)| *group += 1);
}

/// Performs the copies out of every committed group but the newest `keep` (copies not yet
/// committed belong to no group and stay). Their ends are valid by the contract of
/// [`crate::bulk::copy_to_global`], whose caller keeps them so until a wait covers the copy.
fn complete(keep: u64) {
    let done: Vec<Out> = OUTBOUND.with_borrow_mut(|(group, v)| {
        let before = group.saturating_sub(keep);
        let (done, left) = v.drain(..).partition(|c| c.0 < before);
        *v = left;
        done
    });
    for (_, dst, src, len) in done {
        // SAFETY: `copy_to_global`'s contract holds the ends valid until this wait.
        unsafe { core::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, len) };
    }
}

/// `cp.async.bulk.wait_group.read N`.
#[track_caller]
pub(crate) fn wait_read<const N: u32>() {
    step("bulk::wait_read", false);
    complete(u64::from(N));
}

/// `cp.async.bulk.wait_group 0`.
#[track_caller]
pub(crate) fn wait_all() {
    step("bulk::wait_all", false);
    complete(0);
}
