//! What a harness backend is set up with before it starts: TLS files, a
//! TCP key file, a TCP port.

use std::path::PathBuf;

/// PEM files of a TLS set-up made for the tests in `dir`: an authority
/// (`ca.pem`), and a certificate it signed for `localhost` and 127.0.0.1
/// (`cert.pem`) with its key (`key.pem`). Returns the three paths.
pub fn write_tls_files(dir: &std::path::Path) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().expect("key generation");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).expect("CA certificate");
    let key = KeyPair::generate().expect("key generation");
    let cert = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .expect("certificate parameters")
        .signed_by(&key, &ca, &ca_key)
        .expect("certificate");
    let paths = (dir.join("ca.pem"), dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&paths.0, ca.pem()).expect("writing ca.pem");
    std::fs::write(&paths.1, cert.pem()).expect("writing cert.pem");
    std::fs::write(&paths.2, key.serialize_pem()).expect("writing key.pem");
    paths
}

/// Writes a fresh random key file (mode 0600) at `path`.
pub fn write_key_file(path: &std::path::Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let mut raw = [0u8; 32];
    std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut raw)).expect("no /dev/urandom");
    let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).expect("cannot create the key file");
    std::io::Write::write_all(&mut f, hex.as_bytes()).expect("cannot write the key file");
}

/// A TCP port for a harness backend, free when chosen. It comes from
/// below the kernel's ephemeral range (32768 and up by default), so no
/// outgoing connection of another test takes it as its source port between
/// now and the backend's bind, or while [`Harness::restart`] rebinds it;
/// harnesses of this process never share one.
pub fn free_tcp_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let seed = std::process::id().wrapping_mul(7919);
    for _ in 0..SPAN {
        let port = (FIRST + seed.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) % SPAN) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free TCP port in {FIRST}..{}", FIRST + SPAN)
}
