//! Rust/CUDA C++ ratios pooled over several runs: the statistics of `shmem-pool`.
//!
//! One run's ratio at one point moves by a percent or more from process to process: the
//! control, the CUDA C++ kernels in both slots, read 0.95-1.09 at single `shmem-bench`
//! points and 0.98-1.02 for single MoE calls (BENCHMARKS.md, forty-fourth and sixty-first
//! sessions). A target such as "at least 0.98 of the twin" is therefore judged over runs:
//! per point, the geometric mean of the runs' ratios and its 95 % interval (Student's t on
//! the ratios' logarithms, the runs as independent samples). A point is *past* the line when
//! its mean is on the wrong side of it, and *surely past* when its whole interval is. The
//! control, pooled the same way, shows how many points the measurement's own spread puts past
//! the line.
//!
//! Inputs: `shmem-bench`'s `bench.json` (a run is a process; its `meta.control` says whether
//! it was a control) and any text holding `moe_dispatch`'s `RESULT {...}` lines of `--compare`
//! (a run is a call: one sample for the dispatch and one for the combine per configuration).

use serde_json::Value;
use std::collections::HashMap;

/// Which way a ratio is good.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Rust's bandwidth over the twin's: higher is better.
    Bandwidth,
    /// Rust's time over the twin's: lower is better.
    Time,
}

/// One run's ratio at one point.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The point: test, scope, grid and size, or the MoE configuration and phase.
    pub key: String,
    /// Which way the ratio is good.
    pub kind: Kind,
    /// The bytes of a bandwidth point (the grid's), for the size filter.
    pub bytes: Option<u64>,
    /// Rust over the twin.
    pub ratio: f64,
    /// Rust's figure and the twin's (GB/s or µs), where the run gives them.
    pub figures: Option<(f64, f64)>,
    /// Which implementation ran first in each pair, where the run says.
    pub order: Option<String>,
}

/// The samples of one input file: whether it is a control, and its samples.
pub fn parse(text: &str) -> Result<(bool, Vec<Sample>), String> {
    if text.trim_start().starts_with('{') {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        bench_samples(&v)
    } else {
        let s = moe_samples(text)?;
        if s.is_empty() {
            return Err("neither a bench.json nor a log with `RESULT` lines of --compare".into());
        }
        Ok((false, s))
    }
}

/// The points of a `shmem-bench` `bench.json`.
pub fn bench_samples(v: &Value) -> Result<(bool, Vec<Sample>), String> {
    let control = v["meta"]["control"].as_bool().unwrap_or(false);
    let points = v["points"]
        .as_array()
        .ok_or("a bench.json without `points`")?;
    let mut out = Vec::with_capacity(points.len());
    for p in points {
        let field = |k: &str| p.get(k).ok_or(format!("a point without `{k}`: {p}"));
        let bytes = field("bytes")?.as_u64().ok_or("`bytes` not a number")?;
        let bw = field("unit")?.as_str() == Some("GB/s");
        let ratio = positive(field("ratio")?.as_f64(), &format!("a point's `ratio`: {p}"))?;
        let key = format!(
            "{} {} ctas {} {} {} B",
            field("test")?.as_str().unwrap_or("?"),
            field("scope")?.as_str().unwrap_or("-"),
            field("ctas")?,
            if field("sync_each")?.as_bool() == Some(true) {
                "sync"
            } else {
                "nosync"
            },
            bytes
        );
        let figures = p["rust"].as_f64().zip(p["cuda"].as_f64());
        out.push(Sample {
            key,
            kind: if bw { Kind::Bandwidth } else { Kind::Time },
            bytes: bw.then_some(bytes),
            ratio,
            figures,
            order: None,
        });
    }
    Ok((control, out))
}

