//! The control socket (`pvgpu-ctl`'s API) as an operator uses it: sessions
//! listed with their peer, transport, devices and memory, and ended.

use super::*;
use pvgpu_ctl::client::CtlError;

/// The peer the backend counts this test process as over `t`.
fn expected_peer(t: Transport) -> String {
    match t {
        Transport::Local => format!("uid:{}", nix::unistd::getuid()),
        Transport::Tcp | Transport::Tls | Transport::Rdma => "tcp:127.0.0.1".into(),
        Transport::Xen => unreachable!("the control socket is tested on a backend of the test's own"),
    }
}

/// Waits until `f` holds (the supervisor notices an ended session within
/// a tick or two).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "{what} did not happen within 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(crate) fn control_socket_lists_and_ends_sessions(t: Transport) {
    let h = Harness::start();
    let ctl = h.control().expect("a backend of the test's own has a control socket");
    assert!(ctl.sessions().unwrap().is_empty());

    let a = h.client(t);
    a.init().unwrap();
    let ctx = a.primary_ctx_retain(0).unwrap();
    let buf = a.mem_alloc(ctx, 3 << 20).unwrap();
    let b = h.client(t);
    b.init().unwrap();
    let bctx = b.primary_ctx_retain(0).unwrap();

    let live = ctl.sessions().unwrap();
    assert_eq!(live.len(), 2, "{live:?}");
    let (first, second) = (&live[0], &live[1]);
    assert!(first.id < second.id, "listed lowest number first");
    for s in &live {
        assert_eq!(s.transport, t.name());
        assert_eq!(s.peer, expected_peer(t));
        assert_eq!(s.devices, [0]);
        assert!(s.age_seconds >= 0.0 && s.started_unix_seconds > 1_700_000_000, "{s:?}");
    }
    assert!(first.memory_bytes >= 3 << 20, "session a holds its 3 MiB: {first:?}");
    assert!(second.memory_bytes < 3 << 20, "session b holds none of a's: {second:?}");
    a.mem_free(buf).unwrap();
    eventually("a's memory leaving the report", || ctl.session(first.id).unwrap().memory_bytes < 3 << 20);

    // Ending one session leaves the other serving.
    let ended = ctl.end(first.id).unwrap();
    assert_eq!(ended.id, first.id);
    eventually("session a ending", || a.nop().err().map(|e| e.status()) == Some(CuResult::DEVICE_UNAVAILABLE));
    eventually("session a leaving the list", || ctl.sessions().unwrap().iter().all(|s| s.id != first.id));
    b.mem_alloc(bctx, 4096).unwrap();
    b.ctx_synchronize(bctx).unwrap();

    match ctl.end(first.id) {
        Err(CtlError::Refused { status: 404, message }) => assert!(message.contains("No live session"), "{message}"),
        other => panic!("ending an ended session: {other:?}"),
    }
    match ctl.call::<serde_json::Value>("POST", "/v1/sessions") {
        Err(CtlError::Refused { status: 405, .. }) => {}
        other => panic!("POST on the list: {other:?}"),
    }
}
