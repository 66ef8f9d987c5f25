//! The worker with the default catalog and with an app's own, without a relay: mode moves,
//! mode checks and schema checks happen before anything is sent.

use serde_json::json;

use crate::Worker;
use crate::catalog::Catalog;
use crate::client::{ClientConfig, RelayClient};
use crate::error::Code;
use crate::session::Offer;
use relay_wire::{ErrorCode, Secret};

/// A session token as the relay would check it (these tests never reach a relay).
const TOKEN: &str = "header.payload.signature";
const KEY: &str = "va_2222222222222222222222222222222222222222222222222222222222222222";

fn client() -> RelayClient {
    // Nothing listens there: these tests never reach a relay (the tab counts as unknown).
    let mut config = ClientConfig::new("http://127.0.0.1:9", Secret::new("s".repeat(32)));
    config.retries = 0;
    RelayClient::new(config).unwrap()
}

fn names(offer: &Offer) -> Vec<&str> {
    offer.tools.iter().map(|t| t.name.as_str()).collect()
}

#[tokio::test]
async fn an_agent_moves_through_the_modes_with_tools() {
    let w = Worker::new(client());
    let offer = w.offer(KEY).await;
    assert_eq!(offer.mode, "default");
    assert_eq!(
        names(&offer),
        [
            "OpenPopover",
            "pin_note",
            "present_to_cassette",
            "loading_status",
            "enter_intent",
            "enter_spread"
        ]
    );
    assert!(w.sessions.is_open(KEY), "asking opens the session");

    let refused = w.agent_call(KEY, TOKEN, "enter_reading", &json!({})).await;
    assert_eq!(refused.result.unwrap_err().code, Code::ToolNotAllowed);
    assert!(!refused.mode_changed);
    let unknown = w.agent_call(KEY, TOKEN, "enter_nowhere", &json!({})).await;
    assert_eq!(unknown.result.unwrap_err().code, Code::UnknownTool);
    let with_args = w
        .agent_call(KEY, TOKEN, "enter_spread", &json!({"x": 1}))
        .await;
    assert_eq!(with_args.result.unwrap_err().code, Code::InvalidArguments);

    let moved = w.agent_call(KEY, TOKEN, "enter_spread", &json!({})).await;
    assert!(moved.mode_changed);
    assert_eq!(moved.mode, "spread");
    assert_eq!(moved.result.unwrap()["mode"], "spread");
    let offer = w.offer(KEY).await;
    assert_eq!(names(&offer), ["draw_card", "enter_reading"]);
    let draw = &offer.tools[0];
    assert!(draw.await_result);
    assert_eq!(
        draw.output_schema.as_ref().unwrap()["required"],
        json!(["cardId", "cardName", "reversed"])
    );
    let not_here = w.agent_call(KEY, TOKEN, "OpenPopover", &json!({})).await;
    assert_eq!(not_here.result.unwrap_err().code, Code::ToolNotAllowed);
    let bad = w.agent_call(KEY, TOKEN, "draw_card", &json!({})).await;
    assert_eq!(bad.result.unwrap_err().code, Code::InvalidArguments);
    assert_eq!(bad.mode, "spread");
    let nothing = w.agent_call(KEY, TOKEN, "CreateDiagram", &json!({})).await;
    assert_eq!(nothing.result.unwrap_err().code, Code::UnknownTool);
}

#[tokio::test]
async fn a_session_that_ended_is_not_reopened_by_an_agent() {
    let w = Worker::new(client());
    assert!(w.sessions.open(KEY, "room-1", "tab-1", "livekit", true));
    assert!(w.sessions.end(KEY, "participant_left"));
    // The agent goes on calling for the key its user left with: refused, no new session.
    let call = w.agent_call(KEY, TOKEN, "enter_spread", &json!({})).await;
    assert!(call.result.unwrap_err().is(ErrorCode::UnknownKey));
    assert!(!call.mode_changed);
    assert_eq!(w.offer(KEY).await.mode, "default");
    assert!(!w.sessions.is_open(KEY));
    assert!(!w.sessions.open(KEY, "room-1", "tab-1", "livekit", true));
}

/// An app's own catalog with a nested mode: the way in, and the way back to where it came from.
#[tokio::test]
async fn an_apps_catalog_with_a_nested_mode() {
    let catalog = Catalog::parse(
        "game.json",
        &json!({
            "initialMode": "lobby",
            "modes": [
                {"id": "lobby", "instructions": "Welcome players.", "next": ["game", "shop"]},
                {"id": "shop", "instructions": "Sell things.", "next": ["game", "lobby"]},
                {"id": "game", "instructions": "Run the game.", "next": [], "nested": true}
            ],
            "tools": [
                {"name": "ShowScore", "description": "Show the score.",
                 "parameters": {"type": "object", "properties": {"points": {"type": "integer"}},
                                "required": ["points"]},
                 "modes": ["game"]},
                {"name": "ShowShelf", "description": "Show the shelf.",
                 "parameters": {"type": "object"}, "modes": ["shop"]}
            ]
        })
        .to_string(),
    )
    .unwrap();
    let w = Worker::with_catalog(client(), catalog, false);
    assert_eq!(names(&w.offer(KEY).await), ["enter_game", "enter_shop"]);
    assert!(
        w.agent_call(KEY, TOKEN, "enter_shop", &json!({}))
            .await
            .mode_changed
    );
    assert_eq!(
        names(&w.offer(KEY).await),
        ["ShowShelf", "enter_game", "enter_lobby"]
    );
    let entered = w.agent_call(KEY, TOKEN, "enter_game", &json!({})).await;
    assert_eq!(entered.mode, "game");
    let offer = w.offer(KEY).await;
    assert_eq!(names(&offer), ["ShowScore", "leave_game"]);
    assert!(
        offer.tools[1]
            .description
            .contains("return to the shop mode"),
        "{}",
        offer.tools[1].description
    );
    let bad = w
        .agent_call(KEY, TOKEN, "ShowScore", &json!({"points": "many"}))
        .await;
    assert_eq!(bad.result.unwrap_err().code, Code::InvalidArguments);
    let back = w.agent_call(KEY, TOKEN, "leave_game", &json!({})).await;
    assert_eq!(back.mode, "shop", "back to the mode it came from");
    assert_eq!(
        w.agent_call(KEY, TOKEN, "leave_game", &json!({}))
            .await
            .result
            .unwrap_err()
            .code,
        Code::ToolNotAllowed
    );
}

#[tokio::test]
async fn a_reload_keeps_sessions_and_tells_their_followers() {
    let w = Worker::new(client());
    w.agent_call(KEY, TOKEN, "enter_spread", &json!({})).await;
    let mut follower = w.sessions.follow(KEY).unwrap();
    let before = w.offer(KEY).await.revision;
    let smaller = Catalog::parse(
        "small.json",
        &json!({"tools": [{"name": "Ping", "description": "p", "parameters": {"type": "object"}}]})
            .to_string(),
    )
    .unwrap();
    w.reload(smaller);
    assert!(follower.has_changed().unwrap());
    follower.borrow_and_update();
    assert!(w.sessions.is_open(KEY), "the session is kept");
    let offer = w.offer(KEY).await;
    assert_eq!(offer.mode, "default", "its mode is gone: the initial one");
    assert_eq!(names(&offer), ["Ping"]);
    assert_ne!(offer.revision, before);
}
