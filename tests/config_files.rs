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
