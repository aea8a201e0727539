//! Compaction recognition (DESIGN §6): summarizer requests and compacted sessions.
//!
//! Pure functions over transcripts; the session layer decides what to do
//! with the answer (skip detection for a summarizer request, call
//! [`super::SessionState::note_compaction`] for a compaction, reset the
//! session for a fresh start). A request is compared with a
//! [`RequestSummary`] of the lane's previous request, which is all the
//! session needs to keep (a few hashes and counts).
//!
//! Default summarizer prompts (matched in the last user message or the
//! system text): Gemini CLI ("…the component that summarizes internal chat
//! history…"), Codex ("CONTEXT CHECKPOINT COMPACTION"), Claude Code and
//! Cline's summarize_task ("create a detailed summary of the conversation so
//! far"), OpenCode ("Provide a detailed prompt for continuing our
//! conversation"), OpenClaw / pi ("create a structured context checkpoint
//! summary"), Aider ("Briefly summarize this partial conversation").
//! Default post-compaction prefixes: Gemini CLI `<state_snapshot>`, Cline
//! `Context summary:`, Claude Code / Cline "This session is being continued
//! from a previous conversation", Codex "Another language model started to
//! solve this problem", OpenClaw / pi "The conversation history before this
//! point was compacted", Aider "I spoke to you previously about a number of
//! things". Explicit wire signals (Codex `/responses/compact`,
//! `compaction_trigger` items, `x-claude-code-compaction`) are the proxy's to
//! check; they never reach a transcript.

use super::memo::{self, Kind, hash64_parts_memo, memoised};
use super::outcome::hash64;
use super::settings::Settings;
use super::step::{UserText, classify_user, own_text};
use crate::transcript::{Role, Transcript};

/// What the compaction classifier needs to remember of a lane's previous request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct RequestSummary {
    /// Hash of the system text.
    pub system: u64,
    /// Hash of the declared tool names, in order.
    pub tools: u64,
    /// Hash of the first real user message (synthetic parts stripped), 0 if none.
    pub first_user: u64,
    /// Number of messages.
    pub messages: usize,
    /// Opaque compaction items the history carries (Responses `compaction`).
    pub compactions: usize,
    /// Hash of the id of the history's first tool call, 0 when it has none
    /// or no id (the fingerprint tells parallel runs of one task apart by it).
    pub first_call: u64,
}

impl RequestSummary {
    /// Summarises a request.
    pub fn of(transcript: &Transcript, settings: &Settings) -> Self {
        Self {
            system: hash64_parts_memo(&[transcript.system.as_bytes()]),
            tools: tools_hash(&transcript.tools),
            first_user: first_real_user(transcript, settings).map_or(0, |t| hash64(t.as_bytes())),
            messages: transcript.messages.len(),
            compactions: transcript.compactions,
            first_call: transcript
                .messages
                .iter()
                .flat_map(|m| &m.tool_calls)
                .next()
                .and_then(|c| c.id.as_deref())
                .map_or(0, |id| hash64(id.as_bytes())),
        }
    }
}

/// [`hash64`] of the declared tools joined by NUL, without joining them
/// (an agent's tool list is tens of KB, the same on every request: see
/// [`hash64_parts_memo`]).
fn tools_hash(tools: &[String]) -> u64 {
    let mut parts = Vec::with_capacity(tools.len() * 2);
    for (i, tool) in tools.iter().enumerate() {
        if i > 0 {
            parts.push(&b"\0"[..]);
        }
        parts.push(tool.as_bytes());
    }
    hash64_parts_memo(&parts)
}

/// How a request relates to the lane's previous one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Classification {
    /// A request asking the model to summarise the history: feeds no detector.
    Summarizer,
    /// The history was replaced by a summary: call `note_compaction`.
    Compacted(Evidence),
    /// A shorter history with the same first message and no marker: a new run
    /// of the same task (reset the session's state).
    FreshStart,
    /// Anything else: the conversation continues (pruning included).
    Continuation,
}

/// Why a request counts as compacted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evidence {
    /// A user message starts with a known post-compaction prefix.
    SummaryPrefix,
    /// Same system text and tools, the first real user message replaced, and
    /// at most half the previous message count.
    ReplacedHistory,
    /// The history carries a compaction item the previous request did not
    /// (OpenAI Responses `compaction`).
    CompactionItem,
}

