//! One program, several backends (`PVGPU_BACKEND=a,b`,
//! `tests/runtime/two_backends.cu`): devices numbered in the list's order,
//! work on each, copies between them through the program and from backend
//! to backend (`--peer`), keys and authorities per backend.

use super::worker_program;
use pvgpu_tests::dropin::cuda_home;
use pvgpu_tests::{Harness, HarnessOptions, Transport};
use std::process::Command;
use std::sync::OnceLock;

/// The two backends of the several-backends tests: one device, sessions
/// in worker processes; and two devices, sessions in the backend's own
/// process. Each has a TCP key of its own.
fn backends_ab() -> (&'static Harness, &'static Harness) {
    static A: OnceLock<Harness> = OnceLock::new();
    static B: OnceLock<Harness> = OnceLock::new();
    let a = A.get_or_init(|| Harness::with(HarnessOptions { process: true, ..Default::default() }));
    let b = B.get_or_init(|| Harness::with(HarnessOptions { host_devices: Some(2), ..Default::default() }));
    (a, b)
}

/// `tests/runtime/two_backends.cu` (three devices expected) against the
/// backends `PVGPU_BACKEND=list`, with `PVGPU_TCP_KEY=keys`, silent.
fn two_backends_program(list: &str, keys: &str) -> Command {
    let mut path = pvgpu_tests::dropin::shim_dir().into_os_string();
    path.push(":");
    path.push(cuda_home().join("lib"));
    let mut cmd = Command::new(worker_program("two_backends"));
    cmd.arg("3").env("LD_LIBRARY_PATH", path).env("PVGPU_BACKEND", list).env("PVGPU_TCP_KEY", keys).env_remove("PVGPU_LOG");
    cmd
}

fn run_two_backends(list: &str, keys: &str) -> std::process::Output {
    two_backends_program(list, keys).output().expect("cannot start the program")
}

/// Checks a passing run of `two_backends.cu`: the devices numbered in the
/// list's order, each computing, copies between them, and no peer link
/// between devices 0 and 2 (of different backends, in either order).
fn assert_two_backends_ran(list: &str, out: &std::process::Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.lines().last() == Some("PASS"),
        "PVGPU_BACKEND={list} ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let want = "devices: 3\n\
                device 0: saxpy ok, its pointer is on device 0\n\
                device 1: saxpy ok, its pointer is on device 1\n\
                device 2: saxpy ok, its pointer is on device 2\n\
                cudaMemcpyPeer from device 2 to device 0: ok\n\
                cudaMemcpyPeerAsync after another device's event: ok\n\
                cudaMemcpy with cudaMemcpyDefault between devices: ok\n";
    assert!(stdout.starts_with(want), "PVGPU_BACKEND={list}:\n{stdout}");
    assert!(stdout.contains("device 0 reaches device 2's memory directly: no\n"), "{stdout}");
}

/// One program, the GPUs of two backends (`PVGPU_BACKEND=local:…,tcp:…`,
/// `tests/runtime/two_backends.cu`): the devices are numbered in the
/// list's order, each computes, and copies go between devices of the two
/// backends (peer copies, one after an event of the other backend, and
/// unified-addressing copies). `local_first` orders the list.
fn two_backends(local_first: bool) {
    let (a, b) = backends_ab();
    let (local, tcp) = (a.addr(Transport::Local).to_string(), b.addr(Transport::Tcp).to_string());
    let list = if local_first { format!("{local},{tcp}") } else { format!("{tcp},{local}") };
    let out = run_two_backends(&list, &b.tcp_key.to_string_lossy());
    assert_two_backends_ran(&list, &out);
}

/// Two TCP backends, each with a key of its own: `PVGPU_TCP_KEY` names
/// each one's file by its address (`tcp:…=PATH,tcp:…=PATH`). With one
/// key for both, the backend whose key it is not refuses, and the program
/// is told which backend failed.
#[test]
fn two_tcp_backends_each_with_its_own_key() {
    let (a, b) = backends_ab();
    let (ta, tb) = (a.addr(Transport::Tcp).to_string(), b.addr(Transport::Tcp).to_string());
    assert_ne!(std::fs::read(&a.tcp_key).unwrap(), std::fs::read(&b.tcp_key).unwrap(), "the backends' keys must differ");
    let list = format!("{ta},{tb}");
    let keys = format!("{ta}={},{tb}={}", a.tcp_key.display(), b.tcp_key.display());
    assert_two_backends_ran(&list, &run_two_backends(&list, &keys));
    // The default file for the backend the list does not name.
    let keys = format!("{tb}={},{}", b.tcp_key.display(), a.tcp_key.display());
    assert_two_backends_ran(&list, &run_two_backends(&list, &keys));

    let out =
        two_backends_program(&list, &b.tcp_key.to_string_lossy()).env("PVGPU_LOG", "error").output().expect("cannot start the program");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a backend accepted another's key:\n{}", String::from_utf8_lossy(&out.stdout));
    assert!(stderr.contains(&ta) && stderr.contains("key"), "the error names neither the backend nor its key:\n{stderr}");
}

#[test]
fn one_program_two_backends_local_first() {
    two_backends(true);
}

/// Two backends that list each other (`--peer`): one device with sessions
/// in worker processes, two devices with sessions in the backend's own
/// process.
fn peered_ab() -> (&'static Harness, &'static Harness) {
    static AB: OnceLock<(Harness, Harness)> = OnceLock::new();
    let (a, b) = AB.get_or_init(|| {
        Harness::peered(
            HarnessOptions { process: true, ..Default::default() },
            HarnessOptions { host_devices: Some(2), ..Default::default() },
        )
    });
    (a, b)
}

