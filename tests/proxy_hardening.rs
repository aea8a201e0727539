//! Proxy hardening (#13): exact path handling, loopguard's own headers kept
//! from the upstream, timeouts that mean what they say, bounded memory, and
//! honest request logs — each through the binary, against the mock or a
//! misbehaving upstream of the test's own (raw TCP).

mod common;

use std::time::Duration;

use common::{config_for, loopguard, mock, mock_requests, pair, post};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends `head` (request line and headers, without the blank line) and
/// `body` over a fresh connection with `connection: close`; returns the raw answer.
async fn raw_request(addr: std::net::SocketAddr, head: &str, body: &str) -> String {
    let mut tcp = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let request = format!(
        "{head}\r\nhost: x\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(request.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut raw)).await;
    String::from_utf8_lossy(&raw).into_owned()
}

const GEMINI_BODY: &str = r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#;

/// #13.5: `%2e%2e`, `.%2e`, `\..\` and `%5c` spellings of a dot segment are
/// refused before routing (the URL library would have resolved them and sent
/// `/secret` upstream, outside the route's base path); nothing reaches the upstream.
#[tokio::test(flavor = "multi_thread")]
async fn encoded_dot_segments_are_refused_before_routing() {
    let (mock, lg) = pair("");
    for path in [
        "/anthropic/%2e%2e/secret",
        "/anthropic/.%2e/secret",
        "/anthropic/%2E%2E/secret",
        "/anthropic/%5c..%5csecret",
        "/v1/chat/completions/%2e",
        "/v1/chat%2fcompletions",
    ] {
        let text = raw_request(lg.addr, &format!("POST {path} HTTP/1.1"), "{}").await;
        assert!(text.starts_with("HTTP/1.1 400"), "{path}: {text}");
        assert!(text.contains("loopguard_unsafe_path"), "{path}: {text}");
    }
    // A raw backslash: refused by loopguard or by the HTTP parser, never forwarded.
    let text = raw_request(lg.addr, "POST /anthropic/\\..\\secret HTTP/1.1", "{}").await;
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert!(mock_requests(&mock).await.is_empty());
}

/// #13.6: the path the upstream acts on decides the dialect: an encoded
/// `:` in a Gemini method is decoded, judged as Gemini and forwarded decoded;
/// a legitimate escape (`%20`) and dots inside a name are left alone.
#[tokio::test(flavor = "multi_thread")]
async fn encoded_method_paths_are_judged_as_the_upstream_reads_them() {
    let (mock, lg) = pair("");
    let response = post(
        format!("{}/v1beta/models/g%3AgenerateContent", lg.url()),
        &[],
        GEMINI_BODY,
    )
    .await;
    assert_eq!(response.status(), 200);
    let _ = response.bytes().await;
    let events = lg.wait_log_events("request", 1);
    assert_eq!(events[0]["dialect"], "gemini", "{}", events[0]);
    let _ = post(format!("{}/v1/files/a%20b..c", lg.url()), &[], "{}").await;
    let recorded = mock_requests(&mock).await;
    assert_eq!(recorded[0]["path"], "/v1beta/models/g:generateContent");
    assert_eq!(recorded[1]["path"], "/v1/files/a%20b..c");
}

/// #13.7: `Expect: 100-continue`, loopguard's own `x-loopguard-*` headers and
/// the bypass header stay at loopguard; an agent's own session header goes
/// on upstream even when `sessions.header` names it.
#[tokio::test(flavor = "multi_thread")]
async fn loopguards_own_headers_and_expect_are_not_forwarded() {
    let mock = mock();
    let config = format!(
        "{}\n[sessions]\nheader = \"session_id\"\n",
        config_for(&mock.url(), "bypass_header = \"x-skip-guard\"")
    );
    let lg = loopguard(&config);
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    let mut tcp = tokio::net::TcpStream::connect(lg.addr)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\n\
         expect: 100-continue\r\nsession_id: agent-session-1\r\nx-loopguard-session: own\r\n\
         x-loopguard-debug: 1\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut interim = [0u8; 25];
    tokio::time::timeout(Duration::from_secs(5), tcp.read_exact(&mut interim))
        .await
        .unwrap_or_else(|e| panic!("no 100 Continue: {e}"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        String::from_utf8_lossy(&interim).starts_with("HTTP/1.1 100 Continue"),
        "{}",
        String::from_utf8_lossy(&interim)
    );
    tcp.write_all(body.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut raw)).await;
    assert!(String::from_utf8_lossy(&raw).contains(" 200 OK"));
    let _ = post(
        format!("{}/v1/chat/completions", lg.url()),
        &[("x-skip-guard", "1")],
        body,
    )
    .await;
    let recorded = mock_requests(&mock).await;
    assert_eq!(recorded.len(), 2);
    let headers = &recorded[0]["headers"];
    for gone in ["expect", "x-loopguard-session", "x-loopguard-debug"] {
        assert!(headers.get(gone).is_none(), "{gone} forwarded: {headers}");
    }
    assert_eq!(headers["session_id"], "agent-session-1", "{headers}");
    assert!(
        recorded[1]["headers"].get("x-skip-guard").is_none(),
        "{}",
        recorded[1]
    );
}

/// An upstream URL with credentials (`http://user:pw@host:port`): they go
/// to the upstream as `Authorization: Basic`, as reqwest sends them, while
/// the host and port are the URL's; the agent's own `Authorization` wins.
#[tokio::test(flavor = "multi_thread")]
async fn credentials_in_the_upstream_url_are_sent_as_basic_authorization() {
    let mock = mock();
    let with_credentials = mock.url().replacen("http://", "http://user:pw@", 1);
    let lg = loopguard(&config_for(&with_credentials, ""));
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    let url = format!("{}/v1/chat/completions", lg.url());
    let first = post(url.clone(), &[], body).await;
    assert_eq!(first.status(), 200);
    let second = post(url, &[("authorization", "Bearer agent-key")], body).await;
    assert_eq!(second.status(), 200);
    let recorded = mock_requests(&mock).await;
    assert_eq!(recorded.len(), 2, "{recorded:?}");
    // base64("user:pw")
    assert_eq!(
        recorded[0]["headers"]["authorization"], "Basic dXNlcjpwdw==",
        "{}",
        recorded[0]
    );
    assert_eq!(
        recorded[1]["headers"]["authorization"], "Bearer agent-key",
        "{}",
        recorded[1]
    );
}

/// A misbehaving upstream of the test's own: accepts one connection, reads
/// the request (head and `content-length` body), then writes every chunk the
/// test sends on the channel, as it comes; dropping the sender closes the
/// connection. Returns its base URL.
async fn scripted_upstream() -> (String, tokio::sync::mpsc::UnboundedSender<Vec<u8>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    loopguard::task::spawn(async move {
        let Ok((mut tcp, _)) = listener.accept().await else {
            return;
        };
        read_request(&mut tcp).await;
        while let Some(chunk) = rx.recv().await {
            if tcp.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = tcp.shutdown().await;
    });
    (format!("http://{addr}"), tx)
}

/// Reads one request's head and its `content-length` body.
async fn read_request(tcp: &mut tokio::net::TcpStream) {
    let mut buf = Vec::new();
    let mut byte = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        match tcp.read(&mut byte).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&byte[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        match tcp.read(&mut byte).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&byte[..n]),
        }
    }
}

