//! The typed relay client: one `reqwest::Client`, per-call timeouts, retries on transport
//! failures that reuse one `Idempotency-Key` (so a retry can never emit a tool call twice), and
//! every failure as a [`ToolError`] value that can be handed to an LLM.
//!
//! Two credentials: a tool call (and its cancel) carries the agent's session token, which
//! reaches one key's tab only; what the worker does for every session (minting a session token,
//! reading a key's state, telling it the mode, revoking it when its user left) carries the
//! client's own server credential (`RELAY_WORKER_SECRET`, or an operator's).
//!
//! ```no_run
//! use agent_worker::client::{CallOptions, ClientConfig, RelayClient};
//! use relay_wire::Secret;
//! use relay_wire::session::SessionRequest;
//! use serde_json::json;
//!
//! # async fn example() -> Result<(), agent_worker::client::ToolError> {
//! let secret = Secret::new(std::env::var("RELAY_WORKER_SECRET").unwrap_or_default());
//! let relay = RelayClient::new(ClientConfig::new("http://127.0.0.1:3001", secret))?;
//! let key = "va_…"; // the tab's key, from the user participant's metadata
//!
//! // A session token for that key only: what an agent holds.
//! let session = relay.mint_session(&SessionRequest::for_key(key)).await?;
//!
//! // Wait for the user's pick (up to two minutes).
//! let options = CallOptions {
//!     await_result: true,
//!     timeout_ms: Some(120_000),
//!     ..CallOptions::default()
//! };
//! let params = json!({"positionLabel": "Past", "promptRole": "What led here"});
//! match relay.call(&session.token, key, "draw_card", Some(&params), &options).await {
//!     Ok(ok) => println!("picked: {}", ok.result.unwrap_or_default()),
//!     Err(e) if e.is(relay_wire::ErrorCode::TabOffline) => println!("no tab came back"),
//!     Err(e) => println!("say: {}", e.speech()),
//! }
//!
//! // Is the tab there? Revoke its key when its user leaves.
//! let status = relay.key_state(key).await?;
//! relay.revoke(key).await?;
//! # let _ = status;
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

use rand::RngCore;
use relay_wire::Fp;
use relay_wire::session::{SESSION_KEYS_PATH, SessionEnded, SessionRequest, SessionResponse};
use relay_wire::{
    ErrorBody, ErrorCode, KeyStatus, RevokeResponse, Secret, ToolCallResponse, headers,
};
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

pub use crate::error::{Code, ToolError, single_line};

mod tab;
pub use tab::TabState;

/// Time allowed by default on top of a call's own timeout for the HTTP exchange itself.
const HTTP_MARGIN: Duration = Duration::from_secs(5);
/// Timeout of requests that are not tool calls (key state, revoke).
const SHORT_TIMEOUT: Duration = Duration::from_secs(10);

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
    /// What the client presents for requests of its own (not tool calls): the worker's or an
    /// operator's secret.
    pub credential: Secret,
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
    pub fn new(relay_url: &str, credential: Secret) -> Self {
        ClientConfig {
            relay_url: relay_url.trim_end_matches('/').to_owned(),
            credential,
            retries: 2,
            backoff: Duration::from_millis(100),
            default_timeout: Duration::from_secs(15),
            http_margin: HTTP_MARGIN,
        }
    }
}

