//! `content_chanting`: repetitive generated text within one response (stream time).
//!
//! Idea: Gemini CLI's content-loop check. A 50-byte window (`chunk_size`)
//! that recurs ≥ 10 times (`min_repeats`) in the tracked text with a mean gap
//! ≤ 250 bytes (`max_mean_gap`) and ≤ 5 distinct gaps (`max_periods`) is
//! chanting; so is the same normalised line (trimmed, at least 6 letters or
//! digits, one of them a letter: a row of numbers is data) `max_line_repeats`
//! (30) times in one response, in any context, code included. Default level: critical, action `block`.
//!
//! Cost: O(1) amortised per byte (a channel's track is found by hash, also
//! among the argument channels of many parallel calls) and memory capped
//! per channel; a tool call's channel is dropped when the call completes. Windows are
//! hashed with a Rabin–Karp rolling hash; rather than indexing every window
//! (a hash-map write per byte), the scanner keeps only the windows selected
//! by winnowing (the minimum hash of every 16 consecutive windows, Schleimer
//! et al. 2003): repeated text selects the same windows in every repeat, so
//! recurrences are seen while map writes drop to about one per 8 bytes.
//! Tracked text is capped at `buffer_chars` (5000) bytes: older selections
//! are evicted; the line table holds at most 4096 distinct lines.
//!
//! Does not flag (deliberately): markdown structure — tracking resets at a
//! fence, table row, list item (`-`, `*`, `+`, `•`, `1.`), heading,
//! blockquote or divider line when that line differs from the previous line,
//! so a 40-row table or 60 distinct list items never count, while a repeated
//! bullet still does; a line of letters/digits is never a divider. Text
//! inside a code fence is checked by the line ceiling only, so repetitive but
//! distinct code is fine. Windows with fewer than 8 distinct bytes (box
//! drawing, rules, runs of one character) are not hashed; there, low-entropy
//! chanting (issue #12 point 6: one answer repeating `Yes,` 200 times,
//! aider#1841; `nynyny…`, gemini-cli#5813) is a unit of 1 to 16 bytes
//! repeated back to back `low_entropy_repeats` (50) times over at least 200
//! bytes, when the unit holds two distinct bytes and a letter — not only hex
//! digits and `x`, not a data literal (`null`, `true`, `nan`, …) — so base64
//! padding, separator lines, zero-filled CSV or hex arrays, progress bars and
//! table rules never count. Lengths are bytes of
//! UTF-8, not characters. Answer text, reasoning text and each tool call's
//! argument text are separate channels.
//!
//! Files: this one the detector; `track` one channel (lines, structure);
//! `window` the rolling hash, winnowing and the index of selections;
//! `low_entropy` the back-to-back unit repeats.

mod low_entropy;
mod track;
mod window;

use std::collections::HashMap;

use super::settings::{ChantingParams, Settings};
use super::verdict::{Action, DetectorKind, Finding, Level, Verdict};
use crate::dialect::StreamEvent;
use track::Track;

/// Characters of the repeated text a verdict quotes.
const QUOTE_CHARS: usize = 50;

/// The repeated text as a verdict quotes it: credentials redacted (see
/// [`crate::redact`]) before it is cut to [`QUOTE_CHARS`]. A chant's sample
/// may begin and end anywhere in its repeated unit, cutting a credential in
/// two; the text that follows it is the same unit again, so the sample is
/// redacted followed by itself (the cut credential whole at the seam), and
/// when anything was redacted its first word (maybe the credential's tail)
/// is dropped too.
fn quote(text: &str) -> String {
    const MARK: &str = "[REDACTED]";
    let rough = crate::redact::truncate(text, QUOTE_CHARS * 2 + 256);
    let doubled = format!("{rough}{rough}");
    let redacted = crate::redact::redact(&doubled);
    if redacted == doubled {
        return crate::redact::truncate(&rough, QUOTE_CHARS);
    }
    // The first word may be the tail of a credential the sample began in.
    let first_word = redacted.find(char::is_whitespace).unwrap_or(redacted.len());
    let kept = match redacted.find(MARK) {
        Some(0) => redacted,
        Some(at) => format!("…{}", &redacted[first_word.min(at)..]),
        None => redacted,
    };
    crate::redact::truncate(&kept, QUOTE_CHARS)
}

