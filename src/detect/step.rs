//! Steps: what the detectors count, extracted from a request's transcript.
//!
//! A request's history becomes a list of [`Item`]s in order: tool cycles (a
//! call with the result the same request carries for it), assistant text
//! turns without calls, and user texts. The session ([`super::session`])
//! aligns these items with what it already absorbed and turns the new ones
//! into [`Step`]s. Calls with no result anywhere in the request are not
//! cycles (their outcome is unknown); exempt tools produce nothing at all.

use std::sync::LazyLock;
use std::time::Duration;

use regex::Regex;

use super::outcome::{Outcome, hash64, outcome_of};
use super::settings::Settings;
use crate::transcript::{
    Arguments, Message, Role, Signature, ToolCall, ToolResult, Transcript, canonical_json,
};

/// Longest argument preview kept per cycle, in characters.
pub(crate) const ARGS_PREVIEW: usize = 120;

/// One tool call with its outcome (unknown while the call is pending).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Cycle {
    pub name: String,
    pub args: String,
    pub signature: Signature,
    pub outcome: Option<Outcome>,
    pub unparsable: bool,
    pub unknown_tool: bool,
    pub poll: bool,
}

impl Cycle {
    /// A cycle for `call`, judged against the declared `tools`.
    pub(crate) fn of(call: &ToolCall, outcome: Option<Outcome>, tools: &[String], s: &Settings) -> Self {
        Self {
            name: call.name.clone(),
            args: preview(&call.arguments),
            signature: call.signature,
            outcome,
            unparsable: matches!(call.arguments, Arguments::Unparsable(_)),
            unknown_tool: !tools.is_empty() && !tools.contains(&call.name),
            poll: s.is_poll(&call.name, &call.arguments),
        }
    }

    /// Failed: an error outcome or arguments that did not parse.
    pub(crate) fn failed(&self) -> bool {
        self.unparsable || self.outcome.is_some_and(|o| o.is_error)
    }
}

/// What a step is.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) enum StepKind {
    /// A tool cycle.
    Cycle(Cycle),
    /// An assistant turn of text without tool calls (hash of the trimmed text).
    Said(u64),
    /// A canned user message the agent repeats (a failure for `consecutive_failures`).
    Canned,
}

/// A step in the session's history.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Step {
    pub kind: StepKind,
    /// Identity for merging requests (call id or signature + outcome, text hash).
    pub key: u64,
    /// Increments whenever the person speaks; streaks stay within one epoch.
    pub epoch: u32,
    /// Tool cycles in this epoch up to and including this one.
    pub in_epoch: u32,
    /// Position in the session (monotonic).
    pub seq: u64,
    /// The assistant turn it belongs to (parallel calls share one).
    pub turn: u64,
    /// When loopguard first saw it (session clock).
    pub at: Duration,
}

impl Step {
    /// The cycle, when this step is one.
    pub(crate) fn cycle(&self) -> Option<&Cycle> {
        match &self.kind {
            StepKind::Cycle(c) => Some(c),
            _ => None,
        }
    }
}

/// What a user text is, before the session's memory of earlier texts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UserText {
    /// Only synthetic wrappers, loopguard's own text or a compaction summary.
    Synthetic,
    /// Matches a `canned_patterns` entry.
    Canned,
    /// Text of its own (the person, unless the session saw it before).
    Own,
}

/// One element of a request's history, in order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Item {
    /// A user text.
    User { key: u64, text: UserText },
    /// An assistant text turn without calls.
    Said { key: u64 },
    /// A tool cycle; `turn_start` marks the first cycle of an assistant turn.
    /// `cycle` is `None` before the alignment point (see [`extract`]).
    Cycle {
        key: u64,
        cycle: Option<Cycle>,
        turn_start: bool,
    },
}

impl Item {
    /// The merge identity.
    pub(crate) fn key(&self) -> u64 {
        match self {
            Self::User { key, .. } | Self::Said { key } | Self::Cycle { key, .. } => *key,
        }
    }
}

static SYNTHETIC: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"(?s)<system-reminder>.*?</system-reminder>|<environment_details>.*?</environment_details>|<session_context>.*?</session_context>|(?m:^\[loopguard\].*$)",
    )
    .ok()
});

/// A user message's text with synthetic wrappers removed, trimmed.
pub(crate) fn own_text(text: &str) -> String {
    match SYNTHETIC.as_ref() {
        Some(re) => re.replace_all(text, "").trim().to_owned(),
        None => text.trim().to_owned(),
    }
}

/// Classifies a user text.
pub(crate) fn classify_user(text: &str, s: &Settings) -> (UserText, String) {
    let own = own_text(text);
    if own.is_empty() || s.compaction.summary_prefixes.iter().any(|r| r.is_match(&own)) {
        return (UserText::Synthetic, own);
    }
    if s.canned_patterns.iter().any(|r| r.is_match(&own)) {
        return (UserText::Canned, own);
    }
    (UserText::Own, own)
}

/// Canonical arguments, truncated for reading.
pub(crate) fn preview(arguments: &Arguments) -> String {
    let full = match arguments {
        Arguments::Json(v) => canonical_json(v),
        Arguments::Unparsable(raw) => raw.clone(),
    };
    truncate(&full, ARGS_PREVIEW)
}

