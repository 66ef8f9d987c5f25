//! The UI tools the product ships, with the argument and result shapes of the documents it grew
//! from: `OpenPopover`; `draw_card` / `show_card` and the four reading phases (intent, spread,
//! reading, follow-up) as modes; `present_to_cassette` and `loading_status`.

use serde_json::json;

use crate::modes::{Mode, ModeSet};
use crate::tools::{Registry, ToolSpec};

/// The general mode: popovers, cassettes, loading messages.
pub const DEFAULT_MODE: &str = "default";
/// Reading phases.
pub const INTENT: &str = "intent";
pub const SPREAD: &str = "spread";
pub const READING: &str = "reading";
pub const FOLLOWUP: &str = "followup";

/// How long a tab gets to answer `draw_card`: a person is choosing a card.
pub const DRAW_CARD_TIMEOUT_MS: u64 = 120_000;
/// How long a tab gets to answer `show_card`: the display animation.
pub const SHOW_CARD_TIMEOUT_MS: u64 = 20_000;

fn modes_of(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|s| (*s).to_owned()).collect()
}

/// Every shipped tool.
pub fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "OpenPopover".into(),
            description: "Open a green popover notification in the user's browser for a few seconds, optionally with a short message.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "message": {"type": "string", "maxLength": 280, "description": "Text shown in the popover"}
                },
                "additionalProperties": false
            }),
            await_result: false,
            timeout_ms: None,
            output_schema: None,
            modes: modes_of(&[DEFAULT_MODE]),
        },
        ToolSpec {
            name: "draw_card".into(),
            description: "Ask the user to pick a card from the shuffled deck for one position of the spread. Call it once per position, after describing what the position means. Returns {cardId, cardName, reversed}.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "positionLabel": {"type": "string", "minLength": 1, "maxLength": 64, "description": "Name of the position, e.g. \"Past\""},
                    "promptRole": {"type": "string", "minLength": 1, "maxLength": 200, "description": "What this position represents in the reading"}
                },
                "required": ["positionLabel", "promptRole"],
                "additionalProperties": false
            }),
            await_result: true,
            timeout_ms: Some(DRAW_CARD_TIMEOUT_MS),
            output_schema: Some(json!({
                "type": "object",
                "properties": {
                    "cardId": {"type": "string", "description": "The card's id, e.g. \"the-fool\""},
                    "cardName": {"type": "string", "description": "The card's name, e.g. \"The Fool\""},
                    "reversed": {"type": "boolean", "description": "Whether the card came up reversed"}
                },
                "required": ["cardId", "cardName", "reversed"]
            })),
            modes: modes_of(&[SPREAD, FOLLOWUP]),
        },
        ToolSpec {
            name: "show_card".into(),
            description: "Display a card on screen before interpreting it. Returns {success, cardId, reversed}.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "cardId": {"type": "string", "pattern": "^[a-z0-9]+(-[a-z0-9]+)*$", "maxLength": 64, "description": "The card's id, e.g. \"the-fool\""},
                    "reversed": {"type": "boolean", "description": "Whether the card is upside down"}
                },
                "required": ["cardId", "reversed"],
                "additionalProperties": false
            }),
            await_result: true,
            timeout_ms: Some(SHOW_CARD_TIMEOUT_MS),
            output_schema: Some(json!({
                "type": "object",
                "properties": {
                    "success": {"type": "boolean"},
                    "cardId": {"type": "string"},
                    "reversed": {"type": "boolean"}
                },
                "required": ["success", "cardId", "reversed"]
            })),
            modes: modes_of(&[READING, FOLLOWUP]),
        },
        ToolSpec {
            name: "present_to_cassette".into(),
            description: "Put precise information (an ID, a number, a code, a credential) on a cassette in the user's screen; they open it to read the content. Mention that you sent it.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "title": {"type": "string", "minLength": 1, "maxLength": 40, "description": "A one or two word label"},
                    "content": {"type": "string", "minLength": 1, "maxLength": 4000, "description": "The information to present"}
                },
                "required": ["title", "content"],
                "additionalProperties": false
            }),
            await_result: false,
            timeout_ms: None,
            output_schema: None,
            modes: modes_of(&[DEFAULT_MODE]),
        },
        ToolSpec {
            name: "loading_status".into(),
            description: "Show a short, playful status line while you look something up.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "text": {"type": "string", "minLength": 1, "maxLength": 200}
                },
                "required": ["text"],
                "additionalProperties": false
            }),
            await_result: false,
            timeout_ms: None,
            output_schema: None,
            modes: modes_of(&[DEFAULT_MODE]),
        },
    ]
}

