//! The lean form of a parsed history item, for a request past its
//! parse-memory budget (see [`crate::budget`]): calls judged by
//! their hashes. A call with small arguments (at most [`CALL_KEEP`] bytes
//! parsed) stays as it is; any other keeps its id, name, signature and, in its
//! [`crate::transcript::Digest`], the identity and echo hashes of its full
//! arguments, with the arguments themselves bounded (as the shared store
//! keeps them, [`crate::call_record::lean`]); a tool result or an
//! assistant text longer than [`TEXT_KEEP`] bytes keeps its head and the
//! hash of the whole (`…<hash>…`) and its tail, so equal results stay
//! equal and different ones different. System and user texts stay whole: the session
//! key and the lane are derived from them.

use crate::detect::Settings;
use crate::dialect::HistoryItem;
use crate::transcript::{Message, ResultContent, Role, ToolCall, ToolResult, canonical_json};

/// Bytes kept of a long tool result or assistant text.
pub const TEXT_KEEP: usize = 1024;

/// The lean form of `item`.
pub fn item(item: &HistoryItem, settings: &Settings) -> HistoryItem {
    match item {
        HistoryItem::Message(m) => HistoryItem::Message(message(m, settings)),
        HistoryItem::Part(m) => HistoryItem::Part(message(m, settings)),
        HistoryItem::Messages(ms) => HistoryItem::Messages(ms.iter().map(|m| message(m, settings)).collect()),
        other => other.clone(),
    }
}

fn message(m: &Message, settings: &Settings) -> Message {
    Message {
        role: m.role,
        text: match m.role {
            Role::System | Role::User => m.text.clone(),
            Role::Assistant | Role::Tool => cut(&m.text),
        },
        tool_calls: m.tool_calls.iter().map(|c| call(c, settings)).collect(),
        tool_results: m.tool_results.iter().map(result).collect(),
        read: crate::transcript::Memo::default(),
    }
}

/// Bytes of arguments (parsed, estimated as the parse cache weighs them)
/// up to which a call is kept as it is: its lean form, which carries the
/// hashes of its full arguments beside a bounded copy, would weigh more.
pub const CALL_KEEP: usize = 512;

fn call(c: &ToolCall, settings: &Settings) -> ToolCall {
    if c.digest.is_some() || super::size::arguments_size(&c.arguments) <= CALL_KEEP {
        return c.clone();
    }
    crate::call_record::lean(c, settings)
}

fn result(r: &ToolResult) -> ToolResult {
    let content = match &r.content {
        ResultContent::Text(text) => ResultContent::Text(cut(text)),
        ResultContent::Json(value) => {
            let text = canonical_json(value);
            if text.len() <= TEXT_KEEP {
                ResultContent::Json(value.clone())
            } else {
                ResultContent::Text(cut(&text))
            }
        }
    };
    ToolResult {
        call_id: r.call_id.clone(),
        name: r.name.clone(),
        content,
        is_error: r.is_error,
    }
}

/// `text` when at most [`TEXT_KEEP`] bytes, else its head (three quarters
/// of [`TEXT_KEEP`]), the hash of the whole and its tail (the last quarter:
/// where a growing log or a test run says how it ended). The hash is written
/// in the letters `g`–`v`, one per hex digit: outcome normalisation masks
/// hex and other random-looking tokens as volatile
/// ([`crate::detect::outcome`]), and two results that differ only past the
/// head must stay different.
fn cut(text: &str) -> String {
    if text.len() <= TEXT_KEEP {
        return text.to_owned();
    }
    let mut head = TEXT_KEEP * 3 / 4;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - TEXT_KEEP / 4;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    let hash = crate::detect::outcome::hash64(text.as_bytes());
    let word: String = (0..16)
        .rev()
        .map(|i| char::from(b'g' + u8::try_from((hash >> (4 * i)) & 0xf).unwrap_or(0)))
        .collect();
    format!("{} …{word}… {}", &text[..head], &text[tail..])
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "test")]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::transcript::{Arguments, ToolCall};

    fn turn(args: serde_json::Value, result: &str) -> HistoryItem {
        let call = ToolCall::new(Some("c1".into()), "read_file", Arguments::Json(args));
        HistoryItem::Messages(vec![
            Message {
                tool_calls: vec![call],
                ..Message::text(Role::Assistant, "x".repeat(5000))
            },
            Message {
                tool_results: vec![ToolResult {
                    call_id: Some("c1".into()),
                    name: Some("read_file".into()),
                    content: ResultContent::Text(result.to_owned()),
                    is_error: false,
                }],
                ..Message::text(Role::Tool, "")
            },
        ])
    }

    /// Results that differ only past the kept head (a growing log, a test
    /// run's summary at its end) keep different outcomes in the lean form,
    /// as in the full one; equal results keep equal ones.
    #[test]
    fn results_differing_past_the_head_keep_different_outcomes() {
        let settings = Settings::default();
        let outcome = |text: String| {
            let item = item(&turn(json!({"path": "build.log"}), &text), &settings);
            crate::detect::outcome::outcome_of(&item.messages()[1].tool_results[0], &settings)
        };
        let log = |end: &str| format!("{}\n{end}", "compiling crate ok\n".repeat(80));
        for (a, b) in [("alpha", "bravo"), ("2 passed", "3 passed"), ("", "FAILED: x")] {
            assert_ne!(outcome(log(a)).hash, outcome(log(b)).hash, "{a} / {b}");
        }
        let middle = |word: &str| format!("{}{word}{}", "a".repeat(2000), "b".repeat(2000));
        assert_ne!(outcome(middle("one")).hash, outcome(middle("two")).hash);
        assert_eq!(outcome(log("alpha")).hash, outcome(log("alpha")).hash);
    }

    #[test]
    fn calls_keep_their_signature_and_identity_and_long_texts_their_hash() {
        let settings = Settings::default();
        let long = "y".repeat(100_000);
        let full = turn(json!({"path": long}), &"z".repeat(50_000));
        let lean = item(&full, &settings);
        let (f, l) = (full.messages(), lean.messages());
        let (fc, lc) = (&f[0].tool_calls[0], &l[0].tool_calls[0]);
        assert_eq!(fc.signature, lc.signature);
        assert_eq!(
            crate::detect::identity::of(fc, &settings),
            crate::detect::identity::of(lc, &settings)
        );
        assert!(serde_json::to_string(&lc.arguments).unwrap().len() < 3000);
        assert!(l[0].text.len() < TEXT_KEEP + 32);
        let ResultContent::Text(kept) = &l[1].tool_results[0].content else {
            panic!("text result");
        };
        assert!(kept.len() < TEXT_KEEP + 32 && kept.contains('…'), "{kept}");
        let other = item(&turn(json!({"path": long}), &"z".repeat(50_001)), &settings);
        assert_ne!(other.messages()[1].tool_results, l[1].tool_results);
    }
}
