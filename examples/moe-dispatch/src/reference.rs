//! The CPU reference: what a dispatch must deliver and what a combine must produce.

use crate::routing::{Routing, destinations};
use crate::{Shape, bf16, expert_scale, fp8, kernels::MODE_THROUGHPUT};

/// A token row as the dispatch sends it ([`Shape::sent_row`] `u16`s): the `bf16` values, or
/// the FP8 row ([`fp8::quantize`]) as little-endian `u16`s.
pub fn sent_row(s: &Shape, x: &[u16]) -> Vec<u16> {
    if !s.fp8() {
        return x.to_vec();
    }
    fp8::quantize(x)
        .chunks(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .collect()
}

/// A token row's values as the experts see them: the `bf16` values, or what an FP8 dispatch
/// delivers of them.
pub fn delivered_values(s: &Shape, x: &[u16]) -> Vec<f32> {
    if s.fp8() {
        fp8::dequantize(&fp8::quantize(x), x.len())
    } else {
        x.iter().map(|&b| bf16::to_f32(b)).collect()
    }
}

/// One PE's inputs.
#[derive(Clone, Debug)]
pub struct Inputs {
    /// `T × H` tokens.
    pub x: Vec<u16>,
    /// The router's choices.
    pub routing: Routing,
}

/// What one PE received, read back from its buffers.
#[derive(Clone, Debug, Default)]
pub struct Received {
    /// Rows from each source.
    pub recv_count: Vec<u32>,
    /// `n × T` source token of each received row.
    pub recv_src: Vec<i32>,
    /// `n × T × K` pair of each choice of each received row.
    pub recv_pair: Vec<i32>,
    /// `n × T × K` weights.
    pub recv_w: Vec<f32>,
    /// `n × T × H` received tokens.
    pub recv_x: Vec<u16>,
    /// `L × n` kept pairs per (local expert, source).
    pub expert_count: Vec<u32>,
    /// `L × n` first pair per (local expert, source).
    pub expert_offset: Vec<u32>,
    /// The received row of each pair slot.
    pub expert_rows: Vec<i32>,
}

/// The verdict on one PE's received data.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DispatchReport {
    /// Rows received (all sources).
    pub rows: u64,
    /// Pairs delivered to this PE's experts.
    pub pairs: u64,
    /// Pairs for this PE's experts dropped for capacity (as the reference expects them).
    pub dropped: u64,
    /// What is wrong (empty when everything arrived exactly once, bit for bit); at most
    /// 20 entries, then a count.
    pub problems: Vec<String>,
}

impl DispatchReport {
    fn problem(&mut self, p: String) {
        if self.problems.len() < 20 {
            self.problems.push(p);
        } else if self.problems.len() == 20 {
            self.problems.push("(more problems not listed)".into());
        }
    }
}

