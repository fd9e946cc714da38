//! The control API's routes: each request to one handler, each answer
//! JSON.

use super::Sessions;
use pvgpu_ctl::api::{CheckpointRequest, ErrorBody, RestoreRequest};
use serde::Serialize;
use std::io::Read;
use tiny_http::{Header, Method, Request, Response};

/// An answer: status and JSON body.
pub(super) type Answer = (u16, Vec<u8>);

/// The largest request body read.
const MAX_BODY: u64 = 64 << 10;

/// Over HTTP (`guard`): answers a request for one of the dashboard's
/// files, or one without the bearer token (401), and gives back the others
/// to be answered by [`answer`]. On the Unix socket every request passes.
pub(super) fn answer_unless_authorized(request: Request, guard: Option<&pvgpu_ring::tcp_auth::TcpKey>) -> Option<Request> {
    let Some(token) = guard else { return Some(request) };
    let path = request.url().split('?').next().unwrap_or("");
    let (status, body, kind) = if let Some((body, kind)) = super::dashboard::asset(request.method(), path) {
        (200, body.as_bytes().to_vec(), kind)
    } else if bearer(&request).is_some_and(|b| token.matches(b.as_bytes())) {
        return Some(request);
    } else {
        with_json(error(401, "This API needs the header Authorization: Bearer TOKEN (the file given to --control-token)".into()))
    };
    respond(request, status, body, kind);
    None
}

/// Sends `request` its answer.
pub(super) fn respond(request: Request, status: u16, body: Vec<u8>, kind: &str) {
    let mut response = Response::from_data(body).with_status_code(status);
    if let Ok(h) = Header::from_bytes("Content-Type", kind) {
        response.add_header(h);
    }
    if let Err(e) = request.respond(response) {
        tracing::debug!(error = %e, "control socket: the client left before its answer");
    }
}

/// Answers one request that may be answered ([`answer_unless_authorized`]).
pub(super) fn answer(mut request: Request, sessions: &dyn Sessions) {
    if (request.method(), request.url()) == (&Method::Post, "/v1/restore/upload") {
        // A snapshot as the body, streamed into the backend (no size cap
        // but its Content-Length).
        let len = request.body_length().map(|n| n as u64);
        let (status, body, kind) = with_json(done(sessions.restore_upload(request.as_reader(), len)));
        return respond(request, status, body, kind);
    }
    let mut body = Vec::new();
    let read = request.as_reader().take(MAX_BODY + 1).read_to_end(&mut body);
    let path = request.url().split('?').next().unwrap_or("");
    let (status, body, kind) = if read.is_err() || body.len() as u64 > MAX_BODY {
        with_json(error(413, format!("A request body must be at most {MAX_BODY} bytes of JSON")))
    } else if (request.method(), path) == (&Method::Get, "/metrics") {
        metrics(sessions)
    } else {
        with_json(route(request.method(), request.url(), &body, sessions))
    };
    respond(request, status, body, kind);
}

/// The bearer token a request carries.
fn bearer(request: &Request) -> Option<String> {
    let h = request.headers().iter().find(|h| h.field.equiv("Authorization"))?;
    h.value.as_str().strip_prefix("Bearer ").map(|t| t.trim().to_string())
}

fn with_json((status, body): Answer) -> (u16, Vec<u8>, &'static str) {
    (status, body, "application/json")
}

/// `GET /metrics`: Prometheus' text.
fn metrics(sessions: &dyn Sessions) -> (u16, Vec<u8>, &'static str) {
    match sessions.metrics() {
        Some(m) => render_metrics(m),
        None => (404, b"this backend keeps no metrics\n".to_vec(), "text/plain"),
    }
}

/// The answer to a scrape of `m`.
pub(super) fn render_metrics(m: &crate::metrics::Metrics) -> (u16, Vec<u8>, &'static str) {
    match m.render() {
        Ok(text) => (200, text.into_bytes(), crate::metrics::CONTENT_TYPE),
        Err(_) => (500, b"cannot encode the metrics\n".to_vec(), "text/plain"),
    }
}

