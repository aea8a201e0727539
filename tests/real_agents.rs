//! Real agent CLIs from npm, driven headless through loopguard in front of
//! the mock upstream: Gemini CLI (`gemini` dialect), OpenCode
//! (`openai-chat`), Codex (`openai-responses`) and Claude Code
//! (`anthropic`); Claude Code and Gemini CLI also on Vertex AI
//! (`CLAUDE_WIRE=vertex`, `GEMINI_WIRE=vertex` in their run scripts, through
//! the `/vertex-claude` and `/vertex` routes) and Claude Code on Bedrock
//! (`CLAUDE_WIRE=bedrock`, the `/bedrock` route). `make agents` installs the pinned versions
//! (`tests/agents/package.json`); `tests/agents/{gemini,opencode,codex,claude}.sh`
//! hold each agent's headless setup (throw-away HOME, fake key, telemetry
//! and updates off) and can be run by hand.
//!
//! The mock always answers the same tool call (`tests/agents/*/script.json`)
//! with a text turn after 30 turns; side calls (Gemini CLI's model router,
//! OpenCode's title) get JSON or short text. Each agent runs twice: with
//! detection off, to record what it does on its own, and with loopguard's
//! defaults (warn at 3, block at 5 identical calls with identical results).

mod common;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::Proc;
use serde_json::Value;

/// Longest an agent run may take.
const TIMEOUT: Duration = Duration::from_secs(120);

/// Loop detection off: loopguard forwards and observes nothing.
const DETECTION_OFF: &str = "\n[loop_detection]\nenabled = false\n";

fn agents_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/agents")
}

/// Fails (never skips) when the CLI is not installed.
fn require_cli(name: &str) {
    let bin = agents_dir().join("node_modules/.bin").join(name);
    assert!(
        bin.exists(),
        "{name} is not installed at {}: run `make agents` (installs the pinned agent CLIs from tests/agents/package.json)",
        bin.display()
    );
}

/// A mock with the agent's script and loopguard in front of it.
fn setup(agent: &str, detection: bool) -> (Proc, Proc) {
    setup_with(agent, if detection { "" } else { DETECTION_OFF })
}

/// [`setup`] with `extra` TOML after the routes.
fn setup_with(agent: &str, extra: &str) -> (Proc, Proc) {
    let script = agents_dir().join(agent).join("script.json");
    let mock = common::mock_with_args(&["--script", &script.to_string_lossy()]);
    let mut config = common::config_for(&mock.url(), "");
    // Gemini and Claude on Vertex AI (config/vertex.toml), Claude on Bedrock
    // (config/bedrock.toml).
    config.push_str(&format!(
        "\n[[routes]]\nprefix = \"/vertex\"\nprovider = \"gemini\"\nupstream = \"{url}\"\nstrip_prefix = true\n\
         \n[[routes]]\nprefix = \"/vertex-claude\"\nprovider = \"anthropic\"\nupstream = \"{url}\"\nstrip_prefix = true\n\
         \n[[routes]]\nprefix = \"/bedrock\"\nprovider = \"bedrock\"\nupstream = \"{url}\"\nstrip_prefix = true\n",
        url = mock.url()
    ));
    config.push_str(extra);
    let lg = common::loopguard(&config);
    (mock, lg)
}

/// What an agent run left behind.
struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

impl Run {
    fn describe(&self) -> String {
        format!(
            "exit {:?} after {:.1?}\n--- stdout\n{}\n--- stderr\n{}",
            self.status.code(),
            self.elapsed,
            self.stdout,
            tail(&self.stderr, 4000)
        )
    }
}

