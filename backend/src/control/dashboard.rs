//! The web dashboard: one page and its script, served by the backend from
//! the same API (`--control-http`). The page asks for the bearer token and
//! keeps it in the tab's session storage; everything it shows comes from
//! `/v1/...` with that token, every change it makes goes through the same
//! routes `pvgpu-ctl` uses.

use tiny_http::Method;

const INDEX: &str = include_str!("dashboard/index.html");
const SCRIPT: &str = include_str!("dashboard/dashboard.js");
const STYLE: &str = include_str!("dashboard/dashboard.css");

/// The file at `path`, with its content type, if it is one of the page's.
pub(super) fn asset(method: &Method, path: &str) -> Option<(&'static str, &'static str)> {
    if *method != Method::Get {
        return None;
    }
    match path {
        "/" | "/index.html" => Some((INDEX, "text/html; charset=utf-8")),
        "/dashboard.js" => Some((SCRIPT, "text/javascript; charset=utf-8")),
        "/dashboard.css" => Some((STYLE, "text/css; charset=utf-8")),
        _ => None,
    }
}
