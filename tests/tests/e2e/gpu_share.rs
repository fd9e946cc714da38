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

/// Runs one program per key for `run`, all at once; the kernels each ran.
fn contend(h: &Harness, t: Transport, keys: &[&std::path::Path], run: Duration) -> Vec<u64> {
    let clients: Vec<Client> = keys.iter().map(|k| connect(h, t, k).expect("a tenant key opens a session")).collect();
    let (start, done) = (Barrier::new(keys.len() + 1), AtomicBool::new(false));
    std::thread::scope(|s| {
        let runs: Vec<_> = clients.iter().map(|c| s.spawn(|| keep_busy(c, &start, &done))).collect();
        start.wait();
        std::thread::sleep(run);
        done.store(true, Ordering::Relaxed);
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    })
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

    let n = contend(&h, t, &[&heavy, &light], Duration::from_secs(3));
    let done = n[0] as f64 / n[1].max(1) as f64;
    eprintln!("shares 3:1: kernels {n:?}");
    assert!((2.0..=4.5).contains(&done), "shares 3:1 ran {n:?} kernels (ratio {done:.2})");
    let (th, tl) = (turn_seconds(&h, "heavy"), turn_seconds(&h, "light"));
    eprintln!("turns held: heavy {th:.2} s, light {tl:.2} s");
    assert!(tl > 0.0 && (2.0..=4.5).contains(&(th / tl)), "turns held: heavy {th:.2} s, light {tl:.2} s");
    assert_eq!(value(&scrape(&h), "pvgpu_tenant_gpu_share", &[("tenant", "heavy")]), Some(3.0));

    // An equal share, set while the backend runs, splits the time evenly.
    let _: Tenant = ctl.call_with("PUT", "/v1/tenants/light/quota", Some(&Quota { gpu_share: Some(3), ..Quota::default() })).unwrap();
    let n = contend(&h, t, &[&heavy, &light], Duration::from_secs(2));
    let done = n[0] as f64 / n[1].max(1) as f64;
    eprintln!("shares 3:3: kernels {n:?}");
    assert!((0.6..=1.6).contains(&done), "equal shares ran {n:?} kernels (ratio {done:.2})");
}

#[cfg(not(feature = "xen"))]
#[test]
fn gpu_time_follows_tenant_shares_over_tcp() {
    gpu_time_follows_tenant_shares(Transport::Tcp);
}
