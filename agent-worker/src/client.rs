//! The typed relay client: one `reqwest::Client`, per-call timeouts, retries on transport
//! failures that reuse one `Idempotency-Key` (so a retry can never emit a tool call twice), and
//! every failure as a [`ToolError`] value that can be handed to an LLM.
//!
//! ```no_run
//! use agent_worker::client::{CallOptions, ClientConfig, RelayClient};
//! use relay_wire::Secret;
//! use serde_json::json;
//!
//! # async fn example() -> Result<(), agent_worker::client::ToolError> {
//! let secret = Secret::new(std::env::var("RELAY_AGENT_SECRET").unwrap_or_default());
//! let relay = RelayClient::new(ClientConfig::new("http://127.0.0.1:3001", secret))?;
//! let key = "va_…"; // the tab's key, from the user participant's metadata
//!
//! // Wait for the user's pick (up to two minutes).
//! let options = CallOptions {
//!     await_result: true,
//!     timeout_ms: Some(120_000),
//!     ..CallOptions::default()
//! };
//! let params = json!({"positionLabel": "Past", "promptRole": "What led here"});
//! match relay.call(key, "draw_card", Some(&params), &options).await {
//!     Ok(ok) => println!("picked: {}", ok.result.unwrap_or_default()),
//!     Err(e) if e.is(relay_wire::ErrorCode::TabOffline) => println!("no tab came back"),
//!     Err(e) => println!("say: {}", e.speech()),
//! }
//!
//! // Is the tab there? Revoke its key when the session ends.
//! let status = relay.key_state(key).await?;
//! relay.revoke(key).await?;
//! # let _ = status;
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

use rand::RngCore;
use relay_wire::Fp;
use relay_wire::{
    ErrorBody, ErrorCode, KeyStatus, RevokeResponse, Secret, ToolCallResponse, headers,
};
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

/// Time allowed by default on top of a call's own timeout for the HTTP exchange itself.
const HTTP_MARGIN: Duration = Duration::from_secs(5);
/// Timeout of requests that are not tool calls (key state, revoke).
const SHORT_TIMEOUT: Duration = Duration::from_secs(10);

/// A failure of a tool call, as a value. `code` is a relay error code (the SPEC's table) or one
/// of the worker's own (`invalid_arguments`, `unknown_tool`, `tool_not_allowed`,
/// `relay_unreachable`, `bad_response`).
///
/// ```
/// use agent_worker::client::ToolError;
/// use serde_json::json;
///
/// let e = ToolError::new("tab_offline", "no tab came back within 15000 ms");
/// assert_eq!(
///     e.to_llm_value(),
///     json!({"ok": false, "error": {"code": "tab_offline", "message": "no tab came back within 15000 ms"}})
/// );
/// assert_eq!(e.to_line(), "tab_offline: no tab came back within 15000 ms");
/// assert!(e.speech().starts_with("The user's screen is not connected right now"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ToolError {
    pub code: String,
    pub message: String,
    /// HTTP status when the relay answered, `None` when it was never reached.
    pub status: Option<u16>,
    pub call_id: Option<String>,
}

impl ToolError {
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        ToolError {
            code: code.to_owned(),
            message: message.into(),
            status: None,
            call_id: None,
        }
    }

    /// True when the relay answered with this code.
    pub fn is(&self, code: ErrorCode) -> bool {
        self.code == code.as_str()
    }

    /// The object an LLM is handed: `{"ok":false,"error":{"code","message"}}`.
    pub fn to_llm_value(&self) -> Value {
        serde_json::json!({"ok": false, "error": {"code": self.code, "message": self.message}})
    }

    /// A sentence a voice model can say to the user (or act on) for this failure.
    pub fn speech(&self) -> String {
        let what = match self.code.as_str() {
            "tab_offline" => {
                "The user's screen is not connected right now, so nothing could be shown."
            }
            "unknown_key" => "This session is no longer linked to the user's screen.",
            "timeout" => "The user's screen did not answer in time.",
            "no_handler" => "The user's screen cannot show that.",
            "tool_failed" => "The user's screen could not do that",
            "rate_limited" => {
                "Too many requests to the user's screen at once; try again in a moment."
            }
            "shutting_down" | "unavailable" | "relay_unreachable" => {
                "The screen service is unavailable for a moment; try again shortly."
            }
            "invalid_arguments" | "invalid_request" => "The request had invalid arguments",
            "unknown_tool" => "There is no such tool",
            "tool_not_allowed" => "That tool is not available in this phase of the conversation",
            _ => "The request to the user's screen failed",
        };
        let what = what.trim_end_matches('.');
        single_line(&format!("{what}. ({}: {})", self.code, self.message))
    }

    /// One line for a voice platform that wants a string: `code: message`, no line breaks.
    pub fn to_line(&self) -> String {
        single_line(&format!("{}: {}", self.code, self.message))
    }
}

/// Replaces line breaks and other control characters with spaces.
pub fn single_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// How one tool call is made.
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    pub await_result: bool,
    /// The relay's per-call timeout; its default when `None`.
    pub timeout_ms: Option<u64>,
    /// Reuse a caller's retry key; a fresh one is made per call otherwise.
    pub idempotency_key: Option<String>,
}

