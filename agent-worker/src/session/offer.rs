//! What an agent is offered for a key now: the catalog tools of the session's mode that the tab
//! handles, the page's own tools when they are allowed, and the mode moves; with the mode's
//! instructions and a revision that changes whenever any of it does.

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::catalog::{Catalog, Mode, Move, Tool};
use crate::client::TabState;

use super::modes::ModeStack;
use super::page::PageTools;

/// A tool as an agent is offered it: a UI tool (of the catalog or of the page) or a mode move.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OfferedTool {
    pub name: String,
    pub description: String,
    /// The arguments' JSON Schema.
    #[schema(value_type = Object)]
    pub parameters: Value,
    /// The answer's JSON Schema, for tools that answer with a shape.
    #[schema(value_type = Option<Object>)]
    pub output_schema: Option<Value>,
    pub await_result: bool,
    pub timeout_ms: Option<u64>,
    /// A mode move rather than a UI tool (what a session token's scope decides on).
    #[serde(skip)]
    #[schema(ignore)]
    pub is_move: bool,
}

/// What an agent runs with in a session's current mode: its instructions and its tools.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Offer {
    pub mode: String,
    pub instructions: String,
    pub tools: Vec<OfferedTool>,
    /// Changes whenever the mode, the instructions or the tools do (ask again with it to wait
    /// for a change).
    pub revision: String,
}

/// The parameters of a mode move: none.
fn no_parameters() -> Value {
    crate::catalog::export::no_parameters()
}

/// A UI tool as offered.
pub fn ui_tool(tool: &Tool) -> OfferedTool {
    let spec = &tool.spec;
    OfferedTool {
        name: spec.name.clone(),
        description: spec.description.clone(),
        parameters: spec.parameters.clone(),
        output_schema: spec.output_schema.clone(),
        await_result: spec.await_result,
        timeout_ms: spec.timeout_ms,
        is_move: false,
    }
}

/// A mode move as offered; `target` is the mode it leads to.
pub fn move_tool(step: Move<'_>, target: &Mode) -> OfferedTool {
    OfferedTool {
        name: step.tool_name(),
        description: step.description(Some(target)),
        parameters: no_parameters(),
        output_schema: None,
        await_result: false,
        timeout_ms: None,
        is_move: true,
    }
}

/// The offer for a session at `stack` whose tab is `tab` (unknown: `None`, which hides nothing)
/// with `page` its page tools when they are allowed.
pub fn build(
    catalog: &Catalog,
    stack: &ModeStack,
    tab: Option<&TabState>,
    page: Option<&PageTools>,
) -> Offer {
    let mode = stack.mode(catalog);
    let handles = |name: &str| tab.is_none_or(|t| t.handles(name));
    let mut tools: Vec<OfferedTool> = catalog
        .tools_for(&mode.id)
        .filter(|t| handles(&t.spec.name))
        .map(ui_tool)
        .collect();
    if let Some(page) = page {
        tools.extend(
            page.tools
                .iter()
                .filter(|t| t.spec.offered_in(&mode.id) && !catalog.claims(&t.spec.name))
                .map(ui_tool),
        );
    }
    tools.extend(
        stack
            .moves(catalog)
            .into_iter()
            .map(|(step, target)| move_tool(step, target)),
    );
    let mut offer = Offer {
        mode: mode.id.clone(),
        instructions: mode.instructions.clone(),
        tools,
        revision: String::new(),
    };
    offer.revision = revision(&offer);
    offer
}

/// 16 hex digits of a digest of everything an agent is offered.
fn revision(offer: &Offer) -> String {
    let bytes = serde_json::to_vec(offer).unwrap_or_default();
    hex::encode(&Sha256::digest(&bytes)[..8])
}