fn route(method: &Method, url: &str, body: &[u8], sessions: &dyn Sessions) -> Answer {
    let path = url.split('?').next().unwrap_or("");
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (method, parts.as_slice()) {
        (Method::Get, ["v1", "sessions"]) => ok(&sessions.list()),
        (Method::Get, ["v1", "sessions", id]) => with_session(id, |id| sessions.get(id)),
        (Method::Delete, ["v1", "sessions", id]) => with_session(id, |id| sessions.end(id)),
        (Method::Post, ["v1", "sessions", id, "checkpoint"]) => match (id.parse::<u64>(), parse::<CheckpointRequest>(body)) {
            (Err(_), _) => error(400, format!("{id:?} is not a session number")),
            (_, Err(e)) => e,
            (Ok(n), Ok(req)) => done(sessions.checkpoint(n, req)),
        },
        (Method::Post, ["v1", "sessions", id, "migrate"]) => match (id.parse::<u64>(), parse::<pvgpu_ctl::api::MigrateRequest>(body)) {
            (Err(_), _) => error(400, format!("{id:?} is not a session number")),
            (_, Err(e)) => e,
            (Ok(n), Ok(req)) => done(sessions.migrate(n, req)),
        },
        (Method::Get, ["v1", "peers"]) => ok(&sessions.peers()),
        (Method::Get, ["v1", "restores"]) => ok(&sessions.waiting()),
        (Method::Get, ["v1", "devices"]) => ok(&sessions.devices()),
        (Method::Post | Method::Delete, ["v1", "devices", n, "drain"]) => match n.parse::<usize>() {
            Ok(n) => done(sessions.drain(n, *method == Method::Post)),
            Err(_) => error(400, format!("{n:?} is not a GPU number")),
        },
        (Method::Get, ["v1", "summary"]) => match sessions.metrics() {
            Some(m) => ok(&m.summary()),
            None => error(404, "This backend keeps no metrics".into()),
        },
        (Method::Post, ["v1", "restore"]) => match parse::<RestoreRequest>(body) {
            Ok(req) => done(sessions.restore(req)),
            Err(e) => e,
        },
        (Method::Post, ["v1", "restores", "discard"]) => match parse::<pvgpu_ctl::api::DiscardRequest>(body) {
            Ok(req) => done(sessions.discard(req)),
            Err(e) => e,
        },
        (Method::Post, ["v1", "prepare"]) => match parse::<pvgpu_ctl::api::PrepareRequest>(body) {
            Ok(req) => done(sessions.prepare(req)),
            Err(e) => e,
        },
        (Method::Post, ["v1", "check"]) => match parse::<pvgpu_ctl::snapshot::Meta>(body) {
            Ok(meta) => done(sessions.check(meta).map(|()| serde_json::json!({"fits": true}))),
            Err(e) => e,
        },
        (Method::Post, ["v1", "moves"]) => match parse::<pvgpu_ctl::api::MoveRecord>(body) {
            Ok(req) => done(sessions.record_move(req).map(|()| serde_json::json!({"recorded": true}))),
            Err(e) => e,
        },
        (_, ["v1", "tenants", ..]) => super::tenant_routes::route(method, &parts[1..], body, sessions.tenants()),
        (_, ["v1", "sessions"] | ["v1", "sessions", _]) => error(405, format!("{method} is not allowed on {path}")),
        _ => error(404, format!("No such resource: {path} (see `pvgpu-ctl --help`)")),
    }
}

fn with_session(id: &str, f: impl FnOnce(u64) -> Option<pvgpu_ctl::api::Session>) -> Answer {
    let Ok(n) = id.parse::<u64>() else {
        return error(400, format!("{id:?} is not a session number"));
    };
    match f(n) {
        Some(s) => ok(&s),
        None => error(404, format!("No live session {n} (`pvgpu-ctl sessions` lists them)")),
    }
}

