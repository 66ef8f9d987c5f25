//! The MCP endpoint of `agent-worker serve`: `/mcp`, Streamable HTTP on rmcp, for voice
//! platforms that take their tools from an MCP server (LiveKit Agents, OpenAI Realtime, Vapi,
//! ElevenLabs, Pipecat). It serves the 2025-11-25 handshake (with sessions) and the stateless
//! 2026-07-28 revision.
//!
//! It is a view of the same functions as the HTTP agent API ([`crate::agent_api`]):
//! `tools/list` is [`Worker::offer`], `tools/call` is [`Worker::agent_call`]. Every request
//! carries the agent secret as a Bearer credential (checked by [`guard`], a layer in front of
//! the MCP service, so even `initialize` is refused without it) and the tab's key in
//! `X-Voice-Agent-Key`; the handler reads the key from each request's headers and never keeps
//! it as session state. A session learns of its key's mode changes by following the session's
//! mode ([`crate::sessions::Sessions::follow_mode`]) and tells its client
//! `notifications/tools/list_changed`.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header, request::Parts};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use relay_wire::Fp;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Extensions,
    Implementation, InitializeRequestParams, InitializeResult, JsonObject, ListPromptsResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    SubscriptionFilter, Tool,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::OfferedTool;
use crate::agent_api::routing_key;
use crate::client::ToolError;
use crate::webhooks::ServeState;

/// Largest JSON-RPC message accepted on `/mcp`.
const MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// Who may reach `/mcp` from where: the `Host` headers accepted (rmcp refuses others with 403,
/// against DNS rebinding) and the browser origins accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpConfig {
    /// Hosts (`name` or `name:port`) accepted in `Host`; empty accepts any.
    pub allowed_hosts: Vec<String>,
    /// Origins (`scheme://host[:port]`, `:*` for any port) accepted when a request carries
    /// `Origin`; `None` accepts any. `Some(vec![])` refuses every request that carries one.
    /// The voice platforms call from servers, which send no `Origin`; by default only pages
    /// served from this machine's loopback addresses may call.
    pub allowed_origins: Option<Vec<String>>,
}

/// The loopback names, as hosts and as the origins of pages served from them.
const LOOPBACK: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            allowed_hosts: LOOPBACK
                .iter()
                .map(|h| h.trim_matches(['[', ']']).to_owned())
                .collect(),
            allowed_origins: Some(
                LOOPBACK
                    .iter()
                    .flat_map(|h| [format!("http://{h}:*"), format!("https://{h}:*")])
                    .collect(),
            ),
        }
    }
}

/// The `/mcp` service: the credential and key check in front of rmcp's Streamable HTTP
/// service. `shutdown` ends every MCP session and stream (a server stopping gracefully would
/// otherwise wait for the clients' open streams).
pub fn service(
    state: Arc<ServeState>,
    config: &McpConfig,
    shutdown: CancellationToken,
) -> axum::routing::Router {
    let mut http = StreamableHttpServerConfig::default()
        .with_allowed_hosts(config.allowed_hosts.clone())
        .with_cancellation_token(shutdown)
        .with_max_request_body_bytes(MAX_MESSAGE_BYTES);
    http = match &config.allowed_origins {
        None => http.disable_allowed_origins(),
        Some(origins) => http
            .with_allowed_origins(origins.clone())
            .enforce_origin_validation(),
    };
    let handler_state = state.clone();
    let mcp = StreamableHttpService::new(
        move || Ok(Handler::new(handler_state.clone())),
        Arc::new(LocalSessionManager::default()),
        http,
    );
    axum::routing::Router::new()
        .fallback_service(mcp)
        .layer(middleware::from_fn(jsonrpc_errors))
        .layer(middleware::from_fn_with_state(state, guard))
}

/// Largest error body of rmcp's that is turned into a JSON-RPC error.
const MAX_ERROR_TEXT: usize = 16 * 1024;

