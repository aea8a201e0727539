use super::*;

fn request<'a>(headers: &'a http::HeaderMap, upstream: &'a url::Url) -> Begin<'a> {
    Begin {
        started: Instant::now(),
        method: &http::Method::POST,
        headers,
        route: "/v1",
        provider: crate::config::Provider::Openai,
        dialect: Some(Dialect::OpenaiChat),
        upstream,
        model: Some("gpt-4o"),
    }
}

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn upstream() -> url::Url {
    url::Url::parse("https://api.openai.com/v1/chat/completions").unwrap_or_else(|_| unreachable!())
}

/// The span's name and kind are the GenAI conventions' (`{operation} {model}`, CLIENT).
#[test]
fn a_chat_request_is_a_client_span_named_after_its_operation_and_model() {
    let (headers, url) = (http::HeaderMap::new(), upstream());
    let trace = opened(&request(&headers, &url));
    trace.session("abc123");
    let Some(span) = trace.finished(&End {
        status: 200,
        outcome: "complete",
        response_model: Some("gpt-4o-2024-08-06"),
        tokens: (Some(12), Some(3)),
        ..End::default()
    }) else {
        panic!("no span");
    };
    assert_eq!(span.name, "chat gpt-4o");
    assert_eq!(span.span_kind, SpanKind::Client);
    assert_eq!(span.status, Status::Unset);
    let text = |k| attribute(&span, k).map(|v| v.as_str().into_owned());
    assert_eq!(text("gen_ai.operation.name").as_deref(), Some("chat"));
    assert_eq!(text("gen_ai.provider.name").as_deref(), Some("openai"));
    assert_eq!(text("gen_ai.request.model").as_deref(), Some("gpt-4o"));
    assert_eq!(
        text("gen_ai.response.model").as_deref(),
        Some("gpt-4o-2024-08-06")
    );
    assert_eq!(text("gen_ai.conversation.id").as_deref(), Some("abc123"));
    assert_eq!(text("server.address").as_deref(), Some("api.openai.com"));
    assert_eq!(attribute(&span, "server.port"), Some(&Value::I64(443)));
    assert_eq!(
        attribute(&span, "gen_ai.usage.input_tokens"),
        Some(&Value::I64(12))
    );
    assert_eq!(
        attribute(&span, "gen_ai.usage.output_tokens"),
        Some(&Value::I64(3))
    );
    assert_eq!(
        attribute(&span, "http.response.status_code"),
        Some(&Value::I64(200))
    );
    assert_eq!(text("loopguard.route").as_deref(), Some("/v1"));
    assert_eq!(text("loopguard.dialect").as_deref(), Some("openai-chat"));
    assert!(span.parent_span_id == SpanId::INVALID);
}

/// A span is exported once, whichever path writes the request's log line first.
#[test]
fn a_trace_finishes_once() {
    let (headers, url) = (http::HeaderMap::new(), upstream());
    let trace = opened(&request(&headers, &url));
    assert!(trace.finished(&End::default()).is_some());
    assert!(trace.finished(&End::default()).is_none());
}

/// An abort and an upstream failure are errors; a block is a normal answer.
#[test]
fn aborts_and_upstream_failures_are_errors_blocks_are_not() {
    let (headers, url) = (http::HeaderMap::new(), upstream());
    let status = |end: End<'_>| opened(&request(&headers, &url)).finished(&end).map(|s| s.status);
    let error = |kind: &str| Some(Status::error(kind.to_owned()));
    assert_eq!(
        status(End {
            status: 200,
            outcome: "aborted_in_stream",
            ..End::default()
        }),
        error("loop_detected")
    );
    assert_eq!(
        status(End {
            status: 400,
            outcome: "answered_by_loopguard",
            verdict: Some("abort; detector=identical_call; count=6"),
            ..End::default()
        }),
        error("loop_detected")
    );
    assert_eq!(
        status(End {
            status: 200,
            outcome: "upstream_broke_off",
            ..End::default()
        }),
        error("upstream_broke_off")
    );
    assert_eq!(
        status(End {
            status: 502,
            outcome: "answered_by_loopguard",
            ..End::default()
        }),
        error("502")
    );
    assert_eq!(
        status(End {
            status: 429,
            outcome: "complete",
            ..End::default()
        }),
        error("429")
    );
    assert_eq!(
        status(End {
            status: 200,
            outcome: "blocked",
            verdict: Some("block; detector=identical_call; count=5"),
            ..End::default()
        }),
        Some(Status::Unset)
    );
}

