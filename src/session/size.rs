//! What a parsed history item weighs: its estimated heap size, for the
//! chain store's budget ([`super::chain`]) and the parse budget
//! ([`crate::budget`]), the lean and sliced forms' included.

use serde_json::Value;

use crate::dialect::HistoryItem;
use crate::transcript::{Arguments, Message, ResultContent, ToolCall, ToolResult};

/// Bytes counted per item on top of its raw JSON: the parsed message's
/// structure, its hash, its weight and its entry in the store's index.
pub const ITEM_OVERHEAD: usize = 256;

/// Bytes a parsed item holds on the heap, estimated: its texts, and every
/// node of its JSON values (a parsed value can be many times its raw text:
/// `[0,0,…]` takes 2 bytes an element as text, 32 parsed).
pub(super) fn parsed_size(item: &HistoryItem) -> usize {
    item.messages()
        .iter()
        .map(|m| {
            let calls: usize = m
                .tool_calls
                .iter()
                .map(|c| {
                    size_of::<ToolCall>()
                        + c.name.len()
                        + c.id.as_ref().map_or(0, String::len)
                        + arguments_size(&c.arguments)
                        + c.digest.as_ref().map_or(0, |d| 64 + 8 * d.echo.len())
                })
                .sum();
            let results: usize = m
                .tool_results
                .iter()
                .map(|r| {
                    size_of::<ToolResult>()
                        + r.call_id.as_ref().map_or(0, String::len)
                        + r.name.as_ref().map_or(0, String::len)
                        + match &r.content {
                            ResultContent::Text(text) => text.len(),
                            ResultContent::Json(value) => value_size(value),
                        }
                })
                .sum();
            size_of::<Message>() + m.text.len() + calls + results
        })
        .sum::<usize>()
        + match item {
            HistoryItem::System(text) => text.len(),
            _ => 0,
        }
}

/// Heap bytes of a call's arguments (see [`value_size`]).
pub(super) fn arguments_size(arguments: &Arguments) -> usize {
    match arguments {
        Arguments::Json(value) => value_size(value),
        Arguments::Unparsable(text) => text.len(),
    }
}

/// Heap bytes of a JSON value: 32 per node, strings' bytes, and about 64 per
/// object entry (its key and map node).
fn value_size(value: &Value) -> usize {
    size_of::<Value>()
        + match value {
            Value::String(text) => text.len(),
            Value::Array(items) => items.iter().map(value_size).sum(),
            Value::Object(map) => map.iter().map(|(k, v)| 64 + k.len() + value_size(v)).sum(),
            _ => 0,
        }
}

/// What a parsed item weighs in a budget (see [`ITEM_OVERHEAD`]).
pub(super) fn weight(item: &HistoryItem) -> usize {
    parsed_size(item) + ITEM_OVERHEAD
}
