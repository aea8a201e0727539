//! Steps: what the detectors count, extracted from a request's transcript.
//!
//! A request's history becomes a list of [`Item`]s in order: tool cycles (a
//! call with the result the same request carries for it), assistant text
//! turns without calls, and user texts. The session ([`super::session`])
//! aligns these items with what it already absorbed and turns the new ones
//! into [`Step`]s. Calls with no result anywhere in the request are not
//! cycles (their outcome is unknown); exempt tools produce nothing at all.

mod known;
mod results;
mod user;

use std::time::Duration;

use super::json_volatile;
use super::outcome::{Outcome, hash64, hash64_parts, outcome_for};
use super::settings::Settings;
use crate::transcript::{
    Arguments, CallHashes, Lineage, Message, ResultContent, Role, Signature, ToolCall, ToolResult,
    Transcript, canonical_json_prefix,
};

/// Longest argument preview kept per cycle, in characters.
pub(crate) const ARGS_PREVIEW: usize = 120;

/// One tool call with its outcome (unknown while the call is pending).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Cycle {
    pub name: String,
    pub args: String,
    /// The call's identity (see [`super::identity`]), not its raw signature.
    pub signature: Signature,
    pub outcome: Option<Outcome>,
    /// The call's spelling-free key ([`super::identity::loose`]), for
    /// `novelty`'s "a different target" (0 in state stored before it).
    #[serde(default)]
    pub loose: u64,
    pub unparsable: bool,
    pub unknown_tool: bool,
    pub poll: bool,
}

impl Cycle {
    /// A cycle for `call`, judged against the declared `tools`.
    /// The cycle failed: its arguments did not parse or its result is an
    /// error (the live page marks it).
    pub(crate) fn failed(&self) -> bool {
        self.unparsable || self.outcome.is_some_and(|o| o.is_error)
    }

    pub(crate) fn of(call: &ToolCall, outcome: Option<Outcome>, tools: &[String], s: &Settings) -> Self {
        Self {
            name: call.name.clone(),
            args: preview(&call.arguments),
            signature: super::identity::of(call, s),
            outcome,
            // Only `novelty` reads it, and only for a cycle with a result.
            loose: if outcome.is_some() {
                super::identity::loose(call, s)
            } else {
                0
            },
            unparsable: matches!(call.arguments, Arguments::Unparsable(_)),
            unknown_tool: !call.server && !tools.is_empty() && !tools.contains(&call.name),
            poll: s.is_poll(&call.name, &call.arguments) || s.is_wait(&call.arguments),
        }
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
    /// A user text seen before that is no canned reminder: a text-protocol
    /// agent's repeated terminal screen (hash of its own text). Neither the
    /// person nor a failure.
    Screen(u64),
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

pub(crate) use crate::transcript::UserText;
pub(crate) use known::{Kind, Known};
use results::Results;
pub(crate) use user::{classify_user, own_text};
use user::{user_patterns, user_read};

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
        /// Hash of the call id, when the dialect carries one: the identity
        /// that survives rewrites of the call's arguments or result.
        ident: Option<u64>,
        /// Hash of the tool name (the item's shape, see [`Item::shape`]).
        shape: u64,
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

    /// What survives an agent's rewrite of an old item (clipped text, a
    /// placeholder result): its kind, and for a cycle its tool.
    pub(crate) fn shape(&self) -> u64 {
        match self {
            Self::User { .. } => 1,
            Self::Said { .. } => 2,
            Self::Cycle { shape, .. } => *shape,
        }
    }
}

/// What alignment sees of a request's items, in order.
pub(crate) struct Keys<'a> {
    /// Merge keys ([`Item::key`]).
    pub keys: &'a [u64],
    /// Call-id hashes ([`Item::ident`]).
    pub idents: &'a [Option<u64>],
    /// Shapes ([`Item::shape`]).
    pub shapes: &'a [u64],
}

/// Canonical arguments, credentials redacted, truncated for reading: what
/// verdict messages, log lines and the admin API show of a call.
pub(crate) fn preview(arguments: &Arguments) -> String {
    // `clip` reads at most max(2 × 120, 120 + 256) characters of 4 bytes at
    // most: this start of the canonical text is all it needs.
    const READ: usize = 4 * (2 * ARGS_PREVIEW + 256);
    match arguments {
        Arguments::Json(v) => crate::redact::clip(&canonical_json_prefix(v, READ), ARGS_PREVIEW),
        Arguments::Unparsable(raw) => crate::redact::clip(raw, ARGS_PREVIEW),
    }
}

