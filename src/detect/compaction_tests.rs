//! Tests of the compaction classifier and of replay.

use std::time::Duration;

use serde_json::json;

use super::compaction::{Classification, Evidence, RequestSummary, classify};
use super::testkit::{Builder, Dialect};
use super::{DetectorKind, Level, Settings, replay};
use crate::dialect::StreamEvent;
use crate::transcript::{Message, Role, Transcript};

fn long_session() -> Transcript {
    let mut b = Builder::new(Dialect::OpenAi, &["read"]);
    for i in 0..10 {
        b.call("read", json!({"i": i}), "x", false);
    }
    b.request()
}

/// Known summarizer prompts of real agents are recognised.
#[test]
fn summarizer_prompts_of_known_agents_are_recognised() {
    let s = Settings::default();
    for prompt in [
        "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary…",
        "Your task is to create a detailed summary of the conversation so far, paying close attention…",
        "Provide a detailed prompt for continuing our conversation above.",
        "Briefly summarize this partial conversation about programming.",
        "The messages above are a conversation to summarize. Create a structured context checkpoint summary…",
    ] {
        let mut t = long_session();
        t.messages_mut().push(Message::text(Role::User, prompt));
        assert_eq!(classify(None, &t, &s), Classification::Summarizer, "{prompt}");
    }
    let t = Transcript {
        system: "You are the component that summarizes internal chat history into a given structure.".into(),
        ..Transcript::default()
    };
    assert_eq!(classify(None, &t, &s), Classification::Summarizer);
}

/// A summary prefix, a replaced history, a fresh start and pruning are told apart.
#[test]
fn compaction_fresh_start_and_pruning_are_told_apart() {
    let s = Settings::default();
    let before = long_session();
    let prev = RequestSummary::of(&before, &s);
    let mut compacted = Builder::new(Dialect::OpenAi, &["read"]).request();
    compacted.messages_mut()[0].text =
        "<state_snapshot><overall_goal>fix</overall_goal></state_snapshot>".into();
    assert_eq!(
        classify(Some(&prev), &compacted, &s),
        Classification::Compacted(Evidence::SummaryPrefix)
    );
    let mut replaced = Builder::new(Dialect::OpenAi, &["read"]).request();
    replaced.messages_mut()[0].set_text("Earlier we read files 0..9; continue with the fix.");
    assert_eq!(
        classify(Some(&prev), &replaced, &s),
        Classification::Compacted(Evidence::ReplacedHistory)
    );
    let fresh = Builder::new(Dialect::OpenAi, &["read"]).request();
    assert_eq!(classify(Some(&prev), &fresh, &s), Classification::FreshStart);
    let mut pruned = before.clone();
    if let Some(m) = pruned.messages_mut().get_mut(2) {
        m.tool_results.clear();
    }
    assert_eq!(classify(Some(&prev), &pruned, &s), Classification::Continuation);
}

/// Replay prints one line per verdict with the request index, and judges the response.
#[test]
fn replay_reports_verdicts_per_request_and_for_the_response() {
    let s = Settings::default();
    let mut b = Builder::new(Dialect::Gemini, &["read"]);
    let mut requests = Vec::new();
    for _ in 0..4 {
        b.call("read", json!({"path": "a"}), "same", false);
        requests.push(b.request());
    }
    let call = super::testkit::pending("read", json!({"path": "a"}));
    let events = vec![
        StreamEvent::TextDelta {
            choice: 0,
            text: "Reading again.".into(),
        },
        StreamEvent::ToolCallComplete {
            choice: 0,
            index: 0,
            call,
        },
        StreamEvent::Finish {
            choice: 0,
            reason: "STOP".into(),
        },
    ];
    let lines = replay(&s, &requests, Duration::from_secs(10), Some(&events));
    let summary: Vec<(usize, DetectorKind, Level)> =
        lines.iter().map(|l| (l.request, l.detector, l.level)).collect();
    assert_eq!(
        summary,
        vec![
            (2, DetectorKind::IdenticalCall, Level::Warning),
            (3, DetectorKind::IdenticalCall, Level::Warning),
            (3, DetectorKind::IdenticalCall, Level::Critical),
        ]
    );
    let json = serde_json::to_value(&lines[2]).unwrap_or_default();
    assert_eq!(json["detector"], "identical_call");
    assert_eq!(json["action"], "block");
}