/// Tool calls and verdicts are events in time order; no call arguments are recorded.
#[test]
fn tool_calls_and_verdicts_are_events_without_arguments() {
    let (headers, url) = (http::HeaderMap::new(), upstream());
    let trace = opened(&request(&headers, &url));
    let verdict = Verdict {
        detector: crate::detect::DetectorKind::IdenticalCall,
        level: crate::detect::Level::Critical,
        action: crate::detect::Action::Block,
        count: 5,
        tool: Some("list_directory".to_owned()),
        arguments: Some("{\"path\":\".\"}".to_owned()),
        message: "[loopguard] …".to_owned(),
    };
    let early = SystemTime::now();
    trace.verdict(&verdict, "stream");
    let calls = [Call {
        name: "list_directory".to_owned(),
        id: Some("c5".to_owned()),
        at: early,
    }];
    let Some(span) = trace.finished(&End {
        status: 200,
        outcome: "blocked",
        tool_calls: &calls,
        ..End::default()
    }) else {
        panic!("no span");
    };
    let names: Vec<&str> = span.events.iter().map(|e| e.name.as_ref()).collect();
    assert_eq!(names, ["gen_ai.tool.call", "loopguard.verdict"]);
    let attrs = |i: usize| -> Vec<(String, String)> {
        span.events[i]
            .attributes
            .iter()
            .map(|kv| (kv.key.to_string(), kv.value.as_str().into_owned()))
            .collect()
    };
    assert_eq!(
        attrs(0),
        [
            ("gen_ai.tool.name".into(), "list_directory".into()),
            ("gen_ai.tool.call.id".into(), "c5".into())
        ]
    );
    assert_eq!(
        attrs(1),
        [
            ("loopguard.detector".into(), "identical_call".into()),
            ("loopguard.level".into(), "critical".into()),
            ("loopguard.action".into(), "block".into()),
            ("loopguard.count".into(), "5".into()),
            ("loopguard.at".into(), "stream".into()),
            ("gen_ai.tool.name".into(), "list_directory".into()),
        ]
    );
}

/// An agent's W3C `traceparent` makes loopguard's span its child; a malformed one is ignored.
#[test]
fn a_traceparent_header_parents_the_span() {
    let url = upstream();
    let mut headers = http::HeaderMap::new();
    headers.insert(
        "traceparent",
        http::HeaderValue::from_static("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
    );
    let Some(span) = opened(&request(&headers, &url)).finished(&End::default()) else {
        panic!("no span")
    };
    assert_eq!(
        span.span_context.trace_id(),
        TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").unwrap_or(TraceId::INVALID)
    );
    assert_eq!(
        span.parent_span_id,
        SpanId::from_hex("b7ad6b7169203331").unwrap_or(SpanId::INVALID)
    );
    assert!(span.parent_span_is_remote);
    for bad in [
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        "zz",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b71692033-01",
    ] {
        headers.insert("traceparent", http::HeaderValue::from_static(bad));
        let Some(span) = opened(&request(&headers, &url)).finished(&End::default()) else {
            panic!("no span")
        };
        assert_eq!(span.parent_span_id, SpanId::INVALID, "{bad}");
    }
}

/// A trace dropped unfinished (the client went away mid-answer) still ends,
/// as `client_disconnected`; a finished one sends nothing more when dropped.
#[test]
fn a_trace_dropped_unfinished_ends_as_client_disconnected() {
    let (headers, url) = (http::HeaderMap::new(), upstream());
    let trace = opened(&request(&headers, &url));
    let Some(span) = trace.unfinished() else {
        panic!("no span")
    };
    assert_eq!(
        attribute(&span, "loopguard.outcome").map(|v| v.as_str().into_owned()),
        Some("client_disconnected".to_owned())
    );
    assert_eq!(attribute(&span, "http.response.status_code"), None);
    let finished = opened(&request(&headers, &url));
    assert!(finished.finished(&End::default()).is_some());
    assert!(finished.unfinished().is_none());
}