/// What detection hashes of `call` alone, computed once per call and kept
/// with it (see [`CallHashes`]); debug builds (the tests) check the kept
/// hashes against the call as it is now.
fn hashes(call: &ToolCall) -> &CallHashes {
    let of = |call: &ToolCall| CallHashes {
        merge: call
            .id
            .as_ref()
            .map(|id| hash64_parts(&[b"id:", id.as_bytes(), &call.signature.0])),
        ident: call.id.as_ref().map(|id| hash64(id.as_bytes())),
        shape: shape_of(&call.name),
    };
    let kept = call.hashes.get_or_init(|| of(call));
    debug_assert_eq!(*kept, of(call), "a call changed after detection kept its hashes");
    kept
}

/// The merge key of a cycle: call id + signature, else signature + outcome
/// (computed only then: a call with an id needs no outcome to be aligned).
fn cycle_key(call: &ToolCall, outcome: impl FnOnce() -> Outcome) -> (u64, Option<Outcome>) {
    match hashes(call).merge {
        Some(key) => (key, None),
        None => {
            let outcome = outcome();
            let key = hash64_parts(&[&call.signature.0, &outcome.hash.to_le_bytes()]);
            (key, Some(outcome))
        }
    }
}

/// A cycle found in the request, not yet turned into a [`Cycle`].
struct Found<'t> {
    key: u64,
    ident: Option<u64>,
    /// The call's shape ([`shape_of`] its name).
    shape: u64,
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

    fn ident(&self) -> Option<u64> {
        match self {
            Self::Item(_) => None,
            Self::Cycle(found) => found.ident,
        }
    }

    fn shape(&self) -> u64 {
        match self {
            Self::Item(item) => item.shape(),
            Self::Cycle(found) => found.shape,
        }
    }

    fn kind(&self) -> Kind {
        match self {
            Self::Item(Item::User { text, .. }) => Kind::User(*text),
            Self::Item(Item::Said { .. }) => Kind::Said,
            Self::Item(Item::Cycle { .. }) | Self::Cycle(_) => Kind::Cycle,
        }
    }
}

fn shape_of(name: &str) -> u64 {
    hash64(name.as_bytes()) | 4
}

/// A request's items as absorbing reads them (see [`extract`]): every
/// item's keys, shape and kind, and from `first_fresh` on the items
/// themselves (the ones before were read from the lane's previous request,
/// [`Known`]), cycles materialised from `start`, the alignment point, on.
pub(crate) struct Extracted {
    pub keys: Vec<u64>,
    pub idents: Vec<Option<u64>>,
    pub shapes: Vec<u64>,
    pub kinds: Vec<Kind>,
    /// Items `first_fresh..`, in order.
    pub fresh: Vec<Item>,
    pub first_fresh: usize,
    /// The first item not absorbed yet (at least `first_fresh`).
    pub start: usize,
    /// What the next request of the same turns may take unread: the
    /// messages before this index, which made the first `next.1` items.
    next: (usize, usize),
    lineage: Lineage,
    patterns: u64,
}

impl Extracted {
    /// The items the next request with the same turns takes unread (see
    /// [`Known`]); nothing when the turns are no kept chain's.
    pub(crate) fn into_known(self) -> Known {
        let (messages, count) = self.next;
        if !self.lineage.is_some() || count > Known::MAX_ITEMS {
            return Known::default();
        }
        let mut known = Known {
            lineage: self.lineage,
            patterns: self.patterns,
            messages,
            keys: self.keys,
            idents: self.idents,
            shapes: self.shapes,
            kinds: self.kinds,
        };
        known.keys.truncate(count);
        known.idents.truncate(count);
        known.shapes.truncate(count);
        known.kinds.truncate(count);
        known
    }
}

