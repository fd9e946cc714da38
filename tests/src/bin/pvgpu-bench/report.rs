//! Samples, their median and spread over repeated runs, the tables, and the
//! verdict against each target.

use serde::Serialize;

/// One measured value of one run.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    pub transport: String,
    pub executor: String,
    pub metric: String,
    pub value: f64,
    pub unit: &'static str,
    /// Which repetition (0-based).
    pub run: usize,
}

/// Collects one target's samples of one run.
pub struct Recorder<'a> {
    pub samples: Vec<Sample>,
    pub transport: &'a str,
    pub executor: &'a str,
    pub run: usize,
}

impl Recorder<'_> {
    pub fn add(&mut self, metric: impl Into<String>, value: f64, unit: &'static str) {
        self.samples.push(Sample {
            transport: self.transport.into(),
            executor: self.executor.into(),
            metric: metric.into(),
            value,
            unit,
            run: self.run,
        });
    }
}

/// A metric of one transport over every run.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub runs: usize,
}

impl Summary {
    /// Half the range, relative to the median.
    pub fn spread(&self) -> f64 {
        if self.median > 0.0 { (self.max - self.min) / 2.0 / self.median } else { 0.0 }
    }
}

/// Every sample, summarised by transport and metric.
pub struct Results<'a> {
    pub samples: &'a [Sample],
}

pub fn lower_is_better(metric: &str) -> bool {
    !metric.contains("gbps")
}