/// A delivered (and, if awaited, answered) call.
#[derive(Debug, Clone, PartialEq)]
pub struct CallOk {
    pub call_id: String,
    pub result: Option<Value>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CallBody<'a> {
    api_key: &'a str,
    tool_name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a RawValue>,
    await_result: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout_ms: Option<u64>,
}

/// Settings of a [`RelayClient`].
#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub relay_url: String,
    pub agent_secret: Secret,
    /// Extra attempts after a transport failure or a 503.
    pub retries: u32,
    /// Wait before the first retry; doubled for each further one.
    pub backoff: Duration,
    /// The relay's default call timeout, used to size the HTTP timeout when a call names none.
    pub default_timeout: Duration,
    /// Time allowed on top of a call's timeout before an attempt counts as lost.
    pub http_margin: Duration,
}

impl ClientConfig {
    pub fn new(relay_url: &str, agent_secret: Secret) -> Self {
        ClientConfig {
            relay_url: relay_url.trim_end_matches('/').to_owned(),
            agent_secret,
            retries: 2,
            backoff: Duration::from_millis(100),
            default_timeout: Duration::from_secs(15),
            http_margin: HTTP_MARGIN,
        }
    }
}

/// The relay's HTTP API for agents: tool calls, cancel, key state and revoke, with the agent
/// secret. Cheap to clone (one connection pool shared by the clones).
#[derive(Clone)]
pub struct RelayClient {
    http: reqwest::Client,
    config: ClientConfig,
}

/// A fresh `Idempotency-Key` (`aw-` and 32 hex digits), for a caller that retries on its own.
pub fn new_idempotency_key() -> String {
    let mut b = [0u8; 16];
    rand::rng().fill_bytes(&mut b);
    format!("aw-{}", hex::encode(b))
}

impl RelayClient {
    pub fn new(config: ClientConfig) -> Result<Self, ToolError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(3))
            .pool_idle_timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| ToolError::new("relay_unreachable", format!("HTTP client: {e}")))?;
        Ok(RelayClient { http, config })
    }

    pub fn relay_url(&self) -> &str {
        &self.config.relay_url
    }

    /// Sends one tool call. `params` must already be valid JSON; it is sent as is.
    pub async fn call(
        &self,
        api_key: &str,
        tool_name: &str,
        params: Option<&Value>,
        options: &CallOptions,
    ) -> Result<CallOk, ToolError> {
        let raw = params
            .map(serde_json::value::to_raw_value)
            .transpose()
            .map_err(|e| ToolError::new("invalid_arguments", e.to_string()))?;
        let body = serde_json::to_vec(&CallBody {
            api_key,
            tool_name,
            params: raw.as_deref(),
            await_result: options.await_result,
            timeout_ms: options.timeout_ms,
        })
        .map_err(|e| ToolError::new("invalid_arguments", e.to_string()))?;
        let idem = options
            .idempotency_key
            .clone()
            .unwrap_or_else(new_idempotency_key);
        let call_timeout = options
            .timeout_ms
            .map(Duration::from_millis)
            .unwrap_or(self.config.default_timeout);
        let url = format!("{}/api/voice-agent/tool-call", self.config.relay_url);
        // Dropped before the outcome is in (the caller stopped waiting), the call is cancelled
        // at the relay, so the tab is not left holding it.
        let mut unanswered = CancelOnDrop {
            client: self,
            api_key,
            idempotency_key: &idem,
            armed: true,
        };

        let mut attempt = 0;
        let outcome = loop {
            let sent = self
                .http
                .post(&url)
                .bearer_auth(self.config.agent_secret.expose())
                .header(headers::IDEMPOTENCY_KEY, &idem)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .timeout(call_timeout + self.config.http_margin)
                .body(body.clone())
                .send()
                .await;
            let outcome = match sent {
                Ok(response) => read_call(response).await,
                Err(err) => Err(transport_error(&err)),
            };
            match outcome {
                Err(err) if attempt < self.config.retries && retryable(&err) => {
                    let wait = self.config.backoff * 2u32.pow(attempt);
                    tracing::debug!(key = %Fp(api_key), tool = tool_name, attempt, cause = %err, "retrying tool call");
                    attempt += 1;
                    tokio::time::sleep(wait).await;
                }
                other => break other,
            }
        };
        unanswered.armed = false;
        outcome
    }

    /// Cancels the call sent with `idempotency_key` for `api_key`, if it still runs at the
    /// relay (the tab is told `voice-agent:cancel`). True when a running call was cancelled.
    pub async fn cancel(&self, api_key: &str, idempotency_key: &str) -> Result<bool, ToolError> {
        let url = format!("{}/api/voice-agent/tool-call/cancel", self.config.relay_url);
        let response = self
            .http
            .post(url)
            .bearer_auth(self.config.agent_secret.expose())
            .header(headers::IDEMPOTENCY_KEY, idempotency_key)
            .json(&serde_json::json!({ "apiKey": api_key }))
            .timeout(SHORT_TIMEOUT)
            .send()
            .await
            .map_err(|e| transport_error(&e))?;
        let answer: CancelResponse = read_json(response).await?;
        Ok(answer.cancelled)
    }

    /// The key's state at the relay.
    pub async fn key_state(&self, api_key: &str) -> Result<KeyStatus, ToolError> {
        self.key_request(reqwest::Method::GET, api_key).await
    }

    /// Revokes the key: its tab is told and unbound; the key is gone.
    pub async fn revoke(&self, api_key: &str) -> Result<RevokeResponse, ToolError> {
        self.key_request(reqwest::Method::DELETE, api_key).await
    }

    async fn key_request<T: serde::de::DeserializeOwned>(
        &self,
        method: reqwest::Method,
        api_key: &str,
    ) -> Result<T, ToolError> {
        let url = format!("{}/api/voice-agent/keys/{api_key}", self.config.relay_url);
        let response = self
            .http
            .request(method, url)
            .bearer_auth(self.config.agent_secret.expose())
            .timeout(SHORT_TIMEOUT)
            .send()
            .await
            .map_err(|e| transport_error(&e))?;
        read_json(response).await
    }
}

