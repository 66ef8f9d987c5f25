//! Sessions without a relay: lifecycle, modes, followers, figures.

use std::time::Duration;

use relay_wire::{Secret, fingerprint};

use super::*;
use crate::client::ClientConfig;
use crate::error::ToolError;

fn sessions() -> Sessions {
    // Nothing listens there: the relay is never reached in these tests.
    let mut config = ClientConfig::new("http://127.0.0.1:9", Secret::new("s".repeat(32)));
    config.retries = 0;
    let client = RelayClient::new(config).unwrap();
    let catalog = catalog::Shared::new(Catalog::default_catalog().unwrap());
    Sessions::new(catalog, client, false)
}

#[tokio::test]
async fn lifecycle_modes_and_figures() {
    let sessions = sessions();
    let key = "va_1111111111111111111111111111111111111111111111111111111111111111";
    assert!(sessions.open(key, "room-1", "tab-1", "livekit", true));
    assert!(!sessions.open(key, "room-1", "tab-1", "livekit", true));
    assert!(sessions.enforces_modes(key));
    let mut follower = sessions.follow(key).unwrap();
    assert_eq!(sessions.mode(key).as_deref(), Some("default"));
    sessions.enter_mode(key, "spread").unwrap();
    assert!(follower.has_changed().unwrap());
    follower.borrow_and_update();
    assert_eq!(sessions.mode(key).as_deref(), Some("spread"));
    assert!(sessions.enter_mode(key, "nowhere").is_err());
    assert_eq!(
        sessions.change_by_tool(key, "enter_reading").as_deref(),
        Some("reading")
    );
    assert!(sessions.change_by_tool(key, "enter_spread").is_none());
    sessions.exit_mode(key).unwrap();
    assert_eq!(sessions.mode(key).as_deref(), Some("default"));
    sessions.record(key, "draw_card", Duration::from_millis(30), &Ok(()));
    sessions.record(
        key,
        "draw_card",
        Duration::from_millis(10),
        &Err(ToolError::new(relay_wire::ErrorCode::Timeout, "late")),
    );
    let snap = sessions.snapshot();
    assert_eq!(snap.len(), 1);
    assert_eq!(snap[0].mode, "default");
    assert_eq!(snap[0].key, fingerprint(key));
    assert_eq!(snap[0].followers, 1);
    assert_eq!(snap[0].mode_transitions, 3);
    let s = &snap[0].tools["draw_card"];
    assert_eq!((s.calls, s.failures, s.total_ms, s.max_ms), (2, 1, 40, 30));
    assert_eq!(
        sessions.close_room("room-1", "room_finished"),
        vec![key.to_owned()]
    );
    assert!(!sessions.is_open(key));
    assert!(
        follower.has_changed().is_err(),
        "closing the session ends its followers"
    );
    assert!(sessions.follow(key).is_none());
    assert!(!sessions.close(key, "again"));
    assert!(sessions.has_ended(key));
}

#[tokio::test]
async fn a_tab_the_relay_cannot_describe_hides_nothing() {
    let sessions = sessions();
    let key = "va_3333333333333333333333333333333333333333333333333333333333333333";
    sessions.open(key, "", "", "agent", true);
    let tab = sessions.tab(key).await;
    assert!(tab.state.is_none());
    assert!(tab.page.is_none());
}
