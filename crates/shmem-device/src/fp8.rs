//! FP8 `e4m3` (OCP "E4M3FN", CUDA's `__nv_fp8_e4m3`): 1 sign bit, 4 exponent bits (bias 7),
//! 3 mantissa bits, no infinities, `0x7f`/`0xff` NaN, largest finite value ±448.
//!
//! The conversions are the same bits on the GPU, on the CPU simulator and in a host program:
//! [`e4m3x2_from_f32`] rounds to nearest, ties to even, and saturates to ±448 (PTX
//! `cvt.rn.satfinite.e4m3x2.f32`, which it uses on `sm_89` and later; CUDA C++'s
//! `__nv_cvt_float2_to_fp8x2(v, __NV_SATFINITE, __NV_E4M3)`), and [`e4m3_to_f32`] is exact.
//! A NaN becomes `0x7f`. Kernels convert four values at a time with [`e4m3x4_from_f32`] and
//! [`e4m3x4_to_f32`], which take the GPU's conversion instructions on `sm_89` and later (the
//! API suite's `fp8_convert` checks them there against the integer definitions).
//!
//! ```
//! use shmem_device::fp8::{e4m3_from_f32, e4m3_to_f32};
//! assert_eq!(e4m3_to_f32(e4m3_from_f32(1.0)), 1.0);
//! assert_eq!(e4m3_to_f32(e4m3_from_f32(1.0e6)), 448.0); // saturates
//! assert_eq!(e4m3_to_f32(e4m3_from_f32(1.0625)), 1.0); // halfway to 1.125: ties to even
//! ```

/// The largest finite `e4m3` value.
pub const E4M3_MAX: f32 = 448.0;

/// `f` as `e4m3` bits: to nearest, ties to even, saturating at ±[`E4M3_MAX`]; NaN is `0x7f`.
#[inline(always)]
pub fn e4m3_from_f32(f: f32) -> u8 {
    let bits = f.to_bits();
    let sign = ((bits >> 24) & 0x80) as u8;
    let a = f32::from_bits(bits & 0x7fff_ffff);
    if a.is_nan() {
        return 0x7f;
    }
    let code = if a >= E4M3_MAX {
        0x7e
    } else if a < 1.0 / 64.0 {
        // Subnormals (and zero): multiples of 2^-9. `a * 512 < 8` is exact; adding and
        // subtracting 2^23 rounds it to an integer, ties to even (the f32 addition's own
        // rounding). 8 is the smallest normal, 2^-6, whose code is 8 too.
        const ROUND: f32 = 8_388_608.0;
        ((a * 512.0 + ROUND) - ROUND) as u8
    } else {
        // Normals: the top 3 mantissa bits, rounded to nearest even (a carry moves into the
        // exponent, as it should); the exponent re-biased from 127 to 7. Below 448, so the
        // result is at most 448 (`0x7e`).
        let b = a.to_bits();
        let r = b + 0x7_ffff + ((b >> 20) & 1);
        ((r >> 20) - (120 << 3)) as u8
    };
    sign | code
}

/// The exact value of the `e4m3` bits `b`.
#[inline(always)]
pub fn e4m3_to_f32(b: u8) -> f32 {
    let (e, m) = (u32::from(b >> 3) & 0xf, u32::from(b & 7));
    let sign = u32::from(b & 0x80) << 24;
    let magnitude = if e == 0xf && m == 7 {
        return f32::NAN;
    } else if e == 0 {
        m as f32 * (1.0 / 512.0)
    } else {
        f32::from_bits((e + 120) << 23 | m << 20)
    };
    f32::from_bits(magnitude.to_bits() | sign)
}

/// Two values as `e4m3`: `hi` in the upper byte, `lo` in the lower (as PTX `cvt ... e4m3x2`
/// packs them), each as [`e4m3_from_f32`] converts it; one instruction on `sm_89` and later.
#[inline(always)]
pub fn e4m3x2_from_f32(hi: f32, lo: f32) -> u16 {
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_89"))]
    {
        let d: u16;
        // SAFETY: a conversion between registers; it touches no memory.
        unsafe {
            core::arch::asm!(
                "cvt.rn.satfinite.e4m3x2.f32 {d}, {a}, {b};",
                d = out(reg16) d,
                a = in(reg32) hi,
                b = in(reg32) lo,
                options(pure, nomem, nostack, preserves_flags)
            )
        };
        d
    }
    #[cfg(not(all(target_arch = "nvptx64", target_feature = "sm_89")))]
    {
        u16::from(e4m3_from_f32(hi)) << 8 | u16::from(e4m3_from_f32(lo))
    }
}

