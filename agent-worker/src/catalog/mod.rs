//! The tool catalog: an app's UI tools and session modes, declared as data in one file
//! (`WORKER_CATALOG`) and checked as a whole before anything uses it. The product's own tools
//! are the default catalog, `agent-worker/catalog/default.json`, read the same way.
//!
//! ```json
//! {"initialMode": "default",
//!  "modes": [{"id": "default", "instructions": "…", "next": ["review"]},
//!            {"id": "review", "instructions": "…", "next": ["default"], "nested": true}],
//!  "tools": [{"name": "CreateDiagram", "description": "…", "parameters": {"type": "object"},
//!             "awaitResult": true, "timeoutMs": 30000, "modes": ["default"]}]}
//! ```
//!
//! A mode's `next` is offered to the agent as `enter_<mode>` tools; entering a `nested` mode
//! keeps the mode it came from, and `leave_<mode>` goes back to it (one level, as a stack of
//! depth two). A tool without `modes` is offered in every mode; a catalog without `modes` has
//! one mode, `default`.
//!
//! ```
//! use agent_worker::catalog::Catalog;
//! use serde_json::json;
//!
//! let catalog = Catalog::parse("app.json", r#"{"tools": [{
//!     "name": "show_price", "description": "Show a price tag.",
//!     "parameters": {"type": "object", "properties": {"amount": {"type": "number"}},
//!                    "required": ["amount"], "additionalProperties": false}}]}"#)
//!     .expect("a valid catalog");
//! let tool = catalog.tool("show_price").unwrap();
//! assert!(tool.validate(&json!({"amount": 12})).is_ok());
//! assert_eq!(tool.validate(&json!({"amount": "twelve"})).unwrap_err().code.as_str(), "invalid_arguments");
//! assert_eq!(catalog.initial_mode(), "default");
//!
//! let broken = Catalog::parse("app.json", r#"{"tools": [{"name": "bad name", "description": "x",
//!     "parameters": {"type": "object"}}]}"#).unwrap_err();
//! assert!(broken[0].to_string().starts_with("app.json:1:"), "{}", broken[0]);
//! ```

mod check;
pub mod export;
pub mod source;
mod tool;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, RwLock};

pub use check::is_mode_id;
pub use source::{Place, Problem};
pub use tool::{MAX_TIMEOUT_MS, Tool, ToolShapeError, ToolSpec};

/// The default catalog: the product's own tools and modes.
pub const DEFAULT_CATALOG: &str = include_str!("../../catalog/default.json");
/// How the default catalog is named in messages.
pub const DEFAULT_NAME: &str = "the default catalog";

/// The id of the one mode of a catalog that declares none.
pub const IMPLICIT_MODE: &str = "default";
/// The prefix of the tools that enter a mode.
pub const ENTER_PREFIX: &str = "enter_";
/// The prefix of the tools that leave a nested mode.
pub const LEAVE_PREFIX: &str = "leave_";

/// A session mode: the instructions an agent runs with in it, and where it may go next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mode {
    pub id: String,
    pub instructions: String,
    /// The modes a session in this one may enter (`enter_<id>` tools).
    pub next: Vec<String>,
    /// Entering this mode keeps the mode it was entered from, which `leave_<id>` returns to.
    pub nested: bool,
}

/// A mode move, as a tool an agent can call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Move<'a> {
    Enter(&'a str),
    Leave(&'a str),
}

impl Move<'_> {
    /// The move's tool name.
    pub fn tool_name(&self) -> String {
        match self {
            Move::Enter(id) => format!("{ENTER_PREFIX}{id}"),
            Move::Leave(id) => format!("{LEAVE_PREFIX}{id}"),
        }
    }

    /// What the move's tool tells the agent's model: where it leads and what to do there.
    /// `target` is the mode it leads to, when known (leaving returns to whichever mode the
    /// session came from, known only in a session).
    pub fn description(&self, target: Option<&Mode>) -> String {
        let text = match (self, target) {
            (Move::Enter(_), Some(t)) => format!(
                "Move the conversation to its {} mode. In that mode: {}",
                t.id, t.instructions
            ),
            (Move::Enter(id), None) => format!("Move the conversation to its {id} mode."),
            (Move::Leave(from), Some(t)) => format!(
                "Leave the {from} mode and return to the {} mode. In that mode: {}",
                t.id, t.instructions
            ),
            (Move::Leave(from), None) => format!(
                "Leave the {from} mode and return to the mode the conversation was in before \
                 (the answer gives its instructions)."
            ),
        };
        text.trim_end().trim_end_matches(':').to_owned()
    }

    /// The move a tool name stands for, if it is one (whether or not the mode exists).
    pub fn of(tool: &str) -> Option<Move<'_>> {
        if let Some(id) = tool.strip_prefix(ENTER_PREFIX) {
            Some(Move::Enter(id))
        } else {
            tool.strip_prefix(LEAVE_PREFIX).map(Move::Leave)
        }
    }
}

