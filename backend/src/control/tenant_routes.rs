//! The control API's tenant and key routes (`/v1/tenants`, `/v1/keys`).

use super::TenantAdmin;
use super::routes::{Answer, done, error, ok, parse};
use pvgpu_ctl::api::{IssueKey, NewTenant, Quota};
use tiny_http::Method;

/// Answers `parts` (the path after `v1`).
pub(super) fn route(method: &Method, parts: &[&str], body: &[u8], tenants: Option<&dyn TenantAdmin>) -> Answer {
    let Some(t) = tenants else {
        return error(404, "This backend keeps no tenants: start it with --state-dir DIR".into());
    };
    match (method, parts) {
        (Method::Get, ["tenants"]) => ok(&t.list()),
        (Method::Post, ["tenants"]) => match parse::<NewTenant>(body) {
            Ok(req) => done(t.add(req)),
            Err(e) => e,
        },
        (Method::Get, ["tenants", name]) => done(t.get(name)),
        (Method::Delete, ["tenants", name]) => done(t.remove(name)),
        (Method::Put, ["tenants", name, "quota"]) => match parse::<Quota>(body) {
            Ok(q) => done(t.set_quota(name, q)),
            Err(e) => e,
        },
        (Method::Put, ["tenants", name, "members", peer]) => done(t.set_member(name, peer, true)),
        (Method::Delete, ["tenants", name, "members", peer]) => done(t.set_member(name, peer, false)),
        (Method::Get, ["tenants", name, "keys"]) => done(t.keys(name)),
        (Method::Post, ["tenants", name, "keys"]) => {
            let req = if body.is_empty() { Ok(IssueKey::default()) } else { parse::<IssueKey>(body) };
            match req {
                Ok(req) => done(t.issue(name, req)),
                Err(e) => e,
            }
        }
        (Method::Delete, ["tenants", name, "keys"]) => done(t.revoke(name, None)),
        (Method::Delete, ["tenants", name, "keys", id]) => done(t.revoke(name, Some(id))),
        _ => error(405, format!("{method} is not allowed on /v1/{}", parts.join("/"))),
    }
}
