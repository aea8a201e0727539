//! Bad input and faults: each has a defined answer that tells the user what
//! happened, and nothing the upstream sent is lost.

mod common;

use std::time::{Duration, Instant};

use common::{
    client, config_for, loopguard, metric_value, metrics, mock_requests, pair, post, read_body,
    wait_mock_stat,
};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CHAT: &str = "/v1/chat/completions";
const STREAM_BODY: &str = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

/// A body over `max_request_bytes` is refused with 413 and a JSON error, and
/// never reaches the upstream.
#[tokio::test(flavor = "multi_thread")]
async fn oversized_request_body_gets_413_and_never_reaches_upstream() {
    let (mock, lg) = pair("max_request_bytes = 1024");
    let body = format!(
        r#"{{"messages":[{{"role":"user","content":"{}"}}]}}"#,
        "x".repeat(4096)
    );
    let response = post(format!("{}{CHAT}", lg.url()), &[], body).await;
    assert_eq!(response.status(), 413);
    let json: Value = response.json().await.unwrap_or_else(|e| panic!("{e}"));
    let message = json["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("max_request_bytes"), "{json}");
    assert_eq!(json["error"]["code"], "loopguard_body_too_large");
    assert!(mock_requests(&mock).await.is_empty());
}

/// A body that is not JSON goes upstream unchanged, without detection, and
/// is counted as a fail-open.
#[tokio::test(flavor = "multi_thread")]
async fn invalid_json_is_forwarded_unchanged_and_counted_as_fail_open() {
    let (mock, lg) = pair("");
    let body = "{\"messages\": [ this is not json";
    let response = post(format!("{}{CHAT}", lg.url()), &[], body).await;
    assert_eq!(response.status(), 200);
    let recorded = mock_requests(&mock).await;
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0]["body"], body);
    let text = metrics(&lg).await;
    assert_eq!(
        metric_value(&text, "loopguard_fail_open_total{reason=\"request_unparsable\"}"),
        1.0,
        "{text}"
    );
}

