//! `/metrics`: the backend in Prometheus' text format (prometheus-client),
//! read at each scrape from the roster (sessions and their meters,
//! [`crate::meter`]), the tenants and, on the GPU, NVML.
//!
//! Names follow Prometheus' conventions (base units, `_total` on
//! counters); the per-GPU gauges carry the labels NVIDIA's DCGM exporter
//! uses (`gpu`, `UUID`, `modelName`). Counters are labelled by `tenant`
//! (empty for sessions without one) and `transport`, which keeps their
//! number bounded by what the operator configures; only the live
//! sessions' memory carries a `session` label.

use crate::devices::Devices;
use crate::meter::{BUCKETS_NS, Direction, Reading};
use crate::roster::{Group, Roster};
use crate::tenants::{Tenants, peer_of};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};
use std::collections::HashMap;
use std::fmt::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// One GPU's gauges at a scrape.
pub use pvgpu_ctl::api::Gpu as GpuReading;

/// Where per-GPU gauges come from (NVML on the GPU host).
pub trait GpuSource: Send + Sync {
    /// Every GPU's gauges now.
    fn read(&self) -> Vec<GpuReading>;
}

/// NVML's reading of this backend's GPU `index`: the board with the UUID
/// the executor gives that index (`executor`), so that a backend run with
/// `CUDA_VISIBLE_DEVICES` shows its own GPUs; where none has it (or the
/// executor gives none), NVML's board of that index.
pub(crate) fn board<'a>(gpus: &'a [GpuReading], index: usize, executor: Option<&[u8; 16]>) -> Option<&'a GpuReading> {
    let named = executor.map(nvml_uuid);
    named.and_then(|u| gpus.iter().find(|g| g.uuid.eq_ignore_ascii_case(&u))).or_else(|| gpus.iter().find(|g| g.index as usize == index))
}