/// The relay's HTTP API: tool calls and cancel with an agent's session token; session tokens,
/// key state, mode and revoke with the client's credential. Cheap to clone (one connection
/// pool shared by the clones).
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
            .map_err(|e| ToolError::new(Code::RelayUnreachable, format!("HTTP client: {e}")))?;
        Ok(RelayClient { http, config })
    }

    pub fn relay_url(&self) -> &str {
        &self.config.relay_url
    }

    /// Sends one tool call with the agent's session `token`. `params` must already be valid
    /// JSON; it is sent as is.
    pub async fn call(
        &self,
        token: &str,
        api_key: &str,
        tool_name: &str,
        params: Option<&Value>,
        options: &CallOptions,
    ) -> Result<CallOk, ToolError> {
        let raw = params
            .map(serde_json::value::to_raw_value)
            .transpose()
            .map_err(|e| ToolError::new(Code::InvalidArguments, e.to_string()))?;
        let body = serde_json::to_vec(&CallBody {
            api_key,
            tool_name,
            params: raw.as_deref(),
            await_result: options.await_result,
            timeout_ms: options.timeout_ms,
        })
        .map_err(|e| ToolError::new(Code::InvalidArguments, e.to_string()))?;
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
            token,
            api_key,
            idempotency_key: &idem,
            armed: true,
        };

        let mut attempt = 0;
        let outcome = loop {
            let sent = self
                .http
                .post(&url)
                .bearer_auth(token)
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

    /// Cancels the call sent with `idempotency_key` for `api_key` (with the session `token` it
    /// was sent with), if it still runs at the relay (the tab is told `voice-agent:cancel`).
    /// True when a running call was cancelled.
    pub async fn cancel(
        &self,
        token: &str,
        api_key: &str,
        idempotency_key: &str,
    ) -> Result<bool, ToolError> {
        let url = format!("{}/api/voice-agent/tool-call/cancel", self.config.relay_url);
        let response = self
            .http
            .post(url)
            .bearer_auth(token)
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
            .bearer_auth(self.config.credential.expose())
            .timeout(SHORT_TIMEOUT)
            .send()
            .await
            .map_err(|e| transport_error(&e))?;
        read_json(response).await
    }

    /// A session token for one key (the worker's or an operator's credential mints it).
    pub async fn mint_session(
        &self,
        request: &SessionRequest,
    ) -> Result<SessionResponse, ToolError> {
        let url = format!("{}/api/voice-agent/sessions", self.config.relay_url);
        let response = self
            .http
            .post(url)
            .bearer_auth(self.config.credential.expose())
            .json(request)
            .timeout(SHORT_TIMEOUT)
            .send()
            .await
            .map_err(|e| transport_error(&e))?;
        read_json(response).await
    }

    /// Ends one agent session at the relay: its token is refused from now on.
    pub async fn end_session(&self, session_id: &str) -> Result<(), ToolError> {
        let url = format!(
            "{}/api/voice-agent/sessions/{session_id}",
            self.config.relay_url
        );
        let response = self
            .http
            .delete(url)
            .bearer_auth(self.config.credential.expose())
            .timeout(SHORT_TIMEOUT)
            .send()
            .await
            .map_err(|e| transport_error(&e))?;
        read_json::<SessionEnded>(response).await.map(drop)
    }

    /// The public keys that verify session tokens (the relay's JWKS).
    pub async fn session_keys(&self) -> Result<jsonwebtoken::jwk::JwkSet, ToolError> {
        let url = format!("{}{SESSION_KEYS_PATH}", self.config.relay_url);
        let response = self
            .http
            .get(url)
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
    token: &'a str,
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
        let token = self.token.to_owned();
        let api_key = self.api_key.to_owned();
        let idem = self.idempotency_key.to_owned();
        runtime.spawn(async move {
            match client.cancel(&token, &api_key, &idem).await {
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
    err.status.is_none() && err.code == Code::RelayUnreachable
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
    ToolError::new(Code::RelayUnreachable, what)
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
            ..ToolError::new(Code::BadResponse, "the relay's answer could not be read")
        });
    }
    match serde_json::from_slice::<ErrorBody>(&bytes) {
        Ok(body) => Err(match Code::parse(&body.error.code) {
            Some(code) => ToolError {
                code,
                message: body.error.message,
                status: Some(status),
                call_id: body.call_id,
            },
            // A code outside the table (a newer relay): said as it came, under bad_response.
            None => ToolError {
                status: Some(status),
                call_id: body.call_id,
                ..ToolError::new(
                    Code::BadResponse,
                    format!("{}: {}", body.error.code, body.error.message),
                )
            },
        }),
        Err(_) => Err(ToolError {
            status: Some(status),
            ..ToolError::new(
                if status == 503 {
                    Code::Relay(ErrorCode::ShuttingDown)
                } else {
                    Code::BadResponse
                },
                format!("the relay answered {status} without an error body"),
            )
        }),
    }
}

#[cfg(test)]
mod tests;
