//! One MCP server instance (rmcp's `ServerHandler`): `tools/list` is the key's offer,
//! `tools/call` the worker's agent call; a session that follows its key hears of every change.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use axum::http::request::Parts;
use relay_wire::Fp;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Extensions,
    Implementation, InitializeRequestParams, InitializeResult, JsonObject, ListPromptsResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    SubscriptionFilter, Tool,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::super::auth::Agent;
use super::super::state::ServeState;
use crate::catalog::Move;
use crate::error::{Code, ToolError};
use crate::session::OfferedTool;

/// The agent of the request whose HTTP parts rmcp put in `extensions` (the guard verified it
/// and put it there).
fn agent_of(extensions: &Extensions) -> Result<Agent, McpError> {
    extensions
        .get::<Parts>()
        .and_then(|parts| parts.extensions.get::<Agent>())
        .cloned()
        .ok_or_else(|| McpError::internal_error("the request's credential is missing", None))
}

/// One MCP server instance: one per MCP session (2025-11-25) or per request (stateless).
pub struct Handler {
    state: Arc<ServeState>,
    following: Mutex<Option<Following>>,
}

/// The key session an MCP session follows, and the task announcing its changes (stopped when
/// replaced or when the handler, and with it the MCP session, goes).
struct Following {
    changes: watch::Receiver<u64>,
    _stop: DropGuard,
}

impl Handler {
    pub fn new(state: Arc<ServeState>) -> Self {
        Handler {
            state,
            following: Mutex::new(None),
        }
    }

    /// In an MCP session (a request with `Mcp-Session-Id`), follows `key`'s session and
    /// announces each change to the client (an MCP session has one key: its owner's).
    fn follow(&self, extensions: &Extensions, peer: &Peer<RoleServer>, key: &str) {
        let in_session = extensions
            .get::<Parts>()
            .is_some_and(|p| p.headers.contains_key("mcp-session-id"));
        if !in_session {
            return;
        }
        let Some(changes) = self.state.worker.sessions.follow(key) else {
            return;
        };
        let mut following = self.following.lock().unwrap_or_else(|p| p.into_inner());
        if following
            .as_ref()
            .is_some_and(|f| f.changes.same_channel(&changes) && f.changes.has_changed().is_ok())
        {
            return;
        }
        let stop = CancellationToken::new();
        tokio::spawn(announce(
            changes.clone(),
            peer.clone(),
            stop.clone(),
            relay_wire::fingerprint(key),
        ));
        *following = Some(Following {
            changes,
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
/// session changes (its mode, what its tab handles, the catalog), until the session closes or
/// `stop` fires.
async fn announce(
    mut changes: watch::Receiver<u64>,
    peer: Peer<RoleServer>,
    stop: CancellationToken,
    key_fp: String,
) {
    changes.mark_unchanged();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
                let change = *changes.borrow_and_update();
                tracing::debug!(key = %key_fp, change, "announcing a changed tool list");
                if peer.notify_tool_list_changed().await.is_err() {
                    return;
                }
            }
        }
    }
}

/// The result of a tool that answered: JSON text, and `structuredContent` when the tool
/// declares an output schema (the worker checked the answer against it already: an answer of
/// another shape is a `bad_response` failure on every surface).
fn answered(output_schema: Option<&Value>, result: Value) -> CallToolResult {
    match output_schema {
        Some(_) if result.is_object() => CallToolResult::structured(result),
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
             conversation's mode (enter_<mode> tools move it); each failure comes back as a \
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
        // The session's current mode instructions, when the key is known (it always is past
        // the guard).
        if let Ok(agent) = agent_of(&context.extensions) {
            result.instructions = Some(self.state.worker.offer(&agent.key).await.instructions);
        }
        Ok(result)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if let Ok(agent) = agent_of(&context.extensions) {
            self.follow(&context.extensions, &context.peer, &agent.key);
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let agent = agent_of(&context.extensions)?;
        let offer = self.state.worker.offer(&agent.key).await;
        self.follow(&context.extensions, &context.peer, &agent.key);
        Ok(ListToolsResult::with_all_items(
            offer
                .tools
                .into_iter()
                .filter(|t| agent.may_use(&t.name, t.is_move))
                .map(|t| self.tool(t))
                .collect(),
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
        let agent = agent_of(&context.extensions)?;
        let key = &agent.key;
        self.follow(&context.extensions, &context.peer, key);
        let name: Cow<'_, str> = request.name;
        let worker = &self.state.worker;
        let is_move = Move::of(&name).is_some() && worker.catalog.current().tool(&name).is_none();
        if let Err(refused) = agent.require_tool(&name, is_move) {
            let err = ToolError::new(refused.code, refused.message);
            return Ok(failed(&err).into());
        }
        let args = Value::Object(request.arguments.unwrap_or_default());
        let started = tokio::time::Instant::now();
        // A client's cancellation (or a stateless request whose connection went) drops the
        // call: the relay client then cancels it at the relay, and the tab is told.
        let outcome = tokio::select! {
            outcome = worker.agent_call(key, agent.token.expose(), &name, &args) => outcome,
            _ = context.ct.cancelled() => {
                let cancelled = ToolError::new(Code::Cancelled, "the MCP client cancelled the call");
                worker.sessions.record(key, &name, started.elapsed(), &Err(cancelled));
                tracing::info!(key = %Fp(key), tool = %name, "MCP tool call cancelled by the client");
                return Err(McpError::invalid_request("the call was cancelled", None));
            }
        };
        match outcome.result {
            Ok(result) => Ok(answered(outcome.output_schema.as_ref(), result).into()),
            Err(e) if e.code == Code::UnknownTool => Err(McpError::invalid_params(
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
    /// `subscriptions/listen` stream: it follows the session of the request's key.
    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), McpError> {
        let agent = agent_of(&subscription.request_context().extensions)?;
        let key = agent.key;
        // Follow first, before anything is awaited: a change made right after the client saw
        // its subscription honoured is then not missed (the receiver counts from now on).
        let mut changes = match self.state.worker.sessions.follow(&key) {
            Some(changes) => changes,
            None => {
                // Listening before any other request opens the session, as `tools/list` would.
                let _ = self.state.worker.offer(&key).await;
                let Some(changes) = self.state.worker.sessions.follow(&key) else {
                    return Ok(());
                };
                changes
            }
        };
        loop {
            tokio::select! {
                _ = subscription.cancelled() => return Ok(()),
                changed = changes.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                    changes.borrow_and_update();
                    if subscription.sink().notify_tool_list_changed().await.is_err() {
                        return Ok(());
                    }
                }
            }
        }
    }
}
