//! The command line: `serve`, `check-config`, `replay`, `healthcheck`, `mock-upstream`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::telemetry::LogFormat;

/// A streaming reverse proxy between AI agents and LLM APIs that stops agents stuck in loops.
#[derive(Debug, Parser)]
#[command(name = "loopguard", version, about)]
pub struct Cli {
    /// Log format (stderr). The level is set by LOOPGUARD_LOG (RUST_LOG syntax, default info).
    #[arg(long, value_enum, default_value = "pretty", global = true)]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the proxy.
    Serve {
        /// Config file. Default: config/loopguard.toml if it exists, else the built-in defaults.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Validate a config file and list every problem with its key path (exit 1 if any).
    CheckConfig {
        /// The file to check.
        file: PathBuf,
    },
    /// Run the detectors offline on recorded request bodies and print one JSON line per verdict.
    ///
    /// A .json file is one request body, a .jsonl file is a session's successive request bodies;
    /// a last .sse file (or response-shaped .json) is the response to the last request.
    /// With --summary each file is replayed as a session of its own and summarised instead.
    Replay {
        /// Config file whose `[loop_detection]` and `[[agents]]` to use (default: the built-in
        /// defaults); it needs no `[[routes]]`.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Per file (each its own session): requests, verdicts per level, first warning /
        /// critical / stop with request index and detector; then the totals. A table.
        #[arg(long)]
        summary: bool,
        /// With --summary: print it as one JSON document instead of a table.
        #[arg(long, requires = "summary")]
        json: bool,
        /// Dialect of the bodies (default: guessed from their shape).
        #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(crate::dialect::Dialect::ALL.map(crate::dialect::Dialect::name)))]
        dialect: Option<String>,
        /// Wall time between recorded requests, in seconds (recordings carry no clock).
        #[arg(long, default_value_t = 10.0)]
        interval: f64,
        /// Exit 3 when a verdict reaches this level.
        #[arg(long, value_parser = ["warning", "critical", "breaker"])]
        fail_on: Option<String>,
        /// The recorded files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Compare settings over recorded sessions: per setting, sessions warned / stopped / broken,
    /// at which request, what changed against the base, and (with --labels) recall and false
    /// positives. Each file is one session: a recording, or a .jsonl of successive request bodies.
    Tune {
        /// The base config (default: the built-in defaults); --set changes it.
        #[arg(long)]
        base: Option<PathBuf>,
        /// DETECTOR.KEY=V1,V2,… under `[loop_detection]` (repeatable: every combination is a setting).
        #[arg(long = "set")]
        sets: Vec<String>,
        /// A whole config file as a setting (repeatable).
        #[arg(long = "config")]
        configs: Vec<PathBuf>,
        /// Labels: session file → loop / progress (`FILE LABEL` lines, a JSON map, or a Markdown
        /// table with the file first and the label last, like trajectories/INDEX.md).
        #[arg(long)]
        labels: Option<PathBuf>,
        /// Wall time between the bodies of a .jsonl file, in seconds (recordings carry their clock).
        #[arg(long, default_value_t = 10.0)]
        interval: f64,
        /// Print JSON instead of the table.
        #[arg(long)]
        json: bool,
        /// The sessions.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// See it work in ten seconds: a scripted looping model, loopguard in front, every dialect.
    Demo,
    /// Probe the admin listener's /healthz (exit 0 when healthy); for container health checks.
    Healthcheck {
        /// URL to probe [default: /healthz on LOOPGUARD_ADMIN_LISTEN when set
        /// (a wildcard address probed on loopback), else http://127.0.0.1:9090/healthz].
        #[arg(long)]
        url: Option<String>,
    },
    /// Run a scripted upstream that speaks every dialect (OpenAI chat and Responses, Gemini, Anthropic) (for tests, benchmarks and demos).
    MockUpstream(crate::tools::mock::MockArgs),
}

/// The URL `healthcheck` probes when `--url` is not given: `/healthz` on
/// `admin_listen` (the value of `LOOPGUARD_ADMIN_LISTEN`, the admin
/// listener's override in containers) when given and an address, a
/// wildcard host (`0.0.0.0`, `[::]`) probed on loopback; else port 9090 on
/// 127.0.0.1, the default admin listener.
pub fn healthcheck_url(admin_listen: Option<&str>) -> String {
    let addr = admin_listen.and_then(|a| a.trim().parse::<std::net::SocketAddr>().ok());
    match addr {
        Some(std::net::SocketAddr::V4(a)) if a.ip().is_unspecified() => {
            format!("http://127.0.0.1:{}/healthz", a.port())
        }
        Some(std::net::SocketAddr::V6(a)) if a.ip().is_unspecified() => {
            format!("http://[::1]:{}/healthz", a.port())
        }
        Some(a) => format!("http://{a}/healthz"),
        None => "http://127.0.0.1:9090/healthz".to_owned(),
    }
}

/// The config path `serve` uses when none is given.
pub const DEFAULT_CONFIG_PATH: &str = "config/loopguard.toml";
