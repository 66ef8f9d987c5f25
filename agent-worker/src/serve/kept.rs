//! What outlives a run of `agent-worker serve`: the keys of the open LiveKit sessions, kept in a
//! state file (when configured), so that a participant that left while the worker was down is
//! noticed when it comes back.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The source name of sessions opened for LiveKit participants.
pub const LIVEKIT: &str = "livekit";

/// One LiveKit session as the state file keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Kept {
    pub key: String,
    pub room: String,
    pub identity: String,
}

/// Where the keys of open LiveKit sessions are kept between runs.
#[derive(Debug, Clone)]
pub struct StateFile(pub PathBuf);

impl StateFile {
    /// The sessions kept by the last run; none when the file is missing or unreadable (said in
    /// the log).
    pub fn load(&self) -> Vec<Kept> {
        match std::fs::read(&self.0) {
            Ok(bytes) => serde_json::from_slice::<Vec<Kept>>(&bytes)
                .map(|all| {
                    all.into_iter()
                        .filter(|k| relay_wire::is_api_key(&k.key))
                        .collect()
                })
                .unwrap_or_else(|e| {
                    tracing::warn!(path = %self.0.display(), cause = %e, "state file unreadable; starting without it");
                    Vec::new()
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => {
                tracing::warn!(path = %self.0.display(), cause = %e, "state file unreadable; starting without it");
                Vec::new()
            }
        }
    }

    /// Writes the open LiveKit sessions (a new file renamed over the old, mode 600: it holds
    /// routing keys).
    pub fn save(&self, sessions: &[Kept]) {
        if let Err(e) = write_private(&self.0, &serde_json::to_vec(sessions).unwrap_or_default()) {
            tracing::warn!(path = %self.0.display(), cause = %e, "could not write the state file");
        }
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(tmp, path)
}
