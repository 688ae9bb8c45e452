//! `bf16` (bfloat16) as its bits: 1 sign bit, 8 exponent bits, 7 mantissa bits, the upper
//! half of an `f32`.
//!
//! The conversions are the same bits on the GPU, on the CPU simulator and in a host program:
//! [`to_f32`] is exact, and [`from_f32`] rounds to nearest, ties to even, keeping infinities
//! and subnormals; every NaN becomes the canonical `0x7fff`. Kernels convert two values at a
//! time with [`pack`], which is one PTX `cvt.rn.bf16x2.f32` on `sm_80` and later (CUDA C++'s
//! `__floats2bfloat162_rn`; the API suite's `bf16_convert` checks it there against
//! [`from_f32`]).
//!
//! ```
//! use shmem_device::bf16::{from_f32, pack, to_f32};
//! assert_eq!(from_f32(1.0), 0x3f80);
//! assert_eq!(from_f32(1.0 + 1.0 / 256.0), 0x3f80); // halfway to the next: ties to even
//! assert_eq!(from_f32(1.0 + 3.0 / 256.0), 0x3f82);
//! assert_eq!(from_f32(f32::NAN), 0x7fff);
//! assert_eq!(pack(1.0, -2.5), 0xc020_3f80);
//! assert_eq!(to_f32(0xc020), -2.5);
//! ```

/// `b` widened to `f32` (exact).
#[inline(always)]
pub fn to_f32(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// `f` as `bf16` bits: to nearest, ties to even; every NaN is `0x7fff`.
#[inline(always)]
pub fn from_f32(f: f32) -> u16 {
    if f.is_nan() {
        return 0x7fff;
    }
    let b = f.to_bits();
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

/// `lo` and `hi` as [`from_f32`] rounds them, packed: `lo` in the low half.
#[inline(always)]
pub fn pack(lo: f32, hi: f32) -> u32 {
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
    {
        let d: u32;
        // SAFETY: arithmetic between registers; it touches no memory.
        unsafe {
            core::arch::asm!(
                "cvt.rn.bf16x2.f32 {d}, {hi}, {lo};",
                d = out(reg32) d,
                hi = in(reg32) hi,
                lo = in(reg32) lo,
                options(pure, nomem, nostack, preserves_flags)
            )
        };
        d
    }
    #[cfg(not(all(target_arch = "nvptx64", target_feature = "sm_80")))]
    {
        u32::from(from_f32(lo)) | u32::from(from_f32(hi)) << 16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bf16_converts_back_to_itself() {
        for b in 0..=u16::MAX {
            let f = to_f32(b);
            if f.is_nan() {
                assert_eq!(from_f32(f), 0x7fff, "{b:#06x}");
            } else {
                assert_eq!(from_f32(f), b, "{b:#06x}");
            }
        }
    }

    #[test]
    fn rounding_at_the_edges() {
        // Ties to even, in the normals and the subnormals.
        assert_eq!(from_f32(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(from_f32(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(from_f32(f32::from_bits(0x0000_8000)), 0x0000);
        assert_eq!(from_f32(f32::from_bits(0x0001_8000)), 0x0002);
        assert_eq!(from_f32(f32::from_bits(0x8000_8001)), 0x8001);
        // Past the largest finite value: infinity; the largest below the tie: the largest.
        assert_eq!(from_f32(f32::MAX), 0x7f80);
        assert_eq!(from_f32(f32::from_bits(0x7f7f_7fff)), 0x7f7f);
        assert_eq!(from_f32(f32::NEG_INFINITY), 0xff80);
        assert_eq!(from_f32(f32::from_bits(0xffff_ffff)), 0x7fff);
        assert_eq!(pack(f32::NAN, 1.0), 0x3f80_7fff);
    }
}