/// rmcp answers some refusals (406, 405, 415, 413, a missing or unknown session, an internal
/// fault) with plain text or no content type at all; this turns each into a JSON-RPC error
/// (`application/json`, same status, rmcp's text as its message), so every failure of `/mcp`
/// has one shape. Successful answers and streams pass untouched.
async fn jsonrpc_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if response.status().as_u16() < 400 || is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = match axum::body::to_bytes(body, MAX_ERROR_TEXT).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_owned(),
        Err(_) => String::new(),
    };
    // rmcp answers a body that is not a JSON-RPC message with 415, as if its media type were
    // wrong; it is a bad request (JSON-RPC's parse error or invalid request).
    let mut code = INVALID_REQUEST;
    if parts.status == StatusCode::UNSUPPORTED_MEDIA_TYPE && text.starts_with("fail to deserialize")
    {
        parts.status = StatusCode::BAD_REQUEST;
        code = PARSE_ERROR;
    }
    let message = if text.is_empty() {
        parts
            .status
            .canonical_reason()
            .unwrap_or("refused")
            .to_owned()
    } else {
        text
    };
    let body = json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": code, "message": message},
    });
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, Body::from(body.to_string()))
}

/// Refuses, before the MCP service sees it, a request without one of the agent secrets (401)
/// or without a well-formed `X-Voice-Agent-Key` (400). Both answers are JSON-RPC errors, which
/// MCP clients show with their message.
async fn guard(State(state): State<Arc<ServeState>>, request: Request, next: Next) -> Response {
    // A method MCP does not use is refused as such, whoever asks.
    if ![Method::GET, Method::POST, Method::DELETE].contains(request.method()) {
        let mut response = refusal(
            request,
            StatusCode::METHOD_NOT_ALLOWED,
            "Method Not Allowed: /mcp takes GET, POST and DELETE",
        )
        .await;
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
        return response;
    }
    if !state.agent_authorized(request.headers()) {
        let mut response = refusal(
            request,
            StatusCode::UNAUTHORIZED,
            "missing or wrong agent secret (Authorization: Bearer <agent secret>)",
        )
        .await;
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return response;
    }
    if let Err(message) = routing_key(request.headers()) {
        return refusal(request, StatusCode::BAD_REQUEST, message).await;
    }
    next.run(request).await
}

/// The HTTP surface of `/mcp`, for the OpenAPI document: the operations rmcp serves behind
/// [`guard`]. The JSON-RPC messages themselves are MCP's (opaque objects here).
pub mod http_surface {
    use crate::openapi::{JsonRpcError, McpHeaders, McpSessionHeaders};

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
        security(("agent_secret" = [])),
        responses(
            (status = 200, description = "The answer: one JSON-RPC message, as JSON or as an SSE stream",
                headers(("Mcp-Session-Id" = String, description = "The MCP session opened by `initialize`")),
                content(
                    (Object = "application/json"),
                    (String = "text/event-stream"),
                )),
            (status = 202, description = "A notification or a response, accepted"),
            (status = 400, description = "X-Voice-Agent-Key missing or not a key; not a JSON-RPC message (-32700); a request other than `initialize` without `Mcp-Session-Id`; a header that contradicts the message", body = JsonRpcError),
            (status = 401, description = "Missing or wrong agent secret", body = JsonRpcError,
                headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
            (status = 403, description = "A `Host` or `Origin` that is not allowed", body = JsonRpcError),
            (status = 404, description = "An unknown or closed MCP session; an unknown method", body = JsonRpcError),
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
        security(("agent_secret" = [])),
        responses(
            (status = 200, description = "The session's SSE stream", content_type = "text/event-stream", body = String),
            (status = 400, description = "X-Voice-Agent-Key missing or not a key; no `Mcp-Session-Id`", body = JsonRpcError),
            (status = 401, description = "Missing or wrong agent secret", body = JsonRpcError,
                headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
            (status = 403, description = "A `Host` or `Origin` that is not allowed", body = JsonRpcError),
            (status = 404, description = "An unknown or closed MCP session", body = JsonRpcError),
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
        security(("agent_secret" = [])),
        responses(
            (status = 200, description = "Closed"),
            (status = 202, description = "Closed"),
            (status = 204, description = "Closed"),
            (status = 400, description = "X-Voice-Agent-Key missing or not a key; no `Mcp-Session-Id`", body = JsonRpcError),
            (status = 401, description = "Missing or wrong agent secret", body = JsonRpcError,
                headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
            (status = 403, description = "A `Host` or `Origin` that is not allowed", body = JsonRpcError),
            (status = 404, description = "An unknown or closed MCP session", body = JsonRpcError),
        )
    )]
    #[allow(dead_code)]
    fn delete() {}
}

/// JSON-RPC "invalid request".
const INVALID_REQUEST: i32 = -32600;
/// JSON-RPC "parse error": the body is not a JSON-RPC message.
const PARSE_ERROR: i32 = -32700;

/// A JSON-RPC error answering the request's message (its `id` when the body has one).
async fn refusal(request: Request, status: StatusCode, message: &str) -> Response {
    let id = request_id(request.into_body()).await;
    let body = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": INVALID_REQUEST, "message": message},
    });
    (status, axum::Json(body)).into_response()
}

/// The `id` of a JSON-RPC request body, or null.
async fn request_id(body: Body) -> Value {
    let Ok(bytes) = axum::body::to_bytes(body, MAX_MESSAGE_BYTES).await else {
        return Value::Null;
    };
    serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| v.get("id").cloned())
        .unwrap_or(Value::Null)
}

