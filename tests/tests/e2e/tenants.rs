//! Tenants as an operator runs them (`--state-dir`, `pvgpu-ctl tenant`
//! and `key`): a TCP or TLS program opening with a tenant key counts as
//! its tenant, under the tenant's memory and session quotas across all its
//! sessions; a revoked key's sessions end and it opens nothing more; all of
//! it survives a backend restart.

use super::*;
use pvgpu_ctl::api::{IssueKey, IssuedKey, NewTenant, Quota, Revoked, Tenant};
use pvgpu_ctl::client::{Control, CtlError};

const MIB: u64 = 1 << 20;

/// Issues a key to `tenant` and writes its file where the test keeps it.
fn issue(ctl: &Control, dir: &std::path::Path, tenant: &str, rotate: bool) -> (IssuedKey, std::path::PathBuf) {
    let k: IssuedKey = ctl.call_with("POST", &format!("/v1/tenants/{tenant}/keys"), Some(&IssueKey { rotate })).unwrap();
    let path = dir.join(format!("{}.key", k.id));
    pvgpu_ring::tcp_auth::write_key_file(&path, &k.key_file).unwrap();
    (k, path)
}

fn connect(h: &Harness, t: Transport, key: &std::path::Path) -> Result<Client, Error> {
    let opts = pvgpu_frontend::Options { tcp_key: Some(key.to_path_buf()), ..h.options() };
    Client::connect(&h.addr(t), &opts)
}

fn open(h: &Harness, t: Transport, key: &std::path::Path) -> (Client, pvgpu_frontend::Context) {
    let c = connect(h, t, key).expect("a tenant key opens a session");
    c.init().unwrap();
    let ctx = c.primary_ctx_retain(0).unwrap();
    (c, ctx)
}

fn refused(r: Result<Client, Error>) -> String {
    match r {
        Ok(_) => panic!("a connection that should have been refused was served"),
        Err(e) => pvgpu_ring::report::Chain(&e).to_string(),
    }
}