const SSE_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";

fn chat_chunk(delta: &str, finish: &str) -> Vec<u8> {
    format!(
        "data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
    )
    .into_bytes()
}

fn text_chunk(text: &str) -> Vec<u8> {
    chat_chunk(&format!("{{\"content\":\"{text}\"}}"), "null")
}

fn call_start() -> Vec<u8> {
    chat_chunk(
        r#"{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"list_directory","arguments":""}}]}"#,
        "null",
    )
}

fn call_args(part: &str) -> Vec<u8> {
    chat_chunk(
        &format!(r#"{{"tool_calls":[{{"index":0,"function":{{"arguments":"{part}"}}}}]}}"#),
        "null",
    )
}

const STREAM_REQUEST: &str = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

async fn open_stream(lg: &common::Proc) -> reqwest::Response {
    post(format!("{}/v1/chat/completions", lg.url()), &[], STREAM_REQUEST).await
}

/// #13.8: while a tool call is held after text went out, loopguard's own
/// keep-alives do not reset the idle clock: a stalled upstream is cut after
/// `idle_timeout_secs` of its own silence.
#[tokio::test(flavor = "multi_thread")]
async fn idle_timeout_is_the_upstreams_silence_not_loopguards_keepalives() {
    let (url, tx) = scripted_upstream().await;
    let lg = loopguard(&config_for(
        &url,
        "idle_timeout_secs = 2\nkeepalive_secs = 1\nheader_hold_ms = 100",
    ));
    let _ = tx.send(SSE_HEAD.to_vec());
    let _ = tx.send(text_chunk("looking"));
    let _ = tx.send(call_start());
    let started = std::time::Instant::now();
    let response = open_stream(&lg).await;
    let (body, end) = tokio::time::timeout(Duration::from_secs(10), common::read_body(response))
        .await
        .unwrap_or_else(|_| panic!("the stalled stream was still open after 10 s"));
    let elapsed = started.elapsed();
    let text = String::from_utf8_lossy(&body);
    assert!(end.is_err(), "the stream must break off, not end cleanly: {text}");
    assert!(
        text.contains(": loopguard: holding"),
        "keep-alives were written: {text}"
    );
    assert!(elapsed < Duration::from_secs(5), "cut after {elapsed:?}");
    let events = lg.wait_log_events("request", 1);
    assert_eq!(events[0]["outcome"], "upstream_idle_timeout", "{}", events[0]);
    drop(tx);
}

/// #13.8, its twin: an upstream that keeps sending (held call arguments,
/// every 2 s) is not cut as idle when `idle_timeout_secs` (3) is shorter
/// than `keepalive_secs` (5); check-config notes that combination.
#[tokio::test(flavor = "multi_thread")]
async fn an_active_upstream_is_never_cut_as_idle_when_idle_is_shorter_than_the_keepalive() {
    let (url, tx) = scripted_upstream().await;
    let config = config_for(
        &url,
        "idle_timeout_secs = 3\nkeepalive_secs = 5\nheader_hold_ms = 100",
    );
    let lg = loopguard(&config);
    let path = std::env::temp_dir().join(format!("lg-idle-{}.toml", std::process::id()));
    std::fs::write(&path, &config).unwrap_or_else(|e| panic!("{e}"));
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .arg("check-config")
        .arg(&path)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let said = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{said}");
    assert!(said.contains("notice: server.keepalive_secs"), "{said}");

    let _ = tx.send(SSE_HEAD.to_vec());
    let _ = tx.send(text_chunk("looking"));
    let _ = tx.send(call_start());
    let feeder = loopguard::task::spawn(async move {
        for part in ["{\\\"pa", "th\\\":", "\\\".\\\"", "}"] {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let _ = tx.send(call_args(part));
        }
        let _ = tx.send(chat_chunk("{}", "\"tool_calls\""));
        let _ = tx.send(b"data: [DONE]\n\n".to_vec());
    });
    let response = open_stream(&lg).await;
    let (body, end) = common::read_body(response).await;
    let _ = feeder.await;
    let text = String::from_utf8_lossy(&body);
    assert_eq!(end, Ok(()), "{text}");
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
}

/// Reads from the response until `needle` has arrived (at most `within`).
async fn read_until(
    response: &mut reqwest::Response,
    seen: &mut Vec<u8>,
    needle: &str,
    within: Duration,
) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if String::from_utf8_lossy(seen).matches(needle).count() > 0 {
            return true;
        }
        match tokio::time::timeout_at(deadline, response.chunk()).await {
            Ok(Ok(Some(chunk))) => seen.extend_from_slice(&chunk),
            _ => return false,
        }
    }
}

