//! Tool-call signatures: name + canonical arguments, hashed with SHA-256.

use std::fmt;

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::Arguments;

/// SHA-256 of a tool call's name and canonical arguments.
///
/// Canonical means: object keys sorted recursively, values as parsed, no
/// insignificant whitespace (see [`canonical_json`]). Unparsable arguments are
/// hashed as their raw text. Call ids never take part, so two calls that
/// differ only by id have the same signature.
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Signature(pub [u8; 32]);

impl Signature {
    /// Computes the signature of a call.
    pub fn of(name: &str, arguments: &Arguments) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(name.as_bytes());
        // A separator that cannot occur in a tool name keeps `ab` + `c` apart from `a` + `bc`.
        hasher.update([0u8]);
        match arguments {
            Arguments::Json(value) => {
                hasher.update(b"j");
                hasher.update(canonical_json(value).as_bytes());
            }
            Arguments::Unparsable(text) => {
                hasher.update(b"r");
                hasher.update(text.as_bytes());
            }
        }
        Self(hasher.finalize().into())
    }

    /// The first 8 bytes as lowercase hex, for logs and admin output.
    pub fn short(&self) -> String {
        self.0[..8].iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Signature({})", self.short())
    }
}

/// Serialises a JSON value with object keys sorted recursively and no
/// insignificant whitespace. Numbers and strings are written as
/// `serde_json` writes them, so `1.0` and `1` stay distinct.
pub fn canonical_json(value: &Value) -> String {
    canonical_json_prefix(value, usize::MAX)
}

/// The first `max` bytes of [`canonical_json`] (fewer when the cut would
/// split a character), written without serialising the rest: bounded work
/// for a preview of huge arguments.
pub fn canonical_json_prefix(value: &Value, max: usize) -> String {
    let mut out = Vec::with_capacity(max.min(128));
    write_canonical(value, &mut out, max);
    if out.len() > max {
        let mut cut = max;
        // Back to a character boundary (UTF-8 continuation bytes are 0b10xxxxxx).
        while cut > 0 && out.get(cut).is_some_and(|b| b & 0xc0 == 0x80) {
            cut -= 1;
        }
        out.truncate(cut);
    }
    // serde_json writes UTF-8 only, and the cut is at a boundary.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Writes `value` canonically: keys sorted, each key and scalar as
/// `serde_json`'s compact writer writes it (no `Display` round trip, no
/// per-key allocation beyond the sort). Stops soon after `out` passes
/// `max` bytes.
fn write_canonical(value: &Value, out: &mut Vec<u8>, max: usize) {
    if out.len() > max {
        return;
    }
    match value {
        Value::Object(map) => {
            out.push(b'{');
            // Maps keep their insertion order (serde_json's
            // `preserve_order`): keys already in order are written as they
            // are, others through a sorted list of the entries.
            if map.keys().is_sorted() {
                write_entries(map.iter(), out, max);
            } else {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                write_entries(entries.into_iter(), out, max);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if out.len() > max {
                    return;
                }
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out, max);
            }
            out.push(b']');
        }
        Value::String(s) => write_scalar(s.as_str(), out, max),
        other => {
            let _ = serde_json::to_writer(&mut *out, other);
        }
    }
}

/// An object's entries, in the order given, as [`write_canonical`] writes them.
fn write_entries<'v>(entries: impl Iterator<Item = (&'v String, &'v Value)>, out: &mut Vec<u8>, max: usize) {
    for (i, (key, v)) in entries.enumerate() {
        if out.len() > max {
            return;
        }
        if i > 0 {
            out.push(b',');
        }
        write_scalar(key.as_str(), out, max);
        out.push(b':');
        write_canonical(v, out, max);
    }
}

/// A string as `serde_json` writes it; past `max`, only as much of it as
/// reaches `max` (its escaped form is a prefix of the whole one's, plus a
/// closing quote that the final cut removes). Writing to a `Vec` cannot fail.
fn write_scalar(text: &str, out: &mut Vec<u8>, max: usize) {
    let room = max.saturating_sub(out.len()).saturating_add(1);
    let text = if text.len() > room {
        let mut cut = room;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        &text[..cut]
    } else {
        text
    };
    let _ = serde_json::to_writer(&mut *out, text);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_and_whitespace_do_not_change_the_signature() {
        let a = Arguments::from_json_str(r#"{"b": 1, "a": {"y": [1, 2], "x": "s"}}"#);
        let b = Arguments::from_json_str(r#"{"a":{"x":"s","y":[1,2]},"b":1}"#);
        assert_eq!(Signature::of("read", &a), Signature::of("read", &b));
    }

    #[test]
    fn name_and_values_change_the_signature() {
        let a = Arguments::Json(json!({"path": "a.txt"}));
        let b = Arguments::Json(json!({"path": "b.txt"}));
        assert_ne!(Signature::of("read", &a), Signature::of("read", &b));
        assert_ne!(Signature::of("read", &a), Signature::of("write", &a));
    }

    #[test]
    fn unparsable_arguments_hash_as_raw_text() {
        let raw = Arguments::from_json_str("{not json");
        assert!(matches!(raw, Arguments::Unparsable(_)));
        assert_eq!(
            Signature::of("x", &raw),
            Signature::of("x", &Arguments::from_json_str("{not json"))
        );
        assert_ne!(
            Signature::of("x", &raw),
            Signature::of("x", &Arguments::from_json_str("{not json "))
        );
    }

    #[test]
    fn canonical_json_sorts_nested_keys() {
        let value = json!({"z": {"b": 1, "a": 2}, "a": [ {"d": 1, "c": 2} ]});
        assert_eq!(
            canonical_json(&value),
            r#"{"a":[{"c":2,"d":1}],"z":{"a":2,"b":1}}"#
        );
    }

    #[test]
    fn canonical_json_writes_keys_and_scalars_as_serde_json_does() {
        // Signatures are stored (shared state, recordings): the canonical
        // text must stay byte for byte what serde_json's compact writer
        // gives for the key-sorted value.
        let value = json!({
            "q\"uote\\": "tab\t nl\n ctl\u{1} é 😀 </script>",
            "n": [0, -0.0, 1.5, 1e300, u64::MAX, i64::MIN, null, true, false],
            "": {"": ""}
        });
        let mut sorted: Vec<(&String, &Value)> =
            value.as_object().map(|m| m.iter().collect()).unwrap_or_default();
        sorted.sort_by(|a, b| a.0.cmp(b.0));
        let expected = format!(
            "{{{}}}",
            sorted
                .iter()
                .map(|(k, v)| format!("{}:{}", Value::String((*k).clone()), v))
                .collect::<Vec<_>>()
                .join(",")
        );
        assert_eq!(canonical_json(&value), expected);
    }

    #[test]
    fn a_prefix_is_the_start_of_the_whole_canonical_text() {
        let value =
            json!({"k": "é😀".repeat(50), "a": [1, {"z": "x\ny", "b": null}], "long": "q".repeat(300)});
        let whole = canonical_json(&value);
        for max in [
            0,
            1,
            5,
            7,
            8,
            9,
            10,
            33,
            100,
            101,
            102,
            103,
            250,
            1000,
            usize::MAX,
        ] {
            let prefix = canonical_json_prefix(&value, max);
            assert!(whole.starts_with(&prefix), "{max}: {prefix}");
            assert!(
                prefix.len() <= max && prefix.len() + 4 > max.min(whole.len()),
                "{max}: {}",
                prefix.len()
            );
        }
    }
}