/// Checks what PE `me` received from every source (`sources[s]` are PE `s`'s inputs):
/// every token that has an expert here arrived exactly once, bit for bit (as [`sent_row`]
/// makes it), with its weights;
/// nothing else arrived; every kept pair has one slot in its (expert, source) range that
/// points back at its row; the pairs dropped for capacity are exactly as many as the
/// capacity implies (and in throughput mode, exactly the last ones in source and token
/// order). Rows from a source are packed in token order in throughput mode; in low-latency
/// mode token `t`'s row is row `t` of its source's region, and the others hold source
/// index -1.
pub fn check_dispatch(me: u32, s: &Shape, sources: &[Inputs], got: &Received) -> DispatchReport {
    let (n, t_n, h, k_n) = (
        s.n_pes as usize,
        s.tokens as usize,
        s.hidden as usize,
        s.top_k as usize,
    );
    let l_n = s.experts / s.n_pes;
    let tp = s.mode == MODE_THROUGHPUT;
    let mut rep = DispatchReport::default();
    // (local expert, source) -> pairs wanted; for throughput, per local expert in order.
    let mut want_pairs = vec![0u64; l_n as usize * n];
    let mut slot_seen = vec![false; got.expert_rows.len()];
    let mut kept_per = vec![0u64; l_n as usize * n];
    let mut dropped_per = vec![0u64; l_n as usize * n];
    for (src, inp) in sources.iter().enumerate() {
        let r = &inp.routing;
        let want: Vec<usize> = (0..t_n)
            .filter(|&t| destinations(&r.topk[t * k_n..(t + 1) * k_n], l_n) & (1 << me) != 0)
            .collect();
        for t in &want {
            for k in 0..k_n {
                let e = r.topk[t * k_n + k];
                if e >= 0 && e as u32 / l_n == me {
                    want_pairs[(e as u32 % l_n) as usize * n + src] += 1;
                }
            }
        }
        let count = got.recv_count[src] as usize;
        if count != want.len() {
            rep.problem(format!("from PE {src}: {count} rows, want {}", want.len()));
        }
        let mut seen = vec![false; t_n];
        let mut last_t = -1i64;
        for j in 0..if tp { count.min(t_n) } else { t_n } {
            let row = src * t_n + j;
            let t = got.recv_src[row];
            if !tp && t == -1 {
                continue;
            }
            if !tp && t != j as i32 {
                rep.problem(format!(
                    "low latency: row {row} holds PE {src}'s token {t}, not its own token {j}"
                ));
                continue;
            }
            if t < 0 || t as usize >= t_n {
                rep.problem(format!("row {row}: source token {t} out of range"));
                continue;
            }
            let t = t as usize;
            if seen[t] {
                rep.problem(format!("PE {src} token {t} arrived twice"));
            }
            seen[t] = true;
            if tp && t as i64 <= last_t {
                rep.problem(format!(
                    "throughput: rows from PE {src} out of token order at {j}"
                ));
            }
            last_t = t as i64;
            if destinations(&r.topk[t * k_n..(t + 1) * k_n], l_n) & (1 << me) == 0 {
                rep.problem(format!("PE {src} token {t} has no expert here but arrived"));
            }
            let want_row = sent_row(s, &inp.x[t * h..(t + 1) * h]);
            if got.recv_x[row * h..row * h + want_row.len()] != want_row[..] {
                rep.problem(format!("PE {src} token {t}: data differs"));
            }
            rep.rows += 1;
            for k in 0..k_n {
                let e = r.topk[t * k_n + k];
                let pair = got.recv_pair[row * k_n + k];
                if got.recv_w[row * k_n + k].to_bits() != r.weights[t * k_n + k].to_bits() {
                    rep.problem(format!("PE {src} token {t} choice {k}: weight differs"));
                }
                let here = e >= 0 && e as u32 / l_n == me;
                if !here {
                    if pair != -1 {
                        rep.problem(format!(
                            "PE {src} token {t} choice {k}: pair {pair} for another PE's expert"
                        ));
                    }
                    continue;
                }
                let blk = (e as u32 % l_n) as usize * n + src;
                if pair < 0 {
                    dropped_per[blk] += 1;
                    continue;
                }
                let (off, cnt) = (got.expert_offset[blk], got.expert_count[blk]);
                let p = pair as usize;
                if pair as u32 >= off + cnt || (pair as u32) < off || p >= slot_seen.len() {
                    rep.problem(format!(
                        "PE {src} token {t} expert {e}: pair {pair} outside [{off}, {})",
                        off + cnt
                    ));
                    continue;
                }
                if slot_seen[p] {
                    rep.problem(format!("pair slot {p} used twice"));
                }
                slot_seen[p] = true;
                if got.expert_rows[p] != row as i32 {
                    rep.problem(format!(
                        "pair slot {p} points at row {}, not {row}",
                        got.expert_rows[p]
                    ));
                }
                kept_per[blk] += 1;
            }
        }
        for t in want {
            if !seen[t] {
                rep.problem(format!("PE {src} token {t} never arrived"));
            }
        }
    }
    // Every (expert, source) range is filled exactly; drops as the capacity implies.
    for blk in 0..l_n as usize * n {
        if kept_per[blk] != u64::from(got.expert_count[blk]) {
            rep.problem(format!(
                "expert {} source {}: {} pairs point here, count says {}",
                blk / n,
                blk % n,
                kept_per[blk],
                got.expert_count[blk]
            ));
        }
        rep.pairs += kept_per[blk];
        rep.dropped += dropped_per[blk];
    }
    let cap = u64::from(s.capacity);
    let want_dropped: u64 = if tp {
        (0..l_n as usize)
            .map(|l| {
                want_pairs[l * n..(l + 1) * n]
                    .iter()
                    .sum::<u64>()
                    .saturating_sub(cap)
            })
            .sum()
    } else {
        want_pairs.iter().map(|c| c.saturating_sub(cap)).sum()
    };
    if rep.dropped != want_dropped {
        rep.problem(format!(
            "{} pairs dropped, capacity {cap} implies {want_dropped}",
            rep.dropped
        ));
    }
    if tp {
        // Kept pairs of an expert are its first ones in (source, token) order.
        for l in 0..l_n as usize {
            let mut budget = cap;
            for src in 0..n {
                let blk = l * n + src;
                let keep = want_pairs[blk].min(budget);
                budget -= keep;
                if u64::from(got.expert_count[blk]) != keep {
                    rep.problem(format!(
                        "throughput: expert {l} source {src} kept {}, want {keep}",
                        got.expert_count[blk]
                    ));
                }
            }
        }
    }
    rep
}