/// #13.9: the upstream's SSE comment keep-alives reach the client as they
/// arrive (each within a second, while the upstream stays open); while a
/// tool call is held they wait with it, and the body is still byte-exact.
#[tokio::test(flavor = "multi_thread")]
async fn upstream_sse_comments_go_out_as_they_arrive_unless_a_call_is_held() {
    let (url, tx) = scripted_upstream().await;
    let lg = loopguard(&config_for(&url, "header_hold_ms = 100"));
    let mut sent = Vec::new();
    let mut send = |bytes: Vec<u8>| {
        sent.extend_from_slice(&bytes);
        let _ = tx.send(bytes);
    };
    send(SSE_HEAD.to_vec());
    send(text_chunk("hello"));
    let mut response = open_stream(&lg).await;
    let mut seen = Vec::new();
    for i in 0..5 {
        let ping = format!(": ping {i}\n\n");
        send(ping.clone().into_bytes());
        assert!(
            read_until(&mut response, &mut seen, &ping, Duration::from_secs(1)).await,
            "ping {i} did not arrive within 1 s: {}",
            String::from_utf8_lossy(&seen)
        );
    }
    send(call_start());
    send(b": held ping\n\n".to_vec());
    assert!(
        !read_until(
            &mut response,
            &mut seen,
            ": held ping",
            Duration::from_millis(700)
        )
        .await,
        "a comment after a held call went out before the call was judged"
    );
    send(call_args("{}"));
    send(chat_chunk("{}", "\"tool_calls\""));
    send(b"data: [DONE]\n\n".to_vec());
    drop(tx);
    let (rest, end) = common::read_body(response).await;
    seen.extend_from_slice(&rest);
    assert_eq!(end, Ok(()));
    let head_len = SSE_HEAD.len();
    assert_eq!(
        String::from_utf8_lossy(&seen),
        String::from_utf8_lossy(&sent[head_len..])
    );
}

