//! `/metrics` as Prometheus scrapes it, during a running program: the
//! text parses, and the counters move with what the program does.

use super::*;
use prometheus_parse::{Sample, Scrape, Value};

pub(super) fn scrape(h: &Harness) -> Scrape {
    let ctl = h.control().expect("a backend of the test's own has a control socket");
    let (status, body) = ctl.request("GET", "/metrics", b"").unwrap();
    assert_eq!(status, 200);
    let text = String::from_utf8(body).expect("the metrics are text");
    assert!(text.ends_with("# EOF\n"), "OpenMetrics text ends with # EOF");
    Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("Prometheus' parser reads the metrics")
}

/// The value of `name`'s sample whose labels include `want`.
pub(super) fn value(s: &Scrape, name: &str, want: &[(&str, &str)]) -> Option<f64> {
    let matches = |x: &&Sample| x.metric == name && want.iter().all(|(k, v)| x.labels.get(k) == Some(*v));
    s.samples.iter().find(matches).map(|x| match &x.value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
        Value::Histogram(h) => h.iter().map(|b| b.count).fold(0.0, f64::max),
        Value::Summary(_) => f64::NAN,
    })
}

pub(crate) fn metrics_follow_a_running_program(t: Transport) {
    let h = Harness::start();
    let c = h.client(t);
    let g = Gpu::new(&c).unwrap();
    let f = g.func("mat_sum").unwrap();
    let group = [("tenant", ""), ("transport", t.name())];
    let before = scrape(&h);
    assert_eq!(value(&before, "pvgpu_sessions", &group), Some(1.0));
    let commands_before = value(&before, "pvgpu_commands_total", &group).unwrap();

    let (a, b) = matsum_inputs(1 << 16);
    assert_same(&matsum(&g, &f, &a, &b).unwrap(), &matsum_cpu(&a, &b), "MatSum");
    let _buf = c.mem_alloc(g.ctx, 3 << 20).unwrap();
    assert_eq!(code(c.ctx_get_limit(g.ctx, 77)), CuResult::INVALID_VALUE);

    let after = scrape(&h);
    let v = |name: &str, extra: &[(&str, &str)]| {
        let want: Vec<(&str, &str)> = group.iter().chain(extra).copied().collect();
        value(&after, name, &want).unwrap_or_else(|| panic!("no {name} {want:?} in the scrape"))
    };
    assert!(v("pvgpu_commands_total", &[]) >= commands_before + 6.0);
    assert_eq!(v("pvgpu_kernel_launches_total", &[]), 1.0);
    let bytes = (1u64 << 16) as f64 * 4.0;
    assert_eq!(v("pvgpu_copy_bytes_total", &[("direction", "host_to_device")]), 2.0 * bytes);
    assert_eq!(v("pvgpu_copy_bytes_total", &[("direction", "device_to_host")]), bytes);
    assert_eq!(v("pvgpu_command_errors_total", &[("code", "1")]), 1.0, "the unknown limit (CUDA_ERROR_INVALID_VALUE)");
    // One waited call in eight is timed; the +Inf bucket holds them all.
    let timed = v("pvgpu_command_duration_seconds_count", &[]);
    assert!(timed >= 1.0);
    let histogram =
        after.samples.iter().find(|s| s.metric == "pvgpu_command_duration_seconds" && s.labels.get("transport") == Some(t.name()));
    match histogram.map(|s| &s.value) {
        Some(Value::Histogram(buckets)) => {
            let inf = buckets.iter().find(|b| b.less_than.is_infinite()).expect("a +Inf bucket");
            assert_eq!(inf.count, timed, "{buckets:?}");
            assert!(buckets.windows(2).all(|w| w[0].count <= w[1].count), "cumulative: {buckets:?}");
        }
        other => panic!("no service-time histogram: {other:?}"),
    }
    let held = after.samples.iter().find(|s| s.metric == "pvgpu_session_memory_bytes").expect("the session's memory");
    assert!(matches!(held.value, Value::Gauge(b) if b >= (3 << 20) as f64), "{held:?}");

    // A session that ends keeps its counts in the totals.
    let kernels = v("pvgpu_kernel_launches_total", &[]);
    let _ = (f, g);
    drop(c);
    assert!(pvgpu_tests::eventually(Duration::from_secs(20), || value(&scrape(&h), "pvgpu_sessions", &group) == Some(0.0)));
    let ended = scrape(&h);
    assert_eq!(value(&ended, "pvgpu_kernel_launches_total", &group), Some(kernels), "counters never go back");
    assert_eq!(value(&ended, "pvgpu_sessions_started_total", &group), Some(1.0));
}