/// PE's expected combined tokens, given which of its choices were delivered (`kept[t * K +
/// k]`; a dropped or absent choice adds nothing): per destination PE, in order, the sum of
/// `w_k * expert_k(x)` over the choices on it, rounded to `bf16`; then the sum of those in
/// `f32`, starting from the first as it is, rounded to `bf16` (the kernels' order of
/// operations). `x` is what the dispatch
/// delivers ([`delivered_values`]).
pub fn combine(inp: &Inputs, kept: &[bool], s: &Shape) -> Vec<u16> {
    let (t_n, h, k_n) = (s.tokens as usize, s.hidden as usize, s.top_k as usize);
    let l_n = s.experts / s.n_pes;
    let r = &inp.routing;
    let mut out = vec![0u16; t_n * h];
    for t in 0..t_n {
        let ids = &r.topk[t * k_n..(t + 1) * k_n];
        let mask = destinations(ids, l_n);
        let xs = delivered_values(s, &inp.x[t * h..(t + 1) * h]);
        for (i, &x) in xs.iter().enumerate() {
            // The first destination's sum as it is, then the others added.
            let mut acc: Option<f32> = None;
            for d in (0..s.n_pes).filter(|d| mask & (1 << d) != 0) {
                let mut part = 0f32;
                for k in 0..k_n {
                    let e = ids[k];
                    if e >= 0 && e as u32 / l_n == d && kept[t * k_n + k] {
                        let y = bf16::to_f32(bf16::from_f32(x * expert_scale(e as u32)));
                        part += r.weights[t * k_n + k] * y;
                    }
                }
                let part = bf16::to_f32(bf16::from_f32(part));
                acc = Some(acc.map_or(part, |a| a + part));
            }
            out[t * h + i] = bf16::from_f32(acc.unwrap_or(0.0));
        }
    }
    out
}

