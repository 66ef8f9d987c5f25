//! `agent-worker demo <apiKey>`: a scripted walk-through of the product's tools against a live
//! tab, so a person sees each round trip without a voice pipeline. It is a fixed script, not an
//! AI: it opens a session and, as an agent would, moves it along the catalog's own `next`
//! chains (`enter_<mode>` tools) to a mode that offers each tool it shows. It shows every tool
//! of the product's catalog and the tools the tab's page defines that it knows (`set_theme`);
//! a card the person declines is left out and the walk goes on; it ends on the cassette.

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;

use relay_wire::{ErrorCode, fingerprint};
use serde_json::{Value, json};

use crate::Worker;
use crate::catalog::{Catalog, Move};
use crate::error::{Code, ToolError};

/// The product's tools the script shows, in its order.
pub const TOOLS: [&str; 6] = [
    "OpenPopover",
    "loading_status",
    "pin_note",
    "draw_card",
    "show_card",
    "present_to_cassette",
];
/// The page tool the demo page defines, shown when the tab defines it too.
const PAGE_THEME_TOOL: &str = "set_theme";

/// The three positions of the demo spread.
const SPREAD_POSITIONS: [(&str, &str); 3] = [
    ("Past", "What led here"),
    ("Present", "Where things stand"),
    ("Future", "Where this is heading"),
];

/// A card drawn by the person at the tab.
#[derive(Debug, Clone)]
pub struct Drawn {
    pub position: &'static str,
    pub card: Value,
}

fn say(out: &mut impl Write, line: &str) {
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The catalog's tools the script needs that it lacks: the demo walks the product's own tools.
pub fn missing_tools(catalog: &Catalog) -> Vec<&'static str> {
    TOOLS
        .into_iter()
        .filter(|t| catalog.tool(t).is_none())
        .collect()
}

/// Runs the script. Returns the drawn cards, or the first failure that stops it.
pub async fn run(
    worker: &Worker,
    key: &str,
    token: &str,
    out: &mut impl Write,
) -> Result<Vec<Drawn>, ToolError> {
    let catalog = worker.catalog.current();
    let missing = missing_tools(&catalog);
    if !missing.is_empty() {
        let e = ToolError::new(
            Code::UnknownTool,
            format!(
                "the demo walks the product's own tools, and {} has no {}: run it with the \
                 default catalog (no --catalog, WORKER_CATALOG unset)",
                catalog.source(),
                missing.join(", ")
            ),
        );
        say(out, &format!("demo not started: {}", e.to_line()));
        return Err(e);
    }
    let sessions = &worker.sessions;
    sessions.open(key, "demo", "demo-script", "demo", true);
    sessions.mode_told(key).await;
    say(
        out,
        &format!(
            "demo script (scripted, not an AI) for key {} ({})",
            fingerprint(key),
            catalog.summary()
        ),
    );
    let result = steps(worker, key, token, out).await;
    sessions.close(key, "demo finished");
    match &result {
        Ok(drawn) => say(
            out,
            &format!(
                "demo finished: every tool shown, {} of {} cards drawn",
                drawn.len(),
                SPREAD_POSITIONS.len()
            ),
        ),
        Err(e) => say(out, &format!("demo stopped: {}", e.to_line())),
    }
    result
}

/// The shortest chain of `enter_<mode>` moves from `from` to a mode that offers `tool`.
fn route(catalog: &Catalog, from: &str, tool: &str) -> Option<Vec<String>> {
    let offers = |mode: &str| catalog.tool(tool).is_some_and(|t| t.spec.offered_in(mode));
    let mut came_from: BTreeMap<String, String> = BTreeMap::new();
    let mut queue = VecDeque::from([from.to_owned()]);
    while let Some(mode) = queue.pop_front() {
        if offers(&mode) {
            let mut path = vec![mode.clone()];
            let mut at = mode;
            while let Some(prev) = came_from.get(&at) {
                path.push(prev.clone());
                at = prev.clone();
            }
            path.pop();
            path.reverse();
            return Some(path);
        }
        for next in catalog
            .mode(&mode)
            .map(|m| m.next.as_slice())
            .unwrap_or(&[])
        {
            if next != from && !came_from.contains_key(next) {
                came_from.insert(next.clone(), mode.clone());
                queue.push_back(next.clone());
            }
        }
    }
    None
}

/// Moves the session, as an agent would, to a mode that offers `tool`.
async fn reach(
    worker: &Worker,
    key: &str,
    token: &str,
    out: &mut impl Write,
    tool: &str,
) -> Result<(), ToolError> {
    let mode = worker
        .sessions
        .mode(key)
        .unwrap_or_else(|| worker.catalog.current().initial_mode().to_owned());
    let path = route(&worker.catalog.current(), &mode, tool).ok_or_else(|| {
        ToolError::new(
            Code::ToolNotAllowed,
            format!("no chain of modes leads from {mode} to one that offers {tool}"),
        )
    })?;
    for next in path {
        let name = Move::Enter(&next).tool_name();
        say(out, &format!("→ {name}"));
        worker
            .agent_call(key, token, &name, &json!({}))
            .await
            .result?;
        // The tab shows each mode the walk goes through, in order.
        worker.sessions.mode_told(key).await;
        say(out, &format!("← now in the {next} mode"));
    }
    Ok(())
}

