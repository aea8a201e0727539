//! Unit and property tests of the SSE decoder.
use proptest::prelude::*;

use super::*;

/// Decodes `input` pushed in the given chunk sizes (cycled), then finishes.
fn decode_chunked(input: &[u8], sizes: &[usize], max: usize) -> Vec<SseEvent> {
    let mut decoder = SseDecoder::with_max_event_bytes(max);
    let mut out = Vec::new();
    let mut rest = input;
    let mut k = 0;
    while !rest.is_empty() {
        let n = sizes
            .get(k % sizes.len().max(1))
            .copied()
            .unwrap_or(rest.len())
            .clamp(1, rest.len());
        decoder.push(&rest[..n], &mut out);
        rest = &rest[n..];
        k += 1;
    }
    out.extend(decoder.finish());
    out
}

fn decode(input: &str) -> Vec<SseEvent> {
    decode_chunked(input.as_bytes(), &[], DEFAULT_MAX_EVENT_BYTES)
}

fn datas(events: &[SseEvent]) -> Vec<&str> {
    events.iter().map(|e| e.data.as_str()).collect()
}

/// LF, CRLF and lone-CR framing all end lines and events.
#[test]
fn every_line_ending_frames_events() {
    for sep in ["\n", "\r\n", "\r"] {
        let input = format!("data: a{sep}{sep}data: b{sep}{sep}");
        let events = decode(&input);
        assert_eq!(datas(&events), ["a", "b"], "separator {sep:?}");
        assert_eq!(events[1].end, input.len() as u64);
    }
}

/// Mixed terminators in one stream, as a misbehaving server might send.
#[test]
fn mixed_line_endings_in_one_stream() {
    let events = decode("data: a\r\ndata: b\n\r\ndata: c\r\r");
    assert_eq!(datas(&events), ["a\nb", "c"]);
}

/// Data lines are joined by `\n`; the space after the colon is optional and only one is removed.
#[test]
fn data_lines_join_and_lose_one_space() {
    let events = decode("data:x\ndata:  y\ndata\n\n");
    assert_eq!(datas(&events), ["x\n y\n"]);
}

/// Comments are skipped and `event`, `id`, `retry` and unknown fields do not leak into data.
#[test]
fn comments_and_fields() {
    let events = decode(": keep-alive\nevent: delta\nid: 7\nretry: 10\nfoo: bar\ndata: {}\n\n");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event.as_deref(), Some("delta"));
    assert_eq!(events[0].data, "{}");
    assert_eq!(events[0].start, 0);
}