/// Extracts the items of a request, in order, and the alignment point that
/// `align` finds from their merge keys. Cycles before that point are already
/// known to the session and never judged again, so their outcomes are not
/// computed (no normalisation, no SHA-256) unless their key needs one (a
/// call without an id): the cost of a request follows what is new in it.
///
/// The items of the messages `known` read from the lane's previous request
/// are taken as read then, when this request has the same turns
/// ([`Lineage`]) and user-text patterns: a long conversation's turn drafts
/// its last turns only. When the alignment point falls among them (the
/// session's previous request was another one), every item is drafted
/// again and aligned once more.
pub(crate) fn extract(
    transcript: &Transcript,
    s: &Settings,
    mut known: Known,
    mut align: impl FnMut(&Keys) -> usize,
) -> Extracted {
    let patterns = user_patterns(s);
    if !known.reusable(transcript, patterns) {
        known.clear();
    }
    extract_from(transcript, s, known, patterns, &mut align)
}

/// [`extract`] with the items of `known` taken as read (all of them drafted
/// again when the alignment point falls among them). The request's items
/// are appended to `known`'s vectors: the known part is not copied.
fn extract_from(
    transcript: &Transcript,
    s: &Settings,
    known: Known,
    patterns: u64,
    align: &mut impl FnMut(&Keys) -> usize,
) -> Extracted {
    let from = known.messages;
    let (drafts, next) = drafts(transcript, s, from, patterns);
    let first_fresh = known.keys.len();
    let next = (next.0, first_fresh + next.1);
    let Known {
        mut keys,
        mut idents,
        mut shapes,
        mut kinds,
        ..
    } = known;
    keys.extend(drafts.iter().map(Draft::key));
    shapes.extend(drafts.iter().map(Draft::shape));
    idents.extend(drafts.iter().map(Draft::ident));
    kinds.extend(drafts.iter().map(Draft::kind));
    let start = align(&Keys {
        keys: &keys,
        idents: &idents,
        shapes: &shapes,
    });
    if start < first_fresh {
        let mut nothing = Known {
            keys,
            idents,
            shapes,
            kinds,
            ..Known::default()
        };
        nothing.clear();
        return extract_from(transcript, s, nothing, patterns, align);
    }
    let earlier = &transcript.messages[..from];
    let previous: Vec<Option<&ToolResult>> = (start - first_fresh..drafts.len())
        .map(|j| previous_result(&drafts, j, transcript, earlier, s))
        .collect();
    let fresh = drafts
        .into_iter()
        .enumerate()
        .map(|(j, draft)| match draft {
            Draft::Item(item) => item,
            Draft::Cycle(found) => Item::Cycle {
                key: found.key,
                ident: found.ident,
                shape: found.shape,
                cycle: (first_fresh + j >= start).then(|| {
                    let mut outcome = found
                        .outcome
                        .unwrap_or_else(|| outcome_for(found.result, Some(found.call), s));
                    let at = first_fresh + j - start;
                    if let Some(previous) = previous.get(at).copied().flatten() {
                        outcome = json_volatile::successive(outcome, previous, found.result, s);
                    }
                    Cycle::of(found.call, Some(outcome), &transcript.tools, s)
                }),
                turn_start: found.turn_start,
            },
        })
        .collect();
    Extracted {
        keys,
        idents,
        shapes,
        kinds,
        fresh,
        first_fresh,
        start,
        next,
        lineage: transcript.lineage,
        patterns,
    }
}

/// The previous result of the call of draft `j`, for a JSON result
/// (`json_volatile`): the result of the latest earlier cycle of the same
/// tool, when that call has the same identity or spelling-free key. The
/// cycles before the drafts are those of the `earlier` messages.
fn previous_result<'t>(
    drafts: &[Draft<'t>],
    j: usize,
    transcript: &'t Transcript,
    earlier: &'t [Message],
    s: &Settings,
) -> Option<&'t ToolResult> {
    let Some(Draft::Cycle(found)) = drafts.get(j) else {
        return None;
    };
    let json = match &found.result.content {
        ResultContent::Json(_) => true,
        ResultContent::Text(text) => text.trim_start().starts_with(['{', '[']),
    };
    if !json {
        return None;
    }
    let name = found.call.name.as_str();
    let before = drafts[..j]
        .iter()
        .rev()
        .find_map(|d| match d {
            Draft::Cycle(f) if f.call.name == name => Some((f.call, f.result)),
            _ => None,
        })
        .or_else(|| latest_cycle(transcript, earlier.len(), name, s))?;
    // The same call, or a respelling of it (a cache buster in the URL).
    let same = before.0.signature == found.call.signature
        || super::identity::of(before.0, s) == super::identity::of(found.call, s)
        || super::identity::loose(before.0, s) == super::identity::loose(found.call, s);
    same.then_some(before.1)
}

