//! The `loopguard` binary: wiring only (see the library's crate map).

use std::path::Path;
use std::process::ExitCode;

use clap::Parser;
use loopguard::cli::{Cli, Command, DEFAULT_CONFIG_PATH};
use loopguard::config::{self, ConfigError, Loaded};

/// mimalloc, not the system allocator: glibc malloc kept most of what a
/// large request's parse freed (RSS stayed near its peak), mimalloc gives
/// freed pages back (issue #13, point 3; see README "Memory").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The demo prints its own story; its logs stay quiet unless asked for.
    let default_level = if matches!(cli.command, Command::Demo) {
        "error"
    } else {
        "info"
    };
    loopguard::telemetry::init_logging(cli.log_format, default_level);
    match cli.command {
        Command::Serve { config } => serve(config.as_deref()),
        Command::CheckConfig { file } => check_config(&file),
        Command::Replay {
            config,
            summary,
            json,
            dialect,
            interval,
            fail_on,
            files,
        } => replay(
            config.as_deref(),
            dialect.as_deref(),
            interval,
            fail_on.as_deref(),
            &files,
            summary.then_some(if json { Summary::Json } else { Summary::Table }),
        ),
        Command::Tune {
            base,
            sets,
            configs,
            labels,
            interval,
            json,
            files,
        } => tune(
            base.as_deref(),
            &sets,
            &configs,
            labels.as_deref(),
            interval,
            json,
            &files,
        ),
        Command::Demo => run(loopguard::tools::demo::run()),
        Command::Healthcheck { url } => run(healthcheck(url.unwrap_or_else(|| {
            loopguard::cli::healthcheck_url(std::env::var("LOOPGUARD_ADMIN_LISTEN").ok().as_deref())
        }))),
        Command::MockUpstream(args) => run(loopguard::tools::mock::run(args)),
    }
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build()
}

