//! Path normalisation before routing: the path loopguard routes, judges and
//! forwards is the one the upstream will act on.
//!
//! Percent-encoded unreserved characters (RFC 3986 §2.3: `A-Z a-z 0-9 - . _ ~`)
//! and `:` are decoded (equivalent spellings, RFC 3986 §6.2.2.2; `:` so that
//! `g%3AgenerateContent` is the Gemini method it names). Then the path is
//! refused when it has a `.` or `..` segment (raw or decoded: `%2e%2e`,
//! `.%2e`), a backslash (raw or `%5C`: URL libraries read it as `/`), or an
//! encoded slash `%2F` (servers disagree on whether it separates segments).
//! Every other escape is kept as sent.

use std::borrow::Cow;

/// Why a path is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// A `.` or `..` segment, after decoding.
    DotSegment,
    /// A backslash, raw or encoded.
    Backslash,
    /// An encoded slash (`%2F`).
    EncodedSlash,
}

impl Refused {
    /// What is wrong, for the error message.
    pub fn describe(self) -> &'static str {
        match self {
            Self::DotSegment => "'.' or '..' segments (also when percent-encoded)",
            Self::Backslash => "a backslash (raw or %5C)",
            Self::EncodedSlash => "an encoded slash (%2F)",
        }
    }
}

/// The normalised path, or why it is refused. A path with nothing to decode
/// is returned borrowed.
///
/// # Errors
/// [`Refused`] for dot segments, backslashes and encoded slashes.
pub fn normalise(path: &str) -> Result<Cow<'_, str>, Refused> {
    if path.contains('\\') {
        return Err(Refused::Backslash);
    }
    let out = if path.contains('%') {
        Cow::Owned(decode_unreserved(path)?)
    } else {
        Cow::Borrowed(path)
    };
    if out.split('/').any(|segment| segment == "." || segment == "..") {
        return Err(Refused::DotSegment);
    }
    Ok(out)
}

fn decode_unreserved(path: &str) -> Result<String, Refused> {
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(b'/') => return Err(Refused::EncodedSlash),
            Some(b'\\') => return Err(Refused::Backslash),
            Some(c) if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~' | b':') => {
                out.push(char::from(c));
                i += 3;
            }
            _ => {
                // Not an escape to decode: copy one whole character.
                let ch = path[i..].chars().next().unwrap_or('%');
                out.push(ch);
                i += ch.len_utf8();
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_segments_in_every_spelling_are_refused() {
        for path in [
            "/v1/../secret",
            "/v1/./chat/completions",
            "/evil/%2e%2e/secret",
            "/evil/.%2e/secret",
            "/evil/%2E./secret",
            "/v1/chat/completions/%2e",
            "/v1/chat/completions/%2E%2e",
        ] {
            assert_eq!(normalise(path), Err(Refused::DotSegment), "{path}");
        }
        assert_eq!(normalise("/evil/\\..\\secret"), Err(Refused::Backslash));
        assert_eq!(normalise("/evil/%5c..%5csecret"), Err(Refused::Backslash));
        assert_eq!(normalise("/v1/chat%2fcompletions"), Err(Refused::EncodedSlash));
        assert_eq!(normalise("/v1/chat%2Fcompletions"), Err(Refused::EncodedSlash));
    }

    #[test]
    fn encoded_unreserved_characters_and_colons_are_decoded() {
        assert_eq!(
            normalise("/v1beta/models/g%3AgenerateContent").as_deref(),
            Ok("/v1beta/models/g:generateContent")
        );
        assert_eq!(
            normalise("/v1/chat/%63ompletions").as_deref(),
            Ok("/v1/chat/completions")
        );
    }

    #[test]
    fn legitimate_paths_are_left_alone() {
        for path in [
            "/v1/chat/completions",
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
            "/v1/files/file-abc..def",
            "/v1/files/.hidden",
            "/v1/files/a%20b",
            "/v1/files/%zz",
            "/v1/files/100%",
            "/v1/files/é",
        ] {
            assert_eq!(normalise(path).as_deref(), Ok(path), "{path}");
        }
        assert!(matches!(normalise("/v1/chat/completions"), Ok(Cow::Borrowed(_))));
    }
}
