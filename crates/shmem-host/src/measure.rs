//! Measurement helpers shared by the benchmarks: medians and the copy-engine ceiling.

use crate::cudarc::driver::{result, sys};
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
/// `nvshmem_ptr` gives), after one warm-up copy, timed with CUDA events. `Some` on PE 0,
/// `None` elsewhere (and on one PE, which has no peer, it copies into its own memory).
/// Collective; a failure on PE 0 is returned after the closing barrier, so the other PEs
/// never hang.
pub fn copy_engine_peer_bandwidth(rt: &Shmem, reps: usize) -> Result<Option<f64>> {
    let stream = rt.stream()?; // a GPU's copy engine: an error under the simulator
    let src = rt.alloc::<u8>(CEILING_BYTES)?;
    let dst = rt.alloc::<u8>(CEILING_BYTES)?;
    src.copy_from(&vec![0x5a; CEILING_BYTES])?;
    rt.barrier_all()?;
    let measure = || -> Result<f64> {
        let peer = dst.peer_device_ptr(1 % rt.n_pes())?.ok_or_else(|| {
            Error::Invalid("PE 1's memory is not mapped here: no copy-engine path".into())
        })?;
        let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let mut times = Vec::new();
        for i in 0..=reps {
            let start = stream.record_event(flags)?;
            // SAFETY: both ranges are live symmetric allocations of `CEILING_BYTES` (the
            // destination mapped into this context by NVSHMEM); the stream orders the copy
            // between the events.
            unsafe {
                result::memcpy_dtod_async(
                    peer,
                    src.device_ptr(),
                    CEILING_BYTES,
                    stream.cu_stream(),
                )?
            };
            let end = stream.record_event(flags)?;
            end.synchronize()?;
            if i > 0 {
                times.push(f64::from(start.elapsed_ms(&end)?));
            }
        }
        Ok(CEILING_BYTES as f64 / (median(&times) * 1e-3) / 1e9)
    };
    let got = if rt.my_pe() == 0 {
        Some(measure())
    } else {
        None
    };
    rt.barrier_all()?;
    got.transpose()
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
