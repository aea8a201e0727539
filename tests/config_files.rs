//! Every file in `config/` is valid, and `loopguard check-config` reports
//! every problem of a bad file with its key path.

use std::process::Command;

/// Each shipped config example loads without errors.
#[test]
fn every_file_in_config_loads() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{e}")) {
        let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
        if path.extension().is_some_and(|x| x == "toml") {
            loopguard::config::load_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            n += 1;
        }
    }
    assert!(n >= 1, "no config files found in {}", dir.display());
}

/// The shipped default file is the one embedded in the binary.
#[test]
fn default_file_is_the_embedded_default() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/loopguard.toml");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(text, loopguard::config::DEFAULT_TOML);
}

/// `check-config` lists every problem, each with its key path, and exits 1.
#[test]
fn check_config_lists_every_problem_with_its_key_path() {
    let path = std::env::temp_dir().join(format!("loopguard-check-{}.toml", std::process::id()));
    std::fs::write(
        &path,
        r#"
[server]
listen = "nowhere"

[[routes]]
prefix = "/v1"
provider = "openai"
upstream = "https://api.openai.com"

[[routes]]
prefix = "/x"
provider = "openai"
upstream = "htp:/x"
"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let out = Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .arg("check-config")
        .arg(&path)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("server.listen: \"nowhere\" is not a socket address"),
        "{stdout}"
    );
    assert!(
        stdout.contains("routes[1].upstream: \"htp:/x\" is not a valid URL"),
        "{stdout}"
    );
    assert!(stdout.contains("2 problem(s)"), "{stdout}");
}

/// A good file passes `check-config` with exit 0.
#[test]
fn check_config_accepts_the_default_file() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/loopguard.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .arg("check-config")
        .arg(&path)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}

/// `[state]`: `check-config` names the store with the URL's password
/// blanked out (from the file or `LOOPGUARD_STATE_URL`), and reports a bad
/// backend, timeout and URL by key path without the password.
/// `loopguard check-config <path>` with `LOOPGUARD_STATE_URL` set to
/// `state_url` (unset when `None`): its exit code and what it printed.
fn check_config(path: &std::path::Path, state_url: Option<&str>) -> (Option<i32>, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_loopguard"));
    command.arg("check-config").arg(path);
    if let Some(url) = state_url {
        command.env("LOOPGUARD_STATE_URL", url);
    }
    let out = command.output().unwrap_or_else(|e| panic!("{e}"));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn check_config_validates_state_and_never_shows_its_password() {
    let config = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let (code, stdout) = check_config(
        &config.join("replicas.toml"),
        Some("rediss://lg:s3cret-pw@cache.internal:6380/2"),
    );
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.contains("state: redis at rediss://lg:***@cache.internal:6380/2"),
        "{stdout}"
    );
    assert!(!stdout.contains("s3cret-pw"), "{stdout}");

    let bad = std::env::temp_dir().join(format!("loopguard-state-{}.toml", std::process::id()));
    std::fs::write(
        &bad,
        "[state]\nbackend = \"etcd\"\nurl = \"http://lg:s3cret-pw@cache:6379\"\ntimeout_ms = 0\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (code, stdout) = check_config(&bad, None);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains("state.backend: \"etcd\" is not a backend"),
        "{stdout}"
    );
    assert!(
        stdout.contains("state.url: \"http://lg:***@cache:6379/\" is not a redis://"),
        "{stdout}"
    );
    assert!(
        stdout.contains("state.timeout_ms: must be 1..=10000, got 0"),
        "{stdout}"
    );
    assert!(!stdout.contains("s3cret-pw"), "{stdout}");
    assert!(stdout.contains("4 problem(s)"), "{stdout}"); // and no [[routes]]

    // A password put in the query, which the Redis client would ignore: refused, never shown.
    let (code, stdout) = check_config(
        &config.join("replicas.toml"),
        Some("redis://cache:6379/0?password=s3cret-pw"),
    );
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains("\"password\" is not read by the Redis client"),
        "{stdout}"
    );
    assert!(!stdout.contains("s3cret-pw"), "{stdout}");

    // The memory backend says so, and that a URL given by the environment is not used.
    let (code, stdout) = check_config(&config.join("loopguard.toml"), Some("redis://cache:6379/0"));
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("state: memory"), "{stdout}");
    assert!(
        stdout.contains("LOOPGUARD_STATE_URL is set but [state] backend is \"memory\""),
        "{stdout}"
    );
}
