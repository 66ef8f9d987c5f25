//! What the relay knows of a key's tab beyond its lifecycle: the tools it declared it handles
//! (`voice-agent:handles`), the tools its page defined, and the session mode the agent side
//! last set. Read once, or waited for with the relay's long-poll (`after` a revision, bounded),
//! and the mode written back so the tab can show the session's mode.

use std::time::Duration;

use relay_wire::KeyState;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{RelayClient, SHORT_TIMEOUT, ToolError, read_json, transport_error};

/// Longest wait the relay accepts for a key's change (`waitMs`).
pub const MAX_WAIT: Duration = Duration::from_secs(30);

/// A key's tab as the relay describes it (`GET /api/voice-agent/keys/{apiKey}`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TabState {
    pub state: KeyState,
    /// Counts the changes of what the tab declared; 0 when it never declared.
    #[serde(default)]
    pub revision: u64,
    /// The tools the tab handles now; `None` when it never said (it counts as handling all).
    #[serde(default)]
    pub handles: Option<Vec<String>>,
    /// The tools the tab's page defined with their schemas, as the page sent them.
    #[serde(default)]
    pub page_tools: Option<Vec<Value>>,
    /// The mode the agent side last set for the key.
    #[serde(default)]
    pub mode: Option<String>,
}

impl TabState {
    /// True when the tab handles `tool` (a tab that never declared handles every tool).
    pub fn handles(&self, tool: &str) -> bool {
        self.handles
            .as_ref()
            .is_none_or(|names| names.iter().any(|n| n == tool))
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ModeAnswer {
    tab_notified: bool,
}

impl RelayClient {
    /// The key's tab now; `None` when the relay does not know the key (never issued, revoked,
    /// removed).
    pub async fn tab_state(&self, api_key: &str) -> Result<Option<TabState>, ToolError> {
        self.tab_request(api_key, None).await
    }

    /// Waits (at most `wait`, capped at [`MAX_WAIT`]) until the key's revision differs from
    /// `after`, and answers the tab then; at the end of the wait it answers the tab as it is.
    /// `None` when the key is gone.
    pub async fn wait_tab_change(
        &self,
        api_key: &str,
        after: u64,
        wait: Duration,
    ) -> Result<Option<TabState>, ToolError> {
        self.tab_request(api_key, Some((after, wait.min(MAX_WAIT))))
            .await
    }

    async fn tab_request(
        &self,
        api_key: &str,
        wait: Option<(u64, Duration)>,
    ) -> Result<Option<TabState>, ToolError> {
        let url = format!("{}/api/voice-agent/keys/{api_key}", self.config.relay_url);
        let mut request = self
            .http
            .get(url)
            .bearer_auth(self.config.credential.expose());
        let mut timeout = SHORT_TIMEOUT;
        if let Some((after, wait)) = wait {
            request = request.query(&[
                ("after", after.to_string()),
                ("waitMs", wait.as_millis().to_string()),
            ]);
            timeout += wait;
        }
        let response = request
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| transport_error(&e))?;
        match read_json::<TabState>(response).await {
            Ok(state) => Ok(Some(state)),
            Err(e) if e.is(relay_wire::ErrorCode::UnknownKey) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Tells the relay the key's session is now in `mode`; the relay tells the tab (now, or
    /// when it binds next). True when a bound tab was told at once.
    pub async fn set_mode(&self, api_key: &str, mode: &str) -> Result<bool, ToolError> {
        let url = format!(
            "{}/api/voice-agent/keys/{api_key}/mode",
            self.config.relay_url
        );
        let response = self
            .http
            .put(url)
            .bearer_auth(self.config.credential.expose())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(json!({ "mode": mode }).to_string())
            .timeout(SHORT_TIMEOUT)
            .send()
            .await
            .map_err(|e| transport_error(&e))?;
        let answer: ModeAnswer = read_json(response).await?;
        Ok(answer.tab_notified)
    }
}