/// #13.16: an upstream error passed through with a `Content-Length` (every
/// real 429) is logged `complete`, not `client_disconnected`, even when the
/// upstream keeps the connection open after it.
#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_error_with_content_length_is_logged_complete() {
    let (url, tx) = scripted_upstream().await;
    let lg = loopguard(&config_for(&url, ""));
    let body = r#"{"error":{"message":"rate limited","type":"rate_limit_error"}}"#;
    let _ = tx.send(
        format!(
            "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    );
    let response = open_stream(&lg).await;
    assert_eq!(response.status(), 429);
    let (got, end) = common::read_body(response).await;
    assert_eq!(end, Ok(()));
    assert_eq!(String::from_utf8_lossy(&got), body);
    let events = lg.wait_log_events("request", 1);
    assert_eq!(events[0]["outcome"], "complete", "{}", events[0]);
    assert_eq!(events[0]["status"], 429);
    drop(tx);
}

/// #13.16: loopguard's own answers (404 without a route, 502 for an
/// unreachable upstream, 400 for an unsafe path) each write a `request` event.
#[tokio::test(flavor = "multi_thread")]
async fn loopguards_own_answers_write_a_request_event() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"));
    let lg = loopguard(&config_for(&format!("http://127.0.0.1:{port}"), ""));
    let r = post(format!("{}/nowhere", lg.url()), &[], "{}").await;
    assert_eq!(r.status(), 404);
    let r = open_stream(&lg).await;
    assert_eq!(r.status(), 502);
    let text = raw_request(lg.addr, "POST /v1/%2e%2e/x HTTP/1.1", "{}").await;
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    let events = lg.wait_log_events("request", 3);
    let seen: Vec<(u64, &str, &str)> = events
        .iter()
        .map(|e| {
            (
                e["status"].as_u64().unwrap_or(0),
                e["route"].as_str().unwrap_or(""),
                e["outcome"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (404, "-", "answered_by_loopguard"),
            (502, "/v1", "answered_by_loopguard"),
            (400, "-", "answered_by_loopguard"),
        ]
    );
}

/// #13.16: a request forwarded with a warning injected shows the warning in
/// its `request` event's `verdict`; verdicts are counted by where they were
/// given (`at`).
#[tokio::test(flavor = "multi_thread")]
async fn a_warned_request_shows_its_verdict_in_the_request_event() {
    let (mock, lg) = pair("");
    let mut messages = vec![serde_json::json!({"role": "user", "content": "list the files"})];
    let tools = serde_json::json!([{"type": "function", "function": {"name": "list_directory", "parameters": {"type": "object"}}}]);
    let mut warned = None;
    for i in 0..8 {
        let body = serde_json::json!({"model": "m", "stream": true, "messages": messages, "tools": tools});
        let r = post(
            format!("{}/v1/chat/completions", lg.url()),
            &[("x-loopguard-session", "warned")],
            body.to_string(),
        )
        .await;
        let _ = r.text().await;
        let recorded = mock_requests(&mock).await;
        if recorded
            .last()
            .is_some_and(|r| r["body"].as_str().unwrap_or("").contains("[loopguard]"))
        {
            warned = Some(recorded.len());
            break;
        }
        messages.push(serde_json::json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("c{i}"), "type": "function", "function": {"name": "list_directory", "arguments": "{\"path\":\".\"}"}}]}));
        messages
            .push(serde_json::json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": "a.txt"}));
    }
    let n = warned.unwrap_or_else(|| panic!("no request was forwarded with a warning"));
    let events = lg.wait_log_events("request", n);
    let verdict = events[n - 1]["verdict"].as_str().unwrap_or("");
    assert!(verdict.starts_with("warn; detector="), "{}", events[n - 1]);
    let text = common::metrics(&lg).await;
    assert!(
        text.contains("loopguard_verdicts_total{") && text.contains("at=\"request\""),
        "{text}"
    );
}

/// Connects and sends `bytes`; returns the open connection.
async fn connect_and_send(addr: std::net::SocketAddr, bytes: &[u8]) -> tokio::net::TcpStream {
    let mut tcp = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    tcp.write_all(bytes).await.unwrap_or_else(|e| panic!("{e}"));
    tcp
}

/// Reads what the server sends until it closes (at most `within`); `None`
/// when it was still open then.
async fn read_to_close(tcp: &mut tokio::net::TcpStream, within: Duration) -> Option<String> {
    let mut raw = Vec::new();
    match tokio::time::timeout(within, tcp.read_to_end(&mut raw)).await {
        Ok(_) => Some(String::from_utf8_lossy(&raw).into_owned()),
        Err(_) => None,
    }
}