async fn step(
    worker: &Worker,
    key: &str,
    token: &str,
    out: &mut impl Write,
    tool: &str,
    args: Value,
) -> Result<Value, ToolError> {
    reach(worker, key, token, out, tool).await?;
    say(out, &format!("→ {tool} {args}"));
    let started = std::time::Instant::now();
    let result = worker.run_tool(key, token, tool, &args).await?;
    say(
        out,
        &format!("← {result} ({} ms)", started.elapsed().as_millis()),
    );
    Ok(result)
}

/// Whether the tab defines the page tool `name` (and the worker offers page tools).
async fn page_defines(worker: &Worker, key: &str, name: &str) -> bool {
    worker.sessions.page_tools()
        && worker
            .sessions
            .tab(key)
            .await
            .page
            .is_some_and(|p| p.tools.iter().any(|t| t.spec.name == name))
}

async fn steps(
    worker: &Worker,
    key: &str,
    token: &str,
    out: &mut impl Write,
) -> Result<Vec<Drawn>, ToolError> {
    say(out, "1. a popover, a status line and a pinned note");
    step(
        worker,
        key,
        token,
        out,
        "OpenPopover",
        json!({"message": "Hello from the demo script"}),
    )
    .await?;
    step(
        worker,
        key,
        token,
        out,
        "loading_status",
        json!({"text": "Shuffling the deck…"}),
    )
    .await?;
    step(
        worker,
        key,
        token,
        out,
        "pin_note",
        json!({"text": "The demo script pinned this note: dismiss it when you like", "tone": "info"}),
    )
    .await?;
    if page_defines(worker, key, PAGE_THEME_TOOL).await {
        say(
            out,
            "   the page's own tool, set_theme: light, then dark again",
        );
        for theme in ["light", "dark"] {
            say(
                out,
                &format!("→ {PAGE_THEME_TOOL} {}", json!({"theme": theme})),
            );
            let result = worker
                .run_tool(key, token, PAGE_THEME_TOOL, &json!({"theme": theme}))
                .await?;
            say(out, &format!("← {result}"));
        }
    }

    say(
        out,
        "2. a three-card spread: pick a card in the tab for each position (Escape declines one)",
    );
    let mut drawn = Vec::new();
    for (position, role) in SPREAD_POSITIONS {
        let args = json!({"positionLabel": position, "promptRole": role});
        match step(worker, key, token, out, "draw_card", args).await {
            Ok(card) => drawn.push(Drawn { position, card }),
            // Declined, or not picked in time: that position stays empty, the walk goes on.
            Err(e) if e.code == ErrorCode::ToolFailed || e.code == ErrorCode::Timeout => {
                say(out, &format!("  no card for {position}: {}", e.to_line()));
            }
            Err(e) => return Err(e),
        }
    }

    say(out, "3. each drawn card shown");
    for d in &drawn {
        let card_id = d.card.get("cardId").cloned().unwrap_or(Value::Null);
        let reversed = d
            .card
            .get("reversed")
            .cloned()
            .unwrap_or(Value::Bool(false));
        step(
            worker,
            key,
            token,
            out,
            "show_card",
            json!({"cardId": card_id, "reversed": reversed}),
        )
        .await?;
    }

    say(out, "4. a cassette with the spread");
    step(
        worker,
        key,
        token,
        out,
        "present_to_cassette",
        json!({"title": "Your spread", "content": spread_text(&drawn)}),
    )
    .await?;
    Ok(drawn)
}

/// The spread as the cassette shows it.
fn spread_text(drawn: &[Drawn]) -> String {
    if drawn.is_empty() {
        return "No card was drawn.".to_owned();
    }
    drawn
        .iter()
        .map(|d| {
            let name = d
                .card
                .get("cardName")
                .and_then(Value::as_str)
                .unwrap_or("?");
            let reversed = d
                .card
                .get("reversed")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            format!(
                "{}: {name}{}",
                d.position,
                if reversed { " (reversed)" } else { "" }
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_follow_the_catalogs_next_chains() {
        let catalog = Catalog::default_catalog().unwrap();
        assert!(missing_tools(&catalog).is_empty());
        let path = |from: &str, tool: &str| route(&catalog, from, tool).unwrap();
        assert!(path("default", "OpenPopover").is_empty());
        assert_eq!(path("default", "draw_card"), ["spread"]);
        assert_eq!(path("spread", "show_card"), ["reading"]);
        // reading → default is no move of the catalog: through followup.
        assert_eq!(
            path("reading", "present_to_cassette"),
            ["followup", "default"]
        );
        let other = Catalog::parse(
            "app.json",
            r#"{"tools": [{"name": "x", "description": "d", "parameters": {"type": "object"}}]}"#,
        )
        .unwrap();
        assert_eq!(missing_tools(&other), TOOLS);
    }
}
