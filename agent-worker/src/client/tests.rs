//! The relay client against a local stand-in for the relay's HTTP API (scripted answers).

use super::*;
use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use std::sync::{Arc, Mutex};

/// A local stand-in for the relay's HTTP API: answers each attempt from a script and
/// records the Idempotency-Key of each attempt (and `cancel <key>` for each cancel).
async fn scripted(script: Vec<(u16, &'static str, u64)>) -> (String, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let script = Arc::new(Mutex::new(script.into_iter()));
    let app = {
        let seen = seen.clone();
        let cancels = seen.clone();
        Router::new()
            .route(
                "/api/voice-agent/tool-call/cancel",
                post(move |headers: HeaderMap| {
                    let cancels = cancels.clone();
                    async move {
                        let idem = headers["idempotency-key"].to_str().unwrap_or_default();
                        cancels.lock().unwrap().push(format!("cancel {idem}"));
                        r#"{"ok":true,"cancelled":true}"#
                    }
                }),
            )
            .route(
                "/api/voice-agent/tool-call",
                post(move |headers: HeaderMap| {
                    let seen = seen.clone();
                    let script = script.clone();
                    async move {
                        let idem = headers
                            .get("idempotency-key")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_owned();
                        seen.lock().unwrap().push(idem);
                        let (status, body, delay) =
                            script.lock().unwrap().next().unwrap_or((500, "{}", 0));
                        tokio::time::sleep(Duration::from_millis(delay)).await;
                        (StatusCode::from_u16(status).unwrap(), body)
                    }
                }),
            )
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), seen)
}

fn client(url: &str) -> RelayClient {
    let mut cfg = ClientConfig::new(url, Secret::new("s".repeat(20)));
    cfg.backoff = Duration::from_millis(5);
    RelayClient::new(cfg).unwrap()
}

/// The session token a call carries (the scripted relay does not check it).
const TOKEN: &str = "header.payload.signature";
const KEY: &str = "va_0000000000000000000000000000000000000000000000000000000000000000";

#[tokio::test]
async fn success_and_result() {
    let (url, _) = scripted(vec![(
        200,
        r#"{"ok":true,"callId":"c_1","result":{"cardId":"x"}}"#,
        0,
    )])
    .await;
    let ok = client(&url)
        .call(TOKEN, KEY, "draw_card", None, &CallOptions::default())
        .await
        .unwrap();
    assert_eq!(ok.call_id, "c_1");
    assert_eq!(ok.result, Some(serde_json::json!({"cardId": "x"})));
}

#[tokio::test]
async fn relay_errors_are_typed_and_final() {
    let (url, seen) = scripted(vec![(
        504,
        r#"{"ok":false,"callId":"c_2","error":{"code":"timeout","message":"late"}}"#,
        0,
    )])
    .await;
    let err = client(&url)
        .call(TOKEN, KEY, "t", None, &CallOptions::default())
        .await
        .unwrap_err();
    assert!(err.is(ErrorCode::Timeout));
    assert_eq!(err.status, Some(504));
    assert_eq!(err.call_id.as_deref(), Some("c_2"));
    assert_eq!(
        err.to_llm_value(),
        serde_json::json!({"ok": false, "error": {"code": "timeout", "message": "late"}})
    );
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "a relay decision is not retried"
    );
}

#[tokio::test]
async fn a_500_without_body_is_a_bad_response() {
    let (url, _) = scripted(vec![(500, "oops", 0)]).await;
    let err = client(&url)
        .call(TOKEN, KEY, "t", None, &CallOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::BadResponse);
    assert_eq!(err.status, Some(500));
}

#[tokio::test]
async fn a_draining_relay_or_one_without_redis_is_retried_with_the_same_idempotency_key() {
    let (url, seen) = scripted(vec![
        (
            503,
            r#"{"ok":false,"error":{"code":"shutting_down","message":"draining"}}"#,
            0,
        ),
        (
            503,
            r#"{"ok":false,"error":{"code":"unavailable","message":"no redis"}}"#,
            0,
        ),
        (200, r#"{"ok":true,"callId":"c_3"}"#, 0),
    ])
    .await;
    let ok = client(&url)
        .call(TOKEN, KEY, "t", None, &CallOptions::default())
        .await
        .unwrap();
    assert_eq!(ok.call_id, "c_3");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[0], seen[1]);
    assert_eq!(seen[1], seen[2]);
    assert!(seen[0].starts_with("aw-"));
}

#[tokio::test]
async fn a_lost_attempt_is_retried_with_the_same_idempotency_key() {
    // The first attempt outlives its HTTP timeout (call 1 ms + margin 100 ms); the retry
    // carries the same key, so a real relay would replay the first call's outcome.
    let (url, seen) = scripted(vec![
        (200, r#"{"ok":true,"callId":"c_slow"}"#, 1000),
        (200, r#"{"ok":true,"callId":"c_slow"}"#, 0),
    ])
    .await;
    let mut cfg = ClientConfig::new(&url, Secret::new("s".repeat(20)));
    cfg.backoff = Duration::from_millis(5);
    cfg.http_margin = Duration::from_millis(100);
    let options = CallOptions {
        timeout_ms: Some(1),
        ..Default::default()
    };
    let ok = RelayClient::new(cfg)
        .unwrap()
        .call(TOKEN, KEY, "t", None, &options)
        .await
        .unwrap();
    assert_eq!(ok.call_id, "c_slow");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0], seen[1]);
}

#[tokio::test]
async fn a_call_dropped_before_its_outcome_is_cancelled_at_the_relay() {
    let (url, seen) = scripted(vec![(200, r#"{"ok":true,"callId":"c"}"#, 5_000)]).await;
    let c = client(&url);
    let options = CallOptions::default();
    let call = c.call(TOKEN, KEY, "draw_card", None, &options);
    assert!(
        tokio::time::timeout(Duration::from_millis(200), call)
            .await
            .is_err(),
        "the caller stops waiting"
    );
    let sent = seen.lock().unwrap()[0].clone();
    let wanted = format!("cancel {sent}");
    for _ in 0..100 {
        if seen.lock().unwrap().contains(&wanted) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen.lock().unwrap().as_slice(), [sent, wanted]);
    // A call that got its outcome sends no cancel.
    let (url, seen) = scripted(vec![(200, r#"{"ok":true,"callId":"c"}"#, 0)]).await;
    client(&url)
        .call(TOKEN, KEY, "t", None, &CallOptions::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn unreachable_relay_is_a_value_after_retries() {
    // Bind and drop a listener: nothing listens on that port any more.
    let addr = {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let err = client(&format!("http://{addr}"))
        .call(TOKEN, KEY, "t", None, &CallOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::RelayUnreachable);
    assert_eq!(err.status, None);
    assert!(!err.to_line().contains('\n'));
}

#[tokio::test]
async fn http_timeout_is_bounded_by_the_call_timeout() {
    let (url, seen) = scripted(vec![(200, r#"{"ok":true,"callId":"c"}"#, 10_000); 3]).await;
    let mut cfg = ClientConfig::new(&url, Secret::new("s".repeat(20)));
    cfg.retries = 0;
    let c = RelayClient::new(cfg).unwrap();
    let started = std::time::Instant::now();
    let err = c
        .call(
            TOKEN,
            KEY,
            "t",
            None,
            &CallOptions {
                timeout_ms: Some(1),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::RelayUnreachable);
    let took = started.elapsed();
    assert!(
        took >= HTTP_MARGIN && took < HTTP_MARGIN + Duration::from_secs(3),
        "{took:?}"
    );
    assert_eq!(seen.lock().unwrap().len(), 1);
}