/// #13.4: a declared `Content-Length` over `max_request_bytes` gets 413 at
/// once, before any of the body is sent (it used to wait for the body).
#[tokio::test(flavor = "multi_thread")]
async fn a_declared_length_over_the_limit_gets_413_before_the_body() {
    let (mock, lg) = pair("max_request_bytes = 1024");
    let mut tcp = connect_and_send(
        lg.addr,
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100000000\r\n\r\n{",
    )
    .await;
    let text = read_to_close(&mut tcp, Duration::from_secs(3))
        .await
        .unwrap_or_else(|| panic!("no answer within 3 s"));
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(mock_requests(&mock).await.is_empty());
}

/// #13.4: request bodies held at once are capped by
/// `max_request_bytes_in_flight`, counted as they arrive. Two uploads that
/// declare 1 MB and stall after 900 KB hold 1.8 MB of the 2 MiB; one that
/// declares 1 MB and sends nothing holds nothing, and a small request is
/// still served beside them; a third that sends its 900 KB gets 503 with
/// `Retry-After` once it passes the cap, as does a chunked one. When the
/// stalled clients go, their share comes back.
#[tokio::test(flavor = "multi_thread")]
async fn request_bodies_in_flight_are_capped_and_the_share_comes_back() {
    let (mock, lg) = pair("max_request_bytes = 1048576\nmax_request_bytes_in_flight = 2097152");
    let head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 1000000\r\n\r\n";
    let stalled = [head.as_slice(), b"{", &[b' '; 900_000]].concat();
    let first = connect_and_send(lg.addr, &stalled).await;
    let second = connect_and_send(lg.addr, &stalled).await;
    let _declared_only = connect_and_send(lg.addr, head).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let url = format!("{}/v1/chat/completions", lg.url());
    let small = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    let r = post(url.clone(), &[], small.to_owned()).await;
    assert_eq!(r.status(), 200, "a small request beside the stalled uploads");

    let mut third = tokio::net::TcpStream::connect(lg.addr)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // The server may answer and close before all of it is written.
    let _ = third.write_all(&stalled).await;
    let text = read_to_close(&mut third, Duration::from_secs(3))
        .await
        .unwrap_or_else(|| panic!("a third upload past the cap got no answer within 3 s"));
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    let lower = text.to_ascii_lowercase();
    assert!(
        lower.contains("retry-after: 1") && lower.contains("connection: close"),
        "{text}"
    );
    assert!(text.contains("max_request_bytes_in_flight"), "{text}");

    let mut chunked = connect_and_send(
        lg.addr,
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n",
    )
    .await;
    let chunk = format!("{:x}\r\n{}\r\n", 50_000, " ".repeat(50_000));
    for _ in 0..8 {
        // The server may answer and close before the last chunks.
        if chunked.write_all(chunk.as_bytes()).await.is_err() {
            break;
        }
    }
    let text = read_to_close(&mut chunked, Duration::from_secs(3))
        .await
        .unwrap_or_else(|| panic!("a chunked upload past the cap got no answer within 3 s"));
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");

    drop((first, second));
    let mut status = 0;
    for _ in 0..30 {
        status = post(
            url.clone(),
            &[],
            stalled[head.len()..]
                .iter()
                .map(|b| char::from(*b))
                .collect::<String>()
                + "}",
        )
        .await
        .status()
        .as_u16();
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, 200, "the stalled uploads' share did not come back");
    assert_eq!(mock_requests(&mock).await.len(), 2);
}

/// A client that goes away in the middle of its body is logged as
/// `client_disconnected`, not as an answer of loopguard's own.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_gone_mid_body_is_logged_as_disconnected() {
    let (_mock, lg) = pair("");
    let tcp = connect_and_send(
        lg.addr,
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100000\r\n\r\n{\"mo",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(tcp);
    let events = lg.wait_log_events("request", 1);
    assert_eq!(events[0]["outcome"], "client_disconnected", "{}", events[0]);
}

/// #13.4: a client sending its body at a trickle gets 408 after
/// `client_body_timeout_secs`; one that never finishes its headers is
/// disconnected after `client_header_timeout_secs`.
#[tokio::test(flavor = "multi_thread")]
async fn slow_clients_are_timed_out_reading_headers_and_body() {
    let (mock, lg) = pair("client_body_timeout_secs = 1\nclient_header_timeout_secs = 1");
    let mut body = connect_and_send(
        lg.addr,
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"mo",
    )
    .await;
    let mut head = connect_and_send(lg.addr, b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n").await;
    let text = read_to_close(&mut body, Duration::from_secs(4))
        .await
        .unwrap_or_else(|| panic!("a trickling body was still being read after 4 s"));
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("client_body_timeout_secs"), "{text}");
    assert!(
        read_to_close(&mut head, Duration::from_secs(4)).await.is_some(),
        "a client that never finished its headers was still connected after 4 s"
    );
    assert!(mock_requests(&mock).await.is_empty());
}

/// #13.4: past `max_connections`, a new connection waits in the backlog
/// until one closes, then it is served.
#[tokio::test(flavor = "multi_thread")]
async fn connections_past_the_cap_wait_until_one_closes() {
    let (_mock, lg) = pair("max_connections = 2");
    let first = connect_and_send(lg.addr, b"").await;
    let _second = connect_and_send(lg.addr, b"").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut third = connect_and_send(
        lg.addr,
        b"GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(
        read_to_close(&mut third, Duration::from_millis(800))
            .await
            .is_none(),
        "the third connection was served while two were open"
    );
    drop(first);
    let text = read_to_close(&mut third, Duration::from_secs(3))
        .await
        .unwrap_or_else(|| panic!("the third connection was not served after one closed"));
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let logs = lg.logs();
    assert!(logs.contains("connection cap reached"), "{logs}");
}

/// #13.4: the soft file-descriptor limit is raised to the hard one at start
/// (logged), and the proxy listens with the configured backlog (as far as
/// the kernel's `somaxconn` allows; the default was 128).
#[tokio::test(flavor = "multi_thread")]
async fn the_fd_limit_is_raised_and_the_backlog_is_the_configured_one() {
    let (_mock, lg) = pair("");
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let hard: u64 = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(4))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no fd limit in {limits}"));
    let events = lg.wait_log_events("file-descriptor limit", 1);
    assert_eq!(events[0]["fd_limit"].as_u64(), Some(hard), "{}", events[0]);
    let somaxconn: u32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(4096);
    let ss = std::process::Command::new("ss")
        .args(["-ltnH", &format!("sport = :{}", lg.addr.port())])
        .output()
        .unwrap_or_else(|e| panic!("ss: {e}"));
    let line = String::from_utf8_lossy(&ss.stdout).into_owned();
    let backlog: u32 = line
        .split_whitespace()
        .nth(2)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no listen socket in {line:?}"));
    assert_eq!(backlog, somaxconn.min(4096), "{line}");
}

/// Reads from the response until at least `n` bytes arrived (at most `within`).
async fn read_at_least(
    response: &mut reqwest::Response,
    seen: &mut Vec<u8>,
    n: usize,
    within: Duration,
) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while seen.len() < n {
        match tokio::time::timeout_at(deadline, response.chunk()).await {
            Ok(Ok(Some(chunk))) => seen.extend_from_slice(&chunk),
            _ => return false,
        }
    }
    true
}