/// Four values as `e4m3`, `v[i]` in byte `i` (the order of a row in memory), each as
/// [`e4m3_from_f32`] converts it: two [`e4m3x2_from_f32`] joined into one word. On `sm_89`
/// and later the halves are joined as CUDA C++ joins them (`mov.b32 {lo, hi}`), which ptxas
/// folds into the second conversion (`F2FP ... MERGE_C`); joined by shifting and or-ing the
/// two `u16`s, each word took one more instruction (`PRMT`): eight a batch in the FP8
/// dispatch (BENCHMARKS.md, twenty-eighth session).
///
/// ```
/// use shmem_device::fp8::{e4m3_from_f32, e4m3x4_from_f32};
/// let v = [1.0, -2.0, 448.0, 0.5];
/// assert_eq!(e4m3x4_from_f32(v), u32::from_le_bytes(v.map(e4m3_from_f32)));
/// ```
#[inline(always)]
pub fn e4m3x4_from_f32(v: [f32; 4]) -> u32 {
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_89"))]
    {
        let d: u32;
        // SAFETY: conversions between registers; they touch no memory.
        unsafe {
            core::arch::asm!(
                "{{ .reg .b16 lo, hi;",
                "cvt.rn.satfinite.e4m3x2.f32 lo, {b}, {a};",
                "cvt.rn.satfinite.e4m3x2.f32 hi, {d3}, {c};",
                "mov.b32 {d}, {{lo, hi}}; }}",
                d = out(reg32) d,
                a = in(reg32) v[0],
                b = in(reg32) v[1],
                c = in(reg32) v[2],
                d3 = in(reg32) v[3],
                options(pure, nomem, nostack, preserves_flags)
            )
        };
        d
    }
    #[cfg(not(all(target_arch = "nvptx64", target_feature = "sm_89")))]
    {
        u32::from(e4m3x2_from_f32(v[1], v[0])) | u32::from(e4m3x2_from_f32(v[3], v[2])) << 16
    }
}

/// The four `e4m3` values of `w` (value `i` in byte `i`, as [`e4m3x4_from_f32`] packs them)
/// as `f32`, each as [`e4m3_to_f32`] decodes it (exact; a NaN code gives a NaN). On `sm_89`
/// and later two instructions convert the four values to `f16` (PTX
/// `cvt.rn.f16x2.e4m3x2`, CUDA C++'s `__nv_cvt_fp8x2_to_halfraw2`; exact, since `f16` holds
/// every `e4m3` value) and four widen them, where the decode in integer arithmetic takes
/// about ten instructions a value: the FP8 MoE example's stand-in expert kernel took 1.25x
/// the time of its CUDA C++ twin with it (BENCHMARKS.md, twenty-eighth session).
///
/// ```
/// use shmem_device::fp8::{e4m3_to_f32, e4m3x4_to_f32};
/// let w = 0x7e08_b838; // 1.0, -1.0, 2^-6, 448.0
/// assert_eq!(e4m3x4_to_f32(w), [1.0, -1.0, 1.0 / 64.0, 448.0]);
/// assert_eq!(e4m3x4_to_f32(w), w.to_le_bytes().map(e4m3_to_f32));
/// ```
#[inline(always)]
pub fn e4m3x4_to_f32(w: u32) -> [f32; 4] {
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_89"))]
    {
        let (a, b, c, d): (f32, f32, f32, f32);
        // SAFETY: conversions between registers; they touch no memory.
        unsafe {
            core::arch::asm!(
                "{{ .reg .b16 lo, hi, h0, h1, h2, h3; .reg .b32 p, q;",
                "mov.b32 {{lo, hi}}, {w};",
                "cvt.rn.f16x2.e4m3x2 p, lo;",
                "cvt.rn.f16x2.e4m3x2 q, hi;",
                "mov.b32 {{h0, h1}}, p;",
                "mov.b32 {{h2, h3}}, q;",
                "cvt.f32.f16 {a}, h0;",
                "cvt.f32.f16 {b}, h1;",
                "cvt.f32.f16 {c}, h2;",
                "cvt.f32.f16 {d}, h3; }}",
                w = in(reg32) w,
                a = out(reg32) a,
                b = out(reg32) b,
                c = out(reg32) c,
                d = out(reg32) d,
                options(pure, nomem, nostack, preserves_flags)
            )
        };
        [a, b, c, d]
    }
    #[cfg(not(all(target_arch = "nvptx64", target_feature = "sm_89")))]
    {
        w.to_le_bytes().map(e4m3_to_f32)
    }
}