fn tail(text: &str, max: usize) -> &str {
    let start = text.len().saturating_sub(max);
    let start = (start..text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    &text[start..]
}

/// Runs `tests/agents/{script}` against `base_url` in its own process group,
/// killing the whole group after [`TIMEOUT`].
fn run_agent(script: &str, base_url: &str) -> Run {
    run_agent_with(script, base_url, &[])
}

/// [`run_agent`] with extra environment for the run script (e.g.
/// `CLAUDE_WIRE=vertex`).
fn run_agent_with(script: &str, base_url: &str, env: &[(&str, &str)]) -> Run {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let work = std::env::temp_dir().join(format!(
        "loopguard-agent-{}-{}-{}",
        script.trim_end_matches(".sh"),
        std::process::id(),
        RUNS.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap_or_else(|e| panic!("cannot create {}: {e}", work.display()));
    let out_path = work.join("stdout");
    let err_path = work.join("stderr");
    let file =
        |p: &Path| std::fs::File::create(p).unwrap_or_else(|e| panic!("cannot create {}: {e}", p.display()));
    let started = Instant::now();
    let mut child = Command::new(agents_dir().join(script))
        .arg(base_url)
        .env("AGENT_WORKDIR", &work)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(file(&out_path))
        .stderr(file(&err_path))
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {script}: {e}"));
    let status = loop {
        if let Some(status) = child.try_wait().unwrap_or_else(|e| panic!("wait failed: {e}")) {
            break status;
        }
        if started.elapsed() > TIMEOUT {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            panic!(
                "{script} did not finish within {TIMEOUT:?}\n--- stdout\n{}\n--- stderr\n{}",
                std::fs::read_to_string(&out_path).unwrap_or_default(),
                tail(&std::fs::read_to_string(&err_path).unwrap_or_default(), 4000)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // Whatever the agent left running in its group goes with it.
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", child.id())])
        .stderr(Stdio::null())
        .status();
    let run = Run {
        status,
        stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err_path).unwrap_or_default(),
        elapsed: started.elapsed(),
    };
    let _ = std::fs::remove_dir_all(&work);
    eprintln!("{script} against {base_url}: {}", run.describe());
    run
}

/// The mock's recorded requests with their bodies parsed.
fn recorded(mock: &Proc) -> Vec<(String, Value)> {
    let runtime = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("runtime: {e}"));
    runtime
        .block_on(common::mock_requests(mock))
        .into_iter()
        .map(|r| {
            let path = r["path"].as_str().unwrap_or_default().to_owned();
            let body = serde_json::from_str(r["body"].as_str().unwrap_or_default()).unwrap_or(Value::Null);
            (path, body)
        })
        .collect()
}

fn declares_tools(body: &Value) -> bool {
    body["tools"].as_array().is_some_and(|t| !t.is_empty())
}

/// The bodies of requests that declared tools (the agent loop itself, not side calls).
fn loop_requests(requests: &[(String, Value)]) -> Vec<&Value> {
    requests
        .iter()
        .filter(|(_, body)| declares_tools(body))
        .map(|(_, body)| body)
        .collect()
}

/// Gemini CLI's stream-json events.
fn gemini_events(run: &Run) -> Vec<Value> {
    run.stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect()
}

/// The assistant text Gemini CLI printed.
fn gemini_text(events: &[Value]) -> String {
    events
        .iter()
        .filter(|e| e["type"] == "message" && e["role"] == "assistant")
        .filter_map(|e| e["content"].as_str())
        .collect()
}

fn count_type(events: &[Value], kind: &str) -> usize {
    events.iter().filter(|e| e["type"] == kind).count()
}

/// Function responses in the last loop request's history (calls executed).
fn gemini_calls_executed(requests: &[&Value]) -> usize {
    requests.last().map_or(0, |body| {
        body["contents"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|c| c["parts"].as_array().into_iter().flatten())
            .filter(|p| p.get("functionResponse").is_some())
            .count()
    })
}

/// The loop requests of a run stopped at the 5th identical call: 5 of them
/// (no turn after the block), warned from the one carrying the 3rd result
/// (`warning` is the text the warning leaves in a request body), and the
/// block logged.
fn assert_stopped_at_fifth(lg: &Proc, loop_reqs: &[&Value], warning: &str) {
    assert_eq!(loop_reqs.len(), 5, "the run ends with the blocked fifth turn");
    let warned: Vec<bool> = loop_reqs
        .iter()
        .map(|b| b.to_string().contains(warning))
        .collect();
    assert_eq!(warned, [false, false, false, true, true]);
    lg.wait_for_log("\"action\":\"block\"");
}

#[test]
fn gemini_cli_on_its_own_stops_at_its_fifth_identical_call() {
    require_cli("gemini");
    let (mock, lg) = setup("gemini", false);
    let run = run_agent("gemini.sh", &lg.url());
    assert!(run.status.success(), "{}", run.describe());
    let events = gemini_events(&run);
    // Calls 1-4 run; Gemini CLI's guard withholds the fifth, sends a recovery
    // prompt, and stops when the model repeats the call once more.
    assert_eq!(count_type(&events, "tool_use"), 4, "{}", run.describe());
    assert_eq!(count_type(&events, "tool_result"), 4, "{}", run.describe());
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "error" && e["message"] == "Loop detected, stopping execution"),
        "{}",
        run.describe()
    );
    assert!(!run.stdout.contains("[loopguard]"), "{}", run.describe());
    let requests = recorded(&mock);
    let loop_reqs = loop_requests(&requests);
    assert_eq!(loop_reqs.len(), 6, "five turns and the recovery turn");
    assert_eq!(gemini_calls_executed(&loop_reqs), 4);
    let last = loop_reqs.last().map(|b| b.to_string()).unwrap_or_default();
    assert!(last.contains("Potential loop detected"), "{last}");
    // The model router's JSON side call got a JSON answer, not a tool call.
    assert!(
        requests
            .iter()
            .any(|(path, body)| path.ends_with(":generateContent")
                && body.pointer("/generationConfig/responseJsonSchema").is_some()),
        "no router request: {requests:?}"
    );
    assert!(
        !run.stderr.contains("NumericalClassifierStrategy failed"),
        "{}",
        run.describe()
    );
}

#[test]
fn gemini_cli_is_stopped_by_loopguard_before_its_own_guard() {
    gemini_cli_is_stopped_before_its_own_guard("", &[]);
}

/// Gemini CLI on Vertex AI (auth type `vertex-ai`, express-mode key,
/// `GOOGLE_VERTEX_BASE_URL` at the `/vertex` route): it calls
/// `/v1beta1/publishers/google/models/{m}:streamGenerateContent`, and is
/// stopped as on the Gemini API.
#[test]
fn gemini_cli_on_vertex_is_stopped_by_loopguard_before_its_own_guard() {
    gemini_cli_is_stopped_before_its_own_guard("/vertex", &[("GEMINI_WIRE", "vertex")]);
}

/// Gemini CLI pointed at `route` (after loopguard's URL) with `env` runs 4
/// calls, then ends with loopguard's explanation, warned at the 3rd and 4th.
fn gemini_cli_is_stopped_before_its_own_guard(route: &str, env: &[(&str, &str)]) {
    require_cli("gemini");
    let (mock, lg) = setup("gemini", true);
    let run = run_agent_with("gemini.sh", &format!("{}{route}", lg.url()), env);
    assert!(run.status.success(), "{}", run.describe());
    let events = gemini_events(&run);
    assert_eq!(count_type(&events, "tool_use"), 4, "{}", run.describe());
    assert_eq!(count_type(&events, "tool_result"), 4, "{}", run.describe());
    let text = gemini_text(&events);
    assert!(
        text.contains("[loopguard] identical_call (critical, count 5): `list_directory`"),
        "{}",
        run.describe()
    );
    // Gemini CLI's own guard never saw a fifth call.
    assert_eq!(count_type(&events, "error"), 0, "{}", run.describe());
    assert!(!run.stdout.contains("Loop detected"), "{}", run.describe());
    let requests = recorded(&mock);
    if !route.is_empty() {
        assert!(
            requests
                .iter()
                .all(|(path, _)| path.starts_with("/v1beta1/publishers/google/models/")),
            "Vertex paths: {requests:?}"
        );
    }
    let loop_reqs = loop_requests(&requests);
    assert_eq!(gemini_calls_executed(&loop_reqs), 4);
    // Warned at the third and fourth call, inside the function response; no recovery turn.
    assert_stopped_at_fifth(&lg, &loop_reqs, "loopguard_warning");
}

/// Reads OpenCode reported on stderr (`→ Read notes.txt`).
fn opencode_reads(run: &Run) -> usize {
    run.stderr
        .lines()
        .filter(|l| l.contains("Read notes.txt"))
        .count()
}

/// Tool results in the last loop request's history (calls executed).
fn openai_calls_executed(requests: &[&Value]) -> usize {
    requests.last().map_or(0, |body| {
        body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["role"] == "tool")
            .count()
    })
}

/// OpenCode's title request (no tools) got the short text answer.
fn assert_title_request(requests: &[(String, Value)]) {
    assert!(
        requests
            .iter()
            .any(|(path, body)| path.ends_with("/chat/completions") && !declares_tools(body)),
        "no title request: {requests:?}"
    );
}

#[test]
fn opencode_on_its_own_runs_all_thirty_identical_calls() {
    require_cli("opencode");
    let (mock, lg) = setup("opencode", false);
    let run = run_agent("opencode.sh", &format!("{}/v1", lg.url()));
    assert!(run.status.success(), "{}", run.describe());
    assert_eq!(opencode_reads(&run), 30, "{}", run.describe());
    assert!(
        run.stdout.trim_end().ends_with("Done looping."),
        "{}",
        run.describe()
    );
    assert!(!run.stdout.contains("[loopguard]"), "{}", run.describe());
    let requests = recorded(&mock);
    let loop_reqs = loop_requests(&requests);
    assert_eq!(loop_reqs.len(), 31, "30 tool turns and the final text turn");
    assert_eq!(openai_calls_executed(&loop_reqs), 30);
    assert_title_request(&requests);
}

#[test]
fn opencode_is_stopped_by_loopguard_at_the_fifth_identical_call() {
    require_cli("opencode");
    let (mock, lg) = setup("opencode", true);
    let run = run_agent("opencode.sh", &format!("{}/v1", lg.url()));
    assert!(run.status.success(), "{}", run.describe());
    assert_eq!(opencode_reads(&run), 4, "{}", run.describe());
    assert!(
        run.stdout.contains(
            "[loopguard] identical_call (critical, count 5): `read` with {\"filePath\":\"notes.txt\"}"
        ),
        "{}",
        run.describe()
    );
    assert!(!run.stdout.contains("Done looping."), "{}", run.describe());
    let requests = recorded(&mock);
    let loop_reqs = loop_requests(&requests);
    assert_eq!(openai_calls_executed(&loop_reqs), 4);
    assert_title_request(&requests);
    assert_stopped_at_fifth(&lg, &loop_reqs, "[loopguard] identical_call (warning");
}

/// Codex's `--json` events.
fn json_lines(run: &Run) -> Vec<Value> {
    run.stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect()
}

/// The agent messages Codex printed (`item.completed` of type `agent_message`).
fn codex_messages(run: &Run) -> Vec<String> {
    json_lines(run)
        .iter()
        .filter(|e| e["type"] == "item.completed" && e["item"]["type"] == "agent_message")
        .filter_map(|e| e["item"]["text"].as_str().map(str::to_owned))
        .collect()
}

/// Call outputs in the last Responses loop request (calls executed).
fn responses_calls_executed(requests: &[&Value]) -> usize {
    requests.last().map_or(0, |body| {
        body["input"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|i| i["type"] == "function_call_output")
            .count()
    })
}

/// Claude Code's final `result` event.
fn claude_result(run: &Run) -> Value {
    json_lines(run)
        .into_iter()
        .rev()
        .find(|e| e["type"] == "result")
        .unwrap_or(Value::Null)
}

/// `tool_result` blocks in the last Messages loop request (calls executed).
fn anthropic_calls_executed(requests: &[&Value]) -> usize {
    requests.last().map_or(0, |body| {
        body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["content"].as_array())
            .flatten()
            .filter(|b| b["type"] == "tool_result")
            .count()
    })
}

