//! Streaming behaviour: events are flushed as they arrive (never batched),
//! and compression never gets in the way of reading the stream.

mod common;

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use common::{client, mock_requests, pair, post};
use futures_util::StreamExt;
use serde_json::Value;
use sha2::Digest;

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// With the upstream sending an event every 50 ms, the client receives each
/// event before the upstream sends the next one — even though the client
/// asked for gzip. (Text passes at once; tool-call events are held until
/// their batch is complete, by design, so this uses text answers.)
#[tokio::test(flavor = "multi_thread")]
async fn each_event_reaches_the_client_before_the_next_is_sent() {
    let script = r#"{"turns":[{"text":"one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty twenty-one"}]}"#;
    for path in [
        "/v1/chat/completions",
        "/v1beta/models/g:streamGenerateContent?alt=sse",
    ] {
        let (mock, lg) = pair("");
        let id = "pacing";
        let response = post(
            format!("{}{path}", lg.url()),
            &[
                ("accept-encoding", "gzip"),
                ("x-mock-script", script),
                ("x-mock-pace-ms", "50"),
                ("x-mock-id", id),
            ],
            r#"{"stream":true,"messages":[]}"#,
        )
        .await;
        let fixture = path;
        assert!(
            response.headers().get("content-encoding").is_none(),
            "{fixture}: compressed"
        );
        assert_eq!(
            response.headers().get("x-accel-buffering").map(|v| v.as_bytes()),
            Some(&b"no"[..])
        );
        let mut events = response.bytes_stream().map(|r| r.map_err(std::io::Error::other));
        // Arrival time of each complete event, found by its blank-line terminator.
        let mut arrivals = Vec::new();
        let mut pending = Vec::new();
        while let Some(chunk) = events.next().await {
            let chunk = chunk.unwrap_or_else(|e| panic!("{e}"));
            let at = now_us();
            pending.extend_from_slice(&chunk);
            let text = String::from_utf8_lossy(&pending).replace("\r\n", "\n");
            let complete = text.matches("\n\n").count();
            while arrivals.len() < complete {
                arrivals.push(at);
            }
        }
        let log: Value = common::get_json(format!("{}/_mock/log/{id}", mock.url())).await;
        let sent: Vec<u64> = log["sent_at_us"]
            .as_array()
            .unwrap_or_else(|| panic!("no send log: {log}"))
            .iter()
            .filter_map(Value::as_u64)
            .collect();
        assert_eq!(arrivals.len(), sent.len(), "{fixture}: event count");
        assert!(sent.len() > 5, "{fixture}: too few events to say anything");
        // The role-only opening chunk of OpenAI waits with the held response
        // headers for the first answer text (DESIGN §2); from then on
        // nothing waits.
        for k in 1..sent.len() - 1 {
            assert!(
                arrivals[k] < sent[k + 1],
                "{fixture}: event {k} arrived at {} but event {} was already sent at {}",
                arrivals[k],
                k + 1,
                sent[k + 1]
            );
        }
    }
}

/// An upstream that would gzip when allowed never gets the chance on dialect
/// paths: loopguard asks for `identity`.
#[tokio::test(flavor = "multi_thread")]
async fn upstream_never_compresses_dialect_paths() {
    let (mock, lg) = pair("");
    for (path, body) in [
        ("/v1/chat/completions", r#"{"stream":true,"messages":[]}"#),
        ("/v1beta/models/g:streamGenerateContent?alt=sse", "{}"),
        ("/v1beta/models/g:generateContent", "{}"),
    ] {
        let response = post(
            format!("{}{path}", lg.url()),
            &[("accept-encoding", "gzip, zstd"), ("x-mock-fault", "gzip")],
            body,
        )
        .await;
        assert!(response.headers().get("content-encoding").is_none(), "{path}");
        let text = response.text().await.unwrap_or_else(|e| panic!("{e}"));
        assert!(text.contains("list_directory"), "{path}: {text}");
    }
    for r in mock_requests(&mock).await {
        assert_eq!(r["headers"]["accept-encoding"], "identity", "{r}");
    }
    // On other paths the client's own choice stands, and the bytes pass as sent.
    let response = client()
        .get(format!("{}/v1/models", lg.url()))
        .header("accept-encoding", "gzip")
        .header("x-mock-fault", "gzip")
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        response.headers().get("content-encoding").map(|v| v.as_bytes()),
        Some(&b"gzip"[..])
    );
}