/// An unreachable upstream is a 502 in the route's provider error shape.
#[tokio::test(flavor = "multi_thread")]
async fn unreachable_upstream_gets_502_in_the_dialect_error_shape() {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"));
    let lg = loopguard(&config_for(&format!("http://127.0.0.1:{port}"), ""));
    let response = post(format!("{}{CHAT}", lg.url()), &[], STREAM_BODY).await;
    assert_eq!(response.status(), 502);
    let json: Value = response.json().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(json["error"]["code"], "loopguard_upstream_unreachable", "{json}");
    assert!(
        json["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("unreachable")
    );

    let response = post(format!("{}/v1beta/models/g:generateContent", lg.url()), &[], "{}").await;
    assert_eq!(response.status(), 502);
    let json: Value = response.json().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(json["error"]["code"], 502, "{json}");
    assert_eq!(json["error"]["status"], "UNAVAILABLE", "{json}");
}

/// No response headers within `first_byte_timeout_secs` is a 504.
#[tokio::test(flavor = "multi_thread")]
async fn slow_first_byte_gets_504() {
    let (_mock, lg) = pair("first_byte_timeout_secs = 1");
    let started = Instant::now();
    let response = client()
        .post(format!(
            "{}/v1beta/models/g:streamGenerateContent?alt=sse",
            lg.url()
        ))
        .header("x-mock-fault", "delay-headers-ms:4000")
        .body("{}")
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(response.status(), 504);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    let json: Value = response.json().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(json["error"]["status"], "DEADLINE_EXCEEDED", "{json}");
}

/// An upstream that goes silent mid-stream longer than `idle_timeout_secs`:
/// the client gets what was sent, then a broken body, never a clean end.
#[tokio::test(flavor = "multi_thread")]
async fn idle_upstream_mid_stream_breaks_the_client_stream() {
    let (_mock, lg) = pair("idle_timeout_secs = 1");
    let response = post(
        format!("{}{CHAT}", lg.url()),
        &[("x-mock-fault", "stall-after:2")],
        STREAM_BODY,
    )
    .await;
    assert_eq!(response.status(), 200);
    let started = Instant::now();
    let (body, end) = read_body(response).await;
    assert!(end.is_err(), "a stalled stream must not end cleanly");
    assert!(started.elapsed() < Duration::from_secs(4));
    assert_eq!(String::from_utf8_lossy(&body).matches("data: ").count(), 2);
    lg.wait_for_log("upstream_idle_timeout");
}

/// An upstream that dies mid-stream: everything it sent is forwarded, then
/// the client's response is aborted too.
#[tokio::test(flavor = "multi_thread")]
async fn upstream_dying_mid_stream_aborts_the_client_after_forwarding_everything() {
    let (mock, lg) = pair("");
    let fixture = "openai-chat/gpt4o-single-tool-call.sse";
    let response = post(
        format!("{}{CHAT}", lg.url()),
        &[("x-mock-fixture", fixture), ("x-mock-fault", "die-after:4")],
        STREAM_BODY,
    )
    .await;
    let (body, end) = read_body(response).await;
    assert!(end.is_err(), "truncation must not look like a clean end");
    let recording = std::fs::read(common::fixtures_dir().join(fixture)).unwrap_or_else(|e| panic!("{e}"));
    let four_events: usize = loopguard::tools::mock::fixture::sse_events(&recording)
        .iter()
        .take(4)
        .map(Vec::len)
        .sum();
    assert_eq!(body, recording[..four_events].to_vec());
    drop(mock);
}

/// An upstream that closes cleanly before its stream's finish (no finish
/// reason, no `[DONE]`): loopguard aborts the client's response rather than
/// hide the truncation behind a clean end.
#[tokio::test(flavor = "multi_thread")]
async fn clean_close_before_the_finish_is_reported_as_truncation() {
    let (_mock, lg) = pair("");
    let response = post(
        format!("{}{CHAT}", lg.url()),
        &[("x-mock-fault", "truncate-after:2")],
        STREAM_BODY,
    )
    .await;
    let (body, end) = read_body(response).await;
    assert!(end.is_err(), "got a clean end after {} bytes", body.len());
    lg.wait_for_log("upstream_truncated");
}

/// After a normal end the chunked body is terminated and the same client
/// connection serves the next request.
#[tokio::test(flavor = "multi_thread")]
async fn normal_end_terminates_the_body_and_the_connection_is_reused() {
    let (_mock, lg) = pair("");
    let stream = tokio::net::TcpStream::connect(lg.addr)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    loopguard::task::spawn(conn);
    for i in 0..3 {
        let request = http::Request::post(CHAT)
            .header("host", "loopguard")
            .body(http_body_util::Full::new(bytes::Bytes::from_static(
                STREAM_BODY.as_bytes(),
            )))
            .unwrap_or_else(|e| panic!("{e}"));
        sender
            .ready()
            .await
            .unwrap_or_else(|e| panic!("request {i}: connection not reusable: {e}"));
        let response = sender
            .send_request(request)
            .await
            .unwrap_or_else(|e| panic!("request {i}: {e}"));
        assert_eq!(response.status(), 200);
        assert!(
            response.headers().get("content-length").is_none(),
            "expected a chunked body"
        );
        let body = http_body_util::BodyExt::collect(response.into_body())
            .await
            .unwrap_or_else(|e| panic!("request {i}: body not terminated: {e}"))
            .to_bytes();
        assert!(body.ends_with(b"data: [DONE]\n\n"), "request {i}");
    }
}

/// A client that disconnects while loopguard waits for the upstream's
/// headers makes loopguard drop the upstream request at once.
#[tokio::test(flavor = "multi_thread")]
async fn client_disconnect_before_headers_drops_the_upstream_request() {
    let (mock, lg) = pair("");
    for (path, body) in [(CHAT, STREAM_BODY), ("/v1beta/models/g:generateContent", "{}")] {
        let result = client()
            .post(format!("{}{path}", lg.url()))
            .header("x-mock-fault", "delay-headers-ms:5000")
            .timeout(Duration::from_millis(300))
            .body(body)
            .send()
            .await;
        assert!(result.is_err(), "expected the client timeout");
    }
    let started = Instant::now();
    wait_mock_stat(&mock, "handlers_cancelled", 2).await;
    assert!(started.elapsed() < Duration::from_secs(2));
}

/// A client that disconnects mid-stream makes loopguard close the upstream
/// connection (the mock sees its response dropped before the end).
#[tokio::test(flavor = "multi_thread")]
async fn client_disconnect_mid_stream_closes_the_upstream_connection() {
    let (mock, lg) = pair("");
    let mut response = post(
        format!("{}{CHAT}", lg.url()),
        &[
            ("x-mock-fixture", "openai-chat/gpt41nano-long-markdown.sse"),
            ("x-mock-pace-ms", "20"),
            ("x-mock-id", "disconnect"),
        ],
        STREAM_BODY,
    )
    .await;
    let _ = response.chunk().await;
    let _ = response.chunk().await;
    drop(response);
    wait_mock_stat(&mock, "responses_dropped", 1).await;
    let log: Value = common::get_json(format!("{}/_mock/log/disconnect", mock.url())).await;
    assert_eq!(log["dropped"], true);
    assert!(
        log["sent_at_us"].as_array().map_or(0, Vec::len) < 100,
        "the mock kept sending: {log}"
    );
}

/// A client that disconnects while still sending its body: the request never
/// reaches the upstream.
#[tokio::test(flavor = "multi_thread")]
async fn client_disconnect_while_sending_the_body_never_reaches_upstream() {
    let (mock, lg) = pair("");
    let mut tcp = tokio::net::TcpStream::connect(lg.addr)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let head = format!(
        "POST {CHAT} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{{\"messages\":"
    );
    tcp.write_all(head.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(tcp);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(mock_requests(&mock).await.is_empty());
    // loopguard is still healthy afterwards.
    let response = post(format!("{}{CHAT}", lg.url()), &[], STREAM_BODY).await;
    assert_eq!(response.status(), 200);
}

/// A non-streaming answer passes unchanged, with its length.
#[tokio::test(flavor = "multi_thread")]
async fn non_streaming_answers_pass_unchanged() {
    let (mock, lg) = pair("");
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    let direct = post(format!("{}{CHAT}", mock.url()), &[], body).await;
    let direct_bytes = direct.bytes().await.unwrap_or_else(|e| panic!("{e}"));
    let proxied = post(format!("{}{CHAT}", lg.url()), &[], body).await;
    assert_eq!(proxied.status(), 200);
    let proxied_bytes = proxied.bytes().await.unwrap_or_else(|e| panic!("{e}"));
    // Ids differ per answer (the mock numbers them); everything else is identical.
    let strip = |b: &[u8]| {
        let mut v: Value = serde_json::from_slice(b).unwrap_or_else(|e| panic!("{e}"));
        v["id"] = Value::Null;
        v["choices"][0]["message"]["tool_calls"][0]["id"] = Value::Null;
        v
    };
    assert_eq!(strip(&direct_bytes), strip(&proxied_bytes));
}

/// Upstream error statuses and bodies pass unchanged.
#[tokio::test(flavor = "multi_thread")]
async fn upstream_errors_pass_unchanged() {
    let (_mock, lg) = pair("");
    let response = post(
        format!("{}{CHAT}", lg.url()),
        &[("x-mock-fault", "status:429")],
        STREAM_BODY,
    )
    .await;
    assert_eq!(response.status(), 429);
    let json: Value = response.json().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(json["error"]["message"], "mock error 429");
}

/// Paths of no dialect (model lists, embeddings) are proxied unchanged,
/// with the client's own Accept-Encoding.
#[tokio::test(flavor = "multi_thread")]
async fn other_paths_are_proxied_unchanged() {
    let (mock, lg) = pair("");
    let response = client()
        .get(format!("{}/v1/models?limit=2", lg.url()))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(response.status(), 200);
    let recorded = mock_requests(&mock).await;
    assert_eq!(recorded[0]["path"], "/v1/models");
    assert_eq!(recorded[0]["query"], "limit=2");
    assert_eq!(recorded[0]["headers"]["accept-encoding"], "gzip");
}

/// A request for another provider on the wrong route gets a 400 naming the
/// base URL to use.
#[tokio::test(flavor = "multi_thread")]
async fn anthropic_request_on_the_openai_route_gets_400_with_the_fix() {
    let (mock, lg) = pair("");
    let response = post(
        format!("{}/v1/messages", lg.url()),
        &[("anthropic-version", "2023-06-01")],
        "{}",
    )
    .await;
    assert_eq!(response.status(), 400);
    let json: Value = response.json().await.unwrap_or_else(|e| panic!("{e}"));
    let message = json["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("anthropic") && message.contains("base URL"),
        "{message}"
    );
    assert!(mock_requests(&mock).await.is_empty());
}

/// A path under no route is a 404 listing the configured prefixes.
#[tokio::test(flavor = "multi_thread")]
async fn unknown_path_gets_404_listing_the_routes() {
    let lg = loopguard(&config_for("http://127.0.0.1:9", ""));
    let response = client()
        .get(format!("{}/nothing/here", lg.url()))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(response.status(), 404);
    let text = response.text().await.unwrap_or_default();
    assert!(text.contains("/v1beta") && text.contains("/gemini"), "{text}");
    // Answers loopguard writes itself are counted like the others.
    let metrics = common::metrics(&lg).await;
    assert_eq!(
        metric_value(
            &metrics,
            "loopguard_requests_total{route=\"-\",dialect=\"-\",status=\"404\"}"
        ),
        1.0,
        "{metrics}"
    );
}

/// Raw check that the proxy answers HTTP/1.1 keep-alive with a clean close
/// on the client's side.
#[tokio::test(flavor = "multi_thread")]
async fn raw_http_request_gets_a_complete_chunked_answer() {
    let (_mock, lg) = pair("");
    let mut tcp = tokio::net::TcpStream::connect(lg.addr)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let request = format!(
        "POST {CHAT} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{STREAM_BODY}",
        STREAM_BODY.len()
    );
    tcp.write_all(request.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut raw))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("transfer-encoding: chunked"), "{text}");
    assert!(text.ends_with("0\r\n\r\n"), "chunked terminator missing: {text}");
}

