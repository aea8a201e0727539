//! Tests of `content_chanting`: real chants fire, markdown structure and code do not.

use super::content_chanting::{Channel, ContentScanner};
use super::{DetectorKind, Level, Settings};

fn scan(text: &str) -> Option<(DetectorKind, Level, u32)> {
    let s = Settings::default();
    let mut scanner = ContentScanner::new(&s);
    // Feed in small deltas, as a stream would.
    let bytes = text.as_bytes();
    let mut start = 0;
    while start < bytes.len() {
        let mut end = (start + 7).min(bytes.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        scanner.feed(Channel::Answer(0), &text[start..end]);
        start = end;
    }
    scanner.verdict().map(|v| (v.detector, v.level, v.count))
}

/// The classic failure: one short sentence over and over.
#[test]
fn two_hundred_repeated_short_lines_are_critical() {
    let text = "I will check the configuration again.\n".repeat(200);
    let (kind, level, _) = scan(&text).unwrap_or_else(|| panic!("not detected"));
    assert_eq!((kind, level), (DetectorKind::ContentChanting, Level::Critical));
}

/// Repeats without newlines are caught by the window, not only the line ceiling.
#[test]
fn a_repeated_phrase_without_newlines_is_critical() {
    assert!(scan(&"Let me try that once more, carefully this time. ".repeat(40)).is_some());
}

/// A repeated bullet still counts: identical structured lines do not reset.
#[test]
fn a_repeated_bullet_is_critical() {
    assert!(scan(&"- check the build output for the error\n".repeat(40)).is_some());
}

/// The line ceiling applies inside code too.
#[test]
fn the_same_code_line_thirty_times_is_critical_even_in_a_fence() {
    let text = format!(
        "```python\n{}```\n",
        "    result = compute_value(data)\n".repeat(30)
    );
    assert!(scan(&text).is_some());
    let text = format!(
        "```python\n{}```\n",
        "    result = compute_value(data)\n".repeat(29)
    );
    assert!(scan(&text).is_none());
}

/// A long table is structure, not chanting.
#[test]
fn a_forty_row_markdown_table_is_silent() {
    let mut t = String::from("| id | name | status | owner |\n|----|------|--------|-------|\n");
    for i in 0..40 {
        t.push_str(&format!(
            "| {i} | service-{i} | running normally | team platform operations |\n"
        ));
    }
    assert_eq!(scan(&t), None);
}

/// Distinct list items sharing a long prefix are not a loop.
#[test]
fn a_numbered_list_of_60_distinct_items_with_a_long_prefix_is_silent() {
    let mut t = String::new();
    for i in 1..=60 {
        t.push_str(&format!(
            "{i}. The configuration option that controls the behaviour of module {i} is `opt_{i}`\n"
        ));
    }
    assert_eq!(scan(&t), None);
}

/// Repetitive but distinct code lines are fine.
#[test]
fn a_long_code_block_with_repetitive_distinct_lines_is_silent() {
    let mut t = String::from("```rust\n");
    for i in 0..200 {
        t.push_str(&format!(
            "    assert_eq!(parse_value(\"input_{i}\"), Ok(expected_value_{i}));\n    }}\n"
        ));
    }
    t.push_str("```\n");
    assert_eq!(scan(&t), None);
}

/// Box drawing repeats characters, not content.
#[test]
fn a_box_drawing_diagram_is_silent() {
    let mut t = String::new();
    for _ in 0..6 {
        t.push_str("┌──────────────────────┐      ┌──────────────────────┐\n");
        t.push_str("│                      │ ───▶ │                      │\n");
        t.push_str("└──────────────────────┘      └──────────────────────┘\n");
    }
    assert_eq!(scan(&t), None);
    assert_eq!(scan(&format!("```\n{t}```\n")), None);
}

/// Dividers between sections reset tracking; prose sections are distinct.
#[test]
fn dividers_between_sections_are_silent() {
    let mut t = String::new();
    for i in 0..30 {
        t.push_str(&format!(
            "## Section {i}\n\nThis section explains part {i} of the design in a few words.\n\n---\n\n"
        ));
    }
    assert_eq!(scan(&t), None);
}

/// Memory stays capped however long the response.
#[test]
fn memory_is_capped_on_long_distinct_text() {
    let s = Settings::default();
    let mut scanner = ContentScanner::new(&s);
    for i in 0..20_000 {
        scanner.feed(
            Channel::Reasoning(0),
            &format!("token{i} is different from the one before it; "),
        );
    }
    assert!(scanner.verdict().is_none());
    assert!(scanner.heap_size() < 200_000, "{}", scanner.heap_size());
}

/// A whole answer of many parallel calls, each call's arguments streamed
/// then completed: a complete call's track is dropped (one track at a time,
/// not one per call), while chanting inside one call's arguments is still
/// caught before it completes.
#[test]
fn complete_calls_drop_their_argument_tracks() {
    use crate::dialect::StreamEvent;
    use crate::transcript::{Arguments, ToolCall};

    let s = Settings::default();
    let mut scanner = ContentScanner::new(&s);
    for index in 0..5_000 {
        let delta = StreamEvent::ToolCallDelta {
            choice: 0,
            index,
            arguments_delta: format!("{{\"path\":\"src/file_{index}.rs\"}}"),
        };
        assert!(scanner.observe(&delta).is_none());
        assert_eq!(scanner.channels(), 1);
        let call = ToolCall::new(None, "read_file".to_owned(), Arguments::from_json_str("{}"));
        let complete = StreamEvent::ToolCallComplete {
            choice: 0,
            index,
            call,
        };
        assert!(scanner.observe(&complete).is_none());
        assert_eq!(scanner.channels(), 0);
    }
    let chant = format!("{{\"content\": \"{}\"}}", "ny".repeat(300));
    for piece in chant.as_bytes().chunks(9) {
        let delta = StreamEvent::ToolCallDelta {
            choice: 0,
            index: 5_000,
            arguments_delta: String::from_utf8_lossy(piece).into_owned(),
        };
        scanner.observe(&delta);
    }
    assert_eq!(scanner.verdict().map(|v| v.level), Some(Level::Critical));
}

mod chunking {
    use proptest::prelude::*;

    use super::super::content_chanting::{Channel, ContentScanner};
    use super::super::{Settings, Verdict};

    const FRAGMENTS: &[&str] = &[
        "the ",
        "parser ",
        "returns ",
        "a token ",
        "\n",
        "- ",
        "1. ",
        "```\n",
        "| a | b |\n",
        "# Heading\n",
        "---\n",
        "> ",
        "Let me try that once more. ",
        "check the build output\n",
        "é ",
        "─",
        "0123456789",
    ];

    /// Text with enough repetition that some cases chant and some do not.
    fn text() -> impl Strategy<Value = String> {
        prop::collection::vec((0..FRAGMENTS.len(), 1usize..14), 0..80)
            .prop_map(|parts| parts.iter().map(|(i, n)| FRAGMENTS[*i].repeat(*n)).collect())
    }

    /// Feeds `pieces`; returns the verdict and the end offset of the piece that produced it.
    fn feed<'a>(pieces: impl IntoIterator<Item = &'a str>) -> Option<(Verdict, usize)> {
        let s = Settings::default();
        let mut scanner = ContentScanner::new(&s);
        let mut end = 0;
        for piece in pieces {
            end += piece.len();
            if let Some(v) = scanner.feed(Channel::Answer(0), piece) {
                return Some((v.clone(), end));
            }
        }
        None
    }

    fn cut<'a>(text: &'a str, sizes: &[usize]) -> Vec<&'a str> {
        let mut out = Vec::new();
        let mut start = 0;
        for size in sizes.iter().cycle().take(text.len()) {
            if start >= text.len() {
                break;
            }
            let mut end = (start + size).min(text.len());
            while !text.is_char_boundary(end) {
                end += 1;
            }
            out.push(&text[start..end]);
            start = end;
        }
        out
    }

    proptest! {
        /// A stream's delta boundaries are arbitrary: the same text fed whole,
        /// one character at a time, or in random pieces must give the same
        /// verdict, reached in the piece that holds the same byte.
        #[test]
        fn chunking_never_changes_the_verdict(
            text in text(),
            sizes in prop::collection::vec(1usize..120, 1..40),
        ) {
            let chars: Vec<&str> = text
                .char_indices()
                .map(|(i, c)| &text[i..i + c.len_utf8()])
                .collect();
            let by_char = feed(chars);
            let whole = feed([text.as_str()]);
            prop_assert_eq!(
                whole.as_ref().map(|(v, _)| v),
                by_char.as_ref().map(|(v, _)| v)
            );
            let pieces = cut(&text, &sizes);
            let mut starts = Vec::new();
            let mut at = 0;
            for p in &pieces {
                starts.push(at);
                at += p.len();
            }
            let chunked = feed(pieces);
            prop_assert_eq!(chunked.as_ref().map(|(v, _)| v), by_char.as_ref().map(|(v, _)| v));
            if let (Some((_, piece_end)), Some((_, byte_end))) = (&chunked, &by_char) {
                // The piece that fired holds the byte where the verdict arose.
                let piece_start = starts.iter().rev().find(|s| **s < *piece_end).copied().unwrap_or(0);
                prop_assert!(piece_start < *byte_end && *byte_end <= *piece_end);
            }
        }
    }
}