/// A block without data is not dispatched, and its bytes go to the next event's range.
#[test]
fn quiet_end_covers_comments_outside_events_only() {
    let mut decoder = SseDecoder::new();
    let mut out = Vec::new();
    decoder.push(b": ping\n\n: ping\n", &mut out);
    assert!(out.is_empty());
    assert_eq!(decoder.quiet_end(), 15, "both pings may go out");
    decoder.push(b"event: x\n: inside\ndata: a", &mut out);
    assert_eq!(decoder.quiet_end(), 15, "an event started: its lines wait for it");
    decoder.push(b"\n\n: after\n", &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(decoder.quiet_end(), out[0].end + 8);
}

#[test]
fn dataless_blocks_are_absorbed_by_the_next_event() {
    let input = ": ping\n\nevent: x\n\n\n\ndata: 1\n\n";
    let events = decode(input);
    assert_eq!(events.len(), 1);
    assert_eq!((events[0].start, events[0].end), (0, input.len() as u64));
    assert_eq!(
        events[0].event, None,
        "the event field of a dropped block does not carry over"
    );
}

/// `data:` with an empty value is an event with empty data, unlike a block with no data line.
#[test]
fn empty_data_line_is_dispatched() {
    assert_eq!(datas(&decode("data:\n\n")), [""]);
}

/// A last event without its blank line comes out of `finish`, ending at the end of the stream.
#[test]
fn trailing_event_without_blank_line() {
    let mut decoder = SseDecoder::new();
    let mut out = Vec::new();
    decoder.push(b"data: 1\n\ndata: 2", &mut out);
    assert_eq!(datas(&out), ["1"]);
    assert_eq!(decoder.pending_len(), 7);
    let last = decoder.finish();
    assert_eq!(
        last.as_ref().map(|e| (e.start, e.end, e.data.as_str())),
        Some((9, 16, "2"))
    );
    assert_eq!(decoder.finish(), None);
}

/// A trailing comment-only block yields nothing at the end.
#[test]
fn finish_without_data_yields_nothing() {
    let mut decoder = SseDecoder::new();
    let mut out = Vec::new();
    decoder.push(b"data: 1\n\n: bye\n", &mut out);
    assert_eq!(decoder.finish(), None);
    assert_eq!(out.len(), 1);
}

/// A CRLF split between two chunks is one terminator, not a CR then an empty LF line.
#[test]
fn crlf_split_across_chunks() {
    let mut decoder = SseDecoder::new();
    let mut out = Vec::new();
    decoder.push(b"data: a\r", &mut out);
    decoder.push(b"\n\r", &mut out);
    assert!(out.is_empty(), "the blank line's LF may still come");
    decoder.push(b"\ndata: b\r\n\r\n", &mut out);
    assert_eq!(datas(&out), ["a", "b"]);
    assert_eq!((out[0].end, out[1].start), (11, 11));
}

/// A multi-byte character split between chunks decodes whole; invalid UTF-8 becomes U+FFFD.
#[test]
fn utf8_split_and_invalid_bytes() {
    let input = "data: h\u{e9}llo \u{1f600}\n\n".as_bytes();
    let events = decode_chunked(input, &[1], DEFAULT_MAX_EVENT_BYTES);
    assert_eq!(datas(&events), ["h\u{e9}llo \u{1f600}"]);
    let events = decode_chunked(b"data: a\xffb\n\n", &[2], DEFAULT_MAX_EVENT_BYTES);
    assert_eq!(datas(&events), ["a\u{fffd}b"]);
}

/// An event over the cap is dispatched truncated with exact offsets, and the next one is intact.
#[test]
fn oversized_event_is_truncated_not_lost() {
    let big = "x".repeat(300);
    let input = format!(": c\ndata: {big}\ndata: tail\n\ndata: ok\n\n");
    for sizes in [vec![], vec![1], vec![7, 64]] {
        let events = decode_chunked(input.as_bytes(), &sizes, 100);
        assert_eq!(events.len(), 2, "chunks {sizes:?}");
        assert!(events[0].truncated);
        assert_eq!(events[0].data, "x".repeat(100));
        assert_eq!(events[0].end, (input.len() - 10) as u64);
        assert!(!events[1].truncated);
        assert_eq!(events[1].data, "ok");
    }
}

/// A huge comment line is dropped without growing the buffer.
#[test]
fn oversized_comment_is_dropped() {
    let mut decoder = SseDecoder::with_max_event_bytes(64);
    let mut out = Vec::new();
    for _ in 0..100 {
        decoder.push(&[b':'; 50], &mut out);
        assert!(decoder.line.len() <= 128);
    }
    decoder.push(b"\ndata: 1\n\n", &mut out);
    assert_eq!(datas(&out), ["1"]);
    assert!(!out[0].truncated);
    assert_eq!(out[0].end, 5010);
}

/// Pieces the property streams are made of: every framing, comments, fields, multi-byte text.
fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("\n".to_owned()),
        Just("\r\n".to_owned()),
        Just("\r".to_owned()),
        Just(": c".to_owned()),
        Just("event: e".to_owned()),
        Just("data".to_owned()),
        Just("data:".to_owned()),
        Just("data: ".to_owned()),
        Just("id: 1".to_owned()),
        "[a-z{}\":,é€😀 ]{0,12}",
    ]
}

proptest! {
    /// However the stream is chunked, the same events come out, and their ranges tile the stream.
    #[test]
    fn chunking_never_changes_events(
        pieces in proptest::collection::vec(piece(), 0..40),
        sizes in proptest::collection::vec(1usize..20, 1..8),
        max in prop_oneof![Just(64usize), Just(DEFAULT_MAX_EVENT_BYTES)],
    ) {
        let input = pieces.concat();
        let bytes = input.as_bytes();
        let whole = decode_chunked(bytes, &[], max);
        prop_assert_eq!(&decode_chunked(bytes, &sizes, max), &whole);
        prop_assert_eq!(&decode_chunked(bytes, &[1], max), &whole);
        let mut at = 0;
        for event in &whole {
            prop_assert_eq!(event.start, at);
            prop_assert!(event.end > event.start);
            at = event.end;
        }
        prop_assert!(at <= bytes.len() as u64);
        // Whatever is past the last event holds no data line that could have been dispatched.
        let tail = &input[usize::try_from(at).unwrap_or(0)..];
        prop_assert!(decode(tail).is_empty());
    }

    /// `pending_len` plus the dispatched ranges always equals the bytes pushed.
    #[test]
    fn pending_len_accounts_for_every_byte(
        pieces in proptest::collection::vec(piece(), 0..30),
        sizes in proptest::collection::vec(1usize..10, 1..5),
    ) {
        let input = pieces.concat();
        let mut decoder = SseDecoder::new();
        let mut out = Vec::new();
        let mut pushed = 0u64;
        let mut rest = input.as_bytes();
        let mut k = 0;
        while !rest.is_empty() {
            let n = sizes[k % sizes.len()].min(rest.len());
            decoder.push(&rest[..n], &mut out);
            pushed += n as u64;
            rest = &rest[n..];
            k += 1;
            let dispatched = out.last().map_or(0, |e| e.end);
            prop_assert_eq!(dispatched + decoder.pending_len() as u64, pushed);
        }
    }
}
