//! `pvgpu-ctl` against a real backend (the host executor, in this
//! process): the commands an operator types, their output and exit codes.

use pvgpu_backend::Backend;
use pvgpu_backend::config::{Config, ControlSocket, Listen, SessionConfig};
use pvgpu_backend::exec::host::HostExecutor;
use pvgpu_ctl::api::Session;
use pvgpu_frontend::{BackendAddr, Client, Options};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn ctl(socket: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pvgpu-ctl"))
        .arg("--control")
        .arg(format!("unix:{}", socket.display()))
        .args(args)
        .output()
        .expect("cannot run pvgpu-ctl")
}

fn stdout(o: &Output) -> String {
    assert!(o.status.success(), "pvgpu-ctl failed: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn temp_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("pvgpu-ctl-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn an_operator_lists_and_ends_sessions() {
    let dir = temp_dir();
    let (socket, control) = (dir.join("local.sock"), dir.join("run").join("control.sock"));
    let cfg = Config {
        listen: vec![Listen::Local(socket.clone())],
        session: SessionConfig::default(),
        admission: Default::default(),
        control: ControlSocket::At(control.clone()),
        metrics: None,
        control_http: None,
        peers: Vec::new(),
    };
    let backend = Backend::start_threads(Arc::new(HostExecutor::new(1 << 30)), cfg).unwrap();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&control).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the control socket is the owner's only");
    let dir_mode = std::fs::metadata(control.parent().unwrap()).unwrap().permissions().mode() & 0o777;
    assert_eq!(dir_mode, 0o700, "a directory the backend makes is the owner's only");

    let client = Client::connect(&BackendAddr::Local(socket.clone()), &Options::default()).unwrap();
    client.init().unwrap();
    let ctx = client.primary_ctx_retain(0).unwrap();
    client.mem_alloc(ctx, 2 << 20).unwrap();

    let sessions: Vec<Session> = serde_json::from_str(&stdout(&ctl(&control, &["sessions", "--json"]))).unwrap();
    assert_eq!(sessions.len(), 1);
    let s = &sessions[0];
    assert_eq!((s.transport.as_str(), s.devices.as_slice()), ("local", &[0usize][..]));
    assert!(s.memory_bytes >= 2 << 20);

    let table = stdout(&ctl(&control, &["sessions"]));
    let row = table.lines().nth(1).expect("a row for the session");
    assert!(table.starts_with(&format!("{:>6}", "ID")), "{table}");
    assert!(row.contains(&s.peer) && row.contains("local") && row.contains("MiB"), "{table}");

    // Moving by a peer's name needs the backend to know it (`--peer`).
    let peers = stdout(&ctl(&control, &["peers"]));
    assert!(peers.contains("no peers"), "{peers}");
    let nowhere = ctl(&control, &["migrate", &s.id.to_string(), "--peer", "gpu-b"]);
    assert_eq!(nowhere.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&nowhere.stderr).contains("No peer \"gpu-b\""), "{nowhere:?}");

    let ended = stdout(&ctl(&control, &["end", &s.id.to_string()]));
    assert!(ended.contains(&format!("session {} ", s.id)), "{ended}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while client.nop().is_ok() {
        assert!(Instant::now() < deadline, "the ended session still serves");
        std::thread::sleep(Duration::from_millis(20));
    }

    let missing = ctl(&control, &["show", "999"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("No live session 999"));

    // A second backend cannot take a control socket that is served.
    let cfg2 = Config {
        listen: vec![Listen::Local(dir.join("other.sock"))],
        session: SessionConfig::default(),
        admission: Default::default(),
        control: ControlSocket::At(control.clone()),
        metrics: None,
        control_http: None,
        peers: Vec::new(),
    };
    let refused = Backend::start_threads(Arc::new(HostExecutor::new(1 << 20)), cfg2).err().expect("a second backend on a served socket");
    assert!(refused.to_string().contains("Another pvgpu backend"), "{refused}");

    backend.shutdown();
    assert!(!control.exists(), "the socket goes with its backend");
    let gone = ctl(&control, &["sessions"]);
    assert_eq!(gone.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&gone.stderr).contains("Is the backend running"));
    let _ = std::fs::remove_dir_all(dir);
}