/// A headless agent whose run ends with one final message (Codex, Claude Code).
struct Agent {
    /// Its CLI in `tests/agents/node_modules/.bin`.
    cli: &'static str,
    /// Its directory under `tests/agents` (script.json) and run script.
    name: &'static str,
    script: &'static str,
    /// The route it is pointed at, after loopguard's URL.
    route: &'static str,
    /// Extra environment for its run script.
    env: &'static [(&'static str, &'static str)],
    /// What every path it calls ends with.
    path: &'static str,
    /// Other paths it calls (control-plane look-ups), proxied unjudged.
    side_paths: &'static [&'static str],
    /// The run's final message (`None` when it reported an error).
    final_message: fn(&Run) -> Option<String>,
    /// Calls executed, from the loop requests.
    executed: fn(&[&Value]) -> usize,
}

const CODEX: Agent = Agent {
    cli: "codex",
    name: "codex",
    script: "codex.sh",
    route: "/v1",
    env: &[],
    path: "/responses",
    side_paths: &[],
    final_message: |run| codex_messages(run).pop(),
    executed: responses_calls_executed,
};

const CLAUDE_CODE: Agent = Agent {
    cli: "claude",
    name: "claude",
    script: "claude.sh",
    route: "/anthropic",
    env: &[],
    path: "/v1/messages",
    side_paths: &[],
    final_message: claude_final_message,
    executed: anthropic_calls_executed,
};