#[derive(serde::Deserialize)]
struct CancelResponse {
    cancelled: bool,
}

/// Cancels a call at the relay when its future is dropped before the outcome arrived.
struct CancelOnDrop<'a> {
    client: &'a RelayClient,
    api_key: &'a str,
    idempotency_key: &'a str,
    armed: bool,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Outside a runtime (a blocking caller that gave up) there is nothing to run it on.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let client = self.client.clone();
        let api_key = self.api_key.to_owned();
        let idem = self.idempotency_key.to_owned();
        runtime.spawn(async move {
            match client.cancel(&api_key, &idem).await {
                Ok(cancelled) => {
                    tracing::info!(key = %Fp(&api_key), cancelled, "tool call abandoned: cancelled at the relay")
                }
                Err(e) => {
                    tracing::warn!(key = %Fp(&api_key), cause = %e, "tool call abandoned: cancel failed")
                }
            }
        });
    }
}

/// A transport failure or a draining relay is worth another attempt (same Idempotency-Key, so
/// the relay replays rather than re-emits). Anything the relay decided is final.
fn retryable(err: &ToolError) -> bool {
    err.status.is_none() && err.code == "relay_unreachable"
        || err.is(ErrorCode::ShuttingDown)
        || err.is(ErrorCode::Unavailable)
}

fn transport_error(err: &reqwest::Error) -> ToolError {
    let what = if err.is_timeout() {
        "the relay did not answer in time"
    } else if err.is_connect() {
        "could not connect to the relay"
    } else {
        "the connection to the relay failed"
    };
    ToolError::new("relay_unreachable", what)
}

async fn read_call(response: reqwest::Response) -> Result<CallOk, ToolError> {
    let ok: ToolCallResponse = read_json(response).await?;
    Ok(CallOk {
        call_id: ok.call_id,
        result: ok.result,
    })
}

async fn read_json<T: serde::de::DeserializeOwned>(
    response: reqwest::Response,
) -> Result<T, ToolError> {
    let status = response.status().as_u16();
    let bytes = response.bytes().await.map_err(|e| ToolError {
        status: Some(status),
        ..transport_error(&e)
    })?;
    if (200..300).contains(&status) {
        return serde_json::from_slice(&bytes).map_err(|_| ToolError {
            status: Some(status),
            ..ToolError::new("bad_response", "the relay's answer could not be read")
        });
    }
    match serde_json::from_slice::<ErrorBody>(&bytes) {
        Ok(body) => Err(ToolError {
            code: body.error.code,
            message: body.error.message,
            status: Some(status),
            call_id: body.call_id,
        }),
        Err(_) => Err(ToolError {
            status: Some(status),
            ..ToolError::new(
                if status == 503 {
                    ErrorCode::ShuttingDown.as_str()
                } else {
                    "bad_response"
                },
                format!("the relay answered {status} without an error body"),
            )
        }),
    }
}

#[cfg(test)]
mod tests {
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
            .call(KEY, "draw_card", None, &CallOptions::default())
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
            .call(KEY, "t", None, &CallOptions::default())
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
            .call(KEY, "t", None, &CallOptions::default())
            .await
            .unwrap_err();
        assert_eq!(err.code, "bad_response");
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
            .call(KEY, "t", None, &CallOptions::default())
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
            .call(KEY, "t", None, &options)
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
        let call = c.call(KEY, "draw_card", None, &options);
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
            .call(KEY, "t", None, &CallOptions::default())
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
            .call(KEY, "t", None, &CallOptions::default())
            .await
            .unwrap_err();
        assert_eq!(err.code, "relay_unreachable");
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
        assert_eq!(err.code, "relay_unreachable");
        let took = started.elapsed();
        assert!(
            took >= HTTP_MARGIN && took < HTTP_MARGIN + Duration::from_secs(3),
            "{took:?}"
        );
        assert_eq!(seen.lock().unwrap().len(), 1);
    }
}
