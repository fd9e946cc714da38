//! Hostile and careless peers against the `pvgpu-backend` binary as an
//! operator runs it (worker processes, host executor): each test shows one
//! way a peer used to deny service to others, or keep the GPU, and that it
//! no longer can.

mod openings;

use pvgpu_frontend::error::Chain;
use pvgpu_frontend::{BackendAddr, Client, Options};
use pvgpu_tests::{TempDir, backend_bin, eventually, free_tcp_port, session_workers, write_key_file, write_tls_files};
use std::io::Write;
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A backend process with a local and a TCP listener.
struct Backend {
    child: Child,
    dir: TempDir,
    sock: PathBuf,
    tcp: String,
    tls: String,
    key: PathBuf,
    ca: PathBuf,
}

impl Backend {
    fn start(extra: &[&str]) -> Backend {
        let dir = TempDir::new("hostile");
        let sock = dir.0.join("b.sock");
        let key = dir.0.join("tcp.key");
        write_key_file(&key);
        let tcp = format!("127.0.0.1:{}", free_tcp_port());
        let tls = format!("127.0.0.1:{}", free_tcp_port());
        let (ca, cert, tls_key) = write_tls_files(&dir.0);
        let child = Command::new(backend_bin())
            .args(["--executor", "host", "--host-mem", "1G", "--image-cache", "off", "--listen"])
            .arg(format!("local:{}", sock.display()))
            .arg("--listen")
            .arg(format!("tcp:{tcp}"))
            .arg("--tcp-key")
            .arg(&key)
            .arg("--listen")
            .arg(format!("tls:{tls}"))
            .arg("--tls-cert")
            .arg(&cert)
            .arg("--tls-key")
            .arg(&tls_key)
            .args(extra)
            .env("RUST_LOG", std::env::var("PVGPU_HOSTILE_LOG").unwrap_or_else(|_| "error".into()))
            .stderr(if std::env::var_os("PVGPU_HOSTILE_LOG").is_some() { Stdio::inherit() } else { Stdio::null() })
            .spawn()
            .unwrap();
        let b = Backend { child, dir, sock, tcp, tls, key, ca };
        assert!(
            eventually(Duration::from_secs(20), || b.sock.exists() && TcpStream::connect(&b.tcp).is_ok()),
            "the backend did not start listening"
        );
        b
    }

    fn opts(&self) -> Options {
        Options { tcp_key: Some(self.key.clone()), data_area: 1 << 20, pinned: 0, ..Options::default() }
    }

    fn local(&self) -> Result<Client, pvgpu_frontend::Error> {
        Client::connect(&BackendAddr::Local(self.sock.clone()), &self.opts())
    }

    fn tcp_with(&self, key: Option<PathBuf>) -> Result<Client, pvgpu_frontend::Error> {
        Client::connect(&BackendAddr::Tcp(self.tcp.clone()), &Options { tcp_key: key, ..self.opts() })
    }

