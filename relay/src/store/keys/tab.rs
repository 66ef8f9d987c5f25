//! What a key's tab declared it handles (`voice-agent:handles`) and the session mode an agent
//! set for it, kept in the key's record for as long as the key lives (a re-bind keeps them; the
//! tab declares again after each bind anyway), and waiting for the declaration to change.

use relay_wire::{Declaration, KeyStatus};
use socketioxide::socket::Sid;
use tokio::time::Instant;

use super::{Binding, Keys, State};

/// A key's declaration and mode.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TabInfo {
    /// Counts the changes of `declared`.
    pub revision: u64,
    pub declared: Option<Declaration>,
    pub mode: Option<Box<str>>,
}

impl TabInfo {
    /// Adds this to a key's status.
    pub fn describe(&self, status: &mut KeyStatus) {
        status.revision = self.revision;
        if let Some(declared) = &self.declared {
            status.handles = Some(declared.names().map(str::to_owned).collect());
            status.page_tools = declared.page_tools_value();
        }
        status.mode = self.mode.as_deref().map(str::to_owned);
    }
}

/// A declaration from a socket that does not hold the key (never bound, or displaced since).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotBound;

impl Keys {
    /// Records what the socket `sid`, which must hold `key`, declared; the key's revision after
    /// it. A declaration equal to the stored one changes nothing and wakes no one.
    pub fn declare(&self, key: &str, sid: Sid, declared: Declaration) -> Result<u64, NotBound> {
        let mut entry = self.map.get_mut(key).ok_or(NotBound)?;
        if !matches!(&entry.state, State::Online(b) if b.sid() == sid) {
            return Err(NotBound);
        }
        let tab = entry.tab.get_or_insert_with(Box::default);
        if tab.declared.as_ref() == Some(&declared) {
            return Ok(tab.revision);
        }
        tab.declared = Some(declared);
        tab.revision += 1;
        let revision = tab.revision;
        let shared = entry.shared.clone();
        drop(entry);
        shared.changed.notify_waiters();
        Ok(revision)
    }

    /// Sets the mode of `key`; `None` when the key is unknown or revoked, else the binding of
    /// its tab when one holds it (to be told now).
    pub fn set_mode(&self, key: &str, mode: &str) -> Option<Option<Binding>> {
        let mut entry = self.map.get_mut(key)?;
        let binding = match &entry.state {
            State::Revoked => return None,
            State::Online(b) => Some(b.clone()),
            State::Issued | State::Offline => None,
        };
        entry.tab.get_or_insert_with(Box::default).mode = Some(mode.into());
        Some(binding)
    }

    /// The key's declaration revision; `None` when the key is unknown or revoked.
    fn revision(&self, key: &str) -> Option<u64> {
        let entry = self.map.get(key)?;
        if matches!(entry.state, State::Revoked) {
            return None;
        }
        Some(entry.tab.as_ref().map_or(0, |t| t.revision))
    }

    /// Waits until the key's revision differs from `after` or the deadline passes; the key's
    /// status then (`None` when it is gone).
    pub async fn wait_change(&self, key: &str, after: u64, deadline: Instant) -> Option<KeyStatus> {
        loop {
            let shared = {
                let entry = self.map.get(key)?;
                entry.shared.clone()
            };
            let changed = shared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            // Read after registering for the wake-up: a change in between is not missed.
            if self.revision(key)? != after
                || tokio::time::timeout_at(deadline, changed).await.is_err()
            {
                return self.status(key);
            }
        }
    }
}
