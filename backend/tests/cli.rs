//! The `pvgpu-backend` binary as an operator runs it.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pvgpu-backend"))
}

#[test]
fn help_names_the_options() {
    let out = bin().arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for opt in ["--listen", "--executor", "--isolation", "--mem-quota", "--max-sessions"] {
        assert!(text.contains(opt), "--help lacks {opt}");
    }
}

#[test]
fn refuses_to_start_without_listeners() {
    let out = bin().args(["--executor", "host"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--listen"));
}

#[test]
fn bad_listen_address_is_explained() {
    let out = bin().args(["--listen", "udp:1.2.3.4:5"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("local:PATH, tcp:HOST:PORT, tls:HOST:PORT, rdma:HOST:PORT or xen"));
}

#[test]
fn missing_driver_is_a_clear_error() {
    let out = bin().args(["--listen", "tcp:127.0.0.1:0", "--executor", "cuda"]).env("LD_LIBRARY_PATH", "/nonexistent").output();
    let out = out.unwrap();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("libcuda") || err.contains("CUDA"), "unclear error: {err}");
    }
}

#[test]
fn stops_cleanly_on_sigterm() {
    let dir = std::env::temp_dir().join(format!("pvgpu-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("b.sock");
    let mut child =
        bin().args(["--executor", "host", "--listen"]).arg(format!("local:{}", sock.display())).stderr(Stdio::null()).spawn().unwrap();
    let t = Instant::now();
    while !sock.exists() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(sock.exists(), "the backend did not create its socket");
    // A second backend on the same path is refused.
    let out = bin().args(["--executor", "host", "--listen"]).arg(format!("local:{}", sock.display())).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("in use"));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(status.success(), "exit status {status}");
    assert!(!sock.exists(), "the socket is removed on shutdown");
    let _ = std::fs::remove_dir_all(dir);
}
