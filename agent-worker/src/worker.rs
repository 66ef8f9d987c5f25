//! The worker: the catalog, the sessions and the relay client together, which is what runs a
//! tool call for any surface (the agent API, MCP, Vapi, the CLI, a Rust pipeline). A call is
//! checked against the session's mode and the tool's schema before anything is sent, and logged.

use std::sync::Arc;
use std::time::Duration;

use relay_wire::{ErrorCode, Fp};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::catalog::{self, Catalog, Move, Tool};
use crate::client::{CallOptions, RelayClient};
use crate::error::{Code, ToolError};
use crate::session::page::PageTools;
use crate::session::{Offer, OfferedTool, Sessions, offer};

/// The client, the catalog and the sessions: what runs a tool call for a pipeline.
pub struct Worker {
    pub client: RelayClient,
    pub catalog: catalog::Shared,
    pub sessions: Sessions,
}

/// The outcome of one agent tool call, with the mode the session is in afterwards.
#[derive(Debug, Clone)]
pub struct AgentOutcome {
    pub result: Result<Value, ToolError>,
    pub mode: String,
    pub mode_changed: bool,
    /// The answer's declared shape, for a UI tool that declares one.
    pub output_schema: Option<Value>,
}

/// A UI tool found for a call: in the catalog, or among the page's tools.
enum Found {
    Catalog(Arc<Catalog>, usize),
    Page(Arc<PageTools>, usize),
}

impl Found {
    fn tool(&self) -> &Tool {
        match self {
            Found::Catalog(c, i) => c.tools().nth(*i).expect("index of a found tool"),
            Found::Page(p, i) => &p.tools[*i],
        }
    }
}

impl Worker {
    /// A worker with the product's own tools and modes (the default catalog), page tools off.
    pub fn new(client: RelayClient) -> Self {
        let catalog = Catalog::default_catalog().expect("the default catalog is valid");
        Worker::with_catalog(client, catalog, false)
    }

    /// A worker with `catalog`; `page_tools` offers the tools a page defines.
    pub fn with_catalog(client: RelayClient, catalog: Catalog, page_tools: bool) -> Self {
        let catalog = catalog::Shared::new(catalog);
        Worker {
            sessions: Sessions::new(catalog.clone(), client.clone(), page_tools),
            client,
            catalog,
        }
    }

    /// Replaces the catalog; open sessions keep going (in the initial mode if theirs is gone)
    /// and their followers hear of the change.
    pub fn reload(&self, catalog: Catalog) {
        let summary = catalog.summary();
        self.catalog.replace(catalog);
        self.sessions.catalog_replaced();
        tracing::info!(catalog = %summary, "catalog reloaded");
    }

    /// The mode `key`'s session is in, opening a session (source `agent`, modes enforced) when
    /// none is open yet: an agent may ask before LiveKit's webhook arrives.
    fn agent_mode(&self, key: &str) -> String {
        if let Some(mode) = self.sessions.mode(key) {
            return mode;
        }
        self.sessions.open(key, "", "", "agent", true);
        self.sessions
            .mode(key)
            .unwrap_or_else(|| self.catalog.current().initial_mode().to_owned())
    }

    /// The instructions and tools of `key`'s session in its current mode, for what its tab
    /// handles now.
    pub async fn offer(&self, key: &str) -> Offer {
        self.agent_mode(key);
        let catalog = self.catalog.current();
        let stack = self
            .sessions
            .stack(key)
            .unwrap_or_else(|| crate::session::ModeStack::new(&catalog));
        let tab = self.sessions.tab(key).await;
        let page = tab.page.as_deref().filter(|_| self.sessions.page_tools());
        offer::build(&catalog, &stack, tab.state.as_ref(), page)
    }