/// The `--compare` results in a `moe_dispatch` log: per configuration, the dispatch's and
/// the combine's Rust/twin time.
pub fn moe_samples(text: &str) -> Result<Vec<Sample>, String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(at) = line.find("RESULT {") else {
            continue;
        };
        let v: Value = serde_json::from_str(&line[at + "RESULT ".len()..])
            .map_err(|e| format!("a RESULT line that is not JSON ({e}): {line}"))?;
        if v.get("rust_dispatch_us").is_none() {
            continue;
        }
        let num = |k: &str| {
            v[k].as_f64()
                .ok_or(format!("a RESULT line without a number `{k}`: {line}"))
        };
        let config = format!(
            "moe {} {} T {} H {} E {} top-{} PEs {}",
            v["mode"].as_str().unwrap_or("?"),
            v["dtype"].as_str().unwrap_or("?"),
            v["tokens"],
            v["hidden"],
            v["experts"],
            v["top_k"],
            v["n_pes"]
        );
        for phase in ["dispatch", "combine"] {
            let (r, c) = (
                num(&format!("rust_{phase}_us"))?,
                num(&format!("cuda_{phase}_us"))?,
            );
            out.push(Sample {
                key: format!("{config} {phase}"),
                kind: Kind::Time,
                bytes: None,
                ratio: positive(
                    Some(r / c),
                    &format!("the {phase}'s Rust/twin time: {line}"),
                )?,
                figures: Some((r, c)),
                order: v["order"].as_str().map(str::to_owned),
            });
        }
    }
    Ok(out)
}

/// `v` if it is a finite ratio above zero (a geometric mean takes its logarithm); else an
/// error naming `what`.
fn positive(v: Option<f64>, what: &str) -> Result<f64, String> {
    match v {
        Some(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(format!("not a positive number: {what}")),
    }
}

/// Student's t for a two-sided 95 % interval with `df` degrees of freedom (the next lower
/// tabulated `df` above 30: the interval is never narrower than it should be).
pub fn t95(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => T[df - 1],
        31..=39 => T[29],
        40..=59 => 2.021,
        60..=119 => 2.000,
        120..=999 => 1.980,
        _ => 1.960,
    }
}

/// A point's ratios pooled over runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Pooled {
    /// The point.
    pub key: String,
    /// Which way its ratio is good.
    pub kind: Kind,
    /// The bytes of a bandwidth point.
    pub bytes: Option<u64>,
    /// Runs.
    pub n: usize,
    /// Geometric mean of the runs' ratios.
    pub mean: f64,
    /// Its 95 % interval (`None` with a single run).
    pub interval: Option<(f64, f64)>,
    /// The lowest and highest single run.
    pub range: (f64, f64),
    /// Per slot order (as the runs name it): runs and geometric mean.
    pub orders: Vec<(String, usize, f64)>,
    /// The lowest and highest figure of Rust's runs and of the twin's, where the runs give
    /// them.
    pub figures: Option<((f64, f64), (f64, f64))>,
}

impl Pooled {
    /// Pools `ratios` (all positive) of one point.
    pub fn new(key: &str, kind: Kind, bytes: Option<u64>, ratios: &[(f64, Option<&str>)]) -> Self {
        let logs: Vec<f64> = ratios.iter().map(|(r, _)| r.ln()).collect();
        let n = logs.len();
        let m = logs.iter().sum::<f64>() / n as f64;
        let interval = (n > 1).then(|| {
            let var = logs.iter().map(|l| (l - m).powi(2)).sum::<f64>() / (n - 1) as f64;
            let half = t95(n - 1) * (var / n as f64).sqrt();
            ((m - half).exp(), (m + half).exp())
        });
        let range = span(ratios.iter().map(|(r, _)| *r));
        let mut orders: Vec<(String, usize, f64)> = Vec::new();
        for (r, o) in ratios {
            if let Some(o) = o {
                match orders.iter_mut().find(|(name, ..)| name == o) {
                    Some(e) => {
                        e.1 += 1;
                        e.2 += r.ln();
                    }
                    None => orders.push(((*o).to_owned(), 1, r.ln())),
                }
            }
        }
        for e in &mut orders {
            e.2 = (e.2 / e.1 as f64).exp();
        }
        Pooled {
            key: key.to_owned(),
            kind,
            bytes,
            n,
            mean: m.exp(),
            interval,
            range,
            orders,
            figures: None,
        }
    }

    /// Whether the mean is on the wrong side of `line` (below it for a bandwidth, above it
    /// for a time).
    pub fn past(&self, line: f64) -> bool {
        match self.kind {
            Kind::Bandwidth => self.mean < line,
            Kind::Time => self.mean > line,
        }
    }

