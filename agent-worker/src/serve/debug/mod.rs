//! `/debug`: a page for operators, off unless `WORKER_DEBUG_PAGE=true`. The page itself holds no
//! data and no framework: its script asks `GET /sessions` and `GET /sessions/{id}/events` with
//! the operators' credential the operator types in (those routes check it), and builds the page
//! with `textContent` only. Served with a policy that lets only its own script and style run.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use super::error::{ApiError, ErrorAnswer};
use super::state::ServeState;

const PAGE: &str = include_str!("page.html");
const SCRIPT: &str = include_str!("debug.js");
const STYLE: &str = include_str!("debug.css");

/// Only this page's own script and style, no frame, no referrer, nothing cached.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `"` `&` `<` `>` `'` escaped, for an attribute value.
fn attribute(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

fn asset(content_type: &'static str, body: String) -> Response {
    let mut response = ([(header::CONTENT_TYPE, content_type)], body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

fn enabled(state: &ServeState) -> Result<(), ApiError> {
    if state.debug.page {
        Ok(())
    } else {
        Err(ApiError::not_configured(
            "the debug page is off: WORKER_DEBUG_PAGE is not true",
        ))
    }
}

/// The sessions and their timelines, for operators (its data needs the operators' credential).
#[utoipa::path(
    get,
    path = "/debug",
    tag = "operations",
    operation_id = "debugPage",
    responses(
        (status = 200, description = "The page (HTML); its data comes from /sessions with the operators' credential", content_type = "text/html; charset=utf-8", body = String),
        (status = 503, description = "`not_configured`: WORKER_DEBUG_PAGE is not true", body = ErrorAnswer),
    )
)]
pub(crate) async fn page(State(state): State<Arc<ServeState>>) -> Result<Response, ApiError> {
    enabled(&state)?;
    let link = state.debug.trace_link.as_deref().unwrap_or_default();
    Ok(asset(
        "text/html; charset=utf-8",
        PAGE.replace("{TRACE_LINK}", &attribute(link)),
    ))
}

pub(crate) async fn script(State(state): State<Arc<ServeState>>) -> Result<Response, ApiError> {
    enabled(&state)?;
    Ok(asset("text/javascript; charset=utf-8", SCRIPT.to_owned()))
}

pub(crate) async fn style(State(state): State<Arc<ServeState>>) -> Result<Response, ApiError> {
    enabled(&state)?;
    Ok(asset("text/css; charset=utf-8", STYLE.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trace_link_is_an_attribute_value_and_nothing_else() {
        assert_eq!(
            attribute(r#"https://t.example/trace/{traceId}?a=1&b="x"<'"#),
            "https://t.example/trace/{traceId}?a=1&amp;b=&quot;x&quot;&lt;&#39;"
        );
        assert_eq!(PAGE.matches("{TRACE_LINK}").count(), 1);
        // No inline script or style: the policy allows only the page's own files.
        assert!(!PAGE.contains("<script>") && !PAGE.contains("style="));
        assert!(!SCRIPT.contains("innerHTML") && !SCRIPT.contains("insertAdjacentHTML"));
    }
}
