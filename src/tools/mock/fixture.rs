//! Recorded fixtures served by the mock: read from the fixtures directory,
//! split into SSE events, and re-framed as a JSON array when asked.

use std::path::{Component, Path, PathBuf};

/// Reads `name` (e.g. `gemini/text.sse`) below `root`, refusing paths that
/// leave it.
///
/// # Errors
/// A message naming the file when it cannot be read or escapes the root.
pub fn read(root: &Path, name: &str) -> Result<Vec<u8>, String> {
    let rel = Path::new(name);
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(format!(
            "fixture name {name:?} must be a relative path inside the fixtures directory"
        ));
    }
    let path: PathBuf = root.join(rel);
    std::fs::read(&path).map_err(|e| format!("cannot read fixture {}: {e}", path.display()))
}

/// Splits an SSE body into its events, each with its terminating blank line,
/// byte for byte (LF or CRLF framing).
pub fn sse_events(body: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < body.len() {
        let rest = &body[i..];
        let sep = if rest.starts_with(b"\r\n\r\n") {
            4
        } else if rest.starts_with(b"\n\n") {
            2
        } else {
            0
        };
        if sep > 0 {
            out.push(body[start..i + sep].to_vec());
            i += sep;
            start = i;
        } else {
            i += 1;
        }
    }
    if start < body.len() {
        out.push(body[start..].to_vec());
    }
    out
}

/// The `data:` payloads of an SSE body, in order.
pub fn sse_payloads(body: &[u8]) -> Vec<String> {
    sse_events(body)
        .iter()
        .filter_map(|event| {
            let text = String::from_utf8_lossy(event);
            let data: Vec<&str> = text
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            (!data.is_empty()).then(|| data.join("\n"))
        })
        .collect()
}

/// Re-frames payloads as Gemini's streamed JSON array: `[` first element,
/// then `,\r\n` + each further element, then `]`, one piece per element so
/// the array streams element by element.
pub fn json_array_pieces(payloads: &[String]) -> Vec<Vec<u8>> {
    let mut out = Vec::with_capacity(payloads.len() + 1);
    for (i, p) in payloads.iter().enumerate() {
        let lead = if i == 0 { "[" } else { ",\r\n" };
        out.push(format!("{lead}{p}").into_bytes());
    }
    if payloads.is_empty() {
        out.push(b"[".to_vec());
    }
    out.push(b"]".to_vec());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_keep_every_byte() {
        let body = b"data: {\"a\":1}\r\n\r\ndata: {\"b\":2}\n\n: comment\n\ndata: tail";
        let events = sse_events(body);
        assert_eq!(events.concat(), body.to_vec());
        assert_eq!(events.len(), 4);
        assert_eq!(sse_payloads(body), vec!["{\"a\":1}", "{\"b\":2}", "tail"]);
    }

    #[test]
    fn array_pieces_form_a_json_array() {
        let pieces = json_array_pieces(&["{\"a\":1}".to_owned(), "{\"b\":2}".to_owned()]);
        let text = String::from_utf8(pieces.concat()).unwrap_or_else(|e| panic!("{e}"));
        let value: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(value.as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn names_cannot_leave_the_root() {
        assert!(read(Path::new("/tmp"), "../etc/passwd").is_err());
        assert!(read(Path::new("/tmp"), "/etc/passwd").is_err());
    }
}
