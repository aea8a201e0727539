//! The live page (`/ui`) driven by headless Chromium from the Debian package
//! against the built binary with a looping session: what a person sees is the
//! session with its agent and verdict, the timeline with the repeated calls
//! and the message the agent got, and the chart drawn with data. Skips, with
//! the reason printed, when no `chromium` is installed.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{config_for, loopguard, mock, post};
use serde_json::json;

/// Writes a line to stderr past the test harness's capture, so a skip or
/// the screenshot's path shows in every run.
fn say(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// The Chromium binary, or `None` (the test then skips, saying why).
fn chromium() -> Option<PathBuf> {
    let candidates = std::env::var_os("LOOPGUARD_CHROMIUM")
        .map(PathBuf::from)
        .into_iter()
        .chain(["/usr/bin/chromium", "/usr/bin/chromium-browser"].map(PathBuf::from));
    candidates.into_iter().find(|p| p.exists())
}

/// Runs headless Chromium on `url` with `extra` flags (`--dump-dom`,
/// `--screenshot=…`) and returns its stdout.
fn headless(browser: &Path, url: &str, extra: &[String]) -> String {
    let profile = std::env::temp_dir().join(format!(
        "loopguard-ui-chromium-{}-{}",
        std::process::id(),
        extra.len()
    ));
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=1280,1000",
            "--virtual-time-budget=6000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", browser.display()));
    let _ = std::fs::remove_dir_all(&profile);
    assert!(
        out.status.success(),
        "chromium failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A chat agent calling `list_directory` with the same arguments and getting
/// the same result until loopguard blocks it; returns how many requests it sent.
async fn looping_agent(lg: &common::Proc) -> usize {
    let mut messages = vec![json!({"role": "user", "content": "list the files"})];
    let tools = json!([{"type": "function", "function": {"name": "list_directory", "parameters": {"type": "object"}}}]);
    for i in 0..8 {
        let body = json!({"model": "m", "stream": true, "messages": messages, "tools": tools});
        let r = post(
            format!("{}/v1/chat/completions", lg.url()),
            &[
                ("x-loopguard-session", "ui-looping-agent"),
                ("x-agent-name", "lister"),
            ],
            body.to_string(),
        )
        .await;
        let text = r.text().await.unwrap_or_default();
        if text.contains("[loopguard]") {
            return i + 1;
        }
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("c{i}"), "type": "function", "function": {"name": "list_directory", "arguments": "{\"path\":\".\"}"}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": "a.txt\nb.txt"}));
    }
    8
}

/// The page shows the looping session, its agent and critical verdict, the
/// repeated calls with the block's message, and the verdict chart with data;
/// it polls the API again after loading. A screenshot is kept under
/// `target/ui-artifacts/`.
#[tokio::test(flavor = "multi_thread")]
async fn the_live_page_shows_a_looping_session_its_verdict_and_the_chart() {
    let Some(browser) = chromium() else {
        say(
            "SKIPPED the_live_page_shows_a_looping_session_its_verdict_and_the_chart: no chromium (apt-get install chromium, or set LOOPGUARD_CHROMIUM)",
        );
        return;
    };
    let mock = mock();
    let config = format!(
        "{}\n[[agents]]\nid = \"lister\"\nmatch = {{ header = \"x-agent-name\", value = \"lister\" }}\n",
        config_for(&mock.url(), "")
    );
    let lg = loopguard(&config);
    let sent = looping_agent(&lg).await;
    assert!(sent < 8, "the loop was never stopped");
    let url = format!("{}/ui", lg.admin_url());

    let dom = tokio::task::spawn_blocking({
        let (browser, url) = (browser.clone(), url.clone());
        move || headless(&browser, &url, &["--dump-dom".to_owned()])
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let document = scraper::Html::parse_document(&dom);
    let select = |css: &str| -> Vec<String> {
        let selector = scraper::Selector::parse(css).unwrap_or_else(|e| panic!("{css}: {e}"));
        document
            .select(&selector)
            .map(|e| e.text().collect::<String>())
            .collect()
    };
    let rows = select("#sessions tbody tr");
    assert_eq!(rows.len(), 1, "one session row: {rows:?}\n{dom}");
    let listed: serde_json::Value = common::get_json(format!("{}/admin/sessions", lg.admin_url())).await;
    let key = listed["sessions"][0]["key"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        key.len() > 24 && rows[0].contains(&key[..24]),
        "the session's key is shown: {rows:?} {key}"
    );
    assert!(rows[0].contains("lister"), "the agent is shown: {rows:?}");
    assert!(
        rows[0].contains("critical"),
        "the last verdict is shown: {rows:?}"
    );
    assert!(rows[0].contains("→ block"), "the action is shown: {rows:?}");

    let calls = select("#timeline li.call");
    assert!(calls.len() >= 3, "the held calls are listed: {calls:?}");
    assert!(calls.iter().all(|c| c.contains("list_directory")), "{calls:?}");
    assert!(calls[0].contains("new result"), "{calls:?}");
    assert!(
        calls[1..].iter().all(|c| c.contains("repeat result")),
        "{calls:?}"
    );
    let verdicts = select("#timeline li.verdict-row");
    assert!(
        verdicts
            .iter()
            .any(|v| v.contains("critical") && v.contains("[loopguard]")),
        "the message the agent got is shown: {verdicts:?}"
    );

    let chart = scraper::Selector::parse("#chart").unwrap_or_else(|e| panic!("{e}"));
    let chart = document
        .select(&chart)
        .next()
        .unwrap_or_else(|| panic!("no #chart\n{dom}"));
    let total: u64 = chart
        .value()
        .attr("data-total")
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    assert!(total >= 1, "the chart counts the verdicts: {total}");
    assert!(select("#chart canvas").len() == 1, "uPlot drew its canvas\n{dom}");
    let legend = select("#chart .u-legend .u-series").join(" | ");
    let logged = lg.log_events("verdict");
    let detector = logged
        .last()
        .and_then(|v| v["detector"].as_str())
        .unwrap_or_else(|| panic!("no verdict logged"))
        .to_owned();
    assert!(
        legend.contains(&detector),
        "the legend names {detector}: {legend}"
    );
    let polls: u32 = scraper::Selector::parse("body")
        .ok()
        .and_then(|s| document.select(&s).next())
        .and_then(|b| b.value().attr("data-polls"))
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    assert!(
        polls >= 2,
        "the page polls again after loading (live updates): {polls}"
    );

    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/ui-artifacts");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let shot = dir.join("live-page.png");
    let _ = std::fs::remove_file(&shot);
    tokio::task::spawn_blocking({
        let shot = shot.clone();
        move || headless(&browser, &url, &[format!("--screenshot={}", shot.display())])
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(size > 10_000, "a screenshot was written ({size} bytes)");
    say(&format!("screenshot of the live page: {}", shot.display()));
}