fn run<E: std::fmt::Display>(future: impl Future<Output = Result<(), E>>) -> ExitCode {
    match runtime() {
        Ok(rt) => match rt.block_on(future) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("loopguard: {e}");
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("loopguard: cannot start the runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The file `serve` reads: the one given, else `config/loopguard.toml` if it exists.
fn config_path(path: Option<&Path>) -> Option<std::path::PathBuf> {
    match path {
        Some(p) => Some(p.to_owned()),
        None if Path::new(DEFAULT_CONFIG_PATH).exists() => Some(DEFAULT_CONFIG_PATH.into()),
        None => None,
    }
}

fn load(path: Option<&Path>) -> Result<Loaded, ConfigError> {
    match path {
        Some(p) => config::load_file(p),
        None => config::load_str(config::DEFAULT_TOML, "<built-in defaults>"),
    }
}

fn serve(path: Option<&Path>) -> ExitCode {
    let path = config_path(path);
    let loaded = match load(path.as_deref()) {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("loopguard: invalid configuration: {e}");
            return ExitCode::FAILURE;
        }
    };
    for notice in &loaded.notices {
        tracing::warn!(key = %notice.path, "config adjusted: {}", notice.message);
    }
    let mut config = loaded.config;
    if let Err(e) = config::apply_env(&mut config, |k| std::env::var(k).ok()) {
        eprintln!("loopguard: invalid environment override: {e}");
        return ExitCode::FAILURE;
    }
    run(async move {
        let metrics = loopguard::telemetry::install_metrics()
            .map_err(|e| tracing::warn!("{e}"))
            .ok();
        loopguard::server::serve(config, path, metrics).await
    })
}

fn check_config(path: &Path) -> ExitCode {
    match config::load_file(path) {
        Ok(loaded) => {
            for notice in &loaded.notices {
                println!("notice: {notice}");
            }
            // The environment overrides `serve` would apply are checked too.
            let mut config = loaded.config;
            if let Err(e) = config::apply_env(&mut config, |k| std::env::var(k).ok()) {
                println!("{e}");
                return ExitCode::FAILURE;
            }
            if config.state.backend == config::state::Backend::Redis {
                if let Some(url) = &config.state.url {
                    println!("state: redis at {url} (key prefix {:?})", config.state.key_prefix);
                }
            } else {
                println!("state: memory (sessions kept in this process only)");
                if std::env::var_os("LOOPGUARD_STATE_URL").is_some() {
                    println!(
                        "notice: LOOPGUARD_STATE_URL is set but [state] backend is \"memory\": the URL is not used (backend = \"redis\" uses it)"
                    );
                }
            }
            println!("{}: ok", path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("{e}");
            ExitCode::FAILURE
        }
    }
}

async fn healthcheck(url: String) -> Result<(), String> {
    loopguard::http_client::install_crypto_provider();
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(3))
        .build()
        .map_err(|e| e.to_string())?;
    let response = client.get(&url).send().await.map_err(|e| format!("{url}: {e}"))?;
    if response.status().is_success() {
        Ok(())
    } else {
        Err(format!("{url}: HTTP {}", response.status()))
    }
}

/// Writes `text` to stdout; false when it cannot (a reader that closed the
/// pipe, as `| head` does: `println!` panicked there).
fn emit(text: &str) -> bool {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).and_then(|()| out.flush()).is_ok()
}

/// How `replay --summary` prints.
#[derive(Debug, Clone, Copy)]
enum Summary {
    Table,
    Json,
}

fn tune(
    base: Option<&Path>,
    sets: &[String],
    configs: &[std::path::PathBuf],
    labels: Option<&Path>,
    interval: f64,
    json: bool,
    files: &[std::path::PathBuf],
) -> ExitCode {
    use loopguard::tools::tune;
    let base = match base {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => (text, path.display().to_string()),
            Err(e) => {
                eprintln!("loopguard tune: {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        },
        None => (config::DEFAULT_TOML.to_owned(), "<built-in defaults>".to_owned()),
    };
    let request = tune::Request {
        base,
        sets,
        configs,
        files,
        interval: std::time::Duration::from_secs_f64(interval.max(0.0)),
        labels,
    };
    match tune::run(&request) {
        Ok((rows, sessions)) => {
            if json {
                let doc = serde_json::json!({"sessions": sessions, "settings": rows});
                emit(&format!("{doc}\n"));
            } else {
                emit(&tune::table(&rows, sessions));
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("loopguard tune: {e}");
            ExitCode::FAILURE
        }
    }
}

fn replay(
    config: Option<&Path>,
    dialect: Option<&str>,
    interval: f64,
    fail_on: Option<&str>,
    files: &[std::path::PathBuf],
    summary: Option<Summary>,
) -> ExitCode {
    use loopguard::dialect::Dialect;
    let loaded = match config {
        Some(p) => config::load_detection_file(p),
        None => config::load_str(config::DEFAULT_TOML, "<built-in defaults>"),
    };
    let loaded = match loaded {
        Ok(l) => l,
        Err(e) => {
            eprintln!("loopguard: invalid configuration: {e}");
            return ExitCode::FAILURE;
        }
    };
    let dialect = dialect.and_then(|name| Dialect::ALL.into_iter().find(|d| d.name() == name));
    let settings = &loaded.config.loop_detection.defaults;
    announce_semantic_check(&settings.semantic_check);
    let interval = std::time::Duration::from_secs_f64(interval.max(0.0));
    let level = fail_level(fail_on);
    let reached = |lines: &[loopguard::detect::ReplayLine]| {
        level.is_some_and(|l| loopguard::tools::replay::reaches(lines, l))
    };
    let (failed, hit) = match summary {
        Some(format) => replay_summaries(settings, files, dialect, interval, format, &reached),
        None => replay_lines(settings, files, dialect, interval, &reached),
    };
    if failed {
        ExitCode::FAILURE
    } else if hit {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    }
}

/// Says on stderr whether the semantic check (LLM judge) runs too; when it
/// is configured but switched off, that it did not (without any
/// configuration, nothing).
fn announce_semantic_check(judge: &loopguard::config::semantic::SemanticCheck) {
    if judge.enabled {
        eprintln!(
            "loopguard replay: the semantic check (LLM judge) runs too, calling {}",
            judge.upstream.as_ref().map_or("?", url::Url::as_str)
        );
    } else if judge.upstream.is_some() {
        eprintln!(
            "loopguard replay: the semantic check (LLM judge) did not run: [loop_detection.semantic_check] is not enabled"
        );
    }
}

/// `--fail-on`: the level whose verdict makes the exit status 3.
fn fail_level(fail_on: Option<&str>) -> Option<loopguard::detect::Level> {
    use loopguard::detect::Level;
    match fail_on {
        Some("warning") => Some(Level::Warning),
        Some("critical") => Some(Level::Critical),
        Some("breaker") => Some(Level::Breaker),
        _ => None,
    }
}

/// `--summary`: one row per file, as a table or JSON. Returns (a file
/// failed, the fail level was reached).
fn replay_summaries(
    settings: &loopguard::detect::Settings,
    files: &[std::path::PathBuf],
    dialect: Option<loopguard::dialect::Dialect>,
    interval: std::time::Duration,
    format: Summary,
    reached: &dyn Fn(&[loopguard::detect::ReplayLine]) -> bool,
) -> (bool, bool) {
    use loopguard::tools::replay_summary::{self, FileSummary};
    let (mut failed, mut hit) = (false, false);
    let mut rows = Vec::new();
    for file in files {
        match loopguard::tools::replay::replay_files(settings, std::slice::from_ref(file), dialect, interval)
        {
            Ok(replayed) => {
                hit |= reached(&replayed.lines);
                rows.push(FileSummary::of(&file.display().to_string(), &replayed));
            }
            Err(e) => {
                eprintln!("loopguard replay: {e}");
                failed = true;
            }
        }
    }
    match format {
        Summary::Table => emit(&replay_summary::table(&rows)),
        Summary::Json => emit(&format!("{}\n", replay_summary::json(&rows))),
    };
    (failed, hit)
}

/// Every replay line as JSON on stdout. Returns (the replay failed, the
/// fail level was reached).
fn replay_lines(
    settings: &loopguard::detect::Settings,
    files: &[std::path::PathBuf],
    dialect: Option<loopguard::dialect::Dialect>,
    interval: std::time::Duration,
    reached: &dyn Fn(&[loopguard::detect::ReplayLine]) -> bool,
) -> (bool, bool) {
    match loopguard::tools::replay::run(settings, files, dialect, interval) {
        Ok(lines) => {
            for line in &lines {
                match serde_json::to_string(line) {
                    // A reader that went away (`| head`) ends the output.
                    Ok(text) if !emit(&format!("{text}\n")) => break,
                    Ok(_) => {}
                    Err(e) => eprintln!("loopguard replay: {e}"),
                }
            }
            (false, reached(&lines))
        }
        Err(e) => {
            eprintln!("loopguard replay: {e}");
            (true, false)
        }
    }
}
