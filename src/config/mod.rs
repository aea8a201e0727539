//! Configuration: the TOML file (raw form) validated into the runtime form.
//!
//! Two phases (see `raw`): the raw structs mirror the file and reject unknown
//! keys; [`load_str`] validates them into [`Config`], reporting every problem
//! at once, each with its key path and the bad value. Environment variables
//! (see [`apply_env`]) override listen addresses and upstream URLs for
//! containers.

pub mod detection;
pub mod detection_raw;
pub mod escalate;
mod ladder;
mod problems;
pub mod raw;
pub mod recording;
mod route;
pub mod semantic;
mod server;
mod shape;
pub mod state;
pub mod telemetry;

use std::path::Path;
use std::time::Duration;

use url::Url;

pub use detection::LoopDetection;
pub use problems::{ConfigError, Problem, Problems};
use raw::RawConfig;
pub use route::{Provider, Route};
pub use server::ServerConfig;
use server::parse_addr;

/// The default configuration, also shipped as `config/loopguard.toml`.
pub const DEFAULT_TOML: &str = include_str!("../../config/loopguard.toml");

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// `[server]`.
    pub server: ServerConfig,
    /// `[[routes]]`, longest prefix first.
    pub routes: Vec<Route>,
    /// `[sessions]`.
    pub sessions: SessionsConfig,
    /// `[loop_detection]` with `[[agents]]` overrides.
    pub loop_detection: LoopDetection,
    /// `[recording]` (read at start; a reload does not change it).
    pub recording: recording::RecordingConfig,
    /// `[state]`.
    pub state: state::StateConfig,
    /// `[telemetry]` (read at start; a reload does not change it).
    pub telemetry: telemetry::TelemetryConfig,
}

/// Validated `[sessions]`.
#[derive(Debug, Clone)]
pub struct SessionsConfig {
    /// Header carrying an explicit session key (lowercase).
    pub header: String,
    /// Most sessions kept.
    pub max_sessions: u64,
    /// Idle time after which a session is forgotten.
    pub idle_ttl: Duration,
    /// Most bytes the parsed histories kept for reuse take
    /// ([`crate::session::chain`]).
    pub parse_cache_bytes: usize,
}

/// A loaded configuration with the notices produced on load.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The validated configuration.
    pub config: Config,
    /// Values adjusted on load (to be logged as warnings).
    pub notices: Vec<Problem>,
}

/// Reads and validates a config file.
///
/// # Errors
/// [`ConfigError`] with every problem found; an unreadable file is one
/// problem naming the I/O error.
pub fn load_file(path: &Path) -> Result<Loaded, ConfigError> {
    let (text, source_name) = read_file(path)?;
    load_str(&text, &source_name)
}

/// A config file's text and its name for messages; an unreadable file is
/// one problem naming the I/O error.
fn read_file(path: &Path) -> Result<(String, String), ConfigError> {
    let source_name = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => Ok((text, source_name)),
        Err(e) => Err(ConfigError {
            source_name,
            errors: vec![Problem {
                path: String::new(),
                message: format!("cannot read file: {e}"),
            }],
        }),
    }
}

/// Reads and validates a config file for the offline tools (`replay`):
/// only `[loop_detection]` and `[[agents]]` matter there, so a file without
/// `[[routes]]` is accepted (every other problem is still an error).
///
/// # Errors
/// As [`load_file`].
pub fn load_detection_file(path: &Path) -> Result<Loaded, ConfigError> {
    let (text, source_name) = read_file(path)?;
    load_text(&text, &source_name, false)
}

/// Validates config text.
///
/// # Errors
/// [`ConfigError`] with every problem found. A TOML syntax error or an
/// unknown key is reported with the parser's own line and column.
pub fn load_str(text: &str, source_name: &str) -> Result<Loaded, ConfigError> {
    load_text(text, source_name, true)
}

fn load_text(text: &str, source_name: &str, need_routes: bool) -> Result<Loaded, ConfigError> {
    let mut problems = Problems::default();
    let raw: RawConfig = match toml::from_str(text) {
        Ok(raw) => raw,
        Err(e) => {
            // A syntax error: the parser's own message, with line and column.
            let table: toml::Table = toml::from_str(text).map_err(|_| ConfigError {
                source_name: source_name.to_owned(),
                errors: vec![Problem {
                    path: String::new(),
                    message: e.to_string().trim_end().to_owned(),
                }],
            })?;
            // Shape problems: each with its key path, then the value
            // problems of what remains.
            let (shape, rest) = shape::problems(text, table);
            let Some(rest) = rest else {
                return Err(ConfigError {
                    source_name: source_name.to_owned(),
                    errors: shape,
                });
            };
            problems.errors = shape;
            rest
        }
    };
    let config = validate(&raw, &mut problems);
    if !need_routes && raw.routes.is_empty() {
        problems.errors.retain(|p| p.path != "routes");
    }
    if problems.errors.is_empty() {
        Ok(Loaded {
            config,
            notices: problems.notices,
        })
    } else {
        Err(ConfigError {
            source_name: source_name.to_owned(),
            errors: problems.errors,
        })
    }
}