/// The call and result of the latest cycle of tool `name` drafted from the
/// transcript's messages before `end` (the ones [`Known`] read unread).
fn latest_cycle<'t>(
    transcript: &'t Transcript,
    end: usize,
    name: &str,
    s: &Settings,
) -> Option<(&'t ToolCall, &'t ToolResult)> {
    let messages = &transcript.messages;
    let mut results = Results::new();
    let mut drafts = Vec::new();
    (0..end).rev().find_map(|i| {
        let message = &messages[i];
        if message.role != Role::Assistant || !message.tool_calls.iter().any(|c| c.name == name) {
            return None;
        }
        drafts.clear();
        push_cycles(message, &messages[i + 1..], s, &mut results, &mut drafts);
        drafts.iter().rev().find_map(|d| match d {
            Draft::Cycle(f) if f.call.name == name => Some((f.call, f.result)),
            _ => None,
        })
    })
}

/// The drafts of the messages from `from` on, and what the next request of
/// the same turns may take unread: the messages before the last assistant
/// turn (whose results may still grow) and before the last message (which
/// a part may still join), and how many of the drafts they made.
fn drafts<'t>(
    transcript: &'t Transcript,
    s: &Settings,
    from: usize,
    patterns: u64,
) -> (Vec<Draft<'t>>, (usize, usize)) {
    let messages = &transcript.messages;
    let mut items = Vec::with_capacity(messages.len().saturating_sub(from));
    let mut results = Results::new();
    let stable = messages
        .iter()
        .rposition(|m| m.role == Role::Assistant)
        .unwrap_or(messages.len().saturating_sub(1));
    let mut next = None;
    for (i, message) in messages.iter().enumerate().skip(from) {
        if i == stable {
            next = Some((stable, items.len()));
        }
        match message.role {
            Role::Assistant if message.tool_calls.is_empty() => {
                let text = message.text.trim();
                if !text.is_empty() {
                    items.push(Draft::Item(Item::Said {
                        key: hash64(text.as_bytes()) ^ 0x5a1d,
                    }));
                }
            }
            Role::Assistant => push_cycles(message, &messages[i + 1..], s, &mut results, &mut items),
            Role::User => {
                if message.text.trim().is_empty() {
                    continue;
                }
                let read = user_read(message, s, patterns);
                items.push(Draft::Item(Item::User {
                    key: read.key,
                    text: read.text,
                }));
            }
            Role::Tool | Role::System => {}
        }
    }
    // Nothing drafted here is stable (an empty history, or the stable part
    // all known already): the next request takes what this one took.
    let next = next.unwrap_or(if stable < from {
        (from, 0)
    } else {
        (messages.len().min(from), items.len())
    });
    (items, next)
}

fn push_cycles<'t>(
    message: &'t Message,
    rest: &'t [Message],
    s: &Settings,
    results: &mut Results<'t>,
    items: &mut Vec<Draft<'t>>,
) {
    // A server-side call's result is in its own turn; a client call's in the
    // turns after it.
    results.refill(
        message.tool_results.iter().chain(
            rest.iter()
                .take_while(|m| m.role != Role::Assistant)
                .flat_map(|m| m.tool_results.iter()),
        ),
    );
    let mut turn_start = true;
    for (position, call) in message.tool_calls.iter().enumerate() {
        let Some(result) = results.take(call, position) else {
            continue;
        };
        if s.is_exempt(&call.name, &call.arguments) {
            continue;
        }
        let (key, outcome) = cycle_key(call, || outcome_for(result, Some(call), s));
        items.push(Draft::Cycle(Found {
            key,
            ident: hashes(call).ident,
            shape: hashes(call).shape,
            call,
            result,
            outcome,
            turn_start,
        }));
        turn_start = false;
    }
}

#[cfg(test)]
#[path = "step_tests.rs"]
mod step_tests;
