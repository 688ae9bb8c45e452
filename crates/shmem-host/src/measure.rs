//! Measurement helpers shared by the benchmarks: medians, the copy-engine ceiling and a
//! device copy of a kernel's bytes.

use crate::cudarc::driver::result;
use crate::{Error, Result, Shmem};

/// The copy size of [`copy_engine_peer_bandwidth`]: 256 MiB.
pub const CEILING_BYTES: usize = 256 << 20;

/// The median of `v` (the mean of the middle two for an even length; NaN when empty).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// The copy-engine peer bandwidth in GB/s (1e9 B/s): the median of `reps` copies of
/// [`CEILING_BYTES`] from PE 0 into PE 1's memory (`cuMemcpyDtoDAsync` to the address
/// `nvshmem_ptr` gives), after one warm-up copy, timed with marks on the runtime's stream
/// (CUDA events). `Some` on PE 0, `None` elsewhere (and on one PE, which has no peer, it
/// copies into its own memory). Collective; a failure on PE 0 is returned after the closing
/// barrier, so the other PEs never hang.
pub fn copy_engine_peer_bandwidth(rt: &Shmem, reps: usize) -> Result<Option<f64>> {
    rt.stream()?; // a GPU's copy engine: an error under the simulator
    let src = rt.alloc::<u8>(CEILING_BYTES)?;
    let dst = rt.alloc::<u8>(CEILING_BYTES)?;
    src.copy_from(&vec![0x5a; CEILING_BYTES])?;
    rt.barrier_all()?;
    let measure = || -> Result<f64> {
        let peer = dst.peer_device_ptr(1 % rt.n_pes())?.ok_or_else(|| {
            Error::Invalid("PE 1's memory is not mapped here: no copy-engine path".into())
        })?;
        // SAFETY: both ranges are live symmetric allocations of `CEILING_BYTES` (the
        // destination mapped into this context by NVSHMEM), alive until after the call.
        let s = unsafe { copy_seconds(rt, peer, src.device_ptr(), CEILING_BYTES, reps, false)? };
        Ok(CEILING_BYTES as f64 / s / 1e9)
    };
    let got = if rt.my_pe() == 0 {
        Some(measure())
    } else {
        None
    };
    rt.barrier_all()?;
    got.transpose()
}

/// The time, in seconds, of a device-to-device copy of `bytes` within this PE's memory:
/// the median of `reps` copies (`cuMemcpyDtoDAsync` between two allocations of this PE's
/// context, not symmetric), after one warm-up copy, each between two marks on the runtime's
/// stream ([`Shmem::mark`]). With `held` the stream is held ([`Shmem::hold`]) while each
/// copy is enqueued, as a benchmark times its kernels on a held stream.
///
/// It prices a kernel that reads and writes `2 * bytes` against a plain copy of the same
/// bytes with its own launch, where [`percent_of_device_copy`] prices it against a copy's
/// rate on [`CEILING_BYTES`]. Local: no other PE takes part. On a GPU only
/// ([`Error::Simulator`] under the simulator).
pub fn device_copy_seconds(rt: &Shmem, bytes: usize, reps: usize, held: bool) -> Result<f64> {
    use crate::cudarc::driver::DevicePtr;
    let stream = rt.stream()?;
    let src = stream.alloc_zeros::<u8>(bytes.max(1))?;
    let dst = stream.alloc_zeros::<u8>(bytes.max(1))?;
    let (s, _s) = src.device_ptr(stream);
    let (d, _d) = dst.device_ptr(stream);
    // SAFETY: both ranges are live allocations of at least `bytes` in this PE's context,
    // dropped only after the call.
    unsafe { copy_seconds(rt, d, s, bytes, reps, held) }
}

/// The median time, in seconds, of `reps` copies of `bytes` from `src` to `dst` on the
/// runtime's stream, after one warm-up copy, each between two marks ([`Shmem::mark`]), the
/// stream held while each is enqueued when `held`.
///
/// # Safety
/// `src` and `dst` are device addresses of `bytes` each, valid in this PE's context until
/// the call returns.
unsafe fn copy_seconds(
    rt: &Shmem,
    dst: u64,
    src: u64,
    bytes: usize,
    reps: usize,
    held: bool,
) -> Result<f64> {
    let stream = rt.stream()?;
    let mut times = Vec::with_capacity(reps);
    for i in 0..=reps {
        let hold = if held {
            Some(rt.hold(crate::StreamRef::Runtime)?)
        } else {
            None
        };
        let start = rt.mark()?;
        // SAFETY: the caller's contract; the runtime's stream orders the copy between the
        // marks, and the last mark is waited for before the call returns.
        unsafe { result::memcpy_dtod_async(dst, src, bytes, stream.cu_stream())? };
        let end = rt.mark()?;
        drop(hold);
        end.synchronize()?;
        if i > 0 {
            times.push(end.seconds_since(&start)?);
        }
    }
    Ok(median(&times))
}

/// The share, in percent, of a device-to-device copy's memory rate that a kernel reaches
/// when it reads and writes `bytes` in all in `seconds`. `copy_gbps` is the copy's rate in
/// GB/s copied, as [`copy_engine_peer_bandwidth`] measures it on one PE (into its own
/// memory); the copy reads and writes every byte, so the memory moves twice that.
pub fn percent_of_device_copy(bytes: u64, seconds: f64, copy_gbps: f64) -> f64 {
    100.0 * bytes as f64 / seconds / 1e9 / (2.0 * copy_gbps)
}

#[cfg(test)]
mod tests {
    use super::{median, percent_of_device_copy};

    #[test]
    fn a_kernel_moving_the_copys_bytes_in_its_time_is_at_100_percent() {
        // A copy of 1 GB at 1000 GB/s takes 1 ms and moves 2 GB (read + written).
        assert!((percent_of_device_copy(2_000_000_000, 1e-3, 1000.0) - 100.0).abs() < 1e-9);
        assert!((percent_of_device_copy(1_000_000_000, 2e-3, 1000.0) - 25.0).abs() < 1e-9);
    }

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}
