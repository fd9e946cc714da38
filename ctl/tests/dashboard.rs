//! The web dashboard in a real headless browser (Chromium from Debian,
//! driven by Selenium: `tests/dashboard/drive.py`), against a backend in
//! this process with a tenant whose program holds a session: log in, see
//! the session, change the tenant's quota, move a second program's session
//! to a peer backend, end the session. The backend's side of each change
//! is checked here. `tests/all.sh` installs Chromium,
//! its driver and Selenium (in `target/selenium`).

use pvgpu_backend::Backend;
use pvgpu_backend::config::{AdmissionConfig, Config, ControlSocket, Listen, SessionConfig};
use pvgpu_backend::exec::host::HostExecutor;
use pvgpu_ctl::api::{IssueKey, IssuedKey, NewTenant, Quota, Tenant};
use pvgpu_ctl::client::Control;
use pvgpu_frontend::{BackendAddr, Client, Options};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace")
}

#[test]
fn an_operator_uses_the_dashboard_in_chromium() {
    for need in ["/usr/bin/chromium", "/usr/bin/chromedriver"] {
        assert!(Path::new(need).exists(), "{need} is missing: apt-get install chromium chromium-driver (tests/all.sh does)");
    }
    let selenium = repo().join("target/selenium");
    assert!(
        selenium.join("selenium").exists(),
        "Selenium is missing: python3 -m pip install --target target/selenium selenium (tests/all.sh does)"
    );

    let dir = std::env::temp_dir().join(format!("pvgpu-dashboard-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let token_text = "dashboard-test-token-0123456789";
    let token_file = dir.join("token");
    pvgpu_ring::tcp_auth::write_key_file(&token_file, token_text).unwrap();
    let token = pvgpu_ring::tcp_auth::TcpKey::from_file(&token_file).unwrap();
    let tenants = pvgpu_backend::tenants::Tenants::open(&dir.join("state")).unwrap();
    // The peer a session is moved to, on this host.
    let peer_cfg = Config {
        listen: vec![Listen::Local(dir.join("peer.sock"))],
        session: SessionConfig::default(),
        admission: AdmissionConfig::default(),
        control: ControlSocket::At(dir.join("peer-control.sock")),
        metrics: None,
        control_http: None,
        peers: Vec::new(),
    };
    let peer = Backend::start_threads(Arc::new(HostExecutor::with_devices(1 << 30, 2)), peer_cfg).unwrap();
    let spec =
        format!("name=gpu-b,control=unix:{},address=local:{}", dir.join("peer-control.sock").display(), dir.join("peer.sock").display());
    let peers = vec![spec.parse::<pvgpu_backend::peers::PeerSpec>().unwrap().open().unwrap()];
    let cfg = Config {
        listen: vec![Listen::Tcp("127.0.0.1:0".into()), Listen::Local(dir.join("local.sock"))],
        session: SessionConfig::default(),
        admission: AdmissionConfig { tenants: Some(Arc::new(tenants)), ..Default::default() },
        control: ControlSocket::At(dir.join("control.sock")),
        metrics: None,
        control_http: Some(pvgpu_backend::config::ControlHttp { addr: "127.0.0.1:0".into(), token, tls: None }),
        peers,
    };
    let backend = Backend::start_threads(Arc::new(HostExecutor::with_devices(1 << 30, 2)), cfg).unwrap();
    let http = backend.control_http_addr().expect("the dashboard is served");
    let ctl = Control::new(dir.join("control.sock"));

    let _: Tenant = ctl
        .call_with(
            "POST",
            "/v1/tenants",
            Some(&NewTenant { name: "lab-a".into(), quota: Quota { gpus: Some(vec![1]), ..Quota::default() }, members: Vec::new() }),
        )
        .unwrap();
    let key: IssuedKey = ctl.call_with("POST", "/v1/tenants/lab-a/keys", Some(&IssueKey::default())).unwrap();
    let key_file = dir.join("lab-a.key");
    pvgpu_ring::tcp_auth::write_key_file(&key_file, &key.key_file).unwrap();
    let opts = Options { tcp_key: Some(key_file), ..Options::default() };
    let client = Arc::new(Client::connect(&BackendAddr::Tcp(backend.tcp_addrs()[0].to_string()), &opts).unwrap());
    client.init().unwrap();
    let ctx = client.primary_ctx_retain(0).unwrap();
    let buf = client.mem_alloc(ctx, 8 << 20).unwrap();
    // Traffic for the charts while the browser watches.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let busy = {
        let (stop, c) = (stop.clone(), client.clone());
        std::thread::spawn(move || {
            let data = vec![7u8; 1 << 20];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if c.memcpy_htod(buf, &data).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let session = ctl.sessions().unwrap()[0].id;

    // A second program, over the local transport, whose session the page
    // moves to the peer while it runs.
    let mover = Arc::new(Client::connect(&BackendAddr::Local(dir.join("local.sock")), &Options::default()).unwrap());
    mover.init().unwrap();
    let mctx = mover.primary_ctx_retain(0).unwrap();
    let pattern: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 + 3) as u8).collect();
    let mbuf = mover.mem_alloc(mctx, pattern.len() as u64).unwrap();
    mover.memcpy_htod(mbuf, &pattern).unwrap();
    let moving = ctl.sessions().unwrap().iter().map(|s| s.id).find(|&id| id != session).expect("the second session");
    let reads = {
        let (stop, c, want) = (stop.clone(), mover.clone(), pattern.clone());
        std::thread::spawn(move || {
            // Calls that wait, before, during and after the move: each one
            // reads the bytes back whole.
            let mut got = vec![0u8; want.len()];
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                c.memcpy_dtoh(&mut got, mbuf).map_err(|e| format!("read {n}: {e}"))?;
                if got != want {
                    return Err(format!("read {n} came back changed"));
                }
                n += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(n)
        })
    };

    let out = Command::new("python3")
        .arg(repo().join("tests/dashboard/drive.py"))
        .arg(format!("http://{http}/"))
        .arg(token_text)
        .arg(session.to_string())
        .arg("lab-a")
        .arg(moving.to_string())
        .arg("gpu-b")
        .env("PYTHONPATH", &selenium)
        .env("SE_AVOID_STATS", "true")
        .output()
        .expect("cannot run python3");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = busy.join();
    let read = reads.join().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains("DASHBOARD OK"),
        "the browser run failed:\n{said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The moved program read its bytes back whole throughout, and reads
    // them from the peer now.
    let read = read.expect("the moved program's reads");
    assert!(read > 0, "the moved program made calls");
    let mut got = vec![0u8; pattern.len()];
    mover.memcpy_dtoh(&mut got, mbuf).unwrap();
    assert!(got == pattern, "the moved memory is intact");
    let at_peer = Control::new(dir.join("peer-control.sock")).sessions().unwrap();
    assert_eq!(at_peer.len(), 1, "the peer serves the moved program: {at_peer:?}");
    assert!(ctl.session(moving).is_err(), "the moved session left the source");
    let metrics = ctl.request("GET", "/metrics", b"").unwrap().1;
    let metrics = String::from_utf8_lossy(&metrics);
    assert!(metrics.contains("pvgpu_migrations_total{outcome=\"moved\"} 1"), "{metrics}");

    let t: Tenant = ctl.call("GET", "/v1/tenants/lab-a").unwrap();
    assert_eq!(t.quota.memory_bytes, Some(32 << 20), "the quota typed in the page reached the backend");
    assert_eq!(t.quota.gpus, Some(vec![1]), "saving the quota keeps the tenant's GPUs");
    assert_eq!(t.quota.gpu_share, Some(4), "the GPU share typed in the page reached the backend");
    let gpus: Vec<pvgpu_ctl::api::Gpu> = ctl.call("GET", "/v1/devices").unwrap();
    assert!(gpus[0].drained && !gpus[1].drained, "GPU 0 drained with its button: {gpus:?}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while client.nop().is_ok() {
        assert!(Instant::now() < deadline, "the session ended in the page still serves");
        std::thread::sleep(Duration::from_millis(20));
    }

    // The API over HTTP wants the token; the page itself does not.
    let plain = |path: &str, auth: Option<&str>| {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(http).unwrap();
        let auth = auth.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{auth}\r\n").unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        answer
    };
    assert!(plain("/v1/sessions", None).starts_with("HTTP/1.1 401"));
    assert!(plain("/v1/sessions", Some("wrong-token-wrong-token")).starts_with("HTTP/1.1 401"));
    assert!(plain("/v1/sessions", Some(token_text)).starts_with("HTTP/1.1 200"));
    assert!(plain("/", None).starts_with("HTTP/1.1 200"));
    drop(mover);
    drop(backend);
    drop(peer);
    std::fs::remove_dir_all(&dir).unwrap();
}
