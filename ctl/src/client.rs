//! A client of the backend's control API: one HTTP/1.1 request per
//! connection, on the control socket, or over TCP (plain or TLS) with a
//! bearer token where the backend serves `--control-http`.

use crate::api::{CheckpointReport, CheckpointRequest, ErrorBody, RestoreReport, RestoreRequest, Session, Waiting};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The most of an answer the client reads.
const MAX_ANSWER: u64 = 64 << 20;

/// Where a backend serves its control API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// The control socket (`unix:PATH`).
    Unix(PathBuf),
    /// `--control-http` without TLS (`http://HOST:PORT`).
    Http(String),
    /// `--control-http` with `--control-tls-cert` (`https://HOST:PORT`).
    Https(String),
}

impl Endpoint {
    /// Parses `unix:PATH`, `http://HOST:PORT` or `https://HOST:PORT`.
    pub fn parse(s: &str) -> Result<Endpoint, String> {
        let authority = |rest: &str| {
            let rest = rest.trim_end_matches('/');
            let ok = rest.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
            if ok { Ok(rest.to_string()) } else { Err(format!("{s:?}: expected HOST:PORT after the scheme")) }
        };
        if let Some(rest) = s.strip_prefix("https://") {
            authority(rest).map(Endpoint::Https)
        } else if let Some(rest) = s.strip_prefix("http://") {
            authority(rest).map(Endpoint::Http)
        } else {
            crate::parse_address(s)
                .map(Endpoint::Unix)
                .map_err(|_| format!("{s:?} is not a control address: expected unix:PATH, http://HOST:PORT or https://HOST:PORT"))
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Unix(p) => write!(f, "unix:{}", p.display()),
            Endpoint::Http(a) => write!(f, "http://{a}"),
            Endpoint::Https(a) => write!(f, "https://{a}"),
        }
    }
}

/// Why a control request failed.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// Nothing answers there.
    #[error(
        "Cannot reach a pvgpu backend's control API at {address}: {source}. Is the backend running, serving it there (--control, or --control-http), and may this user open it?"
    )]
    Connect {
        /// Where.
        address: String,
        /// What connect said.
        #[source]
        source: std::io::Error,
    },
    /// The connection broke mid-request.
    #[error("The control connection to {address} failed: {source}")]
    Io {
        /// Where.
        address: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The TLS set-up (the authority file, the server's name) is not usable.
    #[error("TLS to the control API: {0}")]
    Tls(String),
    /// The answer was not HTTP, or its body not the JSON expected.
    #[error("The backend's answer could not be read: {0}")]
    Answer(String),
    /// The backend refused or failed the request.
    #[error("{message} (HTTP {status})")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The backend's reason.
        message: String,
    },
}

/// A backend's control API.
#[derive(Clone)]
pub struct Control {
    endpoint: Endpoint,
    /// The bearer token HTTP requests carry.
    token: Option<String>,
    /// TLS client settings (`https`).
    tls: Option<Arc<rustls::ClientConfig>>,
    timeout: Duration,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Control({})", self.endpoint)
    }
}

/// The TLS client settings for `https`: the authorities in PEM file `ca`
/// (one that signed the backend's certificate); without one, those the
/// system trusts (`/etc/ssl/certs/ca-certificates.crt`).
pub fn tls_config(ca: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, CtlError> {
    const SYSTEM: &str = "/etc/ssl/certs/ca-certificates.crt";
    let path = ca.unwrap_or(Path::new(SYSTEM));
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path).map_err(|e| CtlError::Tls(format!("cannot read {}: {e}", path.display())))?;
    for cert in certs {
        let cert = cert.map_err(|e| CtlError::Tls(format!("{}: {e}", path.display())))?;
        roots.add(cert).map_err(|e| CtlError::Tls(format!("{}: {e}", path.display())))?;
    }
    if roots.is_empty() {
        return Err(CtlError::Tls(format!("{} holds no certificate", path.display())));
    }
    Ok(Arc::new(rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth()))
}