/// The key of the request whose HTTP parts rmcp put in `extensions`.
fn key_of(extensions: &Extensions) -> Result<String, McpError> {
    let parts = extensions
        .get::<Parts>()
        .ok_or_else(|| McpError::internal_error("the request's HTTP headers are missing", None))?;
    routing_key(&parts.headers).map_err(|m| McpError::invalid_request(m, None))
}

/// One MCP server instance: one per MCP session (2025-11-25) or per request (stateless).
pub struct Handler {
    state: Arc<ServeState>,
    following: Mutex<Option<Following>>,
}

/// The mode a session follows, and the task announcing its changes (stopped when replaced or
/// when the handler, and with it the MCP session, goes).
struct Following {
    mode: watch::Receiver<String>,
    _stop: DropGuard,
}

impl Handler {
    pub fn new(state: Arc<ServeState>) -> Self {
        Handler {
            state,
            following: Mutex::new(None),
        }
    }

    /// In an MCP session (a request with `Mcp-Session-Id`), follows the mode of `key`'s session
    /// and announces each change to the client. A later request with another key moves the
    /// follower to that key's session.
    fn follow(&self, extensions: &Extensions, peer: &Peer<RoleServer>, key: &str) {
        let in_session = extensions
            .get::<Parts>()
            .is_some_and(|p| p.headers.contains_key("mcp-session-id"));
        if !in_session {
            return;
        }
        let Some(mode) = self.state.worker.sessions.follow_mode(key) else {
            return;
        };
        let mut following = self.following.lock().unwrap_or_else(|p| p.into_inner());
        if following
            .as_ref()
            .is_some_and(|f| f.mode.same_channel(&mode) && f.mode.has_changed().is_ok())
        {
            return;
        }
        let stop = CancellationToken::new();
        tokio::spawn(announce(
            mode.clone(),
            peer.clone(),
            stop.clone(),
            relay_wire::fingerprint(key),
        ));
        *following = Some(Following {
            mode,
            _stop: stop.drop_guard(),
        });
    }

    fn tool(&self, offered: OfferedTool) -> Tool {
        let mut tool = Tool::new(
            offered.name,
            offered.description,
            object(offered.parameters),
        );
        if let Some(output) = offered.output_schema {
            tool = tool.with_raw_output_schema(object(output));
        }
        tool
    }
}

fn object(schema: Value) -> Arc<JsonObject> {
    Arc::new(match schema {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    })
}

/// Tells the client of an MCP session that its tool list changed, each time the followed
/// session's mode changes, until the session closes or `stop` fires.
async fn announce(
    mut mode: watch::Receiver<String>,
    peer: Peer<RoleServer>,
    stop: CancellationToken,
    key_fp: String,
) {
    mode.mark_unchanged();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            changed = mode.changed() => {
                if changed.is_err() {
                    return;
                }
                let now = mode.borrow_and_update().clone();
                tracing::debug!(key = %key_fp, mode = %now, "announcing a changed tool list");
                if peer.notify_tool_list_changed().await.is_err() {
                    return;
                }
            }
        }
    }
}