/// Request bodies sent gzip- or zstd-encoded are decoded for parsing and
/// forwarded byte-identical, with their `Content-Encoding`.
#[tokio::test(flavor = "multi_thread")]
async fn compressed_request_bodies_are_parsed_and_forwarded_identical() {
    let (mock, lg) = pair("");
    let plain = br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"list the files"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"list_directory","arguments":"{\"path\":\".\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"a.txt"}]}"#;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(plain).unwrap_or_else(|e| panic!("{e}"));
    let gz = gz.finish().unwrap_or_else(|e| panic!("{e}"));
    let zs = zstd::encode_all(&plain[..], 3).unwrap_or_else(|e| panic!("{e}"));
    for (encoding, body) in [("gzip", gz), ("zstd", zs)] {
        let response = post(
            format!("{}/v1/chat/completions", lg.url()),
            &[
                ("content-encoding", encoding),
                ("content-type", "application/json"),
            ],
            body.clone(),
        )
        .await;
        assert_eq!(response.status(), 200, "{encoding}");
        let _ = response.bytes().await;
        let recorded = mock_requests(&mock).await;
        let last = recorded.last().unwrap_or_else(|| panic!("nothing recorded"));
        let sha: String = sha2::Sha256::digest(&body)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            last["body_sha256"],
            sha.as_str(),
            "{encoding}: body changed on the way"
        );
        assert_eq!(last["headers"]["content-encoding"], encoding);
    }
    // loopguard parsed both: the request log reports the 3 messages each time.
    let lines = lg.wait_log_events("request", 2);
    for line in &lines {
        assert_eq!(line["request_messages"], 3, "{line}");
    }
}

/// While a tool call is held after the headers went out (text came first),
/// loopguard writes SSE comment lines every `keepalive_secs`, between events,
/// so a client's idle timeout does not trip; the call itself arrives intact.
#[tokio::test(flavor = "multi_thread")]
async fn held_tool_calls_are_kept_alive_with_comment_lines() {
    let (_mock, lg) = pair("keepalive_secs = 1");
    let script = r#"{"turns":[{"text":"Checking the files.","tool_calls":[{"name":"list_directory","arguments":{"path":"."}}]}]}"#;
    let response = post(
        format!("{}/v1/chat/completions", lg.url()),
        &[("x-mock-script", script), ("x-mock-pace-ms", "1300")],
        r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
    )
    .await;
    let text = response.text().await.unwrap_or_else(|e| panic!("{e}"));
    let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
    let keepalives = events.iter().filter(|e| e.starts_with(':')).count();
    assert!(keepalives >= 2, "{keepalives} keep-alive lines in:\n{text}");
    assert!(
        events
            .iter()
            .all(|e| e.starts_with(':') || e.starts_with("data: ")),
        "{text}"
    );
    assert!(text.contains("list_directory") && text.trim_end().ends_with("data: [DONE]"));
}

/// Held tool-call bytes past `max_held_bytes` are released unjudged: the
/// stream stays byte-exact and the fail-open is counted.
#[tokio::test(flavor = "multi_thread")]
async fn held_bytes_past_the_cap_are_released_unjudged() {
    let (_mock, lg) = pair("max_held_bytes = 200");
    let fixture = "openai-chat/gpt4o-parallel-tool-calls.sse";
    let response = post(
        format!("{}/v1/chat/completions", lg.url()),
        &[("x-mock-fixture", fixture)],
        r#"{"model":"m","stream":true,"messages":[]}"#,
    )
    .await;
    let body = response.bytes().await.unwrap_or_else(|e| panic!("{e}"));
    let expected = std::fs::read(common::fixtures_dir().join(fixture)).unwrap_or_else(|e| panic!("{e}"));
    assert!(body.to_vec() == expected, "bytes changed");
    let text = common::metrics(&lg).await;
    assert_eq!(
        common::metric_value(&text, "loopguard_fail_open_total{reason=\"held_bytes_cap\"}"),
        1.0,
        "{text}"
    );
}

/// A response that opens with a held tool call and is slow: once
/// `header_hold_ms` sent the headers, keep-alive lines flow too (the driver
/// notices the handler stopped waiting).
#[tokio::test(flavor = "multi_thread")]
async fn keepalive_starts_when_the_header_hold_runs_out() {
    let (_mock, lg) = pair("keepalive_secs = 1\nheader_hold_ms = 300");
    let script = r#"{"turns":[{"tool_calls":[{"name":"list_directory","arguments":{"path":"."}}]}]}"#;
    let response = post(
        format!("{}/v1/chat/completions", lg.url()),
        &[("x-mock-script", script), ("x-mock-pace-ms", "1300")],
        r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
    )
    .await;
    let text = response.text().await.unwrap_or_else(|e| panic!("{e}"));
    let keepalives = text.split("\n\n").filter(|e| e.starts_with(':')).count();
    assert!(keepalives >= 2, "{keepalives} keep-alive lines in:\n{text}");
    assert!(text.contains("list_directory") && text.trim_end().ends_with("data: [DONE]"));
}
