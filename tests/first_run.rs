//! First-run rough edges, as a new user meets them: pretty logs coloured
//! only on a terminal (and never with `NO_COLOR`), `check-config` listing
//! every problem at once with its key path.

use std::path::PathBuf;
use std::process::{Command, Stdio};

fn write(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("loopguard-first-run-{}-{name}", std::process::id()));
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
    path
}

/// A `serve` that logs at least one line, then stops: a repaired threshold
/// ladder is logged as a warning, then the taken port makes it exit.
fn serve_config() -> (std::net::TcpListener, PathBuf) {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let port = taken.local_addr().map(|a| a.port()).unwrap_or_default();
    let config = write(
        &format!("colours-{port}.toml"),
        &format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:0\"\n\n[[routes]]\nprefix = \"/v1\"\nprovider = \"openai\"\nupstream = \"http://127.0.0.1:9\"\n\n[loop_detection.error_repeat]\nwarning = 4\ncritical = 4\n"
        ),
    );
    (taken, config)
}

/// Runs `serve` under a pseudo-terminal (`script`) and returns what the terminal showed.
fn on_a_terminal(config: &std::path::Path, no_color: Option<&str>) -> Option<String> {
    let script = ["/usr/bin/script", "/bin/script"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())?;
    let command = format!(
        "{} serve --config {}",
        env!("CARGO_BIN_EXE_loopguard"),
        config.display()
    );
    let mut cmd = Command::new(script);
    cmd.args(["-qec", &command, "/dev/null"])
        .stdin(Stdio::null())
        .env_remove("NO_COLOR");
    if let Some(v) = no_color {
        cmd.env("NO_COLOR", v);
    }
    let out = cmd.output().unwrap_or_else(|e| panic!("{e}"));
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Pretty logs redirected to a file carry no ANSI escape; on a terminal they
/// are coloured, unless `NO_COLOR` is set.
#[test]
fn pretty_logs_are_coloured_only_on_a_terminal_and_never_with_no_color() {
    let (_taken, config) = serve_config();
    let out = Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .args(["serve", "--config"])
        .arg(&config)
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let redirected = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the taken port makes serve fail: {redirected}"
    );
    assert!(redirected.contains("WARN"), "it logged: {redirected}");
    assert!(
        !redirected.contains('\u{1b}'),
        "no escape codes in a file: {redirected:?}"
    );

    let Some(terminal) = on_a_terminal(&config, None) else {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED the terminal half of the colour test: no `script` (util-linux) to make a pseudo-terminal"
        );
        return;
    };
    assert!(
        terminal.contains("\u{1b}["),
        "coloured on a terminal: {terminal:?}"
    );
    let plain = on_a_terminal(&config, Some("1")).unwrap_or_default();
    assert!(plain.contains("WARN"), "{plain:?}");
    assert!(
        !plain.contains("\u{1b}["),
        "NO_COLOR turns colours off: {plain:?}"
    );
}

/// A file with shape problems (misspelt keys, a wrong type) and value
/// problems: `check-config` lists them all at once, each with its key path,
/// the misspelt keys with a "did you mean", and exits 1.
#[test]
fn check_config_lists_shape_and_value_problems_together() {
    let path = write(
        "check.toml",
        r#"[server]
listen = "nowhere"
listen_addr = "127.0.0.1:8080"

[[routes]]
prefix = "/v1"
provider = "openai"
upstrem = "https://api.openai.com"
upstream = "https://api.openai.com"

[[routes]]
prefix = "/x"
provider = "acme"
upstream = "htp:/x"

[loop_detection.idntical_call]
warning = 3

[loop_detection.cycle]
warning = "three"
"#,
    );
    let out = Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .arg("check-config")
        .arg(&path)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout).replace(&path.display().to_string(), "check.toml");
    insta::assert_snapshot!(stdout);
}
