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
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                if let Some(v) = map.get(key) {
                    write_canonical(v, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
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
}