/// Claude Code on Claude on Vertex AI (`CLAUDE_CODE_USE_VERTEX=1`, Google
/// auth skipped), through the `/vertex-claude` route.
const CLAUDE_CODE_VERTEX: Agent = Agent {
    cli: "claude",
    name: "claude",
    script: "claude.sh",
    route: "/vertex-claude/v1",
    env: &[("CLAUDE_WIRE", "vertex")],
    path: ":streamRawPredict",
    side_paths: &[],
    final_message: claude_final_message,
    executed: anthropic_calls_executed,
};

/// Claude Code on Amazon Bedrock (`CLAUDE_CODE_USE_BEDROCK=1`, AWS auth
/// skipped), through the `/bedrock` route: its turns are
/// `InvokeModelWithResponseStream` calls answered as AWS event streams.
const CLAUDE_CODE_BEDROCK: Agent = Agent {
    cli: "claude",
    name: "claude",
    script: "claude.sh",
    route: "/bedrock",
    env: &[("CLAUDE_WIRE", "bedrock")],
    path: "/invoke-with-response-stream",
    // Claude Code lists the region's inference profiles first.
    side_paths: &["/inference-profiles"],
    final_message: claude_final_message,
    executed: anthropic_calls_executed,
};

/// Claude Code's final result text, `None` when it reported an error.
fn claude_final_message(run: &Run) -> Option<String> {
    let result = claude_result(run);
    (result["is_error"] == false)
        .then(|| result["result"].as_str().map(str::to_owned))
        .flatten()
}