fn format_value(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

impl Results<'_> {
    pub fn get(&self, transport: &str, metric: &str) -> Option<Summary> {
        let mut v: Vec<f64> = self.samples.iter().filter(|s| s.transport == transport && s.metric == metric).map(|s| s.value).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(|a, b| a.total_cmp(b));
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        Some(Summary { median, min: v[0], max: v[n - 1], runs: n })
    }

    fn ordered(&self, pick: impl Fn(&str) -> bool) -> (Vec<&str>, Vec<&str>) {
        let mut transports: Vec<&str> = Vec::new();
        let mut metrics: Vec<&str> = Vec::new();
        for s in self.samples.iter().filter(|s| pick(&s.transport)) {
            if !transports.contains(&s.transport.as_str()) {
                transports.push(&s.transport);
            }
            if !metrics.contains(&s.metric.as_str()) {
                metrics.push(&s.metric);
            }
        }
        (transports, metrics)
    }

    /// Slowdown of `transport` against `baseline` on `metric` (medians).
    pub fn ratio(&self, transport: &str, baseline: &str, metric: &str) -> Option<f64> {
        let (v, b) = (self.get(transport, metric)?.median, self.get(baseline, metric)?.median);
        (v > 0.0 && b > 0.0).then(|| if lower_is_better(metric) { v / b } else { b / v })
    }

    /// The main table: medians with their spread, and each transport's
    /// ratio to the baseline. Reference measurements are printed apart.
    pub fn print(&self, baseline: &str, header: &str) {
        let (transports, metrics) = self.ordered(|t| t != REFERENCE);
        eprintln!("\n{header}");
        eprintln!(
            "medians over the runs, ± half their range; ratios are slowdowns against {baseline} (1.00x = as fast; higher = slower)\n"
        );
        let mut line = format!("{:<30}", "metric");
        for t in &transports {
            line += &format!("{:>16}", t);
            if *t != baseline {
                line += &format!("{:>9}", "ratio");
            }
        }
        eprintln!("{line}");
        for m in &metrics {
            let unit = self.samples.iter().find(|s| s.metric == *m).map_or("", |s| s.unit);
            let mut line = format!("{:<30}", format!("{m} ({unit})"));
            for t in &transports {
                line += &match self.get(t, m) {
                    Some(s) if s.runs > 1 => format!("{:>16}", format!("{} ±{:.0}%", format_value(s.median), s.spread() * 100.0)),
                    Some(s) => format!("{:>16}", format_value(s.median)),
                    None => format!("{:>16}", "-"),
                };
                if *t != baseline {
                    line += &match self.ratio(t, baseline, m) {
                        Some(r) => format!("{:>8.2}x", r),
                        None => format!("{:>9}", "-"),
                    };
                }
            }
            eprintln!("{line}");
        }
        let (_, refs) = self.ordered(|t| t == REFERENCE);
        if !refs.is_empty() {
            eprintln!("\nreferences on the same CPUs:");
            for m in refs {
                if let Some(s) = self.get(REFERENCE, m) {
                    eprintln!("  {:<34}{:>10} ±{:.0}%", m, format_value(s.median), s.spread() * 100.0);
                }
            }
        }
    }

    /// Each target of the local ring against native, and TCP against a raw
    /// TCP ping-pong: measured, goal, met or not.
    pub fn targets(&self, sizes: &[usize]) -> Vec<Verdict> {
        let mut v = Vec::new();
        let mut push = |what: String, measured: Option<f64>, goal: &str, met: Option<bool>, unit: &str| {
            if let (Some(m), Some(ok)) = (measured, met) {
                v.push(Verdict { what, measured: format!("{}{unit}", format_value(m)), goal: goal.into(), met: ok });
            }
        };
        let local = |m: &str| self.get("local", m).map(|s| s.median);
        let p50 = local("null_rtt_p50_us");
        push("null-call round trip p50".into(), p50, "≤ 0.8 µs", p50.map(|x| x <= 0.8), " µs");
        let p99 = local("null_rtt_p99_us");
        push("null-call round trip p99".into(), p99, "≤ 1.5 µs", p99.map(|x| x <= 1.5), " µs");
        for (m, goal, limit) in [("launch_sync_us", "≤ 1.15x", 1.15), ("matsum_ms", "≤ 1.2x", 1.2), ("jacobi_ms", "≤ 1.05x", 1.05)] {
            let r = self.ratio("local", "native", m);
            push(format!("{m} vs native"), r, goal, r.map(|x| x <= limit), "x");
        }
        for &size in sizes.iter().filter(|&&s| s >= 1 << 20) {
            for dir in ["htod", "dtoh"] {
                let m = format!("{dir}_gbps_{size}");
                let r = self.ratio("local", "native", &m);
                push(format!("pageable {dir} {} vs native", human(size)), r, "≤ 1.00x", r.map(|x| x <= 1.0), "x");
                let m = format!("pinned_{dir}_gbps_{size}");
                let share = match (self.get("local", &m), self.get("native", &m)) {
                    (Some(l), Some(n)) if n.median > 0.0 => Some(l.median / n.median * 100.0),
                    _ => None,
                };
                push(format!("pinned {dir} {} share of native", human(size)), share, "≥ 90 %", share.map(|x| x >= 90.0), " %");
            }
        }
        for m in ["graph_replay_kernels_us", "graph_replay_copies_us"] {
            let r = self.ratio("local", "native", m);
            push(format!("{m} vs native"), r, "≤ 1.05x", r.map(|x| x <= 1.05), "x");
            // Over TCP a replay is one command: native plus one round trip.
            let extra = match (self.get("tcp", m), self.get("native", m), self.get(REFERENCE, "tcp_raw_rtt_p50_us")) {
                (Some(t), Some(n), Some(r)) if r.median > 0.0 => Some((t.median - n.median) / r.median),
                _ => None,
            };
            push(format!("{m} over tcp, beyond native, in raw TCP round trips"), extra, "≤ 1", extra.map(|x| x <= 1.0), "");
        }
        for m in ["torch_mlp_step_ms", "torch_transformer_step_ms"] {
            let r = self.ratio("local", "native", m);
            push(format!("{m} vs native"), r, "≤ 1.15x", r.map(|x| x <= 1.15), "x");
        }
        let tcp = match (self.get("tcp", "null_rtt_p50_us"), self.get(REFERENCE, "tcp_raw_rtt_p50_us")) {
            (Some(t), Some(r)) if r.median > 0.0 => Some(t.median / r.median),
            _ => None,
        };
        push("tcp round trip vs raw TCP ping-pong".into(), tcp, "≤ 1.2x", tcp.map(|x| x <= 1.2), "x");
        // TCP copies against a raw stream between the same CPUs, same run.
        let stream = self.get(REFERENCE, "tcp_raw_stream_gbps").map(|s| s.median).filter(|&g| g > 0.0);
        for &size in sizes.iter().filter(|&&s| s >= 1 << 20) {
            for dir in ["htod", "dtoh"] {
                let share = match (self.get("tcp", &format!("{dir}_gbps_{size}")), stream) {
                    (Some(t), Some(r)) => Some(t.median / r * 100.0),
                    _ => None,
                };
                push(format!("tcp {dir} {} share of a raw TCP stream", human(size)), share, "≥ 80 %", share.map(|x| x >= 80.0), " %");
            }
        }
        // A program's first command: at most 50 ms later than natively.
        for t in ["local", "tcp"] {
            let extra = match (self.get(t, "session_start_ms"), self.get("native", "session_start_ms")) {
                (Some(p), Some(n)) => Some(p.median - n.median),
                _ => None,
            };
            push(format!("{t} session start beyond native"), extra, "≤ 50 ms", extra.map(|x| x <= 50.0), " ms");
        }
        let idle = self.get(REFERENCE, "idle_cpu_percent").map(|s| s.median);
        push("CPU of an idle local session".into(), idle, "≤ 1 %", idle.map(|x| x <= 1.0), " %");
        v
    }
}

/// Transport name of measurements that are not of a transport (cache-line
/// and raw TCP ping-pong, idle CPU, shared-CPU runs).
pub const REFERENCE: &str = "reference";

/// One target, measured.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    pub what: String,
    pub measured: String,
    pub goal: String,
    pub met: bool,
}

pub fn print_targets(v: &[Verdict]) {
    if v.is_empty() {
        return;
    }
    eprintln!("\ntargets (medians; the local ring against native, TCP against the raw references):");
    for t in v {
        eprintln!("  {:<44}{:>12}  {:<10}{}", t.what, t.measured, t.goal, if t.met { "met" } else { "NOT MET" });
    }
}

/// `1048576` as `1 MiB`.
pub fn human(size: usize) -> String {
    if size >= 1 << 20 { format!("{} MiB", size >> 20) } else { format!("{} KiB", size >> 10) }
}
