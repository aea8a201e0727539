//! The lean parse of one history item too large to parse whole (issue #13.3):
//! an assistant message carrying 100,000 parallel calls, a user message of as
//! many tool results. Its largest array (`tool_calls`, `content`, `parts`) is
//! parsed a slice at a time, each slice made lean ([`super::lean`]) at once,
//! so the parse holds one slice's tree, never the item's.
//!
//! Each slice is parsed by the dialect's own item parser as a copy of the
//! item holding only that slice of the array; the slices' turns are then
//! joined by role, in order (calls, results and texts appended). What the
//! item says outside the array (an OpenAI `content` beside its `tool_calls`)
//! comes from the first slice only. Two orders can differ from the whole
//! parse's, both inside one lean item: an Anthropic user message whose text
//! blocks all come before its first `tool_result` slice lists the user turn
//! first, and the texts of a long turn are cut per slice (the head and hash
//! of each slice's text, [`super::lean::TEXT_KEEP`]).

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::lean;
use crate::budget::{Reservation, estimate};
use crate::detect::Settings;
use crate::dialect::HistoryItem;
use crate::dialect::split::{SplitRequest, append_turn, split_object};
use crate::transcript::Message;

/// Fewest raw bytes in a slice (fewer only for the last).
pub const SLICE_MIN_BYTES: usize = 256 << 10;
/// Most slices an item is cut into (past [`SLICE_MIN_BYTES`] each): every
/// slice's parse reads the calls before it, so this bounds that reading to
/// this many passes over the item's calls.
pub const MAX_SLICES: usize = 32;
/// Longest string kept beside the array in the copies after the first (a
/// role, a type, a call id); longer ones, arrays and objects are left out.
const KEPT_SCALAR_BYTES: usize = 256;

/// The lean form of the history item `raw`, which follows `before` in
/// `split`'s history, parsed slice by slice within `budget`. On success the
/// budget keeps holding what the lean item weighs ([`super::chain`]'s
/// weight); `None` (and the budget as it was) when the item is not an
/// object with an array, is not a turn (a system text, a compaction), or
/// a slice or the lean item does not fit the budget.
pub fn lean_item(
    split: &SplitRequest<'_>,
    before: &mut Vec<HistoryItem>,
    raw: &RawValue,
    budget: &Reservation,
    settings: &Settings,
) -> Option<HistoryItem> {
    let held = budget.held();
    let item = parse_sliced(split, before, raw, budget, settings);
    match item {
        Some(item) if budget.hold(held + super::size::weight(&item)) => Some(item),
        _ => {
            budget.hold(held);
            None
        }
    }
}

