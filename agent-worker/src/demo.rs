//! `agent-worker demo <apiKey>`: a scripted walk-through of the default catalog's tools against
//! a live tab, so a person sees each round trip without a voice pipeline. It is a fixed script,
//! not an AI: it opens a session, moves it through the reading modes, and prints each step.

use std::io::Write;

use relay_wire::fingerprint;
use serde_json::{Value, json};

use crate::Worker;
use crate::error::{Code, ToolError};

/// The default catalog's modes the script walks through.
const DEFAULT_MODE: &str = "default";
const SPREAD: &str = "spread";
const READING: &str = "reading";

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

/// Runs the script. Returns the drawn cards, or the first failure.
pub async fn run(
    worker: &Worker,
    key: &str,
    token: &str,
    out: &mut impl Write,
) -> Result<Vec<Drawn>, ToolError> {
    let sessions = &worker.sessions;
    sessions.open(key, "demo", "demo-script", "demo", true);
    say(
        out,
        &format!(
            "demo script (scripted, not an AI) for key {}",
            fingerprint(key)
        ),
    );
    let result = steps(worker, key, token, out).await;
    sessions.close(key, "demo finished");
    match &result {
        Ok(_) => say(out, "demo finished: every round trip completed"),
        Err(e) => say(out, &format!("demo stopped: {}", e.to_line())),
    }
    result
}

async fn step(
    worker: &Worker,
    key: &str,
    token: &str,
    out: &mut impl Write,
    tool: &str,
    args: Value,
) -> Result<Value, ToolError> {
    say(out, &format!("→ {tool} {args}"));
    let started = std::time::Instant::now();
    let result = worker.run_tool(key, token, tool, &args).await?;
    say(
        out,
        &format!("← {result} ({} ms)", started.elapsed().as_millis()),
    );
    Ok(result)
}

async fn steps(
    worker: &Worker,
    key: &str,
    token: &str,
    out: &mut impl Write,
) -> Result<Vec<Drawn>, ToolError> {
    let mode = |m: &str| {
        worker.sessions.enter_mode(key, m).map_err(|e| {
            ToolError::new(
                Code::UnknownTool,
                format!("{e}: the demo walks the default catalog's modes"),
            )
        })
    };

    say(out, "1. a popover");
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

    say(
        out,
        "2. a three-card spread: pick a card in the tab for each position",
    );
    mode(SPREAD)?;
    let mut drawn = Vec::new();
    for (position, role) in SPREAD_POSITIONS {
        let card = step(
            worker,
            key,
            token,
            out,
            "draw_card",
            json!({"positionLabel": position, "promptRole": role}),
        )
        .await?;
        drawn.push(Drawn { position, card });
    }

    say(out, "3. each card shown");
    mode(READING)?;
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
    mode(DEFAULT_MODE)?;
    let content = drawn
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
        .join("\n");
    step(
        worker,
        key,
        token,
        out,
        "present_to_cassette",
        json!({"title": "Your spread", "content": content}),
    )
    .await?;
    Ok(drawn)
}
