//! End-to-end harness: runs the built `loopguard` binary (proxy and mock
//! upstream) on 127.0.0.1 ephemeral ports and cleans up after each test.

#![allow(dead_code, reason = "each test binary uses a different part of the harness")]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The directory of recorded fixtures: `$LOOPGUARD_FIXTURES`, else
/// `../shared/fixtures` beside the checkout. Panics with a clear message
/// when it is missing, so a misconfigured run never passes silently.
pub fn fixtures_dir() -> PathBuf {
    let dir = std::env::var_os("LOOPGUARD_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures"));
    assert!(
        dir.join("SOURCES.md").exists(),
        "recorded fixtures not found at {}: set LOOPGUARD_FIXTURES to the shared fixtures directory",
        dir.display()
    );
    dir
}

/// Every `*.sse` fixture of a dialect directory, sorted.
pub fn fixtures_of(dialect: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(fixtures_dir().join(dialect))
        .unwrap_or_else(|e| panic!("cannot list fixtures of {dialect}: {e}"))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "sse"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures for {dialect}");
    files
}

fn unique(name: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    std::env::temp_dir().join(format!("loopguard-test-{}-{n}-{name}", std::process::id()))
}

/// A running child process, killed on drop; stderr goes to a file.
pub struct Proc {
    child: Child,
    /// Main listening address.
    pub addr: SocketAddr,
    /// Admin address (loopguard only).
    pub admin: Option<SocketAddr>,
    /// Where stderr (the logs) is written.
    pub log_path: PathBuf,
}

impl Proc {
    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://ADMIN`.
    pub fn admin_url(&self) -> String {
        format!(
            "http://{}",
            self.admin.unwrap_or_else(|| panic!("no admin address"))
        )
    }