fn parse_sliced(
    split: &SplitRequest<'_>,
    before: &mut Vec<HistoryItem>,
    raw: &RawValue,
    budget: &Reservation,
    settings: &Settings,
) -> Option<HistoryItem> {
    let key = largest_array(raw)?;
    let (envelope, elements) = split_object(raw.get().as_bytes(), &key).ok()?;
    // The envelope is held (parsed) for the whole item.
    let envelope_bytes = raw.get().len() - elements.iter().map(|e| e.get().len()).sum::<usize>();
    if !budget.grow(envelope_bytes.saturating_mul(2)) {
        return None;
    }
    let with = |envelope: &Map<String, Value>, slice: Vec<Value>| {
        let mut copy = envelope.clone();
        copy.insert(key.clone(), Value::Array(slice));
        Value::Object(copy)
    };
    // Whether the item's text is beside the array, not in it: then only the
    // first slice's copy carries it.
    let bare = split.parse_values(before, &[with(&envelope, Vec::new())]);
    let text_beside = match bare.first()? {
        HistoryItem::Message(_) | HistoryItem::Part(_) | HistoryItem::Messages(_) => bare
            .iter()
            .flat_map(HistoryItem::messages)
            .any(|m| !m.text.is_empty()),
        _ => return None,
    };
    let later = scalars(&envelope);
    let slice_bytes = (raw.get().len() / MAX_SLICES).max(SLICE_MIN_BYTES);
    let mut joined: Option<HistoryItem> = None;
    let mut at = 0;
    while at < elements.len() {
        let mut end = at;
        let mut bytes = 0;
        while let Some(element) = elements.get(end) {
            if end > at && bytes + element.get().len() > slice_bytes {
                break;
            }
            bytes += element.get().len();
            end += 1;
        }
        let guess: usize = elements[at..end]
            .iter()
            .map(|e| estimate(e.get().as_bytes()))
            .sum();
        if !budget.grow(guess) {
            return None;
        }
        let values = elements[at..end]
            .iter()
            .map(|e| serde_json::from_str::<Value>(e.get()))
            .collect::<Result<Vec<_>, _>>()
            .ok()?;
        let copy = with(if at == 0 { &envelope } else { &later }, values);
        // The turns joined so far come before this slice (a result names
        // the tool of a call made earlier in the same message).
        let mark = before.len();
        before.extend(joined.take());
        let parsed = split.parse_values(before, &[copy]);
        joined = before.drain(mark..).next();
        let part = lean::item(parsed.first()?, settings);
        drop(parsed);
        budget.shrink(guess);
        if !budget.grow(super::size::weight(&part)) {
            return None;
        }
        joined = Some(match joined {
            None => part,
            Some(mut item) => {
                join(&mut item, part, !text_beside);
                item
            }
        });
        at = end;
    }
    joined
}

/// The key of the item's largest array field.
fn largest_array(raw: &RawValue) -> Option<String> {
    let fields = <std::collections::HashMap<String, &RawValue>>::deserialize(
        &mut serde_json::Deserializer::from_str(raw.get()),
    )
    .ok()?;
    fields
        .into_iter()
        .filter(|(_, value)| value.get().starts_with('['))
        .max_by_key(|(_, value)| value.get().len())
        .map(|(key, _)| key)
}

/// The envelope's short scalars (ids, flags) and its `role` and `type`
/// whatever their length (they decide how the item parses), for the copies
/// after the first.
fn scalars(envelope: &Map<String, Value>) -> Map<String, Value> {
    envelope
        .iter()
        .filter(|(key, value)| match value {
            _ if matches!(key.as_str(), "role" | "type") => true,
            Value::String(text) => text.len() <= KEPT_SCALAR_BYTES,
            Value::Array(_) | Value::Object(_) => false,
            _ => true,
        })
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

/// Appends the turns of `part` to `item`'s turn of the same role (texts
/// joined by a newline when `with_text`, calls and results appended), or as
/// a turn of their own; empty turns are skipped.
fn join(item: &mut HistoryItem, part: HistoryItem, with_text: bool) {
    let (was_part, was_many) = (
        matches!(item, HistoryItem::Part(_)),
        matches!(item, HistoryItem::Messages(_)),
    );
    let mut turns: Vec<Message> = match std::mem::replace(item, HistoryItem::Compaction) {
        HistoryItem::Messages(turns) => turns,
        HistoryItem::Message(turn) | HistoryItem::Part(turn) => vec![turn],
        other => {
            *item = other;
            return;
        }
    };
    let parts = match part {
        HistoryItem::Messages(turns) => turns,
        HistoryItem::Message(turn) | HistoryItem::Part(turn) => vec![turn],
        _ => Vec::new(),
    };
    for mut next in parts {
        if !with_text {
            next.text.clear();
        }
        if next.text.is_empty() && next.tool_calls.is_empty() && next.tool_results.is_empty() {
            continue;
        }
        match turns.iter_mut().find(|t| t.role == next.role) {
            Some(turn) => append_turn(turn, next),
            None => turns.push(next),
        }
    }
    *item = match turns.len() {
        1 if was_part => HistoryItem::Part(turns.remove(0)),
        1 if !was_many => HistoryItem::Message(turns.remove(0)),
        _ => HistoryItem::Messages(turns),
    };
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "test")]
#[path = "slice_tests.rs"]
mod tests;