/// The larger magnitude, half by half, of two packed pairs of `bf16`: for each 16-bit half,
/// `max(m, |w|)`, where a NaN in `w` loses to the number in `m` (as `fmaxf` lets it). `m`'s
/// halves must be non-negative numbers (no NaN); folded over a row from `0`, this is the
/// row's largest finite-or-infinite magnitude, two values at a time. The quantiser's `amax`.
///
/// One `max.bf16x2` on `sm_80` and later (CUDA C++'s `__hmax2` of the masked word).
///
/// ```
/// use shmem_device::fp8::bf16x2_amax;
/// // 2.0 and -3.0 against 1.0 and 0.5; then a NaN (0x7fc0) loses to what is held.
/// let m = bf16x2_amax(0x3f80_3f00, 0xc040_4000);
/// assert_eq!(m, 0x4040_4000);
/// assert_eq!(bf16x2_amax(m, 0x7fc0_ffc0), m);
/// ```
#[inline(always)]
pub fn bf16x2_amax(m: u32, w: u32) -> u32 {
    let a = w & 0x7fff_7fff;
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
    {
        let d: u32;
        // SAFETY: arithmetic between registers; it touches no memory.
        unsafe {
            core::arch::asm!(
                "max.bf16x2 {d}, {m}, {a};",
                d = out(reg32) d,
                m = in(reg32) m,
                a = in(reg32) a,
                options(pure, nomem, nostack, preserves_flags)
            )
        };
        d
    }
    #[cfg(not(all(target_arch = "nvptx64", target_feature = "sm_80")))]
    {
        let half = |m: u32, a: u32| if a <= 0x7f80 { m.max(a) } else { m };
        half(m & 0xffff, a & 0xffff) | half(m >> 16, a >> 16) << 16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_decodes_and_encodes_back() {
        for b in 0..=255u8 {
            let v = e4m3_to_f32(b);
            if b & 0x7f == 0x7f {
                assert!(v.is_nan(), "{b:#x}");
                assert_eq!(e4m3_from_f32(v), 0x7f);
            } else {
                assert_eq!(e4m3_from_f32(v), b, "{b:#x} = {v}");
            }
        }
        assert_eq!(e4m3_to_f32(0x7e), E4M3_MAX);
        assert_eq!(e4m3_to_f32(0x08), 1.0 / 64.0);
        assert_eq!(e4m3_to_f32(0x01), 1.0 / 512.0);
        assert_eq!(e4m3_to_f32(0xb8), -1.0);
    }

    #[test]
    fn rounds_to_nearest_even_and_saturates() {
        // Every halfway point between neighbouring positive codes goes to the even code;
        // just above or below it, to the nearer one.
        for b in 0..0x7eu8 {
            let (lo, hi) = (e4m3_to_f32(b), e4m3_to_f32(b + 1));
            let mid = (lo + hi) / 2.0;
            let even = if b % 2 == 0 { b } else { b + 1 };
            assert_eq!(e4m3_from_f32(mid), even, "midpoint of {b:#x}");
            assert_eq!(e4m3_from_f32(-mid), 0x80 | even);
            assert_eq!(e4m3_from_f32(f32::from_bits(mid.to_bits() - 1)), b);
            assert_eq!(e4m3_from_f32(f32::from_bits(mid.to_bits() + 1)), b + 1);
        }
        for big in [448.0, 449.0, 464.0, 480.0, 1e30, f32::INFINITY] {
            assert_eq!(e4m3_from_f32(big), 0x7e);
            assert_eq!(e4m3_from_f32(-big), 0xfe);
        }
        assert_eq!(e4m3_from_f32(f32::NAN), 0x7f);
        assert_eq!(e4m3_from_f32(1e-30), 0);
        assert_eq!(e4m3_from_f32(-0.0), 0x80);
        assert_eq!(e4m3x2_from_f32(1.0, -2.0), 0x38c0);
        assert_eq!(e4m3x4_from_f32([-2.0, 1.0, 1e6, f32::NAN]), 0x7f7e_38c0);
    }
}