    /// Whether the whole 95 % interval is on the wrong side of `line`.
    pub fn surely_past(&self, line: f64) -> bool {
        self.interval.is_some_and(|(lo, hi)| match self.kind {
            Kind::Bandwidth => hi < line,
            Kind::Time => lo > line,
        })
    }

    /// One line: the point, its runs, mean, interval, range and orders.
    pub fn line(&self) -> String {
        let mut s = format!("{:<52} n {:>2}  mean {:.4}", self.key, self.n, self.mean);
        match self.interval {
            Some((lo, hi)) => s += &format!("  95 % [{lo:.4}, {hi:.4}]"),
            None => s += "  (one run)",
        }
        s += &format!("  runs {:.3}-{:.3}", self.range.0, self.range.1);
        for (o, n, g) in &self.orders {
            s += &format!("  {o} {g:.3} (n {n})");
        }
        if let Some(((rl, rh), (cl, ch))) = self.figures {
            let unit = match self.kind {
                Kind::Bandwidth => "GB/s",
                Kind::Time => "us",
            };
            s += &format!("  rust {rl:.2}-{rh:.2} {unit}, twin {cl:.2}-{ch:.2}");
        }
        s
    }
}

/// The lowest and highest of `xs`.
fn span(xs: impl Iterator<Item = f64>) -> (f64, f64) {
    xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    })
}

/// Pools samples by point, in the order the points first appear.
pub fn pool(samples: &[Sample]) -> Vec<Pooled> {
    let mut order: Vec<&str> = Vec::new();
    let mut groups: HashMap<&str, Vec<&Sample>> = HashMap::new();
    for s in samples {
        let g = groups.entry(&s.key).or_default();
        if g.is_empty() {
            order.push(&s.key);
        }
        g.push(s);
    }
    order
        .into_iter()
        .map(|k| {
            let g = &groups[k];
            let ratios: Vec<(f64, Option<&str>)> =
                g.iter().map(|s| (s.ratio, s.order.as_deref())).collect();
            let mut p = Pooled::new(k, g[0].kind, g[0].bytes, &ratios);
            // The figures' ranges, when every run gives them.
            let figs: Option<Vec<(f64, f64)>> = g.iter().map(|s| s.figures).collect();
            p.figures = figs.map(|f| (span(f.iter().map(|x| x.0)), span(f.iter().map(|x| x.1))));
            p
        })
        .collect()
}

/// The lines a target is judged by.
#[derive(Clone, Copy, Debug)]
pub struct Lines {
    /// Bandwidth ratios at least this (issue 19 item 4: 0.98).
    pub bandwidth: f64,
    /// From this many bytes (64 KiB).
    pub min_bytes: u64,
    /// `shmem-bench` latency ratios at most this (1.03).
    pub latency: f64,
    /// MoE time ratios at most this (1.00).
    pub moe: f64,
}