/// Without detection the agent runs all 30 identical calls the mock asks
/// for, then prints the mock's final text.
fn runs_all_thirty_on_its_own(agent: &Agent) {
    require_cli(agent.cli);
    let (mock, lg) = setup(agent.name, false);
    let run = run_agent_with(agent.script, &format!("{}{}", lg.url(), agent.route), agent.env);
    assert!(run.status.success(), "{}", run.describe());
    assert_eq!(
        (agent.final_message)(&run).as_deref(),
        Some("Done looping."),
        "{}",
        run.describe()
    );
    assert!(!run.stdout.contains("[loopguard]"), "{}", run.describe());
    let requests = recorded(&mock);
    let loop_reqs = loop_requests(&requests);
    assert_eq!(loop_reqs.len(), 31, "30 tool turns and the final text turn");
    assert_eq!((agent.executed)(&loop_reqs), 30);
    assert!(
        requests
            .iter()
            .all(|(path, _)| path.ends_with(agent.path) || agent.side_paths.contains(&path.as_str())),
        "{requests:?}"
    );
}

/// Through loopguard the agent runs 4 calls and its run ends (exit 0) with
/// loopguard's explanation, which starts with `explanation`.
fn is_stopped_at_the_fifth(agent: &Agent, explanation: &str) {
    require_cli(agent.cli);
    let (mock, lg) = setup(agent.name, true);
    let run = run_agent_with(agent.script, &format!("{}{}", lg.url(), agent.route), agent.env);
    assert!(run.status.success(), "{}", run.describe());
    let message = (agent.final_message)(&run).unwrap_or_default();
    assert!(message.starts_with(explanation), "{}", run.describe());
    assert!(!run.stdout.contains("Done looping."), "{}", run.describe());
    let requests = recorded(&mock);
    let loop_reqs = loop_requests(&requests);
    assert_eq!((agent.executed)(&loop_reqs), 4);
    assert_stopped_at_fifth(&lg, &loop_reqs, "[loopguard] identical_call (warning");
}

#[test]
fn codex_on_its_own_runs_all_thirty_identical_calls() {
    runs_all_thirty_on_its_own(&CODEX);
}

#[test]
fn codex_is_stopped_by_loopguard_at_the_fifth_identical_call() {
    is_stopped_at_the_fifth(
        &CODEX,
        "[loopguard] identical_call (critical, count 5): `exec_command` with {\"cmd\":\"cat hello.txt\"}",
    );
}

#[test]
fn claude_code_on_its_own_runs_all_thirty_identical_calls() {
    runs_all_thirty_on_its_own(&CLAUDE_CODE);
}