fn tenant_keys(t: Transport) {
    let mut h = Harness::with(HarnessOptions { state_dir: true, ..Default::default() });
    let keys = TempDir::new("tenant-keys");
    let ctl = h.control().expect("a backend of the test's own has a control socket");
    let quota = Quota { memory_bytes: Some(64 * MIB), max_sessions: Some(2) };
    let added: Tenant = ctl.call_with("POST", "/v1/tenants", Some(&NewTenant { name: "alice".into(), quota })).unwrap();
    assert_eq!((added.quota, added.live_keys, added.sessions), (quota, 0, 0));
    let (key, key_file) = issue(&ctl, &keys.0, "alice", false);

    // Two sessions of alice share her 64 MiB, from any address.
    let (a, actx) = open(&h, t, &key_file);
    let (b, bctx) = open(&h, t, &key_file);
    let big = a.mem_alloc(actx, 48 * MIB).unwrap();
    assert_eq!(code(b.mem_alloc(bctx, 32 * MIB)), CuResult::OUT_OF_MEMORY, "past the tenant's quota across sessions");
    b.mem_alloc(bctx, 8 * MIB).unwrap();
    assert!(refused(connect(&h, t, &key_file)).contains("as many sessions"), "a third session of a two-session tenant");
    // The shared key still opens, outside every tenant.
    let other = h.client(t);
    other.init().unwrap();
    let octx = other.primary_ctx_retain(0).unwrap();
    other.mem_alloc(octx, 32 * MIB).unwrap();

    let live = ctl.sessions().unwrap();
    let mine: Vec<_> = live.iter().filter(|s| s.tenant.as_deref() == Some("alice")).collect();
    assert_eq!(mine.len(), 2, "{live:?}");
    assert!(mine.iter().all(|s| s.key.as_deref() == Some(key.id.as_str()) && s.transport == t.name()));
    let now: Tenant = ctl.call("GET", "/v1/tenants/alice").unwrap();
    assert_eq!(now.sessions, 2);
    assert!(now.memory_bytes >= 56 * MIB, "{now:?}");

    // A lower quota holds the live sessions from their next allocation.
    let lower = Quota { memory_bytes: Some(32 * MIB), ..quota };
    let _: Tenant = ctl.call_with("PUT", "/v1/tenants/alice/quota", Some(&lower)).unwrap();
    assert_eq!(code(a.mem_alloc(actx, MIB)), CuResult::OUT_OF_MEMORY);
    a.mem_free(big).unwrap();
    a.mem_alloc(actx, 16 * MIB).unwrap();

    // Revoking the key ends its sessions and refuses it from now on.
    let r: Revoked = ctl.call("DELETE", "/v1/tenants/alice/keys").unwrap();
    assert_eq!(r.keys, std::slice::from_ref(&key.id));
    assert_eq!(r.sessions_ended.len(), 2, "{r:?}");
    for c in [&a, &b] {
        let ended =
            pvgpu_tests::eventually(Duration::from_secs(20), || c.nop().err().map(|e| e.status()) == Some(CuResult::DEVICE_UNAVAILABLE));
        assert!(ended, "a session of a revoked key goes on");
    }
    assert!(refused(connect(&h, t, &key_file)).contains("refused our key"));
    other.ctx_synchronize(octx).unwrap();

    // The state outlives the backend.
    let (fresh, fresh_file) = issue(&ctl, &keys.0, "alice", false);
    drop((a, b, other));
    h.restart();
    let ctl = h.control().unwrap();
    let after: Tenant = ctl.call("GET", "/v1/tenants/alice").unwrap();
    assert_eq!((after.quota, after.live_keys), (lower, 1));
    assert!(refused(connect(&h, t, &key_file)).contains("refused our key"), "a revoked key stays revoked");
    let (c, ctx) = open(&h, t, &fresh_file);
    assert_eq!(code(c.mem_alloc(ctx, 40 * MIB)), CuResult::OUT_OF_MEMORY, "the lowered quota outlives the backend");
    c.mem_alloc(ctx, 16 * MIB).unwrap();
    assert_eq!(ctl.session(ctl.sessions().unwrap()[0].id).unwrap().key.as_deref(), Some(fresh.id.as_str()));

    // Rotation: the new key opens, the old one no longer does, and the
    // session opened with the old one goes on.
    let (_, rotated_file) = issue(&ctl, &keys.0, "alice", true);
    assert!(refused(connect(&h, t, &fresh_file)).contains("refused our key"));
    c.ctx_synchronize(ctx).unwrap();
    let (d, dctx) = open(&h, t, &rotated_file);
    d.mem_alloc(dctx, MIB).unwrap();

    // Removing the tenant ends all its sessions.
    let r: Revoked = ctl.call("DELETE", "/v1/tenants/alice").unwrap();
    assert_eq!(r.sessions_ended.len(), 2, "the rotated-out key's session too: {r:?}");
    match ctl.call::<Tenant>("GET", "/v1/tenants/alice") {
        Err(CtlError::Refused { status: 404, .. }) => {}
        other => panic!("a removed tenant: {other:?}"),
    }
}

#[cfg(not(feature = "xen"))]
#[test]
fn tenant_keys_over_tcp() {
    tenant_keys(Transport::Tcp);
}

#[cfg(not(feature = "xen"))]
#[test]
fn tenant_keys_over_tls() {
    tenant_keys(Transport::Tls);
}