const MIB: usize = 1024 * 1024;

/// Sends a big body in 64 KiB pieces.
fn send_big(tx: &tokio::sync::mpsc::UnboundedSender<Vec<u8>>, total: usize) {
    for _ in 0..total / (64 * 1024) {
        let _ = tx.send(vec![b'x'; 64 * 1024]);
    }
}

/// #13.2: an SSE event that grows past `max_response_bytes` without its
/// blank line is passed through as it arrives (not kept whole), unjudged
/// and counted; the stream still ends cleanly.
#[tokio::test(flavor = "multi_thread")]
async fn an_sse_event_past_the_cap_passes_through_unbuffered() {
    let (url, tx) = scripted_upstream().await;
    let lg = loopguard(&config_for(
        &url,
        "max_response_bytes = 1048576\nheader_hold_ms = 100",
    ));
    let _ = tx.send(SSE_HEAD.to_vec());
    let _ = tx.send(text_chunk("hello"));
    let _ = tx.send(b"data: {\"junk\":\"".to_vec());
    send_big(&tx, 3 * MIB);
    let mut response = open_stream(&lg).await;
    let mut seen = Vec::new();
    assert!(
        read_at_least(&mut response, &mut seen, 2 * MIB, Duration::from_secs(5)).await,
        "only {} bytes arrived while the event was unterminated",
        seen.len()
    );
    let _ = tx.send(b"\"}\n\n".to_vec());
    let _ = tx.send(b"data: [DONE]\n\n".to_vec());
    drop(tx);
    let (rest, end) = common::read_body(response).await;
    assert_eq!(end, Ok(()));
    assert!(rest.ends_with(b"data: [DONE]\n\n"));
    let _ = lg.wait_log_events("request", 1);
    let text = common::metrics(&lg).await;
    assert_eq!(
        common::metric_value(
            &text,
            "loopguard_fail_open_total{reason=\"response_frame_too_large\"}"
        ),
        1.0,
        "{text}"
    );
}

/// #13.2: a non-streaming answer over `max_response_bytes` streams through
/// as it arrives instead of being collected whole, byte-exact, counted.
#[tokio::test(flavor = "multi_thread")]
async fn a_whole_answer_past_the_cap_streams_through_unbuffered() {
    let (url, tx) = scripted_upstream().await;
    let lg = loopguard(&config_for(&url, "max_response_bytes = 1048576"));
    let total = 3 * MIB + 2;
    let _ = tx.send(
        format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {total}\r\n\r\n\"")
            .into_bytes(),
    );
    send_big(&tx, 2 * MIB);
    let mut response = post(
        format!("{}/v1/chat/completions", lg.url()),
        &[],
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
    )
    .await;
    let mut seen = Vec::new();
    assert!(
        read_at_least(&mut response, &mut seen, 3 * MIB / 2, Duration::from_secs(5)).await,
        "only {} bytes arrived before the answer was complete",
        seen.len()
    );
    send_big(&tx, MIB);
    let _ = tx.send(b"\"".to_vec());
    let (rest, end) = common::read_body(response).await;
    seen.extend_from_slice(&rest);
    assert_eq!(end, Ok(()));
    assert_eq!(seen.len(), total);
    let events = lg.wait_log_events("request", 1);
    assert_eq!(events[0]["outcome"], "complete", "{}", events[0]);
    let text = common::metrics(&lg).await;
    assert_eq!(
        common::metric_value(&text, "loopguard_fail_open_total{reason=\"response_too_large\"}"),
        1.0,
        "{text}"
    );
    drop(tx);
}

