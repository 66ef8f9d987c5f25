//! In-process HTTP tests: `relay::run` on port 0 with a test config, driven with reqwest over
//! loopback. The Socket.IO side is exercised by the protocol tests in `e2e/protocol/`.

use std::time::Duration;

use livekit_api::access_token::TokenVerifier;
use relay_wire::{ErrorBody, KeyState, KeyStatus, TokenResponse};
use serde_json::json;

mod common;

use common::{LIVEKIT_SECRET, Relay as TestApp, WORKER_SECRET};

async fn spawn_app() -> TestApp {
    common::start(&["--token-mode", "open"]).await
}

impl TestApp {
    async fn token(&self) -> TokenResponse {
        let r = self.http.post(self.url("/token")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        r.json().await.unwrap()
    }

    async fn call(
        &self,
        secret: Option<&str>,
        body: serde_json::Value,
    ) -> (u16, serde_json::Value) {
        let mut req = self
            .http
            .post(self.url("/api/voice-agent/tool-call"))
            .json(&body);
        if let Some(s) = secret {
            req = req.bearer_auth(s);
        }
        let r = req.send().await.unwrap();
        (r.status().as_u16(), r.json().await.unwrap())
    }
}

#[tokio::test]
async fn token_is_verified_by_livekit_and_key_is_issued() {
    let app = spawn_app().await;
    let t = app.token().await;
    let claims = TokenVerifier::with_api_key("devkey", LIVEKIT_SECRET)
        .verify(&t.token)
        .unwrap();
    assert_eq!(claims.sub, t.identity);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&claims.metadata).unwrap(),
        json!({ "apiKey": t.api_key })
    );
    let status: KeyStatus = app
        .http
        .get(app.url(&format!("/api/voice-agent/keys/{}", t.api_key)))
        .bearer_auth(WORKER_SECRET)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status.state, KeyState::Issued);
    app.shutdown().await;
}

#[tokio::test]
async fn auth_comes_first_and_errors_use_the_one_body() {
    let app = spawn_app().await;
    let t = app.token().await;
    let (status, body) = app
        .call(
            None,
            json!({"apiKey": t.api_key, "toolName": "OpenPopover"}),
        )
        .await;
    assert_eq!(status, 401);
    let body: ErrorBody = serde_json::from_value(body).unwrap();
    assert_eq!(body.error.code, "unauthorized");

    let (status, body) = app
        .call(
            Some(&t.agent_token),
            json!({"apiKey": t.api_key, "toolName": "bad name"}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "invalid_request");

    let (status, body) = app
        .call(
            Some(&t.agent_token),
            json!({"apiKey": t.api_key, "toolName": "OpenPopover", "timeoutMs": 30}),
        )
        .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "tab_offline");
    assert!(body["callId"].as_str().unwrap().starts_with("c_"));
    app.shutdown().await;
}

#[tokio::test]
async fn draining_refuses_new_work() {
    let app = spawn_app().await;
    let t = app.token().await;
    // A call that waits for a tab that never comes; shutdown must not wait for its full timeout.
    let pending = {
        let http = app.http.clone();
        let url = app.url("/api/voice-agent/tool-call");
        let key = t.api_key.clone();
        let token = t.agent_token.clone();
        tokio::spawn(async move {
            let r = http
                .post(url)
                .bearer_auth(token)
                .json(&json!({"apiKey": key, "toolName": "x", "timeoutMs": 60000}))
                .send()
                .await
                .unwrap();
            (
                r.status().as_u16(),
                r.json::<serde_json::Value>().await.unwrap(),
            )
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    app.shutdown().await;
    let (status, body) = pending.await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "shutting_down");
    assert!(started.elapsed() < Duration::from_secs(5));
}