#[test]
fn claude_code_is_stopped_by_loopguard_at_the_fifth_identical_call() {
    is_stopped_at_the_fifth(
        &CLAUDE_CODE,
        "[loopguard] identical_call (critical, count 5): `Bash` with ",
    );
}

#[test]
fn claude_code_on_vertex_on_its_own_runs_all_thirty_identical_calls() {
    runs_all_thirty_on_its_own(&CLAUDE_CODE_VERTEX);
}

#[test]
fn claude_code_on_vertex_is_stopped_by_loopguard_at_the_fifth_identical_call() {
    is_stopped_at_the_fifth(
        &CLAUDE_CODE_VERTEX,
        "[loopguard] identical_call (critical, count 5): `Bash` with ",
    );
}

#[test]
fn claude_code_on_bedrock_on_its_own_runs_all_thirty_identical_calls() {
    runs_all_thirty_on_its_own(&CLAUDE_CODE_BEDROCK);
}

/// On Bedrock no warning reaches the model (a signed body is never
/// rewritten): the fifth identical call is blocked all the same, and the
/// requests reach the upstream as Claude Code sent them.
#[test]
fn claude_code_on_bedrock_is_stopped_by_loopguard_at_the_fifth_identical_call() {
    claude_code_on_bedrock_is_stopped_at_the_fifth("bedrock");
}

/// With a Bedrock API key (`AWS_BEARER_TOKEN_BEDROCK`) every request
/// carries its bearer token to the upstream untouched, and the loop is
/// stopped the same way.
#[test]
fn claude_code_on_bedrock_with_an_api_key_passes_its_token_and_is_stopped() {
    let mock = claude_code_on_bedrock_is_stopped_at_the_fifth("bedrock-key");
    let runtime = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("runtime: {e}"));
    let requests = runtime.block_on(common::mock_requests(&mock));
    assert!(!requests.is_empty());
    assert!(
        requests
            .iter()
            .all(|r| r["headers"]["authorization"] == "Bearer ABSK-fake-key-for-loopguard-tests"),
        "{requests:?}"
    );
}

/// Claude Code on Bedrock (`CLAUDE_WIRE=wire`) runs 4 calls and ends with
/// loopguard's explanation; returns the mock for more checks.
fn claude_code_on_bedrock_is_stopped_at_the_fifth(wire: &str) -> Proc {
    require_cli("claude");
    let (mock, lg) = setup("claude", true);
    let run = run_agent_with(
        "claude.sh",
        &format!("{}/bedrock", lg.url()),
        &[("CLAUDE_WIRE", wire)],
    );
    assert!(run.status.success(), "{}", run.describe());
    let message = claude_final_message(&run).unwrap_or_default();
    assert!(
        message.starts_with("[loopguard] identical_call (critical, count 5): `Bash` with "),
        "{}",
        run.describe()
    );
    let requests = recorded(&mock);
    let loop_reqs = loop_requests(&requests);
    assert_eq!(loop_reqs.len(), 5, "the run ends with the blocked fifth turn");
    assert_eq!(anthropic_calls_executed(&loop_reqs), 4);
    assert!(
        loop_reqs.iter().all(|b| !b.to_string().contains("[loopguard]")),
        "no warning injected into a signed body"
    );
    lg.wait_for_log("\"action\":\"block\"");
    mock
}

/// With `critical = "abort"` (the CI setting), Claude Code on Bedrock stops
/// at the fifth identical call on loopguard's HTTP 400 `{"message"}` and
/// exits non-zero, showing the message; it does not retry.
#[test]
fn claude_code_on_bedrock_exits_non_zero_on_an_abort() {
    require_cli("claude");
    let (mock, lg) = setup_with("claude", "\n[loop_detection.actions]\ncritical = \"abort\"\n");
    let run = run_agent_with(
        "claude.sh",
        &format!("{}/bedrock", lg.url()),
        CLAUDE_CODE_BEDROCK.env,
    );
    assert!(!run.status.success(), "{}", run.describe());
    let result = claude_result(&run);
    assert_eq!(result["is_error"], true, "{}", run.describe());
    assert!(
        result["result"]
            .as_str()
            .is_some_and(|r| r.contains("loop_detected: [loopguard] identical_call (critical, count 5)")),
        "{}",
        run.describe()
    );
    let requests = recorded(&mock);
    assert_eq!(loop_requests(&requests).len(), 5, "no retry after the abort");
}
