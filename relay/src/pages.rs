//! What the relay serves besides its API: the demo page's files (or a placeholder when they are
//! not built), and the trimmed request head every Socket.IO request goes on with.

use axum::http::{HeaderValue, header};
use tower_http::services::ServeDir;

/// The request headers a Socket.IO request keeps, the only ones read once socketioxide has it:
/// `origin` and `host` by the handshake's origin check (`tabs::check_origin`),
/// `sec-websocket-key` by engineioxide to answer a WebSocket upgrade, and `content-type` by
/// engineioxide to decode a long-polling POST. A header a Socket.IO handler starts reading must
/// be added here (`relay/tests/request_head.rs` checks the list against a real handshake).
pub const SOCKET_REQUEST_HEADERS: [header::HeaderName; 4] = [
    header::ORIGIN,
    header::HOST,
    header::SEC_WEBSOCKET_KEY,
    header::CONTENT_TYPE,
];

/// socketioxide keeps each socket's HTTP request head (headers, URI, extensions) for the
/// socket's whole life, and hyper's header values and URI are slices of the connection's read
/// buffer (8–16 KiB), as is the `OriginalUri` axum adds: one kept slice keeps that whole buffer
/// alive per tab. A browser's head also carries a user agent, `accept-*` lines and cookies
/// (0.6–3 KB) that nothing reads. So a Socket.IO request goes on with a copied URI and copies of
/// [`SOCKET_REQUEST_HEADERS`] only, in a map no larger than they need, and without
/// `OriginalUri`; the connection's buffer is freed after the upgrade.
#[doc(hidden)]
pub async fn detach_request_head(mut req: axum::extract::Request) -> axum::extract::Request {
    if !req.uri().path().starts_with("/socket.io") {
        return req;
    }
    let headers = std::mem::take(req.headers_mut());
    let kept = SOCKET_REQUEST_HEADERS
        .iter()
        .filter(|name| headers.contains_key(*name))
        .count();
    let mut owned = axum::http::HeaderMap::with_capacity(kept);
    for name in &SOCKET_REQUEST_HEADERS {
        for value in headers.get_all(name) {
            if let Ok(value) = HeaderValue::from_bytes(value.as_bytes()) {
                owned.append(name.clone(), value);
            }
        }
    }
    *req.headers_mut() = owned;
    req.extensions_mut().remove::<axum::extract::OriginalUri>();
    if let Ok(uri) = axum::http::Uri::try_from(req.uri().to_string()) {
        *req.uri_mut() = uri;
    }
    req
}

/// Files any page may load, whatever its origin: the client library (`lib/client.js`).
const PUBLIC_PREFIX: &str = "/lib/";

/// Whether `path` is a file any page may load ([`PUBLIC_PREFIX`]).
pub(crate) fn is_public(path: &str) -> bool {
    path.starts_with(PUBLIC_PREFIX)
}

/// The demo page's files; those under [`PUBLIC_PREFIX`] with `Access-Control-Allow-Origin: *`
/// (the CORS layer puts the page's own origin instead when it lists it). What the request's path makes impossible to open (a segment longer
/// than the file system allows, a file used as a directory) is a 404 like any missing file,
/// never the 500 that `ServeDir` answers for such IO errors.
pub(crate) async fn static_file(
    mut files: ServeDir,
    request: axum::extract::Request,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    use std::io::ErrorKind;
    let public = is_public(request.uri().path());
    match files.try_call(request).await {
        // ServeDir's own 500 comes only from a redirect URI it cannot build from the request's
        // path (a directory asked for without its trailing slash).
        Ok(response) if response.status() == axum::http::StatusCode::INTERNAL_SERVER_ERROR => {
            axum::http::StatusCode::NOT_FOUND.into_response()
        }
        Ok(response) => {
            let mut response = response.map(axum::body::Body::new);
            if public && response.status().is_success() {
                // The client library is public code that any page may load (a page on another
                // origin then reports itself why the relay refuses it, if it does).
                response.headers_mut().insert(
                    header::ACCESS_CONTROL_ALLOW_ORIGIN,
                    HeaderValue::from_static("*"),
                );
            }
            response
        }
        Err(err)
            if matches!(
                err.kind(),
                ErrorKind::InvalidFilename
                    | ErrorKind::InvalidInput
                    | ErrorKind::NotADirectory
                    | ErrorKind::IsADirectory
                    | ErrorKind::NotFound
                    | ErrorKind::PermissionDenied
            ) =>
        {
            tracing::debug!(cause = %err, "static file: no such file");
            axum::http::StatusCode::NOT_FOUND.into_response()
        }
        Err(err) => {
            tracing::error!(cause = %err, "static file could not be read");
            axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

pub(crate) async fn placeholder_page() -> axum::response::Html<&'static str> {
    axum::response::Html(
        "<!doctype html><meta charset=utf-8><title>Voice-agent relay</title>\
         <p>The relay is running. The demo page is not built: <code>scripts/manage.sh start</code> builds it \
         (or <code>npm ci &amp;&amp; npm run build</code> in <code>web/</code>).</p>",
    )
}