pub(super) fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Answer> {
    serde_json::from_slice(body).map_err(|e| error(400, format!("The request body is not the JSON expected: {e}")))
}

pub(super) fn done<T: Serialize>(r: Result<T, super::Refusal>) -> Answer {
    match r {
        Ok(v) => ok(&v),
        Err(r) => error(r.status, r.message),
    }
}

pub(super) fn ok<T: Serialize>(value: &T) -> Answer {
    match serde_json::to_vec(value) {
        Ok(body) => (200, body),
        Err(e) => error(500, format!("cannot encode the answer: {e}")),
    }
}

pub(super) fn error(status: u16, error: String) -> Answer {
    let body = serde_json::to_vec(&ErrorBody { error }).unwrap_or_default();
    (status, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pvgpu_ctl::api::Session;

    struct One;
    impl Sessions for One {
        fn list(&self) -> Vec<Session> {
            self.get(7).into_iter().collect()
        }
        fn get(&self, id: u64) -> Option<Session> {
            (id == 7).then(|| Session {
                id,
                peer: "uid:1000".into(),
                transport: "local".into(),
                tenant: None,
                key: None,
                devices: vec![0],
                memory_bytes: 4096,
                age_seconds: 1.5,
                started_unix_seconds: 1,
                gpu_turn: None,
                gpu_turn_seconds: None,
                restored: None,
            })
        }
        fn end(&self, id: u64) -> Option<Session> {
            self.get(id)
        }
        fn checkpoint(&self, id: u64, _: CheckpointRequest) -> Result<pvgpu_ctl::api::CheckpointReport, super::super::Refusal> {
            Err(super::super::Refusal::new(409, format!("no checkpoint of {id} here")))
        }
        fn restore(&self, _: RestoreRequest) -> Result<pvgpu_ctl::api::RestoreReport, super::super::Refusal> {
            Err(super::super::Refusal::new(422, "no".into()))
        }
    }

    fn status(method: Method, url: &str) -> u16 {
        route(&method, url, b"", &One).0
    }

    #[test]
    fn routes_answer_by_method_and_path() {
        let (s, body) = route(&Method::Get, "/v1/sessions", b"", &One);
        assert_eq!(s, 200);
        let list: Vec<Session> = serde_json::from_slice(&body).unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].memory_bytes, 4096);
        assert_eq!(status(Method::Get, "/v1/sessions/7"), 200);
        assert_eq!(status(Method::Delete, "/v1/sessions/7"), 200);
        assert_eq!(status(Method::Get, "/v1/sessions/8"), 404);
        assert_eq!(status(Method::Delete, "/v1/sessions/x"), 400);
        assert_eq!(status(Method::Post, "/v1/sessions"), 405);
        assert_eq!(status(Method::Get, "/v2"), 404);
        assert_eq!(route(&Method::Get, "/v1/peers", b"", &One), (200, b"[]".to_vec()));
        assert_eq!(route(&Method::Post, "/v1/sessions/7/migrate", br#"{"peer":"b"}"#, &One).0, 404, "no peers here");
        assert_eq!(route(&Method::Post, "/v1/sessions/7/migrate", b"{}", &One).0, 400, "a peer must be named");
        assert_eq!(route(&Method::Post, "/v1/sessions/x/migrate", br#"{"peer":"b"}"#, &One).0, 400);
        let (_, body) = route(&Method::Get, "/nothing", b"", &One);
        let e: ErrorBody = serde_json::from_slice(&body).unwrap();
        assert!(e.error.contains("/nothing"));
        let req = br#"{"file": "/tmp/x"}"#;
        assert_eq!(route(&Method::Post, "/v1/sessions/7/checkpoint", req, &One).0, 409, "the supervisor's refusal");
        assert_eq!(route(&Method::Post, "/v1/sessions/7/checkpoint", b"{", &One).0, 400);
        assert_eq!(route(&Method::Post, "/v1/restore", req, &One).0, 422);
    }
}
