//! Strangers who never finish opening, and key holders who take all they
//! may: neither shuts anyone else out.

use super::{Backend, status, works};
use pvgpu_frontend::{BackendAddr, Client, CuResult, Options};
use pvgpu_tests::eventually;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A TCP connection to `to` from `src`, one of this machine's loopback
/// addresses (127.0.0.0/8 is all local on Linux): many peers from one host.
fn tcp_from(src: Ipv4Addr, to: &str) -> std::io::Result<TcpStream> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, SockaddrIn, bind, connect, socket};
    let to: SocketAddrV4 = to.parse().map_err(std::io::Error::other)?;
    let fd = socket(AddressFamily::Inet, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
    bind(fd.as_raw_fd(), &SockaddrIn::from(SocketAddrV4::new(src, 0)))?;
    connect(fd.as_raw_fd(), &SockaddrIn::from(to))?;
    Ok(TcpStream::from(fd))
}

/// Whether the backend has closed `s` (end of file), without waiting.
fn closed(s: &mut (impl Read + AsRawFd)) -> bool {
    let mut buf = [0u8; 512];
    loop {
        // SAFETY: a non-blocking receive into a valid buffer on our socket.
        let n = unsafe { libc::recv(s.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        match n {
            0 => return true,
            n if n > 0 => continue,
            _ => return std::io::Error::last_os_error().kind() != std::io::ErrorKind::WouldBlock,
        }
    }
}

/// What one dribbling attacker saw: how long each of its connections was
/// kept open by the backend.
type Holds = Arc<Mutex<Vec<Duration>>>;

/// Opens connections with `connect` and sends `prefix`, then one byte
/// every 300 ms, until the backend closes them; then opens the next one,
/// until `stop`.
fn dribble<S: Read + Write + AsRawFd>(connect: impl Fn() -> std::io::Result<S>, prefix: &[u8], stop: &AtomicBool, holds: &Holds) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut s) = connect() else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        let t = Instant::now();
        let _ = s.write_all(prefix);
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(300));
            if s.write_all(&[0]).is_err() || closed(&mut s) {
                holds.lock().unwrap().push(t.elapsed());
                break;
            }
        }
    }
}

/// Opens a client session.
type Connect<'a> = dyn Fn() -> Result<Client, pvgpu_frontend::Error> + 'a;

/// A TLS record header announcing a 16 KiB handshake message: the TLS
/// handshake then waits for every byte of it.
const TLS_RECORD: [u8; 5] = [0x16, 0x03, 0x01, 0x40, 0x00];

/// A local attacker of another user (`nobody`): Python, holding 16
/// connections that dribble their hello, reconnecting whenever the backend
/// closes one, for `secs`; prints how long each was held.
const LOCAL_DRIBBLER: &str = r#"
import socket, sys, threading, time
path, secs = sys.argv[1], float(sys.argv[2])
holds, lock = [], threading.Lock()
end = time.time() + secs
def run():
    while time.time() < end:
        try:
            s = socket.socket(socket.AF_UNIX); s.connect(path)
        except OSError:
            time.sleep(0.05); continue
        t = time.time()
        while time.time() < end:
            time.sleep(0.3)
            try:
                s.send(b"\0")
                s.setblocking(False)
                try:
                    if s.recv(512) == b"": raise OSError
                except BlockingIOError:
                    pass
                s.setblocking(True)
            except OSError:
                with lock: holds.append(time.time() - t)
                break
        s.close()
ts = [threading.Thread(target=run) for _ in range(16)]
[t.start() for t in ts]; [t.join() for t in ts]
print(" ".join("%.2f" % h for h in holds))
"#;

