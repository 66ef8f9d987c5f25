//! The HTTP surface of `/mcp`, for the OpenAPI document: the operations rmcp serves behind the
//! credential check. The JSON-RPC messages themselves are MCP's (opaque objects here).

use crate::serve::params::{JsonRpcError, McpHeaders, McpSessionHeaders};

/// Sends one JSON-RPC message (a request, a notification or a response). A request is
/// answered with one JSON-RPC message, as JSON or as an SSE stream; a notification or a
/// response is accepted with 202. `initialize` without `Mcp-Session-Id` opens an MCP
/// session, whose id comes back in `Mcp-Session-Id`.
#[utoipa::path(
    post,
    path = "/mcp",
    tag = "mcp",
    operation_id = "mcpPost",
    params(McpHeaders),
    request_body(content = Object, content_type = "application/json",
        description = "One JSON-RPC 2.0 message of MCP"),
    security(("session_token" = [])),
    responses(
        (status = 200, description = "The answer: one JSON-RPC message, as JSON or as an SSE stream",
            headers(("Mcp-Session-Id" = String, description = "The MCP session opened by `initialize`")),
            content(
                (Object = "application/json"),
                (String = "text/event-stream"),
            )),
        (status = 202, description = "A notification or a response, accepted"),
        (status = 400, description = "X-Voice-Agent-Key not a key; not a JSON-RPC message (-32700); a request other than `initialize` without `Mcp-Session-Id`; a header that contradicts the message", body = JsonRpcError),
        (status = 401, description = "A missing, forged, expired or foreign session token", body = JsonRpcError,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 403, description = "A session token for another key or without the `list` scope; a `Host` or `Origin` that is not allowed", body = JsonRpcError),
        (status = 404, description = "An unknown or closed MCP session, or one another session token opened; an unknown method; no X-Voice-Agent-Key while the worker follows no session of the token's key", body = JsonRpcError),
        (status = 406, description = "`Accept` lacks application/json or text/event-stream", body = JsonRpcError),
        (status = 405, description = "A method other than GET, POST and DELETE", body = JsonRpcError,
            headers(("Allow" = String, description = "`GET, POST, DELETE`"))),
        (status = 413, description = "The message is over 256 KiB", body = JsonRpcError),
        (status = 415, description = "Not `Content-Type: application/json`", body = JsonRpcError),
    )
)]
#[allow(dead_code)]
fn post() {}

/// Opens the session's stream of server messages (`notifications/tools/list_changed`).
#[utoipa::path(
    get,
    path = "/mcp",
    tag = "mcp",
    operation_id = "mcpStream",
    params(McpSessionHeaders),
    security(("session_token" = [])),
    responses(
        (status = 200, description = "The session's SSE stream", content_type = "text/event-stream", body = String),
        (status = 400, description = "X-Voice-Agent-Key not a key; no `Mcp-Session-Id`", body = JsonRpcError),
        (status = 401, description = "A missing, forged, expired or foreign session token", body = JsonRpcError,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 403, description = "A session token for another key or without the `list` scope; a `Host` or `Origin` that is not allowed", body = JsonRpcError),
        (status = 404, description = "An unknown or closed MCP session, or one another session token opened; no X-Voice-Agent-Key while the worker follows no session of the token's key", body = JsonRpcError),
        (status = 406, description = "`Accept` lacks text/event-stream", body = JsonRpcError),
        (status = 409, description = "The session already has its stream open", body = JsonRpcError),
    )
)]
#[allow(dead_code)]
fn get() {}

/// Closes the MCP session.
#[utoipa::path(
    delete,
    path = "/mcp",
    tag = "mcp",
    operation_id = "mcpClose",
    params(McpSessionHeaders),
    security(("session_token" = [])),
    responses(
        (status = 200, description = "Closed"),
        (status = 202, description = "Closed"),
        (status = 204, description = "Closed"),
        (status = 400, description = "X-Voice-Agent-Key not a key; no `Mcp-Session-Id`", body = JsonRpcError),
        (status = 401, description = "A missing, forged, expired or foreign session token", body = JsonRpcError,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 403, description = "A session token for another key or without the `list` scope; a `Host` or `Origin` that is not allowed", body = JsonRpcError),
        (status = 404, description = "An unknown or closed MCP session, or one another session token opened; no X-Voice-Agent-Key while the worker follows no session of the token's key", body = JsonRpcError),
    )
)]
#[allow(dead_code)]
fn delete() {}
