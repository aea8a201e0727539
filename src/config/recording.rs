//! `[recording]`: opt-in recording of real sessions for `loopguard replay`
//! and `loopguard tune` (see [`crate::recording`]), raw and validated.
//! Every key, with its default:
//!
//! ```toml
//! [recording]
//! enabled = false
//! dir = "recordings"          # created mode 0700; files mode 0600
//! max_bytes = 1073741824      # total cap (1 GiB): oldest files deleted first
//! sessions = "all"            # or "verdicts": only sessions that got a verdict
//! ```

use std::path::PathBuf;

use serde::Deserialize;

use super::problems::Problems;

/// Raw `[recording]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRecording {
    /// Switch (default off).
    #[serde(default)]
    pub enabled: bool,
    /// Directory of the recordings.
    #[serde(default = "default_dir")]
    pub dir: String,
    /// Total size cap of the directory's recordings, in bytes.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
    /// `all` or `verdicts`.
    #[serde(default = "default_sessions")]
    pub sessions: String,
}

impl Default for RawRecording {
    fn default() -> Self {
        Self {
            enabled: false,
            dir: default_dir(),
            max_bytes: default_max_bytes(),
            sessions: default_sessions(),
        }
    }
}

fn default_dir() -> String {
    "recordings".to_owned()
}
fn default_max_bytes() -> u64 {
    1 << 30
}
fn default_sessions() -> String {
    "all".to_owned()
}

/// Which sessions are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Every session lane.
    All,
    /// Only lanes that got a verdict (any level), with their full history:
    /// a lane is buffered in memory until its first verdict (bounded, see
    /// [`crate::recording`]), then written out and followed.
    Verdicts,
}

/// Validated `[recording]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordingConfig {
    /// Recording is on.
    pub enabled: bool,
    /// Directory of the recordings.
    pub dir: PathBuf,
    /// Total size cap, bytes.
    pub max_bytes: u64,
    /// Which sessions are kept.
    pub sessions: Keep,
}

/// Validates `[recording]`.
pub fn validate(raw: &RawRecording, problems: &mut Problems) -> RecordingConfig {
    let sessions = match raw.sessions.as_str() {
        "all" => Keep::All,
        "verdicts" => Keep::Verdicts,
        other => {
            problems.push(
                "recording.sessions",
                format!("{other:?} is not one of \"all\", \"verdicts\""),
            );
            Keep::All
        }
    };
    if raw.enabled && raw.dir.trim().is_empty() {
        problems.push("recording.dir", "must name a directory");
    }
    if raw.max_bytes == 0 {
        problems.push("recording.max_bytes", "must be greater than 0, got 0");
    }
    RecordingConfig {
        enabled: raw.enabled,
        dir: PathBuf::from(&raw.dir),
        max_bytes: raw.max_bytes,
        sessions,
    }
}
