//! Tools a tab's page defined itself (`handle(name, definition, handler)` in the browser
//! client), offered only when the worker is told to (`WORKER_PAGE_TOOLS=true`), because the
//! page's text then reaches the agent's model. They are checked like catalog tools (schemas
//! compiled, timeouts bounded) with tighter bounds on size and count; one that is wrong is left
//! out (and logged), the rest are offered.

use serde_json::Value;

use crate::catalog::is_mode_id;
use crate::catalog::{Tool, ToolSpec};

/// Most page tools taken from one tab.
pub const MAX_PAGE_TOOLS: usize = 32;
/// The longest description of a page tool, in characters.
pub const MAX_PAGE_DESCRIPTION: usize = 1024;
/// The largest definition of one page tool, as compact JSON.
pub const MAX_PAGE_TOOL_BYTES: usize = 8 * 1024;

/// The page tools of one declaration of a tab, compiled.
#[derive(Debug, Default)]
pub struct PageTools {
    /// The tab's revision they were compiled from.
    pub revision: u64,
    pub tools: Vec<Tool>,
    /// The definitions left out, with why (name or position, reason).
    pub refused: Vec<(String, String)>,
}

impl PageTools {
    pub fn get(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.spec.name == name)
    }
}

/// Compiles a tab's page tool definitions (`handles` is what the tab declared it handles: a
/// page tool must be among them).
pub fn compile(revision: u64, definitions: &[Value], handles: Option<&[String]>) -> PageTools {
    let mut page = PageTools {
        revision,
        ..PageTools::default()
    };
    for (i, raw) in definitions.iter().enumerate() {
        let label = raw
            .get("name")
            .and_then(Value::as_str)
            .map_or_else(|| format!("pageTools[{i}]"), str::to_owned);
        match one(i, raw, handles, &page.tools) {
            Ok(tool) => page.tools.push(tool),
            Err(why) => page.refused.push((label, why)),
        }
    }
    page
}

fn one(i: usize, raw: &Value, handles: Option<&[String]>, taken: &[Tool]) -> Result<Tool, String> {
    if i >= MAX_PAGE_TOOLS {
        return Err(format!("more than {MAX_PAGE_TOOLS} page tools"));
    }
    let size = serde_json::to_vec(raw).map_or(usize::MAX, |b| b.len());
    if size > MAX_PAGE_TOOL_BYTES {
        return Err(format!("definition over {MAX_PAGE_TOOL_BYTES} bytes"));
    }
    let spec: ToolSpec =
        serde_json::from_value(raw.clone()).map_err(|e| format!("not a tool definition: {e}"))?;
    if spec.description.chars().count() > MAX_PAGE_DESCRIPTION {
        return Err(format!(
            "description over {MAX_PAGE_DESCRIPTION} characters"
        ));
    }
    if let Some(modes) = &spec.modes
        && let Some(bad) = modes.iter().find(|m| !is_mode_id(m))
    {
        return Err(format!("{bad:?} is not a mode id"));
    }
    if taken.iter().any(|t| t.spec.name == spec.name) {
        return Err("defined twice".into());
    }
    if handles.is_some_and(|h| !h.contains(&spec.name)) {
        return Err("not among the tools the tab handles".into());
    }
    Tool::compile(spec).map_err(|problems| {
        problems
            .iter()
            .map(|p| format!("{}: {}", p.field, p.message))
            .collect::<Vec<_>>()
            .join("; ")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn def(name: &str) -> Value {
        json!({"name": name, "description": "Switch the page's theme.",
               "parameters": {"type": "object", "properties": {"theme": {"enum": ["light", "dark"]}},
                              "required": ["theme"]},
               "awaitResult": true, "timeoutMs": 5000})
    }

    #[test]
    fn good_definitions_compile_and_bad_ones_are_left_out() {
        let handles = vec!["set_theme".to_owned(), "other".to_owned(), "bad".to_owned()];
        let mut bad = def("bad");
        bad["parameters"] = json!({"type": "object", "properties": {"x": {"type": 5}}});
        let mut long = def("other");
        long["description"] = json!("x".repeat(2000));
        let page = compile(
            3,
            &[
                def("set_theme"),
                def("set_theme"),
                bad,
                long,
                def("unhandled"),
                json!(7),
            ],
            Some(&handles),
        );
        assert_eq!(page.revision, 3);
        assert_eq!(page.tools.len(), 1);
        let tool = page.get("set_theme").unwrap();
        assert!(tool.validate(&json!({"theme": "dark"})).is_ok());
        assert!(tool.validate(&json!({"theme": "blue"})).is_err());
        let refused: Vec<&str> = page.refused.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            refused,
            ["set_theme", "bad", "other", "unhandled", "pageTools[5]"]
        );
        assert!(
            page.refused[1].1.contains("does not compile"),
            "{:?}",
            page.refused
        );
    }

    #[test]
    fn count_and_size_are_bounded() {
        let names: Vec<String> = (0..40).map(|i| format!("t{i}")).collect();
        let defs: Vec<Value> = names.iter().map(|n| def(n)).collect();
        let page = compile(1, &defs, None);
        assert_eq!(page.tools.len(), MAX_PAGE_TOOLS);
        let mut huge = def("huge");
        huge["parameters"]["description"] = json!("y".repeat(MAX_PAGE_TOOL_BYTES));
        assert!(compile(1, &[huge], None).tools.is_empty());
    }
}