/// A plain-HTTP upstream on a loopback port that answers each connection's
/// first request with a chat completion and then closes the connection
/// without saying so (no `Connection: close`), as servers with a short
/// keep-alive do; returns its URL and how many requests it answered.
async fn closing_upstream() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::Ordering;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let url = format!(
        "http://{}",
        listener.local_addr().unwrap_or_else(|e| panic!("{e}"))
    );
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = std::sync::Arc::clone(&answered);
    loopguard::task::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let count = std::sync::Arc::clone(&count);
            loopguard::task::spawn(async move {
                let mut seen = Vec::new();
                let mut chunk = [0u8; 8192];
                // The head, then the body its content-length announces.
                let length = loop {
                    match socket.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&chunk[..n]),
                    }
                    if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
                        let length: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0);
                        break end + 4 + length;
                    }
                };
                while seen.len() < length {
                    match socket.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&chunk[..n]),
                    }
                }
                let body = r#"{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"done"},"finish_reason":"stop"}]}"#;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                if socket.write_all(answer.as_bytes()).await.is_ok() {
                    count.fetch_add(1, Ordering::SeqCst);
                }
                // Closed on drop, without a word.
            });
        }
    });
    (url, answered)
}

/// An upstream that closes its keep-alive connections between requests:
/// every request is answered (a new connection replaces the closed one) and
/// reaches the upstream exactly once.
#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_closing_idle_connections_answers_every_request_once() {
    let (upstream, answered) = closing_upstream().await;
    let lg = loopguard(&config_for(&upstream, ""));
    for i in 0..6 {
        let body = format!(r#"{{"model":"m","messages":[{{"role":"user","content":"question {i}"}}]}}"#);
        let response = post(format!("{}{CHAT}", lg.url()), &[], body).await;
        assert_eq!(response.status(), 200, "request {i}");
        let json: Value = response
            .json()
            .await
            .unwrap_or_else(|e| panic!("request {i}: {e}"));
        assert_eq!(json["choices"][0]["message"]["content"], "done", "request {i}");
        // Let the close reach loopguard before the next request, sometimes not.
        if i % 2 == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert_eq!(answered.load(std::sync::atomic::Ordering::SeqCst), 6);
}