    /// Its session workers (its pool's idle workers serve no one).
    fn workers(&self) -> Vec<u32> {
        session_workers(self.child.id())
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The session answers a real call.
fn works(c: &Client) {
    c.init().unwrap();
    assert_eq!(c.device_count().unwrap(), 1);
}

fn err_text(r: Result<Client, pvgpu_frontend::Error>) -> String {
    match r {
        Ok(_) => panic!("expected the connection to be refused"),
        Err(e) => Chain(&e).to_string(),
    }
}

#[test]
fn tcp_needs_a_key_unless_the_network_is_declared_trusted() {
    let out = Command::new(backend_bin()).args(["--executor", "host", "--listen", "tcp:127.0.0.1:0"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--tcp-key") && err.contains("--tcp-trusted-network"), "{err}");
}

#[test]
fn a_wrong_or_missing_key_is_refused_clearly_and_starts_no_worker() {
    let b = Backend::start(&[]);
    let other = b.dir.0.join("other.key");
    write_key_file(&other);
    let e = err_text(b.tcp_with(Some(other)));
    assert!(e.contains("refused our key"), "{e}");
    let e = err_text(b.tcp_with(None));
    assert!(e.contains("requires a key") && e.contains("PVGPU_TCP_KEY"), "{e}");
    assert!(b.workers().is_empty(), "a worker started for a peer that failed the key check");
    // The right key opens a session that works.
    let c = b.tcp_with(Some(b.key.clone())).unwrap();
    works(&c);
}

/// 64 connections that never say anything used to take every session slot
/// (each got a worker): now they wait in the pending pool, a few per peer,
/// and are dropped after the handshake timeout.
#[test]
fn silent_connections_do_not_lock_anyone_out() {
    let b = Backend::start(&["--max-sessions", "8", "--handshake-timeout", "1"]);
    let silent: Vec<TcpStream> = (0..64).filter_map(|_| TcpStream::connect(&b.tcp).ok()).collect();
    std::thread::sleep(Duration::from_millis(300));
    assert!(b.workers().is_empty(), "silent peers got workers");
    // Another peer (a local user) gets a session at once.
    let t = Instant::now();
    let c = b.local().unwrap();
    works(&c);
    assert!(t.elapsed() < Duration::from_secs(5));
    drop(c);
    // Silent local connections of the same user hold only its own pending
    // slots, for the handshake timeout.
    let silent_local: Vec<UnixStream> = (0..64).filter_map(|_| UnixStream::connect(&b.sock).ok()).collect();
    std::thread::sleep(Duration::from_millis(300));
    assert!(b.workers().is_empty(), "silent peers got workers");
    // Once the silent ones timed out, everyone gets in again.
    std::thread::sleep(Duration::from_millis(1500));
    works(&b.tcp_with(Some(b.key.clone())).unwrap());
    works(&b.local().unwrap());
    drop((silent, silent_local));
}

#[test]
fn one_peer_cannot_take_every_session() {
    let b = Backend::start(&["--max-sessions-per-peer", "2"]);
    let c1 = b.local().unwrap();
    let c2 = b.local().unwrap();
    // The third is told why, not given a broken pipe.
    let e = err_text(b.local());
    assert!(e.contains("as many sessions as it may"), "{e}");
    // TCP from 127.0.0.1 is another peer.
    let t = b.tcp_with(Some(b.key.clone())).unwrap();
    for c in [&c1, &c2, &t] {
        works(c);
    }
    drop(c1);
    assert!(eventually(Duration::from_secs(10), || b.local().is_ok()), "a slot was not given back");
}

#[test]
fn transports_have_their_own_limits() {
    let b = Backend::start(&["--max-tcp-sessions", "1"]);
    let _t = b.tcp_with(Some(b.key.clone())).unwrap();
    let e = err_text(b.tcp_with(Some(b.key.clone())));
    assert!(e.contains("as many sessions as it may"), "{e}");
    let c = b.local().unwrap();
    works(&c);
}

/// A worker that cannot end by itself (stopped here; on a GPU, stuck in
/// `cuCtxDestroy` behind a kernel that never ends) is killed once its peer
/// has been gone for the grace period, and its slot is given back.
#[test]
fn a_stuck_worker_is_killed_after_its_peer_leaves() {
    let b = Backend::start(&["--end-grace", "1", "--max-sessions", "1"]);
    let c = b.local().unwrap();
    works(&c);
    let workers = b.workers();
    assert_eq!(workers.len(), 1);
    // SAFETY: signalling a process by pid (the backend's worker).
    unsafe { libc::kill(workers[0] as i32, libc::SIGSTOP) };
    drop(c);
    assert!(eventually(Duration::from_secs(10), || b.workers().is_empty()), "the stuck worker was not killed");
    let c = b.local().unwrap();
    works(&c);
}

#[test]
fn an_idle_session_is_ended() {
    let b = Backend::start(&["--idle-timeout", "1"]);
    let c = b.local().unwrap();
    works(&c);
    std::thread::sleep(Duration::from_millis(2500));
    assert!(c.device_count().is_err(), "an idle session outlived the idle timeout");
    assert!(eventually(Duration::from_secs(10), || b.workers().is_empty()));
}

#[test]
fn the_socket_mode_and_allowed_users_decide_who_connects() {
    use std::os::unix::fs::PermissionsExt;
    let b = Backend::start(&["--socket-mode", "600", "--allow-uid", "4000000"]);
    assert_eq!(std::fs::metadata(&b.sock).unwrap().permissions().mode() & 0o777, 0o600);
    let e = err_text(b.local());
    assert!(e.contains("may not use it"), "{e}");
    assert!(b.workers().is_empty());
}

/// A peer that sends a header claiming a large payload and then stalls
/// costs the backend what it sent, not what it claimed, and loses only its
/// own session.
#[test]
fn a_stalled_frame_loses_only_its_session() {
    let b = Backend::start(&[]);
    let mut s = TcpStream::connect(&b.tcp).unwrap();
    let key = pvgpu_ring::tcp_auth::ClientKey::from_file(&b.key).unwrap();
    pvgpu_ring::tcp_auth::client_open(&mut s, Some(&key)).unwrap();
    let h = pvgpu_ring::proto::Header::request(pvgpu_ring::proto::Opcode::Nop, 1, 0, pvgpu_ring::proto::MAX_PAYLOAD);
    s.write_all(zerocopy::IntoBytes::as_bytes(&h)).unwrap();
    s.write_all(&[0u8; 1000]).unwrap();
    let c = b.local().unwrap();
    works(&c);
    std::thread::sleep(Duration::from_millis(300));
    let workers = b.workers();
    assert_eq!(workers.len(), 2);
    for pid in workers {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let rss_kb: u64 =
            status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap_or(0);
        assert!(rss_kb < 48 << 10, "worker {pid} holds {rss_kb} KiB after a 64 MiB header with 1000 bytes");
    }
}

/// The quota counts what the driver reserves because of the session, not
/// only its allocations: a larger stack for every resident thread, module
/// globals, and contexts beyond the first (the host double reserves for
/// each context 16 MiB, a stack for 2048 threads, a 1 MiB printf buffer and
/// an 8 MiB heap, as a driver does for a device: 27 MiB).
#[test]
fn the_quota_counts_limits_module_globals_and_extra_contexts() {
    use pvgpu_frontend::CuResult;
    let b = Backend::start(&["--mem-quota", "96M"]);
    let c = b.local().unwrap();
    c.init().unwrap();
    let ctx = c.ctx_create(0, 0).unwrap();
    // A 64 KiB stack for 2048 threads is 128 MiB: refused, and put back.
    assert_eq!(status(c.ctx_set_limit(ctx, 0, 64 << 10)), CuResult::OUT_OF_MEMORY);
    assert_eq!(c.ctx_get_limit(ctx, 0).unwrap(), 1024);
    // 8 KiB: 14 MiB more than the first context's 2 MiB.
    c.ctx_set_limit(ctx, 0, 8 << 10).unwrap();
    // A module declaring a 45 MB global: once fits, twice not.
    let ptx = b".version 8.0\n.target sm_75\n.address_size 64\n.visible .global .align 8 .b8 big[45000000];\n\0";
    let m = c.module_load(ctx, ptx).unwrap();
    assert_eq!(status(c.module_load(ctx, ptx)), CuResult::OUT_OF_MEMORY);
    // Nor does an allocation that fits the quota alone.
    assert_eq!(status(c.mem_alloc(ctx, 40 << 20)), CuResult::OUT_OF_MEMORY);
    c.module_unload(m).unwrap();
    c.mem_alloc(ctx, 40 << 20).unwrap();
    // Contexts beyond the first: 27 MiB each of the 42 MiB left.
    let one = c.ctx_create(0, 0).unwrap();
    assert_eq!(status(c.ctx_create(0, 0)), CuResult::OUT_OF_MEMORY);
    c.ctx_destroy(one).unwrap();
    c.ctx_create(0, 0).unwrap();
}

/// The status a call ended with.
fn status<T>(r: Result<T, pvgpu_frontend::Error>) -> pvgpu_frontend::CuResult {
    match r {
        Ok(_) => pvgpu_frontend::CuResult::SUCCESS,
        Err(e) => e.status(),
    }
}

/// Context flags that reach outside the session are refused; the L2
/// set-aside, which does too, is cut to the session's share.
#[test]
fn context_flags_are_filtered() {
    use pvgpu_frontend::CuResult;
    let b = Backend::start(&[]);
    let c = b.local().unwrap();
    c.init().unwrap();
    for (flags, want) in [(0x20, CuResult::NOT_SUPPORTED), (0x40, CuResult::NOT_SUPPORTED), (0x1000, CuResult::INVALID_VALUE)] {
        match c.ctx_create(0, flags) {
            Ok(_) => panic!("flags {flags:#x} were accepted"),
            Err(e) => assert_eq!(e.status(), want, "flags {flags:#x}"),
        }
    }
    // The device-wide L2 set-aside is cut to the session's share (a
    // quarter of the device's largest by default).
    let ctx = c.ctx_create(0, 0x04 | 0x08).unwrap();
    let max = c.device_attribute(0, pvgpu_ring::cuda::api::CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE).unwrap() as u64;
    c.ctx_set_limit(ctx, 6, u64::MAX).unwrap();
    assert_eq!(c.ctx_get_limit(ctx, 6).unwrap(), max / 4, "the whole L2 set-aside was granted");
}

/// TLS: the backend's certificate must be signed by the authority the
/// client names; the key check still applies inside; a plain TCP client on
/// the TLS port gets an error, not a hang.
#[test]
fn tls_checks_the_certificate_and_the_key() {
    let b = Backend::start(&[]);
    let tls = |ca: &PathBuf, key: Option<PathBuf>| {
        Client::connect(&BackendAddr::Tls(b.tls.clone()), &Options { tls_ca: Some(ca.clone()), tcp_key: key, ..b.opts() })
    };
    works(&tls(&b.ca, Some(b.key.clone())).unwrap());
    let other = b.dir.0.join("other");
    std::fs::create_dir_all(&other).unwrap();
    let (wrong_ca, _, _) = write_tls_files(&other);
    let e = err_text(tls(&wrong_ca, Some(b.key.clone())));
    assert!(e.contains("TLS"), "{e}");
    let e = err_text(tls(&b.ca, None));
    assert!(e.contains("requires a key"), "{e}");
    let e = err_text(Client::connect(&BackendAddr::Tcp(b.tls.clone()), &b.opts()));
    assert!(e.contains("opening"), "{e}");
    assert!(eventually(Duration::from_secs(10), || b.workers().len() <= 1));
}

/// The backend's idle workers (`--worker-pool`, 2 by default) take
/// sessions: a session is served by one of the processes that waited
/// (named `pvgpu-worker` once it serves), the pool is filled again, and a
/// worker of the pool serves one session only, as a started one does.
/// With `--worker-pool 0` no process waits.
#[test]
fn idle_workers_take_sessions_and_the_pool_refills() {
    let idle = |b: &Backend| -> Vec<u32> {
        pvgpu_tests::child_pids(b.child.id())
            .into_iter()
            .filter(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "pvgpu-idle"))
            .collect()
    };
    let b = Backend::start(&[]);
    assert!(eventually(Duration::from_secs(10), || idle(&b).len() == 2), "two idle workers wait");
    let waiting = idle(&b);
    let c = b.local().unwrap();
    works(&c);
    let serving = b.workers();
    assert_eq!(serving.len(), 1);
    assert!(waiting.contains(&serving[0]), "the session went to a waiting worker: {waiting:?} then {serving:?}");
    assert!(eventually(Duration::from_secs(10), || idle(&b).len() == 2), "the pool is full again");
    let t = b.tcp_with(Some(b.key.clone())).unwrap();
    works(&t);
    assert_eq!(b.workers().len(), 2);
    drop((c, t));
    assert!(eventually(Duration::from_secs(10), || b.workers().is_empty()), "each worker ends with its session");
    // The worker started to replace the last one taken names itself once
    // it runs.
    assert!(eventually(Duration::from_secs(10), || idle(&b).len() == 2), "the pool stays full");

    let none = Backend::start(&["--worker-pool", "0"]);
    let c = none.local().unwrap();
    works(&c);
    assert!(idle(&none).is_empty());
    assert_eq!(none.workers().len(), 1);
}