    /// Waits (at most `wait`) until `key`'s offer differs from the one with revision `after`,
    /// and answers it; at the end of the wait, the offer as it is.
    pub async fn wait_offer(&self, key: &str, after: &str, wait: Duration) -> Offer {
        self.agent_mode(key);
        let deadline = Instant::now() + wait;
        let mut changes = self.sessions.follow(key);
        loop {
            let offer = self.offer(key).await;
            if offer.revision != after {
                return offer;
            }
            let Some(rx) = changes.as_mut() else {
                return offer;
            };
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        return self.offer(key).await;
                    }
                }
                _ = tokio::time::sleep_until(deadline) => return offer,
            }
        }
    }

    /// The tool named `name` as some mode offers it: a catalog tool or a mode move. `None`
    /// when no mode offers such a tool (page tools depend on a tab, so are not found here).
    pub fn offerable(&self, name: &str) -> Option<OfferedTool> {
        let catalog = self.catalog.current();
        if let Some(tool) = catalog.tool(name) {
            return Some(offer::ui_tool(tool));
        }
        let step = Move::of(name)?;
        let target = match step {
            Move::Enter(id) => catalog.mode(id)?,
            // Leaving goes back to whichever mode came before; described by the nested mode.
            Move::Leave(id) => catalog.mode(id).filter(|m| m.nested)?,
        };
        Some(offer::move_tool(step, target))
    }

    /// Finds the UI tool `name` for `key`: in the catalog, else among its page's tools when
    /// they are allowed.
    async fn find(&self, key: &str, name: &str) -> Result<Found, ToolError> {
        let catalog = self.catalog.current();
        let position = catalog.tools().position(|t| t.spec.name == name);
        if let Some(i) = position {
            return Ok(Found::Catalog(catalog, i));
        }
        if self.sessions.page_tools()
            && !catalog.claims(name)
            && let Some(page) = self.sessions.tab(key).await.page
            && let Some(i) = page.tools.iter().position(|t| t.spec.name == name)
        {
            return Ok(Found::Page(page, i));
        }
        Err(ToolError::new(
            Code::UnknownTool,
            format!("there is no tool named {name}"),
        ))
    }

    /// Runs one UI tool call for `key`, sent with the agent's session `token`: the session's
    /// mode allows it (when the session holds calls to its mode), the arguments match the schema
    /// (nothing is sent otherwise), the relay delivers it. Logged in the session log.
    pub async fn run_tool(
        &self,
        key: &str,
        token: &str,
        tool: &str,
        args: &Value,
    ) -> Result<Value, ToolError> {
        self.run_tool_with(key, token, tool, args, None)
            .await
            .map(|(value, _)| value)
    }

    /// [`Worker::run_tool`] with the caller's `Idempotency-Key` (a retry of the same call gets
    /// its first outcome); also answers the tool's declared output schema.
    pub async fn run_tool_with(
        &self,
        key: &str,
        token: &str,
        tool: &str,
        args: &Value,
        idempotency_key: Option<String>,
    ) -> Result<(Value, Option<Value>), ToolError> {
        let started = Instant::now();
        let outcome = self
            .run_found(key, token, tool, args, idempotency_key)
            .await;
        let summary = outcome.as_ref().map(|_| ()).map_err(Clone::clone);
        self.sessions.record(key, tool, started.elapsed(), &summary);
        outcome
    }

    async fn run_found(
        &self,
        key: &str,
        token: &str,
        name: &str,
        args: &Value,
        idempotency_key: Option<String>,
    ) -> Result<(Value, Option<Value>), ToolError> {
        let found = self.find(key, name).await?;
        let tool = found.tool();
        if self.sessions.enforces_modes(key)
            && let Some(mode) = self.sessions.mode(key)
            && !tool.spec.offered_in(&mode)
        {
            return Err(ToolError::new(
                Code::ToolNotAllowed,
                format!("{name} is not available in the {mode} mode"),
            ));
        }
        tool.validate(args)?;
        let options = CallOptions {
            await_result: tool.spec.await_result,
            timeout_ms: tool.spec.timeout_ms,
            idempotency_key,
        };
        let ok = self
            .client
            .call(token, key, name, Some(args), &options)
            .await?;
        let value = match ok.result {
            Some(result) if tool.spec.await_result => {
                tool.check_answer(&result)?;
                result
            }
            _ => json!({"success": true}),
        };
        Ok((value, tool.spec.output_schema.clone()))
    }

    /// Runs one tool an agent called for `key` with its session `token`: a mode move of the
    /// session's current mode, or a UI tool through [`Worker::run_tool`].
    pub async fn agent_call(
        &self,
        key: &str,
        token: &str,
        tool: &str,
        args: &Value,
    ) -> AgentOutcome {
        self.agent_call_with(key, token, tool, args, None).await
    }

    /// [`Worker::agent_call`] with the caller's `Idempotency-Key` for a UI tool.
    pub async fn agent_call_with(
        &self,
        key: &str,
        token: &str,
        tool: &str,
        args: &Value,
        idempotency_key: Option<String>,
    ) -> AgentOutcome {
        let before = self.agent_mode(key);
        let mut output_schema = None;
        let result = if self.sessions.has_ended(key) {
            Err(ToolError::new(
                ErrorCode::UnknownKey,
                "the user's session has ended: they left the room",
            ))
        } else if Move::of(tool).is_some() && self.catalog.current().tool(tool).is_none() {
            self.change_mode(key, tool, args)
        } else {
            self.run_tool_with(key, token, tool, args, idempotency_key)
                .await
                .map(|(value, schema)| {
                    output_schema = schema;
                    value
                })
        };
        let mode = self.agent_mode(key);
        AgentOutcome {
            result,
            mode_changed: mode != before,
            mode,
            output_schema,
        }
    }

    fn change_mode(&self, key: &str, tool: &str, args: &Value) -> Result<Value, ToolError> {
        let started = Instant::now();
        let outcome = if !args.as_object().is_some_and(|o| o.is_empty()) && !args.is_null() {
            Err(ToolError::new(
                Code::InvalidArguments,
                format!("{tool} takes no arguments"),
            ))
        } else {
            match self.sessions.change_by_tool(key, tool) {
                Some(mode) => {
                    let instructions = self
                        .catalog
                        .current()
                        .mode(&mode)
                        .map(|m| m.instructions.clone())
                        .unwrap_or_default();
                    Ok(json!({"mode": mode, "instructions": instructions}))
                }
                None => {
                    let code = if self.offerable(tool).is_some() {
                        Code::ToolNotAllowed
                    } else {
                        Code::UnknownTool
                    };
                    Err(ToolError::new(
                        code,
                        format!(
                            "{tool} is not a mode change available from the {} mode",
                            self.agent_mode(key)
                        ),
                    ))
                }
            }
        };
        if let Err(e) = &outcome {
            tracing::debug!(key = %Fp(key), tool, cause = %e, "mode move refused");
        }
        let summary = outcome.as_ref().map(|_| ()).map_err(Clone::clone);
        self.sessions.record(key, tool, started.elapsed(), &summary);
        outcome
    }
}