/// The report of one set of runs (Rust against the twin, or the control): lines of text.
/// `all`: every point, not only the summaries and the points past their line.
pub fn report(title: &str, pooled: &[Pooled], lines: Lines, all: bool) -> Vec<String> {
    let mut out = Vec::new();
    let runs = pooled.iter().map(|p| p.n).max().unwrap_or(0);
    out.push(format!(
        "== {title}: {} points, up to {runs} runs each",
        pooled.len()
    ));
    // Each point's class, by name: bandwidth points from `min_bytes`, shmem-bench
    // latencies, MoE times; `None` for bandwidth points below the size.
    let class = |p: &Pooled| match p.kind {
        Kind::Bandwidth => p
            .bytes
            .is_some_and(|b| b >= lines.min_bytes)
            .then_some("bandwidth"),
        Kind::Time if p.key.starts_with("moe ") => Some("MoE time"),
        Kind::Time => Some("latency"),
    };
    let classes = [
        ("bandwidth", lines.bandwidth),
        ("latency", lines.latency),
        ("MoE time", lines.moe),
    ];
    for (name, line) in classes {
        let ps: Vec<&Pooled> = pooled.iter().filter(|p| class(p) == Some(name)).collect();
        if ps.is_empty() {
            continue;
        }
        let past = ps.iter().filter(|p| p.past(line)).count();
        let surely = ps.iter().filter(|p| p.surely_past(line)).count();
        let side = if ps[0].kind == Kind::Bandwidth {
            "below"
        } else {
            "above"
        };
        let size = if name == "bandwidth" {
            format!(" from {} B", lines.min_bytes)
        } else {
            String::new()
        };
        // The point furthest to the wrong side, whether or not it is past the line.
        let (lowest, highest) = span(ps.iter().map(|p| p.mean));
        let worst = if side == "below" { lowest } else { highest };
        let extreme = if side == "below" { "lowest" } else { "highest" };
        out.push(format!(
            "{name}{size}: {} points; mean {side} {line}: {past}; whole 95 % interval {side}: {surely}; {extreme} mean {worst:.3}",
            ps.len()
        ));
        for p in ps {
            if all || p.past(line) || name == "MoE time" {
                let mark = if p.surely_past(line) {
                    "!!"
                } else if p.past(line) {
                    " !"
                } else {
                    "  "
                };
                out.push(format!("  {mark} {}", p.line()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn t_quantiles_shrink_towards_the_normal() {
        assert_eq!(t95(1), 12.706);
        assert_eq!(t95(9), 2.262);
        assert_eq!(t95(35), 2.042);
        assert_eq!(t95(100_000), 1.960);
        assert!((1..2000).all(|d| t95(d) >= t95(d + 1)));
        assert!(t95(0).is_infinite());
    }

    #[test]
    fn pooling_gives_the_geometric_mean_and_a_t_interval() {
        // Ratios e^-0.01, e^0, e^0.01: log-mean 0, sample sd 0.01, half-width t(2)*0.01/sqrt(3).
        let r = [(-0.01f64).exp(), 1.0, 0.01f64.exp()];
        let p = Pooled::new(
            "x",
            Kind::Time,
            None,
            &[
                (r[0], Some("rust-first")),
                (r[1], Some("cuda-first")),
                (r[2], Some("rust-first")),
            ],
        );
        assert_eq!(p.n, 3);
        assert!((p.mean - 1.0).abs() < 1e-12);
        let (lo, hi) = p.interval.unwrap();
        let half = 4.303 * 0.01 / 3f64.sqrt();
        assert!((lo - (-half).exp()).abs() < 1e-12 && (hi - half.exp()).abs() < 1e-12);
        assert_eq!(p.range, (r[0], r[2]));
        assert_eq!(p.orders[0].0, "rust-first");
        assert_eq!(p.orders[0].1, 2);
        assert!((p.orders[0].2 - 1.0).abs() < 1e-12);
        assert_eq!((p.orders[1].1, p.orders[1].2), (1, 1.0));
        // One run: a mean, no interval, never surely past.
        let one = Pooled::new("y", Kind::Bandwidth, Some(1 << 20), &[(0.9, None)]);
        assert!(one.interval.is_none() && one.past(0.98) && !one.surely_past(0.98));
    }

    #[test]
    fn past_and_surely_past_follow_the_kind() {
        let bw = |rs: &[f64]| {
            let v: Vec<(f64, Option<&str>)> = rs.iter().map(|&r| (r, None)).collect();
            Pooled::new("b", Kind::Bandwidth, Some(1 << 16), &v)
        };
        // Mean under the line, but the interval reaches above it: past, not surely.
        let noisy = bw(&[0.95, 1.0, 0.97, 0.99]);
        assert!(noisy.past(0.98) && !noisy.surely_past(0.98));
        // Tight and under: surely past.
        let low = bw(&[0.960, 0.961, 0.959, 0.960]);
        assert!(low.past(0.98) && low.surely_past(0.98));
        let t = Pooled::new(
            "t",
            Kind::Time,
            None,
            &[(1.010, None), (1.011, None), (1.009, None)],
        );
        assert!(t.past(1.0) && t.surely_past(1.0) && !t.past(1.03));
    }

    #[test]
    fn bench_json_and_moe_logs_parse() {
        let bench = json!({
            "meta": {"control": true},
            "points": [
                {"test": "put_bw", "scope": "warp", "ctas": 16, "sync_each": false,
                 "bytes": 1048576, "unit": "GB/s", "ratio": 0.97},
                {"test": "get_lat", "scope": "thread", "ctas": 1, "sync_each": false,
                 "bytes": 8, "unit": "us", "ratio": 1.01},
            ]
        });
        let (control, s) = parse(&bench.to_string()).unwrap();
        assert!(control);
        assert_eq!(s[0].key, "put_bw warp ctas 16 nosync 1048576 B");
        assert_eq!(
            (s[0].kind, s[0].bytes, s[0].ratio),
            (Kind::Bandwidth, Some(1048576), 0.97)
        );
        assert_eq!((s[1].kind, s[1].bytes), (Kind::Time, None));
        let log = "copy-engine peer bandwidth: 1.0 GB/s\n\
            RESULT {\"ce_gbps\": 1.0, \"n_pes\": 1}\n\
            low-latency bf16 ... ratio 1.000\n\
            RESULT {\"mode\": \"low-latency\", \"dtype\": \"bf16\", \"tokens\": 4096, \"experts\": 64, \"hidden\": 7168, \"top_k\": 8, \"n_pes\": 1, \"rust_dispatch_us\": 33.0, \"cuda_dispatch_us\": 33.5, \"rust_combine_us\": 140.0, \"cuda_combine_us\": 141.0, \"order\": \"rust-first\"}\n";
        let (control, s) = parse(log).unwrap();
        assert!(!control);
        assert_eq!(s.len(), 2);
        assert_eq!(
            s[0].key,
            "moe low-latency bf16 T 4096 H 7168 E 64 top-8 PEs 1 dispatch"
        );
        assert!((s[0].ratio - 33.0 / 33.5).abs() < 1e-12);
        assert_eq!(
            (s[0].figures, s[1].figures),
            (Some((33.0, 33.5)), Some((140.0, 141.0)))
        );
        let pooled = pool(&s);
        assert_eq!(pooled[0].figures, Some(((33.0, 33.0), (33.5, 33.5))));
        assert!(
            pooled[0]
                .line()
                .ends_with("rust 33.00-33.00 us, twin 33.50-33.50")
        );
        assert_eq!(s[1].order.as_deref(), Some("rust-first"));
        assert!(parse("nothing here\n").is_err());
        assert!(parse("{\"points\": 3}").is_err());
        assert!(parse("RESULT {\"rust_dispatch_us\": 1.0}").is_err());
        // A ratio the geometric mean cannot take is refused, not pooled as NaN.
        let zero = log.replace("\"cuda_combine_us\": 141.0", "\"cuda_combine_us\": 0.0");
        assert!(parse(&zero).unwrap_err().contains("combine"));
        let negative = bench.to_string().replace("0.97", "-1.0");
        assert!(
            parse(&negative)
                .unwrap_err()
                .contains("not a positive number")
        );
    }

    #[test]
    fn the_report_counts_points_past_their_lines() {
        let mk = |key: &str, kind, bytes, r: f64| Sample {
            key: key.into(),
            kind,
            bytes,
            ratio: r,
            figures: None,
            order: None,
        };
        let mut samples = Vec::new();
        for r in [0.970, 0.971, 0.969] {
            samples.push(mk("low", Kind::Bandwidth, Some(1 << 20), r));
            samples.push(mk("small", Kind::Bandwidth, Some(1 << 10), 0.5));
            samples.push(mk("fine", Kind::Bandwidth, Some(1 << 20), 1.0));
            samples.push(mk("lat", Kind::Time, None, 1.05 + r - 0.97));
            samples.push(mk("moe x dispatch", Kind::Time, None, 0.99));
        }
        let p = pool(&samples);
        assert_eq!(p.len(), 5);
        let lines = Lines {
            bandwidth: 0.98,
            min_bytes: 64 << 10,
            latency: 1.03,
            moe: 1.0,
        };
        let r = report("Rust against the twin", &p, lines, false).join("\n");
        assert!(
            r.contains(
                "bandwidth from 65536 B: 2 points; mean below 0.98: 1; whole 95 % interval \
                 below: 1; lowest mean 0.970"
            ),
            "{r}"
        );
        assert!(
            r.contains(
                "latency: 1 points; mean above 1.03: 1; whole 95 % interval above: 1; highest \
                 mean 1.050"
            ),
            "{r}"
        );
        assert!(r.contains("MoE time: 1 points; mean above 1: 0"), "{r}");
        assert!(
            r.contains("!! low") && !r.contains("small") && !r.contains(" fine"),
            "{r}"
        );
        assert!(report("c", &p, lines, true).join("\n").contains("   fine"));
    }
}