    /// Everything the process logged so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Waits until the logs contain `needle` (logs are written when a
    /// response body ends, a moment after the client saw the end).
    pub fn wait_for_log(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let logs = self.logs();
            if logs.contains(needle) {
                return logs;
            }
            assert!(
                Instant::now() < deadline,
                "log never contained {needle:?}; logs:\n{logs}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every JSON log line whose message is `message`, in order.
    pub fn log_events(&self, message: &str) -> Vec<serde_json::Value> {
        self.logs()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["message"] == message)
            .collect()
    }

    /// Waits until at least `n` log lines with `message` exist and returns them.
    pub fn wait_log_events(&self, message: &str, n: usize) -> Vec<serde_json::Value> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let events = self.log_events(message);
            if events.len() >= n {
                return events;
            }
            assert!(
                Instant::now() < deadline,
                "fewer than {n} {message:?} log lines; logs:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends a signal by name (`TERM`, `HUP`, …).
    pub fn signal(&self, name: &str) {
        let _ = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status();
    }

    /// Waits for the process to exit and returns its status.
    pub fn wait(&mut self) -> std::process::ExitStatus {
        self.child.wait().unwrap_or_else(|e| panic!("wait failed: {e}"))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(args: &[&str], name: &str, env: &[(&str, &str)]) -> (Proc, String) {
    let log_path = unique(&format!("{name}.log"));
    let log = std::fs::File::create(&log_path).unwrap_or_else(|e| panic!("cannot create log: {e}"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_loopguard"));
    cmd.arg("--log-format")
        .arg("json")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .env("LOOPGUARD_LOG", "info,loopguard=debug");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start loopguard: {e}"));
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let mut line = String::new();
    let _ = BufReader::new(stdout).read_line(&mut line);
    let proc = Proc {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        admin: None,
        log_path,
    };
    assert!(
        !line.is_empty(),
        "{name} did not start; its log:\n{}",
        std::fs::read_to_string(&proc.log_path).unwrap_or_default()
    );
    (proc, line)
}

fn addr_after(line: &str, key: &str) -> SocketAddr {
    let start = line.find(key).unwrap_or_else(|| panic!("{key} not in {line:?}")) + key.len();
    line[start..]
        .split_whitespace()
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address after {key} in {line:?}"))
}

/// Starts the mock upstream on an ephemeral port.
pub fn mock() -> Proc {
    mock_with_args(&[])
}

/// Starts the mock upstream serving fixtures from `fixtures`.
pub fn mock_with_fixtures(fixtures: &std::path::Path) -> Proc {
    spawn_mock(fixtures, &[])
}

/// Starts the mock upstream on an ephemeral port with extra arguments
/// (e.g. `["--script", path]`).
pub fn mock_with_args(extra: &[&str]) -> Proc {
    spawn_mock(&fixtures_dir(), extra)
}

fn spawn_mock(fixtures: &std::path::Path, extra: &[&str]) -> Proc {
    let fixtures = fixtures.to_string_lossy();
    let mut args = vec![
        "mock-upstream",
        "--listen",
        "127.0.0.1:0",
        "--fixtures",
        &fixtures,
    ];
    args.extend_from_slice(extra);
    let (mut proc, line) = spawn(&args, "mock", &[]);
    proc.addr = addr_after(&line, "listening on ");
    proc
}

/// A config routing `/v1` (openai), `/v1beta` (gemini), `/gemini`
/// (gemini, strip_prefix) and `/anthropic` (anthropic, strip_prefix) to
/// `upstream`, with `server_extra` TOML lines added to `[server]`.
pub fn config_for(upstream: &str, server_extra: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
{server_extra}

[[routes]]
prefix = "/v1"
provider = "openai"
upstream = "{upstream}"

[[routes]]
prefix = "/v1beta"
provider = "gemini"
upstream = "{upstream}"

[[routes]]
prefix = "/gemini"
provider = "gemini"
upstream = "{upstream}"
strip_prefix = true

[[routes]]
prefix = "/anthropic"
provider = "anthropic"
upstream = "{upstream}"
strip_prefix = true
"#
    )
}

/// Starts loopguard with the given config text.
pub fn loopguard(config: &str) -> Proc {
    loopguard_with_env(config, &[])
}

/// Starts loopguard with the given config text and extra environment.
pub fn loopguard_with_env(config: &str, env: &[(&str, &str)]) -> Proc {
    let path = unique("config.toml");
    std::fs::write(&path, config).unwrap_or_else(|e| panic!("cannot write config: {e}"));
    loopguard_from_file(&path, env)
}

/// Starts loopguard reading the config file at `path`.
pub fn loopguard_from_file(path: &std::path::Path, env: &[(&str, &str)]) -> Proc {
    let (mut proc, line) = spawn(&["serve", "--config", &path.to_string_lossy()], "loopguard", env);
    proc.addr = addr_after(&line, "proxy=");
    proc.admin = Some(addr_after(&line, "admin="));
    proc
}

/// A mock and a loopguard in front of it with default settings plus `server_extra`.
pub fn pair(server_extra: &str) -> (Proc, Proc) {
    let mock = mock();
    let lg = loopguard(&config_for(&mock.url(), server_extra));
    (mock, lg)
}

/// An HTTP client that neither decompresses nor follows redirects.
pub fn client() -> reqwest::Client {
    loopguard::http_client::install_crypto_provider();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"))
}

/// Reads a response body to the end, returning the bytes received and
/// whether it ended cleanly (`Ok`) or broke off (`Err` with the message).
pub async fn read_body(mut response: reqwest::Response) -> (Vec<u8>, Result<(), String>) {
    let mut out = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => out.extend_from_slice(&chunk),
            Ok(None) => return (out, Ok(())),
            Err(e) => return (out, Err(format!("{e:?}"))),
        }
    }
}

/// POSTs `body` to `url` with extra headers; panics when nothing answers.
pub async fn post(
    url: String,
    headers: &[(&str, &str)],
    body: impl Into<reqwest::Body>,
) -> reqwest::Response {
    let mut request = client().post(url).body(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap_or_else(|e| panic!("{e}"))
}

/// The `x-loopguard-verdict` header of a response, if any.
pub fn verdict_header(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get("x-loopguard-verdict")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// GETs `url` and parses the answer as JSON.
pub async fn get_json<T: serde::de::DeserializeOwned>(url: String) -> T {
    client()
        .get(url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .json()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The mock's recorded requests.
pub async fn mock_requests(mock: &Proc) -> Vec<serde_json::Value> {
    get_json(format!("{}/_mock/requests", mock.url())).await
}

/// The mock's counters.
pub async fn mock_stats(mock: &Proc) -> serde_json::Value {
    get_json(format!("{}/_mock/stats", mock.url())).await
}

/// Polls the mock's counters until `key` reaches `at_least` (or panics after 5 s).
pub async fn wait_mock_stat(mock: &Proc, key: &str, at_least: u64) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let stats = mock_stats(mock).await;
        if stats[key].as_u64().unwrap_or(0) >= at_least {
            return stats;
        }
        assert!(
            Instant::now() < deadline,
            "mock stat {key} never reached {at_least}: {stats}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// loopguard's Prometheus text.
pub async fn metrics(lg: &Proc) -> String {
    client()
        .get(format!("{}/metrics", lg.admin_url()))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .text()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The value of one metric series (exact name with labels), 0 when absent.
pub fn metric_value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.trim().parse().ok()))
        .unwrap_or(0.0)
}

/// What a test reads of a response: its status, content type, verdict
/// header and whole body (`B`: the bytes, or their text).
#[derive(Debug)]
pub struct Got<B> {
    pub status: u16,
    pub content_type: String,
    pub verdict: Option<String>,
    pub body: B,
}

impl Got<Vec<u8>> {
    /// The same, the body as text (bad UTF-8 replaced).
    pub fn into_text(self) -> Got<String> {
        Got {
            status: self.status,
            content_type: self.content_type,
            verdict: self.verdict,
            body: String::from_utf8_lossy(&self.body).into_owned(),
        }
    }
}

/// POSTs the JSON `body` to `base` + `path` with `headers` (appended in
/// order) and reads the whole response.
pub async fn post_json(
    base: &str,
    path: &str,
    body: &serde_json::Value,
    headers: &[(&str, &str)],
) -> Got<Vec<u8>> {
    let mut request = client().post(format!("{base}{path}")).body(body.to_string());
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = request.send().await.unwrap_or_else(|e| panic!("{e}"));
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let verdict = verdict_header(&response);
    let body = response.bytes().await.unwrap_or_default().to_vec();
    Got {
        status,
        content_type,
        verdict,
        body,
    }
}
