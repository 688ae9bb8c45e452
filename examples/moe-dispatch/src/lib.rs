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
//!   sum back to the token's PE (its own tokens' straight into `out`), which adds the sums of
//!   all its destinations in PE order into the original token order.
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

/// `bf16` as its bits, and the conversions every implementation uses (the CPU reference, the
/// Rust kernels and `cuda/moe.cu` round the same way, so they agree bit for bit; the kernels
/// two values at a time by the GPU's instruction, [`bf16::pack`]).
pub use shmem_device::bf16;

/// The FP8 dispatch's quantisation (DeepEP's low-latency format): each group of
/// [`GROUP`](fp8::GROUP) consecutive values of a token is sent as `e4m3` values
/// ([`shmem_device::fp8`]) times one `f32` scale.
pub mod fp8 {
    #[cfg(not(target_arch = "nvptx64"))]
    use super::bf16;
    use shmem_device::fp8::E4M3_MAX;
    #[cfg(not(target_arch = "nvptx64"))]
    use shmem_device::fp8::{e4m3_from_f32, e4m3_to_f32};

    /// Values per scale.
    pub const GROUP: usize = 128;

    /// Bytes of a quantised row of `hidden` values (a multiple of [`GROUP`]): the `e4m3`
    /// values, then one `f32` scale per group.
    pub const fn row_bytes(hidden: usize) -> usize {
        hidden + hidden / GROUP * 4
    }

    /// A group's scale and its inverse, from its largest magnitude: `amax · (1/448)` and
    /// `448 / amax` (`amax` at least 10^-4, so that a group of zeros has a finite scale), in
    /// `f32` as DeepEP's low-latency dispatch computes them, so that the scales sent are
    /// DeepEP's bit for bit. A value `v` is sent as `e4m3(v * inverse)`, and read back as
    /// `f32(e4m3) * scale`. (With the scale an exact division too, `amax / 448`, the
    /// low-latency FP8 dispatch took 1-4 % more time at 512 tokens on one H200, the same at
    /// 4096; BENCHMARKS.md, fifty-sixth session.)
    #[inline(always)]
    pub fn scales(amax: f32) -> (f32, f32) {
        let a = amax.max(1e-4);
        (a * (1.0 / E4M3_MAX), E4M3_MAX / a)
    }

    /// One `bf16` row quantised on the CPU, as the dispatch sends it ([`row_bytes`]).
    #[cfg(not(target_arch = "nvptx64"))]
    pub fn quantize(x: &[u16]) -> Vec<u8> {
        let h = x.len();
        let mut out = vec![0u8; row_bytes(h)];
        for (g, group) in x.chunks(GROUP).enumerate() {
            let v: Vec<f32> = group.iter().map(|&b| bf16::to_f32(b)).collect();
            let (scale, inv) = scales(v.iter().fold(0f32, |m, x| m.max(x.abs())));
            for (i, x) in v.iter().enumerate() {
                out[g * GROUP + i] = e4m3_from_f32(x * inv);
            }
            out[h + 4 * g..h + 4 * g + 4].copy_from_slice(&scale.to_le_bytes());
        }
        out
    }

    /// The values of a quantised row of `hidden` values.
    #[cfg(not(target_arch = "nvptx64"))]
    pub fn dequantize(row: &[u8], hidden: usize) -> Vec<f32> {
        (0..hidden)
            .map(|i| {
                let at = hidden + 4 * (i / GROUP);
                let scale = f32::from_le_bytes(row[at..at + 4].try_into().expect("4 bytes"));
                e4m3_to_f32(row[i]) * scale
            })
            .collect()
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
    use super::{bf16, fp8};

    #[test]
    fn fp8_rows_are_within_e4m3_rounding() {
        // A row with a wide range: each group's values within half an `e4m3` step of the
        // original (2^-4 relative for normals, scale * 2^-10 below 2^-6 * amax).
        let h = 512;
        let x: Vec<u16> = (0..h)
            .map(|i| bf16::from_f32(((i * 37 % 101) as f32 - 50.0) * (1 << (i % 9)) as f32 / 64.0))
            .collect();
        let q = fp8::quantize(&x);
        assert_eq!(q.len(), fp8::row_bytes(h));
        let back = fp8::dequantize(&q, h);
        for (g, group) in x.chunks(fp8::GROUP).enumerate() {
            let amax = group
                .iter()
                .fold(0f32, |m, &b| m.max(bf16::to_f32(b).abs()));
            let (scale, _) = fp8::scales(amax);
            for (i, &b) in group.iter().enumerate() {
                let (v, d) = (bf16::to_f32(b), back[g * fp8::GROUP + i]);
                let bound = (v.abs() / 16.0).max(scale / 1024.0) * 1.0001;
                assert!(
                    (v - d).abs() <= bound,
                    "value {i} of group {g}: {v} came back {d}"
                );
            }
            // The group's largest magnitude is exactly representable: 448 times the scale.
            assert!(
                back[g * fp8::GROUP..(g + 1) * fp8::GROUP]
                    .iter()
                    .any(|d| d.abs() == scale * 448.0)
            );
        }
        // A group of zeros stays zero.
        assert!(
            fp8::dequantize(&fp8::quantize(&[0u16; 128]), 128)
                .iter()
                .all(|&d| d == 0.0)
        );
    }
}