/// Whether a request is a summarizer request: its last user message or its
/// system text matches a known summarizer prompt.
///
/// The system text (an agent's, tens of KB on every request) is searched
/// once per text and pattern list (`detect::memo`).
pub fn is_summarizer(transcript: &Transcript, settings: &Settings) -> bool {
    let patterns = &settings.compaction.summarizer;
    let last_user = transcript.messages.iter().rev().find(|m| m.role == Role::User);
    if last_user.is_some_and(|m| patterns.iter().any(|r| r.is_match(&m.text))) {
        return true;
    }
    let search = || u64::from(patterns.iter().any(|r| r.is_match(&transcript.system)));
    let system = [transcript.system.as_bytes()];
    if patterns.is_empty() || !memo::kept(&system) {
        return search() == 1;
    }
    let list = patterns.iter().fold(0, |seed, r| {
        xxhash_rust::xxh3::xxh3_64_with_seed(r.as_str().as_bytes(), seed).rotate_left(7)
    });
    memoised(Kind::Summarizer(list), &system, search) == 1
}

/// Classifies a request given the summary of the lane's previous request.
pub fn classify(
    previous: Option<&RequestSummary>,
    transcript: &Transcript,
    settings: &Settings,
) -> Classification {
    classify_summarized(
        previous,
        &RequestSummary::of(transcript, settings),
        transcript,
        settings,
    )
}

/// Whether a user message of `transcript` starts with a known summary
/// prefix (`compaction.summary_prefixes`, on its own text): without one,
/// [`classify_summarized`] never gives [`Evidence::SummaryPrefix`].
pub fn carries_summary_marker(transcript: &Transcript, settings: &Settings) -> bool {
    transcript
        .messages
        .iter()
        .filter(|m| m.role == Role::User)
        .any(|m| {
            let own = own_text(&m.text);
            settings
                .compaction
                .summary_prefixes
                .iter()
                .any(|r| r.is_match(&own))
        })
}

/// [`classify`] for a caller that already holds the request's
/// [`RequestSummary`] (`now`), so it is not computed twice per request.
pub fn classify_summarized(
    previous: Option<&RequestSummary>,
    now: &RequestSummary,
    transcript: &Transcript,
    settings: &Settings,
) -> Classification {
    if is_summarizer(transcript, settings) {
        return Classification::Summarizer;
    }
    let Some(prev) = previous else {
        return Classification::Continuation;
    };
    if now.compactions > prev.compactions {
        return Classification::Compacted(Evidence::CompactionItem);
    }
    let shorter = now.messages < prev.messages;
    // The marker scan reads every user message: only when it could matter
    // (a continuation, the usual request, never pays it).
    if (shorter || now.first_user != prev.first_user) && carries_summary_marker(transcript, settings) {
        return Classification::Compacted(Evidence::SummaryPrefix);
    }
    let same_lane = now.system == prev.system && now.tools == prev.tools;
    if same_lane && now.first_user != prev.first_user && now.messages * 2 <= prev.messages {
        return Classification::Compacted(Evidence::ReplacedHistory);
    }
    if same_lane && shorter && now.first_user == prev.first_user && now.first_user != 0 {
        return Classification::FreshStart;
    }
    Classification::Continuation
}

/// The first user message with text of its own (not synthetic, not a summary).
fn first_real_user(transcript: &Transcript, settings: &Settings) -> Option<String> {
    transcript
        .messages
        .iter()
        .filter(|m| m.role == Role::User)
        .map(|m| classify_user(&m.text, settings))
        .find(|(kind, _)| *kind != UserText::Synthetic)
        .map(|(_, own)| own)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A system text long enough for the memo is searched as a short one
    /// is, on a miss and a hit, under each pattern list its own answer.
    #[test]
    fn a_long_system_text_is_searched_as_a_short_one() {
        let settings = Settings::default();
        let filler = "x ".repeat(2000);
        let asks = Transcript {
            system: format!("{filler}create a detailed summary of the conversation so far"),
            ..Transcript::default()
        };
        let plain = Transcript {
            system: filler,
            ..Transcript::default()
        };
        for _ in 0..2 {
            assert!(is_summarizer(&asks, &settings));
            assert!(!is_summarizer(&plain, &settings));
        }
        let mut without = settings.clone();
        without.compaction.summarizer.clear();
        assert!(!is_summarizer(&asks, &without));
        without.compaction.summarizer = vec![regex::Regex::new("x x x").unwrap_or_else(|e| panic!("{e}"))];
        assert!(is_summarizer(&plain, &without), "another list, another answer");
    }

    /// Lanes and fingerprinted session keys are made of this hash and kept
    /// by replicas of other versions: it stays the hash of the joined list.
    #[test]
    fn the_tools_hash_is_the_hash_of_the_joined_list() {
        let long = "x".repeat(3000);
        for tools in [
            vec![],
            vec!["a".to_owned()],
            vec!["a".to_owned(), "b".to_owned(), long],
        ] {
            assert_eq!(tools_hash(&tools), hash64(tools.join("\u{0}").as_bytes()));
        }
    }
}