/// A tenant's session checkpointed, its backend restarted and the snapshot
/// restored comes back under its tenant: the snapshot belongs to the
/// tenant (not the address), and the program goes on with its bytes.
#[cfg(not(feature = "xen"))]
#[test]
fn a_tenant_session_comes_back_under_its_tenant() {
    use pvgpu_ctl::api::{CheckpointRequest, RestoreRequest};
    let mut h = Harness::with(HarnessOptions { state_dir: true, ..Default::default() });
    if h.exec == ExecKind::Cuda {
        // On the GPU a session cannot leave its backend yet (checkpoint.rs
        // checks the refusal).
        return;
    }
    let keys = TempDir::new("tenant-resume");
    let ctl = h.control().unwrap();
    let _: Tenant = ctl.call_with("POST", "/v1/tenants", Some(&NewTenant { name: "bob".into(), quota: Quota::default() })).unwrap();
    let (_, key_file) = issue(&ctl, &keys.0, "bob", false);
    let (c, ctx) = open(&h, Transport::Tcp, &key_file);
    let buf = c.mem_alloc(ctx, 4096).unwrap();
    c.memcpy_htod(buf, &[5u8; 4096]).unwrap();
    let id = ctl.sessions().unwrap()[0].id;
    let file = keys.0.join("bob.pvgpu");
    let req = CheckpointRequest { file: file.display().to_string(), leave_running: false, timeout_seconds: Some(30) };
    std::thread::scope(|s| {
        let taken = s.spawn(|| ctl.checkpoint(id, &req));
        let deadline = Instant::now() + Duration::from_secs(30);
        while !c.detached() {
            assert!(Instant::now() < deadline, "the session was not checkpointed within 30 s");
            c.ctx_synchronize(ctx).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        taken.join().unwrap().expect("the checkpoint");
    });
    h.restart();
    let ctl = h.control().unwrap();
    let restored = ctl.restore(&RestoreRequest { file: file.display().to_string() }).unwrap();
    assert_eq!(restored.peer, "tenant:bob", "the snapshot is the tenant's");
    let mut back = vec![0u8; 4096];
    c.memcpy_dtoh(&mut back, buf).unwrap();
    assert_eq!(back, [5u8; 4096]);
    let live = ctl.sessions().unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].tenant.as_deref(), Some("bob"), "{live:?}");
}

/// Interprocess handles belong to the tenant: two programs with the
/// tenant's keys (two keys, so two sessions of it) share memory and events
/// by handle; a program of another tenant, from the same address, cannot
/// open them.
#[cfg(not(feature = "xen"))]
#[test]
fn interprocess_handles_stay_in_their_tenant() {
    let h = Harness::with(HarnessOptions { state_dir: true, ..Default::default() });
    let keys = TempDir::new("tenant-ipc");
    let ctl = h.control().unwrap();
    for name in ["carol", "dave"] {
        let _: Tenant = ctl.call_with("POST", "/v1/tenants", Some(&NewTenant { name: name.into(), quota: Quota::default() })).unwrap();
    }
    let (_, carol1) = issue(&ctl, &keys.0, "carol", false);
    let (_, carol2) = issue(&ctl, &keys.0, "carol", false);
    let (_, dave) = issue(&ctl, &keys.0, "dave", false);
    let (a, actx) = open(&h, Transport::Tcp, &carol1);
    let (b, bctx) = open(&h, Transport::Tcp, &carol2);
    let (d, dctx) = open(&h, Transport::Tcp, &dave);
    let mem = a.mem_alloc(actx, 4096).unwrap();
    a.memcpy_htod(mem, &[9u8; 4096]).unwrap();
    let handle = a.ipc_get_mem_handle(actx, mem).unwrap();
    let event = a.event_create(actx, 0x2 | 0x4).unwrap(); // disable timing, interprocess
    let event_handle = a.ipc_get_event_handle(event).unwrap();
    assert_eq!(code(d.ipc_open_mem_handle(dctx, &handle, 1)), CuResult::INVALID_VALUE, "another tenant's memory");
    assert_eq!(code(d.ipc_open_event_handle(dctx, &event_handle)), CuResult::INVALID_VALUE, "another tenant's event");
    let (p, _) = b.ipc_open_mem_handle(bctx, &handle, 1).unwrap();
    let mut back = vec![0u8; 4096];
    b.memcpy_dtoh(&mut back, p).unwrap();
    assert_eq!(back, [9u8; 4096], "the tenant's other program reads it");
    b.ipc_close_mem_handle(bctx, p).unwrap();
    b.ipc_open_event_handle(bctx, &event_handle).unwrap();
}