/// Low-entropy chanting in a tool call's arguments (issue #12 point 6) is
/// caught; a write of a zero-filled hex array or a JSON list of nulls is not.
#[test]
fn low_entropy_chanting_in_tool_arguments_is_caught_and_data_is_not() {
    let s = Settings::default();
    let feed = |text: &str| {
        let mut scanner = ContentScanner::new(&s);
        for chunk in text.as_bytes().chunks(9) {
            scanner.feed(Channel::ToolArguments(0, 0), &String::from_utf8_lossy(chunk));
        }
        scanner.verdict().map(|v| v.level)
    };
    let chant = format!("{{\"content\": \"{}\"}}", "ny".repeat(300));
    assert_eq!(feed(&chant), Some(Level::Critical));
    let hex = format!("{{\"content\": \"uint8_t z[] = {{{}}};\"}}", "0xFF, ".repeat(100));
    assert_eq!(feed(&hex), None);
    let nulls = format!("{{\"content\": \"[{}]\"}}", "null,".repeat(100));
    assert_eq!(feed(&nulls), None);
}

/// #13.12: the sample a chanting verdict quotes is redacted: a model that
/// repeats a credential does not get it written into the verdict message
/// (and so the log, the admin API and the agent's warning), also when the
/// quoted window begins inside the credential. Each of the three ways of
/// finding a chant (lines, the window, a short unit) quotes its sample.
#[test]
fn the_quoted_sample_never_carries_a_credential() {
    let key = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789";
    for text in [
        format!("export OPENAI_API_KEY={key}\n").repeat(40),
        format!("Authorization: Bearer {key} ").repeat(40),
        format!("{key} ").repeat(60),
    ] {
        let s = Settings::default();
        let mut scanner = ContentScanner::new(&s);
        for piece in text.as_bytes().chunks(7) {
            scanner.feed(Channel::Answer(0), &String::from_utf8_lossy(piece));
        }
        let verdict = scanner
            .verdict()
            .unwrap_or_else(|| panic!("not detected: {text:.80}"));
        assert!(!verdict.message.contains("abcdefghij"), "{}", verdict.message);
        assert!(verdict.message.contains("REDACTED"), "{}", verdict.message);
    }
}
