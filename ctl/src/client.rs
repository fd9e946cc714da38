//! A client of the backend's control API: one HTTP/1.1 request per
//! connection on the control socket.

use crate::api::{CheckpointReport, CheckpointRequest, ErrorBody, RestoreReport, RestoreRequest, Session, Waiting};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

/// The most of an answer the client reads.
const MAX_ANSWER: u64 = 64 << 20;

/// Why a control request failed.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// Nothing answers at the socket.
    #[error(
        "Cannot reach a pvgpu backend's control socket at {path}: {source}. Is the backend running, with --control at this path, and may this user open it?"
    )]
    Connect {
        /// The socket.
        path: PathBuf,
        /// What connect said.
        #[source]
        source: std::io::Error,
    },
    /// The connection broke mid-request.
    #[error("The control connection at {path} failed: {source}")]
    Io {
        /// The socket.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
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

/// A backend's control socket.
#[derive(Debug, Clone)]
pub struct Control {
    path: PathBuf,
    timeout: Duration,
}

impl Control {
    /// The control socket at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Control {
        Control { path: path.into(), timeout: Duration::from_secs(30) }
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

    /// Hands a snapshot file to the backend for its guest to take back.
    pub fn restore(&self, req: &RestoreRequest) -> Result<RestoreReport, CtlError> {
        self.call_with("POST", "/v1/restore", Some(req))
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
        if !(200..300).contains(&status) {
            let message =
                serde_json::from_slice::<ErrorBody>(&body).map(|e| e.error).unwrap_or_else(|_| String::from_utf8_lossy(&body).into_owned());
            return Err(CtlError::Refused { status, message });
        }
        serde_json::from_slice(&body).map_err(|e| CtlError::Answer(format!("{e}")))
    }

    /// Sends one request with `body` (JSON, or empty); returns the status
    /// and body.
    pub fn request(&self, method: &str, path: &str, body: &[u8]) -> Result<(u16, Vec<u8>), CtlError> {
        let io = |source| CtlError::Io { path: self.path.clone(), source };
        let mut s = UnixStream::connect(&self.path).map_err(|source| CtlError::Connect { path: self.path.clone(), source })?;
        s.set_read_timeout(Some(self.timeout)).map_err(io)?;
        s.set_write_timeout(Some(self.timeout)).map_err(io)?;
        let kind = if body.is_empty() { "" } else { "Content-Type: application/json\r\n" };
        let head = format!("{method} {path} HTTP/1.1\r\nHost: pvgpu\r\nConnection: close\r\n{kind}Content-Length: {}\r\n\r\n", body.len());
        s.write_all(head.as_bytes()).map_err(io)?;
        s.write_all(body).map_err(io)?;
        let mut raw = Vec::new();
        s.take(MAX_ANSWER).read_to_end(&mut raw).map_err(io)?;
        parse_answer(&raw)
    }
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
    fn answers_split_into_status_and_body() {
        let raw = b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"error\":1}trailing";
        assert_eq!(parse_answer(raw).unwrap(), (404, b"{\"error\":1}".to_vec()));
        assert!(parse_answer(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab").is_err());
        assert!(parse_answer(b"garbage").is_err());
        assert!(parse_answer(b"HTTP/1.1 200 OK\r\nContent-Le").is_err());
    }
}