/// #13.2: one Gemini array element past `max_response_bytes` passes through
/// as it arrives, unjudged; the array still ends cleanly.
#[tokio::test(flavor = "multi_thread")]
async fn a_gemini_array_element_past_the_cap_passes_through_unbuffered() {
    let (url, tx) = scripted_upstream().await;
    let lg = loopguard(&config_for(
        &url,
        "max_response_bytes = 1048576\nheader_hold_ms = 100",
    ));
    let _ = tx.send(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n[{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\""
            .to_vec(),
    );
    send_big(&tx, 3 * MIB);
    let mut response = post(
        format!("{}/v1beta/models/g:streamGenerateContent", lg.url()),
        &[],
        GEMINI_BODY,
    )
    .await;
    let mut seen = Vec::new();
    assert!(
        read_at_least(&mut response, &mut seen, 2 * MIB, Duration::from_secs(5)).await,
        "only {} bytes arrived while the element was incomplete",
        seen.len()
    );
    let _ = tx.send(b"\"}]},\"finishReason\":\"STOP\"}]}]".to_vec());
    drop(tx);
    let (rest, end) = common::read_body(response).await;
    assert_eq!(end, Ok(()));
    assert!(rest.ends_with(b"}]}]"));
}

/// #13.2: past the held cap (a tool call was held, then more than
/// `max_held_bytes` followed), a Gemini array element that grows past
/// `max_response_bytes` is no longer kept by the splitter: the tap gives up
/// (`response_frame_too_large`) instead of buffering the element whole
/// while the bytes pass through; every byte reaches the client unchanged.
#[tokio::test(flavor = "multi_thread")]
async fn a_gemini_array_element_past_the_held_cap_is_not_buffered_by_the_splitter() {
    let (url, tx) = scripted_upstream().await;
    let lg = loopguard(&config_for(
        &url,
        "max_response_bytes = 1048576\nmax_held_bytes = 65536\nheader_hold_ms = 100",
    ));
    let mut sent = b"[{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"name\":\"ls\",\"args\":{\"path\":\".\"}}}]}}]},\n{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"".to_vec();
    let _ =
        tx.send(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n".to_vec());
    let _ = tx.send(sent.clone());
    send_big(&tx, 3 * MIB);
    sent.extend(std::iter::repeat_n(b'x', 3 * MIB));
    let mut response = post(
        format!("{}/v1beta/models/g:streamGenerateContent", lg.url()),
        &[],
        GEMINI_BODY,
    )
    .await;
    let mut seen = Vec::new();
    assert!(
        read_at_least(&mut response, &mut seen, 2 * MIB, Duration::from_secs(5)).await,
        "only {} bytes arrived while the element was incomplete",
        seen.len()
    );
    let tail = b"\"}]},\"finishReason\":\"STOP\"}]}]";
    let _ = tx.send(tail.to_vec());
    sent.extend_from_slice(tail);
    drop(tx);
    let (rest, end) = common::read_body(response).await;
    seen.extend_from_slice(&rest);
    assert_eq!(end, Ok(()));
    assert!(seen == sent, "{} bytes received, {} sent", seen.len(), sent.len());
    let _ = lg.wait_log_events("request", 1);
    let text = common::metrics(&lg).await;
    assert_eq!(
        common::metric_value(&text, "loopguard_fail_open_total{reason=\"held_bytes_cap\"}"),
        1.0,
        "{text}"
    );
    assert_eq!(
        common::metric_value(
            &text,
            "loopguard_fail_open_total{reason=\"response_frame_too_large\"}"
        ),
        1.0,
        "{text}"
    );
}

/// An upstream that answers every connection with the same bytes, then closes.
async fn canned_upstream(answer: Vec<u8>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    loopguard::task::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let answer = answer.clone();
            loopguard::task::spawn(async move {
                read_request(&mut tcp).await;
                let _ = tcp.write_all(&answer).await;
                let _ = tcp.shutdown().await;
            });
        }
    });
    format!("http://{addr}")
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let _ = encoder.write_all(bytes);
    encoder.finish().unwrap_or_default()
}

/// #13.10: an upstream that gzips its event stream although loopguard asked
/// for identity: the bytes reach the client unchanged (never aborted as
/// truncated, never held), a decoded side copy is judged (its repeated call
/// gets a stream-time verdict, which acts on the next request), counted as
/// `response_encoded`.
#[tokio::test(flavor = "multi_thread")]
async fn a_gzip_stream_is_forwarded_unchanged_and_judged_on_a_side_copy() {
    encoded_stream_is_forwarded_unchanged_and_judged("gzip", gzip).await;
}

/// #13.10: the same for a zstd-encoded event stream.
#[tokio::test(flavor = "multi_thread")]
async fn a_zstd_stream_is_forwarded_unchanged_and_judged_on_a_side_copy() {
    encoded_stream_is_forwarded_unchanged_and_judged("zstd", |bytes| {
        zstd::encode_all(bytes, 3).unwrap_or_else(|e| panic!("{e}"))
    })
    .await;
}

/// #13.10 with bounded cost: a gzip stream whose side copy decodes far past
/// `max_response_bytes` (here 64 KiB of gzip become 8 MiB of text events,
/// cap 1 MiB) reaches the client unchanged and whole, while its side copy
/// stops decoding at the cap (`response_too_large`, once) instead of
/// decoding and parsing all of it. The twin within the cap is the test above
/// (`response_too_large` stays 0 there).
#[tokio::test(flavor = "multi_thread")]
async fn a_gzip_stream_decoding_past_the_cap_stops_its_side_copy() {
    let line = text_chunk(&"x".repeat(1000));
    let mut events = Vec::with_capacity(8 << 20);
    while events.len() < 8 << 20 {
        events.extend_from_slice(&line);
    }
    events.extend_from_slice(b"data: [DONE]\n\n");
    let encoded = gzip(&events);
    assert!(encoded.len() < events.len() / 50, "{}", encoded.len());
    let mut answer =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\nconnection: close\r\n\r\n"
            .to_vec();
    answer.extend_from_slice(&encoded);
    let url = canned_upstream(answer).await;
    let lg = loopguard(&config_for(&url, "max_response_bytes = 1048576"));
    let body =
        serde_json::json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "go"}]});
    let r = post(format!("{}/v1/chat/completions", lg.url()), &[], body.to_string()).await;
    let (got, end) = common::read_body(r).await;
    assert_eq!(end, Ok(()));
    assert!(
        got == encoded,
        "the encoded bytes changed ({} of {})",
        got.len(),
        encoded.len()
    );
    let text = common::metrics(&lg).await;
    assert_eq!(
        common::metric_value(&text, "loopguard_fail_open_total{reason=\"response_too_large\"}"),
        1.0,
        "{text}"
    );
}

