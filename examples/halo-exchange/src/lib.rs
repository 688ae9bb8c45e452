//! Halo exchange: a 2D Jacobi solver for Laplace's equation whose halo rows move between
//! GPUs by GPU-initiated puts, synchronised by signals.
//!
//! - [`kernels`]: the device code (per-iteration and persistent variants, `f32` and `f64`);
//! - [`partition`], [`initial`]: how the grid is split and filled, shared by every
//!   implementation;
//! - [`mod@reference`]: the CPU reference, bit for bit the same arithmetic;
//! - `host` (host builds only): the driver that the `halo_exchange` example and the GPU tests
//!   run, and that also drives the CUDA C++ kernels of `cuda/halo.cu` for comparison.
//!
//! Run it: `cargo xtask build-ptx && cargo run --release --example halo_exchange -- --help`.

#![cfg_attr(target_arch = "nvptx64", no_std)]

pub mod kernels;

#[cfg(not(target_arch = "nvptx64"))]
pub mod host;

pub use kernels::{Real, Slab};

/// Rows `[start, start + rows)` of the global grid that PE `pe` of `n` updates: the `ny - 2`
/// interior rows split into contiguous slabs whose sizes differ by at most one (the first
/// `(ny - 2) % n` PEs get one more).
pub fn partition(ny: u32, pe: u32, n: u32) -> (u32, u32) {
    let interior = ny.saturating_sub(2);
    let (base, rem) = (interior / n, interior % n);
    let rows = base + u32::from(pe < rem);
    let start = 1 + pe * base + pe.min(rem);
    (start, rows)
}

/// The largest slab of any PE (the symmetric buffers hold this many rows plus two halos).
pub fn max_rows(ny: u32, n: u32) -> u32 {
    partition(ny, 0, n).1
}

/// [`Slab`] of PE `pe` of `n`.
pub fn slab(nx: u32, ny: u32, pe: u32, n: u32) -> Slab {
    let (_, rows) = partition(ny, pe, n);
    Slab {
        nx,
        rows,
        top_pe: if pe == 0 { -1 } else { pe as i32 - 1 },
        bottom_pe: if pe + 1 == n { -1 } else { pe as i32 + 1 },
        top_rows: if pe == 0 {
            0
        } else {
            partition(ny, pe - 1, n).1
        },
        n_pes: n,
    }
}

/// The initial value of point `(y, x)`: on the border, `1 + y / (ny - 1)` on the left and
/// right edges, 1 on the top and 2 on the bottom; inside, a pseudo-random value in `[0, 1)`
/// from `seed` (not zeros, which would hide unwritten points). Any PE can compute any point.
pub fn initial(seed: u64, nx: u32, ny: u32, y: u32, x: u32) -> f64 {
    if y == 0 {
        1.0
    } else if y == ny - 1 {
        2.0
    } else if x == 0 || x == nx - 1 {
        1.0 + f64::from(y) / f64::from(ny - 1)
    } else {
        let mut z = seed ^ (u64::from(y) << 32 | u64::from(x)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Converts from `f64` (rounding to nearest for `f32`).
pub trait FromF64: Real {
    /// `v` as `Self`.
    fn from_f64(v: f64) -> Self;
}
impl FromF64 for f32 {
    fn from_f64(v: f64) -> f32 {
        v as f32
    }
}
impl FromF64 for f64 {
    fn from_f64(v: f64) -> f64 {
        v
    }
}

/// The CPU reference: the same updates in the same order of operations as the kernels.
#[cfg(not(target_arch = "nvptx64"))]
pub mod reference {
    use super::{FromF64, initial, kernels::update};

    /// The whole `ny × nx` grid (row-major) after `iters` iterations, and the residual
    /// (sum of squared changes, before the square root) of each iteration whose number
    /// `i + 1` is a multiple of `check_every` (none if 0).
    pub fn solve<T: FromF64>(
        seed: u64,
        nx: u32,
        ny: u32,
        iters: u32,
        check_every: u32,
    ) -> (Vec<T>, Vec<f64>) {
        let (w, h) = (nx as usize, ny as usize);
        let mut a: Vec<T> = (0..h * w)
            .map(|i| T::from_f64(initial(seed, nx, ny, (i / w) as u32, (i % w) as u32)))
            .collect();
        let mut a_new = a.clone();
        let mut residuals = Vec::new();
        for it in 0..iters {
            let mut sum = 0.0;
            for y in 1..h - 1 {
                for x in 1..w - 1 {
                    // SAFETY: `1 <= y < h - 1`, `1 <= x < w - 1`: all four neighbours and the
                    // point are inside both `h * w` vectors.
                    let v = unsafe { update(a.as_ptr(), a_new.as_mut_ptr(), y * w + x, w) };
                    let old = a[y * w + x];
                    let d = v.to_f64() - old.to_f64();
                    sum += d * d;
                }
            }
            if check_every > 0 && (it + 1) % check_every == 0 {
                residuals.push(sum);
            }
            std::mem::swap(&mut a, &mut a_new);
        }
        (a, residuals)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_covers_the_interior_once() {
        for ny in [3u32, 4, 7, 10, 1026] {
            for n in 1..=9u32 {
                if ny - 2 < n {
                    continue;
                }
                let mut next = 1;
                for pe in 0..n {
                    let (start, rows) = partition(ny, pe, n);
                    assert_eq!(start, next, "ny {ny} n {n} pe {pe}");
                    assert!(rows >= 1 && rows <= max_rows(ny, n));
                    next = start + rows;
                }
                assert_eq!(next, ny - 1);
            }
        }
    }

    #[test]
    fn slabs_name_their_neighbours() {
        let s: Vec<Slab> = (0..3).map(|pe| slab(8, 10, pe, 3)).collect();
        assert_eq!((s[0].top_pe, s[0].bottom_pe, s[0].rows), (-1, 1, 3));
        assert_eq!((s[1].top_pe, s[1].bottom_pe, s[1].top_rows), (0, 2, 3));
        assert_eq!((s[2].top_pe, s[2].bottom_pe, s[2].rows), (1, -1, 2));
        assert_eq!(slab(8, 10, 0, 1).top_pe, -1);
        assert_eq!(slab(8, 10, 0, 1).bottom_pe, -1);
    }

    #[test]
    fn reference_keeps_the_border_and_converges() {
        let (nx, ny) = (12, 9);
        let (a, res) = reference::solve::<f64>(7, nx, ny, 400, 100);
        assert_eq!(res.len(), 4);
        assert!(res.windows(2).all(|w| w[1] < w[0]), "{res:?}");
        for x in 0..nx {
            assert_eq!(a[x as usize], 1.0);
            assert_eq!(a[((ny - 1) * nx + x) as usize], 2.0);
        }
        // The harmonic limit lies between the border's extremes.
        assert!(a.iter().all(|v| (1.0..=2.0).contains(v)));
    }
}