/// The registry of every shipped tool.
pub fn registry() -> Registry {
    let mut r = Registry::default();
    for spec in specs() {
        // The shipped schemas are constants covered by tests; a failure here is a build defect.
        r.register(spec).expect("shipped tool specs are valid");
    }
    r
}

/// The shipped modes, starting in `default`.
pub fn modes() -> ModeSet {
    let mode = |id: &str, instructions: &str, next: &[&str]| Mode {
        id: id.into(),
        instructions: instructions.into(),
        next: modes_of(next),
    };
    ModeSet::new(
        DEFAULT_MODE,
        [
            mode(
                DEFAULT_MODE,
                "You help the user through their screen. Use OpenPopover for a quick visible \
                 confirmation. Whenever you give precise data (IDs, numbers, codes, \
                 credentials), also call present_to_cassette and say you sent it. Before a \
                 lookup, call loading_status with a short playful line.",
                &[INTENT, SPREAD],
            ),
            mode(
                INTENT,
                "Warm, conversational, two or three sentences at a time. Ask one clarifying \
                 question at a time until the question and the concern behind it are clear. \
                 Your only tools here move the session to its next phase.",
                &[SPREAD, DEFAULT_MODE],
            ),
            mode(
                SPREAD,
                "Choose a spread of one to ten cards that suits the question and say why. \
                 Describe each position, then call draw_card for it and wait for the card. \
                 When every position has a card, the reading begins.",
                &[READING],
            ),
            mode(
                READING,
                "You have every card. For each one: call show_card, wait for it, then interpret \
                 it in its position. Close with a synthesis and practical advice, paced for \
                 listening.",
                &[FOLLOWUP],
            ),
            mode(
                FOLLOWUP,
                "Answer follow-up questions from the spread. Draw new cards (one to three) only \
                 when a question truly needs them, and call show_card before interpreting a \
                 new card. Stay until the user is satisfied.",
                &[SPREAD, DEFAULT_MODE],
            ),
        ],
    )
    .expect("the default mode is defined")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn seed_argument_shapes() {
        let r = registry();
        r.validate(
            "draw_card",
            &json!({"positionLabel": "Past", "promptRole": "What shaped this"}),
        )
        .unwrap();
        assert!(
            r.validate("draw_card", &json!({"positionLabel": "Past"}))
                .is_err()
        );
        r.validate(
            "show_card",
            &json!({"cardId": "the-fool", "reversed": true}),
        )
        .unwrap();
        assert!(
            r.validate(
                "show_card",
                &json!({"cardId": "The Fool", "reversed": true})
            )
            .is_err()
        );
        assert!(
            r.validate(
                "show_card",
                &json!({"cardId": "the-fool", "reversed": "no"})
            )
            .is_err()
        );
        r.validate(
            "present_to_cassette",
            &json!({"title": "Philhealth ID", "content": "1234-5678-9012"}),
        )
        .unwrap();
        r.validate("OpenPopover", &json!({})).unwrap();
        r.validate("OpenPopover", &json!({"message": "hi"}))
            .unwrap();
        assert!(r.validate("OpenPopover", &json!({"message": 5})).is_err());
        r.validate(
            "loading_status",
            &json!({"text": "Digging through memory files"}),
        )
        .unwrap();
        assert_eq!(r.names().count(), 5);
    }
}
