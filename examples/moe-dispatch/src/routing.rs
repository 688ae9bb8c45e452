//! The inputs: tokens and a router's choices, generated from a seed so that every PE (and
//! the CPU reference, and `torch_baseline.py`) can compute any PE's inputs.

use crate::bf16;

/// How the router picks experts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distribution {
    /// `K` distinct experts, uniformly.
    Uniform,
    /// `K` distinct experts, expert `floor(E * u³)` for uniform `u`: low ids are popular
    /// (expert 0 gets about `(1/E)^(1/3)` of the draws), high ones rare.
    Skewed,
    /// A quarter of the experts (`e % 4 == 3`) never chosen, and every fifth token has one
    /// choice fewer (its last id is -1, the "no expert" of DeepEP's routing).
    Sparse,
}

impl Distribution {
    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Distribution::Uniform => "uniform",
            Distribution::Skewed => "skewed",
            Distribution::Sparse => "sparse",
        }
    }

    /// Parses [`Distribution::name`].
    pub fn parse(s: &str) -> Option<Distribution> {
        [
            Distribution::Uniform,
            Distribution::Skewed,
            Distribution::Sparse,
        ]
        .into_iter()
        .find(|d| d.name() == s)
    }
}

/// SplitMix64: the generator of every random choice here.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A stream of SplitMix64 numbers for token `t` of PE `pe`.
struct Stream(u64);
impl Stream {
    fn new(seed: u64, pe: u32, t: u32) -> Stream {
        Stream(seed ^ (u64::from(pe) << 48) ^ u64::from(t).wrapping_mul(0x2545_f491_4f6c_dd1d))
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }
    /// Uniform in `[0, 1)` with 24 bits.
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u32 << 24) as f32
    }
}

/// One PE's routing: `topk[t * K + k]` (expert id or -1) and `weights[t * K + k]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Routing {
    /// Expert ids, distinct per token, -1 for none.
    pub topk: Vec<i32>,
    /// Weights of the choices (0 for none), summing to 1 per token.
    pub weights: Vec<f32>,
}

impl Routing {
    /// The ids as the symmetric `topk` buffer holds them ([`crate::moe_buffers!`]): then
    /// [`MAX_TOP_K`](crate::kernels::MAX_TOP_K) words of padding (-1) that the layout's scan
    /// may read past the last token.
    pub fn topk_buffer(&self) -> Vec<i32> {
        let mut b = self.topk.clone();
        b.resize(b.len() + crate::kernels::MAX_TOP_K, -1);
        b
    }
}

/// PE `pe`'s routing of `tokens` tokens over `experts` experts, `top_k` each.
///
/// Panics unless `top_k <= experts` (`top_k <= 3 * experts / 4` for `Sparse`).
pub fn route(
    seed: u64,
    pe: u32,
    tokens: u32,
    experts: u32,
    top_k: u32,
    dist: Distribution,
) -> Routing {
    let k_n = top_k as usize;
    let usable = match dist {
        Distribution::Sparse => experts - experts.div_ceil(4),
        _ => experts,
    };
    assert!(top_k <= usable, "{top_k} distinct experts out of {usable}");
    let mut topk = Vec::with_capacity(tokens as usize * k_n);
    let mut weights = Vec::with_capacity(tokens as usize * k_n);
    for t in 0..tokens {
        let mut r = Stream::new(seed, pe, t);
        let chosen = if dist == Distribution::Sparse && t % 5 == 4 {
            k_n - 1
        } else {
            k_n
        };
        let mut ids: Vec<i32> = Vec::with_capacity(k_n);
        while ids.len() < chosen {
            let e = match dist {
                Distribution::Uniform => r.next() % u64::from(experts),
                Distribution::Skewed => {
                    let u = r.unit();
                    ((u * u * u * experts as f32) as u64).min(u64::from(experts) - 1)
                }
                Distribution::Sparse => {
                    // The i-th usable expert: skip every id with e % 4 == 3.
                    let i = r.next() % u64::from(usable);
                    i + i / 3
                }
            } as i32;
            if !ids.contains(&e) {
                ids.push(e);
            }
        }
        let u: Vec<f32> = (0..chosen).map(|_| r.unit() + 1.0 / 64.0).collect();
        let sum: f32 = u.iter().sum();
        for k in 0..k_n {
            topk.push(ids.get(k).copied().unwrap_or(-1));
            weights.push(u.get(k).map_or(0.0, |u| u / sum));
        }
    }
    Routing { topk, weights }
}