const ADVICE: &str =
    "The response keeps repeating itself; stop, and answer once or make the tool call you need.";

/// Which text of a response a delta belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Channel {
    /// Answer text of a choice.
    Answer(u32),
    /// Reasoning text of a choice.
    Reasoning(u32),
    /// Argument text of a tool call (choice, index).
    ToolArguments(u32, u32),
}

/// Scans one response's text for chanting.
#[derive(Debug)]
pub struct ContentScanner {
    params: ChantingParams,
    enabled: bool,
    action: Action,
    /// One track per channel, found by hash: an answer with n parallel
    /// calls has n argument channels, so a scan per delta would be O(n²).
    channels: HashMap<Channel, Track>,
    verdict: Option<Verdict>,
}

impl ContentScanner {
    /// A scanner for one response.
    pub fn new(settings: &Settings) -> Self {
        let t = settings.thresholds(DetectorKind::ContentChanting);
        Self {
            params: settings.chanting,
            enabled: settings.enabled && t.enabled && t.get(Level::Critical) > 0,
            action: settings.action_for(DetectorKind::ContentChanting, Level::Critical),
            channels: HashMap::new(),
            verdict: None,
        }
    }

    /// Feeds a stream event; returns the verdict once chanting was seen (and
    /// on every later call: the condition holds for the rest of the response).
    pub fn observe(&mut self, event: &StreamEvent) -> Option<&Verdict> {
        match event {
            StreamEvent::TextDelta { choice, text } => self.feed(Channel::Answer(*choice), text),
            StreamEvent::ReasoningDelta { choice, text } => self.feed(Channel::Reasoning(*choice), text),
            StreamEvent::ToolCallDelta {
                choice,
                index,
                arguments_delta,
            } => self.feed(Channel::ToolArguments(*choice, *index), arguments_delta),
            StreamEvent::ToolCallComplete { choice, index, .. } => {
                // A complete call's arguments get no more text (every dialect
                // numbers a response's calls apart): its track goes, so a
                // whole answer of n calls holds one track at a time, not n.
                self.channels.remove(&Channel::ToolArguments(*choice, *index));
                self.verdict.as_ref()
            }
            _ => self.verdict.as_ref(),
        }
    }

    /// Feeds text of one channel.
    pub fn feed(&mut self, channel: Channel, text: &str) -> Option<&Verdict> {
        if !self.enabled || self.verdict.is_some() {
            return self.verdict.as_ref();
        }
        let params = &self.params;
        let track = self.channels.entry(channel).or_insert_with(|| Track::new(params));
        if let Some((count, sample)) = track.push(text, &self.params) {
            let finding = Finding {
                detector: DetectorKind::ContentChanting,
                level: Level::Critical,
                count: u32::try_from(count).unwrap_or(u32::MAX),
                tool: None,
                arguments: None,
                detail: format!("the response repeats the same text {count} times (\"{sample}\")"),
                advice: ADVICE,
                observe_only: false,
            };
            self.verdict = Some(finding.with_action(self.action));
        }
        self.verdict.as_ref()
    }

    /// The verdict, once chanting was seen.
    pub fn verdict(&self) -> Option<&Verdict> {
        self.verdict.as_ref()
    }

    /// Channels tracked now (answer, reasoning, and tool calls not complete yet).
    pub fn channels(&self) -> usize {
        self.channels.len()
    }

    /// Heap bytes held (estimate).
    pub fn heap_size(&self) -> usize {
        self.channels.values().map(Track::heap_size).sum()
    }
}