/// Truncates to `max` characters, marking the cut with `…`.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

/// The merge key of a cycle: call id + signature, else signature + outcome
/// (computed only then: a call with an id needs no outcome to be aligned).
fn cycle_key(call: &ToolCall, outcome: impl FnOnce() -> Outcome) -> (u64, Option<Outcome>) {
    match &call.id {
        Some(id) => {
            let mut bytes = b"id:".to_vec();
            bytes.extend_from_slice(id.as_bytes());
            bytes.extend_from_slice(&call.signature.0);
            (hash64(&bytes), None)
        }
        None => {
            let outcome = outcome();
            let mut bytes = call.signature.0.to_vec();
            bytes.extend_from_slice(&outcome.hash.to_le_bytes());
            (hash64(&bytes), Some(outcome))
        }
    }
}

/// Finds the result answering `call` among the results after its turn.
fn find_result<'a>(
    call: &ToolCall,
    position: usize,
    results: &[&'a ToolResult],
    used: &mut [bool],
) -> Option<&'a ToolResult> {
    let by_id = call.id.as_ref().and_then(|id| {
        results
            .iter()
            .enumerate()
            .find(|(i, r)| !used[*i] && r.call_id.as_deref() == Some(id.as_str()))
    });
    let pick = by_id
        .or_else(|| {
            results.iter().enumerate().find(|(i, r)| {
                !used[*i] && r.call_id.is_none() && r.name.as_deref() == Some(call.name.as_str())
            })
        })
        .or_else(|| {
            results
                .iter()
                .enumerate()
                .find(|(i, r)| !used[*i] && *i == position && r.call_id.is_none())
        });
    let (i, r) = pick?;
    used[i] = true;
    Some(*r)
}

/// A cycle found in the request, not yet turned into a [`Cycle`].
struct Found<'t> {
    key: u64,
    call: &'t ToolCall,
    result: &'t ToolResult,
    /// Computed already when the key needed it (a call without an id).
    outcome: Option<Outcome>,
    turn_start: bool,
}

/// An item, or a cycle still to be materialised.
enum Draft<'t> {
    Item(Item),
    Cycle(Found<'t>),
}

impl Draft<'_> {
    fn key(&self) -> u64 {
        match self {
            Self::Item(item) => item.key(),
            Self::Cycle(found) => found.key,
        }
    }
}

/// Extracts the items of a request, in order, and the alignment point that
/// `align` finds from their merge keys. Cycles before that point are already
/// known to the session and never judged again, so their outcomes are not
/// computed (no normalisation, no SHA-256) unless their key needs one (a
/// call without an id): the cost of a request follows what is new in it.
pub(crate) fn extract(
    transcript: &Transcript,
    s: &Settings,
    align: impl FnOnce(&[u64]) -> usize,
) -> (Vec<Item>, usize) {
    let drafts = drafts(transcript, s);
    let keys: Vec<u64> = drafts.iter().map(Draft::key).collect();
    let start = align(&keys);
    let items = drafts
        .into_iter()
        .enumerate()
        .map(|(i, draft)| match draft {
            Draft::Item(item) => item,
            Draft::Cycle(found) => Item::Cycle {
                key: found.key,
                cycle: (i >= start).then(|| {
                    let outcome = found.outcome.unwrap_or_else(|| outcome_of(found.result, s));
                    Cycle::of(found.call, Some(outcome), &transcript.tools, s)
                }),
                turn_start: found.turn_start,
            },
        })
        .collect();
    (items, start)
}

fn drafts<'t>(transcript: &'t Transcript, s: &Settings) -> Vec<Draft<'t>> {
    let messages = &transcript.messages;
    let mut items = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        match message.role {
            Role::Assistant if message.tool_calls.is_empty() => {
                let text = message.text.trim();
                if !text.is_empty() {
                    items.push(Draft::Item(Item::Said {
                        key: hash64(text.as_bytes()) ^ 0x5a1d,
                    }));
                }
            }
            Role::Assistant => push_cycles(message, &messages[i + 1..], s, &mut items),
            Role::User => {
                if message.text.trim().is_empty() {
                    continue;
                }
                let (text, own) = classify_user(&message.text, s);
                items.push(Draft::Item(Item::User {
                    key: hash64(own.as_bytes()),
                    text,
                }));
            }
            Role::Tool | Role::System => {}
        }
    }
    items
}

fn push_cycles<'t>(message: &'t Message, rest: &'t [Message], s: &Settings, items: &mut Vec<Draft<'t>>) {
    let results: Vec<&ToolResult> = rest
        .iter()
        .take_while(|m| m.role != Role::Assistant)
        .flat_map(|m| m.tool_results.iter())
        .collect();
    let mut used = vec![false; results.len()];
    let mut turn_start = true;
    for (position, call) in message.tool_calls.iter().enumerate() {
        let Some(result) = find_result(call, position, &results, &mut used) else {
            continue;
        };
        if s.is_exempt(&call.name, &call.arguments) {
            continue;
        }
        let (key, outcome) = cycle_key(call, || outcome_of(result, s));
        items.push(Draft::Cycle(Found {
            key,
            call,
            result,
            outcome,
            turn_start,
        }));
        turn_start = false;
    }
}