/// A checked catalog: every schema compiled, every mode reachable.
#[derive(Debug)]
pub struct Catalog {
    source: String,
    initial: String,
    modes: BTreeMap<String, Mode>,
    /// Tools in the file's order.
    tools: Vec<Tool>,
}

impl Catalog {
    /// Parses and checks a catalog's text; every problem found, each with its place.
    pub fn parse(file: &str, text: &str) -> Result<Catalog, Vec<Problem>> {
        check::check(file, text)
    }

    /// Reads and checks the catalog file at `path`.
    pub fn load(path: &Path) -> Result<Catalog, Vec<Problem>> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| {
            vec![Problem {
                place: Place {
                    file: file.clone(),
                    path: String::new(),
                    line: None,
                },
                message: format!("cannot be read: {e}"),
            }]
        })?;
        Catalog::parse(&file, &text)
    }

    /// The catalog named by `path`, or the default one.
    pub fn load_or_default(path: Option<&Path>) -> Result<Catalog, Vec<Problem>> {
        match path {
            Some(path) => Catalog::load(path),
            None => Catalog::default_catalog(),
        }
    }

    /// The product's own tools and modes.
    pub fn default_catalog() -> Result<Catalog, Vec<Problem>> {
        Catalog::parse(DEFAULT_NAME, DEFAULT_CATALOG)
    }

    /// Where the catalog came from (a path, or the default's name).
    pub fn source(&self) -> &str {
        &self.source
    }

    pub fn initial_mode(&self) -> &str {
        &self.initial
    }

    pub fn mode(&self, id: &str) -> Option<&Mode> {
        self.modes.get(id)
    }

    /// Every mode, by id.
    pub fn modes(&self) -> impl Iterator<Item = &Mode> {
        self.modes.values()
    }

    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.spec.name == name)
    }

    /// Every tool, in the file's order.
    pub fn tools(&self) -> impl Iterator<Item = &Tool> {
        self.tools.iter()
    }

    /// The tools a mode offers, in the file's order.
    pub fn tools_for<'a>(&'a self, mode: &'a str) -> impl Iterator<Item = &'a Tool> + 'a {
        self.tools.iter().filter(move |t| t.spec.offered_in(mode))
    }

    /// True when `name` is a tool of the catalog or one of its mode moves: a page may not
    /// define a tool of that name.
    pub fn claims(&self, name: &str) -> bool {
        self.tool(name).is_some()
            || match Move::of(name) {
                Some(Move::Enter(id)) | Some(Move::Leave(id)) => self.modes.contains_key(id),
                None => false,
            }
    }

    /// One line saying what the catalog holds.
    pub fn summary(&self) -> String {
        format!(
            "{}: {} tools, {} modes, starting in {}",
            self.source,
            self.tools.len(),
            self.modes.len(),
            self.initial
        )
    }
}

/// The catalog a running worker uses now; a reload swaps it whole, and whoever holds the old
/// one finishes with it.
#[derive(Clone)]
pub struct Shared(Arc<RwLock<Arc<Catalog>>>);

impl Shared {
    pub fn new(catalog: Catalog) -> Self {
        Shared(Arc::new(RwLock::new(Arc::new(catalog))))
    }

    /// The catalog now. The lock is held only to clone the `Arc`.
    pub fn current(&self) -> Arc<Catalog> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Makes `catalog` the current one; returns the one it replaced.
    pub fn replace(&self, catalog: Catalog) -> Arc<Catalog> {
        let mut guard = self.0.write().unwrap_or_else(|p| p.into_inner());
        std::mem::replace(&mut *guard, Arc::new(catalog))
    }
}

#[cfg(test)]
mod tests;
