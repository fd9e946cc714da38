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
    };
    let backend = Backend::start_threads(Arc::new(HostExecutor::new(1 << 30)), cfg).unwrap();
    let tcp = backend.tcp_addrs()[0].to_string();

    let added = stdout(&ctl(&control, &["tenant", "add", "lab-a", "--memory", "64MiB", "--sessions", "4"]));
    assert!(added.contains("tenant lab-a added (memory 64.0 MiB, 4 sessions)"), "{added}");
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
