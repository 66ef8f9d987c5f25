//! What a session knows of its tab, from the relay: the tools it handles and the tools its
//! page defined. Read for every offer; kept current while someone follows the session by a
//! task that waits on the relay's long-poll, so a handler added or removed in the tab reaches
//! the followers within a moment (the relay answers the wait as soon as the tab declares).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use relay_wire::Fp;

use super::page::{self, PageTools};
use super::{Session, Sessions, lock, timeline};
use crate::client::{RelayClient, TabState};

/// How long one wait on the relay lasts before it is asked again.
const WAIT: Duration = Duration::from_secs(25);
/// Pause after the relay could not be asked, before asking again.
const RETRY: Duration = Duration::from_secs(1);
/// Pause while the relay does not know the key, before asking again.
const UNKNOWN_RETRY: Duration = Duration::from_secs(5);

/// The last known tab of a session.
#[derive(Default)]
pub(crate) struct TabCache {
    pub(crate) state: Option<TabState>,
    page: Option<Arc<PageTools>>,
}

/// A session's tab, as an offer or a call sees it: `state` is `None` when the relay did not
/// say (the key is unknown, or the relay unreachable), which hides no tool.
#[derive(Clone, Default)]
pub struct TabView {
    pub state: Option<TabState>,
    /// The page's tools, compiled, when page tools are allowed and the tab defined some.
    pub page: Option<Arc<PageTools>>,
}

impl TabCache {
    /// Takes a newer state from the relay; true when it changes what the tab offers. A state
    /// older than the one kept (a read that crossed a newer one) is ignored.
    fn update(&mut self, state: Option<TabState>, page_tools: bool) -> bool {
        if let (Some(old), Some(new)) = (&self.state, &state)
            && new.revision < old.revision
        {
            return false;
        }
        let changed = match (&self.state, &state) {
            (Some(old), Some(new)) => old.revision != new.revision,
            (None, None) => false,
            _ => true,
        };
        if changed || self.page.is_none() {
            self.page = match &state {
                Some(s) if page_tools => s.page_tools.as_ref().map(|defs| {
                    let compiled = page::compile(s.revision, defs, s.handles.as_deref());
                    Arc::new(compiled)
                }),
                _ => None,
            };
        }
        self.state = state;
        changed
    }

    fn view(&self) -> TabView {
        TabView {
            state: self.state.clone(),
            page: self.page.clone(),
        }
    }
}

/// Records in the session's timeline what a read of the relay said of the tab: its state when
/// it changed, a declaration when its revision is new.
fn observe(session: &Session, state: Option<&TabState>) {
    let Some(timeline) = &session.timeline else {
        return;
    };
    timeline.tab(timeline::tab_state(state.map(|s| s.state)));
    if let Some(s) = state.filter(|s| s.revision > 0) {
        timeline.declared(s.revision, s.handles.as_ref().map(Vec::len));
    }
}

fn log_refused(key: &str, page: Option<&Arc<PageTools>>) {
    for (name, why) in page.map(|p| p.refused.as_slice()).unwrap_or_default() {
        tracing::warn!(key = %Fp(key), tool = %name, reason = %why, "page tool left out");
    }
}

impl Sessions {
    /// The tab of `key` now, asked of the relay (an offer is never older than the tab's last
    /// declaration the relay acknowledged). A change seen here is told to the session's
    /// followers, as the watcher would. When the relay cannot say, the last known tab stands.
    pub async fn tab(&self, key: &str) -> TabView {
        let session = self.get(key);
        let fetched = match self.client.tab_state(key).await {
            Ok(state) => Some(state),
            Err(e) => {
                tracing::debug!(key = %Fp(key), cause = %e, "the relay could not say what the tab handles");
                None
            }
        };
        match session {
            Some(s) => {
                if let Some(state) = &fetched {
                    observe(&s, state.as_ref());
                }
                let (view, changed) = {
                    let mut cache = lock(&s.tab);
                    let Some(state) = fetched else {
                        return cache.view();
                    };
                    // Followers hear of a change of what the tab handles, not of the first read.
                    let known = cache.state.is_some();
                    let changed = cache.update(state, self.page_tools);
                    if changed {
                        log_refused(key, cache.page.as_ref());
                    }
                    (cache.view(), changed && known)
                };
                if changed {
                    s.bump();
                }
                view
            }
            None => {
                let mut cache = TabCache::default();
                cache.update(fetched.flatten(), self.page_tools);
                cache.view()
            }
        }
    }
}

/// Starts the task that keeps `session`'s tab current, unless one runs.
pub(super) fn watch(session: &Arc<Session>, client: &RelayClient, page_tools: bool) {
    if session.watching.swap(true, Ordering::AcqRel) {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        session.watching.store(false, Ordering::Release);
        return;
    };
    runtime.spawn(keep_current(session.clone(), client.clone(), page_tools));
}

/// Waits on the relay for the tab's changes while the session is open and followed.
async fn keep_current(session: Arc<Session>, client: RelayClient, page_tools: bool) {
    let key = session.key.as_str();
    let mut after: Option<u64> = None;
    let mut failing = false;
    loop {
        if session.closed.is_cancelled() {
            break;
        }
        if session.followers() == 0 {
            // Nobody follows: stop, unless a follower came between the check and the stop.
            session.watching.store(false, Ordering::Release);
            if session.followers() == 0 || session.watching.swap(true, Ordering::AcqRel) {
                return;
            }
        }
        let asked = async {
            match after {
                None => client.tab_state(key).await,
                Some(revision) => client.wait_tab_change(key, revision, WAIT).await,
            }
        };
        let answer = tokio::select! {
            _ = session.closed.cancelled() => break,
            answer = asked => answer,
        };
        let pause = match answer {
            Ok(state) => {
                if failing {
                    tracing::info!(key = %Fp(key), "the relay answers about the tab again");
                    failing = false;
                }
                let known = state.is_some();
                after = state.as_ref().map(|s| s.revision);
                observe(&session, state.as_ref());
                let changed = {
                    let mut cache = lock(&session.tab);
                    let changed = cache.update(state, page_tools);
                    if changed {
                        log_refused(key, cache.page.as_ref());
                    }
                    changed
                };
                if changed {
                    tracing::debug!(key = %Fp(key), revision = ?after, "the tab's tools changed");
                    session.bump();
                }
                (!known).then_some(UNKNOWN_RETRY)
            }
            Err(e) => {
                if !failing {
                    tracing::warn!(key = %Fp(key), cause = %e, "cannot wait on the relay for the tab's changes; retrying");
                    failing = true;
                }
                after = None;
                Some(RETRY)
            }
        };
        if let Some(pause) = pause {
            tokio::select! {
                _ = session.closed.cancelled() => break,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }
    session.watching.store(false, Ordering::Release);
}