/// `(differing values, largest difference relative to max(|want|, 2^-8))` between two
/// `bf16` vectors.
pub fn compare(got: &[u16], want: &[u16]) -> (usize, f64) {
    let mut diff = 0;
    let mut worst = 0f64;
    for (&g, &w) in got.iter().zip(want) {
        if g != w {
            diff += 1;
            let (g, w) = (f64::from(bf16::to_f32(g)), f64::from(bf16::to_f32(w)));
            worst = worst.max((g - w).abs() / w.abs().max(1.0 / 256.0));
        }
    }
    (diff + got.len().abs_diff(want.len()), worst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::MODE_LOW_LATENCY;
    use crate::routing::{Distribution, route, tokens};

    /// A CPU dispatch: what PE `me` should hold, its rows packed in token order (throughput
    /// mode) or at their tokens' indices (low latency), the pairs packed.
    fn simulate(me: u32, s: &Shape, src: &[Inputs]) -> Received {
        let packed = s.mode == MODE_THROUGHPUT;
        let (n, t_n, h, k_n) = (
            s.n_pes as usize,
            s.tokens as usize,
            s.hidden as usize,
            s.top_k as usize,
        );
        let l_n = s.experts / s.n_pes;
        let mut g = Received {
            recv_count: vec![0; n],
            recv_src: vec![if packed { 0 } else { -1 }; n * t_n],
            recv_pair: vec![-1; n * t_n * k_n],
            recv_w: vec![0.0; n * t_n * k_n],
            recv_x: vec![0; n * t_n * h],
            expert_count: vec![0; l_n as usize * n],
            expert_offset: vec![0; l_n as usize * n],
            expert_rows: vec![-1; l_n as usize * n * t_n],
        };
        let mut rows_of = vec![vec![]; l_n as usize * n];
        for (si, inp) in src.iter().enumerate() {
            let r = &inp.routing;
            for t in 0..t_n {
                let ids = &r.topk[t * k_n..(t + 1) * k_n];
                if destinations(ids, l_n) & (1 << me) == 0 {
                    continue;
                }
                let row = si * t_n + if packed { g.recv_count[si] as usize } else { t };
                g.recv_count[si] += 1;
                g.recv_src[row] = t as i32;
                g.recv_x[row * h..(row + 1) * h].copy_from_slice(&inp.x[t * h..(t + 1) * h]);
                for k in 0..k_n {
                    g.recv_w[row * k_n + k] = r.weights[t * k_n + k];
                    if ids[k] >= 0 && ids[k] as u32 / l_n == me {
                        rows_of[(ids[k] as u32 % l_n) as usize * n + si].push((row, k));
                    }
                }
            }
        }
        let mut next = 0;
        for (blk, list) in rows_of.iter().enumerate() {
            g.expert_offset[blk] = next;
            g.expert_count[blk] = list.len() as u32;
            for &(row, k) in list {
                g.expert_rows[next as usize] = row as i32;
                g.recv_pair[row * k_n + k] = next as i32;
                next += 1;
            }
        }
        g
    }

    fn setup(dist: Distribution, mode: u32) -> (Shape, Vec<Inputs>) {
        let s = Shape {
            tokens: 40,
            hidden: 16,
            experts: 12,
            top_k: 3,
            n_pes: 3,
            capacity: 1000,
            round: 1,
            mode,
            dtype: crate::kernels::DTYPE_BF16,
            read_once: 0,
            mapped: 0,
        };
        let src = (0..3)
            .map(|pe| Inputs {
                x: tokens(9, pe, 40, 16),
                routing: route(9, pe, 40, 12, 3, dist),
            })
            .collect();
        (s, src)
    }

    #[test]
    fn a_correct_dispatch_passes() {
        for dist in [
            Distribution::Uniform,
            Distribution::Skewed,
            Distribution::Sparse,
        ] {
            for mode in [MODE_THROUGHPUT, MODE_LOW_LATENCY] {
                let (s, src) = setup(dist, mode);
                for me in 0..3 {
                    let rep = check_dispatch(me, &s, &src, &simulate(me, &s, &src));
                    assert!(
                        rep.problems.is_empty(),
                        "{dist:?} mode {mode} PE {me}: {:?}",
                        rep.problems
                    );
                    assert!(rep.rows > 0 && rep.pairs > 0 && rep.dropped == 0);
                }
            }
        }
    }

    #[test]
    fn every_kind_of_mistake_is_caught() {
        for mode in [MODE_THROUGHPUT, MODE_LOW_LATENCY] {
            let (s, src) = setup(Distribution::Uniform, mode);
            let good = simulate(1, &s, &src);
            let caught = |g: &Received, what: &str| {
                let rep = check_dispatch(1, &s, &src, g);
                assert!(!rep.problems.is_empty(), "mode {mode}: {what} not caught");
            };
            // The first two rows that arrived (in low-latency mode rows may be empty).
            let arrived = |g: &Received| {
                let mut rows = (0..g.recv_src.len()).filter(|&r| g.recv_src[r] >= 0);
                (rows.next().unwrap(), rows.next().unwrap())
            };
            let (r0, r1) = arrived(&good);
            let (h, k_n) = (s.hidden as usize, s.top_k as usize);
            let mut g = good.clone();
            g.recv_x[r0 * h + 5] ^= 1;
            caught(&g, "a flipped bit");
            let mut g = good.clone();
            g.recv_src[r1] = g.recv_src[r0];
            caught(&g, "a token twice");
            let mut g = good.clone();
            g.recv_count[0] -= 1;
            caught(&g, "a token missing");
            let mut g = good.clone();
            g.recv_src[r0] = -1;
            caught(&g, "a row marked empty");
            let mut g = good.clone();
            let p = g.recv_pair.iter().position(|&p| p >= 0).unwrap();
            g.recv_pair[p] = -1;
            caught(&g, "a silently dropped pair");
            let mut g = good.clone();
            g.expert_rows.swap(0, 1);
            caught(&g, "a pair pointing at the wrong row");
            let mut g = good;
            g.recv_w[r0 * k_n] += 1.0;
            caught(&g, "a wrong weight");
        }
    }

    #[test]
    fn combine_adds_destinations_in_order_and_skips_dropped_pairs() {
        let (s, src) = setup(Distribution::Uniform, MODE_THROUGHPUT);
        let all = vec![true; 40 * 3];
        let full = combine(&src[0], &all, &s);
        let mut some = all.clone();
        some[0] = false;
        let fewer = combine(&src[0], &some, &s);
        assert_ne!(
            full[..16],
            fewer[..16],
            "dropping token 0's first choice changes it"
        );
        assert_eq!(full[16..], fewer[16..], "and nothing else");
        assert_eq!(compare(&full, &full), (0, 0.0));
        assert!(compare(&full, &fewer).0 > 0);
    }
}