/// The tenant commands as an operator types them, against a backend with
/// a state directory and a TCP listener: a tenant with a memory quota, a
/// key file that opens a session held to it, the key revoked.
#[test]
fn an_operator_adds_a_tenant_and_issues_and_revokes_its_key() {
    let dir = std::env::temp_dir().join(format!("pvgpu-ctl-tenants-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let control = dir.join("control.sock");
    let tenants = pvgpu_backend::tenants::Tenants::open(&dir.join("state")).unwrap();
    let admission = pvgpu_backend::config::AdmissionConfig { tenants: Some(Arc::new(tenants)), ..Default::default() };
    let cfg = Config {
        listen: vec![Listen::Tcp("127.0.0.1:0".into())],
        session: SessionConfig::default(),
        admission,
        control: ControlSocket::At(control.clone()),
        metrics: None,
        control_http: None,
        peers: Vec::new(),
    };
    let backend = Backend::start_threads(Arc::new(HostExecutor::new(1 << 30)), cfg).unwrap();
    let tcp = backend.tcp_addrs()[0].to_string();

    let added = stdout(&ctl(&control, &["tenant", "add", "lab-a", "--memory", "64MiB", "--sessions", "4", "--share", "3"]));
    assert!(added.contains("tenant lab-a added (memory 64.0 MiB, 4 sessions, GPUs all, GPU share 3)"), "{added}");
    let zero = ctl(&control, &["tenant", "add", "lab-z", "--share", "0"]);
    assert!(!zero.status.success(), "a GPU share of 0 is refused");
    let key = dir.join("lab-a.key");
    let issued = stdout(&ctl(&control, &["key", "issue", "lab-a", "--out", key.to_str().unwrap()]));
    assert!(issued.contains(&format!("PVGPU_TCP_KEY={}", key.display())), "{issued}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&key).unwrap().permissions().mode() & 0o777, 0o600, "a key file is its owner's only");
    let again = ctl(&control, &["key", "issue", "lab-a", "--out", key.to_str().unwrap()]);
    assert!(!again.status.success(), "an existing key file is not overwritten");

    let opts = Options { tcp_key: Some(key.clone()), ..Options::default() };
    let client = Client::connect(&BackendAddr::Tcp(tcp.clone()), &opts).unwrap();
    client.init().unwrap();
    let ctx = client.primary_ctx_retain(0).unwrap();
    client.mem_alloc(ctx, 60 << 20).unwrap();
    assert!(client.mem_alloc(ctx, 8 << 20).is_err(), "past the tenant's 64 MiB");
    let listed = stdout(&ctl(&control, &["tenant", "list"]));
    assert!(listed.lines().any(|l| l.starts_with("lab-a") && l.contains("64.0 MiB")), "{listed}");
    let sessions = stdout(&ctl(&control, &["sessions"]));
    assert!(sessions.contains("lab-a"), "{sessions}");

    let revoked = stdout(&ctl(&control, &["key", "revoke", "lab-a"]));
    assert!(revoked.contains("keys revoked") && revoked.contains("sessions ended"), "{revoked}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while client.nop().is_ok() {
        assert!(Instant::now() < deadline, "a revoked key's session still serves");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(Client::connect(&BackendAddr::Tcp(tcp), &opts).is_err(), "a revoked key opens nothing");
    let keys = stdout(&ctl(&control, &["key", "list", "lab-a"]));
    assert_eq!(keys.lines().count(), 2, "{keys}");
    drop(backend);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A CA and a certificate it signed for 127.0.0.1, written to `dir`:
/// (ca.pem, cert.pem, key.pem).
fn tls_files(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap().signed_by(&key, &ca, &ca_key).unwrap();
    let paths = (dir.join("ca.pem"), dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&paths.0, ca.pem()).unwrap();
    std::fs::write(&paths.1, cert.pem()).unwrap();
    std::fs::write(&paths.2, key.serialize_pem()).unwrap();
    paths
}

/// `pvgpu-ctl` driving a backend over HTTPS as from another host (the
/// way a Slurm prolog on a compute node reaches a GPU server): token and
/// CA from the environment, tenants with GPU lists and members, GPUs
/// drained and resumed; no token, a wrong authority or plain HTTP get
/// clear errors.
#[test]
fn an_operator_drives_a_backend_over_https() {
    let dir = std::env::temp_dir().join(format!("pvgpu-ctl-https-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (ca, cert, key) = tls_files(&dir);
    let token_file = dir.join("token");
    std::fs::write(&token_file, "a-token-of-at-least-sixteen-bytes").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let token = pvgpu_ring::tcp_auth::TcpKey::from_file(&token_file).unwrap();
    let tenants = pvgpu_backend::tenants::Tenants::open(&dir.join("state")).unwrap();
    let cfg = Config {
        listen: vec![Listen::Local(dir.join("local.sock"))],
        session: SessionConfig::default(),
        admission: pvgpu_backend::config::AdmissionConfig { tenants: Some(Arc::new(tenants)), ..Default::default() },
        control: ControlSocket::Off,
        metrics: None,
        control_http: Some(pvgpu_backend::config::ControlHttp {
            addr: "127.0.0.1:0".into(),
            token,
            tls: Some(pvgpu_backend::tls::server_config(&cert, &key).unwrap()),
        }),
        peers: Vec::new(),
    };
    let backend = Backend::start_threads(Arc::new(HostExecutor::with_devices(1 << 30, 2)), cfg).unwrap();
    let url = format!("https://{}", backend.control_http_addr().unwrap());
    let remote = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_pvgpu-ctl"))
            .env("PVGPU_CTL_CONTROL", &url)
            .env("PVGPU_CTL_TOKEN_FILE", &token_file)
            .env("PVGPU_CTL_CA", &ca)
            .args(args)
            .output()
            .expect("cannot run pvgpu-ctl")
    };
    let uid = format!("uid:{}", nix::unistd::getuid());
    let added = stdout(&remote(&["tenant", "add", "lab", "--memory", "1GiB", "--gpus", "1", "--member", &uid]));
    assert!(added.contains("GPUs 1"), "{added}");
    let listed = stdout(&remote(&["tenant", "list"]));
    assert!(listed.lines().any(|l| l.starts_with("lab") && l.ends_with(&uid)), "{listed}");

    // The member's session sees GPU 1 only, as its device 0.
    let client = Client::connect(&BackendAddr::Local(dir.join("local.sock")), &Options::default()).unwrap();
    client.init().unwrap();
    assert_eq!(client.device_count().unwrap(), 1);
    let ctx = client.primary_ctx_retain(0).unwrap();
    client.mem_alloc(ctx, 1 << 20).unwrap();
    let devices = stdout(&remote(&["devices"]));
    let row = devices.lines().find(|l| l.trim_start().starts_with('1')).expect("GPU 1's row");
    assert!(row.contains("open") && row.trim_end().ends_with('1'), "session 1 on GPU 1: {devices}");

    let drained = stdout(&remote(&["device", "drain", "0", "--wait", "5"]));
    assert!(drained.contains("GPU 0 drained") && drained.contains("GPU 0 is free"), "{drained}");
    let busy = remote(&["device", "drain", "1", "--wait", "1"]);
    assert_eq!(busy.status.code(), Some(1), "a GPU in use is not waited out in 1 s");
    assert!(
        String::from_utf8_lossy(&busy.stderr).contains("still has live sessions on it: 1"),
        "{}",
        String::from_utf8_lossy(&busy.stderr)
    );
    let gpus: Vec<pvgpu_ctl::api::Gpu> = serde_json::from_str(&stdout(&remote(&["devices", "--json"]))).unwrap();
    assert!(gpus.iter().all(|g| g.drained));
    stdout(&remote(&["device", "resume", "0"]));
    stdout(&remote(&["device", "resume", "1"]));
    drop(client);

    // What goes wrong says what to do.
    let no_token = Command::new(env!("CARGO_BIN_EXE_pvgpu-ctl")).args(["--control", &url, "devices"]).output().unwrap();
    assert!(String::from_utf8_lossy(&no_token.stderr).contains("--token FILE"), "{no_token:?}");
    let other = dir.join("other");
    std::fs::create_dir_all(&other).unwrap();
    let (other_ca, _, _) = tls_files(&other);
    let wrong_ca = Command::new(env!("CARGO_BIN_EXE_pvgpu-ctl"))
        .args(["--control", &url, "--token"])
        .arg(&token_file)
        .arg("--ca")
        .arg(&other_ca)
        .arg("devices")
        .output()
        .unwrap();
    assert!(!wrong_ca.status.success());
    assert!(String::from_utf8_lossy(&wrong_ca.stderr).contains("certificate"), "{}", String::from_utf8_lossy(&wrong_ca.stderr));
    let wrong_token = dir.join("wrong");
    std::fs::write(&wrong_token, "not-the-token-not-the-token").unwrap();
    let refused = Command::new(env!("CARGO_BIN_EXE_pvgpu-ctl"))
        .env("PVGPU_CTL_CA", &ca)
        .args(["--control", &url, "--token"])
        .arg(&wrong_token)
        .arg("devices")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&refused.stderr).contains("HTTP 401"), "{}", String::from_utf8_lossy(&refused.stderr));
    backend.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A backend on this host with `devices` devices, serving the local
/// transport at `dir/NAME.sock` and its control socket at
/// `dir/NAME-control.sock`, knowing `peers`.
fn backend_at(dir: &Path, name: &str, devices: usize, peers: Vec<pvgpu_backend::peers::Peer>) -> Backend {
    let cfg = Config {
        listen: vec![Listen::Local(dir.join(format!("{name}.sock")))],
        session: SessionConfig::default(),
        admission: Default::default(),
        control: ControlSocket::At(dir.join(format!("{name}-control.sock"))),
        metrics: None,
        control_http: None,
        peers,
    };
    Backend::start_threads(Arc::new(HostExecutor::with_devices(1 << 30, devices)), cfg).unwrap()
}

#[test]
fn draining_a_gpu_moves_its_sessions_to_a_peer() {
    let dir = temp_dir().join("drain");
    std::fs::create_dir_all(&dir).unwrap();
    let b = backend_at(&dir, "b", 2, Vec::new());
    let spec = format!("name=b,control=unix:{},address=local:{}", dir.join("b-control.sock").display(), dir.join("b.sock").display());
    let a = backend_at(&dir, "a", 2, vec![spec.parse::<pvgpu_backend::peers::PeerSpec>().unwrap().open().unwrap()]);
    let (a_ctl, b_ctl) = (dir.join("a-control.sock"), dir.join("b-control.sock"));

    let client = Arc::new(Client::connect(&BackendAddr::Local(dir.join("a.sock")), &Options::default()).unwrap());
    client.init().unwrap();
    let ctx = client.primary_ctx_retain(0).unwrap();
    let want: Vec<u8> = (0..256u32 << 10).map(|i| (i * 13 + 1) as u8).collect();
    let buf = client.mem_alloc(ctx, want.len() as u64).unwrap();
    client.memcpy_htod(buf, &want).unwrap();
    // The program goes on calling while its GPU is drained under it.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reads = {
        let (stop, c, want) = (stop.clone(), client.clone(), want.clone());
        std::thread::spawn(move || {
            let mut got = vec![0u8; want.len()];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                c.memcpy_dtoh(&mut got, buf).map_err(|e| e.to_string())?;
                if got != want {
                    return Err("the bytes came back changed".to_string());
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(())
        })
    };

    let peers = stdout(&ctl(&a_ctl, &["peers"]));
    assert!(peers.lines().nth(1).is_some_and(|l| l.starts_with("b ") && l.contains("local:")), "{peers}");
    let said = stdout(&ctl(&a_ctl, &["device", "drain", "0", "--move-to", "b", "--wait", "20"]));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    reads.join().unwrap().expect("the program's reads through the move");
    assert!(said.contains("moved to b (local:") && said.contains("GPU 0 is free"), "{said}");
    // The program's next call takes its session back at the peer (its
    // reading thread may have stopped before it made one).
    let mut got = vec![0u8; want.len()];
    client.memcpy_dtoh(&mut got, buf).unwrap();
    assert!(got == want);
    let at_b: Vec<Session> = serde_json::from_str(&stdout(&ctl(&b_ctl, &["sessions", "--json"]))).unwrap();
    assert_eq!(at_b.len(), 1, "the peer serves the program now");

    // A peer the backend does not know moves nothing, and says so.
    let c2 = Client::connect(&BackendAddr::Local(dir.join("a.sock")), &Options::default()).unwrap();
    c2.init().unwrap();
    // GPU 0 is drained: this program is given GPU 1 alone, its device 0.
    c2.primary_ctx_retain(0).unwrap();
    let said = stdout(&ctl(&a_ctl, &["device", "drain", "1", "--move-to", "c"]));
    assert!(said.contains("stays on GPU 1") && said.contains("No peer \"c\""), "{said}");
    drop((client, c2, a, b));
}

/// A peer without a GPU the session saw refuses its skeleton before the
/// pause: the session was never paused, and the program goes on at the
/// source; nothing is left behind.
#[test]
fn a_peer_without_the_session_s_gpus_refuses_it_before_the_pause() {
    let dir = temp_dir().join("fewer");
    std::fs::create_dir_all(&dir).unwrap();
    let small = backend_at(&dir, "small", 1, Vec::new());
    let spec =
        format!("name=small,control=unix:{},address=local:{}", dir.join("small-control.sock").display(), dir.join("small.sock").display());
    let a = backend_at(&dir, "a", 2, vec![spec.parse::<pvgpu_backend::peers::PeerSpec>().unwrap().open().unwrap()]);
    let a_ctl = dir.join("a-control.sock");
    let client = Client::connect(&BackendAddr::Local(dir.join("a.sock")), &Options::default()).unwrap();
    client.init().unwrap();
    let ctx = client.primary_ctx_retain(0).unwrap();
    let want = vec![0x5au8; 64 << 10];
    let buf = client.mem_alloc(ctx, want.len() as u64).unwrap();
    client.memcpy_htod(buf, &want).unwrap();
    let id = serde_json::from_str::<Vec<Session>>(&stdout(&ctl(&a_ctl, &["sessions", "--json"]))).unwrap()[0].id;

    let refused = std::thread::scope(|s| {
        let moving = s.spawn(|| ctl(&a_ctl, &["migrate", &id.to_string(), "--peer", "small"]));
        // Calls that wait, as a program makes them (the skeleton is
        // written at one).
        while !client.detached() && !moving.is_finished() {
            client.ctx_synchronize(ctx).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        moving.join().unwrap()
    });
    assert_eq!(refused.status.code(), Some(1));
    let said = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert!(said.contains("GPU 1") && said.contains("has 1") && said.contains("not paused"), "{said}");
    assert!(!client.detached(), "the session never left");
    assert!(stdout(&ctl(&dir.join("small-control.sock"), &["sessions"])).lines().count() <= 1, "the peer holds nothing");
    assert!(stdout(&ctl(&a_ctl, &["restores"])).lines().count() <= 1, "the source holds no snapshot");
    let mut got = vec![0u8; want.len()];
    client.memcpy_dtoh(&mut got, buf).unwrap();
    assert!(got == want, "the program goes on with its memory");
    drop((client, a, small));
}