/// What the library logs when a copy between backends passes through the
/// program.
const THROUGH_THE_PROGRAM: &str = "it passes through the program";

/// `two_backends.cu` against `list`, logging at info: its output, checked,
/// and what it logged.
fn two_backends_logged(list: &str, keys: &str) -> String {
    let out = two_backends_program(list, keys).env("PVGPU_LOG", "info").output().expect("cannot start the program");
    assert_two_backends_ran(list, &out);
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Copies between two backends that list each other go from backend to
/// backend, both ways, over a local socket (to the backend whose sessions
/// run in worker processes, so a worker receives and sends through the
/// descriptors its supervisor hands it) and over TCP; the program's
/// output is the same as when they pass through it.
#[test]
fn copies_between_peered_backends_go_backend_to_backend() {
    let (a, b) = peered_ab();
    let (local, tcp) = (a.addr(Transport::Local).to_string(), b.addr(Transport::Tcp).to_string());
    for list in [format!("{local},{tcp}"), format!("{tcp},{local}")] {
        let log = two_backends_logged(&list, &b.tcp_key.to_string_lossy());
        assert!(!log.contains(THROUGH_THE_PROGRAM), "PVGPU_BACKEND={list}: a copy passed through the program:\n{log}");
    }
    for h in [a, b] {
        assert!(peer_copy_connections(h, "in", "accepted") > 0 && peer_copy_connections(h, "out", "made") > 0);
    }
}

/// The same over TLS: the program reaches the backend with two devices at
/// its TLS port, and the other backend sends its copies there too (its
/// `--peer` names that backend's authority), its supervisor ending TLS and
/// relaying for the worker, as the receiving supervisor does.
#[test]
fn copies_to_a_tls_peer_go_backend_to_backend() {
    let (a, b) = peered_ab();
    let (local, tls) = (a.addr(Transport::Local).to_string(), b.addr(Transport::Tls).to_string());
    let list = format!("{tls},{local}");
    let (made, accepted) = (peer_copy_connections(a, "out", "made"), peer_copy_connections(b, "in", "accepted"));
    let out = two_backends_program(&list, &format!("{tls}={}", b.tcp_key.display()))
        .env("PVGPU_TLS_CA", format!("{tls}={}", b.tls_ca.display()))
        .env("PVGPU_LOG", "info")
        .output()
        .expect("cannot start the program");
    assert_two_backends_ran(&list, &out);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(!log.contains(THROUGH_THE_PROGRAM), "a copy passed through the program:\n{log}");
    assert!(peer_copy_connections(a, "out", "made") > made && peer_copy_connections(b, "in", "accepted") > accepted);
}

/// A backend's `pvgpu_peer_copy_connections_total` of `side` and
/// `outcome` (`/metrics` on its control socket).
fn peer_copy_connections(h: &Harness, side: &str, outcome: &str) -> u64 {
    let (status, text) = h.control().expect("a control socket").request("GET", "/metrics", b"").expect("/metrics");
    assert_eq!(status, 200);
    let text = String::from_utf8_lossy(&text);
    let row = format!("pvgpu_peer_copy_connections_total{{side=\"{side}\",outcome=\"{outcome}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(&row)).and_then(|v| v.trim().parse().ok()).unwrap_or_else(|| panic!("no {row} in\n{text}"))
}

/// Backends that do not list each other: the copies pass through the
/// program, and the library says why once.
#[test]
fn copies_between_backends_that_are_not_peers_pass_through_the_program() {
    let (a, b) = backends_ab();
    let list = format!("{},{}", a.addr(Transport::Local), b.addr(Transport::Tcp));
    let log = two_backends_logged(&list, &b.tcp_key.to_string_lossy());
    assert_eq!(log.matches(THROUGH_THE_PROGRAM).count(), 2, "once for each direction:\n{log}");
    assert!(peer_copy_connections(a, "out", "not_a_peer") > 0 && peer_copy_connections(b, "out", "not_a_peer") > 0);
}

/// A connection that presents a ticket no session opened is refused, at
/// the local socket and the TCP port, and the backend serves on.
#[test]
fn a_backend_refuses_a_copy_whose_ticket_it_never_gave() {
    use pvgpu_ring::peer_copy::{Arrival, PeerCopyError, open_local, open_tcp};
    let (a, b) = peered_ab();
    let forged = Arrival { ticket: [0x5a; 16], len: 4096 };
    let mut s = std::os::unix::net::UnixStream::connect(&a.socket).expect("local socket");
    assert!(matches!(open_local(&mut s, forged), Err(PeerCopyError::Refused)));
    let mut t = std::net::TcpStream::connect(a.addr(Transport::Tcp).to_string().trim_start_matches("tcp:")).expect("TCP port");
    assert!(matches!(open_tcp(&mut t, forged), Err(PeerCopyError::Refused)));
    assert!(peer_copy_connections(a, "in", "refused") >= 2);
    let list = format!("{},{}", a.addr(Transport::Local), b.addr(Transport::Tcp));
    assert_two_backends_ran(&list, &run_two_backends(&list, &b.tcp_key.to_string_lossy()));
}

#[test]
fn one_program_two_backends_tcp_first() {
    two_backends(false);
}