/// PE `pe`'s tokens: `tokens × hidden` `bf16` values in `[-2, 2)`.
pub fn tokens(seed: u64, pe: u32, tokens: u32, hidden: u32) -> Vec<u16> {
    let h = hidden as usize;
    let mut v = vec![0u16; tokens as usize * h];
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let per = (tokens as usize).div_ceil(threads).max(1) * h;
    std::thread::scope(|scope| {
        for (i, part) in v.chunks_mut(per).enumerate() {
            scope.spawn(move || {
                for (j, cell) in part.iter_mut().enumerate() {
                    let k = i * per + j;
                    let (t, x) = ((k / h) as u64, (k % h) as u64);
                    let z = mix(seed ^ 0x70c3 ^ (u64::from(pe) << 56) ^ (t << 24) ^ x);
                    *cell = bf16::from_f32((z >> 40) as f32 / (1u32 << 24) as f32 * 4.0 - 2.0);
                }
            });
        }
    });
    v
}

/// The bitmask of PEs that token `t`'s choices (`row`, `K` ids) live on, `L` experts per PE.
pub fn destinations(row: &[i32], local_experts: u32) -> u32 {
    row.iter()
        .filter(|&&e| e >= 0)
        .fold(0, |m, &e| m | 1 << (e as u32 / local_experts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_are_distinct_in_range_and_weights_sum_to_one() {
        for dist in [
            Distribution::Uniform,
            Distribution::Skewed,
            Distribution::Sparse,
        ] {
            let r = route(3, 1, 200, 64, 8, dist);
            for t in 0..200 {
                let ids = &r.topk[t * 8..t * 8 + 8];
                let real: Vec<i32> = ids.iter().copied().filter(|&e| e >= 0).collect();
                let want = if dist == Distribution::Sparse && t % 5 == 4 {
                    7
                } else {
                    8
                };
                assert_eq!(real.len(), want, "{dist:?} token {t}");
                for (i, e) in real.iter().enumerate() {
                    assert!((0..64).contains(e));
                    assert!(!real[..i].contains(e), "{dist:?}: repeated expert");
                    if dist == Distribution::Sparse {
                        assert_ne!(e % 4, 3);
                    }
                }
                let s: f32 = r.weights[t * 8..t * 8 + 8].iter().sum();
                assert!((s - 1.0).abs() < 1e-5);
            }
        }
        // Deterministic, and different per PE.
        assert_eq!(
            route(3, 1, 50, 64, 8, Distribution::Uniform),
            route(3, 1, 50, 64, 8, Distribution::Uniform)
        );
        assert_ne!(
            route(3, 0, 50, 64, 8, Distribution::Uniform),
            route(3, 1, 50, 64, 8, Distribution::Uniform)
        );
    }

    #[test]
    fn skewed_routing_favours_low_experts() {
        let r = route(5, 0, 2000, 64, 8, Distribution::Skewed);
        let low = r.topk.iter().filter(|&&e| e < 8).count();
        let high = r.topk.iter().filter(|&&e| e >= 56).count();
        assert!(low > 4 * high, "{low} {high}");
    }

    #[test]
    fn tokens_are_bf16_in_range_and_per_pe() {
        let a = tokens(1, 0, 3, 16);
        assert_eq!(a.len(), 48);
        assert!(a.iter().all(|&b| (-2.0..2.0).contains(&bf16::to_f32(b))));
        assert_ne!(a, tokens(1, 1, 3, 16));
        assert_eq!(destinations(&[0, 9, -1, 17], 8), 0b111);
    }
}

#[cfg(test)]
mod same_as_python {
    /// `torch_baseline.py`'s port of the uniform routing gives these ids (seed 0x5eed, PE 1).
    #[test]
    fn uniform_ids_match_the_python_port() {
        let r = super::route(0x5eed, 1, 3, 64, 8, super::Distribution::Uniform);
        let want: [[i32; 8]; 3] = [
            [34, 46, 24, 19, 18, 40, 52, 16],
            [0, 42, 11, 24, 2, 35, 57, 63],
            [39, 17, 26, 35, 42, 52, 10, 48],
        ];
        for (t, ids) in want.iter().enumerate() {
            assert_eq!(&r.topk[t * 8..t * 8 + 8], ids, "token {t}");
        }
    }
}
