//! The identity fields of a response that loopguard's own events repeat.

use serde_json::Value;

/// Identity fields of the response, read from its first payload that has
/// any, that loopguard's own events must repeat (OpenAI chat chunk `id`,
/// `model`, `created`; Gemini `modelVersion`). The parsers of those two
/// dialects read it from the payload they parse anyway
/// ([`crate::dialect::StreamParser::meta`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Meta {
    /// OpenAI chunk id.
    pub id: Option<String>,
    /// OpenAI model.
    pub model: Option<String>,
    /// OpenAI creation time (Unix seconds).
    pub created: Option<u64>,
    /// Gemini model version.
    pub model_version: Option<String>,
}

impl Meta {
    /// The identity fields of one payload: `None` unless it is an object
    /// with at least one of them, or when one has the wrong type (a
    /// non-string id, a `created` that is not a whole number of seconds;
    /// `null` counts as absent).
    pub fn of(payload: &serde_json::Map<String, Value>) -> Option<Self> {
        fn text(payload: &serde_json::Map<String, Value>, key: &str) -> Result<Option<String>, ()> {
            match payload.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(()),
            }
        }
        let created = match payload.get("created") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_u64()?),
        };
        Self {
            id: text(payload, "id").ok()?,
            model: text(payload, "model").ok()?,
            created,
            model_version: text(payload, "modelVersion").ok()?,
        }
        .any()
    }

    /// `None` when no field is set: a payload without identity has none.
    pub fn any(self) -> Option<Self> {
        (self != Self::default()).then_some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(json: &str) -> Option<Meta> {
        match serde_json::from_str(json) {
            Ok(Value::Object(map)) => Meta::of(&map),
            _ => None,
        }
    }

    #[test]
    fn identity_fields_are_read_and_their_absence_is_none() {
        assert_eq!(
            meta(r#"{"id":"c1","model":"m","created":7,"choices":[]}"#),
            Some(Meta {
                id: Some("c1".into()),
                model: Some("m".into()),
                created: Some(7),
                model_version: None,
            })
        );
        assert_eq!(
            meta(r#"{"candidates":[],"modelVersion":"g-2"}"#).and_then(|m| m.model_version),
            Some("g-2".into())
        );
        assert_eq!(meta(r#"{"choices":[],"id":null}"#), None);
    }

    #[test]
    fn a_field_of_the_wrong_type_gives_no_identity() {
        assert_eq!(meta(r#"{"id":7,"model":"m"}"#), None);
        assert_eq!(meta(r#"{"id":"c","created":1.5}"#), None);
    }
}
