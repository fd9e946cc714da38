//! Tenants as an operator runs them (`--state-dir`, `pvgpu-ctl tenant`
//! and `key`): a TCP or TLS program opening with a tenant key counts as
//! its tenant, under the tenant's memory and session quotas across all its
//! sessions; a revoked key's sessions end and it opens nothing more; all of
//! it survives a backend restart. A local user may be a tenant's member;
//! a tenant's sessions see only its GPUs, less those drained.

use super::*;
use pvgpu_ctl::api::{IssueKey, IssuedKey, NewTenant, Quota, Revoked, Tenant};
use pvgpu_ctl::client::{Control, CtlError};

const MIB: u64 = 1 << 20;

/// Issues a key to `tenant` and writes its file where the test keeps it.
pub(super) fn issue(ctl: &Control, dir: &std::path::Path, tenant: &str, rotate: bool) -> (IssuedKey, std::path::PathBuf) {
    let k: IssuedKey = ctl.call_with("POST", &format!("/v1/tenants/{tenant}/keys"), Some(&IssueKey { rotate })).unwrap();
    let path = dir.join(format!("{}.key", k.id));
    pvgpu_ring::tcp_auth::write_key_file(&path, &k.key_file).unwrap();
    (k, path)
}

pub(super) fn connect(h: &Harness, t: Transport, key: &std::path::Path) -> Result<Client, Error> {
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
    let quota = Quota { memory_bytes: Some(64 * MIB), max_sessions: Some(2), gpus: None, gpu_share: None };
    let req = NewTenant { name: "alice".into(), quota: quota.clone(), members: Vec::new() };
    let added: Tenant = ctl.call_with("POST", "/v1/tenants", Some(&req)).unwrap();
    assert_eq!((added.quota, added.live_keys, added.sessions), (quota.clone(), 0, 0));
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
    assert_eq!((&after.quota, after.live_keys), (&lower, 1));
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
    let _: Tenant = ctl
        .call_with("POST", "/v1/tenants", Some(&NewTenant { name: "bob".into(), quota: Quota::default(), members: Vec::new() }))
        .unwrap();
    let (_, key_file) = issue(&ctl, &keys.0, "bob", false);
    let (c, ctx) = open(&h, Transport::Tcp, &key_file);
    let buf = c.mem_alloc(ctx, 4096).unwrap();
    c.memcpy_htod(buf, &[5u8; 4096]).unwrap();
    let id = ctl.sessions().unwrap()[0].id;
    let file = keys.0.join("bob.pvgpu");
    let req = CheckpointRequest { file: file.display().to_string(), leave_running: false, timeout_seconds: Some(30), ..Default::default() };
    std::thread::scope(|s| {
        let taken = s.spawn(|| ctl.checkpoint(id, &req));
        // Until the program is detached, or the checkpoint has failed (its
        // error then says why, not a timeout).
        let deadline = Instant::now() + Duration::from_secs(30);
        while !c.detached() && !taken.is_finished() {
            assert!(Instant::now() < deadline, "the session was not checkpointed within 30 s");
            c.ctx_synchronize(ctx).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        taken.join().unwrap().expect("the checkpoint");
        assert!(c.detached(), "checkpointed, but the program was not told it left");
    });
    h.restart();
    let ctl = h.control().unwrap();
    let restored = ctl.restore(&RestoreRequest { file: file.display().to_string(), handed_from: None }).unwrap();
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
        let _: Tenant = ctl
            .call_with("POST", "/v1/tenants", Some(&NewTenant { name: name.into(), quota: Quota::default(), members: Vec::new() }))
            .unwrap();
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

/// A local user made a member of a tenant: its sessions are the tenant's,
/// under its memory quota, and see only the tenant's GPUs in the tenant's
/// order; a drained GPU is not given to new sessions, the drain outlives
/// the backend, and resuming gives it back. On the host executor the
/// backend has three devices; on one GPU the tenant's list is that GPU.
#[cfg(not(feature = "xen"))]
#[test]
fn member_sessions_see_their_tenants_gpus_less_the_drained_ones() {
    use pvgpu_ctl::api::Gpu;
    let mut h = Harness::with(HarnessOptions { state_dir: true, host_devices: Some(3), ..Default::default() });
    let ctl = h.control().unwrap();
    let gpus: Vec<Gpu> = ctl.call("GET", "/v1/devices").unwrap();
    let n = gpus.len() as u32;
    assert!(n >= 1, "the backend lists its GPUs: {gpus:?}");
    let list: Vec<u32> = if n >= 3 { vec![2, 0] } else { vec![0] };
    let me = format!("uid:{}", nix::unistd::getuid());
    let quota = Quota { memory_bytes: Some(64 * MIB), max_sessions: None, gpus: Some(list.clone()), gpu_share: None };
    let req = NewTenant { name: "lab".into(), quota, members: vec![me.clone()] };
    let t: Tenant = ctl.call_with("POST", "/v1/tenants", Some(&req)).unwrap();
    assert_eq!(t.members, std::slice::from_ref(&me));

    // Whose sessions, and which GPUs they see: a session of no tenant (the
    // harness's shared TCP key) sees every GPU in the backend's order.
    let sees = |c: &Client| -> Vec<[u8; 16]> { (0..c.device_count().unwrap()).map(|d| c.device_uuid(d).unwrap()).collect() };
    let every = {
        let free = h.client(Transport::Tcp);
        free.init().unwrap();
        sees(&free)
    };
    let uuid_of = |g: &u32| every[*g as usize];
    let c = h.client(Transport::Local);
    c.init().unwrap();
    assert_eq!(sees(&c), list.iter().map(uuid_of).collect::<Vec<_>>(), "the tenant's GPUs, in its order");
    assert_eq!(code(c.device_get(list.len() as i32)), CuResult::INVALID_DEVICE, "a GPU past the tenant's list");
    let ctx = c.primary_ctx_retain(c.device_get(0).unwrap()).unwrap();
    assert_eq!(code(c.mem_alloc(ctx, 80 * MIB)), CuResult::OUT_OF_MEMORY, "a member's session is under its tenant's quota");
    c.mem_alloc(ctx, MIB).unwrap();
    let live = ctl.sessions().unwrap();
    let mine = live.iter().find(|s| s.transport == "local").expect("the member's session");
    assert_eq!((mine.tenant.as_deref(), mine.key.as_deref()), (Some("lab"), None), "{live:?}");
    assert_eq!(mine.devices, [list[0] as usize], "the session's context is on the backend's GPU {}", list[0]);

    // Draining the tenant's first GPU: the live session keeps it, new ones
    // are not given it.
    let g: Gpu = ctl.call("POST", &format!("/v1/devices/{}/drain", list[0])).unwrap();
    assert!(g.drained);
    assert_eq!(g.sessions, [mine.id]);
    c.mem_alloc(ctx, MIB).unwrap();
    let d = h.client(Transport::Local);
    d.init().unwrap();
    let rest: Vec<_> = list[1..].iter().map(uuid_of).collect();
    assert_eq!(sees(&d), rest, "a new session is not given the drained GPU");
    drop((c, d));

    // The drain outlives the backend; resuming gives the GPU back.
    h.restart();
    let ctl = h.control().unwrap();
    let gpus: Vec<Gpu> = ctl.call("GET", "/v1/devices").unwrap();
    assert!(gpus[list[0] as usize].drained, "{gpus:?}");
    let metrics = String::from_utf8(ctl.request("GET", "/metrics", b"").unwrap().1).unwrap();
    assert!(metrics.contains(&format!("pvgpu_gpu_drained{{gpu=\"{}\"}} 1", list[0])), "{metrics}");
    let _: Gpu = ctl.call("DELETE", &format!("/v1/devices/{}/drain", list[0])).unwrap();
    let e = h.client(Transport::Local);
    e.init().unwrap();
    assert_eq!(e.device_count().unwrap(), list.len() as i32);
    // Leaving the tenant: the user's next session is its own again.
    let t: Tenant = ctl.call("DELETE", &format!("/v1/tenants/lab/members/{me}")).unwrap();
    assert!(t.members.is_empty());
    let f = h.client(Transport::Local);
    f.init().unwrap();
    assert_eq!(f.device_count().unwrap(), n as i32, "a session of no tenant sees every GPU");
    assert!(ctl.sessions().unwrap().iter().any(|s| s.transport == "local" && s.tenant.is_none()));
    match ctl.call::<Gpu>("POST", &format!("/v1/devices/{n}/drain")) {
        Err(CtlError::Refused { status: 404, .. }) => {}
        other => panic!("draining a GPU the backend lacks: {other:?}"),
    }
}