/// Validates a config already parsed into a TOML table (`loopguard tune`
/// changes keys of a parsed file before loading it).
///
/// # Errors
/// [`ConfigError`] with the shape error or every value problem found.
pub fn load_table(table: toml::Table, source_name: &str) -> Result<Loaded, ConfigError> {
    let raw: RawConfig = toml::Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| ConfigError {
            source_name: source_name.to_owned(),
            errors: vec![Problem {
                path: String::new(),
                message: e.to_string().trim_end().to_owned(),
            }],
        })?;
    let mut problems = Problems::default();
    let config = validate(&raw, &mut problems);
    if problems.errors.is_empty() {
        Ok(Loaded {
            config,
            notices: problems.notices,
        })
    } else {
        Err(ConfigError {
            source_name: source_name.to_owned(),
            errors: problems.errors,
        })
    }
}

/// Largest `sessions.parse_cache_mib` (1 TiB): past it, a typo.
const MAX_PARSE_CACHE_MIB: u64 = 1 << 20;

fn validate(raw: &RawConfig, problems: &mut Problems) -> Config {
    let server = server::validate_server(raw, problems);
    let routes = route::validate_routes(raw, problems);
    let sessions = SessionsConfig {
        header: raw.sessions.header.to_ascii_lowercase(),
        max_sessions: raw.sessions.max_sessions,
        idle_ttl: Duration::from_secs(raw.sessions.idle_ttl_secs),
        parse_cache_bytes: usize::try_from(raw.sessions.parse_cache_mib.min(MAX_PARSE_CACHE_MIB) << 20)
            .unwrap_or(usize::MAX),
    };
    if raw.sessions.parse_cache_mib > MAX_PARSE_CACHE_MIB {
        problems.push(
            "sessions.parse_cache_mib",
            format!(
                "must be at most {MAX_PARSE_CACHE_MIB} (MiB), got {}",
                raw.sessions.parse_cache_mib
            ),
        );
    }
    if raw.sessions.max_sessions == 0 {
        problems.push("sessions.max_sessions", "must be at least 1, got 0");
    }
    if raw.sessions.idle_ttl_secs == 0 {
        problems.push(
            "sessions.idle_ttl_secs",
            "must be at least 1, got 0 (a session would be forgotten before its next request)",
        );
    }
    if http::HeaderName::from_bytes(raw.sessions.header.as_bytes()).is_err() {
        problems.push(
            "sessions.header",
            format!("{:?} is not a valid header name", raw.sessions.header),
        );
    }
    let loop_detection = detection::validate(&raw.loop_detection, &raw.agents, problems);
    let recording = recording::validate(&raw.recording, problems);
    let state = state::validate(&raw.state, problems);
    let telemetry = telemetry::validate(&raw.telemetry, problems);
    Config {
        server,
        routes,
        sessions,
        loop_detection,
        recording,
        state,
        telemetry,
    }
}

/// Environment variables that override the file, for containers.
///
/// - `LOOPGUARD_LISTEN`: `server.listen`
/// - `LOOPGUARD_ADMIN_LISTEN`: `server.admin_listen`
/// - `LOOPGUARD_ADMIN_TOKEN`: `server.admin_token`
/// - `LOOPGUARD_STATE_URL`: `state.url` (its password is never shown)
/// - `LOOPGUARD_OPENAI_UPSTREAM`, `LOOPGUARD_GEMINI_UPSTREAM`,
///   `LOOPGUARD_ANTHROPIC_UPSTREAM`: the `upstream` of every route of that
///   provider.
///
/// # Errors
/// A [`ConfigError`] naming the variable when its value is invalid.
pub fn apply_env(config: &mut Config, get: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
    let mut problems = Problems::default();
    if let Some(v) = get("LOOPGUARD_LISTEN") {
        config.server.listen = parse_addr(&v, "env LOOPGUARD_LISTEN", &mut problems);
    }
    if let Some(v) = get("LOOPGUARD_ADMIN_LISTEN") {
        config.server.admin_listen = parse_addr(&v, "env LOOPGUARD_ADMIN_LISTEN", &mut problems);
    }
    if let Some(v) = get("LOOPGUARD_ADMIN_TOKEN") {
        config.server.admin_token = Some(v).filter(|t| !t.is_empty());
    }
    if let Some(v) = get("LOOPGUARD_STATE_URL") {
        match state::parse_url(&v) {
            Ok(url) => config.state.url = Some(url),
            Err(e) => problems.push("env LOOPGUARD_STATE_URL", e),
        }
    }
    for provider in [Provider::Openai, Provider::Gemini, Provider::Anthropic] {
        let var = format!("LOOPGUARD_{}_UPSTREAM", provider.name().to_ascii_uppercase());
        if let Some(v) = get(&var) {
            match Url::parse(&v) {
                Ok(url) if matches!(url.scheme(), "http" | "https") => {
                    for route in config.routes.iter_mut().filter(|r| r.provider == provider) {
                        route.upstream = url.clone();
                    }
                }
                _ => problems.push(format!("env {var}"), format!("{v:?} is not a valid URL")),
            }
        }
    }
    if problems.errors.is_empty() {
        Ok(())
    } else {
        Err(ConfigError {
            source_name: "environment".to_owned(),
            errors: problems.errors,
        })
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
