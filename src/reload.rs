//! Hot reload: `SIGHUP` and `POST /admin/reload` re-read the config file.
//!
//! A valid file replaces the configuration for the next requests; requests
//! and streams in flight finish under the configuration they started with
//! (each request holds its own `Arc<Config>`). An invalid file is rejected
//! with every error logged, and the running configuration is kept. Listen
//! addresses, the session store's size the upstream connect timeout and the judge's
//! `max_concurrent` are fixed at start: a change to them is logged and needs a restart.

use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::config::{self, Config, ConfigError, Problem};

/// The configuration in force, swappable.
pub type SharedConfig = Arc<ArcSwap<Config>>;

/// Re-reads the config file into the shared configuration.
#[derive(Debug, Clone)]
pub struct Reloader {
    path: Option<PathBuf>,
    current: SharedConfig,
    /// The configuration the process started with: what the listeners and
    /// the session store were built from.
    started: Arc<Config>,
}

impl Reloader {
    /// A reloader for `path` (`None`: the built-in defaults, so a reload
    /// only re-applies the environment overrides).
    pub fn new(path: Option<PathBuf>, current: SharedConfig) -> Self {
        let started = current.load_full();
        Self {
            path,
            current,
            started,
        }
    }

    /// Reloads. Returns the notices of the new file (adjusted values, and
    /// settings that need a restart).
    ///
    /// # Errors
    /// [`ConfigError`] with every problem; the running configuration is kept.
    pub fn reload(&self) -> Result<Vec<Problem>, ConfigError> {
        let loaded = match &self.path {
            Some(p) => config::load_file(p),
            None => config::load_str(config::DEFAULT_TOML, "<built-in defaults>"),
        };
        let loaded = match loaded {
            Ok(l) => l,
            Err(e) => {
                for problem in &e.errors {
                    tracing::error!(source = %e.source_name, problem = %problem, "config reload rejected; keeping the running configuration");
                }
                return Err(e);
            }
        };
        let mut next = loaded.config;
        config::apply_env(&mut next, |k| std::env::var(k).ok())?;
        let mut notices = loaded.notices;
        let old = &self.started;
        let fixed = [
            ("server.listen", old.server.listen != next.server.listen),
            (
                "server.admin_listen",
                old.server.admin_listen != next.server.admin_listen,
            ),
            (
                "sessions.max_sessions",
                old.sessions.max_sessions != next.sessions.max_sessions,
            ),
            (
                "sessions.idle_ttl_secs",
                old.sessions.idle_ttl != next.sessions.idle_ttl,
            ),
            (
                "sessions.parse_cache_mib",
                old.sessions.parse_cache_bytes != next.sessions.parse_cache_bytes,
            ),
            (
                "server.connect_timeout_secs",
                old.server.connect_timeout != next.server.connect_timeout,
            ),
            // The store and the recorder are set up at start.
            ("state", old.state != next.state),
            ("recording", old.recording != next.recording),
            (
                "loop_detection.semantic_check.max_concurrent",
                old.loop_detection.defaults.semantic_check.max_concurrent
                    != next.loop_detection.defaults.semantic_check.max_concurrent,
            ),
        ];
        for (key, changed) in fixed {
            if changed {
                notices.push(Problem {
                    path: key.to_owned(),
                    message: "changed, but applies only after a restart".to_owned(),
                });
            }
        }
        for n in &notices {
            tracing::warn!(key = %n.path, "config reload: {}", n.message);
        }
        self.current.store(Arc::new(next));
        tracing::info!("configuration reloaded");
        Ok(notices)
    }
}