impl Control {
    /// The control socket at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Control {
        Control { endpoint: Endpoint::Unix(path.into()), token: None, tls: None, timeout: Duration::from_secs(30) }
    }

    /// The control API at `endpoint`: over HTTP with `token` (the bytes of
    /// the backend's `--control-token` file), over TLS trusting the
    /// authority in `ca` (else the system's).
    pub fn at(endpoint: Endpoint, token: Option<String>, ca: Option<&Path>) -> Result<Control, CtlError> {
        let tls = match endpoint {
            Endpoint::Https(_) => Some(tls_config(ca)?),
            _ => None,
        };
        Ok(Control { endpoint, token, tls, timeout: Duration::from_secs(30) })
    }

    /// Where requests go.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The live sessions, lowest number first.
    pub fn sessions(&self) -> Result<Vec<Session>, CtlError> {
        self.call("GET", "/v1/sessions")
    }

    /// Session `id`.
    pub fn session(&self, id: u64) -> Result<Session, CtlError> {
        self.call("GET", &format!("/v1/sessions/{id}"))
    }

    /// Ends session `id`; returns it as it was.
    pub fn end(&self, id: u64) -> Result<Session, CtlError> {
        self.call("DELETE", &format!("/v1/sessions/{id}"))
    }

    /// Checkpoints session `id` as `req` says; waits for the session's
    /// next call that waits (at most the request's timeout).
    pub fn checkpoint(&self, id: u64, req: &CheckpointRequest) -> Result<CheckpointReport, CtlError> {
        let wait = Duration::from_secs(req.timeout_seconds.unwrap_or(60) + 30);
        let c = Control { timeout: self.timeout.max(wait), ..self.clone() };
        c.call_with("POST", &format!("/v1/sessions/{id}/checkpoint"), Some(req))
    }

    /// Has the backend move session `id` to one of its peers itself; waits
    /// for the session's next call that waits (at most the request's
    /// timeout) and then for the handover, up to five minutes more.
    pub fn migrate(&self, id: u64, req: &crate::api::MigrateRequest) -> Result<crate::migrate::MigrateReport, CtlError> {
        let wait = Duration::from_secs(req.timeout_seconds.unwrap_or(60) + 300);
        let c = Control { timeout: self.timeout.max(wait), ..self.clone() };
        c.call_with("POST", &format!("/v1/sessions/{id}/migrate"), Some(req))
    }

    /// Hands a snapshot file to the backend for its guest to take back.
    pub fn restore(&self, req: &RestoreRequest) -> Result<RestoreReport, CtlError> {
        self.call_with("POST", "/v1/restore", Some(req))
    }

    /// Lets go of what the backend holds for a snapshot.
    pub fn discard(&self, req: &crate::api::DiscardRequest) -> Result<crate::api::DiscardReport, CtlError> {
        self.call_with("POST", "/v1/restores/discard", Some(req))
    }

    /// Prepares a worker from a skeleton checkpoint.
    pub fn prepare(&self, req: &crate::api::PrepareRequest) -> Result<crate::api::PrepareReport, CtlError> {
        self.call_with("POST", "/v1/prepare", Some(req))
    }

    /// Asks the backend whether the session a snapshot describes (its
    /// description only, objects left out) could be restored there: its
    /// GPUs, their models, its quotas. `Refused` with HTTP 422 where not.
    pub fn check(&self, meta: &crate::snapshot::Meta) -> Result<serde_json::Value, CtlError> {
        self.call_with("POST", "/v1/check", Some(meta))
    }

    /// Tells the backend where a session it checkpointed lives now.
    pub fn record_move(&self, req: &crate::api::MoveRecord) -> Result<serde_json::Value, CtlError> {
        self.call_with("POST", "/v1/moves", Some(req))
    }

    /// The restored snapshots whose guests have not taken them back yet.
    pub fn waiting(&self) -> Result<Vec<Waiting>, CtlError> {
        self.call("GET", "/v1/restores")
    }

    /// Sends `method path` and decodes a success's body as `T`.
    pub fn call<T: DeserializeOwned>(&self, method: &str, path: &str) -> Result<T, CtlError> {
        self.call_with::<T, ()>(method, path, None)
    }

    /// Sends `method path` with `body` as JSON, and decodes a success's
    /// body as `T`.
    pub fn call_with<T: DeserializeOwned, B: Serialize>(&self, method: &str, path: &str, body: Option<&B>) -> Result<T, CtlError> {
        let body = body.map(serde_json::to_vec).transpose().map_err(|e| CtlError::Answer(format!("cannot encode the request: {e}")))?;
        let (status, body) = self.request(method, path, body.as_deref().unwrap_or_default())?;
        decode(status, &body)
    }

    /// Sends one request with `body` (JSON, or empty); returns the status
    /// and body.
    pub fn request(&self, method: &str, path: &str, body: &[u8]) -> Result<(u16, Vec<u8>), CtlError> {
        let kind = if body.is_empty() { "" } else { "Content-Type: application/json\r\n" };
        self.send(method, path, kind, &mut &body[..], body.len() as u64)
    }

    /// Uploads a snapshot file to the backend (`POST /v1/restore/upload`),
    /// streamed as the request's body: a backend on another host takes it
    /// without a shared file system.
    pub fn restore_upload(&self, file: &std::path::Path) -> Result<RestoreReport, CtlError> {
        let address = self.endpoint.to_string();
        let io = |source| CtlError::Io { address: address.clone(), source };
        let mut f = std::fs::File::open(file).map_err(io)?;
        let len = f.metadata().map_err(io)?.len();
        // The backend checks the whole file before it answers.
        let wait = Duration::from_secs(60 + len / (200 << 20));
        let c = Control { timeout: self.timeout.max(wait), ..self.clone() };
        let (status, body) = c.send("POST", "/v1/restore/upload", "Content-Type: application/octet-stream\r\n", &mut f, len)?;
        decode(status, &body)
    }

    /// Sends one request whose body is `len` bytes read from `body`.
    fn send(&self, method: &str, path: &str, kind: &str, body: &mut dyn Read, len: u64) -> Result<(u16, Vec<u8>), CtlError> {
        let address = self.endpoint.to_string();
        let io = |source| CtlError::Io { address: address.clone(), source };
        let connect = |source| CtlError::Connect { address: address.clone(), source };
        let auth = self.token.as_ref().map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
        let host = match &self.endpoint {
            Endpoint::Unix(_) => "pvgpu",
            Endpoint::Http(a) | Endpoint::Https(a) => a.as_str(),
        };
        let head = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{auth}{kind}Content-Length: {len}\r\n\r\n");
        let mut raw = Vec::new();
        match &self.endpoint {
            Endpoint::Unix(p) => {
                let s = UnixStream::connect(p).map_err(connect)?;
                s.set_read_timeout(Some(self.timeout)).map_err(io)?;
                s.set_write_timeout(Some(self.timeout)).map_err(io)?;
                exchange(s, &head, body, &mut raw).map_err(io)?;
            }
            Endpoint::Http(a) => exchange(self.tcp(a).map_err(connect)?, &head, body, &mut raw).map_err(io)?,
            Endpoint::Https(a) => {
                let sock = self.tcp(a).map_err(connect)?;
                let name = a.rsplit_once(':').map_or(a.as_str(), |(h, _)| h).trim_start_matches('[').trim_end_matches(']');
                let name = ServerName::try_from(name.to_string()).map_err(|e| CtlError::Tls(format!("{name:?}: {e}")))?;
                let config = self.tls.clone().ok_or_else(|| CtlError::Tls("no TLS settings".into()))?;
                let conn = rustls::ClientConnection::new(config, name).map_err(|e| CtlError::Tls(e.to_string()))?;
                exchange(rustls::StreamOwned::new(conn, sock), &head, body, &mut raw).map_err(io)?;
            }
        }
        parse_answer(&raw)
    }

    /// A TCP connection to `addr` (`host:port`) within the timeout.
    fn tcp(&self, addr: &str) -> std::io::Result<TcpStream> {
        let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "the name resolves to no address");
        for a in addr.to_socket_addrs()? {
            match TcpStream::connect_timeout(&a, self.timeout) {
                Ok(s) => {
                    s.set_read_timeout(Some(self.timeout))?;
                    s.set_write_timeout(Some(self.timeout))?;
                    s.set_nodelay(true)?;
                    return Ok(s);
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}

/// Writes one request and reads its answer to the end (the server closes
/// the connection after it). A TLS peer that closes without its
/// close_notify after the answer has come is taken as done.
fn exchange<S: Read + Write>(mut s: S, head: &str, body: &mut dyn Read, raw: &mut Vec<u8>) -> std::io::Result<()> {
    s.write_all(head.as_bytes())?;
    std::io::copy(body, &mut s)?;
    s.flush()?;
    match s.take(MAX_ANSWER).read_to_end(raw) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => Ok(()),
        Err(e) => Err(e),
    }
}

/// A success's body as `T`, or the refusal's message.
fn decode<T: DeserializeOwned>(status: u16, body: &[u8]) -> Result<T, CtlError> {
    if !(200..300).contains(&status) {
        let message =
            serde_json::from_slice::<ErrorBody>(body).map(|e| e.error).unwrap_or_else(|_| String::from_utf8_lossy(body).into_owned());
        return Err(CtlError::Refused { status, message });
    }
    serde_json::from_slice(body).map_err(|e| CtlError::Answer(format!("{e}")))
}

/// Splits an HTTP/1.1 answer read to its end into status and body.
fn parse_answer(raw: &[u8]) -> Result<(u16, Vec<u8>), CtlError> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut answer = httparse::Response::new(&mut headers);
    let head = match answer.parse(raw) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Err(CtlError::Answer("the answer ended inside its headers".into())),
        Err(e) => return Err(CtlError::Answer(format!("not HTTP: {e}"))),
    };
    let status = answer.code.ok_or_else(|| CtlError::Answer("no status".into()))?;
    let body = &raw[head..];
    let length = answer
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse::<usize>().ok());
    match length {
        Some(n) if n <= body.len() => Ok((status, body[..n].to_vec())),
        Some(n) => Err(CtlError::Answer(format!("the body ended after {} of {n} bytes", body.len()))),
        None => Ok((status, body.to_vec())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_as_written() {
        assert_eq!(Endpoint::parse("unix:/run/pvgpu/control.sock"), Ok(Endpoint::Unix("/run/pvgpu/control.sock".into())));
        assert_eq!(Endpoint::parse("https://gpu1.lab:7310"), Ok(Endpoint::Https("gpu1.lab:7310".into())));
        assert_eq!(Endpoint::parse("http://127.0.0.1:7310/"), Ok(Endpoint::Http("127.0.0.1:7310".into())));
        assert_eq!(Endpoint::parse("https://[::1]:7310"), Ok(Endpoint::Https("[::1]:7310".into())));
        for bad in ["https://gpu1", "http://:80", "tcp:1.2.3.4:5", "/run/x"] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn answers_split_into_status_and_body() {
        let raw = b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"error\":1}trailing";
        assert_eq!(parse_answer(raw).unwrap(), (404, b"{\"error\":1}".to_vec()));
        assert!(parse_answer(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab").is_err());
        assert!(parse_answer(b"garbage").is_err());
        assert!(parse_answer(b"HTTP/1.1 200 OK\r\nContent-Le").is_err());
    }
}
