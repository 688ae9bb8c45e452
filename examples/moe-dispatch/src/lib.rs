//! Mixture-of-experts dispatch and combine between GPUs, by GPU-initiated puts, signals and
//! atomics: the expert-parallel exchange of DeepEP, in Rust.
//!
//! Every PE holds `tokens` rows of `hidden` `bf16` values, and a router's top-k choice of
//! experts for each row with a weight per choice. The `experts` experts are spread evenly
//! over the PEs: PE `d` holds experts `d * L .. (d + 1) * L`, `L = experts / n_pes`.
//!
//! - **dispatch** writes each token once to each distinct PE that holds any of its experts,
//!   and tells the receiver, per local expert and source PE, which received rows it must
//!   process; the counts travel between PEs on the device (signals and atomics), with no host
//!   round trip;
//! - **experts** (the user's expert layer; here a stand-in that scales each row by a
//!   per-expert factor) writes one output row per (token, expert) pair;
//! - **combine** sums each received token's expert outputs with the routing weights, sends the
//!   sum back to the token's PE, which adds the sums of all its destinations in PE order into
//!   the original token order.
//!
//! Two modes ([`kernels`] documents both): **low-latency** (one kernel, slots taken with
//! atomics, fixed per-expert capacity) and **throughput** (a layout pass first, then a
//! compact, deterministic layout).
//!
//! - [`kernels`]: the device code;
//! - [`bf16`], [`expert_scale`]: the arithmetic every implementation shares;
//! - `routing`, `reference`, `host` (host builds only): the inputs, the CPU reference, and
//!   the driver that the `moe_dispatch` example and the GPU tests run, which also runs the
//!   CUDA C++ kernels of `cuda/moe.cu` with the same buffers.
//!
//! Run it: `cargo xtask build-ptx && cargo run --release --example moe_dispatch -- --help`.

#![cfg_attr(target_arch = "nvptx64", no_std)]

pub mod kernels;

#[cfg(not(target_arch = "nvptx64"))]
pub mod host;
#[cfg(not(target_arch = "nvptx64"))]
pub mod reference;
#[cfg(not(target_arch = "nvptx64"))]
pub mod routing;

pub use kernels::{Bufs, Shape};

/// `bf16` as its bits, and the two conversions every implementation uses (the CPU
/// reference, the Rust kernels and `cuda/moe.cu` round the same way, so they agree bit for
/// bit).
pub mod bf16 {
    /// Widens `bf16` bits to `f32` (exact).
    #[inline(always)]
    pub fn to_f32(b: u16) -> f32 {
        f32::from_bits(u32::from(b) << 16)
    }

    /// Rounds `f32` to the nearest `bf16`, ties to even (NaN stays NaN).
    #[inline(always)]
    pub fn from_f32(f: f32) -> u16 {
        let b = f.to_bits();
        if f.is_nan() {
            return ((b >> 16) | 0x40) as u16;
        }
        ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
    }
}

/// The stand-in expert `e`'s factor: `1 + (e mod 8) / 8` (exact in `f32`). Expert `e`'s
/// output row is `bf16(f32(x) * expert_scale(e))`, element by element.
#[inline(always)]
pub fn expert_scale(e: u32) -> f32 {
    1.0 + (e % 8) as f32 * 0.125
}

#[cfg(test)]
mod tests {
    use super::bf16;

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(bf16::from_f32(1.0), 0x3f80);
        assert_eq!(bf16::to_f32(0x3f80), 1.0);
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to the even one, 1.
        assert_eq!(bf16::from_f32(1.0 + 1.0 / 256.0), 0x3f80);
        // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: rounds up.
        assert_eq!(bf16::from_f32(1.0 + 3.0 / 256.0), 0x3f82);
        assert_eq!(bf16::from_f32(-2.5), 0xc020);
        assert!(bf16::to_f32(bf16::from_f32(f32::NAN)).is_nan());
        for b in [0u16, 0x8000, 0x3f80, 0xc0a0, 0x7f7f, 0x0001] {
            assert_eq!(bf16::from_f32(bf16::to_f32(b)), b);
        }
    }
}