/// An event stream encoded as `coding` by `encode`: the encoded bytes reach
/// the client unchanged, the repeated call gets a stream-time verdict from
/// the decoded side copy, and `response_encoded` is counted.
async fn encoded_stream_is_forwarded_unchanged_and_judged(coding: &str, encode: fn(&[u8]) -> Vec<u8>) {
    let mut events = text_chunk("listing");
    events.extend(chat_chunk(
        r#"{"tool_calls":[{"index":0,"id":"call_9","type":"function","function":{"name":"list_directory","arguments":"{\"path\":\".\"}"}}]}"#,
        "null",
    ));
    events.extend(chat_chunk("{}", "\"tool_calls\""));
    events.extend_from_slice(b"data: [DONE]\n\n");
    let encoded = encode(&events);
    let mut answer = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: {coding}\r\nconnection: close\r\n\r\n"
    )
    .into_bytes();
    answer.extend_from_slice(&encoded);
    let url = canned_upstream(answer).await;
    let lg = loopguard(&config_for(&url, ""));
    let mut messages = vec![serde_json::json!({"role": "user", "content": "list the files"})];
    let tools = serde_json::json!([{"type": "function", "function": {"name": "list_directory", "parameters": {"type": "object"}}}]);
    let mut stream_verdict = false;
    for i in 0..6 {
        let body = serde_json::json!({"model": "m", "stream": true, "messages": messages, "tools": tools});
        let r = post(
            format!("{}/v1/chat/completions", lg.url()),
            &[("x-loopguard-session", coding)],
            body.to_string(),
        )
        .await;
        if common::verdict_header(&r).is_some() {
            // Answered at request time by loopguard: the verdict acted on this request.
            break;
        }
        let (got, end) = common::read_body(r).await;
        assert_eq!(end, Ok(()), "request {i}");
        assert_eq!(got, encoded, "request {i}: the encoded bytes changed");
        if lg.log_events("verdict").iter().any(|v| v["at"] == "stream") {
            stream_verdict = true;
            break;
        }
        messages.push(serde_json::json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("c{i}"), "type": "function", "function": {"name": "list_directory", "arguments": "{\"path\":\".\"}"}}]}));
        messages
            .push(serde_json::json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": "a.txt"}));
    }
    assert!(stream_verdict, "the side copy was never judged: {}", lg.logs());
    let text = common::metrics(&lg).await;
    assert!(
        common::metric_value(&text, "loopguard_fail_open_total{reason=\"response_encoded\"}") >= 1.0,
        "{text}"
    );
    assert_eq!(
        common::metric_value(&text, "loopguard_fail_open_total{reason=\"response_too_large\"}"),
        0.0,
        "{text}"
    );
}

/// #13.11: a streamed tool call whose small deltas take more than
/// `max_held_bytes` is still judged from its assembled arguments (the bytes
/// pass once the cap is reached; the verdict acts on the next request).
#[tokio::test(flavor = "multi_thread")]
async fn a_long_streamed_call_past_the_held_cap_is_still_judged() {
    let path = "a".repeat(8000);
    let mut events = call_start();
    events.extend(call_args("{\\\"path\\\":\\\""));
    for _ in 0..8000 {
        events.extend(call_args("a"));
    }
    events.extend(call_args("\\\"}"));
    events.extend(chat_chunk("{}", "\"tool_calls\""));
    events.extend_from_slice(b"data: [DONE]\n\n");
    assert!(events.len() > 1024 * 1024, "{}", events.len());
    let mut answer = SSE_HEAD.to_vec();
    answer.extend_from_slice(&events);
    let url = canned_upstream(answer).await;
    let lg = loopguard(&config_for(&url, ""));
    let args = serde_json::json!({"path": path}).to_string();
    let mut messages = vec![serde_json::json!({"role": "user", "content": "list the files"})];
    let tools = serde_json::json!([{"type": "function", "function": {"name": "list_directory", "parameters": {"type": "object"}}}]);
    let mut stream_verdict = false;
    for i in 0..6 {
        let body = serde_json::json!({"model": "m", "stream": true, "messages": messages, "tools": tools});
        let r = post(
            format!("{}/v1/chat/completions", lg.url()),
            &[("x-loopguard-session", "long-call")],
            body.to_string(),
        )
        .await;
        if common::verdict_header(&r).is_some() {
            break;
        }
        let (got, end) = common::read_body(r).await;
        assert_eq!(end, Ok(()), "request {i}");
        assert_eq!(got.len(), events.len(), "request {i}");
        if lg.log_events("verdict").iter().any(|v| v["at"] == "stream") {
            stream_verdict = true;
            break;
        }
        messages.push(serde_json::json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("c{i}"), "type": "function", "function": {"name": "list_directory", "arguments": args}}]}));
        messages
            .push(serde_json::json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": "a.txt"}));
    }
    assert!(stream_verdict, "the long call was never judged at stream time");
    let text = common::metrics(&lg).await;
    assert!(
        common::metric_value(&text, "loopguard_fail_open_total{reason=\"held_bytes_cap\"}") >= 1.0,
        "{text}"
    );
}
