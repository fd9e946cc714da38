//! GPU time shared by weight (`--gpu-share weighted`): two tenants' programs
//! keep one GPU busy at once, and each gets GPU time by its tenant's share,
//! counted in `/metrics`; a share changed while they run applies at once.

use super::tenants::{connect, issue};
use super::*;
use pvgpu_ctl::api::{NewTenant, Quota, Tenant};
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};

/// Kernels of 2 ms (the host executor's spin counts nanoseconds) launched
/// without waiting, a synchronisation every few, until `done`: how many
/// ran.
fn keep_busy(c: &Client, start: &Barrier, done: &AtomicBool) -> u64 {
    let g = Gpu::new(c).unwrap();
    let spin = g.func("spin").unwrap();
    let cycles: i64 = 2_000_000;
    start.wait();
    let mut n = 0;
    while !done.load(Ordering::Relaxed) {
        c.launch(&spin, [1, 1, 1], [1, 1, 1], 0, Stream::DEFAULT, &[arg(&cycles)]).unwrap();
        n += 1;
        if n % 4 == 0 {
            c.ctx_synchronize(g.ctx).unwrap();
        }
    }
    c.ctx_synchronize(g.ctx).unwrap();
    n
}

/// Runs one program per client for `run`, all at once; the kernels each
/// ran, and the sessions as the control socket listed them five times in
/// the run's second half, the last at its end.
fn contend(h: &Harness, clients: &[Client], run: Duration) -> (Vec<u64>, Vec<Vec<pvgpu_ctl::api::Session>>) {
    let (start, done) = (Barrier::new(clients.len() + 1), AtomicBool::new(false));
    std::thread::scope(|s| {
        let runs: Vec<_> = clients.iter().map(|c| s.spawn(|| keep_busy(c, &start, &done))).collect();
        start.wait();
        std::thread::sleep(run / 2);
        let mut listed = Vec::new();
        for _ in 0..5 {
            std::thread::sleep(run / 10);
            listed.push(h.control().unwrap().sessions().unwrap());
        }
        done.store(true, Ordering::Relaxed);
        (runs.into_iter().map(|r| r.join().unwrap()).collect(), listed)
    })
}

/// Whether session `id` was seen holding or waiting for GPU 0's turn in
/// one of the listings (between two of its calls it does neither).
fn seen_taking_turns(listed: &[Vec<pvgpu_ctl::api::Session>], id: u64) -> bool {
    listed.iter().flatten().filter(|s| s.id == id).any(|s| matches!(s.gpu_turn.as_deref(), Some("holds GPU 0" | "waits for GPU 0")))
}

/// A session per key of `keys`.
fn open(h: &Harness, t: Transport, keys: &[&std::path::Path]) -> Vec<Client> {
    keys.iter().map(|k| connect(h, t, k).expect("a tenant key opens a session")).collect()
}

fn turn_seconds(h: &Harness, tenant: &str) -> f64 {
    value(&scrape(h), "pvgpu_gpu_turn_seconds_total", &[("tenant", tenant)]).unwrap_or(0.0)
}

fn gpu_time_follows_tenant_shares(t: Transport) {
    let h = Harness::with(HarnessOptions { state_dir: true, gpu_slice: Some(Duration::from_millis(20)), ..Default::default() });
    let ctl = h.control().unwrap();
    let keys = TempDir::new("gpu-share-keys");
    for (name, share) in [("heavy", 3), ("light", 1)] {
        let quota = Quota { gpu_share: Some(share), ..Quota::default() };
        let t: Tenant = ctl.call_with("POST", "/v1/tenants", Some(&NewTenant { name: name.into(), quota, members: Vec::new() })).unwrap();
        assert_eq!(t.quota.gpu_share, Some(share));
    }
    let (_, heavy) = issue(&ctl, &keys.0, "heavy", false);
    let (_, light) = issue(&ctl, &keys.0, "light", false);
    let bad = Quota { gpu_share: Some(0), ..Quota::default() };
    assert!(ctl.call_with::<Tenant, _>("PUT", "/v1/tenants/light/quota", Some(&bad)).is_err(), "a share of 0 is refused");

    let (n, samples) = contend(&h, &open(&h, t, &[&heavy, &light]), Duration::from_secs(3));
    // While they ran, each held the turn or waited for it, and had held it
    // for a while.
    let listed = samples.last().expect("listings");
    assert_eq!(listed.len(), 2, "{listed:?}");
    for s in listed {
        assert!(seen_taking_turns(&samples, s.id), "{samples:?}");
        assert!(s.gpu_turn_seconds.is_some_and(|t| t > 0.1), "{s:?}");
    }
    let done = n[0] as f64 / n[1].max(1) as f64;
    eprintln!("shares 3:1: kernels {n:?}");
    assert!((2.0..=4.5).contains(&done), "shares 3:1 ran {n:?} kernels (ratio {done:.2})");
    let (th, tl) = (turn_seconds(&h, "heavy"), turn_seconds(&h, "light"));
    eprintln!("turns held: heavy {th:.2} s, light {tl:.2} s");
    assert!(tl > 0.0 && (2.0..=4.5).contains(&(th / tl)), "turns held: heavy {th:.2} s, light {tl:.2} s");
    assert_eq!(value(&scrape(&h), "pvgpu_tenant_gpu_share", &[("tenant", "heavy")]), Some(3.0));

    // An equal share, set while the backend runs, splits the time evenly.
    let _: Tenant = ctl.call_with("PUT", "/v1/tenants/light/quota", Some(&Quota { gpu_share: Some(3), ..Quota::default() })).unwrap();
    let (n, _) = contend(&h, &open(&h, t, &[&heavy, &light]), Duration::from_secs(2));
    let done = n[0] as f64 / n[1].max(1) as f64;
    eprintln!("shares 3:3: kernels {n:?}");
    assert!((0.6..=1.6).contains(&done), "equal shares ran {n:?} kernels (ratio {done:.2})");
}

#[cfg(not(feature = "xen"))]
#[test]
fn gpu_time_follows_tenant_shares_over_tcp() {
    gpu_time_follows_tenant_shares(Transport::Tcp);
}

/// Sessions outside every tenant weigh 1 each: two programs of one local
/// user split the device evenly, and `/metrics` counts their time under
/// no tenant.
fn sessions_without_tenants_share_evenly(t: Transport) {
    let h = Harness::with(HarnessOptions { gpu_slice: Some(Duration::from_millis(20)), ..Default::default() });
    let (n, samples) = contend(&h, &[h.client(t), h.client(t)], Duration::from_secs(2));
    eprintln!("no tenants: kernels {n:?}");
    let done = n[0] as f64 / n[1].max(1) as f64;
    assert!((0.6..=1.6).contains(&done), "two sessions of share 1 ran {n:?} kernels");
    let listed = samples.last().expect("listings");
    assert!(listed.iter().all(|s| s.gpu_turn_seconds.is_some()), "{listed:?}");
    assert!(turn_seconds(&h, "") > 0.5, "contended time counted under no tenant");
}

#[cfg(not(feature = "xen"))]
#[test]
fn sessions_without_tenants_share_evenly_over_local() {
    sessions_without_tenants_share_evenly(Transport::Local);
}
