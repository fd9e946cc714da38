//! The control API's routes: each request to one handler, each answer
//! JSON.

use super::Sessions;
use pvgpu_ctl::api::ErrorBody;
use serde::Serialize;
use tiny_http::{Header, Method, Request, Response};

/// An answer: status and JSON body.
type Answer = (u16, Vec<u8>);

/// Answers one request.
pub(super) fn answer(request: Request, sessions: &dyn Sessions) {
    let (status, body) = route(request.method(), request.url(), sessions);
    let mut response = Response::from_data(body).with_status_code(status);
    if let Ok(json) = Header::from_bytes("Content-Type", "application/json") {
        response.add_header(json);
    }
    if let Err(e) = request.respond(response) {
        tracing::debug!(error = %e, "control socket: the client left before its answer");
    }
}

fn route(method: &Method, url: &str, sessions: &dyn Sessions) -> Answer {
    let path = url.split('?').next().unwrap_or("");
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (method, parts.as_slice()) {
        (Method::Get, ["v1", "sessions"]) => ok(&sessions.list()),
        (Method::Get, ["v1", "sessions", id]) => with_session(id, |id| sessions.get(id)),
        (Method::Delete, ["v1", "sessions", id]) => with_session(id, |id| sessions.end(id)),
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

fn ok<T: Serialize>(value: &T) -> Answer {
    match serde_json::to_vec(value) {
        Ok(body) => (200, body),
        Err(e) => error(500, format!("cannot encode the answer: {e}")),
    }
}

fn error(status: u16, error: String) -> Answer {
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
                devices: vec![0],
                memory_bytes: 4096,
                age_seconds: 1.5,
                started_unix_seconds: 1,
            })
        }
        fn end(&self, id: u64) -> Option<Session> {
            self.get(id)
        }
    }

    fn status(method: Method, url: &str) -> u16 {
        route(&method, url, &One).0
    }

    #[test]
    fn routes_answer_by_method_and_path() {
        let (s, body) = route(&Method::Get, "/v1/sessions", &One);
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
        let (_, body) = route(&Method::Get, "/nothing", &One);
        let e: ErrorBody = serde_json::from_slice(&body).unwrap();
        assert!(e.error.contains("/nothing"));
    }
}