/// The result of a tool that answered: JSON text, and `structuredContent` when the tool
/// declares an output schema that the answer matches.
fn answered(output_schema: Option<&Value>, tool: &str, result: Value) -> CallToolResult {
    match output_schema {
        Some(schema) if result.is_object() => {
            if jsonschema::is_valid(schema, &result) {
                CallToolResult::structured(result)
            } else {
                failed(&ToolError::new(
                    "bad_response",
                    format!("the screen's answer to {tool} does not have the declared shape"),
                ))
            }
        }
        _ => CallToolResult::success(vec![ContentBlock::text(result.to_string())]),
    }
}

fn failed(error: &ToolError) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(error.speech())])
}

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        InitializeResult::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new(
            "agent-worker",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions(
            "UI tools for the user's screen in a voice session. The tools change with the \
             conversation's phase (enter_<phase> tools move it); each failure comes back as a \
             sentence you can say.",
        )
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        let mut result = self.negotiate_initialize(&request)?;
        // The session's current phase instructions, when the key is known (it always is past
        // the guard).
        if let Ok(key) = key_of(&context.extensions) {
            result.instructions = Some(self.state.worker.offer(&key).instructions);
        }
        Ok(result)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if let Ok(key) = key_of(&context.extensions) {
            self.follow(&context.extensions, &context.peer, &key);
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let key = key_of(&context.extensions)?;
        let offer = self.state.worker.offer(&key);
        self.follow(&context.extensions, &context.peer, &key);
        Ok(ListToolsResult::with_all_items(
            offer.tools.into_iter().map(|t| self.tool(t)).collect(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        // Without a request there is no key, hence no mode: any tool the worker could offer.
        self.state.worker.offerable(name).map(|t| self.tool(t))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let key = key_of(&context.extensions)?;
        self.follow(&context.extensions, &context.peer, &key);
        let name: Cow<'_, str> = request.name;
        let args = Value::Object(request.arguments.unwrap_or_default());
        let worker = &self.state.worker;
        let started = tokio::time::Instant::now();
        // A client's cancellation (or a stateless request whose connection went) drops the
        // call: the relay client then cancels it at the relay, and the tab is told.
        let outcome = tokio::select! {
            outcome = worker.agent_call(&key, &name, &args) => outcome,
            _ = context.ct.cancelled() => {
                let cancelled = ToolError::new("cancelled", "the MCP client cancelled the call");
                worker.sessions.record(&key, &name, started.elapsed(), &Err(cancelled));
                tracing::info!(key = %Fp(&key), tool = %name, "MCP tool call cancelled by the client");
                return Err(McpError::invalid_request("the call was cancelled", None));
            }
        };
        match outcome.result {
            Ok(result) => {
                let schema = worker
                    .registry
                    .get(&name)
                    .and_then(|s| s.output_schema.as_ref());
                Ok(answered(schema, &name, result).into())
            }
            Err(e) if e.code == "unknown_tool" => Err(McpError::invalid_params(
                format!("unknown tool: {name}"),
                Some(json!({"tool": name})),
            )),
            Err(e) => Ok(failed(&e).into()),
        }
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        Err(McpError::method_not_found::<
            rmcp::model::ListPromptsRequestMethod,
        >())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        Err(McpError::method_not_found::<
            rmcp::model::ListResourcesRequestMethod,
        >())
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(SubscriptionFilter::builder().tools_list_changed().build())
    }

    /// 2026-07-28 clients (no sessions) hear of a changed tool list on a
    /// `subscriptions/listen` stream: it follows the mode of the request's key.
    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), McpError> {
        let key = key_of(&subscription.request_context().extensions)?;
        // Listening before any other request opens the session, as `tools/list` would.
        let _ = self.state.worker.offer(&key);
        let Some(mut mode) = self.state.worker.sessions.follow_mode(&key) else {
            return Ok(());
        };
        mode.mark_unchanged();
        loop {
            tokio::select! {
                _ = subscription.cancelled() => return Ok(()),
                changed = mode.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                    mode.borrow_and_update();
                    if subscription.sink().notify_tool_list_changed().await.is_err() {
                        return Ok(());
                    }
                }
            }
        }
    }
}
