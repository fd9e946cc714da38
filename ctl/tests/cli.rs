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