/// The attack of the review: many connections from several addresses
/// (and local ones of another user) dribble their openings, one byte at a
/// time, reconnecting whenever cut. Keyed TCP, TLS and local clients still
/// open sessions and finish their work; no connection is held past the
/// opening's deadline; no worker starts for an opening that never ends.
#[test]
fn slow_openings_lock_nobody_out() {
    let deadline = Duration::from_secs(2);
    let b = Backend::start(&["--handshake-timeout", "2", "--max-pending", "64", "--socket-mode", "666"]);
    let stop = Arc::new(AtomicBool::new(false));
    let holds: Holds = Default::default();
    let mut attackers = Vec::new();
    // 8 addresses, 8 places each (an eighth of each pool): every TCP and
    // every TLS place is an attacker's.
    for (target, prefix) in [(b.tcp.clone(), &[][..]), (b.tls.clone(), &TLS_RECORD[..])] {
        for a in 2..10u8 {
            for _ in 0..9 {
                let (stop, holds, target) = (stop.clone(), holds.clone(), target.clone());
                let prefix = prefix.to_vec();
                attackers
                    .push(std::thread::spawn(move || dribble(|| tcp_from(Ipv4Addr::new(127, 0, 0, a), &target), &prefix, &stop, &holds)));
            }
        }
    }
    let local_attack = nix::unistd::geteuid().is_root().then(|| {
        use std::os::unix::process::CommandExt;
        std::process::Command::new("python3")
            .args(["-c", LOCAL_DRIBBLER])
            .arg(&b.sock)
            .arg("7")
            .uid(65534)
            .gid(65534)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 for the local attacker")
    });
    if local_attack.is_none() {
        println!("local attacker skipped: it runs as another user, which needs root");
    }
    std::thread::sleep(Duration::from_secs(3));
    assert!(b.workers().is_empty(), "a worker started for an opening that never finished");

    // Everyone else still gets in, promptly, and works.
    let opts = b.opts();
    let key = Some(b.key.clone());
    let clients: [(&str, Box<Connect>); 3] = [
        ("tcp", Box::new(|| Client::connect(&BackendAddr::Tcp(b.tcp.clone()), &Options { tcp_key: key.clone(), ..opts.clone() }))),
        (
            "tls",
            Box::new(|| {
                Client::connect(
                    &BackendAddr::Tls(b.tls.clone()),
                    &Options { tcp_key: key.clone(), tls_ca: Some(b.ca.clone()), ..opts.clone() },
                )
            }),
        ),
        ("local", Box::new(|| b.local())),
    ];
    let mut live = Vec::new();
    for (name, connect) in &clients {
        let t = Instant::now();
        let c = connect().unwrap_or_else(|e| panic!("{name} client shut out: {}", pvgpu_frontend::error::Chain(&e)));
        assert!(t.elapsed() < deadline, "{name} client waited {:?} to open", t.elapsed());
        println!("{name} client opened in {:?} under attack", t.elapsed());
        works(&c);
        let ctx = c.ctx_create(0, 0).unwrap();
        let d = c.mem_alloc(ctx, 1 << 20).unwrap();
        let data: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
        c.memcpy_htod(d, &data).unwrap();
        let mut back = vec![0u8; data.len()];
        c.memcpy_dtoh(&mut back, d).unwrap();
        assert!(back == data, "{name}: the copy came back different");
        live.push(c);
        assert_eq!(b.workers().len(), live.len(), "workers besides the admitted sessions'");
    }
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    for t in attackers {
        t.join().unwrap();
    }
    let mut held = holds.lock().unwrap().clone();
    if let Some(p) = local_attack {
        let out = p.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        held.extend(text.split_whitespace().filter_map(|s| s.parse::<f64>().ok()).map(Duration::from_secs_f64));
    }
    assert!(held.len() > 100, "the attack hardly ran: {} connections cut", held.len());
    let longest = held.iter().max().copied().unwrap_or_default();
    println!("{} attacking connections cut, the longest held {longest:?}", held.len());
    // The deadline, one listener tick, and the attacker's own 300 ms step.
    assert!(longest < deadline + Duration::from_millis(900), "an opening was held {longest:?} (deadline {deadline:?})");
    for c in &live {
        works(c);
    }
}

/// One TCP address (one key holder, or everyone behind one NAT) takes at
/// most a quarter of the TCP sessions by default; another address still
/// gets in.
#[test]
fn one_keyed_address_at_its_most_leaves_others_room() {
    let b = Backend::start(&["--max-tcp-sessions", "8"]);
    let key = pvgpu_ring::tcp_auth::ClientKey::from_file(&b.key).unwrap();
    let open = |src: Ipv4Addr| {
        let mut s = tcp_from(src, &b.tcp).unwrap();
        pvgpu_ring::tcp_auth::client_open(&mut s, Some(&key)).map(|()| s)
    };
    let held: Vec<TcpStream> = (0..2).map(|_| open(Ipv4Addr::new(127, 0, 0, 2)).unwrap()).collect();
    match open(Ipv4Addr::new(127, 0, 0, 2)) {
        Err(pvgpu_ring::tcp_auth::AuthError::Busy) => {}
        other => panic!("a third session of one address: {:?}", other.map(|_| ())),
    }
    assert!(eventually(Duration::from_secs(10), || b.workers().len() == 2));
    let c = b.tcp_with(Some(b.key.clone())).unwrap();
    works(&c);
    let _other = open(Ipv4Addr::new(127, 0, 0, 3)).unwrap();
    drop(held);
}

/// What one peer's sessions hold together stays within
/// `--peer-mem-quota`, and a session that ends gives its share back.
#[test]
fn a_peers_sessions_share_its_memory_quota() {
    let b = Backend::start(&["--peer-mem-quota", "64M", "--mem-quota", "48M"]);
    let a = b.local().unwrap();
    let c = b.local().unwrap();
    a.init().unwrap();
    c.init().unwrap();
    let (actx, cctx) = (a.ctx_create(0, 0).unwrap(), c.ctx_create(0, 0).unwrap());
    a.mem_alloc(actx, 40 << 20).unwrap();
    assert_eq!(status(c.mem_alloc(cctx, 40 << 20)), CuResult::OUT_OF_MEMORY, "two sessions passed their peer's quota");
    c.mem_alloc(cctx, 20 << 20).unwrap();
    // Another peer (TCP from 127.0.0.1) has a quota of its own.
    let t = b.tcp_with(Some(b.key.clone())).unwrap();
    t.init().unwrap();
    let tctx = t.ctx_create(0, 0).unwrap();
    t.mem_alloc(tctx, 40 << 20).unwrap();
    // The first session ends (its worker exits): its 40 MiB go back.
    assert_eq!(status(c.mem_alloc(cctx, 24 << 20)), CuResult::OUT_OF_MEMORY);
    drop(a);
    assert!(
        eventually(Duration::from_secs(10), || c.mem_alloc(cctx, 24 << 20).is_ok()),
        "an ended session's memory still counted against its peer"
    );
}