/// A GPU's UUID as NVML writes it (`GPU-` and its 16 bytes in hex, grouped
/// 8-4-4-4-12), from the bytes `cuDeviceGetUuid` gives.
pub(crate) fn nvml_uuid(bytes: &[u8; 16]) -> String {
    let h = pvgpu_ctl::snapshot::hex(bytes);
    format!("GPU-{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

/// What `/metrics` reads.
#[derive(Clone)]
pub struct Metrics {
    roster: Arc<Roster>,
    tenants: Option<Arc<Tenants>>,
    ledgers: Arc<crate::ledger::Ledgers>,
    gpus: Option<Arc<dyn GpuSource>>,
    devices: Arc<Devices>,
    /// Each GPU's UUID as the executor gives it, by the backend's index.
    executor_uuids: Arc<[[u8; 16]]>,
    events: Arc<Events>,
    arbiter: Option<Arc<crate::share::Arbiter>>,
    copies: Option<Arc<crate::peer_copy::CopyCounts>>,
}

/// What the control API did to sessions, counted for `/metrics`.
#[derive(Debug, Default)]
pub struct Events {
    /// Checkpoints written.
    pub checkpoints_written: AtomicU64,
    /// Checkpoints that failed or timed out.
    pub checkpoints_failed: AtomicU64,
    /// Bytes of device state written by checkpoints.
    pub checkpoint_bytes: AtomicU64,
    /// Snapshots accepted for restore.
    pub restores_accepted: AtomicU64,
    /// Snapshots refused for restore.
    pub restores_refused: AtomicU64,
    /// Sessions moved to another backend (their moves recorded here).
    pub migrations_out: AtomicU64,
    /// Migrations this backend was asked to make that failed.
    pub migrations_failed: AtomicU64,
}

impl Events {
    /// Counts one of `counter`.
    pub fn count(counter: &AtomicU64, n: u64) {
        // Relaxed: a count read at the next scrape, ordered with nothing.
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

impl Metrics {
    /// Metrics of the sessions on `roster`, the tenants and the GPUs.
    pub fn new(
        roster: Arc<Roster>,
        tenants: Option<Arc<Tenants>>,
        ledgers: Arc<crate::ledger::Ledgers>,
        gpus: Option<Arc<dyn GpuSource>>,
        devices: Arc<Devices>,
    ) -> Metrics {
        Metrics {
            roster,
            tenants,
            ledgers,
            gpus,
            devices,
            executor_uuids: Arc::new([]),
            events: Arc::default(),
            arbiter: None,
            copies: None,
        }
    }

    /// Labels the GPU gauges by the backend's index of each GPU (as the
    /// API, drains and sessions number them), the executor's UUID of each
    /// found among NVML's boards.
    pub fn with_executor_uuids(mut self, uuids: Vec<[u8; 16]>) -> Metrics {
        self.executor_uuids = uuids.into();
        self
    }

    /// Reports the connections of copies between backends.
    pub fn with_copies(mut self, copies: Arc<crate::peer_copy::CopyCounts>) -> Metrics {
        self.copies = Some(copies);
        self
    }

    /// Reports the GPU time `arbiter` granted (`--gpu-share weighted`).
    pub fn with_arbiter(mut self, arbiter: Option<Arc<crate::share::Arbiter>>) -> Metrics {
        self.arbiter = arbiter;
        self
    }

    /// The control API's counts.
    pub fn events(&self) -> &Events {
        &self.events
    }

    /// The backend's GPUs as admission hands them out.
    pub fn devices(&self) -> &Arc<Devices> {
        &self.devices
    }

    /// Every GPU's gauges now (none without NVML).
    pub fn gpus(&self) -> Vec<GpuReading> {
        self.gpus.as_ref().map(|g| g.read()).unwrap_or_default()
    }

    /// What every session has done since the backend started.
    pub fn summary(&self) -> pvgpu_ctl::api::Summary {
        let (totals, _, live) = self.roster.totals();
        let mut all = Reading::default();
        for r in totals.values() {
            all.add(r);
        }
        let at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        pvgpu_ctl::api::Summary {
            at_unix_seconds: at,
            sessions: live.len(),
            commands: all.commands,
            replies: all.replies,
            timed_replies: all.timed,
            service_seconds: all.latency_sum_ns as f64 / 1e9,
            kernels: all.kernels,
            copy_bytes: all.bytes,
        }
    }

    /// The text a scrape gets (OpenMetrics, which Prometheus reads).
    pub fn render(&self) -> Result<String, Error> {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self.clone()));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry)?;
        Ok(out)
    }
}

fn group_labels((tenant, transport): &Group) -> Labels {
    vec![("tenant", tenant.clone().unwrap_or_default()), ("transport", transport.name().to_string())]
}

/// A sample's labels.
type Labels = Vec<(&'static str, String)>;

/// Encodes a family of `kind`: one sample per label set (none: left out).
fn family<M: EncodeMetric>(
    enc: &mut DescriptorEncoder,
    (name, help, unit): (&str, &str, Option<&Unit>),
    kind: MetricType,
    samples: impl ExactSizeIterator<Item = (Labels, M)>,
) -> Result<(), Error> {
    if samples.len() == 0 {
        return Ok(());
    }
    let mut family = enc.encode_descriptor(name, help, unit, kind)?;
    for (labels, m) in samples {
        m.encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// Encodes a counter family.
fn counters(enc: &mut DescriptorEncoder, name: &str, help: &str, unit: Option<&Unit>, rows: &[(Labels, u64)]) -> Result<(), Error> {
    family(enc, (name, help, unit), MetricType::Counter, rows.iter().map(|(l, v)| (l.clone(), ConstCounter::new(*v))))
}

/// Encodes a gauge family.
fn gauges(enc: &mut DescriptorEncoder, name: &str, help: &str, unit: Option<&Unit>, rows: &[(Labels, f64)]) -> Result<(), Error> {
    family(enc, (name, help, unit), MetricType::Gauge, rows.iter().map(|(l, v)| (l.clone(), ConstGauge::new(*v))))
}

impl Collector for Metrics {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), Error> {
        let (totals, started, live) = self.roster.totals();
        let mut groups: Vec<&Group> = totals.keys().collect();
        groups.sort_by(|a, b| (&a.0, a.1.name()).cmp(&(&b.0, b.1.name())));
        let each = |f: &dyn Fn(&Reading) -> u64| -> Vec<_> { groups.iter().map(|g| (group_labels(g), f(&totals[*g]))).collect() };

        let mut by_group: HashMap<&Group, usize> = HashMap::new();
        for s in &live {
            *by_group.entry(&s.group).or_default() += 1;
        }
        let mut sessions: Vec<_> = started.keys().map(|g| (group_labels(g), by_group.get(g).copied().unwrap_or(0) as f64)).collect();
        sessions.sort_by(|a, b| a.0.cmp(&b.0));
        gauges(&mut enc, "pvgpu_sessions", "Sessions being served.", None, &sessions)?;
        let mut admitted: Vec<_> = started.iter().map(|(g, n)| (group_labels(g), *n)).collect();
        admitted.sort_by(|a, b| a.0.cmp(&b.0));
        counters(&mut enc, "pvgpu_sessions_started", "Sessions admitted since the backend started.", None, &admitted)?;
        let memory: Vec<_> = live
            .iter()
            .map(|s| {
                let mut l = group_labels(&s.group);
                l.insert(0, ("session", s.id.to_string()));
                (l, s.memory_bytes as f64)
            })
            .collect();
        gauges(&mut enc, "pvgpu_session_memory", "Device memory a live session holds.", Some(&Unit::Bytes), &memory)?;

        counters(&mut enc, "pvgpu_commands", "Commands received.", None, &each(&|r| r.commands))?;
        counters(&mut enc, "pvgpu_kernel_launches", "Kernels launched.", None, &each(&|r| r.kernels))?;
        counters(&mut enc, "pvgpu_graph_launches", "CUDA graphs launched.", None, &each(&|r| r.graph_launches))?;
        let mut copied = Vec::new();
        for g in &groups {
            for d in Direction::ALL {
                let mut l = group_labels(g);
                l.push(("direction", d.label().into()));
                copied.push((l, totals[*g].bytes[d as usize]));
            }
        }
        counters(&mut enc, "pvgpu_copy", "Bytes copied by copy commands, by direction.", Some(&Unit::Bytes), &copied)?;
        let mut errors = Vec::new();
        for g in &groups {
            let mut codes = totals[*g].codes.clone();
            codes.sort();
            for (code, n) in codes {
                let mut l = group_labels(g);
                l.push(("code", code.map_or("other".into(), |c| c.to_string())));
                errors.push((l, n));
            }
        }
        counters(&mut enc, "pvgpu_command_errors", "Waited calls that failed, by CUDA error code.", None, &errors)?;
        self.latency(&mut enc, &groups, &totals)?;
        self.tenant_gauges(&mut enc)?;
        self.turn_counters(&mut enc)?;
        self.event_counters(&mut enc)?;
        self.gpu_gauges(&mut enc)
    }
}

impl Metrics {
    fn latency(&self, enc: &mut DescriptorEncoder, groups: &[&Group], totals: &HashMap<Group, Reading>) -> Result<(), Error> {
        if groups.is_empty() {
            return Ok(());
        }
        let mut family = enc.encode_descriptor(
            "pvgpu_command_duration",
            "Time from a waited call's arrival to its reply, in the backend (one waited call in eight is timed).",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for g in groups {
            let r = &totals[*g];
            // Per bucket, not cumulative: the encoder adds them up, and
            // writes f64::MAX as +Inf.
            let mut buckets: Vec<(f64, u64)> = BUCKETS_NS.iter().zip(r.buckets).map(|(b, n)| (*b as f64 / 1e9, n)).collect();
            buckets.push((f64::MAX, r.buckets[BUCKETS_NS.len()]));
            let labels = group_labels(g);
            family.encode_family(&labels)?.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                r.latency_sum_ns as f64 / 1e9,
                r.timed,
                &buckets,
                None,
            )?;
        }
        Ok(())
    }

    fn tenant_gauges(&self, enc: &mut DescriptorEncoder) -> Result<(), Error> {
        let Some(tenants) = &self.tenants else { return Ok(()) };
        let (mut held, mut quota) = (Vec::new(), Vec::new());
        for t in tenants.list() {
            let total = self.ledgers.total(&peer_of(&t.name)).map_or(0, |(total, _)| total);
            held.push((vec![("tenant", t.name.clone())], total as f64));
            if let Some(q) = t.quota.memory_bytes {
                quota.push((vec![("tenant", t.name.clone())], q as f64));
            }
        }
        gauges(enc, "pvgpu_tenant_memory", "Device memory a tenant's sessions hold together.", Some(&Unit::Bytes), &held)?;
        gauges(enc, "pvgpu_tenant_memory_quota", "A tenant's device-memory quota.", Some(&Unit::Bytes), &quota)
    }

    fn turn_counters(&self, enc: &mut DescriptorEncoder) -> Result<(), Error> {
        let Some(arbiter) = &self.arbiter else { return Ok(()) };
        let rows: Vec<_> = arbiter
            .held()
            .into_iter()
            .map(|(t, d)| (vec![("tenant", t.unwrap_or_default())], ConstCounter::new(d.as_secs_f64())))
            .collect();
        family(
            enc,
            ("pvgpu_gpu_turn", "GPU time held in turns under --gpu-share weighted, by tenant.", Some(&Unit::Seconds)),
            MetricType::Counter,
            rows.into_iter(),
        )?;
        let Some(tenants) = &self.tenants else { return Ok(()) };
        let shares: Vec<_> =
            tenants.list().into_iter().map(|t| (vec![("tenant", t.name)], f64::from(t.quota.gpu_share.unwrap_or(1)))).collect();
        gauges(enc, "pvgpu_tenant_gpu_share", "A tenant's weight in GPU time.", None, &shares)
    }

    fn event_counters(&self, enc: &mut DescriptorEncoder) -> Result<(), Error> {
        let e = &self.events;
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let outcome = |o: &str| vec![("outcome", o.to_string())];
        counters(
            enc,
            "pvgpu_checkpoints",
            "Checkpoints ordered through the control API, by outcome.",
            None,
            &[(outcome("written"), n(&e.checkpoints_written)), (outcome("failed"), n(&e.checkpoints_failed))],
        )?;
        counters(
            enc,
            "pvgpu_checkpoint",
            "Device state written by checkpoints.",
            Some(&Unit::Bytes),
            &[(Vec::new(), n(&e.checkpoint_bytes))],
        )?;
        counters(
            enc,
            "pvgpu_restores",
            "Snapshots handed to the backend for restore, by outcome.",
            None,
            &[(outcome("accepted"), n(&e.restores_accepted)), (outcome("refused"), n(&e.restores_refused))],
        )?;
        counters(
            enc,
            "pvgpu_migrations",
            "Sessions moved from this backend to another, by outcome (failed: asked of this backend and not done).",
            None,
            &[(outcome("moved"), n(&e.migrations_out)), (outcome("failed"), n(&e.migrations_failed))],
        )?;
        if let Some(c) = &self.copies {
            let side = |s: &str, o: &str| vec![("side", s.to_string()), ("outcome", o.to_string())];
            counters(
                enc,
                "pvgpu_peer_copy_connections",
                "Connections of copies between backends: in (from another backend, by whether its ticket was held) and out (to another backend, by outcome).",
                None,
                &[
                    (side("in", "accepted"), n(&c.accepted)),
                    (side("in", "refused"), n(&c.refused)),
                    (side("out", "made"), n(&c.made)),
                    (side("out", "not_a_peer"), n(&c.not_a_peer)),
                    (side("out", "failed"), n(&c.failed)),
                ],
            )?;
        }
        let drained: Vec<_> =
            (0..self.devices.count()).map(|g| (vec![("gpu", g.to_string())], if self.devices.is_drained(g) { 1.0 } else { 0.0 })).collect();
        gauges(enc, "pvgpu_gpu_drained", "1 while new sessions are not given the GPU.", None, &drained)
    }

    fn gpu_gauges(&self, enc: &mut DescriptorEncoder) -> Result<(), Error> {
        let Some(src) = &self.gpus else { return Ok(()) };
        let boards = src.read();
        // The backend's GPUs by its own index, as `pvgpu_gpu_drained` and
        // the API number them (NVML numbers every board of the host).
        let gpus: Vec<(usize, &GpuReading)> =
            (0..self.devices.count()).filter_map(|i| Some((i, board(&boards, i, self.executor_uuids.get(i))?))).collect();
        let labels = |i: usize, g: &GpuReading| vec![("gpu", i.to_string()), ("UUID", g.uuid.clone()), ("modelName", g.name.clone())];
        let rows =
            |f: &dyn Fn(&GpuReading) -> Option<f64>| -> Vec<_> { gpus.iter().filter_map(|&(i, g)| Some((labels(i, g), f(g)?))).collect() };
        gauges(
            enc,
            "pvgpu_gpu_utilization",
            "Fraction of the last sample period a kernel ran.",
            Some(&Unit::Other("ratio".into())),
            &rows(&|g| g.utilization_ratio),
        )?;
        gauges(
            enc,
            "pvgpu_gpu_memory_used",
            "Device memory in use.",
            Some(&Unit::Bytes),
            &rows(&|g| g.memory_used_bytes.map(|b| b as f64)),
        )?;
        gauges(
            enc,
            "pvgpu_gpu_memory_total",
            "Device memory in all.",
            Some(&Unit::Bytes),
            &rows(&|g| g.memory_total_bytes.map(|b| b as f64)),
        )?;
        gauges(enc, "pvgpu_gpu_temperature", "GPU temperature.", Some(&Unit::Celsius), &rows(&|g| g.temperature_celsius))?;
        gauges(enc, "pvgpu_gpu_power", "Power drawn.", Some(&Unit::Other("watts".into())), &rows(&|g| g.power_watts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Boards(Vec<GpuReading>);

    impl GpuSource for Boards {
        fn read(&self) -> Vec<GpuReading> {
            self.0.clone()
        }
    }

    fn reading(index: u32, uuid: &str, used: u64) -> GpuReading {
        GpuReading { index, uuid: uuid.into(), name: "NVIDIA H200".into(), memory_used_bytes: Some(used), ..Default::default() }
    }

    #[test]
    fn gpu_gauges_carry_the_backends_own_index() {
        // A backend run with CUDA_VISIBLE_DEVICES=1 on a host of two GPUs:
        // its GPU 0 is NVML's board 1.
        let uuid = [0xd0, 0x94, 0xf2, 0xeb, 0x45, 0x47, 0xd5, 0xf8, 0x43, 0x34, 0xd3, 0x99, 0x79, 0x7f, 0xce, 0xf9];
        let theirs = "GPU-00000000-0000-0000-0000-000000000000";
        let ours = "GPU-d094f2eb-4547-d5f8-4334-d399797fcef9";
        let boards = Boards(vec![reading(0, theirs, 111), reading(1, ours, 222)]);
        let devices = Arc::new(Devices::new(1, None).unwrap());
        devices.set_drained(0, true).unwrap();
        let m = Metrics::new(Arc::default(), None, Arc::new(crate::ledger::Ledgers::new(0, 1)), Some(Arc::new(boards)), devices)
            .with_executor_uuids(vec![uuid]);
        let text = m.render().unwrap();
        let used: Vec<&str> = text.lines().filter(|l| l.starts_with("pvgpu_gpu_memory_used")).collect();
        assert_eq!(used.len(), 1, "only the backend's GPU: {text}");
        assert!(used[0].contains("gpu=\"0\"") && used[0].contains(ours) && used[0].ends_with(" 222.0"), "{}", used[0]);
        assert!(text.contains("pvgpu_gpu_drained{gpu=\"0\"} 1"), "the same index as the drain: {text}");
    }
}
